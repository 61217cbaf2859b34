//! Error types.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

#[doc(inline)]
pub use crate::rate::ParseRateError;
#[doc(inline)]
pub use crate::strategy::ParseStrategyError;

/// A limiter configuration that [`RateLimiterBuilder::build`](crate::limiter::RateLimiterBuilder::build) rejected.
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

    /// The same error about another field.
    pub(crate) fn with_field(self, field: String) -> Self {
        Self { field, ..self }
    }

    /// The same error, its field inside `path` (`plans.pro` and
    /// `quotas[1].rate` make `plans.pro.quotas[1].rate`).
    pub(crate) fn within(self, path: &str) -> Self {
        let field = if self.field.is_empty() {
            path.to_owned()
        } else if self.field.starts_with('[') {
            format!("{path}{}", self.field)
        } else {
            format!("{path}.{}", self.field)
        };
        Self { field, ..self }
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

/// The boxed cause of a [`StoreError`]: the error of the Redis client or of
/// its connection pool, reachable through [`Error::source`](std::error::Error::source).
type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A store could not give a decision.
///
/// Under the middleware this is handled by the
/// [failure policy](crate::middleware::FailurePolicy) rather than surfaced to the client.
///
/// The Redis client's own error is not part of this type's shape: it is the
/// [`source`](std::error::Error::source) of a [`Redis`](Self::Redis) or
/// [`Pool`](Self::Pool) error, which can be downcast to inspect it:
///
/// ```
/// use std::error::Error as _;
///
/// use tower_redis_ratelimit::error::StoreError;
///
/// fn is_out_of_memory(e: &StoreError) -> bool {
///     e.source()
///         .and_then(|s| s.downcast_ref::<tower_redis_ratelimit::redis::RedisError>())
///         .is_some_and(|e| e.code() == Some("OOM"))
/// }
/// # let _ = is_out_of_memory;
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// The store did not answer within its timeout. The call may or may not
    /// have been applied; it is never replayed.
    Timeout(Duration),
    /// Redis returned an error, or the connection to it failed (its cause,
    /// the client's error, is the [`source`](std::error::Error::source)).
    Redis(Source),
    /// No connection could be taken from the pool (the pool's error is the
    /// [`source`](std::error::Error::source)).
    Pool(Source),
    /// The store answered with something this crate does not understand.
    Protocol(String),
    /// The Redis server refuses what the limiter needs, and will until it
    /// is configured otherwise: an ACL rule (`NOPERM`), a command renamed or
    /// disabled, a server too old, a key of another type (`WRONGTYPE`) or a
    /// value the script fails on. A misconfiguration, not an outage:
    /// retrying does not help, and the middleware applies its
    /// [refusal policy](crate::RateLimitLayer::on_refusal) (fail closed by
    /// default) rather than its failure policy.
    /// [`RateLimiter::verify`](crate::RateLimiter::verify) finds the
    /// permissions and commands at startup.
    Refused(Refusal),
    /// The call asked for what the limiter does not do, and nothing was
    /// sent to the store: a block longer than
    /// [`RateLimiter::MAX_BLOCK`](crate::RateLimiter::MAX_BLOCK), a block on
    /// a limiter built without blocking, settling another limiter's
    /// reservation. Retrying does not help; the message says what to change.
    Invalid(String),
    /// The call is larger than one store call may be, and nothing was sent
    /// to the store: a joint decision of more than
    /// [`AllOrNothing::MAX_PARTS`](crate::limiter::AllOrNothing::MAX_PARTS)
    /// parts, or whose parts log more than
    /// [`AllOrNothing::MAX_LOGGED`](crate::limiter::AllOrNothing::MAX_LOGGED)
    /// units together. One store call holds Redis (or the memory store's
    /// shards) for all of its run, so none may run long, whatever a client
    /// asks for; the message names the bound. The request is at fault, not
    /// the store: answer it as invalid (an Envoy service: `INVALID_ARGUMENT`),
    /// or decide it in smaller parts.
    TooLarge(String),
}

impl StoreError {
    /// Whether the store did not answer within its timeout (the call may
    /// have been applied).
    pub fn is_timeout(&self) -> bool {
        matches!(self, StoreError::Timeout(_))
    }

    /// A Redis (or connection) error.
    pub(crate) fn redis(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        StoreError::Redis(Box::new(e))
    }

