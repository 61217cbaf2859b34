//! A configuration's rules as limiters: one [`RateLimiter`] per limit
//! (its prefix, quota name and user keys), the strict twin of a
//! `quota_mode` limit, the limiters of `limit` overrides (kept, up to a
//! bound), and what a denied call records under each [`Charge`].

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tower_redis_ratelimit::error::ConfigError as LimiterConfigError;
use tower_redis_ratelimit::limiter::OnDenial;
use tower_redis_ratelimit::{Quota, Rate, RateLimiter};

use crate::config::{Charge, Config, Rule, Unit};
use crate::options::ServiceOptions;

/// Why a service could not be built: a rule the library rejects, named by
/// its file, path, line and key (the loader rejects what it knows the
/// library would, so this is for what it does not).
#[derive(Debug)]
pub struct BuildError {
    /// The rule's file.
    pub file: String,
    /// The rule's path in its file ([`Rule::path`]).
    pub path: String,
    /// The line of its `rate_limit`, 1-based.
    pub line: usize,
    /// The rule's full key (`domain.key_value...`).
    pub full_key: String,
    /// The library's reason.
    pub source: Box<LimiterConfigError>,
}

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} ({}): {} (line {})",
            self.file, self.path, self.full_key, self.source, self.line
        )
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

/// Per domain, per rule ([`Rule::id`]): the limit and the rule it was built
/// from (a reload keeps the limit of an unchanged rule).
pub(crate) type Limits = HashMap<String, HashMap<String, (Rule, Limit)>>;

/// The limiters of `limit` overrides, by [`OverrideId`].
#[derive(Debug, Default)]
pub(crate) struct Overrides(Mutex<HashMap<OverrideId, Arc<RateLimiter>>>);

/// Builds a limiter of one quota under a prefix, recording its denials as
/// the [`OnDenial`] says.
pub(crate) type Make =
    dyn Fn(&str, Quota, OnDenial) -> Result<RateLimiter, LimiterConfigError> + Send + Sync;

/// What a call alone (one part) records when denied, under `charge`: its
/// hits past the limit in the same store call, unless `admitted`.
pub(crate) fn alone(charge: Charge) -> OnDenial {
    match charge {
        Charge::Admitted => OnDenial::Nothing,
        Charge::Over | Charge::Always => OnDenial::Record,
    }
}

/// What a part of a joint decision records when the call is denied, under
/// `charge`: `over` only if it is over itself, `always` whatever it is.
pub(crate) fn in_joint(charge: Charge) -> OnDenial {
    match charge {
        Charge::Admitted => OnDenial::Nothing,
        Charge::Over => OnDenial::RecordIfOver,
        Charge::Always => OnDenial::Record,
    }
}

/// What a configured rule decides with.
#[derive(Debug, Clone)]
pub(crate) enum Limit {
    /// `unlimited: true`.
    Unlimited,
    /// `requests_per_unit: 0`: every request is over.
    Zero,
    /// A limiter of one quota; for a `quota_mode` limit, also its strict
    /// twin (the same quota, not in shadow mode: the same storage keys),
    /// which decides when it is the request's only quota-mode limit.
    Limited(Arc<RateLimiter>, Option<Arc<RateLimiter>>),
}

/// The limits of `config`: an unchanged rule's from `old`, the others
/// built with `make`.
pub(crate) fn build_limits(
    config: &Config,
    make: &Make,
    old: Option<&Limits>,
    options: &ServiceOptions,
) -> Result<Limits, BuildError> {
    let mut limits = Limits::new();
    for domain in config.domains() {
        let before = old.and_then(|o| o.get(domain));
        let rules = limits.entry(domain.to_owned()).or_default();
        for rule in config.rules(domain) {
            let kept = before
                .and_then(|b| b.get(&rule.id))
                .filter(|(r, _)| same_limit(r, rule))
                .map(|(_, l)| l.clone());
            let limit = match kept {
                Some(l) => l,
                None => rule_limit(make, domain, rule, options).map_err(|source| BuildError {
                    file: rule.file.clone(),
                    path: rule.path.clone(),
                    line: rule.line,
                    full_key: rule.full_key.clone(),
                    source: Box::new(source),
                })?,
            };
            rules.insert(rule.id.clone(), (rule.clone(), limit));
        }
    }
    Ok(limits)
}

