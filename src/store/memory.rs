//! [`MemoryStore`]: limiter state in process memory.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use super::algo::{self, Entry, Raw};
use super::{Call, Outcome, QuotaOutcome};
use crate::decision::Lease;

/// How many operations on a shard between sweeps of its expired keys.
const SWEEP_EVERY: u32 = 1024;

/// An in-process store with exactly the semantics of [`RedisStore`](crate::RedisStore).
///
/// The embedded default for development and single-instance apps, and the
/// fallback of the middleware's fallback failure policy. State is
/// sharded behind short-lived mutexes (never held across an `.await`), and
/// expired keys are swept as the store is used, so memory stays bounded by the
/// number of keys active within their windows.
///
/// Its clock is tokio's monotonic `Instant`, so `tokio::time::pause()` and
/// `advance()` control it in tests; a [`ManualClock`](crate::ManualClock) on
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
}

#[derive(Debug, Default)]
struct Shard {
    map: HashMap<String, Entry>,
    ops: u32,
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
            }),
        }
    }

    /// The number of keys held, including expired ones not yet swept.
    pub fn len(&self) -> usize {
        self.inner.shards.iter().map(|s| lock(s).map.len()).sum()
    }

    /// Whether the store holds no keys.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every expired key now (it also happens as the store is used).
    pub fn sweep(&self) {
        let now = self.now_us();
        for s in self.inner.shards.iter() {
            lock(s).map.retain(|_, e| e.expires_at > now);
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
        let now = call.now_us.map_or_else(|| self.now_us(), |n| n as i64);
        let cost = call.cost as i64;
        let mut shard = self.shard(call.base);
        shard.ops += 1;
        if shard.ops >= SWEEP_EVERY {
            shard.ops = 0;
            shard.map.retain(|_, e| e.expires_at > now);
        }
        let map = &mut shard.map;
        let mut run = |i: usize, cost: i64, apply: bool| -> Raw {
            let key = &call.keys[i];
            let (owned, mut slot) = map.remove_entry(key).unzip();
            let raw = algo::run(&mut slot, &call.quotas[i], now, cost, call.nonce, apply);
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
            algo::release(&mut slot, &members);
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
