//! [`RateLimiter`], the façade: the type (public at the crate root only,
//! re-exported there), what it holds (an [engine](super::engine) and the
//! local fast paths in front of it) and the one guard sequence every
//! decision takes before the engine is asked.

use std::any::Any;
use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::decision::{Decision, QuotaName};
use crate::error::StoreError;
use crate::quota::Quota;

use super::deny_cache::{DenyCache, DenyFacts};
use super::engine::Engine;
use super::local_budget::LocalBudgets;

/// Decides whether requests identified by a key may proceed, under one or more [`Quota`](crate::Quota)s.
///
/// Cheap to clone (an `Arc`); clones share the store and configuration.
///
/// ```
/// use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = RateLimiter::builder()
///     .store(MemoryStore::new())
///     .prefix("api")
///     .quota(Quota::gcra(Rate::per_minute(60)).burst(10).name("minute"))
///     .quota(Quota::fixed_window(Rate::per_day(10_000)).name("day"))
///     .build()?;
///
/// let d = limiter.check("user:42").await?;
/// assert!(d.allowed());
/// assert_eq!(d.quota().as_ref(), "minute");
/// assert_eq!(d.remaining(), 9);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RateLimiter {
    pub(super) inner: Arc<Inner>,
}

/// What a limiter holds: its engine, and the local fast paths in front of it.
pub(super) struct Inner {
    pub(super) engine: Engine,
    /// Local budgets, when enabled with more than one unit.
    pub(super) budgets: Option<Arc<LocalBudgets>>,
    /// The denials the middleware's layers over this limiter answer
    /// without a store call (forgotten by its admin operations).
    pub(super) deny: DenyCache,
    /// Limits that change at run time (`RateLimiterBuilder::runtime_limits`):
    /// whose limiter in force makes every decision (this one's own quotas
    /// are those it was built with).
    pub(super) runtime: Option<Box<dyn RuntimeLimits>>,
}

impl AsRef<Engine> for Inner {
    fn as_ref(&self) -> &Engine {
        &self.engine
    }
}

/// Limits that change at run time, as the limiter sees them: the limiter
/// in force. The plans implement it (they sit above the limiter, which
/// knows them by this alone).
pub(crate) trait RuntimeLimits: Send + Sync + 'static {
    /// The limiter in force. Lock-free: one atomic load.
    fn current(&self) -> Option<RateLimiter>;
    /// [`RateLimiter::verify`] of the limits in force, and of the document
    /// they are published in.
    fn verify(&self) -> Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + '_>>;
    /// What implements it (the plans read themselves back).
    fn as_any(&self) -> &dyn Any;
}

impl fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let engine = &self.inner.engine;
        f.debug_struct("RateLimiter")
            .field("store", &engine.store)
            .field("prefix", &engine.keys.prefix())
            .field("quotas", &engine.quotas)
            .field("clock", &engine.clock)
            .finish()
    }
}

/// Where a check goes after the local guards
/// ([`RateLimiter::fast_path`]).
pub(super) enum Fast {
    /// Decided at once (the direct path, a memory store, a cost that never fits).
    Ready(Decision),
    /// The limiter in force decides (runtime limits).
    Elsewhere(RateLimiter),
    /// The store (or a local budget's take) must be waited for.
    Wait,
}

impl RateLimiter {
    /// The guards every decision passes in order, shared by [`Check`](super::Check)
    /// and [`decide_now`](Self::decide_now): the direct path; the limiter
    /// in force, for runtime limits; the local budgets (which may wait for
    /// a take); the engine's answers that need no waiting.
    #[inline(always)]
    pub(super) fn fast_path(&self, key: &[u8], cost: u64) -> Fast {
        let inner = &*self.inner;
        if let Some(decision) = inner.engine.decide_direct(key, cost) {
            return Fast::Ready(decision);
        }
        if let Some(current) = self.current() {
            return Fast::Elsewhere(current);
        }
        if !self.budgets_apply(cost)
            && let Some(decision) = inner.engine.decide_sync(key, cost)
        {
            return Fast::Ready(decision);
        }
        Fast::Wait
    }

