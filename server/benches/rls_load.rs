//! A load generator for Envoy's rate limit service
//! (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`) that
//! drives any server speaking it: `ratelimit-server` and Kuadrant's
//! `limitador-server` alike (`benches/vs_limitador.sh` runs both side by
//! side).
//!
//! ```sh
//! cargo bench -p tower-redis-ratelimit-server --bench rls_load -- \
//!     --target 127.0.0.1:8081 --mode many --concurrency 64 --duration 10
//! cargo bench -p tower-redis-ratelimit-server --bench rls_load -- \
//!     --target 127.0.0.1:8081 --target 127.0.0.1:8082 --target 127.0.0.1:8083 \
//!     --target 127.0.0.1:8084 --mode admit --limit 1000
//! cargo bench -p tower-redis-ratelimit-server --bench rls_load -- ports 3   # three free ports
//! ```
//!
//! Modes (every request: domain `--domain`, one descriptor with one entry
//! `{<--key>: <value>}`, `hits_addend` 1):
//!
//! - `many`: `--concurrency` callers (default 64) over `--channels` HTTP/2
//!   connections per target (default 2), each caller looping over
//!   `--keys` values (default 10 000: `u0` … `u9999`) for `--warmup`
//!   seconds (default 2) and then `--duration` seconds (default 10), the
//!   measured part: calls per second, p50 / p99 latency, and the count of
//!   OK, OVER_LIMIT and errors. With `--pid NAME=PID` (repeatable), the CPU
//!   time those processes (and this one) spent per call while measuring.
//! - `hot`: the same on a single value (fresh per run).
//! - `admit`: `--concurrency` callers (default 1 000) spread over the
//!   targets (the instances of one service sharing one store), released
//!   together, take `--requests` requests (default 3 000) between them, all
//!   for the same fresh value; prints how many were admitted, in total and
//!   per target, against `--limit` (the configured limit, default 1 000).
//!   It waits if a minute boundary is less than 15 s away, so that a fixed
//!   window aligned on the minute does not roll over during the test.
//!
//! The configured limits are the caller's business: `many` and `hot` expect
//! a limit nothing reaches (see `vs_limitador.sh`).

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tonic::transport::{Channel, Endpoint};
use tower_redis_ratelimit_server::pb::rate_limit_descriptor::Entry;
use tower_redis_ratelimit_server::pb::rate_limit_response::Code;
use tower_redis_ratelimit_server::pb::{
    RateLimitDescriptor, RateLimitRequest, RateLimitServiceClient,
};

const USAGE: &str = "usage: rls_load --target ADDR [--target ADDR ...] [--mode many|hot|admit] \
    [--domain D] [--key K] [--keys N] [--concurrency C] [--channels N] [--warmup S] \
    [--duration S] [--requests N] [--limit N] [--timeout-ms MS] [--label L] [--pid NAME=PID ...]\n\
    \x20      rls_load ports N";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Many,
    Hot,
    Admit,
}

