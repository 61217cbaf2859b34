//! A YAML document as a tree of nodes that keep each scalar's source text,
//! whether it was quoted and its line, so that the loader can read scalars
//! as envoyproxy/ratelimit's YAML library (`gopkg.in/yaml.v2`, YAML 1.1
//! resolution) does: `yes`/`on` are booleans there, `0x10` an integer, and a
//! string field takes any scalar's text as written.

use std::collections::HashMap;

mod scalar;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

pub(crate) use scalar::Scalar;
use scalar::resolve_plain;

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
mod tests;
