//! The local deny cache: a key denied until an instant is answered from
//! process memory until then, so a client that keeps knocking after its
//! denial costs the store nothing.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::clock::duration_us;
use crate::decision::Decision;
use crate::limiter::RateLimiter;

const SHARDS: usize = 16;

/// How far apart two cores' time-stamp counters may read, in µs (they are
/// synchronized; a millisecond is ample, and a denial cached a millisecond
/// short of its end still spares the store nearly every request).
const COUNTER_SKEW_US: u64 = 1_000;

/// Default number of keys the cache holds.
pub(crate) const DEFAULT_CAPACITY: usize = 10_000;

type Shard = HashMap<Box<[u8]>, Entry>;

pub(crate) struct DenyCache {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    per_shard: usize,
    /// Entries over all shards: lets the hot path skip hashing and locking
    /// while nobody is denied.
    len: AtomicUsize,
    epoch: tokio::time::Instant,
}

struct Entry {
    /// Until when (cache time, µs) the key is denied.
    until: u64,
    /// When the decision was made (cache time, µs).
    at: u64,
    /// The denied cost: a request at least as heavy is denied too.
    cost: u64,
    decision: Decision,
}

impl std::fmt::Debug for DenyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DenyCache")
            .field("capacity", &(self.per_shard * self.shards.len()))
            .field("len", &self.len.load(Ordering::Relaxed))
            .finish()
    }
}