    /// A connection pool error.
    pub(crate) fn pool(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        StoreError::Pool(Box::new(e))
    }

    /// An error of the same kind and message as `e`, for each of the
    /// callers one failed call answers (several tasks waiting on one local
    /// reservation's take): what `e` wraps is shared, so a caller matching
    /// on [`Refused`](Self::Refused) or [`Redis`](Self::Redis) sees the
    /// same as the caller of the call itself.
    pub(crate) fn shared(e: &Arc<StoreError>) -> Self {
        let wrapped = || -> Source { Box::new(Shared(e.clone())) };
        match &**e {
            StoreError::Timeout(d) => StoreError::Timeout(*d),
            StoreError::Protocol(m) => StoreError::Protocol(m.clone()),
            StoreError::Invalid(m) => StoreError::Invalid(m.clone()),
            StoreError::TooLarge(m) => StoreError::TooLarge(m.clone()),
            StoreError::Redis(_) => StoreError::Redis(wrapped()),
            StoreError::Pool(_) => StoreError::Pool(wrapped()),
            StoreError::Refused(r) => StoreError::Refused(Refusal {
                kind: r.kind,
                message: r.message.clone(),
                source: r.source.is_some().then(wrapped),
            }),
        }
    }
}

/// What a [`StoreError`] wraps (its source), shared by the copies
/// [`StoreError::shared`] makes: shown as that source, with its causes.
#[derive(Debug)]
struct Shared(Arc<StoreError>);

impl Shared {
    fn inner(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&*self.0).and_then(|s| match &*self.0 {
            // a refusal's source is the client's error, one level down
            StoreError::Refused(_) => s.source(),
            _ => Some(s),
        })
    }
}

impl fmt::Display for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.inner() {
            Some(e) => fmt::Display::fmt(e, f),
            None => fmt::Display::fmt(&*self.0, f),
        }
    }
}

impl std::error::Error for Shared {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner().and_then(std::error::Error::source)
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Timeout(d) => write!(f, "rate limit store timed out after {d:?}"),
            StoreError::Redis(e) => write!(f, "rate limit store error: {e}"),
            StoreError::Pool(e) => write!(f, "rate limit store pool error: {e}"),
            StoreError::Protocol(e) => write!(f, "unexpected reply from rate limit store: {e}"),
            StoreError::Refused(r) => write!(f, "rate limit store refused: {r}"),
            StoreError::Invalid(m) => write!(f, "invalid rate limiter call: {m}"),
            StoreError::TooLarge(m) => write!(f, "rate limiter call too large: {m}"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Redis(e) | StoreError::Pool(e) => Some(&**e),
            StoreError::Refused(r) => Some(r),
            StoreError::Timeout(_)
            | StoreError::Protocol(_)
            | StoreError::Invalid(_)
            | StoreError::TooLarge(_) => None,
        }
    }
}

/// What a Redis server refused for good (a [`StoreError::Refused`]): its
/// [`kind`](Self::kind) and the server's own message. The Redis client's
/// error, when there is one, is the [`source`](std::error::Error::source).
#[derive(Debug)]
pub struct Refusal {
    kind: RefusalKind,
    message: String,
    source: Option<Source>,
}

/// Why a Redis server refuses what a limiter needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefusalKind {
    /// `NOPERM`: an ACL rule denies the user a command or a key the limiter
    /// needs (the "ACL users" of the [stores chapter](crate::guide::stores)
    /// lists them).
    NoPermission,
    /// The server does not know a command the limiter sends (`EVALSHA`,
    /// `SCRIPT LOAD`, ...): it was renamed or disabled (`rename-command`, a
    /// managed service without Lua), or the server predates it.
    UnknownCommand,
    /// The server is older than the limiter supports (Redis 5.0: the scripts
    /// read `TIME` and then write, which needs effects replication).
    ServerTooOld,
    /// `WRONGTYPE`: a key of the limiter holds a value of another type: a
    /// key another application wrote under the prefix, or one a limiter on
    /// another clock keeps in another layout (see the [keys chapter](crate::guide::keys#storage-keys)). It
    /// lasts until that key is deleted or expires.
    WrongType,
    /// A limiter script failed while running (a Lua runtime error, such as
    /// arithmetic on a value another application wrote under the prefix):
    /// the same call fails the same way until the key changes.
    ScriptError,
    /// Redis's `TIME`, read in a script, answers a time far from this
    /// process's clock (0 on Dragonfly), found by
    /// [`RateLimiter::verify`](crate::RateLimiter::verify) on Redis's clock;
    /// the message names the fix: [`Clock::Caller`](crate::clock::Clock::Caller).
    BrokenClock,
}

