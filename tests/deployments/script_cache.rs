//! No script-cache error reaches a caller (issue 29, point 3): many tasks
//! decide continuously while the script cache goes away under them —
//! `SCRIPT FLUSH` several times on every node (single node, Cluster,
//! Sentinel), then in a storm (a few decisions apart), a restart of the single node on the same port, a Sentinel
//! failover — and no call ever fails with `NOSCRIPT` (the store loads the
//! script again and resends, `src/store/redis/conn.rs`). Where nothing else
//! fails, no call fails at all and every key's count is exact.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{GENEROUS, RedisServer};
use tower_redis_ratelimit::error::StoreError;
use tower_redis_ratelimit::{Quota, Rate, RateLimiter, RedisStore};

/// A fixed window's count per hour: no test here comes near it, so every
/// decision is an admission and each key's remaining count is exact.
const LIMIT: u64 = 1_000_000;
/// A sliding window log's (at most 10,000 entries): no key here nears it either.
const LOG_LIMIT: u64 = 10_000;
/// Concurrent deciding tasks.
const TASKS: usize = 32;
/// Keys per task and limiter.
const KEYS: usize = 4;
/// Flushes a few decisions apart in a storm of `SCRIPT FLUSH`.
const STORM: usize = 200;
/// Bound on any wait for a condition (2 shared cores, other suites running).
const WAIT: Duration = Duration::from_secs(60);

/// The quotas of the limiters under load, each run by another script: the
/// fixed window's fast path (one quota, Redis's clock), a sliding window
/// log (its own script), and both at once (the multi-quota script). Exact
/// strategies only (counts are checked). Each with its smallest count.
fn quota_sets() -> Vec<(u64, Vec<Quota>)> {
    vec![
        (LIMIT, vec![Quota::fixed_window(Rate::per_hour(LIMIT))]),
        (
            LOG_LIMIT,
            vec![Quota::sliding_window_log(Rate::per_hour(LOG_LIMIT))],
        ),
        (
            LOG_LIMIT,
            vec![
                Quota::fixed_window(Rate::per_hour(LIMIT)),
                Quota::sliding_window_log(Rate::per_hour(LOG_LIMIT)),
            ],
        ),
    ]
}

fn limiters<S: tower_redis_ratelimit::store::Store>(
    store: impl Fn() -> S,
    prefix: &str,
) -> Vec<RateLimiter> {
    quota_sets()
        .into_iter()
        .enumerate()
        .map(|(i, (_, quotas))| {
            RateLimiter::builder()
                .store(store())
                .prefix(format!("{prefix}-{i}"))
                .quotas(quotas)
                .build()
                .unwrap()
        })
        .collect()
}

/// Whether an error is about the script cache (what must never reach a caller).
fn is_script_error(e: &StoreError) -> bool {
    let text = format!("{e} {e:?}").to_ascii_lowercase();
    text.contains("noscript") || text.contains("script")
}

/// One call: when it started (since the load began), and its error if any.
#[derive(Debug)]
struct Call {
    at: Duration,
    error: Option<String>,
    script_error: bool,
}

/// What one task did: its calls, and its admissions per (limiter, key).
#[derive(Debug, Default)]
struct TaskLog {
    calls: Vec<Call>,
    admitted: BTreeMap<(usize, String), u64>,
}

struct Load {
    t0: Instant,
    stop: Arc<AtomicBool>,
    decided: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<TaskLog>>,
}

impl Load {
    fn start(limiters: &[RateLimiter]) -> Load {
        let t0 = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let decided = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let tasks = (0..TASKS)
            .map(|t| {
                let limiters = limiters.to_vec();
                let (stop, decided, failed) = (stop.clone(), decided.clone(), failed.clone());
                tokio::spawn(async move {
                    let mut log = TaskLog::default();
                    let mut i = t;
                    while !stop.load(Ordering::Relaxed) {
                        let l = i % limiters.len();
                        let key = format!("t{t}-k{}", (i / limiters.len()) % KEYS);
                        i += 1;
                        let at = t0.elapsed();
                        match limiters[l].check(&key).await {
                            Ok(d) => {
                                assert!(d.allowed(), "{key}: {d:?}");
                                *log.admitted.entry((l, key)).or_default() += 1;
                                decided.fetch_add(1, Ordering::Relaxed);
                                log.calls.push(Call {
                                    at,
                                    error: None,
                                    script_error: false,
                                });
                            }
                            Err(e) => {
                                failed.fetch_add(1, Ordering::Relaxed);
                                log.calls.push(Call {
                                    at,
                                    error: Some(format!("{e} ({e:?})")),
                                    script_error: is_script_error(&e),
                                });
                                // a down server refuses at once: do not spin
                                tokio::time::sleep(Duration::from_millis(5)).await;
                            }
                        }
                    }
                    log
                })
            })
            .collect();
        Load {
            t0,
            stop,
            decided,
            failed,
            tasks,
        }
    }

