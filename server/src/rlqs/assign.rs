//! The quota service's core, free of protobuf: from one stream's usage
//! reports to the actions it sends back, every token an Envoy may admit
//! taken from the bucket's shared budget before it is assigned.
//!
//! # How an assignment is paid for
//!
//! Each limited bucket has a budget in the store: a token bucket of the
//! rule's `requests_per_unit` per `unit` (rate ρ), holding at least one
//! lease (capacity `C`). An Envoy reporting the bucket is assigned a token
//! bucket of its own (`max_tokens` M, rate r ≤ its share of ρ) for the
//! assignment's TTL `T`. Before the service sends it, it takes from the
//! budget, in one atomic store call, all the assignment can admit:
//!
//! - a new token bucket (Envoy starts it full): `M + r·(T + m)`;
//! - the same one again (Envoy keeps its state and restarts the TTL):
//!   `r·(until − paid)`, the rate over the time added.
//!
//! (`m`, [`MARGIN`], covers the time from sending to Envoy applying it.)
//! A take the budget refuses is retried once with what it has left, else
//! the bucket is assigned `DENY_ALL`. So an Envoy admits only what was
//! paid for, at most `T + m + R⁺` after it was paid (`R⁺`: the reporting
//! interval, at least 1 s, the most its `M` tokens can date back), and
//! over any window of length `t` all Envoys together admit at most
//! `C + ρ·(t + T + m + R⁺)`, however many there are, however they join,
//! leave, burst, go silent or reconnect, and whichever instances of the
//! service they talk to (the guide's quota service chapter states it
//! with the Envoy settings it assumes).
//!
//! # How the limit is divided
//!
//! Each report also adds the bucket's requests (allowed and denied) to
//! the store's counter of its reporting interval (of the wall clock, the
//! same at every instance) and reads the two whole intervals before: `D`,
//! every Envoy's requests per second then. An Envoy sending `d` a second
//! gets the rate `ρ·d/D` (at least one token per reporting interval), so
//! the shares come to `ρ` and follow a change within two intervals. A
//! rate within a quarter of the one it holds is kept, so that Envoy keeps
//! its bucket's state.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use futures_util::StreamExt;
use tower_redis_ratelimit::clock::Clock;
use tower_redis_ratelimit::error::ConfigError as LimiterConfigError;
use tower_redis_ratelimit::store::Store;
use tower_redis_ratelimit::{Quota, Rate, RateLimiter};

use super::config::{Answer, BadId, Blanket, BucketId, DomainConfig, OnStoreError, bucket_id};
use super::metrics::{QuotaMetrics, RuleCounters};
use crate::limits::prefix_for;

/// The time allowed from sending an assignment to Envoy applying it: an
/// assignment is paid for this long past its TTL.
pub const MARGIN: Duration = Duration::from_secs(1);

/// The most requests one report of one bucket counts (allowed plus
/// denied): more is counted as this many.
pub const MAX_REPORTED: u64 = 1 << 40;

/// The TTL of the answer to a report of a domain no file configures.
pub const UNKNOWN_DOMAIN_TTL: Duration = Duration::from_secs(300);

/// A token bucket as Envoy runs it: it starts full with `max_tokens` and
/// gains `tokens_per_fill` every `fill_interval` (whole seconds), and is
/// kept, state and all, when the same one is assigned again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    /// `max_tokens`: what it holds when full (the burst).
    pub max_tokens: u32,
    /// `tokens_per_fill`.
    pub tokens_per_fill: u32,
    /// `fill_interval`, in whole seconds.
    pub fill_interval_secs: u32,
}

impl TokenBucket {
    /// Tokens per second.
    pub fn rate(&self) -> f64 {
        f64::from(self.tokens_per_fill) / f64::from(self.fill_interval_secs)
    }

