//! Local budgets for hot keys (`RateLimiterBuilder::local_budget`),
//! on the memory store and a private Redis, under a manual clock: exact
//! counts, no sleeps.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tower_redis_ratelimit::clock::ManualClock;
use tower_redis_ratelimit::strategy::Strategy;
use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimiter, RedisStore};

use crate::common::{GENEROUS, RedisServer};

/// Where the limiters of one test keep their state.
enum Store {
    Memory(MemoryStore),
    Redis(RedisServer),
}

impl Store {
    fn limiter(&self, quota: Quota, n: u64, clock: &ManualClock) -> RateLimiter {
        self.limiter_held(quota, n, Duration::from_secs(3_600), clock)
    }

    fn limiter_held(
        &self,
        quota: Quota,
        n: u64,
        hold: Duration,
        clock: &ManualClock,
    ) -> RateLimiter {
        let b = RateLimiter::builder()
            .prefix("hot")
            .quota(quota)
            .clock(clock.clone())
            .local_budget(n)
            .local_budget_hold(hold);
        match self {
            Store::Memory(m) => b.store(m.clone()),
            Store::Redis(r) => b.store(RedisStore::new(r.pool(4)).timeout(GENEROUS)),
        }
        .build()
        .unwrap()
    }
}

fn clock() -> ManualClock {
    ManualClock::new(Duration::from_secs(3_600))
}

