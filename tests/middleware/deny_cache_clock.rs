//! The deny cache follows the clock its limiter decides by: a cached denial
//! ends when the limiter's own time reaches its retry, whatever real time
//! (or tokio's paused time) does. A manual clock on the memory store, on
//! Redis, under plans and under a fallback; Redis's own clock, which runs in
//! real time, whatever tokio's clock does.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::http::{get_req, header, make_app, peer, send, text};
use common::{GENEROUS, RedisServer};
use http::StatusCode;
use tower_redis_ratelimit::clock::ManualClock;
use tower_redis_ratelimit::middleware::{FailurePolicy, PlanFromExtension};
use tower_redis_ratelimit::plans::{Plan, Plans, PlansConfig};
use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter, RedisStore};

const MINUTE: Duration = Duration::from_secs(60);

/// Two requests a minute from one peer, then denials: the first goes to the
/// store, the rest are the deny cache's; once `clock` passes the retry the
/// next request is admitted, not answered from the cache.
async fn denied_until_the_clock_passes_the_retry(layer: RateLimitLayer, clock: &ManualClock) {
    let app = make_app(layer.clone());
    for _ in 0..2 {
        assert_eq!(send(&app, get_req("/")).await.status(), StatusCode::OK);
    }
    for _ in 0..5 {
        let res = send(&app, get_req("/")).await;
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    }
    assert_eq!(layer.stats().deny_cache_hits, 4, "served from the cache");
    // the cache's own bound (a second of its clock) is not what ends it
    clock.advance(MINUTE - Duration::from_millis(1));
    let res = send(&app, get_req("/")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&res, "retry-after"), Some("1"));
    clock.advance(Duration::from_millis(1));
    assert_eq!(send(&app, get_req("/")).await.status(), StatusCode::OK);
}

fn minute() -> Quota {
    Quota::fixed_window(Rate::per_minute(2)).name("minute")
}

#[tokio::test]
async fn a_cached_denial_ends_on_the_manual_clock_of_a_memory_store_limiter() {
    let clock = common::memory::clock();
    let limiter = common::memory::limiter(&clock, "memory", [minute()]);
    denied_until_the_clock_passes_the_retry(RateLimitLayer::new(limiter, peer), &clock).await;
}

#[tokio::test]
async fn a_cached_denial_ends_on_the_manual_clock_of_a_redis_limiter() {
    let server = RedisServer::start();
    let clock = common::memory::clock();
    let limiter = RateLimiter::builder()
        .store(RedisStore::new(server.pool(2)).timeout(GENEROUS))
        .clock(clock.clone())
        .quota(minute())
        .build()
        .unwrap();
    denied_until_the_clock_passes_the_retry(RateLimitLayer::new(limiter, peer), &clock).await;
}

#[tokio::test]
async fn a_cached_denial_ends_on_the_manual_clock_of_a_plan() {
    let clock = common::memory::clock();
    let plans = Plans::builder()
        .store(MemoryStore::new())
        .clock(clock.clone())
        .config(PlansConfig::new("free").plan("free", Plan::new([minute()])))
        .build()
        .unwrap();
    let layer = RateLimitLayer::with_plans(plans, peer, PlanFromExtension::<String>::new());
    denied_until_the_clock_passes_the_retry(layer, &clock).await;
}

#[tokio::test]
async fn a_cached_denial_of_the_fallback_ends_on_the_limiters_manual_clock() {
    let clock = common::memory::clock();
    // a Redis that refuses connections: every decision is the fallback's
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let pool = deadpool_redis::Config::from_url(format!("redis://127.0.0.1:{port}"))
        .create_pool(Some(deadpool_redis::Runtime::Tokio1))
        .unwrap();
    let limiter = RateLimiter::builder()
        .store(RedisStore::new(pool).timeout(GENEROUS))
        .clock(clock.clone())
        .quota(minute())
        .build()
        .unwrap();
    let layer = RateLimitLayer::new(limiter, peer)
        .on_store_error(FailurePolicy::Fallback(MemoryStore::new()));
    denied_until_the_clock_passes_the_retry(layer, &clock).await;
}

/// On Redis's clock the cache times a denial by this process's monotonic
/// clock, which runs as Redis's does, in real time: tokio's clock, paused
/// while the denial runs out (then behind real time), does not hold it
/// past its end.
#[tokio::test]
async fn a_cached_denial_on_redis_clock_ends_in_real_time_whatever_tokio_time_does() {
    let server = RedisServer::start();
    let limiter = RateLimiter::builder()
        .store(RedisStore::new(server.pool(2)).timeout(GENEROUS))
        .quota(Quota::fixed_window(Rate::new(
            1,
            Duration::from_millis(300),
        )))
        .build()
        .unwrap();
    let layer = RateLimitLayer::new(limiter, peer);
    let app = make_app(layer.clone());
    // (a window opened just now: at most 300 ms until the key expires in Redis)
    let mut admitted = 0;
    while admitted == 0 || layer.stats().deny_cache_hits == 0 {
        let res = send(&app, get_req("/")).await;
        match res.status() {
            // (decided by Redis: a store error would fail open, no decision)
            StatusCode::OK => {
                assert_eq!(text(res).await, "remaining=0");
                admitted += 1;
            }
            s => assert_eq!(s, StatusCode::TOO_MANY_REQUESTS),
        }
    }
    tokio::time::pause();
    std::thread::sleep(Duration::from_millis(400));
    tokio::time::resume();
    let res = send(&app, get_req("/")).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(text(res).await, "remaining=0");
    assert_eq!(layer.stats().store_errors, 0);
}
