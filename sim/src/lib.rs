//! A simulator: any quota on a [`MemoryStore`] under a [`ManualClock`],
//! against a traffic [`Pattern`], drawn as an SVG chart, summed up in ASCII,
//! and checked against its strategy's documented guarantee: a tool of the
//! repository (not published), built on the library's public API only; what
//! it asks of a strategy it asks the strategy (e.g. [`Strategy::bound`],
//! [`Strategy::delays`]), so a new strategy needs no change here.
//!
//! ```
//! use tower_redis_ratelimit_sim::{Pattern, Scenario};
//! use tower_redis_ratelimit::strategy::Strategy;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // 10 per 10 s; 1 request, then 15 just before and 15 just after the window edge
//! let fixed = Scenario::standard(Strategy::FixedWindow, Pattern::BoundaryBurst).run()?;
//! let log = Scenario::standard(Strategy::SlidingWindowLog, Pattern::BoundaryBurst).run()?;
//! assert_eq!(fixed.most_in_one_period(), 19); // 2n - 1 across the edge
//! assert_eq!(log.most_in_one_period(), 10); // never more than n
//! fixed.check()?; // each within its documented guarantee
//! log.check()?;
//!
//! let svg: String = fixed.svg()?; // requests vs admitted, remaining, retry-after
//! assert!(svg.starts_with("<svg"));
//! print!("{}", fixed.summary()); // the same as ASCII
//! # Ok(())
//! # }
//! ```
//!
//! The run is deterministic, to the byte: arrival times are integer
//! microseconds, the clock is manual, nothing is random, and the chart's
//! text is written as SVG `<text>` elements (no font is loaded). The
//! charts under `docs/sim/` are [`Scenario::standard`] runs of every
//! strategy and pattern, written by `cargo run -p tower-redis-ratelimit-sim`
//! and checked by `sim/tests/simulate.rs`.
//!
//! A scenario sends each request at its time with
//! [`RateLimiter::check`](tower_redis_ratelimit::RateLimiter::check); an admitted
//! request holding a [`Lease`] (a concurrency quota)
//! keeps it for [`hold`](Scenario::hold), then
//! [releases](tower_redis_ratelimit::RateLimiter::release) it. Every tenth of the traffic
//! period each client's state is [peeked](tower_redis_ratelimit::RateLimiter::peek) for the
//! chart's "remaining" line.

mod chart;
mod check;
mod pattern;
mod summary;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

pub use check::Violation;
pub use pattern::Pattern;

use tower_redis_ratelimit::clock::ManualClock;
use tower_redis_ratelimit::decision::Lease;
use tower_redis_ratelimit::error::{ConfigError, StoreError};
use tower_redis_ratelimit::strategy::Strategy;
use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimiter};

/// The rate of [`Scenario::standard`]: 10 requests per 10 s (one a second).
pub const STANDARD_RATE: Rate = Rate::new(10, Duration::from_secs(10));

/// How long an admitted request of [`Scenario::standard`] holds its
/// concurrency lease (10 leases held 10 s each: at most one a second, the
/// [`STANDARD_RATE`]).
pub const STANDARD_HOLD: Duration = Duration::from_secs(10);

/// The manual clock's reading at a run's start, before alignment: the
/// start is the next multiple of the quota's period, so aligned windows
/// (the sliding window counter's) begin at the run's period marks.
const START_US: u64 = 1_000_000_000_000;

/// The longest traffic period a scenario takes (as a quota's).
const MAX_PERIOD: Duration = Duration::from_secs(366 * 86_400);

/// A quota, the traffic sent to it, and how long admitted requests hold a
/// lease: [`run`](Self::run) it for a [`Simulation`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Scenario {
    quota: Quota,
    pattern: Pattern,
    traffic: Option<Rate>,
    hold: Duration,
}

