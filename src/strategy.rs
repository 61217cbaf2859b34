//! [`Strategy`]: the algorithms a [`Quota`](crate::Quota) can use.

use std::fmt;

/// The algorithm that enforces a [`Quota`](crate::Quota).
///
/// Every strategy is one atomic Lua script on Redis (see `lua/`) and the same
/// algorithm in [`MemoryStore`](crate::MemoryStore); both compute in integer
/// microseconds on the store's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Strategy {
    /// One counter per window; the window starts at the key's first hit.
    /// Cheapest; allows up to twice the limit across a window boundary.
    FixedWindow,
    /// A sorted set of request timestamps: exact, at most `n` in any window of
    /// length `period`, memory O(n) per key.
    SlidingWindowLog,
    /// Two counters (current and previous aligned window) weighted by the
    /// overlap: O(1) memory. Never admits more than `n` within one aligned
    /// window, hence at most `2n` in any sliding window of length `period`;
    /// exact when traffic is spread evenly.
    SlidingWindowCounter,
    /// A bucket of `burst` tokens (default `n`) refilled with one token every
    /// `period / n`.
    TokenBucket,
    /// A queue of `burst` slots (default `n`) draining one request every
    /// `period / n`: requests are admitted with a [`delay`](crate::Decision::delay)
    /// until their slot and denied when the queue is full (traffic shaping).
    LeakyBucket,
    /// Generic cell rate algorithm: token-bucket-equivalent policing stored as
    /// one timestamp (as redis-cell).
    Gcra,
    /// At most `n` requests in flight per key: an admitted request holds a
    /// [`Lease`](crate::Lease) until it is released or its timeout passes.
    Concurrency,
}

impl Strategy {
    /// All strategies, in a stable order.
    pub const ALL: [Strategy; 7] = [
        Strategy::FixedWindow,
        Strategy::SlidingWindowLog,
        Strategy::SlidingWindowCounter,
        Strategy::TokenBucket,
        Strategy::LeakyBucket,
        Strategy::Gcra,
        Strategy::Concurrency,
    ];

    /// The kebab-case name, e.g. `fixed-window`.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Strategy::FixedWindow => "fixed-window",
            Strategy::SlidingWindowLog => "sliding-window-log",
            Strategy::SlidingWindowCounter => "sliding-window-counter",
            Strategy::TokenBucket => "token-bucket",
            Strategy::LeakyBucket => "leaky-bucket",
            Strategy::Gcra => "gcra",
            Strategy::Concurrency => "concurrency",
        }
    }

    /// Short tag used in storage keys, so a strategy change never reads
    /// another strategy's state.
    pub(crate) const fn tag(&self) -> &'static str {
        match self {
            Strategy::FixedWindow => "fw",
            Strategy::SlidingWindowLog => "swl",
            Strategy::SlidingWindowCounter => "swc",
            Strategy::TokenBucket => "tb",
            Strategy::LeakyBucket => "lb",
            Strategy::Gcra => "gcra",
            Strategy::Concurrency => "conc",
        }
    }

    /// Numeric id understood by the Lua dispatcher (`lua/limiter.lua`).
    pub(crate) const fn id(&self) -> u8 {
        match self {
            Strategy::FixedWindow => 1,
            Strategy::SlidingWindowLog => 2,
            Strategy::SlidingWindowCounter => 3,
            Strategy::TokenBucket => 4,
            Strategy::LeakyBucket => 5,
            Strategy::Gcra => 6,
            Strategy::Concurrency => 7,
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Strategy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Strategy::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Strategy::ALL.iter().map(Strategy::as_str).collect();
                format!(
                    "unknown strategy {s:?}; expected one of {}",
                    names.join(", ")
                )
            })
    }
}
