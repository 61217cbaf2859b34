//! [`MemoryStore`]: limiter state in process memory.
//!
//! State lives in shards ([`table`]), each a mutex over a `hashbrown` table
//! of slots. A slot is one storage key `{<tag>}<suffix>`, where the hash tag
//! `<tag>` is `<prefix>:<user key>` (a prefix holds no `:`, so the tag's
//! first `:` ends it): a slot holds a *scope* ([`scopes`]),
//! `<prefix><suffix>` interned per store when a limiter binds it (a `u32`),
//! and the user key's bytes (inline up to 22 bytes). The pair maps one to
//! one to the Redis key, so limiters share state exactly when they would on
//! Redis. A decision is given the user key itself (never a storage-key
//! string to parse), hashes it, finds its slot and updates the state in
//! place: no allocation unless a new key longer than the inline size is
//! stored. Every quota of one tag is in the same shard (the shard comes from
//! the user key alone), so a multi-quota decision is atomic under one lock.
//! The store's time is read from [`clock`].

mod clock;
mod scopes;
mod table;

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard};

use self::clock::Clock;
pub(crate) use self::scopes::ScopeIds;
use self::scopes::Scopes;
use self::table::{Padded, Shard, lock};
use crate::decision::Lease;
use crate::quota::QuotaSpec;
use crate::store::call::{
    Adjustment, Call, JointCall, JointMode, JointOutcome, Outcome, QuotaOutcome,
};
use crate::store::on_denial::OnDenial;
use crate::strategy::eval;
use crate::strategy::state::{self, Entry, Raw, Value, ttl_us};

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

impl Inner {
    /// Each scope's time for a sweep of the table at `store_now` (see
    /// [`Scopes`]: a scope with a manual clock is swept at its time).
    fn scope_times(&self, store_now: i64) -> Vec<i64> {
        scopes::lock_scopes(&self.scopes).times(store_now)
    }
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
    /// What a denial records (see [`Call::on_denial`]).
    pub(crate) on_denial: OnDenial,
}

impl<'a> LocalCall<'a> {
    /// The memory side of a store call: `call` on the limiter's `scopes`.
    pub(crate) fn of(call: &Call<'a>, scopes: &'a [u32]) -> Self {
        LocalCall {
            scopes,
            user: call.user,
            quotas: call.quotas,
            cost: call.cost,
            now_us: call.now_us,
            nonce: call.nonce,
            block_us: call.block_us,
            on_denial: call.on_denial,
        }
    }
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
    /// store's, or its [`ManualClock`](crate::clock::ManualClock)'s current
    /// reading. Limiters on different clocks can share a store (each keeps
    /// its own state, even under one prefix).
    pub fn sweep(&self) {
        for s in self.inner.shards.iter() {
            lock(s).sweep_now(&self.inner, false);
        }
    }

    /// The store's clock: Unix time in µs.
    pub(crate) fn now_us(&self) -> i64 {
        Clock::get().now_us()
    }
}

impl MemoryStore {
    /// The hash of a user key (a tag's rest) and the shard it lives in.
    fn locate(&self, rest: &[u8]) -> (u64, MutexGuard<'_, Shard>) {
        let (hash, i) = self.shard_of(rest);
        (hash, lock(&self.inner.shards[i]))
    }

    /// The hash of a user key and the index of its shard.
    #[inline(always)]
    fn shard_of(&self, rest: &[u8]) -> (u64, usize) {
        let hash = self.inner.hasher.hash_one(rest);
        // the high half picks the shard; the table hash mixes all of it
        let n = self.inner.shards.len() as u64;
        let i = ((hash >> 32) * n) >> 32;
        (hash, i as usize)
    }

    /// Whether `other` is this store (a clone of it).
    pub(crate) fn same(&self, other: &MemoryStore) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Decides `call`, writing each quota's answer into `out` (one per
    /// quota); returns whether every quota allowed it, and whether its
    /// denial recorded (see [`OnDenial`]).
    pub(crate) fn decide(&self, call: &LocalCall<'_>, out: &mut [Raw]) -> (bool, bool) {
        let (allowed, _, recorded) = self.decide_at(call, out);
        (allowed, recorded)
    }

