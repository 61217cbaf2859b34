//! [`RedisStore`]: limiter state in one Redis server.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

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
        if let Some(obj) = object
            && self.broken.load(Ordering::Relaxed)
        {
            // Do not hand a broken connection back to the pool.
            drop(deadpool_redis::Connection::take(obj));
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

    /// Runs `f` within what is left of the call's time budget.
    async fn within<T, F>(&self, started: Instant, f: F) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, StoreError>>,
    {
        let left = self.inner.timeout.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, f).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Timeout(self.inner.timeout)),
        }
    }

    fn slot(&self) -> &Slot {
        let slots = &self.inner.slots;
        if slots.len() == 1 {
            &slots[0]
        } else {
            &slots[self.inner.next.fetch_add(1, Ordering::Relaxed) % slots.len()]
        }
    }

    /// Takes a connection out of the pool for `slot`, unless another task just did.
    async fn refill(&self, slot: &Slot) -> Result<Arc<Held>, StoreError> {
        // One task per slot refills it; the others wait for its result.
        let _refill = slot.refill.lock().await;
        if let Some(h) = read(&slot.held) {
            return Ok(h);
        }
        let obj = self.inner.pool.get().await.map_err(pool_error)?;
        let mut conn: MultiplexedConnection = (*obj).clone();
        // The connection's own response timeout bounds the hot path: no extra timer per call.
        conn.set_response_timeout(self.inner.timeout);
        let held = Arc::new(Held {
            conn,
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

    /// Runs `req` on a shared connection within the timeout, loading `script`
    /// on `NOSCRIPT` and replacing the connection if it broke.
    ///
    /// Hot path: a read lock, a clone, one round trip bounded by the
    /// connection's response timeout. Anything slower (taking a connection
    /// from the pool, reloading the script) runs within what is left of the budget.
    async fn query<T: redis::FromRedisValue>(
        &self,
        req: Request<'_>,
        script: Option<&LimiterScript>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let slot = self.slot();
        let (held, fresh) = match read(&slot.held) {
            Some(h) => (h, false),
            None => (self.within(started, self.refill(slot)).await?, true),
        };
        let mut conn = held.conn.clone();
        let result = if fresh {
            self.within(started, async { Ok(req.run::<T>(&mut conn).await) })
                .await?
        } else {
            req.run::<T>(&mut conn).await
        };
        match (result, script) {
            (Err(e), Some(script)) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                // Redis restarted or its scripts were flushed: nothing ran, so load and run again.
                self.within(started, async {
                    redis::cmd("SCRIPT")
                        .arg("LOAD")
                        .arg(&script.source)
                        .query_async::<()>(&mut conn)
                        .await
                        .map_err(|e| self.failed(&held, e))?;
                    req.run::<T>(&mut conn)
                        .await
                        .map_err(|e| self.failed(&held, e))
                })
                .await
            }
            (r, _) => r.map_err(|e| self.failed(&held, e)),
        }
    }

    fn failed(&self, held: &Arc<Held>, e: RedisError) -> StoreError {
        if e.is_timeout() {
            return StoreError::Timeout(self.inner.timeout);
        }
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
            .arg(call.cost);
        for a in call.quota_args {
            cmd.arg(a.as_slice());
        }
        if !call.nonce.is_empty() {
            cmd.arg(call.nonce);
        }
        let reply: Vec<i64> = self.query(Request::Cmd(&cmd), Some(call.script)).await?;
        parse_reply(&reply, call.keys.len())
    }

    pub(crate) async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        let members: Vec<String> = lease.members().collect();
        let mut pipe = redis::pipe();
        for key in &lease.keys {
            pipe.cmd("ZREM").arg(key).arg(&members).ignore();
        }
        self.query(Request::Pipe(&pipe), None).await
    }

    pub(crate) async fn reset(&self, keys: &[String]) -> Result<(), StoreError> {
        let mut cmd = redis::cmd("DEL");
        cmd.arg(keys);
        self.query(Request::Cmd(&cmd), None).await
    }
}

/// What [`RedisStore::query`] sends.
#[derive(Clone, Copy)]
enum Request<'a> {
    Cmd(&'a redis::Cmd),
    Pipe(&'a redis::Pipeline),
}

impl Request<'_> {
    async fn run<T: redis::FromRedisValue>(
        self,
        conn: &mut MultiplexedConnection,
    ) -> redis::RedisResult<T> {
        match self {
            Request::Cmd(c) => c.query_async(conn).await,
            Request::Pipe(p) => p.query_async(conn).await,
        }
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
