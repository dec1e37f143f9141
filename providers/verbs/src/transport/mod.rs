//! Verbs as a transport under core's RDM engine (`verbs`): one RC queue
//! pair per connection, made through rdma_cm (`setup`); every QP receives
//! through the endpoint's one SRQ and completes into its one CQ, so receive
//! memory does not grow with the number of peers.
//!
//! A frame is one SEND ([`frame`]): inline when it fits the QP's
//! `max_inline`, else copied into a registered send slot (signaled, so the
//! slot is free again at its completion); inline sends are signaled every
//! `XFER_VERBS_SIGNAL_EVERY`. Arrivals are taken from the CQ in
//! `progress` and lent to the engine straight from the receive buffer,
//! which is posted again at once. No SEND ever meets an empty SRQ: each
//! connection reserves receive slots and the sender spends them
//! ([`credit`]). A rendezvous is pulled by RDMA READ from the sender's
//! buffer, registered through the domain's MR cache (`pull`); the user's
//! RMA goes the same way once the target granted its key, and atomics by
//! `IBV_WR_ATOMIC_*` in the `device` atomic mode (`atomic`).
//!
//! Addresses are verbs endpoint names (`crate::name`) without the provider
//! tag: 4, the IPv4 address, the rdma_cm port, the nonce.

mod atomic;
pub(crate) mod conn;
pub mod credit;
pub mod domain;
pub mod frame;
mod keepalive;
mod mark;
mod pull;
mod qpn;
mod setup;

use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use slab::Slab;
use xfer_core::unstable::hash::FastMap;
use xfer_core::unstable::mr::{CacheRef, MrCache};
use xfer_core::unstable::rdm::transport::{
    Bytes, Cause, ConnId, DeviceAtomic, Event, Events, Exposed, Pulled, Refused, Remote, Transport,
};
use xfer_core::unstable::sys::{WaitSet, EMPTY_EVENT, READABLE};
use xfer_core::{Error, Result};

use crate::cm::{CmId, EventChannel};
use crate::cq::{Cq, Wc};
use crate::device::DeviceAttr;
use crate::mr::VerbsRegistrar;
use crate::name::VerbsName;
use crate::pd::Pd;
use crate::pool::SendPool;
use crate::qp::QpConfig;
use crate::srq::{Srq, SrqConfig};
use crate::VerbsAttr;
use conn::{Conn, Grave, State};
use credit::Budget;

/// Progress calls between two looks at the clock for the descriptors
/// (rdma_cm events, the completion channel, the wake eventfd) while
/// nothing is being made and no wait came before.
const EPOLL_EVERY: u32 = 16;
/// The least time between two looks at the descriptors on those turns. A
/// look is an `epoll_wait`, a system call: a busy-polling waiter made one
/// every 16 turns, several per message, where a message's own path makes
/// none besides its doorbell. A caller that polls slowly (or under
/// valgrind) still looks every 16 turns.
const FDS_EVERY: Duration = Duration::from_micros(100);
/// Work completions taken per `ibv_poll_cq`, and batches per progress.
const WC_BATCH: usize = 32;
const WC_BATCHES: usize = 4;
/// Free receive buffers that make the transport post them at once (one
/// linked `ibv_post_srq_recv`), whatever their connections' credit says.
const REPOST_BATCH: usize = 16;
/// Free receive buffers a progress that finds no completion posts: in a
/// ping-pong that turn is the wait for the reply, so the post is off the
/// messages' path, and a batch of them shares one `ibv_post_srq_recv`.
/// One below a connection's own repost point at the default grant (half a
/// credit return: 8 of 64), so that in a ping-pong the idle turn still
/// posts first, with as few calls as that allows.
const IDLE_REPOST_BATCH: usize = 7;
/// Tag of the `wr_id` of a send that holds a send slot (the slot is the
/// rest); inline sends are 0; receives carry `srq::RECV_WR_TAG` (bit 63).
const SLOT_TAG: u64 = 1 << 62;
/// How long an ended QP may take to flush before it is destroyed anyway.
const GRAVE: Duration = Duration::from_secs(5);

const TOKEN_CQ: u64 = 1;
const TOKEN_CM: u64 = 2;
const TOKEN_WAKE: u64 = 3;

/// The OS error number of `e` (`EIO` for an error that carries none).
fn errno_of(e: &Error) -> i32 {
    match e {
        Error::Os(n) => *n,
        _ => libc::EIO,
    }
}

/// Frees receive buffer `idx` of `srq`, to be posted by the next flush (a
/// function of the SRQ alone, so a caller may hold a connection meanwhile).
#[inline(always)]
fn free_buf(srq: &mut Srq, idx: u32) {
    if let Err(e) = srq.release(idx) {
        xfer_core::warn_limited!(error = %e, "freeing a verbs receive buffer");
    }
}

