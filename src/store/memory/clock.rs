//! The memory store's clock: Unix time in microseconds from the CPU's
//! time-stamp counter.

use std::sync::OnceLock;
use std::time::SystemTime;

/// The stores' clock: Unix time in microseconds, read from the CPU's
/// time-stamp counter where it is invariant (through `quanta`, as governor
/// does; calibrated once per process, at the first decision), else from the
/// operating system's monotonic clock. Reading the OS clock cost a sixth of
/// a decision's time in a virtual machine.
pub(super) struct Clock {
    clock: quanta::Clock,
    /// The counter's reading at `start_us`.
    start_raw: u64,
    /// Unix time at `start_raw`.
    start_us: i64,
    /// Microseconds per counter tick, in fixed point (64 fractional bits):
    /// one multiplication from ticks to microseconds.
    us_per_tick: u64,
}

impl Clock {
    pub(super) fn get() -> &'static Clock {
        static CLOCK: OnceLock<Clock> = OnceLock::new();
        CLOCK.get_or_init(|| {
            let clock = quanta::Clock::new();
            let start_raw = clock.raw();
            let start_us = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as i64);
            // quanta's scale over 2^40 ticks, as µs per tick times 2^64
            let ns = u128::from(clock.delta_as_nanos(0, 1 << 40));
            let us_per_tick = u64::try_from((ns << 24) / 1_000).unwrap_or(u64::MAX);
            Clock {
                clock,
                start_raw,
                start_us,
                us_per_tick,
            }
        })
    }

    #[inline]
    pub(super) fn now_us(&self) -> i64 {
        let ticks = self.clock.raw().saturating_sub(self.start_raw);
        let us = (u128::from(ticks) * u128::from(self.us_per_tick)) >> 64;
        self.start_us + us as i64
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;

    #[test]
    fn the_store_clock_follows_the_system_clock() {
        let unix_us = || {
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as i64)
        };
        let clock = Clock::get();
        // (a few tries: the thread may be preempted between two readings)
        let mut seen = Vec::new();
        for _ in 0..5 {
            let (store0, sys0) = (clock.now_us(), unix_us());
            std::thread::sleep(Duration::from_millis(200));
            let (store1, sys1) = (clock.now_us(), unix_us());
            // the same time, and the same elapsed time within 2% (a wrong
            // scale is off by far more)
            let (a, b) = (store1 - store0, sys1 - sys0);
            if (store0 - sys0).abs() < 50_000 && a > 0 && (a - b).abs() < b / 50 {
                return;
            }
            seen.push((store0 - sys0, a, b));
        }
        panic!("store clock off (offset, elapsed, system elapsed in µs): {seen:?}");
    }
}
