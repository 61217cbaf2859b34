//! [`Strategy::TokenBucket`](super::Strategy::TokenBucket): `burst` tokens refilled one every
//! `interval`, stored as the time the bucket is full again (`lua/token_bucket.lua`
//! then `lua/tat.lua`: that time is the GCRA's theoretical arrival time).

use super::state::Algorithm;
use super::{Adjust, Bound, GiveBack, HeaderPolicy, Lua, StrategySpec, tat};

pub(super) const SPEC: StrategySpec = StrategySpec {
    name: "token-bucket",
    tag: "tb",
    key_tag: 'k',
    period_in_named_key: false,
    lua: Lua {
        id: 4,
        body: &[include_str!("../../lua/token_bucket.lua"), tat::LUA],
        fast_path: None,
        zset_helpers: false,
        reads_time: true,
        reads_burst: true,
    },
    algorithm: Algorithm::Tat { queue: false },
    takes_burst: true,
    count_bound: None,
    period_field: "rate.period",
    needs_nonce: false,
    holds_leases: false,
    bound: Bound::Bucket,
    guarantee: "at most burst + t / interval in any span t (interval = ceil(period / n))",
    denials_cacheable: true,
    header: HeaderPolicy::Refill,
    give_back: GiveBack::Units {
        lua: tat::GIVE_BACK_LUA,
        twin: tat::give_back,
        horizon: tat::horizon,
    },
    adjust: Adjust::Units {
        lua: tat::ADJUST_LUA,
        twin: tat::adjust,
    },
};
