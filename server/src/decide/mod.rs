//! The decision, whatever the protocol: a [`Call`] of neutral descriptors
//! (their entries, hits and an optional `limit` override) is decided over
//! a loaded configuration and its limiters ([`Core`]) and answered with an
//! [`Answer`] per descriptor. No protocol type is in here: the rate limit
//! service's adapter (`rls`) translates Envoy's requests and
//! responses around it, and a second protocol would be a second adapter.
//!
//! What it decides (all or nothing, usage reports and what a denied call
//! records, `hits_subtrahend`, `quota_mode`, `replaces`, the failure
//! policy) is the `service` module's documentation.
//!
//! - [`plan`]: each descriptor's limit, key and hits, and `replaces`;
//! - [`run`]: the one joint decision of a call's limited descriptors;
//! - [`record`]: what a settle gives back and what a denied call records
//!   when the decision could not;
//! - [`outcome`]: the answer of each descriptor, and the statistics;
//! - [`logs`]: the throttled lines a client or an outage can repeat.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use tower_redis_ratelimit::error::StoreError;

use crate::config::{Config, OnStoreError, Unit};
use crate::limits::{Limits, Make, Overrides};
use crate::metrics::Metrics;
use crate::options::ServiceOptions;

pub(crate) mod logs;
mod outcome;
mod plan;
mod record;
mod run;

use self::logs::{Logs, shown};
use self::outcome::count;
use self::plan::{State, denies};
use self::run::Ran;

/// One call: a domain's descriptors, decided together.
#[derive(Debug)]
pub(crate) struct Call<'a> {
    /// The configuration domain.
    pub(crate) domain: &'a str,
    /// The descriptors, in the order their answers come back.
    pub(crate) descriptors: Vec<Descriptor<'a>>,
    /// The hits of each descriptor that gives none (0: 1, unless
    /// `hits_subtrahend` is set: a settle adds what it says).
    pub(crate) hits_addend: u32,
    /// Units given back before the call's hits are decided (a settle).
    pub(crate) hits_subtrahend: u32,
}

/// One descriptor of a [`Call`].
#[derive(Debug)]
pub(crate) struct Descriptor<'a> {
    /// Its entries, key and value (as text: a value that is not UTF-8 is
    /// escaped by the adapter so that distinct values stay distinct).
    pub(crate) entries: Vec<(&'a str, Cow<'a, str>)>,
    /// Its own hits, else the call's.
    pub(crate) hits: Option<u64>,
    /// A limit sent with it, which replaces the configured one.
    pub(crate) limit: Option<LimitOverride>,
}

/// A limit sent with a descriptor: `requests_per_unit` per `unit`, an
/// aligned fixed window.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LimitOverride {
    /// Its count.
    pub(crate) requests_per_unit: u32,
    /// Its period.
    pub(crate) unit: Unit,
}

/// A call's answer.
#[derive(Debug)]
pub(crate) struct Answer<'a> {
    /// Whether the call is denied (a descriptor over its limit, or every
    /// quota-mode one).
    pub(crate) denied: bool,
    /// Each descriptor's answer, in the call's order.
    pub(crate) descriptors: Vec<DescriptorAnswer<'a>>,
    /// Whole seconds until the call may pass (the longest wait of the
    /// descriptors over their limit; `None` when none has one, as a cost
    /// that never fits).
    pub(crate) retry_after: Option<u64>,
}

/// One descriptor's answer.
#[derive(Debug)]
pub(crate) struct DescriptorAnswer<'a> {
    /// Over its limit (reported so even when a quota-mode descriptor's
    /// call is let through).
    pub(crate) over: bool,
    /// The limit applied, as a count per unit; `None`: no limit.
    pub(crate) limit: Option<ReportedLimit<'a>>,
    /// What is left (`u32::MAX` for an unlimited descriptor).
    pub(crate) remaining: u32,
    /// The time until the limit is whole again.
    pub(crate) reset: Option<Duration>,
    /// In quota mode (over, it denies only beside every other).
    pub(crate) quota_mode: bool,
    /// Its `RateLimit-Policy` and `RateLimit` items, when
    /// [`ServiceOptions::headers`] is on and it is enforced.
    pub(crate) ietf: Option<IetfItem>,
}

/// A limit as the answer reports it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReportedLimit<'a> {
    /// The rule's `name` (empty for an override).
    pub(crate) name: &'a str,
    /// Its count per [`unit`](Self::unit), never more than it admits.
    pub(crate) requests_per_unit: u32,
    /// Its unit.
    pub(crate) unit: Unit,
}

/// One descriptor's items of the IETF headers.
#[derive(Debug)]
pub(crate) struct IetfItem {
    /// Its quota's name.
    pub(crate) name: String,
    /// `q`: its limit.
    pub(crate) quota: u64,
    /// `w`: its window, whole seconds.
    pub(crate) window: u64,
    /// `r`: what is left.
    pub(crate) remaining: u64,
    /// `t`: seconds until whole again, or the wait of a denial.
    pub(crate) t: u64,
}