    /// The bucket of the largest rate at most `rate` (> 0) whose fill
    /// interval is at most the reporting interval (or one second, or what
    /// one token a fill needs), and whose burst is one reporting interval's
    /// worth (at least one fill): so its tokens are never older than
    /// `max(interval, 1 s)` when it is full.
    fn for_rate(rate: f64, interval: Duration) -> TokenBucket {
        let longest = clamp_u32(interval.as_secs_f64().floor()).max(1);
        let (tokens_per_fill, fill_interval_secs) = if rate * f64::from(longest) >= 1.0 {
            // the fill interval of at most `longest` seconds that loses the
            // least of the rate to rounding down
            (1..=longest.min(60))
                .filter(|&i| rate * f64::from(i) >= 1.0)
                .map(|i| (clamp_u32((rate * f64::from(i)).floor()), i))
                .max_by(|a, b| {
                    let ra = f64::from(a.0) / f64::from(a.1);
                    let rb = f64::from(b.0) / f64::from(b.1);
                    ra.total_cmp(&rb).then(b.1.cmp(&a.1))
                })
                .unwrap_or((1, 1))
        } else {
            (1, clamp_u32((1.0 / rate).ceil()).max(1))
        };
        let per_second = f64::from(tokens_per_fill) / f64::from(fill_interval_secs);
        let burst = clamp_u32((per_second * interval.as_secs_f64()).floor());
        TokenBucket {
            max_tokens: burst.max(tokens_per_fill),
            tokens_per_fill,
            fill_interval_secs,
        }
    }
}

fn clamp_u32(x: f64) -> u32 {
    if x.is_nan() || x < 1.0 {
        1
    } else if x >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        x as u32
    }
}

/// What an assignment tells Envoy to do with a bucket's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Allow or deny every request.
    Blanket(Blanket),
    /// Decide by a local token bucket.
    TokenBucket(TokenBucket),
}

/// What the service sends for one bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// A quota assignment for `ttl` (whole seconds).
    Assign {
        /// How Envoy decides.
        strategy: Strategy,
        /// How long it lasts.
        ttl: Duration,
    },
    /// Forget the bucket (Envoy reports it again at its next request).
    Abandon,
}

/// One bucket's usage in a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    /// The bucket id's entries, as reported.
    pub id: Vec<(String, String)>,
    /// Requests Envoy allowed since its last report of the bucket.
    pub allowed: u64,
    /// Requests it denied.
    pub denied: u64,
}

/// What the service last sent for a bucket of a stream.
#[derive(Debug, Clone)]
struct Sent {
    strategy: Strategy,
    /// When it was sent, and its TTL.
    at: Duration,
    ttl: Duration,
    /// For a token bucket: until when its rate is paid for, and what was
    /// paid beyond it (a fraction of a token, rounding up).
    paid_until: Duration,
    credit: f64,
    /// The budget that paid for it: a token bucket is carried over only
    /// on the budget that paid for it.
    budget: Option<Arc<str>>,
}

/// A stream's state of one bucket.
#[derive(Debug, Clone, Default)]
struct Held {
    sent: Option<Sent>,
    idle_since: Option<Duration>,
    /// When the store was last asked for it, and the requests reported
    /// since that it did not see yet.
    decided_at: Option<Duration>,
    pending: u64,
}

/// One Envoy's stream: the buckets it reported, with what was assigned.
/// Dropping it gives back its place under the service's bucket cap.
#[derive(Debug)]
pub struct QuotaStream {
    buckets: HashMap<BucketId, Held>,
    counted: Arc<AtomicUsize>,
    metrics: Arc<QuotaMetrics>,
}

