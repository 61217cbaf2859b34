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
//! Crates it needs besides this one (feature `axum`): `tokio` (features
//! `macros`, `rt-multi-thread`, `net`), `axum` (its default feature
//! `query`), `http`, `sha2`, `subtle`, `tracing-subscriber`.
//!
//! What makes it safe to copy:
//!
//! - every admin route, reads included, needs the token (401 without it),
//!   as `Authorization: Bearer <token>`, the scheme in any case (RFC 9110
//!   §11.1); the token is compared in constant time (`subtle`, over SHA-256
//!   digests, so neither its bytes nor its length leak through timing);
//! - the admin routes are rate limited by the crate itself, per peer IP
//!   (`key::PeerIp`): 30 requests a minute, and a request with a wrong token
//!   costs 10 more, so a guesser gets 3 tries before a 15-minute block;
//! - query strings are decoded (`%35` is `5`, `+` a space) and checked,
//!   never clamped or defaulted when malformed: `seconds` in 1..=31 622 400
//!   (366 days, the longest block the crate stores), `units` in 1..=1 000,
//!   digits only; a parameter the route does not take (`Seconds`,
//!   `secs`), one given twice or without a value (`?seconds`) is a 400, not
//!   the default;
//! - clients are keyed by IP, and the admin routes take an address, turned
//!   into the limiter's key by `PeerIp.key_of`: no header a client makes up
//!   becomes a key.
//!
//! A real deployment also keeps the admin routes on an internal listener.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::routing::{get, post};
use http::{HeaderMap, StatusCode};
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

/// A request's query string, decoded, as `(name, value)` pairs in order
/// (a name without `=` has the value "").
type Params = Query<Vec<(String, String)>>;

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

impl Admin {
    /// 401 unless the request carries `Authorization: Bearer <token>`; a
    /// failure costs the peer `FAILED_AUTH_COST` units of its admin quota.
    async fn authorize(&self, peer: IpAddr, headers: &HeaderMap) -> Result<(), Answer> {
        let given = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| bearer_token(v.as_bytes()));
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

/// The token of an `Authorization: Bearer <token>` value: the scheme in
/// any case (RFC 9110 §11.1), then one or more spaces; `None` for another
/// scheme or an empty token.
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"bearer") || rest.first() != Some(&b' ') {
        return None;
    }
    let token = rest.trim_ascii_start();
    (!token.is_empty()).then_some(token)
}

/// An integer query parameter a route takes: its exact name, its value
/// when absent, its largest value (the smallest is 1).
struct Param {
    name: &'static str,
    default: u64,
    max: u64,
}

/// The values of the parameters a route `takes`, from its decoded query:
/// each absent one's default, each given one a whole number (digits only)
/// in `1..=max`. Anything else is a 400 naming the parameter: a name the
/// route does not take (names are case-sensitive: `Seconds` is not
/// `seconds`), a name given twice, a name without a value.
fn params<const N: usize>(
    query: &[(String, String)],
    takes: [Param; N],
) -> Result<[u64; N], Answer> {
    let bad = |why: String| (StatusCode::BAD_REQUEST, why + "\n");
    let mut values: [Option<u64>; N] = [None; N];
    for (name, value) in query {
        let Some(i) = takes.iter().position(|p| p.name == name) else {
            let names: Vec<_> = takes.iter().map(|p| p.name).collect();
            return Err(bad(format!(
                "unknown query parameter {name:?}; this route takes {names:?}"
            )));
        };
        let Param { max, .. } = takes[i];
        if values[i].is_some() {
            return Err(bad(format!("{name} given twice")));
        }
        // (digits only: `u64::from_str` would also take a leading `+`)
        let n = Some(value)
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|n| (1..=max).contains(n));
        let Some(n) = n else {
            return Err(bad(format!(
                "{name} must be a whole number from 1 to {max}, not {value:?}"
            )));
        };
        values[i] = Some(n);
    }
    let mut out = [0; N];
    for (i, p) in takes.iter().enumerate() {
        out[i] = values[i].unwrap_or(p.default);
    }
    Ok(out)
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
    Query(query): Params,
    headers: HeaderMap,
) -> Answer {
    if let Err(denied) = admin.authorize(peer.ip(), &headers).await {
        return denied;
    }
    let key = match (client_key(&ip), params(&query, [])) {
        (Ok(key), Ok([])) => key,
        (Err(bad), _) | (_, Err(bad)) => return bad,
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
    Query(query): Params,
    headers: HeaderMap,
) -> Answer {
    if let Err(denied) = admin.authorize(peer.ip(), &headers).await {
        return denied;
    }
    let seconds = Param {
        name: "seconds",
        default: 300,
        max: MAX_BLOCK_SECS,
    };
    let (key, seconds) = match (client_key(&ip), params(&query, [seconds])) {
        (Ok(key), Ok([seconds])) => (key, seconds),
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
    Query(query): Params,
    headers: HeaderMap,
) -> Answer {
    if let Err(denied) = admin.authorize(peer.ip(), &headers).await {
        return denied;
    }
    let key = match (client_key(&ip), params(&query, [])) {
        (Ok(key), Ok([])) => key,
        (Err(bad), _) | (_, Err(bad)) => return bad,
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
    Query(query): Params,
    headers: HeaderMap,
) -> Answer {
    if let Err(denied) = admin.authorize(peer.ip(), &headers).await {
        return denied;
    }
    let units = Param {
        name: "units",
        default: 1,
        max: MAX_REWARD_UNITS,
    };
    let (key, units) = match (client_key(&ip), params(&query, [units])) {
        (Ok(key), Ok([units])) => (key, units),
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
        .quota(Quota::fixed_window(Rate::per_minute(30)).name("ip"))
        // once denied (too many requests or failed tokens), 15 minutes out
        .block_for(Duration::from_secs(15 * 60))
        .build()?;
    let admin = Admin {
        limiter: limiter.clone(),
        guard: guard.clone(),
        token_digest: Arc::new(sha256(token.as_bytes())),
    };

    // (a denial, a block's included, is served from the limiter's deny
    // cache for at most a second; an unblock, reward or reset made through
    // the admin routes forgets it, so it holds on this instance's next
    // request, and on other instances within that second)
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
