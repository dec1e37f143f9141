//! [`xfer::listen`](crate::listen) / [`xfer::connect`](crate::connect) for
//! tokio: [`listen`] and [`AsyncListener::accept`] (or its
//! [`incoming`](AsyncListener::incoming) stream), [`connect`] to
//! `host:port`; each side gets an [`AsyncConnection`] whose `send` and
//! `recv` are futures. Nothing blocks the executor: the name exchange runs
//! on tokio's sockets, the hello and the messages on the connection's
//! [`AsyncEndpoint`]. The wire is the blocking connections' (the same
//! exchange and hello), so an async client reaches a blocking listener and
//! the other way round.
//!
//! A listener runs the exchanges of several clients at once (up to
//! [`HANDSHAKES_MAX`]; more wait in the socket's backlog), so a client that
//! connects and says nothing delays no one; it fails after the connect
//! timeout (`XFER_TCP_CONNECT_TIMEOUT_MS`).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};

use super::{AsyncEndpoint, BufResult};
use crate::connection::{exchange_timeout, name_len, name_message, Opened, HEAD, HELLO_TAG};
use crate::{Address, Domain, EndpointAttr, Error, PeerAddr, PeerEventKind, Result};

/// Name exchanges a listener runs at once; further clients wait in the
/// listening socket's backlog until one ends.
pub const HANDSHAKES_MAX: usize = 64;

/// Opens an [`AsyncListener`] on `addr` with attributes from the
/// environment; within a tokio runtime. An echo server and its client on
/// one thread:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> xfer::Result<()> {
/// let listener = xfer::aio::listen("127.0.0.1:0").await?;
/// let addr = listener.local_addr()?;
/// let server = tokio::spawn(async move {
///     let conn = listener.accept().await?;
///     let (got, buf) = conn.recv(vec![0; 64]).await;
///     let len = got?;
///     conn.send(buf[..len].to_vec()).await.0?; // echo
///     xfer::Result::Ok(())
/// });
/// let conn = xfer::aio::connect(addr).await?;
/// conn.send(b"hello".to_vec()).await.0?;
/// let (got, buf) = conn.recv(vec![0; 64]).await;
/// assert_eq!(&buf[..got?], b"hello");
/// server.await.expect("server task")?;
/// # Ok(())
/// # }
/// ```
pub async fn listen(addr: impl ToSocketAddrs) -> Result<AsyncListener> {
    AsyncListener::bind(addr, &EndpointAttr::from_env()).await
}

/// Connects to the listener at `addr` (`"host:port"` or a socket address;
/// an [`AsyncListener`] or a blocking [`crate::Listener`]) with attributes
/// from the environment; within a tokio runtime.
pub async fn connect(addr: impl ToSocketAddrs) -> Result<AsyncConnection> {
    AsyncConnection::connect(addr, &EndpointAttr::from_env()).await
}

/// A client's exchange in progress on the listener's side.
type Handshake = Pin<Box<dyn Future<Output = Result<AsyncConnection>> + Send>>;

/// Where clients connect, for tokio: a listening socket for the name
/// exchange and the domain the accepted connections' endpoints are opened
/// in. One task should accept at a time (as with tokio's
/// `TcpListener::poll_accept`): the listening socket wakes only the last
/// task that polled it.
pub struct AsyncListener {
    socket: TcpListener,
    domain: Domain,
    attr: EndpointAttr,
    /// Exchanges in progress, at most [`HANDSHAKES_MAX`].
    handshakes: Mutex<Vec<Handshake>>,
}

impl AsyncListener {
    /// Listens on `addr`; accepted connections get endpoints with `attr`.
    pub async fn bind(addr: impl ToSocketAddrs, attr: &EndpointAttr) -> Result<AsyncListener> {
        let socket = TcpListener::bind(addr).await?;
        Ok(AsyncListener {
            socket,
            domain: crate::open_default()?,
            attr: attr.clone(),
            handshakes: Mutex::new(Vec::new()),
        })
    }

    /// The address the listening socket is bound to (its port when `:0`
    /// was asked for).
    pub fn local_addr(&self) -> Result<SocketAddr> {
        Ok(self.socket.local_addr()?)
    }

    /// The domain accepted connections' endpoints are opened in.
    pub fn domain(&self) -> &Domain {
        &self.domain
    }

    /// The next client whose exchange finished. A client whose exchange
    /// failed (bad bytes, a name this provider cannot use, silence past
    /// the timeout) is an error of this call only: call again. Cancel-safe:
    /// dropped, it loses no client (exchanges in progress stay with the
    /// listener).
    pub async fn accept(&self) -> Result<AsyncConnection> {
        std::future::poll_fn(|cx| self.poll_accept(cx)).await
    }

