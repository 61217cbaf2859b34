//! A pooled connection that Redis closed while the application was idle
//! (`timeout` in redis.conf, `CLIENT KILL`, a restart) is replaced before a
//! decision is sent on it: the first check after the idle spell succeeds
//! instead of failing with "broken pipe". A connection idle for less than a
//! second is used as is (one round trip per decision under load; see
//! `one_redis_round_trip_per_decision_and_no_ping` in tests/store/redis_store.rs).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::{GENEROUS, RedisServer};
use tower_redis_ratelimit::{Quota, Rate, RateLimiter, RedisStore};

/// Longer than the idle spell after which a connection is checked before use.
const IDLE: Duration = Duration::from_millis(2_500);

fn limiter(server: &RedisServer, prefix: &str) -> RateLimiter {
    RateLimiter::builder()
        .store(RedisStore::new(server.pool(4)).timeout(GENEROUS))
        .prefix(prefix)
        .quota(Quota::fixed_window(Rate::per_minute(100)))
        .build()
        .unwrap()
}

async fn admin(server: &RedisServer, args: &[&str]) {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    let _: redis::Value = cmd.query_async(&mut server.conn().await).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_check_after_redis_closed_an_idle_connection_succeeds() {
    let server = RedisServer::start();
    let lim = limiter(&server, "stale-idle");
    assert_eq!(lim.check("k").await.unwrap().remaining(), 99);
    // Redis closes clients idle for more than a second
    admin(&server, &["CONFIG", "SET", "timeout", "1"]).await;
    tokio::time::sleep(IDLE).await;
    let d = lim.check("k").await.expect("the first check after idling");
    assert_eq!(d.remaining(), 98, "the decision was made once");
    assert_eq!(lim.check("k").await.unwrap().remaining(), 97);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_check_after_client_kill_succeeds() {
    let server = RedisServer::start();
    let lim = limiter(&server, "stale-kill");
    assert_eq!(lim.check("k").await.unwrap().remaining(), 99);
    admin(
        &server,
        &["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"],
    )
    .await;
    // the application was idle when its connection was killed
    tokio::time::sleep(IDLE).await;
    let d = lim
        .check("k")
        .await
        .expect("the first check after CLIENT KILL");
    assert_eq!(d.remaining(), 98, "the decision was made once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_check_after_a_restart_while_idle_succeeds() {
    let mut server = RedisServer::start();
    let lim = limiter(&server, "stale-restart");
    assert_eq!(lim.check("k").await.unwrap().remaining(), 99);
    server.restart();
    tokio::time::sleep(IDLE).await;
    // the restarted Redis is empty and has no script: a fresh count
    let d = lim
        .check("k")
        .await
        .expect("the first check after a restart");
    assert_eq!(d.remaining(), 99);
}

#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_the_first_check_after_redis_closed_idle_connections_succeeds() {
    use common::RedisCluster;
    use tower_redis_ratelimit::RedisClusterStore;

    let cluster = RedisCluster::start(3, 0);
    let pool = deadpool_redis::cluster::Config::from_urls(cluster.urls())
        .create_pool(Some(deadpool_redis::Runtime::Tokio1))
        .unwrap();
    let lim = RateLimiter::builder()
        .store(RedisClusterStore::new(pool).timeout(GENEROUS))
        .prefix("stale-cluster")
        .quota(Quota::fixed_window(Rate::per_minute(100)))
        .build()
        .unwrap();
    assert_eq!(lim.check("k").await.unwrap().remaining(), 99);
    for node in cluster.nodes() {
        admin(node, &["CONFIG", "SET", "timeout", "1"]).await;
    }
    tokio::time::sleep(IDLE).await;
    let d = lim.check("k").await.expect("the first check after idling");
    assert_eq!(d.remaining(), 98, "the decision was made once");
}