    /// A local budget's take (`src/limiter/local_budget.rs`): [`decide`](Self::decide),
    /// and the time it decided at (what its give-back needs).
    pub(crate) fn take(&self, call: &LocalCall<'_>, out: &mut [Raw]) -> (bool, i64) {
        let (allowed, now, _) = self.decide_at(call, out);
        (allowed, now)
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
            // (a quota the take did not consume: see `lua/give_back.lua`)
            if *fin < 0 {
                continue;
            }
            shard.with_entry(hasher, hash, call.scopes[i], rest, |slot| {
                let q = &call.quotas[i];
                let twin = q.spec().give_back.twin();
                eval::give_back(
                    slot,
                    twin,
                    &q.params_at(now),
                    now,
                    call.cost as i64,
                    at,
                    *fin,
                )
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
                    Adjustment::By(units) => eval::adjust(
                        slot,
                        q.spec().adjust.twin(units),
                        &q.params_at(now),
                        now,
                        units,
                    ),
                    // as the give-back script's `S` mode: afresh, then charged
                    Adjustment::Set(units) => {
                        let twin = q.spec().adjust.set_twin();
                        if twin.is_some() {
                            *slot = None;
                            if let Some(&u) = units.get(i)
                                && u > 0
                            {
                                eval::adjust(slot, twin, &q.params_at(now), now, u);
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

    /// [`decide`](Self::decide) for a limiter of one quota and no block (the
    /// common case, without the bookkeeping of several): `call`'s only
    /// quota `quota`, of scope `scope`, in one lookup of the key
    /// ([`decide_lone`]). Returns whether the denial was recorded.
    pub(crate) fn decide_one(
        &self,
        call: &LocalCall<'_>,
        scope: u32,
        quota: &QuotaSpec,
    ) -> (Raw, bool) {
        let mut recorded = false;
        let raw = self.decide_key(scope, call.user, call.now_us, |slot, now| {
            let (raw, r) = decide_lone(slot, quota, now, call);
            recorded = r;
            raw
        });
        (raw, recorded)
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
    fn decide_at(&self, call: &LocalCall<'_>, out: &mut [Raw]) -> (bool, i64, bool) {
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
                return (false, now, false);
            }
        }
        let (allowed, recorded) = self.decide_quotas(call, out, &mut shard, hash, now);
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
        (allowed, now, recorded)
    }

    /// The quotas' part of [`decide_at`](Self::decide_at), under the
    /// shard's lock: whether all allowed, and whether the denial recorded.
    fn decide_quotas(
        &self,
        call: &LocalCall<'_>,
        out: &mut [Raw],
        shard: &mut Shard,
        hash: u64,
        now: i64,
    ) -> (bool, bool) {
        let rest = call.user;
        let cost = call.cost as i64;
        let hasher = &self.inner.hasher;
        // (`record`: first records the cost, as lua/record.lua does)
        let mut run = |i: usize, cost: i64, apply: bool, record: bool| -> Raw {
            shard.with_entry(hasher, hash, call.scopes[i], rest, |slot| {
                let q = &call.quotas[i];
                let params = q.params_at(now);
                if record {
                    let units = cost.min(state::MAX_DEBT_US);
                    eval::adjust(slot, q.spec().adjust.twin(units), &params, now, units);
                }
                eval::run(
                    slot,
                    q.spec().algorithm,
                    &params,
                    now,
                    cost,
                    call.nonce,
                    apply,
                )
            })
        };
        // (the twin of lua/multi.lua; with shadow quotas, of its SHADOW form
        // in src/store/redis/script.rs; recording, of lua/record.lua)
        let shadow = |i: usize| call.quotas[i].shadow;
        let records = |i: usize, denies: bool| {
            let q = &call.quotas[i];
            cost > 0
                && call.on_denial.records_on(denies, q.shadow)
                && q.spec().adjust.twin(cost).is_some()
        };
        if out.len() == 1 {
            let (raw, recorded) = shard.with_entry(hasher, hash, call.scopes[0], rest, |slot| {
                decide_lone(slot, &call.quotas[0], now, call)
            });
            out[0] = raw;
            // a lone shadow quota never denies (a recorded denial denied)
            return (!recorded && (raw.ok || shadow(0)), recorded);
        }
        let mut all = true;
        for (i, r) in out.iter_mut().enumerate() {
            *r = run(i, cost, false, false);
            if !r.ok && !shadow(i) {
                all = false;
            }
        }
        let mut recorded = false;
        if all && cost > 0 {
            // every enforced quota, and each shadow quota that would allow
            for (i, r) in out.iter_mut().enumerate() {
                if r.ok {
                    *r = run(i, cost, true, false);
                }
            }
        } else if !all {
            for (i, r) in out.iter_mut().enumerate() {
                if records(i, !r.ok) {
                    *r = run(i, cost, false, true);
                    recorded = true;
                }
                if r.ok {
                    *r = run(i, 0, false, false);
                }
            }
        }
        (all, recorded)
    }

    /// A joint decision (`src/limiter/joint.rs`), the twin of
    /// `lua/joint.lua`: every part's quotas checked, a key several parts
    /// count in with what the parts before take of it added; then, all
    /// admitted and `mode` decides, every part decided again in order and
    /// applied; else, but checked only, each part's denial records as its
    /// [`OnDenial`] says. Returns whether all were admitted and consumed,
    /// and each part's outcome (its `allowed`: every enforced quota allows
    /// it).
    ///
    /// Atomic across shards: the shards of every part are locked together,
    /// in ascending order (no other path holds two shard locks, so no
    /// deadlock), for the whole decision.
    pub(crate) fn decide_joint(
        &self,
        parts: &[JointCall<'_>],
        mode: JointMode,
    ) -> (bool, Vec<JointOutcome>) {
        let apply = mode == JointMode::Decide;
        let hasher = &self.inner.hasher;
        // (the clocks are read before the locks)
        let times: Vec<i64> = parts.iter().map(|p| self.time_of(p.now_us)).collect();
        let located: Vec<(u64, usize)> = parts.iter().map(|p| self.shard_of(p.user)).collect();
        let mut order: Vec<usize> = located.iter().map(|&(_, i)| i).collect();
        order.sort_unstable();
        order.dedup();
        let mut guards: Vec<MutexGuard<'_, Shard>> =
            order.iter().map(|&i| lock(&self.inner.shards[i])).collect();
        let at: Vec<usize> = located
            .iter()
            .map(|&(_, i)| order.binary_search(&i).unwrap_or(0))
            .collect();
        let nows: Vec<i64> = parts
            .iter()
            .enumerate()
            .map(|(p, part)| guards[at[p]].time(times[p], part.now_us.is_some()))
            .collect();
        // (`record`: first records the part's cost, as lua/joint.lua does)
        let mut run = |p: usize, i: usize, cost: i64, apply: bool, record: bool| -> Raw {
            let part = &parts[p];
            let q = &part.quotas[i];
            guards[at[p]].with_entry(hasher, located[p].0, part.scopes[i], part.user, |slot| {
                let params = q.params_at(nows[p]);
                if record {
                    let units = (part.cost as i64).min(state::MAX_DEBT_US);
                    eval::adjust(slot, q.spec().adjust.twin(units), &params, nows[p], units);
                }
                eval::run(slot, q.spec().algorithm, &params, nows[p], cost, "", apply)
            })
        };
        // what the parts before take of each key (its scope and user key)
        let mut taken: HashMap<(u32, &[u8]), i64> = HashMap::new();
        let mut all = true;
        let mut res: Vec<Vec<Raw>> = Vec::with_capacity(parts.len());
        let mut verdicts = Vec::with_capacity(parts.len());
        for (p, part) in parts.iter().enumerate() {
            let cost = part.cost as i64;
            let mut ok = true;
            let mut r = Vec::with_capacity(part.quotas.len());
            for (i, q) in part.quotas.iter().enumerate() {
                let before = taken.get(&(part.scopes[i], part.user)).copied();
                let cap = q.capacity() as i64;
                let c = cost.saturating_add(before.unwrap_or(0)).min(cap + 1);
                let raw = run(p, i, c, false, false);
                ok &= raw.ok || q.shadow;
                r.push(raw);
            }
            if cost > 0 {
                for (i, raw) in r.iter().enumerate() {
                    if raw.ok {
                        let t = taken.entry((part.scopes[i], part.user)).or_insert(0);
                        *t = t.saturating_add(cost);
                    }
                }
            }
            all &= ok;
            res.push(r);
            verdicts.push(ok);
        }
        let all = all && apply;
        let mut recorded = vec![false; parts.len()];
        for (p, (part, raws)) in parts.iter().zip(res.iter_mut()).enumerate() {
            let cost = part.cost as i64;
            let records = !all && mode != JointMode::Check && cost > 0;
            for (i, raw) in raws.iter_mut().enumerate() {
                let q = &part.quotas[i];
                if all {
                    *raw = run(p, i, cost, true, false);
                    continue;
                }
                if records
                    && part.on_denial.records_on(!raw.ok, q.shadow)
                    && q.spec().adjust.twin(cost).is_some()
                {
                    let c = cost.min(q.capacity() as i64 + 1);
                    *raw = run(p, i, c, false, true);
                    recorded[p] = true;
                }
                if raw.ok {
                    *raw = run(p, i, 0, false, false);
                }
            }
        }
        let outcomes = res
            .into_iter()
            .zip(verdicts)
            .zip(nows)
            .zip(recorded)
            .map(|(((raws, allowed), now), recorded)| JointOutcome {
                outcome: Outcome {
                    allowed,
                    recorded,
                    quotas: raws.into_iter().map(QuotaOutcome::from).collect(),
                },
                now,
            })
            .collect();
        (all, outcomes)
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

    /// Forgets the state of `user` in each of `scopes`.
    pub(crate) fn reset(&self, user: &[u8], scopes: &[u32]) {
        let hasher = &self.inner.hasher;
        let (hash, mut shard) = self.locate(user);
        for &scope in scopes {
            shard.with_entry(hasher, hash, scope, user, |slot| *slot = None);
        }
    }
}

/// Named text documents: what a Redis store keeps in a plain string key,
/// kept here in a map by name.
impl MemoryStore {
    /// The text of the document `name`, if there is one.
    pub(crate) fn document(&self, name: &str) -> Option<Arc<str>> {
        let docs = self
            .inner
            .documents
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        docs.get(name).cloned()
    }

    /// Writes `text` as the document `name`.
    pub(crate) fn set_document(&self, name: &str, text: &str) {
        let mut docs = self
            .inner
            .documents
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        docs.insert(name.into(), text.into());
    }
}

/// One quota decided for `call` on `slot` at `now`, consuming if it
/// allows; denied (not a shadow quota), its cost recorded as `call`'s
/// `on_denial` says (lua/record.lua's twin: the cost, up to
/// [`state::MAX_DEBT_US`], adjusted in, then the state looked at again for
/// the same cost, or for none if that now fits). Returns the answer and
/// whether the denial was recorded.
fn decide_lone(
    slot: &mut Option<Entry>,
    quota: &QuotaSpec,
    now: i64,
    call: &LocalCall<'_>,
) -> (Raw, bool) {
    let algorithm = quota.spec().algorithm;
    let params = quota.params_at(now);
    let cost = call.cost as i64;
    let raw = eval::run(slot, algorithm, &params, now, cost, call.nonce, true);
    if raw.ok
        || cost == 0
        || quota.spec().adjust.twin(cost).is_none()
        || !call.on_denial.records_on(true, quota.shadow)
    {
        return (raw, false);
    }
    let units = cost.min(state::MAX_DEBT_US);
    eval::adjust(slot, quota.spec().adjust.twin(units), &params, now, units);
    let after = eval::run(slot, algorithm, &params, now, cost, call.nonce, false);
    if after.ok {
        (
            eval::run(slot, algorithm, &params, now, 0, call.nonce, false),
            true,
        )
    } else {
        (after, true)
    }
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
    async fn the_callers_clock_has_scopes_of_its_own_swept_at_the_system_time() {
        let store = MemoryStore::with_shards(2);
        let lim = |clock: crate::clock::Clock| {
            RateLimiter::builder()
                .store(store.clone())
                .clock(clock)
                .quota(Quota::sliding_window_log(Rate::new(
                    2,
                    Duration::from_millis(200),
                )))
                .build()
                .unwrap()
        };
        let (caller, caller2, own) = (
            lim(crate::clock::Clock::Caller),
            lim(crate::clock::Clock::Caller),
            lim(crate::clock::Clock::Store),
        );
        assert!(caller.check("k").await.unwrap().allowed());
        assert!(caller2.check("k").await.unwrap().allowed());
        assert!(!caller.check("k").await.unwrap().allowed(), "one state");
        // (as a manual clock's: another clock, another state)
        assert!(own.check("k").await.unwrap().allowed());
        store.sweep();
        assert_eq!(store.len(), 2);
        // the log's times pass by the system clock, which sweeps drop
        std::thread::sleep(Duration::from_millis(250));
        store.sweep();
        assert_eq!(store.len(), 0);
        assert!(caller.check("k").await.unwrap().allowed());
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
        // use alone evicts: a shard is swept every table::SWEEP_EVERY operations
        // (once a second has passed since its last sweep)
        let lim = RateLimiter::builder()
            .store(store.clone())
            .clock(clock.clone())
            .quota(Quota::gcra(Rate::per_second(1)))
            .build()
            .unwrap();
        for k in 0..(table::SWEEP_EVERY as usize * 4 * 4) {
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
