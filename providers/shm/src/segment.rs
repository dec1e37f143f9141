//! The shared segment of one peer pair: a sealed memfd holding the header
//! and the two rings (layout.rs), created by the connecting side and
//! mapped by both.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crate::entry;
use crate::fence::{Fence, Fences, Registration};
use crate::layout::{self, MAGIC, VERSION};
use crate::ring::{Consumer, Producer};
use crate::sys::{self, Mapping};

/// Why a segment a peer sent is refused.
#[derive(Debug)]
pub enum Refusal {
    /// The ring size is not a power of two in the accepted range.
    RingBytes(usize),
    /// The descriptor is not a memfd sealed against shrinking (a mapping of
    /// it could fault) or its size is not the layout's.
    NotSealed,
    /// Its size does not match the ring size.
    Size(u64),
    /// The header's magic or version is not this code's, or its stamp
    /// secret is not one.
    Header,
    /// A system call failed.
    Os(io::Error),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::RingBytes(n) => write!(f, "ring size {n} not accepted"),
            Refusal::NotSealed => write!(f, "segment is not a memfd sealed against resizing"),
            Refusal::Size(n) => write!(f, "segment of {n} bytes does not match its ring size"),
            Refusal::Header => write!(f, "segment header has another magic or version"),
            Refusal::Os(e) => write!(f, "{e}"),
        }
    }
}

/// A mapped segment and the ring ends of one side.
#[derive(Debug)]
pub struct Segment {
    /// Frames to the peer. Declared before the mapping: both point into it.
    pub tx: Producer,
    /// Frames from the peer.
    pub rx: Consumer,
    /// Bytes of each ring.
    pub ring_bytes: usize,
    /// This side's fence as an RMA target.
    own: Fence,
    /// The peer's fence as an RMA target, which this side's copies hold.
    peer: Fence,
    /// `own` in the process's registry, once the peer is known. Declared
    /// before the mapping: it leaves the registry before the unmap.
    fence: Option<Registration>,
    /// Kept mapped while the rings point into it.
    _map: Mapping,
}

impl Segment {
    /// Creates, sizes, seals and maps a new segment (the connecting side);
    /// the memfd is returned to be sent to the peer.
    pub fn create(ring_bytes: usize) -> io::Result<(Segment, OwnedFd)> {
        let len = layout::segment_bytes(ring_bytes);
        let fd = sys::memfd(len)?;
        sys::add_seals(&fd, sys::SIZE_SEALS)?;
        let map = Mapping::new(&fd, len)?;
        // Not a key that guards anything (a peer sees it), only a value a
        // program's bytes do not hold by chance: the cheap random source.
        let secret = sys::random_u64() | 1 << 63;
        // SAFETY: the header words are aligned, inside the fresh mapping.
        unsafe {
            AtomicU64::from_ptr(map.ptr().add(layout::HDR_MAGIC).cast()).store(MAGIC, Ordering::Relaxed);
            AtomicU32::from_ptr(map.ptr().add(layout::HDR_VERSION).cast()).store(VERSION, Ordering::Relaxed);
            AtomicU32::from_ptr(map.ptr().add(layout::HDR_RING_BYTES).cast())
                .store(ring_bytes as u32, Ordering::Relaxed);
            AtomicU64::from_ptr(map.ptr().add(layout::HDR_SECRET).cast()).store(secret, Ordering::Relaxed);
        }
        Ok((Segment::rings(map, ring_bytes, true, secret), fd))
    }

    /// Checks and maps a segment the connecting peer sent (the accepting
    /// side). `max_ring_bytes` is this side's bound on what it maps.
    pub fn adopt(fd: &OwnedFd, ring_bytes: usize, max_ring_bytes: usize) -> Result<Segment, Refusal> {
        if !layout::valid_ring_bytes(ring_bytes, max_ring_bytes) {
            return Err(Refusal::RingBytes(ring_bytes));
        }
        // Without the shrink seal the peer could truncate the file and make
        // every later access to the mapping a SIGBUS.
        let seals = sys::seals(fd).map_err(|_| Refusal::NotSealed)?;
        if seals & libc::F_SEAL_SHRINK == 0 {
            return Err(Refusal::NotSealed);
        }
        let len = layout::segment_bytes(ring_bytes);
        let size = sys::file_size(fd).map_err(Refusal::Os)?;
        if size != len as u64 {
            return Err(Refusal::Size(size));
        }
        let map = Mapping::new(fd, len).map_err(Refusal::Os)?;
        // SAFETY: aligned header words inside the mapping just made.
        let (magic, version, rb, secret) = unsafe {
            (
                AtomicU64::from_ptr(map.ptr().add(layout::HDR_MAGIC).cast()).load(Ordering::Relaxed),
                AtomicU32::from_ptr(map.ptr().add(layout::HDR_VERSION).cast()).load(Ordering::Relaxed),
                AtomicU32::from_ptr(map.ptr().add(layout::HDR_RING_BYTES).cast()).load(Ordering::Relaxed),
                AtomicU64::from_ptr(map.ptr().add(layout::HDR_SECRET).cast()).load(Ordering::Relaxed),
            )
        };
        if magic != MAGIC || version != VERSION || rb as usize != ring_bytes || !entry::valid_secret(secret) {
            return Err(Refusal::Header);
        }
        Ok(Segment::rings(map, ring_bytes, false, secret))
    }

    fn rings(map: Mapping, ring_bytes: usize, connector: bool, secret: u64) -> Segment {
        debug_assert_eq!(map.len(), layout::segment_bytes(ring_bytes));
        let tx = layout::tx_ring(connector);
        let rx = layout::tx_ring(!connector);
        let base = map.ptr();
        // SAFETY: the offsets come from the layout of a mapping of exactly
        // segment_bytes(ring_bytes); data regions are page aligned and
        // consumer blocks 256-byte aligned. The mapping lives in the same
        // struct as the rings and is dropped after them. This side is the
        // only producer of `tx` and only consumer of `rx`. The fences are in
        // the header page of the same mapping.
        unsafe {
            Segment {
                tx: Producer::new(
                    base.add(layout::data(tx, ring_bytes)),
                    base.add(layout::control(tx)),
                    ring_bytes,
                    secret,
                ),
                rx: Consumer::new(
                    base.add(layout::data(rx, ring_bytes)),
                    base.add(layout::control(rx)),
                    ring_bytes,
                    secret,
                ),
                ring_bytes,
                own: Fence::at(base, tx),
                peer: Fence::at(base, rx),
                fence: None,
                _map: map,
            }
        }
    }

    /// Lets the peer (process `pid`) copy natively into this side's
    /// registered regions under the grants it gets: publishes this side's
    /// fence (fence.rs). Until then no grant matches it.
    pub fn open_fence(&mut self, fences: &Arc<Fences>, pid: libc::pid_t) {
        if self.fence.is_none() {
            self.fence = Some(self.own.register(fences, pid));
        }
    }

    /// Runs `copy` into or out of the peer's memory under a grant with
    /// `stamp`, if the peer has not revoked it since; `None` if it has.
    pub fn guarded<R>(&self, stamp: u64, copy: impl FnOnce() -> R) -> Option<R> {
        self.peer.guarded(stamp, copy)
    }
}
