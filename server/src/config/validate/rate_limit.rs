//! A descriptor's `rate_limit`, read and checked into its [`Rule`]: its
//! fields in file order, then, in this order, the checks of an unlimited
//! limit or the period (a `duration`, or a `unit` times its
//! `unit_multiplier`), the `burst`, the `calendar`, what the library would
//! reject of the quota, and the `replaces` list.

use tower_redis_ratelimit::strategy::Strategy;
use tower_redis_ratelimit::{Calendar, CalendarUnit};
use tower_redis_ratelimit::{Quota, Rate};

use super::super::yaml::Node as Y;
use super::super::{Charge, ConfigError, Rule, Unit};
use super::fields::{Ctx, boolean, integer, join, list, map_entries, string};
use super::keys::misplaced;

/// Reads the `rate_limit` mapping `v` into `rule` (which has the node's
/// names and flags) and checks it.
pub(super) fn read_rate_limit(
    ctx: &mut Ctx<'_>,
    v: &Y,
    mut rule: Rule,
) -> Result<Rule, ConfigError> {
    let path = &rule.path.clone();
    let f = read_fields(ctx, v, path, &mut rule)?;
    let parsed_unit = f.unit.as_ref().and_then(|(u, _)| Unit::parse(u));
    if rule.unlimited {
        check_unlimited(ctx, path, &f, parsed_unit)?;
    } else if let Some((d, line)) = &f.duration {
        rule.period_us = duration_period(ctx, path, &f, d, *line)?;
    } else {
        unit_period(ctx, path, &f, parsed_unit, v.line, &mut rule)?;
    }
    check_burst(ctx, path, &f, &mut rule)?;
    rule.strategy = f.strategy.map(|s| s.0);
    if let Some((zone, line)) = &f.calendar
        && !rule.unlimited
    {
        rule.calendar = Some(calendar(ctx, path, &rule, zone, *line)?);
    }
    check_quota(ctx, path, &rule, f.count_line, f.burst.map_or(0, |b| b.1))?;
    if let Some(list_node) = f.replaces {
        read_replaces(ctx, path, list_node, &mut rule)?;
    }
    Ok(rule)
}

/// The fields of a `rate_limit` that later checks look at, each with its
/// line ([`read_fields`]).
struct Fields<'d> {
    /// `unit` as written, and the line of its value.
    unit: Option<(String, usize)>,
    /// `replaces`, not yet read.
    replaces: Option<&'d Y>,
    /// `strategy`, and the line of its key.
    strategy: Option<(Strategy, usize)>,
    /// `burst` (at least 1), and the line of its key.
    burst: Option<(u64, usize)>,
    /// `unit_multiplier` (at least 1), and the line of its key.
    multiplier: Option<(u32, usize)>,
    /// `duration` as written, and the line of its value.
    duration: Option<(String, usize)>,
    /// `calendar` as written, and the line of its key.
    calendar: Option<(String, usize)>,
    /// The line of `charge`'s key.
    charge_line: Option<usize>,
    /// The line of `requests_per_unit`'s key (the mapping's when absent).
    count_line: usize,
}

/// Reads the fields of `v`, in file order: into `rule` those it keeps as
/// they are (`requests_per_unit`, `unlimited`, `name`, `charge`), the
/// others for the checks that follow; another key is misplaced there.
fn read_fields<'d>(
    ctx: &mut Ctx<'_>,
    v: &'d Y,
    path: &str,
    rule: &mut Rule,
) -> Result<Fields<'d>, ConfigError> {
    let mut f = Fields {
        unit: None,
        replaces: None,
        strategy: None,
        burst: None,
        multiplier: None,
        duration: None,
        calendar: None,
        charge_line: None,
        count_line: v.line,
    };
    for (k, val) in map_entries(v) {
        let name = k.text().unwrap_or_default();
        let at = join(path, name);
        match name {
            "requests_per_unit" => {
                rule.requests_per_unit = integer(ctx, val, &at, u64::from(u32::MAX))? as u32;
                f.count_line = k.line;
            }
            "unit" => f.unit = Some((string(ctx, val, &at)?, val.line)),
            "unlimited" => rule.unlimited = boolean(ctx, val, &at)?,
            "name" => rule.name = string(ctx, val, &at)?,
            "replaces" => f.replaces = Some(val),
            "strategy" => f.strategy = Some((strategy(ctx, val, &at)?, k.line)),
            "burst" => f.burst = Some((positive(ctx, val, &at, u64::MAX)?, k.line)),
            "unit_multiplier" => {
                let m = positive(ctx, val, &at, u64::from(u32::MAX))?;
                f.multiplier = Some((m as u32, k.line));
            }
            "duration" => f.duration = Some((string(ctx, val, &at)?, val.line)),
            "calendar" => f.calendar = Some((string(ctx, val, &at)?, k.line)),
            "charge" => {
                rule.charge = Some(charge(ctx, val, &at)?);
                f.charge_line = Some(k.line);
            }
            _ => misplaced(ctx, name, path, k.line, "in a `rate_limit`")?,
        }
    }
    Ok(f)
}

