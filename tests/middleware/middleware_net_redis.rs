//! The middleware on real sockets where Redis is the subject: app instances
//! sharing one private redis-server, and a lease released over the network.
//! (What holds on any store is `tests/middleware/middleware_net.rs`, on the memory store.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use axum::Router;
use axum::routing::get;
use common::net::{serve, status};
use common::{GENEROUS, RedisServer};
use http::StatusCode;
use tower_redis_ratelimit::key::PeerIp;
use tower_redis_ratelimit::middleware::FailurePolicy;
use tower_redis_ratelimit::{Quota, Rate, RateLimitLayer, RateLimiter, RedisStore};

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
            .store(RedisStore::new(redis.pool(4)).timeout(GENEROUS))
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

/// The release is a Redis round trip made from the body's drop.
/// (Its memory-store twin is in `tests/middleware/middleware_net.rs`.)
#[tokio::test]
async fn a_client_disconnect_mid_stream_releases_the_concurrency_lease() {
    let redis = RedisServer::start();
    let limiter = RateLimiter::builder()
        .store(RedisStore::new(redis.pool(4)).timeout(GENEROUS))
        .prefix("conc")
        .quota(Quota::concurrency(1).name("inflight"))
        .build()
        .unwrap();
    common::net::a_client_disconnect_mid_stream_releases_the_lease(limiter).await;
}
