//! The files source: [`ConfigWatcher`] reloads a service when its
//! configuration directory changes.
//!
//! The watcher polls: every [`interval`](ConfigWatcher::interval) (250 ms
//! by default) it reads the directory's files as the loader does
//! ([`Config::read_dir`]) and compares their names and contents with the
//! ones running. Reading a few files four times a second costs little, and
//! it sees every way a configuration changes the same: a Kubernetes
//! ConfigMap's `..data` link swapped to a new directory, an editor's write
//! to a temporary file renamed over the old one, a write in place, a
//! volume whose file system sends no change events (network, overlay and
//! bind mounts, a container on a virtual machine) — where event-based
//! watching has to follow links, re-arm watches on replaced directories and
//! may miss or merge events, a comparison of contents cannot.
//!
//! A change is loaded once it reads the same twice, 50 ms apart (a file
//! being written in place is not loaded half written). A valid change is
//! swapped in with [`RlsService::reload`]; an invalid one is logged with
//! its file and the path inside it, counted as a failed load, and the
//! running configuration stays (it is reported once, until the files
//! change again). A directory that cannot be read for a reason of the
//! machine ([`ConfigError::transient`]: too many open files, say) is no
//! failed load: the running configuration stays, the problem is logged as a
//! warning (once, until it changes) and the next check reads again.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::{Config, ConfigError, Document, LoadOptions};
use crate::service::{BuildError, RlsService};

/// The files of a directory, as `(name, contents)`.
type Sources = Vec<(String, String)>;

/// What one [`check`](ConfigWatcher::check) did.
#[derive(Debug)]
#[non_exhaustive]
pub enum Reload {
    /// The files are the running ones (or the last rejected ones, or were
    /// still changing).
    Unchanged,
    /// The new files are running.
    Reloaded,
    /// The new files were rejected; the running configuration stays.
    Failed(ReloadError),
    /// The directory could not be read for a reason of the machine
    /// ([`ConfigError::transient`]); nothing changed, no failed load is
    /// counted, and the next check reads again.
    Unreadable(ConfigError),
}

/// Why a reload was rejected.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReloadError {
    /// A file could not be read or is not a valid configuration (the error
    /// names the file, the path inside it and the line).
    Config(ConfigError),
    /// A limit the library rejects.
    Build(BuildError),
}

impl std::fmt::Display for ReloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReloadError::Config(e) => e.fmt(f),
            ReloadError::Build(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ReloadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReloadError::Config(e) => Some(e),
            ReloadError::Build(e) => Some(e),
        }
    }
}

/// Reloads an [`RlsService`] when the files of its configuration
/// directory change: [`run`](Self::run) it on a task.
///
/// ```no_run
/// # async fn f(service: tower_redis_ratelimit_server::service::RlsService) -> Result<(), Box<dyn std::error::Error>> {
/// use tower_redis_ratelimit_server::config::{Config, LoadOptions};
/// use tower_redis_ratelimit_server::reload::ConfigWatcher;
///
/// let dir = std::path::PathBuf::from("/etc/ratelimit/config");
/// let files = Config::read_dir(&dir)?;
/// // ... the service built from `Config::from_sources(files...)` ...
/// let watcher = ConfigWatcher::new(service, dir, LoadOptions::default()).loaded_from(files);
/// tokio::spawn(watcher.run());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ConfigWatcher {
    service: RlsService,
    dir: PathBuf,
    options: LoadOptions,
    interval: Duration,
    /// The files running (`None`: unknown, the first check loads).
    running: Option<Sources>,
    /// The files last rejected, or the last read error.
    rejected: Option<Result<Sources, String>>,
    /// The last transient read error, as logged.
    unreadable: Option<String>,
    /// Reads the directory ([`Config::read_dir`]; another in tests).
    read_dir: fn(&Path) -> Result<Sources, ConfigError>,
    /// Whether a configuration with no rule is applied ([`allow_empty`](Self::allow_empty)).
    allow_empty: bool,
}

