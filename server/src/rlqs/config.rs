//! The quota service's configuration: one YAML file per domain, each
//! bucket rule a map of bucket-id entries (a value, or `*` for every value,
//! each its own budget) with a limit or a blanket answer.
//!
//! ```yaml
//! domain: edge                  # the filter's `domain`
//! reporting_interval: 5s        # the filter's bucket_settings.reporting_interval
//! buckets:
//!   - name: chat-per-user
//!     id: { route: chat, user: "*" }
//!     requests_per_unit: 600
//!     unit: minute
//!   - name: health
//!     id: { route: health }
//!     blanket: allow_all
//! ```
//!
//! A bucket id matches a rule whose `id` has exactly its keys, each value
//! equal or `*`; the rule with the fewest `*` wins, then the first in the
//! file. The guide's quota service chapter documents every field.

use std::collections::HashMap;
use std::time::Duration;

use crate::config::ConfigError;
use crate::config::yaml::{self, Kind, Node, Scalar};

/// The most entries a bucket id may have (a rule's `id` and a reported id).
pub const MAX_ID_ENTRIES: usize = 32;
/// The most bytes of keys and values a bucket id may have.
pub const MAX_ID_BYTES: usize = 1024;
/// The most bucket rules a domain may have.
pub const MAX_RULES: usize = 10_000;
/// The most a `requests_per_unit` may be (2^40, as the library's quotas).
pub const MAX_LIMIT: u64 = 1 << 40;

/// A blanket answer: every request allowed, or every one denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blanket {
    /// `allow_all`.
    AllowAll,
    /// `deny_all`.
    DenyAll,
}

impl Blanket {
    fn parse(s: &str) -> Option<Blanket> {
        match s {
            "allow_all" | "ALLOW_ALL" => Some(Blanket::AllowAll),
            "deny_all" | "DENY_ALL" => Some(Blanket::DenyAll),
            _ => None,
        }
    }
}

/// What a bucket rule answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// A blanket rule, the same for every Envoy.
    Blanket(Blanket),
    /// A limit of `limit` requests per `window`, shared by every Envoy
    /// reporting a bucket of the rule (one budget per value of its `*`
    /// entries), divided among them by demand.
    Limit {
        /// `requests_per_unit`.
        limit: u64,
        /// `unit`, as a duration.
        window: Duration,
    },
}

/// When the store fails: the paid assignment runs out and every request
/// is denied (`deny`), or every request is allowed (`allow`) until it
/// answers again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnStoreError {
    /// `deny` (the default): the bound holds through a store failure.
    Deny,
    /// `allow`: nothing is bounded while the store fails.
    Allow,
}

/// One bucket rule.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketRule {
    /// `name`: the metrics label and the budget's prefix.
    pub name: String,
    /// `id`, sorted by key: `None` for `*`.
    pub id: Vec<(String, Option<String>)>,
    /// What it answers.
    pub answer: Answer,
    /// The line of the rule in its file.
    pub line: usize,
}

impl BucketRule {
    fn wildcards(&self) -> usize {
        self.id.iter().filter(|(_, v)| v.is_none()).count()
    }
}

/// One domain's configuration (one file).
#[derive(Debug, Clone, PartialEq)]
pub struct DomainConfig {
    /// `domain`.
    pub domain: String,
    /// `reporting_interval`: the filter's (the longest of its bucket
    /// settings' when they differ).
    pub reporting_interval: Duration,
    /// `assignment_ttl`: how long an assignment lasts at an Envoy (whole
    /// seconds; by default twice the reporting interval plus a second,
    /// rounded up), so that one late report does not let it lapse.
    pub assignment_ttl: Duration,
    /// `unmatched`: what a bucket no rule matches gets (default
    /// `deny_all`: Envoy leaves a key out of an id when its value is empty,
    /// so an id the rules do not expect is no way around them).
    pub unmatched: Blanket,
    /// `on_store_error` (default `deny`).
    pub on_store_error: OnStoreError,
    /// `max_buckets_per_stream` (default 10,000): past it, a new bucket of
    /// a stream is answered `deny_all` and not remembered.
    pub max_buckets_per_stream: usize,
    /// `abandon_after` (default 5 minutes): a bucket reported idle (no
    /// request) this long is abandoned (Envoy forgets it until its next
    /// request).
    pub abandon_after: Duration,
    /// The rules, in file order.
    pub rules: Vec<BucketRule>,
    /// The file it was read from.
    pub file: String,
    /// Rules by their sorted keys, each list by fewest `*` then file order.
    index: HashMap<Vec<String>, Vec<usize>>,
}