impl Scenario {
    /// `pattern` sent to one `quota`. The pattern is scaled to the quota's
    /// rate; for a concurrency quota (whose rate's period is its lease
    /// timeout) to `n` requests per [`hold`](Self::hold) instead. Change it
    /// with [`traffic`](Self::traffic).
    pub fn new(quota: Quota, pattern: Pattern) -> Self {
        Self {
            quota,
            pattern,
            traffic: None,
            hold: STANDARD_HOLD,
        }
    }

    /// The scenarios of the committed charts: `strategy` at
    /// [`STANDARD_RATE`] (burst: its count), or `Quota::concurrency(10)`
    /// whose leases are held [`STANDARD_HOLD`], so every strategy sees the
    /// same traffic.
    pub fn standard(strategy: Strategy, pattern: Pattern) -> Self {
        let quota = if strategy.holds_leases() {
            // its rate's period is the lease timeout: `Quota::concurrency`'s
            Quota::new(
                strategy,
                Rate::new(STANDARD_RATE.count(), Quota::DEFAULT_LEASE_TIMEOUT),
            )
        } else {
            Quota::new(strategy, STANDARD_RATE)
        };
        Self::new(quota, pattern).traffic(STANDARD_RATE)
    }

    /// The reference rate the pattern is scaled to (see [`Pattern`]): at
    /// most 200 000 requests in a run, a period from 1 ms to 366 days.
    pub fn traffic(mut self, rate: Rate) -> Self {
        self.traffic = Some(rate);
        self
    }

    /// How long an admitted request holds its lease before it is released
    /// (concurrency quotas; default [`STANDARD_HOLD`]).
    pub fn hold(mut self, hold: Duration) -> Self {
        self.hold = hold;
        self
    }

    /// The traffic rate in force.
    fn traffic_rate(&self) -> Rate {
        self.traffic.unwrap_or_else(|| {
            if self.quota.strategy().holds_leases() {
                Rate::new(self.quota.rate().count(), self.hold)
            } else {
                self.quota.rate()
            }
        })
    }

    /// Runs the scenario. Errors: the quota's [`ConfigError`], a traffic
    /// rate out of range, or (never expected from a [`MemoryStore`]) a store
    /// error.
    pub fn run(&self) -> Result<Simulation, SimError> {
        let (limiter, clock) = limiter_at(&self.quota, Duration::ZERO)?;
        let derived = self.traffic.is_none() && self.quota.strategy().holds_leases();
        if self.hold > MAX_PERIOD || (derived && self.hold < Duration::from_millis(1)) {
            return Err(SimError::Traffic(
                "the hold must be from 1 ms to 366 days (without a traffic rate, a \
                 concurrency scenario sends its requests one hold apart)"
                    .into(),
            ));
        }
        let traffic = self.traffic_rate();
        if traffic.count() == 0 {
            return Err(SimError::Traffic(
                "the traffic rate's count must be at least 1".into(),
            ));
        }
        if traffic.period() < Duration::from_millis(1) || traffic.period() > MAX_PERIOD {
            return Err(SimError::Traffic(
                "the traffic rate's period must be from 1 ms to 366 days".into(),
            ));
        }
        // (build checked the quota's period: 1 µs to 366 days)
        let quota_period = us(self.quota.rate().period()).max(1);
        let start = START_US.div_ceil(quota_period) * quota_period;
        let period = us(traffic.period());
        let arrivals = self.pattern.arrivals(traffic.count(), period)?;
        let end = self.pattern.periods() * period;
        let mut run = Run {
            limiter,
            clock,
            start,
            keys: (1..=self.pattern.clients())
                .map(|c| format!("client-{c}"))
                .collect(),
            bin: (period / 10).max(1),
            next_sample: 0,
            releases: BinaryHeap::new(),
            leases: Vec::new(),
            requests: Vec::with_capacity(arrivals.len()),
            samples: Vec::new(),
            hold: us(self.hold),
        };
        for a in &arrivals {
            run.until(a.at)?;
            run.request(a.at, a.client)?;
        }
        run.until(end)?;
        Ok(Simulation {
            quota: self.quota.clone(),
            pattern: self.pattern,
            traffic,
            hold: self.hold,
            start,
            bin: run.bin,
            duration: end,
            requests: run.requests,
            samples: run.samples,
        })
    }
}

