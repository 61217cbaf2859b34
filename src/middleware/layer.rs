//! [`RateLimitLayer`]: configuration of the middleware.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use http::request::Parts;
use tower_layer::Layer;

use super::config::Config;
use super::headers::HeaderStyle;
use super::limits::Limits;
use super::policy::{Failure, FailurePolicy, MissingKey};
use super::service::RateLimit;
use super::stats::Stats;
use crate::decision::Decision;
use crate::key::KeyExtractor;
use crate::limiter::RateLimiter;
use crate::plans::Plans;

use super::near::{NearLimit, NearLimitFn};
use super::plan::PlanResolver;
use super::settle::{ResponseCost, SettleConfig};

/// Applies [`RateLimit`] to services: a [`RateLimiter`] and a
/// [`KeyExtractor`], plus options set with by-value methods.
///
/// Cheap to clone; every service it builds shares the limiter, the deny
/// cache and the counters.
///
/// A request admitted by a [`LeakyBucket`](crate::strategy::Strategy::LeakyBucket)
/// quota waits its whole [`delay`](crate::Decision::delay) (its slot in the
/// queue) before the inner service is called, never less. The quota bounds
/// that wait: its queue holds `burst` requests, so no admitted request waits
/// longer than about `burst` × the rate's period / count, and a request
/// beyond the queue is denied by the store (429) without waiting and
/// without taking a slot. Size the quota's burst to bound the wait.
///
/// ```
/// use std::time::Duration;
///
/// use http::StatusCode;
/// use tower_redis_ratelimit::middleware::{FailurePolicy, HeaderStyle, MissingKey, problem_json};
/// use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter, key};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = RateLimiter::builder()
///     .store(MemoryStore::new())
///     .quota(Quota::gcra(Rate::per_minute(60)).burst(10).name("minute"))
///     .build()?;
///
/// let layer = RateLimitLayer::new(limiter, key::Global)
///     .headers(HeaderStyle::Both)
///     .on_store_error(FailurePolicy::Fallback(MemoryStore::new()))
///     .cost(|req: &http::request::Parts| if req.method == http::Method::POST { 5 } else { 1 })
///     .bypass(|req: &http::request::Parts| req.uri.path() == "/health")
///     .on_missing_key(MissingKey::reject(StatusCode::BAD_REQUEST))
///     .deny_response(problem_json)
///     .deny_cache_capacity(50_000);
/// # let _ = layer;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
#[must_use]
pub struct RateLimitLayer {
    config: Arc<Config>,
}

impl RateLimitLayer {
    /// Limits requests with `limiter`, counting each against the key
    /// `extractor` finds in it.
    ///
    /// Defaults: [`HeaderStyle::Ietf`], [`FailurePolicy::Open`] for store
    /// failures and [`FailurePolicy::Closed`] for the store's
    /// [refusals](Self::on_refusal), cost 1, no
    /// bypass, [`MissingKey::by_cause`] (a request without its key: 401 or
    /// 400, the client's mistake; 500 only for a misconfigured server), the text/plain
    /// [`text_plain`](super::text_plain) denial, a deny cache of 10 000 keys. The store bounds each call (a
    /// [`RedisStore`](crate::RedisStore) by its
    /// [`timeout`](crate::RedisStore::timeout), 100 ms by default); beyond it
    /// the [failure policy](Self::on_store_error) applies.
    pub fn new(limiter: RateLimiter, extractor: impl KeyExtractor) -> Self {
        Self {
            config: Arc::new(Config::of_limiter(limiter, extractor)),
        }
    }

    fn with(mut self, f: impl FnOnce(&mut Config)) -> Self {
        f(Arc::make_mut(&mut self.config));
        self
    }

    /// Which rate-limit headers responses carry (default [`HeaderStyle::Ietf`]).
    pub fn headers(self, style: HeaderStyle) -> Self {
        self.with(|c| c.answers.style = style)
    }

