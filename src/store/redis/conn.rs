//! Connection health, shared by every Redis connection kind: multiplexed
//! connections held out of a deadpool pool and shared by all calls, time
//! budgets, replacement of broken or silent connections, and the `NOSCRIPT`
//! reload. What is sent and how replies read is in [`protocol`](super::protocol).
//!
//! A connection kind (single node, Cluster; Sentinel would be a third) is one
//! [`Pooled`] implementation next to its store type.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::{ErrorKind, RedisError, ServerErrorKind};

use super::script::LimiterScript;
use crate::error::{ConfigError, StoreError};

/// A deadpool pool of multiplexed (shareable) Redis connections.
pub(crate) trait Pooled: Send + Sync + 'static {
    /// The shareable connection; clones use the same socket(s).
    type Conn: ConnectionLike + Clone + Send + Sync + 'static;
    /// The pool's object that owns the connection.
    type Object: Send + 'static;
    /// Whether the connection enforces the call timeout itself (no timer needed per call).
    const SELF_TIMED: bool;

    /// Takes a connection out of the pool.
    fn get(
        &self,
        timeout: Duration,
    ) -> impl Future<Output = Result<(Self::Object, Self::Conn), StoreError>> + Send;

    /// Drops a broken connection instead of handing it back to the pool.
    fn discard(object: Self::Object);

    /// The most connections the pool may hold.
    fn max_size(&self) -> usize;
}

/// The shared state of a Redis-backed store.
pub(crate) struct Connections<P: Pooled> {
    pub(crate) pool: P,
    slots: Box<[Slot<P>]>,
    next: AtomicUsize,
    /// The number of connections asked for (0 is rejected by [`Connections::validate`]).
    requested: usize,
    pub(crate) timeout: Duration,
    /// Serialises script loads after `NOSCRIPT`.
    loading: tokio::sync::Mutex<()>,
    /// How many script loads have completed: a call that got `NOSCRIPT` loads
    /// only if no load finished since it was sent.
    loads: AtomicU64,
}

struct Slot<P: Pooled> {
    held: RwLock<Option<Arc<Held<P>>>>,
    refill: tokio::sync::Mutex<()>,
}

/// A connection taken out of the pool for sharing.
struct Held<P: Pooled> {
    conn: P::Conn,
    object: Mutex<Option<P::Object>>,
    broken: AtomicBool,
}

impl<P: Pooled> Drop for Held<P> {
    fn drop(&mut self) {
        let object = self.object.get_mut().map(Option::take).unwrap_or(None);
        if let Some(obj) = object
            && self.broken.load(Ordering::Relaxed)
        {
            P::discard(obj);
        }
        // otherwise the object returns to its pool as it drops
    }
}

/// What [`Connections::query`] sends.
#[derive(Clone, Copy)]
pub(crate) enum Request<'a> {
    Cmd(&'a redis::Cmd),
    Pipe(&'a redis::Pipeline),
}

impl Request<'_> {
    async fn run<T: redis::FromRedisValue, C: ConnectionLike>(
        self,
        conn: &mut C,
    ) -> redis::RedisResult<T> {
        match self {
            Request::Cmd(c) => c.query_async(conn).await,
            Request::Pipe(p) => p.query_async(conn).await,
        }
    }
}

impl<P: Pooled> Connections<P> {
    pub(crate) fn new(pool: P, connections: usize, timeout: Duration) -> Self {
        Self {
            pool,
            slots: (0..connections.max(1))
                .map(|_| Slot {
                    held: RwLock::new(None),
                    refill: tokio::sync::Mutex::new(()),
                })
                .collect(),
            next: AtomicUsize::new(0),
            requested: connections,
            timeout,
            loading: tokio::sync::Mutex::new(()),
            loads: AtomicU64::new(0),
        }
    }

    pub(crate) fn connections(&self) -> usize {
        self.slots.len()
    }

    /// The number of connections asked for (the slots are at least one).
    pub(crate) fn requested(&self) -> usize {
        self.requested
    }

    /// Rejects a configuration under which every call would fail; `store`
    /// names the store's type in the messages.
    pub(crate) fn validate(&self, store: &str) -> Result<(), ConfigError> {
        if self.timeout.is_zero() {
            return Err(ConfigError::new(
                "store.timeout",
                format!(
                    "must be greater than zero, or every call times out at once; \
                     use {store}::timeout(Duration::from_millis(100)) (the default) or more"
                ),
            ));
        }
        if self.requested == 0 {
            return Err(ConfigError::new(
                "store.connections",
                format!(
                    "must be at least 1: calls are multiplexed over this many pooled \
                     connections; use {store}::connections(1) (the default)"
                ),
            ));
        }
        if self.pool.max_size() == 0 {
            return Err(ConfigError::new(
                "store.pool.max_size",
                "the deadpool pool may hold no connection, so every call would fail; \
                 create it with a max_size of at least 1 (e.g. PoolConfig::new(4))",
            ));
        }
        Ok(())
    }

