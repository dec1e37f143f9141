//! Memory regions registered with a domain, and the remote keys peers use to
//! reach them.
//!
//! [`Domain::register`](crate::Domain::register) takes a `Vec<u8>` and owns
//! it while it is registered; [`MemoryRegion::into_inner`] deregisters and
//! gives it back. [`Domain::register_raw`](crate::Domain::register_raw) is
//! the `unsafe` libfabric contract for memory the caller owns. Peers may
//! write or read a region whenever the domain makes progress, so its bytes
//! are reached through [`MemoryRegion::read_at`] and
//! [`MemoryRegion::write_at`], which hold the domain lock (every provider
//! access to registered memory happens under it) and so never race with a
//! peer's access.
//!
//! A [`RemoteKey`] names a region for peers: [`MemoryRegion::pack_rkey`]
//! turns it into bytes to send out of band, [`RemoteKey::unpack`] turns them
//! back (as `ucp_rkey_pack` / `ucp_ep_rkey_unpack`). Layout, little-endian:
//!
//! ```text
//! offset size field
//! 0      2    magic "xk"
//! 2      1    version 1
//! 3      1    provider id (0x01 = tcp; the first byte of its endpoint names)
//! 4      4    reserved, zero
//! 8      8    addr: the region's start address in the target's memory
//! 16     8    len: the region's length
//! 24     8    key: the provider's remote key
//! ```

use std::sync::Arc;

use super::access::Access;
use crate::buffer::{Buffer, LocalDesc};
use crate::domain::Shared;
use crate::error::{Error, Result};

/// Length of a packed remote key.
pub const RKEY_LEN: usize = 32;
/// Version byte of packed remote keys.
pub const RKEY_VERSION: u8 = 1;
const RKEY_MAGIC: [u8; 2] = *b"xk";

/// What a peer needs to reach a registered region: the provider, the
/// region's address and length in the target's memory, and its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteKey {
    provider: u8,
    addr: u64,
    len: u64,
    key: u64,
}

impl RemoteKey {
    /// A key from its fields, as a peer received them some other way than
    /// [`pack`](Self::pack) (the C ABI's plain struct). A region that wraps
    /// the address space is [`Error::InvalidArgument`]; whether the key is
    /// valid is the target's check, as for unpacked keys.
    pub fn from_parts(provider: u8, addr: u64, len: u64, key: u64) -> Result<RemoteKey> {
        if addr.checked_add(len).is_none() {
            return Err(Error::InvalidArgument("remote key: region wraps the address space"));
        }
        Ok(RemoteKey {
            provider,
            addr,
            len,
            key,
        })
    }

    /// The id of the provider that registered the region.
    pub fn provider(&self) -> u8 {
        self.provider
    }

    /// The region's start address in the target's memory.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// The region's length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The provider's remote key.
    pub fn key(&self) -> u64 {
        self.key
    }

    /// The key as [`RKEY_LEN`] bytes (see the [module documentation](self)).
    pub fn pack(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(RKEY_LEN);
        out.extend_from_slice(&RKEY_MAGIC);
        out.push(RKEY_VERSION);
        out.push(self.provider);
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&self.addr.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.key.to_le_bytes());
        out
    }

    /// Parses bytes made by [`pack`](Self::pack). Anything else (wrong
    /// length, magic, version or reserved bytes, a region that wraps the
    /// address space) is [`Error::InvalidArgument`]. Whether the provider id
    /// fits the endpoint is checked when the key is used.
    pub fn unpack(bytes: &[u8]) -> Result<RemoteKey> {
        if bytes.len() < RKEY_LEN {
            return Err(Error::InvalidArgument("remote key: truncated"));
        }
        if bytes.len() > RKEY_LEN {
            return Err(Error::InvalidArgument("remote key: trailing bytes"));
        }
        if bytes[0..2] != RKEY_MAGIC {
            return Err(Error::InvalidArgument("remote key: bad magic"));
        }
        if bytes[2] != RKEY_VERSION {
            return Err(Error::InvalidArgument("remote key: unsupported version"));
        }
        if bytes[4..8] != [0; 4] {
            return Err(Error::InvalidArgument("remote key: reserved bytes not zero"));
        }
        let word = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(b)
        };
        RemoteKey::from_parts(bytes[3], word(8), word(16), word(24))
    }
}

