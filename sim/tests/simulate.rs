//! The simulator as a property check and the keeper of the
//! committed charts: every standard run of every strategy and pattern keeps
//! its strategy's documented guarantee, and `docs/sim/` holds exactly the
//! charts those runs draw now.
//!
//!     cargo test -p tower-redis-ratelimit-sim
//!     UPDATE_CHARTS=1 cargo test -p tower-redis-ratelimit-sim --test simulate   # rewrite docs/sim/

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use tower_redis_ratelimit::strategy::Strategy;
use tower_redis_ratelimit::{Quota, Rate};
use tower_redis_ratelimit_sim::{Pattern, STANDARD_RATE, Scenario, Simulation};

const REGENERATE: &str = "UPDATE_CHARTS=1 cargo test -p tower-redis-ratelimit-sim --test simulate";

fn standard_runs() -> Vec<Simulation> {
    let mut runs = Vec::new();
    for strategy in Strategy::ALL {
        for pattern in Pattern::ALL {
            runs.push(Scenario::standard(strategy, pattern).run().unwrap());
        }
    }
    runs
}

fn run(strategy: Strategy, pattern: Pattern) -> Simulation {
    Scenario::standard(strategy, pattern).run().unwrap()
}

#[test]
fn every_standard_run_keeps_its_strategys_documented_guarantee() {
    let broken: Vec<String> = standard_runs()
        .iter()
        .filter_map(|sim| sim.check().err().map(|v| v.to_string()))
        .collect();
    assert!(
        broken.is_empty(),
        "guarantees broken:\n{}",
        broken.join("\n")
    );
}

/// Other counts, an odd period, bursts of 1 and above the count, traffic
/// at the quota's rate and three times it, leases released before and after
/// their timeout.
#[test]
fn other_quotas_and_traffic_keep_their_guarantees_too() {
    let period = Duration::from_micros(1_500_001);
    let mut runs = 0;
    for strategy in Strategy::ALL {
        for n in [1, 7] {
            let rate = Rate::new(n, period);
            let quotas: Vec<Quota> = match strategy {
                Strategy::Concurrency => vec![Quota::concurrency(n).lease_timeout(period)],
                Strategy::TokenBucket | Strategy::LeakyBucket | Strategy::Gcra => {
                    [None, Some(1), Some(2 * n + 1)]
                        .into_iter()
                        .map(|b| {
                            let q = Quota::new(strategy, rate);
                            b.map_or(q.clone(), |b| q.burst(b))
                        })
                        .collect()
                }
                _ => vec![Quota::new(strategy, rate)],
            };
            let holds = match strategy {
                Strategy::Concurrency => vec![period / 3, period * 2],
                _ => vec![period],
            };
            for quota in quotas {
                for &hold in &holds {
                    for pattern in Pattern::ALL {
                        for traffic in [rate, Rate::new(3 * n, period)] {
                            let sim = Scenario::new(quota.clone(), pattern)
                                .traffic(traffic)
                                .hold(hold)
                                .run()
                                .unwrap();
                            if let Err(v) = sim.check() {
                                panic!(
                                    "{quota:?}, {traffic}, hold {hold:?}: {v}\n{}",
                                    sim.summary()
                                );
                            }
                            runs += 1;
                        }
                    }
                }
            }
        }
    }
    assert_eq!(runs, 280);
}

#[test]
fn the_boundary_burst_shows_each_strategys_bound() {
    let most = |s| run(s, Pattern::BoundaryBurst).most_in_one_period();
    let n = STANDARD_RATE.count() as usize;
    // the fixed window: its n (less the request that opened it) just before
    // the edge and n more just after, 2n - 1 within one second
    assert_eq!(most(Strategy::FixedWindow), 2 * n - 1);
    // the log: exactly n; the counter, here, as well
    assert_eq!(most(Strategy::SlidingWindowLog), n);
    assert_eq!(most(Strategy::SlidingWindowCounter), n);
    // the buckets: the first request, then a full burst of n
    for s in [Strategy::TokenBucket, Strategy::Gcra, Strategy::LeakyBucket] {
        assert_eq!(most(s), n + 1, "{s}");
    }
    assert_eq!(
        run(Strategy::Concurrency, Pattern::BoundaryBurst).most_in_flight(),
        10
    );
}

