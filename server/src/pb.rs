//! The protobuf messages and the gRPC server and client of Envoy's rate
//! limit service, generated at build time from the vendored files in
//! `proto/` (see `proto/README.md` for their origin and licence).
//!
//! The service is [`RateLimitService`](envoy::service::ratelimit::v3): its
//! server trait and `RateLimitServiceServer` are in
//! [`rate_limit_service_server`](envoy::service::ratelimit::v3::rate_limit_service_server),
//! its client `RateLimitServiceClient` in
//! [`rate_limit_service_client`](envoy::service::ratelimit::v3::rate_limit_service_client).
//!
//! The quota service is
//! [`RateLimitQuotaService`](envoy::service::rate_limit_quota::v3), its
//! server `RateLimitQuotaServiceServer` and client
//! `RateLimitQuotaServiceClient` re-exported here.
//!
//! The xDS client's: the aggregated discovery service
//! ([`envoy::service::discovery::v3`], state of the world only), its
//! `google.rpc.Status` ([`google::rpc`]) and envoyproxy/ratelimit's
//! resource `RateLimitConfig` ([`ratelimit::config::ratelimit::v3`]).

// generated code: its items are documented by the proto comments where the
// proto has them, and its lints are prost's and tonic's business
#![allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
#![allow(rustdoc::all)]

/// `envoy.*` packages.
pub mod envoy {
    /// `envoy.config.*`.
    pub mod config {
        /// `envoy.config.core.*`.
        pub mod core {
            /// `envoy.config.core.v3`: `HeaderValue` and `Node` only.
            pub mod v3 {
                tonic::include_proto!("envoy.config.core.v3");
            }
        }
    }
    /// `envoy.extensions.*`.
    pub mod extensions {
        /// `envoy.extensions.common.*`.
        pub mod common {
            /// `envoy.extensions.common.ratelimit.*`.
            pub mod ratelimit {
                /// `envoy.extensions.common.ratelimit.v3`: `RateLimitDescriptor`.
                pub mod v3 {
                    tonic::include_proto!("envoy.extensions.common.ratelimit.v3");
                }
            }
        }
    }
    /// `envoy.service.*`.
    pub mod service {
        /// `envoy.service.discovery.*`.
        pub mod discovery {
            /// `envoy.service.discovery.v3`: the aggregated discovery
            /// service (state of the world), its request and response.
            pub mod v3 {
                tonic::include_proto!("envoy.service.discovery.v3");
            }
        }
        /// `envoy.service.ratelimit.*`.
        pub mod ratelimit {
            /// `envoy.service.ratelimit.v3`: the service, its request and response.
            pub mod v3 {
                tonic::include_proto!("envoy.service.ratelimit.v3");
            }
        }
        /// `envoy.service.rate_limit_quota.*`.
        pub mod rate_limit_quota {
            /// `envoy.service.rate_limit_quota.v3`: the quota service, its
            /// usage reports and its responses.
            pub mod v3 {
                tonic::include_proto!("envoy.service.rate_limit_quota.v3");
            }
        }
    }
    /// `envoy.type.*`.
    pub mod r#type {
        /// `envoy.type.v3`: `RateLimitUnit`, `RateLimitStrategy`, `TokenBucket`.
        pub mod v3 {
            tonic::include_proto!("envoy.r#type.v3");
        }
    }
}

/// `google.*`.
pub mod google {
    /// `google.rpc`: `Status`, a NACK's `error_detail`.
    pub mod rpc {
        tonic::include_proto!("google.rpc");
    }
}

/// `ratelimit.*`: envoyproxy/ratelimit's own messages.
pub mod ratelimit {
    /// `ratelimit.config.*`.
    pub mod config {
        /// `ratelimit.config.ratelimit.*`.
        pub mod ratelimit {
            /// `ratelimit.config.ratelimit.v3`: `RateLimitConfig`, the
            /// resource an xDS management server sends.
            pub mod v3 {
                tonic::include_proto!("ratelimit.config.ratelimit.v3");
            }
        }
    }
}

