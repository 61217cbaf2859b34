//! [`RateLimitOutcome`]: what the middleware did with a request it passed on.

use std::sync::Arc;

use crate::decision::Decision;
use crate::error::StoreError;

/// What the rate limiter did with a request that reaches the inner service.
///
/// [`RateLimit`](crate::middleware::RateLimit) inserts exactly one `RateLimitOutcome`
/// into the extensions of every request it passes on, whatever happened:
/// handlers can always extract it. The [`Decision`], when one was made (the
/// [`Allowed`](Self::Allowed), [`Fallback`](Self::Fallback),
/// [`ShadowDenied`](Self::ShadowDenied) and [`ShadowDelayed`](Self::ShadowDelayed)
/// outcomes), is inside it: take it with
/// [`decision`](Self::decision). It is not a request extension of its own
/// (every extension is an allocation of every request), so
/// `axum::Extension<Decision>` finds nothing; with the `axum` feature,
/// `RateLimitOutcome`, `Decision` and `Option<Decision>` are extractors. A
/// handler taking `Decision` is answered **500** whenever no decision was
/// made (a store failure under [`FailurePolicy::Open`](crate::middleware::FailurePolicy::Open),
/// a [bypassed](crate::RateLimitLayer::bypass) request, a missing key under
/// [`MissingKey::skip`](crate::middleware::MissingKey::skip), an unlimited
/// plan); take `RateLimitOutcome` or `Option<Decision>` instead.
///
/// Denied requests never reach the inner service: a
/// [`deny_response`](crate::RateLimitLayer::deny_response) closure gets the
/// denying `Decision` itself.
///
/// The enum is `#[non_exhaustive]`: later versions may add outcomes, so
/// match with a wildcard arm, or use [`decision`](Self::decision) and
/// [`store_error`](Self::store_error).
///
/// ```
/// use std::net::SocketAddr;
///
/// use axum::extract::connect_info::MockConnectInfo;
/// use axum::routing::get;
/// use axum::Router;
/// use http::{Request, StatusCode};
/// use http_body_util::BodyExt;
/// use tower::ServiceExt;
/// use tower_redis_ratelimit::middleware::RateLimitOutcome;
/// use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter, key};
///
/// async fn hello(outcome: RateLimitOutcome) -> String {
///     match &outcome {
///         RateLimitOutcome::Bypassed => "not rate limited here".to_owned(),
///         RateLimitOutcome::StoreUnavailable { .. } => "limits are off for now".to_owned(),
///         other => match other.decision() {
///             Some(decision) => format!("{} requests left", decision.remaining()),
///             None => "not counted".to_owned(),
///         },
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = RateLimiter::builder()
///     .store(MemoryStore::new())
///     .quota(Quota::fixed_window(Rate::per_minute(10)))
///     .build()?;
/// let app = Router::new()
///     .route("/", get(hello))
///     .route("/health", get(hello))
///     .layer(
///         RateLimitLayer::new(limiter, key::PeerIp)
///             .bypass(|req: &http::request::Parts| req.uri.path() == "/health"),
///     )
///     // in a real server: `into_make_service_with_connect_info::<SocketAddr>()`
///     .layer(MockConnectInfo(SocketAddr::from(([192, 0, 2, 1], 4000))));
///
/// for (path, answer) in [("/", "9 requests left"), ("/health", "not rate limited here")] {
///     let res = app.clone().oneshot(Request::get(path).body(axum::body::Body::empty())?).await?;
///     assert_eq!(res.status(), StatusCode::OK);
///     assert_eq!(res.into_body().collect().await?.to_bytes(), answer);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum RateLimitOutcome {
    /// The limiter's store decided, and allowed the request.
    Allowed(Decision),
    /// The limiter's store failed and the
    /// [`FailurePolicy::Fallback`](crate::middleware::FailurePolicy::Fallback) store
    /// decided instead, and allowed the request.
    #[non_exhaustive]
    Fallback {
        /// The fallback store's decision.
        decision: Decision,
        /// Why the limiter's own store could not decide.
        error: Arc<StoreError>,
    },
    /// The request matched the layer's [`bypass`](crate::RateLimitLayer::bypass):
    /// no key, no store call.
    Bypassed,
    /// The key extractor found no key and
    /// [`MissingKey::skip`](crate::middleware::MissingKey::skip) let the request through
    /// unlimited.
    Skipped,
    /// The store failed (or timed out) and
    /// [`FailurePolicy::Open`](crate::middleware::FailurePolicy::Open) let the request
    /// through without a decision.
    #[non_exhaustive]
    StoreUnavailable {
        /// What went wrong.
        error: Arc<StoreError>,
    },
    /// Shadow mode (the layer's [`shadow`](crate::RateLimitLayer::shadow) or
    /// the plan's): the store **would have denied** the request (the
    /// decision says why; nothing was consumed, as for any denial), and it
    /// was let through. Also an allowed decision of a limiter with a
    /// [shadow quota](crate::Quota::shadow) that would have denied it: the
    /// enforced quotas were consumed, and the decision's
    /// [`quotas`](Decision::quotas) say which would have denied. Either way
    /// the decision's [`shadow_denied`](Decision::shadow_denied) is true.
    ShadowDenied(Decision),
    /// Shadow mode (the layer's or the plan's): the store admitted the
    /// request with a delay (a
    /// [`LeakyBucket`](crate::strategy::Strategy::LeakyBucket)'s slot in its
    /// queue) that shadow mode did not impose: the request went on at once.
    /// The decision's [`delay`](Decision::delay) (also
    /// [`would_have_delayed`](Self::would_have_delayed)) is the wait it
    /// would have had; its slot was taken, as every admitted request is
    /// counted. (A request shadow mode let through that would have been
    /// denied as well is [`ShadowDenied`](Self::ShadowDenied).)
    ShadowDelayed(Decision),
    /// The request's [plan](crate::plans::Plan::unlimited) has no limits: no
    /// store call.
    Unlimited,
}

