//! The parts of a [`Decision`]: each quota's [`QuotaDecision`] (all of them
//! from [`Decision::quotas`]), a quota's [`QuotaName`], and the [`Lease`] a
//! concurrency quota hands out.

use std::collections::BTreeSet;
use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, Mutex};
use std::time::Duration;

// `Decision` is public at the crate root only (one path per item): its
// module is crate-visible, and `lib.rs` re-exports it.
pub(crate) mod answer;

pub(crate) use self::answer::Decision;

/// A duration of `us` microseconds (most are below a second: no division then).
fn micros(us: u64) -> Duration {
    if us < 1_000_000 {
        Duration::new(0, us as u32 * 1_000)
    } else {
        Duration::from_micros(us)
    }
}

/// A duration in whole microseconds, saturating.
pub(crate) fn as_micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// One quota's numbers in a [`Decision`], in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Part {
    pub(crate) allowed: bool,
    pub(crate) remaining: u64,
    pub(crate) reset_us: u64,
    /// [`NEVER`]: no retry time (allowed, or the cost never fits).
    pub(crate) retry_us: u64,
}

/// A [`Part`]'s `retry_us` when there is no retry time.
pub(crate) const NEVER: u64 = u64::MAX;

impl From<crate::strategy::state::Raw> for Part {
    #[inline]
    fn from(r: crate::strategy::state::Raw) -> Self {
        Part {
            allowed: r.ok,
            remaining: r.remaining.max(0) as u64,
            reset_us: r.reset.max(0) as u64,
            retry_us: if r.retry >= 0 && !r.ok {
                r.retry as u64
            } else {
                NEVER
            },
        }
    }
}

impl Part {
    fn retry(&self) -> Option<Duration> {
        (self.retry_us != NEVER).then(|| micros(self.retry_us))
    }
}

/// How many quotas' [`Part`]s a [`Decision`] holds without allocating.
const INLINE_QUOTAS: usize = 2;

/// Every quota's [`Part`], in the limiter's order.
#[derive(Debug, Clone)]
pub(crate) enum Parts {
    Inline {
        len: u8,
        items: [Part; INLINE_QUOTAS],
    },
    Heap(Box<[Part]>),
}

/// Fills the unused inline slots.
const PLACEHOLDER: Part = Part {
    allowed: false,
    remaining: 0,
    reset_us: 0,
    retry_us: NEVER,
};

impl Parts {
    /// One quota's part.
    #[inline]
    pub(crate) fn one(part: Part) -> Self {
        Parts::Inline {
            len: 1,
            items: [part, PLACEHOLDER],
        }
    }

    pub(crate) fn as_slice(&self) -> &[Part] {
        match self {
            Parts::Inline { len, items } => &items[..usize::from(*len)],
            Parts::Heap(v) => v,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [Part] {
        match self {
            Parts::Inline { len, items } => &mut items[..usize::from(*len)],
            Parts::Heap(v) => v,
        }
    }
}

impl PartialEq for Parts {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Parts {}

impl FromIterator<Part> for Parts {
    fn from_iter<I: IntoIterator<Item = Part>>(iter: I) -> Self {
        let mut iter = iter.into_iter();
        let mut items = [PLACEHOLDER; INLINE_QUOTAS];
        let mut len = 0;
        for slot in &mut items {
            match iter.next() {
                Some(q) => {
                    *slot = q;
                    len += 1;
                }
                None => return Parts::Inline { len, items },
            }
        }
        match iter.next() {
            None => Parts::Inline { len, items },
            Some(q) => {
                let mut v = Vec::with_capacity(INLINE_QUOTAS + 1 + iter.size_hint().0);
                v.extend_from_slice(&items);
                v.push(q);
                v.extend(iter);
                Parts::Heap(v.into_boxed_slice())
            }
        }
    }
}

/// What every decision of a limiter says of one quota.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Template {
    pub(crate) name: QuotaName,
    pub(crate) limit: u64,
    pub(crate) window: Duration,
    /// [`Quota::shadow`](crate::Quota::shadow).
    pub(crate) shadow: bool,
}

/// A limiter's [`Template`]s, in its order (interned: see [`intern_templates`]).
pub(crate) type Templates = Vec<Template>;

/// A value made from a limiter's configuration: interned for the life of
/// the process while the intern table has room ([`INTERN_BUDGET`]), else
/// shared by the limiters (and decisions) that hold it and freed with the
/// last.
///
/// An interned value is a plain reference: cloning it (once per decision)
/// touches no reference count shared between threads. Only the
/// configurations built once the table is full (a process that keeps
/// building new ones) pay for an atomic count.
pub(crate) enum Interned<T: ?Sized + 'static> {
    Static(&'static T),
    Shared(Arc<T>),
}

impl<T: ?Sized> Clone for Interned<T> {
    #[inline]
    fn clone(&self) -> Self {
        match self {
            Interned::Static(t) => Interned::Static(t),
            Interned::Shared(t) => Interned::Shared(t.clone()),
        }
    }
}

impl<T: ?Sized> Deref for Interned<T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        match self {
            Interned::Static(t) => t,
            Interned::Shared(t) => t,
        }
    }
}

