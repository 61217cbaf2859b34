//! Shared test fixtures: private `redis-server` processes and Redis Clusters.
//!
//! Every test owns the servers it starts. They listen on free loopback ports
//! chosen by this module (never 6379, never a Redis that is already running),
//! keep their data in their own directory under `std::env::temp_dir()`, and
//! are killed (and their directory removed) when the fixture is dropped.
//!
//! A missing `redis-server` / `redis-cli` binary is a test failure with an
//! install hint, never a silent skip. The binaries can be overridden with the
//! `REDIS_SERVER_BIN` / `REDIS_CLI_BIN` environment variables.
//!
//! Use it from an integration test file with `mod common;`.

#![allow(dead_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a freshly spawned `redis-server` gets to answer PING.
const READY_DEADLINE: Duration = Duration::from_secs(5);
/// How long a freshly created cluster gets to converge.
const CLUSTER_DEADLINE: Duration = Duration::from_secs(30);
/// How many different ports `start()` tries before giving up.
const PORT_ATTEMPTS: usize = 8;
/// Redis Cluster's bus listens on `port + 10000`.
const CLUSTER_BUS_OFFSET: u16 = 10_000;
/// Total number of hash slots in a Redis Cluster.
const CLUSTER_SLOTS: u64 = 16_384;

const INSTALL_HINT: &str = "install it with `apt-get install -y redis-server` \
     (Debian/Ubuntu; the package also brings `redis-cli` through redis-tools), \
     or point REDIS_SERVER_BIN / REDIS_CLI_BIN at the binaries. \
     Tests need a real Redis and are never skipped";

fn redis_server_bin() -> String {
    std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".to_owned())
}

fn redis_cli_bin() -> String {
    std::env::var("REDIS_CLI_BIN").unwrap_or_else(|_| "redis-cli".to_owned())
}

// ---------------------------------------------------------------------------
// Ports and directories
// ---------------------------------------------------------------------------

/// Range of candidate ports, chosen below the kernel's ephemeral range so that
/// outgoing client sockets (which take ephemeral ports) never collide with
/// our servers, and so that `port + 10000` (the cluster bus) is below it too.
fn port_range() -> (u16, u16) {
    static RANGE: OnceLock<(u16, u16)> = OnceLock::new();
    *RANGE.get_or_init(|| {
        let ephemeral_low = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
            .unwrap_or(32_768);
        let low = 10_000u32;
        let high = ephemeral_low.saturating_sub(u32::from(CLUSTER_BUS_OFFSET));
        if high > low + 1_000 {
            (low as u16, high as u16)
        } else {
            // Unusual ephemeral range: fall back to a fixed range; conflicts
            // are still caught by the bind check and the retry in `start()`.
            (20_000, 30_000)
        }
    })
}

fn port_is_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// Picks a port `p` such that both `p` and `p + 10000` are free right now.
///
/// A process-wide counter hands out distinct candidates to tests running in
/// parallel threads; a per-process random start keeps concurrently running
/// test binaries apart. A remaining race (another process binding the port
/// between this check and redis-server's bind) is handled by `start()`,
/// which notices the failed bind and tries another port.
fn pick_port() -> u16 {
    static NEXT: OnceLock<AtomicUsize> = OnceLock::new();
    let (low, high) = port_range();
    let span = usize::from(high - low);
    let next = NEXT.get_or_init(|| {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let seed = (std::process::id() as usize)
            .wrapping_mul(7_919)
            .wrapping_add(nanos as usize);
        AtomicUsize::new(seed % span)
    });
    for _ in 0..span {
        let port = low + (next.fetch_add(1, Ordering::Relaxed) % span) as u16;
        if port == 6379 || port == 6379 + CLUSTER_BUS_OFFSET {
            continue;
        }
        if port_is_free(port) && port_is_free(port + CLUSTER_BUS_OFFSET) {
            return port;
        }
    }
    panic!("no free loopback port pair (p, p+10000) in {low}..{high}");
}

fn unique_dir(prefix: &str) -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "{prefix}-{}-{}-{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create test directory {}: {e}", dir.display()));
    dir
}

/// The last `lines` lines of `path` (or an explanation why it can't be read).
fn file_tail(path: &Path, lines: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("<cannot read {}: {e}>", path.display()),
    }
}

