//! A rate limit service for Envoy gateways, on `tower-redis-ratelimit`.
//!
//! This crate is the foundation of the server: the gRPC types of Envoy's
//! rate limit service ([`pb`]), the loading and matching of
//! envoyproxy/ratelimit's YAML configuration files, unchanged ([`config`]),
//! the fixed-window arithmetic that service uses ([`window`]) and the
//! service that decides over a store ([`service`]). Hot reload
//! and metrics come next.

pub mod config;
pub mod metrics;
pub mod pb;
pub mod reload;
pub mod service;
pub mod window;
