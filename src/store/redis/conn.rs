//! Connection health, shared by every Redis connection kind: multiplexed
//! connections held out of a deadpool pool and shared by all calls, time
//! budgets, replacement of broken or silent connections, and the `NOSCRIPT`
//! reload. What is sent and how replies read is in [`protocol`](super::protocol).
//!
//! A connection kind (single node, Cluster, Sentinel) is one
//! [`Pooled`] implementation next to its store type.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::{ErrorKind, RedisError, ServerErrorKind};

use super::options::Common;
use super::script::LimiterScript;
use crate::error::{ConfigError, StoreError};

/// A deadpool pool of multiplexed (shareable) Redis connections.
pub(crate) trait Pooled: Clone + Send + Sync + 'static {
    /// The shareable connection; clones use the same socket(s).
    type Conn: ConnectionLike + Clone + Send + Sync + 'static;
    /// The pool's object that owns the connection.
    type Object: Send + 'static;
    /// Whether the connection enforces the call timeout itself (no timer needed per call).
    const SELF_TIMED: bool;
    /// Whether a connection idle for [`IDLE_CHECK`] or more is checked
    /// (`PING`) before a call is sent on it. A single-node multiplexed
    /// connection whose socket Redis closed fails the next call at once, and
    /// from its error alone that call cannot be told from one that reached
    /// Redis; a cluster connection reconnects on its own.
    const CHECK_WHEN_IDLE: bool;
    /// Whether one call may only touch keys of one hash slot (Cluster):
    /// a batch is then split by [`slot_of`](Self::slot_of).
    const SLOTTED: bool = false;

    /// The hash slot of `key`, where [`SLOTTED`](Self::SLOTTED).
    fn slot_of(_key: &str) -> u16 {
        0
    }

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
    slots: Box<[Arc<Slot<P>>]>,
    next: AtomicUsize,
    /// The options it was built with (the connections as asked: the slots
    /// are at least one).
    options: Common,
    /// [`Common::timeout`], read by every call.
    pub(crate) timeout: Duration,
    /// Serialises script loads after `NOSCRIPT`.
    loading: tokio::sync::Mutex<()>,
    /// How many script loads have completed: a call that got `NOSCRIPT` loads
    /// only if no load finished since it was sent.
    loads: AtomicU64,
    /// The origin of [`Held::replied_us`].
    epoch: Instant,
}

struct Slot<P: Pooled> {
    held: RwLock<Option<Arc<Held<P>>>>,
    /// The slot's replacement in flight, if one is: every call that finds the
    /// slot empty meanwhile waits for it rather than trying one of its own.
    refill: Mutex<Option<Refill<P>>>,
}

/// How a replacement ended (`None` while it runs): the connection, or why not.
type Replaced<P> = Option<Result<Arc<Held<P>>, Arc<StoreError>>>;

/// A replacement in flight: when it started, and how it ends, for every call
/// waiting on it.
type Refill<P> = (Instant, tokio::sync::watch::Receiver<Replaced<P>>);

/// How long a connection may go without a reply before it is checked with a
/// `PING` before use (for kinds that [`Pooled::CHECK_WHEN_IDLE`]): a server
/// `timeout`, a `CLIENT KILL` or a restart closes idle sockets, and the first
/// call on such a socket would fail. Under load (a reply at least every
/// second) no `PING` is ever sent.
pub(crate) const IDLE_CHECK: Duration = Duration::from_secs(1);

/// How many times one call loads its script and resends after `NOSCRIPT`
/// when the script is flushed again between its load and its resend
/// (`SCRIPT FLUSH` in quick succession, a restart or failover right after a
/// flush): each resend is safe (nothing ran), and the call's timeout bounds
/// them too.
const SCRIPT_RELOADS: u32 = 16;

