//! Distributed rate limiting for tower, axum and tonic, backed by Redis.
//!
//! A [`RateLimiter`] holds one or more [`Quota`]s (a [`Strategy`] at a
//! [`Rate`]) and a store: [`RedisStore`] to share limits between every
//! replica of a service, or [`MemoryStore`] for a single process. Each
//! decision is one atomic Lua script call on Redis, timed by Redis's own
//! clock, checking every quota and consuming all or none.
//!
//! ```
//! use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimiter};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limiter = RateLimiter::builder()
//!     .store(MemoryStore::new())
//!     .quota(Quota::fixed_window(Rate::per_second(2)))
//!     .build()?;
//! assert!(limiter.check("client-a").await?.allowed);
//! assert!(limiter.check("client-a").await?.allowed);
//! let third = limiter.check("client-a").await?;
//! assert!(!third.allowed);
//! assert!(third.retry_after.is_some());
//! # Ok(())
//! # }
//! ```
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod clock;
mod decision;
mod digest;
mod error;
pub mod key;
mod limiter;
pub mod middleware;
mod quota;
mod rate;
mod store;
mod strategy;

pub use clock::{Clock, ManualClock};
pub use decision::{Decision, Lease, QuotaDecision};
pub use error::{ConfigError, ParseRateError, StoreError};
pub use limiter::{MAX_PREFIX_LEN, MAX_VERBATIM_KEY_LEN, RateLimiter, RateLimiterBuilder};
pub use middleware::{
    FailurePolicy, HeaderStyle, MissingKey, RateLimit, RateLimitLayer, RateLimitOutcome,
    ResponseBody, ResponseFuture, Stats, problem_json, text_plain,
};
pub use quota::{DEFAULT_LEASE_TIMEOUT, Quota};
pub use rate::Rate;
#[cfg(feature = "cluster")]
pub use store::RedisClusterStore;
pub use store::{MemoryStore, RedisStore, Store};
pub use strategy::{ParseStrategyError, Strategy};

/// The `deadpool-redis` this crate is built with: build a
/// [`RedisStore`]'s pool with it (or use [`RedisStore::from_url`]) and
/// the versions always match.
pub use deadpool_redis;
/// The `redis` crate this crate is built with (error types, commands).
pub use redis;

/// The README's code blocks, compiled (and, where they need no server, run)
/// as doctests, so the README cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
