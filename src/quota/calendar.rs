//! [`Calendar`]: fixed windows that follow the calendar of a time zone
//! ([`Quota::calendar`](crate::Quota::calendar), feature `calendar`).

use std::fmt;
use std::time::Duration;

use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

/// A calendar window's length: a month or a year of a time zone's calendar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CalendarUnit {
    /// From local midnight on the 1st of a month to local midnight on the
    /// 1st of the next: 28 to 31 days, give or take a DST change.
    Month,
    /// From local midnight on January 1st to the next.
    Year,
}

impl CalendarUnit {
    /// `month` or `year`.
    pub const fn as_str(self) -> &'static str {
        match self {
            CalendarUnit::Month => "month",
            CalendarUnit::Year => "year",
        }
    }

    /// The longest window of the unit (31 days, 366 days): the period of
    /// a calendar quota's [`Rate`](crate::Rate) and its `RateLimit-Policy`'s `w`.
    pub const fn longest(self) -> Duration {
        match self {
            CalendarUnit::Month => Duration::from_secs(31 * 86_400),
            CalendarUnit::Year => Duration::from_secs(366 * 86_400),
        }
    }
}

/// Windows of a [`Quota::fixed_window`](crate::Quota::fixed_window) that
/// follow the calendar of a named IANA time zone: a month or a year that
/// starts at local midnight on the 1st (see
/// [`Quota::calendar`](crate::Quota::calendar) for the exact semantics).
///
/// The zone is resolved at build, from the tz database compiled into the
/// crate (jiff's bundled copy: the host's `/usr/share/zoneinfo` is never
/// read, so every host decides alike); a name it does not know is rejected
/// there (`quota[i].calendar`).
///
/// ```
/// use tower_redis_ratelimit::{Calendar, CalendarUnit};
///
/// let month = Calendar::month("Europe/Paris");
/// assert_eq!(month.unit(), CalendarUnit::Month);
/// assert_eq!(month.to_string(), "month@Europe/Paris");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Calendar {
    unit: CalendarUnit,
    time_zone: String,
}

impl Calendar {
    /// Windows of `unit` in the zone named `time_zone` (`Europe/Paris`,
    /// `UTC`).
    pub fn new(unit: CalendarUnit, time_zone: impl Into<String>) -> Self {
        Calendar {
            unit,
            time_zone: time_zone.into(),
        }
    }

    /// Calendar months in `time_zone`.
    pub fn month(time_zone: impl Into<String>) -> Self {
        Calendar::new(CalendarUnit::Month, time_zone)
    }

    /// Calendar years in `time_zone`.
    pub fn year(time_zone: impl Into<String>) -> Self {
        Calendar::new(CalendarUnit::Year, time_zone)
    }

    /// The unit.
    pub fn unit(&self) -> CalendarUnit {
        self.unit
    }

    /// The zone's name as given.
    pub fn time_zone(&self) -> &str {
        &self.time_zone
    }

    /// Whether the zone is in the compiled-in database; `Err`: why not
    /// (the message of the build error `quota[i].calendar`).
    pub fn validate(&self) -> Result<(), String> {
        self.resolve().map(|_| ())
    }

    /// The zone, from the compiled-in database: its canonical name, or why not.
    pub(crate) fn resolve(&self) -> Result<Windows, String> {
        let tz = jiff::tz::db().get(&self.time_zone).map_err(|_| {
            format!(
                "unknown time zone {:?}; use an IANA name such as \"Europe/Paris\" or \"UTC\"",
                self.time_zone
            )
        })?;
        let name = tz.iana_name().unwrap_or(&self.time_zone).to_owned();
        Ok(Windows {
            unit: self.unit,
            tz,
            name,
        })
    }
}

impl fmt::Display for Calendar {
    /// `<unit>@<zone>`, e.g. `month@Europe/Paris`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.unit.as_str(), self.time_zone)
    }
}

/// A resolved [`Calendar`]: computes the windows around an instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Windows {
    unit: CalendarUnit,
    tz: TimeZone,
    /// The zone's canonical name (the storage key's).
    pub(crate) name: String,
}

impl Windows {
    /// The unit.
    pub(crate) fn unit(&self) -> CalendarUnit {
        self.unit
    }

    /// The window that holds `now` (µs since the epoch) and the next:
    /// `[a, b)` and `[b, c)`, in µs since the epoch. `now` out of the
    /// database's range is clamped to it.
    pub(crate) fn around(&self, now: i64) -> [i64; 3] {
        let t = Timestamp::from_microsecond(now).unwrap_or(if now < 0 {
            Timestamp::MIN
        } else {
            Timestamp::MAX
        });
        let local = self.tz.to_datetime(t).date();
        let first = match self.unit {
            CalendarUnit::Month => local.first_of_month(),
            CalendarUnit::Year => local.first_of_year(),
        };
        let step = match self.unit {
            CalendarUnit::Month => 1.month(),
            CalendarUnit::Year => 1.year(),
        };
        let next = first.checked_add(step).unwrap_or(first);
        let after = next.checked_add(step).unwrap_or(next);
        [first, next, after].map(|d| self.midnight(d.to_datetime(jiff::civil::Time::midnight())))
    }

    /// The first instant of local `midnight`: after the gap if the zone
    /// skips it, its first occurrence if it repeats (jiff's `compatible`).
    fn midnight(&self, midnight: DateTime) -> i64 {
        self.tz
            .to_ambiguous_timestamp(midnight)
            .compatible()
            .map_or(i64::MAX / 2, |t| t.as_microsecond())
    }
}
