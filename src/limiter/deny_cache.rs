//! The local deny cache: a key denied until an instant is answered from
//! process memory until then (for at most [`MAX_AGE_US`]), so a client
//! that keeps knocking after its denial costs the store nothing.
//!
//! Each [`RateLimiter`](crate::RateLimiter) holds one, in front of its
//! engine, which the middleware's layers over it
//! fill and read; the limiter's own admin operations (`reset`, `reward`,
//! `set_remaining`, `block`, `unblock`, `penalize`) [forget](DenyCache::forget)
//! the key's denial, so an operator's change holds on this instance's next
//! request. Another instance's change holds here once the cached denial is
//! [`MAX_AGE_US`] old.
//!
//! The cache keeps the time of the clock its limiter decides by, so that a
//! cached denial ends when the limiter's own time reaches its retry: a
//! [`ManualClock`](crate::clock::ManualClock)'s reading (a test that moves
//! it past the retry is admitted at once), the caller's clock's, a memory
//! store's. Redis's own clock cannot be read without a call: the cache then
//! times denials by this process's monotonic clock
//! ([`std::time::Instant`]), which runs in real time as Redis's does, read
//! before the call (a cached denial never ends later than Redis's), and
//! never by tokio's, which a paused runtime stops (that would serve a
//! denial for ever, while Redis's time moves on).

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use crate::clock::duration_us;
use crate::decision::Decision;

const SHARDS: usize = 16;

/// How far apart two cores' time-stamp counters may read, in µs (they are
/// synchronized; a millisecond is ample, and a denial cached a millisecond
/// short of its end still spares the store nearly every request).
const COUNTER_SKEW_US: u64 = 1_000;

/// What the cache needs to know of the limiter it answers for (its
/// engine's clock and strategies), so that it knows no limiter.
pub(crate) trait DenyFacts {
    /// The time in µs by the clock the limiter decides with, when that
    /// clock is in this process: its manual or caller clock's, or its memory
    /// store's.
    fn local_now_us(&self) -> Option<u64>;
    /// Whether it decides by a memory store's counter clock (no manual or caller clock).
    fn decides_by_counter(&self) -> bool;
    /// Whether a denial by the quota at `quota` (in the limiter's order)
    /// may be answered from the cache (not a concurrency quota's: a lease
    /// may be released any moment).
    fn denials_cacheable(&self, quota: usize) -> bool;
}

/// Default number of keys the cache holds.
pub(super) const DEFAULT_CAPACITY: usize = 10_000;

/// The longest a denial is answered from the cache (µs): after that the
/// store is asked again, so a change made on another instance (an
/// operator's `unblock`, `reset`, `reward`, new limits) holds here within
/// a second.
const MAX_AGE_US: u64 = 1_000_000;

type Shard = HashMap<Box<[u8]>, Entry>;

pub(crate) struct DenyCache {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    per_shard: AtomicUsize,
    /// Entries over all shards: lets the hot path skip hashing and locking
    /// while nobody is denied.
    len: AtomicUsize,
    /// Counts [`forget`](Self::forget)s: a decision that started before one
    /// is not cached (it may predate the change that forgot the key).
    forgets: AtomicU64,
    /// The origin of the monotonic clock of a limiter on Redis's clock.
    epoch: Instant,
}

/// When a decision started, for [`DenyCache::insert`]: its cache time
/// (µs), and the [`DenyCache::forget`]s made by then.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Started {
    now: u64,
    forgets: u64,
}

struct Entry {
    /// Until when (cache time, µs) the key is denied.
    until: u64,
    /// Until when (cache time, µs) the cache answers for the store:
    /// `until`, or [`MAX_AGE_US`] after the decision if sooner.
    expires: u64,
    /// When the decision was made (cache time, µs).
    at: u64,
    /// The denied cost: a request at least as heavy is denied too.
    cost: u64,
    decision: Decision,
}

impl std::fmt::Debug for DenyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DenyCache")
            .field(
                "capacity",
                &(self.per_shard.load(Ordering::Relaxed) * self.shards.len()),
            )
            .field("len", &self.len.load(Ordering::Relaxed))
            .finish()
    }
}

impl DenyCache {
    /// A cache of about `capacity` keys (at least one per shard).
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            per_shard: AtomicUsize::new(Self::per_shard(capacity)),
            len: AtomicUsize::new(0),
            forgets: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    fn per_shard(capacity: usize) -> usize {
        capacity.div_ceil(SHARDS).max(1)
    }

    /// Holds about `capacity` keys from now on (a smaller cache sheds its
    /// excess as denials are added).
    pub(crate) fn set_capacity(&self, capacity: usize) {
        self.per_shard
            .store(Self::per_shard(capacity), Ordering::Relaxed);
    }

