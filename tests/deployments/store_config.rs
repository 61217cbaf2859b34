//! Store settings under which every call would fail are rejected by
//! `build()` with a `ConfigError` naming the field, on every store; stores
//! built from URLs need no second crate. (Only the `from_url` test against a
//! private redis-server connects: building a pool or a limiter opens no socket.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::common;

use common::RedisServer;
use tower_redis_ratelimit::error::ConfigError;
use tower_redis_ratelimit::store::Store;
use tower_redis_ratelimit::{Quota, Rate, RateLimiter, RedisStore};

/// Never dialled: pools connect lazily and these limiters are never used.
const URL: &str = "redis://127.0.0.1:1/";

fn pool(max_size: usize) -> deadpool_redis::Pool {
    let mut cfg = deadpool_redis::Config::from_url(URL);
    cfg.pool = Some(deadpool_redis::PoolConfig::new(max_size));
    cfg.create_pool(Some(deadpool_redis::Runtime::Tokio1))
        .unwrap()
}

fn build(store: impl Store) -> Result<RateLimiter, ConfigError> {
    RateLimiter::builder()
        .store(store)
        .prefix("store-config")
        .quota(Quota::gcra(Rate::per_second(10)))
        .build()
}

fn rejected(store: impl Store, field: &str, hint: &str) {
    let e = build(store).unwrap_err();
    assert_eq!(e.field(), field, "{e}");
    assert!(e.to_string().contains(hint), "{e}");
}

#[tokio::test]
async fn a_redis_store_with_a_zero_timeout_is_rejected() {
    rejected(
        RedisStore::new(pool(4)).timeout(Duration::ZERO),
        "store.timeout",
        "RedisStore::timeout(Duration::from_millis(100))",
    );
    // whatever the order of the settings
    rejected(
        RedisStore::new(pool(4))
            .timeout(Duration::ZERO)
            .connections(2),
        "store.timeout",
        "greater than zero",
    );
}

#[tokio::test]
async fn a_redis_store_with_zero_connections_is_rejected() {
    rejected(
        RedisStore::new(pool(4)).connections(0),
        "store.connections",
        "RedisStore::connections(1)",
    );
    rejected(
        RedisStore::new(pool(4))
            .connections(0)
            .timeout(Duration::from_millis(50)),
        "store.connections",
        "at least 1",
    );
}

#[tokio::test]
async fn a_redis_store_over_a_pool_of_size_zero_is_rejected() {
    rejected(
        RedisStore::new(pool(0)),
        "store.pool.max_size",
        "max_size of at least 1",
    );
}

#[tokio::test]
async fn the_smallest_working_redis_settings_are_accepted() {
    build(
        RedisStore::new(pool(1))
            .connections(1)
            .timeout(Duration::from_millis(1)),
    )
    .unwrap();
    build(RedisStore::new(pool(4)).connections(4)).unwrap();
}

#[test]
fn a_redis_store_from_a_bad_url_is_a_config_error_that_does_not_echo_the_password() {
    for url in [
        "",
        "not a url",
        "http://127.0.0.1/",
        "redis://:s3cret@[::1/",
    ] {
        let e = RedisStore::from_url(url).unwrap_err();
        assert_eq!(e.field(), "store.url", "{url:?}: {e}");
        assert!(e.to_string().contains("redis://"), "{url:?}: {e}");
        assert!(!e.to_string().contains("s3cret"), "{url:?}: {e}");
    }
}

#[tokio::test]
async fn a_redis_store_from_a_url_needs_no_second_crate() {
    let server = RedisServer::start();
    let lim = build(RedisStore::from_url(&server.url()).unwrap()).unwrap();
    let d = lim.check("k").await.unwrap();
    assert!(d.allowed());
    assert_eq!(d.remaining(), 9);
    // decided by that Redis (the first EVALSHA meets NOSCRIPT, the script is loaded, the second runs)
    assert_eq!(server.command_calls("evalsha").await, 2);
    // the re-exported deadpool-redis builds pools the store accepts
    let mut cfg = tower_redis_ratelimit::deadpool_redis::Config::from_url(server.url());
    cfg.pool = Some(tower_redis_ratelimit::deadpool_redis::PoolConfig::new(2));
    let pool = cfg
        .create_pool(Some(tower_redis_ratelimit::deadpool_redis::Runtime::Tokio1))
        .unwrap();
    build(RedisStore::new(pool)).unwrap();
}

#[cfg(feature = "cluster")]
mod cluster {
    use super::*;
    use tower_redis_ratelimit::RedisClusterStore;

    fn cluster_pool(max_size: usize) -> deadpool_redis::cluster::Pool {
        let mut cfg = deadpool_redis::cluster::Config::from_urls(vec![URL.to_owned()]);
        cfg.pool = Some(deadpool_redis::PoolConfig::new(max_size));
        cfg.create_pool(Some(deadpool_redis::Runtime::Tokio1))
            .unwrap()
    }

    #[tokio::test]
    async fn a_cluster_store_with_a_zero_timeout_is_rejected() {
        rejected(
            RedisClusterStore::new(cluster_pool(4)).timeout(Duration::ZERO),
            "store.timeout",
            "RedisClusterStore::timeout(Duration::from_millis(100))",
        );
    }

    #[tokio::test]
    async fn a_cluster_store_over_a_pool_of_size_zero_is_rejected() {
        rejected(
            RedisClusterStore::new(cluster_pool(0)),
            "store.pool.max_size",
            "max_size of at least 1",
        );
    }

    #[test]
    fn a_cluster_store_from_no_or_bad_urls_is_a_config_error() {
        let e = RedisClusterStore::from_urls(Vec::<String>::new()).unwrap_err();
        assert_eq!(e.field(), "store.urls", "{e}");
        assert!(e.to_string().contains("seed node"), "{e}");
        let e = RedisClusterStore::from_urls(["redis://127.0.0.1:7000/", "nope://:s3cret@x"])
            .unwrap_err();
        assert_eq!(e.field(), "store.urls", "{e}");
        assert!(!e.to_string().contains("s3cret"), "{e}");
        RedisClusterStore::from_urls(["redis://127.0.0.1:7000/", "redis://127.0.0.1:7001/"])
            .unwrap();
    }

    #[tokio::test]
    async fn the_smallest_working_cluster_settings_are_accepted() {
        build(RedisClusterStore::new(cluster_pool(1)).timeout(Duration::from_millis(1))).unwrap();
    }
}
