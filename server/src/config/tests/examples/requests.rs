//! `examples/envoy.yaml` with `examples/config/`: every descriptor the
//! routes make reaches a limit, which answers as the comments say.

use tower_redis_ratelimit::MemoryStore;

use super::*;
use crate::pb::RateLimitRequest;
use crate::pb::rate_limit_response::Code;
use crate::service::{RlsService, ServiceOptions};

/// The example Envoy configuration (`examples/envoy.yaml`): the rate limit
/// filter's domain, and the descriptors its routes' actions make for a
/// request from `addr` with an `x-api-key` of `api_key`.
fn envoy_descriptors(addr: &str, api_key: &str) -> (String, Vec<Vec<(String, String)>>) {
    let envoy = Envoy::read("examples/envoy.yaml");
    let client = Client {
        addr,
        headers: &[("x-api-key", api_key)],
    };
    let descriptors = envoy
        .limits()
        .iter()
        .map(|l| {
            l.actions
                .iter()
                .map(|a| entry(a, &client).expect("every action makes an entry"))
                .collect()
        })
        .collect();
    (envoy.domain().to_owned(), descriptors)
}

fn example_config() -> Config {
    load("examples/config")
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
    // second: this runs well within one), and takes nothing of the
    // descriptors that had room (the bucket, over, records it as debt)
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
