//! [`Limits`]: what a layer checks requests against (one limiter, or the
//! plan of each request), with the header objects of its quotas.

use std::sync::Arc;

use http::request::Parts;

use super::headers::{HeaderStyle, PlanHeaders, QuotaHeaders, RateHeaders};
use super::plan::PlanResolver;
use crate::decision::Decision;
use crate::limiter::RateLimiter;
use crate::plans::{ActivePlan, Plans};

/// What a layer checks requests against.
#[derive(Clone)]
pub(super) enum Limits {
    /// Every request is checked with one limiter; its headers' view of the
    /// quotas is made once.
    One(RateLimiter, Arc<QuotaHeaders>),
    /// Every request is checked under its plan.
    Plans(PlanLimits),
}

/// The plans of a layer [with plans](crate::RateLimitLayer::with_plans),
/// or of a limiter with [runtime limits](crate::RateLimiterBuilder::runtime_limits)
/// (a plan of one, named by no request).
#[derive(Clone)]
pub(super) struct PlanLimits {
    plans: Plans,
    resolver: Arc<dyn PlanResolver>,
    /// What [`RateLimitLayer::limiter`](crate::RateLimitLayer::limiter)
    /// shows: the limiter with runtime limits, or the default plan's when
    /// the layer was built (an inert one if that plan is unlimited). No
    /// request is checked with it.
    shown: RateLimiter,
    /// Each plan build's headers, made on its first response (shared by
    /// the clones of the configuration).
    headers: Arc<PlanHeaders>,
}

impl Limits {
    /// `limiter`'s limits: its own, or (built with runtime limits) those
    /// of its plan in force.
    pub(super) fn of_limiter(limiter: RateLimiter) -> Self {
        match limiter.runtime_plans() {
            Some(plans) => Self::of_plans(plans.clone(), |_: &Parts| None::<&'static str>, limiter),
            None => {
                let headers = Arc::new(QuotaHeaders::new(&limiter));
                Limits::One(limiter, headers)
            }
        }
    }

    /// `plans`, each request's named by `resolver`; `shown` is what
    /// [`limiter`](Self::limiter) shows.
    pub(super) fn of_plans(plans: Plans, resolver: impl PlanResolver, shown: RateLimiter) -> Self {
        Limits::Plans(PlanLimits {
            plans,
            resolver: Arc::new(resolver),
            shown,
            headers: Arc::default(),
        })
    }

    /// The limiter of a layer without plans; with plans, the one it shows.
    pub(super) fn limiter(&self) -> &RateLimiter {
        match self {
            Limits::One(limiter, _) => limiter,
            Limits::Plans(p) => &p.shown,
        }
    }

    /// The plans, if requests are checked under them.
    pub(super) fn plans(&self) -> Option<&Plans> {
        match self {
            Limits::One(..) => None,
            Limits::Plans(p) => Some(&p.plans),
        }
    }

    /// The plan the request of `parts` is checked under (`None` without plans).
    #[inline]
    pub(super) fn plan_of(&self, parts: &Parts) -> Option<Arc<ActivePlan>> {
        match self {
            Limits::One(..) => None,
            Limits::Plans(p) => Some(p.plans.resolve(p.resolver.plan(parts).as_deref())),
        }
    }

    /// The limiter a request of `plan` (a limited one) is checked with.
    #[inline]
    pub(super) fn limiter_for<'a>(&'a self, plan: Option<&'a ActivePlan>) -> &'a RateLimiter {
        plan.and_then(ActivePlan::limiter)
            .unwrap_or_else(|| self.limiter())
    }

    /// The rate-limit headers of `decision`, made by the limiter of `plan`.
    #[inline]
    pub(super) fn headers(
        &self,
        style: HeaderStyle,
        decision: &Decision,
        plan: Option<&Arc<ActivePlan>>,
    ) -> RateHeaders {
        match (self, plan) {
            (Limits::One(_, quotas), _) => RateHeaders::new(style, decision, Some(quotas)),
            (Limits::Plans(p), Some(plan)) if style.ietf() => p
                .headers
                .with(plan, |quotas| RateHeaders::new(style, decision, quotas)),
            // (only the IETF headers read the quotas)
            (Limits::Plans(_), _) => RateHeaders::new(style, decision, None),
        }
    }

    /// Sets the capacity of the deny cache of every limiter that checks
    /// (and of the one shown).
    pub(super) fn set_deny_cache_capacity(&self, keys: usize) {
        self.limiter().deny_cache().set_capacity(keys);
        if let Some(plans) = self.plans() {
            plans.set_deny_cache_capacity(keys);
        }
    }
}
