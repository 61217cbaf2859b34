//! Settling a request's reservation after its response: refunds by response
//! ([`RateLimitLayer::skip_failed`](crate::RateLimitLayer::skip_failed),
//! [`refund_when`](crate::RateLimitLayer::refund_when)) and costs known only
//! from the response ([`ResponseCost`], [`UsageReporter`]).
//!
//! A layer with any of these admits with
//! [`RateLimiter::reserve_n`](crate::RateLimiter::reserve_n) instead of
//! `check_n`; the admitted request's [`SettleGuard`] rides along with the
//! response (in `future.rs`'s `Extra`, then in the body's lease guard) and
//! settles once: when the body ends, or (spawned on the Tokio runtime) when
//! it is dropped.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use http::HeaderName;
use http::request::Parts;

use super::hooks::{CostFn, ExtensionCostFn, RefundFn};
use super::stats::Counters;
use crate::limiter::RateLimiter;
use crate::settle::Reservation;

/// The settle options of a layer (present when any is set).
#[derive(Clone, Default)]
pub(super) struct SettleConfig {
    /// Responses not counted (refunded): any of these says so.
    pub(super) refund: Vec<Arc<RefundFn>>,
    /// Whether a request whose response future is dropped before the
    /// response (the client went away) is refunded (default: counted).
    pub(super) refund_on_disconnect: bool,
    pub(super) cost: Option<ResponseCost>,
}

impl SettleConfig {
    /// The estimate to reserve for a request (`None`: the layer's cost).
    pub(super) fn estimate(&self, parts: &Parts) -> Option<u64> {
        let cost = self.cost.as_ref()?;
        cost.estimate.as_ref().map(|f| f(parts))
    }
}

/// Where the real cost of a request comes from, for a layer with
/// [`cost_from_response`](crate::RateLimitLayer::cost_from_response):
/// usage-based limits such as tokens per minute of a language model.
///
/// The layer reserves the request's estimate (the [`estimate`](Self::estimate)
/// closure, else the layer's [`cost`](crate::RateLimitLayer::cost), else 1)
/// and settles to the real cost, which is, first found:
///
/// 1. the response [`header`](Self::header), a decimal integer (the header
///    is left on the response);
/// 2. the response [`extension`](Self::extension) the handler set;
/// 3. what the handler reported through the [`UsageReporter`] in its
///    request's extensions (for streaming bodies), summed when the body ends
///    or is dropped;
/// 4. else the estimate: nothing to settle.
///
/// A body dropped before its end (the client went away mid-stream) settles
/// what was reported so far, or keeps the estimate if nothing was.
///
/// What is reported is charged whatever the estimate was, past the limit
/// if need be (a debt): an estimate of 0 settled to 500 charges 500. The
/// layer reserves at least 1 (an estimate of 0 would be admitted as a peek
/// even with nothing left), and a reported 0 gives that unit back. Bound the
/// estimate on the server's side, never the client's unchecked word
/// (`examples/token_budget.rs`). A request a shadow layer would have denied
/// is not settled.
#[derive(Clone, Default)]
pub struct ResponseCost {
    estimate: Option<Arc<CostFn>>,
    header: Option<HeaderName>,
    extension: Option<Arc<ExtensionCostFn>>,
}

impl ResponseCost {
    /// The real cost from the [`UsageReporter`] only (and the estimate
    /// reserved: the layer's cost).
    pub fn new() -> Self {
        Self::default()
    }

    /// The estimate reserved for a request, from its head (default: the
    /// layer's [`cost`](crate::RateLimitLayer::cost), 1 unless set). An
    /// estimate of 0 reserves 1, as a cost of 0 does: a request of usage 0
    /// is then given its unit back when it settles.
    pub fn estimate<F>(mut self, estimate: F) -> Self
    where
        F: Fn(&Parts) -> u64 + Send + Sync + 'static,
    {
        self.estimate = Some(Arc::new(estimate));
        self
    }

    /// The real cost from this response header (say `x-tokens-used`); a
    /// value that is not a decimal integer is ignored, and a header given
    /// more than once is charged its largest count.
    pub fn header(mut self, name: HeaderName) -> Self {
        self.header = Some(name);
        self
    }

    /// The real cost from a response extension of type `T` the handler set.
    pub fn extension<T, F>(mut self, cost: F) -> Self
    where
        T: Send + Sync + 'static,
        F: Fn(&T) -> u64 + Send + Sync + 'static,
    {
        self.extension = Some(Arc::new(move |ext: &http::Extensions| {
            ext.get::<T>().map(&cost)
        }));
        self
    }

    /// The real cost the response head tells, if it does.
    fn of_head(&self, head: &http::response::Parts) -> Option<u64> {
        // (a header given more than once is charged its largest count: an
        // upstream's `0` before the real usage must not make it free)
        let from_header = self.header.as_ref().and_then(|name| {
            head.headers
                .get_all(name)
                .iter()
                .filter_map(|value| {
                    let value = value.to_str().ok()?.trim();
                    // a count too large for a u64 is charged in full (capped),
                    // not dropped for the estimate; anything else not a count
                    // is ignored
                    match value.parse::<u64>() {
                        Ok(n) => Some(n),
                        Err(_)
                            if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) =>
                        {
                            Some(u64::MAX)
                        }
                        Err(_) => None,
                    }
                })
                .max()
        });
        from_header.or_else(|| self.extension.as_ref().and_then(|f| f(&head.extensions)))
    }
}

