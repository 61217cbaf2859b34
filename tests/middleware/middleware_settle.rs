//! Settling after the response in the middleware: refunds by response
//! (`skip_failed`, `skip_successful`, `refund_when`, `refund_on_disconnect`)
//! and costs from the response (`cost_from_response`: a header, an
//! extension, a `UsageReporter` over a streamed body), on the memory store
//! under a manual clock and on a private redis-server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

#[allow(dead_code)] // (its `main` and demo items)
#[path = "../../examples/token_budget.rs"]
mod token_budget;

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Extension, Path};
use axum::routing::get;
use bytes::Bytes;
use common::http::{get_req, send, text};
use common::memory::{clock, limiter};
use common::{GENEROUS, RedisServer};
use http::{HeaderName, StatusCode};
use http_body::Frame;
use http_body_util::BodyExt;
use tokio::sync::{mpsc, watch};
use tower_redis_ratelimit::clock::ManualClock;
use tower_redis_ratelimit::middleware::{ResponseCost, UsageReporter};
use tower_redis_ratelimit::{Quota, Rate, RateLimitLayer, RateLimiter, RedisStore, key};

const TOKENS: HeaderName = HeaderName::from_static("x-tokens-used");

/// A body that streams what the test sends, reporting each chunk's units.
struct Chunks {
    reporter: UsageReporter,
    rx: mpsc::Receiver<(u64, &'static str)>,
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some((units, text))) => {
                self.reporter.add(units);
                Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(text.as_bytes())))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

