//! [`Stats`]: what a layer counted, and the throttle of its store-failure
//! warnings.
//!
//! Every outcome the middleware counts is one field of [`Counters`] (bumped
//! where the outcome is decided, in `check.rs`), read as a [`Stats`]
//! snapshot. Labelled metrics (one counter per outcome, labelled with the
//! limiter's and the quota's names, never the user's key) belong here too.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::policy::LogThrottle;

/// A snapshot of a layer's counters (since it was built).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Requests denied by the store (not counting deny-cache answers).
    pub denied: u64,
    /// Requests denied from the local deny cache, without a store call.
    pub deny_cache_hits: u64,
    /// Store calls that failed or timed out.
    pub store_errors: u64,
    /// Of [`store_errors`](Self::store_errors), those the store refused for
    /// good ([`StoreError::Refused`](crate::error::StoreError::Refused): an
    /// ACL without a permission, a key of another type): a
    /// misconfiguration, decided by the layer's
    /// [`on_refusal`](crate::RateLimitLayer::on_refusal).
    pub refused: u64,
    /// Decisions made by the [`FailurePolicy::Fallback`](crate::middleware::FailurePolicy::Fallback) store.
    pub fallback_decisions: u64,
    /// Denials let through by shadow mode (the layer's or the plan's):
    /// requests that would have been denied.
    pub shadow_denied: u64,
    /// Settles of a reservation after the response (refunds, costs from the
    /// response) that failed: the reserved units stayed counted.
    pub settle_errors: u64,
}

impl Stats {
    pub(super) fn read(c: &Counters) -> Self {
        Self {
            denied: c.denied.load(Ordering::Relaxed),
            deny_cache_hits: c.deny_cache_hits.load(Ordering::Relaxed),
            store_errors: c.store_errors.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            fallback_decisions: c.fallback_decisions.load(Ordering::Relaxed),
            shadow_denied: c.shadow_denied.load(Ordering::Relaxed),
            settle_errors: c.settle_errors.load(Ordering::Relaxed),
        }
    }
}

/// The live counters of one layer, shared by every service it builds.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) denied: AtomicU64,
    pub(super) deny_cache_hits: AtomicU64,
    pub(super) store_errors: AtomicU64,
    pub(super) refused: AtomicU64,
    pub(super) fallback_decisions: AtomicU64,
    pub(super) shadow_denied: AtomicU64,
    pub(super) settle_errors: AtomicU64,
    /// The store-failure warnings (WARN, once a second).
    pub(super) failure_log: LogThrottle,
    /// The refusal errors (ERROR, once every 10 s).
    pub(super) refusal_log: LogThrottle,
    /// Whether a request without a key has been logged (once per layer).
    missing_key_logged: AtomicBool,
}

impl Counters {
    pub(super) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether this is the layer's first request without a key (logged, once).
    pub(super) fn first_missing_key(&self) -> bool {
        !self.missing_key_logged.swap(true, Ordering::Relaxed)
    }
}
