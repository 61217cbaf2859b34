//! [`Strategy`]: the algorithms a [`Quota`](crate::Quota) can use.

// Each strategy is one module here (`fixed_window.rs`, `gcra.rs`, …) whose
// `StrategySpec` answers every question the crate asks of a strategy, and
// one Lua file in `lua/`. `Strategy::spec` is the one table that maps a
// strategy to its module: the only list of strategies in the crate (see
// `CONTRIBUTING.md`, "Adding a strategy").

use std::fmt;

mod concurrency;
pub(crate) mod eval;
mod fixed_window;
mod gcra;
mod leaky_bucket;
mod sliding_window_counter;
mod sliding_window_log;
pub(crate) mod state;
mod tat;
mod token_bucket;

use state::Algorithm;

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
    /// A log of request times: exact, at most `n` in any window of length
    /// `period`; memory O(n) per key (in Redis 7 bytes per logged request
    /// up to 32 of them, one string; about 10 beyond, a list).
    SlidingWindowLog,
    /// Two counters (current and previous aligned window) weighted by the
    /// overlap: O(1) memory. Never admits more than `n` within one aligned
    /// window, hence at most `2n` in any sliding window of length `period`;
    /// exact when traffic is spread evenly.
    SlidingWindowCounter,
    /// A bucket of `burst` tokens (default `n`) refilled with one token every
    /// `period / n`. Stored as one integer, the time the bucket is full
    /// again; it then decides exactly as [`Gcra`](Self::Gcra) does.
    TokenBucket,
    /// A queue of `burst` slots (default `n`) draining one request every
    /// `period / n`: requests are admitted with a [`delay`](crate::Decision::delay)
    /// until their slot and denied when the queue is full (traffic shaping).
    LeakyBucket,
    /// Generic cell rate algorithm: token-bucket-equivalent policing stored as
    /// one timestamp (as redis-cell).
    Gcra,
    /// At most `n` requests in flight per key: an admitted request holds a
    /// [`Lease`](crate::decision::Lease) until it is released or its timeout passes.
    Concurrency,
}

impl Strategy {
    /// All strategies, in a stable order (a test checks it against the table).
    pub const ALL: [Strategy; 7] = [
        Strategy::FixedWindow,
        Strategy::SlidingWindowLog,
        Strategy::SlidingWindowCounter,
        Strategy::TokenBucket,
        Strategy::LeakyBucket,
        Strategy::Gcra,
        Strategy::Concurrency,
    ];

    /// THE table: every fact about a strategy comes from its module's `SPEC`.
    /// Adding a strategy adds one line here (and to [`ALL`](Self::ALL)).
    pub(crate) const fn spec(self) -> &'static StrategySpec {
        match self {
            Strategy::FixedWindow => &fixed_window::SPEC,
            Strategy::SlidingWindowLog => &sliding_window_log::SPEC,
            Strategy::SlidingWindowCounter => &sliding_window_counter::SPEC,
            Strategy::TokenBucket => &token_bucket::SPEC,
            Strategy::LeakyBucket => &leaky_bucket::SPEC,
            Strategy::Gcra => &gcra::SPEC,
            Strategy::Concurrency => &concurrency::SPEC,
        }
    }

    /// The kebab-case name, e.g. `fixed-window`.
    pub const fn as_str(&self) -> &'static str {
        self.spec().name
    }

    /// Whether [`Quota::burst`](crate::Quota::burst) applies: the burst, not
    /// the rate's count, is then the capacity a request's cost is compared
    /// with ([`Quota::limit`](crate::Quota::limit)).
    ///
    /// ```
    /// use tower_redis_ratelimit::strategy::Strategy;
    ///
    /// assert!(Strategy::Gcra.takes_burst());
    /// assert!(!Strategy::FixedWindow.takes_burst());
    /// ```
    pub const fn takes_burst(self) -> bool {
        self.spec().takes_burst
    }

    /// Whether an admitted request holds a [`Lease`](crate::decision::Lease)
    /// on the key until it is released (or its timeout, the rate's period,
    /// passes).
    pub const fn holds_leases(self) -> bool {
        self.spec().holds_leases
    }

    /// Whether an admitted request may be given a
    /// [`delay`](crate::Decision::delay) to wait before it is served
    /// (traffic shaping); other strategies admit with no delay.
    pub const fn delays(self) -> bool {
        matches!(self.spec().algorithm, Algorithm::Tat { queue: true })
    }

    /// The kind of bound the strategy keeps on what one key admits
    /// (see [`Bound`]).
    pub const fn bound(self) -> Bound {
        self.spec().bound
    }

    /// The strategy's documented guarantee, in words, e.g. `at most n in
    /// any span of one period` (`n`: the rate's count).
    pub const fn guarantee(self) -> &'static str {
        self.spec().guarantee
    }
}

