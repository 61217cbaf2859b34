//! [`Store`]: where limiter state lives. The stores themselves are at the
//! crate root:
//!
//! - [`RedisStore`]: a single Redis over a `deadpool_redis::Pool`.
//! - `RedisClusterStore` (feature `cluster`): a Redis Cluster over a
//!   `deadpool_redis::cluster::Pool`.
//! - `RedisSentinelStore` (feature `sentinel`): the primary that Redis
//!   Sentinel names, over a `redis::sentinel::SentinelClient`.
//! - [`MemoryStore`]: in process; the embedded default and the fallback.
//!
//! Every store runs the same algorithms with the same integer-microsecond
//! arithmetic: the Redis scripts in `lua/` and their Rust twins give
//! identical decisions (checked by differential tests).
//!
//! A limiter binds its store once, at build: the store prepares what it needs
//! for those quotas (a Redis store: its script and the encoded quota
//! arguments). Each decision is then one call, the same for every store.

pub(crate) mod memory;
pub(crate) mod redis;

use std::sync::Arc;
use std::time::Duration;

pub(crate) use self::memory::MemoryStore;
pub(crate) use self::redis::RedisStore;
#[cfg(feature = "cluster")]
pub(crate) use self::redis::cluster::RedisClusterStore;
use self::redis::protocol;
#[cfg(feature = "sentinel")]
pub(crate) use self::redis::sentinel::RedisSentinelStore;
use crate::decision::Lease;
use crate::error::{ConfigError, StoreError};
use crate::quota::QuotaSpec;
use crate::strategy::state::Raw;

/// A backend a [`RateLimiter`](crate::RateLimiter) can keep its state in.
///
/// Implemented by [`RedisStore`], [`MemoryStore`], `RedisClusterStore`
/// (feature `cluster`) and `RedisSentinelStore` (feature `sentinel`);
/// sealed, so the crate can guarantee that every store shares the same
/// semantics.
pub trait Store: sealed::Sealed + Send + Sync + 'static {}

impl Store for RedisStore {}
impl Store for MemoryStore {}
#[cfg(feature = "cluster")]
impl Store for RedisClusterStore {}
#[cfg(feature = "sentinel")]
impl Store for RedisSentinelStore {}

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

#[cfg(feature = "sentinel")]
#[allow(private_interfaces)]
impl sealed::Sealed for RedisSentinelStore {
    fn into_backend(self) -> Backend {
        Backend::Sentinel(self)
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
    #[cfg(feature = "sentinel")]
    Sentinel(RedisSentinelStore),
    Memory(MemoryStore),
}

/// One decision to make: the quota keys of one user key. The same for every
/// store; what a store needs beyond it was prepared at [`bind`](Backend::bind).
pub(crate) struct Call<'a> {
    /// The hash-tagged part shared by all keys, `{prefix:key}`.
    pub(crate) base: &'a str,
    /// One storage key per quota.
    pub(crate) keys: &'a [String],
    /// The limiter's quotas, in the order of `keys`.
    pub(crate) quotas: &'a [QuotaSpec],
    pub(crate) cost: u64,
    /// Manual clock reading (any value, 0 included, up to
    /// [`ManualClock::MAX`](crate::clock::ManualClock::MAX)); `None`: the store's clock.
    pub(crate) now_us: Option<u64>,
    /// Unique id for sorted-set members (leases).
    pub(crate) nonce: &'a str,
    /// Blocking, as the limiter was built (see `lua/block.lua`): `keys`
    /// then ends with the block key.
    pub(crate) block_us: Option<u64>,
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

/// A memory algorithm's answer as an outcome (Redis replies parse straight
/// into outcomes, in `redis::protocol`).
impl From<Raw> for QuotaOutcome {
    fn from(r: Raw) -> Self {
        let us = |v: i64| {
            // (most values are below a second: no division then)
            let v = v.max(0) as u64;
            if v < 1_000_000 {
                Duration::new(0, v as u32 * 1_000)
            } else {
                Duration::from_micros(v)
            }
        };
        QuotaOutcome {
            allowed: r.ok,
            remaining: r.remaining.max(0) as u64,
            reset_after: us(r.reset),
            retry_after: (r.retry >= 0 && !r.ok).then(|| us(r.retry)),
            delay: if r.delay > 0 {
                us(r.delay)
            } else {
                Duration::ZERO
            },
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
            #[cfg(feature = "sentinel")]
            Backend::Sentinel(s) => s.inner.validate("RedisSentinelStore"),
            Backend::Memory(_) => Ok(()),
        }
    }

