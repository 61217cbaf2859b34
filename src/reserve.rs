//! Local reservations for hot keys
//! ([`RateLimiterBuilder::local_reservations`](crate::limiter::RateLimiterBuilder::local_reservations)).
//!
//! A limiter instance takes up to `n` units of a key's quotas in one store
//! call (the *take*) and spends them locally, without a store call, until
//! they run out or the reservation's deadline passes; what it did not spend
//! goes back in one more atomic call (the *give-back*, each strategy's
//! settle operation: `StrategySpec::give_back`).
//!
//! # The bound
//!
//! Per instance and user key there is at most **one** reservation. The task
//! that finds it empty or expired refills it; tasks arriving meanwhile wait
//! for that refill (or, once a take was refused, make their own exact
//! calls), never take a second one. A take spends the taking request's own
//! cost at once, so a reservation holds at most `n - 1` unspent units.
//! Over any window, what an instance spends is at most what it took in
//! that window (which the store counted against the quota, exactly as
//! requests) plus what the one reservation it held when the window began
//! still had: at most `n - 1`. With `k` instances the quota is exceeded by at
//! most `k × (n - 1)` (within the documented `k × n`), whatever the traffic,
//! and never with `n = 1` (no local state at all). Units are spent only
//! before the deadline, which never passes the end of the state they were
//! taken from (a fixed window's end, the aligned window of the sliding
//! counter, the entries' stay in the sliding log, the bucket's refill): a
//! window never sees units that another window counted. A take the quota
//! cannot give in full is not made smaller: the request makes the exact call
//! for its own cost, and so do the instance's requests on that key for one
//! hold time, so a nearly exhausted quota behaves as without reservations.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use crate::decision::Decision;
use crate::error::StoreError;
use crate::limiter::{RateLimiter, storable_key};
use crate::quota::QuotaSpec;
use crate::store::redis::reserve::{GiveBackCall, Scripts};
use crate::store::{Bound, Call, QuotaOutcome};
use crate::strategy::GiveBack;

const SHARDS: usize = 16;
/// A shard reaching this many keys, or a power of two above it, drops those
/// with no live reservation (amortized: a sweep per doubling).
const SWEEP_ABOVE: usize = 1024;

/// One limiter's reservations: the configuration and, per user key, its
/// one reservation.
pub(crate) struct Reserver {
    /// Units per take (at least 2: 1 is the normal path).
    n: u64,
    /// The longest a reservation is spent from (µs).
    hold_us: i64,
    /// A Redis store's take and give-back scripts.
    scripts: Option<Arc<Scripts>>,
    shards: Box<[Mutex<Keys>]>,
    hasher: RandomState,
    /// The origin of local time on the store's clock.
    epoch: tokio::time::Instant,
}

impl std::fmt::Debug for Reserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reserver")
            .field("n", &self.n)
            .field("hold_us", &self.hold_us)
            .finish()
    }
}

/// One shard's keys (stored user keys) and their local state.
type Keys = HashMap<Box<[u8]>, Local>;

/// A user key's local state.
#[derive(Default)]
struct Local {
    held: Option<Held>,
    /// Set while one task refills; up to `n - 1` others wait on it.
    refilling: Option<Arc<Refilling>>,
    /// After a refused or failed take: exact calls until then (local µs).
    exact_until: i64,
}

/// One refill in flight: its waiters, and how it ended.
#[derive(Default)]
struct Refilling {
    notify: Notify,
    /// Tasks waiting for it (at most `n - 1`: more could not be served by it).
    waiting: std::sync::atomic::AtomicU64,
    /// Set when the take failed: what its waiters answer (each would
    /// otherwise make its own call, one store timeout after another), as
    /// errors of the same kind ([`StoreError::shared`]).
    failed: std::sync::OnceLock<Arc<StoreError>>,
}

/// A reservation.
struct Held {
    /// Units not spent yet.
    left: u64,
    /// When it may no longer be spent (local µs).
    deadline: i64,
    /// When its take's reply arrived (local µs): decisions age its times.
    taken: i64,
    /// The take's time on the store's clock.
    at: i64,
    /// Per quota: `at` plus the take's `reset_after` (µs).
    fins: Box<[i64]>,
    /// The take's outcome per quota.
    outcomes: Box<[QuotaOutcome]>,
}

