//! A document's `descriptors`, read into its domain's tree: each
//! descriptor's fields, its names (its key, its full key, its id), the
//! checks of the Go service (a non-empty `key`, no key/value twice under
//! one parent, `share_threshold` only on a wildcard), its `metadata` and
//! its limit ([`super::rate_limit`]), then its own descriptors.

use std::collections::BTreeMap;

use prost_types::value::Kind as PbKind;

use super::super::yaml::{Kind, Node as Y, Scalar};
use super::super::{ConfigError, Node, Rule};
use super::fields::{Ctx, boolean, join, list, map_entries, string};
use super::keys::misplaced;
use super::rate_limit::read_rate_limit;

/// Reads the descriptors of the list `list_node` (at `path`) into
/// `parent`, whose full key (with its `.`) and id are given, and theirs
/// below them.
pub(super) fn read_descriptors(
    ctx: &mut Ctx<'_>,
    list_node: &Y,
    path: &str,
    (parent_key, parent_id): (&str, &str),
    parent: &mut Node,
) -> Result<(), ConfigError> {
    for (i, item) in list(ctx, list_node, path)?.iter().enumerate() {
        let here = format!("{path}[{i}]");
        let fields = read_fields(ctx, item, &here)?;
        let names = names(ctx, &fields, item, &here, (parent_key, parent_id))?;
        check_unique(ctx, parent, &fields, &names, &here)?;
        let metadata = read_metadata(ctx, fields.metadata.as_ref())?;
        let rule = read_rule(ctx, &fields, &names, &here, metadata)?;
        check_share_threshold(ctx, &fields, &names, &here, item.line)?;
        let mut node = Node {
            rule,
            value_to_metric: fields.value_to_metric,
            share_threshold: fields.share_threshold,
            ..Node::default()
        };
        if let Some(children) = fields.children {
            read_descriptors(
                ctx,
                children,
                &join(&here, "descriptors"),
                (&format!("{}.", names.full_key), &names.id),
                &mut node,
            )?;
        }
        add_child(parent, names.final_key, node);
    }
    Ok(())
}

/// The fields of one descriptor, read ([`read_fields`]).
struct Fields<'d> {
    /// `key`.
    key: String,
    /// `value` (empty when absent).
    value: String,
    /// The line of `value`'s key (the descriptor's when absent).
    value_line: usize,
    /// `rate_limit`, not yet read.
    rate_limit: Option<&'d Y>,
    /// The line of `rate_limit`'s key (the descriptor's when absent).
    rate_limit_line: usize,
    /// `descriptors`, not yet read.
    children: Option<&'d Y>,
    /// `shadow_mode`.
    shadow_mode: bool,
    /// `quota_mode`.
    quota_mode: bool,
    /// `detailed_metric`.
    detailed_metric: bool,
    /// `value_to_metric`.
    value_to_metric: bool,
    /// `share_threshold`.
    share_threshold: bool,
    /// `metadata`, not yet read, with its path.
    metadata: Option<(&'d Y, String)>,
}

/// Reads a descriptor's fields, in file order: the scalars as their
/// types, the rest kept for later steps; another key is misplaced there.
fn read_fields<'d>(ctx: &mut Ctx<'_>, item: &'d Y, here: &str) -> Result<Fields<'d>, ConfigError> {
    let mut f = Fields {
        key: String::new(),
        value: String::new(),
        value_line: item.line,
        rate_limit: None,
        rate_limit_line: item.line,
        children: None,
        shadow_mode: false,
        quota_mode: false,
        detailed_metric: false,
        value_to_metric: false,
        share_threshold: false,
        metadata: None,
    };
    for (k, v) in map_entries(item) {
        let name = k.text().unwrap_or_default();
        let at = join(here, name);
        match name {
            "key" => f.key = string(ctx, v, &at)?,
            "value" => {
                f.value = string(ctx, v, &at)?;
                f.value_line = k.line;
            }
            "rate_limit" => {
                f.rate_limit = Some(v);
                f.rate_limit_line = k.line;
            }
            "descriptors" => f.children = Some(v),
            "shadow_mode" => f.shadow_mode = boolean(ctx, v, &at)?,
            "quota_mode" => f.quota_mode = boolean(ctx, v, &at)?,
            "detailed_metric" => f.detailed_metric = boolean(ctx, v, &at)?,
            "value_to_metric" => f.value_to_metric = boolean(ctx, v, &at)?,
            "share_threshold" => f.share_threshold = boolean(ctx, v, &at)?,
            "metadata" => f.metadata = Some((v, at)),
            _ => misplaced(ctx, name, here, k.line, "in a descriptor")?,
        }
    }
    Ok(f)
}

/// What a descriptor node is called ([`names`]).
struct Names {
    /// Its key under its parent: `key`, or `key_value` with a `value`.
    final_key: String,
    /// The Go service's key: the parent's, then [`final_key`](Self::final_key)
    /// ([`Rule::full_key`]).
    full_key: String,
    /// Its identity in its domain ([`Rule::id`]).
    id: String,
}

/// The names of a descriptor, whose `key` must not be empty.
fn names(
    ctx: &Ctx<'_>,
    f: &Fields<'_>,
    item: &Y,
    here: &str,
    (parent_key, parent_id): (&str, &str),
) -> Result<Names, ConfigError> {
    if f.key.is_empty() {
        return Err(ctx.err(here, item.line, "a descriptor must have a non-empty `key`"));
    }
    let final_key = if f.value.is_empty() {
        f.key.clone()
    } else {
        format!("{}_{}", f.key, f.value)
    };
    let full_key = format!("{parent_key}{final_key}");
    let id = format!("{parent_id}{}:{final_key}", final_key.len());
    Ok(Names {
        final_key,
        full_key,
        id,
    })
}

