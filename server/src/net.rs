//! The gRPC listener: accepted TCP connections, bounded in number and in
//! how long they may stay silent, for the gRPC server ([`crate::serve`]).
//!
//! tonic's `Server` accepts every connection and keeps it until the client
//! closes it, and retries a failed `accept` at once (at the open-file
//! limit, a loop that spins). [`Incoming`], a stream of [`Connection`]s for
//! [`serve_with_incoming_shutdown`](tonic::transport::server::Router::serve_with_incoming_shutdown),
//! adds what it lacks:
//!
//! * **A cap.** At most [`max_connections`](ListenerOptions::max_connections)
//!   are open at once; past it a new connection is accepted and closed at
//!   once (refused, not queued: its client sees the connection end and
//!   reconnects, or Envoy's `failure_mode_deny` decides its calls at once,
//!   where a queued connection would hold them until the filter's
//!   `timeout`). The calls on open connections go on. Each connection holds
//!   its place until it is closed.
//! * **A handshake timeout.** A connection whose client has not sent
//!   HTTP/2's preface and first `SETTINGS` frame within
//!   [`handshake_timeout`](ListenerOptions::handshake_timeout) of its accept
//!   is closed, however slowly it trickles bytes.
//! * **An idle timeout.** A connection on which no byte moved either way
//!   for [`idle_timeout`](ListenerOptions::idle_timeout) is closed (a write
//!   the client does not read counts as none); Envoy opens a new one for
//!   its next call. A call in flight that long is cut with it.
//! * **Backoff on accept errors.** When `accept` fails for want of a
//!   resource (file descriptors: `EMFILE`, `ENFILE`; memory: `ENOBUFS`,
//!   `ENOMEM`), the next try waits 5 ms, doubling to at most 1 s, until one
//!   succeeds; one warning is logged when such a burst starts and one line
//!   when accepts succeed again, at most once every 10 s (with the failures
//!   of the bursts not logged since). A connection that failed on its own
//!   (aborted, reset before it was accepted) is skipped at once.
//!
//! Refused connections are logged at most once every 10 s, with how many
//! were refused since.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// The bounds of an [`Incoming`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListenerOptions {
    /// The most connections open at once; past it a new one is closed as
    /// soon as it is accepted. Default: 10,000.
    pub max_connections: usize,
    /// How long a new connection has to send HTTP/2's preface and its
    /// first `SETTINGS` frame. Default: 10 s.
    pub handshake_timeout: Duration,
    /// How long a connection may move no byte either way. Default: 300 s.
    pub idle_timeout: Duration,
}

impl Default for ListenerOptions {
    fn default() -> Self {
        Self {
            max_connections: 10_000,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
        }
    }
}

impl ListenerOptions {
    /// Sets [`max_connections`](Self::max_connections) (at least 1).
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// Sets [`handshake_timeout`](Self::handshake_timeout).
    pub fn handshake_timeout(mut self, t: Duration) -> Self {
        self.handshake_timeout = t;
        self
    }

    /// Sets [`idle_timeout`](Self::idle_timeout).
    pub fn idle_timeout(mut self, t: Duration) -> Self {
        self.idle_timeout = t;
        self
    }
}

/// The first wait after a failed `accept`.
const MIN_BACKOFF: Duration = Duration::from_millis(5);
/// The longest wait between two failed `accept`s.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// The shortest time between two warnings about refused connections, or
/// about failed `accept`s.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// The connections a [`TcpListener`] accepts, bounded by
/// [`ListenerOptions`] (see the [module](self)): a
/// [`Stream`](futures_core::Stream) that never yields an error and ends
/// never. Dropping it closes the listening socket.
#[derive(Debug)]
pub struct Incoming {
    listener: TcpListener,
    options: ListenerOptions,
    permits: Arc<Semaphore>,
    /// The wait before the next `accept`, after a failed one.
    backoff: Option<Pin<Box<Sleep>>>,
    /// The wait after the next failed `accept`.
    delay: Duration,
    /// The failed `accept`s of the burst under way, when it started, and
    /// whether it was logged.
    failures: Option<(u64, Instant, bool)>,
    /// When a burst was last logged, and the failures of bursts not logged
    /// since (a burst within [`LOG_EVERY`] of a logged one is not).
    failures_logged: (Option<Instant>, u64),
    /// Connections refused since the last log line about it, and when that
    /// was.
    refused: (u64, Option<Instant>),
}