/// A strategy as the stores run it: one of the public [`Strategy`]s, or the
/// variant a quota's option selects (a fixed window aligned to the epoch,
/// [`Quota::aligned`](crate::Quota::aligned), or to a calendar,
/// `Quota::calendar`). Each kind has its own
/// [`StrategySpec`]: its own Lua id, storage-key tag, Lua block and memory
/// twin. The scripts, the stores and the engine ask a kind, never a
/// [`Strategy`], what a quota runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Kind {
    strategy: Strategy,
    variant: Variant,
}

/// A fixed window's variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Variant {
    /// The strategy itself.
    Plain,
    /// Windows aligned to the epoch.
    Aligned,
    /// Windows of a calendar: their bounds come with each call.
    Calendar,
}

impl Kind {
    /// Every kind, in a stable order: the strategies of [`Strategy::ALL`],
    /// then the aligned and the calendar fixed windows.
    pub(crate) const ALL: [Kind; 9] = [
        Kind::of(Strategy::FixedWindow),
        Kind::of(Strategy::SlidingWindowLog),
        Kind::of(Strategy::SlidingWindowCounter),
        Kind::of(Strategy::TokenBucket),
        Kind::of(Strategy::LeakyBucket),
        Kind::of(Strategy::Gcra),
        Kind::of(Strategy::Concurrency),
        Kind::ALIGNED_WINDOW,
        Kind::CALENDAR_WINDOW,
    ];

    /// A fixed window aligned to the epoch ([`Quota::aligned`](crate::Quota::aligned)).
    pub(crate) const ALIGNED_WINDOW: Kind = Kind {
        strategy: Strategy::FixedWindow,
        variant: Variant::Aligned,
    };

    /// A fixed window of a calendar (`Quota::calendar`).
    pub(crate) const CALENDAR_WINDOW: Kind = Kind {
        strategy: Strategy::FixedWindow,
        variant: Variant::Calendar,
    };

    /// The plain kind of `strategy`.
    pub(crate) const fn of(strategy: Strategy) -> Kind {
        Kind {
            strategy,
            variant: Variant::Plain,
        }
    }

    /// The kind of a quota of `strategy` and `variant` (only a fixed window
    /// has others than the plain one: see `Quota::compile_in`).
    pub(crate) const fn new(strategy: Strategy, variant: Variant) -> Kind {
        Kind { strategy, variant }
    }

    /// Its facts.
    pub(crate) const fn spec(self) -> &'static StrategySpec {
        match self.variant {
            Variant::Plain => self.strategy.spec(),
            Variant::Aligned => &fixed_window::ALIGNED,
            Variant::Calendar => &fixed_window::CALENDAR,
        }
    }

    /// Numeric id understood by the Lua dispatcher (`lua/multi.lua`).
    pub(crate) const fn id(self) -> u8 {
        self.spec().lua.id
    }
}

impl From<Strategy> for Kind {
    fn from(strategy: Strategy) -> Self {
        Kind::of(strategy)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.strategy.as_str())?;
        match self.variant {
            Variant::Plain => {}
            Variant::Aligned => f.write_str(" (aligned)")?,
            Variant::Calendar => f.write_str(" (calendar)")?,
        }
        Ok(())
    }
}

