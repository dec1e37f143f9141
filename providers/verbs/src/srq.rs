//! Shared receive queue with its registered bounce-buffer pool.
//!
//! Every RC QP of a domain receives through one SRQ, so receive memory does not
//! grow with the number of peers. The pool is one page-aligned allocation of
//! `size` buffers of `buf_size` bytes, registered once. A buffer is in one of
//! three states: *posted* (the NIC may write it), *held* (its receive completed
//! and the application reads it: [`Srq::take`], [`Srq::data`]) or *free*
//! ([`Srq::release`]). [`Srq::refill`] posts the free buffers once fewer than
//! `low_watermark` are posted, in batches of linked work requests.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::Arc;

use crate::rdma_core::{ibv_create_srq, ibv_destroy_srq};
use rdma_sys::{ibv_post_srq_recv, ibv_recv_wr, ibv_sge, ibv_srq, ibv_srq_init_attr};
use xfer_core::unstable::mr::Access;
use xfer_core::{Error, Result};

use crate::cq::Wc;
use crate::mr::Mr;
use crate::pd::Pd;
use crate::sys::{check, last_os_error};

/// Tag bit in the `wr_id` of SRQ receives, so receive completions are told
/// apart from send completions even when the opcode is not valid (errors).
pub const RECV_WR_TAG: u64 = 1 << 63;

/// Work requests linked into one `ibv_post_srq_recv` call.
const POST_BATCH: usize = 32;

/// Size of an SRQ and its pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqConfig {
    /// Receive buffers (and SRQ work requests).
    pub size: u32,
    /// Bytes per buffer.
    pub buf_size: u32,
    /// Refill when fewer than this many receives are posted.
    pub low_watermark: u32,
}

impl SrqConfig {
    /// The SRQ part of `attr`.
    pub fn from_attr(attr: &crate::VerbsAttr) -> Self {
        SrqConfig {
            size: attr.srq_size,
            buf_size: attr.srq_buf_size,
            low_watermark: attr.srq_low_watermark,
        }
    }
}

/// The verbs objects, shared with every QP attached to the SRQ: the pool memory
/// must outlive the SRQ (posted receives point into it), and the SRQ must
/// outlive every QP using it.
pub(crate) struct RawSrq {
    srq: *mut ibv_srq,
    mr: Option<Mr>,
    base: *mut u8,
    layout: Layout,
}

// SAFETY: ibv_srq is used only through thread-safe libibverbs calls; the pool
// memory is accessed through Srq, which is not Sync.
unsafe impl Send for RawSrq {}
// SAFETY: QPs only read the srq pointer.
unsafe impl Sync for RawSrq {}

impl RawSrq {
    pub(crate) fn as_ptr(&self) -> *mut ibv_srq {
        self.srq
    }
}