/// Counters of the transport's own.
#[derive(Debug, Default, Clone, Copy)]
struct Stats {
    connections: u64,
    inline_sends: u64,
    copied_sends: u64,
    credit_frames: u64,
    /// Sends refused for want of the peer's receive slots.
    slot_waits: u64,
    /// Sends refused for want of a send slot or send-queue room.
    send_waits: u64,
    /// RDMA READs posted (rendezvous pulls and the user's RMA reads, in
    /// chunks).
    rdma_reads: u64,
    rdma_read_bytes: u64,
    /// Pulls and RMA reads that failed.
    rdma_reads_failed: u64,
    /// RDMA WRITEs posted (the user's RMA writes, in chunks).
    rdma_writes: u64,
    rdma_write_bytes: u64,
    /// RMA writes that failed.
    rdma_writes_failed: u64,
    /// Keepalive probes posted.
    keepalive_probes: u64,
    /// Connections ended because the local port stayed down.
    keepalive_port_down: u64,
    /// Device atomics posted, and those that failed.
    device_atomics: u64,
    device_atomics_failed: u64,
    /// `ibv_query_qp` calls made to tell a successful completion from
    /// rxe's flush reported as success (a system call each).
    qp_state_queries: u64,
    /// Looks at the descriptors (`epoll_wait`, a system call each).
    fd_checks: u64,
}

/// The domain's registration cache, which rendezvous buffers are
/// registered through.
pub type SharedCache = Arc<Mutex<MrCache<VerbsRegistrar>>>;

/// A verbs endpoint's transport: its rdma_cm listener, connections, SRQ,
/// CQ and send slots.
pub struct VerbsTransport {
    conns: Slab<Conn>,
    graves: FastMap<u32, Grave>,
    by_qpn: qpn::ByQpn,
    by_id: FastMap<usize, ConnId>,
    /// Connections ended outside the engine's asking, reported by progress.
    ended: Vec<ConnId>,
    /// Connections with frames the engine did not want yet.
    held: Vec<ConnId>,
    /// Connections owing a credit frame the send queue had no room for.
    owing: Vec<ConnId>,
    /// Connections whose frames' buffers wait to be posted again, their
    /// slots not returnable until then ([`VerbsTransport::flush_reposts`]).
    reposting: Vec<ConnId>,
    addr: Vec<u8>,
    nonce: u64,
    ip: Ipv4Addr,
    qp_cfg: QpConfig,
    /// Slots granted a connection (`XFER_VERBS_CREDIT_MSGS`), as the SRQ
    /// has room.
    credit_msgs: u32,
    budget: Budget,
    buf_size: usize,
    /// Send completions the CQ may have to hold beside the SRQ's.
    cq_room: u32,
    /// Signaled sends in flight.
    signaled: u32,
    /// Completions `prepare_wait` took while closing the race with the
    /// CQ's arming, handled by the next progress (non-empty only while
    /// `waiting` is set).
    stash: Vec<Wc>,
    scratch: Vec<u8>,
    /// `prepare_wait` armed the CQ: the next progress looks at the descriptors.
    waiting: bool,
    /// Something may wait in the lists `do_chores` works through: set with
    /// every push to `held`, `reading`, `ended`, `pulled`, `owing` or the
    /// atomics' queues.
    chores: bool,
    turns: u32,
    /// When a look at the descriptors is due again while busy ([`FDS_EVERY`]).
    fds_next: Instant,
    /// Connections being made.
    opening: u32,
    stats: Stats,
    /// Send buffers exposed for peers' READs, by handle.
    exposed: Slab<CacheRef>,
    /// Pulls in progress, by the key their READs' `wr_id`s carry.
    reads: pull::Pulls,
    /// Pulls with chunks still to post.
    reading: Vec<usize>,
    /// Pulls over, reported by the next progress.
    pulled: Vec<(u64, bool, Result<()>)>,
    /// Device atomics in progress.
    atomics: atomic::Atomics,
    /// The device does atomics (`atomic_cap` is not `IBV_ATOMIC_NONE`).
    device_atomics: bool,
    /// The port's largest message: longer pulls are read in chunks.
    max_msg: usize,
    /// The keepalive interval (`XFER_VERBS_KEEPALIVE_MS`; `None`: off).
    keepalive: Option<std::time::Duration>,
    /// `XFER_VERBS_CONNECT_TIMEOUT_MS`, when set.
    connect_timeout: Option<std::time::Duration>,
    /// The device port the transport listens on, and how many keepalive
    /// ticks in a row have seen it down.
    port: u8,
    port_down_ticks: u32,
    cache: SharedCache,
    // Verbs objects: the QPs and ids above drop first.
    pool: SendPool,
    srq: Srq,
    cq: Arc<Cq>,
    pd: Arc<Pd>,
    _listener: CmId,
    chan: EventChannel,
    waits: WaitSet,
}

impl std::fmt::Debug for VerbsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsTransport")
            .field("addr", &self.addr)
            .field("connections", &self.conns.len())
            .finish()
    }
}

/// The transport address of a listener at `at` with `nonce`.
fn encode(at: SocketAddrV4, nonce: u64) -> Vec<u8> {
    VerbsName { addr: at, nonce }.encode()[1..].to_vec()
}

/// A transport address back: where to dial, and the nonce to greet with.
pub fn decode(a: &[u8]) -> Option<VerbsName> {
    let mut name = [0u8; crate::name::LEN];
    if a.len() + 1 != name.len() {
        return None;
    }
    name[0] = crate::name::PROVIDER_ID;
    name[1..].copy_from_slice(a);
    VerbsName::decode(&name).ok()
}

fn random_nonce() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: b is valid for 8 writable bytes.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    let v = if n == 8 {
        u64::from_le_bytes(b)
    } else {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()) << 32
    };
    v.max(1)
}

