//! [`ResponseFuture`]: check → (delay) → inner call → response with headers.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::request::Parts;
use http::{Request, Response};
use http_body::Body;
use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tower_service::Service;

use super::body::{LeaseGuard, Release, ResponseBody};
use super::check::{Checked, Deciding, Verdict};
use super::config::Config;
use super::headers::RateHeaders;
use super::metrics::{self, LeaseCount, OutcomeLabel};
use super::outcome::RateLimitOutcome;
use super::response;
use super::settle::{SettleGuard, UsageReporter};

pin_project! {
    /// The response future of [`RateLimit`](crate::middleware::RateLimit).
    pub struct ResponseFuture<S, ReqBody>
    where
        S: Service<Request<ReqBody>>,
        S::Response: sealed::HttpResponse,
    {
        #[pin]
        state: State<S, ReqBody, S::Future, <S::Response as sealed::HttpResponse>::Body>,
    }
}

mod sealed {
    /// An `http::Response` with a body: names the inner service's body type
    /// in [`ResponseFuture`](super::ResponseFuture)'s state.
    pub trait HttpResponse {
        type Body: http_body::Body;
    }

    impl<B: http_body::Body> HttpResponse for http::Response<B> {
        type Body = B;
    }
}

/// What goes on the inner service's response.
///
/// (The lease and the reservation, hundreds of bytes each and on few
/// requests, are boxed: the response future, moved several times per
/// request, stays small.)
#[derive(Default)]
struct Extra {
    headers: Option<RateHeaders>,
    lease: Option<Box<LeaseGuard>>,
    /// The reservation to settle once the response is known.
    settle: Option<Box<SettleGuard>>,
}

/// What a delayed request waits with.
struct Delayed<S, ReqBody> {
    sleep: Pin<Box<Sleep>>,
    inner: Option<S>,
    request: Option<Request<ReqBody>>,
    extra: Option<Extra>,
}