    /// What to do when the store fails or times out (default [`FailurePolicy::Open`]).
    /// A store that refuses the limiter's calls for good is decided by
    /// [`on_refusal`](Self::on_refusal) instead.
    ///
    /// With [plans](Self::with_plans), `Fallback` decides each plan's
    /// quotas in its store (each plan's limiter over it is made on first need).
    pub fn on_store_error(self, policy: FailurePolicy) -> Self {
        self.with(|c| c.failures.outage = Failure::resolve(policy, c.limits.limiter()))
    }

    /// What to do when the store refuses the limiter's calls for good
    /// ([`StoreError::Refused`](crate::error::StoreError::Refused): an ACL
    /// without a permission, a renamed command, a key of another type):
    /// default [`FailurePolicy::Closed`], `503` until the configuration is
    /// fixed. A refusal is a misconfiguration, not an outage: it fails every
    /// call alike from the first request of a deploy, so failing open would
    /// run the service without any limit, silently but for the log, where
    /// failing closed shows it at once. Whatever the policy, a refusal is
    /// logged at ERROR (feature `tracing`; at most once every 10 s per
    /// layer, with the number of refusals since the previous line) and
    /// counted in [`Stats::refused`] and in the metric
    /// `ratelimit_store_errors_total` with `kind="refused"`. Check the
    /// store at startup with [`RateLimiter::verify`] or
    /// [`Plans::verify`](crate::plans::Plans::verify).
    ///
    /// ```
    /// use tower_redis_ratelimit::middleware::FailurePolicy;
    /// use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter, key};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let limiter = RateLimiter::builder().store(MemoryStore::new()).quota(Quota::gcra(Rate::per_minute(60))).build()?;
    /// // availability first, even with a broken ACL: decide locally, and log at ERROR
    /// let layer = RateLimitLayer::new(limiter, key::PeerIp)
    ///     .on_refusal(FailurePolicy::Fallback(MemoryStore::new()));
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn on_refusal(self, policy: FailurePolicy) -> Self {
        self.with(|c| c.failures.refusal = Failure::resolve(policy, c.limits.limiter()))
    }

    /// The weight of a request (default 1). A cost of 0 counts as 1: every
    /// request that reaches the limiter takes at least one unit (a cost of 0
    /// would be admitted as a peek even with nothing left, and would take no
    /// concurrency lease and no leaky-bucket slot, so a cost computed from the
    /// request could make it free); use [`bypass`](Self::bypass) for requests
    /// that are not counted. A cost above a quota's capacity is always
    /// denied (413).
    pub fn cost<F>(self, cost: F) -> Self
    where
        F: Fn(&Parts) -> u64 + Send + Sync + 'static,
    {
        self.with(|c| c.requests.cost = Some(Arc::new(cost)))
    }

    /// Requests for which `bypass` returns true skip the limiter entirely
    /// (no store call, no headers): health checks, internal networks.
    pub fn bypass<F>(self, bypass: F) -> Self
    where
        F: Fn(&Parts) -> bool + Send + Sync + 'static,
    {
        self.with(|c| c.requests.bypass = Some(Arc::new(bypass)))
    }

    /// What to do when the extractor finds no key (default
    /// [`MissingKey::by_cause`]: 401 for a missing credential, 400 for
    /// anything else the request lacks, 500 (logged) when the server records
    /// no peer address).
    pub fn on_missing_key(self, missing: MissingKey) -> Self {
        self.with(|c| c.requests.missing = missing)
    }

