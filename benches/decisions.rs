//! Decisions per second of one `RateLimiter`, next to a hand-written baseline
//! in the same binary, in alternating rounds (compare the ratios: the machine
//! may be shared and noisy).
//!
//! ```sh
//! cargo bench -p tower-redis-ratelimit-tests --bench decisions                                  # both stores, fixed window
//! cargo bench -p tower-redis-ratelimit-tests --bench decisions -- --store redis --strategy gcra --rounds 5
//! cargo bench -p tower-redis-ratelimit-tests --bench decisions -- --store memory --keys 1000000
//! ```
//!
//! - `--store redis`: the limiter over `RedisStore` against the practical
//!   ceiling: tasks sharing one redis-rs multiplexed connection, one `EVALSHA`
//!   of a minimal fixed-window script (`INCRBY`, `PEXPIRE` on the first hit)
//!   per decision. A private `redis-server` is started on a free loopback
//!   port unless `--redis-url` names one.
//!   The limiter runs twice per round: batching on (the store's default:
//!   concurrent decisions share script calls) and `batching(false)` (one
//!   call per decision, as before batching).
//! - `--store redis --offered F`: latency at a fixed offered load. A
//!   closed-loop run of the ceiling first measures its rate; then requests
//!   are issued open-loop at `F` times that rate (each at its scheduled
//!   time, on a task of its own, latency counted from the scheduled time),
//!   to the limiter with batching on and off in turn, for `--requests` each.
//! - `--store memory`: the limiter over `MemoryStore` against a hand-written
//!   fixed window in a sharded `Mutex<HashMap>`; with `--strategy gcra`,
//!   against a hand-written keyed GCRA as governor's keyed limiter does it
//!   (sharded `RwLock<HashMap<String, AtomicU64>>`: a read lock, then a
//!   compare-and-swap of the key's theoretical arrival time; the key is owned
//!   only when first seen; state is never evicted).
//!
//! Every task loops: take the next request number, decide for key
//! `k<i % keys>`, record the latency. The limit is high (10^9 per minute)
//! so every call does its full work. For `concurrency`, each admitted
//! request releases its lease at once (a second call, in the latency).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/common/mod.rs"]
#[allow(unreachable_pub)]
mod common;

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use tower_redis_ratelimit::strategy::Strategy;
use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimiter, RedisStore};

/// Nothing is ever denied at this rate.
const HUGE: u64 = 1_000_000_000;

/// The Redis baseline: what one would write by hand for a fixed window.
const CEILING_SCRIPT: &str = r"
local n = redis.call('INCRBY', KEYS[1], ARGV[2])
if n == tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
if n > tonumber(ARGV[1]) then redis.call('DECRBY', KEYS[1], ARGV[2]) return 0 end
return 1
";

#[derive(Clone)]
struct Args {
    stores: Vec<String>,
    redis_url: Option<String>,
    strategy: Strategy,
    concurrency: usize,
    keys: usize,
    requests: usize,
    rounds: usize,
    connections: usize,
    /// Open-loop mode: the offered rate as a fraction of the ceiling's.
    offered: Option<f64>,
}

const USAGE: &str = "usage: cargo bench -p tower-redis-ratelimit-tests --bench decisions -- [--store redis|memory|both] \
    [--redis-url URL] [--strategy NAME] [--concurrency C] [--keys K] [--requests N] \
    [--rounds R] [--connections N] [--offered FRACTION]";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        stores: vec!["memory".into(), "redis".into()],
        redis_url: None,
        strategy: Strategy::FixedWindow,
        concurrency: 256,
        keys: 10_000,
        requests: 200_000,
        rounds: 3,
        connections: 1,
        offered: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let number = |v: String| v.parse::<usize>().map_err(|e| format!("{v}: {e}"));
        match flag.as_str() {
            // cargo bench passes --bench to harness = false targets
            "--bench" => {}
            "--store" => {
                args.stores = match value()?.as_str() {
                    "both" => vec!["memory".into(), "redis".into()],
                    s @ ("redis" | "memory") => vec![s.to_owned()],
                    other => return Err(format!("--store: redis, memory or both, not {other}")),
                }
            }
            "--redis-url" => args.redis_url = Some(value()?),
            "--strategy" => {
                args.strategy = value()?.parse::<Strategy>().map_err(|e| e.to_string())?
            }
            "--concurrency" => args.concurrency = number(value()?)?.max(1),
            "--keys" => args.keys = number(value()?)?.max(1),
            "--requests" => args.requests = number(value()?)?.max(1),
            "--rounds" => args.rounds = number(value()?)?.max(1),
            "--connections" => args.connections = number(value()?)?.max(1),
            "--offered" => {
                let v = value()?;
                let f = v.parse::<f64>().map_err(|e| format!("{v}: {e}"))?;
                if !(f > 0.0 && f.is_finite()) {
                    return Err(format!("--offered: a fraction above 0, not {v}"));
                }
                args.offered = Some(f);
            }
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    Ok(args)
}

