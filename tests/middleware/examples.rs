//! The examples are templates: each is started here (its router, on the
//! memory store or a private Redis) and probed as an attacker would: made-up
//! credentials, guessed tokens, malformed and out-of-range admin input,
//! state-changing routes without credentials, secrets in storage keys.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

#[allow(dead_code)]
#[path = "../../examples/admin.rs"]
mod admin;
#[cfg(feature = "metrics")]
#[allow(dead_code)]
#[path = "../../examples/metrics.rs"]
mod metrics_example;
#[allow(dead_code)]
#[path = "../../examples/multi_quota.rs"]
mod multi_quota;
#[allow(dead_code)]
#[path = "../../examples/plans.rs"]
mod plans;

use std::net::SocketAddr;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use common::RedisServer;
use common::http::{send, text};
use http::{Method, Request, StatusCode};
use tower_redis_ratelimit::{MemoryStore, RedisStore};

const ADMIN_TOKEN: &str = "s3cret-admin-token";

/// A request from `peer` (as `into_make_service_with_connect_info` records
/// it), with the headers given.
fn request(method: Method, uri: &str, peer: [u8; 4], headers: &[(&str, &str)]) -> Request<Body> {
    let mut b = Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        b = b.header(*name, *value);
    }
    let mut req = b.body(Body::empty()).unwrap();
    req.extensions_mut()
        .insert(ConnectInfo(SocketAddr::from((peer, 40_000))));
    req
}

async fn status(app: &Router, req: Request<Body>) -> StatusCode {
    send(app, req).await.status()
}

/// Every key of the Redis.
async fn redis_keys(redis: &RedisServer) -> Vec<String> {
    let mut conn = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap()
}

// ---------------------------------------------------------------------------
// examples/admin.rs
// ---------------------------------------------------------------------------

#[tokio::test]
async fn admin_routes_all_need_the_token() {
    let app = admin::app(MemoryStore::new(), ADMIN_TOKEN).unwrap();
    let bearer = format!("Bearer {ADMIN_TOKEN}");
    let routes = [
        (Method::GET, "/admin/ips/192.0.2.1"),
        (Method::POST, "/admin/ips/192.0.2.1/block?seconds=60"),
        (Method::POST, "/admin/ips/192.0.2.1/unblock"),
        (Method::POST, "/admin/ips/192.0.2.1/reward?units=1"),
    ];
    let near_misses = [
        None,
        Some(ADMIN_TOKEN.to_owned()),                   // no scheme
        Some("Bearer ".to_owned()),                     // empty
        Some(format!("Bearer {}", &ADMIN_TOKEN[..10])), // a prefix
        Some(format!("Bearer {ADMIN_TOKEN}x")),         // longer
        Some(format!("Bearer{ADMIN_TOKEN}")),           // no space
        Some(format!("Bearer\t{ADMIN_TOKEN}")),         // not a space
        Some(format!("Basic {ADMIN_TOKEN}")),           // another scheme
        Some("Bearer".to_owned()),                      // the scheme alone
    ];
    // each probe from an IP of its own (the guard is per IP)
    let mut ip = 0u8;
    for (method, uri) in &routes {
        for auth in &near_misses {
            ip += 1;
            let headers: Vec<(&str, &str)> = auth
                .as_deref()
                .map(|a| vec![("authorization", a)])
                .unwrap_or_default();
            let req = request(method.clone(), uri, [198, 51, 100, ip], &headers);
            assert_eq!(
                status(&app, req).await,
                StatusCode::UNAUTHORIZED,
                "{method} {uri} {auth:?}"
            );
        }
        // the scheme is case-insensitive (RFC 9110 §11.1), then 1+ spaces
        for auth in [
            bearer.clone(),
            format!("bearer {ADMIN_TOKEN}"),
            format!("BEARER {ADMIN_TOKEN}"),
            format!("bEaReR  {ADMIN_TOKEN}"),
        ] {
            ip += 1;
            let req = request(
                method.clone(),
                uri,
                [198, 51, 100, ip],
                &[("authorization", &auth)],
            );
            assert_eq!(
                status(&app, req).await,
                StatusCode::OK,
                "{method} {uri} {auth}"
            );
        }
    }
}