pin_project! {
    #[project = StateProj]
    enum State<S, ReqBody, F, B>
    where
        B: Body,
    {
        /// Answered by the middleware without calling the inner service.
        Answered { response: Option<Response<Bytes>> },
        /// Waiting for the store.
        Checking {
            deciding: Deciding,
            inner: Option<S>,
            request: Option<Request<ReqBody>>,
            config: Arc<Config>,
        },
        /// An admitted LeakyBucket request waiting for its slot (never in
        /// shadow mode; boxed: the
        /// largest state, and a rare one; the future, moved several times
        /// per request, is the size of its largest state).
        Delaying { delayed: Box<Delayed<S, ReqBody>> },
        /// The inner service is handling the request.
        Calling { #[pin] future: F, extra: Option<Extra> },
        /// The response's body is over (empty, or whole in its first frame,
        /// held ready): its lease is released before the response is handed
        /// out, so that the server writes head and body at once.
        Releasing { release: Release, response: Option<Response<ResponseBody<B>>> },
        Done,
    }
}

impl<S, ReqBody> ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
    S::Response: sealed::HttpResponse,
{
    /// Answered by the middleware.
    pub(super) fn answered(response: Response<Bytes>) -> Self {
        Self {
            state: State::Answered {
                response: Some(response),
            },
        }
    }

    /// The inner service was called without limiting (bypass, skipped key).
    pub(super) fn passthrough(future: S::Future) -> Self {
        Self {
            state: State::Calling {
                future,
                extra: Some(Extra::default()),
            },
        }
    }

    /// A verdict already made (a memory store's): applied now, the ready
    /// `inner` service called now unless the request waits for its slot
    /// (then a clone of `inner` is kept for it).
    ///
    /// (inlined into the service's `call`: the request's head and the
    /// future, hundreds of bytes each, are then not copied once more)
    #[inline(always)]
    pub(super) fn decided(
        verdict: Checked,
        inner: &mut S,
        mut parts: Parts,
        body: ReqBody,
        config: &Arc<Config>,
    ) -> Self
    where
        S: Clone,
    {
        let next = after(verdict, &mut parts, config);
        let request = Request::from_parts(parts, body);
        Self {
            state: next.into_state(request, inner, S::call, |ready| {
                // the ready service goes with the delayed request, a clone stays
                let clone = ready.clone();
                Some(std::mem::replace(ready, clone))
            }),
        }
    }

    /// A store check, then the ready `inner` service for `request`.
    pub(super) fn checking(
        deciding: Deciding,
        inner: S,
        request: Request<ReqBody>,
        config: Arc<Config>,
    ) -> Self {
        Self {
            state: State::Checking {
                deciding,
                inner: Some(inner),
                request: Some(request),
                config,
            },
        }
    }
}

impl<S, ReqBody, ResBody> Future for ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: Body,
{
    type Output = Result<Response<ResponseBody<ResBody>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            match state.as_mut().project() {
                StateProj::Answered { response } => {
                    let response = response.take();
                    state.set(State::Done);
                    return match response {
                        Some(r) => Poll::Ready(Ok(r.map(ResponseBody::full))),
                        None => panic!("ResponseFuture polled after completion"),
                    };
                }
                StateProj::Checking {
                    deciding,
                    inner,
                    request,
                    config,
                } => {
                    let verdict = ready!(deciding.as_mut().poll(cx));
                    let (Some(inner), Some(request)) = (inner.take(), request.take()) else {
                        panic!("ResponseFuture polled after completion");
                    };
                    let (mut parts, body) = request.into_parts();
                    let next = after(verdict, &mut parts, config);
                    state.set(next.into_state(
                        Request::from_parts(parts, body),
                        &mut Some(inner),
                        |inner, r| match inner {
                            Some(s) => s.call(r),
                            None => panic!("ResponseFuture polled after completion"),
                        },
                        Option::take,
                    ));
                }
                StateProj::Delaying { delayed } => {
                    let Delayed {
                        sleep,
                        inner,
                        request,
                        extra,
                    } = &mut **delayed;
                    ready!(sleep.as_mut().poll(cx));
                    let (Some(mut inner), Some(request)) = (inner.take(), request.take()) else {
                        panic!("ResponseFuture polled after completion");
                    };
                    let extra = extra.take();
                    let future = inner.call(request);
                    state.set(State::Calling { future, extra });
                }
                StateProj::Calling { future, extra } => {
                    let result = ready!(future.poll(cx));
                    let extra = extra.take().unwrap_or_default();
                    let mut res = match result {
                        Ok(res) => res,
                        Err(error) => {
                            state.set(State::Done);
                            return Poll::Ready(Err(error));
                        }
                    };
                    if let Some(h) = extra.headers {
                        h.apply(res.headers_mut());
                    }
                    // (most requests hold neither: the response is not moved again)
                    if extra.settle.is_none() && extra.lease.is_none() {
                        state.set(State::Done);
                        return Poll::Ready(Ok(res.map(|b| ResponseBody::inner(b))));
                    }
                    // The head is known: what the reservation settles to
                    // (settled with the lease's release, when the body ends).
                    let (settle, res) = match extra.settle.map(|g| *g) {
                        None => (None, res),
                        Some(guard) => {
                            let (head, body) = res.into_parts();
                            (guard.at_head(&head), Response::from_parts(head, body))
                        }
                    };
                    let lease = match (extra.lease.map(|l| *l), settle) {
                        (Some(lease), Some(settle)) => Some(lease.and_settle(settle)),
                        (lease, None) => lease,
                        (None, Some(settle)) => {
                            Some(LeaseGuard::settling(settle.limiter().clone(), settle))
                        }
                    };
                    let Some(lease) = lease else {
                        state.set(State::Done);
                        return Poll::Ready(Ok(res.map(|b| ResponseBody::inner(b))));
                    };
                    if res.body().is_end_stream() {
                        // Empty: the server will not poll that body.
                        state.set(State::Releasing {
                            release: lease.release(),
                            response: Some(res.map(|b| ResponseBody::inner(b))),
                        });
                        continue;
                    }
                    match prime(res, lease, cx) {
                        Primed::Streaming(res) => {
                            state.set(State::Done);
                            return Poll::Ready(Ok(res));
                        }
                        Primed::Whole(release, res) => state.set(State::Releasing {
                            release,
                            response: Some(res),
                        }),
                    }
                }
                StateProj::Releasing { release, response } => {
                    ready!(Pin::new(release).poll(cx));
                    let Some(res) = response.take() else {
                        panic!("ResponseFuture polled after completion");
                    };
                    state.set(State::Done);
                    return Poll::Ready(Ok(res));
                }
                StateProj::Done => panic!("ResponseFuture polled after completion"),
            }
        }
    }
}

/// What follows a verdict: the inner service called at once or after a
/// delay (the request, and what goes on its response), or the middleware's
/// answer.
///
/// (The inner service's future is made where the state is: made earlier,
/// that future, hundreds of bytes, would be copied at every return.)
enum Next {
    Call(Extra),
    Answer(Response<Bytes>),
    Delay(Pin<Box<Sleep>>, Extra),
}

