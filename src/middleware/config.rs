//! The layer's resolved configuration: what [`RateLimitLayer`](crate::RateLimitLayer)'s
//! builder methods set, read by every service the layer builds.

use std::sync::Arc;

use http::request::Parts;

use super::headers::{HeaderStyle, Policy};
use super::hooks::{BypassFn, CostFn, DenyFn};
use super::policy::{Failure, MissingKey};
use super::stats::Counters;
use crate::key::KeyExtractor;
use crate::limiter::RateLimiter;
use crate::plans::Plans;

use super::near::NearLimitHook;
use super::plan::PlanResolver;
use super::settle::SettleConfig;

/// Everything a service needs to check a request, resolved once when the
/// layer is built; shared (behind an `Arc`) by every service of one layer.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) limiter: RateLimiter,
    pub(crate) extractor: Arc<dyn KeyExtractor>,
    pub(crate) style: HeaderStyle,
    pub(crate) failure: Failure,
    /// The policy for a store's refusals ([`StoreError::Refused`](crate::error::StoreError::Refused)).
    pub(crate) refusal: Failure,
    pub(crate) cost: Option<Arc<CostFn>>,
    pub(crate) bypass: Option<Arc<BypassFn>>,
    pub(crate) missing: MissingKey,
    pub(crate) deny: Option<Arc<DenyFn>>,
    /// Whether denials are answered from the limiter's deny cache.
    pub(crate) deny_cache: bool,
    /// Whether the middleware answers in gRPC form: `None` decides per
    /// request (HTTP/2 with a gRPC content type).
    pub(crate) grpc: Option<bool>,
    /// `RateLimit-Policy` and what `RateLimit` needs of the quotas.
    pub(crate) policy: Arc<Policy>,
    pub(crate) counters: Arc<Counters>,
    /// Plans: the quotas are chosen per request (`limiter` is then only
    /// what [`RateLimitLayer::limiter`](crate::RateLimitLayer::limiter) shows).
    pub(crate) plans: Option<(Plans, Arc<dyn PlanResolver>)>,
    /// Shadow mode for the whole layer: decide and count, never deny.
    pub(crate) shadow: bool,
    /// Whether a shadowed denial's response carries its rate-limit headers.
    pub(crate) shadow_headers: bool,
    pub(crate) near_limit: NearLimitHook,
    /// The `limiter` label of the layer's metrics.
    pub(crate) name: crate::decision::Interned<str>,
    /// Refunds by response and costs from the response: requests are then
    /// admitted with a reservation, settled after the response.
    pub(crate) settle: Option<Arc<SettleConfig>>,
}

impl Config {
    /// The defaults of [`RateLimitLayer::new`](crate::RateLimitLayer::new).
    pub(crate) fn new(limiter: RateLimiter, extractor: impl KeyExtractor) -> Self {
        let policy = Arc::new(Policy::new(&limiter));
        let name = crate::decision::intern(limiter.prefix());
        let mut config = Self {
            limiter,
            extractor: Arc::new(extractor),
            style: HeaderStyle::default(),
            failure: Failure::Open,
            refusal: Failure::Closed,
            cost: None,
            bypass: None,
            missing: MissingKey::default(),
            deny: None,
            deny_cache: true,
            grpc: None,
            policy,
            counters: Arc::new(Counters::default()),
            plans: None,
            shadow: false,
            shadow_headers: true,
            near_limit: NearLimitHook::default(),
            name,
            settle: None,
        };
        // a limiter whose limits change at run time: checked as plans, with
        // the limiter in force (its policy, its deny cache)
        if let Some(plans) = config.limiter.runtime_plans() {
            config.plans = Some((plans.clone(), Arc::new(|_: &Parts| None::<&'static str>)));
        }
        config
    }
}