#[tokio::test]
async fn admin_query_strings_are_decoded_and_unknown_or_valueless_parameters_are_400() {
    let app = admin::app(MemoryStore::new(), ADMIN_TOKEN).unwrap();
    let bearer = format!("Bearer {ADMIN_TOKEN}");
    let bad = [
        (Method::POST, "block?seconds"),
        (Method::POST, "block?seconds&seconds=5"),
        (Method::POST, "block?Seconds=5"),
        (Method::POST, "block?SECONDS=5"),
        (Method::POST, "block?secs=5"),
        (Method::POST, "block?seconds=5&units=1"),
        (Method::POST, "block?seconds=+5"),
        (Method::POST, "block?seconds=%2B5"),
        (Method::POST, "block?seconds=%205"),
        (Method::POST, "block?seconds=5%00"),
        (Method::POST, "block?seconds=%FF"),
        (Method::POST, "block?seconds=%35&seconds=5"),
        (Method::POST, "reward?units"),
        (Method::POST, "reward?Units=5"),
        (Method::POST, "reward?units=-%31"),
        (Method::POST, "unblock?force=1"),
        (Method::POST, "unblock?x"),
        (Method::GET, "?verbose=1"),
        (Method::GET, "?verbose"),
    ];
    for (i, (method, action)) in bad.iter().enumerate() {
        let uri = format!("/admin/ips/192.0.2.1/{action}").replace("/?", "?");
        let peer = [10, 0, 3, u8::try_from(i).unwrap()];
        let req = request(method.clone(), &uri, peer, &[("authorization", &bearer)]);
        let res = send(&app, req).await;
        assert_eq!(
            res.status(),
            StatusCode::BAD_REQUEST,
            "{method} {uri}: {}",
            text(res).await
        );
    }
    // percent-encoded values are decoded, then checked
    let good = [
        ("block?seconds=%35", "192.0.2.1 blocked for 5 s\n"),
        ("block?seconds=6&", "192.0.2.1 blocked for 6 s\n"),
        ("block", "192.0.2.1 blocked for 300 s\n"),
        ("reward?units=%31%30", "192.0.2.1 given 10 back\n"),
        ("reward?units=007", "192.0.2.1 given 7 back\n"),
    ];
    for (i, (action, answer)) in good.iter().enumerate() {
        let uri = format!("/admin/ips/192.0.2.1/{action}");
        let peer = [10, 0, 4, u8::try_from(i).unwrap()];
        let req = request(Method::POST, &uri, peer, &[("authorization", &bearer)]);
        let res = send(&app, req).await;
        assert_eq!(res.status(), StatusCode::OK, "{uri}");
        assert_eq!(text(res).await, *answer, "{uri}");
    }
}

#[tokio::test]
async fn admin_token_guesses_are_rate_limited_per_ip() {
    let app = admin::app(MemoryStore::new(), ADMIN_TOKEN).unwrap();
    let attacker = [203, 0, 113, 66];
    let mut unauthorized = 0;
    for i in 0..50 {
        let guess = format!("Bearer guess-{i}");
        let req = request(
            Method::GET,
            "/admin/ips/192.0.2.1",
            attacker,
            &[("authorization", &guess)],
        );
        match status(&app, req).await {
            StatusCode::UNAUTHORIZED => unauthorized += 1,
            StatusCode::TOO_MANY_REQUESTS => {}
            other => panic!("guess {i}: {other}"),
        }
    }
    // 30 a minute, a failure costing 11: three guesses, then blocked
    assert_eq!(unauthorized, 3, "guesses that reached the token check");
    // blocked for 15 minutes: even the right token is refused from there
    let bearer = format!("Bearer {ADMIN_TOKEN}");
    let req = request(
        Method::GET,
        "/admin/ips/192.0.2.1",
        attacker,
        &[("authorization", &bearer)],
    );
    assert_eq!(status(&app, req).await, StatusCode::TOO_MANY_REQUESTS);
    // another IP is not
    let req = request(
        Method::GET,
        "/admin/ips/192.0.2.1",
        [203, 0, 113, 67],
        &[("authorization", &bearer)],
    );
    assert_eq!(status(&app, req).await, StatusCode::OK);
}

