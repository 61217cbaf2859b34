//! The flags, in groups by their `--help` heading: each group is a struct
//! that [`Cli`](super::Cli) flattens, and its heading is said once, on the
//! struct. Each flag's `--help` text is its field's doc comment; its value
//! parser ([`parse`](super::parse)) names the flag in its errors.
//!
//! A switch (a `bool`) takes on its variable what clap's
//! [`BoolishValueParser`] takes: true/false, yes/no, on/off, 1/0, ...

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use clap::builder::BoolishValueParser;
use tower_redis_ratelimit_server::config::{Charge, OnStoreError};

use super::parse::{
    ON_STORE_ERROR, Urls, addr, at_least, charge, checked, duration, max_concurrent_streams,
    max_descriptors, metric_keys, millis, on_store_error, one_of, sentinel_master, store_url, urls,
};
use super::xds::{CONFIG_TYPES, ConfigType, Metadata, config_type, node_metadata};

/// The configuration directory: where it is, how it is read and checked.
#[derive(Debug, Args)]
#[command(next_help_heading = "Configuration")]
#[group(skip)]
pub(crate) struct ConfigFlags {
    /// The directory of the configuration files (its .yaml and .yml files,
    /// subdirectories included). Without it, envoyproxy/ratelimit's
    /// RUNTIME_ROOT, RUNTIME_SUBDIRECTORY and RUNTIME_APPDIRECTORY. With
    /// --config-type grpc-xds-sotw, the limits until the first snapshot.
    #[arg(long, value_name = "DIR", env = "RATELIMIT_CONFIG")]
    pub(crate) config: Option<PathBuf>,

    /// Serves the rate limit quota service too (RLQS, Envoy's
    /// envoy.service.rate_limit_quota.v3, for the rate_limit_quota filter)
    /// on the gRPC port, with the quota files at PATH: a file, or a
    /// directory's .yaml and .yml files, one domain each, read again as
    /// --watch-interval says. Without --config (nor RUNTIME_ROOT), the rate
    /// limit service then serves with no rule.
    #[arg(long, value_name = "PATH", env = "RATELIMIT_QUOTA_CONFIG")]
    pub(crate) quota_config: Option<PathBuf>,

    /// Checks the configuration directory DIR (without DIR: --config's) as
    /// the service would load it (with the flags that change how:
    /// --merge-domains, --allow-empty-config, --shadow-mode, ...), and the
    /// quota files of --quota-config if given, prints their warnings and
    /// each domain's number of rules, and exits: 0 if it would start, 1 if
    /// not. It touches no store and opens no port. The quota files alone:
    /// --validate --quota-config PATH.
    #[arg(long, value_name = "DIR", num_args = 0..=1, env = "RATELIMIT_VALIDATE")]
    pub(crate) validate: Option<Option<PathBuf>>,

    /// How often the configuration directory is read again, in
    /// milliseconds: a change is applied without a restart; an invalid one
    /// is logged and the running configuration stays.
    #[arg(
        long,
        value_name = "MS",
        default_value = "250",
        value_parser = checked(millis),
        env = "RATELIMIT_WATCH_INTERVAL"
    )]
    pub(crate) watch_interval: Duration,

    /// Loads the configuration directory once, at the start.
    #[arg(long, value_parser = BoolishValueParser::new(), env = "RATELIMIT_NO_WATCH")]
    pub(crate) no_watch: bool,

    /// Files with the same domain add to it instead of being rejected (a
    /// key/value defined twice under one parent is still an error);
    /// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG too.
    #[arg(long, value_parser = BoolishValueParser::new(), env = "RATELIMIT_MERGE_DOMAINS")]
    pub(crate) merge_domains: bool,

    /// Starts, with a warning, when the directory holds no rule (every
    /// request is allowed), where the start is refused otherwise.
    #[arg(long, value_parser = BoolishValueParser::new(), env = "RATELIMIT_ALLOW_EMPTY_CONFIG")]
    pub(crate) allow_empty_config: bool,
}

