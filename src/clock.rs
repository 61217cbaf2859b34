//! [`Clock`]: where decisions take their time from.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The time source of a [`RateLimiter`](crate::RateLimiter).
///
/// By default ([`Clock::Store`]) time comes from the store: Redis's `TIME`
/// (so app servers with skewed clocks still agree) or, for
/// [`MemoryStore`](crate::MemoryStore), a monotonic tokio `Instant` (which
/// `tokio::time::pause` controls in tests). A [`ManualClock`] passes an exact
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
/// ```
/// use std::time::Duration;
/// use tower_redis_ratelimit::ManualClock;
///
/// let clock = ManualClock::new(Duration::from_secs(1_000));
/// clock.advance(Duration::from_millis(1_500));
/// assert_eq!(clock.now(), Duration::from_millis(1_001_500));
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock reading `start` (time since an arbitrary epoch, microsecond resolution).
    /// Start well above zero, e.g. at one hour, so windows never begin before time zero.
    pub fn new(start: Duration) -> Self {
        Self(Arc::new(AtomicU64::new(duration_us(start))))
    }

    /// The current reading.
    pub fn now(&self) -> Duration {
        Duration::from_micros(self.now_us())
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(duration_us(by), Ordering::SeqCst);
    }

    /// Sets the clock (it may go backwards: the strategies handle that).
    pub fn set(&self, to: Duration) {
        self.0.store(duration_us(to), Ordering::SeqCst);
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
