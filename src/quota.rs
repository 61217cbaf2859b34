//! [`Quota`]: one limit a [`RateLimiter`](crate::RateLimiter) enforces.

use std::time::Duration;

use crate::error::ConfigError;
use crate::rate::{MAX_COUNT, Rate};
use crate::strategy::state::Params;
use crate::strategy::{Bound, Kind, Strategy, StrategySpec, Variant};

#[cfg(feature = "calendar")]
pub(crate) mod calendar;
#[cfg(feature = "calendar")]
use calendar::{Calendar, Windows};

/// Without the `calendar` feature no quota has calendar windows.
#[cfg(not(feature = "calendar"))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Windows {}

#[cfg(not(feature = "calendar"))]
impl Windows {
    fn around(&self, _now: i64) -> [i64; 3] {
        match *self {}
    }
}

/// Longest period accepted (one year): keeps every timestamp computation
/// exact in Redis's Lua numbers.
const MAX_PERIOD_US: u64 = 366 * 86_400 * 1_000_000;

/// One limit: a [`Strategy`] applied at a [`Rate`], with an optional burst and name.
///
/// A [`RateLimiter`](crate::RateLimiter) may hold several quotas (say per
/// minute and per day); they are checked together and consumed only if all
/// allow.
///
/// ```
/// use tower_redis_ratelimit::{Quota, Rate};
///
/// let per_minute = Quota::gcra(Rate::per_minute(60)).burst(10).name("minute");
/// let per_day = Quota::fixed_window(Rate::per_day(10_000)).name("day");
/// let in_flight = Quota::concurrency(8);
/// # let _ = (per_minute, per_day, in_flight);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Quota {
    strategy: Strategy,
    rate: Rate,
    burst: Option<u64>,
    name: Option<String>,
    shadow: bool,
    aligned: bool,
    #[cfg(feature = "calendar")]
    calendar: Option<Calendar>,
}

impl Quota {
    /// Default lease timeout of a [`Quota::concurrency`] quota.
    pub const DEFAULT_LEASE_TIMEOUT: Duration = Duration::from_secs(60);

    /// The largest count of a [`SlidingWindowLog`](Strategy::SlidingWindowLog)
    /// or [`Concurrency`](Strategy::Concurrency) quota, checked at build.
    ///
    /// These keep one entry per admitted unit of cost (a time in the log's
    /// list, a lease in a sorted set), so a key's memory grows with the
    /// count, and one call's work with its cost (at most the count, and
    /// [`MAX_LEASES_PER_CALL`](Self::MAX_LEASES_PER_CALL) leases). Above
    /// this, use [`SlidingWindowCounter`](Strategy::SlidingWindowCounter) (O(1)
    /// state) instead of the log.
    pub const MAX_SORTED_SET_LIMIT: u64 = crate::strategy::MAX_SORTED_SET_LIMIT;

    /// The most leases one call may take of a
    /// [`Concurrency`](Strategy::Concurrency) quota: a larger cost never
    /// fits it, and is denied without a store call (with no
    /// [`retry_after`](crate::Decision::retry_after)), as a cost above its
    /// count is.
    ///
    /// A lease is one sorted-set member per unit of cost, each about a
    /// microsecond of Redis's time to add (a thousand: about a millisecond,
    /// for which Redis serves no other client). Where a request's weight is
    /// that large, count the weight in larger units.
    pub const MAX_LEASES_PER_CALL: u64 = 1_000;

    /// A quota of `strategy` at `rate`.
    pub fn new(strategy: Strategy, rate: Rate) -> Self {
        Self {
            strategy,
            rate,
            burst: None,
            name: None,
            shadow: false,
            aligned: false,
            #[cfg(feature = "calendar")]
            calendar: None,
        }
    }

    /// [`Strategy::FixedWindow`] at `rate`.
    pub fn fixed_window(rate: Rate) -> Self {
        Self::new(Strategy::FixedWindow, rate)
    }

    /// [`Strategy::SlidingWindowLog`] at `rate`.
    pub fn sliding_window_log(rate: Rate) -> Self {
        Self::new(Strategy::SlidingWindowLog, rate)
    }

