//! Memory registration (`fi_mr_reg`) and remote keys.
//!
//! A registration is a checked handle (`xfer_mr_t *`) like the others. An
//! unpacked remote key is not: it is a plain caller-owned struct
//! (`xfer_rkey_t`), like the result of `fi_mr_map_raw` or
//! `ucp_ep_rkey_unpack` without the need to free it. It holds nothing the
//! library would have to release, so it cannot leak, can be copied, stored
//! in shared memory or rebuilt from its fields; a forged or stale key is
//! harmless, because the target checks every access against its own key
//! table and refuses it with `XFER_EACCES`.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use xfer_facade::{Access, MemoryRegion, RemoteKey};

use crate::av::copy_out;
use crate::domain::{domain_of, xfer_domain_t};
use crate::error::{guard, invalid, Fail, XFER_EBADF, XFER_EBADFLAGS, XFER_SUCCESS};
use crate::handle::{self, Kind, Object};

/// Access right: the local side of RMA may write the region (a read's
/// destination). Matters for RDMA providers only (`FI_READ` locally).
pub const XFER_MR_LOCAL_WRITE: u64 = 1u64 << 0;
/// Access right: peers may read the region (`FI_REMOTE_READ`).
pub const XFER_MR_REMOTE_READ: u64 = 1u64 << 1;
/// Access right: peers may write the region (`FI_REMOTE_WRITE`).
pub const XFER_MR_REMOTE_WRITE: u64 = 1u64 << 2;

/// Length in bytes of a packed remote key (`xfer_mr_rkey_pack`).
pub const XFER_RKEY_PACKED_LEN: usize = 32;

/// A registered memory region (opaque handle), from `xfer_mr_reg`.
pub struct xfer_mr_t {
    _opaque: [u8; 0],
}

/// A peer's memory region as the initiator of RMA names it: filled by
/// `xfer_rkey_unpack` from the bytes the target's `xfer_mr_rkey_pack` made.
///
/// A plain struct owned by the caller: nothing to free, copy it freely, it
/// is read only during the call it is passed to. It stays usable as long as
/// the target keeps the region registered; after that, operations with it
/// complete with `XFER_EACCES`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct xfer_rkey_t {
    /// The region's start address in the target's memory.
    pub addr: u64,
    /// The region's length in bytes (informational: the target checks bounds).
    pub len: u64,
    /// The provider's remote key.
    pub key: u64,
    /// The id of the provider that registered it (1 = tcp, 2 = verbs; the
    /// first byte of its endpoints' names); RMA with a key of another
    /// provider than the endpoint's is `XFER_EINVAL`.
    pub provider: u32,
}

impl xfer_rkey_t {
    fn from_rust(k: &RemoteKey) -> xfer_rkey_t {
        xfer_rkey_t {
            addr: k.addr(),
            len: k.len(),
            key: k.key(),
            provider: u32::from(k.provider()),
        }
    }

    /// The Rust key with the same fields; checks the provider id fits and
    /// the region does not wrap.
    pub(crate) fn to_rust(self) -> Result<RemoteKey, Fail> {
        let provider = u8::try_from(self.provider).map_err(|_| invalid("rkey: provider id out of range"))?;
        Ok(RemoteKey::from_parts(provider, self.addr, self.len, self.key)?)
    }
}

