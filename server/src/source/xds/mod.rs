//! The xDS source: [`XdsClient`] subscribes to an xDS management server's
//! `RateLimitConfig` resources as envoyproxy/ratelimit does with
//! `CONFIG_TYPE=GRPC_XDS_SOTW` (Envoy Gateway's way of pushing limits).
//!
//! The client opens the aggregated discovery stream
//! (`envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources`,
//! state of the world) and asks for every resource of type
//! [`RATE_LIMIT_CONFIG_TYPE`], giving its node id. Each response is the
//! whole configuration: every resource is translated into the document a
//! YAML file of the same content parses to
//! ([`Tree`](crate::config::Tree); its name is the resource's:
//! `RateLimitConfig "gateway-x"`), then all are checked as one
//! configuration by the step every source shares ([`super::load`]: the
//! same errors as for files, naming the resource and the path inside it).
//!
//! * A valid response is swapped in atomically
//!   ([`RlsService::reload`]: calls in flight finish with the old limits,
//!   none sees a mix) and acknowledged (an ACK: its `version_info` and
//!   `response_nonce`).
//! * An invalid one (a resource of another type or that does not decode,
//!   past [`XdsClient::max_resources`], a limit the loader or the library
//!   rejects) is refused with a NACK: the version still running, the
//!   response's nonce and an `error_detail` (`INVALID_ARGUMENT`) naming the
//!   resource and the path; the running limits stay.
//! * An empty response (no resource) is applied: the management server
//!   says there is no limit, and every request is allowed.
//! * When the stream fails or the server goes away, the client connects
//!   again after an exponential backoff with jitter
//!   ([`XdsClient::backoff`]: from `initial`, doubling, at most `max`, each
//!   wait drawn between half of it and all of it), and asks again with the
//!   version it runs; the limits stay as they are meanwhile. A session that
//!   received a response starts the backoff again from `initial`.
//!
//! What a management server sends is bounded: a response of at most
//! [`XdsClient::max_message_size`] bytes (16 MiB by default; larger ones
//! fail the stream, which is opened again), at most
//! [`XdsClient::max_resources`] resources (4,096 by default, as many as
//! the files of a directory), nested no deeper than protobuf's decoding
//! allows (100 messages), and the loader's checks then apply as to files.
//!
//! ```no_run
//! # async fn f(service: tower_redis_ratelimit_server::service::RlsService) {
//! use tower_redis_ratelimit_server::config::LoadOptions;
//! use tower_redis_ratelimit_server::source::xds::XdsClient;
//!
//! let client = XdsClient::new(service, "http://envoy-gateway:18001", LoadOptions::default())
//!     .node_id("envoy-ratelimit");
//! let mut state = client.state();
//! tokio::spawn(client.run());
//! // wait for the first snapshot, if need be
//! let _ = state.wait_for(|s| s.version.is_some()).await;
//! # }
//! ```

// The client and its stream (subscribe, apply, ACK or NACK, connect
// again) are here; what a response holds is decoded in `resource`, the
// waits between connections are `backoff`'s, TLS is `tls`'s.
mod backoff;
mod resource;
mod tls;

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tonic::transport::Endpoint;

use crate::config::LoadOptions;
use crate::decide::logs::LogThrottle;
use crate::pb::envoy::config::core::v3::{Node, node::UserAgentVersionType};
use crate::pb::envoy::service::discovery::v3::{
    DiscoveryRequest, DiscoveryResponse,
    aggregated_discovery_service_client::AggregatedDiscoveryServiceClient,
};
use crate::pb::google::rpc::Status;
use crate::service::RlsService;
use backoff::{Backoff, Jitter};
use resource::{Refusal, build};

pub use resource::tree;
pub use tls::XdsTls;

/// The type URL of envoyproxy/ratelimit's configuration resource.
pub const RATE_LIMIT_CONFIG_TYPE: &str =
    "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// The longest `error_detail` message sent in a NACK, in bytes.
