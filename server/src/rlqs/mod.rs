//! The rate limit quota service (RLQS,
//! `envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas`):
//! Envoys decide locally from the quotas it assigns and report their
//! usage; it divides each bucket's limit among them by demand, paying
//! every assignment from a budget in the shared store first, so that all
//! Envoys together stay within a stated bound ([`assign`]).
//!
//! - [`config`]: the quota files (one YAML file per domain).
//! - [`assign`]: the protocol-free core ([`QuotaService`]).
//! - [`stream`]: the gRPC service around it ([`RlqsService`]).
//! - [`metrics`]: its statistics.
//!
//! The guide's quota service chapter (`docs/`, and the README) shows the
//! Envoy filter configuration to point at it.

pub mod assign;
pub mod config;
pub mod metrics;
pub mod stream;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use assign::{
    Action, MARGIN, QuotaOptions, QuotaService, QuotaStream, Strategy, TokenBucket, Usage,
};
pub use config::DomainConfig;
pub use stream::RlqsService;

use crate::config::ConfigError;

/// The most files a quota directory may hold.
pub const MAX_FILES: usize = 1_000;
/// The most bytes a quota file may hold.
pub const MAX_FILE_BYTES: u64 = 4 << 20;

fn read_error(file: &Path, message: String) -> ConfigError {
    ConfigError {
        file: file.display().to_string(),
        path: String::new(),
        line: 0,
        message,
        transient: true,
    }
}

/// The files of `path` (a file, or a directory's `*.yaml` and `*.yml`
/// files, sorted by name) with their text.
pub fn read(path: &Path) -> Result<Vec<(String, String)>, ConfigError> {
    let meta = std::fs::metadata(path).map_err(|e| read_error(path, e.to_string()))?;
    let files: Vec<PathBuf> = if meta.is_dir() {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(path).map_err(|e| read_error(path, e.to_string()))? {
            let p = entry.map_err(|e| read_error(path, e.to_string()))?.path();
            let yaml = p.extension().is_some_and(|x| x == "yaml" || x == "yml");
            if yaml && p.is_file() {
                files.push(p);
            }
            if files.len() > MAX_FILES {
                return Err(ConfigError {
                    transient: false,
                    ..read_error(path, format!("more than {MAX_FILES} quota files"))
                });
            }
        }
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut out = Vec::with_capacity(files.len());
    for f in files {
        let size = std::fs::metadata(&f)
            .map_err(|e| read_error(&f, e.to_string()))?
            .len();
        if size > MAX_FILE_BYTES {
            return Err(ConfigError {
                transient: false,
                ..read_error(&f, format!("{size} bytes, more than {MAX_FILE_BYTES}"))
            });
        }
        let text = std::fs::read_to_string(&f).map_err(|e| read_error(&f, e.to_string()))?;
        let name = f.file_name().map_or_else(
            || f.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        out.push((name, text));
    }
    Ok(out)
}

/// Parses files as [`read`] gives them.
pub fn parse(files: &[(String, String)]) -> Result<Vec<DomainConfig>, ConfigError> {
    files
        .iter()
        .map(|(name, text)| DomainConfig::parse(name, text))
        .collect()
}

/// Reads and parses `path`.
pub fn load(path: &Path) -> Result<Vec<DomainConfig>, ConfigError> {
    parse(&read(path)?)
}

/// Reloads `service` from `path` every `interval` when its files change:
/// a valid set replaces the running one, an invalid one is logged (once
/// per change) and the running one stays. Runs until dropped.
pub async fn watch(
    service: QuotaService,
    path: PathBuf,
    interval: Duration,
    loaded: Vec<(String, String)>,
) {
    let mut last = loaded;
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let read_path = path.clone();
        let files = match tokio::task::spawn_blocking(move || read(&read_path)).await {
            Ok(Ok(f)) => f,
            Ok(Err(e)) if e.transient => {
                tracing::debug!("quota files: {e}: trying again");
                continue;
            }
            Ok(Err(e)) => {
                tracing::error!("quota files not reloaded: {e}");
                continue;
            }
            Err(_) => continue,
        };
        if files == last {
            continue;
        }
        match parse(&files)
            .map_err(|e| e.to_string())
            .and_then(|c| service.reload(c).map_err(|e| e.to_string()))
        {
            Ok(()) => tracing::info!(files = files.len(), "quota files reloaded"),
            Err(e) => tracing::error!("quota files not reloaded (the running ones stay): {e}"),
        }
        last = files;
    }
}
