//! A token budget under concurrency: 4 service instances on one store (one
//! private `redis-server`, each instance its own `RedisStore`; or one
//! `MemoryStore` cloned), 64 concurrent streams with random token usage
//! (some larger than what is left, some failing and refunded), one budget
//! (see `common/budget.rs` for the streams and the patterns).
//!
//! What holds whatever the interleaving:
//!
//! - report only (a look before, a report after): every report is charged,
//!   once (the count at the end is exactly the tokens used), and the
//!   overspend is at most the streams × the largest single usage;
//! - reserve then settle: never any overspend; with `charge: admitted`,
//!   what is left at the end is exactly the budget less the tokens used;
//!   with `charge: over` (or the default), a denied reservation is charged as
//!   envoyproxy/ratelimit charges it, and never given back (its stream was
//!   not admitted, so it does not settle);
//! - the model of envoyproxy/ratelimit's counting, on the same streams'
//!   draws: the same bound on report only; on reserve, no overspend, and
//!   every `max_tokens` charged whether used or not.
//!
//! The bound of report only. Let L be the budget, S the streams, U the
//! largest usage of one admitted request. Every report is recorded (past
//! the limit if need be: `charge: over`), and nothing else changes the
//! count (a look adds 0, a failed request reports nothing), so the count is
//! always the sum of the reports recorded so far, and it only grows. A look
//! is admitted only while the count is at most L. Let t be the moment the
//! count first goes past L (a report recorded); just before it, the count
//! c is at most L. After t every look is denied, so every report recorded
//! from t on (t's own included) is of a request whose look was admitted
//! before t and which had not reported yet: a stream has at most one such
//! request (it reports before it asks again), so there are at most S of
//! them, each of at most U tokens. Every admitted request reports all it
//! used, so the tokens used are the final count, at most c + S × U ≤ L +
//! S × U: the overspend is at most S × U. (A denied report costs three
//! store calls, a decision, the record and a look for the answer; a look
//! admitted between the decision and the record came before t, and is one
//! of the S.) If the count never passes L, there is no overspend.
//!
//! Reserve then settle has none: a reservation is admitted only if the
//! count plus its `max_tokens` is at most L, and the count is never less
//! than the tokens used plus the reservations not settled yet (a settle
//! gives back only a reservation's unused part, which the count holds), so
//! at every admission the tokens used, even all of the admitted
//! reservations, fit in L.

// (a spawned call's future is deep: the Redis client's connect)
#![recursion_limit = "256"]

#[path = "common/budget.rs"]
mod budget;
mod common;

use std::sync::Arc;

use budget::{Backend, Model, Outcome, Pattern, Trace, config_text, run};
use common::*;
use tower_redis_ratelimit::MemoryStore;
use tower_redis_ratelimit::store::Store;
use tower_redis_ratelimit_server::service::{RlsService, ServiceOptions};

const BUDGET: u64 = 100_000;
const INSTANCES: usize = 4;

/// The budget of the test of the bound's worst case.
const SMALL: u64 = 1_000;

fn instances<S: Store + Clone>(budget: u64, store: impl Fn() -> S) -> Vec<RlsService> {
    (0..INSTANCES)
        .map(|_| {
            RlsService::new(
                config(&config_text(budget)),
                store(),
                ServiceOptions::default(),
            )
            .expect("service")
        })
        .collect()
}

fn service(instances: &[RlsService], key: &'static str, seed: u64) -> Backend {
    Backend::Service {
        instances: instances.to_vec(),
        key,
        value: format!("user-{seed}"),
    }
}

fn show(name: &str, o: &Outcome) {
    eprintln!("{}", budget::row(name, o));
}

/// Report only: every report charged once, the budget spent, the overspend
/// within its bound.
fn report_only_holds(name: &str, o: &Outcome) {
    show(name, o);
    assert_eq!(
        o.charged, o.tally.used,
        "{name}: a report was lost or charged twice: {o:?}"
    );
    assert!(
        o.tally.used > BUDGET,
        "{name}: the budget was not spent: {o:?}"
    );
    assert!(!o.last_look.0, "{name}: a look still admitted: {o:?}");
    assert!(
        o.overspend() <= o.bound(),
        "{name}: overspent {} past the bound {} (streams × largest usage): {o:?}",
        o.overspend(),
        o.bound()
    );
}

/// Reserve then settle: no overspend.
fn reserve_holds(name: &str, o: &Outcome) {
    show(name, o);
    assert!(
        o.tally.used <= BUDGET,
        "{name}: overspent by {}: {o:?}",
        o.overspend()
    );
    assert!(o.tally.admitted > 0 && o.tally.denied > 0, "{name}: {o:?}");
}