const MAX_ERROR_DETAIL: usize = 4_096;

/// `google.rpc.Code.INVALID_ARGUMENT`.
const INVALID_ARGUMENT: i32 = 3;

/// What the client has done so far ([`XdsClient::state`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct XdsState {
    /// The `version_info` of the snapshot running (`None` until one is
    /// applied).
    pub version: Option<String>,
    /// The snapshots applied.
    pub applied: u64,
    /// The snapshots refused (NACKed).
    pub rejected: u64,
    /// Why the last refused snapshot was refused.
    pub last_error: Option<String>,
    /// Whether a stream to the management server is open.
    pub connected: bool,
    /// The connections (or attempts) that failed or ended.
    pub disconnects: u64,
}

/// Subscribes a service to an xDS management server's rate limit
/// configuration: [`run`](Self::run) it on a task (see the
/// [module](self)).
#[derive(Debug)]
pub struct XdsClient {
    service: RlsService,
    url: String,
    load: LoadOptions,
    node_id: String,
    node_metadata: Vec<(String, String)>,
    tls: Option<XdsTls>,
    backoff: Backoff,
    connect_timeout: Duration,
    max_message_size: usize,
    max_resources: usize,
    /// The version running, sent again on a new stream.
    version: String,
    state: watch::Sender<XdsState>,
    /// Refused responses (a server that resends a bad snapshot, or one
    /// of a type not asked for, in a loop): a line a second at most.
    refused_log: LogThrottle,
    /// Refusals unlike the last one logged: a line a second at most of
    /// those too (two bad snapshots in turn), beside the repeats'.
    new_refusal_log: LogThrottle,
    /// The last refusal logged.
    last_refusal: String,
}

impl XdsClient {
    /// A client of the management server at `url` (`host:port`, as
    /// envoyproxy/ratelimit's `CONFIG_GRPC_XDS_SERVER_URL`, or
    /// `http://host:port`, `https://host:port`) reloading `service`, its
    /// documents loaded with `load`.
    pub fn new(service: RlsService, url: impl Into<String>, load: LoadOptions) -> Self {
        Self {
            service,
            url: url.into(),
            load,
            node_id: "default".to_owned(),
            node_metadata: Vec::new(),
            tls: None,
            backoff: Backoff {
                initial: Duration::from_secs(1),
                max: Duration::from_secs(60),
            },
            connect_timeout: Duration::from_secs(10),
            max_message_size: 16 << 20,
            max_resources: 4_096,
            version: String::new(),
            state: watch::Sender::new(XdsState::default()),
            refused_log: LogThrottle::default(),
            new_refusal_log: LogThrottle::default(),
            last_refusal: String::new(),
        }
    }

    /// The node id given to the server, which picks its snapshot by it
    /// (default `default`, as envoyproxy/ratelimit's
    /// `CONFIG_GRPC_XDS_NODE_ID`).
    #[must_use]
    pub fn node_id(mut self, id: impl Into<String>) -> Self {
        self.node_id = id.into();
        self
    }

    /// The node's metadata, string values (envoyproxy/ratelimit's
    /// `CONFIG_GRPC_XDS_NODE_METADATA`).
    #[must_use]
    pub fn node_metadata(mut self, pairs: Vec<(String, String)>) -> Self {
        self.node_metadata = pairs;
        self
    }

    /// Connects with TLS (a URL without a scheme is then `https://`).
    #[must_use]
    pub fn tls(mut self, tls: XdsTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The waits between connections: from `initial` (default 1 s),
    /// doubling, at most `max` (default 60 s), each with jitter (at least
    /// 1 ms each, `max` at least `initial`).
    #[must_use]
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        let initial = initial.max(Duration::from_millis(1));
        self.backoff = Backoff {
            initial,
            max: max.max(initial),
        };
        self
    }

