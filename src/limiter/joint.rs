//! [`AllOrNothing`]: one decision over several limiters, each with its own
//! key and cost, either every part admitted and consumed or none consuming
//! anything; its answer, [`JointDecision`]. The store side is
//! `lua/joint.lua` (Redis) and `MemoryStore::decide_joint` (its twin).

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;

use crate::decision::Decision;
use crate::error::StoreError;
use crate::store::{JointCall, JointMode, JointOutcome};

use super::OnDenial;
use super::engine::Engine;
use super::keys::storable_key;
use super::rate_limiter::RateLimiter;

/// One decision over several limiters, all or nothing: every part (a
/// limiter, a key, a cost) is admitted and consumed, or none consumes
/// anything. For limits charged together, such as a per-user and a
/// per-organisation limit, or the descriptors of one Envoy rate limit
/// request.
///
/// ```
/// use tower_redis_ratelimit::limiter::AllOrNothing;
/// use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let limiter = |prefix: &str, per_minute| {
///     RateLimiter::builder()
///         .store(store.clone())
///         .prefix(prefix)
///         .quota(Quota::fixed_window(Rate::per_minute(per_minute)))
///         .build()
/// };
/// let (per_user, per_org) = (limiter("user", 100)?, limiter("org", 3)?);
/// for _ in 0..3 {
///     let d = AllOrNothing::new()
///         .part(&per_user, "alice", 1)
///         .part(&per_org, "acme", 1)
///         .decide()
///         .await?;
///     assert!(d.allowed());
/// }
/// // the organisation is out: nothing is consumed from alice's limit either
/// let d = RateLimiter::check_all([(&per_user, "alice", 1), (&per_org, "acme", 1)]).await?;
/// assert!(d.denied());
/// assert!(d.decisions()[0].allowed(), "alice alone would fit");
/// assert!(d.decisions()[1].denied());
/// assert_eq!(per_user.peek("alice").await?.remaining(), 97);
/// # Ok(())
/// # }
/// ```
///
/// # What it guarantees
///
/// - **One atomic store call** on a [`MemoryStore`](crate::MemoryStore)
///   (the shards of every part locked together, in a fixed order), a
///   [`RedisStore`](crate::RedisStore) and a `RedisSentinelStore`: one
///   `EVALSHA` of the joint script (`lua/joint.lua`), on Redis's clock (or
///   each limiter's own [clock](crate::clock::Clock)). Every quota of every
///   part is checked first; only if every part is admitted is each consumed,
///   in order, by its strategy's own code: keys, states and TTLs are
///   exactly what each limiter's own call writes. Nothing is ever consumed
///   for a denied joint decision.
/// - On a `RedisClusterStore`, parts whose keys share one hash slot (one
///   user key's keys always do; see [`check_n`](RateLimiter::check_n) for
///   the hash tag) are decided in that one atomic call. Parts across slots
///   are decided slot by slot, in the parts' order, each slot's parts in one
///   atomic call; when one is denied, the units the slots admitted before
///   took are given back (each limiter's give-back, as
///   [`settle`](RateLimiter::settle) to 0). The bound: between a slot's
///   call and the give-back (the round trips of the slots decided after it,
///   plus the give-back's), a concurrent request may observe those units as
///   used, and be denied because of them; no request is ever admitted past
///   a limit because of them. A give-back that fails (the store went away)
///   leaves its units counted. [`JointDecision::atomic`] says which way it
///   went.
/// - Parts that count in the same storage key (one limiter and one key
///   twice, say) must fit together: the second is checked with what the
///   first takes of the key added.
///
/// # Each part
///
/// Its [`Decision`] is the one its limiter's own
/// [`check_n`](RateLimiter::check_n) would give, with these differences:
/// admitted together, each part's decision is the one it would get decided
/// right after the parts before it; in a denied joint decision nothing is
/// consumed, so a part's [`allowed`](Decision::allowed) says whether it
/// would have fitted (with the parts before it on a shared key), and the
/// quotas that would allow it report their current state (as for a cost of
/// 0). A cost of 0 checks without consuming (denied only when even 0 does
/// not fit: a key in debt); a cost above an enforced quota's capacity is
/// denied without a store call (as [`check_n`](RateLimiter::check_n)), and
/// then nothing at all is consumed (the other parts are only checked, or
/// record their denial: see below, a part that records being sent too).
/// [Shadow](crate::Quota::shadow) quotas never deny, and one that would
/// deny consumes nothing.
///
/// # Recording a denial
///
/// Each part records as its limiter's
/// [`on_denial`](super::RateLimiterBuilder::on_denial) says, or as
/// [`part_with`](Self::part_with) sets for it. Admitted, nothing changes
/// (every part consumed). Denied (by any part), in the same atomic call: a
/// part with [`OnDenial::RecordIfOver`] records its cost on each of its
/// quotas that denies it (as checked, with the parts before it on a shared
/// key), one with [`OnDenial::Record`] on all its enforced quotas, others
/// nothing; see [`OnDenial`] for what a recording does. A recorded part's
/// cost above its capacity is sent too (the decision is denied), and its
/// decision shows the state after ([`Decision::recorded`]).
/// [`peek`](Self::peek) records nothing.
///
/// [`peek`](Self::peek) asks whether every part would be admitted now,
/// consuming nothing (an Envoy request with a limit of 0 among its
/// descriptors is denied whatever the others say, which still tell their
/// state).
///
/// # Limiters
///
/// - Every part's limiter must be on the same store: built with clones of
///   one store value (one `RedisStore`, `RedisClusterStore`,
///   `RedisSentinelStore` or `MemoryStore`). Otherwise the decision is a
///   [`StoreError::Invalid`] naming the part, and nothing is sent.
/// - A limiter with [concurrency](crate::strategy::Strategy::Concurrency)
///   quotas (a joint decision takes no leases) or built with
///   [blocking](super::RateLimiterBuilder::blocking) (a joint decision
///   neither reads nor starts blocks) is a [`StoreError::Invalid`] naming
///   the part; so are two parts whose limiters count one storage key under
///   different rates (two limiters of one prefix and one quota name).
/// - A limiter with [runtime limits](super::RateLimiterBuilder::runtime_limits)
///   decides with the limits in force.
/// - Local budgets are not spent from: a joint decision asks the store (the
///   units local budgets hold stay counted there). The middleware's deny
///   cache is neither read nor written.
/// - A joint decision is never batched with other calls, and is bounded by
///   the store's timeout; as for any call, one that times out may have been
///   applied (still all or nothing: the script is atomic) and is never
///   replayed.
///
/// # Size
///
/// One atomic call holds Redis for the whole of its run (Redis serves no
/// other client meanwhile, and a script is not stopped by the caller's
/// timeout), and a memory store's shards of every part: so a joint decision
/// has at most [`MAX_PARTS`](Self::MAX_PARTS) parts, and its parts log at
/// most [`MAX_LOGGED`](Self::MAX_LOGGED) units together (what a denial
/// records counts: at most its cost, or the quota's count + 1, each). Past
/// either, it is
/// a [`StoreError::TooLarge`] naming the bound, and nothing is sent (an
/// Envoy request with more descriptors than that is answered as invalid).
/// Each quota of each part costs Redis about 8 µs (measured: 256 parts of
/// one quota each, about 2 ms; of two quotas, about 4 ms).
#[derive(Debug, Default)]
pub struct AllOrNothing<'a> {
    parts: Vec<JointPart<'a>>,
}

