//! [`RedisStore`]: limiter state in one Redis server.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use deadpool_redis::{Pool, PoolError};
use redis::aio::MultiplexedConnection;
use redis::{ErrorKind, RedisError, ServerErrorKind};

use super::script::LimiterScript;
use super::{Call, Outcome, QuotaOutcome};
use crate::decision::Lease;
use crate::error::StoreError;
use crate::store::algo::Raw;

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
/// out may have been applied and is never replayed.
///
/// ```no_run
/// use tower_redis_ratelimit::RedisStore;
///
/// let pool = deadpool_redis::Config::from_url("redis://127.0.0.1/")
///     .create_pool(Some(deadpool_redis::Runtime::Tokio1))?;
/// let store = RedisStore::new(pool).timeout(std::time::Duration::from_millis(50));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    slots: Box<[Slot]>,
    next: AtomicUsize,
    timeout: Duration,
}

#[derive(Default)]
struct Slot {
    held: RwLock<Option<Arc<Held>>>,
    refill: tokio::sync::Mutex<()>,
}

/// A connection taken out of the pool for sharing.
struct Held {
    conn: MultiplexedConnection,
    object: std::sync::Mutex<Option<deadpool_redis::Connection>>,
    broken: AtomicBool,
}

impl Drop for Held {
    fn drop(&mut self) {
        let object = self.object.get_mut().map(Option::take).unwrap_or(None);
        if let Some(obj) = object {
            if self.broken.load(Ordering::Relaxed) {
                // Do not hand a broken connection back to the pool.
                drop(deadpool_redis::Connection::take(obj));
            }
        }
    }
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("pool", &self.inner.pool.status())
            .field("connections", &self.inner.slots.len())
            .field("timeout", &self.inner.timeout)
            .finish()
    }
}

impl RedisStore {
    /// Default bound on one store call: a hung Redis never stalls a request longer.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);

    /// A store over `pool`, with one shared connection and the
    /// [`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT).
    pub fn new(pool: Pool) -> Self {
        Self::build(pool, 1, Self::DEFAULT_TIMEOUT)
    }

