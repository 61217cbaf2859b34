//! A Redis whose connection stalls (packets dropped, not refused): every call
//! ends within the store's timeout, the silent connection is replaced once,
//! and decisions come from Redis again within a timeout of the network
//! healing, without waiting for the old connection. On a single node and on
//! a Redis Cluster. And a frozen Redis (SIGSTOP) under 200 clients: one new
//! connection per slot per timeout, not one per call.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::{RedisServer, StallProxy};
use tower_redis_ratelimit::error::StoreError;
use tower_redis_ratelimit::{Quota, Rate, RateLimiter, RedisStore};

/// The store's bound on one call.
const TIMEOUT: Duration = Duration::from_millis(200);
/// Scheduling slack on a loaded 2-core machine (not a speed assertion).
const MARGIN: Duration = Duration::from_secs(1);
/// How soon after the network heals decisions must come from Redis again.
const RECOVERY: Duration = Duration::from_secs(1);
const LIMIT: u64 = 1_000;

/// The counter Redis holds for `key` (a fixed window), read past the proxy.
async fn redis_count(server: &RedisServer, lim: &RateLimiter, key: &str) -> u64 {
    let keys = lim.storage_keys(key);
    let count: Option<u64> = redis::cmd("GET")
        .arg(&keys[0])
        .query_async(&mut server.conn().await)
        .await
        .unwrap();
    count.unwrap_or(0)
}

