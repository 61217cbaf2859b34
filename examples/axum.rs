//! A rate-limited axum server: 5 requests per 10 seconds per client IP.
//!
//! In-memory store (one process):
//!
//!     cargo run --example axum --features axum,tracing
//!
//! Shared Redis (every instance counts together):
//!
//!     REDIS_URL=redis://127.0.0.1:6379/ PORT=3000 cargo run --example axum --features axum,tracing
//!
//! Then run the `curl` line it prints a few times: after five requests the
//! answer is `429 Too Many Requests` with `Retry-After`. `/health` is never
//! limited; `POST /` costs 3.
//!
//! Crates it needs besides this one (feature `axum`, and `tracing` for the
//! logs): `tokio` (features `macros`, `rt-multi-thread`, `net`), `axum`,
//! `http`, `tracing-subscriber`. The Redis pool comes from
//! `RedisStore::from_url`; for a pool of your own, use the crate's
//! re-export `tower_redis_ratelimit::deadpool_redis`, not a second
//! `deadpool-redis` whose version must match.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::Method;
use http::request::Parts;
use tower_redis_ratelimit::middleware::{FailurePolicy, HeaderStyle, RateLimitOutcome};
use tower_redis_ratelimit::{
    MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter, RedisStore, key,
};

/// The handler sees what the limiter did. Extract `RateLimitOutcome` (or
/// `Option<Decision>`), not `Decision`: there is not always a decision (a
/// store failure under `FailurePolicy::Open`, a bypassed route, a skipped
/// key), and a required `Decision` is answered 500 when there is none.
async fn hello(outcome: RateLimitOutcome) -> String {
    match outcome.decision() {
        Some(decision) => format!(
            "hello! {} of {} requests left in {:?}\n",
            decision.remaining(),
            decision.limit(),
            decision.quota()
        ),
        None => "hello! (not rate limited)\n".to_owned(),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_max_level(tracing_subscriber::filter::LevelFilter::DEBUG)
        .init();

    let builder = RateLimiter::builder()
        .prefix("example")
        .quota(Quota::gcra(Rate::new(5, Duration::from_secs(10))).name("10s"));
    let (limiter, store) = match std::env::var("REDIS_URL") {
        Ok(url) => (
            builder.store(RedisStore::from_url(&url)?).build()?,
            format!("Redis at {url}"),
        ),
        Err(_) => (
            builder.store(MemoryStore::new()).build()?,
            "memory".to_owned(),
        ),
    };

    let layer = RateLimitLayer::new(limiter, key::PeerIp)
        .headers(HeaderStyle::Ietf)
        // If Redis is unreachable, keep limiting in this process.
        .on_store_error(FailurePolicy::Fallback(MemoryStore::new()))
        .cost(|req: &Parts| if req.method == Method::POST { 3 } else { 1 })
        .bypass(|req: &Parts| req.uri.path() == "/health");

    let app = Router::new()
        .route("/", get(hello).post(hello))
        .route("/health", get(|| async { "ok\n" }))
        .layer(layer);

    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3000);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    println!("listening on http://{addr} (store: {store})");
    println!("try: curl -i http://{addr}/");
    // PeerIp needs the peer address: serve with connect info.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