/// Clears a key's refill flag and wakes its waiters, however the refill ends.
struct Refill<'a> {
    reserver: &'a Reserver,
    user: &'a [u8],
    slot: Arc<Refilling>,
}

impl Drop for Refill<'_> {
    fn drop(&mut self) {
        if let Some(local) = self.reserver.shard(self.user).get_mut(self.user)
            && local
                .refilling
                .as_ref()
                .is_some_and(|r| Arc::ptr_eq(r, &self.slot))
        {
            local.refilling = None;
        }
        self.slot.notify.notify_waiters();
    }
}

// (a stack temporary: boxing the decision would allocate per local decision)
#[allow(clippy::large_enum_variant)]
enum Step {
    Spent(Decision),
    Wait(Arc<Refilling>),
    Exact,
    Refill(Option<Held>, Arc<Refilling>),
}

impl Reserver {
    /// Reservations of `n` units (at least 2) held at most `hold`, over `store`.
    pub(crate) fn new(
        n: u64,
        hold: Duration,
        store: &Bound,
        quotas: &[QuotaSpec],
        block: Option<u64>,
    ) -> Self {
        Reserver {
            n,
            hold_us: i64::try_from(hold.as_micros()).unwrap_or(i64::MAX),
            scripts: store.reserve_scripts(quotas, block),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            epoch: tokio::time::Instant::now(),
        }
    }

    /// A Redis store's take and give-back scripts (`None`: a memory store).
    pub(crate) fn scripts(&self) -> Option<&Scripts> {
        self.scripts.as_deref()
    }

    /// The units per take and the hold, to build it again over another store.
    pub(crate) fn config(&self) -> (u64, Duration) {
        (self.n, Duration::from_micros(self.hold_us as u64))
    }

    fn shard(&self, user: &[u8]) -> MutexGuard<'_, Keys> {
        let i = (self.hasher.hash_one(user) as usize) % self.shards.len();
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Local time (µs): the manual clock's, else a monotonic clock's.
    fn now(&self, lim: &RateLimiter) -> i64 {
        match lim.manual_now_us() {
            Some(us) => us as i64,
            None => self.epoch.elapsed().as_micros() as i64,
        }
    }

    /// Decides a request of `cost` (at least 1, at most every capacity) for `key`.
    pub(crate) async fn check(
        &self,
        lim: &RateLimiter,
        key: &[u8],
        cost: u64,
    ) -> Result<Decision, StoreError> {
        let user = &*storable_key(key);
        loop {
            let now = self.now(lim);
            let step = {
                let mut shard = self.shard(user);
                match shard.get_mut(user) {
                    Some(local) => self.step(lim, local, now, cost),
                    // nothing to remember of a key that only makes exact calls
                    None if cost >= self.n => Step::Exact,
                    None => {
                        sweep_if_full(&mut shard, now);
                        let local = shard.entry(user.into()).or_default();
                        self.step(lim, local, now, cost)
                    }
                }
            };
            match step {
                Step::Spent(d) => return Ok(d),
                Step::Exact => return lim.exact(key, cost).await,
                Step::Wait(slot) => {
                    // created before the check below: a refill that ends
                    // after it still wakes this future
                    let notified = slot.notify.notified();
                    if self.shard(user).get(user).is_some_and(|l| {
                        l.refilling.as_ref().is_some_and(|r| Arc::ptr_eq(r, &slot))
                    }) {
                        notified.await;
                    }
                    slot.waiting.fetch_sub(1, Ordering::Relaxed);
                    if let Some(failure) = slot.failed.get() {
                        // the store just failed this key's take: answer as it
                        // did rather than queue one more timeout behind it
                        return Err(StoreError::shared(failure));
                    }
                }
                Step::Refill(old, slot) => {
                    let decision = match tokio::runtime::Handle::try_current() {
                        // a task of its own, so that a caller who gives up (a
                        // timeout, a client gone) does not lose the units its
                        // take counted: the reservation is kept all the same
                        Ok(rt) => {
                            let (lim, user) = (lim.clone(), Box::<[u8]>::from(user));
                            rt.spawn(async move {
                                match lim.reserver() {
                                    Some(r) => r.refill_guarded(&lim, &user, cost, old, slot).await,
                                    None => Ok(None),
                                }
                            })
                            .await
                            .map_err(|e| {
                                StoreError::Protocol(format!("reservation take task failed: {e}"))
                            })?
                        }
                        Err(_) => self.refill_guarded(lim, user, cost, old, slot).await,
                    };
                    match decision? {
                        Some(d) => return Ok(d),
                        None => return lim.exact(key, cost).await,
                    }
                }
            }
        }
    }

