//! What a Redis store sends and how it reads the answers: the `KEYS`/`ARGV`
//! layout of a decision (the other side of `lua/single.lua` and
//! `lua/multi.lua`), the commands of `release` and `reset`, and the parsing of
//! the script's reply straight into the store's [`QuotaOutcome`]s.
//!
//! Everything a limiter's calls have in common is prepared once, at build, in
//! a [`Prepared`]: the script and the encoded quota arguments. A decision then
//! only writes the keys, the clock reading, the cost and the nonce into one
//! `EVALSHA`, with no script building or number formatting of the quotas.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::args::{decision_cmd, fast_cmd};
use super::batch::{Decision, Lane, Layout};
use super::conn::{Connections, Owned, Pooled, Request, Undo};
use super::script::LimiterScript;
use crate::decision::{Lease, LeaseParts};
use crate::error::StoreError;
use crate::quota::QuotaSpec;
use crate::store::call::{Call, Outcome, QuotaOutcome};
use crate::store::on_denial::OnDenial;
use crate::strategy::Kind;

/// What a Redis store prepares once per limiter: the decision script and the
/// quotas' script arguments, encoded. Shared by every connection kind.
///
/// A second script (e.g. settling a reservation after the response) would
/// be a field beside [`decide`](Self::decide), prepared here as well.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// The script every decision of the limiter runs but the fast path's.
    pub(crate) decide: LimiterScript,
    /// `ARGV[3..]` (after the clock reading and the cost), one entry per argument.
    quota_args: Box<[Vec<u8>]>,
    /// A lone fixed-window quota's fast path on Redis's clock: its own
    /// script, with the quota's numbers written in (`lua/fixed_window_fast.lua`).
    fast_window: Option<FastWindow>,
    /// Where decisions go out batched, if the store batches
    /// (`batch.rs`): one lane per script.
    lanes: Option<Lanes>,
    /// The quotas, if one is a calendar's: the arguments are then each
    /// call's (never batched: a lane's are shared).
    calendar: Option<Box<[QuotaSpec]>>,
    /// A recording limiter's script and arguments
    /// ([`LimiterScript::for_recording`]).
    recording: bool,
}

/// The batching lanes of a limiter's decisions: its script's and its fast
/// path's.
#[derive(Debug)]
struct Lanes {
    decide: Arc<Lane>,
    fast: Option<Arc<Lane>>,
}

impl Prepared {
    /// Every script its decisions may run: the limiter's, its fast path's,
    /// then their batch scripts.
    pub(crate) fn scripts(&self) -> impl Iterator<Item = &LimiterScript> {
        let lanes = self.lanes.iter().flat_map(|l| {
            std::iter::once(l.decide.batch_script())
                .chain(l.fast.as_ref().map(|f| f.batch_script()))
        });
        std::iter::once(&self.decide)
            .chain(self.fast_window.as_ref().map(|f| &f.script))
            .chain(lanes)
    }

    /// The script and arguments for a limiter with `quotas`, in order.
    /// `block`: see [`LimiterScript::for_quotas`]. `batching`: the
    /// connections of a store that batches decisions, `None` if it does not.
    /// `on_denial`: what a denial records; a limiter that records runs
    /// [`LimiterScript::for_recording`] (batched wrapped: `lua/batch.lua`).
    pub(crate) fn new(
        quotas: &[QuotaSpec],
        block: Option<u64>,
        batching: Option<usize>,
        on_denial: OnDenial,
    ) -> Self {
        let recording = on_denial.records();
        let quota_args = quota_args_in(quotas, 0, recording);
        let calendar = quotas
            .iter()
            .any(|q| q.calendar.is_some())
            .then(|| quotas.to_vec().into_boxed_slice());
        let batching = batching.filter(|_| calendar.is_none());
        let strategies: Vec<Kind> = quotas.iter().map(|q| q.kind).collect();
        let shadow: Vec<bool> = quotas.iter().map(|q| q.shadow).collect();
        // (a recording limiter's fast path keeps a denial's units counted:
        // lua/fixed_window_fast_record.lua)
        let fast_window = match quotas {
            [q] if block.is_none() => FastWindow::new(q, recording),
            _ => None,
        };
        let decide = if recording {
            LimiterScript::for_recording(&strategies, &shadow, block, on_denial.script_flag())
        } else {
            LimiterScript::for_quotas(&strategies, &shadow, block)
        };
        // every call's keys: one per quota, then the block key
        let keys = quotas.len() + usize::from(block.is_some());
        // and the entries each logs per unit of its cost
        let logs = quotas.iter().map(|q| q.entries_of(1)).sum::<u64>();
        let lanes = batching.map(|connections| {
            // one quota without blocking: its block in a loop
            // (lua/batch_one.lua); else the script wrapped (lua/batch.lua)
            let (layout, batch) = match quotas {
                [q] if block.is_none() && !recording => {
                    (Layout::One, LimiterScript::batch_one(q.kind))
                }
                _ => (Layout::Wrapped, LimiterScript::batch(&decide)),
            };
            let fast = fast_window.as_ref().and_then(|f| {
                let batch = LimiterScript::batch_fast(quotas[0].kind, f.limit, f.window_ms, f.top)?;
                Some(Arc::new(Lane::new(
                    Layout::Fast,
                    (&f.script, batch),
                    Box::new([]),
                    (keys, logs),
                    connections,
                )))
            });
            Lanes {
                decide: Arc::new(Lane::new(
                    layout,
                    (&decide, batch),
                    quota_args.clone(),
                    (keys, logs),
                    connections,
                )),
                fast,
            }
        });
        Prepared {
            decide,
            quota_args,
            fast_window,
            lanes,
            calendar,
            recording,
        }
    }
}

