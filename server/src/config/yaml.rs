//! A YAML document as a tree of nodes that keep each scalar's source text,
//! whether it was quoted and its line, so that the loader can read scalars
//! as envoyproxy/ratelimit's YAML library (`gopkg.in/yaml.v2`, YAML 1.1
//! resolution) does: `yes`/`on` are booleans there, `0x10` an integer, and a
//! string field takes any scalar's text as written.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

use super::Config;

/// One node of a document, with the (1-based) line it starts on.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub(crate) line: usize,
    pub(crate) kind: Kind,
}

/// What a node is.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    /// A scalar: its text, whether it was plain (not quoted nor a block),
    /// and whether a `!!str` tag forces it to be a string.
    Scalar {
        text: String,
        plain: bool,
        str_tag: bool,
    },
    Seq(Vec<Node>),
    /// Entries in document order (duplicate keys already resolved: the last
    /// one wins, as in yaml.v2; [`Document::duplicates`] lists them).
    Map(Vec<(Node, Node)>),
}

/// A scalar read with YAML 1.1's resolution rules (as yaml.v2 reads them).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scalar<'a> {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(&'a str),
}

impl Node {
    /// The scalar this node is, resolved as yaml.v2 does; `None` for a
    /// sequence or a mapping.
    pub(crate) fn scalar(&self) -> Option<Scalar<'_>> {
        match &self.kind {
            Kind::Scalar {
                text,
                plain,
                str_tag,
            } => Some(if *plain && !*str_tag {
                resolve_plain(text)
            } else {
                Scalar::Str(text)
            }),
            _ => None,
        }
    }

    /// The scalar's text as written (what yaml.v2 puts in a string field).
    pub(crate) fn text(&self) -> Option<&str> {
        match &self.kind {
            Kind::Scalar { text, .. } => Some(text),
            _ => None,
        }
    }

    /// A short name of the node's kind, for error messages.
    pub(crate) fn describe(&self) -> &'static str {
        match &self.kind {
            Kind::Seq(_) => "a list",
            Kind::Map(_) => "a mapping",
            Kind::Scalar { .. } => match self.scalar() {
                Some(Scalar::Null) => "null",
                Some(Scalar::Bool(_)) => "a boolean",
                Some(Scalar::Int(_)) => "an integer",
                Some(Scalar::Float(_)) => "a number with a fraction or an exponent",
                _ => "a string",
            },
        }
    }
}

/// YAML 1.1 resolution of a plain scalar, as `gopkg.in/yaml.v2` does it.
fn resolve_plain(s: &str) -> Scalar<'_> {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return Scalar::Null,
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "true" | "True" | "TRUE" => {
            return Scalar::Bool(true);
        }
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "false" | "False" | "FALSE" => {
            return Scalar::Bool(false);
        }
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Scalar::Float(f64::INFINITY);
        }
        "-.inf" | "-.Inf" | "-.INF" => return Scalar::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Scalar::Float(f64::NAN),
        _ => {}
    }
    let Some(first) = s.chars().next() else {
        return Scalar::Str(s);
    };
    if !matches!(first, '-' | '+' | '.' | '0'..='9') {
        return Scalar::Str(s);
    }
    let plain: String = s.chars().filter(|c| *c != '_').collect();
    if let Some(n) = parse_int(&plain) {
        return Scalar::Int(n);
    }
    if is_float(&plain)
        && let Ok(f) = plain.parse::<f64>()
    {
        return Scalar::Float(f);
    }
    Scalar::Str(s)
}

/// An integer as Go's `strconv.ParseInt(s, 0, 64)` (or `ParseUint`) reads
/// it: an optional sign, then decimal, `0x` hex, `0o`/`0` octal or `0b`
/// binary; at most 64 bits.
fn parse_int(s: &str) -> Option<i128> {
    let (neg, body) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = u64::from_str_radix(digits, radix).ok()?;
    let n = i128::from(magnitude);
    if neg {
        // ParseInt: down to i64::MIN
        (n <= i128::from(i64::MAX) + 1).then_some(-n)
    } else {
        Some(n)
    }
}

