//! Connections for programs that think in `host:port`: [`listen`] on an
//! address and [`Listener::accept`], or [`connect`] to `host:port`; each
//! side gets a [`Connection`] that owns an endpoint of its own and sends
//! and receives messages to and from that one peer, blocking.
//!
//! ```
//! # fn main() -> xfer::Result<()> {
//! let listener = xfer::listen("127.0.0.1:0")?;
//! let addr = listener.local_addr()?;
//! let server = std::thread::spawn(move || -> xfer::Result<()> {
//!     let mut conn = listener.accept()?;
//!     let (buf, len) = conn.recv(vec![0; 64])?;
//!     conn.send(buf[..len].to_vec())?; // echo
//!     Ok(())
//! });
//! let mut conn = xfer::connect(addr)?;
//! conn.send(b"hello".to_vec())?;
//! let (buf, len) = conn.recv(vec![0; 64])?;
//! assert_eq!(&buf[..len], b"hello");
//! server.join().unwrap()?;
//! # Ok(())
//! # }
//! ```
//!
//! The address given is where endpoint names are exchanged, over a plain
//! TCP socket, once per connection (as UCX's examples and MPI launchers
//! exchange worker addresses out of band): the client sends its endpoint's
//! name, the listener answers with the name of a new endpoint opened for
//! this connection, and both insert what they got into their address
//! vectors. The data then moves over that endpoint on whichever provider
//! was opened (verbs or TCP; `XFER_PROVIDER` decides), not over the socket,
//! which is closed. Messages keep their boundaries; a peer that closes its
//! connection ends the other side's pending and later receives with
//! [`Error::PeerClosed`], its end of file.
//!
//! The client then sends an empty tagged hello over the endpoint, which
//! `accept` waits for, so both sides have a connection up before either
//! returns; a connection watches its peer through the endpoint's peer
//! events ([`Endpoint::peer_event`], turned on for it), so a peer that
//! closes, even before any message, ends the receives posted afterwards
//! too (messages it sent before closing are still delivered first).
//!
//! The exchange (`XFNM`, version 1, the name's length as one byte, the
//! name) and the hello must finish within the endpoint's connect timeout
//! (`XFER_TCP_CONNECT_TIMEOUT_MS`, default 10 s); a client that sends
//! anything else, or nothing, gets no endpoint and the listener's next
//! `accept` is unaffected.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use xfer_core::{
    Address, AddressVector, Completion, CompletionQueue, CqAttr, Domain, Endpoint, EndpointAttr, Error, PeerAddr,
    PeerEventKind, Result,
};

/// The first bytes of a name exchange, and its version.
const MAGIC: &[u8; 4] = b"XFNM";
const VERSION: u8 = 1;
/// The tag of the empty message a client sends once names are exchanged,
/// which `accept` waits for: both sides then have a connection up, so a
/// close on either side is seen by the other (a peer event), even before
/// any data moved. Connections' own messages are untagged: no clash.
pub(crate) const HELLO_TAG: u64 = u64::from_be_bytes(*b"XFNMHELO");
/// Peer events a connection's endpoint queues at least: it watches its
/// one peer's close through them.
const EVENTS: usize = 8;

/// Opens a [`Listener`] on `addr` with attributes from the environment.
pub fn listen(addr: impl ToSocketAddrs) -> Result<Listener> {
    Listener::bind(addr, &EndpointAttr::from_env())
}

/// Connects to the [`Listener`] at `addr` (`"host:port"` or a socket
/// address) with attributes from the environment.
pub fn connect(addr: impl ToSocketAddrs) -> Result<Connection> {
    Connection::connect(addr, &EndpointAttr::from_env())
}

/// Where clients [`connect`]: a TCP listening socket for the name exchange
/// and the domain the accepted connections' endpoints are opened in.
pub struct Listener {
    socket: TcpListener,
    domain: Domain,
    attr: EndpointAttr,
}

