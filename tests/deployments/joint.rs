//! Joint decisions (`limiter::AllOrNothing`) on a real 3-master Redis
//! Cluster (parts in one hash slot are one atomic call; parts across slots
//! are decided slot by slot, and a denial gives back what the slots before
//! took) and on a Sentinel deployment (one atomic call on the primary).
#![cfg(any(feature = "cluster", feature = "sentinel"))]

use crate::common;

use std::time::Duration;

use tower_redis_ratelimit::{Quota, Rate, RateLimiter};

#[cfg(feature = "sentinel")]
#[tokio::test]
async fn on_sentinel_a_joint_decision_is_one_atomic_call_on_the_primary() {
    use common::{RedisSentinel, sentinel::MASTER_NAME};
    use tower_redis_ratelimit::RedisSentinelStore;

    let deployment = RedisSentinel::start();
    let store = RedisSentinelStore::from_urls(deployment.sentinel_urls(), MASTER_NAME)
        .unwrap()
        .timeout(Duration::from_secs(10));
    let limiter = |prefix: &str, n| {
        RateLimiter::builder()
            .store(store.clone())
            .prefix(prefix)
            .quota(Quota::fixed_window(Rate::per_hour(n)))
            .build()
            .unwrap()
    };
    let (user, org) = (limiter("user", 10), limiter("org", 2));
    let primary = deployment.node(deployment.primary_port());
    for _ in 0..2 {
        let d = RateLimiter::check_all([(&user, "alice", 1), (&org, "acme", 1)])
            .await
            .unwrap();
        assert!(d.allowed() && d.atomic());
    }
    primary.reset_stats().await;
    let d = RateLimiter::check_all([(&user, "alice", 1), (&org, "acme", 1)])
        .await
        .unwrap();
    assert!(d.denied() && d.atomic());
    assert_eq!(primary.command_calls("evalsha").await, 1);
    assert_eq!(user.peek("alice").await.unwrap().remaining(), 8);
}

#[cfg(feature = "cluster")]
mod cluster {
    use super::*;

    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use common::RedisCluster;
    use tower_redis_ratelimit::RedisClusterStore;

    fn store(cluster: &RedisCluster) -> RedisClusterStore {
        let pool = deadpool_redis::cluster::Config::from_urls(cluster.urls())
            .create_pool(Some(deadpool_redis::Runtime::Tokio1))
            .unwrap();
        RedisClusterStore::new(pool).timeout(Duration::from_secs(10))
    }

    fn limiter(store: &RedisClusterStore, prefix: &str, quotas: Vec<Quota>) -> RateLimiter {
        RateLimiter::builder()
            .store(store.clone())
            .prefix(prefix)
            .quotas(quotas)
            .build()
            .unwrap()
    }

    async fn left(lim: &RateLimiter, key: &str) -> Vec<u64> {
        let d = lim.peek(key).await.unwrap();
        d.quotas().map(|q| q.remaining()).collect()
    }

    async fn evalsha(cluster: &RedisCluster) -> u64 {
        let stats = cluster.info_commandstats_masters().await;
        stats.get("evalsha").copied().unwrap_or(0)
    }

    async fn reset_stats(cluster: &RedisCluster) {
        for port in cluster.master_ports() {
            cluster.node(port).reset_stats().await;
        }
    }

    /// A key of `b` whose storage keys are owned by another master than those
    /// of `a`'s key `ka` (so in another hash slot).
    async fn key_elsewhere(
        cluster: &RedisCluster,
        a: &RateLimiter,
        ka: &str,
        b: &RateLimiter,
    ) -> String {
        let via = cluster.master_ports()[0];
        let owner = cluster.slot_owner(via, &a.storage_keys(ka)[0]).await;
        for i in 0..1000 {
            let kb = format!("org-{i}");
            if cluster.slot_owner(via, &b.storage_keys(&kb)[0]).await != owner {
                return kb;
            }
        }
        panic!("no key of another master in 1000")
    }

