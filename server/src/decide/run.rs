//! The joint decision of a call's limited descriptors: one part per
//! storage key, all or nothing in one store call ([`AllOrNothing`]), a look
//! first in quota mode, and each part's decision back in its slots.

use std::collections::HashMap;
use std::sync::Arc;

use tower_redis_ratelimit::error::StoreError;
use tower_redis_ratelimit::limiter::{AllOrNothing, JointDecision, OnDenial};
use tower_redis_ratelimit::{Decision, RateLimiter};

use super::Call;
use super::Core;
use super::plan::{Follow, Slot, State, apply_replaces, denies};
use crate::limits::in_joint;

impl Core {
    /// Plans each descriptor, drops the replaced limits, and decides every
    /// limited descriptor together, all or nothing ([`AllOrNothing`]: one
    /// atomic store call), unless the request is denied whatever the store
    /// says (a limit of 0), or every quota-mode descriptor is over: then the
    /// store is only asked for the descriptors' states ([`AllOrNothing::peek`]),
    /// and nothing is consumed. A store error leaves the descriptors
    /// `Pending` (undecided; nothing was consumed).
    pub(super) async fn run<'a>(&'a self, call: &Call<'_>) -> Ran<'a> {
        let subtrahend = u64::from(call.hits_subtrahend);
        // (a request-level `hits_addend` of 0 is 1, as in the Go service,
        // but not beside a `hits_subtrahend`: a settle adds what it says)
        let request_hits = match (call.hits_addend, subtrahend) {
            (0, 0) => 1,
            (n, _) => u64::from(n),
        };
        let mut slots: Vec<Slot> = call
            .descriptors
            .iter()
            .map(|d| self.plan(call.domain, d, request_hits))
            .collect();
        apply_replaces(&mut slots);
        if subtrahend > 0 {
            self.give_back(call.domain, &mut slots, subtrahend).await;
        }
        // A request's only quota-mode limit denies exactly when it is over:
        // decided by its strict twin, as any limit (all or nothing, in one
        // call), with no look first.
        let quota_limits = slots
            .iter()
            .filter(|s| s.quota && !s.shadow && !matches!(s.state, State::Free))
            .count();
        if quota_limits == 1
            && let Some(slot) = slots
                .iter_mut()
                .find(|s| s.quota && !s.shadow && !matches!(s.state, State::Free))
            && let (Some(strict), State::Pending { limiter, .. }) = (&slot.strict, &mut slot.state)
        {
            *limiter = strict.clone();
            slot.quota = false;
        }
        // One part per storage key: descriptors that count in one key (the
        // same descriptor twice, an override beside its rule, two
        // overrides) are one part of their summed cost, decided by the
        // tightest of their limiters (a shadow or quota-mode one only if
        // all are), as the Go service adds them in one counter.
        let mut parts: Vec<(usize, usize)> = Vec::new();
        // (and what each part records if the call is denied: its first
        // descriptor's `charge`; the descriptors of one key are of one rule)
        let mut asks: Vec<(Arc<RateLimiter>, String, u64, OnDenial)> = Vec::new();
        let mut ranks: Vec<(bool, u64)> = Vec::new();
        // each part's capacity: the least of its enforced descriptors'
        let mut caps: Vec<u64> = Vec::new();
        let mut by_key: HashMap<String, usize> = HashMap::new();
        // (a lone descriptor shares its key with nothing: no key to build)
        let several = slots
            .iter()
            .filter(|s| matches!(s.state, State::Pending { .. }))
            .nth(1)
            .is_some();
        for (i, slot) in slots.iter().enumerate() {
            let State::Pending {
                limiter, key, cost, ..
            } = &slot.state
            else {
                continue;
            };
            let rank = rank_of(slot, limiter);
            let storage = if several {
                limiter
                    .storage_keys(key)
                    .into_iter()
                    .next()
                    .unwrap_or_default()
            } else {
                String::new()
            };
            match by_key.get(&storage) {
                Some(&p) => {
                    if !slot.never_fits {
                        asks[p].2 = asks[p].2.saturating_add(*cost);
                    }
                    if rank < ranks[p] {
                        asks[p].0 = limiter.clone();
                        ranks[p] = rank;
                    }
                    if !slot.shadow {
                        caps[p] = caps[p].min(slot.capacity);
                    }
                    parts.push((i, p));
                }
                None => {
                    by_key.insert(storage, asks.len());
                    parts.push((i, asks.len()));
                    // (a part that never fits is only looked at: the
                    // request is denied, and its state is what is left)
                    let cost = if slot.never_fits { 0 } else { *cost };
                    asks.push((limiter.clone(), key.clone(), cost, in_joint(slot.charge)));
                    ranks.push(rank);
                    caps.push(if slot.shadow { u64::MAX } else { slot.capacity });
                }
            }
        }
        // descriptors of one key whose summed hits never fit (six copies of
        // a descriptor against a limit of 5): each never fits, as one of
        // the sum would not
        for (p, ask) in asks.iter_mut().enumerate() {
            if ask.2 > caps[p] {
                ask.2 = 0;
                for &(i, _) in parts.iter().filter(|&&(_, q)| q == p) {
                    if !slots[i].shadow {
                        slots[i].never_fits = true;
                    }
                }
            }
        }
        if asks.is_empty() {
            // nothing for the store: no match, unlimited, replaced, a limit
            // of 0
            return Ran {
                slots,
                failed: None,
            };
        }
        // (a descriptor of a part another limit decides answers by its own:
        // one of another count or mode than the part's; two limiters of one
        // quota, as overrides past the cache of their limiters, are alike)
        for &(i, p) in &parts {
            let slot = &mut slots[i];
            if let State::Pending { limiter, .. } = &slot.state
                && !Arc::ptr_eq(limiter, &asks[p].0)
                && rank_of(slot, limiter) != ranks[p]
            {
                slot.follows = Some(Follow {
                    units: asks[p].2,
                    limit: slot.capacity,
                    in_state: false,
                });
            }
        }
        let mut joint = AllOrNothing::new();
        for (limiter, key, cost, on_denial) in &asks {
            joint.push_with(limiter, key.as_bytes(), *cost, *on_denial);
        }
        let result = if denies(&slots) {
            // denied already (a limit of 0): the others' states, untouched
            joint.peek().await.map(|d| (Joint::from(d), false))
        } else if slots.iter().any(|s| s.quota && !s.shadow) {
            // quota mode: every quota-mode descriptor over denies the
            // request, so look before taking anything
            match joint.peek().await {
                Ok(peeked) => {
                    let peeked = Joint::from(peeked);
                    let mut looked = Vec::new();
                    decided(&mut slots, &parts, &peeked, false, &mut looked);
                    if denies(&slots) {
                        Ok((peeked, false))
                    } else {
                        undo(&mut slots, looked);
                        take(&joint, &asks).await.map(|d| (d, true))
                    }
                }
                Err(e) => Err(e),
            }
        } else {
            take(&joint, &asks).await.map(|d| (d, true))
        };
        // Too much for one store call (the sliding-log times its parts
        // would write together): denied as a request that never fits, not
        // an error that Envoy's `failure_mode_deny: false` would let
        // through; what is left is read, nothing is taken.
        let result = match result {
            Err(StoreError::TooLarge(why)) => {
                if let Some(held) = self.logs.refused.to_log() {
                    tracing::warn!(held_back = held, "request denied: {why}");
                }
                for slot in &mut slots {
                    if !slot.shadow && matches!(slot.state, State::Pending { cost, .. } if cost > 0)
                    {
                        slot.never_fits = true;
                        slot.too_large = true;
                    }
                }
                joint.peek().await.map(|d| (Joint::from(d), false))
            }
            other => other,
        };
        match result {
            Ok((joint, taking)) => {
                let taken = taking && joint.allowed;
                decided(&mut slots, &parts, &joint, taken, &mut Vec::new());
                self.record(call.domain, &mut slots, &parts).await;
                Ran {
                    slots,
                    failed: None,
                }
            }
            Err(e) => Ran {
                slots,
                failed: Some(e),
            },
        }
    }
}