type Streams = Arc<Mutex<Option<mpsc::Receiver<(u64, &'static str)>>>>;

/// `/ok`, `/fail` (500), `/teapot` (418), `/hang` (never answers),
/// `/tokens/{n}` (the cost in a header), `/huge` (a header's cost too large
/// for a u64), `/ext/{n}` (in an extension),
/// `/gate/{n}` (waits for the gate, then `/tokens/{n}`), `/stream` (streams
/// what the test sends on the channel put in `streams`).
fn app(layer: RateLimitLayer, gate: watch::Receiver<bool>, streams: Streams) -> Router {
    let entered = Arc::new(AtomicUsize::new(0));
    app_counting(layer, gate, streams, entered)
}

#[derive(Clone, Copy)]
struct Used(u64);

fn app_counting(
    layer: RateLimitLayer,
    gate: watch::Receiver<bool>,
    streams: Streams,
    entered: Arc<AtomicUsize>,
) -> Router {
    Router::new()
        .route("/ok", get(|| async { "ok" }))
        .route(
            "/fail",
            get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "boom") }),
        )
        .route(
            "/teapot",
            get(|| async { (StatusCode::IM_A_TEAPOT, "tea") }),
        )
        .route("/hang", get(std::future::pending::<&'static str>))
        .route(
            "/tokens/{n}",
            get(|Path(n): Path<u64>| async move { ([(TOKENS, n.to_string())], "done") }),
        )
        .route(
            "/huge",
            get(|| async { ([(TOKENS, "99999999999999999999999999")], "done") }),
        )
        .route(
            "/twice",
            get(|| async { ([(TOKENS, "0"), (TOKENS, "40")], "done") }),
        )
        .route(
            "/ext/{n}",
            get(|Path(n): Path<u64>| async move {
                let mut res = http::Response::new(Body::from("done"));
                res.extensions_mut().insert(Used(n));
                res
            }),
        )
        .route(
            "/gate/{n}",
            get(move |Path(n): Path<u64>| {
                let mut gate = gate.clone();
                let entered = entered.clone();
                async move {
                    entered.fetch_add(1, Ordering::SeqCst);
                    gate.wait_for(|open| *open).await.unwrap();
                    ([(TOKENS, n.to_string())], "done")
                }
            }),
        )
        .route(
            "/stream",
            get(move |Extension(reporter): Extension<UsageReporter>| {
                let rx = streams.lock().unwrap().take().expect("one stream per test");
                async move { Body::new(Chunks { reporter, rx }) }
            }),
        )
        .layer(layer)
}

fn plain_app(layer: RateLimitLayer) -> Router {
    let (_tx, gate) = watch::channel(false);
    app(layer, gate, Streams::default())
}

fn window(clock: &ManualClock, prefix: &str, per_minute: u64) -> RateLimiter {
    limiter(
        clock,
        prefix,
        [Quota::fixed_window(Rate::per_minute(per_minute)).name("minute")],
    )
}

async fn remaining(limiter: &RateLimiter) -> u64 {
    limiter.get("global").await.unwrap().remaining()
}

/// Waits (10 s at most) until the key has `expected` remaining: settles
/// spawned when a body or future is dropped finish in their own task.
async fn eventually_remaining(limiter: &RateLimiter, expected: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = remaining(limiter).await;
        if now == expected {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "remaining {now}, expected {expected}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// 60 concurrent requests, every other one failing, all admitted: exactly
/// the 30 successes stay counted.
async fn concurrent_failures_are_refunded(limiter: RateLimiter) {
    let layer = RateLimitLayer::new(limiter.clone(), key::Global).skip_failed();
    let app = plain_app(layer);
    let tasks: Vec<_> = (0..60)
        .map(|i| {
            let app = app.clone();
            tokio::spawn(async move {
                let path = if i % 2 == 0 { "/fail" } else { "/ok" };
                send(&app, get_req(path)).await.status()
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == StatusCode::OK).count(),
        30
    );
    assert_eq!(
        statuses
            .iter()
            .filter(|s| **s == StatusCode::INTERNAL_SERVER_ERROR)
            .count(),
        30
    );
    assert_eq!(remaining(&limiter).await, 100 - 30);
}

#[tokio::test]
async fn skip_failed_refunds_exactly_the_failures_under_concurrency_on_memory() {
    let clock = clock();
    concurrent_failures_are_refunded(window(&clock, "failed", 100)).await;
}

#[tokio::test]
async fn skip_failed_refunds_exactly_the_failures_under_concurrency_on_redis() {
    let redis = RedisServer::start();
    let clock = clock();
    let limiter = RateLimiter::builder()
        .store(RedisStore::new(redis.pool(8)).timeout(GENEROUS))
        .prefix("failed")
        .clock(clock.clone())
        .quota(Quota::fixed_window(Rate::per_minute(100)).name("minute"))
        .build()
        .unwrap();
    concurrent_failures_are_refunded(limiter.clone()).await;

    // A response that is counted settles without a store call: one script
    // call per request, none after it.
    let evals = |stats: std::collections::HashMap<String, u64>| {
        stats
            .iter()
            .filter(|(cmd, _)| cmd.starts_with("eval"))
            .map(|(_, n)| n)
            .sum::<u64>()
    };
    let app = plain_app(RateLimitLayer::new(limiter.clone(), key::Global).skip_failed());
    let before = evals(redis.info_commandstats().await);
    for _ in 0..10 {
        assert_eq!(send(&app, get_req("/ok")).await.status(), StatusCode::OK);
    }
    assert_eq!(evals(redis.info_commandstats().await) - before, 10);
    assert_eq!(remaining(&limiter).await, 100 - 40);
}

#[tokio::test]
async fn skip_successful_counts_only_failures() {
    let clock = clock();
    let limiter = window(&clock, "successful", 3);
    let app = plain_app(RateLimitLayer::new(limiter.clone(), key::Global).skip_successful());
    for _ in 0..10 {
        assert_eq!(send(&app, get_req("/ok")).await.status(), StatusCode::OK);
    }
    assert_eq!(remaining(&limiter).await, 3);
    for _ in 0..3 {
        let res = send(&app, get_req("/fail")).await;
        assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
    assert_eq!(
        send(&app, get_req("/ok")).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn refund_when_refunds_what_the_predicate_picks() {
    let clock = clock();
    let limiter = window(&clock, "predicate", 10);
    let layer = RateLimitLayer::new(limiter.clone(), key::Global)
        .refund_when(|res: &http::response::Parts| res.status == StatusCode::IM_A_TEAPOT);
    let app = plain_app(layer);
    for _ in 0..5 {
        let res = send(&app, get_req("/teapot")).await;
        assert_eq!(res.status(), StatusCode::IM_A_TEAPOT);
        assert_eq!(text(res).await, "tea");
    }
    assert_eq!(
        send(&app, get_req("/fail")).await.status(),
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(send(&app, get_req("/ok")).await.status(), StatusCode::OK);
    assert_eq!(remaining(&limiter).await, 8);
}

#[tokio::test]
async fn a_disconnect_is_counted_by_default_and_refunded_when_asked() {
    let clock = clock();
    for (refund, expected) in [(false, 9), (true, 10)] {
        let limiter = window(&clock, if refund { "dis-r" } else { "dis-c" }, 10);
        let layer = RateLimitLayer::new(limiter.clone(), key::Global)
            .skip_failed()
            .refund_on_disconnect(refund);
        let app = plain_app(layer);
        // The client gives up: the response future is dropped mid-call.
        let gave_up = tokio::time::timeout(Duration::from_millis(50), send(&app, get_req("/hang")));
        assert!(gave_up.await.is_err());
        eventually_remaining(&limiter, expected).await;
        // and stays so
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            remaining(&limiter).await,
            expected,
            "refund_on_disconnect({refund})"
        );
    }
}

#[tokio::test]
async fn fifty_concurrent_estimates_never_admit_more_than_the_budget() {
    let clock = clock();
    let limiter = window(&clock, "estimates", 100);
    let layer = RateLimitLayer::new(limiter.clone(), key::Global)
        .cost_from_response(ResponseCost::new().estimate(|_| 10).header(TOKENS));
    let (open, gate) = watch::channel(false);
    let entered = Arc::new(AtomicUsize::new(0));
    let app = app_counting(layer, gate, Streams::default(), entered.clone());
    let denied = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let app = app.clone();
            let denied = denied.clone();
            tokio::spawn(async move {
                let res = send(&app, get_req("/gate/4")).await;
                if res.status() == StatusCode::TOO_MANY_REQUESTS {
                    denied.fetch_add(1, Ordering::SeqCst);
                }
                res.status()
            })
        })
        .collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while entered.load(Ordering::SeqCst) + denied.load(Ordering::SeqCst) < 50 {
        assert!(tokio::time::Instant::now() < deadline, "requests stuck");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Every admitted request holds its estimate: 100 / 10.
    assert_eq!(entered.load(Ordering::SeqCst), 10);
    assert_eq!(denied.load(Ordering::SeqCst), 40);
    assert_eq!(remaining(&limiter).await, 0);
    open.send(true).unwrap();
    let mut ok = 0;
    for t in tasks {
        if t.await.unwrap() == StatusCode::OK {
            ok += 1;
        }
    }
    assert_eq!(ok, 10);
    // Each settled to its real cost, 4: 6 units back each.
    assert_eq!(remaining(&limiter).await, 100 - 40);
}

#[tokio::test]
async fn a_header_or_an_extension_reported_cost_settles() {
    let clock = clock();
    let limiter = window(&clock, "header", 100);
    let layer = RateLimitLayer::new(limiter.clone(), key::Global).cost_from_response(
        ResponseCost::new()
            .estimate(|_| 20)
            .header(TOKENS)
            .extension(|used: &Used| used.0),
    );
    let app = plain_app(layer.clone());
    let res = send(&app, get_req("/tokens/3")).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(text(res).await, "done");
    assert_eq!(remaining(&limiter).await, 97);
    let res = send(&app, get_req("/ext/7")).await;
    assert_eq!(text(res).await, "done");
    assert_eq!(remaining(&limiter).await, 90);
    // Nothing reported: the estimate stays.
    let res = send(&app, get_req("/ok")).await;
    assert_eq!(text(res).await, "ok");
    assert_eq!(remaining(&limiter).await, 70);
    assert_eq!(layer.stats().settle_errors, 0);
}

#[tokio::test]
async fn an_overspending_caller_is_denied_until_the_debt_is_repaid() {
    let clock = clock();
    // 60 tokens, one back per second.
    let limiter = limiter(
        &clock,
        "debt",
        [Quota::token_bucket(Rate::per_minute(60)).name("tokens")],
    );
    let layer = RateLimitLayer::new(limiter.clone(), key::Global)
        .cost_from_response(ResponseCost::new().estimate(|_| 10).header(TOKENS));
    let app = plain_app(layer);
    // Estimated 10, spent 100: 40 tokens of debt.
    let res = send(&app, get_req("/tokens/100")).await;
    assert_eq!(res.status(), StatusCode::OK);
    let res = send(&app, get_req("/tokens/1")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    clock.advance(Duration::from_secs(45)); // 5 tokens: not the 10 estimated
    let res = send(&app, get_req("/tokens/1")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    clock.advance(Duration::from_secs(10)); // 15 tokens
    let res = send(&app, get_req("/tokens/1")).await;
    assert_eq!(res.status(), StatusCode::OK);
}

/// A stream reserved at 20 reports 250 of a budget of 100: the excess is
/// charged past the limit (a debt, never lost), so the next request (20
/// again) is denied, with a `Retry-After`, for `until` after the stream, and
/// admitted from then on: until the debt is repaid at the rate (a bucket) or
/// the window ends (a fixed window, a calendar month).
async fn an_overspending_stream_is_charged_past_the_limit(
    limiter: RateLimiter,
    clock: &ManualClock,
    until: Duration,
) {
    let layer = RateLimitLayer::new(limiter.clone(), key::Global)
        .cost_from_response(ResponseCost::new().estimate(|_| 20));
    let (tx, rx) = mpsc::channel(8);
    let (_open, gate) = watch::channel(true);
    let app = app(layer.clone(), gate, Arc::new(Mutex::new(Some(rx))));
    let res = send(&app, get_req("/stream")).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(remaining(&limiter).await, 80, "the estimate is reserved");
    for _ in 0..5 {
        tx.send((50, "x")).await.unwrap();
    }
    drop(tx);
    assert_eq!(text(res).await, "xxxxx");
    assert_eq!(layer.stats().settle_errors, 0);
    // in debt: even a peek is denied, and so is the next request
    let g = limiter.get("global").await.unwrap();
    assert!(!g.allowed(), "{g:?}");
    assert_eq!(g.remaining(), 0);
    let res = send(&app, get_req("/ok")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry = res.headers()["retry-after"].to_str().unwrap().to_owned();
    assert_eq!(retry, until.as_secs().to_string());
    clock.advance(until - Duration::from_micros(1));
    let res = send(&app, get_req("/ok")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS, "a µs early");
    clock.advance(Duration::from_micros(1));
    let res = send(&app, get_req("/ok")).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(text(res).await, "ok");
}

/// The quotas of `an_overspending_stream_is_charged_past_the_limit`: 100
/// a 100 s (a unit a second), and when the next request is admitted after
/// the stream.
fn overspent_quotas() -> Vec<(&'static str, Quota, Duration)> {
    let rate = Rate::new(100, Duration::from_secs(100));
    vec![
        // 250 owed, 100 of burst, 20 asked: 170 s
        ("tb", Quota::token_bucket(rate), Duration::from_secs(170)),
        ("gcra", Quota::gcra(rate), Duration::from_secs(170)),
        // the window's end, 100 s after its first hit
        ("fw", Quota::fixed_window(rate), Duration::from_secs(100)),
    ]
}

#[tokio::test]
async fn an_overspending_stream_is_charged_past_the_limit_on_memory() {
    for (prefix, quota, until) in overspent_quotas() {
        let clock = clock();
        let limiter = limiter(&clock, prefix, [quota]);
        an_overspending_stream_is_charged_past_the_limit(limiter, &clock, until).await;
    }
}

#[tokio::test]
async fn an_overspending_stream_is_charged_past_the_limit_on_redis() {
    let redis = RedisServer::start();
    for (prefix, quota, until) in overspent_quotas() {
        let clock = clock();
        let limiter = RateLimiter::builder()
            .store(RedisStore::new(redis.pool(4)).timeout(GENEROUS))
            .prefix(prefix)
            .clock(clock.clone())
            .quota(quota)
            .build()
            .unwrap();
        an_overspending_stream_is_charged_past_the_limit(limiter, &clock, until).await;
    }
}

/// 2024-02-10 00:00 UTC, in seconds since the epoch.
#[cfg(feature = "calendar")]
const FEB_10: u64 = 1_707_523_200;
/// Local midnight on March 1st 2024 in Paris (CET): 2024-02-29 23:00 UTC.
#[cfg(feature = "calendar")]
const MAR_1_PARIS: u64 = 1_709_247_600;

/// A budget of `n` per calendar month of Paris.
#[cfg(feature = "calendar")]
fn paris_month(n: u64) -> Quota {
    Quota::fixed_window(Rate::per_day(n))
        .calendar(tower_redis_ratelimit::Calendar::month("Europe/Paris"))
}

/// A calendar month's debt ends at local midnight on the 1st.
#[cfg(feature = "calendar")]
#[tokio::test]
async fn an_overspending_stream_on_a_calendar_month_is_denied_until_the_1st() {
    let redis = RedisServer::start();
    for on_redis in [false, true] {
        let clock = ManualClock::new(Duration::from_secs(FEB_10));
        let b = RateLimiter::builder()
            .prefix("month")
            .clock(clock.clone())
            .quota(paris_month(100));
        let limiter = if on_redis {
            b.store(RedisStore::new(redis.pool(4)).timeout(GENEROUS))
        } else {
            b.store(tower_redis_ratelimit::MemoryStore::new())
        }
        .build()
        .unwrap();
        let until = Duration::from_secs(MAR_1_PARIS - FEB_10);
        an_overspending_stream_is_charged_past_the_limit(limiter, &clock, until).await;
    }
}

fn stream_app(limiter: &RateLimiter) -> (Router, mpsc::Sender<(u64, &'static str)>) {
    let layer = RateLimitLayer::new(limiter.clone(), key::Global)
        .cost_from_response(ResponseCost::new().estimate(|_| 20));
    let (tx, rx) = mpsc::channel(8);
    let (_open, gate) = watch::channel(true);
    (app(layer, gate, Arc::new(Mutex::new(Some(rx)))), tx)
}

#[tokio::test]
async fn a_streamed_body_settles_what_was_reported_when_it_ends() {
    let clock = clock();
    let limiter = window(&clock, "stream-end", 100);
    let (app, tx) = stream_app(&limiter);
    let res = send(&app, get_req("/stream")).await;
    assert_eq!(remaining(&limiter).await, 80);
    tx.send((5, "a")).await.unwrap();
    tx.send((6, "b")).await.unwrap();
    drop(tx);
    assert_eq!(text(res).await, "ab");
    // settled before the end of the body was handed out
    assert_eq!(remaining(&limiter).await, 89);
}

#[tokio::test]
async fn a_dropped_stream_settles_what_was_reported_so_far() {
    let clock = clock();
    let limiter = window(&clock, "stream-drop", 100);
    let (app, tx) = stream_app(&limiter);
    let res = send(&app, get_req("/stream")).await;
    tx.send((7, "a")).await.unwrap();
    let mut body = res.into_body();
    let frame = body.frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "a");
    assert_eq!(remaining(&limiter).await, 80);
    drop(body); // the client goes away mid-stream
    eventually_remaining(&limiter, 93).await;
}

#[tokio::test]
async fn a_stream_dropped_before_any_report_keeps_the_estimate() {
    let clock = clock();
    let limiter = window(&clock, "stream-none", 100);
    let (app, _tx) = stream_app(&limiter);
    let res = send(&app, get_req("/stream")).await;
    drop(res);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(remaining(&limiter).await, 80);
}

/// An estimate of 0 reserves 1 (the layer takes at least one unit: an
/// estimate of 0 would be admitted as a peek even with nothing left), and
/// what the response reports (a header, the `UsageReporter` of a stream)
/// is charged all the same, past the limit as a debt; a report of 0 gives
/// the unit back.
async fn zero_estimates_are_charged(limiter: RateLimiter) {
    let layer = RateLimitLayer::new(limiter.clone(), key::Global)
        .cost_from_response(ResponseCost::new().estimate(|_| 0).header(TOKENS));
    let (tx, rx) = mpsc::channel(8);
    let (_open, gate) = watch::channel(true);
    let app = app(layer.clone(), gate, Arc::new(Mutex::new(Some(rx))));
    let res = send(&app, get_req("/tokens/30")).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(text(res).await, "done");
    assert_eq!(
        remaining(&limiter).await,
        70,
        "a header's 30 on an estimate of 0"
    );
    // nothing reported: the unit reserved stands
    let res = send(&app, get_req("/ok")).await;
    assert_eq!(text(res).await, "ok");
    assert_eq!(remaining(&limiter).await, 69);
    // a report of 0: the unit goes back
    let res = send(&app, get_req("/tokens/0")).await;
    assert_eq!(text(res).await, "done");
    assert_eq!(remaining(&limiter).await, 69);
    // a stream reporting 50 on an estimate of 0
    let res = send(&app, get_req("/stream")).await;
    tx.send((20, "a")).await.unwrap();
    tx.send((30, "b")).await.unwrap();
    drop(tx);
    assert_eq!(text(res).await, "ab");
    assert_eq!(
        remaining(&limiter).await,
        19,
        "a stream's 50 on an estimate of 0"
    );
    // past the limit: a debt, and the next request (even of estimate 0) waits
    let res = send(&app, get_req("/tokens/500")).await;
    assert_eq!(text(res).await, "done");
    let res = send(&app, get_req("/tokens/1")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(layer.stats().settle_errors, 0);
}

#[tokio::test]
async fn an_estimate_of_zero_is_charged_what_was_used_on_memory() {
    let clock = clock();
    zero_estimates_are_charged(window(&clock, "zero", 100)).await;
}

#[tokio::test]
async fn an_estimate_of_zero_is_charged_what_was_used_on_redis() {
    let redis = RedisServer::start();
    let limiter = RateLimiter::builder()
        .store(RedisStore::new(redis.pool(4)).timeout(GENEROUS))
        .prefix("zero")
        .clock(clock())
        .quota(Quota::fixed_window(Rate::per_minute(100)).name("minute"))
        .build()
        .unwrap();
    zero_estimates_are_charged(limiter).await;
}

/// `examples/token_budget.rs`'s app on a memory store under a manual clock
/// (no refill), streaming without pause.
fn token_budget_app() -> (Router, RateLimiter) {
    let clock = clock();
    let store = tower_redis_ratelimit::MemoryStore::new();
    let limiter = token_budget::budget_limiter(
        RateLimiter::builder()
            .store(store.clone())
            .clock(clock.clone()),
    )
    .unwrap();
    let guard =
        token_budget::guard_limiter(RateLimiter::builder().store(store).clock(clock)).unwrap();
    let app = token_budget::app(
        limiter.clone(),
        guard,
        token_budget::demo_tenants(),
        Duration::ZERO,
    );
    (app, limiter)
}

/// A request for `path` from `peer` (as `into_make_service_with_connect_info`
/// records it), with an `x-api-key` when given.
fn from_peer(path: &str, peer: [u8; 4], api_key: Option<&str>) -> http::Request<Body> {
    let mut req = http::Request::get(path);
    if let Some(key) = api_key {
        req = req.header("x-api-key", key);
    }
    let mut req = req.body(Body::empty()).unwrap();
    req.extensions_mut()
        .insert(axum::extract::ConnectInfo(std::net::SocketAddr::from((
            peer, 40_000,
        ))));
    req
}

fn as_alice(path: &str) -> http::Request<Body> {
    from_peer(path, [192, 0, 2, 1], Some("alice-key"))
}

async fn tokens_left(limiter: &RateLimiter) -> u64 {
    limiter.get("alice").await.unwrap().remaining()
}

#[tokio::test]
async fn the_token_budget_example_lets_no_client_choose_a_free_or_absurd_estimate() {
    let (app, limiter) = token_budget_app();
    for query in [
        "max_tokens=0",
        "max_tokens=-1",
        "max_tokens=-500",
        "max_tokens=2001",
        "max_tokens=18446744073709551615",
        "max_tokens=99999999999999999999999",
        "max_tokens=abc",
        "max_tokens=",
        "max_tokens",
        "max_tokens=1.5",
        "max_tokens=%30",
        "max_tokens=1&max_tokens=0",
        "max_tokens=10&words=-1",
        "max_tokens=10&words=x",
        "max_tokens=10&words=2001",
    ] {
        let res = send(&app, as_alice(&format!("/v1/complete?{query}&words=5"))).await;
        assert_eq!(res.status(), StatusCode::BAD_REQUEST, "{query}");
    }
    assert_eq!(
        tokens_left(&limiter).await,
        2_000,
        "a rejected request costs nothing"
    );
    // no key, or a made-up one: 401, no budget of its own
    for key in [None, Some("mallory"), Some(""), Some("alice-key ")] {
        let req = from_peer("/v1/complete?max_tokens=10", [192, 0, 2, 2], key);
        assert_eq!(
            send(&app, req).await.status(),
            StatusCode::UNAUTHORIZED,
            "{key:?}"
        );
    }
    // the default estimate (100), settled to the 12 words streamed
    let res = send(&app, as_alice("/v1/complete?words=12")).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(text(res).await.split_whitespace().count(), 12);
    assert_eq!(tokens_left(&limiter).await, 2_000 - 12);
    // a completion stops at max_tokens, and what it streamed is charged
    let res = send(&app, as_alice("/v1/complete?max_tokens=10&words=2000")).await;
    assert_eq!(text(res).await.split_whitespace().count(), 10);
    assert_eq!(tokens_left(&limiter).await, 2_000 - 22);
    let res = send(&app, as_alice("/v1/budget")).await;
    assert_eq!(text(res).await, "1978 of 2000 tokens left\n");
}

#[tokio::test]
async fn the_token_budget_example_charges_a_race_of_parallel_completions() {
    let (app, limiter) = token_budget_app();
    // six at once asking for nothing: all refused before the limiter
    let zeros: Vec<_> = (0..6)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move {
                send(&app, as_alice("/v1/complete?max_tokens=0&words=500"))
                    .await
                    .status()
            })
        })
        .collect();
    for t in zeros {
        assert_eq!(t.await.unwrap(), StatusCode::BAD_REQUEST);
    }
    // six at once asking for 500 each: four fit the 2 000, all four charged
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move {
                let res = send(&app, as_alice("/v1/complete?max_tokens=500&words=500")).await;
                let status = res.status();
                (status, text(res).await.split_whitespace().count())
            })
        })
        .collect();
    let mut ok = 0;
    let mut words = 0;
    for t in tasks {
        let (status, n) = t.await.unwrap();
        if status == StatusCode::OK {
            ok += 1;
            words += n;
        } else {
            assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        }
    }
    assert_eq!((ok, words), (4, 2_000));
    eventually(&limiter, 0).await;
    let res = send(&app, as_alice("/v1/complete?max_tokens=1&words=1")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn the_token_budget_example_limits_key_guesses_per_ip() {
    let (app, limiter) = token_budget_app();
    let attacker = [203, 0, 113, 66];
    // guesses at both routes, /v1/budget included
    let mut refused = 0;
    for i in 0..40 {
        let path = if i % 2 == 0 {
            "/v1/budget"
        } else {
            "/v1/complete?max_tokens=1"
        };
        let guess = format!("guess-{i}");
        match send(&app, from_peer(path, attacker, Some(&guess)))
            .await
            .status()
        {
            StatusCode::UNAUTHORIZED => refused += 1,
            StatusCode::TOO_MANY_REQUESTS => {}
            other => panic!("guess {i}: {other}"),
        }
    }
    // 120 a minute, a failure costing 11
    let per_failure = 1 + token_budget::FAILED_AUTH_COST;
    assert_eq!(refused, token_budget::IP_LIMIT.div_ceil(per_failure));
    // that IP is out, even with a real key; another is not
    let res = send(&app, from_peer("/v1/budget", attacker, Some("alice-key"))).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let res = send(&app, as_alice("/v1/budget")).await;
    assert_eq!(res.status(), StatusCode::OK);
    // the guard's quota is "ip", the budget's "tokens": one entry each
    let res = send(&app, as_alice("/v1/complete?max_tokens=1&words=1")).await;
    let policies: Vec<_> = res
        .headers()
        .get_all("ratelimit-policy")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    let policies = policies.join(", ");
    assert!(policies.contains("\"ip\""), "{policies}");
    assert!(policies.contains("\"tokens\""), "{policies}");
    text(res).await;
    assert_eq!(tokens_left(&limiter).await, 2_000 - 1);
    // without connect info the guard cannot key the request: 500, not admitted
    let mut no_peer = http::Request::get("/v1/budget")
        .header("x-api-key", "alice-key")
        .body(Body::empty())
        .unwrap();
    no_peer.extensions_mut().clear();
    assert_eq!(
        send(&app, no_peer).await.status(),
        StatusCode::INTERNAL_SERVER_ERROR
    );
}

/// `examples/token_budget.rs`'s app with a budget of its 2 000 tokens per
/// calendar month of Paris instead of per minute: each completion reserves
/// its `max_tokens` and is settled to what it streamed (the rest back into
/// the month), and a spent budget is denied until local midnight on the
/// 1st, when it starts whole.
#[cfg(feature = "calendar")]
async fn the_token_budget_example_runs_a_calendar_month_budget(
    limiter: RateLimiter,
    guard: RateLimiter,
    clock: &ManualClock,
) {
    let app = token_budget::app(
        limiter.clone(),
        guard,
        token_budget::demo_tenants(),
        Duration::ZERO,
    );
    let res = send(&app, as_alice("/v1/complete?max_tokens=500&words=120")).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(text(res).await.split_whitespace().count(), 120);
    assert_eq!(tokens_left(&limiter).await, 2_000 - 120, "380 back");
    // more than is left: denied before the completion starts
    let res = send(&app, as_alice("/v1/complete?max_tokens=2000&words=5")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let res = send(&app, as_alice("/v1/complete?max_tokens=1880&words=2000")).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(text(res).await.split_whitespace().count(), 1_880);
    let res = send(&app, as_alice("/v1/budget")).await;
    assert_eq!(text(res).await, "0 of 2000 tokens left\n");
    // spent: denied to local midnight on March 1st
    let res = send(&app, as_alice("/v1/complete?max_tokens=1&words=1")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry = res.headers()["retry-after"].to_str().unwrap().to_owned();
    assert_eq!(retry, (MAR_1_PARIS - FEB_10).to_string());
    clock.set(Duration::from_secs(MAR_1_PARIS) - Duration::from_micros(1));
    let res = send(&app, as_alice("/v1/complete?max_tokens=1&words=1")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    clock.set(Duration::from_secs(MAR_1_PARIS));
    let res = send(&app, as_alice("/v1/complete?max_tokens=2000&words=7")).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(text(res).await.split_whitespace().count(), 7);
    let res = send(&app, as_alice("/v1/budget")).await;
    assert_eq!(text(res).await, "1993 of 2000 tokens left\n");
}

/// The example's budget of [`token_budget::BUDGET`] tokens, a calendar month's.
#[cfg(feature = "calendar")]
fn month_budget(builder: tower_redis_ratelimit::limiter::RateLimiterBuilder) -> RateLimiter {
    builder
        .prefix("tokens")
        .quota(paris_month(token_budget::BUDGET).name("tokens"))
        .build()
        .unwrap()
}

#[cfg(feature = "calendar")]
#[tokio::test]
async fn the_token_budget_example_runs_a_calendar_month_budget_on_memory() {
    let clock = ManualClock::new(Duration::from_secs(FEB_10));
    let store = tower_redis_ratelimit::MemoryStore::new();
    let limiter = month_budget(
        RateLimiter::builder()
            .store(store.clone())
            .clock(clock.clone()),
    );
    let guard =
        token_budget::guard_limiter(RateLimiter::builder().store(store).clock(clock.clone()))
            .unwrap();
    the_token_budget_example_runs_a_calendar_month_budget(limiter, guard, &clock).await;
}

#[cfg(feature = "calendar")]
#[tokio::test]
async fn the_token_budget_example_runs_a_calendar_month_budget_on_redis() {
    let redis = RedisServer::start();
    let clock = ManualClock::new(Duration::from_secs(FEB_10));
    let store = || RedisStore::new(redis.pool(4)).timeout(GENEROUS);
    let limiter = month_budget(RateLimiter::builder().store(store()).clock(clock.clone()));
    let guard =
        token_budget::guard_limiter(RateLimiter::builder().store(store()).clock(clock.clone()))
            .unwrap();
    the_token_budget_example_runs_a_calendar_month_budget(limiter, guard, &clock).await;
}

/// Waits (10 s at most) until alice has `expected` tokens left.
async fn eventually(limiter: &RateLimiter, expected: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokens_left(limiter).await != expected {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} left",
            tokens_left(limiter).await
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A usage header too large for a u64 is charged in full: the longest debt
/// there is, `RateLimiter::MAX_DEBT`, never an error or a free request.
async fn a_huge_usage_is_the_longest_debt(limiter: RateLimiter) {
    let layer = RateLimitLayer::new(limiter.clone(), key::Global)
        .cost_from_response(ResponseCost::new().estimate(|_| 1).header(TOKENS));
    let app = plain_app(layer.clone());
    let res = send(&app, get_req("/huge")).await;
    assert_eq!(text(res).await, "done");
    assert_eq!(layer.stats().settle_errors, 0);
    // 60 per minute: a unit a second, a burst of 60
    let d = limiter.check("global").await.unwrap();
    assert_eq!(
        d.retry_after(),
        Some(RateLimiter::MAX_DEBT - Duration::from_secs(59))
    );
}

/// A usage header given twice is charged its largest count (the first, an
/// upstream's `0`, made the request free).
#[tokio::test]
async fn a_usage_header_given_twice_is_charged_its_largest_count() {
    let clock = clock();
    let limiter = window(&clock, "twice", 100);
    let layer = RateLimitLayer::new(limiter.clone(), key::Global)
        .cost_from_response(ResponseCost::new().estimate(|_| 1).header(TOKENS));
    let res = send(&plain_app(layer.clone()), get_req("/twice")).await;
    assert_eq!(text(res).await, "done");
    assert_eq!(remaining(&limiter).await, 60);
}

#[tokio::test]
async fn a_huge_usage_is_the_longest_debt_on_memory() {
    let clock = clock();
    a_huge_usage_is_the_longest_debt(limiter(&clock, "huge", [Quota::gcra(Rate::per_minute(60))]))
        .await;
}

#[tokio::test]
async fn a_huge_usage_is_the_longest_debt_on_redis() {
    let redis = RedisServer::start();
    let limiter = RateLimiter::builder()
        .store(RedisStore::new(redis.pool(4)).timeout(GENEROUS))
        .prefix("huge")
        .clock(clock())
        .quota(Quota::gcra(Rate::per_minute(60)))
        .build()
        .unwrap();
    a_huge_usage_is_the_longest_debt(limiter).await;
}
