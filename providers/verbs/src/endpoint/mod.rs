//! The verbs endpoint: reliable and connectionless to the user (RDM), one RC
//! queue pair per peer underneath, made on first use through rdma_cm.
//!
//! - [`connect`]: the rdma_cm state machine, driven from progress, including
//!   two endpoints connecting to each other at once.
//! - [`post`]: operations onto a queue pair (inline, copied or zero-copy
//!   through the MR cache), or into the peer's queue while there is no room.
//! - [`wc`]: work completions: retiring sends, receives out of the SRQ
//!   (eager data, rendezvous RTS/FIN, write-data notices), flush errors.
//! - [`keepalive`]: probes connections on which operations wait for a
//!   quiet peer, so that a dead link ends them.
//! - [`credit`]: what a peer may send us (messages: our SRQ buffers;
//!   eager bytes: what we hold unexpected), and its return.
//! - [`stall`]: the progress timeout: operations waiting on a peer whose
//!   process stopped while its device still answers end with `Stalled`.
//!
//! Every QP sends and receives through the endpoint's one completion queue
//! and one SRQ, so receive memory does not grow with the number of peers.

mod admit;
pub(crate) mod connect;
mod credit;
mod keepalive;
mod post;
mod qpn;
mod stall;
mod wc;

pub(crate) use credit::Credit;

use std::collections::VecDeque;
use std::net::SocketAddrV4;
use std::os::fd::RawFd;
use std::sync::Arc;

use slab::Slab;
use xfer_core::unstable::addr::{Address, AvTable, PeerAddr};
use xfer_core::unstable::attr::EndpointAttr;
use xfer_core::unstable::complete::{self, Arrival};
use xfer_core::unstable::event::{PeerEvent, PeerEvents};
use xfer_core::unstable::hash::FastMap;
use xfer_core::unstable::mr::CacheRef;
use xfer_core::unstable::peek::{Claim, Peeked};
use xfer_core::unstable::provider::{Ctx, EndpointProvider, RecvOp, Rejected, RmaOp, SendOp};
use xfer_core::unstable::rdm::{Outstanding, Receives};
use xfer_core::unstable::sys::{Epoll, EMPTY_EVENT, READABLE};
use xfer_core::unstable::tag::RecvSpec;
use xfer_core::{Error, Result};

use crate::cm::{CmId, EventChannel};
use crate::cq::Cq;
use crate::domain::DomainRes;
use crate::name::VerbsName;
use crate::pool::SendPool;
use crate::qp::{QpConfig, RcQp};
use crate::srq::{Srq, SrqConfig};
use crate::wire;
use crate::VerbsAttr;

/// Polls between two looks at the descriptors (CM events, CQ events).
const EPOLL_EVERY: u32 = 64;
/// Work completions taken per `ibv_poll_cq`.
const WC_BATCH: usize = 32;
/// Tag bit of the `wr_id`s (and `posted` keys) of work requests that hold
/// nothing once posted: inline eager sends and inline control messages.
/// They get a number of their own instead of an `ops` entry, so the
/// small-message path inserts and removes nothing per message. Never a slab
/// key (those stay far below), never a receive (`srq::RECV_WR_TAG` is the
/// top bit).
const BARE_WR: usize = 1 << (usize::BITS - 2);
/// epoll tokens.
const TOKEN_CQ: u64 = 1;
const TOKEN_CM: u64 = 2;

/// Counters, for tests and `xfer-info`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct EndpointStats {
    /// Sends that went inline.
    pub inline_sends: u64,
    /// Eager sends copied into a registered send buffer.
    pub copied_sends: u64,
    /// Rendezvous sends (RTS, then the receiver reads).
    pub rndv_sends: u64,
    /// Operations that waited in a peer's queue (no connection or no room).
    pub queued: u64,
    /// Connections established (either side).
    pub connections: u64,
    /// Connection requests refused because ours wins the tie-break.
    pub tie_breaks: u64,
    /// Times the SRQ was refilled.
    pub srq_refills: u64,
    /// Receive buffers posted now.
    pub srq_posted: u32,
    /// Largest number of send-queue slots in use on any QP.
    pub max_sq_outstanding: u32,
    /// Signaled sends posted.
    pub signaled: u64,
    /// Unsignaled sends posted.
    pub unsignaled: u64,
    /// Keepalive probes posted (zero-length RDMA WRITEs).
    pub keepalive_probes: u64,
    /// Connections with waiting work ended by the keepalive because the
    /// local port stayed down.
    pub keepalive_port_down: u64,
    /// The RDM layer's counters (credit, requests, receive memory), under
    /// the names every transport reports.
    pub rdm: xfer_core::unstable::rdm::Counters,
    /// Connection requests refused for want of a job key proof.
    pub admission_refused: u64,
    /// Connection requests answered with a job key challenge.
    pub admission_challenges: u64,
}

