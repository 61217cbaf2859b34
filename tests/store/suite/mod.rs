//! One suite of store semantics, run on every store: strategies with exact
//! values under a manual clock, multi-quota atomicity, exactness under
//! concurrency from many limiter instances, TTLs and expiry.
//!
//! Each test is written once, as an async function over a [`Harness`] inside
//! [`store_suite!`], which also generates one `#[tokio::test]` per store: the
//! module `on_memory` ([`MemoryStore`](tower_redis_ratelimit::MemoryStore)),
//! `on_redis` (a private redis-server per test) and, with the `cluster` feature,
//! `on_cluster` (a private 3-master Redis Cluster). A test cannot be defined
//! without running on every store it applies to: defining it is listing it.
//! Tests under `redis_keys` check the stored Redis keys themselves (TTLs),
//! which the memory store does not have; its expiry is checked by
//! `all_keys_are_gone_once_their_windows_pass` (swept keys) and by
//! `tests/store/soak.rs`.

#![deny(dead_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod harness;
mod helpers;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tower_redis_ratelimit::clock::{Clock, ManualClock};
use tower_redis_ratelimit::error::StoreError;
use tower_redis_ratelimit::strategy::Strategy;
use tower_redis_ratelimit::{Quota, Rate, RateLimiter};

use crate::suite::harness::Harness;
use crate::suite::helpers::*;

