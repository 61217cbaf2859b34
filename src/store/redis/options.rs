//! What the builders of every Redis store share: the call timeout and the
//! number of multiplexed connections ([`Common`], checked at build with the
//! same messages for every store), and the errors of URLs that do not parse.

use std::fmt::Display;
use std::time::Duration;

use crate::error::ConfigError;

/// The options every Redis store's builder sets alike.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Common {
    /// Bounds every store call, taking a connection included.
    pub(crate) timeout: Duration,
    /// How many pooled connections calls are multiplexed over, as asked
    /// (0 is rejected by [`validate`](Self::validate)).
    pub(crate) connections: usize,
    /// Whether concurrent decisions of a limiter go out together, several
    /// per script call (`batch.rs`).
    pub(crate) batching: bool,
}

impl Common {
    /// Default bound on one store call: a hung Redis never stalls a request longer.
    pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);

    /// One shared connection and the [`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT).
    pub(crate) const DEFAULT: Common = Common {
        timeout: Self::DEFAULT_TIMEOUT,
        connections: 1,
        batching: true,
    };

    /// Rejects options under which every call would fail; `store` names the
    /// store's type in the messages.
    pub(crate) fn validate(&self, store: &str) -> Result<(), ConfigError> {
        if self.timeout.is_zero() {
            return Err(ConfigError::new(
                "store.timeout",
                format!(
                    "must be greater than zero, or every call times out at once; \
                     use {store}::timeout(Duration::from_millis(100)) (the default) or more"
                ),
            ));
        }
        if self.connections == 0 {
            return Err(ConfigError::new(
                "store.connections",
                format!(
                    "must be at least 1: calls are multiplexed over this many pooled \
                     connections; use {store}::connections(1) (the default)"
                ),
            ));
        }
        Ok(())
    }
}

/// The URLs of a store of several nodes (`store.urls`), refused when there
/// is none: `what` names one (`seed node`), `example` is one.
#[cfg(any(feature = "cluster", feature = "sentinel"))]
pub(crate) fn urls<I>(urls: I, what: &str, example: &str) -> Result<Vec<String>, ConfigError>
where
    I: IntoIterator,
    I::Item: Into<String>,
{
    let urls: Vec<String> = urls.into_iter().map(Into::into).collect();
    if urls.is_empty() {
        return Err(ConfigError::new(
            "store.urls",
            format!("no {what}; give at least one, e.g. [\"{example}\"]"),
        ));
    }
    Ok(urls)
}

/// A URL (or its certificates) that does not make a store: `not {what}
/// ({e})`, then what was `expected`, if said. The URL may hold a password:
/// it is never repeated.
pub(crate) fn bad_url(
    field: &str,
    what: &str,
    e: impl Display,
    expected: Option<&str>,
) -> ConfigError {
    let message = match expected {
        Some(expected) => format!("not {what} ({e}); expected {expected}"),
        None => format!("not {what} ({e})"),
    };
    ConfigError::new(field, message)
}