impl QuotaStream {
    /// The buckets it holds.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

impl Drop for QuotaStream {
    fn drop(&mut self) {
        self.counted
            .fetch_sub(self.buckets.len(), Ordering::Relaxed);
        self.metrics.stream_closed(self.buckets.len());
    }
}

/// One limited rule's budget and demand counter.
struct Budget {
    /// The rule, its limit and window: what a carried-over assignment
    /// must have been paid by.
    id: Arc<str>,
    budget: RateLimiter,
    demand: RateLimiter,
    /// ρ, tokens per second.
    rate: f64,
}

struct RuleRt {
    budget: Option<Budget>,
    counters: Arc<RuleCounters>,
}

struct DomainRt {
    config: DomainConfig,
    rules: Vec<RuleRt>,
    unmatched: Arc<RuleCounters>,
}

/// Builds a limiter of one quota under a prefix.
type Make = dyn Fn(&str, Quota) -> Result<RateLimiter, LimiterConfigError> + Send + Sync;

/// Why a set of quota files cannot be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaBuildError(pub String);

impl std::fmt::Display for QuotaBuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for QuotaBuildError {}

/// The quota service's options.
#[derive(Debug, Clone)]
pub struct QuotaOptions {
    /// The budgets' clock (the store's by default; a manual one in tests).
    pub clock: Clock,
    /// The most buckets all streams together hold (default 200,000: with
    /// ids of at most 1 KiB, under 300 MB):
    /// past it, a new bucket is answered as past a stream's cap.
    pub max_buckets: usize,
    /// The most buckets of one report decided at once (default 64).
    pub concurrency: usize,
}

impl Default for QuotaOptions {
    fn default() -> Self {
        QuotaOptions {
            clock: Clock::Store,
            max_buckets: 200_000,
            concurrency: 64,
        }
    }
}

/// The rate limit quota service's core: the running configuration, the
/// budgets, and what each report is answered.
///
/// Clones share everything; [`reload`](Self::reload) through one is seen
/// by all.
#[derive(Clone)]
pub struct QuotaService {
    shared: Arc<Shared>,
}

struct Shared {
    current: ArcSwap<Running>,
    make: Arc<Make>,
    metrics: Arc<QuotaMetrics>,
    buckets: Arc<AtomicUsize>,
    options: QuotaOptions,
    started: Instant,
}

struct Running {
    domains: HashMap<String, Arc<DomainRt>>,
}

impl std::fmt::Debug for QuotaService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuotaService")
            .field("domains", &self.shared.current.load().domains.len())
            .finish_non_exhaustive()
    }
}

impl QuotaService {
    /// The service over `configs` (one per domain), its budgets on
    /// `store`.
    pub fn new<S: Store + Clone>(
        configs: Vec<DomainConfig>,
        store: S,
        options: QuotaOptions,
    ) -> Result<Self, QuotaBuildError> {
        let clock = options.clock.clone();
        let make: Arc<Make> = Arc::new(move |prefix: &str, quota: Quota| {
            RateLimiter::builder()
                .store(store.clone())
                .prefix(prefix)
                .quota(quota)
                .clock(clock.clone())
                .build()
        });
        let metrics = Arc::new(QuotaMetrics::default());
        let running = build(&configs, &*make, &metrics)?;
        Ok(QuotaService {
            shared: Arc::new(Shared {
                current: ArcSwap::from_pointee(running),
                make,
                metrics,
                buckets: Arc::default(),
                options,
                started: Instant::now(),
            }),
        })
    }

    /// Swaps in `configs`: streams answer by them from their next report.
    pub fn reload(&self, configs: Vec<DomainConfig>) -> Result<(), QuotaBuildError> {
        let running = build(&configs, &*self.shared.make, &self.shared.metrics)?;
        self.shared.current.store(Arc::new(running));
        Ok(())
    }

    /// The service's statistics.
    pub fn metrics(&self) -> Arc<QuotaMetrics> {
        self.shared.metrics.clone()
    }

    /// The service's clock, what [`report`](Self::report) takes as `now`
    /// when it serves Envoys: monotonic, since the service was built (the
    /// assignments' times; a step of the system's clock moves nothing).
    pub fn now(&self) -> Duration {
        self.shared.started.elapsed()
    }

    /// The clock of the demand's reporting intervals, the same at every
    /// instance: the budgets' clock when it is manual, else the system's
    /// time since the Unix epoch (keep the instances' clocks synchronised:
    /// a skew only blurs the shares, never the bound).
    fn wall(&self) -> Duration {
        match &self.shared.options.clock {
            Clock::Manual(m) => m.now(),
            _ => SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default(),
        }
    }

    /// A new stream's state.
    pub fn stream(&self) -> QuotaStream {
        self.shared.metrics.stream_opened();
        QuotaStream {
            buckets: HashMap::new(),
            counted: self.shared.buckets.clone(),
            metrics: self.shared.metrics.clone(),
        }
    }