    /// The decision of [`check_n`](Self::check_n) when it needs no waiting
    /// (see [`fast_path`](Self::fast_path)). `None`: the store must be
    /// asked (or the limiter in force, with runtime limits).
    pub(crate) fn decide_now(&self, key: &[u8], cost: u64) -> Option<Decision> {
        match self.fast_path(key, cost) {
            Fast::Ready(decision) => Some(decision),
            Fast::Elsewhere(_) | Fast::Wait => None,
        }
    }

    /// Whether a check of `cost` goes through the local budgets.
    fn budgets_apply(&self, cost: u64) -> bool {
        self.inner.budgets.is_some() && cost > 0 && self.inner.engine.fits_every_quota(cost)
    }

    /// [`check_n`](Self::check_n) when it must wait: a local budget, else
    /// the engine's store call.
    pub(super) async fn check_later(
        &self,
        key: Vec<u8>,
        cost: u64,
    ) -> Result<Decision, StoreError> {
        match &self.inner.budgets {
            Some(budgets) if self.budgets_apply(cost) => {
                budgets.check(&self.inner, &key, cost).await
            }
            _ => self.inner.engine.exact(&key, cost).await,
        }
    }

    /// The engine that decides for this limiter (not for the limiter in
    /// force: see [`in_force`](Self::in_force)).
    pub(crate) fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The limiter's local budgets, if it spends from them.
    #[cfg(test)]
    pub(super) fn local_budgets(&self) -> Option<&LocalBudgets> {
        self.inner.budgets.as_deref()
    }

    /// The deny cache of the middleware's layers over this limiter.
    pub(crate) fn deny_cache(&self) -> &DenyCache {
        &self.inner.deny
    }

    /// The quotas' names, in order. For a limiter with
    /// [runtime limits](super::RateLimiterBuilder::runtime_limits), those it was
    /// built with ([`LimitsHandle::quotas`](crate::plans::LimitsHandle::quotas)
    /// tells the quotas in force).
    pub fn quota_names(&self) -> &[QuotaName] {
        &self.inner.engine.names
    }

    /// The prefix of its storage keys (the middleware's metrics label).
    pub(crate) fn prefix(&self) -> &str {
        self.inner.engine.keys.prefix()
    }

    /// The quotas as configured, in [`quota_names`](Self::quota_names)
    /// order (for [runtime limits](super::RateLimiterBuilder::runtime_limits),
    /// those it was built with).
    pub fn quotas(&self) -> Vec<Quota> {
        self.inner
            .engine
            .quotas
            .iter()
            .map(|q| q.quota.clone())
            .collect()
    }

    /// The runtime limits, if the limiter was built with them.
    pub(crate) fn runtime(&self) -> Option<&dyn RuntimeLimits> {
        self.inner.runtime.as_deref()
    }

    /// The limiter in force, for a limiter with
    /// [runtime limits](super::RateLimiterBuilder::runtime_limits); `None` for any
    /// other (which decides itself). Lock-free: one atomic load.
    #[inline]
    pub(super) fn current(&self) -> Option<RateLimiter> {
        self.inner.runtime.as_ref()?.current()
    }

    /// The limiter that acts for this one: [`current`](Self::current) for a
    /// limiter with runtime limits, else itself (its public operations call
    /// their `*_here` body on it).
    #[inline]
    pub(crate) fn in_force(&self) -> Cow<'_, RateLimiter> {
        match self.current() {
            Some(current) => Cow::Owned(current),
            None => Cow::Borrowed(self),
        }
    }
}

/// The deny cache reads the limiter's engine.
impl DenyFacts for RateLimiter {
    fn local_now_us(&self) -> Option<u64> {
        self.inner.engine.local_now_us()
    }

    fn decides_by_counter(&self) -> bool {
        self.inner.engine.decides_by_counter()
    }

    fn denials_cacheable(&self, quota: usize) -> bool {
        self.inner.engine.denials_cacheable(quota)
    }
}
