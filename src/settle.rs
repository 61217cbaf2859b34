//! Settling after the response, penalties and the admin API of
//! [`RateLimiter`]: [`reserve_n`](RateLimiter::reserve_n) and
//! [`settle`](RateLimiter::settle), [`get`](RateLimiter::get),
//! [`block`](RateLimiter::block), [`unblock`](RateLimiter::unblock),
//! [`penalize`](RateLimiter::penalize) and [`reward`](RateLimiter::reward).
//!
//! Each is one atomic call on every store: a reservation is the limiter's
//! decision for the estimate (which also tells the store's time); a settle
//! gives back the unused part of it (each strategy's give-back, exactly the
//! units the reservation wrote while they still count) or charges the excess
//! (each strategy's adjust, past the limit if need be: a debt, repaid at the
//! quota's rate before the key is admitted again).
//!
//! What each strategy gives back or charges, and the bound on one charge
//! ([`RateLimiter::MAX_DEBT`]), are in the table of the guide's
//! [settling chapter](crate::guide::settle#usage-based-cost-reserve-then-settle).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::decision::Decision;
use crate::error::StoreError;
use crate::limiter::RateLimiter;
use crate::store::Adjustment;

/// Units of a reservation taken before the response, to settle after it
/// with [`RateLimiter::settle`] (see [`RateLimiter::reserve_n`]).
///
/// Dropping it without settling keeps the estimate counted. It settles
/// once, with the limiter that made it: a second settle (of it or of a
/// clone) does nothing, and another limiter's is an error.
#[derive(Debug, Clone)]
#[must_use = "settle it with RateLimiter::settle once the real cost is known"]
pub struct Reservation {
    decision: Decision,
    units: u64,
    /// The limiter that made it.
    limiter: u64,
    /// Set by the first settle (shared by clones).
    settled: Arc<AtomicBool>,
    /// The store's time of the decision (µs).
    at: i64,
    user: Vec<u8>,
    keys: Vec<String>,
}

impl Reservation {
    /// The decision of the reservation (its cost the estimate).
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// The reserved units (0 when the decision denied: nothing was
    /// reserved, and a settle charges all it is told was used).
    pub fn units(&self) -> u64 {
        if self.decision.allowed() {
            self.units
        } else {
            0
        }
    }

    /// The decision, giving up the reservation.
    pub fn into_decision(self) -> Decision {
        self.decision
    }
}

/// `units` as an adjust's argument: at most 2^50, what any quota's cap
/// allows (each quota then moves by at most what its rate repays in 2^50
/// µs, in the store: see [`MAX_DEBT`](RateLimiter::MAX_DEBT)).
fn clamp_units(units: u64) -> i64 {
    units.min(crate::strategy::state::MAX_DEBT_US as u64) as i64
}

impl RateLimiter {
    /// The longest debt a charge leaves (2^50 µs, about 35.7 years): one
    /// [`settle`](Self::settle), [`penalize`](Self::penalize) or
    /// [`reward`](Self::reward) moves each quota by at most what its rate
    /// repays in this time, and no key holds a longer debt (a larger charge
    /// is charged this much). The store's arithmetic needs the bound: Lua
    /// numbers are doubles, exact below 2^53, and its times are µs since
    /// 1970 (about 2^50.6).
    pub const MAX_DEBT: Duration = Duration::from_micros(1 << 50);

    /// The longest [`block`](Self::block): 366 days (a longer one is an
    /// error; to keep a key out for good, do not admit it at all).
    pub const MAX_BLOCK: Duration = Duration::from_secs(366 * 86_400);

    /// Reserves an `estimate` of a request's cost before the work is done
    /// (one atomic call, denied if it does not fit), to
    /// [`settle`](Self::settle) to the real cost afterwards: usage-based
    /// limits, such as tokens per minute of a language model.
    ///
    /// Nothing can overshoot under concurrency: every request's estimate is
    /// counted at admission, and a request whose real cost is larger is
    /// charged the excess (a debt) when it settles.
    ///
    /// An estimate of 0 asks for nothing, like a [`peek`](Self::peek): it
    /// is admitted whenever the key is neither blocked nor in debt, even
    /// with nothing left, so any number of concurrent requests pass at
    /// once; what they use is still charged when they settle (a debt), but
    /// only afterwards. Reserve at least 1, and never an estimate the
    /// client chooses unchecked (`examples/token_budget.rs` bounds it).
    pub async fn reserve_n(
        &self,
        key: impl AsRef<[u8]>,
        estimate: u64,
    ) -> Result<Reservation, StoreError> {
        self.in_force().reserve_n_here(key, estimate).await
    }