impl<T: ?Sized + PartialEq> PartialEq for Interned<T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: ?Sized + Eq> Eq for Interned<T> {}

impl<T: ?Sized + PartialOrd> PartialOrd for Interned<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        (**self).partial_cmp(&**other)
    }
}

impl<T: ?Sized + Ord> Ord for Interned<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (**self).cmp(&**other)
    }
}

impl<T: ?Sized + std::hash::Hash> std::hash::Hash for Interned<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (**self).hash(state);
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Interned<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

impl Interned<str> {
    /// The empty string (a metrics label of no plan, no quota).
    pub(crate) const EMPTY: Interned<str> = Interned::Static("");

    /// Whether this is kept for the life of the process.
    pub(crate) fn is_static(&self) -> bool {
        matches!(self, Interned::Static(_))
    }

    /// The string as a label value of the `metrics` crate: borrowed when
    /// interned, else a count of the shared string.
    #[cfg(feature = "metrics")]
    pub(crate) fn label(&self) -> metrics::SharedString {
        match self {
            Interned::Static(s) => metrics::SharedString::from(*s),
            Interned::Shared(s) => metrics::SharedString::from(s.clone()),
        }
    }
}

/// The bytes the intern table may hold (strings and template sets, with an
/// estimate of the table's own overhead): room for the names and limits of
/// hundreds of limiter configurations. What comes after is shared by its
/// holders instead, and freed with them.
pub(crate) const INTERN_BUDGET: usize = 64 * 1024;

/// The table's own overhead per entry, estimated.
const ENTRY_OVERHEAD: usize = 32;

/// Every string and set of templates interned so far.
struct Table {
    strings: BTreeSet<&'static str>,
    templates: BTreeSet<&'static Templates>,
    /// What they take, estimated: at most [`INTERN_BUDGET`].
    bytes: usize,
}

static TABLE: Mutex<Table> = Mutex::new(Table {
    strings: BTreeSet::new(),
    templates: BTreeSet::new(),
    bytes: 0,
});

fn table() -> std::sync::MutexGuard<'static, Table> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

impl Table {
    /// Takes `bytes` of the budget, if there is room.
    fn take(&mut self, bytes: usize) -> bool {
        let total = self.bytes.saturating_add(bytes);
        let room = total <= INTERN_BUDGET;
        if room {
            self.bytes = total;
        }
        room
    }
}

/// The bytes the process's intern table holds, estimated (at most 64 KiB):
/// for tests.
#[doc(hidden)]
pub fn interned_bytes() -> usize {
    table().bytes
}

/// `templates`, interned (once per distinct set: a limiter's configuration)
/// while the table has room and every name in it is interned, else shared.
pub(crate) fn intern_templates(templates: Templates) -> Interned<Templates> {
    let mut table = table();
    if let Some(&interned) = table.templates.get(&templates) {
        return Interned::Static(interned);
    }
    let bytes = std::mem::size_of::<Templates>()
        + templates.len() * std::mem::size_of::<Template>()
        + ENTRY_OVERHEAD;
    // (a set that holds a shared name would keep it for ever)
    if !templates.iter().all(|t| t.name.0.is_static()) || !table.take(bytes) {
        return Interned::Shared(Arc::new(templates));
    }
    let interned: &'static Templates = Box::leak(Box::new(templates));
    table.templates.insert(interned);
    Interned::Static(interned)
}

/// The quotas of a [`Decision`], in the limiter's order: see
/// [`Decision::quotas`].
#[derive(Debug, Clone)]
pub struct Quotas<'a> {
    parts: std::slice::Iter<'a, Part>,
    templates: std::slice::Iter<'a, Template>,
}

impl Iterator for Quotas<'_> {
    type Item = QuotaDecision;

    fn next(&mut self) -> Option<QuotaDecision> {
        let part = self.parts.next()?;
        let template = self.templates.next()?;
        Some(QuotaDecision::new(template, part))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.parts.size_hint()
    }
}

