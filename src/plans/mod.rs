//! Plans (tiers) and limits that change while the service runs.
//!
//! A [`Plans`] holds one limiter per named [`Plan`] (say `free`: 60/minute
//! and 1 000/day, `pro`: 600/minute, `internal`: unlimited) over one store,
//! and a default plan for callers whose plan is unknown. A request is checked
//! against its plan's quotas alone: still one store call. The middleware
//! takes a [`Plans`] with a [`PlanResolver`](crate::middleware::PlanResolver)
//! ([`RateLimitLayer::with_plans`](crate::RateLimitLayer::with_plans)).
//!
//! A [`LimitsHandle`] (cloneable, `Send + Sync`) replaces a plan's quotas,
//! or every plan, at run time. The swap is one atomic pointer store: a
//! request sees the old limits or the new ones, never none, and the check
//! reads them without a lock ([`arc_swap`](https://docs.rs/arc-swap)). With
//! [`PlansBuilder::sync_interval`], the current limits also live in the store
//! (on Redis, the key `<prefix>:plans`, in the text notation of
//! [`PlansConfig`]'s `Display`): [`LimitsHandle::publish`] writes them there,
//! and every instance reads that key at most once per interval (in a task of
//! its own, never on a request's path), so a change made on one instance
//! reaches the others.
//!
//! # Keys, and what happens to stored state when limits change
//!
//! Each plan's keys live under the prefix `<prefix>/<plan>` (so a plan named
//! `pro` of prefix `api` keeps `{api/pro:<key>}:<quota id>`): keys of
//! different plans never share state, and a caller who moves to another
//! plan starts fresh on it (and finds its old state again if it moves back
//! before that state expired). [`PlansBuilder::carry_over`] puts every plan
//! under the prefix itself instead: a quota of the same strategy and name
//! (and period, for a fixed window or sliding window counter) in two plans
//! then has one state, which a caller who upgrades keeps.
//!
//! The rule (the guide's
//! [Changing limits while running](crate::guide::plans#changing-limits-while-running)
//! has the table of every strategy): from a key's first decision under the
//! new limits, the caller has used what it had used under the old ones,
//! counted in the new limit's units; so **raising a limit never denies a request the old limits would
//! have admitted, and lowering one never admits a request the new limits
//! would not**. A [named](crate::Quota::name) quota keeps its storage key,
//! and its state, across any change of count or burst, and of period except
//! for the fixed window and the sliding window counter (their state is a
//! count per window of the period: a new period starts afresh). A plan knows
//! an unnamed quota by its strategy and period (two such of one strategy and
//! period are refused): it keeps its state across any change of count or
//! burst, and a new period makes it another quota. A change of strategy
//! moves the quota to a new key that starts empty.
//!
//! Limiters are built (and checked) before the swap; an invalid new
//! configuration is rejected with a [`ConfigError`] naming the field
//! (`plans.pro.quotas[1].burst`) and the old limits stay.
//!
//! ```
//! use tower_redis_ratelimit::plans::{Plan, Plans};
//! use tower_redis_ratelimit::{MemoryStore, Quota, Rate};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let plans = Plans::builder()
//!     .store(MemoryStore::new())
//!     .prefix("api")
//!     .plan("free", Plan::new([Quota::fixed_window(Rate::per_minute(2)).name("minute")]))
//!     .plan("internal", Plan::unlimited())
//!     .default_plan("free")
//!     .build()?;
//! assert!(plans.check("free", "user:1").await?.is_some_and(|d| d.allowed()));
//! assert!(plans.check("no-such-plan", "user:1").await?.is_some_and(|d| d.allowed()));
//! assert!(plans.check("free", "user:1").await?.is_some_and(|d| d.denied()));
//! assert!(plans.check("internal", "user:1").await?.is_none()); // unlimited
//!
//! // raise the limit while running: the state is kept, the new limit admits at once
//! plans.handle().set_plan("free", Plan::new([Quota::fixed_window(Rate::per_minute(5)).name("minute")]))?;
//! assert_eq!(plans.check("free", "user:1").await?.map(|d| d.remaining()), Some(2));
//! # Ok(())
//! # }
//! ```

mod config;
mod runtime;
#[cfg(feature = "serde")]
mod serde;
mod text;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;

pub use self::config::{Plan, PlansConfig};
use crate::clock::Clock;
use crate::decision::{Decision, Interned, intern};
use crate::error::{ConfigError, StoreError};
use crate::limiter::{MAX_PREFIX_LEN, RateLimiter, RateLimiterBuilder};
use crate::quota::Quota;
use crate::store::{Backend, Store};

