//! Buffers handed to operations.
//!
//! The transport reads or writes a buffer after the posting call returns, so
//! the safe API takes buffers by value ([`Vec<u8>`]) and gives them back in the
//! operation's completion: while in flight nobody else can touch them. Raw
//! buffers carry the libfabric contract instead (valid and untouched until the
//! completion) and can only be made with `unsafe`. A raw buffer made from
//! a [`MemoryRegion`](crate::mr::MemoryRegion) also carries the region's
//! keys ([`LocalDesc`], libfabric's `desc`), so a provider that needs
//! registered memory uses them instead of its registration cache.

use crate::mr::Access;

/// A buffer owned by an operation while it is in flight.
#[derive(Debug)]
pub struct Buffer(Repr);

#[derive(Debug)]
enum Repr {
    Owned(Vec<u8>),
    Raw {
        ptr: *mut u8,
        len: usize,
    },
    /// Raw memory inside a registered region. Boxed, so that a buffer stays
    /// three words: operations move buffers around on the data path.
    InRegion(Box<InRegion>),
}

#[derive(Debug)]
struct InRegion {
    ptr: *mut u8,
    len: usize,
    desc: LocalDesc,
}

/// The registration a raw buffer lies in (libfabric's `desc`): what a
/// provider needs to hand the memory to a NIC without registering it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalDesc {
    /// The region's local descriptor ([`MemoryRegion::desc`](crate::mr::MemoryRegion::desc); verbs: the lkey).
    pub desc: u64,
    /// The region's remote key (verbs: the rkey).
    pub key: u64,
    /// The rights the region was registered with.
    pub access: Access,
    /// Identifies the domain that registered it (checked at posting).
    pub(crate) domain: usize,
}

// SAFETY: an owned Vec is Send; a raw buffer's creator promised (in
// `Buffer::raw`) that the memory stays valid and is not accessed until the
// operation completes, whichever thread drives progress.
unsafe impl Send for Buffer {}

impl Buffer {
    /// A raw buffer of `len` bytes at `ptr`.
    ///
    /// # Safety
    /// Until the operation's completion is reported (or, for an operation
    /// without a completion, until the endpoint is closed), the memory must
    /// stay valid, must not be read (for receives) or written (for either) by
    /// anyone else, and `ptr` must be valid for `len` bytes. `ptr` may be
    /// dangling when `len` is 0.
    pub unsafe fn raw(ptr: *mut u8, len: usize) -> Buffer {
        Buffer(Repr::Raw { ptr, len })
    }

    /// A raw buffer inside a registered region, carrying its keys.
    ///
    /// # Safety
    /// As for [`raw`](Self::raw); `desc` must describe a live registration
    /// covering `[ptr, ptr + len)`.
    pub(crate) unsafe fn raw_in(ptr: *mut u8, len: usize, desc: LocalDesc) -> Buffer {
        Buffer(Repr::InRegion(Box::new(InRegion { ptr, len, desc })))
    }

    /// The registration the buffer lies in, for a buffer made by
    /// [`MemoryRegion::buffer`](crate::mr::MemoryRegion::buffer).
    pub fn local_desc(&self) -> Option<LocalDesc> {
        match &self.0 {
            Repr::InRegion(r) => Some(r.desc),
            _ => None,
        }
    }

    /// The domain of the region the buffer lies in (what posting checks).
    #[inline]
    pub(crate) fn region_domain(&self) -> Option<usize> {
        match &self.0 {
            Repr::InRegion(r) => Some(r.desc.domain),
            _ => None,
        }
    }

    /// Pointer and length of raw memory (`None` for an owned vector).
    #[inline]
    fn raw_parts(&self) -> Option<(*mut u8, usize)> {
        match &self.0 {
            Repr::Owned(_) => None,
            Repr::Raw { ptr, len } => Some((*ptr, *len)),
            Repr::InRegion(r) => Some((r.ptr, r.len)),
        }
    }

    /// Length in bytes: what a send sends, or what a receive can hold.
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Owned(v) => v.len(),
            Repr::Raw { len, .. } => *len,
            Repr::InRegion(r) => r.len,
        }
    }

    /// Whether the buffer has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes, for the provider to send from.
    pub fn as_slice(&self) -> &[u8] {
        if let Repr::Owned(v) = &self.0 {
            return v;
        }
        match self.raw_parts() {
            // SAFETY: `Buffer::raw`'s (or `raw_in`'s) contract makes `ptr`
            // valid for `len` bytes and unaliased while the operation holds
            // the buffer.
            Some((ptr, len)) if len > 0 => unsafe { std::slice::from_raw_parts(ptr, len) },
            _ => &[],
        }
    }

    /// The bytes, for the provider to receive into.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let raw = self.raw_parts();
        match (&mut self.0, raw) {
            (Repr::Owned(v), _) => v,
            // SAFETY: as in `as_slice`; the contract also grants exclusive access.
            (_, Some((ptr, len))) if len > 0 => unsafe { std::slice::from_raw_parts_mut(ptr, len) },
            _ => &mut [],
        }
    }

    /// The owned vector back, or `None` for a raw buffer.
    #[inline]
    pub fn into_vec(self) -> Option<Vec<u8>> {
        match self.0 {
            Repr::Owned(v) => Some(v),
            _ => None,
        }
    }
}

impl From<Vec<u8>> for Buffer {
    fn from(v: Vec<u8>) -> Self {
        Buffer(Repr::Owned(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_round_trip() {
        let mut b = Buffer::from(vec![1, 2, 3]);
        b.as_mut_slice()[0] = 9;
        assert_eq!(b.as_slice(), &[9, 2, 3]);
        assert_eq!(b.into_vec(), Some(vec![9, 2, 3]));
    }

    #[test]
    fn a_buffer_is_three_words() {
        assert_eq!(std::mem::size_of::<Buffer>(), 3 * std::mem::size_of::<usize>());
    }

    #[test]
    fn raw_views_caller_memory() {
        let mut mem = [0u8; 4];
        // SAFETY: `mem` outlives `b` and is not touched while `b` lives.
        let mut b = unsafe { Buffer::raw(mem.as_mut_ptr(), mem.len()) };
        b.as_mut_slice().copy_from_slice(&[4, 3, 2, 1]);
        assert!(b.into_vec().is_none());
        assert_eq!(mem, [4, 3, 2, 1]);
        // SAFETY: zero-length raw buffers may dangle.
        let empty = unsafe { Buffer::raw(std::ptr::null_mut(), 0) };
        assert!(empty.as_slice().is_empty());
    }
}