#[derive(Debug)]
struct JointPart<'a> {
    limiter: &'a RateLimiter,
    key: Vec<u8>,
    cost: u64,
    /// What its denial records; `None`: as its limiter's `on_denial`.
    on_denial: Option<OnDenial>,
}

/// The answer to an [`AllOrNothing`] decision: whether every part was
/// admitted (and consumed), and each part's [`Decision`], in the order the
/// parts were added.
#[derive(Debug, Clone)]
pub struct JointDecision {
    allowed: bool,
    atomic: bool,
    decisions: Vec<Decision>,
}

impl JointDecision {
    /// Whether every part was admitted, and each consumed its cost (true
    /// for no parts at all).
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// `!allowed()`: no part consumed anything (on a Cluster across hash
    /// slots, what was taken has been given back, see [`AllOrNothing`]).
    pub fn denied(&self) -> bool {
        !self.allowed
    }

    /// Each part's decision, in the order the parts were added (see
    /// [`AllOrNothing`] for what a part's decision says in a denied joint
    /// decision).
    pub fn decisions(&self) -> &[Decision] {
        &self.decisions
    }

    /// The decisions, owned.
    pub fn into_decisions(self) -> Vec<Decision> {
        self.decisions
    }

    /// Whether it was decided in one atomic store call (or none): false
    /// only on a `RedisClusterStore` for parts across hash slots, decided
    /// slot by slot with a give-back on a denial.
    pub fn atomic(&self) -> bool {
        self.atomic
    }
}

