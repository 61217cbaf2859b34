//! An admin API over a rate limiter, guarded by a bearer token: look a
//! client's state up, block it, unblock it, give it units back.
//!
//!     ADMIN_TOKEN=s3cret cargo run --example admin --features axum,tracing
//!     REDIS_URL=redis://127.0.0.1:6379/ ADMIN_TOKEN=s3cret cargo run --example admin --features axum,tracing
//!
//! `GET /` is limited to 5 requests per minute per client IP. Then:
//!
//!     curl -H 'authorization: Bearer s3cret' http://127.0.0.1:3000/admin/ips/127.0.0.1
//!     curl -X POST -H 'authorization: Bearer s3cret' 'http://127.0.0.1:3000/admin/ips/127.0.0.1/block?seconds=60'
//!     curl -i http://127.0.0.1:3000/        # 429 while blocked
//!     curl -X POST -H 'authorization: Bearer s3cret' http://127.0.0.1:3000/admin/ips/127.0.0.1/unblock
//!     curl -X POST -H 'authorization: Bearer s3cret' 'http://127.0.0.1:3000/admin/ips/127.0.0.1/reward?units=5'
//!
//! What makes it safe to copy:
//!
//! - every admin route, reads included, needs the token (401 without it);
//!   the token is compared in constant time (`subtle`, over SHA-256 digests,
//!   so neither its bytes nor its length leak through timing);
//! - the admin routes are rate limited by the crate itself, per peer IP
//!   (`key::PeerIp`): 30 requests a minute, and a request with a wrong token
//!   costs 10 more, so a guesser gets 3 tries before a 15-minute block;
//! - query values are checked, never clamped or defaulted when malformed:
//!   `seconds` in 1..=31 622 400 (366 days, the longest block the crate
//!   stores), `units` in 1..=1 000, else 400;
//! - clients are keyed by IP, and the admin routes take an address, turned
//!   into the limiter's key by `PeerIp.key_of`: no header a client makes up
//!   becomes a key.
//!
//! A real deployment also keeps the admin routes on an internal listener.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Path, State};
use axum::routing::{get, post};
use http::{HeaderMap, StatusCode, Uri};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tower_redis_ratelimit::key::PeerIp;
use tower_redis_ratelimit::store::Store;
use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter, RedisStore};

/// The longest block the routes accept, in seconds: 366 days, the longest
/// the crate stores. Longer asks are answered 400, never shortened.
pub(crate) const MAX_BLOCK_SECS: u64 = 366 * 86_400;
/// The most units one `reward` gives back.
pub(crate) const MAX_REWARD_UNITS: u64 = 1_000;
/// What a request with a wrong or missing token costs its IP on the admin
/// guard, besides the request itself (a quota of 30 a minute).
pub(crate) const FAILED_AUTH_COST: u64 = 10;

#[derive(Clone)]
struct Admin {
    /// The limiter whose clients the routes administer.
    limiter: RateLimiter,
    /// The admin routes' own limiter, per peer IP.
    guard: RateLimiter,
    /// The SHA-256 of the token.
    token_digest: Arc<[u8; 32]>,
}

type Answer = (StatusCode, String);

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

impl Admin {
    /// 401 unless the request carries `Authorization: Bearer <token>`; a
    /// failure costs the peer `FAILED_AUTH_COST` units of its admin quota.
    async fn authorize(&self, peer: IpAddr, headers: &HeaderMap) -> Result<(), Answer> {
        let given = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
        // (digests of equal length: the comparison's time says nothing of
        // the token, not even its length)
        if let Some(given) = given
            && bool::from(sha256(given).ct_eq(&*self.token_digest))
        {
            return Ok(());
        }
        if let Err(e) = self
            .guard
            .penalize(PeerIp.key_of(peer), FAILED_AUTH_COST)
            .await
        {
            return Err(failed(e));
        }
        Err((
            StatusCode::UNAUTHORIZED,
            "bearer token required\n".to_owned(),
        ))
    }
}

/// The integer query parameter `name`: `default` when absent, else a whole
/// number in `1..=max`; anything else (negative, zero, too large, not a
/// number, given twice) is a 400 naming the parameter.
fn param(uri: &Uri, name: &str, default: u64, max: u64) -> Result<u64, Answer> {
    let mut values = uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.strip_prefix(name)?.strip_prefix('='));
    let bad = || {
        (
            StatusCode::BAD_REQUEST,
            format!("{name} must be a whole number from 1 to {max}, given once\n"),
        )
    };
    let Some(value) = values.next() else {
        return Ok(default);
    };
    if values.next().is_some() {
        return Err(bad());
    }
    match value.parse::<u64>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(bad()),
    }
}

/// The limiter's key of the client at `ip`, or a 400.
fn client_key(ip: &str) -> Result<Vec<u8>, Answer> {
    match ip.parse::<IpAddr>() {
        Ok(ip) => Ok(PeerIp.key_of(ip)),
        Err(_) => Err((
            StatusCode::BAD_REQUEST,
            format!("not an IP address: {ip:?}\n"),
        )),
    }
}

