//! One token budget spent by concurrent streams, shared by
//! `tests/budget.rs` (which asserts its bounds) and
//! `benches/token_budget.rs` (which prints them): several service
//! instances on one store, streams that ask at request time and report or
//! settle after the response, and a model of envoyproxy/ratelimit's
//! counting driven by the same streams' draws.
//!
//! Each stream draws, per request, from its own seeded generator: a
//! `max_tokens` (16 to 1024), whether the request fails (one in 8: nothing
//! used, a reservation refunded in full), the tokens it really uses (1 to
//! `max_tokens`) and how many times it yields between its request and its
//! report (0 to 3), so that the streams interleave. The draws of a stream
//! are the same whatever the pattern and the backend: only how far a
//! stream gets depends on the answers.
//!
//! Patterns:
//!
//! - report only: a look at request time (the descriptor's
//!   `hits_addend: 0`), and after the response a report of the tokens used
//!   (`hits_addend: U`), whose answer is ignored (Envoy's
//!   `apply_on_stream_done`);
//! - reserve then settle: a reservation of `max_tokens` at request time
//!   (admitted only if it fits, all or nothing), and after the response a
//!   settle that gives back what was not used (`hits_subtrahend:
//!   max_tokens - U`, the descriptor's `hits_addend: 0`).
//!
//! A stream stops after [`Trace::patience`] denials in a row (the budget is
//! spent, as far as it can tell), or after [`Trace::iterations`] requests.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tower_redis_ratelimit_server::pb::rate_limit_response::Code;
use tower_redis_ratelimit_server::pb::{RateLimitRequest, RateLimitResponse};
use tower_redis_ratelimit_server::service::RlsService;

use crate::common::{desc, overall, with_hits};

/// The domain of [`config_text`].
pub(crate) const DOMAIN: &str = "budget";

/// The rules: one budget of `budget` tokens an hour per user under three
/// keys, a fixed window that opens at its first call (`strategy:
/// fixed-window`: no hour boundary aligned to the epoch falls inside a
/// run): `report` with the default charge (`always`), `reserve-over` with
/// `charge: over` (on one descriptor, the same) and `reserve` with
/// `charge: admitted` (a denied reservation takes nothing).
pub(crate) fn config_text(budget: u64) -> String {
    format!(
        "domain: {DOMAIN}
descriptors:
  - key: report
    rate_limit: {{unit: hour, requests_per_unit: {budget}, strategy: fixed-window}}
  - key: reserve
    rate_limit: {{unit: hour, requests_per_unit: {budget}, strategy: fixed-window, charge: admitted}}
  - key: reserve-over
    rate_limit: {{unit: hour, requests_per_unit: {budget}, strategy: fixed-window, charge: over}}
"
    )
}

/// What a stream does around each of its requests.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Pattern {
    /// A look before, a report of the tokens used after.
    ReportOnly,
    /// A reservation of `max_tokens` before, a refund of the unused part
    /// after.
    Reserve,
}

