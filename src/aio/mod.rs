//! Async operations (cargo feature `async`; `tokio` adds the tokio driver).
//!
//! A runtime-agnostic core on the completion queue's descriptor, and one
//! small driver per runtime:
//! - [`Dispatcher`]: owns a [`CompletionQueue`](crate::CompletionQueue) and
//!   routes each completion, by the context the async layer gave its
//!   operation, to the future waiting for it. Whoever polls drives progress;
//!   when there is nothing to do it checks `trywait` and asks its
//!   [`Reactor`] to wake it when the queue's descriptor is readable.
//! - [`Reactor`]: what a runtime provides (readiness of one descriptor and
//!   a periodic tick). [`tokio::TokioReactor`] is tokio's; another runtime
//!   implements the trait in a few lines.
//! - [`AsyncEndpoint`]: `send`, `tsend`, `recv`, `trecv`, `write`, `read` as
//!   futures resolving to a [`BufResult`]: the result and the buffer back.
//! - [`listen`], [`AsyncListener::accept`] / [`AsyncListener::incoming`],
//!   [`connect`] (feature `tokio`): [`crate::listen`] and [`crate::connect`]
//!   as futures, giving an [`AsyncConnection`] to one peer with `send` and
//!   `recv` futures.
//! - [`Dispatcher::next_completion`] / [`Dispatcher::poll_completion`]: the
//!   stream of the queue's other completions (remote writes with data, raw
//!   posts), for users who want raw completions
//!   (`futures::stream::poll_fn(|cx| d.poll_completion(cx))` makes it a
//!   `Stream`).
//!
//! A request and its answer between two endpoints, under tokio (feature
//! `tokio`); the server learns the client's name from the request:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use std::sync::Arc;
//! use xfer::aio::{self, AsyncEndpoint};
//! use xfer::{CqAttr, EndpointAttr, PeerAddr};
//!
//! const REQUEST: u64 = 1;
//! const REPLY: u64 = 2;
//! let domain = xfer::open_default()?;
//! let open = || -> xfer::Result<Arc<AsyncEndpoint>> {
//!     let cq = domain.cq(&CqAttr::from_env())?;
//!     let ep = domain.endpoint(&cq, &domain.av()?, &EndpointAttr::from_env())?;
//!     Ok(Arc::new(AsyncEndpoint::new(ep, aio::tokio::dispatcher(&cq)?)?))
//! };
//! let (server, client) = (open()?, open()?);
//!
//! let serving = tokio::spawn({
//!     let server = Arc::clone(&server);
//!     async move {
//!         let (got, buf) = server.trecv(PeerAddr::UNSPEC, REQUEST, 0, vec![0; 64]).await;
//!         let asker = server.endpoint().av().insert(&buf[..got?.len])?;
//!         server.tsend(asker, REPLY, b"pong".to_vec()).await.0.map(drop)
//!     }
//! });
//!
//! let to_server = client.endpoint().av().insert(server.endpoint().name().as_bytes())?;
//! let me = client.endpoint().name().as_bytes().to_vec();
//! let (answer, request) = tokio::join!(
//!     client.trecv(to_server, REPLY, 0, vec![0; 16]),
//!     client.tsend(to_server, REQUEST, me),
//! );
//! request.0?;
//! let (got, buf) = answer;
//! assert_eq!(&buf[..got?.len], b"pong");
//! serving.await??;
//! # Ok(())
//! # }
//! ```
//!
//! # Cancel safety
//!
//! Dropping a future (or timing it out) never lets the transport touch freed
//! memory. The safe API already moves the buffer into the operation; the
//! transport gives it back only in the operation's completion. A dropped
//! future marks its operation abandoned and the dispatcher frees the buffer
//! when that completion arrives, never earlier:
//!
//! | operation | dropped before its first poll | dropped after posting |
//! |---|---|---|
//! | `recv`, `trecv` | nothing posted; buffer freed | receive cancelled; its `Canceled` completion frees the buffer; later messages go to later receives. If it had matched already, the message is consumed and the buffer freed once the data landed |
//! | `send`, `tsend` | nothing posted | the message is still sent; buffer freed at its completion (or error, or endpoint close) |
//! | `write`, `read` | nothing posted | the RMA still happens; buffer freed at its completion |
//!
//! A future whose completion already arrived but was not taken frees its
//! buffer when dropped. [`Dispatcher::abandoned`] counts operations whose
//! buffers still wait for their completion.
//!
//! # Progress
//!
//! Progress stays manual: data moves while some future on the queue is
//! polled. A side with nothing of its own to await (an RMA target on TCP,
//! which serves accesses in software; a sender whose futures were dropped;
//! a listener waiting for connections) spawns [`Dispatcher::progress`].
//!
//! # Contexts and sharing a queue
//!
//! Operations posted through the async layer carry contexts whose high 16
//! bits are [`CONTEXT_TAG`]; raw operations on endpoints bound to the same
//! queue must not use such contexts. A waiting future is woken when its
//! completion is routed or when the descriptor fires: then the operation
//! whose poll last armed the reactor (the driver) alone is woken, drives,
//! and wakes those whose completions it routed; every waiting future is
//! woken instead when the driver is gone or the previous event went
//! unserved (so a driver whose task stopped polling it costs the others at
//! most one reactor tick, 50 ms). Once a poller has found the queue empty
//! and armed the reactor, other waiting futures do not drive again until
//! the descriptor fires or an operation is posted or cancelled through the
//! async layer.
//!
//! # Spinning
//!
//! [`Dispatcher::set_spin`] (`XFER_AIO_SPIN_US`, default 50 µs, 0 off): for a
//! window after each completion, a future with nothing to do yields to the
//! runtime and polls again instead of parking on the descriptor, which saves
//! the wake-up of a sleeping thread per message (about 3x lower latency for
//! a small RPC here) while keeping a CPU busy during the window. An idle
//! program (no completions) does not spin; spinning that does not pay (the
//! window runs out, or the process is preempted while it spins, as when it
//! shares a CPU with its peer) backs off for 20 ms. A raw post on an endpoint bound to the same
//! queue may complete operations inside the call (the provider progresses
//! there) without the descriptor firing: call [`Dispatcher::drive`] after it
//! (`next_completion` drives too), or those futures wait for the next
//! descriptor event or reactor tick.
//!
//! # Threading
//!
//! Handles are `Send + Sync`; futures borrow their [`AsyncEndpoint`], which
//! tasks share through an `Arc`. Progress happens in whichever task polls.

#[cfg(feature = "tokio")]
mod connection;
mod dispatch;
mod endpoint;
mod op;
mod reactor;
mod recv;
mod spin;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod tokio;

#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use connection::{connect, listen, AsyncConnection, AsyncListener, Incoming, HANDSHAKES_MAX};
pub use dispatch::{Dispatcher, CONTEXT_TAG, DEFAULT_SPIN};
pub use endpoint::{AsyncEndpoint, BufResult, Received};
pub use reactor::Reactor;
pub use recv::Recv;
