//! [`FailurePolicy`] and [`MissingKey`]: what happens when no decision can be made.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Instant;

use http::StatusCode;
use http::request::Parts;

use crate::error::StoreError;
use crate::key::{KeyExtractor, MissingCause};
use crate::limiter::RateLimiter;
use crate::plans::ActivePlan;
use crate::store::MemoryStore;

/// What the middleware does when the store fails: an error, or no answer
/// within the timeout
/// ([`on_store_error`](crate::RateLimitLayer::on_store_error), default
/// [`Open`](Self::Open)); and when the store refuses the limiter's calls
/// for good, a [`StoreError::Refused`] such as an ACL without a permission
/// ([`on_refusal`](crate::RateLimitLayer::on_refusal), default
/// [`Closed`](Self::Closed): a misconfiguration must not silently turn
/// the limits off; see the guide's [failure modes](crate::guide::failure_modes)).
///
/// ```
/// use tower_redis_ratelimit::MemoryStore;
/// use tower_redis_ratelimit::middleware::FailurePolicy;
///
/// let fail_open = FailurePolicy::Open; // the default
/// let fail_closed = FailurePolicy::Closed;
/// let decide_locally = FailurePolicy::Fallback(MemoryStore::new());
/// # let _ = (fail_open, fail_closed, decide_locally);
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Let the request through, without rate-limit headers, and log a
    /// warning (the default of `on_store_error`: an outage of Redis is not
    /// an outage of the API). Under `on_refusal`, logged at ERROR.
    #[default]
    Open,
    /// Answer `503 Service Unavailable` with `Retry-After: 1` (gRPC:
    /// `UNAVAILABLE`) without calling the service (the default of
    /// `on_refusal`).
    Closed,
    /// Decide with the same quotas in this in-process store (each instance
    /// then enforces the limits on its own).
    Fallback(MemoryStore),
}

/// A failure policy, resolved against the limiter.
#[derive(Clone, Debug)]
pub(super) enum Failure {
    Open,
    Closed,
    Fallback(Arc<Fallback>),
}

impl Failure {
    /// `policy` for `limiter`: a fallback store decides with its quotas.
    pub(super) fn resolve(policy: FailurePolicy, limiter: &RateLimiter) -> Self {
        match policy {
            FailurePolicy::Open => Failure::Open,
            FailurePolicy::Closed => Failure::Closed,
            FailurePolicy::Fallback(store) => Failure::Fallback(Arc::new(Fallback {
                limiter: limiter.with_store(store.clone()),
                store,
                plans: Mutex::default(),
            })),
        }
    }

    /// The policy's name, for the log.
    fn name(&self) -> &'static str {
        match self {
            Failure::Open => "FailurePolicy::Open",
            Failure::Closed => "FailurePolicy::Closed",
            Failure::Fallback(_) => "FailurePolicy::Fallback",
        }
    }
}

/// The most plans a [`Fallback`] keeps a limiter for.
const FALLBACK_PLANS: usize = 256;

/// A [`FailurePolicy::Fallback`]: the layer's limiter over the fallback
/// store, and each plan's, made on first need.
pub(super) struct Fallback {
    limiter: RateLimiter,
    store: MemoryStore,
    /// By plan name: the latest build's limiter, with its generation (at
    /// most [`FALLBACK_PLANS`]).
    plans: Mutex<HashMap<Box<str>, (u64, RateLimiter)>>,
}

impl Fallback {
    /// The limiter that decides a request of `plan` (the layer's without plans).
    pub(super) fn limiter_for(&self, plan: Option<&ActivePlan>) -> RateLimiter {
        let Some((plan, limiter)) = plan.and_then(|p| Some((p, p.limiter()?))) else {
            return self.limiter.clone();
        };
        let mut made = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        // one per plan: a plan's new build replaces its old fallback limiter
        if let Some(entry) = made.get_mut(plan.name()) {
            if entry.0 != plan.generation {
                *entry = (plan.generation, limiter.with_store(self.store.clone()));
            }
            return entry.1.clone();
        }
        // Plans renamed over and over would keep a limiter each: past the
        // bound, start again (their state is in the fallback store, which
        // a new limiter of the same plan finds).
        if made.len() >= FALLBACK_PLANS {
            made.clear();
        }
        let fallback = limiter.with_store(self.store.clone());
        made.insert(plan.name().into(), (plan.generation, fallback.clone()));
        fallback
    }
}