/// A connection taken out of the pool for sharing.
struct Held<P: Pooled> {
    conn: P::Conn,
    object: Mutex<Option<P::Object>>,
    broken: AtomicBool,
    /// When the connection last got a reply, in microseconds since
    /// [`Connections::epoch`].
    replied_us: AtomicU64,
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

/// A request owned, for a call sent in the background (an [`Undo`]).
pub(crate) enum Owned {
    Cmd(redis::Cmd),
    Pipe(redis::Pipeline),
}

impl Owned {
    /// The request, borrowed.
    pub(crate) fn request(&self) -> Request<'_> {
        match self {
            Owned::Cmd(c) => Request::Cmd(c),
            Owned::Pipe(p) => Request::Pipe(p),
        }
    }
}

/// A queued call's budget ran out before its request went out
/// ([`Connections::query_since`]): nothing was sent.
#[derive(Debug)]
pub(crate) struct NotSent;

/// The connection a call's request went out on, filled in by
/// [`Connections::query`] (opaque outside this module).
pub(crate) struct SentOn<P: Pooled>(Option<Arc<Held<P>>>);

/// Takes back what a call may have applied in Redis when its reply never
/// reached the caller: the call's future was dropped mid-call (a client that
/// went away), or it failed (a timeout: Redis may run it when it wakes).
///
/// Made before the call, [`disarm`](Self::disarm)ed once the reply is read.
/// If it drops armed after the request went out, it spawns `undo()` **on the
/// same connection**: a multiplexed connection writes requests in order on
/// one socket and Redis runs one client's commands in order, so the undo runs
/// after the call, never before (a different connection could be read first
/// by a Redis that was paused). A connection that is truly dead delivers
/// neither. The undo is bounded by the store's timeout; nothing is spawned
/// outside a Tokio runtime.
pub(crate) struct Undo<P: Pooled, F: FnOnce() -> Owned> {
    conns: Arc<Connections<P>>,
    sent_on: SentOn<P>,
    undo: Option<F>,
}

impl<P: Pooled, F: FnOnce() -> Owned> Undo<P, F> {
    /// An armed undo for a call on `conns`; `undo` builds the request.
    pub(crate) fn new(conns: &Arc<Connections<P>>, undo: F) -> Self {
        Self {
            conns: conns.clone(),
            sent_on: SentOn(None),
            undo: Some(undo),
        }
    }

    /// Where [`Connections::query`] records the connection it sent on.
    pub(crate) fn sent_on(&mut self) -> &mut SentOn<P> {
        &mut self.sent_on
    }

    /// The caller has its answer: nothing to take back.
    pub(crate) fn disarm(mut self) {
        self.undo = None;
    }
}

