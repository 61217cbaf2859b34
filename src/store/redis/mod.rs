//! The one home of the Redis protocol, for every connection kind.
//!
//! - [`RedisStore`] (here): one Redis server; `RedisClusterStore`
//!   ([`cluster`], feature `cluster`): a Redis Cluster; `RedisSentinelStore`
//!   (`sentinel`, feature `sentinel`): the primary that Redis Sentinel names.
//!   A connection kind is its store type and one `conn::Pooled`
//!   implementation; [`RedisConns`] holds any kind's connections, and runs
//!   every operation on them, for the store-agnostic layer above.
//! - [`options`]: what the three builders share (timeout, connections, the
//!   errors of URLs).
//! - [`conn`]: connection health, shared by all kinds: pooled multiplexed
//!   connections, time budgets, discarding broken or silent connections,
//!   reloading the script on `NOSCRIPT`.
//! - [`script`]: a limiter's script, assembled from the files in `lua/`
//!   (`lua/generated/` holds them as sent, checked by a test).
//! - [`protocol`]: what is sent (`KEYS`/`ARGV` of a decision, the commands of
//!   release and reset) and how the replies read, into the store's
//!   [`Outcome`](super::Outcome). It shares no types with the memory store.
//! - `reserve`: the take and give-back of local budgets, and the
//!   adjust and block of the admin calls; `document`: named text documents
//!   (`GET`, `SET`, an access check); `error`: which client errors are
//!   refusals for good.
//!
//! Per limiter, at build, a Redis store prepares its script and the encoded
//! quota arguments once ([`protocol::Prepared`]); every decision is then one
//! `EVALSHA`, with no per-call script building or quota encoding.

mod args;
mod batch;
#[cfg(feature = "cluster")]
pub(crate) mod cluster;
pub(crate) mod conn;
mod document;
mod error;
pub(crate) mod joint;
pub(crate) mod options;
pub(crate) mod protocol;
pub(crate) mod reserve;
pub(crate) mod script;
#[cfg(feature = "sentinel")]
pub(crate) mod sentinel;

use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::Pool;
use redis::aio::MultiplexedConnection;

use self::conn::{Connections, Pooled, pool_error};
use self::options::{Common, bad_url};
use crate::decision::Lease;
use crate::error::{ConfigError, StoreError};
use crate::store::call::{Adjustment, Call, GiveBackCall, JointCall, JointOutcome, Outcome};

/// A Redis store's connections, whichever their kind: what a limiter's
/// store calls go through. Each operation is written once here for every
/// kind (`each_kind!`), and runs the kind's own code (no boxing, no dynamic
/// dispatch beyond the one `match`).
#[derive(Clone)]
pub(crate) enum RedisConns {
    /// One server ([`RedisStore`]).
    Single(Arc<Connections<Pool>>),
    /// A Redis Cluster (`RedisClusterStore`).
    #[cfg(feature = "cluster")]
    Cluster(Arc<Connections<deadpool_redis::cluster::Pool>>),
    /// The primary that Redis Sentinel names (`RedisSentinelStore`).
    #[cfg(feature = "sentinel")]
    Sentinel(Arc<Connections<sentinel::Sentinels>>),
}

/// Runs `$body` with `$c` the connections of `$conns`, whatever their kind.
macro_rules! each_kind {
    ($conns:expr, $c:ident => $body:expr) => {
        match $conns {
            RedisConns::Single($c) => $body,
            #[cfg(feature = "cluster")]
            RedisConns::Cluster($c) => $body,
            #[cfg(feature = "sentinel")]
            RedisConns::Sentinel($c) => $body,
        }
    };
}

impl std::fmt::Debug for RedisConns {
    /// As the store: `Redis(RedisStore { … })`, `Cluster(…)`, `Sentinel(…)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RedisConns::Single(c) => f.debug_tuple("Redis").field(c).finish(),
            #[cfg(feature = "cluster")]
            RedisConns::Cluster(c) => f.debug_tuple("Cluster").field(c).finish(),
            #[cfg(feature = "sentinel")]
            RedisConns::Sentinel(c) => f.debug_tuple("Sentinel").field(c).finish(),
        }
    }
}

