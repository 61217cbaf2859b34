//! The command line: [`Cli`] declares every flag, in groups by `--help`
//! heading ([`flags`]: its `--help` text is each field's doc comment, with
//! its default and its environment variable; its values are parsed by
//! [`parse`]), and [`args`] resolves it, with the environment, to what the
//! service runs with ([`Args`]), reading envoyproxy/ratelimit's variables
//! as that service reads them ([`go_env`]); the store ([`store`]) and xDS
//! ([`xds`]) are resolved on their own.
//!
//! Clap reads each flag's own variable (`RATELIMIT_*`), except the store's
//! (`REDIS_URL`, `REDIS_CA`, `REDIS_CLUSTER_URLS`, `REDIS_SENTINEL_URLS`,
//! `REDIS_SENTINEL_MASTER`): [`args`] reads those through its `env`, as a
//! store flag on the command line wins over every one of them and
//! `REDIS_URL` also takes envoyproxy/ratelimit's forms.

mod flags;
mod go_env;
mod parse;
mod store;
#[cfg(test)]
mod tests;
mod xds;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{Arg, CommandFactory, FromArgMatches, Parser};
use tower_redis_ratelimit_server::config::{Charge, LoadOptions};
use tower_redis_ratelimit_server::net::ListenerOptions;
use tower_redis_ratelimit_server::service::ServiceOptions;

pub(crate) use parse::invalid;
pub(crate) use store::StoreChoice;
use xds::XdsArgs;

/// What `--help` says after the flags.
const AFTER_HELP: &str = "\
Durations take a unit: 500ms, 10s, 5m, 1h. A flag on the command line wins over its \
variable, and a store flag over every store variable.

envoyproxy/ratelimit's variables are read as that service reads them (SHADOW_MODE, \
QUOTA_MODE, LIMIT_RESPONSE_HEADERS_ENABLED, NEAR_LIMIT_RATIO, MERGE_DOMAIN_CONFIG, \
STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, GRPC_HOST, GRPC_PORT, HOST, PORT, USE_PROMETHEUS, \
PROMETHEUS_ADDR, RUNTIME_ROOT, REDIS_URL without a scheme with REDIS_TYPE, REDIS_AUTH, \
...); one that would change what is admitted and has no equivalent here refuses the \
start, naming it, and one that only tunes Go's internals is logged as ignored.";

/// The store's variables, which [`args`] reads (clap names them in
/// `--help`, and does not read them).
const STORE_VARIABLES: [&str; 5] = [
    "REDIS_URL",
    "REDIS_CA",
    "REDIS_CLUSTER_URLS",
    "REDIS_SENTINEL_URLS",
    "REDIS_SENTINEL_MASTER",
];

/// Envoy's rate limit service (envoy.service.ratelimit.v3) over a
/// directory of envoyproxy/ratelimit configuration files, with gRPC health
/// checking (grpc.health.v1), hot reload and Prometheus metrics.
#[derive(Debug, Parser)]
#[command(
    name = "ratelimit-server",
    version,
    args_override_self = true,
    after_help = AFTER_HELP
)]
pub(crate) struct Cli {
    /// The configuration directory's flags ("Configuration").
    #[command(flatten)]
    pub(crate) configuration: flags::ConfigFlags,

    /// Where the limits come from, and the xDS client's flags ("xDS").
    #[command(flatten)]
    pub(crate) xds: flags::XdsFlags,

    /// The store's flags ("Store (at most one)").
    #[command(flatten)]
    pub(crate) store: flags::StoreFlags,

    /// What the answers hold ("Answers").
    #[command(flatten)]
    pub(crate) answers: flags::AnswerFlags,

    /// The listeners and their bounds ("Serving").
    #[command(flatten)]
    pub(crate) serving: flags::ServingFlags,

    /// Where each value not a default was given (by argument id), for what
    /// depends on it: a default that envoyproxy/ratelimit's variables
    /// replace, a flag and its opposite.
    #[arg(skip)]
    pub(crate) given: BTreeMap<String, Given>,
}

/// Where a value was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Given {
    /// On the command line, at this index (its last occurrence).
    CommandLine(usize),
    /// By its variable.
    Variable,
}

