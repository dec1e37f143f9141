//! tarpc, an unmodified Rust RPC framework, over xfer.
//!
//! The transport is the `xfer-tarpc` crate ([`Transport`], [`Node`],
//! [`wire`], re-exported here); this package adds a service (`Calc`) with a
//! checking client, the `xfer-rpc` program and its benchmark against tarpc
//! over tokio TCP (docs/RPC.md).
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
mod service;

pub use service::{
    check, ctx, pattern, serve, Calc, CalcClient, CalcRequest, CalcResponse, CalcServer, ServerIn, ServerOut, SIZES,
};
pub use xfer_tarpc::{wire, Node, Transport, CONNECT_TIMEOUT, RECV_WINDOW, SENDS_MAX};
