//! The store suite (`tests/suite`) on [`MemoryStore`](tower_redis_ratelimit::MemoryStore).
//! Its keys are not Redis keys, so the TTL checks do not apply; expiry is
//! checked by `all_keys_are_gone_once_their_windows_pass` (swept keys) and by
//! `tests/soak.rs`.

mod common;
#[macro_use]
mod suite;

store_suite_tests!(suite::MemoryHarness::new());