/// A duration in whole microseconds (every duration here is below 2^64 µs).
fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A run in progress.
struct Run {
    limiter: RateLimiter,
    clock: ManualClock,
    /// The clock's reading at time 0.
    start: u64,
    keys: Vec<String>,
    /// The sampling interval (µs): a tenth of the traffic period.
    bin: u64,
    /// The index of the next sample time (`next_sample × bin`).
    next_sample: u64,
    /// Leases to release: (time, index into `leases`), earliest first.
    releases: BinaryHeap<Reverse<(u64, usize)>>,
    leases: Vec<Option<Lease>>,
    requests: Vec<Request>,
    samples: Vec<Sample>,
    hold: u64,
}

impl Run {
    fn at(&self, t: u64) {
        self.clock.set(Duration::from_micros(self.start + t));
    }

    /// Releases and samples due at or before `t`, in time order (a
    /// release before a sample at the same time).
    fn until(&mut self, t: u64) -> Result<(), SimError> {
        loop {
            let sample = self.next_sample * self.bin;
            let release = self.releases.peek().map(|r| r.0);
            match release {
                Some((at, i)) if at <= t && at <= sample => {
                    self.releases.pop();
                    self.at(at);
                    if let Some(lease) = self.leases.get_mut(i).and_then(Option::take) {
                        ready(self.limiter.release(&lease))?;
                    }
                }
                _ if sample <= t => {
                    self.at(sample);
                    for (client, key) in self.keys.iter().enumerate() {
                        let d = ready(self.limiter.peek(key))?;
                        self.samples.push(Sample {
                            at: Duration::from_micros(sample),
                            client,
                            remaining: d.remaining(),
                        });
                    }
                    self.next_sample += 1;
                }
                _ => return Ok(()),
            }
        }
    }

    fn request(&mut self, t: u64, client: usize) -> Result<(), SimError> {
        self.at(t);
        let key = self.keys.get(client).map_or("client-0", String::as_str);
        let mut d = ready(self.limiter.check(key))?;
        let released_at = d.take_lease().map(|lease| {
            let at = t + self.hold;
            self.releases.push(Reverse((at, self.leases.len())));
            self.leases.push(Some(lease));
            Duration::from_micros(at)
        });
        self.requests.push(Request {
            at: Duration::from_micros(t),
            client,
            allowed: d.allowed(),
            remaining: d.remaining(),
            retry_after: d.retry_after(),
            delay: d.delay(),
            released_at,
        });
        Ok(())
    }
}

/// A fresh limiter of a run's quota, replayed up to some request.
pub(crate) struct Replay {
    limiter: RateLimiter,
    clock: ManualClock,
    start: u64,
}

impl Replay {
    /// Sends one more request (cost 1) at `t` µs after the run's start: admitted?
    pub(crate) fn try_at(&self, t: u64) -> Result<bool, SimError> {
        self.clock.set(Duration::from_micros(self.start + t));
        Ok(ready(self.limiter.check("replay"))?.allowed())
    }
}

impl Simulation {
    /// A limiter like the run's, on a store of its own, that has admitted
    /// the admitted ones of `requests` (one client's) at their times.
    pub(crate) fn replay(&self, requests: &[&Request]) -> Result<Replay, SimError> {
        let (limiter, clock) = limiter_at(&self.quota, Duration::from_micros(self.start))?;
        let replay = Replay {
            limiter,
            clock,
            start: self.start,
        };
        for r in requests.iter().filter(|r| r.allowed) {
            if !replay.try_at(us(r.at))? {
                return Err(SimError::Traffic(format!(
                    "the replay denied the request admitted at {} s",
                    seconds(us(r.at))
                )));
            }
        }
        Ok(replay)
    }
}