    /// Waits (bounded) until `n` more decisions than now were made.
    async fn progress(&self, n: u64, what: &str) {
        let target = self.decided.load(Ordering::Relaxed) + n;
        until(what, || self.decided.load(Ordering::Relaxed) >= target).await;
    }

    /// Waits (bounded) until `n` more calls than now failed.
    async fn failures(&self, n: u64, what: &str) {
        let target = self.failed.load(Ordering::Relaxed) + n;
        until(what, || self.failed.load(Ordering::Relaxed) >= target).await;
    }

    async fn finish(self) -> Vec<TaskLog> {
        self.stop.store(true, Ordering::Relaxed);
        let mut logs = Vec::new();
        for t in self.tasks {
            logs.push(tokio::time::timeout(WAIT, t).await.unwrap().unwrap());
        }
        logs
    }
}

/// Polls `done` every 10 ms until it holds, for at most [`WAIT`].
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "not within {WAIT:?}: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn script_flush(conn: &mut impl redis::aio::ConnectionLike) {
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(conn)
        .await
        .unwrap();
}

/// No call failed with a script error; returns how many calls there were.
fn assert_no_script_error(logs: &[TaskLog]) -> usize {
    let script: Vec<&Call> = logs
        .iter()
        .flat_map(|l| &l.calls)
        .filter(|c| c.script_error)
        .collect();
    assert!(
        script.is_empty(),
        "{} script-cache errors reached callers, e.g. {:?}",
        script.len(),
        script.first()
    );
    logs.iter().map(|l| l.calls.len()).sum()
}

/// No call failed at all.
fn assert_no_error(logs: &[TaskLog]) {
    let failed: Vec<&Call> = logs
        .iter()
        .flat_map(|l| &l.calls)
        .filter(|c| c.error.is_some())
        .collect();
    assert!(
        failed.is_empty(),
        "{} calls failed, e.g. {:?}",
        failed.len(),
        failed.first()
    );
}

/// Every key's remaining count is exactly its limit less its admissions.
async fn assert_exact(limiters: &[RateLimiter], logs: &[TaskLog]) {
    let mut admitted: BTreeMap<(usize, String), u64> = BTreeMap::new();
    for log in logs {
        for (k, n) in &log.admitted {
            *admitted.entry(k.clone()).or_default() += n;
        }
    }
    assert_eq!(admitted.len(), TASKS * KEYS * limiters.len());
    for ((l, key), n) in admitted {
        let d = limiters[l].peek(&key).await.unwrap();
        let limit = quota_sets()[l].0;
        assert!(n < limit, "limiter {l}, key {key}: {n} admitted");
        assert_eq!(
            d.remaining(),
            limit - n,
            "limiter {l}, key {key}: {n} admitted"
        );
    }
}

