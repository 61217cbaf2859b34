//! A token budget under concurrency: 4 service instances (each its own
//! `RedisStore`) on one private `redis-server` (a free loopback port, never
//! 6379), 64 concurrent streams with random token usage, one budget; the
//! patterns of `tests/budget.rs` (the streams are `tests/common/budget.rs`),
//! for a few seeds (default: 3) and budgets (default: 100 000 and
//! 1 000 000 tokens an hour):
//!
//! ```sh
//! cargo bench -p tower-redis-ratelimit-server --bench token_budget
//! cargo bench -p tower-redis-ratelimit-server --bench token_budget -- --rounds 5 --budget 20000 --budget 100000
//! ```
//!
//! It prints one Markdown table: per seed and pattern, the budget, the
//! tokens used by admitted requests, the tokens charged against the budget
//! (the count at the end), the overspend (used past the budget), its bound
//! (report only: the streams × the largest usage of one request; a
//! reservation: 0), the over-charge (charged but never used) and the
//! streams' calls per second. `redis-server` must be on the `PATH`.

// (a spawned call's future is deep: the Redis client's connect)
#![recursion_limit = "256"]

#[path = "../tests/common/budget.rs"]
mod budget;
#[path = "../tests/common/mod.rs"]
mod common;

use std::process::ExitCode;

use budget::{Backend, Model, Pattern, Trace, config_text, header, row, run};
use common::{Redis, config, redis_store};
use tower_redis_ratelimit_server::service::{RlsService, ServiceOptions};

const USAGE: &str = "usage: token_budget [--rounds N] [--budget TOKENS ...] [--instances N]";

struct Args {
    rounds: u64,
    budgets: Vec<u64>,
    instances: usize,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        rounds: 3,
        budgets: Vec::new(),
        instances: 4,
    };
    let mut it = std::env::args().skip(1).filter(|a| a != "--bench");
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
        };
        let number = |v: String| {
            v.parse::<u64>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("{flag} {v:?}: a positive number\n{USAGE}"))
        };
        match flag.as_str() {
            "--rounds" => a.rounds = number(value()?)?,
            "--budget" => a.budgets.push(number(value()?)?.min(u64::from(u32::MAX))),
            "--instances" => {
                a.instances = usize::try_from(number(value()?)?).map_err(|e| e.to_string())?;
            }
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if a.budgets.is_empty() {
        a.budgets = vec![100_000, 1_000_000];
    }
    Ok(a)
}

async fn bench(args: Args) {
    let redis = Redis::start();
    let trace = |seed, budget| Trace::new(seed, budget);
    println!(
        "{} instances on one redis-server, {} streams, max_tokens {}..={}, one request in {} fails \
         (refunded in full)\n",
        args.instances,
        trace(0, 0).streams,
        trace(0, 0).max_tokens.0,
        trace(0, 0).max_tokens.1,
        trace(0, 0).fail_one_in,
    );
    println!("{}", header());
    for &budget in &args.budgets {
        let instances: Vec<RlsService> = (0..args.instances)
            .map(|_| {
                RlsService::new(
                    config(&config_text(budget)),
                    redis_store(&redis),
                    ServiceOptions::default(),
                )
                .expect("service")
            })
            .collect();
        let service = |key: &'static str, seed: u64| Backend::Service {
            instances: instances.clone(),
            key,
            // (a user per budget and seed: one key of each rule each)
            value: format!("user-{budget}-{seed}"),
        };
        // every instance's connections open before the first run
        let warm = service("report", 0);
        let warming: Vec<_> = (0..trace(0, budget).streams)
            .map(|i| {
                let warm = warm.clone();
                tokio::spawn(async move { warm.ask(i, 0).await })
            })
            .collect();
        for w in warming {
            w.await.expect("a warm-up call");
        }
        for seed in 1..=args.rounds {
            let trace = trace(seed, budget);
            let model = || Backend::Model(Model::new(budget, instances.clone()));
            let rows = [
                (
                    "report only",
                    run(service("report", seed), Pattern::ReportOnly, &trace).await,
                ),
                (
                    "report only, envoyproxy/ratelimit model",
                    run(model(), Pattern::ReportOnly, &trace).await,
                ),
                (
                    "reserve then settle, `charge: admitted`",
                    run(service("reserve", seed), Pattern::Reserve, &trace).await,
                ),
                (
                    "reserve then settle, `charge: over`",
                    run(service("reserve-over", seed), Pattern::Reserve, &trace).await,
                ),
                (
                    "reserve, envoyproxy/ratelimit model",
                    run(model(), Pattern::Reserve, &trace).await,
                ),
            ];
            for (name, o) in &rows {
                println!("{}", row(name, o));
            }
        }
    }
    println!(
        "\n(the model's calls are paced by a look on the service each, so that its streams \
         interleave as the service's do: its calls/s is not the Go service's)"
    );
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(bench(args));
    ExitCode::SUCCESS
}
