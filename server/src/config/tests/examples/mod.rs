//! The shipped examples and the documentation that quotes them: the
//! descriptors Envoy's route actions make all reach a limit of the example
//! configuration, the configuration loads without a warning and answers as
//! its comments say, and every YAML block of the README's and the guide's
//! Envoy sections is a verbatim part of the example files (so that what
//! users copy is what is tested here).
//!
//! Two examples: `examples/envoy.yaml` with `examples/config/` (request
//! limits), and `examples/tokens/` (token budgets charged when the stream
//! is done, Envoy's `apply_on_stream_done`).
//!
//! By topic: [`requests`] (`examples/config`), [`tokens`]
//! (`examples/tokens`) and [`docs`] (the YAML the documentation quotes);
//! reading Envoy's configuration as the tests need it is here.

mod docs;
mod quota;
mod requests;
mod tokens;

use std::path::PathBuf;

use super::yaml::{self, Kind, Node};
use super::*;
use crate::pb::RateLimitDescriptor;
use crate::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: PathBuf) -> String {
    match std::fs::read_to_string(&path) {
        Ok(s) => s,
        Err(e) => panic!("{}: {e}", path.display()),
    }
}

fn get<'a>(node: &'a Node, key: &str) -> Option<&'a Node> {
    match &node.kind {
        Kind::Map(entries) => entries
            .iter()
            .find(|(k, _)| k.text() == Some(key))
            .map(|(_, v)| v),
        _ => None,
    }
}

fn text<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    get(node, key).and_then(Node::text)
}

/// Every value of a `key` mapping entry anywhere under `node`.
fn find_all<'a>(node: &'a Node, key: &str, out: &mut Vec<&'a Node>) {
    match &node.kind {
        Kind::Map(entries) => {
            for (k, v) in entries {
                if k.text() == Some(key) {
                    out.push(v);
                }
                find_all(v, key, out);
            }
        }
        Kind::Seq(items) => items.iter().for_each(|n| find_all(n, key, out)),
        Kind::Scalar { .. } => {}
    }
}

/// A request as the test sends it through Envoy: the client's address and
/// its request headers (lower-case names).
struct Client<'a> {
    addr: &'a str,
    headers: &'a [(&'a str, &'a str)],
}

/// The descriptor entry one Envoy rate limit action makes for `client`
/// (whose requests match every `header_value_match`); `None` when the
/// action makes none, and so neither does its `rate_limits` entry (a
/// `request_headers` action whose header is absent), as in Envoy.
fn entry(action: &Node, client: &Client<'_>) -> Option<(String, String)> {
    let Kind::Map(fields) = &action.kind else {
        panic!("an action is a mapping: {action:?}");
    };
    let [(name, body)] = &fields[..] else {
        panic!("an action has one field: {action:?}");
    };
    let key_or = |default: &str| text(body, "descriptor_key").unwrap_or(default).to_owned();
    Some(match name.text() {
        Some("remote_address") => ("remote_address".to_owned(), client.addr.to_owned()),
        Some("request_headers") => {
            let header = text(body, "header_name").unwrap_or_default();
            let (_, value) = client.headers.iter().find(|(h, _)| *h == header)?;
            (key_or("?"), (*value).to_owned())
        }
        Some("header_value_match") => (
            key_or("header_match"),
            text(body, "descriptor_value")
                .unwrap_or_default()
                .to_owned(),
        ),
        Some("generic_key") => (
            key_or("generic_key"),
            text(body, "descriptor_value")
                .unwrap_or_default()
                .to_owned(),
        ),
        other => panic!("an action this test does not know: {other:?}"),
    })
}

/// A route's `rate_limits` entry's `hits_addend`.
#[derive(Debug, Clone, PartialEq)]
enum Hits {
    /// None: the request's hits.
    Request,
    /// `number`.
    Number(u64),
    /// `format`, a substitution Envoy evaluates when it sends the call.
    Format(String),
}

/// One `rate_limits` entry of a route.
struct Limit<'a> {
    actions: &'a [Node],
    hits: Hits,
    on_stream_done: bool,
}

impl Limit<'_> {
    /// The descriptor it makes for `client`, with its `hits_addend`
    /// (`format`: `usage`, the number the substitution gives); `None` if an
    /// action makes none.
    fn descriptor(&self, client: &Client<'_>, usage: u64) -> Option<RateLimitDescriptor> {
        let entries = self
            .actions
            .iter()
            .map(|a| entry(a, client))
            .collect::<Option<Vec<_>>>()?;
        Some(RateLimitDescriptor {
            entries: entries
                .into_iter()
                .map(|(key, value)| Entry {
                    key,
                    value: value.into_bytes(),
                })
                .collect(),
            hits_addend: match self.hits {
                Hits::Request => None,
                Hits::Number(n) => Some(n),
                Hits::Format(_) => Some(usage),
            },
            ..Default::default()
        })
    }
}

/// An example Envoy configuration, parsed.
struct Envoy {
    top: Node,
}

impl Envoy {
    fn read(file: &str) -> Envoy {
        let doc = match yaml::parse(&read(root().join(file)), yaml::Limits::DEFAULT) {
            Ok(d) => d,
            Err(e) => panic!("{file} line {}: {}", e.line, e.message),
        };
        let Some(top) = doc.root else {
            panic!("{file} is empty");
        };
        Envoy { top }
    }

    /// The domain of its one rate limit HTTP filter.
    fn domain(&self) -> &str {
        let mut configs = Vec::new();
        find_all(&self.top, "typed_config", &mut configs);
        let domains: Vec<&str> = configs
            .iter()
            .filter(|c| {
                text(c, "@type").is_some_and(|t| {
                    t == "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit"
                })
            })
            .filter_map(|c| text(c, "domain"))
            .collect();
        assert_eq!(domains.len(), 1, "one rate limit filter: {domains:?}");
        domains[0]
    }

    /// Every `rate_limits` entry of its routes.
    fn limits(&self) -> Vec<Limit<'_>> {
        let mut lists = Vec::new();
        find_all(&self.top, "rate_limits", &mut lists);
        let mut out = Vec::new();
        for list in lists {
            let Kind::Seq(limits) = &list.kind else {
                panic!("rate_limits is a list");
            };
            for limit in limits {
                let Some(Node {
                    kind: Kind::Seq(actions),
                    ..
                }) = get(limit, "actions")
                else {
                    panic!("a rate_limits entry without actions: {limit:?}");
                };
                let hits = match get(limit, "hits_addend") {
                    None => Hits::Request,
                    Some(h) => match (text(h, "number"), text(h, "format")) {
                        (Some(n), None) => Hits::Number(
                            n.parse()
                                .unwrap_or_else(|e| panic!("hits_addend.number {n:?}: {e}")),
                        ),
                        (None, Some(f)) => Hits::Format(f.to_owned()),
                        other => panic!("hits_addend takes a number or a format: {other:?}"),
                    },
                };
                let on_stream_done = match text(limit, "apply_on_stream_done") {
                    None | Some("false") => false,
                    Some("true") => true,
                    Some(other) => panic!("apply_on_stream_done: {other:?}"),
                };
                out.push(Limit {
                    actions,
                    hits,
                    on_stream_done,
                });
            }
        }
        out
    }
}

fn load(dir: &str) -> Config {
    match Config::load_dir(&root().join(dir), LoadOptions::default()) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}
