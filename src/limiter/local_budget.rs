//! Local budgets for hot keys
//! ([`RateLimiterBuilder::local_budget`](crate::limiter::RateLimiterBuilder::local_budget)),
//! spent in front of the limiter's [engine](super::engine).
//!
//! A limiter instance takes up to `n` units of a key's quotas in one store
//! call (the *take*) and spends them locally, without a store call, until
//! they run out or the budget's deadline passes; what it did not spend
//! goes back in one more atomic call (the *give-back*, each strategy's
//! settle operation: `StrategySpec::give_back`).
//!
//! # The bound
//!
//! Per instance and user key there is at most **one** budget. The task
//! that finds it empty or expired refills it; tasks arriving meanwhile wait
//! for that refill (or, once a take was refused, make their own exact
//! calls), never take a second one. A take spends the taking request's own
//! cost at once, so a budget holds at most `n - 1` unspent units.
//! Over any window, what an instance spends is at most what it took in
//! that window (which the store counted against the quota, exactly as
//! requests) plus what the one budget it held when the window began
//! still had: at most `n - 1`. With `k` instances the quota is exceeded by at
//! most `k × (n - 1)` (within the documented `k × n`), whatever the traffic,
//! and never with `n = 1` (no local state at all). Units are spent only
//! before the deadline, which never passes the end of the window they were
//! counted in (a fixed window's end, the aligned window of the sliding
//! counter, the entries' stay in the sliding log): a window never sees units
//! that another window counted. A bucket (GCRA, token bucket) has no window:
//! its units are spent for the hold, even after the bucket has refilled what
//! the take drew (within `n` intervals when it was nearly full, often sooner
//! than the take's reply), and that is the `n - 1` the bound counts. A take the quota
//! cannot give in full is not made smaller: the request makes the exact call
//! for its own cost, and so do the instance's requests on that key for one
//! hold time, so a nearly exhausted quota behaves as without budgets.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use crate::decision::Decision;
use crate::error::StoreError;
use crate::store::QuotaOutcome;
use crate::strategy::GiveBack;

use super::engine::Engine;
use super::keys::storable_key;

const SHARDS: usize = 16;
/// A shard reaching this many keys, or a power of two above it, drops those
/// with no live budget (amortized: a sweep per doubling).
const SWEEP_ABOVE: usize = 1024;

/// One limiter's local budgets: the configuration and, per user key, its
/// one budget of units.
pub(super) struct LocalBudgets {
    /// Units per take (at least 2: 1 is the normal path).
    n: u64,
    /// The longest a budget is spent from (µs).
    hold_us: i64,
    shards: Box<[Mutex<Keys>]>,
    hasher: RandomState,
    /// The origin of local time on the store's clock.
    epoch: tokio::time::Instant,
}

impl std::fmt::Debug for LocalBudgets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalBudgets")
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

/// A budget.
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
    budgets: &'a LocalBudgets,
    user: &'a [u8],
    slot: Arc<Refilling>,
}

