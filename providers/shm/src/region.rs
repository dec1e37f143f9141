//! The registration table: memory of this process that peers may reach
//! with RMA, each region under a random 64-bit key.
//!
//! A key is the only thing a peer presents, so it is drawn from the
//! kernel's random source (never a counter, never the clock): a peer that
//! learned one key cannot derive another. Every remote access is checked
//! here, at the target, at the moment the bytes move: the key names a live
//! region, the range lies inside it, the region grants the access. A
//! region deregistered between two chunks of one operation fails the next
//! chunk's check, cleanly.

use std::collections::HashMap;
use std::io;

pub use xfer_core::Access;

use crate::sys;

/// Why a region could not be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegionError {
    /// No region under that key (never registered, or deregistered).
    NoKey,
    /// The range is not inside the region.
    OutOfBounds,
    /// The region does not grant the access.
    Denied,
    /// The region is the local buffer of an operation still in flight.
    Busy,
}

impl std::fmt::Display for RegionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RegionError::NoKey => "no region under that key",
            RegionError::OutOfBounds => "range outside the region",
            RegionError::Denied => "access not granted by the region",
            RegionError::Busy => "region in use by an operation in flight",
        })
    }
}

impl std::error::Error for RegionError {}

/// A checked range of a registered region: where the bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Its first byte in this process.
    pub ptr: *mut u8,
    /// Its length.
    pub len: usize,
}

#[derive(Debug)]
struct Region {
    base: *mut u8,
    len: usize,
    access: Access,
    /// Local operations in flight that use it as their buffer.
    busy: u32,
    /// The memory, when the table owns it.
    owned: Option<Box<[u8]>>,
}

/// This process's registered regions, by key.
#[derive(Debug, Default)]
pub struct Regions {
    map: HashMap<u64, Region>,
}

// SAFETY: the raw pointers are registered memory that the registrant
// handed to the table (owned, or promised valid until deregistered); the
// table has no thread affinity.
unsafe impl Send for Regions {}

impl Regions {
    /// An empty table.
    pub fn new() -> Regions {
        Regions::default()
    }

    /// Registers memory the table owns from now on (returned by
    /// [`deregister`](Self::deregister)); returns its key.
    pub fn register(&mut self, mut buf: Box<[u8]>, access: Access) -> io::Result<u64> {
        let (base, len) = (buf.as_mut_ptr(), buf.len());
        self.insert(Region {
            base,
            len,
            access,
            busy: 0,
            owned: Some(buf),
        })
    }

    /// Registers `len` bytes at `ptr`; returns its key.
    ///
    /// # Safety
    /// The memory must stay valid, and must not be read or written by
    /// anything but this table's users, until it is deregistered.
    pub unsafe fn register_raw(&mut self, ptr: *mut u8, len: usize, access: Access) -> io::Result<u64> {
        self.insert(Region {
            base: ptr,
            len,
            access,
            busy: 0,
            owned: None,
        })
    }

    fn insert(&mut self, r: Region) -> io::Result<u64> {
        loop {
            let key = sys::secure_random_u64()?;
            if key != 0 && !self.map.contains_key(&key) {
                self.map.insert(key, r);
                return Ok(key);
            }
        }
    }

    /// Removes a region: every later access under its key fails. Refused
    /// while a local operation uses it; returns the memory the table owned.
    pub fn deregister(&mut self, key: u64) -> Result<Option<Box<[u8]>>, RegionError> {
        let r = self.map.get(&key).ok_or(RegionError::NoKey)?;
        if r.busy != 0 {
            return Err(RegionError::Busy);
        }
        Ok(self.map.remove(&key).and_then(|r| r.owned))
    }

    /// The region's address, which peers name in their requests (as
    /// `FI_MR_VIRT_ADDR`), and its length.
    pub fn addr(&self, key: u64) -> Option<(u64, usize)> {
        self.map.get(&key).map(|r| (r.base as u64, r.len))
    }

