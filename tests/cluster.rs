//! RedisClusterStore-specific behaviour against a real 3-master cluster of
//! local redis-server processes: slot spread, brace keys, script reloads.
//! What every store shares (strategies, multi-quota exactness without
//! CROSSSLOT, TTLs) is in `tests/suite`, run by `tests/suite_cluster.rs`;
//! failover is in `tests/failover.rs`.
#![cfg(feature = "cluster")]

mod common;

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

/// The master port serving `key`'s slot.
async fn owner(cluster: &RedisCluster, key: &str) -> u16 {
    let mut conn = cluster.conn().await;
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap();
    let slots: Vec<redis::Value> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut conn)
        .await
        .unwrap();
    for range in slots {
        let redis::Value::Array(items) = range else {
            continue;
        };
        let (redis::Value::Int(lo), redis::Value::Int(hi)) = (&items[0], &items[1]) else {
            continue;
        };
        if (*lo as u16..=*hi as u16).contains(&slot) {
            let redis::Value::Array(node) = &items[2] else {
                continue;
            };
            let redis::Value::Int(port) = node[1] else {
                continue;
            };
            return port as u16;
        }
    }
    panic!("no owner for slot {slot}");
}

#[tokio::test]
async fn user_keys_spread_over_all_masters_and_braces_cannot_pin_a_slot() {
    let cluster = RedisCluster::start(3, 0);
    let lim = cluster_limiter(&cluster, "spread", vec![Quota::gcra(Rate::per_minute(10))]);
    let mut owners = BTreeSet::new();
    for i in 0..60 {
        let key = format!("user-{i}");
        assert!(lim.check(&key).await.unwrap().allowed);
        owners.insert(owner(&cluster, &lim.storage_keys(&key)[0]).await);
    }
    let masters: BTreeSet<u16> = cluster.master_ports().into_iter().collect();
    assert_eq!(owners, masters);
    // a user key that tries to choose its hash tag is hashed: its keys land wherever its digest says
    let mut pinned = BTreeSet::new();
    for i in 0..30 {
        let key = format!("{{victim}}{i}");
        assert!(lim.check(&key).await.unwrap().allowed);
        let stored = &lim.storage_keys(&key)[0];
        assert!(!stored.contains("victim"), "{stored}");
        pinned.insert(owner(&cluster, stored).await);
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
        assert!(lim.check(format!("k{i}")).await.unwrap().allowed);
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
        assert!(d.allowed);
        assert_eq!(d.remaining, 3);
    }
}
