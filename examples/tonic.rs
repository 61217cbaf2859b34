//! A rate-limited tonic gRPC server, and a client that runs into the limit.
//! No `protoc` needed: the service is written by hand with a raw-bytes codec.
//!
//!     cargo run -p tower-redis-ratelimit-tests --example tonic --features tonic
//!     REDIS_URL=redis://127.0.0.1:6379/ cargo run -p tower-redis-ratelimit-tests --example tonic --features tonic
//!
//! It serves `demo.Echo/Echo` on 127.0.0.1:PORT (default 50051), limited to
//! 3 calls per 10 s per client IP, then calls it five times and prints what
//! came back: three echoes, then `ResourceExhausted` with the rate-limit
//! headers as metadata. Pass `serve` to keep serving afterwards.
//!
//! Crates it needs besides this one (feature `tonic`): `tokio` (features
//! `macros`, `rt-multi-thread`, `net`), `tonic` (its default features:
//! `transport`), `http`, `bytes`, and `tower` for the hand-written service
//! in `examples/support/grpc_echo.rs` (a generated one needs none of it).

use std::time::Duration;

use bytes::Bytes;
use tonic::Code;
#[path = "support/grpc_echo.rs"]
mod grpc_echo;

use grpc_echo::{Echo, RawCodec};
use tower_redis_ratelimit::{
    MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter, RedisStore, key,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let builder = RateLimiter::builder()
        .prefix("grpc")
        .quota(Quota::fixed_window(Rate::new(3, Duration::from_secs(10))).name("10s"));
    let limiter = match std::env::var("REDIS_URL") {
        Ok(url) => builder.store(RedisStore::from_url(&url)?).build()?,
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
