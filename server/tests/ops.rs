//! The service's operations over real gRPC: `replaces`, the Prometheus
//! metrics, hot reload under load, the failure policy on a stopped and a
//! killed Redis.

mod common;

use std::time::{Duration, Instant};

use common::*;
use tower_redis_ratelimit::{MemoryStore, RedisStore};
use tower_redis_ratelimit_server::config::{Charge, Config, LoadOptions, OnStoreError};
use tower_redis_ratelimit_server::metrics;
use tower_redis_ratelimit_server::pb::rate_limit_descriptor::RateLimitOverride;
use tower_redis_ratelimit_server::pb::rate_limit_response::Code;
use tower_redis_ratelimit_server::reload::{ConfigWatcher, Reload, ReloadError};
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
    // (`--charge admitted`: the denied 2 takes nothing, so the 1 after it
    // fits)
    let service = memory(
        METRICS,
        ServiceOptions::default()
            .max_metric_keys(3)
            .charge(Charge::Admitted),
    );
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
    // a descriptor matching nothing is not counted; one of an unknown
    // domain is counted as not found, as the Go service counts it
    assert!(!text.contains("nothing"), "{text}");
    assert_eq!(
        sample(
            &text,
            "ratelimit_service_rate_limit_domain_not_found{domain=\"other\"}"
        ),
        1,
        "{text}"
    );
    assert!(!text.contains("key=\"other"), "{text}");
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

fn limits_yaml(domain: &str, limit: u32) -> String {
    format!(
        "domain: {domain}\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: year\n      requests_per_unit: {limit}\n  - key: s\n    rate_limit:\n      unit: year\n      requests_per_unit: 1000000\n"
    )
}

/// A Kubernetes ConfigMap volume: `..data` links to a directory of the
/// files, each file a link into `..data`; an update writes a new
/// directory and renames a new `..data` link over the old one.
struct ConfigMap {
    dir: std::path::PathBuf,
    version: u32,
}

impl ConfigMap {
    fn new(dir: &std::path::Path, name: &str, text: &str) -> ConfigMap {
        let mut m = ConfigMap {
            dir: dir.to_owned(),
            version: 0,
        };
        m.update(name, text);
        std::os::unix::fs::symlink(format!("..data/{name}"), dir.join(name)).expect("link");
        m
    }

    fn update(&mut self, name: &str, text: &str) {
        self.version += 1;
        let v = format!("..v{}", self.version);
        std::fs::create_dir(self.dir.join(&v)).expect("dir");
        std::fs::write(self.dir.join(&v).join(name), text).expect("write");
        let tmp = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&v, &tmp).expect("link");
        std::fs::rename(&tmp, self.dir.join("..data")).expect("swap");
    }
}

/// An editor's save: a temporary file renamed over the old one.
fn save(dir: &std::path::Path, name: &str, text: &str) {
    let tmp = dir.join(format!(".{name}.swp"));
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, dir.join(name)).expect("rename");
}

/// The limit `domain` reports for `k` (without consuming).
async fn current(c: &mut Client, domain: &str) -> Option<u32> {
    let r = ask(c, domain, vec![peek(&[("k", "x")])], 0).await;
    r.statuses[0]
        .current_limit
        .as_ref()
        .map(|l| l.requests_per_unit)
}