    #[tokio::test]
    async fn parts_in_one_slot_are_one_atomic_call() {
        let cluster = RedisCluster::start(3, 0);
        let store = store(&cluster);
        // one prefix and one user key: one hash tag, one slot
        let a = limiter(&store, "api", vec![Quota::fixed_window(Rate::per_hour(5))]);
        let b = limiter(
            &store,
            "api",
            vec![Quota::gcra(Rate::per_hour(2)).name("burst")],
        );
        let aligned = limiter(
            &store,
            "api",
            vec![
                Quota::fixed_window(Rate::per_minute(9))
                    .aligned()
                    .name("minute"),
            ],
        );
        RateLimiter::check_all([(&a, "u", 1)]).await.unwrap();
        reset_stats(&cluster).await;
        let d = RateLimiter::check_all([(&a, "u", 1), (&b, "u", 1), (&aligned, "u", 1)])
            .await
            .unwrap();
        assert!(d.allowed() && d.atomic(), "{d:?}");
        assert_eq!(evalsha(&cluster).await, 1);
        let d = RateLimiter::check_all([(&a, "u", 1), (&b, "u", 1)])
            .await
            .unwrap();
        assert!(d.allowed() && d.atomic());
        // b is out: denied in one call, a untouched
        reset_stats(&cluster).await;
        let d = RateLimiter::check_all([(&a, "u", 1), (&b, "u", 1)])
            .await
            .unwrap();
        assert!(d.denied() && d.atomic());
        assert_eq!(evalsha(&cluster).await, 1);
        assert_eq!(left(&a, "u").await, [2]);
        assert_eq!(left(&aligned, "u").await, [8]);
    }

    #[tokio::test]
    async fn parts_across_slots_give_back_what_was_taken_when_one_is_denied() {
        let cluster = RedisCluster::start(3, 0);
        let store = store(&cluster);
        // an enforced quota and a shadow one, in the first slot
        let user = limiter(
            &store,
            "user",
            vec![
                Quota::fixed_window(Rate::per_hour(10)),
                Quota::sliding_window_counter(Rate::per_hour(1))
                    .name("s")
                    .shadow(true),
            ],
        );
        let org = limiter(
            &store,
            "org",
            vec![Quota::sliding_window_log(Rate::per_hour(1))],
        );
        let kb = key_elsewhere(&cluster, &user, "alice", &org).await;
        let d = RateLimiter::check_all([(&user, "alice", 1), (&org, kb.as_str(), 1)])
            .await
            .unwrap();
        assert!(d.allowed() && !d.atomic(), "{d:?}");
        assert_eq!(left(&user, "alice").await, [9, 0]);
        assert_eq!(left(&org, &kb).await, [0]);
        // org is out: user's slot is admitted, then given back
        for _ in 0..3 {
            let d = RateLimiter::check_all([(&user, "alice", 1), (&org, kb.as_str(), 1)])
                .await
                .unwrap();
            assert!(d.denied() && !d.atomic(), "{d:?}");
            let [du, dorg] = d.decisions() else { panic!() };
            assert!(du.allowed() && dorg.denied());
            assert_eq!(du.remaining(), 9, "the state after the give-back");
            // the enforced quota got its unit back; the shadow one, which
            // would deny and took nothing, was given nothing
            assert_eq!(left(&user, "alice").await, [9, 0]);
        }
        // the denied part first: the other is only checked
        let d = RateLimiter::check_all([(&org, kb.as_str(), 1), (&user, "alice", 1)])
            .await
            .unwrap();
        assert!(d.denied());
        assert_eq!(left(&user, "alice").await, [9, 0]);
    }