    /// What a request of `cost` does with its key's local state at `now`.
    fn step(&self, lim: &RateLimiter, local: &mut Local, now: i64, cost: u64) -> Step {
        match &mut local.held {
            Some(h) if h.deadline > now && h.left >= cost => {
                h.left -= cost;
                Step::Spent(self.spent(lim, h, now))
            }
            _ => match &local.refilling {
                // a refill in flight serves at most n - 1 waiters; the rest
                // decide exactly, concurrently
                Some(slot) if slot.waiting.load(Ordering::Relaxed) + 1 < self.n => {
                    slot.waiting.fetch_add(1, Ordering::Relaxed);
                    Step::Wait(slot.clone())
                }
                Some(_) => Step::Exact,
                None if now < local.exact_until || cost >= self.n => Step::Exact,
                None => {
                    let slot = Arc::new(Refilling::default());
                    local.refilling = Some(slot.clone());
                    Step::Refill(local.held.take(), slot)
                }
            },
        }
    }

    /// [`refill`](Self::refill), then clears the key's refill flag and wakes
    /// its waiters (telling them of a failure), however it ends.
    async fn refill_guarded(
        &self,
        lim: &RateLimiter,
        user: &[u8],
        cost: u64,
        old: Option<Held>,
        slot: Arc<Refilling>,
    ) -> Result<Option<Decision>, StoreError> {
        let guard = Refill {
            reserver: self,
            user,
            slot: slot.clone(),
        };
        let decision = match self.refill(lim, user, cost, old).await {
            Err(e) => {
                // its waiters answer the same error
                let e = Arc::new(e);
                let answer = StoreError::shared(&e);
                let _ = slot.failed.set(e);
                Err(answer)
            }
            decided => decided,
        };
        drop(guard);
        decision
    }

    /// Gives back `old`'s unspent units, then takes `n`, spending `cost` of
    /// them; `None`: the quota could not give `n` (the request then makes its
    /// exact call, as do this instance's others on the key for a hold time).
    async fn refill(
        &self,
        lim: &RateLimiter,
        user: &[u8],
        cost: u64,
        old: Option<Held>,
    ) -> Result<Option<Decision>, StoreError> {
        let quotas = lim.quota_specs();
        let (base, keys) = lim.keys_of(user);
        let manual = lim.manual_now_us();
        let call = Call {
            base: &base,
            user,
            keys: &keys,
            quotas,
            cost: self.n,
            now_us: manual,
            nonce: "",
            block_us: lim.block_us(),
        };
        // the deadline counts from before the take was sent: never later
        // than the end of the state its units come from
        let sent = self.now(lim);
        // the old reservation goes back alongside the take (one round trip of
        // latency; a give-back that fails leaves its units counted)
        let give_back = async {
            if let Some(old) = &old {
                self.give_back(lim, user, old).await;
            }
        };
        let take = lim.bound_store().take(self.scripts.as_deref(), call);
        let ((), taken) = tokio::join!(give_back, take);
        let (outcome, at) = taken?;
        let now = self.now(lim);
        if !outcome.allowed {
            if let Some(l) = self.shard(user).get_mut(user) {
                l.exact_until = now.saturating_add(self.hold_us);
            }
            return Ok(None);
        }
        // on a manual clock the take's time is exact; else when it was sent
        let taken = if manual.is_some() { at } else { sent };
        let horizon = quotas
            .iter()
            .zip(&outcome.quotas)
            .map(|(q, o)| match q.spec().give_back {
                GiveBack::Units { horizon, .. } => {
                    horizon(o.reset_after.as_micros() as i64, q.period_us as i64)
                }
                GiveBack::Never(_) => 0,
            })
            .min()
            .unwrap_or(0)
            .min(self.hold_us);
        let held = Held {
            left: self.n - cost,
            deadline: taken.saturating_add(horizon),
            taken,
            at,
            fins: outcome
                .quotas
                .iter()
                .map(|o| at + o.reset_after.as_micros() as i64)
                .collect(),
            outcomes: outcome.quotas.into_boxed_slice(),
        };
        let decision = self.spent(lim, &held, now);
        if held.deadline <= now {
            // nothing of it can be spent: back at once
            self.give_back(lim, user, &held).await;
            return Ok(Some(decision));
        }
        let mut shard = self.shard(user);
        sweep_if_full(&mut shard, now);
        shard.entry(user.into()).or_default().held = Some(held);
        Ok(Some(decision))
    }

