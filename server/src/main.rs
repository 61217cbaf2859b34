//! `ratelimit-server`: Envoy's rate limit service
//! (`envoy.service.ratelimit.v3.RateLimitService`) over a directory of
//! envoyproxy/ratelimit configuration files, with gRPC health checking
//! (`grpc.health.v1`), hot reload and Prometheus metrics.
//! `ratelimit-server --help` lists every flag, with its default and its
//! environment variable ([`cli`]); `--validate <dir>` checks a
//! configuration directory and exits.
//!
//! # The store
//!
//! The counters live in one Redis, a Redis Cluster, or the primary that
//! Redis Sentinels monitor; without one, in this process's memory (one
//! instance only). envoyproxy/ratelimit's `REDIS_URL` without a scheme is
//! read as that service reads it, with its `REDIS_TYPE`,
//! `REDIS_SOCKET_TYPE`, `REDIS_AUTH` and `REDIS_TLS`. At the start the
//! store is checked (version, ACL, scripts, clock): one that refuses what
//! the service needs stops the start, one that does not answer is logged
//! and the service starts, and the check is retried until it passes.
//!
//! # When the store fails
//!
//! Each store call is bounded (`--store-timeout`); a call that fails or
//! times out is answered by its domain's `failure_policy`, else
//! `--on-store-error`: by default it fails with `UNAVAILABLE` and Envoy's
//! `failure_mode_deny` decides.
//!
//! # Reloads
//!
//! The configuration directory is read again every `--watch-interval` and
//! a change is applied without a restart; an invalid one is logged and the
//! running configuration stays. A directory with no rule refuses the start
//! (every request would be allowed) unless `--allow-empty-config`.
//!
//! # xDS
//!
//! With `--config-type grpc-xds-sotw` (envoyproxy/ratelimit's
//! `CONFIG_TYPE=GRPC_XDS_SOTW`, as Envoy Gateway runs it) the limits come
//! from an xDS management server (`--xds-server-url`, `--xds-node-id`,
//! TLS with `--xds-tls*`): each snapshot is applied atomically and
//! acknowledged, an invalid one refused with its error and the running
//! limits kept, and a server gone away is reconnected with backoff
//! ([`source::xds`](tower_redis_ratelimit_server::source::xds)). The gRPC
//! port opens once the first snapshot is applied, unless
//! `--xds-start-without-config` (`FORCE_START_WITHOUT_INITIAL_CONFIG=true`)
//! or `--config`, whose files then answer until the first snapshot (they
//! are not watched).
//!
//! # envoyproxy/ratelimit's environment
//!
//! Its variables that change what is admitted or what clients see
//! (`SHADOW_MODE`, `LIMIT_RESPONSE_HEADERS_ENABLED`, `NEAR_LIMIT_RATIO`,
//! `GRPC_HOST`, `RUNTIME_ROOT`, ...) are read as it reads them; those that
//! would change behaviour and have no equivalent here refuse the start,
//! naming the variable; those that only tune Go's internals are logged as
//! ignored. A flag wins over a variable.
//!
//! # Connections
//!
//! The listener ([`net`](tower_redis_ratelimit_server::net)) bounds the
//! connections open at once (by default 10,000, or fewer when the
//! open-file limit leaves fewer: past it they are refused), closes one
//! whose HTTP/2 handshake is not done in time or on which no byte moved
//! for a while, and bounds the calls at once on one and the size of each.
//!
//! # Stopping
//!
//! SIGTERM or Ctrl-C stops it: the health service answers `NOT_SERVING`,
//! no new connection is taken, the calls in flight are answered; after
//! `--shutdown-timeout` the connections still open are closed and it exits
//! anyway.

mod cli;

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use tower_redis_ratelimit::error::StoreError;
use tower_redis_ratelimit::{
    MemoryStore, Quota, Rate, RateLimiter, RedisClusterStore, RedisSentinelStore, RedisStore,
    store::Store,
};
use tower_redis_ratelimit_server::config::Config;
use tower_redis_ratelimit_server::net::Incoming;
use tower_redis_ratelimit_server::pb::RateLimitServiceServer;
use tower_redis_ratelimit_server::reload::ConfigWatcher;
use tower_redis_ratelimit_server::service::RlsService;
use tower_redis_ratelimit_server::source::xds::{XdsClient, XdsTls};

