//! [`Rate`]: how many requests per how long, and its parser.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Largest count (or burst) a quota accepts: a rate may hold more, and
/// [`RateLimiterBuilder::build`](crate::limiter::RateLimiterBuilder::build) rejects it.
pub(crate) const MAX_COUNT: u64 = 1 << 40;

/// A number of requests per period, e.g. 60 per minute.
///
/// ```
/// use std::time::Duration;
/// use tower_redis_ratelimit::Rate;
///
/// assert_eq!(Rate::per_minute(60), Rate::new(60, Duration::from_secs(60)));
/// assert_eq!("60/min".parse::<Rate>().unwrap(), Rate::per_minute(60));
/// assert_eq!("5 per 2 hours".parse::<Rate>().unwrap(), Rate::new(5, Duration::from_secs(7200)));
/// ```
///
/// A zero count or a zero period is representable here (so that parsing and
/// `const` construction stay infallible) and rejected by
/// [`RateLimiterBuilder::build`](crate::limiter::RateLimiterBuilder::build) with an
/// error naming the quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    count: u64,
    period: Duration,
}

impl Rate {
    /// `count` requests per `period`.
    pub const fn new(count: u64, period: Duration) -> Self {
        Self { count, period }
    }

    /// `count` requests per second.
    pub const fn per_second(count: u64) -> Self {
        Self::new(count, Duration::from_secs(1))
    }

    /// `count` requests per minute.
    pub const fn per_minute(count: u64) -> Self {
        Self::new(count, Duration::from_secs(60))
    }

    /// `count` requests per hour.
    pub const fn per_hour(count: u64) -> Self {
        Self::new(count, Duration::from_secs(3600))
    }

    /// `count` requests per day (86 400 seconds).
    pub const fn per_day(count: u64) -> Self {
        Self::new(count, Duration::from_secs(86_400))
    }

    /// The number of requests allowed per period.
    pub const fn count(&self) -> u64 {
        self.count
    }

    /// The length of the period.
    pub const fn period(&self) -> Duration {
        self.period
    }

    /// Parses a list of rates separated by `;` or `,`, e.g. `"10/min; 1000/day"`.
    ///
    /// The list goes straight into
    /// [`RateLimiterBuilder::quotas`](crate::limiter::RateLimiterBuilder::quotas): each
    /// rate becomes a [`Quota::gcra`](crate::Quota::gcra) named after it.
    ///
    /// ```
    /// use tower_redis_ratelimit::{MemoryStore, Rate, RateLimiter};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let rates = Rate::parse_list("10/min; 1000/day")?;
    /// assert_eq!(rates, vec![Rate::per_minute(10), Rate::per_day(1000)]);
    ///
    /// let limiter = RateLimiter::builder()
    ///     .store(MemoryStore::new())
    ///     .quotas(rates)
    ///     .build()?;
    /// let names: Vec<&str> = limiter.quota_names().iter().map(|n| n.as_ref()).collect();
    /// assert_eq!(names, ["gcra-10-per-60s", "gcra-1000-per-86400s"]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn parse_list(s: &str) -> Result<Vec<Rate>, ParseRateError> {
        let mut out = Vec::new();
        let mut offset = 0;
        for part in s.split([';', ',']) {
            let lead = part.len() - part.trim_start().len();
            if !part.trim().is_empty() {
                out.push(parse_one(part.trim(), offset + lead)?);
            }
            offset += part.len() + 1;
        }
        if out.is_empty() {
            return Err(ParseRateError::new(s, 0, "empty rate list"));
        }
        Ok(out)
    }
}

impl fmt::Display for Rate {
    /// Formats as `count/period`, e.g. `60/min` or `5/7200s`; the output parses
    /// back (to the microsecond, the resolution of every strategy).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.period;
        if !p.subsec_nanos().is_multiple_of(1_000_000) {
            return write!(f, "{}/{}us", self.count, p.as_micros());
        }
        if p.subsec_nanos() != 0 {
            return write!(f, "{}/{}ms", self.count, p.as_millis());
        }
        match p.as_secs() {
            1 => write!(f, "{}/s", self.count),
            60 => write!(f, "{}/min", self.count),
            3600 => write!(f, "{}/hour", self.count),
            86_400 => write!(f, "{}/day", self.count),
            s => write!(f, "{}/{}s", self.count, s),
        }
    }
}