/// An operation waiting for its peer's connection or for room.
pub(crate) enum Tx {
    /// A message send; `silent` for inject (no completion, even on error).
    Send { op: SendOp, silent: bool },
    /// An RMA operation; `silent` for inject-write.
    Rma { op: RmaOp, silent: bool },
    /// The receiver's side of a rendezvous: read the sender's buffer.
    Read(Box<ReadJob>),
    /// Tell a rendezvous sender we are done with its buffer, on `conn`,
    /// the connection its RTS came on (dropped if that one is gone).
    Fin { token: u64, status: u32, conn: usize },
}

/// A matched rendezvous receive waiting to read the sender's data.
pub(crate) struct ReadJob {
    pub(crate) recv: RecvOp,
    pub(crate) arrival: Arrival,
    /// The sender's rendezvous token (echoed in the FIN).
    pub(crate) token: u64,
    pub(crate) raddr: u64,
    pub(crate) rkey: u32,
    /// The connection the RTS came on: the READ and the FIN go on it, and
    /// on no other (the sender fails the rendezvous when that connection
    /// dies, and may reuse its buffer and operation id).
    pub(crate) conn: usize,
}

/// What a posted work request stands for, until the send queue retires it.
pub(crate) enum Wr {
    /// An eager send (already completed: its payload went into `slot`), a
    /// control message (RTS, FIN, write-data) or a tail signal: only the
    /// send buffer, if any, waits for the send queue. Inline ones have no
    /// entry at all ([`BARE_WR`]).
    Ctrl { slot: Option<u32> },
    /// An RMA write or read of the user's buffer.
    Rma {
        op: RmaOp,
        silent: bool,
        mr: Option<CacheRef>,
        slot: Option<u32>,
        /// Posted signaled.
        signaled: bool,
    },
    /// A rendezvous READ into the receive buffer.
    Read { job: Box<ReadJob>, mr: Option<CacheRef> },
    /// A keepalive probe (signaled zero-length RDMA WRITE): its completion
    /// is nobody's.
    Probe,
}

impl Wr {
    /// Whether it was posted signaled, so that its success has a completion
    /// of its own (rendezvous READs always; RMA when a completion is due).
    pub(crate) fn signaled(&self) -> bool {
        match self {
            Wr::Ctrl { .. } => false,
            Wr::Rma { signaled, .. } => *signaled,
            Wr::Read { .. } | Wr::Probe => true,
        }
    }
}

/// A rendezvous send whose RTS went out; it ends with the receiver's FIN.
pub(crate) struct RndvSend {
    pub(crate) op: SendOp,
    /// `None` when the buffer came with its region's keys.
    pub(crate) mr: Option<CacheRef>,
    pub(crate) conn: usize,
}

/// What a verbs endpoint needs to read an unexpected rendezvous message
/// once a receive matches it: the sender's buffer and key, the rendezvous
/// token to finish, and the connection the request came on.
pub(crate) struct RtsTicket {
    pub(crate) token: u64,
    pub(crate) addr: u64,
    pub(crate) rkey: u32,
    pub(crate) conn: usize,
    /// The connection's serial (its slab key may be reused).
    pub(crate) serial: u64,
}

/// A message that arrived before its receive was posted (core's entry, with
/// the verbs rendezvous ticket).
pub(crate) type Unexpected = xfer_core::unstable::rdm::Unexpected<RtsTicket>;

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Active: waiting for ADDR_RESOLVED.
    Resolving,
    /// Active: waiting for ROUTE_RESOLVED.
    Routing,
    /// Active: request sent, waiting for CONNECT_RESPONSE.
    Connecting,
    /// Passive: accepted, waiting for ESTABLISHED.
    Accepting,
    /// Carrying traffic.
    Ready,
    /// Failed or closed; kept until its QP number cannot be confused.
    Dead,
}

