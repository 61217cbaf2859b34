//! Clock skew between instances on the caller's clock (`Clock::Caller`):
//! what each strategy admits when two instances' clocks differ by `s`, against
//! the bounds of the guide's failure-modes chapter ("Clock skew under the
//! caller's clock"). The caller's clock sends its reading with each call
//! exactly as a manual clock does, so two `ManualClock`s `s` apart, on one
//! private Redis, are two instances whose clocks are `s` apart. The memory
//! store's part: the caller's clock decides there as on Redis.

use crate::common;

use std::time::Duration;

use common::{GENEROUS, RedisServer};
use tower_redis_ratelimit::clock::{Clock, ManualClock};
use tower_redis_ratelimit::strategy::Strategy;
use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimiter, RedisStore};

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
/// the slow one wrote expire `s` early, so at most `N` in any span of real
/// time shorter than `period - s` (the limit's `period` without skew): a
/// whole limit `s` sooner, not a fraction.
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
        for (i, start) in times.iter().enumerate() {
            let within = times[i..]
                .iter()
                .take_while(|t| **t < *start + short)
                .count();
            assert!(within as u64 <= N, "{strategy}: {within} from {start:?}");
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