/// The kind of bound a [`Strategy`] keeps on what one key admits
/// ([`Strategy::bound`]; `n` is the rate's count). The words of each
/// strategy's bound are [`Strategy::guarantee`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Bound {
    /// At most `n` in one window of one period, opened by the key's first
    /// hit after the previous window closed: hence at most `2n` in any span
    /// of one period.
    Window,
    /// At most `n` in one aligned window (from a multiple of the period on
    /// the store's clock, or one window of a calendar): hence at most `2n`
    /// in any span of one period.
    /// The bound of a [`SlidingWindowCounter`](Strategy::SlidingWindowCounter),
    /// and of a [`FixedWindow`](Strategy::FixedWindow) quota made
    /// [`aligned`](crate::Quota::aligned) ([`Quota::bound`](crate::Quota::bound)).
    AlignedWindow,
    /// At most `n` in any span of one period.
    Span,
    /// At most `burst + t / interval` in any span `t`, where
    /// `interval = ceil(period / n)` and `burst` is the
    /// [`Quota::limit`](crate::Quota::limit).
    Bucket,
    /// At most `n` requests holding a lease at once.
    InFlight,
}

/// Everything the crate asks of one strategy. Every field must be given (no
/// defaults), so a new strategy answers every question.
///
/// Room for what comes next: how a strategy refunds on a settle call, and
/// what its stored state means under new quotas, are further fields here.
#[derive(Debug)]
pub(crate) struct StrategySpec {
    /// The kebab-case name ([`Strategy::as_str`], [`FromStr`](std::str::FromStr)).
    pub(crate) name: &'static str,
    /// The tag of derived quota names (`gcra-60-per-60s`); distinct per [`Kind`].
    pub(crate) tag: &'static str,
    /// The storage-key tag (it starts the quota part of a storage key): an ASCII letter, distinct
    /// per strategy, and never used before by any strategy; a change of the
    /// stored state's shape takes a new one (old state is then never read).
    /// Taken so far: `f`, `l`, `c`, `t`, `b`, `g`, `n`, `k`, `q`, `r`, `a`, `z` (see
    /// the guide's [keys](crate::guide::keys#storage-keys); `t`, `b` and `g` held the TAT strategies' state
    /// before it could hold its interval).
    pub(crate) key_tag: char,
    /// Whether a [named](crate::Quota::name) quota's storage key holds its
    /// period (`f1m/minute`, else `r/minute`): yes where the stored state
    /// means something only under that period (a count per window of it),
    /// so a change of period starts afresh; no where it means the same under
    /// any rate (times, leases, a TAT with its interval), so that a change of
    /// period is rescaled as one of count is (the guide's
    /// [plans chapter](crate::guide::plans#changing-limits-while-running)).
    pub(crate) period_in_named_key: bool,
    /// The Redis side.
    pub(crate) lua: Lua,
    /// The memory side: the twin of the Lua body, over [`state::Entry`].
    pub(crate) algorithm: Algorithm,
    /// Whether [`Quota::burst`](crate::Quota::burst) applies; if so the burst,
    /// not the rate's count, is the capacity a request's cost is compared with.
    pub(crate) takes_burst: bool,
    /// The largest rate count accepted at build, if the state grows with it.
    pub(crate) count_bound: Option<CountBound>,
    /// The configuration field the rate's period is, in build errors
    /// (`rate.period`, or `lease_timeout`).
    pub(crate) period_field: &'static str,
    /// Whether a call needs a unique nonce (sorted-set members).
    pub(crate) needs_nonce: bool,
    /// Whether an admitted request holds a [`Lease`](crate::decision::Lease) on the key
    /// until it is released.
    pub(crate) holds_leases: bool,
    /// The kind of bound kept on what one key admits ([`Strategy::bound`]).
    pub(crate) bound: Bound,
    /// That bound in words ([`Strategy::guarantee`]).
    pub(crate) guarantee: &'static str,
    /// Whether a denial holds until its `retry_after` (the middleware's deny
    /// cache may answer from it); not when a release can free a slot sooner.
    pub(crate) denials_cacheable: bool,
    /// The `RateLimit-Policy` parameters of a quota of this strategy.
    pub(crate) header: HeaderPolicy,
    /// How the unspent units of a reservation (`RateLimiter::settle`) or
    /// a local budget (`src/limiter/local_budget.rs`) go back to the store,
    /// and why local budgets do not apply to the strategy, if they do not.
    pub(crate) give_back: GiveBack,
    /// How units are charged or given back outside a take: a penalty, a
    /// reward, a settle's excess over its reservation (see
    /// `RateLimiter::penalize`, `RateLimiter::reward`, `RateLimiter::settle`).
    pub(crate) adjust: Adjust,
}

