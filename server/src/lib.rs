//! A rate limit service for Envoy gateways, on `tower-redis-ratelimit`.
//!
//! This crate is the server's library: the gRPC types of Envoy's rate
//! limit service ([`pb`]), the loading and matching of
//! envoyproxy/ratelimit's YAML configuration files, unchanged, with a few
//! optional extensions ([`config`]), the fixed-window arithmetic that
//! service uses ([`window`]), the service that decides over a store, with
//! `replaces`, a failure policy per domain and an atomic
//! [`reload`](service::RlsService::reload) ([`service`]), the sources of
//! its configuration ([`source`]: the watcher that reloads it when its
//! directory changes, [`reload`], and an xDS client), and its statistics
//! in Prometheus's text format with a `/metrics` endpoint ([`metrics`]);
//! and Envoy's rate limit quota service (RLQS), whose Envoys decide
//! locally from the token buckets it assigns, each paid from a shared
//! budget first ([`rlqs`]); and the gRPC server, each connection's calls
//! polled by its own task ([`serve`]), over a listener bounded in
//! connections and in how long they may stay silent ([`net`]).
//! The `ratelimit-server` binary puts them together; an embedder can too:
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use tower_redis_ratelimit::RedisStore;
//! use tower_redis_ratelimit_server::config::{Config, LoadOptions};
//! use tower_redis_ratelimit_server::net::{Incoming, ListenerOptions};
//! use tower_redis_ratelimit_server::pb::RateLimitServiceServer;
//! use tower_redis_ratelimit_server::reload::ConfigWatcher;
//! use tower_redis_ratelimit_server::serve::GrpcOptions;
//! use tower_redis_ratelimit_server::service::{RlsService, ServiceOptions};
//!
//! let dir = std::path::Path::new("/etc/ratelimit/config");
//! let files = Config::read_dir(dir)?;
//! let config = Config::from_sources(
//!     files.iter().map(|(n, t)| (n.as_str(), t.as_str())),
//!     LoadOptions::default(),
//! )?;
//! let store = RedisStore::from_url("redis://127.0.0.1:6379/")?;
//! let service = RlsService::new(config, store, ServiceOptions::default())?;
//! tokio::spawn(ConfigWatcher::new(service.clone(), dir, LoadOptions::default())
//!     .loaded_from(files)
//!     .run());
//! let metrics = tokio::net::TcpListener::bind("0.0.0.0:9090").await?;
//! tokio::spawn(tower_redis_ratelimit_server::metrics::serve(metrics, service.metrics()));
//! let grpc = tokio::net::TcpListener::bind("0.0.0.0:8081").await?;
//! tower_redis_ratelimit_server::serve::serve(
//!     Incoming::new(grpc, ListenerOptions::default()),
//!     tonic::service::Routes::new(RateLimitServiceServer::new(service)),
//!     GrpcOptions::default(),
//!     std::future::pending(), // or a shutdown signal
//! )
//! .await;
//! # Ok(()) }
//! ```

pub mod config;
mod decide;
mod limits;
pub mod metrics;
pub mod net;
mod options;
pub mod pb;
pub mod reload;
pub mod rlqs;
mod rls;
pub mod serve;
pub mod service;
pub mod source;
pub mod window;
