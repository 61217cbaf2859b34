//! No leaks: 100 000 distinct keys through every strategy leave nothing
//! behind once their windows pass, on Redis (`DBSIZE` back to 0) and in the
//! memory store (back to its baseline, by an explicit sweep and by the
//! sweeps that come with use).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::RedisServer;
use tower_redis_ratelimit::clock::ManualClock;
use tower_redis_ratelimit::strategy::Strategy;
use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimiter, RedisStore};

/// Distinct user keys in the soak.
const KEYS: usize = 100_000;
/// Every window (and lease timeout) is this short, on the store's own clock.
const WINDOW: Duration = Duration::from_millis(200);
/// Concurrent tasks pipelining checks over the store's connections.
const TASKS: usize = 64;

/// One quota of every strategy, each with the short window.
fn every_strategy() -> Vec<Quota> {
    Strategy::ALL
        .iter()
        .map(|&s| match s {
            Strategy::Concurrency => Quota::concurrency(3).lease_timeout(WINDOW),
            s => Quota::new(s, Rate::new(3, WINDOW)),
        })
        .collect()
}

/// Checks `keys` distinct keys (cost 2, so sorted sets get two members), from `TASKS` tasks.
async fn soak(lim: &RateLimiter, keys: usize) -> u64 {
    let lim = Arc::new(lim.clone());
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let lim = lim.clone();
            tokio::spawn(async move {
                let mut allowed = 0;
                for k in (t..keys).step_by(TASKS) {
                    allowed +=
                        u64::from(lim.check_n(format!("user-{k}"), 2).await.unwrap().allowed());
                }
                allowed
            })
        })
        .collect();
    let mut allowed = 0;
    for t in tasks {
        allowed += t.await.unwrap();
    }
    allowed
}

async fn used_memory(server: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut server.conn().await)
        .await
        .unwrap();
    common::info_field(&info, "used_memory")
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soak_of_100k_keys_through_every_strategy_leaves_redis_empty() {
    let server = RedisServer::start();
    let baseline = used_memory(&server).await;
    let store = RedisStore::new(server.pool(4))
        .connections(2)
        .timeout(Duration::from_secs(10));
    // All seven strategies in one limiter: each key goes through every one
    // (one script call, seven Redis keys).
    let all = RateLimiter::builder()
        .store(store.clone())
        .prefix("soak-all")
        .quotas(every_strategy())
        .build()
        .unwrap();
    // And each strategy alone, as its single-quota script writes differently.
    let single: Vec<RateLimiter> = every_strategy()
        .into_iter()
        .map(|q| {
            RateLimiter::builder()
                .store(store.clone())
                .prefix(format!("soak-{}", q.strategy().as_str()))
                .quota(q)
                .build()
                .unwrap()
        })
        .collect();
    let started = Instant::now();
    let allowed = soak(&all, KEYS).await;
    let all_took = started.elapsed();
    assert_eq!(allowed, KEYS as u64, "every fresh key fits a cost of 2");
    let mut single_calls = 0;
    for lim in &single {
        single_calls += KEYS / 20;
        assert_eq!(soak(lim, KEYS / 20).await, (KEYS / 20) as u64);
    }
    let checks_took = started.elapsed();
    let peak_keys = server.dbsize().await;
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut server.conn().await)
        .await
        .unwrap();
    let evalsha = common::info_field(&stats, "cmdstat_evalsha")
        .unwrap_or("?")
        .to_owned();
    let peak_memory = used_memory(&server).await;
    // Every key expires within two windows of its last write (the sliding
    // window counter keeps one window as the next one's "previous"); Redis
    // then reclaims them by its active expiry. Poll, with a deadline.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut left = peak_keys;
    while left > 0 {
        assert!(
            Instant::now() < deadline,
            "{left} of {peak_keys} keys still there 60 s after the soak"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = server.dbsize().await;
    }
    let empty_after = started.elapsed() - checks_took;
    let end_memory = used_memory(&server).await;
    eprintln!(
        "Redis soak: {KEYS} keys x 7 strategies in one limiter in {all_took:?} \
         ({:.0} checks/s), then {single_calls} single-strategy checks; {checks_took:?} in all; \
         DBSIZE {peak_keys} at the end of the checks, 0 after {empty_after:?}; \
         used_memory {baseline} B before, {peak_memory} B at the peak, {end_memory} B after; \
         evalsha {evalsha}",
        KEYS as f64 / all_took.as_secs_f64(),
    );
}

// A manual clock: time moves only when told.
#[tokio::test]
async fn a_soak_of_100k_keys_through_every_strategy_returns_the_memory_store_to_its_baseline() {
    let store = MemoryStore::with_shards(16);
    let clock = ManualClock::new(Duration::from_secs(3_600));
    let all = RateLimiter::builder()
        .store(store.clone())
        .clock(clock.clone())
        .prefix("soak-all")
        .quotas(every_strategy())
        .build()
        .unwrap();
    let baseline = store.len();
    assert_eq!(baseline, 0);
    assert_eq!(soak(&all, KEYS).await, KEYS as u64);
    // time stood still: every key of every strategy is held
    assert_eq!(store.len(), KEYS * Strategy::ALL.len());
    // Not yet expired: a sweep keeps everything.
    clock.advance(WINDOW / 2);
    // (the store learns the manual time from a decision)
    all.peek("now").await.unwrap();
    store.sweep();
    assert_eq!(store.len(), KEYS * Strategy::ALL.len());
    // Two windows later everything has expired.
    clock.advance(2 * WINDOW);
    all.peek("now").await.unwrap();
    store.sweep();
    assert_eq!(store.len(), baseline, "an explicit sweep");

    // The same again, evicted by use alone: every shard sweeps itself every
    // so many operations once a second has passed since its last sweep, and
    // peeks (of other keys) write nothing.
    assert_eq!(soak(&all, KEYS).await, KEYS as u64);
    assert_eq!(store.len(), KEYS * Strategy::ALL.len());
    clock.advance(2 * WINDOW + Duration::from_secs(1));
    let peeker = RateLimiter::builder()
        .store(store.clone())
        .clock(clock.clone())
        .prefix("peek")
        .quota(Quota::gcra(Rate::per_second(1)))
        .build()
        .unwrap();
    let mut peeks = 0;
    while !store.is_empty() {
        peeker.peek(format!("p{peeks}")).await.unwrap();
        peeks += 1;
        assert!(peeks <= 1_000_000, "{} keys left", store.len());
    }
    eprintln!(
        "memory soak: {} entries, back to {baseline} by sweep(), and by use after {peeks} peeks",
        KEYS * Strategy::ALL.len()
    );
}