/// A strategy's adjust: one atomic call on every store that charges
/// (`units > 0`, past the limit if need be: a debt repaid at the quota's
/// rate) or gives back (`units < 0`, never above the limit) units of a key.
#[derive(Debug)]
pub(crate) enum Adjust {
    /// The strategy adjusts either way (and `set_remaining` sets it).
    Units {
        /// The Lua block (`lua/adjust_<name>.lua`), run once per quota in the
        /// settle script as `A[<id>]`; it reads key, n, period, burst,
        /// interval, units, now.
        lua: &'static str,
        /// Its memory twin, line by line.
        twin: state::AdjustFn,
    },
    /// The strategy takes a charge (`units > 0`: a debt, never lost) but
    /// gives nothing back: a give-back, a reward and `set_remaining` leave
    /// it as it is.
    Charge {
        /// The Lua block, run once per quota in the settle script as
        /// `C[<id>]`, for a charge only (it reads what an `A[<id>]` block does).
        lua: &'static str,
        /// Its memory twin, line by line (called for a charge only).
        twin: state::AdjustFn,
        /// Why nothing is given back (the table of the guide's
        /// [settling chapter](crate::guide::settle) says it to users; a test
        /// holds every strategy to a reason).
        #[allow(dead_code)]
        no_give_back: &'static str,
    },
    /// The strategy has no units to adjust: why (the table of the guide's
    /// [settling chapter](crate::guide::settle) says it to users; a test holds every strategy to a reason).
    #[allow(dead_code)]
    Never(&'static str),
}

impl Adjust {
    /// The memory twin of an adjust by `units`, if the strategy takes it (a
    /// charge-only strategy a charge alone), as `lua/give_back.lua` picks
    /// the block.
    pub(crate) const fn twin(&self, units: i64) -> Option<state::AdjustFn> {
        match self {
            Adjust::Units { twin, .. } => Some(*twin),
            Adjust::Charge { twin, .. } if units > 0 => Some(*twin),
            Adjust::Charge { .. } | Adjust::Never(_) => None,
        }
    }

    /// The memory twin of a set (`set_remaining`: afresh, then charged), if
    /// the strategy is set: only one that adjusts either way (starting a
    /// charge-only strategy afresh would give back).
    pub(crate) const fn set_twin(&self) -> Option<state::AdjustFn> {
        match self {
            Adjust::Units { twin, .. } => Some(*twin),
            Adjust::Charge { .. } | Adjust::Never(_) => None,
        }
    }
}

/// A strategy's give-back: one atomic call on every store that returns
/// `units` taken by a reservation and not spent.
#[derive(Debug)]
pub(crate) enum GiveBack {
    /// Unspent units go back as far as the strategy allows.
    Units {
        /// The Lua block (`lua/give_back_<name>.lua`, see `lua/give_back.lua`
        /// for what it reads), run once per quota in one script.
        lua: &'static str,
        /// Its memory twin, line by line.
        twin: state::GiveBackFn,
        /// How long after the take its units may be spent, from the take's
        /// `reset_after` and the quota's period (µs): never past the end of
        /// the window they were counted in (a bucket has none: the hold).
        horizon: fn(reset: i64, period: i64) -> i64,
    },
    /// A reservation's unspent units go back (a settle below its estimate,
    /// a joint decision's undo) as with `Units`, but local budgets do not
    /// apply to the strategy: why (the build error).
    Reservations {
        /// The Lua block, as `Units`'.
        lua: &'static str,
        /// Its memory twin, line by line.
        twin: state::GiveBackFn,
        /// Why no local budget (the build error).
        no_local_budget: &'static str,
    },
    /// Local spending would break the strategy's meaning: the build error.
    Never(&'static str),
}

impl GiveBack {
    /// The memory twin, if unspent units go back.
    pub(crate) const fn twin(&self) -> Option<state::GiveBackFn> {
        match self {
            GiveBack::Units { twin, .. } | GiveBack::Reservations { twin, .. } => Some(*twin),
            GiveBack::Never(_) => None,
        }
    }

