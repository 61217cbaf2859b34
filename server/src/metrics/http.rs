//! The HTTP endpoints: `/metrics`, and `/healthcheck` as
//! envoyproxy/ratelimit serves it ([`Health`]); HTTP/1.1, bounded in
//! connections, in time and in renders.

use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode, header};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

use super::Metrics;

/// How the endpoint treats its clients ([`serve_with`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeOptions {
    /// How long a client may take to send a request's head, from its
    /// connection or from the previous answer: an idle connection is
    /// closed past it. Default: 10 s.
    pub header_timeout: Duration,
    /// The most connections served at once (at least 1); past it, a new
    /// one is answered `503` with `Retry-After: 1` if its socket takes it,
    /// and closed. Default: 16.
    pub max_connections: usize,
    /// How long one connection is served: past it, it is closed once its
    /// answer in flight is sent (within [`shutdown_grace`](Self::shutdown_grace)).
    /// Bounds what a client that reads slowly holds. Default: 60 s.
    pub max_connection_age: Duration,
    /// Once shutdown is signalled (or a connection's age is up), how long
    /// an answer in flight may take to be sent before its connection is
    /// dropped. Default: 5 s.
    pub shutdown_grace: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            max_connections: 16,
            max_connection_age: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

impl ServeOptions {
    /// Sets [`header_timeout`](Self::header_timeout).
    pub fn header_timeout(mut self, d: Duration) -> Self {
        self.header_timeout = d;
        self
    }

    /// Sets [`max_connections`](Self::max_connections) (at least 1).
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// Sets [`max_connection_age`](Self::max_connection_age).
    pub fn max_connection_age(mut self, d: Duration) -> Self {
        self.max_connection_age = d;
        self
    }

    /// Sets [`shutdown_grace`](Self::shutdown_grace).
    pub fn shutdown_grace(mut self, d: Duration) -> Self {
        self.shutdown_grace = d;
        self
    }
}

/// Whether the service serves, as `GET /healthcheck` answers it:
/// `200 OK` while it does, `500` while it does not (before its first xDS
/// snapshot, say, or once it drains), as envoyproxy/ratelimit's (the probe
/// Envoy Gateway gives its rate limit deployment). Clones share one state.
#[derive(Debug, Clone, Default)]
pub struct Health(Arc<std::sync::atomic::AtomicBool>);

