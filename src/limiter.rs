//! [`RateLimiter`]'s builder and limits: quotas, a store
//! and a clock, answering [`Decision`]s.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::clock::Clock;
use crate::decision::{
    Decision, Interned, Lease, LeaseParts, NEVER, Part, Parts, QuotaName, Template, Templates,
    as_micros, intern_templates,
};
use crate::digest::hash_hex;
use crate::error::{ConfigError, StoreError};
use crate::middleware::deny_cache::{DEFAULT_CAPACITY, DenyCache};
use crate::quota::{Quota, QuotaSpec};
use crate::reserve::Reserver;
use crate::store::memory::{LocalCall, MemoryStore};
use crate::store::{Backend, Bound, Call, QuotaOutcome, Store};
use crate::strategy::Strategy;
use crate::strategy::state::{Algorithm, Raw};

/// Longest user key stored verbatim; longer keys are hashed.
pub const MAX_VERBATIM_KEY_LEN: usize = 128;
/// Longest accepted [`prefix`](RateLimiterBuilder::prefix).
pub const MAX_PREFIX_LEN: usize = 64;

// `RateLimiter` is public at the crate root only (one path per item): its
// module is crate-visible, and `lib.rs` re-exports it.
pub(crate) mod rate_limiter;

pub(crate) use self::rate_limiter::RateLimiter;

struct Inner {
    /// The store, with what it prepared for these quotas.
    store: Bound,
    prefix: String,
    quotas: Vec<QuotaSpec>,
    names: Vec<QuotaName>,
    /// Per quota, what every decision says of it (name, limit, window).
    templates: Interned<Templates>,
    /// `:<quota id>` per quota, appended to the hash-tagged base key.
    key_suffixes: Vec<String>,
    clock: Clock,
    /// Whether decisions need a unique nonce (sorted-set strategies).
    needs_nonce: bool,
    /// Whether a quota hands out leases (an admitted request then holds one).
    holds_leases: bool,
    instance: u64,
    counter: AtomicU64,
    /// Local reservations, when enabled with more than one unit.
    reserve: Option<Reserver>,
    /// Blocking ([`RateLimiterBuilder::block_for`], [`RateLimiterBuilder::blocking`]):
    /// the penalty of a denial in µs (0: none); the block key is then the
    /// last storage key.
    block: Option<u64>,
    /// A Redis store's settle scripts (take, give-back and adjust), for
    /// [`RateLimiter::reserve_n`], `penalize` and `reward`.
    settle: Option<Arc<crate::store::redis::reserve::Scripts>>,
    /// When decisions go straight to a [`MemoryStore`] (see
    /// [`RateLimiter::decide_direct`]).
    direct: Option<Direct>,
    /// The denials the middleware's layers over this limiter answer
    /// without a store call (forgotten by its admin operations).
    deny: DenyCache,
    /// Limits that change at run time ([`RateLimiterBuilder::runtime_limits`]):
    /// a plan of one, whose limiter in force makes every decision (this
    /// one's own quotas are those it was built with).
    runtime: Option<crate::plans::Plans>,
}

impl fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiter")
            .field("store", &self.inner.store)
            .field("prefix", &self.inner.prefix)
            .field("quotas", &self.inner.quotas)
            .field("clock", &self.inner.clock)
            .finish()
    }
}

impl RateLimiter {
    /// Starts a configuration.
    pub fn builder() -> RateLimiterBuilder {
        RateLimiterBuilder::default()
    }