    /// Builds the response to a denied HTTP request (default
    /// [`text_plain`](super::text_plain); see also
    /// [`problem_json`](super::problem_json)).
    ///
    /// The middleware then adds the rate-limit headers, and `Retry-After`
    /// unless the request can never fit (its cost exceeds the capacity: the
    /// decision's [`retry_after`](crate::Decision::retry_after) is `None`;
    /// the default answers answer it `413`). gRPC calls get a gRPC
    /// `RESOURCE_EXHAUSTED` instead (`INVALID_ARGUMENT` for one that can
    /// never fit; see [`grpc`](Self::grpc)).
    pub fn deny_response<F, T>(self, deny: F) -> Self
    where
        F: Fn(&Parts, &Decision) -> Response<T> + Send + Sync + 'static,
        T: Into<Bytes>,
    {
        self.with(|c| c.answers.deny = Some(Arc::new(move |p, d| deny(p, d).map(Into::into))))
    }

    /// Turns the local deny cache on (the default) or off.
    ///
    /// A key denied with a `retry_after` is then answered from process
    /// memory until that instant, for at most a second, without asking the
    /// store: a flooding client costs the store about one call per second
    /// (and per instance). Denials by a
    /// [`Concurrency`](crate::strategy::Strategy::Concurrency) quota are not cached
    /// (a lease may be released any moment). The cache is the limiter's
    /// (each plan's, with [plans](Self::with_plans)), shared by the layers
    /// over it: the limiter's admin operations ([`RateLimiter::reset`],
    /// [`reward`](RateLimiter::reward), [`set_remaining`](RateLimiter::set_remaining),
    /// [`unblock`](RateLimiter::unblock), ...) forget the key's denial, so
    /// they hold on this instance's next request; on other instances they
    /// hold within a second, once the cached denial is that old.
    pub fn deny_cache(self, enabled: bool) -> Self {
        self.with(|c| c.deny_cache = enabled)
    }

    /// Turns the deny cache on with room for about `keys` denied keys
    /// (default 10 000); when full, the denial that ends first is dropped.
    /// The cache is the limiter's (each plan's), so this sets it for every
    /// layer over the same limiter.
    pub fn deny_cache_capacity(self, keys: usize) -> Self {
        self.with(|c| {
            c.deny_cache = true;
            c.limits.set_deny_cache_capacity(keys);
        })
    }

    /// Whether the middleware's own answers (429, 503, missing key) take the
    /// gRPC form: HTTP 200, trailers-only, `grpc-status` and `grpc-message`.
    ///
    /// By default it decides per request: a gRPC call is an HTTP/2 request
    /// with a `content-type` of `application/grpc*`. An HTTP/1.1 request is
    /// never answered in gRPC form, so a client cannot turn its 429 into a
    /// 200 by sending a gRPC content type. `.grpc(true)` answers every
    /// request in gRPC form (e.g. gRPC-Web over HTTP/1.1 behind this layer);
    /// `.grpc(false)` never does.
    pub fn grpc(self, grpc: bool) -> Self {
        self.with(|c| c.answers.grpc = Some(grpc))
    }

    /// Checks every request under its plan: `resolver` names the plan
    /// (say from what API-key authentication put in the request's
    /// extensions); a request without one, or with an unknown one, gets the
    /// plans' default plan. Still one store call per request (none for an
    /// unlimited plan); the limits may change while the layer serves (see
    /// [`LimitsHandle`](crate::plans::LimitsHandle)). The request's
    /// [`ActivePlan`](crate::plans::ActivePlan) is in its extensions (as an
    /// `Arc<ActivePlan>`).
    ///
    /// The same defaults as [`new`](Self::new); each plan's limiter has its
    /// own deny cache, so a plan's denials are forgotten when its limits
    /// change.
    ///
    /// ```
    /// use tower_redis_ratelimit::middleware::PlanFromHeader;
    /// use tower_redis_ratelimit::plans::{Plan, Plans};
    /// use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimitLayer, key};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let plans = Plans::builder()
    ///     .store(MemoryStore::new())
    ///     .plan("free", Plan::new([Quota::gcra(Rate::per_minute(60)).name("minute")]))
    ///     .plan("pro", Plan::new([Quota::gcra(Rate::per_minute(600)).name("minute")]))
    ///     .plan("internal", Plan::unlimited())
    ///     .default_plan("free")
    ///     .build()?;
    /// let header = http::HeaderName::from_static("x-plan"); // set by a trusted gateway
    /// let layer = RateLimitLayer::with_plans(plans, key::PeerIp, PlanFromHeader(header));
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_plans(
        plans: Plans,
        extractor: impl KeyExtractor,
        resolver: impl PlanResolver,
    ) -> Self {
        // (what `limiter()` shows; a layer of unlimited plans only shows an inert one)
        let shown = match plans.resolve(None).limiter() {
            Some(l) => l.clone(),
            None => inert_limiter(),
        };
        let name = crate::decision::intern(plans.prefix());
        let config = Config::new(Limits::of_plans(plans, resolver, shown), extractor, name);
        Self {
            config: Arc::new(config),
        }
    }