#[tokio::test]
async fn admin_input_out_of_range_is_a_400_never_clamped() {
    let app = admin::app(MemoryStore::new(), ADMIN_TOKEN).unwrap();
    let bearer = format!("Bearer {ADMIN_TOKEN}");
    let max = admin::MAX_BLOCK_SECS;
    let cases: Vec<(String, StatusCode)> = vec![
        ("reward?units=-1".into(), StatusCode::BAD_REQUEST),
        ("reward?units=0".into(), StatusCode::BAD_REQUEST),
        ("reward?units=abc".into(), StatusCode::BAD_REQUEST),
        ("reward?units=1.5".into(), StatusCode::BAD_REQUEST),
        ("reward?units=1001".into(), StatusCode::BAD_REQUEST),
        (
            "reward?units=18446744073709551616".into(),
            StatusCode::BAD_REQUEST,
        ),
        ("reward?units=1&units=2".into(), StatusCode::BAD_REQUEST),
        ("reward?units=".into(), StatusCode::BAD_REQUEST),
        ("reward?units=1000".into(), StatusCode::OK),
        ("reward".into(), StatusCode::OK),
        ("block?seconds=99999999999".into(), StatusCode::BAD_REQUEST),
        (
            format!("block?seconds={}", max + 1),
            StatusCode::BAD_REQUEST,
        ),
        ("block?seconds=0".into(), StatusCode::BAD_REQUEST),
        ("block?seconds=-5".into(), StatusCode::BAD_REQUEST),
        (format!("block?seconds={max}"), StatusCode::OK),
    ];
    for (i, (action, expected)) in cases.iter().enumerate() {
        let uri = format!("/admin/ips/192.0.2.1/{action}");
        let peer = [10, 0, 1, u8::try_from(i).unwrap()];
        let req = request(Method::POST, &uri, peer, &[("authorization", &bearer)]);
        let res = send(&app, req).await;
        assert_eq!(res.status(), *expected, "{action}: {}", text(res).await);
    }
    // not an address: 400, nothing keyed on it
    let req = request(
        Method::POST,
        "/admin/ips/alice/block?seconds=60",
        [10, 0, 2, 1],
        &[("authorization", &bearer)],
    );
    assert_eq!(status(&app, req).await, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn admin_block_and_unblock_reach_the_client_by_its_ip() {
    let app = admin::app(MemoryStore::new(), ADMIN_TOKEN).unwrap();
    let bearer = format!("Bearer {ADMIN_TOKEN}");
    let client = [192, 0, 2, 9];
    let op = [10, 9, 9, 9];
    assert_eq!(
        status(&app, request(Method::GET, "/", client, &[])).await,
        StatusCode::OK
    );
    let block = request(
        Method::POST,
        "/admin/ips/192.0.2.9/block?seconds=60",
        op,
        &[("authorization", &bearer)],
    );
    assert_eq!(status(&app, block).await, StatusCode::OK);
    assert_eq!(
        status(&app, request(Method::GET, "/", client, &[])).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    let unblock = request(
        Method::POST,
        "/admin/ips/192.0.2.9/unblock",
        op,
        &[("authorization", &bearer)],
    );
    assert_eq!(status(&app, unblock).await, StatusCode::OK);
    assert_eq!(
        status(&app, request(Method::GET, "/", client, &[])).await,
        StatusCode::OK
    );
}

// ---------------------------------------------------------------------------
// examples/multi_quota.rs
// ---------------------------------------------------------------------------

/// 30 requests from one IP, each with a made-up token: what passed the
/// limiter (answered 401 after being counted), what was denied.
async fn made_up_tokens(app: &Router) -> (usize, usize) {
    let (mut counted, mut denied) = (0, 0);
    for i in 0..30 {
        let token = format!("junk-{i}");
        let req = request(
            Method::GET,
            "/repos",
            [203, 0, 113, 9],
            &[("x-api-token", &token)],
        );
        match status(app, req).await {
            StatusCode::UNAUTHORIZED => counted += 1,
            StatusCode::TOO_MANY_REQUESTS => denied += 1,
            other => panic!("request {i}: {other}"),
        }
    }
    (counted, denied)
}

#[tokio::test]
async fn multi_quota_made_up_tokens_share_their_ips_limit_in_memory() {
    let app = multi_quota::app(MemoryStore::new()).unwrap();
    assert_eq!(made_up_tokens(&app).await, (10, 20), "the IP's burst of 10");
    // anonymous requests from that IP: the same, spent, limit
    let anon = request(Method::GET, "/repos", [203, 0, 113, 9], &[]);
    assert_eq!(status(&app, anon).await, StatusCode::TOO_MANY_REQUESTS);
    // a real token has its account's own limit
    let req = request(
        Method::GET,
        "/repos",
        [203, 0, 113, 9],
        &[("x-api-token", multi_quota::ACCOUNTS[0].1)],
    );
    assert_eq!(status(&app, req).await, StatusCode::OK);
}

#[tokio::test]
async fn multi_quota_made_up_tokens_write_no_keys_and_no_token_reaches_redis() {
    let redis = RedisServer::start();
    let store = RedisStore::new(redis.pool(4)).timeout(common::GENEROUS);
    let app = multi_quota::app(store).unwrap();
    assert_eq!(made_up_tokens(&app).await, (10, 20));
    let keys = redis_keys(&redis).await;
    assert_eq!(keys.len(), 2, "one IP's minute and day keys: {keys:?}");
    assert!(
        keys.iter().all(|k| k.contains("ip:203.0.113.9")),
        "{keys:?}"
    );

    let (account, token) = multi_quota::ACCOUNTS[1];
    let req = request(
        Method::GET,
        "/rate_limit",
        [203, 0, 113, 10],
        &[("x-api-token", token)],
    );
    let res = send(&app, req).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert!(text(res).await.contains("minute"), "the caller's quotas");
    let keys = redis_keys(&redis).await;
    assert_eq!(keys.len(), 4, "{keys:?}");
    assert!(
        keys.iter().any(|k| k.contains(&format!("user:{account}"))),
        "{keys:?}"
    );
    assert!(!keys.iter().any(|k| k.contains(token)), "{keys:?}");
}

// ---------------------------------------------------------------------------
// examples/plans.rs
// ---------------------------------------------------------------------------

async fn plans_probe(app: &Router) {
    let ip = [198, 51, 100, 20];
    // no key, an unknown key: 401, never the default plan
    for headers in [vec![], vec![("x-api-key", "key-made-up")]] {
        let res = send(app, request(Method::GET, "/", ip, &headers)).await;
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED, "{headers:?}");
    }
    for (key, _, plan) in plans::API_KEYS {
        let res = send(app, request(Method::GET, "/", ip, &[("x-api-key", key)])).await;
        assert_eq!(res.status(), StatusCode::OK, "{key}");
        assert!(
            text(res).await.starts_with(&format!("plan {plan}:")),
            "{key}"
        );
    }
    // reload: the admin token, nothing else
    let bearer = format!("Bearer {ADMIN_TOKEN}");
    for headers in [
        vec![],
        vec![("authorization", "Bearer wrong")],
        vec![("authorization", "Bearer")],
        vec![("x-api-key", "key-internal")],
    ] {
        let req = request(Method::POST, "/admin/reload", [198, 51, 100, 21], &headers);
        assert_eq!(
            status(app, req).await,
            StatusCode::UNAUTHORIZED,
            "{headers:?}"
        );
    }
    let lower = format!("bearer {ADMIN_TOKEN}");
    for auth in [&bearer, &lower] {
        let req = request(
            Method::POST,
            "/admin/reload",
            [198, 51, 100, 22],
            &[("authorization", auth)],
        );
        assert_eq!(status(app, req).await, StatusCode::OK, "{auth}");
    }
    // guessing API keys from one IP: 120 a minute, 11 per failure
    let mut refused = 0;
    for i in 0..40 {
        let guess = format!("key-guess-{i}");
        let req = request(
            Method::GET,
            "/",
            [198, 51, 100, 23],
            &[("x-api-key", &guess)],
        );
        match status(app, req).await {
            StatusCode::UNAUTHORIZED => refused += 1,
            StatusCode::TOO_MANY_REQUESTS => {}
            other => panic!("guess {i}: {other}"),
        }
    }
    assert_eq!(refused, 11, "guesses that reached the key check");
}

#[tokio::test]
async fn plans_refuse_unknown_keys_and_unauthenticated_reloads_in_memory() {
    let app = plans::app(
        MemoryStore::new(),
        None,
        ADMIN_TOKEN,
        in_repo(plans::DEFAULT_CONFIG),
    )
    .await
    .unwrap();
    plans_probe(&app).await;
}

#[tokio::test]
async fn plans_keep_api_keys_out_of_redis() {
    let redis = RedisServer::start();
    let store = RedisStore::new(redis.pool(4)).timeout(common::GENEROUS);
    let app = plans::app(store, None, ADMIN_TOKEN, in_repo(plans::DEFAULT_CONFIG))
        .await
        .unwrap();
    plans_probe(&app).await;
    let keys = redis_keys(&redis).await;
    assert!(!keys.is_empty());
    for (key, account, plan) in plans::API_KEYS {
        assert!(!keys.iter().any(|k| k.contains(key)), "{key} in {keys:?}");
        if plan != "internal" {
            assert!(
                keys.iter().any(|k| k.contains(&format!("acct:{account}"))),
                "{account}'s keys in {keys:?}"
            );
        }
    }
}

/// The quota names of every `RateLimit-Policy` item of a response.
fn policy_names(res: &http::Response<Body>) -> Vec<String> {
    res.headers()
        .get_all("ratelimit-policy")
        .iter()
        .flat_map(|v| v.to_str().unwrap().split(','))
        .map(|item| {
            let name = item.split(';').next().unwrap().trim();
            name.trim_matches('"').to_owned()
        })
        .collect()
}

#[tokio::test]
async fn plans_headers_name_the_ip_guard_apart_from_the_plan() {
    let app = plans::app(
        MemoryStore::new(),
        None,
        ADMIN_TOKEN,
        in_repo(plans::DEFAULT_CONFIG),
    )
    .await
    .unwrap();
    let res = send(
        &app,
        request(
            Method::GET,
            "/",
            [198, 51, 100, 30],
            &[("x-api-key", "key-free")],
        ),
    )
    .await;
    assert_eq!(res.status(), StatusCode::OK);
    let mut names = policy_names(&res);
    assert!(names.contains(&"ip".to_owned()), "{names:?}");
    assert!(names.contains(&"minute".to_owned()), "{names:?}");
    let all = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), all, "a quota named twice: {names:?}");
}