    /// The Lua block, if unspent units go back.
    pub(crate) const fn lua(&self) -> Option<&'static str> {
        match self {
            GiveBack::Units { lua, .. } | GiveBack::Reservations { lua, .. } => Some(*lua),
            GiveBack::Never(_) => None,
        }
    }

    /// Why local budgets do not apply, if they do not (the build error).
    pub(crate) const fn no_local_budget(&self) -> Option<&'static str> {
        match self {
            GiveBack::Units { .. } => None,
            GiveBack::Reservations {
                no_local_budget, ..
            } => Some(*no_local_budget),
            GiveBack::Never(why) => Some(*why),
        }
    }
}

/// The horizon of strategies whose state ends at `reset_after`.
pub(crate) const fn until_reset(reset: i64, _period: i64) -> i64 {
    reset
}

/// A strategy's Lua: its body (`lua/<name>.lua`) and what it needs around it.
#[derive(Debug)]
pub(crate) struct Lua {
    /// The id `lua/multi.lua` dispatches on; distinct per strategy.
    pub(crate) id: u8,
    /// The block deciding one quota, in parts concatenated in order (see
    /// `lua/prelude.lua` for what a block reads and sets).
    pub(crate) body: &'static [&'static str],
    /// A script of its own for a lone quota on Redis's clock, run instead of
    /// the limiter's script, with the quota's numbers written in before it
    /// (`LimiterScript::fast_path`).
    pub(crate) fast_path: Option<&'static str>,
    /// Whether it calls the sorted-set helpers of `lua/zset.lua`.
    pub(crate) zset_helpers: bool,
    /// Whether it reads `now` on Redis's clock (the script then calls TIME).
    pub(crate) reads_time: bool,
    /// Whether its block reads burst and interval rather than the rate's
    /// count and period (never both): a one-quota script is sent, and
    /// parses, only that pair.
    pub(crate) reads_burst: bool,
}

/// The largest count of a strategy whose state holds one entry per unit of
/// cost (a time in a log, a lease in a sorted set): `Quota::MAX_SORTED_SET_LIMIT`.
pub(crate) const MAX_SORTED_SET_LIMIT: u64 = 10_000;

/// A bound on the rate's count, for strategies whose state holds one entry
/// per unit of cost.
#[derive(Debug)]
pub(crate) struct CountBound {
    /// The largest count accepted.
    pub(crate) max: u64,
    /// The build error's reason, before `, got <count>`.
    pub(crate) reason: &'static str,
    /// Whether the error points at the O(1) sliding window counter.
    pub(crate) suggest_counter: bool,
}

/// How a quota appears in `RateLimit-Policy`, and whether its `RateLimit`
/// item has a `t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderPolicy {
    /// `q=<count>;w=<period in seconds>`, with `t`.
    Window,
    /// `q=<burst>;w=<seconds to refill the burst>`, with `t`.
    Refill,
    /// `q=<count>;qu="concurrent-requests"`, without `t`.
    InFlight,
}

impl HeaderPolicy {
    /// Whether the quota's `RateLimit` item has a `t` (reset).
    pub(crate) const fn timed(self) -> bool {
        match self {
            HeaderPolicy::Window | HeaderPolicy::Refill => true,
            HeaderPolicy::InFlight => false,
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Strategy {
    type Err = ParseStrategyError;

    /// Parses a kebab-case name, as [`as_str`](Strategy::as_str) gives it.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Strategy::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| ParseStrategyError::new(s))
    }
}

/// The error of parsing a [`Strategy`] from an unknown name.
///
/// ```
/// use tower_redis_ratelimit::strategy::Strategy;
///
/// assert_eq!("gcra".parse::<Strategy>(), Ok(Strategy::Gcra));
/// let e = "gcar".parse::<Strategy>().unwrap_err();
/// assert!(e.to_string().contains("token-bucket"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseStrategyError {
    input: String,
}

impl ParseStrategyError {
    pub(crate) fn new(input: &str) -> Self {
        Self {
            input: input.to_owned(),
        }
    }

