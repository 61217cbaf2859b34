//! [`RedisCluster`]: a private Redis Cluster of [`RedisServer`] nodes.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use super::redis::{RedisServer, info_field};
use super::sys::{CLUSTER_DEADLINE, CLUSTER_SLOTS, INSTALL_HINT, redis_cli_bin};

/// A private Redis Cluster: `masters` masters, each with `replicas_per_master`
/// replicas, every node a [`RedisServer`] started with cluster mode on.
#[derive(Debug)]
pub(crate) struct RedisCluster {
    nodes: Vec<RedisServer>,
    master_ports: Vec<u16>,
    replica_ports: Vec<u16>,
}

impl RedisCluster {
    /// Starts the nodes, creates the cluster with `redis-cli --cluster create`
    /// and waits until every node reports `cluster_state:ok` with all 16384
    /// slots assigned, every node knows every other, and every replica's
    /// link to its master is up. Redis needs at least 3 masters.
    pub(crate) fn start(masters: usize, replicas_per_master: usize) -> RedisCluster {
        assert!(
            masters >= 3,
            "Redis Cluster needs at least 3 masters, got {masters}"
        );
        let cli = redis_cli_bin();
        match Command::new(&cli).arg("--version").output() {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                panic!("`{cli}` not found: {INSTALL_HINT}")
            }
            Err(e) => panic!("cannot run `{cli}`: {e}"),
        }

        let total = masters * (1 + replicas_per_master);
        let nodes: Vec<RedisServer> = (0..total)
            .map(|_| {
                RedisServer::builder()
                    .args([
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        "2000",
                    ])
                    .start()
            })
            .collect();

