//! The gRPC service: `ShouldRateLimit` over a loaded [`Config`] and a store.
//!
//! Each configured limit gets one [`RateLimiter`], built when the service is
//! made: its prefix comes from the domain and the rule's path, its user key
//! is the request descriptor's entries (so different values count apart),
//! its quota the rule's: by default the Go service's fixed window aligned to
//! the epoch ([`Quota::aligned`]), or the rule's `strategy` and `burst`.
//!
//! # All or nothing
//!
//! A request is admitted on all of its descriptors or on none: every
//! limited descriptor is decided together, in one
//! [`AllOrNothing`] decision of the library (a request with one limited
//! descriptor: its limiter's own decision, which on Redis is batched with
//! concurrent ones; a joint call never is). On the memory store, one Redis
//! and Sentinel that is one atomic store call (one script): every
//! descriptor is checked, and only if all are within their limits is each
//! consumed. On a Redis Cluster, descriptors whose keys share a hash slot
//! are one atomic call; across slots they are decided slot by slot and,
//! when one is over, what the slots before it took is given back: between
//! a slot's call and that give-back (the round trips of the slots after it,
//! plus the give-back's) a concurrent request may see those units as used
//! and be denied because of them, never admitted past a limit. A request
//! denied whatever the store says (a limit of 0) only reads the others'
//! states. A store error consumes nothing, except that a call which timed
//! out may still be applied by Redis once it answers (as for any call of
//! the library: its script was sent).
//!
//! # Usage reports: what a denied request still records
//!
//! Envoy also calls after the response (`apply_on_stream_done`) with the
//! usage as `hits_addend`, and ignores the answer: the service cannot tell
//! that report from a check. So what a denied request records is each
//! rule's [`Charge`] (its `charge`, else [`ServiceOptions::charge`]): with
//! `always` (the default) its hits are recorded on every descriptor, past
//! the limit where it is over (as the Go service counts them: a fixed
//! window's count runs past its limit, a bucket takes a debt repaid at its
//! rate), so that the next call is denied; with `over` only on the
//! descriptors it is over, those that had room left as they were; with
//! `admitted` nothing is recorded (a descriptor of a denied request then
//! reports its limit's state untouched: its `limit_remaining` is what is
//! left). The decision and its record are one atomic store call (the
//! library's [`OnDenial`]: a part records as its rule's charge says, and
//! its answer is its state after). What the store cannot record in that
//! call is recorded by a second one ([`RateLimiter::penalize`]): a
//! descriptor whose hits never fit (sent as a look), a request too large
//! for one call, a quota-mode descriptor over while its call is let
//! through, a call denied by a limit of 0. A sliding log records at most
//! [`AllOrNothing::MAX_LOGGED`] times in one call, as a joint decision
//! writes.
//!
//! `hits_subtrahend` gives back: each descriptor's hits less it; where it
//! is larger, the difference goes back to the limit first
//! ([`RateLimiter::reward`]: never more than is used, a leaky bucket gives
//! nothing back) and the descriptor is only looked at; where it is
//! smaller, the rest is decided as any hits. Envoy sends no id of the
//! request a refund is for: a refund gives back what the key holds,
//! whoever used it, so it must only follow an admitted reservation.
//!
//! # `quota_mode`
//!
//! As in the Go service, a descriptor of a `quota_mode` limit that is over
//! denies the request only when every `quota_mode` descriptor of the
//! request is over; it is reported `OVER_LIMIT` either way. It is decided
//! as a shadow quota (it takes nothing when it would deny), and when the
//! request has several, the descriptors' states are read first: when every
//! quota-mode descriptor is over, the request is denied without consuming
//! anything; otherwise all are decided together as above. (A request's only
//! quota-mode descriptor denies exactly when it is over: it is decided as
//! any limit, all or nothing in one call.) In a race, every
//! quota-mode descriptor may go over between that look and the decision:
//! the request is then denied, and the units its other descriptors took
//! stay taken (stricter than all or nothing, never past a limit: quota
//! mode's rule depends on the others' states, which one script call per
//! descriptor set does not decide).
//!
//! # `replaces`
//!
//! As in the Go service, a matched limit whose `name` is in the `replaces`
//! of any limit matched in the same request (an `unlimited` one too) is
//! not applied: its descriptor answers `OK` with no current limit, and it
//! is neither counted nor reported in the statistics. An `unlimited` limit
//! is never replaced (it answers as unlimited), nor is a per-descriptor
//! `limit` override (it has no name).
//!
//! # Store failures
//!
//! When the store fails or does not answer within its timeout, each domain
//! answers by its [`OnStoreError`] policy (the file's `failure_policy`,
//! else [`ServiceOptions::on_store_error`]); see there.
//!
//! # Reload
//!
//! [`RlsService::reload`] swaps the configuration atomically: a call in
//! flight finishes with the configuration it started with, the next one
//! takes the new one, none waits or fails. A limit left unchanged keeps
//! its limiter (the same storage keys: it keeps counting); the limiters of
//! `limit` overrides are kept across reloads too. [`ConfigWatcher`](crate::reload::ConfigWatcher)
//! reloads a directory when its files change.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use tonic::{Request, Response, Status};
use tower_redis_ratelimit::error::{ConfigError as LimiterConfigError, StoreError};
use tower_redis_ratelimit::limiter::{AllOrNothing, JointDecision, OnDenial};
use tower_redis_ratelimit::store::Store;
use tower_redis_ratelimit::strategy::Strategy;
use tower_redis_ratelimit::{Decision, Quota, Rate, RateLimiter};

use crate::config::{Charge, Config, OnStoreError, Rule, Unit};
pub use crate::metrics::NearLimitRatio;
use crate::metrics::{Metrics, Outcome};
use crate::pb::envoy::config::core::v3::HeaderValue;
use crate::pb::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as PbRateLimit, rate_limit::Unit as PbUnit,
};
use crate::pb::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse, RateLimitService};
use crate::window::window_of;

/// How the service answers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServiceOptions {
    /// Whether responses carry the IETF `RateLimit-Policy` and `RateLimit`
    /// headers (and `Retry-After` on `OVER_LIMIT`) in
    /// `response_headers_to_add`. Default: off, as envoyproxy/ratelimit
    /// adds none unless asked (a switch must not change what end users
    /// see).
    pub headers: bool,
    /// envoyproxy/ratelimit's own response headers
    /// (`LIMIT_RESPONSE_HEADERS_ENABLED`): the limit, the remaining count
    /// and the seconds until reset of the request's tightest descriptor,
    /// under these names. Default: none.
    pub go_headers: Option<GoHeaders>,
    /// Every limit in shadow mode, `limit` overrides too
    /// (envoyproxy/ratelimit's `SHADOW_MODE`, whose answer is then always
    /// `OK`): decided and counted as a rule's `shadow_mode` is, never
    /// denying. Default: off.
    pub shadow_mode: bool,
    /// Every configured limit in `quota_mode` (envoyproxy/ratelimit's
    /// `QUOTA_MODE`): a request is denied only when every limited
    /// descriptor is over. Default: off.
    pub quota_mode: bool,
    /// How many limiters for per-descriptor `limit` overrides are kept
    /// (one per distinct domain, count and unit). Past it, an override's
    /// limiter is built for the call and dropped after it (it counts in the
    /// same storage keys, so the answers are the same, only slower).
    /// Default: 1,024.
    pub max_override_limiters: usize,
    /// What a domain without a `failure_policy` answers when the store
    /// fails or times out ([`OnStoreError`]). Default:
    /// [`Unavailable`](OnStoreError::Unavailable), the call fails and
    /// Envoy's `failure_mode_deny` decides.
    pub on_store_error: OnStoreError,
    /// How many statistics keys that hold a request's values (a rule with
    /// `detailed_metric` or `value_to_metric`, a `limit` override) get
    /// their own series; past it, such a descriptor is counted under its
    /// rule's key (an override under `<domain>.limit_override`), so a
    /// stream of new values cannot grow the metrics without bound. A
    /// rule's own key always has its series. Default: 10,000.
    pub max_metric_keys: usize,
    /// The share of a limit past which hits count as near it in the
    /// statistics (envoyproxy/ratelimit's `NEAR_LIMIT_RATIO`), in `(0, 1]`.
    /// Default: 0.8.
    pub near_limit_ratio: NearLimitRatio,
    /// The most descriptors a request may carry; a request with more is
    /// answered `INVALID_ARGUMENT` before the store is asked. Envoy sends
    /// one per matching rate limit action (a handful). Default: 64; at
    /// most [`AllOrNothing::MAX_PARTS`] (256). A request whose descriptors
    /// would write more than [`AllOrNothing::MAX_LOGGED`] sliding-log
    /// times together is `OVER_LIMIT` as one that never fits.
    pub max_descriptors: usize,
    /// The most entries one descriptor may carry; past it, the request is
    /// answered `INVALID_ARGUMENT` before the store is asked. Default: 32.
    pub max_entries: usize,
    /// When a call's hits are charged, for the rules that do not say
    /// (`charge` in their `rate_limit`, [`Charge`]). Default:
    /// [`Charge::Always`]: a denied call still records its hits on every
    /// descriptor, as the Go service counts them, so that a usage report is
    /// never lost.
    pub charge: Charge,
}