/// Every plan's limiter, swapped whole by a [`LimitsHandle`]; see the
/// [module docs](self).
///
/// Cheap to clone (an `Arc`); clones share the plans and their limits.
#[derive(Clone)]
pub struct Plans {
    shared: Arc<Shared>,
}

/// A cloneable, `Send + Sync` handle that changes a [`Plans`]' limits while
/// it runs; from [`Plans::handle`].
#[derive(Clone)]
pub struct LimitsHandle {
    shared: Arc<Shared>,
}

struct Shared {
    store: Backend,
    prefix: String,
    /// Every plan's limiter options but its prefix and quotas (store,
    /// clock, blocks).
    template: RateLimiterBuilder,
    carry_over: bool,
    /// The limits of one [`RateLimiter`] with runtime limits: one limited
    /// plan, labelled as no plan.
    single: bool,
    current: ArcSwap<Snapshot>,
    /// Serializes updates (never taken by a check).
    update: Mutex<()>,
    generation: AtomicU64,
    /// Counts the limits applied (under `update`): a read of the store that
    /// began before a local change must not undo it.
    applied: AtomicU64,
    sync: Option<StoreSync>,
    /// The capacity of each plan's deny cache (0: the default).
    deny_capacity: AtomicUsize,
}

/// Reading the limits from the store (and writing them there): the polling
/// state of a `Plans` built with a sync interval.
struct StoreSync {
    interval_us: u64,
    /// The name of the store's text document the limits are kept in
    /// (`<prefix>:plans`, a plain string key on Redis), holding the
    /// [`PlansConfig`] in its text notation.
    key: String,
    /// When the store was last read (µs since `epoch`, plus one; 0: never).
    last_poll: AtomicU64,
    polling: AtomicBool,
    epoch: tokio::time::Instant,
    /// The text last read from or written to the store.
    last_text: Mutex<Option<String>>,
}

/// The limits in force: every plan, built.
struct Snapshot {
    config: PlansConfig,
    by_name: HashMap<String, Arc<ActivePlan>>,
    default: Arc<ActivePlan>,
}

/// One plan as it is in force now: its name and limiter (none for an
/// unlimited plan), from [`Plans::resolve`].
pub struct ActivePlan {
    name: Interned<str>,
    /// The `plan` label of metrics: the name, or none for the plan of a
    /// [`RateLimiter`] with runtime limits.
    pub(crate) label: Interned<str>,
    plan: Plan,
    limiter: Option<RateLimiter>,
    /// Distinct for every build of a plan (the middleware's fallback
    /// limiters key by it).
    pub(crate) generation: u64,
}

impl ActivePlan {
    /// The plan's name (the default plan's for a request whose plan was unknown).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The plan's limiter; `None` for an unlimited plan.
    pub fn limiter(&self) -> Option<&RateLimiter> {
        self.limiter.as_ref()
    }

    /// Whether the plan is in shadow mode (decided, never denied).
    pub fn is_shadow(&self) -> bool {
        self.plan.shadow
    }

    /// The plan's configuration.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }
}

impl fmt::Debug for ActivePlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActivePlan")
            .field("name", &self.name)
            .field("plan", &self.plan)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for Plans {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plans")
            .field("prefix", &self.shared.prefix)
            .field("config", &self.shared.current.load().config)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for LimitsHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitsHandle")
            .field("prefix", &self.shared.prefix)
            .finish_non_exhaustive()
    }
}

impl Plans {
    /// Starts a configuration.
    pub fn builder() -> PlansBuilder {
        PlansBuilder::default()
    }

    /// The plan `name` as it is in force now, or the default plan if there
    /// is no such plan (or `name` is `None`). Lock-free: one atomic load.
    pub fn resolve(&self, name: Option<&str>) -> Arc<ActivePlan> {
        self.shared.poll_if_due();
        let snapshot = self.shared.current.load();
        match name.and_then(|n| snapshot.by_name.get(n)) {
            Some(plan) => plan.clone(),
            None => snapshot.default.clone(),
        }
    }

