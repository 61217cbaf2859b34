//! [`Pattern`]: the traffic a simulation sends, as exact arrival times.

use std::fmt;
use std::str::FromStr;

use super::SimError;

/// A traffic pattern, scaled to a reference rate of `n` requests per period
/// `P` (the scenario's [traffic rate](super::Scenario::traffic)). Every arrival
/// time is computed in integer microseconds, so a pattern is the same on
/// every run and machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Pattern {
    /// One client at twice the rate (a request every `P / 2n`) for `3P`.
    Steady,
    /// A burst of `3n` requests (one every `P / 1000`) at `P / 10`, silence,
    /// and the same burst again at `2P + P / 10`; `4P` in all.
    BurstThenIdle,
    /// The window-edge attack: one request at 0 (it opens a fixed window),
    /// then `3n / 2` requests in the last twentieth of the first period and
    /// `3n / 2` in the first twentieth of the next; `2P` in all.
    BoundaryBurst,
    /// Three teeth of one period each: the rate climbs from 0 to four times
    /// the rate, then drops to 0 (`2n` requests per tooth).
    Sawtooth,
    /// Five clients (keys `client-1` … `client-5`), client `c` steady at
    /// `c / 2` times the rate, each starting a little later; `3P`.
    ManyClients,
}

/// One request of a pattern: when (µs after the start) and from which client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Arrival {
    pub(crate) at: u64,
    pub(crate) client: usize,
}

/// The most requests one simulation sends (a limit on the traffic rate's count).
pub(crate) const MAX_ARRIVALS: u128 = 200_000;

impl Pattern {
    /// Every pattern, in a stable order.
    pub const ALL: [Pattern; 5] = [
        Pattern::Steady,
        Pattern::BurstThenIdle,
        Pattern::BoundaryBurst,
        Pattern::Sawtooth,
        Pattern::ManyClients,
    ];

    /// The kebab-case name, e.g. `boundary-burst`.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Pattern::Steady => "steady",
            Pattern::BurstThenIdle => "burst-then-idle",
            Pattern::BoundaryBurst => "boundary-burst",
            Pattern::Sawtooth => "sawtooth",
            Pattern::ManyClients => "many-clients",
        }
    }

    /// One line saying what the pattern sends.
    pub const fn description(&self) -> &'static str {
        match self {
            Pattern::Steady => "one client at twice the rate",
            Pattern::BurstThenIdle => "3n at once, silence, 3n again",
            Pattern::BoundaryBurst => "1.5n just before and 1.5n just after a window edge",
            Pattern::Sawtooth => "the rate climbs to 4x and drops, three times",
            Pattern::ManyClients => "five clients at 0.5x to 2.5x the rate",
        }
    }

    /// How many clients (keys) send.
    pub const fn clients(&self) -> usize {
        match self {
            Pattern::ManyClients => 5,
            _ => 1,
        }
    }

    /// The length of the run, in periods of the traffic rate.
    pub(crate) const fn periods(&self) -> u64 {
        match self {
            Pattern::Steady | Pattern::Sawtooth | Pattern::ManyClients => 3,
            Pattern::BurstThenIdle => 4,
            Pattern::BoundaryBurst => 2,
        }
    }

    /// Every arrival for `n` requests per `period` µs, in time order (ties
    /// by client): all integer arithmetic.
    pub(crate) fn arrivals(&self, n: u64, period: u64) -> Result<Vec<Arrival>, SimError> {
        let (n, p) = (u128::from(n), u128::from(period));
        let expected = match self {
            Pattern::Steady | Pattern::BurstThenIdle | Pattern::Sawtooth => 6 * n,
            Pattern::BoundaryBurst => 1 + 2 * (3 * n).div_ceil(2),
            Pattern::ManyClients => 23 * n,
        };
        if expected > MAX_ARRIVALS {
            return Err(SimError::Traffic(format!(
                "{} would send about {expected} requests at this rate; at most {MAX_ARRIVALS} \
                 (lower the traffic rate's count)",
                self.as_str()
            )));
        }
        let one = |at: u128| Arrival {
            // every time is below periods() × period, which fits in a u64
            at: u64::try_from(at).unwrap_or(u64::MAX),
            client: 0,
        };
        let mut out: Vec<Arrival> = match self {
            Pattern::Steady => (0..6 * n).map(|k| one(k * p / (2 * n))).collect(),
            Pattern::BurstThenIdle => [p / 10, 2 * p + p / 10]
                .into_iter()
                .flat_map(|start| (0..3 * n).map(move |k| one(start + k * p / 1000)))
                .collect(),
            Pattern::BoundaryBurst => {
                let m = (3 * n).div_ceil(2);
                let edge = p / 20;
                let before = (0..m).map(|k| one(p - edge + k * edge / m));
                let after = (0..m).map(|k| one(p + k * edge / m));
                std::iter::once(one(0)).chain(before).chain(after).collect()
            }
            Pattern::Sawtooth => (0..3)
                // requests so far in a tooth: 2n (τ / P)², so the k-th is at P √(k / 2n)
                .flat_map(|tooth| {
                    (0..2 * n).map(move |k| one(tooth * p + (p * p * k / (2 * n)).isqrt()))
                })
                .collect(),
            Pattern::ManyClients => {
                let end = 3 * p;
                (1..=5u128)
                    .flat_map(|c| {
                        let start = c * p / (10 * n);
                        (0..)
                            .map(move |k| start + k * 2 * p / (c * n))
                            .take_while(move |&t| t < end)
                            .map(move |t| Arrival {
                                at: u64::try_from(t).unwrap_or(u64::MAX),
                                client: usize::try_from(c - 1).unwrap_or(0),
                            })
                    })
                    .collect()
            }
        };
        out.sort();
        Ok(out)
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Pattern {
    type Err = SimError;

    /// Parses a kebab-case name, as [`as_str`](Pattern::as_str) gives it.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Pattern::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Pattern::ALL.iter().map(|p| p.as_str()).collect();
                SimError::Traffic(format!(
                    "unknown pattern {s:?}; expected one of {}",
                    names.join(", ")
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_are_sorted_and_inside_the_run() {
        for p in Pattern::ALL {
            let period = 10_000_000;
            let a = p.arrivals(10, period).unwrap();
            assert!(a.windows(2).all(|w| w[0] <= w[1]), "{p}");
            assert!(a.iter().all(|x| x.at < p.periods() * period), "{p}");
            assert!(a.iter().all(|x| x.client < p.clients()), "{p}");
            assert_eq!(p.as_str().parse::<Pattern>().unwrap(), p);
        }
        let saw = Pattern::Sawtooth.arrivals(10, 10_000_000).unwrap();
        assert_eq!(saw.len(), 60);
        // 20 per tooth, denser towards its end
        assert_eq!(saw[1].at, 2_236_067); // 10 s × √(1/20)
        assert_eq!(saw[19].at, 9_746_794);
    }
}
