//! Usage reported after the response (Envoy's `apply_on_stream_done`, LLM
//! tokens), refunds (`hits_subtrahend`) and the `charge` setting, on the
//! memory store and a private Redis: a report is never lost, a refund
//! never gives back more than a limit holds, and a denied check takes
//! nothing where the config says so.

// (a spawned call's future is deep: the Redis client's connect)
#![recursion_limit = "256"]

mod common;

use common::*;
use tower_redis_ratelimit::MemoryStore;
use tower_redis_ratelimit::store::Store;
use tower_redis_ratelimit_server::config::Charge;
use tower_redis_ratelimit_server::pb::rate_limit_response::Code;
use tower_redis_ratelimit_server::pb::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};
use tower_redis_ratelimit_server::service::{RlsService, ServiceOptions};

/// A copied envoyproxy/ratelimit file (no extension): 100 an hour per
/// user, 1,000 per team; the extensions' `charge` settings; and their
/// strategies, each 100 an hour.
const CONFIG: &str = r#"
domain: ai
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: team
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: org
    rate_limit: {unit: hour, requests_per_unit: 1000, charge: over}
  - key: member
    rate_limit: {unit: hour, requests_per_unit: 1000, charge: always}
  - key: admitted
    rate_limit: {unit: hour, requests_per_unit: 100, charge: admitted}
  - key: fixed-window
    rate_limit: {unit: hour, requests_per_unit: 100, strategy: fixed-window}
  - key: sliding-window-log
    rate_limit: {unit: hour, requests_per_unit: 100, strategy: sliding-window-log}
  - key: sliding-window-counter
    rate_limit: {unit: hour, requests_per_unit: 100, strategy: sliding-window-counter}
  - key: token-bucket
    rate_limit: {unit: hour, requests_per_unit: 100, strategy: token-bucket}
  - key: leaky-bucket
    rate_limit: {unit: hour, requests_per_unit: 100, strategy: leaky-bucket}
  - key: gcra
    rate_limit: {unit: hour, requests_per_unit: 100, strategy: gcra}
  - key: biglog
    rate_limit: {unit: hour, requests_per_unit: 10000, strategy: sliding-window-log}
"#;

const STRATEGIES: [&str; 6] = [
    "fixed-window",
    "sliding-window-log",
    "sliding-window-counter",
    "token-bucket",
    "leaky-bucket",
    "gcra",
];

fn service<S: Store + Clone>(store: S) -> RlsService {
    RlsService::new(config(CONFIG), store, ServiceOptions::default()).expect("service")
}

/// One call: `descriptors`, the request's `hits_addend` and
/// `hits_subtrahend`.
async fn call(
    svc: &RlsService,
    descriptors: Vec<RateLimitDescriptor>,
    hits: u32,
    subtrahend: u32,
) -> RateLimitResponse {
    svc.should_rate_limit_inner(&RateLimitRequest {
        domain: "ai".into(),
        descriptors,
        hits_addend: hits,
        hits_subtrahend: subtrahend,
    })
    .await
    .expect("answer")
}

fn d(key: &str, value: &str) -> RateLimitDescriptor {
    desc(&[(key, value)])
}

/// The issue's trial: ten times a check of 1 before the request, then a
/// report of 60 tokens. Before, every report after the first was denied
/// and dropped: 10 requests admitted, 610 tokens on a budget of 100. Now
/// as in envoyproxy/ratelimit: the second report takes the count past the
/// limit, and every later check is denied.
async fn check_then_report(svc: RlsService) {
    inside_one_hour().await;
    let mut admitted = 0;
    let mut used = 0;
    for _ in 0..10 {
        let check = call(&svc, vec![d("user", "u1")], 1, 0).await;
        if overall(&check) == Code::Ok {
            admitted += 1;
            used += 1;
            // the report: Envoy ignores its answer
            call(&svc, vec![with_hits(d("user", "u1"), 60)], 0, 0).await;
            used += 60;
        }
    }
    assert_eq!(admitted, 2, "as envoyproxy/ratelimit: two requests");
    assert_eq!(used, 122);
    // and what is left says so: nothing, over
    let look = call(&svc, vec![with_hits(d("user", "u1"), 0)], 0, 0).await;
    assert_eq!(overall(&look), Code::OverLimit, "{look:?}");
    assert_eq!(look.statuses[0].limit_remaining, 0);
}

