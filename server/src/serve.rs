//! The gRPC server: HTTP/2 over the connections of an [`Incoming`], each
//! connection's calls polled by that connection's own task.
//!
//! tonic's `Server` spawns a task per call. On tokio's multi-thread
//! runtime, a call that answers wakes its connection's task, which runs at
//! once (tokio's LIFO slot) and writes that one answer: about one `writev`
//! per call, and a cross-thread wake for many of them. A rate limit call is
//! a few microseconds of work, so those writes were a large share of the
//! service's CPU (a fifth of it in the kernel's TCP send path alone). Here
//! a connection's task polls the connection and then every call of it that
//! is ready, and only then writes: the answers that are ready go out
//! together (about 16 calls a `writev` under the benchmark's load, against
//! 1.3), and no call wakes another thread. Connections are spread over the
//! runtime's threads; the calls of one connection share a thread (Envoy
//! opens a connection per worker thread, so its calls spread as its workers
//! do).
//!
//! A panic in a call ends that call's stream, as a task's panic would, and
//! not its connection.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use futures_util::FutureExt as _;
use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use futures_util::task::AtomicWaker;
use hyper::server::conn::http2;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tonic::body::Body;
use tonic::service::Routes;
use tower::ServiceExt as _;

use crate::net::{Connection, Incoming};

/// How [`serve`] serves.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GrpcOptions {
    /// HTTP/2's `SETTINGS_MAX_CONCURRENT_STREAMS`: the most calls in flight
    /// on one connection. Default: 1,024.
    pub max_concurrent_streams: u32,
}

impl Default for GrpcOptions {
    fn default() -> Self {
        Self {
            max_concurrent_streams: 1_024,
        }
    }
}

impl GrpcOptions {
    /// Sets [`max_concurrent_streams`](Self::max_concurrent_streams).
    pub fn max_concurrent_streams(mut self, n: u32) -> Self {
        self.max_concurrent_streams = n;
        self
    }
}

/// Serves `routes` (tonic's services) over `incoming` until `signal`
/// completes; then stops accepting (the listening socket is closed), asks
/// each connection to end (HTTP/2 `GOAWAY`: the calls in flight are
/// answered), and returns when every connection has closed.
pub async fn serve(
    incoming: Incoming,
    routes: Routes,
    options: GrpcOptions,
    signal: impl Future<Output = ()>,
) {
    let routes = routes.prepare();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    {
        let mut incoming = std::pin::pin!(incoming);
        let mut signal = std::pin::pin!(signal);
        loop {
            tokio::select! {
                () = &mut signal => break,
                next = incoming.next() => match next {
                    Some(Ok(conn)) => {
                        tokio::spawn(connection(conn, routes.clone(), options.clone(), stopped.clone()));
                    }
                    // (an `Incoming` yields no error and never ends)
                    Some(Err(_)) => continue,
                    None => break,
                },
            }
        }
    }
    let _ = stop.send(true);
    drop(stopped);
    stop.closed().await;
}

/// Serves one connection until it closes, or ends it gracefully once
/// `stop` says so.
async fn connection(
    conn: Connection,
    routes: Routes,
    options: GrpcOptions,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let calls = Calls::default();
    let mut builder = http2::Builder::new(calls.clone());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(options.max_concurrent_streams);
    let service = TowerToHyperService::new(
        routes.map_request(|req: hyper::Request<hyper::body::Incoming>| req.map(Body::new)),
    );
    let mut driven = std::pin::pin!(Driven {
        conn: Box::pin(builder.serve_connection(TokioIo::new(conn), service)),
        calls,
        running: FuturesUnordered::new(),
    });
    let mut stopping = false;
    loop {
        tokio::select! {
            served = &mut driven => {
                if let Err(e) = served {
                    tracing::debug!("connection ended: {e}");
                }
                return;
            }
            changed = stop.wait_for(|s| *s), if !stopping => {
                stopping = true;
                if changed.is_ok() {
                    driven.conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// A call's future, as hyper hands it to its executor.
type Call = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The executor of one connection's calls: they are queued for the
/// connection's task ([`Driven`]), which polls them.
#[derive(Clone, Default)]
struct Calls(Arc<Queued>);

#[derive(Default)]
struct Queued {
    new: Mutex<Vec<Call>>,
    /// The connection's task, woken when a call is queued from elsewhere.
    task: AtomicWaker,
}

impl<F> hyper::rt::Executor<F> for Calls
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, call: F) {
        // (a panicking call ends as its stream, not the connection: hyper
        // resets a stream whose future is dropped)
        let call = AssertUnwindSafe(call).catch_unwind().map(|_| ());
        self.0
            .new
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Box::pin(call));
        self.0.task.wake();
    }
}

/// One connection and its calls, polled together.
struct Driven<C> {
    conn: Pin<Box<C>>,
    calls: Calls,
    running: FuturesUnordered<Call>,
}

impl<C: Future> Future for Driven<C> {
    type Output = C::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        // (every field is Unpin: the connection is boxed)
        let this = self.get_mut();
        this.calls.0.task.register(cx.waker());
        // read what came (new calls, their requests), then run every call
        // that can go on, then write what they answered, all at once
        if let Poll::Ready(done) = this.conn.as_mut().poll(cx) {
            return Poll::Ready(done);
        }
        this.run_calls(cx);
        this.conn.as_mut().poll(cx)
    }
}

impl<C> Driven<C> {
    /// Polls the queued calls and every running call that was woken, until
    /// none is ready (a call that finishes is dropped; `FuturesUnordered`
    /// yields after a round of its own, waking the task again).
    fn run_calls(&mut self, cx: &mut Context<'_>) {
        {
            let mut new = self
                .calls
                .0
                .new
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for call in new.drain(..) {
                self.running.push(call);
            }
        }
        while let Poll::Ready(Some(())) = self.running.poll_next_unpin(cx) {}
    }
}
