//! Attacks on the service over real gRPC: every knob a caller (Envoy's
//! request) or an operator (the config, a reload) controls, and races of
//! two. Each test shows a limit holding, or an answer that a first version
//! got wrong (its comment says what it was).

mod common;

use std::time::Duration;

use common::*;
use tower_redis_ratelimit::store::Store;
use tower_redis_ratelimit::{MemoryStore, RedisStore};
use tower_redis_ratelimit_server::config::{Charge, Config, LoadOptions};
use tower_redis_ratelimit_server::pb::RateLimitDescriptor;
use tower_redis_ratelimit_server::pb::rate_limit_descriptor::RateLimitOverride;
use tower_redis_ratelimit_server::pb::rate_limit_response::Code;
use tower_redis_ratelimit_server::service::{RlsService, ServiceOptions};

/// Hour-long limits (no test straddles an aligned hour in practice).
const CONFIG: &str = r#"
domain: api
descriptors:
  - key: five
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: big
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: quota
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: zero
    rate_limit: {unit: hour, requests_per_unit: 0}
"#;

/// The service with `--charge over`: a denied call's hits are recorded
/// only where it is over a limit, the descriptors with room keep theirs
/// (by default, `always`, every descriptor records them:
/// `tests/reports.rs`).
fn service<S: Store + Clone>(store: S) -> RlsService {
    RlsService::new(
        config(CONFIG),
        store,
        ServiceOptions::default().headers(true).charge(Charge::Over),
    )
    .expect("service")
}

/// [`service`] with `--charge admitted`: a denied call takes nothing
/// anywhere (the rules of checks whose hits a client chooses).
fn admitted<S: Store + Clone>(store: S) -> RlsService {
    RlsService::new(
        config(CONFIG),
        store,
        ServiceOptions::default()
            .headers(true)
            .charge(Charge::Admitted),
    )
    .expect("service")
}

fn with_override(mut d: RateLimitDescriptor, n: u32, unit: i32) -> RateLimitDescriptor {
    d.limit = Some(RateLimitOverride {
        requests_per_unit: n,
        unit,
    });
    d
}

/// envoy.type.v3.RateLimitUnit HOUR.
const HOUR: i32 = 3;

/// What is left of `entries`' limit (a `hits_addend: 0` call).
async fn remaining(c: &mut Client, entries: &[(&str, &str)]) -> u32 {
    let r = ask(c, "api", vec![peek(entries)], 0).await;
    r.statuses[0].limit_remaining
}

// ---- the same descriptor twice, huge costs ------------------------------

async fn same_descriptor_twice(mut c: Client) {
    // 3 + 3 > 5: denied, nothing taken
    let two = || {
        vec![
            with_hits(desc(&[("five", "t")]), 3),
            with_hits(desc(&[("five", "t")]), 3),
        ]
    };
    let r = ask(&mut c, "api", two(), 0).await;
    assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
    assert_eq!(remaining(&mut c, &[("five", "t")]).await, 5);
    // one unit each, many times: never more than 5 admitted in all
    let mut taken = 0;
    for _ in 0..10 {
        let r = ask(
            &mut c,
            "api",
            vec![desc(&[("five", "u")]), desc(&[("five", "u")])],
            0,
        )
        .await;
        if overall(&r) == Code::Ok {
            taken += 2;
        }
    }
    assert_eq!(taken, 4, "two a request, five at most: two requests");
    assert_eq!(remaining(&mut c, &[("five", "u")]).await, 1);
}

