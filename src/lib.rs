//! Distributed rate limiting for tower, axum and tonic, backed by Redis.
//!
//! A [`RateLimiter`] holds one or more [`Quota`]s (a [`Strategy`](strategy::Strategy) at a
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
//! assert!(limiter.check("client-a").await?.allowed());
//! assert!(limiter.check("client-a").await?.allowed());
//! let third = limiter.check("client-a").await?;
//! assert!(!third.allowed());
//! assert!(third.retry_after().is_some());
//! # Ok(())
//! # }
//! ```
//!
//! # What it offers
//!
//! - **Correct under concurrency**: every decision is one atomic Lua script
//!   call (`EVALSHA`), timed by Redis's own clock in integer microseconds
//!   (or the caller's, [`Clock::Caller`](clock::Clock::Caller), where a
//!   server refuses `TIME` in scripts);
//!   several quotas are checked and consumed together, all or nothing.
//! - **Fast**: one Redis round trip per decision over shared multiplexed
//!   connections, and opt-in [local budgets](guide::middleware) for hot
//!   keys.
//! - **Honest headers**: IETF `RateLimit` / `RateLimit-Policy`, or
//!   GitHub-style `X-RateLimit-*`, and `Retry-After` rounded up on every 429.
//! - **Calm when Redis misbehaves**: every call is bounded by a timeout, and a
//!   [failure policy](guide::failure_modes) (allow, deny with 503, or decide
//!   locally) applies.
//! - **No leaks**: every key written has a TTL, no longer than its state
//!   matters.
//!
//! # The guide
//!
//! The [`guide`] explains the crate topic by topic:
//!
//! | chapter | what it covers |
//! |---|---|
//! | [Quick start](guide::quick_start) | dependencies, a first limiter, the examples, the Cargo features |
//! | [Strategies](guide::strategies) | fixed window, sliding log and counter, token and leaky bucket, GCRA, concurrency; which to choose |
//! | [Keys](guide::keys) | the key extractors, and the storage keys in Redis |
//! | [Middleware](guide::middleware) | axum, tonic, tower: headers, denials, missing keys, deny cache, near-limit warnings, shadow mode, metrics, hot keys |
//! | [Stores](guide::stores) | Redis, Cluster, Sentinel, TLS, ACL users, server versions, the memory store |
//! | [Failure modes](guide::failure_modes) | what a request gets when Redis is slow, down, full or refusing |
//! | [Plans](guide::plans) | plans (tiers), limits changed while running, limits from configuration |
//! | [Settling](guide::settle) | reserve then settle, refunds by response, the penalty box, the admin API |
//! | [Simulator](guide::simulator) | any strategy against traffic patterns, as a chart |
//! | [Behind Envoy](guide::envoy) | the workspace's rate limit service for Envoy: running it, its configuration, Envoy's side, token budgets reported after the response, bounds, operations |
//!
//! # Modules
//!
//! The types of the quick start are at the crate root; everything else has
//! one path, in the module of what it is: [`key`] (what a request is counted
//! under), [`middleware`] (the layer's service, options and outcomes),
//! [`limiter`] (the builder), [`plans`] (plans, and limits changed at run
//! time), [`settle`] (reservations, settling after the response, the penalty
//! box and the admin API), [`strategy`], [`decision`] (a decision's parts),
//! [`clock`], [`store`] (the trait the stores implement), [`error`] and
//! [`guide`] (no code: the chapters above).
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod clock;
pub mod decision;
mod digest;
pub mod error;
pub mod guide;
pub mod key;
pub mod limiter;
pub mod middleware;
pub mod plans;
mod quota;
mod rate;
pub mod settle;
pub mod store;
pub mod strategy;

// The quick start's types, public here only: each item has one public path
// (each is defined in a crate-visible module and shown here, inline).
#[doc(inline)]
pub use decision::answer::Decision;
#[doc(inline)]
pub use limiter::rate_limiter::RateLimiter;
#[doc(inline)]
pub use middleware::layer::RateLimitLayer;
#[doc(inline)]
pub use quota::Quota;
#[cfg(feature = "calendar")]
#[doc(inline)]
pub use quota::calendar::{Calendar, CalendarUnit};
#[doc(inline)]
pub use rate::Rate;
#[doc(inline)]
pub use store::memory::MemoryStore;
#[doc(inline)]
pub use store::redis::RedisStore;
#[cfg(feature = "cluster")]
#[doc(inline)]
pub use store::redis::cluster::RedisClusterStore;
#[cfg(feature = "sentinel")]
#[doc(inline)]
pub use store::redis::sentinel::RedisSentinelStore;

/// The `deadpool-redis` this crate is built with: build a
/// [`RedisStore`]'s pool with it (or use [`RedisStore::from_url`]) and
/// the versions always match.
pub use deadpool_redis;
/// The `redis` crate this crate is built with (error types, commands).
pub use redis;

// The README's code blocks are doctests of the test package (`tests/readme.rs`),
// whose dependencies they may use.

#[cfg(test)]
mod tests {
    /// The crate docs' list of modules names every public module.
    #[test]
    fn the_crate_docs_name_every_public_module() {
        let lib = include_str!("lib.rs");
        let docs: String = lib
            .lines()
            .filter_map(|l| l.strip_prefix("//!"))
            .collect::<Vec<_>>()
            .join("\n");
        let start = docs
            .find("in the module of what it is:")
            .expect("the crate docs' list of modules");
        let list = &docs[start..start + docs[start..].find("\n\n").unwrap_or(docs.len() - start)];
        let modules: Vec<&str> = lib
            .lines()
            .filter_map(|l| l.strip_prefix("pub mod ")?.strip_suffix(';'))
            .collect();
        assert!(modules.len() >= 10, "{modules:?}");
        for m in modules {
            assert!(
                list.contains(&format!("`{m}`")),
                "the crate docs' list of modules lacks `{m}`: {list}"
            );
        }
    }
}
