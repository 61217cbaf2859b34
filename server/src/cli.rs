//! The command line: [`Cli`] declares every flag (its `--help` text is the
//! field's doc comment, with its default and its environment variable),
//! and [`args`] resolves it, with the environment, to what the service
//! runs with ([`Args`]), reading envoyproxy/ratelimit's variables as that
//! service reads them.
//!
//! Clap reads each flag's own variable (`RATELIMIT_*`), except the store's
//! (`REDIS_URL`, `REDIS_CA`, `REDIS_CLUSTER_URLS`, `REDIS_SENTINEL_URLS`,
//! `REDIS_SENTINEL_MASTER`): [`args`] reads those through its `env`, as a
//! store flag on the command line wins over every one of them and
//! `REDIS_URL` also takes envoyproxy/ratelimit's forms.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{BoolishValueParser, PossibleValue, TypedValueParser};
use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{Arg, CommandFactory, FromArgMatches, Parser};
use tower_redis_ratelimit_server::config::{Charge, LoadOptions, OnStoreError};
use tower_redis_ratelimit_server::net::ListenerOptions;
use tower_redis_ratelimit_server::service::{GoHeaders, NearLimitRatio, ServiceOptions};

/// What `--help` says after the flags.
const AFTER_HELP: &str = "\
Durations take a unit: 500ms, 10s, 5m, 1h. A flag on the command line wins over its \
variable, and a store flag over every store variable.

envoyproxy/ratelimit's variables are read as that service reads them (SHADOW_MODE, \
QUOTA_MODE, LIMIT_RESPONSE_HEADERS_ENABLED, NEAR_LIMIT_RATIO, MERGE_DOMAIN_CONFIG, \
STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, GRPC_HOST, GRPC_PORT, USE_PROMETHEUS, \
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

