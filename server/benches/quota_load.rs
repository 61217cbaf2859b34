//! A load generator of the rate limit quota service (RLQS) against the
//! rate limit service (RLS) on the same traffic: `--envoys` Envoys (default
//! 16), each making requests of one bucket shared by all of them (plus
//! `--private` buckets of its own), as fast as they can or at `--rate`
//! requests per second all together (`benches/quota_vs_rls.sh` runs both
//! modes side by side against the release server).
//!
//! ```sh
//! cargo bench -p tower-redis-ratelimit-server --bench quota_load -- \
//!     --addr 127.0.0.1:8081 --quota-config quota.yaml --mode rlqs --duration 20 --pid server=1234
//! cargo bench -p tower-redis-ratelimit-server --bench quota_load -- \
//!     --addr 127.0.0.1:8081 --quota-config quota.yaml --mode rls --callers 64
//! ```
//!
//! Modes:
//!
//! - `rlqs`: each Envoy opens one stream of
//!   `StreamRateLimitQuotas` (its own HTTP/2 connection) and decides every
//!   request locally, as Envoy's `rate_limit_quota` filter does
//!   (`tests/common/envoy.rs`: a local token bucket kept across the same
//!   assignment, the TTL in whole seconds, `DENY_ALL` without an
//!   assignment or past its TTL, as the guide's Envoy configuration says
//!   for the bound to hold); a new bucket is reported at once, every bucket
//!   each reporting interval of the quota file (the Envoys' timers spread
//!   over one interval), and the answers are applied as they arrive.
//! - `rls`: each Envoy keeps one HTTP/2 connection to the rate limit
//!   service and `--callers` (default 64, all Envoys together) calls of
//!   `ShouldRateLimit` in flight over them, one per request, for the same
//!   buckets (domain the quota file's, one descriptor `{<--key>: <value>}`,
//!   `hits_addend` 1). The server's rate limit configuration must give that
//!   descriptor the quota file's limit as a token bucket whose burst is
//!   `requests_per_unit` (the library's default), with `charge: admitted`
//!   (a denied request takes nothing, as of the quota service's budget),
//!   as `quota_vs_rls.sh` writes it.
//!
//! The shared bucket is `{<--key>: <--user>}` (default `user` and a fresh
//! value per run, so that every run starts from a full budget); a private
//! one `{<--key>: <--user>-e<envoy>-p<n>}`. Each Envoy takes its buckets in
//! turn. The limit is that of the quota file's rule matching the shared
//! bucket, its bound the guide's (docs/guide/quota.md): over any window of
//! `t` seconds the Envoys admit at most `C + ρ·(t + T + m + R⁺)`
//! (`ρ` the rate, `C` the budget's capacity, `T` the assignment TTL, `m`
//! one second, `R⁺` the reporting interval, at least 1 s); the RLS's token
//! bucket, at most `requests_per_unit + ρ·t`.
//!
//! Each run prints the requests decided per second (all Envoys together),
//! the shared bucket's admitted count per second of the run against the
//! limit, the most admitted in any window of 1 s, 10 s, the run and the
//! limit's unit against the bound (a window past the bound is printed as
//! `BOUND EXCEEDED`), and, with `--pid NAME=PID` (repeatable), the CPU
//! time those processes (read from `/proc/<pid>/stat`, 10 ms ticks) spent
//! per decided request and, for `rlqs`, per reported request and per
//! report. The last line, `RESULT …`, holds the same as `key=value`
//! fields for the script. `QUOTA_LOAD_DEBUG=1` prints every answer an
//! Envoy applies (to stderr).

#[path = "../tests/common/envoy.rs"]
mod envoy;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use envoy::{Id, SimEnvoy, most_in_window};
use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint};
use tower_redis_ratelimit_server::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use tower_redis_ratelimit_server::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use tower_redis_ratelimit_server::pb::rate_limit_descriptor::Entry;
use tower_redis_ratelimit_server::pb::rate_limit_response::Code;
use tower_redis_ratelimit_server::pb::{
    RateLimitDescriptor, RateLimitQuotaServiceClient, RateLimitRequest, RateLimitServiceClient,
};
use tower_redis_ratelimit_server::rlqs::config::{Answer, Blanket, MAX_LIMIT};
use tower_redis_ratelimit_server::rlqs::stream::action_of_pb;
use tower_redis_ratelimit_server::rlqs::{DomainConfig, MARGIN, Usage};