impl Refusal {
    /// A refusal of `kind` with the server's `message` and the client's
    /// error (see `store::redis::error`, which tells the kind).
    pub(crate) fn new(kind: RefusalKind, message: String, source: Option<Source>) -> Self {
        Refusal {
            kind,
            message,
            source,
        }
    }

    /// A server older than the limiter supports.
    pub(crate) fn too_old(version: &str) -> Self {
        Refusal {
            kind: RefusalKind::ServerTooOld,
            message: format!("the server runs Redis {version}; the limiter needs 5.0 or later"),
            source: None,
        }
    }

    /// The same refusal with `message` instead of the server's.
    pub(crate) fn with_message(self, message: String) -> Self {
        Refusal { message, ..self }
    }

    /// Why the server refused.
    pub fn kind(&self) -> RefusalKind {
        self.kind
    }

    /// The server's message (or, for [`RefusalKind::ServerTooOld`], the version found).
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hint = match self.kind {
            RefusalKind::NoPermission => {
                "no ACL permission (NOPERM); the limiter's user needs the commands and key \
                 patterns of the minimal ACL in the guide \
                 (tower_redis_ratelimit::guide::stores, \"ACL users\")"
            }
            RefusalKind::UnknownCommand => {
                "unknown command: renamed or disabled on this server (rename-command, or a \
                 service without Lua scripting), or the server is too old"
            }
            RefusalKind::ServerTooOld => "server too old",
            RefusalKind::WrongType => {
                "a key of the limiter holds another type (WRONGTYPE): another application's \
                 key under the prefix, or a limiter on another clock; give each a prefix of \
                 its own"
            }
            RefusalKind::BrokenClock => "the server's clock is unusable in scripts",
            RefusalKind::ScriptError => {
                "the limiter's script failed on a key's value: another application's key \
                 under the prefix?"
            }
        };
        write!(f, "{hint}: {}", self.message)
    }
}

impl std::error::Error for Refusal {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn a_shared_error_is_the_same_kind_message_and_causes() {
        let io = || std::io::Error::other("Connection refused");
        let chain = |e: &StoreError| {
            let mut out = vec![e.to_string()];
            let mut next = e.source();
            while let Some(s) = next {
                out.push(s.to_string());
                next = s.source();
            }
            out
        };
        let refusal = |source: Option<Source>| Refusal {
            kind: RefusalKind::NoPermission,
            message: "NOPERM no permissions".to_owned(),
            source,
        };
        for e in [
            StoreError::redis(io()),
            StoreError::pool(io()),
            StoreError::Timeout(Duration::from_millis(100)),
            StoreError::Protocol("odd".to_owned()),
            StoreError::TooLarge("300 parts".to_owned()),
            StoreError::Refused(refusal(Some(Box::new(io())))),
            StoreError::Refused(refusal(None)),
        ] {
            let want = chain(&e);
            let e = Arc::new(e);
            let copy = StoreError::shared(&e);
            assert_eq!(chain(&copy), want);
            assert_eq!(std::mem::discriminant(&copy), std::mem::discriminant(&*e));
            if let (StoreError::Refused(a), StoreError::Refused(b)) = (&copy, &*e) {
                assert_eq!(a.kind(), b.kind());
            }
        }
    }

    #[test]
    fn store_error_keeps_the_client_error_as_its_source_only() {
        fn shareable<T: std::error::Error + Send + Sync + 'static>() {}
        shareable::<StoreError>();

        let e = StoreError::redis(redis::RedisError::from((
            redis::ErrorKind::Io,
            "connection refused",
        )));
        assert!(e.to_string().starts_with("rate limit store error: "), "{e}");
        assert!(e.to_string().contains("connection refused"), "{e}");
        let source = e.source().expect("a Redis error has its source");
        assert!(source.downcast_ref::<redis::RedisError>().is_some());
        assert!(!e.is_timeout());

        let t = StoreError::Timeout(Duration::from_millis(100));
        assert!(t.is_timeout());
        assert!(t.source().is_none());
        assert_eq!(t.to_string(), "rate limit store timed out after 100ms");
    }
}
