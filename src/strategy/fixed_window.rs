//! [`Strategy::FixedWindow`](super::Strategy::FixedWindow): one counter per window, the
//! window starting at the key's first hit (`lua/fixed_window.lua`), or
//! aligned to the epoch ([`ALIGNED`], `lua/fixed_window_aligned.lua`), or to
//! a calendar ([`CALENDAR`], `lua/fixed_window_calendar.lua`).

use super::state::{Algorithm, Entry, Params, Raw, Value, floor_div, ttl_us};
use super::{Adjust, Bound, GiveBack, HeaderPolicy, Lua, StrategySpec, until_reset};

pub(super) const SPEC: StrategySpec = StrategySpec {
    name: "fixed-window",
    tag: "fw",
    key_tag: 'f',
    period_in_named_key: true,
    lua: Lua {
        id: 1,
        body: &[include_str!("../../lua/fixed_window.lua")],
        fast_path: Some(include_str!("../../lua/fixed_window_fast.lua")),
        zset_helpers: false,
        reads_time: false,
        reads_burst: false,
    },
    algorithm: Algorithm::Returns(decide),
    takes_burst: false,
    count_bound: None,
    period_field: "rate.period",
    needs_nonce: false,
    holds_leases: false,
    bound: Bound::Window,
    guarantee: "at most n in one window (opened by a key's first hit), so at most 2n in any span of one period",
    denials_cacheable: true,
    header: HeaderPolicy::Window,
    give_back: GiveBack::Units {
        lua: include_str!("../../lua/give_back_fixed_window.lua"),
        twin: give_back,
        horizon: until_reset,
    },
    adjust: Adjust::Units {
        lua: include_str!("../../lua/adjust_fixed_window.lua"),
        twin: adjust,
    },
};

/// A fixed window aligned to the epoch ([`Quota::aligned`](crate::Quota::aligned)):
/// the windows `[k * period, (k + 1) * period)` of the clock's microseconds
/// since the Unix epoch, on every key at once. Its own key tag and Lua id
/// (its state is a hash on every clock); the rest as [`SPEC`].
pub(super) const ALIGNED: StrategySpec = StrategySpec {
    name: "fixed-window",
    tag: "fwa",
    key_tag: 'a',
    period_in_named_key: true,
    lua: Lua {
        id: 8,
        body: &[include_str!("../../lua/fixed_window_aligned.lua")],
        fast_path: None,
        zset_helpers: false,
        reads_time: true,
        reads_burst: false,
    },
    algorithm: Algorithm::Returns(decide_aligned),
    takes_burst: false,
    count_bound: None,
    period_field: "rate.period",
    needs_nonce: false,
    holds_leases: false,
    bound: Bound::AlignedWindow,
    guarantee: "at most n in one aligned window, so at most 2n in any span of one period",
    denials_cacheable: true,
    header: HeaderPolicy::Window,
    give_back: GiveBack::Units {
        lua: include_str!("../../lua/give_back_fixed_window_aligned.lua"),
        twin: give_back,
        horizon: until_reset,
    },
    adjust: Adjust::Units {
        lua: include_str!("../../lua/adjust_fixed_window_aligned.lua"),
        twin: adjust_aligned,
    },
};

/// A fixed window of a calendar (`Quota::calendar`): a month or a year of
/// a time zone, whose bounds each call brings (`Params::calendar`). Its own
/// key tag and Lua id; a reservation's unspent units go back into its own
/// window (keyed by the window's end, which is the take's `fin`), but no
/// local budgets.
pub(super) const CALENDAR: StrategySpec = StrategySpec {
    name: "fixed-window",
    tag: "fwc",
    key_tag: 'z',
    period_in_named_key: true,
    lua: Lua {
        id: 9,
        body: &[include_str!("../../lua/fixed_window_calendar.lua")],
        fast_path: None,
        zset_helpers: false,
        reads_time: true,
        reads_burst: false,
    },
    algorithm: Algorithm::Returns(decide_calendar),
    takes_burst: false,
    count_bound: None,
    period_field: "rate.period",
    needs_nonce: false,
    holds_leases: false,
    bound: Bound::AlignedWindow,
    guarantee: "at most n in one calendar window, so at most 2n across the end of one",
    denials_cacheable: true,
    header: HeaderPolicy::Window,
    give_back: GiveBack::Reservations {
        lua: include_str!("../../lua/give_back_fixed_window_calendar.lua"),
        twin: give_back_calendar,
        no_local_budget: "local budgets are not supported on a calendar quota",
    },
    adjust: Adjust::Units {
        lua: include_str!("../../lua/adjust_fixed_window_calendar.lua"),
        twin: adjust_calendar,
    },
};

/// The window a calendar quota's call at `now` counts in, keyed by its end
/// (`lua/fixed_window_calendar.lua`): of the bounds the call brings (`b`
/// in `period`, the lengths of `[a, b)` and `[b, c)` in seconds packed in
/// `burst`), the window that holds `now`, or the stored one if it ends
/// later (the clock went back); its end and count.
fn calendar_window(slot: &Option<Entry>, q: Params, now: i64) -> (i64, i64) {
    let l1 = q.burst >> 25;
    let mut e = q.period;
    if now < q.period - l1 * 1_000_000 {
        e = q.period - l1 * 1_000_000;
    } else if now >= q.period {
        e = q.period + (q.burst - (l1 << 25)) * 1_000_000;
    }
    match slot {
        Some(Entry {
            value: Value::Window { s, c },
            ..
        }) if *s >= e => (*s, *c),
        _ => (e, 0),
    }
}