/// `path` from the repository's root (this test package is `tests/`, its
/// working directory when run).
fn in_repo(path: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path)
}

/// A copy of `examples/plans.toml` in a file of the test's own, the `pro`
/// plan's burst set to `burst`.
fn plans_file(name: &str, burst: u32) -> std::path::PathBuf {
    let text = std::fs::read_to_string(in_repo(plans::DEFAULT_CONFIG)).unwrap();
    let from = "pro = \"gcra 600/min burst=50 name=minute\"";
    assert!(text.contains(from), "examples/plans.toml changed: {text}");
    let text = text.replace(
        from,
        &format!("pro = \"gcra 600/min burst={burst} name=minute\""),
    );
    let path = std::env::temp_dir().join(format!(
        "tower-redis-ratelimit-{}-{name}.toml",
        std::process::id()
    ));
    std::fs::write(&path, text).unwrap();
    path
}

/// What `GET /` as the `pro` account says (`plan pro: <left> left of ...`).
async fn as_pro(app: &Router, peer: [u8; 4]) -> String {
    let res = send(
        app,
        request(Method::GET, "/", peer, &[("x-api-key", "key-pro")]),
    )
    .await;
    assert_eq!(res.status(), StatusCode::OK);
    text(res).await
}

async fn reload(app: &Router, peer: [u8; 4]) -> StatusCode {
    let bearer = format!("Bearer {ADMIN_TOKEN}");
    let req = request(
        Method::POST,
        "/admin/reload",
        peer,
        &[("authorization", &bearer)],
    );
    status(app, req).await
}

