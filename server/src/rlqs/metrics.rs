//! The quota service's statistics: per bucket rule (domain and rule name,
//! never a bucket's values, so the series are as many as the rules), and
//! for the whole service; rendered on the rate limit service's `/metrics`
//! ([`Metrics::also_render`](crate::metrics::Metrics::also_render)).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::metrics::{family, sample};

/// One rule's counters.
#[derive(Debug, Default)]
pub struct RuleCounters {
    allowed: AtomicU64,
    denied: AtomicU64,
    assigned: AtomicU64,
    budget_empty: AtomicU64,
    store_errors: AtomicU64,
}

impl RuleCounters {
    pub(crate) fn reported(&self, allowed: u64, denied: u64) {
        add(&self.allowed, allowed);
        add(&self.denied, denied);
    }

    pub(crate) fn assigned(&self, tokens: u64) {
        add(&self.assigned, tokens);
    }

    pub(crate) fn budget_empty(&self) {
        add(&self.budget_empty, 1);
    }

    pub(crate) fn store_error(&self) {
        add(&self.store_errors, 1);
    }

    /// Requests Envoys reported allowed.
    pub fn allowed(&self) -> u64 {
        self.allowed.load(Ordering::Relaxed)
    }

    /// Requests Envoys reported denied.
    pub fn denied(&self) -> u64 {
        self.denied.load(Ordering::Relaxed)
    }

    /// Tokens taken from the budget for assignments.
    pub fn assigned_tokens(&self) -> u64 {
        self.assigned.load(Ordering::Relaxed)
    }
}

fn add(c: &AtomicU64, n: u64) {
    // saturating: a counter never wraps to a small number
    let _ = c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        Some(v.saturating_add(n))
    });
}

/// The quota service's statistics.
#[derive(Debug, Default)]
pub struct QuotaMetrics {
    rules: Mutex<HashMap<(String, String), Arc<RuleCounters>>>,
    streams: AtomicI64,
    buckets: AtomicI64,
    overflow: AtomicU64,
    unknown_domain: AtomicU64,
    empty_ids: AtomicU64,
    large_ids: AtomicU64,
}

impl QuotaMetrics {
    /// The counters of `rule` of `domain` (`unmatched` for the buckets no
    /// rule matches).
    pub fn rule(&self, domain: &str, rule: &str) -> Arc<RuleCounters> {
        self.rules
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry((domain.to_owned(), rule.to_owned()))
            .or_default()
            .clone()
    }

    /// Keeps only the counters of `rules` (after a reload).
    pub(crate) fn keep(&self, rules: &[(String, String)]) {
        self.rules
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|k, _| rules.contains(k));
    }

    pub(crate) fn stream_opened(&self) {
        self.streams.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn stream_closed(&self, buckets: usize) {
        self.streams.fetch_sub(1, Ordering::Relaxed);
        self.buckets.fetch_sub(
            i64::try_from(buckets).unwrap_or(i64::MAX),
            Ordering::Relaxed,
        );
    }

    pub(crate) fn bucket_added(&self) {
        self.buckets.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn bucket_removed(&self) {
        self.buckets.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn bucket_overflow(&self) {
        add(&self.overflow, 1);
    }

    pub(crate) fn unknown_domain(&self, buckets: usize) {
        add(&self.unknown_domain, buckets as u64);
    }

    pub(crate) fn id_refused(&self, why: &str) {
        add(
            if why == "empty" {
                &self.empty_ids
            } else {
                &self.large_ids
            },
            1,
        );
    }

    /// Streams open now.
    pub fn streams(&self) -> i64 {
        self.streams.load(Ordering::Relaxed)
    }

    /// Buckets the streams hold now.
    pub fn buckets(&self) -> i64 {
        self.buckets.load(Ordering::Relaxed)
    }

    /// New buckets answered `deny_all` past a cap.
    pub fn overflow(&self) -> u64 {
        self.overflow.load(Ordering::Relaxed)
    }

    /// Appends the series, in Prometheus's text format.
    pub fn render(&self, out: &mut String) {
        let mut rules: Vec<_> = self
            .rules
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(k, c)| (k.clone(), c.clone()))
            .collect();
        rules.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        type Get = fn(&RuleCounters) -> u64;
        let per_rule: [(&str, &str, Get); 5] = [
            (
                "ratelimit_quota_requests_allowed_total",
                "Requests Envoys reported they allowed, by bucket rule.",
                |c| c.allowed.load(Ordering::Relaxed),
            ),
            (
                "ratelimit_quota_requests_denied_total",
                "Requests Envoys reported they denied, by bucket rule.",
                |c| c.denied.load(Ordering::Relaxed),
            ),
            (
                "ratelimit_quota_assigned_tokens_total",
                "Tokens taken from the shared budget for assignments, by bucket rule.",
                |c| c.assigned.load(Ordering::Relaxed),
            ),
            (
                "ratelimit_quota_budget_empty_total",
                "Assignments of DENY_ALL because the budget had no room, by bucket rule.",
                |c| c.budget_empty.load(Ordering::Relaxed),
            ),
            (
                "ratelimit_quota_store_errors_total",
                "Assignments decided without the store (it failed or timed out), by bucket rule.",
                |c| c.store_errors.load(Ordering::Relaxed),
            ),
        ];
        if !rules.is_empty() {
            for (name, help, get) in per_rule {
                family(out, name, help);
                for ((d, r), c) in &rules {
                    sample(out, name, &[("domain", d), ("rule", r)], get(c));
                }
                out.push('\n');
            }
        }
        for (name, help, value) in [
            (
                "ratelimit_quota_bucket_overflow_total",
                "New buckets answered DENY_ALL past a stream's or the service's bucket cap.",
                self.overflow.load(Ordering::Relaxed),
            ),
            (
                "ratelimit_quota_unknown_domain_total",
                "Buckets reported for a domain no quota file configures (answered ALLOW_ALL).",
                self.unknown_domain.load(Ordering::Relaxed),
            ),
            (
                "ratelimit_quota_empty_ids_total",
                "Reported buckets with an empty id (no action can name them).",
                self.empty_ids.load(Ordering::Relaxed),
            ),
            (
                "ratelimit_quota_large_ids_total",
                "Reported buckets whose id passed the bounds (ignored).",
                self.large_ids.load(Ordering::Relaxed),
            ),
        ] {
            family(out, name, help);
            sample(out, name, &[], value);
            out.push('\n');
        }
        for (name, help, value) in [
            (
                "ratelimit_quota_streams",
                "Envoy streams open now.",
                self.streams.load(Ordering::Relaxed),
            ),
            (
                "ratelimit_quota_buckets",
                "Buckets the open streams hold now.",
                self.buckets.load(Ordering::Relaxed),
            ),
        ] {
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n"));
            out.push_str(&format!("{name} {}\n\n", value.max(0)));
        }
    }
}
