//! Concurrency leases over real sockets: a client that has read a whole
//! response is never denied by that response's own lease.
//!
//! An axum server on a loopback port (with connect info), a hyper client
//! sending one request after another over ONE keep-alive connection, each
//! body read to its end before the next request is sent; a limit of one
//! request in flight per peer, on the memory store and on a private
//! redis-server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use bytes::Bytes;
use common::RedisServer;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tower_redis_ratelimit::key::PeerIp;
use tower_redis_ratelimit::middleware::FailurePolicy;
use tower_redis_ratelimit::store::Store;
use tower_redis_ratelimit::{MemoryStore, Quota, RateLimitLayer, RateLimiter, RedisStore};

/// A store timeout no loaded test machine reaches: a timed-out call would
/// fail open and hide a held lease. Timeouts have their own tests.
const GENEROUS: Duration = Duration::from_secs(10);

/// How many request/response cycles each test runs.
const CYCLES: usize = 200;

fn limiter(store: impl Store, prefix: &str) -> RateLimiter {
    RateLimiter::builder()
        .store(store)
        .prefix(prefix)
        .quota(Quota::concurrency(1).name("inflight"))
        .build()
        .unwrap()
}

/// Routes whose bodies end in every way a body can: a full body (its end
/// known after its one frame), an empty body (known to be over before it is
/// polled), a stream of chunks (its end known only when it returns `None`).
fn app(limiter: RateLimiter) -> Router {
    Router::new()
        .route("/text", get(|| async { "hello" }))
        .route("/empty", get(|| async {}))
        .route(
            "/stream",
            get(|| async { Body::new(Chunks(["one ", "two ", "three"].into())) }),
        )
        .layer(RateLimitLayer::new(limiter, PeerIp).on_store_error(FailurePolicy::Closed))
}

/// A body of several chunks that learns it is over only when it runs out
/// (`is_end_stream` stays false: the default).
struct Chunks(VecDeque<&'static str>);

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        Poll::Ready(
            self.0
                .pop_front()
                .map(|c| Ok(http_body::Frame::data(Bytes::from_static(c.as_bytes())))),
        )
    }
}

/// Serves `app` on a free loopback port, with connect info.
async fn serve(app: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    addr
}

/// `CYCLES` requests over one keep-alive connection, in turn, through the
/// text, empty and stream routes; each response read to its end before the
/// next request. Returns every status seen.
async fn cycles(addr: SocketAddr) -> Vec<(usize, &'static str, StatusCode)> {
    cycles_through(addr, &["/text", "/empty", "/stream"]).await
}