/// How a part picks the limiter that decides it, the least first: an
/// enforced one before a shadow or quota-mode one, then the lowest count.
fn rank_of(slot: &Slot<'_>, limiter: &RateLimiter) -> (bool, u64) {
    (
        slot.shadow || slot.quota,
        limiter.quotas().first().map_or(0, |q| q.rate().count()),
    )
}

/// What [`Core::run`] did: each descriptor's slot, and the store's error
/// if it failed (the undecided descriptors stay `Pending`).
pub(super) struct Ran<'a> {
    pub(super) slots: Vec<Slot<'a>>,
    pub(super) failed: Option<StoreError>,
}

/// A joint decision's answer: whether all parts were admitted, and each
/// part's decision.
struct Joint {
    allowed: bool,
    decisions: Vec<Decision>,
}

impl From<JointDecision> for Joint {
    fn from(d: JointDecision) -> Self {
        Joint {
            allowed: d.allowed(),
            decisions: d.into_decisions(),
        }
    }
}

/// Decides `joint` (the parts `asks`), consuming if all fit. One part is
/// its limiter's own decision ([`RateLimiter::check_n`]: all or nothing
/// alone, and batched with concurrent calls on Redis, which a joint call
/// never is).
async fn take(
    joint: &AllOrNothing<'_>,
    asks: &[(Arc<RateLimiter>, String, u64, OnDenial)],
) -> Result<Joint, StoreError> {
    if let [(limiter, key, cost, _)] = asks {
        let decision = limiter.check_n(key.as_bytes(), *cost).await?;
        return Ok(Joint {
            allowed: decision.allowed(),
            decisions: vec![decision],
        });
    }
    joint.decide().await.map(Joint::from)
}

