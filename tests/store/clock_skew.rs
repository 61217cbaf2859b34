//! Clock skew between instances on the caller's clock (`Clock::Caller`):
//! what each strategy admits when two instances' clocks differ by `s`, against
//! the bounds of the guide's failure-modes chapter ("Clock skew under the
//! caller's clock"). The caller's clock sends its reading with each call
//! exactly as a manual clock does, so two `ManualClock`s `s` apart, on one
//! private Redis, are two instances whose clocks are `s` apart. Each bound
//! is checked where the script says it is reached, and against bursty
//! traffic from both instances (bursts of up to one and a half limits at
//! uneven times), on Redis with the skew and on the memory store without
//! (one process, one clock: the same bounds at `s = 0`). The memory store's
//! part: the caller's clock decides there as on Redis.

use crate::common;

use std::time::Duration;

use common::{GENEROUS, RedisServer};
use tower_redis_ratelimit::clock::{Clock, ManualClock};
use tower_redis_ratelimit::decision::Lease;
use tower_redis_ratelimit::strategy::Strategy;
use tower_redis_ratelimit::{Decision, MemoryStore, Quota, Rate, RateLimiter, RedisStore};

/// A time far from 0, a whole number of every period used here.
const T0: Duration = Duration::from_secs(1_000_000);
/// The skew: the fast instance's clock runs this far ahead of the slow one's.
const SKEW: Duration = Duration::from_millis(350);
/// The limit per period (or leases in flight).
const N: u64 = 10;
const PERIOD: Duration = Duration::from_secs(1);

/// Two instances of one limiter on one Redis, the fast one's clock `SKEW`
/// ahead of the slow one's; `at(t)` sets both to the real time `T0 + t`.
struct Pair {
    slow: RateLimiter,
    fast: RateLimiter,
    slow_clock: ManualClock,
    fast_clock: ManualClock,
}

impl Pair {
    fn new(server: &RedisServer, quota: Quota, prefix: &str) -> Self {
        let slow_clock = ManualClock::new(T0);
        let fast_clock = ManualClock::new(T0 + SKEW);
        let build = |clock: &ManualClock| {
            RateLimiter::builder()
                .store(RedisStore::new(server.pool(2)).timeout(GENEROUS))
                .prefix(prefix)
                .quota(quota.clone())
                .clock(clock.clone())
                .build()
                .unwrap()
        };
        Pair {
            slow: build(&slow_clock),
            fast: build(&fast_clock),
            slow_clock,
            fast_clock,
        }
    }

    fn at(&self, t: Duration) {
        self.slow_clock.set(T0 + t);
        self.fast_clock.set(T0 + t + SKEW);
    }
}

/// How many requests of cost 1 `lim` admits for `key` until one is denied
/// (at most `100`); leases are kept.
async fn drain(lim: &RateLimiter, key: &str) -> u64 {
    let mut n = 0;
    while n < 100 && lim.check(key).await.unwrap().allowed() {
        n += 1;
    }
    n
}

fn us(d: Duration) -> u64 {
    d.as_micros() as u64
}

