//! The TCP endpoint: RDM semantics (reliable, connectionless to the user)
//! over TCP connections made on first use, one per pair of peers, used both
//! ways. Submodules: `inbound` (reading and matching), `rma` (RMA requests
//! and their target-side checks).
//!
//! Protocol (docs/PROTOCOL.md): messages up to the rendezvous threshold go
//! eagerly (header + payload); longer ones send a request-to-send, the
//! receiver answers clear-to-send once a receive matched (saying how much it
//! accepts), and the sender then streams the data, which lands straight in
//! the receive buffer. Unexpected large messages therefore cost a header.
//! Every length from the wire is checked before any buffer is touched; a
//! peer that breaks the protocol loses its connection, nothing else.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use slab::Slab;
use xfer_core::unstable::addr::{Address, AvTable, PeerAddr};
use xfer_core::unstable::attr::EndpointAttr;
use xfer_core::unstable::params::Params;

use crate::attr::TcpAttr;
use xfer_core::unstable::error::{Error, Result};
use xfer_core::unstable::event::{PeerEvent, PeerEvents};
use xfer_core::unstable::mr::Access;
use xfer_core::unstable::peek::{Claim, Peeked};
use xfer_core::unstable::provider::{CompletionLevel, Ctx, EndpointProvider, RecvOp, Rejected, RmaKind, RmaOp, SendOp};
use xfer_core::unstable::rdm::rndv::{self, Answer, Next, Protocol, SendState};
use xfer_core::unstable::rdm::{Abandoned, Account, Counters, Dropped, Outstanding, Receives, Unexpected};
use xfer_core::unstable::sys::{Epoll, EMPTY_EVENT, READABLE, WRITABLE};
use xfer_core::unstable::tag::{Matched, RecvSpec};

use crate::conn::{Conn, Dir, Owner, Payload, TxFrame};
use crate::iface;
use crate::link::{Link, Local};
use crate::name::{TcpName, ANY_NONCE};
use crate::rx::{EagerDest, EagerRx, Phase, RndvRx, RtsTicket, Unexp, WriteRx};
use crate::sys::{self, Io, Socket};
use crate::wire::{status, Frame, CREDIT_INIT, HEADER_LEN, MAX_EAGER};
use xfer_core::unstable::complete::{self, Arrival};
use xfer_core::unstable::hash::FastMap;
use xfer_core::unstable::mr::keys::{status_error, status_of};

mod admit;
mod batch;
mod burst;
mod credit;
mod crossed;
mod eager;
mod events;
mod hot;
mod inbound;
mod listen;
mod rma;
mod stall;

use batch::Batch;
use rma::RmaTx;

/// Epoll token of the listening socket; connections use their slab key.
const LISTENER: u64 = u64::MAX;
/// Reads per connection per progress call, so one busy peer cannot starve others.
const READS_PER_EVENT: usize = 16;
/// Bytes a closing endpoint reads and discards per connection so that
/// closing it sends a FIN, not a reset (a socket's default receive buffer).
const CLOSE_DRAIN: usize = 4 << 20;
/// Address-vector handles below this get a route hint (a dense table).
const ROUTE_HINTS: u64 = 1 << 16;
/// Payload bytes at or above which a read goes straight into the user's buffer.
const DIRECT_READ: usize = 4096;
/// Eager payloads up to this size are copied behind their header and
/// written with one `send` when the connection is idle.
const FLAT_SEND: usize = 4096;

/// A send in flight: its payload is being written or waits for a clear-to-send.
#[derive(Debug)]
struct TxOp {
    op: SendOp,
    /// The connection (key, serial) it travels on.
    conn: (usize, u64),
    /// The destination's name, to check who answers.
    dest: Address,
    /// Where it stands with its receiver.
    state: SendState,
}

/// Where the next payload bytes of a connection may be read to directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direct {
    Eager,
    Rndv,
    RmaWrite,
    ReadData,
}

