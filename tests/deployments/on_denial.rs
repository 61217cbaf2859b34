//! Recording a denial (`OnDenial`) on a real 3-master Cluster and on a
//! Sentinel deployment: the same scripts as on a single Redis, each
//! decision one call on the key's node, every state the memory store's.
#![cfg(any(feature = "cluster", feature = "sentinel"))]

use crate::common;

use std::time::Duration;

use tower_redis_ratelimit::clock::ManualClock;
use tower_redis_ratelimit::limiter::{OnDenial, RateLimiterBuilder};
use tower_redis_ratelimit::{Decision, MemoryStore, Quota, Rate, RateLimiter};

/// The limiters compared: one quota (fast path on Redis's clock, and on a
/// manual clock), a token bucket, and several quotas.
fn shapes() -> Vec<(Vec<Quota>, OnDenial)> {
    vec![
        (
            vec![Quota::fixed_window(Rate::per_hour(5)).name("w")],
            OnDenial::Record,
        ),
        (
            vec![Quota::token_bucket(Rate::per_minute(6)).burst(3).name("t")],
            OnDenial::Record,
        ),
        (
            vec![
                Quota::sliding_window_log(Rate::per_minute(4)).name("l"),
                Quota::gcra(Rate::per_minute(10)).name("g"),
            ],
            OnDenial::RecordIfOver,
        ),
    ]
}

fn comparable(d: &Decision) -> impl PartialEq + std::fmt::Debug {
    (
        d.allowed(),
        d.recorded(),
        d.remaining(),
        d.reset_after(),
        d.retry_after(),
        d.quotas().collect::<Vec<_>>(),
    )
}

/// Every shape on `store` against the memory store, under one manual clock.
async fn against_memory(store: impl Fn(RateLimiterBuilder) -> RateLimiter) {
    for (i, (quotas, mode)) in shapes().into_iter().enumerate() {
        let clock = ManualClock::new(Duration::from_secs(10_000));
        let b = RateLimiter::builder()
            .prefix(format!("od{i}"))
            .quotas(quotas)
            .clock(clock.clone())
            .on_denial(mode);
        let memory = b.clone().store(MemoryStore::new()).build().unwrap();
        let redis = store(b);
        for (step, cost) in [3, 3, 1, 0, 9, u64::MAX, 2, 1].into_iter().enumerate() {
            clock.advance(Duration::from_millis(700));
            for key in ["a", "b{x}"] {
                let (m, r) = (
                    memory.check_n(key, cost).await.unwrap(),
                    redis.check_n(key, cost).await.unwrap(),
                );
                assert_eq!(
                    comparable(&m),
                    comparable(&r),
                    "shape {i} step {step} {key}"
                );
                let (m, r) = (
                    memory.peek(key).await.unwrap(),
                    redis.peek(key).await.unwrap(),
                );
                assert_eq!(
                    comparable(&m),
                    comparable(&r),
                    "shape {i} step {step} {key} peek"
                );
            }
        }
        assert!(redis.peek("a").await.unwrap().denied() || i == 2);
    }
}

#[cfg(feature = "cluster")]
#[tokio::test]
async fn on_a_cluster_recorded_denials_are_the_memory_stores() {
    use tower_redis_ratelimit::RedisClusterStore;
    let cluster = common::RedisCluster::start(3, 0);
    let pool = deadpool_redis::cluster::Config::from_urls(cluster.urls())
        .create_pool(Some(deadpool_redis::Runtime::Tokio1))
        .unwrap();
    let store = RedisClusterStore::new(pool).timeout(common::GENEROUS);
    against_memory(|b| b.store(store.clone()).build().unwrap()).await;
}

#[cfg(feature = "sentinel")]
#[tokio::test]
async fn on_sentinel_recorded_denials_are_the_memory_stores() {
    use common::{RedisSentinel, sentinel::MASTER_NAME};
    use tower_redis_ratelimit::RedisSentinelStore;
    let deployment = RedisSentinel::start();
    let store = RedisSentinelStore::from_urls(deployment.sentinel_urls(), MASTER_NAME)
        .unwrap()
        .timeout(common::GENEROUS);
    against_memory(|b| b.store(store.clone()).build().unwrap()).await;
}