    /// Binds the store to one limiter's `quotas`, whose storage keys end in
    /// `suffixes`: what the store needs for every call of that limiter is
    /// prepared here, once.
    pub(crate) fn bind(
        self,
        quotas: &[QuotaSpec],
        prefix: &str,
        suffixes: &[String],
        block: Option<u64>,
        clock: &crate::clock::Clock,
    ) -> Bound {
        let redis = || Arc::new(protocol::Prepared::new(quotas, block));
        match self {
            Backend::Redis(s) => Bound::Redis(s, redis()),
            #[cfg(feature = "cluster")]
            Backend::Cluster(s) => Bound::Cluster(s, redis()),
            #[cfg(feature = "sentinel")]
            Backend::Sentinel(s) => Bound::Sentinel(s, redis()),
            Backend::Memory(s) => {
                let scopes = s.bind(prefix, suffixes, clock);
                Bound::Memory(s, scopes)
            }
        }
    }
}

/// A store bound to one limiter, with what it prepared for that limiter's
/// quotas (opaque to the limiter). Dispatched without boxing.
#[derive(Clone)]
pub(crate) enum Bound {
    Redis(RedisStore, Arc<protocol::Prepared>),
    #[cfg(feature = "cluster")]
    Cluster(RedisClusterStore, Arc<protocol::Prepared>),
    #[cfg(feature = "sentinel")]
    Sentinel(RedisSentinelStore, Arc<protocol::Prepared>),
    /// The store and the scope id of each quota's storage-key suffix.
    Memory(MemoryStore, memory::ScopeIds),
}

impl std::fmt::Debug for Bound {
    /// The store alone, as [`Backend`] shows it (the script is no news).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bound::Redis(s, _) => f.debug_tuple("Redis").field(s).finish(),
            #[cfg(feature = "cluster")]
            Bound::Cluster(s, _) => f.debug_tuple("Cluster").field(s).finish(),
            #[cfg(feature = "sentinel")]
            Bound::Sentinel(s, _) => f.debug_tuple("Sentinel").field(s).finish(),
            Bound::Memory(s, ..) => f.debug_tuple("Memory").field(s).finish(),
        }
    }
}

impl Bound {
    /// Decides `call`. The limiter calls a memory store with
    /// [`MemoryStore::decide`] instead, without storage-key strings; this is
    /// the same decision from the strings.
    pub(crate) async fn decide(&self, call: Call<'_>) -> Result<Outcome, StoreError> {
        match self {
            Bound::Redis(s, p) => protocol::decide(&s.inner, p, call).await,
            #[cfg(feature = "cluster")]
            Bound::Cluster(s, p) => protocol::decide(&s.inner, p, call).await,
            #[cfg(feature = "sentinel")]
            Bound::Sentinel(s, p) => protocol::decide(&s.inner, p, call).await,
            Bound::Memory(s, scopes) => {
                // `{<prefix>:<user>}`, the user key after the prefix
                let tag = call
                    .base
                    .strip_prefix('{')
                    .and_then(|b| b.strip_suffix('}'));
                let user = tag
                    .and_then(|t| t.get(t.find(':')? + 1..))
                    .unwrap_or_default();
                let mut raws = vec![Raw::deny(0, 0, -1); call.quotas.len()];
                let local = memory::LocalCall {
                    scopes,
                    user: user.as_bytes(),
                    quotas: call.quotas,
                    cost: call.cost,
                    now_us: call.now_us,
                    nonce: call.nonce,
                    block_us: call.block_us,
                };
                let allowed = s.decide(&local, &mut raws);
                Ok(Outcome {
                    allowed,
                    quotas: raws.into_iter().map(QuotaOutcome::from).collect(),
                })
            }
        }
    }

