//! [`Clock`]: where decisions take their time from.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// The time source of a [`RateLimiter`](crate::RateLimiter).
///
/// By default ([`Clock::Store`]) time comes from the store: Redis's `TIME`
/// (so app servers with skewed clocks still agree) or, for
/// [`MemoryStore`](crate::MemoryStore), the CPU's time-stamp counter (which
/// `tokio::time::pause` does not stop). [`Clock::Caller`] sends this
/// process's wall clock with every call instead, for servers that refuse or
/// break `TIME` in scripts. A [`ManualClock`] passes an exact time with every
/// call, for tests and simulations.
///
/// [`RateLimiter::verify`](crate::RateLimiter::verify) tells when a Redis
/// server needs [`Clock::Caller`]; the [failure-modes
/// chapter](crate::guide::failure_modes#clock-skew-under-the-callers-clock)
/// gives what clock skew between instances costs then.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub enum Clock {
    /// The store's own clock.
    #[default]
    Store,
    /// The caller's clock: this process's wall clock ([`SystemTime`], in
    /// microseconds since the Unix epoch, saturating at
    /// [`ManualClock::MAX`]) read at each call and sent with it, exactly as
    /// a [`ManualClock`] reading is sent.
    ///
    /// For servers where a script cannot read `TIME`: AWS ElastiCache
    /// Serverless refuses it, Dragonfly answers 0, an ACL user without
    /// `+time` is refused it. Instances then decide by their own clocks, so
    /// keep them synchronised (NTP): a skew between instances lets a few
    /// more requests through, bounded per strategy in the [failure-modes
    /// chapter](crate::guide::failure_modes#clock-skew-under-the-callers-clock).
    /// On a [`MemoryStore`](crate::MemoryStore) it reads the system clock
    /// too (rather than the store's counter clock).
    ///
    /// ```
    /// use tower_redis_ratelimit::{clock::Clock, MemoryStore, Quota, Rate, RateLimiter};
    ///
    /// let limiter = RateLimiter::builder()
    ///     .store(MemoryStore::new())
    ///     .quota(Quota::gcra(Rate::per_second(10)))
    ///     .clock(Clock::Caller)
    ///     .build()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    Caller,
    /// A clock moved by hand.
    Manual(ManualClock),
}

impl Clock {
    /// The time sent with each call in microseconds (a manual clock's or the
    /// caller's), if any; `None`: the store's clock.
    pub(crate) fn sent_now_us(&self) -> Option<u64> {
        match self {
            Clock::Store => None,
            Clock::Caller => Some(caller_now_us()),
            Clock::Manual(m) => Some(m.now_us()),
        }
    }
}

/// The caller's clock ([`Clock::Caller`]): Unix time in microseconds from
/// [`SystemTime`] (0 before the epoch), saturating at [`ManualClock::MAX`].
pub(crate) fn caller_now_us() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, clamp_us)
}

/// A clock that only moves when told to. Clones share the same time.
///
/// Any reading from zero to [`ManualClock::MAX`] is a manual time: zero is
/// not special (the store's own clock is [`Clock::Store`], never a magic
/// reading). Readings saturate at `MAX`, so that every time the strategies
/// compute stays exact in Redis's Lua numbers (integers below 2^53).
///
/// ```
/// use std::time::{Duration, SystemTime};
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

    #[test]
    fn the_callers_clock_is_unix_time_in_microseconds() {
        let unix = || {
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as u64)
        };
        let before = unix();
        let read = Clock::Caller.sent_now_us().unwrap_or(0);
        let after = unix();
        assert!(before <= read && read <= after, "{before} {read} {after}");
        assert!(read < MAX_US);
        assert_eq!(Clock::Store.sent_now_us(), None);
    }
}
