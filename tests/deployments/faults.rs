//! Single-node faults, each under load, at the store and through the
//! middleware under every failure policy: Redis frozen (`SIGSTOP`) for 2 s,
//! killed and restarted, out of memory (`maxmemory` + `noeviction`), and more
//! concurrent checks than the pool has connections. Every request completes
//! within the store timeout plus a margin, and limiting resumes afterwards.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::RedisServer;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use tower::{ServiceBuilder, ServiceExt};
use tower_redis_ratelimit::error::StoreError;
use tower_redis_ratelimit::middleware::FailurePolicy;
use tower_redis_ratelimit::strategy::Strategy;
use tower_redis_ratelimit::{
    MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter, RedisStore, key,
};

/// The store's bound on one call in the fault tests: short enough to see
/// many timed-out calls during a 2 s freeze, long enough that a healthy Redis
/// answers within it on a loaded 2-core machine (two suites at once).
const TIMEOUT: Duration = Duration::from_millis(300);
/// Scheduling slack on a loaded 2-core machine.
const MARGIN: Duration = Duration::from_secs(1);
/// A store timeout for calls whose timing is not under test.
const GENEROUS: Duration = Duration::from_secs(10);

fn limiter(store: RedisStore, prefix: &str, quota: Quota) -> RateLimiter {
    RateLimiter::builder()
        .store(store)
        .prefix(prefix)
        .quota(quota)
        .build()
        .unwrap()
}

/// What one request through the middleware saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Seen {
    /// 200 with rate-limit headers: decided by a store.
    Allowed,
    /// 429.
    Limited,
    /// 200 without rate-limit headers: FailurePolicy::Open let it through.
    Open,
    /// 503: FailurePolicy::Closed.
    Unavailable,
    Other(u16),
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Duration,
    took: Duration,
    seen: Seen,
}

type App = tower::util::BoxCloneSyncService<Request<Full<Bytes>>, Response<Bytes>, Infallible>;

/// A service answering "ok" behind `layer`; the key is the request path.
fn app(layer: RateLimitLayer) -> App {
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service_fn(|_req: Request<Full<Bytes>>| async {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
        })
        .map_response(|res| res.map(|_| Bytes::new()));
    tower::util::BoxCloneSyncService::new(svc)
}

async fn send(app: &App, path: &str) -> (Seen, Response<Bytes>) {
    let req = Request::get(path).body(Full::new(Bytes::new())).unwrap();
    let res = app.clone().oneshot(req).await.unwrap();
    let seen = match res.status() {
        StatusCode::OK if res.headers().contains_key("ratelimit") => Seen::Allowed,
        StatusCode::OK => Seen::Open,
        StatusCode::TOO_MANY_REQUESTS => Seen::Limited,
        StatusCode::SERVICE_UNAVAILABLE => Seen::Unavailable,
        s => Seen::Other(s.as_u16()),
    };
    (seen, res)
}

