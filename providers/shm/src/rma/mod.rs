//! RMA between the processes of a port: reads and writes of a peer's
//! registered regions, checked by the target.
//!
//! The target moves the bytes and checks every access itself, at the
//! moment it moves them: the initiator sends a request frame (its
//! operation id, the target's key and address, the length, its own buffer
//! address); the target looks the key up in its [`Regions`], checks bounds
//! and rights, moves the bytes and answers `Done` with a status.
//!
//! Two paths, chosen per peer at run time:
//! - **single copy**: the target moves the bytes with cross-memory attach
//!   between its region and the initiator's buffer (`Put`, `Get`);
//! - **two copies** through the ring, in chunks of the largest frame: the
//!   initiator streams `PutData` frames (each checked on its own), or asks
//!   with `GetReq` and the target streams `GetData` back, re-checking the
//!   key before every chunk, so a region deregistered mid-operation fails
//!   the rest of it with `NoKey`.
//!
//! An initiator tries CMA first; a target that may not use it (its probe
//! found it refused, the kernel says `EPERM`, or `XFER_SHM_CMA=0`) answers
//! `CmaRefused`, and the initiator re-issues that operation, and every
//! later one to that peer, on the two-copy path: the refusal is detected
//! once. A target owes a peer at most [`OWED_MAX`] things, paid in order
//! (answers the ring had no room for, CMA requests to carry out, reads
//! streaming back); with that many, the peer's frames stay in its ring, so
//! no peer can make it queue without bound. Chunks of data (PutData,
//! GetData) are taken without owing anything, so two sides that both write
//! and read each other in bulk keep draining each other's rings.

pub mod wire;

use std::collections::{HashMap, VecDeque};

use crate::cma::CmaError;
use crate::entry;
use crate::port::{Event, PeerId, SendError, ShmPort, Sink};
use crate::region::{Access, RegionError, Regions, Span};
use wire::{Header, Op, Status};

/// How an operation's bytes moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// One copy: the target used cross-memory attach.
    Cma,
    /// Two copies, through the ring in chunks.
    Copy,
}

/// Why an operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RmaError {
    /// The local buffer is not usable (checked when posted).
    Local(RegionError),
    /// The target refused or failed the access.
    Remote(Status),
    /// The peer went down before answering.
    PeerDown,
    /// No such peer, or its handshake is not complete.
    NoPeer,
    /// The target broke the protocol (a chunk out of place, a short read).
    Protocol(&'static str),
}

impl std::fmt::Display for RmaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RmaError::Local(e) => write!(f, "local buffer: {e}"),
            RmaError::Remote(s) => write!(f, "{s}"),
            RmaError::PeerDown => write!(f, "peer down"),
            RmaError::NoPeer => write!(f, "no such connected peer"),
            RmaError::Protocol(s) => write!(f, "RMA protocol violation by the target: {s}"),
        }
    }
}

impl std::error::Error for RmaError {}

/// One read or write: `len` bytes between the local region `local_key` at
/// `local_offset` and the peer's region `remote_key` at address
/// `remote_addr` (the address the peer's [`Regions::addr`] gave plus an
/// offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    /// The local region (a read needs [`Access::LOCAL_WRITE`] on it).
    pub local_key: u64,
    /// Where in it.
    pub local_offset: usize,
    /// The target's key.
    pub remote_key: u64,
    /// The target address.
    pub remote_addr: u64,
    /// Bytes.
    pub len: usize,
    /// Returned in the completion.
    pub context: u64,
}

/// A finished operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The operation's context.
    pub context: u64,
    /// Its peer.
    pub peer: PeerId,
    /// The path it took last.
    pub path: Path,
    /// Its outcome.
    pub result: Result<(), RmaError>,
}

/// Counters, for tests and diagnostics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Requests served by CMA as a target.
    pub cma_served: u64,
    /// PutData chunks written into a region as a target.
    pub put_chunks: u64,
    /// GetData chunks sent from a region as a target.
    pub get_chunks: u64,
    /// Peers that refused CMA (each counted once).
    pub cma_refusals: u64,
    /// RMA frames dropped as malformed or out of place.
    pub dropped: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Write,
    Read,
}