const USAGE: &str = "usage: quota_load --addr ADDR --quota-config FILE [--mode rlqs|rls] \
    [--envoys N] [--private B] [--callers C] [--rate R] [--duration S] [--key K] [--user U] \
    [--label L] [--pid NAME=PID ...]";

/// Requests an Envoy decides between two looks at its stream.
const BATCH: u64 = 256;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Rlqs,
    Rls,
}

struct Args {
    addr: String,
    mode: Mode,
    quota_config: PathBuf,
    envoys: usize,
    private: usize,
    callers: usize,
    rate: Option<f64>,
    duration: Duration,
    key: String,
    user: Option<String>,
    label: String,
    pids: Vec<(String, u32)>,
}

fn number<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
    v.parse()
        .map_err(|_| format!("{flag} {v:?}: not a valid number"))
}

fn positive(flag: &str, v: &str) -> Result<usize, String> {
    match number::<usize>(flag, v)? {
        0 => Err(format!("{flag} {v:?}: must be above 0")),
        n => Ok(n),
    }
}

fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut a = Args {
        addr: String::new(),
        mode: Mode::Rlqs,
        quota_config: PathBuf::new(),
        envoys: 16,
        private: 0,
        callers: 64,
        rate: None,
        duration: Duration::from_secs(20),
        key: "user".into(),
        user: None,
        label: String::new(),
        pids: Vec::new(),
    };
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--addr" => a.addr = value()?,
            "--mode" => {
                a.mode = match value()?.as_str() {
                    "rlqs" => Mode::Rlqs,
                    "rls" => Mode::Rls,
                    other => return Err(format!("--mode {other:?}: rlqs or rls")),
                }
            }
            "--quota-config" => a.quota_config = value()?.into(),
            "--envoys" => a.envoys = positive(&flag, &value()?)?,
            "--private" => a.private = number(&flag, &value()?)?,
            "--callers" => a.callers = positive(&flag, &value()?)?,
            "--rate" => {
                let r: f64 = number(&flag, &value()?)?;
                if !(r > 0.0 && r.is_finite()) {
                    return Err(format!("--rate {r}: requests per second above 0"));
                }
                a.rate = Some(r);
            }
            "--duration" => {
                let s: f64 = number(&flag, &value()?)?;
                if !(s > 0.0 && s < 86_400.0) {
                    return Err(format!("--duration {s}: seconds between 0 and 86400"));
                }
                a.duration = Duration::from_secs_f64(s);
            }
            "--key" => a.key = value()?,
            "--user" => a.user = Some(value()?),
            "--label" => a.label = value()?,
            "--pid" => {
                let v = value()?;
                let (name, pid) = v
                    .split_once('=')
                    .ok_or_else(|| format!("--pid {v:?}: NAME=PID"))?;
                a.pids.push((name.to_owned(), number(&flag, pid)?));
            }
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if a.addr.is_empty() || a.quota_config.as_os_str().is_empty() {
        return Err(format!("--addr and --quota-config are required\n{USAGE}"));
    }
    Ok(a)
}

/// The shared bucket's limit and the quota file's settings its bound
/// depends on.
struct Limit {
    domain: String,
    requests: u64,
    window: Duration,
    interval: Duration,
    ttl: Duration,
}

impl Limit {
    /// The limit of the rule of `file` that matches `id`.
    fn of(file: &Path, id: &Id) -> Result<Limit, String> {
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("--quota-config {}: {e}", file.display()))?;
        let name = file.display().to_string();
        let config = DomainConfig::parse(&name, &text).map_err(|e| e.to_string())?;
        let (rule, _) = config
            .lookup(id)
            .ok_or_else(|| format!("{name}: no rule matches the bucket {id:?}"))?;
        match config.rules[rule].answer {
            Answer::Limit { limit, window } if limit > 0 => Ok(Limit {
                domain: config.domain.clone(),
                requests: limit,
                window,
                interval: config.reporting_interval,
                ttl: config.assignment_ttl,
            }),
            _ => Err(format!(
                "{name}: the rule matching {id:?} ({}) is no limit above 0",
                config.rules[rule].name
            )),
        }
    }

    /// ρ, requests per second.
    fn rate(&self) -> f64 {
        self.requests as f64 / self.window.as_secs_f64()
    }

    /// `T + m + R⁺`: how long before its use a token may have been paid.
    fn lead(&self) -> f64 {
        (self.ttl + MARGIN + self.interval.max(Duration::from_secs(1))).as_secs_f64()
    }

    /// The quota service's bound over a window of `t` seconds (the
    /// guide's): `C + ρ·(t + T + m + R⁺)`, `C` the budget's capacity
    /// (the limit, or one lease of the whole rate if larger).
    fn rlqs_bound(&self, t: f64) -> f64 {
        let lease = (self.rate() * self.lead()).ceil() + 1.0;
        let capacity = (self.requests as f64).max(lease).min(MAX_LIMIT as f64);
        capacity + self.rate() * (t + self.lead())
    }

    /// The rate limit service's token bucket (burst `requests_per_unit`,
    /// starting full) over a window of `t` seconds.
    fn rls_bound(&self, t: f64) -> f64 {
        self.requests as f64 + self.rate() * t
    }
}