/// A reported bucket id as the rules see it: its entries sorted by key.
pub type BucketId = Vec<(String, String)>;

/// Why a reported bucket id is not looked up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadId {
    /// No entry (Envoy ignores an action without one).
    Empty,
    /// Past [`MAX_ID_ENTRIES`] or [`MAX_ID_BYTES`].
    TooLarge,
}

/// Sorts `entries` into a [`BucketId`], checking its bounds.
pub fn bucket_id(entries: impl IntoIterator<Item = (String, String)>) -> Result<BucketId, BadId> {
    let mut id: BucketId = Vec::new();
    let mut bytes = 0usize;
    for (k, v) in entries {
        bytes = bytes.saturating_add(k.len() + v.len());
        id.push((k, v));
        if id.len() > MAX_ID_ENTRIES || bytes > MAX_ID_BYTES {
            return Err(BadId::TooLarge);
        }
    }
    if id.is_empty() {
        return Err(BadId::Empty);
    }
    id.sort_unstable();
    Ok(id)
}

impl DomainConfig {
    /// What in this file is likely a mistake, for a log line each: a
    /// reporting interval under the 5 s Envoy's filter reports at (2026,
    /// whatever its setting), and limits whose lease (what one Envoy's
    /// assignment prepays: the rate over TTL, margin and interval) is more
    /// than their limit, so that the bound's `C` is too.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if self.reporting_interval < Duration::from_secs(5) {
            w.push(format!(
                "{}: reporting_interval {} ms: Envoy's filter reports every 5 s whatever its \
                 setting says; unless yours honours it, assignments lapse between reports \
                 (give 5s)",
                self.file,
                self.reporting_interval.as_millis()
            ));
        }
        let lead = self.assignment_ttl
            + Duration::from_secs(1)
            + self.reporting_interval.max(Duration::from_secs(1));
        for r in &self.rules {
            if let Answer::Limit { limit, window } = r.answer {
                let lease = limit as f64 * lead.as_secs_f64() / window.as_secs_f64();
                if lease > limit as f64 {
                    w.push(format!(
                        "{}: buckets \"{}\": one assignment prepays {:.0} requests, more than \
                         its limit of {limit}: a longer unit bounds it closer",
                        self.file, r.name, lease
                    ));
                }
            }
        }
        w
    }

    /// The rule matching `id` (sorted, as [`bucket_id`] gives it), and the
    /// key of its budget (the values of its `*` entries, each
    /// length-prefixed, so that no two ids share one).
    pub fn lookup(&self, id: &BucketId) -> Option<(usize, String)> {
        let keys: Vec<String> = id.iter().map(|(k, _)| k.clone()).collect();
        let candidates = self.index.get(&keys)?;
        for &i in candidates {
            let rule = &self.rules[i];
            let matches = rule
                .id
                .iter()
                .zip(id)
                .all(|((_, want), (_, got))| want.as_ref().is_none_or(|w| w == got));
            if matches {
                let mut key = String::new();
                for ((_, want), (_, got)) in rule.id.iter().zip(id) {
                    if want.is_none() {
                        key.push_str(&got.len().to_string());
                        key.push(':');
                        key.push_str(got);
                    }
                }
                return Some((i, key));
            }
        }
        None
    }

    /// Reads one file's text.
    pub fn parse(file: &str, text: &str) -> Result<DomainConfig, ConfigError> {
        let err = |path: &str, line: usize, message: String| ConfigError {
            file: file.to_owned(),
            path: path.to_owned(),
            line,
            message,
            transient: false,
        };
        let doc = yaml::parse(text, yaml::Limits::DEFAULT).map_err(|e| {
            err(
                "",
                e.line,
                if e.bound {
                    e.message
                } else {
                    format!("not valid YAML: {}", e.message)
                },
            )
        })?;
        let Some(root) = doc.root else {
            return Err(err("", 0, "the file is empty".into()));
        };
        let top = entries(&root).ok_or_else(|| err("", root.line, "not a mapping".into()))?;
        let mut domain = None;
        let mut interval = None;
        let mut ttl = None;
        let mut unmatched = Blanket::DenyAll;
        let mut on_store_error = OnStoreError::Deny;
        let mut max_buckets = 10_000usize;
        let mut abandon_after = Duration::from_secs(300);
        let mut rules = Vec::new();
        for (k, v) in top {
            let key = k.text().unwrap_or_default();
            match key {
                "domain" => {
                    let d = text_of(v).filter(|d| !d.is_empty()).ok_or_else(|| {
                        err("domain", v.line, "must be a non-empty string".into())
                    })?;
                    domain = Some(d.to_owned());
                }
                "reporting_interval" => {
                    interval = Some(duration(v).ok_or_else(|| {
                        err(
                            key,
                            v.line,
                            "a duration of 100ms to 1h (like 5s or 500ms)".into(),
                        )
                    })?);
                }
                "assignment_ttl" => {
                    ttl = Some(duration(v).ok_or_else(|| {
                        err(key, v.line, "a duration of 100ms to 1h (like 15s)".into())
                    })?);
                }
                "unmatched" => {
                    unmatched = text_of(v)
                        .and_then(Blanket::parse)
                        .ok_or_else(|| err(key, v.line, "allow_all or deny_all".into()))?;
                }
                "on_store_error" => {
                    on_store_error = match text_of(v) {
                        Some("deny") => OnStoreError::Deny,
                        Some("allow") => OnStoreError::Allow,
                        _ => return Err(err(key, v.line, "deny or allow".into())),
                    };
                }
                "max_buckets_per_stream" => {
                    max_buckets = int_of(v)
                        .filter(|n| (1..=1_000_000).contains(n))
                        .ok_or_else(|| err(key, v.line, "a whole number of 1 to 1000000".into()))?
                        as usize;
                }
                "abandon_after" => {
                    abandon_after = duration(v).ok_or_else(|| {
                        err(key, v.line, "a duration of 100ms to 1h (like 5m)".into())
                    })?;
                }
                "buckets" => {
                    let Kind::Seq(items) = &v.kind else {
                        return Err(err(key, v.line, "must be a list of bucket rules".into()));
                    };
                    if items.len() > MAX_RULES {
                        return Err(err(
                            key,
                            v.line,
                            format!("{} rules, more than {MAX_RULES}", items.len()),
                        ));
                    }
                    for (i, item) in items.iter().enumerate() {
                        rules.push(read_rule(&format!("buckets[{i}]"), item, &err)?);
                    }
                }
                other => {
                    return Err(err(
                        other,
                        k.line,
                        "unknown key (domain, reporting_interval, assignment_ttl, unmatched, \
                         on_store_error, max_buckets_per_stream, abandon_after, buckets)"
                            .into(),
                    ));
                }
            }
        }
        let domain = domain.ok_or_else(|| err("domain", root.line, "missing".into()))?;
        let interval = interval.ok_or_else(|| {
            err(
                "reporting_interval",
                root.line,
                "missing: the reporting_interval of the filter's bucket settings".into(),
            )
        })?;
        let least = interval + Duration::from_secs(1);
        let ttl = match ttl {
            Some(t) if t < least => {
                return Err(err(
                    "assignment_ttl",
                    root.line,
                    format!(
                        "{} ms is less than reporting_interval + 1s ({} ms): assignments would \
                         lapse between reports",
                        t.as_millis(),
                        least.as_millis()
                    ),
                ));
            }
            Some(t) => t,
            None => interval * 2 + Duration::from_secs(1),
        };
        // Envoy reads whole seconds of a TTL
        let ttl = Duration::from_secs(ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0));
        let mut names: HashMap<&str, usize> = HashMap::new();
        let mut ids: HashMap<&[(String, Option<String>)], usize> = HashMap::new();
        for (i, r) in rules.iter().enumerate() {
            let path = format!("buckets[{i}]");
            if let Some(j) = names.insert(&r.name, i) {
                return Err(err(
                    &format!("{path}.name"),
                    r.line,
                    format!("\"{}\" is also the name of buckets[{j}]", r.name),
                ));
            }
            if let Some(j) = ids.insert(&r.id, i) {
                return Err(err(
                    &format!("{path}.id"),
                    r.line,
                    format!("the same id as buckets[{j}]: one of them would never match"),
                ));
            }
        }
        let mut index: HashMap<Vec<String>, Vec<usize>> = HashMap::new();
        for (i, r) in rules.iter().enumerate() {
            index
                .entry(r.id.iter().map(|(k, _)| k.clone()).collect())
                .or_default()
                .push(i);
        }
        for list in index.values_mut() {
            list.sort_by_key(|&i| (rules[i].wildcards(), i));
        }
        Ok(DomainConfig {
            domain,
            reporting_interval: interval,
            assignment_ttl: ttl,
            unmatched,
            on_store_error,
            max_buckets_per_stream: max_buckets,
            abandon_after,
            rules,
            file: file.to_owned(),
            index,
        })
    }
}

