//! The statistics as Prometheus's text exposition format (version 0.0.4):
//! [`Metrics::render`], families in a fixed order, series sorted by their
//! labels.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use super::{
    ByLabel, CONFIG_LOAD_ERROR, CONFIG_LOAD_SUCCESS, DOMAIN_NOT_FOUND, KeyCounters, Metrics,
    NEAR_LIMIT, OTHER_DOMAINS, OVER_LIMIT, SHADOW_MODE, STORE_ERRORS, TOTAL_HITS, WITHIN_LIMIT,
    label,
};

/// The five per-limit counters, in the order [`KeyCounters`] holds them,
/// with their help.
const PER_LIMIT: [(&str, &str); 5] = [
    (
        TOTAL_HITS,
        "Hits on a limit (a request's hits_addend units).",
    ),
    (WITHIN_LIMIT, "Hits of requests the limit admitted."),
    (
        NEAR_LIMIT,
        "Hits past the near-limit ratio of the limit that did not pass the limit.",
    ),
    (OVER_LIMIT, "Hits past the limit."),
    (
        SHADOW_MODE,
        "Hits past the limit that shadow mode let through.",
    ),
];

/// The counters of `map`, by label, sorted.
fn snapshot(map: &ByLabel) -> Vec<(Arc<str>, u64)> {
    let mut v: Vec<_> = map
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .map(|(l, c)| (l.clone(), c.load(Ordering::Relaxed)))
        .collect();
    v.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    v
}

/// `# HELP` and `# TYPE` (counter) of `name`.
pub(crate) fn family(out: &mut String, name: &str, help: &str) {
    let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} counter\n");
}

/// One sample line: `name{labels} value`.
pub(crate) fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: u64) {
    out.push_str(name);
    for (i, (k, v)) in labels.iter().enumerate() {
        out.push(if i == 0 { '{' } else { ',' });
        out.push_str(k);
        out.push_str("=\"");
        label::push_escaped(out, v);
        out.push('"');
    }
    if !labels.is_empty() {
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
}

impl Metrics {
    /// Every series, in Prometheus's text exposition format (version
    /// 0.0.4), families in a fixed order, series sorted by their labels.
    ///
    /// Builds the whole text (at most 600 bytes a series: see the
    /// [bounds](crate::metrics#bounds)) on the calling thread; the locks
    /// are held only to copy the series out, so counting goes on
    /// meanwhile. The endpoint ([`serve`](crate::metrics::serve)) renders
    /// on a blocking thread, once for the scrapes that ask together.
    pub fn render(&self) -> String {
        type Keyed = (Arc<str>, Arc<str>, Arc<KeyCounters>);
        let mut keys: Vec<Keyed> = {
            let map = self.keys.read().unwrap_or_else(PoisonError::into_inner);
            map.iter()
                .flat_map(|(d, keys)| keys.iter().map(|(k, c)| (d.clone(), k.clone(), c.clone())))
                .collect()
        };
        keys.sort_unstable_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        let store_errors = snapshot(&self.store_errors);
        let not_found = snapshot(&self.not_found);
        let other = self.other_not_found.load(Ordering::Relaxed);

        // (the name, `{domain="",key=""} `, the value and the line feed:
        // under 100 bytes a line besides the labels)
        let per_key: usize = keys
            .iter()
            .map(|(d, k, _)| 100 + label::escaped_len(d) + label::escaped_len(k))
            .sum();
        let mut out = String::with_capacity(1_024 + 5 * per_key);
        for (name, help, value) in [
            (
                CONFIG_LOAD_SUCCESS,
                "Configurations loaded.",
                &self.load_success,
            ),
            (
                CONFIG_LOAD_ERROR,
                "Configurations rejected (the running one stays).",
                &self.load_error,
            ),
        ] {
            family(&mut out, name, help);
            sample(&mut out, name, &[], value.load(Ordering::Relaxed));
            out.push('\n');
        }
        if !store_errors.is_empty() {
            family(
                &mut out,
                STORE_ERRORS,
                "Calls whose store failed or timed out.",
            );
            for (d, n) in &store_errors {
                sample(&mut out, STORE_ERRORS, &[("domain", d)], *n);
            }
            out.push('\n');
        }
        if !not_found.is_empty() || other > 0 {
            family(
                &mut out,
                DOMAIN_NOT_FOUND,
                "Descriptors of requests for a domain with no configuration.",
            );
            for (d, n) in &not_found {
                sample(&mut out, DOMAIN_NOT_FOUND, &[("domain", d)], *n);
            }
            if other > 0 {
                sample(
                    &mut out,
                    DOMAIN_NOT_FOUND,
                    &[("domain", OTHER_DOMAINS)],
                    other,
                );
            }
            out.push('\n');
        }
        if !keys.is_empty() {
            for (i, (name, help)) in PER_LIMIT.into_iter().enumerate() {
                family(&mut out, name, help);
                for (d, k, c) in &keys {
                    let n = c.0[i].load(Ordering::Relaxed);
                    sample(&mut out, name, &[("domain", d), ("key", k)], n);
                }
                out.push('\n');
            }
        }
        let sections = self
            .sections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for section in sections {
            section(&mut out);
        }
        out
    }
}