impl VerbsTransport {
    /// Opens a transport on the domain's protection domain `pd` (device
    /// limits `dev`, largest message `max_msg`), listening on `ip`, sized
    /// by `attr`: an SRQ of `srq_size` buffers of `srq_buf_size` bytes,
    /// twice `sq_depth` send slots of the same size; rendezvous buffers are
    /// registered through `cache`.
    pub fn open(
        pd: &Arc<Pd>,
        dev: &DeviceAttr,
        max_msg: u32,
        ip: Ipv4Addr,
        attr: &VerbsAttr,
        cache: SharedCache,
    ) -> Result<VerbsTransport> {
        let mut scfg = SrqConfig::from_attr(attr);
        scfg.size = scfg.size.min(dev.max_srq_wr).max(1);
        scfg.low_watermark = scfg.low_watermark.min(scfg.size);
        let buf_size = scfg.buf_size as usize;
        if buf_size < frame::PREFIX + Self::MAX_HEADER + 1 {
            return Err(Error::InvalidArgument(
                "XFER_VERBS_SRQ_BUF_SIZE is too small for a verbs frame",
            ));
        }
        let cqe = attr.cq_size.min(dev.max_cqe).max(scfg.size + 64);
        let cq = Cq::new(pd.context(), cqe, true)?;
        let srq = Srq::new(pd, scfg)?;
        let mut qp_cfg = QpConfig::from_attr(attr);
        qp_cfg.sq_depth = qp_cfg.sq_depth.min(dev.max_qp_wr).max(2);
        let pool = SendPool::new(pd, qp_cfg.sq_depth.saturating_mul(2), buf_size)?;
        let chan = EventChannel::new()?;
        let listener = CmId::new(&chan)?;
        listener.listen(SocketAddrV4::new(ip, 0), 1024)?;
        let at = SocketAddrV4::new(ip, listener.src_port());
        let nonce = random_nonce();
        let waits = WaitSet::new(TOKEN_WAKE)?;
        let epoll = waits.epoll();
        epoll.add(
            cq.fd().ok_or(Error::Internal("CQ without a channel"))?,
            READABLE,
            TOKEN_CQ,
        )?;
        epoll.add(chan.fd(), READABLE, TOKEN_CM)?;
        tracing::debug!(%at, srq = scfg.size, buf_size, sq = qp_cfg.sq_depth, "verbs transport open");
        Ok(VerbsTransport {
            conns: Slab::new(),
            graves: FastMap::default(),
            by_qpn: qpn::ByQpn::default(),
            by_id: FastMap::default(),
            ended: Vec::new(),
            held: Vec::new(),
            owing: Vec::new(),
            reposting: Vec::new(),
            addr: encode(at, nonce),
            nonce,
            ip,
            qp_cfg,
            credit_msgs: attr.credit_msgs.max(1),
            budget: Budget::new(scfg.size),
            buf_size,
            cq_room: cq.capacity().saturating_sub(scfg.size),
            signaled: 0,
            stash: Vec::new(),
            scratch: vec![0; buf_size],
            waiting: false,
            chores: false,
            turns: 0,
            fds_next: Instant::now(),
            opening: 0,
            stats: Stats::default(),
            exposed: Slab::new(),
            reads: Slab::new(),
            reading: Vec::new(),
            pulled: Vec::new(),
            atomics: atomic::Atomics::default(),
            device_atomics: dev.has_atomics(),
            max_msg: (max_msg as usize).max(1),
            keepalive: (attr.keepalive_ms > 0).then(|| std::time::Duration::from_millis(attr.keepalive_ms)),
            connect_timeout: (attr.connect_timeout_ms > 0)
                .then(|| std::time::Duration::from_millis(attr.connect_timeout_ms)),
            port: attr.port,
            port_down_ticks: 0,
            cache,
            pool,
            srq,
            cq,
            pd: pd.clone(),
            _listener: listener,
            chan,
            waits,
        })
    }

    /// The registration cache.
    fn cache(&self) -> MutexGuard<'_, MrCache<VerbsRegistrar>> {
        // A panic while holding it can only come from the cache itself; its
        // state is still consistent enough to release registrations.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a busy turn looks at the descriptors: [`FDS_EVERY`] passed
    /// since the last such look. Out of line: one turn in [`EPOLL_EVERY`]
    /// asks.
    #[inline(never)]
    fn fds_due(&mut self) -> bool {
        let now = Instant::now();
        if now < self.fds_next {
            return false;
        }
        self.fds_next = now + FDS_EVERY;
        true
    }

    /// Looks at the descriptors without blocking: consumes a completion
    /// event, handles rdma_cm events, drains the wake eventfd.
    fn check_fds(&mut self, events: &mut dyn Events) {
        self.stats.fd_checks += 1;
        let mut evs = [EMPTY_EVENT; 3];
        let n = match self.waits.epoll().wait(&mut evs, 0) {
            Ok(n) => n,
            Err(e) => {
                xfer_core::warn_limited!(error = %e, "epoll_wait on the verbs transport");
                return;
            }
        };
        for ev in &evs[..n] {
            match ev.u64 {
                TOKEN_CQ => {
                    if let Err(e) = self.cq.wait_event(0) {
                        xfer_core::warn_limited!(error = %e, "reading the completion channel");
                    }
                }
                TOKEN_CM => self.cm_events(events),
                TOKEN_WAKE => self.waits.drain(),
                _ => {}
            }
        }
    }