/// No key/value is defined twice under one parent (the Go service's
/// composite key, so `key: a, value: b_c` and `key: a_b, value: c` are one).
fn check_unique(
    ctx: &Ctx<'_>,
    parent: &Node,
    f: &Fields<'_>,
    names: &Names,
    here: &str,
) -> Result<(), ConfigError> {
    if !parent.children.contains_key(&names.final_key) {
        return Ok(());
    }
    let (key, value) = (&f.key, &f.value);
    let what = if value.is_empty() {
        format!("key {key:?}")
    } else {
        format!("key {key:?} with value {value:?}")
    };
    let full_key = &names.full_key;
    Err(ctx.err(
        here,
        f.value_line,
        format!(
            "duplicate descriptor: {what} is already defined here (composite key {full_key:?})"
        ),
    ))
}

/// `metadata`: a mapping, as a protobuf `Struct` (null is none).
fn read_metadata(
    ctx: &Ctx<'_>,
    metadata: Option<&(&Y, String)>,
) -> Result<Option<prost_types::Struct>, ConfigError> {
    let Some((v, at)) = metadata else {
        return Ok(None);
    };
    match &v.kind {
        Kind::Map(_) => Ok(match to_value(v).kind {
            Some(PbKind::StructValue(s)) => Some(s),
            _ => None,
        }),
        _ if v.scalar() == Some(Scalar::Null) => Ok(None),
        _ => Err(ctx.err(
            at,
            v.line,
            format!("must be a mapping, not {}", v.describe()),
        )),
    }
}

/// The descriptor's limit: its `rate_limit` mapping read and checked
/// ([`read_rate_limit`]) into a rule with the node's names and flags;
/// none without one (or a null one).
fn read_rule(
    ctx: &mut Ctx<'_>,
    f: &Fields<'_>,
    names: &Names,
    here: &str,
    metadata: Option<prost_types::Struct>,
) -> Result<Option<Rule>, ConfigError> {
    let v = match f.rate_limit {
        None => return Ok(None),
        Some(v) if v.scalar() == Some(Scalar::Null) => return Ok(None),
        Some(v) if matches!(v.kind, Kind::Map(_)) => v,
        Some(v) => {
            return Err(ctx.err(
                &join(here, "rate_limit"),
                v.line,
                format!("must be a mapping, not {}", v.describe()),
            ));
        }
    };
    let rule = Rule {
        file: ctx.file.to_owned(),
        full_key: names.full_key.clone(),
        id: names.id.clone(),
        path: join(here, "rate_limit"),
        line: f.rate_limit_line,
        requests_per_unit: 0,
        unit: None,
        unit_multiplier: 1,
        period_us: 0,
        unlimited: false,
        name: String::new(),
        replaces: Vec::new(),
        shadow_mode: f.shadow_mode,
        quota_mode: f.quota_mode,
        detailed_metric: f.detailed_metric,
        metadata,
        strategy: None,
        burst: None,
        calendar: None,
        charge: None,
    };
    read_rate_limit(ctx, v, rule).map(Some)
}

/// `share_threshold` goes only with a wildcard value (with `*`).
fn check_share_threshold(
    ctx: &Ctx<'_>,
    f: &Fields<'_>,
    names: &Names,
    here: &str,
    line: usize,
) -> Result<(), ConfigError> {
    let final_key = &names.final_key;
    if f.share_threshold && !final_key.contains('*') {
        return Err(ctx.err(
            &join(here, "share_threshold"),
            line,
            format!(
                "`share_threshold` needs a wildcard value (with `*`), and {final_key:?} has none"
            ),
        ));
    }
    Ok(())
}

/// Adds `node` to `parent` under `final_key`, and to its wildcards (split
/// at the `*`s, in file order) if the key has one.
fn add_child(parent: &mut Node, final_key: String, node: Node) {
    if final_key.contains('*') {
        let parts = final_key.split('*').map(str::to_owned).collect();
        parent.wildcards.push((final_key.clone(), parts));
    }
    parent.children.insert(final_key, node);
}

/// A YAML node as a protobuf `Value`, as the Go service converts `metadata`.
fn to_value(v: &Y) -> prost_types::Value {
    let kind = match &v.kind {
        Kind::Seq(items) => PbKind::ListValue(prost_types::ListValue {
            values: items.iter().map(to_value).collect(),
        }),
        Kind::Map(entries) => PbKind::StructValue(prost_types::Struct {
            fields: entries
                .iter()
                .map(|(k, val)| (k.text().unwrap_or_default().to_owned(), to_value(val)))
                .collect::<BTreeMap<_, _>>(),
        }),
        Kind::Scalar { .. } => match v.scalar() {
            Some(Scalar::Bool(b)) => PbKind::BoolValue(b),
            Some(Scalar::Int(n)) => PbKind::NumberValue(n as f64),
            Some(Scalar::Float(f)) => PbKind::NumberValue(f),
            Some(Scalar::Str(s)) => PbKind::StringValue(s.to_owned()),
            Some(Scalar::Null) | None => PbKind::NullValue(0),
        },
    };
    prost_types::Value { kind: Some(kind) }
}