/// The names `--on-store-error` takes.
const ON_STORE_ERROR: [&str; 3] = ["allow", "deny", "unavailable"];

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
    /// The directory of the configuration files (its .yaml and .yml files,
    /// subdirectories included). Without it, envoyproxy/ratelimit's
    /// RUNTIME_ROOT, RUNTIME_SUBDIRECTORY and RUNTIME_APPDIRECTORY. With
    /// --config-type grpc-xds-sotw, the limits until the first snapshot.
    #[arg(
        long,
        value_name = "DIR",
        env = "RATELIMIT_CONFIG",
        help_heading = "Configuration"
    )]
    pub(crate) config: Option<PathBuf>,

    /// Checks the configuration directory DIR as the service would load it
    /// (with the flags that change how: --merge-domains,
    /// --allow-empty-config, --shadow-mode, ...), prints its warnings and
    /// each domain's number of rules, and exits: 0 if it would start, 1 if
    /// not. It touches no store and opens no port.
    #[arg(
        long,
        value_name = "DIR",
        env = "RATELIMIT_VALIDATE",
        help_heading = "Configuration"
    )]
    pub(crate) validate: Option<PathBuf>,

    /// How often the configuration directory is read again, in
    /// milliseconds: a change is applied without a restart; an invalid one
    /// is logged and the running configuration stays.
    #[arg(
        long,
        value_name = "MS",
        default_value = "250",
        value_parser = checked(millis),
        env = "RATELIMIT_WATCH_INTERVAL",
        help_heading = "Configuration"
    )]
    pub(crate) watch_interval: Duration,

    /// Loads the configuration directory once, at the start.
    #[arg(
        long,
        value_parser = BoolishValueParser::new(),
        env = "RATELIMIT_NO_WATCH",
        help_heading = "Configuration"
    )]
    pub(crate) no_watch: bool,

    /// Files with the same domain add to it instead of being rejected (a
    /// key/value defined twice under one parent is still an error);
    /// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG too.
    #[arg(
        long,
        value_parser = BoolishValueParser::new(),
        env = "RATELIMIT_MERGE_DOMAINS",
        help_heading = "Configuration"
    )]
    pub(crate) merge_domains: bool,

    /// Starts, with a warning, when the directory holds no rule (every
    /// request is allowed), where the start is refused otherwise.
    #[arg(
        long,
        value_parser = BoolishValueParser::new(),
        env = "RATELIMIT_ALLOW_EMPTY_CONFIG",
        help_heading = "Configuration"
    )]
    pub(crate) allow_empty_config: bool,

    /// Where the limits come from: files (the directory --config) or
    /// grpc-xds-sotw (an xDS management server, --xds-server-url, as
    /// Envoy Gateway runs envoyproxy/ratelimit); envoyproxy/ratelimit's
    /// CONFIG_TYPE too (FILE, GRPC_XDS_SOTW).
    #[arg(
        long,
        value_name = "TYPE",
        default_value = "files",
        value_parser = Checked { parse: config_type, names: &CONFIG_TYPES },
        env = "RATELIMIT_CONFIG_TYPE",
        help_heading = "xDS"
    )]
    pub(crate) config_type: ConfigType,

    /// The xDS management server: host:port, http://host:port or
    /// https://host:port; envoyproxy/ratelimit's CONFIG_GRPC_XDS_SERVER_URL
    /// too.
    #[arg(
        long,
        value_name = "URL",
        default_value = "localhost:18000",
        env = "RATELIMIT_XDS_SERVER_URL",
        help_heading = "xDS"
    )]
    pub(crate) xds_server_url: String,

    /// The node id given to the management server, which picks the
    /// snapshot by it; envoyproxy/ratelimit's CONFIG_GRPC_XDS_NODE_ID too.
    #[arg(
        long,
        value_name = "ID",
        default_value = "default",
        env = "RATELIMIT_XDS_NODE_ID",
        help_heading = "xDS"
    )]
    pub(crate) xds_node_id: String,

    /// The node's metadata, key=value,key=value;
    /// envoyproxy/ratelimit's CONFIG_GRPC_XDS_NODE_METADATA too.
    #[arg(
        long,
        value_name = "KEY=VALUE,...",
        value_parser = checked(node_metadata),
        env = "RATELIMIT_XDS_NODE_METADATA",
        help_heading = "xDS"
    )]
    pub(crate) xds_node_metadata: Option<Metadata>,

    /// Connects to the management server with TLS (verified against the
    /// system's roots, or --xds-tls-ca); envoyproxy/ratelimit's
    /// CONFIG_GRPC_XDS_SERVER_USE_TLS too.
    #[arg(
        long,
        value_parser = BoolishValueParser::new(),
        env = "RATELIMIT_XDS_TLS",
        help_heading = "xDS"
    )]
    pub(crate) xds_tls: bool,

    /// The PEM CA certificates the management server is verified against;
    /// envoyproxy/ratelimit's CONFIG_GRPC_XDS_SERVER_TLS_CACERT too.
    #[arg(
        long,
        value_name = "PEM_FILE",
        env = "RATELIMIT_XDS_TLS_CA",
        help_heading = "xDS"
    )]
    pub(crate) xds_tls_ca: Option<PathBuf>,

    /// The client certificate (PEM) presented to the management server,
    /// with --xds-tls-key; envoyproxy/ratelimit's
    /// CONFIG_GRPC_XDS_CLIENT_TLS_CERT too.
    #[arg(
        long,
        value_name = "PEM_FILE",
        env = "RATELIMIT_XDS_TLS_CERT",
        help_heading = "xDS"
    )]
    pub(crate) xds_tls_cert: Option<PathBuf>,

    /// The key (PEM) of --xds-tls-cert; envoyproxy/ratelimit's
    /// CONFIG_GRPC_XDS_CLIENT_TLS_KEY too.
    #[arg(
        long,
        value_name = "PEM_FILE",
        env = "RATELIMIT_XDS_TLS_KEY",
        help_heading = "xDS"
    )]
    pub(crate) xds_tls_key: Option<PathBuf>,

    /// The name the management server's certificate is verified for,
    /// instead of the URL's host; envoyproxy/ratelimit's
    /// CONFIG_GRPC_XDS_SERVER_TLS_SAN too.
    #[arg(
        long,
        value_name = "NAME",
        env = "RATELIMIT_XDS_TLS_SERVER_NAME",
        help_heading = "xDS"
    )]
    pub(crate) xds_tls_server_name: Option<String>,

    /// The first wait before connecting again to a management server gone
    /// away; it doubles at each failure, up to --xds-backoff-max, each
    /// wait with jitter; envoyproxy/ratelimit's
    /// XDS_CLIENT_BACKOFF_INITIAL_INTERVAL too.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "1s",
        value_parser = checked(duration),
        env = "RATELIMIT_XDS_BACKOFF_INITIAL",
        help_heading = "xDS"
    )]
    pub(crate) xds_backoff_initial: Duration,

    /// The longest wait before connecting again; envoyproxy/ratelimit's
    /// XDS_CLIENT_BACKOFF_MAX_INTERVAL too.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "60s",
        value_parser = checked(duration),
        env = "RATELIMIT_XDS_BACKOFF_MAX",
        help_heading = "xDS"
    )]
    pub(crate) xds_backoff_max: Duration,

    /// The largest response taken from the management server, in bytes
    /// (a larger one fails the stream, and the limits stay);
    /// envoyproxy/ratelimit's XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES too.
    #[arg(
        long,
        value_name = "BYTES",
        default_value = "16777216",
        value_parser = checked(|flag, v| count(flag, v, 1024, "16777216")),
        env = "RATELIMIT_XDS_MAX_MESSAGE_SIZE",
        help_heading = "xDS"
    )]
    pub(crate) xds_max_message_size: usize,

    /// Serves at once, with no limit (or --config's files) until the first
    /// snapshot, where the gRPC port otherwise opens once the first
    /// snapshot is applied; envoyproxy/ratelimit's
    /// FORCE_START_WITHOUT_INITIAL_CONFIG too.
    #[arg(
        long,
        value_parser = BoolishValueParser::new(),
        env = "RATELIMIT_XDS_START_WITHOUT_CONFIG",
        help_heading = "xDS"
    )]
    pub(crate) xds_start_without_config: bool,

    /// One Redis: redis://host:6379/, rediss:// for TLS (verified against
    /// the system's roots, or --redis-ca), or a Unix socket's
    /// unix:///path/to/redis.sock. REDIS_URL also takes
    /// envoyproxy/ratelimit's form without a scheme, read with its
    /// REDIS_TYPE, REDIS_SOCKET_TYPE, REDIS_AUTH and REDIS_TLS. Without a
    /// store, counters live in this process's memory.
    #[arg(
        long,
        value_name = "URL",
        value_parser = checked(store_url),
        env = "REDIS_URL",
        help_heading = "Store (at most one)"
    )]
    pub(crate) redis: Option<String>,

    /// The PEM root certificate that a rediss:// Redis is verified against,
    /// instead of the system's roots.
    #[arg(
        long,
        value_name = "PEM_FILE",
        env = "REDIS_CA",
        help_heading = "Store (at most one)"
    )]
    pub(crate) redis_ca: Option<PathBuf>,

    /// A Redis Cluster, through its seed nodes: their URLs, comma-separated.
    #[arg(
        long,
        value_name = "URL,URL,...",
        value_parser = checked(|flag, v| store_urls(flag, v).map(Urls)),
        env = "REDIS_CLUSTER_URLS",
        help_heading = "Store (at most one)"
    )]
    pub(crate) redis_cluster: Option<Urls>,

    /// The primary that these Redis Sentinels monitor under
    /// --sentinel-master: their URLs, comma-separated.
    #[arg(
        long,
        value_name = "URL,URL,...",
        value_parser = checked(|flag, v| store_urls(flag, v).map(Urls)),
        env = "REDIS_SENTINEL_URLS",
        help_heading = "Store (at most one)"
    )]
    pub(crate) redis_sentinel: Option<Urls>,

    /// The name the sentinels of --redis-sentinel monitor the primary
    /// under.
    #[arg(
        long,
        value_name = "NAME",
        value_parser = checked(sentinel_master),
        env = "REDIS_SENTINEL_MASTER",
        help_heading = "Store (at most one)"
    )]
    pub(crate) sentinel_master: Option<String>,

    /// Bounds each store call, in milliseconds (by default the library's
    /// bound: 100). A call that fails or times out is answered by its
    /// domain's failure_policy, else --on-store-error.
    #[arg(
        long,
        value_name = "MS",
        value_parser = checked(millis),
        env = "RATELIMIT_STORE_TIMEOUT",
        help_heading = "Store (at most one)"
    )]
    pub(crate) store_timeout: Option<Duration>,

    /// How a call the store could not decide is answered, in the domains
    /// without a failure_policy: unavailable fails it with UNAVAILABLE
    /// (Envoy's failure_mode_deny decides), allow answers OK and deny
    /// OVER_LIMIT for what could not be decided.
    #[arg(
        long,
        value_name = "POLICY",
        default_value = "unavailable",
        value_parser = Checked { parse: on_store_error, names: &ON_STORE_ERROR },
        env = "RATELIMIT_ON_STORE_ERROR",
        help_heading = "Store (at most one)"
    )]
    pub(crate) on_store_error: OnStoreError,

    /// Skips the check of the store at the start (its version, ACL,
    /// scripts and clock), which stops the start when the store refuses
    /// what the service needs.
    #[arg(
        long,
        value_parser = BoolishValueParser::new(),
        env = "RATELIMIT_NO_STORE_CHECK",
        help_heading = "Store (at most one)"
    )]
    pub(crate) no_store_check: bool,

    /// Adds the IETF RateLimit and RateLimit-Policy headers to the answers.
    #[arg(
        long,
        value_parser = BoolishValueParser::new(),
        env = "RATELIMIT_HEADERS",
        help_heading = "Answers"
    )]
    pub(crate) headers: bool,

    /// No RateLimit headers (the default: undoes a --headers before it).
    #[arg(
        long,
        value_parser = BoolishValueParser::new(),
        env = "RATELIMIT_NO_HEADERS",
        help_heading = "Answers"
    )]
    pub(crate) no_headers: bool,

    /// Never denies: every limit is decided and counted, and the answer is
    /// OK; envoyproxy/ratelimit's SHADOW_MODE too.
    #[arg(
        long,
        value_parser = BoolishValueParser::new(),
        env = "RATELIMIT_SHADOW_MODE",
        help_heading = "Answers"
    )]
    pub(crate) shadow_mode: bool,

    /// Puts every rule in quota mode; envoyproxy/ratelimit's QUOTA_MODE too.
    #[arg(
        long,
        value_parser = BoolishValueParser::new(),
        env = "RATELIMIT_QUOTA_MODE",
        help_heading = "Answers"
    )]
    pub(crate) quota_mode: bool,

    /// When a call's hits are charged, for the rules whose rate_limit does
    /// not say (charge): always records every call's, denied or not, as
    /// envoyproxy/ratelimit counts (a usage report is never lost); over a
    /// denied call's only where it is over a limit; admitted only admitted
    /// calls' (envoyproxy/ratelimit's
    /// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true).
    #[arg(
        long,
        value_name = "WHEN",
        default_value = "always",
        value_parser = Checked { parse: charge, names: &Charge::NAMES },
        env = "RATELIMIT_CHARGE",
        help_heading = "Answers"
    )]
    pub(crate) charge: Charge,

    /// The most descriptors in one request (at most what one store call
    /// decides).
    #[arg(
        long,
        value_name = "N",
        default_value = "64",
        value_parser = checked(max_descriptors),
        env = "RATELIMIT_MAX_DESCRIPTORS",
        help_heading = "Answers"
    )]
    pub(crate) max_descriptors: usize,

    /// The most entries in one descriptor.
    #[arg(
        long,
        value_name = "N",
        default_value = "32",
        value_parser = checked(|flag, v| count(flag, v, 1, "32")),
        env = "RATELIMIT_MAX_ENTRIES",
        help_heading = "Answers"
    )]
    pub(crate) max_entries: usize,

    /// The address of the gRPC listener (the rate limit service and
    /// grpc.health.v1). Without it, envoyproxy/ratelimit's GRPC_HOST and
    /// GRPC_PORT.
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:8081",
        value_parser = checked(addr),
        env = "RATELIMIT_GRPC",
        help_heading = "Serving"
    )]
    pub(crate) grpc: SocketAddr,

    /// Serves GET /metrics (Prometheus text format) on this address; off
    /// without it (or envoyproxy/ratelimit's USE_PROMETHEUS=true and
    /// PROMETHEUS_ADDR).
    #[arg(
        long,
        value_name = "ADDR",
        value_parser = checked(addr),
        env = "RATELIMIT_METRICS",
        help_heading = "Serving"
    )]
    pub(crate) metrics: Option<SocketAddr>,

    /// The most metric series whose key holds a request's values
    /// (detailed_metric, value_to_metric); 0: none.
    #[arg(
        long,
        value_name = "N",
        default_value = "10000",
        value_parser = checked(metric_keys),
        env = "RATELIMIT_MAX_METRIC_KEYS",
        help_heading = "Serving"
    )]
    pub(crate) max_metric_keys: usize,

    /// The most connections open at once, past which new ones are refused
    /// (by default 10000, or fewer when the open-file limit leaves fewer).
    #[arg(
        long,
        value_name = "N",
        value_parser = checked(|flag, v| count(flag, v, 1, "10000")),
        env = "RATELIMIT_MAX_CONNECTIONS",
        help_heading = "Serving"
    )]
    pub(crate) max_connections: Option<usize>,

    /// The most calls at once on one connection.
    #[arg(
        long,
        value_name = "N",
        default_value = "1024",
        value_parser = checked(max_concurrent_streams),
        env = "RATELIMIT_MAX_CONCURRENT_STREAMS",
        help_heading = "Serving"
    )]
    pub(crate) max_concurrent_streams: u32,

    /// The largest request message, in bytes.
    #[arg(
        long,
        value_name = "BYTES",
        default_value = "1048576",
        value_parser = checked(|flag, v| count(flag, v, 1, "1048576")),
        env = "RATELIMIT_MAX_MESSAGE_SIZE",
        help_heading = "Serving"
    )]
    pub(crate) max_message_size: usize,

    /// Closes a connection whose HTTP/2 handshake is not done within this
    /// duration.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10s",
        value_parser = checked(duration),
        env = "RATELIMIT_HANDSHAKE_TIMEOUT",
        help_heading = "Serving"
    )]
    pub(crate) handshake_timeout: Duration,

    /// Closes a connection on which no byte moved for this duration.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "300s",
        value_parser = checked(duration),
        env = "RATELIMIT_IDLE_TIMEOUT",
        help_heading = "Serving"
    )]
    pub(crate) idle_timeout: Duration,

    /// On SIGTERM or Ctrl-C the health service answers NOT_SERVING, no new
    /// connection is taken and the calls in flight are answered; past this
    /// duration the connections still open are closed and it exits anyway.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10s",
        value_parser = checked(duration),
        env = "RATELIMIT_SHUTDOWN_TIMEOUT",
        help_heading = "Serving"
    )]
    pub(crate) shutdown_timeout: Duration,

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

