//! Helpers of the server's integration tests: a service on a free loopback
//! port with a tonic client, descriptors, a private `redis-server`, and a
//! scrape of the metrics endpoint.

#![allow(dead_code)]

pub(crate) mod envoy;

use std::net::{SocketAddr, TcpListener as StdListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tonic::transport::Channel;
use tower_redis_ratelimit_server::pb::rate_limit_descriptor::Entry;
use tower_redis_ratelimit_server::pb::rate_limit_response::{Code, DescriptorStatus};
use tower_redis_ratelimit_server::pb::{
    RateLimitDescriptor, RateLimitRequest, RateLimitResponse, RateLimitServiceClient,
    RateLimitServiceServer,
};
use tower_redis_ratelimit_server::service::RlsService;

pub(crate) type Client = RateLimitServiceClient<Channel>;

/// Serves `service` over gRPC on a free loopback port.
pub(crate) async fn serve(service: RlsService) -> Client {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(tower_redis_ratelimit_server::serve::serve(
        tower_redis_ratelimit_server::net::Incoming::new(listener, Default::default()),
        tonic::service::Routes::new(RateLimitServiceServer::new(service)),
        Default::default(),
        std::future::pending(),
    ));
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    RateLimitServiceClient::new(channel)
}

/// Serves `service`'s metrics on a free loopback port.
pub(crate) async fn serve_metrics(service: &RlsService) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(tower_redis_ratelimit_server::metrics::serve(
        listener,
        service.metrics(),
    ));
    addr
}

/// `GET path` over HTTP/1.1: the status line and the body.
pub(crate) async fn http_get(addr: SocketAddr, path: &str) -> (String, String, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut raw = String::new();
    s.read_to_string(&mut raw).await.expect("read");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a response");
    let status = head.lines().next().unwrap_or_default().to_owned();
    (status, head.to_owned(), body.to_owned())
}

/// The exposition text of the metrics endpoint at `addr`.
pub(crate) async fn scrape(addr: SocketAddr) -> String {
    let (status, head, body) = http_get(addr, "/metrics").await;
    assert!(status.contains("200"), "{status}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    body
}

/// The value of the sample `series` (`name{labels}`, written as the
/// exposition writes it) in `text`; 0 if absent.
pub(crate) fn sample(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse::<f64>().expect("number") as u64)
        .unwrap_or(0)
}

pub(crate) fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        limit: None,
        hits_addend: None,
    }
}

/// A descriptor that checks without consuming (`hits_addend: 0`).
pub(crate) fn peek(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    let mut d = desc(entries);
    d.hits_addend = Some(0);
    d
}

pub(crate) async fn try_ask(
    client: &mut Client,
    domain: &str,
    descriptors: Vec<RateLimitDescriptor>,
    hits: u32,
) -> Result<RateLimitResponse, tonic::Status> {
    client
        .should_rate_limit(RateLimitRequest {
            domain: domain.into(),
            descriptors,
            hits_addend: hits,
            hits_subtrahend: 0,
        })
        .await
        .map(|r| r.into_inner())
}

pub(crate) async fn ask(
    client: &mut Client,
    domain: &str,
    descriptors: Vec<RateLimitDescriptor>,
    hits: u32,
) -> RateLimitResponse {
    try_ask(client, domain, descriptors, hits)
        .await
        .expect("call")
}

pub(crate) fn code(s: &DescriptorStatus) -> Code {
    Code::try_from(s.code).expect("code")
}

pub(crate) fn overall(r: &RateLimitResponse) -> Code {
    Code::try_from(r.overall_code).expect("code")
}

pub(crate) fn header<'a>(r: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    r.response_headers_to_add
        .iter()
        .find(|h| h.key.eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

/// A free loopback port (bound and released).
pub(crate) fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// Waits until `port` on loopback accepts connections, or `child` exits.
pub(crate) fn wait_port(child: &mut Child, port: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port))).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A private `redis-server` on a free loopback port, killed on drop.
pub(crate) struct Redis {
    pub(crate) child: Child,
    pub(crate) port: u16,
}