/// GCRA, token bucket, leaky bucket (one theoretical arrival time): over any
/// span `T` of real time they admit at most what they would over `T + s`
/// without skew: `s × rate` more, rounded up. Both orders at one real time:
/// the fast instance after the slow one takes `floor(s / interval)` more,
/// before it nothing more; then a sustained run of both instances stays
/// within the bound.
#[tokio::test]
async fn a_theoretical_arrival_time_admits_at_most_skew_times_rate_more() {
    let server = RedisServer::start();
    let interval = PERIOD / N as u32;
    for strategy in [Strategy::Gcra, Strategy::TokenBucket, Strategy::LeakyBucket] {
        let quota = Quota::new(strategy, Rate::new(N, PERIOD)).burst(N);
        let pair = Pair::new(&server, quota, &format!("tat-{strategy}"));
        pair.at(Duration::ZERO);
        assert_eq!(drain(&pair.slow, "a").await, N, "{strategy}");
        let extra = drain(&pair.fast, "a").await;
        assert_eq!(
            extra,
            us(SKEW) / us(interval),
            "{strategy}: slow, then fast"
        );
        assert!(extra <= us(SKEW).div_ceil(us(interval)), "{strategy}");
        assert_eq!(drain(&pair.fast, "b").await, N, "{strategy}");
        assert_eq!(
            drain(&pair.slow, "b").await,
            0,
            "{strategy}: fast, then slow"
        );

        // both instances, one request each every 10 ms of real time for 3 s
        let step = Duration::from_millis(10);
        let steps = 300u32;
        let mut admitted = 0u64;
        for i in 0..steps {
            pair.at(PERIOD * 10 + step * i);
            let (first, second) = if i % 2 == 0 {
                (&pair.slow, &pair.fast)
            } else {
                (&pair.fast, &pair.slow)
            };
            for lim in [first, second] {
                admitted += u64::from(lim.check("c").await.unwrap().allowed());
            }
        }
        // over the real span T: at most (T + s + burst × interval) / interval
        let span = step * (steps - 1);
        let bound = (us(span) + us(SKEW) + N * us(interval)) / us(interval);
        let unskewed = (us(span) + N * us(interval)) / us(interval);
        assert!(admitted <= bound, "{strategy}: {admitted} > {bound}");
        assert!(
            admitted > unskewed,
            "{strategy}: the skew cost nothing? {admitted}"
        );
    }
}

/// Fixed window (the caller's time, not the key's TTL, starts and ends a
/// window), sliding log and concurrency leases: the fast instance sees what
/// the slow one wrote expire `s` early, a whole limit `s` sooner, not a
/// fraction. So a sliding log or leases admit at most `N` in any span of
/// real time shorter than `period - s` (the limit's `period` without
/// skew); a fixed window's windows last at least `period - s`, each at
/// most `N`, so up to `2N` across a boundary (as without skew).
#[tokio::test]
async fn windows_logs_and_leases_are_shortened_by_the_skew() {
    let server = RedisServer::start();
    for strategy in [
        Strategy::FixedWindow,
        Strategy::SlidingWindowLog,
        Strategy::Concurrency,
    ] {
        let quota = match strategy {
            Strategy::Concurrency => Quota::concurrency(N).lease_timeout(PERIOD),
            s => Quota::new(s, Rate::new(N, PERIOD)),
        };
        let pair = Pair::new(&server, quota, &format!("window-{strategy}"));
        let short = PERIOD - SKEW;
        pair.at(Duration::ZERO);
        assert_eq!(drain(&pair.slow, "a").await, N, "{strategy}");
        pair.at(short - Duration::from_millis(1));
        assert_eq!(
            drain(&pair.fast, "a").await,
            0,
            "{strategy}: before period - s"
        );
        pair.at(short);
        assert_eq!(drain(&pair.fast, "a").await, N, "{strategy}: at period - s");
        // the slow instance does not see the fast one's expire early
        pair.at(PERIOD);
        assert_eq!(drain(&pair.slow, "a").await, 0, "{strategy}");

        // sustained: no half-open span of period - s holds more than N
        let step = Duration::from_millis(10);
        let mut times = Vec::new();
        for i in 0..300u32 {
            let t = PERIOD * 10 + step * i;
            pair.at(t);
            let lim = if i % 3 == 0 { &pair.slow } else { &pair.fast };
            if lim.check("b").await.unwrap().allowed() {
                times.push(t);
            }
        }
        let most = match strategy {
            Strategy::FixedWindow => 2 * N,
            _ => N,
        };
        for (i, start) in times.iter().enumerate() {
            let within = times[i..]
                .iter()
                .take_while(|t| **t < *start + short)
                .count();
            assert!(within as u64 <= most, "{strategy}: {within} from {start:?}");
        }
        assert!(times.len() as u64 > 3 * N, "{strategy}: {}", times.len());
    }
}

