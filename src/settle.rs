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
//! What each strategy does:
//!
//! | strategy | give back (refund) | charge (excess, penalize) |
//! |---|---|---|
//! | fixed window | exact, into the reservation's window while it lasts (on Redis's clock: periods above 4 ms) | the current window, past the limit; a debt ends with the window |
//! | sliding window log | exact: the reservation's entries, while in the window | entries at now (at most `n`: more would leave together) |
//! | sliding window counter | exact while in the reservation's aligned window | the current window's count; weighs on the next window, no further |
//! | token bucket, GCRA | exact while what was reserved has not drained (`fin - now >= units × interval`) | the TAT moves ahead: repaid at the rate, however large |
//! | leaky bucket | none: admitted requests hold their slots in the queue | none |
//! | concurrency | none: the lease is the cost, released when the response ends | none |

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::decision::Decision;
use crate::error::StoreError;
use crate::limiter::RateLimiter;
use crate::store::Adjustment;
use crate::store::redis::reserve::GiveBackCall;

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

    /// The reserved units (0 when the decision denied: nothing to settle).
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

/// The largest number of units one adjust moves (a charge larger than a
/// thousand capacities is that many: the arithmetic stays exact).
fn clamp_units(lim: &RateLimiter, units: u64) -> i64 {
    let cap = lim
        .quota_specs()
        .iter()
        .map(|q| {
            q.capacity()
                .saturating_mul(1024)
                .min((1 << 50) / q.interval_us.max(1))
        })
        .min()
        .unwrap_or(0);
    units.min(cap).min(i64::MAX as u64) as i64
}

impl RateLimiter {
    /// Reserves an `estimate` of a request's cost before the work is done
    /// (one atomic call, denied if it does not fit), to
    /// [`settle`](Self::settle) to the real cost afterwards: usage-based
    /// limits, such as tokens per minute of a language model.
    ///
    /// Nothing can overshoot under concurrency: every request's estimate is
    /// counted at admission, and a request whose real cost is larger is
    /// charged the excess (a debt) when it settles.
    pub async fn reserve_n(
        &self,
        key: impl AsRef<[u8]>,
        estimate: u64,
    ) -> Result<Reservation, StoreError> {
        match self.current() {
            Some(current) => current.reserve_n_here(key, estimate).await,
            None => self.reserve_n_here(key, estimate).await,
        }
    }

    async fn reserve_n_here(
        &self,
        key: impl AsRef<[u8]>,
        estimate: u64,
    ) -> Result<Reservation, StoreError> {
        let (decision, at, user, keys) = self.take_decision(key.as_ref(), estimate).await?;
        Ok(Reservation {
            decision,
            units: estimate,
            limiter: self.instance(),
            settled: Arc::new(AtomicBool::new(false)),
            at,
            user,
            keys,
        })
    }

    /// Settles a [`Reservation`] to the real cost `actual`, in one atomic
    /// call (none when they are equal): the unused part goes back (never
    /// above the limit, and only where the reserved units still count, see
    /// the strategies' table in the README's "Settling after the response"),
    /// the excess is charged even past the limit, so that the key waits
    /// until the debt is repaid at the quota's rate. A denied reservation
    /// settles nothing. A refund to 0 is "do not count this request".
    ///
    /// A reservation settles once: settling it (or a clone) again does
    /// nothing. Settling another limiter's reservation is an error.
    pub async fn settle(&self, reservation: &Reservation, actual: u64) -> Result<(), StoreError> {
        match self.current() {
            Some(current) => current.settle_here(reservation, actual).await,
            None => self.settle_here(reservation, actual).await,
        }
    }

    async fn settle_here(&self, reservation: &Reservation, actual: u64) -> Result<(), StoreError> {
        if reservation.limiter != self.instance() {
            return Err(StoreError::Protocol(
                "this reservation was made by another limiter: settle it with that one".to_owned(),
            ));
        }
        if reservation.settled.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let units = reservation.units();
        if units == 0 || actual == units {
            return Ok(());
        }
        let quotas = self.quota_specs();
        let keys = &reservation.keys[..quotas.len().min(reservation.keys.len())];
        let now_us = self.manual_now_us();
        if actual > units {
            let excess = clamp_units(self, actual - units);
            return self
                .bound_store()
                .adjust(
                    self.settle_scripts(),
                    quotas,
                    keys,
                    &reservation.user,
                    Adjustment::By(excess),
                    now_us,
                )
                .await;
        }
        let fins: Vec<i64> = reservation
            .decision
            .quotas()
            .map(|q| reservation.at + i64::try_from(q.reset_after().as_micros()).unwrap_or(0))
            .collect();
        let gb = GiveBackCall {
            keys,
            units: units - actual,
            now_us,
            at: reservation.at,
            fins: &fins,
        };
        self.bound_store()
            .give_back(self.settle_scripts(), quotas, gb, &reservation.user)
            .await
    }

    /// The current state of every quota of `key`, without consuming
    /// anything: what the headers of a request would show (a
    /// [`peek`](Self::peek)). A blocked key reports `allowed: false` and
    /// the block's end as `retry_after`.
    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Decision, StoreError> {
        self.peek(key).await
    }

