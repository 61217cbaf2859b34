//! A rate limit service for Envoy gateways, on `tower-redis-ratelimit`.
//!
//! This crate is the foundation of the server: the gRPC types of Envoy's
//! rate limit service ([`pb`]), the loading and matching of
//! envoyproxy/ratelimit's YAML configuration files, unchanged ([`config`]),
//! and the fixed-window arithmetic that service uses ([`window`]).
//! Deciding, the store, hot reload and metrics come next.

pub mod config;
pub mod pb;
pub mod window;
