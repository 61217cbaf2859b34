//! Envoy's `envoy.service.rate_limit_quota.v3.RateLimitQuotaService`
//! around the quota core ([`QuotaService`]): each stream's reports become
//! [`Usage`]s, its [`Action`]s the response's bucket actions
//! ([`bucket_action_pb`]; [`action_of_pb`] reads one back, as Envoy does).

use std::pin::Pin;

use std::time::Duration;

use futures_core::Stream;
use tokio::sync::{mpsc, watch};
use tonic::{Request, Response, Status, Streaming};

use super::assign::{Action, MARGIN, QuotaService, Strategy, TokenBucket, Usage};
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

/// One bucket action read as Envoy's filter reads it, the inverse of
/// [`bucket_action_pb`]: the bucket id's entries (sorted by key) and the
/// action, the TTL and the fill interval in whole seconds, an unset
/// `tokens_per_fill` 1 (the protocol's default). `None` for what this
/// service never sends: no id, no action or strategy, an unknown blanket
/// rule, `requests_per_time_unit`, a zero or negative fill interval.
pub fn action_of_pb(action: BucketAction) -> Option<(Vec<(String, String)>, Action)> {
    let mut id: Vec<(String, String)> = action.bucket_id?.bucket.into_iter().collect();
    id.sort();
    let action = match action.bucket_action? {
        bucket_action::BucketAction::AbandonAction(_) => Action::Abandon,
        bucket_action::BucketAction::QuotaAssignmentAction(a) => {
            let secs = a.assignment_time_to_live.map_or(0, |d| d.seconds);
            let ttl = Duration::from_secs(u64::try_from(secs).unwrap_or(0));
            let strategy = match a.rate_limit_strategy?.strategy? {
                ty::rate_limit_strategy::Strategy::BlanketRule(b) => {
                    match ty::rate_limit_strategy::BlanketRule::try_from(b).ok()? {
                        ty::rate_limit_strategy::BlanketRule::AllowAll => {
                            Strategy::Blanket(Blanket::AllowAll)
                        }
                        ty::rate_limit_strategy::BlanketRule::DenyAll => {
                            Strategy::Blanket(Blanket::DenyAll)
                        }
                    }
                }
                ty::rate_limit_strategy::Strategy::TokenBucket(tb) => {
                    let secs = tb.fill_interval?.seconds;
                    Strategy::TokenBucket(TokenBucket {
                        max_tokens: tb.max_tokens,
                        tokens_per_fill: tb.tokens_per_fill.unwrap_or(1),
                        fill_interval_secs: u32::try_from(secs).ok().filter(|&s| s > 0)?,
                    })
                }
                ty::rate_limit_strategy::Strategy::RequestsPerTimeUnit(_) => return None,
            };
            Action::Assign { strategy, ttl }
        }
    };
    Some((id, action))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(entries: &[(&str, &str)]) -> Vec<(String, String)> {
        entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn every_action_sent_reads_back_the_same() {
        let ttl = Duration::from_secs(11);
        let bucket = |max_tokens, tokens_per_fill, fill_interval_secs| {
            Strategy::TokenBucket(TokenBucket {
                max_tokens,
                tokens_per_fill,
                fill_interval_secs,
            })
        };
        let actions = [
            Action::Abandon,
            Action::Assign {
                strategy: Strategy::Blanket(Blanket::AllowAll),
                ttl: Duration::from_secs(300),
            },
            Action::Assign {
                strategy: Strategy::Blanket(Blanket::DenyAll),
                ttl,
            },
            Action::Assign {
                strategy: bucket(50, 10, 1),
                ttl,
            },
            Action::Assign {
                strategy: bucket(1, 1, 4),
                ttl: Duration::from_secs(3),
            },
            Action::Assign {
                strategy: bucket(u32::MAX, u32::MAX, 60),
                ttl: Duration::ZERO,
            },
        ];
        let entries = id(&[("route", "chat"), ("user", "alice")]);
        for action in actions {
            let pb = bucket_action_pb(entries.clone(), action);
            assert_eq!(action_of_pb(pb), Some((entries.clone(), action)));
        }
    }

    #[test]
    fn what_the_service_never_sends_reads_as_nothing() {
        let entries = id(&[("user", "alice")]);
        let assign = Action::Assign {
            strategy: Strategy::Blanket(Blanket::DenyAll),
            ttl: Duration::from_secs(3),
        };
        let no_id = BucketAction {
            bucket_id: None,
            ..bucket_action_pb(entries.clone(), assign)
        };
        assert_eq!(action_of_pb(no_id), None);
        let no_action = BucketAction {
            bucket_action: None,
            ..bucket_action_pb(entries.clone(), assign)
        };
        assert_eq!(action_of_pb(no_action), None);
        let per_time_unit = BucketAction {
            bucket_id: Some(BucketId {
                bucket: entries.iter().cloned().collect(),
            }),
            bucket_action: Some(bucket_action::BucketAction::QuotaAssignmentAction(
                bucket_action::QuotaAssignmentAction {
                    assignment_time_to_live: None,
                    rate_limit_strategy: Some(ty::RateLimitStrategy {
                        strategy: Some(ty::rate_limit_strategy::Strategy::RequestsPerTimeUnit(
                            ty::rate_limit_strategy::RequestsPerTimeUnit {
                                requests_per_time_unit: 10,
                                time_unit: ty::RateLimitUnit::Second as i32,
                            },
                        )),
                    }),
                },
            )),
        };
        assert_eq!(action_of_pb(per_time_unit), None);
    }
}