impl ConfigWatcher {
    /// A watcher of `dir` for `service`, loading with `options`.
    pub fn new(service: RlsService, dir: impl Into<PathBuf>, options: LoadOptions) -> Self {
        Self {
            service,
            dir: dir.into(),
            options,
            interval: Duration::from_millis(250),
            running: None,
            rejected: None,
            unreadable: None,
            read_dir: Config::read_dir,
            allow_empty: false,
        }
    }

    /// Whether a change to files that hold no rule (none left, or only
    /// empty domains) is applied, allowing every request (the binary's
    /// `--allow-empty-config`). Default: no, it is rejected as an invalid
    /// change and the running limits stay: a ConfigMap emptied by mistake
    /// must not lift every limit.
    #[must_use]
    pub fn allow_empty(mut self, allow: bool) -> Self {
        self.allow_empty = allow;
        self
    }

    /// The files the service's configuration was loaded from
    /// ([`Config::read_dir`]); without them the first check reloads
    /// whatever the directory holds.
    #[must_use]
    pub fn loaded_from(mut self, files: Vec<(String, String)>) -> Self {
        self.running = Some(files);
        self
    }

    /// How often the directory is read (default 250 ms; at least 10 ms).
    #[must_use]
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval.max(Duration::from_millis(10));
        self
    }

    /// Checks the directory every [`interval`](Self::interval), forever.
    pub async fn run(mut self) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.check().await;
        }
    }

    /// Reads the directory once; reloads the service if the files changed
    /// (and read the same again 50 ms later), logging the outcome.
    pub async fn check(&mut self) -> Reload {
        let sources = match self.read().await {
            Ok(s) => {
                self.unreadable = None;
                s
            }
            Err(e) if e.transient => {
                let text = e.to_string();
                if self.unreadable.as_ref() != Some(&text) {
                    tracing::warn!(
                        "configuration directory not read (a problem of the machine, not of the \
                         files; the running configuration stays, read again in {:?}): {text}",
                        self.interval
                    );
                    self.unreadable = Some(text);
                }
                return Reload::Unreadable(e);
            }
            Err(e) => {
                let text = e.to_string();
                if matches!(&self.rejected, Some(Err(t)) if *t == text) {
                    return Reload::Unchanged;
                }
                tracing::error!("configuration not reloaded: {text}");
                self.service.metrics().config_loaded(false);
                self.rejected = Some(Err(text));
                return Reload::Failed(ReloadError::Config(e));
            }
        };
        if self.running.as_ref() == Some(&sources) {
            // (back to the running files: a rejected change made again is
            // reported again)
            self.rejected = None;
            return Reload::Unchanged;
        }
        if matches!(&self.rejected, Some(Ok(r)) if *r == sources) {
            return Reload::Unchanged;
        }
        // still being written? wait for it to read the same twice
        tokio::time::sleep(Duration::from_millis(50)).await;
        match self.read().await {
            Ok(again) if again == sources => {}
            _ => return Reload::Unchanged,
        }
        let loaded = super::load(
            sources.iter().map(|(n, t)| Document::parse(n.as_str(), t)),
            self.options,
        );
        let config = match loaded {
            Ok(c) => c,
            Err(e) => {
                tracing::error!("configuration not reloaded, the running one stays: {e}");
                self.service.metrics().config_loaded(false);
                self.rejected = Some(Ok(sources));
                return Reload::Failed(ReloadError::Config(e));
            }
        };
        for w in config.warnings() {
            tracing::warn!("{w}");
        }
        if config.is_empty() {
            let what = if sources.is_empty() {
                "no configuration files"
            } else {
                "no rule in the configuration files"
            };
            if !self.allow_empty {
                let e = ConfigError {
                    file: self.dir.display().to_string(),
                    path: String::new(),
                    line: 0,
                    message: format!(
                        "{what}: a change that would allow every request is refused \
                         (--allow-empty-config to apply it)"
                    ),
                    transient: false,
                };
                tracing::error!("configuration not reloaded, the running one stays: {e}");
                self.service.metrics().config_loaded(false);
                self.rejected = Some(Ok(sources));
                return Reload::Failed(ReloadError::Config(e));
            }
            tracing::warn!(dir = %self.dir.display(), "{what}: every request is allowed (--allow-empty-config)");
        }
        let domains = config.domains().count();
        match self.service.reload(config) {
            Ok(()) => {
                tracing::info!(domains, "configuration reloaded");
                self.running = Some(sources);
                self.rejected = None;
                Reload::Reloaded
            }
            Err(e) => {
                tracing::error!("configuration not reloaded, the running one stays: {e}");
                self.rejected = Some(Ok(sources));
                Reload::Failed(ReloadError::Build(e))
            }
        }
    }

    async fn read(&self) -> Result<Sources, ConfigError> {
        let dir = self.dir.clone();
        let read_dir = self.read_dir;
        match tokio::task::spawn_blocking(move || read_dir(&dir)).await {
            Ok(r) => r,
            Err(e) => Err(ConfigError {
                file: self.dir.display().to_string(),
                path: String::new(),
                line: 0,
                message: format!("cannot read: {e}"),
                transient: true,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use tower_redis_ratelimit::MemoryStore;

    use super::*;
    use crate::metrics::CONFIG_LOAD_ERROR;
    use crate::service::ServiceOptions;

    const RUNNING: &str = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n";

    fn error(message: &str, transient: bool) -> ConfigError {
        ConfigError {
            file: "limits".to_owned(),
            path: String::new(),
            line: 0,
            message: message.to_owned(),
            transient,
        }
    }

    /// The failed loads counted.
    fn failed(service: &RlsService) -> u64 {
        let text = service.metrics().render();
        text.lines()
            .find(|l| l.starts_with(CONFIG_LOAD_ERROR))
            .and_then(|l| l.rsplit(' ').next())
            .map_or(0, |n| n.parse().unwrap_or(u64::MAX))
    }

    // issue 34, point 5: the watcher counted "Too many open files" as a
    // configuration error
    #[tokio::test]
    async fn a_read_error_of_the_machine_is_no_failed_load_and_replaces_nothing() {
        let files = vec![("a.yaml".to_owned(), RUNNING.to_owned())];
        let config = Config::from_sources([("a.yaml", RUNNING)], LoadOptions::default()).unwrap();
        let service =
            RlsService::new(config, MemoryStore::new(), ServiceOptions::default()).unwrap();
        let mut w = ConfigWatcher::new(service.clone(), "limits", LoadOptions::default())
            .loaded_from(files);
        w.read_dir = |_| {
            Err(error(
                "cannot read: Too many open files (os error 24)",
                true,
            ))
        };
        for _ in 0..3 {
            match w.check().await {
                Reload::Unreadable(e) => assert!(e.transient && e.message.contains("open files")),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(failed(&service), 0);
        assert_eq!(service.config().rule_count(), 1);
        assert_eq!(
            w.unreadable.as_deref(),
            Some("limits: cannot read: Too many open files (os error 24)")
        );
        // readable again: the running files, nothing to do
        w.read_dir = |_| Ok(vec![("a.yaml".to_owned(), RUNNING.to_owned())]);
        assert!(matches!(w.check().await, Reload::Unchanged));
        assert_eq!(w.unreadable, None);
        // an error of the configuration is a failed load, counted once
        w.read_dir = |_| Err(error("cannot read: Permission denied (os error 13)", false));
        assert!(matches!(
            w.check().await,
            Reload::Failed(ReloadError::Config(_))
        ));
        assert!(matches!(w.check().await, Reload::Unchanged));
        assert_eq!(failed(&service), 1);
        assert_eq!(service.config().rule_count(), 1);
    }
}
