//! [`RedisClusterStore`]: limiter state in a Redis Cluster.

use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::cluster::Pool;
use redis::cluster_async::ClusterConnection;

use super::conn::{Connections, Pooled, pool_error};
use super::options::{self, Common, bad_url};
use crate::error::{ConfigError, StoreError};

/// A store in a Redis Cluster, reached through a `deadpool_redis::cluster::Pool`.
///
/// Every decision touches one hash slot: all keys of one user key share the
/// hash tag `{<prefix>:<key>}`, and a user key containing braces is hashed
/// first, so nobody can pin traffic to a chosen slot. Different user keys
/// spread over all primaries. The script is loaded on every primary when a
/// node answers `NOSCRIPT` (for instance a replica just promoted by a
/// failover). Semantics and guarantees are those of [`RedisStore`](crate::RedisStore).
///
/// ```no_run
/// use tower_redis_ratelimit::RedisClusterStore;
///
/// let store = RedisClusterStore::from_urls(["redis://127.0.0.1:7000/", "redis://127.0.0.1:7001/"])?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Or over a pool of your own, built with the re-exported `deadpool_redis`:
///
/// ```no_run
/// use tower_redis_ratelimit::{RedisClusterStore, deadpool_redis};
///
/// let urls = vec!["redis://127.0.0.1:7000/".to_owned(), "redis://127.0.0.1:7001/".to_owned()];
/// let pool = deadpool_redis::cluster::Config::from_urls(urls)
///     .create_pool(Some(deadpool_redis::Runtime::Tokio1))?;
/// let store = RedisClusterStore::new(pool);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
#[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
pub struct RedisClusterStore {
    pub(in crate::store) inner: Arc<Connections<Pool>>,
}

impl Pooled for Pool {
    type Conn = ClusterConnection;
    type Object = deadpool_redis::cluster::Connection;
    // A cluster connection's response timeout is set when its pool is built,
    // so each call gets a timer of its own.
    const SELF_TIMED: bool = false;
    // The cluster connection reconnects to a node whose socket was closed
    // by itself (tests/deployments/stale_connection.rs checks it); a `PING` would go to
    // a random node anyway.
    const CHECK_WHEN_IDLE: bool = false;
    const SLOTTED: bool = true;

    fn slot_of(key: &str) -> u16 {
        key_slot(key.as_bytes())
    }

    async fn get(&self, _timeout: Duration) -> Result<(Self::Object, Self::Conn), StoreError> {
        let object = Pool::get(self).await.map_err(pool_error)?;
        let conn: ClusterConnection = (*object).clone();
        Ok((object, conn))
    }

    fn discard(object: Self::Object) {
        drop(deadpool_redis::cluster::Connection::take(object));
    }

    fn max_size(&self) -> usize {
        self.status().max_size
    }
}

impl std::fmt::Debug for Connections<Pool> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisClusterStore")
            .field("pool", &self.pool.status())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl std::fmt::Debug for RedisClusterStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl RedisClusterStore {
    /// Default bound on one store call.
    pub const DEFAULT_TIMEOUT: Duration = Common::DEFAULT_TIMEOUT;

    /// A store over `pool` with the [`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT).
    pub fn new(pool: Pool) -> Self {
        Self {
            inner: Arc::new(Connections::new(pool, Common::DEFAULT)),
        }
    }

    /// A store over a new pool (deadpool's default size, Tokio runtime) for
    /// the cluster reached through the seed nodes `urls`, e.g.
    /// `["redis://10.0.0.1:7000/", "redis://10.0.0.2:7000/"]`. Nothing
    /// connects until the first call.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] for the field `store.urls` if there is no URL or
    /// one does not parse.
    pub fn from_urls<I>(urls: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let urls = options::urls(urls, "seed node", "redis://127.0.0.1:7000/")?;
        deadpool_redis::cluster::Config::from_urls(urls)
            .create_pool(Some(deadpool_redis::Runtime::Tokio1))
            .map(Self::new)
            .map_err(|e| {
                let expected = "redis://[[user]:password@]host[:port] for each seed node";
                bad_url("store.urls", "usable Redis Cluster URLs", e, Some(expected))
            })
    }

    /// Bounds every store call, taking a connection included. Default
    /// [`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT). A call that times out
    /// drops its connection (the next call takes a fresh one from the pool).
    /// Zero is rejected by [`build`](crate::limiter::RateLimiterBuilder::build)
    /// (`store.timeout`).
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

    /// The pool this store takes its connection from.
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }
}

/// The hash slot of `key`, as Redis Cluster computes it: CRC16 (XMODEM) of
/// its hash tag (the text between the first `{` and the next `}`, if not
/// empty), else of the whole key, modulo 16384.
fn key_slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(tagged) % 16384
}

#[cfg(test)]
mod tests {
    use redis::cluster_routing::{Route, SlotAddr};

    /// The slot of a key is the one redis-rs routes it to.
    #[test]
    fn key_slots_are_redis_clusters() {
        let keys = [
            "",
            "a",
            "{",
            "}",
            "{}",
            "{}x",
            "a{b}c",
            "{user1000}.following",
            "foo{}{bar}",
            "foo{{bar}}zap",
            "foo{bar}{zap}",
            "{api:k_0000000000000000000042}:fw",
            "\u{e9}t\u{e9}",
        ];
        let many = (0..2000).map(|i| format!("{{rl:k{i}}}:q"));
        for key in keys.iter().map(|k| k.to_string()).chain(many) {
            assert_eq!(
                Route::new(super::key_slot(key.as_bytes()), SlotAddr::Master),
                Route::with_key(key.as_bytes(), SlotAddr::Master),
                "{key:?}"
            );
        }
    }
}
