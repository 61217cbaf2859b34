//! A token budget for a language-model endpoint: each tenant may spend
//! 2 000 tokens per minute. A request reserves its `max_tokens` estimate
//! before the completion starts (denied if the budget cannot hold it), the
//! handler reports the tokens it streams, and the layer settles the
//! reservation to what was really used when the stream ends (or, if the
//! client hangs up mid-stream, to what was streamed so far).
//!
//!     cargo run --example token_budget --features axum,tracing
//!
//! Then:
//!
//!     curl -N -H 'x-api-key: alice-key' 'http://127.0.0.1:3000/v1/complete?max_tokens=500&words=12'
//!     curl -H 'x-api-key: alice-key' http://127.0.0.1:3000/v1/budget
//!
//! The budget shows about 2 000 − 12 left (the bucket refills 33 tokens a
//! second), not 2 000 − 500: the unused part of the estimate went back.
//!
//! A monthly budget instead (feature `calendar`): in `budget_limiter`, the
//! quota `Quota::fixed_window(Rate::per_day(BUDGET)).calendar(Calendar::month("Europe/Paris"))`
//! (named `tokens`). Reservations and settles work alike; a spent budget
//! is denied until local midnight on the 1st, when it starts whole
//! (`tests/middleware/middleware_settle.rs` runs this app with one).
//!
//! Crates it needs besides this one (feature `axum`): `tokio` (features
//! `macros`, `rt-multi-thread`, `net`), `axum`, `http`, `http-body`,
//! `bytes`, `tracing-subscriber`.
//!
//! What a copy of it must keep, since the client sends the estimate and the
//! key:
//!
//! - `max_tokens` is checked before the limiter sees it: missing, it is
//!   100; anything but an integer from 1 to 2 000 (the whole budget: a
//!   larger estimate could never fit) is a 400 (the layer would reserve 1
//!   for an estimate of 0, but a client that says 0 means to use nothing,
//!   which a completion cannot promise);
//! - the completion stops at `max_tokens`, as a model does, so the
//!   reservation bounds what one request can use; whatever is streamed is
//!   charged (a settle charges what was used, whatever was reserved);
//! - an API key is a credential, not a limiter key: the key table holds
//!   digests (`Header::key_of`, what a real app keeps in its database), so
//!   no secret sits in memory in the clear or is compared byte by byte;
//!   unknown keys get a 401 (a made-up key would otherwise get a fresh
//!   budget), and the limiter keys its state by the tenant the key belongs
//!   to, so the secret is never written to the store;
//! - everything, `/v1/budget` and the 401s included, is limited per peer IP
//!   first (120 requests a minute, a failed API key costing 10 more), so
//!   keys cannot be guessed at speed.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::{Extension, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Router, body::Body};
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderName, StatusCode};
use http_body::Frame;
use tokio::sync::mpsc;
use tower_redis_ratelimit::key::{Header, KeyExtractor, PeerIp, peer_addr};
use tower_redis_ratelimit::middleware::{MissingKey, ResponseCost, UsageReporter};
use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter};

/// Tokens a tenant may spend per minute.
pub(crate) const BUDGET: u64 = 2_000;
/// The largest `max_tokens` a request may ask for: the whole budget.
pub(crate) const MAX_TOKENS: u64 = BUDGET;
/// The estimate of a request that does not say.
pub(crate) const DEFAULT_MAX_TOKENS: u64 = 100;
/// Requests a peer IP may make a minute, whatever their answer.
pub(crate) const IP_LIMIT: u64 = 120;
/// What a failed API key costs its IP, besides the request.
pub(crate) const FAILED_AUTH_COST: u64 = 10;

const API_KEY: HeaderName = HeaderName::from_static("x-api-key");

/// API key digest (`Header::key_of`) → tenant.
pub(crate) type Tenants = HashMap<Vec<u8>, String>;

/// The demo API keys and their tenants. A real app keeps only the digests
/// in its credential store.
pub(crate) const DEMO_KEYS: [(&str, &str); 2] = [("alice-key", "alice"), ("bob-key", "bob")];