impl Next {
    /// The future's state for `request`: `call` calls the inner service
    /// (`ready`); `delayed` takes from `ready` the service a delayed request
    /// is for (the one driven to readiness).
    #[inline(always)]
    fn into_state<ReqBody, R, S, F, B: Body>(
        self,
        request: Request<ReqBody>,
        ready: &mut R,
        call: impl FnOnce(&mut R, Request<ReqBody>) -> F,
        delayed: impl FnOnce(&mut R) -> Option<S>,
    ) -> State<S, ReqBody, F, B> {
        match self {
            Next::Call(extra) => State::Calling {
                future: call(ready, request),
                extra: Some(extra),
            },
            Next::Answer(response) => State::Answered {
                response: Some(response),
            },
            Next::Delay(sleep, extra) => State::Delaying {
                delayed: Box::new(Delayed {
                    sleep,
                    inner: delayed(ready),
                    request: Some(request),
                    extra: Some(extra),
                }),
            },
        }
    }
}

/// Applies `verdict` to the request of `parts`: answers it, or lets it on
/// to the inner service (at once, or after a delay), its outcome (the
/// decision inside) in its extensions, with the headers for its response.
///
/// (The request's head is borrowed, not moved: it is hundreds of bytes.)
fn after(checked: Checked, parts: &mut Parts, config: &Arc<Config>) -> Next {
    // The usual request, allowed by a decision with nothing else to do, takes
    // a short path; the rest is out of line (the code a request runs through
    // stays small: it competes for the instruction cache with the server's).
    match checked {
        Checked {
            verdict: Verdict::Decided(decision),
            plan: None,
            reservation: None,
            ..
        } if decision.allowed()
            && decision.delay_us == 0
            && decision.lease.is_none()
            && !config.near_limit.is_on()
            && !decision.shadow_denied() =>
        {
            metrics::decision(&config.name, "", &decision.quota(), OutcomeLabel::Allowed);
            let headers = config.limits.headers(config.answers.style, &decision, None);
            parts.extensions.insert(RateLimitOutcome::Allowed(decision));
            Next::Call(Extra {
                headers: Some(headers),
                lease: None,
                settle: None,
            })
        }
        checked => after_in_full(checked, parts, config),
    }
}

/// [`after`], for any verdict.
#[inline(never)]
fn after_in_full(mut checked: Checked, parts: &mut Parts, config: &Arc<Config>) -> Next {
    let reservation = checked.reservation.take();
    // (the field, not `plan_name()`: the verdict is taken out below)
    let plan = checked
        .plan
        .as_deref()
        .map_or(&crate::decision::Interned::EMPTY, |p| &p.label);
    if let Some(p) = &checked.plan {
        parts.extensions.insert(p.clone());
    }
    let (decision, limiter, store_error) =
        match std::mem::replace(&mut checked.verdict, Verdict::Closed) {
            Verdict::Decided(decision) => (decision, None, None),
            Verdict::Fallback(decision, limiter, error) => (decision, Some(limiter), Some(error)),
            Verdict::Open(error) => {
                metrics::decision(&config.name, plan, "", OutcomeLabel::FailOpen);
                parts
                    .extensions
                    .insert(RateLimitOutcome::StoreUnavailable { error });
                return Next::Call(Extra::default());
            }
            Verdict::Closed => {
                metrics::decision(&config.name, plan, "", OutcomeLabel::FailClosed);
                return Next::Answer(response::unavailable(config, parts));
            }
        };
    let quota = &decision.quota();
    let headers = config
        .limits
        .headers(config.answers.style, &decision, checked.plan.as_ref());
    let fallback = store_error.is_some();
    if !decision.allowed() {
        if !checked.shadow {
            let outcome = if fallback {
                OutcomeLabel::FallbackDenied
            } else {
                OutcomeLabel::Denied
            };
            metrics::decision(&config.name, plan, quota, outcome);
            return Next::Answer(response::denied(config, parts, &decision, headers));
        }
        // Shadow mode: would have denied; let through, with the headers it
        // would have had (configurable), never a Retry-After.
        metrics::decision(&config.name, plan, quota, OutcomeLabel::ShadowDenied);
        let mut decision = decision;
        decision.shadow_let_through = true;
        parts
            .extensions
            .insert(RateLimitOutcome::ShadowDenied(decision));
        let extra = Extra {
            headers: config
                .answers
                .shadow_headers
                .then(|| headers.without_retry_after()),
            lease: None,
            settle: None,
        };
        return Next::Call(extra);
    }
    // (a shadow quota of the limiter would have denied it: Quota::shadow)
    let shadow_denied = decision.shadow_denied();
    // The whole delay, never less: the request's slot is taken. Shadow mode
    // (the layer's or the plan's) never acts: the delay is reported, not
    // waited (the slot is taken all the same, as it is counted).
    let mut delay = decision.delay().filter(|d| !d.is_zero());
    let spared = if checked.shadow { delay.take() } else { None };
    if let Some(_spared) = spared {
        metrics::shadow_delay(&config.name, plan, quota, _spared);
        event!(debug, quota = %decision.quota(), delay = ?_spared, "would have delayed (shadow mode)");
    }
    let outcome = if shadow_denied {
        OutcomeLabel::ShadowDenied
    } else if spared.is_some() {
        OutcomeLabel::ShadowDelayed
    } else if fallback {
        OutcomeLabel::FallbackAllowed
    } else {
        OutcomeLabel::Allowed
    };
    metrics::decision(&config.name, plan, quota, outcome);
    if let Some(near) = config.near_limit.crossed(&decision, checked.cost) {
        metrics::near_limit(&config.name, plan, &near.quota);
        if let Some(callback) = &config.near_limit.callback {
            callback(parts, &near);
        }
        parts.extensions.insert(near);
    }
    // The handler sees the lease too (releasing twice is harmless).
    let lease = decision.lease().cloned().map(|l| {
        let limiter = limiter.unwrap_or_else(|| checked.limiter(config).clone());
        Box::new(LeaseGuard::new(limiter, l).counted(LeaseCount::new(&config.name, plan)))
    });
    let settle = match (reservation, &config.settle) {
        (Some(reservation), Some(settle)) => {
            let limiter = checked.limiter(config).clone();
            let reporter = parts.extensions.get::<UsageReporter>().cloned();
            Some(Box::new(SettleGuard::new(
                limiter,
                *reservation,
                settle.clone(),
                config.counters.clone(),
                reporter,
            )))
        }
        _ => None,
    };
    // One extension, the decision inside: each is an allocation of every request.
    parts.extensions.insert(match store_error {
        _ if shadow_denied => RateLimitOutcome::ShadowDenied(decision),
        _ if spared.is_some() => RateLimitOutcome::ShadowDelayed(decision),
        None => RateLimitOutcome::Allowed(decision),
        Some(error) => RateLimitOutcome::Fallback { decision, error },
    });
    let extra = Extra {
        headers: Some(headers),
        lease,
        settle,
    };
    match delay {
        Some(d) => Next::Delay(Box::pin(tokio::time::sleep(d)), extra),
        None => Next::Call(extra),
    }
}