/// `tasks` concurrent requests spread over `limiters`; how many were allowed.
async fn hammer(limiters: &[RateLimiter], tasks: usize) -> u64 {
    let allowed = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            let lim = limiters[i % limiters.len()].clone();
            let allowed = allowed.clone();
            tokio::spawn(async move {
                if lim.check("hot").await.unwrap().allowed() {
                    allowed.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for h in handles {
        h.await.unwrap();
    }
    allowed.load(Ordering::Relaxed)
}

/// Four instances on one store: within a window the store never admits more
/// than it counted; what the instances hold unspent (at most n - 1 each)
/// comes back on flush, after which exactly the limit was admitted.
async fn four_instances_admit_the_limit_once_flushed(store: Store) {
    for strategy in [
        Strategy::FixedWindow,
        Strategy::SlidingWindowLog,
        Strategy::SlidingWindowCounter,
        Strategy::TokenBucket,
        Strategy::Gcra,
    ] {
        for n in [1, 10, 100] {
            let clock = clock();
            let quota = Quota::new(strategy, Rate::per_hour(1_000)).name(format!("q{n}"));
            let limiters: Vec<_> = (0..4)
                .map(|_| store.limiter(quota.clone(), n, &clock))
                .collect();
            let first = hammer(&limiters, 3_000).await;
            assert!(first <= 1_000, "{strategy} n={n}: {first}");
            assert!(first + 4 * (n - 1) >= 1_000, "{strategy} n={n}: {first}");
            if n == 1 {
                assert_eq!(first, 1_000, "{strategy}: n = 1 is exact");
            }
            for l in &limiters {
                l.flush_local_budgets().await;
            }
            let second = hammer(&limiters[..1], 500).await;
            assert_eq!(first + second, 1_000, "{strategy} n={n}");
            for l in &limiters {
                l.reset("hot").await.unwrap();
            }
        }
    }
}

/// Unspent units come back, never above the limit, and a give-back that
/// arrives after the window rolled over changes nothing.
async fn give_back_returns_units_only_to_the_take_s_window(store: Store) {
    let clock = clock();
    let q = Quota::fixed_window(Rate::new(100, Duration::from_secs(10)));
    let a = store.limiter(q.clone(), 10, &clock);
    let b = store.limiter(q, 1, &clock);
    // a takes 10, spends 1; b sees the store: 90 left
    let d = a.check("k").await.unwrap();
    assert!(d.allowed());
    assert_eq!(d.remaining(), 99, "the store's 90 and a's 9 unspent");
    assert_eq!(b.peek("k").await.unwrap().remaining(), 90);
    a.flush_local_budgets().await;
    assert_eq!(b.peek("k").await.unwrap().remaining(), 99);
    // twice: nothing more (never above the limit)
    a.flush_local_budgets().await;
    assert_eq!(b.peek("k").await.unwrap().remaining(), 99);
    // a takes again, then the window rolls over; b starts a new one
    a.check("k").await.unwrap();
    assert_eq!(b.peek("k").await.unwrap().remaining(), 89);
    clock.advance(Duration::from_secs(10));
    assert_eq!(b.check("k").await.unwrap().remaining(), 99);
    a.flush_local_budgets().await;
    assert_eq!(
        b.peek("k").await.unwrap().remaining(),
        99,
        "a new window is not touched"
    );

    // GCRA: the unspent units come back while they are ahead of now
    let g = Quota::gcra(Rate::new(100, Duration::from_secs(10)));
    let a = store.limiter(g.clone(), 10, &clock);
    let b = store.limiter(g, 1, &clock);
    a.check("g").await.unwrap();
    assert_eq!(b.peek("g").await.unwrap().remaining(), 90);
    a.flush_local_budgets().await;
    assert_eq!(b.peek("g").await.unwrap().remaining(), 99);
    // taken, then the bucket refills fully: nothing to give back
    a.check("g").await.unwrap();
    clock.advance(Duration::from_secs(20));
    b.check_n("g", 100).await.unwrap();
    a.flush_local_budgets().await;
    assert_eq!(
        b.peek("g").await.unwrap().remaining(),
        0,
        "no phantom units"
    );

    // sliding log: exactly the take's entries go
    let l = Quota::sliding_window_log(Rate::new(100, Duration::from_secs(10)));
    let a = store.limiter(l.clone(), 10, &clock);
    let b = store.limiter(l, 1, &clock);
    b.check("l").await.unwrap();
    clock.advance(Duration::from_secs(1));
    a.check("l").await.unwrap();
    a.check("l").await.unwrap();
    assert_eq!(b.peek("l").await.unwrap().remaining(), 89);
    a.flush_local_budgets().await;
    assert_eq!(b.peek("l").await.unwrap().remaining(), 97);
    clock.advance(Duration::from_secs(9));
    assert_eq!(
        b.peek("l").await.unwrap().remaining(),
        98,
        "b's entry left, a's two stay"
    );
}

/// Across windows, four instances exceed the quota by at most 4 (n - 1):
/// a GCRA of 100 per 10 s over 60 s of steady overload.
async fn overshoot_stays_within_k_times_n_over_time(store: Store) {
    let clock = clock();
    let n = 20;
    let q = Quota::gcra(Rate::new(100, Duration::from_secs(10)));
    let limiters: Vec<_> = (0..4)
        .map(|_| store.limiter(q.clone(), n, &clock))
        .collect();
    let mut admitted = 0;
    for _ in 0..600 {
        admitted += hammer(&limiters, 40).await;
        clock.advance(Duration::from_millis(100));
    }
    // burst 100, plus 60 s at 10/s, plus what was held at the start
    let ideal = 100 + 600 - 10;
    assert!(admitted <= ideal + 4 * (n - 1), "{admitted}");
    assert!(admitted + 4 * n >= ideal, "{admitted}");
}

/// A bucket's budget is spent for its hold, even after the bucket has
/// refilled what the take drew (a nearly full bucket does so within `n`
/// intervals, often before the take's reply arrives on a loaded network):
/// no second take. Four instances admit at most the bucket's own bound
/// plus 4 (n - 1): in a flood on a bucket refilled while they held their
/// budgets (where that is reached), and over every span of a run that goes
/// from a full bucket to overload.
async fn a_bucket_s_budget_outlives_its_refill_within_the_bound(store: Store) {
    let clock = clock();
    // interval 1 ms, burst 1 000
    let g = Quota::gcra(Rate::new(1_000, Duration::from_secs(1)));
    let a = store.limiter(g.clone(), 100, &clock);
    let b = store.limiter(g, 1, &clock);
    assert!(a.check("g").await.unwrap().allowed());
    assert_eq!(b.peek("g").await.unwrap().remaining(), 900);
    clock.advance(Duration::from_millis(150));
    let full = b.peek("g").await.unwrap().remaining();
    assert!(full >= 999, "the take's 100 ms have drained: {full}");
    for _ in 0..99 {
        assert!(a.check("g").await.unwrap().allowed());
    }
    assert_eq!(
        b.peek("g").await.unwrap().remaining(),
        full,
        "the 99 held were spent without a second take"
    );

    for strategy in [Strategy::Gcra, Strategy::TokenBucket] {
        let clock = self::clock();
        let n = 20;
        let q = Quota::new(strategy, Rate::new(1_000, Duration::from_secs(1)));
        let limiters: Vec<_> = (0..4)
            .map(|_| store.limiter_held(q.clone(), n, Duration::from_millis(250), &clock))
            .collect();
        let slack = 4 * (n - 1);
        // the worst case: each instance takes a budget and spends 1, the
        // bucket refills, then a flood: the full bucket and the 4 (n - 1)
        // held, spent after the refill, which the bound counts (and no more)
        assert_eq!(hammer(&limiters, 4).await, 4);
        clock.advance(Duration::from_millis(100));
        let flood = hammer(&limiters, 2_000).await;
        assert!(
            flood > 1_000 && flood <= 1_000 + slack,
            "{strategy:?}: a flood on a full bucket admitted {flood}, bound 1000 + {slack}"
        );
        clock.advance(Duration::from_secs(10));
        for l in &limiters {
            l.flush_local_budgets().await;
        }
        // 12 requests per 10 ms against 10 a step: the burst drains in
        // about 500 steps, then overload
        let steps = 700;
        let mut admitted = vec![0u64; steps + 1];
        for step in 1..=steps {
            admitted[step] = admitted[step - 1] + hammer(&limiters, 12).await;
            clock.advance(Duration::from_millis(10));
        }
        // the steps i..=j span (j - i) * 10 ms: burst + 10 a step
        let mut closest = i64::MIN;
        for i in 1..=steps {
            for j in i..=steps {
                let got = admitted[j] - admitted[i - 1];
                let bound = 1_000 + 10 * (j - i) as u64;
                assert!(
                    got <= bound + slack,
                    "{strategy:?}: steps {i}..={j} admitted {got}, bound {bound} + {slack}"
                );
                closest = closest.max(got as i64 - bound as i64);
            }
        }
        eprintln!(
            "{strategy:?}: a flood after a refill admitted {flood}; a run {} (the most over \
             the bucket's bound in a span: {closest}; allowed {slack})",
            admitted[steps]
        );
        // the offered load exceeds the bucket: all of it is used, but for
        // what the instances held unspent at the end
        assert!(
            admitted[steps] >= 1_000 + 10 * (steps as u64 - 1) - 4 * n,
            "{strategy:?}: admitted only {}",
            admitted[steps]
        );
    }
}

#[test]
fn invalid_local_budget_configurations_name_the_field() {
    let b = || {
        RateLimiter::builder()
            .store(MemoryStore::new())
            .quota(Quota::fixed_window(Rate::per_second(10)))
    };
    let e = b().local_budget(0).build().unwrap_err();
    assert_eq!(e.field(), "local_budget");
    let e = b().local_budget(11).build().unwrap_err();
    assert!(e.to_string().contains("capacity 10"), "{e}");
    let e = b().local_budget_hold(Duration::ZERO).build().unwrap_err();
    assert_eq!(e.field(), "local_budget_hold");
    for s in [Strategy::Concurrency, Strategy::LeakyBucket] {
        let e = RateLimiter::builder()
            .store(MemoryStore::new())
            .quota(Quota::new(s, Rate::per_second(10)))
            .local_budget(2)
            .build()
            .unwrap_err();
        assert_eq!(e.field(), "local_budget");
        assert!(e.to_string().contains(s.as_str()), "{e}");
    }
    assert!(b().local_budget(10).build().is_ok());
}

/// A caller that gives up while its take is in flight (a timeout around
/// `check`, a client gone) does not lose the take: the budget is kept,
/// and the next request spends from it. Only the two requests' own units end
/// up counted once the rest is given back.
async fn a_caller_that_gives_up_does_not_lose_the_take(store: Store) {
    let clock = clock();
    let lim = store.limiter(Quota::fixed_window(Rate::per_hour(1_000)), 100, &clock);
    lim.peek("warm-up").await.unwrap();
    // polled once (the take starts; on Redis it cannot answer yet), then dropped
    let _ = tokio::time::timeout(Duration::ZERO, lim.check("hot")).await;
    let d = lim.check("hot").await.unwrap();
    assert!(d.allowed());
    lim.flush_local_budgets().await;
    assert_eq!(lim.peek("hot").await.unwrap().remaining(), 1_000 - 2);
}

/// While Redis is stalled, the requests waiting on a hot key's take answer
/// with the take's failure when it times out, instead of each trying again,
/// one store timeout after another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_on_a_stalled_take_answer_within_one_timeout() {
    const TIMEOUT: Duration = Duration::from_millis(300);
    let server = RedisServer::start();
    let proxy = common::StallProxy::start(server.port());
    let mut cfg = deadpool_redis::Config::from_url(proxy.url());
    cfg.pool = Some(deadpool_redis::PoolConfig::new(4));
    let pool = cfg
        .create_pool(Some(deadpool_redis::Runtime::Tokio1))
        .unwrap();
    let lim = RateLimiter::builder()
        .store(RedisStore::new(pool).timeout(TIMEOUT))
        .prefix("hot")
        .quota(Quota::gcra(Rate::per_hour(1_000_000)))
        .local_budget(100)
        .build()
        .unwrap();
    common::warm_up(&lim, "warm-up").await;
    proxy.stall();
    let tasks: Vec<_> = (0..30)
        .map(|_| {
            let lim = lim.clone();
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                let result = lim.check("hot").await;
                (started.elapsed(), result)
            })
        })
        .collect();
    for t in tasks {
        let (took, result) = t.await.unwrap();
        assert!(
            took < TIMEOUT + common::MARGIN,
            "a request on a stalled hot key took {took:?}"
        );
        assert!(result.is_err(), "{result:?}");
    }
    proxy.resume_all();
}

macro_rules! on_every_store {
    ($($t:ident)*) => {
        mod on_memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $t() {
                    super::$t(super::Store::Memory(tower_redis_ratelimit::MemoryStore::new())).await;
                }
            )*
        }
        mod on_redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $t() {
                    super::$t(super::Store::Redis(crate::common::RedisServer::start())).await;
                }
            )*
        }
    };
}

on_every_store! {
    four_instances_admit_the_limit_once_flushed
    give_back_returns_units_only_to_the_take_s_window
    overshoot_stays_within_k_times_n_over_time
    a_bucket_s_budget_outlives_its_refill_within_the_bound
    a_caller_that_gives_up_does_not_lose_the_take
}
