//! What the suite's tests share: manual clocks, quotas, assertions.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tower_redis_ratelimit::clock::{Clock, ManualClock};
use tower_redis_ratelimit::strategy::Strategy;
use tower_redis_ratelimit::{Decision, Quota, Rate, RateLimiter};

use crate::suite::harness::Harness;

/// Where manual clocks start: far from zero, aligned to 10 s windows.
pub(crate) const T0: Duration = Duration::from_secs(1_000_000);

pub(crate) fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

pub(crate) fn us(v: u64) -> Duration {
    Duration::from_micros(v)
}

/// A limiter with one quota and its own manual clock at [`T0`].
pub(crate) fn manual(h: &impl Harness, prefix: &str, quota: Quota) -> (RateLimiter, ManualClock) {
    let clock = ManualClock::new(T0);
    let lim = h.limiter(prefix, vec![quota], clock.clone().into());
    (lim, clock)
}

/// A quota of `strategy` admitting `n` per `period` (leases time out after `period`).
pub(crate) fn quota(strategy: Strategy, n: u64, period: Duration) -> Quota {
    match strategy {
        Strategy::Concurrency => Quota::concurrency(n).lease_timeout(period),
        s => Quota::new(s, Rate::new(n, period)),
    }
}

#[track_caller]
pub(crate) fn allowed(d: &Decision, remaining: u64, reset_after: Duration) {
    assert!(d.allowed(), "expected allowed: {d:?}");
    assert_eq!(d.remaining(), remaining, "remaining: {d:?}");
    assert_eq!(d.reset_after(), reset_after, "reset_after: {d:?}");
    assert_eq!(d.retry_after(), None, "retry_after: {d:?}");
}

#[track_caller]
pub(crate) fn denied(d: &Decision, remaining: u64, retry_after: Option<Duration>) {
    assert!(!d.allowed(), "expected denied: {d:?}");
    assert_eq!(d.remaining(), remaining, "remaining: {d:?}");
    assert_eq!(d.retry_after(), retry_after, "retry_after: {d:?}");
    assert_eq!(d.delay(), None);
}

/// PTTL of `key` in ms, if the store is Redis.
pub(crate) async fn pttl(h: &impl Harness, key: &str) -> Option<i64> {
    let mut cmd = redis::cmd("PTTL");
    cmd.arg(key);
    h.redis(cmd).await
}

// ---------------------------------------------------------------------------
// Exactness under concurrency, on the store's own clock
// ---------------------------------------------------------------------------

/// `calls` concurrent checks of one key, spread over `instances` limiters; how many were admitted.
pub(crate) async fn admitted(
    h: &impl Harness,
    prefix: &str,
    quotas: Vec<Quota>,
    instances: usize,
    calls: usize,
) -> u64 {
    let limiters: Vec<RateLimiter> = (0..instances)
        .map(|_| h.limiter(prefix, quotas.clone(), Clock::Store))
        .collect();
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..calls {
        let lim = limiters[i % instances].clone();
        let admitted = admitted.clone();
        tasks.push(tokio::spawn(async move {
            if lim.check("hot-key").await.unwrap().allowed() {
                admitted.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    admitted.load(Ordering::Relaxed)
}

/// `instances` limiters with `tasks` tasks each, every task checking each
/// of `keys` keys `rounds` times (starting at a key of its own), all at
/// once; how many were admitted per key. On Redis the checks go out batched.
pub(crate) async fn admitted_per_key(
    h: &impl Harness,
    prefix: &str,
    quotas: Vec<Quota>,
    (instances, tasks): (usize, usize),
    keys: usize,
    rounds: usize,
) -> Vec<u64> {
    let limiters: Vec<RateLimiter> = (0..instances)
        .map(|_| h.limiter(prefix, quotas.clone(), Clock::Store))
        .collect();
    let admitted: Arc<Vec<AtomicU64>> = Arc::new((0..keys).map(|_| AtomicU64::new(0)).collect());
    let mut all = Vec::new();
    for t in 0..instances * tasks {
        let lim = limiters[t % instances].clone();
        let admitted = admitted.clone();
        all.push(tokio::spawn(async move {
            for i in 0..keys * rounds {
                let k = (t + i) % keys;
                if lim.check(format!("key-{k}")).await.unwrap().allowed() {
                    admitted[k].fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in all {
        t.await.unwrap();
    }
    admitted.iter().map(|a| a.load(Ordering::Relaxed)).collect()
}

// ---------------------------------------------------------------------------
// TTLs and expiry
// ---------------------------------------------------------------------------

/// The longest a key of `strategy` may live for a window of `period_ms`: the
/// sliding window counter keeps a window as the next one's "previous".
pub(crate) fn max_ttl_ms(strategy: Strategy, period_ms: i64) -> i64 {
    if strategy == Strategy::SlidingWindowCounter {
        2 * period_ms
    } else {
        period_ms
    }
}

// ---------------------------------------------------------------------------
// Manual clock readings anywhere in range
// ---------------------------------------------------------------------------

/// A decision without its random lease id.
pub(crate) fn comparable(d: &Decision) -> String {
    let quotas: Vec<_> = d
        .quotas()
        .map(|q| {
            (
                q.allowed(),
                q.remaining(),
                q.reset_after(),
                q.retry_after(),
                q.name(),
            )
        })
        .collect();
    format!(
        "allowed {} remaining {} reset {:?} retry {:?} delay {:?} quota {} lease {} {quotas:?}",
        d.allowed(),
        d.remaining(),
        d.reset_after(),
        d.retry_after(),
        d.delay(),
        d.quota(),
        d.lease().is_some()
    )
}

/// A few calls on a manual clock starting at `start`, advancing it.
pub(crate) async fn clock_script(
    h: &impl Harness,
    prefix: &str,
    quotas: Vec<Quota>,
    start: Duration,
) -> Vec<String> {
    let clock = ManualClock::new(start);
    let lim = h.limiter(prefix, quotas, clock.clone().into());
    let mut out = Vec::new();
    let mut step = async |cost: u64, advance: Duration| {
        let d = lim
            .check_n("k", cost)
            .await
            .unwrap_or_else(|e| panic!("{}: {prefix} at {:?}: {e}", h.name(), clock.now()));
        out.push(comparable(&d));
        clock.advance(advance);
    };
    step(1, us(1)).await; // 0 then 1 on Redis: the state written at 0 is read at 1
    step(1, Duration::ZERO).await;
    step(1, us(1)).await;
    step(2, ms(3_000)).await;
    step(1, ms(10_000)).await;
    step(1, Duration::ZERO).await;
    step(0, Duration::ZERO).await;
    out
}

/// Remaining and allowed of a two-quota decision's quotas.
pub(crate) fn state_plain(d: &Decision) -> (u64, bool, u64, bool) {
    let q: Vec<_> = d.quotas().collect();
    (
        q[0].remaining(),
        q[0].allowed(),
        q[1].remaining(),
        q[1].allowed(),
    )
}
