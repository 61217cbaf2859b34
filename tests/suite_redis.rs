//! The store suite (`tests/suite`) on [`RedisStore`](tower_redis_ratelimit::RedisStore)
//! against a private redis-server per test.

mod common;
#[macro_use]
mod suite;

redis_suite_tests!(suite::RedisHarness::start());
