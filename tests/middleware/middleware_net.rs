//! The middleware on real sockets: axum and tonic servers on loopback,
//! hyper and tonic clients, limiters on the memory store under a manual
//! clock (no Redis). What needs Redis is `tests/middleware/middleware_net_redis.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
#[path = "../../examples/support/grpc_echo.rs"]
mod grpc_echo;

use std::net::SocketAddr;

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use common::memory::{self, limiter};
use common::net::{fetch, serve};
use grpc_echo::{Echo, RawCodec};
use http::{HeaderMap, StatusCode};
use http_body_util::BodyExt;
use tokio::net::TcpListener;
use tonic::{Code, Status};
use tower_redis_ratelimit::key::{ClientIp, PeerIp};
use tower_redis_ratelimit::middleware::{HeaderStyle, RateLimit};
use tower_redis_ratelimit::{Quota, Rate, RateLimitLayer};

fn h<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|v| v.to_str().unwrap())
}

#[tokio::test]
async fn a_real_server_sends_status_every_header_style_and_retry_after() {
    let clock = memory::clock();
    let mut app = Router::new();
    for (path, style) in [
        ("/ietf", HeaderStyle::Ietf),
        ("/legacy", HeaderStyle::Legacy),
        ("/both", HeaderStyle::Both),
        ("/none", HeaderStyle::None),
    ] {
        let quota = Quota::fixed_window(Rate::per_minute(2)).name("minute");
        let layer =
            RateLimitLayer::new(limiter(&clock, &path[1..], [quota]), PeerIp).headers(style);
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
async fn a_spoofed_x_forwarded_for_from_an_untrusted_peer_is_ignored() {
    let clock = memory::clock();
    let quota = || Quota::fixed_window(Rate::per_minute(2)).name("minute");
    // Trusts a proxy network the test client (127.0.0.1) is not in.
    let untrusted = RateLimitLayer::new(
        limiter(&clock, "untrusted", [quota()]),
        ClientIp::new().trust_cidrs(["10.0.0.0/8"]).unwrap(),
    );
    // Trusts the loopback proxy: the header is believed.
    let trusted = RateLimitLayer::new(
        limiter(&clock, "trusted", [quota()]),
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

/// The memory twin of the Redis test in `tests/middleware/middleware_net_redis.rs`:
/// the lease goes back to the store when the body is dropped, whatever the store.
#[tokio::test]
async fn a_client_disconnect_mid_stream_releases_the_concurrency_lease() {
    let clock = memory::clock();
    let limiter = memory::limiter(&clock, "conc", [Quota::concurrency(1).name("inflight")]);
    common::net::a_client_disconnect_mid_stream_releases_the_lease(limiter).await;
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
    let clock = memory::clock();
    let quota = Quota::fixed_window(Rate::per_minute(2)).name("minute");
    let layer = RateLimitLayer::new(limiter(&clock, "tonic", [quota]), PeerIp);
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
    let clock = memory::clock();
    let quota = Quota::gcra(Rate::per_minute(1)).name("minute");
    let echo_limited = RateLimit::new(Echo, limiter(&clock, "tonic-svc", [quota]), PeerIp);
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
