//! GitHub-style API limits: per minute and per day, per account for
//! requests with a known API token, per IP for everyone else; both quotas
//! are checked atomically.
//!
//!     cargo run --example multi_quota --features axum
//!     REDIS_URL=redis://127.0.0.1:6379/ cargo run --example multi_quota --features axum
//!
//! Then try the printed `curl` lines: responses carry `X-RateLimit-Limit`,
//! `X-RateLimit-Remaining`, `X-RateLimit-Reset` (as GitHub) and the IETF
//! `RateLimit-Policy` / `RateLimit` headers; `GET /rate_limit` reports both
//! quotas of the caller (it counts as a request: an endpoint that is never
//! limited is a free store call for anyone).
//!
//! A token becomes a key only once it is known: it is hashed
//! (`Header::key_of`) and looked up among the accounts' token digests, and
//! the key is the account (`user:<account>`), never the token. A request
//! with a made-up token is counted against its IP, like an anonymous one,
//! and answered 401: inventing tokens buys no fresh limit and no store keys.
//!
//! Crates it needs besides this one (feature `axum`): `tokio` (features
//! `macros`, `rt-multi-thread`, `net`), `axum`, `http`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::request::Parts;
use http::{HeaderName, Method, StatusCode};
use tower_redis_ratelimit::key::{Header, KeyExtractor, PeerIp};
use tower_redis_ratelimit::middleware::{HeaderStyle, MissingKey, RateLimitOutcome, problem_json};
use tower_redis_ratelimit::store::Store;
use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter, RedisStore};

const TOKEN: HeaderName = HeaderName::from_static("x-api-token");

/// The demo accounts and their tokens (a real app keeps only the digests,
/// `Header::key_of(token)`, in its database).
pub(crate) const ACCOUNTS: [(&str, &str); 2] = [("octocat", "secret-1"), ("hubot", "secret-2")];

/// Token digest → account.
type Accounts = Arc<HashMap<Vec<u8>, &'static str>>;

/// What a request's `x-api-token` is.
enum Token {
    None,
    Known(&'static str),
    Unknown,
}

fn token(accounts: &Accounts, parts: &Parts) -> Token {
    match Header::new(TOKEN).extract(parts) {
        None => Token::None,
        Some(digest) => accounts
            .get(&digest)
            .map_or(Token::Unknown, |a| Token::Known(a)),
    }
}

/// `GET /rate_limit`: every quota's state for the caller, from the decision
/// the layer made for this request.
async fn rate_limit(outcome: RateLimitOutcome) -> String {
    match outcome.decision() {
        Some(d) => d
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
        None => "not rate limited (store unavailable)\n".to_owned(),
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

/// The app over `store`. Serve it with
/// `into_make_service_with_connect_info::<SocketAddr>()`.
pub(crate) fn app(store: impl Store) -> Result<Router, Box<dyn std::error::Error>> {
    let limiter = RateLimiter::builder()
        .store(store)
        .prefix("api")
        // Short bursts: 30 a minute, at most 10 at once.
        .quota(Quota::gcra(Rate::per_minute(30)).burst(10).name("minute"))
        // And a daily budget (windows start at a key's first request).
        .quota(Quota::fixed_window(Rate::per_day(500)).name("day"))
        .build()?;
    let header = Header::new(TOKEN);
    let accounts: Accounts = Arc::new(
        ACCOUNTS
            .iter()
            .map(|(account, token)| (header.key_of(token), *account))
            .collect(),
    );

    // A known token's account; anything else (no token, a made-up one)
    // falls back to the peer's IP.
    let by_account = {
        let accounts = accounts.clone();
        move |parts: &Parts| match token(&accounts, parts) {
            Token::Known(account) => Some(format!("user:{account}")),
            Token::None | Token::Unknown => None,
        }
    };
    let layer = RateLimitLayer::new(limiter, by_account)
        .on_missing_key(MissingKey::fallback(PeerIp))
        .headers(HeaderStyle::Both)
        .cost(|req: &Parts| if req.method == Method::GET { 1 } else { 5 })
        .deny_response(problem_json);

    // Inside the limit: a made-up token is refused (after it was counted).
    let authenticate = move |req: Request, next: Next| {
        let accounts = accounts.clone();
        async move {
            let (parts, body) = req.into_parts();
            if let Token::Unknown = token(&accounts, &parts) {
                return (StatusCode::UNAUTHORIZED, "unknown API token\n").into_response();
            }
            let res: Response = next.run(Request::from_parts(parts, body)).await;
            res
        }
    };

    Ok(Router::new()
        .route("/repos", get(repos).post(repos))
        .route("/rate_limit", get(rate_limit))
        .layer(axum::middleware::from_fn(authenticate))
        .layer(layer))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let app = match std::env::var("REDIS_URL") {
        Ok(url) => app(RedisStore::from_url(&url)?)?,
        Err(_) => app(MemoryStore::new())?,
    };

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