impl Drop for Refill<'_> {
    fn drop(&mut self) {
        if let Some(local) = self.budgets.shard(self.user).get_mut(self.user)
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

impl LocalBudgets {
    /// Budgets of `n` units (at least 2) held at most `hold`.
    pub(super) fn new(n: u64, hold: Duration) -> Self {
        LocalBudgets {
            n,
            hold_us: i64::try_from(hold.as_micros()).unwrap_or(i64::MAX),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            epoch: tokio::time::Instant::now(),
        }
    }

    /// The units per take and the hold, to build it again over another store.
    pub(super) fn config(&self) -> (u64, Duration) {
        (self.n, Duration::from_micros(self.hold_us as u64))
    }

    fn shard(&self, user: &[u8]) -> MutexGuard<'_, Keys> {
        let i = (self.hasher.hash_one(user) as usize) % self.shards.len();
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Local time (µs): the manual or caller clock's, else a monotonic clock's.
    fn now(&self, engine: &Engine) -> i64 {
        match engine.sent_now_us() {
            Some(us) => us as i64,
            None => self.epoch.elapsed().as_micros() as i64,
        }
    }

    /// Decides a request of `cost` (at least 1, at most every capacity) for
    /// `key`, spending from `engine`'s takes (its owner's handle: a take
    /// runs in a task of its own, which holds it and these budgets).
    pub(super) async fn check<H>(
        self: &Arc<Self>,
        engine: &Arc<H>,
        key: &[u8],
        cost: u64,
    ) -> Result<Decision, StoreError>
    where
        H: AsRef<Engine> + Send + Sync + 'static,
    {
        let handle = engine;
        let engine: &Engine = (**handle).as_ref();
        let user = &*storable_key(key);
        loop {
            let now = self.now(engine);
            let step = {
                let mut shard = self.shard(user);
                match shard.get_mut(user) {
                    Some(local) => self.step(engine, local, now, cost),
                    // nothing to remember of a key that only makes exact calls
                    None if cost >= self.n => Step::Exact,
                    None => {
                        sweep_if_full(&mut shard, now);
                        let local = shard.entry(user.into()).or_default();
                        self.step(engine, local, now, cost)
                    }
                }
            };
            match step {
                Step::Spent(d) => return Ok(d),
                Step::Exact => return engine.exact(key, cost).await,
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
                        // take counted: the budget is kept all the same
                        Ok(rt) => {
                            let (budgets, handle) = (self.clone(), handle.clone());
                            let user = Box::<[u8]>::from(user);
                            rt.spawn(async move {
                                let engine: &Engine = (*handle).as_ref();
                                budgets.refill_guarded(engine, &user, cost, old, slot).await
                            })
                            .await
                            .map_err(|e| {
                                StoreError::Protocol(format!("local budget take task failed: {e}"))
                            })?
                        }
                        Err(_) => self.refill_guarded(engine, user, cost, old, slot).await,
                    };
                    match decision? {
                        Some(d) => return Ok(d),
                        None => return engine.exact(key, cost).await,
                    }
                }
            }
        }
    }

    /// What a request of `cost` does with its key's local state at `now`.
    fn step(&self, engine: &Engine, local: &mut Local, now: i64, cost: u64) -> Step {
        match &mut local.held {
            Some(h) if h.deadline > now && h.left >= cost => {
                h.left -= cost;
                Step::Spent(self.spent(engine, h, now))
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
        engine: &Engine,
        user: &[u8],
        cost: u64,
        old: Option<Held>,
        slot: Arc<Refilling>,
    ) -> Result<Option<Decision>, StoreError> {
        let guard = Refill {
            budgets: self,
            user,
            slot: slot.clone(),
        };
        let decision = match self.refill(engine, user, cost, old).await {
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
        engine: &Engine,
        user: &[u8],
        cost: u64,
        old: Option<Held>,
    ) -> Result<Option<Decision>, StoreError> {
        let quotas = engine.quotas();
        let manual = engine.sent_now_us();
        // the deadline counts from before the take was sent: never later
        // than the end of the state its units come from
        let sent = self.now(engine);
        // the old budget goes back alongside the take (one round trip of
        // latency; a give-back that fails leaves its units counted)
        let give_back = async {
            if let Some(old) = &old {
                self.give_back(engine, user, old).await;
            }
        };
        let take = engine.take_units(user, self.n);
        let ((), taken) = tokio::join!(give_back, take);
        let (outcome, at) = taken?;
        let now = self.now(engine);
        if !outcome.allowed {
            if let Some(l) = self.shard(user).get_mut(user) {
                l.exact_until = now.saturating_add(self.hold_us);
            }
            return Ok(None);
        }
        // on a manual or caller clock the take's time is exact (the one it
        // sent); else when it was sent
        let taken = if manual.is_some() { at } else { sent };
        let horizon = quotas
            .iter()
            .zip(&outcome.quotas)
            .map(|(q, o)| match q.spec().give_back {
                GiveBack::Units { horizon, .. } => {
                    horizon(o.reset_after.as_micros() as i64, q.period_us as i64)
                }
                // (rejected at build)
                GiveBack::Reservations { .. } | GiveBack::Never(_) => 0,
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
        let decision = self.spent(engine, &held, now);
        if held.deadline <= now {
            // nothing of it can be spent: back at once
            self.give_back(engine, user, &held).await;
            return Ok(Some(decision));
        }
        let mut shard = self.shard(user);
        sweep_if_full(&mut shard, now);
        shard.entry(user.into()).or_default().held = Some(held);
        Ok(Some(decision))
    }

    /// Gives back `held`'s unspent units; a failure leaves them counted.
    async fn give_back(&self, engine: &Engine, user: &[u8], held: &Held) {
        if held.left == 0 {
            return;
        }
        let (_, keys) = engine.keys_of(user);
        let _ = engine
            .give_back(user, &keys, held.left, held.at, &held.fins)
            .await;
    }

    /// The decision of a request spent from `h` at `now` (after its units
    /// were taken off): the take's state, with what is left locally counted
    /// as remaining (never above the limit) and its times aged.
    fn spent(&self, engine: &Engine, h: &Held, now: i64) -> Decision {
        let age = Duration::from_micros((now - h.taken).max(0) as u64);
        let outcomes = h
            .outcomes
            .iter()
            .zip(engine.quotas())
            .map(|(o, q)| QuotaOutcome {
                allowed: true,
                remaining: o.remaining.saturating_add(h.left).min(q.capacity()),
                reset_after: o.reset_after.saturating_sub(age),
                retry_after: None,
                delay: Duration::ZERO,
            });
        engine.decision_of(true, outcomes, None)
    }

    /// Gives back every budget these budgets hold (one call each).
    pub(super) async fn flush(&self, engine: &Engine) {
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
            self.give_back(engine, &user, &held).await;
        }
    }
}

/// Drops the keys of `shard` with nothing live (no budget to spend, no
/// refill, no exact-call period) when it has grown to [`SWEEP_ABOVE`] keys or
/// a power of two above, and gives back the memory of a shard left mostly
/// empty. What a dropped budget did not spend stays counted in the store
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
        let r = lim.local_budgets().expect("local budgets on");
        r.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }

    #[tokio::test]
    async fn local_state_stays_bounded_by_live_budgets() {
        let clock = ManualClock::new(Duration::from_secs(3_600));
        let lim = RateLimiter::builder()
            .store(MemoryStore::new())
            .quota(Quota::fixed_window(Rate::per_hour(1_000_000)))
            .clock(clock.clone())
            .local_budget(10)
            .local_budget_hold(Duration::from_secs(1))
            .build()
            .unwrap();
        // keys that only make exact calls leave nothing behind
        for i in 0..5_000 {
            assert!(lim.check_n(format!("x{i}"), 10).await.unwrap().allowed());
        }
        assert_eq!(keys_held(&lim), 0);
        // keys whose budgets ended are swept as new keys come
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
