//! Envoy's `envoy.service.rate_limit_quota.v3.RateLimitQuotaService`
//! around the quota core ([`QuotaService`]): each stream's reports become
//! [`Usage`]s, its [`Action`]s the response's bucket actions.

use std::pin::Pin;

use futures_core::Stream;
use tokio::sync::{mpsc, watch};
use tonic::{Request, Response, Status, Streaming};

use super::assign::{Action, MARGIN, QuotaService, Strategy, Usage};
use super::config::Blanket;
use crate::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::{
    BucketAction, bucket_action,
};
use crate::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaService;
use crate::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use crate::pb::envoy::r#type::v3 as ty;

/// The quota service's gRPC server: serve it with
/// [`RateLimitQuotaServiceServer::new`](crate::pb::RateLimitQuotaServiceServer::new).
#[derive(Debug, Clone)]
pub struct RlqsService {
    core: QuotaService,
    stopping: Option<watch::Receiver<bool>>,
}

impl RlqsService {
    /// Serves `core`.
    pub fn new(core: QuotaService) -> Self {
        RlqsService {
            core,
            stopping: None,
        }
    }

    /// Ends every stream when `stopping` turns true (at shutdown: the
    /// Envoys reconnect to another instance, keeping their assignments
    /// meanwhile).
    #[must_use]
    pub fn stop_on(mut self, stopping: watch::Receiver<bool>) -> Self {
        self.stopping = Some(stopping);
        self
    }

    /// The core.
    pub fn core(&self) -> &QuotaService {
        &self.core
    }
}

type Responses = Pin<Box<dyn Stream<Item = Result<RateLimitQuotaResponse, Status>> + Send>>;

#[tonic::async_trait]
impl RateLimitQuotaService for RlqsService {
    type StreamRateLimitQuotasStream = Responses;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Responses>, Status> {
        let mut inbound = request.into_inner();
        // one response waiting at most: a stream that is not read stops
        // being read (HTTP/2 flow control), its memory bounded
        let (tx, rx) = mpsc::channel::<Result<RateLimitQuotaResponse, Status>>(1);
        let core = self.core.clone();
        let mut stopping = self.stopping.clone();
        tokio::spawn(async move {
            let mut state = core.stream();
            // the first report's domain, for the reports that leave it empty
            let mut domain = String::new();
            loop {
                let next = async {
                    match &mut stopping {
                        Some(s) => {
                            tokio::select! {
                                m = inbound.message() => Some(m),
                                _ = s.wait_for(|stop| *stop) => None,
                            }
                        }
                        None => Some(inbound.message().await),
                    }
                };
                let msg = match next.await {
                    Some(Ok(Some(m))) => m,
                    // the Envoy closed, the stream broke, or shutting down
                    _ => break,
                };
                if !msg.domain.is_empty() {
                    domain = msg.domain;
                }
                let usages = msg
                    .bucket_quota_usages
                    .into_iter()
                    .map(|u| Usage {
                        id: u
                            .bucket_id
                            .map(|b| b.bucket.into_iter().collect())
                            .unwrap_or_default(),
                        allowed: u.num_requests_allowed,
                        denied: u.num_requests_denied,
                    })
                    .collect();
                let now = core.now();
                let actions = core.report(&mut state, &domain, usages, now).await;
                if actions.is_empty() {
                    continue;
                }
                // an assignment is paid until its TTL and MARGIN past `now`:
                // an answer that cannot be on its way within MARGIN is not
                // sent (its Envoy keeps what it holds, paid for)
                let left = MARGIN.saturating_sub(core.now().saturating_sub(now));
                if left.is_zero() {
                    tracing::warn!(
                        "a report took past {} ms to decide (a slow store?): its answer is \
                         not sent",
                        MARGIN.as_millis()
                    );
                    continue;
                }
                let response = RateLimitQuotaResponse {
                    bucket_action: actions
                        .into_iter()
                        .map(|(id, a)| bucket_action_pb(id, a))
                        .collect(),
                };
                match tokio::time::timeout(left, tx.send(Ok(response))).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => break,
                    Err(_) => {
                        // a client that does not read its answers: the stream
                        // ends (it reconnects; what it holds was paid for)
                        tracing::debug!("an Envoy does not read its answers: its stream ends");
                        break;
                    }
                }
            }
        });
        let responses =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|m| (m, rx)) },
            );
        Ok(Response::new(Box::pin(responses)))
    }
}

/// One action as Envoy reads it. A token bucket's `fill_interval` carries
/// its seconds again in its nanoseconds: Envoy tells a new bucket from the
/// one it holds by `max_tokens`, `tokens_per_fill` and the nanoseconds of
/// `fill_interval` only, and computes the rate from whole seconds.
pub fn bucket_action_pb(id: Vec<(String, String)>, action: Action) -> BucketAction {
    let bucket_id = Some(BucketId {
        bucket: id.into_iter().collect(),
    });
    let kind = match action {
        Action::Abandon => {
            bucket_action::BucketAction::AbandonAction(bucket_action::AbandonAction {})
        }
        Action::Assign { strategy, ttl } => {
            let strategy = match strategy {
                Strategy::Blanket(b) => ty::rate_limit_strategy::Strategy::BlanketRule(match b {
                    Blanket::AllowAll => ty::rate_limit_strategy::BlanketRule::AllowAll,
                    Blanket::DenyAll => ty::rate_limit_strategy::BlanketRule::DenyAll,
                }
                    as i32),
                Strategy::TokenBucket(tb) => {
                    let secs = tb.fill_interval_secs;
                    ty::rate_limit_strategy::Strategy::TokenBucket(ty::TokenBucket {
                        max_tokens: tb.max_tokens,
                        tokens_per_fill: Some(tb.tokens_per_fill),
                        fill_interval: Some(prost_types::Duration {
                            seconds: i64::from(secs),
                            nanos: i32::try_from(secs % 1_000_000_000).unwrap_or(0),
                        }),
                    })
                }
            };
            bucket_action::BucketAction::QuotaAssignmentAction(
                bucket_action::QuotaAssignmentAction {
                    assignment_time_to_live: Some(prost_types::Duration {
                        seconds: i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX),
                        nanos: 0,
                    }),
                    rate_limit_strategy: Some(ty::RateLimitStrategy {
                        strategy: Some(strategy),
                    }),
                },
            )
        }
    };
    BucketAction {
        bucket_id,
        bucket_action: Some(kind),
    }
}
