//! [`RedisSentinelStore`]: limiter state in the primary that Redis Sentinel
//! names, followed through failovers.

use std::sync::Arc;
use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use redis::sentinel::{SentinelClient, SentinelServerType};

use super::conn::{Connections, Pooled};
use super::options::{self, Common, bad_url};
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
/// can lose is in the guide's [stores chapter](crate::guide::stores)
/// ("What a failover can lose").
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
/// asked for the primary each time a connection is opened. Each client is
/// asked at the same time and the first primary found wins, so a sentinel
/// that hangs (stopped, partitioned away) costs nothing while another
/// answers; `from_urls` makes one client per sentinel for that reason.
#[derive(Clone)]
pub(crate) struct Sentinels {
    clients: Arc<[Arc<tokio::sync::Mutex<SentinelClient>>]>,
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
        // (dropped by the caller's timeout, the set aborts what is still running)
        let mut asked = tokio::task::JoinSet::new();
        for client in self.clients.iter() {
            let (client, config) = (client.clone(), config.clone());
            asked.spawn(async move {
                client
                    .lock()
                    .await
                    .get_async_connection_with_config(&config)
                    .await
            });
        }
        let mut first_error = None;
        while let Some(answer) = asked.join_next().await {
            match answer {
                Ok(Ok(conn)) => return Ok(((), conn)),
                Ok(Err(e)) => {
                    first_error.get_or_insert(StoreError::from_redis(e));
                }
                Err(e) => {
                    first_error.get_or_insert(StoreError::Protocol(format!(
                        "asking a sentinel for the primary failed: {e}"
                    )));
                }
            }
        }
        Err(first_error.unwrap_or_else(|| StoreError::Protocol("no sentinel to ask".to_owned())))
    }

    fn discard(_object: Self::Object) {}

    fn max_size(&self) -> usize {
        usize::MAX
    }
}

impl std::fmt::Debug for Connections<Sentinels> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSentinelStore")
            .field("connections", &self.connections())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl std::fmt::Debug for RedisSentinelStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl RedisSentinelStore {
    /// Default bound on one store call.
    pub const DEFAULT_TIMEOUT: Duration = Common::DEFAULT_TIMEOUT;

    /// A store in the primary that `client` finds, with one shared
    /// connection and the [`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT). Build
    /// the client with `redis::sentinel::SentinelClientBuilder` for
    /// credentials, TLS or a private CA; it must ask for the
    /// `SentinelServerType::Master` (a replica refuses the scripts' writes).
    ///
    /// A client over several sentinels asks them in turn, so one that hangs
    /// (stopped, partitioned away) holds every new connection up until the
    /// timeout: prefer [`with_clients`](Self::with_clients), one client per
    /// sentinel, which asks them all at once.
    pub fn new(client: SentinelClient) -> Self {
        Self::with_clients([client])
    }

    /// A store in the primary that any of `clients` finds: each is asked at
    /// the same time whenever a connection is opened, and the first primary
    /// found wins. Build one client per sentinel (with
    /// `SentinelClientBuilder`, for credentials or TLS) so that a sentinel
    /// that hangs costs nothing while another answers.
    pub fn with_clients(clients: impl IntoIterator<Item = SentinelClient>) -> Self {
        Self::over(Sentinels {
            clients: clients
                .into_iter()
                .map(|c| Arc::new(tokio::sync::Mutex::new(c)))
                .collect(),
        })
    }

    fn over(sentinels: Sentinels) -> Self {
        Self {
            inner: Arc::new(Connections::new(sentinels, Common::DEFAULT)),
        }
    }

    /// A store in the primary named `master_name`, found through the
    /// sentinels at `urls`, e.g. `["redis://10.0.0.1:26379/",
    /// "redis://10.0.0.2:26379/"]` (`rediss://` and `user:password@` apply
    /// to the sentinels). The primary is reached over plain TCP without
    /// credentials; for anything else use [`with_clients`](Self::with_clients).
    /// Nothing connects until the first call; then every sentinel is asked
    /// at once and the first primary found wins.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] for the field `store.urls` if there is no URL, one
    /// does not parse or names a database; for `store.master_name` if the
    /// name is empty.
    pub fn from_urls<I>(urls: I, master_name: &str) -> Result<Self, ConfigError>
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let urls = options::urls(urls, "sentinel", "redis://127.0.0.1:26379/")?;
        if master_name.trim().is_empty() {
            return Err(ConfigError::new(
                "store.master_name",
                "empty; give the name the sentinels monitor the primary under, e.g. \"mymaster\"",
            ));
        }
        let mut clients = Vec::with_capacity(urls.len());
        for url in &urls {
            let info =
                redis::IntoConnectionInfo::into_connection_info(url.as_str()).map_err(|e| {
                    let expected = "redis://[[user]:password@]host[:port] for each sentinel";
                    bad_url(
                        "store.urls",
                        "a usable Redis Sentinel URL",
                        e,
                        Some(expected),
                    )
                })?;
            if info.redis_settings().db() != 0 {
                return Err(ConfigError::new(
                    "store.urls",
                    "a sentinel URL names no database (sentinels have none); \
                     set the primary's with RedisSentinelStore::with_clients and \
                     SentinelClientBuilder::set_client_to_redis_db",
                ));
            }
            // one client per sentinel: asked all at once (see `with_clients`);
            // a `String`: redis-rs takes one without its rustls feature, any
            // `AsRef<str>` with it
            #[allow(clippy::unnecessary_to_owned)]
            let client = SentinelClient::build(
                vec![info],
                master_name.to_owned(),
                None,
                SentinelServerType::Master,
            )
            .map_err(|e| bad_url("store.urls", "a usable Redis Sentinel URL", e, None))?;
            clients.push(client);
        }
        Ok(Self::with_clients(clients))
    }

    /// Bounds every store call, asking the sentinels and connecting to the
    /// primary included. Default [`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT).
    /// Zero is rejected by [`build`](crate::limiter::RateLimiterBuilder::build)
    /// (`store.timeout`).
    #[must_use]
    pub fn timeout(self, timeout: Duration) -> Self {
        Self {
            inner: self.inner.with(|o| o.timeout = timeout),
        }
    }

    /// Whether concurrent decisions of one limiter go out together, several
    /// in one script call that decides each on its own (default on). A
    /// decision never waits for company: it is sent at once while few calls
    /// are in flight, and joins the next call only when it would otherwise
    /// queue behind them. Answers, keys and TTLs are the same either way;
    /// see the guide's [batching](crate::guide::stores) section.
    #[must_use]
    pub fn batching(self, on: bool) -> Self {
        Self {
            inner: self.inner.with(|o| o.batching = on),
        }
    }

    /// How many connections to the primary to multiplex calls over
    /// (default 1; 0 is rejected by
    /// [`build`](crate::limiter::RateLimiterBuilder::build), `store.connections`).
    #[must_use]
    pub fn connections(self, connections: usize) -> Self {
        Self {
            inner: self.inner.with(|o| o.connections = connections),
        }
    }
}
