//! What a request can make the service do is bounded, and its answers say
//! what holds: the descriptor and entry bounds (refused before the store
//! is asked), a cost that never fits, whole-second resets, the unit of any
//! period, and envoyproxy/ratelimit's service-wide modes and headers.

mod common;

use common::*;
use tower_redis_ratelimit::MemoryStore;
use tower_redis_ratelimit::store::Store;
use tower_redis_ratelimit_server::config::Charge;
use tower_redis_ratelimit_server::pb::RateLimitDescriptor;
use tower_redis_ratelimit_server::pb::rate_limit_descriptor::{Entry, RateLimitOverride};
use tower_redis_ratelimit_server::pb::rate_limit_response::Code;
use tower_redis_ratelimit_server::service::{GoHeaders, RlsService, ServiceOptions};

const CONFIG: &str = "\
domain: api
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: s
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: a
    value: b_c
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: d90
    rate_limit: {duration: 90s, requests_per_unit: 100}
  - key: m5
    rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 100}
";

fn service<S: Store + Clone>(store: S, options: ServiceOptions) -> RlsService {
    RlsService::new(config(CONFIG), store, options).expect("service")
}

/// Both stores, each behind a served service with `options`.
async fn clients(redis: &Redis, options: ServiceOptions) -> [Client; 2] {
    [
        serve(service(MemoryStore::new(), options.clone())).await,
        serve(service(redis_store(redis), options)).await,
    ]
}

async fn remaining(c: &mut Client, entries: &[(&str, &str)]) -> u32 {
    let r = ask(c, "api", vec![peek(entries)], 0).await;
    r.statuses[0].limit_remaining
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_the_descriptor_or_entry_bound_is_invalid_and_takes_nothing() {
    let redis = Redis::start();
    for mut c in clients(&redis, ServiceOptions::default()).await {
        // at the bound: answered
        let at: Vec<_> = (0..64).map(|i| desc(&[("k", &format!("v{i}"))])).collect();
        let r = ask(&mut c, "api", at, 0).await;
        assert_eq!(overall(&r), Code::Ok);
        assert_eq!(remaining(&mut c, &[("k", "v0")]).await, 4);
        // one past it: INVALID_ARGUMENT, nothing taken
        let past: Vec<_> = (0..65).map(|i| desc(&[("k", &format!("v{i}"))])).collect();
        let e = try_ask(&mut c, "api", past, 0).await.expect_err("refused");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains("at most 64"), "{e:?}");
        assert_eq!(remaining(&mut c, &[("k", "v0")]).await, 4);
        // entries: 33 in one descriptor, beside one that would be taken
        let long: Vec<(String, String)> = (0..33).map(|i| (format!("e{i}"), "x".into())).collect();
        let long: Vec<(&str, &str)> = long.iter().map(|(k, v)| (&**k, &**v)).collect();
        let e = try_ask(&mut c, "api", vec![desc(&[("k", "v0")]), desc(&long)], 0)
            .await
            .expect_err("refused");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains("descriptor 1 has 33 entries"), "{e:?}");
        assert_eq!(remaining(&mut c, &[("k", "v0")]).await, 4);
    }
}

