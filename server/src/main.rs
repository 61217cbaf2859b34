//! `ratelimit-server`: Envoy's rate limit service
//! (`envoy.service.ratelimit.v3.RateLimitService`) over a directory of
//! envoyproxy/ratelimit configuration files, with gRPC health checking
//! (`grpc.health.v1`), hot reload and Prometheus metrics.
//!
//! ```text
//! ratelimit-server --config <dir> [--grpc <addr>] [--metrics <addr>]
//!     [--redis <url> [--redis-ca <pem file>]
//!      | --redis-cluster <url,url,...>
//!      | --redis-sentinel <url,url,...> --sentinel-master <name>]
//!     [--store-timeout <ms>] [--on-store-error allow|deny|unavailable]
//!     [--no-store-check] [--watch-interval <ms> | --no-watch]
//!     [--max-metric-keys <n>] [--merge-domains] [--allow-empty-config]
//!     [--headers | --no-headers] [--shadow-mode] [--quota-mode]
//!     [--max-descriptors <n>] [--max-entries <n>] [--charge over|admitted|always]
//!     [--max-connections <n>] [--max-concurrent-streams <n>]
//!     [--max-message-size <bytes>] [--handshake-timeout <duration>]
//!     [--idle-timeout <duration>] [--shutdown-timeout <duration>]
//! ```
//!
//! * `--config` is the directory of the files; without it, envoyproxy/ratelimit's
//!   `RUNTIME_ROOT`/`RUNTIME_SUBDIRECTORY`/`RUNTIME_APPDIRECTORY`. A
//!   directory with no rule refuses the start unless `--allow-empty-config`.
//! * `--grpc` defaults to `127.0.0.1:8081` (or `GRPC_HOST`/`GRPC_PORT`).
//! * `--metrics <addr>` serves `GET /metrics` (Prometheus text format) on
//!   that address; off without it (or `USE_PROMETHEUS=true` and
//!   `PROMETHEUS_ADDR`). `--max-metric-keys` (default 10,000) bounds the
//!   series whose key holds a request's values (`detailed_metric`,
//!   `value_to_metric`).
//! * The store: one Redis (`--redis`, or `REDIS_URL`: `redis://`,
//!   `unix://`, or `rediss://` for TLS against the system's roots or the
//!   PEM root certificate of `--redis-ca`/`REDIS_CA`), a Redis Cluster through its seed nodes
//!   (`--redis-cluster`, or `REDIS_CLUSTER_URLS`), or the primary that
//!   Redis Sentinels monitor under a name (`--redis-sentinel` and
//!   `--sentinel-master`, or `REDIS_SENTINEL_URLS` and
//!   `REDIS_SENTINEL_MASTER`); at most one; envoyproxy/ratelimit's
//!   `REDIS_URL` without a scheme is read with its `REDIS_TYPE`,
//!   `REDIS_SOCKET_TYPE`, `REDIS_AUTH` and `REDIS_TLS`. Without any,
//!   counters live in this process's memory. Flags win over the
//!   environment. At the start the store is checked (version, ACL,
//!   scripts, clock): one that refuses what the service needs stops the
//!   start (`--no-store-check` skips the check), one that does not answer
//!   is logged and the service starts (see "When the store fails").
//! * `--store-timeout` bounds each store call (default: the library's,
//!   100 ms); a call that fails or times out is answered by the domain's
//!   `failure_policy`, else `--on-store-error` (default `unavailable`: the
//!   call fails with `UNAVAILABLE` and Envoy's `failure_mode_deny` decides;
//!   `allow` and `deny` answer `OK` or `OVER_LIMIT` for what could not be
//!   decided).
//! * The configuration directory is read again every `--watch-interval`
//!   (default 250 ms) and a change is applied without a restart; an
//!   invalid one is logged and the running configuration stays.
//!   `--no-watch` loads it once.
//! * The answers: `--headers` adds the IETF `RateLimit`/`RateLimit-Policy`
//!   headers (off by default); `--shadow-mode` (`SHADOW_MODE`) never
//!   denies; `--quota-mode` (`QUOTA_MODE`) puts every rule in quota mode; `--max-descriptors` (64) and `--max-entries` (32) bound a
//!   request; `--charge` (`over`) says when a call's hits are charged to
//!   the rules that do not say (`charge` in `rate_limit`): `over` records
//!   a denied call's hits where it is over a limit (a usage report is
//!   never lost), `admitted` only admitted calls', `always` every call's. `LIMIT_RESPONSE_HEADERS_ENABLED`, `NEAR_LIMIT_RATIO` and
//!   `MERGE_DOMAIN_CONFIG` are read as envoyproxy/ratelimit reads them;
//!   its variables that would change what is admitted and have no
//!   equivalent here refuse the start, naming the variable.
//! * The connections ([`net`](tower_redis_ratelimit_server::net)): at most
//!   `--max-connections` open (default: 10,000, or fewer when the
//!   open-file limit leaves fewer), past it refused; closed when HTTP/2's
//!   handshake is not done within `--handshake-timeout` (10 s) or no byte
//!   moved for `--idle-timeout` (300 s); at most `--max-concurrent-streams`
//!   calls at once on one (1,024), of at most `--max-message-size` bytes
//!   each (1 MiB). Durations take a unit: `500ms`, `10s`, `5m`, `1h`.
//!
//! SIGTERM or Ctrl-C stops it: the health service answers `NOT_SERVING`,
//! no new connection is taken, the calls in flight are answered; after
//! `--shutdown-timeout` (10 s) the connections still open are closed and
//! it exits anyway.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use tower_redis_ratelimit::error::StoreError;
use tower_redis_ratelimit::{
    MemoryStore, Quota, Rate, RateLimiter, RedisClusterStore, RedisSentinelStore, RedisStore,
    store::Store,
};
use tower_redis_ratelimit_server::config::{Charge, Config, LoadOptions, OnStoreError};
use tower_redis_ratelimit_server::net::{Incoming, ListenerOptions};
use tower_redis_ratelimit_server::pb::RateLimitServiceServer;
use tower_redis_ratelimit_server::reload::ConfigWatcher;
use tower_redis_ratelimit_server::service::{
    GoHeaders, NearLimitRatio, RlsService, ServiceOptions,
};

const USAGE: &str = "\
usage: ratelimit-server --config <dir> [--grpc <addr>] [--metrics <addr>]
    [--redis <url> [--redis-ca <pem file>]
     | --redis-cluster <url,url,...>
     | --redis-sentinel <url,url,...> --sentinel-master <name>]
    [--store-timeout <ms>] [--on-store-error allow|deny|unavailable]
    [--no-store-check] [--watch-interval <ms> | --no-watch]
    [--max-metric-keys <n>] [--merge-domains] [--allow-empty-config]
    [--headers | --no-headers] [--shadow-mode] [--quota-mode]
    [--max-descriptors <n>] [--max-entries <n>] [--charge over|admitted|always]
    [--max-connections <n>] [--max-concurrent-streams <n>]
    [--max-message-size <bytes>] [--handshake-timeout <duration>]
    [--idle-timeout <duration>] [--shutdown-timeout <duration>]
durations take a unit: 500ms, 10s, 5m, 1h
environment: REDIS_URL, REDIS_CA, REDIS_CLUSTER_URLS, REDIS_SENTINEL_URLS,
    REDIS_SENTINEL_MASTER, and envoyproxy/ratelimit's settings (SHADOW_MODE,
    QUOTA_MODE, LIMIT_RESPONSE_HEADERS_ENABLED, NEAR_LIMIT_RATIO, MERGE_DOMAIN_CONFIG,
    GRPC_HOST, GRPC_PORT, USE_PROMETHEUS, PROMETHEUS_ADDR, RUNTIME_ROOT, ...;
    one that has no equivalent here refuses the start); a flag wins";

/// Where the counters live.
#[derive(Debug, Clone, PartialEq, Eq)]
enum StoreChoice {
    Memory,
    Redis { url: String, ca: Option<PathBuf> },
    Cluster { urls: Vec<String> },
    Sentinel { urls: Vec<String>, master: String },
}

#[derive(Debug)]
struct Args {
    dir: PathBuf,
    grpc: SocketAddr,
    metrics: Option<SocketAddr>,
    store: StoreChoice,
    store_timeout: Option<Duration>,
    store_check: bool,
    watch: Option<Duration>,
    load: LoadOptions,
    options: ServiceOptions,
    allow_empty_config: bool,
    /// `--max-connections`, when given (else derived from the open-file
    /// limit: [`connection_cap`]).
    max_connections: Option<usize>,
    listener: ListenerOptions,
    max_concurrent_streams: u32,
    max_message_size: usize,
    shutdown_timeout: Duration,
    /// What to log once logging is up: envoyproxy/ratelimit variables read,
    /// or set and ignored.
    notes: Vec<String>,
}

