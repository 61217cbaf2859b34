//! The engine: the one place where a decision, take, give-back, adjustment,
//! block, reset, release or verification is made, over the store's
//! vocabulary ([`Call`] in, [`Outcome`](crate::store::Outcome) out), for
//! both stores; and the assembly of its [`Decision`]s.
//!
//! Like governor's limiter (state, algorithm, clock), it holds what a
//! decision needs and nothing more: the local fast paths (deny cache, local
//! budgets) and runtime limits sit in front of it, in the limiter.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::clock::Clock;
use crate::decision::{
    Decision, Interned, Lease, LeaseParts, NEVER, Part, Parts, QuotaName, Templates, as_micros,
};
use crate::error::StoreError;
use crate::quota::QuotaSpec;
use crate::store::memory::{LocalCall, MemoryStore};
use crate::store::{Adjustment, Bound, Call, GiveBackCall, Outcome, QuotaOutcome};
use crate::strategy::state::{Algorithm, Raw};

use super::OnDenial;
use super::deny_cache::DenyFacts;
use super::keys::{KeyScheme, storable_key};

/// What decides for a limiter: its store, quotas, keys and clock.
pub(crate) struct Engine {
    /// The store, with what it prepared for these quotas.
    pub(super) store: Bound,
    pub(super) quotas: Vec<QuotaSpec>,
    pub(super) names: Vec<QuotaName>,
    /// Per quota, what every decision says of it (name, limit, window).
    pub(super) templates: Interned<Templates>,
    pub(super) keys: KeyScheme,
    pub(super) clock: Clock,
    /// Whether decisions need a unique nonce (sorted-set strategies).
    needs_nonce: bool,
    /// Whether a quota hands out leases (an admitted request then holds one).
    holds_leases: bool,
    instance: u64,
    counter: AtomicU64,
    /// Blocking: the penalty of a denial in µs (0: none); the block key is
    /// then the last storage key.
    pub(super) block: Option<u64>,
    /// When decisions go straight to a [`MemoryStore`](crate::MemoryStore) (see
    /// [`decide_direct`](Self::decide_direct)).
    pub(super) direct: Option<Direct>,
    /// What a denied check records.
    pub(super) on_denial: OnDenial,
    /// The largest cost a recording engine sends (see
    /// [`sent_cost`](Self::sent_cost)).
    max_sent: u64,
}