/// yaml.v2's float pattern: `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`.
fn is_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'-' | b'+')) {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            digits(&mut i);
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'-' | b'+')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// A parsed file: its first document (as yaml.v2's `Unmarshal` reads only
/// the first), and notes on what yaml.v2 would have accepted silently.
#[derive(Debug, Clone)]
pub(crate) struct Document {
    /// `None` for an empty file.
    pub(crate) root: Option<Node>,
    /// Lines of mapping keys given twice in one mapping (the last wins).
    pub(crate) duplicates: Vec<(usize, String)>,
    /// Whether the file holds more than one document (the rest is ignored).
    pub(crate) more_documents: bool,
}

/// A file the reader refuses: a YAML syntax error, or a bound passed
/// ([`Limits`]); its line and what is wrong.
#[derive(Debug)]
pub(crate) struct SyntaxError {
    pub(crate) line: usize,
    pub(crate) message: String,
    /// A bound of [`Limits`] was passed (the YAML itself may be valid).
    pub(crate) bound: bool,
}

/// What one file may make the reader build.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// The deepest nesting of lists and mappings.
    pub(crate) max_depth: usize,
    /// What anchors and aliases may copy, in nodes plus bytes of scalar
    /// text, over the file's own size in bytes.
    pub(crate) alias_allowance: usize,
}

impl Limits {
    /// [`Config::MAX_DEPTH`] and [`Config::ALIAS_ALLOWANCE`].
    pub(crate) const DEFAULT: Limits = Limits {
        max_depth: Config::MAX_DEPTH,
        alias_allowance: Config::ALIAS_ALLOWANCE,
    };
}

/// A list or mapping being read.
struct Frame {
    line: usize,
    anchor: usize,
    /// Nodes plus bytes of scalar text of the entries so far.
    weight: usize,
    kind: FrameKind,
}

enum FrameKind {
    Seq(Vec<Node>),
    Map(MapFrame),
}

/// A mapping being read: its entries, the key waiting for its value, for
/// each entry whether it came from a merge key (`<<`), and where each key
/// is (by [`key_id`]).
#[derive(Default)]
struct MapFrame {
    entries: Vec<(Node, Node)>,
    pending: Option<Node>,
    merged: Vec<bool>,
    index: HashMap<KeyId, usize>,
}

/// Parses `src` into a [`Document`], within `limits`.
pub(crate) fn parse(src: &str, limits: Limits) -> Result<Document, SyntaxError> {
    // (an anchored node with its weight; saphyr-parser numbers anchors
    // anew at each definition, so a redefined name gets a new id)
    let mut anchors: HashMap<usize, (Node, usize)> = HashMap::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut doc = Document {
        root: None,
        duplicates: Vec::new(),
        more_documents: false,
    };
    let budget = src.len().saturating_add(limits.alias_allowance);
    let mut copied = 0usize;
    let mut charge = |weight: usize, line: usize| {
        copied = copied.saturating_add(weight);
        if copied > budget {
            return Err(SyntaxError {
                line,
                message: format!(
                    "its anchors and aliases expand to more than {budget} nodes and bytes \
                     (the file's {} bytes and {}): refused, as envoyproxy/ratelimit's YAML \
                     library refuses excessive aliasing",
                    src.len(),
                    limits.alias_allowance
                ),
                bound: true,
            });
        }
        Ok(())
    };
    let mut documents = 0usize;
    let mut done = false;
    for item in Parser::new_from_str(src) {
        let (event, span): (Event<'_>, Span) = item.map_err(|e| {
            // (the scanner reads ahead, and stops at 255 nested flow
            // lists and mappings before this loop sees the 129th)
            if e.info() == "recursion limit exceeded" {
                too_deep(e.marker().line(), limits)
            } else {
                SyntaxError {
                    line: e.marker().line(),
                    message: e.info().to_owned(),
                    bound: false,
                }
            }
        })?;
        let line = span.start.line();
        let (node, weight, anchor) = match event {
            Event::DocumentStart(_) => {
                documents += 1;
                if documents > 1 {
                    doc.more_documents = true;
                    done = true;
                }
                continue;
            }
            _ if done => continue,
            Event::Scalar(text, style, anchor, tag) => {
                let str_tag = tag
                    .as_ref()
                    .is_some_and(|t| t.is_yaml_core_schema() && t.suffix == "str");
                let weight = text.len().saturating_add(1);
                let node = Node {
                    line,
                    kind: Kind::Scalar {
                        text: text.into_owned(),
                        plain: style == ScalarStyle::Plain,
                        str_tag,
                    },
                };
                (node, weight, anchor)
            }
            Event::Alias(id) => {
                let (node, weight) = anchors.get(&id).ok_or_else(|| SyntaxError {
                    line,
                    message: "an alias to an unknown anchor".to_owned(),
                    bound: false,
                })?;
                // (before the copy is made)
                charge(*weight, line)?;
                (node.clone(), *weight, 0)
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if stack.len() >= limits.max_depth {
                    return Err(too_deep(line, limits));
                }
                let kind = match event {
                    Event::SequenceStart(..) => FrameKind::Seq(Vec::new()),
                    _ => FrameKind::Map(MapFrame::default()),
                };
                stack.push(Frame {
                    line,
                    anchor,
                    weight: 1,
                    kind,
                });
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => match stack.pop() {
                Some(frame) => {
                    let kind = match frame.kind {
                        FrameKind::Seq(items) => Kind::Seq(items),
                        FrameKind::Map(map) => Kind::Map(map.entries),
                    };
                    let node = Node {
                        line: frame.line,
                        kind,
                    };
                    (node, frame.weight, frame.anchor)
                }
                None => continue,
            },
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => {
                continue;
            }
        };
        if anchor != 0 {
            charge(weight, line)?;
            anchors.insert(anchor, (node.clone(), weight));
        }
        match stack.last_mut() {
            None => doc.root = Some(node),
            Some(frame) => {
                frame.weight = frame.weight.saturating_add(weight);
                match &mut frame.kind {
                    FrameKind::Seq(items) => items.push(node),
                    FrameKind::Map(map) => match map.pending.take() {
                        None => map.pending = Some(node),
                        Some(key) => insert(map, key, node, &mut doc.duplicates),
                    },
                }
            }
        }
    }
    Ok(doc)
}