/// Where the limits come from, and the xDS client that takes them from a
/// management server (resolved by [`xds::resolve`](super::xds::resolve)).
#[derive(Debug, Args)]
#[command(next_help_heading = "xDS")]
#[group(skip)]
pub(crate) struct XdsFlags {
    /// Where the limits come from: files (the directory --config) or
    /// grpc-xds-sotw (an xDS management server, --xds-server-url, as
    /// Envoy Gateway runs envoyproxy/ratelimit); envoyproxy/ratelimit's
    /// CONFIG_TYPE too (FILE, GRPC_XDS_SOTW).
    #[arg(
        long,
        value_name = "TYPE",
        default_value = "files",
        value_parser = one_of(config_type, &CONFIG_TYPES),
        env = "RATELIMIT_CONFIG_TYPE"
    )]
    pub(crate) config_type: ConfigType,

    /// The xDS management server: host:port, http://host:port or
    /// https://host:port; envoyproxy/ratelimit's CONFIG_GRPC_XDS_SERVER_URL
    /// too.
    #[arg(
        long,
        value_name = "URL",
        default_value = "localhost:18000",
        env = "RATELIMIT_XDS_SERVER_URL"
    )]
    pub(crate) xds_server_url: String,

    /// The node id given to the management server, which picks the
    /// snapshot by it; envoyproxy/ratelimit's CONFIG_GRPC_XDS_NODE_ID too.
    #[arg(
        long,
        value_name = "ID",
        default_value = "default",
        env = "RATELIMIT_XDS_NODE_ID"
    )]
    pub(crate) xds_node_id: String,

    /// The node's metadata, key=value,key=value;
    /// envoyproxy/ratelimit's CONFIG_GRPC_XDS_NODE_METADATA too.
    #[arg(
        long,
        value_name = "KEY=VALUE,...",
        value_parser = checked(node_metadata),
        env = "RATELIMIT_XDS_NODE_METADATA"
    )]
    pub(crate) xds_node_metadata: Option<Metadata>,

    /// Connects to the management server with TLS (verified against the
    /// system's roots, or --xds-tls-ca); envoyproxy/ratelimit's
    /// CONFIG_GRPC_XDS_SERVER_USE_TLS too.
    #[arg(long, value_parser = BoolishValueParser::new(), env = "RATELIMIT_XDS_TLS")]
    pub(crate) xds_tls: bool,

    /// The PEM CA certificates the management server is verified against;
    /// envoyproxy/ratelimit's CONFIG_GRPC_XDS_SERVER_TLS_CACERT too.
    #[arg(long, value_name = "PEM_FILE", env = "RATELIMIT_XDS_TLS_CA")]
    pub(crate) xds_tls_ca: Option<PathBuf>,

    /// The client certificate (PEM) presented to the management server,
    /// with --xds-tls-key; envoyproxy/ratelimit's
    /// CONFIG_GRPC_XDS_CLIENT_TLS_CERT too.
    #[arg(long, value_name = "PEM_FILE", env = "RATELIMIT_XDS_TLS_CERT")]
    pub(crate) xds_tls_cert: Option<PathBuf>,

    /// The key (PEM) of --xds-tls-cert; envoyproxy/ratelimit's
    /// CONFIG_GRPC_XDS_CLIENT_TLS_KEY too.
    #[arg(long, value_name = "PEM_FILE", env = "RATELIMIT_XDS_TLS_KEY")]
    pub(crate) xds_tls_key: Option<PathBuf>,

    /// The name the management server's certificate is verified for,
    /// instead of the URL's host; envoyproxy/ratelimit's
    /// CONFIG_GRPC_XDS_SERVER_TLS_SAN too.
    #[arg(long, value_name = "NAME", env = "RATELIMIT_XDS_TLS_SERVER_NAME")]
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
        env = "RATELIMIT_XDS_BACKOFF_INITIAL"
    )]
    pub(crate) xds_backoff_initial: Duration,

    /// The longest wait before connecting again; envoyproxy/ratelimit's
    /// XDS_CLIENT_BACKOFF_MAX_INTERVAL too.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "60s",
        value_parser = checked(duration),
        env = "RATELIMIT_XDS_BACKOFF_MAX"
    )]
    pub(crate) xds_backoff_max: Duration,

    /// The largest response taken from the management server, in bytes
    /// (a larger one fails the stream, and the limits stay);
    /// envoyproxy/ratelimit's XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES too.
    #[arg(
        long,
        value_name = "BYTES",
        default_value = "16777216",
        value_parser = at_least(1024, "16777216"),
        env = "RATELIMIT_XDS_MAX_MESSAGE_SIZE"
    )]
    pub(crate) xds_max_message_size: usize,

    /// Serves at once, with no limit (or --config's files) until the first
    /// snapshot, where the gRPC port otherwise opens once the first
    /// snapshot is applied; envoyproxy/ratelimit's
    /// FORCE_START_WITHOUT_INITIAL_CONFIG too.
    #[arg(
        long,
        value_parser = BoolishValueParser::new(),
        env = "RATELIMIT_XDS_START_WITHOUT_CONFIG"
    )]
    pub(crate) xds_start_without_config: bool,
}

