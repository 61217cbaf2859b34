//! [`Strategy::Concurrency`](super::Strategy::Concurrency): a sorted set of leases, each
//! expiring after the lease timeout (the rate's period) unless released first
//! (`lua/concurrency.lua`).

use super::state::{Algorithm, Entry, Params, Raw, Value};
use super::{
    Adjust, Bound, CountBound, GiveBack, HeaderPolicy, Lua, MAX_SORTED_SET_LIMIT, StrategySpec,
};

pub(super) const SPEC: StrategySpec = StrategySpec {
    name: "concurrency",
    tag: "conc",
    key_tag: 'n',
    period_in_named_key: false,
    lua: Lua {
        id: 7,
        body: &[include_str!("../../lua/concurrency.lua")],
        fast_path: None,
        zset_helpers: true,
        reads_time: true,
        reads_burst: false,
    },
    algorithm: Algorithm::Returns(decide),
    takes_burst: false,
    count_bound: Some(CountBound {
        max: MAX_SORTED_SET_LIMIT,
        reason: "keeps one entry per lease: at most {max} in flight",
        suggest_counter: false,
    }),
    period_field: "lease_timeout",
    needs_nonce: true,
    holds_leases: true,
    bound: Bound::InFlight,
    guarantee: "at most n in flight",
    denials_cacheable: false,
    header: HeaderPolicy::InFlight,
    give_back: GiveBack::Never(
        "a concurrency quota counts requests in flight: units spent locally would hold no lease",
    ),
    adjust: Adjust::Never(
        "a concurrency quota counts requests in flight: the lease is the cost, released when the response completes",
    ),
};

fn decide(
    slot: &mut Option<Entry>,
    q: Params,
    now: i64,
    cost: i64,
    nonce: &str,
) -> (Raw, Option<Value>) {
    concurrency(slot, q.n, q.period, now, cost, nonce)
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