#[derive(Debug)]
struct Pending {
    peer: usize,
    kind: Kind,
    local_key: u64,
    local: Span,
    remote_key: u64,
    remote_addr: u64,
    len: usize,
    context: u64,
    path: Path,
    /// Two-copy path: bytes sent (write) or received (read).
    done: usize,
}

/// Most things a target owes one peer: with that many, the peer's frames
/// stay in its ring until one is paid.
pub const OWED_MAX: usize = 64;

/// A two-copy read this side streams back as a target: `len` bytes of the
/// region `key` from `addr`, `sent` of them sent.
#[derive(Debug, Clone, Copy)]
struct Stream {
    req: u64,
    key: u64,
    addr: u64,
    len: u64,
    sent: u64,
}

/// What a target owes a peer.
#[derive(Debug)]
enum Owed {
    /// A CMA request to carry out (after the poll: it needs the port).
    Request(Header),
    /// A two-copy read streaming back.
    Stream(Stream),
    /// An answer the ring had no room for.
    Reply(Header),
}

#[derive(Debug, Default)]
struct PeerState {
    /// The peer refused CMA once: every operation goes by the ring.
    refused: bool,
    /// Operations whose request frames are not all sent yet, in order.
    queue: VecDeque<u64>,
    /// What this side owes the peer as a target, in order.
    owed: VecDeque<Owed>,
    /// The last two-copy write whose failure was answered (later chunks
    /// of it are dropped without another answer).
    failed_req: Option<u64>,
}

/// The RMA engine of one port: the registration table, the operations this
/// side started, and what it owes its peers as a target.
///
/// ```
/// use xfer_shm::{Access, Rma, ShmConfig, ShmPort, Transfer};
/// let cfg = ShmConfig::default();
/// let (mut a, mut b) = (ShmPort::open(&cfg).unwrap(), ShmPort::open(&cfg).unwrap());
/// let (mut ra, mut rb) = (Rma::new(), Rma::new());
/// let to_b = a.connect(b.address()).unwrap();
/// // The target's region, and the initiator's buffer.
/// let key = rb.regions_mut().register(vec![0u8; 64].into_boxed_slice(), Access::REMOTE_WRITE).unwrap();
/// let (addr, _) = rb.regions().addr(key).unwrap();
/// let src = ra.regions_mut().register(b"hello".to_vec().into_boxed_slice(), Access::empty()).unwrap();
/// while !a.peer_info(to_b).unwrap().up {
///     ra.poll(&mut a, |_| {});
///     rb.poll(&mut b, |_| {});
/// }
/// let t = Transfer { local_key: src, local_offset: 0, remote_key: key, remote_addr: addr + 8, len: 5, context: 1 };
/// ra.write(&mut a, to_b, t).unwrap();
/// let done = loop {
///     rb.poll(&mut b, |_| {});
///     ra.poll(&mut a, |_| {});
///     if let Some(c) = ra.next_completion() { break c; }
/// };
/// assert_eq!(done.result, Ok(()));
/// let mut got = [0u8; 5];
/// rb.regions().copy_out(key, 8, &mut got).unwrap();
/// assert_eq!(&got, b"hello");
/// ```
#[derive(Debug, Default)]
pub struct Rma {
    regions: Regions,
    ops: HashMap<u64, Pending>,
    next_req: u64,
    peers: HashMap<usize, PeerState>,
    done: VecDeque<Completion>,
    stats: Stats,
    scratch: Vec<usize>,
}

// SAFETY: the raw pointers in `ops` point into regions of this engine's
// own table, pinned while the operations live; nothing is tied to a thread.
unsafe impl Send for Rma {}

fn done(req: u64, status: Status) -> Header {
    let mut h = Header::new(Op::Done, req);
    h.status = status;
    h
}

/// The most data bytes one RMA frame to `peer` carries (`None`: no such
/// peer).
fn chunk_bytes(port: &ShmPort, peer: PeerId) -> Option<usize> {
    port.peer_info(peer)
        .map(|i| entry::max_payload(i.ring_bytes, wire::LEN))
}

fn status_of(e: RegionError) -> Status {
    match e {
        RegionError::NoKey | RegionError::Busy => Status::NoKey,
        RegionError::OutOfBounds => Status::OutOfBounds,
        RegionError::Denied => Status::Denied,
    }
}

impl Rma {
    /// An engine with an empty table.
    pub fn new() -> Rma {
        Rma::default()
    }

    /// The registration table.
    pub fn regions(&self) -> &Regions {
        &self.regions
    }

