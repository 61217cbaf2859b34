//! [`RedisServer`]: a private `redis-server` process on a free loopback port.

use std::collections::{BTreeSet, HashMap};
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use std::sync::Arc;

use super::sys::{
    INSTALL_HINT, PORT_ATTEMPTS, READY_DEADLINE, file_since, file_tail, pick_port,
    redis_server_bin, send_signal, unique_dir, wait_for_state,
};
use super::tls::TlsFiles;

/// Builder for [`RedisServer`]: extra `redis-server` arguments, a config
/// file, TLS.
#[derive(Debug, Default, Clone)]
pub(crate) struct RedisServerBuilder {
    args: Vec<String>,
    setup: Setup,
}

/// What a server is started with besides its extra arguments.
#[derive(Debug, Default, Clone)]
struct Setup {
    /// A config file, given first on the command line (a sentinel needs one).
    config: Option<PathBuf>,
    /// TLS only: the port picked is the TLS port, the plain one is off.
    tls: Option<Arc<TlsFiles>>,
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

    /// Starts the server with the config file `path` (written by the test;
    /// the server may rewrite it, as a sentinel does).
    pub(crate) fn config_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.setup.config = Some(path.into());
        self
    }

    /// Serves TLS only (`--port 0 --tls-port <port>`) with `tls`'s
    /// certificate; the fixture's own connections trust its CA.
    pub(crate) fn tls(mut self, tls: &Arc<TlsFiles>) -> Self {
        self.setup.tls = Some(tls.clone());
        self
    }

    /// Spawns the server on a free loopback port and waits until it answers PING.
    pub(crate) fn start(self) -> RedisServer {
        RedisServer::spawn_new(self.args, self.setup)
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
    pub(super) child: Option<Child>,
    dir: PathBuf,
    log: PathBuf,
    extra_args: Vec<String>,
    setup: Setup,
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

    fn spawn_new(extra_args: Vec<String>, setup: Setup) -> RedisServer {
        let dir = unique_dir("trr-redis");
        let log = dir.join("redis.log");
        let mut last_failure = String::new();
        for attempt in 1..=PORT_ATTEMPTS {
            let port = pick_port();
            let log_offset = fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
            let mut child = match spawn_redis(port, &dir, &log, &extra_args, &setup) {
                Ok(child) => child,
                Err(msg) => {
                    let _ = fs::remove_dir_all(&dir);
                    panic!("{msg}");
                }
            };
            match wait_ready(&mut child, &client_for(port, &setup), READY_DEADLINE) {
                Readiness::Ready => {
                    let pid = child.id();
                    return RedisServer {
                        port,
                        pid,
                        child: Some(child),
                        dir,
                        log,
                        extra_args,
                        setup,
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

    /// `redis://127.0.0.1:PORT/`, or `rediss://…` for a TLS server.
    pub(crate) fn url(&self) -> String {
        url_for(self.port, &self.setup)
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
            let mut child = spawn_redis(
                self.port,
                &self.dir,
                &self.log,
                &self.extra_args,
                &self.setup,
            )
            .unwrap_or_else(|msg| panic!("{msg}"));
            let left = deadline.saturating_duration_since(Instant::now());
            let client = client_for(self.port, &self.setup);
            match wait_ready(&mut child, &client, left.max(Duration::from_millis(500))) {
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

    /// A `redis::Client` for this server (trusting the test CA for TLS).
    pub(crate) fn client(&self) -> redis::Client {
        client_for(self.port, &self.setup)
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

/// The URL of a fixture server on `port`.
fn url_for(port: u16, setup: &Setup) -> String {
    let scheme = if setup.tls.is_some() {
        "rediss"
    } else {
        "redis"
    };
    format!("{scheme}://127.0.0.1:{port}/")
}

/// A client of a fixture server on `port`.
fn client_for(port: u16, setup: &Setup) -> redis::Client {
    let url = url_for(port, setup);
    match &setup.tls {
        Some(tls) => tls.client(&url),
        None => redis::Client::open(url).expect("fixture URL is valid"),
    }
}

fn spawn_redis(
    port: u16,
    dir: &Path,
    log: &Path,
    extra_args: &[String],
    setup: &Setup,
) -> Result<Child, String> {
    let log_file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", log.display()));
    let log_err = log_file
        .try_clone()
        .unwrap_or_else(|e| panic!("cannot clone log handle: {e}"));
    let bin = redis_server_bin();
    let mut cmd = Command::new(&bin);
    if let Some(config) = &setup.config {
        cmd.arg(config);
    }
    match &setup.tls {
        Some(tls) => cmd
            .args(["--port", "0", "--tls-port"])
            .arg(port.to_string())
            .args(tls.server_args()),
        None => cmd.arg("--port").arg(port.to_string()),
    };
    cmd.arg("--bind")
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
fn wait_ready(child: &mut Child, client: &redis::Client, within: Duration) -> Readiness {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Readiness::Exited(status);
        }
        if let Some((mut conn, pid)) = ping_and_pid(client) {
            if pid == child.id() {
                // Start with clean INFO commandstats: the readiness probe's
                // PING/INFO must not show up in a test's command counts.
                let reset: redis::RedisResult<()> =
                    redis::cmd("CONFIG").arg("RESETSTAT").query(&mut conn);
                match reset {
                    Ok(()) => return Readiness::Ready,
                    // a sentinel has no CONFIG (and no command counts to reset)
                    Err(e) if e.detail().is_some_and(|d| d.starts_with("unknown command")) => {
                        return Readiness::Ready;
                    }
                    Err(_) => {}
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
