//! The memory side's entry points: [`run`], [`give_back`] and [`adjust`]
//! apply a strategy's twin (see `state.rs`) to one key's state, with its
//! quota's numbers ([`Params`]), as its Lua block does in Redis.

use super::state::{
    AdjustFn, Algorithm, Decide, Entry, GiveBackFn, Params, Raw, expire, max_debt_units, set,
    ttl_us,
};
use super::tat;

/// Evaluates one quota (its strategy's `algorithm`, its numbers `q`) on one
/// key's state, as the script's strategy block does.
#[inline]
pub(crate) fn run(
    slot: &mut Option<Entry>,
    algorithm: Algorithm,
    q: &Params,
    now: i64,
    cost: i64,
    nonce: &str,
    apply: bool,
) -> Raw {
    match algorithm {
        Algorithm::Tat { queue } => run_tat(slot, q, now, cost, queue, apply),
        Algorithm::Returns(decide) => returns(slot, decide, q, now, cost, nonce, apply),
    }
}

/// [`run`] for a quota whose algorithm is [`Algorithm::Tat`] (`queue` as
/// it says): nothing else inlined with it.
#[inline(always)]
pub(crate) fn run_tat(
    slot: &mut Option<Entry>,
    q: &Params,
    now: i64,
    cost: i64,
    queue: bool,
    apply: bool,
) -> Raw {
    expire(slot, now);
    tat::decide(slot, *q, now, cost, queue, apply && cost > 0)
}

/// [`run`] of an [`Algorithm::Returns`]: out of line, so that the TAT
/// strategies' path stays small enough to inline into a store's decision.
#[inline(never)]
fn returns(
    slot: &mut Option<Entry>,
    decide: Decide,
    q: &Params,
    now: i64,
    cost: i64,
    nonce: &str,
    apply: bool,
) -> Raw {
    expire(slot, now);
    let (raw, new) = decide(slot, *q, now, cost, nonce);
    if raw.ok
        && apply
        && cost > 0
        && let Some(value) = new
    {
        let expires_at = now + ttl_us(raw.reset);
        set(slot, Some(Entry { value, expires_at }));
    }
    raw
}

/// Gives back `units` to one quota's key (its strategy's give-back `twin`,
/// its numbers `q`), as the give-back script's block does; a strategy
/// without give-back (`None`) changes nothing.
pub(crate) fn give_back(
    slot: &mut Option<Entry>,
    twin: Option<GiveBackFn>,
    q: &Params,
    now: i64,
    units: i64,
    at: i64,
    fin: i64,
) {
    expire(slot, now);
    if let Some(twin) = twin {
        twin(slot, *q, now, units, at, fin);
    }
}

/// Adjusts one quota's key by `units` (at most [`max_debt_units`] either
/// way; its strategy's adjust `twin`, its numbers `q`), as the settle
/// script's adjust block does; a strategy without adjust (`None`) changes
/// nothing.
pub(crate) fn adjust(
    slot: &mut Option<Entry>,
    twin: Option<AdjustFn>,
    q: &Params,
    now: i64,
    units: i64,
) {
    expire(slot, now);
    if let Some(twin) = twin {
        let cap = max_debt_units(q.interval);
        twin(slot, *q, now, units.clamp(-cap, cap));
    }
}