/// The output of a future that a [`MemoryStore`] completes at once.
fn ready<T>(fut: impl Future<Output = Result<T, StoreError>>) -> Result<T, SimError> {
    let mut fut = pin!(fut);
    match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(r) => r.map_err(SimError::Store),
        Poll::Pending => Err(SimError::Pending),
    }
}

/// One request of a run and what the limiter answered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Request {
    /// When it was sent, since the run's start.
    pub at: Duration,
    /// Which client sent it (`0` is the key `client-1`).
    pub client: usize,
    /// Whether it was admitted.
    pub allowed: bool,
    /// The decision's `remaining`.
    pub remaining: u64,
    /// The decision's `retry_after` (denied requests).
    pub retry_after: Option<Duration>,
    /// The decision's `delay` (leaky bucket: when it is served, after `at`).
    pub delay: Option<Duration>,
    /// When its lease is released, since the run's start (concurrency:
    /// `at` plus the hold; a release due after the run's end is not sent).
    pub released_at: Option<Duration>,
}

/// A client's `remaining`, peeked every tenth of the traffic period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sample {
    /// When, since the run's start (before the requests sent then).
    pub at: Duration,
    /// Which client.
    pub client: usize,
    /// What a peek said was left.
    pub remaining: u64,
}

/// A finished run: its requests and samples, as a chart, a summary, and the
/// check of its strategy's guarantee.
#[derive(Debug, Clone)]
pub struct Simulation {
    quota: Quota,
    pattern: Pattern,
    traffic: Rate,
    hold: Duration,
    /// The manual clock's reading at time 0 (µs).
    start: u64,
    /// The sampling and chart bin (µs).
    bin: u64,
    /// The run's length (µs).
    duration: u64,
    requests: Vec<Request>,
    samples: Vec<Sample>,
}

impl Simulation {
    /// The quota simulated.
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// Its strategy.
    pub fn strategy(&self) -> Strategy {
        self.quota.strategy()
    }

    /// The traffic pattern.
    pub fn pattern(&self) -> Pattern {
        self.pattern
    }

    /// The rate the pattern was scaled to.
    pub fn traffic(&self) -> Rate {
        self.traffic
    }

    /// How long the run lasted.
    pub fn duration(&self) -> Duration {
        Duration::from_micros(self.duration)
    }

    /// Every request, in the order sent.
    pub fn requests(&self) -> &[Request] {
        &self.requests
    }

    /// Every sample, in time order (clients in order at each time).
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// How many requests were admitted.
    pub fn admitted(&self) -> usize {
        self.requests.iter().filter(|r| r.allowed).count()
    }

    /// The most requests one client had admitted within any span of one
    /// quota period (`[t, t + period)`).
    pub fn most_in_one_period(&self) -> usize {
        let period = us(self.quota.rate().period());
        (0..self.pattern.clients())
            .map(|c| most_within(&self.admitted_at(c), period))
            .max()
            .unwrap_or(0)
    }

    /// The chart's file name: `<strategy>-<pattern>.svg`.
    pub fn file_name(&self) -> String {
        format!("{}-{}.svg", self.strategy(), self.pattern)
    }

    /// The number of chart bins (each one sampling interval wide).
    fn bins(&self) -> usize {
        usize::try_from(self.duration.div_ceil(self.bin)).unwrap_or(0)
    }

    /// The admission times (µs since the start) of one client.
    fn admitted_at(&self, client: usize) -> Vec<u64> {
        self.requests
            .iter()
            .filter(|r| r.allowed && r.client == client)
            .map(|r| us(r.at))
            .collect()
    }

    /// The quota in words, e.g. `10 per 10 s, burst 10`.
    fn quota_label(&self) -> String {
        let q = &self.quota;
        let period = seconds(us(q.rate().period()));
        if q.strategy().holds_leases() {
            format!(
                "{} in flight, held {} s",
                q.rate().count(),
                seconds(us(self.hold))
            )
        } else if q.strategy().takes_burst() {
            format!("{} per {period} s, burst {}", q.rate().count(), q.limit())
        } else {
            format!("{} per {period} s", q.rate().count())
        }
    }
}

