//! The strategies in Rust, for [`MemoryStore`](crate::MemoryStore).
//!
//! Each function is a line-by-line twin of its script in `lua/` (same
//! integer microsecond arithmetic, same floating-point steps where the script
//! uses them), so both stores give identical decisions; the differential
//! tests hold them to it.

use crate::quota::QuotaSpec;
use crate::strategy::Strategy;

/// A strategy's answer, in the scripts' units: see `lua/prelude.lua`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Raw {
    pub(crate) ok: bool,
    pub(crate) remaining: i64,
    pub(crate) reset: i64,
    /// -1: never.
    pub(crate) retry: i64,
    pub(crate) delay: i64,
}

impl Raw {
    fn allow(remaining: i64, reset: i64, delay: i64) -> Self {
        Raw {
            ok: true,
            remaining,
            reset,
            retry: -1,
            delay,
        }
    }
    fn deny(remaining: i64, reset: i64, retry: i64) -> Self {
        Raw {
            ok: false,
            remaining,
            reset,
            retry,
            delay: 0,
        }
    }
}

/// The state one storage key holds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Window {
        s: i64,
        c: i64,
    },
    /// Request times, ascending.
    Log(Vec<i64>),
    Counter {
        w: i64,
        c: i64,
        p: i64,
    },
    Bucket {
        t: i64,
        s: i64,
    },
    Tat(i64),
    /// (expiry, member), ascending by expiry.
    Leases(Vec<(i64, String)>),
}

/// A key's state and when it expires (its TTL).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    pub(crate) value: Value,
    pub(crate) expires_at: i64,
}

/// Evaluates one quota on one key's state, as the script's strategy function does.
pub(crate) fn run(
    slot: &mut Option<Entry>,
    q: &QuotaSpec,
    now: i64,
    cost: i64,
    nonce: &str,
    apply: bool,
) -> Raw {
    if slot.as_ref().is_some_and(|e| e.expires_at <= now) {
        *slot = None;
    }
    let n = q.limit as i64;
    let period = q.period_us as i64;
    let burst = q.burst as i64;
    let interval = q.interval_us as i64;
    let write = apply && cost > 0;
    let (raw, new) = match q.strategy {
        Strategy::FixedWindow => fixed_window(slot, n, period, now, cost),
        Strategy::SlidingWindowLog => sliding_log(slot, n, period, now, cost),
        Strategy::SlidingWindowCounter => sliding_counter(slot, n, period, now, cost),
        Strategy::TokenBucket => token_bucket(slot, burst, interval, now, cost),
        Strategy::LeakyBucket => tat_policy(slot, burst, interval, now, cost, true),
        Strategy::Gcra => tat_policy(slot, burst, interval, now, cost, false),
        Strategy::Concurrency => concurrency(slot, n, period, now, cost, nonce),
    };
    if raw.ok
        && write
        && let Some(value) = new
    {
        *slot = Some(Entry {
            value,
            expires_at: now + ttl_us(raw.reset),
        });
    }
    raw
}

/// The TTL Redis would hold, in microseconds: whole milliseconds rounded up, at least 1.
fn ttl_us(reset: i64) -> i64 {
    (reset.max(1) + 999) / 1000 * 1000
}

fn floor_div(a: i64, b: i64) -> i64 {
    a.div_euclid(b)
}

fn fixed_window(
    slot: &Option<Entry>,
    n: i64,
    period: i64,
    now: i64,
    cost: i64,
) -> (Raw, Option<Value>) {
    let (mut s, mut c) = match slot {
        Some(Entry {
            value: Value::Window { s, c },
            ..
        }) => (*s, *c),
        _ => (now, 0),
    };
    if now >= s + period {
        (s, c) = (now, 0);
    }
    let left = s + period - now;
    if cost > n || c + cost > n {
        let reset = if c > 0 { left } else { 0 };
        let retry = if cost <= n { left } else { -1 };
        return (Raw::deny(n - c, reset, retry), None);
    }
    let after = c + cost;
    let reset = if after > 0 { left } else { 0 };
    (
        Raw::allow(n - after, reset, 0),
        Some(Value::Window { s, c: after }),
    )
}

fn sliding_log(
    slot: &mut Option<Entry>,
    n: i64,
    period: i64,
    now: i64,
    cost: i64,
) -> (Raw, Option<Value>) {
    let mut log = match slot.take() {
        Some(Entry {
            value: Value::Log(log),
            ..
        }) => log,
        _ => Vec::new(),
    };
    // ZREMRANGEBYSCORE -inf (now - period); keeps its TTL (a no-op on TTL in Redis).
    log.retain(|t| *t > now - period);
    let c = log.len() as i64;
    let newest = log.last().copied().unwrap_or(now - period);
    let mut reset = if c > 0 { newest + period - now } else { 0 };
    if !log.is_empty() {
        *slot = Some(Entry {
            value: Value::Log(log.clone()),
            expires_at: now + ttl_us(reset),
        });
    }
    if cost > n || c + cost > n {
        let retry = if cost <= n {
            log[(c + cost - n - 1) as usize] + period - now
        } else {
            -1
        };
        return (Raw::deny(n - c, reset, retry), None);
    }
    if cost > 0 {
        reset = newest.max(now) + period - now;
        let at = log.partition_point(|t| *t <= now);
        log.splice(at..at, std::iter::repeat_n(now, cost as usize));
    }
    (Raw::allow(n - c - cost, reset, 0), Some(Value::Log(log)))
}

