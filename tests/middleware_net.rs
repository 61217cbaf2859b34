//! The middleware on real sockets: axum and tonic servers on loopback,
//! hyper and tonic clients, a private redis-server behind them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../examples/support/grpc_echo.rs"]
mod grpc_echo;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use bytes::Bytes;
use common::RedisServer;
use grpc_echo::{Echo, RawCodec};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tonic::{Code, Status};
use tower_redis_ratelimit::key::{ClientIp, PeerIp};
use tower_redis_ratelimit::middleware::{FailurePolicy, HeaderStyle, RateLimit};
use tower_redis_ratelimit::{Quota, Rate, RateLimitLayer, RateLimiter, RedisStore};

/// A store timeout no loaded test machine reaches: a timed-out call would
/// fail open and make exact counts flaky. Timeouts have their own tests.
const GENEROUS: Duration = Duration::from_secs(10);

fn limiter(redis: &RedisServer, prefix: &str, quota: Quota) -> RateLimiter {
    RateLimiter::builder()
        .store(RedisStore::new(redis.pool(4)).timeout(GENEROUS))
        .prefix(prefix)
        .quota(quota)
        .build()
        .unwrap()
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

/// One HTTP/1.1 request on a fresh connection.
async fn fetch(addr: SocketAddr, path: &str, headers: &[(&str, &[u8])]) -> Response<Incoming> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = Request::get(path).header("host", addr.to_string());
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    sender
        .send_request(req.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap()
}

async fn status(addr: SocketAddr, path: &str) -> StatusCode {
    let res = fetch(addr, path, &[]).await;
    let status = res.status();
    res.into_body().collect().await.unwrap();
    status
}

fn h<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|v| v.to_str().unwrap())
}

