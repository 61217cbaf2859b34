//! The theoretical-arrival-time algorithm shared by the GCRA, the token
//! bucket and the leaky bucket (`lua/tat.lua`): they differ only in whether an
//! admitted request waits for its slot (the leaky bucket's queue).

use super::state::{Entry, Params, Raw, Value, floor_div, ttl_us};

/// The Lua block, after the strategy's `local queue = …` line.
pub(super) const LUA: &str = concat!(
    include_str!("../../lua/tat_value.lua"),
    include_str!("../../lua/tat.lua")
);

/// The most a rescaled TAT owes, in µs (2^50, about 35 years; `lua/tat.lua`).
const MAX_OWED: i64 = 1 << 50;

/// A key's TAT and the interval it was written under, if it holds one.
#[inline(always)]
fn read(slot: &Option<Entry>) -> Option<(i64, i64)> {
    match slot {
        Some(Entry {
            value: Value::Rated { tat, interval },
            ..
        }) => Some((*tat, *interval)),
        _ => None,
    }
}

/// A TAT ahead of now written under the interval `iv`, under `interval`:
/// the units it owes, rounded up, at `interval` (at most [`MAX_OWED`]), as
/// `lua/tat.lua` rescales it.
fn rescale(tat: i64, iv: i64, interval: i64, now: i64) -> i64 {
    // (tat > now, iv >= 1: Lua's ceil of the quotient is exact below 2^53)
    let units = ((tat - now) as u64).div_ceil(iv.max(1) as u64) as i64;
    now + units.saturating_mul(interval).min(MAX_OWED)
}

/// Writes `tat` under `interval` into `slot`, with the TTL its state needs.
#[inline(always)]
fn write(slot: &mut Option<Entry>, tat: i64, interval: i64, now: i64) {
    let expires_at = now + ttl_us(tat - now);
    match slot {
        // (in place: no drop of the old state)
        Some(Entry {
            value: Value::Rated {
                tat: t,
                interval: i,
            },
            expires_at: at,
        }) => {
            *t = tat;
            *i = interval;
            *at = expires_at;
        }
        _ => super::state::set(
            slot,
            Some(Entry {
                value: Value::Rated { tat, interval },
                expires_at,
            }),
        ),
    }
}

/// One value, the TAT and its interval: a request of `cost` pushes the TAT
/// by `cost * interval` and is allowed if it stays at most `burst *
/// interval` ahead of now. With `queue` an admitted request is told to wait
/// until its slot (`delay`). The state is written in place, if the request
/// is allowed and `write`; a TAT written under another interval (the limits
/// changed) is rescaled first, and written down rescaled whatever the
/// answer, as `lua/tat.lua` does for a named quota (an unnamed one never
/// meets another interval: its key names it).
#[inline(always)]
pub(super) fn decide(
    slot: &mut Option<Entry>,
    q: Params,
    now: i64,
    cost: i64,
    queue: bool,
    write: bool,
) -> Raw {
    let Params {
        burst, interval, ..
    } = q;
    let (tat, moved) = match read(slot) {
        Some((t, iv)) if iv != interval && t > now => (rescale(t, iv, interval, now), true),
        Some((t, _)) => (t.max(now), false),
        None => (now, false),
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
        if moved {
            self::write(slot, tat, interval, now);
        }
        return Raw::deny(remaining, tat - now, retry);
    }
    let delay = if queue && cost > 0 { tat - now } else { 0 };
    let reset = new_tat - now;
    if write {
        self::write(slot, new_tat, interval, now);
    } else if moved {
        self::write(slot, tat, interval, now);
    }
    Raw::allow(q.per_interval.floor_div(now + tau - new_tat), reset, delay)
}

/// How long a local budget taken from a bucket (the GCRA, the token bucket)
/// may be spent: the hold, not the take's `reset_after`. A bucket has no
/// window whose count its units could leak into: they were counted when
/// taken, and what the bucket refills meanwhile is its rate, to which the
/// local budgets' bound adds the `n - 1` an instance holds. Ending them at
/// the refill would end them within `n` intervals of a nearly full bucket
/// (100 µs for a take of 100 at 1 000 000 a second): before the take's
/// reply on a loaded network, each take then given back at once, two store
/// calls per decision.
pub(super) const fn horizon(_reset: i64, _period: i64) -> i64 {
    i64::MAX
}

/// The give-back block (`lua/give_back_tat.lua`) of the GCRA and the token bucket.
pub(super) const GIVE_BACK_LUA: &str = concat!(
    include_str!("../../lua/tat_value.lua"),
    include_str!("../../lua/give_back_tat.lua")
);

/// The twin of `lua/give_back_tat.lua`: takes off the TAT the part of
/// `units` still ahead of now (at most `fin - now`), never below now; on a
/// TAT written under another interval, rescaled first, the whole units of
/// that part at the new interval.
pub(super) fn give_back(
    slot: &mut Option<Entry>,
    q: Params,
    now: i64,
    units: i64,
    _at: i64,
    fin: i64,
) {
    let Some((mut tat, iv)) = read(slot) else {
        return;
    };
    let interval = q.interval;
    if tat > now && fin > now {
        let mut credit = units.saturating_mul(iv).min(fin - now);
        if iv != interval {
            tat = rescale(tat, iv, interval, now);
            credit = floor_div(credit, iv) * interval;
        }
        let t = tat - credit;
        if t > now {
            write(slot, t, interval, now);
        } else {
            *slot = None;
        }
    }
}

/// The adjust block (`lua/adjust_tat.lua`) of the GCRA and the token bucket,
/// and the charge block of the leaky bucket (run for `units > 0` only).
pub(super) const ADJUST_LUA: &str = concat!(
    include_str!("../../lua/tat_value.lua"),
    include_str!("../../lua/adjust_tat.lua")
);

/// The twin of `lua/adjust_tat.lua`: moves the TAT (at least now; one
/// written under another interval rescaled first) by `units * interval`,
/// past the burst for a charge (at most `MAX_DEBT_US` past now), never
/// below now. The leaky bucket's charge alone (`units > 0`): it pushes the
/// end of its queue, and no slot already promised.
pub(super) fn adjust(slot: &mut Option<Entry>, q: Params, now: i64, units: i64) {
    let interval = q.interval;
    let tat = match read(slot) {
        Some((t, iv)) if iv != interval && t > now => rescale(t, iv, interval, now),
        Some((t, _)) => t.max(now),
        None => now,
    };
    // (`units * interval` is at most MAX_DEBT_US either way: eval::adjust)
    let t = (tat + units * interval).min(now + super::state::MAX_DEBT_US);
    if t > now {
        write(slot, t, interval, now);
    } else {
        *slot = None;
    }
}
