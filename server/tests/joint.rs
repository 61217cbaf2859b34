//! All or nothing over real gRPC: a multi-descriptor request is one script
//! call on Redis, racing requests admit exactly the tightest limit and
//! consume nothing in the others for the denied ones (memory and Redis),
//! and `quota_mode` denies only with every quota-mode descriptor over.

mod common;

use common::*;
use tower_redis_ratelimit::MemoryStore;
use tower_redis_ratelimit::store::Store;
use tower_redis_ratelimit_server::config::{Charge, Config, LoadOptions};
use tower_redis_ratelimit_server::pb::rate_limit_response::Code;
use tower_redis_ratelimit_server::service::{RlsService, ServiceOptions};

/// Two limits per hour (so that no test straddles a window's end in
/// practice: an aligned hour), 100 and 50, and three quota-mode ones.
const CONFIG: &str = r#"
domain: api
descriptors:
  - key: wide
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: narrow
    rate_limit: {unit: hour, requests_per_unit: 50}
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: monthly
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: yearly
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 4}
"#;

/// The service with `--charge over`: a denied call takes nothing from
/// the descriptors that had room (by default, `always`, they record its
/// hits too, as the Go service counts them).
fn service<S: Store + Clone>(store: S) -> RlsService {
    service_with(store, ServiceOptions::default().charge(Charge::Over))
}

fn service_with<S: Store + Clone>(store: S, options: ServiceOptions) -> RlsService {
    let config =
        Config::from_sources([("api.yaml", CONFIG)], LoadOptions::default()).expect("config");
    RlsService::new(config, store, options).expect("service")
}