/// Text appended to `path` since byte `offset`.
fn file_since(path: &Path, offset: u64) -> String {
    let mut out = Vec::new();
    if let Ok(mut f) = File::open(path)
        && f.seek(SeekFrom::Start(offset)).is_ok()
    {
        let _ = f.read_to_end(&mut out);
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .unwrap_or_else(|e| panic!("cannot run `kill -{signal} {pid}`: {e}"));
    assert!(status.success(), "`kill -{signal} {pid}` failed: {status}");
}

/// Process state letter from /proc/<pid>/stat ('T' = stopped), if readable.
fn proc_state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces.
    let after = &stat[stat.rfind(')')? + 1..];
    after.trim_start().chars().next()
}

fn wait_for_state(pid: u32, want_stopped: bool) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        match proc_state(pid) {
            None => return, // no /proc: trust the signal
            Some(s) if (s == 'T' || s == 't') == want_stopped => return,
            Some(_) => sleep(Duration::from_millis(5)),
        }
    }
    panic!(
        "redis-server pid {pid} did not become {} within 2 s",
        if want_stopped { "stopped" } else { "running" }
    );
}

// ---------------------------------------------------------------------------
// RedisServer
// ---------------------------------------------------------------------------

/// Builder for [`RedisServer`]: extra `redis-server` arguments.
#[derive(Debug, Default, Clone)]
pub(crate) struct RedisServerBuilder {
    args: Vec<String>,
}

impl RedisServerBuilder {
    /// Appends one extra command-line argument, e.g. `.arg("--maxmemory").arg("1mb")`.
    pub(crate) fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends several extra command-line arguments.
    pub(crate) fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Spawns the server on a free loopback port and waits until it answers PING.
    pub(crate) fn start(self) -> RedisServer {
        RedisServer::spawn_new(self.args)
    }
}

enum Readiness {
    Ready,
    /// The process exited before answering (e.g. could not bind).
    Exited(ExitStatus),
    /// Something else, not our process, answers on the port.
    Impostor,
    TimedOut,
}

/// A private `redis-server` process on a free loopback port.
#[derive(Debug)]
pub(crate) struct RedisServer {
    port: u16,
    pid: u32,
    child: Option<Child>,
    dir: PathBuf,
    log: PathBuf,
    extra_args: Vec<String>,
}

impl RedisServer {
    /// A builder for a server with extra arguments.
    pub(crate) fn builder() -> RedisServerBuilder {
        RedisServerBuilder::default()
    }

    /// Starts a server with the default arguments.
    pub(crate) fn start() -> RedisServer {
        Self::builder().start()
    }

    fn spawn_new(extra_args: Vec<String>) -> RedisServer {
        let dir = unique_dir("trr-redis");
        let log = dir.join("redis.log");
        let mut last_failure = String::new();
        for attempt in 1..=PORT_ATTEMPTS {
            let port = pick_port();
            let log_offset = fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
            let mut child = match spawn_redis(port, &dir, &log, &extra_args) {
                Ok(child) => child,
                Err(msg) => {
                    let _ = fs::remove_dir_all(&dir);
                    panic!("{msg}");
                }
            };
            match wait_ready(&mut child, port, READY_DEADLINE) {
                Readiness::Ready => {
                    let pid = child.id();
                    return RedisServer {
                        port,
                        pid,
                        child: Some(child),
                        dir,
                        log,
                        extra_args,
                    };
                }
                Readiness::Exited(status) => {
                    let output = file_since(&log, log_offset);
                    if is_bind_failure(&output) {
                        last_failure =
                            format!("attempt {attempt}: port {port} was taken ({status})");
                        continue;
                    }
                    let _ = fs::remove_dir_all(&dir);
                    panic!(
                        "redis-server on port {port} exited before answering PING ({status}); \
                         args {extra_args:?}; log:\n{output}"
                    );
                }
                Readiness::Impostor => {
                    kill_and_reap(&mut child);
                    last_failure =
                        format!("attempt {attempt}: port {port} answered by another server");
                    continue;
                }
                Readiness::TimedOut => {
                    kill_and_reap(&mut child);
                    let tail = file_tail(&log, 40);
                    let _ = fs::remove_dir_all(&dir);
                    panic!(
                        "redis-server on port {port} did not answer PING within {READY_DEADLINE:?}; \
                         log tail:\n{tail}"
                    );
                }
            }
        }
        let tail = file_tail(&log, 40);
        let _ = fs::remove_dir_all(&dir);
        panic!(
            "could not start redis-server after {PORT_ATTEMPTS} ports ({last_failure}); log tail:\n{tail}"
        );
    }