/// A decision's (and a take's) `ARGV[3..]`, after the clock reading and the
/// cost, for `quotas` in order (see `lua/single.lua`, `lua/multi.lua`). One
/// quota: the two numbers its strategy reads as one string of two
/// little-endian doubles, which the script unpacks in one call (Lua's
/// `tonumber` costs Redis three times as much per number), then the period
/// (or interval) in whole milliseconds, rounded up, as text. Several: five
/// numbers per quota, as text.
///
/// A calendar quota's numbers depend on the time (`QuotaSpec::params_at`):
/// these are at the epoch, and [`quota_args_at`] gives a call's.
pub(crate) fn quota_args(quotas: &[QuotaSpec]) -> Box<[Vec<u8>]> {
    quota_args_at(quotas, 0)
}

/// [`quota_args`] of a call at `now` (µs, the caller's clock on Redis's):
/// one quota of a calendar sends three doubles, its count and its bounds
/// (`lua/fixed_window_calendar.lua`).
pub(crate) fn quota_args_at(quotas: &[QuotaSpec], now: i64) -> Box<[Vec<u8>]> {
    quota_args_in(quotas, now, false)
}

/// [`quota_args_at`], or, `recording`, a recording limiter's
/// ([`LimiterScript::for_recording`]): one quota sends all four numbers
/// (count, period, burst, interval) as four little-endian doubles, then
/// the period (or interval) in ms as [`quota_args`] does; several as
/// [`quota_args`] does.
fn quota_args_in(quotas: &[QuotaSpec], now: i64, recording: bool) -> Box<[Vec<u8>]> {
    if let ([q], true) = (quotas, recording) {
        let [_, numbers @ ..] = script_numbers_at(q, now);
        let mut packed = Vec::with_capacity(32);
        for v in numbers {
            // exact: every number a quota accepts is below 2^53
            packed.extend_from_slice(&(v as f64).to_le_bytes());
        }
        let us = if q.calendar.is_none() && q.spec().lua.reads_burst {
            q.interval_us
        } else {
            q.period_us
        };
        return Box::new([packed, us.div_ceil(1000).to_string().into_bytes()]);
    }
    match quotas {
        [q] if q.calendar.is_some() => {
            let p = q.params_at(now);
            let mut numbers = Vec::with_capacity(24);
            for v in [p.n, p.period, p.burst] {
                numbers.extend_from_slice(&(v as f64).to_le_bytes());
            }
            let ms = q.period_us.div_ceil(1000);
            Box::new([numbers, ms.to_string().into_bytes()])
        }
        [q] => {
            // (the interval as the scripts take it: see `QuotaSpec::script_interval`)
            let (a, b, ms) = if q.spec().lua.reads_burst {
                (q.burst as f64, q.script_interval() as f64, q.interval_us)
            } else {
                (q.limit as f64, q.period_us as f64, q.period_us)
            };
            // exact: every count and period a quota accepts is below 2^53
            let mut numbers = Vec::with_capacity(16);
            numbers.extend_from_slice(&a.to_le_bytes());
            numbers.extend_from_slice(&b.to_le_bytes());
            Box::new([numbers, ms.div_ceil(1000).to_string().into_bytes()])
        }
        many => many
            .iter()
            .flat_map(|q| script_numbers_at(q, now))
            .map(|v| v.to_string().into_bytes())
            .collect(),
    }
}

/// A call's time for the bounds of calendar quotas: its manual or caller
/// time, or the caller's clock for Redis's.
pub(crate) fn bounds_time(now_us: Option<u64>) -> i64 {
    now_us.unwrap_or_else(crate::clock::caller_now_us) as i64
}

/// [`script_numbers`] of a call at `now` (see [`quota_args_at`]).
pub(crate) fn script_numbers_at(q: &QuotaSpec, now: i64) -> [i64; 5] {
    if q.calendar.is_none() {
        return script_numbers(q);
    }
    let p = q.params_at(now);
    [
        i64::from(q.kind.id()),
        p.n,
        p.period,
        p.burst,
        q.script_interval(),
    ]
}