    /// Whether connection `conn` (`None`: gone) has a QP that is not in
    /// the error state: asked of the kernel (`ibv_query_qp`, a system call,
    /// counted), as rxe reports requests a QP in error never executed as
    /// successful.
    fn qp_live(&mut self, conn: Option<ConnId>) -> bool {
        let Some(qp) = conn.and_then(|k| self.conns[k].qp.as_ref()) else {
            return false;
        };
        self.stats.qp_state_queries += 1;
        !qp.in_error()
    }

    /// Takes what the CQ holds (a bounded number of batches).
    #[inline(always)]
    fn poll_cq(&mut self, events: &mut dyn Events) -> usize {
        // On the stack, uninitialized: nothing to set up or put back on
        // every progress.
        let mut wcs = [const { MaybeUninit::<Wc>::uninit() }; WC_BATCH];
        let mut total = 0;
        for _ in 0..WC_BATCHES {
            let got = match self.cq.poll_into(&mut wcs) {
                Ok(got) => got,
                Err(e) => {
                    xfer_core::warn_limited!(error = %e, "polling the verbs CQ");
                    &[]
                }
            };
            for wc in got {
                self.on_wc(wc, events);
            }
            total += got.len();
            if got.len() < WC_BATCH {
                break;
            }
        }
        total
    }

    #[inline(always)]
    fn on_wc(&mut self, wc: &Wc, events: &mut dyn Events) {
        if self.srq.owns(wc.wr_id()) {
            self.on_recv(wc, events);
        } else {
            if wc.wr_id() & pull::PULL_TAG != 0 {
                // First: a failed READ reports its own error, not the
                // connection's end that `on_send` makes of it.
                self.on_read(wc);
            } else if wc.wr_id() & atomic::ATOMIC_TAG != 0 {
                self.on_atomic(wc);
            }
            self.on_send(wc);
        }
    }

    /// Handles the completions `prepare_wait` took.
    #[inline]
    fn take_stash(&mut self, events: &mut dyn Events) {
        if !self.stash.is_empty() {
            self.handle_stash(events);
        }
    }

    /// [`take_stash`](Self::take_stash)'s work, out of line: it is rare, and
    /// a second copy of the completion handling in `progress` would cost
    /// every progress its registers.
    #[cold]
    #[inline(never)]
    fn handle_stash(&mut self, events: &mut dyn Events) {
        for wc in std::mem::take(&mut self.stash) {
            self.on_wc(&wc, events);
        }
    }

    /// Takes everything the CQ holds now.
    fn drain_cq(&mut self, events: &mut dyn Events) {
        self.take_stash(events);
        while self.poll_cq(events) == WC_BATCH * WC_BATCHES {}
    }

    /// A send completion: its slot back; an error ends the connection.
    /// Out of line: one send in `XFER_VERBS_SIGNAL_EVERY` completes, and
    /// the receive path it would be inlined into is the hot one.
    #[inline(never)]
    fn on_send(&mut self, wc: &Wc) {
        self.signaled = self.signaled.saturating_sub(1);
        let slot = (wc.wr_id() & SLOT_TAG != 0).then_some((wc.wr_id() & !SLOT_TAG) as u32);
        let qpn = wc.qp_num();
        if let Some(k) = self.by_qpn.get(qpn) {
            let c = &mut self.conns[k];
            if let Some(s) = slot {
                if let Some(i) = c.slots.iter().position(|&x| x == s) {
                    c.slots.remove(i);
                    self.pool.give(s);
                }
            }
            if wc.is_ok() {
                if let Some(qp) = &mut c.qp {
                    qp.complete_send(wc);
                }
            } else {
                tracing::debug!(status = wc.status_str(), vendor = wc.vendor_err(), "verbs send failed");
                let errno = match wc.status() {
                    rdma_sys::ibv_wc_status::IBV_WC_RETRY_EXC_ERR => libc::ETIMEDOUT,
                    rdma_sys::ibv_wc_status::IBV_WC_RNR_RETRY_EXC_ERR => libc::ENOBUFS,
                    _ => libc::EIO,
                };
                self.end(k, Cause::Failed(errno));
            }
        } else if let Some(g) = self.graves.get_mut(&qpn) {
            if let Some(s) = slot {
                if let Some(i) = g.slots.iter().position(|&x| x == s) {
                    g.slots.remove(i);
                    self.pool.give(s);
                }
            }
            if g.done() {
                self.graves.remove(&qpn);
            }
        }
    }

    /// A receive completion: the frame goes to the engine now, or waits
    /// with its connection while the engine does not want it.
    #[inline(always)]
    fn on_recv(&mut self, wc: &Wc, events: &mut dyn Events) {
        let idx = match self.srq.take(wc) {
            Ok(i) => i,
            Err(e) => {
                xfer_core::warn_limited!(error = %e, "verbs receive completion");
                return;
            }
        };
        let k = self.by_qpn.get(wc.qp_num());
        let Some(k) = k.filter(|_| wc.is_ok()) else {
            if !wc.is_ok() {
                tracing::debug!(
                    status = wc.status_str(),
                    vendor = wc.vendor_err(),
                    "verbs receive failed"
                );
            }
            self.repost(idx);
            if let Some(k) = k {
                self.end(k, Cause::Failed(libc::EIO));
            }
            return;
        };
        // The peer's first frame can beat ESTABLISHED to us (checked
        // here: every frame asks).
        let mut c = &mut self.conns[k];
        if c.opening() {
            self.up(k, events);
            c = &mut self.conns[k];
        }
        if !c.held.is_empty() || !events.ready(k) {
            if c.held.is_empty() {
                self.held.push(k);
                self.chores = true;
            }
            c.held.push_back((idx, wc.byte_len()));
            return;
        }
        self.deliver(k, idx, wc.byte_len() as usize, events);
    }