impl Health {
    /// A state that does not serve yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets whether the service serves.
    pub fn set_serving(&self, serving: bool) {
        self.0.store(serving, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the service serves.
    pub fn is_serving(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// What an HTTP endpoint serves ([`serve_routes`]): `/metrics`,
/// `/healthcheck`, or both on one listener.
#[derive(Debug, Clone, Default)]
pub struct Routes {
    metrics: Option<Arc<Metrics>>,
    health: Option<Health>,
}

impl Routes {
    /// Nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves `GET /metrics` from `metrics`.
    #[must_use]
    pub fn metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Serves `GET /healthcheck` from `health`.
    #[must_use]
    pub fn health(mut self, health: Health) -> Self {
        self.health = Some(health);
        self
    }

    /// The paths served, joined with `, ` (for a log line).
    pub fn paths(&self) -> String {
        let paths = [
            self.metrics.as_ref().map(|_| "/metrics"),
            self.health.as_ref().map(|_| "/healthcheck"),
        ];
        paths.into_iter().flatten().collect::<Vec<_>>().join(", ")
    }
}

/// Serves `GET /metrics` on `listener` with the default [`ServeOptions`],
/// until the task is dropped ([`serve_with`]).
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    serve_with(
        listener,
        metrics,
        ServeOptions::default(),
        std::future::pending(),
    )
    .await;
}

/// Serves `GET /metrics` on `listener` with the default [`ServeOptions`]
/// until `signal` completes, then shuts down ([`serve_with`]): returns
/// within [`shutdown_grace`](ServeOptions::shutdown_grace) and a second.
pub async fn serve_with_shutdown(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    signal: impl Future<Output = ()>,
) {
    serve_with(listener, metrics, ServeOptions::default(), signal).await;
}

/// Serves `GET /metrics` (the [`render`](Metrics::render)ed text,
/// `text/plain; version=0.0.4`) on `listener` over HTTP/1.1 until `signal`
/// completes; any other path is `404`, any other method `405`.
///
/// The text is rendered on a blocking thread (not on the async workers
/// that answer the service's calls), one render at a time: a scrape that
/// comes while one is under way waits for it and is sent the same text.
/// Connections are bounded in number, in the time to send a request and
/// in their age ([`ServeOptions`]). An error accepting a connection (out
/// of file descriptors, say) pauses accepting, 5 ms doubling up to 1 s
/// while it lasts.
///
/// When `signal` completes, the listener is closed, each connection
/// closes once its answer in flight is sent, and one not closed within
/// [`shutdown_grace`](ServeOptions::shutdown_grace) is dropped: this
/// returns within the grace and a second. (A render under way goes on on
/// its blocking thread: a few milliseconds for each thousand series.)
pub async fn serve_with(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    options: ServeOptions,
    signal: impl Future<Output = ()>,
) {
    serve_routes(listener, Routes::new().metrics(metrics), options, signal).await;
}

/// Serves `routes` on `listener` as [`serve_with`] serves `/metrics`
/// (with `/healthcheck` too when they hold a [`Health`]); any other path
/// is `404`, any other method `405`.
pub async fn serve_routes(
    listener: TcpListener,
    routes: Routes,
    options: ServeOptions,
    signal: impl Future<Output = ()>,
) {
    let (stop, stopped) = watch::channel(false);
    let permits = Arc::new(Semaphore::new(
        options.max_connections.clamp(1, Semaphore::MAX_PERMITS),
    ));
    let mut connections = JoinSet::new();
    let mut pause = Duration::ZERO;
    tokio::pin!(signal);
    loop {
        while connections.try_join_next().is_some() {}
        let accepted = tokio::select! {
            biased;
            () = &mut signal => break,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((stream, _)) => {
                pause = Duration::ZERO;
                match permits.clone().try_acquire_owned() {
                    Ok(permit) => {
                        connections.spawn(connection(
                            stream,
                            routes.clone(),
                            options.clone(),
                            stopped.clone(),
                            permit,
                        ));
                    }
                    Err(_) => {
                        tracing::debug!("metrics: too many connections: one refused");
                        let _ = stream.try_write(BUSY);
                    }
                }
            }
            Err(e) => {
                pause = crate::net::next_backoff(pause);
                tracing::warn!(error = %e, pause_ms = pause.as_millis() as u64, "metrics: cannot accept a connection: pausing");
                tokio::select! {
                    biased;
                    () = &mut signal => break,
                    () = tokio::time::sleep(pause) => {}
                }
            }
        }
    }
    drop(listener);
    stop.send_replace(true);
    // (each connection ends within the grace; this one bounds the rest)
    let all = async { while connections.join_next().await.is_some() {} };
    let _ = tokio::time::timeout(options.shutdown_grace + Duration::from_secs(1), all).await;
    // (dropping the set aborts what is left)
}

/// The answer to a connection past [`ServeOptions::max_connections`].
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

/// Serves one connection until it ends, or until its age is up or shutdown
/// is signalled and then the grace is.
async fn connection(
    stream: TcpStream,
    routes: Routes,
    options: ServeOptions,
    mut stopped: watch::Receiver<bool>,
    _permit: OwnedSemaphorePermit,
) {
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let routes = routes.clone();
        async move { Ok::<_, Infallible>(respond(&routes, &req).await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(options.header_timeout);
    let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => return ended(r),
        _ = stopped.wait_for(|stop| *stop) => {}
        () = tokio::time::sleep(options.max_connection_age) => {}
    }
    conn.as_mut().graceful_shutdown();
    match tokio::time::timeout(options.shutdown_grace, conn).await {
        Ok(r) => ended(r),
        Err(_) => tracing::debug!("metrics: connection dropped: its answer took past the grace"),
    }
}

fn ended(r: Result<(), hyper::Error>) {
    if let Err(e) = r {
        tracing::debug!(error = %e, "metrics: connection ended");
    }
}

/// The type of every answer but the metrics' text.
const TEXT: &str = "text/plain; charset=utf-8";

async fn respond(routes: &Routes, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let get = matches!(*req.method(), Method::GET | Method::HEAD);
    let path = req.uri().path();
    let (status, kind, body) = match (&routes.health, &routes.metrics) {
        (Some(health), _) if path == "/healthcheck" => match (get, health.is_serving()) {
            (true, true) => (StatusCode::OK, TEXT, Bytes::from_static(b"OK")),
            (true, false) => (StatusCode::INTERNAL_SERVER_ERROR, TEXT, Bytes::new()),
            (false, _) => (
                StatusCode::METHOD_NOT_ALLOWED,
                TEXT,
                Bytes::from_static(b"GET /healthcheck\n"),
            ),
        },
        (_, Some(metrics)) => metrics_answer(metrics, get, path).await,
        (_, None) => (
            StatusCode::NOT_FOUND,
            TEXT,
            Bytes::from_static(b"not found: the health check is at /healthcheck\n"),
        ),
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, header::HeaderValue::from_static(kind));
    response
}

/// The answer of the `/metrics` endpoint (every path but a served
/// `/healthcheck`).
async fn metrics_answer(
    metrics: &Arc<Metrics>,
    get: bool,
    path: &str,
) -> (StatusCode, &'static str, Bytes) {
    match (get, path) {
        (true, "/metrics") => match metrics.scrape().await {
            Some(text) => (
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                text,
            ),
            None => (
                StatusCode::INTERNAL_SERVER_ERROR,
                TEXT,
                Bytes::from_static(b"the metrics could not be rendered\n"),
            ),
        },
        (_, "/metrics") => (
            StatusCode::METHOD_NOT_ALLOWED,
            TEXT,
            Bytes::from_static(b"GET /metrics\n"),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            TEXT,
            Bytes::from_static(b"not found: the metrics are at /metrics\n"),
        ),
    }
}

/// Clears [`Metrics::rendering`] when dropped: when its render is done,
/// panicked, or was never run.
struct Rendered(Arc<Metrics>);

impl Drop for Rendered {
    fn drop(&mut self) {
        *self
            .0
            .rendering
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
    }
}

impl Metrics {
    /// The text of a render begun for this scrape, or of the one under way
    /// (on a blocking thread); `None` if that render panicked.
    pub(crate) async fn scrape(self: &Arc<Self>) -> Option<Bytes> {
        let mut rx = {
            let mut slot = self
                .rendering
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match &*slot {
                Some(rx) => rx.clone(),
                None => {
                    let (tx, rx) = watch::channel(None);
                    *slot = Some(rx.clone());
                    let done = Rendered(self.clone());
                    tokio::task::spawn_blocking(move || {
                        #[cfg(test)]
                        done.0.wait_for_gate();
                        let text = Bytes::from(done.0.render());
                        drop(done);
                        tx.send_replace(Some(text));
                    });
                    rx
                }
            }
        };
        let text = rx.wait_for(Option::is_some).await.ok()?;
        text.clone()
    }

    #[cfg(test)]
    fn wait_for_gate(&self) {
        use std::sync::atomic::Ordering;
        self.renders.fetch_add(1, Ordering::SeqCst);
        let gate = self
            .gate
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(gate) = gate {
            // (bounded: a render on the test's own thread must not hang it)
            let _ = gate.recv_timeout(std::time::Duration::from_secs(10));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn accept_errors_pause_5_ms_doubling_to_1_s() {
        let mut p = Duration::ZERO;
        let mut seen = Vec::new();
        for _ in 0..10 {
            p = crate::net::next_backoff(p);
            seen.push(p.as_millis());
        }
        assert_eq!(seen, [5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
    }

    /// Polls `f` once: it must be pending.
    async fn pending<F: Future>(f: std::pin::Pin<&mut F>) {
        let mut f = Some(f);
        std::future::poll_fn(|cx| {
            if let Some(f) = f.take() {
                assert!(f.poll(cx).is_pending(), "done at once");
            }
            std::task::Poll::Ready(())
        })
        .await;
    }

    /// On a one-thread runtime, a render on the calling thread would keep
    /// the first scrape from being pending while the render waits.
    #[tokio::test(flavor = "current_thread")]
    async fn scrapes_render_off_the_async_thread_once_for_those_that_ask_together() {
        let metrics = Arc::new(Metrics::new(10));
        metrics.config_loaded(true);
        let (open, gate) = std::sync::mpsc::channel();
        *metrics.gate.lock().expect("gate") = Some(gate);
        let mut first = std::pin::pin!(metrics.scrape());
        pending(first.as_mut()).await;
        // the render has begun (and waits at the gate)
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while metrics.renders.load(Ordering::SeqCst) == 0 {
            assert!(std::time::Instant::now() < deadline, "no render began");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // this thread goes on meanwhile: counting, and a second scrape
        // that joins the render under way
        metrics.domain_not_found("nowhere");
        let mut second = std::pin::pin!(metrics.scrape());
        pending(second.as_mut()).await;
        open.send(()).expect("open");
        let a = first.await.expect("text");
        let b = second.await.expect("text");
        assert_eq!(a.as_ptr(), b.as_ptr(), "one text for both");
        assert_eq!(metrics.renders.load(Ordering::SeqCst), 1);
        // the next scrape renders anew (and sees what was counted since)
        let c = metrics.scrape().await.expect("text");
        assert_eq!(metrics.renders.load(Ordering::SeqCst), 2);
        let c = std::str::from_utf8(&c).expect("utf-8");
        assert!(c.contains("domain_not_found{domain=\"nowhere\"} 1"), "{c}");
    }
}
