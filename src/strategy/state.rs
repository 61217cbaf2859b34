//! The memory side shared by every strategy: a key's state ([`Entry`]), a
//! strategy's answer ([`Raw`]), a quota's numbers ([`Params`]) and a
//! strategy's [`Algorithm`], which `eval.rs` applies to one key as its Lua
//! block does in Redis.
//!
//! Each algorithm (in its strategy's module) is a line-by-line twin of its
//! script in `lua/` (same integer microsecond arithmetic, same floating-point
//! steps where the script uses them), so both stores give identical
//! decisions; the differential tests hold them to it.

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
    pub(crate) fn allow(remaining: i64, reset: i64, delay: i64) -> Self {
        Raw {
            ok: true,
            remaining,
            reset,
            retry: -1,
            delay,
        }
    }
    pub(crate) fn deny(remaining: i64, reset: i64, retry: i64) -> Self {
        Raw {
            ok: false,
            remaining,
            reset,
            retry,
            delay: 0,
        }
    }
}

/// The state one storage key holds: the shapes the Lua bodies store.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    /// A window's start and count.
    Window { s: i64, c: i64 },
    /// Request times, ascending (in Redis a string of 7-byte times, or a
    /// list of decimal times, newest first, past 32).
    Log(Vec<i64>),
    /// An aligned window, its count and the previous window's count.
    Counter { w: i64, c: i64, p: i64 },
    /// A time: the end of a block (the penalty box's key).
    Tat(i64),
    /// A theoretical arrival time (GCRA, leaky bucket), or the time a token
    /// bucket is full again, and the emission interval it was written under
    /// (in Redis: one integer for an unnamed quota, whose key names its
    /// interval; 12 or 13 bytes holding both for a named one, see
    /// `lua/tat.lua`).
    Rated { tat: i64, interval: i64 },
    /// (expiry, member), ascending by expiry (a sorted set of members).
    Leases(Vec<(i64, String)>),
}

/// A key's state and when it expires (its TTL).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    pub(crate) value: Value,
    pub(crate) expires_at: i64,
}

/// A quota's numbers, as the scripts read them (microseconds): all a
/// strategy knows of its quota, computed once when the quota is compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Params {
    /// The rate's count.
    pub(crate) n: i64,
    /// The rate's period.
    pub(crate) period: i64,
    /// The burst (equal to `n` for strategies without one).
    pub(crate) burst: i64,
    /// `ceil(period / n)`.
    pub(crate) interval: i64,
    /// `interval`, to divide by.
    pub(crate) per_interval: Interval,
}

impl Params {
    /// The numbers of a quota of `n` per `period` µs, `burst` and `interval`
    /// µs per unit (each at most `i64::MAX`, as a compiled quota's are).
    pub(crate) fn new(n: u64, period: u64, burst: u64, interval: u64) -> Self {
        Params {
            n: n as i64,
            period: period as i64,
            burst: burst as i64,
            interval: interval as i64,
            per_interval: Interval::new(interval),
        }
    }
}

/// An [`Algorithm::Returns`].
pub(crate) type Decide = fn(
    slot: &mut Option<Entry>,
    q: Params,
    now: i64,
    cost: i64,
    nonce: &str,
) -> (Raw, Option<Value>);

/// A strategy's memory algorithm: decides a request of `cost` at `now` on a
/// key's live state (`None`: no state), as its Lua block does.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Algorithm {
    /// It may update `slot` as the script's reads do (dropping expired
    /// entries); it returns its answer and the state to write if the request
    /// is allowed and applied.
    Returns(Decide),
    /// The theoretical-arrival-time algorithm (`tat.rs`), one integer
    /// updated in place; `queue`: an admitted request waits for its slot.
    Tat { queue: bool },
}

/// Drops a state that has expired at `now`, as Redis would have.
#[inline(always)]
pub(crate) fn expire(slot: &mut Option<Entry>, now: i64) {
    if slot.as_ref().is_some_and(|e| e.expires_at <= now) {
        set(slot, None);
    }
}

/// Puts `new` in `slot`, dropping the old state only where it holds memory
/// (a log, leases): the usual states are integers, and the drop of an
/// `Option<Entry>` is a call, which every decision on an expired key made
/// twice (the expired state, then the `None` it left).
#[inline(always)]
pub(crate) fn set(slot: &mut Option<Entry>, new: Option<Entry>) {
    let old = std::mem::replace(slot, new);
    // (every variant named: a new one must say whether it holds memory)
    let holds_memory = match &old {
        Some(Entry {
            value: Value::Log(_) | Value::Leases(_),
            ..
        }) => true,
        Some(Entry {
            value:
                Value::Window { .. } | Value::Counter { .. } | Value::Tat(_) | Value::Rated { .. },
            ..
        })
        | None => false,
    };
    if holds_memory {
        drop(old);
    } else {
        // (nothing to free: no entry, or one of integers only)
        std::mem::forget(old);
    }
}

/// Removes `members` from a sorted set of members, as `ZREM` does (a key
/// left empty is gone).
pub(crate) fn remove_members(slot: &mut Option<Entry>, members: &[String]) {
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

/// The TTL Redis would hold, in microseconds: whole milliseconds rounded up, at least 1.
#[inline]
pub(crate) fn ttl_us(reset: i64) -> i64 {
    (reset.max(1) + 999) / 1000 * 1000
}

/// A quota's emission interval as a divisor by multiplication: a division
/// took some 6% of a memory-store decision's time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Interval(strength_reduce::StrengthReducedU64);

impl Interval {
    /// `interval` (µs): at least 1.
    pub(crate) fn new(interval: u64) -> Self {
        Interval(strength_reduce::StrengthReducedU64::new(interval.max(1)))
    }

    /// `floor(a / interval)` for `a >= 0` (else as [`floor_div`]).
    #[inline]
    pub(crate) fn floor_div(self, a: i64) -> i64 {
        match u64::try_from(a) {
            Ok(a) => (a / self.0) as i64,
            Err(_) => floor_div(a, self.0.get() as i64),
        }
    }
}

impl PartialEq for Interval {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

impl Eq for Interval {}

/// Lua's `math.floor(a / b)` on integers.
pub(crate) fn floor_div(a: i64, b: i64) -> i64 {
    a.div_euclid(b)
}

/// A strategy's give-back twin (see `StrategySpec::give_back`): gives back
/// up to `units` of a reservation taken at `at` whose reply's
/// `reset_after` ends at `fin`, on a key's live state, as its Lua block does.
pub(crate) type GiveBackFn =
    fn(slot: &mut Option<Entry>, q: Params, now: i64, units: i64, at: i64, fin: i64);

/// A strategy's adjust twin (see `StrategySpec::adjust`): charges `units`
/// (`> 0`) or gives back `-units` (`< 0`) on a key's live state, as its Lua
/// block does.
pub(crate) type AdjustFn = fn(slot: &mut Option<Entry>, q: Params, now: i64, units: i64);

/// The longest debt an adjust leaves, in µs (about 35.7 years): one adjust
/// moves a quota by at most what its rate repays in this time, and no state
/// holds more. The store's arithmetic needs it: Lua numbers are doubles,
/// exact below 2^53, and times are µs since 1970 (about 2^50.6).
pub(crate) const MAX_DEBT_US: i64 = 1 << 50;

/// The units a quota of `interval` µs per unit repays in [`MAX_DEBT_US`].
pub(crate) fn max_debt_units(interval: i64) -> i64 {
    MAX_DEBT_US / interval.max(1)
}
