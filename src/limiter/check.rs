//! [`Check`], the future of [`RateLimiter::check`] and
//! [`RateLimiter::check_n`]: ready at once when the guards of
//! [`fast_path`](RateLimiter::fast_path) decide, else on the heap.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::decision::Decision;
use crate::error::StoreError;

use super::rate_limiter::{Fast, RateLimiter};

impl RateLimiter {
    /// Checks one request (cost 1) for `key`.
    ///
    /// Keys may be any bytes; see [`check_n`](Self::check_n) for how they are stored.
    pub fn check<K: AsRef<[u8]>>(&self, key: K) -> Check<'_, K> {
        self.check_n(key, 1)
    }

    /// Checks a request of weight `cost` for `key`: consumed only if every
    /// quota allows it. `0` [peeks](Self::peek).
    ///
    /// A cost above a quota's capacity (its limit; its burst for bucket
    /// strategies) can never be allowed, so it is denied at once, **without a
    /// store call**: nothing is read or written, whatever the cost. As the
    /// state was not read, such a [`Decision`] reports `allowed: false`,
    /// `retry_after: None`, `remaining: 0` and `reset_after: 0`, bound to the
    /// (last) quota whose capacity the cost exceeds; in its
    /// [`quotas`](Decision::quotas), `allowed` is false exactly for the quotas
    /// whose capacity the cost exceeds, and every quota reports `remaining: 0`,
    /// `reset_after: 0` and `retry_after: None` (not its state). A
    /// [`peek`](Self::peek) tells the state. (A limiter whose denials record,
    /// [`on_denial`](crate::limiter::RateLimiterBuilder::on_denial), sends
    /// such a cost to the store instead, which records it: still denied with
    /// `retry_after: None`, its decision then shows the state after.)
    ///
    /// Storage keys are `{<prefix>:<key>}:<id>`, where `<id>` is one letter
    /// naming the strategy (and its state's layout) followed by the rate, e.g.
    /// `r60/1m`, or for a [named](crate::Quota::name) quota by the name, e.g.
    /// `r/minute` (after the period for a fixed window or sliding window
    /// counter, `f1m/minute`; see the guide's [keys](crate::guide::keys#storage-keys)); the braces are a
    /// Redis Cluster hash tag keeping all of one key's quotas in one slot. A key
    /// that is longer than 128 bytes, is not UTF-8, contains `{`, `}` or
    /// control characters, or starts with `~` is stored as `~` and a SHA-256
    /// prefix of it instead, so no key can choose its slot or blow up memory.
    ///
    /// The returned [`Check`] decides when first polled; on a
    /// [`MemoryStore`](crate::MemoryStore) it is ready at once.
    pub fn check_n<K: AsRef<[u8]>>(&self, key: K, cost: u64) -> Check<'_, K> {
        Check {
            limiter: self,
            key: Some(key),
            cost,
            store: None,
        }
    }
}

/// The future of [`RateLimiter::check`] and [`RateLimiter::check_n`].
///
/// It decides when first polled. A decision that needs no store round trip
/// (a [`MemoryStore`](crate::MemoryStore), a cost that can never fit) is ready at once, without
/// allocating; one that asks Redis (or takes a local budget) continues
/// on the heap.
#[must_use = "futures do nothing unless polled"]
pub struct Check<'a, K> {
    limiter: &'a RateLimiter,
    /// `None` once the decision has started.
    key: Option<K>,
    cost: u64,
    store: Option<StoreFuture<'a>>,
}

type StoreFuture<'a> = Pin<Box<dyn Future<Output = Result<Decision, StoreError>> + Send + 'a>>;

// (nothing in a `Check` is ever pinned: the key is only read)
impl<K> Unpin for Check<'_, K> {}

impl<K> fmt::Debug for Check<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Check")
            .field("cost", &self.cost)
            .field("started", &self.key.is_none())
            .finish_non_exhaustive()
    }
}

impl<K: AsRef<[u8]>> Future for Check<'_, K> {
    type Output = Result<Decision, StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some(key) = this.key.take() {
            let (limiter, cost) = (this.limiter, this.cost);
            let key = key.as_ref();
            match limiter.fast_path(key, cost) {
                Fast::Ready(decision) => return Poll::Ready(Ok(decision)),
                Fast::Elsewhere(current) => this.store = Some(check_current(current, key, cost)),
                Fast::Wait => {
                    let key = key.to_vec();
                    this.store = Some(boxed_in_place(|| limiter.check_later(key, cost)));
                }
            }
        }
        this.poll_store(cx)
    }
}

impl<K> Check<'_, K> {
    fn poll_store(&mut self, cx: &mut Context<'_>) -> Poll<Result<Decision, StoreError>> {
        match &mut self.store {
            Some(store) => store.as_mut().poll(cx),
            None => panic!("`Check` polled after completion"),
        }
    }
}

/// The check of a limiter with [runtime limits](super::RateLimiterBuilder::runtime_limits):
/// `current`'s, the limiter in force.
#[cold]
#[inline(never)]
fn check_current<'a>(current: RateLimiter, key: &[u8], cost: u64) -> StoreFuture<'a> {
    let key = key.to_vec();
    Box::pin(async move { current.check_n(&key, cost).await })
}

/// `Box::pin(make())`, but with the box allocated first so that the value
/// (a future of several kilobytes) is written straight into it instead of
/// being built on the stack and copied.
#[inline(always)]
pub(crate) fn boxed_in_place<F, C>(make: C) -> Pin<Box<F>>
where
    C: FnOnce() -> F,
{
    let slot = Box::<F>::new_uninit();
    Box::into_pin(Box::write(slot, make()))
}
