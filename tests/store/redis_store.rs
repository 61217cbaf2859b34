//! RedisStore-specific behaviour against a real redis-server: one round trip
//! per decision, script reloads, odd keys, a paused or restarted server.
//! What every store shares (strategies, multi-quota, exactness under
//! concurrency, TTLs) is in `tests/store/suite`.

use crate::common;

use std::ops::{Range, RangeInclusive};
use std::time::Duration;

use common::RedisServer;
use tower_redis_ratelimit::strategy::Strategy;
use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimiter, RedisStore};

fn redis_limiter(server: &RedisServer, prefix: &str, quotas: Vec<Quota>) -> RateLimiter {
    RateLimiter::builder()
        .store(RedisStore::new(server.pool(4)).timeout(Duration::from_secs(10)))
        .prefix(prefix)
        .quotas(quotas)
        .build()
        .unwrap()
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
        assert!(lim.check("k").await.unwrap().allowed());
    }
    let mut conn = server.conn().await;
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    server.reset_stats().await;
    let d = lim.check("k").await.unwrap();
    assert!(d.allowed());
    assert_eq!(d.remaining(), 6, "state survived the flush");
    assert_eq!(server.command_calls("script|load").await, 1);
    for _ in 0..6 {
        lim.check("k").await.unwrap();
    }
    assert_eq!(server.command_calls("script|load").await, 1);
    assert!(!lim.check("k").await.unwrap().allowed());
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
        assert!(lim.check(k).await.unwrap().allowed());
        assert!(lim.check(k).await.unwrap().allowed());
        assert!(!lim.check(k).await.unwrap().allowed(), "{k:?}");
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
    assert!(lim.check(&other).await.unwrap().allowed());
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
    assert!(common::warm_up(&lim, "k").await.allowed());
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
            matches!(r, Err(tower_redis_ratelimit::error::StoreError::Timeout(_))),
            "{r:?}"
        );
        assert!(r.is_err_and(|e| e.is_timeout()));
        worst = worst.max(took);
    }
    // bounded by the timeout (the pause lasts until `resume`), give or take scheduling
    assert!(worst < timeout + common::MARGIN, "worst {worst:?}");
    server.resume();
    // calls sent while paused were answered late and dropped; new ones succeed
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        match lim.check("k").await {
            Ok(d) => {
                assert!(d.allowed());
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
    assert!(common::warm_up(&lim, "k").await.allowed());
    server.kill();
    let started = std::time::Instant::now();
    assert!(lim.check("k").await.is_err());
    assert!(started.elapsed() < Duration::from_millis(500) + common::MARGIN);
    server.restart();
    // the broken connection is replaced and the script loaded again (NOSCRIPT)
    assert!(
        common::warm_up(&lim, "k").await.allowed(),
        "recovery after restart"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_calls_meeting_noscript_together_load_the_script_once() {
    let server = RedisServer::start();
    let lim = redis_limiter(
        &server,
        "stampede",
        vec![Quota::gcra(Rate::per_minute(1_000_000))],
    );
    lim.check("warm").await.unwrap();
    let mut conn = server.conn().await;
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    server.reset_stats().await;
    let tasks: Vec<_> = (0..500)
        .map(|i| {
            let lim = lim.clone();
            tokio::spawn(async move { lim.check(format!("k{i}")).await.unwrap().allowed() })
        })
        .collect();
    for t in tasks {
        assert!(t.await.unwrap());
    }
    // once per script: the limiter's, for the first calls, sent alone, and
    // its batch twin, for the calls that queued behind them
    assert_eq!(server.command_calls("script|load").await, 2);
}

#[tokio::test]
async fn an_enormous_cost_is_denied_without_retry_and_consumes_nothing() {
    let server = RedisServer::start();
    for strategy in Strategy::ALL {
        let q = match strategy {
            Strategy::Concurrency => Quota::concurrency(5),
            s => Quota::new(s, Rate::per_minute(5)),
        };
        let stores: [(&str, RateLimiter); 2] = [
            ("redis", redis_limiter(&server, "huge", vec![q.clone()])),
            (
                "memory",
                RateLimiter::builder()
                    .store(MemoryStore::new())
                    .quota(q)
                    .build()
                    .unwrap(),
            ),
        ];
        for (store, lim) in stores {
            for cost in [6, 1 << 40, (1 << 40) + 1, u64::MAX / 2, u64::MAX] {
                let d = lim.check_n("k", cost).await.unwrap();
                assert!(!d.allowed(), "{store} {strategy} cost {cost}: {d:?}");
                assert_eq!(d.retry_after(), None, "{store} {strategy} cost {cost}");
            }
            assert_eq!(
                lim.peek("k").await.unwrap().remaining(),
                5,
                "{store} {strategy}"
            );
        }
    }
}

/// A cost above a quota's capacity is denied before any store call: nothing
/// is read or written (no EVALSHA, no key), so a huge cost costs nothing.
#[tokio::test]
async fn a_cost_above_capacity_is_denied_without_a_store_call() {
    let server = RedisServer::start();
    let memory = MemoryStore::new();
    let mut configs: Vec<(String, Vec<Quota>, u64, String)> = Strategy::ALL
        .iter()
        .map(|s| {
            let q = match s {
                Strategy::Concurrency => Quota::concurrency(5),
                s => Quota::new(*s, Rate::per_minute(5)),
            };
            let binding = q.quota_name();
            (s.as_str().to_owned(), vec![q], 5, binding)
        })
        .collect();
    configs.push((
        "multi".to_owned(),
        vec![
            Quota::gcra(Rate::per_minute(100)).name("big"),
            Quota::sliding_window_log(Rate::per_minute(5)).name("small"),
        ],
        5,
        "small".to_owned(),
    ));
    for (name, quotas, capacity, binding) in &configs {
        let limiters = [
            ("redis", redis_limiter(&server, name, quotas.clone())),
            (
                "memory",
                RateLimiter::builder()
                    .store(memory.clone())
                    .prefix(name.as_str())
                    .quotas(quotas.clone())
                    .build()
                    .unwrap(),
            ),
        ];
        for (store, lim) in &limiters {
            for cost in [capacity + 1, 1_000_000, u64::MAX] {
                let d = lim.check_n("k", cost).await.unwrap();
                let what = format!("{store} {name} cost {cost}: {d:?}");
                assert!(!d.allowed(), "{what}");
                assert_eq!(d.retry_after(), None, "{what}");
                assert_eq!(d.quota().as_ref(), binding.as_str(), "{what}");
                assert_eq!(d.limit(), *capacity, "{what}");
                // the state was not read
                assert_eq!(
                    (d.remaining(), d.reset_after()),
                    (0, Duration::ZERO),
                    "{what}"
                );
                assert!(d.lease().is_none() && d.delay().is_none(), "{what}");
                assert_eq!(d.quotas().len(), quotas.len(), "{what}");
                for (q, spec) in d.quotas().zip(quotas) {
                    assert_eq!(q.allowed(), cost <= spec.limit(), "{what}");
                    assert_eq!(q.retry_after(), None, "{what}");
                }
            }
        }
    }
    assert_eq!(server.command_calls("evalsha").await, 0);
    assert_eq!(server.command_calls("eval").await, 0);
    let mut conn = server.conn().await;
    let keys: u64 = redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap();
    assert_eq!(keys, 0);
    assert!(memory.is_empty());
    // a cost that fits still goes to the store
    let lim = redis_limiter(
        &server,
        "fits",
        vec![Quota::sliding_window_log(Rate::per_minute(5))],
    );
    assert!(lim.check_n("k", 5).await.unwrap().allowed());
    // (the first EVALSHA meets NOSCRIPT, loads and runs again)
    assert!(server.command_calls("evalsha").await > 0);
}

#[test]
fn sorted_set_strategies_have_a_bounded_capacity() {
    let max = Quota::MAX_SORTED_SET_LIMIT;
    let build = |q: Quota| {
        RateLimiter::builder()
            .store(MemoryStore::new())
            .quota(Quota::gcra(Rate::per_second(1)))
            .quota(q)
            .build()
    };
    for q in [
        Quota::sliding_window_log(Rate::per_hour(max + 1)),
        Quota::concurrency(max + 1),
        Quota::sliding_window_log(Rate::per_day(1 << 40)),
    ] {
        let e = build(q.clone()).unwrap_err();
        assert_eq!(e.field(), "quota[1].rate.count", "{e}");
        let msg = e.to_string();
        assert!(msg.contains(&max.to_string()), "{msg}");
        if q.strategy() == Strategy::SlidingWindowLog {
            assert!(msg.contains("SlidingWindowCounter"), "{msg}");
        }
    }
    assert!(build(Quota::sliding_window_log(Rate::per_hour(max))).is_ok());
    assert!(build(Quota::concurrency(max)).is_ok());
    // other strategies keep O(1) state and take far larger counts
    assert!(build(Quota::sliding_window_counter(Rate::per_hour(max * 100))).is_ok());
    assert!(build(Quota::gcra(Rate::per_hour(max * 100))).is_ok());
}

/// On Redis's clock a sliding window counter's key is one integer,
/// `(c * 2^21 + p) * 1024 + w % 1024`: the key's TTL keeps its window within
/// a few of the current one, which the low bits tell apart. Each state is
/// written by hand, then read by a peek (whose `reset_after` says which
/// window the counts were taken for).
#[tokio::test]
async fn a_sliding_window_counter_on_redis_clock_is_one_packed_integer() {
    const P: u64 = 3_600_000_000; // one hour, in µs
    let hour = Duration::from_micros(P);
    let server = RedisServer::start();
    let lim = redis_limiter(
        &server,
        "swcpack",
        vec![Quota::sliding_window_counter(Rate::new(5, hour))],
    );
    let mut conn = server.conn().await;
    let key = lim.storage_keys("k").remove(0);
    assert!(lim.check("k").await.unwrap().allowed());
    let window = async |conn: &mut redis::aio::MultiplexedConnection| {
        let (s, us): (u64, u64) = redis::cmd("TIME").query_async(conn).await.unwrap();
        (s * 1_000_000 + us) / P
    };
    let w = window(&mut conn).await;
    let v: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    let v: u64 = v.parse().expect("an integer");
    assert_eq!(
        (v % 1024, (v / 1024) >> 21, v / 1024 % (1 << 21)),
        (w % 1024, 1, 0)
    );
    // a second request in the same window: the count grows in place
    // (INCRBY), the TTL set by the first stays
    let ttl = async |conn: &mut redis::aio::MultiplexedConnection| -> i64 {
        redis::cmd("PTTL")
            .arg(&key)
            .query_async(conn)
            .await
            .unwrap()
    };
    let first_ttl = ttl(&mut conn).await;
    assert!(lim.check("k").await.unwrap().allowed());
    let v2: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    let v2: u64 = v2.parse().expect("an integer");
    if window(&mut conn).await == w {
        assert_eq!(v2, v + (1 << 31));
    }
    let second_ttl = ttl(&mut conn).await;
    assert!(
        second_ttl > 0 && second_ttl <= first_ttl,
        "{first_ttl} {second_ttl}"
    );
    // (window offset from now, c, p) -> (remaining range, reset_after range)
    #[allow(clippy::type_complexity)]
    let cases: [(i64, u64, u64, RangeInclusive<u64>, Range<Duration>); 6] = [
        (0, 2, 0, 3..=3, hour..hour * 2 + Duration::from_millis(1)),
        // the previous window: its count weighs by the overlap, reset within the hour
        (
            -1,
            2,
            0,
            4..=5,
            Duration::ZERO..hour + Duration::from_millis(1),
        ),
        // two or many windows back: forgotten
        (-2, 2, 4, 5..=5, Duration::ZERO..Duration::from_nanos(1)),
        (-500, 2, 4, 5..=5, Duration::ZERO..Duration::from_nanos(1)),
        // a window ahead: Redis's clock went back, the stored window holds
        (
            1,
            2,
            0,
            3..=3,
            hour * 2..hour * 3 + Duration::from_millis(1),
        ),
        // the current window with both counts (p weighs up to 1)
        (0, 1, 1, 3..=4, hour..hour * 2 + Duration::from_millis(1)),
    ];
    for (dw, c, p, remaining, reset) in cases {
        let w = window(&mut conn).await as i64 + dw;
        let v = ((c << 21) + p) * 1024 + w.rem_euclid(1024) as u64;
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(v)
            .arg("PX")
            .arg(10_000_000)
            .query_async(&mut conn)
            .await
            .unwrap();
        let d = lim.peek("k").await.unwrap();
        assert!(remaining.contains(&d.remaining()), "{dw} {c} {p}: {d:?}");
        assert!(reset.contains(&d.reset_after()), "{dw} {c} {p}: {d:?}");
    }
    // the text form `w c p` (a manual clock's) is read on Redis's clock too
    let w = window(&mut conn).await;
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg(format!("{w} 2 0"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(lim.peek("k").await.unwrap().remaining(), 3);
}

/// On Redis's clock a lone fixed window takes the script's fast path in each
/// of its forms: cost 1 packed in one argument, a limit too large to pack, a
/// cost above 1, and a count too large for the integer reply (then a string).
/// Each agrees with the count and TTL Redis holds, and a denial writes nothing.
#[tokio::test]
async fn a_fixed_window_on_redis_clock_answers_in_every_fast_path_form() {
    let hour = Duration::from_secs(3600);
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let near = |d: Duration| d <= hour && d > hour - Duration::from_secs(5);
    for (prefix, limit) in [("fwsmall", 5u64), ("fwbig", 5_000_000_000)] {
        let lim = redis_limiter(
            &server,
            prefix,
            vec![Quota::fixed_window(Rate::new(limit, hour))],
        );
        let key = lim.storage_keys("k").remove(0);
        let d = lim.check("k").await.unwrap();
        assert!(d.allowed() && d.retry_after().is_none());
        assert_eq!((d.remaining(), d.reset_after()), (limit - 1, hour));
        let d = lim.check_n("k", 3).await.unwrap();
        assert!(d.allowed() && near(d.reset_after()), "{prefix}: {d:?}");
        assert_eq!(d.remaining(), limit - 4);
        // a denial (cost 2, one left) writes nothing and waits for the window's end
        let set = |v: u64| {
            let mut cmd = redis::cmd("SET");
            cmd.arg(&key).arg(v).arg("KEEPTTL");
            cmd
        };
        let () = set(limit - 1).query_async(&mut conn).await.unwrap();
        let d = lim.check_n("k", 2).await.unwrap();
        assert!(!d.allowed() && near(d.reset_after()), "{prefix}: {d:?}");
        assert_eq!((d.remaining(), d.retry_after()), (1, Some(d.reset_after())));
        let d = lim.check("k").await.unwrap();
        assert!(d.allowed() && near(d.reset_after()), "{prefix}: {d:?}");
        assert_eq!(d.remaining(), 0);
        let d = lim.check("k").await.unwrap();
        assert!(!d.allowed() && near(d.reset_after()), "{prefix}: {d:?}");
        assert_eq!((d.remaining(), d.retry_after()), (0, Some(d.reset_after())));
        let count: u64 = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(count, limit, "{prefix}");
    }
}

/// `verify()` loads every script a lone fixed window's decisions run (its
/// fast path has a script of its own): the decisions after it meet no
/// `NOSCRIPT` and load nothing.
#[tokio::test]
async fn verify_loads_the_fixed_window_fast_path_script_too() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let lim = redis_limiter(
        &server,
        "fwverify",
        vec![Quota::fixed_window(Rate::per_minute(7))],
    );
    lim.verify().await.unwrap();
    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .unwrap();
    for cost in [1, 3, 3] {
        assert!(lim.check_n("k", cost).await.unwrap().allowed());
    }
    assert!(!lim.check("k").await.unwrap().allowed());
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(stats.contains("cmdstat_evalsha:calls=4,"), "{stats}");
    assert!(!stats.contains("cmdstat_script|load"), "{stats}");
    let errors: String = redis::cmd("INFO")
        .arg("errorstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!errors.contains("NOSCRIPT"), "{errors}");
}

/// A Redis out of memory (`noeviction`) refuses the fast path's increment:
/// a request the count denies is still denied (the general path only reads
/// on a denial), never turned into a store error that a fail-open policy
/// would let through; one the count would admit gets the error.
#[tokio::test]
async fn a_redis_out_of_memory_still_denies_over_the_limit() {
    let hour = Duration::from_secs(3600);
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let lim = redis_limiter(
        &server,
        "fwoom",
        vec![Quota::fixed_window(Rate::new(3, hour))],
    );
    for _ in 0..3 {
        assert!(lim.check("full").await.unwrap().allowed());
    }
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("noeviction")
        .query_async(&mut conn)
        .await
        .unwrap();
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(1)
        .query_async(&mut conn)
        .await
        .unwrap();
    for cost in [1, 2] {
        let d = lim.check_n("full", cost).await.unwrap();
        assert!(!d.allowed(), "cost {cost}: {d:?}");
        assert_eq!(d.remaining(), 0);
        assert!(d.retry_after().is_some_and(|r| r <= hour), "{d:?}");
    }
    let e = lim.check("fresh").await.unwrap_err();
    assert!(e.to_string().contains("OOM"), "{e}");
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .query_async(&mut conn)
        .await
        .unwrap();
    let count: u64 = redis::cmd("GET")
        .arg(&lim.storage_keys("full")[0])
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(count, 3);
    assert!(lim.check("fresh").await.unwrap().allowed());
}

#[tokio::test]
async fn a_sliding_log_is_a_string_up_to_32_times_then_a_list_and_reads_lists_of_earlier_versions()
{
    let server = RedisServer::start();
    let hour = Duration::from_secs(3_600);
    let lim = redis_limiter(
        &server,
        "swlog",
        vec![Quota::sliding_window_log(Rate::new(40, hour))],
    );
    let mut conn = server.conn().await;
    let key = lim.storage_keys("k").remove(0);
    let kind = async |conn: &mut redis::aio::MultiplexedConnection| -> (String, i64, u64) {
        let t: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(conn)
            .await
            .unwrap();
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(conn)
            .await
            .unwrap();
        let len: u64 = match t.as_str() {
            "string" => redis::cmd("STRLEN")
                .arg(&key)
                .query_async(conn)
                .await
                .unwrap(),
            _ => redis::cmd("LLEN")
                .arg(&key)
                .query_async(conn)
                .await
                .unwrap(),
        };
        (t, ttl, len)
    };
    for i in 1..=32u64 {
        let d = lim.check("k").await.unwrap();
        assert!(d.allowed());
        assert_eq!(d.remaining(), 40 - i);
    }
    let (t, ttl, len) = kind(&mut conn).await;
    assert_eq!((t.as_str(), len), ("string", 32 * 7));
    assert!(ttl > 3_599_000 && ttl <= 3_600_000, "{ttl}");
    // the 33rd time: a list, newest first, with its TTL
    assert_eq!(lim.check("k").await.unwrap().remaining(), 7);
    let (t, ttl, len) = kind(&mut conn).await;
    assert_eq!((t.as_str(), len), ("list", 33));
    assert!(ttl > 3_599_000 && ttl <= 3_600_000, "{ttl}");
    let times: Vec<u64> = redis::cmd("LRANGE")
        .arg(&key)
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "{times:?}");
    // exact on the list: 7 more, then denied until the oldest leaves
    for _ in 0..7 {
        assert!(lim.check("k").await.unwrap().allowed());
    }
    let d = lim.check("k").await.unwrap();
    assert!(!d.allowed());
    assert_eq!(d.remaining(), 0);
    assert!(
        d.retry_after()
            .is_some_and(|r| r > hour - Duration::from_secs(60))
    );
    // a penalty past 32 turns a string into a list too
    lim.penalize("p", 31).await.unwrap();
    let pkey = lim.storage_keys("p").remove(0);
    let t: String = redis::cmd("TYPE")
        .arg(&pkey)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(t, "string");
    lim.penalize("p", 2).await.unwrap();
    let t: String = redis::cmd("TYPE")
        .arg(&pkey)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(t, "list");
    assert_eq!(lim.peek("p").await.unwrap().remaining(), 7);
    // a short list, as an earlier version kept every log, is read as one
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let now = s * 1_000_000 + us;
    let lkey = lim.storage_keys("old").remove(0);
    let _: () = redis::cmd("RPUSH")
        .arg(&lkey)
        .arg(now - 1_000)
        .arg(now - 2_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("PEXPIRE")
        .arg(&lkey)
        .arg(3_600_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(lim.check("old").await.unwrap().remaining(), 37);
    let len: u64 = redis::cmd("LLEN")
        .arg(&lkey)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(len, 3);
}
