//! The keys a file may hold: the Go service's (`validKeys`) and ours, and
//! its check of a whole file before it is read (`validateYamlKeys`).

use super::super::ConfigError;
use super::super::yaml::{Kind, Node as Y, Scalar};
use super::fields::{Ctx, join};

/// The keys the Go service accepts, anywhere in a file (its `validKeys`).
pub(super) const GO_KEYS: [&str; 16] = [
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
pub(super) const EXT_KEYS: [&str; 6] = [
    "strategy",
    "burst",
    "unit_multiplier",
    "duration",
    "calendar",
    "charge",
];

/// Our extensions, at the top of a file only.
pub(super) const TOP_EXT_KEYS: [&str; 1] = ["failure_policy"];

/// The Go service's `validateYamlKeys`, run on the whole file before it is
/// read: every mapping key a string and a known key, every list a list of
/// mappings, every scalar a string, an integer, a boolean or null (not a
/// float); `metadata` is not looked into.
pub(super) fn validate_keys(ctx: &Ctx<'_>, node: &Y, path: &str) -> Result<(), ConfigError> {
    let Kind::Map(entries) = &node.kind else {
        return Ok(());
    };
    for (k, v) in entries {
        let key = string_key(ctx, k, path)?;
        let here = join(path, key);
        known_key(ctx, key, &here, k.line)?;
        if key == "metadata" {
            continue;
        }
        match &v.kind {
            Kind::Seq(items) => list_of_mappings(ctx, items, &here)?,
            Kind::Map(_) => validate_keys(ctx, v, &here)?,
            Kind::Scalar { .. } => go_scalar(ctx, v, &here)?,
        }
    }
    Ok(())
}

/// A mapping key is a string (not a number, a boolean, null, a list).
fn string_key<'k>(ctx: &Ctx<'_>, k: &'k Y, path: &str) -> Result<&'k str, ConfigError> {
    match k.scalar() {
        Some(Scalar::Str(s)) => Ok(s),
        _ => Err(ctx.err(
            path,
            k.line,
            format!(
                "key {:?} is not a string but {} (quote it)",
                k.text().unwrap_or_default(),
                k.describe()
            ),
        )),
    }
}

/// A key is one the Go service or an extension knows, with a hint for a
/// common misspelling.
fn known_key(ctx: &Ctx<'_>, key: &str, here: &str, line: usize) -> Result<(), ConfigError> {
    if GO_KEYS.contains(&key) || EXT_KEYS.contains(&key) || TOP_EXT_KEYS.contains(&key) {
        return Ok(());
    }
    let hint = match key {
        "ratelimit" | "rateLimit" | "rate-limit" => " (`rate_limit`?)",
        "requestsperunit" | "requestsPerUnit" | "requests-per-unit" => " (`requests_per_unit`?)",
        _ => "",
    };
    Err(ctx.err(here, line, format!("unknown key {key:?}{hint}")))
}

/// A list holds only mappings, each of known keys.
fn list_of_mappings(ctx: &Ctx<'_>, items: &[Y], here: &str) -> Result<(), ConfigError> {
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
    Ok(())
}

/// A scalar is one Go's YAML library reads into a field: not a float, not
/// an integer past 64 bits.
fn go_scalar(ctx: &Ctx<'_>, v: &Y, here: &str) -> Result<(), ConfigError> {
    match v.scalar() {
        Some(Scalar::Float(_)) => Err(ctx.err(
            here,
            v.line,
            format!(
                "{:?} is read as a floating-point number, which envoyproxy/ratelimit rejects (quote it if it is a string)",
                v.text().unwrap_or_default()
            ),
        )),
        Some(Scalar::Int(n)) if i64::try_from(n).is_err() => {
            Err(ctx.err(here, v.line, "the number is too large"))
        }
        _ => Ok(()),
    }
}

/// A key valid for the Go service but not where it is: ignored there, so
/// here with a warning; an extension key is an error anywhere but in
/// `rate_limit`.
pub(super) fn misplaced(
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