    /// [`Transport::send`] of a frame too long to go inline: copied into a
    /// registered send slot, signaled. Out of line, so that the inline
    /// path's function keeps fewer registers.
    #[inline(never)]
    fn send_copied(&mut self, k: ConnId, owed: u16, header: &[u8], payload: &[u8]) -> std::result::Result<(), Refused> {
        let c = &mut self.conns[k];
        let Some(qp) = c.qp.as_mut() else {
            return Err(Refused::Gone(Cause::Closed));
        };
        let before = qp.signaled_in_flight();
        let Some((slot, sge)) = self
            .pool
            .take(|m| frame::encode(m, frame::KIND_FRAME, owed, header, payload).len())
        else {
            self.stats.send_waits += 1;
            return Err(Refused::Full);
        };
        // SAFETY: the slot is registered and stays ours, unmodified,
        // until this signaled send completes or its QP is destroyed
        // (`on_send`, graves).
        match unsafe { qp.send(SLOT_TAG | u64::from(slot), sge, None, true) } {
            Ok(()) => {
                c.slots.push_back(slot);
                self.stats.copied_sends += 1;
                self.signaled += qp.signaled_in_flight().saturating_sub(before);
                c.credit.sent(owed);
                Ok(())
            }
            Err(e) => {
                self.pool.give(slot);
                Err(self.refused(k, e))
            }
        }
    }

    /// What a send the QP refused with `e` tells the engine: `Again` is a
    /// full send queue, anything else ends the connection.
    #[cold]
    #[inline(never)]
    fn refused(&mut self, k: ConnId, e: Error) -> Refused {
        if matches!(e, Error::Again) {
            self.stats.send_waits += 1;
            return Refused::Full;
        }
        let cause = Cause::Failed(errno_of(&e));
        self.end(k, cause);
        Refused::Gone(cause)
    }

    /// Posts buffer `idx` again.
    fn repost(&mut self, idx: u32) {
        if let Err(e) = self.srq.release(idx).and_then(|()| self.srq.post_all().map(drop)) {
            xfer_core::warn_limited!(error = %e, "reposting a verbs receive buffer");
        }
    }

    /// Hands the frame in buffer `idx` to the engine and frees the buffer;
    /// a frame that breaks the protocol ends its connection. Buffers are
    /// posted again in batches ([`flush_reposts`](Self::flush_reposts)),
    /// not one `ibv_post_srq_recv` per frame: once a connection's are due
    /// (`SlotCredit::repost_due`), [`REPOST_BATCH`] are free, the SRQ is
    /// low, a progress finds no completion with [`IDLE_REPOST_BATCH`]
    /// free, or before a wait.
    #[inline(always)]
    fn deliver(&mut self, k: ConnId, idx: u32, len: usize, events: &mut dyn Events) {
        // The connection is looked up once for the whole frame: what is
        // used beside it (the SRQ, the lists) are other fields.
        let c = &mut self.conns[k];
        let verdict = match self
            .srq
            .data(idx, len)
            .map_err(|_| "verbs frame longer than its buffer")
        {
            Ok(data) => frame::parse(data).and_then(|(pre, header, payload)| {
                c.credit.returned(pre.credit)?;
                if pre.kind == frame::KIND_FRAME {
                    c.credit.arrived()?;
                    events.event(Event::Frame {
                        conn: k,
                        header: Bytes::new(header),
                        payload: Bytes::new(payload),
                    });
                    return Ok(true);
                }
                Ok(false)
            }),
            Err(why) => Err(why),
        };
        match verdict {
            Ok(true) => {
                free_buf(&mut self.srq, idx);
                c.credit.consumed();
                if !c.reposting {
                    c.reposting = true;
                    self.reposting.push(k);
                }
                if c.credit.repost_due() || self.srq.unposted() >= REPOST_BATCH || self.srq.low() {
                    self.flush_reposts();
                }
            }
            // A credit-only frame's buffer is the slack the peer's next one
            // needs: posted at once.
            Ok(false) => {
                free_buf(&mut self.srq, idx);
                self.flush_reposts();
            }
            Err(why) => {
                self.repost(idx);
                self.end(k, Cause::Protocol(why));
            }
        }
    }

    /// Posts every free receive buffer (linked, in batches) and makes the
    /// slots of the frames they held returnable. When the post fails the
    /// slots stay unreturned until one succeeds.
    fn flush_reposts(&mut self) {
        if let Err(e) = self.srq.post_all() {
            xfer_core::warn_limited!(error = %e, "reposting verbs receive buffers");
            return;
        }
        let mut list = std::mem::take(&mut self.reposting);
        for &k in &list {
            let Some(c) = self.conns.get_mut(k) else { continue };
            c.reposting = false;
            c.credit.reposted();
            if c.credit.should_return() && !c.owing {
                c.owing = true;
                self.owing.push(k);
                self.chores = true;
            }
        }
        list.clear();
        self.reposting = list;
    }

