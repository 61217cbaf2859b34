//! The quota service over gRPC, as Envoy's rate_limit_quota filter speaks
//! to it: a bucket's first report subscribes it and is answered at once,
//! later reports renew it, idle buckets are abandoned, a stream may end and
//! reconnect; and what a client controls (domains, bucket ids, counts, the
//! number of buckets, not reading) gets a defined answer within bounds,
//! on the memory store and on a private Redis, and through a Redis failure.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::mpsc;
use tonic::transport::Channel;
use tower_redis_ratelimit::MemoryStore;
use tower_redis_ratelimit::store::Store;
use tower_redis_ratelimit_server::pb::envoy::r#type::v3::rate_limit_strategy::{
    BlanketRule, Strategy as PbStrategy,
};
use tower_redis_ratelimit_server::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Kind;
use tower_redis_ratelimit_server::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use tower_redis_ratelimit_server::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use tower_redis_ratelimit_server::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use tower_redis_ratelimit_server::pb::RateLimitQuotaServiceServer;
use tower_redis_ratelimit_server::rlqs::{
    DomainConfig, QuotaOptions, QuotaService, RlqsService,
};

type Client = RateLimitQuotaServiceClient<Channel>;

const CONFIG: &str = "
domain: edge
reporting_interval: 100ms
max_buckets_per_stream: 100
abandon_after: 300ms
buckets:
  - name: per-user
    id: { route: chat, user: \"*\" }
    requests_per_unit: 600
    unit: minute
  - name: blocked
    id: { route: blocked }
    blanket: deny_all
";

fn quota(text: &str) -> QuotaService {
    quota_on(text, MemoryStore::new())
}

fn quota_on<S: Store + Clone>(text: &str, store: S) -> QuotaService {
    QuotaService::new(
        vec![DomainConfig::parse("edge.yaml", text).expect("config")],
        store,
        QuotaOptions::default(),
    )
    .expect("service")
}

async fn serve(service: QuotaService) -> Client {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(RateLimitQuotaServiceServer::new(RlqsService::new(service)))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
    });
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    RateLimitQuotaServiceClient::new(channel)
}

/// An open stream: what it sends, and what it receives.
struct Stream {
    tx: mpsc::Sender<RateLimitQuotaUsageReports>,
    rx: tonic::Streaming<RateLimitQuotaResponse>,
}

async fn open(client: &mut Client) -> Stream {
    let (tx, rx) = mpsc::channel(16);
    let outbound = futures_util::stream::unfold(rx, |mut rx: mpsc::Receiver<_>| async move {
        rx.recv().await.map(|m| (m, rx))
    });
    let rx = client
        .stream_rate_limit_quotas(outbound)
        .await
        .expect("the stream opens")
        .into_inner();
    Stream { tx, rx }
}

fn usage(id: &[(&str, &str)], allowed: u64, denied: u64) -> BucketQuotaUsage {
    BucketQuotaUsage {
        bucket_id: Some(BucketId {
            bucket: id
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }),
        time_elapsed: Some(prost_types::Duration {
            seconds: 1,
            nanos: 0,
        }),
        num_requests_allowed: allowed,
        num_requests_denied: denied,
    }
}

impl Stream {
    async fn send(&self, domain: &str, usages: Vec<BucketQuotaUsage>) {
        self.tx
            .send(RateLimitQuotaUsageReports {
                domain: domain.to_owned(),
                bucket_quota_usages: usages,
            })
            .await
            .expect("send");
    }

    async fn next(&mut self) -> RateLimitQuotaResponse {
        tokio::time::timeout(Duration::from_secs(30), self.rx.message())
            .await
            .expect("an answer within 30 s")
            .expect("no stream error")
            .expect("the stream is open")
    }

    /// Reports, and reads the answer: after a pause past half the
    /// reporting interval, as the service decides a bucket at most twice
    /// an interval (a report sooner is answered only for new buckets).
    async fn ask(&mut self, domain: &str, usages: Vec<BucketQuotaUsage>) -> Answers {
        tokio::time::sleep(Duration::from_millis(60)).await;
        self.send(domain, usages).await;
        Answers::of(self.next().await)
    }
}

/// A response's actions by bucket id (its entries sorted).
#[derive(Debug)]
struct Answers(HashMap<Vec<(String, String)>, Kind>);

impl Answers {
    fn of(r: RateLimitQuotaResponse) -> Answers {
        let mut m = HashMap::new();
        for a in r.bucket_action {
            let mut id: Vec<(String, String)> =
                a.bucket_id.expect("an id").bucket.into_iter().collect();
            id.sort();
            m.insert(id, a.bucket_action.expect("an action"));
        }
        Answers(m)
    }