    /// [`accept`](Self::accept) as a poll: takes new clients off the
    /// listening socket (up to [`HANDSHAKES_MAX`] exchanges at once) and
    /// drives their exchanges; `Ready` with the first that finished.
    pub fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<Result<AsyncConnection>> {
        let mut handshakes = match self.handshakes.lock() {
            Ok(h) => h,
            Err(_) => return Poll::Ready(Err(Error::Internal("listener lock poisoned by an earlier panic"))),
        };
        while handshakes.len() < HANDSHAKES_MAX {
            match self.socket.poll_accept(cx) {
                Poll::Ready(Ok((stream, from))) => {
                    handshakes.push(Box::pin(serve(stream, from, self.domain.clone(), self.attr.clone())));
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
                Poll::Pending => break,
            }
        }
        let mut i = 0;
        while i < handshakes.len() {
            match handshakes[i].as_mut().poll(cx) {
                Poll::Ready(done) => {
                    drop(handshakes.swap_remove(i));
                    return Poll::Ready(done);
                }
                Poll::Pending => i += 1,
            }
        }
        Poll::Pending
    }

    /// The accepted connections as a stream (`futures::Stream`), for
    /// servers that take a stream of connections (tonic's
    /// `serve_with_incoming`, `StreamExt::for_each`); never ends. Failed
    /// exchanges are error items; the stream goes on after them.
    pub fn incoming(self) -> Incoming {
        Incoming(self)
    }
}

/// [`AsyncListener::incoming`]: the listener's connections as a stream.
pub struct Incoming(AsyncListener);

impl Incoming {
    /// The listener.
    pub fn listener(&self) -> &AsyncListener {
        &self.0
    }
}

impl futures_core::Stream for Incoming {
    type Item = Result<AsyncConnection>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_accept(cx).map(Some)
    }
}

/// The listener's side of one client's exchange: its name, ours (of an
/// endpoint opened for it), then its hello over xfer, all within the
/// connect timeout.
async fn serve(mut stream: TcpStream, from: SocketAddr, domain: Domain, attr: EndpointAttr) -> Result<AsyncConnection> {
    let exchange = async {
        let ep = AsyncConnection::open(&domain, &attr)?;
        let name = read_name(&mut stream).await?;
        let peer = ep.endpoint().av().insert(name.as_bytes())?;
        stream.write_all(&name_message(&ep.endpoint().name())).await?;
        drop(stream);
        ep.trecv(peer, HELLO_TAG, 0, Vec::new()).await.0?;
        Result::Ok(AsyncConnection::new(ep, domain.clone(), peer, name))
    };
    let done = match tokio::time::timeout(exchange_timeout(&attr), exchange).await {
        Ok(done) => done,
        Err(_) => Err(Error::TimedOut),
    };
    done.inspect_err(|e| {
        crate::warn_limited!(client = %from, error = %e, "connection: the client's name exchange failed");
    })
}

async fn read_name(stream: &mut TcpStream) -> Result<Address> {
    let mut head = [0u8; HEAD];
    stream.read_exact(&mut head).await?;
    let len = name_len(&head)?;
    let mut name = [0u8; Address::MAX_LEN];
    stream.read_exact(&mut name[..len]).await?;
    Address::new(&name[..len])
}

/// One peer, over an endpoint of its own, for tokio: [`send`](Self::send)
/// and [`recv`](Self::recv) of whole messages as futures (cancel-safe, as
/// every [`AsyncEndpoint`] operation). They take `&self`, so one task can
/// send and receive at once (`tokio::join!`), and tasks can share the
/// connection in an `Arc`. Dropping it closes the endpoint; the peer's
/// receives then end with [`Error::PeerClosed`].
pub struct AsyncConnection {
    ep: AsyncEndpoint,
    _domain: Domain,
    peer: PeerAddr,
    peer_name: Address,
    /// How the peer left (`PeerClosed`, or the failure), once it did.
    gone: Mutex<Option<Error>>,
}