fn too_deep(line: usize, limits: Limits) -> SyntaxError {
    SyntaxError {
        line,
        message: format!(
            "lists and mappings nested more than {} deep: refused",
            limits.max_depth
        ),
        bound: true,
    }
}

/// A mapping key's identity: two keys are the same when their scalars
/// resolve to equal values ([`Scalar`]'s `==`); `None` for a key equal to
/// no other (a list, a mapping, a NaN).
#[derive(Debug, PartialEq, Eq, Hash)]
enum KeyId {
    Null,
    Bool(bool),
    Int(i128),
    Float(u64),
    Str(String),
}

fn key_id(node: &Node) -> Option<KeyId> {
    Some(match node.scalar()? {
        Scalar::Null => KeyId::Null,
        Scalar::Bool(b) => KeyId::Bool(b),
        Scalar::Int(n) => KeyId::Int(n),
        Scalar::Float(f) if f.is_nan() => return None,
        // (0.0 == -0.0)
        Scalar::Float(f) => KeyId::Float(if f == 0.0 { 0 } else { f.to_bits() }),
        Scalar::Str(s) => KeyId::Str(s.to_owned()),
    })
}

/// Adds `key: value` to a mapping as yaml.v2 builds it: a merge key `<<`
/// copies the entries of the mapping(s) it names that are not set
/// explicitly (an explicit key overrides a merged one, before or after it);
/// a key given twice keeps the last value.
fn insert(map: &mut MapFrame, key: Node, value: Node, duplicates: &mut Vec<(usize, String)>) {
    let is_merge = matches!(&key.kind, Kind::Scalar { text, plain: true, .. } if text == "<<");
    if is_merge {
        let sources: Vec<Node> = match value.kind {
            Kind::Map(_) => vec![value],
            Kind::Seq(items) => items,
            _ => vec![value],
        };
        for source in sources {
            if let Kind::Map(more) = source.kind {
                for (k, v) in more {
                    let id = key_id(&k);
                    if id.as_ref().is_some_and(|id| map.index.contains_key(id)) {
                        continue;
                    }
                    if let Some(id) = id {
                        map.index.insert(id, map.entries.len());
                    }
                    map.entries.push((k, v));
                    map.merged.push(true);
                }
            }
        }
        return;
    }
    let id = key_id(&key);
    match id.as_ref().and_then(|id| map.index.get(id)) {
        Some(&i) => {
            if !map.merged[i] {
                duplicates.push((key.line, key.text().unwrap_or("?").to_owned()));
            }
            map.merged[i] = false;
            map.entries[i].1 = value;
        }
        None => {
            if let Some(id) = id {
                map.index.insert(id, map.entries.len());
            }
            map.entries.push((key, value));
            map.merged.push(false);
        }
    }
}

#[cfg(test)]
mod tests {
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
}
