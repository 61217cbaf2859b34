//! [`RateLimiterBuilder`]: the configuration, its validation, and the one
//! function that constructs a limiter's state ([`state`]), for
//! [`build`](RateLimiterBuilder::build) and
//! [`with_store`](RateLimiter::with_store) alike.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::decision::{Interned, QuotaName, Template, Templates, intern_templates};
use crate::error::ConfigError;
use crate::quota::{Quota, QuotaSpec};
use crate::store::{Backend, Store};

use super::OnDenial;
use super::deny_cache::{DEFAULT_CAPACITY, DenyCache};
use super::engine::Engine;
use super::keys::KeyScheme;
use super::local_budget::LocalBudgets;
use super::rate_limiter::{Inner, RateLimiter, RuntimeLimits};

/// Longest accepted [`prefix`](RateLimiterBuilder::prefix).
pub const MAX_PREFIX_LEN: usize = 64;

/// Makes the runtime limits of a limiter being built (the plans'
/// constructor): from its options with its prefix and without quotas, the
/// prefix, the quotas and the sync interval.
pub(crate) type MakeRuntime = fn(
    RateLimiterBuilder,
    String,
    Vec<Quota>,
    Option<Duration>,
) -> Result<Box<dyn RuntimeLimits>, ConfigError>;

impl RateLimiter {
    /// Starts a configuration.
    pub fn builder() -> RateLimiterBuilder {
        RateLimiterBuilder::default()
    }

    /// The same configuration over another store (e.g. a fallback [`MemoryStore`](crate::MemoryStore)).
    ///
    /// For a limiter with [runtime limits](RateLimiterBuilder::runtime_limits):
    /// the limits in force now, which do not change with it.
    pub fn with_store(&self, store: impl Store) -> RateLimiter {
        if let Some(current) = self.current() {
            return current.with_store(store);
        }
        let e = &self.inner.engine;
        let limits = Limits {
            prefix: e.keys.prefix().to_owned(),
            quotas: e.quotas.clone(),
            names: e.names.clone(),
            templates: e.templates.clone(),
            key_suffixes: e.keys.suffixes().to_vec(),
            clock: e.clock.clone(),
            block: e.block,
            budget: self.inner.budgets.as_ref().map(|b| b.config()),
            on_denial: e.on_denial,
        };
        RateLimiter {
            inner: Arc::new(state(store.into_backend(), limits, None)),
        }
    }
}

/// A limiter's validated configuration, but its store.
struct Limits {
    prefix: String,
    quotas: Vec<QuotaSpec>,
    names: Vec<QuotaName>,
    templates: Interned<Templates>,
    /// The storage-key suffix of each quota (and the block key's).
    key_suffixes: Vec<String>,
    clock: Clock,
    block: Option<u64>,
    /// Local budgets: units per take and hold.
    budget: Option<(u64, Duration)>,
    on_denial: OnDenial,
}

/// A limiter's state: its engine over `store` (bound to the quotas), and
/// what sits in front of it (local budgets, a deny cache, runtime limits,
/// under which the engine never decides by itself).
fn state(store: Backend, limits: Limits, runtime: Option<Box<dyn RuntimeLimits>>) -> Inner {
    let Limits {
        prefix,
        quotas,
        names,
        templates,
        key_suffixes,
        clock,
        block,
        budget,
        on_denial,
    } = limits;
    let on_denial = on_denial.of_quotas(&quotas);
    let store = store.bind(&quotas, &prefix, &key_suffixes, block, &clock, on_denial);
    let budgets = match runtime {
        Some(_) => None,
        None => budget.map(|(n, hold)| Arc::new(LocalBudgets::new(n, hold))),
    };
    let fronted = budgets.is_some() || runtime.is_some();
    let keys = KeyScheme::new(prefix, key_suffixes);
    Inner {
        engine: Engine::new(
            store, quotas, names, templates, keys, clock, block, fronted, on_denial,
        ),
        budgets,
        deny: DenyCache::new(DEFAULT_CAPACITY),
        runtime,
    }
}

/// Configures a [`RateLimiter`]; see [`RateLimiter::builder`].
#[derive(Default, Clone)]
#[must_use]
pub struct RateLimiterBuilder {
    store: Option<Backend>,
    prefix: Option<String>,
    quotas: Vec<Quota>,
    clock: Clock,
    budget: Option<u64>,
    hold: Option<Duration>,
    block: Option<Duration>,
    blocking: bool,
    on_denial: OnDenial,
    /// Runtime limits: what makes them (the plans' constructor, handed
    /// over by `runtime_limits`).
    runtime: Option<MakeRuntime>,
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
    /// Where state is kept: a [`RedisStore`](crate::RedisStore) or a [`MemoryStore`](crate::MemoryStore). Required.
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

    /// Opt-in local budgets for hot keys: each limiter instance takes
    /// up to `n` units of a key's quotas in one store call and spends them
    /// locally (no store call per decision), giving back what it did not
    /// spend when the budget expires (on the key's next use, or
    /// [`RateLimiter::flush_local_budgets`]).
    ///
    /// **Bound:** with `k` instances, a quota is exceeded by at most
    /// `k × (n - 1)` (within `k × n`) in any window, whatever the traffic;
    /// `n = 1` is exactly the normal path. See "Hot keys" in the guide's
    /// [middleware chapter](crate::guide::middleware).
    ///
    /// Rejected at [`build`](Self::build) (`local_budget`) when `n` is 0
    /// or above a quota's capacity, and for concurrency and leaky-bucket
    /// quotas, whose meaning local spending would break.
    pub fn local_budget(mut self, n: u64) -> Self {
        self.budget = Some(n);
        self
    }