    /// Checks `len` bytes at address `addr` of region `key` for `want`.
    pub fn check(&self, key: u64, addr: u64, len: u64, want: Access) -> Result<Span, RegionError> {
        let r = self.map.get(&key).ok_or(RegionError::NoKey)?;
        let off = addr.checked_sub(r.base as u64).ok_or(RegionError::OutOfBounds)?;
        let end = off.checked_add(len).ok_or(RegionError::OutOfBounds)?;
        if end > r.len as u64 {
            return Err(RegionError::OutOfBounds);
        }
        if !r.access.contains(want) {
            return Err(RegionError::Denied);
        }
        Ok(Span {
            // SAFETY: off + len <= r.len, so the result stays in the region.
            ptr: unsafe { r.base.add(off as usize) },
            len: len as usize,
        })
    }

    /// Like [`check`](Self::check) with an offset into the region.
    pub fn check_offset(&self, key: u64, offset: usize, len: usize, want: Access) -> Result<Span, RegionError> {
        let (base, _) = self.addr(key).ok_or(RegionError::NoKey)?;
        let addr = base.checked_add(offset as u64).ok_or(RegionError::OutOfBounds)?;
        self.check(key, addr, len as u64, want)
    }

    /// Marks the region used by one more (`true`) or one fewer local
    /// operation.
    pub(crate) fn pin(&mut self, key: u64, on: bool) {
        if let Some(r) = self.map.get_mut(&key) {
            r.busy = if on {
                r.busy.saturating_add(1)
            } else {
                r.busy.saturating_sub(1)
            };
        }
    }

    /// Copies bytes out of a region (any access), at `offset`.
    pub fn copy_out(&self, key: u64, offset: usize, dst: &mut [u8]) -> Result<(), RegionError> {
        let s = self.check_offset(key, offset, dst.len(), Access::empty())?;
        // SAFETY: `check` put the span inside the live region; `dst` is a
        // distinct local buffer.
        unsafe { std::ptr::copy_nonoverlapping(s.ptr, dst.as_mut_ptr(), s.len) };
        Ok(())
    }

    /// Copies bytes into a region (any access), at `offset`.
    pub fn copy_in(&mut self, key: u64, offset: usize, src: &[u8]) -> Result<(), RegionError> {
        let s = self.check_offset(key, offset, src.len(), Access::empty())?;
        // SAFETY: as in `copy_out`, the other way.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), s.ptr, s.len) };
        Ok(())
    }

    /// How many regions are registered.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_bounds_access() {
        let mut t = Regions::new();
        let k = t
            .register(vec![0u8; 100].into_boxed_slice(), Access::REMOTE_READ)
            .unwrap();
        let k2 = t
            .register(vec![0u8; 100].into_boxed_slice(), Access::REMOTE_WRITE)
            .unwrap();
        assert_ne!(k, k2);
        let (base, len) = t.addr(k).unwrap();
        assert_eq!(len, 100);
        assert!(t.check(k, base, 100, Access::REMOTE_READ).is_ok());
        assert!(t.check(k, base + 100, 0, Access::REMOTE_READ).is_ok());
        assert_eq!(
            t.check(k, base + 1, 100, Access::REMOTE_READ),
            Err(RegionError::OutOfBounds)
        );
        assert_eq!(
            t.check(k, base - 1, 1, Access::REMOTE_READ),
            Err(RegionError::OutOfBounds)
        );
        assert_eq!(
            t.check(k, base + 50, u64::MAX, Access::REMOTE_READ),
            Err(RegionError::OutOfBounds)
        );
        assert_eq!(
            t.check(k, u64::MAX, 2, Access::REMOTE_READ),
            Err(RegionError::OutOfBounds)
        );
        assert_eq!(t.check(k, base, 1, Access::REMOTE_WRITE), Err(RegionError::Denied));
        assert_eq!(t.check(k ^ 1, base, 1, Access::REMOTE_READ), Err(RegionError::NoKey));
        t.pin(k, true);
        assert_eq!(t.deregister(k), Err(RegionError::Busy));
        t.pin(k, false);
        assert_eq!(t.deregister(k).unwrap().map(|b| b.len()), Some(100));
        assert_eq!(t.check(k, base, 1, Access::REMOTE_READ), Err(RegionError::NoKey));
        assert_eq!(t.len(), 1);
    }
}
