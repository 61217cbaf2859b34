//! The store suite (`tests/suite`) on `RedisClusterStore` against a private
//! 3-master Redis Cluster per test.
#![cfg(feature = "cluster")]

mod common;
#[macro_use]
mod suite;

redis_suite_tests!(suite::ClusterHarness::start());
