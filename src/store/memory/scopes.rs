//! The scopes of a [`MemoryStore`]: each storage-key suffix of the limiters
//! bound to it (`<prefix><suffix>`, per clock) as a `u32` id a slot is
//! keyed by, made when a limiter binds the store and freed once no limiter
//! is bound to it and no key is in it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::table::lock;
use super::{Inner, MemoryStore};
use crate::clock::Clock as LimiterClock;

/// The scopes limiters bound to a store use: one per quota of a limiter
/// (and one for its blocks), by name (`<prefix><suffix>`) and clock. Limiters
/// on different clocks never share a scope, even under one prefix: a key's
/// state expires in its own clock's time, so each scope is swept at the
/// time of its own clock.
///
/// A scope no limiter is bound to and no key is in is freed (its id is
/// reused): limits that keep changing (new quota names, new rates of an
/// unnamed quota) do not grow the store for ever. See
/// [`MemoryStore::collect_scopes`].
#[derive(Debug, Default)]
pub(super) struct Scopes {
    /// Ids by name and clock (0: the store's clock; 1: the caller's; else
    /// [`ManualClock::id`](crate::clock::ManualClock::id), an address, never 0 or 1).
    ids: HashMap<(Box<str>, usize), u32>,
    /// By id (a freed one has an empty name and no clock).
    of: Vec<Scope>,
    /// The freed ids.
    free: Vec<u32>,
    /// How many scopes are [idle](Scope::idle), kept as binders come and
    /// go: a bind reads it, never counts them.
    idle: usize,
    /// Scopes looked at by binds' collections (for tests: a bind must not
    /// visit every scope).
    #[cfg(test)]
    visited: std::cell::Cell<usize>,
    /// How many scopes no limiter is bound to (freed ones aside) make the
    /// next bind look for scopes to free.
    collect_at: usize,
}

/// One scope of a [`MemoryStore`].
#[derive(Debug)]
struct Scope {
    name: Box<str>,
    /// Its clock. Holding a manual clock keeps its id from being reused
    /// while the scope lives.
    clock: LimiterClock,
    /// The limiters bound to it ([`ScopeIds`] held).
    binders: u32,
    /// Counts its binds: a scope found idle, then bound and let go while
    /// its keys were counted, is not freed.
    binds: u64,
}

impl Scope {
    /// Whether no limiter is bound to it (a freed scope is not idle).
    fn idle(&self) -> bool {
        self.binders == 0 && !self.name.is_empty()
    }
}

/// Scopes idle (no limiter bound) before a bind looks for ones to free,
/// and how many more since the last look make it look again.
const IDLE_SCOPES: usize = 64;

impl Scopes {
    /// Each scope's time for a sweep: its manual or caller clock's reading,
    /// or `store_now`.
    pub(super) fn times(&self, store_now: i64) -> Vec<i64> {
        self.of
            .iter()
            .map(|s| s.clock.sent_now_us().map_or(store_now, |us| us as i64))
            .collect()
    }

    /// Scopes no limiter is bound to, freed ones aside.
    fn idle(&self) -> usize {
        self.idle
    }

    /// One more limiter bound to scope `id`.
    fn hold(&mut self, id: u32) {
        if let Some(s) = self.of.get_mut(id as usize) {
            if s.idle() {
                self.idle = self.idle.saturating_sub(1);
            }
            s.binders += 1;
        }
    }

    /// One limiter less bound to scope `id`.
    fn let_go(&mut self, id: u32) {
        if let Some(s) = self.of.get_mut(id as usize) {
            s.binders = s.binders.saturating_sub(1);
            if s.idle() {
                self.idle += 1;
            }
        }
    }
}

/// The scopes a limiter is bound to, one per storage-key suffix (see
/// [`MemoryStore::bind`]): none of them is freed while it is held.
#[derive(Debug)]
pub(crate) struct ScopeIds {
    inner: Arc<Inner>,
    ids: Box<[u32]>,
}

impl std::ops::Deref for ScopeIds {
    type Target = [u32];

    #[inline]
    fn deref(&self) -> &[u32] {
        &self.ids
    }
}

impl Clone for ScopeIds {
    fn clone(&self) -> Self {
        let mut scopes = lock_scopes(&self.inner.scopes);
        for &id in self.ids.iter() {
            scopes.hold(id);
        }
        ScopeIds {
            inner: self.inner.clone(),
            ids: self.ids.clone(),
        }
    }
}

impl Drop for ScopeIds {
    fn drop(&mut self) {
        let mut scopes = lock_scopes(&self.inner.scopes);
        for &id in self.ids.iter() {
            scopes.let_go(id);
        }
    }
}

