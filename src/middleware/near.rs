//! [`NearLimit`]: a caller crossed a configured fraction of a quota.

use std::sync::Arc;

use http::request::Parts;

use crate::decision::{Decision, QuotaName};

pub(super) type NearLimitFn = dyn Fn(&Parts, &NearLimit) + Send + Sync;

/// What [`RateLimitLayer::near_limit`](crate::RateLimitLayer::near_limit)
/// and [`on_near_limit`](crate::RateLimitLayer::on_near_limit) set.
#[derive(Clone, Default)]
pub(super) struct NearLimitHook {
    /// The fraction flagged (`None`: nothing is flagged, the callback unused).
    pub(super) fraction: Option<f64>,
    pub(super) callback: Option<Arc<NearLimitFn>>,
}

/// An admitted request that took a quota across the layer's near-limit
/// fraction (say 80 % used): the moment to warn the caller before it meets
/// a 429, as GitHub and Stripe do.
///
/// Inserted into the request's extensions (and given to the callback of
/// [`RateLimitLayer::on_near_limit`](crate::RateLimitLayer::on_near_limit)) only by
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
    /// Whether a fraction is set (requests are then checked for a crossing).
    pub(super) fn is_on(&self) -> bool {
        self.fraction.is_some()
    }

    /// The quota this decision (of a request of `cost`) took across the
    /// threshold, if any.
    pub(super) fn crossed(&self, decision: &Decision, cost: u64) -> Option<NearLimit> {
        let fraction = self.fraction?;
        if cost == 0 || !decision.allowed() {
            return None;
        }
        decision
            .quotas()
            .filter_map(|q| {
                let limit = q.limit();
                let threshold = ((fraction * limit as f64).ceil() as u64).clamp(1, limit.max(1));
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

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use bytes::Bytes;
    use http::{Request, Response};
    use http_body_util::Full;
    use tower::{Service, ServiceBuilder, ServiceExt};

    use super::NearLimit;
    use crate::middleware::LayerOptions;
    use crate::{MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter, key};

    /// Sends `n` requests through `layer`; the number of them the inner
    /// service saw flagged.
    async fn flagged(layer: RateLimitLayer, n: usize) -> usize {
        let seen = Arc::new(AtomicUsize::new(0));
        let inner = seen.clone();
        let mut svc =
            ServiceBuilder::new()
                .layer(layer)
                .service_fn(move |req: Request<Full<Bytes>>| {
                    if req.extensions().get::<NearLimit>().is_some() {
                        inner.fetch_add(1, Ordering::Relaxed);
                    }
                    async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::new()))) }
                });
        for _ in 0..n {
            let svc = svc.ready().await.unwrap();
            svc.call(Request::new(Full::default())).await.unwrap();
        }
        seen.load(Ordering::Relaxed)
    }

    fn layer() -> RateLimitLayer {
        let limiter = RateLimiter::builder()
            .store(MemoryStore::new())
            .quota(Quota::fixed_window(Rate::per_minute(10)).name("minute"))
            .build()
            .unwrap();
        RateLimitLayer::new(limiter, key::Global)
    }

    #[tokio::test]
    async fn the_callback_is_called_whichever_is_set_first_and_options_keep_it() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counting = |calls: &Arc<AtomicUsize>| {
            let calls = calls.clone();
            move |_: &http::request::Parts, near: &NearLimit| {
                assert_eq!((near.limit, near.remaining, near.threshold), (10, 2, 8));
                calls.fetch_add(1, Ordering::Relaxed);
            }
        };
        // callback first, fraction after
        let first = layer().on_near_limit(counting(&calls)).near_limit(0.8);
        assert_eq!(flagged(first, 10).await, 1);
        assert_eq!(calls.load(Ordering::Relaxed), 1);
        // a fraction from options keeps the callback set in code
        let options = LayerOptions {
            near_limit: Some(0.8),
            ..LayerOptions::default()
        };
        let from_options = layer().on_near_limit(counting(&calls)).options(&options);
        assert_eq!(flagged(from_options, 10).await, 1);
        assert_eq!(calls.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn a_callback_without_a_fraction_flags_nothing() {
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = calls.clone();
        let layer = layer().on_near_limit(move |_: &http::request::Parts, _: &NearLimit| {
            seen.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(flagged(layer, 10).await, 0);
        assert_eq!(calls.load(Ordering::Relaxed), 0);
    }
}
