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
//!     [--watch-interval <ms> | --no-watch] [--max-metric-keys <n>]
//!     [--merge-domains] [--no-headers]
//! ```
//!
//! * `--grpc` defaults to `127.0.0.1:8081`.
//! * `--metrics <addr>` serves `GET /metrics` (Prometheus text format) on
//!   that address; off without it (no port is opened unless asked for).
//!   `--max-metric-keys` (default 10,000) bounds the series whose key
//!   holds a request's values (`detailed_metric`, `value_to_metric`).
//! * The store: one Redis (`--redis`, or `REDIS_URL`: `redis://`,
//!   `unix://`, or `rediss://` for TLS against the system's roots or the
//!   PEM root certificate of `--redis-ca`/`REDIS_CA`), a Redis Cluster through its seed nodes
//!   (`--redis-cluster`, or `REDIS_CLUSTER_URLS`), or the primary that
//!   Redis Sentinels monitor under a name (`--redis-sentinel` and
//!   `--sentinel-master`, or `REDIS_SENTINEL_URLS` and
//!   `REDIS_SENTINEL_MASTER`); at most one. Without any, counters live in
//!   this process's memory. Flags win over the environment.
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
//!
//! SIGTERM or Ctrl-C stops it after the calls in flight are answered.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use tower_redis_ratelimit::{MemoryStore, RedisClusterStore, RedisSentinelStore, RedisStore};
use tower_redis_ratelimit_server::config::{Config, LoadOptions, OnStoreError};
use tower_redis_ratelimit_server::pb::RateLimitServiceServer;
use tower_redis_ratelimit_server::reload::ConfigWatcher;
use tower_redis_ratelimit_server::service::{RlsService, ServiceOptions};

const USAGE: &str = "\
usage: ratelimit-server --config <dir> [--grpc <addr>] [--metrics <addr>]
    [--redis <url> [--redis-ca <pem file>]
     | --redis-cluster <url,url,...>
     | --redis-sentinel <url,url,...> --sentinel-master <name>]
    [--store-timeout <ms>] [--on-store-error allow|deny|unavailable]
    [--watch-interval <ms> | --no-watch] [--max-metric-keys <n>]
    [--merge-domains] [--no-headers]
environment: REDIS_URL, REDIS_CA, REDIS_CLUSTER_URLS, REDIS_SENTINEL_URLS,
    REDIS_SENTINEL_MASTER (a flag wins over its variable)";

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
    watch: Option<Duration>,
    load: LoadOptions,
    options: ServiceOptions,
}

