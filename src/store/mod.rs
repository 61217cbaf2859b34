//! [`Store`]: where limiter state lives. The stores themselves are at the
//! crate root:
//!
//! - [`RedisStore`]: a single Redis over a `deadpool_redis::Pool`.
//! - `RedisClusterStore` (feature `cluster`): a Redis Cluster over a
//!   `deadpool_redis::cluster::Pool`.
//! - `RedisSentinelStore` (feature `sentinel`): the primary that Redis
//!   Sentinel names, over a `redis::sentinel::SentinelClient`.
//! - [`MemoryStore`]: in process; the embedded default and the fallback.
//!
//! Every store runs the same algorithms with the same integer-microsecond
//! arithmetic: the Redis scripts in `lua/` and their Rust twins give
//! identical decisions (checked by differential tests).
//!
//! A limiter binds its store once, at build: the store prepares what it needs
//! for those quotas (a Redis store: its script and the encoded quota
//! arguments). Each decision is then one call, the same for every store.
//!
//! Inside, a store is one of two: `Backend::Redis` (any connection kind,
//! single node, Cluster or Sentinel, behind one `RedisConns`) or
//! `Backend::Memory`; bound to a limiter, `Bound::Redis` or
//! `Bound::Memory`. Each operation has those two arms.

pub(crate) mod call;
pub(crate) mod memory;
pub(crate) mod on_denial;
pub(crate) mod redis;

use std::sync::Arc;

pub(crate) use self::call::{
    Adjustment, Call, GiveBackCall, JointCall, JointMode, JointOutcome, Outcome, QuotaOutcome,
};
pub(crate) use self::memory::MemoryStore;
#[cfg(feature = "cluster")]
pub(crate) use self::redis::cluster::RedisClusterStore;
use self::redis::protocol;
#[cfg(feature = "sentinel")]
pub(crate) use self::redis::sentinel::RedisSentinelStore;
pub(crate) use self::redis::{RedisConns, RedisStore};
use crate::decision::Lease;
use crate::error::{ConfigError, StoreError};
use crate::quota::QuotaSpec;
use crate::strategy::state::Raw;

/// A backend a [`RateLimiter`](crate::RateLimiter) can keep its state in.
///
/// Implemented by [`RedisStore`], [`MemoryStore`], `RedisClusterStore`
/// (feature `cluster`) and `RedisSentinelStore` (feature `sentinel`);
/// sealed, so the crate can guarantee that every store shares the same
/// semantics.
pub trait Store: sealed::Sealed + Send + Sync + 'static {}

impl Store for RedisStore {}
impl Store for MemoryStore {}
#[cfg(feature = "cluster")]
impl Store for RedisClusterStore {}
#[cfg(feature = "sentinel")]
impl Store for RedisSentinelStore {}

#[allow(private_interfaces)]
pub(crate) mod sealed {
    /// Converts a public store into the internal dispatch enum.
    pub trait Sealed {
        #[doc(hidden)]
        fn into_backend(self) -> super::Backend;
    }
}

#[allow(private_interfaces)]
impl sealed::Sealed for RedisStore {
    fn into_backend(self) -> Backend {
        Backend::Redis(RedisConns::Single(self.inner))
    }
}

#[cfg(feature = "cluster")]
#[allow(private_interfaces)]
impl sealed::Sealed for RedisClusterStore {
    fn into_backend(self) -> Backend {
        Backend::Redis(RedisConns::Cluster(self.inner))
    }
}

#[cfg(feature = "sentinel")]
#[allow(private_interfaces)]
impl sealed::Sealed for RedisSentinelStore {
    fn into_backend(self) -> Backend {
        Backend::Redis(RedisConns::Sentinel(self.inner))
    }
}

#[allow(private_interfaces)]
impl sealed::Sealed for MemoryStore {
    fn into_backend(self) -> Backend {
        Backend::Memory(self)
    }
}

/// The stores, dispatched without boxing: Redis of any connection kind, or
/// memory.
#[derive(Clone)]
pub(crate) enum Backend {
    Redis(RedisConns),
    Memory(MemoryStore),
}

impl std::fmt::Debug for Backend {
    /// The store: `Redis(RedisStore { … })`, `Cluster(…)`, `Memory(…)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::Redis(r) => r.fmt(f),
            Backend::Memory(s) => f.debug_tuple("Memory").field(s).finish(),
        }
    }
}

