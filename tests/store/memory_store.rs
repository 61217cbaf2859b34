//! MemoryStore-specific behaviour: memory is given back once keys expire,
//! and limiters on different clocks sharing a store keep each other's state.
//! What every store shares is in `tests/store/suite`.

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

/// A limiter of `prefix` on `store`, 3 per hour in fixed windows, on `clock`
/// (`None`: the store's own clock).
fn three_per_hour(store: &MemoryStore, clock: Option<&ManualClock>, prefix: &str) -> RateLimiter {
    let builder = RateLimiter::builder()
        .store(store.clone())
        .prefix(prefix)
        .quota(Quota::fixed_window(Rate::per_hour(3)));
    match clock {
        Some(c) => builder.clock(c.clone()),
        None => builder,
    }
    .build()
    .unwrap()
}

/// Uses up `key` (3 allowed, the 4th denied).
async fn use_up(lim: &RateLimiter, key: &str) {
    for i in 0..3 {
        assert!(lim.check(key).await.unwrap().allowed(), "request {i}");
    }
    assert!(!lim.check(key).await.unwrap().allowed());
}

/// A thousand decisions on keys `<tag>0`, `<tag>1`, ...: enough for every
/// shard of a small store to sweep as it is used.
async fn traffic(lim: &RateLimiter, tag: &str) {
    for i in 0..1_000 {
        lim.check(format!("{tag}{i}")).await.unwrap();
    }
}

#[tokio::test]
async fn a_manual_clock_behind_the_stores_does_not_lose_its_state_to_sweeps() {
    // one shard: every key is swept by the same sweeps
    let store = MemoryStore::with_shards(1);
    let early = ManualClock::new(Duration::from_secs(3_600));
    let sim = three_per_hour(&store, Some(&early), "sim");
    use_up(&sim, "k").await;
    // enough decisions on the store's clock (Unix time: decades past the
    // manual time) for the shard to sweep as it is used
    let api = three_per_hour(&store, None, "api");
    traffic(&api, "u").await;
    store.sweep();
    assert!(
        !sim.check("k").await.unwrap().allowed(),
        "the manual-clock window was swept"
    );
    // and the store's own keys are still there too
    assert_eq!(api.peek("u1").await.unwrap().remaining(), 2);
}

#[tokio::test]
async fn a_manual_clock_ahead_of_the_stores_does_not_sweep_its_keys() {
    let store = MemoryStore::with_shards(1);
    let api = three_per_hour(&store, None, "api");
    use_up(&api, "k").await;
    // a simulation a century ahead of Unix time, on the same store
    let late = ManualClock::new(Duration::from_secs(100 * 365 * 86_400));
    let sim = three_per_hour(&store, Some(&late), "sim");
    traffic(&sim, "s").await;
    store.sweep();
    assert!(
        !api.check("k").await.unwrap().allowed(),
        "the store-clock window was swept"
    );
    // each clock's keys expire on that clock: an hour on, the simulation's
    // windows are over and swept, the store's are not
    late.advance(Duration::from_secs(3_601));
    store.sweep();
    assert!(!api.check("k").await.unwrap().allowed());
    assert_eq!(sim.peek("s1").await.unwrap().remaining(), 3);
    assert!(store.len() < 10, "{} keys left", store.len());
}

/// Scopes of limiters gone are freed only once no key is in them: a
/// limiter built again under a name whose keys live finds its state, and
/// one still bound keeps its scope whatever is freed around it.
#[tokio::test]
async fn a_scope_is_freed_only_without_limiters_and_keys() {
    let store = MemoryStore::new();
    let clock = ManualClock::new(Duration::from_secs(3_600));
    let bound = limiter(&store, &clock, "bound");
    assert!(bound.check("k").await.unwrap().allowed());
    {
        let gone = limiter(&store, &clock, "gone");
        assert!(gone.check("k").await.unwrap().allowed());
    }
    // limiters of new names, dropped at once with no key: idle scopes
    for i in 0..500 {
        drop(limiter(&store, &clock, &format!("churn{i}")));
    }
    assert!(store.scopes_held() < 200, "{}", store.scopes_held());
    // `gone` left a key: its scope (and state) is still there
    let again = limiter(&store, &clock, "gone");
    assert_eq!(again.check("k").await.unwrap().remaining(), 3);
    assert_eq!(bound.check("k").await.unwrap().remaining(), 3);
    // once its key has expired and been swept, its scope goes too
    drop(again);
    clock.advance(Duration::from_secs(60));
    store.sweep();
    let before = store.scopes_held();
    for i in 0..500 {
        drop(limiter(&store, &clock, &format!("more{i}")));
    }
    assert!(store.scopes_held() < before + 100);
    assert!(bound.check("k").await.unwrap().allowed());
}