    /// Checks one request (cost 1) for `key`.
    ///
    /// Keys may be any bytes; see [`check_n`](Self::check_n) for how they are stored.
    pub fn check<K: AsRef<[u8]>>(&self, key: K) -> Check<'_, K> {
        self.check_n(key, 1)
    }

    /// Checks a request of weight `cost` for `key`: consumed only if every
    /// quota allows it. `0` [peeks](Self::peek).
    ///
    /// A cost above a quota's capacity (its limit; its burst for bucket
    /// strategies) can never be allowed, so it is denied at once, **without a
    /// store call**: nothing is read or written, whatever the cost. As the
    /// state was not read, such a [`Decision`] reports `allowed: false`,
    /// `retry_after: None`, `remaining: 0` and `reset_after: 0`, bound to the
    /// (last) quota whose capacity the cost exceeds; in its
    /// [`quotas`](Decision::quotas), `allowed` is false exactly for the quotas
    /// whose capacity the cost exceeds, and every quota reports `remaining: 0`,
    /// `reset_after: 0` and `retry_after: None` (not its state). A
    /// [`peek`](Self::peek) tells the state.
    ///
    /// Storage keys are `{<prefix>:<key>}:<id>`, where `<id>` is one letter
    /// naming the strategy (and its state's layout) followed by the rate, e.g.
    /// `r60/1m`, or for a [named](crate::Quota::name) quota by the name, e.g.
    /// `r/minute` (after the period for a fixed window or sliding window
    /// counter, `f1m/minute`; see the guide's [keys](crate::guide::keys#storage-keys)); the braces are a
    /// Redis Cluster hash tag keeping all of one key's quotas in one slot. A key
    /// that is longer than 128 bytes, is not UTF-8, contains `{`, `}` or
    /// control characters, or starts with `~` is stored as `~` and a SHA-256
    /// prefix of it instead, so no key can choose its slot or blow up memory.
    ///
    /// The returned [`Check`] decides when first polled; on a
    /// [`MemoryStore`] it is ready at once.
    pub fn check_n<K: AsRef<[u8]>>(&self, key: K, cost: u64) -> Check<'_, K> {
        Check {
            limiter: self,
            key: Some(key),
            cost,
            store: None,
        }
    }

    /// Whether a check of `cost` goes through the local reservations.
    fn reserves(&self, cost: u64) -> bool {
        self.inner.reserve.is_some()
            && cost > 0
            && self.inner.quotas.iter().all(|q| cost <= q.capacity())
    }

    /// [`check_n`](Self::check_n) when it needs the store or a reservation:
    /// the rest of [`Check`], on the heap.
    async fn check_later(&self, key: Vec<u8>, cost: u64) -> Result<Decision, StoreError> {
        match &self.inner.reserve {
            Some(reserve) if self.reserves(cost) => reserve.check(self, &key, cost).await,
            _ => self.exact(&key, cost).await,
        }
    }

    /// [`check_n`](Self::check_n) without local reservations: one store call.
    pub(crate) async fn exact(&self, key: &[u8], cost: u64) -> Result<Decision, StoreError> {
        match self.decide_sync(key, cost) {
            Some(decision) => Ok(decision),
            None => self.decide_in_store(key, cost).await,
        }
    }

    /// Gives back the unspent units of every local reservation this limiter
    /// holds (see [`RateLimiterBuilder::local_reservations`]): one store call
    /// per reservation. Call it before an instance shuts down; otherwise
    /// unspent units stay counted until their window ends (never more than
    /// were taken). Without reservations it does nothing.
    pub async fn flush_reservations(&self) {
        self.in_force().flush_reservations_here().await
    }

    async fn flush_reservations_here(&self) {
        if let Some(reserve) = &self.inner.reserve {
            reserve.flush(self).await;
        }
    }

    /// The limiter's local reservations, if it makes them.
    pub(crate) fn reserver(&self) -> Option<&Reserver> {
        self.inner.reserve.as_ref()
    }

    /// The decision of [`check_n`](Self::check_n) when it needs no waiting:
    /// the limiter's store is a [`MemoryStore`] (which never fails), or the
    /// cost can never fit. `None`: the store must be asked.
    pub(crate) fn decide_now(&self, key: &[u8], cost: u64) -> Option<Decision> {
        if let Some(decision) = self.decide_direct(key, cost) {
            return Some(decision);
        }
        if self.inner.reserve.is_some() && cost > 0 {
            // (a cost that never fits is still answered at once by check_n)
            return None;
        }
        self.decide_sync(key, cost)
    }

    /// Whether a check of `cost` is answered without a store call, and if so
    /// whether it is allowed: denied when the cost exceeds an enforced
    /// quota's capacity; allowed (nothing consumed) when it exceeds every
    /// quota's, all of them [shadow](Quota::shadow). Otherwise the cost is at
    /// most some enforced quota's capacity (or, all quotas shadow, some
    /// quota's), so every cost a store sees is exact in its arithmetic (a
    /// shadow quota whose capacity it exceeds denies it in the store).
    fn never_fits(&self, cost: u64) -> Option<bool> {
        let quotas = &self.inner.quotas;
        if quotas.iter().any(|q| !q.shadow && cost > q.capacity()) {
            return Some(false);
        }
        // (here every quota whose capacity the cost exceeds is shadow)
        quotas.iter().all(|q| cost > q.capacity()).then_some(true)
    }

    /// Whether every quota is [shadow](Quota::shadow): the limiter then
    /// allows every request, as a shadow layer.
    fn all_shadow(&self) -> bool {
        self.inner.quotas.iter().all(|q| q.shadow)
    }

    /// [`decide_now`](Self::decide_now) without local reservations.
    fn decide_sync(&self, key: &[u8], cost: u64) -> Option<Decision> {
        let inner = &*self.inner;
        if let Some(allowed) = self.never_fits(cost) {
            // Never fits: no store call, so a huge cost costs nothing (and every
            // cost a store sees is at most a capacity, exact in its arithmetic).
            let parts = inner.quotas.iter().map(|q| Part {
                allowed: cost <= q.capacity(),
                remaining: 0,
                reset_us: 0,
                retry_us: NEVER,
            });
            return Some(self.decision(allowed, parts.collect(), 0, None));
        }
        let Bound::Memory(store, scopes) = &inner.store else {
            return None;
        };
        let nonce = self.nonce();
        Some(self.decide_in_memory(store, scopes, key, cost, nonce))
    }

    /// This limiter's random id (also what its reservations are told by).
    pub(crate) fn instance(&self) -> u64 {
        self.inner.instance
    }

    /// A unique id for sorted-set members, if a quota needs one.
    fn nonce(&self) -> String {
        let inner = &*self.inner;
        if inner.needs_nonce {
            let n = inner.counter.fetch_add(1, Ordering::Relaxed);
            format!("{:x}-{n:x}", inner.instance)
        } else {
            String::new()
        }
    }

    /// The store call deciding `cost` on the storage keys `keys` under `base`.
    fn store_call<'a>(
        &'a self,
        base: &'a str,
        user: &'a [u8],
        keys: &'a [String],
        cost: u64,
        nonce: &'a str,
    ) -> Call<'a> {
        let inner = &*self.inner;
        Call {
            base,
            user,
            keys,
            quotas: &inner.quotas,
            cost,
            now_us: inner.clock.manual_now_us(),
            nonce,
            block_us: inner.block,
        }
    }

    /// The decision of a Redis store (after [`decide_now`](Self::decide_now)).
    async fn decide_in_store(&self, key: &[u8], cost: u64) -> Result<Decision, StoreError> {
        let inner = &*self.inner;
        let nonce = self.nonce();
        let user = storable_key(key);
        let (base, keys) = self.keys_of(&user);
        let call = self.store_call(&base, &user, &keys, cost, &nonce);
        let outcome = inner.store.decide(call).await?;
        // (a lone shadow quota's script reports its own verdict)
        let allowed = outcome.allowed || self.all_shadow();
        let lease = self.lease(allowed, cost, nonce, || (base, keys));
        Ok(self.decision_of(allowed, outcome.quotas.iter().copied(), lease))
    }

    /// A decision of the memory store: no storage-key strings (unless a
    /// lease needs them), no allocation for a key it already holds.
    fn decide_in_memory(
        &self,
        store: &MemoryStore,
        scopes: &[u32],
        key: &[u8],
        cost: u64,
        nonce: String,
    ) -> Decision {
        let inner = &*self.inner;
        let user = storable_key(key);
        let now_us = inner.clock.manual_now_us();
        if let ([scope], [quota]) = (scopes, inner.quotas.as_slice()) {
            let raw = store.decide_one(*scope, &user, quota, cost, now_us, &nonce);
            // a lone shadow quota never denies
            let allowed = raw.ok || quota.shadow;
            let lease = self.lease(allowed, cost, nonce, || self.keys_of(&user));
            return self.one_part(allowed, raw, quota.shadow, lease);
        }
        let call = LocalCall {
            scopes,
            user: &user,
            quotas: &inner.quotas,
            cost,
            now_us,
            nonce: &nonce,
            block_us: inner.block,
        };
        let n = inner.quotas.len();
        let placeholder = Raw::deny(0, 0, -1);
        let mut inline = [placeholder; 4];
        let mut heap = Vec::new();
        let out: &mut [Raw] = match inline.get_mut(..n) {
            Some(out) => out,
            None => {
                heap.resize(n, placeholder);
                &mut heap
            }
        };
        let allowed = store.decide(&call, out);
        let lease = self.lease(allowed, cost, nonce, || self.keys_of(&user));
        // (a shadow quota never delays the request)
        let delay = out
            .iter()
            .zip(&inner.quotas)
            .filter(|(_, q)| !q.shadow)
            .map(|(r, _)| r.delay.max(0) as u64)
            .max()
            .unwrap_or(0);
        self.decision(
            allowed,
            out.iter().map(|&r| Part::from(r)).collect(),
            delay,
            lease,
        )
    }

    /// [`check_n`](Self::check_n) of a limiter of one enforced quota on a
    /// [`MemoryStore`], with nothing around it (no reservations, blocks,
    /// leases or manual clock): the store's decision, with none of the
    /// general path's checks. `None`: the general path decides (a peek, a
    /// cost that never fits, any other limiter).
    #[inline(always)]
    fn decide_direct(&self, key: &[u8], cost: u64) -> Option<Decision> {
        let inner = &*self.inner;
        let direct = inner.direct?;
        if !(1..=direct.capacity).contains(&cost) {
            return None;
        }
        let (Bound::Memory(store, scopes), Some(quota)) = (&inner.store, inner.quotas.first())
        else {
            return None;
        };
        let &scope = scopes.first()?;
        let raw = store.decide_tat(scope, &storable_key(key), quota, cost, direct.queue);
        Some(self.one_part(raw.ok, raw, false, None))
    }

    /// The decision of a limiter of one quota (`shadow`: it never delays).
    #[inline(always)]
    fn one_part(&self, allowed: bool, raw: Raw, shadow: bool, lease: Option<Lease>) -> Decision {
        Decision {
            allowed,
            binding: 0,
            delay_us: if shadow { 0 } else { raw.delay.max(0) as u64 },
            parts: Parts::one(Part::from(raw)),
            templates: self.inner.templates.clone(),
            lease,
            shadow_let_through: false,
        }
    }

    /// A decision through the store's take (`src/settle.rs`): as
    /// [`check_n`](Self::check_n), and the time the store decided at, the
    /// stored user key and its storage keys (what a settle needs).
    pub(crate) async fn take_decision(
        &self,
        key: &[u8],
        cost: u64,
    ) -> Result<(Decision, i64, Vec<u8>, Vec<String>), StoreError> {
        let inner = &*self.inner;
        let user = storable_key(key).into_owned();
        if self.never_fits(cost).is_some()
            && let Some(d) = self.decide_sync(key, cost)
        {
            // (a shadow quota's never-fitting request is let through: a
            // settle charges its excess to these keys)
            let (_, keys) = self.keys_of(&user);
            return Ok((d, 0, user, keys));
        }
        let nonce = self.nonce();
        let (base, keys) = self.keys_of(&user);
        let call = self.store_call(&base, &user, &keys, cost, &nonce);
        let (outcome, now) = inner.store.take(self.settle_scripts(), call).await?;
        let allowed = outcome.allowed || self.all_shadow();
        let lease = self.lease(allowed, cost, nonce, || (base, keys.clone()));
        let d = self.decision_of(allowed, outcome.quotas.iter().copied(), lease);
        Ok((d, now, user, keys))
    }

    /// The base and storage keys of a user key as [`storable_key`] gives it.
    pub(crate) fn keys_of(&self, user: &[u8]) -> (String, Vec<String>) {
        let base = self.base_key(user);
        let keys = self.keys(&base);
        (base, keys)
    }

    /// Checks that the store can make this limiter's decisions, for a
    /// startup check: on Redis, that the server is recent enough (5.0 or
    /// later, where `INFO` may be read), that it loads every script of the
    /// limiter (`SCRIPT LOAD`: Lua available, the command allowed and not
    /// renamed), and that one decision and its [`reset`](Self::reset) run
    /// (`EVALSHA`, the commands the script calls and `DEL` allowed on the
    /// prefix's keys; a concurrency lease is released with `ZREM`; with
    /// [local reservations](RateLimiterBuilder::local_reservations) a
    /// reservation is taken too), and that `PING`, which checks idle
    /// connections, is allowed. The probe uses a key of its own, which no
    /// user key is stored as, and leaves no state, even when it fails half-way
    /// (if `DEL` is allowed). A memory store always passes.
    ///
    /// # Errors
    ///
    /// [`StoreError::Refused`] names what the server refuses for good: an ACL
    /// permission (`NOPERM`), a command it does not know (renamed, disabled,
    /// too old a server), or its version; any other [`StoreError`] if the
    /// store could not be reached.
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
        match &self.inner.runtime {
            // (the limits in force, and the document they are published in)
            Some(plans) => plans.verify().await,
            None => self.verify_here().await,
        }
    }

    /// [`verify`](Self::verify) of a limiter without runtime limits (a
    /// plan's).
    pub(crate) async fn verify_here(&self) -> Result<(), StoreError> {
        /// Stored hashed, like every key that starts with `~`, so no user
        /// key's state is touched.
        const PROBE: &[u8] = b"~tower-redis-ratelimit:verify";
        let reserve = self.inner.reserve.as_ref().and_then(Reserver::scripts);
        self.inner.store.verify(reserve).await?;
        let probe = async {
            let decision = self.exact(PROBE, 1).await?;
            if let Some(lease) = &decision.lease {
                self.release(lease).await?;
            }
            if let Some(reserve) = &self.inner.reserve {
                // a local reservation's take runs commands of its own
                reserve.check(self, PROBE, 1).await?;
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

    async fn reset_here(&self, key: impl AsRef<[u8]>) -> Result<(), StoreError> {
        let user = storable_key(key.as_ref());
        let (_, keys) = self.keys_of(&user);
        self.inner.store.reset(&user, &keys).await?;
        self.forget_denial(key.as_ref());
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

    /// The deny cache of the middleware's layers over this limiter.
    pub(crate) fn deny_cache(&self) -> &DenyCache {
        &self.inner.deny
    }

    /// Gives back a [`Concurrency`](Strategy::Concurrency) lease (one round trip).
    /// Releasing twice, or after the lease expired, is harmless.
    pub async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        self.in_force().release_here(lease).await
    }

    async fn release_here(&self, lease: &Lease) -> Result<(), StoreError> {
        self.inner.store.release(lease).await
    }

    /// The storage keys `key` maps to, one per quota (for inspection and tests).
    pub fn storage_keys(&self, key: impl AsRef<[u8]>) -> Vec<String> {
        if let Some(current) = self.current() {
            return current.storage_keys(key);
        }
        self.keys_of(&storable_key(key.as_ref())).1
    }

    /// The quotas' names, in order. For a limiter with
    /// [runtime limits](RateLimiterBuilder::runtime_limits), those it was
    /// built with ([`LimitsHandle::quotas`](crate::plans::LimitsHandle::quotas)
    /// tells the quotas in force).
    pub fn quota_names(&self) -> &[QuotaName] {
        &self.inner.names
    }

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
    pub fn limits(&self) -> Option<crate::plans::LimitsHandle> {
        self.inner.runtime.as_ref().map(crate::plans::Plans::handle)
    }

    /// The plans behind [runtime limits](RateLimiterBuilder::runtime_limits)
    /// (the middleware checks with their limiter in force).
    pub(crate) fn runtime_plans(&self) -> Option<&crate::plans::Plans> {
        self.inner.runtime.as_ref()
    }

    /// The limiter in force, for a limiter with
    /// [runtime limits](RateLimiterBuilder::runtime_limits); `None` for any
    /// other (which decides itself). Lock-free: one atomic load.
    #[inline]
    pub(crate) fn current(&self) -> Option<RateLimiter> {
        let plans = self.inner.runtime.as_ref()?;
        plans.resolve(None).limiter().cloned()
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

    /// The same configuration over another store (e.g. a fallback [`MemoryStore`]).
    ///
    /// For a limiter with [runtime limits](RateLimiterBuilder::runtime_limits):
    /// the limits in force now, which do not change with it.
    pub fn with_store(&self, store: impl Store) -> RateLimiter {
        if let Some(current) = self.current() {
            return current.with_store(store);
        }
        let i = &*self.inner;
        let store =
            store
                .into_backend()
                .bind(&i.quotas, &i.prefix, &i.key_suffixes, i.block, &i.clock);
        let reserve = i.reserve.as_ref().map(|r| {
            let (n, hold) = r.config();
            Reserver::new(n, hold, &store, &i.quotas, i.block)
        });
        let settle = store.reserve_scripts(&i.quotas, i.block);
        let direct = direct(&store, &i.quotas, reserve.is_some(), i.block, &i.clock);
        RateLimiter {
            inner: Arc::new(Inner {
                store,
                prefix: i.prefix.clone(),
                quotas: i.quotas.clone(),
                names: i.names.clone(),
                templates: i.templates.clone(),
                key_suffixes: i.key_suffixes.clone(),
                clock: i.clock.clone(),
                needs_nonce: i.needs_nonce,
                holds_leases: i.holds_leases,
                instance: new_instance_id(),
                counter: AtomicU64::new(0),
                reserve,
                block: i.block,
                settle,
                direct,
                deny: DenyCache::new(DEFAULT_CAPACITY),
                runtime: None,
            }),
        }
    }

    /// The prefix of its storage keys (the middleware's metrics label).
    pub(crate) fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// Blocking as built: the penalty of a denial in µs (0: none), or `None`.
    pub(crate) fn block_us(&self) -> Option<u64> {
        self.inner.block
    }

    /// A Redis store's settle scripts (`None`: a memory store).
    pub(crate) fn settle_scripts(&self) -> Option<&crate::store::redis::reserve::Scripts> {
        self.inner.settle.as_deref()
    }

    /// The manual clock's reading in µs, if the limiter runs on one.
    pub(crate) fn manual_now_us(&self) -> Option<u64> {
        self.inner.clock.manual_now_us()
    }

    /// The store, bound to this limiter.
    pub(crate) fn bound_store(&self) -> &Bound {
        &self.inner.store
    }

    /// The time in µs by the clock this limiter decides with, when that
    /// clock is in this process: its manual clock's, or its memory store's.
    pub(crate) fn local_now_us(&self) -> Option<u64> {
        match (self.inner.clock.manual_now_us(), &self.inner.store) {
            (Some(t), _) => Some(t),
            (None, Bound::Memory(store, _)) => Some(store.now_us().max(0) as u64),
            (None, _) => None,
        }
    }

    /// Whether this limiter decides by a memory store's counter clock (no
    /// manual clock).
    pub(crate) fn decides_by_counter(&self) -> bool {
        self.inner.clock.manual_now_us().is_none() && matches!(self.inner.store, Bound::Memory(..))
    }

    /// The compiled quotas, in [`quota_names`](Self::quota_names) order
    /// (the middleware's `RateLimit-Policy` describes them).
    pub(crate) fn quota_specs(&self) -> &[QuotaSpec] {
        &self.inner.quotas
    }

    /// The strategy of the quota at `index` (in [`quota_names`](Self::quota_names) order).
    pub(crate) fn strategy_at(&self, index: usize) -> Option<Strategy> {
        self.inner.quotas.get(index).map(|q| q.strategy)
    }

    /// `{<prefix>:<user>}`, `user` as [`storable_key`] gives it.
    fn base_key(&self, user: &[u8]) -> String {
        let user = String::from_utf8_lossy(user);
        let mut base = String::with_capacity(self.inner.prefix.len() + user.len() + 3);
        base.push('{');
        base.push_str(&self.inner.prefix);
        base.push(':');
        base.push_str(&user);
        base.push('}');
        base
    }

    fn keys(&self, base: &str) -> Vec<String> {
        self.inner
            .key_suffixes
            .iter()
            .map(|suffix| {
                let mut key = String::with_capacity(base.len() + suffix.len());
                key.push_str(base);
                key.push_str(suffix);
                key
            })
            .collect()
    }

    /// The lease of an admitted request, if a quota hands out leases; `keys`
    /// gives the base and storage keys (only called then).
    fn lease(
        &self,
        allowed: bool,
        cost: u64,
        nonce: String,
        keys: impl FnOnce() -> (String, Vec<String>),
    ) -> Option<Lease> {
        let inner = &*self.inner;
        if !(allowed && cost > 0 && inner.holds_leases) {
            return None;
        }
        let (base, keys) = keys();
        let keys = inner
            .quotas
            .iter()
            .zip(keys)
            .filter(|(q, _)| q.spec().holds_leases)
            .map(|(_, k)| k)
            .collect();
        Some(Lease::new(LeaseParts {
            base,
            keys,
            member: nonce,
            cost,
        }))
    }

    /// The decision of every quota's outcome (in the limiter's order).
    pub(crate) fn decision_of(
        &self,
        allowed: bool,
        outcomes: impl Iterator<Item = QuotaOutcome>,
        lease: Option<Lease>,
    ) -> Decision {
        let mut delay = 0;
        let parts = outcomes
            .zip(&self.inner.quotas)
            .map(|(o, q)| {
                // (a shadow quota never delays the request)
                if !q.shadow {
                    delay = delay.max(as_micros(o.delay));
                }
                Part {
                    allowed: o.allowed,
                    remaining: o.remaining,
                    reset_us: as_micros(o.reset_after),
                    retry_us: o.retry_after.map_or(NEVER, as_micros),
                }
            })
            .collect();
        self.decision(allowed, parts, delay, lease)
    }

    /// The decision of every quota's part, the longest delay among them.
    fn decision(
        &self,
        allowed: bool,
        parts: Parts,
        delay_us: u64,
        lease: Option<Lease>,
    ) -> Decision {
        let all = parts.as_slice();
        // only enforced quotas bind (all of them when every quota is shadow)
        let templates = &self.inner.templates;
        let all_shadow = templates.iter().all(|t| t.shadow);
        let binds = |i: &usize| all_shadow || !templates[*i].shadow;
        let binding = if all.len() == 1 {
            0
        } else if allowed {
            // the fewest requests left
            (0..all.len())
                .filter(binds)
                .min_by_key(|&i| all[i].remaining)
                .unwrap_or(0)
        } else {
            // a denial that never fits, else the one that frees up last
            (0..all.len())
                .filter(binds)
                .filter(|&i| !all[i].allowed)
                .max_by_key(|&i| all[i].retry_us)
                .unwrap_or(0)
        };
        Decision {
            allowed,
            binding: binding as u32,
            delay_us,
            parts,
            templates: self.inner.templates.clone(),
            lease,
            shadow_let_through: false,
        }
    }

    /// The quotas as configured, in [`quota_names`](Self::quota_names)
    /// order (for [runtime limits](RateLimiterBuilder::runtime_limits),
    /// those it was built with).
    pub fn quotas(&self) -> Vec<Quota> {
        self.inner.quotas.iter().map(|q| q.quota.clone()).collect()
    }
}

/// The future of [`RateLimiter::check`] and [`RateLimiter::check_n`].
///
/// It decides when first polled. A decision that needs no store round trip
/// (a [`MemoryStore`], a cost that can never fit) is ready at once, without
/// allocating; one that asks Redis (or takes a local reservation) continues
/// on the heap.
#[must_use = "futures do nothing unless polled"]
pub struct Check<'a, K> {
    limiter: &'a RateLimiter,
    /// `None` once the decision has started.
    key: Option<K>,
    cost: u64,
    store: Option<StoreFuture<'a>>,
}

type StoreFuture<'a> = Pin<Box<dyn Future<Output = Result<Decision, StoreError>> + Send + 'a>>;

// (nothing in a `Check` is ever pinned: the key is only read)
impl<K> Unpin for Check<'_, K> {}

impl<K> fmt::Debug for Check<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Check")
            .field("cost", &self.cost)
            .field("started", &self.key.is_none())
            .finish_non_exhaustive()
    }
}

