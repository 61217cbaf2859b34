//! MemoryStore-specific behaviour: memory is given back once keys expire.
//! What every store shares is in `tests/suite`, run by `tests/suite_memory.rs`.

use std::time::Duration;

use tower_redis_ratelimit::clock::ManualClock;
use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimiter};

const KEYS: usize = 100_000;

fn limiter(store: &MemoryStore, clock: &ManualClock, prefix: &str) -> RateLimiter {
    RateLimiter::builder()
        .store(store.clone())
        .clock(clock.clone())
        .prefix(prefix)
        .quota(Quota::gcra(Rate::per_second(5)))
        .build()
        .unwrap()
}

/// Fills `store` with [`KEYS`] keys that expire within a second; the capacity reached.
async fn fill(store: &MemoryStore, clock: &ManualClock, prefix: &str) -> usize {
    let lim = limiter(store, clock, prefix);
    for k in 0..KEYS {
        assert!(lim.check(format!("k{k}")).await.unwrap().allowed());
    }
    assert_eq!(store.len(), KEYS);
    let peak = store.capacity();
    assert!(peak >= KEYS, "capacity {peak} below {KEYS} keys");
    // every key has expired (the store learns the manual time from a decision)
    clock.advance(Duration::from_secs(2));
    lim.peek("now").await.unwrap();
    peak
}

#[tokio::test]
async fn a_sweep_gives_the_memory_of_expired_keys_back() {
    let store = MemoryStore::with_shards(8);
    let clock = ManualClock::new(Duration::from_secs(3_600));
    let peak = fill(&store, &clock, "sweep").await;
    store.sweep();
    assert!(store.is_empty());
    let after = store.capacity();
    assert!(
        after <= peak / 16,
        "capacity {after} after the sweep, peak {peak}"
    );
    // and the store still works, growing again as needed
    let peak2 = fill(&store, &clock, "again").await;
    assert!(peak2 >= KEYS);
    store.sweep();
    assert!(store.capacity() <= peak2 / 16);
}

#[tokio::test]
async fn use_alone_gives_the_memory_of_expired_keys_back() {
    let store = MemoryStore::with_shards(8);
    let clock = ManualClock::new(Duration::from_secs(3_600));
    let peak = fill(&store, &clock, "use").await;
    // peeks write nothing; every shard is swept as it is used
    let lim = limiter(&store, &clock, "peek");
    for k in 0..(8 * 4 * 1024) {
        lim.peek(format!("p{k}")).await.unwrap();
    }
    assert!(store.is_empty());
    let after = store.capacity();
    assert!(
        after <= peak / 16,
        "capacity {after} after use, peak {peak}"
    );
}