impl<'a> AllOrNothing<'a> {
    /// The most parts one joint decision may have (see [Size](Self#size)):
    /// 256, about 2 ms of Redis's time for parts of one quota each (the
    /// service for Envoy allows 64 descriptors per request by default).
    pub const MAX_PARTS: usize = 256;

    /// The most units the parts of one decision may log together (see
    /// [Size](Self#size)): the cost of each part times its limiter's
    /// [sliding-log](crate::strategy::Strategy::SlidingWindowLog) quotas,
    /// which keep one time per unit (other strategies' state does not grow
    /// with the cost). 10 000, as one sliding-log quota's largest count
    /// ([`Quota::MAX_SORTED_SET_LIMIT`](crate::Quota::MAX_SORTED_SET_LIMIT)):
    /// about 1.5 ms of Redis's time. Checked only when the decision would
    /// consume (a peek, or a part whose cost never fits, logs nothing).
    pub const MAX_LOGGED: u64 = crate::strategy::MAX_SORTED_SET_LIMIT;

    /// A joint decision of no parts yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a part: `limiter` decides `cost` for `key` (keys are stored as
    /// [`check_n`](RateLimiter::check_n) stores them).
    #[must_use]
    pub fn part(mut self, limiter: &'a RateLimiter, key: impl AsRef<[u8]>, cost: u64) -> Self {
        self.push(limiter, key, cost);
        self
    }

    /// Adds a part, in place (see [`part`](Self::part)).
    pub fn push(&mut self, limiter: &'a RateLimiter, key: impl AsRef<[u8]>, cost: u64) {
        self.parts.push(JointPart {
            limiter,
            key: key.as_ref().to_vec(),
            cost,
            on_denial: None,
        });
    }

    /// Adds a part whose denial records as `on_denial` says, whatever its
    /// limiter's [`on_denial`](super::RateLimiterBuilder::on_denial) (see
    /// [Recording a denial](Self#recording-a-denial)).
    #[must_use]
    pub fn part_with(
        mut self,
        limiter: &'a RateLimiter,
        key: impl AsRef<[u8]>,
        cost: u64,
        on_denial: OnDenial,
    ) -> Self {
        self.push_with(limiter, key, cost, on_denial);
        self
    }

    /// Adds a part, in place (see [`part_with`](Self::part_with)).
    pub fn push_with(
        &mut self,
        limiter: &'a RateLimiter,
        key: impl AsRef<[u8]>,
        cost: u64,
        on_denial: OnDenial,
    ) {
        self.parts.push(JointPart {
            limiter,
            key: key.as_ref().to_vec(),
            cost,
            on_denial: Some(on_denial),
        });
    }

    /// The number of parts.
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// Whether there is no part.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// Decides every part together (see [`AllOrNothing`]).
    ///
    /// # Errors
    ///
    /// A [`StoreError::Invalid`] for parts that cannot be decided together,
    /// a [`StoreError::TooLarge`] for more than
    /// [`MAX_PARTS`](Self::MAX_PARTS) parts or
    /// [`MAX_LOGGED`](Self::MAX_LOGGED) logged units (see [`AllOrNothing`]:
    /// nothing is sent); otherwise the store's errors, as for
    /// [`check_n`](RateLimiter::check_n). On a Cluster across hash slots, an
    /// error after a slot was admitted gives its units back first.
    pub async fn decide(&self) -> Result<JointDecision, StoreError> {
        self.run(true).await
    }

    /// Checks every part as [`decide`](Self::decide) would, consuming
    /// nothing: [`allowed`](JointDecision::allowed) says whether all of them
    /// would be admitted now, and each part's decision is its state as for
    /// a denied joint decision (see [`AllOrNothing`]). One atomic store call
    /// (on a Cluster, one per hash slot, each a snapshot of its own).
    ///
    /// # Errors
    ///
    /// As [`decide`](Self::decide).
    pub async fn peek(&self) -> Result<JointDecision, StoreError> {
        self.run(false).await
    }

