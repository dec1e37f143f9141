//! RC queue pairs: creation on a shared receive queue, the inline size read back
//! from the created QP, selective signaling with send-queue accounting, and the
//! connection parameters (RNR retry, retry count, timeout, path MTU) applied
//! explicitly on the way to RTS.
//!
//! # Selective signaling
//!
//! A send is signaled when the caller asks for a completion, or when it is the
//! `signal_every`-th since the last signaled one. Each signaled work request
//! remembers how many send-queue slots it retires (itself plus the unsignaled
//! ones before it): completions on one send queue arrive in order, so when the
//! caller hands the completion to [`RcQp::complete_send`] those slots are free
//! again. A post that would overflow the queue returns `Error::Again` instead,
//! and since `signal_every` is clamped to the depth there is always a signaled
//! request in flight when the queue is full: progress frees it.
//!
//! The buffer of an unsignaled non-inline send may be reused only after a later
//! signaled completion on the same QP (then it has been sent). Unsignaled
//! requests at the tail are retired by [`RcQp::signal_tail`], a signaled
//! zero-length RDMA WRITE.

use std::sync::Arc;

use crate::rdma_core::{ibv_create_qp, ibv_destroy_qp, ibv_modify_qp, ibv_query_qp};
use rdma_sys::{
    ibv_post_send, ibv_qp, ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_init_attr, ibv_qp_state, ibv_qp_type, ibv_send_flags,
    ibv_send_wr, ibv_sge, ibv_wr_opcode,
};
use xfer_core::{Error, Result};

use crate::attr::VerbsAttr;
use crate::cq::{Cq, Wc};
use crate::pd::Pd;
use crate::srq::{RawSrq, Srq};
use crate::sys::{check, last_os_error, mtu_bytes, mtu_from_bytes};

/// Settings of an RC QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpConfig {
    /// Send queue depth asked for.
    pub sq_depth: u32,
    /// Inline payload asked for; the QP may get less (see [`RcQp::max_inline`]).
    pub max_inline: u32,
    /// Signal at least every N sends.
    pub signal_every: u32,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// Minimum RNR NAK timer code.
    pub min_rnr_timer: u8,
    /// Path MTU in bytes (0: the port's active MTU); capped by the port.
    pub path_mtu: u32,
    /// Source GID index override (None: what rdma_cm resolved).
    pub gid_index: Option<u8>,
}

impl QpConfig {
    /// The QP part of `attr`.
    pub fn from_attr(a: &VerbsAttr) -> Self {
        QpConfig {
            sq_depth: a.sq_depth,
            max_inline: a.max_inline,
            signal_every: a.signal_every,
            rnr_retry: a.rnr_retry,
            retry_cnt: a.retry_cnt,
            timeout: a.timeout,
            min_rnr_timer: a.min_rnr_timer,
            path_mtu: a.path_mtu,
            gid_index: a.gid_index,
        }
    }
}

/// Scatter/gather entry of a registered local buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    /// Address.
    pub addr: u64,
    /// Bytes.
    pub length: u32,
    /// Local key of the MR covering it.
    pub lkey: u32,
}

/// A peer's registered buffer, target of RDMA write/read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteBuf {
    /// Remote virtual address.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
}

/// Effective attributes of a QP, read back with `ibv_query_qp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInfo {
    /// Raw `ibv_qp_state` (3 = RTS).
    pub state: u32,
    /// Path MTU in bytes.
    pub path_mtu: u32,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries.
    pub rnr_retry: u8,
    /// Minimum RNR NAK timer.
    pub min_rnr_timer: u8,
    /// Source GID index.
    pub sgid_index: u8,
    /// Inline data size.
    pub max_inline: u32,
    /// Send queue depth.
    pub max_send_wr: u32,
    /// RDMA READs and atomics this side may have in flight (the initiator
    /// depth rdma_cm negotiated).
    pub max_rd_atomic: u8,
}

/// Counters of a QP's send side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpStats {
    /// Sends posted inline.
    pub inline_sends: u64,
    /// Work requests posted signaled.
    pub signaled: u64,
    /// Work requests posted unsignaled.
    pub unsignaled: u64,
    /// Posts refused because the send queue was full.
    pub sq_full: u64,
    /// Highest number of send-queue slots in use at once.
    pub max_outstanding: u32,
}