/// `strategy`: one of the library's rate strategies by its name (not
/// `concurrency`, whose lease the protocol never gives back).
fn strategy(ctx: &Ctx<'_>, val: &Y, at: &str) -> Result<Strategy, ConfigError> {
    let s = string(ctx, val, at)?;
    let parsed = s.parse::<Strategy>().map_err(|_| {
        ctx.err(
            at,
            val.line,
            format!(
                "unknown strategy {s:?}: one of fixed-window, sliding-window-log, \
                 sliding-window-counter, token-bucket, leaky-bucket, gcra"
            ),
        )
    })?;
    if parsed == Strategy::Concurrency {
        // (a lease no call of the protocol ever gives back)
        return Err(ctx.err(
            at,
            val.line,
            "`concurrency` counts requests in flight until each is released, \
             and Envoy's rate limit protocol has no release: use a rate strategy",
        ));
    }
    Ok(parsed)
}

/// A whole number from 1 to `max` (`burst`, `unit_multiplier`).
fn positive(ctx: &Ctx<'_>, val: &Y, at: &str, max: u64) -> Result<u64, ConfigError> {
    let n = integer(ctx, val, at, max)?;
    if n == 0 {
        return Err(ctx.err(at, val.line, "must be at least 1"));
    }
    Ok(n)
}

/// `charge`: `always`, `over` or `admitted` ([`Charge`]).
fn charge(ctx: &Ctx<'_>, val: &Y, at: &str) -> Result<Charge, ConfigError> {
    let c = string(ctx, val, at)?;
    Charge::parse(&c).ok_or_else(|| {
        ctx.err(
            at,
            val.line,
            format!(
                "unknown charge {c:?}: `always` (the default: every call's hits are \
                 recorded, as envoyproxy/ratelimit counts), `over` (a denied call's \
                 only where it is over) or `admitted` (only admitted calls are charged)"
            ),
        )
    })
}

/// An `unlimited: true` limit takes no unit (a word that is no unit is
/// ignored, with a warning, as in Go) and none of our extensions.
fn check_unlimited(
    ctx: &mut Ctx<'_>,
    path: &str,
    f: &Fields<'_>,
    parsed_unit: Option<Unit>,
) -> Result<(), ConfigError> {
    if let Some((_, line)) = f.unit.as_ref().filter(|_| parsed_unit.is_some()) {
        return Err(ctx.err(
            &join(path, "unit"),
            *line,
            "an `unlimited: true` limit takes no `unit`",
        ));
    }
    if let Some((u, line)) = &f.unit {
        ctx.warn(
            &join(path, "unit"),
            *line,
            format!("{u:?} is not a unit; ignored, as the limit is unlimited"),
        );
    }
    let ext = [
        ("strategy", f.strategy.map(|s| s.1)),
        ("burst", f.burst.map(|b| b.1)),
        ("unit_multiplier", f.multiplier.map(|m| m.1)),
        ("duration", f.duration.as_ref().map(|d| d.1)),
        ("calendar", f.calendar.as_ref().map(|c| c.1)),
        ("charge", f.charge_line),
    ];
    if let Some((key, Some(line))) = ext.into_iter().find(|(_, l)| l.is_some()) {
        return Err(ctx.err(
            &join(path, key),
            line,
            format!("an `unlimited: true` limit takes no `{key}`"),
        ));
    }
    Ok(())
}

