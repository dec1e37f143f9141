//! A small gRPC service, `xfer.Echo`, written by hand the way tonic's code
//! generator would write it (so nothing needs `protoc`): `Echo`, a unary
//! call whose reply carries the request's id and payload back, and
//! `EchoStream`, a bidirectional stream answering each request with its
//! echo as it arrives.

use std::convert::Infallible;
use std::task::{Context, Poll};

use futures::StreamExt;
use tonic::codegen::{http, Body, BoxFuture, BoxStream, Service, StdError};
use tonic::{Request, Response, Status, Streaming};
use tonic_prost::ProstCodec;

/// The unary method's path.
pub const ECHO_PATH: &str = "/xfer.Echo/Echo";

/// The streaming method's path.
pub const ECHO_STREAM_PATH: &str = "/xfer.Echo/EchoStream";

/// An echo request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EchoRequest {
    /// The caller's id of the call, sent back.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Bytes sent back.
    #[prost(bytes = "vec", tag = "2")]
    pub payload: Vec<u8>,
}

/// An echo reply: the request's id and payload.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EchoReply {
    /// The request's id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The request's payload.
    #[prost(bytes = "vec", tag = "2")]
    pub payload: Vec<u8>,
}

/// A client of the echo service over any tonic transport (a
/// [`tonic::transport::Channel`]: over xfer from [`crate::channel`], or over TCP).
#[derive(Clone)]
pub struct EchoClient<T> {
    inner: tonic::client::Grpc<T>,
}

impl<T> EchoClient<T>
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<StdError>,
    T::ResponseBody: Body<Data = tonic::codegen::Bytes> + Send + 'static,
    <T::ResponseBody as Body>::Error: Into<StdError> + Send,
{
    /// A client calling over `inner`.
    pub fn new(inner: T) -> Self {
        EchoClient {
            inner: tonic::client::Grpc::new(inner),
        }
    }

    /// Calls `Echo`.
    pub async fn echo(&mut self, request: EchoRequest) -> Result<Response<EchoReply>, Status> {
        self.inner
            .ready()
            .await
            .map_err(|e| Status::unavailable(format!("service not ready: {}", e.into())))?;
        let path = http::uri::PathAndQuery::from_static(ECHO_PATH);
        self.inner
            .unary(Request::new(request), path, ProstCodec::default())
            .await
    }

    /// Calls `EchoStream`: sends `requests` as they come and returns the
    /// stream of replies, one per request, in order.
    pub async fn echo_stream(
        &mut self,
        requests: impl futures::Stream<Item = EchoRequest> + Send + 'static,
    ) -> Result<Response<Streaming<EchoReply>>, Status> {
        self.inner
            .ready()
            .await
            .map_err(|e| Status::unavailable(format!("service not ready: {}", e.into())))?;
        let path = http::uri::PathAndQuery::from_static(ECHO_STREAM_PATH);
        self.inner
            .streaming(Request::new(requests), path, ProstCodec::default())
            .await
    }
}

/// The echo service, for `Server::builder().add_service`.
#[derive(Clone, Copy, Debug, Default)]
pub struct EchoServer;

impl tonic::server::NamedService for EchoServer {
    const NAME: &'static str = "xfer.Echo";
}

/// The `Echo` method as tonic's unary handler wants it.
struct Echo;

impl tonic::server::UnaryService<EchoRequest> for Echo {
    type Response = EchoReply;
    type Future = BoxFuture<Response<EchoReply>, Status>;

    fn call(&mut self, request: Request<EchoRequest>) -> Self::Future {
        let EchoRequest { id, payload } = request.into_inner();
        Box::pin(async move { Ok(Response::new(EchoReply { id, payload })) })
    }
}

/// The `EchoStream` method as tonic's streaming handler wants it.
struct EchoStream;

impl tonic::server::StreamingService<EchoRequest> for EchoStream {
    type Response = EchoReply;
    type ResponseStream = BoxStream<EchoReply>;
    type Future = BoxFuture<Response<BoxStream<EchoReply>>, Status>;

    fn call(&mut self, request: Request<Streaming<EchoRequest>>) -> Self::Future {
        let replies = request
            .into_inner()
            .map(|r| r.map(|EchoRequest { id, payload }| EchoReply { id, payload }));
        Box::pin(async move { Ok(Response::new(Box::pin(replies) as BoxStream<EchoReply>)) })
    }
}

impl<B> Service<http::Request<B>> for EchoServer
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        match request.uri().path() {
            ECHO_PATH => Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(ProstCodec::default());
                Ok(grpc.unary(Echo, request).await)
            }),
            ECHO_STREAM_PATH => Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(ProstCodec::default());
                Ok(grpc.streaming(EchoStream, request).await)
            }),
            _ => Box::pin(async move { Ok(Status::unimplemented("no such method").into_http()) }),
        }
    }
}