/// A store URL: `redis://`, `rediss://` (TLS), or a Unix socket's
/// `redis+unix://` or `unix://`.
fn store_url(flag: &str, v: &str) -> Result<String, String> {
    let v = v.trim();
    if has_scheme(v) {
        Ok(v.to_owned())
    } else {
        Err(format!(
            "{flag} {v:?}: a URL such as redis://host:6379/ (rediss:// for TLS, \
             unix:///path/to/redis.sock for a Unix socket)"
        ))
    }
}

fn has_scheme(v: &str) -> bool {
    ["redis://", "rediss://", "redis+unix://", "unix://"]
        .iter()
        .any(|s| v.starts_with(s))
}

/// A comma-separated list of store URLs, none empty.
fn store_urls(flag: &str, v: &str) -> Result<Vec<String>, String> {
    let mut urls = Vec::new();
    for (i, part) in v.split(',').enumerate() {
        if part.trim().is_empty() {
            return Err(format!(
                "{flag} {v:?}: URL {} is empty (a comma-separated list such as \
                 redis://10.0.0.1:7000/,redis://10.0.0.2:7000/)",
                i + 1
            ));
        }
        urls.push(store_url(flag, part)?);
    }
    Ok(urls)
}

fn millis(flag: &str, v: &str) -> Result<Duration, String> {
    match v.trim().parse::<u64>() {
        Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(format!(
            "{flag} {v:?}: a number of milliseconds above 0, such as 100"
        )),
    }
}

/// A duration with its unit (`ms`, `s`, `m`, `h`), above 0.
fn duration(flag: &str, v: &str) -> Result<Duration, String> {
    let t = v.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n = n.parse::<u64>().ok().filter(|n| *n > 0);
    let d = match (n, unit) {
        (Some(n), "ms") => Some(Duration::from_millis(n)),
        (Some(n), "s") => Some(Duration::from_secs(n)),
        (Some(n), "m") => n.checked_mul(60).map(Duration::from_secs),
        (Some(n), "h") => n.checked_mul(3_600).map(Duration::from_secs),
        _ => None,
    };
    d.ok_or_else(|| {
        format!("{flag} {v:?}: a duration above 0 with its unit, such as 500ms, 10s, 5m or 1h")
    })
}

/// A count of at least `min`.
fn count(flag: &str, v: &str, min: usize, example: &str) -> Result<usize, String> {
    match v.trim().parse::<usize>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(format!(
            "{flag} {v:?}: a number of at least {min}, such as {example}"
        )),
    }
}

fn addr(flag: &str, v: &str) -> Result<SocketAddr, String> {
    v.parse()
        .map_err(|e| format!("{flag} {v:?}: {e} (an address such as 0.0.0.0:8081)"))
}

/// Go's `strconv.ParseBool`, as envoyproxy/ratelimit reads its switches.
fn go_bool(name: &str, v: &str) -> Result<bool, String> {
    match v.trim() {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!("{name}={v:?}: true or false")),
    }
}

/// `host` and `port` as a listening address (a name is resolved), for the
/// variables named.
fn host_port(what: &str, host: &str, port: &str) -> Result<SocketAddr, String> {
    let port: u16 = port
        .trim()
        .parse()
        .map_err(|_| format!("{what}: port {port:?} is not a port number"))?;
    let host = host.trim();
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let host = if host.is_empty() { "0.0.0.0" } else { host };
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("{what}: host {host:?} does not resolve"))
}