impl Incoming {
    /// The connections `listener` accepts, within `options`.
    pub fn new(listener: TcpListener, options: ListenerOptions) -> Self {
        let permits = Arc::new(Semaphore::new(options.max_connections.max(1)));
        Self {
            listener,
            options,
            permits,
            backoff: None,
            delay: MIN_BACKOFF,
            failures: None,
            failures_logged: (None, 0),
            refused: (0, None),
        }
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// A handle that tells how many of its connections are open.
    pub fn gauge(&self) -> OpenConnections {
        OpenConnections {
            permits: self.permits.clone(),
            max: self.options.max_connections.max(1),
        }
    }

    fn accepted(&mut self, stream: TcpStream) -> Option<Connection> {
        match self.failures.take() {
            Some((n, since, true)) => tracing::info!(
                failed = n,
                after_ms = since.elapsed().as_millis() as u64,
                "accepting connections again"
            ),
            Some((n, ..)) => self.failures_logged.1 += n,
            None => {}
        }
        self.delay = MIN_BACKOFF;
        match self.permits.clone().try_acquire_owned() {
            Ok(permit) => {
                // (a small request and its answer: no Nagle delay)
                let _ = stream.set_nodelay(true);
                Some(Connection::new(stream, permit, &self.options))
            }
            Err(_) => {
                drop(stream);
                let (n, last) = &mut self.refused;
                *n += 1;
                let now = Instant::now();
                if last.is_none_or(|t| now.duration_since(t) >= LOG_EVERY) {
                    tracing::warn!(
                        refused = *n,
                        max_connections = self.options.max_connections,
                        "connection refused: --max-connections are open"
                    );
                    *n = 0;
                    *last = Some(now);
                }
                None
            }
        }
    }

    fn failed(&mut self, e: &io::Error) {
        match e.kind() {
            // this connection's own failure: the next one may be fine
            io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted => {
                tracing::debug!("accept: {e}");
                return;
            }
            _ => {}
        }
        match &mut self.failures {
            Some((n, ..)) => *n += 1,
            None => {
                let now = Instant::now();
                let open = self.gauge().open();
                let (last, unlogged) = &mut self.failures_logged;
                if last.is_some_and(|t| now.duration_since(t) < LOG_EVERY) {
                    self.failures = Some((1, now, false));
                } else {
                    tracing::warn!(
                        open,
                        max_connections = self.options.max_connections,
                        earlier_failures = *unlogged,
                        "cannot accept connections: {e}{}; retrying with a backoff of up to {} ms",
                        if resource_error(e) {
                            " (the open-file limit: see ulimit -n and --max-connections)"
                        } else {
                            ""
                        },
                        MAX_BACKOFF.as_millis()
                    );
                    *last = Some(now);
                    *unlogged = 0;
                    self.failures = Some((1, now, true));
                }
            }
        }
        self.backoff = Some(Box::pin(tokio::time::sleep(self.delay)));
        self.delay = next_backoff(self.delay);
    }
}

/// The wait after a failed `accept` that followed a wait of `last` (zero
/// for the first): 5 ms, doubling, at most 1 s (the metrics endpoint's
/// accept loop too).
pub(crate) fn next_backoff(last: Duration) -> Duration {
    (last * 2).clamp(MIN_BACKOFF, MAX_BACKOFF)
}

/// Whether `e` is an `accept` that failed for want of descriptors or
/// memory.
fn resource_error(e: &io::Error) -> bool {
    // EMFILE, ENFILE, ENOBUFS, ENOMEM
    #[cfg(any(target_os = "linux", target_os = "android"))]
    const CODES: &[i32] = &[24, 23, 105, 12];
    #[cfg(all(unix, not(any(target_os = "linux", target_os = "android"))))]
    const CODES: &[i32] = &[24, 23, 55, 12];
    #[cfg(not(unix))]
    const CODES: &[i32] = &[];
    e.raw_os_error().is_some_and(|c| CODES.contains(&c)) || e.kind() == io::ErrorKind::OutOfMemory
}

impl futures_core::Stream for Incoming {
    type Item = io::Result<Connection>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(wait) = &mut this.backoff {
                ready!(wait.as_mut().poll(cx));
                this.backoff = None;
            }
            match ready!(this.listener.poll_accept(cx)) {
                Ok((stream, _)) => {
                    if let Some(c) = this.accepted(stream) {
                        return Poll::Ready(Some(Ok(c)));
                    }
                }
                Err(e) => this.failed(&e),
            }
        }
    }
}