/// Whether two rules of one full key build the same limiter.
fn same_limit(a: &Rule, b: &Rule) -> bool {
    a.requests_per_unit == b.requests_per_unit
        && a.period_us == b.period_us
        && a.unlimited == b.unlimited
        && a.shadow_mode == b.shadow_mode
        && a.quota_mode == b.quota_mode
        && a.strategy == b.strategy
        && a.burst == b.burst
        && a.calendar == b.calendar
        && a.charge == b.charge
}

/// The limiter (or lack of one) of `rule`.
fn rule_limit(
    make: &Make,
    domain: &str,
    rule: &Rule,
    options: &ServiceOptions,
) -> Result<Limit, LimiterConfigError> {
    // (the service-wide modes are the same for every rule and reload)
    let shadow_mode = rule.shadow_mode || options.shadow_mode;
    let quota_mode = rule.quota_mode || options.quota_mode;
    if rule.unlimited {
        return Ok(Limit::Unlimited);
    }
    if rule.requests_per_unit == 0 {
        return Ok(Limit::Zero);
    }
    let rate = Rate::new(
        u64::from(rule.requests_per_unit),
        Duration::from_micros(rule.period_us.max(1)),
    );
    let mut quota = match (&rule.calendar, rule.strategy) {
        (Some(calendar), _) => Quota::fixed_window(rate).calendar(calendar.clone()),
        (None, None) => Quota::fixed_window(rate).aligned(),
        (None, Some(strategy)) => Quota::new(strategy, rate),
    };
    if let Some(burst) = rule.burst {
        quota = quota.burst(burst);
    }
    // a quota-mode limit denies only with every quota-mode limit of the
    // request (see `decide::plan::denies`): decided as a shadow quota, it never
    // denies the joint decision and takes nothing when it would
    // named, the quota's storage keys do not hold its count: a reload that
    // changes only `requests_per_unit` (or `burst`) keeps what callers
    // used, as the Go service's keys do (a lower limit must not hand out a
    // fresh window); a new strategy or period counts anew
    quota = quota.name(quota_name(domain, rule));
    let prefix = prefix_for("r", domain, &rule.full_key, &rule.id);
    let on_denial = alone(rule.charge.unwrap_or(options.charge));
    let strict = if quota_mode && !shadow_mode {
        Some(Arc::new(make(&prefix, quota.clone(), on_denial)?))
    } else {
        None
    };
    if shadow_mode || quota_mode {
        quota = quota.shadow(true);
    }
    let limiter = make(&prefix, quota, on_denial)?;
    Ok(Limit::Limited(Arc::new(limiter), strict))
}

/// The name of a rule's quota (shown in `RateLimit-Policy`): its key
/// without the domain (`remote_address`, `path_/login`), every byte but
/// ASCII letters, digits, `-`, `_` and `.` as `_`, at most 64 bytes. Not
/// the rule's `name`: renaming a rule must not reset its counts.
pub(crate) fn quota_name(domain: &str, rule: &Rule) -> String {
    let source = rule
        .full_key
        .strip_prefix(domain)
        .and_then(|k| k.strip_prefix('.'))
        .unwrap_or(&rule.full_key);
    let mut name: String = source
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if name.is_empty() {
        name.push_str("limit");
    }
    name
}

/// A limiter prefix (ASCII letters, digits, `-`, `_`, `.`; at most 64
/// bytes) for the thing `id` names in `domain` (a rule's [`Rule::id`]):
/// `rls.<kind>.` and the start of `name` (how it reads) with every other
/// byte as `_`, then a 64-bit FNV-1a hash of `domain` and `id` (so rules
/// that read alike, a nested `b` → `c` and a key `b.c`, stay apart).
pub(crate) fn prefix_for(kind: &str, domain: &str, name: &str, id: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in domain.bytes().chain([0]).chain(id.bytes()) {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    let mut p = format!("rls.{kind}.");
    p.extend(name.bytes().take(36).map(|b| {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.') {
            char::from(b)
        } else {
            '_'
        }
    }));
    let _ = write!(p, ".{hash:016x}");
    p
}