    /// Shadow mode (Envoy's `shadow_mode`, nginx's `limit_req_dry_run`):
    /// every request is decided and counted as usual, but the decision is
    /// never acted on: no request is denied, none is delayed.
    /// A request the store would have denied reaches the inner service with
    /// [`RateLimitOutcome::ShadowDenied`](crate::middleware::RateLimitOutcome::ShadowDenied)
    /// (its decision's [`shadow_denied`](crate::Decision::shadow_denied) is
    /// true; counted in [`Stats::shadow_denied`] and the metrics'
    /// `shadow_denied` outcome); its response carries the rate-limit headers
    /// it would have had (see [`shadow_headers`](Self::shadow_headers)) but
    /// no `Retry-After`. A request admitted with a delay (a
    /// [`LeakyBucket`](crate::strategy::Strategy::LeakyBucket)'s slot) goes on
    /// at once with
    /// [`RateLimitOutcome::ShadowDelayed`](crate::middleware::RateLimitOutcome::ShadowDelayed),
    /// the wait it was spared in
    /// [`would_have_delayed`](crate::middleware::RateLimitOutcome::would_have_delayed)
    /// (metrics: the `shadow_delayed` outcome and the
    /// `ratelimit_shadow_delay_seconds` histogram); its slot is taken, as
    /// every admitted request is counted. The deny cache is not used. Roll a
    /// new limit out with it, then turn it off. A
    /// [plan](crate::plans::Plan::shadow) can be in shadow mode on its own.
    ///
    /// As for any denial, the store consumes nothing for a request it
    /// denies: while a quota of a shadowed layer denies, the request is not
    /// counted against its other quotas either. To shadow one new quota
    /// beside enforced ones, make that quota [shadow](crate::Quota::shadow)
    /// instead (same limiter, same store call).
    pub fn shadow(self, shadow: bool) -> Self {
        self.with(|c| c.shadow = shadow)
    }

    /// Whether a shadowed denial's response carries the rate-limit headers
    /// of its decision (default `true`; `Retry-After` never).
    pub fn shadow_headers(self, headers: bool) -> Self {
        self.with(|c| c.answers.shadow_headers = headers)
    }

    /// Flags the admitted request that takes a quota across `fraction` of
    /// its limit (e.g. `0.8`: 80 % used): a [`NearLimit`] goes into its
    /// extensions (the handler can warn the caller), and the callback of
    /// [`on_near_limit`](Self::on_near_limit), if set, is called with it.
    /// `fraction` is clamped to `0.0..=1.0` (NaN counts as `1.0`).
    ///
    /// ```
    /// use tower_redis_ratelimit::middleware::NearLimit;
    /// use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter, key};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let limiter = RateLimiter::builder().store(MemoryStore::new()).quota(Quota::gcra(Rate::per_minute(60))).build()?;
    /// let layer = RateLimitLayer::new(limiter, key::PeerIp)
    ///     .near_limit(0.8)
    ///     .on_near_limit(|_req: &http::request::Parts, near: &NearLimit| {
    ///         println!("{} is at {} of {}", near.quota, near.limit - near.remaining, near.limit);
    ///     });
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn near_limit(self, fraction: f64) -> Self {
        let fraction = if fraction.is_nan() {
            1.0
        } else {
            fraction.clamp(0.0, 1.0)
        };
        self.with(|c| c.near_limit.fraction = Some(fraction))
    }