#[tokio::test]
async fn plans_read_the_file_it_is_given_and_reload_it() {
    let path = plans_file("reload-memory", 7);
    let app = plans::app(MemoryStore::new(), None, ADMIN_TOKEN, &path)
        .await
        .unwrap();
    assert!(
        as_pro(&app, [10, 1, 0, 1])
            .await
            .starts_with("plan pro: 6 left")
    );
    std::fs::write(
        &path,
        std::fs::read_to_string(&path)
            .unwrap()
            .replace("burst=7", "burst=9"),
    )
    .unwrap();
    assert_eq!(reload(&app, [10, 1, 0, 2]).await, StatusCode::OK);
    // (one used of the burst of 9)
    assert!(
        as_pro(&app, [10, 1, 0, 1])
            .await
            .starts_with("plan pro: 7 left")
    );
    // a file that is gone: the app does not start
    std::fs::remove_file(&path).unwrap();
    let e = plans::app(MemoryStore::new(), None, ADMIN_TOKEN, &path)
        .await
        .err()
        .unwrap();
    assert!(e.to_string().contains("reading"), "{e}");
}

/// With Redis, the limits a reload published win over the file when an
/// instance starts, even over a file edited since (the header comment says
/// so).
#[tokio::test]
async fn plans_on_redis_start_with_the_published_limits_not_the_file() {
    let redis = RedisServer::start();
    let store = || RedisStore::new(redis.pool(4)).timeout(common::GENEROUS);
    let sync = Some(std::time::Duration::from_secs(1));
    let path = plans_file("published-redis", 9);
    let first = plans::app(store(), sync, ADMIN_TOKEN, &path).await.unwrap();
    assert_eq!(reload(&first, [10, 2, 0, 1]).await, StatusCode::OK);
    // the file edited back, then a restart: the published burst of 9 holds
    // from the first request
    let path = plans_file("published-redis", 7);
    let second = plans::app(store(), sync, ADMIN_TOKEN, &path).await.unwrap();
    let said = as_pro(&second, [10, 2, 0, 2]).await;
    assert!(said.starts_with("plan pro: 8 left"), "{said}");
    std::fs::remove_file(&path).unwrap();
}