/// The URLs of `--redis-cluster` or `--redis-sentinel`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Urls(pub(crate) Vec<String>);

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

/// A value that a flag's parser rejects: the message names the flag and
/// says what it takes.
#[derive(Debug)]
pub(crate) struct Invalid(String);

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Invalid {}

/// The message of a value that a flag's parser rejected, when `e` is one
/// (clap's other errors, --help and --version are printed as clap writes
/// them).
pub(crate) fn invalid(e: &clap::Error) -> Option<&str> {
    let source = std::error::Error::source(e)?;
    source.downcast_ref::<Invalid>().map(|i| i.0.as_str())
}

/// A flag's value parser: `parse(flag, value)`, its error naming the flag
/// (`--max-entries "0": ...`); `names` are the values it takes, for
/// `--help`.
#[derive(Clone)]
struct Checked<T> {
    parse: fn(&str, &str) -> Result<T, String>,
    names: &'static [&'static str],
}

/// A [`Checked`] of any value.
fn checked<T>(parse: fn(&str, &str) -> Result<T, String>) -> Checked<T> {
    Checked { parse, names: &[] }
}

impl<T: Clone + Send + Sync + 'static> TypedValueParser for Checked<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&Arg>,
        value: &OsStr,
    ) -> Result<T, clap::Error> {
        let flag = arg
            .and_then(Arg::get_long)
            .map(|l| format!("--{l}"))
            .unwrap_or_default();
        let parse = self.parse;
        // (clap's parser of a function: its error holds ours as its source)
        (move |v: &str| parse(&flag, v).map_err(Invalid)).parse_ref(cmd, arg, value)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        if self.names.is_empty() {
            return None;
        }
        Some(Box::new(self.names.iter().map(PossibleValue::new)))
    }
}