impl<K: AsRef<[u8]>> Future for Check<'_, K> {
    type Output = Result<Decision, StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some(key) = this.key.take() {
            let (limiter, cost) = (this.limiter, this.cost);
            let key = key.as_ref();
            if let Some(decision) = limiter.decide_direct(key, cost) {
                return Poll::Ready(Ok(decision));
            }
            if let Some(current) = limiter.current() {
                this.store = Some(check_current(current, key, cost));
                return this.poll_store(cx);
            }
            if !limiter.reserves(cost)
                && let Some(decision) = limiter.decide_sync(key, cost)
            {
                return Poll::Ready(Ok(decision));
            }
            let key = key.to_vec();
            this.store = Some(boxed_in_place(|| limiter.check_later(key, cost)));
        }
        this.poll_store(cx)
    }
}

impl<K> Check<'_, K> {
    fn poll_store(&mut self, cx: &mut Context<'_>) -> Poll<Result<Decision, StoreError>> {
        match &mut self.store {
            Some(store) => store.as_mut().poll(cx),
            None => panic!("`Check` polled after completion"),
        }
    }
}

/// The check of a limiter with [runtime limits](RateLimiterBuilder::runtime_limits):
/// `current`'s, the limiter in force.
#[cold]
#[inline(never)]
fn check_current<'a>(current: RateLimiter, key: &[u8], cost: u64) -> StoreFuture<'a> {
    let key = key.to_vec();
    Box::pin(async move { current.check_n(&key, cost).await })
}