fn read_rule(
    path: &str,
    item: &Node,
    err: &dyn Fn(&str, usize, String) -> ConfigError,
) -> Result<BucketRule, ConfigError> {
    let fields = entries(item).ok_or_else(|| err(path, item.line, "not a mapping".into()))?;
    let mut name = None;
    let mut id = None;
    let mut limit = None;
    let mut unit = None;
    let mut blanket = None;
    for (k, v) in fields {
        let key = k.text().unwrap_or_default();
        let at = format!("{path}.{key}");
        match key {
            "name" => {
                let n = text_of(v)
                    .filter(|n| {
                        !n.is_empty()
                            && n.len() <= 128
                            && n.bytes()
                                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
                    })
                    .ok_or_else(|| {
                        err(
                            &at,
                            v.line,
                            "1 to 128 of A-Z, a-z, 0-9, '.', '_', '-'".into(),
                        )
                    })?;
                if n == "unmatched" {
                    return Err(err(
                        &at,
                        v.line,
                        "\"unmatched\" names the buckets no rule matches (in the metrics)".into(),
                    ));
                }
                name = Some(n.to_owned());
            }
            "id" => {
                let map = entries(v).ok_or_else(|| {
                    err(
                        &at,
                        v.line,
                        "a mapping of bucket id keys to values or \"*\"".into(),
                    )
                })?;
                let mut out = Vec::new();
                let mut bytes = 0;
                for (ik, iv) in map {
                    let ik_text = text_of(ik).unwrap_or_default().to_owned();
                    let value = text_of(iv).ok_or_else(|| {
                        err(
                            &format!("{at}.{ik_text}"),
                            iv.line,
                            "must be a string".into(),
                        )
                    })?;
                    bytes += ik_text.len() + value.len();
                    out.push((ik_text, (value != "*").then(|| value.to_owned())));
                }
                if out.is_empty() || out.len() > MAX_ID_ENTRIES || bytes > MAX_ID_BYTES {
                    return Err(err(
                        &at,
                        v.line,
                        format!(
                            "1 to {MAX_ID_ENTRIES} entries of at most {MAX_ID_BYTES} bytes in all"
                        ),
                    ));
                }
                out.sort_unstable();
                id = Some(out);
            }
            "requests_per_unit" => {
                limit = Some(
                    int_of(v)
                        .filter(|n| (0..=MAX_LIMIT as i128).contains(n))
                        .ok_or_else(|| {
                            err(&at, v.line, format!("a whole number of 0 to {MAX_LIMIT}"))
                        })? as u64,
                );
            }
            "unit" => {
                let w = match text_of(v).map(str::to_ascii_lowercase).as_deref() {
                    Some("second") => 1,
                    Some("minute") => 60,
                    Some("hour") => 3600,
                    Some("day") => 86_400,
                    _ => {
                        return Err(err(&at, v.line, "second, minute, hour or day".into()));
                    }
                };
                unit = Some(Duration::from_secs(w));
            }
            "blanket" => {
                blanket = Some(
                    text_of(v)
                        .and_then(Blanket::parse)
                        .ok_or_else(|| err(&at, v.line, "allow_all or deny_all".into()))?,
                );
            }
            other => {
                return Err(err(
                    &format!("{path}.{other}"),
                    k.line,
                    "unknown key (name, id, requests_per_unit, unit, blanket)".into(),
                ));
            }
        }
    }
    let name = name.ok_or_else(|| err(&format!("{path}.name"), item.line, "missing".into()))?;
    let id = id.ok_or_else(|| err(&format!("{path}.id"), item.line, "missing".into()))?;
    let answer = match (blanket, limit, unit) {
        (Some(b), None, None) => Answer::Blanket(b),
        (Some(_), _, _) => {
            return Err(err(
                &format!("{path}.blanket"),
                item.line,
                "a blanket rule has no requests_per_unit nor unit".into(),
            ));
        }
        // a limit of 0 denies every request: a blanket deny
        (None, Some(0), Some(_)) => Answer::Blanket(Blanket::DenyAll),
        (None, Some(limit), Some(window)) => Answer::Limit { limit, window },
        (None, None, _) => {
            return Err(err(
                &format!("{path}.requests_per_unit"),
                item.line,
                "missing (or give blanket: allow_all | deny_all)".into(),
            ));
        }
        (None, Some(_), None) => {
            return Err(err(&format!("{path}.unit"), item.line, "missing".into()));
        }
    };
    Ok(BucketRule {
        name,
        id,
        answer,
        line: item.line,
    })
}