/// The names `--config-type` takes.
const CONFIG_TYPES: [&str; 2] = ["files", "grpc-xds-sotw"];

/// Where the limits come from (`--config-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConfigType {
    /// A directory of files.
    Files,
    /// An xDS management server, state of the world over ADS.
    GrpcXdsSotw,
}

fn config_type(flag: &str, v: &str) -> Result<ConfigType, String> {
    match v.trim() {
        "files" => Ok(ConfigType::Files),
        "grpc-xds-sotw" => Ok(ConfigType::GrpcXdsSotw),
        _ => Err(format!("{flag} {v:?}: files or grpc-xds-sotw")),
    }
}

/// `--xds-node-metadata`'s pairs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Metadata(pub(crate) Vec<(String, String)>);

/// `key=value,key=value` (an entry without `=` is skipped, as
/// envoyproxy/ratelimit skips it).
fn node_metadata(flag: &str, v: &str) -> Result<Metadata, String> {
    v.split(',')
        .filter(|e| !e.trim().is_empty())
        .map(|e| match e.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.trim().to_owned())),
            _ => Err(format!(
                "{flag} {v:?}: KEY=VALUE pairs, comma-separated; {e:?} is not one"
            )),
        })
        .collect::<Result<_, _>>()
        .map(Metadata)
}

/// The xDS client's settings (`--config-type grpc-xds-sotw`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct XdsArgs {
    pub(crate) url: String,
    pub(crate) node_id: String,
    pub(crate) node_metadata: Vec<(String, String)>,
    /// TLS: the CA, the client certificate and key, the server's name.
    pub(crate) tls: Option<XdsTlsArgs>,
    pub(crate) backoff: (Duration, Duration),
    pub(crate) max_message_size: usize,
    /// Serve before the first snapshot.
    pub(crate) start_without_config: bool,
    /// Whether `--config` gives the limits until the first snapshot.
    pub(crate) files: bool,
}

/// TLS to the management server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct XdsTlsArgs {
    pub(crate) ca: Option<PathBuf>,
    pub(crate) identity: Option<(PathBuf, PathBuf)>,
    pub(crate) server_name: Option<String>,
}

/// Where the counters live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoreChoice {
    Memory,
    Redis { url: String, ca: Option<PathBuf> },
    Cluster { urls: Vec<String> },
    Sentinel { urls: Vec<String>, master: String },
}

/// What the service runs with: the command line and the environment,
/// resolved by [`args`].
#[derive(Debug)]
pub(crate) struct Args {
    /// The configuration directory (`--config`, or `--validate`'s).
    pub(crate) dir: PathBuf,
    /// `--validate`: check `dir` and exit.
    pub(crate) validate: bool,
    pub(crate) grpc: SocketAddr,
    pub(crate) metrics: Option<SocketAddr>,
    pub(crate) store: StoreChoice,
    pub(crate) store_timeout: Option<Duration>,
    pub(crate) store_check: bool,
    pub(crate) watch: Option<Duration>,
    pub(crate) load: LoadOptions,
    pub(crate) options: ServiceOptions,
    pub(crate) allow_empty_config: bool,
    /// `--max-connections`, when given (else derived from the open-file
    /// limit: `connection_cap`).
    pub(crate) max_connections: Option<usize>,
    pub(crate) listener: ListenerOptions,
    pub(crate) max_concurrent_streams: u32,
    pub(crate) max_message_size: usize,
    pub(crate) shutdown_timeout: Duration,
    /// What to log once logging is up: envoyproxy/ratelimit variables read,
    /// or set and ignored.
    pub(crate) notes: Vec<String>,
    /// `--config-type grpc-xds-sotw`: the xDS client's settings (`dir` is
    /// then `--config`'s, if `xds.files`).
    pub(crate) xds: Option<XdsArgs>,
}

fn sentinel_master(flag: &str, v: &str) -> Result<String, String> {
    if v.trim().is_empty() {
        return Err(format!(
            "{flag}: empty; the name the sentinels monitor the primary under, such as mymaster"
        ));
    }
    Ok(v.to_owned())
}

