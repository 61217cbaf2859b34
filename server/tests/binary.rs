//! The `ratelimit-server` binary end to end: its store flags and
//! environment on a private Redis Cluster and a Redis Sentinel, its
//! metrics endpoint, its refusal of malformed values, its stop on SIGTERM
//! (health first, then a deadline), its connections under a low open-file
//! limit, its startup checks (no rule, a store that refuses), its logs
//! through a pipe, envoyproxy/ratelimit's environment.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use tower_redis_ratelimit_server::pb::rate_limit_response::Code;

const CONFIG: &str =
    "domain: bin\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 3}\n";

/// What a server logged so far.
type Log = std::sync::Arc<std::sync::Mutex<String>>;

fn logged(log: &Log) -> String {
    log.lock().map(|l| l.clone()).unwrap_or_default()
}

/// A running `ratelimit-server`, stopped with SIGTERM on drop.
struct Server {
    child: Child,
    grpc: u16,
    metrics: u16,
}

impl Server {
    fn spawn(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Server {
        Server::spawn_with(dir, args, env, Stdio::null())
    }

    /// With its log (standard error) collected into the returned string.
    fn spawn_logged(dir: &Path, args: &[&str]) -> (Server, Log) {
        Server::spawn_logged_with(dir, args, &[], None)
    }

    fn spawn_logged_with(
        dir: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        nofile: Option<u32>,
    ) -> (Server, Log) {
        let mut server = Server::spawn_limited(dir, args, env, Stdio::piped(), nofile);
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let out = server.child.stderr.take().expect("stderr");
        let sink = log.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if let Ok(mut l) = sink.lock() {
                    l.push_str(&line);
                    l.push('\n');
                }
            }
        });
        (server, log)
    }

    fn spawn_with(dir: &Path, args: &[&str], env: &[(&str, &str)], log: Stdio) -> Server {
        Server::spawn_limited(dir, args, env, log, None)
    }

    /// With its log collected, and under an open-file limit of `nofile`
    /// when given (`ulimit -n` in a shell that then runs it: the same
    /// process).
    fn spawn_limited(
        dir: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        log: Stdio,
        nofile: Option<u32>,
    ) -> Server {
        let grpc = free_port();
        let metrics = free_port();
        let bin = env!("CARGO_BIN_EXE_ratelimit-server");
        let mut cmd = match nofile {
            None => Command::new(bin),
            Some(n) => {
                let mut c = Command::new("bash");
                c.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(bin);
                c
            }
        };
        cmd.arg("--config")
            .arg(dir)
            .args(["--grpc", &format!("127.0.0.1:{grpc}")])
            .args(["--metrics", &format!("127.0.0.1:{metrics}")])
            // (a first connection in a debug build on 2 shared cores may
            // take more than the default 100 ms; a later flag wins)
            .args(["--store-timeout", "3000"])
            .args(args)
            .env_remove("REDIS_URL")
            .env_remove("REDIS_CA")
            .env_remove("REDIS_CLUSTER_URLS")
            .env_remove("REDIS_SENTINEL_URLS")
            .env_remove("REDIS_SENTINEL_MASTER")
            .stdout(Stdio::null())
            .stderr(log);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("ratelimit-server");
        assert!(wait_port(&mut child, grpc), "the server did not start");
        assert!(wait_port(&mut child, metrics), "no metrics port");
        Server {
            child,
            grpc,
            metrics,
        }
    }

    async fn client(&self) -> Client {
        let channel =
            tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{}", self.grpc))
                .expect("uri")
                .connect()
                .await
                .expect("connect");
        Client::new(channel)
    }

    /// SIGTERM, and the exit status.
    fn stop(&mut self) -> std::process::ExitStatus {
        self.term();
        self.exit_within(Duration::from_secs(15))
            .expect("no exit after SIGTERM")
    }

    fn term(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
    }

    /// The exit status, once it exits within `within`.
    fn exit_within(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The CPU time the process used so far, in clock ticks (utime + stime
    /// of `/proc/<pid>/stat`).
    fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))
            .expect("/proc/<pid>/stat");
        let (_, rest) = stat.rsplit_once(')').expect("stat");
        let fields: Vec<&str> = rest.split_whitespace().collect();
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config_dir(tag: &str) -> TempDir {
    let dir = TempDir::new(tag);
    std::fs::write(dir.0.join("bin.yaml"), CONFIG).expect("write");
    dir
}

