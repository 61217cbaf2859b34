//! [`FailurePolicy`] and [`MissingKey`]: what happens when no decision can be made.

use std::fmt;
use std::sync::Arc;

use http::StatusCode;
use http::request::Parts;

use crate::key::KeyExtractor;
use crate::limiter::RateLimiter;
use crate::store::MemoryStore;

/// What the middleware does when the store fails: an error, or no answer
/// within the timeout.
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
    /// warning (the default: an outage of Redis is not an outage of the API).
    #[default]
    Open,
    /// Answer `503 Service Unavailable` with `Retry-After: 1` (gRPC:
    /// `UNAVAILABLE`) without calling the service.
    Closed,
    /// Decide with the same quotas in this in-process store (each instance
    /// then enforces the limits on its own).
    Fallback(MemoryStore),
}

/// The failure policy, resolved against the limiter.
#[derive(Clone, Debug)]
pub(crate) enum Failure {
    Open,
    Closed,
    Fallback(RateLimiter),
}

impl Failure {
    /// `policy` for `limiter`: a fallback store decides with its quotas.
    pub(crate) fn resolve(policy: FailurePolicy, limiter: &RateLimiter) -> Self {
        match policy {
            FailurePolicy::Open => Failure::Open,
            FailurePolicy::Closed => Failure::Closed,
            FailurePolicy::Fallback(store) => Failure::Fallback(limiter.with_store(store)),
        }
    }
}

/// What the middleware does with a request whose key extractor found no key
/// (e.g. [`PeerIp`](crate::key) on a server started without connect info).
///
/// The default rejects with `500 Internal Server Error`, a body naming the
/// fix (from [`KeyExtractor::missing_hint`]), and (feature `tracing`) one
/// ERROR log line per layer: silently not limiting would hide the
/// misconfiguration.
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
pub struct MissingKey(pub(crate) MissingKeyKind);

#[derive(Clone)]
pub(crate) enum MissingKeyKind {
    Reject(StatusCode),
    Skip,
    Fallback(Arc<dyn KeyExtractor>),
}

impl MissingKey {
    /// Answer with `status` (gRPC calls: the matching gRPC status) without
    /// calling the service; the body says why the request has no key.
    pub fn reject(status: StatusCode) -> Self {
        Self(MissingKeyKind::Reject(status))
    }

    /// Call the service without limiting the request (and without rate-limit headers).
    pub fn skip() -> Self {
        Self(MissingKeyKind::Skip)
    }

    /// Use `extractor`'s key instead; if it has none either, reject with 500.
    pub fn fallback(extractor: impl KeyExtractor) -> Self {
        Self(MissingKeyKind::Fallback(Arc::new(extractor)))
    }

    /// The extractor of [`MissingKey::fallback`], if that is the policy.
    pub(crate) fn fallback_extractor(&self) -> Option<&dyn KeyExtractor> {
        match &self.0 {
            MissingKeyKind::Fallback(extractor) => Some(extractor.as_ref()),
            _ => None,
        }
    }

    /// What to do for this request.
    pub(crate) fn resolve(&self, parts: &Parts) -> Resolved {
        match &self.0 {
            MissingKeyKind::Reject(status) => Resolved::Reject(*status),
            MissingKeyKind::Skip => Resolved::Skip,
            MissingKeyKind::Fallback(extractor) => match extractor.extract(parts) {
                Some(key) => Resolved::Key(key),
                None => Resolved::Reject(StatusCode::INTERNAL_SERVER_ERROR),
            },
        }
    }
}

/// The outcome of [`MissingKey::resolve`].
pub(crate) enum Resolved {
    Key(Vec<u8>),
    Skip,
    Reject(StatusCode),
}

impl Default for MissingKey {
    fn default() -> Self {
        Self::reject(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

impl fmt::Debug for MissingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            MissingKeyKind::Reject(s) => f.debug_tuple("MissingKey::Reject").field(s).finish(),
            MissingKeyKind::Skip => f.write_str("MissingKey::Skip"),
            MissingKeyKind::Fallback(_) => f.write_str("MissingKey::Fallback(..)"),
        }
    }
}
