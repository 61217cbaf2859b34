//! [`MemoryStore`]: limiter state in process memory.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use super::{Call, Outcome, QuotaOutcome};
use crate::decision::Lease;
use crate::strategy::state::{self, Entry, Raw};

/// How many operations on a shard between sweeps of its expired keys.
const SWEEP_EVERY: u32 = 1024;
/// A shard's map is shrunk after a sweep when its live keys fill less than a
/// quarter of its capacity, down to twice its live keys but not below this.
const MIN_SHARD_CAPACITY: usize = 64;

/// An in-process store with exactly the semantics of [`RedisStore`](crate::RedisStore).
///
/// The embedded default for development and single-instance apps, and the
/// fallback of the middleware's fallback failure policy. State is
/// sharded behind short-lived mutexes (never held across an `.await`), and
/// expired keys are swept as the store is used, so memory stays bounded by the
/// number of keys active within their windows: a shard left mostly empty by a
/// sweep shrinks, so a burst of distinct keys does not keep its peak memory
/// ([`capacity`](Self::capacity) shows it).
///
/// Its clock is tokio's monotonic `Instant`, so `tokio::time::pause()` and
/// `advance()` control it in tests; a [`ManualClock`](crate::clock::ManualClock) on
/// the limiter overrides it.
///
/// Clones share the same state.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    start: tokio::time::Instant,
    start_us: i64,
    /// The latest manual-clock time a decision was made at (`i64::MIN`:
    /// none): an explicit [`MemoryStore::sweep`] sweeps at that time, since
    /// entries written on a manual clock expire in manual time.
    manual_now: AtomicI64,
}

#[derive(Debug, Default)]
struct Shard {
    map: HashMap<String, Entry>,
    ops: u32,
}

impl Shard {
    /// Drops the keys expired at `now`; shrinks the map if it is mostly empty
    /// (a burst of distinct keys must not hold its peak memory for ever).
    fn sweep(&mut self, now: i64) {
        self.map.retain(|_, e| e.expires_at > now);
        let (len, capacity) = (self.map.len(), self.map.capacity());
        if capacity > MIN_SHARD_CAPACITY && len < capacity / 4 {
            self.map.shrink_to((len * 2).max(MIN_SHARD_CAPACITY));
        }
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store with one shard per 4 hardware threads (at least 16).
    pub fn new() -> Self {
        let threads = std::thread::available_parallelism().map_or(4, usize::from);
        Self::with_shards((threads * 4).max(16))
    }

    /// An empty store with `shards` independently locked shards (at least 1).
    pub fn with_shards(shards: usize) -> Self {
        let start_us = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64);
        Self {
            inner: Arc::new(Inner {
                shards: (0..shards.max(1))
                    .map(|_| Mutex::new(Shard::default()))
                    .collect(),
                hasher: RandomState::new(),
                start: tokio::time::Instant::now(),
                start_us,
                manual_now: AtomicI64::new(i64::MIN),
            }),
        }
    }

    /// The number of keys held, including expired ones not yet swept.
    pub fn len(&self) -> usize {
        self.inner.shards.iter().map(|s| lock(s).map.len()).sum()
    }

    /// How many keys the store's maps can hold without allocating: the sum of
    /// its shards' capacities. For tests and monitoring: it follows the number
    /// of live keys down as well as up, since a sweep that leaves a shard
    /// mostly empty gives the memory back.
    pub fn capacity(&self) -> usize {
        self.inner
            .shards
            .iter()
            .map(|s| lock(s).map.capacity())
            .sum()
    }

    /// Whether the store holds no keys.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every expired key now (it also happens as the store is used),
    /// and gives back the memory of shards left mostly empty.
    ///
    /// "Now" is the store's clock, or, once a limiter on a
    /// [`ManualClock`](crate::clock::ManualClock) has decided with this store, the
    /// latest manual time it decided at (its entries expire in manual time).
    pub fn sweep(&self) {
        let manual = self.inner.manual_now.load(Ordering::Relaxed);
        let now = if manual == i64::MIN {
            self.now_us()
        } else {
            manual
        };
        for s in self.inner.shards.iter() {
            lock(s).sweep(now);
        }
    }

    fn now_us(&self) -> i64 {
        self.inner.start_us + self.inner.start.elapsed().as_micros() as i64
    }