/// What one Envoy (or one RLS caller) did in the run.
#[derive(Default)]
struct Tally {
    decided: u64,
    /// When each request of the shared bucket was admitted (seconds into
    /// the run).
    admitted: Vec<f64>,
    admitted_private: u64,
    /// Reports sent, and the requests they counted (allowed and denied).
    reports: u64,
    reported: u64,
    errors: u64,
    first_error: Option<String>,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.decided += other.decided;
        self.admitted.extend(other.admitted);
        self.admitted_private += other.admitted_private;
        self.reports += other.reports;
        self.reported += other.reported;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }

    fn error(&mut self, e: impl std::fmt::Display) {
        self.errors += 1;
        self.first_error.get_or_insert_with(|| e.to_string());
    }
}

/// The run's clock: its start, its end (seconds into it), each Envoy's
/// (or caller's) share of `--rate`, and how many Envoys there are.
#[derive(Clone, Copy)]
struct Clock {
    start: Instant,
    end: f64,
    rate: Option<f64>,
    envoys: usize,
}

impl Clock {
    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// How many requests should have been made by now: all of them
    /// (`None`) without a rate.
    fn due(&self) -> Option<u64> {
        self.rate.map(|r| (self.now() * r) as u64)
    }
}

fn endpoint(addr: &str) -> Result<Endpoint, String> {
    let uri = if addr.contains("://") {
        addr.to_owned()
    } else {
        format!("http://{addr}")
    };
    Endpoint::from_shared(uri)
        .map(|e| e.connect_timeout(Duration::from_secs(5)).tcp_nodelay(true))
        .map_err(|e| format!("--addr {addr:?}: {e}"))
}

