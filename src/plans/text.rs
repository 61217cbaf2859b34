//! The text notation of quotas, plans and plan sets: what `Display` writes
//! and `FromStr` reads (and what a shared store keeps).
//!
//! - a quota: `<strategy> <rate> [burst=<n>] [name=<name>] [aligned]
//!   [shadow]`, e.g. `gcra 60/min burst=10 name=minute`,
//!   `fixed-window 1000/day name=day`, `fixed-window 100/min aligned`,
//!   `concurrency 8/60s` (8 in flight, leases of 60 s); a bare rate
//!   (`60/min`) is a GCRA quota at that rate, as everywhere;
//! - a plan: its quotas separated by `;`, or `unlimited`, optionally
//!   preceded by `shadow;`;
//! - a plan set: one `default <name>` line, then `plan <name>: <plan>` lines.

use std::fmt;
use std::str::FromStr;

use super::config::{Plan, PlansConfig};
use crate::error::ConfigError;
use crate::quota::Quota;
use crate::rate::Rate;
use crate::strategy::Strategy;

impl fmt::Display for Quota {
    /// The text notation, e.g. `gcra 60/min burst=10 name=minute`; it parses back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.strategy(), self.rate())?;
        if let Some(burst) = self.explicit_burst() {
            write!(f, " burst={burst}")?;
        }
        if let Some(name) = self.explicit_name() {
            write!(f, " name={name}")?;
        }
        if self.is_aligned() {
            f.write_str(" aligned")?;
        }
        #[cfg(feature = "calendar")]
        if let Some(calendar) = self.calendar_window() {
            write!(f, " calendar={calendar}")?;
        }
        if self.is_shadow() {
            f.write_str(" shadow")?;
        }
        Ok(())
    }
}

impl FromStr for Quota {
    type Err = ConfigError;

    /// Parses the text notation: `gcra 60/min burst=10 name=minute`, or a
    /// bare rate (`60/min`, a GCRA quota). Errors name the part at fault
    /// (`strategy`, `rate`, `burst`, `name`). Values are checked when a
    /// limiter is built.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.is_empty() {
            return Err(ConfigError::new("rate", "empty quota"));
        }
        let (first, rest) = s.split_once(char::is_whitespace).unwrap_or((s, ""));
        let (strategy, rest) = match first.parse::<Strategy>() {
            Ok(strategy) => (strategy, rest),
            Err(e)
                if first
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic()) =>
            {
                return Err(ConfigError::new("strategy", e.to_string()));
            }
            Err(_) => (Strategy::Gcra, s),
        };
        let mut rate = Vec::new();
        let mut burst = None;
        let mut name = None;
        let mut shadow = false;
        let mut aligned = false;
        #[cfg(feature = "calendar")]
        let mut calendar = None;
        // (each option once: a second one would silently win)
        let twice = |option: &str| {
            ConfigError::new(option, format!("{option} is given twice; give it once"))
        };
        for word in rest.split_whitespace() {
            if word == "shadow" {
                if shadow {
                    return Err(twice("shadow"));
                }
                shadow = true;
                continue;
            }
            if word == "aligned" {
                if aligned {
                    return Err(twice("aligned"));
                }
                aligned = true;
                continue;
            }
            match word.split_once('=') {
                Some(("burst", v)) => {
                    if burst.is_some() {
                        return Err(twice("burst"));
                    }
                    burst = Some(v.parse::<u64>().map_err(|e| {
                        ConfigError::new("burst", format!("{v:?} is not a count: {e}"))
                    })?);
                }
                Some(("name", v)) => {
                    if name.is_some() {
                        return Err(twice("name"));
                    }
                    name = Some(v.to_owned());
                }
                #[cfg(feature = "calendar")]
                Some(("calendar", v)) => {
                    if calendar.is_some() {
                        return Err(twice("calendar"));
                    }
                    calendar = Some(parse_calendar(v)?);
                }
                Some((k, _)) => {
                    return Err(ConfigError::new(
                        k,
                        format!(
                            "unknown option {k:?}; expected burst=<n>, name=<name>, aligned or shadow"
                        ),
                    ));
                }
                None => rate.push(word),
            }
        }
        let rate = rate.join(" ");
        let rate: Rate = rate
            .parse()
            .map_err(|e| ConfigError::new("rate", format!("{e}")))?;
        let mut quota = Quota::new(strategy, rate);
        if let Some(b) = burst {
            quota = quota.burst(b);
        }
        if let Some(n) = name {
            quota = quota.name(n);
        }
        if aligned {
            quota = quota.aligned();
        }
        #[cfg(feature = "calendar")]
        if let Some(c) = calendar {
            quota = quota.calendar(c);
        }
        Ok(quota.shadow(shadow))
    }
}

