//! Completion queue with an optional completion channel (the file descriptor
//! for blocking waits and event loops).

use std::ffi::CStr;
use std::fmt;
use std::mem::MaybeUninit;
use std::os::fd::RawFd;
use std::sync::Arc;

use crate::rdma_core::{
    ibv_ack_cq_events, ibv_create_comp_channel, ibv_create_cq, ibv_destroy_comp_channel, ibv_destroy_cq,
    ibv_get_cq_event, ibv_wc_status_str,
};
use rdma_sys::{
    ibv_comp_channel, ibv_cq, ibv_poll_cq, ibv_req_notify_cq, ibv_wc, ibv_wc_flags, ibv_wc_opcode, ibv_wc_status,
};
use xfer_core::{Error, Result};

use crate::device::Context;
use crate::sys::{check, last_os_error};

/// A completion channel (`ibv_comp_channel`): its fd becomes readable when a CQ
/// armed with [`Cq::req_notify`] gets a completion. Destroyed on drop.
pub struct CompletionChannel {
    ch: *mut ibv_comp_channel,
    _ctx: Arc<Context>,
}

// SAFETY: the channel is only used through libibverbs calls and its fd.
unsafe impl Send for CompletionChannel {}
// SAFETY: as above.
unsafe impl Sync for CompletionChannel {}

impl CompletionChannel {
    /// Creates a channel on `ctx`; its fd is made non-blocking.
    pub fn new(ctx: &Arc<Context>) -> Result<CompletionChannel> {
        // SAFETY: ctx is open and outlives the channel (we hold the Arc).
        let ch = unsafe { ibv_create_comp_channel(ctx.as_ptr()) };
        if ch.is_null() {
            return Err(last_os_error());
        }
        let chan = CompletionChannel { ch, _ctx: ctx.clone() };
        let fd = chan.fd();
        // SAFETY: fd is the channel's open descriptor; F_GETFL/F_SETFL only change flags.
        unsafe {
            let fl = libc::fcntl(fd, libc::F_GETFL);
            if fl < 0 || libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
                return Err(last_os_error());
            }
        }
        Ok(chan)
    }

    /// The channel's file descriptor (readable when an event is pending).
    pub fn fd(&self) -> RawFd {
        // SAFETY: ch is a valid channel for our lifetime; fd is a plain field.
        unsafe { (*self.ch).fd }
    }
}

impl Drop for CompletionChannel {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_comp_channel; the CQ using it (which
        // owns this channel) was destroyed first, see Cq's field order.
        let rc = unsafe { ibv_destroy_comp_channel(self.ch) };
        if rc != 0 {
            tracing::warn!(rc, "ibv_destroy_comp_channel failed");
        }
    }
}

/// A completion queue (`ibv_cq`), destroyed on drop.
pub struct Cq {
    cq: *mut ibv_cq,
    cqe: u32,
    // Dropped after the CQ (fields drop in declaration order after Drop::drop).
    channel: Option<CompletionChannel>,
    _ctx: Arc<Context>,
}

// SAFETY: ibv_poll_cq / ibv_req_notify_cq are thread-safe in libibverbs providers.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

impl Cq {
    /// Creates a CQ of at least `cqe` entries on `ctx`, with a completion
    /// channel of its own when `with_channel`.
    pub fn new(ctx: &Arc<Context>, cqe: u32, with_channel: bool) -> Result<Arc<Cq>> {
        let channel = if with_channel {
            Some(CompletionChannel::new(ctx)?)
        } else {
            None
        };
        let ch = channel.as_ref().map_or(std::ptr::null_mut(), |c| c.ch);
        let want = libc::c_int::try_from(cqe).map_err(|_| Error::InvalidArgument("cq size too large"))?;
        // SAFETY: ctx is open; ch is null or a channel of the same context that
        // outlives the CQ.
        let cq = unsafe { ibv_create_cq(ctx.as_ptr(), want, std::ptr::null_mut(), ch, 0) };
        if cq.is_null() {
            return Err(last_os_error());
        }
        // SAFETY: cq is valid; cqe is the actual size chosen by the provider.
        let actual = unsafe { (*cq).cqe }.max(0) as u32;
        Ok(Arc::new(Cq {
            cq,
            cqe: actual,
            channel,
            _ctx: ctx.clone(),
        }))
    }

    /// The raw `ibv_cq`.
    pub fn as_ptr(&self) -> *mut ibv_cq {
        self.cq
    }

    /// Entries the CQ actually has (at least what was asked).
    pub fn capacity(&self) -> u32 {
        self.cqe
    }

    /// The completion channel's fd, if the CQ has a channel.
    pub fn fd(&self) -> Option<RawFd> {
        self.channel.as_ref().map(CompletionChannel::fd)
    }