/// 20 reloads (10 ConfigMap swaps, 10 editor saves) under 4 concurrent
/// callers: no call fails, each new limit answers within 1 s of the write
/// (the watcher's default interval), the unchanged limit keeps counting
/// through them all, every load is counted once; then an invalid file
/// keeps the running configuration and counts a failed load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_under_load_applies_within_a_second_and_drops_nothing() {
    let tmp = TempDir::new("reload");
    let dir = tmp.0.clone();
    let mut map = ConfigMap::new(&dir, "a.yaml", &limits_yaml("one", 10));
    std::fs::write(dir.join("b.yaml"), limits_yaml("two", 10)).expect("write");
    let files = Config::read_dir(&dir).expect("read");
    assert_eq!(files.len(), 2, "{files:?}");
    let config = Config::from_sources(
        files.iter().map(|(n, t)| (n.as_str(), t.as_str())),
        LoadOptions::default(),
    )
    .expect("config");
    let service =
        RlsService::new(config, MemoryStore::new(), ServiceOptions::default()).expect("service");
    let metrics_addr = serve_metrics(&service).await;
    let watcher =
        ConfigWatcher::new(service.clone(), &dir, LoadOptions::default()).loaded_from(files);
    let watching = tokio::spawn(watcher.run());
    let c = serve(service).await;

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut callers = Vec::new();
    for i in 0..4 {
        let mut c = c.clone();
        let stop = stop.clone();
        callers.push(tokio::spawn(async move {
            let (mut admitted, mut failed, mut calls) = (0u64, 0u64, 0u64);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let domain = if i % 2 == 0 { "one" } else { "two" };
                calls += 1;
                match try_ask(&mut c, domain, vec![desc(&[("s", "shared")])], 0).await {
                    Ok(r) if overall(&r) == Code::Ok && r.statuses[0].current_limit.is_some() => {
                        admitted += 1;
                    }
                    _ => failed += 1,
                }
            }
            (admitted, failed, calls)
        }));
    }

    let mut c = c;
    assert_eq!(current(&mut c, "one").await, Some(10));
    let mut slowest = Duration::ZERO;
    for i in 0..20u32 {
        let limit = if (i / 2) % 2 == 0 { 20 } else { 10 };
        let domain = if i % 2 == 0 { "one" } else { "two" };
        let written = Instant::now();
        if i % 2 == 0 {
            map.update("a.yaml", &limits_yaml("one", limit));
        } else {
            save(&dir, "b.yaml", &limits_yaml("two", limit));
        }
        loop {
            if current(&mut c, domain).await == Some(limit) {
                break;
            }
            assert!(
                written.elapsed() < Duration::from_secs(1),
                "reload {i}: {domain} still not at {limit} after 1 s"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        slowest = slowest.max(written.elapsed());
    }
    eprintln!("slowest reload: {slowest:?}");
    let text = scrape(metrics_addr).await;
    assert_eq!(sample(&text, metrics::CONFIG_LOAD_SUCCESS), 21, "{text}");
    assert_eq!(sample(&text, metrics::CONFIG_LOAD_ERROR), 0, "{text}");

    // an invalid file: the running configuration stays, one failed load
    save(
        &dir,
        "b.yaml",
        "domain: two\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
    );
    let written = Instant::now();
    while sample(&scrape(metrics_addr).await, metrics::CONFIG_LOAD_ERROR) == 0 {
        assert!(written.elapsed() < Duration::from_secs(5), "no failed load");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let callers_during = Instant::now();
    while callers_during.elapsed() < Duration::from_millis(600) {
        // (the last save, reload 19, set 10)
        assert_eq!(current(&mut c, "two").await, Some(10));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut admitted, mut failed, mut calls) = (0, 0, 0);
    for t in callers {
        let (a, f, n) = t.await.expect("caller");
        admitted += a;
        failed += f;
        calls += n;
    }
    watching.abort();
    assert_eq!(failed, 0, "{failed} of {calls} calls failed");
    assert!(calls > 100, "only {calls} calls");
    // reported once, however long it stays
    let text = scrape(metrics_addr).await;
    assert_eq!(sample(&text, metrics::CONFIG_LOAD_ERROR), 1, "{text}");
    assert_eq!(sample(&text, metrics::CONFIG_LOAD_SUCCESS), 21, "{text}");
    // the unchanged limit counted every admitted call across the reloads
    let mut left = 0;
    for domain in ["one", "two"] {
        let r = ask(&mut c, domain, vec![peek(&[("s", "shared")])], 0).await;
        left += 1_000_000 - u64::from(r.statuses[0].limit_remaining);
    }
    assert_eq!(left, admitted);
}

/// One check at a time: the error of an invalid change names the file and
/// the path inside it; the same files are not reported again; a fix loads.
#[tokio::test]
async fn watcher_reports_an_invalid_change_once_with_file_and_path() {
    let tmp = TempDir::new("watch");
    let dir = tmp.0.clone();
    std::fs::write(dir.join("a.yaml"), limits_yaml("one", 10)).expect("write");
    let files = Config::read_dir(&dir).expect("read");
    let config = Config::from_sources(
        files.iter().map(|(n, t)| (n.as_str(), t.as_str())),
        LoadOptions::default(),
    )
    .expect("config");
    let service =
        RlsService::new(config, MemoryStore::new(), ServiceOptions::default()).expect("service");
    let mut w =
        ConfigWatcher::new(service.clone(), &dir, LoadOptions::default()).loaded_from(files);
    assert!(matches!(w.check().await, Reload::Unchanged));
    let bad = "domain: one\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n";
    save(&dir, "a.yaml", bad);
    match w.check().await {
        Reload::Failed(ReloadError::Config(e)) => {
            assert_eq!(e.file, "a.yaml");
            assert_eq!(e.path, "descriptors[0].rate_limit.unit");
            assert_eq!(e.line, 4);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(w.check().await, Reload::Unchanged));
    assert_eq!(service.config().rules("one").len(), 2);
    let text = service.metrics().render();
    assert_eq!(sample(&text, metrics::CONFIG_LOAD_ERROR), 1, "{text}");
    // back to the running files, then the same mistake again: reported again
    save(&dir, "a.yaml", &limits_yaml("one", 10));
    assert!(matches!(w.check().await, Reload::Unchanged));
    save(&dir, "a.yaml", bad);
    assert!(matches!(w.check().await, Reload::Failed(_)));
    let text = service.metrics().render();
    assert_eq!(sample(&text, metrics::CONFIG_LOAD_ERROR), 2, "{text}");
    // a limit the library rejects (a burst on a fixed window)
    save(
        &dir,
        "a.yaml",
        "domain: one\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 5}\n",
    );
    match w.check().await {
        Reload::Failed(e) => assert!(e.to_string().contains("a.yaml"), "{e}"),
        other => panic!("{other:?}"),
    }
    save(&dir, "a.yaml", &limits_yaml("one", 7));
    assert!(matches!(w.check().await, Reload::Reloaded));
    let text = service.metrics().render();
    assert_eq!(sample(&text, metrics::CONFIG_LOAD_ERROR), 3, "{text}");
    assert_eq!(sample(&text, metrics::CONFIG_LOAD_SUCCESS), 2, "{text}");
    let mut c = serve(service).await;
    assert_eq!(current(&mut c, "one").await, Some(7));
}

const POLICIES: &str = r#"
domain: open
failure_policy: allow
descriptors:
  - key: k
    rate_limit: {unit: year, requests_per_unit: 2}
  - key: zero
    rate_limit: {unit: year, requests_per_unit: 0}
"#;

const POLICIES_DENY: &str = r#"
domain: closed
failure_policy: deny
descriptors:
  - key: k
    rate_limit: {unit: year, requests_per_unit: 2}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: year, requests_per_unit: 2}
"#;

const POLICIES_DEFAULT: &str = r#"
domain: plain
descriptors:
  - key: k
    rate_limit: {unit: year, requests_per_unit: 2}
"#;

fn policy_service(redis: &Redis, default: OnStoreError) -> RlsService {
    let config = Config::from_sources(
        [
            ("open.yaml", POLICIES),
            ("closed.yaml", POLICIES_DENY),
            ("plain.yaml", POLICIES_DEFAULT),
        ],
        LoadOptions::default(),
    )
    .expect("config");
    let store = RedisStore::from_url(&redis.url())
        .expect("store")
        .timeout(Duration::from_millis(300));
    RlsService::new(
        config,
        store,
        ServiceOptions::default()
            .headers(true)
            .on_store_error(default),
    )
    .expect("service")
}

/// Asks and checks that the answer came within the store timeout and some
/// slack (2 shared cores).
async fn timed(
    c: &mut Client,
    domain: &str,
    d: Vec<tower_redis_ratelimit_server::pb::RateLimitDescriptor>,
) -> Result<tower_redis_ratelimit_server::pb::RateLimitResponse, tonic::Status> {
    let t = Instant::now();
    let r = try_ask(c, domain, d, 0).await;
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    r
}

/// A Redis stopped (SIGSTOP: every call times out) then killed (every
/// connection refused): `allow` answers OK for what it could not decide,
/// `deny` OVER_LIMIT (not for a shadow limit), no policy the service's
/// default (`unavailable`: the call fails; `deny`); what is decided
/// without the store (a limit of 0) still denies; the store decides again
/// once it is back; each failed call is counted per domain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_policy_on_a_stopped_then_killed_redis() {
    let redis = Redis::start();
    let service = policy_service(&redis, OnStoreError::Unavailable);
    let metrics_addr = serve_metrics(&service).await;
    let mut c = serve(service).await;
    let mut strict = serve(policy_service(&redis, OnStoreError::Deny)).await;
    // the first connections (a debug build on 2 shared cores may take
    // longer than the 300 ms store timeout), without consuming
    for client in [&mut c, &mut strict] {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let r = try_ask(client, "plain", vec![peek(&[("k", "warm-up")])], 0).await;
            if r.is_ok_and(|r| overall(&r) == Code::Ok) {
                break;
            }
            assert!(Instant::now() < deadline, "the store never answered");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // one unit of each `k` taken while the store answers
    for domain in ["open", "closed", "plain"] {
        let r = ask(&mut c, domain, vec![desc(&[("k", "a")])], 0).await;
        assert_eq!((overall(&r), r.statuses[0].limit_remaining), (Code::Ok, 1));
    }
    // (the store errors of a slow warm-up, if any, are not the test's)
    let base = scrape(metrics_addr).await;
    redis.signal("STOP");
    let mut failures = [0u64; 3];
    for round in 0..2 {
        // allow: OK, no current limit, no headers
        let r = timed(&mut c, "open", vec![desc(&[("k", "a")])])
            .await
            .expect("allow");
        assert_eq!(overall(&r), Code::Ok, "round {round}");
        assert!(r.statuses[0].current_limit.is_none());
        assert!(r.response_headers_to_add.is_empty(), "{r:?}");
        // allow, but a limit of 0 is decided without the store
        let r = timed(
            &mut c,
            "open",
            vec![desc(&[("k", "a")]), desc(&[("zero", "z")])],
        )
        .await
        .expect("allow");
        assert_eq!(overall(&r), Code::OverLimit);
        assert_eq!(code(&r.statuses[0]), Code::Ok);
        assert_eq!(code(&r.statuses[1]), Code::OverLimit);
        failures[0] += 2;
        // deny: OVER_LIMIT with Retry-After 1; a shadow limit does not deny
        let r = timed(&mut c, "closed", vec![desc(&[("k", "a")])])
            .await
            .expect("deny");
        assert_eq!(overall(&r), Code::OverLimit);
        assert_eq!(code(&r.statuses[0]), Code::OverLimit);
        assert_eq!(header(&r, "retry-after"), Some("1"));
        let r = timed(&mut c, "closed", vec![desc(&[("shadow", "s")])])
            .await
            .expect("deny");
        assert_eq!(overall(&r), Code::Ok);
        failures[1] += 2;
        // no policy: the default, unavailable or deny
        let e = timed(&mut c, "plain", vec![desc(&[("k", "a")])])
            .await
            .expect_err("unavailable");
        assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
        let r = timed(&mut strict, "plain", vec![desc(&[("k", "a")])])
            .await
            .expect("deny by default");
        assert_eq!(overall(&r), Code::OverLimit);
        failures[2] += 1;
        if round == 0 {
            // back: decided by the store again (a call that timed out
            // may have been counted when the store woke up: its command
            // was in the socket)
            redis.signal("CONT");
            let errors = |t: &str| {
                ["open", "closed", "plain"]
                    .map(|d| sample(t, &format!("{}{{domain=\"{d}\"}}", metrics::STORE_ERRORS)))
            };
            let before = errors(&scrape(metrics_addr).await);
            let deadline = Instant::now() + Duration::from_secs(20);
            for domain in ["open", "closed", "plain"] {
                loop {
                    let r = try_ask(&mut c, domain, vec![peek(&[("k", "a")])], 0).await;
                    let l = r.ok().and_then(|r| {
                        r.statuses[0]
                            .current_limit
                            .as_ref()
                            .map(|l| l.requests_per_unit)
                    });
                    if l == Some(2) {
                        break;
                    }
                    assert!(Instant::now() < deadline, "{domain}: the store is not back");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            // (the reconnections' errors, if any, are not the test's)
            let after = errors(&scrape(metrics_addr).await);
            for i in 0..3 {
                failures[i] += after[i] - before[i];
            }
            // then gone for good
            let mut redis = redis;
            let _ = redis.child.kill();
            let _ = redis.child.wait();
            std::mem::forget(redis);
            break;
        }
    }
    // and the same once it is killed (connections refused)
    let r = timed(&mut c, "open", vec![desc(&[("k", "a")])])
        .await
        .expect("allow");
    assert_eq!(overall(&r), Code::Ok);
    let r = timed(&mut c, "closed", vec![desc(&[("k", "a")])])
        .await
        .expect("deny");
    assert_eq!(overall(&r), Code::OverLimit);
    let e = timed(&mut c, "plain", vec![desc(&[("k", "a")])])
        .await
        .expect_err("unavailable");
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    failures[0] += 1;
    failures[1] += 1;
    failures[2] += 1;
    let text = scrape(metrics_addr).await;
    for (domain, n) in ["open", "closed", "plain"].iter().zip(failures) {
        let s = format!("{}{{domain=\"{domain}\"}}", metrics::STORE_ERRORS);
        assert_eq!(sample(&text, &s) - sample(&base, &s), n, "{domain}: {text}");
    }
}

/// A new count keeps what callers used (a lower limit denies at once, a
/// higher one admits the difference); a new period counts anew.
#[tokio::test]
async fn reload_keeps_the_count_across_a_new_limit() {
    let load = |limit: u32, unit: &str| {
        let src = format!(
            "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {{unit: {unit}, requests_per_unit: {limit}}}\n"
        );
        Config::from_sources([("r.yaml", src.as_str())], LoadOptions::default()).expect("config")
    };
    // (`--charge admitted`: the denied calls take nothing)
    let service = RlsService::new(
        load(5, "year"),
        MemoryStore::new(),
        ServiceOptions::default()
            .headers(true)
            .charge(Charge::Admitted),
    )
    .expect("service");
    let mut c = serve(service.clone()).await;
    for _ in 0..4 {
        assert_eq!(
            overall(&ask(&mut c, "r", vec![desc(&[("k", "v")])], 0).await),
            Code::Ok
        );
    }
    service.reload(load(3, "year")).expect("reload");
    let r = ask(&mut c, "r", vec![desc(&[("k", "v")])], 0).await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit),
        Some(3)
    );
    service.reload(load(6, "year")).expect("reload");
    let codes: Vec<Code> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(overall(
                &ask(&mut c, "r", vec![desc(&[("k", "v")])], 0).await,
            ));
        }
        v
    };
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit]);
    service.reload(load(6, "day")).expect("reload");
    let r = ask(&mut c, "r", vec![desc(&[("k", "v")])], 0).await;
    assert_eq!((overall(&r), r.statuses[0].limit_remaining), (Code::Ok, 5));
    // the quota is named by its key (not the rule's name: a rename keeps
    // the count)
    let policy = header(&r, "ratelimit-policy").expect("policy");
    assert!(policy.starts_with("\"k\";q=6;w=86400"), "{policy}");
    let named = "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {name: renamed, unit: day, requests_per_unit: 6}\n";
    service
        .reload(Config::from_sources([("r.yaml", named)], LoadOptions::default()).expect("config"))
        .expect("reload");
    let r = ask(&mut c, "r", vec![peek(&[("k", "v")])], 0).await;
    assert_eq!(r.statuses[0].limit_remaining, 5);
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.name.as_str()),
        Some("renamed")
    );
    let text = service.metrics().render();
    assert_eq!(sample(&text, metrics::CONFIG_LOAD_SUCCESS), 5, "{text}");
}
