//! [`StallProxy`]: a TCP proxy that can stall like a network path dropping packets.

use std::collections::BTreeSet;
use std::io::Read;
use std::net::TcpListener;

use super::sys::{PORT_ATTEMPTS, pick_port};

/// A TCP proxy on a free loopback port in front of a server, that can stall
/// like a network path that drops packets: [`stall`](Self::stall) stops
/// forwarding bytes in both directions while every socket stays open, so
/// clients see no error, only silence.
///
/// Runs on its own threads, independent of the test's runtime.
pub(crate) struct StallProxy {
    port: u16,
    state: std::sync::Arc<ProxyState>,
    acceptor: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct ProxyState {
    inner: std::sync::Mutex<ProxyInner>,
    changed: std::sync::Condvar,
}

#[derive(Default)]
struct ProxyInner {
    stalled: bool,
    closed: bool,
    accepted: usize,
    /// Connections that lived through a stall: silent until `resume_all()`.
    frozen: BTreeSet<usize>,
    /// Both sockets of every connection, to shut them down on drop.
    sockets: Vec<std::net::TcpStream>,
}

impl StallProxy {
    /// A proxy on a free loopback port forwarding to `127.0.0.1:upstream_port`.
    pub(crate) fn start(upstream_port: u16) -> StallProxy {
        let mut last = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = pick_port();
            match TcpListener::bind(("127.0.0.1", port)) {
                Ok(listener) => {
                    let state = std::sync::Arc::new(ProxyState::default());
                    let acceptor = {
                        let state = state.clone();
                        std::thread::spawn(move || accept_loop(listener, upstream_port, state))
                    };
                    return StallProxy {
                        port,
                        state,
                        acceptor: Some(acceptor),
                    };
                }
                Err(e) => last = Some(e),
            }
        }
        panic!("no free loopback port for the proxy: {last:?}");
    }

    /// The port the proxy listens on (127.0.0.1).
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/`
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// How many client connections the proxy has accepted so far.
    pub(crate) fn connections(&self) -> usize {
        self.lock().accepted
    }

    /// Stops forwarding, in both directions, on every connection, open or
    /// opened while stalled. Sockets stay open; what is sent is held.
    pub(crate) fn stall(&self) {
        let mut inner = self.lock();
        inner.stalled = true;
        let live = 0..inner.accepted;
        inner.frozen.extend(live);
    }

    /// Forwards again on connections opened from now on. Connections that
    /// lived through the stall stay silent, as a TCP connection whose
    /// retransmissions backed off does for seconds to minutes after a real
    /// network partition heals; [`resume_all`](Self::resume_all) wakes them.
    pub(crate) fn resume(&self) {
        self.lock().stalled = false;
        self.state.changed.notify_all();
    }

    /// Forwards again on every connection: the stalled ones deliver what they held.
    pub(crate) fn resume_all(&self) {
        let mut inner = self.lock();
        inner.stalled = false;
        inner.frozen.clear();
        drop(inner);
        self.state.changed.notify_all();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ProxyInner> {
        self.state.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for StallProxy {
    fn drop(&mut self) {
        let sockets = {
            let mut inner = self.lock();
            inner.closed = true;
            std::mem::take(&mut inner.sockets)
        };
        self.state.changed.notify_all();
        for s in sockets {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        // wake the acceptor, which then sees `closed`
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn accept_loop(listener: TcpListener, upstream_port: u16, state: std::sync::Arc<ProxyState>) {
    for client in listener.incoming() {
        let mut inner = state.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.closed {
            return;
        }
        let Ok(client) = client else { continue };
        let Ok(upstream) = std::net::TcpStream::connect(("127.0.0.1", upstream_port)) else {
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = upstream.set_nodelay(true);
        let id = inner.accepted;
        inner.accepted += 1;
        if inner.stalled {
            inner.frozen.insert(id);
        }
        let (Ok(c2), Ok(u2), Ok(c3), Ok(u3)) = (
            client.try_clone(),
            upstream.try_clone(),
            client.try_clone(),
            upstream.try_clone(),
        ) else {
            continue;
        };
        inner.sockets.push(c3);
        inner.sockets.push(u3);
        drop(inner);
        for (from, to) in [(client, upstream), (u2, c2)] {
            let state = state.clone();
            std::thread::spawn(move || forward(id, from, to, &state));
        }
    }
}

/// Copies `from` to `to`, holding each chunk while the connection is stalled.
fn forward(
    id: usize,
    mut from: std::net::TcpStream,
    mut to: std::net::TcpStream,
    state: &ProxyState,
) {
    use std::io::Write;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => {
                let _ = to.shutdown(std::net::Shutdown::Write);
                return;
            }
            Ok(n) => n,
        };
        let mut inner = state.inner.lock().unwrap_or_else(|e| e.into_inner());
        while !inner.closed && (inner.stalled || inner.frozen.contains(&id)) {
            inner = state.changed.wait(inner).unwrap_or_else(|e| e.into_inner());
        }
        if inner.closed {
            return;
        }
        drop(inner);
        if to.write_all(&buf[..n]).is_err() {
            let _ = from.shutdown(std::net::Shutdown::Both);
            return;
        }
    }
}