/// Waits until the server's store answers (a first connection, a TLS
/// handshake in a debug build on 2 shared cores, may take longer than a
/// client's own connection timeout), without consuming anything.
async fn warm(c: &mut Client) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match try_ask(c, "bin", vec![peek(&[("k", "warm-up")])], 0).await {
            Ok(_) => return,
            Err(e) if Instant::now() < deadline => {
                eprintln!("warming up: {e:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the store never answered: {e:?}"),
        }
    }
}

/// Three of 3 per year admitted, the fourth denied.
async fn three_then_over(server: &Server) {
    let mut c = server.client().await;
    warm(&mut c).await;
    let mut codes = Vec::new();
    for _ in 0..4 {
        let r = ask(&mut c, "bin", vec![desc(&[("k", "v")])], 0).await;
        codes.push(overall(&r));
    }
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit]);
}

fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli on PATH");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn dbsize(port: u16) -> u64 {
    cli(port, &["dbsize"]).parse().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_url_from_the_environment_metrics_and_sigterm() {
    let redis = Redis::start();
    let dir = config_dir("bin-redis");
    let mut server = Server::spawn(&dir.0, &[], &[("REDIS_URL", &redis.url())]);
    three_then_over(&server).await;
    assert!(dbsize(redis.port) > 0, "nothing stored in Redis");
    let text = scrape(std::net::SocketAddr::from(([127, 0, 0, 1], server.metrics))).await;
    let total = "ratelimit_service_rate_limit_total_hits{domain=\"bin\",key=\"k\"}";
    assert_eq!(sample(&text, total), 4, "{text}");
    assert_eq!(
        sample(
            &text,
            "ratelimit_service_rate_limit_over_limit{domain=\"bin\",key=\"k\"}"
        ),
        1
    );
    assert_eq!(sample(&text, "ratelimit_service_config_load_success"), 1);
    assert!(server.stop().success());
}

/// Three masters, no replicas; `--redis-cluster` with two seed nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_flag() {
    let (_data, nodes) = cluster("cluster");
    let dir = config_dir("bin-cluster");
    let seeds = format!("{},{}", nodes[0].url(), nodes[1].url());
    let mut server = Server::spawn(
        &dir.0,
        &["--redis-cluster", &seeds, "--store-timeout", "2000"],
        &[],
    );
    three_then_over(&server).await;
    let stored: u64 = nodes.iter().map(|n| dbsize(n.port)).sum();
    assert!(stored > 0, "nothing stored in the cluster");
    assert!(server.stop().success());
}