/// Records each part's decision of `joint` in its slots (`parts` pairs a
/// slot with its part); `consumed`: the joint decision took its units.
/// `looked` gets each slot decided, for [`undo`].
fn decided(
    slots: &mut [Slot<'_>],
    parts: &[(usize, usize)],
    joint: &Joint,
    consumed: bool,
    looked: &mut Vec<usize>,
) {
    for &(i, part) in parts {
        let Some(decision) = joint.decisions.get(part) else {
            continue;
        };
        let slot = &mut slots[i];
        // (its limiter and key move: no copy)
        let (limiter, key, cost, period) = match std::mem::replace(&mut slot.state, State::Free) {
            State::Pending {
                limiter,
                key,
                cost,
                period,
            }
            | State::Decided {
                limiter,
                key,
                cost,
                period,
                ..
            } => (limiter, key, cost, period),
            other => {
                slot.state = other;
                continue;
            }
        };
        // whether `units` asked for are in the state: taken (a shadow quota
        // that would deny takes nothing), or recorded with a denial
        let took =
            |units: u64| consumed && units > 0 && !decision.shadow_denied() || decision.recorded();
        if let Some(follow) = &mut slot.follows {
            follow.in_state = took(follow.units);
        }
        slot.state = State::Decided {
            limiter,
            key,
            decision: decision.clone(),
            // (a descriptor that never fits asked for nothing)
            consumed: took(if slot.never_fits { 0 } else { cost }),
            cost,
            period,
        };
        looked.push(i);
    }
}

/// Makes the slots [`decided`] decided pending again.
fn undo(slots: &mut [Slot<'_>], looked: Vec<usize>) {
    for i in looked {
        let slot = &mut slots[i];
        if let Some(follow) = &mut slot.follows {
            follow.in_state = false;
        }
        if let State::Decided {
            limiter,
            key,
            cost,
            period,
            ..
        } = std::mem::replace(&mut slot.state, State::Free)
        {
            slot.state = State::Pending {
                limiter,
                key,
                cost,
                period,
            };
        }
    }
}
