//! The middleware on real sockets: serving an axum app on a free loopback
//! port, one HTTP/1.1 request per fresh connection, a streaming body the test
//! feeds, and scenarios every store must pass alike.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tower_redis_ratelimit::key::PeerIp;
use tower_redis_ratelimit::{RateLimitLayer, RateLimiter};

/// Serves `app` on a free loopback port, with connect info.
pub(crate) async fn serve(app: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    addr
}

/// One HTTP/1.1 request on a fresh connection.
pub(crate) async fn fetch(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &[u8])],
) -> Response<Incoming> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = Request::get(path).header("host", addr.to_string());
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    sender
        .send_request(req.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap()
}

/// The status of one `GET path`, its body read to the end.
pub(crate) async fn status(addr: SocketAddr, path: &str) -> StatusCode {
    let res = fetch(addr, path, &[]).await;
    let status = res.status();
    res.into_body().collect().await.unwrap();
    status
}

/// A streaming body fed by the test.
pub(crate) struct Stream(pub(crate) mpsc::Receiver<Bytes>);

impl http_body::Body for Stream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|b| b.map(|b| Ok(http_body::Frame::data(b))))
    }
}

/// `limiter` has one concurrency quota of 1 lease and a clock that does not
/// reach its lease timeout: a streaming response holds the lease, a second
/// request is denied, and the client hanging up mid-stream releases it.
pub(crate) async fn a_client_disconnect_mid_stream_releases_the_lease(limiter: RateLimiter) {
    let senders: Arc<Mutex<Vec<mpsc::Sender<Bytes>>>> = Arc::default();
    let s = senders.clone();
    let app = Router::new()
        .route(
            "/stream",
            get(move || {
                let (tx, rx) = mpsc::channel(1);
                s.lock().unwrap().push(tx);
                async move { Response::new(Body::new(Stream(rx))) }
            }),
        )
        .layer(RateLimitLayer::new(limiter.clone(), PeerIp));
    let addr = serve(app).await;

    let res = fetch(addr, "/stream", &[]).await;
    assert_eq!(res.status(), StatusCode::OK);
    let tx = senders.lock().unwrap()[0].clone();
    tx.send(Bytes::from_static(b"chunk")).await.unwrap();
    let mut body = res.into_body();
    assert_eq!(
        body.frame().await.unwrap().unwrap().into_data().unwrap(),
        "chunk"
    );
    assert_eq!(status(addr, "/stream").await, StatusCode::TOO_MANY_REQUESTS);

    // The client hangs up mid-stream; the server finds out on its next write.
    drop(body);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if limiter.peek("ip:127.0.0.1").await.unwrap().remaining() == 1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "lease never released"
        );
        // Each chunk makes the server write to the closed socket, until it gives up.
        let _ = tx.try_send(Bytes::from_static(b"more"));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(tx.is_closed(), "the server dropped the body");
}