impl Backend {
    /// Rejects a store configured so that every call would fail
    /// (a zero timeout, no connections, a pool of size 0).
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        match self {
            Backend::Redis(r) => r.validate(),
            Backend::Memory(_) => Ok(()),
        }
    }

    /// Binds the store to one limiter's `quotas`, whose storage keys end in
    /// `suffixes`: what the store needs for every call of that limiter is
    /// prepared here, once.
    pub(crate) fn bind(
        self,
        quotas: &[QuotaSpec],
        prefix: &str,
        suffixes: &[String],
        block: Option<u64>,
        clock: &crate::clock::Clock,
        on_denial: crate::store::on_denial::OnDenial,
    ) -> Bound {
        match self {
            Backend::Redis(r) => {
                let prepared = Prepared {
                    decide: protocol::Prepared::new(quotas, block, r.batching(), on_denial),
                    settle: redis::reserve::Scripts::new(quotas, block),
                };
                Bound::Redis(r, Arc::new(prepared))
            }
            Backend::Memory(s) => {
                let scopes = s.bind(prefix, suffixes, clock);
                Bound::Memory(s, scopes)
            }
        }
    }
}

/// A store bound to one limiter, with what it prepared for that limiter's
/// quotas (opaque to the limiter). Dispatched without boxing.
#[derive(Clone)]
pub(crate) enum Bound {
    /// The connections and the limiter's scripts and encoded arguments.
    Redis(RedisConns, Arc<Prepared>),
    /// The store and the scope id of each quota's storage-key suffix.
    Memory(MemoryStore, memory::ScopeIds),
}

/// What a Redis store prepares for one limiter at [`bind`](Backend::bind).
pub(crate) struct Prepared {
    /// The decision's script and encoded arguments.
    decide: protocol::Prepared,
    /// The take, give-back and adjust scripts (settling, local budgets,
    /// admin operations).
    settle: redis::reserve::Scripts,
}

impl std::fmt::Debug for Bound {
    /// The store alone, as [`Backend`] shows it (the script is no news).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bound::Redis(r, _) => r.fmt(f),
            Bound::Memory(s, ..) => f.debug_tuple("Memory").field(s).finish(),
        }
    }
}

impl Bound {
    /// Decides `call`. The limiter calls a memory store with
    /// [`MemoryStore::decide`] instead, without storage-key strings; this is
    /// the same decision through the general path.
    pub(crate) async fn decide(&self, call: Call<'_>) -> Result<Outcome, StoreError> {
        match self {
            Bound::Redis(r, p) => r.decide(&p.decide, call).await,
            Bound::Memory(s, scopes) => {
                let mut raws = vec![Raw::deny(0, 0, -1); call.quotas.len()];
                let (allowed, recorded) =
                    s.decide(&memory::LocalCall::of(&call, scopes), &mut raws);
                Ok(Outcome {
                    allowed,
                    recorded,
                    quotas: raws.into_iter().map(QuotaOutcome::from).collect(),
                })
            }
        }
    }

    pub(crate) async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        match self {
            Bound::Redis(r, _) => r.release(lease).await,
            Bound::Memory(s, scopes) => {
                s.release(lease, scopes);
                Ok(())
            }
        }
    }

    /// Forgets the state of the user key `user` (as stored), whose storage
    /// keys are `keys`.
    pub(crate) async fn reset(&self, user: &[u8], keys: &[String]) -> Result<(), StoreError> {
        match self {
            Bound::Redis(r, _) => r.reset(keys).await,
            Bound::Memory(s, scopes) => {
                s.reset(user, &scopes[..keys.len().min(scopes.len())]);
                Ok(())
            }
        }
    }

    /// Checks that the store can run this limiter's scripts (a Redis store:
    /// its version, then `SCRIPT LOAD` of the decision scripts (a fast
    /// path's too) and, when `takes`, of the take, give-back and adjust
    /// scripts); a memory store always can. On Redis's clock (`store_clock`),
    /// when a script reads `TIME`, also that a script may read it and gets a
    /// time near this process's.
    pub(crate) async fn verify(&self, takes: bool, store_clock: bool) -> Result<(), StoreError> {
        match self {
            Bound::Redis(r, p) => {
                let mut all: Vec<_> = p.decide.scripts().collect();
                if takes {
                    all.extend(p.settle.scripts());
                }
                let time = store_clock && all.iter().any(|s| s.reads_time());
                r.verify(&all, time).await
            }
            Bound::Memory(..) => Ok(()),
        }
    }
}

