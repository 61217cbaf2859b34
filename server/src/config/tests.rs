//! Accepted and rejected configs and the matching rules, written from the
//! Go service's `src/config/config_impl.go`; the Go test each group mirrors
//! (in its `test/config/config_test.go`) is named in a comment.

use super::*;

fn load(files: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::from_sources(files.iter().copied(), LoadOptions::default())
}

fn one(src: &str) -> Config {
    match load(&[("t.yaml", src)]) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

fn reject(src: &str) -> ConfigError {
    match load(&[("t.yaml", src)]) {
        Ok(c) => panic!("accepted: {c:?}"),
        Err(e) => e,
    }
}

/// Asserts that `src` is rejected at `path` with a message containing `msg`.
fn rejects(src: &str, path: &str, msg: &str) {
    let e = reject(src);
    assert_eq!(e.file, "t.yaml", "{e}");
    assert_eq!(e.path, path, "{e}");
    assert!(e.message.contains(msg), "{e}");
}

const BASIC: &str = "
domain: api
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: path
    value: /login
    rate_limit: {unit: Minute, requests_per_unit: 5, name: login}
  - key: path
    value: /v1/*
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: path
    value: /v*
    rate_limit: {unit: hour, requests_per_unit: 200}
  - key: path
    rate_limit: {unit: day, requests_per_unit: 1000}
  - key: auth
    value: 'false'
    descriptors:
      - key: remote_address
        rate_limit: {unit: minute, requests_per_unit: 3}
      - key: remote_address
        value: 10.0.0.1
        rate_limit: {unlimited: true}
  - key: tenant
    rate_limit: {unit: week, requests_per_unit: 7}
    descriptors:
      - key: user
        rate_limit: {unit: month, requests_per_unit: 30}
";

fn limit(c: &Config, entries: &[(&str, &str)]) -> Option<u32> {
    c.lookup("api", entries).map(|r| r.requests_per_unit)
}

// TestBasicConfig, TestWildcardConfig
#[test]
fn matching_order_exact_then_wildcard_in_file_order_then_key_only() {
    let c = one(BASIC);
    assert_eq!(limit(&c, &[("remote_address", "1.2.3.4")]), Some(10));
    assert_eq!(limit(&c, &[("path", "/login")]), Some(5));
    // the first wildcard in file order wins, even if a later one is longer
    assert_eq!(limit(&c, &[("path", "/v1/users")]), Some(100));
    assert_eq!(limit(&c, &[("path", "/v2/users")]), Some(200));
    // key only, for any other value (the empty one too)
    assert_eq!(limit(&c, &[("path", "/other")]), Some(1000));
    assert_eq!(limit(&c, &[("path", "")]), Some(1000));
    // nested, exact value over the key-only sibling
    assert_eq!(
        limit(&c, &[("auth", "false"), ("remote_address", "9.9.9.9")]),
        Some(3)
    );
    let r = c.lookup("api", &[("auth", "false"), ("remote_address", "10.0.0.1")]);
    assert!(r.is_some_and(|r| r.unlimited));
    // the unit is read in any case; its period in microseconds
    let login = c.lookup("api", &[("path", "/login")]).unwrap();
    assert_eq!(login.unit, Some(Unit::Minute));
    assert_eq!(login.period_us, 60_000_000);
    assert_eq!(login.name, "login");
    assert_eq!(login.full_key, "api.path_/login");
    assert_eq!(login.file, "t.yaml");
    assert_eq!(login.strategy, None);
    let user = c.lookup("api", &[("tenant", "a"), ("user", "b")]).unwrap();
    assert_eq!(user.period_us, 30 * 86_400 * 1_000_000);
    assert_eq!(user.full_key, "api.tenant.user");
    assert_eq!(
        c.lookup("api", &[("tenant", "a")]).unwrap().period_us,
        7 * 86_400 * 1_000_000
    );
}

// TestBasicConfig: "request depth does not match config depth", unknown
// domain, no match
#[test]
fn a_limit_applies_only_where_the_last_entry_lands() {
    let c = one(BASIC);
    // longer than the configured path: no limit
    assert_eq!(
        limit(&c, &[("remote_address", "1.2.3.4"), ("x", "y")]),
        None
    );
    // shorter: `auth` has no limit of its own
    assert_eq!(limit(&c, &[("auth", "false")]), None);
    // no match at the first level, or at the second
    assert_eq!(limit(&c, &[("nope", "x")]), None);
    assert_eq!(
        limit(&c, &[("auth", "true"), ("remote_address", "1")]),
        None
    );
    assert_eq!(limit(&c, &[]), None);
    assert!(c.lookup("other", &[("remote_address", "1")]).is_none());
    // a node with a limit and children: its limit at its depth, the
    // children's at theirs
    assert_eq!(limit(&c, &[("tenant", "a"), ("user", "b")]), Some(30));
    assert_eq!(limit(&c, &[("tenant", "a"), ("other", "b")]), None);
}

// TestWildcardConfig (middle and multiple `*`)
#[test]
fn wildcards_anywhere_in_the_value() {
    let c = one("
domain: d
descriptors:
  - key: p
    value: /api*v1
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: p
    value: svc*ep*rpc
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: q
    value: '*'
    rate_limit: {unit: second, requests_per_unit: 3}
");
    let l = |e: &[(&str, &str)]| c.lookup("d", e).map(|r| r.requests_per_unit);
    assert_eq!(l(&[("p", "/api/v1")]), Some(1));
    assert_eq!(l(&[("p", "/apiv1")]), Some(1));
    assert_eq!(l(&[("p", "/api/v2")]), None);
    assert_eq!(l(&[("p", "svc-a-ep-b-rpc")]), Some(2));
    assert_eq!(l(&[("p", "svc-rpc-ep")]), None);
    // `*` alone matches every value, the empty one too (`q_` starts with `q_`)
    assert_eq!(l(&[("q", "")]), Some(3));
    assert_eq!(l(&[("q", "anything")]), Some(3));
    assert!(!wildcard_match(&["ab".into(), "ba".into()], "aba"));
    assert!(wildcard_match(&["a".into()], "a"));
}

// TestDetailedMetric, TestValueToMetric_*, TestShareThreshold
#[test]
fn metric_keys_and_shared_wildcard_counters() {
    let c = one("
domain: d
descriptors:
  - key: ip
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: {unit: second, requests_per_unit: 2}
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: svc
    value: s*
    descriptors:
      - key: ep
        rate_limit: {unit: minute, requests_per_unit: 4}
");
    let m = c.lookup_match("d", &[("ip", "10.0.0.1")]).unwrap();
    assert_eq!(m.metric_key, "d.ip_10.0.0.1");
    assert_eq!(m.rule.full_key, "d.ip");
    let m = c
        .lookup_match("d", &[("route", "/a"), ("method", "GET")])
        .unwrap();
    assert_eq!(m.metric_key, "d.route_/a.method");
    let m = c.lookup_match("d", &[("files", "files/a.txt")]).unwrap();
    assert_eq!(m.shared_values, vec![Some("files/*".to_owned())]);
    assert_eq!(m.metric_key, "d.files_files/*");
    let m = c.lookup_match("d", &[("svc", "s1"), ("ep", "x")]).unwrap();
    assert_eq!(m.metric_key, "d.svc_s*.ep");
    assert_eq!(m.shared_values, vec![None, None]);
    let m = c.lookup_match("d", &[("ip", "")]).unwrap();
    assert_eq!(m.metric_key, "d.ip_");
}

// TestShadowModeConfig, TestMetadata, quota_mode
#[test]
fn flags_names_replaces_and_metadata_are_kept() {
    let c = one("
domain: d
descriptors:
  - key: a
    shadow_mode: yes
    quota_mode: true
    metadata:
      team: payments
      tier: 2
      tags: [x, y]
    rate_limit:
      unit: second
      requests_per_unit: 1
      name: a-limit
      replaces:
        - name: other
");
    let r = c.lookup("d", &[("a", "v")]).unwrap();
    assert!(r.shadow_mode && r.quota_mode && !r.detailed_metric);
    assert_eq!(r.replaces, vec!["other".to_owned()]);
    let md = r.metadata.as_ref().unwrap();
    assert_eq!(
        md.fields["team"].kind,
        Some(prost_types::value::Kind::StringValue("payments".into()))
    );
    assert_eq!(
        md.fields["tier"].kind,
        Some(prost_types::value::Kind::NumberValue(2.0))
    );
}

#[test]
fn scalars_are_read_as_yaml_v2_reads_them() {
    let c = one("
domain: 123
descriptors:
  - key: status
    value: 200
    rate_limit: {unit: second, requests_per_unit: 0x10}
  - key: flag
    value: yes
    rate_limit: {unit: second, requests_per_unit: 1_000}
  - key: empty
    value:
    rate_limit:
");
    assert_eq!(c.domains().collect::<Vec<_>>(), vec!["123"]);
    assert_eq!(
        c.lookup("123", &[("status", "200")])
            .unwrap()
            .requests_per_unit,
        16
    );
    assert_eq!(
        c.lookup("123", &[("flag", "yes")])
            .unwrap()
            .requests_per_unit,
        1000
    );
    // `value:` empty is key-only; `rate_limit:` empty is no limit
    assert!(c.lookup("123", &[("empty", "x")]).is_none());
    assert_eq!(c.rules("123").len(), 2);
}

// TestUnlimitedWithRateLimitUnit (and what Go lets through beside it)
#[test]
fn unlimited() {
    rejects(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: day, requests_per_unit: 25}\n",
        "descriptors[0].rate_limit.unit",
        "takes no `unit`",
    );
    // accepted by Go: a count beside unlimited (ignored), a non-unit
    let c = one(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, requests_per_unit: 25, unit: foo}\n",
    );
    assert!(c.lookup("d", &[("a", "x")]).unwrap().unlimited);
    assert_eq!(c.warnings().len(), 1);
    rejects(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, strategy: gcra}\n",
        "descriptors[0].rate_limit.strategy",
        "takes no",
    );
}

// TestEmptyDomain, TestDuplicateDomain, TestDomainMerge,
// TestDuplicateKeyDomainMerge
#[test]
fn domains() {
    rejects("descriptors:\n", "domain", "non-empty `domain`");
    rejects("", "domain", "non-empty `domain`");
    rejects("domain: ''\n", "domain", "non-empty `domain`");
    let a = (
        "a.yaml",
        "domain: d\ndescriptors:\n  - key: k1\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    let b = (
        "b.yaml",
        "domain: d\ndescriptors:\n  - key: k2\n    rate_limit: {unit: second, requests_per_unit: 2}\n",
    );
    let e = load(&[a, b]).unwrap_err();
    assert_eq!((e.file.as_str(), e.path.as_str()), ("b.yaml", "domain"));
    assert!(e.message.contains("duplicate domain \"d\": a.yaml"), "{e}");
    let merged = Config::from_sources([a, b], LoadOptions::default().merge_domains(true)).unwrap();
    assert!(merged.lookup("d", &[("k1", "")]).is_some());
    assert!(merged.lookup("d", &[("k2", "")]).is_some());
    let e = Config::from_sources([a, a], LoadOptions::default().merge_domains(true)).unwrap_err();
    assert!(e.message.contains("duplicate descriptor"), "{e}");
}

// TestEmptyKey, TestDuplicateKey
#[test]
fn keys() {
    rejects(
        "domain: d\ndescriptors:\n  - value: v\n",
        "descriptors[0]",
        "non-empty `key`",
    );
    rejects(
        "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n",
        "descriptors[1]",
        "duplicate descriptor: key \"k\" with value \"v\"",
    );
    rejects(
        "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: k\n      - key: k\n",
        "descriptors[0].descriptors[1]",
        "composite key \"d.a.k\"",
    );
    // the same key with and without a value, or under two parents, is fine
    one(
        "domain: d\ndescriptors:\n  - key: k\n  - key: k\n    value: v\n  - key: a\n    descriptors: [{key: k}]\n",
    );
}

// TestBadLimitUnit
#[test]
fn units() {
    rejects(
        "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: fortnight, requests_per_unit: 5}\n",
        "descriptors[0].descriptors[0].rate_limit.unit",
        "unknown unit \"fortnight\"",
    );
    rejects(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 5}\n",
        "descriptors[0].rate_limit.unit",
        "unknown unit \"\"",
    );
    rejects(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: unknown, requests_per_unit: 5}\n",
        "descriptors[0].rate_limit.unit",
        "unknown unit",
    );
    for u in ["second", "MINUTE", "Hour", "day", "week", "month", "year"] {
        one(&format!(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{unit: {u}, requests_per_unit: 1}}\n"
        ));
    }
    let e = reject("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n");
    assert_eq!(e.line, 5);
    assert!(
        e.to_string()
            .starts_with("t.yaml: descriptors[0].rate_limit.unit: unknown unit \"fortnight\""),
        "{e}"
    );
}

// TestReplacesSelf, TestReplacesEmpty
#[test]
fn replaces() {
    rejects(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: self, replaces: [{name: self}]}\n",
        "descriptors[0].rate_limit.replaces[0].name",
        "cannot replace itself",
    );
    rejects(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      name: self\n      replaces:\n        - name:\n",
        "descriptors[0].rate_limit.replaces[0]",
        "non-empty `name`",
    );
}

// TestBadYaml, TestMisspelledKey, TestNonStringKey, TestNonMapList
#[test]
fn malformed_files() {
    let e = reject("'''");
    assert!(e.message.starts_with("not valid YAML"), "{e}");
    rejects(
        "domain: d\ndescriptors:\n  - key: a\n    ratelimit: {unit: day}\n",
        "descriptors[0].ratelimit",
        "unknown key \"ratelimit\" (`rate_limit`?)",
    );
    rejects(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, requestsperunit: 5}\n",
        "descriptors[0].rate_limit.requestsperunit",
        "unknown key",
    );
    rejects("0.25: d\ndescriptors:\n", "", "is not a string");
    rejects("domain: d\n1: x\n", "", "is not a string");
    rejects(
        "domain: d\ndescriptors:\n  - a\n  - b\n",
        "descriptors[0]",
        "only mappings",
    );
    rejects("- domain: d\n", "", "must be a mapping");
    // yaml.v2 reads these as floats, which Go's key check rejects
    rejects(
        "domain: d\ndescriptors:\n  - key: a\n    value: 1.5\n",
        "descriptors[0].value",
        "floating-point",
    );
    // and cannot put these in their fields
    rejects(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: '5'}\n",
        "descriptors[0].rate_limit.requests_per_unit",
        "whole number",
    );
    rejects(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n",
        "descriptors[0].rate_limit.requests_per_unit",
        "from 0 to 4294967295",
    );
    rejects(
        "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: 1\n",
        "descriptors[0].shadow_mode",
        "true or false",
    );
    rejects(
        "domain: d\ndescriptors:\n  - key: a\n    metadata: text\n",
        "descriptors[0].metadata",
        "mapping",
    );
    rejects(
        "domain: d\ndescriptors: {key: a}\n",
        "descriptors",
        "list of mappings",
    );
    rejects("domain: [d]\n", "domain[0]", "only mappings");
    // metadata's keys are free
    one("domain: d\ndescriptors:\n  - key: a\n    metadata: {anything: [1, 2.5, {x: y}]}\n");
}

// TestShareThreshold: only on wildcard values
#[test]
fn share_threshold_needs_a_wildcard() {
    rejects(
        "domain: d\ndescriptors:\n  - key: a\n    value: v\n    share_threshold: true\n",
        "descriptors[0].share_threshold",
        "needs a wildcard",
    );
}

#[test]
fn ignored_as_go_ignores_them_with_warnings() {
    let c = one("
domain: d
unit: second
descriptors:
  - key: a
    requests_per_unit: 3
    rate_limit: {unit: second, requests_per_unit: 1, shadow_mode: true}
    key: b
---
domain: e
");
    let r = c.lookup("d", &[("b", "x")]).unwrap();
    assert!(!r.shadow_mode);
    let paths: Vec<_> = c.warnings().iter().map(|w| w.path.as_str()).collect();
    assert_eq!(
        paths,
        vec![
            "",
            "",
            "unit",
            "descriptors[0].requests_per_unit",
            "descriptors[0].rate_limit.shadow_mode"
        ],
        "{:?}",
        c.warnings()
    );
    assert!(c.lookup("e", &[]).is_none());
    assert!(c.warnings()[0].message.contains("twice"));
    assert!(c.warnings()[1].message.contains("first YAML document"));
}

#[test]
fn anchors_and_merge_keys() {
    let c = one("
domain: d
descriptors:
  - key: a
    rate_limit: &per_minute {unit: minute, requests_per_unit: 5}
  - key: b
    rate_limit:
      <<: *per_minute
      requests_per_unit: 7
");
    assert_eq!(c.lookup("d", &[("a", "")]).unwrap().requests_per_unit, 5);
    let b = c.lookup("d", &[("b", "")]).unwrap();
    assert_eq!((b.requests_per_unit, b.unit), (7, Some(Unit::Minute)));
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
}

#[test]
fn extensions() {
    let c = one("
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 10, strategy: gcra, burst: 3}
  - key: b
    rate_limit: {duration: 90s, requests_per_unit: 10, strategy: sliding-window-log}
  - key: c
    rate_limit: {duration: 2 hours, requests_per_unit: 1}
");
    let a = c.lookup("d", &[("a", "")]).unwrap();
    assert_eq!(a.period_us, 300_000_000);
    assert_eq!((a.unit, a.unit_multiplier), (Some(Unit::Minute), 5));
    assert_eq!((a.strategy, a.burst), (Some(Strategy::Gcra), Some(3)));
    let b = c.lookup("d", &[("b", "")]).unwrap();
    assert_eq!((b.unit, b.period_us), (None, 90_000_000));
    assert_eq!(b.strategy, Some(Strategy::SlidingWindowLog));
    assert_eq!(
        c.lookup("d", &[("c", "")]).unwrap().period_us,
        7_200_000_000
    );
    let rl =
        |body: &str| format!("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{{body}}}\n");
    rejects(
        &rl("unit: second, strategy: gcar"),
        "descriptors[0].rate_limit.strategy",
        "token-bucket",
    );
    rejects(
        &rl("unit: second, strategy: concurrency"),
        "descriptors[0].rate_limit.strategy",
        "no release",
    );
    rejects(
        &rl("unit: second, burst: 2"),
        "descriptors[0].rate_limit.burst",
        "gcra",
    );
    rejects(
        &rl("unit: second, strategy: fixed-window, burst: 2"),
        "descriptors[0].rate_limit.burst",
        "takes one",
    );
    rejects(
        &rl("unit: second, burst: 0, strategy: gcra"),
        "descriptors[0].rate_limit.burst",
        "at least 1",
    );
    rejects(
        &rl("unit: second, unit_multiplier: 0"),
        "descriptors[0].rate_limit.unit_multiplier",
        "at least 1",
    );
    rejects(
        &rl("unit: year, unit_multiplier: 4294967295"),
        "descriptors[0].rate_limit.unit_multiplier",
        "longer than 366 days",
    );
    rejects(
        &rl("unit: second, duration: 5s"),
        "descriptors[0].rate_limit.unit",
        "either",
    );
    rejects(
        &rl("duration: 5s, unit_multiplier: 2"),
        "descriptors[0].rate_limit.unit_multiplier",
        "goes with `unit`",
    );
    rejects(
        &rl("duration: fortnight"),
        "descriptors[0].rate_limit.duration",
        "not a duration",
    );
    rejects(
        &rl("duration: 0s"),
        "descriptors[0].rate_limit.duration",
        "at least one microsecond",
    );
    // outside `rate_limit`, an extension is an error (Go rejects it as unknown)
    rejects(
        "domain: d\ndescriptors:\n  - key: a\n    strategy: gcra\n",
        "descriptors[0].strategy",
        "belongs in a `rate_limit`",
    );
}

#[test]
fn load_dir_reads_yaml_files_recursively_and_skips_dot_names() {
    let dir = std::env::temp_dir().join(format!("trl-server-config-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::create_dir_all(dir.join("..data")).unwrap();
    let file = |d: &str| {
        format!(
            "domain: {d}\ndescriptors:\n  - key: k\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
        )
    };
    std::fs::write(dir.join("a.yaml"), file("a")).unwrap();
    std::fs::write(dir.join("sub/b.yml"), file("b")).unwrap();
    std::fs::write(dir.join("..data/a.yaml"), file("a")).unwrap();
    std::fs::write(dir.join("notes.txt"), "not yaml: [").unwrap();
    let c = Config::load_dir(&dir, LoadOptions::default()).unwrap();
    assert_eq!(c.domains().collect::<Vec<_>>(), vec!["a", "b"]);
    std::fs::write(
        dir.join("sub/c.yaml"),
        "domain: c\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n",
    )
    .unwrap();
    let e = Config::load_dir(&dir, LoadOptions::default()).unwrap_err();
    assert_eq!(e.file, format!("sub{}c.yaml", std::path::MAIN_SEPARATOR));
    assert_eq!(e.path, "descriptors[0].rate_limit.unit");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn failure_policy_extension() {
    let c = one("domain: a\nfailure_policy: Deny\ndescriptors: []\n");
    assert_eq!(c.failure_policy("a"), Some(OnStoreError::Deny));
    assert_eq!(c.failure_policy("b"), None);
    let c = one("domain: a\ndescriptors: []\n");
    assert_eq!(c.failure_policy("a"), None);
    for (text, p) in [
        ("allow", OnStoreError::Allow),
        ("' unavailable '", OnStoreError::Unavailable),
    ] {
        let c = one(&format!("domain: a\nfailure_policy: {text}\n"));
        assert_eq!(c.failure_policy("a"), Some(p));
    }
    for bad in ["open", "''", "true", "1", "{}"] {
        let e = reject(&format!("domain: a\nfailure_policy: {bad}\n"));
        assert_eq!(
            (e.file.as_str(), e.path.as_str()),
            ("t.yaml", "failure_policy"),
            "{e}"
        );
        assert_eq!(e.line, 2, "{e}");
    }
    rejects(
        "domain: a\ndescriptors:\n  - key: k\n    failure_policy: allow\n",
        "descriptors[0].failure_policy",
        "belongs at the top of a file",
    );
    rejects(
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, failure_policy: allow}\n",
        "descriptors[0].rate_limit.failure_policy",
        "belongs at the top of a file",
    );
    // merged domains may repeat it, not disagree
    let merge = LoadOptions::default().merge_domains(true);
    let files = [
        ("x.yaml", "domain: a\nfailure_policy: allow\n"),
        ("y.yaml", "domain: a\nfailure_policy: allow\n"),
        ("z.yaml", "domain: a\n"),
    ];
    let c = Config::from_sources(files, merge).expect("same policy");
    assert_eq!(c.failure_policy("a"), Some(OnStoreError::Allow));
    let files = [
        ("x.yaml", "domain: a\nfailure_policy: allow\n"),
        ("y.yaml", "domain: a\nfailure_policy: deny\n"),
    ];
    let e = Config::from_sources(files, merge).expect_err("disagree");
    assert_eq!(
        (e.file.as_str(), e.path.as_str()),
        ("y.yaml", "failure_policy")
    );
    assert!(e.message.contains("x.yaml"), "{e}");
}

/// The ids of every rule of `domain`, by full key and path.
fn ids(c: &Config, domain: &str) -> Vec<(String, String, String)> {
    let mut v: Vec<_> = c
        .rules(domain)
        .into_iter()
        .map(|r| (r.path.clone(), r.full_key.clone(), r.id.clone()))
        .collect();
    v.sort();
    v
}

// issue 34, point 3: the dotted full key is ambiguous, the id is not
#[test]
fn rules_sharing_a_dotted_full_key_have_distinct_ids() {
    let c = one("
domain: d
descriptors:
  - key: b
    descriptors:
      - key: c
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: b.c
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: k
    value: v1.2
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: k
    value: v1
    descriptors:
      - key: '2'
        rate_limit: {unit: minute, requests_per_unit: 4}
");
    assert_eq!(
        ids(&c, "d"),
        [
            (
                "descriptors[0].descriptors[0].rate_limit",
                "d.b.c",
                "1:b1:c"
            ),
            ("descriptors[1].rate_limit", "d.b.c", "3:b.c"),
            ("descriptors[2].rate_limit", "d.k_v1.2", "6:k_v1.2"),
            (
                "descriptors[3].descriptors[0].rate_limit",
                "d.k_v1.2",
                "4:k_v11:2"
            ),
        ]
        .map(|(p, k, i)| (p.to_owned(), k.to_owned(), i.to_owned()))
    );
    // each found by its own path, with its own limit
    assert_eq!(
        c.lookup("d", &[("b", "x"), ("c", "y")])
            .unwrap()
            .requests_per_unit,
        2
    );
    assert_eq!(
        c.lookup("d", &[("b.c", "y")]).unwrap().requests_per_unit,
        1000
    );
    assert_eq!(
        c.lookup("d", &[("k", "v1.2")]).unwrap().requests_per_unit,
        3
    );
    assert_eq!(
        c.lookup("d", &[("k", "v1"), ("2", "")])
            .unwrap()
            .requests_per_unit,
        4
    );
    // the rule's line is its `rate_limit`'s
    let lines: Vec<_> = {
        let mut r = c.rules("d");
        r.sort_by_key(|r| r.line);
        r.iter().map(|r| (r.line, r.requests_per_unit)).collect()
    };
    assert_eq!(lines, [(7, 2), (9, 1000), (12, 3), (17, 4)]);
    assert!(c.rules("d").iter().all(|r| r.file == "t.yaml"));
}

#[test]
fn rule_ids_depend_only_on_the_node_path() {
    let src = "
domain: d
descriptors:
  - key: path
    value: /login
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: tenant
    descriptors:
      - key: user_id
        rate_limit: {unit: hour, requests_per_unit: 7}
";
    let first = ids(&one(src), "d");
    assert_eq!(first, ids(&one(src), "d"), "the same file, the same ids");
    assert_eq!(first[0].2, "11:path_/login");
    assert_eq!(first[1].2, "6:tenant7:user_id");
    // other rules before them, other limits, a merged second file: the
    // same ids
    let moved = "
domain: d
descriptors:
  - key: other
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: tenant
    descriptors:
      - key: user_id
        rate_limit: {unit: day, requests_per_unit: 70, strategy: gcra}
";
    let more = "
domain: d
descriptors:
  - key: path
    value: /login
    rate_limit: {unit: minute, requests_per_unit: 50}
";
    let merge = LoadOptions::default().merge_domains(true);
    let c = Config::from_sources([("a.yaml", moved), ("b.yaml", more)], merge).unwrap();
    let by_key = |c: &Config, key: &str| {
        c.rules("d")
            .into_iter()
            .find(|r| r.full_key == key)
            .map(|r| r.id.clone())
    };
    assert_eq!(
        by_key(&c, "d.path_/login").as_deref(),
        Some("11:path_/login")
    );
    assert_eq!(
        by_key(&c, "d.tenant.user_id").as_deref(),
        Some("6:tenant7:user_id")
    );
    // a multi-byte key is counted in bytes
    let c = one(
        "domain: d\ndescriptors:\n  - key: é\n    value: ü\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    assert_eq!(c.rules("d")[0].id, "5:é_ü");
}

// issue 34, point 10: Go's GetLimit joins key and value with `_`
#[test]
fn matching_joins_key_and_value_with_an_underscore_as_go_does() {
    let c = one("
domain: d
descriptors:
  - key: a
    value: b_c
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: x_y
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: x
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: x
    value: '*'
    rate_limit: {unit: minute, requests_per_unit: 4}
");
    // two requests that join alike reach the one rule
    let one_rule = c.lookup("d", &[("a", "b_c")]).unwrap();
    let other = c.lookup("d", &[("a_b", "c")]).unwrap();
    assert!(std::ptr::eq(one_rule, other));
    assert_eq!(one_rule.id, "5:a_b_c");
    // `(x, y)` joins to `x_y`: the key-only node `x_y`, before the
    // wildcard and the key-only `x`
    assert_eq!(c.lookup("d", &[("x", "y")]).unwrap().requests_per_unit, 2);
    assert_eq!(c.lookup("d", &[("x", "z")]).unwrap().requests_per_unit, 4);
    // and `(x_y, v)` joins to `x_y_v`, which the wildcard `x_*` matches
    // before the key-only `x_y` is tried
    assert_eq!(c.lookup("d", &[("x_y", "v")]).unwrap().requests_per_unit, 4);
    // and a `key: a_b, value: c` beside `key: a, value: b_c` is one node twice
    rejects(
        "domain: d\ndescriptors:\n  - key: a\n    value: b_c\n  - key: a_b\n    value: c\n",
        "descriptors[1]",
        "duplicate descriptor",
    );
}

// issue 34, point 8: the period's maximum, with the path and line
#[test]
fn a_period_is_at_most_366_days_named_at_its_field_and_line() {
    let rl = |body: &str| {
        format!(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      requests_per_unit: 1\n{body}"
        )
    };
    assert_eq!(
        one(&rl("      unit: year\n")).rules("d")[0].period_us,
        365 * 86_400 * 1_000_000
    );
    for ok in [
        "      unit: day\n      unit_multiplier: 366\n",
        "      unit: hour\n      unit_multiplier: 8784\n",
        "      duration: 366d\n",
        "      duration: 8784 hours\n",
    ] {
        let c = one(&rl(ok));
        assert_eq!(c.rules("d")[0].period_us, 366 * 86_400 * 1_000_000, "{ok}");
    }
    for (body, field, line) in [
        (
            "      unit: year\n      unit_multiplier: 2\n",
            "unit_multiplier",
            7,
        ),
        (
            "      unit: day\n      unit_multiplier: 367\n",
            "unit_multiplier",
            7,
        ),
        (
            "      unit_multiplier: 53\n      unit: week\n",
            "unit_multiplier",
            6,
        ),
        ("      duration: 367d\n", "duration", 6),
        ("      duration: 8785 hours\n", "duration", 6),
        ("      duration: 100000d\n", "duration", 6),
    ] {
        let e = reject(&rl(body));
        assert_eq!(e.path, format!("descriptors[0].rate_limit.{field}"), "{e}");
        assert_eq!(e.line, line, "{e}");
        assert!(e.message.contains("366 days"), "{e}");
    }
}

// issue 34, point 8: what the library rejects at build, rejected by the
// loader with the path and line
#[test]
fn what_the_library_rejects_is_rejected_at_its_field_and_line() {
    let rl = |body: &str| {
        format!("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n{body}")
    };
    for (body, field, line, msg) in [
        (
            "      requests_per_unit: 10001\n      strategy: sliding-window-log\n",
            "requests_per_unit",
            6,
            "at most 10000",
        ),
        (
            "      requests_per_unit: 4294967295\n      strategy: token-bucket\n      burst: 1099511627777\n",
            "burst",
            8,
            "at most 1099511627776",
        ),
        (
            "      unit_multiplier: 86400\n      requests_per_unit: 1\n      strategy: gcra\n      burst: 1465\n",
            "burst",
            9,
            "to refill",
        ),
        (
            "      requests_per_unit: 1\n      burst: 5\n",
            "burst",
            7,
            "takes one",
        ),
        (
            "      requests_per_unit: 1\n      strategy: fixed-window\n      burst: 5\n",
            "burst",
            8,
            "takes one",
        ),
    ] {
        let e = reject(&rl(body));
        assert_eq!(
            e.path,
            format!("descriptors[0].rate_limit.{field}"),
            "{body}: {e}"
        );
        assert_eq!(e.line, line, "{e}");
        assert!(e.message.contains(msg), "{e}");
    }
    // at the bounds: accepted (no limiter is built for zero requests or
    // an unlimited rule, so nothing is checked there)
    for body in [
        "      requests_per_unit: 10000\n      strategy: sliding-window-log\n",
        "      requests_per_unit: 0\n      strategy: sliding-window-log\n      unit_multiplier: 2\n",
        "      requests_per_unit: 4294967295\n      strategy: token-bucket\n      burst: 1099511627776\n",
        "      unit_multiplier: 86400\n      requests_per_unit: 1\n      strategy: gcra\n      burst: 1464\n",
    ] {
        one(&rl(body));
    }
}

/// The loader accepts a rule exactly when the library builds the quota the
/// service makes of it (a fixed window aligned to the epoch without a
/// `strategy`), over every strategy and the bounds of period, count and
/// burst; an accepted one builds a service.
#[test]
fn the_loader_accepts_a_rule_exactly_when_the_library_builds_it() {
    use std::time::Duration;
    use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimiter};
    let day = 86_400_000_000u64;
    let periods = [
        ("unit: second", 1_000_000),
        ("unit: year", 365 * day),
        ("unit: day, unit_multiplier: 366", 366 * day),
        ("unit: day, unit_multiplier: 367", 367 * day),
        ("unit: year, unit_multiplier: 2", 730 * day),
        ("duration: 1us", 1),
        ("duration: 366d", 366 * day),
        ("duration: 366d 1us", 366 * day + 1),
    ];
    let counts = [1u64, 3, 10_000, 10_001, u64::from(u32::MAX)];
    let mut strategies = vec![None];
    strategies.extend(
        Strategy::ALL
            .into_iter()
            .filter(|s| *s != Strategy::Concurrency)
            .map(Some),
    );
    let bursts = [
        None,
        Some(1u64),
        Some(3),
        Some(1 << 40),
        Some((1 << 40) + 1),
        Some(u64::MAX),
    ];
    let (mut accepted, mut rejected) = (0, 0);
    for (period, period_us) in periods {
        for count in counts {
            for strategy in &strategies {
                for burst in bursts {
                    let mut body = format!("{period}, requests_per_unit: {count}");
                    if let Some(s) = strategy {
                        body.push_str(&format!(", strategy: {s}"));
                    }
                    if let Some(b) = burst {
                        body.push_str(&format!(", burst: {b}"));
                    }
                    let src = format!(
                        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{{body}}}\n"
                    );
                    let rate = Rate::new(count, Duration::from_micros(period_us));
                    let mut quota = match strategy {
                        None => Quota::fixed_window(rate).aligned(),
                        Some(s) => Quota::new(*s, rate),
                    };
                    if let Some(b) = burst {
                        quota = quota.burst(b);
                    }
                    let library = RateLimiter::builder()
                        .store(MemoryStore::with_shards(1))
                        .prefix("t")
                        .quota(quota.name("a"))
                        .build();
                    match (load(&[("t.yaml", &src)]), library) {
                        (Ok(c), Ok(_)) => {
                            accepted += 1;
                            crate::service::RlsService::new(
                                c,
                                MemoryStore::with_shards(1),
                                crate::service::ServiceOptions::default(),
                            )
                            .unwrap_or_else(|e| panic!("{body}: {e}"));
                        }
                        (Err(e), Err(_)) => {
                            rejected += 1;
                            assert!(
                                e.path.starts_with("descriptors[0].rate_limit."),
                                "{body}: {e}"
                            );
                            assert!(e.line > 0, "{body}: {e}");
                        }
                        (Ok(_), Err(e)) => {
                            panic!("{body}: loaded, and the library rejects it: {e}")
                        }
                        (Err(e), Ok(_)) => {
                            panic!("{body}: rejected, and the library builds it: {e}")
                        }
                    }
                }
            }
        }
    }
    assert!(
        accepted > 100 && rejected > 100,
        "{accepted} accepted, {rejected} rejected"
    );
}

// issue 34, point 6
#[test]
fn a_configuration_tells_whether_it_has_rules() {
    let c = load(&[]).unwrap();
    assert!(c.is_empty());
    assert_eq!(c.rule_count(), 0);
    let c = one("domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n");
    assert!(c.is_empty(), "a domain without a `rate_limit`");
    assert_eq!(c.domains().count(), 1);
    let c = one(BASIC);
    assert_eq!(c.rule_count(), 9);
    assert!(!c.is_empty());
    let dir = std::env::temp_dir().join(format!("trl-server-empty-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), "domain: x\n").unwrap();
    assert!(
        Config::load_dir(&dir, LoadOptions::default())
            .unwrap()
            .is_empty()
    );
    // a mistyped directory is an error, and not one of the machine
    let e = Config::read_dir(&dir.join("missing")).unwrap_err();
    assert!(!e.transient, "{e}");
    assert!(e.message.contains("cannot read"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn io_errors_of_the_machine_are_transient_those_of_the_files_not() {
    use std::io::{Error, ErrorKind};
    let dir = std::env::temp_dir().join(format!("trl-server-io-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let here = dir.as_path();
    #[cfg(unix)]
    {
        // EMFILE, ENFILE
        assert!(is_transient(here, &Error::from_raw_os_error(24)));
        assert!(is_transient(here, &Error::from_raw_os_error(23)));
        // EACCES, EISDIR
        assert!(!is_transient(here, &Error::from_raw_os_error(13)));
        assert!(!is_transient(here, &Error::from_raw_os_error(21)));
    }
    for kind in [
        ErrorKind::Interrupted,
        ErrorKind::OutOfMemory,
        ErrorKind::WouldBlock,
    ] {
        assert!(is_transient(here, &Error::from(kind)), "{kind:?}");
    }
    for kind in [ErrorKind::PermissionDenied, ErrorKind::InvalidData] {
        assert!(!is_transient(here, &Error::from(kind)), "{kind:?}");
    }
    // gone since it was listed: transient; a link to nothing: not
    let gone = dir.join("gone.yaml");
    assert!(is_transient(&gone, &Error::from(ErrorKind::NotFound)));
    #[cfg(unix)]
    {
        let link = dir.join("dangling.yaml");
        std::os::unix::fs::symlink(dir.join("nothing"), &link).unwrap();
        assert!(!is_transient(&link, &Error::from(ErrorKind::NotFound)));
        let e = Config::read_dir(&dir).unwrap_err();
        assert_eq!(e.file, "dangling.yaml");
        assert!(!e.transient, "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn strategy_and_duration_errors_name_what_is_accepted_in_the_files_words() {
    let e = reject(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, strategy: concurrent}\n",
    );
    assert!(e.message.contains("unknown strategy \"concurrent\""), "{e}");
    assert!(!e.message.contains("concurrency"), "{e}");
    let e = reject(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {duration: -1s, requests_per_unit: 1}\n",
    );
    assert!(e.message.contains("\"-1s\" is not a duration"), "{e}");
    assert!(!e.message.contains("rate"), "{e}");
}