/// A quota's five numbers in a script of several quotas and in the
/// give-back script: strategy id, count, period, burst, and the interval as
/// the scripts take it ([`QuotaSpec::script_interval`]).
pub(crate) fn script_numbers(q: &QuotaSpec) -> [i64; 5] {
    [
        i64::from(q.kind.id()),
        q.limit as i64,
        q.period_us as i64,
        q.burst as i64,
        q.script_interval(),
    ]
}

/// The fast path's reply is `p * 2^TTL_BITS + ttl` (see `lua/fixed_window_fast.lua`).
const TTL_BITS: u32 = 32;

/// At most this many distinct fast-path scripts per process: each is one
/// more script in Redis's script cache (about 2.5 kB, kept until `SCRIPT
/// FLUSH` or a restart), so a process that builds limiters of ever new
/// numbers (plans per customer, limits set at runtime) stops adding them;
/// quotas beyond take the limiter's general script.
const MAX_FAST_SCRIPTS: usize = 256;

/// What the fast path of a one-quota fixed window on Redis's clock sends and
/// how its reply becomes an outcome (`lua/fixed_window_fast.lua`): a script
/// of its own with the limit and the window written in, so that a call of
/// cost 1 sends no `ARGV` and Redis parses no number. The script only counts
/// and reads the key's TTL; the decision's numbers are derived here from the
/// limit, the cost and the window, which the client knows.
#[derive(Debug)]
struct FastWindow {
    limit: u64,
    /// The window in whole milliseconds, rounded up: the key's TTL on its first hit.
    window_ms: u64,
    /// A recording limiter's: the count a denial's units run up to
    /// (`lua/fixed_window_fast_record.lua`).
    top: Option<u64>,
    script: LimiterScript,
}

/// Whether a fast-path script for `numbers` (limit, window) may be used:
/// one already `written`, or a new one while fewer than
/// [`MAX_FAST_SCRIPTS`] are (then it is recorded).
fn admit<T: Ord + Copy>(written: &mut BTreeSet<T>, numbers: T) -> bool {
    written.contains(&numbers) || (written.len() < MAX_FAST_SCRIPTS && written.insert(numbers))
}

impl FastWindow {
    /// The fast path of a lone quota `q`, if its strategy has one, its window
    /// fits the reply (below 2^32 ms) and the process has written fewer than
    /// [`MAX_FAST_SCRIPTS`] other ones. `records`: a recording limiter's,
    /// whose denials stay counted up to the cap
    /// `lua/adjust_fixed_window.lua` holds a charge to.
    fn new(q: &QuotaSpec, records: bool) -> Option<Self> {
        static WRITTEN: Mutex<BTreeSet<(u64, u64, bool)>> = Mutex::new(BTreeSet::new());
        let window_ms = q.period_us.div_ceil(1000);
        if window_ms >= 1 << TTL_BITS {
            return None;
        }
        let top = records.then(|| q.limit + (1u64 << 50) / q.interval_us.max(1));
        let script = LimiterScript::fast_path(q.kind, q.limit, window_ms, top)?;
        let mut written = WRITTEN.lock().unwrap_or_else(|e| e.into_inner());
        admit(&mut written, (q.limit, window_ms, records)).then_some(FastWindow {
            limit: q.limit,
            window_ms,
            top,
            script,
        })
    }

    /// Whether a call of `cost` is the fast path's (from 1 to the limit).
    fn fits(&self, cost: u64) -> bool {
        cost != 0 && cost <= self.limit
    }

    /// The outcome of a fast-path call of `cost` from the script's reply: the
    /// count before the call and the key's TTL in ms (0 on the window's first
    /// hit), packed in an integer or, when that does not fit, as "p ttl".
    fn outcome(&self, reply: redis::Value, cost: u64) -> Result<Outcome, StoreError> {
        let bad = |reply: &dyn std::fmt::Debug| {
            StoreError::Protocol(format!(
                "expected the fixed window's count and TTL from the limiter script, got {reply:?}"
            ))
        };
        let (before, ttl_ms) = match reply {
            redis::Value::Int(v) => (v >> TTL_BITS, v & ((1 << TTL_BITS) - 1)),
            redis::Value::BulkString(text) => {
                let mut numbers = text.split(|b| *b == b' ').map(|part| {
                    std::str::from_utf8(part)
                        .ok()
                        .and_then(|s| s.parse::<i64>().ok())
                });
                match (numbers.next(), numbers.next(), numbers.next()) {
                    (Some(Some(p)), Some(Some(ttl)), None) => (p, ttl),
                    _ => return Err(bad(&String::from_utf8_lossy(&text))),
                }
            }
            other => return Err(bad(&other)),
        };
        // Lua holds the count as a double: exact only below 2^53 (a count
        // beyond, from a key written by hand or corrupted, is rounded and may
        // come back as i64::MIN): an error, never an allowed request
        const EXACT: i64 = 1 << 53;
        if !(-EXACT < before && before < EXACT) {
            return Err(StoreError::Protocol(format!(
                "the fixed window's count {before} is out of the range the limiter script counts exactly"
            )));
        }
        let (limit, before, cost) = (i128::from(self.limit), i128::from(before), i128::from(cost));
        let allowed = before + cost <= limit;
        // (a recording limiter's denial counted its units: the state after)
        let recorded = !allowed && self.top.is_some();
        let remaining = if allowed {
            limit - before - cost
        } else if recorded {
            0
        } else {
            limit - before
        };
        // the window's first hit set the TTL to the whole window
        let reset = if before == 0 {
            self.window_ms
        } else {
            ttl_ms.max(0) as u64
        };
        let reset = Duration::from_millis(reset);
        Ok(Outcome {
            allowed,
            recorded,
            quotas: vec![QuotaOutcome {
                allowed,
                remaining: remaining.clamp(0, i128::from(u64::MAX)) as u64,
                reset_after: reset,
                retry_after: (!allowed).then_some(reset),
                delay: Duration::ZERO,
            }],
        })
    }
}