/// `CYCLES` requests over one keep-alive connection, in turn through
/// `paths`; each response read to its end before the next request.
async fn cycles_through(
    addr: SocketAddr,
    paths: &[&'static str],
) -> Vec<(usize, &'static str, StatusCode)> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut seen = Vec::new();
    for i in 0..CYCLES {
        let path = paths[i % paths.len()];
        sender.ready().await.expect("the one connection stays open");
        let req = Request::get(path)
            .header("host", addr.to_string())
            .body(Empty::<Bytes>::new())
            .unwrap();
        let res = sender.send_request(req).await.unwrap();
        let status = res.status();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        if status == StatusCode::OK {
            let want: &[u8] = match path {
                "/text" => b"hello",
                "/empty" => b"",
                _ => b"one two three",
            };
            assert_eq!(body, want, "{path}");
        }
        seen.push((i, path, status));
    }
    seen
}

fn assert_never_denied(seen: &[(usize, &'static str, StatusCode)]) {
    let denied: Vec<_> = seen.iter().filter(|s| s.2 != StatusCode::OK).collect();
    assert!(
        denied.is_empty(),
        "{} of {CYCLES} requests not answered 200 (request, path, status): {denied:?}",
        denied.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_alive_client_reading_each_body_to_its_end_is_never_denied_on_the_memory_store() {
    let limiter = limiter(MemoryStore::new(), "lease-memory");
    let addr = serve(app(limiter.clone())).await;
    assert_never_denied(&cycles(addr).await);
    assert_eq!(limiter.peek("ip:127.0.0.1").await.unwrap().remaining(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_alive_client_reading_each_body_to_its_end_is_never_denied_on_redis() {
    let redis = RedisServer::start();
    let limiter = limiter(
        RedisStore::new(redis.pool(4)).timeout(GENEROUS),
        "lease-redis",
    );
    let addr = serve(app(limiter.clone())).await;
    assert_never_denied(&cycles(addr).await);
    assert_eq!(limiter.peek("ip:127.0.0.1").await.unwrap().remaining(), 1);
}

/// The stall a response written in two parts (its head, then after the
/// release its body) meets without `TCP_NODELAY`: Nagle's algorithm holds the
/// body until the client ACKs the head, which a delayed ACK puts off for
/// some 40 ms on Linux.
const NAGLE_STALL: Duration = Duration::from_millis(40);

/// axum::serve does not set `TCP_NODELAY`: the lease of a full body is
/// released before the response is returned, its one frame ready, so head
/// and body go out together and no response waits for a delayed ACK.
///
/// Not a speed benchmark: a regression guard against that stall on every
/// response (`CYCLES` × 40 ms = 8 s), with a 2× margin (4 s); the cycles take
/// well under a second on an idle machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_bodies_on_redis_without_nodelay_are_not_held_back_by_the_release() {
    let redis = RedisServer::start();
    let limiter = limiter(
        RedisStore::new(redis.pool(4)).timeout(GENEROUS),
        "lease-redis-nagle",
    );
    let addr = serve(app(limiter.clone())).await;
    let started = std::time::Instant::now();
    let seen = cycles_through(addr, &["/text"]).await;
    let took = started.elapsed();
    assert_never_denied(&seen);
    let bound = NAGLE_STALL * CYCLES as u32 / 2;
    assert!(
        took < bound,
        "{CYCLES} full-body responses took {took:?} (bound {bound:?}): \
         head and body written apart, each waiting for a delayed ACK"
    );
    assert_eq!(limiter.peek("ip:127.0.0.1").await.unwrap().remaining(), 1);
}

#[tokio::test]
async fn a_release_that_fails_still_hands_out_the_whole_body() {
    use tower::{ServiceBuilder, ServiceExt};
    let mut redis = RedisServer::start();
    let limiter = limiter(
        RedisStore::new(redis.pool(2)).timeout(GENEROUS),
        "lease-failed-release",
    );
    let svc = ServiceBuilder::new()
        .layer(RateLimitLayer::new(
            limiter,
            tower_redis_ratelimit::key::Global,
        ))
        .service_fn(|_req: Request<Body>| async {
            Ok::<_, Infallible>(http::Response::new(Body::new(Chunks(
                ["one ", "two ", "three"].into(),
            ))))
        });
    let res = svc
        .oneshot(Request::get("/").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    // The store is gone before the body ends: the release fails (logged; the
    // lease expires after its lease timeout), the body is still whole.
    redis.kill();
    let body = tokio::time::timeout(GENEROUS, res.into_body().collect())
        .await
        .expect("a failed release does not hold the body")
        .unwrap()
        .to_bytes();
    assert_eq!(body, "one two three");
}

/// One step of a [`Script`]ed body.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// `Pending` once (waking at once).
    Pending,
    Data(&'static str),
    Trailers,
    Fail,
}

/// A body that plays its steps; `end_known`: `is_end_stream` turns true with
/// its last step (a full body), else it learns it is over only when it runs
/// out.
struct Script {
    steps: VecDeque<Step>,
    end_known: bool,
}

impl http_body::Body for Script {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
        Poll::Ready(match self.steps.pop_front() {
            None => None,
            Some(Step::Pending) => {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Some(Step::Data(d)) => {
                Some(Ok(http_body::Frame::data(Bytes::from_static(d.as_bytes()))))
            }
            Some(Step::Trailers) => {
                let mut trailers = http::HeaderMap::new();
                trailers.insert("x-done", "yes".parse().unwrap());
                Some(Ok(http_body::Frame::trailers(trailers)))
            }
            Some(Step::Fail) => Some(Err(std::io::Error::other("broken body"))),
        })
    }

    fn is_end_stream(&self) -> bool {
        self.end_known && self.steps.is_empty()
    }
}

/// A service answering every request with a `Script` of `steps`, behind a
/// limit of one in flight on the memory store; and that limiter.
fn scripted(
    prefix: &str,
    steps: &[Step],
    end_known: bool,
) -> (
    impl tower::Service<
        Request<Body>,
        Response = http::Response<tower_redis_ratelimit::middleware::ResponseBody<Script>>,
        Error = Infallible,
    >,
    RateLimiter,
) {
    let limiter = limiter(MemoryStore::new(), prefix);
    let steps: VecDeque<Step> = steps.iter().copied().collect();
    let svc = tower::ServiceBuilder::new()
        .layer(RateLimitLayer::new(
            limiter.clone(),
            tower_redis_ratelimit::key::Global,
        ))
        .service_fn(move |_req: Request<Body>| {
            let steps = steps.clone();
            async move { Ok::<_, Infallible>(http::Response::new(Script { steps, end_known })) }
        });
    (svc, limiter)
}

async fn in_flight(limiter: &RateLimiter) -> u64 {
    1 - limiter.peek("global").await.unwrap().remaining()
}

/// Waits (bounded) for a lease released in the background.
async fn released(limiter: &RateLimiter) {
    tokio::time::timeout(GENEROUS, async {
        while in_flight(limiter).await != 0 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the lease is released in the background");
}

#[tokio::test]
async fn a_body_whole_in_its_first_frame_is_released_before_the_response_is_returned() {
    use tower::ServiceExt;
    for (name, steps) in [
        ("data", &[Step::Data("hello")][..]),
        ("trailers", &[Step::Trailers][..]),
        (
            "pending-then-data",
            &[Step::Pending, Step::Data("hello")][..],
        ),
    ] {
        let prefix = format!("lease-first-{name}");
        let (svc, limiter) = scripted(&prefix, steps, true);
        let res = svc
            .oneshot(Request::get("/").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{name}");
        let primed = !matches!(steps[0], Step::Pending);
        if primed {
            // Released already; the frame is ready, the body not over yet.
            assert_eq!(in_flight(&limiter).await, 0, "{name}");
            assert!(!http_body::Body::is_end_stream(res.body()), "{name}");
        } else {
            // Not ready when the response came: released before its last frame.
            assert_eq!(in_flight(&limiter).await, 1, "{name}");
        }
        let collected = res.into_body().collect().await.unwrap();
        assert_eq!(in_flight(&limiter).await, 0, "{name}");
        match steps.last() {
            Some(Step::Trailers) => {
                assert_eq!(collected.trailers().unwrap()["x-done"], "yes", "{name}");
            }
            _ => assert_eq!(collected.to_bytes(), "hello", "{name}"),
        }
    }
}

#[tokio::test]
async fn a_streaming_body_holds_its_lease_until_its_end_and_hands_out_every_frame() {
    use tower::ServiceExt;
    for (name, steps, end_known) in [
        (
            "known-end",
            &[Step::Data("one "), Step::Data("two")][..],
            true,
        ),
        (
            "unknown-end",
            &[Step::Data("one "), Step::Data("two")][..],
            false,
        ),
        (
            "pending-between",
            &[Step::Data("one "), Step::Pending, Step::Data("two")][..],
            false,
        ),
    ] {
        let prefix = format!("lease-stream-{name}");
        let (svc, limiter) = scripted(&prefix, steps, end_known);
        let res = svc
            .oneshot(Request::get("/").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(in_flight(&limiter).await, 1, "{name}");
        let mut body = res.into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first, "one ", "{name}");
        assert_eq!(in_flight(&limiter).await, 1, "{name}");
        let rest = body.collect().await.unwrap().to_bytes();
        assert_eq!(rest, "two", "{name}");
        assert_eq!(in_flight(&limiter).await, 0, "{name}");
    }
}

#[tokio::test]
async fn a_body_over_before_its_first_frame_is_empty_and_released() {
    use tower::ServiceExt;
    let (svc, limiter) = scripted("lease-over-at-once", &[], false);
    let res = svc
        .oneshot(Request::get("/").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(in_flight(&limiter).await, 0);
    assert!(http_body::Body::is_end_stream(res.body()));
    assert!(
        res.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .is_empty()
    );
}

#[tokio::test]
async fn a_body_failing_at_its_first_frame_hands_out_the_error_and_releases_its_lease() {
    use tower::ServiceExt;
    for (name, steps) in [
        ("first", &[Step::Fail][..]),
        ("after-a-frame", &[Step::Data("one "), Step::Fail][..]),
    ] {
        let prefix = format!("lease-fail-{name}");
        let (svc, limiter) = scripted(&prefix, steps, false);
        let res = svc
            .oneshot(Request::get("/").body(Body::empty()).unwrap())
            .await
            .unwrap();
        let error = res.into_body().collect().await.unwrap_err();
        assert_eq!(error.to_string(), "broken body", "{name}");
        released(&limiter).await;
    }
}
