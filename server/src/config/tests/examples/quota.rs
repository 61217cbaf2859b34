//! `examples/quota/envoy.yaml` with `examples/quota/quota.yaml`: the
//! bucket ids the quota filter's matchers build for sample requests reach
//! the rules their comments name, and the quota service answers them so.

use std::time::Duration;

use tower_redis_ratelimit::MemoryStore;

use super::*;
use crate::rlqs::config::{Blanket, DomainConfig};
use crate::rlqs::{Action, QuotaOptions, QuotaService, Strategy, Usage};

const SETTINGS: &str = "type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings";
const FILTER: &str = "type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig";

/// A request's headers (`:path` among them), lower-case names.
type Request<'a> = &'a [(&'a str, &'a str)];

fn header<'a>(req: Request<'a>, name: &str) -> Option<&'a str> {
    req.iter().find(|(h, _)| *h == name).map(|(_, v)| *v)
}

/// The quota filter of the example: its domain and matchers.
fn filter(envoy: &Envoy) -> &Node {
    let mut configs = Vec::new();
    find_all(&envoy.top, "typed_config", &mut configs);
    let filters: Vec<&Node> = configs
        .into_iter()
        .filter(|c| text(c, "@type") == Some(FILTER))
        .collect();
    assert_eq!(filters.len(), 1, "one quota filter");
    filters[0]
}

/// Whether a predicate matches `req`: an `and_matcher` of predicates, or
/// a `single_predicate` (a request header input, `exact`, `prefix`, or the
/// `safe_regex` `.+`, any value but an empty one).
fn matches(predicate: &Node, req: Request<'_>) -> bool {
    if let Some(and) = get(predicate, "and_matcher") {
        let Kind::Seq(all) = &get(and, "predicate").expect("predicates").kind else {
            panic!("and_matcher.predicate is a list");
        };
        return all.iter().all(|p| matches(p, req));
    }
    let single = get(predicate, "single_predicate").expect("a single_predicate");
    let input = get(get(single, "input").expect("an input"), "typed_config").expect("typed_config");
    assert_eq!(
        text(input, "@type"),
        Some("type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput")
    );
    let value = header(req, text(input, "header_name").expect("header_name"));
    let m = get(single, "value_match").expect("value_match");
    if let Some(re) = get(m, "safe_regex") {
        assert_eq!(
            text(re, "regex"),
            Some(".+"),
            "a regex this test does not know"
        );
        return value.is_some_and(|v| !v.is_empty());
    }
    match (text(m, "exact"), text(m, "prefix"), value) {
        (Some(e), None, Some(v)) => v == e,
        (None, Some(p), Some(v)) => v.starts_with(p),
        (_, _, None) => false,
        other => panic!("a value_match this test does not know: {other:?}"),
    }
}

/// The bucket settings of the first matcher that takes `req`, and the
/// bucket id they build for it (`None`: no matcher takes it, or a header
/// a value comes from is absent).
fn bucket<'a>(filter: &'a Node, req: Request<'_>) -> Option<(&'a Node, Vec<(String, String)>)> {
    let list = get(get(filter, "bucket_matchers")?, "matcher_list")?;
    let Kind::Seq(matchers) = &get(list, "matchers")?.kind else {
        panic!("matchers is a list");
    };
    let m = matchers
        .iter()
        .find(|m| matches(get(m, "predicate").expect("a predicate"), req))?;
    let action = get(get(get(m, "on_match")?, "action")?, "typed_config")?;
    assert_eq!(text(action, "@type"), Some(SETTINGS));
    let builder = get(get(action, "bucket_id_builder")?, "bucket_id_builder")?;
    let Kind::Map(entries) = &builder.kind else {
        panic!("bucket_id_builder is a mapping");
    };
    let mut id = Vec::new();
    for (k, v) in entries {
        let value = match (text(v, "string_value"), get(v, "custom_value")) {
            (Some(s), None) => s.to_owned(),
            (None, Some(c)) => {
                let tc = get(c, "typed_config").expect("typed_config");
                header(req, text(tc, "header_name").expect("header_name"))?.to_owned()
            }
            other => panic!("a value builder this test does not know: {other:?}"),
        };
        id.push((k.text().expect("a key").to_owned(), value));
    }
    Some((action, id))
}

