//! `ratelimit-server`: Envoy's rate limit service
//! (`envoy.service.ratelimit.v3.RateLimitService`) over a directory of
//! envoyproxy/ratelimit configuration files, with gRPC health checking
//! (`grpc.health.v1`), hot reload and Prometheus metrics.
//! `ratelimit-server --help` lists every flag, with its default and its
//! environment variable ([`cli`]); `--validate <dir>` checks a
//! configuration directory and exits ([`validate`]). The service starts and
//! serves in [`run`], on the store that [`startup`] builds and checks.
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
mod run;
mod startup;
mod validate;

use std::process::ExitCode;
use std::time::Duration;

use cli::Cli;

/// Parses the command line and the environment, then checks a directory
/// (`--validate`) or runs the service; the exit code says how it ended
/// (2: a flag or a variable refused).
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
        let valid = validate::validate(&args, &mut std::io::stdout(), &mut std::io::stderr());
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
    let result = runtime.block_on(run::run(args));
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
