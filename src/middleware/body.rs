//! [`ResponseBody`]: the inner service's body or the middleware's own, and
//! the concurrency lease that lives as long as the response.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::settle::SettleGuard;
use crate::decision::Lease;
use crate::limiter::RateLimiter;

pin_project! {
    /// The response body of [`RateLimit`](crate::middleware::RateLimit): the inner
    /// service's body, or the middleware's own (a denial, a 503).
    ///
    /// When the request holds a [`Concurrency`](crate::strategy::Strategy::Concurrency)
    /// lease, the body carries it. The lease is released *before* the body's
    /// last frame is handed out (or its end reported): a client that has
    /// received a whole response is never denied by that response's lease,
    /// even when it sends its next request at once on the same connection.
    /// That release is one store call, bounded by the store's own timeout
    /// (see [`RedisStore::timeout`](crate::RedisStore::timeout)); if it fails
    /// the failure is logged, the lease expires after its lease timeout, and
    /// the last frame is handed out all the same. A body dropped before its
    /// end (a client that went away) releases its lease in a spawned task.
    ///
    /// A body whose first frame is also its last (axum's `String`, `Json`,
    /// `Full` bodies: most responses) is released before the response is
    /// returned, its one frame ready: the server writes head and body at
    /// once. A streaming body (its end known only after more frames) waits
    /// for the release before its last frame, so the server writes that frame
    /// apart from the rest; without `TCP_NODELAY` on the connection, Nagle's
    /// algorithm and the client's delayed ACK can hold those last bytes back
    /// for some 40 ms. Serve with `TCP_NODELAY` (with axum:
    /// `listener.tap_io(|tcp| { let _ = tcp.set_nodelay(true); })`, from
    /// `axum::serve::ListenerExt`).
    pub struct ResponseBody<B>
    where
        B: Body,
    {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B>
    where
        B: Body,
    {
        // (no lease: the inner body as it is)
        Inner { #[pin] body: B },
        // A body whose first frame `ResponseFuture` polled before returning
        // the response, with what it holds (boxed: every response body is
        // moved, and axum boxes it once more; few are primed).
        Primed { primed: Box<Primed<B>> },
        Full { data: Option<Bytes> },
    }
}

/// A frame of `B`, or its error.
type FrameResult<B> = Result<Frame<<B as Body>::Data>, <B as Body>::Error>;

/// A primed body: polled once before the response was returned (boxed to be
/// polled there and moved into the response), that first frame (or error)
/// still to hand out, and the lease it may hold.
struct Primed<B: Body> {
    body: Pin<Box<B>>,
    first: Exclusive<Option<FrameResult<B>>>,
    lease: Option<LeaseGuard>,
    /// The release under way before the last frame is handed out.
    releasing: Option<Release>,
    /// That last frame, held back meanwhile (`None`: the end of the body).
    last: Option<Frame<Bytes>>,
}

impl<B: Body> ResponseBody<B> {
    /// The inner service's body, holding no lease (a lease-holding body is
    /// [`primed`](Self::primed)).
    pub(super) fn inner(body: B) -> Self {
        Self {
            kind: Kind::Inner { body },
        }
    }

    /// A body whose `first` frame (or error) was polled already; `lease`
    /// still held (the first frame was not the last one) or not.
    pub(super) fn primed(
        body: Pin<Box<B>>,
        first: Option<Result<Frame<B::Data>, B::Error>>,
        lease: Option<LeaseGuard>,
    ) -> Self {
        Self {
            kind: Kind::Primed {
                primed: Box::new(Primed {
                    body,
                    first: Exclusive::new(first),
                    lease,
                    releasing: None,
                    last: None,
                }),
            },
        }
    }

    pub(super) fn full(data: Bytes) -> Self {
        Self {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
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
        match self.project().kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx),
            KindProj::Primed { primed } => match primed.first.get_mut().take() {
                // Not the last frame, or its lease is released already.
                Some(first) => Poll::Ready(Some(first)),
                None => primed.poll_rest(cx),
            },
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            // Holding a lease or a frame: not over until polled once more.
            Kind::Primed { primed } => {
                primed.lease.is_none()
                    && primed.releasing.is_none()
                    && primed.first.with(Option::is_none)
                    && primed.body.is_end_stream()
            }
            Kind::Full { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        let primed = match &self.kind {
            Kind::Inner { body } => return body.size_hint(),
            Kind::Primed { primed } => primed,
            Kind::Full { data } => {
                return SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64));
            }
        };
        let inner = primed.body.size_hint();
        // The frames held back are still to come.
        let first = primed
            .first
            .with(|f| data_len(f.as_ref().and_then(|f| f.as_ref().ok())));
        let len = first.saturating_add(data_len(primed.last.as_ref()));
        if len == 0 {
            return inner;
        }
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(len));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(len));
        }
        hint
    }
}

