//! [`Strategy::SlidingWindowLog`](super::Strategy::SlidingWindowLog): the request times,
//! oldest first (`lua/sliding_window_log.lua`: one string of 7-byte integers
//! up to 32 times, a list beyond).

use super::state::{Algorithm, Entry, Params, Raw, Value, ttl_us};
use super::{
    Adjust, Bound, CountBound, GiveBack, HeaderPolicy, Lua, MAX_SORTED_SET_LIMIT, StrategySpec,
    until_reset,
};

pub(super) const SPEC: StrategySpec = StrategySpec {
    name: "sliding-window-log",
    tag: "swl",
    key_tag: 'l',
    period_in_named_key: false,
    lua: Lua {
        id: 2,
        body: &[
            include_str!("../../lua/sliding_window_log.lua"),
            include_str!("../../lua/log_to_list.lua"),
        ],
        fast_path: None,
        zset_helpers: false,
        reads_time: true,
        reads_burst: false,
    },
    algorithm: Algorithm::Returns(decide),
    takes_burst: false,
    count_bound: Some(CountBound {
        max: MAX_SORTED_SET_LIMIT,
        reason: "keeps one entry per request: at most {max} per window",
        suggest_counter: true,
    }),
    period_field: "rate.period",
    needs_nonce: false,
    holds_leases: false,
    bound: Bound::Span,
    guarantee: "at most n in any span of one period",
    denials_cacheable: true,
    header: HeaderPolicy::Window,
    give_back: GiveBack::Units {
        lua: include_str!("../../lua/give_back_sliding_window_log.lua"),
        twin: give_back,
        horizon: until_reset,
    },
    adjust: Adjust::Units {
        lua: concat!(
            include_str!("../../lua/adjust_sliding_window_log.lua"),
            include_str!("../../lua/log_to_list.lua")
        ),
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
    sliding_log(slot, q.n, q.period, now, cost)
}

fn sliding_log(
    slot: &Option<Entry>,
    n: i64,
    period: i64,
    now: i64,
    cost: i64,
) -> (Raw, Option<Value>) {
    // oldest first (in Redis as in a short log's string); read in place: a
    // log in debt may hold many more times than n, and a denial copies none
    let log: &[i64] = match slot {
        Some(Entry {
            value: Value::Log(log),
            ..
        }) => log,
        _ => &[],
    };
    let old = now - period;
    let len = log.len() as i64;
    // sorted: the entries in the window are the newest c
    let c = len - log.partition_point(|t| *t <= old) as i64;
    let head = log.last().copied().unwrap_or(old);
    let mut reset = if c > 0 { head + period - now } else { 0 };
    if cost > n || c + cost > n {
        let retry = if cost <= n {
            log[(len - 1 - (n - cost)) as usize] + period - now
        } else {
            -1
        };
        return (Raw::deny(n - c, reset, retry), None);
    }
    if cost == 0 {
        return (Raw::allow(n - c, reset, 0), None);
    }
    let t = now.max(head);
    reset = t + period - now;
    // the entries that left the window are dropped (the rest: at most n)
    let mut kept = Vec::with_capacity((c + cost) as usize);
    kept.extend_from_slice(&log[(len - c) as usize..]);
    kept.extend(std::iter::repeat_n(t, cost as usize));
    (Raw::allow(n - c - cost, reset, 0), Some(Value::Log(kept)))
}

/// The twin of `lua/give_back_sliding_window_log.lua`: removes up to `units`
/// entries of the take's time (`fin - period`), newest first, while that
/// time is in the window; an empty log is no state.
fn give_back(slot: &mut Option<Entry>, q: Params, now: i64, units: i64, _at: i64, fin: i64) {
    let t = fin - q.period;
    if t <= now - q.period {
        return;
    }
    let Some(Entry {
        value: Value::Log(log),
        ..
    }) = slot
    else {
        return;
    };
    // (sorted: the times equal to t are one run, removed from its newest end
    // in one move of the times after it)
    let hi = log.partition_point(|x| *x <= t);
    let run = hi - log[..hi].partition_point(|x| *x < t);
    let take = run.min(usize::try_from(units).unwrap_or(0));
    log.drain(hi - take..hi);
    if log.is_empty() {
        *slot = None;
    }
}

/// The twin of `lua/adjust_sliding_window_log.lua`: a charge logs up to
/// `n + 1` entries at now (or the newest time, if later) and keeps the
/// `n + 1` newest, a give-back drops the newest entries; an empty log is no
/// state.
fn adjust(slot: &mut Option<Entry>, q: Params, now: i64, units: i64) {
    if units > 0 {
        let units = units.min(q.n + 1);
        let mut log = match slot.take() {
            Some(Entry {
                value: Value::Log(log),
                ..
            }) => log,
            _ => Vec::new(),
        };
        let t = log.last().copied().map_or(now, |h| h.max(now));
        log.extend(std::iter::repeat_n(t, units as usize));
        // (the n + 1 newest kept: admission reads no older one, and one
        // past n denies even a cost of 0)
        let keep = usize::try_from(q.n + 1).unwrap_or(usize::MAX);
        if log.len() > keep {
            log.drain(..log.len() - keep);
        }
        *slot = Some(Entry {
            value: Value::Log(log),
            expires_at: now + ttl_us(t + q.period - now),
        });
    } else if let Some(Entry {
        value: Value::Log(log),
        ..
    }) = slot
    {
        let keep = log.len().saturating_sub(units.unsigned_abs() as usize);
        log.truncate(keep);
        if log.is_empty() {
            *slot = None;
        }
    }
}
