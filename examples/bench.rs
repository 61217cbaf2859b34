//! Decisions per second of one `RateLimiter`, for comparison with the
//! reference programs in `../shared/bench/` (run them side by side, in one session).
//!
//! ```sh
//! cargo run --release --example bench -- --store redis --redis-url redis://127.0.0.1:6379/ \
//!     --strategy fixed-window --concurrency 256 --keys 10000 --requests 200000
//! ```
//!
//! Every task loops: take the next request number, check key `k<i % keys>`,
//! record the latency. The limit is high (1 000 000 per minute) so the store
//! does its full work on every call. For `concurrency`, each admitted request
//! releases its lease at once (a second round trip, included in the latency).
//! The last line is machine-readable:
//! `decisions_per_sec=<n> p50_us=<n> p99_us=<n> allowed=<n>`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimiter, RedisStore, Strategy};

struct Args {
    store: String,
    redis_url: String,
    strategy: Strategy,
    concurrency: usize,
    keys: usize,
    requests: usize,
    connections: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        store: "memory".into(),
        redis_url: std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into()),
        strategy: Strategy::FixedWindow,
        concurrency: 256,
        keys: 10_000,
        requests: 200_000,
        connections: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let number = |v: String| v.parse::<usize>().map_err(|e| format!("{v}: {e}"));
        match flag.as_str() {
            "--store" => args.store = value()?,
            "--redis-url" => args.redis_url = value()?,
            "--strategy" => args.strategy = value()?.parse()?,
            "--concurrency" => args.concurrency = number(value()?)?.max(1),
            "--keys" => args.keys = number(value()?)?.max(1),
            "--requests" => args.requests = number(value()?)?,
            "--connections" => args.connections = number(value()?)?.max(1),
            "-h" | "--help" => {
                return Err(
                    "usage: bench --store redis|memory --redis-url URL --strategy NAME \
                     --concurrency C --keys K --requests N [--connections N]"
                        .into(),
                );
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if args.store != "redis" && args.store != "memory" {
        return Err(format!(
            "--store must be redis or memory, not {}",
            args.store
        ));
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let quota = match args.strategy {
        Strategy::Concurrency => Quota::concurrency(1_000_000),
        s => Quota::new(s, Rate::per_minute(1_000_000)),
    };
    let prefix = format!("bench{}", std::process::id());
    let builder = RateLimiter::builder().prefix(prefix).quota(quota);
    let limiter = if args.store == "redis" {
        let pool = deadpool_redis::Config::from_url(&args.redis_url)
            .create_pool(Some(deadpool_redis::Runtime::Tokio1))?;
        let store = RedisStore::new(pool)
            .connections(args.connections)
            .timeout(Duration::from_secs(5));
        builder.store(store).build()?
    } else {
        builder.store(MemoryStore::new()).build()?
    };
    // connect and load the script before timing
    limiter.peek("warm-up").await?;

    let next = Arc::new(AtomicUsize::new(0));
    let allowed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(args.concurrency);
    for _ in 0..args.concurrency {
        let (limiter, next, allowed) = (limiter.clone(), next.clone(), allowed.clone());
        let (total, keys) = (args.requests, args.keys);
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let key = format!("k{}", i % keys);
                let t = Instant::now();
                let d = limiter.check(&key).await?;
                if let Some(lease) = &d.lease {
                    limiter.release(lease).await?;
                }
                latencies.push(t.elapsed().as_micros() as u32);
                if d.allowed {
                    allowed.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok::<_, tower_redis_ratelimit::StoreError>(latencies)
        }));
    }
    let mut all = Vec::with_capacity(args.requests);
    for t in tasks {
        all.extend(t.await??);
    }
    let secs = started.elapsed().as_secs_f64();
    all.sort_unstable();
    let pct = |p: f64| all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)));
    println!(
        "store={} strategy={} concurrency={} keys={} requests={}",
        args.store, args.strategy, args.concurrency, args.keys, args.requests
    );
    println!(
        "decisions_per_sec={:.0} p50_us={} p99_us={} allowed={}",
        all.len() as f64 / secs,
        pct(0.50).copied().unwrap_or(0),
        pct(0.99).copied().unwrap_or(0),
        allowed.load(Ordering::Relaxed)
    );
    Ok(())
}
