//! Each descriptor's plan ([`Slot`]): the limit it matches (or its
//! override), its storage key, hits and capacity, what it records when
//! denied; `replaces`; and whether a call's slots deny it.

use std::sync::Arc;
use std::time::Duration;

use tower_redis_ratelimit::strategy::Strategy;
use tower_redis_ratelimit::{Decision, RateLimiter};

use super::logs::shown;
use super::{Core, Descriptor, ReportedLimit};
use crate::config::{Charge, Rule, Unit};
use crate::limits::{Limit, OverrideId, prefix_for, quota_name, user_key};

/// One descriptor's plan, then its outcome.
pub(super) struct Slot<'a> {
    /// `None`: no limit (no match, unknown domain, unlimited).
    pub(super) limit: Option<ReportedLimit<'a>>,
    pub(super) unlimited: bool,
    pub(super) shadow: bool,
    /// `quota_mode`: over its limit, it denies the request only if every
    /// quota-mode descriptor of the request is over (as in the Go service).
    pub(super) quota: bool,
    /// A quota-mode limit's strict twin ([`Limit::Limited`]).
    pub(super) strict: Option<Arc<RateLimiter>>,
    pub(super) state: State,
    /// The matched rule (`None` for an override or no match).
    pub(super) rule: Option<&'a Rule>,
    /// The statistics key (`domain.key...`); `None`: not counted.
    pub(super) metric_key: Option<String>,
    /// The descriptor's units.
    pub(super) hits: u64,
    /// More units than the limit holds (and not in shadow mode): over
    /// whatever the store says, with no time after which it would fit;
    /// only its state is read.
    pub(super) never_fits: bool,
    /// The most units its limit holds (the burst of a strategy that takes
    /// one, else the count).
    pub(super) capacity: u64,
    /// When its hits are charged ([`Charge`]: its rule's, else the
    /// service's).
    pub(super) charge: Charge,
    /// Denied with its request as too large for one store call
    /// ([`StoreError::TooLarge`](tower_redis_ratelimit::error::StoreError::TooLarge)), not over a limit of its own.
    pub(super) too_large: bool,
    /// Decided by another descriptor's limiter on the counter they share:
    /// its own limit held against that limiter's decision.
    pub(super) follows: Option<Follow>,
    /// Its state after its hits were recorded though not admitted
    /// ([`Core::record`]), for the answer; the decision stays what
    /// decided the call (and what the metrics count).
    pub(super) after: Option<After>,
}

/// A descriptor that counts in the key of another's part, decided by
/// another limiter (a shadow or quota-mode rule beside a strict `limit`
/// override of its counter, an override beside a tighter rule): the part
/// is decided by its tightest enforced limiter, which keeps the request
/// within every enforced limit, and this descriptor answers by its own
/// limit, read off that decision. Only limiters of one rate (aligned fixed
/// windows of one length) count in one key, so the decision's limit less
/// its remaining is their shared counter.
#[derive(Debug, Clone, Copy)]
pub(super) struct Follow {
    /// The units its part asks for, all of its descriptors' together.
    pub(super) units: u64,
    /// Its own limit.
    pub(super) limit: u64,
    /// Whether the part's units are in the decision's state (taken, or
    /// recorded with a denial).
    pub(super) in_state: bool,
}

impl Follow {
    /// Its own answer, read off `decision` (the deciding limiter's): what
    /// is left of its limit in the state the decision shows, whether its
    /// part's units put it over, and the counter before them. Exact when
    /// the deciding limit has units left, or took them; else the counter is
    /// at least that limit, nothing is said to be left (never more than
    /// is), it is over whenever the part asks for units, and the counter is
    /// not known.
    pub(super) fn read(&self, decision: &Decision) -> Own {
        let (lead, left) = (decision.limit(), decision.remaining());
        if left == 0 && !(self.in_state && decision.allowed()) {
            return Own {
                left: 0,
                over: self.units > 0 || self.limit < lead,
                before: None,
            };
        }
        let counter = lead.saturating_sub(left);
        let (before, with_part) = if self.in_state {
            (counter.saturating_sub(self.units), counter)
        } else {
            (counter, counter.saturating_add(self.units))
        };
        Own {
            left: self.limit.saturating_sub(counter),
            over: with_part > self.limit,
            before: Some(before),
        }
    }
}