    /// [`decide`](Self::decide) (`consume`), or [`peek`](Self::peek).
    async fn run(&self, consume: bool) -> Result<JointDecision, StoreError> {
        if self.parts.len() > Self::MAX_PARTS {
            return Err(StoreError::TooLarge(format!(
                "a joint decision of {} parts: at most {} (AllOrNothing::MAX_PARTS) are \
                 decided in one store call",
                self.parts.len(),
                Self::MAX_PARTS
            )));
        }
        let limiters: Vec<Cow<'_, RateLimiter>> =
            self.parts.iter().map(|p| p.limiter.in_force()).collect();
        let engines: Vec<&Engine> = limiters.iter().map(|l| l.engine()).collect();
        check_parts(&engines)?;
        let users: Vec<Vec<u8>> = self
            .parts
            .iter()
            .map(|p| storable_key(&p.key).into_owned())
            .collect();
        let keys: Vec<Vec<String>> = engines
            .iter()
            .zip(&users)
            .map(|(e, u)| e.keys_of(u).1)
            .collect();
        check_shared_keys(&engines, &keys)?;
        let modes: Vec<OnDenial> = self
            .parts
            .iter()
            .zip(&engines)
            .map(|(p, e)| p.on_denial.unwrap_or_else(|| e.on_denial()))
            .collect();
        // (a peek records nothing)
        let records = |i: usize| consume && self.parts[i].cost > 0 && modes[i].records();
        let unfit: Vec<Option<Decision>> = self
            .parts
            .iter()
            .zip(&engines)
            .map(|(p, e)| e.unfit(p.cost))
            .collect();
        // a part that never fits denies it all: the others are only checked
        // (or record their denial)
        let fits = unfit
            .iter()
            .all(|d| d.as_ref().is_none_or(Decision::allowed));
        let apply = consume && fits;
        // what the decision does once denied: record, if a part does
        let recording = (0..self.parts.len()).any(records);
        let after = if recording {
            JointMode::Denied
        } else {
            JointMode::Check
        };
        let mut joint = Joint {
            engines: &engines,
            parts: &self.parts,
            modes: &modes,
            users: &users,
            keys: &keys,
            // (a denied part that never fits but records is sent)
            decisions: unfit
                .into_iter()
                .enumerate()
                .map(|(i, d)| d.filter(|d| d.allowed() || !records(i)))
                .collect(),
        };
        if consume {
            check_logged(&engines, &self.parts, |i, q| {
                let cost = self.parts[i].cost;
                if apply {
                    // (what a denial records is at most the cost)
                    q.entries_of(cost)
                } else if records(i) {
                    q.entries_of(cost.min(q.capacity().saturating_add(1)))
                } else {
                    0
                }
            })?;
        }
        let pending: Vec<usize> = (0..self.parts.len())
            .filter(|&i| joint.decisions[i].is_none())
            .collect();
        let Some(&first) = pending.first() else {
            return Ok(joint.finish(fits, true));
        };
        let store = &engines[first].store;
        // the parts by hash slot (one group but on a Cluster), in order
        let mut groups: Vec<(Option<u16>, Vec<usize>)> = Vec::new();
        for &i in &pending {
            let slot = keys[i].first().and_then(|k| store.slot_of(k));
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, members)) => members.push(i),
                None => groups.push((slot, vec![i])),
            }
        }
        if !consume {
            for (_, members) in &groups {
                let (_, outcomes) = joint.call(members, JointMode::Check).await?;
                joint.fill(members, outcomes);
            }
            // (every part admitted on its own, with the parts before it)
            let all = joint.decisions.iter().flatten().all(Decision::allowed);
            return Ok(joint.finish(all, groups.len() == 1));
        }
        if let [(_, members)] = groups.as_slice() {
            let mode = if apply { JointMode::Decide } else { after };
            let (all, outcomes) = joint.call(members, mode).await?;
            joint.fill(members, outcomes);
            return Ok(joint.finish(all && apply, true));
        }
        joint.across_slots(&groups, apply, after).await
    }
}

