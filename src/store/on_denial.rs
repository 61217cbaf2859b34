//! [`OnDenial`]: what a denied call records (see
//! [`RateLimiterBuilder::on_denial`](crate::limiter::RateLimiterBuilder::on_denial)).

/// What a denied [`check_n`](crate::RateLimiter::check_n) (or a denied part of
/// an [`AllOrNothing`](crate::limiter::AllOrNothing) decision) records of its cost.
///
/// By default a denied call consumes nothing ([`Nothing`](Self::Nothing)).
/// The other modes record the cost anyway, past the limit, **in the same
/// atomic store call** as the decision (one script run on Redis, one locked
/// operation on a [`MemoryStore`](crate::MemoryStore)): what
/// [`RateLimiter::penalize`](crate::RateLimiter::penalize)`(key, cost)` would do
/// right after the denial, without the window between two calls in which
/// concurrent calls still see the limit not yet passed. A usage report that
/// must never be lost (tokens an LLM already spent, Envoy's
/// `hits_addend` after the response) is recorded so, and the next calls are
/// denied until the debt is repaid.
///
/// A recording runs each quota's adjust, as `penalize` does: a fixed
/// window's count runs past the limit (capped as `penalize` caps it), a
/// GCRA or token bucket takes it as debt (at most
/// [`RateLimiter::MAX_DEBT`](crate::RateLimiter::MAX_DEBT) of it), a leaky
/// bucket's queue ends later, a sliding log keeps at most its count + 1
/// newest times, a sliding window counter adds to its current window, a
/// calendar window to its window. Concurrency quotas are never recorded
/// on, nor are [shadow](crate::Quota::shadow) quotas; a peek (cost 0)
/// records nothing, and neither does a call denied by a
/// [block](crate::limiter::RateLimiterBuilder::block_for) (the quotas are not read).
/// A cost above a quota's capacity, which [`Nothing`](Self::Nothing) denies
/// without a store call, is then sent and recorded (capped as above), and
/// is still denied with `retry_after: None` (but a cost above what one call
/// may lease of a concurrency quota,
/// [`Quota::MAX_LEASES_PER_CALL`](crate::Quota::MAX_LEASES_PER_CALL), is
/// denied without a store call as ever, recording nothing).
///
/// A denied [`Decision`](crate::Decision) that recorded
/// ([`Decision::recorded`](crate::Decision::recorded)) shows each quota's
/// state **after** the recording: `remaining` and `reset_after` of that
/// state, and `retry_after` when the call's own cost would fit again
/// (`None` if it never can): the answer a check of the same cost would get
/// right after.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OnDenial {
    /// A denied call consumes nothing (the default).
    #[default]
    Nothing,
    /// A denied call records its cost on each enforced quota that denies
    /// it (is over); the quotas that would allow it are left as they are.
    RecordIfOver,
    /// A denied call records its cost on every enforced quota of the key.
    Record,
}

impl OnDenial {
    /// Whether a denial records anything.
    pub(crate) fn records(self) -> bool {
        self != OnDenial::Nothing
    }

    /// The mode as the scripts take it: 0 nothing, 1 on the quotas that
    /// deny, 2 on every enforced quota.
    pub(crate) fn script_flag(self) -> u8 {
        match self {
            OnDenial::Nothing => 0,
            OnDenial::RecordIfOver => 1,
            OnDenial::Record => 2,
        }
    }

    /// The mode a limiter of `quotas` runs: [`Nothing`](Self::Nothing)
    /// when none of them can be recorded on (only concurrency or shadow
    /// quotas), so that its scripts and answers are those of a limiter
    /// that never records.
    pub(crate) fn of_quotas(self, quotas: &[crate::quota::QuotaSpec]) -> OnDenial {
        let recordable = quotas
            .iter()
            .any(|q| !q.shadow && q.spec().adjust.twin(1).is_some());
        if recordable { self } else { OnDenial::Nothing }
    }

    /// Whether a quota that denied (`denies`) or allowed the call is
    /// recorded on (its strategy permitting; never a shadow quota).
    pub(crate) fn records_on(self, denies: bool, shadow: bool) -> bool {
        !shadow
            && match self {
                OnDenial::Nothing => false,
                OnDenial::RecordIfOver => denies,
                OnDenial::Record => true,
            }
    }
}