    /// Calls `callback` with each [`NearLimit`] the layer flags, before the
    /// request goes on to the inner service. Flags are raised only while a
    /// fraction is set with [`near_limit`](Self::near_limit): without one
    /// the callback is never called. Setting it again replaces it.
    pub fn on_near_limit<F>(self, callback: F) -> Self
    where
        F: Fn(&Parts, &NearLimit) + Send + Sync + 'static,
    {
        self.with(|c| c.near_limit.callback = Some(Arc::new(callback) as Arc<NearLimitFn>))
    }

    fn settling(self, f: impl FnOnce(&mut SettleConfig)) -> Self {
        self.with(|c| {
            let mut settle = c.settle.as_deref().cloned().unwrap_or_default();
            f(&mut settle);
            c.settle = Some(Arc::new(settle));
        })
    }

    /// Does not count requests answered with a failure (status 400 and
    /// above): they are refunded once the response head is known. Same as
    /// `refund_when(|res| res.status.is_client_error() || res.status.is_server_error())`.
    ///
    /// **Not on a login endpoint** (nor any endpoint that answers a guess
    /// with a 4xx): a wrong password's `401`, a missing resource's `404`, a
    /// rejected token's `403` are then free, so the limit never stops the
    /// guessing it is there for. Count those with
    /// [`skip_successful`](Self::skip_successful) (only failures count), or
    /// refund server errors alone with
    /// `refund_when(|res| res.status.is_server_error())`.
    ///
    /// Like every refund option, this admits requests with
    /// [`RateLimiter::reserve_n`] (the cost reserved, denied if it does not
    /// fit) and settles after the response: to 0 when refunded, else not at
    /// all (no store call). The refund is made when the response body ends
    /// (before its last frame is handed out), or in a task when the body is
    /// dropped; a body whole in its first frame is settled before the
    /// response is returned. Refunds follow each strategy's give-back (see
    /// [`RateLimiter::settle`]): a leaky-bucket or concurrency quota gives
    /// nothing back. A request decided by a
    /// [`Fallback`](super::FailurePolicy::Fallback) store is never settled.
    pub fn skip_failed(self) -> Self {
        self.refund_when(|res: &http::response::Parts| {
            res.status.is_client_error() || res.status.is_server_error()
        })
    }

    /// Does not count requests answered with success (status below 400):
    /// only failures count, say failed logins. See [`skip_failed`](Self::skip_failed).
    pub fn skip_successful(self) -> Self {
        self.refund_when(|res: &http::response::Parts| res.status.as_u16() < 400)
    }

    /// Does not count requests whose response head `refund` returns true for
    /// (several predicates: any of them). See [`skip_failed`](Self::skip_failed).
    pub fn refund_when<F>(self, refund: F) -> Self
    where
        F: Fn(&http::response::Parts) -> bool + Send + Sync + 'static,
    {
        self.settling(|s| s.refund.push(Arc::new(refund)))
    }

    /// Whether a request whose client went away before its response head
    /// (the response future dropped) is refunded; default `false`: it is
    /// counted (as its estimate, or what its [`UsageReporter`](super::UsageReporter)
    /// reported). An inner service's error counts as such a disconnect.
    /// `true` also turns reservations on (see [`skip_failed`](Self::skip_failed)).
    pub fn refund_on_disconnect(self, refund: bool) -> Self {
        if !refund && self.config.settle.is_none() {
            return self;
        }
        self.settling(|s| s.refund_on_disconnect = refund)
    }