/// What tells a scope's clock from others' (see [`Scopes::ids`]).
fn clock_id(clock: &LimiterClock) -> usize {
    match clock {
        LimiterClock::Store => 0,
        LimiterClock::Caller => 1,
        LimiterClock::Manual(m) => m.id(),
    }
}

impl MemoryStore {
    /// The scopes of a limiter of `prefix` (which holds no `:`) on `clock`
    /// whose quotas' storage keys end in `suffixes`, made on first use and
    /// kept while a limiter is bound to them or a key is in them.
    pub(crate) fn bind(&self, prefix: &str, suffixes: &[String], clock: &LimiterClock) -> ScopeIds {
        self.collect_scopes();
        let id = clock_id(clock);
        let mut guard = lock_scopes(&self.inner.scopes);
        let scopes = &mut *guard;
        let ids = suffixes
            .iter()
            .map(|suffix| {
                let name: Box<str> = format!("{prefix}{suffix}").into();
                let scope = match scopes.ids.get(&(name.clone(), id)) {
                    Some(&scope) => scope,
                    None => {
                        let fresh = Scope {
                            name: name.clone(),
                            clock: clock.clone(),
                            binders: 0,
                            binds: 0,
                        };
                        let scope = match scopes.free.pop() {
                            Some(scope) => {
                                // (its binds go on counting: a collector's
                                // stale look at the id must not match)
                                let binds = scopes.of[scope as usize].binds;
                                scopes.of[scope as usize] = Scope { binds, ..fresh };
                                scope
                            }
                            None => {
                                scopes.of.push(fresh);
                                (scopes.of.len() - 1) as u32
                            }
                        };
                        scopes.ids.insert((name, id), scope);
                        // (idle until held, below)
                        scopes.idle += 1;
                        scope
                    }
                };
                scopes.hold(scope);
                scopes.of[scope as usize].binds += 1;
                scope
            })
            .collect();
        ScopeIds {
            inner: self.inner.clone(),
            ids,
        }
    }

    /// Frees the scopes no limiter is bound to and no key is in (expired
    /// keys not yet swept count), once [`IDLE_SCOPES`] more are idle than
    /// at the last look: it reads every shard's keys (one shard locked at
    /// a time), so it is done once per so many new scopes, never on a
    /// decision.
    fn collect_scopes(&self) {
        let candidates: Vec<(u32, u64)> = {
            let scopes = lock_scopes(&self.inner.scopes);
            if scopes.idle() < scopes.collect_at.max(IDLE_SCOPES) {
                return;
            }
            #[cfg(test)]
            scopes.visited.set(scopes.visited.get() + scopes.of.len());
            scopes
                .of
                .iter()
                .enumerate()
                .filter(|(_, s)| s.idle())
                .map(|(id, s)| (id as u32, s.binds))
                .collect()
        };
        let mut used = vec![
            false;
            candidates
                .iter()
                .map(|c| c.0 as usize + 1)
                .max()
                .unwrap_or(0)
        ];
        // (no scope lock here: a sweep locks a shard, then the scopes)
        for shard in self.inner.shards.iter() {
            for slot in lock(shard).table.iter() {
                if let Some(u) = used.get_mut(slot.key.scope() as usize) {
                    *u = true;
                }
            }
        }
        let mut guard = lock_scopes(&self.inner.scopes);
        let scopes = &mut *guard;
        for (id, binds) in candidates {
            let s = &mut scopes.of[id as usize];
            // (another collector may have freed it meanwhile: `idle` is false
            // for a freed scope, and a reused one has bound since, so its
            // `binds` moved on)
            if !s.idle() || s.binds != binds || used[id as usize] {
                continue;
            }
            let clock = clock_id(&std::mem::take(&mut s.clock));
            let name = std::mem::take(&mut s.name);
            scopes.ids.remove(&(name, clock));
            scopes.free.push(id);
            scopes.idle = scopes.idle.saturating_sub(1);
        }
        // look again once as many more are idle
        scopes.collect_at = scopes.idle() + IDLE_SCOPES;
    }

    /// The scopes held (a scope per quota's storage-key suffix of the
    /// limiters bound to the store, and of the keys it holds): for tests.
    #[doc(hidden)]
    pub fn scopes_held(&self) -> usize {
        let scopes = lock_scopes(&self.inner.scopes);
        scopes.of.len() - scopes.free.len()
    }
}