    /// The actions answering one report of `domain` on `stream` at `now`
    /// (the service's time, [`now`](Self::now)), each with its bucket id's
    /// entries as reported. A bucket whose id is empty or too large gets
    /// none (an action needs an id, and Envoy cannot be told).
    pub async fn report(
        &self,
        stream: &mut QuotaStream,
        domain: &str,
        usages: Vec<Usage>,
        now: Duration,
    ) -> Vec<(Vec<(String, String)>, Action)> {
        let running = self.shared.current.load_full();
        let metrics = &self.shared.metrics;
        let Some(rt) = running.domains.get(domain).cloned() else {
            metrics.unknown_domain(usages.len());
            let now_allowed = Sent {
                strategy: Strategy::Blanket(Blanket::AllowAll),
                at: now,
                ttl: UNKNOWN_DOMAIN_TTL,
                paid_until: now,
                credit: 0.0,
                budget: None,
            };
            return usages
                .into_iter()
                .map(|u| {
                    // a bucket this stream held now holds ALLOW_ALL: never
                    // carried over as if it still held a token bucket
                    if let Ok(id) = bucket_id(u.id.iter().cloned())
                        && let Some(h) = stream.buckets.get_mut(&id)
                    {
                        h.sent = Some(now_allowed.clone());
                    }
                    let action = Action::Assign {
                        strategy: Strategy::Blanket(Blanket::AllowAll),
                        ttl: UNKNOWN_DOMAIN_TTL,
                    };
                    (u.id, action)
                })
                .collect();
        };
        // one entry per bucket (a bucket reported twice: its usage added)
        let mut too_large = Vec::new();
        let mut merged: Vec<(BucketId, Usage)> = Vec::with_capacity(usages.len());
        let mut at: HashMap<BucketId, usize> = HashMap::new();
        for u in usages {
            match bucket_id(u.id.iter().cloned()) {
                Ok(id) => match at.get(&id) {
                    Some(&i) => {
                        let m = &mut merged[i].1;
                        m.allowed = m.allowed.saturating_add(u.allowed);
                        m.denied = m.denied.saturating_add(u.denied);
                    }
                    None => {
                        at.insert(id.clone(), merged.len());
                        merged.push((id, u));
                    }
                },
                Err(BadId::Empty) => metrics.id_refused("empty"),
                Err(BadId::TooLarge) => {
                    // denied, so that an id made too large (a long header)
                    // is no way around the rules; not remembered
                    metrics.id_refused("too_large");
                    too_large.push(u.id);
                }
            }
        }
        let config = &rt.config;
        let cap = &self.shared.buckets;
        let mut work = Vec::with_capacity(merged.len());
        let mut out: Vec<(Vec<(String, String)>, Action)> = too_large
            .into_iter()
            .map(|id| {
                let deny = Action::Assign {
                    strategy: Strategy::Blanket(Blanket::DenyAll),
                    ttl: config.assignment_ttl,
                };
                (id, deny)
            })
            .collect();
        for (id, usage) in merged {
            let held = match stream.buckets.remove(&id) {
                Some(h) => h,
                None if stream.buckets.len() + work.len() >= config.max_buckets_per_stream
                    || cap.load(Ordering::Relaxed) >= self.shared.options.max_buckets =>
                {
                    // past a cap: answered, not remembered
                    metrics.bucket_overflow();
                    out.push((
                        usage.id,
                        Action::Assign {
                            strategy: Strategy::Blanket(Blanket::DenyAll),
                            ttl: config.assignment_ttl,
                        },
                    ));
                    continue;
                }
                None => {
                    cap.fetch_add(1, Ordering::Relaxed);
                    metrics.bucket_added();
                    Held::default()
                }
            };
            work.push((id, usage, held));
        }
        let wall = self.wall();
        let decided: Vec<_> = futures_util::stream::iter(work)
            .map(|(id, usage, mut held)| {
                let rt = rt.clone();
                async move {
                    let action = decide(&rt, &id, &usage, &mut held, now, wall).await;
                    (id, usage, held, action)
                }
            })
            .buffer_unordered(self.shared.options.concurrency.max(1))
            .collect()
            .await;
        for (id, usage, held, action) in decided {
            if action == Some(Action::Abandon) {
                cap.fetch_sub(1, Ordering::Relaxed);
                metrics.bucket_removed();
            } else {
                stream.buckets.insert(id, held);
            }
            if let Some(a) = action {
                out.push((usage.id, a));
            }
        }
        out
    }
}

