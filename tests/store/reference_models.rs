//! Each strategy against an independent, naive model of its semantics, on
//! random request sequences with a manual clock. The stores agree with each
//! other (tests/store/differential.rs), so the memory store stands for both here.

use std::time::Duration;

use proptest::prelude::*;
use tower_redis_ratelimit::clock::ManualClock;
use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimiter};

/// (time step in µs, cost) pairs.
fn requests() -> impl proptest::strategy::Strategy<Value = Vec<(u64, u64)>> {
    proptest::collection::vec(
        (
            prop_oneof![2 => Just(0u64), 3 => 0u64..3_000_000, 1 => 0u64..30_000_000],
            prop_oneof![5 => Just(1u64), 1 => 0u64..5],
        ),
        1..120,
    )
}

/// An operation of `bucket_strategies_are_charged_as_a_continuous_bucket_in_debt`.
#[derive(Debug, Clone, Copy)]
enum Charged {
    Check(u64),
    Penalize(u64),
    Reward(u64),
    Settle { estimate: u64, actual: u64 },
}

fn limiter(quota: Quota, clock: &ManualClock) -> RateLimiter {
    RateLimiter::builder()
        .store(MemoryStore::new())
        .quota(quota)
        .clock(clock.clone())
        .build()
        .unwrap()
}