impl Cli {
    /// Parses `argv` (the program's name first); a flag it does not give
    /// is read from its variable, except the store's ([`STORE_VARIABLES`]),
    /// which [`args`] reads.
    pub(crate) fn parse_argv<I, T>(argv: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        let argv: Vec<OsString> = argv.into_iter().map(Into::into).collect();
        // (clap reads a variable when the command is built)
        let parsing = command().mut_args(|a| {
            if a.get_env()
                .is_some_and(|v| STORE_VARIABLES.iter().any(|s| v == *s))
            {
                a.env(None)
            } else {
                a
            }
        });
        let matches = match parsing.try_get_matches_from(&argv) {
            Ok(m) => m,
            // the help of the command that names the store's variables
            Err(e) if e.kind() == ErrorKind::DisplayHelp => {
                return Err(command().try_get_matches_from(argv).err().unwrap_or(e));
            }
            Err(e) => return Err(e),
        };
        let mut cli = Cli::from_arg_matches(&matches)?;
        for id in matches.ids() {
            let given = match matches.value_source(id.as_str()) {
                Some(ValueSource::CommandLine) => {
                    let at = matches.indices_of(id.as_str()).and_then(Iterator::last);
                    Given::CommandLine(at.unwrap_or_default())
                }
                Some(ValueSource::EnvVariable) => Given::Variable,
                _ => continue,
            };
            cli.given.insert(id.to_string(), given);
        }
        Ok(cli)
    }

    /// Whether argument `id` was given, on the command line or by its
    /// variable (not its default).
    fn given(&self, id: &str) -> bool {
        self.given.contains_key(id)
    }

    /// Of a flag and its opposite (`--headers`, `--no-headers`), each
    /// `(id, set)`, which one holds: on the command line the last one
    /// given, which wins over the other's variable; both variables set is
    /// an error.
    fn settle(&self, a: (&str, bool), b: (&str, bool)) -> Result<(bool, bool), String> {
        if !(a.1 && b.1) {
            return Ok((a.1, b.1));
        }
        match (self.given.get(a.0), self.given.get(b.0)) {
            (Some(Given::CommandLine(i)), Some(Given::CommandLine(j))) => Ok((i > j, j > i)),
            (Some(Given::CommandLine(_)), _) => Ok((true, false)),
            (_, Some(Given::CommandLine(_))) => Ok((false, true)),
            _ => Err(format!(
                "{} and {} are both set: set one",
                variable(a.0),
                variable(b.0)
            )),
        }
    }
}

/// The command of [`Cli`]: its variables' values unshown (a URL may hold
/// a password), and a negative number taken as a value (refused by the
/// flag, by name).
pub(crate) fn command() -> clap::Command {
    Cli::command().mut_args(|a| {
        let values = a.get_action().takes_values();
        a.hide_env_values(true).allow_negative_numbers(values)
    })
}

/// The variable of argument `id`.
fn variable(id: &str) -> String {
    Cli::command()
        .get_arguments()
        .find(|a| a.get_id() == id)
        .and_then(Arg::get_env)
        .map(|v| v.to_string_lossy().into_owned())
        .unwrap_or_else(|| id.to_owned())
}

/// What the service runs with: the command line and the environment,
/// resolved by [`args`].
#[derive(Debug)]
pub(crate) struct Args {
    /// The configuration directory (`--config`, or `--validate`'s).
    pub(crate) dir: PathBuf,
    /// `--validate`: check `dir` and exit.
    pub(crate) validate: bool,
    /// The gRPC listener's address.
    pub(crate) grpc: SocketAddr,
    /// The metrics endpoint's address, if it is served.
    pub(crate) metrics: Option<SocketAddr>,
    /// The `/healthcheck` endpoint's address, if it is served.
    pub(crate) http: Option<SocketAddr>,
    /// Where the counters live.
    pub(crate) store: StoreChoice,
    /// The bound on each store call (else the library's).
    pub(crate) store_timeout: Option<Duration>,
    /// Whether the store is checked at the start.
    pub(crate) store_check: bool,
    /// `--quota-config`: the quota service's files, when it is served.
    pub(crate) quota: Option<PathBuf>,
    /// How often the directory is read again (`None`: once).
    pub(crate) watch: Option<Duration>,
    /// How the configuration files are loaded.
    pub(crate) load: LoadOptions,
    /// What the service answers, and how.
    pub(crate) options: ServiceOptions,
    /// Whether a configuration with no rule starts.
    pub(crate) allow_empty_config: bool,
    /// `--max-connections`, when given (else derived from the open-file
    /// limit: `connection_cap`).
    pub(crate) max_connections: Option<usize>,
    /// The gRPC listener's bounds on a connection.
    pub(crate) listener: ListenerOptions,
    /// The most calls at once on one connection.
    pub(crate) max_concurrent_streams: u32,
    /// The largest request message, in bytes.
    pub(crate) max_message_size: usize,
    /// How long the calls in flight are waited for on SIGTERM.
    pub(crate) shutdown_timeout: Duration,
    /// What to log once logging is up: envoyproxy/ratelimit variables read,
    /// or set and ignored.
    pub(crate) notes: Vec<String>,
    /// `--config-type grpc-xds-sotw`: the xDS client's settings (`dir` is
    /// then `--config`'s, if `xds.files`).
    pub(crate) xds: Option<XdsArgs>,
}

