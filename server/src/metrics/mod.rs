//! The service's statistics, in Prometheus's text exposition format.
//!
//! The per-limit counters are envoyproxy/ratelimit's, counted as it counts
//! them, in hits (a request's `hits_addend` units, 1 by default), and named
//! as its Prometheus mapping names them; each has the labels `domain` and
//! `key`, the limit's statistics key without the domain (`remote_address`,
//! `path_/v1/*`, `tenant.user`):
//!
//! * `ratelimit_service_rate_limit_total_hits`: every hit on the limit;
//! * `ratelimit_service_rate_limit_within_limit`: hits of requests the limit
//!   admitted;
//! * `ratelimit_service_rate_limit_near_limit`: hits that took the count past
//!   the near-limit ratio of the limit (`floor(limit × ratio)`, 0.8 unless
//!   [`near_limit_ratio`](Metrics::near_limit_ratio) says otherwise) without
//!   passing the limit, in a request that was admitted or not;
//! * `ratelimit_service_rate_limit_over_limit`: hits past the limit;
//! * `ratelimit_service_rate_limit_shadow_mode`: of those, the hits a limit
//!   in `shadow_mode` let through.
//!
//! The key holds a request's values only where a rule asks for it
//! (`detailed_metric`, `value_to_metric`), and then for at most
//! [`ServiceOptions::max_metric_keys`](crate::service::ServiceOptions::max_metric_keys)
//! such keys (past it, under the rule's own key); a descriptor's `limit`
//! override is counted under `limit_override.` and the descriptor's keys,
//! without values (under the same cap, past it `limit_override`). A limit
//! that another one `replaces`, an `unlimited` one, a descriptor that
//! matches nothing and one the store failed to decide are not counted.
//!
//! And for the service:
//!
//! * `ratelimit_service_rate_limit_domain_not_found` (label `domain`):
//!   descriptors of requests for a domain no configuration has
//!   ([`domain_not_found`](Metrics::domain_not_found); envoyproxy/ratelimit's
//!   `ratelimit.service.rate_limit.<domain>.domain_not_found`, which its
//!   Prometheus mapping leaves unmapped, the domain in the name). The domain
//!   is the client's: at most [`max_unknown_domains`](Metrics::max_unknown_domains)
//!   (100) get their own series, the rest count under `domain="<other>"`;
//! * `ratelimit_service_config_load_success`, `ratelimit_service_config_load_error`:
//!   configurations loaded (the first one included), and rejected by a
//!   reload (the running one stays);
//! * `ratelimit_service_store_errors` (label `domain`): calls whose store
//!   failed or timed out, whatever the domain's failure policy answered.
//!
//! # Bounds
//!
//! A label value has at most [`MAX_LABEL_BYTES`] (128) bytes, before
//! escaping: a longer `key` or `domain` (a `detailed_metric` value of 50 KB,
//! say) is cut at a character boundary to at most 111 bytes and suffixed
//! with `~` and 16 hex digits of a 64-bit FNV-1a hash of the whole value, so
//! distinct values keep distinct series, one value the same series from one
//! start to the next. (The statistics of a value are those of its label:
//! a client can count under the label of another long value, by sending
//! that label or a colliding value; the limits count by the whole value.)
//!
//! So what the statistics hold is bounded by their number of keys (at most
//! `max_metric_keys` with values, the configured rules', at most 100 unknown
//! domains) times about 300 bytes: 3 MB at the default 10,000 keys. A
//! scrape's text has five lines a key, of at most 600 bytes (escaping at
//! most doubles a label): about 1 KB a key of plain 128-byte values, 9.5 MB
//! at the default 10,000 keys, at most 30 MB whatever the values. It is
//! rendered on a blocking thread, one render at a time ([`serve`]).

mod http;
mod label;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use hyper::body::Bytes;
use tokio::sync::watch;

pub use http::{ServeOptions, serve, serve_with, serve_with_shutdown};
pub use label::MAX_LABEL_BYTES;

