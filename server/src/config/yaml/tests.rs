//! The reader: YAML 1.1 scalars, anchors and merge keys, the first
//! document only, and the bounds on nesting and aliases.

use super::*;

const LIMITS: Limits = Limits::DEFAULT;

fn root(src: &str) -> Node {
    match parse(src, LIMITS) {
        Ok(Document { root: Some(n), .. }) => n,
        other => panic!("{other:?}"),
    }
}

#[test]
fn yaml_1_1_scalars_as_yaml_v2_reads_them() {
    for (s, want) in [
        ("yes", Scalar::Bool(true)),
        ("Off", Scalar::Bool(false)),
        ("~", Scalar::Null),
        ("12", Scalar::Int(12)),
        ("1_000", Scalar::Int(1000)),
        ("0x1F", Scalar::Int(31)),
        ("010", Scalar::Int(8)),
        ("-3", Scalar::Int(-3)),
        ("1.5", Scalar::Float(1.5)),
        ("1e3", Scalar::Float(1000.0)),
        ("1.2.3", Scalar::Str("1.2.3")),
        ("value*", Scalar::Str("value*")),
        ("0xZZ", Scalar::Str("0xZZ")),
    ] {
        assert_eq!(resolve_plain(s), want, "{s}");
    }
    let n = root("a: 'yes'");
    let Kind::Map(e) = &n.kind else { panic!() };
    assert_eq!(e[0].1.scalar(), Some(Scalar::Str("yes")));
}

#[test]
fn anchors_merge_keys_and_duplicates() {
    let d = parse(
        "base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  y: 3\nc: 4\n",
        LIMITS,
    )
    .unwrap();
    let Some(Node {
        kind: Kind::Map(e), ..
    }) = d.root
    else {
        panic!()
    };
    assert_eq!(e.len(), 2);
    assert_eq!(e[1].1.text(), Some("4"));
    assert_eq!(d.duplicates, vec![(5, "c".to_owned())]);
    let d = parse("c:\n  <<: {x: 1, y: 2}\n  y: 3\n", LIMITS).unwrap();
    let Some(Node {
        kind: Kind::Map(e), ..
    }) = d.root
    else {
        panic!()
    };
    let Kind::Map(c) = &e[0].1.kind else { panic!() };
    let got: Vec<_> = c
        .iter()
        .map(|(k, v)| (k.text().unwrap(), v.text().unwrap()))
        .collect();
    assert_eq!(got, vec![("x", "1"), ("y", "3")]);
}

#[test]
fn first_document_only() {
    let d = parse("a: 1\n---\nb: 2\n", LIMITS).unwrap();
    assert!(d.more_documents);
    assert!(d.root.is_some());
    assert!(parse("", LIMITS).unwrap().root.is_none());
    assert!(parse("'''", LIMITS).is_err());
}

/// Nested aliases, `levels` deep, each level a list of `width` aliases
/// of the one below: `width^levels` scalars once expanded.
pub(crate) fn laughs(levels: usize, width: usize) -> String {
    let mut s = String::from("l0: &a0 [");
    s.push_str(&vec!["lol"; width].join(","));
    s.push_str("]\n");
    for i in 1..levels {
        s.push_str(&format!("l{i}: &a{i} ["));
        s.push_str(&vec![format!("*a{}", i - 1); width].join(","));
        s.push_str("]\n");
    }
    s
}

fn bound(src: &str, limits: Limits) -> SyntaxError {
    match parse(src, limits) {
        Err(e) if e.bound => e,
        other => panic!("{other:?}"),
    }
}

#[test]
fn nested_aliases_are_refused_before_they_expand() {
    let src = laughs(9, 9);
    let started = std::time::Instant::now();
    let e = bound(&src, LIMITS);
    assert!(e.message.contains("aliases"), "{}", e.message);
    assert!(e.message.contains("excessive aliasing"), "{}", e.message);
    // (a copy of 9^9 nodes would take minutes and gigabytes)
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    // what stays within the allowance is read: 9^3 scalars
    let d = parse(&laughs(4, 9), LIMITS).unwrap();
    let Some(Node {
        kind: Kind::Map(e), ..
    }) = d.root
    else {
        panic!()
    };
    assert_eq!(e.len(), 4);
}

#[test]
fn the_alias_budget_is_the_file_size_plus_the_allowance() {
    // the anchored list weighs 1 + 2 × (10 + 1): charged when anchored
    // and at each of the 5 aliases
    let src = "a: &x [aaaaaaaaaa, bbbbbbbbbb]\nb: [*x, *x, *x, *x, *x]\n";
    let charge = 23 * 6;
    let exact = Limits {
        max_depth: 8,
        alias_allowance: charge - src.len(),
    };
    assert!(parse(src, exact).is_ok());
    let less = Limits {
        alias_allowance: exact.alias_allowance - 1,
        ..exact
    };
    let e = bound(src, less);
    assert_eq!(e.line, 2);
    // a merge key copies too
    let src = "d: &d {unit: minute, requests_per_unit: 5}\nx: {<<: *d}\n";
    let weight = 1 + 5 + 7 + 18 + 2;
    let exact = Limits {
        max_depth: 8,
        alias_allowance: 2 * weight - src.len(),
    };
    assert!(parse(src, exact).is_ok());
    let less = Limits {
        alias_allowance: exact.alias_allowance - 1,
        ..exact
    };
    bound(src, less);
}

#[test]
fn nesting_is_bounded_in_flow_and_block_style() {
    let e = bound(&"[".repeat(100_000), LIMITS);
    assert!(
        e.message.contains("nested more than 128 deep"),
        "{}",
        e.message
    );
    let e = bound(&"- ".repeat(100_000), LIMITS);
    assert!(e.message.contains("128"), "{}", e.message);
    let mut block = String::new();
    for i in 0..200 {
        block.push_str(&" ".repeat(i));
        block.push_str("k:\n");
    }
    let e = bound(&block, LIMITS);
    // (a mapping a line: the 129th starts on line 129)
    assert_eq!(e.line, 129);
    // 128 deep is read
    let src = format!("{}{}", "[".repeat(128), "]".repeat(128));
    assert!(parse(&src, LIMITS).is_ok());
    let src = format!("{}{}", "[".repeat(129), "]".repeat(129));
    bound(&src, LIMITS);
}

#[test]
fn a_mapping_of_many_keys_is_read_in_linear_time() {
    let mut src = String::new();
    for i in 0..100_000 {
        src.push_str(&format!("k{i}: {i}\n"));
    }
    src.push_str("k7: again\n0x10: a\n16: b\n'16': c\n~: d\nnull: e\n");
    let started = std::time::Instant::now();
    let d = parse(&src, LIMITS).unwrap();
    // (one comparison with every key before it would be 5 × 10^9)
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    let dups: Vec<_> = d.duplicates.iter().map(|(_, k)| k.as_str()).collect();
    // 16 is 0x10; the string '16' is another key; null is ~
    assert_eq!(dups, ["k7", "16", "null"]);
    let Some(Node {
        kind: Kind::Map(e), ..
    }) = d.root
    else {
        panic!()
    };
    assert_eq!(e.len(), 100_003);
    assert_eq!(e[7].1.text(), Some("again"));
}