/// The demo keys' table: digest → tenant.
pub(crate) fn demo_tenants() -> Tenants {
    let header = Header::new(API_KEY);
    DEMO_KEYS
        .iter()
        .map(|(key, tenant)| (header.key_of(key), (*tenant).to_owned()))
        .collect()
}

/// The limiter of the budget, over `store`.
pub(crate) fn budget_limiter(
    builder: tower_redis_ratelimit::limiter::RateLimiterBuilder,
) -> Result<RateLimiter, tower_redis_ratelimit::error::ConfigError> {
    builder
        .prefix("tokens")
        .quota(Quota::token_bucket(Rate::per_minute(BUDGET)).name("tokens"))
        .build()
}

/// The per-IP limiter in front of everything, over `store`.
pub(crate) fn guard_limiter(
    builder: tower_redis_ratelimit::limiter::RateLimiterBuilder,
) -> Result<RateLimiter, tower_redis_ratelimit::error::ConfigError> {
    builder
        .prefix("tokens-guard")
        // (named "ip", not "minute": the RateLimit headers of a completion
        // carry this quota and the budget's, each by its name)
        .quota(Quota::fixed_window(Rate::per_minute(IP_LIMIT)).name("ip"))
        .build()
}

/// The tenant authentication found, put in the request's extensions.
#[derive(Debug, Clone)]
struct Tenant(String);

#[derive(Clone)]
struct Auth {
    tenants: Arc<Tenants>,
    guard: RateLimiter,
}

/// API-key authentication: a known key's tenant goes into the request;
/// any other request (no key, a blank or unknown one) is answered 401 and
/// costs its IP `FAILED_AUTH_COST` more.
async fn authenticate(State(auth): State<Auth>, req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    // (the lookup is by digest: its time says nothing of the key)
    let tenant = Header::new(API_KEY)
        .extract(&parts)
        .and_then(|digest| auth.tenants.get(&digest).cloned());
    let Some(tenant) = tenant else {
        if let Some(peer) = peer_addr(&parts) {
            // (a store error here only loses the surcharge: the request
            // itself was counted by the guard's layer)
            let _ = auth
                .guard
                .penalize(PeerIp.key_of(peer.ip()), FAILED_AUTH_COST)
                .await;
        }
        return (StatusCode::UNAUTHORIZED, "a known x-api-key required\n").into_response();
    };
    parts.extensions.insert(Tenant(tenant));
    next.run(Request::from_parts(parts, body)).await
}

/// The request's checked `max_tokens` (1 to [`MAX_TOKENS`]), put in its
/// extensions before the limiter runs.
#[derive(Debug, Clone, Copy)]
struct MaxTokens(u64);

/// The request's checked `words` (how long the fake completion would be).
#[derive(Debug, Clone, Copy)]
struct Words(u64);

/// The value of the query parameter `name`: `Ok(None)` if absent, an error
/// if given twice.
fn param<'q>(query: Option<&'q str>, name: &str) -> Result<Option<&'q str>, String> {
    let mut found = None;
    for kv in query.unwrap_or("").split('&') {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        if k == name {
            if found.is_some() {
                return Err(format!("{name} given twice"));
            }
            found = Some(v);
        }
    }
    Ok(found)
}

/// An integer from `min` to `max`, or why not.
fn bounded(name: &str, value: &str, min: u64, max: u64) -> Result<u64, String> {
    match value.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!("{name} must be an integer from {min} to {max}")),
    }
}

/// Checks the query before the limiter: a 400 for a bad `max_tokens` or
/// `words`, else both, checked, in the request's extensions.
async fn check_query(mut req: Request, next: Next) -> Response {
    let query = req.uri().query().map(str::to_owned);
    let checked = (|| {
        let max_tokens = match param(query.as_deref(), "max_tokens")? {
            None => DEFAULT_MAX_TOKENS,
            Some(v) => bounded("max_tokens", v, 1, MAX_TOKENS)?,
        };
        let words = match param(query.as_deref(), "words")? {
            None => 40,
            Some(v) => bounded("words", v, 0, MAX_TOKENS)?,
        };
        Ok::<_, String>((max_tokens, words))
    })();
    match checked {
        Ok((max_tokens, words)) => {
            req.extensions_mut().insert(MaxTokens(max_tokens));
            req.extensions_mut().insert(Words(words));
            next.run(req).await
        }
        Err(why) => (StatusCode::BAD_REQUEST, format!("{why}\n")).into_response(),
    }
}