    async fn reserve_n_here(
        &self,
        key: impl AsRef<[u8]>,
        estimate: u64,
    ) -> Result<Reservation, StoreError> {
        let engine = self.engine();
        let (decision, at, user, keys) = engine.take(key.as_ref(), estimate).await?;
        Ok(Reservation {
            decision,
            units: estimate,
            limiter: engine.instance(),
            settled: Arc::new(AtomicBool::new(false)),
            at,
            user,
            keys,
        })
    }

    /// Settles a [`Reservation`] to the real cost `actual`, in one atomic
    /// call (none when they are equal): the unused part goes back (never
    /// above the limit, and only where the reserved units still count, see
    /// the strategies' table of the guide's [settling chapter](crate::guide::settle)),
    /// the excess is charged even past the limit, on every strategy but
    /// concurrency (whose lease is the cost), so that the key waits until
    /// the debt is repaid at the quota's rate (a fixed window's, until the
    /// window ends). A refund to 0 is "do not count this request".
    ///
    /// What was used is always charged, whatever was reserved: a
    /// reservation of 0 units (an estimate of 0) settled to 500 charges 500,
    /// and so does a denied reservation (it reserved nothing: settle it only
    /// if the work was done anyway; settled to 0 it charges nothing).
    ///
    /// A reservation settles once: settling it (or a clone) again does
    /// nothing. Settling another limiter's reservation is an error.
    pub async fn settle(&self, reservation: &Reservation, actual: u64) -> Result<(), StoreError> {
        self.in_force().settle_here(reservation, actual).await
    }

    async fn settle_here(&self, reservation: &Reservation, actual: u64) -> Result<(), StoreError> {
        let engine = self.engine();
        if reservation.limiter != engine.instance() {
            return Err(StoreError::Invalid(
                "this reservation was made by another limiter: settle it with that one".to_owned(),
            ));
        }
        if reservation.settled.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // (0 for a denied reservation: it reserved nothing, so whatever
        // was used is charged in full; an allowed one of 0 units alike)
        let units = reservation.units();
        if actual == units {
            return Ok(());
        }
        let quotas = engine.quotas();
        let keys = &reservation.keys[..quotas.len().min(reservation.keys.len())];
        if actual > units {
            let excess = clamp_units(actual - units);
            return engine
                .adjust_keys(&reservation.user, keys, Adjustment::By(excess))
                .await;
        }
        let fins: Vec<i64> = reservation
            .decision
            .quotas()
            .map(|q| reservation.at + i64::try_from(q.reset_after().as_micros()).unwrap_or(0))
            .collect();
        engine
            .give_back(
                &reservation.user,
                keys,
                units - actual,
                reservation.at,
                &fins,
            )
            .await
    }

    /// The current state of every quota of `key`, without consuming
    /// anything: what the headers of a request would show (a
    /// [`peek`](Self::peek), cost 0).
    ///
    /// It is `allowed()` unless even a cost of 0 does not fit: a blocked
    /// key is denied with the block's end as `retry_after`, and so is a key
    /// in debt (charged past its limit by a settle or
    /// [`penalize`](Self::penalize)), with the time the debt is repaid. A
    /// key with exactly nothing left is allowed with `remaining() == 0`:
    /// `remaining()` is what says whether a request of cost 1 would pass.
    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Decision, StoreError> {
        self.peek(key).await
    }

    /// Charges `units` to every quota of `key` for an application event
    /// (a failed login costs 5), past the limit if need be: the key is then
    /// denied until the debt is repaid at the quota's rate (at most
    /// [`MAX_DEBT`](Self::MAX_DEBT) of it per quota). One atomic call. A
    /// leaky-bucket quota is charged too: the end of its queue is pushed
    /// later by the units (no slot already promised moves), so the key waits
    /// until they have drained; concurrency quotas are left as they are.
    pub async fn penalize(&self, key: impl AsRef<[u8]>, units: u64) -> Result<(), StoreError> {
        self.in_force().penalize_here(key.as_ref(), units).await
    }

    async fn penalize_here(&self, key: impl AsRef<[u8]>, units: u64) -> Result<(), StoreError> {
        let units = clamp_units(units);
        self.adjust(key.as_ref(), Adjustment::By(units)).await
    }

