//! Batching: concurrent decisions of one limiter bound for one Redis go out
//! as one script call (`lua/batch.lua`) that decides each on its own.
//!
//! A limiter's decisions take one [`Lane`] per script (its decision script,
//! its fast path). While fewer than [`FLIGHTS_PER_CONNECTION`] calls of the
//! lane per connection are in flight (not counting one whose call started a
//! store timeout ago: its caller keeps its future without polling it), a
//! decision is sent at once, alone, exactly as without batching: nothing
//! waits for company. Beyond that it joins the lane's
//! queue; when a call in flight ends, the decisions queued meanwhile (up to
//! [`MAX_BATCH`], logging at most [`MAX_BATCH_LOGGED`] sliding-log times
//! together) leave together as the next call, sent by a task of its own
//! (so that no caller's future, which its client may drop, carries another
//! caller's decision). Batches form only from what is already queued: under
//! light load every decision is a call of its own, under heavy load one call
//! carries many, and Redis runs one script per call instead of one per
//! decision.
//!
//! Each decision in a batch runs the limiter's own script with its own keys
//! and arguments, so it is decided, written and expired exactly as a call of
//! its own would be; one that errors fails alone. On Cluster, a batch is
//! split by hash slot first, each slot's share one call, all sent at once.
//! Not by node: Redis refuses declared keys of several slots (`CROSSSLOT`,
//! before the call runs) even on one node and even in a script flagged
//! `allow-cross-slot-keys`, which only lets a script reach keys it did not
//! declare, checked one `redis.call` at a time as it runs (a key whose slot
//! migrated away fails there, after what ran before it).
//! `tests/deployments/cluster.rs` pins this down.
//!
//! Calls that may take a concurrency lease are never batched (their undo,
//! should their caller go away, is sent on the connection the call went out
//! on); nor are settle's takes and give-backs, admin calls, or `verify`.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::args::{SERVER_CLOCK, clock_arg, decision_cmd, fast_cmd};
use super::conn::{Connections, NotSent, Pooled, Request};
use super::script::LimiterScript;
use crate::error::StoreError;

/// The most decisions one call carries: a batch keeps Redis busy for its
/// whole run (about 1 µs to 5 µs a decision, so at most about a
/// millisecond), and every decision in it waits for the last one. (256
/// tasks on one connection: 128 made 0.8 to 0.9 times the decisions/s of
/// 256.)
pub(crate) const MAX_BATCH: usize = 256;

/// The most units the decisions of one call may log together, where the
/// limiter's quotas keep one entry per unit (a sliding log's times): as one
/// call of the largest such quota, about 1.5 ms of Redis's time. A batch
/// closes before a decision that would take it past this (a decision alone
/// logs at most this much: its cost is at most the quota's count).
pub(crate) const MAX_BATCH_LOGGED: u64 = crate::strategy::MAX_SORTED_SET_LIMIT;

/// How many calls of a lane may be in flight per connection before its
/// decisions queue: one on the wire while the next forms, and one more so
/// that a batch's reply and the next batch's request overlap.
const FLIGHTS_PER_CONNECTION: usize = 2;

/// How a lane's scripts take a decision's arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Any decision script (several quotas, blocking), wrapped whole by
    /// `lua/batch.lua`: `ARGV` of one call is the clock reading (`T` for
    /// Redis's), the cost, the quotas' numbers, then the nonce if any.
    Wrapped,
    /// One quota without blocking: the single script's `ARGV` as for
    /// [`Wrapped`](Self::Wrapped); its batch, `lua/batch_one.lua`, runs the
    /// strategy's block in a loop.
    One,
    /// The fixed window's fast path: its cost only, none for a cost of 1;
    /// its batch is `lua/batch_fast.lua`.
    Fast,
}

/// One decision, as a lane sends it.
pub(crate) struct Decision {
    pub(crate) keys: Vec<String>,
    /// The clock reading: `None` for Redis's clock.
    pub(crate) now_us: Option<u64>,
    pub(crate) cost: u64,
    /// Empty: none.
    pub(crate) nonce: String,
}

/// A decision waiting in a lane's queue, and where its reply goes.
struct Pending {
    decision: Decision,
    /// When it joined the queue: its call's time budget started then.
    queued: Instant,
    reply: oneshot::Sender<Result<redis::Value, StoreError>>,
}