impl Engine {
    /// The engine of `quotas` over `store` (bound to them); `budgets`:
    /// local budgets spend in front of it (no direct path then).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        store: Bound,
        quotas: Vec<QuotaSpec>,
        names: Vec<QuotaName>,
        templates: Interned<Templates>,
        keys: KeyScheme,
        clock: Clock,
        block: Option<u64>,
        budgets: bool,
        on_denial: OnDenial,
    ) -> Engine {
        let direct =
            direct(&store, &quotas, budgets, block, &clock).filter(|_| !on_denial.records());
        let max_capacity = quotas.iter().map(QuotaSpec::capacity).max().unwrap_or(0);
        Engine {
            on_denial,
            max_sent: max_capacity.saturating_add(1).max(MAX_RECORDED),
            needs_nonce: quotas.iter().any(|q| q.spec().needs_nonce),
            holds_leases: quotas.iter().any(|q| q.spec().holds_leases),
            store,
            quotas,
            names,
            templates,
            keys,
            clock,
            instance: new_instance_id(),
            counter: AtomicU64::new(0),
            block,
            direct,
        }
    }

    /// What a denied check records.
    pub(crate) fn on_denial(&self) -> OnDenial {
        self.on_denial
    }

    /// The cost a check of `cost` sends to the store: itself, or for a cost
    /// above every quota's capacity (which only a recording engine sends)
    /// at most the larger of one past the largest capacity and 2^50 (all a
    /// recording takes: [`RateLimiter::MAX_DEBT`](crate::RateLimiter::MAX_DEBT)
    /// of the fastest rate), so that the scripts' arithmetic stays exact
    /// (below 2^53) and the answer is the same (it still never fits).
    pub(crate) fn sent_cost(&self, cost: u64) -> u64 {
        cost.min(self.max_sent)
    }

    /// Whether a check of `cost` is sent to the store even though it never
    /// fits an enforced quota: a recording engine records it. (Not a cost
    /// above what one call may lease of a concurrency quota, which a store
    /// whose quota had room would grant: denied as ever, without a call.)
    fn records_unfit(&self, cost: u64) -> bool {
        self.on_denial.records()
            && cost > 0
            && self.never_fits(cost) == Some(false)
            && !self
                .quotas
                .iter()
                .any(|q| q.spec().holds_leases && cost > q.max_cost())
    }

    /// This engine's random id (what its reservations are told by).
    pub(crate) fn instance(&self) -> u64 {
        self.instance
    }

    /// The compiled quotas, in the limiter's order.
    pub(crate) fn quotas(&self) -> &[QuotaSpec] {
        &self.quotas
    }

    /// The time sent with each call in µs (a manual clock's or the
    /// caller's, [`Clock::Caller`]), if the engine runs on one.
    pub(super) fn sent_now_us(&self) -> Option<u64> {
        self.clock.sent_now_us()
    }

    /// The base and storage keys of a user key as [`storable_key`] gives it.
    pub(super) fn keys_of(&self, user: &[u8]) -> (String, Vec<String>) {
        self.keys.of(user)
    }

    /// Whether a check of `cost` is answered without a store call, and if so
    /// whether it is allowed: denied when the cost exceeds an enforced
    /// quota's capacity (or, for a concurrency quota,
    /// [`Quota::MAX_LEASES_PER_CALL`](crate::Quota::MAX_LEASES_PER_CALL));
    /// allowed (nothing consumed) when it exceeds every quota's, all of
    /// them [shadow](crate::Quota::shadow). Otherwise the cost is at most
    /// some enforced quota's capacity (or, all quotas shadow, some quota's),
    /// so every cost a store sees is exact in its arithmetic (a shadow quota
    /// whose capacity it exceeds denies it in the store), and no call adds
    /// more leases than one call may.
    fn never_fits(&self, cost: u64) -> Option<bool> {
        let quotas = &self.quotas;
        if quotas.iter().any(|q| !q.shadow && cost > q.max_cost()) {
            return Some(false);
        }
        // (here every quota whose capacity the cost exceeds is shadow)
        quotas.iter().all(|q| cost > q.max_cost()).then_some(true)
    }

    /// The decision of a cost that never fits (see
    /// [`never_fits`](Self::never_fits)): made without a store call, so a
    /// huge cost costs nothing (and every cost a store sees is at most a
    /// capacity, exact in its arithmetic). `None`: the store must decide.
    pub(super) fn unfit(&self, cost: u64) -> Option<Decision> {
        let allowed = self.never_fits(cost)?;
        let parts = self.quotas.iter().map(|q| Part {
            allowed: cost <= q.max_cost(),
            remaining: 0,
            reset_us: 0,
            retry_us: NEVER,
        });
        Some(self.decision(allowed, parts.collect(), 0, None))
    }

    /// Whether a quota hands out leases (a concurrency quota).
    pub(super) fn holds_leases(&self) -> bool {
        self.holds_leases
    }

    /// Whether every quota is [shadow](crate::Quota::shadow): the limiter
    /// then allows every request, as a shadow layer.
    pub(super) fn all_shadow(&self) -> bool {
        self.quotas.iter().all(|q| q.shadow)
    }

    /// Whether `cost` fits every quota's capacity (what a local budget may
    /// spend from).
    pub(super) fn fits_every_quota(&self, cost: u64) -> bool {
        self.quotas.iter().all(|q| cost <= q.capacity())
    }

    /// The decision of `cost` when it needs no waiting: the store is a
    /// [`MemoryStore`](crate::MemoryStore) (which never fails), or the cost can never fit.
    /// `None`: the store must be asked.
    pub(super) fn decide_sync(&self, key: &[u8], cost: u64) -> Option<Decision> {
        if !self.records_unfit(cost)
            && let Some(decision) = self.unfit(cost)
        {
            return Some(decision);
        }
        let cost = self.sent_cost(cost);
        let Bound::Memory(store, scopes) = &self.store else {
            return None;
        };
        let nonce = self.nonce();
        Some(self.decide_in_memory(store, scopes, key, cost, nonce))
    }

    /// The decision of `cost` for `key`: one store call (none when
    /// [`decide_sync`](Self::decide_sync) answers).
    pub(super) async fn exact(&self, key: &[u8], cost: u64) -> Result<Decision, StoreError> {
        match self.decide_sync(key, cost) {
            Some(decision) => Ok(decision),
            None => self.decide_in_store(key, cost).await,
        }
    }

    /// A unique id for sorted-set members, if a quota needs one.
    fn nonce(&self) -> String {
        if self.needs_nonce {
            let n = self.counter.fetch_add(1, Ordering::Relaxed);
            format!("{:x}-{n:x}", self.instance)
        } else {
            String::new()
        }
    }

    /// The store call deciding `cost` on the storage keys `keys` under `base`.
    fn store_call<'a>(
        &'a self,
        base: &'a str,
        user: &'a [u8],
        keys: &'a [String],
        cost: u64,
        nonce: &'a str,
    ) -> Call<'a> {
        Call {
            base,
            user,
            keys,
            quotas: &self.quotas,
            cost,
            now_us: self.clock.sent_now_us(),
            nonce,
            block_us: self.block,
            on_denial: self.on_denial,
        }
    }

    /// The decision of a Redis store (after [`decide_sync`](Self::decide_sync)).
    async fn decide_in_store(&self, key: &[u8], cost: u64) -> Result<Decision, StoreError> {
        let cost = self.sent_cost(cost);
        let nonce = self.nonce();
        let user = storable_key(key);
        let (base, keys) = self.keys_of(&user);
        let call = self.store_call(&base, &user, &keys, cost, &nonce);
        let outcome = self.store.decide(call).await?;
        // (a lone shadow quota's script reports its own verdict)
        let allowed = outcome.allowed || self.all_shadow();
        let lease = self.lease(allowed, cost, nonce, || (base, keys));
        let mut decision = self.decision_of(allowed, outcome.quotas.iter().copied(), lease);
        decision.recorded = outcome.recorded;
        Ok(decision)
    }

    /// A decision of the memory store: no storage-key strings (unless a
    /// lease needs them), no allocation for a key it already holds.
    fn decide_in_memory(
        &self,
        store: &MemoryStore,
        scopes: &[u32],
        key: &[u8],
        cost: u64,
        nonce: String,
    ) -> Decision {
        let user = storable_key(key);
        let now_us = self.clock.sent_now_us();
        let call = LocalCall {
            scopes,
            user: &user,
            quotas: &self.quotas,
            cost,
            now_us,
            nonce: &nonce,
            block_us: self.block,
            on_denial: self.on_denial,
        };
        if let ([scope], [quota]) = (scopes, self.quotas.as_slice()) {
            let (raw, recorded) = store.decide_one(&call, *scope, quota);
            // a lone shadow quota never denies
            let allowed = raw.ok || quota.shadow;
            let lease = self.lease(allowed, cost, nonce, || self.keys_of(&user));
            let mut decision = self.one_part(allowed, raw, quota.shadow, lease);
            decision.recorded = recorded;
            return decision;
        }
        let n = self.quotas.len();
        let placeholder = Raw::deny(0, 0, -1);
        let mut inline = [placeholder; 4];
        let mut heap = Vec::new();
        let out: &mut [Raw] = match inline.get_mut(..n) {
            Some(out) => out,
            None => {
                heap.resize(n, placeholder);
                &mut heap
            }
        };
        let (allowed, recorded) = store.decide(&call, out);
        let lease = self.lease(allowed, cost, nonce, || self.keys_of(&user));
        // (a shadow quota never delays the request)
        let delay = out
            .iter()
            .zip(&self.quotas)
            .filter(|(_, q)| !q.shadow)
            .map(|(r, _)| r.delay.max(0) as u64)
            .max()
            .unwrap_or(0);
        let mut decision = self.decision(
            allowed,
            out.iter().map(|&r| Part::from(r)).collect(),
            delay,
            lease,
        );
        decision.recorded = recorded;
        decision
    }

    /// The decision of an engine of one enforced quota on a
    /// [`MemoryStore`](crate::MemoryStore), with nothing around it (no local budgets, blocks,
    /// leases or manual clock): the store's decision, with none of the
    /// general path's checks. `None`: the general path decides (a peek, a
    /// cost that never fits, any other engine).
    #[inline(always)]
    pub(super) fn decide_direct(&self, key: &[u8], cost: u64) -> Option<Decision> {
        let direct = self.direct?;
        if !(1..=direct.capacity).contains(&cost) {
            return None;
        }
        let (Bound::Memory(store, scopes), Some(quota)) = (&self.store, self.quotas.first()) else {
            return None;
        };
        let &scope = scopes.first()?;
        let raw = store.decide_tat(scope, &storable_key(key), quota, cost, direct.queue);
        Some(self.one_part(raw.ok, raw, false, None))
    }

    /// A decision through the store's take (a settle's reservation): the
    /// decision, and the time the store decided at, the stored user key and
    /// its storage keys (what a settle needs).
    pub(crate) async fn take(
        &self,
        key: &[u8],
        cost: u64,
    ) -> Result<(Decision, i64, Vec<u8>, Vec<String>), StoreError> {
        let user = storable_key(key).into_owned();
        // (a take records nothing: see `OnDenial`)
        if let Some(d) = self.unfit(cost) {
            // (a shadow quota's never-fitting request is let through: a
            // settle charges its excess to these keys)
            let (_, keys) = self.keys_of(&user);
            return Ok((d, 0, user, keys));
        }
        let nonce = self.nonce();
        let (base, keys) = self.keys_of(&user);
        let call = Call {
            on_denial: OnDenial::Nothing,
            ..self.store_call(&base, &user, &keys, cost, &nonce)
        };
        let (outcome, now) = self.store.take(call).await?;
        let allowed = outcome.allowed || self.all_shadow();
        let lease = self.lease(allowed, cost, nonce, || (base, keys.clone()));
        let d = self.decision_of(allowed, outcome.quotas.iter().copied(), lease);
        Ok((d, now, user, keys))
    }

    /// Takes `units` of every quota of the stored user key `user` (a local
    /// budget's take: no nonce, no lease): the store's outcome and time.
    pub(super) async fn take_units(
        &self,
        user: &[u8],
        units: u64,
    ) -> Result<(Outcome, i64), StoreError> {
        let (base, keys) = self.keys_of(user);
        let call = Call {
            on_denial: OnDenial::Nothing,
            ..self.store_call(&base, user, &keys, units, "")
        };
        self.store.take(call).await
    }

    /// Gives back `units` of what a take at `at` (store time, µs; `fins`:
    /// per quota, `at` plus its `reset_after`) counted on `keys` of the
    /// stored user key `user`.
    pub(crate) async fn give_back(
        &self,
        user: &[u8],
        keys: &[String],
        units: u64,
        at: i64,
        fins: &[i64],
    ) -> Result<(), StoreError> {
        let gb = GiveBackCall {
            keys,
            units,
            now_us: self.clock.sent_now_us(),
            at,
            fins,
        };
        self.store.give_back(&self.quotas, gb, user).await
    }

    /// Adjusts every quota's state on `keys` of the stored user key `user`.
    pub(crate) async fn adjust_keys(
        &self,
        user: &[u8],
        keys: &[String],
        adjustment: Adjustment<'_>,
    ) -> Result<(), StoreError> {
        self.store
            .adjust(
                &self.quotas,
                keys,
                user,
                adjustment,
                self.clock.sent_now_us(),
            )
            .await
    }

    /// Adjusts every quota's state of `key` (a user key).
    pub(crate) async fn adjust(
        &self,
        key: &[u8],
        adjustment: Adjustment<'_>,
    ) -> Result<(), StoreError> {
        let user = storable_key(key);
        let (_, keys) = self.keys_of(&user);
        self.adjust_keys(&user, &keys, adjustment).await
    }

    /// Sets (or, `us` 0, lifts) the block of `key` (a user key), for `us` µs.
    pub(crate) async fn set_block(&self, key: &[u8], us: u64) -> Result<(), StoreError> {
        if self.block.is_none() {
            return Err(StoreError::Invalid(
                "blocking is not enabled for this limiter: build it with .blocking() or .block_for(..)"
                    .to_owned(),
            ));
        }
        let user = storable_key(key);
        let (_, keys) = self.keys_of(&user);
        let Some(block_key) = keys.last() else {
            return Ok(());
        };
        self.store
            .set_block(&self.quotas, block_key, &user, us, self.clock.sent_now_us())
            .await
    }

    /// Forgets every quota's state of `key` (a user key), and its block.
    pub(super) async fn reset(&self, key: &[u8]) -> Result<(), StoreError> {
        let user = storable_key(key);
        let (_, keys) = self.keys_of(&user);
        self.store.reset(&user, &keys).await
    }

    /// Gives back a concurrency lease.
    pub(super) async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        self.store.release(lease).await
    }

    /// Checks that the store can run this engine's scripts (`takes`: its
    /// take and give-back ones too).
    pub(super) async fn verify_store(&self, takes: bool) -> Result<(), StoreError> {
        let store_clock = matches!(self.clock, Clock::Store);
        self.store.verify(takes, store_clock).await
    }

    /// The lease of an admitted request, if a quota hands out leases; `keys`
    /// gives the base and storage keys (only called then).
    fn lease(
        &self,
        allowed: bool,
        cost: u64,
        nonce: String,
        keys: impl FnOnce() -> (String, Vec<String>),
    ) -> Option<Lease> {
        if !(allowed && cost > 0 && self.holds_leases) {
            return None;
        }
        let (base, keys) = keys();
        let keys = self
            .quotas
            .iter()
            .zip(keys)
            .filter(|(q, _)| q.spec().holds_leases)
            .map(|(_, k)| k)
            .collect();
        Some(Lease::new(LeaseParts {
            base,
            keys,
            member: nonce,
            cost,
        }))
    }

    /// The decision of an engine of one quota (`shadow`: it never delays).
    #[inline(always)]
    fn one_part(&self, allowed: bool, raw: Raw, shadow: bool, lease: Option<Lease>) -> Decision {
        Decision {
            allowed,
            binding: 0,
            delay_us: if shadow { 0 } else { raw.delay.max(0) as u64 },
            parts: Parts::one(Part::from(raw)),
            templates: self.templates.clone(),
            lease,
            shadow_let_through: false,
            recorded: false,
        }
    }

    /// The decision of every quota's outcome (in the limiter's order).
    pub(super) fn decision_of(
        &self,
        allowed: bool,
        outcomes: impl Iterator<Item = QuotaOutcome>,
        lease: Option<Lease>,
    ) -> Decision {
        let mut delay = 0;
        let parts = outcomes
            .zip(&self.quotas)
            .map(|(o, q)| {
                // (a shadow quota never delays the request)
                if !q.shadow {
                    delay = delay.max(as_micros(o.delay));
                }
                Part {
                    allowed: o.allowed,
                    remaining: o.remaining,
                    reset_us: as_micros(o.reset_after),
                    retry_us: o.retry_after.map_or(NEVER, as_micros),
                }
            })
            .collect();
        self.decision(allowed, parts, delay, lease)
    }

    /// The decision of every quota's part, the longest delay among them.
    fn decision(
        &self,
        allowed: bool,
        parts: Parts,
        delay_us: u64,
        lease: Option<Lease>,
    ) -> Decision {
        let all = parts.as_slice();
        // only enforced quotas bind (all of them when every quota is shadow)
        let templates = &self.templates;
        let all_shadow = templates.iter().all(|t| t.shadow);
        let binds = |i: &usize| all_shadow || !templates[*i].shadow;
        let binding = if all.len() == 1 {
            0
        } else if allowed {
            // the fewest requests left
            (0..all.len())
                .filter(binds)
                .min_by_key(|&i| all[i].remaining)
                .unwrap_or(0)
        } else {
            // a denial that never fits, else the one that frees up last
            (0..all.len())
                .filter(binds)
                .filter(|&i| !all[i].allowed)
                .max_by_key(|&i| all[i].retry_us)
                .unwrap_or(0)
        };
        Decision {
            allowed,
            binding: binding as u32,
            delay_us,
            parts,
            templates: self.templates.clone(),
            lease,
            shadow_let_through: false,
            recorded: false,
        }
    }
}