/// A share of a limit in `(0, 1]`, in millionths ([`Metrics::near_limit_ratio`], the service's
/// [`ServiceOptions::near_limit_ratio`](crate::service::ServiceOptions::near_limit_ratio)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NearLimitRatio(u32);

impl NearLimitRatio {
    /// `ratio` when it is in `(0, 1]` (and a number).
    pub fn new(ratio: f64) -> Option<Self> {
        if ratio > 0.0 && ratio <= 1.0 {
            // (in range: the product fits)
            Some(Self((ratio * 1e6).round() as u32))
        } else {
            None
        }
    }

    /// The ratio.
    pub fn get(self) -> f64 {
        f64::from(self.0) / 1e6
    }

    /// `floor(limit × ratio)`, as the Go service computes its near-limit
    /// threshold.
    pub fn of(self, limit: u64) -> u64 {
        u64::try_from(u128::from(limit) * u128::from(self.0) / 1_000_000).unwrap_or(u64::MAX)
    }
}

impl Default for NearLimitRatio {
    fn default() -> Self {
        Self(800_000)
    }
}

/// `ratelimit_service_rate_limit_total_hits`.
pub const TOTAL_HITS: &str = "ratelimit_service_rate_limit_total_hits";
/// `ratelimit_service_rate_limit_within_limit`.
pub const WITHIN_LIMIT: &str = "ratelimit_service_rate_limit_within_limit";
/// `ratelimit_service_rate_limit_near_limit`.
pub const NEAR_LIMIT: &str = "ratelimit_service_rate_limit_near_limit";
/// `ratelimit_service_rate_limit_over_limit`.
pub const OVER_LIMIT: &str = "ratelimit_service_rate_limit_over_limit";
/// `ratelimit_service_rate_limit_shadow_mode`.
pub const SHADOW_MODE: &str = "ratelimit_service_rate_limit_shadow_mode";
/// `ratelimit_service_rate_limit_domain_not_found`.
pub const DOMAIN_NOT_FOUND: &str = "ratelimit_service_rate_limit_domain_not_found";
/// `ratelimit_service_config_load_success`.
pub const CONFIG_LOAD_SUCCESS: &str = "ratelimit_service_config_load_success";
/// `ratelimit_service_config_load_error`.
pub const CONFIG_LOAD_ERROR: &str = "ratelimit_service_config_load_error";
/// `ratelimit_service_store_errors`.
pub const STORE_ERRORS: &str = "ratelimit_service_store_errors";

/// The `domain` of [`DOMAIN_NOT_FOUND`] that counts the unknown domains
/// past [`Metrics::max_unknown_domains`].
pub const OTHER_DOMAINS: &str = "<other>";

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

/// One limit's counters: total, within, near, over, shadow.
#[derive(Default)]
struct KeyCounters([AtomicU64; 5]);

/// A counter of its own.
type Series = Arc<AtomicU64>;

/// Per label value, a counter.
type ByLabel = RwLock<HashMap<Arc<str>, Series>>;

/// Per domain, per key label, a limit's counters.
type ByKey = RwLock<HashMap<Arc<str>, HashMap<Arc<str>, Arc<KeyCounters>>>>;

/// The statistics of one [`RlsService`](crate::service::RlsService) (and its
/// clones): [`render`](Self::render) them for a scrape.
pub struct Metrics {
    /// Per domain, per key label (bounded; read without allocating on
    /// every call).
    keys: ByKey,
    /// How many keys holding a request's values have a series.
    valued: AtomicUsize,
    max_valued: usize,
    near: NearLimitRatio,
    load_success: AtomicU64,
    load_error: AtomicU64,
    store_errors: ByLabel,
    not_found: ByLabel,
    other_not_found: AtomicU64,
    max_unknown_domains: usize,
    /// The render under way, if any: the scrapes that ask meanwhile wait
    /// for its text ([`http`]).
    rendering: Mutex<Option<watch::Receiver<Option<Bytes>>>>,
    /// Renders made for scrapes (for the tests).
    #[cfg(test)]
    renders: AtomicUsize,
    /// Held by a test to keep a render for a scrape from finishing.
    #[cfg(test)]
    gate: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// What one descriptor's decision was, in the Go service's terms.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outcome {
    /// The descriptor's hits.
    pub(crate) hits: u64,
    /// The limit.
    pub(crate) limit: u64,
    /// The count before the hits.
    pub(crate) before: u64,
    /// Whether the hits did not fit.
    pub(crate) over: bool,
    /// Whether the limit is in shadow mode.
    pub(crate) shadow: bool,
}