/// Where the counters live (resolved, with the store's variables, by
/// [`store::resolve`](super::store::resolve)), and what a store call that
/// fails is answered.
#[derive(Debug, Args)]
#[command(next_help_heading = "Store (at most one)")]
#[group(skip)]
pub(crate) struct StoreFlags {
    /// One Redis: redis://host:6379/, rediss:// for TLS (verified against
    /// the system's roots, or --redis-ca), or a Unix socket's
    /// unix:///path/to/redis.sock. REDIS_URL also takes
    /// envoyproxy/ratelimit's form without a scheme, read with its
    /// REDIS_TYPE, REDIS_SOCKET_TYPE, REDIS_AUTH and REDIS_TLS. Without a
    /// store, counters live in this process's memory.
    #[arg(long, value_name = "URL", value_parser = checked(store_url), env = "REDIS_URL")]
    pub(crate) redis: Option<String>,

    /// The PEM root certificate that a rediss:// Redis is verified against,
    /// instead of the system's roots.
    #[arg(long, value_name = "PEM_FILE", env = "REDIS_CA")]
    pub(crate) redis_ca: Option<PathBuf>,

    /// A Redis Cluster, through its seed nodes: their URLs, comma-separated.
    #[arg(
        long,
        value_name = "URL,URL,...",
        value_parser = checked(urls),
        env = "REDIS_CLUSTER_URLS"
    )]
    pub(crate) redis_cluster: Option<Urls>,

    /// The primary that these Redis Sentinels monitor under
    /// --sentinel-master: their URLs, comma-separated.
    #[arg(
        long,
        value_name = "URL,URL,...",
        value_parser = checked(urls),
        env = "REDIS_SENTINEL_URLS"
    )]
    pub(crate) redis_sentinel: Option<Urls>,

    /// The name the sentinels of --redis-sentinel monitor the primary
    /// under.
    #[arg(
        long,
        value_name = "NAME",
        value_parser = checked(sentinel_master),
        env = "REDIS_SENTINEL_MASTER"
    )]
    pub(crate) sentinel_master: Option<String>,

    /// Bounds each store call, in milliseconds (by default the library's
    /// bound: 100). A call that fails or times out is answered by its
    /// domain's failure_policy, else --on-store-error.
    #[arg(long, value_name = "MS", value_parser = checked(millis), env = "RATELIMIT_STORE_TIMEOUT")]
    pub(crate) store_timeout: Option<Duration>,

    /// How a call the store could not decide is answered, in the domains
    /// without a failure_policy: unavailable fails it with UNAVAILABLE
    /// (Envoy's failure_mode_deny decides), allow answers OK and deny
    /// OVER_LIMIT for what could not be decided.
    #[arg(
        long,
        value_name = "POLICY",
        default_value = "unavailable",
        value_parser = one_of(on_store_error, &ON_STORE_ERROR),
        env = "RATELIMIT_ON_STORE_ERROR"
    )]
    pub(crate) on_store_error: OnStoreError,

    /// Skips the check of the store at the start (its version, ACL,
    /// scripts and clock), which stops the start when the store refuses
    /// what the service needs.
    #[arg(long, value_parser = BoolishValueParser::new(), env = "RATELIMIT_NO_STORE_CHECK")]
    pub(crate) no_store_check: bool,
}

/// What the service answers: its headers, its modes, what a request may
/// hold.
#[derive(Debug, Args)]
#[command(next_help_heading = "Answers")]
#[group(skip)]
pub(crate) struct AnswerFlags {
    /// Adds the IETF RateLimit and RateLimit-Policy headers to the answers.
    #[arg(long, value_parser = BoolishValueParser::new(), env = "RATELIMIT_HEADERS")]
    pub(crate) headers: bool,

    /// No RateLimit headers (the default: undoes a --headers before it).
    #[arg(long, value_parser = BoolishValueParser::new(), env = "RATELIMIT_NO_HEADERS")]
    pub(crate) no_headers: bool,

    /// Never denies: every limit is decided and counted, and the answer is
    /// OK; envoyproxy/ratelimit's SHADOW_MODE too.
    #[arg(long, value_parser = BoolishValueParser::new(), env = "RATELIMIT_SHADOW_MODE")]
    pub(crate) shadow_mode: bool,

