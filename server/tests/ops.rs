//! The service's operations over real gRPC: `replaces`, the Prometheus
//! metrics, hot reload under load, the failure policy on a stopped and a
//! killed Redis.

mod common;

use common::*;
use tower_redis_ratelimit::MemoryStore;
use tower_redis_ratelimit_server::config::{Config, LoadOptions};
use tower_redis_ratelimit_server::metrics;
use tower_redis_ratelimit_server::pb::rate_limit_descriptor::RateLimitOverride;
use tower_redis_ratelimit_server::pb::rate_limit_response::Code;
use tower_redis_ratelimit_server::service::{RlsService, ServiceOptions};

fn memory(src: &str, options: ServiceOptions) -> RlsService {
    let config = Config::from_sources([("t.yaml", src)], LoadOptions::default()).expect("config");
    RlsService::new(config, MemoryStore::new(), options).expect("service")
}

const REPLACES: &str = r#"
domain: rep
descriptors:
  - key: path
    rate_limit:
      name: per_path
      unit: year
      requests_per_unit: 1
  - key: user
    value: vip
    rate_limit:
      unit: year
      requests_per_unit: 100
      replaces:
        - name: per_path
  - key: open
    rate_limit:
      unlimited: true
      replaces:
        - name: per_path
  - key: free
    rate_limit:
      name: free
      unlimited: true
  - key: unfree
    rate_limit:
      unit: year
      requests_per_unit: 5
      replaces:
        - name: free
"#;

#[tokio::test]
async fn replaces_drops_the_replaced_limits() {
    let mut c = serve(memory(REPLACES, ServiceOptions::default())).await;
    // with the replacer: the path's limit is not applied (nor consumed)
    for _ in 0..3 {
        let r = ask(
            &mut c,
            "rep",
            vec![desc(&[("path", "/a")]), desc(&[("user", "vip")])],
            0,
        )
        .await;
        assert_eq!(overall(&r), Code::Ok);
        let s = &r.statuses[0];
        assert_eq!(code(s), Code::Ok);
        assert!(s.current_limit.is_none(), "{s:?}");
        assert_eq!(s.limit_remaining, 0);
        assert!(s.duration_until_reset.is_none());
        let v = &r.statuses[1];
        assert_eq!(
            v.current_limit.as_ref().map(|l| l.requests_per_unit),
            Some(100)
        );
    }
    // the path's own count is untouched: its one request is still there
    let r = ask(&mut c, "rep", vec![desc(&[("path", "/a")])], 0).await;
    assert_eq!(overall(&r), Code::Ok);
    let l = r.statuses[0].current_limit.as_ref().expect("applied alone");
    assert_eq!((l.name.as_str(), l.requests_per_unit), ("per_path", 1));
    let r = ask(&mut c, "rep", vec![desc(&[("path", "/a")])], 0).await;
    assert_eq!(overall(&r), Code::OverLimit);
    // an over path does not deny a request whose replacer is matched
    let r = ask(
        &mut c,
        "rep",
        vec![desc(&[("path", "/a")]), desc(&[("user", "vip")])],
        0,
    )
    .await;
    assert_eq!(overall(&r), Code::Ok);
    // an unlimited limit replaces too
    let r = ask(
        &mut c,
        "rep",
        vec![desc(&[("path", "/a")]), desc(&[("open", "x")])],
        0,
    )
    .await;
    assert_eq!(overall(&r), Code::Ok);
    assert!(r.statuses[0].current_limit.is_none());
    assert_eq!(r.statuses[1].limit_remaining, u32::MAX);
    // an unlimited limit is never replaced: it stays unlimited
    let r = ask(
        &mut c,
        "rep",
        vec![desc(&[("free", "x")]), desc(&[("unfree", "y")])],
        0,
    )
    .await;
    assert_eq!(r.statuses[0].limit_remaining, u32::MAX);
    assert_eq!(r.statuses[1].limit_remaining, 4);
    // a user that is not vip matches nothing: the path applies
    let r = ask(
        &mut c,
        "rep",
        vec![desc(&[("path", "/a")]), desc(&[("user", "bob")])],
        0,
    )
    .await;
    assert_eq!(overall(&r), Code::OverLimit);
}

const METRICS: &str = r#"
domain: m
descriptors:
  - key: lim
    rate_limit:
      unit: year
      requests_per_unit: 10
  - key: shadow
    shadow_mode: true
    rate_limit:
      unit: year
      requests_per_unit: 2
  - key: zero
    rate_limit:
      unit: year
      requests_per_unit: 0
  - key: user
    detailed_metric: true
    rate_limit:
      unit: year
      requests_per_unit: 5
  - key: ip
    rate_limit:
      unit: year
      requests_per_unit: 100
  - key: app
    value: x
    rate_limit:
      name: app_x
      unit: year
      requests_per_unit: 5
  - key: vip
    rate_limit:
      unit: year
      requests_per_unit: 5
      replaces:
        - name: app_x
  - key: free
    rate_limit:
      unlimited: true
"#;

fn series(name: &str, domain: &str, key: &str) -> String {
    format!("{name}{{domain=\"{domain}\",key=\"{key}\"}}")
}