fn sliding_counter(
    slot: &Option<Entry>,
    n: i64,
    period: i64,
    now: i64,
    cost: i64,
) -> (Raw, Option<Value>) {
    let mut w = floor_div(now, period);
    let (c, p) = match slot {
        Some(Entry {
            value: Value::Counter { w: sw, c, p },
            ..
        }) => {
            if *sw == w {
                (*c, *p)
            } else if *sw == w - 1 {
                (0, *c)
            } else if *sw > w {
                w = *sw;
                (*c, *p)
            } else {
                (0, 0)
            }
        }
        _ => (0, 0),
    };
    let e = (now - w * period).max(0);
    let est = (p as f64 * ((period - e) as f64 / period as f64)).floor() as i64;
    let used = c + est;
    let reset_of = |cur: i64| {
        if cur > 0 {
            (w + 2) * period - now
        } else if p > 0 {
            (w + 1) * period - now
        } else {
            0
        }
    };
    if cost > n || used + cost > n {
        let retry = if cost > n {
            -1
        } else {
            let a = n - cost - c;
            if a >= 0 {
                let emin = period + 1 - ((a + 1) as f64 * period as f64 / p as f64).ceil() as i64;
                emin - e
            } else {
                let emin = (period + 1
                    - ((n - cost + 1) as f64 * period as f64 / c as f64).ceil() as i64)
                    .max(0);
                (w + 1) * period - now + emin
            }
        };
        return (Raw::deny((n - used).max(0), reset_of(c), retry), None);
    }
    (
        Raw::allow(n - used - cost, reset_of(c + cost), 0),
        Some(Value::Counter { w, c: c + cost, p }),
    )
}

fn token_bucket(
    slot: &Option<Entry>,
    burst: i64,
    interval: i64,
    now: i64,
    cost: i64,
) -> (Raw, Option<Value>) {
    let (mut t, mut s) = match slot {
        Some(Entry {
            value: Value::Bucket { t, s },
            ..
        }) => (*t, *s),
        _ => (burst, now),
    };
    if now > s {
        let add = floor_div(now - s, interval);
        if t + add >= burst {
            (t, s) = (burst, now);
        } else {
            (t, s) = (t + add, s + add * interval);
        }
    }
    let reset_of = |tokens: i64| {
        if tokens >= burst {
            0
        } else {
            s + (burst - tokens) * interval - now
        }
    };
    if cost > burst || cost > t {
        let retry = if cost <= burst {
            s + (cost - t) * interval - now
        } else {
            -1
        };
        return (Raw::deny(t, reset_of(t), retry), None);
    }
    (
        Raw::allow(t - cost, reset_of(t - cost), 0),
        Some(Value::Bucket { t: t - cost, s }),
    )
}

fn tat_policy(
    slot: &Option<Entry>,
    burst: i64,
    interval: i64,
    now: i64,
    cost: i64,
    queue: bool,
) -> (Raw, Option<Value>) {
    let tat = match slot {
        Some(Entry {
            value: Value::Tat(t),
            ..
        }) => (*t).max(now),
        _ => now,
    };
    let tau = burst * interval;
    // (a cost above the burst is checked first: cost * interval could overflow)
    let new_tat = if cost > burst {
        i64::MAX
    } else {
        tat + cost * interval
    };
    if cost > burst || new_tat - now > tau {
        let retry = if cost <= burst {
            new_tat - tau - now
        } else {
            -1
        };
        let remaining = floor_div(now + tau - tat, interval);
        return (Raw::deny(remaining, tat - now, retry), None);
    }
    let delay = if queue && cost > 0 { tat - now } else { 0 };
    (
        Raw::allow(
            floor_div(now + tau - new_tat, interval),
            new_tat - now,
            delay,
        ),
        Some(Value::Tat(new_tat)),
    )
}

fn concurrency(
    slot: &mut Option<Entry>,
    n: i64,
    period: i64,
    now: i64,
    cost: i64,
    nonce: &str,
) -> (Raw, Option<Value>) {
    let mut leases = match slot.take() {
        Some(Entry {
            value: Value::Leases(l),
            expires_at,
        }) => {
            *slot = None;
            let kept: Vec<_> = l.into_iter().filter(|(exp, _)| *exp > now).collect();
            if !kept.is_empty() {
                *slot = Some(Entry {
                    value: Value::Leases(kept.clone()),
                    expires_at,
                });
            }
            kept
        }
        _ => Vec::new(),
    };
    let c = leases.len() as i64;
    let mut last = leases.last().map_or(now, |(exp, _)| *exp);
    if cost > n || c + cost > n {
        let retry = if cost <= n {
            leases[(c + cost - n - 1) as usize].0 - now
        } else {
            -1
        };
        return (Raw::deny(n - c, last - now, retry), None);
    }
    if cost > 0 {
        last = last.max(now + period);
        let at = leases.partition_point(|(exp, _)| *exp <= now + period);
        let new = (0..cost).map(|i| (now + period, format!("{nonce}.{i}")));
        leases.splice(at..at, new);
    }
    (
        Raw::allow(n - c - cost, last - now, 0),
        Some(Value::Leases(leases)),
    )
}

/// Releases a lease's members from a key, as `ZREM` does.
pub(crate) fn release(slot: &mut Option<Entry>, members: &[String]) {
    if let Some(Entry {
        value: Value::Leases(l),
        ..
    }) = slot
    {
        l.retain(|(_, m)| !members.contains(m));
        if l.is_empty() {
            *slot = None;
        }
    }
}
