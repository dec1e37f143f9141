//! The client's connector and the server's incoming stream.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::{Stream, StreamExt};
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};
use xfer_tarpc::Node;

use crate::io::XferIo;

/// A tower service tonic's `Endpoint::connect_with_connector` takes: each
/// call opens a connection from `node` to the server whose endpoint name
/// it holds (the URI is not looked at; tonic still wants one).
#[derive(Clone)]
pub struct Connector {
    node: Arc<Node>,
    server: Arc<[u8]>,
}

impl Connector {
    /// Connects from `node` to the server whose endpoint name is `server`
    /// ([`Node::name`] on the server).
    pub fn new(node: Arc<Node>, server: impl Into<Vec<u8>>) -> Self {
        Connector {
            node,
            server: server.into().into(),
        }
    }
}

impl tower::Service<Uri> for Connector {
    type Response = TokioIo<XferIo>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TokioIo<XferIo>>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let (node, server) = (self.node.clone(), self.server.clone());
        Box::pin(async move {
            let conn = node.connect(&server).await?;
            Ok(TokioIo::new(XferIo::new(conn)))
        })
    }
}

/// A tonic channel from `node` to the server whose endpoint name is
/// `server`, connected now (tonic reconnects through the same
/// [`Connector`] if the connection fails).
pub async fn channel(node: Arc<Node>, server: impl Into<Vec<u8>>) -> Result<Channel, tonic::transport::Error> {
    // The authority names no host: hyper only puts it in requests' headers.
    Endpoint::from_static("http://xfer")
        .connect_with_connector(Connector::new(node, server))
        .await
}

/// The connections clients open to `node`, for tonic's
/// `Server::builder().serve_with_incoming`. A client whose hello is
/// malformed is logged and skipped; an error of the endpoint itself is an
/// item of the stream.
pub fn incoming(node: Arc<Node>) -> impl Stream<Item = io::Result<XferIo>> + Send + 'static {
    node.incoming().map(|conn| conn.map(XferIo::new))
}