fn duration_secs(node: &Node, key: &str) -> Duration {
    let t = text(node, key).unwrap_or_else(|| panic!("{key}"));
    Duration::from_secs(t.trim_end_matches('s').parse().expect("whole seconds"))
}

#[tokio::test]
async fn the_example_envoys_buckets_reach_the_example_quota_rules_and_are_answered_so() {
    let envoy = Envoy::read("examples/quota/envoy.yaml");
    let filter = filter(&envoy);
    let quota = DomainConfig::parse(
        "quota.yaml",
        &read(root().join("examples/quota/quota.yaml")),
    )
    .expect("the example quota file loads");
    assert_eq!(text(filter, "domain"), Some(quota.domain.as_str()));
    let service = QuotaService::new(
        vec![quota.clone()],
        MemoryStore::new(),
        QuotaOptions::default(),
    )
    .expect("service");
    let mut stream = service.stream();
    let cases: &[(Request<'_>, Option<&str>)] = &[
        (
            &[(":path", "/chat/v1"), ("x-user-id", "alice")],
            Some("chat-per-user"),
        ),
        (
            &[(":path", "/chat"), ("x-user-id", "bob")],
            Some("chat-per-user"),
        ),
        // without a user (no header, or an empty one): {route: chat},
        // which no rule matches: denied
        (&[(":path", "/chat")], Some("unmatched")),
        (&[(":path", "/chat"), ("x-user-id", "")], Some("unmatched")),
        (&[(":path", "/search?q=x")], Some("search")),
        (&[(":path", "/healthz")], Some("health")),
        // no matcher: allowed by Envoy, never reported
        (&[(":path", "/other")], None),
    ];
    for (req, want) in cases {
        let Some((settings, id)) = bucket(filter, req) else {
            assert_eq!(*want, None, "{req:?} makes no bucket");
            continue;
        };
        // every matcher reports at the quota file's interval
        assert_eq!(
            duration_secs(settings, "reporting_interval"),
            quota.reporting_interval,
            "{req:?}"
        );
        let sorted = crate::rlqs::config::bucket_id(id.clone()).expect("a valid id");
        let rule = quota.lookup(&sorted).map(|(i, _)| &quota.rules[i]);
        let name = rule.map_or("unmatched", |r| r.name.as_str());
        assert_eq!(Some(name), *want, "{req:?}");
        // and the service answers it as the rule says
        let usage = Usage {
            id: id.clone(),
            allowed: 1,
            denied: 0,
        };
        let actions = service
            .report(&mut stream, &quota.domain, vec![usage], service.now())
            .await;
        let [(got_id, Action::Assign { strategy, ttl })] = &actions[..] else {
            panic!("one assignment for {id:?}: {actions:?}");
        };
        assert_eq!(got_id, &id);
        assert_eq!(*ttl, quota.assignment_ttl);
        match name {
            "health" => assert_eq!(*strategy, Strategy::Blanket(Blanket::AllowAll)),
            "unmatched" => assert_eq!(*strategy, Strategy::Blanket(Blanket::DenyAll)),
            _ => assert!(matches!(strategy, Strategy::TokenBucket(_)), "{strategy:?}"),
        }
        // a limited bucket fails closed without an assignment: before its
        // first, and once one lapses (Envoy falls back to the no-assignment
        // behaviour as soon as the expired one's timeout, unset, ends)
        if name != "health" {
            for behaviour in ["no_assignment_behavior", "expired_assignment_behavior"] {
                let b = get(settings, behaviour).unwrap_or_else(|| panic!("{behaviour}"));
                let fallback = get(b, "fallback_rate_limit").expect("a fallback");
                assert_eq!(
                    text(fallback, "blanket_rule"),
                    Some("DENY_ALL"),
                    "{behaviour}"
                );
            }
        }
    }
}
