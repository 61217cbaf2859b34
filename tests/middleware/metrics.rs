//! Metrics (feature `metrics`) read back through `metrics-util`'s debugging
//! recorder: one test, since the recorder is process-wide.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::http::{get_req, make_app, send};
use common::{GENEROUS, RedisServer};
use http::StatusCode;
use http::request::Parts;
use metrics_util::CompositeKey;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// What the recorder holds (a snapshot resets its counters: read once, query often).
type Snap = Vec<(
    CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)>;

fn take(s: &Snapshotter) -> Snap {
    s.snapshot().into_vec()
}
use tower_redis_ratelimit::clock::ManualClock;
use tower_redis_ratelimit::middleware::FailurePolicy;
use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter, RedisStore};

fn counter(snap: &Snap, name: &str, labels: &[(&str, &str)]) -> u64 {
    let mut total = 0;
    for (key, _, _, value) in snap {
        let key = key.key();
        if key.name() != name {
            continue;
        }
        let has = |k: &str, v: &str| key.labels().any(|l| l.key() == k && l.value() == v);
        if labels.iter().all(|(k, v)| has(k, v))
            && let DebugValue::Counter(n) = *value
        {
            total += n;
        }
    }
    total
}

fn histogram_len(snap: &Snap, name: &str, limiter: &str) -> usize {
    snap.iter()
        .filter(|(k, ..)| k.key().name() == name && k.key().labels().any(|l| l.value() == limiter))
        .map(|(.., v)| match v {
            DebugValue::Histogram(h) => h.len(),
            _ => 0,
        })
        .sum()
}

fn gauge(snap: &Snap, name: &str, limiter: &str) -> f64 {
    snap.iter()
        .filter(|(k, ..)| k.key().name() == name && k.key().labels().any(|l| l.value() == limiter))
        .map(|(.., v)| match v {
            DebugValue::Gauge(g) => g.into_inner(),
            _ => 0.0,
        })
        .sum()
}

fn user(_: &Parts) -> Option<&'static str> {
    Some("u")
}