/// One decision: one `EVALSHA` of the limiter's script (or of its fast path).
///
/// `KEYS`: one per quota, all in one hash slot (a key checked in the same
/// script, such as a penalty box, would follow them). `ARGV`: the clock
/// reading (the manual time, or `T` for Redis's clock), the cost, the
/// prepared quota arguments, then the nonce when the call has one. A lone
/// fixed-window quota on Redis's clock with a cost that can fit runs its
/// fast path's script instead, with its cost as the only `ARGV` (none for a
/// cost of 1), and reads a shorter reply ([`FastWindow`]); if Redis refuses
/// its count (nothing written), the limiter's script decides.
///
/// On a store that batches, the call goes through its script's [`Lane`]:
/// sent at once as above while few calls are in flight, else in the next
/// batch, where the same script decides it with the same keys and arguments
/// (`batch.rs`).
///
/// A call that may take a concurrency lease (a lease-holding quota, a cost
/// above 0) and does not return its outcome to the caller (its future
/// dropped mid-call, a timeout, an error) gives the lease back: an [`Undo`]
/// sends the lease's `ZREM` after the `EVALSHA`, on the same connection, so
/// no slot stays taken until the lease timeout by a lease nobody holds.
pub(crate) async fn decide<P: Pooled>(
    conns: &Arc<Connections<P>>,
    prepared: &Prepared,
    call: Call<'_>,
) -> Result<Outcome, StoreError> {
    let lanes = prepared
        .lanes
        .as_ref()
        .filter(|l| l.decide.takes(call.keys.len()));
    if call.now_us.is_none()
        && let Some(fast) = &prepared.fast_window
        && fast.fits(call.cost)
    {
        let direct = || async {
            let cmd = fast_cmd(&fast.script, call.keys, call.cost);
            conns
                .query::<redis::Value>(Request::Cmd(&cmd), Some(&fast.script), None)
                .await
        };
        let reply = match lanes.and_then(|l| l.fast.as_ref()) {
            Some(lane) => lane.decide(conns, || decision(&call), direct).await,
            None => direct().await,
        };
        match reply {
            Ok(reply) => return fast.outcome(reply, call.cost),
            // its count was refused and nothing was written: the general
            // script decides (on a denial it only reads)
            Err(e) if count_refused(&e) => {}
            Err(e) => return Err(e),
        }
    }
    if takes_lease(&call) {
        return decide_with_lease(conns, prepared, call).await;
    }
    let direct = || async {
        conns
            .query::<redis::Value>(
                Request::Cmd(&one_cmd(prepared, &call)),
                Some(&prepared.decide),
                None,
            )
            .await
    };
    let reply = match lanes {
        Some(lanes) => {
            lanes
                .decide
                .decide(conns, || decision(&call), direct)
                .await?
        }
        None => direct().await?,
    };
    let reply: Vec<u8> = redis::from_redis_value(reply).map_err(|e| {
        StoreError::Protocol(format!("expected a string from the limiter script ({e})"))
    })?;
    parse_reply(&reply, call.quotas.len())
}

/// `call` as a batch lane sends it.
fn decision(call: &Call<'_>) -> Decision {
    Decision {
        keys: call.keys.to_vec(),
        now_us: call.now_us,
        cost: call.cost,
        nonce: call.nonce.to_owned(),
    }
}

/// The `EVALSHA` of `call` with the limiter's script.
fn one_cmd(prepared: &Prepared, call: &Call<'_>) -> redis::Cmd {
    let at;
    let args = match &prepared.calendar {
        None => &prepared.quota_args,
        Some(quotas) => {
            at = quota_args_in(quotas, bounds_time(call.now_us), prepared.recording);
            &at
        }
    };
    decision_cmd(
        &prepared.decide,
        call.keys,
        call.now_us,
        call.cost,
        args,
        call.nonce,
    )
}