/// One RC connection to a peer.
pub(crate) struct Conn {
    pub(crate) peer: Address,
    pub(crate) state: State,
    /// Whether we initiated it.
    pub(crate) active: bool,
    /// Created once the route is known (active) or at once (passive).
    pub(crate) qp: Option<RcQp>,
    /// Work requests on the send queue, oldest first (`ops` keys).
    pub(crate) posted: VecDeque<usize>,
    /// When it was created (its establishment is bounded by
    /// `connect_timeout_ms`).
    pub(crate) since: std::time::Instant,
    /// When it died (it is freed a while later).
    pub(crate) dead_since: Option<std::time::Instant>,
    /// Flow control both ways ([`credit`]).
    pub(crate) credit: Credit,
    /// The peer's requests to send kept unmatched here, by rendezvous id.
    pub(crate) requests: xfer_core::unstable::rdm::Requests,
    /// Its share of the endpoint's receive memory.
    pub(crate) share: xfer_core::unstable::rdm::Share,
    /// How long its peer's process has been silent (the progress timeout).
    pub(crate) silence: xfer_core::unstable::rdm::stall::Silence,
    /// The peer's handle in the AV when last looked up: tried first (one
    /// index and a compare) before hashing its name per message.
    pub(crate) src_hint: PeerAddr,
    /// Whether its request carried a job key proof (active side).
    pub(crate) proven: bool,
    /// Tells this connection from a later one under the same slab key.
    pub(crate) serial: u64,
    // Dropped after the QP (field order): destroys the rdma_cm id.
    pub(crate) id: CmId,
}

/// What the endpoint knows of one peer (by name).
#[derive(Default)]
pub(crate) struct Peer {
    /// The connection carrying traffic to it, in whatever state.
    pub(crate) conn: Option<usize>,
    /// Operations waiting for the connection or for room, in post order.
    pub(crate) queue: VecDeque<Tx>,
    /// Connection attempts refused by the tie-break, for the retry timer.
    pub(crate) retries: u32,
    /// When to try connecting again (after a tie-break refusal).
    pub(crate) retry_at: Option<std::time::Instant>,
    /// The challenge its last refusal carried: the next request answers it.
    pub(crate) challenge: Option<[u8; 16]>,
}

/// The verbs endpoint.
pub struct VerbsEndpoint {
    res: Arc<DomainRes>,
    attr: EndpointAttr,
    name: VerbsName,
    addr: Address,
    qp_cfg: QpConfig,
    /// Largest eager payload: what fits a bounce buffer after the header.
    eager_max: usize,
    peers: FastMap<Address, Peer>,
    /// Peers with queued operations, to flush in progress.
    backlog: Vec<Address>,
    conns: Slab<Conn>,
    by_qpn: qpn::QpnMap,
    by_id: FastMap<usize, usize>,
    /// Posted work requests by `wr_id`.
    ops: Slab<Wr>,
    /// The last [`BARE_WR`] number handed out.
    bare: usize,
    /// Rendezvous sends waiting for their FIN, by the token their RTS
    /// carried.
    rndv: Outstanding<RndvSend>,
    /// Posted and unexpected receives, tagged and untagged (core's RDM layer).
    recvs: Receives<RtsTicket>,
    scratch: Vec<u8>,
    /// Work completions of one `ibv_poll_cq`.
    wcs: Vec<crate::cq::Wc>,
    stats: EndpointStats,
    /// Peer join/leave events, when asked for (`EndpointAttr::peer_events`).
    peer_events: PeerEvents,
    spins: u32,
    /// Connections not yet ready (progress looks at CM events every time).
    connecting: u32,
    /// Keepalive interval (`None`: off) and when connections are next
    /// looked at for it.
    keepalive_every: Option<std::time::Duration>,
    keepalive_at: std::time::Instant,
    /// Consecutive keepalive ticks that found the port down.
    port_down_ticks: u32,
    /// Whether the CQ's notification is armed: only for a blocking wait
    /// (`prepare_wait`), so busy polling costs no completion events.
    notify_armed: bool,
    /// `XFER_VERBS_CREDIT_MSGS` and `XFER_VERBS_EAGER_CREDIT`, at least the
    /// initial credit.
    credit_msgs: u32,
    eager_credit: u64,
    /// Connections we owe credit to.
    owing: Vec<usize>,
    /// What peers may make this endpoint hold, against `EndpointAttr::rx_memory`.
    account: xfer_core::unstable::rdm::Account,
    /// The next connection's serial.
    serials: u64,
    /// The progress timeout (`EndpointAttr::progress_timeout_ms`).
    watch: xfer_core::unstable::rdm::stall::Watch,
    /// Job key challenges sent and not yet answered.
    challenges: admit::Challenges,
    // Verbs objects; the connections above (their QPs and ids) drop first.
    pool: SendPool,
    srq: Srq,
    cq: Arc<Cq>,
    /// Kept open: dropping it stops listening.
    _listener: CmId,
    chan: EventChannel,
    epoll: Epoll,
}