/// Percent-encodes what is not unreserved in a URL's user information.
fn userinfo(v: &str) -> String {
    let mut out = String::new();
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `REDIS_AUTH`'s `password` or `user:password` as a URL's `user:password@`.
fn auth_prefix(auth: Option<&str>) -> String {
    match auth {
        None => String::new(),
        Some(a) => match a.split_once(':') {
            Some((user, pass)) => format!("{}:{}@", userinfo(user), userinfo(pass)),
            None => format!(":{}@", userinfo(a)),
        },
    }
}

/// envoyproxy/ratelimit's variables, by what this service does with them.
///
/// Honoured (read in [`parse`]): `SHADOW_MODE`, `LIMIT_RESPONSE_HEADERS_ENABLED`,
/// `LIMIT_LIMIT_HEADER`, `LIMIT_REMAINING_HEADER`, `LIMIT_RESET_HEADER`,
/// `NEAR_LIMIT_RATIO`, `MERGE_DOMAIN_CONFIG`, `GRPC_HOST`, `GRPC_PORT`,
/// `USE_PROMETHEUS`, `PROMETHEUS_ADDR`, `PROMETHEUS_PATH` (`/metrics`
/// only), `RUNTIME_ROOT`, `RUNTIME_SUBDIRECTORY`, `RUNTIME_APPDIRECTORY`,
/// `CONFIG_TYPE` (`FILE` only), `BACKEND_TYPE` (`redis` only), `REDIS_URL`,
/// `REDIS_TYPE`, `REDIS_SOCKET_TYPE`, `REDIS_AUTH`, `REDIS_TLS`,
/// `REDIS_TLS_CACERT`, `REDIS_SENTINEL_AUTH`,
/// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` (`--charge admitted`, unless
/// `--charge` says otherwise); refused when set so as to change behaviour: [`GO_REFUSED`];
/// ignored (logged when set): [`GO_IGNORED`].
const GO_IGNORED: &[(&str, &str)] = &[
    (
        "HOST",
        "no HTTP endpoint (/json, /healthcheck): use grpc.health.v1",
    ),
    (
        "PORT",
        "no HTTP endpoint (/json, /healthcheck): use grpc.health.v1",
    ),
    ("DEBUG_HOST", "no debug endpoint"),
    ("DEBUG_PORT", "no debug endpoint"),
    (
        "GRPC_MAX_CONNECTION_AGE",
        "tunes Go's gRPC server (see --idle-timeout)",
    ),
    (
        "GRPC_MAX_CONNECTION_AGE_GRACE",
        "tunes Go's gRPC server (see --shutdown-timeout)",
    ),
    ("LOG_LEVEL", "logs are at INFO, to standard error"),
    ("LOG_FORMAT", "logs are text"),
    (
        "FORCE_START_WITHOUT_INITIAL_CONFIG",
        "for xDS (see --allow-empty-config)",
    ),
    ("USE_STATSD", "no statsd: Prometheus metrics with --metrics"),
    (
        "STATSD_HOST",
        "no statsd: Prometheus metrics with --metrics",
    ),
    (
        "STATSD_PORT",
        "no statsd: Prometheus metrics with --metrics",
    ),
    (
        "USE_DOG_STATSD",
        "no statsd: Prometheus metrics with --metrics",
    ),
    ("USE_DOG_STATSD_MOGRIFIERS", "no statsd"),
    ("EXTRA_TAGS", "no statsd"),
    ("STATS_FLUSH_INTERVAL", "metrics are read when scraped"),
    ("DISABLE_STATS", "metrics are served only with --metrics"),
    (
        "PROMETHEUS_MAPPER_YAML",
        "metrics keep envoyproxy/ratelimit's default names",
    ),
    (
        "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
        "no response time metric",
    ),
    (
        "RUNTIME_IGNOREDOTFILES",
        "names starting with . are always skipped",
    ),
    (
        "RUNTIME_WATCH_ROOT",
        "the directory is polled (--watch-interval)",
    ),
    ("EXPIRATION_JITTER_MAX_SECONDS", "tunes Go's key expiry"),
    (
        "LOCAL_CACHE_SIZE_IN_BYTES",
        "tunes Go's cache of keys over their limit (the answers are the same)",
    ),
    (
        "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
        "no rule refuses the start (see --allow-empty-config)",
    ),
    ("REDIS_POOL_SIZE", "tunes Go's Redis client"),
    (
        "REDIS_PIPELINE_WINDOW",
        "tunes Go's Redis client (calls are batched)",
    ),
    ("REDIS_PIPELINE_LIMIT", "tunes Go's Redis client"),
    (
        "REDIS_CLUSTER_PIPELINE_PARALLELISM",
        "tunes Go's Redis client",
    ),
    ("REDIS_POOL_ON_EMPTY_BEHAVIOR", "tunes Go's Redis client"),
    (
        "REDIS_TIMEOUT",
        "tunes Go's Redis client (see --store-timeout)",
    ),
    ("REDIS_STARTUP_INITIAL_INTERVAL", "tunes Go's Redis client"),
    ("REDIS_STARTUP_MAX_INTERVAL", "tunes Go's Redis client"),
    ("REDIS_STARTUP_MAX_ELAPSED_TIME", "tunes Go's Redis client"),
    (
        "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
        "the health service stays SERVING while the store fails",
    ),
    ("TRACING_ENABLED", "no tracing"),
];

/// envoyproxy/ratelimit's variables that refuse the start when set so as
/// to change behaviour, and what to use instead (checked in [`go_refusals`]).
const GO_REFUSED: &[(&str, &str)] = &[
    (
        "RESPONSE_DYNAMIC_METADATA",
        "no dynamic metadata in responses",
    ),
    (
        "GRPC_SERVER_USE_TLS",
        "no TLS on the gRPC listener: terminate TLS in front of it (a sidecar, the mesh)",
    ),
    (
        "REDIS_PERSECOND",
        "one store for every limit: drop it (or run a second service for per-second domains)",
    ),
    (
        "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
        "the server's name is always verified: give its CA with REDIS_CA",
    ),
];

/// The refusals of envoyproxy/ratelimit's settings that no flag overrides.
fn go_refusals(env: &dyn Fn(&str) -> Option<String>) -> Result<(), String> {
    for (name, instead) in GO_REFUSED {
        if let Some(v) = env(name)
            && go_bool(name, &v)?
        {
            return Err(format!("{name}={v}: not supported here; {instead}"));
        }
    }
    if let Some(v) = env("CACHE_KEY_PREFIX") {
        return Err(format!(
            "CACHE_KEY_PREFIX={v:?}: no key prefix here (keys are named by domain and rule); \
             to keep deployments apart on one Redis, give each a database: redis://host:6379/1"
        ));
    }
    for name in ["REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY"] {
        if env(name).is_some() {
            return Err(format!(
                "{name}: no client certificate for Redis here; authenticate with a \
                 password in the URL (rediss://user:password@host/)"
            ));
        }
    }
    if let Some(v) = env("GRPC_UDS") {
        return Err(format!(
            "GRPC_UDS={v:?}: no Unix socket listener here; listen on TCP with --grpc \
             (or GRPC_HOST and GRPC_PORT)"
        ));
    }
    Ok(())
}

/// The store from envoyproxy/ratelimit's variables: `REDIS_URL` without a
/// scheme (`host:port`, a socket's path, a cluster's `host:port,...`, or a
/// sentinel's `master,host:port,...`) read with `REDIS_TYPE`
/// (`single`, `cluster`, `sentinel`), `REDIS_SOCKET_TYPE` (`tcp`, `unix`: Go's
/// default), `REDIS_AUTH` (`password` or `user:password`), `REDIS_TLS`,
/// `REDIS_SENTINEL_AUTH`; `REDIS_TLS_CACERT` is `REDIS_CA`.
fn go_redis(url: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<StoreChoice, String> {
    let kind = env("REDIS_TYPE").map(|t| t.trim().to_ascii_lowercase());
    let kind = kind.as_deref().unwrap_or("single");
    let socket = env("REDIS_SOCKET_TYPE").map(|t| t.trim().to_ascii_lowercase());
    let socket = socket.as_deref().unwrap_or("unix");
    let tls = match env("REDIS_TLS") {
        Some(v) => go_bool("REDIS_TLS", &v)?,
        None => false,
    };
    let auth = env("REDIS_AUTH");
    let ca = env("REDIS_CA")
        .or_else(|| env("REDIS_TLS_CACERT"))
        .map(PathBuf::from);
    let scheme = if tls { "rediss" } else { "redis" };
    let hosts = |list: &str, auth: &str| -> Result<Vec<String>, String> {
        let mut out = Vec::new();
        for h in list.split(',') {
            let h = h.trim();
            if h.is_empty() {
                return Err(format!(
                    "REDIS_URL {url:?}: an empty address (REDIS_TYPE={kind}: host:port,host:port)"
                ));
            }
            out.push(format!("{scheme}://{auth}{h}/"));
        }
        Ok(out)
    };
    match kind {
        "single" => match socket {
            "tcp" => {
                let url = format!("{scheme}://{}{}/", auth_prefix(auth.as_deref()), url.trim());
                Ok(StoreChoice::Redis { url, ca })
            }
            "unix" => {
                if tls || auth.is_some() {
                    return Err(format!(
                        "REDIS_URL {url:?} is a Unix socket (REDIS_SOCKET_TYPE=unix, Go's default) \
                         with REDIS_TLS or REDIS_AUTH: give REDIS_URL as a URL instead \
                         (redis://user:password@host:6379/, or REDIS_SOCKET_TYPE=tcp)"
                    ));
                }
                if !url.trim().starts_with('/') {
                    return Err(format!(
                        "REDIS_URL {url:?}: with REDIS_SOCKET_TYPE=unix (Go's default) the path \
                         of a socket, such as /var/run/redis.sock; set REDIS_SOCKET_TYPE=tcp for \
                         host:port, or give a URL such as redis://host:6379/"
                    ));
                }
                Ok(StoreChoice::Redis {
                    url: format!("unix://{}", url.trim()),
                    ca,
                })
            }
            other => Err(format!("REDIS_SOCKET_TYPE={other:?}: tcp or unix")),
        },
        "cluster" => {
            if ca.is_some() {
                return Err("REDIS_TLS_CACERT/REDIS_CA: for one Redis only, not a cluster".into());
            }
            Ok(StoreChoice::Cluster {
                urls: hosts(url, &auth_prefix(auth.as_deref()))?,
            })
        }
        "sentinel" => {
            if tls || auth.is_some() || ca.is_some() {
                return Err(
                    "REDIS_TYPE=sentinel with REDIS_TLS, REDIS_AUTH or a CA: here the primary \
                     is reached over plain TCP without credentials; drop them or use one Redis \
                     URL (REDIS_TYPE=single)"
                        .into(),
                );
            }
            let Some((master, sentinels)) = url.split_once(',') else {
                return Err(format!(
                    "REDIS_URL {url:?}: REDIS_TYPE=sentinel takes <master name>,<host:port>,..."
                ));
            };
            let sentinel_auth = auth_prefix(env("REDIS_SENTINEL_AUTH").as_deref());
            Ok(StoreChoice::Sentinel {
                urls: hosts(sentinels, &sentinel_auth)?,
                master: master.trim().to_owned(),
            })
        }
        other => Err(format!("REDIS_TYPE={other:?}: single, cluster or sentinel")),
    }
}

/// The arguments (without the program's name) and the environment.
fn parse(
    args: impl IntoIterator<Item = std::ffi::OsString>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<Args>, String> {
    let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let mut dir: Option<PathBuf> = None;
    let mut grpc = None;
    let mut metrics = None;
    let mut redis: Option<String> = None;
    let mut ca: Option<PathBuf> = None;
    let mut cluster: Option<Vec<String>> = None;
    let mut sentinel: Option<Vec<String>> = None;
    let mut master: Option<String> = None;
    let mut store_timeout = None;
    let mut store_check = true;
    let mut watch = Some(Duration::from_millis(250));
    let mut merge = false;
    let mut headers = None;
    let mut shadow = false;
    let mut quota = false;
    let mut options = ServiceOptions::default();
    let mut charge = None;
    let mut allow_empty_config = false;
    let mut max_connections = None;
    let mut listener = ListenerOptions::default();
    let mut max_concurrent_streams = 1_024;
    let mut max_message_size = 1 << 20;
    let mut shutdown_timeout = Duration::from_secs(10);
    let mut notes = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = |what: &str| -> Result<String, String> {
            args.next()
                .and_then(|v| v.into_string().ok())
                .ok_or_else(|| format!("{what} needs a value"))
        };
        match arg.to_str() {
            Some("--config") => dir = Some(PathBuf::from(value("--config")?)),
            Some("--grpc") => grpc = Some(addr("--grpc", &value("--grpc")?)?),
            Some("--metrics") => metrics = Some(addr("--metrics", &value("--metrics")?)?),
            Some("--redis") => redis = Some(store_url("--redis", &value("--redis")?)?),
            Some("--redis-ca") => ca = Some(PathBuf::from(value("--redis-ca")?)),
            Some("--redis-cluster") => {
                cluster = Some(store_urls("--redis-cluster", &value("--redis-cluster")?)?);
            }
            Some("--redis-sentinel") => {
                sentinel = Some(store_urls("--redis-sentinel", &value("--redis-sentinel")?)?);
            }
            Some("--sentinel-master") => {
                let v = value("--sentinel-master")?;
                if v.trim().is_empty() {
                    return Err("--sentinel-master: empty; the name the sentinels monitor \
                                the primary under, such as mymaster"
                        .into());
                }
                master = Some(v);
            }
            Some("--store-timeout") => {
                store_timeout = Some(millis("--store-timeout", &value("--store-timeout")?)?);
            }
            Some("--no-store-check") => store_check = false,
            Some("--on-store-error") => {
                let v = value("--on-store-error")?;
                let p = OnStoreError::parse(&v).ok_or_else(|| {
                    format!("--on-store-error {v:?}: one of allow, deny, unavailable")
                })?;
                options = options.on_store_error(p);
            }
            Some("--watch-interval") => {
                watch = Some(millis("--watch-interval", &value("--watch-interval")?)?);
            }
            Some("--no-watch") => watch = None,
            Some("--max-metric-keys") => {
                let v = value("--max-metric-keys")?;
                let n = v.trim().parse::<usize>().map_err(|_| {
                    format!("--max-metric-keys {v:?}: a number of keys, such as 10000 (0: none)")
                })?;
                options = options.max_metric_keys(n);
            }
            Some("--merge-domains") => merge = true,
            Some("--allow-empty-config") => allow_empty_config = true,
            Some("--no-headers") => headers = Some(false),
            Some("--headers") => headers = Some(true),
            Some("--shadow-mode") => shadow = true,
            Some("--quota-mode") => quota = true,
            Some("--max-descriptors") => {
                let v = value("--max-descriptors")?;
                let n = count("--max-descriptors", &v, 1, "64")?;
                let max = tower_redis_ratelimit::limiter::AllOrNothing::MAX_PARTS;
                if n > max {
                    return Err(format!(
                        "--max-descriptors {v:?}: at most {max} (what one store call decides)"
                    ));
                }
                options = options.max_descriptors(n);
            }
            Some("--max-entries") => {
                let n = count("--max-entries", &value("--max-entries")?, 1, "32")?;
                options = options.max_entries(n);
            }
            Some("--charge") => {
                let v = value("--charge")?;
                let c = Charge::parse(&v).ok_or_else(|| {
                    format!("--charge {v:?}: one of {}", Charge::NAMES.join(", "))
                })?;
                charge = Some(c);
                options = options.charge(c);
            }
            Some("--max-connections") => {
                let n = count(
                    "--max-connections",
                    &value("--max-connections")?,
                    1,
                    "10000",
                )?;
                max_connections = Some(n);
            }
            Some("--max-concurrent-streams") => {
                let v = value("--max-concurrent-streams")?;
                let n = count("--max-concurrent-streams", &v, 1, "1024")?;
                max_concurrent_streams = u32::try_from(n)
                    .map_err(|_| format!("--max-concurrent-streams {v:?}: at most {}", u32::MAX))?;
            }
            Some("--max-message-size") => {
                let v = value("--max-message-size")?;
                max_message_size = count("--max-message-size", &v, 1, "1048576")?;
            }
            Some("--handshake-timeout") => {
                let d = duration("--handshake-timeout", &value("--handshake-timeout")?)?;
                listener = listener.handshake_timeout(d);
            }
            Some("--idle-timeout") => {
                let d = duration("--idle-timeout", &value("--idle-timeout")?)?;
                listener = listener.idle_timeout(d);
            }
            Some("--shutdown-timeout") => {
                shutdown_timeout = duration("--shutdown-timeout", &value("--shutdown-timeout")?)?;
            }
            Some("-h" | "--help") => return Ok(None),
            _ => return Err(format!("unknown argument {arg:?}")),
        }
    }

    // envoyproxy/ratelimit's settings: what has no equivalent, then the
    // rest, each under its flag
    go_refusals(&env)?;
    let go = |name: &str| -> Result<Option<bool>, String> {
        env(name).map(|v| go_bool(name, &v)).transpose()
    };
    for (name, why) in GO_IGNORED {
        if let Some(v) = env(name) {
            notes.push(format!("{name}={v} ignored: {why}"));
        }
    }
    if let Some(v) = env("CONFIG_TYPE")
        && !v.trim().eq_ignore_ascii_case("FILE")
        && dir.is_none()
    {
        return Err(format!(
            "CONFIG_TYPE={v:?}: only FILE here (a directory of YAML files, --config)"
        ));
    }
    if go("SHADOW_MODE")? == Some(true) {
        shadow = true;
    }
    options = options.shadow_mode(shadow);
    if go("QUOTA_MODE")? == Some(true) {
        quota = true;
    }
    options = options.quota_mode(quota);
    if let Some(on) = headers {
        options = options.headers(on);
    }
    if go("LIMIT_RESPONSE_HEADERS_ENABLED")? == Some(true) {
        let mut names = GoHeaders::default();
        for (var, name) in [
            ("LIMIT_LIMIT_HEADER", &mut names.limit),
            ("LIMIT_REMAINING_HEADER", &mut names.remaining),
            ("LIMIT_RESET_HEADER", &mut names.reset),
        ] {
            if let Some(v) = env(var) {
                let v = v.trim();
                let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
                if !v.bytes().all(token) {
                    return Err(format!(
                        "{var}={v:?}: a header name, such as RateLimit-Limit"
                    ));
                }
                *name = v.to_owned();
            }
        }
        options = options.go_headers(Some(names));
    }
    if let Some(v) = env("NEAR_LIMIT_RATIO") {
        let ratio = v
            .trim()
            .parse::<f64>()
            .ok()
            .and_then(NearLimitRatio::new)
            .ok_or_else(|| {
                format!("NEAR_LIMIT_RATIO={v:?}: a share of the limit in (0, 1], such as 0.8")
            })?;
        options = options.near_limit_ratio(ratio);
    }
    if go("MERGE_DOMAIN_CONFIG")? == Some(true) {
        merge = true;
    }
    if go("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")? == Some(true) {
        if charge.is_none() {
            options = options.charge(Charge::Admitted);
        }
        notes.push(
            "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true: --charge admitted (a denied request \
             is never counted, and a usage report past a limit is lost)"
                .into(),
        );
    }
    let grpc = match grpc {
        Some(a) => a,
        None => match (env("GRPC_HOST"), env("GRPC_PORT")) {
            (None, None) => SocketAddr::from(([127, 0, 0, 1], 8081)),
            // Go's defaults for the other one
            (host, port) => host_port(
                "GRPC_HOST/GRPC_PORT",
                host.as_deref().unwrap_or("0.0.0.0"),
                port.as_deref().unwrap_or("8081"),
            )?,
        },
    };
    if metrics.is_none() && go("USE_PROMETHEUS")? == Some(true) {
        if let Some(p) = env("PROMETHEUS_PATH")
            && p.trim() != "/metrics"
        {
            return Err(format!(
                "PROMETHEUS_PATH={p:?}: metrics are served at /metrics only"
            ));
        }
        let a = env("PROMETHEUS_ADDR").unwrap_or_else(|| ":9090".into());
        let (host, port) = a
            .trim()
            .rsplit_once(':')
            .ok_or_else(|| format!("PROMETHEUS_ADDR={a:?}: host:port, such as :9090"))?;
        metrics = Some(host_port("PROMETHEUS_ADDR", host, port)?);
    }
    let dir = match dir {
        Some(d) => d,
        None => {
            let root = env("RUNTIME_ROOT");
            let sub = env("RUNTIME_SUBDIRECTORY");
            let app = env("RUNTIME_APPDIRECTORY");
            if root.is_none() && sub.is_none() && app.is_none() {
                return Err(
                    "--config is required (or envoyproxy/ratelimit's RUNTIME_ROOT, \
                            RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY)"
                        .into(),
                );
            }
            // Go's defaults for the others
            let mut d = PathBuf::from(root.as_deref().unwrap_or("/srv/runtime_data/current"));
            if let Some(s) = sub {
                d.push(s.trim());
            }
            d.push(app.as_deref().map(str::trim).unwrap_or("config"));
            d
        }
    };

    let flags = usize::from(redis.is_some())
        + usize::from(cluster.is_some())
        + usize::from(sentinel.is_some());
    if flags > 1 {
        return Err("give one of --redis, --redis-cluster, --redis-sentinel".into());
    }
    let mut go_store = None;
    if flags == 0 {
        // the environment, when no flag chose a store
        if let Some(v) = env("BACKEND_TYPE")
            && !v.trim().eq_ignore_ascii_case("redis")
        {
            return Err(format!(
                "BACKEND_TYPE={v:?}: only Redis here (--redis, --redis-cluster, \
                 --redis-sentinel; without one, counters in memory)"
            ));
        }
        let go_form = |v: &str| {
            !has_scheme(v.trim())
                || env("REDIS_TYPE").is_some_and(|t| !t.trim().eq_ignore_ascii_case("single"))
        };
        if let Some(v) = env("REDIS_URL") {
            if go_form(&v) {
                if has_scheme(v.trim()) {
                    return Err(format!(
                        "REDIS_URL {v:?} with REDIS_TYPE: give REDIS_URL in envoyproxy/ratelimit's \
                         form (host:port,...) or use REDIS_CLUSTER_URLS / REDIS_SENTINEL_URLS"
                    ));
                }
                go_store = Some(go_redis(&v, &env)?);
            } else {
                redis = Some(store_url("REDIS_URL", &v)?);
            }
        }
        if let Some(v) = env("REDIS_CLUSTER_URLS") {
            cluster = Some(store_urls("REDIS_CLUSTER_URLS", &v)?);
        }
        if let Some(v) = env("REDIS_SENTINEL_URLS") {
            sentinel = Some(store_urls("REDIS_SENTINEL_URLS", &v)?);
        }
        let set = usize::from(redis.is_some() || go_store.is_some())
            + usize::from(cluster.is_some())
            + usize::from(sentinel.is_some());
        if set > 1 {
            return Err(
                "set one of REDIS_URL, REDIS_CLUSTER_URLS, REDIS_SENTINEL_URLS \
                        (or choose with a flag)"
                    .into(),
            );
        }
        if redis.is_some() && env("REDIS_AUTH").is_some() {
            return Err(
                "REDIS_AUTH beside a REDIS_URL with a scheme: put the credentials in the URL \
                 (redis://user:password@host:6379/)"
                    .into(),
            );
        }
    }
    if ca.is_none() && go_store.is_none() {
        ca = env("REDIS_CA").map(PathBuf::from);
    }
    if master.is_none() {
        master = env("REDIS_SENTINEL_MASTER");
    }
    let store = match (go_store, redis, cluster, sentinel) {
        (Some(s), ..) => s,
        (None, Some(url), None, None) => {
            if ca.is_some() && !url.starts_with("rediss://") {
                return Err(format!(
                    "--redis-ca is for a TLS Redis: the URL {url:?} should be rediss://"
                ));
            }
            StoreChoice::Redis { url, ca }
        }
        _ if ca.is_some() => return Err("--redis-ca needs --redis rediss://...".into()),
        (None, None, Some(urls), None) => StoreChoice::Cluster { urls },
        (None, None, None, Some(urls)) => StoreChoice::Sentinel {
            urls,
            master: master.ok_or(
                "--redis-sentinel needs --sentinel-master <name> (or REDIS_SENTINEL_MASTER)",
            )?,
        },
        _ => StoreChoice::Memory,
    };
    if let StoreChoice::Redis { url, ca: Some(_) } = &store
        && !url.starts_with("rediss://")
    {
        return Err(format!(
            "REDIS_TLS_CACERT/REDIS_CA is for a TLS Redis: {url:?} should be rediss:// \
             (REDIS_TLS=true)"
        ));
    }
    Ok(Some(Args {
        dir,
        grpc,
        metrics,
        store,
        store_timeout,
        store_check,
        watch,
        load: LoadOptions::default().merge_domains(merge),
        options,
        allow_empty_config,
        max_connections,
        listener,
        max_concurrent_streams,
        max_message_size,
        shutdown_timeout,
        notes,
    }))
}

/// The soft open-file limit (`RLIMIT_NOFILE`), from `/proc/self/limits`
/// (`None` when unlimited or unknown).
fn open_file_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The connection cap: `--max-connections` when given (with a warning
/// when the open-file limit cannot hold it), else 10,000 or, under a low
/// open-file limit `n`, `n` less what the rest of the process needs (a
/// quarter of `n`, at least 32).
fn connection_cap(explicit: Option<usize>, nofile: Option<u64>) -> (usize, Option<String>) {
    let room = nofile.map(|n| {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        n.saturating_sub((n / 4).max(32)).max(1)
    });
    match (explicit, room) {
        (Some(n), Some(room)) if n > room => (
            n,
            Some(format!(
                "--max-connections {n} is more than the open-file limit leaves ({room} of {}): \
                 past it, accepts fail and are retried with a backoff",
                nofile.unwrap_or_default()
            )),
        ),
        (Some(n), _) => (n, None),
        (None, Some(room)) if room < 10_000 => (
            room,
            Some(format!(
                "at most {room} connections (the open-file limit is {}; raise it, or set \
                 --max-connections)",
                nofile.unwrap_or_default()
            )),
        ),
        (None, _) => (10_000, None),
    }
}

fn main() -> ExitCode {
    use std::io::IsTerminal as _;
    tracing_subscriber::fmt()
        .with_target(false)
        .with_writer(std::io::stderr)
        // colours only on a terminal, whatever features the workspace
        // turns on: a file or a pipe gets plain text
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let args = match parse(std::env::args_os().skip(1), |name| std::env::var(name).ok()) {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(problem) => {
            tracing::error!("{problem}");
            eprintln!("(ratelimit-server --help lists every flag)");
            return ExitCode::from(2);
        }
    };
    for note in &args.notes {
        tracing::warn!("{note}");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(args));
    // (a blocking task, a file read or a scrape, does not hold the exit)
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// The limiters that check the store at startup: one of each kind of
/// quota `config` uses (the default fixed window, and each `strategy`),
/// on the service's store and clock.
fn probes<S: Store + Clone>(store: &S, config: &Config) -> Result<Vec<RateLimiter>, String> {
    let rate = Rate::new(10, Duration::from_secs(60));
    let mut quotas = vec![Quota::fixed_window(rate).aligned()];
    let mut seen = Vec::new();
    for domain in config.domains() {
        for rule in config.rules(domain) {
            if let Some(s) = rule.strategy
                && !seen.contains(&s)
            {
                seen.push(s);
                quotas.push(Quota::new(s, rate));
            }
        }
    }
    quotas
        .into_iter()
        .map(|q| {
            RateLimiter::builder()
                .store(store.clone())
                .prefix("rls.verify")
                .quota(q)
                .build()
                .map_err(|e| format!("the store check's limiter: {e}"))
        })
        .collect()
}

/// The service over `config` on the chosen store, and the limiters that
/// check that store.
fn service(
    args: &Args,
    config: Config,
) -> Result<(RlsService, Vec<RateLimiter>), Box<dyn std::error::Error>> {
    let options = args.options.clone();
    Ok(match &args.store {
        StoreChoice::Memory => {
            tracing::info!("store: memory");
            (
                RlsService::new(config, MemoryStore::new(), options)?,
                Vec::new(),
            )
        }
        StoreChoice::Redis { url, ca } => {
            let mut store = match ca {
                None => RedisStore::from_url(url)?,
                Some(path) => {
                    let pem = std::fs::read(path)
                        .map_err(|e| format!("--redis-ca {}: {e}", path.display()))?;
                    RedisStore::from_url_with_tls(
                        url,
                        tower_redis_ratelimit::redis::TlsCertificates {
                            client_tls: None,
                            root_cert: Some(pem),
                        },
                    )?
                }
            };
            if let Some(t) = args.store_timeout {
                store = store.timeout(t);
            }
            tracing::info!(tls = url.starts_with("rediss://"), "store: redis");
            let probes = probes(&store, &config)?;
            (RlsService::new(config, store, options)?, probes)
        }
        StoreChoice::Cluster { urls } => {
            let mut store = RedisClusterStore::from_urls(urls.iter().cloned())?;
            if let Some(t) = args.store_timeout {
                store = store.timeout(t);
            }
            tracing::info!(seeds = urls.len(), "store: redis cluster");
            let probes = probes(&store, &config)?;
            (RlsService::new(config, store, options)?, probes)
        }
        StoreChoice::Sentinel { urls, master } => {
            let mut store = RedisSentinelStore::from_urls(urls.iter().cloned(), master)?;
            if let Some(t) = args.store_timeout {
                store = store.timeout(t);
            }
            tracing::info!(sentinels = urls.len(), master, "store: redis sentinel");
            let probes = probes(&store, &config)?;
            (RlsService::new(config, store, options)?, probes)
        }
    })
}

/// Runs each probe's [`RateLimiter::verify`]: the first failure.
async fn verify(probes: &[RateLimiter]) -> Result<(), StoreError> {
    for p in probes {
        p.verify().await?;
    }
    Ok(())
}

/// The startup check of the store: a store that refuses what the service
/// needs (an ACL, a command, its version, its clock) stops the start, as
/// every call would fail until it is reconfigured; one that does not
/// answer is logged, the service starts (each call the store cannot decide
/// is answered by its domain's failure policy), and the check is retried
/// in the background until it passes.
async fn check_store(probes: Vec<RateLimiter>) -> Result<(), String> {
    if probes.is_empty() {
        return Ok(());
    }
    match verify(&probes).await {
        Ok(()) => {
            tracing::info!("store: checked (version, permissions, scripts, clock)");
            Ok(())
        }
        Err(StoreError::Refused(r)) => Err(format!(
            "the store refuses what the service needs: {r} (fix the server's ACL or \
             configuration; --no-store-check starts anyway)"
        )),
        Err(e) => {
            tracing::error!(
                "the store does not answer: {e}; starting anyway: until it does, each call \
                 is answered by its domain's failure_policy (else --on-store-error)"
            );
            tokio::spawn(async move {
                let mut wait = Duration::from_secs(1);
                loop {
                    tokio::time::sleep(wait).await;
                    match verify(&probes).await {
                        Ok(()) => {
                            tracing::info!("store: answering, checked");
                            return;
                        }
                        Err(StoreError::Refused(r)) => {
                            tracing::error!("the store refuses what the service needs: {r}");
                            return;
                        }
                        Err(_) => wait = (wait * 2).min(Duration::from_secs(30)),
                    }
                }
            });
            Ok(())
        }
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let files = Config::read_dir(&args.dir)?;
    let config = Config::from_sources(
        files.iter().map(|(n, t)| (n.as_str(), t.as_str())),
        args.load,
    )?;
    for w in config.warnings() {
        tracing::warn!("{w}");
    }
    let mut rules = 0;
    for domain in config.domains() {
        let n = config.rules(domain).len();
        rules += n;
        tracing::info!(domain, limits = n, "loaded");
    }
    // the modes that change what is answered, whether from a flag or
    // envoyproxy/ratelimit's environment, said once at the start
    let o = &args.options;
    tracing::info!(
        shadow_mode = o.shadow_mode,
        quota_mode = o.quota_mode,
        headers = o.headers,
        go_headers = ?o.go_headers.as_ref().map(|h| [&h.limit, &h.remaining, &h.reset]),
        near_limit_ratio = o.near_limit_ratio.get(),
        max_descriptors = o.max_descriptors,
        max_entries = o.max_entries,
        charge = ?o.charge,
        on_store_error = %o.on_store_error,
        "answering"
    );
    if o.shadow_mode {
        tracing::warn!("shadow mode (--shadow-mode or SHADOW_MODE): every request is answered OK");
    }
    if rules == 0 {
        let dir = args.dir.display();
        if !args.allow_empty_config {
            return Err(format!(
                "no rate limit rule in {dir} ({} files read): every request would be \
                 allowed; check the directory (--config), or start anyway with \
                 --allow-empty-config",
                files.len()
            )
            .into());
        }
        tracing::warn!(
            "STARTING WITH NO RATE LIMIT RULE ({dir}, {} files read, --allow-empty-config): \
             every request is allowed until rules are added",
            files.len()
        );
    }
    let (service, probes) = service(&args, config)?;
    if args.store_check {
        check_store(probes).await?;
    }
    // SIGTERM stops the metrics endpoint too (its own grace bounds it)
    let (stop_metrics, _) = tokio::sync::watch::channel(false);
    if let Some(addr) = args.metrics {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("--metrics {addr}: {e}"))?;
        tracing::info!(%addr, "serving metrics at /metrics");
        let mut stop = stop_metrics.subscribe();
        tokio::spawn(tower_redis_ratelimit_server::metrics::serve_with_shutdown(
            listener,
            service.metrics(),
            async move {
                let _ = stop.wait_for(|stopping| *stopping).await;
            },
        ));
    }
    if let Some(interval) = args.watch {
        let watcher = ConfigWatcher::new(service.clone(), args.dir.clone(), args.load)
            .loaded_from(files)
            .allow_empty(args.allow_empty_config)
            .interval(interval);
        tokio::spawn(watcher.run());
    }
    let (cap, warning) = connection_cap(args.max_connections, open_file_limit());
    if let Some(w) = warning {
        tracing::warn!("{w}");
    }
    let listener = tokio::net::TcpListener::bind(args.grpc)
        .await
        .map_err(|e| format!("--grpc {}: {e}", args.grpc))?;
    let incoming = Incoming::new(listener, args.listener.clone().max_connections(cap));
    let open = incoming.gauge();
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<RateLimitServiceServer<RlsService>>()
        .await;
    let (stopping, stopped) = tokio::sync::oneshot::channel::<()>();
    let signal = async move {
        shutdown().await;
        // before draining: a health check on a connection still open sees it
        health_reporter
            .set_not_serving::<RateLimitServiceServer<RlsService>>()
            .await;
        health_reporter
            .set_service_status("", tonic_health::ServingStatus::NotServing)
            .await;
        let _ = stop_metrics.send(true);
        let _ = stopping.send(());
    };
    tracing::info!(
        addr = %args.grpc,
        max_connections = cap,
        idle_timeout_s = args.listener.idle_timeout.as_secs(),
        "serving gRPC"
    );
    let serve = tonic::transport::Server::builder()
        .max_concurrent_streams(args.max_concurrent_streams)
        .add_service(health_service)
        .add_service(
            RateLimitServiceServer::new(service).max_decoding_message_size(args.max_message_size),
        )
        .serve_with_incoming_shutdown(incoming, signal);
    let deadline = async {
        if stopped.await.is_ok() {
            tokio::time::sleep(args.shutdown_timeout).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        served = serve => served?,
        () = deadline => tracing::warn!(
            open = open.open(),
            "connections still open after --shutdown-timeout ({} ms): closing them",
            args.shutdown_timeout.as_millis()
        ),
    }
    tracing::info!("stopped");
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!("cannot listen for Ctrl-C: {e}");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
    tracing::info!("shutting down: answering the calls in flight");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str], env: &[(&str, &str)]) -> Result<Args, String> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        parse(
            ["--config", "/c"].iter().chain(args).map(|a| a.into()),
            |name| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()),
        )
        .map(|a| a.expect("not help"))
    }

    #[test]
    fn stores_from_flags_and_environment() {
        assert_eq!(p(&[], &[]).unwrap().store, StoreChoice::Memory);
        assert_eq!(
            p(&["--redis", "rediss://h:6380/"], &[]).unwrap().store,
            StoreChoice::Redis {
                url: "rediss://h:6380/".into(),
                ca: None
            }
        );
        assert_eq!(
            p(&["--redis-cluster", "redis://a:1, redis://b:2"], &[])
                .unwrap()
                .store,
            StoreChoice::Cluster {
                urls: vec!["redis://a:1".into(), "redis://b:2".into()]
            }
        );
        assert_eq!(
            p(
                &["--redis-sentinel", "redis://s:26379"],
                &[("REDIS_SENTINEL_MASTER", "mymaster")]
            )
            .unwrap()
            .store,
            StoreChoice::Sentinel {
                urls: vec!["redis://s:26379".into()],
                master: "mymaster".into()
            }
        );
        // the environment, and a flag winning over it
        assert_eq!(
            p(&[], &[("REDIS_CLUSTER_URLS", "redis://a:1,redis://b:2")])
                .unwrap()
                .store,
            StoreChoice::Cluster {
                urls: vec!["redis://a:1".into(), "redis://b:2".into()]
            }
        );
        assert_eq!(
            p(
                &["--redis", "redis://x/"],
                &[("REDIS_CLUSTER_URLS", "redis://a:1")]
            )
            .unwrap()
            .store,
            StoreChoice::Redis {
                url: "redis://x/".into(),
                ca: None
            }
        );
        assert_eq!(
            p(&[], &[("REDIS_URL", " ")]).unwrap().store,
            StoreChoice::Memory
        );
    }

    #[test]
    fn malformed_store_values_are_rejected_by_name() {
        for (args, env, needle) in [
            (
                &["--redis", "localhost:6379"][..],
                &[][..],
                "--redis \"localhost:6379\"",
            ),
            (
                &["--redis-cluster", "redis://a:1,,redis://b:2"],
                &[],
                "URL 2 is empty",
            ),
            (&["--redis-cluster", ""], &[], "URL 1 is empty"),
            (
                &["--redis-cluster", "http://a:1"],
                &[],
                "--redis-cluster \"http://a:1\"",
            ),
            (
                &["--redis-sentinel", "redis://s:1"],
                &[],
                "needs --sentinel-master",
            ),
            (
                &["--redis-sentinel", "redis://s:1", "--sentinel-master", " "],
                &[],
                "--sentinel-master: empty",
            ),
            (
                &["--redis", "redis://a/", "--redis-cluster", "redis://b/"],
                &[],
                "give one of",
            ),
            (
                &[],
                &[
                    ("REDIS_URL", "redis://a/"),
                    ("REDIS_SENTINEL_URLS", "redis://b/"),
                ],
                "set one of",
            ),
            (&[], &[("REDIS_URL", "nope")], "REDIS_URL \"nope\""),
            (
                &["--redis", "redis://a/", "--redis-ca", "/ca.pem"],
                &[],
                "should be rediss://",
            ),
            (&["--redis-ca", "/ca.pem"], &[], "--redis-ca needs"),
            (&["--store-timeout", "0"], &[], "--store-timeout \"0\""),
            (&["--store-timeout", "-5"], &[], "--store-timeout \"-5\""),
            (&["--watch-interval", "0"], &[], "--watch-interval \"0\""),
            (
                &["--on-store-error", "open"],
                &[],
                "--on-store-error \"open\"",
            ),
            (&["--metrics", "9090"], &[], "--metrics \"9090\""),
            (
                &["--max-metric-keys", "-1"],
                &[],
                "--max-metric-keys \"-1\"",
            ),
            (
                &["--max-metric-keys", "many"],
                &[],
                "--max-metric-keys \"many\"",
            ),
            (&["--redis"], &[], "--redis needs a value"),
            (
                &["--max-descriptors", "257"],
                &[],
                "--max-descriptors \"257\": at most 256",
            ),
        ] {
            let e = p(args, env).expect_err(needle);
            assert!(e.contains(needle), "{args:?}: {e}");
        }
    }

    #[test]
    fn policy_watch_and_metrics_flags() {
        let a = p(
            &[
                "--on-store-error",
                "DENY",
                "--no-watch",
                "--metrics",
                "127.0.0.1:9090",
            ],
            &[],
        )
        .unwrap();
        assert_eq!(a.options.on_store_error, OnStoreError::Deny);
        assert_eq!(a.watch, None);
        assert_eq!(a.metrics, Some(SocketAddr::from(([127, 0, 0, 1], 9090))));
        let a = p(&["--watch-interval", "100"], &[]).unwrap();
        assert_eq!(a.watch, Some(Duration::from_millis(100)));
        assert_eq!(a.options.on_store_error, OnStoreError::Unavailable);
        assert_eq!(a.metrics, None);
        assert_eq!(a.options.max_metric_keys, 10_000);
        let a = p(&["--max-metric-keys", "0"], &[]).unwrap();
        assert_eq!(a.options.max_metric_keys, 0);
    }

    /// Parses with no `--config` of the helper's.
    fn bare(args: &[&str], env: &[(&str, &str)]) -> Result<Args, String> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        parse(args.iter().map(|a| a.into()), |name| {
            env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
        .map(|a| a.expect("not help"))
    }

    #[test]
    fn connection_flags_and_their_defaults() {
        let a = p(&[], &[]).unwrap();
        assert_eq!(a.max_connections, None);
        assert_eq!(a.listener, ListenerOptions::default());
        assert_eq!(a.listener.handshake_timeout, Duration::from_secs(10));
        assert_eq!(a.listener.idle_timeout, Duration::from_secs(300));
        assert_eq!(a.max_concurrent_streams, 1_024);
        assert_eq!(a.max_message_size, 1 << 20);
        assert_eq!(a.shutdown_timeout, Duration::from_secs(10));
        assert!(a.store_check);
        assert!(!a.allow_empty_config);
        let a = p(
            &[
                "--max-connections",
                "50",
                "--handshake-timeout",
                "1500ms",
                "--idle-timeout",
                "2m",
                "--shutdown-timeout",
                "1h",
                "--max-concurrent-streams",
                "8",
                "--max-message-size",
                "4096",
                "--no-store-check",
                "--allow-empty-config",
            ],
            &[],
        )
        .unwrap();
        assert_eq!(a.max_connections, Some(50));
        assert_eq!(a.listener.handshake_timeout, Duration::from_millis(1500));
        assert_eq!(a.listener.idle_timeout, Duration::from_secs(120));
        assert_eq!(a.shutdown_timeout, Duration::from_secs(3600));
        assert_eq!(a.max_concurrent_streams, 8);
        assert_eq!(a.max_message_size, 4096);
        assert!(!a.store_check);
        assert!(a.allow_empty_config);
    }

    #[test]
    fn answer_flags() {
        let a = p(&[], &[]).unwrap();
        assert!(!a.options.headers);
        assert!(!a.options.shadow_mode);
        assert_eq!(a.options.go_headers, None);
        let a = p(
            &[
                "--headers",
                "--shadow-mode",
                "--max-descriptors",
                "8",
                "--max-entries",
                "4",
            ],
            &[],
        )
        .unwrap();
        assert!(a.options.headers);
        assert!(a.options.shadow_mode);
        assert_eq!((a.options.max_descriptors, a.options.max_entries), (8, 4));
        assert!(
            !p(&["--headers", "--no-headers"], &[])
                .unwrap()
                .options
                .headers
        );
    }

    #[test]
    fn durations_take_a_unit() {
        assert_eq!(duration("f", "250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(duration("f", " 10s "), Ok(Duration::from_secs(10)));
        assert_eq!(duration("f", "5m"), Ok(Duration::from_secs(300)));
        assert_eq!(duration("f", "2h"), Ok(Duration::from_secs(7200)));
        for bad in ["10", "0s", "-1s", "1.5s", "s", "", "10 s", "3d"] {
            let e = duration("--idle-timeout", bad).expect_err(bad);
            assert!(e.starts_with(&format!("--idle-timeout {bad:?}")), "{e}");
        }
    }

    #[test]
    fn the_connection_cap_leaves_room_under_a_low_open_file_limit() {
        assert_eq!(connection_cap(None, None), (10_000, None));
        assert_eq!(connection_cap(None, Some(1 << 20)), (10_000, None));
        let (n, w) = connection_cap(None, Some(1024));
        assert_eq!(n, 768);
        assert!(w.expect("a warning").contains("1024"));
        assert_eq!(connection_cap(None, Some(64)).0, 32);
        assert_eq!(connection_cap(None, Some(20)).0, 1);
        // a flag is kept, with a warning past what the limit leaves
        assert_eq!(connection_cap(Some(100), Some(1024)), (100, None));
        let (n, w) = connection_cap(Some(5_000), Some(1024));
        assert_eq!(n, 5_000);
        assert!(w.expect("a warning").contains("--max-connections 5000"));
    }

    #[test]
    fn go_switches_are_honoured() {
        let a = p(
            &[],
            &[
                ("SHADOW_MODE", "true"),
                ("QUOTA_MODE", "true"),
                ("MERGE_DOMAIN_CONFIG", "1"),
                ("NEAR_LIMIT_RATIO", "0.5"),
                ("LIMIT_RESPONSE_HEADERS_ENABLED", "True"),
                ("LIMIT_REMAINING_HEADER", "X-Left"),
                ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
            ],
        )
        .unwrap();
        assert!(a.options.shadow_mode);
        assert!(a.options.quota_mode);
        assert!(a.load.merge_domains);
        assert_eq!(
            a.options.near_limit_ratio,
            NearLimitRatio::new(0.5).unwrap()
        );
        assert_eq!(
            a.options.go_headers,
            Some(GoHeaders {
                limit: "RateLimit-Limit".into(),
                remaining: "X-Left".into(),
                reset: "RateLimit-Reset".into(),
            })
        );
        assert!(a.notes.iter().any(|n| n.contains("never counted")));
        assert_eq!(a.options.charge, Charge::Admitted);
        let a = p(
            &["--charge", "always"],
            &[("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")],
        )
        .unwrap();
        assert_eq!(a.options.charge, Charge::Always, "the flag wins");
        assert_eq!(p(&[], &[]).unwrap().options.charge, Charge::Over);
        // off, and the IETF headers stay off
        let a = p(
            &[],
            &[
                ("SHADOW_MODE", "false"),
                ("LIMIT_RESPONSE_HEADERS_ENABLED", "0"),
            ],
        )
        .unwrap();
        assert!(!a.options.shadow_mode);
        assert!(!a.options.quota_mode);
        assert_eq!(a.options.go_headers, None);
        assert!(!a.options.headers);
        assert!(p(&["--quota-mode"], &[]).unwrap().options.quota_mode);
    }

    #[test]
    fn go_addresses_and_directory() {
        let a = bare(
            &[],
            &[
                ("RUNTIME_ROOT", "/srv/rt"),
                ("RUNTIME_SUBDIRECTORY", "ratelimit"),
                ("GRPC_PORT", "9081"),
                ("USE_PROMETHEUS", "true"),
            ],
        )
        .unwrap();
        assert_eq!(a.dir, PathBuf::from("/srv/rt/ratelimit/config"));
        assert_eq!(a.grpc, SocketAddr::from(([0, 0, 0, 0], 9081)));
        assert_eq!(a.metrics, Some(SocketAddr::from(([0, 0, 0, 0], 9090))));
        let a = bare(
            &["--config", "/c", "--grpc", "127.0.0.1:1"],
            &[
                ("RUNTIME_ROOT", "/srv/rt"),
                ("GRPC_HOST", "127.0.0.2"),
                ("USE_PROMETHEUS", "true"),
                ("PROMETHEUS_ADDR", "127.0.0.1:9102"),
            ],
        )
        .unwrap();
        assert_eq!(a.dir, PathBuf::from("/c"));
        assert_eq!(a.grpc, SocketAddr::from(([127, 0, 0, 1], 1)));
        assert_eq!(a.metrics, Some(SocketAddr::from(([127, 0, 0, 1], 9102))));
        let a = bare(&[], &[("RUNTIME_APPDIRECTORY", "limits")]).unwrap();
        assert_eq!(a.dir, PathBuf::from("/srv/runtime_data/current/limits"));
        // without a flag
        let a = p(&[], &[("GRPC_HOST", "127.0.0.3")]).unwrap();
        assert_eq!(a.grpc, SocketAddr::from(([127, 0, 0, 3], 8081)));
        assert_eq!(
            p(&[], &[]).unwrap().grpc,
            SocketAddr::from(([127, 0, 0, 1], 8081))
        );
        let e = bare(&[], &[]).expect_err("no directory");
        assert!(
            e.contains("--config is required") && e.contains("RUNTIME_ROOT"),
            "{e}"
        );
    }

    #[test]
    fn go_redis_settings_are_translated() {
        let redis = |url: &str| StoreChoice::Redis {
            url: url.into(),
            ca: None,
        };
        for (env, store) in [
            (
                &[("REDIS_SOCKET_TYPE", "tcp"), ("REDIS_URL", "redis:6379")][..],
                redis("redis://redis:6379/"),
            ),
            (
                &[("REDIS_URL", "/var/run/nutcracker/ratelimit.sock")],
                redis("unix:///var/run/nutcracker/ratelimit.sock"),
            ),
            (
                &[
                    ("REDIS_SOCKET_TYPE", "TCP"),
                    ("REDIS_URL", "h:6380"),
                    ("REDIS_TLS", "true"),
                    ("REDIS_AUTH", "user:p@ss"),
                ],
                redis("rediss://user:p%40ss@h:6380/"),
            ),
            (
                &[
                    ("REDIS_SOCKET_TYPE", "tcp"),
                    ("REDIS_URL", "h:1"),
                    ("REDIS_AUTH", "secret"),
                ],
                redis("redis://:secret@h:1/"),
            ),
            (
                &[("REDIS_TYPE", "cluster"), ("REDIS_URL", "a:7000, b:7001")],
                StoreChoice::Cluster {
                    urls: vec!["redis://a:7000/".into(), "redis://b:7001/".into()],
                },
            ),
            (
                &[
                    ("REDIS_TYPE", "SENTINEL"),
                    ("REDIS_URL", "mymaster,s1:26379,s2:26379"),
                    ("REDIS_SENTINEL_AUTH", "pw"),
                ],
                StoreChoice::Sentinel {
                    urls: vec![
                        "redis://:pw@s1:26379/".into(),
                        "redis://:pw@s2:26379/".into(),
                    ],
                    master: "mymaster".into(),
                },
            ),
            (
                &[
                    ("REDIS_SOCKET_TYPE", "tcp"),
                    ("REDIS_URL", "h:6379"),
                    ("REDIS_TLS", "true"),
                    ("REDIS_TLS_CACERT", "/ca.pem"),
                ],
                StoreChoice::Redis {
                    url: "rediss://h:6379/".into(),
                    ca: Some("/ca.pem".into()),
                },
            ),
            // ours, with its scheme
            (
                &[("REDIS_URL", "redis://x:1/"), ("REDIS_TYPE", "single")],
                redis("redis://x:1/"),
            ),
            (&[("BACKEND_TYPE", "redis")], StoreChoice::Memory),
        ] {
            assert_eq!(p(&[], env).map(|a| a.store), Ok(store), "{env:?}");
        }
        // a flag wins
        let a = p(
            &["--redis", "redis://flag/"],
            &[
                ("REDIS_TYPE", "cluster"),
                ("REDIS_URL", "a:1,b:2"),
                ("BACKEND_TYPE", "memcache"),
            ],
        )
        .unwrap();
        assert_eq!(a.store, redis("redis://flag/"));
    }

    #[test]
    fn go_settings_without_an_equivalent_refuse_the_start_by_name() {
        for (env, needle) in [
            (
                &[("BACKEND_TYPE", "memcache")][..],
                "BACKEND_TYPE=\"memcache\"",
            ),
            (&[("REDIS_PERSECOND", "true")], "REDIS_PERSECOND=true"),
            (&[("CACHE_KEY_PREFIX", "a:")], "CACHE_KEY_PREFIX=\"a:\""),
            (
                &[("RESPONSE_DYNAMIC_METADATA", "t")],
                "RESPONSE_DYNAMIC_METADATA=t",
            ),
            (
                &[("GRPC_SERVER_USE_TLS", "true")],
                "GRPC_SERVER_USE_TLS=true",
            ),
            (&[("GRPC_UDS", "/tmp/rl.sock")], "GRPC_UDS=\"/tmp/rl.sock\""),
            (
                &[("REDIS_TLS_CLIENT_CERT", "/c.pem")],
                "REDIS_TLS_CLIENT_CERT",
            ),
            (
                &[("SHADOW_MODE", "yes")],
                "SHADOW_MODE=\"yes\": true or false",
            ),
            (&[("NEAR_LIMIT_RATIO", "1.5")], "NEAR_LIMIT_RATIO=\"1.5\""),
            (
                &[
                    ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
                    ("LIMIT_RESET_HEADER", "a b"),
                ],
                "LIMIT_RESET_HEADER=\"a b\"",
            ),
            (
                &[("USE_PROMETHEUS", "true"), ("PROMETHEUS_PATH", "/stats")],
                "PROMETHEUS_PATH=\"/stats\"",
            ),
            (
                &[("GRPC_PORT", "http")],
                "GRPC_HOST/GRPC_PORT: port \"http\"",
            ),
            (
                &[("REDIS_TYPE", "ring"), ("REDIS_URL", "a:1")],
                "REDIS_TYPE=\"ring\"",
            ),
            (
                &[("REDIS_SOCKET_TYPE", "udp"), ("REDIS_URL", "a:1")],
                "REDIS_SOCKET_TYPE=\"udp\"",
            ),
            (
                &[("REDIS_URL", "/run/r.sock"), ("REDIS_AUTH", "pw")],
                "is a Unix socket",
            ),
            (
                &[("REDIS_TYPE", "sentinel"), ("REDIS_URL", "s1:26379")],
                "<master name>,<host:port>",
            ),
            (
                &[
                    ("REDIS_TYPE", "sentinel"),
                    ("REDIS_URL", "m,s1:1"),
                    ("REDIS_AUTH", "pw"),
                ],
                "plain TCP without credentials",
            ),
            (
                &[("REDIS_URL", "redis://h/"), ("REDIS_AUTH", "pw")],
                "put the credentials in the URL",
            ),
            (
                &[("REDIS_URL", "redis://h/"), ("REDIS_TYPE", "cluster")],
                "with REDIS_TYPE",
            ),
            (
                &[
                    ("REDIS_SOCKET_TYPE", "tcp"),
                    ("REDIS_URL", "h:1"),
                    ("REDIS_TLS_CACERT", "/ca"),
                ],
                "should be rediss://",
            ),
        ] {
            let e = p(&[], env).expect_err(needle);
            assert!(e.contains(needle), "{env:?}: {e}");
        }
        let e = bare(
            &[],
            &[("CONFIG_TYPE", "GRPC_XDS_SOTW"), ("RUNTIME_ROOT", "/r")],
        )
        .expect_err("xDS");
        assert!(
            e.contains("CONFIG_TYPE=\"GRPC_XDS_SOTW\": only FILE"),
            "{e}"
        );
        let e = p(&[], &[("REDIS_URL", "localhost:6379")]).expect_err("not a path");
        assert!(e.contains("REDIS_SOCKET_TYPE=tcp"), "{e}");
        // set to what they are by default, they change nothing
        for env in [
            &[("QUOTA_MODE", "false")][..],
            &[("REDIS_PERSECOND", "0")],
            &[("CONFIG_TYPE", "file")],
        ] {
            assert!(p(&[], env).is_ok(), "{env:?}");
        }
    }

    #[test]
    fn go_settings_that_only_tune_go_are_noted() {
        let a = p(
            &[],
            &[
                ("REDIS_POOL_SIZE", "20"),
                ("LOCAL_CACHE_SIZE_IN_BYTES", "1048576"),
            ],
        )
        .unwrap();
        assert_eq!(a.notes.len(), 2, "{:?}", a.notes);
        assert!(
            a.notes
                .iter()
                .any(|n| n.starts_with("REDIS_POOL_SIZE=20 ignored"))
        );
    }
}