    fn build(pool: Pool, connections: usize, timeout: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                pool,
                slots: (0..connections.max(1)).map(|_| Slot::default()).collect(),
                next: AtomicUsize::new(0),
                timeout,
            }),
        }
    }

    /// Bounds every store call (taking a connection included). Default [`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT).
    #[must_use]
    pub fn timeout(self, timeout: Duration) -> Self {
        let connections = self.inner.slots.len();
        Self::build(self.inner.pool.clone(), connections, timeout)
    }

    /// How many pooled connections to multiplex calls over (default 1, at
    /// least 1). One connection pipelines hundreds of thousands of calls a
    /// second; more help only when Redis has spare cores for I/O threads.
    #[must_use]
    pub fn connections(self, connections: usize) -> Self {
        let timeout = self.inner.timeout;
        Self::build(self.inner.pool.clone(), connections, timeout)
    }

    /// The pool this store takes its connections from.
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    async fn bounded<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, StoreError>>,
    {
        match tokio::time::timeout(self.inner.timeout, f).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Timeout(self.inner.timeout)),
        }
    }

    /// A shared connection: a read lock and a clone on the hot path.
    async fn connection(&self) -> Result<Arc<Held>, StoreError> {
        let slots = &self.inner.slots;
        let slot = if slots.len() == 1 {
            &slots[0]
        } else {
            &slots[self.inner.next.fetch_add(1, Ordering::Relaxed) % slots.len()]
        };
        if let Some(h) = read(&slot.held) {
            return Ok(h);
        }
        // One task per slot refills it; the others wait for its result.
        let _refill = slot.refill.lock().await;
        if let Some(h) = read(&slot.held) {
            return Ok(h);
        }
        let obj = self.inner.pool.get().await.map_err(pool_error)?;
        let held = Arc::new(Held {
            conn: (*obj).clone(),
            object: std::sync::Mutex::new(Some(obj)),
            broken: AtomicBool::new(false),
        });
        *slot.held.write().unwrap_or_else(|e| e.into_inner()) = Some(held.clone());
        Ok(held)
    }

    /// Forgets a connection that failed, so the next call takes a fresh one.
    fn discard(&self, held: &Arc<Held>) {
        held.broken.store(true, Ordering::Relaxed);
        for slot in self.inner.slots.iter() {
            let mut guard = slot.held.write().unwrap_or_else(|e| e.into_inner());
            if guard.as_ref().is_some_and(|h| Arc::ptr_eq(h, held)) {
                *guard = None;
            }
        }
    }

    /// Runs `cmd` on a shared connection, replacing the connection if it broke.
    async fn query<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        script: Option<&LimiterScript>,
    ) -> Result<T, StoreError> {
        let held = self.connection().await?;
        let mut conn = held.conn.clone();
        let mut result = cmd.query_async::<T>(&mut conn).await;
        if let Err(e) = &result {
            if let (Some(script), ErrorKind::Server(ServerErrorKind::NoScript)) = (script, e.kind())
            {
                // Redis restarted or its scripts were flushed: nothing ran, so load and run again.
                redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(&script.source)
                    .query_async::<()>(&mut conn)
                    .await
                    .map_err(|e| self.failed(&held, e))?;
                result = cmd.query_async::<T>(&mut conn).await;
            }
        }
        result.map_err(|e| self.failed(&held, e))
    }

    fn failed(&self, held: &Arc<Held>, e: RedisError) -> StoreError {
        if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
            self.discard(held);
        }
        StoreError::Redis(e)
    }

    pub(crate) async fn decide(&self, call: Call<'_>) -> Result<Outcome, StoreError> {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(call.script.sha.as_str())
            .arg(call.keys.len())
            .arg(call.keys)
            .arg(call.now_us.unwrap_or(0))
            .arg(call.cost)
            .arg(call.nonce);
        for a in call.quota_args {
            cmd.arg(a.as_slice());
        }
        let reply: Vec<i64> = self.bounded(self.query(&cmd, Some(call.script))).await?;
        parse_reply(&reply, call.keys.len())
    }

    pub(crate) async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        let members: Vec<String> = lease.members().collect();
        let mut pipe = redis::pipe();
        for key in &lease.keys {
            pipe.cmd("ZREM").arg(key).arg(&members).ignore();
        }
        self.bounded(async {
            let held = self.connection().await?;
            let mut conn = held.conn.clone();
            pipe.query_async::<()>(&mut conn)
                .await
                .map_err(|e| self.failed(&held, e))
        })
        .await
    }

    pub(crate) async fn reset(&self, keys: &[String]) -> Result<(), StoreError> {
        let mut cmd = redis::cmd("DEL");
        cmd.arg(keys);
        self.bounded(self.query::<()>(&cmd, None)).await
    }
}

fn read(lock: &RwLock<Option<Arc<Held>>>) -> Option<Arc<Held>> {
    lock.read().unwrap_or_else(|e| e.into_inner()).clone()
}

fn pool_error(e: PoolError) -> StoreError {
    match e {
        PoolError::Backend(e) => StoreError::Redis(e),
        other => StoreError::Pool(other.to_string()),
    }
}

/// Turns the script's flat reply into an [`Outcome`].
pub(crate) fn parse_reply(reply: &[i64], quotas: usize) -> Result<Outcome, StoreError> {
    if reply.len() != 1 + 5 * quotas {
        return Err(StoreError::Protocol(format!(
            "expected {} integers from the limiter script, got {}",
            1 + 5 * quotas,
            reply.len()
        )));
    }
    let quotas = reply[1..]
        .chunks_exact(5)
        .map(|r| {
            QuotaOutcome::from(Raw {
                ok: r[0] == 1,
                remaining: r[1],
                reset: r[2],
                retry: r[3],
                delay: r[4],
            })
        })
        .collect();
    Ok(Outcome {
        allowed: reply[0] == 1,
        quotas,
    })
}