/// A [`Follow`]er's own answer ([`Follow::read`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Own {
    /// What is left of its limit.
    pub(super) left: u64,
    /// Whether its part's units put it over its limit.
    pub(super) over: bool,
    /// The counter before its part's units, when known.
    pub(super) before: Option<u64>,
}

/// A descriptor's state after [`Core::record`] charged its hits.
pub(super) enum After {
    /// Read again from the store.
    Read(Decision),
    /// A fixed window's: its decision's, less the hits recorded (the
    /// window and its reset unchanged), with no second read.
    Less(u64),
}

impl Slot<'_> {
    /// Whether its rule is a sliding-window log (which keeps a time per
    /// unit: what one call writes to it is bounded).
    pub(super) fn is_log(&self) -> bool {
        self.rule
            .is_some_and(|r| r.strategy == Some(Strategy::SlidingWindowLog))
    }

    /// Whether this descriptor is over its limit and not in shadow mode
    /// (a quota-mode one decided as a shadow quota is over when it would
    /// deny).
    pub(super) fn over(&self) -> bool {
        !self.shadow
            && (self.never_fits && !matches!(self.state, State::Free)
                || match &self.state {
                    // (a look, `hits_addend: 0`, fits even a limit of 0)
                    State::Zero { .. } => self.hits > 0,
                    State::Refused => true,
                    State::Decided { decision, .. } => match &self.follows {
                        Some(follow) => follow.read(decision).over,
                        None => decision.denied() || (self.quota && decision.shadow_denied()),
                    },
                    _ => false,
                })
    }
}