/// The five counters of one key: total, within, near, over, shadow.
fn five(text: &str, domain: &str, key: &str) -> [u64; 5] {
    [
        metrics::TOTAL_HITS,
        metrics::WITHIN_LIMIT,
        metrics::NEAR_LIMIT,
        metrics::OVER_LIMIT,
        metrics::SHADOW_MODE,
    ]
    .map(|n| sample(text, &series(n, domain, key)))
}

#[tokio::test]
async fn metrics_count_as_the_go_service() {
    let service = memory(METRICS, ServiceOptions::default().max_metric_keys(3));
    let addr = serve_metrics(&service).await;
    let mut c = serve(service).await;
    let text = scrape(addr).await;
    assert_eq!(sample(&text, metrics::CONFIG_LOAD_SUCCESS), 1, "{text}");
    assert_eq!(sample(&text, metrics::CONFIG_LOAD_ERROR), 0);
    assert!(
        text.contains(&format!("{} 0", metrics::CONFIG_LOAD_ERROR)),
        "{text}"
    );

    // 10 per year, near from 8: hits 6, 3, 2 (over), 1, 1 (over)
    let lim = || vec![desc(&[("lim", "a")])];
    let mut codes = Vec::new();
    for hits in [6, 3, 2, 1, 1] {
        codes.push(overall(&ask(&mut c, "m", lim(), hits).await));
    }
    use Code::{Ok, OverLimit as Over};
    assert_eq!(codes, [Ok, Ok, Over, Ok, Over]);
    // total 13; within 6+3+1; near 1 (9 of 10) + 1 (denied from 9) + 1
    // (10 of 10); over 1 (11 of 10) + 1 (all of it)
    let text = scrape(addr).await;
    assert_eq!(five(&text, "m", "lim"), [13, 10, 3, 2, 0], "{text}");

    // shadow, 2 per year (near from 1): three requests, none denied
    for _ in 0..3 {
        let r = ask(&mut c, "m", vec![desc(&[("shadow", "s")])], 0).await;
        assert_eq!(overall(&r), Code::Ok);
    }
    // zero: every hit over
    for _ in 0..2 {
        let r = ask(&mut c, "m", vec![desc(&[("zero", "z")])], 0).await;
        assert_eq!(overall(&r), Code::OverLimit);
    }
    // a rule without detailed_metric: one series whatever the values
    for ip in ["1.1.1.1", "2.2.2.2", "3.3.3.3"] {
        ask(&mut c, "m", vec![desc(&[("ip", ip)])], 0).await;
    }
    // detailed_metric: a series per value, escaped, at most 3 of them
    for user in ["a", "b", "q\"b\\s\nn", "d", "e"] {
        ask(&mut c, "m", vec![desc(&[("user", user)])], 0).await;
    }
    // replaced (not counted), unlimited (not counted), no match, override
    ask(
        &mut c,
        "m",
        vec![desc(&[("app", "x")]), desc(&[("vip", "1")])],
        0,
    )
    .await;
    ask(&mut c, "m", vec![desc(&[("free", "1")])], 0).await;
    ask(&mut c, "m", vec![desc(&[("nothing", "1")])], 0).await;
    ask(&mut c, "other", vec![desc(&[("lim", "a")])], 0).await;
    let mut o = desc(&[("lim", "value-not-in-metrics")]);
    o.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 6,
    });
    ask(&mut c, "m", vec![o.clone()], 0).await;
    ask(&mut c, "m", vec![o], 0).await;

    let text = scrape(addr).await;
    assert_eq!(five(&text, "m", "lim"), [13, 10, 3, 2, 0], "{text}");
    assert_eq!(five(&text, "m", "shadow"), [3, 2, 1, 1, 1], "{text}");
    assert_eq!(five(&text, "m", "zero"), [2, 0, 0, 2, 0], "{text}");
    assert_eq!(five(&text, "m", "ip"), [3, 3, 0, 0, 0], "{text}");
    assert_eq!(five(&text, "m", "user_a"), [1, 1, 0, 0, 0], "{text}");
    assert_eq!(five(&text, "m", "user_b"), [1, 1, 0, 0, 0], "{text}");
    assert_eq!(
        five(&text, "m", "user_q\\\"b\\\\s\\nn"),
        [1, 1, 0, 0, 0],
        "{text}"
    );
    // past 3 keys with values: under the rule's key
    assert_eq!(five(&text, "m", "user"), [2, 2, 0, 0, 0], "{text}");
    assert!(
        !text.contains("user_d") && !text.contains("user_e"),
        "{text}"
    );
    assert_eq!(five(&text, "m", "vip"), [1, 1, 0, 0, 0], "{text}");
    assert!(!text.contains("\"app"), "{text}");
    assert!(!text.contains("\"free"), "{text}");
    assert!(
        !text.contains("nothing") && !text.contains("\"other\""),
        "{text}"
    );
    // the override (1 per year): one in (near: past 0 of 1), one over;
    // its key (`limit_override.lim`, no values) came after the 3 keys with
    // values, so it is counted under `limit_override`
    assert!(!text.contains("value-not-in-metrics"), "{text}");
    assert_eq!(
        five(&text, "m", "limit_override"),
        [2, 1, 1, 1, 0],
        "{text}"
    );
    // every sample line is `name{labels} value` or `name value`
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        assert!(line.starts_with("ratelimit_service_"), "{line:?}");
    }
    // other paths
    let (status, _, _) = http_get(addr, "/").await;
    assert!(status.contains("404"), "{status}");
}
