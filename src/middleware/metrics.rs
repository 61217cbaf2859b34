//! Metrics through the `metrics` facade (feature `metrics`); without the
//! feature every function here is empty and inlined away.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `ratelimit_decisions_total` | counter | `limiter`, `plan`, `quota`, `outcome` |
//! | `ratelimit_store_errors_total` | counter | `limiter`, `plan`, `kind` |
//! | `ratelimit_store_call_seconds` | histogram | `limiter`, `plan` |
//! | `ratelimit_deny_cache_hits_total` | counter | `limiter`, `plan`, `quota` |
//! | `ratelimit_near_limit_total` | counter | `limiter`, `plan`, `quota` |
//! | `ratelimit_leases` | gauge | `limiter`, `plan` |
//! | `ratelimit_shadow_delay_seconds` | histogram | `limiter`, `plan`, `quota` |
//!
//! `kind` of a store error: `timeout`, `redis`, `pool`, `protocol` (an
//! outage, or a reply this crate does not understand), or `refused` (the
//! store refuses the limiter's calls for good, a misconfiguration: see
//! [`on_refusal`](crate::RateLimitLayer::on_refusal)), or `invalid` (a call
//! the limiter refused to make, such as settling another limiter's
//! reservation), or `too_large` (a call larger than one store call may be).
//!
//! Label values come from the configuration only (the layer's
//! [`name`](crate::RateLimitLayer::name), plan and quota names; `""` where
//! there is none), never from a request: cardinality is bounded.

#[cfg(feature = "metrics")]
use std::time::Duration;

use crate::error::StoreError;

/// `outcome` label values of `ratelimit_decisions_total`.
#[derive(Debug, Clone, Copy)]
pub(super) enum OutcomeLabel {
    Allowed,
    Denied,
    ShadowDenied,
    ShadowDelayed,
    Bypassed,
    Skipped,
    Unlimited,
    FailOpen,
    FailClosed,
    FallbackAllowed,
    FallbackDenied,
}

impl OutcomeLabel {
    #[cfg(feature = "metrics")]
    fn label(self) -> &'static str {
        match self {
            OutcomeLabel::Allowed => "allowed",
            OutcomeLabel::Denied => "denied",
            OutcomeLabel::ShadowDenied => "shadow_denied",
            OutcomeLabel::ShadowDelayed => "shadow_delayed",
            OutcomeLabel::Bypassed => "bypassed",
            OutcomeLabel::Skipped => "skipped",
            OutcomeLabel::Unlimited => "unlimited",
            OutcomeLabel::FailOpen => "fail_open",
            OutcomeLabel::FailClosed => "fail_closed",
            OutcomeLabel::FallbackAllowed => "fallback_allowed",
            OutcomeLabel::FallbackDenied => "fallback_denied",
        }
    }
}

/// A label value: a literal, or a name made from the configuration
/// (borrowed when interned, else a count of the shared string).
pub(super) trait Label {
    /// The value.
    #[cfg(feature = "metrics")]
    fn value(self) -> metrics::SharedString;
}

impl Label for &'static str {
    #[cfg(feature = "metrics")]
    #[inline]
    fn value(self) -> metrics::SharedString {
        metrics::SharedString::from(self)
    }
}

impl Label for &crate::decision::Interned<str> {
    #[cfg(feature = "metrics")]
    #[inline]
    fn value(self) -> metrics::SharedString {
        self.label()
    }
}

impl Label for &crate::decision::QuotaName {
    #[cfg(feature = "metrics")]
    #[inline]
    fn value(self) -> metrics::SharedString {
        self.interned().label()
    }
}

/// One decision's outcome.
#[inline]
pub(super) fn decision(limiter: impl Label, plan: impl Label, quota: impl Label, o: OutcomeLabel) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        "ratelimit_decisions_total",
        "limiter" => limiter.value(),
        "plan" => plan.value(),
        "quota" => quota.value(),
        "outcome" => o.label()
    )
    .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (limiter, plan, quota, o);
}

/// A failed store call, by the `kind` of its error.
#[inline]
pub(super) fn store_error(limiter: impl Label, plan: impl Label, error: &StoreError) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        "ratelimit_store_errors_total",
        "limiter" => limiter.value(),
        "plan" => plan.value(),
        "kind" => error_kind(error)
    )
    .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (limiter, plan, error);
}

/// The `kind` label of a store error.
#[cfg(feature = "metrics")]
fn error_kind(error: &StoreError) -> &'static str {
    match error {
        StoreError::Timeout(_) => "timeout",
        StoreError::Redis(_) => "redis",
        StoreError::Pool(_) => "pool",
        StoreError::Protocol(_) => "protocol",
        StoreError::Refused(_) => "refused",
        StoreError::Invalid(_) => "invalid",
        StoreError::TooLarge(_) => "too_large",
    }
}

/// A denial answered from the deny cache.
#[inline]
pub(super) fn deny_cache_hit(limiter: impl Label, plan: impl Label, quota: impl Label) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        "ratelimit_deny_cache_hits_total",
        "limiter" => limiter.value(),
        "plan" => plan.value(),
        "quota" => quota.value()
    )
    .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (limiter, plan, quota);
}

/// A caller that crossed the near-limit fraction of a quota.
#[inline]
pub(super) fn near_limit(limiter: impl Label, plan: impl Label, quota: impl Label) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        "ratelimit_near_limit_total",
        "limiter" => limiter.value(),
        "plan" => plan.value(),
        "quota" => quota.value()
    )
    .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (limiter, plan, quota);
}

/// The delay shadow mode did not impose on an admitted request (a
/// LeakyBucket's slot): the wait it would have had.
#[inline]
pub(super) fn shadow_delay(
    limiter: impl Label,
    plan: impl Label,
    quota: impl Label,
    delay: std::time::Duration,
) {
    #[cfg(feature = "metrics")]
    metrics::histogram!(
        "ratelimit_shadow_delay_seconds",
        "limiter" => limiter.value(),
        "plan" => plan.value(),
        "quota" => quota.value()
    )
    .record(delay.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (limiter, plan, quota, delay);
}

/// The time a store call started (only read with the feature on).
#[derive(Debug, Clone, Copy)]
pub(super) struct Started(#[cfg(feature = "metrics")] std::time::Instant);

#[inline]
pub(super) fn start() -> Started {
    Started(
        #[cfg(feature = "metrics")]
        std::time::Instant::now(),
    )
}

/// A store call's latency, from `started`.
#[inline]
pub(super) fn store_call(limiter: impl Label, plan: impl Label, started: Started) {
    #[cfg(feature = "metrics")]
    {
        let took: Duration = started.0.elapsed();
        metrics::histogram!("ratelimit_store_call_seconds", "limiter" => limiter.value(), "plan" => plan.value())
            .record(took.as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (limiter, plan, started);
}

/// One concurrency lease held by a response: `ratelimit_leases` goes up
/// now and down when this is dropped (the lease's release starts).
#[derive(Debug)]
pub(super) struct LeaseCount(#[cfg(feature = "metrics")] metrics::Gauge);

impl LeaseCount {
    #[inline]
    pub(super) fn new(limiter: impl Label, plan: impl Label) -> Self {
        #[cfg(feature = "metrics")]
        {
            let gauge = metrics::gauge!("ratelimit_leases", "limiter" => limiter.value(), "plan" => plan.value());
            gauge.increment(1.0);
            LeaseCount(gauge)
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = (limiter, plan);
            LeaseCount()
        }
    }
}

impl Drop for LeaseCount {
    fn drop(&mut self) {
        #[cfg(feature = "metrics")]
        self.0.decrement(1.0);
    }
}
