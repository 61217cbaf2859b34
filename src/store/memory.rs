//! [`MemoryStore`]: limiter state in process memory.
//!
//! State lives in shards, each a mutex over a `hashbrown` table of slots.
//! A slot is one storage key `{<tag>}<suffix>`, where the hash tag `<tag>` is
//! `<prefix>:<user key>` (a prefix holds no `:`, so the tag's first `:` ends
//! it): a slot holds a *scope*, `<prefix><suffix>` interned per store when a
//! limiter binds it (a `u32`), and the user key's bytes (inline up to 22
//! bytes). The pair maps one to one to the Redis key, so limiters share state
//! exactly when they would on Redis. A decision hashes the borrowed key, finds its slot and
//! updates the state in place: no allocation unless a new key longer than
//! the inline size is stored. Every quota of one tag is in the same shard
//! (the shard comes from the rest alone), so a multi-quota decision is
//! atomic under one lock.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::SystemTime;

use hashbrown::HashTable;

use crate::clock::{Clock as LimiterClock, ManualClock};
use crate::decision::Lease;
use crate::quota::QuotaSpec;
use crate::store::Adjustment;
use crate::strategy::eval;
use crate::strategy::state::{self, Entry, Raw, Value, ttl_us};

/// How many operations on a shard at least between the sweeps of its expired
/// keys made as it is used (a store of 64 shards is checked every 16 384
/// operations, as one of 16 was with 1 024 each)...
const SWEEP_EVERY: u32 = 256;
/// ...and how much time (microseconds) at least, unless the shard holds four
/// times the keys its last sweep left (and at least [`GROWN`]): a key
/// revisited within a second is found in place and reused, not dropped and
/// inserted again, while a flood of new keys is swept as often as before.
const SWEEP_INTERVAL_US: i64 = 1_000_000;
/// See [`SWEEP_INTERVAL_US`]. A shard swept for its growth keeps room for
/// this many keys (or four times those left) until its next sweep.
const GROWN: usize = 4_096;
/// A shard's map is shrunk after a sweep when its live keys fill less than a
/// quarter of its capacity, down to twice its live keys but not below this.
const MIN_SHARD_CAPACITY: usize = 64;
/// Bytes of a storage key held in a slot without allocating: its scope (4)
/// and up to 18 bytes of the user key (`ip:255.255.255.255` fits).
const INLINE_KEY: usize = 22;

/// An in-process store with exactly the semantics of [`RedisStore`](crate::RedisStore).
///
/// The embedded default for development and single-instance apps, and the
/// fallback of the middleware's fallback failure policy. State is
/// sharded behind short-lived mutexes (never held across an `.await`) and
/// updated in place: a decision on a known key allocates nothing. Expired
/// keys are swept as the store is used, so memory stays bounded by the
/// number of keys active within their windows: a shard left mostly empty by a
/// sweep shrinks, so a burst of distinct keys does not keep its peak memory
/// ([`capacity`](Self::capacity) shows it). (A shard swept because it grew
/// keeps room for the next growth, a few thousand keys, until its next sweep
/// at least a second later: a steady flow of keys that expire before they are
/// seen again is not shrunk and grown back at every sweep.)
///
/// Its clock is the CPU's time-stamp counter where it is invariant (else the
/// operating system's monotonic clock), calibrated once per process at the
/// first decision: cheap to read, and never going back for a key.
/// `tokio::time::pause()` does not stop it: in tests, give the limiter a
/// [`ManualClock`](crate::clock::ManualClock), which overrides it.
///
/// Clones share the same state.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    shards: Box<[Padded]>,
    hasher: foldhash::fast::RandomState,
    /// The scopes of the limiters bound to this store, and their clocks.
    scopes: Mutex<Scopes>,
    /// Shared documents by name (a [`Plans`](crate::plans::Plans)' current
    /// limits), what Redis holds under the prefix for a Redis store.
    documents: Mutex<HashMap<Box<str>, Arc<str>>>,
}

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
struct Scopes {
    /// Ids by name and clock (0: the store's clock; else [`ManualClock::id`]).
    ids: HashMap<(Box<str>, usize), u32>,
    /// By id (a freed one has an empty name and no clock).
    of: Vec<Scope>,
    /// The freed ids.
    free: Vec<u32>,
    /// How many scopes no limiter is bound to (freed ones aside) make the
    /// next bind look for scopes to free.
    collect_at: usize,
}