impl RateLimitOutcome {
    /// The decision that let the request through, if one was made (by the
    /// limiter's store or the fallback store; under shadow mode, the denial
    /// that was let through).
    pub fn decision(&self) -> Option<&Decision> {
        match self {
            Self::Allowed(decision)
            | Self::Fallback { decision, .. }
            | Self::ShadowDenied(decision)
            | Self::ShadowDelayed(decision) => Some(decision),
            Self::Bypassed | Self::Skipped | Self::StoreUnavailable { .. } | Self::Unlimited => {
                None
            }
        }
    }

    /// Whether the store would have denied the request, had shadow mode not
    /// let it through (a [`ShadowDenied`](Self::ShadowDenied) outcome).
    pub fn would_have_denied(&self) -> bool {
        matches!(self, Self::ShadowDenied(_))
    }

    /// The wait shadow mode spared the request: the delay the store gave
    /// it, which an enforcing layer would have waited before calling the
    /// service (a [`ShadowDelayed`](Self::ShadowDelayed) outcome).
    pub fn would_have_delayed(&self) -> Option<std::time::Duration> {
        match self {
            Self::ShadowDelayed(decision) => decision.delay(),
            _ => None,
        }
    }

    /// The decision that let the request through, if one was made.
    pub fn into_decision(self) -> Option<Decision> {
        match self {
            Self::Allowed(decision)
            | Self::Fallback { decision, .. }
            | Self::ShadowDenied(decision)
            | Self::ShadowDelayed(decision) => Some(decision),
            Self::Bypassed | Self::Skipped | Self::StoreUnavailable { .. } | Self::Unlimited => {
                None
            }
        }
    }

    /// The limiter's store failure, if it failed for this request (under
    /// [`FailurePolicy::Open`](crate::middleware::FailurePolicy::Open) or
    /// [`Fallback`](crate::middleware::FailurePolicy::Fallback)).
    pub fn store_error(&self) -> Option<&StoreError> {
        match self {
            Self::Fallback { error, .. } | Self::StoreUnavailable { error } => Some(error),
            Self::Allowed(_)
            | Self::Bypassed
            | Self::Skipped
            | Self::ShadowDenied(_)
            | Self::ShadowDelayed(_)
            | Self::Unlimited => None,
        }
    }
}

/// The handler's [`RateLimitOutcome`]: answers **500** when the request did
/// not go through a [`RateLimitLayer`](crate::RateLimitLayer) (the layer is
/// missing from that route).
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
impl<S: Send + Sync> axum::extract::FromRequestParts<S> for RateLimitOutcome {
    type Rejection = (http::StatusCode, &'static str);

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<RateLimitOutcome>()
            .cloned()
            .ok_or((http::StatusCode::INTERNAL_SERVER_ERROR, NO_OUTCOME))
    }
}

/// `Option<RateLimitOutcome>`: `None` for a request that did not go through
/// a [`RateLimitLayer`](crate::RateLimitLayer).
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
impl<S: Send + Sync> axum::extract::OptionalFromRequestParts<S> for RateLimitOutcome {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<RateLimitOutcome>().cloned())
    }
}

/// The [`Decision`] that let the request through (the one inside its
/// [`RateLimitOutcome`]): answers **500** when no decision was made (a
/// bypassed or skipped request, a store failure under
/// [`FailurePolicy::Open`](crate::middleware::FailurePolicy::Open), an
/// unlimited plan) or the route has no [`RateLimitLayer`](crate::RateLimitLayer).
/// Take `Option<Decision>` or [`RateLimitOutcome`] where that can happen.
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Decision {
    type Rejection = (http::StatusCode, &'static str);

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        match parts.extensions.get::<RateLimitOutcome>() {
            Some(outcome) => outcome
                .decision()
                .cloned()
                .ok_or((http::StatusCode::INTERNAL_SERVER_ERROR, NO_DECISION)),
            None => Err((http::StatusCode::INTERNAL_SERVER_ERROR, NO_OUTCOME)),
        }
    }
}

/// `Option<Decision>`: `None` when no decision was made or the route has no
/// [`RateLimitLayer`](crate::RateLimitLayer).
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
impl<S: Send + Sync> axum::extract::OptionalFromRequestParts<S> for Decision {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<RateLimitOutcome>()
            .and_then(RateLimitOutcome::decision)
            .cloned())
    }
}

/// The 500's body when the outcome is missing.
#[cfg(feature = "axum")]
const NO_OUTCOME: &str = "no RateLimitOutcome in the request extensions: \
     is the route behind a RateLimitLayer?";

/// The 500's body when no decision was made.
#[cfg(feature = "axum")]
const NO_DECISION: &str = "no rate-limit Decision was made for this request \
     (bypassed, skipped, unlimited, or the store was unavailable): \
     extract Option<Decision> or RateLimitOutcome";
