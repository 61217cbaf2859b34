//! Joint decisions (`limiter::AllOrNothing`, `RateLimiter::check_all`):
//! several limiters, each with its own key and cost, all or nothing, on the
//! memory store and a real Redis; and the two stores against each other on
//! random sequences under one manual clock.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::RedisServer;
use tower_redis_ratelimit::clock::ManualClock;
use tower_redis_ratelimit::error::StoreError;
use tower_redis_ratelimit::limiter::{AllOrNothing, JointDecision};
use tower_redis_ratelimit::strategy::Strategy;
use tower_redis_ratelimit::{Decision, MemoryStore, Quota, Rate, RateLimiter, RedisStore};

/// A store of either kind, and the limiters built on clones of it.
#[derive(Clone)]
enum Store {
    Memory(MemoryStore),
    Redis(RedisStore),
}

impl Store {
    fn memory() -> Self {
        Store::Memory(MemoryStore::new())
    }

    fn redis(server: &RedisServer) -> Self {
        // (batching on: a joint decision goes out on its own anyway)
        Store::Redis(RedisStore::new(server.pool(4)).timeout(Duration::from_secs(10)))
    }

    fn limiter(
        &self,
        prefix: &str,
        quotas: Vec<Quota>,
        clock: Option<&ManualClock>,
    ) -> RateLimiter {
        let b = RateLimiter::builder().prefix(prefix).quotas(quotas);
        let b = match clock {
            Some(c) => b.clock(c.clone()),
            None => b,
        };
        match self {
            Store::Memory(s) => b.store(s.clone()).build().unwrap(),
            Store::Redis(s) => b.store(s.clone()).build().unwrap(),
        }
    }

    fn one(&self, prefix: &str, quota: Quota) -> RateLimiter {
        self.limiter(prefix, vec![quota], None)
    }
}

/// The stores every test runs on: a memory store, and a Redis of its own.
fn stores() -> Vec<(Store, Option<RedisServer>)> {
    let server = RedisServer::start();
    vec![
        (Store::memory(), None),
        (Store::redis(&server), Some(server)),
    ]
}

/// What is left of each quota of `key`, read with a peek.
async fn left(lim: &RateLimiter, key: &str) -> Vec<u64> {
    let d = lim.peek(key).await.unwrap();
    d.quotas().map(|q| q.remaining()).collect()
}

/// The storage keys' values (DUMP) on Redis, or nothing on the memory store.
async fn dump(server: &Option<RedisServer>, keys: &[String]) -> Vec<Option<Vec<u8>>> {
    let Some(server) = server else {
        return Vec::new();
    };
    let mut conn = server.conn().await;
    let mut out = Vec::new();
    for k in keys {
        let v: Option<Vec<u8>> = redis::cmd("DUMP")
            .arg(k)
            .query_async(&mut conn)
            .await
            .unwrap();
        out.push(v);
    }
    out
}

/// Every strategy but concurrency (a joint decision takes no leases), and
/// the aligned fixed window.
fn quotas(n: u64) -> Vec<Quota> {
    quotas_at(Rate::per_hour(n))
}

/// [`quotas`] at `rate`.
fn quotas_at(rate: Rate) -> Vec<Quota> {
    let mut out: Vec<Quota> = Strategy::ALL
        .iter()
        .filter(|s| !s.holds_leases())
        .map(|&s| Quota::new(s, rate))
        .collect();
    out.push(Quota::fixed_window(rate).aligned());
    out
}