impl<B> Primed<B>
where
    B: Body<Data = Bytes>,
{
    /// The frames after the first: the last one handed out once the lease
    /// is released.
    fn poll_rest(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        loop {
            if let Some(release) = &mut self.releasing {
                ready!(Pin::new(release).poll(cx));
                self.releasing = None;
                return Poll::Ready(self.last.take().map(Ok));
            }
            let frame = ready!(self.body.as_mut().poll_frame(cx));
            let last = match frame {
                Some(Ok(frame)) if self.body.is_end_stream() => Some(frame),
                Some(Ok(frame)) => return Poll::Ready(Some(Ok(frame))),
                None => None,
                Some(Err(error)) => {
                    // A failed body: the work is over; released in the background.
                    drop(self.lease.take());
                    return Poll::Ready(Some(Err(error)));
                }
            };
            // The end of the body: the work is done. Release the lease
            // first, then hand out the last frame.
            match self.lease.take() {
                Some(lease) => {
                    self.releasing = Some(lease.release());
                    self.last = last;
                }
                None => return Poll::Ready(last.map(Ok)),
            }
        }
    }
}

/// The length of a held-back frame's data (0 for trailers or none).
fn data_len<D: Buf>(frame: Option<&Frame<D>>) -> u64 {
    frame
        .and_then(Frame::data_ref)
        .map_or(0, |d| d.remaining() as u64)
}

/// A value in a `Mutex` only so that the body holding it is `Sync` whenever
/// the value is `Send`: it is reached through `&mut self`, or read for a
/// moment through `&self` (never contended, never held across an await).
struct Exclusive<T>(Mutex<T>);

impl<T> Exclusive<T> {
    fn new(value: T) -> Self {
        Self(Mutex::new(value))
    }

    fn get_mut(&mut self) -> &mut T {
        self.0.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        f(&self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl<B: Body> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, lease, releasing) = match &self.kind {
            Kind::Inner { .. } => ("inner", false, false),
            Kind::Primed { primed } => {
                ("primed", primed.lease.is_some(), primed.releasing.is_some())
            }
            Kind::Full { .. } => ("full", false, false),
        };
        f.debug_struct("ResponseBody")
            .field("kind", &kind)
            .field("holds_lease", &lease)
            .field("releasing", &releasing)
            .finish()
    }
}

/// A concurrency lease, released when dropped.
///
/// Release is a store call, so it is spawned on the current Tokio runtime.
/// Without a runtime (dropped on a foreign thread) the lease expires after
/// its quota's lease timeout instead. [`release`](Self::release) gives the
/// same store call as a future, for callers that must know it is done.
pub(super) struct LeaseGuard {
    limiter: RateLimiter,
    lease: Option<Lease>,
    /// A reservation to settle when the body ends (before the lease's
    /// release), or, dropped, in a task of its own.
    settle: Option<SettleGuard>,
    /// The `ratelimit_leases` gauge's part (feature `metrics`).
    _count: Option<super::metrics::LeaseCount>,
}

impl LeaseGuard {
    pub(super) fn new(limiter: RateLimiter, lease: Lease) -> Self {
        Self {
            limiter,
            lease: Some(lease),
            settle: None,
            _count: None,
        }
    }

    /// A guard that only settles `settle` (no lease).
    pub(super) fn settling(limiter: RateLimiter, settle: SettleGuard) -> Self {
        Self {
            limiter,
            lease: None,
            settle: Some(settle),
            _count: None,
        }
    }

    /// Settles `settle` too, before the lease is released.
    pub(super) fn and_settle(mut self, settle: SettleGuard) -> Self {
        self.settle = Some(settle);
        self
    }

    /// Counts the lease in the `ratelimit_leases` gauge while it is held.
    pub(super) fn counted(mut self, count: super::metrics::LeaseCount) -> Self {
        self._count = Some(count);
        self
    }

    /// The release of the lease as a future: the store call, bounded by the
    /// store's own timeout; a failure is logged (the lease then expires after
    /// its lease timeout), never returned.
    pub(super) fn release(mut self) -> Release {
        let settle = self.settle.take().and_then(SettleGuard::settle);
        let lease = self.lease.take().map(|lease| {
            let limiter = self.limiter.clone();
            release_future(limiter, lease)
        });
        Release::new(match (settle, lease) {
            (Some(settle), Some(lease)) => Some(Box::pin(async move {
                settle.await;
                lease.await;
            })),
            (settle, lease) => settle.or(lease),
        })
    }
}

fn release_future(limiter: RateLimiter, lease: Lease) -> ReleaseFuture {
    Box::pin(async move {
        if let Err(_error) = limiter.release(&lease).await {
            event!(warn, error = %_error, lease = lease.id(), "could not release a lease; it expires after its lease timeout");
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
                "lease dropped outside a Tokio runtime; it expires after its lease timeout"
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
pub(super) struct Release {
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
                "lease dropped outside a Tokio runtime; it expires after its lease timeout"
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
            .field("settle", &self.settle)
            .finish()
    }
}
