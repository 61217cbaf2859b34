//! What a response holds: its `RateLimitConfig` resources decoded, each
//! translated into the document its YAML file would parse to ([`tree`]),
//! and all checked as one configuration ([`build`]).

use prost::Message;

use super::{RATE_LIMIT_CONFIG_TYPE, truncated};
use crate::config::{ConfigError, Document, LoadOptions, Tree};
use crate::pb::envoy::service::discovery::v3::DiscoveryResponse;
use crate::pb::ratelimit::config::ratelimit::v3 as rls_conf;

/// Why a snapshot is refused.
pub(super) enum Refusal {
    /// Not a valid configuration (not yet counted as a failed load).
    Config(String),
    /// A limit the library rejects (counted by the reload).
    Build(String),
}

/// The configuration of a response's resources, checked.
pub(super) fn build(
    response: &DiscoveryResponse,
    max_resources: usize,
    load: LoadOptions,
) -> Result<crate::config::Config, Refusal> {
    if response.resources.len() > max_resources {
        return Err(Refusal::Config(format!(
            "{} resources: at most {max_resources} are taken",
            response.resources.len()
        )));
    }
    let documents = response.resources.iter().enumerate().map(|(i, any)| {
        let at = |message: String| ConfigError {
            file: format!("resource [{i}]"),
            path: String::new(),
            line: 0,
            message,
            transient: false,
        };
        if any.type_url != RATE_LIMIT_CONFIG_TYPE {
            return Err(at(format!(
                "of type {:?}, not {RATE_LIMIT_CONFIG_TYPE}",
                truncated(&any.type_url, 200)
            )));
        }
        let config = rls_conf::RateLimitConfig::decode(any.value.as_slice())
            .map_err(|e| at(format!("not a RateLimitConfig: {e}")))?;
        let name = if config.name.is_empty() {
            format!("RateLimitConfig [{i}]")
        } else {
            format!("RateLimitConfig {:?}", truncated(&config.name, 200))
        };
        Document::from_tree(name, &tree(&config))
    });
    crate::source::load(documents, load).map_err(|e| Refusal::Config(e.to_string()))
}

/// A resource as the document its YAML file would parse to: the same keys
/// where a field is set (a field at its default is absent, as in a file
/// that leaves it out).
pub fn tree(config: &rls_conf::RateLimitConfig) -> Tree {
    Tree::Map(vec![
        ("domain".to_owned(), Tree::Str(config.domain.clone())),
        ("descriptors".to_owned(), descriptors(&config.descriptors)),
    ])
}

/// A list of descriptors, as `descriptors`.
fn descriptors(list: &[rls_conf::RateLimitDescriptor]) -> Tree {
    Tree::List(list.iter().map(descriptor).collect())
}

/// A descriptor, as a mapping of `descriptors`.
fn descriptor(d: &rls_conf::RateLimitDescriptor) -> Tree {
    let mut m = vec![("key".to_owned(), Tree::Str(d.key.clone()))];
    if !d.value.is_empty() {
        m.push(("value".to_owned(), Tree::Str(d.value.clone())));
    }
    if let Some(p) = &d.rate_limit {
        m.push(("rate_limit".to_owned(), policy(p)));
    }
    if !d.descriptors.is_empty() {
        m.push(("descriptors".to_owned(), descriptors(&d.descriptors)));
    }
    for (key, on) in [
        ("shadow_mode", d.shadow_mode),
        ("detailed_metric", d.detailed_metric),
        ("quota_mode", d.quota_mode),
    ] {
        if on {
            m.push((key.to_owned(), Tree::Bool(true)));
        }
    }
    if let Some(s) = &d.metadata {
        m.push(("metadata".to_owned(), structure(s)));
    }
    Tree::Map(m)
}

/// A policy, as `rate_limit`.
fn policy(p: &rls_conf::RateLimitPolicy) -> Tree {
    let mut m = Vec::new();
    if p.unit != 0 {
        // an unknown number is named as such, and refused by the loader
        let unit = rls_conf::RateLimitUnit::try_from(p.unit).map_or_else(
            |_| p.unit.to_string(),
            |u| u.as_str_name().to_ascii_lowercase(),
        );
        m.push(("unit".to_owned(), Tree::Str(unit)));
    }
    if p.requests_per_unit != 0 {
        m.push((
            "requests_per_unit".to_owned(),
            Tree::Int(i64::from(p.requests_per_unit)),
        ));
    }
    if p.unlimited {
        m.push(("unlimited".to_owned(), Tree::Bool(true)));
    }
    if !p.name.is_empty() {
        m.push(("name".to_owned(), Tree::Str(p.name.clone())));
    }
    if !p.replaces.is_empty() {
        let list = p
            .replaces
            .iter()
            .map(|r| Tree::Map(vec![("name".to_owned(), Tree::Str(r.name.clone()))]))
            .collect();
        m.push(("replaces".to_owned(), Tree::List(list)));
    }
    Tree::Map(m)
}

/// A protobuf `Struct`, as a mapping (`metadata`).
fn structure(s: &prost_types::Struct) -> Tree {
    Tree::Map(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), value(v)))
            .collect(),
    )
}

/// A protobuf `Value`, as the tree of its kind.
fn value(v: &prost_types::Value) -> Tree {
    use prost_types::value::Kind;
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Tree::Null,
        Some(Kind::BoolValue(b)) => Tree::Bool(*b),
        Some(Kind::NumberValue(n)) => Tree::Float(*n),
        Some(Kind::StringValue(s)) => Tree::Str(s.clone()),
        Some(Kind::ListValue(l)) => Tree::List(l.values.iter().map(value).collect()),
        Some(Kind::StructValue(s)) => structure(s),
    }
}