impl DoubleEndedIterator for Quotas<'_> {
    fn next_back(&mut self) -> Option<QuotaDecision> {
        let part = self.parts.next_back()?;
        let template = self.templates.next_back()?;
        Some(QuotaDecision::new(template, part))
    }
}

impl ExactSizeIterator for Quotas<'_> {}

impl std::iter::FusedIterator for Quotas<'_> {}

/// One quota's part of a [`Decision`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaDecision {
    name: QuotaName,
    allowed: bool,
    limit: u64,
    window: Duration,
    remaining: u64,
    reset_after: Duration,
    retry_after: Option<Duration>,
    shadow: bool,
}

impl QuotaDecision {
    fn new(t: &Template, p: &Part) -> Self {
        QuotaDecision {
            shadow: t.shadow,
            name: t.name.clone(),
            allowed: p.allowed,
            limit: t.limit,
            window: t.window,
            remaining: p.remaining,
            reset_after: micros(p.reset_us),
            retry_after: p.retry(),
        }
    }

    /// The quota's name.
    pub fn name(&self) -> QuotaName {
        self.name.clone()
    }

    /// Whether this quota alone would allow the request (for a
    /// [shadow](crate::Quota::shadow) quota: whether it would have).
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// Whether the quota is in [shadow](crate::Quota::shadow) mode: its
    /// verdict never denies the request.
    pub fn is_shadow(&self) -> bool {
        self.shadow
    }

    /// The quota's limit (burst for bucket strategies).
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The quota's window (rate period; lease timeout for concurrency).
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Requests left (after this one, if the whole decision allowed it).
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// Time until the quota is back to its full limit.
    pub fn reset_after(&self) -> Duration {
        self.reset_after
    }

    /// Time until this quota would allow the request; `None` if it allows it
    /// now or never can.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
}

/// A held slot of a [`Concurrency`](crate::strategy::Strategy::Concurrency) quota.
///
/// Give it back with [`RateLimiter::release`](crate::RateLimiter::release) when
/// the work is done; if it is never released (the process died), it expires
/// after the quota's lease timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    // (boxed: every `Decision` has room for a lease, few hold one)
    parts: Box<LeaseParts>,
}

/// What a [`Lease`] holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaseParts {
    /// The storage keys' common start, `{<tag>}`.
    pub(crate) base: String,
    /// The concurrency quotas' storage keys.
    pub(crate) keys: Vec<String>,
    /// The lease id: its members are `<member>.<i>`.
    pub(crate) member: String,
    pub(crate) cost: u64,
}

impl Lease {
    pub(crate) fn new(parts: LeaseParts) -> Self {
        Lease {
            parts: Box::new(parts),
        }
    }

    /// The unique lease id.
    pub fn id(&self) -> &str {
        &self.parts.member
    }

    /// The storage keys' common start, `{<tag>}`.
    pub(crate) fn base(&self) -> &str {
        &self.parts.base
    }

    /// The concurrency quotas' storage keys.
    pub(crate) fn keys(&self) -> &[String] {
        &self.parts.keys
    }

    /// The sorted-set members this lease holds in each key.
    pub(crate) fn members(&self) -> impl Iterator<Item = String> + '_ {
        let member = &self.parts.member;
        (0..self.parts.cost).map(move |i| format!("{member}.{i}"))
    }
}

/// A quota's name, as given to [`Quota::name`](crate::Quota::name) or derived
/// from its strategy and rate.
///
/// It dereferences to `str` and compares with strings. Names are interned
/// while the process's intern table has room (64 KiB of names and limits:
/// hundreds of limiter configurations), so that handing one out with every
/// decision costs no allocation and no reference count shared between
/// threads; a process that keeps building limiters with new names (a
/// configuration synced from the store that keeps changing) shares the
/// later ones between their limiters and decisions instead, and frees them
/// with the last. Cloning one is a copy, or for those a reference count.
///
/// ```
/// use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = RateLimiter::builder()
///     .store(MemoryStore::new())
///     .quota(Quota::gcra(Rate::per_minute(60)).name("minute"))
///     .build()?;
/// let d = limiter.check("user:42").await?;
/// assert_eq!(d.quota(), "minute");
/// assert_eq!(d.quota().as_str(), "minute");
/// assert_eq!(format!("{}", d.quota()), "minute");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QuotaName(Interned<str>);