/// `key` (`domain.…`) without the domain: its `key` label, unbounded.
fn key_label<'k>(domain: &str, key: &'k str) -> &'k str {
    key.strip_prefix(domain)
        .and_then(|k| k.strip_prefix('.'))
        .unwrap_or(key)
}

/// Adds `n` to the counter of `label` in `map`, creating it if fewer than
/// `cap` are there; `false` if it was not there and could not be.
fn add_by_label(map: &ByLabel, label: &str, cap: usize, n: u64) -> bool {
    {
        let m = map.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = m.get(label) {
            c.fetch_add(n, Ordering::Relaxed);
            return true;
        }
        if m.len() >= cap {
            return false;
        }
    }
    let mut m = map.write().unwrap_or_else(PoisonError::into_inner);
    if let Some(c) = m.get(label) {
        c.fetch_add(n, Ordering::Relaxed);
        return true;
    }
    if m.len() >= cap {
        return false;
    }
    m.insert(Arc::from(label), Arc::new(AtomicU64::new(n)));
    true
}

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
fn family(out: &mut String, name: &str, help: &str) {
    let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} counter\n");
}

/// One sample line: `name{labels} value`.
fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: u64) {
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
    /// Empty statistics: no limit counted yet, no configuration loaded.
    /// At most `max_valued` keys that hold a request's values get a series.
    pub fn new(max_valued: usize) -> Metrics {
        Metrics {
            keys: RwLock::new(HashMap::new()),
            valued: AtomicUsize::new(0),
            max_valued,
            near: NearLimitRatio::default(),
            load_success: AtomicU64::new(0),
            load_error: AtomicU64::new(0),
            store_errors: RwLock::new(HashMap::new()),
            not_found: RwLock::new(HashMap::new()),
            other_not_found: AtomicU64::new(0),
            max_unknown_domains: 100,
            rendering: Mutex::new(None),
            #[cfg(test)]
            renders: AtomicUsize::new(0),
            #[cfg(test)]
            gate: Mutex::new(None),
        }
    }

    /// Counts hits as near a limit past `floor(limit × ratio)`
    /// (envoyproxy/ratelimit's `NEAR_LIMIT_RATIO`). Default: 0.8.
    pub fn near_limit_ratio(mut self, ratio: NearLimitRatio) -> Self {
        self.near = ratio;
        self
    }

    /// Gives at most `n` unknown domains a series of
    /// [`DOMAIN_NOT_FOUND`] of their own; the others count under
    /// [`OTHER_DOMAINS`]. Default: 100.
    pub fn max_unknown_domains(mut self, n: usize) -> Self {
        self.max_unknown_domains = n;
        self
    }

    /// Every series, in Prometheus's text exposition format (version
    /// 0.0.4), families in a fixed order, series sorted by their labels.
    ///
    /// Builds the whole text (at most 600 bytes a series: see the
    /// [bounds](self#bounds)) on the calling thread; the locks are held
    /// only to copy the series out, so counting goes on meanwhile. The
    /// endpoint ([`serve`]) renders on a blocking thread, once for the
    /// scrapes that ask together.
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
        out
    }

    /// Counts a configuration load, or a rejected one.
    pub fn config_loaded(&self, ok: bool) {
        let c = if ok {
            &self.load_success
        } else {
            &self.load_error
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one descriptor of a request for `domain`, which no
    /// configuration has (envoyproxy/ratelimit counts each descriptor of
    /// such a request). Past [`max_unknown_domains`](Self::max_unknown_domains)
    /// distinct ones, under [`OTHER_DOMAINS`]; the label is bounded as
    /// every label ([`MAX_LABEL_BYTES`]).
    pub fn domain_not_found(&self, domain: &str) {
        let d = label::bound(domain);
        if !add_by_label(&self.not_found, &d, self.max_unknown_domains, 1) {
            self.other_not_found.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a call of `domain` whose store failed (a configured domain:
    /// one with a limit to ask the store).
    pub(crate) fn store_error(&self, domain: &str) {
        add_by_label(&self.store_errors, &label::bound(domain), usize::MAX, 1);
    }

    /// Counts one descriptor's outcome under `key` (`domain.…`), or under
    /// `fallback` if `key` holds a request's values (`valued`) and the
    /// series for such keys are all taken.
    pub(crate) fn record(&self, domain: &str, key: &str, valued: bool, fallback: &str, o: Outcome) {
        let c = self.counters(domain, key, valued, fallback);
        let [total, within, near, over_c, shadow] = &c.0;
        let add = |c: &AtomicU64, n: u64| {
            c.fetch_add(n, Ordering::Relaxed);
        };
        // a descriptor's hits counted at most 2^32 - 1 (the request's own
        // `hits_addend` bound), so that no counter wraps (which Prometheus
        // would read as a reset)
        let o = Outcome {
            hits: o.hits.min(u64::from(u32::MAX)),
            ..o
        };
        add(total, o.hits);
        let limit = o.limit;
        let near_threshold = self.near.of(limit);
        let after = o.before.saturating_add(o.hits);
        if o.over {
            let over = if o.before >= limit {
                o.hits
            } else {
                add(near, limit.saturating_sub(near_threshold.max(o.before)));
                after.saturating_sub(limit)
            };
            add(over_c, over);
            if o.shadow {
                add(shadow, over);
            }
        } else {
            add(within, o.hits);
            if after > near_threshold {
                add(
                    near,
                    if o.before >= near_threshold {
                        o.hits
                    } else {
                        after - near_threshold
                    },
                );
            }
        }
    }

    /// The counters of `key`'s bounded label in `domain`'s (made if new).
    fn counters(&self, domain: &str, key: &str, valued: bool, fallback: &str) -> Arc<KeyCounters> {
        let d = label::bound(domain);
        let k = label::bound(key_label(domain, key));
        {
            let map = self.keys.read().unwrap_or_else(PoisonError::into_inner);
            let keys = map.get(&*d);
            if let Some(c) = keys.and_then(|keys| keys.get(&*k)) {
                return c.clone();
            }
            // (a stream of new values past the cap takes no write lock)
            if valued && self.valued.load(Ordering::Relaxed) >= self.max_valued {
                let fallback = label::bound(key_label(domain, fallback));
                if let Some(c) = keys.and_then(|keys| keys.get(&*fallback)) {
                    return c.clone();
                }
            }
        }
        let mut map = self.keys.write().unwrap_or_else(PoisonError::into_inner);
        let keys = map.entry(Arc::from(&*d)).or_default();
        if let Some(c) = keys.get(&*k) {
            return c.clone();
        }
        let mut k = k;
        if valued {
            // a series for a new key with values, while some are left
            // (counted under the lock: two callers of one new key take one)
            if self.valued.load(Ordering::Relaxed) < self.max_valued {
                self.valued.fetch_add(1, Ordering::Relaxed);
            } else {
                k = label::bound(key_label(domain, fallback));
                if let Some(c) = keys.get(&*k) {
                    return c.clone();
                }
            }
        }
        let c = Arc::new(KeyCounters::default());
        keys.insert(Arc::from(&*k), c.clone());
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(hits: u64, limit: u64, before: u64) -> Outcome {
        Outcome {
            hits,
            limit,
            before,
            over: before + hits > limit,
            shadow: false,
        }
    }

    /// The value of the sample `series` in `text`.
    fn value(text: &str, series: &str) -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|v| v.parse().ok())
    }

    #[test]
    fn renders_each_family_once_its_series_sorted() {
        let m = Metrics::new(10);
        m.config_loaded(true);
        m.record("d", "d.b", false, "d.b", admitted(1, 10, 0));
        m.record("d", "d.a", false, "d.a", admitted(2, 10, 0));
        m.store_error("d");
        m.domain_not_found("x\"y");
        let text = m.render();
        let head = "# HELP ratelimit_service_config_load_success Configurations loaded.\n\
            # TYPE ratelimit_service_config_load_success counter\n\
            ratelimit_service_config_load_success 1\n\n\
            # HELP ratelimit_service_config_load_error Configurations rejected (the running one stays).\n\
            # TYPE ratelimit_service_config_load_error counter\n\
            ratelimit_service_config_load_error 0\n\n\
            # HELP ratelimit_service_store_errors Calls whose store failed or timed out.\n\
            # TYPE ratelimit_service_store_errors counter\n\
            ratelimit_service_store_errors{domain=\"d\"} 1\n\n\
            # HELP ratelimit_service_rate_limit_domain_not_found Descriptors of requests for a domain with no configuration.\n\
            # TYPE ratelimit_service_rate_limit_domain_not_found counter\n\
            ratelimit_service_rate_limit_domain_not_found{domain=\"x\\\"y\"} 1\n\n\
            # HELP ratelimit_service_rate_limit_total_hits Hits on a limit (a request's hits_addend units).\n\
            # TYPE ratelimit_service_rate_limit_total_hits counter\n\
            ratelimit_service_rate_limit_total_hits{domain=\"d\",key=\"a\"} 2\n\
            ratelimit_service_rate_limit_total_hits{domain=\"d\",key=\"b\"} 1\n\n";
        assert!(text.starts_with(head), "{text}");
        for name in [
            TOTAL_HITS,
            WITHIN_LIMIT,
            NEAR_LIMIT,
            OVER_LIMIT,
            SHADOW_MODE,
        ] {
            assert_eq!(text.matches(&format!("# TYPE {name} counter\n")).count(), 1);
        }
        assert!(text.ends_with(&format!("{SHADOW_MODE}{{domain=\"d\",key=\"b\"}} 0\n\n")));
    }

    #[test]
    fn long_values_count_under_bounded_distinct_labels() {
        let m = Metrics::new(10);
        let long = |c: char| format!("d.user_{}", c.to_string().repeat(50_000));
        for (key, n) in [(long('a'), 3), (long('b'), 1)] {
            for _ in 0..n {
                m.record("d", &key, true, "d.user", admitted(1, 100, 0));
            }
        }
        let text = m.render();
        assert!(text.len() < 4_000, "{}", text.len());
        let totals: Vec<&str> = text.lines().filter(|l| l.starts_with(TOTAL_HITS)).collect();
        assert_eq!(totals.len(), 2, "{text}");
        for (line, n, c) in [(totals[0], 3, 'a'), (totals[1], 1, 'b')] {
            let label = line
                .split_once("key=\"")
                .and_then(|(_, r)| r.split_once('"'))
                .map(|(l, _)| l)
                .expect("key label");
            assert_eq!(label.len(), MAX_LABEL_BYTES, "{label}");
            assert!(label.starts_with(&format!("user_{}", c.to_string().repeat(10))));
            assert!(line.ends_with(&format!(" {n}")), "{line}");
        }
        // one key with values each: two of the 10
        assert_eq!(m.valued.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn keys_with_values_past_the_cap_count_under_the_fallback() {
        let m = Metrics::new(2);
        for c in ['a', 'b', 'c', 'd', 'a'] {
            let key = format!("d.user_{}", c.to_string().repeat(1_000));
            m.record("d", &key, true, "d.user", admitted(1, 100, 0));
        }
        let text = m.render();
        let labels: Vec<&str> = text.lines().filter(|l| l.starts_with(TOTAL_HITS)).collect();
        assert_eq!(labels.len(), 3, "{text}");
        let a = labels
            .iter()
            .find(|l| l.contains("key=\"user_aaa"))
            .expect("a");
        assert!(a.ends_with(" 2"), "{a}");
        let user = format!("{TOTAL_HITS}{{domain=\"d\",key=\"user\"}}");
        assert_eq!(value(&text, &user), Some(2), "{text}");
    }

    #[test]
    fn unknown_domains_past_the_cap_count_under_other() {
        let m = Metrics::new(10).max_unknown_domains(2);
        let long = "z".repeat(10_000);
        for d in ["a", "b", "a", "c", long.as_str(), "b", "c"] {
            m.domain_not_found(d);
        }
        let text = m.render();
        let series = |d: &str| format!("{DOMAIN_NOT_FOUND}{{domain=\"{d}\"}}");
        assert_eq!(value(&text, &series("a")), Some(2), "{text}");
        assert_eq!(value(&text, &series("b")), Some(2), "{text}");
        assert_eq!(value(&text, &series(OTHER_DOMAINS)), Some(3), "{text}");
        assert_eq!(value(&text, &series("c")), None, "{text}");
        assert_eq!(text.matches(DOMAIN_NOT_FOUND).count(), 2 + 3, "{text}");
        // a long one is bounded (had it a series of its own)
        let m = Metrics::new(10);
        m.domain_not_found(&long);
        let text = m.render();
        let line = text
            .lines()
            .find(|l| l.starts_with(DOMAIN_NOT_FOUND))
            .expect("a series");
        // (`{domain="`, the label, `"} 1`)
        assert_eq!(
            line.len(),
            DOMAIN_NOT_FOUND.len() + 9 + MAX_LABEL_BYTES + 4,
            "{line}"
        );
    }

    #[test]
    fn near_limit_counts_past_the_ratio() {
        let near = |m: &Metrics| {
            value(
                &m.render(),
                &format!("{NEAR_LIMIT}{{domain=\"d\",key=\"k\"}}"),
            )
        };
        // 0.8 by default: 9 of 10 is 1 past 8
        let m = Metrics::new(10);
        m.record("d", "d.k", false, "d.k", admitted(9, 10, 0));
        assert_eq!(near(&m), Some(1));
        // 0.5: 6 of 10 is 1 past 5; then 2 more, both past it
        let ratio = NearLimitRatio::new(0.5).expect("ratio");
        let m = Metrics::new(10).near_limit_ratio(ratio);
        m.record("d", "d.k", false, "d.k", admitted(6, 10, 0));
        assert_eq!(near(&m), Some(1));
        m.record("d", "d.k", false, "d.k", admitted(2, 10, 6));
        assert_eq!(near(&m), Some(3));
        // denied from 9 of 10 at 0.5: near up to the limit (10 - 9), over 2
        m.record("d", "d.k", false, "d.k", admitted(3, 10, 9));
        assert_eq!(near(&m), Some(4));
    }

    /// The bound the module documents: 10,000 keys of plain 128-byte
    /// labels (the default `max_metric_keys`) render in under 10 MB.
    #[test]
    fn the_default_key_cap_renders_in_a_bounded_text() {
        let m = Metrics::new(10_000);
        for i in 0..12_000 {
            let key = format!("d.user_{i:06}{}", "x".repeat(200));
            m.record("d", &key, true, "d.user", admitted(1, 100, 0));
        }
        let text = m.render();
        let series = text.lines().filter(|l| l.starts_with(TOTAL_HITS)).count();
        // 10,000 with values, and the rule's own key for the rest
        assert_eq!(series, 10_001);
        assert!(text.len() < 10_000_000, "{}", text.len());
        assert!(text.len() > 9_000_000, "{}", text.len());
    }
}