/// The most times within any span `[t, t + width)` (sorted input).
fn most_within(times: &[u64], width: u64) -> usize {
    let mut lo = 0;
    let mut best = 0;
    for (hi, &t) in times.iter().enumerate() {
        while times[lo] + width <= t {
            lo += 1;
        }
        best = best.max(hi + 1 - lo);
    }
    best
}

/// Microseconds as seconds with at most three decimals, fixed: `1.5`, `10`, `0.001`.
fn seconds(us: u64) -> String {
    let (s, ms) = (us / 1_000_000, (us % 1_000_000).div_ceil(1000));
    let (s, ms) = if ms == 1000 { (s + 1, 0) } else { (s, ms) };
    if ms == 0 {
        format!("{s}")
    } else {
        format!("{s}.{ms:03}").trim_end_matches('0').to_owned()
    }
}

/// Why a scenario could not run or be drawn.
#[derive(Debug)]
#[non_exhaustive]
pub enum SimError {
    /// The quota was rejected by the limiter's builder.
    Config(ConfigError),
    /// The traffic rate, hold or pattern name is out of range.
    Traffic(String),
    /// The store failed (never expected of a [`MemoryStore`]).
    Store(StoreError),
    /// A store call did not complete at once (never expected of a [`MemoryStore`]).
    Pending,
    /// The chart could not be drawn.
    Chart(String),
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimError::Config(e) => write!(f, "simulation: {e}"),
            SimError::Traffic(m) => write!(f, "simulation: {m}"),
            SimError::Store(e) => write!(f, "simulation: {e}"),
            SimError::Pending => f.write_str("simulation: a memory store call did not complete"),
            SimError::Chart(m) => write!(f, "simulation: chart: {m}"),
        }
    }
}

impl std::error::Error for SimError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SimError::Config(e) => Some(e),
            SimError::Store(e) => Some(e),
            _ => None,
        }
    }
}

/// A limiter of `quota` alone on a fresh [`MemoryStore`], under a manual
/// clock starting at `start` (what a run and a replay decide with).
fn limiter_at(quota: &Quota, start: Duration) -> Result<(RateLimiter, ManualClock), SimError> {
    let clock = ManualClock::new(start);
    let limiter = RateLimiter::builder()
        .store(MemoryStore::new())
        .prefix("sim")
        .quota(quota.clone())
        .clock(clock.clone())
        .build()
        .map_err(SimError::Config)?;
    Ok((limiter, clock))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_are_written_with_fixed_decimals() {
        assert_eq!(seconds(0), "0");
        assert_eq!(seconds(10_000_000), "10");
        assert_eq!(seconds(1_500_000), "1.5");
        assert_eq!(seconds(1), "0.001");
        assert_eq!(seconds(9_999_999), "10");
        assert_eq!(seconds(250_000), "0.25");
    }

    #[test]
    fn most_within_counts_half_open_spans() {
        assert_eq!(most_within(&[], 10), 0);
        assert_eq!(most_within(&[0, 5, 10, 11], 10), 3);
        assert_eq!(most_within(&[0, 0, 0], 1), 3);
    }

    #[test]
    fn bad_traffic_is_an_error_not_a_panic() {
        let q = Quota::gcra(Rate::per_second(1));
        let e = Scenario::new(q.clone(), Pattern::Steady)
            .traffic(Rate::new(0, Duration::from_secs(1)))
            .run()
            .unwrap_err();
        assert!(e.to_string().contains("count"), "{e}");
        let e = Scenario::new(q.clone(), Pattern::ManyClients)
            .traffic(Rate::per_second(1_000_000))
            .run()
            .unwrap_err();
        assert!(e.to_string().contains("at most"), "{e}");
        let e = Scenario::new(Quota::gcra(Rate::per_second(0)), Pattern::Steady)
            .run()
            .unwrap_err();
        assert!(matches!(e, SimError::Config(_)), "{e}");
        assert!("nope".parse::<Pattern>().is_err());
    }
}
