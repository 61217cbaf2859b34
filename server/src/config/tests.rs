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
        "too long",
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
