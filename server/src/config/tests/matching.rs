//! Matching, as the Go service's `GetLimit` does: the order of exact
//! values, wildcards and keys alone, where a limit applies, the metric
//! keys, and the rules' ids.

use super::*;
use crate::config::lookup::wildcard_match;

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