/// `<unit>@<zone>`: `month@Europe/Paris`, `year@UTC`.
#[cfg(feature = "calendar")]
pub(super) fn parse_calendar(v: &str) -> Result<crate::quota::calendar::Calendar, ConfigError> {
    let bad = || {
        ConfigError::new(
            "calendar",
            format!(
                "{v:?} is not a calendar; expected month@<zone> or year@<zone>, e.g. month@Europe/Paris"
            ),
        )
    };
    let (unit, zone) = v.split_once('@').ok_or_else(bad)?;
    let unit = match unit {
        "month" => crate::quota::calendar::CalendarUnit::Month,
        "year" => crate::quota::calendar::CalendarUnit::Year,
        _ => return Err(bad()),
    };
    Ok(crate::quota::calendar::Calendar::new(unit, zone))
}

impl fmt::Display for Plan {
    /// The text notation: quotas separated by `; `, or `unlimited`, after
    /// `shadow; ` for a plan in shadow mode.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.shadow {
            f.write_str("shadow; ")?;
        }
        if self.unlimited {
            return f.write_str("unlimited");
        }
        for (i, q) in self.quotas.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{q}")?;
        }
        Ok(())
    }
}

impl FromStr for Plan {
    type Err = ConfigError;

    /// Parses `gcra 60/min name=minute; fixed-window 1000/day name=day`,
    /// `unlimited`, or either after `shadow;`. Errors name the quota at
    /// fault, e.g. `quotas[1].rate`. `shadow` is only first: after a quota
    /// it would read as that quota's, and silently make the whole plan
    /// never deny (a quota of its own in shadow is `… shadow`, without `;`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut plan = Plan::new(Vec::<Quota>::new());
        let mut i = 0;
        for (n, part) in s
            .split(';')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .enumerate()
        {
            match part {
                "shadow" if n == 0 => plan.shadow = true,
                "shadow" => {
                    return Err(ConfigError::new(
                        "shadow",
                        "a plan's `shadow;` comes first (it puts the whole plan in shadow \
                         mode); for one quota in shadow, write `shadow` after that quota, \
                         without `;`",
                    ));
                }
                "unlimited" if plan.unlimited => {
                    return Err(ConfigError::new("unlimited", "unlimited is given twice"));
                }
                "unlimited" => plan.unlimited = true,
                _ => {
                    let q = part
                        .parse::<Quota>()
                        .map_err(|e| e.within(&format!("quotas[{i}]")))?;
                    plan.quotas.push(q);
                    i += 1;
                }
            }
        }
        if plan.unlimited && !plan.quotas.is_empty() {
            return Err(ConfigError::new(
                "unlimited",
                "an unlimited plan has no quotas",
            ));
        }
        Ok(plan)
    }
}

impl fmt::Display for PlansConfig {
    /// The text notation: `default <name>`, then one `plan <name>: <plan>`
    /// line per plan.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "default {}", self.default)?;
        for (name, plan) in &self.plans {
            writeln!(f, "plan {name}: {plan}")?;
        }
        Ok(())
    }
}

impl FromStr for PlansConfig {
    type Err = ConfigError;