    /// Checks one request (cost 1) for `key` under the plan `plan` (the
    /// default plan if unknown): `None` if that plan is unlimited.
    pub async fn check(
        &self,
        plan: &str,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<Decision>, StoreError> {
        self.check_n(plan, key, 1).await
    }

    /// [`check`](Self::check) with a weight, as
    /// [`RateLimiter::check_n`](crate::RateLimiter::check_n).
    pub async fn check_n(
        &self,
        plan: &str,
        key: impl AsRef<[u8]>,
        cost: u64,
    ) -> Result<Option<Decision>, StoreError> {
        let active = self.resolve(Some(plan));
        match active.limiter() {
            Some(limiter) => limiter.check_n(key.as_ref(), cost).await.map(Some),
            None => Ok(None),
        }
    }

    /// The state of `key` under the plan `plan` (the default plan if
    /// unknown), without consuming anything, as [`RateLimiter::get`]:
    /// `None` if that plan is unlimited.
    pub async fn get(
        &self,
        plan: &str,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<Decision>, StoreError> {
        match self.resolve(Some(plan)).limiter() {
            Some(limiter) => limiter.get(key).await.map(Some),
            None => Ok(None),
        }
    }

    /// Sets what is left of every quota of `key` under the plan `plan` (the
    /// default plan if unknown), as [`RateLimiter::set_remaining`]; an
    /// unlimited plan has nothing to set.
    pub async fn set_remaining(
        &self,
        plan: &str,
        key: impl AsRef<[u8]>,
        remaining: u64,
    ) -> Result<(), StoreError> {
        match self.resolve(Some(plan)).limiter() {
            Some(limiter) => limiter.set_remaining(key, remaining).await,
            None => Ok(()),
        }
    }

    /// Charges `units` to `key` under the plan `plan` (the default plan if
    /// unknown), as [`RateLimiter::penalize`].
    pub async fn penalize(
        &self,
        plan: &str,
        key: impl AsRef<[u8]>,
        units: u64,
    ) -> Result<(), StoreError> {
        match self.resolve(Some(plan)).limiter() {
            Some(limiter) => limiter.penalize(key, units).await,
            None => Ok(()),
        }
    }

    /// Gives `units` back to `key` under the plan `plan` (the default plan
    /// if unknown), as [`RateLimiter::reward`].
    pub async fn reward(
        &self,
        plan: &str,
        key: impl AsRef<[u8]>,
        units: u64,
    ) -> Result<(), StoreError> {
        match self.resolve(Some(plan)).limiter() {
            Some(limiter) => limiter.reward(key, units).await,
            None => Ok(()),
        }
    }

    /// Forgets the state of `key` under every plan, its block included, as
    /// [`RateLimiter::reset`] (one store call per limited plan).
    pub async fn reset(&self, key: impl AsRef<[u8]>) -> Result<(), StoreError> {
        let key = key.as_ref();
        self.each_limiter(|limiter| async move { limiter.reset(key).await })
            .await
    }

    /// Denies `key` for `duration` from now, whatever its plan (every
    /// limited plan in force: one store call each; an unlimited plan makes
    /// no store call, so it is never blocked), as [`RateLimiter::block`].
    /// Needs plans built with [`blocking`](PlansBuilder::blocking) or
    /// [`block_for`](PlansBuilder::block_for). A plan added later does not
    /// carry the block; a plan whose limits change keeps it. A zero
    /// duration lifts the block.
    pub async fn block(&self, key: impl AsRef<[u8]>, duration: Duration) -> Result<(), StoreError> {
        self.blocks()?;
        let key = key.as_ref();
        self.each_limiter(|limiter| async move { limiter.block(key, duration).await })
            .await
    }

    /// Lifts a block of `key` under every plan (see [`block`](Self::block)).
    pub async fn unblock(&self, key: impl AsRef<[u8]>) -> Result<(), StoreError> {
        self.blocks()?;
        let key = key.as_ref();
        self.each_limiter(|limiter| async move { limiter.unblock(key).await })
            .await
    }

    fn blocks(&self) -> Result<(), StoreError> {
        if self.shared.template.blocks() {
            Ok(())
        } else {
            Err(StoreError::Protocol(
                "blocking is not enabled for these plans: build them with .blocking() or .block_for(..)"
                    .to_owned(),
            ))
        }
    }

    /// Runs `op` on every limited plan's limiter in force (all of them,
    /// even after one failed): the first error.
    async fn each_limiter<F, Fut>(&self, op: F) -> Result<(), StoreError>
    where
        F: Fn(RateLimiter) -> Fut,
        Fut: std::future::Future<Output = Result<(), StoreError>>,
    {
        let limiters: Vec<RateLimiter> = {
            let snapshot = self.shared.current.load();
            snapshot
                .by_name
                .values()
                .filter_map(|p| p.limiter().cloned())
                .collect()
        };
        let mut first = Ok(());
        for limiter in limiters {
            let result = op(limiter).await;
            if first.is_ok() {
                first = result;
            }
        }
        first
    }

    /// The handle that changes these plans' limits.
    pub fn handle(&self) -> LimitsHandle {
        LimitsHandle {
            shared: self.shared.clone(),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> PlansConfig {
        self.shared.current.load().config.clone()
    }

    /// The key prefix the plans were built with.
    pub fn prefix(&self) -> &str {
        &self.shared.prefix
    }

    /// Sets the capacity of every plan's deny cache, now and in later
    /// builds (the middleware's `deny_cache_capacity`).
    pub(crate) fn set_deny_cache_capacity(&self, keys: usize) {
        let _update = self.shared.lock_update();
        self.shared.deny_capacity.store(keys, Ordering::Relaxed);
        for plan in self.shared.current.load().by_name.values() {
            if let Some(limiter) = plan.limiter() {
                limiter.deny_cache().set_capacity(keys);
            }
        }
    }

    /// The prefix of the plan `plan`'s storage keys (see the [module docs](self)).
    pub fn plan_prefix(&self, plan: &str) -> String {
        self.shared.plan_prefix(plan)
    }
}

/// Why a change of limits through the store failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum LimitsError {
    /// The new limits are invalid (nothing changed).
    Config(ConfigError),
    /// The store could not be read or written.
    Store(StoreError),
}

impl fmt::Display for LimitsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitsError::Config(e) => e.fmt(f),
            LimitsError::Store(e) => write!(f, "limits could not be shared: {e}"),
        }
    }
}

