//! The quota service in the `ratelimit-server` binary, as the README starts
//! it (`--quota-config` alone): health, a stream answered, its series on
//! `/metrics`, a reload of its file, an invalid file refused at the start
//! naming the field, and SIGTERM ending the streams before the exit.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{TempDir, free_port, scrape, wait_port};
use tokio::sync::mpsc;
use tonic::server::NamedService;
use tonic::transport::Channel;
use tower_redis_ratelimit_server::pb::envoy::r#type::v3::rate_limit_strategy::Strategy;
use tower_redis_ratelimit_server::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Kind;
use tower_redis_ratelimit_server::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use tower_redis_ratelimit_server::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use tower_redis_ratelimit_server::pb::{RateLimitQuotaServiceClient, RateLimitQuotaServiceServer};
use tower_redis_ratelimit_server::rlqs::RlqsService;

struct Server {
    child: Child,
    grpc: u16,
    metrics: u16,
}

impl Server {
    fn spawn(quota: &Path, args: &[&str]) -> Server {
        let grpc = free_port();
        let metrics = free_port();
        let mut child = Command::new(env!("CARGO_BIN_EXE_ratelimit-server"))
            .arg("--quota-config")
            .arg(quota)
            .args(["--grpc", &format!("127.0.0.1:{grpc}")])
            .args(["--metrics", &format!("127.0.0.1:{metrics}")])
            .args(args)
            .env_remove("RUNTIME_ROOT")
            .env_remove("RATELIMIT_CONFIG")
            .env_remove("REDIS_URL")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("ratelimit-server");
        assert!(wait_port(&mut child, grpc), "the server did not start");
        assert!(wait_port(&mut child, metrics), "no metrics port");
        Server {
            child,
            grpc,
            metrics,
        }
    }

    async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://127.0.0.1:{}", self.grpc))
            .expect("uri")
            .connect()
            .await
            .expect("connect")
    }

    fn exit_within(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn example() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/quota/quota.yaml");
    std::fs::read_to_string(path).expect("the example quota file")
}

type Tx = mpsc::Sender<RateLimitQuotaUsageReports>;

async fn open(channel: Channel) -> (Tx, tonic::Streaming<RateLimitQuotaResponse>) {
    let (tx, rx) = mpsc::channel(4);
    let outbound = futures_util::stream::unfold(rx, |mut rx: mpsc::Receiver<_>| async move {
        rx.recv().await.map(|m| (m, rx))
    });
    let inbound = RateLimitQuotaServiceClient::new(channel)
        .stream_rate_limit_quotas(outbound)
        .await
        .expect("the stream opens")
        .into_inner();
    (tx, inbound)
}

fn report(route: &str, user: Option<&str>) -> RateLimitQuotaUsageReports {
    let mut bucket = std::collections::HashMap::from([("route".to_owned(), route.to_owned())]);
    if let Some(u) = user {
        bucket.insert("user".to_owned(), u.to_owned());
    }
    RateLimitQuotaUsageReports {
        domain: "edge".to_owned(),
        bucket_quota_usages: vec![BucketQuotaUsage {
            bucket_id: Some(BucketId { bucket }),
            time_elapsed: None,
            num_requests_allowed: 1,
            num_requests_denied: 0,
        }],
    }
}

async fn strategy(
    tx: &Tx,
    rx: &mut tonic::Streaming<RateLimitQuotaResponse>,
    r: RateLimitQuotaUsageReports,
) -> Strategy {
    tx.send(r).await.expect("send");
    let answer = tokio::time::timeout(Duration::from_secs(30), rx.message())
        .await
        .expect("an answer within 30 s")
        .expect("no error")
        .expect("an answer");
    match answer.bucket_action[0].bucket_action {
        Some(Kind::QuotaAssignmentAction(a)) => a
            .rate_limit_strategy
            .and_then(|s| s.strategy)
            .expect("a strategy"),
        other => panic!("an assignment: {other:?}"),
    }
}

#[tokio::test]
async fn the_readme_command_serves_quotas_reloads_and_ends_streams_on_sigterm() {
    let dir = TempDir::new("rlqs-bin");
    let file = dir.0.join("quota.yaml");
    std::fs::write(&file, example()).expect("write");
    let mut server = Server::spawn(&file, &["--watch-interval", "100"]);
    // health: the quota service is serving
    let mut health = tonic_health::pb::health_client::HealthClient::new(server.channel().await);
    let name = <RateLimitQuotaServiceServer<RlqsService> as NamedService>::NAME;
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: name.into(),
        })
        .await
        .expect("check")
        .into_inner()
        .status();
    assert_eq!(
        status,
        tonic_health::pb::health_check_response::ServingStatus::Serving
    );
    // a stream: the example's rules
    let (tx, mut rx) = open(server.channel().await).await;
    let chat = strategy(&tx, &mut rx, report("chat", Some("alice"))).await;
    assert!(matches!(chat, Strategy::TokenBucket(_)), "{chat:?}");
    assert_eq!(
        strategy(&tx, &mut rx, report("health", None)).await,
        Strategy::BlanketRule(0)
    );
    // its series on /metrics
    let text = scrape(
        format!("127.0.0.1:{}", server.metrics)
            .parse()
            .expect("addr"),
    )
    .await;
    assert!(
        text.contains(
            "ratelimit_quota_requests_allowed_total{domain=\"edge\",rule=\"chat-per-user\"} 1"
        ),
        "{text}"
    );
    assert!(text.contains("ratelimit_quota_streams 1"), "{text}");
    // a changed file applies from the next report
    let denied = example().replace(
        "id: { route: health }\n    blanket: allow_all",
        "id: { route: health }\n    blanket: deny_all",
    );
    assert_ne!(denied, example());
    std::fs::write(&file, denied).expect("write");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if strategy(&tx, &mut rx, report("health", None)).await == Strategy::BlanketRule(1) {
            break;
        }
        assert!(Instant::now() < deadline, "the change was never applied");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // SIGTERM: the stream ends, the process exits
    let _ = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status();
    let end = tokio::time::timeout(Duration::from_secs(15), rx.message())
        .await
        .expect("the stream ends within 15 s of SIGTERM");
    assert!(!matches!(end, Ok(Some(_))), "{end:?}");
    assert!(
        server
            .exit_within(Duration::from_secs(15))
            .is_some_and(|s| s.success()),
        "no clean exit"
    );
}

#[test]
fn an_invalid_quota_file_refuses_the_start_naming_the_field() {
    let dir = TempDir::new("rlqs-bad");
    let file = dir.0.join("quota.yaml");
    std::fs::write(&file, example().replace("unit: minute", "unit: fortnight")).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_ratelimit-server"))
        .arg("--quota-config")
        .arg(&file)
        .args(["--grpc", &format!("127.0.0.1:{}", free_port())])
        .env_remove("RUNTIME_ROOT")
        .env_remove("RATELIMIT_CONFIG")
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("quota.yaml: buckets[0].unit: second, minute, hour or day"),
        "{err}"
    );
}