/// A TCP endpoint.
pub struct TcpEndpoint {
    attr: EndpointAttr,
    /// The transport's settings: the domain's and the endpoint's `tcp.*`
    /// params over the environment.
    tcp: TcpAttr,
    name: Address,
    /// What the connections' lifecycle machines know of us (`link`): our
    /// name, its nonce (a Hello must carry it), the job key.
    local: Local,
    listener: Socket,
    /// The listener's state at the descriptor limit (`listen`).
    acceptor: listen::Acceptor,
    /// The progress timeout's state (`stall`).
    watch: xfer_core::unstable::rdm::stall::Watch,
    /// Peer join/leave events, when asked for (events.rs).
    peer_events: PeerEvents,
    /// Connections refused for not proving the job key (`admit`).
    admission_refused: u64,
    /// Accepted connections waiting for their Proof (`admit`).
    admitting: usize,
    /// The zone (interface index) of a link-local IPv6 listening address,
    /// else 0: link-local peers are dialled through it.
    zone: u32,
    epoll: Epoll,
    events: Vec<libc::epoll_event>,
    conns: Slab<Conn>,
    /// The connection our frames to each peer travel on: the one we opened,
    /// or the one the peer opened if we had none. Fixed while it lives, so
    /// our messages to a peer stay in order.
    route: FastMap<Address, usize>,
    /// Per address-vector handle (below [`ROUTE_HINTS`]): the connection
    /// (key, serial) `route` gave for it last; valid while that connection
    /// lives and still leads to the handle's name.
    route_hint: Vec<(usize, u64)>,
    connecting: usize,
    serial: u64,
    /// Sends in flight, by the token their receiver answers with.
    sends: Outstanding<TxOp>,
    /// Matched rendezvous receives waiting for their data.
    rndv: Outstanding<RndvRx>,
    /// RMA operations waiting for their answer.
    rma: Outstanding<RmaTx>,
    /// Posted and unexpected receives, tagged and untagged (core's RDM layer).
    recvs: Receives<RtsTicket>,
    /// The connection that last had data to read (`hot`). Busy-polling
    /// reads it directly and calls `epoll_wait` only every
    /// [`hot::EPOLL_EVERY`] polls, so a ping-pong's critical path has no
    /// epoll round trip (see docs/PERFORMANCE.md).
    hot: Option<usize>,
    /// Whether the hot connection is out of the epoll set (`hot`).
    detached: bool,
    /// Progress calls in a row that read the same hot connection.
    hot_streak: u32,
    /// Progress calls since the last `epoll_wait`.
    spins: u32,
    /// A read since the last `epoll_wait` stopped at its budget with the
    /// socket perhaps not drained: `prepare_wait` must ask epoll.
    unread: bool,
    /// Connections with frames queued for an unwritable socket: while any
    /// exists, every progress call asks epoll (write readiness must not wait).
    writing: usize,
    /// Tokens of rendezvous sends and RMA operations to a peer that failed
    /// with the connection their request went out on, after it went out
    /// whole: the peer's answer may still come on another connection, and is
    /// then dropped instead of counted as a violation. Forgotten when the
    /// answer comes or the peer's last connection goes.
    abandoned: Abandoned<Owed>,
    /// The RDM layer's counters (credit, requests, receive memory).
    counted: Counters,
    /// What peers may make this endpoint hold, against `EndpointAttr::rx_memory`.
    account: Account,
    /// What we grant each connection's peer (`TcpAttr::eager_credit`).
    budget: xfer_core::unstable::rdm::Amount,
    /// Scratch for a small frame written in one piece (`try_send_now`):
    /// room for a header and [`FLAT_SEND`] payload bytes.
    flat: Box<[u8]>,
    /// An eager frame was written since the last progress call: the next
    /// ones wait for the rest of the burst (`burst`).
    burst: bool,
    /// A progress call is under way: frames it queues (clear-to-send, data,
    /// credit) are written together when it ends (`burst`).
    progressing: bool,
    /// Connections with frames held back for the burst, or for the end of
    /// the progress call under way.
    deferred: Vec<usize>,
    /// Frames held back for the rest of their burst, in all.
    coalesced: u64,
}

/// The answer an abandoned token may still get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owed {
    /// A send's: a clear-to-send, or the Delivered frame of an acknowledged
    /// send whose message went out.
    Send(Answer),
    /// A write's acknowledgement.
    WriteAck,
    /// A read's response, with this many bytes of data.
    ReadResp { len: u64 },
}

/// The error an operation gets when its connection failed with `cause`.
fn op_error(cause: &Error, peer: PeerAddr) -> Error {
    match cause {
        Error::Os(errno) => Error::PeerUnreachable { peer, errno: *errno },
        Error::TimedOut => Error::PeerUnreachable {
            peer,
            errno: libc::ETIMEDOUT,
        },
        Error::PeerUnreachable { errno, .. } => Error::PeerUnreachable { peer, errno: *errno },
        Error::Stalled { .. } => Error::Stalled { peer },
        Error::PeerClosed { .. } => Error::PeerClosed { peer },
        other => other.clone(),
    }
}

/// Where an endpoint with `attr` listens on a host with `ifaces` (iface.rs
/// has the rules). Without the host's interface list, an explicit address
/// still works and the automatic choice falls back to loopback.
pub(crate) fn listen_addr(attr: &TcpAttr, ifaces: &[iface::Interface]) -> Result<SocketAddr> {
    let choice = iface::choose(ifaces, attr);
    if !choice.missing.is_empty() {
        tracing::debug!(missing = ?choice.missing, "XFER_TCP_IFACE names interfaces this host does not have");
    }
    let listen = choice.listen?;
    tracing::debug!(addr = %listen.addr, iface = ?listen.iface, rule = %listen.rule, "tcp listen address");
    Ok(listen.addr)
}

/// The address to dial for a peer's name: a link-local IPv6 one (names carry
/// no zone, zones are local to each host) through the zone this endpoint
/// listens in, which is then on the same link; an endpoint that listens on
/// no link-local address cannot tell which link that is.
fn dial_addr(peer: SocketAddr, own_zone: u32) -> Result<SocketAddr> {
    match peer {
        SocketAddr::V6(mut a) if iface::is_link_local_v6(a.ip()) && a.scope_id() == 0 => {
            if own_zone == 0 {
                return Err(Error::InvalidArgument(
                    "a link-local IPv6 peer is reachable only from an endpoint listening on a link-local address",
                ));
            }
            a.set_scope_id(own_zone);
            Ok(SocketAddr::V6(a))
        }
        other => Ok(other),
    }
}

/// The address-vector handle of `peer`: its own name's, else, for a peer
/// inserted by IP and port only (a name with [`ANY_NONCE`]), that entry's.
fn reverse(av: &AvTable, peer: &Address) -> PeerAddr {
    match av.reverse(peer) {
        p if p.is_unspec() => any_form(peer).map_or(p, |a| av.reverse(&a)),
        p => p,
    }
}