impl Pending {
    /// The decision, if its caller still waits for it at `now`: not if the
    /// caller went away, nor if its time is up (it then fails with a
    /// timeout, unsent).
    fn still_waiting(self, now: Instant, timeout: Duration) -> Option<Pending> {
        if self.reply.is_closed() {
            return None;
        }
        if now.saturating_duration_since(self.queued) >= timeout {
            let _ = self.reply.send(Err(StoreError::Timeout(timeout)));
            return None;
        }
        Some(self)
    }

    /// Whether its caller still waits for it at `now` (see
    /// [`still_waiting`](Self::still_waiting)), without answering it.
    fn is_waiting(&self, now: Instant, timeout: Duration) -> bool {
        !self.reply.is_closed() && now.saturating_duration_since(self.queued) < timeout
    }
}

/// The decisions of one script of one limiter, and the calls they go out in.
pub(crate) struct Lane {
    layout: Layout,
    /// The script of one decision: a batch of one is sent as it.
    single: LimiterScript,
    /// The same decisions, several per call (`lua/batch.lua`).
    batch: LimiterScript,
    /// The arguments every decision of the lane shares (the quotas'
    /// numbers), sent once per call.
    shared: Box<[Vec<u8>]>,
    /// How many keys each decision has.
    keys: usize,
    /// How many entries each decision logs per unit of its cost (its
    /// quotas that keep one per unit): a batch logs at most
    /// [`MAX_BATCH_LOGGED`].
    logs: u64,
    /// How many calls may be in flight before decisions queue.
    max_flights: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    queue: Vec<Pending>,
    /// The lane's calls in flight: an id each, and when its current call
    /// started.
    flights: Vec<(u64, Instant)>,
    next_id: u64,
}

impl State {
    /// Whether the lane may start another call: fewer than `most` in
    /// flight, not counting those whose call started `timeout` ago or more.
    /// Every call ends within the timeout, if its future is polled: one
    /// older is held by a caller that keeps its future without polling it,
    /// and must not hold up the others.
    fn may_fly(&self, most: usize, timeout: Duration, now: Instant) -> bool {
        self.flights.len() < most
            || self
                .flights
                .iter()
                .filter(|(_, since)| now.saturating_duration_since(*since) < timeout)
                .count()
                < most
    }

    /// A new flight, starting `now`: its id.
    fn take_off(&mut self, now: Instant) -> u64 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.flights.push((id, now));
        id
    }

    /// Flight `id` starts its next call now.
    fn next_leg(&mut self, id: u64) {
        if let Some(flight) = self.flights.iter_mut().find(|(f, _)| *f == id) {
            flight.1 = Instant::now();
        }
    }

    /// Flight `id` ended.
    fn land(&mut self, id: u64) {
        self.flights.retain(|(f, _)| *f != id);
    }
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lane")
            .field("layout", &self.layout)
            .field("keys", &self.keys)
            .field("max_flights", &self.max_flights)
            .finish_non_exhaustive()
    }
}

impl Lane {
    /// A lane for `single`, whose decisions have `keys` keys each, log
    /// `logs` entries per unit of cost and share the arguments `shared`,
    /// over `connections` connections; `batch` decides several of them per
    /// call.
    pub(crate) fn new(
        layout: Layout,
        (single, batch): (&LimiterScript, LimiterScript),
        shared: Box<[Vec<u8>]>,
        (keys, logs): (usize, u64),
        connections: usize,
    ) -> Self {
        Lane {
            layout,
            single: single.clone(),
            batch,
            shared,
            keys,
            logs,
            max_flights: FLIGHTS_PER_CONNECTION * connections.max(1),
            state: Mutex::new(State::default()),
        }
    }

