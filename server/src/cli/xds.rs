//! xDS on the command line: where the limits come from (`--config-type`,
//! else envoyproxy/ratelimit's `CONFIG_TYPE`), and the xDS client's
//! settings ([`XdsArgs`]): each `--xds-*` flag, else its
//! envoyproxy/ratelimit variable (`CONFIG_GRPC_XDS_*`, `XDS_CLIENT_*`,
//! `FORCE_START_WITHOUT_INITIAL_CONFIG`), else the flag's default.

use std::path::PathBuf;
use std::time::Duration;

use super::Cli;
use super::go_env::go_bool;
use super::parse::{count, duration};

/// The names `--config-type` takes.
pub(super) const CONFIG_TYPES: [&str; 2] = ["files", "grpc-xds-sotw"];

/// Where the limits come from (`--config-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConfigType {
    /// A directory of files.
    Files,
    /// An xDS management server, state of the world over ADS.
    GrpcXdsSotw,
}

/// `files` or `grpc-xds-sotw`.
pub(super) fn config_type(flag: &str, v: &str) -> Result<ConfigType, String> {
    match v.trim() {
        "files" => Ok(ConfigType::Files),
        "grpc-xds-sotw" => Ok(ConfigType::GrpcXdsSotw),
        _ => Err(format!("{flag} {v:?}: files or grpc-xds-sotw")),
    }
}

/// `--xds-node-metadata`'s pairs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Metadata(pub(crate) Vec<(String, String)>);

/// `key=value,key=value` (an empty entry is skipped; one that is not
/// `KEY=VALUE` is refused, naming it).
pub(super) fn node_metadata(flag: &str, v: &str) -> Result<Metadata, String> {
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
    /// The management server (`host:port`, `http://` or `https://`).
    pub(crate) url: String,
    /// The node id the management server picks the snapshot by.
    pub(crate) node_id: String,
    /// The node's metadata.
    pub(crate) node_metadata: Vec<(String, String)>,
    /// TLS: the CA, the client certificate and key, the server's name.
    pub(crate) tls: Option<XdsTlsArgs>,
    /// The first and the longest wait before connecting again.
    pub(crate) backoff: (Duration, Duration),
    /// The largest response taken, in bytes.
    pub(crate) max_message_size: usize,
    /// Serve before the first snapshot.
    pub(crate) start_without_config: bool,
    /// Whether `--config` gives the limits until the first snapshot.
    pub(crate) files: bool,
}

/// TLS to the management server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct XdsTlsArgs {
    /// The PEM CA certificates the server is verified against (else the
    /// system's roots).
    pub(crate) ca: Option<PathBuf>,
    /// The client certificate and its key (PEM files).
    pub(crate) identity: Option<(PathBuf, PathBuf)>,
    /// The name the server's certificate is verified for (else the URL's
    /// host).
    pub(crate) server_name: Option<String>,
}

/// The xDS client's settings when the limits come from an xDS management
/// server (`--config-type`, else envoyproxy/ratelimit's `CONFIG_TYPE`:
/// `FILE`, `GRPC_XDS_SOTW`), unless `--validate` (which reads files).
pub(super) fn resolve(
    cli: &Cli,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<XdsArgs>, String> {
    let config_type = match env("CONFIG_TYPE") {
        _ if cli.given("config_type") => cli.xds.config_type,
        None => cli.xds.config_type,
        Some(v) if v.trim().eq_ignore_ascii_case("FILE") => ConfigType::Files,
        Some(v) if v.trim().eq_ignore_ascii_case("GRPC_XDS_SOTW") => ConfigType::GrpcXdsSotw,
        Some(v) => {
            return Err(format!(
                "CONFIG_TYPE={v:?}: FILE (--config-type files) or GRPC_XDS_SOTW \
                 (--config-type grpc-xds-sotw)"
            ));
        }
    };
    if config_type == ConfigType::GrpcXdsSotw && cli.configuration.validate.is_none() {
        Ok(Some(xds_args(cli, env)?))
    } else {
        Ok(None)
    }
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
        .map_or_else(|| cli.xds.xds_server_url.clone(), |v| v.trim().to_owned());
    let node_id = go("xds_node_id", "CONFIG_GRPC_XDS_NODE_ID")
        .map_or_else(|| cli.xds.xds_node_id.clone(), |v| v.trim().to_owned());
    let node_metadata = match go("xds_node_metadata", "CONFIG_GRPC_XDS_NODE_METADATA") {
        Some(v) => node_metadata("CONFIG_GRPC_XDS_NODE_METADATA", &v)?.0,
        None => cli
            .xds
            .xds_node_metadata
            .clone()
            .map(|m| m.0)
            .unwrap_or_default(),
    };
    let tls = match go("xds_tls", "CONFIG_GRPC_XDS_SERVER_USE_TLS") {
        Some(v) => go_bool("CONFIG_GRPC_XDS_SERVER_USE_TLS", &v)?,
        None => cli.xds.xds_tls,
    };
    let path = |id: &str, name: &str, flag: &Option<PathBuf>| {
        go(id, name).map(PathBuf::from).or_else(|| flag.clone())
    };
    let ca = path(
        "xds_tls_ca",
        "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
        &cli.xds.xds_tls_ca,
    );
    let cert = path(
        "xds_tls_cert",
        "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
        &cli.xds.xds_tls_cert,
    );
    let key = path(
        "xds_tls_key",
        "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
        &cli.xds.xds_tls_key,
    );
    let server_name = go("xds_tls_server_name", "CONFIG_GRPC_XDS_SERVER_TLS_SAN")
        .map(|v| v.trim().to_owned())
        .or_else(|| cli.xds.xds_tls_server_name.clone());
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
        cli.xds.xds_backoff_initial,
    )?;
    let max = backoff(
        "xds_backoff_max",
        "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
        cli.xds.xds_backoff_max,
    )?;
    if max < initial {
        return Err(format!(
            "--xds-backoff-max ({max:?}) is shorter than --xds-backoff-initial ({initial:?})"
        ));
    }
    let max_message_size = match go("xds_max_message_size", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES") {
        Some(v) => count("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", &v, 1024, "16777216")?,
        None => cli.xds.xds_max_message_size,
    };
    let start_without_config = match go(
        "xds_start_without_config",
        "FORCE_START_WITHOUT_INITIAL_CONFIG",
    ) {
        Some(v) => go_bool("FORCE_START_WITHOUT_INITIAL_CONFIG", &v)?,
        None => cli.xds.xds_start_without_config,
    };
    Ok(XdsArgs {
        url,
        node_id,
        node_metadata,
        tls,
        backoff: (initial, max),
        max_message_size,
        start_without_config,
        files: cli.configuration.config.is_some(),
    })
}