/// [`reverse`] with a guess (`AvTable::reverse_hinted`): `hint` when it
/// names `peer` or its [`ANY_NONCE`] form.
#[inline]
fn reverse_hinted(av: &AvTable, peer: &Address, hint: PeerAddr) -> PeerAddr {
    match av.lookup(hint) {
        Some(a) if a == peer => hint,
        other => reverse_missed(av, peer, hint, other),
    }
}

/// [`reverse_hinted`] when the hint does not name `peer` itself.
#[cold]
fn reverse_missed(av: &AvTable, peer: &Address, hint: PeerAddr, hinted: Option<&Address>) -> PeerAddr {
    match hinted {
        Some(a) if any_form(peer).as_ref() == Some(a) => hint,
        _ => reverse(av, peer),
    }
}

/// `peer`'s name with [`ANY_NONCE`]: how an address vector names it when
/// it was inserted by IP and port.
fn any_form(peer: &Address) -> Option<Address> {
    let name = TcpName::decode(peer.as_bytes()).ok()?;
    Address::new(
        &TcpName {
            nonce: ANY_NONCE,
            ..name
        }
        .to_vec(),
    )
    .ok()
}

/// The address an endpoint's name carries for a listener bound to `bound`:
/// a wildcard listener (`0.0.0.0:PORT` or `[::]:PORT`, every interface) is
/// named by the address the automatic choice takes (of the listener's
/// family, else that family's loopback), with the listener's port.
pub(crate) fn named_addr(bound: SocketAddr, ifaces: &[iface::Interface], attr: &TcpAttr) -> SocketAddr {
    if !bound.ip().is_unspecified() {
        return bound;
    }
    let mut auto = attr.clone();
    auto.addr = None;
    let ip = match (iface::choose(ifaces, &auto).listen, bound) {
        (Ok(l), SocketAddr::V4(_)) if l.addr.is_ipv4() => l.addr.ip(),
        (Ok(l), SocketAddr::V6(_)) if l.addr.is_ipv6() => l.addr.ip(),
        (_, SocketAddr::V4(_)) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        (_, SocketAddr::V6(_)) => IpAddr::V6(Ipv6Addr::LOCALHOST),
    };
    SocketAddr::new(ip, bound.port())
}

