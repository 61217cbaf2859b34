//! A token budget for a language-model endpoint: each API key may spend
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
//!     curl -N -H 'x-api-key: alice' 'http://127.0.0.1:3000/v1/complete?max_tokens=500&words=12'
//!     curl -H 'x-api-key: alice' http://127.0.0.1:3000/v1/budget
//!
//! The budget shows about 2 000 − 12 left (the bucket refills 33 tokens a
//! second), not 2 000 − 500: the unused part of the estimate went back. A completion longer than its estimate is charged
//! the excess as a debt (`words=3000`): the key is then denied until it is
//! repaid.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::Extension;
use axum::routing::get;
use axum::{Router, body::Body};
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, StatusCode, Uri};
use http_body::Frame;
use tokio::sync::mpsc;
use tower_redis_ratelimit::middleware::{MissingKey, ResponseCost, UsageReporter};
use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter};

/// The integer parameter `name` of a query, if any.
fn param(query: Option<&str>, name: &str) -> Option<u64> {
    query?
        .split('&')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
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

/// Streams a fake completion, one word (one token) every 20 ms, reporting
/// each to the layer.
async fn complete(Extension(usage): Extension<UsageReporter>, uri: Uri) -> Body {
    // (how many words, tokens, the fake completion streams)
    let words = param(uri.query(), "words").unwrap_or(40);
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        for i in 0..words {
            let word = Bytes::from(format!("word{i} "));
            if tx.send(word).await.is_err() {
                return; // the client went away: stop generating
            }
            usage.add(1);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = tx.send(Bytes::from_static(b"\n")).await;
    });
    Body::new(Stream(rx))
}

fn api_key(parts: &Parts) -> Option<String> {
    parts
        .headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_max_level(tracing_subscriber::filter::LevelFilter::DEBUG)
        .init();

    let limiter = RateLimiter::builder()
        .store(MemoryStore::new())
        .prefix("tokens")
        .quota(Quota::token_bucket(Rate::per_minute(2_000)).name("tokens"))
        .build()?;

    let layer = RateLimitLayer::new(limiter.clone(), api_key)
        .on_missing_key(MissingKey::reject(StatusCode::UNAUTHORIZED))
        .cost_from_response(
            // the estimate: the request's max_tokens (default 100)
            ResponseCost::new()
                .estimate(|req: &Parts| param(req.uri.query(), "max_tokens").unwrap_or(100)),
        );

    let budget = {
        let limiter = limiter.clone();
        move |headers: HeaderMap| async move {
            let Some(key) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) else {
                return (StatusCode::UNAUTHORIZED, "x-api-key missing\n".to_owned());
            };
            match limiter.get(key).await {
                Ok(d) => (
                    StatusCode::OK,
                    format!("{} of {} tokens left\n", d.remaining(), d.limit()),
                ),
                Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
            }
        }
    };

    let app = Router::new()
        .route("/v1/complete", get(complete).layer(layer))
        .route("/v1/budget", get(budget));

    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3000);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    println!("listening on http://{addr}");
    println!(
        "try: curl -N -H 'x-api-key: alice' 'http://{addr}/v1/complete?max_tokens=500&words=12'"
    );
    axum::serve(listener, app).await?;
    Ok(())
}
