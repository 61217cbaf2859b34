//! The middleware driven in process (axum `oneshot`, `MockConnectInfo`) on
//! the memory store under a manual clock or paused tokio time: its subject is
//! the middleware, not the store. What needs a Redis that fails (down, hung)
//! or counts Redis commands is in `tests/middleware/middleware_redis.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::connect_info::MockConnectInfo;
use axum::routing::get;
use bytes::Bytes;
use common::http::{PEER, get_req, header, make_app, peer, send, text};
use common::memory::clock as hour;
use http::request::Parts;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::BodyExt;
use tokio::sync::mpsc;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_redis_ratelimit::clock::ManualClock;
use tower_redis_ratelimit::middleware::{HeaderStyle, MissingKey, RateLimitOutcome, problem_json};
use tower_redis_ratelimit::{Decision, MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter, key};

/// A limiter on a memory store of its own, under a manual clock.
fn memory_limiter(prefix: &str, quota: Quota) -> RateLimiter {
    common::memory::limiter(&hour(), prefix, [quota])
}

fn clocked_limiter(clock: &ManualClock, quotas: Vec<Quota>) -> RateLimiter {
    common::memory::limiter(clock, "clocked", quotas)
}

#[tokio::test]
async fn allowed_requests_carry_ietf_headers_and_the_handler_sees_the_decision() {
    let limiter = memory_limiter(
        "ietf",
        Quota::fixed_window(Rate::per_minute(3)).name("minute"),
    );
    let app = make_app(RateLimitLayer::new(limiter, peer));

    let res = send(&app, get_req("/")).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(
        header(&res, "ratelimit-policy"),
        Some(r#""minute";q=3;w=60"#)
    );
    let rl = header(&res, "ratelimit").unwrap();
    assert!(rl.starts_with(r#""minute";r=2;t="#), "{rl}");
    assert!(header(&res, "x-ratelimit-limit").is_none());
    assert!(header(&res, "retry-after").is_none());
    assert_eq!(text(res).await, "remaining=2");
}

#[tokio::test]
async fn denials_are_429_with_retry_after_rounded_up_and_the_same_headers() {
    let clock = hour();
    // one request every 2.5 s: a denial right after waits 2.5 s -> "3"
    let limiter = clocked_limiter(
        &clock,
        vec![
            Quota::gcra(Rate::new(2, Duration::from_secs(5)))
                .burst(1)
                .name("slow"),
        ],
    );
    let app = make_app(RateLimitLayer::new(limiter, peer).deny_cache(false));

    assert_eq!(send(&app, get_req("/")).await.status(), StatusCode::OK);
    let res = send(&app, get_req("/")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&res, "retry-after"), Some("3"));
    assert_eq!(header(&res, "ratelimit"), Some(r#""slow";r=0;t=3"#));
    // a bucket of 1 refilled every 2.5 s: one request per 3 s, rounded up
    assert_eq!(header(&res, "ratelimit-policy"), Some(r#""slow";q=1;w=3"#));
    assert_eq!(
        header(&res, "content-type"),
        Some("text/plain; charset=utf-8")
    );
    let body = text(res).await;
    assert!(
        body.contains("\"slow\"") && body.contains("retry in 3 s"),
        "{body}"
    );

    // 2.2 s later: 300 ms left, still "1", never "0"
    clock.advance(Duration::from_millis(2_200));
    let res = send(&app, get_req("/")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&res, "retry-after"), Some("1"));

    clock.advance(Duration::from_millis(300));
    assert_eq!(send(&app, get_req("/")).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn every_header_style() {
    let clock = hour();
    for (i, style) in [
        HeaderStyle::Ietf,
        HeaderStyle::Legacy,
        HeaderStyle::Both,
        HeaderStyle::None,
    ]
    .into_iter()
    .enumerate()
    {
        let limiter = clocked_limiter(
            &clock,
            vec![
                Quota::fixed_window(Rate::per_minute(1)).name("minute"),
                Quota::fixed_window(Rate::per_day(100)).name("day"),
            ],
        );
        let key = format!("style-{i}");
        let app = make_app(
            RateLimitLayer::new(limiter, move |_: &Parts| Some(key.clone())).headers(style),
        );
        let ok = send(&app, get_req("/")).await;
        let denied = send(&app, get_req("/")).await;
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(&denied, "retry-after"), Some("60"), "{style:?}");
        let ietf = matches!(style, HeaderStyle::Ietf | HeaderStyle::Both);
        let legacy = matches!(style, HeaderStyle::Legacy | HeaderStyle::Both);
        for res in [&ok, &denied] {
            assert_eq!(res.headers().contains_key("ratelimit"), ietf, "{style:?}");
            assert_eq!(res.headers().contains_key("ratelimit-policy"), ietf);
            assert_eq!(res.headers().contains_key("x-ratelimit-limit"), legacy);
            assert_eq!(res.headers().contains_key("x-ratelimit-remaining"), legacy);
            assert_eq!(res.headers().contains_key("x-ratelimit-reset"), legacy);
        }
        if ietf {
            assert_eq!(
                header(&ok, "ratelimit-policy"),
                Some(r#""minute";q=1;w=60, "day";q=100;w=86400"#)
            );
            assert_eq!(header(&ok, "ratelimit"), Some(r#""minute";r=0;t=60"#));
            assert_eq!(header(&denied, "ratelimit"), Some(r#""minute";r=0;t=60"#));
        }
        if legacy {
            assert_eq!(header(&ok, "x-ratelimit-limit"), Some("1"));
            assert_eq!(header(&ok, "x-ratelimit-remaining"), Some("0"));
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            let reset: u64 = header(&denied, "x-ratelimit-reset")
                .unwrap()
                .parse()
                .unwrap();
            assert!((now + 59..=now + 61).contains(&reset), "{reset} vs {now}");
        }
    }
}

#[tokio::test]
async fn cost_weighs_requests_and_bypass_skips_the_limiter() {
    let limiter = memory_limiter(
        "cost",
        Quota::fixed_window(Rate::per_minute(10)).name("minute"),
    );
    let app = make_app(
        RateLimitLayer::new(limiter, peer)
            .cost(|p: &Parts| {
                p.headers
                    .get("x-cost")
                    .and_then(|v| v.to_str().ok()?.parse().ok())
                    .unwrap_or(1)
            })
            .bypass(|p: &Parts| p.uri.path() == "/health"),
    );
    let weighted = Request::get("/")
        .header("x-cost", "4")
        .body(Body::empty())
        .unwrap();
    let res = send(&app, weighted).await;
    assert_eq!(text(res).await, "remaining=6");
    let peek = Request::get("/")
        .header("x-cost", "0")
        .body(Body::empty())
        .unwrap();
    let res = send(&app, peek).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(text(res).await, "remaining=5", "a cost of 0 counts as 1");
    for _ in 0..50 {
        let res = send(&app, get_req("/health")).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert!(
            !res.headers().contains_key("ratelimit"),
            "bypassed: no headers"
        );
    }
    let too_heavy = Request::get("/")
        .header("x-cost", "11")
        .body(Body::empty())
        .unwrap();
    let res = send(&app, too_heavy).await;
    assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE, "never fits");
    assert_eq!(header(&res, "retry-after"), None, "no wait would admit it");
    assert_eq!(text(send(&app, get_req("/")).await).await, "remaining=4");
}

/// A request whose cost exceeds the capacity can never be admitted: `413`
/// without `Retry-After` (a 429 would have clients retry it forever), in
/// every form; a request that fits later still gets its 429 and Retry-After.
#[tokio::test]
async fn a_request_that_can_never_fit_gets_413_without_retry_after_in_every_form() {
    let limiter = memory_limiter(
        "never-fits",
        Quota::fixed_window(Rate::per_minute(10)).name("minute"),
    );
    let cost = |p: &Parts| {
        p.headers
            .get("x-cost")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(1)
    };
    let heavy = |cost: u64, grpc: bool| {
        let mut req = Request::get("/").header("x-cost", cost.to_string());
        if grpc {
            req = req
                .version(http::Version::HTTP_2)
                .header("content-type", "application/grpc");
        }
        req.body(Body::empty()).unwrap()
    };
    let plain = make_app(RateLimitLayer::new(limiter.clone(), peer).cost(cost));
    let res = send(&plain, heavy(11, false)).await;
    assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(header(&res, "retry-after"), None);
    assert!(header(&res, "ratelimit").is_some(), "the headers stay");
    assert_eq!(
        text(res).await,
        "Content Too Large: the request's cost exceeds the \"minute\" limit of 10: \
         it can never be admitted\n"
    );
    let grpc = send(&plain, heavy(u64::MAX, true)).await;
    assert_eq!(grpc.status(), StatusCode::OK);
    assert_eq!(header(&grpc, "grpc-status"), Some("3"), "INVALID_ARGUMENT");
    assert_eq!(header(&grpc, "retry-after"), None);

    let json = make_app(
        RateLimitLayer::new(limiter, peer)
            .cost(cost)
            .deny_response(problem_json),
    );
    let res = send(&json, heavy(11, false)).await;
    assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(header(&res, "retry-after"), None);
    let body = text(res).await;
    assert!(
        body.contains(r#""status":413"#) && body.contains(r#""retry_after":null"#),
        "{body}"
    );
    // one that fits, once the window frees up: 429 and when to retry
    let res = send(&json, heavy(10, false)).await;
    assert_eq!(res.status(), StatusCode::OK);
    let res = send(&json, heavy(10, false)).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&res, "retry-after"), Some("60"));
    assert!(text(res).await.contains(r#""status":429"#));
}

#[tokio::test]
async fn a_missing_peer_address_is_a_500_by_default_or_skipped_or_replaced() {
    let store = MemoryStore::new();
    let limiter = common::memory::limiter_on(
        &store,
        &hour(),
        "missing",
        [Quota::fixed_window(Rate::per_minute(1)).name("minute")],
    );
    // no connect info at all: a misconfigured server
    let bare = |layer: RateLimitLayer| {
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer)
    };

    let app = bare(RateLimitLayer::new(limiter.clone(), key::PeerIp));
    let res = send(&app, get_req("/")).await;
    assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(store.is_empty(), "no store call");

    let app = bare(
        RateLimitLayer::new(limiter.clone(), key::PeerIp)
            .on_missing_key(MissingKey::reject(StatusCode::BAD_REQUEST)),
    );
    assert_eq!(
        send(&app, get_req("/")).await.status(),
        StatusCode::BAD_REQUEST
    );

    let app =
        bare(RateLimitLayer::new(limiter.clone(), key::PeerIp).on_missing_key(MissingKey::skip()));
    for _ in 0..3 {
        let res = send(&app, get_req("/")).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert!(!res.headers().contains_key("ratelimit"));
    }

    let app = bare(
        RateLimitLayer::new(limiter, key::PeerIp).on_missing_key(MissingKey::fallback(key::Global)),
    );
    assert_eq!(send(&app, get_req("/")).await.status(), StatusCode::OK);
    assert_eq!(
        send(&app, get_req("/")).await.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "everyone without a key shares the global key"
    );
}

#[tokio::test]
async fn the_deny_response_can_be_replaced_and_still_gets_the_headers() {
    let limiter = memory_limiter(
        "problem",
        Quota::fixed_window(Rate::per_minute(1)).name("minute"),
    );
    let app = make_app(RateLimitLayer::new(limiter, peer).deny_response(problem_json));
    send(&app, get_req("/")).await;
    let res = send(&app, get_req("/")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(&res, "content-type"),
        Some("application/problem+json")
    );
    let retry = header(&res, "retry-after").unwrap().to_owned();
    assert!(res.headers().contains_key("ratelimit"));
    let body = text(res).await;
    assert!(body.contains(r#""status":429"#), "{body}");
    assert!(
        body.contains(&format!(r#""retry_after":{retry}"#)),
        "{body}"
    );

    let limiter = memory_limiter("teapot", Quota::fixed_window(Rate::per_minute(1)));
    let app = make_app(RateLimitLayer::new(limiter, peer).deny_response(
        |_: &Parts, d: &Decision| {
            let mut res = Response::new(format!("slow down, {} left", d.remaining()));
            *res.status_mut() = StatusCode::IM_A_TEAPOT;
            res
        },
    ));
    send(&app, get_req("/")).await;
    let res = send(&app, get_req("/")).await;
    assert_eq!(res.status(), StatusCode::IM_A_TEAPOT);
    assert!(res.headers().contains_key("retry-after"));
    assert_eq!(text(res).await, "slow down, 0 left");
}

#[tokio::test]
async fn the_deny_cache_lets_the_key_in_again_when_its_denial_ends() {
    let clock = hour();
    let limiter = clocked_limiter(
        &clock,
        vec![Quota::fixed_window(Rate::per_second(2)).name("second")],
    );
    let layer = RateLimitLayer::new(limiter, peer);
    let app = make_app(layer.clone());
    for _ in 0..2 {
        assert_eq!(send(&app, get_req("/")).await.status(), StatusCode::OK);
    }
    for _ in 0..10 {
        assert_eq!(
            send(&app, get_req("/")).await.status(),
            StatusCode::TOO_MANY_REQUESTS
        );
    }
    assert_eq!(layer.stats().denied, 1);
    assert_eq!(layer.stats().deny_cache_hits, 9);
    clock.advance(Duration::from_millis(999));
    let res = send(&app, get_req("/")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&res, "retry-after"), Some("1"));
    assert_eq!(layer.stats().deny_cache_hits, 10);
    clock.advance(Duration::from_millis(1));
    assert_eq!(send(&app, get_req("/")).await.status(), StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn a_leaky_bucket_delay_is_waited_in_full_and_a_request_beyond_the_queue_is_denied_at_once() {
    // Decisions on a manual clock that stands still, the waits in paused
    // tokio time. One request a minute, a queue of 3: slots far beyond any
    // default bound on a delay (the old `max_delay` served them early, at 30 s).
    let limiter = RateLimiter::builder()
        .store(MemoryStore::new())
        .clock(ManualClock::new(Duration::from_secs(3_600)))
        .prefix("leaky-full")
        .quota(
            Quota::leaky_bucket(Rate::per_minute(1))
                .burst(3)
                .name("queue"),
        )
        .build()
        .unwrap();
    let served = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = served.clone();
    let svc = ServiceBuilder::new()
        .layer(RateLimitLayer::new(limiter, key::Global))
        .service_fn(move |req: Request<Body>| {
            let log = log.clone();
            async move {
                let outcome = req.extensions().get::<RateLimitOutcome>().unwrap();
                let delay = outcome.decision().unwrap().delay();
                log.lock()
                    .unwrap()
                    .push((tokio::time::Instant::now(), delay));
                Ok::<_, Infallible>(Response::new(Body::empty()))
            }
        });
    let start = tokio::time::Instant::now();
    let calls: Vec<_> = (0..5)
        .map(|_| {
            let call = svc.clone().oneshot(get_req("/"));
            async move {
                let res = call.await.unwrap();
                (res.status(), tokio::time::Instant::now() - start)
            }
        })
        .collect();
    let mut answered = futures_join(calls).await;
    answered.sort_by_key(|(status, at)| (*at, *status));
    let minute = Duration::from_secs(60);
    assert_eq!(
        answered,
        vec![
            // beyond the queue: denied at once, never delayed
            (StatusCode::OK, Duration::ZERO),
            (StatusCode::TOO_MANY_REQUESTS, Duration::ZERO),
            (StatusCode::TOO_MANY_REQUESTS, Duration::ZERO),
            (StatusCode::OK, minute),
            (StatusCode::OK, 2 * minute),
        ]
    );
    let mut served = served.lock().unwrap().clone();
    served.sort();
    let at: Vec<(Duration, Option<Duration>)> =
        served.iter().map(|(t, d)| (*t - start, *d)).collect();
    // Each admitted request reaches the service exactly at its slot, not earlier.
    assert_eq!(
        at,
        vec![
            (Duration::ZERO, None),
            (minute, Some(minute)),
            (2 * minute, Some(2 * minute)),
        ]
    );
}

/// Runs futures concurrently on this task.
async fn futures_join<F: std::future::Future>(futs: Vec<F>) -> Vec<F::Output> {
    let handles: Vec<_> = futs.into_iter().map(Box::pin).collect();
    let mut handles: Vec<_> = handles.into_iter().map(Some).collect();
    let mut out: Vec<Option<F::Output>> = (0..handles.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (h, o) in handles.iter_mut().zip(out.iter_mut()) {
            if let Some(f) = h {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => {
                        *o = Some(v);
                        *h = None;
                    }
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(Option::unwrap).collect()
}

/// A streaming body: frames sent through a channel; records when it is dropped.
struct Stream {
    rx: mpsc::Receiver<Bytes>,
    dropped: Arc<AtomicBool>,
}

impl http_body::Body for Stream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        self.rx
            .poll_recv(cx)
            .map(|b| b.map(|b| Ok(http_body::Frame::data(b))))
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

/// Waits (bounded) until `key` has `want` leases free again.
async fn until_free(limiter: &RateLimiter, key: &str, want: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let left = limiter.peek(key).await.unwrap().remaining();
        if left == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "lease not released: {left} free, want {want}"
        );
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test]
async fn a_concurrency_lease_is_released_when_a_streaming_body_is_dropped_mid_way() {
    let limiter = memory_limiter("conc", Quota::concurrency(1).name("inflight"));
    let senders = Arc::new(std::sync::Mutex::new(Vec::new()));
    let dropped = Arc::new(AtomicBool::new(false));
    let (s, d) = (senders.clone(), dropped.clone());
    let app = Router::new()
        .route(
            "/",
            get(move || {
                let (tx, rx) = mpsc::channel(4);
                s.lock().unwrap().push(tx);
                let body = Body::new(Stream {
                    rx,
                    dropped: d.clone(),
                });
                async move { Response::new(body) }
            }),
        )
        .layer(RateLimitLayer::new(limiter.clone(), peer))
        .layer(MockConnectInfo(SocketAddr::from(PEER)));
    let key = "203.0.113.7";

    let res = send(&app, get_req("/")).await;
    assert_eq!(res.status(), StatusCode::OK);
    // a concurrency quota has no time of reset: no `t`
    assert_eq!(header(&res, "ratelimit"), Some(r#""inflight";r=0"#));
    let tx = senders.lock().unwrap()[0].clone();
    tx.send(Bytes::from_static(b"first chunk")).await.unwrap();
    let mut body = res.into_body();
    let frame = body.frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "first chunk");

    // While the body streams, the slot is taken.
    let res = send(&app, get_req("/")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limiter.peek(key).await.unwrap().remaining(), 0);

    // The client goes away mid-stream.
    drop(body);
    assert!(dropped.load(Ordering::SeqCst));
    until_free(&limiter, key, 1).await;

    // Not cached as a denial: the next request gets the slot at once.
    let res = send(&app, get_req("/")).await;
    assert_eq!(res.status(), StatusCode::OK);
    // A body read to its end releases the lease too.
    let tx = senders.lock().unwrap()[1].clone();
    tx.send(Bytes::from_static(b"all")).await.unwrap();
    drop(tx);
    senders.lock().unwrap().clear();
    let body = res.into_body();
    let (tx_done, rx_done) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        // keep the body alive after its end: release must come from the end, not the drop
        let mut body = body;
        while let Some(f) = body.frame().await {
            f.unwrap();
        }
        let _ = rx_done.await;
        drop(body);
    });
    until_free(&limiter, key, 1).await;
    let _ = tx_done.send(());
}

#[tokio::test]
async fn a_concurrency_lease_is_released_when_the_response_future_is_dropped() {
    let limiter = memory_limiter("conc-drop", Quota::concurrency(1).name("inflight"));
    let entered = Arc::new(tokio::sync::Notify::new());
    let calls = Arc::new(AtomicUsize::new(0));
    let (e, c) = (entered.clone(), calls.clone());
    let mut svc = ServiceBuilder::new()
        .layer(RateLimitLayer::new(limiter.clone(), key::Global))
        .service_fn(move |_req: Request<Body>| {
            let (e, c) = (e.clone(), c.clone());
            async move {
                c.fetch_add(1, Ordering::SeqCst);
                e.notify_one();
                std::future::pending::<()>().await;
                Ok::<_, Infallible>(Response::new(Body::empty()))
            }
        });
    let fut = svc.ready().await.unwrap().call(get_req("/"));
    let task = tokio::spawn(fut);
    entered.notified().await;
    assert_eq!(limiter.peek("global").await.unwrap().remaining(), 0);
    task.abort();
    let _ = task.await;
    until_free(&limiter, "global", 1).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn grpc_denials_are_trailers_only_resource_exhausted_with_rate_limit_metadata() {
    let limiter = memory_limiter(
        "grpc",
        Quota::fixed_window(Rate::per_minute(1)).name("minute"),
    );
    let app = make_app(RateLimitLayer::new(limiter, peer));
    // a gRPC call: HTTP/2 and a gRPC content type
    let grpc = || {
        Request::post("/")
            .version(http::Version::HTTP_2)
            .header("content-type", "application/grpc+proto")
            .body(Body::empty())
            .unwrap()
    };
    send(&app, grpc()).await;
    let res = send(&app, grpc()).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(header(&res, "content-type"), Some("application/grpc"));
    assert_eq!(header(&res, "grpc-status"), Some("8"));
    let message = header(&res, "grpc-message").unwrap();
    assert!(message.contains("minute"), "{message}");
    assert!(res.headers().contains_key("ratelimit"));
    assert!(res.headers().contains_key("retry-after"));
    let body = res.into_body().collect().await.unwrap();
    assert!(body.trailers().is_none());
    assert!(body.to_bytes().is_empty(), "trailers-only: no body");
}

#[tokio::test]
async fn malformed_and_non_utf8_header_values_are_limited_not_rejected() {
    let limiter = memory_limiter(
        "bytes",
        Quota::fixed_window(Rate::per_minute(1)).name("minute"),
    );
    // Key: the raw bytes of a header, whatever they are.
    let raw_key = |p: &Parts| p.headers.get("x-api-key").map(|v| v.as_bytes().to_vec());
    let app = make_app(
        RateLimitLayer::new(limiter.clone(), raw_key)
            .on_missing_key(MissingKey::reject(StatusCode::UNAUTHORIZED)),
    );
    let with = |v: &[u8]| {
        let mut req = get_req("/");
        req.headers_mut()
            .insert("x-api-key", HeaderValue::from_bytes(v).unwrap());
        // a content type that is not even UTF-8 is simply not gRPC
        req.headers_mut().insert(
            "content-type",
            HeaderValue::from_bytes(b"application/\xffgrpc").unwrap(),
        );
        req
    };
    for key in [&b"\xff\xfe\xfd"[..], b"{slot}", b"a\tb", &[b'k'; 4_000][..]] {
        assert_eq!(send(&app, with(key)).await.status(), StatusCode::OK);
        let res = send(&app, with(key)).await;
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(res.headers().contains_key("retry-after"));
    }
    assert_eq!(
        send(&app, get_req("/")).await.status(),
        StatusCode::UNAUTHORIZED
    );
    // Every storage key is hashed or verbatim-safe: no braces steering the
    // slot, nothing huge. (That Redis holds these keys with a TTL is
    // `tests/middleware/middleware_redis.rs`.)
    for key in [&b"\xff\xfe\xfd"[..], b"{slot}", b"a\tb", &[b'k'; 4_000][..]] {
        for k in limiter.storage_keys(key) {
            assert!(k.len() < 200, "{k}");
            assert_eq!(k.matches('{').count(), 1, "{k}");
        }
    }
}

#[tokio::test]
async fn works_with_route_layer_and_per_route_layers() {
    let layer = |prefix: &str| {
        RateLimitLayer::new(
            memory_limiter(prefix, Quota::fixed_window(Rate::per_minute(1))),
            peer,
        )
    };
    let app = Router::new()
        .route(
            "/per-route",
            get(|| async { "one route" }).layer(layer("per-route")),
        )
        .merge(
            Router::new()
                .route("/grouped", get(|| async { "a group" }))
                .route_layer(layer("grouped")),
        )
        .route("/free", get(|| async { "free" }))
        .layer(MockConnectInfo(SocketAddr::from(PEER)));
    for path in ["/per-route", "/grouped"] {
        let res = send(&app, get_req(path)).await;
        assert_eq!(res.status(), StatusCode::OK, "{path}");
        assert!(res.headers().contains_key("ratelimit"));
        assert_eq!(
            send(&app, get_req(path)).await.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "{path}"
        );
    }
    for _ in 0..3 {
        let res = send(&app, get_req("/free")).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert!(!res.headers().contains_key("ratelimit"));
    }
    let res = send(&app, get_req("/nope")).await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    assert!(!res.headers().contains_key("ratelimit"));
}

#[cfg(feature = "tracing")]
#[tokio::test(flavor = "current_thread")]
async fn denials_are_traced_with_their_quota() {
    let log = common::logs::capture();
    let limiter = memory_limiter(
        "traced",
        Quota::fixed_window(Rate::per_minute(1)).name("minute"),
    );
    let app = make_app(RateLimitLayer::new(limiter, peer));
    send(&app, get_req("/")).await;
    assert_eq!(
        send(&app, get_req("/")).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    let log = log.text();
    assert!(
        log.contains("rate limited") && log.contains("quota=minute"),
        "{log}"
    );
}

#[test]
fn layer_service_future_and_body_are_send_and_the_layer_and_service_are_clone_sync() {
    fn clone_send_sync<T: Clone + Send + Sync + 'static>() {}
    fn send<T: Send + 'static>() {}
    type Svc = tower_redis_ratelimit::middleware::RateLimit<axum::routing::Route>;
    clone_send_sync::<RateLimitLayer>();
    clone_send_sync::<Svc>();
    send::<<Svc as Service<Request<Body>>>::Future>();
    send::<tower_redis_ratelimit::middleware::ResponseBody<Body>>();
}

#[tokio::test]
async fn an_unblock_takes_effect_at_once_through_the_layer() {
    let clock = hour();
    let limiter = RateLimiter::builder()
        .store(MemoryStore::new())
        .clock(clock.clone())
        .prefix("unblock")
        .blocking()
        .quota(Quota::gcra(Rate::per_minute(60)).name("minute"))
        .build()
        .unwrap();
    let app = make_app(RateLimitLayer::new(limiter.clone(), key::Global));
    assert_eq!(send(&app, get_req("/")).await.status(), StatusCode::OK);
    limiter
        .block("global", Duration::from_secs(3_600))
        .await
        .unwrap();
    for _ in 0..3 {
        let res = send(&app, get_req("/")).await;
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(&res, "retry-after"), Some("3600"));
    }
    limiter.unblock("global").await.unwrap();
    // no cached denial outlives the unblock
    assert_eq!(send(&app, get_req("/")).await.status(), StatusCode::OK);
}

/// A cost of 0 from the layer's closure counts as 1: it cannot make a
/// request free once the limit is reached, nor run one past a concurrency
/// quota without a lease (it was admitted as a peek: 12 in flight on a
/// limit of 2).
#[tokio::test]
async fn a_cost_of_zero_counts_as_one_and_never_walks_past_a_limit() {
    let zero = |_: &Parts| 0;
    let limiter = memory_limiter(
        "cost-zero",
        Quota::fixed_window(Rate::per_minute(2)).name("minute"),
    );
    let app = make_app(RateLimitLayer::new(limiter, peer).cost(zero));
    for i in 0..2 {
        assert_eq!(
            send(&app, get_req("/")).await.status(),
            StatusCode::OK,
            "#{i}"
        );
    }
    for i in 0..5 {
        let res = send(&app, get_req("/")).await;
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS, "#{i}");
    }

    // in flight: a concurrency quota of 2 holds 2 requests of cost 0, no more
    let limiter = memory_limiter("cost-zero-leases", Quota::concurrency(2));
    let release = Arc::new(tokio::sync::Notify::new());
    let entered = Arc::new(AtomicUsize::new(0));
    let app = {
        let (release, entered) = (release.clone(), entered.clone());
        Router::new()
            .route(
                "/",
                get(move || {
                    let (release, entered) = (release.clone(), entered.clone());
                    async move {
                        entered.fetch_add(1, Ordering::SeqCst);
                        release.notified().await;
                        "done"
                    }
                }),
            )
            .layer(RateLimitLayer::new(limiter, peer).cost(zero))
            .layer(MockConnectInfo(SocketAddr::from(PEER)))
    };
    let held: Vec<_> = (0..2)
        .map(|_| tokio::spawn(send_owned(app.clone())))
        .collect();
    while entered.load(Ordering::SeqCst) < 2 {
        tokio::task::yield_now().await;
    }
    let third = send(&app, get_req("/")).await;
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(entered.load(Ordering::SeqCst), 2, "the third never ran");
    release.notify_waiters();
    for h in held {
        assert_eq!(h.await.unwrap(), StatusCode::OK);
    }
}

async fn send_owned(app: Router) -> StatusCode {
    send(&app, get_req("/")).await.status()
}