/// A decision that may take a concurrency lease: never batched, and sent
/// with an [`Undo`] that gives the lease back should its caller never see
/// the outcome.
async fn decide_with_lease<P: Pooled>(
    conns: &Arc<Connections<P>>,
    prepared: &Prepared,
    call: Call<'_>,
) -> Result<Outcome, StoreError> {
    let cmd = one_cmd(prepared, &call);
    let mut undo = Undo::new(conns, || give_back_lease(&call));
    let reply: Vec<u8> = conns
        .query(
            Request::Cmd(&cmd),
            Some(&prepared.decide),
            Some(undo.sent_on()),
        )
        .await?;
    let outcome = parse_reply(&reply, call.quotas.len())?;
    undo.disarm();
    Ok(outcome)
}

/// Whether `e` is Redis's error reply to the fast path's count (its first
/// command, so nothing was written): Redis out of memory, a count at its
/// maximum, a key of another type.
fn count_refused(e: &StoreError) -> bool {
    // (a key of another type, a count at its maximum are refusals, their
    // client error the cause; a refused permission is not one of these)
    let source: &(dyn std::error::Error + 'static) = match e {
        StoreError::Redis(source) => &**source,
        StoreError::Refused(r)
            if matches!(
                r.kind(),
                crate::error::RefusalKind::WrongType | crate::error::RefusalKind::ScriptError
            ) =>
        {
            match std::error::Error::source(r) {
                Some(source) => source,
                None => return false,
            }
        }
        _ => return false,
    };
    source
        .downcast_ref::<redis::RedisError>()
        .is_some_and(|e| matches!(e.code(), Some("OOM" | "WRONGTYPE" | "ERR")))
}

/// Whether `call` may take a concurrency lease: a lease-holding quota, a
/// cost above 0 (and so a lease id).
pub(super) fn takes_lease(call: &Call<'_>) -> bool {
    call.cost > 0 && !call.nonce.is_empty() && call.quotas.iter().any(|q| q.spec().holds_leases)
}

/// The release of the lease `call` may have taken, which its caller never saw.
pub(super) fn give_back_lease(call: &Call<'_>) -> Owned {
    let lease = Lease::new(LeaseParts {
        base: call.base.to_owned(),
        keys: call
            .quotas
            .iter()
            .zip(call.keys)
            .filter(|(q, _)| q.spec().holds_leases)
            .map(|(_, k)| k.clone())
            .collect(),
        member: call.nonce.to_owned(),
        cost: call.cost,
    });
    release_request(&lease)
}

/// `ZREM` of a lease's members from each of its concurrency keys.
fn release_request(lease: &Lease) -> Owned {
    let members: Vec<String> = lease.members().collect();
    if let [key] = lease.keys() {
        let mut cmd = redis::cmd("ZREM");
        cmd.arg(key).arg(&members);
        return Owned::Cmd(cmd);
    }
    // several concurrency quotas: their keys share one slot (hash tag)
    let mut pipe = redis::pipe();
    for key in lease.keys() {
        pipe.cmd("ZREM").arg(key).arg(&members).ignore();
    }
    Owned::Pipe(pipe)
}

/// Gives back a lease: `ZREM` of its members from each concurrency key.
pub(crate) async fn release<P: Pooled>(
    conns: &Connections<P>,
    lease: &Lease,
) -> Result<(), StoreError> {
    conns
        .query(release_request(lease).request(), None, None)
        .await
}

/// Forgets a user key's state: one `DEL` of its keys (one slot).
pub(crate) async fn reset<P: Pooled>(
    conns: &Connections<P>,
    keys: &[String],
) -> Result<(), StoreError> {
    let mut cmd = redis::cmd("DEL");
    cmd.arg(keys);
    conns.query(Request::Cmd(&cmd), None, None).await
}

/// The oldest Redis the scripts run on: they read `TIME` and then write,
/// which needs script effects replication, the default since Redis 5.0.
const MIN_VERSION: (u32, u32) = (5, 0);

/// Checks that the server can run a limiter's `scripts`: its version (from
/// `INFO server`, where the user may read it), then one `SCRIPT LOAD` of each
/// script (on every primary of a cluster), then, if `time` (Redis's clock
/// and a script that reads it), [`check_script_time`]. A server that refuses
/// for good answers [`StoreError::Refused`].
pub(crate) async fn verify<P: Pooled>(
    conns: &Connections<P>,
    scripts: &[&LimiterScript],
    time: bool,
) -> Result<(), StoreError> {
    let mut info = redis::cmd("INFO");
    info.arg("server");
    match conns
        .query::<redis::Value>(Request::Cmd(&info), None, None)
        .await
    {
        Ok(reply) => check_version(&reply)?,
        // INFO denied (by an ACL, so Redis 6 or later) or renamed: the
        // loads and the probe decision tell what matters
        Err(StoreError::Refused(_)) => {}
        Err(e) => return Err(e),
    }
    // idle connections are checked with PING
    let _: String = conns
        .query(Request::Cmd(&redis::cmd("PING")), None, None)
        .await?;
    for script in scripts {
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD").arg(&script.source);
        let sha: String = conns.query(Request::Cmd(&load), None, None).await?;
        if !sha.eq_ignore_ascii_case(&script.sha) {
            return Err(StoreError::Protocol(format!(
                "SCRIPT LOAD answered {sha:?}, expected the script's SHA1 {}",
                script.sha
            )));
        }
    }
    if time {
        check_script_time(conns).await?;
    }
    Ok(())
}