fn entries(n: &Node) -> Option<&[(Node, Node)]> {
    match &n.kind {
        Kind::Map(e) => Some(e),
        _ => None,
    }
}

/// A scalar's text, for a field that takes a string (a number's text too).
fn text_of(n: &Node) -> Option<&str> {
    match n.scalar()? {
        Scalar::Null => None,
        _ => n.text(),
    }
}

fn int_of(n: &Node) -> Option<i128> {
    match n.scalar()? {
        Scalar::Int(i) => Some(i),
        _ => None,
    }
}

/// `500ms`, `5s`, `2m`, `1h` (whole numbers), from 100 ms to 1 hour.
fn duration(n: &Node) -> Option<Duration> {
    let s = text_of(n)?.trim();
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let (num, unit) = s.split_at(split);
    let num: u64 = num.parse().ok()?;
    let ms = match unit {
        "ms" => num,
        "s" => num.checked_mul(1_000)?,
        "m" => num.checked_mul(60_000)?,
        "h" => num.checked_mul(3_600_000)?,
        _ => return None,
    };
    (100..=3_600_000)
        .contains(&ms)
        .then(|| Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "
domain: edge
reporting_interval: 5s
buckets:
  - name: per-user
    id: { route: chat, user: \"*\" }
    requests_per_unit: 600
    unit: minute
  - name: alice
    id: { route: chat, user: alice }
    requests_per_unit: 10
    unit: second
  - name: health
    id: { route: health }
    blanket: allow_all
";

    fn id(entries: &[(&str, &str)]) -> BucketId {
        bucket_id(entries.iter().map(|(k, v)| ((*k).into(), (*v).into()))).unwrap()
    }

    #[test]
    fn reads_the_example_and_matches_the_most_specific_rule() {
        let c = DomainConfig::parse("edge.yaml", EXAMPLE).unwrap();
        assert_eq!(c.domain, "edge");
        assert_eq!(c.reporting_interval, Duration::from_secs(5));
        assert_eq!(c.assignment_ttl, Duration::from_secs(11));
        assert_eq!(c.unmatched, Blanket::DenyAll);
        assert_eq!(c.on_store_error, OnStoreError::Deny);
        let (i, key) = c
            .lookup(&id(&[("user", "bob"), ("route", "chat")]))
            .unwrap();
        assert_eq!(c.rules[i].name, "per-user");
        assert_eq!(key, "3:bob");
        let (i, key) = c
            .lookup(&id(&[("user", "alice"), ("route", "chat")]))
            .unwrap();
        assert_eq!(c.rules[i].name, "alice");
        assert_eq!(key, "");
        assert_eq!(c.lookup(&id(&[("route", "health")])).unwrap().0, 2);
        // other keys, or one more key, match nothing
        assert!(c.lookup(&id(&[("route", "other")])).is_none());
        assert!(
            c.lookup(&id(&[("route", "chat"), ("user", "x"), ("extra", "1")]))
                .is_none()
        );
    }

    #[test]
    fn budget_keys_never_collide() {
        let c = DomainConfig::parse(
            "t.yaml",
            "domain: d\nreporting_interval: 1s\nbuckets:\n  - name: r\n    id: {a: \"*\", b: \"*\"}\n    requests_per_unit: 1\n    unit: second\n",
        )
        .unwrap();
        let k1 = c.lookup(&id(&[("a", "1:2"), ("b", "3")])).unwrap().1;
        let k2 = c.lookup(&id(&[("a", "1"), ("b", "2:3")])).unwrap().1;
        assert_ne!(k1, k2);
    }

    #[test]
    fn bad_files_are_refused_naming_the_field() {
        let cases: &[(&str, &str)] = &[
            ("reporting_interval: 1s\nbuckets: []\n", "domain: missing"),
            ("domain: d\nbuckets: []\n", "reporting_interval: missing"),
            (
                "domain: d\nreporting_interval: 0s\n",
                "reporting_interval: a duration",
            ),
            (
                "domain: d\nreporting_interval: 5s\nassignment_ttl: 5s\n",
                "assignment_ttl: 5000 ms",
            ),
            (
                "domain: d\nreporting_interval: 1s\nfoo: 1\n",
                "foo: unknown key",
            ),
            (
                "domain: d\nreporting_interval: 1s\nbuckets:\n  - name: a\n    id: {k: v}\n    requests_per_unit: -1\n    unit: second\n",
                "buckets[0].requests_per_unit: a whole number",
            ),
            (
                "domain: d\nreporting_interval: 1s\nbuckets:\n  - name: a\n    id: {k: v}\n    requests_per_unit: 1\n    unit: fortnight\n",
                "buckets[0].unit: second",
            ),
            (
                "domain: d\nreporting_interval: 1s\nbuckets:\n  - name: a\n    id: {k: v}\n    requests_per_unit: 1\n",
                "buckets[0].unit: missing",
            ),
            (
                "domain: d\nreporting_interval: 1s\nbuckets:\n  - name: a\n    id: {k: v}\n    blanket: allow_all\n  - name: a\n    id: {k: w}\n    blanket: allow_all\n",
                "buckets[1].name: \"a\" is also",
            ),
            (
                "domain: d\nreporting_interval: 1s\nbuckets:\n  - name: a\n    id: {k: v}\n    blanket: allow_all\n  - name: b\n    id: {k: v}\n    blanket: deny_all\n",
                "buckets[1].id: the same id",
            ),
            (
                "domain: d\nreporting_interval: 1s\nbuckets:\n  - name: a\n    id: {}\n    blanket: allow_all\n",
                "buckets[0].id: 1 to 32 entries",
            ),
            (
                "domain: d\nreporting_interval: 1s\nbuckets:\n  - name: a b\n    id: {k: v}\n    blanket: allow_all\n",
                "buckets[0].name: 1 to 128",
            ),
            (
                "domain: d\nreporting_interval: 1s\nbuckets:\n  - name: a\n    id: {k: v}\n    blanket: allow_all\n    unit: second\n",
                "buckets[0].blanket: a blanket rule has no",
            ),
            (
                "domain: d\nreporting_interval: 1s\nmax_buckets_per_stream: 0\n",
                "max_buckets_per_stream",
            ),
            ("", "the file is empty"),
            ("[1]", "not a mapping"),
            (
                "domain: d\nreporting_interval: 1s\nbuckets:\n  - name: unmatched\n    id: {k: v}\n    blanket: allow_all\n",
                "buckets[0].name: \"unmatched\" names",
            ),
        ];
        for (text, want) in cases {
            let e = DomainConfig::parse("t.yaml", text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(e.starts_with("t.yaml: "), "{e}");
        }
    }

    #[test]
    fn a_limit_of_zero_is_a_blanket_deny_and_ttls_are_whole_seconds() {
        let c = DomainConfig::parse(
            "t.yaml",
            "domain: d\nreporting_interval: 1500ms\nassignment_ttl: 2600ms\nbuckets:\n  - name: a\n    id: {k: v}\n    requests_per_unit: 0\n    unit: second\n",
        )
        .unwrap();
        assert_eq!(c.rules[0].answer, Answer::Blanket(Blanket::DenyAll));
        assert_eq!(c.assignment_ttl, Duration::from_secs(3));
    }

    #[test]
    fn short_intervals_and_leases_past_the_limit_are_warned_of() {
        // 10 a second with reports every 5 s: 170 prepaid in a lease
        let w = DomainConfig::parse("edge.yaml", EXAMPLE)
            .unwrap()
            .warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("\"alice\": one assignment prepays 170"),
            "{w:?}"
        );
        let ok = EXAMPLE.replace(
            "requests_per_unit: 10\n    unit: second",
            "requests_per_unit: 10\n    unit: hour",
        );
        let w = DomainConfig::parse("edge.yaml", &ok).unwrap().warnings();
        assert!(w.is_empty(), "{w:?}");
        let fast = ok.replace("reporting_interval: 5s", "reporting_interval: 1s");
        let w = DomainConfig::parse("edge.yaml", &fast).unwrap().warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("reports every 5 s"), "{w:?}");
    }

    #[test]
    fn reported_ids_are_bounded() {
        assert_eq!(bucket_id(Vec::new()), Err(BadId::Empty));
        let many = (0..=MAX_ID_ENTRIES).map(|i| (i.to_string(), String::new()));
        assert_eq!(bucket_id(many), Err(BadId::TooLarge));
        let long = [("k".to_owned(), "v".repeat(MAX_ID_BYTES))];
        assert_eq!(bucket_id(long), Err(BadId::TooLarge));
    }
}