/// Tasks sending requests to `app` (paths `/<prefix>-<n>`) until `stop`.
fn load(
    app: &App,
    tasks: usize,
    keys: usize,
    t0: Instant,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Vec<Sample>>> {
    (0..tasks)
        .map(|t| {
            let (app, stop) = (app.clone(), stop.clone());
            tokio::spawn(async move {
                let mut samples = Vec::new();
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let (seen, _) = send(&app, &format!("/k{}", i % keys)).await;
                    samples.push(Sample {
                        at: started - t0,
                        took: started.elapsed(),
                        seen,
                    });
                    i += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                samples
            })
        })
        .collect()
}

/// Joins load tasks, each within `deadline` of now: none may be stuck.
async fn join(tasks: Vec<tokio::task::JoinHandle<Vec<Sample>>>, deadline: Duration) -> Vec<Sample> {
    let until = Instant::now() + deadline;
    let mut all = Vec::new();
    for t in tasks {
        let left = until.saturating_duration_since(Instant::now());
        all.extend(
            tokio::time::timeout(left, t)
                .await
                .expect("a request was stuck")
                .expect("a task panicked"),
        );
    }
    all.sort_by_key(|s| s.at);
    all
}

fn counts(samples: &[Sample]) -> BTreeMap<Seen, usize> {
    let mut m = BTreeMap::new();
    for s in samples {
        *m.entry(s.seen).or_insert(0) += 1;
    }
    m
}

fn worst(samples: &[Sample]) -> Duration {
    samples.iter().map(|s| s.took).max().unwrap_or_default()
}

/// The three policies over the same Redis, each with its own key prefix.
fn policy_apps(server: &RedisServer, quota: &Quota) -> Vec<(&'static str, RateLimitLayer)> {
    let store = || RedisStore::new(server.pool(4)).timeout(TIMEOUT);
    vec![
        (
            "open",
            RateLimitLayer::new(limiter(store(), "open", quota.clone()), key::Path)
                .on_store_error(FailurePolicy::Open)
                .deny_cache(false),
        ),
        (
            "closed",
            RateLimitLayer::new(limiter(store(), "closed", quota.clone()), key::Path)
                .on_store_error(FailurePolicy::Closed)
                .deny_cache(false),
        ),
        (
            "fallback",
            RateLimitLayer::new(limiter(store(), "fallback", quota.clone()), key::Path)
                .on_store_error(FailurePolicy::Fallback(MemoryStore::new()))
                .deny_cache(false),
        ),
    ]
}

/// What each policy may answer while the store fails.
fn allowed_during_failure(policy: &str, seen: Seen) -> bool {
    match policy {
        "open" => seen == Seen::Open,
        "closed" => seen == Seen::Unavailable,
        _ => matches!(seen, Seen::Allowed | Seen::Limited),
    }
}

/// Sends to `path` until a store decides (bounded): the first call connects
/// and loads the script, which a loaded machine may not finish within
/// [`TIMEOUT`]. A decision may be a 429 if an earlier, timed-out try was applied.
async fn warm_up(app: &App, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (seen, res) = send(app, path).await;
        if matches!(seen, Seen::Allowed | Seen::Limited) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no decision while warming up: {res:?}"
        );
    }
}

/// Waits (bounded) until `app` answers from Redis again, then checks that a
/// fresh key is limited exactly: `limit` allowed, then 429.
async fn limiting_resumes(app: &App, limit: u64, fresh: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (seen, _) = send(app, "/probe").await;
        if matches!(seen, Seen::Allowed | Seen::Limited) {
            break;
        }
        assert!(Instant::now() < deadline, "no recovery: {seen:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for i in 0..limit {
        let (seen, res) = send(app, fresh).await;
        assert_eq!(seen, Seen::Allowed, "request {i} on {fresh}: {res:?}");
    }
    let (seen, res) = send(app, fresh).await;
    assert_eq!(seen, Seen::Limited, "{res:?}");
    assert!(res.headers().contains_key("retry-after"));
}

