//! envoyproxy/ratelimit's environment variables, read as that service
//! reads them: those that change a setting here ([`GO_IGNORED`]'s
//! documentation lists them), those with no equivalent that refuse the
//! start when set so as to change behaviour ([`go_refusals`]), and those
//! that only tune Go's internals, noted as ignored ([`ignored`]). A flag
//! wins over a variable: [`args`](super::args) reads one only when its
//! flag does not say.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use tower_redis_ratelimit_server::service::{GoHeaders, NearLimitRatio};

/// envoyproxy/ratelimit's variables, by what this service does with them.
///
/// Honoured (read in [`args`](super::args), through this module's
/// functions): `SHADOW_MODE`, `LIMIT_RESPONSE_HEADERS_ENABLED`,
/// `LIMIT_LIMIT_HEADER`, `LIMIT_REMAINING_HEADER`, `LIMIT_RESET_HEADER`,
/// `NEAR_LIMIT_RATIO`, `MERGE_DOMAIN_CONFIG`, `GRPC_HOST`, `GRPC_PORT`,
/// `HOST`, `PORT` (`/healthcheck` only),
/// `USE_PROMETHEUS`, `PROMETHEUS_ADDR`, `PROMETHEUS_PATH` (`/metrics`
/// only), `RUNTIME_ROOT`, `RUNTIME_SUBDIRECTORY`, `RUNTIME_APPDIRECTORY`,
/// `CONFIG_TYPE` (`FILE`, `GRPC_XDS_SOTW`) and the xDS client's
/// (`CONFIG_GRPC_XDS_*`, `XDS_CLIENT_*`, `FORCE_START_WITHOUT_INITIAL_CONFIG`:
/// [`xds`](super::xds)), `BACKEND_TYPE` (`redis` only), `REDIS_URL`,
/// `REDIS_TYPE`, `REDIS_SOCKET_TYPE`, `REDIS_AUTH`, `REDIS_TLS`,
/// `REDIS_TLS_CACERT`, `REDIS_SENTINEL_AUTH` ([`store`](super::store),
/// [`go_redis`](super::store::go_redis)),
/// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` (`--charge admitted`, unless
/// `--charge` says otherwise); refused when set so as to change behaviour: [`GO_REFUSED`];
/// ignored (logged when set): [`GO_IGNORED`].
const GO_IGNORED: &[(&str, &str)] = &[
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
    ("XDS_CLIENT_BACKOFF_JITTER", "the backoff always has jitter"),
    (
        "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
        "each wait is drawn between half and all of the doubled wait",
    ),
    (
        "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
        "connections are retried with --xds-backoff-initial and --xds-backoff-max",
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
pub(super) fn go_refusals(env: &dyn Fn(&str) -> Option<String>) -> Result<(), String> {
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

/// The notes of envoyproxy/ratelimit's variables that are set and ignored
/// ([`GO_IGNORED`]), to log once logging is up.
pub(super) fn ignored(env: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    let mut notes = Vec::new();
    for (name, why) in GO_IGNORED {
        if let Some(v) = env(name) {
            notes.push(format!("{name}={v} ignored: {why}"));
        }
    }
    notes
}

/// One of envoyproxy/ratelimit's switches, when set ([`go_bool`]).
pub(super) fn switch(
    env: &dyn Fn(&str) -> Option<String>,
    name: &str,
) -> Result<Option<bool>, String> {
    env(name).map(|v| go_bool(name, &v)).transpose()
}

/// envoyproxy/ratelimit's headers, with `LIMIT_RESPONSE_HEADERS_ENABLED=true`:
/// named by `LIMIT_LIMIT_HEADER`, `LIMIT_REMAINING_HEADER` and
/// `LIMIT_RESET_HEADER`, else as it names them.
pub(super) fn headers(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<GoHeaders>, String> {
    if switch(env, "LIMIT_RESPONSE_HEADERS_ENABLED")? != Some(true) {
        return Ok(None);
    }
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
    Ok(Some(names))
}

/// `NEAR_LIMIT_RATIO`, when set.
pub(super) fn near_limit_ratio(
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<NearLimitRatio>, String> {
    let Some(v) = env("NEAR_LIMIT_RATIO") else {
        return Ok(None);
    };
    v.trim()
        .parse::<f64>()
        .ok()
        .and_then(NearLimitRatio::new)
        .ok_or_else(|| {
            format!("NEAR_LIMIT_RATIO={v:?}: a share of the limit in (0, 1], such as 0.8")
        })
        .map(Some)
}

/// The gRPC listener of `GRPC_HOST` and `GRPC_PORT` (Go's default for the
/// one not set), when either is set.
pub(super) fn grpc(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<SocketAddr>, String> {
    match (env("GRPC_HOST"), env("GRPC_PORT")) {
        (None, None) => Ok(None),
        (host, port) => host_port(
            "GRPC_HOST/GRPC_PORT",
            host.as_deref().unwrap_or("0.0.0.0"),
            port.as_deref().unwrap_or("8081"),
        )
        .map(Some),
    }
}

/// The `/healthcheck` endpoint of `PORT`, on `HOST` (Go's `0.0.0.0` by
/// default), if `PORT` is set; `grpc`: the gRPC listener's address. These
/// variables are common outside Go's service (a platform's `PORT`, a
/// shell's `HOST`): what they cannot give is a note, not a refusal (no
/// endpoint: `HOST` alone, a `PORT` that is the gRPC port, a host that
/// does not resolve). (Go's `/json` on the same port is not served.)
pub(super) fn http(
    env: &dyn Fn(&str) -> Option<String>,
    grpc: SocketAddr,
    notes: &mut Vec<String>,
) -> Option<SocketAddr> {
    let port = env("PORT")?;
    let host = env("HOST");
    match host_port("HOST/PORT", host.as_deref().unwrap_or("0.0.0.0"), &port) {
        Ok(addr) if super::clashes(addr, grpc) => {
            notes.push(format!(
                "PORT={port} is the gRPC port: no /healthcheck (--http serves it elsewhere)"
            ));
            None
        }
        Ok(addr) => Some(addr),
        Err(e) => {
            notes.push(format!("{e}: no /healthcheck (--http serves it)"));
            None
        }
    }
}

/// The metrics endpoint, with `USE_PROMETHEUS=true`: `PROMETHEUS_ADDR`
/// (Go's `:9090` by default), at `/metrics` only (`PROMETHEUS_PATH`).
pub(super) fn prometheus(
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<SocketAddr>, String> {
    if switch(env, "USE_PROMETHEUS")? != Some(true) {
        return Ok(None);
    }
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
    host_port("PROMETHEUS_ADDR", host, port).map(Some)
}

/// The configuration directory of `RUNTIME_ROOT`, `RUNTIME_SUBDIRECTORY`
/// and `RUNTIME_APPDIRECTORY` (Go's defaults for those not set), when
/// `--config` does not give it: one of them must be set.
pub(super) fn runtime_dir(env: &dyn Fn(&str) -> Option<String>) -> Result<PathBuf, String> {
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
    Ok(d)
}

/// Go's `strconv.ParseBool`, as envoyproxy/ratelimit reads its switches.
pub(super) fn go_bool(name: &str, v: &str) -> Result<bool, String> {
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
