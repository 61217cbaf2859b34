//! An admin API over a rate limiter, guarded by a bearer token: look a key's
//! state up, block it, unblock it, give it units back.
//!
//!     ADMIN_TOKEN=s3cret cargo run --example admin --features axum,tracing
//!
//! `GET /` is limited to 5 requests per minute per `x-user` header. Then:
//!
//!     curl -H 'authorization: Bearer s3cret' http://127.0.0.1:3000/admin/keys/alice
//!     curl -X POST -H 'authorization: Bearer s3cret' 'http://127.0.0.1:3000/admin/keys/alice/block?seconds=60'
//!     curl -i -H 'x-user: alice' http://127.0.0.1:3000/        # 429 while blocked
//!     curl -X POST -H 'authorization: Bearer s3cret' http://127.0.0.1:3000/admin/keys/alice/unblock
//!     curl -X POST -H 'authorization: Bearer s3cret' 'http://127.0.0.1:3000/admin/keys/alice/reward?units=5'
//!
//! Without the token, the admin routes answer 401. (A real deployment keeps
//! the admin routes on an internal listener, and compares tokens in
//! constant time.)

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::routing::{get, post};
use http::request::Parts;
use http::{HeaderMap, StatusCode, Uri};
use tower_redis_ratelimit::middleware::MissingKey;
use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter};

#[derive(Clone)]
struct Admin {
    limiter: RateLimiter,
    token: Arc<str>,
}

type Answer = (StatusCode, String);

impl Admin {
    /// 401 unless the request carries `Authorization: Bearer <token>`.
    fn authorize(&self, headers: &HeaderMap) -> Result<(), Answer> {
        let given = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match given {
            Some(token) if token == &*self.token => Ok(()),
            _ => Err((
                StatusCode::UNAUTHORIZED,
                "bearer token required\n".to_owned(),
            )),
        }
    }
}

/// The integer parameter `name` of a query, if any.
fn param(uri: &Uri, name: &str) -> Option<u64> {
    uri.query()?
        .split('&')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
}

fn failed(e: impl std::fmt::Display) -> Answer {
    (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n"))
}

async fn state(State(admin): State<Admin>, Path(key): Path<String>, headers: HeaderMap) -> Answer {
    if let Err(denied) = admin.authorize(&headers) {
        return denied;
    }
    match admin.limiter.get(&key).await {
        Ok(d) => (
            StatusCode::OK,
            format!(
                "key={key} allowed={} remaining={} limit={} reset_after={:?} retry_after={:?}\n",
                d.allowed(),
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
    Path(key): Path<String>,
    headers: HeaderMap,
    uri: Uri,
) -> Answer {
    if let Err(denied) = admin.authorize(&headers) {
        return denied;
    }
    let seconds = param(&uri, "seconds").unwrap_or(300);
    if seconds == 0 {
        // (a block of zero lifts it: say so rather than "blocked for 0 s")
        return (
            StatusCode::BAD_REQUEST,
            "seconds must be at least 1; use /unblock\n".to_owned(),
        );
    }
    match admin
        .limiter
        .block(&key, Duration::from_secs(seconds))
        .await
    {
        Ok(()) => (StatusCode::OK, format!("{key} blocked for {seconds} s\n")),
        Err(e) => failed(e),
    }
}

async fn unblock(
    State(admin): State<Admin>,
    Path(key): Path<String>,
    headers: HeaderMap,
) -> Answer {
    if let Err(denied) = admin.authorize(&headers) {
        return denied;
    }
    match admin.limiter.unblock(&key).await {
        Ok(()) => (StatusCode::OK, format!("{key} unblocked\n")),
        Err(e) => failed(e),
    }
}

async fn reward(
    State(admin): State<Admin>,
    Path(key): Path<String>,
    headers: HeaderMap,
    uri: Uri,
) -> Answer {
    if let Err(denied) = admin.authorize(&headers) {
        return denied;
    }
    let units = param(&uri, "units").unwrap_or(1);
    match admin.limiter.reward(&key, units).await {
        Ok(()) => (StatusCode::OK, format!("{key} given {units} back\n")),
        Err(e) => failed(e),
    }
}

fn user(parts: &Parts) -> Option<String> {
    parts
        .headers
        .get("x-user")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
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
    let limiter = RateLimiter::builder()
        .store(MemoryStore::new())
        .prefix("admin-example")
        .quota(Quota::fixed_window(Rate::per_minute(5)).name("minute"))
        // blocks are read in the same atomic call as the quotas
        .blocking()
        .build()?;
    let admin = Admin {
        limiter: limiter.clone(),
        token: token.into(),
    };

    let limited = Router::new().route("/", get(|| async { "hello\n" })).layer(
        RateLimitLayer::new(limiter, user)
            // (a limiter with blocks caches no denial: an unblock or a
            // reward takes effect at once)
            .on_missing_key(MissingKey::reject(StatusCode::BAD_REQUEST)),
    );
    let admin_routes = Router::new()
        .route("/admin/keys/{key}", get(state))
        .route("/admin/keys/{key}/block", post(block))
        .route("/admin/keys/{key}/unblock", post(unblock))
        .route("/admin/keys/{key}/reward", post(reward))
        .with_state(admin);
    let app = limited.merge(admin_routes);

    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3000);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
