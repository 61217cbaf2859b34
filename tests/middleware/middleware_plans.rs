//! The middleware with plans, shadow mode and the near-limit hook: on the
//! memory store under a manual clock, and shadow mode on Redis too.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use common::http::{header, send, text};
use common::{GENEROUS, RedisServer};
use http::request::Parts;
use http::{Request, StatusCode};
use tower_redis_ratelimit::clock::ManualClock;
use tower_redis_ratelimit::middleware::{NearLimit, PlanFromExtension, RateLimitOutcome};
use tower_redis_ratelimit::plans::{ActivePlan, Plan, Plans, PlansConfig};
use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter, RedisStore};

/// What an API-key lookup put in the request.
#[derive(Clone)]
struct Tier(&'static str);

impl AsRef<str> for Tier {
    fn as_ref(&self) -> &str {
        self.0
    }
}

fn clock() -> ManualClock {
    ManualClock::new(Duration::from_secs(3_600))
}

fn tiers() -> PlansConfig {
    PlansConfig::new("free")
        .plan(
            "free",
            Plan::new([Quota::fixed_window(Rate::per_minute(2)).name("minute")]),
        )
        .plan(
            "pro",
            Plan::new([Quota::fixed_window(Rate::per_minute(4)).name("minute")]),
        )
        .plan("internal", Plan::unlimited())
}

/// `GET /` answers "<outcome> <plan>"; the request's tier comes from `?tier=`
/// (as an earlier authentication layer would put it in the extensions).
fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route(
            "/",
            get(
                |axum::Extension(o): axum::Extension<RateLimitOutcome>,
                 plan: Option<axum::Extension<Arc<ActivePlan>>>,
                 near: Option<axum::Extension<NearLimit>>| async move {
                    let what = match &o {
                        RateLimitOutcome::Allowed(_) => "allowed",
                        RateLimitOutcome::ShadowDenied(_) => "shadow-denied",
                        RateLimitOutcome::Unlimited => "unlimited",
                        _ => "other",
                    };
                    let plan = plan.as_ref().map_or("-", |p| p.0.name());
                    let near = if near.is_some() { " near" } else { "" };
                    format!("{what} {plan}{near}")
                },
            ),
        )
        .layer(layer)
        .layer(axum::middleware::from_fn(
            |mut req: axum::extract::Request, next: axum::middleware::Next| async move {
                let tier = match req.uri().query() {
                    Some("tier=pro") => Some(Tier("pro")),
                    Some("tier=internal") => Some(Tier("internal")),
                    Some("tier=gold") => Some(Tier("gold")),
                    _ => None,
                };
                if let Some(t) = tier {
                    req.extensions_mut().insert(t);
                }
                next.run(req).await
            },
        ))
}

fn get_req(uri: &str) -> Request<Body> {
    Request::get(uri).body(Body::empty()).unwrap()
}

fn plans(clock: &ManualClock, prefix: &str) -> Plans {
    Plans::builder()
        .store(MemoryStore::new())
        .prefix(prefix)
        .clock(clock.clone())
        .config(tiers())
        .build()
        .unwrap()
}

fn user(_: &Parts) -> Option<&'static str> {
    Some("user-1")
}

