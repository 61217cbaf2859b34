//! Runtime limits of one [`RateLimiter`]
//! ([`RateLimiterBuilder::runtime_limits`]): a [`Plans`] of one plan, which
//! the limiter knows only as [`RuntimeLimits`] (the limiter sits below the
//! plans, and never names them): the builder is handed the constructor
//! ([`single`]), the limiter reads the plans back for [`RateLimiter::limits`].

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::{LimitsHandle, Plans};
use crate::error::{ConfigError, StoreError};
use crate::limiter::{RateLimiter, RateLimiterBuilder, RuntimeLimits};
use crate::quota::Quota;

impl RateLimiterBuilder {
    /// Lets the limits change while the limiter runs: [`RateLimiter::limits`]
    /// then gives the [`LimitsHandle`](super::LimitsHandle) that
    /// replaces its quotas ([`set_quotas`](super::LimitsHandle::set_quotas)),
    /// on this instance or, with a [`sync_interval`](Self::sync_interval),
    /// on every instance. Every clone of the limiter, and every layer over
    /// it, decides with the limits in force: a request sees the old limits
    /// or the new ones, read with one atomic load (no lock, no store call).
    /// The mechanism is that of [`Plans`](super::Plans): the limiter
    /// is one plan (named `default`) under the limiter's own prefix, so
    /// what stored state means under new limits is as the plans' module
    /// docs say. A named quota keeps the key it has without runtime limits;
    /// an unnamed one is known by its strategy and period, as in a plan
    /// (`r1m`, not `r60/1m`), so turning runtime limits on starts the
    /// unnamed quotas' state afresh once.
    ///
    /// A [`Reservation`](crate::settle::Reservation) is settled by the
    /// limits it was made under: settling one made before a change through
    /// this limiter is an error (the middleware settles each request with
    /// the limits that admitted it).
    pub fn runtime_limits(self) -> Self {
        self.runtime_by(single)
    }

    /// [`runtime_limits`](Self::runtime_limits), with the limits kept in
    /// the store too (on Redis, the key `<prefix>:limits`, apart from a
    /// [`Plans`](super::Plans)' `<prefix>:plans`, as
    /// [`PlansBuilder::sync_interval`](super::PlansBuilder::sync_interval):
    /// limiters of one prefix share it) and read at most once per
    /// `interval`, so that a
    /// [`publish_quotas`](super::LimitsHandle::publish_quotas) on one
    /// instance reaches every other. Zero is rejected (`sync_interval`).
    pub fn sync_interval(self, interval: Duration) -> Self {
        self.runtime_by(single).sync_every(interval)
    }
}

impl RateLimiter {
    /// The handle that changes this limiter's limits while it runs, if it
    /// was built with [`runtime_limits`](RateLimiterBuilder::runtime_limits)
    /// (or a [`sync_interval`](RateLimiterBuilder::sync_interval)).
    ///
    /// ```
    /// use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder()
    ///     .store(MemoryStore::new())
    ///     .quota(Quota::fixed_window(Rate::per_minute(1)).name("minute"))
    ///     .runtime_limits()
    ///     .build()?;
    /// assert!(limiter.check("10.0.0.1").await?.allowed());
    /// assert!(limiter.check("10.0.0.1").await?.denied());
    ///
    /// // every clone (a layer's too) decides with the new limits from now on
    /// let handle = limiter.limits().expect("built with runtime limits");
    /// handle.set_quotas([Quota::fixed_window(Rate::per_minute(5)).name("minute")])?;
    /// assert!(limiter.check("10.0.0.1").await?.allowed());
    /// # Ok(())
    /// # }
    /// ```
    pub fn limits(&self) -> Option<LimitsHandle> {
        self.runtime_plans().map(Plans::handle)
    }

    /// The plans behind [runtime limits](RateLimiterBuilder::runtime_limits)
    /// (the middleware checks with their limiter in force).
    pub(crate) fn runtime_plans(&self) -> Option<&Plans> {
        self.runtime()?.as_any().downcast_ref::<Plans>()
    }
}

/// The runtime limits of a limiter being built: a plan of one
/// ([`Plans::single`]).
fn single(
    template: RateLimiterBuilder,
    prefix: String,
    quotas: Vec<Quota>,
    sync: Option<Duration>,
) -> Result<Box<dyn RuntimeLimits>, ConfigError> {
    Ok(Box::new(Plans::single(template, prefix, quotas, sync)?))
}

impl RuntimeLimits for Plans {
    #[inline]
    fn current(&self) -> Option<RateLimiter> {
        self.resolve(None).limiter().cloned()
    }

    fn verify(&self) -> Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + '_>> {
        Box::pin(Plans::verify(self))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
