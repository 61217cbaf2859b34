//! What a call writes beside its decision: a settle's give-back
//! (`hits_subtrahend`), and the hits of a denied call that the decision
//! could not record itself.

use tower_redis_ratelimit::error::StoreError;
use tower_redis_ratelimit::limiter::AllOrNothing;
use tower_redis_ratelimit::strategy::Strategy;

use super::Core;
use super::logs::shown;
use super::plan::{After, Slot, State};
use crate::config::Charge;
use crate::limits::debt_cap;

impl Core {
    /// A settle (`hits_subtrahend`): each descriptor's hits less the
    /// subtrahend; where the subtrahend is larger, the difference is given
    /// back to its limit now ([`RateLimiter::reward`](tower_redis_ratelimit::RateLimiter::reward): never more than it
    /// holds, a count never below 0, a bucket never above full) and the
    /// descriptor is then only looked at (its hits 0); where it is
    /// smaller, the rest is decided as any hits (and recorded if it does
    /// not fit, see [`record`](Self::record)).
    pub(super) async fn give_back(&self, domain: &str, slots: &mut [Slot<'_>], subtrahend: u64) {
        let mut refunds = Vec::new();
        for slot in slots.iter_mut() {
            let net = slot.hits.saturating_sub(subtrahend);
            let back = subtrahend.saturating_sub(slot.hits);
            slot.hits = net;
            // (a sliding log gives back only the times a reservation
            // wrote, which a refund does not name: nothing)
            let refunds_here = back > 0 && !slot.is_log();
            if let State::Pending {
                limiter, key, cost, ..
            } = &mut slot.state
            {
                *cost = net;
                slot.never_fits = !slot.shadow && net > slot.capacity;
                if refunds_here {
                    let limiter = slot.strict.as_ref().unwrap_or(limiter).clone();
                    let key = key.clone();
                    refunds.push(boxed(
                        async move { limiter.reward(key.as_bytes(), back).await },
                    ));
                }
            }
        }
        for result in futures_util::future::join_all(refunds).await {
            if let Err(e) = result {
                self.metrics.store_error(domain);
                if let Some(held) = self.logs.failed.to_log() {
                    tracing::error!(error = %e, held_back = held, "store error: a refund (hits_subtrahend) was not given back");
                }
            }
        }
    }

    /// Records the hits that a decision neither took nor recorded itself
    /// (a denial the store recorded, [`Decision::recorded`](tower_redis_ratelimit::Decision::recorded), is consumed),
    /// where they are charged anyway ([`Charge`]): with `always`, on every
    /// descriptor; with `over`, on a descriptor over its limit (a
    /// never-fitting one, looked at only; a quota-mode descriptor over
    /// while its call passes); with `admitted`, nowhere. Each is charged
    /// past the limit if need be ([`RateLimiter::penalize`](tower_redis_ratelimit::RateLimiter::penalize): a fixed
    /// window's count runs past it, a bucket takes them as debt, repaid at
    /// its rate), so that a usage report is never lost and the next call
    /// sees it; then the recorded descriptors' states are read again for
    /// the answer. A shadow descriptor records nothing.
    pub(super) async fn record(
        &self,
        domain: &str,
        slots: &mut [Slot<'_>],
        parts: &[(usize, usize)],
    ) {
        let mut charges = Vec::new();
        let mut recorded = Vec::new();
        // sliding-log times written by one call's records, at most what
        // one joint decision may write (a log keeps at most its count + 1
        // times: no charge of one writes more)
        let mut log_left = AllOrNothing::MAX_LOGGED;
        let mut held_back = false;
        for (i, slot) in slots.iter().enumerate() {
            let State::Decided {
                limiter,
                key,
                consumed: false,
                cost,
                ..
            } = &slot.state
            else {
                continue;
            };
            let charged = match slot.charge {
                // (a request too large for one store call was over no
                // limit of its own: nothing is recorded where it had room)
                Charge::Over => slot.over() && !slot.too_large,
                Charge::Admitted => false,
                Charge::Always => true,
            };
            if slot.shadow || *cost == 0 || !charged {
                continue;
            }
            let mut cost = *cost;
            match slot.rule.and_then(|r| r.strategy) {
                Some(Strategy::SlidingWindowLog) => {
                    let most = cost.min(slot.capacity.saturating_add(1));
                    cost = most.min(log_left);
                    log_left -= cost;
                    held_back |= cost < most;
                    if cost == 0 {
                        continue;
                    }
                }
                // a bucket's debt from one call: at most what its rate
                // repays in the longest period (366 days), as a window
                // forgets its count at its end
                Some(Strategy::FixedWindow) | None => {}
                Some(_) => cost = cost.min(slot.rule.map_or(u64::MAX, debt_cap)),
            }
            let limiter = slot.strict.as_ref().unwrap_or(limiter).clone();
            let key = key.clone();
            charges.push(boxed(async move {
                limiter.penalize(key.as_bytes(), cost).await
            }));
            recorded.push((i, cost));
        }
        if held_back && let Some(held) = self.logs.refused.to_log() {
            tracing::warn!(
                domain = shown(domain),
                held_back = held,
                "a denied call's hits on sliding-window-log rules were recorded only in part: at most {} times in one call",
                AllOrNothing::MAX_LOGGED
            );
        }
        if charges.is_empty() {
            return;
        }
        let results = futures_util::future::join_all(charges).await;
        let mut done = Vec::with_capacity(recorded.len());
        for ((i, cost), result) in recorded.into_iter().zip(results) {
            match result {
                Ok(()) => done.push((i, cost)),
                Err(e) => {
                    self.metrics.store_error(domain);
                    if let Some(held) = self.logs.failed.to_log() {
                        tracing::error!(error = %e, held_back = held, "store error: the hits of a denied call were not recorded");
                    }
                }
            }
        }
        // the states after, for the answer: an aligned fixed window's is
        // its decision's less the hits recorded in its key (the same
        // window, known without a read; a count past the limit leaves
        // nothing); any other's is read again, for the call's own hits
        // (its Retry-After is when they fit)
        let part_of = |i: usize| parts.iter().find(|&&(s, _)| s == i).map(|&(_, p)| p);
        let mut read = Vec::new();
        for &(i, _) in &done {
            let aligned = slots[i]
                .rule
                .is_none_or(|r| r.strategy.is_none() && r.calendar.is_none());
            if aligned {
                let p = part_of(i);
                let spent = done
                    .iter()
                    .filter(|&&(j, _)| part_of(j) == p)
                    .fold(0u64, |sum, &(_, c)| sum.saturating_add(c));
                slots[i].after = Some(After::Less(spent));
            } else {
                read.push(i);
            }
        }
        if read.is_empty() {
            return;
        }
        let mut joint = AllOrNothing::new();
        let mut logged = 0u64;
        for &i in &read {
            let slot = &slots[i];
            if let State::Decided {
                limiter, key, cost, ..
            } = &slot.state
            {
                let mut ask = (*cost).min(slot.capacity);
                if slot.is_log() {
                    ask = ask.min(AllOrNothing::MAX_LOGGED - logged);
                    logged += ask;
                }
                joint.push(limiter, key.as_bytes(), ask);
            }
        }
        let Ok(after) = joint.peek().await else {
            return;
        };
        for (&i, decision) in read.iter().zip(after.into_decisions()) {
            slots[i].after = Some(After::Read(decision));
        }
    }
}

/// A store call to run beside others ([`Core::record`],
/// [`Core::give_back`]), boxed: its type stays small.
type StoreCall = std::pin::Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send>>;

fn boxed(f: impl Future<Output = Result<(), StoreError>> + Send + 'static) -> StoreCall {
    Box::pin(f)
}