    /// The text that named no strategy.
    pub fn input(&self) -> &str {
        &self.input
    }
}

impl fmt::Display for ParseStrategyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown strategy {:?}; expected one of ", self.input)?;
        for (i, s) in Strategy::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(s.as_str())?;
        }
        Ok(())
    }
}

impl std::error::Error for ParseStrategyError {}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    /// `ALL` lists every strategy once; names, tags and Lua ids are distinct,
    /// and each name parses back. The compiler checks the table is exhaustive;
    /// this checks `ALL` against it (a strategy missing from `ALL` would have a
    /// spec no test or parser reaches).
    #[test]
    fn all_lists_each_strategy_of_the_table_once() {
        let n = Strategy::ALL.len();
        let distinct = |f: fn(&StrategySpec) -> String| {
            Strategy::ALL
                .iter()
                .map(|s| f(s.spec()))
                .collect::<HashSet<_>>()
                .len()
        };
        assert_eq!(Strategy::ALL.iter().collect::<HashSet<_>>().len(), n);
        assert_eq!(distinct(|s| s.name.into()), n);
        assert_eq!(distinct(|s| s.tag.into()), n);
        assert_eq!(distinct(|s| s.key_tag.into()), n);
        assert!(
            Strategy::ALL
                .iter()
                .all(|s| s.spec().key_tag.is_ascii_alphabetic())
        );
        assert_eq!(distinct(|s| s.lua.id.to_string()), n);
        // every kind (the strategies and their flagged variants) apart
        let kinds = Kind::ALL.len();
        let distinct_kinds = |f: fn(&StrategySpec) -> String| {
            Kind::ALL
                .iter()
                .map(|k| f(k.spec()))
                .collect::<HashSet<_>>()
                .len()
        };
        assert_eq!(Kind::ALL.iter().collect::<HashSet<_>>().len(), kinds);
        assert_eq!(distinct_kinds(|s| s.tag.into()), kinds);
        assert_eq!(distinct_kinds(|s| s.key_tag.into()), kinds);
        assert_eq!(distinct_kinds(|s| s.lua.id.to_string()), kinds);
        assert!(
            Kind::ALL
                .iter()
                .all(|k| k.spec().key_tag.is_ascii_alphabetic())
        );
        for (k, s) in Kind::ALL.iter().zip(Strategy::ALL) {
            assert_eq!(*k, Kind::of(s));
        }
        for s in Strategy::ALL {
            match s.spec().adjust {
                Adjust::Never(why) => assert!(!why.is_empty(), "{s}"),
                Adjust::Charge { no_give_back, .. } => assert!(!no_give_back.is_empty(), "{s}"),
                Adjust::Units { .. } => {}
            }
            assert_eq!(s.as_str().parse::<Strategy>(), Ok(s));
            // every variant is in ALL: this match has no wildcard, so a new
            // variant fails to compile here until it is added to ALL below
            let in_all = match s {
                Strategy::FixedWindow
                | Strategy::SlidingWindowLog
                | Strategy::SlidingWindowCounter
                | Strategy::TokenBucket
                | Strategy::LeakyBucket
                | Strategy::Gcra
                | Strategy::Concurrency => Strategy::ALL.contains(&s),
            };
            assert!(in_all);
        }
    }

    /// The public facts agree with each other: a strategy holds leases
    /// exactly when its bound is on what is in flight, one that delays is
    /// bounded as a bucket (its burst is its queue), and every guarantee is
    /// said in words.
    #[test]
    fn public_facts_agree() {
        for s in Strategy::ALL {
            assert_eq!(s.holds_leases(), s.bound() == Bound::InFlight, "{s}");
            assert!(
                !s.delays() || (s.bound() == Bound::Bucket && s.takes_burst()),
                "{s}"
            );
            assert!(s.guarantee().starts_with("at most") || s.delays(), "{s}");
        }
    }

    #[test]
    fn parse_error_names_the_input_and_every_strategy() {
        let e = "fixed_window".parse::<Strategy>().unwrap_err();
        assert_eq!(e.input(), "fixed_window");
        let msg = e.to_string();
        assert!(msg.contains("\"fixed_window\""), "{msg}");
        for s in Strategy::ALL {
            assert!(msg.contains(s.as_str()), "{msg}");
        }
    }
}