/// One scope of a [`MemoryStore`].
#[derive(Debug)]
struct Scope {
    name: Box<str>,
    /// The manual clock (`None`: the store's). Holding it keeps its id from
    /// being reused while the scope lives.
    clock: Option<ManualClock>,
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
    /// Each scope's time for a sweep: its manual clock's reading, or
    /// `store_now`.
    fn times(&self, store_now: i64) -> Vec<i64> {
        self.of
            .iter()
            .map(|s| s.clock.as_ref().map_or(store_now, |c| c.now_us() as i64))
            .collect()
    }

    /// Scopes no limiter is bound to, freed ones aside.
    fn idle(&self) -> usize {
        self.of.iter().filter(|s| s.idle()).count()
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
            if let Some(s) = scopes.of.get_mut(id as usize) {
                s.binders += 1;
            }
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
            if let Some(s) = scopes.of.get_mut(id as usize) {
                s.binders = s.binders.saturating_sub(1);
            }
        }
    }
}

/// A shard on cache lines of its own: two cores locking neighbouring
/// shards do not contend.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded(Mutex<Shard>);

#[derive(Debug, Default)]
struct Shard {
    table: HashTable<Slot>,
    ops: u32,
    /// The time of the last sweep (in the clock of the decision that made it).
    swept_at: i64,
    /// The keys the last sweep left (a `u32`: the lock and the shard's
    /// fields fit one cache line).
    left: u32,
    /// The latest store-clock time a decision on this shard was made at.
    latest: i64,
}

/// One storage key and its state: one cache line.
#[derive(Debug)]
#[repr(align(64))]
struct Slot {
    key: KeyBytes,
    /// `None` only for a moment, while a strategy runs on the slot.
    entry: Option<Entry>,
}

/// A storage key: its scope (four bytes, little-endian) and the rest of its
/// hash tag (the user key as stored).
#[derive(Debug)]
enum KeyBytes {
    Inline { len: u8, bytes: [u8; INLINE_KEY] },
    Heap(Box<[u8]>),
}

impl KeyBytes {
    fn new(scope: u32, user: &[u8]) -> Self {
        let len = 4 + user.len();
        match u8::try_from(len) {
            Ok(short) if len <= INLINE_KEY => {
                let mut bytes = [0; INLINE_KEY];
                bytes[..4].copy_from_slice(&scope.to_le_bytes());
                bytes[4..len].copy_from_slice(user);
                KeyBytes::Inline { len: short, bytes }
            }
            _ => {
                let mut v = Vec::with_capacity(len);
                v.extend_from_slice(&scope.to_le_bytes());
                v.extend_from_slice(user);
                KeyBytes::Heap(v.into_boxed_slice())
            }
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            KeyBytes::Inline { len, bytes } => &bytes[..usize::from(*len)],
            KeyBytes::Heap(b) => b,
        }
    }

    /// Whether this is the key of `user` in `scope`.
    fn is(&self, scope: u32, user: &[u8]) -> bool {
        let b = self.as_bytes();
        b.len() == 4 + user.len() && b[..4] == scope.to_le_bytes() && same(&b[4..], user)
    }

    fn scope(&self) -> u32 {
        let b = self.as_bytes();
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }

    fn user(&self) -> &[u8] {
        &self.as_bytes()[4..]
    }
}

/// `a == b` for slices of one length, short ones (the usual keys) as two
/// overlapping words each rather than through a call to `memcmp`.
#[inline]
fn same(a: &[u8], b: &[u8]) -> bool {
    fn word<const N: usize>(s: &[u8], at: usize) -> [u8; N] {
        <[u8; N]>::try_from(&s[at..at + N]).unwrap_or([0; N])
    }
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        8..=16 => word::<8>(a, 0) == word::<8>(b, 0) && word::<8>(a, n - 8) == word::<8>(b, n - 8),
        4..8 => word::<4>(a, 0) == word::<4>(b, 0) && word::<4>(a, n - 4) == word::<4>(b, n - 4),
        _ => a == b,
    }
}

/// The stores' clock: Unix time in microseconds, read from the CPU's
/// time-stamp counter where it is invariant (through `quanta`, as governor
/// does; calibrated once per process, at the first decision), else from the
/// operating system's monotonic clock. Reading the OS clock cost a sixth of
/// a decision's time in a virtual machine.
struct Clock {
    clock: quanta::Clock,
    /// The counter's reading at `start_us`.
    start_raw: u64,
    /// Unix time at `start_raw`.
    start_us: i64,
    /// Microseconds per counter tick, in fixed point (64 fractional bits):
    /// one multiplication from ticks to microseconds.
    us_per_tick: u64,
}

