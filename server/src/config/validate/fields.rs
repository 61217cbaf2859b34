//! What every check uses: the document being checked ([`Ctx`]), paths
//! inside it, and the readers of a field as yaml.v2 fills one (a string
//! from any scalar, a boolean, a whole number, a list), each rejecting
//! what does not fit with the path and line.

use super::super::yaml::{Kind, Node as Y, Scalar};
use super::super::{ConfigError, ConfigWarning};

/// The document being checked: its name, as errors and warnings give it,
/// and the warnings so far (kept only if the whole document checks).
pub(super) struct Ctx<'a> {
    /// The document's name (a file's path, an xDS resource).
    pub(super) file: &'a str,
    /// What the document holds that is ignored.
    pub(super) warnings: Vec<ConfigWarning>,
}

impl<'a> Ctx<'a> {
    /// A context for the document `file`, no warning yet.
    pub(super) fn new(file: &'a str) -> Self {
        Ctx {
            file,
            warnings: Vec::new(),
        }
    }

    /// The error `message` at `path`, `line` of the document.
    pub(super) fn err(&self, path: &str, line: usize, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.file.to_owned(),
            path: path.to_owned(),
            line,
            message: message.into(),
            transient: false,
        }
    }

    /// Notes that what is at `path`, `line` is ignored (`message`).
    pub(super) fn warn(&mut self, path: &str, line: usize, message: impl Into<String>) {
        self.warnings.push(ConfigWarning {
            file: self.file.to_owned(),
            path: path.to_owned(),
            line,
            message: message.into(),
        });
    }
}

/// The path of `key` inside `path` (`descriptors[0]` and `rate_limit`
/// make `descriptors[0].rate_limit`).
pub(super) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// A string field: any scalar's text, as yaml.v2 fills a string (null is
/// empty).
pub(super) fn string(ctx: &Ctx<'_>, v: &Y, path: &str) -> Result<String, ConfigError> {
    match v.scalar() {
        Some(Scalar::Null) => Ok(String::new()),
        Some(_) => Ok(v.text().unwrap_or_default().to_owned()),
        None => Err(ctx.err(
            path,
            v.line,
            format!("must be a string, not {}", v.describe()),
        )),
    }
}

/// A boolean field (null is false).
pub(super) fn boolean(ctx: &Ctx<'_>, v: &Y, path: &str) -> Result<bool, ConfigError> {
    match v.scalar() {
        Some(Scalar::Null) => Ok(false),
        Some(Scalar::Bool(b)) => Ok(b),
        _ => Err(ctx.err(
            path,
            v.line,
            format!(
                "must be true or false, not {} {:?}",
                v.describe(),
                v.text().unwrap_or_default()
            ),
        )),
    }
}

/// A non-negative integer field of at most `max` (null is 0).
pub(super) fn integer(ctx: &Ctx<'_>, v: &Y, path: &str, max: u64) -> Result<u64, ConfigError> {
    match v.scalar() {
        Some(Scalar::Null) => Ok(0),
        Some(Scalar::Int(n)) => u64::try_from(n)
            .ok()
            .filter(|n| *n <= max)
            .ok_or_else(|| ctx.err(path, v.line, format!("must be from 0 to {max}, not {n}"))),
        _ => Err(ctx.err(
            path,
            v.line,
            format!(
                "must be a whole number, not {} {:?}",
                v.describe(),
                v.text().unwrap_or_default()
            ),
        )),
    }
}

/// A list field, of mappings as the key check made sure (null is empty).
pub(super) fn list<'a>(ctx: &Ctx<'_>, v: &'a Y, path: &str) -> Result<&'a [Y], ConfigError> {
    match &v.kind {
        Kind::Seq(items) => Ok(items),
        _ if v.scalar() == Some(Scalar::Null) => Ok(&[]),
        _ => Err(ctx.err(
            path,
            v.line,
            format!("must be a list of mappings, not {}", v.describe()),
        )),
    }
}

/// The entries of a mapping (of nothing else: none).
pub(super) fn map_entries(v: &Y) -> &[(Y, Y)] {
    match &v.kind {
        Kind::Map(entries) => entries,
        _ => &[],
    }
}
