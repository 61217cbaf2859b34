//! The parts of a [`Decision`]: each quota's [`QuotaDecision`] (all of them
//! in [`QuotaDecisions`]), a quota's [`QuotaName`], and the [`Lease`] a
//! concurrency quota hands out.

use std::collections::BTreeSet;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Mutex;
use std::time::Duration;

// `Decision` is public at the crate root only (one path per item).
pub(crate) mod root {
    use std::time::Duration;

    use super::{Lease, QuotaDecisions, QuotaName};

    /// The answer to one [`RateLimiter::check`](crate::RateLimiter::check).
    ///
    /// `limit`, `remaining`, `reset_after` and `quota` describe the quota that
    /// bound the decision: when denied, the denying quota that frees up last;
    /// when allowed, the one with the fewest requests left. Every quota's own
    /// state is in [`quotas`](Self::quotas).
    ///
    /// A decision of a limiter with one or two quotas (and no lease) holds
    /// no heap memory: cloning it is a copy.
    #[derive(Debug, Clone, PartialEq, Eq)]
    #[non_exhaustive]
    pub struct Decision {
        /// Whether the request may proceed (its cost has been consumed).
        pub allowed: bool,
        /// The binding quota's limit (its burst for bucket strategies).
        pub limit: u64,
        /// Requests left in the binding quota after this one.
        pub remaining: u64,
        /// Time until the binding quota is back to its full limit if no more requests come.
        pub reset_after: Duration,
        /// When denied: the time after which the same request would be allowed.
        /// `None` when allowed, and when the cost can never fit (cost > capacity).
        pub retry_after: Option<Duration>,
        /// The binding quota's name.
        pub quota: QuotaName,
        /// For [`LeakyBucket`](crate::strategy::Strategy::LeakyBucket): how long to wait
        /// before serving the admitted request (its slot in the queue).
        pub delay: Option<Duration>,
        /// Every quota's state, in the limiter's order (a slice).
        pub quotas: QuotaDecisions,
        /// For an allowed request under a [`Concurrency`](crate::strategy::Strategy::Concurrency)
        /// quota: the lease to hand back with [`RateLimiter::release`](crate::RateLimiter::release).
        pub lease: Option<Lease>,
    }
}

pub(crate) use self::root::Decision;

/// One quota's part of a [`Decision`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct QuotaDecision {
    /// The quota's name.
    pub name: QuotaName,
    /// Whether this quota alone would allow the request.
    pub allowed: bool,
    /// The quota's limit (burst for bucket strategies).
    pub limit: u64,
    /// The quota's window (rate period; lease timeout for concurrency).
    pub window: Duration,
    /// Requests left (after this one, if the whole decision allowed it).
    pub remaining: u64,
    /// Time until the quota is back to its full limit.
    pub reset_after: Duration,
    /// Time until this quota would allow the request; `None` if it allows it now or never can.
    pub retry_after: Option<Duration>,
}

/// A held slot of a [`Concurrency`](crate::strategy::Strategy::Concurrency) quota.
///
/// Give it back with [`RateLimiter::release`](crate::RateLimiter::release) when
/// the work is done; if it is never released (the process died), it expires
/// after the quota's lease timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub(crate) base: String,
    pub(crate) keys: Vec<String>,
    pub(crate) member: String,
    pub(crate) cost: u64,
}

impl Lease {
    /// The unique lease id.
    pub fn id(&self) -> &str {
        &self.member
    }

    /// The sorted-set members this lease holds in each key.
    pub(crate) fn members(&self) -> impl Iterator<Item = String> + '_ {
        (0..self.cost).map(move |i| format!("{}.{i}", self.member))
    }
}

/// A quota's name, as given to [`Quota::name`](crate::Quota::name) or derived
/// from its strategy and rate: a string that is `Copy`.
///
/// It dereferences to `str` and compares with strings. Names are interned
/// once per process (the first limiter built with a name keeps it for the
/// life of the process: at most 64 bytes per distinct name), so handing one
/// out with every decision costs no allocation and no reference count
/// shared between threads.
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
/// assert_eq!(d.quota, "minute");
/// assert_eq!(d.quota.as_str(), "minute");
/// assert_eq!(format!("{}", d.quota), "minute");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QuotaName(&'static str);

