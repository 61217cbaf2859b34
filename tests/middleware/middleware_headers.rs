//! The middleware's headers and its own answers: stacked layers, the
//! `RateLimit-Policy` of every strategy (against the guide's table), gRPC
//! detection, and the answer to a request without a key.
//!
//! Headers do not depend on the store: these tests run on the memory store
//! with a manual clock (exact `t` values), except the 503 case, which needs a
//! Redis that is down.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::convert::Infallible;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use bytes::Bytes;
use common::RedisServer;
use http::request::Parts;
use http::{Request, Response, StatusCode, Version};
use http_body_util::BodyExt;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_redis_ratelimit::clock::ManualClock;
use tower_redis_ratelimit::middleware::{FailurePolicy, HeaderStyle, MissingKey};
use tower_redis_ratelimit::{
    MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter, RedisStore, key,
};

fn limiter(clock: &ManualClock, quota: Quota) -> RateLimiter {
    RateLimiter::builder()
        .store(MemoryStore::new())
        .clock(clock.clone())
        .quota(quota)
        .build()
        .unwrap()
}

/// The bytes of request header `name`: a key per user, per IP, ...
fn by(name: &'static str) -> impl Fn(&Parts) -> Option<Vec<u8>> + Send + Sync + 'static {
    move |p: &Parts| p.headers.get(name).map(|v| v.as_bytes().to_vec())
}

async fn ok(_req: Request<Body>) -> Result<Response<Body>, Infallible> {
    Ok(Response::new(Body::from("ok")))
}

async fn call<S, B>(svc: &S, req: Request<Body>) -> Response<Body>
where
    S: Service<Request<Body>, Response = Response<B>, Error = Infallible> + Clone,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    svc.clone().oneshot(req).await.unwrap().map(Body::new)
}

async fn text(res: Response<Body>) -> String {
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// The value of header `name`, which must appear at most once (one combined line).
fn one<'a>(res: &'a Response<Body>, name: &str) -> Option<&'a str> {
    let all: Vec<_> = res.headers().get_all(name).iter().collect();
    assert!(all.len() <= 1, "{name} appears {} times", all.len());
    all.first().map(|v| v.to_str().unwrap())
}

fn epoch_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

// ---------------------------------------------------------------------------
// Stacked layers
// ---------------------------------------------------------------------------

/// What a response of a stack of layers must carry.
struct Expect {
    status: StatusCode,
    policy: &'static str,
    ratelimit: &'static str,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, and `X-RateLimit-Reset` as seconds from now.
    legacy: (u64, u64, u64),
    retry_after: Option<&'static str>,
}

fn check(step: &str, res: &Response<Body>, e: &Expect) {
    assert_eq!(res.status(), e.status, "{step}");
    assert_eq!(one(res, "ratelimit-policy"), Some(e.policy), "{step}");
    assert_eq!(one(res, "ratelimit"), Some(e.ratelimit), "{step}");
    assert_eq!(
        one(res, "x-ratelimit-limit"),
        Some(e.legacy.0.to_string().as_str()),
        "{step}"
    );
    assert_eq!(
        one(res, "x-ratelimit-remaining"),
        Some(e.legacy.1.to_string().as_str()),
        "{step}"
    );
    let reset: u64 = one(res, "x-ratelimit-reset").unwrap().parse().unwrap();
    let now = epoch_secs();
    assert!(
        (now + e.legacy.2 - 1..=now + e.legacy.2 + 1).contains(&reset),
        "{step}: reset {reset}, now {now}, expected +{}",
        e.legacy.2
    );
    assert_eq!(one(res, "retry-after"), e.retry_after, "{step}");
}

fn request(user: &str, ip: &str) -> Request<Body> {
    Request::get("/")
        .header("x-user", user)
        .header("x-ip", ip)
        .body(Body::empty())
        .unwrap()
}

/// A per-IP layer (3 per 60 s, "ip") and a per-user layer (2 per 30 s, "user").
fn ip_and_user_layers(clock: &ManualClock) -> (RateLimitLayer, RateLimitLayer) {
    let ip = limiter(clock, Quota::fixed_window(Rate::per_minute(3)).name("ip"));
    let user = limiter(
        clock,
        Quota::fixed_window(Rate::new(2, Duration::from_secs(30))).name("user"),
    );
    (
        RateLimitLayer::new(ip, by("x-ip")).headers(HeaderStyle::Both),
        RateLimitLayer::new(user, by("x-user")).headers(HeaderStyle::Both),
    )
}

