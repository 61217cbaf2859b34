//! One store call's work is bounded whatever a caller asks: a joint
//! decision's parts (`AllOrNothing::MAX_PARTS`) and the units they log
//! (`AllOrNothing::MAX_LOGGED`), the leases one call takes
//! (`Quota::MAX_LEASES_PER_CALL`), the sliding-log times one batch logs;
//! past a bound nothing reaches the store. On the memory store and a
//! private Redis (whose `INFO commandstats` shows what was sent).

use crate::common;

use std::time::Duration;

use common::RedisServer;
use tower_redis_ratelimit::clock::ManualClock;
use tower_redis_ratelimit::error::StoreError;
use tower_redis_ratelimit::limiter::AllOrNothing;
use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimiter, RedisStore};

/// One store value (limiters of one joint decision share it): memory, or
/// a private Redis.
#[derive(Clone)]
enum Store {
    Memory(MemoryStore),
    Redis(RedisStore),
}

/// Each store kind, with the Redis server behind it (none for memory).
fn stores(server: &RedisServer) -> [(Store, Option<&RedisServer>); 2] {
    let redis = RedisStore::new(server.pool(2)).timeout(common::GENEROUS);
    [
        (Store::Memory(MemoryStore::new()), None),
        (Store::Redis(redis), Some(server)),
    ]
}

/// A limiter of `quotas` under `prefix` on `store`.
fn limiter_of(store: &Store, prefix: &str, quotas: Vec<Quota>) -> RateLimiter {
    let b = RateLimiter::builder().prefix(prefix).quotas(quotas);
    match store {
        Store::Redis(s) => b.store(s.clone()).build().unwrap(),
        Store::Memory(s) => b.store(s.clone()).build().unwrap(),
    }
}

fn limiter(store: &Store, prefix: &str, quota: Quota) -> RateLimiter {
    limiter_of(store, prefix, vec![quota])
}

/// The scripts Redis ran since the last reset (0 on the memory store).
async fn scripts_run(server: Option<&RedisServer>) -> u64 {
    match server {
        Some(s) => s.command_calls("evalsha").await + s.command_calls("eval").await,
        None => 0,
    }
}

#[tokio::test]
async fn a_joint_decision_of_more_than_max_parts_is_too_large_and_sends_nothing() {
    let server = RedisServer::start();
    for (store, server) in stores(&server) {
        let lim = limiter(&store, "parts", Quota::fixed_window(Rate::per_hour(5)));
        let keys: Vec<String> = (0..=AllOrNothing::MAX_PARTS)
            .map(|i| format!("k{i}"))
            .collect();
        let mut joint = AllOrNothing::new();
        for k in &keys {
            joint.push(&lim, k, 1);
        }
        assert_eq!(joint.len(), AllOrNothing::MAX_PARTS + 1);
        if let Some(s) = server {
            s.reset_stats().await;
        }
        for e in [joint.decide().await, joint.peek().await] {
            match e {
                Err(StoreError::TooLarge(m)) => {
                    assert!(m.contains("MAX_PARTS") && m.contains("257"), "{m}")
                }
                other => panic!("expected TooLarge, got {other:?}"),
            }
        }
        // (a cost that never fits does not make it smaller)
        let huge = RateLimiter::check_all(keys.iter().map(|k| (&lim, k, u64::MAX))).await;
        assert!(matches!(huge, Err(StoreError::TooLarge(_))), "{huge:?}");
        assert_eq!(scripts_run(server).await, 0, "nothing was sent");
        assert_eq!(lim.peek("k0").await.unwrap().remaining(), 5);

        // MAX_PARTS parts are decided, in one call (once the script is loaded)
        RateLimiter::check_all([(&lim, "warm", 1)]).await.unwrap();
        if let Some(s) = server {
            s.reset_stats().await;
        }
        let d =
            RateLimiter::check_all(keys[..AllOrNothing::MAX_PARTS].iter().map(|k| (&lim, k, 2)))
                .await
                .unwrap();
        assert!(d.allowed());
        assert_eq!(d.decisions().len(), AllOrNothing::MAX_PARTS);
        if server.is_some() {
            assert_eq!(scripts_run(server).await, 1);
        }
        assert_eq!(lim.peek(&keys[255]).await.unwrap().remaining(), 3);
        assert_eq!(lim.peek(&keys[256]).await.unwrap().remaining(), 5);
    }
}

#[tokio::test]
async fn a_joint_decision_logging_more_than_max_logged_units_is_too_large_and_sends_nothing() {
    let server = RedisServer::start();
    let max = AllOrNothing::MAX_LOGGED;
    assert_eq!(max, Quota::MAX_SORTED_SET_LIMIT);
    for (store, server) in stores(&server) {
        let log = limiter(
            &store,
            "log",
            Quota::sliding_window_log(Rate::per_hour(max)),
        );
        // (a second quota that keeps no entry per unit counts nothing)
        let both = limiter_of(
            &store,
            "both",
            vec![
                Quota::sliding_window_log(Rate::per_hour(max)).name("log"),
                Quota::gcra(Rate::per_hour(max)).name("gcra"),
            ],
        );
        let half = max / 2;
        if let Some(s) = server {
            s.reset_stats().await;
        }
        for parts in [
            vec![(&log, "a", half), (&log, "b", half + 1)],
            vec![(&log, "a", half), (&both, "b", half + 1)],
            vec![(&log, "a", max / 10); 11],
        ] {
            match RateLimiter::check_all(parts).await {
                Err(StoreError::TooLarge(m)) => assert!(m.contains("MAX_LOGGED"), "{m}"),
                other => panic!("expected TooLarge, got {other:?}"),
            }
        }
        assert_eq!(scripts_run(server).await, 0, "nothing was sent");
        // what logs nothing is not bounded by it: a peek, a cost that never fits
        let peek = AllOrNothing::new()
            .part(&log, "a", max)
            .part(&log, "b", max)
            .peek()
            .await
            .unwrap();
        assert!(peek.allowed());
        let unfit = RateLimiter::check_all([(&log, "a", max), (&log, "b", max + 1)])
            .await
            .unwrap();
        assert!(unfit.denied());
        assert_eq!(unfit.decisions()[1].retry_after(), None);
        // MAX_LOGGED together is decided, and logged
        let d = RateLimiter::check_all([(&log, "a", half), (&both, "b", half)])
            .await
            .unwrap();
        assert!(d.allowed());
        assert_eq!(log.peek("a").await.unwrap().remaining(), max - half);
        assert_eq!(both.peek("b").await.unwrap().remaining(), max - half);
    }
}