#[derive(Clone)]
struct Args {
    targets: Vec<String>,
    mode: Mode,
    domain: Option<String>,
    key: String,
    keys: usize,
    concurrency: Option<usize>,
    channels: usize,
    warmup: Duration,
    duration: Duration,
    requests: usize,
    limit: u64,
    timeout: Duration,
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

fn seconds(flag: &str, v: &str) -> Result<Duration, String> {
    let s: f64 = number(flag, v)?;
    if (0.0..86_400.0).contains(&s) {
        Ok(Duration::from_secs_f64(s))
    } else {
        Err(format!("{flag} {v:?}: seconds between 0 and 86400"))
    }
}

fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut a = Args {
        targets: Vec::new(),
        mode: Mode::Many,
        domain: None,
        key: "user_id".into(),
        keys: 10_000,
        concurrency: None,
        channels: 2,
        warmup: Duration::from_secs(2),
        duration: Duration::from_secs(10),
        requests: 3_000,
        limit: 1_000,
        timeout: Duration::from_secs(10),
        label: String::new(),
        pids: Vec::new(),
    };
    while let Some(flag) = it.next() {
        // `cargo bench` passes `--bench` to every harness = false target
        if flag == "--bench" {
            continue;
        }
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--target" => a.targets.push(value()?),
            "--mode" => {
                a.mode = match value()?.as_str() {
                    "many" => Mode::Many,
                    "hot" => Mode::Hot,
                    "admit" => Mode::Admit,
                    other => return Err(format!("--mode {other:?}: many, hot or admit")),
                }
            }
            "--domain" => a.domain = Some(value()?),
            "--key" => a.key = value()?,
            "--keys" => a.keys = positive(&flag, &value()?)?,
            "--concurrency" => a.concurrency = Some(positive(&flag, &value()?)?),
            "--channels" => a.channels = positive(&flag, &value()?)?,
            "--warmup" => a.warmup = seconds(&flag, &value()?)?,
            "--duration" => {
                a.duration = seconds(&flag, &value()?)?;
                if a.duration.is_zero() {
                    return Err("--duration must be above 0".into());
                }
            }
            "--requests" => a.requests = positive(&flag, &value()?)?,
            "--limit" => a.limit = number(&flag, &value()?)?,
            "--timeout-ms" => {
                a.timeout = Duration::from_millis(positive(&flag, &value()?)? as u64);
            }
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
    if a.targets.is_empty() {
        return Err(format!("at least one --target is required\n{USAGE}"));
    }
    Ok(a)
}

/// `host:port` or a URI: the endpoint of a target.
fn endpoint(target: &str) -> Result<Endpoint, String> {
    let uri = if target.contains("://") {
        target.to_owned()
    } else {
        format!("http://{target}")
    };
    Endpoint::from_shared(uri)
        .map(|e| e.connect_timeout(Duration::from_secs(5)).tcp_nodelay(true))
        .map_err(|e| format!("--target {target:?}: {e}"))
}

async fn connect(args: &Args) -> Result<Vec<Vec<Channel>>, String> {
    let mut all = Vec::new();
    for target in &args.targets {
        let ep = endpoint(target)?;
        let mut chans = Vec::new();
        for _ in 0..args.channels {
            chans.push(connect_one(&ep, target).await?);
        }
        all.push(chans);
    }
    Ok(all)
}

/// A server that has just started may accept a connection before it
/// answers HTTP/2: retry for 10 s.
async fn connect_one(ep: &Endpoint, target: &str) -> Result<Channel, String> {
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        match ep.connect().await {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() >= give_up => {
                let mut msg = format!("cannot connect to {target}: {e}");
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    msg.push_str(&format!(": {s}"));
                    source = s.source();
                }
                return Err(msg);
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

fn request(domain: &str, key: &str, value: String) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: key.to_owned(),
                value: value.into_bytes(),
            }],
            limit: None,
            hits_addend: None,
        }],
        hits_addend: 1,
        hits_subtrahend: 0,
    }
}

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    over: AtomicU64,
    other: AtomicU64,
    errors: AtomicU64,
}

impl Tally {
    fn add(
        &self,
        r: &Result<
            tonic::Response<tower_redis_ratelimit_server::pb::RateLimitResponse>,
            tonic::Status,
        >,
    ) {
        let counter = match r {
            Ok(resp) => match Code::try_from(resp.get_ref().overall_code) {
                Ok(Code::Ok) => &self.ok,
                Ok(Code::OverLimit) => &self.over,
                _ => &self.other,
            },
            Err(_) => &self.errors,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn line(&self) -> String {
        format!(
            "ok={} over_limit={} unknown={} errors={}",
            self.ok.load(Ordering::Relaxed),
            self.over.load(Ordering::Relaxed),
            self.other.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed)
        )
    }
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

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[i.min(sorted.len() - 1)]) / 1000.0
}

fn fresh_tag() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

