//! The theoretical-arrival-time algorithm shared by the GCRA, the token
//! bucket and the leaky bucket (`lua/tat.lua`): they differ only in whether an
//! admitted request waits for its slot (the leaky bucket's queue).

use super::state::{Entry, Params, Raw, Value, floor_div, ttl_us};

/// The Lua block, after the strategy's `local queue = …` line.
pub(super) const LUA: &str = include_str!("../../lua/tat.lua");

/// One string, the TAT: a request of `cost` pushes it by `cost * interval`
/// and is allowed if it stays at most `burst * interval` ahead of now. With
/// `queue` an admitted request is told to wait until its slot (`delay`).
/// The state is written in place, if the request is allowed and `write`.
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
        return Raw::deny(remaining, tat - now, retry);
    }
    let delay = if queue && cost > 0 { tat - now } else { 0 };
    let reset = new_tat - now;
    if write {
        let expires_at = now + ttl_us(reset);
        match slot {
            // (in place: no drop of the old state)
            Some(Entry {
                value: Value::Tat(t),
                expires_at: at,
            }) => {
                *t = new_tat;
                *at = expires_at;
            }
            _ => super::state::set(
                slot,
                Some(Entry {
                    value: Value::Tat(new_tat),
                    expires_at,
                }),
            ),
        }
    }
    Raw::allow(q.per_interval.floor_div(now + tau - new_tat), reset, delay)
}

/// The give-back block (`lua/give_back_tat.lua`) of the GCRA and the token bucket.
pub(super) const GIVE_BACK_LUA: &str = include_str!("../../lua/give_back_tat.lua");

/// The twin of `lua/give_back_tat.lua`: takes off the TAT the part of
/// `units` still ahead of now (at most `fin - now`), never below now.
pub(super) fn give_back(
    slot: &mut Option<Entry>,
    q: Params,
    now: i64,
    units: i64,
    _at: i64,
    fin: i64,
) {
    let Some(Entry {
        value: Value::Tat(tat),
        ..
    }) = slot
    else {
        return;
    };
    let tat = *tat;
    if tat > now && fin > now {
        let credit = (units * q.interval).min(fin - now);
        let t = tat - credit;
        *slot = (t > now).then(|| Entry {
            value: Value::Tat(t),
            expires_at: now + ttl_us(t - now),
        });
    }
}

/// The adjust block (`lua/adjust_tat.lua`) of the GCRA and the token bucket.
pub(super) const ADJUST_LUA: &str = include_str!("../../lua/adjust_tat.lua");

/// The twin of `lua/adjust_tat.lua`: moves the TAT (at least now) by
/// `units * interval`, past the burst for a charge (at most
/// `MAX_DEBT_US` past now), never below now.
pub(super) fn adjust(slot: &mut Option<Entry>, q: Params, now: i64, units: i64) {
    let tat = match slot {
        Some(Entry {
            value: Value::Tat(t),
            ..
        }) => (*t).max(now),
        _ => now,
    };
    // (`units * interval` is at most MAX_DEBT_US either way: state::adjust)
    let t = (tat + units * q.interval).min(now + super::state::MAX_DEBT_US);
    *slot = (t > now).then(|| Entry {
        value: Value::Tat(t),
        expires_at: now + ttl_us(t - now),
    });
}
