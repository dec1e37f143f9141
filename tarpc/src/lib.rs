//! A [tarpc](https://docs.rs/tarpc) transport over xfer: unmodified tarpc
//! services over RDMA verbs or TCP, whichever provider xfer opens
//! (`XFER_PROVIDER`).
//!
//! tarpc takes any `Stream<Item = io::Result<In>> + Sink<Out, Error =
//! io::Error>` as a transport. [`Transport`] is one on
//! [`xfer::aio::AsyncEndpoint`] tagged messages, with bincode 1 as the codec
//! (the one tarpc's own TCP transport uses; [`Raw`], for byte strings sent
//! as they are, is what xfer-tonic's byte stream uses). A [`Node`] is a process's
//! endpoint: [`Node::connect`] on a client (with the server's endpoint
//! name), [`Node::incoming`] on a server; many connections share one
//! endpoint, told apart by tags ([`wire`]). Call within a tokio runtime.
//!
//! ```
//! use futures::{future, StreamExt};
//! use tarpc::server::{BaseChannel, Channel};
//!
//! #[tarpc::service]
//! trait Hello {
//!     async fn hello(name: String) -> String;
//! }
//!
//! #[derive(Clone)]
//! struct Server;
//!
//! impl Hello for Server {
//!     async fn hello(self, _: tarpc::context::Context, name: String) -> String {
//!         format!("hello, {name}")
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! # std::env::set_var("XFER_TCP_ADDR", "127.0.0.1");
//! let server = xfer_tarpc::Node::open()?;
//! let name = server.name();
//! // Serve every connection: tarpc's own server, over xfer.
//! tokio::spawn(server.incoming().for_each(|conn| async move {
//!     if let Ok(conn) = conn {
//!         let channel = BaseChannel::with_defaults(conn);
//!         tokio::spawn(channel.execute(Server.serve()).for_each(|r| async move {
//!             tokio::spawn(r);
//!         }));
//!     }
//!     future::ready(()).await
//! }));
//!
//! let client_node = xfer_tarpc::Node::open()?;
//! let transport = client_node.connect(&name).await?;
//! let client = HelloClient::new(Default::default(), transport).spawn();
//! let answer = client.hello(tarpc::context::current(), "xfer".into()).await.map_err(std::io::Error::other)?;
//! assert_eq!(answer, "hello, xfer");
//! # Ok(())
//! # }
//! ```
//!
//! How tarpc's messages map onto xfer's (connection ids in tags, frames,
//! large messages, close) and what it costs against tarpc over tokio TCP:
//! the repository's docs/RPC.md.
#![deny(missing_docs)]

mod codec;
mod node;
mod transport;
pub mod wire;

pub use codec::{Bincode, Decode, Encode, Raw};
pub use node::{Node, CONNECT_TIMEOUT};
pub use transport::{Transport, BODIES_AHEAD, INJECT_MIN, RECV_WINDOW, SENDS_MAX};
