//! The metrics under attack: values of 50 KB, concurrent scrapes while the
//! service answers, idle and slow clients of the endpoint, and a shutdown
//! with a scrape in flight.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tower_redis_ratelimit::MemoryStore;
use tower_redis_ratelimit_server::config::{Config, LoadOptions};
use tower_redis_ratelimit_server::metrics::{self, MAX_LABEL_BYTES, ServeOptions};
use tower_redis_ratelimit_server::pb::RateLimitRequest;
use tower_redis_ratelimit_server::pb::rate_limit_response::Code;
use tower_redis_ratelimit_server::service::{RlsService, ServiceOptions};

const DETAILED: &str = "domain: d\ndescriptors:\n  - key: user\n    detailed_metric: true\n    rate_limit: {unit: year, requests_per_unit: 5}\n";

fn service() -> RlsService {
    let config =
        Config::from_sources([("t.yaml", DETAILED)], LoadOptions::default()).expect("config");
    RlsService::new(config, MemoryStore::new(), ServiceOptions::default()).expect("service")
}

/// A distinct value of `len` bytes: `i`, then `x`s.
fn value(i: usize, len: usize) -> String {
    let mut v = format!("{i:06}");
    v.push_str(&"x".repeat(len - v.len()));
    v
}

/// Asks `service` once for each of `n` distinct users of `len` bytes.
async fn users(service: &RlsService, n: usize, len: usize) {
    for i in 0..n {
        let req = RateLimitRequest {
            domain: "d".into(),
            descriptors: vec![desc(&[("user", &value(i, len))])],
            hits_addend: 0,
            hits_subtrahend: 0,
        };
        let r = service.should_rate_limit_inner(&req).await.expect("answer");
        assert_eq!(overall(&r), Code::Ok);
    }
}

/// The process's resident set, in KB (for the report; never asserted).
fn rss_kb() -> u64 {
    proc_status_kib("VmRSS")
}

/// The `key` labels of the `total_hits` series of `text`.
fn key_labels(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.starts_with(metrics::TOTAL_HITS))
        .filter_map(|l| l.split_once("key=\"")?.1.split_once("\"}").map(|(k, _)| k))
        .collect()
}

/// Serves `service`'s metrics with `options` on a free loopback port
/// (`listener` if given) until the returned sender is sent to (or dropped).
fn serve_metrics_with(
    service: &RlsService,
    listener: TcpListener,
    options: ServeOptions,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(metrics::serve_with(
        listener,
        service.metrics(),
        options,
        async move {
            let _ = stopped.await;
        },
    ));
    (addr, stop, task)
}

async fn loopback() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").await.expect("bind")
}

