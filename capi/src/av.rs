//! Address vectors: peers' names in, compact `xfer_addr_t` handles out.

use std::ffi::{c_int, c_void};

use xfer_facade::{AddressVector, PeerAddr};

use crate::domain::{domain_of, xfer_domain_t};
use crate::error::{guard, invalid, Fail, XFER_EBADF, XFER_ETOOSMALL, XFER_SUCCESS};
use crate::handle::{self, Kind, Object};
use crate::{xfer_addr_t, XFER_NAME_MAX};

/// An address vector (opaque): the table of peers its endpoints talk to.
pub struct xfer_av_t {
    _opaque: [u8; 0],
}

/// Opens an address vector in `domain` and stores its handle in `*out`
/// (NULL on failure).
///
/// Returns 0; `XFER_EBADF` for a bad domain; `XFER_EINVAL` when `out` is
/// NULL. Ownership: the caller closes it with `xfer_av_close`, after the
/// endpoints that use it. Thread-safe.
///
/// # Safety
/// `out` must be NULL or point to writable memory for one pointer.
#[no_mangle]
pub unsafe extern "C" fn xfer_av_open(domain: *mut xfer_domain_t, out: *mut *mut xfer_av_t) -> c_int {
    guard("xfer_av_open", || {
        if out.is_null() {
            return Err(invalid("xfer_av_open: out is NULL"));
        }
        // SAFETY: `out` is non-null and valid for one pointer by contract.
        unsafe { out.write(std::ptr::null_mut()) };
        let av = domain_of(domain)?.av()?;
        let h = handle::insert(Object::Av(av), &[(domain as usize as u64, Kind::Domain)])?;
        // SAFETY: as above.
        unsafe { out.write(h as usize as *mut xfer_av_t) };
        Ok(XFER_SUCCESS)
    })
}

/// Closes an address vector.
///
/// Returns 0; `XFER_EBADF` for a bad or closed handle; `XFER_EBUSY` (and it
/// stays open) while an endpoint using it is open. Thread-safe.
#[no_mangle]
pub extern "C" fn xfer_av_close(av: *mut xfer_av_t) -> c_int {
    guard("xfer_av_close", || {
        drop(handle::remove(av as usize as u64, Kind::Av)?);
        Ok(XFER_SUCCESS)
    })
}

pub(crate) fn av_of(h: *mut xfer_av_t) -> Result<AddressVector, Fail> {
    match handle::get(h as usize as u64, Kind::Av)? {
        Object::Av(av) => Ok(av),
        _ => Err(Fail(XFER_EBADF)),
    }
}

/// Inserts a peer's name (`len` bytes at `name`, as `xfer_ep_getname` gave
/// them) and stores its handle in `*addr`. Inserting a name already present
/// gives the same handle. The bytes are copied; `name` may be reused at once.
///
/// Returns 0; `XFER_EBADF` for a bad handle; `XFER_EINVAL` when `name` or
/// `addr` is NULL, `len` is 0 or above `XFER_NAME_MAX`, or the bytes are not
/// a well-formed name; `XFER_EADDRNOTAVAIL` for another provider's name.
/// Thread-safe.
///
/// # Safety
/// `name` must be NULL or readable for `len` bytes; `addr` must be NULL or
/// point to writable memory for one `xfer_addr_t`.
#[no_mangle]
pub unsafe extern "C" fn xfer_av_insert(
    av: *mut xfer_av_t,
    name: *const c_void,
    len: usize,
    addr: *mut xfer_addr_t,
) -> c_int {
    guard("xfer_av_insert", || {
        let table = av_of(av)?;
        if name.is_null() || addr.is_null() {
            return Err(invalid("xfer_av_insert: name or addr is NULL"));
        }
        if len == 0 || len > XFER_NAME_MAX {
            return Err(invalid("xfer_av_insert: name length must be 1..=XFER_NAME_MAX"));
        }
        // SAFETY: `name` is non-null and readable for `len` (<= XFER_NAME_MAX) bytes by
        // contract; the slice is only read during this call.
        let bytes = unsafe { std::slice::from_raw_parts(name.cast::<u8>(), len) };
        let peer = table.insert(bytes)?;
        // SAFETY: `addr` is non-null and valid for one xfer_addr_t by contract.
        unsafe { addr.write(peer.0) };
        Ok(XFER_SUCCESS)
    })
}

