//! [`HeaderStyle`]: which rate-limit headers responses carry, and their formatting.

use std::cell::RefCell;
use std::fmt::{self, Write as _};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::header::{Entry, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

use super::fields;
use crate::decision::{Decision, Interned};
use crate::limiter::RateLimiter;
use crate::plans::ActivePlan;
use crate::quota::Quota;
use crate::strategy::HeaderPolicy;

/// `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers).
pub(super) const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit` (draft-ietf-httpapi-ratelimit-headers).
pub(super) const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `X-RateLimit-Limit`.
pub(super) const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining`.
pub(super) const X_RATELIMIT_REMAINING: HeaderName =
    HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset`.
pub(super) const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// Which rate-limit headers go on responses that passed the limiter.
///
/// Whatever the style, every `429` also carries `Retry-After` (a request
/// whose cost can never fit, answered `413`, has none).
///
/// | style | headers |
/// |---|---|
/// | [`Ietf`](Self::Ietf) (default) | `RateLimit-Policy: "minute";q=10;w=10, "day";q=10000;w=86400` (every quota) and `RateLimit: "minute";r=9;t=1` (the binding one), structured fields as in draft-ietf-httpapi-ratelimit-headers |
/// | [`Legacy`](Self::Legacy) | `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (UTC epoch seconds, as GitHub) |
/// | [`Both`](Self::Both) | all of the above |
/// | [`None`](Self::None) | none |
///
/// In `RateLimit-Policy`, `q` is what a client may send at once and `w` the
/// seconds in which that much comes back: for the bucket strategies
/// ([`TokenBucket`](crate::strategy::Strategy::TokenBucket),
/// [`LeakyBucket`](crate::strategy::Strategy::LeakyBucket), [`Gcra`](crate::strategy::Strategy::Gcra))
/// `q` is the burst and `w` the time an empty bucket takes to refill
/// (`burst × period / count`); a [`Concurrency`](crate::strategy::Strategy::Concurrency)
/// quota has `qu="concurrent-requests"` and no `w`. In `RateLimit`, `r` is
/// what is left and `t` the time until the quota is whole again; on a denial
/// `t` is the `Retry-After` (for a request that can never fit, which has
/// none, the quota's window); a concurrency quota has no `t`. `t`, `w` and
/// `X-RateLimit-Reset` are whole seconds rounded up.
///
/// When layers are stacked, each appends its items to `RateLimit-Policy` and
/// `RateLimit` (one comma-separated line; give the quotas of different
/// layers different names), `X-RateLimit-*` show the most restrictive limit
/// (fewest remaining; on a tie, the later reset), and a `Retry-After`
/// already on the response is kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
#[non_exhaustive]
pub enum HeaderStyle {
    /// `RateLimit-Policy` and `RateLimit` (IETF draft, structured fields).
    #[default]
    Ietf,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset`.
    Legacy,
    /// Both the IETF and the legacy headers.
    Both,
    /// No rate-limit headers (`Retry-After` is still sent on 429s).
    None,
}

impl HeaderStyle {
    pub(super) fn ietf(self) -> bool {
        matches!(self, HeaderStyle::Ietf | HeaderStyle::Both)
    }

    fn legacy(self) -> bool {
        matches!(self, HeaderStyle::Legacy | HeaderStyle::Both)
    }
}

/// What the headers of a limiter's decisions need to know of its quotas,
/// made once per limiter (the layer's, or each plan's build, see
/// [`PlanHeaders`]): the `RateLimit-Policy` value and the start of each
/// quota's `RateLimit` item.
#[derive(Debug)]
pub(super) struct QuotaHeaders {
    /// `RateLimit-Policy` (static bytes: cloned per response without a
    /// reference count shared between threads).
    policy: Option<HeaderValue>,
    /// Per quota, in the limiter's order: whether its `RateLimit` item has
    /// a `t` (a concurrency quota has none).
    timed: Box<[bool]>,
    /// Per quota: the start of its `RateLimit` item, `"<name>";r=`.
    items: Box<[Box<[u8]>]>,
}

impl QuotaHeaders {
    /// The headers' view of `limiter`'s quotas (from its public facts).
    pub(super) fn new(limiter: &RateLimiter) -> Self {
        let quotas = limiter.quotas();
        let names = limiter.quota_names();
        let mut s = String::with_capacity(32 * quotas.len());
        // a shadow quota (Quota::shadow) is no policy the client is held to,
        // unless every quota is shadow (a shadow layer's headers)
        let all_shadow = quotas.iter().all(Quota::is_shadow);
        for (q, name) in quotas.iter().zip(names) {
            if !all_shadow && q.is_shadow() {
                continue;
            }
            // (`limit`: the burst of a bucket strategy, else the rate's count)
            let (limit, count, period) = (q.limit(), q.rate().count(), q.rate().period());
            let period_us = period.as_micros();
            let w = match q.strategy().spec().header {
                HeaderPolicy::InFlight => {
                    if !s.is_empty() {
                        s.push_str(", ");
                    }
                    fields::push_string(&mut s, name);
                    let _ = write!(s, ";q={limit};qu=\"concurrent-requests\"");
                    continue;
                }
                // the time an empty bucket takes to refill: burst × period / count
                HeaderPolicy::Refill => period_us * u128::from(limit) / u128::from(count.max(1)),
                HeaderPolicy::Window => period_us,
            };
            let w = u64::try_from(w.div_ceil(1_000_000).max(1)).unwrap_or(u64::MAX);
            fields::push_policy_item(&mut s, name, limit, w);
        }
        // (what a configuration gives: printable ASCII, which `from_static` takes)
        let policy = match s.bytes().all(|b| (b' '..=b'~').contains(&b)) {
            true => match crate::decision::intern(&s) {
                Interned::Static(s) => Some(HeaderValue::from_static(s)),
                // (the intern table is full: shared bytes, counted per clone)
                Interned::Shared(_) => HeaderValue::from_maybe_shared(Bytes::from(s)).ok(),
            },
            false => HeaderValue::from_maybe_shared(Bytes::from(s)).ok(),
        };
        Self {
            policy,
            timed: quotas
                .iter()
                .map(|q| q.strategy().spec().header.timed())
                .collect(),
            items: names
                .iter()
                .map(|name| {
                    let mut item = String::with_capacity(name.len() + 5);
                    fields::push_string(&mut item, name);
                    item.push_str(";r=");
                    item.into_bytes().into_boxed_slice()
                })
                .collect(),
        }
    }
}

/// The [`QuotaHeaders`] of each plan a layer has checked a request under,
/// made on the first response of each build of the plan (a change of the
/// plans' limits builds their plans anew).
///
/// Read lock-free (one atomic load, then a short scan by address); written
/// only when a plan's build is new, when builds no longer in force are
/// dropped.
#[derive(Default)]
pub(super) struct PlanHeaders {
    built: ArcSwap<Vec<PlanEntry>>,
}

/// One build of a plan and its headers.
#[derive(Clone)]
struct PlanEntry {
    /// The build (its address identifies it while this is held; dropped
    /// from the cache once nothing else holds the build).
    plan: Weak<ActivePlan>,
    headers: Arc<QuotaHeaders>,
}

impl PlanHeaders {
    /// Calls `f` with the headers of `plan` (`None`: an unlimited plan,
    /// which has none).
    pub(super) fn with<R>(
        &self,
        plan: &Arc<ActivePlan>,
        f: impl FnOnce(Option<&QuotaHeaders>) -> R,
    ) -> R {
        let Some(limiter) = plan.limiter() else {
            return f(None);
        };
        let built = self.built.load();
        if let Some(entry) = built
            .iter()
            .find(|e| std::ptr::eq(e.plan.as_ptr(), Arc::as_ptr(plan)))
        {
            return f(Some(&entry.headers));
        }
        drop(built);
        f(Some(&self.build(plan, limiter)))
    }

    /// Makes the headers of a new build of a plan, and keeps them.
    #[cold]
    #[inline(never)]
    fn build(&self, plan: &Arc<ActivePlan>, limiter: &RateLimiter) -> Arc<QuotaHeaders> {
        let headers = Arc::new(QuotaHeaders::new(limiter));
        self.built.rcu(|built| {
            let mut kept: Vec<PlanEntry> = built
                .iter()
                .filter(|e| e.plan.strong_count() > 0)
                .filter(|e| !std::ptr::eq(e.plan.as_ptr(), Arc::as_ptr(plan)))
                .cloned()
                .collect();
            kept.push(PlanEntry {
                plan: Arc::downgrade(plan),
                headers: headers.clone(),
            });
            kept
        });
        headers
    }
}

impl fmt::Debug for PlanHeaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlanHeaders")
            .field("builds", &self.built.load().len())
            .finish()
    }
}

/// The headers of one decision, computed when it is made (no allocation
/// beyond the header values themselves).
#[derive(Debug, Default)]
pub(super) struct RateHeaders {
    policy: Option<HeaderValue>,
    ratelimit: Option<HeaderValue>,
    /// limit, remaining, reset (UTC epoch seconds)
    legacy: Option<(u64, u64, u64)>,
    /// `Retry-After` in seconds (its value is made when applied: a
    /// response future carries these headers, and most carry none).
    retry_after: Option<u64>,
}

impl RateHeaders {
    /// The rate-limit headers (and `Retry-After` if denied) for `decision`.
    pub(super) fn new(
        style: HeaderStyle,
        decision: &Decision,
        quotas: Option<&QuotaHeaders>,
    ) -> Self {
        let mut h = Self::default();
        if style.ietf() {
            h.policy = quotas.and_then(|q| q.policy.clone());
            let binding = Some(decision.binding_index());
            let timed = binding
                .and_then(|i| quotas?.timed.get(i).copied())
                .unwrap_or(true);
            let item = binding.and_then(|i| quotas?.items.get(i));
            h.ratelimit = ratelimit_value(decision, timed, item.map(|i| &**i));
        }
        if style.legacy() {
            h.legacy = Some(legacy(decision));
        }
        // (none for a request that can never fit: no wait would admit it)
        if !decision.allowed() && decision.retry_after().is_some() {
            h.retry_after = Some(retry_after_secs(decision));
        }
        h
    }

    /// The same headers without `Retry-After` (a shadowed denial is no 429).
    pub(super) fn without_retry_after(mut self) -> Self {
        self.retry_after = None;
        self
    }

    /// Adds the headers to `headers`, combining them with those of another
    /// layer already there: list items appended, the most restrictive
    /// legacy limit kept, an existing `Retry-After` kept.
    pub(super) fn apply(self, headers: &mut HeaderMap) {
        if let Some(v) = self.policy {
            append_list(headers, RATELIMIT_POLICY, v);
        }
        if let Some(v) = self.ratelimit {
            append_list(headers, RATELIMIT, v);
        }
        if let Some((limit, remaining, reset)) = self.legacy
            && !legacy_more_restrictive(headers, remaining, reset)
        {
            headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(limit));
            headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(remaining));
            headers.insert(X_RATELIMIT_RESET, HeaderValue::from(reset));
        }
        if let Some(secs) = self.retry_after
            && !headers.contains_key(RETRY_AFTER)
        {
            headers.insert(RETRY_AFTER, HeaderValue::from(secs));
        }
    }
}

/// Appends `item` to the structured-field list `name`: one line, the items
/// already there (from any number of lines) first.
fn append_list(headers: &mut HeaderMap, name: HeaderName, item: HeaderValue) {
    // one lookup: the usual response has no such header yet
    let mut entry = match headers.entry(name) {
        Entry::Vacant(v) => {
            v.insert(item);
            return;
        }
        Entry::Occupied(o) => o,
    };
    let mut joined = Vec::new();
    for v in entry.iter() {
        let v = v.as_bytes().trim_ascii();
        if !v.is_empty() {
            joined.extend_from_slice(v);
            joined.extend_from_slice(b", ");
        }
    }
    if joined.is_empty() {
        entry.insert(item);
        return;
    }
    joined.extend_from_slice(item.as_bytes());
    if let Ok(v) = HeaderValue::from_maybe_shared(Bytes::from(joined)) {
        entry.insert(v);
    }
}

/// Whether the `X-RateLimit-*` already in `headers` describe a limit at
/// least as restrictive as (`remaining`, `reset`): fewer remaining, or as
/// many and a reset no earlier. Unreadable values are replaced.
fn legacy_more_restrictive(headers: &HeaderMap, remaining: u64, reset: u64) -> bool {
    let read = |name: &HeaderName| -> Option<u64> {
        headers.get(name)?.to_str().ok()?.trim().parse().ok()
    };
    match (read(&X_RATELIMIT_REMAINING), read(&X_RATELIMIT_RESET)) {
        (Some(r), Some(t)) => r < remaining || (r == remaining && t >= reset),
        _ => false,
    }
}

/// Whole seconds, rounded up.
pub(super) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// The `Retry-After` of a denial: `retry_after` rounded up, never 0. When the
/// request can never fit (no `retry_after`; it gets no `Retry-After`), the
/// binding quota's window (its `RateLimit` item's `t`).
pub(super) fn retry_after_secs(decision: &Decision) -> u64 {
    let wait = decision
        .retry_after()
        .unwrap_or_else(|| decision.binding_window());
    ceil_secs(wait).max(1)
}

/// The `X-RateLimit-*` values of `decision`: limit, remaining, reset (UTC
/// epoch seconds).
#[inline(never)]
fn legacy(decision: &Decision) -> (u64, u64, u64) {
    let reset = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .saturating_add(decision.reset_after());
    (decision.limit(), decision.remaining(), ceil_secs(reset))
}

/// `"minute";r=59;t=1`; on a denial `t` is the `Retry-After`; no `t` when
/// the quota has no time of reset (concurrency). `item`: the quota's
/// `"minute";r=`, prebuilt.
fn ratelimit_value(decision: &Decision, timed: bool, item: Option<&[u8]>) -> Option<HeaderValue> {
    let named;
    let item = match item {
        Some(item) => item,
        None => {
            let mut s = String::new();
            fields::push_string(&mut s, &decision.quota());
            s.push_str(";r=");
            named = s;
            named.as_bytes()
        }
    };
    let t = timed.then(|| {
        if decision.allowed() {
            ceil_secs(decision.reset_after())
        } else {
            retry_after_secs(decision)
        }
    });
    let remaining = decision.remaining();
    if let Some(v) = LastValue::get(item, remaining, t) {
        return Some(v);
    }
    let mut r = itoa::Buffer::new();
    let mut t_digits = itoa::Buffer::new();
    let (t_key, t_text): (&[u8], &[u8]) = match t {
        Some(t) => (b";t=", t_digits.format(t).as_bytes()),
        None => (b"", b""),
    };
    let pieces = [item, r.format(remaining).as_bytes(), t_key, t_text];
    // A value that fits a small buffer is kept for the thread's next
    // response: its bytes are reference counted from the start (one
    // allocation; keeping it, or handing it out again, is a count).
    if let Some(small) = Small::new(&pieces) {
        let value = HeaderValue::from_maybe_shared(Bytes::from_owner(small)).ok()?;
        LastValue::keep(&value, item.len(), remaining, t);
        return Some(value);
    }
    // (one allocation: `concat` allocates the exact length, which `Bytes` keeps)
    HeaderValue::from_maybe_shared(Bytes::from(pieces.concat())).ok()
}

/// The bytes of a short header value, held inline: with
/// [`Bytes::from_owner`], one allocation for the bytes and their count of
/// owners (a `Bytes` of a `Vec` allocates that count apart, at its first
/// clone).
struct Small {
    len: u8,
    bytes: [u8; SMALL],
}

/// The longest value held in a [`Small`] (`"minute";r=`, `;t=` and two
/// 20-digit numbers take 54 bytes).
const SMALL: usize = 62;

impl Small {
    /// `pieces` one after the other, if they fit.
    fn new(pieces: &[&[u8]]) -> Option<Self> {
        let len: usize = pieces.iter().map(|p| p.len()).sum();
        let mut small = Small {
            len: u8::try_from(len)
                .ok()
                .filter(|&l| usize::from(l) <= SMALL)?,
            bytes: [0; SMALL],
        };
        let mut at = 0;
        for piece in pieces {
            small.bytes[at..at + piece.len()].copy_from_slice(piece);
            at += piece.len();
        }
        Some(small)
    }
}

impl AsRef<[u8]> for Small {
    fn as_ref(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// The last `RateLimit` value a thread made, and what it was made of: the
/// same quota, remaining and reset again (a quota far from its limit under
/// steady load, a client denied again and again) clone it (a reference
/// count) instead of formatting and allocating a new one.
struct LastValue {
    value: HeaderValue,
    /// The length of the quota's item, `"minute";r=`, at the start of `value`.
    item_len: usize,
    remaining: u64,
    t: Option<u64>,
}

thread_local! {
    static LAST_VALUE: RefCell<Option<LastValue>> = const { RefCell::new(None) };
}

impl LastValue {
    /// This thread's last value, if it is the one of (`item`, `remaining`, `t`).
    fn get(item: &[u8], remaining: u64, t: Option<u64>) -> Option<HeaderValue> {
        LAST_VALUE
            .try_with(|last| {
                let last = last.try_borrow().ok()?;
                let last = last.as_ref()?;
                // (the same item, remaining and reset make the same value)
                (last.remaining == remaining
                    && last.t == t
                    && last.item_len == item.len()
                    && last.value.as_bytes().starts_with(item))
                .then(|| last.value.clone())
            })
            .ok()
            .flatten()
    }

    /// Keeps `value` as this thread's last one.
    fn keep(value: &HeaderValue, item_len: usize, remaining: u64, t: Option<u64>) {
        let _ = LAST_VALUE.try_with(|last| {
            if let Ok(mut last) = last.try_borrow_mut() {
                *last = Some(LastValue {
                    value: value.clone(),
                    item_len,
                    remaining,
                    t,
                });
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::{NEVER, Part, Parts, QuotaName, Template, intern_templates};

    fn decision(allowed: bool, retry_after: Option<Duration>) -> Decision {
        decision_left(allowed, retry_after, 59)
    }

    fn decision_left(allowed: bool, retry_after: Option<Duration>, left: u64) -> Decision {
        let part = |remaining, retry: Option<Duration>| Part {
            allowed,
            remaining,
            reset_us: 1_200_000,
            retry_us: retry.map_or(NEVER, |r| r.as_micros() as u64),
        };
        let template = |name: &str, limit, window| Template {
            name: QuotaName::intern(name),
            limit,
            window: Duration::from_secs(window),
            shadow: false,
        };
        Decision {
            allowed,
            binding: 0,
            delay_us: 0,
            parts: [part(left, retry_after), part(9_999, None)]
                .into_iter()
                .collect::<Parts>(),
            templates: intern_templates(vec![
                template("minute", 60, 60),
                template("day", 10_000, 86_400),
            ]),
            lease: None,
            shadow_let_through: false,
            recorded: false,
        }
    }

    fn render(style: HeaderStyle, d: &Decision) -> HeaderMap {
        let mut map = HeaderMap::new();
        render_into(style, d, &mut map);
        map
    }

    fn render_into(style: HeaderStyle, d: &Decision, map: &mut HeaderMap) {
        let limiter = RateLimiter::builder()
            .store(crate::store::MemoryStore::new())
            .quota(
                crate::quota::Quota::fixed_window(crate::rate::Rate::per_minute(60)).name("minute"),
            )
            .quota(
                crate::quota::Quota::fixed_window(crate::rate::Rate::per_day(10_000)).name("day"),
            )
            .build()
            .unwrap();
        RateHeaders::new(style, d, Some(&QuotaHeaders::new(&limiter))).apply(map);
    }

    #[test]
    fn ietf_headers_list_every_quota_and_the_binding_one() {
        let map = render(HeaderStyle::Ietf, &decision(true, None));
        assert_eq!(
            map[RATELIMIT_POLICY],
            r#""minute";q=60;w=60, "day";q=10000;w=86400"#
        );
        assert_eq!(map[RATELIMIT], r#""minute";r=59;t=2"#);
        assert!(!map.contains_key(X_RATELIMIT_LIMIT));
        assert!(!map.contains_key(RETRY_AFTER));
    }

    #[test]
    fn legacy_headers_give_reset_as_epoch_seconds() {
        let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let map = render(HeaderStyle::Legacy, &decision(true, None));
        assert_eq!(map[X_RATELIMIT_LIMIT], "60");
        assert_eq!(map[X_RATELIMIT_REMAINING], "59");
        let reset: u64 = map[X_RATELIMIT_RESET].to_str().unwrap().parse().unwrap();
        assert!(
            reset >= before.as_secs() + 2 && reset <= before.as_secs() + 4,
            "{reset}"
        );
        assert!(!map.contains_key(RATELIMIT));
    }

    #[test]
    fn both_and_none_styles() {
        let both = render(HeaderStyle::Both, &decision(true, None));
        assert!(both.contains_key(RATELIMIT) && both.contains_key(X_RATELIMIT_RESET));
        let none = render(HeaderStyle::None, &decision(true, None));
        assert!(none.is_empty());
        let denied = render(
            HeaderStyle::None,
            &decision(false, Some(Duration::from_secs(3))),
        );
        assert_eq!(denied.len(), 1);
        assert_eq!(denied[RETRY_AFTER], "3");
    }

    #[test]
    fn retry_after_rounds_up_and_is_never_zero() {
        for (wait, secs) in [
            (1, 1),
            (300_000, 1),
            (999_999, 1),
            (1_000_000, 1),
            (1_000_001, 2),
        ] {
            let d = decision(false, Some(Duration::from_micros(wait)));
            assert_eq!(retry_after_secs(&d), secs, "{wait} µs");
        }
        assert_eq!(retry_after_secs(&decision(false, Some(Duration::ZERO))), 1);
        // never fits: the binding quota's window
        assert_eq!(retry_after_secs(&decision(false, None)), 60);
    }

    #[test]
    fn list_items_already_on_several_lines_are_joined_into_one() {
        let mut map = HeaderMap::new();
        map.append(RATELIMIT, HeaderValue::from_static(r#""a";r=1"#));
        map.append(RATELIMIT, HeaderValue::from_static(r#" "b";r=2 "#));
        append_list(&mut map, RATELIMIT, HeaderValue::from_static(r#""c";r=3"#));
        let all: Vec<_> = map.get_all(RATELIMIT).iter().collect();
        assert_eq!(all, [r#""a";r=1, "b";r=2, "c";r=3"#]);
    }

    #[test]
    fn unreadable_legacy_headers_are_replaced_and_a_retry_after_is_kept() {
        let mut map = HeaderMap::new();
        map.insert(X_RATELIMIT_REMAINING, HeaderValue::from_static("many"));
        map.insert(X_RATELIMIT_RESET, HeaderValue::from_static("0"));
        map.insert(RETRY_AFTER, HeaderValue::from_static("120"));
        render_into(
            HeaderStyle::Legacy,
            &decision(false, Some(Duration::from_secs(3))),
            &mut map,
        );
        assert_eq!(map[X_RATELIMIT_REMAINING], "59");
        assert_eq!(map[RETRY_AFTER], "120");
    }

    #[test]
    fn a_thread_reuses_its_last_ratelimit_value_only_for_the_same_item_and_numbers() {
        let value = |item: &[u8], remaining, t| {
            ratelimit_value(&decision_left(true, None, remaining), t, Some(item)).unwrap()
        };
        let first = value(br#""minute";r="#, 59, true);
        assert_eq!(first, r#""minute";r=59;t=2"#);
        // the same again: the kept value, not a new allocation
        let again = value(br#""minute";r="#, 59, true);
        assert_eq!(again.as_bytes().as_ptr(), first.as_bytes().as_ptr());
        // any difference makes a new value
        assert_eq!(value(br#""minute";r="#, 58, true), r#""minute";r=58;t=2"#);
        assert_eq!(value(br#""minute";r="#, 58, false), r#""minute";r=58"#);
        assert_eq!(value(br#""minutes";r="#, 58, false), r#""minutes";r=58"#);
        assert_eq!(value(br#""hour";r="#, 58, false), r#""hour";r=58"#);
        assert_eq!(value(br#""minute";r="#, 58, false), r#""minute";r=58"#);
        // a value too long for a small buffer is made (and not kept) all the same
        let long = format!("\"{}\";r=", "q".repeat(SMALL));
        let made = value(long.as_bytes(), 7, true);
        assert_eq!(made, format!("{long}7;t=2"));
        assert_ne!(
            value(long.as_bytes(), 7, true).as_bytes().as_ptr(),
            made.as_bytes().as_ptr()
        );
    }

    #[test]
    fn plan_headers_follow_each_build_of_a_plan() {
        use crate::plans::{Plan, Plans};
        use crate::rate::Rate;
        use crate::store::MemoryStore;
        let plan = |n| Plan::new([Quota::fixed_window(Rate::per_minute(n)).name("minute")]);
        let plans = Plans::builder()
            .store(MemoryStore::new())
            .plan("free", plan(10))
            .plan("open", Plan::unlimited())
            .default_plan("free")
            .build()
            .unwrap();
        let cache = PlanHeaders::default();
        let policy = |p: &Arc<ActivePlan>| {
            cache.with(p, |q| {
                q.and_then(|q| q.policy.clone())
                    .map(|v| v.to_str().unwrap().to_owned())
            })
        };
        let free = plans.resolve(Some("free"));
        assert_eq!(policy(&free).as_deref(), Some(r#""minute";q=10;w=60"#));
        assert_eq!(policy(&free).as_deref(), Some(r#""minute";q=10;w=60"#));
        assert_eq!(cache.built.load().len(), 1);
        assert_eq!(policy(&plans.resolve(Some("open"))), None);

        // a new build of the plan: new headers; the old build's are dropped
        // once nothing holds that build
        plans.handle().set_plan("free", plan(20)).unwrap();
        drop(free);
        let free = plans.resolve(Some("free"));
        assert_eq!(policy(&free).as_deref(), Some(r#""minute";q=20;w=60"#));
        assert_eq!(cache.built.load().len(), 1);
    }
}