impl RateLimiter {
    /// Decides `parts`, each `(limiter, key, cost)`, all or nothing: a
    /// shorthand for an [`AllOrNothing`] of those parts (see there for the
    /// guarantees, and for what each part's decision says).
    ///
    /// # Errors
    ///
    /// As [`AllOrNothing::decide`].
    pub fn check_all<'a, K: AsRef<[u8]>>(
        parts: impl IntoIterator<Item = (&'a RateLimiter, K, u64)>,
    ) -> impl Future<Output = Result<JointDecision, StoreError>> + Send + 'a {
        let mut joint = AllOrNothing::new();
        for (limiter, key, cost) in parts {
            joint.push(limiter, key, cost);
        }
        async move { joint.decide().await }
    }
}

/// Rejects parts that cannot be decided together: limiters on other stores,
/// with concurrency quotas or with blocking.
fn check_parts(engines: &[&Engine]) -> Result<(), StoreError> {
    let invalid = |i: usize, e: &Engine, why: &str| {
        Err(StoreError::Invalid(format!(
            "part {i} of the joint decision (limiter with prefix {:?}) {why}",
            e.keys.prefix()
        )))
    };
    let Some(first) = engines.first() else {
        return Ok(());
    };
    for (i, e) in engines.iter().enumerate() {
        if !e.store.same_store(&first.store) {
            return invalid(
                i,
                e,
                "is on another store than part 0: every part's limiter must be built with \
                 clones of one store value",
            );
        }
        if e.holds_leases() {
            return invalid(
                i,
                e,
                "has a concurrency quota: a joint decision takes no leases; check it on its own",
            );
        }
        if e.block.is_some() {
            return invalid(
                i,
                e,
                "was built with blocking: a joint decision neither reads nor starts blocks; \
                 check it on its own",
            );
        }
    }
    Ok(())
}

/// Rejects a joint decision whose parts would log more than
/// [`AllOrNothing::MAX_LOGGED`] units together (sliding-log times), part
/// `i`'s quota `q` at most `logs(i, q)`.
fn check_logged(
    engines: &[&Engine],
    parts: &[JointPart<'_>],
    logs: impl Fn(usize, &crate::quota::QuotaSpec) -> u64,
) -> Result<(), StoreError> {
    let logged = engines
        .iter()
        .zip(parts)
        .enumerate()
        .fold(0u64, |sum, (i, (e, _))| {
            e.quotas()
                .iter()
                .fold(sum, |sum, q| sum.saturating_add(logs(i, q)))
        });
    if logged > AllOrNothing::MAX_LOGGED {
        return Err(StoreError::TooLarge(format!(
            "the parts of a joint decision would log {logged} units (each part's cost times its \
             sliding-window-log quotas): at most {} (AllOrNothing::MAX_LOGGED) in one store call",
            AllOrNothing::MAX_LOGGED
        )));
    }
    Ok(())
}

/// Rejects two parts that count one storage key under different numbers
/// (two limiters of one prefix and one quota name at other rates): what
/// one takes of the key would not read in the other's units.
fn check_shared_keys(engines: &[&Engine], keys: &[Vec<String>]) -> Result<(), StoreError> {
    let mut seen: HashMap<&str, (usize, [u64; 4], crate::strategy::Kind)> = HashMap::new();
    for (i, (e, keys)) in engines.iter().zip(keys).enumerate() {
        for (q, key) in e.quotas().iter().zip(keys) {
            let numbers = [q.limit, q.period_us, q.burst, q.interval_us];
            match seen.get(key.as_str()) {
                Some(&(j, n, kind)) if n != numbers || kind != q.kind => {
                    return Err(StoreError::Invalid(format!(
                        "parts {j} and {i} of the joint decision count in the storage key \
                         {key:?} under different rates: decide them apart"
                    )));
                }
                Some(_) => {}
                None => {
                    seen.insert(key, (i, numbers, q.kind));
                }
            }
        }
    }
    Ok(())
}

/// A joint decision under way: its parts, their engines, stored user keys
/// and storage keys, and the decisions made so far.
struct Joint<'j, 'a> {
    engines: &'j [&'j Engine],
    parts: &'j [JointPart<'a>],
    /// What each part's denial records.
    modes: &'j [OnDenial],
    users: &'j [Vec<u8>],
    keys: &'j [Vec<String>],
    decisions: Vec<Option<Decision>>,
}