/// A reliable-connected queue pair, destroyed on drop.
pub struct RcQp {
    qp: *mut ibv_qp,
    cfg: QpConfig,
    max_inline: u32,
    depth: u32,
    signal_every: u32,
    outstanding: u32,
    unsignaled_run: u32,
    // Ring of the slot counts retired by each signaled WR in flight.
    retire: Box<[u32]>,
    retire_head: usize,
    retire_len: usize,
    /// The inline SEND's work request, zeroed once: a send writes only the
    /// fields it sets (`sg_list` each time: it points at that send's SGE).
    inline_wr: ibv_send_wr,
    stats: QpStats,
    _srq: Option<Arc<RawSrq>>,
    _send_cq: Arc<Cq>,
    _recv_cq: Arc<Cq>,
    _pd: Arc<Pd>,
}

// SAFETY: ibv_post_send and ibv_modify_qp are thread-safe; the bookkeeping is
// behind &mut self.
unsafe impl Send for RcQp {}

impl RcQp {
    /// Creates an RC QP in RESET receiving through `srq`. The inline size is
    /// asked for as `cfg.max_inline` and lowered until the device accepts; the
    /// value the QP got is [`RcQp::max_inline`].
    pub fn create(pd: &Arc<Pd>, send_cq: &Arc<Cq>, recv_cq: &Arc<Cq>, srq: &Srq, cfg: QpConfig) -> Result<RcQp> {
        let mut last = Error::Internal("no inline size tried");
        let mut tries = vec![cfg.max_inline];
        tries.extend(
            [512u32, 256, 128, 64, 32, 0]
                .into_iter()
                .filter(|&t| t < cfg.max_inline),
        );
        for want in tries {
            match Self::create_inner(pd, send_cq, recv_cq, Some(srq.raw()), cfg, want) {
                Ok(qp) => return Ok(qp),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// A throw-away QP without SRQ asking for `max_inline`, to learn what the
    /// device grants (see `Context::probe_max_inline`).
    pub(crate) fn create_probe(pd: &Arc<Pd>, cq: &Arc<Cq>, max_inline: u32) -> Result<RcQp> {
        let cfg = QpConfig::from_attr(&VerbsAttr {
            sq_depth: 16,
            ..VerbsAttr::default()
        });
        Self::create_inner(pd, cq, cq, None, cfg, max_inline)
    }

    fn create_inner(
        pd: &Arc<Pd>,
        send_cq: &Arc<Cq>,
        recv_cq: &Arc<Cq>,
        srq: Option<&Arc<RawSrq>>,
        cfg: QpConfig,
        max_inline: u32,
    ) -> Result<RcQp> {
        if cfg.sq_depth == 0 {
            return Err(Error::InvalidArgument("send queue depth must be > 0"));
        }
        // SAFETY: plain data; zero is valid.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = send_cq.as_ptr();
        init.recv_cq = recv_cq.as_ptr();
        init.srq = srq.map_or(std::ptr::null_mut(), |s| s.as_ptr());
        init.qp_type = ibv_qp_type::IBV_QPT_RC;
        init.sq_sig_all = 0;
        init.cap.max_send_wr = cfg.sq_depth;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_wr = if srq.is_some() { 0 } else { 1 };
        init.cap.max_recv_sge = if srq.is_some() { 0 } else { 1 };
        init.cap.max_inline_data = max_inline;
        // SAFETY: pd, CQs and SRQ are valid and kept alive by the Arcs stored below.
        let qp = unsafe { ibv_create_qp(pd.as_ptr(), &mut init) };
        if qp.is_null() {
            return Err(last_os_error());
        }
        // ibv_create_qp writes the granted capabilities back into init.cap. The
        // device may round the depth up (rxe grants 127 for 64); slots are
        // accounted against what was asked, so the queue never holds more.
        let depth = init.cap.max_send_wr.min(cfg.sq_depth).max(1);
        let signal_every = cfg.signal_every.clamp(1, depth);
        Ok(RcQp {
            qp,
            cfg,
            max_inline: init.cap.max_inline_data,
            depth,
            signal_every,
            outstanding: 0,
            unsignaled_run: 0,
            retire: vec![0; depth as usize].into_boxed_slice(),
            retire_head: 0,
            retire_len: 0,
            // SAFETY: plain data; zero is valid.
            inline_wr: unsafe { std::mem::zeroed() },
            stats: QpStats::default(),
            _srq: srq.cloned(),
            _send_cq: send_cq.clone(),
            _recv_cq: recv_cq.clone(),
            _pd: pd.clone(),
        })
    }

    /// The raw `ibv_qp`.
    pub fn as_ptr(&self) -> *mut ibv_qp {
        self.qp
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: qp valid for our lifetime.
        unsafe { (*self.qp).qp_num }
    }

    /// Largest payload [`RcQp::send_inline`] accepts (granted by the device).
    #[inline]
    pub fn max_inline(&self) -> u32 {
        self.max_inline
    }

    /// Send queue depth granted.
    pub fn sq_depth(&self) -> u32 {
        self.depth
    }

    /// Effective signaling interval.
    pub fn signal_every(&self) -> u32 {
        self.signal_every
    }

    /// Send-queue slots in use (posted, not yet retired by a completion).
    pub fn outstanding(&self) -> u32 {
        self.outstanding
    }

    /// Signaled work requests posted whose completion has not yet been
    /// handed to [`RcQp::complete_send`]: while there is one, the QP will
    /// produce a completion (success, or an error such as retry exceeded).
    #[inline]
    pub fn signaled_in_flight(&self) -> u32 {
        self.retire_len as u32
    }

    /// Send-side counters.
    pub fn stats(&self) -> QpStats {
        self.stats
    }

    /// The device context the QP lives on.
    pub fn context(&self) -> &Arc<crate::device::Context> {
        self._pd.context()
    }

    /// The configuration the QP was created with.
    pub fn config(&self) -> &QpConfig {
        &self.cfg
    }

    /// Modifies the QP (`ibv_modify_qp`); the kernel validates the attributes.
    pub fn modify(&self, attr: &mut ibv_qp_attr, mask: u32) -> Result<()> {
        // SAFETY: qp valid; attr is a valid pointer for the call.
        check(unsafe { ibv_modify_qp(self.qp, attr, mask as libc::c_int) })
    }

    /// Overrides what rdma_cm computed for the transition to `attr.qp_state`
    /// with the configured settings: path MTU (capped by `port_mtu`), minimum
    /// RNR timer and source GID index on the way to RTR; timeout, retry count
    /// and RNR retry on the way to RTS.
    pub(crate) fn tune(&self, attr: &mut ibv_qp_attr, mask: &mut u32, port_mtu: u32) {
        match attr.qp_state {
            ibv_qp_state::IBV_QPS_RTR => {
                if self.cfg.path_mtu != 0 {
                    let cap = if port_mtu == 0 {
                        self.cfg.path_mtu
                    } else {
                        port_mtu.min(self.cfg.path_mtu)
                    };
                    attr.path_mtu = mtu_from_bytes(cap);
                    *mask |= ibv_qp_attr_mask::IBV_QP_PATH_MTU.0;
                }
                attr.min_rnr_timer = self.cfg.min_rnr_timer;
                *mask |= ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER.0;
                if let Some(g) = self.cfg.gid_index {
                    attr.ah_attr.grh.sgid_index = g;
                }
            }
            ibv_qp_state::IBV_QPS_RTS => {
                attr.timeout = self.cfg.timeout;
                attr.retry_cnt = self.cfg.retry_cnt;
                attr.rnr_retry = self.cfg.rnr_retry;
                *mask |= ibv_qp_attr_mask::IBV_QP_TIMEOUT.0
                    | ibv_qp_attr_mask::IBV_QP_RETRY_CNT.0
                    | ibv_qp_attr_mask::IBV_QP_RNR_RETRY.0;
            }
            _ => {}
        }
    }

    /// Moves the QP to the error state: the device stops accessing memory
    /// for it and flushes its outstanding work requests.
    pub fn to_error(&self) -> Result<()> {
        // SAFETY: plain data; zero is valid.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ibv_qp_state::IBV_QPS_ERR;
        self.modify(&mut attr, ibv_qp_attr_mask::IBV_QP_STATE.0)
    }

    /// Whether the QP is in the error state (`ibv_query_qp`; false when
    /// the query fails).
    pub fn in_error(&self) -> bool {
        // SAFETY: plain data; zero is valid.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        let mask = ibv_qp_attr_mask::IBV_QP_STATE.0 as libc::c_int;
        // SAFETY: qp valid; out-pointers valid for the call.
        let ok = unsafe { ibv_query_qp(self.qp, &mut attr, mask, &mut init) } == 0;
        ok && attr.qp_state == ibv_qp_state::IBV_QPS_ERR
    }

    /// Reads the effective attributes back (`ibv_query_qp`).
    pub fn query(&self) -> Result<QpInfo> {
        // SAFETY: plain data; zero is valid.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        let mask = ibv_qp_attr_mask::IBV_QP_STATE.0
            | ibv_qp_attr_mask::IBV_QP_PATH_MTU.0
            | ibv_qp_attr_mask::IBV_QP_TIMEOUT.0
            | ibv_qp_attr_mask::IBV_QP_RETRY_CNT.0
            | ibv_qp_attr_mask::IBV_QP_RNR_RETRY.0
            | ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER.0
            | ibv_qp_attr_mask::IBV_QP_AV.0
            | ibv_qp_attr_mask::IBV_QP_CAP.0
            | ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC.0;
        // SAFETY: qp valid; out-pointers valid.
        check(unsafe { ibv_query_qp(self.qp, &mut attr, mask as libc::c_int, &mut init) })?;
        Ok(QpInfo {
            state: attr.qp_state,
            path_mtu: mtu_bytes(attr.path_mtu),
            timeout: attr.timeout,
            retry_cnt: attr.retry_cnt,
            rnr_retry: attr.rnr_retry,
            min_rnr_timer: attr.min_rnr_timer,
            sgid_index: attr.ah_attr.grh.sgid_index,
            max_inline: attr.cap.max_inline_data.max(init.cap.max_inline_data),
            max_send_wr: attr.cap.max_send_wr.max(init.cap.max_send_wr),
            max_rd_atomic: attr.max_rd_atomic,
        })
    }

    /// Retires the send-queue slots covered by a send-side completion of this
    /// QP (success or error). Call it for every completion whose `qp_num` is
    /// this QP's and that is not a receive. Returns the slots freed.
    pub fn complete_send(&mut self, wc: &Wc) -> u32 {
        debug_assert_eq!(wc.qp_num(), self.qp_num());
        if self.retire_len == 0 {
            xfer_core::warn_limited!(?wc, "send completion with no signaled request in flight");
            return 0;
        }
        let n = self.retire[self.retire_head];
        self.retire_head = (self.retire_head + 1) % self.retire.len();
        self.retire_len -= 1;
        self.outstanding -= n;
        n
    }

    /// Sends `data` inline (copied into the work request: the buffer is free
    /// again when this returns), with optional immediate data. `data` must fit
    /// [`RcQp::max_inline`].
    #[inline(always)]
    pub fn send_inline(&mut self, wr_id: u64, data: &[u8], imm: Option<u32>, signal: bool) -> Result<()> {
        if data.len() > self.max_inline as usize {
            return Err(Error::InvalidArgument("payload larger than the QP's max_inline_data"));
        }
        self.post_inline(wr_id, data, imm, signal).map(drop)
    }

    /// [`RcQp::send_inline`] for a caller that has compared `data` with
    /// [`RcQp::max_inline`] itself (the device refuses a longer one all the
    /// same): whether the request went signaled, which the caller counts
    /// instead of reading [`RcQp::signaled_in_flight`] before and after.
    #[inline(always)]
    pub(crate) fn post_inline(&mut self, wr_id: u64, data: &[u8], imm: Option<u32>, signal: bool) -> Result<bool> {
        let signal = self.admit(signal)?;
        let mut sge = ibv_sge {
            addr: data.as_ptr() as u64,
            length: data.len() as u32,
            lkey: 0,
        };
        // The template, not a zeroed request: every field a SEND reads is
        // set here, the rest stay zero (`next` included: never chained).
        let wr = &mut self.inline_wr;
        wr.wr_id = wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = i32::from(!data.is_empty());
        wr.opcode = ibv_wr_opcode::IBV_WR_SEND;
        if let Some(imm) = imm {
            wr.opcode = ibv_wr_opcode::IBV_WR_SEND_WITH_IMM;
            wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
        }
        wr.send_flags =
            ibv_send_flags::IBV_SEND_INLINE.0 | if signal { ibv_send_flags::IBV_SEND_SIGNALED.0 } else { 0 };
        // SAFETY: qp valid; wr is one well-formed work request whose SGE
        // lives for the call; with IBV_SEND_INLINE the payload is copied
        // during it, so `data` only needs to live for it.
        unsafe { post_one(self.qp, wr)? };
        self.posted(signal);
        self.stats.inline_sends += 1;
        Ok(signal)
    }

    /// Sends the registered buffer `local`, with optional immediate data.
    ///
    /// # Safety
    /// `local` must stay valid, registered and unmodified until the send is
    /// known complete: its own completion if signaled, else a later signaled
    /// completion of this QP.
    pub unsafe fn send(&mut self, wr_id: u64, local: Sge, imm: Option<u32>, signal: bool) -> Result<()> {
        let mut sge = to_sge(local);
        // SAFETY: plain data; zero is valid.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = i32::from(sge.length > 0);
        wr.opcode = ibv_wr_opcode::IBV_WR_SEND;
        if let Some(imm) = imm {
            wr.opcode = ibv_wr_opcode::IBV_WR_SEND_WITH_IMM;
            wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
        }
        // SAFETY: the caller keeps `local` valid until completion.
        unsafe { self.post(&mut wr, signal) }
    }

    /// RDMA WRITE of `local` to `remote`; with `imm`, the peer gets a receive
    /// completion carrying it (consuming one of its SRQ receives).
    ///
    /// # Safety
    /// As [`RcQp::send`] for `local`.
    pub unsafe fn write(
        &mut self,
        wr_id: u64,
        local: Sge,
        remote: RemoteBuf,
        imm: Option<u32>,
        signal: bool,
    ) -> Result<()> {
        let mut sge = to_sge(local);
        // SAFETY: plain data; zero is valid.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = i32::from(sge.length > 0);
        wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
        if let Some(imm) = imm {
            wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
            wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
        }
        wr.wr.rdma.remote_addr = remote.addr;
        wr.wr.rdma.rkey = remote.rkey;
        // SAFETY: the caller keeps `local` valid until completion.
        unsafe { self.post(&mut wr, signal) }
    }

    /// RDMA READ of `remote` into `local` (registered with local write).
    ///
    /// # Safety
    /// `local` must stay valid and registered, and must not be read or written
    /// by the CPU, until the read is known complete.
    pub unsafe fn read(&mut self, wr_id: u64, local: Sge, remote: RemoteBuf, signal: bool) -> Result<()> {
        let mut sge = to_sge(local);
        // SAFETY: plain data; zero is valid.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = i32::from(sge.length > 0);
        wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_READ;
        wr.wr.rdma.remote_addr = remote.addr;
        wr.wr.rdma.rkey = remote.rkey;
        // SAFETY: the caller keeps `local` valid until completion.
        unsafe { self.post(&mut wr, signal) }
    }

    /// A signaled 8-byte atomic on `remote` (aligned to 8, in a region
    /// registered with remote atomic access): fetch-and-add of `add`, or
    /// with `swap` compare-and-swap (`add` the compare value). The old value
    /// lands in `local` (8 bytes, registered with local write).
    ///
    /// # Safety
    /// As [`RcQp::read`] for `local`.
    pub unsafe fn atomic(
        &mut self,
        wr_id: u64,
        local: Sge,
        remote: RemoteBuf,
        add: u64,
        swap: Option<u64>,
    ) -> Result<()> {
        let mut sge = to_sge(local);
        // SAFETY: plain data; zero is valid.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = match swap {
            Some(_) => ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP,
            None => ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD,
        };
        wr.wr.atomic.remote_addr = remote.addr;
        wr.wr.atomic.rkey = remote.rkey;
        wr.wr.atomic.compare_add = add;
        wr.wr.atomic.swap = swap.unwrap_or(0);
        // SAFETY: the caller keeps `local` valid until completion.
        unsafe { self.post(&mut wr, true) }
    }

    /// Posts a signaled zero-length RDMA WRITE whatever the tail: a probe
    /// that needs nothing of the peer but its device (no memory is
    /// accessed, no receive consumed, IB spec C9-88) and ends in an error
    /// completion (retry exceeded) when the peer cannot be reached. It
    /// retires the unsignaled requests before it, like
    /// [`RcQp::signal_tail`]. Fails with `Error::Again` when the send
    /// queue is full.
    pub fn probe(&mut self, wr_id: u64) -> Result<()> {
        // SAFETY: plain data; zero is valid.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.num_sge = 0;
        wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
        // SAFETY: no buffer is referenced (zero SGEs, zero length).
        unsafe { self.post(&mut wr, true) }
    }

    /// Unsignaled work requests posted since the last signaled one: their
    /// slots are retired only by a later signaled completion.
    pub fn unsignaled_tail(&self) -> u32 {
        self.unsignaled_run
    }

    /// If unsignaled work requests trail the last signaled one, posts a
    /// signaled zero-length RDMA WRITE (no memory is accessed on either side
    /// and no receive is consumed, IB spec C9-88) so that their slots get
    /// retired. Returns whether it posted. Use it before waiting for the send
    /// queue to drain.
    pub fn signal_tail(&mut self, wr_id: u64) -> Result<bool> {
        if self.unsignaled_run == 0 {
            return Ok(false);
        }
        // SAFETY: plain data; zero is valid.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.num_sge = 0;
        wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
        // SAFETY: no buffer is referenced (zero SGEs, zero length).
        unsafe { self.post(&mut wr, true)? };
        Ok(true)
    }

    /// Posts one work request with the signaling policy and slot accounting.
    ///
    /// # Safety
    /// The buffers `wr` points to must satisfy the contract of the public
    /// method that built it.
    #[inline(always)]
    unsafe fn post(&mut self, wr: &mut ibv_send_wr, want_signal: bool) -> Result<()> {
        let signal = self.admit(want_signal)?;
        if signal {
            wr.send_flags |= ibv_send_flags::IBV_SEND_SIGNALED.0;
        }
        wr.next = std::ptr::null_mut();
        // SAFETY: qp valid; wr is one well-formed work request (single, no chain)
        // whose buffers the caller guarantees.
        unsafe { post_one(self.qp, wr)? };
        self.posted(signal);
        Ok(())
    }

    /// Whether the send queue has room for one more request (`Again` if
    /// not), and whether that request is to be signaled.
    #[inline(always)]
    fn admit(&mut self, want_signal: bool) -> Result<bool> {
        if self.outstanding >= self.depth {
            self.stats.sq_full += 1;
            return Err(Error::Again);
        }
        Ok(want_signal || self.unsignaled_run + 1 >= self.signal_every)
    }

    /// Accounts for a request [`admit`](Self::admit)ted and posted.
    #[inline(always)]
    fn posted(&mut self, signal: bool) {
        self.outstanding += 1;
        self.stats.max_outstanding = self.stats.max_outstanding.max(self.outstanding);
        if signal {
            let tail = (self.retire_head + self.retire_len) % self.retire.len();
            self.retire[tail] = self.unsignaled_run + 1;
            self.retire_len += 1;
            self.unsignaled_run = 0;
            self.stats.signaled += 1;
        } else {
            self.unsignaled_run += 1;
            self.stats.unsignaled += 1;
        }
    }
}

/// `ibv_post_send` of the one request `wr`.
///
/// # Safety
/// `qp` is valid; `wr` is well formed, unchained, and its buffers satisfy
/// the contract of the method that built it.
#[inline(always)]
unsafe fn post_one(qp: *mut ibv_qp, wr: &mut ibv_send_wr) -> Result<()> {
    let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
    // SAFETY: the caller's contract.
    check(unsafe { ibv_post_send(qp, wr, &mut bad) })
}

fn to_sge(s: Sge) -> ibv_sge {
    ibv_sge {
        addr: s.addr,
        length: s.length,
        lkey: s.lkey,
    }
}

impl Drop for RcQp {
    fn drop(&mut self) {
        // SAFETY: qp from ibv_create_qp, destroyed once; the CQs, SRQ and PD it
        // uses are still alive (we hold their Arcs, dropped after this).
        let rc = unsafe { ibv_destroy_qp(self.qp) };
        if rc != 0 {
            tracing::warn!(rc, "ibv_destroy_qp failed");
        }
    }
}
