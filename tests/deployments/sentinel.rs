//! `RedisSentinelStore` against a real Sentinel deployment (one primary, one
//! replica, three sentinels; `tests/common/sentinel.rs`): decisions go on
//! through a `SENTINEL FAILOVER` and through the primary's death, every call
//! during the switch ends within the store timeout with the failure policy
//! applied, and state that had reached the replica before the switch is
//! still there after it.
#![cfg(feature = "sentinel")]

use crate::common;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{MARGIN, RedisSentinel, sentinel::MASTER_NAME};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use tower::{ServiceBuilder, ServiceExt};
use tower_redis_ratelimit::error::StoreError;
use tower_redis_ratelimit::middleware::FailurePolicy;
use tower_redis_ratelimit::{
    Decision, Quota, Rate, RateLimitLayer, RateLimiter, RedisSentinelStore, key,
};

/// The store's bound on one call, asking the sentinels and connecting included.
const STORE_TIMEOUT: Duration = Duration::from_millis(500);
/// How long decisions may take to come back after the sentinels named the new primary.
const RECOVERY: Duration = Duration::from_secs(15);

/// What one call gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Decided,
    Timeout,
    RedisError,
    /// Anything else from the limiter: a bug here.
    OtherError,
    /// A middleware response: 200 or 429 with rate-limit headers.
    Limited(u16),
    /// The failure policy's answer (`FailurePolicy::Closed`): 503.
    Closed,
    /// Any other response: a bug here.
    Unexpected(u16),
}

fn classify(r: &Result<Decision, StoreError>) -> Outcome {
    match r {
        Ok(_) => Outcome::Decided,
        Err(StoreError::Timeout(_)) => Outcome::Timeout,
        Err(StoreError::Redis(_)) => Outcome::RedisError,
        Err(_) => Outcome::OtherError,
    }
}

fn limiter(deployment: &RedisSentinel, prefix: &str) -> RateLimiter {
    let store = RedisSentinelStore::from_urls(deployment.sentinel_urls(), MASTER_NAME)
        .unwrap()
        .timeout(STORE_TIMEOUT);
    RateLimiter::builder()
        .store(store)
        .prefix(prefix)
        .quota(Quota::fixed_window(Rate::per_hour(1_000_000)))
        .build()
        .unwrap()
}