/// Sliding window counter: the fast instance weighs the previous window
/// `s / period` less, so it admits at most `N × s / period` more (rounded
/// up) at any moment.
#[tokio::test]
async fn a_sliding_window_counter_admits_at_most_the_skews_share_of_the_previous_window() {
    let server = RedisServer::start();
    let quota = Quota::sliding_window_counter(Rate::new(N, PERIOD));
    let pair = Pair::new(&server, quota, "counter");
    pair.at(Duration::ZERO);
    assert_eq!(drain(&pair.slow, "a").await, N);
    pair.at(PERIOD);
    assert_eq!(drain(&pair.slow, "a").await, 0);
    let extra = drain(&pair.fast, "a").await;
    let bound = (N * us(SKEW)).div_ceil(us(PERIOD));
    assert_eq!(extra, bound);
    // (the fast instance first: the slow one then counts what it took)
    pair.at(Duration::ZERO);
    assert_eq!(drain(&pair.slow, "b").await, N);
    pair.at(PERIOD);
    assert_eq!(drain(&pair.fast, "b").await, bound);
    assert_eq!(drain(&pair.slow, "b").await, 0);
}

/// The caller's clock decides on the memory store as on Redis: the same
/// answers for every strategy (the system clock, read by both).
#[tokio::test]
async fn the_callers_clock_decides_alike_on_the_memory_store_and_redis() {
    let server = RedisServer::start();
    for strategy in Strategy::ALL {
        let quota = match strategy {
            Strategy::Concurrency => Quota::concurrency(3),
            s => Quota::new(s, Rate::per_hour(3)),
        };
        let redis = RateLimiter::builder()
            .store(RedisStore::new(server.pool(2)).timeout(GENEROUS))
            .prefix(format!("caller-{strategy}"))
            .quota(quota)
            .clock(Clock::Caller)
            .build()
            .unwrap();
        let memory = redis.with_store(MemoryStore::new());
        let mut retries = Vec::new();
        for lim in [&redis, &memory] {
            lim.verify().await.unwrap();
            let decisions = [
                lim.check("k").await.unwrap(),
                lim.check_n("k", 2).await.unwrap(),
                lim.check("k").await.unwrap(),
            ];
            let allowed: Vec<bool> = decisions.iter().map(|d| d.allowed()).collect();
            assert_eq!(allowed, [true, true, false], "{strategy}");
            let retry = decisions[2].retry_after().unwrap_or_default();
            if strategy != Strategy::Concurrency {
                assert!(retry > Duration::from_secs(60), "{strategy}: {retry:?}");
            }
            retries.push(retry);
        }
        // the same wait on both (the counter's windows are aligned to the
        // Unix epoch, which both clocks read)
        let gap = retries[0].abs_diff(retries[1]);
        assert!(gap < Duration::from_secs(5), "{strategy}: {retries:?}");
    }
}

/// A tiny deterministic generator (the traffic is the same every run).
struct Lcg(u64);

impl Lcg {
    /// A number in `0..n`.
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// Two instances of one limiter of `quota` whose clocks are `skew` apart:
/// on Redis (two manual clocks), or on one memory store with `skew` zero
/// (one clock for both: a memory store's limiters share state only on one
/// clock, as one process's instances do).
struct Instances {
    lims: [RateLimiter; 2],
    clocks: [ManualClock; 2],
    skew: Duration,
}

impl Instances {
    fn redis(server: &RedisServer, quota: Quota, prefix: &str, skew: Duration) -> Self {
        let clocks = [ManualClock::new(T0), ManualClock::new(T0 + skew)];
        let lims = clocks.clone().map(|c| {
            RateLimiter::builder()
                .store(RedisStore::new(server.pool(2)).timeout(GENEROUS))
                .prefix(prefix)
                .quota(quota.clone())
                .clock(c)
                .build()
                .unwrap()
        });
        Instances { lims, clocks, skew }
    }

    fn memory(quota: Quota, prefix: &str) -> Self {
        let store = MemoryStore::new();
        let clock = ManualClock::new(T0);
        let lims = [0, 1].map(|_| {
            RateLimiter::builder()
                .store(store.clone())
                .prefix(prefix)
                .quota(quota.clone())
                .clock(clock.clone())
                .build()
                .unwrap()
        });
        Instances {
            lims,
            clocks: [clock.clone(), clock],
            skew: Duration::ZERO,
        }
    }

    /// Sets every instance to the real time `T0 + t`.
    fn at(&self, t: Duration) {
        self.clocks[0].set(T0 + t);
        self.clocks[1].set(T0 + t + self.skew);
    }

