//! The closure types the layer's options store: what
//! [`RateLimitLayer`](crate::RateLimitLayer)'s `cost`, `bypass`,
//! `deny_response`, `refund_when` and [`ResponseCost`](super::ResponseCost)
//! keep behind an `Arc`. A leaf: it imports nothing of the middleware, so
//! the configuration and the settle options both depend on it and not on
//! each other. (The near-limit callback's type stays beside
//! [`NearLimit`](super::NearLimit), the value it is called with.)

use bytes::Bytes;
use http::Response;
use http::request::Parts;

use crate::decision::Decision;

/// A request's cost from its head ([`RateLimitLayer::cost`](crate::RateLimitLayer::cost),
/// [`ResponseCost::estimate`](super::ResponseCost::estimate)).
pub(super) type CostFn = dyn Fn(&Parts) -> u64 + Send + Sync;
/// Whether a request skips the limiter ([`RateLimitLayer::bypass`](crate::RateLimitLayer::bypass)).
pub(super) type BypassFn = dyn Fn(&Parts) -> bool + Send + Sync;
/// The response to a denied request ([`RateLimitLayer::deny_response`](crate::RateLimitLayer::deny_response)).
pub(super) type DenyFn = dyn Fn(&Parts, &Decision) -> Response<Bytes> + Send + Sync;
/// Whether a response is refunded ([`RateLimitLayer::refund_when`](crate::RateLimitLayer::refund_when)).
pub(super) type RefundFn = dyn Fn(&http::response::Parts) -> bool + Send + Sync;
/// A response's real cost from its extensions ([`ResponseCost::extension`](super::ResponseCost::extension)).
pub(super) type ExtensionCostFn = dyn Fn(&http::Extensions) -> Option<u64> + Send + Sync;
