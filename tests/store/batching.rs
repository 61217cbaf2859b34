//! Batching on a real Redis: concurrent decisions of one limiter go out
//! several per script call (`src/store/redis/batch.rs`), each decided as a
//! call of its own would be; a decision that errors fails alone; a store
//! built with `batching(false)` sends one call per decision.
//! Exact admission counts with batching on, on every store, are in the
//! suite (`four_instances_of_256_tasks_admit_exactly_the_limit_of_every_key`);
//! the differential tests run the Redis side batched.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::RedisServer;
use tower_redis_ratelimit::error::{RefusalKind, StoreError};
use tower_redis_ratelimit::strategy::Strategy;
use tower_redis_ratelimit::{Decision, Quota, Rate, RateLimiter, RedisStore};

fn limiter(server: &RedisServer, prefix: &str, quota: Quota, batching: bool) -> RateLimiter {
    RateLimiter::builder()
        .store(
            RedisStore::new(server.pool(2))
                .timeout(common::GENEROUS)
                .batching(batching),
        )
        .prefix(prefix)
        .quota(quota)
        .build()
        .unwrap()
}

fn quota(strategy: Strategy, n: u64) -> Quota {
    let rate = Rate::new(n, Duration::from_secs(3600));
    match strategy {
        Strategy::Concurrency => Quota::concurrency(n).lease_timeout(Duration::from_secs(3600)),
        s => Quota::new(s, rate),
    }
}