/// The names of envoyproxy/ratelimit's response headers
/// ([`ServiceOptions::go_headers`]): `LIMIT_LIMIT_HEADER`,
/// `LIMIT_REMAINING_HEADER`, `LIMIT_RESET_HEADER`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoHeaders {
    /// The limit's header. Go's default: `RateLimit-Limit`.
    pub limit: String,
    /// The remaining count's header. Go's default: `RateLimit-Remaining`.
    pub remaining: String,
    /// The seconds until reset's header. Go's default: `RateLimit-Reset`.
    pub reset: String,
}

impl Default for GoHeaders {
    fn default() -> Self {
        Self {
            limit: "RateLimit-Limit".to_owned(),
            remaining: "RateLimit-Remaining".to_owned(),
            reset: "RateLimit-Reset".to_owned(),
        }
    }
}

impl Default for ServiceOptions {
    fn default() -> Self {
        Self {
            headers: false,
            go_headers: None,
            shadow_mode: false,
            quota_mode: false,
            max_override_limiters: 1_024,
            on_store_error: OnStoreError::Unavailable,
            max_metric_keys: 10_000,
            near_limit_ratio: NearLimitRatio::default(),
            max_descriptors: 64,
            max_entries: 32,
            charge: Charge::Always,
        }
    }
}

impl ServiceOptions {
    /// Sets [`headers`](Self::headers).
    pub fn headers(mut self, on: bool) -> Self {
        self.headers = on;
        self
    }

    /// Sets [`go_headers`](Self::go_headers).
    pub fn go_headers(mut self, names: Option<GoHeaders>) -> Self {
        self.go_headers = names;
        self
    }

    /// Sets [`shadow_mode`](Self::shadow_mode).
    pub fn shadow_mode(mut self, on: bool) -> Self {
        self.shadow_mode = on;
        self
    }

    /// Sets [`quota_mode`](Self::quota_mode).
    pub fn quota_mode(mut self, on: bool) -> Self {
        self.quota_mode = on;
        self
    }

    /// Sets [`max_override_limiters`](Self::max_override_limiters).
    pub fn max_override_limiters(mut self, n: usize) -> Self {
        self.max_override_limiters = n;
        self
    }

    /// Sets [`on_store_error`](Self::on_store_error).
    pub fn on_store_error(mut self, policy: OnStoreError) -> Self {
        self.on_store_error = policy;
        self
    }

    /// Sets [`max_metric_keys`](Self::max_metric_keys).
    pub fn max_metric_keys(mut self, n: usize) -> Self {
        self.max_metric_keys = n;
        self
    }

    /// Sets [`near_limit_ratio`](Self::near_limit_ratio).
    pub fn near_limit_ratio(mut self, ratio: NearLimitRatio) -> Self {
        self.near_limit_ratio = ratio;
        self
    }

    /// Sets [`max_descriptors`](Self::max_descriptors): at least 1, at
    /// most [`AllOrNothing::MAX_PARTS`] (what the library decides in one
    /// store call).
    pub fn max_descriptors(mut self, n: usize) -> Self {
        self.max_descriptors = n.clamp(1, AllOrNothing::MAX_PARTS);
        self
    }

    /// Sets [`charge`](Self::charge).
    pub fn charge(mut self, charge: Charge) -> Self {
        self.charge = charge;
        self
    }

    /// Sets [`max_entries`](Self::max_entries) (at least 1).
    pub fn max_entries(mut self, n: usize) -> Self {
        self.max_entries = n.max(1);
        self
    }
}

/// Why a service could not be built: a rule the library rejects, named by
/// its file, path, line and key (the loader rejects what it knows the
/// library would, so this is for what it does not).
#[derive(Debug)]
pub struct BuildError {
    /// The rule's file.
    pub file: String,
    /// The rule's path in its file ([`Rule::path`]).
    pub path: String,
    /// The line of its `rate_limit`, 1-based.
    pub line: usize,
    /// The rule's full key (`domain.key_value...`).
    pub full_key: String,
    /// The library's reason.
    pub source: Box<LimiterConfigError>,
}

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} ({}): {} (line {})",
            self.file, self.path, self.full_key, self.source, self.line
        )
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

/// Per domain, per rule ([`Rule::id`]): the limit and the rule it was built
/// from (a reload keeps the limit of an unchanged rule).
type Limits = HashMap<String, HashMap<String, (Rule, Limit)>>;

/// The limiters of `limit` overrides, by prefix, quota name, count, unit
/// and charge.
type Overrides = Mutex<HashMap<(String, String, u32, Unit, Charge), Arc<RateLimiter>>>;

/// Builds a limiter of one quota under a prefix, recording its denials as
/// the [`OnDenial`] says.
type Make = dyn Fn(&str, Quota, OnDenial) -> Result<RateLimiter, LimiterConfigError> + Send + Sync;

/// What a call alone (one part) records when denied, under `charge`: its
/// hits past the limit in the same store call, unless `admitted`.
fn alone(charge: Charge) -> OnDenial {
    match charge {
        Charge::Admitted => OnDenial::Nothing,
        Charge::Over | Charge::Always => OnDenial::Record,
    }
}

/// What a part of a joint decision records when the call is denied, under
/// `charge`: `over` only if it is over itself, `always` whatever it is.
fn in_joint(charge: Charge) -> OnDenial {
    match charge {
        Charge::Admitted => OnDenial::Nothing,
        Charge::Over => OnDenial::RecordIfOver,
        Charge::Always => OnDenial::Record,
    }
}

/// What a configured rule decides with.
#[derive(Debug, Clone)]
enum Limit {
    /// `unlimited: true`.
    Unlimited,
    /// `requests_per_unit: 0`: every request is over.
    Zero,
    /// A limiter of one quota; for a `quota_mode` limit, also its strict
    /// twin (the same quota, not in shadow mode: the same storage keys),
    /// which decides when it is the request's only quota-mode limit.
    Limited(Arc<RateLimiter>, Option<Arc<RateLimiter>>),
}

/// The rate limit service (`envoy.service.ratelimit.v3.RateLimitService`):
/// serve it with [`RateLimitServiceServer::new`](crate::pb::RateLimitServiceServer::new).
///
/// Clones share everything: the configuration (a [`reload`](Self::reload)
/// through one is seen by all), the limiters and the [`Metrics`].
pub struct RlsService {
    shared: Arc<Shared>,
}

impl Clone for RlsService {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl std::fmt::Debug for RlsService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.shared.current.load();
        f.debug_struct("RlsService")
            .field("domains", &inner.limits.len())
            .field("options", &inner.options)
            .finish_non_exhaustive()
    }
}

struct Shared {
    /// The configuration answering now.
    current: ArcSwap<Inner>,
    /// Held while a reload builds and swaps (reloads one at a time).
    reloading: Mutex<()>,
}

/// One configuration and its limiters: a call decides on the one it
/// loaded when it started.
struct Inner {
    config: Config,
    limits: Limits,
    make: Arc<Make>,
    overrides: Arc<Overrides>,
    options: ServiceOptions,
    metrics: Arc<Metrics>,
    logs: Arc<Logs>,
}

/// The throttles of the lines a client or an outage can repeat.
#[derive(Debug, Default)]
struct Logs {
    /// Store errors answered `UNAVAILABLE`.
    failed: LogThrottle,
    /// Store errors answered by an `allow` or `deny` policy.
    policy: LogThrottle,
    /// Requests refused as past a bound.
    refused: LogThrottle,
    /// Whether the store's last call failed (its recovery is logged once).
    failing: std::sync::atomic::AtomicBool,
}

impl RlsService {
    /// The service over `config`, deciding on `store` (a
    /// [`MemoryStore`](tower_redis_ratelimit::MemoryStore), a
    /// [`RedisStore`](tower_redis_ratelimit::RedisStore), ...): builds one
    /// limiter per configured limit.
    ///
    /// The service counts in a new [`Metrics`] (one configuration load
    /// counted as loaded).
    pub fn new<S: Store + Clone>(
        config: Config,
        store: S,
        options: ServiceOptions,
    ) -> Result<Self, BuildError> {
        let make: Arc<Make> = Arc::new(move |prefix: &str, quota: Quota, on_denial: OnDenial| {
            RateLimiter::builder()
                .store(store.clone())
                .prefix(prefix)
                .quota(quota)
                .on_denial(on_denial)
                .build()
        });
        let metrics = Arc::new(
            Metrics::new(options.max_metric_keys).near_limit_ratio(options.near_limit_ratio),
        );
        let limits = build_limits(&config, &*make, None, &options)?;
        metrics.config_loaded(true);
        Ok(Self {
            shared: Arc::new(Shared {
                current: ArcSwap::from_pointee(Inner {
                    config,
                    limits,
                    make,
                    overrides: Arc::new(Mutex::new(HashMap::new())),
                    options,
                    metrics,
                    logs: Arc::default(),
                }),
                reloading: Mutex::new(()),
            }),
        })
    }

    /// The configuration the service answers with now (a reload does not
    /// change the one returned).
    pub fn config(&self) -> ConfigSnapshot {
        ConfigSnapshot(self.shared.current.load_full())
    }

