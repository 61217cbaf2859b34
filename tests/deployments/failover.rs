//! Redis Cluster failover under load: a 3-master + 3-replica cluster, many
//! tasks checking keys on every slot, one master SIGKILLed. Requests keep
//! completing within the store timeout (errors, or the middleware's failure
//! policy, during the gap), the limiter answers again once the replica is
//! promoted (the script reloaded there on `NOSCRIPT`), and nothing panics or
//! hangs.
#![cfg(feature = "cluster")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::RedisCluster;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use tower::{ServiceBuilder, ServiceExt};
use tower_redis_ratelimit::error::StoreError;
use tower_redis_ratelimit::middleware::FailurePolicy;
use tower_redis_ratelimit::{Quota, Rate, RateLimitLayer, RateLimiter, RedisClusterStore, key};

/// The store's bound on one call.
const STORE_TIMEOUT: Duration = Duration::from_millis(250);
/// Scheduling slack on a loaded 2-core machine running six redis-servers.
const MARGIN: Duration = Duration::from_millis(400);
/// Distinct user keys the load cycles through (they cover every master).
const KEYS: usize = 64;
/// Tasks calling the limiter directly / through the middleware.
const DIRECT_TASKS: usize = 24;
const LAYER_TASKS: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Allowed,
    Denied,
    Timeout,
    RedisError,
    /// A script-cache error (`NOSCRIPT`): never to reach a caller (the
    /// store loads the script on the promoted replica and resends).
    ScriptError,
    PoolError,
    OtherError,
    /// Middleware responses, by status.
    Status(u16),
    /// A middleware response without rate-limit headers (FailurePolicy::Open).
    OpenPassThrough,
}

impl Outcome {
    fn is_failure(self) -> bool {
        matches!(
            self,
            Outcome::Timeout
                | Outcome::RedisError
                | Outcome::ScriptError
                | Outcome::PoolError
                | Outcome::OtherError
                | Outcome::OpenPassThrough
        ) || self == Outcome::Status(503)
    }
}

/// One call: when it started (since the test began), how long it took, what it gave.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Duration,
    took: Duration,
    outcome: Outcome,
}

fn classify(r: &Result<tower_redis_ratelimit::Decision, StoreError>) -> Outcome {
    match r {
        Ok(d) if d.allowed() => Outcome::Allowed,
        Ok(_) => Outcome::Denied,
        Err(e) if format!("{e} {e:?}").to_ascii_lowercase().contains("script") => {
            Outcome::ScriptError
        }
        Err(StoreError::Timeout(_)) => Outcome::Timeout,
        Err(StoreError::Redis(_)) => Outcome::RedisError,
        Err(StoreError::Pool(_)) => Outcome::PoolError,
        Err(_) => Outcome::OtherError,
    }
}

fn cluster_store(cluster: &RedisCluster) -> RedisClusterStore {
    let pool = deadpool_redis::cluster::Config::from_urls(cluster.urls())
        .create_pool(Some(deadpool_redis::Runtime::Tokio1))
        .unwrap();
    RedisClusterStore::new(pool).timeout(STORE_TIMEOUT)
}

/// `CLUSTER NODES` as seen by the node on `port`: port -> (flags, master port if replica).
async fn topology(cluster: &RedisCluster, port: u16) -> BTreeMap<u16, (String, Option<u16>)> {
    let mut conn = cluster.node(port).conn().await;
    let listing: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut ids = BTreeMap::new();
    let mut rows = Vec::new();
    for line in listing.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let port: u16 = f[1]
            .split('@')
            .next()
            .and_then(|hp| hp.rsplit(':').next())
            .and_then(|p| p.parse().ok())
            .unwrap();
        ids.insert(f[0].to_owned(), port);
        rows.push((port, f[2].to_owned(), f[3].to_owned()));
    }
    rows.into_iter()
        .map(|(port, flags, master)| (port, (flags, ids.get(&master).copied())))
        .collect()
}