// ---------------------------------------------------------------------------
// examples/metrics.rs
// ---------------------------------------------------------------------------

#[cfg(feature = "metrics")]
#[tokio::test]
async fn metrics_are_off_the_public_app_and_its_limit_is_per_client_ip() {
    let app = metrics_example::app(MemoryStore::new()).unwrap();
    // `/metrics` is no public route
    let res = send(
        &app,
        request(Method::GET, "/metrics", [198, 51, 100, 40], &[]),
    )
    .await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    // one client spends its burst of 5; another keeps its own
    let greedy = [198, 51, 100, 41];
    for i in 0..5 {
        let res = send(&app, request(Method::GET, "/", greedy, &[])).await;
        assert_eq!(res.status(), StatusCode::OK, "request {i}");
    }
    let res = send(&app, request(Method::GET, "/", greedy, &[])).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let res = send(&app, request(Method::GET, "/", [198, 51, 100, 42], &[])).await;
    assert_eq!(res.status(), StatusCode::OK, "another client");
    // without connect info there is no client to key: 500, not one shared key
    let mut no_peer = request(Method::GET, "/", [198, 51, 100, 43], &[]);
    no_peer.extensions_mut().clear();
    assert_eq!(
        status(&app, no_peer).await,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    // the metrics app serves `/metrics` and nothing else
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let metrics = metrics_example::metrics_app(recorder.handle());
    let res = send(
        &metrics,
        request(Method::GET, "/metrics", [127, 0, 0, 1], &[]),
    )
    .await;
    assert_eq!(res.status(), StatusCode::OK);
    let res = send(&metrics, request(Method::GET, "/", [127, 0, 0, 1], &[])).await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
}

// ---------------------------------------------------------------------------
// What a copy needs: every example's list of crates, and the README's
// ---------------------------------------------------------------------------

/// The crates (by their name in code: `http_body`) that `code` names as the
/// first segment of a path, comments left out: what a copy of it must depend
/// on, besides the standard library, this crate, and `local` modules.
fn crates_used(code: &str, local: &[&str]) -> std::collections::BTreeSet<String> {
    const NOT_CRATES: [&str; 7] = [
        "std",
        "core",
        "alloc",
        "crate",
        "self",
        "super",
        "tower_redis_ratelimit",
    ];
    // (primitive types: `bool::from`, `u64::MAX`)
    const PRIMITIVES: [&str; 17] = [
        "bool", "char", "str", "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32",
        "i64", "i128", "isize", "f32", "f64",
    ];
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let lines: Vec<&str> = code
        .lines()
        .map(|l| {
            let l = l.trim_start();
            l.strip_prefix("# ").unwrap_or(l) // doctest lines
        })
        .filter(|l| !l.starts_with("//"))
        .map(|l| l.split(" //").next().unwrap())
        .collect();
    // `use` statements: their first segment is a crate (or not); every
    // name they bring in is a path's start, not a crate, in the code
    let mut used = std::collections::BTreeSet::new();
    let mut imported: Vec<String> = Vec::new();
    let mut rest = Vec::new();
    let mut statement: Option<String> = None;
    for line in lines {
        let start = line
            .strip_prefix("pub ")
            .unwrap_or(line)
            .strip_prefix("use ");
        match (&mut statement, start) {
            (None, Some(tree)) => statement = Some(tree.to_owned()),
            (Some(s), _) => s.push_str(line),
            (None, None) => {
                rest.push(line);
                continue;
            }
        }
        if let Some(s) = statement.take_if(|s| s.contains(';')) {
            let first: String = s
                .trim_start_matches(':')
                .chars()
                .take_while(|c| ident(*c))
                .collect();
            used.insert(first);
            imported.extend(
                s.split(|c: char| !ident(c))
                    .filter(|w| !w.is_empty())
                    .map(str::to_owned),
            );
        }
    }
    for line in rest {
        for (at, _) in line.match_indices("::") {
            let start = line[..at].rfind(|c: char| !ident(c)).map_or(0, |i| i + 1);
            let name = &line[start..at];
            let after_path = start >= 2 && &line[start - 2..start] == "::";
            let turbofish = line[at + 2..].starts_with('<');
            if !name.starts_with(|c: char| c.is_ascii_lowercase())
                || after_path
                || turbofish
                || imported.iter().any(|i| i == name)
            {
                continue;
            }
            used.insert(name.to_owned());
        }
    }
    used.retain(|name| {
        !NOT_CRATES.contains(&name.as_str())
            && !PRIMITIVES.contains(&name.as_str())
            && !local.contains(&name.as_str())
            && !name.starts_with(|c: char| c.is_ascii_uppercase())
            && !name.is_empty()
    });
    used
}

/// The crates an example's header says it needs: the backquoted names
/// of its sentence "Crates it needs besides this one ...", parentheses
/// (features) left out, as named in code (`-` as `_`).
fn crates_listed(example: &str) -> Option<std::collections::BTreeSet<String>> {
    let header: String = example
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join(" ");
    let from = header.find("Crates it needs besides this one")?;
    let sentence = &header[from..];
    let end = sentence
        .char_indices()
        .find(|&(i, c)| {
            let next = sentence[i + 1..].chars().next();
            c == '.' && next.is_none_or(char::is_whitespace)
        })
        .map_or(sentence.len(), |(i, _)| i);
    let mut text = String::new();
    let mut depth = 0;
    for c in sentence[..end].chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ if depth == 0 => text.push(c),
            _ => {}
        }
    }
    Some(
        text.split('`')
            .skip(1)
            .step_by(2)
            .filter(|name| !name.contains(['/', '.', ':']))
            .map(|name| name.replace('-', "_"))
            .collect(),
    )
}

