//! Reading one file into a [`Config`], with the Go service's checks.

use std::collections::BTreeMap;

use prost_types::value::Kind as PbKind;
use tower_redis_ratelimit::strategy::Strategy;
use tower_redis_ratelimit::{Calendar, CalendarUnit};
use tower_redis_ratelimit::{Quota, Rate};

use super::yaml::{self, Kind, Node as Y, Scalar};
use super::{
    Charge, Config, ConfigError, ConfigWarning, LoadOptions, Node, OnStoreError, Rule, Unit,
};

/// The keys the Go service accepts, anywhere in a file (its `validKeys`).
const GO_KEYS: [&str; 16] = [
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
];

/// Our extensions, in `rate_limit` only.
const EXT_KEYS: [&str; 6] = [
    "strategy",
    "burst",
    "unit_multiplier",
    "duration",
    "calendar",
    "charge",
];

/// Our extensions, at the top of a file only.
const TOP_EXT_KEYS: [&str; 1] = ["failure_policy"];

struct Ctx<'a> {
    file: &'a str,
    warnings: Vec<ConfigWarning>,
}

impl Ctx<'_> {
    fn err(&self, path: &str, line: usize, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.file.to_owned(),
            path: path.to_owned(),
            line,
            message: message.into(),
            transient: false,
        }
    }

    fn warn(&mut self, path: &str, line: usize, message: impl Into<String>) {
        self.warnings.push(ConfigWarning {
            file: self.file.to_owned(),
            path: path.to_owned(),
            line,
            message: message.into(),
        });
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Parses the file `name` with contents `text` (within the bounds of
/// [`Config`]), not yet checked.
pub(super) fn parse_file(name: &str, text: &str) -> Result<yaml::Document, ConfigError> {
    let ctx = Ctx {
        file: name,
        warnings: Vec::new(),
    };
    if text.len() > Config::MAX_FILE_BYTES {
        return Err(ctx.err(
            "",
            0,
            format!(
                "{} bytes: a configuration file may hold at most {} MiB",
                text.len(),
                Config::MAX_FILE_BYTES >> 20
            ),
        ));
    }
    yaml::parse(text, yaml::Limits::DEFAULT).map_err(|e| {
        if e.bound {
            ctx.err("", e.line, e.message)
        } else {
            ctx.err("", e.line, format!("not valid YAML: {}", e.message))
        }
    })
}

/// Checks the document `doc` of `name` (a file, or another source's
/// resource) and loads it into `config`: the one validation step of every
/// source.
pub(super) fn load_document(
    config: &mut Config,
    name: &str,
    doc: &yaml::Document,
    options: LoadOptions,
) -> Result<(), ConfigError> {
    let mut ctx = Ctx {
        file: name,
        warnings: Vec::new(),
    };
    for (line, key) in &doc.duplicates {
        ctx.warn(
            "",
            *line,
            format!("key {key:?} is given twice in one mapping: the last one is used"),
        );
    }
    if doc.more_documents {
        ctx.warn(
            "",
            0,
            "only the file's first YAML document is read (as envoyproxy/ratelimit does)",
        );
    }
    let empty = Vec::new();
    let entries = match &doc.root {
        None => &empty,
        Some(root) => {
            validate_keys(&ctx, root, "")?;
            match &root.kind {
                Kind::Map(entries) => entries,
                _ if root.scalar() == Some(Scalar::Null) => &empty,
                _ => {
                    return Err(ctx.err(
                        "",
                        root.line,
                        format!(
                            "a file must be a mapping with `domain` and `descriptors`, not {}",
                            root.describe()
                        ),
                    ));
                }
            }
        }
    };
    let mut domain = String::new();
    let mut domain_line = 1;
    let mut descriptors = None;
    let mut policy: Option<(OnStoreError, usize)> = None;
    for (k, v) in entries {
        let key = k.text().unwrap_or_default();
        match key {
            "domain" => {
                domain = string(&ctx, v, "domain")?;
                domain_line = k.line;
            }
            "descriptors" => descriptors = Some(v),
            "failure_policy" => {
                let text = string(&ctx, v, "failure_policy")?;
                let p = OnStoreError::parse(&text).ok_or_else(|| {
                    ctx.err(
                        "failure_policy",
                        v.line,
                        format!(
                            "unknown failure policy {text:?}: one of `allow`, `deny`, `unavailable`"
                        ),
                    )
                })?;
                policy = Some((p, k.line));
            }
            _ => misplaced(&mut ctx, key, "", k.line, "at the top of a file")?,
        }
    }
    if domain.is_empty() {
        return Err(ctx.err(
            "domain",
            domain_line,
            "a file must have a non-empty `domain`",
        ));
    }
    let mut root = match config.domains.remove(&domain) {
        Some(existing) if options.merge_domains => existing,
        Some(existing) => {
            let first = config.files.get(&domain).cloned().unwrap_or_default();
            config.domains.insert(domain.clone(), existing);
            return Err(ctx.err(
                "domain",
                domain_line,
                format!("duplicate domain {domain:?}: {first} has it too"),
            ));
        }
        None => {
            config.order.push(domain.clone());
            config.files.insert(domain.clone(), name.to_owned());
            Node::default()
        }
    };
    if let Some((p, line)) = policy {
        match config.policies.get(&domain) {
            Some((other, file)) if *other != p => {
                return Err(ctx.err(
                    "failure_policy",
                    line,
                    format!(
                        "failure policy {:?} for domain {domain:?}, but {file} gives it {:?}",
                        p.as_str(),
                        other.as_str()
                    ),
                ));
            }
            Some(_) => {}
            None => {
                config.policies.insert(domain.clone(), (p, name.to_owned()));
            }
        }
    }
    let result = match descriptors {
        Some(list) => read_descriptors(
            &mut ctx,
            list,
            "descriptors",
            (&format!("{domain}."), ""),
            &mut root,
        ),
        None => Ok(()),
    };
    config.domains.insert(domain, root);
    result?;
    config.warnings.append(&mut ctx.warnings);
    Ok(())
}

/// The Go service's `validateYamlKeys`, run on the whole file before it is
/// read: every mapping key a string and a known key, every list a list of
/// mappings, every scalar a string, an integer, a boolean or null (not a
/// float); `metadata` is not looked into.
fn validate_keys(ctx: &Ctx<'_>, node: &Y, path: &str) -> Result<(), ConfigError> {
    let Kind::Map(entries) = &node.kind else {
        return Ok(());
    };
    for (k, v) in entries {
        let key = match k.scalar() {
            Some(Scalar::Str(s)) => s,
            _ => {
                return Err(ctx.err(
                    path,
                    k.line,
                    format!(
                        "key {:?} is not a string but {} (quote it)",
                        k.text().unwrap_or_default(),
                        k.describe()
                    ),
                ));
            }
        };
        let here = join(path, key);
        if !GO_KEYS.contains(&key) && !EXT_KEYS.contains(&key) && !TOP_EXT_KEYS.contains(&key) {
            let hint = match key {
                "ratelimit" | "rateLimit" | "rate-limit" => " (`rate_limit`?)",
                "requestsperunit" | "requestsPerUnit" | "requests-per-unit" => {
                    " (`requests_per_unit`?)"
                }
                _ => "",
            };
            return Err(ctx.err(&here, k.line, format!("unknown key {key:?}{hint}")));
        }
        if key == "metadata" {
            continue;
        }
        match &v.kind {
            Kind::Seq(items) => {
                for (i, item) in items.iter().enumerate() {
                    let at = format!("{here}[{i}]");
                    if !matches!(item.kind, Kind::Map(_)) {
                        return Err(ctx.err(
                            &at,
                            item.line,
                            format!(
                                "a list may hold only mappings here, not {}",
                                item.describe()
                            ),
                        ));
                    }
                    validate_keys(ctx, item, &at)?;
                }
            }
            Kind::Map(_) => validate_keys(ctx, v, &here)?,
            Kind::Scalar { .. } => match v.scalar() {
                Some(Scalar::Float(_)) => {
                    return Err(ctx.err(
                        &here,
                        v.line,
                        format!(
                            "{:?} is read as a floating-point number, which envoyproxy/ratelimit rejects (quote it if it is a string)",
                            v.text().unwrap_or_default()
                        ),
                    ));
                }
                Some(Scalar::Int(n)) if i64::try_from(n).is_err() => {
                    return Err(ctx.err(&here, v.line, "the number is too large"));
                }
                _ => {}
            },
        }
    }
    Ok(())
}

/// A key valid for the Go service but not where it is: ignored there, so
/// here with a warning; an extension key is an error anywhere but in
/// `rate_limit`.
fn misplaced(
    ctx: &mut Ctx<'_>,
    key: &str,
    path: &str,
    line: usize,
    place: &str,
) -> Result<(), ConfigError> {
    let here = join(path, key);
    if EXT_KEYS.contains(&key) {
        return Err(ctx.err(&here, line, format!("`{key}` belongs in a `rate_limit`")));
    }
    if TOP_EXT_KEYS.contains(&key) {
        return Err(ctx.err(
            &here,
            line,
            format!("`{key}` belongs at the top of a file, beside `domain`"),
        ));
    }
    ctx.warn(
        &here,
        line,
        format!(
            "`{key}` has no meaning {place} and is ignored (as envoyproxy/ratelimit ignores it)"
        ),
    );
    Ok(())
}

/// A string field: any scalar's text, as yaml.v2 fills a string (null is
/// empty).
fn string(ctx: &Ctx<'_>, v: &Y, path: &str) -> Result<String, ConfigError> {
    match v.scalar() {
        Some(Scalar::Null) => Ok(String::new()),
        Some(_) => Ok(v.text().unwrap_or_default().to_owned()),
        None => Err(ctx.err(
            path,
            v.line,
            format!("must be a string, not {}", v.describe()),
        )),
    }
}

fn boolean(ctx: &Ctx<'_>, v: &Y, path: &str) -> Result<bool, ConfigError> {
    match v.scalar() {
        Some(Scalar::Null) => Ok(false),
        Some(Scalar::Bool(b)) => Ok(b),
        _ => Err(ctx.err(
            path,
            v.line,
            format!(
                "must be true or false, not {} {:?}",
                v.describe(),
                v.text().unwrap_or_default()
            ),
        )),
    }
}

/// A non-negative integer field of at most `max` (null is 0).
fn integer(ctx: &Ctx<'_>, v: &Y, path: &str, max: u64) -> Result<u64, ConfigError> {
    match v.scalar() {
        Some(Scalar::Null) => Ok(0),
        Some(Scalar::Int(n)) => u64::try_from(n)
            .ok()
            .filter(|n| *n <= max)
            .ok_or_else(|| ctx.err(path, v.line, format!("must be from 0 to {max}, not {n}"))),
        _ => Err(ctx.err(
            path,
            v.line,
            format!(
                "must be a whole number, not {} {:?}",
                v.describe(),
                v.text().unwrap_or_default()
            ),
        )),
    }
}

fn list<'a>(ctx: &Ctx<'_>, v: &'a Y, path: &str) -> Result<&'a [Y], ConfigError> {
    match &v.kind {
        Kind::Seq(items) => Ok(items),
        _ if v.scalar() == Some(Scalar::Null) => Ok(&[]),
        _ => Err(ctx.err(
            path,
            v.line,
            format!("must be a list of mappings, not {}", v.describe()),
        )),
    }
}

fn map_entries(v: &Y) -> &[(Y, Y)] {
    match &v.kind {
        Kind::Map(entries) => entries,
        _ => &[],
    }
}

fn read_descriptors(
    ctx: &mut Ctx<'_>,
    list_node: &Y,
    path: &str,
    (parent_key, parent_id): (&str, &str),
    parent: &mut Node,
) -> Result<(), ConfigError> {
    for (i, item) in list(ctx, list_node, path)?.iter().enumerate() {
        let here = format!("{path}[{i}]");
        let mut key = String::new();
        let mut value = String::new();
        let mut value_line = item.line;
        let mut rate_limit = None;
        let mut rate_limit_line = item.line;
        let mut children = None;
        let mut flags = [false; 5];
        let mut metadata = None;
        for (k, v) in map_entries(item) {
            let name = k.text().unwrap_or_default();
            let at = join(&here, name);
            match name {
                "key" => key = string(ctx, v, &at)?,
                "value" => {
                    value = string(ctx, v, &at)?;
                    value_line = k.line;
                }
                "rate_limit" => {
                    rate_limit = Some(v);
                    rate_limit_line = k.line;
                }
                "descriptors" => children = Some(v),
                "shadow_mode" => flags[0] = boolean(ctx, v, &at)?,
                "quota_mode" => flags[1] = boolean(ctx, v, &at)?,
                "detailed_metric" => flags[2] = boolean(ctx, v, &at)?,
                "value_to_metric" => flags[3] = boolean(ctx, v, &at)?,
                "share_threshold" => flags[4] = boolean(ctx, v, &at)?,
                "metadata" => metadata = Some((v, at)),
                _ => misplaced(ctx, name, &here, k.line, "in a descriptor")?,
            }
        }
        let [
            shadow_mode,
            quota_mode,
            detailed_metric,
            value_to_metric,
            share_threshold,
        ] = flags;
        if key.is_empty() {
            return Err(ctx.err(&here, item.line, "a descriptor must have a non-empty `key`"));
        }
        let final_key = if value.is_empty() {
            key.clone()
        } else {
            format!("{key}_{value}")
        };
        let full_key = format!("{parent_key}{final_key}");
        let id = format!("{parent_id}{}:{final_key}", final_key.len());
        if parent.children.contains_key(&final_key) {
            let what = if value.is_empty() {
                format!("key {key:?}")
            } else {
                format!("key {key:?} with value {value:?}")
            };
            return Err(ctx.err(
                &here,
                value_line,
                format!("duplicate descriptor: {what} is already defined here (composite key {full_key:?})"),
            ));
        }
        let metadata = match metadata {
            None => None,
            Some((v, at)) => match &v.kind {
                Kind::Map(_) => match to_value(v).kind {
                    Some(PbKind::StructValue(s)) => Some(s),
                    _ => None,
                },
                _ if v.scalar() == Some(Scalar::Null) => None,
                _ => {
                    return Err(ctx.err(
                        &at,
                        v.line,
                        format!("must be a mapping, not {}", v.describe()),
                    ));
                }
            },
        };
        let rule = match rate_limit {
            None => None,
            Some(v) if v.scalar() == Some(Scalar::Null) => None,
            Some(v) if matches!(v.kind, Kind::Map(_)) => Some(read_rate_limit(
                ctx,
                v,
                Rule {
                    file: ctx.file.to_owned(),
                    full_key: full_key.clone(),
                    id: id.clone(),
                    path: join(&here, "rate_limit"),
                    line: rate_limit_line,
                    requests_per_unit: 0,
                    unit: None,
                    unit_multiplier: 1,
                    period_us: 0,
                    unlimited: false,
                    name: String::new(),
                    replaces: Vec::new(),
                    shadow_mode,
                    quota_mode,
                    detailed_metric,
                    metadata,
                    strategy: None,
                    burst: None,
                    calendar: None,
                    charge: None,
                },
            )?),
            Some(v) => {
                return Err(ctx.err(
                    &join(&here, "rate_limit"),
                    v.line,
                    format!("must be a mapping, not {}", v.describe()),
                ));
            }
        };
        if share_threshold && !final_key.contains('*') {
            return Err(ctx.err(
                &join(&here, "share_threshold"),
                item.line,
                format!("`share_threshold` needs a wildcard value (with `*`), and {final_key:?} has none"),
            ));
        }
        let mut node = Node {
            rule,
            value_to_metric,
            share_threshold,
            ..Node::default()
        };
        if let Some(children) = children {
            read_descriptors(
                ctx,
                children,
                &join(&here, "descriptors"),
                (&format!("{full_key}."), &id),
                &mut node,
            )?;
        }
        if final_key.contains('*') {
            let parts = final_key.split('*').map(str::to_owned).collect();
            parent.wildcards.push((final_key.clone(), parts));
        }
        parent.children.insert(final_key, node);
    }
    Ok(())
}

fn read_rate_limit(ctx: &mut Ctx<'_>, v: &Y, mut rule: Rule) -> Result<Rule, ConfigError> {
    let path = &rule.path.clone();
    let mut unit: Option<(String, usize)> = None;
    let mut replaces: Option<&Y> = None;
    let mut strategy = None;
    let mut burst = None;
    let mut multiplier = None;
    let mut duration = None;
    let mut calendar = None;
    let mut charge_line = None;
    let mut count_line = v.line;
    for (k, val) in map_entries(v) {
        let name = k.text().unwrap_or_default();
        let at = join(path, name);
        match name {
            "requests_per_unit" => {
                rule.requests_per_unit = integer(ctx, val, &at, u64::from(u32::MAX))? as u32;
                count_line = k.line;
            }
            "unit" => unit = Some((string(ctx, val, &at)?, val.line)),
            "unlimited" => rule.unlimited = boolean(ctx, val, &at)?,
            "name" => rule.name = string(ctx, val, &at)?,
            "replaces" => replaces = Some(val),
            "strategy" => {
                let s = string(ctx, val, &at)?;
                let parsed = s.parse::<Strategy>().map_err(|_| {
                    ctx.err(
                        &at,
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
                        &at,
                        val.line,
                        "`concurrency` counts requests in flight until each is released, \
                         and Envoy's rate limit protocol has no release: use a rate strategy",
                    ));
                }
                strategy = Some((parsed, k.line));
            }
            "burst" => {
                let b = integer(ctx, val, &at, u64::MAX)?;
                if b == 0 {
                    return Err(ctx.err(&at, val.line, "must be at least 1"));
                }
                burst = Some((b, k.line));
            }
            "unit_multiplier" => {
                let m = integer(ctx, val, &at, u64::from(u32::MAX))?;
                if m == 0 {
                    return Err(ctx.err(&at, val.line, "must be at least 1"));
                }
                multiplier = Some((m as u32, k.line));
            }
            "duration" => duration = Some((string(ctx, val, &at)?, val.line)),
            "calendar" => calendar = Some((string(ctx, val, &at)?, k.line)),
            "charge" => {
                let c = string(ctx, val, &at)?;
                let Some(charge) = Charge::parse(&c) else {
                    return Err(ctx.err(
                        &at,
                        val.line,
                        format!(
                            "unknown charge {c:?}: `always` (the default: every call's hits are \
                             recorded, as envoyproxy/ratelimit counts), `over` (a denied call's \
                             only where it is over) or `admitted` (only admitted calls are charged)"
                        ),
                    ));
                };
                rule.charge = Some(charge);
                charge_line = Some(k.line);
            }
            _ => misplaced(ctx, name, path, k.line, "in a `rate_limit`")?,
        }
    }
    let parsed_unit = unit.as_ref().and_then(|(u, _)| Unit::parse(u));
    if rule.unlimited {
        if let Some((_, line)) = unit.as_ref().filter(|_| parsed_unit.is_some()) {
            return Err(ctx.err(
                &join(path, "unit"),
                *line,
                "an `unlimited: true` limit takes no `unit`",
            ));
        }
        if let Some((u, line)) = &unit {
            ctx.warn(
                &join(path, "unit"),
                *line,
                format!("{u:?} is not a unit; ignored, as the limit is unlimited"),
            );
        }
        let ext = [
            ("strategy", strategy.map(|s| s.1)),
            ("burst", burst.map(|b| b.1)),
            ("unit_multiplier", multiplier.map(|m| m.1)),
            ("duration", duration.as_ref().map(|d| d.1)),
            ("calendar", calendar.as_ref().map(|c| c.1)),
            ("charge", charge_line),
        ];
        if let Some((key, Some(line))) = ext.into_iter().find(|(_, l)| l.is_some()) {
            return Err(ctx.err(
                &join(path, key),
                line,
                format!("an `unlimited: true` limit takes no `{key}`"),
            ));
        }
    } else if let Some((d, line)) = &duration {
        let at = join(path, "duration");
        if let Some((_, l)) = &unit {
            return Err(ctx.err(
                &join(path, "unit"),
                *l,
                "give either `unit` or `duration`, not both",
            ));
        }
        if let Some((_, l)) = multiplier {
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
                    *line,
                    format!(
                        "{d:?} is not a duration: a positive number and a unit, such as \
                         `90s`, `500ms`, `2 hours` or `7d`"
                    ),
                )
            })?
            .period();
        let us = u64::try_from(period.as_micros()).unwrap_or(u64::MAX);
        if us == 0 {
            return Err(ctx.err(&at, *line, "must be at least one microsecond"));
        }
        if us > MAX_PERIOD_US {
            return Err(ctx.err(
                &at,
                *line,
                format!("{d:?} is longer than 366 days, the longest period"),
            ));
        }
        rule.period_us = us;
    } else {
        let Some(u) = parsed_unit else {
            let (given, line) = unit.map_or((String::new(), v.line), |(u, l)| (u, l));
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
        let (m, m_line) = multiplier.unwrap_or((1, v.line));
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
    }
    if let Some((b, line)) = burst {
        if !strategy.is_some_and(|(s, _)| s.takes_burst()) {
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
    }
    rule.strategy = strategy.map(|s| s.0);
    if let Some((zone, line)) = calendar
        && !rule.unlimited
    {
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
        rule.calendar = Some(c);
    }
    check_quota(ctx, path, &rule, count_line, burst.map_or(0, |b| b.1))?;
    if let Some(list_node) = replaces {
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
    }
    Ok(rule)
}

/// The longest period of a limit: 366 days, the library's
/// ([`Quota`](tower_redis_ratelimit::Quota)'s, which keeps its times exact
/// in Redis's Lua numbers).
pub(super) const MAX_PERIOD_US: u64 = 366 * 86_400 * 1_000_000;

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

/// A YAML node as a protobuf `Value`, as the Go service converts `metadata`.
fn to_value(v: &Y) -> prost_types::Value {
    let kind = match &v.kind {
        Kind::Seq(items) => PbKind::ListValue(prost_types::ListValue {
            values: items.iter().map(to_value).collect(),
        }),
        Kind::Map(entries) => PbKind::StructValue(prost_types::Struct {
            fields: entries
                .iter()
                .map(|(k, val)| (k.text().unwrap_or_default().to_owned(), to_value(val)))
                .collect::<BTreeMap<_, _>>(),
        }),
        Kind::Scalar { .. } => match v.scalar() {
            Some(Scalar::Bool(b)) => PbKind::BoolValue(b),
            Some(Scalar::Int(n)) => PbKind::NumberValue(n as f64),
            Some(Scalar::Float(f)) => PbKind::NumberValue(f),
            Some(Scalar::Str(s)) => PbKind::StringValue(s.to_owned()),
            Some(Scalar::Null) | None => PbKind::NullValue(0),
        },
    };
    prost_types::Value { kind: Some(kind) }
}