impl FromStr for Rate {
    type Err = ParseRateError;

    /// Parses `"10/s"`, `"100/minute"`, `"5 per 2 hours"`, `"20/30s"`, `"1/500ms"`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lead = s.len() - s.trim_start().len();
        parse_one(s.trim(), lead).map_err(|mut e| {
            e.input = s.to_owned();
            e
        })
    }
}

/// The period units the parser accepts, as listed in its error messages.
const UNITS: &str = "us (or µs, usec, micros, microsecond[s]), ms (msec, millis, millisecond[s]), \
                     s (sec, secs, second[s]), m (min, mins, minute[s]), h (hr, hrs, hour[s]) \
                     or d (day, days)";

/// Parses one rate; `at` is the byte offset of `s` within the original input.
fn parse_one(s: &str, at: usize) -> Result<Rate, ParseRateError> {
    let (count_part, period_part, sep_len) = if let Some(i) = s.find('/') {
        (&s[..i], &s[i + 1..], 1)
    } else if let Some(i) = find_word(s, "per") {
        (&s[..i], &s[i + 3..], 3)
    } else {
        return Err(ParseRateError::new(
            s,
            at,
            "expected `<count>/<period>` or `<count> per <period>`",
        ));
    };
    let count_str = count_part.trim();
    let count_at = at + (count_part.len() - count_part.trim_start().len());
    let digits = count_str.replace('_', "");
    let count: u64 = digits.parse().map_err(|e: std::num::ParseIntError| {
        if *e.kind() == std::num::IntErrorKind::PosOverflow {
            ParseRateError::new(
                s,
                count_at,
                format!(
                    "the count is too large: at most {} (and a quota takes at most {})",
                    u64::MAX,
                    MAX_COUNT
                ),
            )
        } else {
            ParseRateError::new(
                s,
                count_at,
                "the count must be a whole number, like `10` in `10/s`",
            )
        }
    })?;
    let period_at = at + count_part.len() + sep_len;
    let lead = period_part.len() - period_part.trim_start().len();
    let period = parse_period(period_part.trim())
        .map_err(|(offset, msg)| ParseRateError::new(s, period_at + lead + offset, msg))?;
    Ok(Rate::new(count, period))
}

fn find_word(s: &str, word: &str) -> Option<usize> {
    let lower = s.to_ascii_lowercase();
    let mut from = 0;
    while let Some(i) = lower[from..].find(word) {
        let i = from + i;
        let before = lower[..i].chars().next_back();
        let after = lower[i + word.len()..].chars().next();
        if before.is_none_or(char::is_whitespace) && after.is_none_or(char::is_whitespace) {
            return Some(i);
        }
        from = i + word.len();
    }
    None
}

/// Parses a period; an error carries the byte offset in `s` where it starts.
fn parse_period(s: &str) -> Result<Duration, (usize, std::borrow::Cow<'static, str>)> {
    if s.is_empty() {
        return Err((
            0,
            "missing period after the count, like `s`, `minute` or `2 hours`".into(),
        ));
    }
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (mult, unit, unit_at) = if digits == 0 {
        (1, s, 0)
    } else {
        let n: u64 = s[..digits].parse().map_err(|_| {
            (
                0,
                format!("the period multiplier is too large: at most {}", u64::MAX).into(),
            )
        })?;
        let rest = &s[digits..];
        let unit = rest.trim_start();
        (n, unit, digits + (rest.len() - unit.len()))
    };
    let unit_nanos: u128 = match unit.to_ascii_lowercase().as_str() {
        "us" | "µs" | "usec" | "micros" | "microsecond" | "microseconds" => 1_000,
        "ms" | "msec" | "millis" | "millisecond" | "milliseconds" => 1_000_000,
        "s" | "sec" | "secs" | "second" | "seconds" => 1_000_000_000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000_000_000,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000_000_000,
        "d" | "day" | "days" => 86_400_000_000_000,
        "" => {
            return Err((
                unit_at,
                "missing unit after the period number, like `s` in `30s`".into(),
            ));
        }
        _ => {
            // the Greek small letter mu looks like the micro sign µ
            let hint = if unit.starts_with('\u{3bc}') {
                " (`μ` here is the Greek letter mu, not the micro sign `µ`)"
            } else {
                ""
            };
            let mut shown: String = unit.chars().take(16).collect();
            if shown.len() < unit.len() {
                shown.push('…');
            }
            return Err((
                unit_at,
                format!("unknown period unit {shown:?}{hint}; use {UNITS}").into(),
            ));
        }
    };
    let nanos = unit_nanos
        .checked_mul(u128::from(mult))
        .filter(|n| *n <= u128::from(u64::MAX))
        .ok_or((0, "the period is too long".into()))?;
    Ok(Duration::from_nanos(nanos as u64))
}

