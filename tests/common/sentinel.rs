//! [`RedisSentinel`]: a private Redis Sentinel deployment: one primary, one
//! replica and three sentinels (`redis-server <config> --sentinel`, each with
//! a config file generated in its own directory), all [`RedisServer`]s on
//! free loopback ports, killed when the fixture drops.
//!
//! Failover is tuned to take seconds, not minutes: `down-after-milliseconds
//! 1000`, `failover-timeout 5000`, quorum 2.

use std::fs;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::sleep;
use std::time::{Duration, Instant};

use super::redis::{RedisServer, info_field};
use super::sys::unique_dir;
use super::tls::TlsFiles;

/// The name the sentinels monitor the primary under.
pub(crate) const MASTER_NAME: &str = "trr-primary";

/// How long a deployment gets to come up, and a failover to complete.
const DEADLINE: Duration = Duration::from_secs(40);

/// One primary, one replica, three sentinels.
#[derive(Debug)]
pub(crate) struct RedisSentinel {
    /// The data nodes (the primary first, as started; roles change with failovers).
    nodes: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
    tls: Option<Arc<TlsFiles>>,
    /// The sentinels' config files.
    dir: PathBuf,
}

impl RedisSentinel {
    /// A deployment over plain TCP.
    pub(crate) fn start() -> RedisSentinel {
        Self::start_with(None)
    }

    /// A deployment where every node and sentinel serves TLS only, with `tls`'s certificate.
    pub(crate) fn start_tls(tls: &Arc<TlsFiles>) -> RedisSentinel {
        Self::start_with(Some(tls.clone()))
    }

    fn start_with(tls: Option<Arc<TlsFiles>>) -> RedisSentinel {
        let builder = || {
            let b = RedisServer::builder();
            match &tls {
                // replicas and sentinels reach the nodes over TLS too
                Some(t) => b.tls(t).args(["--tls-replication", "yes"]),
                None => b,
            }
        };
        let primary = builder().start();
        let replica = builder()
            .args(["--replicaof", "127.0.0.1"])
            .arg(primary.port().to_string())
            .start();
        let dir = unique_dir("trr-sentinel");
        let sentinels = (0..3)
            .map(|i| {
                let config = dir.join(format!("sentinel-{i}.conf"));
                let mut text = format!(
                    "sentinel monitor {MASTER_NAME} 127.0.0.1 {} 2\n\
                     sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                     sentinel failover-timeout {MASTER_NAME} 5000\n\
                     sentinel parallel-syncs {MASTER_NAME} 1\n",
                    primary.port()
                );
                if tls.is_some() {
                    text.push_str("tls-replication yes\n");
                }
                fs::write(&config, text).unwrap();
                builder().config_file(config).arg("--sentinel").start()
            })
            .collect();
        let deployment = RedisSentinel {
            nodes: vec![primary, replica],
            sentinels,
            tls,
            dir,
        };
        deployment.wait_until(
            "every sentinel knows the replica and the other sentinels",
            || deployment.settled(),
        );
        deployment
    }