fn build(
    configs: &[DomainConfig],
    make: &Make,
    metrics: &Arc<QuotaMetrics>,
) -> Result<Running, QuotaBuildError> {
    let mut domains = HashMap::new();
    for c in configs {
        if domains.contains_key(&c.domain) {
            return Err(QuotaBuildError(format!(
                "{}: domain \"{}\" is configured by another file too",
                c.file, c.domain
            )));
        }
        let interval = c.reporting_interval;
        let lead = c.assignment_ttl + MARGIN + interval.max(Duration::from_secs(1));
        let mut rules = Vec::with_capacity(c.rules.len());
        for r in &c.rules {
            let counters = metrics.rule(&c.domain, &r.name);
            let budget = match r.answer {
                Answer::Blanket(_) => None,
                Answer::Limit { limit, window } => {
                    let rate = limit as f64 / window.as_secs_f64();
                    // room for one lease of the whole rate
                    let lease = (rate * lead.as_secs_f64()).ceil() as u64 + 1;
                    // named: a changed limit rescales the stored state rather than
                    // starting a new, full budget
                    let quota = Quota::token_bucket(Rate::new(limit, window))
                        .burst(limit.max(lease).min(super::config::MAX_LIMIT))
                        .name("budget");
                    // one counter per reporting interval, kept for four
                    let demand =
                        Quota::fixed_window(Rate::new(super::config::MAX_LIMIT, interval * 4));
                    let err = |e: LimiterConfigError| {
                        QuotaBuildError(format!(
                            "{}: buckets \"{}\" (line {}): {e}",
                            c.file, r.name, r.line
                        ))
                    };
                    Some(Budget {
                        id: format!("{}\0{}\0{limit}\0{}", c.domain, r.name, window.as_millis())
                            .into(),
                        budget: make(&prefix_for("rlqs", &c.domain, &r.name, "budget"), quota)
                            .map_err(err)?,
                        demand: make(&prefix_for("rlqs", &c.domain, &r.name, "demand"), demand)
                            .map_err(err)?,
                        rate,
                    })
                }
            };
            rules.push(RuleRt { budget, counters });
        }
        let unmatched = metrics.rule(&c.domain, "unmatched");
        domains.insert(
            c.domain.clone(),
            Arc::new(DomainRt {
                config: c.clone(),
                rules,
                unmatched,
            }),
        );
    }
    let mut names: Vec<(String, String)> = Vec::new();
    for c in configs {
        names.push((c.domain.clone(), "unmatched".to_owned()));
        names.extend(c.rules.iter().map(|r| (c.domain.clone(), r.name.clone())));
    }
    metrics.keep(&names);
    Ok(Running { domains })
}