impl VerbsEndpoint {
    /// Opens an endpoint: CQ with channel, SRQ, send pool, rdma_cm listener
    /// on the domain's address.
    pub(crate) fn open(res: Arc<DomainRes>, attr: &EndpointAttr) -> Result<VerbsEndpoint> {
        if attr.rma_events {
            // The HCA applies a peer's RDMA READ and WRITE without telling
            // this process: promising events for them would be a lie.
            return Err(Error::NotSupported(
                "RMA events (XFER_RMA_EVENTS): a verbs target does not see RDMA applied to it",
            ));
        }
        if let Some((key, _)) = attr.params.under(VerbsAttr::PREFIX).next() {
            // The verbs settings size the domain's device resources (SRQ,
            // CQs, QP limits): one endpoint cannot have its own.
            return Err(Error::InvalidSetting(
                format!("{key} is a verbs domain setting: set it in the domain's attributes (DomainAttr::params)")
                    .into(),
            ));
        }
        let va = &res.attr;
        let cqe = va.cq_size.min(res.dev.max_cqe).max(64);
        let cq = Cq::new(res.pd.context(), cqe, true)?;
        let mut scfg = SrqConfig::from_attr(va);
        scfg.size = scfg.size.min(res.dev.max_srq_wr).max(1);
        scfg.low_watermark = scfg.low_watermark.min(scfg.size);
        let srq = Srq::new(&res.pd, scfg)?;
        let mut qp_cfg = QpConfig::from_attr(va);
        qp_cfg.sq_depth = qp_cfg.sq_depth.min(res.dev.max_qp_wr).max(2);
        let slot = scfg.buf_size as usize;
        if slot < wire::RTS_LEN {
            return Err(Error::InvalidArgument(
                "XFER_VERBS_SRQ_BUF_SIZE is smaller than a control message",
            ));
        }
        let pool = SendPool::new(&res.pd, qp_cfg.sq_depth.saturating_mul(2), slot)?;
        let chan = EventChannel::new()?;
        let listener = CmId::new(&chan)?;
        listener.listen(SocketAddrV4::new(res.ip, 0), 1024)?;
        let name = VerbsName {
            addr: SocketAddrV4::new(res.ip, listener.src_port()),
            nonce: nonce(),
        };
        let epoll = Epoll::new()?;
        let cq_fd = cq.fd().ok_or(Error::Internal("CQ without a channel"))?;
        epoll.add(cq_fd, READABLE, TOKEN_CQ)?;
        epoll.add(chan.fd(), READABLE, TOKEN_CM)?;
        let eager_max = (slot - wire::HDR).min(attr.rndv_threshold);
        tracing::debug!(name = %name.addr, eager_max, sq = qp_cfg.sq_depth, srq = scfg.size, "verbs endpoint open");
        Ok(VerbsEndpoint {
            addr: name.address(),
            name,
            attr: attr.clone(),
            qp_cfg,
            eager_max,
            peers: FastMap::default(),
            backlog: Vec::new(),
            conns: Slab::new(),
            by_qpn: qpn::QpnMap::default(),
            by_id: FastMap::default(),
            ops: Slab::new(),
            bare: 0,
            rndv: Outstanding::new(),
            recvs: Receives::new(),
            scratch: Vec::with_capacity(slot),
            wcs: Vec::new(),
            stats: EndpointStats::default(),
            peer_events: PeerEvents::new(attr.peer_events),
            spins: 0,
            connecting: 0,
            keepalive_every: Some(std::time::Duration::from_millis(va.keepalive_ms)).filter(|d| !d.is_zero()),
            keepalive_at: std::time::Instant::now(),
            port_down_ticks: 0,
            notify_armed: false,
            credit_msgs: va.credit_msgs.max(credit::INIT_MSGS),
            eager_credit: va.eager_credit.max(credit::INIT_BYTES),
            owing: Vec::new(),
            account: xfer_core::unstable::rdm::Account::new(attr.rx_memory),
            serials: 0,
            watch: xfer_core::unstable::rdm::stall::Watch::new(attr.progress_timeout_ms),
            challenges: admit::Challenges::default(),
            pool,
            srq,
            cq,
            _listener: listener,
            chan,
            epoll,
            res,
        })
    }