    /// Forgets the cached denial of `key` (an operator changed its state),
    /// and keeps decisions already under way from caching theirs (they may
    /// have been made before the change).
    pub(super) fn forget(&self, key: &[u8]) {
        // (counted before the shard is locked: an insert either sees the
        // count, or is made before this removal)
        self.forgets.fetch_add(1, Ordering::SeqCst);
        // (always under the shard's lock, never skipped on an empty cache:
        // an insert that read the count before it was bumped may be adding
        // the key right now, and the lock orders this removal after it)
        if self.shard(key).remove(key).is_some() {
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The cache's clock in µs: the limiter's own when it is in this
    /// process (a manual clock, so tests and simulations see one time; the
    /// caller's; a memory store's, read as cheaply as a decision reads it),
    /// else (Redis's clock) this process's monotonic clock, which runs as
    /// Redis's does, whatever tokio's clock does.
    fn now<F: DenyFacts + ?Sized>(&self, limiter: &F) -> u64 {
        match limiter.local_now_us() {
            Some(t) => t,
            None => duration_us(Instant::now().saturating_duration_since(self.epoch)),
        }
    }

    /// The cache time to record a decision at, read before the store call
    /// so that a cached denial never ends later than the store's. A memory
    /// store's counter clock is read on whichever core the thread is on, and
    /// two cores' counters may disagree by a little: that clock is read
    /// [`COUNTER_SKEW_US`] early.
    pub(crate) fn started<F: DenyFacts + ?Sized>(&self, limiter: &F) -> Started {
        let forgets = self.forgets.load(Ordering::SeqCst);
        let now = self.now(limiter);
        let now = if limiter.decides_by_counter() {
            now.saturating_sub(COUNTER_SKEW_US)
        } else {
            now
        };
        Started { now, forgets }
    }

    fn shard(&self, key: &[u8]) -> MutexGuard<'_, Shard> {
        let i = (self.hasher.hash_one(key) as usize) % self.shards.len();
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached denial of `key` for a request of `cost`, if it still holds.
    pub(crate) fn lookup<F: DenyFacts + ?Sized>(
        &self,
        limiter: &F,
        key: &[u8],
        cost: u64,
    ) -> Option<Decision> {
        if cost == 0 || self.len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.get(key, cost, self.now(limiter))
    }

    /// The cached denial of `key` for a request of `cost`, if it still holds
    /// at `now`, with its times brought up to date.
    fn get(&self, key: &[u8], cost: u64, now: u64) -> Option<Decision> {
        if cost == 0 || self.len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut shard = self.shard(key);
        let entry = shard.get(key)?;
        if entry.expires <= now {
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

    /// Remembers a denial of `limiter` (this cache's, or its fallback)
    /// for a request of `cost` that started at `started`, if it can be
    /// trusted until its `retry_after` (or for [`MAX_AGE_US`]): not when a
    /// [`Concurrency`](crate::strategy::Strategy::Concurrency) quota denied it (a lease may be
    /// released any moment), nor when the request can never fit, nor when
    /// the key may have been [forgotten](Self::forget) since it started.
    pub(crate) fn insert<F: DenyFacts + ?Sized>(
        &self,
        limiter: &F,
        key: &[u8],
        cost: u64,
        started: Started,
        decision: &Decision,
    ) {
        let now = started.now;
        let Some(retry) = decision.retry_after() else {
            return;
        };
        if decision.allowed() || retry.is_zero() || cost == 0 {
            return;
        }
        let uncacheable = decision
            .quotas()
            .enumerate()
            .any(|(i, q)| !q.allowed() && !limiter.denials_cacheable(i));
        if uncacheable {
            return;
        }
        let until = now.saturating_add(duration_us(retry));
        let entry = Entry {
            until,
            expires: until.min(now.saturating_add(MAX_AGE_US)),
            at: now,
            cost,
            decision: Decision {
                lease: None,
                ..decision.clone()
            },
        };
        let mut shard = self.shard(key);
        if self.forgets.load(Ordering::SeqCst) != started.forgets {
            // an operator changed some key's state while this was decided
            return;
        }
        let per_shard = self.per_shard.load(Ordering::Relaxed);
        if shard.len() >= per_shard && !shard.contains_key(key) {
            let before = shard.len();
            shard.retain(|_, e| e.expires > now);
            while shard.len() >= per_shard {
                // Still full of live denials: drop the one that ends first.
                let first = shard
                    .iter()
                    .min_by_key(|(_, e)| e.expires)
                    .map(|(k, _)| k.clone());
                match first {
                    Some(k) => shard.remove(&k),
                    None => break,
                };
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
    use crate::{MemoryStore, Quota, Rate, RateLimiter};
    use std::time::Duration;

    fn at(now: u64) -> Started {
        Started { now, forgets: 0 }
    }

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
        assert!(started.now + COUNTER_SKEW_US <= cache.now(&l));
        // a manual clock is exact
        let manual = limiter(Quota::fixed_window(Rate::per_second(1)));
        assert_eq!(cache.started(&manual).now, cache.now(&manual));
    }

    #[tokio::test]
    async fn a_denial_is_served_until_its_retry_after_with_times_counting_down() {
        let l = limiter(Quota::fixed_window(Rate::per_second(1)));
        let cache = DenyCache::new(100);
        l.check("k").await.unwrap();
        let denied = l.check("k").await.unwrap();
        assert!(!denied.allowed());
        let now = cache.now(&l);
        cache.insert(&l, b"k", 1, at(now), &denied);

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
        cache.insert(&l, b"k", 3, at(0), &denied);
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
        cache.insert(&l, b"k", 1, at(0), &denied);
        assert!(cache.get(b"k", 1, 1).is_none());

        let l = limiter(Quota::fixed_window(Rate::per_second(2)));
        let never = l.check_n("k", 3).await.unwrap();
        assert!(!never.allowed() && never.retry_after().is_none());
        cache.insert(&l, b"k", 3, at(0), &never);
        assert!(cache.get(b"k", 3, 1).is_none());
    }

    /// A recording limiter's denials are never cached: a cached denial
    /// would answer without the store, and so would not record.
    #[tokio::test]
    async fn a_recording_limiters_denials_are_not_cached() {
        for mode in [
            crate::limiter::OnDenial::RecordIfOver,
            crate::limiter::OnDenial::Record,
        ] {
            let l = RateLimiter::builder()
                .store(MemoryStore::new())
                .clock(ManualClock::new(Duration::from_secs(3_600)))
                .quota(Quota::fixed_window(Rate::per_second(1)))
                .on_denial(mode)
                .build()
                .unwrap();
            let cache = DenyCache::new(100);
            l.check("k").await.unwrap();
            let denied = l.check("k").await.unwrap();
            assert!(denied.denied() && denied.recorded() && denied.retry_after().is_some());
            cache.insert(&l, b"k", 1, at(0), &denied);
            assert!(cache.get(b"k", 1, 1).is_none(), "{mode:?}");
        }
        // (the same denial of a limiter that does not record is cached)
        let l = limiter(Quota::fixed_window(Rate::per_second(1)));
        let cache = DenyCache::new(100);
        l.check("k").await.unwrap();
        let denied = l.check("k").await.unwrap();
        cache.insert(&l, b"k", 1, at(0), &denied);
        assert!(cache.get(b"k", 1, 1).is_some());
    }

    #[tokio::test]
    async fn the_cache_stays_within_its_capacity() {
        let l = limiter(Quota::fixed_window(Rate::per_second(1)));
        let cache = DenyCache::new(SHARDS * 2);
        l.check("k").await.unwrap();
        let denied = l.check("k").await.unwrap();
        for i in 0..1_000u32 {
            cache.insert(&l, &i.to_be_bytes(), 1, at(u64::from(i)), &denied);
        }
        let held = || -> usize { cache.shards.iter().map(|s| s.lock().unwrap().len()).sum() };
        assert!(held() <= SHARDS * 2, "{}", held());
        assert_eq!(cache.len.load(Ordering::Relaxed), held());
        // a smaller capacity sheds the excess as denials come
        cache.set_capacity(SHARDS);
        for i in 1_000..2_000u32 {
            cache.insert(&l, &i.to_be_bytes(), 1, at(1_000), &denied);
        }
        assert!(held() <= SHARDS, "{}", held());
        assert_eq!(cache.len.load(Ordering::Relaxed), held());
    }

    #[tokio::test]
    async fn a_denial_is_served_for_at_most_a_second_and_forgotten_on_demand() {
        // a denial of a minute: served from the cache for one second
        let l = limiter(Quota::fixed_window(Rate::per_minute(1)));
        let cache = DenyCache::new(100);
        l.check("k").await.unwrap();
        let denied = l.check("k").await.unwrap();
        assert!(denied.retry_after().unwrap() > Duration::from_secs(50));
        cache.insert(&l, b"k", 1, at(0), &denied);
        let hit = cache.get(b"k", 1, MAX_AGE_US - 1).unwrap();
        assert_eq!(
            hit.retry_after(),
            Some(denied.retry_after().unwrap() - Duration::from_micros(MAX_AGE_US - 1)),
            "the real retry, not the cache's bound"
        );
        assert!(cache.get(b"k", 1, MAX_AGE_US).is_none());

        // forgotten: gone, and a decision under way when it was forgotten
        // is not cached
        let started = cache.started(&l);
        cache.insert(&l, b"k", 1, started, &denied);
        cache.insert(&l, b"other", 1, started, &denied);
        let under_way = cache.started(&l);
        cache.forget(b"k");
        assert!(cache.get(b"k", 1, started.now).is_none());
        assert!(cache.get(b"other", 1, started.now).is_some());
        cache.insert(&l, b"k", 1, under_way, &denied);
        assert!(cache.get(b"k", 1, started.now).is_none());
        let after = cache.started(&l);
        cache.insert(&l, b"k", 1, after, &denied);
        assert!(cache.get(b"k", 1, after.now).is_some());
    }
}
