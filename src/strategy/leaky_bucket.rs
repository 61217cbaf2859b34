//! [`Strategy::LeakyBucket`](super::Strategy::LeakyBucket): GCRA admission on one timestamp
//! (`lua/leaky_bucket.lua` then `lua/tat.lua`); an admitted request waits
//! until its slot (`delay`). A charge (a settle's excess, `penalize`)
//! pushes the end of the queue, as the GCRA's adjust does; nothing is given
//! back.

use super::state::Algorithm;
use super::{Adjust, Bound, GiveBack, HeaderPolicy, Lua, StrategySpec, tat};

pub(super) const SPEC: StrategySpec = StrategySpec {
    name: "leaky-bucket",
    tag: "lb",
    key_tag: 'q',
    period_in_named_key: false,
    lua: Lua {
        id: 5,
        body: &[include_str!("../../lua/leaky_bucket.lua"), tat::LUA],
        fast_path: None,
        zset_helpers: false,
        reads_time: true,
        reads_burst: true,
    },
    algorithm: Algorithm::Tat { queue: true },
    takes_burst: true,
    count_bound: None,
    period_field: "rate.period",
    needs_nonce: false,
    holds_leases: false,
    bound: Bound::Bucket,
    guarantee: "admits at most burst + t / interval in any span t; serves in order, one per interval, each after a delay of at most burst x interval",
    denials_cacheable: true,
    header: HeaderPolicy::Refill,
    give_back: GiveBack::Never(
        "a leaky bucket gives each request its own delay: units spent locally would skip the queue",
    ),
    // A charge pushes the TAT, the end of the queue, past the burst if need
    // be (a debt, as `lua/adjust_tat.lua` does for the GCRA): no slot
    // already promised moves, later requests wait behind the charged units.
    adjust: Adjust::Charge {
        lua: tat::ADJUST_LUA,
        twin: tat::adjust,
        no_give_back: "a leaky bucket's admitted requests already hold their slots in the queue: units given back would let a later request jump ahead of them",
    },
};