/// The period of a `duration` (`d`, on `line`), in microseconds: without
/// `unit` or `unit_multiplier`, from one microsecond to 366 days.
fn duration_period(
    ctx: &Ctx<'_>,
    path: &str,
    f: &Fields<'_>,
    d: &str,
    line: usize,
) -> Result<u64, ConfigError> {
    let at = join(path, "duration");
    if let Some((_, l)) = &f.unit {
        return Err(ctx.err(
            &join(path, "unit"),
            *l,
            "give either `unit` or `duration`, not both",
        ));
    }
    if let Some((_, l)) = f.multiplier {
        return Err(ctx.err(
            &join(path, "unit_multiplier"),
            l,
            "`unit_multiplier` goes with `unit`, not with `duration`",
        ));
    }
    let period = format!("1/{d}")
        .parse::<Rate>()
        .map_err(|_| {
            ctx.err(
                &at,
                line,
                format!(
                    "{d:?} is not a duration: a positive number and a unit, such as \
                     `90s`, `500ms`, `2 hours` or `7d`"
                ),
            )
        })?
        .period();
    let us = u64::try_from(period.as_micros()).unwrap_or(u64::MAX);
    if us == 0 {
        return Err(ctx.err(&at, line, "must be at least one microsecond"));
    }
    if us > MAX_PERIOD_US {
        return Err(ctx.err(
            &at,
            line,
            format!("{d:?} is longer than 366 days, the longest period"),
        ));
    }
    Ok(us)
}

/// The unit, multiplier and period of a limit without `duration`: a
/// known `unit` (`mapping_line` is the line when there is none), times its
/// `unit_multiplier`, at most 366 days.
fn unit_period(
    ctx: &Ctx<'_>,
    path: &str,
    f: &Fields<'_>,
    parsed_unit: Option<Unit>,
    mapping_line: usize,
    rule: &mut Rule,
) -> Result<(), ConfigError> {
    let Some(u) = parsed_unit else {
        let (given, line) = f
            .unit
            .clone()
            .map_or((String::new(), mapping_line), |(u, l)| (u, l));
        let names: Vec<_> = Unit::ALL.iter().map(|u| u.as_str()).collect();
        return Err(ctx.err(
            &join(path, "unit"),
            line,
            format!(
                "unknown unit {given:?}: use one of {} (or `duration`, or `unlimited: true`)",
                names.join(", ")
            ),
        ));
    };
    let (m, m_line) = f.multiplier.unwrap_or((1, mapping_line));
    rule.unit = Some(u);
    rule.unit_multiplier = m;
    let seconds = u.seconds() * u64::from(m);
    if seconds > MAX_PERIOD_US / 1_000_000 {
        return Err(ctx.err(
            &join(path, "unit_multiplier"),
            m_line,
            format!(
                "{m} × {u} is {} days, longer than 366 days, the longest period",
                seconds / 86_400
            ),
        ));
    }
    rule.period_us = seconds * 1_000_000;
    Ok(())
}

/// `burst` goes with a `strategy` that takes one.
fn check_burst(
    ctx: &Ctx<'_>,
    path: &str,
    f: &Fields<'_>,
    rule: &mut Rule,
) -> Result<(), ConfigError> {
    let Some((b, line)) = f.burst else {
        return Ok(());
    };
    if !f.strategy.is_some_and(|(s, _)| s.takes_burst()) {
        let takes: Vec<_> = Strategy::ALL
            .iter()
            .filter(|s| s.takes_burst())
            .map(|s| s.as_str())
            .collect();
        return Err(ctx.err(
            &join(path, "burst"),
            line,
            format!(
                "`burst` needs a `strategy` that takes one: {}",
                takes.join(", ")
            ),
        ));
    }
    rule.burst = Some(b);
    Ok(())
}