/// How many connections of an [`Incoming`] are open
/// ([`Incoming::gauge`]).
#[derive(Debug, Clone)]
pub struct OpenConnections {
    permits: Arc<Semaphore>,
    max: usize,
}

impl OpenConnections {
    /// The connections open now.
    pub fn open(&self) -> usize {
        self.max.saturating_sub(self.permits.available_permits())
    }
}

/// HTTP/2's client connection preface.
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// A frame header's length: 3 bytes of payload length, type, flags, stream.
const FRAME_HEADER: usize = 9;

/// Where a connection is.
#[derive(Debug)]
enum Phase {
    /// Waiting for the preface and the first frame (a `SETTINGS`): the
    /// bytes read so far and that frame's payload length, once read.
    Handshake { read: usize, length: [u8; 3] },
    /// Handshaken: closed after `idle` without a byte either way.
    Open,
}

/// An accepted connection of an [`Incoming`]: a [`TcpStream`] that fails
/// with [`TimedOut`](io::ErrorKind::TimedOut) past its handshake or idle
/// timeout (the HTTP/2 server then closes it), and holds its place under
/// the cap until dropped.
#[derive(Debug)]
pub struct Connection {
    io: TcpStream,
    _permit: OwnedSemaphorePermit,
    phase: Phase,
    /// The handshake's deadline, then the idle deadline (moved lazily: it
    /// is looked at when it fires).
    timer: Pin<Box<Sleep>>,
    idle: Duration,
    /// When a byte last moved.
    last: Instant,
}

impl Connection {
    fn new(io: TcpStream, permit: OwnedSemaphorePermit, options: &ListenerOptions) -> Self {
        let now = Instant::now();
        Self {
            io,
            _permit: permit,
            phase: Phase::Handshake {
                read: 0,
                length: [0; 3],
            },
            timer: Box::pin(tokio::time::sleep_until(now + options.handshake_timeout)),
            idle: options.idle_timeout,
            last: now,
        }
    }

    /// Follows the handshake through `bytes`, just read.
    fn saw(&mut self, bytes: &[u8]) {
        let now = Instant::now();
        self.last = now;
        let Phase::Handshake { read, length } = &mut self.phase else {
            return;
        };
        for &b in bytes {
            // (the preface's bytes are checked by the HTTP/2 server)
            if (PREFACE.len()..PREFACE.len() + 3).contains(read) {
                length[*read - PREFACE.len()] = b;
            }
            *read += 1;
            let payload =
                usize::from(length[0]) << 16 | usize::from(length[1]) << 8 | usize::from(length[2]);
            if *read >= PREFACE.len() + FRAME_HEADER + payload {
                self.phase = Phase::Open;
                self.timer.as_mut().reset(now + self.idle);
                return;
            }
        }
    }

    /// Whether the handshake is over its deadline (checked on every read
    /// while it lasts, so trickled bytes do not hold it open).
    fn handshake_late(&self) -> bool {
        matches!(self.phase, Phase::Handshake { .. }) && self.timer.deadline() <= Instant::now()
    }

    /// What a write of the connection's stream returned: a byte written
    /// counts as activity; a write that waits fails once the deadline
    /// passed.
    fn wrote(
        &mut self,
        cx: &mut Context<'_>,
        written: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match written {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    self.last = Instant::now();
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => self.poll_deadline(cx).map(Err),
        }
    }