impl std::error::Error for LimitsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LimitsError::Config(e) => Some(e),
            LimitsError::Store(e) => Some(e),
        }
    }
}

impl From<ConfigError> for LimitsError {
    fn from(e: ConfigError) -> Self {
        LimitsError::Config(e)
    }
}

impl From<StoreError> for LimitsError {
    fn from(e: StoreError) -> Self {
        LimitsError::Store(e)
    }
}

impl LimitsHandle {
    /// Replaces (or adds) one plan's quotas on this instance, at once. The
    /// plans' other limiters are kept as they are.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the field (`plans.pro.quotas[0].burst`);
    /// the old limits then stay.
    pub fn set_plan(&self, name: &str, plan: Plan) -> Result<(), ConfigError> {
        let _update = self.shared.lock_update();
        let config = self.shared.current.load().config.clone().plan(name, plan);
        self.shared.apply(config)
    }

    /// Replaces every plan on this instance, at once (the handle's way to
    /// reload a configuration file).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the field; the old limits then stay.
    pub fn replace(&self, config: PlansConfig) -> Result<(), ConfigError> {
        let _update = self.shared.lock_update();
        self.shared.apply(config)
    }

    /// [`replace`](Self::replace), then writes the limits to the store
    /// (without [`sync_interval`](PlansBuilder::sync_interval), only the
    /// replace), where every instance's [`sync`](Self::sync) finds them.
    ///
    /// # Errors
    ///
    /// [`LimitsError::Config`] if invalid, or [`LimitsError::Store`] if the
    /// store could not be written: either way nothing changed.
    pub async fn publish(&self, config: PlansConfig) -> Result<(), LimitsError> {
        let Some(sync) = &self.shared.sync else {
            return Ok(self.replace(config)?);
        };
        let text = config.to_string();
        // Checked, then written, then applied: a sync that read the store
        // before the write cannot undo the change (it finds the limits
        // applied meanwhile and reads again), and a failed write changes
        // nothing anywhere.
        let old = self.shared.current.load_full();
        self.shared.build(config.clone(), Some(&old))?;
        self.shared.store.set_document(&sync.key, &text).await?;
        let _update = self.shared.lock_update();
        self.shared.apply(config)?;
        *lock(&sync.last_text) = Some(text);
        Ok(())
    }

    /// Reads the limits from the store now and applies them if they changed
    /// (what every instance does at most once per
    /// [`sync_interval`](PlansBuilder::sync_interval) on its own). `Ok(true)`:
    /// the limits changed. Without a sync interval, does nothing.
    ///
    /// # Errors
    ///
    /// [`LimitsError::Store`] if the store could not be read;
    /// [`LimitsError::Config`] if what it holds is invalid (the limits in
    /// force stay).
    pub async fn sync(&self) -> Result<bool, LimitsError> {
        self.shared.sync_now().await
    }

    /// The configuration in force.
    pub fn current(&self) -> PlansConfig {
        self.shared.current.load().config.clone()
    }

    /// Replaces the quotas of the default plan on this instance, at once
    /// (for a [`RateLimiter`] with
    /// [runtime limits](crate::limiter::RateLimiterBuilder::runtime_limits),
    /// its quotas). The plan's shadow mode stays.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the field (`quotas[1].burst` for a limiter,
    /// `plans.free.quotas[1].burst` for plans); the old limits then stay.
    pub fn set_quotas<Q: Into<Quota>>(
        &self,
        quotas: impl IntoIterator<Item = Q>,
    ) -> Result<(), ConfigError> {
        let _update = self.shared.lock_update();
        let config = self.with_quotas(quotas);
        self.shared
            .apply(config)
            .map_err(|e| self.shared.unplanned(e))
    }

