//! The middleware against a private redis-server, where Redis itself is the
//! subject: a Redis that is down or hung (failure policies, timeouts, the
//! warnings they log), the Redis commands the deny cache saves, and the Redis
//! keys odd header values become. Everything else about the middleware runs
//! on the memory store in `tests/middleware/middleware.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::http::{get_req, header, make_app, peer, send, text};
use common::{GENEROUS, RedisServer};
use http::request::Parts;
use http::{HeaderValue, StatusCode};
use tower_redis_ratelimit::middleware::{FailurePolicy, MissingKey};
use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter, RedisStore};

fn redis_limiter(server: &RedisServer, prefix: &str, quota: Quota) -> RateLimiter {
    RateLimiter::builder()
        .store(RedisStore::new(server.pool(4)).timeout(GENEROUS))
        .prefix(prefix)
        .quota(quota)
        .build()
        .unwrap()
}

/// Calls of every command except the INFO/CONFIG probes of the test itself.
async fn redis_calls(redis: &RedisServer) -> u64 {
    redis
        .info_commandstats()
        .await
        .iter()
        .filter(|(cmd, _)| !cmd.starts_with("info") && !cmd.starts_with("config"))
        .map(|(_, calls)| calls)
        .sum()
}

#[tokio::test]
async fn the_deny_cache_cuts_redis_commands_under_a_flood_to_at_most_one_per_100_denials() {
    let redis = RedisServer::start();
    let limiter = redis_limiter(
        &redis,
        "flood",
        Quota::gcra(Rate::per_minute(5)).name("minute"),
    );
    let layer = RateLimitLayer::new(limiter, peer);
    let app = make_app(layer.clone());
    for _ in 0..5 {
        assert_eq!(send(&app, get_req("/")).await.status(), StatusCode::OK);
    }
    let before = redis_calls(&redis).await;
    let denials = 2_000;
    for _ in 0..denials {
        let res = send(&app, get_req("/")).await;
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        let retry: u64 = header(&res, "retry-after").unwrap().parse().unwrap();
        assert!((1..=12).contains(&retry), "{retry}");
        assert!(res.headers().contains_key("ratelimit"));
    }
    let commands = redis_calls(&redis).await - before - 1; // minus the INFO itself
    eprintln!("deny cache: {commands} Redis commands for {denials} denied requests");
    assert!(
        commands * 100 <= denials,
        "{commands} Redis commands for {denials} denied requests"
    );
    let stats = layer.stats();
    assert_eq!(stats.denied + stats.deny_cache_hits, denials);
    assert!(stats.deny_cache_hits >= denials - 20, "{stats:?}");

    // Without the cache, every denial is a store call.
    let limiter = redis_limiter(&redis, "nocache", Quota::gcra(Rate::per_minute(5)));
    let app = make_app(RateLimitLayer::new(limiter, peer).deny_cache(false));
    for _ in 0..5 {
        send(&app, get_req("/")).await;
    }
    let before = redis.command_calls("evalsha").await;
    for _ in 0..100 {
        assert_eq!(
            send(&app, get_req("/")).await.status(),
            StatusCode::TOO_MANY_REQUESTS
        );
    }
    assert_eq!(redis.command_calls("evalsha").await - before, 100);
}

