//! What every store is asked and answers, whatever it is: one decision's
//! [`Call`] and its [`Outcome`], a give-back's [`GiveBackCall`], and an admin
//! call's [`Adjustment`]. Shared
//! by the Redis and memory stores and the dispatch above them.

use std::time::Duration;

use crate::quota::QuotaSpec;
use crate::store::on_denial::OnDenial;
use crate::strategy::state::Raw;

/// One decision to make: the quota keys of one user key. The same for every
/// store; what a store needs beyond it was prepared at [`bind`](super::Backend::bind).
pub(crate) struct Call<'a> {
    /// The hash-tagged part shared by all keys, `{prefix:key}`.
    pub(crate) base: &'a str,
    /// The user key as stored (verbatim or hashed by the limiter): what the
    /// memory store keys its state by, beside each quota's scope.
    pub(crate) user: &'a [u8],
    /// One storage key per quota.
    pub(crate) keys: &'a [String],
    /// The limiter's quotas, in the order of `keys`.
    pub(crate) quotas: &'a [QuotaSpec],
    pub(crate) cost: u64,
    /// Manual or caller clock reading (any value, 0 included, up to
    /// [`ManualClock::MAX`](crate::clock::ManualClock::MAX)); `None`: the store's clock.
    pub(crate) now_us: Option<u64>,
    /// Unique id for sorted-set members (leases).
    pub(crate) nonce: &'a str,
    /// Blocking, as the limiter was built (see `lua/block.lua`): `keys`
    /// then ends with the block key.
    pub(crate) block_us: Option<u64>,
    /// What a denial records (read by a memory store; a Redis store's
    /// script was assembled for it at bind). A recording limiter's cost
    /// may exceed every capacity (at most `Engine::sent_cost`'s bound,
    /// below 2^53: exact in the scripts' arithmetic).
    pub(crate) on_denial: OnDenial,
}

/// A store's answer: every quota's outcome, and whether all allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub(crate) allowed: bool,
    /// A denial that recorded its cost (see [`OnDenial`]).
    pub(crate) recorded: bool,
    pub(crate) quotas: Vec<QuotaOutcome>,
}

/// One quota's outcome, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QuotaOutcome {
    pub(crate) allowed: bool,
    pub(crate) remaining: u64,
    pub(crate) reset_after: Duration,
    pub(crate) retry_after: Option<Duration>,
    pub(crate) delay: Duration,
}

/// A memory algorithm's answer as an outcome (Redis replies parse straight
/// into outcomes, in `redis::protocol`).
impl From<Raw> for QuotaOutcome {
    fn from(r: Raw) -> Self {
        let us = |v: i64| {
            // (most values are below a second: no division then)
            let v = v.max(0) as u64;
            if v < 1_000_000 {
                Duration::new(0, v as u32 * 1_000)
            } else {
                Duration::from_micros(v)
            }
        };
        QuotaOutcome {
            allowed: r.ok,
            remaining: r.remaining.max(0) as u64,
            reset_after: us(r.reset),
            retry_after: (r.retry >= 0 && !r.ok).then(|| us(r.retry)),
            delay: if r.delay > 0 {
                us(r.delay)
            } else {
                Duration::ZERO
            },
        }
    }
}

/// What an adjust does to every quota of a key.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Adjustment<'a> {
    /// Charges (`> 0`, past the limit if need be) or gives back (`< 0`,
    /// never above the limit) these units.
    By(i64),
    /// Starts each quota afresh, charged `units[i]` (its capacity less the
    /// remaining asked for).
    Set(&'a [i64]),
}

/// What a give-back returns, and to which keys.
pub(crate) struct GiveBackCall<'a> {
    /// One storage key per quota, in the limiter's order.
    pub(crate) keys: &'a [String],
    /// The unspent units.
    pub(crate) units: u64,
    /// Manual clock reading; `None`: Redis's clock.
    pub(crate) now_us: Option<u64>,
    /// The take's time.
    pub(crate) at: i64,
    /// Per quota, the take's time plus its `reset_after`.
    pub(crate) fins: &'a [i64],
}

/// One part of a joint decision (`src/limiter/joint.rs`): one limiter's
/// quotas on one user key, with its own cost and clock.
pub(crate) struct JointCall<'a> {
    /// The user key as stored (what the memory store keys its state by).
    pub(crate) user: &'a [u8],
    /// One storage key per quota, in the order of `quotas`.
    pub(crate) keys: &'a [String],
    /// The limiter's quotas.
    pub(crate) quotas: &'a [QuotaSpec],
    /// The memory store's scope of each quota (empty for Redis).
    pub(crate) scopes: &'a [u32],
    pub(crate) cost: u64,
    /// Manual or caller clock reading; `None`: the store's clock.
    pub(crate) now_us: Option<u64>,
    /// What the part's denial records.
    pub(crate) on_denial: OnDenial,
}

/// What a joint call does (`lua/joint.lua`'s `ARGV[2]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JointMode {
    /// Checks only: nothing is consumed or recorded (a peek).
    Check,
    /// Consumes every part's cost if all are admitted; else each part's
    /// denial records as its [`OnDenial`] says.
    Decide,
    /// The decision is denied already: nothing is consumed, each part's
    /// denial records.
    Denied,
}

/// A store's answer to one part of a joint decision: its quotas' outcomes
/// (`allowed`: every enforced quota allows it), and the time it was
/// decided at (what a give-back needs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JointOutcome {
    pub(crate) outcome: Outcome,
    pub(crate) now: i64,
}