/// Registers `len` bytes at `buf` in `domain` with the rights `access` (a
/// combination of `XFER_MR_LOCAL_WRITE`, `XFER_MR_REMOTE_READ`,
/// `XFER_MR_REMOTE_WRITE`) and stores the handle in `*out` (NULL on
/// failure) (`fi_mr_reg`). Each call registers exactly this range with
/// exactly these rights (no cache, no rounding to pages).
///
/// Returns 0; `XFER_EBADF` for a bad domain; `XFER_EINVAL` when `buf` or
/// `out` is NULL, `len` is 0 or above `PTRDIFF_MAX`; `XFER_EBADFLAGS` for an
/// unknown `access` bit.
///
/// Ownership and lifetime (libfabric's contract): the memory stays the
/// caller's, is not copied, and must stay valid until `xfer_mr_close`
/// returns. While registered, peers read and write it (as `access` allows)
/// whenever the domain makes progress, i.e. during calls on this domain's
/// CQs and endpoints; the caller's own accesses must not overlap those
/// calls (single-threaded programs: read it between calls). Close the MR
/// before the domain (`xfer_domain_close` gives `XFER_EBUSY` meanwhile).
/// Thread-safe.
///
/// # Safety
/// `buf` must be valid for reads and writes of `len` bytes until
/// `xfer_mr_close` returns; `out` must be NULL or writable for one pointer.
#[no_mangle]
pub unsafe extern "C" fn xfer_mr_reg(
    domain: *mut xfer_domain_t,
    buf: *mut c_void,
    len: usize,
    access: u64,
    out: *mut *mut xfer_mr_t,
) -> c_int {
    guard("xfer_mr_reg", || {
        if out.is_null() {
            return Err(invalid("xfer_mr_reg: out is NULL"));
        }
        // SAFETY: `out` is non-null and valid for one pointer by contract.
        unsafe { out.write(std::ptr::null_mut()) };
        let d = domain_of(domain)?;
        if buf.is_null() {
            return Err(invalid("xfer_mr_reg: buf is NULL"));
        }
        if len == 0 || len > isize::MAX as usize {
            return Err(invalid("xfer_mr_reg: len is 0 or above PTRDIFF_MAX"));
        }
        let access = u32::try_from(access)
            .ok()
            .and_then(Access::from_bits)
            .ok_or(Fail(XFER_EBADFLAGS))?;
        // SAFETY: forwarded from this function's contract: `buf` is valid
        // for `len` bytes until the region is dropped, which happens at the
        // latest when `xfer_mr_close` removes its handle (the table holds the
        // only reference).
        let mr = unsafe { d.register_raw(buf.cast::<u8>(), len, access)? };
        let h = handle::insert(Object::Mr(Arc::new(mr)), &[(domain as usize as u64, Kind::Domain)])?;
        // SAFETY: as above.
        unsafe { out.write(h as usize as *mut xfer_mr_t) };
        Ok(XFER_SUCCESS)
    })
}

/// Deregisters a region (`fi_close` on an MR). When this returns, peers can
/// no longer reach the memory (later RMA with its key completes with
/// `XFER_EACCES` at the initiator) and the library never touches it again:
/// the caller may free it.
///
/// Never `XFER_EBUSY`: local RMA buffers are not tied to registrations, so
/// nothing local can be using the region. A peer's read of the region that
/// is being answered at that moment fails at that peer (its connection is
/// dropped, as the answer's length is already on the wire); a peer's write
/// is either applied before or refused after.
///
/// Returns 0, or `XFER_EBADF` for a bad or already closed handle.
/// Thread-safe; closing while another thread uses the same handle is a
/// program error (that call fails with `XFER_EBADF` or completes first).
#[no_mangle]
pub extern "C" fn xfer_mr_close(mr: *mut xfer_mr_t) -> c_int {
    guard("xfer_mr_close", || {
        // Dropped here, outside the table's lock: deregisters under the
        // domain lock.
        drop(handle::remove(mr as usize as u64, Kind::Mr)?);
        Ok(XFER_SUCCESS)
    })
}

/// Runs `f` on the region behind a handle, under the handle table's lock.
pub(crate) fn with_mr<R>(mr: *mut xfer_mr_t, f: impl FnOnce(&MemoryRegion) -> R) -> Result<R, Fail> {
    handle::with(mr as usize as u64, Kind::Mr, |obj| match obj {
        Object::Mr(m) => Ok(f(m)),
        _ => Err(Fail(XFER_EBADF)),
    })?
}