/// The twin of `lua/fixed_window_calendar.lua`: [`window_decision`] in
/// [`calendar_window`] (its state's `s` is the window's end).
fn decide_calendar(
    slot: &mut Option<Entry>,
    q: Params,
    now: i64,
    cost: i64,
    _nonce: &str,
) -> (Raw, Option<Value>) {
    let (e, c) = calendar_window(slot, q, now);
    let left = (e - now).max(1);
    let (raw, _) = window_decision(now + left, c, q.n, 0, now, cost);
    (raw, raw.ok.then_some(Value::Window { s: e, c: c + cost }))
}

/// The twin of `lua/give_back_fixed_window_calendar.lua`: only into the
/// take's window, whose end (the state's `s`) is `fin`; a count given back
/// to 0 is no state.
fn give_back_calendar(
    slot: &mut Option<Entry>,
    _q: Params,
    now: i64,
    units: i64,
    _at: i64,
    fin: i64,
) {
    let Some(Entry {
        value: Value::Window { s, c },
        ..
    }) = slot
    else {
        return;
    };
    if *c > 0 && *s == fin && now < fin {
        if units >= *c {
            *slot = None;
        } else {
            *c -= units;
        }
    }
}

/// The twin of `lua/adjust_fixed_window_calendar.lua`.
fn adjust_calendar(slot: &mut Option<Entry>, q: Params, now: i64, units: i64) {
    let (e, c) = calendar_window(slot, q, now);
    let left = (e - now).max(1);
    if units > 0 {
        let top = q.n + super::state::max_debt_units(q.interval);
        *slot = Some(Entry {
            value: Value::Window {
                s: e,
                c: if c + units > top {
                    c.max(top)
                } else {
                    c + units
                },
            },
            expires_at: now + ttl_us(left),
        });
    } else if c > 0 {
        if c + units <= 0 {
            *slot = None;
        } else if let Some(Entry {
            value: Value::Window { c, .. },
            ..
        }) = slot
        {
            *c += units;
        }
    }
}

fn decide(
    slot: &mut Option<Entry>,
    q: Params,
    now: i64,
    cost: i64,
    _nonce: &str,
) -> (Raw, Option<Value>) {
    fixed_window(slot, q.n, q.period, now, cost)
}

/// The twin of `lua/fixed_window_aligned.lua`: [`fixed_window`] in the
/// aligned window that holds `now` (or a stored one ahead of it: the clock
/// went back).
fn decide_aligned(
    slot: &mut Option<Entry>,
    q: Params,
    now: i64,
    cost: i64,
    _nonce: &str,
) -> (Raw, Option<Value>) {
    let start = aligned_start(slot, q.period, now);
    let c = match slot {
        Some(Entry {
            value: Value::Window { s, c },
            ..
        }) if *s == start => *c,
        _ => 0,
    };
    window_decision(start, c, q.n, q.period, now, cost)
}

/// The start of the aligned window a request at `now` counts in: the one
/// that holds `now`, or the stored window if it is later.
fn aligned_start(slot: &Option<Entry>, period: i64, now: i64) -> i64 {
    let start = floor_div(now, period) * period;
    match slot {
        Some(Entry {
            value: Value::Window { s, .. },
            ..
        }) if *s > start => *s,
        _ => start,
    }
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
    window_decision(s, c, n, period, now, cost)
}

/// A request of `cost` at `now` in the window that starts at `s` and holds
/// `c`.
fn window_decision(
    s: i64,
    c: i64,
    n: i64,
    period: i64,
    now: i64,
    cost: i64,
) -> (Raw, Option<Value>) {
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

/// The twin of `lua/give_back_fixed_window.lua` (its manual-clock branch: a
/// memory window always holds its start): only into the take's window,
/// whose end is `fin`; a count given back to 0 is no state.
fn give_back(slot: &mut Option<Entry>, q: Params, now: i64, units: i64, _at: i64, fin: i64) {
    let Some(Entry {
        value: Value::Window { s, c },
        ..
    }) = slot
    else {
        return;
    };
    if *c > 0 && *s + q.period == fin && now < fin {
        if units >= *c {
            *slot = None;
        } else {
            *c -= units;
        }
    }
}

/// The twin of `lua/adjust_fixed_window.lua` (its manual-clock branch: a
/// memory window always holds its start).
fn adjust(slot: &mut Option<Entry>, q: Params, now: i64, units: i64) {
    let (s, c) = match slot {
        Some(Entry {
            value: Value::Window { s, c },
            ..
        }) if now < *s + q.period => (*s, *c),
        _ => (now, 0),
    };
    adjust_window(slot, q, now, units, s, c);
}

/// The twin of `lua/adjust_fixed_window_aligned.lua`.
fn adjust_aligned(slot: &mut Option<Entry>, q: Params, now: i64, units: i64) {
    let start = aligned_start(slot, q.period, now);
    let c = match slot {
        Some(Entry {
            value: Value::Window { s, c },
            ..
        }) if *s == start => *c,
        _ => 0,
    };
    adjust_window(slot, q, now, units, start, c);
}

/// Adjusts the window that starts at `s` and holds `c` (the slot's if `c`
/// is above 0) by `units`.
fn adjust_window(slot: &mut Option<Entry>, q: Params, now: i64, units: i64, s: i64, c: i64) {
    if units > 0 {
        let top = q.n + super::state::max_debt_units(q.interval);
        *slot = Some(Entry {
            value: Value::Window {
                s,
                c: if c + units > top {
                    c.max(top)
                } else {
                    c + units
                },
            },
            expires_at: now + ttl_us(s + q.period - now),
        });
    } else if c > 0 {
        if c + units <= 0 {
            *slot = None;
        } else if let Some(Entry {
            value: Value::Window { c, .. },
            ..
        }) = slot
        {
            *c += units;
        }
    }
}
