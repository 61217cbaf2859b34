//! The flags' value parsers: each takes the flag's name (or the
//! variable's) and its value, and says in its error what it takes
//! (`--max-entries "0": a number of at least 1, such as 32`); [`Checked`]
//! makes one a clap parser, whose error the binary reports as it is
//! ([`invalid`]).

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::time::Duration;

use clap::Arg;
use clap::builder::{PossibleValue, TypedValueParser};
use tower_redis_ratelimit_server::config::{Charge, OnStoreError};

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
pub(super) struct Checked<F> {
    parse: F,
    names: &'static [&'static str],
}

/// A [`Checked`] of any value.
pub(super) fn checked<T, F>(parse: F) -> Checked<F>
where
    F: Fn(&str, &str) -> Result<T, String>,
{
    Checked { parse, names: &[] }
}

/// A [`Checked`] of one of `names` (which `--help` lists).
pub(super) fn one_of<T, F>(parse: F, names: &'static [&'static str]) -> Checked<F>
where
    F: Fn(&str, &str) -> Result<T, String>,
{
    Checked { parse, names }
}

/// A [`Checked`] of a [`count`] of at least `min`, such as `example`.
pub(super) fn at_least(
    min: usize,
    example: &'static str,
) -> Checked<impl Fn(&str, &str) -> Result<usize, String> + Clone> {
    checked(move |flag: &str, v: &str| count(flag, v, min, example))
}

impl<T, F> TypedValueParser for Checked<F>
where
    T: Clone + Send + Sync + 'static,
    F: Fn(&str, &str) -> Result<T, String> + Clone + Send + Sync + 'static,
{
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
        let parse = self.parse.clone();
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

/// The names `--on-store-error` takes.
pub(super) const ON_STORE_ERROR: [&str; 3] = ["allow", "deny", "unavailable"];

/// The URLs of `--redis-cluster` or `--redis-sentinel`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Urls(pub(crate) Vec<String>);

/// The name a primary is monitored under: not empty.
pub(super) fn sentinel_master(flag: &str, v: &str) -> Result<String, String> {
    if v.trim().is_empty() {
        return Err(format!(
            "{flag}: empty; the name the sentinels monitor the primary under, such as mymaster"
        ));
    }
    Ok(v.to_owned())
}

/// One of [`ON_STORE_ERROR`], any case.
pub(super) fn on_store_error(flag: &str, v: &str) -> Result<OnStoreError, String> {
    OnStoreError::parse(v)
        .ok_or_else(|| format!("{flag} {v:?}: one of {}", ON_STORE_ERROR.join(", ")))
}

/// One of [`Charge::NAMES`].
pub(super) fn charge(flag: &str, v: &str) -> Result<Charge, String> {
    Charge::parse(v).ok_or_else(|| format!("{flag} {v:?}: one of {}", Charge::NAMES.join(", ")))
}

/// A number of metric keys, 0 for none.
pub(super) fn metric_keys(flag: &str, v: &str) -> Result<usize, String> {
    v.trim()
        .parse::<usize>()
        .map_err(|_| format!("{flag} {v:?}: a number of keys, such as 10000 (0: none)"))
}

/// A [`count`] of descriptors of at least 1, at most what one store call
/// decides.
pub(super) fn max_descriptors(flag: &str, v: &str) -> Result<usize, String> {
    let n = count(flag, v, 1, "64")?;
    let max = tower_redis_ratelimit::limiter::AllOrNothing::MAX_PARTS;
    if n > max {
        return Err(format!(
            "{flag} {v:?}: at most {max} (what one store call decides)"
        ));
    }
    Ok(n)
}

/// A [`count`] of calls of at least 1 that fits HTTP/2's settings (a
/// `u32`).
pub(super) fn max_concurrent_streams(flag: &str, v: &str) -> Result<u32, String> {
    let n = count(flag, v, 1, "1024")?;
    u32::try_from(n).map_err(|_| format!("{flag} {v:?}: at most {}", u32::MAX))
}

/// A store URL: `redis://`, `rediss://` (TLS), or a Unix socket's
/// `redis+unix://` or `unix://`.
pub(super) fn store_url(flag: &str, v: &str) -> Result<String, String> {
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

/// Whether `v` starts with a scheme of [`store_url`].
pub(super) fn has_scheme(v: &str) -> bool {
    ["redis://", "rediss://", "redis+unix://", "unix://"]
        .iter()
        .any(|s| v.starts_with(s))
}

/// A comma-separated list of store URLs, none empty.
pub(super) fn store_urls(flag: &str, v: &str) -> Result<Vec<String>, String> {
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

/// [`store_urls`] as [`Urls`].
pub(super) fn urls(flag: &str, v: &str) -> Result<Urls, String> {
    store_urls(flag, v).map(Urls)
}

/// A number of milliseconds, above 0.
pub(super) fn millis(flag: &str, v: &str) -> Result<Duration, String> {
    match v.trim().parse::<u64>() {
        Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(format!(
            "{flag} {v:?}: a number of milliseconds above 0, such as 100"
        )),
    }
}

/// A duration with its unit (`ms`, `s`, `m`, `h`), above 0.
pub(super) fn duration(flag: &str, v: &str) -> Result<Duration, String> {
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
pub(super) fn count(flag: &str, v: &str, min: usize, example: &str) -> Result<usize, String> {
    match v.trim().parse::<usize>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(format!(
            "{flag} {v:?}: a number of at least {min}, such as {example}"
        )),
    }
}

/// A socket address, `ip:port`.
pub(super) fn addr(flag: &str, v: &str) -> Result<SocketAddr, String> {
    v.parse()
        .map_err(|e| format!("{flag} {v:?}: {e} (an address such as 0.0.0.0:8081)"))
}