    /// The batch script (for `verify`, and for tests).
    pub(crate) fn batch_script(&self) -> &LimiterScript {
        &self.batch
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Decides `decision`: at once with `direct` (the call as it would be
    /// sent without batching) while fewer than `max_flights`
    /// calls are in flight, else in the next batch. Returns the decision's
    /// own reply, as its script gives it.
    pub(crate) async fn decide<P, F, Fut>(
        self: &Arc<Self>,
        conns: &Arc<Connections<P>>,
        decision: impl FnOnce() -> Decision,
        direct: F,
    ) -> Result<redis::Value, StoreError>
    where
        P: Pooled,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<redis::Value, StoreError>>,
    {
        let flight = {
            let now = Instant::now();
            let mut state = self.lock();
            if state.may_fly(self.max_flights, conns.timeout, now) {
                Ok(state.take_off(now))
            } else {
                let (reply, waiting) = oneshot::channel();
                state.queue.push(Pending {
                    decision: decision(),
                    queued: now,
                    reply,
                });
                Err(waiting)
            }
        };
        match flight {
            Ok(id) => {
                // ends the flight however the call ends (a dropped future too)
                let _flight = Flight {
                    lane: self,
                    conns,
                    id,
                };
                direct().await
            }
            // The wait is bounded by the store's timeout from the moment
            // the decision queued, as a call of its own is: the caller stops
            // waiting then (a timeout: it may have been applied), and a
            // batch leaves without the decisions whose time is up.
            Err(waiting) => match tokio::time::timeout(conns.timeout, waiting).await {
                Ok(Ok(reply)) => reply,
                // its batch was dropped unsent or unanswered (the runtime
                // shut down), or its time is up: it may have been applied
                Ok(Err(_)) | Err(_) => Err(StoreError::Timeout(conns.timeout)),
            },
        }
    }

    /// The next batch: the decisions queued whose callers still wait, up to
    /// [`MAX_BATCH`] of them logging at most [`MAX_BATCH_LOGGED`] units
    /// together (but at least one), oldest first. A decision queued
    /// `timeout` ago or more fails with a timeout, unsent.
    fn next_batch(&self, state: &mut State, timeout: Duration) -> Vec<Pending> {
        let now = Instant::now();
        // where the batch ends in the queue: the dead decisions before it
        // (their callers gone, or their time up) are dropped, not counted
        let (mut cut, mut live, mut logged) = (0, 0, 0u64);
        for p in &state.queue {
            if !p.is_waiting(now, timeout) {
                cut += 1;
                continue;
            }
            let logs = p.decision.cost.saturating_mul(self.logs);
            if live == MAX_BATCH || (live > 0 && logged.saturating_add(logs) > MAX_BATCH_LOGGED) {
                break;
            }
            (cut, live, logged) = (cut + 1, live + 1, logged.saturating_add(logs));
        }
        state
            .queue
            .drain(..cut)
            .filter_map(|p| p.still_waiting(now, timeout))
            .collect()
    }

    /// A call of the lane ended: the decisions queued meanwhile leave as the
    /// next call, sent by a task of its own, which keeps the flight.
    fn hand_off<P: Pooled>(self: &Arc<Self>, conns: &Arc<Connections<P>>, id: u64) {
        let batch = {
            let mut state = self.lock();
            let batch = self.next_batch(&mut state, conns.timeout);
            if batch.is_empty() {
                state.land(id);
                return;
            }
            state.next_leg(id);
            batch
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(run(self.clone(), conns.clone(), id, batch))),
            // (no runtime to send it on: its callers get a timeout, as
            // nothing was sent)
            Err(_) => {
                drop(batch);
                self.lock().land(id);
            }
        }
    }

    /// Sends `batch` and hands each decision its reply. On Cluster, each
    /// hash slot's share is its own call, all sent at once.
    async fn send<P: Pooled>(&self, conns: &Connections<P>, batch: Vec<Pending>) {
        // what must go in calls of its own: a slot (Cluster), a form; found
        // once per decision (a slot is a CRC16 of the key)
        let mut keyed: Vec<_> = batch
            .into_iter()
            .map(|p| {
                let slot = if P::SLOTTED {
                    P::slot_of(&p.decision.keys[0])
                } else {
                    0
                };
                ((slot, self.form(&p.decision)), p)
            })
            .collect();
        if keyed.iter().all(|(share, _)| *share == keyed[0].0) {
            let batch = keyed.into_iter().map(|(_, p)| p).collect();
            return self.send_slot(conns, batch).await;
        }
        // (stable: each share keeps the order the decisions queued in)
        keyed.sort_by_key(|(share, _)| *share);
        let mut shares: Vec<Vec<Pending>> = Vec::new();
        let mut last = None;
        for (share, pending) in keyed {
            match shares.last_mut() {
                Some(current) if last == Some(share) => current.push(pending),
                _ => shares.push(vec![pending]),
            }
            last = Some(share);
        }
        let mut calls: Vec<Pin<Box<dyn Future<Output = ()> + Send + '_>>> = shares
            .into_iter()
            .map(|share| Box::pin(self.send_slot(conns, share)) as Pin<Box<_>>)
            .collect();
        std::future::poll_fn(|cx| {
            calls.retain_mut(|call| call.as_mut().poll(cx).is_pending());
            if calls.is_empty() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }

    /// Sends `batch` (keys of one slot) as one call: a lone decision with
    /// the lane's own script, several with its batch script. The call is
    /// bounded by the store's timeout as any call is; each decision's caller
    /// stops waiting at its own deadline.
    async fn send_slot<P: Pooled>(&self, conns: &Connections<P>, batch: Vec<Pending>) {
        // Sent only within the oldest decision's budget: none goes out after
        // its caller stopped waiting. Ran out waiting for a connection:
        // the decisions with time left go back to the queue, for the next
        // batch this task sends.
        let Some(oldest) = batch.iter().map(|p| p.queued).min() else {
            return;
        };
        if let [only] = &batch[..] {
            let cmd = self.single_cmd(&only.decision);
            match conns
                .query_since::<redis::Value>(oldest, Request::Cmd(&cmd), Some(&self.single))
                .await
            {
                Ok(reply) => {
                    if let Some(pending) = batch.into_iter().next() {
                        let _ = pending.reply.send(reply);
                    }
                }
                Err(NotSent) => self.requeue(batch, conns.timeout),
            }
            return;
        }
        let cmd = self.batch_cmd(&batch);
        let result = match conns
            .query_since::<redis::Value>(oldest, Request::Cmd(&cmd), Some(&self.batch))
            .await
        {
            Ok(result) => result,
            Err(NotSent) => return self.requeue(batch, conns.timeout),
        };
        match result {
            Ok(redis::Value::Array(replies)) if replies.len() == batch.len() => {
                for (pending, reply) in batch.into_iter().zip(replies) {
                    let _ = pending.reply.send(decision_reply(reply));
                }
            }
            Ok(other) => {
                let error = Arc::new(StoreError::Protocol(format!(
                    "expected {} replies from the batch script, got {other:?}",
                    batch.len()
                )));
                for pending in batch {
                    let _ = pending.reply.send(Err(StoreError::shared(&error)));
                }
            }
            Err(e) => {
                let error = Arc::new(e);
                for pending in batch {
                    let _ = pending.reply.send(Err(StoreError::shared(&error)));
                }
            }
        }
    }

    /// Puts the decisions of an unsent `batch` back at the head of the
    /// queue, in their order, but those whose time is up (they fail with a
    /// timeout) or whose callers went away.
    fn requeue(&self, batch: Vec<Pending>, timeout: Duration) {
        let now = Instant::now();
        let young: Vec<Pending> = batch
            .into_iter()
            .filter_map(|p| p.still_waiting(now, timeout))
            .collect();
        if young.is_empty() {
            return;
        }
        let mut state = self.lock();
        let later = std::mem::replace(&mut state.queue, young);
        state.queue.extend(later);
    }

    /// What a decision's batch needs alike in all its decisions (one batch
    /// of `lua/batch_one.lua` is on one clock, with nonces or without):
    /// whether it carries its own time, whether it has a nonce.
    fn form(&self, d: &Decision) -> (bool, bool) {
        match self.layout {
            Layout::One => (d.now_us.is_some(), !d.nonce.is_empty()),
            Layout::Wrapped | Layout::Fast => (false, false),
        }
    }

    /// The `EVALSHA` of one decision with the lane's own script, as it is
    /// sent without batching (`protocol::decide`).
    fn single_cmd(&self, d: &Decision) -> redis::Cmd {
        match self.layout {
            Layout::Wrapped | Layout::One => decision_cmd(
                &self.single,
                &d.keys,
                d.now_us,
                d.cost,
                &self.shared,
                &d.nonce,
            ),
            Layout::Fast => fast_cmd(&self.single, &d.keys, d.cost),
        }
    }

    /// The `EVALSHA` of `batch` (one share: see [`form`](Self::form)) with
    /// the batch script.
    fn batch_cmd(&self, batch: &[Pending]) -> redis::Cmd {
        let keys: usize = batch.iter().map(|p| p.decision.keys.len()).sum();
        let bytes: usize = batch
            .iter()
            .map(|p| p.decision.keys.iter().map(String::len).sum::<usize>() + 32)
            .sum();
        let mut cmd = redis::Cmd::with_capacity(
            8 + keys + self.shared.len() + batch.len() * 3,
            64 + bytes + self.shared.iter().map(Vec::len).sum::<usize>(),
        );
        cmd.arg("EVALSHA").arg(self.batch.sha.as_str()).arg(keys);
        for p in batch {
            cmd.arg(&p.decision.keys);
        }
        match self.layout {
            Layout::Wrapped => {
                // (lua/batch.lua: KN, AN, SP, SN, the shared arguments, then
                // per decision its time, its cost, its nonce or '')
                cmd.arg(self.keys).arg(3).arg(2).arg(self.shared.len());
                for s in self.shared.iter() {
                    cmd.arg(s.as_slice());
                }
                for p in batch {
                    clock_arg(&mut cmd, p.decision.now_us);
                    cmd.arg(p.decision.cost).arg(&p.decision.nonce);
                }
            }
            Layout::One => {
                let (timed, nonces) = batch
                    .first()
                    .map_or((false, false), |p| self.form(&p.decision));
                let costs = batch.iter().any(|p| p.decision.cost != 1);
                cmd.arg(if timed { "M" } else { SERVER_CLOCK })
                    .arg(match (costs, nonces) {
                        (true, true) => "cn",
                        (true, false) => "c-",
                        (false, true) => "1n",
                        (false, false) => "1-",
                    });
                for s in self.shared.iter() {
                    cmd.arg(s.as_slice());
                }
                for p in batch {
                    if costs {
                        cmd.arg(p.decision.cost);
                    }
                    if let Some(us) = p.decision.now_us {
                        cmd.arg(us);
                    }
                    if nonces {
                        cmd.arg(&p.decision.nonce);
                    }
                }
            }
            Layout::Fast => {
                // (no argument at all when every cost is 1)
                if batch.iter().any(|p| p.decision.cost != 1) {
                    for p in batch {
                        if p.decision.cost == 1 {
                            cmd.arg("");
                        } else {
                            cmd.arg(p.decision.cost);
                        }
                    }
                }
            }
        }
        cmd
    }

    /// Whether a decision of `keys` keys can join this lane's batches.
    pub(crate) fn takes(&self, keys: usize) -> bool {
        keys == self.keys && keys > 0
    }
}

/// One decision's entry in a batch's reply: its script's reply, or, for
/// `E<error>`, that error, as Redis would have answered a call of its own.
fn decision_reply(reply: redis::Value) -> Result<redis::Value, StoreError> {
    match reply {
        redis::Value::BulkString(text) if text.first() == Some(&b'E') => {
            let message: Vec<u8> = text[1..]
                .iter()
                .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b })
                .collect();
            let mut wire = Vec::with_capacity(message.len() + 3);
            wire.push(b'-');
            wire.extend_from_slice(&message);
            wire.extend_from_slice(b"\r\n");
            match redis::parse_redis_value(&wire).and_then(redis::Value::extract_error) {
                Err(e) => Err(StoreError::from_redis(e)),
                Ok(_) => Err(StoreError::Protocol(format!(
                    "a decision of the batch failed: {}",
                    String::from_utf8_lossy(&message)
                ))),
            }
        }
        other => Ok(other),
    }
}

/// A call of the lane in flight in a caller's future: when it ends, the
/// next batch leaves (or the flight ends).
struct Flight<'a, P: Pooled> {
    lane: &'a Arc<Lane>,
    conns: &'a Arc<Connections<P>>,
    id: u64,
}

