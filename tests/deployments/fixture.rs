//! Tests of the shared Redis fixtures in `tests/common`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::{RedisCluster, RedisServer, parse_commandstats};
use redis::AsyncCommands;

async fn ping(conn: &mut redis::aio::MultiplexedConnection) -> redis::RedisResult<String> {
    redis::cmd("PING").query_async(conn).await
}

#[tokio::test]
async fn server_starts_on_private_port_and_answers_ping() {
    let server = RedisServer::start();
    assert_ne!(server.port(), 6379, "must never use the shared Redis");
    assert_eq!(
        server.url(),
        format!("redis://127.0.0.1:{}/", server.port())
    );
    assert!(server.dir().starts_with(std::env::temp_dir()));
    let mut conn = server.conn().await;
    assert_eq!(ping(&mut conn).await.unwrap(), "PONG");
    assert_eq!(server.dbsize().await, 0, "a fresh server is empty");
}

#[tokio::test]
async fn parallel_servers_get_distinct_ports_and_dirs() {
    let servers: Vec<RedisServer> = (0..4).map(|_| RedisServer::start()).collect();
    let mut ports: Vec<u16> = servers.iter().map(RedisServer::port).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), servers.len());
    let mut conn = servers[0].conn().await;
    let () = conn.set("only-on-first", 1).await.unwrap();
    assert_eq!(servers[0].dbsize().await, 1);
    assert_eq!(servers[1].dbsize().await, 0, "servers do not share data");
}

#[tokio::test]
async fn builder_passes_extra_args() {
    let server = RedisServer::builder().arg("--maxmemory").arg("1mb").start();
    let mut conn = server.conn().await;
    let (_, value): (String, u64) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(value, 1024 * 1024);
}

#[tokio::test]
async fn pause_makes_ping_time_out_and_resume_restores_it() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    assert_eq!(ping(&mut conn).await.unwrap(), "PONG");

    server.pause();
    let paused = tokio::time::timeout(Duration::from_millis(200), ping(&mut conn)).await;
    assert!(
        !matches!(paused, Ok(Ok(_))),
        "PING must not be answered while paused: {paused:?}"
    );

    server.resume();
    let resumed = tokio::time::timeout(Duration::from_secs(2), ping(&mut conn))
        .await
        .expect("PING answered after resume")
        .expect("PING ok after resume");
    assert_eq!(resumed, "PONG");
}

#[tokio::test]
async fn kill_then_restart_serves_again_on_same_port() {
    let mut server = RedisServer::start();
    let port = server.port();
    let old_pid = server.pid();
    let mut conn = server.conn().await;
    let () = conn.set("k", "v").await.unwrap();

    server.kill();
    assert!(!server.is_running());
    assert!(
        server
            .client()
            .get_connection_with_timeout(Duration::from_millis(200))
            .is_err(),
        "nothing listens after kill()"
    );

    server.restart();
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), old_pid);
    assert!(server.is_running());
    let mut conn = server.conn().await;
    assert_eq!(ping(&mut conn).await.unwrap(), "PONG");
    assert_eq!(server.dbsize().await, 0, "no persistence across restarts");
}

#[tokio::test]
async fn commandstats_counts_commands() {
    let server = RedisServer::start();
    assert_eq!(
        server.command_calls("ping").await,
        0,
        "the fixture's readiness probe is not counted"
    );
    assert_eq!(server.command_calls("incr").await, 0);
    let mut conn = server.conn().await;
    for _ in 0..3 {
        let _: i64 = redis::cmd("INCR")
            .arg("counter")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let stats = server.info_commandstats().await;
    assert_eq!(stats.get("incr"), Some(&3), "stats: {stats:?}");
    assert_eq!(server.command_calls("INCR").await, 3);

    server.reset_stats().await;
    assert_eq!(server.command_calls("incr").await, 0);
}

#[test]
fn commandstats_parser_reads_calls() {
    let info = "# Commandstats\r\n\
        cmdstat_evalsha:calls=1234,usec=5,usec_per_call=0.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_config|get:calls=2,usec=1,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n";
    let stats = parse_commandstats(info);
    assert_eq!(stats.get("evalsha"), Some(&1234));
    assert_eq!(stats.get("config|get"), Some(&2));
    assert_eq!(stats.len(), 2);
}

#[tokio::test]
async fn keys_with_ttl_lists_binary_keys_and_pttl() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let binary_key: &[u8] = b"bin\x00\xffkey";
    let () = conn.pset_ex(binary_key, "x", 60_000).await.unwrap();
    let () = conn.set("persistent", "y").await.unwrap();

    let keys = server.keys_with_ttl().await;
    assert_eq!(keys.len(), 2, "{keys:?}");
    let (_, ttl) = keys
        .iter()
        .find(|(k, _)| k == binary_key)
        .expect("binary key listed");
    assert!((1..=60_000).contains(ttl), "pttl {ttl}");
    let (_, ttl) = keys
        .iter()
        .find(|(k, _)| k == b"persistent")
        .expect("plain key listed");
    assert_eq!(*ttl, -1);
}

#[tokio::test]
async fn pool_hands_out_working_connections() {
    let server = RedisServer::start();
    let pool = server.pool(2);
    assert_eq!(pool.status().max_size, 2);
    let mut conn = pool.get().await.unwrap();
    let pong: String = redis::cmd("PING").query_async(&mut *conn).await.unwrap();
    assert_eq!(pong, "PONG");
}

#[tokio::test]
async fn cluster_of_three_masters_is_ok_and_serves_set_get() {
    let cluster = RedisCluster::start(3, 0);
    assert_eq!(cluster.nodes().len(), 3);
    assert_eq!(cluster.master_ports().len(), 3);
    assert!(cluster.replica_ports().is_empty());

    let client = redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
    let mut conn = client.get_async_connection().await.unwrap();
    // Enough keys to hit every master.
    for i in 0..30 {
        let key = format!("key-{i}");
        let () = conn.set(&key, i).await.unwrap();
        let value: i64 = conn.get(&key).await.unwrap();
        assert_eq!(value, i);
    }
    let mut total = 0;
    for port in cluster.master_ports() {
        let on_node = cluster.node(port).dbsize().await;
        assert!(on_node > 0, "master {port} got no key");
        total += on_node;
    }
    assert_eq!(total, 30);
}

#[tokio::test]
async fn cluster_with_replicas_gives_each_master_one_replica() {
    let cluster = RedisCluster::start(3, 1);
    assert_eq!(cluster.nodes().len(), 6);
    assert_eq!(cluster.master_ports().len(), 3);
    assert_eq!(cluster.replica_ports().len(), 3);

    let mut conn = cluster.conn().await;
    let () = conn.set("{tag}k", "v").await.unwrap();
    let value: String = conn.get("{tag}k").await.unwrap();
    assert_eq!(value, "v");
}
