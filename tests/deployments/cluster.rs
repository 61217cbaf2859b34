//! RedisClusterStore-specific behaviour against a real 3-master cluster of
//! local redis-server processes: slot spread, brace keys, script reloads.
//! What every store shares (strategies, multi-quota exactness without
//! CROSSSLOT, TTLs) is in `tests/store/suite`;
//! failover is in `tests/deployments/failover.rs`.
#![cfg(feature = "cluster")]

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::RedisCluster;
use tower_redis_ratelimit::{Quota, Rate, RateLimiter, RedisClusterStore};

fn cluster_limiter(cluster: &RedisCluster, prefix: &str, quotas: Vec<Quota>) -> RateLimiter {
    let pool = deadpool_redis::cluster::Config::from_urls(cluster.urls())
        .create_pool(Some(deadpool_redis::Runtime::Tokio1))
        .unwrap();
    RateLimiter::builder()
        .store(RedisClusterStore::new(pool).timeout(Duration::from_secs(10)))
        .prefix(prefix)
        .quotas(quotas)
        .build()
        .unwrap()
}

#[tokio::test]
async fn user_keys_spread_over_all_masters_and_braces_cannot_pin_a_slot() {
    let cluster = RedisCluster::start(3, 0);
    let lim = cluster_limiter(&cluster, "spread", vec![Quota::gcra(Rate::per_minute(10))]);
    let mut owners = BTreeSet::new();
    for i in 0..60 {
        let key = format!("user-{i}");
        assert!(lim.check(&key).await.unwrap().allowed());
        owners.insert(
            cluster
                .slot_owner(cluster.master_ports()[0], &lim.storage_keys(&key)[0])
                .await,
        );
    }
    let masters: BTreeSet<u16> = cluster.master_ports().into_iter().collect();
    assert_eq!(owners, masters);
    // a user key that tries to choose its hash tag is hashed: its keys land wherever its digest says
    let mut pinned = BTreeSet::new();
    for i in 0..30 {
        let key = format!("{{victim}}{i}");
        assert!(lim.check(&key).await.unwrap().allowed());
        let stored = &lim.storage_keys(&key)[0];
        assert!(!stored.contains("victim"), "{stored}");
        pinned.insert(cluster.slot_owner(cluster.master_ports()[0], stored).await);
    }
    assert!(pinned.len() > 1, "brace keys all landed on {pinned:?}");
}

#[tokio::test]
async fn script_flush_on_every_node_recovers() {
    let cluster = RedisCluster::start(3, 0);
    let lim = cluster_limiter(
        &cluster,
        "flush",
        vec![Quota::sliding_window_log(Rate::per_minute(5))],
    );
    for i in 0..10 {
        assert!(lim.check(format!("k{i}")).await.unwrap().allowed());
    }
    for node in cluster.nodes() {
        let mut c = node.conn().await;
        let () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut c)
            .await
            .unwrap();
    }
    for i in 0..10 {
        let d = lim.check(format!("k{i}")).await.unwrap();
        assert!(d.allowed());
        assert_eq!(d.remaining(), 3);
    }
}