/// Every string interned so far: quota names, and the `RateLimit-Policy`
/// of each distinct set of quotas.
static INTERNED: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());

/// `s`, kept for the life of the process (once per distinct string): for
/// strings made from a limiter's configuration only, so the set is bounded
/// by the configurations a process builds.
pub(crate) fn intern(s: &str) -> &'static str {
    let mut set = INTERNED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&interned) = set.get(s) {
        return interned;
    }
    let interned: &'static str = Box::leak(s.into());
    set.insert(interned);
    interned
}

impl QuotaName {
    /// The interned `name` (interned now if it is new).
    pub(crate) fn intern(name: &str) -> Self {
        QuotaName(intern(name))
    }

    /// The name.
    pub fn as_str(&self) -> &'static str {
        self.0
    }
}

impl Deref for QuotaName {
    type Target = str;

    fn deref(&self) -> &str {
        self.0
    }
}

impl AsRef<str> for QuotaName {
    fn as_ref(&self) -> &str {
        self.0
    }
}

impl std::borrow::Borrow<str> for QuotaName {
    fn borrow(&self) -> &str {
        self.0
    }
}

impl fmt::Debug for QuotaName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.0, f)
    }
}

impl fmt::Display for QuotaName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl PartialEq<str> for QuotaName {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for QuotaName {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for QuotaName {
    fn eq(&self, other: &String) -> bool {
        self.0 == other.as_str()
    }
}

impl PartialEq<QuotaName> for str {
    fn eq(&self, other: &QuotaName) -> bool {
        self == other.0
    }
}

impl PartialEq<QuotaName> for &str {
    fn eq(&self, other: &QuotaName) -> bool {
        *self == other.0
    }
}

impl PartialEq<QuotaName> for String {
    fn eq(&self, other: &QuotaName) -> bool {
        self.as_str() == other.0
    }
}

/// How many [`QuotaDecision`]s a [`QuotaDecisions`] holds without allocating.
const INLINE_QUOTAS: usize = 2;

/// Every quota's part of a [`Decision`], in the limiter's order: a slice of
/// [`QuotaDecision`]s (it dereferences to `[QuotaDecision]`).
///
/// Up to two are held inline, so the decisions of limiters with one or two
/// quotas do not allocate.
#[derive(Clone)]
pub struct QuotaDecisions(Repr);

#[derive(Clone)]
enum Repr {
    Inline {
        len: u8,
        items: [QuotaDecision; INLINE_QUOTAS],
    },
    Heap(Vec<QuotaDecision>),
}

impl QuotaDecisions {
    /// One quota's part.
    pub(crate) fn one(q: QuotaDecision) -> Self {
        QuotaDecisions(Repr::Inline {
            len: 1,
            items: [q, PLACEHOLDER],
        })
    }

    /// The quotas, as a slice.
    pub fn as_slice(&self) -> &[QuotaDecision] {
        match &self.0 {
            Repr::Inline { len, items } => &items[..usize::from(*len)],
            Repr::Heap(v) => v,
        }
    }

    /// The quotas, as a mutable slice.
    pub fn as_mut_slice(&mut self) -> &mut [QuotaDecision] {
        match &mut self.0 {
            Repr::Inline { len, items } => &mut items[..usize::from(*len)],
            Repr::Heap(v) => v,
        }
    }

    /// The quotas, in a `Vec`.
    pub fn into_vec(self) -> Vec<QuotaDecision> {
        match self.0 {
            Repr::Inline { .. } => self.as_slice().to_vec(),
            Repr::Heap(v) => v,
        }
    }
}

impl Deref for QuotaDecisions {
    type Target = [QuotaDecision];