fn single_store(server: &RedisServer) -> RedisStore {
    RedisStore::new(server.pool(8)).timeout(GENEROUS)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_under_load_on_a_single_node_reaches_no_caller_and_counts_stay_exact() {
    let server = RedisServer::start();
    let limiters = limiters(|| single_store(&server), "flush");
    let load = Load::start(&limiters);
    load.progress(500, "the first decisions").await;
    let mut conn = server.conn().await;
    for round in 0..5 {
        script_flush(&mut conn).await;
        load.progress(300, &format!("decisions after flush {round}"))
            .await;
    }
    // a storm: flushes a few decisions apart, so that calls meet NOSCRIPT
    // again after their reload (24 reached callers with one reload per call)
    for round in 0..STORM {
        script_flush(&mut conn).await;
        load.progress(3, &format!("decisions after storm flush {round}"))
            .await;
    }
    let logs = load.finish().await;
    let calls = assert_no_script_error(&logs);
    assert_no_error(&logs);
    assert_exact(&limiters, &logs).await;
    // the flushes were seen: the scripts were loaded again after each
    let loads = server.command_calls("script|load").await;
    assert!(
        loads >= 5 + 3,
        "{loads} SCRIPT LOADs for 5 flushes of 3 scripts"
    );
    eprintln!("SCRIPT FLUSH x5 then x{STORM}: {calls} calls, 0 errors, {loads} SCRIPT LOADs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_under_load_surfaces_connection_errors_only_then_every_call_succeeds() {
    let mut server = RedisServer::start();
    let limiters = limiters(|| single_store(&server), "restart");
    let load = Load::start(&limiters);
    load.progress(500, "the first decisions").await;
    tokio::task::block_in_place(|| server.kill());
    load.failures(20, "calls failing while the server is down")
        .await;
    tokio::task::block_in_place(|| server.restart());
    // the new server is empty: every script is loaded again on NOSCRIPT
    load.progress(500, "decisions after the restart").await;
    let settled = load.t0.elapsed();
    load.progress(1_000, "more decisions after the restart")
        .await;
    let logs = load.finish().await;
    let calls = assert_no_script_error(&logs);
    let after: Vec<&Call> = logs
        .iter()
        .flat_map(|l| &l.calls)
        .filter(|c| c.at >= settled)
        .collect();
    assert!(after.len() >= 1_000);
    let failed: Vec<&&Call> = after.iter().filter(|c| c.error.is_some()).collect();
    assert!(
        failed.is_empty(),
        "{} of {} calls after the restart failed, e.g. {:?}",
        failed.len(),
        after.len(),
        failed.first()
    );
    let errors = logs
        .iter()
        .flat_map(|l| &l.calls)
        .filter(|c| c.error.is_some())
        .count();
    assert!(errors >= 20);
    // the new server's cache holds the scripts again (loaded on NOSCRIPT;
    // SCRIPT LOAD may run before the fixture resets the new server's stats)
    let mut conn = server.conn().await;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await
        .unwrap();
    let cached: u64 = common::info_field(&info, "number_of_cached_scripts")
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(cached >= 3, "{cached} scripts cached on the new server");
    eprintln!(
        "restart: {calls} calls, {errors} connection errors while down, none about scripts; \
         {} calls after, all decided; {cached} scripts cached on the new server",
        after.len()
    );
}

#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_on_every_master_under_load_reaches_no_caller_and_counts_stay_exact() {
    use tower_redis_ratelimit::RedisClusterStore;
    let cluster = common::RedisCluster::start(3, 0);
    let store = || {
        let pool = deadpool_redis::cluster::Config::from_urls(cluster.urls())
            .create_pool(Some(deadpool_redis::Runtime::Tokio1))
            .unwrap();
        RedisClusterStore::new(pool).timeout(GENEROUS)
    };
    let limiters = limiters(store, "cflush");
    let load = Load::start(&limiters);
    load.progress(500, "the first decisions").await;
    let mut conns = Vec::new();
    for port in cluster.master_ports() {
        conns.push(cluster.node(port).conn().await);
    }
    for round in 0..4 {
        for conn in &mut conns {
            script_flush(conn).await;
        }
        load.progress(300, &format!("decisions after flush {round}"))
            .await;
    }
    for round in 0..STORM / 4 {
        for conn in &mut conns {
            script_flush(conn).await;
        }
        load.progress(3, &format!("decisions after storm flush {round}"))
            .await;
    }
    let logs = load.finish().await;
    let calls = assert_no_script_error(&logs);
    assert_no_error(&logs);
    assert_exact(&limiters, &logs).await;
    let mut loads = Vec::new();
    for port in cluster.master_ports() {
        loads.push(cluster.node(port).command_calls("script|load").await);
    }
    assert!(
        loads.iter().all(|&n| n >= 4),
        "SCRIPT LOADs per master: {loads:?}"
    );
    eprintln!(
        "cluster SCRIPT FLUSH x4 then x{} on 3 masters: {calls} calls, 0 errors, loads {loads:?}",
        STORM / 4
    );
}

#[cfg(feature = "sentinel")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flushes_and_a_sentinel_failover_under_load_reach_no_caller() {
    use common::{RedisSentinel, sentinel::MASTER_NAME};
    use tower_redis_ratelimit::RedisSentinelStore;
    let deployment = RedisSentinel::start();
    let store = || {
        RedisSentinelStore::from_urls(deployment.sentinel_urls(), MASTER_NAME)
            .unwrap()
            .timeout(GENEROUS)
    };
    let limiters = limiters(store, "sflush");
    let old = deployment.primary_port();
    let new = deployment.other_node(old);
    let load = Load::start(&limiters);
    load.progress(500, "the first decisions").await;
    for round in 0..3 {
        for port in [old, new] {
            script_flush(&mut deployment.node(port).conn().await).await;
        }
        load.progress(300, &format!("decisions after flush {round}"))
            .await;
    }
    // before the failover, no call failed at all
    assert_eq!(load.failed.load(Ordering::Relaxed), 0);
    // the replica's cache is empty (flushed; SCRIPT LOAD is not replicated):
    // the promoted node answers NOSCRIPT to the first call of each script
    let failover_at = load.t0.elapsed();
    tokio::task::block_in_place(|| {
        deployment.failover();
        assert_eq!(deployment.wait_for_new_primary(old), new);
        deployment.wait_for_replica(old);
    });
    load.progress(500, "decisions on the new primary").await;
    // (new connections: the demoted node closed its clients)
    for round in 0..2 {
        for port in [old, new] {
            script_flush(&mut deployment.node(port).conn().await).await;
        }
        load.progress(
            300,
            &format!("decisions after flush {round} on the new primary"),
        )
        .await;
    }
    let logs = load.finish().await;
    let calls = assert_no_script_error(&logs);
    let errors: Vec<&Call> = logs
        .iter()
        .flat_map(|l| &l.calls)
        .filter(|c| c.error.is_some())
        .collect();
    assert!(
        errors.iter().all(|c| c.at >= failover_at),
        "a call failed before the failover: {:?}",
        errors.iter().find(|c| c.at < failover_at)
    );
    let loads = deployment.node(new).command_calls("script|load").await;
    assert!(loads >= 3, "{loads} SCRIPT LOADs on the promoted node");
    eprintln!(
        "sentinel: {calls} calls, {} errors (during the failover, none about scripts), \
         {loads} SCRIPT LOADs on the promoted node",
        errors.len()
    );
}
