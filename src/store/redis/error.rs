//! Redis client errors as [`StoreError`]s: which of them are refusals for
//! good ([`StoreError::Refused`], a misconfiguration) and which are outages
//! ([`StoreError::Redis`]).

use crate::error::{Refusal, RefusalKind, StoreError};

impl StoreError {
    /// A Redis client error: a [`Refused`](Self::Refused) if the server
    /// refused the command for good (`NOPERM`, an unknown command), else a
    /// [`Redis`](Self::Redis) error.
    pub(crate) fn from_redis(e: redis::RedisError) -> Self {
        match refusal_kind(&e) {
            Some(kind) => StoreError::Refused(Refusal::new(kind, e.to_string(), Some(Box::new(e)))),
            None => StoreError::redis(e),
        }
    }
}

/// The kind of a refusal for good, or `None` for any other error.
fn refusal_kind(e: &redis::RedisError) -> Option<RefusalKind> {
    let detail = e.detail().unwrap_or_default();
    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm)
        || e.code() == Some("NOPERM")
        || detail.contains("no permissions to")
        || detail.contains("No permissions to access")
        // an ACL refusal of a command a script calls comes as `ERR`
        || detail.contains("user executing the script can't")
    {
        Some(RefusalKind::NoPermission)
    } else if e.code() == Some("ERR")
        && (detail.starts_with("unknown command") || detail.starts_with("unknown subcommand"))
    {
        Some(RefusalKind::UnknownCommand)
    } else if TRANSIENT.iter().any(|t| detail.contains(t)) {
        // (Redis 6 wraps the error of a command a script calls in `ERR
        // Error running script …`: an outage inside a script stays one)
        None
    } else if e.code() == Some("WRONGTYPE")
        || (e.code() == Some("ERR") && detail.contains("WRONGTYPE"))
    {
        Some(RefusalKind::WrongType)
    } else if e.code() == Some("ERR")
        && (detail.contains("Error running script") || detail.contains("user_script:"))
    {
        Some(RefusalKind::ScriptError)
    } else {
        None
    }
}

/// Error codes of a Redis that cannot answer for now (out of memory, a
/// replica, loading, busy, failing over): inside a script's error they make
/// it an outage, not a refusal.
const TRANSIENT: &[&str] = &[
    "OOM",
    "READONLY",
    "LOADING",
    "BUSY",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "TRYAGAIN",
    "NOREPLICAS",
];