impl Listener {
    /// Listens on `addr`; accepted connections get endpoints with `attr`.
    pub fn bind(addr: impl ToSocketAddrs, attr: &EndpointAttr) -> Result<Listener> {
        let socket = TcpListener::bind(addr)?;
        Ok(Listener {
            socket,
            domain: crate::open_default()?,
            attr: attr.clone(),
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

    /// Waits for the next client and returns its connection. A client whose
    /// exchange fails (bad bytes, a name this provider cannot use, silence
    /// past the timeout) is an error for this call only: call again.
    pub fn accept(&self) -> Result<Connection> {
        let (mut stream, from) = self.socket.accept()?;
        let open = Opened::new(&self.domain, &self.attr)?;
        let timeout = exchange_timeout(&self.attr);
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let name = read_name(&mut stream).inspect_err(|e| {
            crate::warn_limited!(client = %from, error = %e, "connection: the client's name exchange failed");
        })?;
        let peer = open.av.insert(name.as_bytes())?;
        write_name(&mut stream, &open.ep.name())?;
        let mut conn = open.into_connection(peer, name);
        let ctx = conn.context();
        conn.ep
            .trecv(peer, HELLO_TAG, 0, Vec::new(), ctx)
            .map_err(|r| r.error)?;
        conn.finish(ctx, Some(Instant::now() + timeout))?;
        Ok(conn)
    }
}

/// An endpoint with its completion queue and address vector.
pub(crate) struct Opened {
    pub(crate) domain: Domain,
    pub(crate) cq: CompletionQueue,
    pub(crate) av: AddressVector,
    pub(crate) ep: Endpoint,
}

impl Opened {
    /// A connection's endpoint in `domain`: `attr` with peer events on.
    pub(crate) fn new(domain: &Domain, attr: &EndpointAttr) -> Result<Opened> {
        let cq = domain.cq(&CqAttr::from_env())?;
        let av = domain.av()?;
        let mut attr = attr.clone();
        attr.peer_events = attr.peer_events.max(EVENTS);
        let ep = domain.endpoint(&cq, &av, &attr)?;
        Ok(Opened {
            domain: domain.clone(),
            cq,
            av,
            ep,
        })
    }

    fn into_connection(self, peer: PeerAddr, peer_name: Address) -> Connection {
        Connection {
            _domain: self.domain,
            cq: self.cq,
            _av: self.av,
            ep: self.ep,
            peer,
            peer_name,
            next: 1,
            other: VecDeque::new(),
            gone: None,
        }
    }
}

/// One peer, over an endpoint of its own: blocking [`send`](Self::send)
/// and [`recv`](Self::recv) of whole messages. Dropping it closes the
/// endpoint; the peer's receives then end with [`Error::PeerClosed`].
pub struct Connection {
    ep: Endpoint,
    cq: CompletionQueue,
    _av: AddressVector,
    _domain: Domain,
    peer: PeerAddr,
    peer_name: Address,
    next: u64,
    /// Completions of operations the program posted on
    /// [`endpoint`](Self::endpoint) itself, seen while waiting for ours.
    other: VecDeque<Completion>,
    /// How the peer left (`PeerClosed`, or the failure), once it did.
    gone: Option<Error>,
}

impl Connection {
    /// Connects to the [`Listener`] at `addr` with an endpoint opened with
    /// `attr` in a domain of its own.
    pub fn connect(addr: impl ToSocketAddrs, attr: &EndpointAttr) -> Result<Connection> {
        let domain = crate::open_default()?;
        let open = Opened::new(&domain, attr)?;
        let timeout = exchange_timeout(attr);
        let mut last = Error::AddressNotAvailable;
        for to in addr.to_socket_addrs()? {
            let mut stream = match TcpStream::connect_timeout(&to, timeout) {
                Ok(s) => s,
                Err(e) => {
                    last = e.into();
                    continue;
                }
            };
            stream.set_read_timeout(Some(timeout))?;
            stream.set_write_timeout(Some(timeout))?;
            write_name(&mut stream, &open.ep.name())?;
            let name = read_name(&mut stream)?;
            let peer = open.av.insert(name.as_bytes())?;
            let mut conn = open.into_connection(peer, name);
            let ctx = conn.context();
            conn.ep.tsend(peer, HELLO_TAG, Vec::new(), ctx).map_err(|r| r.error)?;
            conn.finish(ctx, Some(Instant::now() + timeout))?;
            return Ok(conn);
        }
        Err(last)
    }

    /// Sends `buf` as one message and waits until it is sent; the buffer
    /// comes back.
    pub fn send(&mut self, buf: Vec<u8>) -> Result<Vec<u8>> {
        if let Some(gone) = self.check_gone()? {
            return Err(gone);
        }
        let ctx = self.context();
        self.ep.send(self.peer, buf, ctx).map_err(|r| r.error)?;
        let c = self.wait_for(ctx, None)?;
        c.result?;
        Ok(c.buf.unwrap_or_default())
    }

    /// Receives the peer's next message into `buf`: the buffer and the
    /// message's length. A longer message fails with
    /// [`Error::Truncated`]; a peer that closed gives
    /// [`Error::PeerClosed`].
    pub fn recv(&mut self, buf: Vec<u8>) -> Result<(Vec<u8>, usize)> {
        self.recv_inner(buf, None)
    }

    /// [`recv`](Self::recv) that gives up after `timeout` with
    /// [`Error::TimedOut`]; the receive is cancelled, so no message is lost.
    pub fn recv_timeout(&mut self, buf: Vec<u8>, timeout: Duration) -> Result<(Vec<u8>, usize)> {
        self.recv_inner(buf, Some(timeout))
    }

    fn recv_inner(&mut self, buf: Vec<u8>, timeout: Option<Duration>) -> Result<(Vec<u8>, usize)> {
        let gone = self.check_gone()?;
        let ctx = self.context();
        self.ep.recv(self.peer, buf, ctx).map_err(|r| r.error)?;
        // A peer that left may have sent messages before it did: they are
        // delivered (they match at once), then its close is the answer.
        let deadline = match gone {
            Some(_) => Some(Instant::now()),
            None => timeout.map(|t| Instant::now() + t),
        };
        let c = self.finish(ctx, deadline).map_err(|e| match (e, gone) {
            (Error::TimedOut, Some(g)) => g,
            (e, _) => e,
        })?;
        c.result?;
        Ok((c.buf.unwrap_or_default(), c.len))
    }

    /// Waits for `ctx` until `deadline`; past it, cancels the operation
    /// (it completes either way: cancelled, or matched just now) and fails
    /// with `TimedOut` if it was cancelled.
    fn finish(&mut self, ctx: u64, deadline: Option<Instant>) -> Result<Completion> {
        match self.wait_for(ctx, deadline) {
            Err(Error::TimedOut) => {
                if self.ep.cancel(ctx).is_ok() {
                    self.wait_for(ctx, None)?;
                    return Err(Error::TimedOut);
                }
                self.wait_for(ctx, None)
            }
            other => other,
        }
    }

    /// Takes the endpoint's peer events: how the peer left, if it did.
    fn check_gone(&mut self) -> Result<Option<Error>> {
        while let Some(ev) = self.ep.peer_event()? {
            if ev.peer != self.peer {
                continue;
            }
            match ev.kind {
                PeerEventKind::Closed => self.gone = Some(Error::PeerClosed { peer: self.peer }),
                PeerEventKind::Failed(e) => self.gone = Some(e),
                _ => {}
            }
        }
        Ok(self.gone.clone())
    }

    /// The peer's handle in the endpoint's address vector.
    pub fn peer(&self) -> PeerAddr {
        self.peer
    }

    /// The peer's endpoint name.
    pub fn peer_name(&self) -> Address {
        self.peer_name
    }

    /// The endpoint, for what `send`/`recv` do not offer (tags, RMA,
    /// non-blocking posts). Completions of operations posted on it that the
    /// blocking calls see while they wait are kept for
    /// [`take_other`](Self::take_other).
    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    /// A completion of an operation the program posted on
    /// [`endpoint`](Self::endpoint), polled while a blocking call waited.
    pub fn take_other(&mut self) -> Option<Completion> {
        self.other.pop_front()
    }

    /// A context no operation of ours has in flight; the top bit marks
    /// ours apart from the program's own.
    fn context(&mut self) -> u64 {
        self.next = self.next.wrapping_add(1);
        OURS | (self.next & !OURS)
    }

    /// Waits for the completion of `ctx`, keeping others; `TimedOut` at
    /// `deadline`.
    fn wait_for(&mut self, ctx: u64, deadline: Option<Instant>) -> Result<Completion> {
        let mut done = [
            Completion::EMPTY,
            Completion::EMPTY,
            Completion::EMPTY,
            Completion::EMPTY,
        ];
        loop {
            // Past the deadline, one more look (a zero timeout polls once).
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let n = match self.cq.wait(&mut done, left) {
                Err(Error::TimedOut) => return Err(Error::TimedOut),
                r => r?,
            };
            let mut found = None;
            for c in done.iter_mut().take(n) {
                let c = std::mem::replace(c, Completion::EMPTY);
                if c.context == ctx {
                    found = Some(c);
                } else if c.context & OURS == 0 {
                    self.other.push_back(c);
                }
            }
            if let Some(c) = found {
                return Ok(c);
            }
        }
    }
}

/// The context bit of the blocking calls' own operations.
const OURS: u64 = 1 << 63;

/// How long the name exchange and the hello may take: the TCP transport's
/// connect timeout (`tcp.connect_timeout_ms` of the endpoint's params, else
/// the environment's or the default).
pub(crate) fn exchange_timeout(attr: &EndpointAttr) -> Duration {
    let tcp = crate::TcpAttr::from_params(&attr.params).unwrap_or_else(|_| crate::TcpAttr::from_env());
    Duration::from_millis(tcp.connect_timeout_ms.max(1))
}

/// The bytes of a name exchange's head: magic, version, the name's length.
pub(crate) const HEAD: usize = 6;

/// What one side sends in the name exchange: the head, then the name.
pub(crate) fn name_message(name: &Address) -> Vec<u8> {
    let bytes = name.as_bytes();
    let mut msg = Vec::with_capacity(HEAD + bytes.len());
    msg.extend_from_slice(MAGIC);
    msg.push(VERSION);
    msg.push(bytes.len() as u8); // a name is at most Address::MAX_LEN (64) bytes
    msg.extend_from_slice(bytes);
    msg
}

/// The length of the name a head announces, checked (it came from the peer).
pub(crate) fn name_len(head: &[u8; HEAD]) -> Result<usize> {
    if &head[..4] != MAGIC || head[4] != VERSION {
        return Err(Error::Protocol("not an xfer name exchange (or another version)"));
    }
    let len = usize::from(head[5]);
    if len == 0 || len > Address::MAX_LEN {
        return Err(Error::Protocol("name exchange: bad name length"));
    }
    Ok(len)
}

fn write_name(stream: &mut TcpStream, name: &Address) -> Result<()> {
    stream.write_all(&name_message(name))?;
    Ok(())
}

fn read_name(stream: &mut TcpStream) -> Result<Address> {
    let mut head = [0u8; HEAD];
    stream.read_exact(&mut head)?;
    let len = name_len(&head)?;
    let mut name = [0u8; Address::MAX_LEN];
    stream.read_exact(&mut name[..len])?;
    Address::new(&name[..len])
}