/// A lease-holding response, its body's first frame polled.
enum Primed<B: Body> {
    /// The whole body is in that frame (or the body ended): the lease's
    /// release, to finish before the response (its frame ready) is returned.
    Whole(Release, Response<ResponseBody<B>>),
    /// More may follow (or the frame is not ready yet, or the body failed):
    /// the response to return at once, the lease released before its last
    /// frame.
    Streaming(Response<ResponseBody<B>>),
}

/// Polls the first frame of `res`'s body once, before the response is
/// returned. A body that is whole in its first frame (axum's `String`,
/// `Json`, `Full`: most responses) gets its lease released before the
/// response is returned, its frame ready, so the server writes head and body
/// together; were the body to wait for the release, the server would write
/// (and flush) the head alone and the body later, which without TCP_NODELAY
/// can cost a Nagle/delayed-ACK stall of some 40 ms per response.
fn prime<B: Body>(res: Response<B>, lease: LeaseGuard, cx: &mut Context<'_>) -> Primed<B> {
    let (parts, body) = res.into_parts();
    let mut body = Box::pin(body);
    let body = match body.as_mut().poll_frame(cx) {
        // Not ready: the server sends the head meanwhile, as it would.
        Poll::Pending => ResponseBody::primed(body, None, Some(lease)),
        Poll::Ready(Some(Ok(frame))) if !body.is_end_stream() => {
            ResponseBody::primed(body, Some(Ok(frame)), Some(lease))
        }
        Poll::Ready(Some(Ok(frame))) => {
            let release = lease.release();
            let body = ResponseBody::primed(body, Some(Ok(frame)), None);
            return Primed::Whole(release, Response::from_parts(parts, body));
        }
        Poll::Ready(None) => {
            // Over without a frame: an empty body.
            let release = lease.release();
            let body = ResponseBody::full(Bytes::new());
            return Primed::Whole(release, Response::from_parts(parts, body));
        }
        Poll::Ready(Some(Err(error))) => {
            // A failed body: the work is over; released in the background.
            drop(lease);
            ResponseBody::primed(body, Some(Err(error)), None)
        }
    };
    Primed::Streaming(Response::from_parts(parts, body))
}

impl<S, ReqBody> fmt::Debug for ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
    S::Response: sealed::HttpResponse,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Answered { .. } => "answered",
            State::Checking { .. } => "checking",
            State::Delaying { .. } => "delaying",
            State::Calling { .. } => "calling",
            State::Releasing { .. } => "releasing",
            State::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}