/// The store side of joint decisions (`src/limiter/joint.rs`): several
/// limiters of one store, all or nothing.
impl Bound {
    /// Whether `other` is bound to the same store (clones of one store
    /// value): a joint decision's parts must be.
    pub(crate) fn same_store(&self, other: &Bound) -> bool {
        match (self, other) {
            (Bound::Redis(a, _), Bound::Redis(b, _)) => a.same(b),
            (Bound::Memory(a, _), Bound::Memory(b, _)) => a.same(b),
            _ => false,
        }
    }

    /// The memory store's scopes of this limiter's quotas (empty for Redis).
    pub(crate) fn scopes(&self) -> &[u32] {
        match self {
            Bound::Redis(..) => &[],
            Bound::Memory(_, scopes) => scopes,
        }
    }

    /// The hash slot of a storage key, where one call may only touch one
    /// slot (Redis Cluster); `None` on any other store.
    pub(crate) fn slot_of(&self, key: &str) -> Option<u16> {
        match self {
            Bound::Redis(r, _) => r.slot_of(key),
            Bound::Memory(..) => None,
        }
    }

    /// The joint decision of `parts` (each bound to this same store; on a
    /// Cluster, all in one slot), in one atomic call; consumed only if
    /// `mode` decides and every part is admitted, else each part's denial
    /// records as it says (but when `mode` checks only). Whether all were
    /// admitted, and each part's outcome.
    pub(crate) async fn joint(
        &self,
        parts: &[JointCall<'_>],
        mode: JointMode,
    ) -> Result<(bool, Vec<JointOutcome>), StoreError> {
        match self {
            Bound::Redis(r, _) => r.joint(parts, mode).await,
            Bound::Memory(s, _) => Ok(s.decide_joint(parts, mode)),
        }
    }
}

/// The store side of local budgets (`src/limiter/local_budget.rs`): a take and a
/// give-back, each one atomic call on every store.
impl Bound {
    /// A reservation's take: the decision of `call` for the reserved units,
    /// and the time the store decided at.
    pub(crate) async fn take(&self, call: Call<'_>) -> Result<(Outcome, i64), StoreError> {
        match self {
            Bound::Redis(r, p) => r.take(&p.settle, call).await,
            Bound::Memory(s, scopes) => {
                let mut raws = vec![Raw::deny(0, 0, -1); call.quotas.len()];
                let (allowed, now) = s.take(&memory::LocalCall::of(&call, scopes), &mut raws);
                Ok((
                    Outcome {
                        allowed,
                        recorded: false,
                        quotas: raws.into_iter().map(QuotaOutcome::from).collect(),
                    },
                    now,
                ))
            }
        }
    }

    /// Gives back a reservation's unspent units (one atomic call).
    pub(crate) async fn give_back(
        &self,
        quotas: &[QuotaSpec],
        gb: GiveBackCall<'_>,
        user: &[u8],
    ) -> Result<(), StoreError> {
        match self {
            Bound::Redis(r, p) => r.give_back(&p.settle, &gb).await,
            Bound::Memory(s, scopes) => {
                let local = memory::LocalCall {
                    cost: gb.units,
                    ..local_call(scopes, user, quotas, gb.now_us)
                };
                s.give_back(&local, gb.at, gb.fins);
                Ok(())
            }
        }
    }
}

/// Named text documents (what [`Plans`](crate::plans::Plans) shares its
/// current limits in, say): a plain string key on Redis (`GET`, `SET`), a
/// map on the memory store. Never on a decision's path.
impl Backend {
    /// The text of the document `name`, if there is one.
    pub(crate) async fn document(&self, name: &str) -> Result<Option<String>, StoreError> {
        match self {
            Backend::Redis(r) => r.document(name).await,
            Backend::Memory(s) => Ok(s.document(name).map(|d| d.to_string())),
        }
    }

    /// Checks that the document `name` may be read and written (Redis: one
    /// script call that leaves it as it was; memory: always).
    pub(crate) async fn check_document(&self, name: &str) -> Result<(), StoreError> {
        match self {
            Backend::Redis(r) => r.check_document(name).await,
            Backend::Memory(_) => Ok(()),
        }
    }

