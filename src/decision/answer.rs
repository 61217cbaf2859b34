//! [`Decision`]: the answer to one check, public at the crate root only
//! (re-exported there; its parts are in [`decision`](crate::decision)).

use std::fmt;
use std::time::Duration;

use super::{Interned, Lease, Part, Parts, QuotaDecision, QuotaName, Quotas, Templates, micros};

/// The answer to one [`RateLimiter::check`](crate::RateLimiter::check).
///
/// [`limit`](Self::limit), [`remaining`](Self::remaining),
/// [`reset_after`](Self::reset_after) and [`quota`](Self::quota) describe
/// the quota that bound the decision: when denied, the denying quota that
/// frees up last; when allowed, the one with the fewest requests left.
/// Only enforced quotas bind (a [shadow](crate::Quota::shadow) quota
/// binds only in a limiter whose quotas are all shadow). Every quota's
/// own state is in [`quotas`](Self::quotas).
///
/// A denial that [recorded](Self::recorded) its cost anyway (a limiter
/// built with [`on_denial`](crate::limiter::RateLimiterBuilder::on_denial))
/// shows the state after the recording, and its
/// [`retry_after`](Self::retry_after) is when that cost would fit again.
///
/// A decision is small (about a hundred bytes) and computes its durations
/// when asked: a limiter with one or two quotas answers without
/// allocating, and cloning such a decision (without a lease) is a copy
/// (a reference count's increment for a limiter whose configuration was
/// built once the process's [interned names](QuotaName) were full).
#[derive(Clone, PartialEq, Eq)]
pub struct Decision {
    pub(crate) allowed: bool,
    /// The binding quota's index.
    pub(crate) binding: u32,
    /// The admitted request's wait in microseconds (0: none).
    pub(crate) delay_us: u64,
    /// A shadow layer or plan let this denial through (the middleware
    /// sets it): [`shadow_denied`](Self::shadow_denied).
    pub(crate) shadow_let_through: bool,
    /// A denial that recorded its cost ([`recorded`](Self::recorded)).
    pub(crate) recorded: bool,
    pub(crate) parts: Parts,
    pub(crate) templates: Interned<Templates>,
    pub(crate) lease: Option<Lease>,
}

impl Decision {
    /// Whether the request may proceed (its cost has been consumed).
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// Whether the request was denied: `!allowed()`.
    pub fn denied(&self) -> bool {
        !self.allowed
    }

    /// Whether this denied request's cost was recorded anyway, past the
    /// limit, in the same atomic store call (a limiter built with
    /// [`on_denial`](crate::limiter::RateLimiterBuilder::on_denial) other than
    /// [`OnDenial::Nothing`](crate::limiter::OnDenial::Nothing), and at
    /// least one quota recorded on). The decision then shows the state
    /// after the recording: [`remaining`](Self::remaining) and
    /// [`reset_after`](Self::reset_after) of that state, and
    /// [`retry_after`](Self::retry_after) when the cost would fit again
    /// (`None` if it never can). Always false for an allowed request, a
    /// peek, and a denial that recorded nothing (a block, only concurrency
    /// quotas denying).
    pub fn recorded(&self) -> bool {
        self.recorded
    }

    /// Whether shadow mode would have denied the request: a
    /// [shadow](crate::Quota::shadow) quota would have denied this
    /// allowed request (that quota consumed nothing; its own state is in
    /// [`quotas`](Self::quotas)), or a shadow
    /// [layer](crate::RateLimitLayer::shadow) or
    /// [plan](crate::plans::Plan::shadow) let this denied request through
    /// ([`allowed`](Self::allowed) is then false: the store denied it).
    /// True for every decision inside a
    /// [`RateLimitOutcome::ShadowDenied`](crate::middleware::RateLimitOutcome::ShadowDenied);
    /// false for any other denied decision, and for a limiter without
    /// shadow quotas outside a shadow layer.
    pub fn shadow_denied(&self) -> bool {
        self.shadow_let_through
            || (self.allowed
                && self
                    .parts
                    .as_slice()
                    .iter()
                    .zip(self.templates.iter())
                    .any(|(p, t)| t.shadow && !p.allowed))
    }

