//! The stores under test: a [`Harness`] builds limiters on one store.

use std::future::Future;
#[cfg(feature = "cluster")]
use std::sync::Arc;

use redis::FromRedisValue;
use tower_redis_ratelimit::clock::Clock;
use tower_redis_ratelimit::limiter::RateLimiterBuilder;
use tower_redis_ratelimit::{MemoryStore, Quota, RateLimiter, RedisStore};

use crate::common::{GENEROUS, RedisServer};

/// The store under test.
pub(crate) trait Harness: Send + Sync {
    /// Which store, for messages.
    fn name(&self) -> &'static str;

    /// A new limiter over the store, as another app instance would build it
    /// (for Redis, with a pool of its own). All limiters of one harness share state.
    fn limiter(&self, prefix: &str, quotas: Vec<Quota>, clock: Clock) -> RateLimiter {
        self.builder(prefix)
            .quotas(quotas)
            .clock(clock)
            .build()
            .unwrap()
    }

    /// A builder over the store with `prefix`, as [`limiter`](Self::limiter)
    /// starts it (for options beyond quotas and clock).
    fn builder(&self, prefix: &str) -> RateLimiterBuilder;

    /// Runs a one-key command on the node holding the key; `None` when the
    /// store is not Redis.
    fn redis<T: FromRedisValue + Send>(
        &self,
        cmd: redis::Cmd,
    ) -> impl Future<Output = Option<T>> + Send;

    /// How many keys the store holds under `prefix` (found with `SCAN`, on
    /// every master of a cluster) or, for the memory store (one per test),
    /// how many keys it holds after a sweep.
    fn key_count(&self, prefix: &str) -> impl Future<Output = u64> + Send;
}

/// A private redis-server; every limiter gets its own pool of 4.
pub(crate) struct RedisHarness {
    pub(crate) server: RedisServer,
    conn: tokio::sync::OnceCell<redis::aio::MultiplexedConnection>,
}

impl RedisHarness {
    pub(crate) fn start() -> Self {
        Self {
            server: RedisServer::start(),
            conn: tokio::sync::OnceCell::new(),
        }
    }
}

impl Harness for RedisHarness {
    fn name(&self) -> &'static str {
        "RedisStore"
    }

    fn builder(&self, prefix: &str) -> RateLimiterBuilder {
        RateLimiter::builder()
            .store(RedisStore::new(self.server.pool(4)).timeout(GENEROUS))
            .prefix(prefix)
    }

    async fn redis<T: FromRedisValue + Send>(&self, cmd: redis::Cmd) -> Option<T> {
        let conn = self.conn.get_or_init(|| self.server.conn()).await;
        Some(cmd.query_async(&mut conn.clone()).await.unwrap())
    }

    async fn key_count(&self, prefix: &str) -> u64 {
        scan_count(&mut self.server.conn().await, prefix).await
    }
}

/// Keys matching `{prefix:*` on one node.
async fn scan_count(conn: &mut redis::aio::MultiplexedConnection, prefix: &str) -> u64 {
    let pattern = format!("{{{prefix}:*");
    let mut cursor: u64 = 0;
    let mut total = 0;
    loop {
        let (next, batch): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
            .unwrap();
        total += batch.len() as u64;
        if next == 0 {
            return total;
        }
        cursor = next;
    }
}

/// A 3-master Redis Cluster shared by the tests of one test binary that run
/// at the same time (starting one takes a second or two); every limiter gets
/// its own cluster pool. Suite tests use distinct prefixes, so they do not
/// see each other's keys. The cluster stops when the last harness holding it
/// is dropped.
#[cfg(feature = "cluster")]
pub(crate) struct ClusterHarness {
    pub(crate) cluster: Arc<crate::common::RedisCluster>,
    conn: tokio::sync::OnceCell<redis::cluster_async::ClusterConnection>,
}

#[cfg(feature = "cluster")]
impl ClusterHarness {
    pub(crate) fn start() -> Self {
        use std::sync::{Mutex, Weak};
        static SHARED: Mutex<Weak<crate::common::RedisCluster>> = Mutex::new(Weak::new());
        let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        let cluster = shared.upgrade().unwrap_or_else(|| {
            let cluster = Arc::new(crate::common::RedisCluster::start(3, 0));
            *shared = Arc::downgrade(&cluster);
            cluster
        });
        Self {
            cluster,
            conn: tokio::sync::OnceCell::new(),
        }
    }
}

#[cfg(feature = "cluster")]
impl Harness for ClusterHarness {
    fn name(&self) -> &'static str {
        "RedisClusterStore"
    }

    fn builder(&self, prefix: &str) -> RateLimiterBuilder {
        let pool = deadpool_redis::cluster::Config::from_urls(self.cluster.urls())
            .create_pool(Some(deadpool_redis::Runtime::Tokio1))
            .unwrap();
        RateLimiter::builder()
            .store(tower_redis_ratelimit::RedisClusterStore::new(pool).timeout(GENEROUS))
            .prefix(prefix)
    }

    async fn redis<T: FromRedisValue + Send>(&self, cmd: redis::Cmd) -> Option<T> {
        let conn = self.conn.get_or_init(|| self.cluster.conn()).await;
        Some(cmd.query_async(&mut conn.clone()).await.unwrap())
    }

    async fn key_count(&self, prefix: &str) -> u64 {
        let mut total = 0;
        for port in self.cluster.master_ports() {
            total += scan_count(&mut self.cluster.node(port).conn().await, prefix).await;
        }
        total
    }
}

/// One `MemoryStore` shared by every limiter (as one process's instances would).
pub(crate) struct MemoryHarness {
    pub(crate) store: MemoryStore,
}

impl MemoryHarness {
    pub(crate) fn new() -> Self {
        Self {
            store: MemoryStore::new(),
        }
    }
}

impl Harness for MemoryHarness {
    fn name(&self) -> &'static str {
        "MemoryStore"
    }

    fn builder(&self, prefix: &str) -> RateLimiterBuilder {
        RateLimiter::builder()
            .store(self.store.clone())
            .prefix(prefix)
    }

    async fn redis<T: FromRedisValue + Send>(&self, _cmd: redis::Cmd) -> Option<T> {
        None
    }

    async fn key_count(&self, _prefix: &str) -> u64 {
        self.store.sweep();
        self.store.len() as u64
    }
}