    /// Writes `text` as the document `name`.
    pub(crate) async fn set_document(&self, name: &str, text: &str) -> Result<(), StoreError> {
        match self {
            Backend::Redis(r) => r.set_document(name, text).await,
            Backend::Memory(s) => {
                s.set_document(name, text);
                Ok(())
            }
        }
    }
}

/// The store side of the admin calls and of settling: adjust and block,
/// each one atomic call on every store.
impl Bound {
    /// Adjusts every quota of a key as each strategy's adjust allows (see
    /// [`Adjustment`]). `keys`: the quotas' keys only.
    pub(crate) async fn adjust(
        &self,
        quotas: &[QuotaSpec],
        keys: &[String],
        user: &[u8],
        adjustment: Adjustment<'_>,
        now_us: Option<u64>,
    ) -> Result<(), StoreError> {
        let keys = &keys[..quotas.len().min(keys.len())];
        match self {
            Bound::Redis(r, p) => r.adjust(&p.settle, keys, adjustment, now_us).await,
            Bound::Memory(s, scopes) => {
                s.adjust(&local_call(scopes, user, quotas, now_us), adjustment);
                Ok(())
            }
        }
    }

    /// Blocks a key for `us` µs from now (0: lifts the block). `block_key`:
    /// the key's last storage key (`{<prefix>:<key>}:!`).
    pub(crate) async fn set_block(
        &self,
        quotas: &[QuotaSpec],
        block_key: &str,
        user: &[u8],
        us: u64,
        now_us: Option<u64>,
    ) -> Result<(), StoreError> {
        match self {
            Bound::Redis(r, _) => r.block(block_key, us, now_us).await,
            Bound::Memory(s, scopes) => {
                s.set_block(&local_call(scopes, user, quotas, now_us), us);
                Ok(())
            }
        }
    }
}

/// A memory call on a key's quotas that decides nothing (adjust, block).
fn local_call<'a>(
    scopes: &'a [u32],
    user: &'a [u8],
    quotas: &'a [QuotaSpec],
    now_us: Option<u64>,
) -> memory::LocalCall<'a> {
    memory::LocalCall {
        scopes,
        user,
        quotas,
        cost: 0,
        now_us,
        nonce: "",
        block_us: None,
        on_denial: crate::store::on_denial::OnDenial::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Quota, Rate};

    /// Thousands of limiters of one shape on one Redis store (one per rule
    /// of the Envoy service) share every script they prepare at bind,
    /// decision, fast path, batches, take and give-back, text and SHA1:
    /// each limiter assembled its own copies (some 50 kB a limiter).
    /// Binding connects to nothing.
    #[test]
    fn limiters_of_one_shape_share_their_scripts_on_redis() {
        let store = RedisStore::from_url("redis://127.0.0.1:1/")
            .unwrap()
            .batching(true);
        let backend = sealed::Sealed::into_backend(store);
        let quotas = [Quota::fixed_window(Rate::per_minute(100))
            .compile(0)
            .unwrap()];
        let bound: Vec<Bound> = (0..2_000)
            .map(|i| {
                let prefix = format!("p{i}");
                let suffixes = [":q".to_owned()];
                backend.clone().bind(
                    &quotas,
                    &prefix,
                    &suffixes,
                    None,
                    &crate::clock::Clock::Store,
                    crate::store::on_denial::OnDenial::Nothing,
                )
            })
            .collect();
        let scripts = |b: &Bound| -> Vec<redis::script::LimiterScript> {
            let Bound::Redis(_, p) = b else {
                panic!("a Redis store binds as Redis")
            };
            p.decide
                .scripts()
                .chain(p.settle.scripts())
                .cloned()
                .collect()
        };
        let first = scripts(&bound[0]);
        // the decision, the fast path, their two batches, the take, the give-back
        assert_eq!(first.len(), 6);
        for (i, b) in bound.iter().enumerate() {
            let these = scripts(b);
            assert_eq!(these.len(), first.len());
            for (a, b) in first.iter().zip(&these) {
                assert!(a.ptr_eq(b), "limiter {i} holds a copy of {}", a.sha);
            }
        }
    }
}