/// `waves` rounds of `calls` concurrent checks on a stalled store: every one
/// fails, each within the timeout plus the margin.
async fn stalled_waves(lim: &RateLimiter, waves: usize, calls: usize) {
    for wave in 0..waves {
        let tasks: Vec<_> = (0..calls)
            .map(|_| {
                let lim = lim.clone();
                tokio::spawn(async move {
                    let started = Instant::now();
                    let result = lim.check("k").await;
                    (started.elapsed(), result)
                })
            })
            .collect();
        for task in tasks {
            let (took, result) = task.await.unwrap();
            assert!(
                took < TIMEOUT + MARGIN,
                "wave {wave}: a call on a stalled connection took {took:?}"
            );
            match result {
                Err(StoreError::Timeout(_)) => {}
                other => panic!("wave {wave}: expected a timeout while stalled, got {other:?}"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_connection_is_replaced_and_decisions_resume_when_the_network_heals() {
    let server = RedisServer::start();
    let proxy = StallProxy::start(server.port());
    let mut cfg = deadpool_redis::Config::from_url(proxy.url());
    cfg.pool = Some(deadpool_redis::PoolConfig::new(4));
    let pool = cfg
        .create_pool(Some(deadpool_redis::Runtime::Tokio1))
        .unwrap();
    let lim = RateLimiter::builder()
        .store(RedisStore::new(pool).timeout(TIMEOUT))
        .prefix("stall")
        .quota(Quota::fixed_window(Rate::per_hour(LIMIT)))
        .build()
        .unwrap();

    stall_and_heal(&server, &proxy, &lim, true).await;
}

/// Stalls the proxy under `lim`'s only connection, fires waves of calls,
/// heals the network and checks decisions come from Redis again at once.
/// `count_connections`: whether the proxy's connection count is exact (one
/// per store connection, as for a single node).
async fn stall_and_heal(
    server: &RedisServer,
    proxy: &StallProxy,
    lim: &RateLimiter,
    count_connections: bool,
) {
    // The first call connects and loads the script: retried until it
    // answers, on a key of its own so that the counts of "k" stay exact.
    common::warm_up(lim, "warm-up").await;
    let d = lim.check("k").await.unwrap();
    assert_eq!(d.remaining(), LIMIT - 1);
    let connected = proxy.connections();
    if count_connections {
        assert_eq!(connected, 1);
    }

    proxy.stall();
    let (waves, calls) = (3, 20);
    stalled_waves(lim, waves, calls).await;
    // The first wave's timeouts drop the silent connection once; each later
    // wave tries about one new connection (its handshake goes unanswered
    // too), not one per call. (Slack for calls of a wave that start a few
    // milliseconds apart on a loaded machine.)
    let opened = proxy.connections() - connected;
    if count_connections {
        assert!(
            opened <= 2 * waves,
            "{opened} connections opened for {waves} waves of {calls} calls"
        );
    }

    // Read before resuming: a connection the pool opens between the resume
    // and this read would otherwise count as old.
    let before = proxy.connections();
    proxy.resume();
    let healed = Instant::now();
    // (a call that fails after the network healed may still have been
    // applied by Redis: a timed-out call is not undone)
    let mut failed_after_heal = 0;
    let d = loop {
        match lim.check("k").await {
            Ok(d) => break d,
            Err(e) => {
                failed_after_heal += 1;
                assert!(
                    healed.elapsed() < RECOVERY,
                    "still failing {:?} after the network healed: {e}",
                    healed.elapsed()
                );
            }
        }
    };
    let recovered = healed.elapsed();
    assert!(
        recovered < RECOVERY + MARGIN,
        "recovered only after {recovered:?}"
    );
    // A real decision, counted by Redis (the stalled calls never reached it;
    // of the calls that failed after healing, each may have).
    assert!(d.allowed());
    let counted = redis_count(server, lim, "k").await;
    assert!(
        (2..=2 + failed_after_heal).contains(&counted),
        "Redis counted {counted} for 2 decisions and {failed_after_heal} failed calls"
    );
    assert_eq!(d.remaining(), LIMIT - counted);
    // The decision came over a connection opened after the resume (those that
    // lived through the stall are still silent): one, or two when a wave's
    // unanswered attempt was still being retried as the network healed.
    let recovered_on = proxy.connections();
    if count_connections {
        assert!(
            (before + 1..=before + 2).contains(&recovered_on),
            "{} connections opened to recover",
            recovered_on - before
        );
    }
    // Later calls share it.
    for i in 1..=8 {
        let d = lim.check("k").await.unwrap();
        assert_eq!(d.remaining(), LIMIT - counted - i);
    }
    if count_connections {
        assert_eq!(proxy.connections(), recovered_on);
    }
    eprintln!(
        "{opened} connection attempts during the stall; decisions from Redis again \
         {recovered:?} after the network healed"
    );

    // The old connection finally delivers what it held: Redis applies the
    // stalled calls (a timed-out call may have been applied), and nobody is
    // waiting for their replies any more.
    proxy.resume_all();
    let d = lim.check("k").await.unwrap();
    assert!(d.allowed());
}

/// A one-node Redis Cluster reached only through a proxy: the node announces
/// the proxy's port, so the cluster client's every connection goes through it.
#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_cluster_connection_is_replaced_and_decisions_resume_when_the_network_heals() {
    use tower_redis_ratelimit::RedisClusterStore;

    let server = RedisServer::builder()
        .args([
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
        ])
        .start();
    let proxy = StallProxy::start(server.port());
    let mut conn = server.conn().await;
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("cluster-announce-port")
        .arg(proxy.port())
        .query_async(&mut conn)
        .await
        .unwrap();
    let () = redis::cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(0)
        .arg(16_383)
        .query_async(&mut conn)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query_async(&mut conn)
            .await
            .unwrap();
        if common::info_field(&info, "cluster_state") == Some("ok") {
            break;
        }
        assert!(Instant::now() < deadline, "one-node cluster not ok: {info}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut cfg = deadpool_redis::cluster::Config::from_urls(vec![proxy.url()]);
    cfg.pool = Some(deadpool_redis::PoolConfig::new(4));
    let pool = cfg
        .create_pool(Some(deadpool_redis::Runtime::Tokio1))
        .unwrap();
    let lim = RateLimiter::builder()
        .store(RedisClusterStore::new(pool).timeout(TIMEOUT))
        .prefix("stall-cluster")
        .quota(Quota::fixed_window(Rate::per_hour(LIMIT)))
        .build()
        .unwrap();
    stall_and_heal(&server, &proxy, &lim, false).await;
}

/// `total_connections_received` of `server`, read on a connection of its own
/// (counted in the figure).
async fn connections_received(server: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(&mut server.conn().await)
        .await
        .unwrap();
    common::info_field(&info, "total_connections_received")
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// A frozen Redis (SIGSTOP: the kernel still completes every TCP handshake,
/// nothing answers) under 200 clients that each send their next request as
/// soon as the last one fails, as a busy server's clients do: each pool slot
/// replaces its connection at most once per timeout ("per wave"), not once per
/// call whose budget ran out waiting for the replacement before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_gets_one_new_connection_per_slot_per_timeout_not_one_per_call() {
    const SLOTS: usize = 2;
    const CLIENTS: usize = 200;
    const REQUESTS: usize = 15;
    let server = RedisServer::start();
    let lim = RateLimiter::builder()
        .store(
            RedisStore::new(server.pool(2 * SLOTS))
                .connections(SLOTS)
                .timeout(TIMEOUT),
        )
        .prefix("frozen")
        .quota(Quota::fixed_window(Rate::per_hour(LIMIT)))
        .build()
        .unwrap();
    // every slot connected and the script loaded
    for _ in 0..2 * SLOTS {
        common::warm_up(&lim, "warm-up").await;
    }
    let before = connections_received(&server).await;

    server.pause();
    let frozen = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let lim = lim.clone();
            tokio::spawn(async move {
                for _ in 0..REQUESTS {
                    let started = Instant::now();
                    let result = lim.check("k").await;
                    let took = started.elapsed();
                    assert!(took < TIMEOUT + MARGIN, "a call took {took:?}");
                    assert!(result.is_err(), "a frozen Redis answered: {result:?}");
                }
            })
        })
        .collect();
    for client in clients {
        client.await.unwrap();
    }
    let elapsed = frozen.elapsed();
    server.resume();
    // (the handshakes the kernel completed meanwhile are accepted first)
    let opened = connections_received(&server).await - before - 1;

    // Each slot's replacements follow one another, each given the whole
    // timeout: at most one per slot per timeout of the freeze, plus the one
    // still trying when it ended.
    let waves = elapsed.as_micros().div_ceil(TIMEOUT.as_micros()) as u64;
    let bound = SLOTS as u64 * (waves + 1);
    eprintln!(
        "{opened} connections opened for {} requests in {elapsed:?} ({waves} timeouts, bound {bound})",
        CLIENTS * REQUESTS
    );
    assert!(
        opened <= bound,
        "{opened} connections opened for {} requests during a {elapsed:?} freeze \
         ({SLOTS} slots, {waves} timeouts of {TIMEOUT:?}): more than {bound}",
        CLIENTS * REQUESTS
    );
    // Redis answers again: decisions come from it at once.
    let d = common::warm_up(&lim, "k").await;
    assert!(d.allowed());
}

/// A replacement whose runtime shut down before it answered (a startup
/// runtime that ran a first call, or `verify()`, while Redis was frozen)
/// holds no slot for good: once Redis answers, the next call, on another
/// runtime, takes a fresh connection and decides (the flight was left in
/// the slot, and every later call failed at once with a timeout).
#[test]
fn a_replacement_cut_off_by_its_runtime_does_not_hold_the_slot() {
    let server = RedisServer::start();
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let lim = RateLimiter::builder()
        .store(
            RedisStore::new(server.pool(2))
                .connections(1)
                .timeout(Duration::from_secs(5)),
        )
        .prefix("cut-off")
        .quota(Quota::fixed_window(Rate::per_hour(LIMIT)))
        .build()
        .unwrap();
    server.pause();
    let first = runtime();
    first.block_on(async {
        // the slot's first connection: a replacement in a task of its own,
        // waiting on the frozen Redis
        let cut = tokio::time::timeout(Duration::from_millis(100), lim.check("k")).await;
        assert!(cut.is_err(), "a frozen Redis answered: {cut:?}");
    });
    drop(first); // the replacement's task goes with its runtime
    server.resume();
    runtime().block_on(async {
        let d = lim.check("k").await.expect("a fresh connection");
        assert!(d.allowed());
    });
}