impl TcpEndpoint {
    /// Opens an endpoint listening on the attribute's address, with the
    /// TCP settings of `attr.params` over `domain` (its domain's params)
    /// over the environment; an unknown `tcp.*` key or a bad value is
    /// [`Error::InvalidSetting`].
    pub fn open(attr: &EndpointAttr, domain: &Params) -> Result<TcpEndpoint> {
        let tcp = TcpAttr::from_params(&domain.overlaid(&attr.params))?;
        if attr.rndv_threshold as u64 > MAX_EAGER || attr.inject_size as u64 > MAX_EAGER {
            return Err(Error::InvalidArgument(
                "rendezvous threshold and inject size must be at most 1 MiB",
            ));
        }
        let ifaces = iface::interfaces().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "listing the network interfaces failed");
            Vec::new()
        });
        let at = listen_addr(&tcp, &ifaces)?;
        let listener = Socket::listen(&at).inspect_err(|e| tracing::warn!(addr = %at, error = %e, "tcp listen"))?;
        // Never the reserved nonce 0 ("whoever listens there", name.rs).
        let nonce = sys::random_u64().max(1);
        let bound = listener.local_addr()?;
        let zone = match bound {
            SocketAddr::V6(a) => a.scope_id(),
            SocketAddr::V4(_) => 0,
        };
        let tcp_name = TcpName {
            addr: named_addr(bound, &ifaces, &tcp),
            nonce,
        };
        let name = Address::new(&tcp_name.to_vec())?;
        let epoll = Epoll::new()?;
        epoll.add(listener.as_raw_fd(), READABLE, LISTENER)?;
        tracing::debug!(name = %tcp_name, "tcp endpoint open");
        Ok(TcpEndpoint {
            attr: attr.clone(),
            tcp: tcp.clone(),
            name,
            local: Local {
                name,
                nonce,
                key: attr.job_key.clone(),
                connect_timeout: Duration::from_millis(tcp.connect_timeout_ms),
            },
            listener,
            acceptor: listen::Acceptor::new(),
            watch: xfer_core::unstable::rdm::stall::Watch::new(attr.progress_timeout_ms),
            peer_events: PeerEvents::new(attr.peer_events),
            admission_refused: 0,
            admitting: 0,
            zone,
            epoll,
            events: vec![EMPTY_EVENT; 64],
            conns: Slab::new(),
            route: FastMap::default(),
            route_hint: Vec::new(),
            connecting: 0,
            serial: 0,
            sends: Outstanding::new(),
            rndv: Outstanding::new(),
            rma: Outstanding::new(),
            recvs: Receives::new(),
            hot: None,
            detached: false,
            hot_streak: 0,
            spins: 0,
            unread: false,
            writing: 0,
            abandoned: Abandoned::default(),
            counted: Counters::default(),
            account: Account::new(attr.rx_memory),
            budget: credit::budget(tcp.eager_credit),
            flat: vec![0; HEADER_LEN + FLAT_SEND].into_boxed_slice(),
            burst: false,
            progressing: false,
            deferred: Vec::new(),
            coalesced: 0,
        })
    }

    fn next_serial(&mut self) -> u64 {
        self.serial += 1;
        self.serial
    }

    /// Gives `recv` the unexpected message it matched (or claimed).
    fn deliver(&mut self, cx: &mut Ctx<'_>, recv: RecvOp, src: PeerAddr, tag: u64, msg: Unexp) {
        match msg {
            Unexpected::Eager {
                from,
                data,
                payload,
                conn,
            } => {
                let a = Arrival {
                    len: 0,
                    olen: payload.len(),
                    tag,
                    data,
                    src,
                };
                complete::recv_copy(&mut cx.cq, recv, &payload, a, (&from, self.attr.source_err));
                self.unhold(cx, conn, payload.len());
            }
            Unexpected::Rts {
                len,
                data,
                handle: RtsTicket { conn, token, ack },
                ..
            } => {
                if let Some(c) = self.conns.get_mut(conn.0).filter(|c| c.serial == conn.1) {
                    c.requests.matched(token);
                }
                self.start_rndv(cx, recv, conn, (token, ack), len, tag, data, src);
                self.unhold(cx, conn, 0);
            }
        }
    }

    /// The connection to `peer`, whose name is `dest`: the hinted one when
    /// it still holds, else [`out_conn`](Self::out_conn). The hint's check
    /// is inlined into every send; a miss is handled out of line.
    #[inline]
    fn route_to(&mut self, peer: PeerAddr, dest: &Address) -> Result<usize> {
        if let Some(&(id, serial)) = self.route_hint.get(peer.0 as usize) {
            if self
                .conns
                .get(id)
                .is_some_and(|c| c.serial == serial && c.peer.as_ref() == Some(dest))
            {
                return Ok(id);
            }
        }
        self.route_missed(peer, dest)
    }

    /// [`route_to`](Self::route_to) without a valid hint: the connection
    /// from [`out_conn`](Self::out_conn), hinted from now on.
    #[inline(never)]
    fn route_missed(&mut self, peer: PeerAddr, dest: &Address) -> Result<usize> {
        let idx = peer.0 as usize;
        let id = self.out_conn(dest)?;
        if peer.0 < ROUTE_HINTS {
            if self.route_hint.len() <= idx {
                self.route_hint.resize(idx + 1, (usize::MAX, 0));
            }
            self.route_hint[idx] = (id, self.conns[id].serial);
        }
        Ok(id)
    }

    /// The connection to `dest`, connecting (and queueing a hello) on first use.
    fn out_conn(&mut self, dest: &Address) -> Result<usize> {
        if let Some(&id) = self.route.get(dest) {
            return Ok(id);
        }
        let name = TcpName::decode(dest.as_bytes()).map_err(|e| Error::Protocol(e.as_str()))?;
        let addr = dial_addr(name.addr, self.zone)?;
        let link = Link::dial(&self.local, dest, Instant::now())?;
        let sock = Socket::connect(&addr)?;
        sock.tune(&self.tcp, Some(addr))?;
        let serial = self.next_serial();
        let mut conn = Conn::new(sock, Dir::Out, link, serial, Some(*dest));
        // Our user chose this peer: admitted whatever the receive memory holds.
        conn.share.commit(&mut self.account, credit::ADMISSION);
        // The Hello, written once connected.
        conn.take_transmits();
        conn.want_write = true;
        self.writing += 1;
        let fd = conn.sock.as_raw_fd();
        let id = self.conns.insert(conn);
        if let Err(e) = self.epoll.add(fd, READABLE | WRITABLE, id as u64) {
            self.conns.remove(id).share.close(&mut self.account, 0);
            return Err(e);
        }
        self.route.insert(*dest, id);
        self.connecting += 1;
        tracing::debug!(peer = %name, "connecting");
        Ok(id)
    }

    /// Writes queued frames of connection `id` until done or the socket is
    /// full: several at a time while they can go together (`batch`), else
    /// one by one.
    fn flush(&mut self, cx: &mut Ctx<'_>, id: usize) {
        let Some(conn) = self.conns.get_mut(id) else { return };
        // Until the connection is open only handshake frames may go out.
        if conn.link.is_connecting() {
            return;
        }
        let hello_only = !conn.link.is_open();
        let mut full = false;
        if !hello_only && conn.txq.len() > 1 {
            loop {
                match self.write_batch(cx, id) {
                    Batch::Sent => {}
                    Batch::Full => {
                        full = true;
                        break;
                    }
                    Batch::Single => break,
                    Batch::Failed => return,
                }
            }
        }
        let Some(conn) = self.conns.get_mut(id) else { return };
        while let Some(TxFrame {
            hdr,
            payload,
            written,
            owner,
        }) = conn.txq.front_mut()
        {
            if full || (hello_only && *owner != Owner::Handshake) {
                break;
            }
            let (ext, payload): (&[u8], &[u8]) = match payload {
                Payload::Region { mr_key, addr, len } => {
                    match cx.domain.remote_target(*mr_key, *addr, *len, Access::REMOTE_READ) {
                        // SAFETY: `remote_target` checked that the live
                        // registration covers `len` bytes at the pointer; it
                        // stays registered while the domain lock is held,
                        // which it is for this whole call.
                        Ok(ptr) if *len > 0 => (&[], unsafe { std::slice::from_raw_parts(ptr, *len as usize) }),
                        Ok(_) => (&[], &[]),
                        Err(_) => {
                            let err = Error::RemoteAccess(status::text(status::DEREGISTERED));
                            return self.fail_conn(cx, id, err);
                        }
                    }
                }
                // Every other kind has its bytes at hand.
                other => batch::frame_bytes(&self.sends, &self.rma, other).unwrap_or_default(),
            };
            match Conn::write_frame(&conn.sock, hdr, written, ext, payload) {
                Ok(true) => {
                    if let Some(f) = conn.txq.pop_front() {
                        let selective = self.attr.selective_completion;
                        batch::written_whole(&mut self.sends, &mut self.rma, cx, selective, f.owner);
                    }
                }
                Ok(false) => break,
                Err(e) => return self.fail_conn(cx, id, e),
            }
        }
        let want = match conn.txq.front() {
            Some(f) => !hello_only || f.owner == Owner::Handshake,
            None => false,
        };
        if want != conn.want_write {
            conn.want_write = want;
            if want {
                self.writing += 1;
            } else {
                self.writing -= 1;
            }
            if self.detached && self.hot == Some(id) {
                // Out of the epoll set (`hot`), where write readiness is seen.
                return self.attach_hot(cx);
            }
            let events = if want { READABLE | WRITABLE } else { READABLE };
            if let Err(e) = self.epoll.modify(conn.sock.as_raw_fd(), events, id as u64) {
                self.fail_conn(cx, id, e);
            }
        }
    }

    /// Queues `frame` on connection `id` and writes what the socket takes;
    /// during a progress call, when that call ends, with whatever else it
    /// queued (`burst`).
    fn queue(&mut self, cx: &mut Ctx<'_>, id: usize, frame: TxFrame) {
        let conn = &mut self.conns[id];
        conn.txq.push_back(frame);
        if self.progressing {
            burst::defer(&mut self.deferred, conn, id);
        } else {
            self.flush(cx, id);
        }
    }

    /// Drops connection `id` and ends every operation that depended on it.
    fn fail_conn(&mut self, cx: &mut Ctx<'_>, id: usize, cause: Error) {
        let detached = self.is_detached(id);
        let Some(mut conn) = self.conns.try_remove(id) else {
            return;
        };
        if self.hot == Some(id) {
            self.hot = None;
            self.detached = false;
        }
        if !detached {
            if let Err(e) = self.epoll.delete(conn.sock.as_raw_fd()) {
                tracing::debug!(error = %e, "epoll delete of a failed connection");
            }
        }
        if conn.link.is_dialling() {
            self.connecting -= 1;
        }
        if conn.link.awaits_proof() {
            // Gone (closed, timed out, or failed otherwise) before proving the job key.
            self.admission_refused += 1;
            self.admitting -= 1;
        }
        if conn.want_write {
            self.writing -= 1;
        }
        let mut routed = false;
        if let Some(peer) = conn.peer {
            if self.route.get(&peer) == Some(&id) {
                self.route.remove(&peer);
                routed = true;
            }
        }
        let me = (id, conn.serial);
        let quiet = matches!(conn.rx, Phase::Header)
            && conn.staged().is_empty()
            && conn.txq.is_empty()
            && conn.credit_wait.is_empty()
            && !self.sends.iter().any(|(_, tx)| tx.conn == me);
        let clean_close = matches!(cause, Error::PeerClosed { .. });
        // A spare connection (a crossed first contact's, given up by the
        // peer) ends however its socket says: nothing rode on it.
        let spare = quiet
            && !routed
            && conn
                .peer
                .is_some_and(|p| self.conns.iter().any(|(_, c)| c.peer == Some(p)));
        if clean_close || spare || cause == Error::Canceled {
            tracing::debug!(peer = ?conn.peer, opened_by = ?conn.dir, reason = %cause, "connection closed");
        } else {
            xfer_core::warn_limited!(peer = ?conn.peer, opened_by = ?conn.dir, error = %cause, "connection failed");
        }
        if cause == credit::OVERSPENT {
            self.counted.credit_violations += 1;
        }
        let selective = self.attr.selective_completion;
        let waiting = std::mem::take(&mut conn.credit_wait);
        for frame in conn.txq.drain(..).chain(waiting) {
            match frame.owner {
                Owner::Send(key) | Owner::Rts(key) => {
                    let tx = self.sends.remove(key);
                    let err = op_error(&cause, tx.op.peer);
                    complete::send(&mut cx.cq, selective, tx.op, Err(err));
                }
                Owner::Cts(key) => self.fail_rndv(cx, key, &cause),
                Owner::Rma(key) => self.fail_rma(cx, key, &cause),
                Owner::None | Owner::Handshake => {}
            }
        }
        for (_, token, r) in self.rma.remove_where(|r| r.conn == me) {
            if r.sent {
                // The target has the request: its answer may come on its own connection.
                let answer = match r.op.kind {
                    RmaKind::Write => Owed::WriteAck,
                    RmaKind::Read => Owed::ReadResp {
                        len: r.op.buf.len() as u64,
                    },
                };
                self.abandoned.abandon(r.dest, token, answer);
            }
            let err = op_error(&cause, r.op.peer);
            complete::rma(&mut cx.cq, selective, r.op, Err(err));
        }
        for (_, token, tx) in self.sends.remove_where(|t| t.conn == me) {
            // Its request or its data went out whole: the receiver's answer
            // may still come on its own connection.
            if let Some(answer) = tx.state.owed() {
                self.abandoned.abandon(tx.dest, token, Owed::Send(answer));
            }
            let err = op_error(&cause, tx.op.peer);
            complete::send(&mut cx.cq, selective, tx.op, Err(err));
        }
        match std::mem::take(&mut conn.rx) {
            Phase::Eager(EagerRx {
                dest: EagerDest::Posted(op),
                src,
                ..
            }) => complete::recv_failed(&mut cx.cq, op, op_error(&cause, src)),
            Phase::Data { key, .. } => self.fail_rndv(cx, key, &cause),
            Phase::ReadData { token, .. } => {
                if let Some(key) = self.rma.key_of(token) {
                    self.fail_rma(cx, key, &cause);
                }
            }
            Phase::Eager(_) | Phase::Header | Phase::RmaWrite(_) => {}
        }
        // Its kept requests to send can never be fulfilled, and a peer that
        // broke the protocol leaves nothing behind.
        let violated = matches!(cause, Error::Protocol(_));
        let mut dropped = Dropped::default();
        if violated || !conn.requests.is_empty() {
            dropped = self.recvs.drop_connection(violated, |u| match u {
                Unexpected::Eager { conn, .. } => *conn == me,
                Unexpected::Rts { handle, .. } => handle.conn == me,
            });
            self.counted.dropped(dropped);
            tracing::debug!(?dropped, "kept messages dropped with their connection");
        }
        // What the rest of its kept messages hold is given back as receives take them.
        conn.share.close(&mut self.account, dropped.credit);
        for (_, _, r) in self.rndv.remove_where(|r| r.conn == me) {
            complete::recv_failed(&mut cx.cq, r.recv, op_error(&cause, r.src));
        }
        // The last connection with a peer is gone: its endpoint is (a name
        // never comes back), so receives directed at it can never match.
        if let Some(peer) = conn.peer {
            let src = reverse(cx.av, &peer);
            let other = self.conns.iter().any(|(_, c)| c.peer == Some(peer));
            if !other {
                self.abandoned.forget(&peer);
            }
            if !other && cause != Error::Canceled {
                for op in self.recvs.drain_posted_from(src) {
                    complete::recv_failed(&mut cx.cq, op, op_error(&cause, src));
                }
            }
            self.peer_down(cx, peer, &cause);
        }
    }

    fn fail_rndv(&mut self, cx: &mut Ctx<'_>, key: usize, cause: &Error) {
        if let Some(r) = self.rndv.try_remove(key) {
            let err = op_error(cause, r.src);
            complete::recv_failed(&mut cx.cq, r.recv, err);
        }
    }

    fn on_event(&mut self, cx: &mut Ctx<'_>, id: usize, events: u32) {
        let Some(conn) = self.conns.get_mut(id) else { return };
        if conn.link.is_connecting() {
            if events & (WRITABLE | libc::EPOLLERR as u32 | libc::EPOLLHUP as u32) == 0 {
                return;
            }
            match conn.sock.take_error() {
                Ok(0) => {
                    // Connected: send the Hello, then wait for its acknowledgement.
                    conn.link.handle_connected();
                    self.flush(cx, id);
                }
                Ok(errno) => self.fail_conn(cx, id, Error::Os(errno)),
                Err(e) => self.fail_conn(cx, id, e),
            }
            return;
        }
        if events & (READABLE | libc::EPOLLERR as u32 | libc::EPOLLHUP as u32) != 0 {
            self.set_hot(cx, id);
            self.read_inbound(cx, id);
        }
        if events & WRITABLE != 0 {
            if let Some(c) = self.conns.get_mut(id) {
                c.silence.heard();
            }
            self.flush(cx, id);
        }
    }

    /// Fails the connections whose connect, handshake or admission is
    /// past its deadline (`Link::handle_timeout`).
    fn check_connect_timeouts(&mut self, cx: &mut Ctx<'_>) {
        let now = Instant::now();
        let late: Vec<(usize, Error)> = self
            .conns
            .iter_mut()
            .filter_map(|(k, c)| c.link.handle_timeout(now).err().map(|f| (k, f.into())))
            .collect();
        for (id, cause) in late {
            self.fail_conn(cx, id, cause);
        }
    }

    /// Writes an eager frame at once when the connection is idle; `None`
    /// once written whole, else how many of its bytes were written (the
    /// caller queues the rest as a [`TxFrame`]; none is built on the path
    /// that writes it).
    fn try_send_now(&mut self, cx: &mut Ctx<'_>, id: usize, hdr: &[u8; HEADER_LEN], payload: &[u8]) -> Option<usize> {
        let hold = self.in_burst();
        let conn = &mut self.conns[id];
        if !conn.link.is_open() || !conn.txq.is_empty() {
            return Some(0);
        }
        if hold {
            // Held for the rest of the burst (`burst`), whatever its size: a
            // stream of 8-64 KiB messages then shares system calls too.
            return Some(0);
        }
        let mut written = 0;
        if payload.len() <= FLAT_SEND {
            // One contiguous copy and `send`: measured 0.2 µs cheaper per
            // message than `sendmsg` of header and payload slices
            // (docs/PERFORMANCE.md), far more than the copy costs.
            let total = HEADER_LEN + payload.len();
            let flat = &mut self.flat[..total];
            flat[..HEADER_LEN].copy_from_slice(hdr);
            flat[HEADER_LEN..].copy_from_slice(payload);
            match conn.sock.send_flat(flat) {
                Ok(Io::Done(n)) if n == total => {
                    self.burst = true;
                    return None;
                }
                Ok(Io::Done(n)) => written = n,
                Ok(Io::WouldBlock) => return Some(0),
                Err(e) => {
                    self.fail_conn(cx, id, e);
                    return Some(0);
                }
            }
        }
        let conn = &mut self.conns[id];
        match Conn::write_frame(&conn.sock, hdr, &mut written, &[], payload) {
            Ok(true) => {
                self.burst = true;
                None
            }
            Ok(false) => Some(written),
            Err(e) => {
                self.fail_conn(cx, id, e);
                Some(written)
            }
        }
    }
}