    /// The TCP port the server listens on (127.0.0.1).
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/`
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The pid of the current (or, after `kill()`, the last) redis-server process.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the process is still alive (it may be paused).
    pub(crate) fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// The server's private directory (data, `nodes.conf`, `redis.log`).
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The last `lines` lines of the server's log (stdout + stderr).
    pub(crate) fn log_tail(&self, lines: usize) -> String {
        file_tail(&self.log, lines)
    }

    /// Freezes the process with SIGSTOP: connections stay open, nothing is answered.
    pub(crate) fn pause(&self) {
        assert!(self.child.is_some(), "pause(): redis-server was killed");
        send_signal(self.pid, "STOP");
        wait_for_state(self.pid, true);
    }

    /// Thaws a paused process with SIGCONT.
    pub(crate) fn resume(&self) {
        assert!(self.child.is_some(), "resume(): redis-server was killed");
        send_signal(self.pid, "CONT");
        wait_for_state(self.pid, false);
    }

    /// SIGKILLs the process and reaps it. The port and directory are kept for `restart()`.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child);
        }
    }

    /// Starts redis-server again on the SAME port (killing the current one
    /// first if it still runs) and waits for PING. Data is not persisted, so
    /// the new server starts empty (cluster nodes keep their `nodes.conf`).
    pub(crate) fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + READY_DEADLINE;
        loop {
            let log_offset = fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0);
            let mut child = spawn_redis(self.port, &self.dir, &self.log, &self.extra_args)
                .unwrap_or_else(|msg| panic!("{msg}"));
            let left = deadline.saturating_duration_since(Instant::now());
            match wait_ready(&mut child, self.port, left.max(Duration::from_millis(500))) {
                Readiness::Ready => {
                    self.pid = child.id();
                    self.child = Some(child);
                    return;
                }
                Readiness::Exited(status) => {
                    let output = file_since(&self.log, log_offset);
                    if is_bind_failure(&output) && Instant::now() < deadline {
                        // The old socket may linger for a moment; try again.
                        sleep(Duration::from_millis(100));
                        continue;
                    }
                    panic!(
                        "restarted redis-server on port {} exited ({status}); log:\n{output}",
                        self.port
                    );
                }
                Readiness::Impostor => {
                    kill_and_reap(&mut child);
                    panic!(
                        "restart(): port {} is now used by another server",
                        self.port
                    );
                }
                Readiness::TimedOut => {
                    kill_and_reap(&mut child);
                    panic!(
                        "restarted redis-server on port {} did not answer PING; log tail:\n{}",
                        self.port,
                        self.log_tail(40)
                    );
                }
            }
        }
    }

    /// A `redis::Client` for this server.
    pub(crate) fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("fixture URL is valid")
    }

    /// A fresh multiplexed async connection.
    pub(crate) async fn conn(&self) -> redis::aio::MultiplexedConnection {
        self.client()
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", self.url()))
    }

    /// A deadpool-redis pool of at most `max_size` connections (Tokio runtime).
    pub(crate) fn pool(&self, max_size: usize) -> deadpool_redis::Pool {
        let mut cfg = deadpool_redis::Config::from_url(self.url());
        cfg.pool = Some(deadpool_redis::PoolConfig::new(max_size));
        cfg.create_pool(Some(deadpool_redis::Runtime::Tokio1))
            .expect("deadpool-redis pool from fixture URL")
    }

    /// `INFO commandstats` as command name (lowercase, e.g. `"evalsha"`,
    /// `"config|get"`) -> number of calls. Commands never called are absent;
    /// use [`RedisServer::command_calls`] to get 0 for them. The counters are
    /// reset once the server is ready (after `start()` and `restart()`), so
    /// the fixture's own PING/INFO probes are not counted; the `INFO` calls
    /// made by this method itself are.
    pub(crate) async fn info_commandstats(&self) -> HashMap<String, u64> {
        let mut conn = self.conn().await;
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await
            .expect("INFO commandstats");
        parse_commandstats(&info)
    }

    /// Number of calls of one command (0 if never called).
    pub(crate) async fn command_calls(&self, command: &str) -> u64 {
        self.info_commandstats()
            .await
            .get(&command.to_ascii_lowercase())
            .copied()
            .unwrap_or(0)
    }

    /// Resets the counters reported by `INFO commandstats`.
    pub(crate) async fn reset_stats(&self) {
        let mut conn = self.conn().await;
        let () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut conn)
            .await
            .expect("CONFIG RESETSTAT");
    }

    /// Number of keys in the current database.
    pub(crate) async fn dbsize(&self) -> u64 {
        let mut conn = self.conn().await;
        redis::cmd("DBSIZE")
            .query_async(&mut conn)
            .await
            .expect("DBSIZE")
    }

    /// Every key (found with SCAN) with its PTTL in milliseconds (-1: no
    /// expiry, -2: vanished meanwhile), sorted by key. Keys are binary-safe.
    pub(crate) async fn keys_with_ttl(&self) -> Vec<(Vec<u8>, i64)> {
        let mut conn = self.conn().await;
        let mut keys = BTreeSet::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, batch): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .expect("SCAN");
            keys.extend(batch);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        if keys.is_empty() {
            return Vec::new();
        }
        let keys: Vec<Vec<u8>> = keys.into_iter().collect();
        let mut pipe = redis::pipe();
        for key in &keys {
            pipe.cmd("PTTL").arg(key.as_slice());
        }
        let ttls: Vec<i64> = pipe.query_async(&mut conn).await.expect("PTTL pipeline");
        keys.into_iter().zip(ttls).collect()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn spawn_redis(port: u16, dir: &Path, log: &Path, extra_args: &[String]) -> Result<Child, String> {
    let log_file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", log.display()));
    let log_err = log_file
        .try_clone()
        .unwrap_or_else(|e| panic!("cannot clone log handle: {e}"));
    let bin = redis_server_bin();
    Command::new(&bin)
        .arg("--port")
        .arg(port.to_string())
        .arg("--bind")
        .arg("127.0.0.1")
        .arg("--save")
        .arg("")
        .arg("--appendonly")
        .arg("no")
        .arg("--dir")
        .arg(dir)
        .arg("--protected-mode")
        .arg("no")
        .args(extra_args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log_file))
        .stderr(Stdio::from(log_err))
        .spawn()
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                format!("`{bin}` not found: {INSTALL_HINT}")
            } else {
                format!("cannot spawn `{bin}`: {e}")
            }
        })
}

fn is_bind_failure(output: &str) -> bool {
    output.contains("Address already in use")
        || output.contains("Could not create server TCP listening socket")
        || output.contains("Failed listening on port")
}

fn kill_and_reap(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Waits until the process answers PING and reports its own pid in `INFO server`.
fn wait_ready(child: &mut Child, port: u16, within: Duration) -> Readiness {
    let deadline = Instant::now() + within;
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("valid URL");
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Readiness::Exited(status);
        }
        if let Some((mut conn, pid)) = ping_and_pid(&client) {
            if pid == child.id() {
                // Start with clean INFO commandstats: the readiness probe's
                // PING/INFO must not show up in a test's command counts.
                let reset: redis::RedisResult<()> =
                    redis::cmd("CONFIG").arg("RESETSTAT").query(&mut conn);
                if reset.is_ok() {
                    return Readiness::Ready;
                }
                sleep(Duration::from_millis(20));
                continue;
            }
            // Someone else answered. Our process most likely failed to bind and is
            // about to exit; let that show up as `Exited` if it does.
            sleep(Duration::from_millis(50));
            if let Ok(Some(status)) = child.try_wait() {
                return Readiness::Exited(status);
            }
            return Readiness::Impostor;
        }
        if Instant::now() >= deadline {
            return Readiness::TimedOut;
        }
        sleep(Duration::from_millis(20));
    }
}

fn ping_and_pid(client: &redis::Client) -> Option<(redis::Connection, u32)> {
    let mut conn = client
        .get_connection_with_timeout(Duration::from_millis(250))
        .ok()?;
    conn.set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    conn.set_write_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    let pong: String = redis::cmd("PING").query(&mut conn).ok()?;
    if pong != "PONG" {
        return None;
    }
    let info: String = redis::cmd("INFO").arg("server").query(&mut conn).ok()?;
    let pid = info_field(&info, "process_id")?.parse().ok()?;
    Some((conn, pid))
}

/// The value of `field:` in an INFO reply.
pub(crate) fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.trim_end()
            .strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
    })
}

/// Parses `INFO commandstats` lines such as
/// `cmdstat_evalsha:calls=12,usec=34,usec_per_call=2.83,rejected_calls=0,failed_calls=0`.
pub(crate) fn parse_commandstats(info: &str) -> HashMap<String, u64> {
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.trim_end().strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_ascii_lowercase(), calls))
        })
        .collect()
}

// ---------------------------------------------------------------------------
// RedisCluster
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// StallProxy
// ---------------------------------------------------------------------------

/// A TCP proxy on a free loopback port in front of a server, that can stall
/// like a network path that drops packets: [`stall`](Self::stall) stops
/// forwarding bytes in both directions while every socket stays open, so
/// clients see no error, only silence.
///
/// Runs on its own threads, independent of the test's runtime.
pub(crate) struct StallProxy {
    port: u16,
    state: std::sync::Arc<ProxyState>,
    acceptor: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct ProxyState {
    inner: std::sync::Mutex<ProxyInner>,
    changed: std::sync::Condvar,
}

#[derive(Default)]
struct ProxyInner {
    stalled: bool,
    closed: bool,
    accepted: usize,
    /// Connections that lived through a stall: silent until `resume_all()`.
    frozen: BTreeSet<usize>,
    /// Both sockets of every connection, to shut them down on drop.
    sockets: Vec<std::net::TcpStream>,
}

impl StallProxy {
    /// A proxy on a free loopback port forwarding to `127.0.0.1:upstream_port`.
    pub(crate) fn start(upstream_port: u16) -> StallProxy {
        let mut last = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = pick_port();
            match TcpListener::bind(("127.0.0.1", port)) {
                Ok(listener) => {
                    let state = std::sync::Arc::new(ProxyState::default());
                    let acceptor = {
                        let state = state.clone();
                        std::thread::spawn(move || accept_loop(listener, upstream_port, state))
                    };
                    return StallProxy {
                        port,
                        state,
                        acceptor: Some(acceptor),
                    };
                }
                Err(e) => last = Some(e),
            }
        }
        panic!("no free loopback port for the proxy: {last:?}");
    }

    /// The port the proxy listens on (127.0.0.1).
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/`
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// How many client connections the proxy has accepted so far.
    pub(crate) fn connections(&self) -> usize {
        self.lock().accepted
    }