/// `Box::pin(make())`, but with the box allocated first so that the value
/// (a future of several kilobytes) is written straight into it instead of
/// being built on the stack and copied.
#[inline(always)]
pub(crate) fn boxed_in_place<F, C>(make: C) -> Pin<Box<F>>
where
    C: FnOnce() -> F,
{
    let slot = Box::<F>::new_uninit();
    Box::into_pin(Box::write(slot, make()))
}

/// The user key as it appears inside the hash tag: UTF-8, always.
#[inline]
pub(crate) fn storable_key(key: &[u8]) -> Cow<'_, [u8]> {
    if key.len() <= MAX_VERBATIM_KEY_LEN && key.first() != Some(&b'~') && verbatim(key) {
        return Cow::Borrowed(key);
    }
    Cow::Owned(hashed_key(key))
}

/// A key that may not be stored as is, as it is stored: `~` and its hash.
#[cold]
#[inline(never)]
fn hashed_key(key: &[u8]) -> Vec<u8> {
    format!("~{}", hash_hex(key)).into_bytes()
}

/// Whether all eight bytes of `w` are printable ASCII but braces.
fn plain_word(w: u64) -> bool {
    not_plain(w) == 0
}

/// The high bit of each byte of `w` that is not printable ASCII, or a brace
/// (and maybe of bytes above one that is).
#[inline(always)]
fn not_plain(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // a byte below `n` (n <= 128), or equal to zero
    let less = |x: u64, n: u64| x.wrapping_sub(ONES * n) & !x & HIGH;
    let zero = |x: u64| less(x, 1);
    let controls = less(w, 0x20);
    // a byte above 0x7e: 0x7f (DEL) or not ASCII
    let above = (w.wrapping_add(ONES) | w) & HIGH;
    let braces = zero(w ^ (ONES * u64::from(b'{'))) | zero(w ^ (ONES * u64::from(b'}')));
    controls | above | braces
}

