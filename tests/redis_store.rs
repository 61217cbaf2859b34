//! RedisStore behaviour against a real redis-server: exactness under
//! concurrency from many limiter instances, TTLs on every key, one round trip
//! per decision, script reloads, odd keys, multi-quota atomicity.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::RedisServer;
use tower_redis_ratelimit::{
    ManualClock, MemoryStore, Quota, Rate, RateLimiter, RedisStore, Strategy,
};

fn quota(strategy: Strategy, n: u64, period: Duration) -> Quota {
    match strategy {
        Strategy::Concurrency => Quota::concurrency(n).lease_timeout(period),
        s => Quota::new(s, Rate::new(n, period)),
    }
}

fn redis_limiter(server: &RedisServer, prefix: &str, quotas: Vec<Quota>) -> RateLimiter {
    RateLimiter::builder()
        .store(RedisStore::new(server.pool(4)).timeout(Duration::from_secs(10)))
        .prefix(prefix)
        .quotas(quotas)
        .build()
        .unwrap()
}

/// 8 limiter instances, each with its own pool, 1000 concurrent checks on one
/// key with limit 100 and Redis's own clock.
async fn admitted_under_contention(server: &RedisServer, strategy: Strategy) -> u64 {
    let instances: Vec<RateLimiter> = (0..8)
        .map(|_| {
            redis_limiter(
                server,
                &format!("exact-{}", strategy.as_str()),
                vec![quota(strategy, 100, Duration::from_secs(3600))],
            )
        })
        .collect();
    let allowed = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..1000 {
        let lim = instances[i % instances.len()].clone();
        let allowed = allowed.clone();
        tasks.push(tokio::spawn(async move {
            let d = lim.check("hot-key").await.unwrap();
            if d.allowed {
                allowed.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    allowed.load(Ordering::Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exactly_the_limit_is_admitted_under_concurrency_from_many_instances() {
    let server = RedisServer::start();
    for strategy in Strategy::ALL {
        let admitted = admitted_under_contention(&server, strategy).await;
        // Every strategy is exact here: a burst within one window. The sliding
        // window counter's error bound (at most 2n per sliding window) only
        // shows across an aligned-window boundary, and even then it never
        // exceeds n within one aligned window.
        assert_eq!(admitted, 100, "{strategy}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrency_never_exceeds_its_limit_in_flight() {
    let server = RedisServer::start();
    let instances: Vec<RateLimiter> = (0..8)
        .map(|_| redis_limiter(&server, "inflight", vec![Quota::concurrency(10)]))
        .collect();
    let in_flight = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    let served = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..400 {
        let lim = instances[i % 8].clone();
        let (in_flight, peak, served) = (in_flight.clone(), peak.clone(), served.clone());
        tasks.push(tokio::spawn(async move {
            let d = lim.check("worker").await.unwrap();
            if let Some(lease) = d.lease {
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                tokio::task::yield_now().await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                served.fetch_add(1, Ordering::SeqCst);
                lim.release(&lease).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(peak.load(Ordering::SeqCst) <= 10);
    assert!(served.load(Ordering::SeqCst) >= 10);
    // every lease was released: the key is gone
    assert_eq!(server.dbsize().await, 0);
}

#[tokio::test]
async fn every_key_written_has_a_ttl_no_longer_than_its_window() {
    let server = RedisServer::start();
    let period = Duration::from_secs(60);
    for strategy in Strategy::ALL {
        let lim = redis_limiter(&server, "ttl", vec![quota(strategy, 5, period)]);
        for k in 0..3 {
            for _ in 0..7 {
                lim.check(format!("user-{k}")).await.unwrap();
            }
        }
    }
    let keys = server.keys_with_ttl().await;
    assert_eq!(keys.len(), 3 * Strategy::ALL.len(), "{keys:?}");
    for (key, ttl) in keys {
        let key = String::from_utf8_lossy(&key);
        // the sliding window counter keeps a window as the next one's "previous"
        let max = if key.ends_with(":swc") {
            120_000
        } else {
            60_000
        };
        assert!(ttl > 0 && ttl <= max, "{key}: PTTL {ttl}");
    }
}

#[tokio::test]
async fn a_key_found_without_ttl_is_repaired_on_denial() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    for strategy in Strategy::ALL {
        let lim = redis_limiter(
            &server,
            "repair",
            vec![quota(strategy, 1, Duration::from_secs(60))],
        );
        assert!(lim.check("k").await.unwrap().allowed);
        let key = lim.storage_keys("k").remove(0);
        let () = redis::cmd("PERSIST")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(!lim.check("k").await.unwrap().allowed);
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        let max = if strategy == Strategy::SlidingWindowCounter {
            120_000
        } else {
            60_000
        };
        assert!(ttl > 0 && ttl <= max, "{strategy}: PTTL {ttl}");
    }
}

#[tokio::test]
async fn all_keys_are_gone_once_their_windows_pass() {
    let server = RedisServer::start();
    let period = Duration::from_millis(200);
    for strategy in Strategy::ALL {
        let lim = redis_limiter(&server, "gone", vec![quota(strategy, 3, period)]);
        for k in 0..20 {
            lim.check_n(format!("k{k}"), 2).await.unwrap();
        }
    }
    assert!(server.dbsize().await > 0);
    // Keys expire by TTL (at most two 200 ms windows); poll against a deadline.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let left = server.dbsize().await;
        if left == 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{left} keys left");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn one_redis_round_trip_per_decision_and_no_ping() {
    let server = RedisServer::start();
    let lim = redis_limiter(
        &server,
        "rt",
        vec![
            Quota::gcra(Rate::per_minute(1000)).name("minute"),
            Quota::fixed_window(Rate::per_day(100_000)).name("day"),
        ],
    );
    // warm up: connection set-up and the first NOSCRIPT load
    lim.check("warm").await.unwrap();
    server.reset_stats().await;
    for i in 0..500 {
        lim.check(format!("user-{}", i % 50)).await.unwrap();
    }
    let stats = server.info_commandstats().await;
    assert_eq!(stats.get("evalsha"), Some(&500), "{stats:?}");
    let others: u64 = stats
        .iter()
        .filter(|(c, _)| !matches!(c.as_str(), "evalsha" | "info"))
        .map(|(_, n)| n)
        .sum();
    // commands run inside the script are counted too; nothing else may appear
    let outside: Vec<_> = stats
        .keys()
        .filter(|c| {
            !matches!(
                c.as_str(),
                "evalsha"
                    | "info"
                    | "config|resetstat"
                    // commands the scripts call
                    | "time"
                    | "get"
                    | "set"
                    | "incrby"
                    | "decrby"
                    | "pttl"
                    | "pexpire"
                    | "hmget"
                    | "hset"
                    | "hincrby"
            )
        })
        .collect();
    assert!(
        outside.is_empty(),
        "unexpected commands {outside:?} ({others})"
    );
    assert_eq!(stats.get("ping"), None);
}

#[tokio::test]
async fn script_flush_mid_run_recovers_with_one_reload() {
    let server = RedisServer::start();
    let lim = redis_limiter(
        &server,
        "flush",
        vec![Quota::fixed_window(Rate::per_minute(10))],
    );
    for _ in 0..3 {
        assert!(lim.check("k").await.unwrap().allowed);
    }
    let mut conn = server.conn().await;
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    server.reset_stats().await;
    let d = lim.check("k").await.unwrap();
    assert!(d.allowed);
    assert_eq!(d.remaining, 6, "state survived the flush");
    assert_eq!(server.command_calls("script|load").await, 1);
    for _ in 0..6 {
        lim.check("k").await.unwrap();
    }
    assert_eq!(server.command_calls("script|load").await, 1);
    assert!(!lim.check("k").await.unwrap().allowed);
}

#[tokio::test]
async fn keys_with_braces_colons_binary_bytes_and_10kb_work_and_stay_bounded() {
    let server = RedisServer::start();
    let lim = redis_limiter(
        &server,
        "odd",
        vec![Quota::sliding_window_log(Rate::per_minute(2))],
    );
    let long = vec![b'x'; 10 * 1024];
    let keys: Vec<Vec<u8>> = vec![
        b"{victim}".to_vec(),
        b"}{".to_vec(),
        b"a:b:c".to_vec(),
        b"\x00\xff\xfe binary".to_vec(),
        "ünïcödé".as_bytes().to_vec(),
        long.clone(),
        b"".to_vec(),
    ];
    for k in &keys {
        assert!(lim.check(k).await.unwrap().allowed);
        assert!(lim.check(k).await.unwrap().allowed);
        assert!(!lim.check(k).await.unwrap().allowed, "{k:?}");
    }
    // each key kept its own state, and none could choose its hash slot
    let stored = server.keys_with_ttl().await;
    assert_eq!(stored.len(), keys.len());
    for (key, _) in &stored {
        assert!(key.len() < 200, "stored key too long: {} bytes", key.len());
        let s = std::str::from_utf8(key).expect("stored keys are UTF-8");
        assert!(s.starts_with("{odd:"), "{s}");
        assert_eq!(s.matches('{').count(), 1, "{s}");
        assert_eq!(s.matches('}').count(), 1, "{s}");
    }
    // different long keys do not collide
    let mut other = long.clone();
    other[5000] = b'y';
    assert!(lim.check(&other).await.unwrap().allowed);
}

#[tokio::test]
async fn multi_quota_is_all_or_nothing() {
    let server = RedisServer::start();
    let clock = ManualClock::new(Duration::from_secs(3_600));
    for store in ["redis", "memory"] {
        let builder = RateLimiter::builder()
            .prefix("multi")
            .clock(clock.clone())
            .quota(Quota::fixed_window(Rate::per_minute(3)).name("minute"))
            .quota(Quota::fixed_window(Rate::per_hour(5)).name("hour"))
            .quota(Quota::concurrency(10).name("inflight"));
        let lim = match store {
            "redis" => builder.store(RedisStore::new(server.pool(2))),
            _ => builder.store(MemoryStore::new()),
        }
        .build()
        .unwrap();
        let mut leases = Vec::new();
        for i in 0..3 {
            let d = lim.check("u").await.unwrap();
            assert!(d.allowed);
            assert_eq!(d.quota.as_ref(), "minute");
            assert_eq!(d.remaining, 2 - i);
            assert_eq!(d.quotas.len(), 3);
            leases.push(d.lease.unwrap());
        }
        let d = lim.check("u").await.unwrap();
        assert!(!d.allowed);
        assert_eq!(d.quota.as_ref(), "minute");
        assert_eq!(d.retry_after, Some(Duration::from_secs(60)));
        // the hour quota and the lease set were not touched by the denial
        assert_eq!(d.quotas[1].remaining, 2);
        assert!(d.quotas[1].allowed);
        assert_eq!(d.quotas[2].remaining, 7);
        clock.advance(Duration::from_secs(60));
        // cost 3 fits the minute but not the hour: nothing is consumed anywhere
        let d = lim.check_n("u", 3).await.unwrap();
        assert!(!d.allowed);
        assert_eq!(d.quota.as_ref(), "hour");
        assert_eq!(d.retry_after, Some(Duration::from_secs(3_540)));
        assert_eq!(d.quotas[0].remaining, 3);
        let d = lim.check_n("u", 2).await.unwrap();
        assert!(d.allowed);
        assert_eq!(d.quota.as_ref(), "hour");
        assert_eq!(d.remaining, 0);
        for l in &leases {
            lim.release(l).await.unwrap();
        }
        lim.reset("u").await.unwrap();
        assert_eq!(lim.peek("u").await.unwrap().remaining, 3);
        clock.set(Duration::from_secs(3_600));
    }
}

#[tokio::test]
async fn fixed_window_on_redis_clock_uses_the_key_ttl_as_the_window() {
    let server = RedisServer::start();
    let period = Duration::from_secs(60);
    let single = redis_limiter(
        &server,
        "fwclock",
        vec![Quota::fixed_window(Rate::new(3, period))],
    );
    let multi = redis_limiter(
        &server,
        "fwclock-multi",
        vec![
            Quota::fixed_window(Rate::new(3, period)).name("a"),
            Quota::fixed_window(Rate::new(100, period)).name("b"),
        ],
    );
    for lim in [single, multi] {
        assert_eq!(lim.peek("k").await.unwrap().reset_after, Duration::ZERO);
        for left in [2, 1, 0] {
            let d = lim.check("k").await.unwrap();
            assert!(d.allowed);
            assert_eq!(d.remaining, left);
            assert!(d.reset_after <= period && d.reset_after > period - Duration::from_secs(5));
        }
        let d = lim.check("k").await.unwrap();
        assert!(!d.allowed);
        assert_eq!(d.remaining, 0);
        assert_eq!(d.retry_after, Some(d.reset_after));
        assert!(d.reset_after <= period && d.reset_after > period - Duration::from_secs(5));
        // the denial consumed nothing, and cost above the limit never fits
        let d = lim.check_n("k", 4).await.unwrap();
        assert_eq!((d.allowed, d.retry_after), (false, None));
        assert_eq!(lim.peek("k").await.unwrap().remaining, 0);
        let stored = lim.storage_keys("k");
        let mut conn = server.conn().await;
        let count: u64 = redis::cmd("GET")
            .arg(&stored[0])
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(count, 3);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_times_out_within_the_store_timeout_then_recovers() {
    let server = RedisServer::start();
    let timeout = Duration::from_millis(100);
    let lim = RateLimiter::builder()
        .store(RedisStore::new(server.pool(4)).timeout(timeout))
        .prefix("paused")
        .quota(Quota::gcra(Rate::per_second(1000)))
        .build()
        .unwrap();
    assert!(lim.check("k").await.unwrap().allowed);
    server.pause();
    let mut tasks = Vec::new();
    for i in 0..50 {
        let lim = lim.clone();
        tasks.push(tokio::spawn(async move {
            let started = std::time::Instant::now();
            let r = lim.check(format!("k{i}")).await;
            (r, started.elapsed())
        }));
    }
    let mut worst = Duration::ZERO;
    for t in tasks {
        let (r, took) = t.await.unwrap();
        assert!(
            matches!(r, Err(tower_redis_ratelimit::StoreError::Timeout(_))),
            "{r:?}"
        );
        worst = worst.max(took);
    }
    assert!(
        worst < timeout + Duration::from_millis(150),
        "worst {worst:?}"
    );
    server.resume();
    // calls sent while paused were answered late and dropped; new ones succeed
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        match lim.check("k").await {
            Ok(d) => {
                assert!(d.allowed);
                break;
            }
            Err(e) => assert!(std::time::Instant::now() < deadline, "{e}"),
        }
    }
}

#[tokio::test]
async fn a_restarted_redis_is_reconnected_without_restarting_the_app() {
    let mut server = RedisServer::start();
    let lim = RateLimiter::builder()
        .store(RedisStore::new(server.pool(4)).timeout(Duration::from_millis(500)))
        .prefix("restart")
        .quota(Quota::fixed_window(Rate::per_minute(100)))
        .build()
        .unwrap();
    assert!(lim.check("k").await.unwrap().allowed);
    server.kill();
    let started = std::time::Instant::now();
    assert!(lim.check("k").await.is_err());
    assert!(started.elapsed() < Duration::from_millis(600));
    server.restart();
    // the broken connection is replaced and the script loaded again (NOSCRIPT)
    let mut ok = false;
    for _ in 0..5 {
        if let Ok(d) = lim.check("k").await {
            assert!(d.allowed);
            ok = true;
            break;
        }
    }
    assert!(ok, "no recovery after restart");
}