impl Drop for RawSrq {
    fn drop(&mut self) {
        // SAFETY: srq from ibv_create_srq; every QP attached holds this Arc, so
        // none is left. Destroying it first means the NIC writes no more.
        let rc = unsafe { ibv_destroy_srq(self.srq) };
        if rc != 0 {
            tracing::warn!(rc, "ibv_destroy_srq failed");
        }
        self.mr = None;
        // SAFETY: base was allocated with this layout; nothing refers to it now.
        unsafe { dealloc(self.base, self.layout) };
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum BufState {
    Posted,
    Held,
    Free,
}

/// A shared receive queue with its bounce-buffer pool.
pub struct Srq {
    raw: Arc<RawSrq>,
    cfg: SrqConfig,
    state: Vec<BufState>,
    free: Vec<u32>,
    posted: u32,
    refills: u64,
    /// The requests a post writes into.
    batch: RecvBatch,
}

impl Srq {
    /// Creates the SRQ and its pool on `pd`, and posts every buffer.
    pub fn new(pd: &Arc<Pd>, cfg: SrqConfig) -> Result<Srq> {
        if cfg.size == 0 || cfg.buf_size == 0 || cfg.low_watermark > cfg.size {
            return Err(Error::InvalidArgument(
                "srq size and buffer size must be > 0, watermark <= size",
            ));
        }
        let bytes = (cfg.size as usize)
            .checked_mul(cfg.buf_size as usize)
            .ok_or(Error::InvalidArgument("srq pool too large"))?;
        let layout = Layout::from_size_align(bytes, 4096).map_err(|_| Error::InvalidArgument("srq pool too large"))?;
        // SAFETY: layout has a non-zero size.
        let base = unsafe { alloc_zeroed(layout) };
        if base.is_null() {
            return Err(Error::Os(libc::ENOMEM));
        }
        // SAFETY: ibv_srq_init_attr is plain data; zero is valid.
        let mut init: ibv_srq_init_attr = unsafe { std::mem::zeroed() };
        init.attr.max_wr = cfg.size;
        init.attr.max_sge = 1;
        // SAFETY: pd valid; init is a valid in/out pointer.
        let srq = unsafe { ibv_create_srq(pd.as_ptr(), &mut init) };
        if srq.is_null() {
            let e = last_os_error();
            // SAFETY: base allocated above with layout, not shared.
            unsafe { dealloc(base, layout) };
            return Err(e);
        }
        let mut raw = RawSrq {
            srq,
            mr: None,
            base,
            layout,
        };
        let mr = Mr::register(pd, base as usize, bytes, Access::LOCAL_WRITE)?;
        let batch = RecvBatch::new(cfg.buf_size, mr.lkey());
        raw.mr = Some(mr);
        let mut s = Srq {
            raw: Arc::new(raw),
            cfg,
            state: vec![BufState::Free; cfg.size as usize],
            free: (0..cfg.size).rev().collect(),
            posted: 0,
            refills: 0,
            batch,
        };
        s.post_free()?;
        Ok(s)
    }

    pub(crate) fn raw(&self) -> &Arc<RawSrq> {
        &self.raw
    }

    /// The configuration.
    pub fn config(&self) -> SrqConfig {
        self.cfg
    }

    /// Receives currently posted.
    pub fn posted(&self) -> u32 {
        self.posted
    }

    /// Times [`Srq::refill`] found the SRQ below the watermark and posted.
    pub fn refills(&self) -> u64 {
        self.refills
    }

    /// Free buffers: released, not posted yet.
    #[inline]
    pub fn unposted(&self) -> usize {
        self.free.len()
    }

    /// Whether fewer than the low watermark are posted.
    #[inline]
    pub fn low(&self) -> bool {
        self.posted < self.cfg.low_watermark
    }

    /// True if `wr_id` is one of this SRQ's receive work requests.
    #[inline]
    pub fn owns(&self, wr_id: u64) -> bool {
        wr_id & RECV_WR_TAG != 0 && ((wr_id & !RECV_WR_TAG) as usize) < self.state.len()
    }

    /// Takes the buffer of a receive completion: it becomes *held* until
    /// [`Srq::release`]. Returns its index.
    #[inline]
    pub fn take(&mut self, wc: &Wc) -> Result<u32> {
        let wr_id = wc.wr_id();
        // One look at the buffer's state: the index is bounds-checked by
        // the look-up itself, not by a second test of `owns`.
        match self.state.get_mut((wr_id & !RECV_WR_TAG) as usize) {
            Some(s) if wr_id & RECV_WR_TAG != 0 => {
                if *s != BufState::Posted {
                    return Err(Error::Internal("receive completion for a buffer that was not posted"));
                }
                *s = BufState::Held;
                self.posted -= 1;
                Ok((wr_id & !RECV_WR_TAG) as u32)
            }
            _ => Err(Error::InvalidArgument("completion is not a receive of this srq")),
        }
    }

    /// The first `len` bytes of held buffer `idx` (what the receive wrote).
    #[inline]
    pub fn data(&self, idx: u32, len: usize) -> Result<&[u8]> {
        if self.state.get(idx as usize) != Some(&BufState::Held) {
            return Err(Error::InvalidArgument("buffer is not held"));
        }
        if len > self.cfg.buf_size as usize {
            return Err(Error::InvalidArgument("length exceeds the buffer"));
        }
        // SAFETY: the buffer is held: its receive completed and it is not posted,
        // so the NIC does not write it; it lies within the pool allocation, which
        // the Arc keeps alive for the borrow of self.
        Ok(unsafe { std::slice::from_raw_parts(self.raw.base.add(idx as usize * self.cfg.buf_size as usize), len) })
    }

    /// Gives held buffer `idx` back to the pool (posted by the next refill).
    #[inline]
    pub fn release(&mut self, idx: u32) -> Result<()> {
        match self.state.get_mut(idx as usize) {
            Some(s @ BufState::Held) => {
                *s = BufState::Free;
                self.free.push(idx);
                Ok(())
            }
            _ => Err(Error::InvalidArgument("buffer is not held")),
        }
    }

    /// If fewer than the low watermark are posted, posts every free buffer.
    /// Returns how many were posted.
    pub fn refill(&mut self) -> Result<u32> {
        if self.posted >= self.cfg.low_watermark || self.free.is_empty() {
            return Ok(0);
        }
        self.refills += 1;
        self.post_free()
    }

    /// Posts every free buffer, whatever the watermark: before credit for
    /// them is returned to a peer, so that the credit never names a buffer
    /// the device cannot use. Returns how many were posted.
    pub fn post_all(&mut self) -> Result<u32> {
        if self.free.is_empty() {
            return Ok(0);
        }
        self.post_free()
    }

    fn post_free(&mut self) -> Result<u32> {
        let base = self.raw.base as u64;
        let bsz = u64::from(self.cfg.buf_size);
        let first = self.batch.first();
        let mut total = 0;
        while !self.free.is_empty() {
            let n = self.free.len().min(POST_BATCH);
            let start = self.free.len() - n;
            // Each buffer is marked posted as its request is written (one
            // pass): those the device refuses are marked free again below.
            for (i, &idx) in self.free[start..].iter().enumerate() {
                self.state[idx as usize] = BufState::Posted;
                // SAFETY: i < n <= POST_BATCH, inside the batch, which only
                // this `Srq` uses.
                unsafe {
                    self.batch
                        .set(i, RECV_WR_TAG | u64::from(idx), base + u64::from(idx) * bsz)
                };
            }
            let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
            // SAFETY: srq valid; `first` heads a chain of exactly n requests
            // (cut after the n-th for the call) and their scatter entries,
            // which live as long as `self` (libibverbs copies them); the
            // buffers are free pool buffers inside the registered MR.
            let rc = unsafe {
                self.batch.cut(n);
                let rc = ibv_post_srq_recv(self.raw.srq, first, &mut bad);
                self.batch.mend(n);
                rc
            };
            let posted_now = if rc == 0 {
                n
            } else if bad.is_null() {
                0
            } else {
                // SAFETY: bad points at one of the batch's requests.
                unsafe { self.batch.index_of(bad) }.min(n)
            };
            // Request i was built from free[start + i]: the first `posted_now`
            // of them are posted now (all of them unless the post failed
            // part-way), the others stay free.
            if posted_now < n {
                for &idx in &self.free[start + posted_now..] {
                    self.state[idx as usize] = BufState::Free;
                }
                self.free.drain(start..start + posted_now);
            } else {
                self.free.truncate(start);
            }
            self.posted += posted_now as u32;
            total += posted_now as u32;
            check(rc)?;
        }
        Ok(total)
    }
}

/// A receive request with its scatter entry.
#[repr(C)]
struct RecvSlot {
    wr: ibv_recv_wr,
    sge: ibv_sge,
}

/// The work requests of one linked `ibv_post_srq_recv`, set up once: each
/// request's scatter entry (buffer length and key), list pointer and link
/// to the next stay, so a post writes only each buffer's `wr_id` and
/// address and cuts the chain after the last one it passes. Held through
/// a raw pointer: the links point into the allocation itself.
struct RecvBatch(std::ptr::NonNull<RecvSlot>);

// SAFETY: the allocation is owned by this value alone, and the pointers in
// it point only into it; moving it to another thread moves all of it.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    /// [`POST_BATCH`] requests for buffers of `len` bytes under `lkey`.
    fn new(len: u32, lkey: u32) -> RecvBatch {
        // SAFETY: plain data (integers and pointers); zero is valid.
        let b: Box<[RecvSlot; POST_BATCH]> = Box::new(unsafe { std::mem::zeroed() });
        let p = Box::into_raw(b).cast::<RecvSlot>();
        for i in 0..POST_BATCH {
            // SAFETY: i < POST_BATCH: slot i and (when i + 1 < POST_BATCH)
            // slot i + 1 lie inside the allocation, reached only through `p`.
            unsafe {
                let s = p.add(i);
                (*s).sge.length = len;
                (*s).sge.lkey = lkey;
                (*s).wr.sg_list = std::ptr::addr_of_mut!((*s).sge);
                (*s).wr.num_sge = 1;
                (*s).wr.next = if i + 1 < POST_BATCH {
                    std::ptr::addr_of_mut!((*p.add(i + 1)).wr)
                } else {
                    std::ptr::null_mut()
                };
            }
        }
        // SAFETY: from `Box::into_raw`, never null.
        RecvBatch(unsafe { std::ptr::NonNull::new_unchecked(p) })
    }

    /// The first request, head of the chain.
    fn first(&self) -> *mut ibv_recv_wr {
        // SAFETY: slot 0 lies inside the allocation.
        unsafe { std::ptr::addr_of_mut!((*self.0.as_ptr()).wr) }
    }

    /// Request `i` names `wr_id` and the buffer at `addr`.
    ///
    /// # Safety
    /// `i < POST_BATCH`; no post is using the batch.
    #[inline(always)]
    unsafe fn set(&mut self, i: usize, wr_id: u64, addr: u64) {
        // SAFETY: the caller's `i` is inside the allocation.
        unsafe {
            let s = self.0.as_ptr().add(i);
            (*s).wr.wr_id = wr_id;
            (*s).sge.addr = addr;
        }
    }

    /// Ends the chain at request `n - 1`.
    ///
    /// # Safety
    /// `1 <= n <= POST_BATCH`.
    #[inline(always)]
    unsafe fn cut(&mut self, n: usize) {
        // SAFETY: the caller's `n - 1` is inside the allocation.
        unsafe { (*self.0.as_ptr().add(n - 1)).wr.next = std::ptr::null_mut() };
    }

    /// Links request `n - 1` to request `n` again after [`RecvBatch::cut`].
    ///
    /// # Safety
    /// As for [`RecvBatch::cut`].
    #[inline(always)]
    unsafe fn mend(&mut self, n: usize) {
        if n < POST_BATCH {
            let p = self.0.as_ptr();
            // SAFETY: n - 1 and n are inside the allocation (n < POST_BATCH).
            unsafe { (*p.add(n - 1)).wr.next = std::ptr::addr_of_mut!((*p.add(n)).wr) };
        }
    }

    /// The index of request `wr`.
    ///
    /// # Safety
    /// `wr` points at one of the batch's requests.
    unsafe fn index_of(&self, wr: *mut ibv_recv_wr) -> usize {
        // SAFETY: `wr` is the first field of a slot of this allocation
        // (`repr(C)`), so it is that slot's address.
        unsafe { wr.cast::<RecvSlot>().offset_from(self.0.as_ptr()) }.max(0) as usize
    }
}

impl Drop for RecvBatch {
    fn drop(&mut self) {
        // SAFETY: from `Box::into_raw` of this type in `new`, freed once.
        drop(unsafe { Box::from_raw(self.0.as_ptr().cast::<[RecvSlot; POST_BATCH]>()) });
    }
}