    /// The longest a local budget is spent from (default: 1 s or a
    /// quarter of the shortest quota period, whichever is shorter); it also
    /// never outlives the window its units were counted in (a fixed
    /// window's, the sliding counter's, the sliding log's entries'; a
    /// bucket has none). Zero is rejected (`local_budget_hold`).
    pub fn local_budget_hold(mut self, hold: Duration) -> Self {
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

    /// What a denied check records of its cost (default
    /// [`OnDenial::Nothing`]: a denied call consumes nothing). With
    /// [`OnDenial::RecordIfOver`] or [`OnDenial::Record`], every
    /// [`check`](crate::RateLimiter::check) and
    /// [`check_n`](crate::RateLimiter::check_n) of the limiter (one quota or
    /// several, batched or not, on every store) records a denied call's
    /// cost past the limit in the same atomic store call, as
    /// [`penalize`](crate::RateLimiter::penalize) would (see [`OnDenial`]);
    /// a denied [`Decision`](crate::Decision) then says so
    /// ([`recorded`](crate::Decision::recorded)) and shows the state after.
    /// A cost above a quota's capacity is then sent to the store (it
    /// records), no longer denied without a store call.
    ///
    /// The middleware's deny cache never caches such a limiter's denials
    /// (a cached denial would not record). Rejected at
    /// [`build`](Self::build) (`on_denial`) with
    /// [`local_budget`](Self::local_budget) above 1, whose spending from
    /// local units would not record. [`reserve_n`](crate::RateLimiter::reserve_n)
    /// records nothing on a denial (settle the real cost instead).
    ///
    /// ```
    /// use tower_redis_ratelimit::limiter::OnDenial;
    /// use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder()
    ///     .store(MemoryStore::new())
    ///     .quota(Quota::fixed_window(Rate::per_minute(100)))
    ///     .on_denial(OnDenial::Record)
    ///     .build()?;
    /// assert!(limiter.check_n("user:42", 90).await?.allowed());
    /// // a report of 30 more: denied, and recorded past the limit
    /// let d = limiter.check_n("user:42", 30).await?;
    /// assert!(d.denied() && d.recorded());
    /// assert_eq!(d.remaining(), 0);
    /// // the window now holds 120: even 1 is denied until it ends
    /// assert!(limiter.check("user:42").await?.denied());
    /// # Ok(())
    /// # }
    /// ```
    pub fn on_denial(mut self, on_denial: OnDenial) -> Self {
        self.on_denial = on_denial;
        self
    }

    /// Validates the configuration. The error names the field at fault.
    pub fn build(mut self) -> Result<RateLimiter, ConfigError> {
        let runtime = self.runtime.take();
        let sync = self.sync.take();
        // (runtime limits: the options but the quotas, for every limiter
        // in force)
        let template = runtime.map(|make| {
            let mut template = self.clone();
            template.quotas.clear();
            (make, template)
        });
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
            if self.budget.is_some_and(|n| n > 1) {
                return Err(ConfigError::new(
                    "local_budget",
                    format!(
                        "not with shadow quotas (quota[{i}]): a local budget takes units from every quota at once"
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
        if self.on_denial.records() && self.budget.is_some_and(|n| n > 1) {
            return Err(ConfigError::new(
                "on_denial",
                format!(
                    "{:?} records a denied call's cost in the store, but a local_budget spends                      from local units without asking it: use one or the other",
                    self.on_denial
                ),
            ));
        }
        let budget = validate_budget(self.budget, self.hold, &specs)?;
        let runtime = match template {
            Some((make, template)) => {
                let template = template.prefix(prefix.clone());
                Some(make(template, prefix.clone(), self.quotas, sync)?)
            }
            None => None,
        };
        let limits = Limits {
            prefix,
            quotas: specs,
            names,
            templates,
            key_suffixes,
            clock: self.clock,
            block,
            budget,
            on_denial: self.on_denial,
        };
        Ok(RateLimiter {
            inner: Arc::new(state(store, limits, runtime)),
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

    /// Hands over what makes runtime limits (the plans' constructor): see
    /// [`runtime_limits`](Self::runtime_limits).
    pub(crate) fn runtime_by(mut self, make: MakeRuntime) -> Self {
        self.runtime = Some(make);
        self
    }

    /// Runtime limits kept in the store, read at most once per `interval`:
    /// see [`sync_interval`](Self::sync_interval).
    pub(crate) fn sync_every(mut self, interval: Duration) -> Self {
        self.sync = Some(interval);
        self
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

/// The units per take and the hold of local budgets, if they apply
/// (`n` of 1 is the normal path).
fn validate_budget(
    n: Option<u64>,
    hold: Option<Duration>,
    specs: &[QuotaSpec],
) -> Result<Option<(u64, Duration)>, ConfigError> {
    let field = "local_budget";
    if let Some(hold) = hold
        && hold.is_zero()
    {
        return Err(ConfigError::new("local_budget_hold", "must be above zero"));
    }
    let Some(n) = n else {
        return Ok(None);
    };
    if n == 0 {
        return Err(ConfigError::new(field, "must be at least 1"));
    }
    for (i, q) in specs.iter().enumerate() {
        if let Some(why) = q.spec().give_back.no_local_budget() {
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
    use crate::decision::Decision;
    use crate::strategy::Strategy;

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
                assert!(
                    direct.inner.engine.direct.is_some() && general.inner.engine.direct.is_none()
                );
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
            .local_budget(4));
        assert_eq!(e.field(), "local_budget");
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
}