    /// [`set_quotas`](Self::set_quotas), then writes the limits to the
    /// store, as [`publish`](Self::publish).
    ///
    /// # Errors
    ///
    /// As [`publish`](Self::publish).
    pub async fn publish_quotas<Q: Into<Quota>>(
        &self,
        quotas: impl IntoIterator<Item = Q>,
    ) -> Result<(), LimitsError> {
        let config = self.with_quotas(quotas);
        self.publish(config).await.map_err(|e| match e {
            LimitsError::Config(e) => LimitsError::Config(self.shared.unplanned(e)),
            e => e,
        })
    }

    /// The quotas of the default plan in force (a limiter's quotas).
    pub fn quotas(&self) -> Vec<Quota> {
        let snapshot = self.shared.current.load();
        snapshot.default.plan.quotas.clone()
    }

    /// The configuration in force with the default plan's quotas replaced.
    fn with_quotas<Q: Into<Quota>>(&self, quotas: impl IntoIterator<Item = Q>) -> PlansConfig {
        let snapshot = self.shared.current.load();
        let default = snapshot.config.default.clone();
        let plan = Plan::new(quotas).shadow(snapshot.default.plan.shadow);
        snapshot.config.clone().plan(default, plan)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn lock_update(&self) -> std::sync::MutexGuard<'_, ()> {
        lock(&self.update)
    }

    /// A limiter's error about its runtime limits names its own field
    /// (`quotas[1].burst`), not its plan's (`plans.default.quotas[1].burst`).
    fn unplanned(&self, e: ConfigError) -> ConfigError {
        if !self.single {
            return e;
        }
        let plan = format!("plans.{}.", self.current.load().config.default);
        match e.field().strip_prefix(&plan) {
            Some(field) => {
                let field = field.to_owned();
                e.with_field(field)
            }
            None => e,
        }
    }

    fn label(&self, name: &Interned<str>) -> Interned<str> {
        if self.single {
            Interned::EMPTY
        } else {
            name.clone()
        }
    }

    fn plan_prefix(&self, plan: &str) -> String {
        if self.carry_over {
            self.prefix.clone()
        } else {
            format!("{}/{plan}", self.prefix)
        }
    }

    /// Builds every plan of `config` (reusing the limiters of plans that did
    /// not change), then swaps them in. The caller holds the update lock.
    fn apply(&self, config: PlansConfig) -> Result<(), ConfigError> {
        let old = self.current.load_full();
        let snapshot = self.build(config, Some(&old))?;
        self.current.store(Arc::new(snapshot));
        self.applied.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    fn build(&self, config: PlansConfig, old: Option<&Snapshot>) -> Result<Snapshot, ConfigError> {
        if config.plans.is_empty() {
            return Err(ConfigError::new(
                "plans",
                "no plan configured; add at least one with .plan(name, Plan::new(...))",
            ));
        }
        let mut by_name = HashMap::with_capacity(config.plans.len());
        for (name, plan) in &config.plans {
            let path = format!("plans.{name}");
            validate_plan_name(name, &self.prefix, self.carry_over)
                .map_err(|m| ConfigError::new(path.clone(), m))?;
            let reused = old
                .and_then(|o| o.by_name.get(name))
                .filter(|a| a.plan == *plan)
                .cloned();
            let active = match reused {
                Some(active) => active,
                None => Arc::new(self.build_plan(name, plan).map_err(|e| e.within(&path))?),
            };
            by_name.insert(name.clone(), active);
        }
        if self.single && (by_name.len() != 1 || by_name.values().any(|p| p.limiter.is_none())) {
            return Err(ConfigError::new(
                "plans",
                "a limiter's runtime limits are one plan with quotas",
            ));
        }
        let default = by_name.get(&config.default).cloned().ok_or_else(|| {
            let names: Vec<&str> = config.plans.keys().map(String::as_str).collect();
            ConfigError::new(
                "default",
                format!(
                    "the default plan {:?} is not one of the plans ({})",
                    config.default,
                    names.join(", ")
                ),
            )
        })?;
        Ok(Snapshot {
            config,
            by_name,
            default,
        })
    }

    fn build_plan(&self, name: &str, plan: &Plan) -> Result<ActivePlan, ConfigError> {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed);
        let name = intern(name);
        if plan.unlimited {
            if !plan.quotas.is_empty() {
                return Err(ConfigError::new(
                    "unlimited",
                    "an unlimited plan has no quotas",
                ));
            }
            return Ok(ActivePlan {
                label: self.label(&name),
                name,
                plan: plan.clone(),
                limiter: None,
                generation,
            });
        }
        if plan.quotas.is_empty() {
            return Err(ConfigError::new(
                "quotas",
                "no quota configured; give the plan quotas or make it Plan::unlimited()",
            ));
        }
        let mut builder = self
            .template
            .clone()
            .prefix(self.prefix.clone())
            .stable_ids();
        if !self.carry_over {
            builder = builder.plan_scope(&name);
        }
        let limiter = builder
            .quotas(plan.quotas.iter().cloned())
            .build()
            .map_err(|e| {
                // `quota[1].burst` of the builder is `quotas[1].burst` of the plan
                match e.field().strip_prefix("quota") {
                    Some(rest) => {
                        let field = format!("quotas{rest}");
                        e.with_field(field)
                    }
                    None => e,
                }
            })?;
        match self.deny_capacity.load(Ordering::Relaxed) {
            0 => {}
            keys => limiter.deny_cache().set_capacity(keys),
        }
        Ok(ActivePlan {
            label: self.label(&name),
            name,
            plan: plan.clone(),
            limiter: Some(limiter),
            generation,
        })
    }

