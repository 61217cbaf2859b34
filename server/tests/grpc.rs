//! `ShouldRateLimit` over real gRPC: a tonic client from the same protos,
//! servers on free loopback ports, on the memory store and on a private
//! `redis-server`.

mod common;

use std::time::Duration;

use common::*;
use tokio::net::TcpListener;
use tonic::transport::Channel;
use tower_redis_ratelimit::{MemoryStore, RedisStore};
use tower_redis_ratelimit_server::config::{Charge, Config, LoadOptions};
use tower_redis_ratelimit_server::pb::rate_limit_descriptor::RateLimitOverride;
use tower_redis_ratelimit_server::pb::rate_limit_response::Code;
use tower_redis_ratelimit_server::pb::{RateLimitRequest, RateLimitServiceServer};
use tower_redis_ratelimit_server::service::{RlsService, ServiceOptions};

const CONFIG: &str = r#"
domain: api
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: path
    value: /login
    rate_limit:
      name: login
      unit: minute
      requests_per_unit: 2
  - key: path
    value: /v1/*
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: path
    value: /free
    rate_limit:
      unlimited: true
  - key: path
    value: /shadow
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: tenant
    descriptors:
      - key: user
        rate_limit:
          unit: hour
          requests_per_unit: 5
  - key: hot
    rate_limit:
      unit: minute
      requests_per_unit: 100
"#;

fn config() -> Config {
    Config::from_sources([("api.yaml", CONFIG)], LoadOptions::default()).expect("config")
}

fn memory(options: ServiceOptions) -> RlsService {
    RlsService::new(config(), MemoryStore::new(), options).expect("service")
}

#[tokio::test]
async fn match_no_match_unknown_domain_and_remaining() {
    let mut c = serve(memory(ServiceOptions::default())).await;
    for expect in [2, 1, 0] {
        let r = ask(
            &mut c,
            "api",
            vec![desc(&[("remote_address", "10.0.0.1")])],
            0,
        )
        .await;
        assert_eq!(overall(&r), Code::Ok);
        let s = &r.statuses[0];
        assert_eq!(code(s), Code::Ok);
        assert_eq!(s.limit_remaining, expect);
        let limit = s.current_limit.as_ref().expect("limit");
        assert_eq!(limit.requests_per_unit, 3);
        assert_eq!(limit.unit, 2, "MINUTE");
        let reset = s.duration_until_reset.expect("reset");
        // within the minute's window: above 0, at most 60 s (0 s and some
        // milliseconds in the window's last second)
        let micros = reset.seconds * 1_000_000 + i64::from(reset.nanos) / 1_000;
        assert!((1..=60_000_000).contains(&micros), "{reset:?}");
    }
    let r = ask(
        &mut c,
        "api",
        vec![desc(&[("remote_address", "10.0.0.1")])],
        0,
    )
    .await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(code(&r.statuses[0]), Code::OverLimit);
    // another value counts apart
    let r = ask(
        &mut c,
        "api",
        vec![desc(&[("remote_address", "10.0.0.2")])],
        0,
    )
    .await;
    assert_eq!(overall(&r), Code::Ok);
    assert_eq!(r.statuses[0].limit_remaining, 2);
    // no match; unknown domain; no descriptors
    for (domain, d) in [
        ("api", desc(&[("nothing", "x")])),
        ("api", desc(&[("remote_address", "1"), ("extra", "x")])),
        ("other", desc(&[("remote_address", "10.0.0.1")])),
    ] {
        let r = ask(&mut c, domain, vec![d], 0).await;
        assert_eq!(overall(&r), Code::Ok);
        assert_eq!(code(&r.statuses[0]), Code::Ok);
        assert!(r.statuses[0].current_limit.is_none());
    }
}

#[tokio::test]
async fn nested_wildcard_unlimited_and_hits() {
    // (`--charge admitted`: a denied call takes nothing; by default it is
    // recorded where it is over, `tests/reports.rs`)
    let mut c = serve(memory(ServiceOptions::default().charge(Charge::Admitted))).await;
    // nested: tenant + user, 5 per hour; tenant alone has no limit
    let d = || desc(&[("tenant", "t1"), ("user", "u1")]);
    let r = ask(&mut c, "api", vec![d()], 3).await;
    assert_eq!(r.statuses[0].limit_remaining, 2);
    assert_eq!(
        r.statuses[0].current_limit.as_ref().map(|l| l.unit),
        Some(3)
    );
    // hits_addend > remaining: over, nothing consumed
    let r = ask(&mut c, "api", vec![d()], 3).await;
    assert_eq!(overall(&r), Code::OverLimit);
    // per-descriptor hits_addend 0: a check that consumes nothing
    let mut peek = d();
    peek.hits_addend = Some(0);
    for _ in 0..3 {
        let r = ask(&mut c, "api", vec![peek.clone()], 5).await;
        assert_eq!(overall(&r), Code::Ok);
        assert_eq!(r.statuses[0].limit_remaining, 2);
    }
    // per-descriptor hits_addend overrides the request's
    let mut two = d();
    two.hits_addend = Some(2);
    let r = ask(&mut c, "api", vec![two], 9).await;
    assert_eq!((overall(&r), r.statuses[0].limit_remaining), (Code::Ok, 0));
    let r = ask(&mut c, "api", vec![desc(&[("tenant", "t1")])], 0).await;
    assert!(r.statuses[0].current_limit.is_none());
    // wildcard: /v1/* (1 per minute, per value)
    let r = ask(&mut c, "api", vec![desc(&[("path", "/v1/a")])], 0).await;
    assert_eq!(overall(&r), Code::Ok);
    let r = ask(&mut c, "api", vec![desc(&[("path", "/v1/a")])], 0).await;
    assert_eq!(overall(&r), Code::OverLimit);
    let r = ask(&mut c, "api", vec![desc(&[("path", "/v1/b")])], 0).await;
    assert_eq!(overall(&r), Code::Ok);
    // unlimited
    for _ in 0..10 {
        let r = ask(&mut c, "api", vec![desc(&[("path", "/free")])], 0).await;
        assert_eq!(overall(&r), Code::Ok);
        assert_eq!(r.statuses[0].limit_remaining, u32::MAX);
    }
}

#[tokio::test]
async fn limit_override_and_shadow_mode() {
    let mut c = serve(memory(ServiceOptions::default())).await;
    let mut o = desc(&[("remote_address", "9.9.9.9")]);
    o.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 4, // DAY
    });
    let r = ask(&mut c, "api", vec![o.clone()], 0).await;
    assert_eq!(overall(&r), Code::Ok);
    let l = r.statuses[0].current_limit.as_ref().expect("limit");
    assert_eq!((l.requests_per_unit, l.unit), (1, 4));
    let r = ask(&mut c, "api", vec![o], 0).await;
    assert_eq!(overall(&r), Code::OverLimit);
    // the configured limit of the same descriptor counts apart
    let r = ask(
        &mut c,
        "api",
        vec![desc(&[("remote_address", "9.9.9.9")])],
        0,
    )
    .await;
    assert_eq!(r.statuses[0].limit_remaining, 2);
    // shadow: counts, reports, never denies
    for _ in 0..3 {
        let r = ask(&mut c, "api", vec![desc(&[("path", "/shadow")])], 0).await;
        assert_eq!(overall(&r), Code::Ok);
        assert_eq!(code(&r.statuses[0]), Code::Ok);
    }
    let r = ask(&mut c, "api", vec![desc(&[("path", "/shadow")])], 0).await;
    assert_eq!(r.statuses[0].limit_remaining, 0);
    assert!(header(&r, "retry-after").is_none());
}

#[tokio::test]
async fn a_denied_request_consumes_nothing_anywhere() {
    // (`--charge over`: by default, `always`, ip would record them too)
    let mut c = serve(memory(ServiceOptions::default().charge(Charge::Over))).await;
    let ip = || desc(&[("remote_address", "1.2.3.4")]);
    let login = || desc(&[("path", "/login")]);
    // spend login (2 per minute)
    for _ in 0..2 {
        let r = ask(&mut c, "api", vec![login()], 0).await;
        assert_eq!(overall(&r), Code::Ok);
    }
    let r = ask(&mut c, "api", vec![ip()], 0).await;
    assert_eq!(r.statuses[0].limit_remaining, 2);
    // ip allowed, login over: the request is denied and ip keeps its 2
    for _ in 0..5 {
        let r = ask(&mut c, "api", vec![ip(), login()], 0).await;
        assert_eq!(overall(&r), Code::OverLimit);
        assert_eq!(code(&r.statuses[0]), Code::Ok);
        assert_eq!(code(&r.statuses[1]), Code::OverLimit);
        assert_eq!(r.statuses[0].limit_remaining, 2);
    }
    let mut peek = ip();
    peek.hits_addend = Some(0);
    let r = ask(&mut c, "api", vec![peek], 0).await;
    assert_eq!(r.statuses[0].limit_remaining, 2);
}

#[tokio::test]
async fn headers_on_off() {
    let mut c = serve(memory(ServiceOptions::default().headers(true))).await;
    let r = ask(&mut c, "api", vec![desc(&[("path", "/login")])], 0).await;
    let policy = header(&r, "ratelimit-policy").expect("policy");
    assert!(policy.contains(";q=2;w=60"), "{policy}");
    let rl = header(&r, "ratelimit").expect("ratelimit");
    assert!(rl.contains(";r=1;t="), "{rl}");
    assert!(header(&r, "retry-after").is_none());
    ask(&mut c, "api", vec![desc(&[("path", "/login")])], 0).await;
    let r = ask(&mut c, "api", vec![desc(&[("path", "/login")])], 0).await;
    assert_eq!(overall(&r), Code::OverLimit);
    let secs: u64 = header(&r, "retry-after")
        .expect("retry-after")
        .parse()
        .expect("seconds");
    assert!((1..=60).contains(&secs));
    // off
    let mut c = serve(memory(ServiceOptions::default().headers(false))).await;
    let r = ask(&mut c, "api", vec![desc(&[("path", "/login")])], 0).await;
    assert!(r.response_headers_to_add.is_empty());
}

#[tokio::test]
async fn health_is_serving() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_serving::<RateLimitServiceServer<RlsService>>()
        .await;
    let service = memory(ServiceOptions::default());
    tokio::spawn(async move {
        let _keep = reporter;
        tonic::transport::Server::builder()
            .add_service(health)
            .add_service(RateLimitServiceServer::new(service))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
    });
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut h = HealthClient::new(channel);
    for name in ["", "envoy.service.ratelimit.v3.RateLimitService"] {
        let r = h
            .check(HealthCheckRequest {
                service: name.into(),
            })
            .await
            .expect("check")
            .into_inner();
        assert_eq!(r.status, ServingStatus::Serving as i32, "{name:?}");
    }
}

fn redis_service(redis: &Redis) -> RlsService {
    // (1,000 concurrent callers on 2 cores in a debug build: more than the
    // default 100 ms; a timed-out call may or may not have counted)
    let store = RedisStore::from_url(&redis.url())
        .expect("store")
        .timeout(Duration::from_secs(10));
    // (`--charge over`: a denied call takes nothing where it had room)
    RlsService::new(
        config(),
        store,
        ServiceOptions::default().charge(Charge::Over),
    )
    .expect("service")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_all_or_nothing_and_store_errors() {
    let redis = Redis::start();
    let mut c = serve(redis_service(&redis)).await;
    let ip = || desc(&[("remote_address", "5.6.7.8")]);
    let login = || desc(&[("path", "/login")]);
    for _ in 0..2 {
        assert_eq!(
            overall(&ask(&mut c, "api", vec![login()], 0).await),
            Code::Ok
        );
    }
    for _ in 0..3 {
        let r = ask(&mut c, "api", vec![ip(), login()], 0).await;
        assert_eq!(overall(&r), Code::OverLimit);
    }
    let r = ask(&mut c, "api", vec![ip()], 0).await;
    assert_eq!((overall(&r), r.statuses[0].limit_remaining), (Code::Ok, 2));
    // the store goes away: UNAVAILABLE
    drop(redis);
    let e = c
        .should_rate_limit(RateLimitRequest {
            domain: "api".into(),
            descriptors: vec![ip()],
            hits_addend: 0,
            hits_subtrahend: 0,
        })
        .await
        .expect_err("no store");
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
}

/// 4 services (each its own `RedisStore`) on one Redis, 1,000 concurrent
/// callers on one descriptor of 100 per minute: exactly 100 admitted (the
/// callers all fit in one aligned window unless the test straddles a
/// minute's end, when it is retried).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_admit_exactly_the_limit() {
    let redis = Redis::start();
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(serve(redis_service(&redis)).await);
    }
    for attempt in 0.. {
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs();
        let key = format!("k{attempt}");
        let mut tasks = Vec::new();
        for i in 0..1_000 {
            let mut c = clients[i % 4].clone();
            let key = key.clone();
            tasks.push(tokio::spawn(async move {
                let r = ask(&mut c, "api", vec![desc(&[("hot", &key)])], 0).await;
                overall(&r) == Code::Ok
            }));
        }
        let mut admitted = 0;
        for t in tasks {
            admitted += usize::from(t.await.expect("task"));
        }
        let ended = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs();
        if started / 60 != ended / 60 && attempt < 3 {
            continue;
        }
        assert_eq!(admitted, 100);
        break;
    }
}