    /// The service's statistics.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.shared.current.load().metrics.clone()
    }

    /// Answers with `config` from now on: builds the limiters of the
    /// limits it adds or changes, then swaps atomically: calls in flight
    /// finish with the old configuration, none fails. A limit whose rule
    /// is unchanged keeps its limiter; one whose `requests_per_unit` or
    /// `burst` changed keeps what callers used (the same storage keys, as
    /// in the Go service: a lower limit denies at once); a new strategy or
    /// period, or a new key path, counts anew. Counted in [`Metrics`] as a
    /// load, or a failed load.
    ///
    /// # Errors
    ///
    /// A rule the library rejects ([`BuildError`]); the service keeps the
    /// configuration it had.
    pub fn reload(&self, config: Config) -> Result<(), BuildError> {
        let _one = self
            .shared
            .reloading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let old = self.shared.current.load_full();
        let limits = match build_limits(&config, &*old.make, Some(&old.limits), &old.options) {
            Ok(l) => l,
            Err(e) => {
                old.metrics.config_loaded(false);
                return Err(e);
            }
        };
        self.shared.current.store(Arc::new(Inner {
            config,
            limits,
            make: old.make.clone(),
            overrides: old.overrides.clone(),
            options: old.options.clone(),
            metrics: old.metrics.clone(),
            logs: old.logs.clone(),
        }));
        old.metrics.config_loaded(true);
        Ok(())
    }

    /// Answers one request (what the gRPC method does).
    ///
    /// # Errors
    ///
    /// A request past [`ServiceOptions::max_descriptors`] or
    /// [`ServiceOptions::max_entries`] ([`CallError::Invalid`], before the
    /// store is asked); a store error ([`CallError::Store`]) when the
    /// domain's failure policy is [`OnStoreError::Unavailable`] (nothing
    /// was consumed).
    pub async fn should_rate_limit_inner(
        &self,
        req: &RateLimitRequest,
    ) -> Result<RateLimitResponse, CallError> {
        self.shared.current.load_full().answer(req).await
    }
}

/// Why a call was not answered with a [`RateLimitResponse`].
#[derive(Debug)]
#[non_exhaustive]
pub enum CallError {
    /// The request is past a bound of [`ServiceOptions`] (answered
    /// `INVALID_ARGUMENT`; the store was not asked).
    Invalid(String),
    /// The store failed or timed out, and the domain's failure policy is
    /// [`OnStoreError::Unavailable`] (answered `UNAVAILABLE`).
    Store(StoreError),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Invalid(why) => f.write_str(why),
            CallError::Store(e) => write!(f, "rate limit store: {e}"),
        }
    }
}

impl std::error::Error for CallError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CallError::Invalid(_) => None,
            CallError::Store(e) => Some(e),
        }
    }
}

impl From<CallError> for Status {
    fn from(e: CallError) -> Self {
        match &e {
            CallError::Invalid(_) => Status::invalid_argument(e.to_string()),
            CallError::Store(_) => Status::unavailable(e.to_string()),
        }
    }
}

/// Logs one line per interval at most, saying how many it held back (a
/// store outage must not write a line per call).
#[derive(Debug, Default)]
struct LogThrottle {
    /// When a line was last logged (µs since the epoch; 0: never).
    last_us: std::sync::atomic::AtomicU64,
    /// Lines held back since.
    held: std::sync::atomic::AtomicU64,
}

impl LogThrottle {
    /// One line a second.
    const INTERVAL_US: u64 = 1_000_000;

    /// `Some(held back)` when a line may be logged now.
    fn to_log(&self) -> Option<u64> {
        use std::sync::atomic::Ordering::Relaxed;
        let now = now_us();
        let last = self.last_us.load(Relaxed);
        if last != 0 && now.saturating_sub(last) < Self::INTERVAL_US
            || self
                .last_us
                .compare_exchange(last, now.max(1), Relaxed, Relaxed)
                .is_err()
        {
            self.held.fetch_add(1, Relaxed);
            return None;
        }
        Some(self.held.swap(0, Relaxed))
    }
}

/// The configuration a service answered with when
/// [`RlsService::config`] was called (dereferences to [`Config`]).
pub struct ConfigSnapshot(Arc<Inner>);

impl std::fmt::Debug for ConfigSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.config.fmt(f)
    }
}

impl std::ops::Deref for ConfigSnapshot {
    type Target = Config;
    fn deref(&self) -> &Config {
        &self.0.config
    }
}

/// The limits of `config`: an unchanged rule's from `old`, the others
/// built with `make`.
fn build_limits(
    config: &Config,
    make: &Make,
    old: Option<&Limits>,
    options: &ServiceOptions,
) -> Result<Limits, BuildError> {
    let mut limits = Limits::new();
    for domain in config.domains() {
        let before = old.and_then(|o| o.get(domain));
        let rules = limits.entry(domain.to_owned()).or_default();
        for rule in config.rules(domain) {
            let kept = before
                .and_then(|b| b.get(&rule.id))
                .filter(|(r, _)| same_limit(r, rule))
                .map(|(_, l)| l.clone());
            let limit = match kept {
                Some(l) => l,
                None => rule_limit(make, domain, rule, options).map_err(|source| BuildError {
                    file: rule.file.clone(),
                    path: rule.path.clone(),
                    line: rule.line,
                    full_key: rule.full_key.clone(),
                    source: Box::new(source),
                })?,
            };
            rules.insert(rule.id.clone(), (rule.clone(), limit));
        }
    }
    Ok(limits)
}

/// Whether two rules of one full key build the same limiter.
fn same_limit(a: &Rule, b: &Rule) -> bool {
    a.requests_per_unit == b.requests_per_unit
        && a.period_us == b.period_us
        && a.unlimited == b.unlimited
        && a.shadow_mode == b.shadow_mode
        && a.quota_mode == b.quota_mode
        && a.strategy == b.strategy
        && a.burst == b.burst
        && a.calendar == b.calendar
        && a.charge == b.charge
}

/// The limiter (or lack of one) of `rule`.
fn rule_limit(
    make: &Make,
    domain: &str,
    rule: &Rule,
    options: &ServiceOptions,
) -> Result<Limit, LimiterConfigError> {
    // (the service-wide modes are the same for every rule and reload)
    let shadow_mode = rule.shadow_mode || options.shadow_mode;
    let quota_mode = rule.quota_mode || options.quota_mode;
    if rule.unlimited {
        return Ok(Limit::Unlimited);
    }
    if rule.requests_per_unit == 0 {
        return Ok(Limit::Zero);
    }
    let rate = Rate::new(
        u64::from(rule.requests_per_unit),
        Duration::from_micros(rule.period_us.max(1)),
    );
    let mut quota = match (&rule.calendar, rule.strategy) {
        (Some(calendar), _) => Quota::fixed_window(rate).calendar(calendar.clone()),
        (None, None) => Quota::fixed_window(rate).aligned(),
        (None, Some(strategy)) => Quota::new(strategy, rate),
    };
    if let Some(burst) = rule.burst {
        quota = quota.burst(burst);
    }
    // a quota-mode limit denies only with every quota-mode limit of the
    // request (see `Inner::denies`): decided as a shadow quota, it never
    // denies the joint decision and takes nothing when it would
    // named, the quota's storage keys do not hold its count: a reload that
    // changes only `requests_per_unit` (or `burst`) keeps what callers
    // used, as the Go service's keys do (a lower limit must not hand out a
    // fresh window); a new strategy or period counts anew
    quota = quota.name(quota_name(domain, rule));
    let prefix = prefix_for("r", domain, &rule.full_key, &rule.id);
    let on_denial = alone(rule.charge.unwrap_or(options.charge));
    let strict = if quota_mode && !shadow_mode {
        Some(Arc::new(make(&prefix, quota.clone(), on_denial)?))
    } else {
        None
    };
    if shadow_mode || quota_mode {
        quota = quota.shadow(true);
    }
    let limiter = make(&prefix, quota, on_denial)?;
    Ok(Limit::Limited(Arc::new(limiter), strict))
}

/// The name of a rule's quota (shown in `RateLimit-Policy`): its key
/// without the domain (`remote_address`, `path_/login`), every byte but
/// ASCII letters, digits, `-`, `_` and `.` as `_`, at most 64 bytes. Not
/// the rule's `name`: renaming a rule must not reset its counts.
fn quota_name(domain: &str, rule: &Rule) -> String {
    let source = rule
        .full_key
        .strip_prefix(domain)
        .and_then(|k| k.strip_prefix('.'))
        .unwrap_or(&rule.full_key);
    let mut name: String = source
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if name.is_empty() {
        name.push_str("limit");
    }
    name
}

/// A limiter prefix (ASCII letters, digits, `-`, `_`, `.`; at most 64
/// bytes) for the thing `id` names in `domain` (a rule's [`Rule::id`]):
/// `rls.<kind>.` and the start of `name` (how it reads) with every other
/// byte as `_`, then a 64-bit FNV-1a hash of `domain` and `id` (so rules
/// that read alike, a nested `b` → `c` and a key `b.c`, stay apart).
fn prefix_for(kind: &str, domain: &str, name: &str, id: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in domain.bytes().chain([0]).chain(id.bytes()) {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    let mut p = format!("rls.{kind}.");
    p.extend(name.bytes().take(36).map(|b| {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.') {
            char::from(b)
        } else {
            '_'
        }
    }));
    let _ = write!(p, ".{hash:016x}");
    p
}