    pub(crate) async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        match self {
            Bound::Redis(s, _) => protocol::release(&s.inner, lease).await,
            #[cfg(feature = "cluster")]
            Bound::Cluster(s, _) => protocol::release(&s.inner, lease).await,
            #[cfg(feature = "sentinel")]
            Bound::Sentinel(s, _) => protocol::release(&s.inner, lease).await,
            Bound::Memory(s, scopes) => {
                s.release(lease, scopes);
                Ok(())
            }
        }
    }

    pub(crate) async fn reset(&self, base: &str, keys: &[String]) -> Result<(), StoreError> {
        match self {
            Bound::Redis(s, _) => protocol::reset(&s.inner, keys).await,
            #[cfg(feature = "cluster")]
            Bound::Cluster(s, _) => protocol::reset(&s.inner, keys).await,
            #[cfg(feature = "sentinel")]
            Bound::Sentinel(s, _) => protocol::reset(&s.inner, keys).await,
            Bound::Memory(s, scopes) => {
                s.reset(base, keys, scopes);
                Ok(())
            }
        }
    }
}

impl Bound {
    /// Checks that the store can run this limiter's scripts (a Redis store:
    /// its version, then `SCRIPT LOAD` of the decision scripts (a fast
    /// path's too) and of the reservation scripts `reserve`, if any); a
    /// memory store always can.
    pub(crate) async fn verify(
        &self,
        reserve: Option<&redis::reserve::Scripts>,
    ) -> Result<(), StoreError> {
        fn scripts<'a>(
            p: &'a protocol::Prepared,
            reserve: Option<&'a redis::reserve::Scripts>,
        ) -> Vec<&'a redis::script::LimiterScript> {
            let mut all: Vec<_> = p.scripts().collect();
            all.extend(reserve.iter().flat_map(|r| r.scripts()));
            all
        }
        match self {
            Bound::Redis(s, p) => protocol::verify(&s.inner, &scripts(p, reserve)).await,
            #[cfg(feature = "cluster")]
            Bound::Cluster(s, p) => protocol::verify(&s.inner, &scripts(p, reserve)).await,
            #[cfg(feature = "sentinel")]
            Bound::Sentinel(s, p) => protocol::verify(&s.inner, &scripts(p, reserve)).await,
            Bound::Memory(..) => Ok(()),
        }
    }
}

/// The store side of local reservations (`src/reserve.rs`): a take and a
/// give-back, each one atomic call on every store.
impl Bound {
    /// What a Redis store prepares for a reservation's calls (`None`: a
    /// memory store, which needs nothing).
    pub(crate) fn reserve_scripts(
        &self,
        quotas: &[QuotaSpec],
        block: Option<u64>,
    ) -> Option<Arc<redis::reserve::Scripts>> {
        match self {
            Bound::Memory(..) => None,
            _ => Some(Arc::new(redis::reserve::Scripts::new(quotas, block))),
        }
    }