impl Clock {
    fn get() -> &'static Clock {
        static CLOCK: OnceLock<Clock> = OnceLock::new();
        CLOCK.get_or_init(|| {
            let clock = quanta::Clock::new();
            let start_raw = clock.raw();
            let start_us = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as i64);
            // quanta's scale over 2^40 ticks, as µs per tick times 2^64
            let ns = u128::from(clock.delta_as_nanos(0, 1 << 40));
            let us_per_tick = u64::try_from((ns << 24) / 1_000).unwrap_or(u64::MAX);
            Clock {
                clock,
                start_raw,
                start_us,
                us_per_tick,
            }
        })
    }

    #[inline]
    fn now_us(&self) -> i64 {
        let ticks = self.clock.raw().saturating_sub(self.start_raw);
        let us = (u128::from(ticks) * u128::from(self.us_per_tick)) >> 64;
        self.start_us + us as i64
    }
}

/// A table hash for one scope of a tag hash: every scope of a tag lands in
/// the same shard, spread over its table (a folded multiply, as foldhash).
fn scoped(tag_hash: u64, scope: u32) -> u64 {
    let x = tag_hash
        ^ u64::from(scope)
            .wrapping_add(1)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let m = u128::from(x) * 0xd6e8_feb8_6659_fd93;
    (m as u64) ^ ((m >> 64) as u64)
}

/// A hash tag `<head>:<rest>` as its head and rest (`None`: no `:`).
fn split_tag(tag: &str) -> Option<(&str, &str)> {
    tag.split_once(':')
}

/// One decision for the memory store: the quotas of one user key.
pub(crate) struct LocalCall<'a> {
    /// The limiter's scopes, one per quota (see [`MemoryStore::bind`]).
    pub(crate) scopes: &'a [u32],
    /// The user key as stored (verbatim or hashed by the limiter).
    pub(crate) user: &'a [u8],
    /// The limiter's quotas, in the order of `scopes`.
    pub(crate) quotas: &'a [QuotaSpec],
    pub(crate) cost: u64,
    /// Manual clock reading; `None`: the store's clock.
    pub(crate) now_us: Option<u64>,
    /// Unique id for sorted-set members (sliding log entries, leases).
    pub(crate) nonce: &'a str,
    /// Blocking (see `lua/block.lua`): `None` without; else the penalty of a
    /// denial in µs (0: none), the block's scope the one after the quotas'.
    pub(crate) block_us: Option<u64>,
}

impl Shard {
    /// Drops the keys expired at their scope's time in `times`; shrinks the
    /// map if it is mostly empty (a burst of distinct keys must not hold its
    /// peak memory for ever).
    /// Sweeps are at least a second apart, or a fourfold growth (see
    /// [`sweep_if_due`](Self::sweep_if_due)), so a map is not shrunk and grown
    /// again at every operation. With `regrow` (a sweep due to growth alone)
    /// the map keeps room for the growth that triggers the next one: keys
    /// that expire before they are seen again (a steady flow of them) would
    /// otherwise be shrunk away and grown again at every sweep.
    #[inline(never)]
    fn sweep(&mut self, times: &[i64], hasher: &foldhash::fast::RandomState, regrow: bool) {
        // (a scope bound after the times were read keeps its keys)
        self.table.retain(|s| {
            let now = times.get(s.key.scope() as usize).copied();
            s.entry
                .as_ref()
                .is_some_and(|e| e.expires_at > now.unwrap_or(i64::MIN))
        });
        let len = self.table.len();
        let capacity = self.table.capacity();
        let keep = if regrow { (4 * len).max(GROWN) } else { 0 };
        if capacity > MIN_SHARD_CAPACITY && len < capacity / 4 {
            // (hashbrown shrinks only to fewer buckets)
            let target = (len * 2).max(keep).max(MIN_SHARD_CAPACITY);
            self.table.shrink_to(target, |s| rehash(hasher, s));
        }
    }

    /// The time of a decision made under this shard's lock: a store-clock
    /// reading never goes back (the counters of two cores may differ by a
    /// little), so every key sees its time move forward, as on Redis's one
    /// clock; a manual clock's reading is taken as it is.
    fn time(&mut self, now: i64, manual: bool) -> i64 {
        if manual {
            return now;
        }
        self.latest = self.latest.max(now);
        self.latest
    }

    /// Sweeps as the shard is used: every [`SWEEP_EVERY`] operations once
    /// [`SWEEP_INTERVAL_US`] has passed (in either direction: a manual clock
    /// may be behind the store's), or the map has grown fourfold.
    #[inline]
    fn sweep_if_due(&mut self, now: i64, inner: &Inner) {
        if self.ops < SWEEP_EVERY {
            return;
        }
        let grown = self.table.len() >= (4 * self.left as usize).max(GROWN);
        let early = now.abs_diff(self.swept_at) < SWEEP_INTERVAL_US as u64;
        if !grown && early {
            return;
        }
        self.ops = 0;
        self.swept_at = now;
        self.sweep_now(inner, early);
        self.left = u32::try_from(self.table.len()).unwrap_or(u32::MAX);
    }

