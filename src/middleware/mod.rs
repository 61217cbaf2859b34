//! The tower middleware: [`RateLimitLayer`](crate::RateLimitLayer) (the layer,
//! public at the crate root), its [`RateLimit`] service and [`ResponseFuture`],
//! and the options and outcomes they use.
//!
//! Every request is mapped to a key by a [`KeyExtractor`](crate::key::KeyExtractor),
//! checked against the layer's [`RateLimiter`](crate::RateLimiter), and then
//! either passed to the inner service or answered by the middleware:
//!
//! - **allowed**: the inner service is called (after the
//!   [`LeakyBucket`](crate::strategy::Strategy::LeakyBucket) `delay`, if any, waited in
//!   full; never in shadow mode), with a [`RateLimitOutcome`] (the [`Decision`](crate::Decision)
//!   inside) in the request extensions;
//! - **denied**: `429 Too Many Requests` with `Retry-After` (whole seconds,
//!   rounded up, never 0) and a short body that [`RateLimitLayer::deny_response`](crate::RateLimitLayer::deny_response)
//!   replaces; gRPC calls (HTTP/2 with `content-type: application/grpc*`, or
//!   every request of a layer set to [`grpc(true)`](crate::RateLimitLayer::grpc))
//!   get a trailers-only `RESOURCE_EXHAUSTED` instead. A request whose cost
//!   exceeds the capacity can never be admitted: `413 Content Too Large`
//!   without `Retry-After` (gRPC `INVALID_ARGUMENT`);
//! - **store failure**: the [`FailurePolicy`] decides (allow by default).
//!
//! Every request the inner service sees carries one [`RateLimitOutcome`]
//! (allowed with a decision, decided by the fallback store, bypassed, key
//! skipped, store unavailable): take the `Decision` from it ([`RateLimitOutcome::decision`]). With the `axum` feature,
//! `RateLimitOutcome`, `Decision` and `Option<Decision>` are extractors (a
//! required `Decision` answers 500 when no decision was made).
//!
//! Responses that went through the limiter, allowed or denied, carry the
//! rate-limit headers of the chosen [`HeaderStyle`]. The middleware keeps the
//! inner service's error type: its own answers are responses, never errors.
//!
//! ```
//! use std::convert::Infallible;
//!
//! use bytes::Bytes;
//! use http::{Request, Response, StatusCode};
//! use http_body_util::Full;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//! use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter, key};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limiter = RateLimiter::builder()
//!     .store(MemoryStore::new())
//!     .quota(Quota::fixed_window(Rate::per_minute(1)).name("minute"))
//!     .build()?;
//!
//! let mut svc = ServiceBuilder::new()
//!     .layer(RateLimitLayer::new(limiter, key::Global))
//!     .service_fn(|_req: Request<Full<Bytes>>| async {
//!         Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"hello"))))
//!     });
//!
//! let res = svc.ready().await?.call(Request::new(Full::default())).await?;
//! assert_eq!(res.status(), StatusCode::OK);
//! assert_eq!(res.headers()["ratelimit-policy"], r#""minute";q=1;w=60"#);
//! assert_eq!(res.headers()["ratelimit"], r#""minute";r=0;t=60"#);
//!
//! let res = svc.ready().await?.call(Request::new(Full::default())).await?;
//! assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(res.headers()["retry-after"], "60");
//! # Ok(())
//! # }
//! ```

/// Emits a `tracing` event when the `tracing` feature is on; nothing otherwise.
#[cfg(feature = "tracing")]
macro_rules! event {
    ($level:ident, $($arg:tt)+) => {
        ::tracing::$level!(target: "tower_redis_ratelimit", $($arg)+)
    };
}

/// Emits a `tracing` event when the `tracing` feature is on; nothing otherwise.
#[cfg(not(feature = "tracing"))]
macro_rules! event {
    ($level:ident, $($arg:tt)+) => {};
}

// One concern per module:
// - layer.rs: the builder (`RateLimitLayer`), options resolved once into
//   config.rs's `Config`, shared by every service of the layer; limits.rs:
//   what it checks against (`Limits`: one limiter, or plans, with the
//   header objects of their quotas); hooks.rs: the closure types the
//   options keep (a leaf: imports no middleware module);
// - service.rs: `RateLimit::call`: bypass? → check → future;
// - check.rs: one request's decision: key → deny cache (a `Precheck`) →
//   store call → failure policy → `Verdict` (plans: the quotas chosen per request there;
//   shadow mode: a "would have denied" verdict and outcome);
// - future.rs: `ResponseFuture`: verdict → (delay) → inner call → headers;
// - body.rs: `ResponseBody` and the lease released when it ends (and the
//   reservation settled then, see settle.rs);
// - settle.rs: refunds by response, costs from the response: the
//   reservation's `SettleGuard`, resolved at the response head (future.rs);
// - headers.rs, response.rs: what the answers carry; policy.rs:
//   `FailurePolicy`, `MissingKey`; outcome.rs: `RateLimitOutcome`;
//   stats.rs: counters (metrics: one labelled counter per outcome);
//   the deny cache (denials answered without a store call) is the
//   limiter's (`limiter/deny_cache.rs`), filled and read here.
mod body;
mod check;
mod config;
pub mod fields;
mod future;
mod headers;
mod hooks;
pub(crate) mod layer;
mod limits;
mod metrics;
mod near;
mod options;
mod outcome;
mod plan;
mod policy;
mod response;
mod service;
mod settle;
mod stats;

pub use self::body::ResponseBody;
pub use self::future::ResponseFuture;
pub use self::headers::HeaderStyle;
pub use self::near::NearLimit;
pub use self::options::{LayerOptions, OnStoreError};
pub use self::outcome::RateLimitOutcome;
pub use self::plan::{PlanFromExtension, PlanFromHeader, PlanResolver};
pub use self::policy::{FailurePolicy, MissingKey};
pub use self::response::{problem_json, text_plain};
pub use self::service::RateLimit;
pub use self::settle::{ResponseCost, UsageReporter};
pub use self::stats::Stats;