    /// Frames held back, for the engine if it wants them now.
    fn deliver_held(&mut self, events: &mut dyn Events) {
        let mut list = std::mem::take(&mut self.held);
        list.retain(|&k| {
            while let Some(&(idx, len)) = self.conns.get(k).and_then(|c| c.held.front()) {
                if !events.ready(k) {
                    return true;
                }
                self.conns[k].held.pop_front();
                self.deliver(k, idx, len as usize, events);
            }
            false
        });
        list.append(&mut self.held);
        self.held = list;
    }

    /// The receive-slot credit of every connection, summed: what a stall
    /// for credit looks like from each side (a diagnostic, walked only when
    /// the counters are asked for).
    fn credit_counters(&self) -> [(&'static str, u64); 11] {
        let (mut blocked, mut tx, mut held, mut unposted, mut owed, mut back) = (0, 0, 0, 0, 0, 0);
        for (_, c) in self.conns.iter() {
            let cr = &c.credit;
            blocked += u64::from(c.state == State::Ready && !cr.can_send());
            tx += u64::from(cr.tx());
            held += u64::from(cr.held());
            unposted += u64::from(cr.unposted());
            owed += u64::from(cr.owed());
            back += c.held.len() as u64;
        }
        [
            ("credit_conns_blocked", blocked),
            ("credit_tx", tx),
            ("credit_rx_held", held),
            ("credit_rx_unposted", unposted),
            ("credit_rx_owed", owed),
            ("frames_held_back", back),
            ("credit_conns_reposting", self.reposting.len() as u64),
            ("credit_conns_owing", self.owing.len() as u64),
            ("srq_unposted", self.srq.unposted() as u64),
            ("signaled_in_flight", u64::from(self.signaled)),
            ("rdma_reads_queued", self.reading.len() as u64),
        ]
    }

    /// What progress does besides the CQ, rarely needed on a message's
    /// path: frames held back, READs and atomics to continue, ends and
    /// pulls to report, credit owed, old graves. Out of line, behind one
    /// flag, so that a progress with none of it tests one byte, not seven
    /// lists.
    #[inline(never)]
    fn do_chores(&mut self, events: &mut dyn Events) {
        if !self.held.is_empty() {
            self.deliver_held(events);
        }
        if !self.reading.is_empty() {
            self.continue_reads();
        }
        if self.atomics.busy() {
            self.continue_atomics();
            self.report_atomics(events);
        }
        // Checked first: taking an empty list still runs its drop.
        if !self.ended.is_empty() {
            for k in std::mem::take(&mut self.ended) {
                if let Some(c) = self.conns.try_remove(k) {
                    if let State::Dead(cause) = c.state {
                        events.event(Event::Down { conn: k, cause });
                    }
                }
            }
        }
        if !self.pulled.is_empty() {
            self.report_pulls(events);
        }
        if !self.owing.is_empty() {
            self.return_credit();
        }
        if !self.graves.is_empty() && self.turns.is_multiple_of(1024) {
            self.sweep_graves();
        }
        // Pushes made by the work above (a frame held again, credit the
        // send queue had no room for, ...) keep the flag up.
        self.chores = !self.held.is_empty()
            || !self.reading.is_empty()
            || self.atomics.busy()
            || !self.ended.is_empty()
            || !self.pulled.is_empty()
            || !self.owing.is_empty();
    }

    /// Credit-only frames to the connections that owe one.
    fn return_credit(&mut self) {
        let mut list = std::mem::take(&mut self.owing);
        list.retain(|&k| {
            let Some(c) = self.conns.get_mut(k).filter(|c| c.state == State::Ready) else {
                return false;
            };
            let owed = c.credit.owed();
            if owed == 0 || !c.credit.should_return() {
                c.owing = false;
                return false;
            }
            let mut buf = [0u8; frame::PREFIX];
            let credit = frame::encode(&mut buf, frame::KIND_CREDIT, owed, &[], &[]);
            let Some(qp) = c.qp.as_mut() else { return false };
            if self.signaled >= self.cq_room {
                return true;
            }
            let before = qp.signaled_in_flight();
            match qp.send_inline(0, credit, None, false) {
                Ok(()) => {
                    self.signaled += qp.signaled_in_flight().saturating_sub(before);
                    c.credit.returned_to_peer(owed);
                    c.owing = false;
                    self.stats.credit_frames += 1;
                    false
                }
                Err(Error::Again) => true,
                Err(e) => {
                    xfer_core::warn_limited!(error = %e, "verbs credit frame");
                    c.owing = false;
                    false
                }
            }
        });
        list.append(&mut self.owing);
        self.owing = list;
    }

    /// Ends `k` with `cause`: QP to the error state, its `Down` reported by
    /// the next progress if the engine knows it.
    fn end(&mut self, k: ConnId, cause: Cause) {
        let Some(c) = self.conns.get_mut(k) else { return };
        if matches!(c.state, State::Dead(_)) {
            return;
        }
        let reported = c.reported;
        if c.opening() {
            self.opening -= 1;
        }
        c.state = State::Dead(cause);
        self.retire(k);
        if reported {
            self.ended.push(k);
            self.chores = true;
        } else {
            self.conns.remove(k);
        }
    }

    /// Takes `k` out of service: disconnects, moves its QP to the error
    /// state and into a grave until its slots are flushed, gives its
    /// receive buffers and reserved slots back.
    fn retire(&mut self, k: ConnId) {
        let c = &mut self.conns[k];
        if let Some(id) = &c.id {
            self.by_id.remove(&(id.as_ptr() as usize));
            if c.qp.is_some() {
                if let Err(e) = id.disconnect() {
                    tracing::trace!(error = %e, "rdma_disconnect");
                }
            }
        }
        let grant = std::mem::take(&mut c.grant);
        if grant > 0 {
            self.budget.release(grant);
        }
        let held: Vec<u32> = c.held.drain(..).map(|(i, _)| i).collect();
        let mut grave = Grave {
            qp: c.qp.take(),
            slots: std::mem::take(&mut c.slots),
            reads: std::mem::take(&mut c.reads),
            writes: std::mem::take(&mut c.writes),
            since: Instant::now(),
            _id: c.id.take(),
        };
        for idx in held {
            self.repost(idx);
        }
        self.end_reads(k);
        self.end_atomics(k);
        if let Some(qp) = &grave.qp {
            self.by_qpn.remove(qp.qp_num());
            if let Err(e) = qp.to_error() {
                tracing::debug!(error = %e, "moving a QP to the error state");
            }
            if !grave.done() {
                self.graves.insert(qp.qp_num(), grave);
                return;
            }
        }
        grave.qp = None;
    }

    /// Destroys graves whose QPs have flushed too long: the slots go back
    /// once the QP is destroyed (the device reads them no more).
    fn sweep_graves(&mut self) {
        let now = Instant::now();
        let old: Vec<u32> = self
            .graves
            .iter()
            .filter(|(_, g)| now.duration_since(g.since) > GRAVE)
            .map(|(&n, _)| n)
            .collect();
        for n in old {
            if let Some(mut g) = self.graves.remove(&n) {
                g.qp = None;
                for s in g.slots.drain(..) {
                    self.pool.give(s);
                }
                self.abandon_reads(n);
                self.abandon_atomics(n);
            }
        }
    }
}

impl Transport for VerbsTransport {
    fn name(&self) -> &'static str {
        "verbs"
    }

