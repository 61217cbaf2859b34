//! Reading a directory of configuration files within the bounds of
//! [`Config`]: [`Config::read_dir`] (the files, unparsed) and
//! [`Config::load_dir`] (read, then loaded).

use std::path::{Path, PathBuf};

use super::{Config, ConfigError, LoadOptions};

impl Config {
    /// Loads the files of `dir` and its subdirectories whose names end in
    /// `.yaml` or `.yml`, in the order of their paths; errors and warnings
    /// name a file by its path relative to `dir`. Names starting with `.`
    /// are skipped (so a Kubernetes ConfigMap's `..data` links are read
    /// once); symbolic links are followed.
    pub fn load_dir(dir: &Path, options: LoadOptions) -> Result<Config, ConfigError> {
        let sources = Config::read_dir(dir)?;
        Config::from_sources(
            sources.iter().map(|(n, t)| (n.as_str(), t.as_str())),
            options,
        )
    }

    /// The files [`load_dir`](Self::load_dir) reads, as `(name, contents)`
    /// in the order it loads them, unparsed (give them to
    /// [`from_sources`](Self::from_sources)); a watcher compares them to
    /// see whether anything changed.
    ///
    /// Rejected, naming the file or the directory: more than
    /// [`MAX_FILES`](Self::MAX_FILES) files or
    /// [`MAX_DIR_ENTRIES`](Self::MAX_DIR_ENTRIES) entries, a file larger
    /// than [`MAX_FILE_BYTES`](Self::MAX_FILE_BYTES) or files larger than
    /// [`MAX_TOTAL_BYTES`](Self::MAX_TOTAL_BYTES) together (before they are
    /// read), a name that is not a regular file (a FIFO, a device, a link
    /// to nothing), a file that is not UTF-8, and whatever cannot be read
    /// (an error of the machine is [`transient`](ConfigError::transient)).
    /// An empty directory gives no files.
    pub fn read_dir(dir: &Path) -> Result<Vec<(String, String)>, ConfigError> {
        let mut files = Vec::new();
        let mut entries = 0;
        collect(dir, dir, &mut files, &mut entries)?;
        files.sort();
        let mut sources = Vec::with_capacity(files.len());
        let mut total = 0usize;
        for path in files {
            let name = path
                .strip_prefix(dir)
                .unwrap_or(&path)
                .display()
                .to_string();
            let text = read_file(&path, &name, Config::MAX_TOTAL_BYTES - total)?;
            total += text.len();
            sources.push((name, text));
        }
        Ok(sources)
    }
}

/// Adds the configuration files under `dir` to `out`; `entries` counts
/// the entries looked at.
fn collect(
    root: &Path,
    dir: &Path,
    out: &mut Vec<PathBuf>,
    entries: &mut usize,
) -> Result<(), ConfigError> {
    let name = |path: &Path| {
        if path == root {
            root.display().to_string()
        } else {
            path.strip_prefix(root)
                .unwrap_or(path)
                .display()
                .to_string()
        }
    };
    let unreadable = |path: &Path, e: std::io::Error| ConfigError {
        file: name(path),
        path: String::new(),
        line: 0,
        message: format!("cannot read: {e}"),
        // (a directory that is not there is a mistake, not a race)
        transient: is_transient(path, &e)
            && !(path == root && e.kind() == std::io::ErrorKind::NotFound),
    };
    let listing = std::fs::read_dir(dir).map_err(|e| unreadable(dir, e))?;
    for entry in listing {
        let entry = entry.map_err(|e| unreadable(dir, e))?;
        *entries += 1;
        if *entries > Config::MAX_DIR_ENTRIES {
            return Err(too_many(
                root,
                format!(
                    "more than {} entries (files, directories, links): refused",
                    Config::MAX_DIR_ENTRIES
                ),
            ));
        }
        let path = entry.path();
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let kind = entry.file_type().map_err(|e| unreadable(&path, e))?;
        // follows a symbolic link (Kubernetes mounts a ConfigMap's files
        // as links into a `..data` directory)
        let is_dir = kind.is_dir() || (kind.is_symlink() && path.is_dir());
        if is_dir {
            collect(root, &path, out, entries)?;
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            if out.len() == Config::MAX_FILES {
                return Err(too_many(
                    root,
                    format!(
                        "more than {} configuration files (.yaml, .yml): refused",
                        Config::MAX_FILES
                    ),
                ));
            }
            out.push(path);
        }
    }
    Ok(())
}

/// An error of the directory `root` as a whole: a bound passed.
fn too_many(root: &Path, message: String) -> ConfigError {
    ConfigError {
        file: root.display().to_string(),
        path: String::new(),
        line: 0,
        message,
        transient: false,
    }
}

/// Reads the configuration file `path` (named `name`), of at most
/// [`Config::MAX_FILE_BYTES`] and `room` bytes, checking its size before
/// reading it.
fn read_file(path: &Path, name: &str, room: usize) -> Result<String, ConfigError> {
    use std::io::Read;
    let err = |message: String, transient: bool| ConfigError {
        file: name.to_owned(),
        path: String::new(),
        line: 0,
        message,
        transient,
    };
    let io = |e: std::io::Error| {
        let transient = is_transient(path, &e);
        err(format!("cannot read: {e}"), transient)
    };
    let too_large = |size: u64| {
        if size > Config::MAX_FILE_BYTES as u64 {
            Some(err(
                format!(
                    "{size} bytes: a configuration file may hold at most {} MiB",
                    Config::MAX_FILE_BYTES >> 20
                ),
                false,
            ))
        } else if size > room as u64 {
            Some(err(
                format!(
                    "the configuration files hold more than {} MiB together (this one {size} bytes)",
                    Config::MAX_TOTAL_BYTES >> 20
                ),
                false,
            ))
        } else {
            None
        }
    };
    // (follows a link; a FIFO would block the read, a device never end it)
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() {
        return Err(err(
            "not a regular file (a configuration file must be one)".to_owned(),
            false,
        ));
    }
    if let Some(e) = too_large(meta.len()) {
        return Err(e);
    }
    let limit = Config::MAX_FILE_BYTES.min(room);
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0).min(limit));
    std::fs::File::open(path)
        .and_then(|f| f.take(limit as u64 + 1).read_to_end(&mut bytes))
        .map_err(io)?;
    // (grown since its size was read)
    if let Some(e) = too_large(bytes.len() as u64) {
        return Err(e);
    }
    String::from_utf8(bytes).map_err(|e| {
        err(
            format!(
                "cannot read: not UTF-8 text (an invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
            false,
        )
    })
}

/// Whether `e`, met reading `path`, is of the machine rather than of the
/// configuration: out of file descriptors or memory, interrupted, busy,
/// timed out, or `path` gone (listed, then removed before it was read; a
/// link to nothing is the configuration's).
pub(super) fn is_transient(path: &Path, e: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    // EMFILE and ENFILE (the same on Linux, macOS and the BSDs), which
    // std maps to no kind of their own
    #[cfg(unix)]
    if matches!(e.raw_os_error(), Some(23 | 24)) {
        return true;
    }
    match e.kind() {
        ErrorKind::Interrupted
        | ErrorKind::WouldBlock
        | ErrorKind::OutOfMemory
        | ErrorKind::TimedOut
        | ErrorKind::ResourceBusy => true,
        ErrorKind::NotFound => path
            .symlink_metadata()
            .is_err_and(|m| m.kind() == ErrorKind::NotFound),
        _ => false,
    }
}