    /// Counters of this endpoint.
    pub fn stats(&self) -> EndpointStats {
        let mut s = self.stats;
        s.srq_refills = self.srq.refills();
        s.srq_posted = self.srq.posted();
        for (_, c) in &self.conns {
            if let Some(qp) = &c.qp {
                let q = qp.stats();
                s.max_sq_outstanding = s.max_sq_outstanding.max(q.max_outstanding);
                s.signaled += q.signaled;
                s.unsignaled += q.unsignaled;
            }
        }
        s
    }

    /// The peer's name for an address-vector handle.
    fn dest(cx: &Ctx<'_>, peer: PeerAddr) -> Result<Address> {
        cx.av.lookup(peer).copied().ok_or(Error::AddressNotAvailable)
    }

    /// Whether a successful operation reports a completion.
    fn wants_completion(&self, silent: bool, asked: bool) -> bool {
        !silent && (asked || !self.attr.selective_completion)
    }
}

fn nonce() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: b is valid for 8 writable bytes.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n == 8 {
        u64::from_le_bytes(b)
    } else {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        t ^ u64::from(std::process::id()) << 32
    }
}

impl EndpointProvider for VerbsEndpoint {
    fn name(&self) -> Address {
        self.addr
    }

    fn send(&mut self, cx: &mut Ctx<'_>, op: SendOp) -> std::result::Result<(), Rejected<SendOp>> {
        let dest = match Self::dest(cx, op.peer) {
            Ok(d) => d,
            Err(e) => return Err(Rejected::new(e, op)),
        };
        self.submit(cx, dest, Tx::Send { op, silent: false });
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
        self.attr.check_inject(payload.len())?;
        let dest = Self::dest(cx, peer)?;
        self.inject_credit(dest, payload.len())?;
        let op = SendOp {
            peer,
            tag,
            data,
            buf: payload.to_vec().into(),
            context: 0,
            completion: false,
            level: Default::default(),
        };
        self.submit(cx, dest, Tx::Send { op, silent: true });
        Ok(())
    }

    fn rma(&mut self, cx: &mut Ctx<'_>, op: RmaOp) -> std::result::Result<(), Rejected<RmaOp>> {
        let dest = match Self::dest(cx, op.peer) {
            Ok(d) => d,
            Err(e) => return Err(Rejected::new(e, op)),
        };
        self.submit(cx, dest, Tx::Rma { op, silent: false });
        Ok(())
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
        self.attr.check_inject(payload.len())?;
        let dest = Self::dest(cx, peer)?;
        let op = RmaOp {
            peer,
            kind: xfer_core::RmaKind::Write,
            buf: payload.to_vec().into(),
            addr,
            key,
            data,
            context: 0,
            completion: false,
        };
        self.submit(cx, dest, Tx::Rma { op, silent: true });
        Ok(())
    }

    fn recv(&mut self, cx: &mut Ctx<'_>, op: RecvOp) -> std::result::Result<(), Rejected<RecvOp>> {
        if let Some(hit) = self.recvs.post(cx.av, op, AvTable::reverse) {
            self.deliver(cx, hit.recv, hit.src, hit.tag, hit.msg);
        }
        Ok(())
    }