impl TcpEndpoint {
    /// Checks an inject's size and returns the connection it goes out on.
    fn inject_conn(&mut self, cx: &Ctx<'_>, peer: PeerAddr, len: usize) -> Result<usize> {
        self.attr.check_inject(len)?;
        let dest = cx.av.lookup(peer).copied().ok_or(Error::AddressNotAvailable)?;
        self.route_to(peer, &dest)
    }
}

impl EndpointProvider for TcpEndpoint {
    fn name(&self) -> Address {
        self.name
    }

    fn send(&mut self, cx: &mut Ctx<'_>, op: SendOp) -> std::result::Result<(), Rejected<SendOp>> {
        let Some(dest) = cx.av.lookup(op.peer).copied() else {
            return Err(Rejected::new(Error::AddressNotAvailable, op));
        };
        let id = match self.route_to(op.peer, &dest) {
            Ok(id) => id,
            Err(e) => return Err(Rejected::new(e, op)),
        };
        let len = op.buf.len();
        let conn = (id, self.conns[id].serial);
        // An acknowledged send carries its token: the receiver answers with
        // a Delivered frame once it has the message.
        let ack = op.level != CompletionLevel::Inject;
        let protocol = rndv::choose(len, self.attr.rndv_threshold, || self.spend_credit(id, len));
        let eager = protocol == Protocol::Eager;
        let state = SendState::start(protocol);
        if eager && ack {
            let (tag, data) = (op.tag, op.data);
            let key = self.sends.insert(TxOp { op, conn, dest, state });
            let hdr = Frame::Eager {
                tag,
                data,
                len: len as u64,
                ack: Some(self.sends.token(key)),
            }
            .to_bytes();
            let frame = TxFrame {
                hdr,
                payload: Payload::Op { key, offset: 0, len },
                written: 0,
                owner: Owner::Send(key),
            };
            self.queue_eager(cx, id, frame);
        } else if eager {
            let hdr = Frame::Eager {
                tag: op.tag,
                data: op.data,
                len: len as u64,
                ack: None,
            }
            .to_bytes();
            let Some(written) = self.try_send_now(cx, id, &hdr, op.buf.as_slice()) else {
                complete::send(&mut cx.cq, self.attr.selective_completion, op, Ok(()));
                return Ok(());
            };
            let key = self.sends.insert(TxOp { op, conn, dest, state });
            let frame = TxFrame {
                hdr,
                payload: Payload::Op { key, offset: 0, len },
                written,
                owner: Owner::Send(key),
            };
            match self.conns.get(id) {
                Some(c) if c.serial == conn.1 => self.queue_eager(cx, id, frame),
                _ => {
                    // The connection failed while writing: report the send's failure.
                    let tx = self.sends.remove(key);
                    let err = Error::PeerUnreachable {
                        peer: tx.op.peer,
                        errno: libc::ECONNRESET,
                    };
                    complete::send(&mut cx.cq, self.attr.selective_completion, tx.op, Err(err));
                }
            }
        } else {
            let (tag, data) = (op.tag, op.data);
            let key = self.sends.insert(TxOp { op, conn, dest, state });
            let hdr = Frame::Rts {
                tag,
                data,
                len: len as u64,
                token: self.sends.token(key),
                ack,
            }
            .to_bytes();
            let frame = TxFrame {
                hdr,
                payload: Payload::None,
                written: 0,
                owner: Owner::Rts(key),
            };
            self.queue_request(cx, id, frame);
        }
        Ok(())
    }

