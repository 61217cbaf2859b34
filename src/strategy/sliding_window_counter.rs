//! [`Strategy::SlidingWindowCounter`](super::Strategy::SlidingWindowCounter): the current and
//! previous aligned windows' counts, weighted by the overlap
//! (`lua/sliding_window_counter.lua`).

use super::state::{Algorithm, Entry, Params, Raw, Value, floor_div, ttl_us};
use super::{Adjust, Bound, GiveBack, HeaderPolicy, Lua, StrategySpec};

pub(super) const SPEC: StrategySpec = StrategySpec {
    name: "sliding-window-counter",
    tag: "swc",
    key_tag: 'c',
    period_in_named_key: true,
    lua: Lua {
        id: 3,
        body: &[include_str!("../../lua/sliding_window_counter.lua")],
        fast_path: None,
        zset_helpers: false,
        reads_time: true,
        reads_burst: false,
    },
    algorithm: Algorithm::Returns(decide),
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
        lua: include_str!("../../lua/give_back_sliding_window_counter.lua"),
        twin: give_back,
        // the aligned window's end: reset_after runs to the next one's
        horizon: |reset, period| reset - period,
    },
    adjust: Adjust::Units {
        lua: include_str!("../../lua/adjust_sliding_window_counter.lua"),
        twin: adjust,
    },
};

fn decide(
    slot: &mut Option<Entry>,
    q: Params,
    now: i64,
    cost: i64,
    _nonce: &str,
) -> (Raw, Option<Value>) {
    sliding_counter(slot, q.n, q.period, now, cost)
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

/// The twin of `lua/give_back_sliding_window_counter.lua`: only while now is
/// in the take's aligned window and the state holds it; the TTL is kept.
fn give_back(slot: &mut Option<Entry>, q: Params, now: i64, units: i64, at: i64, _fin: i64) {
    let w = floor_div(now, q.period);
    if w != floor_div(at, q.period) {
        return;
    }
    if let Some(Entry {
        value: Value::Counter { w: sw, c, .. },
        ..
    }) = slot
        && *sw == w
        && *c > 0
    {
        *c -= units.min(*c);
    }
}

/// The twin of `lua/adjust_sliding_window_counter.lua`: the current window's
/// count moves by `units` (not below 0), read and written as the strategy
/// reads and writes it.
fn adjust(slot: &mut Option<Entry>, q: Params, now: i64, units: i64) {
    let period = q.period;
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
    let top = q.n + super::state::max_debt_units(q.interval);
    let c2 = match (c + units).max(0) {
        c2 if c2 > top => c.max(top),
        c2 => c2,
    };
    let reset = if c2 > 0 {
        (w + 2) * period - now
    } else if p > 0 {
        (w + 1) * period - now
    } else {
        0
    };
    *slot = (reset > 0).then(|| Entry {
        value: Value::Counter { w, c: c2, p },
        expires_at: now + ttl_us(reset),
    });
}