    /// `Ready` with the error to fail with once the deadline passed; else
    /// `Pending`, woken when it may have.
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        loop {
            ready!(self.timer.as_mut().poll(cx));
            match self.phase {
                Phase::Handshake { .. } => {
                    return Poll::Ready(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no HTTP/2 handshake within the handshake timeout",
                    ));
                }
                Phase::Open => {
                    let due = self.last + self.idle;
                    if due <= Instant::now() {
                        return Poll::Ready(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "idle past the idle timeout",
                        ));
                    }
                    self.timer.as_mut().reset(due);
                }
            }
        }
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if this.handshake_late() {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no HTTP/2 handshake within the handshake timeout",
                    )));
                }
                if buf.filled().len() > before {
                    let read = &buf.filled()[before..];
                    // (a copy only while handshaking: the first few dozen bytes)
                    if matches!(this.phase, Phase::Handshake { .. }) {
                        let read = read.to_vec();
                        this.saw(&read);
                    } else {
                        this.last = Instant::now();
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => this.poll_deadline(cx).map(Err),
        }
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write(cx, buf);
        this.wrote(cx, written)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.wrote(cx, written)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl Connected for Connection {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_core::Stream;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn next(incoming: &mut Incoming) -> Connection {
        std::future::poll_fn(|cx| Pin::new(&mut *incoming).poll_next(cx))
            .await
            .expect("never ends")
            .expect("never an error")
    }

    async fn pair(options: ListenerOptions) -> (Incoming, TcpStream, Connection) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let mut incoming = Incoming::new(listener, options);
        let client = TcpStream::connect(incoming.local_addr().expect("addr"))
            .await
            .expect("connect");
        let server = next(&mut incoming).await;
        (incoming, client, server)
    }

    /// A SETTINGS frame with one setting (6 bytes of payload).
    const SETTINGS: [u8; 15] = [0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100];

    #[tokio::test(start_paused = true)]
    async fn the_handshake_ends_after_the_first_settings_frame() {
        let (_i, mut client, mut server) = pair(ListenerOptions::default()).await;
        let mut hello = PREFACE.to_vec();
        hello.extend_from_slice(&SETTINGS);
        // one byte at a time: the phase follows
        let mut buf = [0u8; 64];
        for (i, b) in hello.iter().enumerate() {
            client.write_all(&[*b]).await.expect("write");
            let n = server.read(&mut buf).await.expect("read");
            assert_eq!(n, 1);
            let open = matches!(server.phase, Phase::Open);
            assert_eq!(open, i + 1 == hello.len(), "after {} bytes", i + 1);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_fails_at_its_handshake_deadline() {
        let options = ListenerOptions::default().handshake_timeout(Duration::from_secs(3));
        let (_i, _client, mut server) = pair(options).await;
        let start = Instant::now();
        let mut buf = [0u8; 8];
        let e = server.read(&mut buf).await.expect_err("timed out");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(start.elapsed().as_secs(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn bytes_trickled_past_the_handshake_deadline_fail() {
        let options = ListenerOptions::default().handshake_timeout(Duration::from_secs(3));
        let (_i, mut client, mut server) = pair(options).await;
        let mut buf = [0u8; 8];
        for b in &PREFACE[..4] {
            client.write_all(&[*b]).await.expect("write");
            let n = server.read(&mut buf).await.expect("in time");
            assert_eq!(n, 1);
            tokio::time::sleep(Duration::from_millis(900)).await;
        }
        client.write_all(&PREFACE[4..5]).await.expect("write");
        let e = server.read(&mut buf).await.expect_err("late");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_connection_fails_after_its_idle_timeout_counted_from_its_last_byte() {
        let options = ListenerOptions::default().idle_timeout(Duration::from_secs(60));
        let (_i, mut client, mut server) = pair(options).await;
        let mut hello = PREFACE.to_vec();
        hello.extend_from_slice(&SETTINGS);
        client.write_all(&hello).await.expect("write");
        let mut buf = [0u8; 64];
        let mut read = 0;
        while read < hello.len() {
            read += server.read(&mut buf).await.expect("read");
        }
        // a byte each way 50 s later moves the deadline
        tokio::time::sleep(Duration::from_secs(50)).await;
        server.write_all(b"x").await.expect("write");
        let last = Instant::now();
        let e = server.read(&mut buf).await.expect_err("idle");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(last.elapsed().as_secs(), 60);
    }

    #[tokio::test]
    async fn past_the_cap_a_connection_is_closed_at_once_and_counted_again_once_one_closes() {
        let options = ListenerOptions::default().max_connections(1);
        let (mut incoming, _client, server) = pair(options).await;
        let gauge = incoming.gauge();
        assert_eq!(gauge.open(), 1);
        let addr = incoming.local_addr().expect("addr");
        let mut second = TcpStream::connect(addr).await.expect("connect");
        // the stream yields nothing for it, and closes it
        let polled = tokio::time::timeout(Duration::from_millis(300), next(&mut incoming)).await;
        assert!(polled.is_err(), "a second connection was yielded");
        let mut buf = [0u8; 1];
        let n = tokio::time::timeout(Duration::from_secs(10), second.read(&mut buf))
            .await
            .expect("closed in time")
            .unwrap_or(0);
        assert_eq!(n, 0, "the refused connection is closed");
        drop(server);
        assert_eq!(gauge.open(), 0);
        let _third = TcpStream::connect(addr).await.expect("connect");
        let _c = tokio::time::timeout(Duration::from_secs(10), next(&mut incoming))
            .await
            .expect("accepted once a place is free");
        assert_eq!(gauge.open(), 1);
    }
}