/// `s`, interned (once per distinct string) while the table has room, else
/// shared: for strings made from a limiter's configuration (quota and plan
/// names, a limiter's prefix, the `RateLimit-Policy` of its quotas).
pub(crate) fn intern(s: &str) -> Interned<str> {
    let mut table = table();
    if let Some(&interned) = table.strings.get(s) {
        return Interned::Static(interned);
    }
    if !table.take(s.len() + ENTRY_OVERHEAD) {
        return Interned::Shared(Arc::from(s));
    }
    let interned: &'static str = Box::leak(s.into());
    table.strings.insert(interned);
    Interned::Static(interned)
}

impl QuotaName {
    /// The interned `name` (see [`intern`]).
    pub(crate) fn intern(name: &str) -> Self {
        QuotaName(intern(name))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name as it is held (a metrics label).
    #[cfg(feature = "metrics")]
    pub(crate) fn interned(&self) -> &Interned<str> {
        &self.0
    }
}

impl Deref for QuotaName {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for QuotaName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for QuotaName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for QuotaName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for QuotaName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for QuotaName {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for QuotaName {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<String> for QuotaName {
    fn eq(&self, other: &String) -> bool {
        *self.0 == *other.as_str()
    }
}

impl PartialEq<QuotaName> for str {
    fn eq(&self, other: &QuotaName) -> bool {
        *self == *other.0
    }
}

impl PartialEq<QuotaName> for &str {
    fn eq(&self, other: &QuotaName) -> bool {
        **self == *other.0
    }
}

impl PartialEq<QuotaName> for String {
    fn eq(&self, other: &QuotaName) -> bool {
        *self.as_str() == *other.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_interned_once() {
        let a = QuotaName::intern("interned-once");
        let b = QuotaName::intern(&String::from("interned-once"));
        // (unless another test filled the table first: then each is shared)
        assert_eq!(std::ptr::eq(a.as_str(), b.as_str()), a.0.is_static());
        assert_eq!(a, "interned-once");
        assert_eq!(format!("{a:?} {a}"), "\"interned-once\" interned-once");
    }

    /// Past the intern budget, values are shared and freed with their last
    /// holder (a limiter, a decision); the table never grows past it.
    #[tokio::test]
    async fn past_the_budget_names_and_limits_are_freed_with_their_holders() {
        use crate::{MemoryStore, Quota, Rate, RateLimiter};

        let mut i = 0u64;
        while intern(&format!("filler-{i}")).is_static() {
            i += 1;
        }
        assert!(interned_bytes() <= INTERN_BUDGET);
        let name = intern("past-the-budget");
        let Interned::Shared(held) = &name else {
            panic!("interned past the budget")
        };
        let weak = Arc::downgrade(held);
        drop(name);
        assert!(weak.upgrade().is_none());

        let limiter = RateLimiter::builder()
            .store(MemoryStore::new())
            .quota(Quota::gcra(Rate::per_minute(7)).name("shared-quota"))
            .build()
            .unwrap();
        let d = limiter.check("k").await.unwrap();
        let Interned::Shared(templates) = &d.templates else {
            panic!("templates interned past the budget")
        };
        let weak = Arc::downgrade(templates);
        drop(limiter);
        // the decision outlives its limiter, names and limits included
        assert_eq!(d.quota(), "shared-quota");
        assert_eq!(d.limit(), 7);
        let copy = d.clone();
        drop(d);
        assert_eq!(copy.quotas().next().unwrap().name(), "shared-quota");
        drop(copy);
        assert!(weak.upgrade().is_none());
        assert!(interned_bytes() <= INTERN_BUDGET);
    }

    #[cfg(feature = "metrics")]
    #[test]
    fn metrics_labels_of_interned_and_shared_names_read_the_same() {
        let shared: Interned<str> = Interned::Shared(Arc::from("shared-label"));
        assert_eq!(&*shared.label(), "shared-label");
        let interned: Interned<str> = Interned::Static("static-label");
        assert_eq!(&*interned.label(), "static-label");
    }

    #[test]
    fn up_to_two_quotas_are_inline_and_more_spill() {
        for n in 0..5u64 {
            let v: Vec<Part> = (0..n)
                .map(|i| Part {
                    remaining: i,
                    ..PLACEHOLDER
                })
                .collect();
            let parts: Parts = v.iter().copied().collect();
            assert_eq!(parts.as_slice(), v.as_slice());
            assert_eq!(
                matches!(parts, Parts::Inline { .. }),
                n <= INLINE_QUOTAS as u64
            );
        }
    }

    #[test]
    fn a_decision_is_small() {
        assert!(std::mem::size_of::<Decision>() <= 112);
    }
}