#[tokio::test]
async fn reports_after_the_response_are_never_lost_in_memory() {
    check_then_report(service(MemoryStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_after_the_response_are_never_lost_on_redis() {
    let redis = Redis::start();
    check_then_report(service(redis_store(&redis))).await;
}

/// A look (`hits_addend: 0`) before the request, the debit after it. Once
/// a debit passes the limit, it is recorded, and the next look is denied
/// (before, every denied debit was dropped and every look answered OK for
/// the rest of the window).
async fn look_then_debit(svc: RlsService) {
    inside_one_hour().await;
    let mut admitted = 0;
    for _ in 0..10 {
        let look = call(&svc, vec![with_hits(d("user", "u2"), 0)], 0, 0).await;
        if overall(&look) != Code::Ok {
            break;
        }
        admitted += 1;
        call(&svc, vec![with_hits(d("user", "u2"), 30)], 0, 0).await;
    }
    // 30, 60, 90, then 120 recorded: the fifth look is denied
    assert_eq!(admitted, 4);
}

#[tokio::test]
async fn a_debit_past_the_limit_denies_the_next_look_in_memory() {
    look_then_debit(service(MemoryStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debit_past_the_limit_denies_the_next_look_on_redis() {
    let redis = Redis::start();
    look_then_debit(service(redis_store(&redis))).await;
}

/// Under every strategy, a report larger than what is left (and one larger
/// than the whole limit) is recorded: the next look is denied.
async fn every_strategy_records(svc: RlsService) {
    inside_one_hour().await;
    for strategy in STRATEGIES {
        for (value, first, report) in [("a", 50, 60), ("b", 0, 250)] {
            let k = || d(strategy, value);
            if first > 0 {
                let r = call(&svc, vec![with_hits(k(), first)], 0, 0).await;
                assert_eq!(overall(&r), Code::Ok, "{strategy}: {r:?}");
            }
            let r = call(&svc, vec![with_hits(k(), report)], 0, 0).await;
            assert_eq!(overall(&r), Code::OverLimit, "{strategy}: {r:?}");
            assert_eq!(r.statuses[0].limit_remaining, 0, "{strategy}: {r:?}");
            let look = call(&svc, vec![with_hits(k(), 0)], 0, 0).await;
            assert_eq!(
                overall(&look),
                Code::OverLimit,
                "{strategy}: the report of {report} was lost: {look:?}"
            );
        }
    }
}

#[tokio::test]
async fn every_strategy_records_a_report_past_its_limit_in_memory() {
    every_strategy_records(service(MemoryStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_strategy_records_a_report_past_its_limit_on_redis() {
    let redis = Redis::start();
    every_strategy_records(service(redis_store(&redis))).await;
}

/// Descriptors in one report, the user's over its limit: the team's (a
/// copied rule: the default `charge: always`, as the Go service counts) and
/// the member's (`charge: always`) are charged whatever the answer; the
/// organisation's (`charge: over`, room left) is left as it was; one with
/// `charge: admitted` takes nothing when the call is denied, even where it
/// is the one over.
async fn charge_settings(svc: RlsService) {
    inside_one_hour().await;
    // the user spends its 100
    let r = call(&svc, vec![with_hits(d("user", "u3"), 100)], 0, 0).await;
    assert_eq!(overall(&r), Code::Ok);
    // a report of 40 with the user's, the org's and the member's limits
    let report = vec![
        with_hits(d("user", "u3"), 40),
        with_hits(d("org", "o3"), 40),
        with_hits(d("member", "m3"), 40),
        with_hits(d("team", "t3"), 40),
    ];
    let r = call(&svc, report, 0, 0).await;
    assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
    assert_eq!(code(&r.statuses[0]), Code::OverLimit);
    assert_eq!(code(&r.statuses[1]), Code::Ok);
    // the org's untouched, the member's charged (and the answer says so)
    assert_eq!(r.statuses[1].limit_remaining, 1000, "{r:?}");
    assert_eq!(r.statuses[2].limit_remaining, 960, "{r:?}");
    assert_eq!(r.statuses[3].limit_remaining, 960, "{r:?}");
    let look = call(
        &svc,
        vec![
            with_hits(d("org", "o3"), 0),
            with_hits(d("member", "m3"), 0),
            with_hits(d("team", "t3"), 0),
        ],
        0,
        0,
    )
    .await;
    assert_eq!(look.statuses[0].limit_remaining, 1000);
    assert_eq!(look.statuses[1].limit_remaining, 960);
    assert_eq!(look.statuses[2].limit_remaining, 960);
    // `charge: admitted`: 60 then 60 more, denied, takes nothing
    let r = call(&svc, vec![with_hits(d("admitted", "a3"), 60)], 0, 0).await;
    assert_eq!(overall(&r), Code::Ok);
    let r = call(&svc, vec![with_hits(d("admitted", "a3"), 60)], 0, 0).await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(r.statuses[0].limit_remaining, 40, "{r:?}");
    let r = call(&svc, vec![with_hits(d("admitted", "a3"), 40)], 0, 0).await;
    assert_eq!(overall(&r), Code::Ok, "what was left still fits: {r:?}");
}

#[tokio::test]
async fn charge_over_admitted_and_always_in_memory() {
    charge_settings(service(MemoryStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charge_over_admitted_and_always_on_redis() {
    let redis = Redis::start();
    charge_settings(service(redis_store(&redis))).await;
}

/// The service's default, `--charge always`, counts every descriptor of
/// every call, as envoyproxy/ratelimit does: the team's limit (a copied
/// rule) gets the report too; `--charge over` leaves it as it was.
#[tokio::test]
async fn the_service_default_charge_always_counts_every_descriptor() {
    inside_one_hour().await;
    let svc = RlsService::new(
        config(CONFIG),
        MemoryStore::new(),
        ServiceOptions::default(),
    )
    .expect("service");
    call(&svc, vec![with_hits(d("user", "u4"), 100)], 0, 0).await;
    let r = call(
        &svc,
        vec![
            with_hits(d("user", "u4"), 40),
            with_hits(d("team", "t4"), 40),
        ],
        0,
        0,
    )
    .await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(r.statuses[1].limit_remaining, 960, "{r:?}");
    let svc = RlsService::new(
        config(CONFIG),
        MemoryStore::new(),
        ServiceOptions::default().charge(Charge::Over),
    )
    .expect("service");
    call(&svc, vec![with_hits(d("user", "u4"), 100)], 0, 0).await;
    let r = call(
        &svc,
        vec![
            with_hits(d("user", "u4"), 40),
            with_hits(d("team", "t4"), 40),
        ],
        0,
        0,
    )
    .await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(r.statuses[1].limit_remaining, 1000, "{r:?}");
}

/// Reserve, then settle: a reservation of 50 (`hits_addend` from the
/// request, a `max_tokens`), and at stream done a refund of the unused 30
/// (`hits_subtrahend`); a report past the reservation (debt); both fields
/// set (their difference); a refund larger than anything charged and
/// `u32::MAX` (never below zero, never above the limit); a refund while in
/// debt (still over).
async fn reserve_then_settle(svc: RlsService) {
    inside_one_hour().await;
    for strategy in ["user", "token-bucket", "gcra", "sliding-window-counter"] {
        let k = |v: &str| d(strategy, v);
        // 50 reserved, 20 used: 30 back
        let r = call(&svc, vec![with_hits(k("r1"), 50)], 0, 0).await;
        assert_eq!(overall(&r), Code::Ok, "{strategy}");
        let r = call(&svc, vec![k("r1")], 0, 30).await;
        assert_eq!(overall(&r), Code::Ok, "{strategy}: {r:?}");
        assert_eq!(r.statuses[0].limit_remaining, 80, "{strategy}: {r:?}");
        // the request-wide hits_addend beside the subtrahend is the
        // descriptor's hits: 10 - 4 = 6 more charged
        let r = call(&svc, vec![k("r1")], 10, 4).await;
        assert_eq!(overall(&r), Code::Ok, "{strategy}: {r:?}");
        assert_eq!(r.statuses[0].limit_remaining, 74, "{strategy}: {r:?}");
        // 4 - 10: 6 back
        let r = call(&svc, vec![k("r1")], 4, 10).await;
        assert_eq!(r.statuses[0].limit_remaining, 80, "{strategy}: {r:?}");
        // a descriptor's own hits_addend beside the request's subtrahend
        let r = call(&svc, vec![with_hits(k("r1"), 5)], 0, 15).await;
        assert_eq!(r.statuses[0].limit_remaining, 90, "{strategy}: {r:?}");
        // more than anything charged, then u32::MAX: back to the limit,
        // never above it
        for back in [1000, u32::MAX] {
            let r = call(&svc, vec![k("r1")], 0, back).await;
            assert_eq!(overall(&r), Code::Ok, "{strategy}: {r:?}");
            assert_eq!(r.statuses[0].limit_remaining, 100, "{strategy}: {r:?}");
        }
        let r = call(&svc, vec![with_hits(k("r1"), 100)], 0, 0).await;
        assert_eq!(overall(&r), Code::Ok, "{strategy}: {r:?}");
        let r = call(&svc, vec![with_hits(k("r1"), 1)], 0, 0).await;
        assert_eq!(
            overall(&r),
            Code::OverLimit,
            "no more than the limit: {r:?}"
        );
        // 50 reserved, 250 used: 200 more, a debt past the limit
        let r = call(&svc, vec![with_hits(k("r2"), 50)], 0, 0).await;
        assert_eq!(overall(&r), Code::Ok);
        let r = call(&svc, vec![with_hits(k("r2"), 250)], 0, 50).await;
        assert_eq!(overall(&r), Code::OverLimit, "{strategy}: {r:?}");
        // a refund of 10 leaves it over: a refund is answered with the
        // state after it, as a look is
        let r = call(&svc, vec![k("r2")], 0, 10).await;
        assert_eq!(overall(&r), Code::OverLimit, "{strategy}: {r:?}");
        assert_eq!(r.statuses[0].limit_remaining, 0, "{strategy}: {r:?}");
    }
}

#[tokio::test]
async fn reserve_then_settle_with_hits_subtrahend_in_memory() {
    reserve_then_settle(service(MemoryStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserve_then_settle_with_hits_subtrahend_on_redis() {
    let redis = Redis::start();
    reserve_then_settle(service(redis_store(&redis))).await;
}

/// Reports raced by several service instances on one Redis: every one is
/// recorded. 4 instances send 50 reports of 10 each at once on a GCRA of
/// 100 an hour (36 s a unit): the debt is the whole 2,000 units, 2,000 ×
/// 36 s ahead of now, give or take the test's own run time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reports_on_several_instances_are_all_recorded() {
    let redis = Redis::start();
    let instances: Vec<RlsService> = (0..4).map(|_| service(redis_store(&redis))).collect();
    let mut tasks = Vec::new();
    for i in 0..200 {
        let svc = instances[i % 4].clone();
        tasks.push(tokio::spawn(async move {
            call(&svc, vec![with_hits(d("gcra", "race"), 10)], 0, 0).await
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let look = call(&instances[0], vec![with_hits(d("gcra", "race"), 0)], 0, 0).await;
    assert_eq!(overall(&look), Code::OverLimit);
    let ahead = look.statuses[0]
        .duration_until_reset
        .as_ref()
        .map_or(0, |d| d.seconds);
    // 2,000 units at 36 s: 72,000 s; the first 100 fit within the burst
    // (its TAT ahead by at most the hour), so at least 71,900 s minus the
    // run time
    assert!(
        (71_000..=72_100).contains(&ahead),
        "{ahead} s of debt: reports were lost or doubled"
    );
}

/// Denied calls on a sliding log, again and again, record past the limit
/// but keep at most one time more than the limit in Redis (enough to deny
/// a look): the log never grows with the calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_hits_never_grow_a_sliding_log_past_its_limit() {
    let redis = Redis::start();
    let svc = service(redis_store(&redis));
    for _ in 0..50 {
        call(
            &svc,
            vec![with_hits(d("sliding-window-log", "grow"), 40)],
            0,
            0,
        )
        .await;
    }
    let keys = redis_cli(&redis, &["--scan"]);
    let mut longest = 0;
    for key in keys.lines().filter(|k| !k.is_empty()) {
        let kind = redis_cli(&redis, &["type", key]);
        if kind.trim() == "list" {
            longest = longest.max(
                redis_cli(&redis, &["llen", key])
                    .trim()
                    .parse()
                    .unwrap_or(0),
            );
        }
    }
    assert!(
        (1..=101).contains(&longest),
        "a log of {longest} times for a limit of 100 (one past it denies a look)"
    );
}

/// One denied call of 64 sliding-log descriptors of 20,000 hits each (a
/// limit of 10,000 each): what it records is bounded as a joint decision's
/// writes are (`AllOrNothing::MAX_LOGGED` times in all), where each alone
/// could write 10,001: one call never stalls Redis with 640,000 writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_call_records_a_bounded_number_of_log_times() {
    let redis = Redis::start();
    let svc = service(redis_store(&redis));
    let many = (0..64)
        .map(|i| with_hits(d("biglog", &format!("v{i}")), 20_000))
        .collect();
    let r = call(&svc, many, 0, 0).await;
    assert_eq!(overall(&r), Code::OverLimit);
    let mut total = 0u64;
    for key in redis_cli(&redis, &["--scan"])
        .lines()
        .filter(|k| !k.is_empty())
    {
        if redis_cli(&redis, &["type", key]).trim() == "list" {
            total += redis_cli(&redis, &["llen", key])
                .trim()
                .parse::<u64>()
                .unwrap_or(0);
        }
    }
    let most = tower_redis_ratelimit::limiter::AllOrNothing::MAX_LOGGED;
    assert!(
        (1..=most).contains(&total),
        "{total} log times written by one call (at most {most})"
    );
}