/// Why a call was not answered.
#[derive(Debug)]
#[non_exhaustive]
pub enum CallError {
    /// The request is past a bound of [`ServiceOptions`] (answered
    /// `INVALID_ARGUMENT`; the store was not asked).
    Invalid(String),
    /// The store failed or timed out, and the domain's failure policy is
    /// [`OnStoreError::Unavailable`] (answered `UNAVAILABLE`).
    Store(StoreError),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Invalid(why) => f.write_str(why),
            CallError::Store(e) => write!(f, "rate limit store: {e}"),
        }
    }
}

impl std::error::Error for CallError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CallError::Invalid(_) => None,
            CallError::Store(e) => Some(e),
        }
    }
}

/// One configuration and its limiters: a call decides on the one it
/// loaded when it started.
pub(crate) struct Core {
    pub(crate) config: Config,
    pub(crate) limits: Limits,
    pub(crate) make: Arc<Make>,
    pub(crate) overrides: Arc<Overrides>,
    pub(crate) options: ServiceOptions,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) logs: Arc<Logs>,
}

impl Core {
    /// Refuses a call of `descriptors` descriptors (`entries`: how many
    /// entries each has) past [`ServiceOptions::max_descriptors`] or
    /// [`ServiceOptions::max_entries`], before anything is planned (or
    /// even translated); a refusal is logged, one line a second at most.
    pub(crate) fn check_bounds(
        &self,
        domain: &str,
        descriptors: usize,
        entries: impl IntoIterator<Item = usize>,
    ) -> Result<(), CallError> {
        let refused = |e: CallError| {
            if let Some(held) = self.logs.refused.to_log() {
                tracing::warn!(
                    domain = shown(domain),
                    held_back = held,
                    "request refused: {e}"
                );
            }
            Err(e)
        };
        let max = self.options.max_descriptors;
        if descriptors > max {
            return refused(CallError::Invalid(format!(
                "{descriptors} descriptors in one request: at most {max} (--max-descriptors)"
            )));
        }
        let max = self.options.max_entries;
        if let Some((i, n)) = entries.into_iter().enumerate().find(|&(_, n)| n > max) {
            return refused(CallError::Invalid(format!(
                "descriptor {i} has {n} entries: at most {max} (--max-entries)"
            )));
        }
        Ok(())
    }

    /// Answers `call` (within the bounds: [`check_bounds`](Self::check_bounds)):
    /// plans, decides, counts, and applies the domain's failure policy if
    /// the store failed; a store error is logged, one line a second at most.
    pub(crate) async fn answer(&self, call: &Call<'_>) -> Result<Answer<'_>, CallError> {
        self.decide(call).await.map_err(|e| {
            if let Some(held) = self.logs.failed.to_log() {
                tracing::error!(domain = shown(call.domain), error = %e, held_back = held, "store error (one line a second at most)");
            }
            CallError::Store(e)
        })
    }

    /// Answers `call`: plans, decides, counts, and applies the domain's
    /// failure policy if the store failed.
    async fn decide(&self, call: &Call<'_>) -> Result<Answer<'_>, StoreError> {
        let policy = self
            .config
            .failure_policy(call.domain)
            .unwrap_or(self.options.on_store_error);
        let Ran { mut slots, failed } = self.run(call).await;
        count(&self.metrics, call.domain, &slots);
        let Some(e) = failed else {
            use std::sync::atomic::Ordering::Relaxed;
            if self.logs.failing.load(Relaxed)
                && slots
                    .iter()
                    .any(|s| matches!(s.state, State::Decided { .. }))
                && self.logs.failing.swap(false, Relaxed)
            {
                tracing::info!("the store answers again");
            }
            let denied = denies(&slots);
            return Ok(self.respond(&slots, denied));
        };
        self.metrics.store_error(call.domain);
        self.logs
            .failing
            .store(true, std::sync::atomic::Ordering::Relaxed);
        match policy {
            OnStoreError::Unavailable => return Err(e),
            OnStoreError::Allow => {
                if let Some(held) = self.logs.policy.to_log() {
                    tracing::warn!(domain = shown(call.domain), error = %e, held_back = held, "store error: allowing the undecided descriptors (failure_policy allow)");
                }
                for slot in &mut slots {
                    if matches!(slot.state, State::Pending { .. }) {
                        slot.limit = None;
                        slot.state = State::Free;
                    }
                }
            }
            OnStoreError::Deny => {
                if let Some(held) = self.logs.policy.to_log() {
                    tracing::warn!(domain = shown(call.domain), error = %e, held_back = held, "store error: denying (failure_policy deny)");
                }
                for slot in &mut slots {
                    if matches!(slot.state, State::Pending { .. }) && !slot.shadow {
                        slot.state = State::Refused;
                    }
                }
            }
        }
        let denied = denies(&slots);
        Ok(self.respond(&slots, denied))
    }
}

/// Microseconds since the epoch, by the system clock (0 before it).
pub(crate) fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// `d` in whole seconds, rounded up.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}
