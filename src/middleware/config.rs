//! The layer's resolved configuration: what [`RateLimitLayer`](crate::RateLimitLayer)'s
//! builder methods set, read by every service the layer builds. Visible to
//! the middleware only.

use std::sync::Arc;

use http::request::Parts;

use super::headers::HeaderStyle;
use super::hooks::{BypassFn, CostFn, DenyFn};
use super::limits::Limits;
use super::near::NearLimitHook;
use super::policy::{Failure, MissingKey};
use super::settle::SettleConfig;
use super::stats::Counters;
use crate::decision::Interned;
use crate::error::StoreError;
use crate::key::KeyExtractor;
use crate::limiter::RateLimiter;

/// Everything a service needs to check a request, resolved once when the
/// layer is built; shared (behind an `Arc`) by every service of one layer.
#[derive(Clone)]
pub(super) struct Config {
    /// What requests are checked against: one limiter, or plans.
    pub(super) limits: Limits,
    /// What a request is counted as: its key, its weight, whether at all.
    pub(super) requests: Requests,
    /// What the store's failures get.
    pub(super) failures: Failures,
    /// The middleware's own answers and the headers of responses.
    pub(super) answers: Answers,
    /// Whether denials are answered from the limiter's deny cache.
    pub(super) deny_cache: bool,
    /// Shadow mode for the whole layer: decide and count, never deny.
    pub(super) shadow: bool,
    pub(super) near_limit: NearLimitHook,
    /// Refunds by response and costs from the response: requests are then
    /// admitted with a reservation, settled after the response.
    pub(super) settle: Option<Arc<SettleConfig>>,
    pub(super) counters: Arc<Counters>,
    /// The `limiter` label of the layer's metrics.
    pub(super) name: Interned<str>,
}

/// What a request is counted as.
#[derive(Clone)]
pub(super) struct Requests {
    pub(super) extractor: Arc<dyn KeyExtractor>,
    /// What a request without a key gets.
    pub(super) missing: MissingKey,
    pub(super) cost: Option<Arc<CostFn>>,
    pub(super) bypass: Option<Arc<BypassFn>>,
}

/// The failure policies, resolved against the layer's limiter.
#[derive(Clone, Debug)]
pub(super) struct Failures {
    /// For an outage (an error, a timeout).
    pub(super) outage: Failure,
    /// For the store's refusals ([`StoreError::Refused`]).
    pub(super) refusal: Failure,
}

/// What the middleware's answers and the rate-limit headers look like.
#[derive(Clone)]
pub(super) struct Answers {
    pub(super) style: HeaderStyle,
    /// The response to a denied HTTP request (`None`: `text_plain`).
    pub(super) deny: Option<Arc<DenyFn>>,
    /// Whether the middleware answers in gRPC form: `None` decides per
    /// request (HTTP/2 with a gRPC content type).
    pub(super) grpc: Option<bool>,
    /// Whether a shadowed denial's response carries its rate-limit headers.
    pub(super) shadow_headers: bool,
}

impl Config {
    /// The defaults of [`RateLimitLayer::new`](crate::RateLimitLayer::new)
    /// for `limits`; `name` labels the layer's metrics.
    pub(super) fn new(limits: Limits, extractor: impl KeyExtractor, name: Interned<str>) -> Self {
        Self {
            limits,
            requests: Requests {
                extractor: Arc::new(extractor),
                missing: MissingKey::default(),
                cost: None,
                bypass: None,
            },
            failures: Failures {
                outage: Failure::Open,
                refusal: Failure::Closed,
            },
            answers: Answers {
                style: HeaderStyle::default(),
                deny: None,
                grpc: None,
                shadow_headers: true,
            },
            deny_cache: true,
            shadow: false,
            near_limit: NearLimitHook::default(),
            settle: None,
            counters: Arc::new(Counters::default()),
            name,
        }
    }

    /// The defaults of [`RateLimitLayer::new`](crate::RateLimitLayer::new).
    pub(super) fn of_limiter(limiter: RateLimiter, extractor: impl KeyExtractor) -> Self {
        let name = crate::decision::intern(limiter.prefix());
        Self::new(Limits::of_limiter(limiter), extractor, name)
    }

    /// Whether the request of `parts` skips the limiter.
    #[inline]
    pub(super) fn bypasses(&self, parts: &Parts) -> bool {
        self.requests.bypass.as_ref().is_some_and(|b| b(parts))
    }

    /// What the request of `parts` takes: its estimate (a layer with costs
    /// from the response), else its cost; at least 1 (a request of cost 0
    /// would be admitted as a peek even with nothing left, and take no
    /// concurrency lease nor leaky-bucket slot).
    #[inline]
    pub(super) fn cost_of(&self, parts: &Parts) -> u64 {
        let estimate = self.settle.as_ref().and_then(|s| s.estimate(parts));
        estimate
            .unwrap_or_else(|| self.requests.cost.as_ref().map_or(1, |cost| cost(parts)))
            .max(1)
    }

    /// Whether handlers report usage (a [`UsageReporter`](super::UsageReporter)
    /// goes into every request's extensions).
    #[inline]
    pub(super) fn takes_usage_reports(&self) -> bool {
        self.settle.as_ref().is_some_and(|s| s.cost.is_some())
    }

    /// The policy for `error`: a refusal for good (an ACL, a key of another
    /// type) is a misconfiguration, decided by the refusal policy.
    pub(super) fn failure_for(&self, error: &StoreError) -> &Failure {
        match error {
            StoreError::Refused(_) => &self.failures.refusal,
            _ => &self.failures.outage,
        }
    }
}