/// Defines the suite's tests (async functions over a `&impl Harness`) and
/// one module of `#[tokio::test]`s per store, each test with a fresh harness.
macro_rules! store_suite {
    (
        every_store { $( $(#[$m1:meta])* async fn $t1:ident($h1:ident: &impl Harness) $b1:block )* }
        redis_keys { $( $(#[$m2:meta])* async fn $t2:ident($h2:ident: &impl Harness) $b2:block )* }
    ) => {
        $( $(#[$m1])* async fn $t1($h1: &impl Harness) $b1 )*
        $( $(#[$m2])* async fn $t2($h2: &impl Harness) $b2 )*

        store_suite!(@store on_memory, crate::suite::harness::MemoryHarness::new(); $($t1)*);
        store_suite!(@store on_redis, crate::suite::harness::RedisHarness::start(); $($t1)* $($t2)*);
        #[cfg(feature = "cluster")]
        store_suite!(@store on_cluster, crate::suite::harness::ClusterHarness::start(); $($t1)* $($t2)*);
    };
    (@store $store:ident, $harness:expr; $($t:ident)*) => {
        mod $store {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $t() {
                    let harness = $harness;
                    super::$t(&harness).await;
                }
            )*
        }
    };
}

store_suite! {
    // What every store does alike.
    every_store {
    async fn fixed_window_admits_limit_then_waits_for_the_window_end(h: &impl Harness) {
        let q = Quota::fixed_window(Rate::new(5, Duration::from_secs(10)));
        let (lim, clock) = manual(h, "fw", q);
        for i in 0..5 {
            allowed(&lim.check("k").await.unwrap(), 4 - i, ms(10_000));
        }
        denied(&lim.check("k").await.unwrap(), 0, Some(ms(10_000)));
        clock.advance(ms(3_500));
        let d = lim.check("k").await.unwrap();
        denied(&d, 0, Some(ms(6_500)));
        assert_eq!(d.reset_after(), ms(6_500));
        clock.advance(ms(6_500) - us(1));
        denied(&lim.check("k").await.unwrap(), 0, Some(us(1)));
        clock.advance(us(1));
        allowed(&lim.check("k").await.unwrap(), 4, ms(10_000));
        // a cost that can never fit: denied without reading the state (so
        // remaining 0), nothing consumed, no retry time
        denied(&lim.check_n("k", 6).await.unwrap(), 0, None);
        allowed(&lim.check_n("k", 4).await.unwrap(), 0, ms(10_000));
        // peek: cost 0 consumes nothing
        let p = lim.peek("other").await.unwrap();
        allowed(&p, 5, Duration::ZERO);
        allowed(&lim.peek("k").await.unwrap(), 0, ms(10_000));
    }

    async fn aligned_fixed_window_counts_in_windows_aligned_to_the_epoch(h: &impl Harness) {
        // a minute window, from :00 to :00 of the manual clock's time; the
        // clock at 59.999 s of a minute
        let minute = 60_000_000u64;
        let edge = Duration::from_micros((T0.as_micros() as u64 / minute + 1) * minute);
        let q = Quota::fixed_window(Rate::per_minute(5)).aligned();
        let clock = ManualClock::new(edge - ms(1));
        let lim = h.limiter("fwa", vec![q.clone()], clock.clone().into());
        allowed(&lim.check("k").await.unwrap(), 4, ms(1));
        allowed(&lim.check_n("k", 4).await.unwrap(), 0, ms(1));
        let d = lim.check("k").await.unwrap();
        denied(&d, 0, Some(ms(1)));
        assert_eq!(d.reset_after(), ms(1));
        clock.advance(ms(1) - us(1));
        denied(&lim.check("k").await.unwrap(), 0, Some(us(1)));
        // 60.000 s: a new window, whole
        clock.advance(us(1));
        allowed(&lim.check("k").await.unwrap(), 4, ms(60_000));
        // a cost that can never fit, a peek of a fresh key
        denied(&lim.check_n("k", 6).await.unwrap(), 0, None);
        allowed(&lim.peek("other").await.unwrap(), 5, Duration::ZERO);
        allowed(&lim.check_n("k", 4).await.unwrap(), 0, ms(60_000));
        // a key's first hit in the middle of a window gets what is left of it
        clock.advance(ms(30_000));
        denied(&lim.check("k").await.unwrap(), 0, Some(ms(30_000)));
        allowed(&lim.check("late").await.unwrap(), 4, ms(30_000));
        allowed(&lim.peek("late").await.unwrap(), 4, ms(30_000));
        // an unaligned window of the same rate keeps state of its own (the
        // same prefix: the key differs by its letter)
        let plain = h.limiter(
            "fwa",
            vec![Quota::fixed_window(Rate::per_minute(5))],
            clock.clone().into(),
        );
        allowed(&plain.check("k").await.unwrap(), 4, ms(60_000));
        assert_ne!(plain.storage_keys("k"), lim.storage_keys("k"));
        // a named aligned quota keeps its count when its count changes
        let named = |n: u64| {
            let q = Quota::fixed_window(Rate::per_minute(n)).name("m").aligned();
            h.limiter("fwa-named", vec![q], clock.clone().into())
        };
        allowed(&named(3).check_n("k", 2).await.unwrap(), 1, ms(30_000));
        allowed(&named(10).check("k").await.unwrap(), 7, ms(30_000));
        denied(&named(3).check("k").await.unwrap(), 0, Some(ms(30_000)));
        // with other quotas: all or nothing, the aligned one denies
        let both = h.limiter(
            "fwa-multi",
            vec![
                Quota::fixed_window(Rate::per_minute(2)).name("w").aligned(),
                Quota::gcra(Rate::per_minute(100)).name("g"),
            ],
            clock.clone().into(),
        );
        assert!(both.check_n("k", 2).await.unwrap().allowed());
        let d = both.check("k").await.unwrap();
        denied(&d, 0, Some(ms(30_000)));
        assert_eq!(both.peek("k").await.unwrap().quotas().nth(1).unwrap().remaining(), 98);
        // the next window on every key at once
        clock.advance(ms(30_000));
        allowed(&both.check("k").await.unwrap(), 1, ms(60_000));
        allowed(&lim.check("late").await.unwrap(), 4, ms(60_000));
    }

    async fn an_aligned_window_on_the_store_clock_ends_at_a_multiple_of_its_period(h: &impl Harness) {
        let period = Duration::from_secs(60);
        let lim = h.limiter(
            "fwa-clock",
            vec![Quota::fixed_window(Rate::new(3, period)).aligned()],
            Clock::Store,
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        let rest = period - Duration::from_micros((now.as_micros() % period.as_micros()) as u64);
        let d = lim.check("k").await.unwrap();
        assert!(d.allowed());
        // the rest of this minute (the store's clock is the system's, give or
        // take a second; a minute's end between the two readings wraps)
        let (a, b) = (d.reset_after().as_secs_f64(), rest.as_secs_f64());
        assert!((a - b).abs() < 1.0 || (a - b).abs() > 59.0, "{a} {b}");
        lim.check_n("k", 2).await.unwrap();
        let d = lim.check("k").await.unwrap();
        assert!(!d.allowed());
        assert_eq!(d.retry_after(), Some(d.reset_after()));
    }

    async fn an_aligned_window_is_exact_under_concurrency(h: &impl Harness) {
        // (a window of a year: no window ends during the test)
        let q = Quota::fixed_window(Rate::new(100, Duration::from_secs(365 * 86_400))).aligned();
        let n = admitted(h, "exact-aligned", vec![q.clone()], 8, 1000).await;
        assert_eq!(n, 100, "{}", h.name());
        let q = Quota::fixed_window(Rate::new(20, Duration::from_secs(365 * 86_400))).aligned();
        let per_key = admitted_per_key(h, "exact-keys-aligned", vec![q.clone()], (4, 256), 16, 1).await;
        assert_eq!(per_key, vec![20; 16], "{}", h.name());
        let quotas = vec![q.name("a"), Quota::gcra(Rate::per_hour(10_000)).name("b")];
        let n = admitted(h, "multi-exact-aligned", quotas, 4, 400).await;
        assert_eq!(n, 20, "{}", h.name());
    }

    async fn sliding_window_log_is_exact_over_any_window(h: &impl Harness) {
        let q = Quota::sliding_window_log(Rate::new(5, Duration::from_secs(10)));
        let (lim, clock) = manual(h, "swl", q);
        allowed(&lim.check_n("k", 2).await.unwrap(), 3, ms(10_000));
        clock.advance(ms(4_000));
        allowed(&lim.check("k").await.unwrap(), 2, ms(10_000));
        allowed(&lim.check_n("k", 2).await.unwrap(), 0, ms(10_000));
        // the two entries at t=0 leave the window at t=10s
        let d = lim.check("k").await.unwrap();
        denied(&d, 0, Some(ms(6_000)));
        assert_eq!(d.reset_after(), ms(10_000));
        clock.advance(ms(6_000) - us(1));
        denied(&lim.check("k").await.unwrap(), 0, Some(us(1)));
        // needing 3 free slots means waiting for the third-oldest entry (t=4s)
        denied(
            &lim.check_n("k", 3).await.unwrap(),
            0,
            Some(ms(4_000) + us(1)),
        );
        clock.advance(us(1));
        allowed(&lim.check("k").await.unwrap(), 1, ms(10_000));
        allowed(&lim.check("k").await.unwrap(), 0, ms(10_000));
        denied(&lim.check_n("k", 6).await.unwrap(), 0, None);
        allowed(&lim.peek("k").await.unwrap(), 0, ms(10_000));
    }

    async fn sliding_window_counter_weights_the_previous_window(h: &impl Harness) {
        let q = Quota::sliding_window_counter(Rate::new(5, Duration::from_secs(10)));
        let (lim, clock) = manual(h, "swc", q);
        // T0 is aligned to the 10 s windows
        for i in 0..5 {
            allowed(&lim.check("k").await.unwrap(), 4 - i, ms(20_000));
        }
        // the current window is full: wait for the next one, plus 1 µs for the
        // previous window's weight to drop below 5
        denied(&lim.check("k").await.unwrap(), 0, Some(ms(10_000) + us(1)));
        clock.advance(ms(10_000));
        denied(&lim.check("k").await.unwrap(), 0, Some(us(1)));
        clock.advance(ms(2_000));
        // 2 s into the window: estimate = floor(5 * 0.8) = 4
        allowed(&lim.check("k").await.unwrap(), 0, ms(18_000));
        // next slot once floor(5 * (1 - e/10s)) <= 3, i.e. e > 2 s
        denied(&lim.check("k").await.unwrap(), 0, Some(us(1)));
        clock.advance(ms(2_000));
        allowed(&lim.check("k").await.unwrap(), 0, ms(16_000));
        denied(&lim.check_n("k", 6).await.unwrap(), 0, None);
        // two windows later everything is forgotten
        clock.advance(ms(20_000));
        allowed(&lim.peek("k").await.unwrap(), 5, Duration::ZERO);
    }

    async fn token_bucket_refills_one_token_per_interval(h: &impl Harness) {
        // 5 per 10 s: one token every 2 s, bucket of 5
        let q = Quota::token_bucket(Rate::new(5, Duration::from_secs(10)));
        let (lim, clock) = manual(h, "tb", q);
        for i in 0..5 {
            allowed(&lim.check("k").await.unwrap(), 4 - i, ms(2_000 * (i + 1)));
        }
        denied(&lim.check("k").await.unwrap(), 0, Some(ms(2_000)));
        clock.advance(ms(1_500));
        let d = lim.check("k").await.unwrap();
        denied(&d, 0, Some(ms(500)));
        assert_eq!(d.reset_after(), ms(8_500));
        clock.advance(ms(500));
        allowed(&lim.check("k").await.unwrap(), 0, ms(10_000));
        clock.advance(ms(5_000)); // t = 7 s: two tokens since t = 2 s, next at 8 s
        denied(&lim.check_n("k", 3).await.unwrap(), 2, Some(ms(1_000)));
        allowed(&lim.check_n("k", 2).await.unwrap(), 0, ms(9_000));
        denied(&lim.check_n("k", 6).await.unwrap(), 0, None);
        clock.advance(ms(60_000));
        allowed(&lim.peek("k").await.unwrap(), 5, Duration::ZERO);
    }

    async fn gcra_spaces_requests_after_the_burst(h: &impl Harness) {
        let q = Quota::gcra(Rate::new(5, Duration::from_secs(10)));
        let (lim, clock) = manual(h, "gcra", q);
        for i in 0..5 {
            allowed(&lim.check("k").await.unwrap(), 4 - i, ms(2_000 * (i + 1)));
        }
        denied(&lim.check("k").await.unwrap(), 0, Some(ms(2_000)));
        clock.advance(ms(2_000) - us(1));
        denied(&lim.check("k").await.unwrap(), 0, Some(us(1)));
        clock.advance(us(1));
        allowed(&lim.check("k").await.unwrap(), 0, ms(10_000));
        denied(&lim.check_n("k", 6).await.unwrap(), 0, None);

        // burst 1: strictly one request per interval
        let q = Quota::gcra(Rate::new(5, Duration::from_secs(10))).burst(1);
        let (lim, clock) = manual(h, "gcra1", q);
        allowed(&lim.check("k").await.unwrap(), 0, ms(2_000));
        denied(&lim.check("k").await.unwrap(), 0, Some(ms(2_000)));
        clock.advance(ms(1_000));
        denied(&lim.check("k").await.unwrap(), 0, Some(ms(1_000)));
        clock.advance(ms(1_000));
        allowed(&lim.check("k").await.unwrap(), 0, ms(2_000));
        let d = lim.check_n("k", 2).await.unwrap();
        denied(&d, 0, None);
        assert_eq!(d.limit(), 1);
    }

    async fn leaky_bucket_queues_with_delays_and_denies_when_full(h: &impl Harness) {
        // drains one request every 2 s; three may wait
        let q = Quota::leaky_bucket(Rate::new(5, Duration::from_secs(10))).burst(3);
        let (lim, clock) = manual(h, "lb", q);
        for i in 0..3u64 {
            let d = lim.check("k").await.unwrap();
            allowed(&d, 2 - i, ms(2_000 * (i + 1)));
            let want = (i > 0).then(|| ms(2_000 * i));
            assert_eq!(d.delay(), want, "{d:?}");
        }
        denied(&lim.check("k").await.unwrap(), 0, Some(ms(2_000)));
        clock.advance(ms(2_000));
        let d = lim.check("k").await.unwrap();
        allowed(&d, 0, ms(6_000));
        assert_eq!(d.delay(), Some(ms(4_000)));
        denied(&lim.check_n("k", 4).await.unwrap(), 0, None);
    }

    async fn concurrency_holds_leases_until_released_or_expired(h: &impl Harness) {
        let q = Quota::concurrency(2).lease_timeout(Duration::from_secs(30));
        let (lim, clock) = manual(h, "conc", q);
        let a = lim.check("k").await.unwrap();
        allowed(&a, 1, ms(30_000));
        clock.advance(ms(1_000));
        let b = lim.check("k").await.unwrap();
        allowed(&b, 0, ms(30_000));
        // the first lease expires 29 s from now
        let d = lim.check("k").await.unwrap();
        denied(&d, 0, Some(ms(29_000)));
        assert!(d.lease().is_none());
        lim.release(a.lease().as_ref().unwrap()).await.unwrap();
        lim.release(a.lease().as_ref().unwrap()).await.unwrap(); // twice is harmless
        let c = lim.check("k").await.unwrap();
        allowed(&c, 0, ms(30_000));
        assert_ne!(
            c.lease().as_ref().unwrap().id(),
            b.lease().as_ref().unwrap().id()
        );
        // leases of a crashed holder expire after the timeout
        clock.advance(ms(30_000));
        allowed(&lim.check_n("k", 2).await.unwrap(), 0, ms(30_000));
        denied(&lim.check_n("k", 3).await.unwrap(), 0, None);
        // a peek takes no lease
        assert!(lim.peek("k").await.unwrap().lease().is_none());
    }

    async fn a_clock_going_backwards_never_admits_more(h: &impl Harness) {
        for q in [
            Quota::fixed_window(Rate::per_second(3)),
            Quota::sliding_window_log(Rate::per_second(3)),
            Quota::sliding_window_counter(Rate::per_second(3)),
            Quota::token_bucket(Rate::per_second(3)),
            Quota::gcra(Rate::per_second(3)),
            Quota::leaky_bucket(Rate::per_second(3)),
            Quota::concurrency(3),
        ] {
            let (lim, clock) = manual(h, "back", q.clone());
            clock.advance(ms(500));
            for _ in 0..3 {
                assert!(lim.check("k").await.unwrap().allowed(), "{q:?}");
            }
            clock.set(T0);
            let d = lim.check("k").await.unwrap();
            assert!(!d.allowed(), "{}: {q:?}: {d:?}", h.name());
        }
    }

    async fn multi_quota_is_all_or_nothing(h: &impl Harness) {
        let clock = ManualClock::new(Duration::from_secs(3_600));
        let lim = h.limiter(
            "multi",
            vec![
                Quota::fixed_window(Rate::per_minute(3)).name("minute"),
                Quota::fixed_window(Rate::per_hour(5)).name("hour"),
                Quota::concurrency(10).name("inflight"),
            ],
            clock.clone().into(),
        );
        let mut leases = Vec::new();
        for i in 0..3 {
            let d = lim.check("u").await.unwrap();
            assert!(d.allowed());
            assert_eq!(d.quota().as_ref(), "minute");
            assert_eq!(d.remaining(), 2 - i);
            assert_eq!(d.quotas().len(), 3);
            leases.push(d.lease().cloned().unwrap());
        }
        let d = lim.check("u").await.unwrap();
        assert!(!d.allowed());
        assert_eq!(d.quota().as_ref(), "minute");
        assert_eq!(d.retry_after(), Some(Duration::from_secs(60)));
        // the hour quota and the lease set were not touched by the denial
        assert_eq!(d.quotas().nth(1).unwrap().remaining(), 2);
        assert!(d.quotas().nth(1).unwrap().allowed());
        assert_eq!(d.quotas().nth(2).unwrap().remaining(), 7);
        clock.advance(Duration::from_secs(60));
        // cost 3 fits the minute but not the hour: nothing is consumed anywhere
        let d = lim.check_n("u", 3).await.unwrap();
        assert!(!d.allowed());
        assert_eq!(d.quota().as_ref(), "hour");
        assert_eq!(d.retry_after(), Some(Duration::from_secs(3_540)));
        assert_eq!(d.quotas().next().unwrap().remaining(), 3);
        let d = lim.check_n("u", 2).await.unwrap();
        assert!(d.allowed());
        assert_eq!(d.quota().as_ref(), "hour");
        assert_eq!(d.remaining(), 0);
        for l in &leases {
            lim.release(l).await.unwrap();
        }
        lim.reset("u").await.unwrap();
        assert_eq!(lim.peek("u").await.unwrap().remaining(), 3);
    }

    async fn a_shadow_quota_never_denies_and_consumes_only_what_it_would_allow(h: &impl Harness) {
        let clock = ManualClock::new(T0);
        let quotas = |shadow: bool| {
            vec![
                Quota::fixed_window(Rate::per_minute(5)).name("minute"),
                Quota::fixed_window(Rate::per_minute(2)).name("tight").shadow(shadow),
            ]
        };
        let lim = h.limiter("shadow", quotas(true), clock.clone().into());
        // (remaining and allowed of minute, then of tight, and shadow_denied)
        let state = |d: &tower_redis_ratelimit::Decision| {
            let q: Vec<_> = d.quotas().collect();
            assert!(!q[0].is_shadow() && q[1].is_shadow());
            (q[0].remaining(), q[0].allowed(), q[1].remaining(), q[1].allowed(), d.shadow_denied())
        };
        for (cost, minute, tight, shadow_denied) in [(1, 4, 1, false), (1, 3, 0, false), (1, 2, 0, true), (2, 0, 0, true)] {
            let d = lim.check_n("k", cost).await.unwrap();
            assert!(d.allowed(), "cost {cost}");
            // the binding quota is the enforced one, though tight has fewer left
            assert_eq!((d.quota().as_str(), d.remaining()), ("minute", minute));
            assert_eq!(state(&d), (minute, true, tight, tight > 0 || !shadow_denied, shadow_denied));
            if shadow_denied {
                let t = d.quota_named("tight").unwrap();
                assert_eq!(t.retry_after(), Some(ms(60_000)));
            }
        }
        // the enforced quota denies: nothing consumed, no shadow denial reported
        let d = lim.check("k").await.unwrap();
        assert!(d.denied() && !d.shadow_denied());
        assert_eq!((d.quota().as_str(), d.retry_after()), ("minute", Some(ms(60_000))));
        assert_eq!(state(&d), (0, false, 0, false, false));
        clock.advance(ms(30_000));
        assert_eq!(state(&lim.peek("k").await.unwrap()), (0, true, 0, true, false));
        // a cost above the shadow quota's capacity: allowed, the shadow quota untouched
        let d = lim.check_n("j", 5).await.unwrap();
        assert!(d.allowed() && d.shadow_denied());
        assert_eq!(state(&d), (0, true, 2, false, true));
        assert_eq!(d.quota_named("tight").unwrap().retry_after(), None);
        // denied by the enforced quota: the shadow quota, which would allow, is not consumed
        let d = lim.check("j").await.unwrap();
        assert!(d.denied());
        assert_eq!(state(&d), (0, false, 2, true, false));
        assert_eq!(state(&lim.peek("j").await.unwrap()), (0, true, 2, true, false));
        // a shadow quota that allows is consumed
        assert_eq!(state(&lim.check_n("m", 2).await.unwrap()), (3, true, 0, true, false));
        assert_eq!(state(&lim.check("m").await.unwrap()), (2, true, 0, false, true));
        // turning shadow mode off (same quotas, same names) keeps the state
        let enforced = h.limiter("shadow", quotas(false), clock.clone().into());
        assert_eq!(enforced.storage_keys("m"), lim.storage_keys("m"));
        let d = enforced.check("m").await.unwrap();
        assert!(d.denied() && !d.shadow_denied());
        assert_eq!((d.quota().as_str(), d.retry_after()), ("tight", Some(ms(60_000))));
        assert_eq!(state_plain(&d), (2, true, 0, false));
        let d = enforced.check("j").await.unwrap();
        assert!(d.denied());
        assert_eq!(state_plain(&d), (0, false, 2, true));
    }

    async fn a_limiter_of_shadow_quotas_only_always_allows(h: &impl Harness) {
        let clock = ManualClock::new(T0);
        let one = |shadow: bool| {
            vec![Quota::fixed_window(Rate::per_minute(1)).name("one").shadow(shadow)]
        };
        let lim = h.limiter("shadow1", one(true), clock.clone().into());
        let d = lim.check("k").await.unwrap();
        assert!(d.allowed() && !d.shadow_denied());
        assert_eq!(d.remaining(), 0);
        for cost in [1, 5] {
            let d = lim.check_n("k", cost).await.unwrap();
            assert!(d.allowed() && d.shadow_denied(), "cost {cost}");
            assert_eq!((d.retry_after(), d.delay()), (None, None));
            let q = d.quotas().next().unwrap();
            assert!(!q.allowed() && q.is_shadow());
        }
        // two shadow quotas: each consumed iff it would allow
        let two = h.limiter(
            "shadow2",
            vec![
                Quota::fixed_window(Rate::per_minute(1)).name("one").shadow(true),
                Quota::gcra(Rate::per_minute(3)).name("three").shadow(true),
            ],
            clock.clone().into(),
        );
        for (one, three) in [(0, 2), (0, 1), (0, 0)] {
            let d = two.check("k").await.unwrap();
            assert!(d.allowed());
            let q: Vec<_> = d.quotas().map(|q| q.remaining()).collect();
            assert_eq!(q, [one, three]);
        }
        let d = two.check("k").await.unwrap();
        assert!(d.allowed() && d.shadow_denied());
        assert!(d.quotas().all(|q| !q.allowed()));
        // enforced again: the state counted in shadow mode denies
        let enforced = h.limiter("shadow1", one(false), clock.clone().into());
        denied(&enforced.check("k").await.unwrap(), 0, Some(ms(60_000)));
    }

    async fn exactly_the_limit_is_admitted_under_concurrency_from_many_instances(h: &impl Harness) {
        for strategy in Strategy::ALL {
            let prefix = format!("exact-{}", strategy.as_str());
            let q = quota(strategy, 100, Duration::from_secs(3600));
            let n = admitted(h, &prefix, vec![q], 8, 1000).await;
            // Every strategy is exact here: a burst within one window. The sliding
            // window counter's error bound (at most 2n per sliding window) only
            // shows across an aligned-window boundary, and even then it never
            // exceeds n within one aligned window.
            assert_eq!(n, 100, "{}: {strategy}", h.name());
        }
    }

    async fn four_instances_of_256_tasks_admit_exactly_the_limit_of_every_key(h: &impl Harness) {
        // On Redis most of these decisions go out batched, several per
        // script call (tests/store/batching.rs counts the calls); each key
        // still admits exactly its limit.
        for strategy in Strategy::ALL {
            let prefix = format!("exact-keys-{}", strategy.as_str());
            let q = quota(strategy, 20, Duration::from_secs(3600));
            let per_key = admitted_per_key(h, &prefix, vec![q], (4, 256), 16, 1).await;
            assert_eq!(per_key, vec![20; 16], "{}: {strategy}", h.name());
        }
    }

    async fn a_multi_quota_limiter_is_exact_under_concurrency(h: &impl Harness) {
        for strategy in Strategy::ALL {
            // a second quota: all of one key's state is touched by one call (on a
            // cluster, a CROSSSLOT error would show), and it is consumed exactly as often
            let quotas = vec![
                quota(strategy, 100, Duration::from_secs(3600)).name("a"),
                Quota::fixed_window(Rate::per_hour(10_000)).name("b"),
            ];
            let prefix = format!("multi-exact-{}", strategy.as_str());
            let n = admitted(h, &prefix, quotas.clone(), 4, 400).await;
            assert_eq!(n, 100, "{}: {strategy}", h.name());
            let lim = h.limiter(&prefix, quotas, Clock::Store);
            let d = lim.peek("hot-key").await.unwrap();
            assert_eq!(
                d.quotas().nth(1).unwrap().remaining(),
                10_000 - 100,
                "{}: {strategy}",
                h.name()
            );
        }
    }

    async fn concurrency_never_exceeds_its_limit_in_flight(h: &impl Harness) {
        let limiters: Vec<RateLimiter> = (0..8)
            .map(|_| h.limiter("inflight", vec![Quota::concurrency(10)], Clock::Store))
            .collect();
        let in_flight = Arc::new(AtomicU64::new(0));
        let peak = Arc::new(AtomicU64::new(0));
        let served = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for i in 0..400 {
            let lim = limiters[i % 8].clone();
            let (in_flight, peak, served) = (in_flight.clone(), peak.clone(), served.clone());
            tasks.push(tokio::spawn(async move {
                let d = lim.check("worker").await.unwrap();
                if let Some(lease) = d.lease() {
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    served.fetch_add(1, Ordering::SeqCst);
                    lim.release(lease).await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert!(peak.load(Ordering::SeqCst) <= 10);
        assert!(served.load(Ordering::SeqCst) >= 10);
        // every lease was released: the key is gone
        assert_eq!(h.key_count("inflight").await, 0, "{}", h.name());
    }

    async fn all_keys_are_gone_once_their_windows_pass(h: &impl Harness) {
        let period = Duration::from_millis(200);
        for strategy in Strategy::ALL {
            let lim = h.limiter("gone", vec![quota(strategy, 3, period)], Clock::Store);
            for k in 0..20 {
                lim.check_n(format!("k{k}"), 2).await.unwrap();
            }
        }
        assert!(h.key_count("gone").await > 0);
        // Keys expire (at most two 200 ms windows); poll against a deadline.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let left = h.key_count("gone").await;
            if left == 0 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}: {left} keys left",
                h.name()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn fixed_window_on_the_store_clock_starts_at_the_first_hit(h: &impl Harness) {
        let period = Duration::from_secs(60);
        let single = h.limiter(
            "fwclock",
            vec![Quota::fixed_window(Rate::new(3, period))],
            Clock::Store,
        );
        let multi = h.limiter(
            "fwclock-multi",
            vec![
                Quota::fixed_window(Rate::new(3, period)).name("a"),
                Quota::fixed_window(Rate::new(100, period)).name("b"),
            ],
            Clock::Store,
        );
        for lim in [single, multi] {
            assert_eq!(lim.peek("k").await.unwrap().reset_after(), Duration::ZERO);
            for left in [2, 1, 0] {
                let d = lim.check("k").await.unwrap();
                assert!(d.allowed());
                assert_eq!(d.remaining(), left);
                assert!(d.reset_after() <= period && d.reset_after() > period - Duration::from_secs(5));
            }
            let d = lim.check("k").await.unwrap();
            assert!(!d.allowed());
            assert_eq!(d.remaining(), 0);
            assert_eq!(d.retry_after(), Some(d.reset_after()));
            assert!(d.reset_after() <= period && d.reset_after() > period - Duration::from_secs(5));
            // the denial consumed nothing, and cost above the limit never fits
            let d = lim.check_n("k", 4).await.unwrap();
            assert_eq!((d.allowed(), d.retry_after()), (false, None));
            assert_eq!(lim.peek("k").await.unwrap().remaining(), 0);
            // on Redis, the window is the key's TTL and the count is a plain counter
            let mut get = redis::cmd("GET");
            get.arg(&lim.storage_keys("k")[0]);
            if let Some(count) = h.redis::<u64>(get).await {
                assert_eq!(count, 3, "{}", h.name());
            }
        }
    }

    /// A manual clock at 0 or 1 µs (or very late) is a manual time like any other,
    /// on every strategy and on several quotas at once: the decisions are those
    /// of the same calls at T0 (shifted to keep the aligned windows' phase).
    async fn a_manual_clock_at_zero_or_far_ahead_is_manual_time(h: &impl Harness) {
        let period = Duration::from_secs(10);
        let mut configs: Vec<(String, Vec<Quota>)> = Strategy::ALL
            .iter()
            .map(|s| (s.as_str().to_owned(), vec![quota(*s, 2, period)]))
            .collect();
        configs.push((
            "multi".to_owned(),
            vec![
                Quota::fixed_window(Rate::new(2, period)).name("a"),
                Quota::gcra(Rate::new(3, period)).name("b"),
            ],
        ));
        configs.push((
            "fw-multi".to_owned(),
            vec![
                Quota::fixed_window(Rate::new(2, period)).name("a"),
                Quota::fixed_window(Rate::new(3, period)).name("b"),
            ],
        ));
        let late = ManualClock::MAX - Duration::from_secs(3_600);
        for start in [Duration::ZERO, us(1), us(1 << 52), late] {
            for (name, quotas) in &configs {
                let phase = us((start.as_micros() % period.as_micros()) as u64);
                let want = clock_script(
                    h,
                    &format!("clk-ref-{name}-{}", start.as_micros()),
                    quotas.clone(),
                    T0 + phase,
                )
                .await;
                let got = clock_script(
                    h,
                    &format!("clk-{name}-{}", start.as_micros()),
                    quotas.clone(),
                    start,
                )
                .await;
                assert_eq!(got, want, "{}: {name} starting at {start:?}", h.name());
            }
        }
    }

    // Issue 12: penalty box, admin API, settling after the response.
    async fn block_for_keeps_a_denied_key_denied_until_the_block_ends(h: &impl Harness) {
        let clock = ManualClock::new(T0);
        let lim = h
            .builder("pbox")
            .quota(Quota::gcra(Rate::per_second(2)))
            .block_for(ms(10_000))
            .clock(clock.clone())
            .build()
            .unwrap();
        assert!(lim.check("k").await.unwrap().allowed());
        assert!(lim.check("k").await.unwrap().allowed());
        let d = lim.check("k").await.unwrap();
        assert!(!d.allowed());
        assert_eq!(d.retry_after(), Some(ms(10_000)));
        // refilled long ago, still blocked: Retry-After is the block's end
        clock.advance(ms(4_000));
        let d = lim.check("k").await.unwrap();
        assert!(!d.allowed());
        assert_eq!(d.retry_after(), Some(ms(6_000)));
        clock.advance(ms(6_000) - us(1));
        assert!(!lim.check("k").await.unwrap().allowed());
        clock.advance(us(1));
        assert!(lim.check("k").await.unwrap().allowed());
        // another key was never blocked
        assert!(lim.check("other").await.unwrap().allowed());
    }

    async fn admin_blocks_and_unblocks_a_key_and_get_consumes_nothing(h: &impl Harness) {
        let clock = ManualClock::new(T0);
        let lim = h
            .builder("admin")
            .quota(Quota::fixed_window(Rate::new(5, ms(10_000))))
            .blocking()
            .clock(clock.clone())
            .build()
            .unwrap();
        allowed(&lim.check("cust").await.unwrap(), 4, ms(10_000));
        for _ in 0..3 {
            let g = lim.get("cust").await.unwrap();
            assert_eq!(g.remaining(), 4);
        }
        lim.block("cust", ms(30_000)).await.unwrap();
        let d = lim.check("cust").await.unwrap();
        assert!(!d.allowed());
        assert_eq!(d.retry_after(), Some(ms(30_000)));
        let g = lim.get("cust").await.unwrap();
        assert!(!g.allowed());
        assert_eq!(g.retry_after(), Some(ms(30_000)));
        lim.unblock("cust").await.unwrap();
        // nothing was consumed while blocked; denials set no block (blocking() alone)
        allowed(&lim.check("cust").await.unwrap(), 3, ms(10_000));
        for _ in 0..3 {
            lim.check("cust").await.unwrap();
        }
        assert!(!lim.check("cust").await.unwrap().allowed());
        clock.advance(ms(10_000));
        assert!(lim.check("cust").await.unwrap().allowed());
        // a limiter without blocking refuses admin blocks
        let plain = h.limiter("admin2", vec![Quota::gcra(Rate::per_second(1))], clock.clone().into());
        assert!(plain.block("cust", ms(1_000)).await.is_err());
    }

    async fn get_is_allowed_at_the_limit_and_denied_in_debt_or_blocked(h: &impl Harness) {
        for (i, s) in Strategy::ALL.into_iter().enumerate() {
            let (lim, _clock) = manual(h, &format!("getdebt{i}"), quota(s, 3, ms(60_000)));
            let mut leases = Vec::new();
            for _ in 0..3 {
                let d = lim.check("u").await.unwrap();
                assert!(d.allowed(), "{s}");
                leases.extend(d.lease().cloned());
            }
            assert!(!lim.check("u").await.unwrap().allowed(), "{s}");
            // exactly nothing left: a cost of 0 still fits
            let g = lim.get("u").await.unwrap();
            assert!(g.allowed(), "{s}: {g:?}");
            assert_eq!(g.remaining(), 0, "{s}");
            if s == Strategy::Concurrency {
                continue; // (no debt: the lease is the cost)
            }
            // in debt: even a cost of 0 does not fit until it is repaid
            lim.penalize("u", 5).await.unwrap();
            let g = lim.get("u").await.unwrap();
            assert!(!g.allowed(), "{s}: {g:?}");
            assert_eq!(g.remaining(), 0, "{s}");
            assert!(g.retry_after().is_some_and(|r| !r.is_zero()), "{s}: {g:?}");
        }
        // blocked: denied until the block's end
        let clock = ManualClock::new(T0);
        let lim = h
            .builder("getblocked")
            .quota(Quota::gcra(Rate::new(5, ms(10_000))))
            .blocking()
            .clock(clock.clone())
            .build()
            .unwrap();
        lim.block("u", ms(5_000)).await.unwrap();
        let g = lim.get("u").await.unwrap();
        assert!(!g.allowed());
        assert_eq!((g.remaining(), g.retry_after()), (0, Some(ms(5_000))));
    }

    async fn a_block_past_the_maximum_is_an_error_and_changes_nothing(h: &impl Harness) {
        let clock = ManualClock::new(T0);
        let lim = h
            .builder("maxblock")
            .quota(Quota::gcra(Rate::new(5, ms(10_000))))
            .blocking()
            .clock(clock.clone())
            .build()
            .unwrap();
        const MAX: Duration = RateLimiter::MAX_BLOCK;
        assert_eq!(MAX, Duration::from_secs(366 * 86_400));
        // at the maximum: applied in full
        lim.block("at", MAX).await.unwrap();
        assert_eq!(lim.check("at").await.unwrap().retry_after(), Some(MAX));
        // past it: an error naming the maximum, nothing changed
        for asked in [MAX + us(1), Duration::from_secs(99_999_999_999), Duration::MAX] {
            let e = lim.block("past", asked).await.unwrap_err();
            assert!(matches!(e, StoreError::Invalid(_)), "{e:?}");
            assert!(e.to_string().contains("31622400 s (366 days)"), "{e}");
            assert!(lim.check("past").await.unwrap().allowed(), "{asked:?}");
            // and a block in place is kept as it was
            let e = lim.block("at", asked).await.unwrap_err();
            assert!(matches!(e, StoreError::Invalid(_)), "{e:?}");
            assert_eq!(lim.check("at").await.unwrap().retry_after(), Some(MAX));
        }
        // a duration under a microsecond blocks for one; zero lifts
        lim.block("tiny", Duration::from_nanos(1)).await.unwrap();
        assert_eq!(lim.check("tiny").await.unwrap().retry_after(), Some(us(1)));
        lim.block("at", Duration::ZERO).await.unwrap();
        assert!(lim.check("at").await.unwrap().allowed());
    }

    async fn a_fixed_window_refunded_to_zero_is_gone_and_admits_no_more_than_its_limit(h: &impl Harness) {
        // 3 per minute
        let (lim, clock) = manual(h, "refund0", Quota::fixed_window(Rate::new(3, ms(60_000))));
        let r = lim.reserve_n("u", 1).await.unwrap();
        assert_eq!(r.decision().reset_after(), ms(60_000));
        lim.settle(&r, 0).await.unwrap();
        // the window's count went back to 0: the window is gone
        assert_eq!(h.key_count("refund0").await, 0, "a window refunded to 0 is deleted");
        // 50 s later a request opens a new window, of its own minute
        clock.advance(ms(50_000));
        for left in [2, 1, 0] {
            allowed(&lim.check("u").await.unwrap(), left, ms(60_000));
        }
        assert!(!lim.check("u").await.unwrap().allowed());
        // the old window's end frees nothing: 3 in any window, never more
        clock.advance(ms(10_000));
        let d = lim.check("u").await.unwrap();
        assert!(!d.allowed());
        assert_eq!(d.retry_after(), Some(ms(50_000)));
        clock.advance(ms(50_000));
        assert!(lim.check("u").await.unwrap().allowed());
        // refunds racing checks: never more than 3 counted at once
        let (lim, _clock) = manual(h, "refund0-race", Quota::fixed_window(Rate::new(3, ms(60_000))));
        let mut tasks = Vec::new();
        for j in 0..40 {
            let lim = lim.clone();
            tasks.push(tokio::spawn(async move {
                let r = lim.reserve_n("u", 1).await.unwrap();
                let ok = r.decision().allowed();
                if ok && j % 2 == 0 {
                    lim.settle(&r, 0).await.unwrap(); // refunded
                }
                ok && j % 2 == 1
            }));
        }
        let mut kept = 0;
        for t in tasks {
            kept += u64::from(t.await.unwrap());
        }
        assert!(kept <= 3, "{kept}");
        assert_eq!(lim.get("u").await.unwrap().remaining(), 3 - kept);
    }

    async fn penalize_and_reward_move_remaining_on_every_adjustable_strategy(h: &impl Harness) {
        for (i, s) in [
            Strategy::FixedWindow,
            Strategy::SlidingWindowLog,
            Strategy::SlidingWindowCounter,
            Strategy::TokenBucket,
            Strategy::Gcra,
        ]
        .into_iter()
        .enumerate()
        {
            let (lim, _clock) = manual(h, &format!("adj{i}"), quota(s, 10, ms(10_000)));
            assert_eq!(lim.check("u").await.unwrap().remaining(), 9, "{s}");
            lim.penalize("u", 5).await.unwrap();
            assert_eq!(lim.get("u").await.unwrap().remaining(), 4, "{s}");
            lim.reward("u", 3).await.unwrap();
            assert_eq!(lim.get("u").await.unwrap().remaining(), 7, "{s}");
            lim.reward("u", 100).await.unwrap();
            assert_eq!(lim.get("u").await.unwrap().remaining(), 10, "{s}: never above the limit");
            lim.penalize("u", 25).await.unwrap();
            let d = lim.check("u").await.unwrap();
            assert!(!d.allowed(), "{s}");
            assert_eq!(d.remaining(), 0, "{s}");
        }
    }

    /// A leaky bucket takes a charge as a debt (`penalize`, a settle's
    /// excess): the end of its queue is pushed later, past the burst, so
    /// the key is denied until the debt has drained and later requests
    /// queue behind it; the slots already promised do not move. Nothing is
    /// ever given back (`reward`, a settle below the estimate,
    /// `set_remaining`): a later request would jump ahead of them.
    async fn a_leaky_bucket_is_charged_past_its_queue_and_never_given_back(h: &impl Harness) {
        // drains one request every 2 s; three may wait
        let q = Quota::leaky_bucket(Rate::new(5, Duration::from_secs(10))).burst(3);
        let (lim, clock) = manual(h, "lbdebt", q);
        let a = lim.check("u").await.unwrap();
        allowed(&a, 2, ms(2_000));
        let b = lim.check("u").await.unwrap();
        allowed(&b, 1, ms(4_000));
        assert_eq!(b.delay(), Some(ms(2_000)));
        // 4 units charged: the queue ends 12 s from now, 6 s past its burst
        lim.penalize("u", 4).await.unwrap();
        let g = lim.get("u").await.unwrap();
        denied(&g, 0, Some(ms(6_000)));
        denied(&lim.check("u").await.unwrap(), 0, Some(ms(8_000)));
        // never given back, nor set
        lim.reward("u", 100).await.unwrap();
        denied(&lim.get("u").await.unwrap(), 0, Some(ms(6_000)));
        lim.set_remaining("u", 3).await.unwrap();
        denied(&lim.get("u").await.unwrap(), 0, Some(ms(6_000)));
        // repaid: the next request waits behind the charged units
        clock.advance(ms(8_000));
        let c = lim.check("u").await.unwrap();
        allowed(&c, 0, ms(6_000));
        assert_eq!(c.delay(), Some(ms(4_000)));

        // a settle: the excess is charged, an unused estimate stays
        let r = lim.reserve_n("s", 1).await.unwrap();
        allowed(r.decision(), 2, ms(2_000));
        lim.settle(&r, 9).await.unwrap(); // 8 more: the queue ends 18 s from now
        denied(&lim.get("s").await.unwrap(), 0, Some(ms(12_000)));
        denied(&lim.check("s").await.unwrap(), 0, Some(ms(14_000)));
        clock.advance(ms(14_000));
        let d = lim.check("s").await.unwrap();
        allowed(&d, 0, ms(6_000));
        assert_eq!(d.delay(), Some(ms(4_000)));
        let r = lim.reserve_n("t", 3).await.unwrap();
        allowed(r.decision(), 0, ms(6_000));
        lim.settle(&r, 1).await.unwrap();
        denied(&lim.check("t").await.unwrap(), 0, Some(ms(2_000)));
        // a charge on a fresh key is a debt as well
        lim.penalize("v", 5).await.unwrap();
        denied(&lim.get("v").await.unwrap(), 0, Some(ms(4_000)));
    }

    async fn set_remaining_sets_every_adjustable_quota_at_once(h: &impl Harness) {
        for (i, s) in [
            Strategy::FixedWindow,
            Strategy::SlidingWindowLog,
            Strategy::SlidingWindowCounter,
            Strategy::TokenBucket,
            Strategy::Gcra,
        ]
        .into_iter()
        .enumerate()
        {
            let (lim, clock) = manual(h, &format!("setrem{i}"), quota(s, 10, ms(10_000)));
            for _ in 0..4 {
                assert!(lim.check("u").await.unwrap().allowed(), "{s}");
            }
            for (asked, left) in [(7, 7), (0, 0), (10, 10), (3, 3), (50, 10)] {
                lim.set_remaining("u", asked).await.unwrap();
                assert_eq!(lim.get("u").await.unwrap().remaining(), left, "{s}: set {asked}");
            }
            lim.set_remaining("u", 0).await.unwrap();
            let d = lim.check("u").await.unwrap();
            assert!(!d.allowed() && d.retry_after().is_some(), "{s}: {d:?}");
            // the quota refills from the set as from spent units (the
            // counter's previous window weighs on the next one too)
            clock.advance(ms(20_000));
            assert!(lim.check("u").await.unwrap().allowed(), "{s}");
        }
        // several quotas: each to at most its own capacity
        let clock = ManualClock::new(ms(3_600_000));
        let lim = h.limiter(
            "setrem-two",
            vec![
                Quota::gcra(Rate::new(5, ms(10_000))).name("short"),
                Quota::fixed_window(Rate::new(100, ms(100_000))).name("long"),
            ],
            clock.into(),
        );
        lim.set_remaining("u", 20).await.unwrap();
        let d = lim.get("u").await.unwrap();
        let left: Vec<u64> = d.quotas().map(|q| q.remaining()).collect();
        assert_eq!(left, [5, 20]);
    }

    async fn a_reservation_settles_once_and_only_with_its_limiter(h: &impl Harness) {
        for (i, s) in [
            Strategy::FixedWindow,
            Strategy::SlidingWindowLog,
            Strategy::SlidingWindowCounter,
            Strategy::TokenBucket,
            Strategy::Gcra,
        ]
        .into_iter()
        .enumerate()
        {
            let (lim, clock) = manual(h, &format!("once{i}"), quota(s, 100, ms(60_000)));
            assert!(lim.check_n("k", 30).await.unwrap().allowed(), "{s}");
            let r = lim.reserve_n("k", 50).await.unwrap();
            assert_eq!(r.decision().remaining(), 20, "{s}");
            // another limiter (even of the same quotas) may not settle it
            let other = h.limiter(&format!("once{i}"), vec![quota(s, 100, ms(60_000))], clock.clone().into());
            assert!(other.settle(&r, 0).await.is_err(), "{s}");
            lim.settle(&r, 0).await.unwrap();
            assert_eq!(lim.get("k").await.unwrap().remaining(), 70, "{s}");
            // a second settle, of it or of a clone, does nothing
            lim.settle(&r, 0).await.unwrap();
            lim.settle(&r.clone(), 0).await.unwrap();
            assert_eq!(lim.get("k").await.unwrap().remaining(), 70, "{s}: settled twice");
        }
    }

    async fn a_caller_who_overspends_is_denied_until_the_debt_is_repaid(h: &impl Harness) {
        // 10 per 10 s: one unit a second
        let (lim, clock) = manual(h, "debt", Quota::gcra(Rate::new(10, ms(10_000))));
        let r = lim.reserve_n("u", 1).await.unwrap();
        assert!(r.decision().allowed());
        lim.settle(&r, 25).await.unwrap();
        // 25 units owed against a burst of 10: 16 s until one more fits
        let d = lim.check("u").await.unwrap();
        assert!(!d.allowed());
        assert_eq!(d.retry_after(), Some(ms(16_000)));
        clock.advance(ms(16_000) - us(1));
        assert!(!lim.check("u").await.unwrap().allowed());
        clock.advance(us(1));
        assert!(lim.check("u").await.unwrap().allowed());
    }

    async fn settle_gives_back_the_unused_part_and_charges_the_excess_exactly(h: &impl Harness) {
        for (i, s) in [
            Strategy::FixedWindow,
            Strategy::SlidingWindowLog,
            Strategy::SlidingWindowCounter,
            Strategy::TokenBucket,
            Strategy::Gcra,
        ]
        .into_iter()
        .enumerate()
        {
            let (lim, clock) = manual(h, &format!("settle{i}"), quota(s, 10, ms(10_000)));
            let r = lim.reserve_n("u", 5).await.unwrap();
            assert_eq!(r.decision().remaining(), 5, "{s}");
            clock.advance(us(1));
            lim.settle(&r, 2).await.unwrap();
            assert_eq!(lim.get("u").await.unwrap().remaining(), 8, "{s}: refund");
            let r = lim.reserve_n("u", 4).await.unwrap();
            assert_eq!(r.decision().remaining(), 4, "{s}");
            lim.settle(&r, 6).await.unwrap();
            assert_eq!(lim.get("u").await.unwrap().remaining(), 2, "{s}: excess");
            // refund by status: a reservation settled to 0 is not counted
            let r = lim.reserve_n("u", 2).await.unwrap();
            assert!(r.decision().allowed(), "{s}");
            lim.settle(&r, 0).await.unwrap();
            assert_eq!(lim.get("u").await.unwrap().remaining(), 2, "{s}: refund to 0");
            // a denied reservation settles nothing
            let r = lim.reserve_n("u", 3).await.unwrap();
            assert!(!r.decision().allowed(), "{s}");
            lim.settle(&r, 0).await.unwrap();
            assert_eq!(lim.get("u").await.unwrap().remaining(), 2, "{s}");
        }
    }

    async fn a_reservation_of_zero_units_is_still_charged_what_it_used(h: &impl Harness) {
        for (i, s) in [
            Strategy::FixedWindow,
            Strategy::SlidingWindowLog,
            Strategy::SlidingWindowCounter,
            Strategy::TokenBucket,
            Strategy::Gcra,
        ]
        .into_iter()
        .enumerate()
        {
            let (lim, _clock) = manual(h, &format!("zero{i}"), quota(s, 100, ms(60_000)));
            // an estimate of 0 is admitted (it asks for nothing) ...
            let r = lim.reserve_n("u", 0).await.unwrap();
            assert!(r.decision().allowed(), "{s}");
            assert_eq!(r.units(), 0, "{s}");
            // ... and settles to what was used: 30 charged
            lim.settle(&r, 30).await.unwrap();
            assert_eq!(lim.get("u").await.unwrap().remaining(), 70, "{s}: 0 then 30");
            // a settle to 0 of it charges nothing
            let r = lim.reserve_n("u", 0).await.unwrap();
            lim.settle(&r, 0).await.unwrap();
            assert_eq!(lim.get("u").await.unwrap().remaining(), 70, "{s}: 0 then 0");
            // past the limit: a debt, as for any reservation
            let r = lim.reserve_n("u", 0).await.unwrap();
            lim.settle(&r, 500).await.unwrap();
            let d = lim.check("u").await.unwrap();
            assert!(!d.allowed(), "{s}: 0 then 500 must leave a debt: {d:?}");
            assert_eq!(d.remaining(), 0, "{s}");
            // a denied reservation reserved nothing: settling it charges
            // in full what the caller says was used (0: nothing)
            let (lim, _clock) = manual(h, &format!("zero-denied{i}"), quota(s, 10, ms(60_000)));
            assert!(lim.check_n("u", 8).await.unwrap().allowed(), "{s}");
            let r = lim.reserve_n("u", 5).await.unwrap();
            assert!(!r.decision().allowed(), "{s}");
            assert_eq!(r.units(), 0, "{s}");
            lim.settle(&r, 0).await.unwrap();
            assert_eq!(lim.get("u").await.unwrap().remaining(), 2, "{s}: denied, then 0");
            let r = lim.reserve_n("u", 5).await.unwrap();
            lim.settle(&r, 1).await.unwrap();
            assert_eq!(lim.get("u").await.unwrap().remaining(), 1, "{s}: denied, then 1");
        }
    }

    async fn a_debt_is_repaid_at_the_rate_up_to_max_debt(h: &impl Harness) {
        const MAX: Duration = RateLimiter::MAX_DEBT;
        assert_eq!(MAX, us(1 << 50));
        // 10 per hour: a unit every 6 minutes; what the rate repays in MAX
        let interval = ms(360_000);
        let cap: u64 = (1 << 50) / 360_000_000;
        for s in [Strategy::TokenBucket, Strategy::Gcra] {
            let (lim, clock) = manual(h, &format!("maxdebt-{s}"), quota(s, 10, ms(3_600_000)));
            let retry = |k: &'static str| {
                let lim = lim.clone();
                async move { lim.check(k).await.unwrap().retry_after() }
            };
            // reserve 1, settle 100,000: 99,991 intervals until one fits
            let r = lim.reserve_n("big", 1).await.unwrap();
            lim.settle(&r, 100_000).await.unwrap();
            assert_eq!(retry("big").await, Some(interval * 99_991), "{s}");
            // at the cap, past it, and far past it: the same debt
            lim.penalize("at", cap).await.unwrap();
            lim.penalize("past", cap + 1).await.unwrap();
            lim.penalize("far", u64::MAX).await.unwrap();
            let at_cap = Some(interval * (cap as u32 - 9));
            for k in ["at", "past", "far"] {
                assert_eq!(retry(k).await, at_cap, "{s}: {k}");
            }
            // more debt on a key at the cap: no further than MAX from now
            lim.penalize("at", 1).await.unwrap();
            lim.penalize("far", u64::MAX).await.unwrap();
            let full = MAX - interval * 9;
            assert_eq!(retry("at").await, Some(full), "{s}");
            assert_eq!(retry("far").await, Some(full), "{s}");
            // a reward of any size gives back, never above the limit
            lim.reward("past", u64::MAX).await.unwrap();
            assert_eq!(lim.get("past").await.unwrap().remaining(), 10, "{s}");
            // and the debt is repaid at the rate, to the microsecond
            clock.advance(full - us(1));
            assert!(!lim.check("at").await.unwrap().allowed(), "{s}");
            clock.advance(us(1));
            assert!(lim.check("at").await.unwrap().allowed(), "{s}");
        }
        // a window's count: at most its limit plus what the rate repays in
        // MAX (10 per 10 s: a unit a second)
        let cap: u64 = (1 << 50) / 1_000_000;
        for s in [Strategy::FixedWindow, Strategy::SlidingWindowCounter] {
            let (lim, clock) = manual(h, &format!("maxcount-{s}"), quota(s, 10, ms(10_000)));
            lim.penalize("u", u64::MAX).await.unwrap();
            lim.penalize("u", u64::MAX).await.unwrap();
            assert!(!lim.check("u").await.unwrap().allowed(), "{s}");
            lim.reward("u", cap).await.unwrap();
            assert_eq!(lim.get("u").await.unwrap().remaining(), 0, "{s}: 10 + cap - cap");
            lim.reward("u", 1).await.unwrap();
            assert_eq!(lim.get("u").await.unwrap().remaining(), 1, "{s}");
            clock.advance(ms(20_000));
            assert!(lim.check("u").await.unwrap().allowed(), "{s}");
        }
        // on the store's clock too (the fixed window's INCRBY, a TAT of now)
        let lim = h.limiter(
            "maxdebt-store",
            vec![Quota::fixed_window(Rate::new(10, ms(60_000)))],
            Clock::Store,
        );
        let cap: u64 = (1 << 50) / 6_000_000;
        lim.penalize("u", u64::MAX).await.unwrap();
        lim.penalize("u", u64::MAX).await.unwrap();
        lim.reward("u", cap).await.unwrap();
        assert_eq!(lim.get("u").await.unwrap().remaining(), 0);
        lim.reward("u", 1).await.unwrap();
        assert_eq!(lim.get("u").await.unwrap().remaining(), 1);
        let lim = h.limiter("maxdebt-store-tat", vec![Quota::gcra(Rate::per_hour(10))], Clock::Store);
        lim.penalize("u", u64::MAX).await.unwrap();
        lim.penalize("u", u64::MAX).await.unwrap();
        let retry = lim.check("u").await.unwrap().retry_after().unwrap();
        let full = MAX - interval * 9;
        assert!(retry <= full && retry > full - ms(10_000), "{retry:?}");
    }

    async fn concurrent_reservations_never_admit_more_than_the_budget(h: &impl Harness) {
        for (i, s) in [Strategy::FixedWindow, Strategy::SlidingWindowLog, Strategy::Gcra]
            .into_iter()
            .enumerate()
        {
            let clock = ManualClock::new(T0);
            let lims: Vec<RateLimiter> = (0..4)
                .map(|_| {
                    h.limiter(
                        &format!("budget{i}"),
                        vec![quota(s, 100, ms(60_000))],
                        clock.clone().into(),
                    )
                })
                .collect();
            let mut tasks = Vec::new();
            for j in 0..50 {
                let lim = lims[j % lims.len()].clone();
                tasks.push(tokio::spawn(async move {
                    let r = lim.reserve_n("tenant", 5).await.unwrap();
                    let ok = r.decision().allowed();
                    // half the admitted ones fail: refunded to 0
                    if ok && j % 2 == 0 {
                        lim.settle(&r, 0).await.unwrap();
                    }
                    (ok, j % 2 == 0)
                }));
            }
            let mut admitted = 0;
            let mut kept = 0;
            for t in tasks {
                let (ok, refunded) = t.await.unwrap();
                if ok {
                    admitted += 1;
                    if !refunded {
                        kept += 1;
                    }
                }
            }
            // 100 units, 5 each: never more kept than fit; at least 20
            // admitted (refunds free room); exactly what was kept is counted
            assert!(admitted >= 20, "{s}: {admitted}");
            assert!(kept <= 20, "{s}: {kept}");
            let rem = lims[0].get("tenant").await.unwrap().remaining();
            assert_eq!(rem, 100 - 5 * kept, "{s}: admitted {admitted}, kept {kept}");
        }
    }

    async fn penalty_box_and_adjust_on_the_store_clock(h: &impl Harness) {
        let lim = h.limiter(
            "sclock",
            vec![Quota::fixed_window(Rate::new(10, ms(60_000)))],
            Clock::Store,
        );
        assert_eq!(lim.check("u").await.unwrap().remaining(), 9);
        lim.penalize("u", 5).await.unwrap();
        assert_eq!(lim.get("u").await.unwrap().remaining(), 4);
        lim.reward("u", 2).await.unwrap();
        assert_eq!(lim.get("u").await.unwrap().remaining(), 6);
        let r = lim.reserve_n("u", 3).await.unwrap();
        assert_eq!(r.decision().remaining(), 3);
        lim.settle(&r, 1).await.unwrap();
        assert_eq!(lim.get("u").await.unwrap().remaining(), 5);
        let boxed = h
            .builder("sclock2")
            .quota(Quota::gcra(Rate::per_minute(1)))
            .block_for(ms(120_000))
            .build()
            .unwrap();
        assert!(boxed.check("u").await.unwrap().allowed());
        let d = boxed.check("u").await.unwrap();
        assert!(!d.allowed());
        let retry = d.retry_after().unwrap();
        assert!(retry > ms(119_000) && retry <= ms(120_000), "{retry:?}");
        boxed.unblock("u").await.unwrap();
        let d = boxed.check("u").await.unwrap();
        assert!(!d.allowed(), "the quota itself still denies");
        assert!(d.retry_after().unwrap() > ms(119_000), "and blocks again");
    }
    }

    // The Redis keys themselves: stores whose keys are Redis keys (with TTLs).
    redis_keys {
    async fn an_aligned_window_key_lives_to_the_end_of_its_window(h: &impl Harness) {
        // on a manual clock: the rest of the window plus the 60 s grace
        let minute = 60_000_000u64;
        let edge = Duration::from_micros((T0.as_micros() as u64 / minute + 1) * minute);
        let clock = ManualClock::new(edge - ms(1_500));
        let q = Quota::fixed_window(Rate::per_minute(2)).aligned();
        let lim = h.limiter("fwa-ttl", vec![q.clone()], clock.clone().into());
        lim.check("k").await.unwrap();
        let key = lim.storage_keys("k").remove(0);
        let ttl = pttl(h, &key).await.expect("a Redis store");
        assert!(ttl > 60_000 && ttl <= 61_500, "{}: PTTL {ttl}", h.name());
        // on Redis's clock: the rest of the window, and repaired on a denial
        let lim = h.limiter("fwa-ttl-store", vec![q], Clock::Store);
        assert!(lim.check_n("k", 2).await.unwrap().allowed());
        let key = lim.storage_keys("k").remove(0);
        let d = lim.peek("k").await.unwrap();
        let ttl = pttl(h, &key).await.unwrap();
        let reset = d.reset_after().as_millis() as i64;
        assert!(ttl > 0 && ttl <= 60_000 && (ttl - reset).abs() <= 50, "{}: PTTL {ttl}, reset {reset}", h.name());
        let mut persist = redis::cmd("PERSIST");
        persist.arg(&key);
        let removed: i64 = h.redis(persist).await.unwrap();
        assert_eq!(removed, 1);
        assert!(!lim.check("k").await.unwrap().allowed());
        let ttl = pttl(h, &key).await.unwrap();
        assert!(ttl > 0 && ttl <= 60_000, "{}: PTTL {ttl}", h.name());
    }

    async fn every_key_written_has_a_ttl_no_longer_than_its_window(h: &impl Harness) {
        let period = Duration::from_secs(60);
        let mut written = Vec::new();
        for strategy in Strategy::ALL {
            let lim = h.limiter("ttl", vec![quota(strategy, 5, period)], Clock::Store);
            for k in 0..3 {
                let user = format!("user-{k}");
                for _ in 0..7 {
                    lim.check(&user).await.unwrap();
                }
                written.push((strategy, lim.storage_keys(&user).remove(0)));
            }
        }
        // nothing else was stored
        assert_eq!(h.key_count("ttl").await, 3 * Strategy::ALL.len() as u64);
        for (strategy, key) in written {
            let ttl = pttl(h, &key).await.expect("a Redis store");
            let max = max_ttl_ms(strategy, 60_000);
            assert!(ttl > 0 && ttl <= max, "{}: {key}: PTTL {ttl}", h.name());
        }
    }

    async fn a_key_found_without_ttl_is_repaired_on_denial(h: &impl Harness) {
        for strategy in Strategy::ALL {
            let lim = h.limiter(
                "repair",
                vec![quota(strategy, 1, Duration::from_secs(60))],
                Clock::Store,
            );
            assert!(lim.check("k").await.unwrap().allowed());
            let key = lim.storage_keys("k").remove(0);
            let mut persist = redis::cmd("PERSIST");
            persist.arg(&key);
            let removed: i64 = h.redis(persist).await.expect("a Redis store");
            assert_eq!(removed, 1, "{strategy}: the key had a TTL to remove");
            assert_eq!(pttl(h, &key).await, Some(-1));
            assert!(!lim.check("k").await.unwrap().allowed());
            let ttl = pttl(h, &key).await.unwrap();
            let max = max_ttl_ms(strategy, 60_000);
            assert!(
                ttl > 0 && ttl <= max,
                "{}: {strategy}: PTTL {ttl}",
                h.name()
            );
        }
    }
    }
}