/// The action for one bucket's report (`None`: nothing to send).
async fn decide(
    rt: &DomainRt,
    id: &BucketId,
    usage: &Usage,
    held: &mut Held,
    now: Duration,
    wall: Duration,
) -> Option<Action> {
    let config = &rt.config;
    let count = usage.allowed.saturating_add(usage.denied).min(MAX_REPORTED);
    if count == 0 {
        let idle = *held.idle_since.get_or_insert(now);
        if now.saturating_sub(idle) >= config.abandon_after {
            return Some(Action::Abandon);
        }
    } else {
        held.idle_since = None;
    }
    let ttl = config.assignment_ttl;
    let Some((i, key)) = config.lookup(id) else {
        rt.unmatched.reported(usage.allowed, usage.denied);
        return Some(blanket(held, config.unmatched, ttl, now));
    };
    let rule = &rt.rules[i];
    rule.counters.reported(usage.allowed, usage.denied);
    let Some(b) = &rule.budget else {
        let Answer::Blanket(bl) = config.rules[i].answer else {
            return None;
        };
        return Some(blanket(held, bl, ttl, now));
    };
    let interval = config.reporting_interval;
    // reports faster than the filter's: at most two decisions (store work)
    // an interval per bucket; meanwhile a paid assignment stands, and the
    // requests wait for the next decision
    if let Some(s) = &held.sent
        && held
            .decided_at
            .is_some_and(|d| now.saturating_sub(d) < interval / 2)
        && outlives_next_report(s, now, interval)
    {
        held.pending = held.pending.saturating_add(count);
        return None;
    }
    let since = held.decided_at.replace(now).map(|d| now.saturating_sub(d));
    let count = count
        .saturating_add(std::mem::take(&mut held.pending))
        .min(MAX_REPORTED);
    // everyone's demand: each decision adds its requests to the store's
    // counter of its reporting interval (of the wall clock, the same for
    // every instance), and reads the two whole intervals before (two, so
    // that reports falling on either side of an interval's end even out)
    let k = (wall.as_secs_f64() / interval.as_secs_f64()).floor() as u64;
    let counter = |k: u64| format!("{key}#{k}");
    let (added, one, two) = futures_util::future::join3(
        b.demand.check_n(counter(k).as_bytes(), count),
        b.demand.peek(counter(k.saturating_sub(1)).as_bytes()),
        b.demand.peek(counter(k.saturating_sub(2)).as_bytes()),
    )
    .await;
    let used = |d: tower_redis_ratelimit::Decision| d.limit().saturating_sub(d.remaining());
    let everyone = match (added, one, two) {
        (Ok(_), Ok(a), Ok(b)) => {
            used(a).saturating_add(used(b)) as f64 / (interval * 2).as_secs_f64()
        }
        _ => 0.0,
    };
    let floor = (1.0 / interval.as_secs_f64().ceil().max(1.0)).min(b.rate);
    // this Envoy's: its requests over the time since its last decision
    // (for a new one, those of its first report, over an interval)
    let mine = count as f64 / since.unwrap_or(interval).max(interval / 2).as_secs_f64();
    let share = if mine > 0.0 {
        b.rate * mine / everyone.max(mine)
    } else {
        floor
    };
    let target = share.clamp(floor, b.rate);
    let paid_until = now + ttl + MARGIN;
    // the same bucket again, when Envoy surely still holds it, paid by
    // this budget (not one of a rule changed or replaced since)
    let holding = held.sent.clone().and_then(|s| match s.strategy {
        Strategy::TokenBucket(tb)
            if now + MARGIN < s.at + s.ttl && s.budget.as_deref() == Some(&*b.id) =>
        {
            Some((s, tb))
        }
        _ => None,
    });
    let mut extended = false;
    if let Some((s, tb)) = &holding {
        let ratio = target / tb.rate();
        if TokenBucket::for_rate(target, interval) == *tb || (0.8..=1.25).contains(&ratio) {
            extended = true;
            match extend(b, &key, held, s, *tb, (now, ttl, paid_until), rule).await {
                Took::Yes => return Some(assign(s.strategy, ttl)),
                Took::No(_) => {}
                Took::Failed => return on_store_error(rule, config, held, ttl, now),
            }
        }
    }
    // a new bucket, paid in full (if it is the one Envoy still holds,
    // Envoy keeps that one's state: paid twice, never less)
    let mut tb = TokenBucket::for_rate(target, interval);
    let lead = (ttl + MARGIN).as_secs_f64();
    let cost = |tb: &TokenBucket| u64::from(tb.max_tokens) + (tb.rate() * lead).ceil() as u64;
    let mut tries = 0;
    loop {
        let c = cost(&tb);
        match take(b, &key, c).await {
            Took::Yes => {
                rule.counters.assigned(c);
                let paid = c as f64 - f64::from(tb.max_tokens);
                held.sent = Some(Sent {
                    strategy: Strategy::TokenBucket(tb),
                    at: now,
                    ttl,
                    paid_until,
                    credit: paid - tb.rate() * lead,
                    budget: Some(b.id.clone()),
                });
                return Some(assign(Strategy::TokenBucket(tb), ttl));
            }
            Took::No(left) if tries == 0 => {
                tries += 1;
                // a smaller bucket the Envoy holds, while its share grows:
                // kept (its time added paid), rather than a new one bought
                // at every report for its whole lease
                if !extended
                    && let Some((s, held_tb)) = &holding
                    && held_tb.rate() < target
                {
                    match extend(b, &key, held, s, *held_tb, (now, ttl, paid_until), rule).await {
                        Took::Yes => return Some(assign(s.strategy, ttl)),
                        Took::No(_) => {}
                        Took::Failed => return on_store_error(rule, config, held, ttl, now),
                    }
                }
                if left < 2 {
                    break;
                }
                // the largest rate whose new bucket fits in what is left
                let burst_secs = interval.max(Duration::from_secs(1)).as_secs_f64();
                let rate = (left - 1) as f64 / (lead + burst_secs);
                if rate < floor {
                    break;
                }
                tb = TokenBucket::for_rate(rate, interval);
                if cost(&tb) > left {
                    break;
                }
            }
            Took::No(_) => break,
            Took::Failed => return on_store_error(rule, config, held, ttl, now),
        }
    }
    rule.counters.budget_empty();
    Some(blanket(held, Blanket::DenyAll, ttl, now))
}

