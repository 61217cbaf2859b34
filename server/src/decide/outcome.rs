//! A call's answer from its decided slots ([`Answer`]), and its statistics.

use std::time::Duration;

use super::plan::{After, Slot, State};
use super::{Answer, Core, DescriptorAnswer, IetfItem, ceil_secs, now_us};
use crate::metrics::{Metrics, Outcome};
use crate::window::window_of;

impl Core {
    /// The answer of `slots`, decided (`denied`: the call is).
    pub(super) fn respond<'a>(&self, slots: &[Slot<'a>], denied: bool) -> Answer<'a> {
        let now = now_us();
        let mut descriptors = Vec::with_capacity(slots.len());
        let mut retry_after: Option<u64> = None;
        for slot in slots {
            let mut answer = DescriptorAnswer {
                over: false,
                limit: slot.limit,
                remaining: 0,
                reset: None,
                quota_mode: slot.quota,
                ietf: None,
            };
            if slot.unlimited {
                answer.remaining = u32::MAX;
            }
            match &slot.state {
                State::Free | State::Pending { .. } => {}
                State::Refused => {
                    answer.over = true;
                    retry_after = retry_after.max(Some(1));
                }
                State::Zero { period } => {
                    let reset = Duration::from_micros(
                        window_of(u64::try_from(period.as_micros()).unwrap_or(u64::MAX), now)
                            .reset_after_us,
                    );
                    answer.reset = Some(reset);
                    if slot.over() {
                        answer.over = true;
                        retry_after = retry_after.max(Some(ceil_secs(reset).max(1)));
                    }
                }
                State::Decided {
                    limiter,
                    decision,
                    period,
                    ..
                } => {
                    // (a denied request's descriptors: their state, untouched,
                    // or after its hits were recorded)
                    let (shown, less) = match &slot.after {
                        Some(After::Read(d)) => (d, 0),
                        Some(After::Less(hits)) => (decision, *hits),
                        None => (decision, 0),
                    };
                    let (limit, left) = match &slot.follows {
                        Some(follow) => (follow.limit, follow.read(shown).left),
                        None => (shown.limit(), shown.remaining()),
                    };
                    let remaining = left.saturating_sub(less);
                    let mut reset = shown.reset_after();
                    if reset.is_zero() {
                        // (a cost that can never fit: no state was read)
                        reset = Duration::from_micros(
                            window_of(u64::try_from(period.as_micros()).unwrap_or(u64::MAX), now)
                                .reset_after_us,
                        );
                    }
                    answer.remaining = u32::try_from(remaining).unwrap_or(u32::MAX);
                    answer.reset = Some(reset);
                    // (a quota-mode descriptor over its limit is reported over,
                    // even when the request is let through)
                    let over = slot.over();
                    // (no wait admits a request that never fits: no Retry-After)
                    let wait = if slot.never_fits {
                        None
                    } else {
                        Some(shown.retry_after().unwrap_or(reset))
                    };
                    if over {
                        answer.over = true;
                        if let Some(wait) = wait {
                            retry_after = retry_after.max(Some(ceil_secs(wait).max(1)));
                        }
                    }
                    if self.options.headers && !slot.shadow {
                        let name = limiter
                            .quota_names()
                            .first()
                            .map(|n| n.to_string())
                            .unwrap_or_default();
                        let t = match wait {
                            Some(wait) if over => ceil_secs(wait).max(1),
                            _ => ceil_secs(reset),
                        };
                        answer.ietf = Some(IetfItem {
                            name,
                            quota: limit,
                            window: ceil_secs(*period).max(1),
                            remaining,
                            t,
                        });
                    }
                }
            }
            descriptors.push(answer);
        }
        Answer {
            denied,
            descriptors,
            retry_after,
        }
    }
}

/// Counts each decided descriptor in `metrics`, as the Go service counts
/// them ([`crate::metrics`]).
pub(super) fn count(metrics: &Metrics, domain: &str, slots: &[Slot<'_>]) {
    for slot in slots {
        let Some(key) = &slot.metric_key else {
            continue;
        };
        let outcome = match &slot.state {
            State::Zero { .. } => Outcome {
                hits: slot.hits,
                limit: 0,
                before: 0,
                over: slot.hits > 0,
                shadow: slot.shadow,
            },
            State::Decided {
                decision,
                cost,
                consumed,
                ..
            } => {
                if let Some(follow) = &slot.follows {
                    // (its own limit, read off the part's decision: the
                    // counter before the part, when it is known, else the
                    // limit's)
                    let own = follow.read(decision);
                    Outcome {
                        hits: *cost,
                        limit: follow.limit,
                        before: own.before.unwrap_or(follow.limit),
                        over: own.over || slot.never_fits,
                        shadow: slot.shadow,
                    }
                } else {
                    let limit = decision.limit();
                    let over = decision.denied() || decision.shadow_denied() || slot.never_fits;
                    // consumed: the remaining count is after the hits; else
                    // nothing was taken (a denial the store recorded shows
                    // the state after, past the limit: what was used before
                    // it is not known, counted as the limit's)
                    let used = limit.saturating_sub(decision.remaining());
                    Outcome {
                        hits: *cost,
                        limit,
                        before: if *consumed && !decision.recorded() {
                            used.saturating_sub(*cost)
                        } else {
                            used
                        },
                        over,
                        shadow: slot.shadow,
                    }
                }
            }
            _ => continue,
        };
        let (valued, fallback) = match slot.rule {
            Some(rule) => (*key != rule.full_key, rule.full_key.clone()),
            None => (true, format!("{domain}.limit_override")),
        };
        metrics.record(domain, key, valued, &fallback, outcome);
    }
}