/// The largest request the bounds let through, sent many times at once,
/// holds Redis for milliseconds per call, not seconds (its slow log).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_allowed_request_holds_redis_for_milliseconds() {
    let redis = Redis::start();
    let c = serve(service(redis_store(&redis), ServiceOptions::default())).await;
    redis_cli(&redis, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    redis_cli(&redis, &["CONFIG", "SET", "slowlog-max-len", "100000"]);
    redis_cli(&redis, &["SLOWLOG", "RESET"]);
    let value = "v".repeat(4096);
    let mut tasks = Vec::new();
    for t in 0..8 {
        let mut c = c.clone();
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..4 {
                let ds: Vec<_> = (0..64)
                    .map(|i| desc(&[("k", &format!("{t}-{n}-{i}-{value}"))]))
                    .collect();
                ask(&mut c, "api", ds, 0).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let durations = slowlog_durations(&redis);
    assert!(durations.len() > 32, "{durations:?}");
    let max = durations.iter().copied().max().unwrap_or(0);
    eprintln!("slowest call: {max} µs of {} calls", durations.len());
    assert!(max < 100_000, "a call held Redis {max} µs");
}

/// The duration (µs) of each command in Redis's slow log.
fn slowlog_durations(redis: &Redis) -> Vec<u64> {
    let out = redis_cli(redis, &["--no-raw", "SLOWLOG", "GET", "100000"]);
    // `redis-cli --no-raw` writes each entry as
    //  1) 1) (integer) id  2) (integer) time  3) (integer) duration ...
    out.lines()
        .filter(|l| l.trim_start().starts_with("3) (integer)"))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_that_never_fits_is_over_with_what_is_left_and_no_retry_after() {
    let redis = Redis::start();
    let options = ServiceOptions::default()
        .headers(true)
        .charge(Charge::Admitted);
    for mut c in clients(&redis, options).await {
        let k = || desc(&[("k", "nf")]);
        ask(&mut c, "api", vec![with_hits(k(), 2)], 0).await;
        let r = ask(&mut c, "api", vec![with_hits(k(), 6)], 0).await;
        assert_eq!(overall(&r), Code::OverLimit);
        assert_eq!(code(&r.statuses[0]), Code::OverLimit);
        assert_eq!(r.statuses[0].limit_remaining, 3, "{r:?}");
        assert!(header(&r, "retry-after").is_none(), "{r:?}");
        let rl = header(&r, "ratelimit").expect("ratelimit");
        assert!(rl.contains(";r=3;"), "{rl}");
        // nothing was taken: 3 still fit
        let r = ask(&mut c, "api", vec![with_hits(k(), 3)], 0).await;
        assert_eq!(overall(&r), Code::Ok);
        // beside a descriptor that waits, the wait is its
        let r = ask(
            &mut c,
            "api",
            vec![with_hits(k(), 6), desc(&[("k", "nf")])],
            0,
        )
        .await;
        assert_eq!(overall(&r), Code::OverLimit);
        assert!(header(&r, "retry-after").is_some(), "{r:?}");
        // an override that never fits, the same
        let mut o = with_hits(desc(&[("k", "nf-o")]), 11);
        o.limit = Some(RateLimitOverride {
            requests_per_unit: 10,
            unit: 3,
        });
        let r = ask(&mut c, "api", vec![o], 0).await;
        assert_eq!(overall(&r), Code::OverLimit);
        assert_eq!(r.statuses[0].limit_remaining, 10, "{r:?}");
        assert!(header(&r, "retry-after").is_none(), "{r:?}");
    }
}

#[tokio::test]
async fn duration_until_reset_is_whole_seconds_rounded_up() {
    let mut c = serve(service(MemoryStore::new(), ServiceOptions::default())).await;
    for (entries, max) in [(&[("s", "x")], 1), (&[("k", "x")], 3600)] {
        let r = ask(&mut c, "api", vec![desc(entries)], 0).await;
        let d = r.statuses[0].duration_until_reset.expect("reset");
        assert_eq!(d.nanos, 0, "{d:?}");
        assert!((1..=max).contains(&d.seconds), "{d:?}");
    }
}

#[tokio::test]
async fn every_period_is_reported_in_a_unit() {
    let mut c = serve(service(MemoryStore::new(), ServiceOptions::default())).await;
    // (envoy.service.ratelimit.v3 units: MINUTE = 2, HOUR = 3)
    for (key, expected) in [("d90", (66, 2)), ("m5", (20, 2)), ("k", (5, 3))] {
        let r = ask(&mut c, "api", vec![desc(&[(key, "x")])], 0).await;
        let l = r.statuses[0].current_limit.as_ref().expect("limit");
        assert_eq!((l.requests_per_unit, l.unit), expected, "{key}");
    }
}

/// `(a, b_c)` and `(a_b, c)` match one rule (`a_b_c`), as in the Go
/// service, and count in one counter there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_that_match_as_one_key_value_share_one_counter() {
    let redis = Redis::start();
    for mut c in clients(&redis, ServiceOptions::default()).await {
        let r = ask(&mut c, "api", vec![desc(&[("a", "b_c")])], 0).await;
        assert_eq!(overall(&r), Code::Ok);
        let r = ask(&mut c, "api", vec![desc(&[("a_b", "c")])], 0).await;
        assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_shadow_mode_answers_ok_and_takes_nothing_past_a_limit() {
    let redis = Redis::start();
    for mut c in clients(&redis, ServiceOptions::default().shadow_mode(true)).await {
        for _ in 0..8 {
            let r = ask(&mut c, "api", vec![desc(&[("k", "sh")])], 0).await;
            assert_eq!(overall(&r), Code::Ok);
        }
        assert_eq!(remaining(&mut c, &[("k", "sh")]).await, 0);
        // an override too (the Go service answers OK whatever)
        let mut o = desc(&[("k", "sh-o")]);
        o.limit = Some(RateLimitOverride {
            requests_per_unit: 0,
            unit: 3,
        });
        let r = ask(&mut c, "api", vec![o], 0).await;
        assert_eq!(overall(&r), Code::Ok);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_quota_mode_denies_only_when_every_descriptor_is_over() {
    let redis = Redis::start();
    for mut c in clients(&redis, ServiceOptions::default().quota_mode(true)).await {
        ask(&mut c, "api", vec![with_hits(desc(&[("k", "q1")]), 5)], 0).await;
        // one over, one within: admitted
        let r = ask(
            &mut c,
            "api",
            vec![desc(&[("k", "q1")]), desc(&[("k", "q2")])],
            0,
        )
        .await;
        assert_eq!(overall(&r), Code::Ok, "{r:?}");
        assert_eq!(code(&r.statuses[0]), Code::OverLimit);
        // alone and over: denied
        let r = ask(&mut c, "api", vec![desc(&[("k", "q1")])], 0).await;
        assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
    }
}

#[tokio::test]
async fn go_headers_show_the_tightest_descriptor() {
    let names = GoHeaders::default();
    let options = ServiceOptions::default().go_headers(Some(names));
    let mut c = serve(service(MemoryStore::new(), options)).await;
    ask(&mut c, "api", vec![with_hits(desc(&[("k", "g1")]), 3)], 0).await;
    let r = ask(
        &mut c,
        "api",
        vec![desc(&[("m5", "g")]), desc(&[("k", "g1")])],
        0,
    )
    .await;
    assert_eq!(header(&r, "RateLimit-Limit"), Some("5"), "{r:?}");
    assert_eq!(header(&r, "RateLimit-Remaining"), Some("1"), "{r:?}");
    let reset: i64 = header(&r, "RateLimit-Reset")
        .expect("reset")
        .parse()
        .expect("seconds");
    assert!((1..=3600).contains(&reset), "{reset}");
    // no IETF headers unless asked
    assert!(header(&r, "RateLimit-Policy").is_none(), "{r:?}");
    // an entry that is not UTF-8 is still limited (the proto's value is bytes)
    let raw = RateLimitDescriptor {
        entries: vec![Entry {
            key: "k".into(),
            value: b"\xff".to_vec(),
        }],
        limit: None,
        hits_addend: None,
    };
    let r = ask(&mut c, "api", vec![raw], 0).await;
    assert_eq!(header(&r, "RateLimit-Remaining"), Some("4"), "{r:?}");
}

/// Rules whose dotted keys read alike are two rules, each at its own limit
/// (a nested `b` → `c` and a key `b.c`; a value `v1.2` and a value `v1`
/// with a child `2`), on every start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_whose_dotted_keys_read_alike_are_each_enforced_at_their_own_limit() {
    const ALIKE: &str = "\
domain: api
descriptors:
  - key: b
    descriptors:
      - key: c
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: b.c
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: k
    value: v1.2
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: k
    value: v1
    descriptors:
      - key: '2'
        rate_limit: {unit: minute, requests_per_unit: 2}
";
    let redis = Redis::start();
    for round in 0..3 {
        let options = ServiceOptions::default().headers(true);
        for mut c in [
            serve(
                RlsService::new(config(ALIKE), MemoryStore::new(), options.clone())
                    .expect("service"),
            )
            .await,
            serve(
                RlsService::new(config(ALIKE), redis_store(&redis), options.clone())
                    .expect("service"),
            )
            .await,
        ] {
            let value = format!("y{round}");
            for (tight, loose) in [
                ([("b", "x"), ("c", &*value)], [("b.c", &*value)]),
                ([("k", "v1"), ("2", &*value)], [("k", "v1.2")]),
            ] {
                let mut codes = Vec::new();
                for _ in 0..3 {
                    codes.push(overall(&ask(&mut c, "api", vec![desc(&tight)], 0).await));
                }
                assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit], "{tight:?}");
                for _ in 0..5 {
                    let r = ask(&mut c, "api", vec![desc(&loose)], 0).await;
                    assert_eq!(overall(&r), Code::Ok, "{loose:?}");
                    let l = r.statuses[0].current_limit.as_ref().expect("limit");
                    assert_eq!(l.requests_per_unit, 1000, "{r:?}");
                    let policy = header(&r, "RateLimit-Policy").expect("policy");
                    assert!(policy.contains(";q=1000;"), "{policy}");
                }
            }
        }
    }
}

/// Descriptors whose hits would write more sliding-log times together
/// than one store call may (`AllOrNothing::MAX_LOGGED`): the request is
/// over as one that never fits (not an error, which Envoy's
/// `failure_mode_deny: false` would let through), and, with `--charge
/// admitted`, takes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_too_many_to_log_in_one_call_are_over_not_an_error() {
    const LOG: &str = "\
domain: api
descriptors:
  - key: log
    rate_limit: {unit: hour, requests_per_unit: 10000, strategy: sliding-window-log}
";
    let redis = Redis::start();
    let options = ServiceOptions::default()
        .headers(true)
        .charge(Charge::Admitted);
    for mut c in [
        serve(RlsService::new(config(LOG), MemoryStore::new(), options.clone()).expect("service"))
            .await,
        serve(RlsService::new(config(LOG), redis_store(&redis), options.clone()).expect("service"))
            .await,
    ] {
        let two = || {
            vec![
                with_hits(desc(&[("log", "a")]), 6000),
                with_hits(desc(&[("log", "b")]), 6000),
            ]
        };
        let r = ask(&mut c, "api", two(), 0).await;
        assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
        assert_eq!(r.statuses[0].limit_remaining, 10_000, "{r:?}");
        assert!(header(&r, "retry-after").is_none(), "{r:?}");
        // nothing was taken: each alone fits
        for v in ["a", "b"] {
            let r = ask(&mut c, "api", vec![with_hits(desc(&[("log", v)]), 6000)], 0).await;
            assert_eq!(overall(&r), Code::Ok, "{r:?}");
        }
    }
}

/// Six copies of one descriptor against a fresh limit of 5 (summed hits 6):
/// they can never fit together, so they are answered as a lone descriptor
/// of 6 hits is: what is left, no `Retry-After`, and, with `--charge
/// admitted`, nothing taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_whose_summed_hits_never_fit_say_what_is_left() {
    let redis = Redis::start();
    let options = ServiceOptions::default()
        .headers(true)
        .charge(Charge::Admitted);
    for mut c in clients(&redis, options).await {
        let six = (0..6).map(|_| desc(&[("k", "dup")])).collect();
        let r = ask(&mut c, "api", six, 1).await;
        assert_eq!(overall(&r), Code::OverLimit);
        for s in &r.statuses {
            assert_eq!(s.limit_remaining, 5, "nothing was used: {r:?}");
        }
        assert_eq!(header(&r, "retry-after"), None, "no wait admits it: {r:?}");
        let one = ask(&mut c, "api", vec![desc(&[("k", "dup")])], 1).await;
        assert_eq!(overall(&one), Code::Ok);
        assert_eq!(one.statuses[0].limit_remaining, 4);
        // five copies fit: taken together
        let five = (0..5).map(|_| desc(&[("k", "dup5")])).collect();
        let r = ask(&mut c, "api", five, 1).await;
        assert_eq!(overall(&r), Code::Ok, "{r:?}");
        assert_eq!(remaining(&mut c, &[("k", "dup5")]).await, 0);
    }
}

/// 5,000 one-line rules (a 340 KB file) on Redis take a few KB each, not
/// tens (they took 52–66 KB each, 5,000 rules over 240 MB, when every
/// limiter assembled its own copies of the Lua scripts); the memory
/// store builds them too (its binds, quadratic before, are counted in the
/// library's own tests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_rules_take_bounded_memory() {
    let redis = Redis::start();
    let mut text = String::from("domain: g\ndescriptors:\n");
    for i in 0..5_000 {
        text.push_str(&format!(
            "  - key: k{i}\n    rate_limit: {{unit: minute, requests_per_unit: 1}}\n"
        ));
    }
    let before = proc_status_kib("VmRSS");
    let svc = RlsService::new(
        config(&text),
        redis_store(&redis),
        ServiceOptions::default(),
    )
    .expect("service");
    let grown = proc_status_kib("VmRSS").saturating_sub(before);
    assert!(grown < 120 * 1024, "5,000 rules took {grown} KiB");
    let mut c = serve(svc).await;
    let r = ask(&mut c, "g", vec![desc(&[("k4999", "x")])], 0).await;
    assert_eq!(overall(&r), Code::Ok);
    let svc = RlsService::new(config(&text), MemoryStore::new(), ServiceOptions::default())
        .expect("service");
    drop(svc);
}
