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
//! `ServiceOptions::max_metric_keys`
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

// The counters and their registry are here; the Prometheus text is made
// in `render`, served in `http`, its label values bounded in `label`.
mod http;
mod label;
mod render;
pub(crate) use render::{family, sample};

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use hyper::body::Bytes;
use tokio::sync::watch;

pub use http::{
    Health, Routes, ServeOptions, serve, serve_routes, serve_with, serve_with_shutdown,
};
pub use label::MAX_LABEL_BYTES;

/// A share of a limit in `(0, 1]`, in millionths ([`Metrics::near_limit_ratio`], the service's
/// `ServiceOptions::near_limit_ratio`).
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

/// One limit's counters: total, within, near, over, shadow.
#[derive(Default)]
struct KeyCounters([AtomicU64; 5]);

/// A counter of its own.
type Series = Arc<AtomicU64>;

/// Per label value, a counter.
type ByLabel = RwLock<HashMap<Arc<str>, Series>>;

/// Per domain, per key label, a limit's counters.
type ByKey = RwLock<HashMap<Arc<str>, HashMap<Arc<str>, Arc<KeyCounters>>>>;

/// The statistics of one `RlsService` (and its
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
    /// Other services' series, rendered after these ([`Metrics::also_render`]).
    sections: Mutex<Vec<Section>>,
}

/// Another service's series: appends them to the text.
pub type Section = Arc<dyn Fn(&mut String) + Send + Sync>;

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

impl Metrics {
    /// Renders `section`'s series after these on every scrape (the quota
    /// service's, served on the same `/metrics`).
    pub fn also_render(&self, section: Section) {
        self.sections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(section);
    }

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
            sections: Mutex::new(Vec::new()),
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
mod tests;