    fn peek(&mut self, cx: &mut Ctx<'_>, spec: RecvSpec, claim: bool) -> Result<Option<(Peeked, Option<Claim>)>> {
        Ok(self.recvs.peek(cx.av, spec, claim, AvTable::reverse))
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

    fn cancel(&mut self, cx: &mut Ctx<'_>, context: u64) -> Result<()> {
        self.recvs.cancel(&mut cx.cq, context)
    }

    fn progress(&mut self, cx: &mut Ctx<'_>) {
        // Busy polling stays in user space: the descriptors (CM events,
        // completion-channel events) are looked at every EPOLL_EVERY polls,
        // or every time while connections are being made.
        self.poll_cq(cx);
        self.spins += 1;
        if self.spins >= EPOLL_EVERY || self.connecting > 0 {
            self.spins = 0;
            self.check_fds(cx);
        }
        if let Err(e) = self.srq.refill() {
            xfer_core::warn_limited!(error = %e, "refilling the shared receive queue");
        }
        if !self.owing.is_empty() {
            self.return_credit();
        }
        self.flush_backlog(cx);
    }

    fn wait_fd(&self) -> RawFd {
        use std::os::fd::AsRawFd;
        self.epoll.as_raw_fd()
    }

    fn prepare_wait(&mut self, cx: &mut Ctx<'_>) {
        self.check_fds(cx);
        if !self.notify_armed {
            match self.cq.req_notify(false) {
                Ok(()) => self.notify_armed = true,
                Err(e) => xfer_core::warn_limited!(error = %e, "arming the completion queue"),
            }
        }
        // Completions that came before the arming raise no event.
        self.poll_cq(cx);
        // `trywait` does not progress first: the receives its completions
        // freed go back before we sleep, or senders would meet RNR.
        if let Err(e) = self.srq.refill() {
            xfer_core::warn_limited!(error = %e, "refilling the shared receive queue");
        }
        if !self.owing.is_empty() {
            // A sender out of credit would wait for us while we block.
            self.return_credit();
        }
        self.flush_backlog(cx);
    }

    fn close(&mut self, cx: &mut Ctx<'_>) {
        self.shutdown(cx);
        self.peer_events.clear();
    }

    fn peer_event(&mut self) -> Option<PeerEvent> {
        self.peer_events.pop()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = self.stats();
        let cache = self.res.cache().stats();
        let mut v = s.rdm.report(self.recvs.held(), &self.account);
        v.extend([
            ("peer_events_lost", self.peer_events.lost()),
            ("inline_sends", s.inline_sends),
            ("copied_sends", s.copied_sends),
            ("rndv_sends", s.rndv_sends),
            ("queued", s.queued),
            ("connections", s.connections),
            ("tie_breaks", s.tie_breaks),
            ("srq_refills", s.srq_refills),
            ("srq_posted", u64::from(s.srq_posted)),
            // Receive memory: the SRQ's buffers, fixed when the endpoint
            // opens, whatever the number of peers.
            ("recv_buffer_bytes", {
                let c = self.srq.config();
                u64::from(c.size) * u64::from(c.buf_size)
            }),
            ("max_sq_outstanding", u64::from(s.max_sq_outstanding)),
            ("sq_depth", u64::from(self.qp_cfg.sq_depth)),
            ("signaled", s.signaled),
            ("unsignaled", s.unsignaled),
            ("keepalive_probes", s.keepalive_probes),
            ("keepalive_port_down", s.keepalive_port_down),
            ("progress_probes", self.watch.probes),
            ("peers_stalled", self.watch.stalled),
            ("admission_refused", s.admission_refused),
            ("admission_challenges", s.admission_challenges),
            // The domain's registration cache (shared by its endpoints):
            // user buffers of rendezvous and RMA without a region's keys.
            ("mr_cache_hits", cache.hits),
            ("mr_cache_misses", cache.misses),
        ]);
        v
    }
}

impl VerbsEndpoint {
    /// Looks at the CQ channel and the rdma_cm channel without blocking.
    fn check_fds(&mut self, cx: &mut Ctx<'_>) {
        let mut evs = [EMPTY_EVENT; 2];
        let n = match self.epoll.wait(&mut evs, 0) {
            Ok(n) => n,
            Err(e) => {
                xfer_core::warn_limited!(error = %e, "epoll_wait on the verbs endpoint");
                return;
            }
        };
        for ev in &evs[..n] {
            match ev.u64 {
                TOKEN_CQ => {
                    // Consume the event; the next blocking wait re-arms.
                    match self.cq.wait_event(0) {
                        Ok(true) => self.notify_armed = false,
                        Ok(false) => {}
                        Err(e) => xfer_core::warn_limited!(error = %e, "reading the completion channel"),
                    }
                    self.poll_cq(cx);
                }
                TOKEN_CM => self.cm_events(cx),
                _ => {}
            }
        }
        self.retry_timers(cx);
        self.keepalive(cx);
        if self.watch.due() {
            self.check_stalls(cx);
        }
    }

    /// Ends everything: QPs to error (no more DMA), then every operation
    /// completes with `Canceled`.
    fn shutdown(&mut self, cx: &mut Ctx<'_>) {
        let keys: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
        for k in keys {
            self.retire_conn(cx, k, Error::Canceled);
        }
        let queued: Vec<Tx> = self.peers.values_mut().flat_map(|p| p.queue.drain(..)).collect();
        for tx in queued {
            self.fail_tx(cx, tx, Error::Canceled);
        }
        for op in self.recvs.drain_posted() {
            complete::recv_failed(&mut cx.cq, op, Error::Canceled);
        }
    }
}

impl Drop for VerbsEndpoint {
    fn drop(&mut self) {
        // QPs first (they point at the SRQ, CQ and pool), then their ids.
        for (_, c) in self.conns.iter_mut() {
            c.qp = None;
        }
        self.conns.clear();
    }
}