/// Calls the limiter until it answers (connecting may take longer than the
/// timeout on a loaded machine), within `within`.
async fn until_decided(limiter: &RateLimiter, key: &str, within: Duration) -> Decision {
    let deadline = Instant::now() + within;
    loop {
        match limiter.check(key).await {
            Ok(d) => return d,
            Err(e) => assert!(
                Instant::now() < deadline,
                "no decision within {within:?}: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Load on `limiter` while `switch` runs: tasks calling it directly and
/// through the middleware (failing closed), each call timed. Returns every
/// call's duration and outcome.
async fn under_load(limiter: &RateLimiter, switch: impl FnOnce()) -> Vec<(Duration, Outcome)> {
    let layer = RateLimitLayer::new(limiter.clone(), key::Path)
        .on_store_error(FailurePolicy::Closed)
        .deny_cache(false);
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service_fn(|_req: Request<Full<Bytes>>| async {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
        });
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for t in 0..6 {
        let (limiter, svc, stop) = (limiter.clone(), svc.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut i = t;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("/user-{}", i % 32);
                i += 7;
                let started = Instant::now();
                let outcome = if t < 4 {
                    classify(&limiter.check(&key).await)
                } else {
                    let req = Request::get(key.as_str())
                        .body(Full::new(Bytes::new()))
                        .unwrap();
                    let res = svc.clone().oneshot(req).await.unwrap();
                    match res.status() {
                        StatusCode::OK | StatusCode::TOO_MANY_REQUESTS
                            if res.headers().contains_key("ratelimit") =>
                        {
                            Outcome::Limited(res.status().as_u16())
                        }
                        StatusCode::SERVICE_UNAVAILABLE => Outcome::Closed,
                        other => Outcome::Unexpected(other.as_u16()),
                    }
                };
                samples.push((started.elapsed(), outcome));
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            samples
        }));
    }
    // the fixture blocks; the load runs on the other worker meanwhile
    tokio::task::block_in_place(switch);
    stop.store(true, Ordering::Relaxed);
    let mut samples = Vec::new();
    for t in tasks {
        samples.extend(t.await.unwrap());
    }
    samples
}

/// Every call ended within the store timeout, and each was a decision, a
/// store error the failure policy answers, or that policy's 503.
fn assert_bounded_and_policed(samples: &[(Duration, Outcome)]) {
    let mut summary = BTreeMap::new();
    for (_, o) in samples {
        *summary.entry(*o).or_insert(0usize) += 1;
    }
    let slowest = samples.iter().map(|(d, _)| *d).max().unwrap_or_default();
    assert!(
        slowest <= STORE_TIMEOUT + MARGIN,
        "a call took {slowest:?} (timeout {STORE_TIMEOUT:?}): {summary:?}"
    );
    for o in summary.keys() {
        assert!(
            matches!(
                o,
                Outcome::Decided
                    | Outcome::Timeout
                    | Outcome::RedisError
                    | Outcome::Limited(_)
                    | Outcome::Closed
            ),
            "unexpected outcome {o:?}: {summary:?}"
        );
    }
    assert!(
        summary.contains_key(&Outcome::Decided),
        "no decision at all under load: {summary:?}"
    );
}

/// After the switch: decisions come from `primary` (a key decided now
/// exists there), and the state written before it is intact.
async fn assert_served_by(
    deployment: &RedisSentinel,
    limiter: &RateLimiter,
    primary: u16,
    kept: &str,
) {
    until_decided(limiter, "/after", RECOVERY).await;
    let stored = limiter.storage_keys("/after").remove(0);
    let deadline = Instant::now() + RECOVERY;
    loop {
        let mut conn = deployment.node(primary).conn().await;
        let exists: bool = redis::cmd("EXISTS")
            .arg(&stored)
            .query_async(&mut conn)
            .await
            .unwrap();
        if exists {
            break;
        }
        // (a connection still on the old primary, not yet demoted)
        assert!(
            Instant::now() < deadline,
            "decisions do not reach the new primary {primary}"
        );
        until_decided(limiter, "/after", RECOVERY).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let d = limiter.peek(kept).await.unwrap();
    assert_eq!(
        d.remaining(),
        1_000_000 - 3,
        "the state written (and replicated) before the switch is lost"
    );
}

/// Three requests on `kept`, replicated (`WAIT`) before the switch.
async fn write_replicated_state(deployment: &RedisSentinel, limiter: &RateLimiter, kept: &str) {
    until_decided(limiter, "/warm-up", Duration::from_secs(10)).await;
    for _ in 0..3 {
        assert!(limiter.check(kept).await.unwrap().allowed());
    }
    deployment.sync_replica();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_continue_through_sentinel_failover_and_replicated_state_is_kept() {
    let deployment = RedisSentinel::start();
    let limiter = limiter(&deployment, "failover");
    write_replicated_state(&deployment, &limiter, "/kept").await;
    let old = deployment.primary_port();

    let samples = under_load(&limiter, || {
        deployment.failover();
        deployment.wait_for_new_primary(old);
        // the old primary is demoted (its clients dropped) and follows the new one
        deployment.wait_for_replica(old);
    })
    .await;
    assert_bounded_and_policed(&samples);
    let new = deployment.primary_port();
    assert_ne!(new, old);
    assert_served_by(&deployment, &limiter, new, "/kept").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_continue_after_the_primary_is_killed() {
    let mut deployment = RedisSentinel::start();
    let limiter = limiter(&deployment, "killed");
    write_replicated_state(&deployment, &limiter, "/kept").await;
    let old = deployment.primary_port();

    let samples = under_load(&limiter, || {
        deployment.node_mut(old).kill();
        deployment.wait_for_new_primary(old);
    })
    .await;
    assert_bounded_and_policed(&samples);
    // the primary's death shows: calls failed (refused connections, timeouts)
    // until the replica was promoted, each within the timeout
    assert!(
        samples
            .iter()
            .any(|(_, o)| matches!(o, Outcome::Timeout | Outcome::RedisError | Outcome::Closed)),
        "no call failed while there was no primary"
    );
    let new = deployment.primary_port();
    assert_ne!(new, old);
    assert_served_by(&deployment, &limiter, new, "/kept").await;
}

/// A "sentinel" that accepts connections and never answers (a stopped or
/// partitioned-away process): listed first, it must not keep the store from
/// the healthy sentinels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_that_never_answers_does_not_stop_the_others() {
    let deployment = RedisSentinel::start();
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("redis://127.0.0.1:{}/", silent.local_addr().unwrap().port());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        loop {
            if let Ok((socket, _)) = silent.accept().await {
                open.push(socket);
            }
        }
    });
    let mut urls = vec![silent_url];
    urls.extend(deployment.sentinel_urls());
    // Below redis-rs's own 500 ms response timeout for a sentinel: asking
    // the sentinels in turn could never connect within it (the silent one
    // first), asking them all at once connects at the first try on an idle
    // machine, and within a few tries on a loaded one.
    let store = RedisSentinelStore::from_urls(urls, MASTER_NAME)
        .unwrap()
        .timeout(Duration::from_millis(400));
    let limiter = RateLimiter::builder()
        .store(store)
        .prefix("silent")
        .quota(Quota::fixed_window(Rate::per_hour(10)))
        .build()
        .unwrap();
    let mut tries = 0;
    let first = loop {
        tries += 1;
        match limiter.check("k").await {
            Ok(d) => break d,
            Err(e) => assert!(tries < 20, "no connection in {tries} tries: {e}"),
        }
    };
    assert_eq!(first.remaining(), 9);
    for i in 1..3 {
        let d = limiter.check("k").await.unwrap();
        assert_eq!(d.remaining(), 9 - i);
    }
    held.abort();
}

#[test]
fn sentinel_urls_and_the_master_name_are_checked_when_the_store_is_made() {
    let err = |r: Result<RedisSentinelStore, tower_redis_ratelimit::error::ConfigError>| {
        r.err().map(|e| e.field().to_owned())
    };
    assert_eq!(
        err(RedisSentinelStore::from_urls(
            ["redis://127.0.0.1:26379/"],
            " "
        ))
        .as_deref(),
        Some("store.master_name")
    );
    assert_eq!(
        err(RedisSentinelStore::from_urls(
            ["redis://127.0.0.1:26379/3"],
            "m"
        ))
        .as_deref(),
        Some("store.urls")
    );
    assert_eq!(
        err(RedisSentinelStore::from_urls(Vec::<String>::new(), "m")).as_deref(),
        Some("store.urls")
    );
    assert_eq!(
        err(RedisSentinelStore::from_urls(["not a url"], "m")).as_deref(),
        Some("store.urls")
    );
    assert!(RedisSentinelStore::from_urls(["redis://127.0.0.1:26379/"], "m").is_ok());
}