/// Whether a key may be stored as is: UTF-8 without braces or control
/// characters.
#[inline]
fn verbatim(key: &[u8]) -> bool {
    plain_ascii(key) || verbatim_utf8(key)
}

/// Whether every byte of `key` is printable ASCII but a brace: the usual
/// keys, eight bytes at a time (the last word overlaps the one before it; a
/// short key is padded with spaces).
#[inline]
fn plain_ascii(key: &[u8]) -> bool {
    let word = |w: &[u8]| <[u8; 8]>::try_from(w).is_ok_and(|w| plain_word(u64::from_le_bytes(w)));
    match key.len() {
        0 => true,
        // (short keys as overlapping loads, not a copy to the stack that
        // the word would then be read back from)
        n if n < 4 => {
            let b = |i: usize| u64::from(key[i]);
            // (bytes 3 to 7 are spaces)
            plain_word(b(0) | b(n / 2) << 8 | b(n - 1) << 16 | 0x2020_2020_2000_0000)
        }
        n if n < 8 => {
            let half = |w: &[u8]| <[u8; 4]>::try_from(w).map_or(0, u32::from_le_bytes);
            plain_word(u64::from(half(&key[..4])) | u64::from(half(&key[n - 4..])) << 32)
        }
        // (the usual key: two overlapping words, checked at once)
        8..=16 => match (key.first_chunk::<8>(), key.last_chunk::<8>()) {
            (Some(a), Some(b)) => {
                not_plain(u64::from_le_bytes(*a)) | not_plain(u64::from_le_bytes(*b)) == 0
            }
            _ => false,
        },
        n => key.chunks_exact(8).all(word) && word(&key[n - 8..]),
    }
}

/// [`verbatim`] for a key that is not all printable ASCII.
#[cold]
#[inline(never)]
fn verbatim_utf8(key: &[u8]) -> bool {
    std::str::from_utf8(key)
        .is_ok_and(|s| !s.chars().any(|c| c == '{' || c == '}' || c.is_control()))
}

/// A limiter whose decisions go straight to the store
/// ([`RateLimiter::decide_direct`]).
#[derive(Debug, Clone, Copy)]
struct Direct {
    /// The one quota's capacity.
    capacity: u64,
    /// Its [`Algorithm::Tat`]'s queue.
    queue: bool,
}

/// Whether a limiter's decisions can go straight to the store
/// ([`RateLimiter::decide_direct`]): one enforced quota of the
/// theoretical-arrival-time algorithm on a [`MemoryStore`] and its clock,
/// without reservations or blocks.
fn direct(
    store: &Bound,
    quotas: &[QuotaSpec],
    reserves: bool,
    block: Option<u64>,
    clock: &Clock,
) -> Option<Direct> {
    match (store, quotas) {
        (Bound::Memory(..), [q])
            if !reserves && block.is_none() && !q.shadow && clock.manual_now_us().is_none() =>
        {
            match q.spec().algorithm {
                Algorithm::Tat { queue } => Some(Direct {
                    capacity: q.capacity(),
                    queue,
                }),
                Algorithm::Returns(_) => None,
            }
        }
        _ => None,
    }
}

fn new_instance_id() -> u64 {
    // Random per process and per limiter: unique sorted-set members across instances.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    RandomState::new().hash_one((nanos, std::process::id()))
}

/// Configures a [`RateLimiter`]; see [`RateLimiter::builder`].
#[derive(Default, Clone)]
#[must_use]
pub struct RateLimiterBuilder {
    store: Option<Backend>,
    prefix: Option<String>,
    quotas: Vec<Quota>,
    clock: Clock,
    reservations: Option<u64>,
    hold: Option<Duration>,
    block: Option<Duration>,
    blocking: bool,
    runtime: bool,
    sync: Option<Duration>,
    /// A plan's name: its keys live under `<prefix>/<plan>` (a `/` no
    /// prefix may hold, so no limiter's keys can be a plan's).
    plan: Option<String>,
    /// Its limits change at run time (a plan's limiter): unnamed quotas are
    /// known by strategy and period ([`Quota::compile_in`]).
    stable_ids: bool,
}

impl fmt::Debug for RateLimiterBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiterBuilder")
            .field("store", &self.store)
            .field("prefix", &self.prefix)
            .field("quotas", &self.quotas)
            .finish()
    }
}

impl RateLimiterBuilder {
    /// Where state is kept: a [`RedisStore`](crate::RedisStore) or a [`MemoryStore`]. Required.
    pub fn store(mut self, store: impl Store) -> Self {
        self.store = Some(store.into_backend());
        self
    }