/// How far from this process's clock Redis's `TIME`, read in a script, may
/// be before [`verify`] calls it broken: an hour. On Redis's clock a skew
/// between Redis and the app costs nothing (every decision reads Redis's
/// clock), so only a time no synchronised clock shows is refused: 0
/// (Dragonfly's answer in scripts) or one hours away.
pub(crate) const SCRIPT_TIME_TOLERANCE: Duration = Duration::from_secs(3_600);

/// The fix named by a clock refusal.
const USE_CALLER_CLOCK: &str = "build the limiter with `.clock(Clock::Caller)` (tower_redis_ratelimit::clock::Clock), \
     which sends this process's time with each call";

/// Checks that a script may read `TIME` (an ACL user without `+time`, AWS
/// ElastiCache Serverless refuse it) and that it answers a time within
/// [`SCRIPT_TIME_TOLERANCE`] of this process's clock (Dragonfly answers 0).
/// The probe is a script of its own, loaded like the limiter's and run with
/// no key.
async fn check_script_time<P: Pooled>(conns: &Connections<P>) -> Result<(), StoreError> {
    let probe = LimiterScript::new("local t = redis.call('TIME') return {t[1], t[2]}".to_owned());
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(&probe.sha).arg(0);
    let before = crate::clock::caller_now_us();
    let reply = conns
        .query::<(i64, i64)>(Request::Cmd(&cmd), Some(&probe), None)
        .await;
    let after = crate::clock::caller_now_us();
    match reply {
        Ok((secs, us)) => script_time_within(
            secs.saturating_mul(1_000_000).saturating_add(us),
            before,
            after,
        ),
        Err(StoreError::Refused(r)) => {
            let message = format!(
                "a script may not read TIME ({}): {USE_CALLER_CLOCK}",
                r.message()
            );
            Err(StoreError::Refused(r.with_message(message)))
        }
        Err(e) => Err(e),
    }
}

/// Whether Redis's script time `redis_us`, read between this process's
/// `before` and `after`, is within [`SCRIPT_TIME_TOLERANCE`] of them.
fn script_time_within(redis_us: i64, before: u64, after: u64) -> Result<(), StoreError> {
    let tolerance = SCRIPT_TIME_TOLERANCE.as_micros() as i64;
    let (before, after) = (before as i64, after as i64);
    if redis_us >= before - tolerance && redis_us <= after + tolerance {
        return Ok(());
    }
    let off = if redis_us < before {
        format!("{} s behind", (before - redis_us) / 1_000_000)
    } else {
        format!("{} s ahead of", (redis_us - after) / 1_000_000)
    };
    Err(StoreError::Refused(crate::error::Refusal::new(
        crate::error::RefusalKind::BrokenClock,
        format!(
            "TIME in a script answered {redis_us} µs since the Unix epoch, {off} this \
             process's clock (more than {} s off): if the server's TIME is wrong in scripts \
             (Dragonfly answers 0), {USE_CALLER_CLOCK}; if this host's clock is wrong, fix it",
            SCRIPT_TIME_TOLERANCE.as_secs()
        ),
        None,
    )))
}

