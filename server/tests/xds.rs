//! The xDS source against a management server written here (tonic, ADS
//! state of the world): snapshots applied and enforced, ACKs and NACKs as
//! the server sees them, an update under load, a restart of the server, a
//! slow server, thousands of domains; on the memory store and a private
//! `redis-server`.

mod common;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::*;
use futures_core::Stream;
use prost::Message;
use tokio::sync::{mpsc, watch};
use tonic::{Request, Response, Status, Streaming};
use tower_redis_ratelimit::{MemoryStore, RedisStore};
use tower_redis_ratelimit_server::config::{Config, LoadOptions};
use tower_redis_ratelimit_server::pb::envoy::service::discovery::v3::{
    DiscoveryRequest, DiscoveryResponse,
    aggregated_discovery_service_server::{
        AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
    },
};
use tower_redis_ratelimit_server::pb::rate_limit_response::Code;
use tower_redis_ratelimit_server::pb::ratelimit::config::ratelimit::v3 as rls;
use tower_redis_ratelimit_server::service::{RlsService, ServiceOptions};
use tower_redis_ratelimit_server::source::xds::{RATE_LIMIT_CONFIG_TYPE, XdsClient, XdsState};

/// Generous: the machine is slow and shared.
const WAIT: Duration = Duration::from_secs(60);

// ---- the management server ----

/// What the test's management server serves: the snapshot to send (each
/// new one is sent on every open stream), and each request it receives,
/// with the number of the stream it came on.
#[derive(Clone)]
struct Mgmt {
    snapshot: watch::Receiver<Option<DiscoveryResponse>>,
    requests: mpsc::UnboundedSender<(u64, DiscoveryRequest)>,
    streams: Arc<AtomicU64>,
}

type Responses = Pin<Box<dyn Stream<Item = Result<DiscoveryResponse, Status>> + Send>>;

#[tonic::async_trait]
impl AggregatedDiscoveryService for Mgmt {
    type StreamAggregatedResourcesStream = Responses;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Responses>, Status> {
        let stream = self.streams.fetch_add(1, Ordering::SeqCst);
        let mut inbound = request.into_inner();
        let requests = self.requests.clone();
        let mut snapshot = self.snapshot.clone();
        let (tx, rx) = mpsc::channel::<Result<DiscoveryResponse, Status>>(4);
        tokio::spawn(async move {
            let mut nonce = 0u64;
            // (the first request first, as a real server waits for it)
            match inbound.message().await {
                Ok(Some(r)) => {
                    let _ = requests.send((stream, r));
                }
                _ => return,
            }
            snapshot.mark_changed();
            loop {
                tokio::select! {
                    changed = snapshot.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        let next = snapshot.borrow_and_update().clone();
                        if let Some(mut r) = next {
                            nonce += 1;
                            r.nonce = nonce.to_string();
                            if tx.send(Ok(r)).await.is_err() {
                                return;
                            }
                        }
                    }
                    m = inbound.message() => match m {
                        Ok(Some(r)) => {
                            let _ = requests.send((stream, r));
                        }
                        _ => return,
                    },
                }
            }
        });
        let out =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|r| (r, rx)) },
            );
        Ok(Response::new(Box::pin(out)))
    }
}

/// A management server on its own runtime (so that killing it closes
/// every stream at once), and what the test drives it with.
struct Server {
    runtime: Option<tokio::runtime::Runtime>,
    addr: SocketAddr,
    snapshot: watch::Sender<Option<DiscoveryResponse>>,
    requests: mpsc::UnboundedReceiver<(u64, DiscoveryRequest)>,
    mgmt: Mgmt,
}

impl Server {
    async fn start(first: Option<DiscoveryResponse>) -> Server {
        let (snapshot, rx) = watch::channel(first);
        let (tx, requests) = mpsc::unbounded_channel();
        let mgmt = Mgmt {
            snapshot: rx,
            requests: tx,
            streams: Arc::new(AtomicU64::new(0)),
        };
        let mut s = Server {
            runtime: None,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            snapshot,
            requests,
            mgmt,
        };
        s.serve().await;
        s
    }