impl fmt::Debug for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fallback")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// Logs a failed store call under `failure`, at most once per interval of
/// its throttle: an outage at WARN (once a second per layer), a refusal at
/// ERROR (once every [`REFUSAL_LOG_INTERVAL_MS`] per layer), each line
/// with the number of failures not logged since the previous one.
pub(super) fn log_failure(
    failures: &LogThrottle,
    refusals: &LogThrottle,
    failure: &Failure,
    error: &StoreError,
    limiter: &str,
    plan: &str,
) {
    let _ = (failure.name(), error, limiter, plan);
    if matches!(error, StoreError::Refused(_)) {
        if let Some(_suppressed) = refusals.to_log(REFUSAL_LOG_INTERVAL_MS) {
            let _outcome = match failure {
                Failure::Open => "request allowed, NOT rate limited",
                Failure::Closed => "request refused with 503",
                Failure::Fallback(_) => "deciding in memory",
            };
            event!(
                error,
                error = %error,
                limiter,
                plan,
                suppressed = _suppressed,
                "rate limit store refused the limiter's call: a misconfiguration, not an outage \
                 (fix the ACL, command or key it names; verify() finds it at startup); {_outcome} \
                 (on_refusal: {})",
                failure.name()
            );
        }
        return;
    }
    if let Some(_suppressed) = failures.to_log(FAILURE_LOG_INTERVAL_MS) {
        match failure {
            Failure::Open => {
                event!(warn, error = %error, suppressed = _suppressed, "rate limit store failed; request allowed (FailurePolicy::Open)");
            }
            Failure::Closed => {
                event!(warn, error = %error, suppressed = _suppressed, "rate limit store failed; request refused with 503 (FailurePolicy::Closed)");
            }
            Failure::Fallback(_) => {
                event!(warn, error = %error, suppressed = _suppressed, "rate limit store failed; deciding in memory (FailurePolicy::Fallback)");
            }
        }
    }
}

/// At most one store-failure warning per this interval and layer: an outage
/// must not flood the log with one line per request.
const FAILURE_LOG_INTERVAL_MS: u64 = 1_000;

/// At most one refusal ERROR per this interval and layer: a refusal fails
/// every call alike, so one line every 10 s says it all without drowning
/// the log.
pub(super) const REFUSAL_LOG_INTERVAL_MS: u64 = 10_000;

/// The time base of every [`LogThrottle`].
static LOG_EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Lets one log line through per interval, counting those it holds back.
#[derive(Debug, Default)]
pub(super) struct LogThrottle {
    /// When the last line was logged (ms since `LOG_EPOCH`, plus one; 0: never).
    last_ms: AtomicU64,
    /// Lines held back since the last one logged.
    unlogged: AtomicU64,
}

impl LogThrottle {
    /// Whether to log now (`interval_ms` since the last line, or never
    /// logged); if so, how many were held back before it.
    pub(super) fn to_log(&self, interval_ms: u64) -> Option<u64> {
        let now = LOG_EPOCH.elapsed().as_millis() as u64 + 1;
        let last = self.last_ms.load(Ordering::Relaxed);
        if (last == 0 || now.saturating_sub(last) >= interval_ms)
            && self
                .last_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.unlogged.swap(0, Ordering::Relaxed));
        }
        self.unlogged.fetch_add(1, Ordering::Relaxed);
        None
    }
}

/// What the middleware does with a request whose key extractor found no key
/// (a request without its API key header, or [`PeerIp`](crate::key) on a
/// server started without connect info).
///
/// The default, [`MissingKey::by_cause`], rejects the request without
/// calling the service, with the status of whose mistake it is
/// ([`KeyExtractor::missing_cause`]) and a body naming the fix (from
/// [`KeyExtractor::missing_hint`]):
///
/// | [`MissingCause`] | e.g. | HTTP | gRPC |
/// |---|---|---|---|
/// | `Credential` | [`Header`](crate::key::Header) absent (an API key) | 401 | `UNAUTHENTICATED` (16) |
/// | `Request` | a closure's `None`, no route for `MatchedPath` | 400 | `INVALID_ARGUMENT` (3) |
/// | `Server` | no peer address for `PeerIp` / `ClientIp` | 500 | `INTERNAL` (13) |
///
/// A request the client could have sent with its key is the client's
/// mistake: a 4xx, so that no client can make the server answer 500 (and
/// page its operators) by leaving a header out. `401` where the key is a
/// credential, since the client must authenticate; `400` for anything else
/// it left out. Only a server that can give no request a key (a
/// misconfiguration) answers `500`, and (feature `tracing`) logs it at
/// ERROR once per layer: silently not limiting would hide it.
///
/// ```
/// use http::StatusCode;
/// use tower_redis_ratelimit::key;
/// use tower_redis_ratelimit::middleware::MissingKey;
///
/// let reject = MissingKey::reject(StatusCode::BAD_REQUEST);
/// let let_through = MissingKey::skip();
/// let share_one_key = MissingKey::fallback(key::Global);
/// # let _ = (reject, let_through, share_one_key);
/// ```
#[derive(Clone)]
pub struct MissingKey(pub(super) MissingKeyKind);