    /// Starts a read of the store in a task of its own when the sync
    /// interval has passed since the last one (never waits for it).
    fn poll_if_due(self: &Arc<Self>) {
        let Some(sync) = &self.sync else {
            return;
        };
        let now = sync.epoch.elapsed().as_micros() as u64 + 1;
        let last = sync.last_poll.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < sync.interval_us {
            return;
        }
        if sync.polling.swap(true, Ordering::Acquire) {
            return;
        }
        sync.last_poll.store(now, Ordering::Relaxed);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            sync.polling.store(false, Ordering::Release);
            return;
        };
        let shared = self.clone();
        runtime.spawn(async move {
            let _result = shared.sync_now().await;
            #[cfg(feature = "tracing")]
            match &_result {
                // a refusal (an ACL without `<prefix>:plans`) lasts: ERROR
                Err(e @ LimitsError::Store(StoreError::Refused(_))) => {
                    tracing::error!(target: "tower_redis_ratelimit", error = %e, "reading the shared limits was refused: a misconfiguration (see Plans::verify); the limits in force stay");
                }
                Err(e) => {
                    tracing::warn!(target: "tower_redis_ratelimit", error = %e, "reading the shared limits failed; the limits in force stay");
                }
                Ok(_) => {}
            }
            if let Some(sync) = &shared.sync {
                sync.polling.store(false, Ordering::Release);
            }
        });
    }

    async fn sync_now(&self) -> Result<bool, LimitsError> {
        let Some(sync) = &self.sync else {
            return Ok(false);
        };
        let applied = self.applied.load(Ordering::Acquire);
        let text = self.store.document(&sync.key).await?;
        let Some(text) = text else {
            return Ok(false);
        };
        if lock(&sync.last_text).as_deref() == Some(text.as_str()) {
            return Ok(false);
        }
        let config: PlansConfig = text.parse()?;
        let _update = self.lock_update();
        if self.applied.load(Ordering::Acquire) != applied {
            // Limits were applied here while the store was read (a publish,
            // a replace): what was read may be older than them. Read again
            // at the next sync.
            *lock(&sync.last_text) = None;
            return Ok(false);
        }
        let changed = config != self.current.load().config;
        if changed {
            self.apply(config)?;
        }
        *lock(&sync.last_text) = Some(text);
        Ok(changed)
    }
}