/// 300 concurrent requests, each `[wide=k]` and `[narrow=k]`: exactly 50
/// admitted, and `wide` counted exactly 50 (the 250 denied took nothing).
async fn race(clients: &[Client], key: &str) {
    let mut tasks = Vec::new();
    for i in 0..300 {
        let mut c = clients[i % clients.len()].clone();
        let key = key.to_owned();
        tasks.push(tokio::spawn(async move {
            let r = ask(
                &mut c,
                "api",
                vec![desc(&[("wide", &key)]), desc(&[("narrow", &key)])],
                0,
            )
            .await;
            overall(&r) == Code::Ok
        }));
    }
    let mut admitted = 0;
    for t in tasks {
        admitted += usize::from(t.await.expect("task"));
    }
    assert_eq!(admitted, 50);
    let mut c = clients[0].clone();
    let r = ask(&mut c, "api", vec![peek(&[("wide", key)])], 0).await;
    assert_eq!(r.statuses[0].limit_remaining, 50, "{r:?}");
    let r = ask(&mut c, "api", vec![peek(&[("narrow", key)])], 0).await;
    assert_eq!(r.statuses[0].limit_remaining, 0, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_requests_admit_the_tightest_limit_and_denied_ones_take_nothing_in_memory() {
    let client = serve(service(MemoryStore::new())).await;
    race(&[client], "m").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_requests_on_three_instances_and_one_redis_admit_the_tightest_limit() {
    let redis = Redis::start();
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(serve(service(redis_store(&redis))).await);
    }
    race(&clients, "r").await;
}

/// `INFO commandstats`' calls of `cmd` on `redis`.
async fn calls(redis: &Redis, cmd: &str) -> u64 {
    let client = tower_redis_ratelimit::redis::Client::open(redis.url()).expect("client");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    let info: String = tower_redis_ratelimit::redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .expect("info");
    let prefix = format!("cmdstat_{cmd}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A request of three descriptors is one script call, admitted or denied
/// (with `--charge admitted`; the other charges: the next test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_of_three_descriptors_is_one_script_call_on_redis() {
    let redis = Redis::start();
    let options = ServiceOptions::default().charge(Charge::Admitted);
    let mut c = serve(service_with(redis_store(&redis), options)).await;
    let three = || {
        vec![
            desc(&[("wide", "x")]),
            desc(&[("narrow", "x")]),
            desc(&[("plain", "x")]),
        ]
    };
    // the first call loads the script
    assert_eq!(overall(&ask(&mut c, "api", three(), 0).await), Code::Ok);
    let before = calls(&redis, "evalsha").await;
    for _ in 0..9 {
        assert_eq!(overall(&ask(&mut c, "api", three(), 0).await), Code::Ok);
    }
    // `plain` (10) is out: denied, in one call too
    let r = ask(&mut c, "api", three(), 0).await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(calls(&redis, "evalsha").await - before, 10);
    // and nothing else ran a script or wrote
    assert_eq!(calls(&redis, "eval").await, 0);
    assert_eq!(calls(&redis, "incrby").await, 0);
    let r = ask(&mut c, "api", vec![peek(&[("wide", "x")])], 0).await;
    assert_eq!(r.statuses[0].limit_remaining, 90);
}

async fn quota_mode(mut c: Client) {
    let both = |k: &str| vec![desc(&[("monthly", k)]), desc(&[("yearly", k)])];
    // monthly (2) and yearly (4) within: admitted
    for _ in 0..2 {
        assert_eq!(overall(&ask(&mut c, "api", both("q"), 0).await), Code::Ok);
    }
    // monthly over, yearly within: let through, monthly reported over
    for _ in 0..2 {
        let r = ask(&mut c, "api", both("q"), 0).await;
        assert_eq!(overall(&r), Code::Ok, "{r:?}");
        assert_eq!(code(&r.statuses[0]), Code::OverLimit);
        assert_eq!(code(&r.statuses[1]), Code::Ok);
    }
    // both over: denied
    let r = ask(&mut c, "api", both("q"), 0).await;
    assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
    // a plain limit beside them consumes nothing when every quota-mode one
    // is over
    let r = ask(
        &mut c,
        "api",
        vec![
            desc(&[("plain", "q")]),
            desc(&[("monthly", "q")]),
            desc(&[("yearly", "q")]),
        ],
        0,
    )
    .await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(code(&r.statuses[0]), Code::Ok);
    let r = ask(&mut c, "api", vec![peek(&[("plain", "q")])], 0).await;
    assert_eq!(r.statuses[0].limit_remaining, 10);
    // a plain limit over denies whatever the quota-mode ones say
    for _ in 0..10 {
        ask(&mut c, "api", vec![desc(&[("plain", "p")])], 0).await;
    }
    let r = ask(
        &mut c,
        "api",
        vec![desc(&[("plain", "p")]), desc(&[("monthly", "p")])],
        0,
    )
    .await;
    assert_eq!(overall(&r), Code::OverLimit);
    let r = ask(&mut c, "api", vec![peek(&[("monthly", "p")])], 0).await;
    assert_eq!(r.statuses[0].limit_remaining, 2, "took nothing: {r:?}");
}

#[tokio::test]
async fn quota_mode_denies_only_with_every_quota_mode_descriptor_over_in_memory() {
    quota_mode(serve(service(MemoryStore::new())).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_mode_denies_only_with_every_quota_mode_descriptor_over_on_redis() {
    let redis = Redis::start();
    quota_mode(serve(service(redis_store(&redis))).await).await;
}

/// Under each charge, a denied call is one script call, that records its
/// hits as the charge says in the same call: several descriptors (one
/// joint script) and a lone one (its limiter's own script): `always`
/// records on every descriptor, `over` on the one over, `admitted` nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_call_records_in_the_same_script_call_on_redis() {
    let redis = Redis::start();
    for (charge, plain, wide, k) in [
        (Charge::Always, 0, 90, "a"),
        (Charge::Over, 0, 91, "o"),
        (Charge::Admitted, 0, 91, "n"),
    ] {
        let options = ServiceOptions::default().charge(charge);
        let mut c = serve(service_with(redis_store(&redis), options)).await;
        let two = || vec![desc(&[("wide", k)]), desc(&[("plain", k)])];
        // (the first calls load the scripts: a joint one, a lone one)
        for _ in 0..9 {
            assert_eq!(overall(&ask(&mut c, "api", two(), 0).await), Code::Ok);
        }
        let r = ask(&mut c, "api", vec![desc(&[("plain", k)])], 0).await;
        assert_eq!(overall(&r), Code::Ok);
        let before = (calls(&redis, "evalsha").await, calls(&redis, "eval").await);
        // `plain` (10) is out: denied in one call
        let r = ask(&mut c, "api", two(), 0).await;
        assert_eq!(overall(&r), Code::OverLimit, "{charge:?}");
        // and a lone descriptor over its limit: one call too
        let r = ask(&mut c, "api", vec![desc(&[("plain", k)])], 0).await;
        assert_eq!(overall(&r), Code::OverLimit, "{charge:?}");
        let after = (calls(&redis, "evalsha").await, calls(&redis, "eval").await);
        assert_eq!(
            (after.0 - before.0, after.1 - before.1),
            (2, 0),
            "{charge:?}: store calls of two denied requests"
        );
        let r = ask(
            &mut c,
            "api",
            vec![peek(&[("wide", k)]), peek(&[("plain", k)])],
            0,
        )
        .await;
        assert_eq!(
            (r.statuses[0].limit_remaining, r.statuses[1].limit_remaining),
            (wide, plain),
            "{charge:?}: {r:?}"
        );
    }
}