fn failed(e: impl std::fmt::Display) -> Answer {
    (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n"))
}

async fn state(
    State(admin): State<Admin>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(ip): Path<String>,
    headers: HeaderMap,
) -> Answer {
    if let Err(denied) = admin.authorize(peer.ip(), &headers).await {
        return denied;
    }
    let key = match client_key(&ip) {
        Ok(key) => key,
        Err(bad) => return bad,
    };
    match admin.limiter.get(&key).await {
        Ok(d) => (
            StatusCode::OK,
            format!(
                "ip={ip} remaining={} limit={} reset_after={:?} retry_after={:?}\n",
                d.remaining(),
                d.limit(),
                d.reset_after(),
                d.retry_after()
            ),
        ),
        Err(e) => failed(e),
    }
}

async fn block(
    State(admin): State<Admin>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(ip): Path<String>,
    headers: HeaderMap,
    uri: Uri,
) -> Answer {
    if let Err(denied) = admin.authorize(peer.ip(), &headers).await {
        return denied;
    }
    let (key, seconds) = match (client_key(&ip), param(&uri, "seconds", 300, MAX_BLOCK_SECS)) {
        (Ok(key), Ok(seconds)) => (key, seconds),
        (Err(bad), _) | (_, Err(bad)) => return bad,
    };
    match admin
        .limiter
        .block(&key, Duration::from_secs(seconds))
        .await
    {
        Ok(_) => (StatusCode::OK, format!("{ip} blocked for {seconds} s\n")),
        Err(e) => failed(e),
    }
}

async fn unblock(
    State(admin): State<Admin>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(ip): Path<String>,
    headers: HeaderMap,
) -> Answer {
    if let Err(denied) = admin.authorize(peer.ip(), &headers).await {
        return denied;
    }
    let key = match client_key(&ip) {
        Ok(key) => key,
        Err(bad) => return bad,
    };
    match admin.limiter.unblock(&key).await {
        Ok(()) => (StatusCode::OK, format!("{ip} unblocked\n")),
        Err(e) => failed(e),
    }
}

async fn reward(
    State(admin): State<Admin>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(ip): Path<String>,
    headers: HeaderMap,
    uri: Uri,
) -> Answer {
    if let Err(denied) = admin.authorize(peer.ip(), &headers).await {
        return denied;
    }
    let (key, units) = match (client_key(&ip), param(&uri, "units", 1, MAX_REWARD_UNITS)) {
        (Ok(key), Ok(units)) => (key, units),
        (Err(bad), _) | (_, Err(bad)) => return bad,
    };
    match admin.limiter.reward(&key, units).await {
        Ok(()) => (StatusCode::OK, format!("{ip} given {units} back\n")),
        Err(e) => failed(e),
    }
}

/// The app: `GET /` limited per client IP, the admin routes behind `token`
/// and their own per-IP limit, both limiters on `store`. Serve it with
/// `into_make_service_with_connect_info::<SocketAddr>()`.
pub(crate) fn app<S: Store + Clone>(
    store: S,
    token: &str,
) -> Result<Router, Box<dyn std::error::Error>> {
    if token.is_empty() {
        return Err("the admin token must not be empty".into());
    }
    let limiter = RateLimiter::builder()
        .store(store.clone())
        .prefix("admin-example")
        .quota(Quota::fixed_window(Rate::per_minute(5)).name("minute"))
        // blocks are read in the same atomic call as the quotas
        .blocking()
        .build()?;
    let guard = RateLimiter::builder()
        .store(store)
        .prefix("admin-example-guard")
        .quota(Quota::fixed_window(Rate::per_minute(30)).name("minute"))
        // once denied (too many requests or failed tokens), 15 minutes out
        .block_for(Duration::from_secs(15 * 60))
        .build()?;
    let admin = Admin {
        limiter: limiter.clone(),
        guard: guard.clone(),
        token_digest: Arc::new(sha256(token.as_bytes())),
    };

    // (a limiter with blocks caches no denial: an unblock or a reward takes
    // effect at once)
    let limited = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(RateLimitLayer::new(limiter, PeerIp));
    let admin_routes = Router::new()
        .route("/admin/ips/{ip}", get(state))
        .route("/admin/ips/{ip}/block", post(block))
        .route("/admin/ips/{ip}/unblock", post(unblock))
        .route("/admin/ips/{ip}/reward", post(reward))
        .with_state(admin)
        // every admin request counts, whatever its answer
        .layer(RateLimitLayer::new(guard, PeerIp));
    Ok(limited.merge(admin_routes))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
        .init();

    let token = match std::env::var("ADMIN_TOKEN") {
        Ok(token) if !token.is_empty() => token,
        _ => return Err("set ADMIN_TOKEN to the admin routes' bearer token".into()),
    };
    let app = match std::env::var("REDIS_URL") {
        Ok(url) => app(RedisStore::from_url(&url)?, &token)?,
        Err(_) => app(MemoryStore::new(), &token)?,
    };

    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3000);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
