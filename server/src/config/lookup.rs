//! Matching a request's descriptor to a rule, as the Go service's
//! `GetLimit` does: [`Config::lookup`] and [`Config::lookup_match`].

use super::{Config, Rule};

/// What [`Config::lookup_match`] found for a request's descriptor.
#[derive(Debug, Clone, PartialEq)]
pub struct Match<'a> {
    /// The configured limit.
    pub rule: &'a Rule,
    /// The name the Go service gives this descriptor's statistics:
    /// with `detailed_metric`, the request's own key and values
    /// (`api.remote_address_10.0.0.1`); with `value_to_metric`, the values
    /// at the levels that ask for it; otherwise [`Rule::full_key`].
    pub metric_key: String,
    /// For each entry of the descriptor, the wildcard value (with its `*`)
    /// that stands for the request's value in the counter's key when it
    /// was matched by a wildcard with `share_threshold: true` (all values
    /// that match share one counter); `None` where the request's own value
    /// is used.
    pub shared_values: Vec<Option<String>>,
}

impl Config {
    /// The rule for a request's descriptor (its `(key, value)` entries) in
    /// `domain`, as the Go service's `GetLimit` finds it: at each level the
    /// entry's `key_value` if configured, else the first wildcard
    /// (`key: path, value: "/v1/*"`) that matches it, in file order, else
    /// its `key` alone (a node without `value`, a limit per distinct
    /// value); the limit applies only if the node that the last entry
    /// reaches has one (a descriptor longer or shorter than the configured
    /// path gets none). An unknown domain or no match is no limit.
    ///
    /// As in Go, an entry's key and value are joined with `_` before they
    /// are looked up, so entries that join alike reach one node: `(a, b_c)`
    /// and `(a_b, c)` both match `key: a, value: b_c` (a `key: a_b, value:
    /// c` beside it would be the same node, rejected as a duplicate), and
    /// `(a, b)` matches a node `key: a_b` without a value, as its exact
    /// value, before any wildcard or key-only sibling.
    pub fn lookup(&self, domain: &str, entries: &[(&str, &str)]) -> Option<&Rule> {
        self.lookup_match(domain, entries).map(|m| m.rule)
    }

    /// [`lookup`](Self::lookup), with the names the Go service derives
    /// from the path the entries took ([`Match`]).
    pub fn lookup_match(&self, domain: &str, entries: &[(&str, &str)]) -> Option<Match<'_>> {
        let mut node = self.domains.get(domain)?;
        let mut detailed = String::from(domain);
        let mut enhanced = String::from(domain);
        let mut shared: Vec<Option<String>> = vec![None; entries.len()];
        let mut found = None;
        for (i, &(key, value)) in entries.iter().enumerate() {
            let key_value = format!("{key}_{value}");
            detailed.push('.');
            detailed.push_str(&key_value);
            let mut next = node.children.get(&key_value);
            let mut wildcard: Option<&str> = None;
            if next.is_none() {
                for (pattern, parts) in &node.wildcards {
                    if wildcard_match(parts, &key_value) {
                        next = node.children.get(pattern);
                        wildcard = Some(pattern);
                        break;
                    }
                }
            }
            let by_value = next.is_some();
            if next.is_none() {
                next = node.children.get(key);
            }
            let prefix = format!("{key}_");
            enhanced.push('.');
            enhanced.push_str(key);
            let Some(next) = next else {
                break;
            };
            let shown = match wildcard {
                Some(pattern) => {
                    let wildcard_value = pattern.strip_prefix(&prefix).unwrap_or(pattern);
                    if next.share_threshold {
                        shared[i] = Some(wildcard_value.to_owned());
                        wildcard_value
                    } else if next.value_to_metric {
                        value
                    } else {
                        wildcard_value
                    }
                }
                None if by_value => value,
                None if next.value_to_metric => value,
                None => "",
            };
            if !shown.is_empty() {
                enhanced.push('_');
                enhanced.push_str(shown);
            }
            if i + 1 == entries.len() {
                found = next.rule.as_ref();
            }
            if next.children.is_empty() {
                break;
            }
            node = next;
        }
        let rule = found?;
        let metric_key = if rule.detailed_metric {
            if shared.iter().any(Option::is_some) {
                shared_metric_key(domain, entries, &shared)
            } else {
                detailed
            }
        } else {
            enhanced
        };
        Some(Match {
            rule,
            metric_key,
            shared_values: shared,
        })
    }
}

/// The `detailed_metric` name of a descriptor some of whose values were
/// matched by a wildcard with `share_threshold`: each such value written
/// as its wildcard (`shared`), the others as the request's.
fn shared_metric_key(domain: &str, entries: &[(&str, &str)], shared: &[Option<String>]) -> String {
    let mut k = String::from(domain);
    for ((key, value), s) in entries.iter().zip(shared) {
        k.push('.');
        k.push_str(key);
        match s {
            Some(p) => {
                k.push('_');
                k.push_str(p);
            }
            None if !value.is_empty() => {
                k.push('_');
                k.push_str(value);
            }
            None => {}
        }
    }
    k
}

/// Whether `value` matches a pattern split at its `*`s (each `*` matches
/// any run of characters, the empty one too), as the Go service's
/// `wildcardMatch`.
pub(super) fn wildcard_match(parts: &[String], value: &str) -> bool {
    let [first, middle @ .., last] = parts else {
        return parts.first().is_some_and(|p| p == value);
    };
    let fixed: usize = parts.iter().map(String::len).sum();
    if value.len() < fixed || !value.starts_with(first.as_str()) || !value.ends_with(last.as_str())
    {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for part in middle {
        match rest.find(part.as_str()) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}