    /// How long a connection may take (default 10 s).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The largest response taken, in bytes (default 16 MiB, a
    /// configuration file's bound).
    #[must_use]
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.max_message_size = bytes;
        self
    }

    /// The most resources a response may hold (default 4,096); one with
    /// more is NACKed.
    #[must_use]
    pub fn max_resources(mut self, n: usize) -> Self {
        self.max_resources = n;
        self
    }

    /// What the client has done so far, updated as it goes (wait on it
    /// for a version, a refusal, a connection).
    pub fn state(&self) -> watch::Receiver<XdsState> {
        self.state.subscribe()
    }

    /// Subscribes, applies every snapshot, connects again whenever the
    /// stream ends: forever.
    pub async fn run(mut self) {
        let mut jitter = Jitter::new();
        let mut attempt = 0u32;
        loop {
            let (responses, why) = self.session().await;
            self.state.send_modify(|s| {
                s.connected = false;
                s.disconnects += 1;
            });
            if responses > 0 {
                attempt = 0;
            }
            let wait = self.backoff.delay(attempt, jitter.next());
            attempt = attempt.saturating_add(1);
            tracing::warn!(
                url = %self.url,
                "xDS management server: {why}; the running limits stay, connecting again in {} ms",
                wait.as_millis()
            );
            tokio::time::sleep(wait).await;
        }
    }

    /// One stream, until it ends: the responses it received and why it
    /// ended.
    async fn session(&mut self) -> (u64, String) {
        let mut responses = 0;
        let channel = match self.connect().await {
            Ok(c) => c,
            Err(e) => return (responses, e),
        };
        let mut client = AggregatedDiscoveryServiceClient::new(channel)
            .max_decoding_message_size(self.max_message_size);
        let (tx, rx) = mpsc::channel::<DiscoveryRequest>(4);
        let first = DiscoveryRequest {
            version_info: self.version.clone(),
            node: Some(self.node()),
            resource_names: Vec::new(),
            type_url: RATE_LIMIT_CONFIG_TYPE.to_owned(),
            response_nonce: String::new(),
            error_detail: None,
        };
        if tx.send(first).await.is_err() {
            return (responses, "the request stream closed".to_owned());
        }
        let outbound =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|r| (r, rx)) },
            );
        let mut inbound = match client.stream_aggregated_resources(outbound).await {
            Ok(r) => r.into_inner(),
            Err(s) => return (responses, format!("stream refused: {}", describe(&s))),
        };
        self.state.send_modify(|s| s.connected = true);
        tracing::info!(url = %self.url, node = %self.node_id, "xDS: subscribed to RateLimitConfig");
        loop {
            let response = match inbound.message().await {
                Ok(Some(r)) => r,
                Ok(None) => return (responses, "the stream ended".to_owned()),
                Err(s) => return (responses, format!("stream failed: {}", describe(&s))),
            };
            responses += 1;
            let Some(answer) = self.handle(response) else {
                continue;
            };
            if tx.send(answer).await.is_err() {
                return (responses, "the request stream closed".to_owned());
            }
        }
    }

    async fn connect(&self) -> Result<tonic::transport::Channel, String> {
        let url = if self.url.contains("://") {
            self.url.clone()
        } else if self.tls.is_some() {
            format!("https://{}", self.url)
        } else {
            format!("http://{}", self.url)
        };
        let mut endpoint = Endpoint::from_shared(url.clone())
            .map_err(|e| format!("{url:?} is not a URL: {e}"))?
            .connect_timeout(self.connect_timeout)
            .tcp_nodelay(true)
            // a server gone without a word is noticed
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(20))
            .keep_alive_while_idle(true);
        if let Some(tls) = &self.tls {
            endpoint = endpoint
                .tls_config(tls.config()?)
                .map_err(|e| format!("TLS: {e}"))?;
        }
        endpoint
            .connect()
            .await
            .map_err(|e| format!("cannot connect: {}", error_chain(&e)))
    }

    fn node(&self) -> Node {
        let fields = self
            .node_metadata
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    prost_types::Value {
                        kind: Some(prost_types::value::Kind::StringValue(v.clone())),
                    },
                )
            })
            .collect::<BTreeMap<_, _>>();
        Node {
            id: self.node_id.clone(),
            cluster: String::new(),
            metadata: (!fields.is_empty()).then_some(prost_types::Struct { fields }),
            user_agent_name: env!("CARGO_PKG_NAME").to_owned(),
            user_agent_version_type: Some(UserAgentVersionType::UserAgentVersion(
                env!("CARGO_PKG_VERSION").to_owned(),
            )),
        }
    }

    /// Applies one response: the ACK or NACK to send (none for a response
    /// of a type not asked for).
    fn handle(&mut self, response: DiscoveryResponse) -> Option<DiscoveryRequest> {
        if response.type_url != RATE_LIMIT_CONFIG_TYPE {
            if let Some(held) = self.refused_log.to_log() {
                tracing::warn!(
                    type_url = %truncated(&response.type_url, 200),
                    held_back = held,
                    "xDS: a response of a type not asked for is ignored"
                );
            }
            return None;
        }
        let resources = response.resources.len();
        let outcome = build(&response, self.max_resources, self.load).and_then(|config| {
            for w in config.warnings() {
                tracing::warn!("xDS: {w}");
            }
            let domains = config.domains().count();
            self.service
                .reload(config)
                .map(|()| domains)
                .map_err(|e| Refusal::Build(e.to_string()))
        });
        let mut ack = DiscoveryRequest {
            version_info: String::new(),
            node: None,
            resource_names: Vec::new(),
            type_url: RATE_LIMIT_CONFIG_TYPE.to_owned(),
            response_nonce: response.nonce,
            error_detail: None,
        };
        match outcome {
            Ok(domains) => {
                if domains == 0 {
                    tracing::warn!(
                        version = %response.version_info,
                        "xDS: a snapshot with no limit: every request is allowed"
                    );
                }
                tracing::info!(version = %response.version_info, resources, domains, "xDS: snapshot applied");
                self.version = response.version_info;
                ack.version_info = self.version.clone();
                let version = self.version.clone();
                self.state.send_modify(|s| {
                    s.version = Some(version);
                    s.applied += 1;
                });
            }
            Err(refusal) => {
                let (message, counted) = match refusal {
                    Refusal::Config(m) => (m, false),
                    Refusal::Build(m) => (m, true),
                };
                if !counted {
                    // (reload counts the failed loads it refuses itself)
                    self.service.metrics().config_loaded(false);
                }
                let message = truncated(&message, MAX_ERROR_DETAIL);
                // (the first refusal and its repeats on one throttle, each
                // refusal unlike the last logged on the other)
                let held = if message == self.last_refusal || self.last_refusal.is_empty() {
                    self.refused_log.to_log()
                } else {
                    self.new_refusal_log.to_log()
                };
                if let Some(held) = held {
                    self.last_refusal.clone_from(&message);
                    tracing::error!(
                        version = %truncated(&response.version_info, 200),
                        running = %self.version,
                        held_back = held,
                        "xDS: snapshot refused (NACK), the running limits stay: {message}"
                    );
                }
                ack.version_info = self.version.clone();
                ack.error_detail = Some(Status {
                    code: INVALID_ARGUMENT,
                    message: message.clone(),
                    details: Vec::new(),
                });
                self.state.send_modify(|s| {
                    s.rejected += 1;
                    s.last_error = Some(message);
                });
            }
        }
        Some(ack)
    }
}

/// `s`, cut to at most `max` bytes at a character's boundary.
fn truncated(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max.saturating_sub(3);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// A gRPC status, its message cut to 500 bytes.
fn describe(s: &tonic::Status) -> String {
    format!("{:?}: {}", s.code(), truncated(s.message(), 500))
}

/// An error and its sources, joined with `: `.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests;