    /// Namespace of every storage key (default `rl`): 1 to 64 bytes of ASCII
    /// letters, digits, `-`, `_` or `.`. No `:`: the first `:` of a key's hash
    /// tag ends the prefix, so limiters of different prefixes never share a
    /// key, whatever their user keys. No `/`: a [`Plans`](crate::plans::Plans)'
    /// plan keeps its keys under `<prefix>/<plan>`, which no limiter's prefix
    /// can be.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// Adds a quota. A limiter needs at least one; all are checked atomically.
    /// A bare [`Rate`](crate::Rate) is a [`Quota::gcra`] at that rate.
    pub fn quota(mut self, quota: impl Into<Quota>) -> Self {
        self.quotas.push(quota.into());
        self
    }

    /// Adds several quotas: [`Quota`]s, or [`Rate`](crate::Rate)s such as those of
    /// [`Rate::parse_list`](crate::Rate::parse_list), each a [`Quota::gcra`]
    /// at that rate, named after it (e.g. `gcra-10-per-60s`).
    ///
    /// ```
    /// use tower_redis_ratelimit::{MemoryStore, Rate, RateLimiter};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder()
    ///     .store(MemoryStore::new())
    ///     .quotas(Rate::parse_list("10/min; 1000/day")?)
    ///     .build()?;
    /// assert_eq!(limiter.quota_names().len(), 2);
    /// # Ok(())
    /// # }
    /// ```
    pub fn quotas<Q: Into<Quota>>(mut self, quotas: impl IntoIterator<Item = Q>) -> Self {
        self.quotas.extend(quotas.into_iter().map(Into::into));
        self
    }

    /// The time source (default [`Clock::Store`]).
    pub fn clock(mut self, clock: impl Into<Clock>) -> Self {
        self.clock = clock.into();
        self
    }

    /// Opt-in local reservations for hot keys: each limiter instance takes
    /// up to `n` units of a key's quotas in one store call and spends them
    /// locally (no store call per decision), giving back what it did not
    /// spend when the reservation expires (on the key's next use, or
    /// [`RateLimiter::flush_reservations`]).
    ///
    /// **Bound:** with `k` instances, a quota is exceeded by at most
    /// `k × (n - 1)` (within `k × n`) in any window, whatever the traffic;
    /// `n = 1` is exactly the normal path. See "Hot keys" in the guide's
    /// [middleware chapter](crate::guide::middleware).
    ///
    /// Rejected at [`build`](Self::build) (`local_reservations`) when `n` is 0
    /// or above a quota's capacity, and for concurrency and leaky-bucket
    /// quotas, whose meaning local spending would break.
    pub fn local_reservations(mut self, n: u64) -> Self {
        self.reservations = Some(n);
        self
    }

    /// The longest a local reservation is spent from (default: 1 s or a
    /// quarter of the shortest quota period, whichever is shorter); it also
    /// never outlives the state its units were taken from. Zero is rejected
    /// (`reservation_hold`).
    pub fn reservation_hold(mut self, hold: Duration) -> Self {
        self.hold = Some(hold);
        self
    }

    /// The penalty box: once a request is denied, its key stays denied for
    /// `duration`, whatever refills meanwhile (rate-limiter-flexible's
    /// `blockDuration`), and `Retry-After` shows the block's end. Also
    /// enables [`RateLimiter::block`] and [`RateLimiter::unblock`].
    ///
    /// One more key per user key (`{<prefix>:<key>}:!`, with a TTL until the
    /// block ends), checked in the same script as the quotas. Limiters built
    /// without blocking never read it and pay nothing for it. Zero is
    /// rejected at [`build`](Self::build) (`block_for`; use
    /// [`blocking`](Self::blocking) for admin blocks alone).
    pub fn block_for(mut self, duration: Duration) -> Self {
        self.block = Some(duration);
        self
    }

    /// Enables [`RateLimiter::block`] and [`RateLimiter::unblock`] without
    /// an automatic penalty: the block key is checked with the quotas, and
    /// only set by an operator.
    pub fn blocking(mut self) -> Self {
        self.blocking = true;
        self
    }

    /// Lets the limits change while the limiter runs: [`RateLimiter::limits`]
    /// then gives the [`LimitsHandle`](crate::plans::LimitsHandle) that
    /// replaces its quotas ([`set_quotas`](crate::plans::LimitsHandle::set_quotas)),
    /// on this instance or, with a [`sync_interval`](Self::sync_interval),
    /// on every instance. Every clone of the limiter, and every layer over
    /// it, decides with the limits in force: a request sees the old limits
    /// or the new ones, read with one atomic load (no lock, no store call).
    /// The mechanism is that of [`Plans`](crate::plans::Plans): the limiter
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
    pub fn runtime_limits(mut self) -> Self {
        self.runtime = true;
        self
    }

    /// [`runtime_limits`](Self::runtime_limits), with the limits kept in
    /// the store too (on Redis, the key `<prefix>:limits`, apart from a
    /// [`Plans`](crate::plans::Plans)' `<prefix>:plans`, as
    /// [`PlansBuilder::sync_interval`](crate::plans::PlansBuilder::sync_interval):
    /// limiters of one prefix share it) and read at most once per
    /// `interval`, so that a
    /// [`publish_quotas`](crate::plans::LimitsHandle::publish_quotas) on one
    /// instance reaches every other. Zero is rejected (`sync_interval`).
    pub fn sync_interval(mut self, interval: Duration) -> Self {
        self.runtime = true;
        self.sync = Some(interval);
        self
    }