impl Redis {
    /// Starts one with `extra` arguments.
    pub(crate) fn start_with(extra: &[&str]) -> Redis {
        for _ in 0..20 {
            let port = free_port();
            let mut child = Command::new("redis-server")
                .args([
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .args(extra)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server on PATH (apt-get install redis-server)");
            if wait_port(&mut child, port) {
                return Redis { child, port };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("could not start redis-server");
    }

    pub(crate) fn start() -> Redis {
        Redis::start_with(&[])
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Sends `signal` (`STOP`, `CONT`) to the server.
    pub(crate) fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill -{signal}");
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        // (a stopped server must be continued to die promptly)
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `redis-cli -p <port of redis> args...`: its output.
pub(crate) fn redis_cli(redis: &Redis, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &redis.port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli on PATH (apt-get install redis-server)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits out the last 30 seconds of an hour, so that a test of hour-long
/// windows aligned to the epoch runs inside one of them.
pub(crate) async fn inside_one_hour() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let into = now.as_secs() % 3600;
    if into >= 3600 - 30 {
        tokio::time::sleep(Duration::from_secs(3600 - into + 1)).await;
    }
}

/// A fresh empty directory under the system's temporary one, removed on
/// drop.
pub(crate) struct TempDir(pub(crate) std::path::PathBuf);

impl TempDir {
    pub(crate) fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let p = std::env::temp_dir().join(format!("rls-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&p).expect("temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process killed (and reaped) on drop, even when a test fails.
pub(crate) struct Reaped(pub(crate) Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A three-primary Redis Cluster of private `redis-server`s (no replicas;
/// each killed on drop), its data under a temporary directory of `tag`,
/// once every node says `cluster_state:ok`.
pub(crate) fn cluster(tag: &str) -> (TempDir, Vec<Redis>) {
    let data = TempDir::new(tag);
    let mut nodes = Vec::new();
    for i in 0..3 {
        let d = data.0.join(format!("n{i}"));
        std::fs::create_dir_all(&d).expect("dir");
        nodes.push(Redis::start_with(&[
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "2000",
            "--dir",
            d.to_str().expect("utf-8 path"),
        ]));
    }
    let mut create = Command::new("redis-cli");
    create.args(["--cluster", "create"]);
    for n in &nodes {
        create.arg(format!("127.0.0.1:{}", n.port));
    }
    let out = create
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .stdin(Stdio::null())
        .output()
        .expect("redis-cli --cluster create");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !nodes.iter().all(|n| {
        Command::new("redis-cli")
            .args(["-p", &n.port.to_string(), "cluster", "info"])
            .output()
            .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("cluster_state:ok"))
    }) {
        assert!(Instant::now() < deadline, "the cluster is not ok");
        std::thread::sleep(Duration::from_millis(50));
    }
    (data, nodes)
}

/// One file `api.yaml` of `text`, loaded.
pub(crate) fn config(text: &str) -> tower_redis_ratelimit_server::config::Config {
    use tower_redis_ratelimit_server::config::{Config, LoadOptions};
    Config::from_sources([("api.yaml", text)], LoadOptions::default()).expect("config")
}

/// A store on `redis`, with a timeout generous enough for a shared machine.
pub(crate) fn redis_store(redis: &Redis) -> tower_redis_ratelimit::RedisStore {
    tower_redis_ratelimit::RedisStore::from_url(&redis.url())
        .expect("store")
        .timeout(Duration::from_secs(10))
}

/// `d` with `hits_addend` set.
pub(crate) fn with_hits(mut d: RateLimitDescriptor, hits: u64) -> RateLimitDescriptor {
    d.hits_addend = Some(hits);
    d
}

/// A memory figure of this process from `/proc/self/status` (`VmRSS`,
/// `VmHWM`, ...), in KiB; 0 where it is not there.
pub(crate) fn proc_status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}