#[tokio::test]
async fn stacked_layers_per_ip_outside_per_user_combine_their_headers() {
    let clock = ManualClock::new(Duration::from_secs(3_600));
    let (ip, user) = ip_and_user_layers(&clock);
    let svc = ServiceBuilder::new().layer(ip).layer(user).service_fn(ok);
    let both = r#""user";q=2;w=30, "ip";q=3;w=60"#;

    let res = call(&svc, request("u1", "ip1")).await;
    check(
        "1st: both allow; legacy shows the fewest remaining (user)",
        &res,
        &Expect {
            status: StatusCode::OK,
            policy: both,
            ratelimit: r#""user";r=1;t=30, "ip";r=2;t=60"#,
            legacy: (2, 1, 30),
            retry_after: None,
        },
    );
    let res = call(&svc, request("u1", "ip1")).await;
    check(
        "2nd",
        &res,
        &Expect {
            status: StatusCode::OK,
            policy: both,
            ratelimit: r#""user";r=0;t=30, "ip";r=1;t=60"#,
            legacy: (2, 0, 30),
            retry_after: None,
        },
    );
    // The inner (per-user) layer denies; the outer one allowed and adds its items.
    let res = call(&svc, request("u1", "ip1")).await;
    check(
        "3rd: the user limit denies inside",
        &res,
        &Expect {
            status: StatusCode::TOO_MANY_REQUESTS,
            policy: both,
            ratelimit: r#""user";r=0;t=30, "ip";r=0;t=60"#,
            // a tie on remaining: the later reset (ip)
            legacy: (3, 0, 60),
            retry_after: Some("30"),
        },
    );
    assert!(text(res).await.contains("\"user\""));
    // The outer (per-IP) layer denies another user of the same IP: the inner one never runs.
    let res = call(&svc, request("u2", "ip1")).await;
    check(
        "4th: the IP limit denies outside",
        &res,
        &Expect {
            status: StatusCode::TOO_MANY_REQUESTS,
            policy: r#""ip";q=3;w=60"#,
            ratelimit: r#""ip";r=0;t=60"#,
            legacy: (3, 0, 60),
            retry_after: Some("60"),
        },
    );
    assert!(text(res).await.contains("\"ip\""));
}

#[tokio::test]
async fn stacked_layers_per_user_outside_per_ip_combine_their_headers() {
    let clock = ManualClock::new(Duration::from_secs(3_600));
    let (ip, user) = ip_and_user_layers(&clock);
    let svc = ServiceBuilder::new().layer(user).layer(ip).service_fn(ok);
    let both = r#""ip";q=3;w=60, "user";q=2;w=30"#;

    let res = call(&svc, request("u1", "ip1")).await;
    check(
        "1st",
        &res,
        &Expect {
            status: StatusCode::OK,
            policy: both,
            ratelimit: r#""ip";r=2;t=60, "user";r=1;t=30"#,
            legacy: (2, 1, 30),
            retry_after: None,
        },
    );
    let res = call(&svc, request("u1", "ip1")).await;
    check(
        "2nd",
        &res,
        &Expect {
            status: StatusCode::OK,
            policy: both,
            ratelimit: r#""ip";r=1;t=60, "user";r=0;t=30"#,
            legacy: (2, 0, 30),
            retry_after: None,
        },
    );
    // The outer (per-user) layer denies: only its headers.
    let res = call(&svc, request("u1", "ip1")).await;
    check(
        "3rd: the user limit denies outside",
        &res,
        &Expect {
            status: StatusCode::TOO_MANY_REQUESTS,
            policy: r#""user";q=2;w=30"#,
            ratelimit: r#""user";r=0;t=30"#,
            legacy: (2, 0, 30),
            retry_after: Some("30"),
        },
    );
    let res = call(&svc, request("u2", "ip1")).await;
    check(
        "4th: another user takes the IP's last request",
        &res,
        &Expect {
            status: StatusCode::OK,
            policy: both,
            ratelimit: r#""ip";r=0;t=60, "user";r=1;t=30"#,
            legacy: (3, 0, 60),
            retry_after: None,
        },
    );
    // The inner (per-IP) layer denies; the outer one allowed and adds its items.
    let res = call(&svc, request("u3", "ip1")).await;
    check(
        "5th: the IP limit denies inside",
        &res,
        &Expect {
            status: StatusCode::TOO_MANY_REQUESTS,
            policy: both,
            ratelimit: r#""ip";r=0;t=60, "user";r=1;t=30"#,
            legacy: (3, 0, 60),
            retry_after: Some("60"),
        },
    );
    assert!(text(res).await.contains("\"ip\""));
}

