//! [`Strategy::SlidingWindowLog`](super::Strategy::SlidingWindowLog): a sorted set of request
//! times (`lua/sliding_window_log.lua`).

use super::state::{Entry, Params, Raw, Value, ttl_us};
use super::{CountBound, HeaderPolicy, Lua, StrategySpec};
use crate::Quota;

pub(super) const SPEC: StrategySpec = StrategySpec {
    name: "sliding-window-log",
    tag: "swl",
    key_tag: 'l',
    lua: Lua {
        id: 2,
        body: &[include_str!("../../lua/sliding_window_log.lua")],
        fast_path: None,
        zset_helpers: true,
        reads_time: true,
        reads_burst: true,
    },
    algorithm: decide,
    takes_burst: false,
    count_bound: Some(CountBound {
        max: Quota::MAX_SORTED_SET_LIMIT,
        reason: "keeps one entry per request: at most {max} per window",
        suggest_counter: true,
    }),
    period_field: "rate.period",
    needs_nonce: true,
    holds_leases: false,
    denials_cacheable: true,
    header: HeaderPolicy::Window,
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