    /// Puts every rule in quota mode; envoyproxy/ratelimit's QUOTA_MODE too.
    #[arg(long, value_parser = BoolishValueParser::new(), env = "RATELIMIT_QUOTA_MODE")]
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
        value_parser = one_of(charge, &Charge::NAMES),
        env = "RATELIMIT_CHARGE"
    )]
    pub(crate) charge: Charge,

    /// The most descriptors in one request (at most what one store call
    /// decides).
    #[arg(
        long,
        value_name = "N",
        default_value = "64",
        value_parser = checked(max_descriptors),
        env = "RATELIMIT_MAX_DESCRIPTORS"
    )]
    pub(crate) max_descriptors: usize,

    /// The most entries in one descriptor.
    #[arg(
        long,
        value_name = "N",
        default_value = "32",
        value_parser = at_least(1, "32"),
        env = "RATELIMIT_MAX_ENTRIES"
    )]
    pub(crate) max_entries: usize,
}

/// The listeners, and the bounds on their connections.
#[derive(Debug, Args)]
#[command(next_help_heading = "Serving")]
#[group(skip)]
pub(crate) struct ServingFlags {
    /// The address of the gRPC listener (the rate limit service and
    /// grpc.health.v1). Without it, envoyproxy/ratelimit's GRPC_HOST and
    /// GRPC_PORT.
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:8081",
        value_parser = checked(addr),
        env = "RATELIMIT_GRPC"
    )]
    pub(crate) grpc: SocketAddr,

    /// Serves GET /metrics (Prometheus text format) on this address; off
    /// without it (or envoyproxy/ratelimit's USE_PROMETHEUS=true and
    /// PROMETHEUS_ADDR).
    #[arg(long, value_name = "ADDR", value_parser = checked(addr), env = "RATELIMIT_METRICS")]
    pub(crate) metrics: Option<SocketAddr>,

    /// Serves GET /healthcheck on this address, as envoyproxy/ratelimit
    /// does (the probe Envoy Gateway gives its rate limit deployment): 200
    /// OK while the service serves, 500 while it waits for its first xDS
    /// snapshot; closed on SIGTERM, as /metrics. It may be the --metrics
    /// address. Off without it (or envoyproxy/ratelimit's HOST and PORT).
    #[arg(long, value_name = "ADDR", value_parser = checked(addr), env = "RATELIMIT_HTTP")]
    pub(crate) http: Option<SocketAddr>,

    /// The most metric series whose key holds a request's values
    /// (detailed_metric, value_to_metric); 0: none.
    #[arg(
        long,
        value_name = "N",
        default_value = "10000",
        value_parser = checked(metric_keys),
        env = "RATELIMIT_MAX_METRIC_KEYS"
    )]
    pub(crate) max_metric_keys: usize,

    /// The most connections open at once, past which new ones are refused
    /// (by default 10000, or fewer when the open-file limit leaves fewer).
    #[arg(
        long,
        value_name = "N",
        value_parser = at_least(1, "10000"),
        env = "RATELIMIT_MAX_CONNECTIONS"
    )]
    pub(crate) max_connections: Option<usize>,

    /// The most calls at once on one connection.
    #[arg(
        long,
        value_name = "N",
        default_value = "1024",
        value_parser = checked(max_concurrent_streams),
        env = "RATELIMIT_MAX_CONCURRENT_STREAMS"
    )]
    pub(crate) max_concurrent_streams: u32,

    /// The largest request message, in bytes.
    #[arg(
        long,
        value_name = "BYTES",
        default_value = "1048576",
        value_parser = at_least(1, "1048576"),
        env = "RATELIMIT_MAX_MESSAGE_SIZE"
    )]
    pub(crate) max_message_size: usize,

    /// Closes a connection whose HTTP/2 handshake is not done within this
    /// duration.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10s",
        value_parser = checked(duration),
        env = "RATELIMIT_HANDSHAKE_TIMEOUT"
    )]
    pub(crate) handshake_timeout: Duration,

    /// Closes a connection on which no byte moved for this duration.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "300s",
        value_parser = checked(duration),
        env = "RATELIMIT_IDLE_TIMEOUT"
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
        env = "RATELIMIT_SHUTDOWN_TIMEOUT"
    )]
    pub(crate) shutdown_timeout: Duration,
}