    /// Counts each request at its real cost, known only from its response
    /// (usage-based limits: tokens of a language model): the layer reserves
    /// the request's estimate, denied if it does not fit, and settles to the
    /// real cost after the response, from a header, a response extension or
    /// the [`UsageReporter`](super::UsageReporter) in the request's
    /// extensions (see [`ResponseCost`]). An overspending caller is charged
    /// the excess as a debt: denied until it is repaid at the quota's rate.
    /// Settled once, when the body ends or is dropped; a failed settle is
    /// logged (feature `tracing`) and counted in [`Stats::settle_errors`].
    ///
    /// ```
    /// use tower_redis_ratelimit::middleware::ResponseCost;
    /// use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter, key};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let tokens = RateLimiter::builder()
    ///     .store(MemoryStore::new())
    ///     .quota(Quota::token_bucket(Rate::per_minute(10_000)).name("tokens"))
    ///     .build()?;
    /// let layer = RateLimitLayer::new(tokens, key::PeerIp).cost_from_response(
    ///     ResponseCost::new()
    ///         .estimate(|_req: &http::request::Parts| 500)
    ///         .header(http::HeaderName::from_static("x-tokens-used")),
    /// );
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn cost_from_response(self, cost: ResponseCost) -> Self {
        self.settling(|s| s.cost = Some(cost))
    }

    /// The `limiter` label of the layer's metrics (feature `metrics`;
    /// default: the limiter's key prefix, or the plans' prefix).
    pub fn name(self, name: &str) -> Self {
        let name = crate::decision::intern(name);
        self.with(|c| c.name = name)
    }

    /// The limiter requests are checked with. For a layer
    /// [with plans](Self::with_plans): the default plan's when the layer was
    /// built (the plans themselves are [`plans`](Self::plans)).
    pub fn limiter(&self) -> &RateLimiter {
        self.config.limits.limiter()
    }

    /// The plans of a layer [with plans](Self::with_plans).
    pub fn plans(&self) -> Option<&Plans> {
        self.config.limits.plans()
    }

    /// Counters shared by every service of this layer.
    pub fn stats(&self) -> Stats {
        Stats::read(&self.config.counters)
    }
}

impl<S> RateLimit<S> {
    /// A [`RateLimitLayer`] (which has the configuration methods).
    pub fn layer(limiter: RateLimiter, extractor: impl KeyExtractor) -> RateLimitLayer {
        RateLimitLayer::new(limiter, extractor)
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit::from_config(inner, self.config.clone())
    }
}

impl fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        f.debug_struct("RateLimitLayer")
            .field("limiter", c.limits.limiter())
            .field("headers", &c.answers.style)
            .field("on_store_error", &c.failures.outage)
            .field("on_refusal", &c.failures.refusal)
            .field("cost", &c.requests.cost.is_some())
            .field("bypass", &c.requests.bypass.is_some())
            .field("on_missing_key", &c.requests.missing)
            .field("deny_response", &c.answers.deny.is_some())
            .field("deny_cache", &c.deny_cache)
            .field("grpc", &c.answers.grpc)
            .field("plans", &c.limits.plans())
            .field("shadow", &c.shadow)
            .field("near_limit", &c.near_limit.fraction)
            .field(
                "settle",
                &c.settle
                    .as_ref()
                    .map(|s| (s.refund.len(), s.refund_on_disconnect, &s.cost)),
            )
            .finish()
    }
}

/// A limiter that decides nothing a layer of unlimited plans uses (it
/// never checks with it: every request's plan has no limits).
fn inert_limiter() -> RateLimiter {
    match RateLimiter::builder()
        .store(crate::store::MemoryStore::with_shards(1))
        .prefix("unlimited")
        .quota(crate::rate::Rate::per_second(1))
        .build()
    {
        Ok(limiter) => limiter,
        Err(e) => unreachable!("a fixed valid configuration: {e}"),
    }
}
