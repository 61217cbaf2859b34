//! Serving (a module of the binary): [`run`] loads the configuration,
//! builds the service on its store ([`startup`](crate::startup)), serves the
//! HTTP endpoints (`/metrics`, `/healthcheck`), takes the limits from xDS or watches the directory,
//! and serves gRPC (the rate limit service and grpc.health.v1) on a
//! listener bounded by [`connection_cap`], until [`shutdown`]; then it
//! drains, within `--shutdown-timeout`.

use std::net::SocketAddr;

use tower_redis_ratelimit_server::config::Config;
use tower_redis_ratelimit_server::metrics::{Health, Routes, ServeOptions, serve_routes};
use tower_redis_ratelimit_server::net::Incoming;
use tower_redis_ratelimit_server::pb::{RateLimitQuotaServiceServer, RateLimitServiceServer};
use tower_redis_ratelimit_server::reload::ConfigWatcher;
use tower_redis_ratelimit_server::rlqs::{self, RlqsService};
use tower_redis_ratelimit_server::serve::GrpcOptions;
use tower_redis_ratelimit_server::service::RlsService;
use tower_redis_ratelimit_server::source::xds::{XdsClient, XdsTls};

use crate::cli::{Args, clashes};
use crate::startup::{check_store, service};
use crate::validate::no_rule;

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

/// Runs the service that `args` describe: loads its configuration (a
/// directory with no rule refused unless `--allow-empty-config`), checks
/// its store, and serves until [`shutdown`], the calls in flight answered
/// within `--shutdown-timeout`.
pub(crate) async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    // with xDS, --config's files (if given) answer until the first snapshot
    // the quota service alone reads no rate limit directory
    let quota_alone = args.quota.is_some() && args.dir.as_os_str().is_empty();
    let read_files = args.xds.as_ref().is_none_or(|x| x.files) && !quota_alone;
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
    let quota_files = match &args.quota {
        Some(path) => Some(rlqs::read(path)?),
        None => None,
    };
    let quota_configs = match &quota_files {
        Some(files) => {
            let configs = rlqs::parse(files)?;
            for c in &configs {
                tracing::info!(domain = %c.domain, rules = c.rules.len(), "quota domain loaded");
                for w in c.warnings() {
                    tracing::warn!("{w}");
                }
            }
            Some(configs)
        }
        None => None,
    };
    if rules == 0 && args.xds.is_none() && args.quota.is_none() {
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
    let services = service(&args, config, quota_configs)?;
    if args.store_check {
        check_store(services.probes).await?;
    }
    let service = services.rls;
    let quota = services.quota;
    if let Some(q) = &quota {
        let m = q.metrics();
        service
            .metrics()
            .also_render(std::sync::Arc::new(move |out: &mut String| m.render(out)));
    }
    // SIGTERM stops the HTTP endpoints too (their own grace bounds them);
    // /healthcheck answers 500 until gRPC serves, and again once it drains
    let (stop_metrics, _) = tokio::sync::watch::channel(false);
    let health = Health::new();
    let mut endpoints: Vec<(SocketAddr, &str, Routes)> = Vec::new();
    if let Some(addr) = args.metrics {
        endpoints.push((addr, "--metrics", Routes::new().metrics(service.metrics())));
    }
    if let Some(addr) = args.http {
        match endpoints.iter_mut().find(|(a, _, _)| clashes(*a, addr)) {
            Some((_, _, routes)) => *routes = routes.clone().health(health.clone()),
            None => endpoints.push((addr, "--http", Routes::new().health(health.clone()))),
        }
    }
    for (addr, flag, routes) in endpoints {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("{flag} {addr}: {e}"))?;
        tracing::info!(%addr, paths = %routes.paths(), "serving HTTP");
        let mut stop = stop_metrics.subscribe();
        tokio::spawn(serve_routes(
            listener,
            routes,
            ServeOptions::default(),
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
    if let (Some(q), Some(path), Some(files), Some(interval)) =
        (&quota, &args.quota, quota_files, args.watch)
    {
        tokio::spawn(rlqs::watch(q.clone(), path.clone(), interval, files));
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
    if quota.is_some() {
        health_reporter
            .set_serving::<RateLimitQuotaServiceServer<RlqsService>>()
            .await;
    }
    // at SIGTERM the quota streams end, so that their Envoys reconnect to
    // another instance (keeping their assignments meanwhile)
    let (stop_streams, streams_stop) = tokio::sync::watch::channel(false);
    health.set_serving(true);
    let http_health = health.clone();
    let (stopping, stopped) = tokio::sync::oneshot::channel::<()>();
    let signal = async move {
        shutdown().await;
        // before draining: a health check on a connection still open sees it
        http_health.set_serving(false);
        health_reporter
            .set_not_serving::<RateLimitServiceServer<RlsService>>()
            .await;
        health_reporter
            .set_not_serving::<RateLimitQuotaServiceServer<RlqsService>>()
            .await;
        let _ = stop_streams.send(true);
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
    let quota_server = quota.map(|q| {
        RateLimitQuotaServiceServer::new(RlqsService::new(q).stop_on(streams_stop))
            .max_decoding_message_size(args.max_message_size)
    });
    let mut routes = tonic::service::Routes::builder();
    routes.add_service(health_service).add_service(
        RateLimitServiceServer::new(service).max_decoding_message_size(args.max_message_size),
    );
    if let Some(q) = quota_server {
        routes.add_service(q);
    }
    let serve = tower_redis_ratelimit_server::serve::serve(
        incoming,
        routes.routes(),
        GrpcOptions::default().max_concurrent_streams(args.max_concurrent_streams),
        signal,
    );
    let deadline = async {
        if stopped.await.is_ok() {
            tokio::time::sleep(args.shutdown_timeout).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        () = serve => {}
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
}