/// A rate string that could not be parsed, with what is wrong and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseRateError {
    pub(crate) input: String,
    position: usize,
    message: Cow<'static, str>,
}

impl ParseRateError {
    pub(crate) fn new(input: &str, position: usize, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            input: input.to_owned(),
            position,
            message: message.into(),
        }
    }

    /// Byte offset in the input where the problem starts (always on a
    /// character boundary, so `&input[position..]` is the rest from there).
    pub fn position(&self) -> usize {
        self.position
    }
}

impl fmt::Display for ParseRateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid rate {:?} at byte {}: {}",
            self.input, self.position, self.message
        )
    }
}

impl std::error::Error for ParseRateError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        let cases = [
            ("10/s", Rate::per_second(10)),
            ("10/sec", Rate::per_second(10)),
            ("100/minute", Rate::per_minute(100)),
            ("100 / min", Rate::per_minute(100)),
            ("5 per 2 hours", Rate::new(5, Duration::from_secs(7200))),
            ("5 PER hour", Rate::per_hour(5)),
            ("1000/day", Rate::per_day(1000)),
            ("20/30s", Rate::new(20, Duration::from_secs(30))),
            ("1/500ms", Rate::new(1, Duration::from_millis(500))),
            ("1_000/h", Rate::per_hour(1000)),
        ];
        for (s, want) in cases {
            assert_eq!(s.parse::<Rate>().unwrap(), want, "{s}");
        }
    }

    #[test]
    fn display_round_trips() {
        for r in [
            Rate::per_second(3),
            Rate::per_minute(60),
            Rate::per_hour(1),
            Rate::per_day(9),
            Rate::new(7, Duration::from_secs(90)),
            Rate::new(7, Duration::from_millis(250)),
            Rate::new(1, Duration::from_micros(1_500)),
            Rate::new(1, Duration::from_micros(500)),
        ] {
            assert_eq!(r.to_string().parse::<Rate>().unwrap(), r);
        }
    }

    #[test]
    fn errors_say_what_and_where() {
        let e = "ten/s".parse::<Rate>().unwrap_err();
        assert_eq!(e.position(), 0);
        assert!(e.to_string().contains("whole number"), "{e}");
        let e = "10/fortnight".parse::<Rate>().unwrap_err();
        assert_eq!(e.position(), 3);
        assert!(e.to_string().contains("unknown period unit"), "{e}");
        let e = "10".parse::<Rate>().unwrap_err();
        assert!(e.to_string().contains("expected"), "{e}");
        let e = "10/".parse::<Rate>().unwrap_err();
        assert!(e.to_string().contains("missing period"), "{e}");
        let e = Rate::parse_list("10/min; 5/lightyear").unwrap_err();
        assert_eq!(e.position(), 10);
        assert!(Rate::parse_list(" ; ").is_err());
        assert!("99999999999999999999/day".parse::<Rate>().is_err());
        assert!("1/99999999999999999999days".parse::<Rate>().is_err());
        assert!("1/9999999999999days".parse::<Rate>().is_err());
    }

    #[test]
    fn parses_lists() {
        assert_eq!(
            Rate::parse_list("10/min; 1000/day").unwrap(),
            vec![Rate::per_minute(10), Rate::per_day(1000)]
        );
        assert_eq!(
            Rate::parse_list("1/s,2/s;").unwrap(),
            vec![Rate::per_second(1), Rate::per_second(2)]
        );
    }
}
