//! Every request the inner service sees carries a `RateLimitOutcome`: a
//! handler extracting it answers 200 whatever the
//! limiter did (decided, fell back, was bypassed, skipped the key, or could
//! not reach its store). On the memory store under a manual clock, except a
//! store that fails, which is a private redis-server, killed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use axum::{Extension, http::request::Parts};
use common::RedisServer;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use tower::ServiceExt;
use tower_redis_ratelimit::error::StoreError;
use tower_redis_ratelimit::middleware::{FailurePolicy, MissingKey, RateLimitOutcome};
use tower_redis_ratelimit::{
    Decision, MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter, RedisStore,
};

/// A store timeout no loaded test machine reaches (a killed Redis refuses
/// connections at once: no timeout is involved in the failures here).
const GENEROUS: Duration = Duration::from_secs(10);

fn quota() -> Quota {
    Quota::fixed_window(Rate::per_minute(5)).name("minute")
}

/// A limiter on `store` under a manual clock.
fn memory_limiter(store: &MemoryStore, prefix: &str) -> RateLimiter {
    common::memory::limiter_on(store, &common::memory::clock(), prefix, [quota()])
}

fn limiter(redis: &RedisServer, prefix: &str) -> RateLimiter {
    RateLimiter::builder()
        .store(RedisStore::new(redis.pool(2)).timeout(GENEROUS))
        .prefix(prefix)
        .quota(quota())
        .build()
        .unwrap()
}

/// The handler: extracts the outcome (never a 500) and says what it was.
async fn show(outcome: RateLimitOutcome, decision: Option<Decision>) -> String {
    // The Decision extractor finds one exactly when the outcome holds one.
    assert_eq!(outcome.decision(), decision.as_ref(), "{outcome:?}");
    match &outcome {
        RateLimitOutcome::Allowed(d) => format!("allowed remaining={}", d.remaining()),
        RateLimitOutcome::Fallback {
            decision, error, ..
        } => {
            assert!(matches!(
                **error,
                StoreError::Redis(_) | StoreError::Pool(_)
            ));
            format!("fallback remaining={}", decision.remaining())
        }
        RateLimitOutcome::Bypassed => "bypassed".to_owned(),
        RateLimitOutcome::Skipped => "skipped".to_owned(),
        RateLimitOutcome::StoreUnavailable { error, .. } => {
            assert_eq!(
                outcome.store_error().map(ToString::to_string),
                Some(error.to_string())
            );
            "store unavailable".to_owned()
        }
        other => format!("unexpected {other:?}"),
    }
}

/// `/` is limited by a key; `/health` is bypassed; `/anonymous` has no key.
fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(show))
        .route("/health", get(show))
        .route("/anonymous", get(show))
        .layer(layer)
}

fn layer(limiter: RateLimiter) -> RateLimitLayer {
    let extractor = |parts: &Parts| (parts.uri.path() != "/anonymous").then(|| "client".to_owned());
    RateLimitLayer::new(limiter, extractor)
        .bypass(|parts: &Parts| parts.uri.path() == "/health")
        .on_missing_key(MissingKey::skip())
}