/// Stores one `u64` property of a region in `*out`.
///
/// # Safety
/// `out` must be NULL or writable for one `uint64_t`.
unsafe fn mr_u64(
    what: &'static str,
    mr: *mut xfer_mr_t,
    out: *mut u64,
    get: impl FnOnce(&MemoryRegion) -> u64,
) -> Result<c_int, Fail> {
    let v = with_mr(mr, get)?;
    if out.is_null() {
        return Err(invalid(what));
    }
    // SAFETY: non-null and writable by contract.
    unsafe { out.write(v) };
    Ok(XFER_SUCCESS)
}

/// Stores the region's remote key in `*key` (`fi_mr_key`). Peers need the
/// whole packed key (`xfer_mr_rkey_pack`), not just this number.
///
/// Returns 0; `XFER_EBADF`; `XFER_EINVAL` when `key` is NULL. Thread-safe.
///
/// # Safety
/// `key` must be NULL or writable for one `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn xfer_mr_key(mr: *mut xfer_mr_t, key: *mut u64) -> c_int {
    guard("xfer_mr_key", || {
        // SAFETY: forwarded from this function's contract.
        unsafe { mr_u64("xfer_mr_key: key is NULL", mr, key, MemoryRegion::key) }
    })
}

/// Stores the region's local descriptor in `*desc` (`fi_mr_desc`; verbs:
/// the lkey; tcp: equal to the key). The RMA calls take no descriptor yet:
/// the tcp provider needs none.
///
/// Returns 0; `XFER_EBADF`; `XFER_EINVAL` when `desc` is NULL. Thread-safe.
///
/// # Safety
/// `desc` must be NULL or writable for one `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn xfer_mr_desc(mr: *mut xfer_mr_t, desc: *mut u64) -> c_int {
    guard("xfer_mr_desc", || {
        // SAFETY: forwarded from this function's contract.
        unsafe { mr_u64("xfer_mr_desc: desc is NULL", mr, desc, MemoryRegion::desc) }
    })
}

/// Stores the region's start address (the `buf` it was registered with) in
/// `*addr`. RMA calls address a peer's region by offset from its start.
///
/// Returns 0; `XFER_EBADF`; `XFER_EINVAL` when `addr` is NULL. Thread-safe.
///
/// # Safety
/// `addr` must be NULL or writable for one `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn xfer_mr_addr(mr: *mut xfer_mr_t, addr: *mut u64) -> c_int {
    guard("xfer_mr_addr", || {
        // SAFETY: forwarded from this function's contract.
        unsafe { mr_u64("xfer_mr_addr: addr is NULL", mr, addr, MemoryRegion::addr) }
    })
}

/// Packs the region's remote key into `buf`, a buffer of `*len` bytes, and
/// stores the packed length (`XFER_RKEY_PACKED_LEN`) in `*len`
/// (`ucp_rkey_pack`; the bytes play the role of libfabric's raw key). When
/// `buf` is NULL or `*len` is too small, copies nothing, stores the length
/// needed and returns `XFER_ETOOSMALL`. Send the bytes to peers, which call
/// `xfer_rkey_unpack`. They are position-independent and contain no
/// pointer the peer dereferences.
///
/// Returns 0; `XFER_ETOOSMALL`; `XFER_EBADF`; `XFER_EINVAL` when `len` is
/// NULL. Thread-safe.
///
/// # Safety
/// `len` must be NULL or point to a readable and writable `size_t`; `buf`
/// must be NULL or writable for `*len` bytes.
#[no_mangle]
pub unsafe extern "C" fn xfer_mr_rkey_pack(mr: *mut xfer_mr_t, buf: *mut c_void, len: *mut usize) -> c_int {
    guard("xfer_mr_rkey_pack", || {
        let bytes = with_mr(mr, MemoryRegion::pack_rkey)?;
        if len.is_null() {
            return Err(invalid("xfer_mr_rkey_pack: len is NULL"));
        }
        // SAFETY: `buf` and `len` follow this function's contract.
        unsafe { copy_out(&bytes, buf, len) }
    })
}