/// Whether listeners on `a` and `b` would take one socket: one port, on
/// one address or on every address.
pub(crate) fn clashes(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// What the service runs with: the command line `cli` and the environment
/// `env` (the process's, or a test's): envoyproxy/ratelimit's variables
/// and the store's ([`STORE_VARIABLES`]); a flag wins over a variable.
pub(crate) fn args(cli: Cli, env: impl Fn(&str) -> Option<String>) -> Result<Args, String> {
    let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let (answers, serving) = (&cli.answers, &cli.serving);
    let mut notes = Vec::new();
    let (headers, _) = cli.settle(
        ("headers", answers.headers),
        ("no_headers", answers.no_headers),
    )?;
    let (_, no_watch) = cli.settle(
        ("watch_interval", cli.given("watch_interval")),
        ("no_watch", cli.configuration.no_watch),
    )?;
    let watch = (!no_watch).then_some(cli.configuration.watch_interval);
    let mut options = ServiceOptions::default()
        .on_store_error(cli.store.on_store_error)
        .max_metric_keys(serving.max_metric_keys)
        .max_descriptors(answers.max_descriptors)
        .max_entries(answers.max_entries)
        .charge(answers.charge);
    if headers {
        options = options.headers(true);
    }
    // (`--validate` without a directory checks --config's)
    let dir = cli
        .configuration
        .validate
        .clone()
        .flatten()
        .or_else(|| cli.configuration.config.clone());

    // envoyproxy/ratelimit's settings: what has no equivalent, then the
    // rest, each under its flag
    go_env::go_refusals(&env)?;
    let go = |name: &str| go_env::switch(&env, name);
    notes.extend(go_env::ignored(&env));
    let xds = xds::resolve(&cli, &env)?;
    let shadow = answers.shadow_mode || go("SHADOW_MODE")? == Some(true);
    options = options.shadow_mode(shadow);
    let quota = answers.quota_mode || go("QUOTA_MODE")? == Some(true);
    options = options.quota_mode(quota);
    if let Some(names) = go_env::headers(&env)? {
        options = options.go_headers(Some(names));
    }
    if let Some(ratio) = go_env::near_limit_ratio(&env)? {
        options = options.near_limit_ratio(ratio);
    }
    let merge = cli.configuration.merge_domains || go("MERGE_DOMAIN_CONFIG")? == Some(true);
    if go("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")? == Some(true) {
        if !cli.given("charge") {
            options = options.charge(Charge::Admitted);
        }
        notes.push(
            "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true: --charge admitted (a denied request \
             is never counted, and a usage report past a limit is lost)"
                .into(),
        );
    }
    let grpc = if cli.given("grpc") {
        serving.grpc
    } else {
        go_env::grpc(&env)?.unwrap_or(serving.grpc)
    };
    let metrics = match serving.metrics {
        Some(addr) => Some(addr),
        None => go_env::prometheus(&env)?,
    };
    let http = match serving.http {
        Some(addr) if clashes(addr, grpc) => {
            return Err(format!(
                "--http {addr}: the port of --grpc {grpc}; give /healthcheck a port of its own"
            ));
        }
        Some(addr) => Some(addr),
        None => go_env::http(&env, grpc, &mut notes),
    };
    let dir = match dir {
        Some(d) => d,
        // (envoyproxy/ratelimit reads no directory with xDS: its RUNTIME_*
        // variables, which Envoy Gateway sets all the same, are not read)
        None if xds.is_some() => PathBuf::new(),
        // the quota service alone
        None if cli.configuration.quota_config.is_some() && env("RUNTIME_ROOT").is_none() => {
            PathBuf::new()
        }
        None => go_env::runtime_dir(&env)?,
    };
    let store = store::resolve(&cli.store, &env)?;
    Ok(Args {
        dir,
        validate: cli.configuration.validate.is_some(),
        grpc,
        metrics,
        http,
        store,
        store_timeout: cli.store.store_timeout,
        store_check: !cli.store.no_store_check,
        quota: cli.configuration.quota_config.clone(),
        watch,
        load: LoadOptions::default().merge_domains(merge),
        options,
        allow_empty_config: cli.configuration.allow_empty_config,
        max_connections: serving.max_connections,
        listener: ListenerOptions::default()
            .handshake_timeout(serving.handshake_timeout)
            .idle_timeout(serving.idle_timeout),
        max_concurrent_streams: serving.max_concurrent_streams,
        max_message_size: serving.max_message_size,
        shutdown_timeout: serving.shutdown_timeout,
        notes,
        xds,
    })
}