    #[tokio::test]
    async fn racing_joint_decisions_across_slots_never_pass_a_limit() {
        let cluster = RedisCluster::start(3, 0);
        let store = store(&cluster);
        let a = Arc::new(limiter(
            &store,
            "user",
            vec![Quota::gcra(Rate::per_hour(1000))],
        ));
        let b = Arc::new(limiter(
            &store,
            "org",
            vec![Quota::fixed_window(Rate::per_hour(50))],
        ));
        let kb = key_elsewhere(&cluster, &a, "hot", &b).await;
        let admitted = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..200)
            .map(|_| {
                let (a, b, kb, admitted) = (a.clone(), b.clone(), kb.clone(), admitted.clone());
                tokio::spawn(async move {
                    let d = RateLimiter::check_all([(&*a, "hot", 1), (&*b, kb.as_str(), 1)])
                        .await
                        .unwrap();
                    if d.allowed() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(admitted.load(Ordering::Relaxed), 50);
        assert_eq!(left(&b, &kb).await, [0]);
        // every denied request's unit went back to a
        assert_eq!(left(&a, "hot").await, [1000 - 50]);
    }

    /// Parts across hash slots whose denials record: the slot that denies
    /// records in its own call; a slot admitted before is given back, then
    /// its recording parts record (`Record`: on every quota); the joint
    /// decision is denied and each recorded part says so.
    #[tokio::test]
    async fn across_slots_a_denial_records_each_part_as_its_mode_says() {
        use tower_redis_ratelimit::Decision;
        use tower_redis_ratelimit::clock::ManualClock;
        use tower_redis_ratelimit::limiter::{AllOrNothing, OnDenial};

        let cluster = RedisCluster::start(3, 0);
        let store = store(&cluster);
        let clock = ManualClock::new(Duration::from_secs(1_000));
        let build = |prefix: &str, n| {
            RateLimiter::builder()
                .store(store.clone())
                .prefix(prefix)
                .quota(Quota::gcra(Rate::per_hour(n)).name("g"))
                .clock(clock.clone())
                .build()
                .unwrap()
        };
        let (user, org) = (build("user", 10), build("org", 2));
        let org_key = key_elsewhere(&cluster, &user, "alice", &org).await;
        for _ in 0..2 {
            assert!(org.check(&org_key).await.unwrap().allowed());
        }
        // unrecorded: the user's slot is admitted, then given back
        let d = AllOrNothing::new()
            .part(&user, "alice", 3)
            .part(&org, &org_key, 1)
            .decide()
            .await
            .unwrap();
        assert!(d.denied() && !d.atomic());
        assert!(d.decisions().iter().all(|d| !d.recorded()));
        assert_eq!(user.peek("alice").await.unwrap().remaining(), 10);
        // recorded: the user's 3 (Record: though it fitted), the org's 1
        // (RecordIfOver: it is over)
        let d = AllOrNothing::new()
            .part_with(&user, "alice", 3, OnDenial::Record)
            .part_with(&org, &org_key, 1, OnDenial::RecordIfOver)
            .decide()
            .await
            .unwrap();
        assert!(d.denied() && !d.atomic(), "{d:?}");
        assert!(d.decisions().iter().all(Decision::recorded), "{d:?}");
        let (u, o) = (
            user.peek("alice").await.unwrap(),
            org.peek(&org_key).await.unwrap(),
        );
        assert_eq!(u.remaining(), 7);
        assert_eq!(u.reset_after(), Duration::from_secs(3 * 360));
        assert_eq!(o.remaining(), 0);
        assert_eq!(o.reset_after(), Duration::from_secs(3 * 1_800));
        // RecordIfOver on the user's part, which fits: only the org records
        let d = AllOrNothing::new()
            .part_with(&user, "alice", 1, OnDenial::RecordIfOver)
            .part_with(&org, &org_key, 2, OnDenial::Record)
            .decide()
            .await
            .unwrap();
        assert!(d.denied());
        assert!(!d.decisions()[0].recorded() && d.decisions()[1].recorded());
        assert_eq!(user.peek("alice").await.unwrap().remaining(), 7);
        let o = org.peek(&org_key).await.unwrap();
        assert_eq!(o.reset_after(), Duration::from_secs(5 * 1_800));
    }
}
