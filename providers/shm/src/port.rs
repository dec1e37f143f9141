//! The port: one process's listener and its peers, polled together.
//!
//! A port owns an abstract-namespace Unix listener (its address), an epoll
//! set (its wait descriptor: the listener, every peer's socket and the
//! port's eventfd) and one segment per peer. Progress is manual: `poll`
//! reads every peer's ring and, every [`SERVICE_EVERY`] calls or after a
//! wait, the epoll set (new connections, handshakes, closed sockets).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::Duration;

use slab::Slab;

use crate::cma::{self, Cma, CmaError};
use crate::config::ShmConfig;
use crate::entry::Corrupt;
use crate::fence::Fences;
use crate::hello::{self, Hello, Kind};
use crate::ring::{Frame, Refused};
use crate::segment::Segment;
use crate::sys::{self, Epoll};

/// `poll` reads the epoll set (connections, handshakes, peer death) once
/// every this many calls when nothing else asks for it: a busy-polling
/// loop notices a dead peer within that many polls, and pays one
/// `epoll_wait` per that many.
pub const SERVICE_EVERY: u32 = 1024;
/// Frames taken from one peer per `poll` before the next peer's turn.
pub const BUDGET: usize = 32;

const LISTENER: u64 = u64::MAX;
const WAKE: u64 = u64::MAX - 1;

/// A port's address: an abstract socket name made of `xs`, the process id
/// and a random nonce (14 bytes, so an endpoint name that carries it stays
/// within the 32 bytes names had before `Address::MAX_LEN` grew).
fn address_for(pid: u32, nonce: u64) -> Vec<u8> {
    let mut name = b"xs".to_vec();
    name.extend_from_slice(&pid.to_le_bytes());
    name.extend_from_slice(&nonce.to_le_bytes());
    name
}

/// A peer of the port: an index, reused after the peer is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId(pub usize);

/// What the port knows of a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerInfo {
    /// Its process id (the kernel's `SO_PEERCRED`, in this pid namespace).
    pub pid: libc::pid_t,
    /// Its user id.
    pub uid: libc::uid_t,
    /// Whether it connected to this port (rather than this port to it).
    pub inbound: bool,
    /// Whether the handshake is complete.
    pub up: bool,
    /// Whether cross-memory attach towards it works.
    pub cma: Cma,
    /// Bytes of each ring of the pair (the connecting side chose; 0 before
    /// an accepted peer's hello). The largest frame is a quarter of it
    /// ([`entry::max_payload`](crate::entry::max_payload)).
    pub ring_bytes: usize,
}

/// Why a peer is gone.
#[derive(Debug)]
pub enum DownReason {
    /// Its socket closed: the process exited, was killed, or closed the
    /// pair. Every frame it wrote before was delivered first.
    Closed,
    /// Its ring held an impossible entry or head: a broken or hostile peer.
    Corrupt(Corrupt),
    /// The handshake failed: a bad message or segment, another user.
    Handshake(String),
    /// A system call on its socket failed.
    Os(io::Error),
}

impl std::fmt::Display for DownReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DownReason::Closed => write!(f, "peer closed"),
            DownReason::Corrupt(c) => write!(f, "corrupt ring entry: {c}"),
            DownReason::Handshake(s) => write!(f, "handshake failed: {s}"),
            DownReason::Os(e) => write!(f, "peer socket: {e}"),
        }
    }
}

/// What `poll` reports.
#[derive(Debug)]
pub enum Event<'a> {
    /// A frame from a peer; its bytes are valid during the callback.
    Frame {
        /// From whom.
        peer: PeerId,
        /// Header and payload, in the peer's segment.
        frame: Frame<'a>,
    },
    /// A peer's handshake completed (an accepted one appears here first).
    Up {
        /// Which.
        peer: PeerId,
    },
    /// A peer is gone; its id may be reused afterwards.
    Down {
        /// Which.
        peer: PeerId,
        /// Why.
        reason: DownReason,
    },
}

/// Receives what [`ShmPort::poll_with`] reports, and says per peer whether
/// to read its next frame now. A closure `FnMut(Event)` is a sink that
/// reads every frame.
pub trait Sink {
    /// Whether to read `peer`'s next frame now; `false` leaves it in the
    /// ring for a later poll, so the peer feels back-pressure. Asked
    /// before every frame.
    fn ready(&mut self, peer: PeerId) -> bool {
        let _ = peer;
        true
    }

