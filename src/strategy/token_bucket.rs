//! [`Strategy::TokenBucket`](super::Strategy::TokenBucket): `burst` tokens refilled one every
//! `interval` (`lua/token_bucket.lua`).

use super::state::{Entry, Params, Raw, Value, floor_div};
use super::{HeaderPolicy, Lua, StrategySpec};

pub(super) const SPEC: StrategySpec = StrategySpec {
    name: "token-bucket",
    tag: "tb",
    key_tag: 't',
    lua: Lua {
        id: 4,
        body: &[include_str!("../../lua/token_bucket.lua")],
        fast_path: None,
        zset_helpers: false,
        reads_time: true,
        reads_burst: true,
    },
    algorithm: decide,
    takes_burst: true,
    count_bound: None,
    period_field: "rate.period",
    needs_nonce: false,
    holds_leases: false,
    denials_cacheable: true,
    header: HeaderPolicy::Refill,
};

fn decide(
    slot: &mut Option<Entry>,
    q: Params,
    now: i64,
    cost: i64,
    _nonce: &str,
) -> (Raw, Option<Value>) {
    token_bucket(slot, q.burst, q.interval, now, cost)
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