/// A descriptor value as text: itself when it is UTF-8 (as Envoy sends a
/// proto `string`); else each byte that is not part of a UTF-8 character as
/// `\xNN`, so that distinct values stay distinct (a value that reads as
/// such an escape shares its counter: never more admitted).
fn value_text(value: &[u8]) -> Cow<'_, str> {
    if let Ok(text) = std::str::from_utf8(value) {
        return Cow::Borrowed(text);
    }
    let mut text = String::with_capacity(value.len() + 8);
    for chunk in value.utf8_chunks() {
        text.push_str(chunk.valid());
        for b in chunk.invalid() {
            let _ = write!(text, "\\x{b:02x}");
        }
    }
    Cow::Owned(text)
}

/// The user key of a descriptor: each entry as the Go service matches and
/// counts it, `key_value`, with its length
/// before it, joined with `&` (the lengths keep entries apart whatever
/// they hold; within one entry `(a, b_c)` and `(a_b, c)` are one key, as
/// they match one rule and share one counter in the Go service); a value
/// matched by a `share_threshold` wildcard is the wildcard.
fn user_key(entries: &[(&str, &str)], shared: &[Option<String>]) -> String {
    let mut k = String::new();
    for (i, (key, value)) in entries.iter().enumerate() {
        let value = shared.get(i).and_then(Option::as_deref).unwrap_or(value);
        if i > 0 {
            k.push('&');
        }
        let _ = write!(k, "{}:{key}_{value}", key.len() + 1 + value.len());
    }
    k
}

fn pb_unit(unit: Option<Unit>) -> PbUnit {
    match unit {
        None => PbUnit::Unknown,
        Some(Unit::Second) => PbUnit::Second,
        Some(Unit::Minute) => PbUnit::Minute,
        Some(Unit::Hour) => PbUnit::Hour,
        Some(Unit::Day) => PbUnit::Day,
        Some(Unit::Week) => PbUnit::Week,
        Some(Unit::Month) => PbUnit::Month,
        Some(Unit::Year) => PbUnit::Year,
    }
}

/// The `current_limit` of `count` per `period_us` as Envoy's protocol
/// writes a limit, a count per [`Unit`]: the count itself when the period
/// is one unit; else the rate rounded down in the longest unit not longer
/// than the period (100 per 5 minutes is 20 per minute, 100 per 90 s is 66
/// per minute); when that rounds to 0 or no unit is that short, the count
/// per the shortest unit not shorter than the period (1 per 2 hours is 1
/// per day, 10 per 500 ms is 10 per second). Never more than the limit
/// admits, in the reported window or the real one.
fn reported_rate(count: u32, period_us: u64) -> (u32, Unit) {
    let unit_us = |u: Unit| u.seconds() * 1_000_000;
    if let Some(u) = Unit::ALL.into_iter().find(|&u| unit_us(u) == period_us) {
        return (count, u);
    }
    let shorter = Unit::ALL
        .into_iter()
        .rev()
        .find(|&u| unit_us(u) < period_us)
        .map(|u| {
            let per = u128::from(count) * u128::from(unit_us(u)) / u128::from(period_us.max(1));
            (u32::try_from(per).unwrap_or(u32::MAX), u)
        })
        .filter(|&(per, _)| per > 0 || count == 0);
    shorter.unwrap_or_else(|| {
        let longer = Unit::ALL
            .into_iter()
            .find(|&u| unit_us(u) >= period_us)
            .unwrap_or(Unit::Year);
        (count, longer)
    })
}

/// `envoy.type.v3.RateLimitUnit` (an override's unit) as a [`Unit`].
fn override_unit(unit: i32) -> Option<Unit> {
    // SECOND = 1, MINUTE, HOUR, DAY, MONTH = 5, YEAR = 6, WEEK = 7
    Some(match unit {
        1 => Unit::Second,
        2 => Unit::Minute,
        3 => Unit::Hour,
        4 => Unit::Day,
        5 => Unit::Month,
        6 => Unit::Year,
        7 => Unit::Week,
        _ => return None,
    })
}

/// `d` in whole seconds, rounded up, as a `duration_until_reset`: Envoy
/// builds `X-RateLimit-Reset` from its seconds alone (as
/// envoyproxy/ratelimit sends them), so 0.66 s must read 1, not 0.
fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(ceil_secs(d)).unwrap_or(i64::MAX),
        nanos: 0,
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The most units one call records on `rule` ([`Inner::record`]): what its
/// rate repays in 366 days, the longest period.
fn debt_cap(rule: &Rule) -> u64 {
    const LONGEST_US: u64 = 366 * 86_400 * 1_000_000;
    let periods = LONGEST_US.div_ceil(rule.period_us.max(1));
    u64::from(rule.requests_per_unit).saturating_mul(periods)
}

fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// One descriptor's plan, then its outcome.
struct Slot<'a> {
    /// `None`: no limit (no match, unknown domain, unlimited).
    limit: Option<PbRateLimit>,
    unlimited: bool,
    shadow: bool,
    /// `quota_mode`: over its limit, it denies the request only if every
    /// quota-mode descriptor of the request is over (as in the Go service).
    quota: bool,
    /// A quota-mode limit's strict twin ([`Limit::Limited`]).
    strict: Option<Arc<RateLimiter>>,
    state: State,
    /// The matched rule (`None` for an override or no match).
    rule: Option<&'a Rule>,
    /// The statistics key (`domain.key...`); `None`: not counted.
    metric_key: Option<String>,
    /// The descriptor's units.
    hits: u64,
    /// More units than the limit holds (and not in shadow mode): over
    /// whatever the store says, with no time after which it would fit;
    /// only its state is read.
    never_fits: bool,
    /// The most units its limit holds (the burst of a strategy that takes
    /// one, else the count).
    capacity: u64,
    /// When its hits are charged ([`Charge`]: its rule's, else the
    /// service's).
    charge: Charge,
    /// Denied with its request as too large for one store call
    /// ([`StoreError::TooLarge`]), not over a limit of its own.
    too_large: bool,
    /// Its state after its hits were recorded though not admitted
    /// ([`Inner::record`]), for the answer; the decision stays what
    /// decided the call (and what the metrics count).
    after: Option<After>,
}

/// A descriptor's state after [`Inner::record`] charged its hits.
enum After {
    /// Read again from the store.
    Read(Decision),
    /// A fixed window's: its decision's, less the hits recorded (the
    /// window and its reset unchanged), with no second read.
    Less(u64),
}

impl Slot<'_> {
    /// Whether its rule is a sliding-window log (which keeps a time per
    /// unit: what one call writes to it is bounded).
    fn is_log(&self) -> bool {
        self.rule
            .is_some_and(|r| r.strategy == Some(Strategy::SlidingWindowLog))
    }

    /// Whether this descriptor is over its limit and not in shadow mode
    /// (a quota-mode one decided as a shadow quota is over when it would
    /// deny).
    fn over(&self) -> bool {
        !self.shadow
            && (self.never_fits && !matches!(self.state, State::Free)
                || match &self.state {
                    // (a look, `hits_addend: 0`, fits even a limit of 0)
                    State::Zero { .. } => self.hits > 0,
                    State::Refused => true,
                    State::Decided { decision, .. } => {
                        decision.denied() || (self.quota && decision.shadow_denied())
                    }
                    _ => false,
                })
    }
}