/// Removes a peer. Operations already posted to it go on; its handle may be
/// given to a name inserted later.
///
/// Returns 0; `XFER_EBADF` for a bad AV handle; `XFER_EADDRNOTAVAIL` when
/// `addr` is not in the vector. Thread-safe.
#[no_mangle]
pub extern "C" fn xfer_av_remove(av: *mut xfer_av_t, addr: xfer_addr_t) -> c_int {
    guard("xfer_av_remove", || {
        av_of(av)?.remove(PeerAddr(addr))?;
        Ok(XFER_SUCCESS)
    })
}

/// Copies the name behind `addr` into `name`, a buffer of `*len` bytes, and
/// stores the name's length in `*len` (`fi_av_lookup`). When `name` is NULL
/// or `*len` is too small, copies nothing, stores the length needed and
/// returns `XFER_ETOOSMALL`.
///
/// Returns 0; `XFER_ETOOSMALL`; `XFER_EBADF` for a bad AV handle;
/// `XFER_EADDRNOTAVAIL` when `addr` is not in the vector; `XFER_EINVAL` when
/// `len` is NULL. Thread-safe.
///
/// # Safety
/// `len` must be NULL or point to a readable and writable `size_t`; `name`
/// must be NULL or writable for `*len` bytes.
#[no_mangle]
pub unsafe extern "C" fn xfer_av_lookup(
    av: *mut xfer_av_t,
    addr: xfer_addr_t,
    name: *mut c_void,
    len: *mut usize,
) -> c_int {
    guard("xfer_av_lookup", || {
        let table = av_of(av)?;
        if len.is_null() {
            return Err(invalid("xfer_av_lookup: len is NULL"));
        }
        let found = table.lookup(PeerAddr(addr))?;
        // SAFETY: `len` and `name` follow this function's contract.
        unsafe { copy_out(found.as_bytes(), name, len) }
    })
}

/// Stores the number of peers in `*count`.
///
/// Returns 0; `XFER_EBADF`; `XFER_EINVAL` when `count` is NULL. Thread-safe.
///
/// # Safety
/// `count` must be NULL or point to writable memory for one `size_t`.
#[no_mangle]
pub unsafe extern "C" fn xfer_av_count(av: *mut xfer_av_t, count: *mut usize) -> c_int {
    guard("xfer_av_count", || {
        let table = av_of(av)?;
        if count.is_null() {
            return Err(invalid("xfer_av_count: count is NULL"));
        }
        let n = table.len()?;
        // SAFETY: `count` is non-null and valid for one size_t by contract.
        unsafe { count.write(n) };
        Ok(XFER_SUCCESS)
    })
}

/// The `fi_getname` protocol: copy `bytes` into `buf` (capacity `*len`) when
/// they fit, else copy nothing and fail with `XFER_ETOOSMALL`; either way
/// store the needed length in `*len`.
///
/// # Safety
/// `len` must be valid for reading and writing one `usize`; `buf` must be
/// NULL or writable for `*len` bytes.
pub(crate) unsafe fn copy_out(bytes: &[u8], buf: *mut c_void, len: *mut usize) -> Result<c_int, Fail> {
    // SAFETY: `len` is valid by the caller's contract.
    let room = unsafe { len.read() };
    // SAFETY: as above.
    unsafe { len.write(bytes.len()) };
    if buf.is_null() || room < bytes.len() {
        return Err(Fail(XFER_ETOOSMALL));
    }
    // SAFETY: `buf` is writable for `room` >= bytes.len() bytes, and cannot
    // overlap `bytes`, which the library owns.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), bytes.len()) };
    Ok(XFER_SUCCESS)
}