    fn deref(&self) -> &[QuotaDecision] {
        self.as_slice()
    }
}

impl DerefMut for QuotaDecisions {
    fn deref_mut(&mut self) -> &mut [QuotaDecision] {
        self.as_mut_slice()
    }
}

impl FromIterator<QuotaDecision> for QuotaDecisions {
    fn from_iter<I: IntoIterator<Item = QuotaDecision>>(iter: I) -> Self {
        let mut iter = iter.into_iter();
        let mut items = [PLACEHOLDER; INLINE_QUOTAS];
        let mut len = 0;
        for slot in &mut items {
            match iter.next() {
                Some(q) => {
                    *slot = q;
                    len += 1;
                }
                None => return QuotaDecisions(Repr::Inline { len, items }),
            }
        }
        match iter.next() {
            None => QuotaDecisions(Repr::Inline { len, items }),
            Some(q) => {
                let mut v = Vec::with_capacity(INLINE_QUOTAS + 1 + iter.size_hint().0);
                v.extend_from_slice(&items);
                v.push(q);
                v.extend(iter);
                QuotaDecisions(Repr::Heap(v))
            }
        }
    }
}

/// Fills the unused inline slots.
const PLACEHOLDER: QuotaDecision = QuotaDecision {
    name: QuotaName(""),
    allowed: false,
    limit: 0,
    window: Duration::ZERO,
    remaining: 0,
    reset_after: Duration::ZERO,
    retry_after: None,
};

impl From<Vec<QuotaDecision>> for QuotaDecisions {
    fn from(v: Vec<QuotaDecision>) -> Self {
        if v.len() <= INLINE_QUOTAS {
            v.into_iter().collect()
        } else {
            QuotaDecisions(Repr::Heap(v))
        }
    }
}

impl From<QuotaDecisions> for Vec<QuotaDecision> {
    fn from(q: QuotaDecisions) -> Self {
        q.into_vec()
    }
}

impl fmt::Debug for QuotaDecisions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

impl PartialEq for QuotaDecisions {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for QuotaDecisions {}

impl PartialEq<[QuotaDecision]> for QuotaDecisions {
    fn eq(&self, other: &[QuotaDecision]) -> bool {
        self.as_slice() == other
    }
}

impl PartialEq<Vec<QuotaDecision>> for QuotaDecisions {
    fn eq(&self, other: &Vec<QuotaDecision>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<'a> IntoIterator for &'a QuotaDecisions {
    type Item = &'a QuotaDecision;
    type IntoIter = std::slice::Iter<'a, QuotaDecision>;

    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

impl<'a> IntoIterator for &'a mut QuotaDecisions {
    type Item = &'a mut QuotaDecision;
    type IntoIter = std::slice::IterMut<'a, QuotaDecision>;

    fn into_iter(self) -> Self::IntoIter {
        self.as_mut_slice().iter_mut()
    }
}

impl IntoIterator for QuotaDecisions {
    type Item = QuotaDecision;
    type IntoIter = std::vec::IntoIter<QuotaDecision>;

    fn into_iter(self) -> Self::IntoIter {
        self.into_vec().into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(name: &str) -> QuotaDecision {
        QuotaDecision {
            name: QuotaName::intern(name),
            ..PLACEHOLDER
        }
    }

    #[test]
    fn names_are_interned_once() {
        let a = QuotaName::intern("interned-once");
        let b = QuotaName::intern(&String::from("interned-once"));
        assert!(std::ptr::eq(a.as_str(), b.as_str()));
        assert_eq!(a, "interned-once");
        assert_eq!(format!("{a:?} {a}"), "\"interned-once\" interned-once");
    }

    #[test]
    fn up_to_two_quotas_are_inline_and_more_spill() {
        for n in 0..5 {
            let v: Vec<_> = (0..n).map(|i| q(&format!("q{i}"))).collect();
            let qs: QuotaDecisions = v.iter().copied().collect();
            assert_eq!(qs, v);
            assert_eq!(QuotaDecisions::from(v.clone()), v);
            assert_eq!(matches!(qs.0, Repr::Inline { .. }), n <= INLINE_QUOTAS);
            assert_eq!(qs.clone().into_vec(), v);
            assert_eq!(format!("{qs:?}"), format!("{v:?}"));
        }
    }
}