/// Reads until the peer closes (or resets) `s`, within `within`: the
/// bytes read, or `None` if it stayed open.
async fn read_to_close(s: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
    let mut got = Vec::new();
    let r = tokio::time::timeout(within, async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    r.ok().map(|()| got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_of_50_kb_keep_the_metrics_bounded() {
    let service = service();
    let before = rss_kb();
    users(&service, 2_000, 50_000).await;
    let after_calls = rss_kb();
    let started = Instant::now();
    let text = service.metrics().render();
    let took = started.elapsed();
    eprintln!(
        "2,000 values of 50 KB: RSS {before} kB before, {after_calls} kB after the calls, {} kB after the render; render {} bytes in {took:?}",
        rss_kb(),
        text.len()
    );
    // every value its own series, under a label of at most 128 bytes
    let labels = key_labels(&text);
    assert_eq!(labels.len(), 2_000);
    let distinct: std::collections::HashSet<&&str> = labels.iter().collect();
    assert_eq!(distinct.len(), 2_000);
    for l in &labels {
        assert_eq!(l.len(), MAX_LABEL_BYTES, "{l}");
        assert!(l.starts_with("user_0"), "{l}");
    }
    // (was 500 MB: five lines of 50 KB labels a value)
    assert!(text.len() < 2_000_000, "{}", text.len());
    assert_eq!(
        sample(
            &text,
            &format!(
                "{}{{domain=\"d\",key=\"{}\"}}",
                metrics::TOTAL_HITS,
                labels[0]
            )
        ),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_keep_answering_during_two_concurrent_scrapes() {
    let service = service();
    // the most the default cap lets in: 10,000 values of 200 bytes
    users(&service, 10_000, 200).await;
    let expected = service.metrics().render().len();
    let (addr, stop, task) =
        serve_metrics_with(&service, loopback().await, ServeOptions::default());
    let mut client = serve(service.clone()).await;
    let scraping = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let caller = tokio::spawn({
        let scraping = scraping.clone();
        async move {
            let (mut calls, mut slowest) = (0u32, Duration::ZERO);
            while scraping.load(std::sync::atomic::Ordering::SeqCst) {
                let started = Instant::now();
                let r = ask(&mut client, "d", vec![peek(&[("user", "someone")])], 0).await;
                assert_eq!(overall(&r), Code::Ok);
                slowest = slowest.max(started.elapsed());
                calls += 1;
            }
            (calls, slowest)
        }
    });
    let started = Instant::now();
    for _ in 0..3 {
        let (a, b) = tokio::join!(scrape(addr), scrape(addr));
        // (the series of `someone` may come between: at most one more key)
        for t in [&a, &b] {
            assert!(
                t.len() >= expected && t.len() < expected + 2_000,
                "{}",
                t.len()
            );
        }
    }
    let scrapes = started.elapsed();
    scraping.store(false, std::sync::atomic::Ordering::SeqCst);
    let (calls, slowest) = caller.await.expect("caller");
    eprintln!(
        "6 scrapes of {expected} bytes, two at a time, in {scrapes:?}: {calls} calls answered meanwhile, the slowest in {slowest:?}"
    );
    assert!(calls > 0);
    // (generous: 2 shared cores; a render on the async workers took the
    // calls' threads for the whole render)
    assert!(slowest < Duration::from_secs(2), "{slowest:?}");
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("shut down")
        .expect("served");
}

#[tokio::test]
async fn an_idle_connection_is_closed_after_the_header_timeout() {
    let service = service();
    let timeout = Duration::from_millis(500);
    let options = ServeOptions::default().header_timeout(timeout);
    let (addr, _stop, _task) = serve_metrics_with(&service, loopback().await, options);
    // nothing sent
    let mut idle = TcpStream::connect(addr).await.expect("connect");
    let started = Instant::now();
    let got = read_to_close(&mut idle, Duration::from_secs(20))
        .await
        .expect("closed");
    assert!(got.is_empty() || String::from_utf8_lossy(&got).contains("408"));
    assert!(started.elapsed() >= timeout - Duration::from_millis(100));
    // half a head, then nothing
    let mut slow = TcpStream::connect(addr).await.expect("connect");
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n")
        .await
        .expect("write");
    read_to_close(&mut slow, Duration::from_secs(20))
        .await
        .expect("closed");
    // a kept-alive connection idle after its answer
    let mut kept = TcpStream::connect(addr).await.expect("connect");
    kept.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .expect("write");
    let got = read_to_close(&mut kept, Duration::from_secs(20))
        .await
        .expect("closed");
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(got.contains(metrics::CONFIG_LOAD_SUCCESS), "{got}");
}

#[tokio::test]
async fn connections_past_the_cap_are_refused_at_once() {
    let service = service();
    let options = ServeOptions::default()
        .max_connections(2)
        .header_timeout(Duration::from_secs(60));
    let (addr, _stop, _task) = serve_metrics_with(&service, loopback().await, options);
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        // (served: answered, and kept alive)
        s.write_all(b"GET /nothing HTTP/1.1\r\nHost: t\r\n\r\n")
            .await
            .expect("write");
        let mut buf = [0u8; 12];
        s.read_exact(&mut buf).await.expect("an answer");
        assert_eq!(&buf, b"HTTP/1.1 404");
        held.push(s);
    }
    // the third: closed well before the minute of the head timeout
    let mut third = TcpStream::connect(addr).await.expect("connect");
    let got = read_to_close(&mut third, Duration::from_secs(20))
        .await
        .expect("refused");
    let got = String::from_utf8_lossy(&got);
    assert!(got.is_empty() || got.starts_with("HTTP/1.1 503"), "{got}");
    // one of the two gone, a scrape is served again
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let _ = s
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .await;
        let got = read_to_close(&mut s, Duration::from_secs(20))
            .await
            .unwrap_or_default();
        if got.starts_with(b"HTTP/1.1 200") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}",
            String::from_utf8_lossy(&got)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_completes_promptly_with_a_scrape_in_flight() {
    let service = service();
    users(&service, 2_000, 200).await;
    // small socket buffers (the accepted socket takes the listener's), so
    // that the answer of about 2 MB cannot be all sent to a client that
    // does not read
    let socket = TcpSocket::new_v4().expect("socket");
    socket.set_send_buffer_size(8_192).expect("sndbuf");
    socket
        .bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .expect("bind");
    let listener = socket.listen(16).expect("listen");
    let grace = Duration::from_millis(500);
    let options = ServeOptions::default()
        .shutdown_grace(grace)
        .header_timeout(Duration::from_secs(60));
    let (addr, stop, task) = serve_metrics_with(&service, listener, options);
    let client = TcpSocket::new_v4().expect("socket");
    client.set_recv_buffer_size(4_096).expect("rcvbuf");
    let mut stuck = client.connect(addr).await.expect("connect");
    stuck
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .expect("write");
    // the answer has begun (then is read no more)
    let mut head = [0u8; 12];
    stuck.read_exact(&mut head).await.expect("an answer");
    assert_eq!(&head, b"HTTP/1.1 200");
    let idle = TcpStream::connect(addr).await.expect("connect");
    let started = Instant::now();
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .expect("shut down within the grace")
        .expect("served");
    let took = started.elapsed();
    eprintln!("shutdown with a scrape in flight: {took:?} (grace {grace:?})");
    assert!(took < grace + Duration::from_secs(3), "{took:?}");
    // the listener is closed, and both connections
    assert!(TcpStream::connect(addr).await.is_err());
    let mut idle = idle;
    read_to_close(&mut idle, Duration::from_secs(5))
        .await
        .expect("idle closed");
    read_to_close(&mut stuck, Duration::from_secs(20))
        .await
        .expect("stuck closed");
}