#[tokio::test]
async fn a_real_server_sends_status_every_header_style_and_retry_after() {
    let redis = RedisServer::start();
    let mut app = Router::new();
    for (path, style) in [
        ("/ietf", HeaderStyle::Ietf),
        ("/legacy", HeaderStyle::Legacy),
        ("/both", HeaderStyle::Both),
        ("/none", HeaderStyle::None),
    ] {
        let quota = Quota::fixed_window(Rate::per_minute(2)).name("minute");
        let layer = RateLimitLayer::new(limiter(&redis, &path[1..], quota), PeerIp).headers(style);
        app = app.route(path, get(|| async { "hello" }).layer(layer));
    }
    let addr = serve(app).await;

    for style in ["ietf", "legacy", "both", "none"] {
        let path = format!("/{style}");
        let mut seen = Vec::new();
        for _ in 0..3 {
            let res = fetch(addr, &path, &[]).await;
            let (parts, body) = res.into_parts();
            let body = body.collect().await.unwrap().to_bytes();
            seen.push((parts.status, parts.headers, body));
        }
        let statuses: Vec<_> = seen.iter().map(|s| s.0).collect();
        assert_eq!(
            statuses,
            [
                StatusCode::OK,
                StatusCode::OK,
                StatusCode::TOO_MANY_REQUESTS
            ],
            "{style}"
        );
        assert_eq!(seen[0].2, "hello");
        let ietf = style == "ietf" || style == "both";
        let legacy = style == "legacy" || style == "both";
        for (i, (_, headers, _)) in seen.iter().enumerate() {
            let remaining = [1, 0, 0][i].to_string();
            if ietf {
                assert_eq!(h(headers, "ratelimit-policy"), Some(r#""minute";q=2;w=60"#));
                let rl = h(headers, "ratelimit").unwrap();
                assert!(
                    rl.starts_with(&format!(r#""minute";r={remaining};t="#)),
                    "{rl}"
                );
            } else {
                assert!(!headers.contains_key("ratelimit"), "{style}");
            }
            if legacy {
                assert_eq!(h(headers, "x-ratelimit-limit"), Some("2"));
                assert_eq!(
                    h(headers, "x-ratelimit-remaining"),
                    Some(remaining.as_str())
                );
                assert!(
                    h(headers, "x-ratelimit-reset")
                        .unwrap()
                        .parse::<u64>()
                        .is_ok()
                );
            } else {
                assert!(!headers.contains_key("x-ratelimit-limit"), "{style}");
            }
        }
        let retry: u64 = h(&seen[2].1, "retry-after").unwrap().parse().unwrap();
        assert!((1..=60).contains(&retry), "{retry}");
        assert!(!seen[0].1.contains_key("retry-after"));
    }
}

#[tokio::test]
async fn two_app_instances_sharing_one_redis_enforce_one_limit_exactly() {
    let redis = RedisServer::start();
    let limit = 25;
    let mut addrs = Vec::new();
    for _ in 0..2 {
        // Each instance: its own pool, store, limiter and layer; one Redis.
        // A store call must never time out here (a timed-out call may or may
        // not have counted): a generous timeout, and a 503 if it ever did.
        let limiter = RateLimiter::builder()
            .store(RedisStore::new(redis.pool(4)).timeout(Duration::from_secs(10)))
            .prefix("shared")
            .quota(Quota::fixed_window(Rate::per_minute(limit)).name("minute"))
            .build()
            .unwrap();
        let layer = RateLimitLayer::new(limiter, PeerIp).on_store_error(FailurePolicy::Closed);
        let app = Router::new()
            .route("/", get(|| async { "hi" }))
            .layer(layer);
        addrs.push(serve(app).await);
    }
    // In turn: both instances count against the same limit.
    for i in 0..10 {
        assert_eq!(status(addrs[i % 2], "/").await, StatusCode::OK);
    }
    // Then all at once, spread over both: exactly the rest is allowed.
    let requests = 70;
    let tasks: Vec<_> = (0..requests)
        .map(|i| tokio::spawn(status(addrs[i % 2], "/")))
        .collect();
    let (mut ok, mut denied) = (10, 0);
    for t in tasks {
        match t.await.unwrap() {
            StatusCode::OK => ok += 1,
            StatusCode::TOO_MANY_REQUESTS => denied += 1,
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(ok, limit);
    assert_eq!(denied, requests as u64 + 10 - limit);
    for addr in addrs {
        assert_eq!(status(addr, "/").await, StatusCode::TOO_MANY_REQUESTS);
    }
}

#[tokio::test]
async fn a_spoofed_x_forwarded_for_from_an_untrusted_peer_is_ignored() {
    let redis = RedisServer::start();
    let quota = || Quota::fixed_window(Rate::per_minute(2)).name("minute");
    // Trusts a proxy network the test client (127.0.0.1) is not in.
    let untrusted = RateLimitLayer::new(
        limiter(&redis, "untrusted", quota()),
        ClientIp::new().trust_cidrs(["10.0.0.0/8"]).unwrap(),
    );
    // Trusts the loopback proxy: the header is believed.
    let trusted = RateLimitLayer::new(
        limiter(&redis, "trusted", quota()),
        ClientIp::new().trust_cidrs(["127.0.0.0/8"]).unwrap(),
    );
    let app = Router::new()
        .route("/untrusted", get(|| async { "u" }).layer(untrusted))
        .route("/trusted", get(|| async { "t" }).layer(trusted));
    let addr = serve(app).await;

    let spoofs: [&[u8]; 4] = [
        b"198.51.100.1",
        b"198.51.100.2",
        b"198.51.100.3",
        b"198.51.100.4",
    ];
    let mut statuses = Vec::new();
    for xff in spoofs {
        let res = fetch(addr, "/untrusted", &[("x-forwarded-for", xff)]).await;
        statuses.push(res.status());
    }
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::TOO_MANY_REQUESTS
        ],
        "every spoofed address counts as the peer"
    );

    for xff in spoofs {
        let res = fetch(addr, "/trusted", &[("x-forwarded-for", xff)]).await;
        assert_eq!(
            res.status(),
            StatusCode::OK,
            "a trusted proxy's clients are counted apart"
        );
    }

    // Garbage, non-UTF-8 and absurdly long chains: limited, never a 500.
    let long = "1.2.3.4, ".repeat(2_000);
    let garbage: [&[u8]; 6] = [
        b"unknown",
        b"999.1.1.1, not-an-ip",
        b"\xff\xfe, 198.51.100.9",
        b",,,",
        b"[::1]:80:80",
        long.as_bytes(),
    ];
    for value in garbage {
        for path in ["/trusted", "/untrusted"] {
            let res = fetch(addr, path, &[("x-forwarded-for", value)]).await;
            assert!(
                matches!(res.status(), StatusCode::OK | StatusCode::TOO_MANY_REQUESTS),
                "{path} {:?}: {}",
                String::from_utf8_lossy(&value[..value.len().min(40)]),
                res.status()
            );
            assert!(res.headers().contains_key("ratelimit"));
        }
    }
}

/// A streaming body fed by the test.
struct Stream(mpsc::Receiver<Bytes>);

impl http_body::Body for Stream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|b| b.map(|b| Ok(http_body::Frame::data(b))))
    }
}

#[tokio::test]
async fn a_client_disconnect_mid_stream_releases_the_concurrency_lease() {
    let redis = RedisServer::start();
    let limiter = limiter(&redis, "conc", Quota::concurrency(1).name("inflight"));
    let senders: Arc<Mutex<Vec<mpsc::Sender<Bytes>>>> = Arc::default();
    let s = senders.clone();
    let app = Router::new()
        .route(
            "/stream",
            get(move || {
                let (tx, rx) = mpsc::channel(1);
                s.lock().unwrap().push(tx);
                async move { Response::new(Body::new(Stream(rx))) }
            }),
        )
        .layer(RateLimitLayer::new(limiter.clone(), PeerIp));
    let addr = serve(app).await;

    let res = fetch(addr, "/stream", &[]).await;
    assert_eq!(res.status(), StatusCode::OK);
    let tx = senders.lock().unwrap()[0].clone();
    tx.send(Bytes::from_static(b"chunk")).await.unwrap();
    let mut body = res.into_body();
    assert_eq!(
        body.frame().await.unwrap().unwrap().into_data().unwrap(),
        "chunk"
    );
    assert_eq!(status(addr, "/stream").await, StatusCode::TOO_MANY_REQUESTS);

    // The client hangs up mid-stream; the server finds out on its next write.
    drop(body);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if limiter.peek("ip:127.0.0.1").await.unwrap().remaining == 1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "lease never released"
        );
        // Each chunk makes the server write to the closed socket, until it gives up.
        let _ = tx.try_send(Bytes::from_static(b"more"));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(tx.is_closed(), "the server dropped the body");
}