    /// [`Strategy::SlidingWindowCounter`] at `rate`.
    pub fn sliding_window_counter(rate: Rate) -> Self {
        Self::new(Strategy::SlidingWindowCounter, rate)
    }

    /// [`Strategy::TokenBucket`] at `rate`; the bucket holds `burst` tokens (default: the rate's count).
    pub fn token_bucket(rate: Rate) -> Self {
        Self::new(Strategy::TokenBucket, rate)
    }

    /// [`Strategy::LeakyBucket`] at `rate`; the queue holds `burst` requests (default: the rate's count).
    pub fn leaky_bucket(rate: Rate) -> Self {
        Self::new(Strategy::LeakyBucket, rate)
    }

    /// [`Strategy::Gcra`] at `rate`; up to `burst` requests at once (default: the rate's count).
    pub fn gcra(rate: Rate) -> Self {
        Self::new(Strategy::Gcra, rate)
    }

    /// [`Strategy::Concurrency`]: at most `max_in_flight` leases held at once per key.
    /// A lease not released expires after [`lease_timeout`](Self::lease_timeout)
    /// (default [`DEFAULT_LEASE_TIMEOUT`](Self::DEFAULT_LEASE_TIMEOUT)).
    /// A request of cost `c` holds `c` leases; one call takes at most
    /// [`MAX_LEASES_PER_CALL`](Self::MAX_LEASES_PER_CALL).
    pub fn concurrency(max_in_flight: u64) -> Self {
        Self::new(
            Strategy::Concurrency,
            Rate::new(max_in_flight, Self::DEFAULT_LEASE_TIMEOUT),
        )
    }

    /// Sets the burst: the bucket size of [`TokenBucket`](Strategy::TokenBucket)
    /// and [`Gcra`](Strategy::Gcra), the queue size of
    /// [`LeakyBucket`](Strategy::LeakyBucket). Other strategies reject a burst at build time.
    pub fn burst(mut self, burst: u64) -> Self {
        self.burst = Some(burst);
        self
    }

    /// Sets the name shown in `RateLimit-Policy` headers and used in storage keys.
    /// Default: derived from the strategy and rate, e.g. `gcra-60-per-60s`
    /// (distinct for distinct strategies or rates).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// For [`Quota::concurrency`]: how long an unreleased lease (e.g. from a
    /// crashed instance) keeps its slot.
    pub fn lease_timeout(mut self, timeout: Duration) -> Self {
        self.rate = Rate::new(self.rate.count(), timeout);
        self
    }