fn on_store_error(flag: &str, v: &str) -> Result<OnStoreError, String> {
    OnStoreError::parse(v)
        .ok_or_else(|| format!("{flag} {v:?}: one of {}", ON_STORE_ERROR.join(", ")))
}

fn charge(flag: &str, v: &str) -> Result<Charge, String> {
    Charge::parse(v).ok_or_else(|| format!("{flag} {v:?}: one of {}", Charge::NAMES.join(", ")))
}

fn metric_keys(flag: &str, v: &str) -> Result<usize, String> {
    v.trim()
        .parse::<usize>()
        .map_err(|_| format!("{flag} {v:?}: a number of keys, such as 10000 (0: none)"))
}

fn max_descriptors(flag: &str, v: &str) -> Result<usize, String> {
    let n = count(flag, v, 1, "64")?;
    let max = tower_redis_ratelimit::limiter::AllOrNothing::MAX_PARTS;
    if n > max {
        return Err(format!(
            "{flag} {v:?}: at most {max} (what one store call decides)"
        ));
    }
    Ok(n)
}

fn max_concurrent_streams(flag: &str, v: &str) -> Result<u32, String> {
    let n = count(flag, v, 1, "1024")?;
    u32::try_from(n).map_err(|_| format!("{flag} {v:?}: at most {}", u32::MAX))
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
/// Honoured (read in [`args`]): `SHADOW_MODE`, `LIMIT_RESPONSE_HEADERS_ENABLED`,
/// `LIMIT_LIMIT_HEADER`, `LIMIT_REMAINING_HEADER`, `LIMIT_RESET_HEADER`,
/// `NEAR_LIMIT_RATIO`, `MERGE_DOMAIN_CONFIG`, `GRPC_HOST`, `GRPC_PORT`,
/// `USE_PROMETHEUS`, `PROMETHEUS_ADDR`, `PROMETHEUS_PATH` (`/metrics`
/// only), `RUNTIME_ROOT`, `RUNTIME_SUBDIRECTORY`, `RUNTIME_APPDIRECTORY`,
/// `CONFIG_TYPE` (`FILE`, `GRPC_XDS_SOTW`), the xDS client's (`CONFIG_GRPC_XDS_*`,
/// `XDS_CLIENT_*`, `FORCE_START_WITHOUT_INITIAL_CONFIG`: [`xds_args`]),
/// `BACKEND_TYPE` (`redis` only), `REDIS_URL`,
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

/// What the service runs with: the command line `cli` and the environment
/// `env` (the process's, or a test's): envoyproxy/ratelimit's variables
/// and the store's ([`STORE_VARIABLES`]); a flag wins over a variable.
pub(crate) fn args(cli: Cli, env: impl Fn(&str) -> Option<String>) -> Result<Args, String> {
    let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let mut notes = Vec::new();
    let (headers, _) = cli.settle(("headers", cli.headers), ("no_headers", cli.no_headers))?;
    let (_, no_watch) = cli.settle(
        ("watch_interval", cli.given("watch_interval")),
        ("no_watch", cli.no_watch),
    )?;
    let watch = (!no_watch).then_some(cli.watch_interval);
    let mut options = ServiceOptions::default()
        .on_store_error(cli.on_store_error)
        .max_metric_keys(cli.max_metric_keys)
        .max_descriptors(cli.max_descriptors)
        .max_entries(cli.max_entries)
        .charge(cli.charge);
    if headers {
        options = options.headers(true);
    }
    let dir = cli.validate.clone().or_else(|| cli.config.clone());

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
    let config_type = match env("CONFIG_TYPE") {
        _ if cli.given("config_type") => cli.config_type,
        None => cli.config_type,
        Some(v) if v.trim().eq_ignore_ascii_case("FILE") => ConfigType::Files,
        Some(v) if v.trim().eq_ignore_ascii_case("GRPC_XDS_SOTW") => ConfigType::GrpcXdsSotw,
        Some(v) => {
            return Err(format!(
                "CONFIG_TYPE={v:?}: FILE (--config-type files) or GRPC_XDS_SOTW \
                 (--config-type grpc-xds-sotw)"
            ));
        }
    };
    let xds = if config_type == ConfigType::GrpcXdsSotw && cli.validate.is_none() {
        Some(xds_args(&cli, &env)?)
    } else {
        None
    };
    let shadow = cli.shadow_mode || go("SHADOW_MODE")? == Some(true);
    options = options.shadow_mode(shadow);
    let quota = cli.quota_mode || go("QUOTA_MODE")? == Some(true);
    options = options.quota_mode(quota);
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
    let merge = cli.merge_domains || go("MERGE_DOMAIN_CONFIG")? == Some(true);
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
    let grpc = match (cli.given("grpc"), env("GRPC_HOST"), env("GRPC_PORT")) {
        (true, ..) | (false, None, None) => cli.grpc,
        // Go's defaults for the other one
        (false, host, port) => host_port(
            "GRPC_HOST/GRPC_PORT",
            host.as_deref().unwrap_or("0.0.0.0"),
            port.as_deref().unwrap_or("8081"),
        )?,
    };
    let mut metrics = cli.metrics;
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
        // (envoyproxy/ratelimit reads no directory with xDS: its RUNTIME_*
        // variables, which Envoy Gateway sets all the same, are not read)
        None if xds.is_some() => PathBuf::new(),
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

    let mut redis = cli.redis;
    let mut cluster = cli.redis_cluster.map(|u| u.0);
    let mut sentinel = cli.redis_sentinel.map(|u| u.0);
    let mut ca = cli.redis_ca;
    let mut master = cli.sentinel_master;
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
    Ok(Args {
        dir,
        validate: cli.validate.is_some(),
        grpc,
        metrics,
        store,
        store_timeout: cli.store_timeout,
        store_check: !cli.no_store_check,
        watch,
        load: LoadOptions::default().merge_domains(merge),
        options,
        allow_empty_config: cli.allow_empty_config,
        max_connections: cli.max_connections,
        listener: ListenerOptions::default()
            .handshake_timeout(cli.handshake_timeout)
            .idle_timeout(cli.idle_timeout),
        max_concurrent_streams: cli.max_concurrent_streams,
        max_message_size: cli.max_message_size,
        shutdown_timeout: cli.shutdown_timeout,
        notes,
        xds,
    })
}

/// The xDS client's settings: each flag, else envoyproxy/ratelimit's
/// variable, else the flag's default.
fn xds_args(cli: &Cli, env: &dyn Fn(&str) -> Option<String>) -> Result<XdsArgs, String> {
    let go = |id: &str, name: &str| {
        if cli.given(id) { None } else { env(name) }
    };
    if let Some(v) = env("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS") {
        return Err(format!(
            "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS={:?}: no headers are added to the \
             xDS stream here; authenticate with a client certificate (--xds-tls-cert)",
            v.split(',')
                .map(|h| h.split(':').next().unwrap_or_default())
                .collect::<Vec<_>>()
        ));
    }
    let url = go("xds_server_url", "CONFIG_GRPC_XDS_SERVER_URL")
        .map_or_else(|| cli.xds_server_url.clone(), |v| v.trim().to_owned());
    let node_id = go("xds_node_id", "CONFIG_GRPC_XDS_NODE_ID")
        .map_or_else(|| cli.xds_node_id.clone(), |v| v.trim().to_owned());
    let node_metadata = match go("xds_node_metadata", "CONFIG_GRPC_XDS_NODE_METADATA") {
        Some(v) => node_metadata("CONFIG_GRPC_XDS_NODE_METADATA", &v)?.0,
        None => cli
            .xds_node_metadata
            .clone()
            .map(|m| m.0)
            .unwrap_or_default(),
    };
    let tls = match go("xds_tls", "CONFIG_GRPC_XDS_SERVER_USE_TLS") {
        Some(v) => go_bool("CONFIG_GRPC_XDS_SERVER_USE_TLS", &v)?,
        None => cli.xds_tls,
    };
    let path = |id: &str, name: &str, flag: &Option<PathBuf>| {
        go(id, name).map(PathBuf::from).or_else(|| flag.clone())
    };
    let ca = path(
        "xds_tls_ca",
        "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
        &cli.xds_tls_ca,
    );
    let cert = path(
        "xds_tls_cert",
        "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
        &cli.xds_tls_cert,
    );
    let key = path(
        "xds_tls_key",
        "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
        &cli.xds_tls_key,
    );
    let server_name = go("xds_tls_server_name", "CONFIG_GRPC_XDS_SERVER_TLS_SAN")
        .map(|v| v.trim().to_owned())
        .or_else(|| cli.xds_tls_server_name.clone());
    let identity = match (cert, key) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        _ => {
            return Err("--xds-tls-cert and --xds-tls-key go together \
                        (CONFIG_GRPC_XDS_CLIENT_TLS_CERT, CONFIG_GRPC_XDS_CLIENT_TLS_KEY)"
                .into());
        }
    };
    let tls_given = ca.is_some() || identity.is_some() || server_name.is_some();
    if tls_given && !tls && !url.starts_with("https://") {
        return Err(
            "--xds-tls-ca, --xds-tls-cert, --xds-tls-server-name need --xds-tls \
                    (CONFIG_GRPC_XDS_SERVER_USE_TLS=true)"
                .into(),
        );
    }
    let tls = (tls || url.starts_with("https://")).then_some(XdsTlsArgs {
        ca,
        identity,
        server_name,
    });
    let backoff = |id: &str, name: &str, flag: Duration| match go(id, name) {
        Some(v) => duration(name, &v),
        None => Ok(flag),
    };
    let initial = backoff(
        "xds_backoff_initial",
        "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
        cli.xds_backoff_initial,
    )?;
    let max = backoff(
        "xds_backoff_max",
        "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
        cli.xds_backoff_max,
    )?;
    if max < initial {
        return Err(format!(
            "--xds-backoff-max ({max:?}) is shorter than --xds-backoff-initial ({initial:?})"
        ));
    }
    let max_message_size = match go("xds_max_message_size", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES") {
        Some(v) => count("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", &v, 1024, "16777216")?,
        None => cli.xds_max_message_size,
    };
    let start_without_config = match go(
        "xds_start_without_config",
        "FORCE_START_WITHOUT_INITIAL_CONFIG",
    ) {
        Some(v) => go_bool("FORCE_START_WITHOUT_INITIAL_CONFIG", &v)?,
        None => cli.xds_start_without_config,
    };
    Ok(XdsArgs {
        url,
        node_id,
        node_metadata,
        tls,
        backoff: (initial, max),
        max_message_size,
        start_without_config,
        files: cli.config.is_some(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `args` after `--config /c`, with the environment `env`.
    fn p(args: &[&str], env: &[(&str, &str)]) -> Result<Args, String> {
        bare(&[&["--config", "/c"], args].concat(), env)
    }

    /// Parses `args` (no `--config` of the helper's), with the environment
    /// `env` (the store's variables and envoyproxy/ratelimit's).
    fn bare(args: &[&str], env: &[(&str, &str)]) -> Result<Args, String> {
        args_of(cli(args)?, env)
    }

    /// The command line `args`; an error as the binary reports it.
    fn cli(args: &[&str]) -> Result<Cli, String> {
        Cli::parse_argv(std::iter::once("ratelimit-server").chain(args.iter().copied()))
            .map_err(|e| invalid(&e).map_or_else(|| e.to_string(), str::to_owned))
    }

    fn args_of(cli: Cli, env: &[(&str, &str)]) -> Result<Args, String> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        args(cli, |name| {
            env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
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
            (&["--redis"], &[], "a value is required for '--redis <URL>'"),
            (
                &["--no-such-flag"],
                &[],
                "unexpected argument '--no-such-flag'",
            ),
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
        assert_eq!(p(&[], &[]).unwrap().options.charge, Charge::Always);
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
            &[("CONFIG_TYPE", "GRPC_XDS_DELTA"), ("RUNTIME_ROOT", "/r")],
        )
        .expect_err("delta xDS");
        assert!(
            e.contains(
                "CONFIG_TYPE=\"GRPC_XDS_DELTA\": FILE (--config-type files) or GRPC_XDS_SOTW"
            ),
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
    fn xds_flags_and_their_defaults() {
        let a = bare(&["--config-type", "grpc-xds-sotw"], &[]).expect("xds");
        let x = a.xds.expect("xds args");
        assert_eq!(
            (x.url.as_str(), x.node_id.as_str(), x.tls.is_none()),
            ("localhost:18000", "default", true)
        );
        assert_eq!(x.backoff, (Duration::from_secs(1), Duration::from_secs(60)));
        assert_eq!(x.max_message_size, 16 << 20);
        assert!(!x.start_without_config && !x.files);
        assert_eq!(a.dir, PathBuf::new(), "no directory read");
        let a = bare(
            &[
                "--config-type=grpc-xds-sotw",
                "--xds-server-url=https://eg:18001",
                "--xds-node-id=rl",
                "--xds-node-metadata=a=1, b = 2",
                "--xds-tls-ca=/ca.pem",
                "--xds-tls-cert=/c.pem",
                "--xds-tls-key=/k.pem",
                "--xds-tls-server-name=eg.svc",
                "--xds-backoff-initial=100ms",
                "--xds-backoff-max=5s",
                "--xds-max-message-size=1048576",
                "--xds-start-without-config",
                "--config=/initial",
            ],
            &[],
        )
        .expect("every xds flag");
        let x = a.xds.expect("xds args");
        assert_eq!(x.url, "https://eg:18001");
        assert_eq!(x.node_id, "rl");
        assert_eq!(
            x.node_metadata,
            [
                ("a".to_owned(), "1".to_owned()),
                ("b".to_owned(), "2".to_owned())
            ]
        );
        assert_eq!(
            x.tls,
            Some(XdsTlsArgs {
                ca: Some("/ca.pem".into()),
                identity: Some(("/c.pem".into(), "/k.pem".into())),
                server_name: Some("eg.svc".into()),
            })
        );
        assert_eq!(
            x.backoff,
            (Duration::from_millis(100), Duration::from_secs(5))
        );
        assert_eq!(x.max_message_size, 1 << 20);
        assert!(x.start_without_config && x.files);
        assert_eq!(a.dir, PathBuf::from("/initial"));
        // files by default: no xDS
        assert!(p(&[], &[]).expect("files").xds.is_none());
        for (args, needle) in [
            (
                &["--config-type=grpc"][..],
                "--config-type \"grpc\": files or grpc-xds-sotw",
            ),
            (
                &["--config-type=grpc-xds-sotw", "--xds-tls-cert=/c"],
                "go together",
            ),
            (
                &["--config-type=grpc-xds-sotw", "--xds-tls-ca=/c"],
                "need --xds-tls",
            ),
            (
                &[
                    "--config-type=grpc-xds-sotw",
                    "--xds-backoff-initial=10s",
                    "--xds-backoff-max=1s",
                ],
                "shorter than",
            ),
            (
                &["--config-type=grpc-xds-sotw", "--xds-max-message-size=10"],
                "at least 1024",
            ),
        ] {
            let e = bare(args, &[]).expect_err(needle);
            assert!(e.contains(needle), "{args:?}: {e}");
        }
        let e = bare(&["--xds-backoff-max=soon"], &[]).expect_err("a duration");
        assert!(e.contains("--xds-backoff-max \"soon\""), "{e}");
    }

    #[test]
    fn envoyproxy_ratelimit_s_xds_variables_are_translated() {
        // as Envoy Gateway sets them (its RUNTIME_* are not read with xDS)
        let env = [
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"),
            ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
            ("CONFIG_GRPC_XDS_NODE_METADATA", "zone=a"),
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"),
            ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"),
            ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "envoy-gateway"),
            ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s"),
            ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s"),
            ("XDS_CLIENT_BACKOFF_JITTER", "true"),
            ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "4194304"),
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
            ("RUNTIME_ROOT", "/data"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ];
        let a = bare(&[], &env).expect("Envoy Gateway's environment");
        let x = a.xds.expect("xds");
        assert_eq!(
            (x.url.as_str(), x.node_id.as_str()),
            ("envoy-gateway:18001", "envoy-ratelimit")
        );
        assert_eq!(x.node_metadata, [("zone".to_owned(), "a".to_owned())]);
        assert_eq!(
            x.tls,
            Some(XdsTlsArgs {
                ca: Some("/certs/ca.crt".into()),
                identity: Some(("/certs/tls.crt".into(), "/certs/tls.key".into())),
                server_name: Some("envoy-gateway".into()),
            })
        );
        assert_eq!(
            x.backoff,
            (Duration::from_secs(10), Duration::from_secs(60))
        );
        assert_eq!(x.max_message_size, 4 << 20);
        assert!(x.start_without_config && !x.files);
        assert_eq!(a.dir, PathBuf::new());
        assert!(
            a.notes
                .iter()
                .any(|n| n.starts_with("XDS_CLIENT_BACKOFF_JITTER=true ignored"))
        );
        // a flag wins over the variable, for the type and each setting
        let a = bare(
            &["--xds-node-id=mine", "--config-type=files", "--config=/c"],
            &env,
        )
        .expect("files");
        assert!(a.xds.is_none());
        let a = bare(&["--xds-node-id=mine"], &env).expect("xds");
        assert_eq!(a.xds.map(|x| x.node_id), Some("mine".to_owned()));
        // FILE is files; a bad switch is named
        assert!(
            p(&[], &[("CONFIG_TYPE", "FILE")])
                .expect("file")
                .xds
                .is_none()
        );
        let e = bare(
            &[],
            &[
                ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
                ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "sure"),
            ],
        )
        .expect_err("bool");
        assert!(e.contains("CONFIG_GRPC_XDS_SERVER_USE_TLS=\"sure\""), "{e}");
        let e = bare(
            &[],
            &[
                ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
                (
                    "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
                    "authorization:secret",
                ),
            ],
        )
        .expect_err("headers");
        assert!(
            e.contains("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS") && !e.contains("secret"),
            "{e}"
        );
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

    #[test]
    fn every_flag_has_its_help_and_its_variable() {
        Cli::command().debug_assert();
        let mut seen = Vec::new();
        for a in Cli::command().get_arguments() {
            let id = a.get_id().as_str();
            if matches!(id, "help" | "version") {
                continue;
            }
            let long = a.get_long().unwrap_or_else(|| panic!("{id}: no long name"));
            let help = a.get_help().map(ToString::to_string).unwrap_or_default();
            assert!(help.len() > 20, "--{long}: help {help:?}");
            let var = a
                .get_env()
                .unwrap_or_else(|| panic!("--{long}: no variable"))
                .to_string_lossy()
                .into_owned();
            let own = format!("RATELIMIT_{}", long.to_ascii_uppercase().replace('-', "_"));
            assert!(
                var == own || STORE_VARIABLES.contains(&var.as_str()),
                "--{long}: {var}"
            );
            assert!(!seen.contains(&var), "{var} twice");
            seen.push(var);
            if a.get_action().takes_values() {
                assert!(a.get_value_names().is_some(), "--{long}: no value name");
            }
        }
        for v in STORE_VARIABLES {
            assert!(seen.iter().any(|s| s == v), "{v} is no flag's");
        }
        assert!(seen.len() >= 30, "{seen:?}");
    }

    #[test]
    fn node_metadata_takes_key_value_pairs_and_refuses_anything_else() {
        let m = node_metadata("--xds-node-metadata", "a=1, b = two,,c=").expect("pairs");
        assert_eq!(
            m.0,
            [("a", "1"), ("b", "two"), ("c", "")].map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
        for bad in ["a", "a=1,b", "=1"] {
            let e = node_metadata("--xds-node-metadata", bad).expect_err(bad);
            assert!(e.contains("KEY=VALUE"), "{e}");
        }
    }

    #[test]
    fn help_lists_every_flag_its_variable_and_its_default() {
        let e = Cli::parse_argv(["ratelimit-server", "--help"]).expect_err("help");
        // (the command that parses reads no store variable: the help names them)
        assert_eq!((e.kind(), e.exit_code()), (ErrorKind::DisplayHelp, 0));
        // (as one line: --help wraps its text to the terminal's width)
        let help = e
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        for a in Cli::command().get_arguments() {
            if let (Some(long), Some(var)) = (a.get_long(), a.get_env()) {
                assert!(help.contains(&format!("--{long}")), "--{long}: {help}");
                let var = format!("[env: {}]", var.to_string_lossy());
                assert!(help.contains(&var), "{var}: {help}");
            }
        }
        for default in [
            "[default: 250]",
            "[default: 127.0.0.1:8081]",
            "[default: 10s]",
            "[default: always]",
            "[possible values: allow, deny, unavailable]",
        ] {
            assert!(help.contains(default), "{default}: {help}");
        }
        assert!(
            help.contains("SHADOW_MODE") && help.contains("500ms"),
            "{help}"
        );
    }

    #[test]
    fn version_is_the_package_s() {
        let e = Cli::parse_argv(["ratelimit-server", "--version"]).expect_err("version");
        assert_eq!((e.kind(), e.exit_code()), (ErrorKind::DisplayVersion, 0));
        assert_eq!(
            e.to_string().trim(),
            format!("ratelimit-server {}", env!("CARGO_PKG_VERSION"))
        );
    }

    #[test]
    fn the_defaults_are_the_library_s() {
        let a = p(&[], &[]).unwrap();
        let d = ServiceOptions::default();
        assert_eq!(
            (
                a.options.max_metric_keys,
                a.options.max_descriptors,
                a.options.max_entries,
                a.options.on_store_error,
                a.options.charge,
                a.options.headers,
            ),
            (
                d.max_metric_keys,
                d.max_descriptors,
                d.max_entries,
                d.on_store_error,
                d.charge,
                d.headers,
            )
        );
        assert_eq!(a.listener, ListenerOptions::default());
        assert!(!a.validate);
    }

    #[test]
    fn a_flag_and_its_opposite() {
        // on the command line, the last one given
        assert_eq!(
            p(&["--watch-interval", "100", "--no-watch"], &[])
                .unwrap()
                .watch,
            None
        );
        assert_eq!(
            p(&["--no-watch", "--watch-interval", "100"], &[])
                .unwrap()
                .watch,
            Some(Duration::from_millis(100))
        );
        assert!(
            p(&["--no-headers", "--headers"], &[])
                .unwrap()
                .options
                .headers
        );
        // a flag given twice: the last value
        assert_eq!(
            p(&["--redis", "redis://a/", "--redis", "redis://b/"], &[])
                .unwrap()
                .store,
            StoreChoice::Redis {
                url: "redis://b/".into(),
                ca: None
            }
        );
        assert!(
            p(&["--shadow-mode", "--shadow-mode"], &[])
                .unwrap()
                .options
                .shadow_mode
        );
        // the command line wins over the other one's variable
        let with_env = |args: &[&str], ids: &[&str]| {
            let mut c = cli(&[&["--config", "/c"], args].concat()).unwrap();
            for id in ids {
                match *id {
                    "headers" => c.headers = true,
                    "no_headers" => c.no_headers = true,
                    "no_watch" => c.no_watch = true,
                    _ => unreachable!("{id}"),
                }
                c.given.insert((*id).into(), Given::Variable);
            }
            args_of(c, &[])
        };
        assert!(
            with_env(&["--headers"], &["no_headers"])
                .unwrap()
                .options
                .headers
        );
        assert!(
            !with_env(&["--no-headers"], &["headers"])
                .unwrap()
                .options
                .headers
        );
        assert!(with_env(&[], &["headers"]).unwrap().options.headers);
        assert_eq!(
            with_env(&["--watch-interval", "100"], &["no_watch"])
                .unwrap()
                .watch,
            Some(Duration::from_millis(100))
        );
        assert_eq!(with_env(&[], &["no_watch"]).unwrap().watch, None);
        let e = with_env(&[], &["headers", "no_headers"]).expect_err("both");
        assert!(
            e.contains("RATELIMIT_HEADERS and RATELIMIT_NO_HEADERS are both set"),
            "{e}"
        );
    }

    #[test]
    fn validate_takes_the_directory_in_place_of_config() {
        let a = bare(&["--validate", "/v", "--merge-domains"], &[]).unwrap();
        assert!(a.validate && a.load.merge_domains);
        assert_eq!(a.dir, PathBuf::from("/v"));
        let a = bare(&["--config", "/c", "--validate", "/v"], &[]).unwrap();
        assert_eq!(a.dir, PathBuf::from("/v"));
    }
}
