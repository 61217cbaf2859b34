//! [`NearLimit`]: a caller crossed a configured fraction of a quota.

use std::sync::Arc;

use http::request::Parts;

use crate::decision::{Decision, QuotaName};

pub(crate) type NearLimitFn = dyn Fn(&Parts, &NearLimit) + Send + Sync;

/// What [`RateLimitLayer::near_limit`](crate::RateLimitLayer::near_limit) set.
#[derive(Clone)]
pub(crate) struct NearLimitHook {
    pub(crate) fraction: f64,
    pub(crate) callback: Option<Arc<NearLimitFn>>,
}

/// An admitted request that took a quota across the layer's near-limit
/// fraction (say 80 % used): the moment to warn the caller before it meets
/// a 429, as GitHub and Stripe do.
///
/// Inserted into the request's extensions (and given to the callback of
/// [`RateLimitLayer::near_limit`](crate::RateLimitLayer::near_limit)) only by
/// the request that crosses: used before it below the threshold, used after
/// it at or above, where used = limit − remaining. For the window
/// strategies that is once per window and key; for the bucket strategies
/// again each time the caller climbs back across after its bucket refilled.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NearLimit {
    /// The quota crossed (the one with the fewest left if several were).
    pub quota: QuotaName,
    /// Its limit (the burst, for the bucket strategies).
    pub limit: u64,
    /// What is left after this request.
    pub remaining: u64,
    /// The threshold crossed: `ceil(fraction × limit)` units used.
    pub threshold: u64,
}

impl NearLimitHook {
    /// The quota this decision (of a request of `cost`) took across the
    /// threshold, if any.
    pub(crate) fn crossed(&self, decision: &Decision, cost: u64) -> Option<NearLimit> {
        if cost == 0 || !decision.allowed() {
            return None;
        }
        decision
            .quotas()
            .filter_map(|q| {
                let limit = q.limit();
                let threshold =
                    ((self.fraction * limit as f64).ceil() as u64).clamp(1, limit.max(1));
                let used_after = limit.saturating_sub(q.remaining());
                let used_before = used_after.saturating_sub(cost);
                (used_before < threshold && used_after >= threshold).then(|| NearLimit {
                    quota: q.name(),
                    limit,
                    remaining: q.remaining(),
                    threshold,
                })
            })
            .min_by_key(|n| n.remaining)
    }
}