impl Joint<'_, '_> {
    /// One atomic store call over the parts `members` (one hash slot).
    async fn call(
        &self,
        members: &[usize],
        mode: JointMode,
    ) -> Result<(bool, Vec<JointOutcome>), StoreError> {
        let calls: Vec<JointCall<'_>> = members
            .iter()
            .map(|&i| {
                let e = self.engines[i];
                JointCall {
                    user: &self.users[i],
                    keys: &self.keys[i],
                    quotas: e.quotas(),
                    scopes: e.store.scopes(),
                    // (a recorded cost that never fits: see `sent_cost`)
                    cost: e.sent_cost(self.parts[i].cost),
                    now_us: e.sent_now_us(),
                    on_denial: self.modes[i],
                }
            })
            .collect();
        match members.first() {
            Some(&i) => self.engines[i].store.joint(&calls, mode).await,
            None => Ok((mode == JointMode::Decide, Vec::new())),
        }
    }

    /// Records the decisions of the parts `members` from their outcomes.
    fn fill(&mut self, members: &[usize], outcomes: Vec<JointOutcome>) {
        for (&i, o) in members.iter().zip(outcomes) {
            let e = self.engines[i];
            let allowed = o.outcome.allowed || e.all_shadow();
            let mut d = e.decision_of(allowed, o.outcome.quotas.into_iter(), None);
            // (a part of a denied decision: whether its denial recorded)
            d.recorded = o.outcome.recorded;
            self.decisions[i] = Some(d);
        }
    }

    /// The answer (every part decided by now).
    fn finish(self, allowed: bool, atomic: bool) -> JointDecision {
        JointDecision {
            allowed,
            atomic,
            decisions: self.decisions.into_iter().flatten().collect(),
        }
    }

    /// A Redis Cluster's parts across hash slots: slot by slot, each slot's
    /// parts in one atomic call, until one is denied; then what the slots
    /// admitted before took is given back, and every slot not decided on
    /// the store's current state is checked (nothing consumed), `after`:
    /// recording the parts' denials, if a part records.
    async fn across_slots(
        mut self,
        groups: &[(Option<u16>, Vec<usize>)],
        apply: bool,
        after: JointMode,
    ) -> Result<JointDecision, StoreError> {
        let mut taken: Vec<(usize, JointOutcome)> = Vec::new();
        let mut denied = !apply;
        let mut stale = Vec::new();
        for (g, (_, members)) in groups.iter().enumerate() {
            let mode = if denied { after } else { JointMode::Decide };
            let (all, outcomes) = match self.call(members, mode).await {
                Ok(answer) => answer,
                Err(e) => {
                    self.give_back(&taken).await;
                    return Err(e);
                }
            };
            if !denied && all {
                taken.extend(members.iter().copied().zip(outcomes.iter().cloned()));
                stale.push(g);
            } else if !denied {
                denied = true;
                self.give_back(&taken).await;
            }
            self.fill(members, outcomes);
        }
        if denied {
            // the slots admitted before the denial: their state as given back
            for &g in &stale {
                let members = &groups[g].1;
                let (_, outcomes) = self.call(members, after).await?;
                self.fill(members, outcomes);
            }
        }
        Ok(self.finish(!denied, false))
    }

    /// Gives back what each part of `taken` consumed (its limiter's
    /// give-back, as a settle to 0); a give-back that fails leaves its units
    /// counted.
    async fn give_back(&self, taken: &[(usize, JointOutcome)]) {
        for (i, o) in taken {
            let cost = self.parts[*i].cost;
            if cost == 0 {
                continue;
            }
            // (a quota that did not consume, a shadow one that would deny: -1)
            let fins: Vec<i64> = o
                .outcome
                .quotas
                .iter()
                .map(|q| {
                    if q.allowed {
                        o.now
                            .saturating_add(i64::try_from(q.reset_after.as_micros()).unwrap_or(0))
                    } else {
                        -1
                    }
                })
                .collect();
            let result = self.engines[*i]
                .give_back(&self.users[*i], &self.keys[*i], cost, o.now, &fins)
                .await;
            #[cfg(feature = "tracing")]
            if let Err(e) = &result {
                tracing::warn!(
                    target: "tower_redis_ratelimit",
                    error = %e,
                    "could not give back the units of a denied joint decision"
                );
            }
            drop(result);
        }
    }
}