    fn address(&self) -> &[u8] {
        &self.addr
    }

    fn max_payload(&self) -> usize {
        self.buf_size - frame::PREFIX - Self::MAX_HEADER
    }

    fn connect(&mut self, addr: &[u8]) -> std::result::Result<ConnId, Cause> {
        let name = decode(addr).ok_or(Cause::Failed(libc::EINVAL))?;
        self.dial(name.addr, name.nonce)
    }

    fn send(&mut self, k: ConnId, header: &[u8], payload: &[u8]) -> std::result::Result<(), Refused> {
        let Some(c) = self.conns.get_mut(k) else {
            return Err(Refused::Gone(Cause::Closed));
        };
        match c.state {
            State::Ready => {}
            State::Dead(cause) => return Err(Refused::Gone(cause)),
            // Held by the engine until the connection is up.
            _ => return Err(Refused::Full),
        }
        if !c.credit.can_send() {
            self.stats.slot_waits += 1;
            return Err(Refused::Full);
        }
        let len = frame::PREFIX + header.len() + payload.len();
        if len > self.buf_size || header.len() > Self::MAX_HEADER {
            return Err(Refused::Gone(Cause::Protocol("frame over the verbs receive buffer")));
        }
        if self.signaled >= self.cq_room {
            self.stats.send_waits += 1;
            return Err(Refused::Full);
        }
        let Some(qp) = c.qp.as_mut() else {
            return Err(Refused::Gone(Cause::Closed));
        };
        let owed = c.credit.owed();
        if len > qp.max_inline() as usize {
            return self.send_copied(k, owed, header, payload);
        }
        // `len` fits `scratch` (`buf_size` long) and the QP's inline size.
        let frame = frame::encode(&mut self.scratch, frame::KIND_FRAME, owed, header, payload);
        match qp.post_inline(0, frame, None, false) {
            Ok(signaled) => {
                self.stats.inline_sends += 1;
                self.signaled += u32::from(signaled);
                c.credit.sent(owed);
                Ok(())
            }
            Err(e) => Err(self.refused(k, e)),
        }
    }

    fn expose(&mut self, _: ConnId, buf: &[u8]) -> std::result::Result<Option<Exposed>, Error> {
        self.expose_buf(buf).map(Some)
    }

    fn conceal(&mut self, _: ConnId, handle: u64) {
        self.conceal_buf(handle);
    }