/// Whether `slots` deny their request: a descriptor over its limit, or,
/// when the request has quota-mode descriptors, every one of them over.
fn denies(slots: &[Slot<'_>]) -> bool {
    let limited = |s: &&Slot<'_>| s.quota && !s.shadow && !matches!(s.state, State::Free);
    slots.iter().any(|s| !s.quota && s.over())
        || (slots.iter().filter(limited).count() > 0
            && slots.iter().filter(limited).all(Slot::over))
}

enum State {
    /// No limit to check.
    Free,
    /// `requests_per_unit: 0`.
    Zero { period: Duration },
    /// Not decided, the store failed, and the domain's policy denies.
    Refused,
    /// To decide with `limiter` for `key`, `cost` units.
    Pending {
        limiter: Arc<RateLimiter>,
        key: String,
        cost: u64,
        period: Duration,
    },
    /// Decided; `consumed`: its units were taken (the request was
    /// admitted and the cost is above 0).
    Decided {
        limiter: Arc<RateLimiter>,
        key: String,
        decision: Decision,
        consumed: bool,
        cost: u64,
        period: Duration,
    },
}

/// At most the first 64 bytes of `s` (a client's string in a log line).
fn shown(s: &str) -> &str {
    let mut end = s.len().min(64);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl Inner {
    /// Answers `req` ([`RlsService::should_rate_limit_inner`]): refused
    /// past the bounds, else decided; a refusal or a store error is logged
    /// (one line a second at most of each).
    async fn answer(&self, req: &RateLimitRequest) -> Result<RateLimitResponse, CallError> {
        if let Err(e) = self.check_bounds(req) {
            if let Some(held) = self.logs.refused.to_log() {
                tracing::warn!(
                    domain = shown(&req.domain),
                    held_back = held,
                    "request refused: {e}"
                );
            }
            return Err(e);
        }
        self.decide(req).await.map_err(|e| {
            if let Some(held) = self.logs.failed.to_log() {
                tracing::error!(domain = shown(&req.domain), error = %e, held_back = held, "store error (one line a second at most)");
            }
            CallError::Store(e)
        })
    }

    /// Refuses a request past [`ServiceOptions::max_descriptors`] or
    /// [`ServiceOptions::max_entries`], before anything is planned.
    fn check_bounds(&self, req: &RateLimitRequest) -> Result<(), CallError> {
        let max = self.options.max_descriptors;
        if req.descriptors.len() > max {
            return Err(CallError::Invalid(format!(
                "{} descriptors in one request: at most {max} (--max-descriptors)",
                req.descriptors.len()
            )));
        }
        let max = self.options.max_entries;
        if let Some((i, d)) = req
            .descriptors
            .iter()
            .enumerate()
            .find(|(_, d)| d.entries.len() > max)
        {
            return Err(CallError::Invalid(format!(
                "descriptor {i} has {} entries: at most {max} (--max-entries)",
                d.entries.len()
            )));
        }
        Ok(())
    }

    fn override_limiter(
        &self,
        prefix: String,
        name: String,
        requests_per_unit: u32,
        unit: Unit,
        charge: Charge,
    ) -> Result<Arc<RateLimiter>, LimiterConfigError> {
        let id = (prefix, name, requests_per_unit, unit, charge);
        if let Ok(map) = self.overrides.lock()
            && let Some(l) = map.get(&id)
        {
            return Ok(l.clone());
        }
        let rate = Rate::new(
            u64::from(requests_per_unit),
            Duration::from_secs(unit.seconds()),
        );
        let quota = Quota::fixed_window(rate)
            .aligned()
            .name(id.1.as_str())
            .shadow(self.options.shadow_mode);
        let limiter = Arc::new((self.make)(&id.0, quota, alone(charge))?);
        if let Ok(mut map) = self.overrides.lock()
            && map.len() < self.options.max_override_limiters
        {
            map.insert(id, limiter.clone());
        }
        Ok(limiter)
    }

    fn plan<'a>(&'a self, domain: &str, d: &RateLimitDescriptor, request_hits: u64) -> Slot<'a> {
        let cost = d.hits_addend.unwrap_or(request_hits);
        let free = Slot {
            limit: None,
            unlimited: false,
            shadow: false,
            quota: false,
            strict: None,
            state: State::Free,
            rule: None,
            metric_key: None,
            hits: cost,
            never_fits: false,
            capacity: u64::MAX,
            charge: self.options.charge,
            too_large: false,
            after: None,
        };
        let values: Vec<Cow<'_, str>> = d.entries.iter().map(|e| value_text(&e.value)).collect();
        let entries: Vec<(&str, &str)> = d
            .entries
            .iter()
            .zip(&values)
            .map(|(e, v)| (e.key.as_str(), v.as_ref()))
            .collect();
        let Some(rules) = self.limits.get(domain) else {
            self.metrics.domain_not_found(domain);
            return free;
        };
        let matched = self.config.lookup_match(domain, &entries);
        // an override replaces the limit (matched or not), as in the Go
        // service: an aligned fixed window, never in shadow mode
        if let Some(o) = &d.limit
            && let Some(unit) = override_unit(o.unit)
        {
            let limit = Some(PbRateLimit {
                name: String::new(),
                requests_per_unit: o.requests_per_unit,
                unit: pb_unit(Some(unit)) as i32,
            });
            let period = Duration::from_secs(unit.seconds());
            let metric_key = Some(override_metric_key(domain, &entries));
            if o.requests_per_unit == 0 {
                return Slot {
                    limit,
                    state: State::Zero { period },
                    metric_key,
                    shadow: self.options.shadow_mode,
                    ..free
                };
            }
            // Counted where the matched limit counts, as the Go service's
            // key (domain, entries, window) does: under the rule's prefix
            // and quota name when the rule is a fixed window aligned to the
            // epoch (the count is not in the key, so whatever the override
            // says, and with or without it, one counter per window length);
            // else apart, by the descriptor's entries.
            let (prefix, name, key) = match &matched {
                Some(m)
                    if m.rule.strategy.is_none()
                        && !m.rule.unlimited
                        && m.rule.requests_per_unit > 0 =>
                {
                    (
                        prefix_for("r", domain, &m.rule.full_key, &m.rule.id),
                        quota_name(domain, m.rule),
                        user_key(&entries, &m.shared_values),
                    )
                }
                _ => (
                    prefix_for("o", domain, domain, domain),
                    "override".to_owned(),
                    user_key(&entries, &[]),
                ),
            };
            // (it counts in its rule's key: charged as its rule says)
            let charge = matched
                .as_ref()
                .and_then(|m| m.rule.charge)
                .unwrap_or(self.options.charge);
            match self.override_limiter(prefix, name, o.requests_per_unit, unit, charge) {
                Ok(limiter) => {
                    return Slot {
                        charge,
                        limit,
                        state: State::Pending {
                            limiter,
                            key,
                            cost,
                            period,
                        },
                        metric_key,
                        shadow: self.options.shadow_mode,
                        never_fits: !self.options.shadow_mode
                            && cost > u64::from(o.requests_per_unit),
                        capacity: u64::from(o.requests_per_unit),
                        ..free
                    };
                }
                Err(e) => {
                    if let Some(held) = self.logs.refused.to_log() {
                        tracing::warn!(domain = shown(domain), error = %e, held_back = held, "limit override ignored");
                    }
                }
            }
        }
        let Some(m) = matched else {
            return free;
        };
        let rule = m.rule;
        let Some((_, limit)) = rules.get(&rule.id) else {
            return free;
        };
        let (requests_per_unit, unit) = reported_rate(rule.requests_per_unit, rule.period_us);
        let pb_limit = Some(PbRateLimit {
            name: rule.name.clone(),
            requests_per_unit,
            unit: pb_unit(Some(unit)) as i32,
        });
        let period = Duration::from_micros(rule.period_us);
        let state = match limit {
            Limit::Unlimited => {
                return Slot {
                    unlimited: true,
                    shadow: rule.shadow_mode || self.options.shadow_mode,
                    rule: Some(rule),
                    ..free
                };
            }
            Limit::Zero => State::Zero { period },
            Limit::Limited(limiter, _) => State::Pending {
                limiter: limiter.clone(),
                key: user_key(&entries, &m.shared_values),
                cost,
                period,
            },
        };
        let strict = match limit {
            Limit::Limited(_, strict) => strict.clone(),
            _ => None,
        };
        let shadow = rule.shadow_mode || self.options.shadow_mode;
        // (the capacity: the burst of a strategy that takes one, else the count)
        let capacity = rule.burst.unwrap_or(u64::from(rule.requests_per_unit));
        Slot {
            limit: pb_limit,
            unlimited: false,
            shadow,
            quota: rule.quota_mode || self.options.quota_mode,
            strict,
            never_fits: !shadow && matches!(state, State::Pending { .. }) && cost > capacity,
            capacity,
            state,
            rule: Some(rule),
            metric_key: Some(m.metric_key),
            hits: cost,
            charge: rule.charge.unwrap_or(self.options.charge),
            too_large: false,
            after: None,
        }
    }

    /// Answers `req`: plans, decides, counts, and applies the domain's
    /// failure policy if the store failed.
    async fn decide(&self, req: &RateLimitRequest) -> Result<RateLimitResponse, StoreError> {
        let policy = self
            .config
            .failure_policy(&req.domain)
            .unwrap_or(self.options.on_store_error);
        let Ran { mut slots, failed } = self.run(req).await;
        count(&self.metrics, &req.domain, &slots);
        let Some(e) = failed else {
            use std::sync::atomic::Ordering::Relaxed;
            if self.logs.failing.load(Relaxed)
                && slots
                    .iter()
                    .any(|s| matches!(s.state, State::Decided { .. }))
                && self.logs.failing.swap(false, Relaxed)
            {
                tracing::info!("the store answers again");
            }
            let denied = denies(&slots);
            return Ok(self.respond(&slots, denied));
        };
        self.metrics.store_error(&req.domain);
        self.logs
            .failing
            .store(true, std::sync::atomic::Ordering::Relaxed);
        match policy {
            OnStoreError::Unavailable => return Err(e),
            OnStoreError::Allow => {
                if let Some(held) = self.logs.policy.to_log() {
                    tracing::warn!(domain = shown(&req.domain), error = %e, held_back = held, "store error: allowing the undecided descriptors (failure_policy allow)");
                }
                for slot in &mut slots {
                    if matches!(slot.state, State::Pending { .. }) {
                        slot.limit = None;
                        slot.state = State::Free;
                    }
                }
            }
            OnStoreError::Deny => {
                if let Some(held) = self.logs.policy.to_log() {
                    tracing::warn!(domain = shown(&req.domain), error = %e, held_back = held, "store error: denying (failure_policy deny)");
                }
                for slot in &mut slots {
                    if matches!(slot.state, State::Pending { .. }) && !slot.shadow {
                        slot.state = State::Refused;
                    }
                }
            }
        }
        let denied = denies(&slots);
        Ok(self.respond(&slots, denied))
    }

    /// Plans each descriptor, drops the replaced limits, and decides every
    /// limited descriptor together, all or nothing ([`AllOrNothing`]: one
    /// atomic store call), unless the request is denied whatever the store
    /// says (a limit of 0), or every quota-mode descriptor is over: then the
    /// store is only asked for the descriptors' states ([`AllOrNothing::peek`]),
    /// and nothing is consumed. A store error leaves the descriptors
    /// `Pending` (undecided; nothing was consumed).
    async fn run<'a>(&'a self, req: &RateLimitRequest) -> Ran<'a> {
        let subtrahend = u64::from(req.hits_subtrahend);
        // (a request-level `hits_addend` of 0 is 1, as in the Go service,
        // but not beside a `hits_subtrahend`: a settle adds what it says)
        let request_hits = match (req.hits_addend, subtrahend) {
            (0, 0) => 1,
            (n, _) => u64::from(n),
        };
        let mut slots: Vec<Slot> = req
            .descriptors
            .iter()
            .map(|d| self.plan(&req.domain, d, request_hits))
            .collect();
        apply_replaces(&mut slots);
        if subtrahend > 0 {
            self.give_back(&req.domain, &mut slots, subtrahend).await;
        }
        // A request's only quota-mode limit denies exactly when it is over:
        // decided by its strict twin, as any limit (all or nothing, in one
        // call), with no look first.
        let quota_limits = slots
            .iter()
            .filter(|s| s.quota && !s.shadow && !matches!(s.state, State::Free))
            .count();
        if quota_limits == 1
            && let Some(slot) = slots
                .iter_mut()
                .find(|s| s.quota && !s.shadow && !matches!(s.state, State::Free))
            && let (Some(strict), State::Pending { limiter, .. }) = (&slot.strict, &mut slot.state)
        {
            *limiter = strict.clone();
            slot.quota = false;
        }
        // One part per storage key: descriptors that count in one key (the
        // same descriptor twice, an override beside its rule, two
        // overrides) are one part of their summed cost, decided by the
        // tightest of their limiters (a shadow or quota-mode one only if
        // all are), as the Go service adds them in one counter.
        let mut parts: Vec<(usize, usize)> = Vec::new();
        // (and what each part records if the call is denied: its first
        // descriptor's `charge`; the descriptors of one key are of one rule)
        let mut asks: Vec<(Arc<RateLimiter>, String, u64, OnDenial)> = Vec::new();
        let mut ranks: Vec<(bool, u64)> = Vec::new();
        // each part's capacity: the least of its enforced descriptors'
        let mut caps: Vec<u64> = Vec::new();
        let mut by_key: HashMap<String, usize> = HashMap::new();
        // (a lone descriptor shares its key with nothing: no key to build)
        let several = slots
            .iter()
            .filter(|s| matches!(s.state, State::Pending { .. }))
            .nth(1)
            .is_some();
        for (i, slot) in slots.iter().enumerate() {
            let State::Pending {
                limiter, key, cost, ..
            } = &slot.state
            else {
                continue;
            };
            let rank = (
                slot.shadow || slot.quota,
                limiter.quotas().first().map_or(0, |q| q.rate().count()),
            );
            let storage = if several {
                limiter
                    .storage_keys(key)
                    .into_iter()
                    .next()
                    .unwrap_or_default()
            } else {
                String::new()
            };
            match by_key.get(&storage) {
                Some(&p) => {
                    if !slot.never_fits {
                        asks[p].2 = asks[p].2.saturating_add(*cost);
                    }
                    if rank < ranks[p] {
                        asks[p].0 = limiter.clone();
                        ranks[p] = rank;
                    }
                    if !slot.shadow {
                        caps[p] = caps[p].min(slot.capacity);
                    }
                    parts.push((i, p));
                }
                None => {
                    by_key.insert(storage, asks.len());
                    parts.push((i, asks.len()));
                    // (a part that never fits is only looked at: the
                    // request is denied, and its state is what is left)
                    let cost = if slot.never_fits { 0 } else { *cost };
                    asks.push((limiter.clone(), key.clone(), cost, in_joint(slot.charge)));
                    ranks.push(rank);
                    caps.push(if slot.shadow { u64::MAX } else { slot.capacity });
                }
            }
        }
        // descriptors of one key whose summed hits never fit (six copies of
        // a descriptor against a limit of 5): each never fits, as one of
        // the sum would not
        for (p, ask) in asks.iter_mut().enumerate() {
            if ask.2 > caps[p] {
                ask.2 = 0;
                for &(i, _) in parts.iter().filter(|&&(_, q)| q == p) {
                    if !slots[i].shadow {
                        slots[i].never_fits = true;
                    }
                }
            }
        }
        if asks.is_empty() {
            // nothing for the store: no match, unlimited, replaced, a limit
            // of 0
            return Ran {
                slots,
                failed: None,
            };
        }
        let mut joint = AllOrNothing::new();
        for (limiter, key, cost, on_denial) in &asks {
            joint.push_with(limiter, key.as_bytes(), *cost, *on_denial);
        }
        let result = if denies(&slots) {
            // denied already (a limit of 0): the others' states, untouched
            joint.peek().await.map(|d| (Joint::from(d), false))
        } else if slots.iter().any(|s| s.quota && !s.shadow) {
            // quota mode: every quota-mode descriptor over denies the
            // request, so look before taking anything
            match joint.peek().await {
                Ok(peeked) => {
                    let peeked = Joint::from(peeked);
                    let mut looked = Vec::new();
                    decided(&mut slots, &parts, &peeked, false, &mut looked);
                    if denies(&slots) {
                        Ok((peeked, false))
                    } else {
                        undo(&mut slots, looked);
                        take(&joint, &asks).await.map(|d| (d, true))
                    }
                }
                Err(e) => Err(e),
            }
        } else {
            take(&joint, &asks).await.map(|d| (d, true))
        };
        // Too much for one store call (the sliding-log times its parts
        // would write together): denied as a request that never fits, not
        // an error that Envoy's `failure_mode_deny: false` would let
        // through; what is left is read, nothing is taken.
        let result = match result {
            Err(StoreError::TooLarge(why)) => {
                if let Some(held) = self.logs.refused.to_log() {
                    tracing::warn!(held_back = held, "request denied: {why}");
                }
                for slot in &mut slots {
                    if !slot.shadow && matches!(slot.state, State::Pending { cost, .. } if cost > 0)
                    {
                        slot.never_fits = true;
                        slot.too_large = true;
                    }
                }
                joint.peek().await.map(|d| (Joint::from(d), false))
            }
            other => other,
        };
        match result {
            Ok((joint, taking)) => {
                let taken = taking && joint.allowed;
                decided(&mut slots, &parts, &joint, taken, &mut Vec::new());
                self.record(&req.domain, &mut slots, &parts).await;
                Ran {
                    slots,
                    failed: None,
                }
            }
            Err(e) => Ran {
                slots,
                failed: Some(e),
            },
        }
    }

    /// A settle (`hits_subtrahend`): each descriptor's hits less the
    /// subtrahend; where the subtrahend is larger, the difference is given
    /// back to its limit now ([`RateLimiter::reward`]: never more than it
    /// holds, a count never below 0, a bucket never above full) and the
    /// descriptor is then only looked at (its hits 0); where it is
    /// smaller, the rest is decided as any hits (and recorded if it does
    /// not fit, see [`record`](Self::record)).
    async fn give_back(&self, domain: &str, slots: &mut [Slot<'_>], subtrahend: u64) {
        let mut refunds = Vec::new();
        for slot in slots.iter_mut() {
            let net = slot.hits.saturating_sub(subtrahend);
            let back = subtrahend.saturating_sub(slot.hits);
            slot.hits = net;
            // (a sliding log gives back only the times a reservation
            // wrote, which a refund does not name: nothing)
            let refunds_here = back > 0 && !slot.is_log();
            if let State::Pending {
                limiter, key, cost, ..
            } = &mut slot.state
            {
                *cost = net;
                slot.never_fits = !slot.shadow && net > slot.capacity;
                if refunds_here {
                    let limiter = slot.strict.as_ref().unwrap_or(limiter).clone();
                    let key = key.clone();
                    refunds.push(boxed(
                        async move { limiter.reward(key.as_bytes(), back).await },
                    ));
                }
            }
        }
        for result in futures_util::future::join_all(refunds).await {
            if let Err(e) = result {
                self.metrics.store_error(domain);
                if let Some(held) = self.logs.failed.to_log() {
                    tracing::error!(error = %e, held_back = held, "store error: a refund (hits_subtrahend) was not given back");
                }
            }
        }
    }

    /// Records the hits that a decision neither took nor recorded itself
    /// (a denial the store recorded, [`Decision::recorded`], is consumed),
    /// where they are charged anyway ([`Charge`]): with `always`, on every
    /// descriptor; with `over`, on a descriptor over its limit (a
    /// never-fitting one, looked at only; a quota-mode descriptor over
    /// while its call passes); with `admitted`, nowhere. Each is charged
    /// past the limit if need be ([`RateLimiter::penalize`]: a fixed
    /// window's count runs past it, a bucket takes them as debt, repaid at
    /// its rate), so that a usage report is never lost and the next call
    /// sees it; then the recorded descriptors' states are read again for
    /// the answer. A shadow descriptor records nothing.
    async fn record(&self, domain: &str, slots: &mut [Slot<'_>], parts: &[(usize, usize)]) {
        let mut charges = Vec::new();
        let mut recorded = Vec::new();
        // sliding-log times written by one call's records, at most what
        // one joint decision may write (a log keeps at most its count + 1
        // times: no charge of one writes more)
        let mut log_left = AllOrNothing::MAX_LOGGED;
        let mut held_back = false;
        for (i, slot) in slots.iter().enumerate() {
            let State::Decided {
                limiter,
                key,
                consumed: false,
                cost,
                ..
            } = &slot.state
            else {
                continue;
            };
            let charged = match slot.charge {
                // (a request too large for one store call was over no
                // limit of its own: nothing is recorded where it had room)
                Charge::Over => slot.over() && !slot.too_large,
                Charge::Admitted => false,
                Charge::Always => true,
            };
            if slot.shadow || *cost == 0 || !charged {
                continue;
            }
            let mut cost = *cost;
            match slot.rule.and_then(|r| r.strategy) {
                Some(Strategy::SlidingWindowLog) => {
                    let most = cost.min(slot.capacity.saturating_add(1));
                    cost = most.min(log_left);
                    log_left -= cost;
                    held_back |= cost < most;
                    if cost == 0 {
                        continue;
                    }
                }
                // a bucket's debt from one call: at most what its rate
                // repays in the longest period (366 days), as a window
                // forgets its count at its end
                Some(Strategy::FixedWindow) | None => {}
                Some(_) => cost = cost.min(slot.rule.map_or(u64::MAX, debt_cap)),
            }
            let limiter = slot.strict.as_ref().unwrap_or(limiter).clone();
            let key = key.clone();
            charges.push(boxed(async move {
                limiter.penalize(key.as_bytes(), cost).await
            }));
            recorded.push((i, cost));
        }
        if held_back && let Some(held) = self.logs.refused.to_log() {
            tracing::warn!(
                domain = shown(domain),
                held_back = held,
                "a denied call's hits on sliding-window-log rules were recorded only in part: at most {} times in one call",
                AllOrNothing::MAX_LOGGED
            );
        }
        if charges.is_empty() {
            return;
        }
        let results = futures_util::future::join_all(charges).await;
        let mut done = Vec::with_capacity(recorded.len());
        for ((i, cost), result) in recorded.into_iter().zip(results) {
            match result {
                Ok(()) => done.push((i, cost)),
                Err(e) => {
                    self.metrics.store_error(domain);
                    if let Some(held) = self.logs.failed.to_log() {
                        tracing::error!(error = %e, held_back = held, "store error: the hits of a denied call were not recorded");
                    }
                }
            }
        }
        // the states after, for the answer: an aligned fixed window's is
        // its decision's less the hits recorded in its key (the same
        // window, known without a read; a count past the limit leaves
        // nothing); any other's is read again, for the call's own hits
        // (its Retry-After is when they fit)
        let part_of = |i: usize| parts.iter().find(|&&(s, _)| s == i).map(|&(_, p)| p);
        let mut read = Vec::new();
        for &(i, _) in &done {
            let aligned = slots[i]
                .rule
                .is_none_or(|r| r.strategy.is_none() && r.calendar.is_none());
            if aligned {
                let p = part_of(i);
                let spent = done
                    .iter()
                    .filter(|&&(j, _)| part_of(j) == p)
                    .fold(0u64, |sum, &(_, c)| sum.saturating_add(c));
                slots[i].after = Some(After::Less(spent));
            } else {
                read.push(i);
            }
        }
        if read.is_empty() {
            return;
        }
        let mut joint = AllOrNothing::new();
        let mut logged = 0u64;
        for &i in &read {
            let slot = &slots[i];
            if let State::Decided {
                limiter, key, cost, ..
            } = &slot.state
            {
                let mut ask = (*cost).min(slot.capacity);
                if slot.is_log() {
                    ask = ask.min(AllOrNothing::MAX_LOGGED - logged);
                    logged += ask;
                }
                joint.push(limiter, key.as_bytes(), ask);
            }
        }
        let Ok(after) = joint.peek().await else {
            return;
        };
        for (&i, decision) in read.iter().zip(after.into_decisions()) {
            slots[i].after = Some(After::Read(decision));
        }
    }

    fn respond(&self, slots: &[Slot], denied: bool) -> RateLimitResponse {
        let now = now_us();
        let mut statuses = Vec::with_capacity(slots.len());
        let mut policy = String::new();
        let mut ratelimit = String::new();
        let mut retry_after: Option<u64> = None;
        for slot in slots {
            let mut status = DescriptorStatus {
                code: Code::Ok as i32,
                current_limit: slot.limit.clone(),
                ..Default::default()
            };
            if slot.unlimited {
                status.limit_remaining = u32::MAX;
            }
            match &slot.state {
                State::Free | State::Pending { .. } => {}
                State::Refused => {
                    status.code = Code::OverLimit as i32;
                    retry_after = retry_after.max(Some(1));
                }
                State::Zero { period } => {
                    let reset = Duration::from_micros(
                        window_of(u64::try_from(period.as_micros()).unwrap_or(u64::MAX), now)
                            .reset_after_us,
                    );
                    status.duration_until_reset = Some(duration(reset));
                    if slot.over() {
                        status.code = Code::OverLimit as i32;
                        retry_after = retry_after.max(Some(ceil_secs(reset).max(1)));
                    }
                }
                State::Decided {
                    limiter,
                    decision,
                    period,
                    ..
                } => {
                    // (a denied request's descriptors: their state, untouched,
                    // or after its hits were recorded)
                    let (shown, less) = match &slot.after {
                        Some(After::Read(d)) => (d, 0),
                        Some(After::Less(hits)) => (decision, *hits),
                        None => (decision, 0),
                    };
                    let limit = shown.limit();
                    let remaining = shown.remaining().saturating_sub(less);
                    let mut reset = shown.reset_after();
                    if reset.is_zero() {
                        // (a cost that can never fit: no state was read)
                        reset = Duration::from_micros(
                            window_of(u64::try_from(period.as_micros()).unwrap_or(u64::MAX), now)
                                .reset_after_us,
                        );
                    }
                    status.limit_remaining = u32::try_from(remaining).unwrap_or(u32::MAX);
                    status.duration_until_reset = Some(duration(reset));
                    // (a quota-mode descriptor over its limit is reported over,
                    // even when the request is let through)
                    let over = slot.over();
                    // (no wait admits a request that never fits: no Retry-After)
                    let wait = if slot.never_fits {
                        None
                    } else {
                        Some(shown.retry_after().unwrap_or(reset))
                    };
                    if over {
                        status.code = Code::OverLimit as i32;
                        if let Some(wait) = wait {
                            retry_after = retry_after.max(Some(ceil_secs(wait).max(1)));
                        }
                    }
                    if self.options.headers && !slot.shadow {
                        let name = limiter
                            .quota_names()
                            .first()
                            .map(|n| n.to_string())
                            .unwrap_or_default();
                        let w = ceil_secs(*period).max(1);
                        if !policy.is_empty() {
                            policy.push_str(", ");
                        }
                        let _ = write!(policy, "{};q={limit};w={w}", sf_string(&name));
                        if !ratelimit.is_empty() {
                            ratelimit.push_str(", ");
                        }
                        let t = match wait {
                            Some(wait) if over => ceil_secs(wait).max(1),
                            _ => ceil_secs(reset),
                        };
                        let _ = write!(ratelimit, "{};r={remaining};t={t}", sf_string(&name));
                    }
                }
            }
            statuses.push(status);
        }
        let mut headers = Vec::new();
        if let Some(names) = &self.options.go_headers {
            go_headers(names, slots, &statuses, &mut headers);
        }
        if self.options.headers {
            if !policy.is_empty() {
                headers.push(header("RateLimit-Policy", policy));
                headers.push(header("RateLimit", ratelimit));
            }
            if denied && let Some(secs) = retry_after {
                headers.push(header("Retry-After", secs.to_string()));
            }
        }
        RateLimitResponse {
            overall_code: if denied { Code::OverLimit } else { Code::Ok } as i32,
            statuses,
            response_headers_to_add: headers,
            ..Default::default()
        }
    }
}

/// envoyproxy/ratelimit's response headers ([`ServiceOptions::go_headers`]):
/// those of the descriptor closest to its limit (the fewest remaining of
/// those with a limit; a descriptor over its limit, not in quota mode,
/// wins, the last such one), as that service picks it.
fn go_headers(
    names: &GoHeaders,
    slots: &[Slot<'_>],
    statuses: &[DescriptorStatus],
    headers: &mut Vec<HeaderValue>,
) {
    let mut tightest: Option<&DescriptorStatus> = None;
    let mut fewest = u32::MAX;
    for (slot, status) in slots.iter().zip(statuses) {
        let Some(_) = &status.current_limit else {
            continue;
        };
        if status.limit_remaining < fewest {
            tightest = Some(status);
            fewest = status.limit_remaining;
        }
        if status.code == Code::OverLimit as i32 && !slot.quota {
            tightest = Some(status);
            fewest = 0;
        }
    }
    let Some(status) = tightest else { return };
    let limit = status
        .current_limit
        .as_ref()
        .map_or(0, |l| l.requests_per_unit);
    let reset = status
        .duration_until_reset
        .as_ref()
        .map_or(0, |d| d.seconds.max(0));
    headers.push(header(&names.limit, limit.to_string()));
    headers.push(header(&names.remaining, status.limit_remaining.to_string()));
    headers.push(header(&names.reset, reset.to_string()));
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.to_owned(),
        value,
        ..Default::default()
    }
}

/// `s` as a structured-field string: quoted, `"` and `\` escaped, other
/// bytes outside printable ASCII as `_`.
fn sf_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('_'),
        }
    }
    out.push('"');
    out
}