use cli::{Args, Cli, StoreChoice};

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
    let cli = match Cli::parse_argv(std::env::args_os()) {
        Ok(cli) => cli,
        Err(e) => match cli::invalid(&e) {
            Some(problem) => return refused(problem),
            // --help, --version, and clap's own errors, as clap writes them
            None => {
                let _ = e.print();
                return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
            }
        },
    };
    let args = match cli::args(cli, |name| std::env::var(name).ok()) {
        Ok(args) => args,
        Err(problem) => return refused(&problem),
    };
    for note in &args.notes {
        tracing::warn!("{note}");
    }
    if args.validate {
        let valid = validate(&args, &mut std::io::stdout(), &mut std::io::stderr());
        return if valid {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
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

/// A flag or a variable refused (exit code 2).
fn refused(problem: &str) -> ExitCode {
    tracing::error!("{problem}");
    eprintln!("(ratelimit-server --help lists every flag)");
    ExitCode::from(2)
}

/// Why a directory with no rule refuses the start.
fn no_rule(args: &Args, files: usize) -> String {
    format!(
        "no rate limit rule in {} ({files} files read): every request would be \
         allowed; check the directory (--config), or start anyway with \
         --allow-empty-config",
        args.dir.display()
    )
}

/// `--validate`: loads `args.dir` as the service would at the start (its
/// files, with `args.load`; a directory with no rule refused unless
/// `--allow-empty-config`) and builds the service on a [`MemoryStore`] (so
/// what the library rejects of a rule is caught too); writes each warning
/// and the error to `err`, one line per domain with its number of rules to
/// `out`. Whether the service would start with it; no store is touched.
fn validate(args: &Args, out: &mut dyn Write, err: &mut dyn Write) -> bool {
    let checked = (|| -> Result<Vec<(String, usize)>, String> {
        let files = Config::read_dir(&args.dir).map_err(|e| e.to_string())?;
        let config = Config::from_sources(
            files.iter().map(|(n, t)| (n.as_str(), t.as_str())),
            args.load,
        )
        .map_err(|e| e.to_string())?;
        for w in config.warnings() {
            let _ = writeln!(err, "warning: {w}");
        }
        let domains: Vec<(String, usize)> = config
            .domains()
            .map(|d| (d.to_owned(), config.rules(d).len()))
            .collect();
        if domains.iter().all(|(_, n)| *n == 0) {
            if !args.allow_empty_config {
                return Err(no_rule(args, files.len()));
            }
            let _ = writeln!(
                err,
                "warning: no rate limit rule in {} ({} files read, --allow-empty-config): \
                 every request would be allowed",
                args.dir.display(),
                files.len()
            );
        }
        RlsService::new(config, MemoryStore::new(), args.options.clone())
            .map_err(|e| e.to_string())?;
        Ok(domains)
    })();
    match checked {
        Ok(domains) => {
            for (domain, n) in domains {
                let s = if n == 1 { "" } else { "s" };
                let _ = writeln!(out, "{domain}: {n} rule{s}");
            }
            true
        }
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            false
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
    // with xDS, --config's files (if given) answer until the first snapshot
    let read_files = args.xds.as_ref().is_none_or(|x| x.files);
    let files = if read_files {
        Config::read_dir(&args.dir)?
    } else {
        Vec::new()
    };
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
    if rules == 0 && args.xds.is_none() {
        let dir = args.dir.display();
        if !args.allow_empty_config {
            return Err(no_rule(&args, files.len()).into());
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
    if let Some(x) = &args.xds {
        let mut client = XdsClient::new(service.clone(), x.url.clone(), args.load)
            .node_id(x.node_id.clone())
            .node_metadata(x.node_metadata.clone())
            .backoff(x.backoff.0, x.backoff.1)
            .max_message_size(x.max_message_size);
        if let Some(t) = &x.tls {
            let mut tls = XdsTls::new();
            if let Some(ca) = &t.ca {
                tls = tls.ca(ca);
            }
            if let Some((cert, key)) = &t.identity {
                tls = tls.identity(cert, key);
            }
            if let Some(name) = &t.server_name {
                tls = tls.server_name(name);
            }
            client = client.tls(tls);
        }
        let mut state = client.state();
        tracing::info!(url = %x.url, node = %x.node_id, tls = x.tls.is_some(), "limits from xDS");
        tokio::spawn(client.run());
        if x.files || x.start_without_config {
            if rules == 0 {
                tracing::warn!(
                    "serving with no rate limit rule until the first xDS snapshot: every \
                     request is allowed meanwhile"
                );
            }
        } else {
            tracing::info!(
                "waiting for the first xDS snapshot before serving \
                 (--xds-start-without-config to serve at once)"
            );
            tokio::select! {
                got = state.wait_for(|s| s.version.is_some()) => {
                    got.map_err(|_| "the xDS client stopped")?;
                }
                () = shutdown() => return Ok(()),
            }
        }
    } else if let Some(interval) = args.watch {
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

    /// A directory of its own, removed on drop.
    struct TempDir(std::path::PathBuf);

    impl TempDir {
        fn new(tag: &str, files: &[(&str, &str)]) -> TempDir {
            let dir = std::env::temp_dir().join(format!("rls-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("temp dir");
            for (name, text) in files {
                std::fs::write(dir.join(name), text).expect("write");
            }
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// `--validate DIR` and more flags: whether it passed, what it wrote
    /// to standard output and to standard error.
    fn validated(dir: &std::path::Path, flags: &[&str]) -> (bool, String, String) {
        let mut argv = vec!["ratelimit-server".into(), "--validate".into(), dir.into()];
        argv.extend(flags.iter().map(std::ffi::OsString::from));
        let cli = Cli::parse_argv(argv).expect("flags");
        let args = cli::args(cli, |_| None).expect("args");
        assert!(args.validate);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let ok = validate(&args, &mut out, &mut err);
        let text = |b: Vec<u8>| String::from_utf8(b).expect("UTF-8");
        (ok, text(out), text(err))
    }

    #[test]
    fn validate_lists_the_domains_of_a_valid_directory() {
        let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/config");
        let (ok, out, err) = validated(&examples, &[]);
        assert!(ok, "{err}");
        assert!(
            out.starts_with("api: ") && out.ends_with(" rules\n"),
            "{out:?}"
        );
        let dir = TempDir::new(
            "validate-ok",
            &[
                (
                    "a.yaml",
                    "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n---\nignored: 1\n",
                ),
                (
                    "b.yaml",
                    "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n  - key: j\n    rate_limit: {unit: hour, requests_per_unit: 5}\n",
                ),
            ],
        );
        let (ok, out, err) = validated(&dir.0, &[]);
        assert!(ok, "{err}");
        assert_eq!(out, "a: 1 rule\nb: 2 rules\n");
        assert!(
            err.starts_with("warning: ") && err.contains("a.yaml"),
            "{err:?}"
        );
    }

    #[test]
    fn validate_names_the_file_of_an_invalid_directory() {
        let bad = TempDir::new(
            "validate-bad",
            &[
                (
                    "good.yaml",
                    "domain: g\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
                ),
                (
                    "bad.yaml",
                    "domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
                ),
            ],
        );
        let (ok, out, err) = validated(&bad.0, &[]);
        assert!(!ok);
        assert_eq!(out, "");
        assert!(
            err.starts_with("error: ") && err.contains("bad.yaml"),
            "{err}"
        );
        // two files of one domain: merged with --merge-domains only
        let twice = TempDir::new(
            "validate-twice",
            &[
                (
                    "a.yaml",
                    "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
                ),
                (
                    "b.yaml",
                    "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
                ),
            ],
        );
        let (ok, _, err) = validated(&twice.0, &[]);
        assert!(!ok && err.contains("b.yaml"), "{err}");
        let (ok, out, err) = validated(&twice.0, &["--merge-domains"]);
        assert!(ok, "{err}");
        assert_eq!(out, "d: 2 rules\n");
        // no rule
        let empty = TempDir::new("validate-empty", &[]);
        let (ok, _, err) = validated(&empty.0, &[]);
        assert!(!ok && err.contains("no rate limit rule"), "{err}");
        let (ok, out, err) = validated(&empty.0, &["--allow-empty-config"]);
        assert!(
            ok && out.is_empty() && err.contains("no rate limit rule"),
            "{err}"
        );
    }
}