/// A body streaming what a task sends.
struct Stream(mpsc::Receiver<Bytes>);

impl http_body::Body for Stream {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|c| Ok(Frame::data(c))))
    }
}

/// Streams a fake completion of `words` words (one token each), stopping
/// at `max_tokens` as a model does, one word every `pace`, reporting each
/// to the layer.
fn complete(usage: UsageReporter, max_tokens: u64, words: u64, pace: Duration) -> Body {
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        for i in 0..words.min(max_tokens) {
            let word = Bytes::from(format!("word{i} "));
            if tx.send(word).await.is_err() {
                return; // the client went away: stop generating
            }
            usage.add(1);
            tokio::time::sleep(pace).await;
        }
        let _ = tx.send(Bytes::from_static(b"\n")).await;
    });
    Body::new(Stream(rx))
}

/// The app: `GET /v1/complete?max_tokens=..&words=..` (a streamed fake
/// completion, one word every `pace`) behind the budget `limiter`, and
/// `GET /v1/budget` (what is left), both behind API-key authentication
/// (`tenants`) and the per-IP `guard`. Serve it with
/// `into_make_service_with_connect_info::<SocketAddr>()`.
pub(crate) fn app(
    limiter: RateLimiter,
    guard: RateLimiter,
    tenants: Tenants,
    pace: Duration,
) -> Router {
    let auth = Auth {
        tenants: Arc::new(tenants),
        guard: guard.clone(),
    };
    // The budget's key: the tenant authentication found (never the API key).
    let layer = RateLimitLayer::new(limiter.clone(), |parts: &Parts| {
        parts.extensions.get::<Tenant>().map(|t| t.0.clone())
    })
    // (authentication runs first: no tenant here is a server bug)
    .on_missing_key(MissingKey::reject(StatusCode::INTERNAL_SERVER_ERROR))
    .cost_from_response(
        // the estimate: the request's checked max_tokens (never 0; the
        // largest if the check did not run)
        ResponseCost::new().estimate(|req: &Parts| {
            req.extensions
                .get::<MaxTokens>()
                .map_or(MAX_TOKENS, |m| m.0)
        }),
    );
    let budget = move |Extension(Tenant(tenant)): Extension<Tenant>| async move {
        match limiter.get(&tenant).await {
            Ok(d) => (
                StatusCode::OK,
                format!("{} of {} tokens left\n", d.remaining(), d.limit()),
            ),
            Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
        }
    };
    Router::new()
        .route(
            "/v1/complete",
            get(
                move |Extension(usage): Extension<UsageReporter>,
                      Extension(MaxTokens(max_tokens)): Extension<MaxTokens>,
                      Extension(Words(words)): Extension<Words>| async move {
                    complete(usage, max_tokens, words, pace)
                },
            )
            .layer(layer)
            // (before the budget: a bad query reserves nothing)
            .layer(middleware::from_fn(check_query)),
        )
        .route("/v1/budget", get(budget))
        .layer(middleware::from_fn_with_state(auth, authenticate))
        // outermost: every request counts against its IP, 401s included
        .layer(RateLimitLayer::new(guard, PeerIp))
}

#[allow(dead_code)] // (a test includes this file as a module)
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_max_level(tracing_subscriber::filter::LevelFilter::DEBUG)
        .init();

    let store = MemoryStore::new();
    let limiter = budget_limiter(RateLimiter::builder().store(store.clone()))?;
    let guard = guard_limiter(RateLimiter::builder().store(store))?;
    let app = app(limiter, guard, demo_tenants(), Duration::from_millis(20));

    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3000);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    println!("listening on http://{addr}");
    println!(
        "try: curl -N -H 'x-api-key: alice-key' 'http://{addr}/v1/complete?max_tokens=500&words=12'"
    );
    // PeerIp needs the peer address: serve with connect info.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