/// Parses `len` bytes made by a peer's `xfer_mr_rkey_pack` into `*out`
/// (`ucp_ep_rkey_unpack`, `fi_mr_map_raw`). The result is a plain struct
/// owned by the caller: nothing to free. Needs no domain or endpoint; the
/// provider is checked when the key is used.
///
/// Returns 0, or `XFER_EINVAL` when `bytes` or `out` is NULL or the bytes
/// are not a packed key (wrong length, magic, version, reserved bytes, or a
/// region that wraps the address space); `*out` is then zeroed. Thread-safe.
///
/// # Safety
/// `bytes` must be NULL or readable for `len` bytes; `out` must be NULL or
/// writable for one `xfer_rkey_t`.
#[no_mangle]
pub unsafe extern "C" fn xfer_rkey_unpack(bytes: *const c_void, len: usize, out: *mut xfer_rkey_t) -> c_int {
    guard("xfer_rkey_unpack", || {
        if out.is_null() {
            return Err(invalid("xfer_rkey_unpack: out is NULL"));
        }
        let zero = xfer_rkey_t {
            addr: 0,
            len: 0,
            key: 0,
            provider: 0,
        };
        // SAFETY: `out` is non-null and writable by contract.
        unsafe { out.write(zero) };
        if bytes.is_null() {
            return Err(invalid("xfer_rkey_unpack: bytes is NULL"));
        }
        if len != XFER_RKEY_PACKED_LEN {
            return Err(invalid("xfer_rkey_unpack: not the length of a packed key"));
        }
        // SAFETY: non-null and readable for `len` bytes by contract.
        let slice = unsafe { std::slice::from_raw_parts(bytes.cast::<u8>(), len) };
        let key = RemoteKey::unpack(slice)?;
        // SAFETY: as above.
        unsafe { out.write(xfer_rkey_t::from_rust(&key)) };
        Ok(XFER_SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_bits_match_the_rust_access() {
        assert_eq!(XFER_MR_LOCAL_WRITE, u64::from(Access::LOCAL_WRITE.bits()));
        assert_eq!(XFER_MR_REMOTE_READ, u64::from(Access::REMOTE_READ.bits()));
        assert_eq!(XFER_MR_REMOTE_WRITE, u64::from(Access::REMOTE_WRITE.bits()));
        assert_eq!(
            XFER_MR_LOCAL_WRITE | XFER_MR_REMOTE_READ | XFER_MR_REMOTE_WRITE,
            u64::from(Access::all().bits())
        );
    }

    #[test]
    fn rkey_struct_round_trips_through_the_packed_form() {
        let c = xfer_rkey_t {
            addr: 0x7f00_1234_5000,
            len: 1 << 20,
            key: 0x7_0000_0003,
            provider: 1,
        };
        let k = c.to_rust().unwrap();
        let packed = k.pack();
        assert_eq!(packed.len(), XFER_RKEY_PACKED_LEN);
        let mut back = std::mem::MaybeUninit::<xfer_rkey_t>::uninit();
        // SAFETY: `packed` is readable for its length; `back` is writable.
        let rc = unsafe { xfer_rkey_unpack(packed.as_ptr().cast(), packed.len(), back.as_mut_ptr()) };
        assert_eq!(rc, 0);
        // SAFETY: written by the successful call.
        let back = unsafe { back.assume_init() };
        assert_eq!(
            (back.addr, back.len, back.key, back.provider),
            (c.addr, c.len, c.key, c.provider)
        );
        let bad = xfer_rkey_t { provider: 256, ..c };
        assert_eq!(bad.to_rust().unwrap_err(), invalid("x"));
        let wraps = xfer_rkey_t { addr: u64::MAX, ..c };
        assert_eq!(wraps.to_rust().unwrap_err(), invalid("x"));
    }
}
