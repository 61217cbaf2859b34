//! The limiter's admin operations that are no decision: [`peek`](RateLimiter::peek),
//! [`reset`](RateLimiter::reset), [`release`](RateLimiter::release),
//! [`forget_denial`](RateLimiter::forget_denial),
//! [`storage_keys`](RateLimiter::storage_keys),
//! [`flush_local_budgets`](RateLimiter::flush_local_budgets) and
//! [`verify`](RateLimiter::verify) (settling, blocks and penalties are in
//! [`settle`](crate::settle)). Each acts through the limiter in force.

use crate::decision::{Decision, Lease};
use crate::error::StoreError;

use super::keys::storable_key;
use super::rate_limiter::RateLimiter;

impl RateLimiter {
    /// Gives back the unspent units of every local budget this limiter
    /// holds (see [`RateLimiterBuilder::local_budget`](super::RateLimiterBuilder::local_budget)):
    /// one store call per budget. Call it before an instance shuts down;
    /// otherwise unspent units stay counted until their window ends (never
    /// more than were taken). Without local budgets it does nothing.
    pub async fn flush_local_budgets(&self) {
        self.in_force().flush_local_budgets_here().await
    }

    async fn flush_local_budgets_here(&self) {
        if let Some(budgets) = &self.inner.budgets {
            budgets.flush(&self.inner.engine).await;
        }
    }

    /// Checks that the store can make this limiter's decisions, for a
    /// startup check: on Redis, that the server is recent enough (5.0 or
    /// later, where `INFO` may be read), that it loads every script of the
    /// limiter (`SCRIPT LOAD`: Lua available, the command allowed and not
    /// renamed), and that one decision and its [`reset`](Self::reset) run
    /// (`EVALSHA`, the commands the script calls and `DEL` allowed on the
    /// prefix's keys; a concurrency lease is released with `ZREM`; with
    /// a [local budget](super::RateLimiterBuilder::local_budget) a
    /// take is made too), and that `PING`, which checks idle
    /// connections, is allowed. On Redis's clock ([`Clock::Store`], the
    /// default), when the limiter's scripts read `TIME`, it also checks
    /// that a script may read `TIME` and that it answers a time within an
    /// hour of this process's clock: servers that refuse `TIME` in scripts
    /// (an ACL without `+time`, AWS ElastiCache Serverless) or break it
    /// (Dragonfly answers 0) need [`Clock::Caller`], which the error names.
    /// The probe uses a key of its own, which no
    /// user key is stored as, and leaves no state, even when it fails half-way
    /// (if `DEL` is allowed). A memory store always passes.
    ///
    /// [`Clock::Store`]: crate::clock::Clock::Store
    /// [`Clock::Caller`]: crate::clock::Clock::Caller
    ///
    /// # Errors
    ///
    /// [`StoreError::Refused`] names what the server refuses for good: an ACL
    /// permission (`NOPERM`), a command it does not know (renamed, disabled,
    /// too old a server), or its version, and a script's `TIME` refused (its
    /// kind, with a message naming `Clock::Caller`) or far off
    /// ([`RefusalKind::BrokenClock`](crate::error::RefusalKind::BrokenClock));
    /// any other [`StoreError`] if the store could not be reached.
    ///
    /// ```no_run
    /// # use tower_redis_ratelimit::{Quota, Rate, RateLimiter, RedisStore};
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder()
    ///     .store(RedisStore::from_url("redis://127.0.0.1/")?)
    ///     .quota(Quota::gcra(Rate::per_minute(60)))
    ///     .build()?;
    /// limiter.verify().await?; // fails at startup, not on the first request
    /// # Ok(()) }
    /// ```
    pub async fn verify(&self) -> Result<(), StoreError> {
        match self.runtime() {
            // (the limits in force, and the document they are published in)
            Some(runtime) => runtime.verify().await,
            None => self.verify_here().await,
        }
    }

    /// [`verify`](Self::verify) of a limiter without runtime limits (a
    /// plan's).
    pub(crate) async fn verify_here(&self) -> Result<(), StoreError> {
        /// Stored hashed, like every key that starts with `~`, so no user
        /// key's state is touched.
        const PROBE: &[u8] = b"~tower-redis-ratelimit:verify";
        let engine = &self.inner.engine;
        engine.verify_store(self.inner.budgets.is_some()).await?;
        let probe = async {
            let decision = engine.exact(PROBE, 1).await?;
            if let Some(lease) = &decision.lease {
                self.release(lease).await?;
            }
            if let Some(budgets) = &self.inner.budgets {
                // a local budget's take runs commands of its own
                budgets.check(&self.inner, PROBE, 1).await?;
            }
            Ok::<_, StoreError>(())
        }
        .await;
        // the probe's keys go even when it failed half-way (a write the ACL
        // let through before a refused `PEXPIRE` would have no TTL)
        let reset = self.reset(PROBE).await;
        probe.and(reset)
    }

    /// Reports the state of `key` without consuming anything (cost 0).
    ///
    /// It is `allowed` unless even a cost of 0 does not fit: a blocked key,
    /// or one in debt (charged past its limit by a settle or
    /// [`penalize`](Self::penalize)), is denied with its `retry_after`. At
    /// the limit exactly it is allowed: `remaining` tells whether a request
    /// would pass now.
    pub async fn peek(&self, key: impl AsRef<[u8]>) -> Result<Decision, StoreError> {
        self.check_n(key, 0).await
    }

    /// Forgets every quota's state for `key` (one round trip), and its block
    /// if the limiter blocks. The middleware's next request for `key` on this
    /// instance asks the store (see [`forget_denial`](Self::forget_denial)).
    pub async fn reset(&self, key: impl AsRef<[u8]>) -> Result<(), StoreError> {
        self.in_force().reset_here(key.as_ref()).await
    }

    async fn reset_here(&self, key: &[u8]) -> Result<(), StoreError> {
        self.inner.engine.reset(key).await?;
        self.forget_denial(key);
        Ok(())
    }

    /// Forgets the denial of `key` that the middleware's layers over this
    /// limiter keep in their deny cache, so that their next request for
    /// `key` asks the store. Every admin operation of the limiter
    /// ([`reset`](Self::reset), [`reward`](Self::reward),
    /// [`set_remaining`](Self::set_remaining), [`block`](Self::block),
    /// [`unblock`](Self::unblock), [`penalize`](Self::penalize)) does it
    /// once its store call succeeds; call it after changing `key`'s state
    /// by other means (say another limiter of the same configuration).
    /// Other instances' caches, and this one's after a failed call (which
    /// may have been applied), keep a denial for at most a second (see "Local deny cache"
    /// in the guide's [middleware chapter](crate::guide::middleware)).
    pub fn forget_denial(&self, key: impl AsRef<[u8]>) {
        if let Some(current) = self.current() {
            return current.forget_denial(key);
        }
        self.inner.deny.forget(key.as_ref());
    }

    /// Gives back a [`Concurrency`](crate::strategy::Strategy::Concurrency)
    /// lease (one round trip). Releasing twice, or after the lease expired,
    /// is harmless.
    pub async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        self.in_force().inner.engine.release(lease).await
    }

    /// The storage keys `key` maps to, one per quota (for inspection and tests).
    pub fn storage_keys(&self, key: impl AsRef<[u8]>) -> Vec<String> {
        if let Some(current) = self.current() {
            return current.storage_keys(key);
        }
        self.inner.engine.keys_of(&storable_key(key.as_ref())).1
    }
}