async fn get_text(app: &Router, path: &str) -> (StatusCode, String) {
    let res: Response<Body> = app
        .clone()
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = res.status();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

#[tokio::test]
async fn a_decided_request_carries_its_decision_as_the_outcome() {
    let app = app(layer(memory_limiter(
        &MemoryStore::new(),
        "outcome-decided",
    )));
    assert_eq!(
        get_text(&app, "/").await,
        (StatusCode::OK, "allowed remaining=4".to_owned())
    );
    assert_eq!(
        get_text(&app, "/").await,
        (StatusCode::OK, "allowed remaining=3".to_owned())
    );
}

#[tokio::test]
async fn bypassed_and_skipped_requests_carry_their_outcome() {
    let store = MemoryStore::new();
    let app = app(layer(memory_limiter(&store, "outcome-pass")));
    assert_eq!(
        get_text(&app, "/health").await,
        (StatusCode::OK, "bypassed".to_owned())
    );
    assert_eq!(
        get_text(&app, "/anonymous").await,
        (StatusCode::OK, "skipped".to_owned())
    );
    assert!(store.is_empty(), "no store call");
}

#[tokio::test]
async fn a_store_failure_under_the_open_policy_is_a_store_unavailable_outcome() {
    let mut redis = RedisServer::start();
    let layer = layer(limiter(&redis, "outcome-open")).on_store_error(FailurePolicy::Open);
    let app = app(layer.clone());
    redis.kill();
    for _ in 0..3 {
        assert_eq!(
            get_text(&app, "/").await,
            (StatusCode::OK, "store unavailable".to_owned())
        );
    }
    assert_eq!(layer.stats().store_errors, 3);
    // Requests that never ask the store keep their own outcome.
    assert_eq!(get_text(&app, "/health").await.1, "bypassed");
    assert_eq!(get_text(&app, "/anonymous").await.1, "skipped");
}

#[tokio::test]
async fn a_store_failure_under_the_fallback_policy_is_a_fallback_outcome_with_its_decision() {
    let mut redis = RedisServer::start();
    let layer = layer(limiter(&redis, "outcome-fallback"))
        .on_store_error(FailurePolicy::Fallback(MemoryStore::new()));
    let app = app(layer.clone());
    redis.kill();
    assert_eq!(
        get_text(&app, "/").await,
        (StatusCode::OK, "fallback remaining=4".to_owned())
    );
    assert_eq!(
        get_text(&app, "/").await,
        (StatusCode::OK, "fallback remaining=3".to_owned())
    );
    assert_eq!(layer.stats().fallback_decisions, 2);
}

#[tokio::test]
async fn a_handler_extracting_the_decision_alone_fails_without_one_as_documented() {
    // `Decision` is a required extractor: 500 without a decision (a bypassed
    // route here), with a body that says what to take instead. The outcome
    // (above) is the extractor that always works.
    let app = Router::new()
        .route(
            "/health",
            get(|d: Decision| async move { d.remaining().to_string() }),
        )
        .route(
            "/",
            get(|d: Decision| async move { d.remaining().to_string() }),
        )
        .layer(layer(memory_limiter(
            &MemoryStore::new(),
            "outcome-decision",
        )));
    assert_eq!(get_text(&app, "/").await, (StatusCode::OK, "4".to_owned()));
    let (status, body) = get_text(&app, "/health").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(body.contains("Option<Decision>"), "{body}");
}

#[tokio::test]
async fn the_decision_is_not_an_extension_of_its_own() {
    // One extension per request: `Extension<Decision>` finds nothing (the
    // decision is inside the outcome), and a route without the layer has
    // neither, which the extractors answer with 500 or `None`.
    let app = Router::new()
        .route(
            "/",
            get(|d: Option<Extension<Decision>>| async move { d.is_some().to_string() }),
        )
        .route(
            "/outcome",
            get(|o: RateLimitOutcome| async move { o.decision().is_some().to_string() }),
        )
        .layer(layer(memory_limiter(&MemoryStore::new(), "outcome-one")));
    assert_eq!(
        get_text(&app, "/").await,
        (StatusCode::OK, "false".to_owned())
    );
    assert_eq!(
        get_text(&app, "/outcome").await,
        (StatusCode::OK, "true".to_owned())
    );
    let bare = Router::new()
        .route(
            "/",
            get(|o: RateLimitOutcome| async move { format!("{o:?}") }),
        )
        .route(
            "/optional",
            get(
                |o: Option<RateLimitOutcome>, d: Option<Decision>| async move {
                    format!("{} {}", o.is_some(), d.is_some())
                },
            ),
        );
    let (status, body) = get_text(&bare, "/").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(body.contains("RateLimitLayer"), "{body}");
    assert_eq!(
        get_text(&bare, "/optional").await,
        (StatusCode::OK, "false false".to_owned())
    );
}