#[test]
fn leaky_bucket_admissions_wait_for_their_slot() {
    let sim = run(Strategy::LeakyBucket, Pattern::BurstThenIdle);
    let delays: Vec<u128> = sim
        .requests()
        .iter()
        .filter(|r| r.allowed)
        .take(10)
        .map(|r| (r.at + r.delay.unwrap_or_default()).as_millis())
        .collect();
    // a burst of 30 at 1 s, 10 ms apart: the queue of 10 is served one a second
    assert_eq!(
        delays,
        [
            1_000, 2_000, 3_000, 4_000, 5_000, 6_000, 7_000, 8_000, 9_000, 10_000
        ]
    );
}

#[test]
fn the_guides_summary_is_the_simulators() {
    let readme = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/guide/simulator.md"
    ))
    .unwrap();
    let summary = run(Strategy::FixedWindow, Pattern::BoundaryBurst).summary();
    assert!(
        readme.contains(&summary),
        "docs/guide/simulator.md should show this summary:\n{summary}"
    );
}

#[test]
fn runs_are_deterministic() {
    for (strategy, pattern) in [
        (Strategy::SlidingWindowCounter, Pattern::Sawtooth),
        (Strategy::Concurrency, Pattern::ManyClients),
    ] {
        let (a, b) = (run(strategy, pattern), run(strategy, pattern));
        assert_eq!(a.svg().unwrap(), b.svg().unwrap());
        assert_eq!(a.summary(), b.summary());
        assert!(a.summary().is_ascii());
    }
}

#[test]
fn committed_charts_are_up_to_date() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/sim");
    let update = std::env::var_os("UPDATE_CHARTS").is_some();
    if update {
        std::fs::create_dir_all(&dir).unwrap();
    }
    let mut stale = Vec::new();
    let mut expected = BTreeSet::new();
    for sim in standard_runs() {
        let name = sim.file_name();
        let svg = sim.svg().unwrap();
        let path = dir.join(&name);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(svg.as_str()) {
            if update {
                std::fs::write(&path, &svg).unwrap();
            } else {
                stale.push(name.clone());
            }
        }
        expected.insert(name);
    }
    let mut extra = Vec::new();
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".svg") && !expected.contains(&name) {
            if update {
                std::fs::remove_file(entry.path()).unwrap();
            } else {
                extra.push(name);
            }
        }
    }
    assert!(
        stale.is_empty() && extra.is_empty(),
        "docs/sim/ is stale: missing or different {stale:?}, not drawn by any run {extra:?}; \
         regenerate with `{REGENERATE}` and review the diff"
    );
}

#[test]
fn a_large_run_keeps_its_guarantee() {
    // 40 000 requests (the sliding counter's check once rescanned every
    // admission's window: quadratic, minutes in a debug build)
    let sim = Scenario::new(
        Quota::sliding_window_counter(Rate::per_second(1_000_000)),
        Pattern::Steady,
    )
    .traffic(Rate::per_second(20_000))
    .run()
    .unwrap();
    sim.check().unwrap();
    assert!(sim.summary().contains("holds"));
}

#[test]
fn a_concurrency_hold_out_of_range_is_named() {
    for hold in [
        Duration::ZERO,
        Duration::from_micros(1),
        Duration::from_secs(400 * 86_400),
    ] {
        let e = Scenario::new(Quota::concurrency(3), Pattern::Steady)
            .hold(hold)
            .run()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("hold"), "{hold:?}: {e}");
    }
}