/// `calls` checks of `keys(i)` spawned at once on `lim`, in order.
async fn at_once(
    lim: &RateLimiter,
    calls: usize,
    key: impl Fn(usize) -> String,
) -> Vec<Result<Decision, StoreError>> {
    let handles: Vec<_> = (0..calls)
        .map(|i| {
            let (lim, key) = (lim.clone(), key(i));
            tokio::spawn(async move { lim.check(key).await })
        })
        .collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

/// Decisions per `EVALSHA` over `decisions` decisions just made.
async fn per_call(server: &RedisServer, decisions: usize) -> f64 {
    let calls = server.command_calls("evalsha").await;
    assert!(calls > 0);
    decisions as f64 / calls as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_decisions_share_script_calls_and_keep_every_key_exact_with_ttls() {
    let server = RedisServer::start();
    for strategy in Strategy::ALL {
        let prefix = format!("b-{}", strategy.as_str());
        let lim = limiter(&server, &prefix, quota(strategy, 10), true);
        lim.check("warm").await.unwrap();
        server.reset_stats().await;
        // 64 keys, 40 checks each, all at once: 10 of each key admitted
        let decisions = at_once(&lim, 64 * 40, |i| format!("key-{}", i % 64)).await;
        let mut admitted = [0u32; 64];
        for (i, d) in decisions.into_iter().enumerate() {
            if d.unwrap().allowed() {
                admitted[i % 64] += 1;
            }
        }
        assert_eq!(admitted, [10; 64], "{strategy}");
        let shared = per_call(&server, 64 * 40).await;
        // a lease-taking decision is never batched
        if strategy.holds_leases() {
            assert!(shared <= 1.0, "{strategy}: {shared} decisions per call");
        } else {
            assert!(shared >= 4.0, "{strategy}: {shared} decisions per call");
        }
    }
    // every key the batches wrote has a TTL
    let keys = server.keys_with_ttl().await;
    assert!(keys.len() >= 64 * 7, "{}", keys.len());
    for (key, ttl) in keys {
        assert!(ttl > 0, "{}: {ttl}", String::from_utf8_lossy(&key));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_without_batching_sends_one_call_per_decision() {
    let server = RedisServer::start();
    let lim = limiter(&server, "nb", quota(Strategy::Gcra, 10), false);
    lim.check("warm").await.unwrap();
    server.reset_stats().await;
    let decisions = at_once(&lim, 512, |i| format!("key-{}", i % 16)).await;
    let admitted = decisions
        .into_iter()
        .filter(|d| d.as_ref().unwrap().allowed())
        .count();
    assert_eq!(admitted, 16 * 10);
    assert_eq!(server.command_calls("evalsha").await, 512);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_decision_that_errors_in_a_batch_fails_alone() {
    let server = RedisServer::start();
    // the fixed window's fast path and GCRA's general script
    for strategy in [Strategy::FixedWindow, Strategy::Gcra] {
        let prefix = format!("err-{}", strategy.as_str());
        let lim = limiter(&server, &prefix, quota(strategy, 1000), true);
        // the key of user "bad" holds a list: every script fails on it
        lim.check("bad").await.unwrap();
        let mut conn = server.conn().await;
        let stored: Vec<String> = redis::cmd("KEYS")
            .arg(format!("*{prefix}:bad*"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(stored.len(), 1, "{stored:?}");
        let () = redis::pipe()
            .del(&stored[0])
            .rpush(&stored[0], "x")
            .query_async(&mut conn)
            .await
            .unwrap();
        server.reset_stats().await;
        let bad = 40;
        let decisions = at_once(&lim, 96, |i| {
            if i == bad {
                "bad".to_owned()
            } else {
                format!("good-{i}")
            }
        })
        .await;
        for (i, d) in decisions.into_iter().enumerate() {
            if i == bad {
                match d {
                    Err(StoreError::Refused(r)) => {
                        assert_eq!(r.kind(), RefusalKind::WrongType, "{strategy}: {r}")
                    }
                    other => panic!("{strategy}: the bad key got {other:?}"),
                }
            } else {
                assert!(d.unwrap().allowed(), "{strategy}: decision {i}");
            }
        }
        // the good decisions were batched with the bad one: far fewer calls
        // than decisions (96, and the bad one's retries: the fast path's
        // refusal goes to the general script)
        let calls = server.command_calls("evalsha").await;
        assert!(calls <= 24, "{strategy}: {calls} calls");
        // and nothing was written to the bad key
        let len: u64 = redis::cmd("LLEN")
            .arg(&stored[0])
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(len, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_survives_a_script_flush_and_answers_every_caller() {
    let server = RedisServer::start();
    let lim = Arc::new(limiter(
        &server,
        "flush",
        quota(Strategy::Gcra, 100_000),
        true,
    ));
    lim.check("warm").await.unwrap();
    let mut conn = server.conn().await;
    for _ in 0..5 {
        let () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut conn)
            .await
            .unwrap();
        let decisions = at_once(&lim, 300, |i| format!("key-{}", i % 30)).await;
        for d in decisions {
            assert!(d.unwrap().allowed());
        }
    }
}

/// The pattern of the differential tests (`check_replicas`): a few checks
/// spawned together on a one-thread runtime, on a manual clock, go out
/// batched, each decided as its own call would be.
#[test]
fn a_few_checks_spawned_together_on_one_thread_go_out_batched() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let clock =
            tower_redis_ratelimit::clock::ManualClock::new(Duration::from_secs(1_700_000_000));
        let lim = RateLimiter::builder()
            .store(RedisStore::new(server.pool(2)).timeout(common::GENEROUS))
            .prefix("few")
            .quota(quota(Strategy::SlidingWindowCounter, 3))
            .clock(clock.clone())
            .build()
            .unwrap();
        // (loads both scripts: a NOSCRIPT reply counts as a call too)
        at_once(&lim, 6, |i| format!("warm{i}")).await;
        server.reset_stats().await;
        for round in 0..4 {
            let decisions = at_once(&lim, 6, |i| format!("r{i}")).await;
            for d in decisions {
                let d = d.unwrap();
                assert_eq!(d.allowed(), round < 3, "round {round}: {d:?}");
            }
            clock.advance(Duration::from_secs(1));
        }
        // two calls alone (the lane's flights), then one batch of four, per round
        assert_eq!(server.command_calls("evalsha").await, 4 * 3);
    });
}

/// A caller that keeps its decision's future without polling it (its call
/// went out alone and holds one of the lane's flights) cannot hold up the
/// other callers for more than the store's timeout: a decision that finds
/// the queue older than that starts another flight.
// (one thread: nothing completes a kept call between its poll and the next line)
#[tokio::test]
async fn futures_kept_without_polling_hold_up_others_for_one_timeout_at_most() {
    use std::future::Future;
    use std::task::Poll;

    let server = RedisServer::start();
    let timeout = Duration::from_millis(300);
    let lim = RateLimiter::builder()
        .store(RedisStore::new(server.pool(2)).timeout(timeout))
        .prefix("stuck")
        .quota(quota(Strategy::Gcra, 1000))
        .build()
        .unwrap();
    // (connect and load the scripts)
    at_once(&lim, 20, |i| format!("warm{i}")).await;
    // the lane's two flights (one connection), each taken by a call polled
    // once, then kept
    let mut kept = Vec::new();
    for key in ["kept-a", "kept-b"] {
        let mut call = Box::pin(lim.check(key));
        std::future::poll_fn(|cx| {
            assert!(call.as_mut().poll(cx).is_pending());
            Poll::Ready(())
        })
        .await;
        kept.push(call);
    }
    // a decision now queues behind them, and gives up within its timeout
    let started = std::time::Instant::now();
    let first = lim.check("first").await;
    assert!(matches!(first, Err(StoreError::Timeout(_))), "{first:?}");
    assert!(started.elapsed() < timeout + Duration::from_secs(5));
    // the next ones find the queue older than the timeout: they go out
    for d in at_once(&lim, 50, |i| format!("next{i}")).await {
        assert!(d.unwrap().allowed());
    }
    let started = std::time::Instant::now();
    assert!(lim.check("later").await.unwrap().allowed());
    assert!(started.elapsed() < timeout, "{:?}", started.elapsed());
    drop(kept);
}

/// Costs of 0, 1, more than the limit and `u64::MAX` in one batch: each is
/// decided as alone (a cost that never fits is denied and consumes nothing,
/// a cost of 0 is allowed and consumes nothing), and what was consumed is
/// exactly the sum of the admitted costs, on every strategy that counts
/// units.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn zero_huge_and_odd_costs_in_one_batch_are_each_decided_as_alone() {
    let server = RedisServer::start();
    let costs = [0u64, 1, u64::MAX, 3, 11, 2, 0, 1 << 53];
    for strategy in Strategy::ALL.into_iter().filter(|s| !s.holds_leases()) {
        let lim = limiter(
            &server,
            &format!("costs-{}", strategy.as_str()),
            quota(strategy, 10),
            true,
        );
        lim.peek("k").await.unwrap();
        let handles: Vec<_> = (0..64)
            .map(|i| {
                let (lim, cost) = (lim.clone(), costs[i % costs.len()]);
                tokio::spawn(async move { (cost, lim.check_n("k", cost).await.unwrap()) })
            })
            .collect();
        let mut consumed = 0;
        for h in handles {
            let (cost, d) = h.await.unwrap();
            match cost {
                0 => assert!(d.allowed(), "{strategy}: cost 0 {d:?}"),
                c if c > 10 => assert!(!d.allowed(), "{strategy}: cost {c} {d:?}"),
                c if d.allowed() => consumed += c,
                _ => {}
            }
        }
        assert!(consumed <= 10, "{strategy}: {consumed}");
        // the log's burst is its count; the others' remaining reads the same
        let left = lim.peek("k").await.unwrap().remaining();
        assert_eq!(left, 10 - consumed, "{strategy}");
    }
}