/// A store call to run beside others ([`Inner::record`],
/// [`Inner::give_back`]), boxed: its type stays small.
type StoreCall = std::pin::Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send>>;

fn boxed(f: impl Future<Output = Result<(), StoreError>> + Send + 'static) -> StoreCall {
    Box::pin(f)
}

/// What [`Inner::run`] did: each descriptor's slot, and the store's error
/// if it failed (the undecided descriptors stay `Pending`).
struct Ran<'a> {
    slots: Vec<Slot<'a>>,
    failed: Option<StoreError>,
}

/// A joint decision's answer: whether all parts were admitted, and each
/// part's decision.
struct Joint {
    allowed: bool,
    decisions: Vec<Decision>,
}

impl From<JointDecision> for Joint {
    fn from(d: JointDecision) -> Self {
        Joint {
            allowed: d.allowed(),
            decisions: d.into_decisions(),
        }
    }
}

/// Decides `joint` (the parts `asks`), consuming if all fit. One part is
/// its limiter's own decision ([`RateLimiter::check_n`]: all or nothing
/// alone, and batched with concurrent calls on Redis, which a joint call
/// never is).
async fn take(
    joint: &AllOrNothing<'_>,
    asks: &[(Arc<RateLimiter>, String, u64, OnDenial)],
) -> Result<Joint, StoreError> {
    if let [(limiter, key, cost, _)] = asks {
        let decision = limiter.check_n(key.as_bytes(), *cost).await?;
        return Ok(Joint {
            allowed: decision.allowed(),
            decisions: vec![decision],
        });
    }
    joint.decide().await.map(Joint::from)
}

