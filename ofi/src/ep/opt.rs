//! xfer's own endpoint options (`fi_setopt`/`fi_getopt` at
//! `FI_OPT_ENDPOINT`), numbered as `rdma/fi_ext.h` asks providers to:
//! negative, from a 12-bit provider code shifted 16 bits. C programs get
//! the numbers from `ofi/include/fi_ext_xfer.h`.

use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;

use super::EpCore;
use crate::fi;

/// xfer's provider code, shifted as `FI_PROV_SPECIFIC_XXX` are.
pub const FI_PROV_SPECIFIC_XFER: c_int = 0xfe0 << 16;
/// The progress timeout (`EndpointAttr::progress_timeout_ms`,
/// `XFER_PROGRESS_TIMEOUT_MS`): a `uint64_t` of milliseconds a peer may make
/// no progress while operations wait for it before they fail with
/// `FI_ETIMEDOUT`; 0: never. Set before `fi_enable`.
pub const FI_OPT_XFER_PROGRESS_TIMEOUT_MS: c_int = -FI_PROV_SPECIFIC_XFER;

/// `fi_getopt` of one of xfer's options: `None` when `name` is not one.
///
/// # Safety
/// `val` and `len` are null or the caller's buffer and its length.
pub(super) unsafe fn get(ep: &EpCore, name: c_int, val: *mut c_void, len: *mut usize) -> Option<c_int> {
    if name != FI_OPT_XFER_PROGRESS_TIMEOUT_MS {
        return None;
    }
    if val.is_null() || len.is_null() {
        return Some(-(libc::EINVAL));
    }
    // SAFETY: checked non-null; the caller's length.
    let room = unsafe { *len };
    // SAFETY: as above.
    unsafe { *len = std::mem::size_of::<u64>() };
    if room < std::mem::size_of::<u64>() {
        return Some(fi::err(fi::FI_ETOOSMALL));
    }
    let v = ep.progress_timeout_ms.load(Ordering::Relaxed);
    // SAFETY: the caller's buffer holds at least a uint64_t.
    unsafe { val.cast::<u64>().write_unaligned(v) };
    Some(0)
}

/// `fi_setopt` of one of xfer's options: `None` when `name` is not one.
/// The xfer endpoint takes its settings when `fi_enable` opens it: later,
/// `-FI_EOPBADSTATE`.
///
/// # Safety
/// `val` is null or holds `len` bytes.
pub(super) unsafe fn set(ep: &EpCore, name: c_int, val: *const c_void, len: usize) -> Option<c_int> {
    if name != FI_OPT_XFER_PROGRESS_TIMEOUT_MS {
        return None;
    }
    if val.is_null() || len != std::mem::size_of::<u64>() {
        return Some(-(libc::EINVAL));
    }
    if ep.enabled.get().is_some() {
        return Some(fi::err(fi::FI_EOPBADSTATE));
    }
    // SAFETY: checked: the caller's value is a uint64_t.
    let v = unsafe { val.cast::<u64>().read_unaligned() };
    ep.progress_timeout_ms.store(v, Ordering::Relaxed);
    Some(0)
}