#[test]
fn every_example_lists_the_crates_it_needs() {
    let mut seen = 0;
    for entry in std::fs::read_dir(in_repo("examples")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        seen += 1;
        let code = std::fs::read_to_string(&path).unwrap();
        let listed = crates_listed(&code)
            .unwrap_or_else(|| panic!("{}: no \"Crates it needs\" in its header", path.display()));
        // the files it includes with #[path], and their modules
        let mut all = code.clone();
        let mut local = Vec::new();
        for line in code.lines() {
            if let Some(rest) = line.trim().strip_prefix("#[path = \"") {
                let file = rest.split('"').next().unwrap();
                all.push_str(&std::fs::read_to_string(path.with_file_name(file)).unwrap());
            }
            if let Some(name) = line.trim().strip_prefix("mod ") {
                local.push(name.trim_end_matches(';').to_owned());
            }
        }
        let local: Vec<&str> = local.iter().map(String::as_str).collect();
        let used = crates_used(&all, &local);
        assert_eq!(
            listed,
            used,
            "{}: the crates its header lists, and those its code uses",
            path.display()
        );
    }
    assert!(seen >= 7, "{seen} examples");
}

/// The crates a Markdown text's first `toml` block lists (from `start` on),
/// by their name in code.
fn listed_crates(text: &str, start: &str) -> std::collections::BTreeSet<String> {
    let from = &text[text.find(start).unwrap()..];
    let toml_block = from
        .split("```toml")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap();
    let listed: std::collections::BTreeSet<String> = toml_block
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k.trim()))
        .filter(|k| !k.starts_with('#') && !k.is_empty())
        .map(|k| k.replace('-', "_"))
        .collect();
    assert!(listed.contains("tower_redis_ratelimit"), "{listed:?}");
    listed
}

