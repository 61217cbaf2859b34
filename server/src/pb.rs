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
}