/// splitmix64: a seeded generator, no dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, stream: u64) -> Rng {
        Rng(seed
            .wrapping_mul(0xD1B5_4A32_D192_ED03)
            .wrapping_add(stream.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// In `lo..=hi` (a modulo bias of at most 2^-50 here).
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// One request's draws.
struct Draw {
    max_tokens: u64,
    /// the tokens really used: 0 for a failed request
    usage: u64,
    /// yields between the request and the report
    pause: u64,
}

/// The streams' parameters; [`Trace::new`] gives the ones of the test and
/// the benchmark.
#[derive(Clone, Debug)]
pub(crate) struct Trace {
    /// The generators' seed.
    pub(crate) seed: u64,
    /// The budget (the rules' `requests_per_unit`).
    pub(crate) budget: u64,
    /// The concurrent streams.
    pub(crate) streams: usize,
    /// The most requests of one stream.
    pub(crate) iterations: usize,
    /// Denials in a row after which a stream stops.
    pub(crate) patience: usize,
    /// The range of `max_tokens`.
    pub(crate) max_tokens: (u64, u64),
    /// One request in this many fails (nothing used; refunded in full).
    pub(crate) fail_one_in: u64,
}

impl Trace {
    /// 64 streams of at most 400 requests each, `max_tokens` from 16 to
    /// 1024, one failure in 8, 3 denials in a row to stop.
    pub(crate) fn new(seed: u64, budget: u64) -> Trace {
        Trace {
            seed,
            budget,
            streams: 64,
            iterations: 400,
            patience: 3,
            max_tokens: (16, 1024),
            fail_one_in: 8,
        }
    }

    fn draw(&self, rng: &mut Rng) -> Draw {
        let max_tokens = rng.range(self.max_tokens.0, self.max_tokens.1);
        let failed = rng.range(1, self.fail_one_in) == 1;
        let usage = rng.range(1, max_tokens);
        let pause = rng.range(0, 3);
        Draw {
            max_tokens,
            usage: if failed { 0 } else { usage },
            pause,
        }
    }
}

/// envoyproxy/ratelimit's counting, as a model: one counter to which every
/// call adds its hits, a call over the limit when the counter after the
/// add is past it. No call takes anything back (its protocol has no
/// `hits_subtrahend`): a reservation stays charged in full, and a settle is
/// no call at all.
///
/// Its calls are paced by round trips of the service's: before each add, a
/// look at a descriptor of its own on one of `pace` (stream `i` on
/// instance `i % len`), so that its streams interleave as the service's
/// do, and the two differ only in how they count. Without `pace`, a call
/// is two yields.
pub(crate) struct Model {
    limit: u64,
    counter: Mutex<u64>,
    pace: Vec<RlsService>,
}

impl Model {
    /// A counter at 0 under `limit`, its calls paced by `pace`.
    pub(crate) fn new(limit: u64, pace: Vec<RlsService>) -> Arc<Model> {
        Arc::new(Model {
            limit,
            counter: Mutex::new(0),
            pace,
        })
    }

    /// Adds `hits`; whether the call is admitted.
    async fn add(&self, stream: usize, hits: u64) -> bool {
        if self.pace.is_empty() {
            tokio::task::yield_now().await;
        } else {
            let svc = &self.pace[stream % self.pace.len()];
            svc.should_rate_limit_inner(&RateLimitRequest {
                domain: DOMAIN.into(),
                descriptors: vec![with_hits(desc(&[("report", "model-pace")]), 0)],
                hits_addend: 0,
                hits_subtrahend: 0,
            })
            .await
            .expect("an answer");
        }
        let admitted = {
            let mut c = self.counter.lock().unwrap_or_else(|e| e.into_inner());
            *c += hits;
            *c <= self.limit
        };
        if self.pace.is_empty() {
            tokio::task::yield_now().await;
        }
        admitted
    }

    fn count(&self) -> u64 {
        *self.counter.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Where the streams' calls go.
#[derive(Clone)]
pub(crate) enum Backend {
    /// Service instances (stream `i` calls instance `i % len`), one
    /// descriptor `{key: value}`.
    Service {
        /// The instances (on one store).
        instances: Vec<RlsService>,
        /// The descriptor's key: a rule of [`config_text`].
        key: &'static str,
        /// The descriptor's value: the budget's user, fresh per run.
        value: String,
    },
    /// envoyproxy/ratelimit's counting.
    Model(Arc<Model>),
}

impl Backend {
    async fn call(&self, stream: usize, hits: u64, subtrahend: u64) -> RateLimitResponse {
        let Backend::Service {
            instances,
            key,
            value,
        } = self
        else {
            unreachable!("only a service is called");
        };
        let svc = &instances[stream % instances.len()];
        svc.should_rate_limit_inner(&RateLimitRequest {
            domain: DOMAIN.into(),
            descriptors: vec![with_hits(desc(&[(key, value)]), hits)],
            hits_addend: 0,
            hits_subtrahend: u32::try_from(subtrahend).expect("a refund within u32"),
        })
        .await
        .expect("an answer")
    }

    /// A call of `hits` (a look when 0, a reservation, a report): whether
    /// it is admitted.
    pub(crate) async fn ask(&self, stream: usize, hits: u64) -> bool {
        match self {
            Backend::Model(m) => m.add(stream, hits).await,
            Backend::Service { .. } => overall(&self.call(stream, hits, 0).await) == Code::Ok,
        }
    }

    /// A settle giving back `back`; whether a call was made.
    async fn settle(&self, stream: usize, back: u64) -> bool {
        match self {
            Backend::Model(_) => false,
            Backend::Service { .. } => {
                self.call(stream, 0, back).await;
                true
            }
        }
    }

    /// What a look says at the end: admitted, and the remaining count.
    async fn look(&self) -> (bool, u64) {
        match self {
            Backend::Model(m) => {
                let c = m.count();
                (c <= m.limit, m.limit.saturating_sub(c))
            }
            Backend::Service { .. } => {
                let r = self.call(0, 0, 0).await;
                let remaining = r.statuses.first().map_or(0, |s| s.limit_remaining);
                (overall(&r) == Code::Ok, u64::from(remaining))
            }
        }
    }

    /// The tokens charged against the budget at the end: the window's
    /// count. Past the limit a look only says "over", so a whole budget is
    /// given back (a settle of `budget`) until a look is admitted: the
    /// count is then what was given back plus what the look shows spent.
    /// (A refund is only made while the count is past the budget, so it is
    /// never clamped at 0.) It leaves the budget emptied.
    pub(crate) async fn charged(&self, budget: u64) -> u64 {
        if let Backend::Model(m) = self {
            return m.count();
        }
        let mut given = 0;
        for _ in 0..10_000 {
            let (admitted, remaining) = self.look().await;
            if admitted {
                return given + budget - remaining;
            }
            self.settle(0, budget).await;
            given += budget;
        }
        panic!("a count of more than 10 000 budgets");
    }
}

/// What streams did.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct Tally {
    /// Calls made (the model's settles are none).
    pub(crate) calls: u64,
    /// Requests admitted.
    pub(crate) admitted: u64,
    /// Requests denied.
    pub(crate) denied: u64,
    /// Tokens used by admitted requests.
    pub(crate) used: u64,
    /// The largest usage of one admitted request.
    pub(crate) largest: u64,
    /// The `max_tokens` of the admitted reservations.
    pub(crate) reserved: u64,
    /// The `max_tokens` of the denied reservations.
    pub(crate) denied_hits: u64,
    /// The tokens given back by settles.
    pub(crate) refunded: u64,
}

impl Tally {
    fn add(&mut self, o: Tally) {
        self.calls += o.calls;
        self.admitted += o.admitted;
        self.denied += o.denied;
        self.used += o.used;
        self.largest = self.largest.max(o.largest);
        self.reserved += o.reserved;
        self.denied_hits += o.denied_hits;
        self.refunded += o.refunded;
    }
}

/// One run: the streams' tally, what the budget was charged, the time.
#[derive(Clone, Debug)]
pub(crate) struct Outcome {
    /// The pattern.
    pub(crate) pattern: Pattern,
    /// The trace.
    pub(crate) trace: Trace,
    /// The streams' tally.
    pub(crate) tally: Tally,
    /// The look at the end (before [`Outcome::charged`] was measured):
    /// admitted, remaining.
    pub(crate) last_look: (bool, u64),
    /// Tokens charged against the budget (the window's count at the end).
    pub(crate) charged: u64,
    /// The streams' time, from release to the last one's end.
    pub(crate) elapsed: Duration,
    /// Whether it ran on the model (its calls/s is its pacing's, no
    /// measure of the Go service).
    pub(crate) model: bool,
}

impl Outcome {
    /// Tokens used by admitted requests past the budget.
    pub(crate) fn overspend(&self) -> u64 {
        self.tally.used.saturating_sub(self.trace.budget)
    }

    /// The bound on [`overspend`](Self::overspend): none for a reservation
    /// (0); for report only, the streams × the largest usage of one
    /// admitted request (derived in `tests/budget.rs`).
    pub(crate) fn bound(&self) -> u64 {
        match self.pattern {
            Pattern::Reserve => 0,
            Pattern::ReportOnly => self.trace.streams as u64 * self.tally.largest,
        }
    }

    /// Calls per second.
    pub(crate) fn calls_per_second(&self) -> f64 {
        self.tally.calls as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

async fn stream(backend: Backend, pattern: Pattern, trace: Trace, i: usize) -> Tally {
    let mut rng = Rng::new(trace.seed, i as u64);
    let mut t = Tally::default();
    let mut denials = 0;
    for _ in 0..trace.iterations {
        let d = trace.draw(&mut rng);
        let hits = match pattern {
            Pattern::ReportOnly => 0,
            Pattern::Reserve => d.max_tokens,
        };
        t.calls += 1;
        if !backend.ask(i, hits).await {
            t.denied += 1;
            if pattern == Pattern::Reserve {
                t.denied_hits += d.max_tokens;
            }
            denials += 1;
            if denials >= trace.patience {
                break;
            }
            tokio::task::yield_now().await;
            continue;
        }
        denials = 0;
        t.admitted += 1;
        // the response: its tokens are used meanwhile
        for _ in 0..d.pause {
            tokio::task::yield_now().await;
        }
        t.used += d.usage;
        t.largest = t.largest.max(d.usage);
        match pattern {
            Pattern::ReportOnly => {
                // (a failed request has nothing to report)
                if d.usage > 0 {
                    t.calls += 1;
                    // the report's answer is ignored, as Envoy does
                    backend.ask(i, d.usage).await;
                }
            }
            Pattern::Reserve => {
                let back = d.max_tokens - d.usage;
                t.reserved += d.max_tokens;
                t.refunded += back;
                if backend.settle(i, back).await {
                    t.calls += 1;
                }
            }
        }
    }
    t
}

/// Runs `trace.streams` streams of `pattern` on `backend` at once, then
/// looks at the budget and measures what it was charged.
pub(crate) async fn run(backend: Backend, pattern: Pattern, trace: &Trace) -> Outcome {
    let start = Arc::new(tokio::sync::Barrier::new(trace.streams + 1));
    let tasks: Vec<_> = (0..trace.streams)
        .map(|i| {
            let (backend, trace, start) = (backend.clone(), trace.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                stream(backend, pattern, trace, i).await
            })
        })
        .collect();
    start.wait().await;
    let began = Instant::now();
    let mut tally = Tally::default();
    for t in tasks {
        tally.add(t.await.expect("a stream"));
    }
    let elapsed = began.elapsed();
    let last_look = backend.look().await;
    let charged = backend.charged(trace.budget).await;
    Outcome {
        pattern,
        trace: trace.clone(),
        tally,
        last_look,
        charged,
        elapsed,
        model: matches!(backend, Backend::Model(_)),
    }
}

/// The table's header (Markdown).
pub(crate) fn header() -> String {
    "| seed | pattern | budget | used by admitted | charged | overspend | bound | over-charge | calls/s |\n\
     |---:|---|---:|---:|---:|---:|---:|---:|---:|"
        .to_owned()
}

/// One row of the table for `o`, named `name`.
pub(crate) fn row(name: &str, o: &Outcome) -> String {
    let budget = o.trace.budget;
    let pct = |n: u64| 100.0 * n as f64 / budget as f64;
    let over = o.overspend();
    let over_charge = o.charged.saturating_sub(o.tally.used);
    let rate = if o.model {
        "–".to_owned()
    } else {
        format!("{:.0}", o.calls_per_second())
    };
    format!(
        "| {} | {name} | {budget} | {} | {} | {over} ({:.1}%) | {} ({:.1}%) | {over_charge} ({:.1}%) | {rate} |",
        o.trace.seed,
        o.tally.used,
        o.charged,
        pct(over),
        o.bound(),
        pct(o.bound()),
        pct(over_charge),
    )
}