/// Extends the token bucket `tb` that the Envoy holds (`s` sent it) to
/// `paid_until`, paying its rate over the time added; on success `held`
/// records it sent again at `now` for `ttl`.
async fn extend(
    b: &Budget,
    key: &str,
    held: &mut Held,
    s: &Sent,
    tb: TokenBucket,
    (now, ttl, paid_until): (Duration, Duration, Duration),
    rule: &RuleRt,
) -> Took {
    let owed =
        (tb.rate() * paid_until.saturating_sub(s.paid_until).as_secs_f64() - s.credit).max(0.0);
    let cost = owed.ceil();
    let took = take(b, key, cost as u64).await;
    if let Took::Yes = took {
        rule.counters.assigned(cost as u64);
        held.sent = Some(Sent {
            strategy: s.strategy,
            at: now,
            ttl,
            paid_until,
            credit: cost - owed,
            budget: Some(b.id.clone()),
        });
    }
    took
}

enum Took {
    Yes,
    /// Refused, with what the budget has left.
    No(u64),
    Failed,
}

async fn take(b: &Budget, key: &str, cost: u64) -> Took {
    if cost == 0 {
        return Took::Yes;
    }
    match b.budget.check_n(key.as_bytes(), cost).await {
        Ok(d) if d.allowed() => Took::Yes,
        Ok(d) => Took::No(d.remaining()),
        Err(_) => Took::Failed,
    }
}

/// Whether Envoy surely still holds `s` when the next report comes (and
/// an answer to it arrives).
fn outlives_next_report(s: &Sent, now: Duration, interval: Duration) -> bool {
    now + interval + MARGIN < s.at + s.ttl
}

fn assign(strategy: Strategy, ttl: Duration) -> Action {
    Action::Assign { strategy, ttl }
}

fn blanket(held: &mut Held, b: Blanket, ttl: Duration, now: Duration) -> Action {
    let strategy = Strategy::Blanket(b);
    held.sent = Some(Sent {
        strategy,
        at: now,
        ttl,
        paid_until: now,
        credit: 0.0,
        budget: None,
    });
    assign(strategy, ttl)
}

/// A store failure: under `deny`, a paid token bucket Envoy still holds
/// runs out (nothing is sent), else every request is denied; under
/// `allow`, every one is allowed.
fn on_store_error(
    rule: &RuleRt,
    config: &DomainConfig,
    held: &mut Held,
    ttl: Duration,
    now: Duration,
) -> Option<Action> {
    rule.counters.store_error();
    match config.on_store_error {
        OnStoreError::Allow => Some(blanket(held, Blanket::AllowAll, ttl, now)),
        OnStoreError::Deny => match &held.sent {
            Some(s)
                if matches!(s.strategy, Strategy::TokenBucket(_))
                    && outlives_next_report(s, now, config.reporting_interval) =>
            {
                None
            }
            _ => Some(blanket(held, Blanket::DenyAll, ttl, now)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_buckets_never_exceed_the_rate_asked() {
        for rate in [0.001, 0.2, 0.5, 0.99, 1.0, 1.5, 10.0, 99.9, 1e6, 1e12] {
            for interval in [100, 1_000, 5_000, 60_000] {
                let tb = TokenBucket::for_rate(rate, Duration::from_millis(interval));
                assert!(tb.rate() <= rate + 1e-9, "{rate} {tb:?}");
                assert!(tb.max_tokens >= tb.tokens_per_fill && tb.tokens_per_fill >= 1);
            }
        }
        let tb = TokenBucket::for_rate(10.0, Duration::from_secs(5));
        assert_eq!(
            tb,
            TokenBucket {
                max_tokens: 50,
                tokens_per_fill: 10,
                fill_interval_secs: 1
            }
        );
        let tb = TokenBucket::for_rate(0.3, Duration::from_secs(5));
        assert_eq!((tb.tokens_per_fill, tb.fill_interval_secs), (1, 4));
    }
}
