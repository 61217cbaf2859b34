//! [`FailurePolicy`] and [`MissingKey`]: what happens when no decision can be made.

use std::fmt;
use std::sync::Arc;

use http::StatusCode;
use http::request::Parts;

use crate::key::{KeyExtractor, MissingCause};
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
pub struct MissingKey(pub(crate) MissingKeyKind);

#[derive(Clone)]
pub(crate) enum MissingKeyKind {
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
    pub(crate) fn fallback_extractor(&self) -> Option<&dyn KeyExtractor> {
        match &self.0 {
            MissingKeyKind::Fallback(extractor) => Some(extractor.as_ref()),
            _ => None,
        }
    }

    /// What to do for this request, which `extractor` found no key in.
    pub(crate) fn resolve(&self, parts: &Parts, extractor: &dyn KeyExtractor) -> Resolved {
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
pub(crate) enum Resolved {
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