impl<P: Pooled> Drop for Flight<'_, P> {
    fn drop(&mut self) {
        self.lane.hand_off(self.conns, self.id);
    }
}

/// A lane's flight kept by a batch task: sends `batch`, then each batch
/// queued meanwhile, until none is.
async fn run<P: Pooled>(
    lane: Arc<Lane>,
    conns: Arc<Connections<P>>,
    id: u64,
    mut batch: Vec<Pending>,
) {
    let mut kept = Kept(Some((lane.clone(), id)));
    loop {
        lane.send(&conns, batch).await;
        let mut state = lane.lock();
        batch = lane.next_batch(&mut state, conns.timeout);
        if batch.is_empty() {
            state.land(id);
            kept.0 = None;
            return;
        }
        state.next_leg(id);
    }
}

/// A batch task's flight: should the task be dropped before it ends (its
/// runtime shut down), the flight ends and the decisions queued fail, rather
/// than wait for a call that never comes.
struct Kept(Option<(Arc<Lane>, u64)>);

impl Drop for Kept {
    fn drop(&mut self) {
        if let Some((lane, id)) = self.0.take() {
            let orphans = {
                let mut state = lane.lock();
                state.land(id);
                std::mem::take(&mut state.queue)
            };
            drop(orphans);
        }
    }
}