    /// Sweeps at the time of each key's clock (the store's no earlier than
    /// this shard's latest decision).
    #[cold]
    #[inline(never)]
    fn sweep_now(&mut self, inner: &Inner, regrow: bool) {
        let store_now = Clock::get().now_us().max(self.latest);
        let times = lock_scopes(&inner.scopes).times(store_now);
        self.sweep(&times, &inner.hasher, regrow);
    }

    /// Runs `f` on the state of (`scope`, `tag`) (`None`: no state), in
    /// place; a state left `None` is removed, a new one inserted.
    #[inline(always)]
    fn with_entry<R>(
        &mut self,
        hasher: &foldhash::fast::RandomState,
        rest_hash: u64,
        scope: u32,
        rest: &[u8],
        f: impl FnOnce(&mut Option<Entry>) -> R,
    ) -> R {
        let hash = scoped(rest_hash, scope);
        let eq = |s: &Slot| s.key.is(scope, rest);
        let mut found = self.table.find_entry(hash, eq);
        let mut fresh = None;
        // (one call of `f`, so that it is inlined)
        let r = f(match &mut found {
            Ok(slot) => &mut slot.get_mut().entry,
            Err(_) => &mut fresh,
        });
        // (the usual case, a key whose state stays, does nothing more: the rest is
        // out of line, so `r` is not kept in memory around its calls)
        let unchanged = match &found {
            Ok(slot) => slot.get().entry.is_some(),
            Err(_) => fresh.is_none(),
        };
        if !unchanged {
            store_or_drop(found, fresh, hash, scope, rest, hasher);
        }
        r
    }
}

/// The end of [`Shard::with_entry`] when its key changes: a state left
/// `None` is removed, a new one inserted.
#[cold]
#[inline(never)]
fn store_or_drop(
    found: Result<
        hashbrown::hash_table::OccupiedEntry<'_, Slot>,
        hashbrown::hash_table::AbsentEntry<'_, Slot>,
    >,
    fresh: Option<Entry>,
    hash: u64,
    scope: u32,
    rest: &[u8],
    hasher: &foldhash::fast::RandomState,
) {
    match found {
        Ok(slot) => {
            slot.remove();
        }
        Err(absent) => {
            let slot = Slot {
                key: KeyBytes::new(scope, rest),
                entry: fresh,
            };
            absent
                .into_table()
                .insert_unique(hash, slot, |s| rehash(hasher, s));
        }
    }
}