    /// One event.
    fn event(&mut self, ev: Event<'_>);
}

impl<F: FnMut(Event<'_>)> Sink for F {
    fn event(&mut self, ev: Event<'_>) {
        self(ev)
    }
}

/// Why `send` did not write a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// The peer's ring is full: poll, then try again (back-pressure).
    Full,
    /// Header over 64 bytes or frame over a quarter of the ring.
    TooLarge,
    /// An accepted peer whose handshake is not complete.
    NotReady,
    /// No such peer (or it is down).
    NoPeer,
    /// The peer broke its ring; it is reported down by the next `poll`.
    Broken,
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SendError::Full => "ring full",
            SendError::TooLarge => "frame too large for the ring",
            SendError::NotReady => "handshake not complete",
            SendError::NoPeer => "no such peer",
            SendError::Broken => "peer broke its ring",
        })
    }
}

impl std::error::Error for SendError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Accepted; its hello (and segment) not received yet.
    AwaitHello,
    /// Connected, hello sent; the ring is usable, the welcome not received.
    AwaitWelcome,
    Up,
}

#[derive(Debug)]
struct Peer {
    // Field order is drop order: the segment is unmapped before the socket
    // closes, so the peer sees the close only after this side is done.
    seg: Option<Segment>,
    /// The peer's eventfd, signalled when it sleeps and a frame arrives.
    wake: Option<OwnedFd>,
    sock: OwnedFd,
    cred: libc::ucred,
    cma: Cma,
    state: State,
    inbound: bool,
    /// A wake-up owed before the peer's eventfd arrived.
    wake_pending: bool,
}

/// One process's shared-memory port: a listener address, its peers, one
/// wait descriptor.
#[derive(Debug)]
pub struct ShmPort {
    cfg: ShmConfig,
    name: Vec<u8>,
    peers: Slab<Peer>,
    epoll: Epoll,
    wake: OwnedFd,
    listener: OwnedFd,
    polls: u32,
    service_due: bool,
    tokens: Vec<u64>,
    /// Peers found dead outside `poll` (by `send`), reported by the next.
    dead: Vec<(usize, DownReason)>,
    /// Peers whose welcome `send` read, reported up by the next `poll`.
    ups: Vec<usize>,
    /// The fences of the domain whose grants this port's peers copy under
    /// (fence.rs); without them no peer copies into this side.
    fences: Option<Arc<Fences>>,
}

impl ShmPort {
    /// Opens a port listening on a fresh abstract address.
    pub fn open(cfg: &ShmConfig) -> io::Result<ShmPort> {
        cfg.check()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let name = address_for(std::process::id(), sys::random_u64());
        let listener = sys::listen(&name)?;
        let epoll = Epoll::new()?;
        let wake = sys::eventfd()?;
        epoll.add(listener.as_raw_fd(), LISTENER)?;
        epoll.add(wake.as_raw_fd(), WAKE)?;
        Ok(ShmPort {
            cfg: cfg.clone(),
            name,
            peers: Slab::new(),
            epoll,
            wake,
            listener,
            polls: 0,
            service_due: false,
            tokens: Vec::with_capacity(32),
            dead: Vec::new(),
            ups: Vec::new(),
            fences: None,
        })
    }

    /// The address peers connect to (an abstract Unix socket name, valid in
    /// this network namespace while the port lives).
    pub fn address(&self) -> &[u8] {
        &self.name
    }

    /// The settings it was opened with.
    pub fn config(&self) -> &ShmConfig {
        &self.cfg
    }