#[tokio::test]
async fn outcomes_latency_deny_cache_hits_and_leases_are_recorded_by_limiter_and_quota() {
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    recorder.install().unwrap();
    let clock = ManualClock::new(Duration::from_secs(3_600));

    // memory store: allowed, denied, deny-cache hits, shadow, bypass
    let limiter = RateLimiter::builder()
        .store(MemoryStore::new())
        .clock(clock.clone())
        .quota(Quota::fixed_window(Rate::per_minute(2)).name("minute"))
        .build()
        .unwrap();
    let layer = RateLimitLayer::new(limiter.clone(), user)
        .name("mem")
        .bypass(|p: &Parts| p.uri.path() == "/health");
    let app = make_app(layer);
    for _ in 0..5 {
        send(&app, get_req("/")).await;
    }
    send(&app, get_req("/health")).await;
    let shadow = make_app(
        RateLimitLayer::new(limiter, user)
            .name("shadow")
            .shadow(true),
    );
    for _ in 0..2 {
        assert_eq!(send(&shadow, get_req("/")).await.status(), StatusCode::OK);
    }
    let now = take(&snap);
    let c = |labels: &[(&str, &str)]| counter(&now, "ratelimit_decisions_total", labels);
    let mem = ("limiter", "mem");
    assert_eq!(c(&[mem, ("quota", "minute"), ("outcome", "allowed")]), 2);
    assert_eq!(c(&[mem, ("quota", "minute"), ("outcome", "denied")]), 3);
    assert_eq!(c(&[mem, ("outcome", "bypassed")]), 1);
    assert_eq!(
        counter(
            &now,
            "ratelimit_deny_cache_hits_total",
            &[mem, ("quota", "minute")]
        ),
        2
    );
    assert_eq!(
        c(&[
            ("limiter", "shadow"),
            ("quota", "minute"),
            ("outcome", "shadow_denied")
        ]),
        2
    );

    // shadow mode spares a leaky bucket's delays: counted and measured
    let leaky = RateLimiter::builder()
        .store(MemoryStore::new())
        .clock(clock.clone())
        .prefix("shadow-leaky")
        .quota(
            Quota::leaky_bucket(Rate::per_minute(1))
                .burst(3)
                .name("queue"),
        )
        .build()
        .unwrap();
    let app = make_app(RateLimitLayer::new(leaky, user).name("leaky").shadow(true));
    for _ in 0..3 {
        assert_eq!(send(&app, get_req("/")).await.status(), StatusCode::OK);
    }
    let now = take(&snap);
    let c = |labels: &[(&str, &str)]| counter(&now, "ratelimit_decisions_total", labels);
    let leaky = ("limiter", "leaky");
    assert_eq!(c(&[leaky, ("outcome", "allowed")]), 1);
    assert_eq!(
        c(&[leaky, ("quota", "queue"), ("outcome", "shadow_delayed")]),
        2
    );
    let spared: Vec<f64> = now
        .iter()
        .filter(|(k, ..)| {
            k.key().name() == "ratelimit_shadow_delay_seconds"
                && k.key().labels().any(|l| l.value() == "leaky")
                && k.key()
                    .labels()
                    .any(|l| l.key() == "quota" && l.value() == "queue")
        })
        .flat_map(|(.., v)| match v {
            DebugValue::Histogram(h) => h.iter().map(|x| x.into_inner()).collect(),
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(
        spared,
        [60.0, 120.0],
        "the waits shadow mode did not impose"
    );

    // Redis: store-call latency, a store error under each policy, leases
    let server = RedisServer::start();
    let redis_limiter = RateLimiter::builder()
        .store(RedisStore::new(server.pool(2)).timeout(GENEROUS))
        .prefix("leases")
        .quota(Quota::concurrency(5).name("in-flight"))
        .build()
        .unwrap();
    let app = make_app(RateLimitLayer::new(redis_limiter, user).name("redis"));
    for _ in 0..3 {
        assert_eq!(send(&app, get_req("/")).await.status(), StatusCode::OK);
    }
    let now = take(&snap);
    let c = |labels: &[(&str, &str)]| counter(&now, "ratelimit_decisions_total", labels);
    assert_eq!(
        c(&[
            ("limiter", "redis"),
            ("quota", "in-flight"),
            ("outcome", "allowed")
        ]),
        3
    );
    assert_eq!(
        histogram_len(&now, "ratelimit_store_call_seconds", "redis"),
        3
    );
    // every lease was counted, and released once its response was whole
    assert!(
        now.iter()
            .any(|(k, ..)| k.key().name() == "ratelimit_leases")
    );
    assert_eq!(gauge(&now, "ratelimit_leases", "redis"), 0.0);

    let down = RedisStore::from_url("redis://127.0.0.1:1/")
        .unwrap()
        .timeout(Duration::from_secs(2));
    let broken = RateLimiter::builder()
        .store(down)
        .quota(Quota::gcra(Rate::per_minute(5)).name("minute"))
        .build()
        .unwrap();
    for (name, policy, outcome) in [
        ("open", FailurePolicy::Open, "fail_open"),
        ("closed", FailurePolicy::Closed, "fail_closed"),
        (
            "fallback",
            FailurePolicy::Fallback(MemoryStore::new()),
            "fallback_allowed",
        ),
    ] {
        let app = make_app(
            RateLimitLayer::new(broken.clone(), user)
                .name(name)
                .on_store_error(policy),
        );
        send(&app, get_req("/")).await;
        let now = take(&snap);
        let c = |labels: &[(&str, &str)]| counter(&now, "ratelimit_decisions_total", labels);
        assert_eq!(c(&[("limiter", name), ("outcome", outcome)]), 1, "{name}");
        assert_eq!(
            counter(&now, "ratelimit_store_errors_total", &[("limiter", name)]),
            1
        );
        // an outage: not a refusal
        assert_eq!(
            counter(
                &now,
                "ratelimit_store_errors_total",
                &[("limiter", name), ("kind", "refused")]
            ),
            0
        );
    }

    // a refusal (an ACL user without EVALSHA): kind="refused", under the
    // default refusal policy (503) and under Open (through, still counted)
    let mut admin = server.conn().await;
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("refused")
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("+@all")
        .arg("-evalsha")
        .query_async(&mut admin)
        .await
        .unwrap();
    let refused = RateLimiter::builder()
        .store(
            RedisStore::from_url(&format!("redis://refused:pw@127.0.0.1:{}/", server.port()))
                .unwrap()
                .timeout(GENEROUS),
        )
        .quota(Quota::gcra(Rate::per_minute(5)).name("minute"))
        .build()
        .unwrap();
    for (name, policy, status, outcome) in [
        (
            "refused",
            None,
            StatusCode::SERVICE_UNAVAILABLE,
            "fail_closed",
        ),
        (
            "refused-open",
            Some(FailurePolicy::Open),
            StatusCode::OK,
            "fail_open",
        ),
    ] {
        let mut layer = RateLimitLayer::new(refused.clone(), user).name(name);
        if let Some(policy) = policy {
            layer = layer.on_refusal(policy);
        }
        let app = make_app(layer);
        for _ in 0..2 {
            assert_eq!(send(&app, get_req("/")).await.status(), status, "{name}");
        }
        let now = take(&snap);
        let errors = |kind: &str| {
            counter(
                &now,
                "ratelimit_store_errors_total",
                &[("limiter", name), ("kind", kind)],
            )
        };
        assert_eq!(errors("refused"), 2, "{name}");
        assert_eq!(errors("redis") + errors("timeout") + errors("pool"), 0);
        assert_eq!(
            counter(
                &now,
                "ratelimit_decisions_total",
                &[("limiter", name), ("outcome", outcome)]
            ),
            2,
            "{name}"
        );
    }
}