/// The startup check of every plan and of the shared limits.
impl Plans {
    /// Checks that the store can make every plan's decisions and hold the
    /// shared limits, for a startup check: [`RateLimiter::verify`] of each
    /// limited plan in force (by name), then, with
    /// [`sync_interval`](PlansBuilder::sync_interval), that the limits
    /// document (`<prefix>:plans`) may be read ([`LimitsHandle::sync`]) and
    /// written ([`LimitsHandle::publish`]): one atomic call that writes it
    /// back as it is, or writes and deletes an empty one where there is none.
    /// Leaves no state. A memory store always passes.
    ///
    /// # Errors
    ///
    /// The first failure: [`StoreError::Refused`] names what the server
    /// refuses for good (an ACL permission, `NOPERM`: see the ACL
    /// line of the [stores chapter](crate::guide::stores), which covers `{<prefix>:*`, `{<prefix>/*`, `<prefix>:plans`
    /// and `<prefix>:limits`); any other [`StoreError`] if the store could not be
    /// reached.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use tower_redis_ratelimit::plans::{Plan, Plans};
    /// # use tower_redis_ratelimit::{Quota, Rate, RedisStore};
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let plans = Plans::builder()
    ///     .store(RedisStore::from_url("redis://limiter:secret@127.0.0.1/")?)
    ///     .prefix("api")
    ///     .plan("free", Plan::new([Quota::gcra(Rate::per_minute(60))]))
    ///     .sync_interval(Duration::from_secs(10))
    ///     .build()?;
    /// plans.verify().await?; // fails at startup, not on the first request
    /// # Ok(()) }
    /// ```
    pub async fn verify(&self) -> Result<(), StoreError> {
        let snapshot = self.shared.current.load_full();
        let mut names: Vec<&String> = snapshot.by_name.keys().collect();
        names.sort();
        for name in names {
            if let Some(limiter) = snapshot.by_name.get(name).and_then(|p| p.limiter()) {
                limiter.verify_here().await?;
            }
        }
        if let Some(sync) = &self.shared.sync {
            self.shared.store.check_document(&sync.key).await?;
        }
        Ok(())
    }
}

fn validate_plan_name(name: &str, prefix: &str, carry_over: bool) -> Result<(), String> {
    if name.is_empty() {
        return Err("a plan name must not be empty".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_')))
    {
        return Err(format!(
            "plan name {name:?} contains {c:?}; use ASCII letters, digits, '-' or '_'"
        ));
    }
    if !carry_over && prefix.len() + 1 + name.len() > MAX_PREFIX_LEN {
        return Err(format!(
            "plan name {name:?} makes the key prefix {prefix}/{name} longer than {MAX_PREFIX_LEN} bytes"
        ));
    }
    Ok(())
}

/// Configures [`Plans`]; see [`Plans::builder`].
#[must_use]
#[derive(Default)]
pub struct PlansBuilder {
    store: Option<Backend>,
    prefix: Option<String>,
    clock: Clock,
    carry_over: bool,
    plans: Vec<(String, Plan)>,
    default: Option<String>,
    config: Option<PlansConfig>,
    sync: Option<Duration>,
    block: Option<Duration>,
    blocking: bool,
}

impl fmt::Debug for PlansBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlansBuilder")
            .field("prefix", &self.prefix)
            .field("plans", &self.plans)
            .field("default", &self.default)
            .finish_non_exhaustive()
    }
}

impl PlansBuilder {
    /// Where state is kept (every plan's). Required.
    pub fn store(mut self, store: impl Store) -> Self {
        self.store = Some(store.into_backend());
        self
    }

    /// Namespace of every storage key (default `rl`); each plan's keys are
    /// under `<prefix>/<plan>` (see [`carry_over`](Self::carry_over)).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// The time source (default [`Clock::Store`]).
    pub fn clock(mut self, clock: impl Into<Clock>) -> Self {
        self.clock = clock.into();
        self
    }

    /// Adds the plan `name` (ASCII letters, digits, `-`, `_`).
    pub fn plan(mut self, name: impl Into<String>, plan: Plan) -> Self {
        self.plans.push((name.into(), plan));
        self
    }

    /// The plan of requests whose plan is unknown (required unless there is
    /// a single plan).
    pub fn default_plan(mut self, name: impl Into<String>) -> Self {
        self.default = Some(name.into());
        self
    }

    /// Every plan and the default at once, e.g. from a configuration file
    /// (plans added with [`plan`](Self::plan) are added to these).
    pub fn config(mut self, config: PlansConfig) -> Self {
        self.config = Some(config);
        self
    }

    /// Whether every plan keeps its state under the prefix itself (default
    /// `false`: each under `<prefix>/<plan>`, and a caller who changes plan
    /// starts fresh). With `true`, quotas of the same strategy, period and
    /// name in two plans share one state, which a caller who upgrades keeps.
    pub fn carry_over(mut self, carry_over: bool) -> Self {
        self.carry_over = carry_over;
        self
    }

    /// The penalty box for every plan, as
    /// [`RateLimiterBuilder::block_for`]: once a request is denied, its key
    /// stays denied for `duration` in its plan; also enables
    /// [`Plans::block`] and [`Plans::unblock`]. Zero is rejected
    /// (`block_for`).
    pub fn block_for(mut self, duration: Duration) -> Self {
        self.block = Some(duration);
        self
    }

    /// Enables [`Plans::block`] and [`Plans::unblock`] without an automatic
    /// penalty, as [`RateLimiterBuilder::blocking`].
    pub fn blocking(mut self) -> Self {
        self.blocking = true;
        self
    }