    /// Validates the configuration. The error names the field at fault.
    pub fn build(self) -> Result<RateLimiter, ConfigError> {
        if self.runtime {
            return self.build_runtime();
        }
        let store = self.store.ok_or_else(|| {
            ConfigError::new(
                "store",
                "no store configured; call .store(RedisStore::new(pool)) or .store(MemoryStore::new())",
            )
        })?;
        store.validate()?;
        let mut prefix = self.prefix.unwrap_or_else(|| "rl".to_owned());
        validate_prefix(&prefix)?;
        if let Some(plan) = &self.plan {
            // (the plan's name is checked by the plans)
            prefix = format!("{prefix}/{plan}");
        }
        if self.quotas.is_empty() {
            return Err(ConfigError::new(
                "quota",
                "no quota configured; add at least one with .quota(Quota::...)",
            ));
        }
        let mut specs: Vec<QuotaSpec> = Vec::with_capacity(self.quotas.len());
        for (i, q) in self.quotas.iter().enumerate() {
            let spec = q.compile_in(i, self.stable_ids)?;
            if let Some(j) = specs.iter().position(|s| s.name == spec.name) {
                let same = if q.has_name() || self.quotas[j].has_name() {
                    ""
                } else {
                    // derived names differ unless strategy and rate are equal
                    " (the same strategy and rate twice)"
                };
                return Err(ConfigError::new(
                    format!("quota[{i}].name"),
                    format!(
                        "duplicate quota name {:?}{same} (also quota[{j}]); give each quota a distinct .name()",
                        spec.name
                    ),
                ));
            }
            if let Some(j) = specs.iter().position(|s| s.key_id == spec.key_id) {
                // (unnamed quotas of runtime limits: the same strategy and period)
                return Err(ConfigError::new(
                    format!("quota[{i}].name"),
                    format!(
                        "quota[{i}] and quota[{j}] are both unnamed {} quotas of the same period: \
                         a plan knows an unnamed quota by its strategy and period (so that a new \
                         count keeps its state); give each a distinct .name()",
                        spec.strategy
                    ),
                ));
            }
            specs.push(spec);
        }
        let needs_nonce = specs.iter().any(|q| q.spec().needs_nonce);
        let holds_leases = specs.iter().any(|q| q.spec().holds_leases);
        let names: Vec<QuotaName> = specs.iter().map(|q| QuotaName::intern(&q.name)).collect();
        let templates = intern_templates(
            specs
                .iter()
                .zip(&names)
                .map(|(spec, name)| Template {
                    name: name.clone(),
                    limit: spec.capacity(),
                    window: spec.rate.period(),
                    shadow: spec.shadow,
                })
                .collect(),
        );
        // the storage-key suffix of each quota
        let mut key_suffixes: Vec<String> =
            specs.iter().map(|q| format!(":{}", q.key_id)).collect();
        let block = match self.block {
            Some(d) => {
                let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
                if us == 0 {
                    return Err(ConfigError::new(
                        "block_for",
                        "must be above zero (.blocking() enables admin blocks alone)",
                    ));
                }
                if u128::from(us) > RateLimiter::MAX_BLOCK.as_micros() {
                    return Err(ConfigError::new("block_for", "must be at most 366 days"));
                }
                Some(us)
            }
            None => self.blocking.then_some(0),
        };
        if block.is_some() {
            // the block key: `!` is no strategy's key tag
            key_suffixes.push(":!".to_owned());
        }
        if let Some(i) = specs.iter().position(|q| q.shadow) {
            if self.reservations.is_some_and(|n| n > 1) {
                return Err(ConfigError::new(
                    "local_reservations",
                    format!(
                        "not with shadow quotas (quota[{i}]): a reservation takes units from every quota at once"
                    ),
                ));
            }
            if block.is_some() && specs.iter().all(|q| q.shadow) {
                let field = if self.block.is_some() {
                    "block_for"
                } else {
                    "blocking"
                };
                return Err(ConfigError::new(
                    field,
                    "every quota is shadow: such a limiter never denies, so it cannot block",
                ));
            }
        }
        let reserve = validate_reservations(self.reservations, self.hold, &specs)?;
        let store = store.bind(&specs, &prefix, &key_suffixes, block, &self.clock);
        let reserve = reserve.map(|(n, hold)| Reserver::new(n, hold, &store, &specs, block));
        let settle = store.reserve_scripts(&specs, block);
        let direct = direct(&store, &specs, reserve.is_some(), block, &self.clock);
        Ok(RateLimiter {
            inner: Arc::new(Inner {
                store,
                prefix,
                names,
                templates,
                key_suffixes,
                quotas: specs,
                clock: self.clock,
                needs_nonce,
                holds_leases,
                instance: new_instance_id(),
                counter: AtomicU64::new(0),
                reserve,
                block,
                settle,
                direct,
                deny: DenyCache::new(DEFAULT_CAPACITY),
                runtime: None,
            }),
        })
    }
}

/// What [`Plans`](crate::plans::Plans) needs to build one limiter per plan.
impl RateLimiterBuilder {
    /// Keeps the limiter's keys under `<prefix>/<plan>`: a plan's limiter.
    pub(crate) fn plan_scope(mut self, plan: &str) -> Self {
        self.plan = Some(plan.to_owned());
        self
    }

    /// Builds a limiter whose limits change at run time (a plan's): its
    /// unnamed quotas are known by strategy and period, so that a new count
    /// or burst keeps what callers used.
    pub(crate) fn stable_ids(mut self) -> Self {
        self.stable_ids = true;
        self
    }

    /// [`build`](Self::build) with [runtime limits](Self::runtime_limits):
    /// the limiter as built (checked as any), over a plan of one.
    fn build_runtime(mut self) -> Result<RateLimiter, ConfigError> {
        self.runtime = false;
        let sync = self.sync.take();
        let quotas = std::mem::take(&mut self.quotas);
        let limiter = self.clone().quotas(quotas.iter().cloned()).build()?;
        let mut inner = Arc::into_inner(limiter.inner).ok_or_else(|| {
            ConfigError::new("runtime_limits", "the limiter was shared while built")
        })?;
        let prefix = inner.prefix.clone();
        let template = self.prefix(prefix.clone());
        inner.runtime = Some(crate::plans::Plans::single(template, prefix, quotas, sync)?);
        // (this one never decides: the limiter in force does)
        inner.direct = None;
        inner.reserve = None;
        Ok(RateLimiter {
            inner: Arc::new(inner),
        })
    }

    /// The store, as the internal dispatch enum (a clone of another's).
    pub(crate) fn backend(mut self, store: Backend) -> Self {
        self.store = Some(store);
        self
    }

    /// The store given, if any.
    pub(crate) fn store_backend(&self) -> Option<Backend> {
        self.store.clone()
    }

    /// Whether the limiters built block ([`blocking`](Self::blocking) or
    /// [`block_for`](Self::block_for)).
    pub(crate) fn blocks(&self) -> bool {
        self.blocking || self.block.is_some()
    }
}

/// The units per take and the hold of local reservations, if they apply
/// (`n` of 1 is the normal path).
fn validate_reservations(
    n: Option<u64>,
    hold: Option<Duration>,
    specs: &[QuotaSpec],
) -> Result<Option<(u64, Duration)>, ConfigError> {
    let field = "local_reservations";
    if let Some(hold) = hold
        && hold.is_zero()
    {
        return Err(ConfigError::new("reservation_hold", "must be above zero"));
    }
    let Some(n) = n else {
        return Ok(None);
    };
    if n == 0 {
        return Err(ConfigError::new(field, "must be at least 1"));
    }
    for (i, q) in specs.iter().enumerate() {
        if let crate::strategy::GiveBack::Never(why) = q.spec().give_back {
            return Err(ConfigError::new(
                field,
                format!("not for quota[{i}] ({}): {why}", q.strategy),
            ));
        }
        if n > q.capacity() {
            return Err(ConfigError::new(
                field,
                format!(
                    "{n} is above quota[{i}]'s capacity {}: a take could never be granted",
                    q.capacity()
                ),
            ));
        }
    }
    if n == 1 {
        return Ok(None);
    }
    let shortest = specs
        .iter()
        .map(|q| Duration::from_micros(q.period_us / 4))
        .min()
        .unwrap_or(Duration::ZERO);
    let hold = hold.unwrap_or_else(|| shortest.min(Duration::from_secs(1)));
    Ok(Some((n, hold.max(Duration::from_micros(1)))))
}