    /// Shadow mode for this quota alone: it is checked and counted with the
    /// limiter's other quotas, in the same store call, but never denies.
    ///
    /// A request is allowed when every enforced (non-shadow) quota allows
    /// it; it then consumes every enforced quota, and a shadow quota only if
    /// that quota would allow it on its own (a shadow quota that would deny
    /// consumes nothing, as if it were enforced alone). A denied request
    /// consumes nothing anywhere. The [`Decision`](crate::Decision) reports
    /// each quota's own verdict in [`quotas`](crate::Decision::quotas), and
    /// [`shadow_denied`](crate::Decision::shadow_denied) tells whether a
    /// shadow quota would have denied an allowed request; the binding quota
    /// (limit, remaining, headers) is an enforced one. A limiter whose
    /// quotas are all shadow always allows (as a shadow layer).
    ///
    /// The flag is not part of the storage key: turning shadow mode off (the
    /// same quota, enforced) keeps the state it counted. Concurrency quotas
    /// cannot be shadow (rejected at build, `quota[i].shadow`), nor can a
    /// limiter with local budgets have shadow quotas.
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.shadow = shadow;
        self
    }

    /// For [`Quota::fixed_window`]: windows aligned to the Unix epoch, the
    /// same for every key, instead of a window opened by each key's first
    /// hit. The windows are `[k × period, (k + 1) × period)` in the
    /// limiter's clock's microseconds since the epoch (Redis's `TIME` on
    /// Redis's clock; the [`ManualClock`](crate::clock::ManualClock)'s or the
    /// caller's reading otherwise): a window of one minute runs from `:00`
    /// to `:00`, one of a day from midnight UTC, as envoyproxy/ratelimit and
    /// most gateways count. A month or a year is whatever period the rate
    /// says (`Rate::new(n, Duration::from_secs(30 * 86_400))` for the
    /// 30-day month of envoyproxy/ratelimit), counted from the epoch too.
    ///
    /// At most `n` in each window (its bound is
    /// [`Bound::AlignedWindow`], see [`bound`](Self::bound)): so up to `2n`
    /// across a window's end, for every key at the same moment.
    /// `reset_after` and a denial's `retry_after` are the rest of the
    /// window, and so is the key's TTL. Everything else is as a fixed
    /// window's: a denial writes nothing, a cost of 0 peeks, named quotas
    /// keep their count when their count changes.
    ///
    /// An aligned window keeps state apart from an unaligned one of the
    /// same rate or name (its storage key starts with `a`, see the guide's
    /// [keys](crate::guide::keys#storage-keys)). On Redis's clock it reads
    /// `TIME`, as every strategy but the plain fixed window does. Other
    /// strategies reject it at build (`quota[i].aligned`; a
    /// [`SlidingWindowCounter`](Strategy::SlidingWindowCounter)'s windows
    /// are aligned already).
    ///
    /// ```
    /// use tower_redis_ratelimit::{Quota, Rate};
    /// use tower_redis_ratelimit::strategy::Bound;
    ///
    /// let per_minute = Quota::fixed_window(Rate::per_minute(100)).aligned();
    /// assert!(per_minute.is_aligned());
    /// assert_eq!(per_minute.bound(), Bound::AlignedWindow);
    /// assert_eq!(per_minute.to_string(), "fixed-window 100/min aligned");
    /// ```
    pub fn aligned(mut self) -> Self {
        self.aligned = true;
        self
    }

    /// For [`Quota::fixed_window`]: windows that follow `calendar`, a month
    /// or a year of a named time zone, instead of a fixed period (feature
    /// `calendar`). The rate's count is the budget of each window; its
    /// period becomes the unit's longest window (31 days, 366 days), which
    /// [`rate`](Self::rate) and `RateLimit-Policy`'s `w` report.
    ///
    /// A month runs from local midnight on the 1st to local midnight on the
    /// 1st of the next month (28 to 31 days, an hour less or more across a
    /// DST change); a year from local midnight on January 1st. A local
    /// midnight the zone skips (a DST gap at midnight) is the first instant
    /// after the gap; one it repeats is its first occurrence. The zone's
    /// rules come from the tz database compiled into the crate.
    ///
    /// On Redis the script cannot compute a zone's rules: each call brings
    /// the bounds of the window that holds the limiter's clock's time (the
    /// caller's clock for Redis's own, whose `TIME` then picks, of that
    /// window and its neighbours, the one that holds Redis's time: near a
    /// bound Redis's clock decides, as for every strategy), and the state,
    /// a count keyed by the window's end, expires at that end. The memory
    /// store computes the same bounds from its clock.
    ///
    /// Otherwise as an [`aligned`](Self::aligned) window: at most `n` in
    /// each window (its [`bound`](Self::bound) is
    /// [`Bound::AlignedWindow`]), every key resetting at the same instant;
    /// `reset_after` and a denial's `retry_after` are the rest of the
    /// window; a denial writes nothing; a cost of 0 peeks; a settle's
    /// excess is a debt that ends with the window, and a settle below the
    /// estimate gives the rest back into the reservation's window while it
    /// lasts ([`RateLimiter::reserve_n`](crate::RateLimiter::reserve_n): a
    /// monthly token budget). The state is apart from
    /// every other quota's (the storage key starts with `z` and names the
    /// unit and zone). Rejected at build (`quota[i].calendar`): on another
    /// strategy, with [`aligned`](Self::aligned), an unknown zone; and a
    /// limiter with local budgets.
    ///
    /// ```
    /// use tower_redis_ratelimit::{Calendar, Quota, Rate};
    ///
    /// let tokens = Quota::fixed_window(Rate::per_day(1_000_000)).calendar(Calendar::month("Europe/Paris"));
    /// assert_eq!(tokens.rate().count(), 1_000_000);
    /// assert_eq!(tokens.rate().period().as_secs(), 31 * 86_400);
    /// assert_eq!(tokens.to_string(), "fixed-window 1000000/2678400s calendar=month@Europe/Paris");
    /// ```
    #[cfg(feature = "calendar")]
    pub fn calendar(mut self, calendar: Calendar) -> Self {
        self.rate = Rate::new(self.rate.count(), calendar.unit().longest());
        self.calendar = Some(calendar);
        self
    }

    /// The [`calendar`](Self::calendar) the quota's windows follow, if any.
    #[cfg(feature = "calendar")]
    pub fn calendar_window(&self) -> Option<&Calendar> {
        self.calendar.as_ref()
    }

    /// Whether the quota has calendar windows.
    fn has_calendar(&self) -> bool {
        #[cfg(feature = "calendar")]
        return self.calendar.is_some();
        #[cfg(not(feature = "calendar"))]
        false
    }

    /// Whether the quota's windows are [`aligned`](Self::aligned) to the epoch.
    pub fn is_aligned(&self) -> bool {
        self.aligned
    }

    /// The kind of bound the quota keeps on what one key admits: its
    /// strategy's ([`Strategy::bound`]), or [`Bound::AlignedWindow`] for an
    /// [`aligned`](Self::aligned) fixed window.
    pub fn bound(&self) -> Bound {
        self.kind().spec().bound
    }

    /// What the stores run.
    fn kind(&self) -> Kind {
        let variant = if self.has_calendar() {
            Variant::Calendar
        } else if self.aligned {
            Variant::Aligned
        } else {
            Variant::Plain
        };
        Kind::new(self.strategy, variant)
    }

    /// Whether the quota is in [`shadow`](Self::shadow) mode.
    pub fn is_shadow(&self) -> bool {
        self.shadow
    }

    /// Whether a name was set with [`name`](Self::name).
    pub(crate) fn has_name(&self) -> bool {
        self.name.is_some()
    }

    /// The burst set with [`burst`](Self::burst), if any.
    pub(crate) fn explicit_burst(&self) -> Option<u64> {
        self.burst
    }

    /// The name set with [`name`](Self::name), if any.
    pub(crate) fn explicit_name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The strategy.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The rate (for [`Strategy::Concurrency`]: the in-flight maximum and the lease timeout).
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// The limit a client sees: the burst for bucket strategies, the count otherwise.
    pub fn limit(&self) -> u64 {
        self.burst.unwrap_or(self.rate.count())
    }

    /// The quota's name (explicit or derived).
    pub fn quota_name(&self) -> String {
        match &self.name {
            Some(n) => n.clone(),
            None => format!(
                "{}-{}-per-{}",
                self.kind().spec().tag,
                self.rate.count(),
                period_label(self.rate.period())
            ),
        }
    }

    /// Validates and compiles the quota for the stores; `i` is its position.
    #[cfg(test)]
    pub(crate) fn compile(&self, i: usize) -> Result<QuotaSpec, ConfigError> {
        self.compile_in(i, false)
    }

    /// [`compile`](Self::compile), for a limiter whose limits change at run
    /// time if `runtime`: an unnamed quota is then known by its strategy and
    /// period alone (`<tag><period>`), so that a new count or burst keeps
    /// what callers used, as a named quota's does.
    pub(crate) fn compile_in(&self, i: usize, runtime: bool) -> Result<QuotaSpec, ConfigError> {
        let field = |f: &str| format!("quota[{i}].{f}");
        let count = self.rate.count();
        if count == 0 {
            return Err(ConfigError::new(field("rate.count"), "must be at least 1"));
        }
        if count > MAX_COUNT {
            return Err(ConfigError::new(
                field("rate.count"),
                format!("must be at most {MAX_COUNT}"),
            ));
        }
        if self.aligned && self.strategy != Strategy::FixedWindow {
            return Err(ConfigError::new(
                field("aligned"),
                format!(
                    "only a fixed-window quota can be aligned to the epoch, not {}{}",
                    self.strategy,
                    if self.strategy == Strategy::SlidingWindowCounter {
                        " (its windows are aligned already)"
                    } else {
                        ""
                    }
                ),
            ));
        }
        let windows = self
            .windows()
            .map_err(|m| ConfigError::new(field("calendar"), m))?;
        let kind = self.kind();
        let spec = kind.spec();
        if self.shadow && spec.holds_leases {
            return Err(ConfigError::new(
                field("shadow"),
                format!(
                    "a {} quota cannot be shadow: a lease held in shadow mode would still keep others out",
                    self.strategy
                ),
            ));
        }
        if let Some(bound) = &spec.count_bound
            && count > bound.max
        {
            let reason = bound.reason.replace("{max}", &bound.max.to_string());
            let hint = if bound.suggest_counter {
                "; use SlidingWindowCounter (O(1) memory) for larger counts"
            } else {
                ""
            };
            return Err(ConfigError::new(
                field("rate.count"),
                format!("{} {reason}, got {count}{hint}", spec.name),
            ));
        }
        let period_us = u64::try_from(self.rate.period().as_micros()).unwrap_or(u64::MAX);
        if period_us == 0 {
            return Err(ConfigError::new(
                field(spec.period_field),
                "must be at least 1 microsecond",
            ));
        }
        if period_us > MAX_PERIOD_US {
            return Err(ConfigError::new(
                field(spec.period_field),
                "must be at most 366 days",
            ));
        }
        let burst = match self.burst {
            None => count,
            Some(b) if spec.takes_burst => {
                if b == 0 {
                    return Err(ConfigError::new(field("burst"), "must be at least 1"));
                }
                if b > MAX_COUNT {
                    return Err(ConfigError::new(
                        field("burst"),
                        format!("must be at most {MAX_COUNT}"),
                    ));
                }
                b
            }
            Some(_) => {
                let mut takers: Vec<&str> = Strategy::ALL
                    .iter()
                    .filter(|s| s.spec().takes_burst)
                    .map(|s| s.as_str())
                    .collect();
                let last = takers.pop().unwrap_or_default();
                return Err(ConfigError::new(
                    field("burst"),
                    format!(
                        "{} has no burst; use {} or {last}",
                        self.strategy,
                        takers.join(", ")
                    ),
                ));
            }
        };
        let name = self.quota_name();
        validate_name(&name).map_err(|m| ConfigError::new(field("name"), m))?;
        // The emission interval, rounded up so the configured rate is never exceeded.
        let interval_us = period_us.div_ceil(count);
        if burst
            .checked_mul(interval_us)
            .is_none_or(|t| t > MAX_PERIOD_US * 4)
        {
            return Err(ConfigError::new(
                field("burst"),
                "burst times (period / count) must stay below 4 years",
            ));
        }
        // Unnamed `<tag><count>/<period>`, named `<tag><period>/<name>` or
        // `<tag>/<name>`: the character before the first '/' is a digit only
        // in the first form. A named quota keeps its state across a change of
        // count (every strategy's state means the same under any count), and
        // of period where its state means the same under any period too
        // (`StrategySpec::period_in_named_key`). An unnamed quota of runtime
        // limits (a plan's) is `<tag><period>`, without '/': known by its
        // strategy and period, it keeps its state across a change of count
        // or burst (a new period makes it another quota).
        let (tag, period) = match &windows {
            // (`month@Europe.Paris`: the zone's '/' kept out of the key's)
            #[cfg(feature = "calendar")]
            Some(w) => (
                spec.key_tag,
                format!("{}@{}", w.unit().as_str(), w.name.replace('/', ".")),
            ),
            _ => (spec.key_tag, compact_period(period_us)),
        };
        let key_id = match &self.name {
            Some(name) if spec.period_in_named_key => format!("{tag}{period}/{name}"),
            Some(name) => format!("{tag}/{name}"),
            None if runtime => format!("{tag}{period}"),
            None => format!("{tag}{count}/{period}"),
        };
        Ok(QuotaSpec {
            strategy: self.strategy,
            kind,
            key_id,
            limit: count,
            period_us,
            burst,
            interval_us,
            params: Params::new(count, period_us, burst, interval_us),
            name,
            // (its interval may change under one key: stored beside its state)
            named: self.name.is_some() || runtime,
            rate: self.rate,
            shadow: self.shadow,
            calendar: windows,
            quota: self.clone(),
        })
    }

    /// The calendar's windows, resolved; `Err`: why the quota cannot have
    /// them (the build error's message).
    fn windows(&self) -> Result<Option<Windows>, String> {
        #[cfg(feature = "calendar")]
        if let Some(calendar) = &self.calendar {
            if self.strategy != Strategy::FixedWindow {
                return Err(format!(
                    "only a fixed-window quota can follow a calendar, not {}",
                    self.strategy
                ));
            }
            if self.aligned {
                return Err("a calendar window is aligned to its calendar; drop aligned".to_owned());
            }
            return calendar.resolve().map(Some);
        }
        Ok(None)
    }
}