    /// Gives `units` back to every quota of `key` (a successful login
    /// forgives failed ones), never above the limit (at most what the
    /// quota's rate repays in [`MAX_DEBT`](Self::MAX_DEBT)). One atomic call;
    /// leaky-bucket quotas are never given back (that would let a later
    /// request jump ahead of the slots already promised), and concurrency
    /// quotas are left as they are.
    pub async fn reward(&self, key: impl AsRef<[u8]>, units: u64) -> Result<(), StoreError> {
        self.in_force().reward_here(key.as_ref(), units).await
    }

    async fn reward_here(&self, key: impl AsRef<[u8]>, units: u64) -> Result<(), StoreError> {
        let units = clamp_units(units);
        self.adjust(key.as_ref(), Adjustment::By(-units)).await
    }

    /// Sets what is left of every quota of `key` to `remaining` (at most
    /// the quota's capacity): each quota starts afresh with its capacity
    /// less `remaining` spent just now (a fixed window opens now, a bucket's
    /// arrival time is set from now). One atomic call; leaky-bucket and
    /// concurrency quotas are left as they are (starting a leaky bucket
    /// afresh would let a later request jump ahead of its queue).
    pub async fn set_remaining(
        &self,
        key: impl AsRef<[u8]>,
        remaining: u64,
    ) -> Result<(), StoreError> {
        self.in_force()
            .set_remaining_here(key.as_ref(), remaining)
            .await
    }

    async fn set_remaining_here(
        &self,
        key: impl AsRef<[u8]>,
        remaining: u64,
    ) -> Result<(), StoreError> {
        let units: Vec<i64> = self
            .engine()
            .quotas()
            .iter()
            .map(|q| {
                let capacity = q.capacity();
                i64::try_from(capacity - remaining.min(capacity)).unwrap_or(i64::MAX)
            })
            .collect();
        self.adjust(key.as_ref(), Adjustment::Set(&units)).await
    }

    async fn adjust(&self, key: &[u8], adjustment: Adjustment<'_>) -> Result<(), StoreError> {
        if matches!(adjustment, Adjustment::By(0)) {
            return Ok(());
        }
        self.engine()
            .adjust(key, adjustment)
            .await
            .inspect(|_| self.forget_denial(key))
    }

    /// Denies `key` for `duration` from now, whatever its quotas hold (an
    /// operator's block; one atomic call). Needs a limiter built with
    /// [`blocking`](crate::limiter::RateLimiterBuilder::blocking) or
    /// [`block_for`](crate::limiter::RateLimiterBuilder::block_for): other
    /// limiters never read blocks, and this returns an error. A zero
    /// duration lifts the block; a duration under a microsecond blocks for
    /// one.
    ///
    /// A duration longer than [`MAX_BLOCK`](Self::MAX_BLOCK) (366 days) is
    /// a [`StoreError::Invalid`] naming the maximum, and nothing is changed
    /// (an admin endpoint answers it with a 400).
    pub async fn block(&self, key: impl AsRef<[u8]>, duration: Duration) -> Result<(), StoreError> {
        self.in_force().block_here(key.as_ref(), duration).await
    }

    async fn block_here(
        &self,
        key: impl AsRef<[u8]>,
        duration: Duration,
    ) -> Result<(), StoreError> {
        if duration > Self::MAX_BLOCK {
            return Err(StoreError::Invalid(format!(
                "a block lasts at most {} s (366 days); {} s asked for",
                Self::MAX_BLOCK.as_secs(),
                duration.as_secs()
            )));
        }
        // (a block shorter than a microsecond is one: zero would lift it)
        let us = u64::try_from(duration.as_micros())
            .unwrap_or(u64::MAX)
            .max(u64::from(!duration.is_zero()));
        self.set_block(key.as_ref(), us).await
    }

    /// Lifts a block of `key` (one call); a key not blocked is left as it is.
    pub async fn unblock(&self, key: impl AsRef<[u8]>) -> Result<(), StoreError> {
        self.in_force().unblock_here(key.as_ref()).await
    }

    async fn unblock_here(&self, key: impl AsRef<[u8]>) -> Result<(), StoreError> {
        self.set_block(key.as_ref(), 0).await
    }

    async fn set_block(&self, key: &[u8], us: u64) -> Result<(), StoreError> {
        self.engine()
            .set_block(key, us)
            .await
            .inspect(|_| self.forget_denial(key))
    }
}