/// The calendar of `zone` (`calendar`, on `line`): beside `unit: month` or
/// `unit: year` alone, in a fixed window, a zone the library knows.
fn calendar(
    ctx: &Ctx<'_>,
    path: &str,
    rule: &Rule,
    zone: &str,
    line: usize,
) -> Result<Calendar, ConfigError> {
    let at = join(path, "calendar");
    let unit = match rule.unit {
        Some(Unit::Month) if rule.unit_multiplier == 1 => CalendarUnit::Month,
        Some(Unit::Year) if rule.unit_multiplier == 1 => CalendarUnit::Year,
        _ => {
            return Err(ctx.err(
                &at,
                line,
                "`calendar` goes with `unit: month` or `unit: year` (no `unit_multiplier`, no `duration`)",
            ));
        }
    };
    if rule.strategy.is_some_and(|s| s != Strategy::FixedWindow) {
        return Err(ctx.err(
            &at,
            line,
            "a calendar window is a fixed window: drop `strategy`, or make it `fixed-window`",
        ));
    }
    let c = Calendar::new(unit, zone);
    c.validate().map_err(|e| ctx.err(&at, line, e))?;
    Ok(c)
}

/// `replaces`: a list of entries with a non-empty `name`, none the
/// limit's own.
fn read_replaces(
    ctx: &mut Ctx<'_>,
    path: &str,
    list_node: &Y,
    rule: &mut Rule,
) -> Result<(), ConfigError> {
    let rpath = join(path, "replaces");
    for (i, item) in list(ctx, list_node, &rpath)?.iter().enumerate() {
        let here = format!("{rpath}[{i}]");
        let mut name = String::new();
        for (k, val) in map_entries(item) {
            let key = k.text().unwrap_or_default();
            if key == "name" {
                name = string(ctx, val, &join(&here, "name"))?;
            } else {
                misplaced(ctx, key, &here, k.line, "in a `replaces` entry")?;
            }
        }
        if name.is_empty() {
            return Err(ctx.err(
                &here,
                item.line,
                "a `replaces` entry needs a non-empty `name`",
            ));
        }
        if name == rule.name {
            return Err(ctx.err(
                &join(&here, "name"),
                item.line,
                format!("a limit cannot replace itself ({name:?} is its own `name`)"),
            ));
        }
        rule.replaces.push(name);
    }
    Ok(())
}

/// The longest period of a limit: 366 days, the library's
/// ([`Quota`]'s, which keeps its times exact
/// in Redis's Lua numbers).
const MAX_PERIOD_US: u64 = 366 * 86_400 * 1_000_000;

/// The largest `burst` the library takes: 2^40.
const MAX_BURST: u64 = 1 << 40;

/// What the library rejects of the quota the service builds for `rule`
/// (its period is checked already), rejected here with the path and line:
/// a `sliding-window-log` of more than [`Quota::MAX_SORTED_SET_LIMIT`]
/// requests, a `burst` above 2^40, or one whose refill
/// (`burst` × period / `requests_per_unit`) takes 4 × 366 days or more.
/// Nothing is built for a rule of no requests or without a limit.
fn check_quota(
    ctx: &Ctx<'_>,
    path: &str,
    rule: &Rule,
    count_line: usize,
    burst_line: usize,
) -> Result<(), ConfigError> {
    let count = u64::from(rule.requests_per_unit);
    if rule.unlimited || count == 0 {
        return Ok(());
    }
    if rule.strategy == Some(Strategy::SlidingWindowLog) && count > Quota::MAX_SORTED_SET_LIMIT {
        return Err(ctx.err(
            &join(path, "requests_per_unit"),
            count_line,
            format!(
                "sliding-window-log keeps one entry per request: at most {} per period, not {count} \
                 (sliding-window-counter takes any count)",
                Quota::MAX_SORTED_SET_LIMIT
            ),
        ));
    }
    if let Some(b) = rule.burst {
        let at = join(path, "burst");
        if b > MAX_BURST {
            return Err(ctx.err(&at, burst_line, format!("must be at most {MAX_BURST}")));
        }
        let interval = rule.period_us.div_ceil(count);
        if b.checked_mul(interval)
            .is_none_or(|t| t > 4 * MAX_PERIOD_US)
        {
            return Err(ctx.err(
                &at,
                burst_line,
                "a burst this large takes more than 4 × 366 days to refill (`burst` × period / `requests_per_unit`)",
            ));
        }
    }
    Ok(())
}
