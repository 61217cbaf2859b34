//! One hot key past the round-trip ceiling: decisions per second of four
//! limiter instances (four app replicas, each with its own `RedisStore`) on
//! one private Redis, all deciding for the same key, with local budgets
//! of `n` units, next to the one-`EVALSHA`-per-decision ceiling in the same
//! binary, in alternating rounds (compare the ratios: the machine may be
//! shared and noisy).
//!
//! ```sh
//! cargo bench -p tower-redis-ratelimit-tests --bench hot_key                       # n = 100, 4 instances
//! cargo bench -p tower-redis-ratelimit-tests --bench hot_key -- --n 10 --rounds 5
//! ```
//!
//! - The ceiling: tasks sharing one redis-rs multiplexed connection per
//!   instance, one `EVALSHA` of a minimal fixed-window script (`INCRBY`,
//!   `PEXPIRE` on the first hit) per decision, on the same key.
//! - Ours: the same tasks calling `RateLimiter::check` on a GCRA quota (or
//!   `--strategy`) with `local_budget(n)`.
//!
//! The limit is high (10^9 per minute), so every decision is allowed and the
//! bench measures the decision path; the exact counts under a tight limit
//! are what `tests/store/local_budgets.rs` checks.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/common/mod.rs"]
#[allow(unreachable_pub)]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use tower_redis_ratelimit::strategy::Strategy;
use tower_redis_ratelimit::{Quota, Rate, RateLimiter, RedisStore};

/// Nothing is ever denied at this rate.
const HUGE: u64 = 1_000_000_000;

/// What one would write by hand: one script call per decision.
const CEILING_SCRIPT: &str = r"
local n = redis.call('INCRBY', KEYS[1], ARGV[2])
if n == tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
if n > tonumber(ARGV[1]) then redis.call('DECRBY', KEYS[1], ARGV[2]) return 0 end
return 1
";

const USAGE: &str = "usage: cargo bench -p tower-redis-ratelimit-tests --bench hot_key -- [--n N] [--instances K] \
    [--strategy NAME] [--concurrency C] [--requests N] [--rounds R]";

struct Args {
    n: u64,
    instances: usize,
    strategy: Strategy,
    concurrency: usize,
    requests: usize,
    rounds: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        n: 100,
        instances: 4,
        strategy: Strategy::Gcra,
        concurrency: 256,
        requests: 400_000,
        rounds: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--bench" {
            continue;
        }
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let num = |v: &str| {
            v.parse::<usize>()
                .map_err(|e| format!("{flag}: {e}\n{USAGE}"))
        };
        match flag.as_str() {
            "--n" => args.n = num(&value)? as u64,
            "--instances" => args.instances = num(&value)?.max(1),
            "--strategy" => args.strategy = value.parse().map_err(|e| format!("{e}\n{USAGE}"))?,
            "--concurrency" => args.concurrency = num(&value)?.max(1),
            "--requests" => args.requests = num(&value)?.max(1),
            "--rounds" => args.rounds = num(&value)?.max(1),
            _ => return Err(format!("unknown flag {flag}\n{USAGE}")),
        }
    }
    Ok(args)
}

/// Runs `decide(task, i)` for `requests` request numbers over `concurrency`
/// tasks; returns decisions per second.
async fn drive<F, Fut>(args: &Args, decide: F) -> f64
where
    F: Fn(usize) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..args.concurrency)
        .map(|task| {
            let (next, decide, total) = (next.clone(), decide.clone(), args.requests);
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < total {
                    decide(task).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    args.requests as f64 / started.elapsed().as_secs_f64()
}

async fn ceiling(args: &Args, conns: &[MultiplexedConnection], key: &str) -> f64 {
    let script = Arc::new(redis::Script::new(CEILING_SCRIPT));
    let conns: Arc<[MultiplexedConnection]> = conns.into();
    let key: Arc<str> = key.into();
    drive(args, move |task| {
        let (script, mut conn, key) = (
            script.clone(),
            conns[task % conns.len()].clone(),
            key.clone(),
        );
        async move {
            let ok: i64 = script
                .key(&*key)
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

async fn ours(args: &Args, limiters: &[RateLimiter]) -> f64 {
    let limiters: Arc<[RateLimiter]> = limiters.into();
    drive(args, move |task| {
        let limiter = limiters[task % limiters.len()].clone();
        async move {
            assert!(limiter.check("hot").await.unwrap().allowed());
        }
    })
    .await
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
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
    let server = common::RedisServer::start();
    let url = server.url();
    let mut limiters = Vec::new();
    let mut conns = Vec::new();
    for _ in 0..args.instances {
        let pool = deadpool_redis::Config::from_url(url.as_str())
            .create_pool(Some(deadpool_redis::Runtime::Tokio1))?;
        let limiter = RateLimiter::builder()
            .store(RedisStore::new(pool).timeout(Duration::from_secs(5)))
            .prefix("hot")
            .quota(Quota::new(args.strategy, Rate::per_minute(HUGE)))
            .local_budget(args.n)
            .build()?;
        // connect and load the scripts before timing
        limiter.peek("warm-up").await?;
        limiters.push(limiter);
        conns.push(
            redis::Client::open(url.as_str())?
                .get_multiplexed_async_connection()
                .await?,
        );
    }
    println!(
        "one hot key, {} instances, {}, local_budget({}), concurrency {}, {} decisions per run",
        args.instances, args.strategy, args.n, args.concurrency, args.requests
    );
    let mut ratios = Vec::with_capacity(args.rounds);
    for round in 1..=args.rounds {
        let base = ceiling(&args, &conns, "{hot:ceiling}").await;
        let ours = ours(&args, &limiters).await;
        let ratio = ours / base;
        ratios.push(ratio);
        println!("round {round}  ceiling (one EVALSHA per decision) {base:>10.0}/s");
        println!(
            "round {round}  tower-redis-ratelimit              {ours:>10.0}/s  ratio {ratio:.2}"
        );
    }
    for l in &limiters {
        l.flush_local_budgets().await;
    }
    println!("median ratio to the ceiling {:.2}", median(ratios));
    Ok(())
}
