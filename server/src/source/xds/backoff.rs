//! The waits between connections to the management server: an
//! exponential [`Backoff`] with jitter ([`Jitter`]).

use std::time::Duration;

/// The waits between connections: from `initial`, doubling at each failure,
/// at most `max`; each drawn between half of that and all of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Backoff {
    /// The first wait's ceiling.
    pub(super) initial: Duration,
    /// The longest wait.
    pub(super) max: Duration,
}

impl Backoff {
    /// The wait before attempt `attempt + 1` (0 after the first failure),
    /// `random` a uniformly drawn number.
    pub(super) fn delay(self, attempt: u32, random: u64) -> Duration {
        let ceiling = self
            .initial
            .checked_mul(1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX))
            .unwrap_or(self.max)
            .min(self.max);
        let half = ceiling / 2;
        let span = u64::try_from((ceiling - half).as_nanos()).unwrap_or(u64::MAX);
        half + Duration::from_nanos(if span == 0 { 0 } else { random % (span + 1) })
    }
}

/// A small random number generator for the jitter (xorshift64*): not for
/// secrets.
#[derive(Debug)]
pub(super) struct Jitter(pub(super) u64);

impl Jitter {
    /// A generator seeded from the clock and an address.
    pub(super) fn new() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let here = &nanos as *const u64 as u64;
        Jitter((nanos ^ here.rotate_left(32)) | 1)
    }

    /// The next number.
    pub(super) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}