/// Records each part's decision of `joint` in its slots (`parts` pairs a
/// slot with its part); `consumed`: the joint decision took its units.
/// `looked` gets each slot decided, for [`undo`].
fn decided(
    slots: &mut [Slot<'_>],
    parts: &[(usize, usize)],
    joint: &Joint,
    consumed: bool,
    looked: &mut Vec<usize>,
) {
    for &(i, part) in parts {
        let Some(decision) = joint.decisions.get(part) else {
            continue;
        };
        let slot = &mut slots[i];
        // (its limiter and key move: no copy)
        let (limiter, key, cost, period) = match std::mem::replace(&mut slot.state, State::Free) {
            State::Pending {
                limiter,
                key,
                cost,
                period,
            }
            | State::Decided {
                limiter,
                key,
                cost,
                period,
                ..
            } => (limiter, key, cost, period),
            other => {
                slot.state = other;
                continue;
            }
        };
        slot.state = State::Decided {
            limiter,
            key,
            decision: decision.clone(),
            // (a shadow quota that would deny takes nothing; a denial
            // the store recorded took the hits, past the limit)
            consumed: consumed && cost > 0 && !decision.shadow_denied() || decision.recorded(),
            cost,
            period,
        };
        looked.push(i);
    }
}

/// Makes the slots [`decided`] decided pending again.
fn undo(slots: &mut [Slot<'_>], looked: Vec<usize>) {
    for i in looked {
        let slot = &mut slots[i];
        if let State::Decided {
            limiter,
            key,
            cost,
            period,
            ..
        } = std::mem::replace(&mut slot.state, State::Free)
        {
            slot.state = State::Pending {
                limiter,
                key,
                cost,
                period,
            };
        }
    }
}

/// Drops the limits that another matched limit `replaces`, as the Go
/// service does: the names come from every matched rule (an unlimited one
/// too); a replaced descriptor answers `OK` with no limit, and is not
/// counted. An unlimited descriptor is never replaced.
fn apply_replaces(slots: &mut [Slot<'_>]) {
    let mut replaced: Vec<&str> = Vec::new();
    for slot in slots.iter() {
        if let Some(rule) = slot.rule {
            replaced.extend(rule.replaces.iter().map(String::as_str));
        }
    }
    if replaced.is_empty() {
        return;
    }
    for slot in slots.iter_mut() {
        let Some(rule) = slot.rule else { continue };
        if slot.unlimited || rule.name.is_empty() || !replaced.contains(&rule.name.as_str()) {
            continue;
        }
        tracing::debug!(name = %rule.name, "limit replaced");
        slot.limit = None;
        slot.shadow = false;
        slot.state = State::Free;
        slot.metric_key = None;
    }
}

/// Counts each decided descriptor in `metrics`, as the Go service counts
/// them ([`crate::metrics`]).
fn count(metrics: &Metrics, domain: &str, slots: &[Slot<'_>]) {
    for slot in slots {
        let Some(key) = &slot.metric_key else {
            continue;
        };
        let outcome = match &slot.state {
            State::Zero { .. } => Outcome {
                hits: slot.hits,
                limit: 0,
                before: 0,
                over: slot.hits > 0,
                shadow: slot.shadow,
            },
            State::Decided {
                decision,
                cost,
                consumed,
                ..
            } => {
                let limit = decision.limit();
                let over = decision.denied() || decision.shadow_denied() || slot.never_fits;
                // consumed: the remaining count is after the hits; else
                // nothing was taken (a denial the store recorded shows the
                // state after, past the limit: what was used before it is
                // not known, counted as the limit's)
                let used = limit.saturating_sub(decision.remaining());
                Outcome {
                    hits: *cost,
                    limit,
                    before: if *consumed && !decision.recorded() {
                        used.saturating_sub(*cost)
                    } else {
                        used
                    },
                    over,
                    shadow: slot.shadow,
                }
            }
            _ => continue,
        };
        let (valued, fallback) = match slot.rule {
            Some(rule) => (*key != rule.full_key, rule.full_key.clone()),
            None => (true, format!("{domain}.limit_override")),
        };
        metrics.record(domain, key, valued, &fallback, outcome);
    }
}

/// The statistics key of a `limit` override: `<domain>.limit_override`
/// and the descriptor's keys, without their values (a client's values must
/// not make new series).
fn override_metric_key(domain: &str, entries: &[(&str, &str)]) -> String {
    let mut k = format!("{domain}.limit_override");
    for (key, _) in entries {
        k.push('.');
        k.push_str(key);
    }
    k
}

#[tonic::async_trait]
impl RateLimitService for RlsService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        self.should_rate_limit_inner(&request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_valid_and_distinct() {
        let a = prefix_for("r", "api", "api.path_/v1/{x}", "11:path_/v1/{x}");
        let b = prefix_for("r", "api", "api.path__v1__x_", "11:path__v1__x_");
        assert_ne!(a, b);
        for p in [&a, &b] {
            assert!(p.len() <= 64, "{p}");
            assert!(
                p.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
            );
        }
        let long = prefix_for("r", "d", &"x".repeat(500), "x");
        assert!(long.len() <= 64);
    }

    #[test]
    fn values_that_are_not_utf8_stay_apart_as_text() {
        assert_eq!(value_text(b"plain"), "plain");
        assert_eq!(value_text("é".as_bytes()), "é");
        assert_eq!(value_text(b"k-\xff"), "k-\\xff");
        assert_eq!(value_text(b"\xc3(\xfe"), "\\xc3(\\xfe");
        assert_ne!(value_text(b"k-\xff"), value_text(b"k-\xfe"));
    }

    #[test]
    fn every_period_is_reported_as_a_rate_no_higher_than_it_admits() {
        let s = 1_000_000;
        for (count, period_us, expected) in [
            (100, 60 * s, (100, Unit::Minute)),
            (100, 300 * s, (20, Unit::Minute)),
            (100, 90 * s, (66, Unit::Minute)),
            (100, 7_200 * s, (50, Unit::Hour)),
            (1, 7_200 * s, (1, Unit::Day)),
            (10, s / 2, (10, Unit::Second)),
            (0, 60 * s, (0, Unit::Minute)),
            (0, 90 * s, (0, Unit::Minute)),
            (u32::MAX, 2 * s, (u32::MAX / 2, Unit::Second)),
        ] {
            let (per, unit) = reported_rate(count, period_us);
            assert_eq!((per, unit), expected, "{count} per {period_us} µs");
            // never more than the limit admits in either window
            let unit_us = u128::from(unit.seconds()) * 1_000_000;
            assert!(
                u128::from(per) * u128::from(period_us) <= u128::from(count) * unit_us
                    || unit_us < u128::from(period_us),
                "{count} per {period_us} µs"
            );
        }
    }

    #[test]
    fn user_keys_are_unambiguous() {
        let a = user_key(&[("a", "b&3:c_d")], &[]);
        let b = user_key(&[("a", "b"), ("c", "d")], &[]);
        assert_ne!(a, b);
        // one entry is counted as the Go service matches it, `key_value`
        assert_eq!(
            user_key(&[("a", "b_c")], &[]),
            user_key(&[("a_b", "c")], &[])
        );
        let shared = user_key(&[("p", "/v1/x")], &[Some("/v1/*".to_owned())]);
        assert_eq!(shared, "7:p_/v1/*");
    }
}