impl AsyncConnection {
    /// Connects to the listener at `addr` with an endpoint opened with
    /// `attr` in a domain of its own. Each address `addr` resolves to is
    /// tried in turn until one accepts the TCP connection; the exchange
    /// with it must then finish within the connect timeout.
    pub async fn connect(addr: impl ToSocketAddrs, attr: &EndpointAttr) -> Result<AsyncConnection> {
        let domain = crate::open_default()?;
        let ep = AsyncConnection::open(&domain, attr)?;
        let timeout = exchange_timeout(attr);
        let mut last = Error::AddressNotAvailable;
        for to in tokio::net::lookup_host(addr).await? {
            let mut stream = match tokio::time::timeout(timeout, TcpStream::connect(to)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    last = e.into();
                    continue;
                }
                Err(_) => {
                    last = Error::TimedOut;
                    continue;
                }
            };
            let exchange = async {
                stream.write_all(&name_message(&ep.endpoint().name())).await?;
                let name = read_name(&mut stream).await?;
                let peer = ep.endpoint().av().insert(name.as_bytes())?;
                ep.tsend(peer, HELLO_TAG, Vec::new()).await.0?;
                Result::Ok((peer, name))
            };
            let (peer, name) = match tokio::time::timeout(timeout, exchange).await {
                Ok(done) => done?,
                Err(_) => return Err(Error::TimedOut),
            };
            return Ok(AsyncConnection::new(ep, domain, peer, name));
        }
        Err(last)
    }

    /// A connection's endpoint (peer events on) with its dispatcher.
    fn open(domain: &Domain, attr: &EndpointAttr) -> Result<AsyncEndpoint> {
        let open = Opened::new(domain, attr)?;
        AsyncEndpoint::new(open.ep, super::tokio::dispatcher(&open.cq)?)
    }

    fn new(ep: AsyncEndpoint, domain: Domain, peer: PeerAddr, peer_name: Address) -> AsyncConnection {
        AsyncConnection {
            ep,
            _domain: domain,
            peer,
            peer_name,
            gone: Mutex::new(None),
        }
    }

    /// Sends `buf` as one message; resolves once it is sent, to its length
    /// and the buffer. Fails at once with how the peer left, once it has.
    pub async fn send(&self, buf: Vec<u8>) -> BufResult<usize> {
        match self.gone() {
            Ok(None) => self.ep.send(self.peer, buf).await,
            Ok(Some(gone)) => (Err(gone), buf),
            Err(e) => (Err(e), buf),
        }
    }

    /// Receives the peer's next message into `buf`: its length and the
    /// buffer. A longer message fails with [`Error::Truncated`]. Once the
    /// peer has left, the messages it sent before are still delivered,
    /// then this fails with how it left ([`Error::PeerClosed`] for a
    /// close), as does a receive waiting when it leaves.
    pub async fn recv(&self, buf: Vec<u8>) -> BufResult<usize> {
        let (got, buf) = match self.gone() {
            Ok(None) => self.ep.recv(self.peer, buf).await,
            // A receive directed at a peer without a connection would wait
            // for it to come back: take only what is already here.
            Ok(Some(gone)) => match self.ep.recv_ready(self.peer, buf).await {
                (Err(Error::Canceled), buf) => (Err(gone), buf),
                other => other,
            },
            Err(e) => return (Err(e), buf),
        };
        (got.map(|r| r.len), buf)
    }

    /// Reads the endpoint's peer events: how the peer left, if it did.
    fn gone(&self) -> Result<Option<Error>> {
        let mut gone = self
            .gone
            .lock()
            .map_err(|_| Error::Internal("connection lock poisoned by an earlier panic"))?;
        let ep = self.ep.endpoint();
        let mut read = false;
        while let Some(ev) = ep.peer_event()? {
            read = true;
            if ev.peer != self.peer {
                continue;
            }
            match ev.kind {
                PeerEventKind::Closed => *gone = Some(Error::PeerClosed { peer: self.peer }),
                PeerEventKind::Failed(e) => *gone = Some(e),
                _ => {}
            }
        }
        // Reading events progresses the endpoint, which may queue
        // completions without the descriptor firing. An operation posted
        // next takes them at its first poll; when the peer left, none may
        // be: route them now rather than at the next event.
        if read || gone.is_some() {
            self.ep.dispatcher().drive()?;
        }
        Ok(gone.clone())
    }

    /// The peer's handle in the endpoint's address vector.
    pub fn peer(&self) -> PeerAddr {
        self.peer
    }

    /// The peer's endpoint name.
    pub fn peer_name(&self) -> Address {
        self.peer_name
    }

    /// The async endpoint, for what `send`/`recv` do not offer (tags, RMA).
    /// Connections' own messages are untagged.
    pub fn endpoint(&self) -> &AsyncEndpoint {
        &self.ep
    }
}

// Listeners and connections are shared between tasks.
const _: fn() = || {
    fn shareable<T: Send + Sync>() {}
    shareable::<AsyncListener>();
    shareable::<AsyncConnection>();
    shareable::<Arc<AsyncConnection>>();
};