/// One timed run: decisions per second and latency percentiles.
struct Run {
    per_sec: f64,
    p50_us: u32,
    p99_us: u32,
}

impl Run {
    /// The run of these latencies (µs) over `secs` seconds.
    fn of(mut all: Vec<u32>, secs: f64) -> Run {
        all.sort_unstable();
        let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)];
        Run {
            per_sec: all.len() as f64 / secs,
            p50_us: pct(0.50),
            p99_us: pct(0.99),
        }
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:>10.0}/s  p50 {:>5} µs  p99 {:>6} µs",
            self.per_sec, self.p50_us, self.p99_us
        )
    }
}

/// Runs `decide(i)` for `requests` request numbers over `concurrency` tasks.
async fn drive<F, Fut>(args: &Args, decide: F) -> Run
where
    F: Fn(usize) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..args.concurrency)
        .map(|_| {
            let (next, decide, total) = (next.clone(), decide.clone(), args.requests);
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(total / 64);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        return latencies;
                    }
                    let t = Instant::now();
                    decide(i).await;
                    latencies.push(t.elapsed().as_micros() as u32);
                }
            })
        })
        .collect();
    let mut all = Vec::with_capacity(args.requests);
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    Run::of(all, started.elapsed().as_secs_f64())
}

/// Issues `requests` calls of `decide(i)` open-loop at `rate` per second,
/// each on a task of its own at its scheduled time; latency is counted from
/// the scheduled time (a late start counts against the system).
async fn drive_open<F, Fut>(requests: usize, rate: f64, decide: F) -> Run
where
    F: Fn(usize) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(requests)));
    let started = Instant::now();
    let mut issued = 0usize;
    let mut tasks = Vec::with_capacity(requests);
    let mut tick = tokio::time::interval(Duration::from_micros(200));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while issued < requests {
        tick.tick().await;
        let due = ((started.elapsed().as_secs_f64() * rate) as usize).min(requests);
        while issued < due {
            let scheduled = started + Duration::from_secs_f64(issued as f64 / rate);
            let (decide, latencies) = (decide.clone(), latencies.clone());
            let i = issued;
            tasks.push(tokio::spawn(async move {
                decide(i).await;
                let us = scheduled.elapsed().as_micros() as u32;
                latencies.lock().unwrap().push(us);
            }));
            issued += 1;
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let all = std::mem::take(&mut *latencies.lock().unwrap());
    Run::of(all, started.elapsed().as_secs_f64())
}

/// A quota never exhausted by the run: the sorted-set strategies hold at most
/// `Quota::MAX_SORTED_SET_LIMIT` per key, which the run stays below (20
/// requests per key by default; concurrency leases are released at once).
fn quota(strategy: Strategy) -> Quota {
    match strategy {
        Strategy::Concurrency => Quota::concurrency(Quota::MAX_SORTED_SET_LIMIT),
        Strategy::SlidingWindowLog => {
            Quota::sliding_window_log(Rate::per_minute(Quota::MAX_SORTED_SET_LIMIT))
        }
        s => Quota::new(s, Rate::per_minute(HUGE)),
    }
}

/// One decision of the limiter for request `i`, as every run makes it.
async fn crate_decide(limiter: RateLimiter, keys: usize, i: usize) {
    let d = limiter.check(format!("k{}", i % keys)).await.unwrap();
    if let Some(lease) = &d.lease() {
        limiter.release(lease).await.unwrap();
    }
    assert!(d.allowed());
}

async fn crate_run(args: &Args, limiter: &RateLimiter) -> Run {
    let keys = args.keys;
    let limiter = limiter.clone();
    drive(args, move |i| crate_decide(limiter.clone(), keys, i)).await
}

/// The limiter open-loop at `rate` decisions per second.
async fn crate_open(args: &Args, limiter: &RateLimiter, rate: f64) -> Run {
    let keys = args.keys;
    let limiter = limiter.clone();
    drive_open(args.requests, rate, move |i| {
        crate_decide(limiter.clone(), keys, i)
    })
    .await
}

async fn redis_ceiling(args: &Args, conn: &MultiplexedConnection, prefix: &str) -> Run {
    let script = Arc::new(redis::Script::new(CEILING_SCRIPT));
    let (keys, conn, prefix) = (args.keys, conn.clone(), Arc::<str>::from(prefix));
    drive(args, move |i| {
        let (script, mut conn, prefix) = (script.clone(), conn.clone(), prefix.clone());
        async move {
            let ok: i64 = script
                .key(format!("{{{prefix}:k{}}}:ceiling", i % keys))
                .arg(HUGE)
                .arg(1)
                .arg(60_000)
                .invoke_async(&mut conn)
                .await
                .unwrap();
            assert_eq!(ok, 1);
        }
    })
    .await
}

/// A key's count and the end of its window.
type Window = (u64, Instant);

/// A fixed window as one would write it in process: sharded mutexes over maps.
struct HandWritten {
    shards: Box<[Mutex<HashMap<String, Window>>]>,
    hasher: RandomState,
}

impl HandWritten {
    fn new() -> Self {
        Self {
            shards: (0..64).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
        }
    }

    fn check(&self, key: &str, limit: u64, window: Duration) -> bool {
        let shard = &self.shards[self.hasher.hash_one(key) as usize % self.shards.len()];
        let mut map = shard.lock().unwrap();
        let now = Instant::now();
        let entry = map.entry(key.to_owned()).or_insert((0, now + window));
        if entry.1 <= now {
            *entry = (0, now + window);
        }
        if entry.0 >= limit {
            return false;
        }
        entry.0 += 1;
        true
    }
}

/// A keyed GCRA as governor's keyed limiter does it: per key one `u64`
/// theoretical arrival time (nanoseconds since `start`), updated by
/// compare-and-swap under a shard's read lock.
struct KeyedGcra {
    shards: Box<[RwLock<HashMap<String, AtomicU64>>]>,
    hasher: RandomState,
    start: Instant,
}

impl KeyedGcra {
    fn new() -> Self {
        let threads = std::thread::available_parallelism().map_or(4, usize::from);
        Self {
            shards: (0..(threads * 4).next_power_of_two())
                .map(|_| RwLock::new(HashMap::new()))
                .collect(),
            hasher: RandomState::new(),
            start: Instant::now(),
        }
    }

    /// Whether one more request fits `burst` at one per `interval_ns`.
    fn check(&self, key: &str, burst: u64, interval_ns: u64) -> bool {
        let shard = &self.shards[self.hasher.hash_one(key) as usize % self.shards.len()];
        let now = self.start.elapsed().as_nanos() as u64;
        let tau = burst * interval_ns;
        let decide = |tat: &AtomicU64| {
            tat.fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                let t = t.max(now);
                (t + interval_ns - now <= tau).then_some(t + interval_ns)
            })
            .is_ok()
        };
        if let Some(tat) = shard.read().unwrap().get(key) {
            return decide(tat);
        }
        let mut map = shard.write().unwrap();
        decide(
            map.entry(key.to_owned())
                .or_insert_with(|| AtomicU64::new(0)),
        )
    }
}

