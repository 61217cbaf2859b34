//! The layer's configuration, shared by every service it builds, and the
//! asynchronous part of a check (store call, failure policy).

use crate::error::StoreError;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use http::Response;
use http::request::Parts;

use super::deny_cache::DenyCache;
use super::headers::{HeaderStyle, Policy};
use super::policy::MissingKey;
use crate::decision::Decision;
use crate::key::KeyExtractor;
use crate::limiter::RateLimiter;

pub(crate) type CostFn = dyn Fn(&Parts) -> u64 + Send + Sync;
pub(crate) type BypassFn = dyn Fn(&Parts) -> bool + Send + Sync;
pub(crate) type DenyFn = dyn Fn(&Parts, &Decision) -> Response<Bytes> + Send + Sync;

#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) limiter: RateLimiter,
    pub(crate) extractor: Arc<dyn KeyExtractor>,
    pub(crate) style: HeaderStyle,
    pub(crate) failure: Failure,
    pub(crate) cost: Option<Arc<CostFn>>,
    pub(crate) bypass: Option<Arc<BypassFn>>,
    pub(crate) missing: MissingKey,
    pub(crate) deny: Option<Arc<DenyFn>>,
    pub(crate) deny_cache: Option<Arc<DenyCache>>,
    /// Whether the middleware answers in gRPC form: `None` decides per
    /// request (HTTP/2 with a gRPC content type).
    pub(crate) grpc: Option<bool>,
    /// `RateLimit-Policy` and what `RateLimit` needs of the quotas.
    pub(crate) policy: Arc<Policy>,
    pub(crate) counters: Arc<Counters>,
}

/// The failure policy, resolved against the limiter.
#[derive(Clone, Debug)]
pub(crate) enum Failure {
    Open,
    Closed,
    Fallback(RateLimiter),
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) denied: AtomicU64,
    pub(crate) deny_cache_hits: AtomicU64,
    pub(crate) store_errors: AtomicU64,
    pub(crate) fallback_decisions: AtomicU64,
    /// When the last store-failure warning was logged (ms since `WARN_EPOCH`, plus one).
    last_warning_ms: AtomicU64,
    /// Store failures not logged since the last warning.
    unlogged_failures: AtomicU64,
    /// Whether a request without a key has been logged (once per layer).
    missing_key_logged: AtomicBool,
}

/// The time base of the warning throttle.
static WARN_EPOCH: std::sync::LazyLock<std::time::Instant> =
    std::sync::LazyLock::new(std::time::Instant::now);

/// At most one store-failure warning per this interval and layer: an outage
/// must not flood the log with one line per request.
const WARN_INTERVAL_MS: u64 = 1_000;

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether this is the layer's first request without a key (logged, once).
    pub(crate) fn first_missing_key(&self) -> bool {
        !self.missing_key_logged.swap(true, Ordering::Relaxed)
    }

    /// Whether to log this store failure now; if so, how many went unlogged before it.
    pub(crate) fn failure_to_log(&self) -> Option<u64> {
        let now = WARN_EPOCH.elapsed().as_millis() as u64 + 1;
        let last = self.last_warning_ms.load(Ordering::Relaxed);
        if (last == 0 || now.saturating_sub(last) >= WARN_INTERVAL_MS)
            && self
                .last_warning_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.unlogged_failures.swap(0, Ordering::Relaxed));
        }
        self.unlogged_failures.fetch_add(1, Ordering::Relaxed);
        None
    }
}

/// The result of the asynchronous part of a check.
pub(crate) enum Verdict {
    /// A decision, and the limiter that made it (to release its lease).
    Decided(Decision, RateLimiter),
    /// The store failed (the error); the fallback store decided.
    Fallback(Decision, RateLimiter, Arc<StoreError>),
    /// The store failed (the error); let the request through.
    Open(Arc<StoreError>),
    /// The store failed; answer 503.
    Closed,
}

impl Config {
    /// Checks `key` with the store (bounded by the store's own timeout),
    /// applying the failure policy; remembers denials in the deny cache.
    pub(crate) async fn decide(self: Arc<Self>, key: Vec<u8>, cost: u64) -> Verdict {
        // Read before the call: a cached denial then ends no later than the store's.
        let started = self.deny_cache.as_ref().map(|c| c.now(&self.limiter));
        // The store's future is large (kilobytes): built in place on the heap,
        // it is never copied; this future stays small.
        let check = boxed_in_place(|| self.limiter.check_n(&key, cost));
        match check.await {
            Ok(decision) => {
                self.remember(&self.limiter, &key, cost, started, &decision);
                Verdict::Decided(decision, self.limiter.clone())
            }
            Err(error) => {
                let error = Arc::new(error);
                let _error = &error;
                Counters::bump(&self.counters.store_errors);
                // `suppressed`: failures since the previous warning, not logged one by one
                let log = self.counters.failure_to_log();
                match &self.failure {
                    Failure::Open => {
                        if let Some(_suppressed) = log {
                            event!(warn, error = %_error, suppressed = _suppressed, "rate limit store failed; request allowed (FailurePolicy::Open)");
                        }
                        Verdict::Open(error)
                    }
                    Failure::Closed => {
                        if let Some(_suppressed) = log {
                            event!(warn, error = %_error, suppressed = _suppressed, "rate limit store failed; request refused with 503 (FailurePolicy::Closed)");
                        }
                        Verdict::Closed
                    }
                    Failure::Fallback(fallback) => {
                        if let Some(_suppressed) = log {
                            event!(warn, error = %_error, suppressed = _suppressed, "rate limit store failed; deciding in memory (FailurePolicy::Fallback)");
                        }
                        Counters::bump(&self.counters.fallback_decisions);
                        match boxed_in_place(|| fallback.check_n(&key, cost)).await {
                            Ok(decision) => {
                                self.remember(fallback, &key, cost, started, &decision);
                                Verdict::Fallback(decision, fallback.clone(), error)
                            }
                            // The memory store does not fail; if it ever did, fail open.
                            Err(_) => Verdict::Open(error),
                        }
                    }
                }
            }
        }
    }

    fn remember(
        &self,
        limiter: &RateLimiter,
        key: &[u8],
        cost: u64,
        started: Option<u64>,
        decision: &Decision,
    ) {
        if decision.allowed {
            return;
        }
        Counters::bump(&self.counters.denied);
        event!(
            debug,
            quota = %decision.quota,
            retry_after = ?decision.retry_after,
            "rate limited"
        );
        if let (Some(cache), Some(now)) = (&self.deny_cache, started) {
            cache.insert(limiter, key, cost, now, decision);
        }
    }
}

/// `Box::pin(make())`, but with the box allocated first so that the value
/// (a future of several kilobytes) is written straight into it instead of
/// being built on the stack and copied.
#[inline(always)]
pub(crate) fn boxed_in_place<F, C>(make: C) -> Pin<Box<F>>
where
    C: FnOnce() -> F,
{
    let slot = Box::<F>::new_uninit();
    Box::into_pin(Box::write(slot, make()))
}