    /// Connects to the port at `addr`: creates the pair's segment and sends
    /// it. Frames can be sent at once; the peer reads them once it has
    /// accepted, and `Event::Up` reports its answer.
    pub fn connect(&mut self, addr: &[u8]) -> io::Result<PeerId> {
        if self.peers.len() >= self.cfg.max_peers {
            return Err(io::Error::new(io::ErrorKind::OutOfMemory, "max_peers reached"));
        }
        let sock = sys::connect(addr)?;
        let cred = sys::peer_cred(&sock)?;
        if cred.uid != sys::euid() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("port at that address runs as uid {}", cred.uid),
            ));
        }
        let (seg, memfd) = Segment::create(self.cfg.ring_bytes)?;
        let (probe_addr, probe_value) = cma::probe_word();
        let hello = Hello {
            kind: Kind::Hello,
            ring_bytes: self.cfg.ring_bytes as u32,
            probe_addr,
            probe_value,
        };
        sys::send_with_fds(&sock, &hello.encode(), &[memfd.as_raw_fd(), self.wake.as_raw_fd()])?;
        let id = self.peers.insert(Peer {
            seg: Some(seg),
            wake: None,
            sock,
            cred,
            cma: Cma::Unknown,
            state: State::AwaitWelcome,
            inbound: false,
            wake_pending: false,
        });
        if let Err(e) = self.epoll.add(self.peers[id].sock.as_raw_fd(), id as u64) {
            self.peers.remove(id);
            return Err(e);
        }
        Ok(PeerId(id))
    }

    /// Writes one frame (header of at most 64 bytes, payload) to `peer`'s
    /// ring, and wakes it if it sleeps.
    pub fn send(&mut self, peer: PeerId, header: &[u8], payload: &[u8]) -> Result<(), SendError> {
        let p = self.peers.get_mut(peer.0).ok_or(SendError::NoPeer)?;
        let seg = p.seg.as_mut().ok_or(SendError::NotReady)?;
        match seg.tx.send(header, payload) {
            Ok(false) => Ok(()),
            Ok(true) => {
                match &p.wake {
                    Some(w) => {
                        if let Err(e) = sys::eventfd_signal(w.as_raw_fd()) {
                            xfer_core::warn_limited!(peer = peer.0, error = %e, "shm: wake-up signal failed");
                        }
                    }
                    None => {
                        p.wake_pending = true;
                        // The peer sleeps, and only its welcome carries the
                        // descriptor that wakes it: read it now, or a sender
                        // that polls no more would leave the frame unseen.
                        if p.state == State::AwaitWelcome {
                            self.early_welcome(peer.0);
                        }
                    }
                }
                Ok(())
            }
            Err(Refused::Full) => Err(SendError::Full),
            Err(Refused::TooLarge) => Err(SendError::TooLarge),
            Err(Refused::Corrupt(c)) => {
                if !self.dead.iter().any(|(i, _)| *i == peer.0) {
                    self.dead.push((peer.0, DownReason::Corrupt(c)));
                }
                self.service_due = true;
                Err(SendError::Broken)
            }
        }
    }

    /// What the port knows of `peer`.
    pub fn peer_info(&self, peer: PeerId) -> Option<PeerInfo> {
        self.peers.get(peer.0).map(|p| PeerInfo {
            pid: p.cred.pid,
            uid: p.cred.uid,
            inbound: p.inbound,
            up: p.state == State::Up,
            cma: p.cma,
            ring_bytes: p.seg.as_ref().map_or(0, |s| s.ring_bytes),
        })
    }

    /// Closes the pair with `peer` (it sees [`DownReason::Closed`]); no
    /// event is reported here.
    pub fn close(&mut self, peer: PeerId) {
        if let Some(p) = self.peers.try_remove(peer.0) {
            self.epoll.remove(p.sock.as_raw_fd());
        }
    }

    /// Pulls `dst.len()` bytes at `remote` in `peer`'s address space
    /// (single copy, `process_vm_readv`).
    pub fn cma_read(&self, peer: PeerId, remote: u64, dst: &mut [u8]) -> Result<(), CmaError> {
        let pid = self.cma_pid(peer)?;
        cma::read(pid, remote, dst)
    }

    /// Pushes `src` to `remote` in `peer`'s address space (`process_vm_writev`).
    pub fn cma_write(&self, peer: PeerId, remote: u64, src: &[u8]) -> Result<(), CmaError> {
        let pid = self.cma_pid(peer)?;
        cma::write(pid, remote, src)
    }

    /// Pushes `src` to `remote` in `peer`'s address space under a grant
    /// of the peer's with `stamp` ([`crate::fence`]); [`CmaError::Revoked`]
    /// (nothing copied) when the peer revoked it.
    pub fn granted_write(&mut self, peer: PeerId, stamp: u64, remote: u64, src: &[u8]) -> Result<(), CmaError> {
        let (pid, seg) = self.granting(peer)?;
        seg.guarded(stamp, || cma::write(pid, remote, src))
            .unwrap_or(Err(CmaError::Revoked))
    }

    /// Pulls `dst.len()` bytes at `remote` in `peer`'s address space under
    /// a grant of the peer's with `stamp`, as [`granted_write`](Self::granted_write).
    pub fn granted_read(&mut self, peer: PeerId, stamp: u64, remote: u64, dst: &mut [u8]) -> Result<(), CmaError> {
        let (pid, seg) = self.granting(peer)?;
        seg.guarded(stamp, || cma::read(pid, remote, dst))
            .unwrap_or(Err(CmaError::Revoked))
    }

    /// The process and the segment (whose fence guards a grant) of
    /// `peer`, for a copy under its grant.
    fn granting(&mut self, peer: PeerId) -> Result<(libc::pid_t, &Segment), CmaError> {
        self.welcomed(peer);
        let pid = self.cma_pid(peer)?;
        let seg = self
            .peers
            .get(peer.0)
            .and_then(|p| p.seg.as_ref())
            .ok_or(CmaError::NoPeer)?;
        Ok((pid, seg))
    }

    /// Lets peers that connect from now on copy natively into this side's
    /// regions under the grants of the domain owning `fences`: each
    /// peer's segment gets its target fence registered there.
    pub fn serve_grants(&mut self, fences: Arc<Fences>) {
        self.fences = Some(fences);
    }

    /// Reads `peer`'s welcome if this side still waits for it: a grant
    /// came through the ring after the peer sent it, and its probe says
    /// whether this side may attach.
    fn welcomed(&mut self, peer: PeerId) {
        if self.peers.get(peer.0).is_some_and(|p| p.state == State::AwaitWelcome) {
            self.early_welcome(peer.0);
        }
    }

    fn cma_pid(&self, peer: PeerId) -> Result<libc::pid_t, CmaError> {
        let p = self
            .peers
            .get(peer.0)
            .filter(|p| p.state == State::Up)
            .ok_or(CmaError::NoPeer)?;
        match p.cma {
            Cma::Available => Ok(p.cred.pid),
            other => Err(CmaError::NotAvailable(other)),
        }
    }

    /// The wait descriptor: readable when a sleeping port has something to
    /// do. Use it as [`wait`](Self::wait) does: [`prepare_wait`](Self::prepare_wait)
    /// first, block only if it says so, then [`finish_wait`](Self::finish_wait).
    pub fn wait_fd(&self) -> std::os::fd::RawFd {
        self.epoll.raw()
    }

    /// Declares that this port is going to block on its wait descriptor:
    /// `false` when it must not (a frame is already waiting, or a ring that
    /// refused a frame as full has room for it now), in which case the
    /// declaration is withdrawn. Peers that write a frame after it
    /// signal the port's eventfd.
    pub fn prepare_wait(&mut self) -> bool {
        if self.service_due || !self.dead.is_empty() {
            return false;
        }
        for (_, p) in self.peers.iter() {
            if let Some(seg) = &p.seg {
                seg.rx.set_sleeping(true);
                seg.tx.want_space();
            }
        }
        // Pairs with the producer's fence after its stamp, and with the
        // consumer's before it reads `space_wanted` (ring.rs).
        fence(Ordering::SeqCst);
        let ready = self
            .peers
            .iter()
            .any(|(_, p)| p.seg.as_ref().is_some_and(|s| s.rx.ready() || s.tx.room_appeared()));
        if ready {
            self.finish_wait();
        }
        !ready
    }

    /// Withdraws the declaration of [`prepare_wait`](Self::prepare_wait)
    /// after the wait; the next `poll` reads the epoll set.
    pub fn finish_wait(&mut self) {
        for (_, p) in self.peers.iter() {
            if let Some(seg) = &p.seg {
                seg.rx.set_sleeping(false);
            }
        }
        self.service_due = true;
    }

    /// A frame to `peer` was refused as full after [`prepare_wait`]
    /// declared this port asleep: asks for the consumer's signal now, as
    /// `prepare_wait` does for the rings that refused a frame before it,
    /// and makes the wait descriptor readable at once if the room appeared
    /// before the consumer could see the request.
    ///
    /// [`prepare_wait`]: Self::prepare_wait
    pub fn want_space_now(&self, peer: PeerId) {
        let Some(seg) = self.peers.get(peer.0).and_then(|p| p.seg.as_ref()) else {
            return;
        };
        seg.tx.want_space();
        // Pairs with the consumer's fence before it reads `space_wanted`.
        fence(Ordering::SeqCst);
        if seg.tx.room_appeared() {
            self.wake_self();
        }
    }

    /// Makes the wait descriptor readable (a caller about to block on it
    /// wakes at once).
    pub fn wake_self(&self) {
        if let Err(e) = sys::eventfd_signal(self.wake.as_raw_fd()) {
            xfer_core::warn_limited!(error = %e, "shm: self wake-up failed");
        }
    }

    /// Blocks until a frame, a connection or a peer event may be waiting,
    /// or `timeout` passed (`None`: no limit). Does not spin.
    pub fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        if !self.prepare_wait() {
            return Ok(());
        }
        let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as i32);
        let mut tokens = std::mem::take(&mut self.tokens);
        let r = self.epoll.wait(&mut tokens, ms);
        self.tokens = tokens;
        self.finish_wait();
        r
    }

    /// Reads every peer's ring (at most [`BUDGET`] frames each) and, when
    /// due, the epoll set; reports what happened through `f`. Returns the
    /// number of frames delivered.
    pub fn poll(&mut self, mut f: impl FnMut(Event<'_>)) -> usize {
        self.poll_with(&mut f)
    }

    /// [`poll`](Self::poll) with a [`Sink`] that may hold a peer's frames
    /// back (a peer it owes an answer it could not send yet).
    pub fn poll_with(&mut self, f: &mut impl Sink) -> usize {
        self.polls = self.polls.wrapping_add(1);
        if self.service_due || self.polls.is_multiple_of(SERVICE_EVERY) {
            self.service_due = false;
            self.service(f);
        }
        if !self.ups.is_empty() {
            for id in std::mem::take(&mut self.ups) {
                if self.peers.contains(id) {
                    f.event(Event::Up { peer: PeerId(id) });
                }
            }
        }
        let mut n = 0;
        for (id, p) in self.peers.iter_mut() {
            let Some(seg) = p.seg.as_mut() else { continue };
            let mut got = 0;
            for _ in 0..BUDGET {
                // An empty ring (most polls) is one load and compare, before
                // the sink is asked or the entry decoded.
                if !seg.rx.ready() || !f.ready(PeerId(id)) {
                    break;
                }
                match seg.rx.consume(|frame| {
                    f.event(Event::Frame {
                        peer: PeerId(id),
                        frame,
                    })
                }) {
                    Ok(Some(())) => got += 1,
                    Ok(None) => break,
                    Err(c) => {
                        if !self.dead.iter().any(|(i, _)| *i == id) {
                            self.dead.push((id, DownReason::Corrupt(c)));
                        }
                        break;
                    }
                }
            }
            if got != 0 && seg.rx.space_wanted() {
                if let Some(w) = &p.wake {
                    let _ = sys::eventfd_signal(w.as_raw_fd());
                }
            }
            n += got;
        }
        self.report_dead(f);
        n
    }

    /// Writes an entry with word 1 `w1` to `peer`'s ring, as a hostile peer
    /// would (tests of the peer's checks).
    #[doc(hidden)]
    pub fn send_raw_entry(&mut self, peer: PeerId, w1: u64) {
        if let Some(seg) = self.peers.get_mut(peer.0).and_then(|p| p.seg.as_mut()) {
            seg.tx.send_raw(w1);
        }
        if let Some(w) = self.peers.get(peer.0).and_then(|p| p.wake.as_ref()) {
            let _ = sys::eventfd_signal(w.as_raw_fd());
        }
    }

    /// Reads `id`'s welcome if it has come (outside `poll`: what it
    /// starts is reported by the next one).
    fn early_welcome(&mut self, id: usize) {
        let own_wake = self.wake.as_raw_fd();
        let Some(p) = self.peers.get_mut(id) else { return };
        let mut buf = [0u8; 64];
        let outcome = match sys::recv_with_fds(&p.sock, &mut buf) {
            Ok(None) => return,
            Ok(Some(r)) if r.len == 0 => Err(DownReason::Handshake(
                "the peer closed before welcoming this side".into(),
            )),
            Ok(Some(r)) => handshake(
                p,
                &buf[..r.len.min(buf.len())],
                r.fds,
                r.truncated,
                own_wake,
                &self.cfg,
                self.fences.as_ref(),
            ),
            Err(e) => Err(DownReason::Os(e)),
        };
        match outcome {
            Ok(()) => self.ups.push(id),
            Err(reason) => self.dead.push((id, reason)),
        }
        self.service_due = true;
    }

    /// Removes the peers found dead and reports them.
    fn report_dead(&mut self, f: &mut impl Sink) {
        if self.dead.is_empty() {
            return;
        }
        for (id, reason) in std::mem::take(&mut self.dead) {
            let Some(p) = self.peers.try_remove(id) else { continue };
            self.epoll.remove(p.sock.as_raw_fd());
            // An accepted peer that delivered nothing goes silently.
            let silent = p.inbound && p.state == State::AwaitHello && p.seg.is_none();
            match &reason {
                DownReason::Closed => tracing::debug!(peer = id, pid = p.cred.pid, "shm: peer closed"),
                r => xfer_core::warn_limited!(peer = id, pid = p.cred.pid, reason = %r, "shm: peer down"),
            }
            drop(p);
            if !silent {
                f.event(Event::Down {
                    peer: PeerId(id),
                    reason,
                });
            }
        }
    }

    /// Reads the epoll set without blocking: accepts, handshakes, closes.
    fn service(&mut self, f: &mut impl Sink) {
        let mut tokens = std::mem::take(&mut self.tokens);
        if let Err(e) = self.epoll.wait(&mut tokens, 0) {
            xfer_core::warn_limited!(error = %e, "shm: epoll_wait failed");
        }
        for &t in &tokens {
            match t {
                LISTENER => self.accept(),
                WAKE => sys::eventfd_drain(self.wake.as_raw_fd()),
                id => self.socket_ready(id as usize, f),
            }
        }
        self.tokens = tokens;
    }

    fn accept(&mut self) {
        for _ in 0..16 {
            let sock = match sys::accept(&self.listener) {
                Ok(Some(s)) => s,
                Ok(None) => return,
                Err(e) => {
                    xfer_core::warn_limited!(error = %e, "shm: accept failed");
                    return;
                }
            };
            let cred = match sys::peer_cred(&sock) {
                Ok(c) => c,
                Err(_) => continue,
            };
            if cred.uid != sys::euid() || self.peers.len() >= self.cfg.max_peers {
                xfer_core::warn_limited!(
                    pid = cred.pid,
                    uid = cred.uid,
                    "shm: connection refused (other user or max_peers)"
                );
                continue;
            }
            let raw = sock.as_raw_fd();
            let id = self.peers.insert(Peer {
                seg: None,
                wake: None,
                sock,
                cred,
                cma: Cma::Unknown,
                state: State::AwaitHello,
                inbound: true,
                wake_pending: false,
            });
            if self.epoll.add(raw, id as u64).is_err() {
                self.peers.remove(id);
            }
        }
    }

    fn socket_ready(&mut self, id: usize, f: &mut impl Sink) {
        let Some(p) = self.peers.get_mut(id) else { return };
        let mut buf = [0u8; 64];
        let outcome = match sys::recv_with_fds(&p.sock, &mut buf) {
            Ok(None) => return,
            // Closed before it welcomed us: it refused (max_peers, another
            // user) or died at once; either way it was never reachable.
            Ok(Some(r)) if r.len == 0 && p.state == State::AwaitWelcome => Err(DownReason::Handshake(
                "the peer closed before welcoming this side".into(),
            )),
            Ok(Some(r)) if r.len == 0 => Err(DownReason::Closed),
            Ok(Some(r)) => handshake(
                p,
                &buf[..r.len.min(buf.len())],
                r.fds,
                r.truncated,
                self.wake.as_raw_fd(),
                &self.cfg,
                self.fences.as_ref(),
            ),
            Err(e) if e.raw_os_error() == Some(libc::ECONNRESET) => Err(DownReason::Closed),
            Err(e) => Err(DownReason::Os(e)),
        };
        match outcome {
            Ok(()) => f.event(Event::Up { peer: PeerId(id) }),
            Err(reason) => {
                // Deliver what the peer wrote before it went.
                if let Some(seg) = p.seg.as_mut() {
                    loop {
                        match seg.rx.consume(|frame| {
                            f.event(Event::Frame {
                                peer: PeerId(id),
                                frame,
                            })
                        }) {
                            Ok(Some(())) => {}
                            Ok(None) => break,
                            Err(c) => {
                                self.dead.push((id, DownReason::Corrupt(c)));
                                return;
                            }
                        }
                    }
                }
                self.dead.push((id, reason));
            }
        }
    }
}

