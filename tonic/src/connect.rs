//! The client's connector and the server's incoming stream.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::{Stream, StreamExt};
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};
use xfer_tarpc::Node;

use crate::io::XferIo;

/// Where a [`Connector`] finds its server.
#[derive(Clone)]
enum Target {
    /// The server's endpoint name.
    Name(Arc<[u8]>),
    /// A file the server [`publish`](crate::publish)ed its name at, read
    /// at each connect.
    Path(Arc<Path>),
}

/// A tower service tonic's `Endpoint::connect_with_connector` takes: each
/// call opens a connection from `node` to the server, named or found at a
/// published path (the URI is not looked at; tonic still wants one).
#[derive(Clone)]
pub struct Connector {
    node: Arc<Node>,
    target: Target,
}

impl Connector {
    /// Connects from `node` to the server whose endpoint name is `server`
    /// ([`Node::name`] on the server).
    pub fn new(node: Arc<Node>, server: impl Into<Vec<u8>>) -> Self {
        Connector {
            node,
            target: Target::Name(server.into().into()),
        }
    }

    /// Connects from `node` to the server that [`publish`](crate::publish)ed
    /// its name at `path`. The file is read at each connect, so when tonic
    /// reconnects it reaches a server restarted there (over `shm` a new
    /// process has a new name).
    pub fn at(node: Arc<Node>, path: impl Into<PathBuf>) -> Self {
        Connector {
            node,
            target: Target::Path(path.into().into()),
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
        let (node, target) = (self.node.clone(), self.target.clone());
        Box::pin(async move {
            let conn = match target {
                Target::Name(server) => node.connect_raw(&server).await?,
                Target::Path(path) => node.connect_raw(&crate::lookup(&path)?).await?,
            };
            Ok(TokioIo::new(XferIo::new(conn)))
        })
    }
}

/// A tonic channel from `node` to the server whose endpoint name is
/// `server`, connected now (tonic reconnects through the same
/// [`Connector`] if the connection fails).
pub async fn channel(node: Arc<Node>, server: impl Into<Vec<u8>>) -> Result<Channel, tonic::transport::Error> {
    connect(Connector::new(node, server)).await
}

/// A tonic channel from `node` to the server that
/// [`publish`](crate::publish)ed its name at `path`, connected now; tonic
/// reconnects through [`Connector::at`], which reads the file again.
pub async fn channel_at(node: Arc<Node>, path: impl Into<PathBuf>) -> Result<Channel, tonic::transport::Error> {
    connect(Connector::at(node, path)).await
}

async fn connect(connector: Connector) -> Result<Channel, tonic::transport::Error> {
    // The authority names no host: hyper only puts it in requests' headers.
    Endpoint::from_static("http://xfer")
        .connect_with_connector(connector)
        .await
}

/// The connections clients open to `node`, for tonic's
/// `Server::builder().serve_with_incoming`. A client whose hello is
/// malformed is logged and skipped; an error of the endpoint itself is an
/// item of the stream.
pub fn incoming(node: Arc<Node>) -> impl Stream<Item = io::Result<XferIo>> + Send + 'static {
    node.incoming_raw().map(|conn| conn.map(XferIo::new))
}