#[tokio::test]
async fn a_lease_cost_above_max_leases_per_call_never_fits_and_sends_nothing() {
    let server = RedisServer::start();
    let max = Quota::MAX_LEASES_PER_CALL;
    for (store, server) in stores(&server) {
        let lim = limiter(&store, "leases", Quota::concurrency(10 * max));
        if let Some(s) = server {
            s.reset_stats().await;
        }
        for cost in [max + 1, 10 * max] {
            let d = lim.check_n("k", cost).await.unwrap();
            assert!(d.denied(), "{cost}");
            assert_eq!(d.retry_after(), None, "{cost}: never fits");
            assert!(d.lease().is_none());
            let q = d.quotas().next().unwrap();
            assert!(!q.allowed());
            assert_eq!(q.limit(), 10 * max, "the limit is still the count");
        }
        assert_eq!(scripts_run(server).await, 0, "nothing was sent");
        let d = lim.check_n("k", max).await.unwrap();
        assert!(d.allowed());
        assert_eq!(d.remaining(), 9 * max);
        lim.release(d.lease().unwrap()).await.unwrap();
        assert_eq!(lim.peek("k").await.unwrap().remaining(), 10 * max);
    }
}

/// A batch closes before a decision that would take its sliding-log times
/// past `MAX_SORTED_SET_LIMIT`: decisions of that cost go one per call,
/// where decisions of cost 1 queued alike share calls.
#[tokio::test(flavor = "current_thread")]
async fn batched_sliding_log_decisions_log_at_most_the_largest_count_per_call() {
    let server = RedisServer::start();
    let max = Quota::MAX_SORTED_SET_LIMIT;
    // one connection: two calls in flight, every other decision queues
    let lim = RateLimiter::builder()
        .store(RedisStore::new(server.pool(1)).timeout(common::GENEROUS))
        .quota(Quota::sliding_window_log(Rate::per_hour(max)))
        .build()
        .unwrap();
    common::warm_up(&lim, "warm").await;
    let run = |n: usize, cost: u64| {
        let tasks: Vec<_> = (0..n)
            .map(|i| {
                let lim = lim.clone();
                tokio::spawn(async move { lim.check_n(format!("{cost}-{i}"), cost).await })
            })
            .collect();
        async move {
            for t in tasks {
                assert!(t.await.unwrap().unwrap().allowed());
            }
        }
    };
    server.reset_stats().await;
    run(64, 1).await;
    let small = server.command_calls("evalsha").await;
    assert!(small < 64, "decisions of cost 1 share calls: {small}");
    server.reset_stats().await;
    run(16, max).await;
    assert_eq!(server.command_calls("evalsha").await, 16, "one per call");
    server.reset_stats().await;
    run(16, max / 2).await;
    assert_eq!(
        server.command_calls("evalsha").await,
        2 + 7,
        "two per batch"
    );
}

/// A sliding log's give-back removes the take's times wherever they sit in
/// the log (later times after them), as Redis does; and a log in debt far
/// past its count decides alike on both stores.
#[tokio::test]
async fn sliding_log_give_backs_and_debts_decide_alike_on_both_stores() {
    let server = RedisServer::start();
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let redis = RateLimiter::builder()
        .store(RedisStore::new(server.pool(2)).timeout(common::GENEROUS))
        .quota(Quota::sliding_window_log(Rate::per_hour(1_000)))
        .clock(clock.clone())
        .build()
        .unwrap();
    let memory = redis.with_store(MemoryStore::new());
    let mut seen = Vec::new();
    for lim in [&redis, &memory] {
        clock.set(Duration::from_secs(1_000_000));
        let first = lim.reserve_n("k", 400).await.unwrap();
        clock.advance(Duration::from_secs(1));
        let second = lim.reserve_n("k", 500).await.unwrap();
        clock.advance(Duration::from_secs(1));
        lim.settle(&first, 100).await.unwrap();
        let after = lim.peek("k").await.unwrap().remaining();
        lim.settle(&second, 0).await.unwrap();
        let end = lim.peek("k").await.unwrap().remaining();
        // a debt of many charges, then a denial and its wait
        for _ in 0..20 {
            clock.advance(Duration::from_secs(1));
            lim.penalize("d", 1_000).await.unwrap();
        }
        let denied = lim.check("d").await.unwrap();
        clock.advance(Duration::from_secs(3_600 - 10));
        let still = lim.check("d").await.unwrap();
        clock.advance(Duration::from_secs(11));
        let free = lim.check("d").await.unwrap();
        seen.push((
            after,
            end,
            denied.allowed(),
            denied.retry_after(),
            still.allowed(),
            free.allowed(),
            free.remaining(),
        ));
    }
    assert_eq!(seen[0], seen[1]);
    assert_eq!((seen[0].0, seen[0].1), (1_000 - 100 - 500, 900));
    assert!(!seen[0].2 && !seen[0].4 && seen[0].5, "{:?}", seen[0]);
}