    /// A reservation's take: the decision of `call` for the reserved units,
    /// and the time the store decided at. `user` is the user key as stored.
    pub(crate) async fn take(
        &self,
        scripts: Option<&redis::reserve::Scripts>,
        call: Call<'_>,
        user: &[u8],
    ) -> Result<(Outcome, i64), StoreError> {
        match (self, scripts) {
            (Bound::Redis(s, _), Some(x)) => redis::reserve::take(&s.inner, x, call).await,
            #[cfg(feature = "cluster")]
            (Bound::Cluster(s, _), Some(x)) => redis::reserve::take(&s.inner, x, call).await,
            #[cfg(feature = "sentinel")]
            (Bound::Sentinel(s, _), Some(x)) => redis::reserve::take(&s.inner, x, call).await,
            (Bound::Memory(s, scopes), _) => {
                let local = memory::LocalCall {
                    scopes,
                    user,
                    quotas: call.quotas,
                    cost: call.cost,
                    now_us: call.now_us,
                    nonce: call.nonce,
                    block_us: call.block_us,
                };
                let mut raws = vec![Raw::deny(0, 0, -1); call.quotas.len()];
                let (allowed, now) = s.take(&local, &mut raws);
                Ok((
                    Outcome {
                        allowed,
                        quotas: raws.into_iter().map(QuotaOutcome::from).collect(),
                    },
                    now,
                ))
            }
            _ => Err(StoreError::Protocol(
                "reservation scripts were not prepared".to_owned(),
            )),
        }
    }

    /// Gives back a reservation's unspent units (one atomic call).
    pub(crate) async fn give_back(
        &self,
        scripts: Option<&redis::reserve::Scripts>,
        quotas: &[QuotaSpec],
        gb: redis::reserve::GiveBackCall<'_>,
        user: &[u8],
    ) -> Result<(), StoreError> {
        match (self, scripts) {
            (Bound::Redis(s, _), Some(x)) => redis::reserve::give_back(&s.inner, x, &gb).await,
            #[cfg(feature = "cluster")]
            (Bound::Cluster(s, _), Some(x)) => redis::reserve::give_back(&s.inner, x, &gb).await,
            #[cfg(feature = "sentinel")]
            (Bound::Sentinel(s, _), Some(x)) => redis::reserve::give_back(&s.inner, x, &gb).await,
            (Bound::Memory(s, scopes), _) => {
                let local = memory::LocalCall {
                    scopes,
                    user,
                    quotas,
                    cost: gb.units,
                    now_us: gb.now_us,
                    nonce: "",
                    block_us: None,
                };
                s.give_back(&local, gb.at, gb.fins);
                Ok(())
            }
            _ => Err(StoreError::Protocol(
                "reservation scripts were not prepared".to_owned(),
            )),
        }
    }
}

/// Shared documents (a [`Plans`](crate::plans::Plans)' current limits): a
/// plain key on Redis (`GET`, `SET`), a map on the memory store. Never on a
/// decision's path: read at most once per sync interval.
impl Backend {
    pub(crate) async fn document(&self, key: &str) -> Result<Option<String>, StoreError> {
        let mut cmd = ::redis::cmd("GET");
        cmd.arg(key);
        match self {
            Backend::Redis(s) => s.inner.query(conn_request(&cmd), None, None).await,
            #[cfg(feature = "cluster")]
            Backend::Cluster(s) => s.inner.query(conn_request(&cmd), None, None).await,
            #[cfg(feature = "sentinel")]
            Backend::Sentinel(s) => s.inner.query(conn_request(&cmd), None, None).await,
            Backend::Memory(s) => Ok(s.document(key).map(|d| d.to_string())),
        }
    }

    /// Checks that the document `key` may be read and written (Redis: one
    /// script call that leaves it as it was; memory: always).
    pub(crate) async fn check_document(&self, key: &str) -> Result<(), StoreError> {
        match self {
            Backend::Redis(s) => protocol::check_document(&s.inner, key).await,
            #[cfg(feature = "cluster")]
            Backend::Cluster(s) => protocol::check_document(&s.inner, key).await,
            #[cfg(feature = "sentinel")]
            Backend::Sentinel(s) => protocol::check_document(&s.inner, key).await,
            Backend::Memory(_) => Ok(()),
        }
    }

