//! The fixed windows of envoyproxy/ratelimit: aligned to the Unix epoch.
//!
//! The Go service counts a limit of unit `u` (its length in seconds `d`:
//! a month is 30 days, a year 365, see [`Unit::seconds`]) in the window
//! that starts at `now - now % d` (the start is part of its counter's key)
//! and answers `duration_until_reset = d - now % d`, both in whole seconds
//! of its own clock. [`window_of`] is that arithmetic in microseconds, for
//! any period (a unit times `unit_multiplier`, or a `duration`); at a whole
//! second it gives the Go service's numbers exactly.
//!
//! The deciding is the library's, in the same windows
//! ([`Quota::aligned`](tower_redis_ratelimit::Quota::aligned), on the
//! store's clock); the service uses this arithmetic for what it answers
//! without a store call (a limit of 0, a cost that never fits).
//!
//! [`Unit::seconds`]: crate::config::Unit::seconds

/// One fixed window: where it starts and how long until the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The window's start, in microseconds since the Unix epoch (a multiple
    /// of the period).
    pub start_us: u64,
    /// Microseconds from `now` to the next window's start: from 1 to the
    /// period (the whole period at the very start of a window).
    pub reset_after_us: u64,
}

impl Window {
    /// [`reset_after_us`](Self::reset_after_us) rounded up to whole seconds,
    /// as the Go service's `duration_until_reset` (which counts from a whole
    /// second, so is never below 1 s).
    pub fn reset_after_secs_ceil(&self) -> u64 {
        self.reset_after_us.div_ceil(1_000_000)
    }
}

/// The window of `period_us` (microseconds; 0 is taken as 1) that holds
/// `now_us` (microseconds since the Unix epoch).
///
/// ```
/// use tower_redis_ratelimit_server::window::{window_of, Window};
///
/// // a minute limit at 12:00:42.5 UTC of some day
/// let now = (1_700_000_000 / 60 * 60 + 42) * 1_000_000 + 500_000;
/// let w = window_of(60_000_000, now);
/// assert_eq!(w.start_us, 1_700_000_000 / 60 * 60 * 1_000_000);
/// assert_eq!(w.reset_after_us, 17_500_000);
/// ```
pub const fn window_of(period_us: u64, now_us: u64) -> Window {
    let period = if period_us == 0 { 1 } else { period_us };
    let into = now_us % period;
    Window {
        start_us: now_us - into,
        reset_after_us: period - into,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Unit;

    const S: u64 = 1_000_000;

    /// The Go service's `CalculateReset` and the window start in its cache
    /// key (`(now / divider) * divider`), in whole seconds.
    fn go(unit: Unit, now_secs: u64) -> (u64, u64) {
        let d = unit.seconds();
        ((now_secs / d) * d, d - now_secs % d)
    }

    #[test]
    fn matches_the_go_service_at_whole_seconds() {
        for unit in Unit::ALL {
            for now in [
                0,
                1,
                59,
                60,
                61,
                3_599,
                86_399,
                86_400,
                1_700_000_000,
                1_700_000_001,
                4_102_444_800,
            ] {
                let w = window_of(unit.seconds() * S, now * S);
                let (start, reset) = go(unit, now);
                assert_eq!(w.start_us, start * S, "{unit} at {now}");
                assert_eq!(w.reset_after_us, reset * S, "{unit} at {now}");
                assert_eq!(w.reset_after_secs_ceil(), reset);
            }
        }
    }

    #[test]
    fn month_is_30_days_and_year_365_days_from_the_epoch() {
        // 2024-02-01T00:00:00Z is not a window start: windows are counted
        // from 1970-01-01 in 30-day steps, not calendar months
        let feb_2024 = 1_706_745_600;
        let w = window_of(Unit::Month.seconds() * S, feb_2024 * S);
        assert_eq!(w.start_us, (feb_2024 / 2_592_000) * 2_592_000 * S);
        assert_ne!(w.start_us, feb_2024 * S);
        let y = window_of(Unit::Year.seconds() * S, feb_2024 * S);
        // 54 years of 365 days after the epoch: 2023-12-19, not 2024-01-01
        assert_eq!(y.start_us, 54 * 31_536_000 * S);
    }

    #[test]
    fn sub_second_and_custom_periods() {
        let w = window_of(60 * S, 42 * S + 1);
        assert_eq!((w.start_us, w.reset_after_us), (0, 18 * S - 1));
        assert_eq!(w.reset_after_secs_ceil(), 18);
        // 90 s windows: 0, 90, 180, ...
        let w = window_of(90 * S, 100 * S);
        assert_eq!((w.start_us, w.reset_after_us), (90 * S, 80 * S));
        // at a window's start: the whole period to go
        let w = window_of(90 * S, 180 * S);
        assert_eq!((w.start_us, w.reset_after_us), (180 * S, 90 * S));
        // a zero period is taken as 1 µs rather than dividing by zero
        assert_eq!(window_of(0, 7).reset_after_us, 1);
    }
}