fn run(
    quota: Quota,
    reqs: &[(u64, u64)],
    mut model: impl FnMut(u64, u64) -> bool,
) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let lim = limiter(quota, &clock);
    let mut now = 1_000_000_000_000u64;
    for (i, &(step, cost)) in reqs.iter().enumerate() {
        clock.advance(Duration::from_micros(step));
        now += step;
        let d = rt.block_on(lim.check_n("k", cost)).unwrap();
        let want = model(now, cost);
        prop_assert_eq!(
            d.allowed(),
            want,
            "request {} (t={}, cost={}): {:?}",
            i,
            now,
            cost,
            d
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// At most n in any window (now - period, now], exactly as a list of times says.
    #[test]
    fn sliding_window_log_matches_a_list_of_times(n in 1u64..6, reqs in requests()) {
        let period = 10_000_000u64;
        let mut log: Vec<u64> = Vec::new();
        run(Quota::sliding_window_log(Rate::new(n, Duration::from_micros(period))), &reqs, |now, cost| {
            log.retain(|t| *t + period > now);
            let ok = log.len() as u64 + cost <= n;
            if ok {
                log.extend(std::iter::repeat_n(now, cost as usize));
            }
            ok
        })?;
    }

    /// A window opens at the first request after the previous one closed.
    #[test]
    fn fixed_window_matches_a_counter_per_window(n in 1u64..6, reqs in requests()) {
        let period = 10_000_000u64;
        let mut window: Option<(u64, u64)> = None;
        run(Quota::fixed_window(Rate::new(n, Duration::from_micros(period))), &reqs, |now, cost| {
            let (start, count) = match window {
                Some((s, c)) if now < s + period => (s, c),
                _ => (now, 0),
            };
            let ok = count + cost <= n;
            if ok && cost > 0 {
                window = Some((start, count + cost));
            }
            ok
        })?;
    }

    /// An aligned window is the one of `[k * period, (k + 1) * period)` that
    /// holds the time (µs since the epoch), whatever the key's first hit.
    #[test]
    fn aligned_fixed_window_matches_a_counter_per_epoch_window(
        n in 1u64..6,
        period in prop_oneof![Just(10_000_000u64), Just(7_000_000), 1u64..40_000_000],
        reqs in requests(),
    ) {
        let mut window: Option<(u64, u64)> = None;
        run(Quota::fixed_window(Rate::new(n, Duration::from_micros(period))).aligned(), &reqs, |now, cost| {
            let k = now / period;
            let count = match window {
                Some((w, c)) if w == k => c,
                _ => 0,
            };
            let ok = count + cost <= n;
            if ok && cost > 0 {
                window = Some((k, count + cost));
            }
            ok
        })?;
    }

    /// Token bucket, GCRA and leaky bucket admit exactly as a continuous bucket
    /// of `burst` tokens refilled at one token per interval (credit in µs).
    #[test]
    fn bucket_strategies_match_a_continuous_bucket(
        n in 1u64..6,
        burst in proptest::option::of(1u64..8),
        which in 0usize..3,
        reqs in requests(),
    ) {
        let period = Duration::from_secs(10);
        let rate = Rate::new(n, period);
        let mut quota = [Quota::token_bucket(rate), Quota::gcra(rate), Quota::leaky_bucket(rate)][which].clone();
        if let Some(b) = burst {
            quota = quota.burst(b);
        }
        let b = burst.unwrap_or(n);
        let interval = (period.as_micros() as u64).div_ceil(n);
        let cap = b * interval;
        let mut credit = cap;
        let mut last: Option<u64> = None;
        run(quota, &reqs, |now, cost| {
            if let Some(l) = last {
                credit = (credit + (now - l)).min(cap);
            }
            last = Some(now);
            let ok = cost * interval <= credit;
            if ok {
                credit -= cost * interval;
            }
            ok
        })?;
    }

    /// Token bucket, GCRA and leaky bucket under charges and give-backs
    /// (`penalize`, `reward`, `reserve_n` then `settle`): the continuous
    /// bucket above, whose credit a charge takes below zero (a debt: even a
    /// cost of 0 is denied until it is repaid at the rate) and a give-back
    /// returns, never above the burst. A leaky bucket is charged alike but
    /// never given back, and an admitted request waits until the debt and
    /// the queue ahead of it have drained (its delay: the burst's worth less
    /// the credit).
    #[test]
    fn bucket_strategies_are_charged_as_a_continuous_bucket_in_debt(
        n in 1u64..6,
        burst in proptest::option::of(1u64..8),
        which in 0usize..3,
        ops in proptest::collection::vec(
            (
                prop_oneof![2 => Just(0u64), 3 => 0u64..3_000_000, 1 => 0u64..30_000_000],
                prop_oneof![
                    4 => (0u64..4).prop_map(Charged::Check),
                    1 => (0u64..9).prop_map(Charged::Penalize),
                    1 => (0u64..9).prop_map(Charged::Reward),
                    2 => (0u64..5, 0u64..12).prop_map(|(estimate, actual)| Charged::Settle { estimate, actual }),
                ],
            ),
            1..100,
        ),
    ) {
        let period = Duration::from_secs(10);
        let rate = Rate::new(n, period);
        let mut quota = [Quota::token_bucket(rate), Quota::gcra(rate), Quota::leaky_bucket(rate)][which].clone();
        if let Some(b) = burst {
            quota = quota.burst(b);
        }
        let queue = which == 2;
        let b = burst.unwrap_or(n) as i64;
        let interval = (period.as_micros() as i64 + n as i64 - 1) / n as i64;
        let cap = b * interval;
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let clock = ManualClock::new(Duration::from_secs(1_000_000));
        let lim = limiter(quota, &clock);
        let mut credit = cap;
        // a take of `cost`: admitted or not, and the delay of the admitted
        let take = |credit: &mut i64, cost: i64| {
            let ok = cost * interval <= *credit;
            let delay = if ok && queue && cost > 0 { cap - *credit } else { 0 };
            if ok {
                *credit -= cost * interval;
            }
            (ok, Duration::from_micros(delay as u64))
        };
        for (i, &(step, op)) in ops.iter().enumerate() {
            clock.advance(Duration::from_micros(step));
            credit = (credit + step as i64).min(cap);
            let ctx = format!("op {i} {op:?} of {ops:?}");
            match op {
                Charged::Check(cost) => {
                    let d = rt.block_on(lim.check_n("k", cost)).unwrap();
                    let (ok, delay) = take(&mut credit, cost as i64);
                    prop_assert_eq!(d.allowed(), ok, "{}: {:?}", ctx, d);
                    prop_assert_eq!(d.delay().unwrap_or_default(), delay, "{}: {:?}", ctx, d);
                }
                Charged::Penalize(units) => {
                    rt.block_on(lim.penalize("k", units)).unwrap();
                    credit -= units as i64 * interval;
                }
                Charged::Reward(units) => {
                    rt.block_on(lim.reward("k", units)).unwrap();
                    if !queue {
                        credit = (credit + units as i64 * interval).min(cap);
                    }
                }
                Charged::Settle { estimate, actual } => {
                    let r = rt.block_on(lim.reserve_n("k", estimate)).unwrap();
                    let (ok, delay) = take(&mut credit, estimate as i64);
                    prop_assert_eq!(r.decision().allowed(), ok, "{}: {:?}", ctx, r.decision());
                    prop_assert_eq!(r.decision().delay().unwrap_or_default(), delay, "{}", ctx);
                    rt.block_on(lim.settle(&r, actual)).unwrap();
                    // (a denied reservation reserved nothing: all is charged)
                    let reserved = if ok { estimate } else { 0 };
                    if actual > reserved {
                        credit -= (actual - reserved) as i64 * interval;
                    } else if !queue {
                        credit = (credit + (reserved - actual) as i64 * interval).min(cap);
                    }
                }
            }
            // in debt exactly when even a cost of 0 is denied
            let g = rt.block_on(lim.get("k")).unwrap();
            prop_assert_eq!(g.allowed(), credit >= 0, "after {}: {:?} (credit {})", ctx, g, credit);
        }
    }

    /// Never more than n within one aligned window, hence at most 2n in any
    /// sliding window of length period.
    #[test]
    fn sliding_window_counter_stays_within_its_bound(n in 1u64..6, reqs in requests()) {
        let period = 10_000_000u64;
        let mut admitted: Vec<u64> = Vec::new();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let clock = ManualClock::new(Duration::from_secs(1_000_000));
        let lim = limiter(Quota::sliding_window_counter(Rate::new(n, Duration::from_micros(period))), &clock);
        let mut now = 1_000_000_000_000u64;
        for &(step, cost) in &reqs {
            clock.advance(Duration::from_micros(step));
            now += step;
            if rt.block_on(lim.check_n("k", cost)).unwrap().allowed() {
                admitted.extend(std::iter::repeat_n(now, cost as usize));
            }
        }
        for &t in &admitted {
            let aligned = admitted.iter().filter(|&&u| u / period == t / period).count() as u64;
            prop_assert!(aligned <= n, "{} admitted in the aligned window of {}", aligned, t);
            let sliding = admitted.iter().filter(|&&u| u <= t && u + period > t).count() as u64;
            prop_assert!(sliding <= 2 * n, "{} admitted in the window ending at {}", sliding, t);
        }
    }

    /// At most n leases alive; an unreleased lease frees its slot after the timeout.
    #[test]
    fn concurrency_matches_a_set_of_leases(n in 1u64..6, reqs in requests()) {
        let timeout = 10_000_000u64;
        let mut leases: Vec<u64> = Vec::new();
        run(Quota::concurrency(n).lease_timeout(Duration::from_micros(timeout)), &reqs, |now, cost| {
            leases.retain(|exp| *exp > now);
            let ok = leases.len() as u64 + cost <= n;
            if ok {
                leases.extend(std::iter::repeat_n(now + timeout, cost as usize));
            }
            ok
        })?;
    }
}
