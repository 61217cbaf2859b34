//! [`Clock`]: where decisions take their time from.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The time source of a [`RateLimiter`](crate::RateLimiter).
///
/// By default ([`Clock::Store`]) time comes from the store: Redis's `TIME`
/// (so app servers with skewed clocks still agree) or, for
/// [`MemoryStore`](crate::MemoryStore), the CPU's time-stamp counter (which
/// `tokio::time::pause` does not stop). A [`ManualClock`] passes an exact
/// time with every call instead, for tests and simulations.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub enum Clock {
    /// The store's own clock.
    #[default]
    Store,
    /// A clock moved by hand.
    Manual(ManualClock),
}

impl Clock {
    /// The manual time in microseconds, if any.
    pub(crate) fn manual_now_us(&self) -> Option<u64> {
        match self {
            Clock::Store => None,
            Clock::Manual(m) => Some(m.now_us()),
        }
    }
}

/// A clock that only moves when told to. Clones share the same time.
///
/// Any reading from zero to [`ManualClock::MAX`] is a manual time: zero is
/// not special (the store's own clock is [`Clock::Store`], never a magic
/// reading). Readings saturate at `MAX`, so that every time the strategies
/// compute stays exact in Redis's Lua numbers (integers below 2^53).
///
/// ```
/// use std::time::Duration;
/// use tower_redis_ratelimit::clock::ManualClock;
///
/// let clock = ManualClock::new(Duration::from_secs(1_000));
/// clock.advance(Duration::from_millis(1_500));
/// assert_eq!(clock.now(), Duration::from_millis(1_001_500));
///
/// // saturates rather than leave exact arithmetic
/// assert_eq!(ManualClock::new(Duration::MAX).now(), ManualClock::MAX);
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicU64>);

/// [`ManualClock::MAX`] in microseconds: 2^53 - 2^49 (about 267 years), which
/// leaves room for every offset a quota adds (periods of at most 366 days,
/// bursts of at most 4 years, twice) below 2^53.
const MAX_US: u64 = (1 << 53) - (1 << 49);

impl ManualClock {
    /// The latest reading a manual clock takes (about 267 years after its
    /// epoch); [`new`](Self::new), [`set`](Self::set) and
    /// [`advance`](Self::advance) saturate at it.
    pub const MAX: Duration = Duration::from_micros(MAX_US);

    /// A clock reading `start` (time since an arbitrary epoch, microsecond
    /// resolution; at most [`MAX`](Self::MAX)). Zero is a valid start.
    pub fn new(start: Duration) -> Self {
        Self(Arc::new(AtomicU64::new(clamp_us(start))))
    }

    /// What tells this clock (and its clones) from every other manual clock
    /// while it lives: the address of the reading they share.
    pub(crate) fn id(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    /// The current reading.
    pub fn now(&self) -> Duration {
        Duration::from_micros(self.now_us())
    }

    /// Moves the clock forward (saturating at [`MAX`](Self::MAX)).
    pub fn advance(&self, by: Duration) {
        let by = clamp_us(by);
        let _ = self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(by).min(MAX_US))
            });
    }

    /// Sets the clock (it may go backwards: the strategies handle that;
    /// at most [`MAX`](Self::MAX)).
    pub fn set(&self, to: Duration) {
        self.0.store(clamp_us(to), Ordering::SeqCst);
    }

    pub(crate) fn now_us(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl From<ManualClock> for Clock {
    fn from(m: ManualClock) -> Self {
        Clock::Manual(m)
    }
}

/// A duration in whole microseconds, saturating.
pub(crate) fn duration_us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A manual clock reading in whole microseconds, saturating at [`ManualClock::MAX`].
fn clamp_us(d: Duration) -> u64 {
    duration_us(d).min(MAX_US)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_saturate_at_max() {
        let c = ManualClock::new(Duration::ZERO);
        assert_eq!(c.now(), Duration::ZERO);
        c.advance(Duration::MAX);
        assert_eq!(c.now(), ManualClock::MAX);
        c.advance(Duration::from_secs(1));
        assert_eq!(c.now(), ManualClock::MAX);
        c.set(Duration::from_micros(1));
        assert_eq!(c.now(), Duration::from_micros(1));
        c.set(Duration::MAX);
        assert_eq!(c.now(), ManualClock::MAX);
        assert!(ManualClock::MAX.as_micros() < 1 << 53);
    }
}