    pub(crate) async fn set_document(&self, key: &str, text: &str) -> Result<(), StoreError> {
        let mut cmd = ::redis::cmd("SET");
        cmd.arg(key).arg(text);
        match self {
            Backend::Redis(s) => s.inner.query(conn_request(&cmd), None, None).await,
            #[cfg(feature = "cluster")]
            Backend::Cluster(s) => s.inner.query(conn_request(&cmd), None, None).await,
            #[cfg(feature = "sentinel")]
            Backend::Sentinel(s) => s.inner.query(conn_request(&cmd), None, None).await,
            Backend::Memory(s) => {
                s.set_document(key, text);
                Ok(())
            }
        }
    }
}

/// The store side of the admin calls and of settling: adjust and block,
/// each one atomic call on every store.
impl Bound {
    /// Adjusts every quota of a key as each strategy's adjust allows (see
    /// [`Adjustment`]). `keys`: the quotas' keys only.
    pub(crate) async fn adjust(
        &self,
        scripts: Option<&redis::reserve::Scripts>,
        quotas: &[QuotaSpec],
        keys: &[String],
        user: &[u8],
        adjustment: Adjustment<'_>,
        now_us: Option<u64>,
    ) -> Result<(), StoreError> {
        let keys = &keys[..quotas.len().min(keys.len())];
        match (self, scripts) {
            (Bound::Redis(s, _), Some(x)) => {
                redis::reserve::adjust(&s.inner, x, keys, adjustment, now_us).await
            }
            #[cfg(feature = "cluster")]
            (Bound::Cluster(s, _), Some(x)) => {
                redis::reserve::adjust(&s.inner, x, keys, adjustment, now_us).await
            }
            #[cfg(feature = "sentinel")]
            (Bound::Sentinel(s, _), Some(x)) => {
                redis::reserve::adjust(&s.inner, x, keys, adjustment, now_us).await
            }
            (Bound::Memory(s, scopes), _) => {
                s.adjust(&local_call(scopes, user, quotas, now_us), adjustment);
                Ok(())
            }
            _ => Err(StoreError::Protocol(
                "settle scripts were not prepared".to_owned(),
            )),
        }
    }

    /// Blocks a key for `us` µs from now (0: lifts the block). `block_key`:
    /// the key's last storage key (`{<prefix>:<key>}:!`).
    pub(crate) async fn set_block(
        &self,
        quotas: &[QuotaSpec],
        block_key: &str,
        user: &[u8],
        us: u64,
        now_us: Option<u64>,
    ) -> Result<(), StoreError> {
        match self {
            Bound::Redis(s, _) => redis::reserve::block(&s.inner, block_key, us, now_us).await,
            #[cfg(feature = "cluster")]
            Bound::Cluster(s, _) => redis::reserve::block(&s.inner, block_key, us, now_us).await,
            #[cfg(feature = "sentinel")]
            Bound::Sentinel(s, _) => redis::reserve::block(&s.inner, block_key, us, now_us).await,
            Bound::Memory(s, scopes) => {
                s.set_block(&local_call(scopes, user, quotas, now_us), us);
                Ok(())
            }
        }
    }
}

fn conn_request(cmd: &::redis::Cmd) -> redis::conn::Request<'_> {
    redis::conn::Request::Cmd(cmd)
}

/// What an adjust does to every quota of a key.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Adjustment<'a> {
    /// Charges (`> 0`, past the limit if need be) or gives back (`< 0`,
    /// never above the limit) these units.
    By(i64),
    /// Starts each quota afresh, charged `units[i]` (its capacity less the
    /// remaining asked for).
    Set(&'a [i64]),
}

/// A memory call on a key's quotas that decides nothing (adjust, block).
fn local_call<'a>(
    scopes: &'a [u32],
    user: &'a [u8],
    quotas: &'a [QuotaSpec],
    now_us: Option<u64>,
) -> memory::LocalCall<'a> {
    memory::LocalCall {
        scopes,
        user,
        quotas,
        cost: 0,
        now_us,
        nonce: "",
        block_us: None,
    }
}