/// Whether `slots` deny their request: a descriptor over its limit, or,
/// when the request has quota-mode descriptors, every one of them over.
pub(super) fn denies(slots: &[Slot<'_>]) -> bool {
    let limited = |s: &&Slot<'_>| s.quota && !s.shadow && !matches!(s.state, State::Free);
    slots.iter().any(|s| !s.quota && s.over())
        || (slots.iter().filter(limited).count() > 0
            && slots.iter().filter(limited).all(Slot::over))
}

pub(super) enum State {
    /// No limit to check.
    Free,
    /// `requests_per_unit: 0`.
    Zero { period: Duration },
    /// Not decided, the store failed, and the domain's policy denies.
    Refused,
    /// To decide with `limiter` for `key`, `cost` units.
    Pending {
        limiter: Arc<RateLimiter>,
        key: String,
        cost: u64,
        period: Duration,
    },
    /// Decided; `consumed`: its units were taken (the request was
    /// admitted and the cost is above 0).
    Decided {
        limiter: Arc<RateLimiter>,
        key: String,
        decision: Decision,
        consumed: bool,
        cost: u64,
        period: Duration,
    },
}

impl Core {
    /// The plan of descriptor `d` of a call to `domain` whose hits are
    /// `request_hits` unless it says.
    pub(super) fn plan<'a>(
        &'a self,
        domain: &str,
        d: &Descriptor<'_>,
        request_hits: u64,
    ) -> Slot<'a> {
        let cost = d.hits.unwrap_or(request_hits);
        let free = Slot {
            limit: None,
            unlimited: false,
            shadow: false,
            quota: false,
            strict: None,
            state: State::Free,
            rule: None,
            metric_key: None,
            hits: cost,
            never_fits: false,
            capacity: u64::MAX,
            charge: self.options.charge,
            too_large: false,
            follows: None,
            after: None,
        };
        let entries: Vec<(&str, &str)> = d.entries.iter().map(|(k, v)| (*k, v.as_ref())).collect();
        let Some(rules) = self.limits.get(domain) else {
            self.metrics.domain_not_found(domain);
            return free;
        };
        let matched = self.config.lookup_match(domain, &entries);
        // an override replaces the limit (matched or not), as in the Go
        // service: an aligned fixed window, never in shadow mode
        if let Some(o) = d.limit {
            let unit = o.unit;
            let limit = Some(ReportedLimit {
                name: "",
                requests_per_unit: o.requests_per_unit,
                unit,
            });
            let period = Duration::from_secs(unit.seconds());
            let metric_key = Some(override_metric_key(domain, &entries));
            if o.requests_per_unit == 0 {
                return Slot {
                    limit,
                    state: State::Zero { period },
                    metric_key,
                    shadow: self.options.shadow_mode,
                    ..free
                };
            }
            // Counted where the matched limit counts, as the Go service's
            // key (domain, entries, window) does: under the rule's prefix
            // and quota name when the rule is a fixed window aligned to the
            // epoch (the count is not in the key, so whatever the override
            // says, and with or without it, one counter per window length);
            // else apart, by the descriptor's entries.
            let (prefix, name, key) = match &matched {
                Some(m)
                    if m.rule.strategy.is_none()
                        && !m.rule.unlimited
                        && m.rule.requests_per_unit > 0 =>
                {
                    (
                        prefix_for("r", domain, &m.rule.full_key, &m.rule.id),
                        quota_name(domain, m.rule),
                        user_key(&entries, &m.shared_values),
                    )
                }
                _ => (
                    prefix_for("o", domain, domain, domain),
                    "override".to_owned(),
                    user_key(&entries, &[]),
                ),
            };
            // (it counts in its rule's key: charged as its rule says)
            let charge = matched
                .as_ref()
                .and_then(|m| m.rule.charge)
                .unwrap_or(self.options.charge);
            let id = OverrideId {
                prefix,
                name,
                requests_per_unit: o.requests_per_unit,
                unit,
                charge,
            };
            match self.overrides.limiter(&*self.make, &self.options, id) {
                Ok(limiter) => {
                    return Slot {
                        charge,
                        limit,
                        state: State::Pending {
                            limiter,
                            key,
                            cost,
                            period,
                        },
                        metric_key,
                        shadow: self.options.shadow_mode,
                        never_fits: !self.options.shadow_mode
                            && cost > u64::from(o.requests_per_unit),
                        capacity: u64::from(o.requests_per_unit),
                        ..free
                    };
                }
                Err(e) => {
                    if let Some(held) = self.logs.refused.to_log() {
                        tracing::warn!(domain = shown(domain), error = %e, held_back = held, "limit override ignored");
                    }
                }
            }
        }
        let Some(m) = matched else {
            return free;
        };
        let rule = m.rule;
        let Some((_, limit)) = rules.get(&rule.id) else {
            return free;
        };
        let (requests_per_unit, unit) = reported_rate(rule.requests_per_unit, rule.period_us);
        let reported = Some(ReportedLimit {
            name: &rule.name,
            requests_per_unit,
            unit,
        });
        let period = Duration::from_micros(rule.period_us);
        let state = match limit {
            Limit::Unlimited => {
                return Slot {
                    unlimited: true,
                    shadow: rule.shadow_mode || self.options.shadow_mode,
                    rule: Some(rule),
                    ..free
                };
            }
            Limit::Zero => State::Zero { period },
            Limit::Limited(limiter, _) => State::Pending {
                limiter: limiter.clone(),
                key: user_key(&entries, &m.shared_values),
                cost,
                period,
            },
        };
        let strict = match limit {
            Limit::Limited(_, strict) => strict.clone(),
            _ => None,
        };
        let shadow = rule.shadow_mode || self.options.shadow_mode;
        // (the capacity: the burst of a strategy that takes one, else the count)
        let capacity = rule.burst.unwrap_or(u64::from(rule.requests_per_unit));
        Slot {
            limit: reported,
            unlimited: false,
            shadow,
            quota: rule.quota_mode || self.options.quota_mode,
            strict,
            never_fits: !shadow && matches!(state, State::Pending { .. }) && cost > capacity,
            capacity,
            state,
            rule: Some(rule),
            metric_key: Some(m.metric_key),
            hits: cost,
            charge: rule.charge.unwrap_or(self.options.charge),
            too_large: false,
            follows: None,
            after: None,
        }
    }
}