#[tokio::test]
async fn a_denied_joint_decision_leaves_every_part_as_it_was() {
    for (store, server) in stores() {
        for (i, (roomy, tight)) in quotas(10).into_iter().zip(quotas(2)).enumerate() {
            let what = format!("{roomy:?} / {tight:?}");
            let a = store.one(&format!("a{i}"), roomy);
            let b = store.one(&format!("b{i}"), tight);
            let (ka, kb) = ("alice", "acme");
            for _ in 0..2 {
                let d = RateLimiter::check_all([(&a, ka, 1), (&b, kb, 1)])
                    .await
                    .unwrap();
                assert!(d.allowed() && d.atomic(), "{what}");
                assert!(d.decisions().iter().all(Decision::allowed), "{what}");
            }
            assert_eq!(left(&a, ka).await, [8], "{what}");
            assert_eq!(left(&b, kb).await, [0], "{what}");
            let mut keys = a.storage_keys(ka);
            keys.extend(b.storage_keys(kb));
            let before = dump(&server, &keys).await;
            let d = AllOrNothing::new()
                .part(&a, ka, 3)
                .part(&b, kb, 1)
                .decide()
                .await
                .unwrap();
            assert!(d.denied(), "{what}");
            let [da, db] = d.decisions() else {
                panic!("two decisions: {d:?}")
            };
            // a alone would fit, and reports its state (nothing consumed)
            assert!(da.allowed() && db.denied(), "{what}: {d:?}");
            assert_eq!(da.remaining(), 8, "{what}");
            assert!(db.retry_after().is_some(), "{what}");
            assert_eq!(left(&a, ka).await, [8], "{what}");
            assert_eq!(left(&b, kb).await, [0], "{what}");
            assert_eq!(dump(&server, &keys).await, before, "{what}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_joint_decisions_admit_exactly_the_limit_and_consume_nothing_when_denied() {
    for (store, _server) in stores() {
        for (i, ((wide, narrow), other)) in quotas(100)
            .into_iter()
            .zip(quotas(50))
            .zip(quotas(30))
            .enumerate()
        {
            let what = format!("{wide:?}");
            let a = Arc::new(store.one(&format!("race-a{i}"), wide));
            let b = Arc::new(store.one(&format!("race-b{i}"), narrow));
            let c = Arc::new(store.one(&format!("race-c{i}"), other));
            let admitted_ab = Arc::new(AtomicUsize::new(0));
            let admitted_ac = Arc::new(AtomicUsize::new(0));
            let tasks: Vec<_> = (0..240)
                .map(|n| {
                    let (a, b, c) = (a.clone(), b.clone(), c.clone());
                    let (ab, ac) = (admitted_ab.clone(), admitted_ac.clone());
                    tokio::spawn(async move {
                        // two joint decisions over the shared key of `a`
                        let (second, counter) = if n % 2 == 0 { (&*b, &ab) } else { (&*c, &ac) };
                        // (in either order: the memory store locks shards in
                        // its own order, whatever the parts')
                        let mut parts = vec![(&*a, "hot", 1), (second, "k", 1)];
                        if n % 4 >= 2 {
                            parts.reverse();
                        }
                        let d = RateLimiter::check_all(parts).await.unwrap();
                        if d.allowed() {
                            counter.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
            let (ab, ac) = (
                admitted_ab.load(Ordering::Relaxed),
                admitted_ac.load(Ordering::Relaxed),
            );
            assert_eq!((ab, ac), (50, 30), "{what}");
            // a counted exactly the admitted ones
            assert_eq!(left(&a, "hot").await, [100 - 80], "{what}");
            assert_eq!(left(&b, "k").await, [0], "{what}");
            assert_eq!(left(&c, "k").await, [0], "{what}");
        }
    }
}

#[tokio::test]
async fn cost_zero_parts_check_without_consuming() {
    for (store, _server) in stores() {
        let a = store.one("z-a", Quota::gcra(Rate::per_hour(5)));
        let b = store.one("z-b", Quota::fixed_window(Rate::per_hour(5)));
        let d = RateLimiter::check_all([(&a, "k", 0), (&b, "k", 2)])
            .await
            .unwrap();
        assert!(d.allowed());
        assert_eq!(d.decisions()[0].remaining(), 5);
        assert_eq!(d.decisions()[1].remaining(), 3);
        assert_eq!(left(&a, "k").await, [5]);
        // a key in debt denies even a cost of 0: then nothing is consumed
        a.penalize("k", 7).await.unwrap();
        let d = RateLimiter::check_all([(&a, "k", 0), (&b, "k", 2)])
            .await
            .unwrap();
        assert!(d.denied());
        assert!(d.decisions()[0].denied() && d.decisions()[1].allowed());
        assert_eq!(left(&b, "k").await, [3]);
        // every part of cost 0: nothing consumed
        let d = RateLimiter::check_all([(&b, "k", 0), (&b, "k", 0)])
            .await
            .unwrap();
        assert!(d.allowed());
        assert_eq!(left(&b, "k").await, [3]);
    }
}

#[tokio::test]
async fn shadow_parts_never_deny_and_consume_nothing_when_they_would() {
    for (store, _server) in stores() {
        // a lone shadow quota, as a shadow rule of the Envoy service
        let shadow = store.one("s-a", Quota::fixed_window(Rate::per_hour(1)).shadow(true));
        // a limiter of an enforced and a shadow quota
        let mixed = store.limiter(
            "s-b",
            vec![
                Quota::fixed_window(Rate::per_hour(3)),
                Quota::gcra(Rate::per_hour(1)).name("shadow").shadow(true),
            ],
            None,
        );
        let enforced = store.one("s-c", Quota::token_bucket(Rate::per_hour(5)));
        for n in 0..3u64 {
            let d =
                RateLimiter::check_all([(&shadow, "k", 1), (&mixed, "k", 1), (&enforced, "k", 1)])
                    .await
                    .unwrap();
            assert!(d.allowed(), "{n}: {d:?}");
            let [ds, dm, _] = d.decisions() else { panic!() };
            assert!(ds.allowed() && dm.allowed());
            assert_eq!(ds.shadow_denied(), n > 0, "{n}");
            assert_eq!(dm.shadow_denied(), n > 0, "{n}");
        }
        // the shadow quotas consumed one each, the enforced ones three
        assert_eq!(left(&shadow, "k").await, [0]);
        assert_eq!(left(&mixed, "k").await, [0, 0]);
        assert_eq!(left(&enforced, "k").await, [2]);
        // the mixed limiter's enforced quota is out: denied, nothing consumed
        let d = RateLimiter::check_all([(&enforced, "k", 1), (&mixed, "k", 1)])
            .await
            .unwrap();
        assert!(d.denied());
        assert_eq!(left(&enforced, "k").await, [2]);
        // a shadow part alone never denies
        let d = RateLimiter::check_all([(&shadow, "k", 1), (&enforced, "k", 1)])
            .await
            .unwrap();
        assert!(d.allowed());
        assert_eq!(left(&enforced, "k").await, [1]);
    }
}

#[tokio::test]
async fn huge_costs_are_denied_without_consuming_anything() {
    for (store, server) in stores() {
        let a = store.one("h-a", Quota::sliding_window_log(Rate::per_hour(5)));
        let b = store.one("h-b", Quota::fixed_window(Rate::per_hour(5)));
        let mut keys = a.storage_keys("k");
        keys.extend(b.storage_keys("k"));
        for cost in [6, 1 << 53, u64::MAX] {
            let d = RateLimiter::check_all([(&a, "k", 1), (&b, "k", cost)])
                .await
                .unwrap();
            assert!(d.denied(), "{cost}");
            assert!(d.decisions()[0].allowed());
            assert!(d.decisions()[1].denied());
            assert_eq!(d.decisions()[1].retry_after(), None, "never fits");
            assert_eq!(left(&a, "k").await, [5]);
        }
        // nothing was written at all
        assert!(dump(&server, &keys).await.iter().all(Option::is_none));
    }
}

#[tokio::test]
async fn parts_counting_in_one_key_must_fit_together() {
    for (store, _server) in stores() {
        for (i, q) in quotas(5).into_iter().enumerate() {
            let what = format!("{q:?}");
            let a = store.one(&format!("t{i}"), q.clone());
            let same = store.one(&format!("t{i}"), q);
            // 3 + 3 > 5: denied, though each alone would fit
            let d = RateLimiter::check_all([(&a, "k", 3), (&same, "k", 3)])
                .await
                .unwrap();
            assert!(d.denied(), "{what}");
            assert!(
                d.decisions()[0].allowed() && d.decisions()[1].denied(),
                "{what}"
            );
            assert_eq!(left(&a, "k").await, [5], "{what}");
            let d = RateLimiter::check_all([(&a, "k", 3), (&same, "k", 2)])
                .await
                .unwrap();
            assert!(d.allowed(), "{what}");
            let r: Vec<u64> = d.decisions().iter().map(Decision::remaining).collect();
            assert_eq!(r, [2, 0], "{what}: as decided one after the other");
            assert_eq!(left(&a, "k").await, [0], "{what}");
        }
    }
}

#[tokio::test]
async fn parts_that_cannot_be_decided_together_are_rejected_and_nothing_is_sent() {
    let server = RedisServer::start();
    let redis = Store::redis(&server);
    let memory = Store::memory();
    let hour = || Quota::fixed_window(Rate::per_hour(5));
    let a = memory.one("m", hour());
    let cases = [
        ("another memory store", Store::memory().one("m2", hour())),
        ("a Redis store", redis.one("r", hour())),
        (
            "a concurrency quota",
            memory.one("c", Quota::new(Strategy::Concurrency, Rate::per_minute(3))),
        ),
        (
            "blocking",
            RateLimiter::builder()
                .store(match &memory {
                    Store::Memory(s) => s.clone(),
                    Store::Redis(_) => unreachable!(),
                })
                .prefix("b")
                .quota(hour())
                .blocking()
                .build()
                .unwrap(),
        ),
    ];
    for (what, other) in &cases {
        let e = RateLimiter::check_all([(&a, "k", 1), (other, "k", 1)])
            .await
            .unwrap_err();
        assert!(matches!(e, StoreError::Invalid(_)), "{what}: {e}");
        assert!(e.to_string().contains("part"), "{what}: {e}");
        assert_eq!(left(&a, "k").await, [5], "{what}");
    }
    // one storage key (one prefix, one quota name) under two rates
    let named = |n| memory.one("n", Quota::fixed_window(Rate::per_hour(n)).name("x"));
    let (five, six) = (named(5), named(6));
    assert_eq!(five.storage_keys("k"), six.storage_keys("k"));
    let e = RateLimiter::check_all([(&five, "k", 1), (&six, "k", 1)])
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Invalid(_)), "{e}");
    assert_eq!(left(&five, "k").await, [5]);
    // two RedisStore values over one server are two stores
    let other = Store::redis(&server).one("r2", hour());
    let r = redis.one("r", hour());
    let e = RateLimiter::check_all([(&r, "k", 1), (&other, "k", 1)])
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Invalid(_)), "{e}");
    assert_eq!(server.dbsize().await, 0);
    // no parts: allowed, nothing to say
    let d: JointDecision = AllOrNothing::new().decide().await.unwrap();
    assert!(d.allowed() && d.decisions().is_empty());
}

#[tokio::test]
async fn a_joint_decision_is_one_evalsha_and_every_key_gets_its_ttl() {
    let server = RedisServer::start();
    let store = Store::redis(&server);
    let limiters: Vec<RateLimiter> = quotas(10)
        .into_iter()
        .enumerate()
        .map(|(i, q)| store.one(&format!("one{i}"), q))
        .collect();
    let parts = || limiters.iter().map(|l| (l, "k", 2));
    RateLimiter::check_all(parts()).await.unwrap();
    server.reset_stats().await;
    let d = RateLimiter::check_all(parts()).await.unwrap();
    assert!(d.allowed());
    assert_eq!(server.command_calls("evalsha").await, 1);
    for (l, d) in limiters.iter().zip(d.decisions()) {
        assert_eq!(left(l, "k").await, [6]);
        assert_eq!(d.remaining(), 6);
    }
    let keys = server.keys_with_ttl().await;
    assert_eq!(keys.len(), limiters.len());
    assert!(keys.iter().all(|(_, ttl)| *ttl > 0), "{keys:?}");
}

/// A tiny deterministic generator (the sequences are the same every run).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// One quota's state: allowed, remaining, reset after, retry after.
type QuotaFacts = (bool, u64, Duration, Option<Duration>);

/// What must agree between the stores: every part's state.
fn facts(d: &JointDecision) -> (bool, Vec<Vec<QuotaFacts>>) {
    let parts = d
        .decisions()
        .iter()
        .map(|p| {
            p.quotas()
                .map(|q| (q.allowed(), q.remaining(), q.reset_after(), q.retry_after()))
                .collect()
        })
        .collect();
    (d.allowed(), parts)
}

#[tokio::test]
async fn memory_and_redis_agree_on_random_joint_decisions_under_a_manual_clock() {
    let server = RedisServer::start();
    for seed in 1..=4u64 {
        let mut rng = Lcg(seed);
        let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
        let make = |store: &Store| -> Vec<RateLimiter> {
            let mut all = quotas_at(Rate::new(4, Duration::from_millis(500)));
            // a limiter of two quotas, one of them shadow
            let two = vec![
                Quota::gcra(Rate::new(3, Duration::from_millis(300))),
                Quota::fixed_window(Rate::new(2, Duration::from_millis(400)))
                    .name("w")
                    .shadow(true),
            ];
            let mut out: Vec<RateLimiter> = all
                .drain(..)
                .enumerate()
                .map(|(i, q)| store.limiter(&format!("d{seed}-{i}"), vec![q], Some(&clock)))
                .collect();
            out.push(store.limiter(&format!("d{seed}-two"), two, Some(&clock)));
            out
        };
        let mut seen = [0; 2];
        let memory = make(&Store::memory());
        let redis = make(&Store::redis(&server));
        for step in 0..300 {
            if rng.next(4) == 0 {
                clock.advance(Duration::from_micros(rng.next(200_000)));
            }
            let n = 1 + rng.next(3) as usize;
            let picks: Vec<(usize, String, u64)> = (0..n)
                .map(|_| {
                    let l = rng.next(memory.len() as u64) as usize;
                    let key = format!("k{}", rng.next(2));
                    let cost = [0, 1, 1, 1, 2, 3, 9][rng.next(7) as usize];
                    (l, key, cost)
                })
                .collect();
            fn on<'a>(lims: &'a [RateLimiter], picks: &[(usize, String, u64)]) -> AllOrNothing<'a> {
                let mut j = AllOrNothing::new();
                for (l, key, cost) in picks {
                    j.push(&lims[*l], key, *cost);
                }
                j
            }
            let m = on(&memory, &picks).decide().await.unwrap();
            let r = on(&redis, &picks).decide().await.unwrap();
            assert_eq!(facts(&m), facts(&r), "seed {seed}, step {step}: {picks:?}");
            seen[usize::from(m.allowed())] += 1;
        }
        // both answers, many times each
        assert!(seen[0] > 30 && seen[1] > 30, "seed {seed}: {seen:?}");
    }
}

#[tokio::test]
async fn a_joint_peek_tells_whether_all_would_fit_and_consumes_nothing() {
    for (store, server) in stores() {
        let a = store.one("p-a", Quota::gcra(Rate::per_hour(5)));
        let b = store.one("p-b", Quota::sliding_window_counter(Rate::per_hour(3)));
        let joint = |cost_b| AllOrNothing::new().part(&a, "k", 2).part(&b, "k", cost_b);
        let d = joint(3).peek().await.unwrap();
        assert!(d.allowed() && d.atomic());
        assert_eq!(d.decisions()[0].remaining(), 5, "the state, nothing taken");
        let d = joint(4).peek().await.unwrap();
        assert!(d.denied());
        assert!(d.decisions()[0].allowed() && d.decisions()[1].denied());
        assert_eq!(left(&a, "k").await, [5]);
        assert_eq!(left(&b, "k").await, [3]);
        if let Some(server) = &server {
            assert_eq!(server.dbsize().await, 0, "a peek writes nothing");
        }
        assert!(joint(3).decide().await.unwrap().allowed());
        assert!(joint(1).peek().await.unwrap().denied());
        assert_eq!(left(&a, "k").await, [3]);
    }
}

#[tokio::test]
async fn a_flushed_script_is_loaded_again_and_parts_may_run_on_different_clocks() {
    let server = RedisServer::start();
    let store = Store::redis(&server);
    let clock = ManualClock::new(Duration::from_secs(1_000));
    // one part on Redis's clock, one on a manual clock, one on the caller's
    let on_redis = store.one("c-redis", Quota::sliding_window_counter(Rate::per_hour(3)));
    let manual = store.limiter(
        "c-manual",
        vec![Quota::fixed_window(Rate::per_hour(2))],
        Some(&clock),
    );
    let caller = match &store {
        Store::Redis(s) => RateLimiter::builder()
            .store(s.clone())
            .prefix("c-caller")
            .quota(Quota::gcra(Rate::per_hour(3)))
            .clock(tower_redis_ratelimit::clock::Clock::Caller)
            .build()
            .unwrap(),
        Store::Memory(_) => unreachable!(),
    };
    let parts = || [(&on_redis, "k", 1), (&manual, "k", 1), (&caller, "k", 1)];
    assert!(RateLimiter::check_all(parts()).await.unwrap().allowed());
    let mut conn = server.conn().await;
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(RateLimiter::check_all(parts()).await.unwrap().allowed());
    // the manual clock's window is full: nothing more anywhere
    let d = RateLimiter::check_all(parts()).await.unwrap();
    assert!(d.denied() && d.decisions()[1].denied());
    assert_eq!(left(&on_redis, "k").await, [1]);
    assert_eq!(left(&caller, "k").await, [1]);
    // the manual window ends in manual time alone
    clock.advance(Duration::from_secs(3_600));
    let d = RateLimiter::check_all(parts()).await.unwrap();
    assert!(d.allowed(), "{d:?}");
    assert_eq!(left(&manual, "k").await, [1]);
    assert_eq!(left(&on_redis, "k").await, [0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn joint_decisions_across_memory_shards_in_any_order_neither_deadlock_nor_overshoot() {
    let store = Store::Memory(MemoryStore::with_shards(4));
    let limiters: Arc<Vec<RateLimiter>> = Arc::new(
        (0..3)
            .map(|i| store.one(&format!("sh{i}"), Quota::fixed_window(Rate::per_hour(20))))
            .collect(),
    );
    let admitted = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..4_000u64)
        .map(|n| {
            let (limiters, admitted) = (limiters.clone(), admitted.clone());
            tokio::spawn(async move {
                // three parts over eight keys, in an order of their own
                let mut parts: Vec<(&RateLimiter, String, u64)> = (0..3u64)
                    .map(|i| {
                        (
                            &limiters[i as usize],
                            format!("k{}", (n * 7 + i * 3) % 8),
                            1,
                        )
                    })
                    .collect();
                parts.rotate_left((n % 3) as usize);
                let d = RateLimiter::check_all(parts).await.unwrap();
                if d.allowed() {
                    admitted.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let all = async {
        for t in tasks {
            t.await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(120), all)
        .await
        .expect("no deadlock");
    // every admitted decision took one unit of each limiter, on some key
    let mut used = 0;
    for l in limiters.iter() {
        for k in 0..8 {
            used += 20 - left(l, &format!("k{k}")).await[0];
        }
    }
    assert_eq!(used as usize, 3 * admitted.load(Ordering::Relaxed));
    assert!(admitted.load(Ordering::Relaxed) > 0);
}

#[tokio::test]
async fn a_limiter_with_runtime_limits_takes_part_with_the_limits_in_force() {
    for (store, _server) in stores() {
        let b = RateLimiter::builder()
            .prefix("rt")
            .quota(Quota::fixed_window(Rate::per_hour(2)).name("hour"))
            .runtime_limits();
        let runtime = match &store {
            Store::Memory(s) => b.store(s.clone()).build().unwrap(),
            Store::Redis(s) => b.store(s.clone()).build().unwrap(),
        };
        let other = store.one("rt-other", Quota::gcra(Rate::per_hour(10)));
        for _ in 0..2 {
            let d = RateLimiter::check_all([(&other, "k", 1), (&runtime, "k", 1)])
                .await
                .unwrap();
            assert!(d.allowed());
        }
        assert!(
            RateLimiter::check_all([(&other, "k", 1), (&runtime, "k", 1)])
                .await
                .unwrap()
                .denied()
        );
        runtime
            .limits()
            .unwrap()
            .set_quotas([Quota::fixed_window(Rate::per_hour(3)).name("hour")])
            .unwrap();
        let d = RateLimiter::check_all([(&other, "k", 1), (&runtime, "k", 1)])
            .await
            .unwrap();
        assert!(d.allowed(), "raised: admitted at once");
        assert_eq!(d.decisions()[1].limit(), 3);
        assert_eq!(left(&other, "k").await, [7]);
    }
}