    /// Instance `i`'s reading at the real time `t`.
    fn reading(&self, i: usize, t: Duration) -> Duration {
        if i == 0 { t } else { t + self.skew }
    }
}

/// One admitted request of bursty traffic: when (real time since `T0`), by
/// which instance, its cost and decision.
struct Admitted {
    t: Duration,
    by: usize,
    cost: u64,
    decision: Decision,
    /// The leases held (not released) when it was admitted, other than its
    /// own: when each was taken, and its cost.
    held: Vec<(Duration, u64)>,
}

/// Bursty traffic on `key`: `steps` moments, 0 to 300 ms apart (a quarter
/// of them at the same moment, one in eight after a lull of up to 3 s),
/// at each a burst of 1 to `3n / 2` requests
/// of cost 1 or 2 from one instance or the other, every request sent
/// whatever the previous got (a flood does not wait). `release`: each step
/// first releases a random share of the leases held. The admitted ones.
async fn bursts(ins: &Instances, key: &str, seed: u64, steps: u32, release: bool) -> Vec<Admitted> {
    let mut rng = Lcg(seed);
    let mut t = Duration::ZERO;
    let mut out = Vec::new();
    let mut held: Vec<(Lease, Duration, u64)> = Vec::new();
    for _ in 0..steps {
        match rng.next(8) {
            0 | 1 => {}
            // (a lull: a window or a log may empty, the slow instance open one)
            2 => t += Duration::from_millis(1 + rng.next(3_000)),
            _ => t += Duration::from_millis(1 + rng.next(300)),
        }
        ins.at(t);
        if release {
            let mut kept = Vec::new();
            for lease in held.drain(..) {
                if rng.next(3) == 0 {
                    ins.lims[0].release(&lease.0).await.unwrap();
                } else {
                    kept.push(lease);
                }
            }
            held = kept;
        }
        let by = rng.next(2) as usize;
        for _ in 0..1 + rng.next(3 * N / 2) {
            let cost = 1 + rng.next(4) / 3;
            let decision = ins.lims[by].check_n(key, cost).await.unwrap();
            if decision.allowed() {
                let before = held.iter().map(|(_, t, cost)| (*t, *cost)).collect();
                if let Some(lease) = decision.lease() {
                    held.push((lease.clone(), t, cost));
                }
                out.push(Admitted {
                    t,
                    by,
                    cost,
                    decision,
                    held: before,
                });
            }
        }
    }
    out
}

/// The units admitted in every half-open span of real time `[a, a + len)`
/// that starts at an admission: the largest.
fn most_within(admitted: &[Admitted], len: Duration) -> u64 {
    (0..admitted.len())
        .map(|i| {
            admitted[i..]
                .iter()
                .take_while(|a| a.t < admitted[i].t + len)
                .map(|a| a.cost)
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0)
}

/// The skew of the issue that found the old claim false: 20 per 2 s, two
/// instances half a second apart.
const BURST_N: u64 = 20;
const BURST_PERIOD: Duration = Duration::from_secs(2);
const BURST_SKEW: Duration = Duration::from_millis(500);

/// A fixed window under skew `s`: each window (opened by its first
/// admission, known by the start its decisions tell) admits at most `n`
/// and lasts at least `period - s` of real time; so up to `2n` across a
/// boundary in a span shorter than `period - s` (as without skew in a span
/// shorter than `period`), and at most `n × (1 + ⌈T / (period - s)⌉)` in
/// any span `T`. Bursts from both instances; then the case of the issue:
/// `2n` within `period - s` (40 within 1.5 s at 20 per 2 s, 0.5 s apart).
#[tokio::test]
async fn a_fixed_window_under_skew_lasts_at_least_period_minus_skew_and_admits_at_most_n() {
    let server = RedisServer::start();
    let quota = Quota::fixed_window(Rate::new(BURST_N, BURST_PERIOD));
    for ins in [
        Instances::redis(&server, quota.clone(), "fw-burst", BURST_SKEW),
        Instances::memory(quota.clone(), "fw-burst"),
    ] {
        let (n, period, skew) = (BURST_N, BURST_PERIOD, ins.skew);
        let shortest = period - skew;
        let admitted = bursts(&ins, "k", 7, 600, false).await;
        // each admission's window: its start, by the instances' shared readings
        let start = |a: &Admitted| {
            let reading = ins.reading(a.by, a.t);
            reading + a.decision.reset_after() - period
        };
        let mut windows: Vec<(Duration, Duration, u64)> = Vec::new();
        for a in &admitted {
            let s = start(a);
            match windows.last_mut() {
                Some((ws, _, units)) if *ws == s => *units += a.cost,
                _ => {
                    assert!(windows.iter().all(|w| w.0 != s), "a window came back");
                    windows.push((s, a.t, a.cost));
                }
            }
        }
        assert!(windows.len() > 20, "{} windows", windows.len());
        for w in &windows {
            assert!(w.2 <= n, "{w:?}: more than n in one window");
        }
        let gaps: Vec<Duration> = windows.windows(2).map(|p| p[1].1 - p[0].1).collect();
        let min_gap = gaps.iter().min().copied().unwrap();
        assert!(min_gap >= shortest, "a window lasted {min_gap:?}");
        if !skew.is_zero() {
            assert!(min_gap < period, "the skew shortened none: {min_gap:?}");
        }
        // any span shorter than period - s meets at most two windows
        let most = most_within(&admitted, shortest);
        assert!(most <= 2 * n, "{most} within {shortest:?}");
        assert!(
            most > n,
            "bursts across a boundary: {most} within {shortest:?}"
        );
        for t in [period, 3 * period, 10 * period] {
            let windows = 1 + us(t).div_ceil(us(shortest));
            assert!(most_within(&admitted, t) <= n * windows, "{t:?}");
        }

        // the case: 2n within period - s, and no more
        ins.at(period * 1000);
        assert_eq!(drain(&ins.lims[0], "issue").await, n);
        ins.at(period * 1000 + shortest - Duration::from_millis(1));
        assert_eq!(drain(&ins.lims[1], "issue").await, 0, "the window holds");
        ins.at(period * 1000 + shortest);
        assert_eq!(
            drain(&ins.lims[1], "issue").await,
            n,
            "2n within period - s"
        );
        assert_eq!(drain(&ins.lims[0], "issue").await, 0);
    }
}

/// A sliding log under skew `s`: at most `n` in any span of real time
/// shorter than `period - s`, for bursts from both instances.
#[tokio::test]
async fn a_sliding_log_under_skew_admits_at_most_n_in_any_span_shorter_than_period_minus_skew() {
    let server = RedisServer::start();
    let quota = Quota::sliding_window_log(Rate::new(BURST_N, BURST_PERIOD));
    for ins in [
        Instances::redis(&server, quota.clone(), "swl-burst", BURST_SKEW),
        Instances::memory(quota.clone(), "swl-burst"),
    ] {
        let shortest = BURST_PERIOD - ins.skew;
        let admitted = bursts(&ins, "k", 11, 600, false).await;
        assert!(admitted.len() as u64 > 20 * BURST_N, "{}", admitted.len());
        let most = most_within(&admitted, shortest);
        assert!(most <= BURST_N, "{most} within {shortest:?}");
        assert_eq!(most, BURST_N, "bursts fill it");
    }
}

/// GCRA, token bucket, leaky bucket under skew `s`: over any span `T` of
/// real time (from one admission to another), at most `(T + s) / interval
/// + burst` units: `s × rate` more than without skew.
#[tokio::test]
async fn a_theoretical_arrival_time_under_skew_admits_at_most_skew_times_rate_more_of_bursts() {
    let server = RedisServer::start();
    for strategy in [Strategy::Gcra, Strategy::TokenBucket, Strategy::LeakyBucket] {
        let quota = Quota::new(strategy, Rate::new(BURST_N, BURST_PERIOD)).burst(BURST_N / 2);
        let prefix = format!("tat-burst-{strategy}");
        for ins in [
            Instances::redis(&server, quota.clone(), &prefix, BURST_SKEW),
            Instances::memory(quota.clone(), &prefix),
        ] {
            let interval = us(BURST_PERIOD).div_ceil(BURST_N);
            let admitted = bursts(&ins, "k", 13, 600, false).await;
            assert!(admitted.len() as u64 > 20 * BURST_N, "{strategy}");
            let (mut tight, mut over) = (false, 0);
            for (i, first) in admitted.iter().enumerate() {
                let mut units = 0;
                for last in &admitted[i..] {
                    units += last.cost;
                    let span = us(last.t - first.t) + us(ins.skew);
                    let bound = span / interval + BURST_N / 2;
                    assert!(units <= bound, "{strategy}: {units} > {bound}");
                    tight |= units + 1 >= bound;
                    // (without skew the bound is `span / interval + burst`)
                    let unskewed = us(last.t - first.t) / interval + BURST_N / 2;
                    over = over.max(units.saturating_sub(unskewed));
                }
            }
            assert!(tight, "{strategy}: the bound is never approached");
            let most_over = us(ins.skew).div_ceil(interval);
            assert!(over <= most_over, "{strategy}: {over}");
            assert_eq!(over > 0, !ins.skew.is_zero(), "{strategy}: the skew costs");
        }
    }
}

/// Concurrency under skew `s`: every lease not released and younger (in
/// real time) than `lease_timeout - s` is counted by both instances, so at
/// each admission such leases hold at most `n`. Bursts of takes from both
/// instances, releases of a random third of the leases held at each step.
#[tokio::test]
async fn leases_younger_than_the_timeout_minus_skew_are_counted_by_every_instance() {
    let server = RedisServer::start();
    let quota = Quota::concurrency(BURST_N).lease_timeout(BURST_PERIOD);
    for ins in [
        Instances::redis(&server, quota.clone(), "lease-burst", BURST_SKEW),
        Instances::memory(quota.clone(), "lease-burst"),
    ] {
        let young = BURST_PERIOD - ins.skew;
        let admitted = bursts(&ins, "k", 17, 400, true).await;
        assert!(admitted.len() as u64 > 10 * BURST_N, "{}", admitted.len());
        let mut most = 0;
        for a in &admitted {
            // (its own cost too: it was counted with them)
            let counted = a.cost
                + a.held
                    .iter()
                    .filter(|(t, _)| a.t - *t < young)
                    .map(|(_, cost)| cost)
                    .sum::<u64>();
            most = most.max(counted);
            assert!(counted <= BURST_N, "{counted} young leases at {:?}", a.t);
        }
        assert_eq!(most, BURST_N, "bursts fill it");
    }
}

/// A sliding window counter under skew `s`: at each admission the
/// counter's estimate over real time (its aligned windows, as an instance
/// without skew would count them: `current + floor(previous × overlap)`)
/// is at most `n + ⌈n × s / period⌉`, for bursts from both instances.
#[tokio::test]
async fn a_sliding_window_counter_under_skew_estimates_at_most_the_skews_share_more() {
    let server = RedisServer::start();
    let quota = Quota::sliding_window_counter(Rate::new(BURST_N, BURST_PERIOD));
    for ins in [
        Instances::redis(&server, quota.clone(), "swc-burst", BURST_SKEW),
        Instances::memory(quota.clone(), "swc-burst"),
    ] {
        let (n, p) = (BURST_N, us(BURST_PERIOD));
        let bound = n + (n * us(ins.skew)).div_ceil(p);
        let admitted = bursts(&ins, "k", 19, 600, false).await;
        assert!(admitted.len() as u64 > 20 * n, "{}", admitted.len());
        let real = |a: &Admitted| us(T0 + a.t);
        let mut most = 0;
        for (i, a) in admitted.iter().enumerate() {
            let now = real(a);
            let w = now / p * p;
            let units = |from: u64, to: u64| -> u64 {
                admitted[..=i]
                    .iter()
                    .filter(|b| (from..to).contains(&real(b)))
                    .map(|b| b.cost)
                    .sum()
            };
            let (c, prev) = (units(w, now + 1), units(w.saturating_sub(p), w));
            let estimate = c + prev * (p - (now - w)) / p;
            assert!(estimate <= bound, "{estimate} > {bound} at {:?}", a.t);
            most = most.max(estimate);
        }
        if ins.skew.is_zero() {
            assert_eq!(most, n, "bursts fill it");
        } else {
            assert!(most > n, "the skew costs: {most}");
        }
    }
}
