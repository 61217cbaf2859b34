//! The shipped example (`examples/config/`, `examples/envoy.yaml`) and the
//! documentation that quotes it: the descriptors Envoy's route actions make
//! all reach a limit of the example configuration, the configuration loads
//! without a warning and answers as its comments say, and every YAML block
//! of the README's and the guide's Envoy sections is a verbatim part of the
//! example files (so that what users copy is what is tested here).

use std::path::PathBuf;

use tower_redis_ratelimit::MemoryStore;

use super::yaml::{self, Kind, Node};
use super::*;
use crate::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use crate::pb::rate_limit_response::Code;
use crate::pb::{RateLimitDescriptor, RateLimitRequest};
use crate::service::{RlsService, ServiceOptions};

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

/// The descriptor entry one Envoy rate limit action makes, for a request
/// from `addr` with an `x-api-key` of `api_key` that matches every
/// `header_value_match`.
fn entry(action: &Node, addr: &str, api_key: &str) -> (String, String) {
    let Kind::Map(fields) = &action.kind else {
        panic!("an action is a mapping: {action:?}");
    };
    let [(name, body)] = &fields[..] else {
        panic!("an action has one field: {action:?}");
    };
    let key_or = |default: &str| text(body, "descriptor_key").unwrap_or(default).to_owned();
    match name.text() {
        Some("remote_address") => ("remote_address".to_owned(), addr.to_owned()),
        Some("request_headers") => (key_or("?"), api_key.to_owned()),
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
    }
}

/// The example Envoy configuration: the rate limit filter's domain, and the
/// descriptors its routes' actions make.
fn envoy_descriptors(addr: &str, api_key: &str) -> (String, Vec<Vec<(String, String)>>) {
    let doc = match yaml::parse(
        &read(root().join("examples/envoy.yaml")),
        yaml::Limits::DEFAULT,
    ) {
        Ok(d) => d,
        Err(e) => panic!("envoy.yaml line {}: {}", e.line, e.message),
    };
    let Some(top) = doc.root else {
        panic!("envoy.yaml is empty");
    };
    let mut configs = Vec::new();
    find_all(&top, "typed_config", &mut configs);
    let domains: Vec<&str> = configs
        .iter()
        .filter(|c| {
            text(c, "@type").is_some_and(|t| t.ends_with("filters.http.ratelimit.v3.RateLimit"))
        })
        .filter_map(|c| text(c, "domain"))
        .collect();
    assert_eq!(domains.len(), 1, "one rate limit filter: {domains:?}");
    let mut lists = Vec::new();
    find_all(&top, "rate_limits", &mut lists);
    let mut descriptors = Vec::new();
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
            descriptors.push(actions.iter().map(|a| entry(a, addr, api_key)).collect());
        }
    }
    (domains[0].to_owned(), descriptors)
}

fn example_config() -> Config {
    match Config::load_dir(&root().join("examples/config"), LoadOptions::default()) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn every_descriptor_the_example_envoy_routes_make_reaches_a_limit_of_the_example_config() {
    let config = example_config();
    assert!(config.warnings().is_empty(), "{:?}", config.warnings());
    let (domain, descriptors) = envoy_descriptors("10.0.0.1", "key-1");
    assert_eq!(domain, "api");
    assert_eq!(descriptors.len(), 3, "{descriptors:?}");
    for d in &descriptors {
        let entries: Vec<(&str, &str)> = d.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let rule = config.lookup(&domain, &entries);
        assert!(
            rule.is_some_and(|r| !r.unlimited && r.requests_per_unit > 0),
            "no limit for the descriptor {d:?}"
        );
    }
    // the one API key the comments call unlimited is
    let (_, descriptors) = envoy_descriptors("10.0.0.1", "internal-batch-job");
    let api_key = descriptors
        .iter()
        .find(|d| d[0].0 == "api_key")
        .expect("an api_key descriptor");
    let entries: Vec<(&str, &str)> = api_key
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert!(config.lookup("api", &entries).is_some_and(|r| r.unlimited));
}

fn request(descriptors: &[Vec<(String, String)>]) -> RateLimitRequest {
    RateLimitRequest {
        domain: "api".to_owned(),
        descriptors: descriptors
            .iter()
            .map(|d| RateLimitDescriptor {
                entries: d
                    .iter()
                    .map(|(key, value)| Entry {
                        key: key.clone(),
                        value: value.clone().into_bytes(),
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        hits_addend: 0,
        hits_subtrahend: 0,
    }
}

/// What the example's comments promise: 100 a minute per address, a burst
/// of 20 writes, and a write denied by its burst consumes nothing of the
/// address's minute.
#[tokio::test]
async fn the_example_config_answers_as_its_comments_say() {
    let service = match RlsService::new(
        example_config(),
        MemoryStore::new(),
        ServiceOptions::default(),
    ) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    let (_, all) = envoy_descriptors("10.0.0.2", "key-2");
    // a POST sends all three; a burst of 20 writes goes through
    for i in 0..20 {
        let r = service
            .should_rate_limit_inner(&request(&all))
            .await
            .unwrap();
        assert_eq!(r.overall_code, Code::Ok as i32, "write {i}");
    }
    // the 21st write within the second is over (the bucket refills 5 a
    // second: this runs well within one), and takes nothing anywhere
    let r = service
        .should_rate_limit_inner(&request(&all))
        .await
        .unwrap();
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    assert_eq!(r.statuses[2].code, Code::OverLimit as i32);
    assert_eq!(r.statuses[0].limit_remaining, 80, "{r:?}");
    // GETs (no header_match descriptor): the address's remaining 80
    let gets = &all[..2];
    for i in 0..80 {
        let r = service
            .should_rate_limit_inner(&request(gets))
            .await
            .unwrap();
        assert_eq!(r.overall_code, Code::Ok as i32, "get {i}");
    }
    let r = service
        .should_rate_limit_inner(&request(gets))
        .await
        .unwrap();
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    assert_eq!(r.statuses[0].code, Code::OverLimit as i32);
    // (the denied requests took nothing of the API key's hour)
    assert_eq!(r.statuses[1].limit_remaining, 1000 - 100, "{r:?}");
}

/// The ```yaml blocks of `text`.
fn yaml_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match &mut current {
            None if line.trim_start() == "```yaml" => current = Some(String::new()),
            Some(block) if line.trim_start() == "```" => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    blocks
}

#[test]
fn the_yaml_the_readme_and_the_guide_show_is_the_tested_example() {
    let examples = [
        read(root().join("examples/envoy.yaml")),
        read(root().join("examples/config/api.yaml")),
    ];
    let mut checked = 0;
    for doc in ["../README.md", "../docs/guide/envoy.md"] {
        for block in yaml_blocks(&read(root().join(doc))) {
            assert!(
                examples.iter().any(|e| e.contains(&block)),
                "a YAML block of {doc} is not part of server/examples:\n{block}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 4, "only {checked} YAML blocks found");
}
