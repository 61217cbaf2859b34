//! GitHub-style API limits: per minute and per day, per API token, with
//! anonymous clients limited by IP; both quotas are checked atomically.
//!
//!     cargo run --example multi_quota --features axum
//!     REDIS_URL=redis://127.0.0.1:6379/ cargo run --example multi_quota --features axum
//!
//! Then try the printed `curl` lines: responses carry `X-RateLimit-Limit`,
//! `X-RateLimit-Remaining`, `X-RateLimit-Reset` (as GitHub) and the IETF
//! `RateLimit-Policy` / `RateLimit` headers; `GET /rate_limit` reports both
//! quotas without consuming anything (as GitHub's endpoint of that name).

use std::net::SocketAddr;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use http::request::Parts;
use http::{HeaderName, Method};
use tower_redis_ratelimit::key::{Header, KeyExtractor, PeerIp};
use tower_redis_ratelimit::middleware::{HeaderStyle, MissingKey, RateLimitOutcome, problem_json};
use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter, RedisStore};

const TOKEN: HeaderName = HeaderName::from_static("x-api-token");

/// `GET /rate_limit`: every quota's state for the caller, nothing consumed.
async fn rate_limit(State(limiter): State<RateLimiter>, parts: Parts) -> String {
    let Some(key) = Header::new(TOKEN)
        .extract(&parts)
        .or_else(|| PeerIp.extract(&parts))
    else {
        return "no key\n".to_owned();
    };
    match limiter.peek(&key).await {
        Ok(d) => d
            .quotas()
            .map(|q| {
                format!(
                    "{:>6}: {} of {} left, full again in {:?}\n",
                    q.name(),
                    q.remaining(),
                    q.limit(),
                    q.reset_after()
                )
            })
            .collect(),
        Err(e) => format!("store unavailable: {e}\n"),
    }
}

/// `RateLimitOutcome` is always there (a required `Decision` would answer 500
/// whenever no decision was made, e.g. Redis down under the default policy).
async fn repos(outcome: RateLimitOutcome) -> String {
    match outcome.decision() {
        Some(d) => format!(
            "[] (binding quota {:?}: {} left)\n",
            d.quota(),
            d.remaining()
        ),
        None => "[] (not rate limited)\n".to_owned(),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let builder = RateLimiter::builder()
        .prefix("api")
        // Short bursts: 30 a minute, at most 10 at once.
        .quota(Quota::gcra(Rate::per_minute(30)).burst(10).name("minute"))
        // And a daily budget (windows start at a key's first request).
        .quota(Quota::fixed_window(Rate::per_day(500)).name("day"));
    let limiter = match std::env::var("REDIS_URL") {
        Ok(url) => builder
            .store(RedisStore::new(
                deadpool_redis::Config::from_url(url)
                    .create_pool(Some(deadpool_redis::Runtime::Tokio1))?,
            ))
            .build()?,
        Err(_) => builder.store(MemoryStore::new()).build()?,
    };

    // Token holders are counted per token (hashed before it reaches the
    // store); everyone else by IP.
    let layer = RateLimitLayer::new(limiter.clone(), Header::new(TOKEN))
        .on_missing_key(MissingKey::fallback(PeerIp))
        .headers(HeaderStyle::Both)
        .cost(|req: &Parts| if req.method == Method::GET { 1 } else { 5 })
        .bypass(|req: &Parts| req.uri.path() == "/rate_limit")
        .deny_response(problem_json);

    let app = Router::new()
        .route("/repos", get(repos).post(repos))
        .route("/rate_limit", get(rate_limit))
        .with_state(limiter)
        .layer(layer);

    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3000);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    println!("listening on http://{addr}");
    println!("anonymous:  curl -i http://{addr}/repos");
    println!("with token: curl -i -H 'x-api-token: secret-1' http://{addr}/repos");
    println!("a write:    curl -i -X POST -H 'x-api-token: secret-1' http://{addr}/repos");
    println!("status:     curl -H 'x-api-token: secret-1' http://{addr}/rate_limit");
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