/// Refuses a server older than [`MIN_VERSION`], from `INFO server`'s
/// `redis_version` (one node's text, or every node's on a cluster; Valkey
/// reports its Redis compatibility version there).
fn check_version(reply: &redis::Value) -> Result<(), StoreError> {
    fn texts<'a>(v: &'a redis::Value, out: &mut Vec<&'a [u8]>) {
        match v {
            redis::Value::BulkString(b) => out.push(b),
            redis::Value::SimpleString(s) => out.push(s.as_bytes()),
            redis::Value::VerbatimString { text, .. } => out.push(text.as_bytes()),
            redis::Value::Array(items) | redis::Value::Set(items) => {
                items.iter().for_each(|i| texts(i, out))
            }
            redis::Value::Map(pairs) => pairs.iter().for_each(|(_, i)| texts(i, out)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    texts(reply, &mut found);
    for text in found {
        let text = String::from_utf8_lossy(text);
        let Some(version) = text
            .lines()
            .find_map(|l| l.trim_end().strip_prefix("redis_version:"))
        else {
            continue;
        };
        let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
        if let (Some(Some(major)), Some(Some(minor))) = (parts.next(), parts.next())
            && (major, minor) < MIN_VERSION
        {
            return Err(StoreError::Refused(crate::error::Refusal::too_old(version)));
        }
    }
    Ok(())
}

/// One quota's five numbers of a script's reply (allowed, remaining, reset
/// after, retry after with -1 for never, delay; times in microseconds),
/// read with `next`.
pub(super) fn quota_outcome(
    next: &mut impl FnMut() -> Result<i64, StoreError>,
) -> Result<QuotaOutcome, StoreError> {
    let us = |v: i64| Duration::from_micros(v.max(0) as u64);
    let ok = next()? == 1;
    let remaining = next()?;
    let reset = next()?;
    let retry = next()?;
    let delay = next()?;
    Ok(QuotaOutcome {
        allowed: ok,
        remaining: remaining.max(0) as u64,
        reset_after: us(reset),
        retry_after: (retry >= 0 && !ok).then(|| us(retry)),
        delay: us(delay),
    })
}

/// Turns the script's reply, a string of space-separated integers (all
/// allowed, then per quota: allowed, remaining, reset after, retry after
/// with -1 for never, delay; times in microseconds), into an [`Outcome`].
pub(super) fn parse_reply(reply: &[u8], quotas: usize) -> Result<Outcome, StoreError> {
    let bad = || {
        StoreError::Protocol(format!(
            "expected {} integers from the limiter script, got {:?}",
            1 + 5 * quotas,
            String::from_utf8_lossy(reply)
        ))
    };
    let mut numbers = reply.split(|b| *b == b' ').map(|part| {
        std::str::from_utf8(part)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
    });
    let mut next = || numbers.next().flatten().ok_or_else(bad);
    // (1: allowed; 2: denied, and the denial recorded: lua/record.lua)
    let first = next()?;
    let (allowed, recorded) = (first == 1, first == 2);
    let mut out = Vec::with_capacity(quotas);
    for _ in 0..quotas {
        out.push(quota_outcome(&mut next)?);
    }
    if numbers.next().is_some() {
        return Err(bad());
    }
    Ok(Outcome {
        allowed,
        recorded,
        quotas: out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_time_of_zero_or_hours_off_is_a_broken_clock_naming_the_callers_clock() {
        let now = 1_800_000_000_000_000u64;
        let hour = SCRIPT_TIME_TOLERANCE.as_micros() as i64;
        let ok = |redis_us: i64| script_time_within(redis_us, now, now + 1_000).is_ok();
        assert!(ok(now as i64));
        assert!(ok(now as i64 - hour));
        assert!(ok(now as i64 + 1_000 + hour));
        for off in [0, now as i64 - hour - 1, now as i64 + 1_001 + hour] {
            let e = script_time_within(off, now, now + 1_000).expect_err("off");
            assert!(
                matches!(&e, StoreError::Refused(r) if r.kind() == crate::error::RefusalKind::BrokenClock),
                "{e:?}"
            );
            assert!(e.to_string().contains("Clock::Caller"), "{e}");
        }
    }

    #[test]
    fn replies_parse_into_outcomes_and_malformed_ones_are_protocol_errors() {
        let ms = Duration::from_millis;
        let o = parse_reply(b"0 1 4 1000 -1 2000 0 0 3000 5000 0", 2).unwrap();
        assert!(!o.allowed);
        assert_eq!(
            o.quotas,
            [
                QuotaOutcome {
                    allowed: true,
                    remaining: 4,
                    reset_after: ms(1),
                    retry_after: None,
                    delay: ms(2),
                },
                QuotaOutcome {
                    allowed: false,
                    remaining: 0,
                    reset_after: ms(3),
                    retry_after: Some(ms(5)),
                    delay: Duration::ZERO,
                },
            ]
        );
        // never fits: retry -1
        let o = parse_reply(b"0 0 0 0 -1 0", 1).unwrap();
        assert_eq!(o.quotas[0].retry_after, None);
        for bad in [
            &b""[..],
            b"1 1 2 3 4",
            b"1 1 2 3 4 5 6",
            b"1 1 x 3 4 5",
            b"1  1 2 3 4 5",
        ] {
            let e = parse_reply(bad, 1).unwrap_err();
            assert!(matches!(e, StoreError::Protocol(_)), "{e}");
        }
    }

    #[test]
    fn servers_before_redis_5_are_refused_as_too_old() {
        use redis::Value;
        let info = |v: &str| {
            Value::BulkString(
                format!("# Server\r\nredis_version:{v}\r\nredis_mode:standalone\r\n").into_bytes(),
            )
        };
        for ok in ["5.0.0", "6.2.14", "7.0.15", "8.0.2", "unknown"] {
            assert!(check_version(&info(ok)).is_ok(), "{ok}");
        }
        for old in ["4.0.14", "3.2.12"] {
            let e = check_version(&info(old)).unwrap_err();
            assert!(
                matches!(&e, StoreError::Refused(r) if r.kind() == crate::error::RefusalKind::ServerTooOld),
                "{e}"
            );
            assert!(e.to_string().contains(old), "{e}");
        }
        // a cluster: every node's text, one of them old
        let nodes = Value::Map(vec![
            (Value::SimpleString("a".into()), info("7.0.0")),
            (Value::SimpleString("b".into()), info("4.0.0")),
        ]);
        assert!(check_version(&nodes).is_err());
    }

    #[test]
    fn fast_window_replies_are_count_and_ttl_and_malformed_ones_are_protocol_errors() {
        use redis::Value;
        let ms = Duration::from_millis;
        let spec = crate::Quota::fixed_window(crate::Rate::new(10, Duration::from_secs(60)))
            .compile(0)
            .unwrap();
        let fw = FastWindow::new(&spec, false).unwrap();
        assert_eq!((fw.limit, fw.window_ms), (10, 60_000));
        // a recording limiter's: a denial leaves nothing, and says it recorded
        let rec = FastWindow::new(&spec, true).unwrap();
        assert_eq!(rec.top, Some(10 + (1 << 50) / 6_000_000));
        let o = rec.outcome(Value::Int((8 << 32) + 1234), 3).unwrap();
        assert!(!o.allowed && o.recorded && o.quotas[0].remaining == 0);
        assert_eq!(o.quotas[0].retry_after, Some(ms(1234)));
        let o = rec.outcome(Value::Int((7 << 32) + 1234), 3).unwrap();
        assert!(o.allowed && !o.recorded && o.quotas[0].remaining == 0);
        let one = |o: Outcome| {
            assert_eq!(o.quotas.len(), 1);
            assert_eq!(o.allowed, o.quotas[0].allowed);
            o.quotas[0]
        };
        let q = |allowed, remaining, reset: Duration| QuotaOutcome {
            allowed,
            remaining,
            reset_after: reset,
            retry_after: (!allowed).then_some(reset),
            delay: Duration::ZERO,
        };
        // the window's first hit: its reset is the whole window
        let o = one(fw.outcome(Value::Int(0), 1).unwrap());
        assert_eq!(o, q(true, 9, ms(60_000)));
        let o = one(fw.outcome(Value::Int((7 << 32) + 1234), 3).unwrap());
        assert_eq!(o, q(true, 0, ms(1234)));
        let o = one(fw.outcome(Value::Int((8 << 32) + 1234), 3).unwrap());
        assert_eq!(o, q(false, 2, ms(1234)));
        // a count above the limit (a lowered limit): nothing remains
        let o = one(fw.outcome(Value::Int((15 << 32) + 5), 1).unwrap());
        assert_eq!(o, q(false, 0, ms(5)));
        // a negative count (a key written by hand) still reads exactly
        let o = one(fw.outcome(Value::Int((-3 << 32) + 5), 1).unwrap());
        assert_eq!(o, q(true, 12, ms(5)));
        // what does not fit in an integer comes as text
        let o = one(fw
            .outcome(Value::BulkString(b"9 4294967296".to_vec()), 1)
            .unwrap());
        assert_eq!(o, q(true, 0, ms(1 << 32)));
        for bad in [
            Value::BulkString(b"".to_vec()),
            Value::BulkString(b"1".to_vec()),
            Value::BulkString(b"1 2 3".to_vec()),
            Value::BulkString(b"1 x".to_vec()),
            // a count Lua could not hold exactly (2^63 cast back to C long)
            Value::BulkString(b"-9223372036854775808 60000".to_vec()),
            Value::BulkString(b"9007199254740992 60000".to_vec()),
            Value::Nil,
            Value::Array(vec![Value::Int(1), Value::Int(2)]),
        ] {
            let e = fw.outcome(bad, 1).unwrap_err();
            assert!(matches!(e, StoreError::Protocol(_)), "{e}");
        }
        // the numbers are written into the script: a cost of 1 sends no ARGV,
        // another cost only itself; a cost the path does not take, nothing
        let spec =
            crate::Quota::fixed_window(crate::Rate::new(10, Duration::from_micros(60_000_001)))
                .compile(0)
                .unwrap();
        let fw = FastWindow::new(&spec, false).unwrap();
        assert_eq!(fw.window_ms, 60_001);
        assert!(
            fw.script
                .source
                .starts_with("local N, WINDOW_MS, WINDOW = 10, 60001, '60001'\n")
        );
        let keys = ["{p:k}:f10/60000001us".to_owned()];
        let args = |cost| {
            fw.fits(cost)
                .then(|| fast_cmd(&fw.script, &keys, cost))
                .map(|c| c.args_iter().count())
                .unwrap_or(0)
        };
        // EVALSHA sha 1 key [cost]
        assert_eq!((args(1), args(2), args(10)), (4, 5, 5));
        assert_eq!((args(0), args(11)), (0, 0));
        // at most MAX_FAST_SCRIPTS distinct scripts, each as often as needed
        let mut written = BTreeSet::new();
        for limit in 0..MAX_FAST_SCRIPTS as u64 {
            assert!(admit(&mut written, (limit, 1000)));
        }
        assert!(!admit(&mut written, (1, 2000)));
        assert!(admit(&mut written, (1, 1000)) && written.len() == MAX_FAST_SCRIPTS);
        // a window past the reply's 32 bits, a strategy without a fast path
        for q in [
            crate::Quota::fixed_window(crate::Rate::new(10, Duration::from_millis(1 << 32))),
            crate::Quota::gcra(crate::Rate::new(10, Duration::from_secs(60))),
        ] {
            assert!(FastWindow::new(&q.compile(0).unwrap(), false).is_none());
        }
    }
}
