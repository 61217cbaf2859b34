//! Error types.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

/// A rate string that could not be parsed, with what is wrong and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseRateError {
    pub(crate) input: String,
    position: usize,
    message: Cow<'static, str>,
}

impl ParseRateError {
    pub(crate) fn new(input: &str, position: usize, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            input: input.to_owned(),
            position,
            message: message.into(),
        }
    }

    /// Byte offset in the input where the problem starts (always on a
    /// character boundary, so `&input[position..]` is the rest from there).
    pub fn position(&self) -> usize {
        self.position
    }
}

impl fmt::Display for ParseRateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid rate {:?} at byte {}: {}",
            self.input, self.position, self.message
        )
    }
}

impl std::error::Error for ParseRateError {}

/// A limiter configuration that [`RateLimiterBuilder::build`](crate::RateLimiterBuilder::build) rejected.
///
/// The message names the offending field, e.g. `quota[1].burst: must be at least 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    field: String,
    message: String,
}

impl ConfigError {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The configuration field at fault, e.g. `prefix` or `quota[0].rate.count`.
    pub fn field(&self) -> &str {
        &self.field
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid rate limiter configuration: {}: {}",
            self.field, self.message
        )
    }
}

impl std::error::Error for ConfigError {}

/// A store could not give a decision.
///
/// Under the middleware this is handled by the
/// [failure policy](crate::FailurePolicy) rather than surfaced to the client.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// The store did not answer within its timeout. The call may or may not
    /// have been applied; it is never replayed.
    Timeout(Duration),
    /// Redis (or the connection pool) returned an error.
    Redis(redis::RedisError),
    /// No connection could be taken from the pool.
    Pool(String),
    /// The store answered with something this crate does not understand.
    Protocol(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Timeout(d) => write!(f, "rate limit store timed out after {d:?}"),
            StoreError::Redis(e) => write!(f, "rate limit store error: {e}"),
            StoreError::Pool(e) => write!(f, "rate limit store pool error: {e}"),
            StoreError::Protocol(e) => write!(f, "unexpected reply from rate limit store: {e}"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Redis(e) => Some(e),
            _ => None,
        }
    }
}

impl From<redis::RedisError> for StoreError {
    fn from(e: redis::RedisError) -> Self {
        StoreError::Redis(e)
    }
}