fn summary(samples: &[Sample]) -> BTreeMap<Outcome, usize> {
    let mut m = BTreeMap::new();
    for s in samples {
        *m.entry(s.outcome).or_insert(0) += 1;
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_under_load_fails_over_and_the_limiter_answers_again() {
    let mut cluster = RedisCluster::start(3, 1);
    let store = cluster_store(&cluster);
    let limiter = RateLimiter::builder()
        .store(store.clone())
        .prefix("failover")
        .quota(Quota::fixed_window(Rate::per_hour(10_000_000)))
        .build()
        .unwrap();
    // The same store behind the middleware, failing open.
    let layer = RateLimitLayer::new(limiter.clone(), key::Path)
        .on_store_error(FailurePolicy::Open)
        .deny_cache(false);
    let svc =
        ServiceBuilder::new()
            .layer(layer.clone())
            .service_fn(|_req: Request<Full<Bytes>>| async {
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
            });

    let masters = cluster.master_ports();
    let victim = masters[0];
    let survivor = masters[1];
    let topo = topology(&cluster, survivor).await;
    let heir = topo
        .iter()
        .find(|(_, (_, m))| *m == Some(victim))
        .map(|(p, _)| *p)
        .expect("the victim has a replica");
    // Which user keys the victim serves.
    let mut victim_keys = Vec::new();
    for k in 0..KEYS {
        let stored = limiter.storage_keys(format!("/user-{k}")).remove(0);
        if cluster.slot_owner(survivor, &stored).await == victim {
            victim_keys.push(k);
        }
    }
    assert!(!victim_keys.is_empty(), "no key lands on the victim");

    // Connect first: taking the cluster connection (a connection to every
    // node, then CLUSTER SLOTS) is the slow part of a cold start.
    let warm = Instant::now();
    while limiter.check("/warm-up").await.is_err() {
        assert!(warm.elapsed() < Duration::from_secs(10), "no connection");
    }

    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    // When (µs since t0) the latest failed call started.
    let last_failure_us = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..DIRECT_TASKS + LAYER_TASKS {
        let (limiter, svc, stop) = (limiter.clone(), svc.clone(), stop.clone());
        let last_failure_us = last_failure_us.clone();
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut i = t;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("/user-{}", i % KEYS);
                i += 7;
                let started = Instant::now();
                let outcome = if t < DIRECT_TASKS {
                    classify(&limiter.check(&key).await)
                } else {
                    let req = Request::get(key.as_str())
                        .body(Full::new(Bytes::new()))
                        .unwrap();
                    let res = svc.clone().oneshot(req).await.unwrap();
                    if res.status() == StatusCode::OK && !res.headers().contains_key("ratelimit") {
                        Outcome::OpenPassThrough
                    } else {
                        Outcome::Status(res.status().as_u16())
                    }
                };
                if outcome.is_failure() {
                    let at = (started - t0).as_micros() as u64;
                    last_failure_us.fetch_max(at, Ordering::Relaxed);
                }
                samples.push(Sample {
                    at: started - t0,
                    took: started.elapsed(),
                    outcome,
                });
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            samples
        }));
    }

    // Steady state first.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let killed_at = t0.elapsed();
    cluster.node_mut(victim).kill();

    // Wait for the cluster to promote the victim's replica (node timeout 2 s).
    let promoted_at = loop {
        let topo = topology(&cluster, survivor).await;
        let heir_is_master = topo.get(&heir).is_some_and(|(f, _)| f.contains("master"));
        let mut conn = cluster.node(heir).conn().await;
        let info: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query_async(&mut conn)
            .await
            .unwrap();
        if heir_is_master && info.contains("cluster_state:ok") {
            break t0.elapsed();
        }
        assert!(
            t0.elapsed() - killed_at < Duration::from_secs(30),
            "replica {heir} not promoted within 30 s: {topo:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    // Keep the load on until no call has failed for 1.5 s (polled, with a deadline).
    let recovered_by = Duration::from_secs(20);
    loop {
        let last = Duration::from_micros(last_failure_us.load(Ordering::Relaxed));
        let now = t0.elapsed();
        if now > promoted_at
            && now.saturating_sub(last.max(killed_at)) >= Duration::from_millis(1_600)
        {
            break;
        }
        assert!(
            now < promoted_at + recovered_by,
            "calls still failing {recovered_by:?} after the promotion (last at {last:?})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let join_deadline = Instant::now() + STORE_TIMEOUT + MARGIN + Duration::from_secs(1);
    let mut samples = Vec::new();
    for t in tasks {
        let left = join_deadline.saturating_duration_since(Instant::now());
        let s = tokio::time::timeout(left, t)
            .await
            .expect("a task was stuck after the load stopped")
            .expect("a task panicked");
        samples.extend(s);
    }
    samples.sort_by_key(|s| s.at);

    // Calls that ended before the kill; calls in flight at the kill belong to the gap.
    let before: Vec<Sample> = samples
        .iter()
        .copied()
        .filter(|s| s.at + s.took < killed_at)
        .collect();
    let last_failure = samples
        .iter()
        .filter(|s| s.outcome.is_failure())
        .map(|s| s.at)
        .max();
    let gap: Vec<Sample> = samples
        .iter()
        .copied()
        .filter(|s| s.at + s.took >= killed_at && last_failure.is_some_and(|l| s.at <= l))
        .collect();
    let after: Vec<Sample> = samples
        .iter()
        .copied()
        .filter(|s| last_failure.is_none_or(|l| s.at > l) && s.at + s.took >= killed_at)
        .collect();
    let worst = samples.iter().map(|s| s.took).max().unwrap();
    let worst_gap = gap.iter().map(|s| s.took).max().unwrap_or_default();
    eprintln!(
        "failover: killed master {victim} at {killed_at:?}, replica {heir} promoted at {promoted_at:?} \
         ({:?} after the kill); last failure at {last_failure:?}; {} calls: before {:?}, gap {:?}, \
         after {:?}; worst latency {worst:?} (gap {worst_gap:?}); layer stats {:?}",
        promoted_at - killed_at,
        samples.len(),
        summary(&before),
        summary(&gap),
        summary(&after),
        layer.stats(),
    );

    assert!(
        before.iter().all(|s| !s.outcome.is_failure()),
        "failures before the kill: {:?}",
        before
            .iter()
            .filter(|s| s.outcome.is_failure())
            .collect::<Vec<_>>()
    );
    assert!(
        before.len() > 100,
        "too little load before the kill: {}",
        before.len()
    );
    // No call failed on the promoted replica's empty script cache.
    assert!(
        samples.iter().all(|s| s.outcome != Outcome::ScriptError),
        "script-cache errors reached callers: {:?}",
        summary(&samples)
    );
    // Every call, during the gap too, completed within the store timeout (+ slack).
    assert!(
        worst <= STORE_TIMEOUT + MARGIN,
        "worst latency {worst:?} > {STORE_TIMEOUT:?} + {MARGIN:?}"
    );
    // The middleware never answered anything but 200 (fail open) during the gap.
    assert!(
        samples
            .iter()
            .all(|s| !matches!(s.outcome, Outcome::Status(c) if c != 200)),
        "{:?}",
        summary(&samples)
    );
    // Recovery: failures stop soon after the promotion, and the last 1.5 s are clean
    // on every key, the victim's included.
    if let Some(last) = last_failure {
        assert!(
            last < promoted_at + recovered_by,
            "still failing {:?} after the promotion",
            last - promoted_at
        );
    }
    let end = samples.last().unwrap().at;
    let clean_for = end - last_failure.unwrap_or(killed_at);
    assert!(
        clean_for >= Duration::from_millis(1_500),
        "only {clean_for:?} without failures at the end: {:?}",
        summary(&after)
    );
    for &k in &victim_keys {
        let d = limiter.check(format!("/user-{k}")).await.unwrap();
        assert!(d.allowed());
    }
    // The victim's slots are now served by the promoted replica, which had to load the script.
    let stored = limiter
        .storage_keys(format!("/user-{}", victim_keys[0]))
        .remove(0);
    assert_eq!(cluster.slot_owner(survivor, &stored).await, heir);
    let stats = cluster.node(heir).info_commandstats().await;
    assert!(
        stats.get("script|load").copied().unwrap_or(0) >= 1,
        "no SCRIPT LOAD on the promoted replica: {stats:?}"
    );
    // And it limits exactly there: a fresh limiter over the same store (whose
    // connection lived through the failover).
    let probe = RateLimiter::builder()
        .store(store)
        .prefix("after-failover")
        .quota(Quota::sliding_window_log(Rate::per_hour(5)))
        .build()
        .unwrap();
    let mut on_heir = None;
    for k in 0..200 {
        let key = format!("probe-{k}");
        if cluster
            .slot_owner(survivor, &probe.storage_keys(&key)[0])
            .await
            == heir
        {
            on_heir = Some(key);
            break;
        }
    }
    let key = on_heir.expect("a probe key on the promoted replica");
    let admitted: Vec<bool> = {
        let mut v = Vec::new();
        for _ in 0..7 {
            v.push(probe.check(&key).await.unwrap().allowed());
        }
        v
    };
    assert_eq!(admitted, [true, true, true, true, true, false, false]);
    let masters_now: BTreeSet<u16> = topology(&cluster, survivor)
        .await
        .into_iter()
        .filter(|(_, (f, _))| f.contains("master") && !f.contains("fail"))
        .map(|(p, _)| p)
        .collect();
    assert!(masters_now.contains(&heir) && !masters_now.contains(&victim));
}
