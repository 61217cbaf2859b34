//! The bounded gRPC listener ([`net`](tower_redis_ratelimit_server::net))
//! under the service's gRPC server ([`serve`](tower_redis_ratelimit_server::serve)),
//! on the memory store: idle connections closed, connections past the cap
//! refused while the open ones keep answering, a connection that never
//! speaks HTTP/2 closed after the handshake timeout; many calls in flight
//! on one connection each answered once, exactly; a shutdown that ends
//! every call, then returns.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tonic::service::Routes;
use tower_redis_ratelimit::MemoryStore;
use tower_redis_ratelimit_server::config::{Config, LoadOptions};
use tower_redis_ratelimit_server::net::{Incoming, ListenerOptions, OpenConnections};
use tower_redis_ratelimit_server::pb::RateLimitServiceServer;
use tower_redis_ratelimit_server::pb::rate_limit_response::Code;
use tower_redis_ratelimit_server::serve::{GrpcOptions, serve};
use tower_redis_ratelimit_server::service::{RlsService, ServiceOptions};

const CONFIG: &str = "domain: net\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n";

/// The service of [`CONFIG`] on the memory store.
fn net_service() -> RlsService {
    let config =
        Config::from_sources([("net.yaml", CONFIG)], LoadOptions::default()).expect("config");
    RlsService::new(config, MemoryStore::new(), ServiceOptions::default()).expect("service")
}

/// The service on a free loopback port behind an [`Incoming`] of `options`.
async fn serve_bounded(options: ListenerOptions) -> (SocketAddr, OpenConnections) {
    let service = net_service();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let incoming = Incoming::new(listener, options);
    let addr = incoming.local_addr().expect("addr");
    let open = incoming.gauge();
    tokio::spawn(serve(
        incoming,
        Routes::new(RateLimitServiceServer::new(service)),
        GrpcOptions::default(),
        std::future::pending(),
    ));
    (addr, open)
}

async fn client(addr: SocketAddr) -> Client {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    Client::new(channel)
}

/// HTTP/2's client preface and an empty `SETTINGS` frame: a handshaken
/// connection that then says nothing.
const HELLO: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";

async fn handshaken(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(HELLO).await.expect("write");
    s
}

/// Reads (and drops) what the server sends until it closes the connection;
/// the time that took, or `None` if it is still open after `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut buf = [0u8; 1024];
    tokio::time::timeout(within, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return start.elapsed(),
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
}