fn validate_prefix(prefix: &str) -> Result<(), ConfigError> {
    if prefix.is_empty() {
        return Err(ConfigError::new("prefix", "must not be empty"));
    }
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(ConfigError::new(
            "prefix",
            format!(
                "must be at most {MAX_PREFIX_LEN} bytes, got {}",
                prefix.len()
            ),
        ));
    }
    if let Some(c) = prefix
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        let why = if c == ':' {
            " (the ':' after the prefix ends it in every storage key, so a prefix \
             with one would share keys with another limiter's user keys)"
        } else {
            ""
        };
        return Err(ConfigError::new(
            "prefix",
            format!("{prefix:?} contains {c:?}{why}; use ASCII letters, digits, '-', '_' or '.'"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(b: RateLimiterBuilder) -> ConfigError {
        b.build().expect_err("configuration must be rejected")
    }

    #[test]
    fn invalid_configurations_are_rejected_naming_the_field() {
        use crate::{MemoryStore, Rate};
        let q = || Quota::gcra(Rate::per_second(1));
        let e = err(RateLimiter::builder().quota(q()));
        assert_eq!(e.field(), "store");
        assert!(e.to_string().contains("no store configured"), "{e}");

        let e = err(RateLimiter::builder().store(MemoryStore::new()));
        assert_eq!(e.field(), "quota");

        for (prefix, what) in [
            ("", "must not be empty"),
            ("a{b}", "contains '{'"),
            ("with space", "contains ' '"),
            ("app:rl", "another limiter's user keys"),
        ] {
            let e = err(RateLimiter::builder()
                .store(MemoryStore::new())
                .prefix(prefix)
                .quota(q()));
            assert_eq!(e.field(), "prefix");
            assert!(e.to_string().contains(what), "{e}");
        }
        let e = err(RateLimiter::builder()
            .store(MemoryStore::new())
            .prefix("p".repeat(65))
            .quota(q()));
        assert!(e.to_string().contains("at most 64 bytes"), "{e}");

        let e = err(RateLimiter::builder()
            .store(MemoryStore::new())
            .quota(q().name("minute"))
            .quota(Quota::fixed_window(Rate::per_minute(5)).name("minute")));
        assert_eq!(e.field(), "quota[1].name");
        assert!(
            e.to_string().contains("duplicate quota name \"minute\""),
            "{e}"
        );

        let e = err(RateLimiter::builder()
            .store(MemoryStore::new())
            .quota(q())
            .quota(Quota::token_bucket(Rate::per_minute(5)).burst(0)));
        assert_eq!(e.field(), "quota[1].burst");
        assert_eq!(
            e.to_string(),
            "invalid rate limiter configuration: quota[1].burst: must be at least 1"
        );
    }

    #[tokio::test]
    async fn the_direct_path_decides_as_the_general_one() {
        use crate::{MemoryStore, Rate};
        let store = MemoryStore::new();
        let close = |x: Duration, y: Duration| x.abs_diff(y) < Duration::from_secs(1);
        // (slow enough that no unit comes back during the test)
        for (n, burst) in [(5, 4), (1, 1), (3, 10), (1000, 1), (7, 7)] {
            for strategy in [Strategy::Gcra, Strategy::TokenBucket, Strategy::LeakyBucket] {
                let quota = Quota::new(strategy, Rate::per_hour(n)).burst(burst);
                let limiter = |prefix: &str, blocking: bool| {
                    let b = RateLimiter::builder()
                        .store(store.clone())
                        .prefix(prefix)
                        .quota(quota.clone());
                    // (blocking() takes the general path; no block is ever set)
                    if blocking { b.blocking() } else { b }.build().unwrap()
                };
                let id = format!("{n}{burst}{strategy}");
                let (direct, general) = (limiter(&id, false), limiter(&format!("g{id}"), true));
                assert!(direct.inner.direct.is_some() && general.inner.direct.is_none());
                for key in ["k", "{hashed}", &"long".repeat(10)] {
                    for (i, cost) in [1, 2, 0, 1, 11, 1, 1, 3, 0, 1].into_iter().enumerate() {
                        let a = direct.check_n(key, cost).await.unwrap();
                        let b = general.check_n(key, cost).await.unwrap();
                        let what = format!("{n}/h burst {burst} {strategy} {key} step {i}");
                        assert_eq!(a.allowed(), b.allowed(), "{what}");
                        assert_eq!(a.remaining(), b.remaining(), "{what}");
                        assert!(close(a.reset_after(), b.reset_after()), "{what}");
                        match (a.retry_after(), b.retry_after()) {
                            (Some(x), Some(y)) => assert!(close(x, y), "{what}"),
                            (x, y) => assert_eq!(x, y, "{what}"),
                        }
                        let delay = |d: &Decision| d.delay().unwrap_or_default();
                        assert!(close(delay(&a), delay(&b)), "{what}");
                    }
                }
            }
        }
    }

    #[test]
    fn shadow_quotas_reject_leases_reservations_and_blocks_that_could_not_apply() {
        use crate::{MemoryStore, Rate};
        let q = || Quota::gcra(Rate::per_second(10));
        let b = || RateLimiter::builder().store(MemoryStore::new());
        let e = err(b().quota(q()).quota(Quota::concurrency(2).shadow(true)));
        assert_eq!(e.field(), "quota[1].shadow");
        let e = err(b()
            .quota(q())
            .quota(q().name("new").shadow(true))
            .local_reservations(4));
        assert_eq!(e.field(), "local_reservations");
        assert!(e.to_string().contains("quota[1]"), "{e}");
        let e = err(b()
            .quota(q().shadow(true))
            .block_for(Duration::from_secs(1)));
        assert_eq!(e.field(), "block_for");
        let e = err(b().quota(q().shadow(true)).blocking());
        assert_eq!(e.field(), "blocking");
        // an enforced quota beside: blocks apply (on the enforced verdict)
        b().quota(q())
            .quota(q().name("new").shadow(true))
            .block_for(Duration::from_secs(1))
            .build()
            .unwrap();
    }

    #[test]
    fn keys_that_could_steer_slots_or_bloat_memory_are_hashed() {
        assert_eq!(storable_key(b"user:42"), &b"user:42"[..]);
        assert_eq!(storable_key("caf\u{e9}".as_bytes()), "caf\u{e9}".as_bytes());
        assert!(
            storable_key("\u{85}".as_bytes()).starts_with(b"~"),
            "C1 control"
        );
        for bad in [
            &b"a{b}"[..],
            b"}",
            b"\xff\xfe",
            b"line\nbreak",
            b"~looks-hashed",
            &[b'x'; 129][..],
        ] {
            let k = storable_key(bad);
            assert!(k.starts_with(b"~") && k.len() == 33, "{k:?}");
        }
        assert_eq!(storable_key(&[b'x'; 128]).len(), 128);
        assert_ne!(storable_key(b"a{b}"), storable_key(b"a{c}"));
    }

    #[test]
    fn the_word_at_a_time_check_agrees_with_the_bytewise_one() {
        let bytewise = |k: &[u8]| {
            std::str::from_utf8(k)
                .is_ok_and(|s| !s.chars().any(|c| c == '{' || c == '}' || c.is_control()))
        };
        let base = b"user:1234567890abcdefg";
        for b in 0..=255u8 {
            // short keys (padded), one word, overlapping last words
            for len in 1..=base.len() {
                for at in 0..len {
                    let mut k = base[..len].to_vec();
                    k[at] = b;
                    assert_eq!(verbatim(&k), bytewise(&k), "{k:?}");
                    // (the fast check alone: exact too, never a false "no")
                    let ascii = k
                        .iter()
                        .all(|&c| (b' '..=b'~').contains(&c) && c != b'{' && c != b'}');
                    assert_eq!(plain_ascii(&k), ascii, "{k:?}");
                }
            }
            let plain = (b' '..=b'~').contains(&b) && b != b'{' && b != b'}';
            assert_eq!(plain_word(u64::from_le_bytes([b; 8])), plain, "{b}");
        }
        assert!(verbatim(b""));
    }
}
