//! What the Go service accepts and rejects of a file, as it reads it:
//! flags and names kept, scalars as yaml.v2 reads them, domains, keys,
//! units, `replaces`, malformed files, what is ignored with a warning.

use super::*;

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