    /// Gives back `held`'s unspent units; a failure leaves them counted.
    async fn give_back(&self, lim: &RateLimiter, user: &[u8], held: &Held) {
        if held.left == 0 {
            return;
        }
        let (_, keys) = lim.keys_of(user);
        let gb = GiveBackCall {
            keys: &keys,
            units: held.left,
            now_us: lim.manual_now_us(),
            at: held.at,
            fins: &held.fins,
        };
        let _ = lim
            .bound_store()
            .give_back(self.scripts.as_deref(), lim.quota_specs(), gb, user)
            .await;
    }

    /// The decision of a request spent from `h` at `now` (after its units
    /// were taken off): the take's state, with what is left locally counted
    /// as remaining (never above the limit) and its times aged.
    fn spent(&self, lim: &RateLimiter, h: &Held, now: i64) -> Decision {
        let age = Duration::from_micros((now - h.taken).max(0) as u64);
        let outcomes = h
            .outcomes
            .iter()
            .zip(lim.quota_specs())
            .map(|(o, q)| QuotaOutcome {
                allowed: true,
                remaining: o.remaining.saturating_add(h.left).min(q.capacity()),
                reset_after: o.reset_after.saturating_sub(age),
                retry_after: None,
                delay: Duration::ZERO,
            });
        lim.decision_of(true, outcomes, None)
    }

    /// Gives back every reservation this limiter holds (one call each).
    pub(crate) async fn flush(&self, lim: &RateLimiter) {
        let mut all = Vec::new();
        for shard in self.shards.iter() {
            let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            for (user, local) in shard.iter_mut() {
                if let Some(h) = local.held.take() {
                    all.push((user.clone(), h));
                }
            }
        }
        for (user, held) in all {
            self.give_back(lim, &user, &held).await;
        }
    }
}

/// Drops the keys of `shard` with nothing live (no reservation to spend, no
/// refill, no exact-call period) when it has grown to [`SWEEP_ABOVE`] keys or
/// a power of two above, and gives back the memory of a shard left mostly
/// empty. What a dropped reservation did not spend stays counted in the store
/// until its state ends (never more than was taken).
fn sweep_if_full(shard: &mut Keys, now: i64) {
    let len = shard.len();
    if len < SWEEP_ABOVE || !len.is_power_of_two() {
        return;
    }
    shard.retain(|_, l| {
        l.refilling.is_some()
            || now < l.exact_until
            || l.held.as_ref().is_some_and(|h| h.deadline > now)
    });
    if shard.capacity() > 4 * shard.len().max(64) {
        shard.shrink_to(2 * shard.len().max(64));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::clock::ManualClock;
    use crate::{MemoryStore, Quota, Rate, RateLimiter};

    fn keys_held(lim: &RateLimiter) -> usize {
        let r = lim.reserver().expect("reservations on");
        r.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }

    #[tokio::test]
    async fn local_state_stays_bounded_by_live_reservations() {
        let clock = ManualClock::new(Duration::from_secs(3_600));
        let lim = RateLimiter::builder()
            .store(MemoryStore::new())
            .quota(Quota::fixed_window(Rate::per_hour(1_000_000)))
            .clock(clock.clone())
            .local_reservations(10)
            .reservation_hold(Duration::from_secs(1))
            .build()
            .unwrap();
        // keys that only make exact calls leave nothing behind
        for i in 0..5_000 {
            assert!(lim.check_n(format!("x{i}"), 10).await.unwrap().allowed());
        }
        assert_eq!(keys_held(&lim), 0);
        // keys whose reservations ended are swept as new keys come
        for round in 0..4 {
            for i in 0..20_000 {
                assert!(lim.check(format!("r{round}-{i}")).await.unwrap().allowed());
            }
            clock.advance(Duration::from_secs(2));
        }
        // live: the last round's 20 000; a shard sweeps when it doubles
        let held = keys_held(&lim);
        assert!(held < 2 * 20_000, "{held} keys held of 80 000 seen");
    }
}
