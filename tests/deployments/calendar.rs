//! Calendar windows (`Quota::calendar`) on a Redis Cluster: a limiter of
//! two calendar quotas (a month in Paris, a year in New York) and a
//! per-minute one decides in one slot per call, on the caller's time and on
//! Redis's, and its months reset at local midnight.
#![cfg(all(feature = "cluster", feature = "calendar"))]

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::RedisCluster;
use tower_redis_ratelimit::clock::{Clock, ManualClock};
use tower_redis_ratelimit::{Calendar, Quota, Rate, RateLimiter, RedisClusterStore};

fn limiter(cluster: &RedisCluster, clock: Clock) -> RateLimiter {
    let pool = deadpool_redis::cluster::Config::from_urls(cluster.urls())
        .create_pool(Some(deadpool_redis::Runtime::Tokio1))
        .unwrap();
    RateLimiter::builder()
        .store(RedisClusterStore::new(pool).timeout(Duration::from_secs(20)))
        .prefix("cal")
        .clock(clock)
        .quotas([
            Quota::fixed_window(Rate::per_day(2)).calendar(Calendar::month("Europe/Paris")),
            Quota::fixed_window(Rate::per_day(100)).calendar(Calendar::year("America/New_York")),
            Quota::gcra(Rate::per_minute(1_000)),
        ])
        .build()
        .unwrap()
}

#[tokio::test]
async fn calendar_quotas_on_a_cluster_decide_in_one_slot_and_reset_at_local_midnight() {
    let cluster = RedisCluster::start(3, 0);
    let via = cluster.master_ports()[0];
    // Feb 1 2024 00:00 in Paris is Jan 31 23:00 UTC
    let feb = Duration::from_secs(1_706_742_000);
    let clock = ManualClock::new(feb - Duration::from_secs(60));
    let manual = limiter(&cluster, Clock::Manual(clock.clone()));
    for i in 0..12 {
        let key = format!("user-{i}");
        let owners: BTreeSet<u16> = {
            let mut o = BTreeSet::new();
            for k in manual.storage_keys(&key) {
                o.insert(cluster.slot_owner(via, &k).await);
            }
            o
        };
        assert_eq!(owners.len(), 1, "{key}: {:?}", manual.storage_keys(&key));
    }
    assert!(manual.check("u").await.unwrap().allowed());
    assert!(manual.check("u").await.unwrap().allowed());
    assert!(!manual.check("u").await.unwrap().allowed());
    clock.set(feb);
    let d = manual.check("u").await.unwrap();
    assert!(d.allowed(), "{d:?}");
    // Redis's clock: the month holding now, no CROSSSLOT
    let store = limiter(&cluster, Clock::Store);
    for i in 0..6 {
        assert!(store.check(format!("now-{i}")).await.unwrap().allowed());
    }
}
