//! Limiters on the memory store under a manual clock, for tests whose subject
//! is the middleware or the keys rather than the store: no Redis, no sleeps,
//! exact times. (What every store must do alike is `tests/store/suite`.)

use std::time::Duration;

use tower_redis_ratelimit::clock::ManualClock;
use tower_redis_ratelimit::{MemoryStore, Quota, RateLimiter};

/// A manual clock one hour past zero (a window boundary, far from any edge case).
pub(crate) fn clock() -> ManualClock {
    ManualClock::new(Duration::from_secs(3_600))
}

/// A limiter over `store` with `quotas`, its time read from `clock`.
pub(crate) fn limiter_on(
    store: &MemoryStore,
    clock: &ManualClock,
    prefix: &str,
    quotas: impl IntoIterator<Item = Quota>,
) -> RateLimiter {
    RateLimiter::builder()
        .store(store.clone())
        .prefix(prefix)
        .clock(clock.clone())
        .quotas(quotas)
        .build()
        .unwrap()
}

/// A limiter over a store of its own with `quotas`, its time read from `clock`.
pub(crate) fn limiter(
    clock: &ManualClock,
    prefix: &str,
    quotas: impl IntoIterator<Item = Quota>,
) -> RateLimiter {
    limiter_on(&MemoryStore::new(), clock, prefix, quotas)
}