/// The period in a derived name: distinct periods (to the microsecond, the
/// resolution of every strategy) get distinct labels.
fn period_label(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if d.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}us", d.as_micros())
    }
}

/// The period in a storage key: the largest unit that divides it exactly
/// (`1h`, `90s`, `1500ms`, `7us`), so distinct periods stay distinct.
fn compact_period(us: u64) -> String {
    const UNITS: [(u64, &str); 6] = [
        (86_400_000_000, "d"),
        (3_600_000_000, "h"),
        (60_000_000, "m"),
        (1_000_000, "s"),
        (1_000, "ms"),
        (1, "us"),
    ];
    let (size, unit) = UNITS
        .into_iter()
        .find(|(size, _)| us.is_multiple_of(*size))
        .unwrap_or((1, "us"));
    format!("{}{unit}", us / size)
}

/// A bare rate is a [`Quota::gcra`] at that rate (the strategy most limits
/// want: smooth, one key, bursts up to the rate's count), named after it,
/// e.g. `gcra-10-per-60s`; so that a list from
/// [`Rate::parse_list`](crate::Rate::parse_list) goes straight into
/// [`RateLimiterBuilder::quotas`](crate::limiter::RateLimiterBuilder::quotas).
impl From<Rate> for Quota {
    fn from(rate: Rate) -> Self {
        Quota::gcra(rate)
    }
}

fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > 64 {
        return Err(format!("must be at most 64 bytes, got {}", name.len()));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(format!(
            "{name:?} contains {c:?}; use ASCII letters, digits, '-', '_' or '.'"
        ));
    }
    Ok(())
}

/// A validated quota, as the stores see it. All times in microseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QuotaSpec {
    pub(crate) strategy: Strategy,
    /// What the stores run: the strategy, or its aligned variant.
    pub(crate) kind: Kind,
    /// The rate's count (in-flight maximum for concurrency).
    pub(crate) limit: u64,
    /// The rate's period (lease timeout for concurrency).
    pub(crate) period_us: u64,
    /// Bucket / queue size; equals `limit` where the strategy has no burst.
    pub(crate) burst: u64,
    /// `ceil(period / limit)`.
    pub(crate) interval_us: u64,
    /// The numbers above as the strategy reads them, computed once here.
    pub(crate) params: Params,
    pub(crate) name: String,
    /// Whether the quota was [named](Quota::name), or is a plan's (runtime
    /// limits): its key is then kept across changes of its rate, so its
    /// state says what rate it was written under where the strategy needs
    /// that (`lua/tat.lua`).
    pub(crate) named: bool,
    /// The quota's part of its storage keys (after `{<prefix>:<key>}:`): the
    /// strategy's key tag, then the rate (`r60/1m`) or, for a named quota,
    /// the name (`r/minute`), after the period where the strategy's state
    /// holds only under it (`f1m/minute`). Two quotas share state exactly
    /// when these are equal (and the prefix is).
    pub(crate) key_id: String,
    pub(crate) rate: Rate,
    /// [`Quota::shadow`]: checked and counted, never denies. Not part of
    /// `key_id`: turning it off keeps the state.
    pub(crate) shadow: bool,
    /// A calendar quota's windows ([`Quota::calendar`]): its numbers then
    /// depend on the time ([`params_at`](Self::params_at)).
    pub(crate) calendar: Option<Windows>,
    /// The quota as configured ([`RateLimiter::quotas`](crate::RateLimiter::quotas)).
    pub(crate) quota: Quota,
}