async fn wait_open(open: &OpenConnections, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while open.open() != n {
        assert!(
            Instant::now() < deadline,
            "{} open, expected {n}",
            open.open()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_after_the_idle_timeout_and_a_client_reconnects() {
    let idle = Duration::from_secs(1);
    let (addr, open) = serve_bounded(ListenerOptions::default().idle_timeout(idle)).await;
    let mut c = client(addr).await;
    let r = ask(&mut c, "net", vec![desc(&[("k", "v")])], 1).await;
    assert_eq!(overall(&r), Code::Ok);
    let mut idle_ones = Vec::new();
    for _ in 0..50 {
        idle_ones.push(handshaken(addr).await);
    }
    wait_open(&open, 51).await;
    let start = Instant::now();
    for s in &mut idle_ones {
        let took = closed_within(s, Duration::from_secs(30)).await;
        assert!(took.is_some(), "an idle connection stayed open 30 s");
    }
    // not before the idle timeout
    assert!(start.elapsed() >= idle - Duration::from_millis(100));
    // the client's idle connection went too; its next call reconnects
    wait_open(&open, 0).await;
    let r = ask(&mut c, "net", vec![desc(&[("k", "v")])], 1).await;
    assert_eq!(overall(&r), Code::Ok);
    assert_eq!(r.statuses[0].limit_remaining, 998);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_cap_a_new_connection_is_refused_while_the_open_ones_keep_answering() {
    let (addr, open) = serve_bounded(ListenerOptions::default().max_connections(3)).await;
    let mut c = client(addr).await;
    let _a = handshaken(addr).await;
    let _b = handshaken(addr).await;
    wait_open(&open, 3).await;
    // the fourth is closed at once, before any HTTP/2
    let mut fourth = handshaken(addr).await;
    let took = closed_within(&mut fourth, Duration::from_secs(10)).await;
    assert!(took.is_some(), "the connection past the cap stayed open");
    let mut refused = client_or_error(addr).await;
    assert!(refused.is_err(), "a fourth client connected");
    // the open one answers all along
    for i in 0..20 {
        let r = ask(&mut c, "net", vec![desc(&[("k", "cap")])], 1).await;
        assert_eq!(
            (overall(&r), r.statuses[0].limit_remaining),
            (Code::Ok, 999 - i)
        );
    }
    assert_eq!(open.open(), 3);
    // a place freed is taken again
    drop(_a);
    wait_open(&open, 2).await;
    refused = client_or_error(addr).await;
    let mut d = refused.expect("a place is free");
    let r = ask(&mut d, "net", vec![desc(&[("k", "cap")])], 1).await;
    assert_eq!(overall(&r), Code::Ok);
}

async fn client_or_error(addr: SocketAddr) -> Result<Client, String> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect_timeout(Duration::from_secs(5));
    // (a refused connection is accepted by the kernel, then closed: the
    // first call fails)
    let mut c = Client::new(channel.connect().await.map_err(|e| e.to_string())?);
    try_ask(&mut c, "net", vec![peek(&[("k", "probe")])], 0)
        .await
        .map_err(|e| e.to_string())?;
    Ok(c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_never_speaks_http2_is_closed_after_the_handshake_timeout() {
    let handshake = Duration::from_secs(1);
    let options = ListenerOptions::default()
        .handshake_timeout(handshake)
        .idle_timeout(Duration::from_secs(600));
    let (addr, open) = serve_bounded(options).await;
    // silent, and trickling the preface one byte every 300 ms
    let mut silent = TcpStream::connect(addr).await.expect("connect");
    let mut slow = TcpStream::connect(addr).await.expect("connect");
    wait_open(&open, 2).await;
    let start = Instant::now();
    let trickle = tokio::spawn(async move {
        for b in HELLO {
            if slow.write_all(&[*b]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        slow
    });
    let took = closed_within(&mut silent, Duration::from_secs(30))
        .await
        .expect("the silent connection stayed open 30 s");
    assert!(took >= handshake - Duration::from_millis(100), "{took:?}");
    let mut slow = trickle.await.expect("trickle");
    let took = closed_within(&mut slow, Duration::from_secs(30)).await;
    assert!(took.is_some(), "the trickling connection stayed open");
    assert!(start.elapsed() < Duration::from_secs(HELLO.len() as u64 * 300 / 1000));
    wait_open(&open, 0).await;
    // one that handshakes in time stays past the handshake timeout
    let mut good = handshaken(addr).await;
    assert_eq!(
        closed_within(&mut good, handshake * 3).await,
        None,
        "a handshaken connection was closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_calls_in_flight_on_one_connection_are_each_answered_exactly() {
    let (addr, _open) = serve_bounded(ListenerOptions::default()).await;
    let c = client(addr).await;
    // 1,200 calls, 200 at a time on one HTTP/2 connection, on a limit of
    // 1,000 an hour: exactly 1,000 admitted
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let mut c = c.clone();
        tasks.spawn(async move {
            let mut admitted = 0;
            for _ in 0..6 {
                let r = ask(&mut c, "net", vec![desc(&[("k", "many")])], 1).await;
                admitted += u32::from(overall(&r) == Code::Ok);
            }
            admitted
        });
    }
    let mut admitted = 0;
    while let Some(n) = tasks.join_next().await {
        admitted += n.expect("a caller panicked");
    }
    assert_eq!(admitted, 1_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_ends_every_call_then_returns_and_refuses_new_connections() {
    let service = net_service();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let incoming = Incoming::new(listener, ListenerOptions::default());
    let addr = incoming.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(
        incoming,
        Routes::new(RateLimitServiceServer::new(service)),
        GrpcOptions::default(),
        async {
            let _ = stopped.await;
        },
    ));
    let mut c = client(addr).await;
    let r = ask(&mut c, "net", vec![desc(&[("k", "stop")])], 1).await;
    assert_eq!(overall(&r), Code::Ok);
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let mut c = c.clone();
        calls.spawn(async move { try_ask(&mut c, "net", vec![desc(&[("k", "stop")])], 1).await });
    }
    let _ = stop.send(());
    // every call ends, answered or refused (a stream past the GOAWAY);
    // then the server returns
    while let Some(r) = calls.join_next().await {
        if let Ok(r) = r.expect("a caller panicked") {
            assert_eq!(overall(&r), Code::Ok);
        }
    }
    drop(c);
    tokio::time::timeout(Duration::from_secs(30), server)
        .await
        .expect("serve returned within 30 s of the signal")
        .expect("serve panicked");
    // no new connection after it
    assert!(client_or_error(addr).await.is_err());
}
