//! Redis Cluster over TLS (features `cluster` and `tls`): three TLS-only
//! masters whose cluster bus speaks TLS too, reached with `rediss://` URLs
//! through `RedisClusterStore::from_urls`, trusting the test's private CA the
//! way the guide's stores chapter says: through `SSL_CERT_FILE` (rustls-native-certs reads
//! it), since the cluster pool takes no certificates of its own.
//!
//! The environment variable is set for a child process (this same test
//! binary, run again for the one test) rather than in this process, where
//! other tests' threads run.
#![cfg(all(feature = "cluster", feature = "tls"))]

use crate::common;

use std::process::Command;

use common::{GENEROUS, RedisCluster, TlsFiles};
use tower_redis_ratelimit::{Quota, Rate, RateLimiter, RedisClusterStore};

/// Set in the child: the ports of the cluster to use.
const PORTS: &str = "TRR_CLUSTER_TLS_PORTS";

#[test]
fn a_cluster_over_tls_behind_a_private_ca_decides() {
    let ports = match std::env::var(PORTS) {
        Ok(ports) => ports,
        Err(_) => {
            // the parent: start the cluster, run this test again with the CA
            let tls = TlsFiles::generate();
            let cluster = RedisCluster::start_tls(3, &tls);
            let ports: Vec<String> = cluster.master_ports().iter().map(u16::to_string).collect();
            let out = Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "cluster_tls::a_cluster_over_tls_behind_a_private_ca_decides",
                    "--nocapture",
                ])
                .env(PORTS, ports.join(","))
                .env("SSL_CERT_FILE", tls.ca_file())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "the child failed:\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                String::from_utf8_lossy(&out.stdout).contains("1 passed"),
                "the child ran no test:\n{}",
                String::from_utf8_lossy(&out.stdout)
            );
            drop(cluster);
            return;
        }
    };
    // the child: every decision over TLS, keys spread over every master
    let urls: Vec<String> = ports
        .split(',')
        .map(|p| format!("rediss://127.0.0.1:{p}/"))
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let limiter = RateLimiter::builder()
            .store(
                RedisClusterStore::from_urls(urls)
                    .unwrap()
                    .timeout(GENEROUS),
            )
            .prefix("tls")
            .quota(Quota::fixed_window(Rate::per_hour(3)))
            .build()
            .unwrap();
        limiter.verify().await.unwrap();
        for user in 0..30 {
            let key = format!("user:{user}");
            for left in (0..3).rev() {
                let d = limiter.check(&key).await.unwrap();
                assert!(d.allowed() && d.remaining() == left, "{key}: {d:?}");
            }
            assert!(!limiter.check(&key).await.unwrap().allowed(), "{key}");
        }
    });
}