    /// Serves on `self.addr` (port 0: a free one), retrying while the old
    /// socket is still being closed.
    async fn serve(&mut self) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let mut listener = None;
        for _ in 0..200 {
            match std::net::TcpListener::bind(self.addr) {
                Ok(l) => {
                    listener = Some(l);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(25)).await,
            }
        }
        let listener = listener.expect("bind the management server's port");
        listener.set_nonblocking(true).expect("nonblocking");
        self.addr = listener.local_addr().expect("addr");
        let mgmt = self.mgmt.clone();
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            tonic::transport::Server::builder()
                .add_service(AggregatedDiscoveryServiceServer::new(mgmt))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
                .await
        });
        self.runtime = Some(runtime);
    }

    /// Kills the server: every connection closes.
    fn kill(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn push(&self, r: DiscoveryResponse) {
        self.snapshot.send_replace(Some(r));
    }

    /// The next request the server received.
    async fn request(&mut self) -> (u64, DiscoveryRequest) {
        tokio::time::timeout(WAIT, self.requests.recv())
            .await
            .expect("a request in time")
            .expect("the server runs")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

// ---- snapshots ----

fn limit(unit: rls::RateLimitUnit, n: u32) -> Option<rls::RateLimitPolicy> {
    Some(rls::RateLimitPolicy {
        unit: unit as i32,
        requests_per_unit: n,
        unlimited: false,
        name: String::new(),
        replaces: Vec::new(),
    })
}

fn descriptor(key: &str, rate_limit: Option<rls::RateLimitPolicy>) -> rls::RateLimitDescriptor {
    rls::RateLimitDescriptor {
        key: key.into(),
        value: String::new(),
        rate_limit,
        descriptors: Vec::new(),
        shadow_mode: false,
        detailed_metric: false,
        quota_mode: false,
        metadata: None,
    }
}

fn resource(
    name: &str,
    domain: &str,
    descriptors: Vec<rls::RateLimitDescriptor>,
) -> prost_types::Any {
    let c = rls::RateLimitConfig {
        name: name.into(),
        domain: domain.into(),
        descriptors,
    };
    prost_types::Any {
        type_url: RATE_LIMIT_CONFIG_TYPE.into(),
        value: c.encode_to_vec(),
    }
}

fn snapshot(version: &str, resources: Vec<prost_types::Any>) -> DiscoveryResponse {
    DiscoveryResponse {
        version_info: version.into(),
        resources,
        canary: false,
        type_url: RATE_LIMIT_CONFIG_TYPE.into(),
        nonce: String::new(),
    }
}

/// Domain `api`: `k` at `n` a minute.
fn one_limit(version: &str, n: u32) -> DiscoveryResponse {
    snapshot(
        version,
        vec![resource(
            "api",
            "api",
            vec![descriptor("k", limit(rls::RateLimitUnit::Minute, n))],
        )],
    )
}

// ---- the client ----

fn client(service: &RlsService, server: &Server) -> XdsClient {
    XdsClient::new(service.clone(), server.url(), LoadOptions::default())
        .node_id("test-node")
        .backoff(Duration::from_millis(10), Duration::from_millis(200))
}

async fn until(
    state: &mut watch::Receiver<XdsState>,
    what: &str,
    f: impl FnMut(&XdsState) -> bool,
) -> XdsState {
    let got = match tokio::time::timeout(WAIT, state.wait_for(f)).await {
        Ok(Ok(s)) => Some(s.clone()),
        _ => None,
    };
    got.unwrap_or_else(|| panic!("{what}: not in time; state {:?}", *state.borrow()))
}

async fn version(state: &mut watch::Receiver<XdsState>, v: &str) -> XdsState {
    until(state, v, |s| s.version.as_deref() == Some(v)).await
}

/// The codes of `n` calls of one hit on `k` in `domain`.
async fn codes(rls: &mut Client, domain: &str, n: usize) -> Vec<Code> {
    let mut out = Vec::new();
    for _ in 0..n {
        let r = ask(rls, domain, vec![desc(&[("k", "x")])], 1).await;
        out.push(overall(&r));
    }
    out
}

use Code::{Ok as Fine, OverLimit as Over};

async fn snapshot_enforced_and_acked(service: RlsService) {
    let mut server = Server::start(Some(one_limit("v1", 2))).await;
    let xds = client(&service, &server);
    let mut state = xds.state();
    tokio::spawn(xds.run());
    let (stream, first) = server.request().await;
    assert_eq!(stream, 0);
    assert_eq!(first.type_url, RATE_LIMIT_CONFIG_TYPE);
    assert_eq!(
        first.node.as_ref().map(|n| n.id.as_str()),
        Some("test-node")
    );
    assert_eq!(
        (first.version_info.as_str(), first.response_nonce.as_str()),
        ("", "")
    );
    let (_, ack) = server.request().await;
    assert_eq!(
        (ack.version_info.as_str(), ack.response_nonce.as_str()),
        ("v1", "1")
    );
    assert!(ack.error_detail.is_none(), "{ack:?}");
    let s = version(&mut state, "v1").await;
    assert_eq!((s.applied, s.rejected), (1, 0));
    let mut rls = serve(service).await;
    assert_eq!(codes(&mut rls, "api", 3).await, [Fine, Fine, Over]);
}

#[tokio::test]
async fn a_snapshot_is_applied_enforced_and_acked_on_memory() {
    let service = RlsService::new(
        Config::default(),
        MemoryStore::new(),
        ServiceOptions::default(),
    )
    .expect("service");
    snapshot_enforced_and_acked(service).await;
}

#[tokio::test]
async fn a_snapshot_is_applied_enforced_and_acked_on_redis() {
    let redis = Redis::start();
    let store = RedisStore::from_url(&redis.url()).expect("store");
    let service =
        RlsService::new(Config::default(), store, ServiceOptions::default()).expect("service");
    snapshot_enforced_and_acked(service).await;
}

#[tokio::test]
async fn an_invalid_snapshot_is_nacked_with_its_error_and_the_old_limits_stay() {
    let service = RlsService::new(
        Config::default(),
        MemoryStore::new(),
        ServiceOptions::default(),
    )
    .expect("service");
    let mut server = Server::start(Some(one_limit("v1", 2))).await;
    let xds = client(&service, &server);
    let mut state = xds.state();
    tokio::spawn(xds.run());
    server.request().await;
    server.request().await;
    version(&mut state, "v1").await;

    let mut bad_unit = descriptor("k", limit(rls::RateLimitUnit::Minute, 5));
    if let Some(p) = bad_unit.rate_limit.as_mut() {
        p.unit = 99;
    }
    let cases: Vec<(DiscoveryResponse, Vec<&str>)> = vec![
        (
            snapshot(
                "v2",
                vec![resource(
                    "gw-api",
                    "api",
                    vec![descriptor("ok", None), bad_unit],
                )],
            ),
            vec![
                "RateLimitConfig \"gw-api\"",
                "descriptors[1].rate_limit.unit",
                "\"99\"",
            ],
        ),
        (
            snapshot(
                "v3",
                vec![
                    resource(
                        "a",
                        "api",
                        vec![descriptor("k", limit(rls::RateLimitUnit::Second, 1))],
                    ),
                    resource(
                        "b",
                        "api",
                        vec![descriptor("k", limit(rls::RateLimitUnit::Second, 1))],
                    ),
                ],
            ),
            vec![
                "RateLimitConfig \"b\"",
                "domain",
                "duplicate domain \"api\"",
            ],
        ),
        (
            snapshot(
                "v4",
                vec![resource(
                    "",
                    "api",
                    vec![descriptor("", limit(rls::RateLimitUnit::Hour, 1))],
                )],
            ),
            vec!["RateLimitConfig [0]", "descriptors[0]", "non-empty `key`"],
        ),
        (
            snapshot(
                "v5",
                vec![prost_types::Any {
                    type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster".into(),
                    value: vec![1, 2, 3],
                }],
            ),
            vec!["resource [0]", "envoy.config.cluster.v3.Cluster"],
        ),
        (
            snapshot(
                "v6",
                vec![prost_types::Any {
                    type_url: RATE_LIMIT_CONFIG_TYPE.into(),
                    value: vec![0xff, 0xff, 0xff],
                }],
            ),
            vec!["resource [0]", "not a RateLimitConfig"],
        ),
    ];
    let mut rls = serve(service.clone()).await;
    for (i, (snap, needles)) in cases.into_iter().enumerate() {
        let v = snap.version_info.clone();
        server.push(snap);
        let (_, nack) = server.request().await;
        assert_eq!(nack.version_info, "v1", "{v}: the version still running");
        assert_eq!(nack.response_nonce, (i + 2).to_string(), "{v}");
        let detail = nack.error_detail.expect("error_detail");
        assert_eq!(detail.code, 3, "{v}: INVALID_ARGUMENT");
        for n in needles {
            assert!(
                detail.message.contains(n),
                "{v}: {n:?} in {:?}",
                detail.message
            );
        }
        let s = until(&mut state, &v, |s| s.rejected == i as u64 + 1).await;
        assert_eq!(s.version.as_deref(), Some("v1"));
        assert_eq!(s.last_error.as_deref(), Some(detail.message.as_str()));
        // the old limit still holds (2 a minute, shared by the calls here)
        assert_eq!(service.config().rules("api").len(), 1);
        assert_eq!(service.config().rules("api")[0].requests_per_unit, 2);
    }
    assert_eq!(codes(&mut rls, "api", 3).await, [Fine, Fine, Over]);
    // a valid one after them is applied
    server.push(one_limit("v7", 10));
    let (_, ack) = server.request().await;
    assert_eq!(
        (ack.version_info.as_str(), ack.error_detail.is_none()),
        ("v7", true)
    );
    version(&mut state, "v7").await;
    assert_eq!(service.config().rules("api")[0].requests_per_unit, 10);
}

#[tokio::test]
async fn an_update_under_load_fails_no_call_and_none_sees_a_mix() {
    // two domains and two descriptors each, all at the version's count:
    // a call sees one version's limits on every descriptor
    fn versioned(n: u32) -> DiscoveryResponse {
        let d = |key: &str| descriptor(key, limit(rls::RateLimitUnit::Minute, 1_000_000 + n));
        snapshot(
            &format!("v{n}"),
            vec![
                resource("one", "one", vec![d("a"), d("b")]),
                resource("two", "two", vec![d("a"), d("b")]),
            ],
        )
    }
    let service = RlsService::new(
        Config::default(),
        MemoryStore::new(),
        ServiceOptions::default(),
    )
    .expect("service");
    let server = Server::start(Some(versioned(0))).await;
    let xds = client(&service, &server);
    let mut state = xds.state();
    tokio::spawn(xds.run());
    version(&mut state, "v0").await;
    let rls = serve(service.clone()).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut callers = Vec::new();
    for c in 0..8 {
        let mut rls = rls.clone();
        let stop = stop.clone();
        callers.push(tokio::spawn(async move {
            let domain = if c % 2 == 0 { "one" } else { "two" };
            let mut seen = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let r = try_ask(
                    &mut rls,
                    domain,
                    vec![desc(&[("a", "x")]), desc(&[("b", "y")])],
                    1,
                )
                .await
                .expect("no call fails during an update");
                let limits: Vec<u32> = r
                    .statuses
                    .iter()
                    .map(|s| s.current_limit.as_ref().map_or(0, |l| l.requests_per_unit))
                    .collect();
                assert_eq!(limits.len(), 2, "{r:?}");
                assert_eq!(limits[0], limits[1], "a mix of two versions: {limits:?}");
                assert_eq!(overall(&r), Code::Ok);
                seen.push(limits[0]);
            }
            seen
        }));
    }
    for n in 1..=20 {
        server.push(versioned(n));
        version(&mut state, &format!("v{n}")).await;
    }
    stop.store(true, Ordering::SeqCst);
    let mut versions = std::collections::BTreeSet::new();
    for c in callers {
        let seen = c.await.expect("caller");
        assert!(!seen.is_empty());
        // each caller sees the versions in order, never one older again
        assert!(seen.windows(2).all(|w| w[0] <= w[1]), "went back: {seen:?}");
        versions.extend(seen);
    }
    assert!(versions.len() > 1, "the calls saw only {versions:?}");
    assert_eq!(state.borrow().applied, 21);
}

#[tokio::test]
async fn the_client_reconnects_after_a_server_restart_and_takes_its_snapshot() {
    let service = RlsService::new(
        Config::default(),
        MemoryStore::new(),
        ServiceOptions::default(),
    )
    .expect("service");
    let mut server = Server::start(Some(one_limit("v1", 2))).await;
    let xds = client(&service, &server);
    let mut state = xds.state();
    tokio::spawn(xds.run());
    version(&mut state, "v1").await;
    server.kill();
    let s = until(&mut state, "disconnected", |s| s.disconnects >= 1).await;
    assert_eq!(s.version.as_deref(), Some("v1"));
    // while it is gone, the limits stay
    let mut rls = serve(service.clone()).await;
    assert_eq!(codes(&mut rls, "api", 3).await, [Fine, Fine, Over]);
    // back, on the same port, with another snapshot
    while server.requests.try_recv().is_ok() {}
    server.snapshot.send_replace(Some(one_limit("v2", 5)));
    server.serve().await;
    version(&mut state, "v2").await;
    // (attempts made while it was down leave no request)
    let (stream, first) = server.request().await;
    assert!(stream >= 1, "a new stream");
    assert_eq!(first.version_info, "v1", "the new stream says what runs");
    assert_eq!(first.node.map(|n| n.id), Some("test-node".to_owned()));
    let (_, ack) = server.request().await;
    assert_eq!(ack.version_info, "v2");
    assert_eq!(service.config().rules("api")[0].requests_per_unit, 5);
    assert!(state.borrow().connected);
}

#[tokio::test]
async fn serving_starts_before_a_slow_server_answers_with_no_limits_or_the_files() {
    for files in [false, true] {
        let config = if files {
            Config::from_sources(
                [(
                    "file.yaml",
                    "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
                )],
                LoadOptions::default(),
            )
            .expect("file")
        } else {
            Config::default()
        };
        let service = RlsService::new(config, MemoryStore::new(), ServiceOptions::default())
            .expect("service");
        // a server that has no snapshot yet: the stream opens, nothing comes
        let mut server = Server::start(None).await;
        let xds = client(&service, &server);
        let mut state = xds.state();
        tokio::spawn(xds.run());
        server.request().await;
        until(&mut state, "connected", |s| s.connected).await;
        let mut rls = serve(service.clone()).await;
        let before = codes(&mut rls, "api", 3).await;
        if files {
            assert_eq!(before, [Fine, Over, Over], "the file's limits meanwhile");
        } else {
            assert_eq!(before, [Fine, Fine, Fine], "no limits meanwhile");
        }
        assert_eq!(state.borrow().version, None);
        server.push(one_limit("v1", 4));
        version(&mut state, "v1").await;
        assert_eq!(service.config().rules("api")[0].requests_per_unit, 4);
        assert_eq!(
            service.config().rules("api")[0].file,
            "RateLimitConfig \"api\""
        );
    }
}

#[tokio::test]
async fn thousands_of_domains_in_one_snapshot_are_applied() {
    const N: u32 = 5_000;
    let resources = (0..N)
        .map(|i| {
            let d = format!("domain-{i}");
            resource(
                &d,
                &d,
                vec![descriptor(
                    "k",
                    limit(rls::RateLimitUnit::Minute, 1 + i % 3),
                )],
            )
        })
        .collect();
    let service = RlsService::new(
        Config::default(),
        MemoryStore::new(),
        ServiceOptions::default(),
    )
    .expect("service");
    let mut server = Server::start(Some(snapshot("big", resources))).await;
    let xds = client(&service, &server).max_resources(N as usize);
    let mut state = xds.state();
    tokio::spawn(xds.run());
    version(&mut state, "big").await;
    assert_eq!(service.config().domains().count(), N as usize);
    assert_eq!(service.config().rule_count(), N as usize);
    let mut rls = serve(service.clone()).await;
    assert_eq!(codes(&mut rls, "domain-0", 2).await, [Fine, Over]);
    assert_eq!(codes(&mut rls, "domain-4999", 3).await, [Fine, Fine, Over]);
    // past max_resources: NACKed, the running ones stay
    let resources = (0..=N)
        .map(|i| resource("r", &format!("other-{i}"), vec![]))
        .collect();
    server.push(snapshot("bigger", resources));
    let s = until(&mut state, "refused", |s| s.rejected == 1).await;
    assert!(
        s.last_error
            .as_deref()
            .is_some_and(|e| e.contains("5001 resources: at most 5000")),
        "{s:?}"
    );
    assert_eq!(service.config().domains().count(), N as usize);
    while let Ok((_, r)) = server.requests.try_recv() {
        if r.error_detail.is_some() {
            assert_eq!(r.version_info, "big");
        }
    }
}

#[tokio::test]
async fn a_response_past_the_message_size_fails_the_stream_and_the_limits_stay() {
    let service = RlsService::new(
        Config::default(),
        MemoryStore::new(),
        ServiceOptions::default(),
    )
    .expect("service");
    let server = Server::start(Some(one_limit("v1", 2))).await;
    let xds = client(&service, &server).max_message_size(64 << 10);
    let mut state = xds.state();
    tokio::spawn(xds.run());
    version(&mut state, "v1").await;
    let big = (0..2_000)
        .map(|i| {
            resource(
                "r",
                &format!("padding-domain-{i:06}"),
                vec![descriptor("k", None)],
            )
        })
        .collect();
    server.push(snapshot("v2", big));
    let s = until(&mut state, "a failed stream", |s| s.disconnects >= 1).await;
    assert_eq!((s.version.as_deref(), s.rejected), (Some("v1"), 0));
    assert_eq!(service.config().rules("api")[0].requests_per_unit, 2);
}
