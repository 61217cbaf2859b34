//! [`ResponseBody`]: the inner service's body or the middleware's own, and
//! the concurrency lease that lives as long as the response.

use std::fmt;
use std::pin::Pin;
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
    /// lease, the body carries it: the lease is released when the body has
    /// been read to its end, or when it is dropped (a client that went away).
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
        lease: Option<LeaseGuard>,
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
        }
    }

    pub(crate) fn full(data: Bytes) -> Self {
        Self {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
            lease: None,
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
            KindProj::Inner { body } => {
                let frame = ready!(body.poll_frame(cx));
                if !matches!(frame, Some(Ok(_))) {
                    // The end (or a failure) of the body: the work is done.
                    drop(this.lease.take());
                }
                Poll::Ready(frame)
            }
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Full { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
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
            .finish()
    }
}

/// A concurrency lease, released when dropped.
///
/// Release is a store call, so it is spawned on the current Tokio runtime.
/// Without a runtime (dropped on a foreign thread) the lease expires after
/// its quota's lease timeout instead.
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
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        let Some(lease) = self.lease.take() else {
            return;
        };
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let limiter = self.limiter.clone();
            handle.spawn(async move {
                if let Err(_error) = limiter.release(&lease).await {
                    event!(warn, error = %_error, lease = lease.id(), "could not release a concurrency lease; it expires after its lease timeout");
                }
            });
        } else {
            event!(
                warn,
                lease = lease.id(),
                "concurrency lease dropped outside a Tokio runtime; it expires after its lease timeout"
            );
        }
    }
}

impl fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseGuard")
            .field("lease", &self.lease)
            .finish()
    }
}