    fn shard(&self, base: &str) -> MutexGuard<'_, Shard> {
        let i = self.inner.hasher.hash_one(base) as usize % self.inner.shards.len();
        lock(&self.inner.shards[i])
    }

    pub(crate) fn decide(&self, call: Call<'_>) -> Outcome {
        let now = match call.now_us {
            Some(manual) => {
                let manual = manual as i64;
                self.inner.manual_now.fetch_max(manual, Ordering::Relaxed);
                manual
            }
            None => self.now_us(),
        };
        let cost = call.cost as i64;
        let mut shard = self.shard(call.base);
        shard.ops += 1;
        if shard.ops >= SWEEP_EVERY {
            shard.ops = 0;
            shard.sweep(now);
        }
        let map = &mut shard.map;
        let mut run = |i: usize, cost: i64, apply: bool| -> Raw {
            let key = &call.keys[i];
            let (owned, mut slot) = map.remove_entry(key).unzip();
            let raw = state::run(&mut slot, &call.quotas[i], now, cost, call.nonce, apply);
            if let Some(e) = slot {
                map.insert(owned.unwrap_or_else(|| key.clone()), e);
            }
            raw
        };
        let nq = call.keys.len();
        let raws: Vec<Raw> = if nq == 1 {
            vec![run(0, cost, true)]
        } else {
            let mut res: Vec<Raw> = (0..nq).map(|i| run(i, cost, false)).collect();
            let all = res.iter().all(|r| r.ok);
            if all && cost > 0 {
                res = (0..nq).map(|i| run(i, cost, true)).collect();
            } else if !all {
                for (i, r) in res.iter_mut().enumerate() {
                    if r.ok {
                        *r = run(i, 0, false);
                    }
                }
            }
            res
        };
        Outcome {
            allowed: raws.iter().all(|r| r.ok),
            quotas: raws.into_iter().map(QuotaOutcome::from).collect(),
        }
    }

    pub(crate) fn release(&self, lease: &Lease) {
        let members: Vec<String> = lease.members().collect();
        let mut shard = self.shard(&lease.base);
        for key in &lease.keys {
            let mut slot = shard.map.remove(key);
            state::remove_members(&mut slot, &members);
            if let Some(e) = slot {
                shard.map.insert(key.clone(), e);
            }
        }
    }

    pub(crate) fn reset(&self, base: &str, keys: &[String]) {
        let mut shard = self.shard(base);
        for key in keys {
            shard.map.remove(key);
        }
    }
}

/// Locks a shard; a panic elsewhere while it was held leaves plain data, so
/// a poisoned lock is used as is.
fn lock(m: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::strategy::Strategy;
    use crate::{Quota, Rate, RateLimiter};

    #[tokio::test]
    async fn an_explicit_sweep_keeps_the_live_state_of_a_manual_clock() {
        let store = MemoryStore::with_shards(2);
        // An hour after its epoch: far behind the store's own (Unix) clock.
        let clock = crate::clock::ManualClock::new(Duration::from_secs(3_600));
        let lim = RateLimiter::builder()
            .store(store.clone())
            .clock(clock.clone())
            .quota(Quota::fixed_window(Rate::per_hour(3)))
            .build()
            .unwrap();
        for _ in 0..3 {
            assert!(lim.check("k").await.unwrap().allowed);
        }
        store.sweep();
        assert_eq!(store.len(), 1, "the window is still open in manual time");
        assert!(!lim.check("k").await.unwrap().allowed);
        // The store learns the manual time from decisions: one at a later time
        // lets a sweep drop the ended window.
        clock.advance(Duration::from_secs(3_600));
        assert!(lim.check("other").await.unwrap().allowed);
        store.sweep();
        assert_eq!(store.len(), 1, "only the new key is live in manual time");
        assert!(lim.check("k").await.unwrap().allowed);
    }

    #[tokio::test(start_paused = true)]
    async fn expired_state_is_evicted_so_memory_returns_to_baseline() {
        let store = MemoryStore::with_shards(4);
        for strategy in Strategy::ALL {
            // (a concurrency quota: 3 in flight, leases of 1 s)
            let quota = Quota::new(strategy, Rate::per_second(3));
            let lim = RateLimiter::builder()
                .store(store.clone())
                .prefix(strategy.as_str())
                .quota(quota)
                .build()
                .unwrap();
            for k in 0..2_000 {
                assert!(lim.check(format!("k{k}")).await.unwrap().allowed);
            }
        }
        assert_eq!(store.len(), 7 * 2_000);
        // after two windows every key has expired (the sliding window counter
        // keeps a window as the next one's "previous")
        tokio::time::advance(Duration::from_secs(2) + Duration::from_millis(1)).await;
        // use alone evicts: a shard is swept every SWEEP_EVERY operations
        let lim = RateLimiter::builder()
            .store(store.clone())
            .quota(Quota::gcra(Rate::per_second(1)))
            .build()
            .unwrap();
        for k in 0..(SWEEP_EVERY as usize * 4 * 4) {
            lim.peek(format!("p{k}")).await.unwrap();
        }
        assert_eq!(store.len(), 0, "peeks write nothing and sweeps evicted all");
        // and an explicit sweep does the same
        for k in 0..100 {
            lim.check(format!("x{k}")).await.unwrap();
        }
        tokio::time::advance(Duration::from_secs(2)).await;
        store.sweep();
        assert!(store.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn exact_under_concurrency_from_many_limiters_on_one_store() {
        let store = MemoryStore::new();
        for strategy in Strategy::ALL {
            // (a concurrency quota: 100 in flight, leases of an hour)
            let quota = Quota::new(strategy, Rate::per_hour(100));
            let limiters: Vec<RateLimiter> = (0..8)
                .map(|_| {
                    RateLimiter::builder()
                        .store(store.clone())
                        .prefix(strategy.as_str())
                        .quota(quota.clone())
                        .build()
                        .unwrap()
                })
                .collect();
            let tasks: Vec<_> = (0..1000)
                .map(|i| {
                    let lim = limiters[i % 8].clone();
                    tokio::spawn(async move { lim.check("hot").await.unwrap().allowed })
                })
                .collect();
            let mut allowed = 0;
            for t in tasks {
                allowed += usize::from(t.await.unwrap());
            }
            assert_eq!(allowed, 100, "{strategy}");
        }
    }
}