impl<P: Pooled, F: FnOnce() -> Owned> Drop for Undo<P, F> {
    fn drop(&mut self) {
        let (Some(held), Some(undo)) = (self.sent_on.0.take(), self.undo.take()) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let conns = self.conns.clone();
        let request = undo();
        runtime.spawn(async move {
            let mut conn = held.conn.clone();
            let run = request.request().run::<(), _>(&mut conn);
            match tokio::time::timeout(conns.timeout, run).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => drop(conns.failed(&held, e)),
                // a silent connection: the next call takes a fresh one
                Err(_) => conns.discard(&held),
            }
        });
    }
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
    pub(crate) fn new(pool: P, options: Common) -> Self {
        Self {
            pool,
            slots: (0..options.connections.max(1))
                .map(|_| {
                    Arc::new(Slot {
                        held: RwLock::new(None),
                        refill: Mutex::new(None),
                    })
                })
                .collect(),
            next: AtomicUsize::new(0),
            options,
            timeout: options.timeout,
            loading: tokio::sync::Mutex::new(()),
            loads: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    fn micros_since_epoch(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_micros()).unwrap_or(u64::MAX)
    }

    pub(crate) fn connections(&self) -> usize {
        self.slots.len()
    }

    /// Whether decisions are batched (`Common::batching`).
    pub(crate) fn batching(&self) -> bool {
        self.options.batching
    }

    /// The same pool under `options` changed by `change` (a builder's
    /// step): new connections, taken on the first call. Connections beyond
    /// what the pool may hand out are not asked for (one the pool can never
    /// hand out would time out every call that comes to it).
    pub(crate) fn with(&self, change: impl FnOnce(&mut Common)) -> Arc<Self> {
        let mut options = self.options;
        change(&mut options);
        if options.connections != self.options.connections {
            options.connections = options.connections.min(self.pool.max_size().max(1));
        }
        Arc::new(Self::new(self.pool.clone(), options))
    }

    /// Rejects a configuration under which every call would fail; `store`
    /// names the store's type in the messages.
    pub(crate) fn validate(&self, store: &str) -> Result<(), ConfigError> {
        self.options.validate(store)?;
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

    fn slot(&self) -> &Arc<Slot<P>> {
        if self.slots.len() == 1 {
            &self.slots[0]
        } else {
            &self.slots[self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len()]
        }
    }

    /// A connection for the empty `slot`: the one its replacement in flight
    /// brings, else the one a replacement started now brings (for a call
    /// that started at `started`).
    ///
    /// Single flight per slot: one replacement at a time, and every call that
    /// finds the slot empty meanwhile waits for that one (within its own
    /// budget) and shares its result. The replacement runs on its own (a
    /// spawned task), bounded by the whole timeout rather than by the budget
    /// of the call that started it: were it dropped with that call, the next
    /// waiter, its budget nearly spent too, would start another, and a hung
    /// Redis (whose kernel still completes every TCP handshake) would get a
    /// connection every few milliseconds under a steady stream of calls. So a
    /// slot opens at most one connection per timeout of a hung Redis, however
    /// many calls wait ("once per wave"); one that succeeds after its callers
    /// gave up serves the next call. A call that joined a replacement older
    /// than itself, which then failed, waits for the next one (so it fails
    /// no sooner than its own timeout, or that newer replacement's failure);
    /// a replacement as new as the call is its last.
    async fn refill(
        &self,
        slot: &Arc<Slot<P>>,
        started: Instant,
    ) -> Result<Arc<Held<P>>, StoreError> {
        loop {
            let ((since, mut outcome), run_here) = {
                let mut refill = slot.refill.lock().unwrap_or_else(|e| e.into_inner());
                // (read under the lock: a replacement fills the slot before it
                // clears its flight, so one of the two is seen)
                if let Some(h) = read(&slot.held) {
                    return Ok(h);
                }
                match &*refill {
                    Some(in_flight) => (in_flight.clone(), None),
                    None => {
                        let (done, outcome) = tokio::sync::watch::channel(None);
                        let in_flight = (Instant::now(), outcome);
                        *refill = Some(in_flight.clone());
                        let replace = Self::replace(
                            self.pool.clone(),
                            slot.clone(),
                            self.timeout,
                            self.epoch,
                            done,
                        );
                        match tokio::runtime::Handle::try_current() {
                            Ok(runtime) => {
                                drop(runtime.spawn(replace));
                                (in_flight, None)
                            }
                            // (no runtime to run it on its own: this call runs it)
                            Err(_) => (in_flight, Some(replace)),
                        }
                    }
                }
            };
            if let Some(replace) = run_here {
                replace.await;
            }
            let ended = outcome.wait_for(Option::is_some).await;
            match ended.as_deref() {
                Ok(Some(Ok(held))) => return Ok(held.clone()),
                Ok(Some(Err(_))) if since < started => continue,
                Ok(Some(Err(e))) => return Err(StoreError::shared(e)),
                // The replacement's task went away without an answer (its
                // runtime shut down, say a startup runtime that ran
                // `verify()`): its flight would hold the slot for good, every
                // later call failing at once. Forget it, and try once more
                // with a replacement of this call's own.
                Ok(None) | Err(_) => {
                    drop(ended);
                    let mut refill = slot.refill.lock().unwrap_or_else(|e| e.into_inner());
                    if refill
                        .as_ref()
                        .is_some_and(|(_, flight)| flight.same_channel(&outcome))
                    {
                        *refill = None;
                    }
                    if since < started {
                        continue;
                    }
                    return Err(StoreError::Timeout(self.timeout));
                }
            }
        }
    }

    /// One replacement of `slot`'s connection, bounded by `timeout`: fills
    /// the slot (on success), ends the slot's flight, then tells every call
    /// waiting on it through `done`.
    async fn replace(
        pool: P,
        slot: Arc<Slot<P>>,
        timeout: Duration,
        epoch: Instant,
        done: tokio::sync::watch::Sender<Replaced<P>>,
    ) {
        let result = match tokio::time::timeout(timeout, pool.get(timeout)).await {
            Ok(Ok((object, conn))) => {
                let replied = Instant::now().saturating_duration_since(epoch).as_micros();
                let held = Arc::new(Held {
                    conn,
                    object: Mutex::new(Some(object)),
                    broken: AtomicBool::new(false),
                    replied_us: AtomicU64::new(u64::try_from(replied).unwrap_or(u64::MAX)),
                });
                *slot.held.write().unwrap_or_else(|e| e.into_inner()) = Some(held.clone());
                Ok(held)
            }
            Ok(Err(e)) => Err(Arc::new(e)),
            Err(_) => Err(Arc::new(StoreError::Timeout(timeout))),
        };
        *slot.refill.lock().unwrap_or_else(|e| e.into_inner()) = None;
        done.send_replace(Some(result));
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
        // READONLY: the node was demoted to a replica (a failover); a fresh
        // connection goes to the primary of now (Sentinel asks again, a DNS
        // name that follows the primary resolves again)
        if is_connection_error(&e) || e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly) {
            self.discard(held);
        }
        StoreError::from_redis(e)
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
    /// on `NOSCRIPT` and replacing the connection if it broke. `sent_on`,
    /// when given, records the connection `req` went out on (for an
    /// [`Undo`]).
    ///
    /// Hot path: a read lock, a clone, one round trip (bounded by the
    /// connection's own response timeout where it has one). Anything slower
    /// (taking a connection from the pool, checking a connection idle for
    /// [`IDLE_CHECK`], reloading the script) runs within what is left of the
    /// budget.
    ///
    /// `req` is sent at most once: a connection is replaced *before* `req`
    /// goes out (an idle one whose `PING` failed), never after, so a call
    /// that may have reached Redis (a timeout, a connection lost mid-call) is
    /// never replayed. Only after `NOSCRIPT` (nothing ran) is it sent again.
    pub(crate) async fn query<T: redis::FromRedisValue>(
        &self,
        req: Request<'_>,
        script: Option<&LimiterScript>,
        sent_on: Option<&mut SentOn<P>>,
    ) -> Result<T, StoreError> {
        self.query_from(Instant::now(), None, req, script, sent_on)
            .await
    }

    /// As [`query`](Self::query), for a call whose budget began at `started`,
    /// before it was sent (a batch of decisions, the oldest queued then):
    /// nothing is sent once that budget has run out, so no decision reaches
    /// Redis after its caller stopped waiting. [`NotSent`] when the budget
    /// ran out before the request went out (waiting for a connection);
    /// once sent, the call is bounded as any call is, from its sending.
    pub(crate) async fn query_since<T: redis::FromRedisValue>(
        &self,
        started: Instant,
        req: Request<'_>,
        script: Option<&LimiterScript>,
    ) -> Result<Result<T, StoreError>, NotSent> {
        if started.elapsed() >= self.timeout {
            return Err(NotSent);
        }
        let mut sent = false;
        match self
            .query_from(started, Some(&mut sent), req, script, None)
            .await
        {
            Err(StoreError::Timeout(_)) if !sent => Err(NotSent),
            result => Ok(result),
        }
    }

    /// `sent`, for a call queued since `started` ([`query_since`](Self::query_since)):
    /// set just before the request goes out, and the call then bounded from
    /// that moment.
    async fn query_from<T: redis::FromRedisValue>(
        &self,
        started: Instant,
        sent: Option<&mut bool>,
        req: Request<'_>,
        script: Option<&LimiterScript>,
        sent_on: Option<&mut SentOn<P>>,
    ) -> Result<T, StoreError> {
        let loads = self.loads.load(Ordering::Acquire);
        let slot = self.slot();
        let (held, fresh) = match read(&slot.held) {
            Some(h) if P::CHECK_WHEN_IDLE && self.idle(&h, started) => {
                // a check that runs out of time forgets the silent connection
                let checked = h.clone();
                Box::pin(self.within_on(&checked, started, self.check_idle(slot, h, started)))
                    .await?
            }
            Some(h) => (h, false),
            // slow paths are boxed to keep every caller's future small
            None => (
                Box::pin(self.within(started, self.refill(slot, started))).await?,
                true,
            ),
        };
        if let Some(sent_on) = sent_on {
            sent_on.0 = Some(held.clone());
        }
        let mut conn = held.conn.clone();
        // a queued call's budget, spent waiting for the connection, ends
        // here: from now on it is bounded as a call of its own
        let started = match sent {
            Some(sent) => {
                *sent = true;
                Instant::now()
            }
            None => started,
        };
        let result = if fresh || !P::SELF_TIMED {
            Box::pin(self.within_on(&held, started, async {
                Ok(req.run::<T, _>(&mut conn).await)
            }))
            .await?
        } else {
            req.run::<T, _>(&mut conn).await
        };
        if P::CHECK_WHEN_IDLE && result.as_ref().map_or_else(is_reply, |_| true) {
            self.replied(&held, started);
        }
        match (result, script) {
            (Err(e), Some(script)) if is_noscript(&e) => {
                // Redis restarted, failed over or flushed its scripts: nothing
                // ran, so load the script (on every primary in a cluster) and
                // run again. Of many calls that met NOSCRIPT together, one loads.
                Box::pin(self.within_on(&held, started, async {
                    let mut must_load = false;
                    let mut reloads = 0;
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
                            // loaded by another task but not this script, or
                            // flushed again since it was loaded: load it
                            // here (nothing ran), a bounded number of times
                            Err(e) if is_noscript(&e) && reloads < SCRIPT_RELOADS => {
                                must_load = true;
                                reloads += 1;
                            }
                            r => return r.map_err(|e| self.failed(&held, e)),
                        }
                    }
                }))
                .await
            }
            (r, _) => r.map_err(|e| self.failed(&held, e)),
        }
    }

    /// Whether `held` has had no reply for [`IDLE_CHECK`] or longer at `now`.
    fn idle(&self, held: &Held<P>, now: Instant) -> bool {
        let last = held.replied_us.load(Ordering::Relaxed);
        self.micros_since_epoch(now).saturating_sub(last) >= IDLE_CHECK.as_micros() as u64
    }

    /// Records a reply on `held` (a call sent at `at`). Written at most once
    /// a millisecond, so calls under load rarely write the shared line.
    fn replied(&self, held: &Held<P>, at: Instant) {
        let now = self.micros_since_epoch(at);
        if now.saturating_sub(held.replied_us.load(Ordering::Relaxed)) >= 1_000 {
            held.replied_us.fetch_max(now, Ordering::Relaxed);
        }
    }

    /// Checks an idle connection with a `PING` before a call is sent on it.
    /// If the connection was closed meanwhile (by the server's `timeout`, a
    /// `CLIENT KILL`, a restart), it is replaced by a fresh one: the call has
    /// not been sent, so nothing is replayed. Returns the connection to use
    /// and whether it is fresh.
    async fn check_idle(
        &self,
        slot: &Arc<Slot<P>>,
        held: Arc<Held<P>>,
        started: Instant,
    ) -> Result<(Arc<Held<P>>, bool), StoreError> {
        let mut conn = held.conn.clone();
        match redis::cmd("PING").query_async::<()>(&mut conn).await {
            Ok(()) => {
                self.replied(&held, Instant::now());
                Ok((held, false))
            }
            Err(e) if !e.is_timeout() && is_connection_error(&e) => {
                self.discard(&held);
                Ok((self.refill(slot, started).await?, true))
            }
            Err(e) => Err(self.failed(&held, e)),
        }
    }
}

/// An error of the connection, not a reply from Redis.
fn is_connection_error(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error()
}

/// Whether Redis answered (an error reply proves the connection alive).
fn is_reply(e: &RedisError) -> bool {
    !e.is_timeout() && !is_connection_error(e)
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
        deadpool_redis::PoolError::Backend(e) => StoreError::from_redis(e),
        other => StoreError::pool(other),
    }
}