/// One app per failure policy (5 per hour, fixed window), warmed up, with 8
/// looping tasks each already running for 300 ms.
struct UnderLoad {
    layers: Vec<(&'static str, RateLimitLayer)>,
    apps: Vec<(&'static str, App)>,
    t0: Instant,
    stop: Arc<AtomicBool>,
    tasks: Vec<Vec<tokio::task::JoinHandle<Vec<Sample>>>>,
}

async fn under_load(server: &RedisServer) -> UnderLoad {
    let quota = Quota::fixed_window(Rate::per_hour(5));
    let layers = policy_apps(server, &quota);
    let apps: Vec<(&'static str, App)> = layers.iter().map(|(p, l)| (*p, app(l.clone()))).collect();
    for (_, app) in &apps {
        warm_up(app, "/warm-up").await;
    }
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = apps
        .iter()
        .map(|(_, app)| load(app, 8, 40, t0, &stop))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    UnderLoad {
        layers,
        apps,
        t0,
        stop,
        tasks,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_frozen_for_2s_under_load_bounds_every_request_then_limiting_resumes() {
    let server = RedisServer::start();
    let UnderLoad {
        layers,
        apps,
        t0,
        stop,
        tasks,
    } = under_load(&server).await;
    server.pause();
    // from when the process is stopped to when SIGCONT is sent
    let paused_at = t0.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let resumed_at = t0.elapsed();
    server.resume();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let mut report = Vec::new();
    for ((policy, app), tasks) in apps.iter().zip(tasks) {
        let samples = join(tasks, TIMEOUT + MARGIN + Duration::from_millis(100)).await;
        // Calls entirely inside the pause: each took the timeout, then the policy answered.
        let frozen: Vec<Sample> = samples
            .iter()
            .copied()
            .filter(|s| s.at > paused_at && s.at + s.took < resumed_at)
            .collect();
        let before: Vec<Sample> = samples
            .iter()
            .copied()
            .filter(|s| s.at + s.took < paused_at)
            .collect();
        report.push(format!(
            "{policy}: {} requests, before {:?}, frozen {:?} (worst {:?}), all {:?} (worst {:?})",
            samples.len(),
            counts(&before),
            counts(&frozen),
            worst(&frozen),
            counts(&samples),
            worst(&samples),
        ));
        assert!(
            before
                .iter()
                .all(|s| matches!(s.seen, Seen::Allowed | Seen::Limited))
        );
        assert!(frozen.len() > 20, "{policy}: too few requests while frozen");
        for s in &frozen {
            assert!(allowed_during_failure(policy, s.seen), "{policy}: {s:?}");
            assert!(
                s.took >= TIMEOUT,
                "{policy}: answered before the timeout: {s:?}"
            );
        }
        assert!(
            worst(&samples) <= TIMEOUT + MARGIN,
            "{policy}: worst {:?}",
            worst(&samples)
        );
        limiting_resumes(app, 5, &format!("/fresh-{policy}")).await;
    }
    for (_, layer) in &layers {
        assert!(layer.stats().store_errors > 0);
    }
    eprintln!("SIGSTOP 2 s: {}", report.join("\n  "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_killed_and_restarted_under_load_is_survived_by_every_policy() {
    let mut server = RedisServer::start();
    let UnderLoad {
        layers: _,
        apps,
        t0,
        stop,
        tasks,
    } = under_load(&server).await;
    let killed_at = t0.elapsed();
    server.kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let restarting_at = t0.elapsed();
    server.restart();
    let restarted_at = t0.elapsed();
    tokio::time::sleep(Duration::from_millis(700)).await;
    stop.store(true, Ordering::Relaxed);
    let mut report = Vec::new();
    for ((policy, app), tasks) in apps.iter().zip(tasks) {
        let samples = join(tasks, TIMEOUT + MARGIN + Duration::from_millis(100)).await;
        let down: Vec<Sample> = samples
            .iter()
            .copied()
            .filter(|s| {
                s.at > killed_at + Duration::from_millis(50) && s.at + s.took < restarting_at
            })
            .collect();
        let after: Vec<Sample> = samples
            .iter()
            .copied()
            .filter(|s| s.at > restarted_at + Duration::from_millis(200))
            .collect();
        report.push(format!(
            "{policy}: {} requests, down {:?} (worst {:?}), after restart {:?}, all worst {:?}",
            samples.len(),
            counts(&down),
            worst(&down),
            counts(&after),
            worst(&samples),
        ));
        assert!(down.len() > 20, "{policy}: too few requests while down");
        for s in &down {
            assert!(allowed_during_failure(policy, s.seen), "{policy}: {s:?}");
        }
        assert!(worst(&samples) <= TIMEOUT + MARGIN, "{policy}");
        // once restarted, decisions come from Redis again (a new, empty one)
        assert!(
            after
                .iter()
                .all(|s| matches!(s.seen, Seen::Allowed | Seen::Limited)),
            "{policy}: {:?}",
            counts(&after)
        );
        limiting_resumes(app, 5, &format!("/fresh-{policy}")).await;
    }
    eprintln!("kill + restart: {}", report.join("\n  "));
}

/// `n` concurrent checks over 5 keys; how many were admitted, and the slowest.
async fn burst(lim: &RateLimiter, n: usize, prefix: &str) -> (u64, Duration) {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let lim = lim.clone();
            let key = format!("{prefix}-{}", i % 5);
            tokio::spawn(async move {
                let t = Instant::now();
                let d = lim.check(key).await.unwrap();
                (d.allowed(), t.elapsed())
            })
        })
        .collect();
    let mut admitted = 0;
    let mut worst = Duration::ZERO;
    for t in tasks {
        let (ok, took) = t.await.unwrap();
        admitted += u64::from(ok);
        worst = worst.max(took);
    }
    (admitted, worst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_checks_share_a_pool_of_one_and_stay_exact() {
    let server = RedisServer::start();
    let lim = limiter(
        RedisStore::new(server.pool(1)).timeout(Duration::from_secs(10)),
        "pool1",
        Quota::sliding_window_log(Rate::per_hour(100)),
    );
    // Cold: no connection yet, no script loaded.
    let (admitted, worst) = burst(&lim, 1000, "cold").await;
    let cold = server.info_commandstats().await;
    // 5 keys x limit 100
    assert_eq!(admitted, 500);
    // Warm: all over the one connection, most checks batched (several per
    // EVALSHA: src/store/redis/batch.rs)
    server.reset_stats().await;
    let (admitted_warm, worst_warm) = burst(&lim, 1000, "warm").await;
    assert_eq!(admitted_warm, 500);
    let calls = server.command_calls("evalsha").await;
    assert!((1..=100).contains(&calls), "{calls} calls for 1000 checks");
    assert_eq!(server.command_calls("script|load").await, 0);
    let clients: String = redis::cmd("INFO")
        .arg("clients")
        .query_async(&mut server.conn().await)
        .await
        .unwrap();
    eprintln!(
        "1000 concurrent checks on a pool of 1: cold {admitted} admitted, worst {worst:?}, \
         evalsha {:?}, script|load {:?}; warm {admitted_warm} admitted, worst {worst_warm:?}; {}",
        cold.get("evalsha"),
        cold.get("script|load"),
        common::info_field(&clients, "connected_clients").unwrap_or("?"),
    );
    assert_eq!(lim.peek("warm-0").await.unwrap().remaining(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_store_connections_than_the_pool_holds_are_capped_at_its_size() {
    let server = RedisServer::start();
    let store = RedisStore::new(server.pool(1))
        .connections(4)
        .timeout(GENEROUS);
    assert!(format!("{store:?}").contains("connections: 1"), "{store:?}");
    let lim = limiter(
        store,
        "pool-short",
        Quota::fixed_window(Rate::per_hour(100)),
    );
    // A connection the pool can never hand out would make every call that
    // comes to it wait the whole timeout and fail (`burst` unwraps each).
    let (admitted, worst) = burst(&lim, 1000, "k").await;
    assert_eq!(admitted, 500);
    assert!(worst < GENEROUS / 2, "{worst:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_drained_by_the_app_bounds_the_wait_then_the_policy_applies() {
    let server = RedisServer::start();
    let pool = server.pool(1);
    let layer = RateLimitLayer::new(
        limiter(
            RedisStore::new(pool.clone()).timeout(TIMEOUT),
            "drained",
            Quota::fixed_window(Rate::per_hour(5)),
        ),
        key::Path,
    )
    .on_store_error(FailurePolicy::Closed);
    let app = app(layer.clone());
    // The application holds the pool's only connection for itself.
    let held = pool.get().await.unwrap();
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let app = app.clone();
            tokio::spawn(async move {
                let t = Instant::now();
                let (seen, _) = send(&app, &format!("/k{i}")).await;
                (seen, t.elapsed())
            })
        })
        .collect();
    let mut seen = BTreeMap::new();
    let mut worst = Duration::ZERO;
    for t in tasks {
        let (s, took) = t.await.unwrap();
        *seen.entry(s).or_insert(0) += 1;
        worst = worst.max(took);
    }
    eprintln!("pool drained by the app: {seen:?}, worst {worst:?}");
    assert_eq!(seen, BTreeMap::from([(Seen::Unavailable, 200)]));
    assert!(worst >= TIMEOUT && worst <= TIMEOUT + MARGIN, "{worst:?}");
    assert_eq!(layer.stats().store_errors, 200);
    // The connection comes back: the store takes it and limiting resumes.
    drop(held);
    limiting_resumes(&app, 5, "/fresh").await;
}

async fn config_set_maxmemory(server: &RedisServer, bytes: u64) {
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(bytes)
        .query_async(&mut server.conn().await)
        .await
        .unwrap();
}

// current_thread: the log capture below captures this thread's events.
#[tokio::test(flavor = "current_thread")]
async fn redis_out_of_memory_is_a_clear_store_error_and_the_policy_applies() {
    #[cfg(feature = "tracing")]
    let log = common::logs::capture();
    let server = RedisServer::builder()
        .args(["--maxmemory-policy", "noeviction"])
        .start();
    let quota = Quota::fixed_window(Rate::per_hour(5));
    let layers = policy_apps(&server, &quota);
    let apps: Vec<(&str, App)> = layers.iter().map(|(p, l)| (*p, app(l.clone()))).collect();
    let by_strategy: Vec<(Strategy, RateLimiter)> = Strategy::ALL
        .iter()
        .map(|&s| {
            let q = match s {
                Strategy::Concurrency => Quota::concurrency(5),
                s => Quota::new(s, Rate::per_hour(5)),
            };
            (
                s,
                limiter(
                    RedisStore::new(server.pool(2)).timeout(GENEROUS),
                    &format!("oom-{}", s.as_str()),
                    q,
                ),
            )
        })
        .collect();
    // Everything works and the scripts are loaded before memory runs out.
    for (_, lim) in &by_strategy {
        assert!(lim.check("existing").await.unwrap().allowed());
    }
    for (_, app) in &apps {
        warm_up(app, "/before").await;
    }
    config_set_maxmemory(&server, 1).await;

    // The store: what a check of a new and of an existing key gives, per strategy.
    let mut table = Vec::new();
    for (strategy, lim) in &by_strategy {
        let mut row = Vec::new();
        for key in ["new", "existing"] {
            let r = lim.check(key).await;
            // every strategy's first write is refused, so nothing is admitted past maxmemory
            let e = r
                .as_ref()
                .expect_err(&format!("{strategy} admitted {key} out of memory"));
            assert!(matches!(e, StoreError::Redis(_)), "{strategy}: {e:?}");
            assert!(e.to_string().contains("OOM"), "{e}");
            // the client's error is reachable as the source, not in the type
            let source = std::error::Error::source(e)
                .and_then(|s| s.downcast_ref::<tower_redis_ratelimit::redis::RedisError>());
            assert_eq!(source.and_then(|r| r.code()), Some("OOM"), "{e:?}");
            row.push(match r {
                Ok(d) => format!("{key}: allowed={}", d.allowed()),
                Err(e) => format!("{key}: Err({e})"),
            });
        }
        table.push(format!("{strategy}: {}", row.join("; ")));
    }
    eprintln!("OOM, per strategy:\n  {}", table.join("\n  "));
    // A fixed window's first write is INCRBY, which Redis refuses when out of memory.
    let fixed = &by_strategy[0].1;
    let err = fixed.check("another").await.unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with(
            "rate limit store error: \"OOM\": command not allowed when used memory > 'maxmemory'"
        ),
        "{msg}"
    );

    // The middleware: each policy, bounded, and a warning carrying the error.
    for (policy, app) in &apps {
        for i in 0..5 {
            let t = Instant::now();
            let (seen, res) = send(app, &format!("/oom-{i}")).await;
            assert!(allowed_during_failure(policy, seen), "{policy}: {res:?}");
            assert!(t.elapsed() <= TIMEOUT + MARGIN);
        }
    }
    for (policy, layer) in &layers {
        assert_eq!(layer.stats().store_errors, 5, "{policy}");
    }
    #[cfg(feature = "tracing")]
    {
        let line = log
            .lines_with("FailurePolicy::Closed")
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no warning logged: {}", log.text()));
        eprintln!("OOM, logged: {line}");
        assert!(line.contains("WARN"), "{line}");
        assert!(
            line.contains("command not allowed when used memory"),
            "{line}"
        );
    }

    // Memory back: limiting resumes.
    config_set_maxmemory(&server, 0).await;
    for (policy, app) in &apps {
        limiting_resumes(app, 5, &format!("/fresh-{policy}")).await;
    }
    assert!(fixed.check("another").await.unwrap().allowed());
}