    fn get(&self, id: &[(&str, &str)]) -> &Kind {
        let mut key: Vec<(String, String)> = id
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        key.sort();
        self.0
            .get(&key)
            .unwrap_or_else(|| panic!("no action for {id:?} in {self:?}"))
    }
}

/// The assignment's strategy and TTL in seconds.
fn assignment(k: &Kind) -> (PbStrategy, i64) {
    match k {
        Kind::QuotaAssignmentAction(a) => (
            a.rate_limit_strategy
                .and_then(|s| s.strategy)
                .expect("a strategy"),
            a.assignment_time_to_live.expect("a TTL").seconds,
        ),
        Kind::AbandonAction(_) => panic!("an abandon, not an assignment"),
    }
}

fn blanket(k: &Kind) -> BlanketRule {
    match assignment(k).0 {
        PbStrategy::BlanketRule(b) => BlanketRule::try_from(b).expect("a blanket rule"),
        other => panic!("not a blanket rule: {other:?}"),
    }
}

const ALICE: &[(&str, &str)] = &[("route", "chat"), ("user", "alice")];

async fn first_reports_subscribe_and_are_answered<S: Store + Clone>(store: S) {
    let mut client = serve(quota_on(CONFIG, store)).await;
    let mut s = open(&mut client).await;
    let a = s
        .ask(
            "edge",
            vec![
                usage(ALICE, 1, 0),
                usage(&[("route", "blocked")], 1, 0),
                usage(&[("route", "other")], 1, 0),
            ],
        )
        .await;
    // the limited bucket: a token bucket of its share, for 2 s (2 × 100 ms
    // + 1 s, in whole seconds)
    let (strategy, ttl) = assignment(a.get(ALICE));
    assert_eq!(ttl, 2);
    let PbStrategy::TokenBucket(tb) = strategy else {
        panic!("a token bucket: {strategy:?}");
    };
    let fill = tb.fill_interval.expect("a fill interval");
    let rate = f64::from(tb.tokens_per_fill.expect("tokens_per_fill")) / fill.seconds as f64;
    assert!(rate > 0.0 && rate <= 10.0, "{tb:?}");
    assert!(tb.max_tokens >= 1);
    // the seconds again in the nanoseconds (Envoy compares those)
    assert_eq!(i64::from(fill.nanos), fill.seconds);
    // a blanket rule, and a bucket no rule matches (unmatched: deny_all)
    assert_eq!(
        blanket(a.get(&[("route", "blocked")])),
        BlanketRule::DenyAll
    );
    assert_eq!(blanket(a.get(&[("route", "other")])), BlanketRule::DenyAll);
    // an id without the key an empty header leaves out: no way around
    let no_user = s.ask("edge", vec![usage(&[("route", "chat")], 1, 0)]).await;
    assert_eq!(
        blanket(no_user.get(&[("route", "chat")])),
        BlanketRule::DenyAll
    );
    // the next report renews the same token bucket
    let b = s.ask("edge", vec![usage(ALICE, 3, 0)]).await;
    let (again, _) = assignment(b.get(ALICE));
    assert_eq!(again, PbStrategy::TokenBucket(tb));
    // reports faster than the interval: no store work, no answer (the
    // assignment stands), their requests counted
    for _ in 0..50 {
        s.send("edge", vec![usage(ALICE, 1, 0)]).await;
    }
    let quiet = tokio::time::timeout(Duration::from_millis(300), s.rx.message()).await;
    assert!(
        quiet.is_err(),
        "an answer to a report 0 ms after the last: {quiet:?}"
    );
    // a new stream (Envoy reconnected) is answered at once too
    drop(s);
    let mut s2 = open(&mut client).await;
    let c = s2.ask("edge", vec![usage(ALICE, 2, 0)]).await;
    assert!(matches!(
        assignment(c.get(ALICE)).0,
        PbStrategy::TokenBucket(_)
    ));
}

#[tokio::test]
async fn first_reports_subscribe_and_are_answered_on_memory() {
    first_reports_subscribe_and_are_answered(MemoryStore::new()).await;
}

#[tokio::test]
async fn first_reports_subscribe_and_are_answered_on_redis() {
    let redis = common::Redis::start();
    first_reports_subscribe_and_are_answered(common::redis_store(&redis)).await;
}

