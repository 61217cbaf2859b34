//! [`RateLimit`]: the service that checks every request.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;

use super::check::{Precheck, precheck};
use super::config::Config;
use super::future::ResponseFuture;
use super::metrics::{self, OutcomeLabel};
use super::outcome::RateLimitOutcome;
use super::stats::Stats;
use crate::key::KeyExtractor;
use crate::limiter::RateLimiter;

/// Rate-limits the requests to `S`; built by [`RateLimitLayer`](crate::RateLimitLayer)
/// (or [`RateLimit::layer`], which returns one).
///
/// `poll_ready` only forwards to `S`: no rate-limit state lives in the
/// service, so axum's clone-per-request is harmless and every clone shares
/// one limiter. Denials are responses (`429`, or gRPC `RESOURCE_EXHAUSTED`);
/// the error type is `S::Error`.
pub struct RateLimit<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> RateLimit<S> {
    /// Wraps `inner` with the defaults of [`RateLimitLayer::new`](crate::RateLimitLayer::new).
    pub fn new(inner: S, limiter: RateLimiter, extractor: impl KeyExtractor) -> Self {
        Self::from_config(inner, Arc::new(Config::of_limiter(limiter, extractor)))
    }

    // `RateLimit::layer` is in layer.rs, with the builder it returns.

    pub(super) fn from_config(inner: S, config: Arc<Config>) -> Self {
        Self { inner, config }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The limiter this service checks with.
    pub fn limiter(&self) -> &RateLimiter {
        self.config.limits.limiter()
    }

    /// Counters shared by every service of the same layer.
    pub fn stats(&self) -> Stats {
        Stats::read(&self.config.counters)
    }
}

impl<S: Clone> Clone for RateLimit<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            config: self.config.clone(),
        }
    }
}

impl<S: fmt::Debug> fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("limiter", self.config.limits.limiter())
            .field("headers", &self.config.answers.style)
            .finish_non_exhaustive()
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    ResBody: http_body::Body,
{
    type Response = Response<super::ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let (mut parts, body) = request.into_parts();
        if self.config.takes_usage_reports() {
            // (on every path, so that a handler can always extract it)
            parts.extensions.insert(super::UsageReporter::default());
        }
        if self.config.bypasses(&parts) {
            parts.extensions.insert(RateLimitOutcome::Bypassed);
            metrics::decision(&self.config.name, "", "", OutcomeLabel::Bypassed);
            return ResponseFuture::passthrough(self.inner.call(Request::from_parts(parts, body)));
        }
        match precheck(&self.config, &parts) {
            Precheck::Skip => {
                parts.extensions.insert(RateLimitOutcome::Skipped);
                metrics::decision(&self.config.name, "", "", OutcomeLabel::Skipped);
                ResponseFuture::passthrough(self.inner.call(Request::from_parts(parts, body)))
            }
            Precheck::Unlimited(plan) => {
                metrics::decision(&self.config.name, &plan.label, "", OutcomeLabel::Unlimited);
                parts.extensions.insert(RateLimitOutcome::Unlimited);
                parts.extensions.insert(plan);
                ResponseFuture::passthrough(self.inner.call(Request::from_parts(parts, body)))
            }
            Precheck::Answer(response) => ResponseFuture::answered(response),
            Precheck::Decided(verdict) => {
                // Decided already (a memory store): no state to carry.
                ResponseFuture::decided(verdict, &mut self.inner, parts, body, &self.config)
            }
            Precheck::Store(deciding) => {
                // Hand the service that was driven to readiness to the future, keep a clone.
                let clone = self.inner.clone();
                let inner = std::mem::replace(&mut self.inner, clone);
                let request = Request::from_parts(parts, body);
                ResponseFuture::checking(deciding, inner, request, self.config.clone())
            }
        }
    }
}

/// A rate-limited gRPC service keeps its name, so it can be added to a tonic
/// server on its own: `Server::builder().add_service(RateLimit::new(svc, limiter, key::PeerIp))`.
#[cfg(feature = "tonic")]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
impl<S: tonic::server::NamedService> tonic::server::NamedService for RateLimit<S> {
    const NAME: &'static str = S::NAME;
}