    fn inject(
        &mut self,
        cx: &mut Ctx<'_>,
        peer: PeerAddr,
        tag: Option<u64>,
        data: Option<u64>,
        payload: &[u8],
    ) -> Result<()> {
        let id = self.inject_conn(cx, peer, payload.len())?;
        if !self.spend_credit(id, payload.len()) {
            // No buffer of the caller's to wait in by rendezvous.
            return Err(Error::Again);
        }
        let hdr = Frame::Eager {
            tag,
            data,
            len: payload.len() as u64,
            ack: None,
        }
        .to_bytes();
        if let Some(written) = self.try_send_now(cx, id, &hdr, payload) {
            if self.conns.contains(id) {
                let frame = TxFrame {
                    hdr,
                    payload: Payload::Owned(payload.to_vec()),
                    written,
                    owner: Owner::None,
                };
                self.queue_eager(cx, id, frame);
            } else {
                return Err(Error::PeerUnreachable {
                    peer,
                    errno: libc::ECONNRESET,
                });
            }
        }
        Ok(())
    }

    fn rma(&mut self, cx: &mut Ctx<'_>, op: RmaOp) -> std::result::Result<(), Rejected<RmaOp>> {
        self.start_rma(cx, op)
    }

    fn inject_write(
        &mut self,
        cx: &mut Ctx<'_>,
        peer: PeerAddr,
        addr: u64,
        key: u64,
        data: Option<u64>,
        payload: &[u8],
    ) -> Result<()> {
        let id = self.inject_conn(cx, peer, payload.len())?;
        let hdr = Frame::WriteReq {
            key,
            addr,
            len: payload.len() as u64,
            token: 0,
            imm: data.is_some(),
        }
        .to_bytes();
        let mut bytes = Vec::with_capacity(payload.len() + 8);
        if let Some(d) = data {
            bytes.extend_from_slice(&d.to_le_bytes());
        }
        bytes.extend_from_slice(payload);
        let frame = TxFrame {
            hdr,
            payload: Payload::Owned(bytes),
            written: 0,
            owner: Owner::None,
        };
        self.queue(cx, id, frame);
        if !self.conns.contains(id) {
            return Err(Error::PeerUnreachable {
                peer,
                errno: libc::ECONNRESET,
            });
        }
        Ok(())
    }