    /// Runs `f` within what is left of the call's time budget.
    async fn within<T, F>(&self, started: Instant, f: F) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, StoreError>>,
    {
        let left = self.timeout.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, f).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Timeout(self.timeout)),
        }
    }

    fn slot(&self) -> &Slot<P> {
        if self.slots.len() == 1 {
            &self.slots[0]
        } else {
            &self.slots[self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len()]
        }
    }

    /// Takes a connection out of the pool for `slot`, unless another task just did.
    async fn refill(&self, slot: &Slot<P>, started: Instant) -> Result<Arc<Held<P>>, StoreError> {
        // One task per slot refills it; the others wait for its result.
        let _refill = slot.refill.lock().await;
        if let Some(h) = read(&slot.held) {
            return Ok(h);
        }
        // A call whose budget ran out while it waited (the refill before it
        // timed out: Redis is unreachable) must not open a connection only to
        // abandon it: a wave of calls makes one attempt, not one per call.
        if started.elapsed() >= self.timeout {
            return Err(StoreError::Timeout(self.timeout));
        }
        let (object, conn) = self.pool.get(self.timeout).await?;
        let held = Arc::new(Held {
            conn,
            object: Mutex::new(Some(object)),
            broken: AtomicBool::new(false),
        });
        *slot.held.write().unwrap_or_else(|e| e.into_inner()) = Some(held.clone());
        Ok(held)
    }

    /// Forgets a connection that failed, so the next call takes a fresh one.
    fn discard(&self, held: &Arc<Held<P>>) {
        held.broken.store(true, Ordering::Relaxed);
        for slot in self.slots.iter() {
            let mut guard = slot.held.write().unwrap_or_else(|e| e.into_inner());
            if guard.as_ref().is_some_and(|h| Arc::ptr_eq(h, held)) {
                *guard = None;
            }
        }
    }

    /// Turns a failed call on `held` into a store error, forgetting the
    /// connection if it broke or went silent.
    ///
    /// A timed-out connection is dropped too: a socket whose packets are lost
    /// stays silent long after the network heals (TCP backs off its
    /// retransmissions for seconds to minutes), and every call queued behind
    /// it would time out meanwhile. Of a wave of calls that time out on one
    /// connection, the first forgets it and the next call takes a fresh one;
    /// the others find it already gone.
    fn failed(&self, held: &Arc<Held<P>>, e: RedisError) -> StoreError {
        if e.is_timeout() {
            self.discard(held);
            return StoreError::Timeout(self.timeout);
        }
        if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
            self.discard(held);
        }
        StoreError::redis(e)
    }

    /// [`within`](Self::within) for work on `held`: a timeout forgets the connection.
    async fn within_on<T, F>(
        &self,
        held: &Arc<Held<P>>,
        started: Instant,
        f: F,
    ) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, StoreError>>,
    {
        let result = self.within(started, f).await;
        if let Err(StoreError::Timeout(_)) = result {
            self.discard(held);
        }
        result
    }

    /// Runs `req` on a shared connection within the timeout, loading `script`
    /// on `NOSCRIPT` and replacing the connection if it broke.
    ///
    /// Hot path: a read lock, a clone, one round trip (bounded by the
    /// connection's own response timeout where it has one). Anything slower
    /// (taking a connection from the pool, reloading the script) runs within
    /// what is left of the budget.
    pub(crate) async fn query<T: redis::FromRedisValue>(
        &self,
        req: Request<'_>,
        script: Option<&LimiterScript>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let loads = self.loads.load(Ordering::Acquire);
        let slot = self.slot();
        let (held, fresh) = match read(&slot.held) {
            Some(h) => (h, false),
            // slow paths are boxed to keep every caller's future small
            None => (
                Box::pin(self.within(started, self.refill(slot, started))).await?,
                true,
            ),
        };
        let mut conn = held.conn.clone();
        let result = if fresh || !P::SELF_TIMED {
            Box::pin(self.within_on(&held, started, async {
                Ok(req.run::<T, _>(&mut conn).await)
            }))
            .await?
        } else {
            req.run::<T, _>(&mut conn).await
        };
        match (result, script) {
            (Err(e), Some(script)) if is_noscript(&e) => {
                // Redis restarted, failed over or flushed its scripts: nothing
                // ran, so load the script (on every primary in a cluster) and
                // run again. Of many calls that met NOSCRIPT together, one loads.
                Box::pin(self.within_on(&held, started, async {
                    let mut must_load = false;
                    loop {
                        {
                            let _loading = self.loading.lock().await;
                            if must_load || self.loads.load(Ordering::Acquire) == loads {
                                redis::cmd("SCRIPT")
                                    .arg("LOAD")
                                    .arg(&script.source)
                                    .query_async::<redis::Value>(&mut conn)
                                    .await
                                    .map_err(|e| self.failed(&held, e))?;
                                self.loads.fetch_add(1, Ordering::Release);
                            }
                        }
                        match req.run::<T, _>(&mut conn).await {
                            // loaded by another task, but not this script: load it
                            Err(e) if is_noscript(&e) && !must_load => must_load = true,
                            r => return r.map_err(|e| self.failed(&held, e)),
                        }
                    }
                }))
                .await
            }
            (r, _) => r.map_err(|e| self.failed(&held, e)),
        }
    }
}

fn is_noscript(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

fn read<T: Clone>(lock: &RwLock<Option<T>>) -> Option<T> {
    lock.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// A deadpool error as a store error.
pub(crate) fn pool_error(e: deadpool_redis::PoolError) -> StoreError {
    match e {
        deadpool_redis::PoolError::Backend(e) => StoreError::redis(e),
        other => StoreError::pool(other),
    }
}