/// A store URL: `redis://`, `rediss://` (TLS), or a Unix socket's
/// `redis+unix://` or `unix://`.
fn store_url(flag: &str, v: &str) -> Result<String, String> {
    let v = v.trim();
    let schemes = ["redis://", "rediss://", "redis+unix://", "unix://"];
    if schemes.iter().any(|s| v.starts_with(s)) {
        Ok(v.to_owned())
    } else {
        Err(format!(
            "{flag} {v:?}: a URL such as redis://host:6379/ (rediss:// for TLS, \
             unix:///path/to/redis.sock for a Unix socket)"
        ))
    }
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

fn addr(flag: &str, v: &str) -> Result<SocketAddr, String> {
    v.parse()
        .map_err(|e| format!("{flag} {v:?}: {e} (an address such as 0.0.0.0:8081)"))
}

/// The arguments (without the program's name) and the environment.
fn parse(
    args: impl IntoIterator<Item = std::ffi::OsString>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<Args>, String> {
    let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let mut dir: Option<PathBuf> = None;
    let mut grpc = SocketAddr::from(([127, 0, 0, 1], 8081));
    let mut metrics = None;
    let mut redis: Option<String> = None;
    let mut ca: Option<PathBuf> = None;
    let mut cluster: Option<Vec<String>> = None;
    let mut sentinel: Option<Vec<String>> = None;
    let mut master: Option<String> = None;
    let mut store_timeout = None;
    let mut watch = Some(Duration::from_millis(250));
    let mut load = LoadOptions::default();
    let mut options = ServiceOptions::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = |what: &str| -> Result<String, String> {
            args.next()
                .and_then(|v| v.into_string().ok())
                .ok_or_else(|| format!("{what} needs a value"))
        };
        match arg.to_str() {
            Some("--config") => dir = Some(PathBuf::from(value("--config")?)),
            Some("--grpc") => grpc = addr("--grpc", &value("--grpc")?)?,
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
            Some("--merge-domains") => load = load.merge_domains(true),
            Some("--no-headers") => options = options.headers(false),
            Some("--headers") => options = options.headers(true),
            Some("-h" | "--help") => return Ok(None),
            _ => return Err(format!("unknown argument {arg:?}")),
        }
    }
    let dir = dir.ok_or("--config is required")?;
    let flags = usize::from(redis.is_some())
        + usize::from(cluster.is_some())
        + usize::from(sentinel.is_some());
    if flags > 1 {
        return Err("give one of --redis, --redis-cluster, --redis-sentinel".into());
    }
    if flags == 0 {
        // the environment, when no flag chose a store
        if let Some(v) = env("REDIS_URL") {
            redis = Some(store_url("REDIS_URL", &v)?);
        }
        if let Some(v) = env("REDIS_CLUSTER_URLS") {
            cluster = Some(store_urls("REDIS_CLUSTER_URLS", &v)?);
        }
        if let Some(v) = env("REDIS_SENTINEL_URLS") {
            sentinel = Some(store_urls("REDIS_SENTINEL_URLS", &v)?);
        }
        let set = usize::from(redis.is_some())
            + usize::from(cluster.is_some())
            + usize::from(sentinel.is_some());
        if set > 1 {
            return Err(
                "set one of REDIS_URL, REDIS_CLUSTER_URLS, REDIS_SENTINEL_URLS \
                        (or choose with a flag)"
                    .into(),
            );
        }
    }
    if ca.is_none() {
        ca = env("REDIS_CA").map(PathBuf::from);
    }
    if master.is_none() {
        master = env("REDIS_SENTINEL_MASTER");
    }
    let store = match (redis, cluster, sentinel) {
        (Some(url), None, None) => {
            if ca.is_some() && !url.starts_with("rediss://") {
                return Err(format!(
                    "--redis-ca is for a TLS Redis: the URL {url:?} should be rediss://"
                ));
            }
            StoreChoice::Redis { url, ca }
        }
        _ if ca.is_some() => return Err("--redis-ca needs --redis rediss://...".into()),
        (None, Some(urls), None) => StoreChoice::Cluster { urls },
        (None, None, Some(urls)) => StoreChoice::Sentinel {
            urls,
            master: master.ok_or(
                "--redis-sentinel needs --sentinel-master <name> (or REDIS_SENTINEL_MASTER)",
            )?,
        },
        _ => StoreChoice::Memory,
    };
    Ok(Some(Args {
        dir,
        grpc,
        metrics,
        store,
        store_timeout,
        watch,
        load,
        options,
    }))
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_target(false)
        .with_writer(std::io::stderr)
        .init();
    let args = match parse(std::env::args_os().skip(1), |name| std::env::var(name).ok()) {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(problem) => {
            tracing::error!("{problem}");
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
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
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// The service over `config` on the chosen store.
fn service(args: &Args, config: Config) -> Result<RlsService, Box<dyn std::error::Error>> {
    let options = args.options.clone();
    Ok(match &args.store {
        StoreChoice::Memory => {
            tracing::info!("store: memory");
            RlsService::new(config, MemoryStore::new(), options)?
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
            RlsService::new(config, store, options)?
        }
        StoreChoice::Cluster { urls } => {
            let mut store = RedisClusterStore::from_urls(urls.iter().cloned())?;
            if let Some(t) = args.store_timeout {
                store = store.timeout(t);
            }
            tracing::info!(seeds = urls.len(), "store: redis cluster");
            RlsService::new(config, store, options)?
        }
        StoreChoice::Sentinel { urls, master } => {
            let mut store = RedisSentinelStore::from_urls(urls.iter().cloned(), master)?;
            if let Some(t) = args.store_timeout {
                store = store.timeout(t);
            }
            tracing::info!(sentinels = urls.len(), master, "store: redis sentinel");
            RlsService::new(config, store, options)?
        }
    })
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
    for domain in config.domains() {
        tracing::info!(domain, limits = config.rules(domain).len(), "loaded");
    }
    let service = service(&args, config)?;
    if let Some(addr) = args.metrics {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("--metrics {addr}: {e}"))?;
        tracing::info!(%addr, "serving metrics at /metrics");
        tokio::spawn(tower_redis_ratelimit_server::metrics::serve(
            listener,
            service.metrics(),
        ));
    }
    if let Some(interval) = args.watch {
        let watcher = ConfigWatcher::new(service.clone(), args.dir.clone(), args.load)
            .loaded_from(files)
            .interval(interval);
        tokio::spawn(watcher.run());
    }
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<RateLimitServiceServer<RlsService>>()
        .await;
    tracing::info!(addr = %args.grpc, "serving gRPC");
    tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(RateLimitServiceServer::new(service))
        .serve_with_shutdown(args.grpc, shutdown())
        .await?;
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
}