/// One primary watched by one sentinel; the master's name from the
/// environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_sentinel_flag() {
    let primary = Redis::start();
    let data = TempDir::new("sentinel");
    let port = free_port();
    let conf = data.0.join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "port {port}\nbind 127.0.0.1\ndir {}\nsentinel monitor primary1 127.0.0.1 {} 1\n",
            data.0.display(),
            primary.port
        ),
    )
    .expect("write");
    let sentinel = Command::new("redis-server")
        .arg(&conf)
        .arg("--sentinel")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server --sentinel");
    let mut sentinel = Reaped(sentinel);
    assert!(wait_port(&mut sentinel.0, port), "no sentinel");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cli(port, &["sentinel", "get-master-addr-by-name", "primary1"])
        .contains(&primary.port.to_string())
    {
        assert!(
            Instant::now() < deadline,
            "the sentinel does not know the primary"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let dir = config_dir("bin-sentinel");
    let url = format!("redis://127.0.0.1:{port}");
    let mut server = Server::spawn(
        &dir.0,
        &["--redis-sentinel", &url, "--store-timeout", "2000"],
        &[("REDIS_SENTINEL_MASTER", "primary1")],
    );
    three_then_over(&server).await;
    assert!(dbsize(primary.port) > 0, "nothing stored in the primary");
    assert!(server.stop().success());
}

#[test]
fn malformed_values_exit_2_naming_the_flag() {
    let dir = config_dir("bin-bad");
    for (args, needle) in [
        (
            &["--redis-cluster", "redis://a:1,,redis://b:2"][..],
            "URL 2 is empty",
        ),
        (&["--redis-sentinel", "redis://a:1"], "--sentinel-master"),
        (&["--redis", "localhost:6379"], "--redis \"localhost:6379\""),
        (&["--on-store-error", "maybe"], "--on-store-error \"maybe\""),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_ratelimit-server"))
            .arg("--config")
            .arg(&dir.0)
            .args(args)
            .env_remove("REDIS_URL")
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(all.contains(needle), "{args:?}: {all}");
    }
}

/// `--redis rediss://…` with `--redis-ca`, a private CA's root: two
/// servers on one TLS Redis share its counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_with_a_private_ca() {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let certs = TempDir::new("tls");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "ratelimit-server test CA");
    let ca_key = KeyPair::generate().expect("key");
    let ca_cert = ca.self_signed(&ca_key).expect("ca cert");
    let issuer = Issuer::new(ca, ca_key);
    let server = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .expect("server");
    let server_key = KeyPair::generate().expect("key");
    let server_cert = server.signed_by(&server_key, &issuer).expect("server cert");
    let path = |n: &str| certs.0.join(n).display().to_string();
    std::fs::write(path("ca.crt"), ca_cert.pem()).expect("write");
    std::fs::write(path("server.crt"), server_cert.pem()).expect("write");
    std::fs::write(path("server.key"), server_key.serialize_pem()).expect("write");

    let port = free_port();
    let redis = Command::new("redis-server")
        .args([
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .args(["--save", "", "--appendonly", "no"])
        .args(["--tls-cert-file", &path("server.crt")])
        .args(["--tls-key-file", &path("server.key")])
        .args(["--tls-ca-cert-file", &path("ca.crt")])
        .args(["--tls-auth-clients", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server");
    let mut redis = Reaped(redis);
    assert!(
        wait_port(&mut redis.0, port),
        "redis-server without TLS support?"
    );
    let dir = config_dir("bin-tls");
    let url = format!("rediss://127.0.0.1:{port}/");
    // (a TLS handshake in a debug build on 2 shared cores: more than the
    // default 100 ms)
    let slow = ["--store-timeout", "3000"];
    let a = Server::spawn(
        &dir.0,
        &[
            "--redis",
            &url,
            "--redis-ca",
            &path("ca.crt"),
            slow[0],
            slow[1],
        ],
        &[],
    );
    let b = Server::spawn(
        &dir.0,
        &slow,
        &[("REDIS_URL", &url), ("REDIS_CA", &path("ca.crt"))],
    );
    let mut ca_client = a.client().await;
    let mut cb = b.client().await;
    warm(&mut ca_client).await;
    warm(&mut cb).await;
    let r = ask(&mut ca_client, "bin", vec![desc(&[("k", "tls")])], 2).await;
    assert_eq!((overall(&r), r.statuses[0].limit_remaining), (Code::Ok, 1));
    let r = ask(&mut cb, "bin", vec![desc(&[("k", "tls")])], 0).await;
    assert_eq!((overall(&r), r.statuses[0].limit_remaining), (Code::Ok, 0));
    let r = ask(&mut ca_client, "bin", vec![desc(&[("k", "tls")])], 0).await;
    assert_eq!(overall(&r), Code::OverLimit);
    // without the CA the server's certificate is not trusted: UNAVAILABLE
    let c = Server::spawn(&dir.0, &["--redis", &url, slow[0], slow[1]], &[]);
    let mut cc = c.client().await;
    let e = try_ask(&mut cc, "bin", vec![desc(&[("k", "tls")])], 0)
        .await
        .expect_err("untrusted");
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
}

/// `--redis unix:///…`: a Redis on a Unix socket only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_on_a_unix_socket() {
    let data = TempDir::new("unix");
    let socket = data.0.join("redis.sock");
    let redis = Command::new("redis-server")
        .args(["--port", "0", "--save", "", "--appendonly", "no"])
        .arg("--unixsocket")
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server");
    let _redis = Reaped(redis);
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "no socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    let dir = config_dir("bin-unix");
    let url = format!("unix://{}", socket.display());
    let mut a = Server::spawn(&dir.0, &["--redis", &url], &[]);
    let b = Server::spawn(&dir.0, &["--redis", &url], &[]);
    let mut ca = a.client().await;
    let mut cb = b.client().await;
    warm(&mut ca).await;
    warm(&mut cb).await;
    let r = ask(&mut ca, "bin", vec![desc(&[("k", "u")])], 3).await;
    assert_eq!((overall(&r), r.statuses[0].limit_remaining), (Code::Ok, 0));
    let r = ask(&mut cb, "bin", vec![desc(&[("k", "u")])], 0).await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert!(a.stop().success());
}

/// The binary watches its directory: a new limit answers within 1 s; an
/// invalid file is logged with its file and the path inside it, counted,
/// and the running limit stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_reloads_and_logs_an_invalid_change() {
    let dir = config_dir("bin-reload");
    let (mut server, log) = Server::spawn_logged(&dir.0, &[]);
    let mut c = server.client().await;
    let limit = |r: &tower_redis_ratelimit_server::pb::RateLimitResponse| {
        r.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit)
    };
    let r = ask(&mut c, "bin", vec![peek(&[("k", "v")])], 0).await;
    assert_eq!(limit(&r), Some(3));
    let tmp = dir.0.join(".bin.yaml.tmp");
    std::fs::write(
        &tmp,
        CONFIG.replace("requests_per_unit: 3", "requests_per_unit: 4"),
    )
    .expect("write");
    std::fs::rename(&tmp, dir.0.join("bin.yaml")).expect("rename");
    let written = Instant::now();
    loop {
        let r = ask(&mut c, "bin", vec![peek(&[("k", "v")])], 0).await;
        if limit(&r) == Some(4) {
            break;
        }
        assert!(
            written.elapsed() < Duration::from_secs(1),
            "not reloaded in 1 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    std::fs::write(
        dir.0.join("bin.yaml"),
        "domain: bin\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
    )
    .expect("write");
    let written = Instant::now();
    let needle = "bin.yaml: descriptors[0].rate_limit.unit: ";
    while !log.lock().map(|l| l.contains(needle)).unwrap_or(false) {
        assert!(
            written.elapsed() < Duration::from_secs(5),
            "not logged: {:?}",
            log.lock().map(|l| l.clone())
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let r = ask(&mut c, "bin", vec![peek(&[("k", "v")])], 0).await;
    assert_eq!(limit(&r), Some(4));
    let text = scrape(std::net::SocketAddr::from(([127, 0, 0, 1], server.metrics))).await;
    assert_eq!(
        sample(&text, "ratelimit_service_config_load_success"),
        2,
        "{text}"
    );
    assert_eq!(
        sample(&text, "ratelimit_service_config_load_error"),
        1,
        "{text}"
    );
    assert!(server.stop().success());
}

/// HTTP/2's client preface and an empty `SETTINGS` frame.
const HELLO: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";

/// `n` raw connections that send the HTTP/2 handshake, then nothing.
async fn hold(port: u16, n: usize) -> Vec<tokio::net::TcpStream> {
    use tokio::io::AsyncWriteExt;
    let mut held = Vec::new();
    for _ in 0..n {
        let connect = tokio::net::TcpStream::connect(("127.0.0.1", port));
        let mut s = tokio::time::timeout(Duration::from_secs(10), connect)
            .await
            .expect("connected (the listen backlog holds what is not accepted)")
            .expect("connect");
        s.write_all(HELLO).await.expect("write");
        held.push(s);
    }
    held
}

async fn wait_log(log: &Log, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !logged(log).contains(needle) {
        assert!(
            Instant::now() < deadline,
            "not logged: {needle:?}: {}",
            logged(log)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A call on a new connection, retried until it answers (at most 20 s).
async fn answers_on_a_new_connection(server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let attempt = async {
            let channel =
                tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{}", server.grpc))
                    .expect("uri")
                    .connect_timeout(Duration::from_secs(2))
                    .timeout(Duration::from_secs(2))
                    .connect()
                    .await
                    .map_err(|e| e.to_string())?;
            try_ask(
                &mut Client::new(channel),
                "bin",
                vec![peek(&[("k", "new")])],
                0,
            )
            .await
            .map_err(|e| e.to_string())
        };
        match attempt.await {
            Ok(r) => {
                assert_eq!(overall(&r), Code::Ok);
                return;
            }
            Err(e) => {
                assert!(Instant::now() < deadline, "no answer in 20 s: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Under `ulimit -n 64`, with a cap above what that leaves
/// (`--max-connections 1000`), 100 connections exhaust the descriptors:
/// accepts fail with EMFILE and are retried with a backoff (one warning,
/// no spinning: under 0.5 s of CPU in 3 s), and once the connections close
/// a new one is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_a_low_open_file_limit_accept_errors_back_off_and_calls_resume_once_connections_close() {
    let dir = config_dir("bin-emfile");
    let (mut server, log) =
        Server::spawn_logged_with(&dir.0, &["--max-connections", "1000"], &[], Some(64));
    wait_log(&log, "more than the open-file limit leaves").await;
    let held = hold(server.grpc, 100).await;
    wait_log(&log, "cannot accept connections: Too many open files").await;
    let before = server.cpu_ticks();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let used = server.cpu_ticks() - before;
    assert!(
        used < 50,
        "{used} ticks of CPU in 3 s: the accept loop spins"
    );
    assert_eq!(
        logged(&log).matches("cannot accept connections").count(),
        1,
        "{}",
        logged(&log)
    );
    drop(held);
    answers_on_a_new_connection(&server).await;
    assert!(server.stop().success());
}

/// Under `ulimit -n 64` and the default cap (what the limit leaves: 32),
/// a flood of connections is refused past the cap, and a client connected
/// before it keeps its answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_a_low_open_file_limit_the_default_cap_refuses_a_flood_and_open_connections_keep_answering()
 {
    let dir = config_dir("bin-cap");
    let (mut server, log) = Server::spawn_logged_with(&dir.0, &[], &[], Some(64));
    wait_log(&log, "at most 32 connections").await;
    let mut c = server.client().await;
    warm(&mut c).await;
    let held = hold(server.grpc, 100).await;
    wait_log(&log, "connection refused: --max-connections are open").await;
    let before = server.cpu_ticks();
    for i in 0..3u32 {
        let r = ask(&mut c, "bin", vec![desc(&[("k", "flood")])], 1).await;
        assert_eq!(
            (overall(&r), r.statuses[0].limit_remaining),
            (Code::Ok, 2 - i)
        );
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let used = server.cpu_ticks() - before;
    assert!(used < 50, "{used} ticks of CPU in 2 s");
    assert!(!logged(&log).contains("cannot accept"), "{}", logged(&log));
    drop(held);
    answers_on_a_new_connection(&server).await;
    assert!(server.stop().success());
}

/// A client that handshakes, then never reads (so never acknowledges the
/// GOAWAY's PING) holds a graceful drain forever; `--shutdown-timeout`
/// ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_after_the_shutdown_timeout_though_a_client_never_reads() {
    use tokio::io::AsyncReadExt;
    let dir = config_dir("bin-deadline");
    let (mut server, log) = Server::spawn_logged_with(
        &dir.0,
        &["--shutdown-timeout", "1s", "--idle-timeout", "1h"],
        &[],
        None,
    );
    let mut held = hold(server.grpc, 1).await;
    // the server's SETTINGS: it serves this connection (and is read no more)
    let mut buf = [0u8; 9];
    tokio::time::timeout(Duration::from_secs(10), held[0].read_exact(&mut buf))
        .await
        .expect("the server's SETTINGS")
        .expect("read");
    let start = Instant::now();
    server.term();
    let status = server
        .exit_within(Duration::from_secs(10))
        .expect("no exit 10 s after SIGTERM");
    let took = start.elapsed();
    assert!(status.success());
    assert!(took >= Duration::from_millis(900), "{took:?}: not held");
    wait_log(&log, "connections still open after --shutdown-timeout").await;
    drop(held);
}

/// On SIGTERM the health service answers NOT_SERVING first: a watcher on
/// a connection opened before sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_turns_not_serving_on_sigterm_before_the_drain() {
    use tonic::server::NamedService;
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tower_redis_ratelimit_server::pb::RateLimitServiceServer;
    use tower_redis_ratelimit_server::service::RlsService;
    let dir = config_dir("bin-health");
    let mut server = Server::spawn(&dir.0, &["--shutdown-timeout", "2s"], &[]);
    let channel =
        tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{}", server.grpc))
            .expect("uri")
            .connect()
            .await
            .expect("connect");
    let mut health = HealthClient::new(channel);
    let name = <RateLimitServiceServer<RlsService> as NamedService>::NAME;
    for service in [name, ""] {
        let r = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .expect("check");
        assert_eq!(
            r.into_inner().status(),
            ServingStatus::Serving,
            "{service:?}"
        );
    }
    let mut watch = health
        .watch(HealthCheckRequest {
            service: name.into(),
        })
        .await
        .expect("watch")
        .into_inner();
    let first = watch.message().await.expect("message").expect("one");
    assert_eq!(first.status(), ServingStatus::Serving);
    server.term();
    let next = tokio::time::timeout(Duration::from_secs(10), watch.message())
        .await
        .expect("a status within 10 s of SIGTERM")
        .expect("message")
        .expect("one");
    assert_eq!(next.status(), ServingStatus::NotServing);
    assert!(
        server.exit_within(Duration::from_secs(15)).is_some(),
        "no exit"
    );
}

/// A directory with no rule (empty, or a mistyped one holding no YAML)
/// refuses the start, naming it; `--allow-empty-config` starts, loudly.
#[test]
fn no_rules_refuse_the_start_unless_allowed() {
    let empty = TempDir::new("bin-empty");
    let wrong = TempDir::new("bin-wrong");
    std::fs::write(wrong.0.join("bin.yaml.orig"), CONFIG).expect("write");
    for dir in [&empty, &wrong] {
        let out = Command::new(env!("CARGO_BIN_EXE_ratelimit-server"))
            .arg("--config")
            .arg(&dir.0)
            .args(["--grpc", &format!("127.0.0.1:{}", free_port())])
            .env_remove("REDIS_URL")
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("no rate limit rule in {}", dir.0.display()))
                && err.contains("--allow-empty-config"),
            "{err}"
        );
    }
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (mut server, log) = Server::spawn_logged(&empty.0, &["--allow-empty-config"]);
    rt.block_on(async {
        let mut c = server.client().await;
        let r = ask(&mut c, "bin", vec![desc(&[("k", "v")])], 0).await;
        assert_eq!(overall(&r), Code::Ok);
    });
    assert!(logged(&log).contains("STARTING WITH NO RATE LIMIT RULE"));
    assert!(server.stop().success());
}

/// Logs through a pipe carry no ANSI colour codes, though the tests turn
/// on tracing-subscriber's `ansi` feature.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_through_a_pipe_have_no_ansi_colour_codes() {
    let dir = config_dir("bin-ansi");
    let (mut server, log) = Server::spawn_logged(&dir.0, &[]);
    let mut c = server.client().await;
    ask(&mut c, "bin", vec![desc(&[("k", "v")])], 0).await;
    assert!(server.stop().success());
    wait_log(&log, "stopped").await;
    let text = logged(&log);
    assert!(text.contains("INFO") && !text.contains("\x1b["), "{text:?}");
    let out = Command::new(env!("CARGO_BIN_EXE_ratelimit-server"))
        .args([
            "--config",
            "/nonexistent",
            "--shadow-mode",
            "--idle-timeout",
            "9",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ERROR") && !err.contains("\x1b["), "{err:?}");
}

/// envoyproxy/ratelimit's `SHADOW_MODE=true`: a request over its limit is
/// answered OK (decided and counted, never denied).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_from_the_environment_admits_a_request_over_its_limit() {
    let dir = config_dir("bin-shadow");
    let server = Server::spawn(&dir.0, &[], &[("SHADOW_MODE", "true")]);
    let mut c = server.client().await;
    let mut codes = Vec::new();
    for _ in 0..5 {
        let r = ask(&mut c, "bin", vec![desc(&[("k", "v")])], 0).await;
        codes.push(overall(&r));
    }
    assert_eq!(codes, [Code::Ok; 5]);
}

/// envoyproxy/ratelimit's settings that would change what is admitted and
/// have no equivalent refuse the start, naming the variable.
#[test]
fn go_settings_without_an_equivalent_exit_2_naming_the_variable() {
    let dir = config_dir("bin-go");
    for (env, needle) in [
        (("BACKEND_TYPE", "memcache"), "BACKEND_TYPE=\"memcache\""),
        (
            ("RESPONSE_DYNAMIC_METADATA", "true"),
            "RESPONSE_DYNAMIC_METADATA",
        ),
        (("CACHE_KEY_PREFIX", "x_"), "CACHE_KEY_PREFIX"),
        (("REDIS_PERSECOND", "true"), "REDIS_PERSECOND=true"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_ratelimit-server"))
            .arg("--config")
            .arg(&dir.0)
            .env_remove("REDIS_URL")
            .env(env.0, env.1)
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{env:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{env:?}: {err}");
    }
}

/// A Redis whose ACL refuses `SCRIPT` stops the start, naming what it
/// refuses; `--no-store-check` starts anyway.
#[test]
fn a_store_that_refuses_what_the_service_needs_stops_the_start() {
    let redis = Redis::start();
    let acl = cli(
        redis.port,
        &[
            "acl", "setuser", "rls", "on", ">pw", "~*", "&*", "+@all", "-script",
        ],
    );
    assert_eq!(acl, "OK");
    let url = format!("redis://rls:pw@127.0.0.1:{}/", redis.port);
    let dir = config_dir("bin-acl");
    let out = Command::new(env!("CARGO_BIN_EXE_ratelimit-server"))
        .arg("--config")
        .arg(&dir.0)
        .args(["--redis", &url, "--store-timeout", "3000"])
        .args(["--grpc", &format!("127.0.0.1:{}", free_port())])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the store refuses what the service needs")
            && err.to_ascii_lowercase().contains("script")
            && err.contains("--no-store-check"),
        "{err}"
    );
    let mut server = Server::spawn(&dir.0, &["--redis", &url, "--no-store-check"], &[]);
    assert!(server.stop().success());
}

/// A store that does not answer at the start is logged, and the service
/// starts: each call is answered by the failure policy (`UNAVAILABLE`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_does_not_answer_at_the_start_is_logged_and_the_service_starts() {
    let dir = config_dir("bin-down");
    let url = format!("redis://127.0.0.1:{}/", free_port());
    let (mut server, log) =
        Server::spawn_logged(&dir.0, &["--redis", &url, "--store-timeout", "200"]);
    wait_log(&log, "the store does not answer").await;
    let mut c = server.client().await;
    let e = try_ask(&mut c, "bin", vec![desc(&[("k", "v")])], 0)
        .await
        .expect_err("no store");
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    assert!(server.stop().success());
}

/// The server announces `--max-concurrent-streams` in its `SETTINGS`
/// (1,024 by default) and answers a message past `--max-message-size`
/// `OUT_OF_RANGE`, before the service sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_and_message_bounds_are_announced_and_enforced() {
    use tokio::io::AsyncReadExt;
    let dir = config_dir("bin-bounds");
    for (args, streams) in [
        (&[][..], 1_024u32),
        (
            &[
                "--max-concurrent-streams",
                "7",
                "--max-message-size",
                "2048",
            ],
            7,
        ),
    ] {
        let server = Server::spawn(&dir.0, args, &[]);
        let mut s = hold(server.grpc, 1).await.remove(0);
        // the server's first frame: SETTINGS, whose setting 3 is the bound
        let mut head = [0u8; 9];
        s.read_exact(&mut head).await.expect("frame header");
        assert_eq!(head[3], 4, "a SETTINGS frame");
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let mut payload = vec![0u8; len];
        s.read_exact(&mut payload).await.expect("payload");
        let announced = payload.chunks(6).find_map(|c| {
            (u16::from_be_bytes([c[0], c[1]]) == 3)
                .then(|| u32::from_be_bytes([c[2], c[3], c[4], c[5]]))
        });
        assert_eq!(announced, Some(streams), "{args:?}");
        let mut c = server.client().await;
        let big = "x".repeat(4096);
        let r = try_ask(&mut c, "bin", vec![peek(&[("k", &big)])], 0).await;
        if args.is_empty() {
            assert_eq!(overall(&r.expect("within 1 MiB")), Code::Ok);
        } else {
            let e = r.expect_err("past 2048 bytes");
            assert_eq!(e.code(), tonic::Code::OutOfRange, "{e:?}");
        }
    }
}

/// A Redis outage: store errors are logged once a second at most, with the
/// count held back, and the recovery once; the modes are said at the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_is_logged_once_a_second_and_its_end_once() {
    let dir = config_dir("bin-outage");
    let redis = Redis::start();
    let (server, log) =
        Server::spawn_logged(&dir.0, &["--redis", &redis.url(), "--store-timeout", "50"]);
    let mut c = server.client().await;
    warm(&mut c).await;
    redis.signal("STOP");
    let mut failed = 0;
    for _ in 0..40 {
        if try_ask(&mut c, "bin", vec![peek(&[("k", "out")])], 0)
            .await
            .is_err()
        {
            failed += 1;
        }
    }
    redis.signal("CONT");
    assert!(failed > 30, "{failed} of 40 failed");
    warm(&mut c).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let text = log.lock().expect("log").clone();
        if text.contains("the store answers again") || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let errors = text.lines().filter(|l| l.contains("store error")).count();
    assert!(
        (1..=8).contains(&errors),
        "{errors} lines for {failed} failed calls:\n{text}"
    );
    assert!(text.contains("held_back"), "{text}");
    assert_eq!(text.matches("the store answers again").count(), 1, "{text}");
    assert!(text.contains("shadow_mode=false"), "{text}");
}

/// `--http` serves `GET /healthcheck` as envoyproxy/ratelimit does (the
/// probe of Envoy Gateway's rate limit deployment): `OK` while the service
/// serves, beside `/metrics` when it is the same address; Go's `HOST` and
/// `PORT` name it too.
#[tokio::test]
async fn healthcheck_over_http_with_the_flag_the_metrics_address_or_go_host_and_port() {
    let dir = config_dir("bin-http-health");
    let http = free_port();
    let at = |port: u16| std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut server = Server::spawn(&dir.0, &["--http", &format!("127.0.0.1:{http}")], &[]);
    let mut child_port = http;
    assert!(wait_port(&mut server.child, child_port), "no --http port");
    let (status, _, body) = http_get(at(http), "/healthcheck").await;
    assert!(status.contains("200"), "{status}");
    assert_eq!(body, "OK");
    let (status, _, _) = http_get(at(http), "/metrics").await;
    assert!(
        status.contains("404"),
        "/metrics is not on --http: {status}"
    );
    assert_eq!(server.stop().code(), Some(0));

    // the --metrics address: both paths on one listener
    let metrics = free_port();
    let addr = format!("127.0.0.1:{metrics}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ratelimit-server"))
        .arg("--config")
        .arg(&dir.0)
        .args(["--grpc", &format!("127.0.0.1:{}", free_port())])
        .args(["--metrics", &addr, "--http", &addr])
        .env_remove("REDIS_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("ratelimit-server");
    assert!(wait_port(&mut child, metrics), "no --metrics port");
    let (status, _, body) = http_get(at(metrics), "/healthcheck").await;
    let text = scrape(at(metrics)).await;
    let _ = child.kill();
    let _ = child.wait();
    assert!(status.contains("200") && body == "OK", "{status} {body}");
    assert!(text.contains("ratelimit"), "{text}");

    // envoyproxy/ratelimit's HOST and PORT
    child_port = free_port();
    let port = child_port.to_string();
    let mut server = Server::spawn(&dir.0, &[], &[("HOST", "127.0.0.1"), ("PORT", &port)]);
    assert!(
        wait_port(&mut server.child, child_port),
        "no HOST/PORT port"
    );
    let (status, _, body) = http_get(at(child_port), "/healthcheck").await;
    assert!(status.contains("200") && body == "OK", "{status} {body}");
    assert_eq!(server.stop().code(), Some(0));
}

/// Waiting for its first xDS snapshot (the management server not there),
/// the service does not serve: `/healthcheck` answers 500, as
/// envoyproxy/ratelimit's does until a configuration is loaded.
#[tokio::test]
async fn healthcheck_answers_500_until_the_first_xds_snapshot() {
    let http = free_port();
    let nobody = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ratelimit-server"))
        .args(["--config-type", "grpc-xds-sotw"])
        .args(["--xds-server-url", &format!("127.0.0.1:{nobody}")])
        .args(["--grpc", &format!("127.0.0.1:{}", free_port())])
        .args(["--http", &format!("127.0.0.1:{http}")])
        .env_remove("REDIS_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("ratelimit-server");
    assert!(wait_port(&mut child, http), "no --http port");
    let (status, _, body) = http_get(
        std::net::SocketAddr::from(([127, 0, 0, 1], http)),
        "/healthcheck",
    )
    .await;
    let _ = child.kill();
    let _ = child.wait();
    assert!(status.contains("500"), "{status} {body}");
}
