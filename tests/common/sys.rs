//! Ports, private directories, log files and signals for the server fixtures.

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a freshly spawned `redis-server` gets to answer PING: generous,
/// as no test is about start-up time and a loaded 2-core machine (two copies
/// of the suite and a build) has been seen to take over 5 s for a Sentinel.
pub(super) const READY_DEADLINE: Duration = Duration::from_secs(30);
/// How long a freshly created cluster gets to converge.
pub(super) const CLUSTER_DEADLINE: Duration = Duration::from_secs(30);
/// How many different ports `start()` tries before giving up.
pub(super) const PORT_ATTEMPTS: usize = 8;
/// Redis Cluster's bus listens on `port + 10000`.
pub(super) const CLUSTER_BUS_OFFSET: u16 = 10_000;
/// Total number of hash slots in a Redis Cluster.
pub(super) const CLUSTER_SLOTS: u64 = 16_384;

pub(super) const INSTALL_HINT: &str = "install it with `apt-get install -y redis-server` \
     (Debian/Ubuntu; the package also brings `redis-cli` through redis-tools), \
     or point REDIS_SERVER_BIN / REDIS_CLI_BIN at the binaries. \
     Tests need a real Redis and are never skipped";

pub(super) fn redis_server_bin() -> String {
    std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".to_owned())
}

pub(super) fn redis_cli_bin() -> String {
    std::env::var("REDIS_CLI_BIN").unwrap_or_else(|_| "redis-cli".to_owned())
}

// ---------------------------------------------------------------------------
// Ports and directories
// ---------------------------------------------------------------------------

/// Range of candidate ports, chosen below the kernel's ephemeral range so that
/// outgoing client sockets (which take ephemeral ports) never collide with
/// our servers, and so that `port + 10000` (the cluster bus) is below it too.
pub(super) fn port_range() -> (u16, u16) {
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

pub(super) fn port_is_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// Picks a port `p` such that both `p` and `p + 10000` are free right now.
///
/// A process-wide counter hands out distinct candidates to tests running in
/// parallel threads; a per-process random start keeps concurrently running
/// test binaries apart. A remaining race (another process binding the port
/// between this check and redis-server's bind) is handled by `start()`,
/// which notices the failed bind and tries another port.
pub(super) fn pick_port() -> u16 {
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

pub(super) fn unique_dir(prefix: &str) -> PathBuf {
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
pub(super) fn file_tail(path: &Path, lines: usize) -> String {
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
pub(super) fn file_since(path: &Path, offset: u64) -> String {
    let mut out = Vec::new();
    if let Ok(mut f) = File::open(path)
        && f.seek(SeekFrom::Start(offset)).is_ok()
    {
        let _ = f.read_to_end(&mut out);
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(super) fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .unwrap_or_else(|e| panic!("cannot run `kill -{signal} {pid}`: {e}"));
    assert!(status.success(), "`kill -{signal} {pid}` failed: {status}");
}

/// Process state letter from /proc/<pid>/stat ('T' = stopped), if readable.
pub(super) fn proc_state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces.
    let after = &stat[stat.rfind(')')? + 1..];
    after.trim_start().chars().next()
}

pub(super) fn wait_for_state(pid: u32, want_stopped: bool) {
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
