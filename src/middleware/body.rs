//! [`ResponseBody`]: the inner service's body or the middleware's own, and
//! the concurrency lease that lives as long as the response.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::decision::Lease;
use crate::limiter::RateLimiter;

pin_project! {
    /// The response body of [`RateLimit`](crate::RateLimit): the inner
    /// service's body, or the middleware's own (a denial, a 503).
    ///
    /// When the request holds a [`Concurrency`](crate::Strategy::Concurrency)
    /// lease, the body carries it. The lease is released *before* the body's
    /// last frame is handed out (or its end reported): a client that has
    /// received a whole response is never denied by that response's lease,
    /// even when it sends its next request at once on the same connection.
    /// That release is one store call, bounded by the store's own timeout
    /// (see [`RedisStore::timeout`](crate::RedisStore::timeout)); if it fails
    /// the failure is logged, the lease expires after its lease timeout, and
    /// the last frame is handed out all the same. A body dropped before its
    /// end (a client that went away) releases its lease in a spawned task.
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
        lease: Option<LeaseGuard>,
        // The release under way before the last frame is handed out.
        releasing: Option<Release>,
        // That last frame, held back meanwhile (`None`: the end of the body).
        last: Option<Frame<Bytes>>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Full { data: Option<Bytes> },
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn inner(body: B, lease: Option<LeaseGuard>) -> Self {
        Self {
            kind: Kind::Inner { body },
            lease,
            releasing: None,
            last: None,
        }
    }

    pub(crate) fn full(data: Bytes) -> Self {
        Self {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
            lease: None,
            releasing: None,
            last: None,
        }
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        match this.kind.project() {
            KindProj::Inner { mut body } => loop {
                if let Some(release) = this.releasing {
                    ready!(Pin::new(release).poll(cx));
                    *this.releasing = None;
                    return Poll::Ready(this.last.take().map(Ok));
                }
                let frame = ready!(body.as_mut().poll_frame(cx));
                let last = match frame {
                    Some(Ok(frame)) if body.is_end_stream() => Some(frame),
                    Some(Ok(frame)) => return Poll::Ready(Some(Ok(frame))),
                    None => None,
                    Some(Err(error)) => {
                        // A failed body: the work is over; released in the background.
                        drop(this.lease.take());
                        return Poll::Ready(Some(Err(error)));
                    }
                };
                // The end of the body: the work is done. Release the lease
                // first, then hand out the last frame.
                match this.lease.take() {
                    Some(lease) => {
                        *this.releasing = Some(lease.release());
                        *this.last = last;
                    }
                    None => return Poll::Ready(last.map(Ok)),
                }
            },
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        // Holding a lease or a frame: not over until polled once more.
        if self.lease.is_some() || self.releasing.is_some() {
            return false;
        }
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Full { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => {
                let inner = body.size_hint();
                let Some(last) = self.last.as_ref().and_then(Frame::data_ref) else {
                    return inner;
                };
                // the held-back frame is still to come
                let len = last.len() as u64;
                let mut hint = SizeHint::new();
                hint.set_lower(inner.lower().saturating_add(len));
                if let Some(upper) = inner.upper() {
                    hint.set_upper(upper.saturating_add(len));
                }
                hint
            }
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

impl<B> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Inner { .. } => "inner",
            Kind::Full { .. } => "full",
        };
        f.debug_struct("ResponseBody")
            .field("kind", &kind)
            .field("holds_lease", &self.lease.is_some())
            .field("releasing", &self.releasing.is_some())
            .finish()
    }
}

/// A concurrency lease, released when dropped.
///
/// Release is a store call, so it is spawned on the current Tokio runtime.
/// Without a runtime (dropped on a foreign thread) the lease expires after
/// its quota's lease timeout instead. [`release`](Self::release) gives the
/// same store call as a future, for callers that must know it is done.
pub(crate) struct LeaseGuard {
    limiter: RateLimiter,
    lease: Option<Lease>,
}

impl LeaseGuard {
    pub(crate) fn new(limiter: RateLimiter, lease: Lease) -> Self {
        Self {
            limiter,
            lease: Some(lease),
        }
    }

    /// The release of the lease as a future: the store call, bounded by the
    /// store's own timeout; a failure is logged (the lease then expires after
    /// its lease timeout), never returned.
    pub(crate) fn release(mut self) -> Release {
        Release::new(self.lease.take().map(|lease| {
            let limiter = self.limiter.clone();
            release_future(limiter, lease)
        }))
    }
}

fn release_future(limiter: RateLimiter, lease: Lease) -> ReleaseFuture {
    Box::pin(async move {
        if let Err(_error) = limiter.release(&lease).await {
            event!(warn, error = %_error, lease = lease.id(), "could not release a concurrency lease; it expires after its lease timeout");
        }
    })
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        let Some(lease) = self.lease.take() else {
            return;
        };
        if tokio::runtime::Handle::try_current().is_err() {
            event!(
                warn,
                lease = lease.id(),
                "concurrency lease dropped outside a Tokio runtime; it expires after its lease timeout"
            );
            return;
        }
        // Dropped un-awaited: spawned (see `Release`'s drop).
        drop(Release::new(Some(release_future(
            self.limiter.clone(),
            lease,
        ))));
    }
}

type ReleaseFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A lease release under way. Polled to its end by whoever must wait for it;
/// dropped before its end, the rest of it is spawned on the current Tokio
/// runtime, so a release is never cut short.
///
/// The future sits in a `Mutex` only so that `Release` (and the
/// [`ResponseBody`] holding it) is `Sync`; it is only ever reached through
/// `&mut self`, so the lock is never taken.
pub(crate) struct Release {
    future: Mutex<Option<ReleaseFuture>>,
}

impl Release {
    fn new(future: Option<ReleaseFuture>) -> Self {
        Self {
            future: Mutex::new(future),
        }
    }

    fn slot(&mut self) -> &mut Option<ReleaseFuture> {
        self.future
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Future for Release {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let slot = self.slot();
        if let Some(future) = slot {
            ready!(future.as_mut().poll(cx));
            *slot = None;
        }
        Poll::Ready(())
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        let Some(future) = self.slot().take() else {
            return;
        };
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(future);
        } else {
            event!(
                warn,
                "concurrency lease dropped outside a Tokio runtime; it expires after its lease timeout"
            );
        }
    }
}

impl fmt::Debug for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Release").finish_non_exhaustive()
    }
}

impl fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseGuard")
            .field("lease", &self.lease)
            .finish()
    }
}
