//! [`Store`]: where limiter state lives. The stores themselves are at the
//! crate root:
//!
//! - [`RedisStore`]: a single Redis over a `deadpool_redis::Pool`.
//! - `RedisClusterStore` (feature `cluster`): a Redis Cluster over a
//!   `deadpool_redis::cluster::Pool`.
//! - [`MemoryStore`]: in process; the embedded default and the fallback.
//!
//! Every store runs the same algorithms with the same integer-microsecond
//! arithmetic: the Redis scripts in `lua/` and their Rust twins give
//! identical decisions (checked by differential tests).

#[cfg(feature = "cluster")]
pub(crate) mod cluster;
pub(crate) mod memory;
pub(crate) mod redis;
pub(crate) mod script;
mod shared;

use std::time::Duration;

#[cfg(feature = "cluster")]
pub(crate) use self::cluster::RedisClusterStore;
pub(crate) use self::memory::MemoryStore;
pub(crate) use self::redis::RedisStore;
use crate::decision::Lease;
use crate::error::{ConfigError, StoreError};
use crate::quota::QuotaSpec;
use crate::strategy::state::Raw;

/// A backend a [`RateLimiter`](crate::RateLimiter) can keep its state in.
///
/// Implemented by [`RedisStore`] and [`MemoryStore`]; sealed, so the crate can
/// guarantee that every store shares the same semantics.
pub trait Store: sealed::Sealed + Send + Sync + 'static {}

impl Store for RedisStore {}
impl Store for MemoryStore {}
#[cfg(feature = "cluster")]
impl Store for RedisClusterStore {}

#[allow(private_interfaces)]
pub(crate) mod sealed {
    /// Converts a public store into the internal dispatch enum.
    pub trait Sealed {
        #[doc(hidden)]
        fn into_backend(self) -> super::Backend;
    }
}

#[allow(private_interfaces)]
impl sealed::Sealed for RedisStore {
    fn into_backend(self) -> Backend {
        Backend::Redis(self)
    }
}

#[cfg(feature = "cluster")]
#[allow(private_interfaces)]
impl sealed::Sealed for RedisClusterStore {
    fn into_backend(self) -> Backend {
        Backend::Cluster(self)
    }
}

#[allow(private_interfaces)]
impl sealed::Sealed for MemoryStore {
    fn into_backend(self) -> Backend {
        Backend::Memory(self)
    }
}

/// The stores, dispatched without boxing.
#[derive(Debug, Clone)]
pub(crate) enum Backend {
    Redis(RedisStore),
    #[cfg(feature = "cluster")]
    Cluster(RedisClusterStore),
    Memory(MemoryStore),
}

/// One decision to make: the quota keys of one user key.
pub(crate) struct Call<'a> {
    /// The hash-tagged part shared by all keys, `{prefix:key}`.
    pub(crate) base: &'a str,
    /// One storage key per quota.
    pub(crate) keys: &'a [String],
    pub(crate) quotas: &'a [QuotaSpec],
    /// The limiter's script (Redis only).
    pub(crate) script: &'a script::LimiterScript,
    /// Pre-encoded script arguments of the quotas (Redis only).
    pub(crate) quota_args: &'a [Vec<u8>],
    pub(crate) cost: u64,
    /// Manual clock reading (any value, 0 included, up to
    /// [`ManualClock::MAX`](crate::clock::ManualClock::MAX)); `None`: the store's clock.
    pub(crate) now_us: Option<u64>,
    /// Unique id for sorted-set members (sliding log entries, leases).
    pub(crate) nonce: &'a str,
}

/// A store's answer: every quota's outcome, and whether all allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub(crate) allowed: bool,
    pub(crate) quotas: Vec<QuotaOutcome>,
}

/// One quota's outcome, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QuotaOutcome {
    pub(crate) allowed: bool,
    pub(crate) remaining: u64,
    pub(crate) reset_after: Duration,
    pub(crate) retry_after: Option<Duration>,
    pub(crate) delay: Duration,
}

impl From<Raw> for QuotaOutcome {
    fn from(r: Raw) -> Self {
        let us = |v: i64| Duration::from_micros(v.max(0) as u64);
        QuotaOutcome {
            allowed: r.ok,
            remaining: r.remaining.max(0) as u64,
            reset_after: us(r.reset),
            retry_after: (r.retry >= 0 && !r.ok).then(|| us(r.retry)),
            delay: us(r.delay),
        }
    }
}

impl Backend {
    /// Rejects a store configured so that every call would fail
    /// (a zero timeout, no connections, a pool of size 0).
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        match self {
            Backend::Redis(s) => s.inner.validate("RedisStore"),
            #[cfg(feature = "cluster")]
            Backend::Cluster(s) => s.inner.validate("RedisClusterStore"),
            Backend::Memory(_) => Ok(()),
        }
    }

    pub(crate) async fn decide(&self, call: Call<'_>) -> Result<Outcome, StoreError> {
        match self {
            Backend::Redis(s) => s.inner.decide(call).await,
            #[cfg(feature = "cluster")]
            Backend::Cluster(s) => s.inner.decide(call).await,
            Backend::Memory(s) => Ok(s.decide(call)),
        }
    }

    pub(crate) async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        match self {
            Backend::Redis(s) => s.inner.release(lease).await,
            #[cfg(feature = "cluster")]
            Backend::Cluster(s) => s.inner.release(lease).await,
            Backend::Memory(s) => {
                s.release(lease);
                Ok(())
            }
        }
    }

    pub(crate) async fn reset(&self, base: &str, keys: &[String]) -> Result<(), StoreError> {
        match self {
            Backend::Redis(s) => s.inner.reset(keys).await,
            #[cfg(feature = "cluster")]
            Backend::Cluster(s) => s.inner.reset(keys).await,
            Backend::Memory(s) => {
                s.reset(base, keys);
                Ok(())
            }
        }
    }
}