async fn every_pattern(instances: &[RlsService], seed: u64) {
    let trace = Trace::new(seed, BUDGET);

    // a. report only, on the service and on the model of the Go service
    let a = run(
        service(instances, "report", seed),
        Pattern::ReportOnly,
        &trace,
    )
    .await;
    report_only_holds("report only", &a);
    let go = run(
        Backend::Model(Model::new(BUDGET, instances.to_vec())),
        Pattern::ReportOnly,
        &trace,
    )
    .await;
    report_only_holds("report only, envoyproxy/ratelimit's counting", &go);

    // b. reserve then settle, `charge: admitted`: what is left is exactly
    // the budget less what was used (every refund given back, every denied
    // reservation free)
    let b = run(
        service(instances, "reserve", seed),
        Pattern::Reserve,
        &trace,
    )
    .await;
    reserve_holds("reserve then settle (charge: admitted)", &b);
    assert!(b.last_look.0, "{b:?}");
    assert_eq!(b.last_look.1, BUDGET - b.tally.used, "what is left: {b:?}");
    assert_eq!(b.charged, b.tally.used, "{b:?}");
    assert_eq!(b.tally.reserved - b.tally.refunded, b.tally.used, "{b:?}");

    // b'. the same with `charge: over` (or the default): each denied
    // reservation is charged in full (past the limit), and its stream,
    // not admitted, never settles
    let over = run(
        service(instances, "reserve-over", seed),
        Pattern::Reserve,
        &trace,
    )
    .await;
    reserve_holds("reserve then settle (charge: over)", &over);
    assert_eq!(
        over.charged,
        over.tally.used + over.tally.denied_hits,
        "{over:?}"
    );

    // c. the Go service's counting: no overspend either, but every
    // reservation charged in full, used or not, denied or not
    let go = run(
        Backend::Model(Model::new(BUDGET, instances.to_vec())),
        Pattern::Reserve,
        &trace,
    )
    .await;
    reserve_holds("reserve, envoyproxy/ratelimit's counting", &go);
    assert_eq!(
        go.charged,
        go.tally.reserved + go.tally.denied_hits,
        "{go:?}"
    );
    assert!(go.charged > go.tally.used, "{go:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_holds_under_concurrency_on_one_redis() {
    let redis = Redis::start();
    let instances = instances(BUDGET, || redis_store(&redis));
    for seed in [1, 2] {
        every_pattern(&instances, seed).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_holds_under_concurrency_in_memory() {
    let store = MemoryStore::new();
    let instances = instances(BUDGET, || store.clone());
    for seed in [1, 2, 3] {
        every_pattern(&instances, seed).await;
    }
}

/// The bound is nearly reached when every stream is in flight at once: 64
/// looks admitted on an empty budget of 1 000 (all of them before any
/// report: a barrier), then 64 reports of 1 024 each: 65 536 charged, an
/// overspend of 64 536 against the bound of 64 × 1 024 = 65 536 (the proof's
/// c + S × U with c = 0: the bound less the budget).
async fn every_stream_in_flight(instances: Vec<RlsService>) {
    const STREAMS: usize = 64;
    const USAGE: u64 = 1024;
    let backend = Backend::Service {
        instances,
        key: "report",
        value: "all".into(),
    };
    let barrier = Arc::new(tokio::sync::Barrier::new(STREAMS));
    let tasks: Vec<_> = (0..STREAMS)
        .map(|i| {
            let (backend, barrier) = (backend.clone(), barrier.clone());
            tokio::spawn(async move {
                let admitted = backend.ask(i, 0).await;
                barrier.wait().await;
                if !admitted {
                    return 0;
                }
                backend.ask(i, USAGE).await;
                USAGE
            })
        })
        .collect();
    let mut used = 0;
    for t in tasks {
        used += t.await.expect("a stream");
    }
    assert_eq!(used, STREAMS as u64 * USAGE, "every look was admitted");
    let charged = backend.charged(SMALL).await;
    assert_eq!(charged, used, "every report charged once");
    let overspend = used - SMALL;
    assert_eq!(overspend, 64_536);
    assert!(overspend <= STREAMS as u64 * USAGE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bound_is_nearly_reached_when_every_stream_is_in_flight() {
    let redis = Redis::start();
    every_stream_in_flight(instances(SMALL, || redis_store(&redis))).await;
    let store = MemoryStore::new();
    every_stream_in_flight(instances(SMALL, || store.clone())).await;
}
