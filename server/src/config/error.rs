//! What a loader reports: [`ConfigError`], why a configuration was
//! rejected, and [`ConfigWarning`], what it holds that is ignored; each
//! names the file, the path inside it and the line.

use std::fmt;

/// A warning about something a file holds that the Go service ignores too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    /// The file.
    pub file: String,
    /// The path inside it (`descriptors[0].rate_limit.shadow_mode`).
    pub path: String,
    /// The line, 1-based.
    pub line: usize,
    /// What is ignored.
    pub message: String,
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_located(f, &self.file, &self.path, self.line, &self.message)
    }
}

/// Why a configuration was rejected: the file, the path inside it, the
/// line and what is wrong, displayed as
/// `limits/api.yaml: descriptors[1].rate_limit.unit: unknown unit "fortnight" … (line 7)`.
///
/// # The library's error of the same name
///
/// The library has a `ConfigError` too,
/// [`tower_redis_ratelimit::error::ConfigError`]: a limiter that its
/// builder rejects, naming a field of the builder (`quota[0].burst`).
/// This one names a file (or an xDS resource), the path inside it and the
/// line, and has no [`source`](std::error::Error::source): what the
/// loader knows the library would reject of a rule (a period past 366
/// days, a `burst` past 2^40, ...) it rejects itself, in the file's words,
/// so that a loaded configuration builds. A rule the library rejects all
/// the same is reported when the service is built or reloaded, by
/// `BuildError`: the rule's file, path,
/// line and key, and the library's `ConfigError` as its
/// [`source`](std::error::Error::source).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (as given to the loader, or relative to the directory).
    pub file: String,
    /// The path inside the file; empty for the whole file.
    pub path: String,
    /// The line, 1-based; 0 when it is not known (an unreadable file).
    pub line: usize,
    /// What is wrong.
    pub message: String,
    /// The file or the directory could not be read for a reason of the
    /// machine, not of the configuration: too many open files, out of
    /// memory, interrupted, or a file listed a moment before and gone
    /// when read (as while a ConfigMap's files are swapped). Reading
    /// again later may succeed; [`ConfigWatcher`](crate::reload::ConfigWatcher)
    /// does, without counting a failed load.
    pub transient: bool,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_located(f, &self.file, &self.path, self.line, &self.message)
    }
}

impl std::error::Error for ConfigError {}

/// `file: path: message (line n)`, without the path when it is empty
/// and the line when it is 0.
fn write_located(
    f: &mut fmt::Formatter<'_>,
    file: &str,
    path: &str,
    line: usize,
    message: &str,
) -> fmt::Result {
    write!(f, "{file}: ")?;
    if !path.is_empty() {
        write!(f, "{path}: ")?;
    }
    f.write_str(message)?;
    if line > 0 {
        write!(f, " (line {line})")?;
    }
    Ok(())
}
