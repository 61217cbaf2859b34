//! A gRPC echo service written by hand, with no `protoc`: messages are raw
//! bytes. Shared by `examples/tonic.rs` and `tests/middleware/middleware_net.rs`
//! (included with `#[path]`; not an example of its own).

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes};
use http::{Request, Response};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::server::NamedService;

/// Messages are raw bytes.
#[derive(Clone, Copy, Default)]
pub(crate) struct RawCodec;

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
pub(crate) struct Echo;

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