/// One HTTP/2 connection per Envoy: a server just started may accept
/// before it answers, so each is tried for 10 s.
async fn connect(addr: &str, n: usize) -> Result<Vec<Channel>, String> {
    let ep = endpoint(addr)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let give_up = Instant::now() + Duration::from_secs(10);
        loop {
            match ep.connect().await {
                Ok(c) => break out.push(c),
                Err(e) if Instant::now() >= give_up => {
                    return Err(format!("cannot connect to {addr}: {e}"));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
    Ok(out)
}

fn bucket(key: &str, value: &str) -> Id {
    vec![(key.to_owned(), value.to_owned())]
}

/// Envoy `e`'s buckets, the shared one first.
fn buckets(args: &Args, user: &str, e: usize) -> Vec<Id> {
    std::iter::once(bucket(&args.key, user))
        .chain((0..args.private).map(|p| bucket(&args.key, &format!("{user}-e{e}-p{p}"))))
        .collect()
}

fn report(domain: &str, usages: Vec<Usage>, interval: Duration) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: domain.to_owned(),
        bucket_quota_usages: usages
            .into_iter()
            .map(|u| BucketQuotaUsage {
                bucket_id: Some(BucketId {
                    bucket: u.id.into_iter().collect(),
                }),
                // whole seconds, as Envoy sends it (the service times
                // reports itself)
                time_elapsed: Some(prost_types::Duration {
                    seconds: i64::try_from(interval.as_secs().max(1)).unwrap_or(i64::MAX),
                    nanos: 0,
                }),
                num_requests_allowed: u.allowed,
                num_requests_denied: u.denied,
            })
            .collect(),
    }
}

/// One Envoy's stream, open before the run starts.
struct Stream {
    reports: mpsc::Sender<RateLimitQuotaUsageReports>,
    answers: tonic::Streaming<RateLimitQuotaResponse>,
}

async fn open(channel: Channel) -> Result<Stream, String> {
    let (tx, rx) = mpsc::channel(16);
    let outbound = futures_util::stream::unfold(rx, |mut rx: mpsc::Receiver<_>| async move {
        rx.recv().await.map(|m| (m, rx))
    });
    let answers = RateLimitQuotaServiceClient::new(channel)
        .stream_rate_limit_quotas(outbound)
        .await
        .map_err(|e| format!("the quota stream does not open: {e}"))?
        .into_inner();
    Ok(Stream {
        reports: tx,
        answers,
    })
}

/// Envoy `e` of the quota filter: requests of `ids` in turn, decided
/// locally; every bucket reported each reporting interval, the first
/// report `e / --envoys` of an interval in; answers applied as they come.
async fn envoy(e: usize, stream: Stream, ids: Vec<Id>, limit: Arc<Limit>, clock: Clock) -> Tally {
    let Stream {
        reports,
        mut answers,
    } = stream;
    // the answers are read beside the requests, and applied between batches
    let (got, mut inbox) = mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        loop {
            match answers.message().await {
                Ok(Some(r)) => {
                    if got.send(r).is_err() {
                        return None;
                    }
                }
                Ok(None) => return Some("the service ended the stream".to_owned()),
                Err(e) => return Some(e.to_string()),
            }
        }
    });
    let interval = limit.interval.as_secs_f64();
    // the Envoys' report timers spread over one interval
    let mut next_report = interval * e as f64 / clock.envoys as f64;
    let debug = std::env::var_os("QUOTA_LOAD_DEBUG").is_some();
    let mut sim = SimEnvoy::new(0, Blanket::DenyAll);
    let mut t = Tally::default();
    let mut made = 0u64;
    'run: loop {
        let now = clock.now();
        if now >= clock.end {
            break;
        }
        while let Ok(r) = inbox.try_recv() {
            let actions: Vec<_> = r
                .bucket_action
                .into_iter()
                .filter_map(action_of_pb)
                .collect();
            if debug {
                eprintln!("{now:.3} Envoy {e}: {actions:?}");
            }
            sim.receive(actions, now);
        }
        let usages = if now >= next_report {
            while next_report <= now {
                next_report += interval;
            }
            sim.report()
        } else {
            sim.fresh_reports()
        };
        if !usages.is_empty() {
            t.reports += 1;
            t.reported += usages.iter().map(|u| u.allowed + u.denied).sum::<u64>();
            if reports
                .send(report(&limit.domain, usages, limit.interval))
                .await
                .is_err()
            {
                t.error("the quota stream closed");
                break;
            }
        }
        let until = match clock.due() {
            Some(due) if due <= made => {
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
            Some(due) => due.min(made + BATCH),
            None => made + BATCH,
        };
        while made < until {
            let now = clock.now();
            if now >= clock.end {
                break 'run;
            }
            let which = (made % ids.len() as u64) as usize;
            made += 1;
            t.decided += 1;
            if sim.request(&ids[which], now) {
                if which == 0 {
                    t.admitted.push(now);
                } else {
                    t.admitted_private += 1;
                }
            }
        }
        tokio::task::yield_now().await;
    }
    drop(reports);
    reader.abort();
    if let Ok(Some(e)) = reader.await {
        t.error(e);
    }
    t
}

fn rls_request(domain: &str, id: &Id) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: id
                .iter()
                .map(|(k, v)| Entry {
                    key: k.clone(),
                    value: v.clone().into_bytes(),
                })
                .collect(),
            limit: None,
            hits_addend: None,
        }],
        hits_addend: 1,
        hits_subtrahend: 0,
    }
}