/// The store side of a lease's release: which of a limiter's scopes its
/// storage-key strings name.
impl MemoryStore {
    /// The rest and scopes of storage keys `{<tag>}<suffix>` under one tag
    /// (`base`: `{<tag>}`), among `bound` (the scopes of the limiter asking);
    /// keys of other scopes are left out.
    pub(super) fn parse<'k>(
        &self,
        base: &'k str,
        keys: &'k [String],
        bound: &[u32],
    ) -> Option<(&'k [u8], Vec<u32>)> {
        let tag = base.strip_prefix('{')?.strip_suffix('}')?;
        let (head, rest) = split_tag(tag)?;
        let scopes = lock_scopes(&self.inner.scopes);
        let named = |key: &str| {
            let suffix = key.strip_prefix(base)?;
            bound.iter().copied().find(|&id| {
                scopes
                    .of
                    .get(id as usize)
                    .is_some_and(|s| s.name.strip_prefix(head) == Some(suffix))
            })
        };
        let found = keys.iter().filter_map(|k| named(k)).collect();
        Some((rest.as_bytes(), found))
    }
}

/// A hash tag `<head>:<rest>` as its head and rest (`None`: no `:`).
fn split_tag(tag: &str) -> Option<(&str, &str)> {
    tag.split_once(':')
}

/// Locks the scopes (a poisoned lock is used as is: plain data).
pub(super) fn lock_scopes(m: &Mutex<Scopes>) -> MutexGuard<'_, Scopes> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The idle scopes, counted.
    fn counted(scopes: &Scopes) -> usize {
        scopes.of.iter().filter(|s| s.idle()).count()
    }

    /// Building limiters that stay bound, one scope each: no bind visits
    /// the scopes already there (binding 40,000 limiters took 7 s, most of
    /// it counting idle scopes on every bind), so the work of `n` binds is
    /// `O(n)`.
    #[test]
    fn binding_held_scopes_visits_no_scope_per_bind() {
        let store = MemoryStore::new();
        let held: Vec<ScopeIds> = (0..5_000)
            .map(|i| store.bind(&format!("p{i}"), &[":q".to_owned()], &LimiterClock::Store))
            .collect();
        let scopes = lock_scopes(&store.inner.scopes);
        assert_eq!(scopes.of.len(), 5_000);
        assert_eq!(scopes.idle(), 0);
        assert_eq!(scopes.visited.get(), 0, "binds visited the scopes held");
        drop(scopes);
        drop(held);
        assert_eq!(lock_scopes(&store.inner.scopes).idle(), 5_000);
    }

    /// Churn (binds, clones, drops, frees, reuse of freed ids): the idle
    /// count a bind reads is the count of idle scopes, and scopes are
    /// visited about once per [`IDLE_SCOPES`] new idle ones, not per bind.
    #[test]
    fn the_idle_count_stays_exact_through_churn() {
        let store = MemoryStore::new();
        let mut kept = Vec::new();
        for i in 0..3_000u32 {
            let suffixes = [format!(":a{}", i % 700), format!(":b{i}")];
            let ids = store.bind("churn", &suffixes, &LimiterClock::Store);
            match i % 3 {
                0 => kept.push(ids.clone()),
                1 => kept.push(ids),
                _ => drop(ids),
            }
            if i % 5 == 0 && !kept.is_empty() {
                kept.swap_remove((i as usize * 7) % kept.len());
            }
            let scopes = lock_scopes(&store.inner.scopes);
            assert_eq!(scopes.idle(), counted(&scopes), "after bind {i}");
        }
        drop(kept);
        let scopes = lock_scopes(&store.inner.scopes);
        assert_eq!(scopes.idle(), counted(&scopes));
        // (each look visits every scope, at most ~1,400 here, once per 64
        // new idle ones)
        assert!(scopes.visited.get() < 200 * 1_500, "{:?}", scopes.visited);
    }

    /// Binds racing on threads, each one's `collect_scopes` looking at the
    /// others' idle scopes: no id is freed twice, and no two names share
    /// one (a scope freed by one collector was pushed again by another,
    /// and two limiters then shared its state).
    #[test]
    fn racing_binds_never_free_a_scope_twice_nor_share_one() {
        let store = MemoryStore::new();
        std::thread::scope(|t| {
            for thread in 0..4 {
                let store = &store;
                t.spawn(move || {
                    for i in 0..2_000 {
                        let suffixes = [format!(":q{thread}-{i}")];
                        let ids = store.bind("race", &suffixes, &LimiterClock::Store);
                        drop(ids);
                    }
                });
            }
        });
        let scopes = lock_scopes(&store.inner.scopes);
        let mut free = scopes.free.clone();
        free.sort_unstable();
        let before = free.len();
        free.dedup();
        assert_eq!(free.len(), before, "an id freed twice");
        let mut held: Vec<u32> = scopes.ids.values().copied().collect();
        held.sort_unstable();
        let before = held.len();
        held.dedup();
        assert_eq!(held.len(), before, "two names share an id");
        assert!(held.iter().all(|id| free.binary_search(id).is_err()));
    }
}
