//! The lines a client or an outage can repeat, one a second at most.

use super::now_us;

/// The throttles of the lines a client or an outage can repeat.
#[derive(Debug, Default)]
pub(crate) struct Logs {
    /// Store errors answered `UNAVAILABLE`.
    pub(crate) failed: LogThrottle,
    /// Store errors answered by an `allow` or `deny` policy.
    pub(crate) policy: LogThrottle,
    /// Requests refused as past a bound.
    pub(crate) refused: LogThrottle,
    /// Whether the store's last call failed (its recovery is logged once).
    pub(crate) failing: std::sync::atomic::AtomicBool,
}

/// Logs one line per interval at most, saying how many it held back (a
/// store outage must not write a line per call).
#[derive(Debug, Default)]
pub(crate) struct LogThrottle {
    /// When a line was last logged (µs since the epoch; 0: never).
    last_us: std::sync::atomic::AtomicU64,
    /// Lines held back since.
    held: std::sync::atomic::AtomicU64,
}

impl LogThrottle {
    /// One line a second.
    const INTERVAL_US: u64 = 1_000_000;

    /// `Some(held back)` when a line may be logged now.
    pub(crate) fn to_log(&self) -> Option<u64> {
        use std::sync::atomic::Ordering::Relaxed;
        let now = now_us();
        let last = self.last_us.load(Relaxed);
        if last != 0 && now.saturating_sub(last) < Self::INTERVAL_US
            || self
                .last_us
                .compare_exchange(last, now.max(1), Relaxed, Relaxed)
                .is_err()
        {
            self.held.fetch_add(1, Relaxed);
            return None;
        }
        Some(self.held.swap(0, Relaxed))
    }
}

/// At most the first 64 bytes of `s` (a client's string in a log line).
pub(crate) fn shown(s: &str) -> &str {
    let mut end = s.len().min(64);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