/// Takes a handshake message on `p`'s socket.
fn handshake(
    p: &mut Peer,
    msg: &[u8],
    fds: Vec<OwnedFd>,
    truncated: bool,
    own_wake: std::os::fd::RawFd,
    cfg: &ShmConfig,
    fences: Option<&Arc<Fences>>,
) -> Result<(), DownReason> {
    let want = match p.state {
        State::AwaitHello => Kind::Hello,
        State::AwaitWelcome => Kind::Welcome,
        State::Up => return Err(DownReason::Handshake("message after the handshake".into())),
    };
    let bad = |s: String| DownReason::Handshake(s);
    if truncated || msg.len() > hello::LEN {
        return Err(bad("handshake message too long".into()));
    }
    let h = Hello::decode(msg, want).map_err(|e| bad(e.to_string()))?;
    if fds.len() != want.fds() {
        return Err(bad(format!(
            "{} descriptors with the handshake (expected {})",
            fds.len(),
            want.fds()
        )));
    }
    // Everything the peer sent is checked before anything is answered.
    let mut fds = fds.into_iter();
    let seg = match want {
        Kind::Hello => {
            let memfd = fds.next().ok_or_else(|| bad("no memfd".into()))?;
            let seg = Segment::adopt(&memfd, h.ring_bytes as usize, cfg.ring_bytes).map_err(|e| bad(e.to_string()))?;
            Some(seg)
        }
        Kind::Welcome => None,
    };
    let wake = fds.next().ok_or_else(|| bad("no eventfd".into()))?;
    if !sys::is_eventfd(&wake) {
        return Err(bad("the wake-up descriptor is not an eventfd".into()));
    }
    sys::set_nonblocking(&wake).map_err(DownReason::Os)?;
    if let Some(seg) = seg {
        // Mapped before the welcome goes: a peer that wrote frames and left
        // at once still has them delivered (the close drains the ring).
        p.seg = Some(seg);
        let (probe_addr, probe_value) = cma::probe_word();
        let welcome = Hello {
            kind: Kind::Welcome,
            ring_bytes: 0,
            probe_addr,
            probe_value,
        };
        sys::send_with_fds(&p.sock, &welcome.encode(), &[own_wake]).map_err(|e| match e.raw_os_error() {
            Some(libc::EPIPE | libc::ECONNRESET) => DownReason::Closed,
            _ => DownReason::Os(e),
        })?;
    }
    p.cma = cma::probe(p.cred.pid, h.probe_addr, h.probe_value);
    if p.wake_pending {
        p.wake_pending = false;
        let _ = sys::eventfd_signal(wake.as_raw_fd());
    }
    p.wake = Some(wake);
    p.state = State::Up;
    if let (true, Some(fences), Some(seg)) = (cfg.cma, fences, p.seg.as_mut()) {
        // The peer may copy into this side's regions under its grants.
        seg.open_fence(fences, p.cred.pid);
    }
    tracing::debug!(pid = p.cred.pid, cma = %p.cma, inbound = p.inbound, "shm: peer up");
    if p.cma != Cma::Available {
        xfer_core::warn_limited!(pid = p.cred.pid, cma = %p.cma, "shm: cross-memory attach unusable towards this peer");
    }
    Ok(())
}
