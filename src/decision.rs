//! The parts of a [`Decision`]: each quota's [`QuotaDecision`],
//! and the [`Lease`] a concurrency quota hands out.

use std::sync::Arc;
use std::time::Duration;

// `Decision` is public at the crate root only (one path per item).
pub(crate) mod root {
    use std::sync::Arc;
    use std::time::Duration;

    use super::{Lease, QuotaDecision};

    /// The answer to one [`RateLimiter::check`](crate::RateLimiter::check).
    ///
    /// `limit`, `remaining`, `reset_after` and `quota` describe the quota that
    /// bound the decision: when denied, the denying quota that frees up last;
    /// when allowed, the one with the fewest requests left. Every quota's own
    /// state is in [`quotas`](Self::quotas).
    #[derive(Debug, Clone, PartialEq, Eq)]
    #[non_exhaustive]
    pub struct Decision {
        /// Whether the request may proceed (its cost has been consumed).
        pub allowed: bool,
        /// The binding quota's limit (its burst for bucket strategies).
        pub limit: u64,
        /// Requests left in the binding quota after this one.
        pub remaining: u64,
        /// Time until the binding quota is back to its full limit if no more requests come.
        pub reset_after: Duration,
        /// When denied: the time after which the same request would be allowed.
        /// `None` when allowed, and when the cost can never fit (cost > capacity).
        pub retry_after: Option<Duration>,
        /// The binding quota's name.
        pub quota: Arc<str>,
        /// For [`LeakyBucket`](crate::strategy::Strategy::LeakyBucket): how long to wait
        /// before serving the admitted request (its slot in the queue).
        pub delay: Option<Duration>,
        /// Every quota's state, in the limiter's order.
        pub quotas: Vec<QuotaDecision>,
        /// For an allowed request under a [`Concurrency`](crate::strategy::Strategy::Concurrency)
        /// quota: the lease to hand back with [`RateLimiter::release`](crate::RateLimiter::release).
        pub lease: Option<Lease>,
    }
}

pub(crate) use self::root::Decision;

/// One quota's part of a [`Decision`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QuotaDecision {
    /// The quota's name.
    pub name: Arc<str>,
    /// Whether this quota alone would allow the request.
    pub allowed: bool,
    /// The quota's limit (burst for bucket strategies).
    pub limit: u64,
    /// The quota's window (rate period; lease timeout for concurrency).
    pub window: Duration,
    /// Requests left (after this one, if the whole decision allowed it).
    pub remaining: u64,
    /// Time until the quota is back to its full limit.
    pub reset_after: Duration,
    /// Time until this quota would allow the request; `None` if it allows it now or never can.
    pub retry_after: Option<Duration>,
}

/// A held slot of a [`Concurrency`](crate::strategy::Strategy::Concurrency) quota.
///
/// Give it back with [`RateLimiter::release`](crate::RateLimiter::release) when
/// the work is done; if it is never released (the process died), it expires
/// after the quota's lease timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub(crate) base: String,
    pub(crate) keys: Vec<String>,
    pub(crate) member: String,
    pub(crate) cost: u64,
}

impl Lease {
    /// The unique lease id.
    pub fn id(&self) -> &str {
        &self.member
    }

    /// The sorted-set members this lease holds in each key.
    pub(crate) fn members(&self) -> impl Iterator<Item = String> + '_ {
        (0..self.cost).map(move |i| format!("{}.{i}", self.member))
    }
}
