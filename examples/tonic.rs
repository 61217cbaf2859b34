//! A rate-limited tonic gRPC server, and a client that runs into the limit.
//! No `protoc` needed: the service is written by hand with a raw-bytes codec.
//!
//!     cargo run --example tonic --features tonic
//!     REDIS_URL=redis://127.0.0.1:6379/ cargo run --example tonic --features tonic
//!
//! It serves `demo.Echo/Echo` on 127.0.0.1:PORT (default 50051), limited to
//! 3 calls per 10 s per client IP, then calls it five times and prints what
//! came back: three echoes, then `ResourceExhausted` with the rate-limit
//! headers as metadata. Pass `serve` to keep serving afterwards.

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use http::{Request, Response};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::server::NamedService;
use tonic::{Code, Status};
use tower_redis_ratelimit::{
    MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter, RedisStore, key,
};

/// Messages are raw bytes.
#[derive(Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// The `demo.Echo` service: one unary method, `Echo`.
#[derive(Clone)]
struct Echo;

impl NamedService for Echo {
    const NAME: &'static str = "demo.Echo";
}

struct EchoMethod;

impl tonic::server::UnaryService<Bytes> for EchoMethod {
    type Response = Bytes;
    type Future = Ready<Result<tonic::Response<Bytes>, Status>>;

    fn call(&mut self, request: tonic::Request<Bytes>) -> Self::Future {
        ready(Ok(tonic::Response::new(request.into_inner())))
    }
}

impl tower::Service<Request<tonic::body::Body>> for Echo {
    type Response = Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<tonic::body::Body>) -> Self::Future {
        Box::pin(async move {
            if request.uri().path() != "/demo.Echo/Echo" {
                return Ok(Status::unimplemented("no such method").into_http());
            }
            let mut grpc = tonic::server::Grpc::new(RawCodec);
            Ok(grpc.unary(EchoMethod, request).await)
        })
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let builder = RateLimiter::builder()
        .prefix("grpc")
        .quota(Quota::fixed_window(Rate::new(3, Duration::from_secs(10))).name("10s"));
    let limiter = match std::env::var("REDIS_URL") {
        Ok(url) => builder
            .store(RedisStore::new(
                deadpool_redis::Config::from_url(url)
                    .create_pool(Some(deadpool_redis::Runtime::Tokio1))?,
            ))
            .build()?,
        Err(_) => builder.store(MemoryStore::new()).build()?,
    };

    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(50051);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            // PeerIp reads tonic's TcpConnectInfo (feature `tonic`).
            .layer(RateLimitLayer::new(limiter, key::PeerIp))
            .add_service(Echo)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    println!("serving demo.Echo on {addr}");

    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let mut client = tonic::client::Grpc::new(channel);
    for i in 1..=5 {
        client.ready().await?;
        let reply = client
            .unary(
                tonic::Request::new(Bytes::from(format!("ping {i}"))),
                http::uri::PathAndQuery::from_static("/demo.Echo/Echo"),
                RawCodec,
            )
            .await;
        match reply {
            Ok(res) => println!(
                "call {i}: {:?} (ratelimit: {:?})",
                res.get_ref(),
                res.metadata().get("ratelimit")
            ),
            Err(status) if status.code() == Code::ResourceExhausted => println!(
                "call {i}: {:?}: {} (retry-after: {:?}, ratelimit: {:?})",
                status.code(),
                status.message(),
                status.metadata().get("retry-after"),
                status.metadata().get("ratelimit")
            ),
            Err(status) => return Err(status.into()),
        }
    }

    if std::env::args().any(|a| a == "serve") {
        println!("still serving on {addr}; Ctrl-C to stop");
        server.await??;
    }
    Ok(())
}