    unsafe fn start_pull(
        &mut self,
        conn: ConnId,
        remote: Remote,
        dst: *mut u8,
        len: usize,
        token: u64,
    ) -> std::result::Result<Pulled, Error> {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.start(conn, remote, dst, len, token) }
    }

    unsafe fn start_rma(
        &mut self,
        conn: ConnId,
        kind: xfer_core::unstable::provider::RmaKind,
        remote: Remote,
        local: *mut u8,
        len: usize,
        token: u64,
    ) -> std::result::Result<Pulled, Error> {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.start_rma_on(conn, kind, remote, local, len, token) }
    }

    fn start_atomic(&mut self, conn: ConnId, remote: Remote, op: DeviceAtomic, token: u64) -> Result<()> {
        self.start_atomic_on(conn, remote, op, token)
    }

    fn close(&mut self, k: ConnId) {
        self.ended.retain(|&e| e != k);
        self.held.retain(|&e| e != k);
        self.owing.retain(|&e| e != k);
        self.reposting.retain(|&e| e != k);
        let Some(c) = self.conns.get(k) else { return };
        if c.opening() {
            self.opening -= 1;
        }
        if !matches!(c.state, State::Dead(_)) {
            self.retire(k);
        }
        self.conns.remove(k);
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = self.stats;
        let mut v = vec![
            ("connections_made", s.connections),
            ("inline_sends", s.inline_sends),
            ("copied_sends", s.copied_sends),
            ("credit_frames", s.credit_frames),
            ("slot_waits", s.slot_waits),
            ("send_waits", s.send_waits),
            ("rdma_reads", s.rdma_reads),
            ("rdma_read_bytes", s.rdma_read_bytes),
            ("rdma_reads_failed", s.rdma_reads_failed),
            ("rdma_reads_outstanding", self.reads.len() as u64),
            ("rdma_writes", s.rdma_writes),
            ("rdma_write_bytes", s.rdma_write_bytes),
            ("rdma_writes_failed", s.rdma_writes_failed),
            ("keepalive_probes", s.keepalive_probes),
            ("keepalive_port_down", s.keepalive_port_down),
            ("device_atomics", s.device_atomics),
            ("device_atomics_failed", s.device_atomics_failed),
            ("qp_state_queries", s.qp_state_queries),
            ("fd_checks", s.fd_checks),
            ("rndv_exposed", self.exposed.len() as u64),
            ("srq_posted", u64::from(self.srq.posted())),
            ("srq_reserved", u64::from(self.budget.reserved())),
            ("srq_overcommitted", self.budget.overcommitted()),
            (
                "recv_buffer_bytes",
                u64::from(self.srq.config().size) * u64::from(self.srq.config().buf_size),
            ),
        ];
        v.extend(self.credit_counters());
        v
    }

    fn keepalive(&self) -> Option<std::time::Duration> {
        self.keepalive
    }

    fn connect_timeout(&self) -> std::time::Duration {
        self.connect_timeout.unwrap_or(std::time::Duration::from_secs(10))
    }

    fn probe(&mut self, conns: &[ConnId]) {
        self.keepalive_tick(conns);
    }

    #[inline]
    fn progress(&mut self, events: &mut dyn Events) {
        self.turns = self.turns.wrapping_add(1);
        if self.waiting || self.opening > 0 || (self.turns.is_multiple_of(EPOLL_EVERY) && self.fds_due()) {
            // Completions `prepare_wait` took are older than any event now
            // (only it stashes, and it sets `waiting`: looked at here, not
            // on every turn).
            self.take_stash(events);
            self.waiting = false;
            self.check_fds(events);
            // A net under the flag: every list is looked at on these turns
            // whatever it says.
            self.chores = true;
        }
        // A turn that finds nothing is idle time: the buffers waiting go
        // back to the SRQ now rather than on a later message's path.
        if self.poll_cq(events) == 0 && self.srq.unposted() >= IDLE_REPOST_BATCH && !self.reposting.is_empty() {
            self.flush_reposts();
        }
        if self.chores {
            self.do_chores(events);
        }
    }

    fn wait_set(&self) -> Option<&WaitSet> {
        Some(&self.waits)
    }

    fn prepare_wait(&mut self) -> bool {
        // A peer may wait for the slots of the buffers waiting here.
        if !self.reposting.is_empty() {
            self.flush_reposts();
        }
        if let Err(e) = self.cq.req_notify(false) {
            xfer_core::warn_limited!(error = %e, "arming the verbs CQ");
            self.wake();
            return false;
        }
        self.waiting = true;
        // Completions that came before the arming raise no event: work now.
        // So are frames held back, ends not yet reported, credit owed.
        let mut wcs = [const { MaybeUninit::<Wc>::uninit() }; WC_BATCH];
        if let Ok(got) = self.cq.poll_into(&mut wcs) {
            self.stash.extend_from_slice(got);
        }
        if !self.stash.is_empty()
            || !self.held.is_empty()
            || !self.ended.is_empty()
            || !self.owing.is_empty()
            || !self.pulled.is_empty()
            || self.atomics.busy()
        {
            self.wake();
            return false;
        }
        true
    }
}

impl Drop for VerbsTransport {
    fn drop(&mut self) {
        // QPs first (they point at the SRQ, CQ and send slots), then ids.
        for (_, c) in self.conns.iter_mut() {
            c.qp = None;
        }
        self.conns.clear();
        for (_, g) in self.graves.iter_mut() {
            g.qp = None;
        }
        self.graves.clear();
        self.release_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip_and_bad_ones_are_refused() {
        let at: SocketAddrV4 = "10.11.0.1:4791".parse().unwrap();
        let a = encode(at, 0x1234);
        assert_eq!(a.len(), crate::name::LEN - 1);
        assert_eq!(
            decode(&a),
            Some(VerbsName {
                addr: at,
                nonce: 0x1234
            })
        );
        assert_eq!(decode(&a[1..]), None, "short");
        assert_eq!(decode(&[a.clone(), vec![0]].concat()), None, "long");
        let mut port0 = a.clone();
        port0[5..7].copy_from_slice(&[0, 0]);
        assert_eq!(decode(&port0), None, "port 0");
        let mut v6 = a;
        v6[0] = 6;
        assert_eq!(decode(&v6), None, "not IPv4");
    }
}