impl fmt::Debug for ResponseCost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseCost")
            .field("estimate", &self.estimate.is_some())
            .field("header", &self.header)
            .field("extension", &self.extension.is_some())
            .finish()
    }
}

/// Reports the real cost of a request while its response streams: in the
/// request extensions of a layer with
/// [`cost_from_response`](crate::RateLimitLayer::cost_from_response)
/// (`Extension<UsageReporter>` in axum). Cheap to clone; every clone adds to
/// the same total, settled when the response body ends or is dropped.
#[derive(Clone, Default)]
pub struct UsageReporter(Arc<Usage>);

#[derive(Default)]
struct Usage {
    total: AtomicU64,
    reported: AtomicBool,
}

impl UsageReporter {
    /// Adds `n` units (say the tokens of one streamed chunk) to the cost.
    pub fn add(&self, n: u64) {
        self.0.reported.store(true, Ordering::Relaxed);
        let _ = self
            .0
            .total
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_add(n))
            });
    }

    /// The units reported so far.
    pub fn total(&self) -> u64 {
        self.0.total.load(Ordering::Relaxed)
    }

    /// What was reported, if anything was (a report of 0 counts).
    fn reported(&self) -> Option<u64> {
        self.0
            .reported
            .load(Ordering::Relaxed)
            .then(|| self.total())
    }
}

impl fmt::Debug for UsageReporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UsageReporter")
            .field("total", &self.total())
            .field("reported", &self.0.reported.load(Ordering::Relaxed))
            .finish()
    }
}

/// What a reservation settles to.
enum Actual {
    /// Known: units.
    Fixed(u64),
    /// What the reporter reported, else the reservation (nothing to settle).
    Reported(UsageReporter),
}

/// An admitted request's reservation, settled once: by [`settle`](Self::settle)
/// or, when dropped, in a task spawned on the current Tokio runtime.
pub(super) struct SettleGuard {
    limiter: RateLimiter,
    reservation: Option<Reservation>,
    actual: Actual,
    config: Arc<SettleConfig>,
    counters: Arc<Counters>,
}

impl SettleGuard {
    /// The guard of an admitted request's `reservation`; until its response
    /// head is known it settles as a disconnect does. `reporter`: the one
    /// in the request's extensions (a layer with a response cost).
    pub(super) fn new(
        limiter: RateLimiter,
        reservation: Reservation,
        config: Arc<SettleConfig>,
        counters: Arc<Counters>,
        reporter: Option<UsageReporter>,
    ) -> Self {
        let actual = match (config.refund_on_disconnect, reporter) {
            (true, _) => Actual::Fixed(0),
            (false, Some(reporter)) => Actual::Reported(reporter),
            (false, None) => Actual::Fixed(reservation.units()),
        };
        Self {
            limiter,
            reservation: Some(reservation),
            actual,
            config,
            counters,
        }
    }

    /// The limiter of the reservation.
    pub(super) fn limiter(&self) -> &RateLimiter {
        &self.limiter
    }

    /// The response head is known: what to settle to. `None`: nothing to
    /// settle (the reservation stands as it is).
    pub(super) fn at_head(mut self, head: &http::response::Parts) -> Option<Self> {
        let units = match self.reservation.as_ref() {
            Some(r) if r.decision().allowed() => r.units(),
            // (a shadow layer's denied request: not charged, as an
            // enforcing layer would not have served it)
            _ => {
                self.reservation = None;
                return None;
            }
        };
        if self.config.refund.iter().any(|refund| refund(head)) {
            self.actual = Actual::Fixed(0);
            return Some(self);
        }
        let known = self.config.cost.as_ref().and_then(|c| c.of_head(head));
        self.actual = match (
            known,
            std::mem::replace(&mut self.actual, Actual::Fixed(units)),
        ) {
            (Some(units), _) => Actual::Fixed(units),
            (None, Actual::Reported(reporter)) => Actual::Reported(reporter),
            (None, Actual::Fixed(_)) => Actual::Fixed(units),
        };
        if matches!(self.actual, Actual::Fixed(n) if n == units) {
            self.reservation = None;
            return None;
        }
        Some(self)
    }

    /// The settle as a future (none when there is nothing to settle); a
    /// failure is logged and counted, never returned.
    pub(super) fn settle(mut self) -> Option<SettleFuture> {
        self.take()
    }

    fn take(&mut self) -> Option<SettleFuture> {
        let reservation = self.reservation.take()?;
        if !reservation.decision().allowed() {
            return None;
        }
        // (an estimate of 0 settles too: what was used is charged)
        let units = reservation.units();
        let actual = match &self.actual {
            Actual::Fixed(n) => *n,
            Actual::Reported(reporter) => reporter.reported().unwrap_or(units),
        };
        if actual == units {
            return None;
        }
        let limiter = self.limiter.clone();
        let counters = self.counters.clone();
        Some(Box::pin(async move {
            if let Err(_error) = limiter.settle(&reservation, actual).await {
                Counters::bump(&counters.settle_errors);
                event!(warn, error = %_error, reserved = units, actual, "could not settle a reservation; the reserved units stay counted");
            }
        }))
    }
}

pub(super) type SettleFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

impl Drop for SettleGuard {
    fn drop(&mut self) {
        let Some(future) = self.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(future);
            }
            Err(_) => {
                Counters::bump(&self.counters.settle_errors);
                event!(
                    warn,
                    "reservation dropped outside a Tokio runtime; the reserved units stay counted"
                );
            }
        }
    }
}

impl fmt::Debug for SettleGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SettleGuard")
            .field("reservation", &self.reservation)
            .finish_non_exhaustive()
    }
}