    /// Arms the CQ: the next completion (or next solicited one) makes the
    /// channel's fd readable. Poll once more after arming to close the race.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        if self.channel.is_none() {
            return Err(Error::InvalidArgument("cq has no completion channel"));
        }
        // SAFETY: cq is valid for our lifetime.
        check(unsafe { ibv_req_notify_cq(self.cq, i32::from(solicited_only)) })
    }

    /// Waits up to `timeout_ms` (-1: forever) for a completion event on the
    /// channel and consumes (and acknowledges) it. Returns false on timeout.
    /// The CQ must be re-armed with [`Cq::req_notify`] afterwards.
    pub fn wait_event(&self, timeout_ms: i32) -> Result<bool> {
        let Some(chan) = &self.channel else {
            return Err(Error::InvalidArgument("cq has no completion channel"));
        };
        let mut pfd = libc::pollfd {
            fd: chan.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: pfd is one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if n < 0 {
            return Err(last_os_error());
        }
        if n == 0 {
            return Ok(false);
        }
        let mut ev_cq: *mut ibv_cq = std::ptr::null_mut();
        let mut ev_ctx: *mut libc::c_void = std::ptr::null_mut();
        // SAFETY: channel valid; out-pointers valid. The fd is non-blocking, so
        // this returns EAGAIN rather than blocking if another thread took it.
        let rc = unsafe { ibv_get_cq_event(chan.ch, &mut ev_cq, &mut ev_ctx) };
        if rc != 0 {
            let e = last_os_error();
            return if e == Error::Os(libc::EAGAIN) {
                Ok(false)
            } else {
                Err(e)
            };
        }
        // SAFETY: only this CQ uses this channel, so ev_cq == self.cq; one event
        // is acknowledged for the one received (destroy waits for all acks).
        unsafe { ibv_ack_cq_events(ev_cq, 1) };
        Ok(true)
    }

    /// Polls up to `wcs.len()` completions into `wcs`; returns how many.
    #[inline]
    pub fn poll(&self, wcs: &mut [Wc]) -> Result<usize> {
        // SAFETY: MaybeUninit<Wc> has Wc's layout, and `poll_into` writes
        // only whole, valid completions into it.
        let raw = unsafe { &mut *(std::ptr::from_mut(wcs) as *mut [MaybeUninit<Wc>]) };
        self.poll_into(raw).map(<[Wc]>::len)
    }

    /// Polls up to `wcs.len()` completions into storage that need not be
    /// initialized (a stack array costs nothing to set up); returns the
    /// completions taken, the first entries of `wcs`.
    #[inline]
    pub fn poll_into<'a>(&self, wcs: &'a mut [MaybeUninit<Wc>]) -> Result<&'a [Wc]> {
        let n = i32::try_from(wcs.len()).unwrap_or(i32::MAX);
        // SAFETY: cq valid; Wc is repr(transparent) over ibv_wc and wcs has at
        // least n writable entries.
        let rc = unsafe { ibv_poll_cq(self.cq, n, wcs.as_mut_ptr().cast::<ibv_wc>()) };
        if rc < 0 {
            return Err(Error::Os(libc::EIO));
        }
        // SAFETY: ibv_poll_cq wrote the first rc (<= n) entries.
        Ok(unsafe { std::slice::from_raw_parts(wcs.as_ptr().cast::<Wc>(), rc as usize) })
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: cq was created by ibv_create_cq; every QP using it holds an
        // Arc<Cq>, so none is left; all channel events were acknowledged.
        let rc = unsafe { ibv_destroy_cq(self.cq) };
        if rc != 0 {
            tracing::warn!(rc, "ibv_destroy_cq failed");
        }
    }
}

/// One work completion (`ibv_wc`), read through accessors.
#[repr(transparent)]
pub struct Wc(ibv_wc);

impl Clone for Wc {
    fn clone(&self) -> Self {
        // SAFETY: ibv_wc is plain old data (no pointers it owns); a bitwise copy is a valid copy.
        Wc(unsafe { std::ptr::read(&self.0) })
    }
}

impl Default for Wc {
    fn default() -> Self {
        // SAFETY: ibv_wc is plain data (integers and a union of integers); zero is valid.
        Wc(unsafe { std::mem::zeroed() })
    }
}

impl Wc {
    /// The work request id given when posting.
    #[inline]
    pub fn wr_id(&self) -> u64 {
        self.0.wr_id
    }

    /// True if the work request succeeded.
    #[inline]
    pub fn is_ok(&self) -> bool {
        self.0.status == ibv_wc_status::IBV_WC_SUCCESS
    }

    /// Raw `ibv_wc_status`.
    pub fn status(&self) -> u32 {
        self.0.status
    }

    /// True for a flush error (the QP went to the error state).
    pub fn is_flush(&self) -> bool {
        self.0.status == ibv_wc_status::IBV_WC_WR_FLUSH_ERR
    }

    /// libibverbs' text for the status.
    pub fn status_str(&self) -> &'static str {
        // SAFETY: ibv_wc_status_str returns a static string for any value.
        let s = unsafe { ibv_wc_status_str(self.0.status) };
        if s.is_null() {
            return "unknown";
        }
        // SAFETY: non-null, NUL-terminated and static.
        unsafe { CStr::from_ptr(s) }.to_str().unwrap_or("unknown")
    }

    /// Vendor error detail.
    pub fn vendor_err(&self) -> u32 {
        self.0.vendor_err
    }

    /// Raw `ibv_wc_opcode` (only valid for successful completions).
    pub fn opcode(&self) -> u32 {
        self.0.opcode
    }

    /// True for a receive completion (a send or a write with immediate arrived).
    pub fn is_recv(&self) -> bool {
        self.0.opcode & ibv_wc_opcode::IBV_WC_RECV != 0
    }

    /// Bytes received (receives) or transferred (RDMA read).
    #[inline]
    pub fn byte_len(&self) -> u32 {
        self.0.byte_len
    }

    /// The immediate data (host order), if the completion carries any.
    pub fn imm(&self) -> Option<u32> {
        if self.0.wc_flags & ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0 {
            // SAFETY: with IBV_WC_WITH_IMM the union holds imm_data (network order).
            Some(u32::from_be(unsafe { self.0.imm_data_invalidated_rkey_union.imm_data }))
        } else {
            None
        }
    }

    /// The local QP number the completion belongs to.
    #[inline]
    pub fn qp_num(&self) -> u32 {
        self.0.qp_num
    }
}

impl fmt::Debug for Wc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wc")
            .field("wr_id", &self.wr_id())
            .field("status", &self.status_str())
            .field("opcode", &self.0.opcode)
            .field("byte_len", &self.0.byte_len)
            .field("imm", &self.imm())
            .field("qp_num", &self.0.qp_num)
            .finish()
    }
}
