//! [`RedisSentinelStore`]: limiter state in the primary that Redis Sentinel
//! names, followed through failovers.

use std::sync::Arc;
use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use redis::sentinel::{SentinelClient, SentinelServerType};

use super::conn::{Connections, Pooled};
use crate::error::{ConfigError, StoreError};

/// A store in the primary of a Redis Sentinel deployment, reached through a
/// `redis::sentinel::SentinelClient`.
///
/// The store asks the sentinels for the primary when it opens a connection
/// (redis-rs checks with `ROLE` that the node named is a primary), then
/// multiplexes every call over that connection, as [`RedisStore`](crate::RedisStore)
/// does: one `EVALSHA` round trip per decision, no call to a sentinel on the
/// hot path. When the primary changes, the old one drops its clients (Sentinel
/// kills them when it reconfigures a node) or answers `READONLY`, or is gone;
/// the connection is then discarded and the next call asks the sentinels
/// again. Until they have promoted a replica, calls fail within the
/// [timeout](Self::timeout) and the failure policy applies. Semantics and
/// guarantees are those of [`RedisStore`](crate::RedisStore); what a failover
/// can lose is in the README ("Sentinel").
///
/// ```no_run
/// use tower_redis_ratelimit::RedisSentinelStore;
///
/// let store = RedisSentinelStore::from_urls(
///     ["redis://10.0.0.1:26379/", "redis://10.0.0.2:26379/", "redis://10.0.0.3:26379/"],
///     "mymaster",
/// )?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// A password, an ACL user, a database or TLS for the connections to the
/// primary (which may differ from the sentinels' own) are set on a
/// `SentinelClient` built with the re-exported `redis`:
///
/// ```no_run
/// use tower_redis_ratelimit::RedisSentinelStore;
/// use tower_redis_ratelimit::redis::ConnectionAddr;
/// use tower_redis_ratelimit::redis::sentinel::{SentinelClientBuilder, SentinelServerType};
///
/// let sentinels = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
///     .map(|host| ConnectionAddr::Tcp(host.to_owned(), 26379));
/// let client = SentinelClientBuilder::new(sentinels, "mymaster", SentinelServerType::Master)?
///     .set_client_to_redis_username("limiter")
///     .set_client_to_redis_password("secret")
///     .build()?;
/// let store = RedisSentinelStore::new(client);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
#[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
pub struct RedisSentinelStore {
    pub(in crate::store) inner: Arc<Connections<Sentinels>>,
}

/// Where a [`RedisSentinelStore`] takes its connections: the sentinels,
/// asked for the primary each time a connection is opened (one at a time).
#[derive(Clone)]
pub(crate) struct Sentinels {
    client: Arc<tokio::sync::Mutex<SentinelClient>>,
}

impl Pooled for Sentinels {
    type Conn = MultiplexedConnection;
    /// The connection is its own owner: it closes when its last clone drops.
    type Object = ();
    const SELF_TIMED: bool = true;
    const CHECK_WHEN_IDLE: bool = true;

    async fn get(&self, timeout: Duration) -> Result<(Self::Object, Self::Conn), StoreError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            // as on a single node: the connection bounds each call itself
            .set_response_timeout(Some(timeout));
        let conn = self
            .client
            .lock()
            .await
            .get_async_connection_with_config(&config)
            .await
            .map_err(StoreError::from_redis)?;
        Ok(((), conn))
    }

    fn discard(_object: Self::Object) {}

    fn max_size(&self) -> usize {
        usize::MAX
    }
}

impl std::fmt::Debug for RedisSentinelStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSentinelStore")
            .field("connections", &self.inner.connections())
            .field("timeout", &self.inner.timeout)
            .finish()
    }
}

impl RedisSentinelStore {
    /// Default bound on one store call.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);

    /// A store in the primary that `client` finds, with one shared
    /// connection and the [`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT). Build
    /// the client with `redis::sentinel::SentinelClientBuilder` for
    /// credentials, TLS or a private CA; it must ask for the
    /// `SentinelServerType::Master` (a replica refuses the scripts' writes).
    pub fn new(client: SentinelClient) -> Self {
        Self::over(Sentinels {
            client: Arc::new(tokio::sync::Mutex::new(client)),
        })
    }

    fn over(sentinels: Sentinels) -> Self {
        Self {
            inner: Arc::new(Connections::new(sentinels, 1, Self::DEFAULT_TIMEOUT)),
        }
    }

    /// A store in the primary named `master_name`, found through the
    /// sentinels at `urls`, e.g. `["redis://10.0.0.1:26379/",
    /// "redis://10.0.0.2:26379/"]` (`rediss://` and `user:password@` apply
    /// to the sentinels). The primary is reached over plain TCP without
    /// credentials; for anything else use [`new`](Self::new). Nothing
    /// connects until the first call.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] for the field `store.urls` if there is no URL or
    /// one does not parse.
    pub fn from_urls<I>(urls: I, master_name: &str) -> Result<Self, ConfigError>
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let urls: Vec<String> = urls.into_iter().map(Into::into).collect();
        if urls.is_empty() {
            return Err(ConfigError::new(
                "store.urls",
                "no sentinel; give at least one, e.g. [\"redis://127.0.0.1:26379/\"]",
            ));
        }
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        // a `String`: redis-rs takes one without its rustls feature, any `AsRef<str>` with it
        #[allow(clippy::unnecessary_to_owned)]
        SentinelClient::build(
            urls,
            master_name.to_owned(),
            None,
            SentinelServerType::Master,
        )
        .map(Self::new)
        .map_err(|e| {
            // The URLs may hold a password: they are not repeated here.
            ConfigError::new(
                "store.urls",
                format!(
                    "not usable Redis Sentinel URLs ({e}); expected \
                     redis://[[user]:password@]host[:port] for each sentinel"
                ),
            )
        })
    }

    /// Bounds every store call, asking the sentinels and connecting to the
    /// primary included. Default [`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT).
    /// Zero is rejected by [`build`](crate::limiter::RateLimiterBuilder::build)
    /// (`store.timeout`).
    #[must_use]
    pub fn timeout(self, timeout: Duration) -> Self {
        let connections = self.inner.requested();
        Self {
            inner: Arc::new(Connections::new(
                self.inner.pool.clone(),
                connections,
                timeout,
            )),
        }
    }

    /// How many connections to the primary to multiplex calls over
    /// (default 1; 0 is rejected by
    /// [`build`](crate::limiter::RateLimiterBuilder::build), `store.connections`).
    #[must_use]
    pub fn connections(self, connections: usize) -> Self {
        Self {
            inner: Arc::new(Connections::new(
                self.inner.pool.clone(),
                connections,
                self.inner.timeout,
            )),
        }
    }
}
