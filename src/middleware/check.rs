//! The check of one request: key → deny cache → store call → failure policy
//! → [`Verdict`].
//!
//! [`check`] does what needs no waiting (find the key, weigh the request,
//! ask the deny cache) and either answers at once or returns the store call
//! as a future; [`decide`] is that call and what follows it. The service
//! ([`RateLimit::call`](crate::middleware::RateLimit)) then only asks whether the
//! request bypasses the limiter, checks it, and hands the result to its
//! [`ResponseFuture`](crate::ResponseFuture).
//!
//! Room for what comes next: a per-request choice of quotas (plans) is a
//! resolver consulted where [`check`] picks the limiter, still one store
//! call; a "would have denied" answer (shadow mode) is one more [`Verdict`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Response;
use http::request::Parts;

use super::config::Config;
use super::headers::RateHeaders;
use super::policy::{Failure, Resolved};
use super::response;
use super::stats::Counters;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::limiter::{RateLimiter, boxed_in_place};

/// What the check of a request found before any store call.
// (a decision inline: boxing it would cost the allocation this avoids)
#[allow(clippy::large_enum_variant)]
pub(crate) enum Check {
    /// No key, and [`MissingKey::skip`](crate::middleware::MissingKey::skip): the
    /// request goes on unlimited.
    Skip,
    /// The middleware's answer, without a store call: a request without a
    /// key rejected, or a denial from the deny cache.
    Answer(Response<Bytes>),
    /// The store decides: this gives the verdict.
    Store(Pending),
}

/// The store call of a [`Check::Store`], and the failure policy after it.
pub(crate) type CheckFuture = Pin<Box<dyn Future<Output = Verdict> + Send>>;

/// The verdict of a check: made already (a memory store decides at once),
/// or the store call that gives it.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Pending {
    Ready(Option<Verdict>),
    Store(CheckFuture),
}

impl Pending {
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Verdict> {
        match self {
            Pending::Ready(verdict) => match verdict.take() {
                Some(v) => Poll::Ready(v),
                None => panic!("ResponseFuture polled after completion"),
            },
            Pending::Store(future) => future.as_mut().poll(cx),
        }
    }
}

/// The result of the store call of a check.
pub(crate) enum Verdict {
    /// A decision of the layer's limiter.
    Decided(Decision),
    /// The store failed (the error); the fallback store decided.
    Fallback(Decision, RateLimiter, Arc<StoreError>),
    /// The store failed (the error); let the request through.
    Open(Arc<StoreError>),
    /// The store failed; answer 503.
    Closed,
}

/// Checks the request of `parts`: answers it at once where no store call is
/// needed, else starts the store call.
pub(crate) fn check(config: &Arc<Config>, parts: &Parts) -> Check {
    let key = match config.extractor.extract(parts) {
        Some(key) => key,
        None => match config.missing.resolve(parts) {
            Resolved::Key(key) => key,
            Resolved::Skip => return Check::Skip,
            Resolved::Reject(status) => {
                return Check::Answer(response::rejected(config, parts, status));
            }
        },
    };
    let cost = config.cost.as_ref().map_or(1, |cost| cost(parts));
    if let Some(cache) = &config.deny_cache
        && let Some(decision) = cache.lookup(&config.limiter, &key, cost)
    {
        Counters::bump(&config.counters.deny_cache_hits);
        event!(trace, quota = %decision.quota(), "rate limited (deny cache)");
        let headers = RateHeaders::new(config.style, &decision, &config.policy);
        return Check::Answer(response::denied(config, parts, &decision, headers));
    }
    // A memory store decides at once: no future, no store error.
    let started = config.deny_cache.as_ref().map(|c| c.now(&config.limiter));
    if let Some(decision) = config.limiter.decide_now(&key, cost) {
        remember(config, &config.limiter, &key, cost, started, &decision);
        return Check::Store(Pending::Ready(Some(Verdict::Decided(decision))));
    }
    Check::Store(Pending::Store(boxed_in_place(|| {
        decide(config.clone(), key, cost)
    })))
}

/// Checks `key` with the store (bounded by the store's own timeout),
/// applying the failure policy; remembers denials in the deny cache.
async fn decide(config: Arc<Config>, key: Vec<u8>, cost: u64) -> Verdict {
    // Read before the call: a cached denial then ends no later than the store's.
    let started = config.deny_cache.as_ref().map(|c| c.now(&config.limiter));
    // (`Check` is small: the store's own future, kilobytes, is on the heap)
    match config.limiter.check_n(&key, cost).await {
        Ok(decision) => {
            remember(&config, &config.limiter, &key, cost, started, &decision);
            Verdict::Decided(decision)
        }
        Err(error) => {
            let error = Arc::new(error);
            let _error = &error;
            Counters::bump(&config.counters.store_errors);
            // `suppressed`: failures since the previous warning, not logged one by one
            let log = config.counters.failure_to_log();
            match &config.failure {
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
                    Counters::bump(&config.counters.fallback_decisions);
                    match fallback.check_n(&key, cost).await {
                        Ok(decision) => {
                            remember(&config, fallback, &key, cost, started, &decision);
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

/// Counts a denial and keeps it in the deny cache.
fn remember(
    config: &Config,
    limiter: &RateLimiter,
    key: &[u8],
    cost: u64,
    started: Option<u64>,
    decision: &Decision,
) {
    if decision.allowed() {
        return;
    }
    Counters::bump(&config.counters.denied);
    event!(
        debug,
        quota = %decision.quota(),
        retry_after = ?decision.retry_after(),
        "rate limited"
    );
    if let (Some(cache), Some(now)) = (&config.deny_cache, started) {
        cache.insert(limiter, key, cost, now, decision);
    }
}