#[derive(Clone)]
pub(super) enum MissingKeyKind {
    ByCause,
    Reject(StatusCode),
    Skip,
    Fallback(Arc<dyn KeyExtractor>),
}

impl MissingKey {
    /// Answer with the status of the request's [`MissingCause`] (401, 400
    /// or 500; gRPC calls: `UNAUTHENTICATED`, `INVALID_ARGUMENT` or
    /// `INTERNAL`) without calling the service; the body says why the
    /// request has no key. The default.
    pub fn by_cause() -> Self {
        Self(MissingKeyKind::ByCause)
    }

    /// Answer with `status` whatever the cause (gRPC calls: the matching
    /// gRPC status: 400 `INVALID_ARGUMENT`, 401 `UNAUTHENTICATED`, 403
    /// `PERMISSION_DENIED`, 500 `INTERNAL`, others as gRPC's HTTP mapping)
    /// without calling the service; the body says why the request has no key.
    pub fn reject(status: StatusCode) -> Self {
        Self(MissingKeyKind::Reject(status))
    }

    /// Call the service without limiting the request (and without rate-limit headers).
    pub fn skip() -> Self {
        Self(MissingKeyKind::Skip)
    }

    /// Use `extractor`'s key instead; if it has none either, reject as
    /// [`by_cause`](Self::by_cause) with the graver of the two extractors'
    /// causes (a server misconfiguration of either is a 500).
    pub fn fallback(extractor: impl KeyExtractor) -> Self {
        Self(MissingKeyKind::Fallback(Arc::new(extractor)))
    }

    /// The extractor of [`MissingKey::fallback`], if that is the policy.
    pub(super) fn fallback_extractor(&self) -> Option<&dyn KeyExtractor> {
        match &self.0 {
            MissingKeyKind::Fallback(extractor) => Some(extractor.as_ref()),
            _ => None,
        }
    }

    /// What to do for this request, which `extractor` found no key in.
    pub(super) fn resolve(&self, parts: &Parts, extractor: &dyn KeyExtractor) -> Resolved {
        match &self.0 {
            MissingKeyKind::ByCause => Resolved::Reject(extractor.missing_cause(parts).status()),
            MissingKeyKind::Reject(status) => Resolved::Reject(*status),
            MissingKeyKind::Skip => Resolved::Skip,
            MissingKeyKind::Fallback(fallback) => match fallback.extract(parts) {
                Some(key) => Resolved::Key(key),
                None => {
                    let cause: MissingCause = extractor
                        .missing_cause(parts)
                        .max(fallback.missing_cause(parts));
                    Resolved::Reject(cause.status())
                }
            },
        }
    }
}

/// The outcome of [`MissingKey::resolve`].
pub(super) enum Resolved {
    Key(Vec<u8>),
    Skip,
    Reject(StatusCode),
}

impl Default for MissingKey {
    fn default() -> Self {
        Self::by_cause()
    }
}

impl fmt::Debug for MissingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            MissingKeyKind::ByCause => f.write_str("MissingKey::ByCause"),
            MissingKeyKind::Reject(s) => f.debug_tuple("MissingKey::Reject").field(s).finish(),
            MissingKeyKind::Skip => f.write_str("MissingKey::Skip"),
            MissingKeyKind::Fallback(_) => f.write_str("MissingKey::Fallback(..)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttle_lets_the_first_line_through_then_counts_what_it_holds_back() {
        let t = LogThrottle::default();
        assert_eq!(t.to_log(REFUSAL_LOG_INTERVAL_MS), Some(0));
        for _ in 0..5 {
            assert_eq!(t.to_log(REFUSAL_LOG_INTERVAL_MS), None);
        }
        // an interval of 0: every line goes, with the count held back before it
        assert_eq!(t.to_log(0), Some(5));
        assert_eq!(t.to_log(0), Some(0));
    }
}