/// A registered memory region: local descriptor, remote key, and (for
/// [`Domain::register`](crate::Domain::register)) the memory itself.
///
/// Dropping it deregisters it (under the domain lock, so no peer access is
/// in progress) and then frees owned memory. If the domain cannot be
/// entered (its lock poisoned, or a single-threaded domain dropped on
/// another thread) the registration cannot be removed, so owned memory is
/// leaked rather than freed under a live key.
pub struct MemoryRegion {
    shared: Arc<Shared>,
    ptr: *mut u8,
    len: usize,
    access: Access,
    desc: u64,
    key: u64,
    provider: u8,
    /// The memory is a leaked `Box<[u8]>` of `len` bytes at `ptr`.
    owned: bool,
}

// SAFETY: the region is a pointer plus keys; the memory is either owned (a
// leaked Box<[u8]>, which is Send) or promised valid by `register_raw`'s
// caller for the region's life, and every access to it goes through the
// domain lock (`read_at`, `write_at`, provider progress).
unsafe impl Send for MemoryRegion {}
// SAFETY: `&MemoryRegion` only reads the immutable fields or accesses the
// memory under the domain lock.
unsafe impl Sync for MemoryRegion {}

impl MemoryRegion {
    /// Registers `len` bytes at `ptr`; `owned` says `ptr` came from
    /// `Box::into_raw`.
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` bytes until the
    /// region is dropped (or freed by it when `owned`).
    pub(crate) unsafe fn new(
        shared: Arc<Shared>,
        ptr: *mut u8,
        len: usize,
        access: Access,
        owned: bool,
    ) -> Result<Self> {
        let mut st = shared.lock()?;
        let keys = st.prov.register(ptr as usize, len, access)?;
        drop(st);
        let provider = shared.provider_id;
        tracing::debug!(addr = ptr as usize, len, ?access, key = keys.key, "memory registered");
        Ok(MemoryRegion {
            shared,
            ptr,
            len,
            access,
            desc: keys.desc,
            key: keys.key,
            provider,
            owned,
        })
    }

    /// The local descriptor (verbs: lkey; TCP: the key-table key).
    pub fn desc(&self) -> u64 {
        self.desc
    }

    /// `len` bytes of the region from `offset`, as a raw buffer that
    /// carries the region's keys ([`LocalDesc`]): as the local side of a
    /// send, receive, write or read, a provider that needs registered memory
    /// (verbs) uses this registration instead of its cache
    /// (libfabric's `desc`). [`Error::InvalidArgument`] for a range outside
    /// the region; posting it on an endpoint of another domain is
    /// [`Error::InvalidArgument`] too.
    ///
    /// # Safety
    /// As for [`Buffer::raw`]: the region must outlive the operation, and
    /// the range must not be accessed (by [`read_at`](Self::read_at),
    /// [`write_at`](Self::write_at), peers' RMA or another operation
    /// writing it) until the operation's completion is reported.
    pub unsafe fn buffer(&self, offset: usize, len: usize) -> Result<Buffer> {
        self.check_range(offset, len)?;
        let desc = LocalDesc {
            desc: self.desc,
            key: self.key,
            access: self.access,
            domain: Arc::as_ptr(&self.shared) as usize,
        };
        // SAFETY: the range is inside the region (checked), valid while it is
        // registered; the caller keeps it registered and untouched until the
        // operation completes.
        Ok(unsafe { Buffer::raw_in(self.ptr.add(offset), len, desc) })
    }

    /// The remote key peers name this region with.
    pub fn key(&self) -> u64 {
        self.key
    }

    /// The region's start address.
    pub fn addr(&self) -> u64 {
        self.ptr as usize as u64
    }

    /// The region's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The rights it was registered with.
    pub fn access(&self) -> Access {
        self.access
    }

    /// The remote key of this region, for local use or to pack.
    pub fn remote_key(&self) -> RemoteKey {
        RemoteKey {
            provider: self.provider,
            addr: self.addr(),
            len: self.len as u64,
            key: self.key,
        }
    }

    /// The remote key as bytes for a peer ([`RemoteKey::unpack`]).
    pub fn pack_rkey(&self) -> Vec<u8> {
        self.remote_key().pack()
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::InvalidArgument("range outside the memory region")),
        }
    }

    /// Copies `out.len()` bytes from `offset` in the region into `out`,
    /// under the domain lock.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check_range(offset, out.len())?;
        let _st = self.shared.lock()?;
        if !out.is_empty() {
            // SAFETY: the range is inside the region, which is valid while
            // registered; the domain lock excludes provider access.
            unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(offset), out.as_mut_ptr(), out.len()) };
        }
        Ok(())
    }

    /// Copies `data` into the region at `offset`, under the domain lock.
    pub fn write_at(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check_range(offset, data.len())?;
        let _st = self.shared.lock()?;
        if !data.is_empty() {
            // SAFETY: as in `read_at`.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(offset), data.len()) };
        }
        Ok(())
    }

    /// A copy of the whole region, taken under the domain lock.
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        let mut v = vec![0; self.len];
        self.read_at(0, &mut v)?;
        Ok(v)
    }

    /// Deregisters the region and gives back the memory it owned; `None`
    /// for a region made by [`register_raw`](crate::Domain::register_raw)
    /// (or when the domain could not be entered, poisoned or single-threaded
    /// and called from another thread, and the memory had to be leaked).
    pub fn into_inner(mut self) -> Option<Vec<u8>> {
        let freed = self.release();
        let out = freed.then(|| self.take_owned()).flatten();
        std::mem::forget(self);
        out
    }

    /// Removes the registration; false if it could not be (the domain
    /// poisoned, or single-threaded and this another thread).
    fn release(&mut self) -> bool {
        match self.shared.lock() {
            Ok(mut st) => {
                st.prov.deregister(self.key);
                tracing::debug!(key = self.key, "memory deregistered");
                true
            }
            Err(e) => {
                crate::error_limited!(
                    key = self.key,
                    error = %e,
                    "memory region dropped where its domain cannot be entered (poisoned, or another thread of a single-threaded one); its memory leaks"
                );
                false
            }
        }
    }

    fn take_owned(&mut self) -> Option<Vec<u8>> {
        if !self.owned {
            return None;
        }
        self.owned = false;
        let slice = std::ptr::slice_from_raw_parts_mut(self.ptr, self.len);
        // SAFETY: `ptr`/`len` came from `Box::into_raw` of a `Box<[u8]>` in
        // `Domain::register`, and `owned` is cleared so this runs once.
        Some(unsafe { Box::from_raw(slice) }.into_vec())
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        if self.release() {
            drop(self.take_owned());
        }
    }
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &self.addr())
            .field("len", &self.len)
            .field("access", &self.access)
            .field("key", &self.key)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RemoteKey {
        RemoteKey {
            provider: 1,
            addr: 0x7f00_1234_5000,
            len: 16 << 20,
            key: 0x0000_0007_0000_0003,
        }
    }

    #[test]
    fn rkey_round_trip() {
        let k = sample();
        let bytes = k.pack();
        assert_eq!(bytes.len(), RKEY_LEN);
        assert_eq!(&bytes[..4], b"xk\x01\x01");
        assert_eq!(RemoteKey::unpack(&bytes), Ok(k));
        let empty = RemoteKey { len: 0, ..k };
        assert_eq!(RemoteKey::unpack(&empty.pack()), Ok(empty));
    }

    fn err(bytes: &[u8]) -> &'static str {
        match RemoteKey::unpack(bytes) {
            Err(Error::InvalidArgument(why)) => why,
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn rkey_truncated_and_trailing() {
        let bytes = sample().pack();
        for n in 0..RKEY_LEN {
            assert_eq!(err(&bytes[..n]), "remote key: truncated");
        }
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(err(&long), "remote key: trailing bytes");
    }

    #[test]
    fn rkey_bad_magic_version_reserved_and_wrap() {
        let good = sample().pack();
        let mut b = good.clone();
        b[0] = b'X';
        assert_eq!(err(&b), "remote key: bad magic");
        let mut b = good.clone();
        b[2] = 2;
        assert_eq!(err(&b), "remote key: unsupported version");
        let mut b = good.clone();
        b[5] = 1;
        assert_eq!(err(&b), "remote key: reserved bytes not zero");
        let wrap = RemoteKey {
            addr: u64::MAX - 1,
            len: 2,
            ..sample()
        };
        assert_eq!(err(&wrap.pack()), "remote key: region wraps the address space");
    }

    #[test]
    fn rkey_unpack_never_panics_on_garbage() {
        let mut seed = 0x1234_5678_u64;
        for len in 0..64 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    (seed >> 56) as u8
                })
                .collect();
            let _ = RemoteKey::unpack(&bytes);
        }
    }
}