    /// Parses what [`Display`](fmt::Display) writes. Errors name the field,
    /// e.g. `plans.pro.quotas[1].rate`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut config = PlansConfig::new("");
        let mut default = None;
        for (n, line) in s.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(name) = line.strip_prefix("default ") {
                if default.is_some() {
                    return Err(ConfigError::new(
                        format!("line {}", n + 1),
                        "a second `default` line; keep one",
                    ));
                }
                default = Some(name.trim().to_owned());
            } else if let Some(rest) = line.strip_prefix("plan ") {
                let Some((name, plan)) = rest.split_once(':') else {
                    return Err(ConfigError::new(
                        format!("line {}", n + 1),
                        "expected `plan <name>: <quotas>`",
                    ));
                };
                let name = name.trim();
                let plan = plan
                    .parse::<Plan>()
                    .map_err(|e| e.within(&format!("plans.{name}")))?;
                if config.plans.insert(name.to_owned(), plan).is_some() {
                    return Err(ConfigError::new(
                        format!("plans.{name}"),
                        format!("plan {name:?} is given twice (line {})", n + 1),
                    ));
                }
            } else {
                return Err(ConfigError::new(
                    format!("line {}", n + 1),
                    "expected `default <name>` or `plan <name>: <quotas>`",
                ));
            }
        }
        config.default =
            default.ok_or_else(|| ConfigError::new("default", "no `default <plan>` line"))?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A trailing `shadow` put the whole plan in shadow mode (it never
    /// denied), and a second `burst=`/`name=` silently won.
    #[test]
    fn a_plans_shadow_is_first_and_every_option_is_given_once() {
        let e = "60/min; 1000/day; shadow".parse::<Plan>().unwrap_err();
        assert_eq!(e.field(), "shadow", "{e}");
        let plan: Plan = "shadow; 60/min; 1000/day shadow".parse().unwrap();
        assert!(plan.shadow);
        assert_eq!(plan.quotas.len(), 2);
        assert!(plan.quotas[1].is_shadow() && !plan.quotas[0].is_shadow());
        for (text, field) in [
            ("gcra 60/min burst=5 burst=50", "quotas[0].burst"),
            ("gcra 60/min name=a name=b", "quotas[0].name"),
            ("gcra 60/min shadow shadow", "quotas[0].shadow"),
            ("fixed-window 60/min aligned aligned", "quotas[0].aligned"),
            ("unlimited; unlimited", "unlimited"),
            ("shadow; shadow; 60/min", "shadow"),
        ] {
            let e = text.parse::<Plan>().unwrap_err();
            assert_eq!(e.field(), field, "{text}: {e}");
        }
    }

    #[test]
    fn a_plan_or_a_default_given_twice_is_an_error() {
        let twice = "default free\nplan free: 5/min\nplan free: 1000/min\n";
        let e = twice.parse::<PlansConfig>().unwrap_err();
        assert_eq!(e.field(), "plans.free");
        let e = "default free\ndefault pro\nplan free: 5/min\n"
            .parse::<PlansConfig>()
            .unwrap_err();
        assert_eq!(e.field(), "line 2");
        assert!(
            "default free\nplan free: 5/min\n"
                .parse::<PlansConfig>()
                .is_ok()
        );
    }

    #[test]
    fn quotas_round_trip_through_the_text_notation() {
        for q in [
            Quota::gcra(Rate::per_minute(60)).burst(10).name("minute"),
            Quota::fixed_window(Rate::per_day(1_000)).name("day"),
            Quota::sliding_window_log(Rate::new(5, Duration::from_millis(1500))),
            Quota::concurrency(8).lease_timeout(Duration::from_secs(30)),
            Quota::token_bucket(Rate::per_second(3)),
            Quota::gcra(Rate::per_hour(100)).name("new").shadow(true),
            Quota::fixed_window(Rate::per_minute(100)).aligned(),
            Quota::fixed_window(Rate::per_day(10))
                .name("day")
                .aligned()
                .shadow(true),
        ] {
            let text = q.to_string();
            assert_eq!(text.parse::<Quota>().unwrap(), q, "{text}");
        }
        #[cfg(feature = "calendar")]
        for c in [
            crate::quota::calendar::Calendar::month("Europe/Paris"),
            crate::quota::calendar::Calendar::year("UTC"),
        ] {
            let q = Quota::fixed_window(Rate::per_day(5)).name("m").calendar(c);
            let text = q.to_string();
            assert_eq!(text.parse::<Quota>().unwrap(), q, "{text}");
        }
        assert_eq!(
            "60/min".parse::<Quota>().unwrap(),
            Quota::gcra(Rate::per_minute(60))
        );
        assert_eq!(
            "leaky-bucket 5 per 2 hours burst=3"
                .parse::<Quota>()
                .unwrap(),
            Quota::leaky_bucket(Rate::new(5, Duration::from_secs(7200))).burst(3)
        );
    }

    #[test]
    fn bad_quotas_name_the_part_at_fault() {
        let field = |s: &str| s.parse::<Quota>().unwrap_err().field().to_owned();
        assert_eq!(field("gcr 60/min"), "strategy");
        assert_eq!(field("gcra 60/fortnight"), "rate");
        assert_eq!(field("gcra 60/min burst=x"), "burst");
        assert_eq!(field("gcra 60/min colour=red"), "colour");
        let e = "plan free: 60/min; gcra 10/eon\ndefault free"
            .parse::<PlansConfig>()
            .unwrap_err();
        assert_eq!(e.field(), "plans.free.quotas[1].rate");
    }
}
