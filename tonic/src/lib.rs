//! [tonic](https://docs.rs/tonic) (gRPC) over xfer: unmodified tonic clients
//! and servers whose HTTP/2 connections run over xfer endpoints, on RDMA
//! verbs, TCP or shared memory, whichever provider xfer opens
//! (`XFER_PROVIDER`, or [`Node::open_with`] a `DomainAttr`).
//!
//! hyper, under tonic, wants a byte stream. [`XferIo`] is one, carried over
//! the connections of [`xfer_tarpc`] (one endpoint per process, a
//! [`Node`], connections told apart by tags, names exchanged with a
//! `HELLO`/`ACCEPT`): small writes are copied straight into the frame
//! being filled, a larger one and what follows it until the flush (up to
//! [`WRITE_MAX`] bytes) becomes one message of its own; the bytes arrive
//! in order and reads copy them straight
//! out of the frames they came in; a shutdown sends a close that reads as
//! end of file on the peer.
//!
//! A client connects with [`channel`] (or hands a [`Connector`] to tonic's
//! `Endpoint::connect_with_connector`); a server hands [`incoming`] to
//! `Server::builder().serve_with_incoming`. A client finds its server by
//! the server's endpoint name ([`Node::name`]; `xfer::Address` is its text
//! form) or, on one host, by a path the server [`publish`]ed it at
//! ([`channel_at`], [`Connector::at`]): over `shm`, whose names have no
//! host or port, that is how a separately started client finds a server.
//! [`echo`] is a small hand-written service (no `protoc`) the examples,
//! tests and benchmark use.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # std::env::set_var("XFER_TCP_ADDR", "127.0.0.1");
//! use xfer_tonic::echo::{EchoClient, EchoRequest, EchoServer};
//!
//! let server = xfer_tonic::Node::open()?;
//! let name = server.name();
//! tokio::spawn(
//!     tonic::transport::Server::builder()
//!         .add_service(EchoServer)
//!         .serve_with_incoming(xfer_tonic::incoming(server)),
//! );
//!
//! let node = xfer_tonic::Node::open()?;
//! let mut client = EchoClient::new(xfer_tonic::channel(node, name).await?);
//! let reply = client.echo(EchoRequest { id: 7, payload: b"xfer".to_vec() }).await?;
//! assert_eq!(reply.into_inner().payload, b"xfer");
//! # Ok(())
//! # }
//! ```
//!
//! The mapping and what it costs against tonic over tokio TCP: the
//! repository's docs/RPC.md.
#![deny(missing_docs)]

mod connect;
pub mod echo;
mod io;
mod publish;

pub use connect::{channel, channel_at, incoming, Connector};
pub use io::{XferIo, WRITE_MAX};
pub use publish::{lookup, publish, Published};
pub use xfer_tarpc::Node;