#[tokio::test]
async fn the_same_descriptor_twice_must_fit_together_in_memory() {
    same_descriptor_twice(serve(admitted(MemoryStore::new())).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_descriptor_twice_must_fit_together_on_redis() {
    let redis = Redis::start();
    same_descriptor_twice(serve(admitted(redis_store(&redis))).await).await;
}

async fn huge_costs(mut c: Client) {
    for hits in [
        u64::MAX,
        u64::MAX / 2 + 1,
        u64::from(u32::MAX),
        1 << 53,
        (1 << 53) + 1,
    ] {
        let r = ask(
            &mut c,
            "api",
            vec![
                with_hits(desc(&[("big", "h")]), hits),
                desc(&[("five", "h")]),
            ],
            0,
        )
        .await;
        assert_eq!(overall(&r), Code::OverLimit, "{hits}: {r:?}");
    }
    // two halves of u64::MAX + 1 on one key: their sum overflows u64
    let r = ask(
        &mut c,
        "api",
        vec![
            with_hits(desc(&[("big", "h")]), u64::MAX / 2 + 1),
            with_hits(desc(&[("big", "h")]), u64::MAX / 2 + 1),
        ],
        0,
    )
    .await;
    assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
    // the request-wide hits_addend at u32::MAX
    let r = ask(&mut c, "api", vec![desc(&[("big", "h")])], u32::MAX).await;
    assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
    // and nothing was taken by any of them
    assert_eq!(remaining(&mut c, &[("big", "h")]).await, 1000);
    assert_eq!(remaining(&mut c, &[("five", "h")]).await, 5);
    // 999 then 1 then 1: the last is over
    let r = ask(
        &mut c,
        "api",
        vec![with_hits(desc(&[("big", "h")]), 999)],
        0,
    )
    .await;
    assert_eq!(overall(&r), Code::Ok);
    let r = ask(&mut c, "api", vec![desc(&[("big", "h")])], 0).await;
    assert_eq!(overall(&r), Code::Ok);
    let r = ask(&mut c, "api", vec![desc(&[("big", "h")])], 0).await;
    assert_eq!(overall(&r), Code::OverLimit);
    // a cost of 0 at a full window: OK (as the Go service: 1000 + 0 is
    // not over 1000), and takes nothing
    let r = ask(&mut c, "api", vec![peek(&[("big", "h")])], 0).await;
    assert_eq!(overall(&r), Code::Ok, "{r:?}");
    assert_eq!(r.statuses[0].limit_remaining, 0);
}

#[tokio::test]
async fn huge_hits_addends_are_denied_and_take_nothing_when_charged_admitted_in_memory() {
    huge_costs(serve(admitted(MemoryStore::new())).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_hits_addends_are_denied_and_take_nothing_when_charged_admitted_on_redis() {
    let redis = Redis::start();
    huge_costs(serve(admitted(redis_store(&redis))).await).await;
}

// ---- limit overrides ----------------------------------------------------

async fn overrides(mut c: Client) {
    // two overrides on one descriptor in one request: the tighter holds
    let mut admitted = 0;
    for _ in 0..10 {
        let r = ask(
            &mut c,
            "api",
            vec![
                with_override(desc(&[("any", "o")]), 10, HOUR),
                with_override(desc(&[("any", "o")]), 3, HOUR),
            ],
            0,
        )
        .await;
        admitted += usize::from(overall(&r) == Code::Ok);
    }
    assert!(admitted <= 3, "admitted {admitted} past an override of 3");
    // a limit of 0: over; an unknown unit: the configured limit applies
    let r = ask(
        &mut c,
        "api",
        vec![with_override(desc(&[("big", "z")]), 0, HOUR)],
        0,
    )
    .await;
    assert_eq!(overall(&r), Code::OverLimit);
    for unit in [0, 8, -1, i32::MAX] {
        let r = ask(
            &mut c,
            "api",
            vec![with_override(desc(&[("five", "unit")]), 1, unit)],
            0,
        )
        .await;
        assert_eq!(overall(&r), Code::Ok, "{unit}: {r:?}");
        let l = r.statuses[0].current_limit.as_ref().expect("a limit");
        assert_eq!(l.requests_per_unit, 5, "{unit}: the configured limit");
    }
    // u32::MAX
    let r = ask(
        &mut c,
        "api",
        vec![with_override(desc(&[("any", "max")]), u32::MAX, HOUR)],
        0,
    )
    .await;
    assert_eq!(overall(&r), Code::Ok);
}

#[tokio::test]
async fn overrides_zero_huge_unknown_and_two_on_one_descriptor_in_memory() {
    overrides(serve(service(MemoryStore::new())).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overrides_zero_huge_unknown_and_two_on_one_descriptor_on_redis() {
    let redis = Redis::start();
    overrides(serve(service(redis_store(&redis))).await).await;
}

/// An override of 3 an hour, used up; the next requests' override raises
/// it to 4. The Go service keys an override's counter by the descriptor
/// and the window only (not the count): its counter is at 4 after the
/// denied request, so a limit of 4 is over at once (and with this
/// service's "denied requests are not counted", one more at most). An
/// override's limiter was an unnamed quota, whose storage key held its
/// count, so raising the override by one handed out a whole fresh window
/// (3 + 4 + 5 + ... in one hour); it is named now.
#[tokio::test]
async fn an_override_whose_count_changes_keeps_what_was_used() {
    let mut c = serve(service(MemoryStore::new())).await;
    let with = |n| vec![with_override(desc(&[("user", "alice")]), n, HOUR)];
    let mut admitted = 0;
    for _ in 0..4 {
        admitted += usize::from(overall(&ask(&mut c, "api", with(3), 0).await) == Code::Ok);
    }
    assert_eq!(admitted, 3);
    for n in 4..=6 {
        for _ in 0..10 {
            admitted += usize::from(overall(&ask(&mut c, "api", with(n), 0).await) == Code::Ok);
        }
    }
    // one counter per descriptor and window: at most 6 in all (the largest
    // limit any request carried); one per count: 3 + 4 + 5 + 6 = 18
    assert!(
        admitted <= 6,
        "admitted {admitted} for one descriptor in one hour"
    );
}

/// More distinct override counts than `max_override_limiters`: the map
/// stays bounded and the answers stay right past it.
#[tokio::test]
async fn override_limiters_stay_bounded() {
    let svc = RlsService::new(
        config(CONFIG),
        MemoryStore::new(),
        ServiceOptions::default().max_override_limiters(4),
    )
    .expect("service");
    let mut c = serve(svc).await;
    for n in 1..=50u32 {
        let r = ask(
            &mut c,
            "api",
            vec![with_override(desc(&[("user", "b")]), n, HOUR)],
            0,
        )
        .await;
        assert_eq!(overall(&r), Code::Ok);
    }
    // past the cache, the same override still counts: 1 an hour
    let r = ask(
        &mut c,
        "api",
        vec![with_override(desc(&[("user", "c")]), 49, HOUR)],
        49,
    )
    .await;
    assert_eq!(overall(&r), Code::Ok);
    let r = ask(
        &mut c,
        "api",
        vec![with_override(desc(&[("user", "c")]), 49, HOUR)],
        0,
    )
    .await;
    assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
}

// ---- odd requests ---------------------------------------------------------

#[tokio::test]
async fn odd_requests_get_answers_not_panics() {
    let mut c = serve(service(MemoryStore::new())).await;
    // empty domain, no descriptors, an unknown domain: OK without limits
    // (the Go service answers an error for the first two)
    for (domain, ds) in [
        ("", vec![desc(&[("five", "x")])]),
        ("api", vec![]),
        ("nope", vec![desc(&[("five", "x")])]),
    ] {
        let r = ask(&mut c, domain, ds, 0).await;
        assert_eq!(overall(&r), Code::Ok, "{domain:?}: {r:?}");
    }
    // a descriptor without entries, empty keys and values
    let r = ask(
        &mut c,
        "api",
        vec![desc(&[]), desc(&[("", "")]), desc(&[("five", "")])],
        0,
    )
    .await;
    assert_eq!(r.statuses.len(), 3, "{r:?}");
    // an empty value is its own client: five of them, then over
    for _ in 0..4 {
        ask(&mut c, "api", vec![desc(&[("five", "")])], 0).await;
    }
    let r = ask(&mut c, "api", vec![desc(&[("five", "")])], 0).await;
    assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
    // a 1 MiB value, control characters, and a value that reads like a
    // user key's separators: their own counters, no panic
    let long = "v".repeat(1 << 20);
    let odd = "\u{0}\u{1}&1:five=1:x\u{ffff}é";
    for v in [long.as_str(), odd] {
        for _ in 0..5 {
            let r = ask(&mut c, "api", vec![desc(&[("five", v)])], 0).await;
            assert_eq!(overall(&r), Code::Ok);
        }
        let r = ask(&mut c, "api", vec![desc(&[("five", v)])], 0).await;
        assert_eq!(overall(&r), Code::OverLimit);
    }
    // a zero limit: over, and the other descriptor takes nothing
    let r = ask(
        &mut c,
        "api",
        vec![desc(&[("big", "z")]), desc(&[("zero", "z")])],
        0,
    )
    .await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(remaining(&mut c, &[("big", "z")]).await, 1000);
}

/// The most descriptors an operator may allow in one request (a
/// `--max-descriptors` above 256 is 256): answered, all or nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_descriptors_in_one_request() {
    let redis = Redis::start();
    fn service<S: Store + Clone>(store: S) -> RlsService {
        let options = ServiceOptions::default()
            .max_descriptors(3000)
            .charge(Charge::Over);
        assert_eq!(options.max_descriptors, 256);
        RlsService::new(config(CONFIG), store, options).expect("service")
    }
    for mut c in [
        serve(service(MemoryStore::new())).await,
        serve(service(redis_store(&redis))).await,
    ] {
        let mut ds: Vec<_> = (0..255)
            .map(|i| desc(&[("big", &format!("m{i}"))]))
            .collect();
        let r = tokio::time::timeout(Duration::from_secs(60), ask(&mut c, "api", ds.clone(), 0))
            .await
            .expect("answered");
        assert_eq!(overall(&r), Code::Ok);
        ds.push(desc(&[("zero", "m")]));
        let r = ask(&mut c, "api", ds, 0).await;
        assert_eq!(overall(&r), Code::OverLimit);
        assert_eq!(remaining(&mut c, &[("big", "m254")]).await, 999);
    }
}

// ---- quota_mode races -------------------------------------------------------

/// 100 concurrent requests, each `[quota=k]` (quota_mode, 5 an hour) and
/// `[big=k]` (1000): a quota-mode descriptor alone in its request denies
/// when it is over, so at most 5 are admitted; and a denied request takes
/// nothing, so `big` is used exactly as many times as requests were
/// admitted.
async fn quota_race(clients: &[Client], key: &str) {
    let mut tasks = Vec::new();
    for i in 0..100 {
        let mut c = clients[i % clients.len()].clone();
        let key = key.to_owned();
        tasks.push(tokio::spawn(async move {
            let r = ask(
                &mut c,
                "api",
                vec![desc(&[("quota", &key)]), desc(&[("big", &key)])],
                0,
            )
            .await;
            overall(&r) == Code::Ok
        }));
    }
    let mut admitted = 0u32;
    for t in tasks {
        admitted += u32::from(t.await.expect("task"));
    }
    let mut c = clients[0].clone();
    let used = 1000 - remaining(&mut c, &[("big", key)]).await;
    assert!(admitted <= 5, "admitted {admitted} past a quota of 5");
    assert_eq!(used, admitted, "denied requests took from `big`");
}

/// A request's only quota-mode descriptor is decided as any limit, all or
/// nothing in one call: no look-then-decide race (which made denied
/// requests consume `big`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_mode_race_denied_requests_take_nothing_in_memory() {
    let client = serve(service(MemoryStore::new())).await;
    // (the window between the look and the decision is narrow in memory:
    // several rounds)
    for round in 0..20 {
        quota_race(std::slice::from_ref(&client), &format!("m{round}")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_mode_race_denied_requests_take_nothing_on_redis() {
    let redis = Redis::start();
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(serve(service(redis_store(&redis))).await);
    }
    quota_race(&clients, "r").await;
}

// ---- reloads ----------------------------------------------------------------

fn with_five(n: u32) -> String {
    CONFIG.replace(
        "key: five\n    rate_limit: {unit: hour, requests_per_unit: 5}",
        &format!("key: five\n    rate_limit: {{unit: hour, requests_per_unit: {n}}}"),
    )
}

/// 200 racing requests on `five` while the limit is reloaded from 50 down
/// to 10 and up to 30: never more than the highest limit in force (50)
/// admitted, and after the race the window is over for the last limit.
async fn reload_race(store: impl Store + Clone) {
    let svc =
        RlsService::new(config(&with_five(50)), store, ServiceOptions::default()).expect("service");
    let client = serve(svc.clone()).await;
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let mut c = client.clone();
        tasks.push(tokio::spawn(async move {
            let r = ask(&mut c, "api", vec![desc(&[("five", "race")])], 0).await;
            overall(&r) == Code::Ok
        }));
    }
    for n in [10, 30] {
        tokio::task::yield_now().await;
        svc.reload(config(&with_five(n))).expect("reload");
    }
    let mut admitted = 0u32;
    for t in tasks {
        admitted += u32::from(t.await.expect("task"));
    }
    assert!(admitted <= 50, "admitted {admitted}");
    let mut c = client.clone();
    let r = ask(&mut c, "api", vec![desc(&[("five", "race")])], 0).await;
    assert_eq!(overall(&r), Code::OverLimit, "{admitted} admitted: {r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_during_a_race_in_memory() {
    reload_race(MemoryStore::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_during_a_race_on_redis() {
    let redis = Redis::start();
    reload_race(redis_store(&redis)).await;
}

/// A reload that toggles `shadow_mode` or `quota_mode`, or renames the
/// rule, keeps what was used (the doc: a new strategy or period counts
/// anew, nothing else).
#[tokio::test]
async fn reloads_that_keep_the_limit_keep_the_count() {
    let svc = RlsService::new(
        config(CONFIG),
        MemoryStore::new(),
        ServiceOptions::default(),
    )
    .unwrap();
    let mut c = serve(svc.clone()).await;
    for _ in 0..5 {
        ask(&mut c, "api", vec![desc(&[("five", "k")])], 0).await;
    }
    let variants = [
        CONFIG.replace(
            "key: five\n    rate_limit:",
            "key: five\n    shadow_mode: false\n    rate_limit:",
        ),
        CONFIG.replace(
            "{unit: hour, requests_per_unit: 5}",
            "{name: renamed, unit: hour, requests_per_unit: 5}",
        ),
        CONFIG.replace(
            "{unit: hour, requests_per_unit: 5}",
            "{unit: HOUR, requests_per_unit: 5}",
        ),
        CONFIG.replace(
            "{unit: hour, requests_per_unit: 5}",
            "{unit: hour, unit_multiplier: 1, requests_per_unit: 5}",
        ),
        CONFIG.replace(
            "{unit: hour, requests_per_unit: 5}",
            "{duration: 1h, requests_per_unit: 5}",
        ),
    ];
    for v in variants {
        svc.reload(config(&v)).expect("reload");
        let r = ask(&mut c, "api", vec![desc(&[("five", "k")])], 0).await;
        assert_eq!(
            overall(&r),
            Code::OverLimit,
            "after reloading to\n{v}\n{r:?}"
        );
    }
    // shadow on then off again: the shadow period admitted everything but
    // counted nothing past the limit, and off again it is still over
    let shadow = CONFIG.replace(
        "key: five\n    rate_limit:",
        "key: five\n    shadow_mode: true\n    rate_limit:",
    );
    svc.reload(config(&shadow)).unwrap();
    let r = ask(&mut c, "api", vec![desc(&[("five", "k")])], 0).await;
    assert_eq!(overall(&r), Code::Ok);
    svc.reload(config(CONFIG)).unwrap();
    let r = ask(&mut c, "api", vec![desc(&[("five", "k")])], 0).await;
    assert_eq!(overall(&r), Code::OverLimit);
}

// ---- operator knobs ---------------------------------------------------------

/// Extreme but accepted values build a service that answers; the others
/// are rejected with the field named.
#[tokio::test]
async fn extreme_config_values_answer_or_are_rejected_by_name() {
    let ok = [
        "{unit: second, requests_per_unit: 4294967295}",
        "{unit: year, unit_multiplier: 4294967295, requests_per_unit: 1}",
        "{duration: 1us, requests_per_unit: 1}",
        "{duration: 100000 years, requests_per_unit: 1}",
        "{unit: second, requests_per_unit: 1, strategy: token-bucket, burst: 18446744073709551615}",
        "{unit: second, requests_per_unit: 4294967295, strategy: gcra, burst: 1}",
        "{unit: minute, requests_per_unit: 4294967295, strategy: sliding-window-counter}",
        "{unit: minute, requests_per_unit: 3, strategy: leaky-bucket, burst: 1}",
        "{unit: hour, requests_per_unit: 4294967295, strategy: sliding-window-log}",
    ];
    for rl in ok {
        let text = format!("domain: api\ndescriptors:\n  - key: k\n    rate_limit: {rl}\n");
        let cfg = match Config::from_sources([("api.yaml", text.as_str())], LoadOptions::default())
        {
            Ok(c) => c,
            Err(e) => {
                // rejected: must name a field
                let s = e.to_string();
                assert!(s.contains("rate_limit"), "{rl}: {s}");
                continue;
            }
        };
        let svc = match RlsService::new(cfg, MemoryStore::new(), ServiceOptions::default()) {
            Ok(s) => s,
            Err(e) => {
                assert!(e.to_string().contains("api.yaml"), "{rl}: {e}");
                continue;
            }
        };
        let mut c = serve(svc).await;
        let r = tokio::time::timeout(
            Duration::from_secs(20),
            try_ask(&mut c, "api", vec![desc(&[("k", "v")])], 0),
        )
        .await
        .expect("answered in time");
        let r = r.unwrap_or_else(|e| panic!("{rl}: {e:?}"));
        assert_eq!(overall(&r), Code::Ok, "{rl}: {r:?}");
    }
    for (rl, field) in [
        (
            "{unit: second, requests_per_unit: 4294967296}",
            "requests_per_unit",
        ),
        ("{unit: second, requests_per_unit: -1}", "requests_per_unit"),
        (
            "{unit: second, unit_multiplier: 0, requests_per_unit: 1}",
            "unit_multiplier",
        ),
        ("{duration: 0s, requests_per_unit: 1}", "duration"),
        (
            "{unit: second, requests_per_unit: 1, strategy: token-bucket, burst: 0}",
            "burst",
        ),
        ("{unit: second, requests_per_unit: 1, burst: 5}", "burst"),
        (
            "{unit: second, requests_per_unit: 1, strategy: concurrency}",
            "strategy",
        ),
        (
            "{unit: second, requests_per_unit: 1, strategy: nope}",
            "strategy",
        ),
        ("{unit: fortnight, requests_per_unit: 1}", "unit"),
        ("{requests_per_unit: 1}", "unit"),
    ] {
        let text = format!("domain: api\ndescriptors:\n  - key: k\n    rate_limit: {rl}\n");
        let e = Config::from_sources([("api.yaml", text.as_str())], LoadOptions::default())
            .expect_err(rl)
            .to_string();
        assert!(e.contains(field), "{rl}: {e}");
    }
}

// ---- a new user: the binary on the example config ---------------------------

/// The binary on a free port over `server/examples/config` (as the README
/// runs it, debug build), killed on drop.
fn example_server() -> (Reaped, u16) {
    let grpc = free_port();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/config");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ratelimit-server"))
        .arg("--config")
        .arg(dir)
        .args(["--grpc", &format!("127.0.0.1:{grpc}"), "--headers"])
        .env_remove("REDIS_URL")
        .env_remove("REDIS_CLUSTER_URLS")
        .env_remove("REDIS_SENTINEL_URLS")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("ratelimit-server");
    assert!(wait_port(&mut child, grpc), "the server did not start");
    (Reaped(child), grpc)
}

/// Each claim of the example config's comments, against the running
/// binary: 100 a minute per address, 1,000 an hour per API key named
/// `per-api-key` with `internal-batch-job` unlimited, writes a token bucket
/// of 5 a second with a burst of 20, `[header_match=post]` alone matching
/// nothing, and a POST with a key (three descriptors) all or nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_config_answers_as_its_comments_say() {
    let (_server, port) = example_server();
    let channel = tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{port}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut c = tower_redis_ratelimit_server::pb::RateLimitServiceClient::new(channel);
    // 100 a minute per address (a window of a minute aligned to the epoch:
    // retried with a new address if the two calls straddle its end)
    let mut held = false;
    for attempt in 0..3 {
        let addr = format!("10.0.0.{attempt}");
        let a = ask(&mut c, "api", vec![desc(&[("remote_address", &addr)])], 100).await;
        let b = ask(&mut c, "api", vec![desc(&[("remote_address", &addr)])], 0).await;
        assert_eq!(overall(&a), Code::Ok, "{a:?}");
        let reset = |r: &tower_redis_ratelimit_server::pb::RateLimitResponse| {
            r.statuses[0]
                .duration_until_reset
                .as_ref()
                .map(|d| d.seconds)
        };
        if reset(&b) > reset(&a) {
            continue; // a new minute began between the two
        }
        assert_eq!(overall(&b), Code::OverLimit, "{b:?}");
        let l = a.statuses[0].current_limit.as_ref().expect("limit");
        assert_eq!((l.requests_per_unit, l.unit), (100, 2), "{l:?}");
        held = true;
        break;
    }
    assert!(held);
    // per API key: 1,000 an hour, named per-api-key
    let r = ask(&mut c, "api", vec![desc(&[("api_key", "k1")])], 0).await;
    let l = r.statuses[0].current_limit.as_ref().expect("limit");
    assert_eq!(
        (l.name.as_str(), l.requests_per_unit, l.unit),
        ("per-api-key", 1000, 3)
    );
    assert_eq!(r.statuses[0].limit_remaining, 999);
    // internal-batch-job: not limited
    let r = ask(
        &mut c,
        "api",
        vec![desc(&[("api_key", "internal-batch-job")])],
        u32::MAX,
    )
    .await;
    assert_eq!(overall(&r), Code::Ok);
    assert!(r.statuses[0].current_limit.is_none(), "{r:?}");
    // writes: a burst of 20, then over (5 a second refill: 2 more need
    // 0.4 s, far more than two local calls take)
    let post = |a: &str| vec![desc(&[("header_match", "post"), ("remote_address", a)])];
    let r = ask(&mut c, "api", post("10.1.0.1"), 20).await;
    assert_eq!(overall(&r), Code::Ok, "{r:?}");
    let r = ask(&mut c, "api", post("10.1.0.1"), 2).await;
    assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
    assert!(header(&r, "Retry-After").is_some(), "{r:?}");
    // a burst of 21 never fits
    let r = ask(&mut c, "api", post("10.1.0.2"), 21).await;
    assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
    // [header_match=post] alone reaches no limit: OK without one
    let r = ask(&mut c, "api", vec![desc(&[("header_match", "post")])], 0).await;
    assert_eq!(overall(&r), Code::Ok);
    assert!(r.statuses[0].current_limit.is_none());
    // a POST with a key, its writes spent: denied, and the address and the
    // key lose nothing
    let three = vec![
        desc(&[("remote_address", "10.1.0.1")]),
        desc(&[("api_key", "k2")]),
        desc(&[("header_match", "post"), ("remote_address", "10.1.0.1")]),
    ];
    let r = ask(&mut c, "api", three, 0).await;
    assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
    let r = ask(&mut c, "api", vec![peek(&[("api_key", "k2")])], 0).await;
    assert_eq!(r.statuses[0].limit_remaining, 1000, "{r:?}");
}

// ---- reloads to a lower limit, every strategy --------------------------------

fn strategy_config(strategy: &str, n: u32) -> Config {
    let s = if strategy.is_empty() {
        String::new()
    } else {
        format!(", strategy: {strategy}")
    };
    config(&format!(
        "domain: api\ndescriptors:\n  - key: s\n    rate_limit: {{unit: hour, requests_per_unit: {n}{s}}}\n"
    ))
}

/// Under every strategy: one request under 1,000 an hour, then a reload
/// to 10 an hour: at most 10 admitted after it (the doc: "a lower limit
/// denies at once"; a state that holds what is left rather than what was
/// used must not hand out the old limit's remainder).
async fn reload_lower(store: impl Store + Clone) {
    for strategy in [
        "",
        "fixed-window",
        "sliding-window-log",
        "sliding-window-counter",
        "token-bucket",
        "leaky-bucket",
        "gcra",
    ] {
        let svc = RlsService::new(
            strategy_config(strategy, 1000),
            store.clone(),
            ServiceOptions::default(),
        )
        .expect("service");
        let mut c = serve(svc.clone()).await;
        let key = format!("low-{strategy}");
        let r = ask(&mut c, "api", vec![desc(&[("s", &key)])], 0).await;
        assert_eq!(overall(&r), Code::Ok);
        svc.reload(strategy_config(strategy, 10)).expect("reload");
        let mut admitted = 0;
        for _ in 0..50 {
            let r = ask(&mut c, "api", vec![desc(&[("s", &key)])], 0).await;
            admitted += u32::from(overall(&r) == Code::Ok);
        }
        assert!(
            admitted <= 10,
            "{strategy:?}: {admitted} admitted after lowering to 10"
        );
        // and raising it back to 1,000 keeps what was used
        svc.reload(strategy_config(strategy, 1000)).expect("reload");
        let r = ask(&mut c, "api", vec![peek(&[("s", &key)])], 0).await;
        assert!(
            r.statuses[0].limit_remaining <= 1000 - 1 - admitted,
            "{strategy:?}: {r:?}"
        );
    }
}

#[tokio::test]
async fn reload_to_a_lower_limit_under_every_strategy_in_memory() {
    reload_lower(MemoryStore::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_to_a_lower_limit_under_every_strategy_on_redis() {
    let redis = Redis::start();
    reload_lower(redis_store(&redis)).await;
}

// ---- wildcards -----------------------------------------------------------------

/// `share_threshold` on `/v1/*`: every value under it shares one counter,
/// so new values do not get new budgets; without it each value counts
/// apart (as the Go service). A descriptor deeper than the config's tree
/// reaches no limit (as the Go service).
#[tokio::test]
async fn shared_wildcards_cannot_be_walked_past_with_new_values() {
    let text = r#"
domain: api
descriptors:
  - key: path
    value: "/v1/*"
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: path
    value: "/v2/*"
    rate_limit: {unit: hour, requests_per_unit: 1}
"#;
    let svc = RlsService::new(config(text), MemoryStore::new(), ServiceOptions::default())
        .expect("service");
    let mut c = serve(svc).await;
    let mut admitted = 0;
    for i in 0..20 {
        let v = format!("/v1/{i}");
        let r = ask(&mut c, "api", vec![desc(&[("path", &v)])], 0).await;
        admitted += u32::from(overall(&r) == Code::Ok);
    }
    assert_eq!(admitted, 5);
    for i in 0..3 {
        let v = format!("/v2/{i}");
        let r = ask(&mut c, "api", vec![desc(&[("path", &v)])], 0).await;
        assert_eq!(overall(&r), Code::Ok, "each /v2 value has its own");
    }
    let r = ask(
        &mut c,
        "api",
        vec![desc(&[("path", "/v2/0"), ("extra", "x")])],
        0,
    )
    .await;
    assert!(r.statuses[0].current_limit.is_none(), "{r:?}");
}

// ---- store timeouts ------------------------------------------------------------

/// `--store-timeout 18446744073709551615` (u64::MAX ms): the flag takes it;
/// a call must still be answered, not panic on a deadline's overflow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_store_timeout_answers() {
    let redis = Redis::start();
    let store = RedisStore::from_url(&redis.url())
        .expect("store")
        .timeout(Duration::from_millis(u64::MAX));
    let svc = RlsService::new(config(CONFIG), store, ServiceOptions::default()).expect("service");
    let mut c = serve(svc).await;
    let r = tokio::time::timeout(
        Duration::from_secs(30),
        try_ask(&mut c, "api", vec![desc(&[("five", "x")])], 0),
    )
    .await
    .expect("answered");
    assert_eq!(overall(&r.expect("no error")), Code::Ok);
}

/// A `hits_addend` of u64::MAX is counted in `total_hits` and
/// `over_limit` as is: the counters (u64, wrapping) go backwards, which
/// Prometheus reads as a counter reset. The Go service's uint64 stats wrap
/// the same way. A descriptor's hits are counted at most 2^32 - 1 now.
#[tokio::test]
async fn a_huge_hits_addend_does_not_wrap_the_counters() {
    let svc = service(MemoryStore::new());
    let metrics = serve_metrics(&svc).await;
    let mut c = serve(svc).await;
    ask(&mut c, "api", vec![desc(&[("big", "w")])], 0).await;
    let name = format!(
        "{}{{domain=\"api\",key=\"big\"}}",
        tower_redis_ratelimit_server::metrics::TOTAL_HITS
    );
    let text = scrape(metrics).await;
    let before = sample(&text, &name);
    assert_eq!(before, 1, "{text}");
    ask(
        &mut c,
        "api",
        vec![with_hits(desc(&[("big", "w")]), u64::MAX)],
        0,
    )
    .await;
    let after = sample(&scrape(metrics).await, &name);
    assert!(after >= before, "total_hits went from {before} to {after}");
}

/// With `--charge admitted`, a request of 5 hits against 3 left is
/// OVER_LIMIT with `limit_remaining: 3`: what is left, untouched (the Go
/// service, which counts the 5, answers 0, and so does the default
/// `over`, which records them: `tests/reports.rs`).
#[tokio::test]
async fn an_over_limit_descriptor_reports_what_is_left() {
    let mut c = serve(admitted(MemoryStore::new())).await;
    ask(&mut c, "api", vec![with_hits(desc(&[("five", "r")]), 2)], 0).await;
    let r = ask(&mut c, "api", vec![with_hits(desc(&[("five", "r")]), 5)], 0).await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(code(&r.statuses[0]), Code::OverLimit);
    assert_eq!(r.statuses[0].limit_remaining, 3, "{r:?}");
}

/// A descriptor counted under its configured limit (5 an hour), then the
/// same descriptor with a `limit` override of the same 5 an hour. The Go
/// service's cache key is the domain, the descriptor's entries and the
/// window (`domain_five_x_<window start>`) for both, so the override finds
/// the 5 used. An override counted under its own prefix (`rls.o.`), so a
/// client that could make the override come and go (Envoy's
/// `limit: dynamic_metadata`, present on some requests only) got a
/// second budget (10 admitted); it counts in the rule's key now.
#[tokio::test]
async fn an_override_shares_the_configured_limits_counter() {
    let mut c = serve(service(MemoryStore::new())).await;
    let mut admitted = 0;
    for _ in 0..6 {
        let r = ask(&mut c, "api", vec![desc(&[("five", "both")])], 0).await;
        admitted += u32::from(overall(&r) == Code::Ok);
    }
    for _ in 0..6 {
        let r = ask(
            &mut c,
            "api",
            vec![with_override(desc(&[("five", "both")]), 5, HOUR)],
            0,
        )
        .await;
        admitted += u32::from(overall(&r) == Code::Ok);
    }
    assert!(
        admitted <= 5,
        "{admitted} admitted for [five=both] in one hour"
    );
}

/// The guide's `duration` examples (`90s`, `500ms`, `2 hours`, `7d`) load
/// and answer with that period.
#[tokio::test]
async fn the_guides_duration_examples_load() {
    for (d, secs) in [
        ("90s", 90),
        ("500ms", 1),
        ("2 hours", 7200),
        ("7d", 604_800),
    ] {
        let text = format!(
            "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {{duration: {d}, requests_per_unit: 1}}\n"
        );
        let svc = RlsService::new(
            config(&text),
            MemoryStore::new(),
            ServiceOptions::default().headers(true),
        )
        .expect("service");
        let mut c = serve(svc).await;
        let r = ask(&mut c, "api", vec![desc(&[("k", "v")])], 0).await;
        assert_eq!(overall(&r), Code::Ok, "{d}");
        let policy = header(&r, "RateLimit-Policy").expect("policy");
        assert!(policy.ends_with(&format!("w={secs}")), "{d}: {policy}");
    }
}

/// A `hits_addend: 0` descriptor (a look, no cost) on a limit of 0: the
/// Go service answers OK (0 + 0 is not over 0), as this service does for
/// a full window of any other limit (it answered OVER_LIMIT at first).
#[tokio::test]
async fn a_zero_cost_look_at_a_zero_limit_is_ok() {
    let mut c = serve(service(MemoryStore::new())).await;
    let r = ask(&mut c, "api", vec![peek(&[("zero", "p")])], 0).await;
    assert_eq!(overall(&r), Code::Ok, "{r:?}");
}

/// 400 concurrent requests over the memory store, each two or three of
/// 40 values in every order (shards locked together): all answered (no
/// deadlock), and no value admitted past its 5; with `--charge admitted`,
/// each value counts exactly what was admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_requests_in_every_order_neither_deadlock_nor_walk_past() {
    let client = serve(admitted(MemoryStore::new())).await;
    let mut tasks = Vec::new();
    for i in 0..400usize {
        let mut c = client.clone();
        tasks.push(tokio::spawn(async move {
            let vals = [i % 40, (i * 7 + 3) % 40, (i * 13 + 5) % 40];
            let n = 2 + i % 2;
            let ds: Vec<_> = vals[..n]
                .iter()
                .map(|v| desc(&[("five", &format!("d{v}"))]))
                .collect();
            let r = ask(&mut c, "api", ds, 0).await;
            (overall(&r) == Code::Ok).then(|| vals[..n].to_vec())
        }));
    }
    let mut used = [0u32; 40];
    let all = tokio::time::timeout(Duration::from_secs(120), async {
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.expect("task"));
        }
        out
    })
    .await
    .expect("every request answered");
    for vals in all.into_iter().flatten() {
        for v in vals {
            used[v] += 1;
        }
    }
    let mut c = client.clone();
    for (v, n) in used.iter().enumerate() {
        assert!(*n <= 5, "d{v}: {n} admitted");
        let left = remaining(&mut c, &[("five", &format!("d{v}"))]).await;
        assert_eq!(5 - n, left, "d{v}: counted apart from the admitted");
    }
}

// ---- a Redis Cluster: descriptors across hash slots -----------------------------

/// On a cluster, `[big=k]` and `[five=k]` (two user keys: two hash slots,
/// decided slot by slot with a give-back): 200 racing requests admit
/// exactly 5, and once every give-back is done `big` counts exactly the
/// admitted (holds); quota_mode one at a time (holds); the quota_mode race
/// of the single-store tests (a request's only quota-mode descriptor is
/// decided as any limit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_hash_slots_racing_requests_admit_the_tightest_and_give_back() {
    let (_data, nodes) = cluster("attack-cluster");
    let store = tower_redis_ratelimit::RedisClusterStore::from_urls(nodes.iter().map(|n| n.url()))
        .expect("cluster store")
        .timeout(Duration::from_secs(10));
    let client = serve(service(store)).await;
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let mut c = client.clone();
        tasks.push(tokio::spawn(async move {
            let r = ask(
                &mut c,
                "api",
                vec![desc(&[("big", "c")]), desc(&[("five", "c")])],
                0,
            )
            .await;
            overall(&r) == Code::Ok
        }));
    }
    let mut admitted = 0u32;
    for t in tasks {
        admitted += u32::from(t.await.expect("task"));
    }
    assert_eq!(admitted, 5);
    let mut c = client.clone();
    assert_eq!(
        1000 - remaining(&mut c, &[("big", "c")]).await,
        5,
        "given back"
    );
    // quota_mode one request at a time: 5 admitted, `big` counts 5
    let mut seq = 0;
    for _ in 0..10 {
        let r = ask(
            &mut c,
            "api",
            vec![desc(&[("quota", "s")]), desc(&[("big", "s")])],
            0,
        )
        .await;
        seq += u32::from(overall(&r) == Code::Ok);
    }
    assert_eq!(seq, 5);
    assert_eq!(
        1000 - remaining(&mut c, &[("big", "s")]).await,
        5,
        "sequential"
    );
    quota_race(&[client], "qc").await;
}

/// A descriptor value that is not UTF-8 (a header's obs-text bytes, which
/// Envoy forwards): read and limited, not an error that Envoy's
/// `failure_mode_deny: false` would let through; two such values count
/// apart.
#[tokio::test]
async fn a_value_that_is_not_utf8_is_limited_not_an_error() {
    use tower_redis_ratelimit_server::pb::rate_limit_descriptor::Entry;
    let mut c = serve(service(MemoryStore::new())).await;
    let raw = |value: &[u8]| RateLimitDescriptor {
        entries: vec![Entry {
            key: "five".into(),
            value: value.to_vec(),
        }],
        limit: None,
        hits_addend: None,
    };
    for i in 0..5 {
        let r = ask(&mut c, "api", vec![raw(b"key-\xff")], 0).await;
        assert_eq!(overall(&r), Code::Ok, "{i}");
    }
    let r = ask(&mut c, "api", vec![raw(b"key-\xff")], 0).await;
    assert_eq!(overall(&r), Code::OverLimit);
    let r = ask(&mut c, "api", vec![raw(b"key-\xfe")], 0).await;
    assert_eq!(overall(&r), Code::Ok, "another value counts apart");
}