async fn throughput(args: Args) -> Result<(), String> {
    let concurrency = args.concurrency.unwrap_or(64);
    let domain: Arc<str> = args.domain.clone().unwrap_or_else(|| "bench".into()).into();
    let key: Arc<str> = args.key.clone().into();
    let values: Arc<Vec<String>> = Arc::new(match args.mode {
        Mode::Hot => vec![format!("hot-{}", fresh_tag())],
        _ => (0..args.keys).map(|i| format!("u{i}")).collect(),
    });
    let channels: Vec<Channel> = connect(&args).await?.into_iter().flatten().collect();
    let tally = Arc::new(Tally::default());
    let first_error: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let start = Instant::now();
    let measure = start + args.warmup;
    let end = measure + args.duration;
    let mut tasks = Vec::with_capacity(concurrency);
    for task in 0..concurrency {
        let mut client = RateLimitServiceClient::new(channels[task % channels.len()].clone());
        let (domain, key, values, tally, first_error) = (
            domain.clone(),
            key.clone(),
            values.clone(),
            tally.clone(),
            first_error.clone(),
        );
        let timeout = args.timeout;
        tasks.push(tokio::spawn(async move {
            let mut lat: Vec<u32> = Vec::with_capacity(1 << 14);
            let mut i = task;
            loop {
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                let value = values[i % values.len()].clone();
                i += concurrency;
                let req = request(&domain, &key, value);
                let r = match tokio::time::timeout(timeout, client.should_rate_limit(req)).await {
                    Ok(r) => r,
                    Err(_) => Err(tonic::Status::deadline_exceeded("client timeout")),
                };
                let done = Instant::now();
                if done >= measure && done < end {
                    tally.add(&r);
                    if let Err(e) = &r {
                        let mut slot = first_error.lock().unwrap_or_else(|p| p.into_inner());
                        slot.get_or_insert_with(|| e.to_string());
                    }
                    let us = (done - t0).as_micros();
                    lat.push(u32::try_from(us).unwrap_or(u32::MAX));
                }
            }
            lat
        }));
    }
    tokio::time::sleep_until(measure.into()).await;
    let cpu0 = cpu_sample(&args);
    tokio::time::sleep_until(end.into()).await;
    let cpu1 = cpu_sample(&args);
    let load = loadavg();
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.map_err(|e| format!("a caller panicked: {e}"))?);
    }
    lat.sort_unstable();
    let calls = lat.len() as f64;
    let rate = calls / args.duration.as_secs_f64();
    let mut cpu = String::new();
    for ((name, a), (_, b)) in cpu0.iter().zip(&cpu1) {
        if let (Some(a), Some(b)) = (a, b) {
            let spent = b.saturating_sub(*a);
            cpu.push_str(&format!(
                " cpu_{name}={:.1}us/call({:.0}%)",
                spent.as_secs_f64() * 1e6 / calls.max(1.0),
                spent.as_secs_f64() * 100.0 / args.duration.as_secs_f64()
            ));
        } else {
            cpu.push_str(&format!(" cpu_{name}=?"));
        }
    }
    println!(
        "RESULT label={} mode={:?} targets={} concurrency={} channels={} calls/s={:.0} \
         p50={:.3}ms p99={:.3}ms {}{} load={}",
        args.label,
        args.mode,
        args.targets.len(),
        concurrency,
        channels.len(),
        rate,
        percentile(&lat, 0.50),
        percentile(&lat, 0.99),
        tally.line(),
        cpu,
        load
    );
    if let Some(e) = first_error
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
    {
        println!("  first error: {e}");
    }
    Ok(())
}