        let mut create = Command::new(&cli);
        create.arg("--cluster").arg("create");
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        create
            .arg("--cluster-replicas")
            .arg(replicas_per_master.to_string())
            .arg("--cluster-yes")
            .stdin(Stdio::null());
        let out = create
            .output()
            .unwrap_or_else(|e| panic!("cannot run `{cli} --cluster create`: {e}"));
        let mut cluster = RedisCluster {
            nodes,
            master_ports: Vec::new(),
            replica_ports: Vec::new(),
        };
        if !out.status.success() {
            panic!(
                "`{cli} --cluster create` failed ({}):\n{}\n{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                cluster.logs_tail(20)
            );
        }
        cluster.wait_converged(masters, replicas_per_master);
        cluster
    }

    /// A cluster of `masters` TLS-only masters (no replicas): clients and
    /// the cluster bus speak TLS with `tls`'s certificate
    /// (`--tls-cluster yes`), so the nodes announce their TLS ports. Created
    /// and watched with `redis-cli --tls`; waits until every node reports
    /// `cluster_state:ok` and knows every other.
    pub(crate) fn start_tls(masters: usize, tls: &std::sync::Arc<super::TlsFiles>) -> RedisCluster {
        assert!(masters >= 3, "Redis Cluster needs at least 3 masters");
        let cli = redis_cli_bin();
        let nodes: Vec<RedisServer> = (0..masters)
            .map(|_| {
                RedisServer::builder()
                    .tls(tls)
                    .args([
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        "2000",
                        "--tls-cluster",
                        "yes",
                    ])
                    .start()
            })
            .collect();
        let ca = tls.ca_file().display().to_string();
        let tls_cli = |port: Option<u16>| {
            let mut cmd = Command::new(&cli);
            cmd.args(["--tls", "--cacert", &ca]);
            if let Some(port) = port {
                cmd.args(["-p", &port.to_string()]);
            }
            cmd.stdin(Stdio::null());
            cmd
        };
        let mut create = tls_cli(None);
        create.arg("--cluster").arg("create");
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        let out = create
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run `{cli} --cluster create`: {e}"));
        let master_ports: Vec<u16> = nodes.iter().map(RedisServer::port).collect();
        let cluster = RedisCluster {
            nodes,
            master_ports,
            replica_ports: Vec::new(),
        };
        assert!(
            out.status.success(),
            "`{cli} --tls --cluster create` failed ({}):\n{}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            cluster.logs_tail(20)
        );
        let deadline = std::time::Instant::now() + CLUSTER_DEADLINE;
        loop {
            let ready = cluster.master_ports.iter().all(|&port| {
                tls_cli(Some(port))
                    .args(["CLUSTER", "INFO"])
                    .output()
                    .map(|o| {
                        let info = String::from_utf8_lossy(&o.stdout);
                        info.contains("cluster_state:ok")
                            && info.contains(&format!("cluster_known_nodes:{masters}"))
                    })
                    .unwrap_or(false)
            });
            if ready {
                return cluster;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the TLS cluster did not converge within {CLUSTER_DEADLINE:?}\n{}",
                cluster.logs_tail(20)
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    fn wait_converged(&mut self, masters: usize, replicas_per_master: usize) {
        let total = self.nodes.len();
        let deadline = Instant::now() + CLUSTER_DEADLINE;
        loop {
            let last = match self.check_converged(masters, replicas_per_master) {
                Ok((m, r)) => {
                    self.master_ports = m;
                    self.replica_ports = r;
                    return;
                }
                Err(why) => why,
            };
            if Instant::now() >= deadline {
                panic!(
                    "cluster of {total} nodes did not converge within {CLUSTER_DEADLINE:?}: {last}\n{}",
                    self.logs_tail(20)
                );
            }
            sleep(Duration::from_millis(100));
        }
    }

    /// Ok((master ports, replica ports)) once the cluster is fully formed.
    fn check_converged(
        &self,
        masters: usize,
        replicas_per_master: usize,
    ) -> Result<(Vec<u16>, Vec<u16>), String> {
        let total = self.nodes.len();
        for node in &self.nodes {
            let port = node.port();
            let mut conn = sync_conn(port).map_err(|e| format!("node {port}: {e}"))?;
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut conn)
                .map_err(|e| format!("node {port}: CLUSTER INFO: {e}"))?;
            let state = info_field(&info, "cluster_state").unwrap_or("?");
            let slots: u64 = info_field(&info, "cluster_slots_assigned")
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            let known: usize = info_field(&info, "cluster_known_nodes")
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            if state != "ok" || slots != CLUSTER_SLOTS || known != total {
                return Err(format!(
                    "node {port}: cluster_state:{state} slots_assigned:{slots} known_nodes:{known}/{total}"
                ));
            }
        }
        // Roles, as seen by the first node.
        let first = self.nodes[0].port();
        let mut conn = sync_conn(first).map_err(|e| format!("node {first}: {e}"))?;
        let listing: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut conn)
            .map_err(|e| format!("node {first}: CLUSTER NODES: {e}"))?;
        let mut master_ports = Vec::new();
        let mut replica_ports = Vec::new();
        for line in listing.lines().filter(|l| !l.trim().is_empty()) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(addr), Some(flags)) = (fields.get(1), fields.get(2)) else {
                return Err(format!("unexpected CLUSTER NODES line: {line}"));
            };
            let port: u16 = addr
                .split('@')
                .next()
                .and_then(|hp| hp.rsplit(':').next())
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| format!("unexpected address in CLUSTER NODES: {line}"))?;
            let flags: Vec<&str> = flags.split(',').collect();
            if flags.contains(&"master") {
                master_ports.push(port);
            } else if flags.contains(&"slave") {
                replica_ports.push(port);
            }
        }
        if master_ports.len() != masters || replica_ports.len() != masters * replicas_per_master {
            return Err(format!(
                "roles not settled: masters {master_ports:?}, replicas {replica_ports:?}"
            ));
        }
        for &port in &replica_ports {
            let mut conn = sync_conn(port).map_err(|e| format!("replica {port}: {e}"))?;
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut conn)
                .map_err(|e| format!("replica {port}: INFO replication: {e}"))?;
            if info_field(&info, "master_link_status") != Some("up") {
                return Err(format!("replica {port}: master link not up yet"));
            }
        }
        master_ports.sort_unstable();
        replica_ports.sort_unstable();
        Ok((master_ports, replica_ports))
    }

    /// All nodes, in creation order.
    pub(crate) fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// All nodes, mutable (for `kill()` / `restart()`).
    pub(crate) fn nodes_mut(&mut self) -> &mut [RedisServer] {
        &mut self.nodes
    }

    /// The node listening on `port`.
    pub(crate) fn node(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    /// The node listening on `port`, mutable.
    pub(crate) fn node_mut(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    /// URLs of all nodes (seed list for `redis::cluster::ClusterClient`).
    /// The port of the master serving `key`'s slot, asked of the node on `via`.
    pub(crate) async fn slot_owner(&self, via: u16, key: &str) -> u16 {
        let mut conn = self.node(via).conn().await;
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap();
        let slots: Vec<redis::Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut conn)
            .await
            .unwrap();
        for range in slots {
            let redis::Value::Array(items) = range else {
                continue;
            };
            let (redis::Value::Int(lo), redis::Value::Int(hi), redis::Value::Array(node)) =
                (&items[0], &items[1], &items[2])
            else {
                continue;
            };
            if (*lo..=*hi).contains(&slot)
                && let redis::Value::Int(port) = node[1]
            {
                return port as u16;
            }
        }
        panic!("no owner for slot {slot} (asked {via})");
    }

    pub(crate) fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Ports of the masters as of cluster creation (sorted).
    pub(crate) fn master_ports(&self) -> Vec<u16> {
        self.master_ports.clone()
    }

    /// Ports of the replicas as of cluster creation (sorted).
    pub(crate) fn replica_ports(&self) -> Vec<u16> {
        self.replica_ports.clone()
    }

    /// A cluster client seeded with every node.
    pub(crate) fn client(&self) -> redis::cluster::ClusterClient {
        redis::cluster::ClusterClient::new(self.urls()).expect("cluster client from fixture URLs")
    }

    /// A fresh async cluster connection.
    pub(crate) async fn conn(&self) -> redis::cluster_async::ClusterConnection {
        self.client()
            .get_async_connection()
            .await
            .unwrap_or_else(|e| panic!("cannot connect to cluster {:?}: {e}", self.urls()))
    }

    /// `INFO commandstats` summed over the masters (as of creation).
    pub(crate) async fn info_commandstats_masters(&self) -> HashMap<String, u64> {
        let mut total = HashMap::new();
        for &port in &self.master_ports {
            for (cmd, calls) in self.node(port).info_commandstats().await {
                *total.entry(cmd).or_insert(0) += calls;
            }
        }
        total
    }

    fn logs_tail(&self, lines: usize) -> String {
        self.nodes
            .iter()
            .map(|n| format!("--- node {} log tail ---\n{}", n.port(), n.log_tail(lines)))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        // SIGKILL everything first so no node notices its peers going away one by one.
        for node in &mut self.nodes {
            if let Some(child) = node.child.as_mut() {
                let _ = child.kill();
            }
        }
        // Each RedisServer's Drop then reaps its process and removes its directory.
    }
}

fn sync_conn(port: u16) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let conn = client.get_connection_with_timeout(Duration::from_secs(1))?;
    conn.set_read_timeout(Some(Duration::from_secs(1)))?;
    conn.set_write_timeout(Some(Duration::from_secs(1)))?;
    Ok(conn)
}