impl RedisConns {
    /// Rejects a store configured so that every call would fail (a zero
    /// timeout, no connections, a pool of size 0), naming its type.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        match self {
            RedisConns::Single(c) => c.validate("RedisStore"),
            #[cfg(feature = "cluster")]
            RedisConns::Cluster(c) => c.validate("RedisClusterStore"),
            #[cfg(feature = "sentinel")]
            RedisConns::Sentinel(c) => c.validate("RedisSentinelStore"),
        }
    }

    /// See [`protocol::decide`].
    pub(crate) async fn decide(
        &self,
        prepared: &protocol::Prepared,
        call: Call<'_>,
    ) -> Result<Outcome, StoreError> {
        each_kind!(self, c => protocol::decide(c, prepared, call).await)
    }

    /// The connections over which calls are multiplexed, if decisions are
    /// batched (the store's `batching`).
    pub(crate) fn batching(&self) -> Option<usize> {
        each_kind!(self, c => c.batching().then(|| c.connections()))
    }

    /// See [`protocol::release`].
    pub(crate) async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        each_kind!(self, c => protocol::release(c, lease).await)
    }

    /// See [`protocol::reset`].
    pub(crate) async fn reset(&self, keys: &[String]) -> Result<(), StoreError> {
        each_kind!(self, c => protocol::reset(c, keys).await)
    }

    /// See [`protocol::verify`].
    pub(crate) async fn verify(
        &self,
        scripts: &[&script::LimiterScript],
        time: bool,
    ) -> Result<(), StoreError> {
        each_kind!(self, c => protocol::verify(c, scripts, time).await)
    }

    /// See [`reserve::take`].
    pub(crate) async fn take(
        &self,
        scripts: &reserve::Scripts,
        call: Call<'_>,
    ) -> Result<(Outcome, i64), StoreError> {
        each_kind!(self, c => reserve::take(c, scripts, call).await)
    }

    /// See [`reserve::give_back`].
    pub(crate) async fn give_back(
        &self,
        scripts: &reserve::Scripts,
        gb: &GiveBackCall<'_>,
    ) -> Result<(), StoreError> {
        each_kind!(self, c => reserve::give_back(c, scripts, gb).await)
    }

    /// See [`reserve::adjust`].
    pub(crate) async fn adjust(
        &self,
        scripts: &reserve::Scripts,
        keys: &[String],
        adjustment: Adjustment<'_>,
        now_us: Option<u64>,
    ) -> Result<(), StoreError> {
        each_kind!(self, c => reserve::adjust(c, scripts, keys, adjustment, now_us).await)
    }

    /// See [`reserve::block`].
    pub(crate) async fn block(
        &self,
        block_key: &str,
        us: u64,
        now_us: Option<u64>,
    ) -> Result<(), StoreError> {
        each_kind!(self, c => reserve::block(c, block_key, us, now_us).await)
    }

    /// See [`joint::decide`].
    pub(crate) async fn joint(
        &self,
        parts: &[JointCall<'_>],
        mode: crate::store::JointMode,
    ) -> Result<(bool, Vec<JointOutcome>), StoreError> {
        each_kind!(self, c => joint::decide(c, parts, mode).await)
    }

    /// See [`joint::slot_of`].
    pub(crate) fn slot_of(&self, key: &str) -> Option<u16> {
        each_kind!(self, c => joint::slot_of(c, key))
    }

    /// Whether `other` holds the same connections (a clone of the same
    /// store value).
    pub(crate) fn same(&self, other: &RedisConns) -> bool {
        match (self, other) {
            (RedisConns::Single(a), RedisConns::Single(b)) => Arc::ptr_eq(a, b),
            #[cfg(feature = "cluster")]
            (RedisConns::Cluster(a), RedisConns::Cluster(b)) => Arc::ptr_eq(a, b),
            #[cfg(feature = "sentinel")]
            (RedisConns::Sentinel(a), RedisConns::Sentinel(b)) => Arc::ptr_eq(a, b),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// See [`document::get`].
    pub(crate) async fn document(&self, name: &str) -> Result<Option<String>, StoreError> {
        each_kind!(self, c => document::get(c, name).await)
    }

    /// See [`document::set`].
    pub(crate) async fn set_document(&self, name: &str, text: &str) -> Result<(), StoreError> {
        each_kind!(self, c => document::set(c, name, text).await)
    }

    /// See [`document::check`].
    pub(crate) async fn check_document(&self, name: &str) -> Result<(), StoreError> {
        each_kind!(self, c => document::check(c, name).await)
    }
}

/// A store in one Redis server, reached through a `deadpool_redis::Pool`.
///
/// Each decision is **one** `EVALSHA` round trip. Redis connections are
/// multiplexed: the store takes a few connections out of the pool once
/// (default 1), shares them between all concurrent calls, and goes back to
/// the pool only to replace a connection that broke. So the pool's per-checkout
/// `PING` never sits on the hot path. The script is loaded again only when
/// Redis answers `NOSCRIPT` (after a restart or `SCRIPT FLUSH`).
///
/// Every call is bounded by a [timeout](Self::timeout); a call that timed
/// out may have been applied and is never replayed. A concurrency lease
/// taken by a call whose decision never reached its caller (a timeout, or
/// the call's future dropped mid-call) is given back by a `ZREM` sent after
/// it on the same connection. A connection with no reply for a second is
/// checked with one `PING` before the next call, so one that Redis closed
/// while idle (its `timeout`, `CLIENT KILL`, a restart) is replaced before
/// the call is sent; under steady load no `PING` is sent.
///
/// ```no_run
/// use tower_redis_ratelimit::RedisStore;
///
/// let store = RedisStore::from_url("redis://127.0.0.1/")?
///     .timeout(std::time::Duration::from_millis(50));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Or over a pool of your own, built with the `deadpool_redis` this crate
/// re-exports (so its version always matches):
///
/// ```no_run
/// use tower_redis_ratelimit::{RedisStore, deadpool_redis};
///
/// let mut cfg = deadpool_redis::Config::from_url("redis://127.0.0.1/");
/// cfg.pool = Some(deadpool_redis::PoolConfig::new(8));
/// let pool = cfg.create_pool(Some(deadpool_redis::Runtime::Tokio1))?;
/// let store = RedisStore::new(pool);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct RedisStore {
    pub(in crate::store) inner: Arc<Connections<Pool>>,
}

impl Pooled for Pool {
    type Conn = MultiplexedConnection;
    type Object = deadpool_redis::Connection;
    const SELF_TIMED: bool = true;
    const CHECK_WHEN_IDLE: bool = true;

    async fn get(&self, timeout: Duration) -> Result<(Self::Object, Self::Conn), StoreError> {
        let object = Pool::get(self).await.map_err(pool_error)?;
        let mut conn: MultiplexedConnection = (*object).clone();
        // The connection's own response timeout bounds the hot path: no extra timer per call.
        conn.set_response_timeout(timeout);
        Ok((object, conn))
    }

    fn discard(object: Self::Object) {
        drop(deadpool_redis::Connection::take(object));
    }

    fn max_size(&self) -> usize {
        self.status().max_size
    }
}

impl std::fmt::Debug for Connections<Pool> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("pool", &self.pool.status())
            .field("connections", &self.connections())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl RedisStore {
    /// Default bound on one store call: a hung Redis never stalls a request longer.
    pub const DEFAULT_TIMEOUT: Duration = Common::DEFAULT_TIMEOUT;

    /// A store over `pool`, with one shared connection and the
    /// [`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT).
    pub fn new(pool: Pool) -> Self {
        Self {
            inner: Arc::new(Connections::new(pool, Common::DEFAULT)),
        }
    }

    /// A store over a new pool (deadpool's default size, Tokio runtime) for
    /// the Redis at `url`, e.g. `redis://127.0.0.1/`,
    /// `redis://:password@host:6380/2` or `rediss://host/` (TLS needs a
    /// TLS feature of `redis`). Nothing connects until the first call.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] for the field `store.url` if the URL does not parse.
    pub fn from_url(url: &str) -> Result<Self, ConfigError> {
        deadpool_redis::Config::from_url(url)
            .create_pool(Some(deadpool_redis::Runtime::Tokio1))
            .map(Self::new)
            .map_err(|e| {
                let expected = "redis://[[user]:password@]host[:port][/db]";
                bad_url("store.url", "a usable Redis URL", e, Some(expected))
            })
    }

    /// A store over a new pool for the `rediss://` URL `url` that trusts
    /// `certificates`: the root certificate of a private CA
    /// (`root_cert`, PEM) instead of the system's, and a client certificate
    /// for mutual TLS. `RedisStore::from_url("rediss://…")` trusts the
    /// system's roots.
    ///
    /// ```no_run
    /// use tower_redis_ratelimit::RedisStore;
    /// use tower_redis_ratelimit::redis::TlsCertificates;
    ///
    /// let ca = std::fs::read("/etc/redis/ca.crt")?;
    /// let store = RedisStore::from_url_with_tls(
    ///     "rediss://limiter:secret@redis.internal:6380/",
    ///     TlsCertificates { client_tls: None, root_cert: Some(ca) },
    /// )?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] for the field `store.url` if the URL does not
    /// parse; for `store.tls.root_cert`, `store.tls.client_cert` or
    /// `store.tls.client_key` if they are not PEM (a certificate, a key).
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn from_url_with_tls(
        url: &str,
        certificates: redis::TlsCertificates,
    ) -> Result<Self, ConfigError> {
        check_pem(&certificates)?;
        let client = redis::Client::build_with_tls(url, certificates).map_err(|e| {
            let expected = "rediss://[[user]:password@]host[:port][/db] and PEM certificates";
            let what = "a usable TLS Redis URL and certificates";
            bad_url("store.url", what, e, Some(expected))
        })?;
        let manager = deadpool_redis::Manager::new(client.get_connection_info().clone())
            .map_err(|e| bad_url("store.url", "a usable Redis URL", e, None))?;
        Pool::builder(manager)
            .runtime(deadpool_redis::Runtime::Tokio1)
            .build()
            .map(Self::new)
            .map_err(|e| ConfigError::new("store.url", format!("cannot build the pool ({e})")))
    }

    /// Bounds every store call, taking a connection included. Default
    /// [`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT). A call that times out
    /// drops its connection (a silent socket is replaced from the pool by the
    /// next call). Zero is rejected by
    /// [`build`](crate::limiter::RateLimiterBuilder::build) (`store.timeout`).
    #[must_use]
    pub fn timeout(self, timeout: Duration) -> Self {
        Self {
            inner: self.inner.with(|o| o.timeout = timeout),
        }
    }

    /// Whether concurrent decisions of one limiter go out together, several
    /// in one script call that decides each on its own (default on). A
    /// decision never waits for company: it is sent at once while few calls
    /// are in flight, and joins the next call only when it would otherwise
    /// queue behind them. Answers, keys and TTLs are the same either way;
    /// see the guide's [batching](crate::guide::stores) section.
    #[must_use]
    pub fn batching(self, on: bool) -> Self {
        Self {
            inner: self.inner.with(|o| o.batching = on),
        }
    }

    /// How many pooled connections to multiplex calls over (default 1, at
    /// most the pool's `max_size`; 0 is rejected by
    /// [`build`](crate::limiter::RateLimiterBuilder::build), `store.connections`).
    /// One connection pipelines a
    /// few hundred thousand calls a second; more help only when Redis has
    /// spare cores for I/O threads.
    #[must_use]
    pub fn connections(self, connections: usize) -> Self {
        // (at most the pool's max_size: see `Connections::with`)
        Self {
            inner: self.inner.with(|o| o.connections = connections),
        }
    }

    /// The pool this store takes its connections from.
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }
}

/// Refuses certificates that are not PEM (redis-rs would take them and
/// fail every connection with an unknown issuer).
#[cfg(feature = "tls")]
fn check_pem(certificates: &redis::TlsCertificates) -> Result<(), ConfigError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let certs = |field: &str, pem: &[u8]| {
        let parsed: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(pem).collect();
        match parsed {
            Ok(certs) if !certs.is_empty() => Ok(()),
            Ok(_) => Err(ConfigError::new(
                field,
                "no certificate in it (PEM expected: -----BEGIN CERTIFICATE-----)",
            )),
            Err(e) => Err(ConfigError::new(
                field,
                format!("not PEM certificates ({e})"),
            )),
        }
    };
    if let Some(root) = &certificates.root_cert {
        certs("store.tls.root_cert", root)?;
    }
    if let Some(client) = &certificates.client_tls {
        certs("store.tls.client_cert", &client.client_cert)?;
        PrivateKeyDer::from_pem_slice(&client.client_key).map_err(|e| {
            ConfigError::new(
                "store.tls.client_key",
                format!("not a PEM private key ({e})"),
            )
        })?;
    }
    Ok(())
}