/// Drops the limits that another matched limit `replaces`, as the Go
/// service does: the names come from every matched rule (an unlimited one
/// too); a replaced descriptor answers `OK` with no limit, and is not
/// counted. An unlimited descriptor is never replaced.
pub(super) fn apply_replaces(slots: &mut [Slot<'_>]) {
    let mut replaced: Vec<&str> = Vec::new();
    for slot in slots.iter() {
        if let Some(rule) = slot.rule {
            replaced.extend(rule.replaces.iter().map(String::as_str));
        }
    }
    if replaced.is_empty() {
        return;
    }
    for slot in slots.iter_mut() {
        let Some(rule) = slot.rule else { continue };
        if slot.unlimited || rule.name.is_empty() || !replaced.contains(&rule.name.as_str()) {
            continue;
        }
        tracing::debug!(name = %rule.name, "limit replaced");
        slot.limit = None;
        slot.shadow = false;
        slot.state = State::Free;
        slot.metric_key = None;
    }
}

/// The statistics key of a `limit` override: `<domain>.limit_override`
/// and the descriptor's keys, without their values (a client's values must
/// not make new series).
fn override_metric_key(domain: &str, entries: &[(&str, &str)]) -> String {
    let mut k = format!("{domain}.limit_override");
    for (key, _) in entries {
        k.push('.');
        k.push_str(key);
    }
    k
}

/// The `current_limit` of `count` per `period_us` as Envoy's protocol
/// writes a limit, a count per [`Unit`]: the count itself when the period
/// is one unit; else the rate rounded down in the longest unit not longer
/// than the period (100 per 5 minutes is 20 per minute, 100 per 90 s is 66
/// per minute); when that rounds to 0 or no unit is that short, the count
/// per the shortest unit not shorter than the period (1 per 2 hours is 1
/// per day, 10 per 500 ms is 10 per second). Never more than the limit
/// admits, in the reported window or the real one.
pub(crate) fn reported_rate(count: u32, period_us: u64) -> (u32, Unit) {
    let unit_us = |u: Unit| u.seconds() * 1_000_000;
    if let Some(u) = Unit::ALL.into_iter().find(|&u| unit_us(u) == period_us) {
        return (count, u);
    }
    let shorter = Unit::ALL
        .into_iter()
        .rev()
        .find(|&u| unit_us(u) < period_us)
        .map(|u| {
            let per = u128::from(count) * u128::from(unit_us(u)) / u128::from(period_us.max(1));
            (u32::try_from(per).unwrap_or(u32::MAX), u)
        })
        .filter(|&(per, _)| per > 0 || count == 0);
    shorter.unwrap_or_else(|| {
        let longer = Unit::ALL
            .into_iter()
            .find(|&u| unit_us(u) >= period_us)
            .unwrap_or(Unit::Year);
        (count, longer)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_period_is_reported_as_a_rate_no_higher_than_it_admits() {
        let s = 1_000_000;
        for (count, period_us, expected) in [
            (100, 60 * s, (100, Unit::Minute)),
            (100, 300 * s, (20, Unit::Minute)),
            (100, 90 * s, (66, Unit::Minute)),
            (100, 7_200 * s, (50, Unit::Hour)),
            (1, 7_200 * s, (1, Unit::Day)),
            (10, s / 2, (10, Unit::Second)),
            (0, 60 * s, (0, Unit::Minute)),
            (0, 90 * s, (0, Unit::Minute)),
            (u32::MAX, 2 * s, (u32::MAX / 2, Unit::Second)),
        ] {
            let (per, unit) = reported_rate(count, period_us);
            assert_eq!((per, unit), expected, "{count} per {period_us} µs");
            // never more than the limit admits in either window
            let unit_us = u128::from(unit.seconds()) * 1_000_000;
            assert!(
                u128::from(per) * u128::from(period_us) <= u128::from(count) * unit_us
                    || unit_us < u128::from(period_us),
                "{count} per {period_us} µs"
            );
        }
    }
}