#[tokio::test]
async fn an_outer_layer_keeps_the_retry_after_of_the_response_it_wraps() {
    let clock = ManualClock::new(Duration::from_secs(3_600));
    let outer = RateLimitLayer::new(
        limiter(
            &clock,
            Quota::fixed_window(Rate::per_minute(5)).name("outer"),
        ),
        key::Global,
    );
    let svc = ServiceBuilder::new()
        .layer(outer)
        .service_fn(|_req: Request<Body>| async {
            let mut res = Response::new(Body::empty());
            *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            res.headers_mut()
                .insert("retry-after", "120".parse().unwrap());
            res.headers_mut()
                .insert("ratelimit", r#""app";r=0;t=120"#.parse().unwrap());
            Ok::<_, Infallible>(res)
        });
    let res = call(&svc, Request::new(Body::empty())).await;
    assert_eq!(one(&res, "retry-after"), Some("120"));
    assert_eq!(
        one(&res, "ratelimit"),
        Some(r#""app";r=0;t=120, "outer";r=4;t=60"#)
    );
}

// ---------------------------------------------------------------------------
// RateLimit-Policy and RateLimit of every strategy, as the guide's table says
// ---------------------------------------------------------------------------

/// The quotas the guide's table (`docs/guide/middleware.md`) shows, by the code in its second column.
fn guide_quota(code: &str) -> Quota {
    match code {
        "Quota::fixed_window(Rate::per_minute(60))" => Quota::fixed_window(Rate::per_minute(60)),
        "Quota::sliding_window_log(Rate::per_minute(60))" => {
            Quota::sliding_window_log(Rate::per_minute(60))
        }
        "Quota::sliding_window_counter(Rate::per_minute(60))" => {
            Quota::sliding_window_counter(Rate::per_minute(60))
        }
        "Quota::token_bucket(Rate::per_minute(60)).burst(10)" => {
            Quota::token_bucket(Rate::per_minute(60)).burst(10)
        }
        "Quota::leaky_bucket(Rate::per_minute(60)).burst(10)" => {
            Quota::leaky_bucket(Rate::per_minute(60)).burst(10)
        }
        "Quota::gcra(Rate::per_minute(60)).burst(10)" => {
            Quota::gcra(Rate::per_minute(60)).burst(10)
        }
        "Quota::concurrency(8)" => Quota::concurrency(8),
        other => panic!("the guide's header table shows a quota this test does not know: {other}"),
    }
}

/// The text between the first pair of backticks of a table cell.
fn code(cell: &str) -> &str {
    let cell = cell.trim();
    cell.strip_prefix('`')
        .and_then(|c| c.split_once('`'))
        .map(|(c, _)| c)
        .unwrap_or_else(|| panic!("expected `code` in {cell:?}"))
}

/// The guide's rows (`docs/guide/middleware.md`): (strategy, quota code, policy parameters, RateLimit parameters).
fn guide_header_table() -> Vec<(String, String, String, String)> {
    let guide = include_str!("../../docs/guide/middleware.md");
    let head =
        "| `Strategy` | example quota | `RateLimit-Policy` | `RateLimit` after one request |";
    let start = guide
        .find(head)
        .expect("docs/guide/middleware.md has the header table of every strategy");
    guide[start..]
        .lines()
        .map(str::trim_start)
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').collect();
            assert!(cells.len() >= 4, "{l}");
            (
                code(cells[0]).to_owned(),
                code(cells[1]).to_owned(),
                code(cells[2]).to_owned(),
                code(cells[3]).to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn every_strategy_sends_the_headers_the_guide_table_shows() {
    let rows = guide_header_table();
    let strategies: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(
        strategies,
        [
            "FixedWindow",
            "SlidingWindowLog",
            "SlidingWindowCounter",
            "TokenBucket",
            "LeakyBucket",
            "Gcra",
            "Concurrency"
        ],
        "one row per strategy"
    );
    for (strategy, quota, policy, ratelimit) in rows {
        let quota = guide_quota(&quota);
        assert_eq!(format!("{:?}", quota.strategy()), strategy);
        let clock = ManualClock::new(Duration::from_secs(3_600));
        let svc = ServiceBuilder::new()
            .layer(RateLimitLayer::new(
                limiter(&clock, quota.name("q")),
                key::Global,
            ))
            .service_fn(ok);
        let res = call(&svc, Request::new(Body::empty())).await;
        assert_eq!(res.status(), StatusCode::OK, "{strategy}");
        assert_eq!(
            one(&res, "ratelimit-policy"),
            Some(format!("\"q\";{policy}").as_str()),
            "{strategy}"
        );
        assert_eq!(
            one(&res, "ratelimit"),
            Some(format!("\"q\";{ratelimit}").as_str()),
            "{strategy}"
        );
    }
}

#[tokio::test]
async fn a_denial_s_reset_is_its_retry_after() {
    // GCRA 60/min, burst 10: emptied, the next request is possible in 1 s,
    // the bucket is full again in 10 s. `t` on the 429 matches Retry-After.
    let clock = ManualClock::new(Duration::from_secs(3_600));
    let svc = ServiceBuilder::new()
        .layer(RateLimitLayer::new(
            limiter(
                &clock,
                Quota::gcra(Rate::per_minute(60)).burst(10).name("minute"),
            ),
            key::Global,
        ))
        .service_fn(ok);
    for _ in 0..10 {
        assert_eq!(
            call(&svc, Request::new(Body::empty())).await.status(),
            StatusCode::OK
        );
    }
    let res = call(&svc, Request::new(Body::empty())).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(one(&res, "retry-after"), Some("1"));
    assert_eq!(one(&res, "ratelimit"), Some(r#""minute";r=0;t=1"#));
    assert_eq!(one(&res, "ratelimit-policy"), Some(r#""minute";q=10;w=10"#));
}

// ---------------------------------------------------------------------------
// gRPC answers only for gRPC calls
// ---------------------------------------------------------------------------

fn grpc_request(version: Version) -> Request<Body> {
    let mut req = Request::post("/pkg.Service/Method")
        .header("content-type", "application/grpc")
        .body(Body::empty())
        .unwrap();
    *req.version_mut() = version;
    req
}

fn is_grpc_answer(res: &Response<Body>) -> bool {
    res.status() == StatusCode::OK && res.headers().contains_key("grpc-status")
}

/// (`.grpc(..)` setting, HTTP version, gRPC form expected)
const GRPC_CASES: [(Option<bool>, Version, bool); 4] = [
    (None, Version::HTTP_11, false),
    (None, Version::HTTP_2, true),
    (Some(true), Version::HTTP_11, true),
    (Some(false), Version::HTTP_2, false),
];

fn with_grpc(layer: RateLimitLayer, grpc: Option<bool>) -> RateLimitLayer {
    match grpc {
        Some(g) => layer.grpc(g),
        None => layer,
    }
}

#[tokio::test]
async fn a_grpc_content_type_on_http1_cannot_turn_a_429_into_a_200() {
    for (grpc, version, expect_grpc) in GRPC_CASES {
        let case = format!("grpc({grpc:?}), {version:?}");
        let clock = ManualClock::new(Duration::from_secs(3_600));
        let layer = RateLimitLayer::new(
            limiter(
                &clock,
                Quota::fixed_window(Rate::per_minute(1)).name("minute"),
            ),
            key::Global,
        );
        let svc = ServiceBuilder::new()
            .layer(with_grpc(layer, grpc))
            .service_fn(ok);
        assert_eq!(
            call(&svc, grpc_request(version)).await.status(),
            StatusCode::OK
        );
        let res = call(&svc, grpc_request(version)).await;
        assert_eq!(is_grpc_answer(&res), expect_grpc, "{case}");
        if expect_grpc {
            assert_eq!(one(&res, "grpc-status"), Some("8"), "{case}");
        } else {
            assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS, "{case}");
            assert_eq!(one(&res, "retry-after"), Some("60"), "{case}");
        }
    }
}

#[tokio::test]
async fn missing_key_rejections_are_grpc_only_for_grpc_calls() {
    for (grpc, version, expect_grpc) in GRPC_CASES {
        let case = format!("grpc({grpc:?}), {version:?}");
        let clock = ManualClock::new(Duration::from_secs(3_600));
        let layer = RateLimitLayer::new(
            limiter(&clock, Quota::fixed_window(Rate::per_minute(1))),
            key::PeerIp,
        );
        let svc = ServiceBuilder::new()
            .layer(with_grpc(layer, grpc))
            .service_fn(ok);
        let res = call(&svc, grpc_request(version)).await;
        assert_eq!(is_grpc_answer(&res), expect_grpc, "{case}");
        if !expect_grpc {
            assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR, "{case}");
        }
    }
}

#[tokio::test]
async fn store_failure_503s_are_grpc_only_for_grpc_calls() {
    let mut redis = RedisServer::start();
    let store = RedisStore::new(redis.pool(1)).timeout(Duration::from_secs(10));
    redis.kill(); // connection refused at once
    let limiter = RateLimiter::builder()
        .store(store)
        .prefix("grpc-503")
        .quota(Quota::fixed_window(Rate::per_minute(1)))
        .build()
        .unwrap();
    for (grpc, version, expect_grpc) in GRPC_CASES {
        let case = format!("grpc({grpc:?}), {version:?}");
        let layer =
            RateLimitLayer::new(limiter.clone(), key::Global).on_store_error(FailurePolicy::Closed);
        let svc = ServiceBuilder::new()
            .layer(with_grpc(layer, grpc))
            .service_fn(ok);
        let res = call(&svc, grpc_request(version)).await;
        assert_eq!(is_grpc_answer(&res), expect_grpc, "{case}");
        if expect_grpc {
            assert_eq!(one(&res, "grpc-status"), Some("14"), "{case}");
        } else {
            assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE, "{case}");
        }
    }
}

// ---------------------------------------------------------------------------
// A request without a key
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_missing_peer_address_is_a_500_whose_body_names_the_fix() {
    let clock = ManualClock::new(Duration::from_secs(3_600));
    let quota = || Quota::fixed_window(Rate::per_minute(1));
    // PeerIp on a server started without connect info
    let svc = ServiceBuilder::new()
        .layer(RateLimitLayer::new(limiter(&clock, quota()), key::PeerIp))
        .service_fn(ok);
    let res = call(&svc, Request::new(Body::empty())).await;
    assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body = text(res).await;
    assert!(body.contains("PeerIp"), "{body}");
    assert!(
        body.contains("into_make_service_with_connect_info::<SocketAddr>()"),
        "{body}"
    );

    // ClientIp needs the peer address too.
    let svc = ServiceBuilder::new()
        .layer(RateLimitLayer::new(
            limiter(&clock, quota()),
            key::ClientIp::new(),
        ))
        .service_fn(ok);
    let body = text(call(&svc, Request::new(Body::empty())).await).await;
    assert!(
        body.contains("ClientIp") && body.contains("into_make_service_with_connect_info"),
        "{body}"
    );

    // A header extractor names its header.
    let svc = ServiceBuilder::new()
        .layer(RateLimitLayer::new(
            limiter(&clock, quota()),
            key::Header::parse("x-api-key").unwrap(),
        ))
        .service_fn(ok);
    let body = text(call(&svc, Request::new(Body::empty())).await).await;
    assert!(body.contains("x-api-key"), "{body}");

    // A tuple names the part that found nothing.
    let svc = ServiceBuilder::new()
        .layer(RateLimitLayer::new(
            limiter(&clock, quota()),
            (key::Method, key::PeerIp),
        ))
        .service_fn(ok);
    let body = text(call(&svc, Request::new(Body::empty())).await).await;
    assert!(body.contains("PeerIp"), "{body}");

    // A closure: a generic message.
    let svc = ServiceBuilder::new()
        .layer(RateLimitLayer::new(
            limiter(&clock, quota()),
            |_: &Parts| None::<Vec<u8>>,
        ))
        .service_fn(ok);
    let body = text(call(&svc, Request::new(Body::empty())).await).await;
    assert!(body.contains("no rate-limit key"), "{body}");
}

#[cfg(feature = "tracing")]
#[tokio::test(flavor = "current_thread")]
async fn a_missing_key_is_logged_once_per_layer_at_error_level() {
    let log = common::logs::capture();

    let clock = ManualClock::new(Duration::from_secs(3_600));
    let quota = || Quota::fixed_window(Rate::per_minute(1));
    let first = RateLimitLayer::new(limiter(&clock, quota()), key::PeerIp);
    let second = RateLimitLayer::new(limiter(&clock, quota()), key::PeerIp);
    for layer in [first.clone(), first, second] {
        // every service of a layer shares its "logged" flag
        let svc = ServiceBuilder::new().layer(layer).service_fn(ok);
        for _ in 0..5 {
            let res = call(&svc, Request::new(Body::empty())).await;
            assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
        }
    }
    let errors = log.lines_with("ERROR");
    assert_eq!(errors.len(), 2, "once per layer:\n{}", log.text());
    for e in errors {
        assert!(
            e.contains("into_make_service_with_connect_info::<SocketAddr>()"),
            "{e}"
        );
    }
}

/// A layer on `extractor` (memory store, fixed window) answering a request
/// without its key: (HTTP status, gRPC status of an HTTP/2 gRPC call).
async fn missing_answer(layer: RateLimitLayer) -> (StatusCode, String) {
    let svc = ServiceBuilder::new().layer(layer).service_fn(ok);
    let http = call(&svc, Request::new(Body::empty())).await.status();
    let res = call(&svc, grpc_request(Version::HTTP_2)).await;
    assert!(is_grpc_answer(&res));
    (http, one(&res, "grpc-status").unwrap().to_owned())
}

#[tokio::test]
async fn a_missing_key_is_the_clients_4xx_unless_the_server_is_misconfigured() {
    let clock = ManualClock::new(Duration::from_secs(3_600));
    let l = || limiter(&clock, Quota::fixed_window(Rate::per_minute(1)));
    let api_key = || key::Header::parse("x-api-key").unwrap();
    let closure = |_: &Parts| None::<Vec<u8>>;
    let cases: Vec<(&str, RateLimitLayer, StatusCode, &str)> = vec![
        // a missing credential: 401 / UNAUTHENTICATED
        (
            "header",
            RateLimitLayer::new(l(), api_key()),
            StatusCode::UNAUTHORIZED,
            "16",
        ),
        (
            "header in a tuple",
            RateLimitLayer::new(l(), (key::Method, api_key())),
            StatusCode::UNAUTHORIZED,
            "16",
        ),
        // something else the request lacks: 400 / INVALID_ARGUMENT
        (
            "closure",
            RateLimitLayer::new(l(), closure),
            StatusCode::BAD_REQUEST,
            "3",
        ),
        // a server without connect info: 500 / INTERNAL
        (
            "peer ip",
            RateLimitLayer::new(l(), key::PeerIp),
            StatusCode::INTERNAL_SERVER_ERROR,
            "13",
        ),
        (
            "client ip",
            RateLimitLayer::new(l(), key::ClientIp::new()),
            StatusCode::INTERNAL_SERVER_ERROR,
            "13",
        ),
        (
            "peer ip in a tuple",
            RateLimitLayer::new(l(), (api_key(), key::PeerIp)),
            StatusCode::UNAUTHORIZED,
            "16",
        ),
        // a fallback that finds nothing either: the graver cause
        (
            "header, then peer ip",
            RateLimitLayer::new(l(), api_key()).on_missing_key(MissingKey::fallback(key::PeerIp)),
            StatusCode::INTERNAL_SERVER_ERROR,
            "13",
        ),
        (
            "closure, then header",
            RateLimitLayer::new(l(), closure).on_missing_key(MissingKey::fallback(api_key())),
            StatusCode::UNAUTHORIZED,
            "16",
        ),
        // an explicit status is kept
        (
            "reject(403)",
            RateLimitLayer::new(l(), key::PeerIp)
                .on_missing_key(MissingKey::reject(StatusCode::FORBIDDEN)),
            StatusCode::FORBIDDEN,
            "7",
        ),
        (
            "reject(400)",
            RateLimitLayer::new(l(), key::PeerIp)
                .on_missing_key(MissingKey::reject(StatusCode::BAD_REQUEST)),
            StatusCode::BAD_REQUEST,
            "3",
        ),
    ];
    for (case, layer, status, grpc) in cases {
        assert_eq!(
            missing_answer(layer).await,
            (status, grpc.to_owned()),
            "{case}"
        );
    }
}

#[tokio::test]
async fn plans_answer_a_request_without_its_api_key_401() {
    use tower_redis_ratelimit::middleware::PlanFromHeader;
    use tower_redis_ratelimit::plans::{Plan, Plans};
    let clock = ManualClock::new(Duration::from_secs(3_600));
    let plans = Plans::builder()
        .store(MemoryStore::new())
        .clock(clock)
        .plan(
            "free",
            Plan::new([Quota::fixed_window(Rate::per_minute(1))]),
        )
        .default_plan("free")
        .build()
        .unwrap();
    let layer = RateLimitLayer::with_plans(
        plans,
        key::Header::parse("x-api-key").unwrap(),
        PlanFromHeader(http::HeaderName::from_static("x-plan")),
    );
    assert_eq!(
        missing_answer(layer).await,
        (StatusCode::UNAUTHORIZED, "16".to_owned())
    );
}