/// One caller of the rate limit service: one call per request, its
/// Envoy's buckets in turn, the next when the answer is back.
async fn caller(channel: Channel, requests: Vec<RateLimitRequest>, clock: Clock) -> Tally {
    let mut client = RateLimitServiceClient::new(channel);
    let mut t = Tally::default();
    let mut made = 0u64;
    loop {
        if clock.now() >= clock.end {
            break;
        }
        if clock.due().is_some_and(|due| due <= made) {
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        let which = (made % requests.len() as u64) as usize;
        made += 1;
        let call = client.should_rate_limit(requests[which].clone());
        let answer = tokio::time::timeout(Duration::from_secs(10), call).await;
        let now = clock.now();
        if now >= clock.end {
            break;
        }
        match answer {
            Ok(Ok(r)) => {
                t.decided += 1;
                if Code::try_from(r.get_ref().overall_code) == Ok(Code::Ok) {
                    if which == 0 {
                        t.admitted.push(now);
                    } else {
                        t.admitted_private += 1;
                    }
                }
            }
            Ok(Err(e)) => t.error(e),
            Err(_) => t.error("no answer within 10 s"),
        }
    }
    t
}

/// CPU time (user + system) of a process so far, from `/proc/<pid>/stat`
/// (clock ticks of 10 ms: USER_HZ is 100 on Linux).
fn cpu_time(pid: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // the command name (field 2) may hold spaces: count from its ')'
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields 14 and 15 of the file: 12th and 13th after the state (field 3)
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

fn cpu_sample(args: &Args) -> Vec<(String, Option<Duration>)> {
    let mut v = vec![("client".to_owned(), cpu_time("self"))];
    for (name, pid) in &args.pids {
        v.push((name.clone(), cpu_time(&pid.to_string())));
    }
    v
}

fn fresh_value() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("bench-{nanos}")
}

async fn run(args: Args) -> Result<(), String> {
    let user = args.user.clone().unwrap_or_else(fresh_value);
    let limit = Arc::new(Limit::of(&args.quota_config, &bucket(&args.key, &user))?);
    let duration = args.duration.as_secs_f64();
    let channels = connect(&args.addr, args.envoys).await?;
    // open every stream first: the run times requests, not connections
    let mut streams = Vec::new();
    if args.mode == Mode::Rlqs {
        for c in &channels {
            streams.push(open(c.clone()).await?);
        }
    }
    let workers = match args.mode {
        Mode::Rlqs => args.envoys,
        Mode::Rls => args.callers,
    };
    let cpu0 = cpu_sample(&args);
    let start = Instant::now();
    let clock = Clock {
        start,
        end: duration,
        rate: args.rate.map(|r| r / workers as f64),
        envoys: args.envoys,
    };
    let mut tasks = Vec::with_capacity(workers);
    match args.mode {
        Mode::Rlqs => {
            for (e, stream) in streams.into_iter().enumerate() {
                let ids = buckets(&args, &user, e);
                tasks.push(tokio::spawn(envoy(e, stream, ids, limit.clone(), clock)));
            }
        }
        Mode::Rls => {
            for c in 0..args.callers {
                let e = c % args.envoys;
                let requests = buckets(&args, &user, e)
                    .iter()
                    .map(|id| rls_request(&limit.domain, id))
                    .collect();
                tasks.push(tokio::spawn(caller(channels[e].clone(), requests, clock)));
            }
        }
    }
    tokio::time::sleep_until((start + args.duration).into()).await;
    let cpu1 = cpu_sample(&args);
    let mut all = Tally::default();
    for task in tasks {
        all.merge(task.await.map_err(|e| format!("an Envoy panicked: {e}"))?);
    }
    all.admitted.sort_by(f64::total_cmp);
    print_run(&args, &limit, &all, duration, &cpu0, &cpu1);
    Ok(())
}

fn print_run(
    args: &Args,
    limit: &Limit,
    all: &Tally,
    duration: f64,
    cpu0: &[(String, Option<Duration>)],
    cpu1: &[(String, Option<Duration>)],
) {
    let mode = match args.mode {
        Mode::Rlqs => "rlqs",
        Mode::Rls => "rls",
    };
    let rho = limit.rate();
    let decided_per_s = all.decided as f64 / duration;
    println!(
        "== {} {mode}: {} Envoys, {} bucket(s) each, {} for {duration:.0} s; limit {} per {} s \
         (ρ = {rho:.1}/s), reports every {:?}, assignments of {:?}",
        args.label,
        args.envoys,
        args.private + 1,
        match (args.mode, args.rate) {
            (_, Some(r)) => format!("{r:.0} requests/s offered"),
            (Mode::Rlqs, None) => "as fast as they can".to_owned(),
            (Mode::Rls, None) => format!("{} callers as fast as they can", args.callers),
        },
        limit.requests,
        limit.window.as_secs(),
        limit.interval,
        limit.ttl,
    );
    println!(
        "decided: {} requests, {decided_per_s:.0}/s; errors {}{}",
        all.decided,
        all.errors,
        all.first_error
            .as_ref()
            .map(|e| format!(" (first: {e})"))
            .unwrap_or_default()
    );
    // the shared bucket's admissions, second by second
    let seconds = duration.ceil() as usize;
    let mut per_second = vec![0u64; seconds.max(1)];
    for &t in &all.admitted {
        per_second[(t as usize).min(seconds.saturating_sub(1))] += 1;
    }
    let series: Vec<String> = per_second.iter().map(u64::to_string).collect();
    let half = duration / 2.0;
    let steady = all.admitted.iter().filter(|&&t| t >= half).count() as f64 / (duration - half);
    println!(
        "admitted of the shared bucket, per second (limit {rho:.1}/s): {}",
        series.join(" ")
    );
    println!(
        "admitted: {} in all, {steady:.1}/s over the second half (ρ = {rho:.1}/s); \
         {} of the private buckets",
        all.admitted.len(),
        all.admitted_private
    );
    // the most admitted in a window against the bound
    let unit = limit.window.as_secs_f64();
    let mut windows = vec![1.0, 10.0, duration, unit];
    windows.retain(|&w| w <= duration || w == unit);
    windows.sort_by(f64::total_cmp);
    windows.dedup();
    let mut within = true;
    let mut fields = String::new();
    for w in windows {
        let most = most_in_window(&all.admitted, w);
        let bound = match args.mode {
            Mode::Rlqs => limit.rlqs_bound(w),
            Mode::Rls => limit.rls_bound(w),
        };
        let ok = most as f64 <= bound;
        within &= ok;
        println!(
            "most admitted in any {w:.0} s{}: {most}, bound {bound:.0} ({:.0}%){}",
            if w > duration {
                " (longer than the run: all of it)"
            } else {
                ""
            },
            most as f64 * 100.0 / bound,
            if ok { "" } else { "  <-- BOUND EXCEEDED" }
        );
        fields.push_str(&format!(" most_{w:.0}s={most} bound_{w:.0}s={bound:.0}"));
    }
    if !within {
        println!("BOUND EXCEEDED: the {mode} run admitted more than its bound in a window above");
    }
    for ((name, a), (_, b)) in cpu0.iter().zip(cpu1) {
        let (Some(a), Some(b)) = (a, b) else {
            println!("cpu {name}: unreadable");
            fields.push_str(&format!(" {name}_cpu_ms=?"));
            continue;
        };
        let spent = b.saturating_sub(*a).as_secs_f64();
        let per_decided = spent * 1e9 / (all.decided.max(1) as f64);
        let mut line = format!(
            "cpu {name}: {:.0} ms ({:.0}% of a core), {per_decided:.1} ns per decided request",
            spent * 1e3,
            spent * 100.0 / duration,
        );
        fields.push_str(&format!(
            " {name}_cpu_ms={:.0} {name}_ns_per_decision={per_decided:.2}",
            spent * 1e3
        ));
        if args.mode == Mode::Rlqs {
            let per_reported = spent * 1e9 / (all.reported.max(1) as f64);
            let per_report = spent * 1e6 / (all.reports.max(1) as f64);
            line.push_str(&format!(
                ", {per_reported:.1} ns per reported request, {per_report:.1} µs per report"
            ));
            fields.push_str(&format!(
                " {name}_ns_per_reported={per_reported:.2} {name}_us_per_report={per_report:.1}"
            ));
        }
        println!("{line}");
    }
    if args.mode == Mode::Rlqs {
        println!(
            "reports: {} ({:.1}/s), counting {} requests",
            all.reports,
            all.reports as f64 / duration,
            all.reported
        );
    }
    println!(
        "RESULT label={} mode={mode} envoys={} buckets={} duration={duration:.0} decided={} \
         decided_per_s={decided_per_s:.0} errors={} admitted={} steady_per_s={steady:.1} \
         rho={rho:.2} reports={} reported={}{fields} within_bound={}",
        args.label,
        args.envoys,
        args.private + 1,
        all.decided,
        all.errors,
        all.admitted.len(),
        all.reports,
        all.reported,
        if within { "yes" } else { "NO" },
    );
}

fn main() -> ExitCode {
    // `cargo bench` passes `--bench` to every harness = false target
    let raw = std::env::args().skip(1).filter(|a| a != "--bench");
    let result = parse(raw).and_then(|args| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("runtime: {e}"))?;
        rt.block_on(run(args))
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quota_load: {e}");
            ExitCode::from(2)
        }
    }
}