#[tokio::test]
async fn each_request_is_limited_under_its_plan_in_one_layer() {
    let clock = clock();
    let layer = RateLimitLayer::with_plans(
        plans(&clock, "layer"),
        user,
        PlanFromExtension::<Tier>::new(),
    );
    let app = app(layer.clone());
    for _ in 0..2 {
        let res = send(&app, get_req("/")).await;
        assert_eq!(
            header(&res, "ratelimit-policy"),
            Some(r#""minute";q=2;w=60"#)
        );
        assert_eq!(text(res).await, "allowed free");
    }
    assert_eq!(
        send(&app, get_req("/")).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // unknown plan: the default's state
    assert_eq!(
        send(&app, get_req("/?tier=gold")).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // pro: its own quota and state
    for _ in 0..4 {
        let res = send(&app, get_req("/?tier=pro")).await;
        assert_eq!(
            header(&res, "ratelimit-policy"),
            Some(r#""minute";q=4;w=60"#)
        );
        assert_eq!(text(res).await, "allowed pro");
    }
    assert_eq!(
        send(&app, get_req("/?tier=pro")).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // internal: unlimited, no headers
    for _ in 0..20 {
        let res = send(&app, get_req("/?tier=internal")).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert!(res.headers().get("ratelimit").is_none());
        assert_eq!(text(res).await, "unlimited internal");
    }
}

#[tokio::test]
async fn a_raised_plan_admits_at_once_despite_a_cached_denial() {
    let clock = clock();
    let plans = plans(&clock, "cached");
    let handle = plans.handle();
    let app = app(RateLimitLayer::with_plans(
        plans,
        user,
        PlanFromExtension::<Tier>::new(),
    ));
    for _ in 0..2 {
        assert_eq!(send(&app, get_req("/")).await.status(), StatusCode::OK);
    }
    for _ in 0..3 {
        // the second one on comes from the deny cache
        assert_eq!(
            send(&app, get_req("/")).await.status(),
            StatusCode::TOO_MANY_REQUESTS
        );
    }
    handle
        .set_plan(
            "free",
            Plan::new([Quota::fixed_window(Rate::per_minute(3)).name("minute")]),
        )
        .unwrap();
    assert_eq!(send(&app, get_req("/")).await.status(), StatusCode::OK);
    assert_eq!(
        send(&app, get_req("/")).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // lowered: denied at once
    handle.replace(tiers()).unwrap();
    let res = send(&app, get_req("/")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
}

fn limiter_on(
    store: impl tower_redis_ratelimit::store::Store,
    clock: &ManualClock,
    prefix: &str,
) -> RateLimiter {
    RateLimiter::builder()
        .store(store)
        .prefix(prefix)
        .clock(clock.clone())
        .quota(Quota::fixed_window(Rate::per_minute(2)).name("minute"))
        .build()
        .unwrap()
}

async fn shadowed_denials_are_counted_and_never_block(limiter: RateLimiter) {
    let layer = RateLimitLayer::new(limiter, user).shadow(true);
    let app = app(layer.clone());
    for i in 0..6 {
        let res = send(&app, get_req("/")).await;
        assert_eq!(res.status(), StatusCode::OK, "#{i}");
        assert!(res.headers().get("retry-after").is_none());
        let remaining = if i < 2 { 1 - i } else { 0 };
        assert_eq!(
            header(&res, "ratelimit"),
            Some(format!(r#""minute";r={remaining};t=60"#).as_str()),
            "#{i}: the headers it would have had"
        );
        let expected = if i < 2 {
            "allowed -"
        } else {
            "shadow-denied -"
        };
        assert_eq!(text(res).await, expected, "#{i}");
    }
    let stats = layer.stats();
    assert_eq!(stats.shadow_denied, 4);
    assert_eq!(stats.denied, 0);
    assert_eq!(stats.deny_cache_hits, 0);
}

#[tokio::test]
async fn shadowed_denials_are_counted_and_never_block_in_memory() {
    let clock = clock();
    shadowed_denials_are_counted_and_never_block(limiter_on(MemoryStore::new(), &clock, "shadow"))
        .await;
}

#[tokio::test]
async fn shadowed_denials_are_counted_and_never_block_on_redis() {
    let server = RedisServer::start();
    let clock = clock();
    let store = RedisStore::new(server.pool(2)).timeout(GENEROUS);
    shadowed_denials_are_counted_and_never_block(limiter_on(store, &clock, "shadow")).await;
}

#[tokio::test]
async fn shadow_headers_can_be_left_off_and_a_plan_can_be_shadowed_alone() {
    let clock = clock();
    let app1 = app(
        RateLimitLayer::new(limiter_on(MemoryStore::new(), &clock, "quiet"), user)
            .shadow(true)
            .shadow_headers(false),
    );
    for _ in 0..2 {
        send(&app1, get_req("/")).await;
    }
    let res = send(&app1, get_req("/")).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert!(res.headers().get("ratelimit").is_none());

    let config = tiers().plan(
        "pro",
        Plan::new([Quota::fixed_window(Rate::per_minute(1)).name("minute")]).shadow(true),
    );
    let plans = Plans::builder()
        .store(MemoryStore::new())
        .clock(clock.clone())
        .config(config)
        .build()
        .unwrap();
    let layer = RateLimitLayer::with_plans(plans, user, PlanFromExtension::<Tier>::new());
    let app2 = app(layer.clone());
    assert_eq!(
        text(send(&app2, get_req("/?tier=pro")).await).await,
        "allowed pro"
    );
    for _ in 0..3 {
        let res = send(&app2, get_req("/?tier=pro")).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(text(res).await, "shadow-denied pro");
    }
    for _ in 0..2 {
        send(&app2, get_req("/")).await;
    }
    assert_eq!(
        send(&app2, get_req("/")).await.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "free is enforced"
    );
    assert_eq!(layer.stats().shadow_denied, 3);
}

#[tokio::test]
async fn the_request_that_crosses_the_near_limit_fraction_is_flagged_once() {
    let clock = clock();
    let limiter = RateLimiter::builder()
        .store(MemoryStore::new())
        .clock(clock.clone())
        .quota(Quota::fixed_window(Rate::per_minute(10)).name("minute"))
        .build()
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let layer = RateLimitLayer::new(limiter, user)
        .near_limit(0.8)
        .on_near_limit(move |_: &Parts, near: &NearLimit| {
            assert_eq!(near.quota, "minute");
            assert_eq!((near.limit, near.remaining, near.threshold), (10, 2, 8));
            seen.fetch_add(1, Ordering::Relaxed);
        });
    let app = app(layer);
    for i in 1..=10 {
        let body = text(send(&app, get_req("/")).await).await;
        let expected = if i == 8 {
            "allowed - near"
        } else {
            "allowed -"
        };
        assert_eq!(body, expected, "request #{i}");
    }
    assert_eq!(calls.load(Ordering::Relaxed), 1);
    // the next window: once again
    clock.advance(Duration::from_secs(60));
    for _ in 0..8 {
        send(&app, get_req("/")).await;
    }
    assert_eq!(calls.load(Ordering::Relaxed), 2);
}

/// `Quota::shadow`: one quota of a limiter in shadow mode, in one store call.
/// An allowed request that the shadow quota would have denied reaches the
/// service as `ShadowDenied`, counted apart; the enforced quota still denies.
#[tokio::test]
async fn a_shadow_quota_of_a_limiter_yields_shadow_denied_and_never_blocks() {
    let clock = clock();
    let limiter = RateLimiter::builder()
        .store(MemoryStore::new())
        .prefix("shadow-quota")
        .clock(clock.clone())
        .quota(Quota::fixed_window(Rate::per_minute(4)).name("minute"))
        .quota(
            Quota::fixed_window(Rate::per_minute(2))
                .name("new")
                .shadow(true),
        )
        .build()
        .unwrap();
    let layer = RateLimitLayer::new(limiter, user);
    let app = app(layer.clone());
    for (i, (status, outcome)) in [
        (StatusCode::OK, "allowed -"),
        (StatusCode::OK, "allowed -"),
        (StatusCode::OK, "shadow-denied -"),
        (StatusCode::OK, "shadow-denied -"),
        (StatusCode::TOO_MANY_REQUESTS, ""),
    ]
    .into_iter()
    .enumerate()
    {
        let res = send(&app, get_req("/")).await;
        assert_eq!(res.status(), status, "#{i}");
        // the enforced quota's headers; the shadow quota is no policy of the client's
        assert_eq!(
            header(&res, "ratelimit-policy"),
            Some(r#""minute";q=4;w=60"#)
        );
        let remaining = 3usize.saturating_sub(i);
        assert_eq!(
            header(&res, "ratelimit"),
            Some(format!(r#""minute";r={remaining};t=60"#).as_str()),
            "#{i}"
        );
        if status == StatusCode::OK {
            assert!(res.headers().get("retry-after").is_none());
            assert_eq!(text(res).await, outcome, "#{i}");
        }
    }
    let stats = layer.stats();
    assert_eq!(stats.shadow_denied, 2);
    assert_eq!(stats.denied, 1);
}

/// A leaky bucket of one request per `period`, a queue of 3: the second
/// request's slot is one period away, the fourth is beyond the queue.
fn queue(period: Duration) -> Quota {
    Quota::leaky_bucket(Rate::new(1, period))
        .burst(3)
        .name("queue")
}

/// `GET /` answers what shadow mode did: the outcome, the wait it spared in
/// seconds, and whether the decision inside reports a shadow denial.
fn shadow_app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route(
            "/",
            get(
                |axum::Extension(o): axum::Extension<RateLimitOutcome>| async move {
                    let what = match &o {
                        RateLimitOutcome::Allowed(_) => "allowed",
                        RateLimitOutcome::ShadowDelayed(_) => "shadow-delayed",
                        RateLimitOutcome::ShadowDenied(_) => "shadow-denied",
                        _ => "other",
                    };
                    let spared = o
                        .would_have_delayed()
                        .map_or("-".to_owned(), |d| d.as_secs().to_string());
                    let d = o.decision().unwrap();
                    assert_eq!(
                        o.would_have_denied(),
                        d.shadow_denied(),
                        "one idea, one name"
                    );
                    format!("{what} spared={spared} shadow_denied={}", d.shadow_denied())
                },
            ),
        )
        .layer(layer)
        .layer(axum::middleware::from_fn(
            |mut req: axum::extract::Request, next: axum::middleware::Next| async move {
                if req.uri().query() == Some("tier=pro") {
                    req.extensions_mut().insert(Tier("pro"));
                }
                next.run(req).await
            },
        ))
}

/// Five requests at one manual instant through a shadowed leaky bucket of
/// one request per `period`: none waits (each answered before `bound`, far
/// below the first delay, or in paused time at once), none is denied; the
/// outcome reports the delays spared and the denials let through.
async fn shadow_never_delays(app: &Router, uri: &str, period: Duration, bound: Duration) {
    let start = tokio::time::Instant::now();
    let mut seen = Vec::new();
    for i in 0..5 {
        let res = tokio::time::timeout(bound, send(app, get_req(uri)))
            .await
            .unwrap_or_else(|_| panic!("#{i} was held back: shadow mode delayed it"));
        assert_eq!(res.status(), StatusCode::OK, "#{i}");
        assert!(res.headers().get("retry-after").is_none(), "#{i}");
        seen.push(text(res).await);
    }
    let p = period.as_secs();
    assert_eq!(
        seen,
        [
            "allowed spared=- shadow_denied=false".to_owned(),
            format!("shadow-delayed spared={p} shadow_denied=false"),
            format!("shadow-delayed spared={} shadow_denied=false", 2 * p),
            "shadow-denied spared=- shadow_denied=true".to_owned(),
            "shadow-denied spared=- shadow_denied=true".to_owned(),
        ]
    );
    assert!(start.elapsed() < bound);
}

/// Shadow mode never acts: a shadowed leaky bucket (a layer's, a plan's)
/// lets each request through at once, reporting the delay it would have
/// imposed (paused tokio time: a sleep would show as time passed).
#[tokio::test(start_paused = true)]
async fn shadow_mode_never_delays_a_request_and_reports_the_wait_it_spared_in_memory() {
    let clock = clock();
    let minute = Duration::from_secs(60);
    let limiter = RateLimiter::builder()
        .store(MemoryStore::new())
        .prefix("shadow-leaky")
        .clock(clock.clone())
        .quota(queue(minute))
        .build()
        .unwrap();
    let layer = RateLimitLayer::new(limiter, user).shadow(true);
    let app = shadow_app(layer.clone());
    // (paused time: any wait at all would be seen)
    shadow_never_delays(&app, "/", minute, Duration::from_millis(1)).await;
    assert_eq!(layer.stats().shadow_denied, 2);
    assert_eq!(layer.stats().denied, 0);

    let config = tiers().plan("pro", Plan::new([queue(minute)]).shadow(true));
    let plans = Plans::builder()
        .store(MemoryStore::new())
        .prefix("shadow-leaky-plan")
        .clock(clock.clone())
        .config(config)
        .build()
        .unwrap();
    let layer = RateLimitLayer::with_plans(plans, user, PlanFromExtension::<Tier>::new());
    shadow_never_delays(
        &shadow_app(layer),
        "/?tier=pro",
        minute,
        Duration::from_millis(1),
    )
    .await;
}

/// The same through a Redis store (the middleware's asynchronous path):
/// delays of an hour and more, none waited (each request answered within
/// a minute of real time).
#[tokio::test]
async fn shadow_mode_never_delays_a_request_and_reports_the_wait_it_spared_on_redis() {
    let server = RedisServer::start();
    let clock = clock();
    let hour = Duration::from_secs(3_600);
    let limiter = RateLimiter::builder()
        .store(RedisStore::new(server.pool(2)).timeout(GENEROUS))
        .prefix("shadow-leaky")
        .clock(clock.clone())
        .quota(queue(hour))
        .build()
        .unwrap();
    let app = shadow_app(RateLimitLayer::new(limiter, user).shadow(true));
    shadow_never_delays(&app, "/", hour, Duration::from_secs(60)).await;

    let config = tiers().plan("pro", Plan::new([queue(hour)]).shadow(true));
    let plans = Plans::builder()
        .store(RedisStore::new(server.pool(2)).timeout(GENEROUS))
        .prefix("shadow-leaky-plan")
        .clock(clock.clone())
        .config(config)
        .build()
        .unwrap();
    let layer = RateLimitLayer::with_plans(plans, user, PlanFromExtension::<Tier>::new());
    shadow_never_delays(
        &shadow_app(layer),
        "/?tier=pro",
        hour,
        Duration::from_secs(60),
    )
    .await;
}

/// Operator actions through the deny cache.
mod operator {
    use super::*;

    /// A limiter of 2 per minute on `store`, that blocks if `blocks`.
    fn limiter(
        store: impl tower_redis_ratelimit::store::Store,
        clock: &ManualClock,
        blocks: bool,
    ) -> RateLimiter {
        let b = RateLimiter::builder()
            .store(store)
            .prefix(if blocks { "ops-b" } else { "ops" })
            .clock(clock.clone())
            .quota(Quota::fixed_window(Rate::per_minute(2)).name("minute"));
        if blocks { b.blocking() } else { b }.build().unwrap()
    }

    async fn status(app: &Router) -> StatusCode {
        send(app, get_req("/")).await.status()
    }

    /// Spends the key's two requests; the next is denied, and the one after
    /// that comes from the deny cache.
    async fn deny_from_the_cache(app: &Router, layer: &RateLimitLayer) {
        while status(app).await == StatusCode::OK {}
        let hits = layer.stats().deny_cache_hits;
        assert_eq!(status(app).await, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(layer.stats().deny_cache_hits, hits + 1, "from the cache");
    }

    /// Each admin operation holds on the next request of the layer over the
    /// limiter that made it, and on another instance's (another limiter of
    /// the same configuration and store) once its cached denial is a second
    /// old.
    async fn admin_operations_hold_on_the_next_request(
        make: impl Fn() -> RateLimiter,
        clock: &ManualClock,
        what: &str,
    ) {
        let (here, there) = (make(), make());
        let layer = RateLimitLayer::new(here.clone(), user);
        let other = RateLimitLayer::new(there, user);
        let (app, other_app) = (super::app(layer.clone()), super::app(other.clone()));
        let key = "user-1";
        type Op<'a> = Box<dyn Fn() -> futures_like::Boxed<'a> + 'a>;
        let ops: Vec<(&str, Op<'_>)> = vec![
            (
                "reward",
                Box::new(|| Box::pin(async { here.reward(key, 1).await.unwrap() })),
            ),
            (
                "reset",
                Box::new(|| Box::pin(async { here.reset(key).await.unwrap() })),
            ),
            (
                "set_remaining",
                Box::new(|| Box::pin(async { here.set_remaining(key, 2).await.unwrap() })),
            ),
        ];
        for (name, op) in &ops {
            clock.advance(Duration::from_secs(60));
            deny_from_the_cache(&app, &layer).await;
            deny_from_the_cache(&other_app, &other).await;
            op().await;
            assert_eq!(status(&app).await, StatusCode::OK, "{what}: {name}, here");
            // the other instance: denied from its cache for up to a second
            assert_eq!(
                status(&other_app).await,
                StatusCode::TOO_MANY_REQUESTS,
                "{what}: {name}, there"
            );
            clock.advance(Duration::from_secs(1));
            let there = status(&other_app).await;
            // (reset and set_remaining(2) left one request; the reward's
            // unit went to the request here)
            let expected = if *name == "reward" {
                StatusCode::TOO_MANY_REQUESTS
            } else {
                StatusCode::OK
            };
            assert_eq!(there, expected, "{what}: {name}, there a second later");
        }
        if here.block(key, Duration::ZERO).await.is_err() {
            return; // (no blocks)
        }
        // a block is cached too now, and an unblock lifts it here at once
        clock.advance(Duration::from_secs(60));
        assert_eq!(status(&app).await, StatusCode::OK);
        here.block(key, Duration::from_secs(3_600)).await.unwrap();
        let res = send(&app, get_req("/")).await;
        assert_eq!(
            res.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "{what}: blocked"
        );
        assert_eq!(header(&res, "retry-after"), Some("3600"), "{what}");
        let hits = layer.stats().deny_cache_hits;
        assert_eq!(status(&app).await, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            layer.stats().deny_cache_hits,
            hits + 1,
            "{what}: from the cache"
        );
        here.unblock(key).await.unwrap();
        assert_eq!(status(&app).await, StatusCode::OK, "{what}: unblocked");
    }

    /// Boxed futures without a dependency.
    mod futures_like {
        pub(super) type Boxed<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'a>>;
    }

    #[tokio::test]
    async fn admin_operations_hold_on_the_next_request_in_memory() {
        let clock = clock();
        let store = MemoryStore::new();
        for blocks in [false, true] {
            let make = || limiter(store.clone(), &clock, blocks);
            admin_operations_hold_on_the_next_request(make, &clock, &format!("memory {blocks}"))
                .await;
        }
    }

    #[tokio::test]
    async fn admin_operations_hold_on_the_next_request_on_redis() {
        let server = RedisServer::start();
        let clock = clock();
        let store = RedisStore::new(server.pool(2)).timeout(GENEROUS);
        for blocks in [false, true] {
            let make = || limiter(store.clone(), &clock, blocks);
            admin_operations_hold_on_the_next_request(make, &clock, &format!("redis {blocks}"))
                .await;
        }
    }
}

/// A layer over a limiter with runtime limits checks every request with the
/// limits in force: its headers, its denials.
#[tokio::test]
async fn a_layer_over_a_limiter_with_runtime_limits_follows_its_changes() {
    let clock = clock();
    let limiter = RateLimiter::builder()
        .store(MemoryStore::new())
        .prefix("runtime")
        .clock(clock.clone())
        .quota(Quota::fixed_window(Rate::per_minute(2)).name("minute"))
        .runtime_limits()
        .build()
        .unwrap();
    let layer = RateLimitLayer::new(limiter.clone(), user);
    let app = app(layer.clone());
    for _ in 0..2 {
        assert_eq!(send(&app, get_req("/")).await.status(), StatusCode::OK);
    }
    let res = send(&app, get_req("/")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(&res, "ratelimit-policy"),
        Some(r#""minute";q=2;w=60"#)
    );
    limiter
        .limits()
        .unwrap()
        .set_quotas([Quota::fixed_window(Rate::per_minute(3)).name("minute")])
        .unwrap();
    let res = send(&app, get_req("/")).await;
    assert_eq!(res.status(), StatusCode::OK, "raised: admitted at once");
    assert_eq!(
        header(&res, "ratelimit-policy"),
        Some(r#""minute";q=3;w=60"#)
    );
    assert_eq!(
        send(&app, get_req("/")).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // the limiter's admin operations reach the layer's cache
    limiter.reward("user-1", 1).await.unwrap();
    assert_eq!(send(&app, get_req("/")).await.status(), StatusCode::OK);
}