// --- gRPC -----------------------------------------------------------------

async fn grpc_client(addr: SocketAddr) -> tonic::client::Grpc<tonic::transport::Channel> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    tonic::client::Grpc::new(channel)
}

async fn echo(
    client: &mut tonic::client::Grpc<tonic::transport::Channel>,
    message: &'static [u8],
) -> Result<tonic::Response<Bytes>, Status> {
    client.ready().await.unwrap();
    client
        .unary(
            tonic::Request::new(Bytes::from_static(message)),
            http::uri::PathAndQuery::from_static("/demo.Echo/Echo"),
            RawCodec,
        )
        .await
}

fn check_exhausted(status: &Status) {
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("minute"), "{status:?}");
    let meta = status.metadata();
    assert!(meta.get("ratelimit").is_some(), "{meta:?}");
    assert!(meta.get("ratelimit-policy").is_some());
    let retry: u64 = meta
        .get("retry-after")
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry >= 1);
}

#[tokio::test]
async fn a_tonic_client_receives_resource_exhausted_from_a_layered_server() {
    let redis = RedisServer::start();
    let quota = Quota::fixed_window(Rate::per_minute(2)).name("minute");
    let layer = RateLimitLayer::new(limiter(&redis, "tonic", quota), PeerIp);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .layer(layer)
            .add_service(Echo)
            .serve_with_incoming(incoming),
    );
    let mut client = grpc_client(addr).await;
    for _ in 0..2 {
        let res = echo(&mut client, b"ping").await.unwrap();
        assert_eq!(res.get_ref().as_ref(), b"ping");
        assert!(
            res.metadata().get("ratelimit").is_some(),
            "headers on allowed calls too"
        );
    }
    let status = echo(&mut client, b"ping").await.unwrap_err();
    check_exhausted(&status);
}

#[tokio::test]
async fn a_rate_limited_service_can_be_added_to_tonic_on_its_own() {
    let redis = RedisServer::start();
    let quota = Quota::gcra(Rate::per_minute(1)).name("minute");
    let echo_limited = RateLimit::new(Echo, limiter(&redis, "tonic-svc", quota), PeerIp);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(echo_limited)
            .serve_with_incoming(incoming),
    );
    let mut client = grpc_client(addr).await;
    echo(&mut client, b"one").await.unwrap();
    let status = echo(&mut client, b"two").await.unwrap_err();
    check_exhausted(&status);
}
