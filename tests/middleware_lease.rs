//! Concurrency leases over real sockets: a client that has read a whole
//! response is never denied by that response's own lease.
//!
//! An axum server on a loopback port (with connect info), a hyper client
//! sending one request after another over ONE keep-alive connection, each
//! body read to its end before the next request is sent; a limit of one
//! request in flight per peer, on the memory store and on a private
//! redis-server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

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
use tower_redis_ratelimit::{
    FailurePolicy, MemoryStore, Quota, RateLimitLayer, RateLimiter, RedisStore, Store,
};

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

/// `CYCLES` requests over one keep-alive connection, in turn; each response
/// read to its end before the next request. Returns every status seen.
async fn cycles(addr: SocketAddr) -> Vec<(usize, &'static str, StatusCode)> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut seen = Vec::new();
    for i in 0..CYCLES {
        let path = ["/text", "/empty", "/stream"][i % 3];
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
    assert_eq!(limiter.peek("ip:127.0.0.1").await.unwrap().remaining, 1);
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
    assert_eq!(limiter.peek("ip:127.0.0.1").await.unwrap().remaining, 1);
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