async fn memory_baseline(args: &Args) -> Run {
    if args.strategy == Strategy::Gcra {
        let store = Arc::new(KeyedGcra::new());
        let keys = args.keys;
        // the quota of `quota(Strategy::Gcra)`: HUGE per minute
        let interval_ns = (60_000_000_000 / HUGE).max(1);
        return drive(args, move |i| {
            let store = store.clone();
            async move {
                assert!(store.check(&format!("k{}", i % keys), HUGE, interval_ns));
            }
        })
        .await;
    }
    let store = Arc::new(HandWritten::new());
    let keys = args.keys;
    drive(args, move |i| {
        let store = store.clone();
        async move {
            assert!(store.check(&format!("k{}", i % keys), HUGE, Duration::from_secs(60)));
        }
    })
    .await
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

async fn bench_store(args: &Args, store: &str) -> Result<(), Box<dyn std::error::Error>> {
    let prefix = format!("bench{}", std::process::id());
    let builder = RateLimiter::builder()
        .prefix(&*prefix)
        .quota(quota(args.strategy));
    // keeps a private server alive for the whole run
    let mut _server = None;
    let mut unbatched = None;
    let (limiter, baseline_conn) = if store == "redis" {
        let url = match &args.redis_url {
            Some(url) => url.clone(),
            None => _server.insert(common::RedisServer::start()).url(),
        };
        let pool = deadpool_redis::Config::from_url(url.as_str())
            .create_pool(Some(deadpool_redis::Runtime::Tokio1))?;
        let redis_store = RedisStore::new(pool)
            .connections(args.connections)
            .timeout(Duration::from_secs(5));
        let conn = redis::Client::open(url.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        let off = builder
            .clone()
            .prefix(format!("{prefix}-off"))
            .store(redis_store.clone().batching(false))
            .build()?;
        off.peek("warm-up").await?;
        unbatched = Some(off);
        (builder.store(redis_store).build()?, Some(conn))
    } else {
        (builder.store(MemoryStore::new()).build()?, None)
    };
    // connect and load the scripts before timing
    limiter.peek("warm-up").await?;
    let baseline_name = match &baseline_conn {
        Some(conn) => {
            redis_ceiling(
                &Args {
                    requests: 1,
                    ..args.clone()
                },
                conn,
                &prefix,
            )
            .await;
            "bare redis-rs EVALSHA"
        }
        None if args.strategy == Strategy::Gcra => "keyed GCRA a la governor",
        None => "hand-written Mutex<HashMap>",
    };
    if let (Some(fraction), Some(conn), Some(off)) = (args.offered, &baseline_conn, &unbatched) {
        return open_loop(args, fraction, conn, &prefix, &limiter, off).await;
    }
    println!(
        "\n{store} store, {}: concurrency {}, {} keys, {} decisions per run",
        args.strategy, args.concurrency, args.keys, args.requests
    );
    let mut ratios = Vec::with_capacity(args.rounds);
    let mut off_ratios = Vec::with_capacity(args.rounds);
    for round in 1..=args.rounds {
        let base = match &baseline_conn {
            Some(conn) => redis_ceiling(args, conn, &prefix).await,
            None => memory_baseline(args).await,
        };
        let ours = crate_run(args, &limiter).await;
        let ratio = ours.per_sec / base.per_sec;
        ratios.push(ratio);
        let label = format!("baseline ({baseline_name})");
        println!("round {round}  {label:<40} {base}");
        println!(
            "round {round}  {:<40} {ours}  ratio {ratio:.2}",
            "tower-redis-ratelimit"
        );
        if let Some(off) = &unbatched {
            let off = crate_run(args, off).await;
            let ratio = off.per_sec / base.per_sec;
            off_ratios.push(ratio);
            println!(
                "round {round}  {:<40} {off}  ratio {ratio:.2}",
                "tower-redis-ratelimit, batching(false)"
            );
        }
    }
    println!(
        "{store} {}: median ratio to the baseline {:.2}",
        args.strategy,
        median(ratios)
    );
    if !off_ratios.is_empty() {
        println!(
            "{store} {} with batching(false): median ratio to the baseline {:.2}",
            args.strategy,
            median(off_ratios)
        );
    }
    Ok(())
}

/// `--offered`: the ceiling's closed-loop rate, then the limiter with
/// batching on and off in turn at `fraction` of it, open-loop.
async fn open_loop(
    args: &Args,
    fraction: f64,
    conn: &MultiplexedConnection,
    prefix: &str,
    batched: &RateLimiter,
    unbatched: &RateLimiter,
) -> Result<(), Box<dyn std::error::Error>> {
    let ceiling = redis_ceiling(args, conn, prefix).await;
    let rate = ceiling.per_sec * fraction;
    println!(
        "\nredis store, {}: {} keys, {} decisions per run, offered {rate:.0}/s \
         ({fraction} of the ceiling's {:.0}/s)",
        args.strategy, args.keys, args.requests, ceiling.per_sec
    );
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for round in 1..=args.rounds {
        let a = crate_open(args, batched, rate).await;
        println!("round {round}  {:<40} {a}", "tower-redis-ratelimit");
        let b = crate_open(args, unbatched, rate).await;
        println!(
            "round {round}  {:<40} {b}",
            "tower-redis-ratelimit, batching(false)"
        );
        on.push(a);
        off.push(b);
    }
    let p =
        |runs: &[Run], f: fn(&Run) -> u32| median(runs.iter().map(|r| f64::from(f(r))).collect());
    println!(
        "median p50/p99: batching {:.0}/{:.0} µs, batching(false) {:.0}/{:.0} µs",
        p(&on, |r| r.p50_us),
        p(&on, |r| r.p99_us),
        p(&off, |r| r.p50_us),
        p(&off, |r| r.p99_us)
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    for store in &args.stores {
        bench_store(&args, store).await?;
    }
    Ok(())
}