    /// Stops forwarding, in both directions, on every connection, open or
    /// opened while stalled. Sockets stay open; what is sent is held.
    pub(crate) fn stall(&self) {
        let mut inner = self.lock();
        inner.stalled = true;
        let live = 0..inner.accepted;
        inner.frozen.extend(live);
    }

    /// Forwards again on connections opened from now on. Connections that
    /// lived through the stall stay silent, as a TCP connection whose
    /// retransmissions backed off does for seconds to minutes after a real
    /// network partition heals; [`resume_all`](Self::resume_all) wakes them.
    pub(crate) fn resume(&self) {
        self.lock().stalled = false;
        self.state.changed.notify_all();
    }

    /// Forwards again on every connection: the stalled ones deliver what they held.
    pub(crate) fn resume_all(&self) {
        let mut inner = self.lock();
        inner.stalled = false;
        inner.frozen.clear();
        drop(inner);
        self.state.changed.notify_all();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ProxyInner> {
        self.state.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for StallProxy {
    fn drop(&mut self) {
        let sockets = {
            let mut inner = self.lock();
            inner.closed = true;
            std::mem::take(&mut inner.sockets)
        };
        self.state.changed.notify_all();
        for s in sockets {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        // wake the acceptor, which then sees `closed`
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn accept_loop(listener: TcpListener, upstream_port: u16, state: std::sync::Arc<ProxyState>) {
    for client in listener.incoming() {
        let mut inner = state.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.closed {
            return;
        }
        let Ok(client) = client else { continue };
        let Ok(upstream) = std::net::TcpStream::connect(("127.0.0.1", upstream_port)) else {
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = upstream.set_nodelay(true);
        let id = inner.accepted;
        inner.accepted += 1;
        if inner.stalled {
            inner.frozen.insert(id);
        }
        let (Ok(c2), Ok(u2), Ok(c3), Ok(u3)) = (
            client.try_clone(),
            upstream.try_clone(),
            client.try_clone(),
            upstream.try_clone(),
        ) else {
            continue;
        };
        inner.sockets.push(c3);
        inner.sockets.push(u3);
        drop(inner);
        for (from, to) in [(client, upstream), (u2, c2)] {
            let state = state.clone();
            std::thread::spawn(move || forward(id, from, to, &state));
        }
    }
}

/// Copies `from` to `to`, holding each chunk while the connection is stalled.
fn forward(
    id: usize,
    mut from: std::net::TcpStream,
    mut to: std::net::TcpStream,
    state: &ProxyState,
) {
    use std::io::Write;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => {
                let _ = to.shutdown(std::net::Shutdown::Write);
                return;
            }
            Ok(n) => n,
        };
        let mut inner = state.inner.lock().unwrap_or_else(|e| e.into_inner());
        while !inner.closed && (inner.stalled || inner.frozen.contains(&id)) {
            inner = state.changed.wait(inner).unwrap_or_else(|e| e.into_inner());
        }
        if inner.closed {
            return;
        }
        drop(inner);
        if to.write_all(&buf[..n]).is_err() {
            let _ = from.shutdown(std::net::Shutdown::Both);
            return;
        }
    }
}