/// A slot's table hash, computed again (when the table grows or shrinks).
fn rehash(hasher: &foldhash::fast::RandomState, s: &Slot) -> u64 {
    scoped(hasher.hash_one(s.key.user()), s.key.scope())
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store with 16 shards per hardware thread (at least 64), so
    /// that two cores seldom want one shard's lock at once.
    pub fn new() -> Self {
        let threads = std::thread::available_parallelism().map_or(4, usize::from);
        Self::with_shards((threads * 16).max(64))
    }

    /// An empty store with `shards` independently locked shards (at least 1).
    pub fn with_shards(shards: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                shards: (0..shards.max(1)).map(|_| Padded::default()).collect(),
                hasher: foldhash::fast::RandomState::default(),
                scopes: Mutex::new(Scopes::default()),
                documents: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The number of keys held, including expired ones not yet swept.
    pub fn len(&self) -> usize {
        self.inner.shards.iter().map(|s| lock(s).table.len()).sum()
    }

    /// How many keys the store's maps can hold without allocating: the sum of
    /// its shards' capacities. For tests and monitoring: it follows the number
    /// of live keys down as well as up, since a sweep that leaves a shard
    /// mostly empty gives the memory back.
    pub fn capacity(&self) -> usize {
        self.inner
            .shards
            .iter()
            .map(|s| lock(s).table.capacity())
            .sum()
    }

    /// Whether the store holds no keys.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every expired key now (it also happens as the store is used),
    /// and gives back the memory of shards left mostly empty.
    ///
    /// Each key expires on the clock of the limiter that wrote it: the
    /// store's, or its [`ManualClock`]'s current reading. Limiters on
    /// different clocks can share a store (each keeps its own state, even
    /// under one prefix).
    pub fn sweep(&self) {
        for s in self.inner.shards.iter() {
            lock(s).sweep_now(&self.inner, false);
        }
    }

    /// The store's clock: Unix time in µs.
    pub(crate) fn now_us(&self) -> i64 {
        Clock::get().now_us()
    }

    /// The scopes of a limiter of `prefix` (which holds no `:`) on `clock`
    /// whose quotas' storage keys end in `suffixes`, made on first use and
    /// kept while a limiter is bound to them or a key is in them.
    pub(crate) fn bind(&self, prefix: &str, suffixes: &[String], clock: &LimiterClock) -> ScopeIds {
        self.collect_scopes();
        let manual = match clock {
            LimiterClock::Store => None,
            LimiterClock::Manual(m) => Some(m),
        };
        let id = manual.map_or(0, ManualClock::id);
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
                            clock: manual.cloned(),
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
                        scope
                    }
                };
                let s = &mut scopes.of[scope as usize];
                s.binders += 1;
                s.binds += 1;
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
            let clock = s.clock.take().map_or(0, |c| c.id());
            let name = std::mem::take(&mut s.name);
            scopes.ids.remove(&(name, clock));
            scopes.free.push(id);
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

    /// The hash of a tag's rest and the shard it lives in.
    fn locate(&self, rest: &[u8]) -> (u64, MutexGuard<'_, Shard>) {
        let hash = self.inner.hasher.hash_one(rest);
        // the high half picks the shard; the table hash mixes all of it
        let n = self.inner.shards.len() as u64;
        let i = ((hash >> 32) * n) >> 32;
        (hash, lock(&self.inner.shards[i as usize]))
    }

    /// Decides `call`, writing each quota's answer into `out` (one per
    /// quota); returns whether every quota allowed it.
    pub(crate) fn decide(&self, call: &LocalCall<'_>, out: &mut [Raw]) -> bool {
        self.decide_at(call, out).0
    }

    /// A local reservation's take (`src/reserve.rs`): [`decide`](Self::decide),
    /// and the time it decided at (what its give-back needs).
    pub(crate) fn take(&self, call: &LocalCall<'_>, out: &mut [Raw]) -> (bool, i64) {
        self.decide_at(call, out)
    }

    /// Gives back `call.cost` unspent units of a reservation taken at `at`
    /// to every quota of `call`, as `lua/give_back.lua` does: quota `i` as
    /// its strategy's give-back twin allows, `fins[i]` the take's time plus
    /// that quota's `reset_after`.
    pub(crate) fn give_back(&self, call: &LocalCall<'_>, at: i64, fins: &[i64]) {
        let now = self.time_of(call.now_us);
        let rest = call.user;
        let hasher = &self.inner.hasher;
        let (hash, mut shard) = self.locate(rest);
        for (i, fin) in fins.iter().enumerate().take(call.quotas.len()) {
            shard.with_entry(hasher, hash, call.scopes[i], rest, |slot| {
                let q = &call.quotas[i];
                let twin = q.spec().give_back.twin();
                eval::give_back(slot, twin, &q.params, now, call.cost as i64, at, *fin)
            });
        }
    }

    /// Adjusts every quota of `call` (see [`Adjustment`]), as the adjust
    /// and set modes of `lua/give_back.lua` do.
    pub(crate) fn adjust(&self, call: &LocalCall<'_>, adjustment: Adjustment<'_>) {
        let now = self.time_of(call.now_us);
        let rest = call.user;
        let hasher = &self.inner.hasher;
        let (hash, mut shard) = self.locate(rest);
        for (i, q) in call.quotas.iter().enumerate() {
            shard.with_entry(
                hasher,
                hash,
                call.scopes[i],
                rest,
                |slot| match adjustment {
                    Adjustment::By(units) => {
                        eval::adjust(slot, q.spec().adjust.twin(), &q.params, now, units)
                    }
                    // as the give-back script's `S` mode: afresh, then charged
                    Adjustment::Set(units) => {
                        let twin = q.spec().adjust.twin();
                        if twin.is_some() {
                            *slot = None;
                            if let Some(&u) = units.get(i)
                                && u > 0
                            {
                                eval::adjust(slot, twin, &q.params, now, u);
                            }
                        }
                    }
                },
            );
        }
    }

    /// Blocks `call`'s key for `us` µs from now (0: lifts the block), as
    /// `lua/block_set.lua` does; the block's scope follows the quotas'.
    pub(crate) fn set_block(&self, call: &LocalCall<'_>, us: u64) {
        let Some(&scope) = call.scopes.get(call.quotas.len()) else {
            return;
        };
        let now = self.time_of(call.now_us);
        let rest = call.user;
        let hasher = &self.inner.hasher;
        let (hash, mut shard) = self.locate(rest);
        let us = us as i64;
        shard.with_entry(hasher, hash, scope, rest, |slot| {
            *slot = (us > 0).then(|| Entry {
                value: Value::Tat(now + us),
                expires_at: now + ttl_us(us),
            });
        });
    }

    /// The manual clock's reading, else the store's clock.
    fn time_of(&self, manual: Option<u64>) -> i64 {
        manual.map_or_else(|| self.now_us(), |m| m as i64)
    }

    /// [`decide`](Self::decide) for a limiter of one quota (the common case,
    /// without the bookkeeping of several): quota `quota` of scope `scope`
    /// for the user key `user`.
    pub(crate) fn decide_one(
        &self,
        scope: u32,
        user: &[u8],
        quota: &QuotaSpec,
        cost: u64,
        now_us: Option<u64>,
        nonce: &str,
    ) -> Raw {
        self.decide_key(scope, user, now_us, |slot, now| {
            eval::run(
                slot,
                quota.spec().algorithm,
                &quota.params,
                now,
                cost as i64,
                nonce,
                true,
            )
        })
    }

    /// [`decide_one`](Self::decide_one) on the store's clock for a quota of
    /// the theoretical-arrival-time algorithm (GCRA, token and leaky bucket;
    /// `queue` for the leaky bucket): the path of a limiter's direct
    /// decisions, all of it inlined into [`check`](crate::RateLimiter::check).
    #[inline(always)]
    pub(crate) fn decide_tat(
        &self,
        scope: u32,
        user: &[u8],
        quota: &QuotaSpec,
        cost: u64,
        queue: bool,
    ) -> Raw {
        self.decide_key(scope, user, None, |slot, now| {
            eval::run_tat(slot, &quota.params, now, cost as i64, queue, true)
        })
    }

    /// Runs `step` on the state of `user` in `scope` at the decision's
    /// time, under its shard's lock.
    #[inline(always)]
    fn decide_key(
        &self,
        scope: u32,
        user: &[u8],
        now_us: Option<u64>,
        step: impl FnOnce(&mut Option<Entry>, i64) -> Raw,
    ) -> Raw {
        let hasher = &self.inner.hasher;
        // (the clock is read before the lock: not while holding it)
        let at = self.time_of(now_us);
        let (hash, mut shard) = self.locate(user);
        let now = shard.time(at, now_us.is_some());
        shard.ops = shard.ops.saturating_add(1);
        shard.sweep_if_due(now, &self.inner);
        shard.with_entry(hasher, hash, scope, user, |slot| step(slot, now))
    }

    /// [`decide`](Self::decide), and the time it decided at.
    fn decide_at(&self, call: &LocalCall<'_>, out: &mut [Raw]) -> (bool, i64) {
        // the tag's rest, after the prefix: the user key
        let rest = call.user;
        let cost = call.cost as i64;
        let hasher = &self.inner.hasher;
        let (hash, mut shard) = self.locate(rest);
        let now = shard.time(self.time_of(call.now_us), call.now_us.is_some());
        shard.ops = shard.ops.saturating_add(1);
        shard.sweep_if_due(now, &self.inner);
        let block = call
            .block_us
            .and_then(|b| Some((call.scopes.get(call.quotas.len()).copied()?, b as i64)));
        if let Some((scope, _)) = block {
            // the twin of lua/block.lua: a live block denies every quota
            let until = shard.with_entry(hasher, hash, scope, rest, |slot| {
                state::expire(slot, now);
                match slot {
                    Some(Entry {
                        value: Value::Tat(t),
                        ..
                    }) => *t,
                    _ => i64::MIN,
                }
            });
            if until > now {
                for r in out.iter_mut() {
                    *r = Raw::deny(0, until - now, until - now);
                }
                return (false, now);
            }
        }
        let (allowed, now) = self.decide_quotas(call, out, &mut shard, hash, now);
        if let Some((scope, b)) = block
            && !allowed
            && cost > 0
            && b > 0
        {
            // a denial starts a block (BLOCK_SINGLE, BLOCK_MULTI)
            shard.with_entry(hasher, hash, scope, rest, |slot| {
                *slot = Some(Entry {
                    value: Value::Tat(now + b),
                    expires_at: now + ttl_us(b),
                });
            });
            for r in out.iter_mut() {
                if !r.ok && r.retry >= 0 && r.retry < b {
                    r.retry = b;
                }
            }
        }
        (allowed, now)
    }

    /// The quotas' part of [`decide_at`](Self::decide_at), under the shard's lock.
    fn decide_quotas(
        &self,
        call: &LocalCall<'_>,
        out: &mut [Raw],
        shard: &mut Shard,
        hash: u64,
        now: i64,
    ) -> (bool, i64) {
        let rest = call.user;
        let cost = call.cost as i64;
        let hasher = &self.inner.hasher;
        let mut run = |i: usize, cost: i64, apply: bool| -> Raw {
            shard.with_entry(hasher, hash, call.scopes[i], rest, |slot| {
                let q = &call.quotas[i];
                eval::run(
                    slot,
                    q.spec().algorithm,
                    &q.params,
                    now,
                    cost,
                    call.nonce,
                    apply,
                )
            })
        };
        // (the twin of lua/multi.lua; with shadow quotas, of its SHADOW form
        // in src/store/redis/script.rs)
        let shadow = |i: usize| call.quotas[i].shadow;
        if out.len() == 1 {
            out[0] = run(0, cost, true);
            // a lone shadow quota never denies
            return (out[0].ok || shadow(0), now);
        }
        let mut all = true;
        for (i, r) in out.iter_mut().enumerate() {
            *r = run(i, cost, false);
            if !r.ok && !shadow(i) {
                all = false;
            }
        }
        if all && cost > 0 {
            // every enforced quota, and each shadow quota that would allow
            for (i, r) in out.iter_mut().enumerate() {
                if r.ok {
                    *r = run(i, cost, true);
                }
            }
        } else if !all {
            for (i, r) in out.iter_mut().enumerate() {
                if r.ok {
                    *r = run(i, 0, false);
                }
            }
        }
        (all, now)
    }

    /// The rest and scopes of storage keys `{<tag>}<suffix>` under one tag
    /// (`base`: `{<tag>}`), among `bound` (the scopes of the limiter asking);
    /// keys of other scopes are left out.
    fn parse<'k>(
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

    pub(crate) fn release(&self, lease: &Lease, bound: &[u32]) {
        let Some((rest, scopes)) = self.parse(lease.base(), lease.keys(), bound) else {
            return;
        };
        let members: Vec<String> = lease.members().collect();
        let hasher = &self.inner.hasher;
        let (hash, mut shard) = self.locate(rest);
        for scope in scopes {
            shard.with_entry(hasher, hash, scope, rest, |slot| {
                state::remove_members(slot, &members)
            });
        }
    }

    pub(crate) fn reset(&self, base: &str, keys: &[String], bound: &[u32]) {
        let Some((rest, scopes)) = self.parse(base, keys, bound) else {
            return;
        };
        let hasher = &self.inner.hasher;
        let (hash, mut shard) = self.locate(rest);
        for scope in scopes {
            shard.with_entry(hasher, hash, scope, rest, |slot| *slot = None);
        }
    }
}