pub use envoy::extensions::common::ratelimit::v3::{RateLimitDescriptor, rate_limit_descriptor};
pub use envoy::service::rate_limit_quota::v3::{
    rate_limit_quota_service_client::RateLimitQuotaServiceClient,
    rate_limit_quota_service_server::{RateLimitQuotaService, RateLimitQuotaServiceServer},
};
pub use envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse, rate_limit_response,
    rate_limit_service_client::RateLimitServiceClient,
    rate_limit_service_server::{RateLimitService, RateLimitServiceServer},
};

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    #[test]
    fn request_round_trips_and_client_and_server_exist() {
        let req = RateLimitRequest {
            domain: "api".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![rate_limit_descriptor::Entry {
                    key: "path".into(),
                    value: "/login".into(),
                }],
                limit: None,
                hits_addend: Some(3),
            }],
            hits_addend: 2,
            hits_subtrahend: 0,
        };
        let bytes = req.encode_to_vec();
        assert_eq!(RateLimitRequest::decode(bytes.as_slice()).ok(), Some(req));
        // the types the server and the tests will use
        let _client: Option<RateLimitServiceClient<tonic::transport::Channel>> = None;
        fn _server<S: RateLimitService>(s: S) -> RateLimitServiceServer<S> {
            RateLimitServiceServer::new(s)
        }
        assert_eq!(
            rate_limit_response::rate_limit::Unit::Week as i32,
            7,
            "WEEK is 7 in rls.proto"
        );
    }

    /// The quota service's field numbers and types, as in Envoy's
    /// `rlqs.proto`, `ratelimit_strategy.proto` and `token_bucket.proto`
    /// (each tag byte is `field << 3 | wire type`).
    #[test]
    fn quota_messages_have_envoys_field_numbers() {
        use envoy::service::rate_limit_quota::v3::{
            BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
            rate_limit_quota_response::{BucketAction, bucket_action},
            rate_limit_quota_usage_reports::BucketQuotaUsage,
        };
        use envoy::r#type::v3 as ty;

        let id = BucketId {
            bucket: [("k".to_owned(), "v".to_owned())].into(),
        };
        // BucketId.bucket 1 (map<string, string>)
        assert_eq!(id.encode_to_vec(), [0x0a, 6, 0x0a, 1, b'k', 0x12, 1, b'v']);
        let usage = BucketQuotaUsage {
            bucket_id: None,
            time_elapsed: Some(prost_types::Duration {
                seconds: 1,
                nanos: 0,
            }),
            num_requests_allowed: 2,
            num_requests_denied: 3,
        };
        // time_elapsed 2, num_requests_allowed 3, num_requests_denied 4
        assert_eq!(usage.encode_to_vec(), [0x12, 2, 0x08, 1, 0x18, 2, 0x20, 3]);
        let reports = RateLimitQuotaUsageReports {
            domain: "d".into(),
            bucket_quota_usages: vec![BucketQuotaUsage::default()],
        };
        // domain 1, bucket_quota_usages 2 (repeated)
        assert_eq!(reports.encode_to_vec(), [0x0a, 1, b'd', 0x12, 0]);

        let abandon = BucketAction {
            bucket_id: None,
            bucket_action: Some(bucket_action::BucketAction::AbandonAction(
                bucket_action::AbandonAction {},
            )),
        };
        // abandon_action 3
        assert_eq!(abandon.encode_to_vec(), [0x1a, 0]);
        let assign = bucket_action::QuotaAssignmentAction {
            assignment_time_to_live: Some(prost_types::Duration::default()),
            rate_limit_strategy: Some(ty::RateLimitStrategy {
                strategy: Some(ty::rate_limit_strategy::Strategy::BlanketRule(
                    ty::rate_limit_strategy::BlanketRule::DenyAll as i32,
                )),
            }),
        };
        // assignment_time_to_live 2, rate_limit_strategy 3 > blanket_rule 1
        assert_eq!(assign.encode_to_vec(), [0x12, 0, 0x1a, 2, 0x08, 1]);
        let response = RateLimitQuotaResponse {
            bucket_action: vec![BucketAction {
                bucket_id: Some(id),
                bucket_action: Some(bucket_action::BucketAction::QuotaAssignmentAction(assign)),
            }],
        };
        let bytes = response.encode_to_vec();
        // bucket_action 1 > bucket_id 1, quota_assignment_action 2
        assert_eq!(bytes[..4], [0x0a, 18, 0x0a, 8]);
        assert_eq!(bytes[12], 0x12);
        assert_eq!(
            RateLimitQuotaResponse::decode(bytes.as_slice()).ok(),
            Some(response)
        );

        let per_unit = ty::RateLimitStrategy {
            strategy: Some(ty::rate_limit_strategy::Strategy::RequestsPerTimeUnit(
                ty::rate_limit_strategy::RequestsPerTimeUnit {
                    requests_per_time_unit: 5,
                    time_unit: ty::RateLimitUnit::Minute as i32,
                },
            )),
        };
        // requests_per_time_unit 2 > requests_per_time_unit 1, time_unit 2
        assert_eq!(per_unit.encode_to_vec(), [0x12, 4, 0x08, 5, 0x10, 2]);
        let bucket = ty::RateLimitStrategy {
            strategy: Some(ty::rate_limit_strategy::Strategy::TokenBucket(
                ty::TokenBucket {
                    max_tokens: 7,
                    tokens_per_fill: Some(1),
                    fill_interval: Some(prost_types::Duration {
                        seconds: 1,
                        nanos: 0,
                    }),
                },
            )),
        };
        // token_bucket 3 > max_tokens 1, tokens_per_fill 2 (UInt32Value),
        // fill_interval 3
        assert_eq!(
            bucket.encode_to_vec(),
            [0x1a, 10, 0x08, 7, 0x12, 2, 0x08, 1, 0x1a, 2, 0x08, 1]
        );

        let _client: Option<RateLimitQuotaServiceClient<tonic::transport::Channel>> = None;
        fn _server<S: RateLimitQuotaService>(s: S) -> RateLimitQuotaServiceServer<S> {
            RateLimitQuotaServiceServer::new(s)
        }
    }
}
