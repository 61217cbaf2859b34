//! [`Strategy::Gcra`](super::Strategy::Gcra): the generic cell rate algorithm, one
//! timestamp per key (`lua/gcra.lua` then `lua/tat.lua`); an admitted
//! request proceeds at once.

use super::state::Algorithm;
use super::{Adjust, Bound, GiveBack, HeaderPolicy, Lua, StrategySpec, tat};

pub(super) const SPEC: StrategySpec = StrategySpec {
    name: "gcra",
    tag: "gcra",
    key_tag: 'r',
    period_in_named_key: false,
    lua: Lua {
        id: 6,
        body: &[include_str!("../../lua/gcra.lua"), tat::LUA],
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
