//! Registered send buffers: eager payloads and control messages too large
//! to go inline are copied into a slot, which is free again once the send
//! queue retires the work request that carried it.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::Arc;

use xfer_core::unstable::mr::Access;
use xfer_core::{Error, Result};

use crate::mr::Mr;
use crate::pd::Pd;
use crate::qp::Sge;

/// A pool of `count` slots of `size` bytes in one registered allocation.
pub(crate) struct SendPool {
    // Deregistered (dropped) before the memory is freed in Drop.
    mr: Option<Mr>,
    base: *mut u8,
    layout: Layout,
    size: usize,
    free: Vec<u32>,
}

// SAFETY: the pool memory is only touched through &mut self, and by the
// device for slots in flight (which the owner does not hand out twice).
unsafe impl Send for SendPool {}

impl SendPool {
    pub(crate) fn new(pd: &Arc<Pd>, count: u32, size: usize) -> Result<SendPool> {
        let bytes = (count as usize)
            .checked_mul(size)
            .filter(|&b| b > 0)
            .ok_or(Error::InvalidArgument("send pool size"))?;
        let layout = Layout::from_size_align(bytes, 4096).map_err(|_| Error::InvalidArgument("send pool size"))?;
        // SAFETY: layout has a non-zero size.
        let base = unsafe { alloc_zeroed(layout) };
        if base.is_null() {
            return Err(Error::Os(libc::ENOMEM));
        }
        let mut pool = SendPool {
            mr: None,
            base,
            layout,
            size,
            free: (0..count).rev().collect(),
        };
        pool.mr = Some(Mr::register(pd, base as usize, bytes, Access::empty())?);
        Ok(pool)
    }

    /// Takes a free slot and fills it by `fill`, which returns the bytes
    /// used; gives the slot and its scatter entry.
    pub(crate) fn take(&mut self, fill: impl FnOnce(&mut [u8]) -> usize) -> Option<(u32, Sge)> {
        let slot = self.free.pop()?;
        let off = slot as usize * self.size;
        // SAFETY: the slot lies inside the allocation and is free: the device
        // does not read it and nothing else borrows it.
        let mem = unsafe { std::slice::from_raw_parts_mut(self.base.add(off), self.size) };
        let len = fill(mem).min(self.size);
        let lkey = self.mr.as_ref().map_or(0, Mr::lkey);
        Some((
            slot,
            Sge {
                addr: self.base as u64 + off as u64,
                length: len as u32,
                lkey,
            },
        ))
    }

    /// Returns a slot whose work request was retired.
    pub(crate) fn give(&mut self, slot: u32) {
        debug_assert!(!self.free.contains(&slot), "send slot {slot} freed twice");
        self.free.push(slot);
    }
}

impl Drop for SendPool {
    fn drop(&mut self) {
        self.mr = None;
        // SAFETY: base was allocated with this layout; the QPs that could read
        // it are destroyed before the pool (field order of the endpoint).
        unsafe { dealloc(self.base, self.layout) };
    }
}