/// The user key of a descriptor: each entry as the Go service matches and
/// counts it, `key_value`, with its length
/// before it, joined with `&` (the lengths keep entries apart whatever
/// they hold; within one entry `(a, b_c)` and `(a_b, c)` are one key, as
/// they match one rule and share one counter in the Go service); a value
/// matched by a `share_threshold` wildcard is the wildcard.
pub(crate) fn user_key(entries: &[(&str, &str)], shared: &[Option<String>]) -> String {
    let mut k = String::new();
    for (i, (key, value)) in entries.iter().enumerate() {
        let value = shared.get(i).and_then(Option::as_deref).unwrap_or(value);
        if i > 0 {
            k.push('&');
        }
        let _ = write!(k, "{}:{key}_{value}", key.len() + 1 + value.len());
    }
    k
}

/// The most units one call records on `rule` (`Core::record`): what its
/// rate repays in 366 days, the longest period.
pub(crate) fn debt_cap(rule: &Rule) -> u64 {
    const LONGEST_US: u64 = 366 * 86_400 * 1_000_000;
    let periods = LONGEST_US.div_ceil(rule.period_us.max(1));
    u64::from(rule.requests_per_unit).saturating_mul(periods)
}

/// The limiter of one `limit` override: its storage prefix, quota name,
/// count, unit and charge.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct OverrideId {
    pub(crate) prefix: String,
    pub(crate) name: String,
    pub(crate) requests_per_unit: u32,
    pub(crate) unit: Unit,
    pub(crate) charge: Charge,
}

impl Overrides {
    /// The limiter of the override `id` (an aligned fixed window of its
    /// count per its unit, in shadow mode with the service): the kept one,
    /// else built with `make`, and kept while fewer than
    /// [`ServiceOptions::max_override_limiters`] are.
    pub(crate) fn limiter(
        &self,
        make: &Make,
        options: &ServiceOptions,
        id: OverrideId,
    ) -> Result<Arc<RateLimiter>, LimiterConfigError> {
        if let Ok(map) = self.0.lock()
            && let Some(l) = map.get(&id)
        {
            return Ok(l.clone());
        }
        let rate = Rate::new(
            u64::from(id.requests_per_unit),
            Duration::from_secs(id.unit.seconds()),
        );
        let quota = Quota::fixed_window(rate)
            .aligned()
            .name(id.name.as_str())
            .shadow(options.shadow_mode);
        let limiter = Arc::new(make(&id.prefix, quota, alone(id.charge))?);
        if let Ok(mut map) = self.0.lock()
            && map.len() < options.max_override_limiters
        {
            map.insert(id, limiter.clone());
        }
        Ok(limiter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_valid_and_distinct() {
        let a = prefix_for("r", "api", "api.path_/v1/{x}", "11:path_/v1/{x}");
        let b = prefix_for("r", "api", "api.path__v1__x_", "11:path__v1__x_");
        assert_ne!(a, b);
        for p in [&a, &b] {
            assert!(p.len() <= 64, "{p}");
            assert!(
                p.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
            );
        }
        let long = prefix_for("r", "d", &"x".repeat(500), "x");
        assert!(long.len() <= 64);
    }

    #[test]
    fn user_keys_are_unambiguous() {
        let a = user_key(&[("a", "b&3:c_d")], &[]);
        let b = user_key(&[("a", "b"), ("c", "d")], &[]);
        assert_ne!(a, b);
        // one entry is counted as the Go service matches it, `key_value`
        assert_eq!(
            user_key(&[("a", "b_c")], &[]),
            user_key(&[("a_b", "c")], &[])
        );
        let shared = user_key(&[("p", "/v1/x")], &[Some("/v1/*".to_owned())]);
        assert_eq!(shared, "7:p_/v1/*");
    }
}