/// The crates the `rust` blocks of a Markdown text use.
fn snippet_crates(text: &str) -> std::collections::BTreeSet<String> {
    let mut used = std::collections::BTreeSet::new();
    for block in text.split("```rust").skip(1) {
        let code = block.split("```").next().unwrap();
        used.extend(crates_used(code, &[]));
    }
    used
}

#[test]
fn the_readmes_dependency_list_covers_its_snippets() {
    let readme = std::fs::read_to_string(in_repo("README.md")).unwrap();
    let listed = listed_crates(&readme, "## Quick start");
    let used = snippet_crates(&readme);
    let missing: Vec<_> = used.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "README snippets use {missing:?}, not in the Quick start list {listed:?}"
    );
}

#[test]
fn the_guides_dependency_list_covers_its_snippets() {
    let quick_start = std::fs::read_to_string(in_repo("docs/guide/quick-start.md")).unwrap();
    let listed = listed_crates(&quick_start, "# Quick start");
    let mut chapters = 0;
    for entry in std::fs::read_dir(in_repo("docs/guide")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "md") {
            continue;
        }
        chapters += 1;
        let used = snippet_crates(&std::fs::read_to_string(&path).unwrap());
        let missing: Vec<_> = used.difference(&listed).collect();
        assert!(
            missing.is_empty(),
            "{}: its snippets use {missing:?}, not in the quick start's list {listed:?}",
            path.display()
        );
    }
    assert!(chapters >= 8, "{chapters} chapters");
}