#[tokio::test]
async fn the_failure_policy_applies_when_redis_is_down() {
    let mut redis = RedisServer::start();
    let quota = || Quota::fixed_window(Rate::per_minute(2)).name("minute");
    // Connections to a killed Redis are refused at once: no timeout needed.
    let store = |redis: &RedisServer| RedisStore::new(redis.pool(2)).timeout(GENEROUS);
    let limiter = |redis: &RedisServer| {
        RateLimiter::builder()
            .store(store(redis))
            .prefix("failure")
            .quota(quota())
            .build()
            .unwrap()
    };
    let open = RateLimitLayer::new(limiter(&redis), peer);
    let closed = RateLimitLayer::new(limiter(&redis), peer).on_store_error(FailurePolicy::Closed);
    let fallback = RateLimitLayer::new(limiter(&redis), peer)
        .on_store_error(FailurePolicy::Fallback(MemoryStore::new()));
    let (open_app, closed_app, fallback_app) = (
        make_app(open.clone()),
        make_app(closed.clone()),
        make_app(fallback.clone()),
    );
    // While Redis is up, all three limit through it.
    assert_eq!(send(&open_app, get_req("/")).await.status(), StatusCode::OK);
    assert_eq!(redis.dbsize().await, 1);

    redis.kill();
    for _ in 0..5 {
        let res = send(&open_app, get_req("/")).await;
        assert_eq!(res.status(), StatusCode::OK, "fail open");
        assert!(
            !res.headers().contains_key("ratelimit"),
            "no decision, no headers"
        );
        assert_eq!(text(res).await, "no decision");
    }
    assert_eq!(open.stats().store_errors, 5);

    let res = send(&closed_app, get_req("/")).await;
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE, "fail closed");
    assert_eq!(header(&res, "retry-after"), Some("1"));

    let statuses: Vec<StatusCode> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(send(&fallback_app, get_req("/")).await.status());
        }
        v
    };
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ],
        "the memory store enforces the same quota"
    );
    assert_eq!(fallback.stats().fallback_decisions, 3);

    // Back up: decisions come from Redis again.
    redis.restart();
    let res = send(&closed_app, get_req("/")).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert!(res.headers().contains_key("ratelimit"));
}

#[tokio::test]
async fn a_hung_redis_is_bounded_by_the_timeout() {
    let redis = RedisServer::start();
    let limiter = RateLimiter::builder()
        .store(RedisStore::new(redis.pool(2)).timeout(Duration::from_secs(1)))
        .prefix("hung")
        .quota(Quota::fixed_window(Rate::per_minute(2)))
        .build()
        .unwrap();
    let layer = RateLimitLayer::new(limiter, peer).on_store_error(FailurePolicy::Closed);
    let app = make_app(layer.clone());
    assert_eq!(send(&app, get_req("/")).await.status(), StatusCode::OK);
    redis.pause();
    let res = tokio::time::timeout(Duration::from_secs(10), send(&app, get_req("/")))
        .await
        .expect("the store's timeout ends the store call");
    redis.resume();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(layer.stats().store_errors, 1);
}

#[tokio::test]
async fn malformed_and_non_utf8_header_values_become_bounded_redis_keys_with_a_ttl() {
    let redis = RedisServer::start();
    let limiter = redis_limiter(
        &redis,
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
        req
    };
    for key in [&b"\xff\xfe\xfd"[..], b"{slot}", b"a\tb", &[b'k'; 4_000][..]] {
        assert_eq!(send(&app, with(key)).await.status(), StatusCode::OK);
        let res = send(&app, with(key)).await;
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(res.headers().contains_key("retry-after"));
    }
    // Every stored key is hashed or verbatim-safe: no braces steering the slot, nothing huge.
    let keys = redis.keys_with_ttl().await;
    assert_eq!(keys.len(), 4);
    for (k, ttl) in keys {
        assert!(k.len() < 200, "{}", String::from_utf8_lossy(&k));
        assert_eq!(k.iter().filter(|&&b| b == b'{').count(), 1);
        assert!(ttl > 0);
    }
}

#[cfg(feature = "tracing")]
#[tokio::test(flavor = "current_thread")]
async fn a_redis_outage_logs_at_most_one_warning_a_second() {
    let log = common::logs::capture();
    let mut redis = RedisServer::start();
    redis.kill();
    let limiter = redis_limiter(&redis, "traced2", Quota::fixed_window(Rate::per_minute(1)));
    let app = make_app(RateLimitLayer::new(limiter, peer));
    let started = std::time::Instant::now();
    for _ in 0..200 {
        assert_eq!(send(&app, get_req("/")).await.status(), StatusCode::OK);
    }
    let elapsed = started.elapsed();

    let warnings = log.lines_with("WARN");
    // an outage logs at most one warning a second, not one per request: one
    // per started second, plus one for the millisecond rounding of the interval
    assert!(!warnings.is_empty(), "{}", log.text());
    assert!(
        warnings.len() as u64 <= 2 + elapsed.as_secs(),
        "{} warnings in {elapsed:?}",
        warnings.len()
    );
    assert!(
        warnings.iter().all(|w| w.contains("FailurePolicy::Open")),
        "{warnings:?}"
    );
}
