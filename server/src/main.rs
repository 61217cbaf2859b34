//! `ratelimit-server`: Envoy's rate limit service
//! (`envoy.service.ratelimit.v3.RateLimitService`) over a directory of
//! envoyproxy/ratelimit configuration files, with gRPC health checking
//! (`grpc.health.v1`).
//!
//! ```text
//! ratelimit-server --config <dir> [--grpc <addr>] [--redis <url>]
//!                  [--store-timeout <ms>] [--merge-domains] [--no-headers]
//! ```
//!
//! `--grpc` defaults to `127.0.0.1:8081`; without `--redis` (or
//! `REDIS_URL`) counters live in memory. `--store-timeout` bounds each
//! Redis call (default: the library's, 100 ms). SIGTERM or Ctrl-C stops it after
//! the calls in flight are answered.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use tower_redis_ratelimit::{MemoryStore, RedisStore};
use tower_redis_ratelimit_server::config::{Config, LoadOptions};
use tower_redis_ratelimit_server::pb::RateLimitServiceServer;
use tower_redis_ratelimit_server::service::{BuildError, RlsService, ServiceOptions};

const USAGE: &str = "usage: ratelimit-server --config <dir> [--grpc <addr>] [--redis <url>] \
                     [--store-timeout <ms>] [--merge-domains] [--no-headers]";

struct Args {
    dir: PathBuf,
    grpc: SocketAddr,
    redis: Option<String>,
    store_timeout: Option<std::time::Duration>,
    load: LoadOptions,
    options: ServiceOptions,
}

fn parse() -> Result<Option<Args>, String> {
    let mut dir: Option<PathBuf> = None;
    let mut grpc = SocketAddr::from(([127, 0, 0, 1], 8081));
    let mut redis = std::env::var("REDIS_URL").ok().filter(|s| !s.is_empty());
    let mut store_timeout = None;
    let mut load = LoadOptions::default();
    let mut options = ServiceOptions::default();
    let mut args = std::env::args_os().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |what: &str| -> Result<String, String> {
            args.next()
                .and_then(|v| v.into_string().ok())
                .ok_or_else(|| format!("{what} needs a value"))
        };
        match arg.to_str() {
            Some("--config") => dir = Some(PathBuf::from(value("--config")?)),
            Some("--grpc") => {
                let v = value("--grpc")?;
                grpc = v
                    .parse()
                    .map_err(|e| format!("--grpc {v:?}: {e} (an address such as 0.0.0.0:8081)"))?;
            }
            Some("--redis") => redis = Some(value("--redis")?),
            Some("--store-timeout") => {
                let v = value("--store-timeout")?;
                match v.parse::<u64>() {
                    Ok(ms) if ms > 0 => {
                        store_timeout = Some(std::time::Duration::from_millis(ms));
                    }
                    _ => {
                        return Err(format!(
                            "--store-timeout {v:?}: a number of milliseconds above 0, such as 100"
                        ));
                    }
                }
            }
            Some("--merge-domains") => load = load.merge_domains(true),
            Some("--no-headers") => options = options.headers(false),
            Some("-h" | "--help") => return Ok(None),
            _ => return Err(format!("unknown argument {arg:?}")),
        }
    }
    let dir = dir.ok_or("--config is required")?;
    Ok(Some(Args {
        dir,
        grpc,
        redis,
        store_timeout,
        load,
        options,
    }))
}

fn main() -> ExitCode {
    tracing_subscriber::fmt().with_target(false).init();
    let args = match parse() {
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

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let config = Config::load_dir(&args.dir, args.load)?;
    for w in config.warnings() {
        tracing::warn!("{w}");
    }
    for domain in config.domains() {
        tracing::info!(domain, limits = config.rules(domain).len(), "loaded");
    }
    let service = match &args.redis {
        Some(url) => {
            let mut store = RedisStore::from_url(url)?;
            if let Some(timeout) = args.store_timeout {
                store = store.timeout(timeout);
            }
            tracing::info!("store: redis");
            RlsService::new(config, store, args.options)
        }
        None => {
            tracing::info!("store: memory");
            RlsService::new(config, MemoryStore::new(), args.options)
        }
    }
    .map_err(|e: BuildError| e.to_string())?;
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