async fn admit(args: Args) -> Result<(), String> {
    let callers = args.concurrency.unwrap_or(1_000);
    let domain: Arc<str> = args.domain.clone().unwrap_or_else(|| "admit".into()).into();
    let key: Arc<str> = args.key.clone().into();
    let value = format!("admit-{}", fresh_tag());
    let channels = connect(&args).await?;
    // keep a minute boundary out of the test (a fixed window aligned on
    // the minute would legitimately admit the limit twice across it)
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| e.to_string())?;
    let into_minute = now.as_secs_f64() % 60.0;
    if into_minute > 45.0 {
        let wait = 60.0 - into_minute + 0.5;
        eprintln!("admit: waiting {wait:.1} s for the next minute");
        tokio::time::sleep(Duration::from_secs_f64(wait)).await;
    }
    let targets = args.targets.len();
    let per_target: Arc<Vec<Tally>> = Arc::new((0..targets).map(|_| Tally::default()).collect());
    let next = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(tokio::sync::Barrier::new(callers + 1));
    let first_error: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let mut tasks = Vec::with_capacity(callers);
    for caller in 0..callers {
        let t = caller % targets;
        let chan = channels[t][(caller / targets) % channels[t].len()].clone();
        let mut client = RateLimitServiceClient::new(chan);
        let (domain, key, value, per_target, next, barrier, first_error) = (
            domain.clone(),
            key.clone(),
            value.clone(),
            per_target.clone(),
            next.clone(),
            barrier.clone(),
            first_error.clone(),
        );
        let (requests, timeout) = (args.requests, args.timeout);
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            while next.fetch_add(1, Ordering::Relaxed) < requests {
                let req = request(&domain, &key, value.clone());
                let r = match tokio::time::timeout(timeout, client.should_rate_limit(req)).await {
                    Ok(r) => r,
                    Err(_) => Err(tonic::Status::deadline_exceeded("client timeout")),
                };
                per_target[t].add(&r);
                if let Err(e) = &r {
                    let mut slot = first_error.lock().unwrap_or_else(|p| p.into_inner());
                    slot.get_or_insert_with(|| e.to_string());
                }
            }
        }));
    }
    barrier.wait().await;
    let t0 = Instant::now();
    for t in tasks {
        t.await.map_err(|e| format!("a caller panicked: {e}"))?;
    }
    let elapsed = t0.elapsed();
    let total = Tally::default();
    let mut per = Vec::new();
    for t in per_target.iter() {
        let ok = t.ok.load(Ordering::Relaxed);
        per.push(ok.to_string());
        total.ok.fetch_add(ok, Ordering::Relaxed);
        for (to, from) in [
            (&total.over, &t.over),
            (&total.other, &t.other),
            (&total.errors, &t.errors),
        ] {
            to.fetch_add(from.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
    let admitted = total.ok.load(Ordering::Relaxed);
    let verdict = match admitted.cmp(&args.limit) {
        std::cmp::Ordering::Equal => "exactly the limit",
        std::cmp::Ordering::Greater => "MORE than the limit",
        std::cmp::Ordering::Less => "less than the limit",
    };
    println!(
        "RESULT label={} mode=Admit targets={} callers={} requests={} limit={} admitted={} ({}) \
         per_target=[{}] {} elapsed={:.2}s load={}",
        args.label,
        targets,
        callers,
        args.requests,
        args.limit,
        admitted,
        verdict,
        per.join(","),
        total.line(),
        elapsed.as_secs_f64(),
        loadavg()
    );
    if let Some(e) = first_error
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
    {
        println!("  first error: {e}");
    }
    Ok(())
}

/// `ports N`: N free loopback ports, held open together so they differ.
///
/// They are taken below 32768, out of Linux's ephemeral range: a probe
/// connecting to a port nobody listens on yet can, from the ephemeral
/// range, pick that very port as its source and connect to itself (TCP
/// simultaneous open), which looks like a listener and steals the port.
fn ports(n: &str) -> Result<(), String> {
    let n = positive("ports", n)?;
    let mut held = Vec::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    // xorshift seeded by the clock and the pid: no dependency for this
    let mut x = (fresh_tag() as u64) ^ (u64::from(std::process::id()) << 32) | 1;
    let mut tries = 0;
    while out.len() < n {
        tries += 1;
        if tries > 10_000 {
            return Err("no free port found between 10000 and 32767".into());
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let port = 10_000 + (x % 22_768) as u16;
        if port == 6379 {
            continue;
        }
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            out.push(port.to_string());
            held.push(l);
        }
    }
    println!("{}", out.join(" "));
    Ok(())
}

fn main() -> ExitCode {
    let mut raw: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let result = if raw.first().map(String::as_str) == Some("ports") {
        ports(raw.get(1).map(String::as_str).unwrap_or("1"))
    } else {
        parse(raw.drain(..)).and_then(|args| {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("runtime: {e}"))?;
            rt.block_on(async move {
                match args.mode {
                    Mode::Admit => admit(args).await,
                    Mode::Many | Mode::Hot => throughput(args).await,
                }
            })
        })
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rls_load: {e}");
            ExitCode::from(2)
        }
    }
}
