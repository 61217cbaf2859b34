//! The sharded table of a [`MemoryStore`](super::MemoryStore): shards, each
//! a mutex over a `hashbrown` table of slots (a storage key, as its scope
//! and user key, and its state), found by the user key's hash and swept of
//! expired keys as they are used.

use std::hash::BuildHasher;
use std::sync::{Mutex, MutexGuard};

use hashbrown::HashTable;

use super::Inner;
use super::clock::Clock;
use crate::strategy::state::Entry;

/// How many operations on a shard at least between the sweeps of its expired
/// keys made as it is used (a store of 64 shards is checked every 16 384
/// operations, as one of 16 was with 1 024 each)...
pub(super) const SWEEP_EVERY: u32 = 256;
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

/// A shard on cache lines of its own: two cores locking neighbouring
/// shards do not contend.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(super) struct Padded(Mutex<Shard>);

#[derive(Debug, Default)]
pub(super) struct Shard {
    pub(super) table: HashTable<Slot>,
    pub(super) ops: u32,
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
pub(super) struct Slot {
    pub(super) key: KeyBytes,
    /// `None` only for a moment, while a strategy runs on the slot.
    entry: Option<Entry>,
}

/// A storage key: its scope (four bytes, little-endian) and the rest of its
/// hash tag (the user key as stored).
#[derive(Debug)]
pub(super) enum KeyBytes {
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

    pub(super) fn scope(&self) -> u32 {
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
    pub(super) fn time(&mut self, now: i64, manual: bool) -> i64 {
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
    pub(super) fn sweep_if_due(&mut self, now: i64, inner: &Inner) {
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
    pub(super) fn sweep_now(&mut self, inner: &Inner, regrow: bool) {
        let store_now = Clock::get().now_us().max(self.latest);
        let times = inner.scope_times(store_now);
        self.sweep(&times, &inner.hasher, regrow);
    }

    /// Runs `f` on the state of (`scope`, `tag`) (`None`: no state), in
    /// place; a state left `None` is removed, a new one inserted.
    #[inline(always)]
    pub(super) fn with_entry<R>(
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

/// Locks a shard; a panic elsewhere while it was held leaves plain data, so
/// a poisoned lock is used as is.
pub(super) fn lock(m: &Padded) -> MutexGuard<'_, Shard> {
    m.0.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
