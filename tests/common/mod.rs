//! Shared test fixtures, one module per kind:
//!
//! - [`redis`]: [`RedisServer`], a private `redis-server` process;
//! - [`cluster`]: [`RedisCluster`], a private Redis Cluster of such servers;
//! - [`sentinel`]: [`RedisSentinel`], a primary, a replica and three sentinels;
//! - [`tls`]: [`TlsFiles`], a test CA and server certificate for TLS servers;
//! - [`proxy`]: [`StallProxy`], a TCP proxy that can stall like a lossy network;
//! - [`http`]: driving the middleware in process (axum `oneshot`);
//! - [`net`]: the middleware on real sockets (a loopback server, a hyper client);
//! - [`memory`]: limiters on the memory store with a manual clock, for tests
//!   whose subject is not the store;
//! - `logs` (with the `tracing` feature): capturing a test's log lines.
//!
//! Every test owns the servers it starts. They listen on free loopback ports
//! chosen by these fixtures (never 6379, never a Redis that is already
//! running), keep their data in their own directory under
//! `std::env::temp_dir()`, and are killed (and their directory removed) when
//! the fixture is dropped.
//!
//! A missing `redis-server` / `redis-cli` binary is a test failure with an
//! install hint, never a silent skip. The binaries can be overridden with the
//! `REDIS_SERVER_BIN` / `REDIS_CLI_BIN` environment variables.
//!
//! Use it from an area's `tests/<area>/main.rs` with
//! `#[path = "../common/mod.rs"] mod common;` (one per test binary; its
//! modules `use crate::common;`), and from benches with
//! `#[path = "../tests/common/mod.rs"] mod common;`.

#![allow(dead_code, unused_imports)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub(crate) mod cluster;
pub(crate) mod http;
#[cfg(feature = "tracing")]
pub(crate) mod logs;
pub(crate) mod memory;
pub(crate) mod net;
pub(crate) mod proxy;
pub(crate) mod redis;
pub(crate) mod sentinel;
mod sys;
pub(crate) mod tls;

pub(crate) use self::cluster::RedisCluster;
pub(crate) use self::proxy::StallProxy;
pub(crate) use self::redis::{RedisServer, RedisServerBuilder, info_field, parse_commandstats};
pub(crate) use self::sentinel::RedisSentinel;
pub(crate) use self::tls::TlsFiles;

/// A store timeout no loaded test machine reaches: a timed-out call would
/// fail open and make exact counts flaky. Tests that are not about timeouts
/// use it; timeouts have tests of their own.
pub(crate) const GENEROUS: std::time::Duration = std::time::Duration::from_secs(10);

/// How much later than its bound a timed call may end on a loaded 2-core
/// machine (two suites at once): scheduling slack, not a part of the bound.
pub(crate) const MARGIN: std::time::Duration = std::time::Duration::from_secs(1);

/// Checks `key` until the store answers (within 10 s), for the first call
/// of a test whose store timeout is short: it connects and loads the
/// script, which a loaded machine may not finish within that timeout.
pub(crate) async fn warm_up(
    limiter: &tower_redis_ratelimit::RateLimiter,
    key: &str,
) -> tower_redis_ratelimit::Decision {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match limiter.check(key).await {
            Ok(decision) => return decision,
            Err(e) => assert!(
                std::time::Instant::now() < deadline,
                "the store did not answer within 10 s: {e}"
            ),
        }
    }
}