impl QuotaSpec {
    /// The numbers a decision at `now` (µs, the clock the bounds are
    /// computed on) reads: [`params`](Self::params), and for a calendar
    /// quota the bounds of the window that holds `now` and the next's, as
    /// `lua/fixed_window_calendar.lua` reads them (`period`: the window's
    /// end; `burst`: the lengths of it and the next in seconds, the first
    /// shifted by 25 bits).
    #[inline]
    pub(crate) fn params_at(&self, now: i64) -> Params {
        match &self.calendar {
            None => self.params,
            Some(w) => {
                let [a, b, c] = w.around(now);
                let secs = |us: i64| (us / 1_000_000).clamp(0, (1 << 25) - 1);
                Params {
                    period: b,
                    burst: (secs(b - a) << 25) + secs(c - b),
                    ..self.params
                }
            }
        }
    }

    /// The strategy's facts.
    pub(crate) fn spec(&self) -> &'static StrategySpec {
        self.kind.spec()
    }

    /// The emission interval as the scripts take it: negative for a named
    /// quota, whose TAT strategies then keep the interval beside the TAT
    /// (`lua/tat.lua`; the other strategies never read it).
    pub(crate) fn script_interval(&self) -> i64 {
        let i = self.interval_us as i64;
        if self.named { -i } else { i }
    }

    /// The capacity a single request's cost is compared with.
    pub(crate) fn capacity(&self) -> u64 {
        if self.spec().takes_burst {
            self.burst
        } else {
            self.limit
        }
    }

    /// The largest cost one call may ask of the quota (a larger one never
    /// fits): its capacity, and no more than
    /// [`Quota::MAX_LEASES_PER_CALL`] for a quota that holds leases.
    pub(crate) fn max_cost(&self) -> u64 {
        if self.spec().holds_leases {
            self.capacity().min(Quota::MAX_LEASES_PER_CALL)
        } else {
            self.capacity()
        }
    }

    /// How many entries a call of `cost` writes to the quota's state if
    /// admitted: `cost` for a strategy that keeps one entry per unit (a
    /// sliding log's times, leases), else none that grow with it.
    pub(crate) fn entries_of(&self, cost: u64) -> u64 {
        if self.spec().count_bound.is_some() {
            cost
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_quotas_naming_the_field() {
        let cases = [
            (Quota::gcra(Rate::per_second(0)), "quota[0].rate.count"),
            (
                Quota::gcra(Rate::new(1, Duration::ZERO)),
                "quota[0].rate.period",
            ),
            (Quota::gcra(Rate::per_second(1)).burst(0), "quota[0].burst"),
            (
                Quota::fixed_window(Rate::per_second(1)).burst(3),
                "quota[0].burst",
            ),
            (
                Quota::concurrency(2).lease_timeout(Duration::ZERO),
                "quota[0].lease_timeout",
            ),
            (Quota::gcra(Rate::per_second(1)).name(""), "quota[0].name"),
            (Quota::concurrency(2).shadow(true), "quota[0].shadow"),
            (
                Quota::gcra(Rate::per_second(1)).aligned(),
                "quota[0].aligned",
            ),
            (
                Quota::sliding_window_counter(Rate::per_second(1)).aligned(),
                "quota[0].aligned",
            ),
            (
                Quota::gcra(Rate::per_second(1)).name("a{b}"),
                "quota[0].name",
            ),
            (
                Quota::gcra(Rate::new(1, Duration::from_secs(400 * 86_400))),
                "quota[0].rate.period",
            ),
            (
                Quota::concurrency(1).lease_timeout(Duration::from_secs(400 * 86_400)),
                "quota[0].lease_timeout",
            ),
        ];
        for (q, field) in cases {
            let e = q.compile(0).unwrap_err();
            assert_eq!(e.field(), field, "{e}");
            assert!(e.to_string().contains(field));
        }
    }

    #[test]
    fn derives_names_and_intervals() {
        let q = Quota::gcra(Rate::per_minute(60)).compile(0).unwrap();
        assert_eq!(q.name, "gcra-60-per-60s");
        assert_eq!(q.interval_us, 1_000_000);
        let q = Quota::gcra(Rate::per_second(3)).compile(0).unwrap();
        assert_eq!(q.interval_us, 333_334);
    }

    #[test]
    fn storage_ids_are_short_and_distinct_per_strategy_rate_or_name() {
        let id = |q: Quota| q.compile(0).unwrap().key_id;
        assert_eq!(id(Quota::gcra(Rate::per_minute(60))), "r60/1m");
        assert_eq!(id(Quota::fixed_window(Rate::per_hour(1000))), "f1000/1h");
        assert_eq!(id(Quota::sliding_window_log(Rate::per_day(5))), "l5/1d");
        assert_eq!(
            id(Quota::token_bucket(Rate::per_second(3)).burst(9)),
            "k3/1s"
        );
        let odd = Rate::new(7, Duration::from_micros(1_500_001));
        assert_eq!(id(Quota::leaky_bucket(odd)), "q7/1500001us");
        assert_eq!(
            id(Quota::sliding_window_counter(Rate::new(
                2,
                Duration::from_millis(1500)
            ))),
            "c2/1500ms"
        );
        assert_eq!(id(Quota::concurrency(8)), "n8/1m");
        // a named quota keeps its key across changes of rate, and of period
        // where its state means the same under any period
        let named = |r: Rate| id(Quota::gcra(r).name("minute"));
        assert_eq!(named(Rate::per_minute(60)), "r/minute");
        assert_eq!(named(Rate::per_minute(90)), "r/minute");
        assert_eq!(named(Rate::per_hour(60)), "r/minute");
        let window = |r: Rate| id(Quota::fixed_window(r).name("minute"));
        assert_eq!(window(Rate::per_minute(60)), "f1m/minute");
        assert_eq!(window(Rate::per_minute(90)), "f1m/minute");
        assert_eq!(window(Rate::per_hour(60)), "f1h/minute");
        let counter = |r: Rate| id(Quota::sliding_window_counter(r).name("m"));
        assert_eq!(counter(Rate::per_hour(60)), "c1h/m");
        assert_eq!(
            id(Quota::sliding_window_log(Rate::per_hour(6)).name("m")),
            "l/m"
        );
        assert_eq!(
            id(Quota::concurrency(8)
                .lease_timeout(Duration::from_secs(5))
                .name("m")),
            "n/m"
        );
        // an aligned window never shares state with an unaligned one of the
        // same numbers; a named one keeps its key when its count changes
        assert_eq!(
            id(Quota::fixed_window(Rate::per_hour(1000)).aligned()),
            "a1000/1h"
        );
        let aligned = |r: Rate| id(Quota::fixed_window(r).name("minute").aligned());
        assert_eq!(aligned(Rate::per_minute(60)), "a1m/minute");
        assert_eq!(aligned(Rate::per_minute(90)), "a1m/minute");
        assert_eq!(aligned(Rate::per_hour(60)), "a1h/minute");
        let runtime = |q: Quota| q.compile_in(0, true).unwrap().key_id;
        assert_eq!(
            runtime(Quota::fixed_window(Rate::per_minute(5)).aligned()),
            "a1m"
        );
        assert_eq!(runtime(Quota::fixed_window(Rate::per_minute(5))), "f1m");
        let q = Quota::fixed_window(Rate::per_minute(60)).aligned();
        assert_eq!(q.quota_name(), "fwa-60-per-60s");
        assert_eq!(q.bound(), Bound::AlignedWindow);
        assert_eq!(
            Quota::fixed_window(Rate::per_minute(60)).bound(),
            Bound::Window
        );
        // shadow mode is no part of the storage key: turning it off keeps the state
        assert_eq!(
            id(Quota::gcra(Rate::per_minute(60))
                .name("minute")
                .shadow(true)),
            "r/minute"
        );
        assert_eq!(id(Quota::gcra(Rate::per_minute(60)).shadow(true)), "r60/1m");
        // periods equal in one unit and not in another stay distinct
        assert_ne!(
            id(Quota::gcra(Rate::new(1, Duration::from_secs(90)))),
            id(Quota::gcra(Rate::new(1, Duration::from_secs(60) * 90)))
        );
        assert_eq!(
            id(Quota::gcra(Rate::new(1, Duration::from_secs(90)))),
            "r1/90s"
        );
    }
}