    /// Polls `ready` until it holds, for [`DEADLINE`]; panics with the last state.
    fn wait_until(&self, what: &str, mut ready: impl FnMut() -> Result<(), String>) {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let last = match ready() {
                Ok(()) => return,
                Err(why) => why,
            };
            assert!(
                Instant::now() < deadline,
                "sentinel fixture: not the case within {DEADLINE:?} that {what}: {last}\n{}",
                self.logs_tail(15)
            );
            sleep(Duration::from_millis(100));
        }
    }

    fn settled(&self) -> Result<(), String> {
        for s in &self.sentinels {
            let mut conn = sync_conn(s)?;
            let fields: Vec<String> = redis::cmd("SENTINEL")
                .arg("MASTER")
                .arg(MASTER_NAME)
                .query(&mut conn)
                .map_err(|e| format!("sentinel {}: {e}", s.port()))?;
            let field = |name: &str| {
                fields
                    .chunks(2)
                    .find(|kv| kv[0] == name)
                    .map(|kv| kv[1].clone())
                    .unwrap_or_default()
            };
            let (replicas, others) = (field("num-slaves"), field("num-other-sentinels"));
            if replicas != "1" || others != "2" || field("flags") != "master" {
                return Err(format!(
                    "sentinel {}: flags {}, {replicas} replicas, {others} other sentinels",
                    s.port(),
                    field("flags")
                ));
            }
        }
        Ok(())
    }

    /// The sentinels' URLs (`redis://` or `rediss://`).
    pub(crate) fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The sentinels' addresses, for `SentinelClientBuilder`.
    pub(crate) fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(RedisServer::port).collect()
    }

    /// The port of the primary the first sentinel that answers names.
    pub(crate) fn primary_port(&self) -> u16 {
        let mut last = String::new();
        for s in &self.sentinels {
            match sync_conn(s).and_then(|mut c| {
                redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(MASTER_NAME)
                    .query::<(String, u16)>(&mut c)
                    .map_err(|e| e.to_string())
            }) {
                Ok((_, port)) => return port,
                Err(e) => last = e,
            }
        }
        panic!("no sentinel names the primary: {last}")
    }

    /// The data node on `port`.
    pub(crate) fn node(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no data node on port {port}"))
    }

    /// The data node on `port`, mutable (to `kill()` it).
    pub(crate) fn node_mut(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no data node on port {port}"))
    }

    /// The data node that is not on `port`.
    pub(crate) fn other_node(&self, port: u16) -> u16 {
        self.nodes
            .iter()
            .map(RedisServer::port)
            .find(|&p| p != port)
            .unwrap_or_else(|| panic!("no data node beside {port}"))
    }

    /// Writes a marker on the primary and waits (`WAIT 1`) until the replica
    /// has acknowledged it: everything written before is replicated.
    pub(crate) fn sync_replica(&self) {
        let primary = self.node(self.primary_port());
        let mut conn = sync_conn(primary).unwrap();
        let () = redis::cmd("SET")
            .arg("trr:replication-marker")
            .arg(1)
            .query(&mut conn)
            .unwrap();
        // (each WAIT within the connection's read timeout)
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let acked: i64 = redis::cmd("WAIT")
                .arg(1)
                .arg(1000)
                .query(&mut conn)
                .unwrap();
            if acked >= 1 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the replica did not acknowledge within 10 s"
            );
        }
    }

    /// Asks a sentinel for a failover (`SENTINEL FAILOVER`), retrying while
    /// the sentinels are not ready for one.
    pub(crate) fn failover(&self) {
        self.wait_until("a sentinel accepts SENTINEL FAILOVER", || {
            let mut conn = sync_conn(&self.sentinels[0])?;
            redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg(MASTER_NAME)
                .query::<()>(&mut conn)
                .map_err(|e| e.to_string())
        });
    }

    /// Waits until every sentinel names a primary other than `old`, that
    /// node says it is a primary and the other node replicates from it
    /// (when it runs). Returns the new primary's port.
    pub(crate) fn wait_for_new_primary(&self, old: u16) -> u16 {
        let new = self.other_node(old);
        self.wait_until(&format!("{new} replaced {old} as the primary"), || {
            for s in &self.sentinels {
                let mut conn = sync_conn(s)?;
                let (_, port): (String, u16) = redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(MASTER_NAME)
                    .query(&mut conn)
                    .map_err(|e| e.to_string())?;
                if port != new {
                    return Err(format!("sentinel {} names {port}", s.port()));
                }
            }
            let role = replication(self.node(new))?;
            if info_field(&role, "role") != Some("master") {
                return Err(format!("{new} is not a primary yet"));
            }
            Ok(())
        });
        new
    }

    /// Waits until the node on `port` replicates from the primary with its link up.
    pub(crate) fn wait_for_replica(&self, port: u16) {
        self.wait_until(&format!("{port} replicates with its link up"), || {
            let info = replication(self.node(port))?;
            match (
                info_field(&info, "role"),
                info_field(&info, "master_link_status"),
            ) {
                (Some("slave"), Some("up")) => Ok(()),
                other => Err(format!("{port}: role, link {other:?}")),
            }
        });
    }

    fn logs_tail(&self, lines: usize) -> String {
        self.nodes
            .iter()
            .chain(&self.sentinels)
            .map(|n| format!("--- {} log tail ---\n{}", n.port(), n.log_tail(lines)))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        // sentinels first, so that none fails anything over while the nodes go
        for s in &mut self.sentinels {
            s.kill();
        }
        for n in &mut self.nodes {
            n.kill();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// `INFO replication` of `node`.
fn replication(node: &RedisServer) -> Result<String, String> {
    let mut conn = sync_conn(node)?;
    redis::cmd("INFO")
        .arg("replication")
        .query(&mut conn)
        .map_err(|e| format!("{}: {e}", node.port()))
}

fn sync_conn(server: &RedisServer) -> Result<redis::Connection, String> {
    let conn = server
        .client()
        .get_connection_with_timeout(Duration::from_secs(2))
        .map_err(|e| format!("{}: {e}", server.port()))?;
    conn.set_read_timeout(Some(Duration::from_secs(2)))
        .and_then(|()| conn.set_write_timeout(Some(Duration::from_secs(2))))
        .map_err(|e| format!("{}: {e}", server.port()))?;
    Ok(conn)
}