    /// Keeps the limits in the store too (on Redis, the key
    /// `<prefix>:plans`) and reads them at most once per `interval`, in a
    /// task of its own started by a check once the interval has passed, so
    /// that a [`LimitsHandle::publish`] on one instance reaches every
    /// other. What the store holds replaces the built configuration on the
    /// first read. Zero is rejected (`sync_interval`).
    pub fn sync_interval(mut self, interval: Duration) -> Self {
        self.sync = Some(interval);
        self
    }

    /// Builds every plan's limiter.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the field: `store`, `prefix`, `plans`,
    /// `default`, `sync_interval`, or a plan's own, such as
    /// `plans.pro.quotas[1].burst`.
    pub fn build(self) -> Result<Plans, ConfigError> {
        let store = self.store.ok_or_else(|| {
            ConfigError::new(
                "store",
                "no store configured; call .store(RedisStore::new(pool)) or .store(MemoryStore::new())",
            )
        })?;
        store.validate()?;
        let prefix = self.prefix.unwrap_or_else(|| "rl".to_owned());
        let mut template = RateLimiter::builder()
            .backend(store.clone())
            .clock(self.clock.clone());
        if let Some(d) = self.block {
            template = template.block_for(d);
        }
        if self.blocking {
            template = template.blocking();
        }
        // the prefix's and the blocks' own rules (a plan's prefix adds `.<plan>`)
        template
            .clone()
            .prefix(prefix.clone())
            .quota(crate::rate::Rate::per_second(1))
            .build()?;
        let mut config = self.config.unwrap_or_else(|| PlansConfig::new(""));
        let single = (self.plans.len() == 1).then(|| self.plans[0].0.clone());
        for (name, plan) in self.plans {
            config.plans.insert(name, plan);
        }
        if let Some(default) = self.default {
            config.default = default;
        } else if config.default.is_empty()
            && let Some(single) = single.filter(|_| config.plans.len() == 1)
        {
            config.default = single;
        }
        Plans::new(
            store,
            prefix,
            template,
            self.carry_over,
            false,
            self.sync,
            config,
        )
    }
}

impl Plans {
    /// The limits of a [`RateLimiter`] with runtime limits: one plan,
    /// `default`, of `quotas`, under the limiter's own prefix (`template`:
    /// its options, prefix included, without quotas).
    pub(crate) fn single(
        template: RateLimiterBuilder,
        prefix: String,
        quotas: Vec<Quota>,
        sync: Option<Duration>,
    ) -> Result<Plans, ConfigError> {
        let store = template
            .store_backend()
            .ok_or_else(|| ConfigError::new("store", "no store configured"))?;
        let config = PlansConfig::new("default").plan("default", Plan::new(quotas));
        Plans::new(store, prefix, template, true, true, sync, config)
    }

    fn new(
        store: Backend,
        prefix: String,
        template: RateLimiterBuilder,
        carry_over: bool,
        single: bool,
        sync: Option<Duration>,
        config: PlansConfig,
    ) -> Result<Plans, ConfigError> {
        let sync = match sync {
            Some(d) if d.is_zero() => {
                return Err(ConfigError::new("sync_interval", "must be above zero"));
            }
            Some(d) => Some(StoreSync {
                interval_us: u64::try_from(d.as_micros()).unwrap_or(u64::MAX),
                // (a limiter's runtime limits apart from a `Plans`' of the
                // same prefix: one's publish must not replace the other's)
                key: if single {
                    format!("{prefix}:limits")
                } else {
                    format!("{prefix}:plans")
                },
                last_poll: AtomicU64::new(0),
                polling: AtomicBool::new(false),
                epoch: tokio::time::Instant::now(),
                last_text: Mutex::new(None),
            }),
            None => None,
        };
        let mut shared = Shared {
            store,
            prefix,
            template,
            carry_over,
            single,
            // replaced below, once built
            current: ArcSwap::from_pointee(Snapshot {
                config: PlansConfig::new(""),
                by_name: HashMap::new(),
                default: Arc::new(ActivePlan {
                    name: Interned::EMPTY,
                    label: Interned::EMPTY,
                    plan: Plan::unlimited(),
                    limiter: None,
                    generation: 0,
                }),
            }),
            update: Mutex::new(()),
            generation: AtomicU64::new(1),
            applied: AtomicU64::new(0),
            sync,
            deny_capacity: AtomicUsize::new(0),
        };
        let snapshot = shared.build(config, None)?;
        shared.current = ArcSwap::from_pointee(snapshot);
        Ok(Plans {
            shared: Arc::new(shared),
        })
    }
}
