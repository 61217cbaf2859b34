//! Redis deployments: single node, Cluster, Sentinel, TLS, ACLs, and what the
//! network does to them (failover, faults, stalls, stale connections), plus
//! the store builders' configuration and the fixtures themselves.
//!
//! One test binary; the Redis fixtures are `tests/common`. Modules that need a
//! feature (`cluster`, `sentinel`, `tls`) are empty without it.

#[path = "../common/mod.rs"]
mod common;

mod acl;
mod calendar;
mod cluster;
mod cluster_tls;
mod failover;
mod faults;
mod fixture;
mod joint;
mod on_denial;
mod script_cache;
mod sentinel;
mod stale_connection;
mod stall;
mod store_config;
mod tls;
