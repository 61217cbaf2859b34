//! Runs strategies against traffic patterns on a `MemoryStore` with a manual
//! clock, writes one SVG chart per run and prints an ASCII summary of each;
//! exits with an error if a run breaks its strategy's documented guarantee.
//!
//!     cargo run -p tower-redis-ratelimit-sim                          # every strategy and pattern, into docs/sim/
//!     cargo run -p tower-redis-ratelimit-sim -- gcra boundary-burst   # one run
//!     cargo run -p tower-redis-ratelimit-sim -- all sawtooth --out /tmp/charts
//!
//! Strategies: fixed-window, sliding-window-log, sliding-window-counter,
//! token-bucket, leaky-bucket, gcra, concurrency (or `all`). Patterns:
//! steady, burst-then-idle, boundary-burst, sawtooth, many-clients (or
//! `all`). Every run is `Scenario::standard`: 10 requests per 10 s (burst
//! 10), or 10 leases held 10 s each; the output is the same on every run.
//!
//! Run from the repository's root (the charts go to `docs/sim/` there).

use std::path::PathBuf;
use std::process::ExitCode;

use tower_redis_ratelimit::strategy::Strategy;
use tower_redis_ratelimit_sim::{Pattern, Scenario};

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Whether every run kept its guarantee.
fn run() -> Result<bool, Box<dyn std::error::Error>> {
    let mut out = PathBuf::from("docs/sim");
    let mut names = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--out" {
            out = args.next().ok_or("--out needs a directory")?.into();
        } else if arg == "-h" || arg == "--help" {
            println!("usage: simulate [STRATEGY|all [PATTERN|all]] [--out DIR]");
            return Ok(true);
        } else if arg.starts_with('-') {
            return Err(format!("unknown option {arg:?} (try --help)").into());
        } else {
            names.push(arg);
        }
    }
    if names.len() > 2 {
        return Err(format!(
            "at most a strategy and a pattern, not {:?} (try --help)",
            &names[2..]
        )
        .into());
    }
    let strategies = match names.first().map(String::as_str) {
        None | Some("all") => Strategy::ALL.to_vec(),
        Some(s) => vec![s.parse::<Strategy>()?],
    };
    let patterns = match names.get(1).map(String::as_str) {
        None | Some("all") => Pattern::ALL.to_vec(),
        Some(p) => vec![p.parse::<Pattern>()?],
    };
    std::fs::create_dir_all(&out)?;
    let mut ok = true;
    for &strategy in &strategies {
        for &pattern in &patterns {
            let sim = Scenario::standard(strategy, pattern).run()?;
            let path = out.join(sim.file_name());
            std::fs::write(&path, sim.svg()?)?;
            println!("{}  -> {}", sim.summary(), path.display());
            if let Err(violation) = sim.check() {
                eprintln!("guarantee broken: {violation}");
                ok = false;
            }
        }
    }
    Ok(ok)
}