#[tokio::test]
async fn an_unknown_domain_is_allowed_and_idle_buckets_are_abandoned() {
    let mut client = serve(quota(CONFIG)).await;
    let mut s = open(&mut client).await;
    let a = s.ask("elsewhere", vec![usage(ALICE, 1, 0)]).await;
    let (_, ttl) = assignment(a.get(ALICE));
    assert_eq!(blanket(a.get(ALICE)), BlanketRule::AllowAll);
    assert_eq!(ttl, 300);
    // idle past abandon_after (300 ms): abandoned
    s.ask("edge", vec![usage(ALICE, 1, 0)]).await;
    s.ask("edge", vec![usage(ALICE, 0, 0)]).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let b = s.ask("edge", vec![usage(ALICE, 0, 0)]).await;
    assert!(matches!(b.get(ALICE), Kind::AbandonAction(_)), "{b:?}");
    // and subscribed anew by its next report
    let c = s.ask("edge", vec![usage(ALICE, 1, 0)]).await;
    assert!(matches!(
        assignment(c.get(ALICE)).0,
        PbStrategy::TokenBucket(_)
    ));
}

#[tokio::test]
async fn floods_of_bucket_ids_stay_within_the_caps() {
    let service = quota(CONFIG);
    let metrics = service.metrics();
    let mut client = serve(service).await;
    let mut s = open(&mut client).await;
    let ids: Vec<String> = (0..1_000).map(|i| format!("u{i}")).collect();
    let usages = ids
        .iter()
        .map(|u| usage(&[("route", "chat"), ("user", u)], 1, 0))
        .collect();
    let a = s.ask("edge", usages).await;
    assert_eq!(a.0.len(), 1_000);
    let denied =
        a.0.values()
            .filter(|k| matches!(assignment(k).0, PbStrategy::BlanketRule(1)))
            .count();
    // max_buckets_per_stream 100: the rest answered DENY_ALL, not kept
    assert_eq!(denied, 900);
    assert_eq!(metrics.buckets(), 100);
    assert_eq!(metrics.overflow(), 900);
    // an empty id gets nothing (an action needs one), an id past the
    // bounds DENY_ALL (a long header is no way around the rules), huge
    // counts are counted, and nothing breaks
    let long = "v".repeat(5_000);
    s.send(
        "edge",
        vec![
            BucketQuotaUsage {
                bucket_id: None,
                ..usage(ALICE, 1, 0)
            },
            usage(&[("route", "chat"), ("user", &long)], 1, 0),
            usage(ALICE, u64::MAX, u64::MAX),
        ],
    )
    .await;
    let b = Answers::of(s.next().await);
    assert_eq!(b.0.len(), 2);
    b.get(ALICE);
    assert_eq!(
        blanket(b.get(&[("route", "chat"), ("user", &long)])),
        BlanketRule::DenyAll
    );
    drop(s);
    // the stream's buckets are given back when it ends
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while metrics.buckets() != 0 || metrics.streams() != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "buckets {}",
            metrics.buckets()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_client_that_never_reads_is_not_read_either_and_its_stream_ends() {
    let service = quota(CONFIG);
    let metrics = service.metrics();
    let mut client = serve(service).await;
    let s = open(&mut client).await;
    // ask and never read: 50 new buckets a report (each answered at once)
    let sender = tokio::spawn(async move {
        for round in 0..5_000 {
            let usages = (0..50)
                .map(|i| {
                    usage(
                        &[("route", "chat"), ("user", &format!("u{round}.{i}"))],
                        1,
                        0,
                    )
                })
                .collect();
            if tokio::time::timeout(Duration::from_secs(2), s.send("edge", usages))
                .await
                .is_err()
            {
                // the service stopped reading: flow control holds us
                return (true, s);
            }
        }
        (false, s)
    });
    let (blocked, s) = sender.await.expect("sender");
    assert!(
        blocked,
        "5,000 reports read with none of their answers read"
    );
    // the service ends the stream: its state is given back
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while metrics.streams() != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stream never ended"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(metrics.buckets(), 0);
    drop(s);
}

#[tokio::test]
async fn a_redis_failure_fails_closed_by_default_and_open_when_told() {
    let redis = common::Redis::start();
    let closed = quota_on(CONFIG, common::redis_store(&redis));
    let open_text = format!("{CONFIG}on_store_error: allow\n");
    let open_text = open_text.replace("domain: edge", "domain: edge-open");
    let opened = QuotaService::new(
        vec![DomainConfig::parse("open.yaml", &open_text).expect("config")],
        common::redis_store(&redis),
        QuotaOptions::default(),
    )
    .expect("service");
    let mut c1 = serve(closed).await;
    let mut c2 = serve(opened).await;
    let mut s1 = open(&mut c1).await;
    let mut s2 = open(&mut c2).await;
    drop(redis);
    let a = s1.ask("edge", vec![usage(ALICE, 1, 0)]).await;
    assert_eq!(blanket(a.get(ALICE)), BlanketRule::DenyAll);
    let b = s2.ask("edge-open", vec![usage(ALICE, 1, 0)]).await;
    assert_eq!(blanket(b.get(ALICE)), BlanketRule::AllowAll);
}