impl DenyCache {
    /// A cache of about `capacity` keys (at least one per shard).
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
            len: AtomicUsize::new(0),
            epoch: tokio::time::Instant::now(),
        }
    }

    /// The cache's clock in µs: the limiter's own when it is in this
    /// process (a manual clock, so tests and simulations see one time; a
    /// memory store's, read as cheaply as a decision reads it), else tokio's
    /// monotonic clock.
    pub(crate) fn now(&self, limiter: &RateLimiter) -> u64 {
        match limiter.local_now_us() {
            Some(t) => t,
            None => duration_us(tokio::time::Instant::now().saturating_duration_since(self.epoch)),
        }
    }

    /// The cache time to record a decision at, read before the store call
    /// so that a cached denial never ends later than the store's. A memory
    /// store's counter clock is read on whichever core the thread is on, and
    /// two cores' counters may disagree by a little: that clock is read
    /// [`COUNTER_SKEW_US`] early.
    pub(crate) fn started(&self, limiter: &RateLimiter) -> u64 {
        let now = self.now(limiter);
        if limiter.decides_by_counter() {
            now.saturating_sub(COUNTER_SKEW_US)
        } else {
            now
        }
    }

    fn shard(&self, key: &[u8]) -> MutexGuard<'_, Shard> {
        let i = (self.hasher.hash_one(key) as usize) % self.shards.len();
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached denial of `key` for a request of `cost`, if it still holds.
    pub(crate) fn lookup(&self, limiter: &RateLimiter, key: &[u8], cost: u64) -> Option<Decision> {
        if cost == 0 || self.len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.get(key, cost, self.now(limiter))
    }

    /// The cached denial of `key` for a request of `cost`, if it still holds
    /// at `now`, with its times brought up to date.
    pub(crate) fn get(&self, key: &[u8], cost: u64, now: u64) -> Option<Decision> {
        if cost == 0 || self.len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut shard = self.shard(key);
        let entry = shard.get(key)?;
        if entry.until <= now {
            shard.remove(key);
            self.len.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        if cost < entry.cost {
            return None;
        }
        let elapsed = now.saturating_sub(entry.at);
        let left = entry.until - now;
        let mut d = entry.decision.clone();
        drop(shard);
        d.age(elapsed, left);
        Some(d)
    }

    /// Remembers a denial made at `now` for a request of `cost`, if it can
    /// be trusted until its `retry_after`: not when a
    /// [`Concurrency`](crate::strategy::Strategy::Concurrency) quota denied it (a lease may be
    /// released any moment), nor when the request can never fit.
    pub(crate) fn insert(
        &self,
        limiter: &RateLimiter,
        key: &[u8],
        cost: u64,
        now: u64,
        decision: &Decision,
    ) {
        let Some(retry) = decision.retry_after() else {
            return;
        };
        if decision.allowed() || retry.is_zero() || cost == 0 {
            return;
        }
        // a limiter with blocks: an operator's `unblock` must take effect
        // at once, so none of its denials are cached
        if limiter.block_us().is_some() {
            return;
        }
        let uncacheable = decision.quotas().enumerate().any(|(i, q)| {
            !q.allowed()
                && limiter
                    .strategy_at(i)
                    .is_some_and(|s| !s.spec().denials_cacheable)
        });
        if uncacheable {
            return;
        }
        let entry = Entry {
            until: now.saturating_add(duration_us(retry)),
            at: now,
            cost,
            decision: Decision {
                lease: None,
                ..decision.clone()
            },
        };
        let mut shard = self.shard(key);
        if shard.len() >= self.per_shard && !shard.contains_key(key) {
            let before = shard.len();
            shard.retain(|_, e| e.until > now);
            if shard.len() >= self.per_shard {
                // Still full of live denials: drop the one that ends first.
                let first = shard
                    .iter()
                    .min_by_key(|(_, e)| e.until)
                    .map(|(k, _)| k.clone());
                if let Some(k) = first {
                    shard.remove(&k);
                }
            }
            self.len.fetch_sub(before - shard.len(), Ordering::Relaxed);
        }
        if shard.insert(key.into(), entry).is_none() {
            self.len.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::{MemoryStore, Quota, Rate};
    use std::time::Duration;

    fn limiter(quota: Quota) -> RateLimiter {
        RateLimiter::builder()
            .store(MemoryStore::new())
            .clock(ManualClock::new(Duration::from_secs(3_600)))
            .quota(quota)
            .build()
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_memory_store_limiter_times_the_cache_by_the_store_clock() {
        // (tokio's paused clock, which the store's does not follow, is not used)
        let l = RateLimiter::builder()
            .store(MemoryStore::new())
            .quota(Quota::fixed_window(Rate::per_second(1)))
            .build()
            .unwrap();
        let cache = DenyCache::new(100);
        let unix_us = || {
            let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            duration_us(since.unwrap())
        };
        let (before, now, after) = (unix_us(), cache.now(&l), unix_us());
        // the store's clock is Unix time, calibrated once: within a second
        assert!(
            now + 1_000_000 >= before && now <= after + 1_000_000,
            "{before} {now} {after}"
        );
        // a decision is recorded as made a little early (another core's counter)
        let started = cache.started(&l);
        assert!(started + COUNTER_SKEW_US <= cache.now(&l));
        // a manual clock is exact
        let manual = limiter(Quota::fixed_window(Rate::per_second(1)));
        assert_eq!(cache.started(&manual), cache.now(&manual));
    }

    #[tokio::test]
    async fn a_denial_is_served_until_its_retry_after_with_times_counting_down() {
        let l = limiter(Quota::fixed_window(Rate::per_second(1)));
        let cache = DenyCache::new(100);
        l.check("k").await.unwrap();
        let denied = l.check("k").await.unwrap();
        assert!(!denied.allowed());
        let now = cache.now(&l);
        cache.insert(&l, b"k", 1, now, &denied);

        let hit = cache.get(b"k", 1, now + 400_000).unwrap();
        assert!(!hit.allowed());
        assert_eq!(
            hit.retry_after(),
            Some(denied.retry_after().unwrap() - Duration::from_millis(400))
        );
        assert!(
            cache.get(b"k", 5, now + 400_000).is_some(),
            "heavier requests too"
        );
        assert!(
            cache.get(b"k", 0, now + 400_000).is_none(),
            "peeks are not denied"
        );
        assert!(cache.get(b"other", 1, now).is_none());
        let until = now + duration_us(denied.retry_after().unwrap());
        assert!(
            cache.get(b"k", 1, until).is_none(),
            "expired at retry_after"
        );
        assert_eq!(cache.len.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn lighter_requests_than_the_denied_one_are_not_served_from_the_cache() {
        let l = limiter(Quota::fixed_window(Rate::per_second(5)));
        let cache = DenyCache::new(100);
        l.check_n("k", 3).await.unwrap();
        let denied = l.check_n("k", 3).await.unwrap();
        assert!(!denied.allowed());
        cache.insert(&l, b"k", 3, 0, &denied);
        assert!(cache.get(b"k", 2, 1).is_none());
        assert!(cache.get(b"k", 3, 1).is_some());
    }

    #[tokio::test]
    async fn concurrency_denials_and_never_fitting_requests_are_not_cached() {
        let l = limiter(Quota::concurrency(1));
        let cache = DenyCache::new(100);
        let _held = l.check("k").await.unwrap();
        let denied = l.check("k").await.unwrap();
        assert!(!denied.allowed() && denied.retry_after().is_some());
        cache.insert(&l, b"k", 1, 0, &denied);
        assert!(cache.get(b"k", 1, 1).is_none());

        let l = limiter(Quota::fixed_window(Rate::per_second(2)));
        let never = l.check_n("k", 3).await.unwrap();
        assert!(!never.allowed() && never.retry_after().is_none());
        cache.insert(&l, b"k", 3, 0, &never);
        assert!(cache.get(b"k", 3, 1).is_none());
    }

    #[tokio::test]
    async fn the_cache_stays_within_its_capacity() {
        let l = limiter(Quota::fixed_window(Rate::per_second(1)));
        let cache = DenyCache::new(SHARDS * 2);
        l.check("k").await.unwrap();
        let denied = l.check("k").await.unwrap();
        for i in 0..1_000u32 {
            cache.insert(&l, &i.to_be_bytes(), 1, u64::from(i), &denied);
        }
        let held: usize = cache.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(held <= SHARDS * 2, "{held}");
        assert_eq!(cache.len.load(Ordering::Relaxed), held);
    }
}