    fn recv(&mut self, cx: &mut Ctx<'_>, op: RecvOp) -> std::result::Result<(), Rejected<RecvOp>> {
        if let Some(Matched {
            recv, src, tag, msg, ..
        }) = self.recvs.post(cx.av, op, reverse)
        {
            self.deliver(cx, recv, src, tag, msg);
        }
        Ok(())
    }

    fn peek(&mut self, cx: &mut Ctx<'_>, spec: RecvSpec, claim: bool) -> Result<Option<(Peeked, Option<Claim>)>> {
        Ok(self.recvs.peek(cx.av, spec, claim, reverse))
    }

    fn recv_claimed(
        &mut self,
        cx: &mut Ctx<'_>,
        claim: Claim,
        op: RecvOp,
    ) -> std::result::Result<(), Rejected<RecvOp>> {
        let (c, op) = self.recvs.claimed(&claim, op)?;
        self.deliver(cx, op, c.src, c.tag, c.msg);
        Ok(())
    }

    fn peer_event(&mut self) -> Option<PeerEvent> {
        self.peer_events.pop()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut v = self.counted.report(self.recvs.held(), &self.account);
        v.extend([
            ("peer_events_lost", self.peer_events.lost()),
            ("connections", self.conns.len() as u64),
            ("coalesced", self.coalesced),
            ("accept_paused", self.acceptor.paused),
            ("accept_shed", self.acceptor.shed),
            ("progress_probes", self.watch.probes),
            ("peers_stalled", self.watch.stalled),
            ("admission_refused", self.admission_refused),
        ]);
        v
    }