    /// The registration table, to register and deregister.
    pub fn regions_mut(&mut self) -> &mut Regions {
        &mut self.regions
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The next finished operation.
    pub fn next_completion(&mut self) -> Option<Completion> {
        self.done.pop_front()
    }

    /// Operations started and not finished.
    pub fn in_flight(&self) -> usize {
        self.ops.len()
    }

    /// Starts writing the local bytes to the peer's region.
    pub fn write(&mut self, port: &mut ShmPort, peer: PeerId, t: Transfer) -> Result<(), RmaError> {
        self.start(port, peer, t, Kind::Write)
    }

    /// Starts reading the peer's region into the local bytes.
    pub fn read(&mut self, port: &mut ShmPort, peer: PeerId, t: Transfer) -> Result<(), RmaError> {
        self.start(port, peer, t, Kind::Read)
    }

    fn start(&mut self, port: &mut ShmPort, peer: PeerId, t: Transfer, kind: Kind) -> Result<(), RmaError> {
        if !port.peer_info(peer).is_some_and(|i| i.up) {
            return Err(RmaError::NoPeer);
        }
        let local = self.local_span(&t, kind).map_err(RmaError::Local)?;
        let st = self.peers.entry(peer.0).or_default();
        let path = if st.refused || !port.config().cma {
            Path::Copy
        } else {
            Path::Cma
        };
        let req = self.record(peer.0, kind, t, local, path);
        self.peers.entry(peer.0).or_default().queue.push_back(req);
        self.pump(port, peer.0);
        Ok(())
    }

    /// The local buffer of `t`, checked for what `kind` does with it.
    fn local_span(&self, t: &Transfer, kind: Kind) -> Result<Span, RegionError> {
        let want = match kind {
            Kind::Write => Access::empty(),
            Kind::Read => Access::LOCAL_WRITE,
        };
        self.regions.check_offset(t.local_key, t.local_offset, t.len, want)
    }

    /// Pins the local region and records the operation under a new id;
    /// its frames are not sent yet.
    fn record(&mut self, peer: usize, kind: Kind, t: Transfer, local: Span, path: Path) -> u64 {
        self.regions.pin(t.local_key, true);
        self.next_req = self.next_req.wrapping_add(1);
        let req = self.next_req;
        self.ops.insert(
            req,
            Pending {
                peer,
                kind,
                local_key: t.local_key,
                local,
                remote_key: t.remote_key,
                remote_addr: t.remote_addr,
                len: t.len,
                context: t.context,
                path,
                done: 0,
            },
        );
        req
    }

    /// Reads the port (as [`ShmPort::poll`]), serving the peers' RMA
    /// requests and finishing this side's operations; every event that is
    /// not RMA goes to `f`. Returns the frames read.
    pub fn poll(&mut self, port: &mut ShmPort, f: impl FnMut(Event<'_>)) -> usize {
        self.progress(port);
        let n = port.poll_with(&mut Serve { rma: self, user: f });
        self.progress(port);
        n
    }

    fn finish(&mut self, req: u64, result: Result<(), RmaError>) {
        if let Some(op) = self.ops.remove(&req) {
            self.regions.pin(op.local_key, false);
            self.done.push_back(Completion {
                context: op.context,
                peer: PeerId(op.peer),
                path: op.path,
                result,
            });
        }
    }

    /// Pays what is owed and sends queued requests, for every peer that
    /// has either.
    fn progress(&mut self, port: &mut ShmPort) {
        let mut ids = std::mem::take(&mut self.scratch);
        ids.clear();
        ids.extend(
            self.peers
                .iter()
                .filter(|(_, s)| !s.owed.is_empty() || !s.queue.is_empty())
                .map(|(id, _)| *id),
        );
        for &id in &ids {
            self.pay(port, id);
            self.pump(port, id);
        }
        self.scratch = ids;
    }

    /// Sends the initiator's queued request frames to `id` until the ring
    /// is full.
    fn pump(&mut self, port: &mut ShmPort, id: usize) {
        let peer = PeerId(id);
        let Some(chunk) = chunk_bytes(port, peer) else {
            return;
        };
        loop {
            let Some((&req, refused)) = self
                .peers
                .get(&id)
                .and_then(|s| s.queue.front().map(|r| (r, s.refused)))
            else {
                return;
            };
            let Some(op) = self.ops.get_mut(&req) else {
                self.pop(id);
                continue;
            };
            if refused && op.path == Path::Cma {
                // Posted before the refusal was learnt, not sent yet.
                op.path = Path::Copy;
            }
            let mut h = Header::new(Op::Put, req);
            h.key = op.remote_key;
            h.addr = op.remote_addr;
            h.len = op.len as u64;
            let sent = match (op.path, op.kind) {
                (Path::Cma, kind) => {
                    h.op = if kind == Kind::Write { Op::Put } else { Op::Get };
                    h.local = op.local.ptr as u64;
                    port.send(peer, &h.encode(), &[]).map(|()| true)
                }
                (Path::Copy, Kind::Read) => {
                    h.op = Op::GetReq;
                    port.send(peer, &h.encode(), &[]).map(|()| true)
                }
                (Path::Copy, Kind::Write) => {
                    let n = chunk.min(op.len - op.done);
                    h.op = Op::PutData;
                    h.addr = op.remote_addr.wrapping_add(op.done as u64);
                    h.len = n as u64;
                    h.last = op.done + n == op.len;
                    // SAFETY: `local` was checked inside the region, which
                    // stays registered (pinned) while the operation lives;
                    // done + n <= len.
                    let bytes = unsafe { std::slice::from_raw_parts(op.local.ptr.add(op.done), n) };
                    port.send(peer, &h.encode(), bytes).map(|()| {
                        op.done += n;
                        h.last
                    })
                }
            };
            match sent {
                Ok(true) => self.pop(id),
                Ok(false) => {}
                Err(SendError::Full) => return,
                Err(_) => {
                    self.pop(id);
                    self.finish(req, Err(RmaError::PeerDown));
                }
            }
        }
    }

    fn pop(&mut self, id: usize) {
        if let Some(s) = self.peers.get_mut(&id) {
            s.queue.pop_front();
        }
    }

    /// Carries out what this side owes `id` as a target, as far as the
    /// ring takes it.
    fn pay(&mut self, port: &mut ShmPort, id: usize) {
        let peer = PeerId(id);
        let Some(chunk) = chunk_bytes(port, peer).map(|c| c as u64) else {
            return;
        };
        loop {
            let Some(owed) = self.peers.get_mut(&id).and_then(|s| s.owed.pop_front()) else {
                return;
            };
            let next = match owed {
                Owed::Request(h) if !port.peer_info(peer).is_some_and(|i| i.up) => {
                    // A connecting peer's frames may come before its
                    // welcome, which tells whether CMA works towards it.
                    self.owe_front(id, Owed::Request(h));
                    return;
                }
                Owed::Request(h) => Some(Owed::Reply(done(h.req, self.serve_cma(port, peer, &h)))),
                Owed::Reply(h) => match port.send(peer, &h.encode(), &[]) {
                    Ok(()) => None,
                    Err(SendError::Full) => {
                        self.owe_front(id, Owed::Reply(h));
                        return;
                    }
                    Err(_) => None,
                },
                Owed::Stream(s) => {
                    if s.sent == s.len {
                        Some(Owed::Reply(done(s.req, Status::Ok)))
                    } else {
                        let n = chunk.min(s.len - s.sent);
                        let at = s.addr.wrapping_add(s.sent);
                        match self.regions.check(s.key, at, n, Access::REMOTE_READ) {
                            Err(e) => Some(Owed::Reply(done(s.req, status_of(e)))),
                            Ok(span) => {
                                let mut h = Header::new(Op::GetData, s.req);
                                h.addr = s.sent;
                                h.len = n;
                                // SAFETY: `check` put the span inside a live
                                // region of this process, and nothing else
                                // runs on the table during this call.
                                let bytes = unsafe { std::slice::from_raw_parts(span.ptr, span.len) };
                                match port.send(peer, &h.encode(), bytes) {
                                    Ok(()) => {
                                        self.stats.get_chunks += 1;
                                        Some(Owed::Stream(Stream { sent: s.sent + n, ..s }))
                                    }
                                    Err(SendError::Full) => {
                                        self.owe_front(id, Owed::Stream(s));
                                        return;
                                    }
                                    Err(_) => None,
                                }
                            }
                        }
                    }
                }
            };
            if let Some(o) = next {
                self.owe_front(id, o);
            }
        }
    }

    fn owe_front(&mut self, id: usize, o: Owed) {
        if let Some(s) = self.peers.get_mut(&id) {
            s.owed.push_front(o);
        }
    }

    /// Serves a Put or Get by CMA; the status to answer.
    fn serve_cma(&mut self, port: &ShmPort, peer: PeerId, h: &Header) -> Status {
        let want = if h.op == Op::Put {
            Access::REMOTE_WRITE
        } else {
            Access::REMOTE_READ
        };
        let span = match self.regions.check(h.key, h.addr, h.len, want) {
            Ok(s) => s,
            Err(e) => return status_of(e),
        };
        if !port.config().cma {
            return Status::CmaRefused;
        }
        let r = if h.op == Op::Put {
            // SAFETY: `check` put the span inside a live region of this
            // process granting remote writes; nothing else uses it now.
            let dst = unsafe { std::slice::from_raw_parts_mut(span.ptr, span.len) };
            port.cma_read(peer, h.local, dst)
        } else {
            // SAFETY: as above, for reading.
            let src = unsafe { std::slice::from_raw_parts(span.ptr, span.len) };
            port.cma_write(peer, h.local, src)
        };
        match r {
            Ok(()) => {
                self.stats.cma_served += 1;
                Status::Ok
            }
            Err(CmaError::NotAvailable(_)) => Status::CmaRefused,
            Err(e) => {
                xfer_core::warn_limited!(peer = peer.0, error = %e, "shm rma: CMA towards the initiator failed");
                Status::CmaFault
            }
        }
    }

    /// An RMA frame from `id`, during the port's poll.
    fn frame(&mut self, id: usize, h: Header, payload: crate::ring::Bytes<'_>) {
        match h.op {
            Op::Put | Op::Get | Op::GetReq => {
                let st = self.peers.entry(id).or_default();
                if st.owed.len() >= OWED_MAX {
                    // Only while a dead peer's last frames are drained.
                    self.stats.dropped += 1;
                    return;
                }
                st.owed.push_back(if h.op == Op::GetReq {
                    Owed::Stream(Stream {
                        req: h.req,
                        key: h.key,
                        addr: h.addr,
                        len: h.len,
                        sent: 0,
                    })
                } else {
                    Owed::Request(h)
                });
            }
            Op::PutData => self.put_data(id, h, payload),
            Op::GetData => self.get_data(id, h, payload),
            Op::Done => self.answered(id, h),
        }
    }

    fn put_data(&mut self, id: usize, h: Header, payload: crate::ring::Bytes<'_>) {
        let st = self.peers.entry(id).or_default();
        if st.owed.len() >= OWED_MAX {
            self.stats.dropped += 1;
            return;
        }
        let already_failed = st.failed_req == Some(h.req);
        match self.regions.check(h.key, h.addr, h.len, Access::REMOTE_WRITE) {
            Ok(span) => {
                // SAFETY: `check` put the span inside a live region of this
                // process granting remote writes; the payload is in the
                // peer's segment, a distinct mapping.
                let dst = unsafe { std::slice::from_raw_parts_mut(span.ptr, span.len) };
                payload.copy_to(dst);
                self.stats.put_chunks += 1;
                if h.last && !already_failed {
                    st.owed.push_back(Owed::Reply(done(h.req, Status::Ok)));
                }
            }
            Err(e) => {
                if !already_failed {
                    st.failed_req = Some(h.req);
                    st.owed.push_back(Owed::Reply(done(h.req, status_of(e))));
                }
            }
        }
    }

    fn get_data(&mut self, id: usize, h: Header, payload: crate::ring::Bytes<'_>) {
        let Some(op) = self
            .ops
            .get_mut(&h.req)
            .filter(|op| op.peer == id && op.kind == Kind::Read && op.path == Path::Copy)
        else {
            self.stats.dropped += 1;
            return;
        };
        let fits = h.addr == op.done as u64 && h.len <= (op.len - op.done) as u64;
        if !fits {
            self.finish(h.req, Err(RmaError::Protocol("read chunk out of place")));
            return;
        }
        // SAFETY: the local span was checked inside a region granting
        // LOCAL_WRITE, pinned while the operation lives; done + len <= op.len.
        let dst = unsafe { std::slice::from_raw_parts_mut(op.local.ptr.add(op.done), h.len as usize) };
        payload.copy_to(dst);
        op.done += h.len as usize;
    }

    fn answered(&mut self, id: usize, h: Header) {
        let Some(op) = self.ops.get_mut(&h.req).filter(|op| op.peer == id) else {
            self.stats.dropped += 1;
            return;
        };
        if h.status == Status::CmaRefused && op.path == Path::Cma {
            op.path = Path::Copy;
            op.done = 0;
            let st = self.peers.entry(id).or_default();
            if !st.refused {
                st.refused = true;
                self.stats.cma_refusals += 1;
                tracing::info!(
                    peer = id,
                    "shm rma: the peer refuses cross-memory attach; two-copy path from now on"
                );
            }
            st.queue.push_front(h.req);
            return;
        }
        let result = match h.status {
            Status::Ok if op.kind == Kind::Read && op.path == Path::Copy && op.done != op.len => {
                Err(RmaError::Protocol("read ended short"))
            }
            Status::Ok => Ok(()),
            s => Err(RmaError::Remote(s)),
        };
        self.finish(h.req, result);
    }

    /// Starts an operation without a port (its frames are not sent): the
    /// fuzz harness's initiator state. Returns the operation id.
    pub(crate) fn inject(&mut self, peer: usize, t: Transfer, read: bool, path: Path) -> Option<u64> {
        let kind = if read { Kind::Read } else { Kind::Write };
        let local = self.local_span(&t, kind).ok()?;
        Some(self.record(peer, kind, t, local, path))
    }

    /// Forgets what this side owes its peers (the fuzz harness has no port
    /// to pay with), checking each owed read's next chunk as `pay` would.
    pub(crate) fn settle(&mut self) -> usize {
        let mut n = 0;
        for s in self.peers.values_mut() {
            for o in s.owed.drain(..) {
                if let Owed::Stream(st) = o {
                    let at = st.addr.wrapping_add(st.sent);
                    if self
                        .regions
                        .check(st.key, at, (st.len - st.sent).min(1 << 14), Access::REMOTE_READ)
                        .is_ok()
                    {
                        n += 1;
                    }
                }
            }
            s.queue.clear();
        }
        n
    }

    /// Every operation's progress is within its length (the fuzz
    /// harness's invariant).
    pub(crate) fn consistent(&self) -> bool {
        self.ops.values().all(|op| op.done <= op.len)
    }

    /// A peer is gone: its operations fail, what was owed to it is void.
    pub(crate) fn peer_down(&mut self, id: usize) {
        self.peers.remove(&id);
        let reqs: Vec<u64> = self
            .ops
            .iter()
            .filter(|(_, op)| op.peer == id)
            .map(|(r, _)| *r)
            .collect();
        for r in reqs {
            self.finish(r, Err(RmaError::PeerDown));
        }
    }
}

/// The sink of the port's poll: RMA frames to the engine, the rest to the
/// user; a peer owed something is held back.
pub(crate) struct Serve<'a, F> {
    pub(crate) rma: &'a mut Rma,
    pub(crate) user: F,
}

impl<F: FnMut(Event<'_>)> Sink for Serve<'_, F> {
    fn ready(&mut self, peer: PeerId) -> bool {
        self.rma.peers.get(&peer.0).is_none_or(|s| s.owed.len() < OWED_MAX)
    }

    fn event(&mut self, ev: Event<'_>) {
        match ev {
            Event::Frame { peer, frame } if frame.header.len() == wire::LEN => {
                let mut b = [0u8; wire::LEN];
                frame.header.copy_to(&mut b);
                if !wire::is_rma(&b) {
                    return (self.user)(Event::Frame { peer, frame });
                }
                match Header::parse(&b, frame.payload.len()) {
                    Ok(h) => self.rma.frame(peer.0, h, frame.payload),
                    Err(e) => {
                        self.rma.stats.dropped += 1;
                        xfer_core::warn_limited!(peer = peer.0, error = %e, "shm rma: frame dropped");
                    }
                }
            }
            Event::Down { peer, reason } => {
                self.rma.peer_down(peer.0);
                (self.user)(Event::Down { peer, reason });
            }
            ev => (self.user)(ev),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::wire::{Header, Op, Status};
    use crate::fuzzing::{rma_frames, Owned, RMA_REGION};
    use crate::Event;

    fn frame(op: Op, req: u64, key: u64, addr: u64, payload: Vec<u8>, last: bool) -> Owned {
        let mut h = Header::new(op, req);
        h.key = key;
        h.addr = addr;
        h.len = payload.len() as u64;
        h.last = last;
        (h.encode().to_vec(), payload)
    }

    /// A connecting port reads its ring before its welcome (its socket is
    /// read every SERVICE_EVERY polls): a CMA request found then waits for
    /// the welcome, whose probe says whether CMA works, and is served.
    #[test]
    fn request_before_welcome_waits() {
        use crate::{Access, Cma, Rma, ShmConfig, ShmPort, Transfer};
        let cfg = ShmConfig::default();
        let (mut a, mut b) = (ShmPort::open(&cfg).unwrap(), ShmPort::open(&cfg).unwrap());
        let (mut ra, mut rb) = (Rma::new(), Rma::new());
        let key = rb
            .regions_mut()
            .register(vec![0u8; 64].into_boxed_slice(), Access::REMOTE_WRITE)
            .unwrap();
        let (addr, _) = rb.regions().addr(key).unwrap();
        let src = ra
            .regions_mut()
            .register(b"early".to_vec().into_boxed_slice(), Access::empty())
            .unwrap();
        // B connects; A accepts and answers, B does not read the answer yet.
        b.connect(a.address()).unwrap();
        let mut up = None;
        for _ in 0..crate::SERVICE_EVERY * 4 {
            ra.poll(&mut a, |ev| {
                if let Event::Up { peer } = ev {
                    up = Some(peer)
                }
            });
            if up.is_some() {
                break;
            }
        }
        let to_b = up.expect("accepted");
        let t = Transfer {
            local_key: src,
            local_offset: 0,
            remote_key: key,
            remote_addr: addr,
            len: 5,
            context: 1,
        };
        ra.write(&mut a, to_b, t).unwrap();
        let mut done = None;
        for _ in 0..crate::SERVICE_EVERY * 4 {
            rb.poll(&mut b, |_| {});
            ra.poll(&mut a, |_| {});
            done = done.or_else(|| ra.next_completion());
            if done.is_some() {
                break;
            }
        }
        let c = done.expect("completed");
        assert_eq!(c.result, Ok(()));
        assert_eq!(a.peer_info(to_b).unwrap().cma, Cma::Available);
        assert_eq!(c.path, crate::Path::Cma);
        let mut got = [0u8; 5];
        rb.regions().copy_out(key, 0, &mut got).unwrap();
        assert_eq!(&got, b"early");
    }

    #[test]
    fn peer_frames_stay_in_bounds() {
        let r = RMA_REGION as u64;
        let frames = vec![
            // In bounds, then one byte over the end, then before the start.
            frame(Op::PutData, 9, 1, r - 16, vec![1; 16], true),
            frame(Op::PutData, 10, 1, r - 8, vec![2; 16], true),
            frame(Op::PutData, 11, 1, u64::MAX, vec![3; 16], true),
            // The read-only region refuses writes.
            frame(Op::PutData, 12, 2, 0, vec![4; 16], true),
            // Chunks of this side's two-copy read (req 1): in place, out
            // of place (fails the operation), then past its end.
            frame(Op::GetData, 1, 0, 0, vec![5; 100], false),
            frame(Op::GetData, 1, 0, 0, vec![6; 100], false),
            frame(Op::GetData, 1, 0, 100, vec![7; RMA_REGION / 2], false),
            // Chunks for operations that are not reads by the ring.
            frame(Op::GetData, 2, 0, 0, vec![8; 64], false),
            frame(Op::GetData, 3, 0, 0, vec![8; 64], false),
            // Answers: a CMA refusal (req 2 goes back to the queue), one
            // for nothing.
            {
                let mut h = Header::new(Op::Done, 2);
                h.status = Status::CmaRefused;
                (h.encode().to_vec(), vec![])
            },
            (Header::new(Op::Done, 999).encode().to_vec(), vec![]),
        ];
        let s = rma_frames(&frames);
        assert_eq!(s.put_chunks, 1, "only the in-bounds chunk lands");
        assert_eq!(s.cma_refusals, 1);
        // Out-of-place chunk of req 1 ended it; its later chunk, req 2's
        // and 3's chunks and the answer to nothing are dropped.
        assert_eq!(s.dropped, 4);
    }
}
