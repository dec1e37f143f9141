//! tarpc, an unmodified Rust RPC framework, over xfer.
//!
//! tarpc takes any `Stream + Sink` of its messages as a transport.
//! [`Transport`] is one on [`xfer::aio::AsyncEndpoint`] tagged messages,
//! with bincode as the codec (the one tarpc's TCP transport uses), so a
//! tarpc service runs over TCP or RDMA verbs, whichever provider xfer opens.
//! [`Node`] is a process's endpoint: `connect` on a client, `incoming` on a
//! server, many connections on one endpoint told apart by tags
//! ([`wire`]; docs/RPC.md).
//!
//! ```no_run
//! # async fn demo(server_name: &[u8]) -> std::io::Result<()> {
//! use xfer_rpc::{CalcClient, Node};
//! let node = Node::open()?;
//! let client = CalcClient::new(Default::default(), node.connect(server_name).await?).spawn();
//! assert_eq!(client.add(xfer_rpc::ctx(), 2, 3).await.map_err(std::io::Error::other)?, 5);
//! # Ok(())
//! # }
//! ```

pub mod bench;
mod node;
mod service;
mod transport;
pub mod wire;

pub use node::{Node, CONNECT_TIMEOUT};
pub use service::{
    check, ctx, pattern, serve, Calc, CalcClient, CalcRequest, CalcResponse, CalcServer, ServerIn, ServerOut, SIZES,
};
pub use transport::{Transport, RECV_WINDOW, SENDS_MAX};