/// What the deny cache needs to know of the engine it answers for.
impl DenyFacts for Engine {
    fn local_now_us(&self) -> Option<u64> {
        match (self.clock.sent_now_us(), &self.store) {
            (Some(t), _) => Some(t),
            (None, Bound::Memory(store, _)) => Some(store.now_us().max(0) as u64),
            (None, _) => None,
        }
    }

    fn decides_by_counter(&self) -> bool {
        self.clock.sent_now_us().is_none() && matches!(self.store, Bound::Memory(..))
    }

    fn denials_cacheable(&self, quota: usize) -> bool {
        // (a cached denial would answer without the store: it would not
        // record, see `OnDenial`)
        !self.on_denial.records()
            && self
                .quotas
                .get(quota)
                .is_none_or(|q| q.spec().denials_cacheable)
    }
}

/// An engine whose decisions go straight to the store
/// ([`Engine::decide_direct`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Direct {
    /// The one quota's capacity.
    capacity: u64,
    /// Its [`Algorithm::Tat`]'s queue.
    queue: bool,
}

/// Whether an engine's decisions can go straight to the store
/// ([`Engine::decide_direct`]): one enforced quota of the
/// theoretical-arrival-time algorithm on a [`MemoryStore`](crate::MemoryStore) and its clock,
/// without local budgets or blocks.
fn direct(
    store: &Bound,
    quotas: &[QuotaSpec],
    budgets: bool,
    block: Option<u64>,
    clock: &Clock,
) -> Option<Direct> {
    match (store, quotas) {
        (Bound::Memory(..), [q])
            if !budgets && block.is_none() && !q.shadow && clock.sent_now_us().is_none() =>
        {
            match q.spec().algorithm {
                Algorithm::Tat { queue } => Some(Direct {
                    capacity: q.capacity(),
                    queue,
                }),
                Algorithm::Returns(_) => None,
            }
        }
        _ => None,
    }
}

/// The most a recording engine sends beyond every capacity: 2^50, what a
/// recording takes at most (`RateLimiter::MAX_DEBT` of a rate of 1 unit per
/// µs).
const MAX_RECORDED: u64 = crate::strategy::state::MAX_DEBT_US as u64;

fn new_instance_id() -> u64 {
    // Random per process and per limiter: unique sorted-set members across instances.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    RandomState::new().hash_one((nanos, std::process::id()))
}