    fn cancel(&mut self, cx: &mut Ctx<'_>, context: u64) -> Result<()> {
        self.recvs.cancel(&mut cx.cq, context)
    }

    fn progress(&mut self, cx: &mut Ctx<'_>) {
        self.end_burst(cx);
        self.progressing = true;
        if !self.poll_hot(cx) {
            self.poll_ready(cx);
        }
        self.progressing = false;
        // What this call queued (answers to a read's frames) goes out together.
        self.end_burst(cx);
    }

    fn wait_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    fn prepare_wait(&mut self, cx: &mut Ctx<'_>) {
        // Nothing may wait for a progress call that sleeping would not make.
        self.end_burst(cx);
        // A detached hot connection would raise no event while we sleep.
        self.attach_hot(cx);
        // Progress calls since the last `epoll_wait` may have read the hot
        // connection only, or stopped at a read budget. What they left raised
        // its event already, and an edge-triggered waiter on the descriptor
        // (tokio's reactor) sees no second one: serve it now (decision 66).
        if self.spins != 0 || self.unread {
            self.poll_ready(cx);
        }
    }

    fn close(&mut self, cx: &mut Ctx<'_>) {
        // What was posted goes out, as it would have without coalescing.
        self.end_burst(cx);
        let ids: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
        for id in ids {
            if let Some(c) = self.conns.get(id) {
                if !c.link.is_connecting() {
                    // The peer learns of an orderly close, not a failure.
                    c.sock.close_in_order(CLOSE_DRAIN);
                }
            }
            self.fail_conn(cx, id, Error::Canceled);
        }
        for r in self.rma.drain() {
            complete::rma(&mut cx.cq, self.attr.selective_completion, r.op, Err(Error::Canceled));
        }
        for op in self.recvs.drain_posted() {
            complete::recv_failed(&mut cx.cq, op, Error::Canceled);
        }
        self.peer_events.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::dial_addr;

    #[test]
    fn link_local_peers_are_dialled_through_our_own_zone() {
        let peer = "[fe80::2]:7".parse().unwrap();
        assert_eq!(dial_addr(peer, 3).unwrap().to_string(), "[fe80::2%3]:7");
        assert!(dial_addr(peer, 0).is_err(), "no zone of ours to dial it through");
        for other in ["10.0.0.1:7", "[2001:db8::1]:7", "[fe80::2%5]:7"] {
            let a = other.parse().unwrap();
            assert_eq!(dial_addr(a, 3).unwrap(), a);
        }
    }
}