    fn binding(&self) -> (&Part, &super::Template) {
        let i = self.binding as usize;
        (&self.parts.as_slice()[i], &self.templates[i])
    }

    /// The binding quota's limit (its burst for bucket strategies).
    pub fn limit(&self) -> u64 {
        self.binding().1.limit
    }

    /// Requests left in the binding quota after this one.
    pub fn remaining(&self) -> u64 {
        self.binding().0.remaining
    }

    /// Time until the binding quota is back to its full limit if no more
    /// requests come.
    pub fn reset_after(&self) -> Duration {
        micros(self.binding().0.reset_us)
    }

    /// When denied: the time after which the same request would be
    /// allowed. `None` when allowed, and when the cost can never fit
    /// (cost > capacity).
    pub fn retry_after(&self) -> Option<Duration> {
        if self.allowed {
            None
        } else {
            self.binding().0.retry()
        }
    }

    /// The binding quota's index, in the limiter's order.
    pub(crate) fn binding_index(&self) -> usize {
        self.binding as usize
    }

    /// The binding quota's window.
    pub(crate) fn binding_window(&self) -> Duration {
        self.binding().1.window
    }

    /// The binding quota's name.
    pub fn quota(&self) -> QuotaName {
        self.binding().1.name.clone()
    }

    /// For [`LeakyBucket`](crate::strategy::Strategy::LeakyBucket): how
    /// long to wait before serving the admitted request (its slot in the
    /// queue).
    pub fn delay(&self) -> Option<Duration> {
        (self.allowed && self.delay_us > 0).then(|| micros(self.delay_us))
    }

    /// Every quota's state, in the limiter's order.
    pub fn quotas(&self) -> Quotas<'_> {
        Quotas {
            parts: self.parts.as_slice().iter(),
            templates: self.templates.iter(),
        }
    }

    /// The state of the quota named `name`, if the limiter has one.
    pub fn quota_named(&self, name: &str) -> Option<QuotaDecision> {
        self.quotas().find(|q| q.name() == name)
    }

    /// For an allowed request under a
    /// [`Concurrency`](crate::strategy::Strategy::Concurrency) quota: the
    /// lease to hand back with
    /// [`RateLimiter::release`](crate::RateLimiter::release).
    pub fn lease(&self) -> Option<&Lease> {
        self.lease.as_ref()
    }

    /// The same decision `elapsed_us` later (a cached denial): every
    /// time counts down by it, and the binding quota's retry is `left_us`.
    pub(crate) fn age(&mut self, elapsed_us: u64, left_us: u64) {
        let parts: Parts = self
            .parts
            .as_slice()
            .iter()
            .map(|p| Part {
                reset_us: p.reset_us.saturating_sub(elapsed_us),
                retry_us: match p.retry_us {
                    super::NEVER => super::NEVER,
                    r => r.saturating_sub(elapsed_us),
                },
                ..*p
            })
            .collect();
        self.parts = parts;
        if let Some(b) = self.parts.as_mut_slice().get_mut(self.binding as usize) {
            b.retry_us = left_us;
        }
    }

    /// The [`lease`](Self::lease), owned.
    pub fn into_lease(self) -> Option<Lease> {
        self.lease
    }

    /// Takes the [`lease`](Self::lease) out of the decision (to release
    /// it later, or hand it to a task).
    pub fn take_lease(&mut self) -> Option<Lease> {
        self.lease.take()
    }
}

impl fmt::Debug for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decision")
            .field("allowed", &self.allowed)
            .field("shadow_denied", &self.shadow_denied())
            .field("recorded", &self.recorded)
            .field("limit", &self.limit())
            .field("remaining", &self.remaining())
            .field("reset_after", &self.reset_after())
            .field("retry_after", &self.retry_after())
            .field("quota", &self.quota())
            .field("delay", &self.delay())
            .field("quotas", &self.quotas().collect::<Vec<_>>())
            .field("lease", &self.lease)
            .finish()
    }
}