    /// Charges `units` to every quota of `key` for an application event
    /// (a failed login costs 5), past the limit if need be: the key is then
    /// denied until the debt is repaid at the quota's rate. One atomic call;
    /// leaky-bucket and concurrency quotas are left as they are.
    pub async fn penalize(&self, key: impl AsRef<[u8]>, units: u64) -> Result<(), StoreError> {
        match self.current() {
            Some(current) => current.penalize_here(key.as_ref(), units).await,
            None => self.penalize_here(key.as_ref(), units).await,
        }
    }

    async fn penalize_here(&self, key: impl AsRef<[u8]>, units: u64) -> Result<(), StoreError> {
        let units = clamp_units(self, units);
        self.adjust(key.as_ref(), Adjustment::By(units)).await
    }

    /// Gives `units` back to every quota of `key` (a successful login
    /// forgives failed ones), never above the limit. One atomic call;
    /// leaky-bucket and concurrency quotas are left as they are.
    pub async fn reward(&self, key: impl AsRef<[u8]>, units: u64) -> Result<(), StoreError> {
        match self.current() {
            Some(current) => current.reward_here(key.as_ref(), units).await,
            None => self.reward_here(key.as_ref(), units).await,
        }
    }

    async fn reward_here(&self, key: impl AsRef<[u8]>, units: u64) -> Result<(), StoreError> {
        let units = clamp_units(self, units);
        self.adjust(key.as_ref(), Adjustment::By(-units)).await
    }

    /// Sets what is left of every quota of `key` to `remaining` (at most
    /// the quota's capacity): each quota starts afresh with its capacity
    /// less `remaining` spent just now (a fixed window opens now, a bucket's
    /// arrival time is set from now). One atomic call; leaky-bucket and
    /// concurrency quotas are left as they are.
    pub async fn set_remaining(
        &self,
        key: impl AsRef<[u8]>,
        remaining: u64,
    ) -> Result<(), StoreError> {
        match self.current() {
            Some(current) => current.set_remaining_here(key.as_ref(), remaining).await,
            None => self.set_remaining_here(key.as_ref(), remaining).await,
        }
    }

    async fn set_remaining_here(
        &self,
        key: impl AsRef<[u8]>,
        remaining: u64,
    ) -> Result<(), StoreError> {
        let units: Vec<i64> = self
            .quota_specs()
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
        let user = crate::limiter::storable_key(key);
        let (_, keys) = self.keys_of(&user);
        self.bound_store()
            .adjust(
                self.settle_scripts(),
                self.quota_specs(),
                &keys,
                &user,
                adjustment,
                self.manual_now_us(),
            )
            .await
            .inspect(|_| self.forget_denial(key))
    }

    /// Denies `key` for `duration` from now, whatever its quotas hold (an
    /// operator's block; one atomic call). Needs a limiter built with
    /// [`blocking`](crate::limiter::RateLimiterBuilder::blocking) or
    /// [`block_for`](crate::limiter::RateLimiterBuilder::block_for): other
    /// limiters never read blocks, and this returns an error. A zero
    /// duration lifts the block.
    pub async fn block(&self, key: impl AsRef<[u8]>, duration: Duration) -> Result<(), StoreError> {
        match self.current() {
            Some(current) => current.block_here(key.as_ref(), duration).await,
            None => self.block_here(key.as_ref(), duration).await,
        }
    }

    async fn block_here(
        &self,
        key: impl AsRef<[u8]>,
        duration: Duration,
    ) -> Result<(), StoreError> {
        // (a block shorter than a microsecond is one: zero would lift it)
        let us = u64::try_from(duration.as_micros())
            .unwrap_or(u64::MAX)
            .max(u64::from(!duration.is_zero()));
        self.set_block(key.as_ref(), us.min(366 * 86_400 * 1_000_000))
            .await
    }

    /// Lifts a block of `key` (one call); a key not blocked is left as it is.
    pub async fn unblock(&self, key: impl AsRef<[u8]>) -> Result<(), StoreError> {
        match self.current() {
            Some(current) => current.unblock_here(key.as_ref()).await,
            None => self.unblock_here(key.as_ref()).await,
        }
    }

    async fn unblock_here(&self, key: impl AsRef<[u8]>) -> Result<(), StoreError> {
        self.set_block(key.as_ref(), 0).await
    }

    async fn set_block(&self, key: &[u8], us: u64) -> Result<(), StoreError> {
        if self.block_us().is_none() {
            return Err(StoreError::Protocol(
                "blocking is not enabled for this limiter: build it with .blocking() or .block_for(..)"
                    .to_owned(),
            ));
        }
        let user = crate::limiter::storable_key(key);
        let (_, keys) = self.keys_of(&user);
        let Some(block_key) = keys.last() else {
            return Ok(());
        };
        self.bound_store()
            .set_block(
                self.quota_specs(),
                block_key,
                &user,
                us,
                self.manual_now_us(),
            )
            .await
            .inspect(|_| self.forget_denial(key))
    }
}