/// Locks the scopes (a poisoned lock is used as is: plain data).
fn lock_scopes(m: &Mutex<Scopes>) -> MutexGuard<'_, Scopes> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Locks a shard; a panic elsewhere while it was held leaves plain data, so
/// a poisoned lock is used as is.
fn lock(m: &Padded) -> MutexGuard<'_, Shard> {
    m.0.lock().unwrap_or_else(|e| e.into_inner())
}

/// Shared documents (a [`Plans`](crate::plans::Plans)' current limits):
/// what a Redis store keeps in a plain key, kept here by name.
impl MemoryStore {
    pub(crate) fn document(&self, name: &str) -> Option<Arc<str>> {
        let docs = self
            .inner
            .documents
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        docs.get(name).cloned()
    }

    pub(crate) fn set_document(&self, name: &str, text: &str) {
        let mut docs = self
            .inner
            .documents
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        docs.insert(name.into(), text.into());
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::strategy::Strategy;
    use crate::{Quota, Rate, RateLimiter};

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

    #[test]
    fn a_slot_and_a_locked_shard_are_one_cache_line_each_and_keys_are_told_apart() {
        assert_eq!(std::mem::size_of::<Slot>(), 64);
        // a decision writes its shard's lock and fields: one line, not two
        assert!(std::mem::size_of::<Mutex<Shard>>() <= 64);
        for user in [
            &b""[..],
            b"ip:255.255.255.255",
            b"ip:255.255.255.2555",
            &[b'k'; 128],
        ] {
            let key = KeyBytes::new(7, user);
            assert!(key.is(7, user) && !key.is(8, user), "{user:?}");
            assert_eq!((key.scope(), key.user()), (7, user));
            assert!(!key.is(7, &user[..user.len().saturating_sub(1)]) || user.is_empty());
        }
        assert!(matches!(
            KeyBytes::new(1, b"ip:255.255.255.255"),
            KeyBytes::Inline { .. }
        ));
    }

    #[test]
    fn the_store_clock_follows_the_system_clock() {
        let unix_us = || {
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as i64)
        };
        let clock = Clock::get();
        // (a few tries: the thread may be preempted between two readings)
        let mut seen = Vec::new();
        for _ in 0..5 {
            let (store0, sys0) = (clock.now_us(), unix_us());
            std::thread::sleep(Duration::from_millis(200));
            let (store1, sys1) = (clock.now_us(), unix_us());
            // the same time, and the same elapsed time within 2% (a wrong
            // scale is off by far more)
            let (a, b) = (store1 - store0, sys1 - sys0);
            if (store0 - sys0).abs() < 50_000 && a > 0 && (a - b).abs() < b / 50 {
                return;
            }
            seen.push((store0 - sys0, a, b));
        }
        panic!("store clock off (offset, elapsed, system elapsed in µs): {seen:?}");
    }

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
            assert!(lim.check("k").await.unwrap().allowed());
        }
        store.sweep();
        assert_eq!(store.len(), 1, "the window is still open in manual time");
        assert!(!lim.check("k").await.unwrap().allowed());
        // The store learns the manual time from decisions: one at a later time
        // lets a sweep drop the ended window.
        clock.advance(Duration::from_secs(3_600));
        assert!(lim.check("other").await.unwrap().allowed());
        store.sweep();
        assert_eq!(store.len(), 1, "only the new key is live in manual time");
        assert!(lim.check("k").await.unwrap().allowed());
    }

    #[tokio::test]
    async fn limiters_share_state_exactly_when_their_redis_keys_are_equal() {
        let store = MemoryStore::with_shards(4);
        let lim = |prefix: &str, quota: Quota| {
            RateLimiter::builder()
                .store(store.clone())
                .prefix(prefix)
                .quota(quota)
                .build()
                .unwrap()
        };
        let hour = |n| Quota::fixed_window(Rate::per_hour(n));
        let long = "k".repeat(100);
        // {a:b:c:d}:…: one key for every limiter of prefix `a` and this quota;
        // prefix `ab` (a prefix holds no ':') is another key
        let (a, a2, a3, ab) = (
            lim("a", hour(3)),
            lim("a", hour(3)),
            lim("a", hour(3)),
            lim("ab", hour(3)),
        );
        for (l, key, remaining) in [
            (&a, "b:c:d", 2),
            (&a2, "b:c:d", 1),
            (&a3, "b:c:d", 0),
            (&a, &*long, 2),
            (&ab, &*long, 2),
        ] {
            let d = l.check(key).await.unwrap();
            assert_eq!((d.allowed(), d.remaining()), (true, remaining), "{key}");
        }
        assert_eq!(a2.storage_keys("b:c:d"), a.storage_keys("b:c:d"));
        // another quota name, strategy or prefix: other keys
        for other in [
            lim("a", hour(3).name("other")),
            lim(
                "a",
                Quota::gcra(Rate::per_hour(3)).name("fixed-window-3-per-3600s"),
            ),
            lim("b", hour(3)),
        ] {
            assert_eq!(other.check("b:c:d").await.unwrap().remaining(), 2);
        }
        // reset through one limiter is seen through the other
        a3.reset("b:c:d").await.unwrap();
        assert_eq!(a.peek("b:c:d").await.unwrap().remaining(), 3);
        assert_eq!(a.peek(&*long).await.unwrap().remaining(), 2);
        ab.reset(&*long).await.unwrap();
        assert_eq!(ab.peek(&*long).await.unwrap().remaining(), 3);
        assert_eq!(a.peek(&*long).await.unwrap().remaining(), 2, "its own key");
    }

    #[tokio::test]
    async fn expired_state_is_evicted_so_memory_returns_to_baseline() {
        let store = MemoryStore::with_shards(4);
        let clock = crate::clock::ManualClock::new(Duration::from_secs(3_600));
        for strategy in Strategy::ALL {
            // (a concurrency quota: 3 in flight, leases of 1 s)
            let quota = Quota::new(strategy, Rate::per_second(3));
            let lim = RateLimiter::builder()
                .store(store.clone())
                .prefix(strategy.as_str())
                .clock(clock.clone())
                .quota(quota)
                .build()
                .unwrap();
            for k in 0..2_000 {
                assert!(lim.check(format!("k{k}")).await.unwrap().allowed());
            }
        }
        assert_eq!(store.len(), 7 * 2_000);
        // after two windows every key has expired (the sliding window counter
        // keeps a window as the next one's "previous")
        clock.advance(Duration::from_secs(2) + Duration::from_millis(1));
        // use alone evicts: a shard is swept every SWEEP_EVERY operations
        // (once a second has passed since its last sweep)
        let lim = RateLimiter::builder()
            .store(store.clone())
            .clock(clock.clone())
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
        clock.advance(Duration::from_secs(2));
        // (the store learns the manual time from a decision)
        lim.peek("now").await.unwrap();
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
                    tokio::spawn(async move { lim.check("hot").await.unwrap().allowed() })
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
