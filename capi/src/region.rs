//! Operations whose local buffer lies in a registered region, named by the
//! region's handle and an offset instead of a pointer (libfabric's `desc`,
//! UCX's memory handle).
//!
//! The provider then uses that registration (verbs: its lkey) instead of
//! looking the buffer up in its registration cache, and the range is checked
//! against the region when the operation is posted: a range outside it is
//! `XFER_EINVAL`, where a `desc` that does not cover its buffer goes unnoticed
//! in libfabric until the NIC faults. The region must stay registered until
//! the operation's completion is polled (closed earlier, a verbs operation
//! fails with a protection error; tcp does not look at it again).

use std::ffi::{c_int, c_void};

use xfer_facade::{Buffer, RmaKind};

use crate::ep::{ep_of, post_recv, post_send, xfer_ep_t};
use crate::error::{guard, invalid, Fail};
use crate::mr::{with_mr, xfer_mr_t, xfer_rkey_t};
use crate::rma::{msg, post_buffer, xfer_rma_msg_t};
use crate::xfer_addr_t;

/// The `len` bytes at `offset` in region `mr`, as an operation's buffer.
///
/// # Safety
/// The range must not be accessed by the program (or by another operation
/// writing it) until the operation it is given to completes, and the region
/// must stay registered until then.
unsafe fn region_buffer(mr: *mut xfer_mr_t, offset: u64, len: usize) -> Result<Buffer, Fail> {
    let offset = usize::try_from(offset).map_err(|_| invalid("offset beyond the region"))?;
    // SAFETY: forwarded from this function's contract; `buffer` checks the
    // range against the region.
    Ok(with_mr(mr, |m| unsafe { m.buffer(offset, len) })??)
}

/// Shared body of `xfer_ep_write_mr` and `xfer_ep_read_mr`, reported as
/// `name`: the `m.len` bytes at `offset` in region `mr` are the local side of
/// the operation `m` describes (its `buf` unused).
///
/// # Safety
/// As those functions: the range untouched (a write: unmodified) until the
/// completion, `mr` open until then, `m.rkey` NULL or readable.
unsafe fn rma(
    name: &'static str,
    kind: RmaKind,
    ep: *mut xfer_ep_t,
    mr: *mut xfer_mr_t,
    offset: u64,
    m: xfer_rma_msg_t,
) -> c_int {
    guard(name, || {
        let e = ep_of(ep)?;
        // SAFETY: forwarded from this function's contract.
        let buf = unsafe { region_buffer(mr, offset, m.len)? };
        // SAFETY: `m.rkey` is NULL or readable by contract.
        unsafe { post_buffer(&e, kind, &m, buf, None, true) }
    })
}

/// Sends the `len` bytes at `offset` in region `mr` as an untagged message to
/// `dest` (`fi_send` with the region's `desc`). Returns as `xfer_ep_send`,
/// and `XFER_EINVAL` when the range is not inside the region or the region
/// belongs to another domain; `XFER_EBADF` for a bad `ep` or `mr`.
///
/// # Safety
/// The range must not be modified until the completion is polled or the
/// endpoint is closed, and `mr` must stay open until then.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_send_mr(
    ep: *mut xfer_ep_t,
    mr: *mut xfer_mr_t,
    offset: u64,
    len: usize,
    dest: xfer_addr_t,
    context: *mut c_void,
) -> c_int {
    guard("xfer_ep_send_mr", || {
        let e = ep_of(ep)?;
        // SAFETY: forwarded from this function's contract.
        let buf = unsafe { region_buffer(mr, offset, len)? };
        post_send(&e, buf, dest, None, None, context, true)
    })
}

/// Like `xfer_ep_send_mr`, tagged `tag` (`fi_tsend` with a `desc`).
///
/// # Safety
/// As `xfer_ep_send_mr`.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_tsend_mr(
    ep: *mut xfer_ep_t,
    mr: *mut xfer_mr_t,
    offset: u64,
    len: usize,
    dest: xfer_addr_t,
    tag: u64,
    context: *mut c_void,
) -> c_int {
    guard("xfer_ep_tsend_mr", || {
        let e = ep_of(ep)?;
        // SAFETY: forwarded from this function's contract.
        let buf = unsafe { region_buffer(mr, offset, len)? };
        post_send(&e, buf, dest, Some(tag), None, context, true)
    })
}

/// Receives an untagged message from `src` (`XFER_ADDR_UNSPEC`: any) into
/// the `len` bytes at `offset` in region `mr` (`fi_recv` with a `desc`).
/// Returns as `xfer_ep_recv`, and as `xfer_ep_send_mr` for the region.
///
/// # Safety
/// The range must not be accessed until the completion is polled or the
/// endpoint is closed, and `mr` must stay open until then.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_recv_mr(
    ep: *mut xfer_ep_t,
    mr: *mut xfer_mr_t,
    offset: u64,
    len: usize,
    src: xfer_addr_t,
    context: *mut c_void,
) -> c_int {
    guard("xfer_ep_recv_mr", || {
        let e = ep_of(ep)?;
        // SAFETY: forwarded from this function's contract.
        let buf = unsafe { region_buffer(mr, offset, len)? };
        post_recv(&e, buf, src, None, context)
    })
}

/// Like `xfer_ep_recv_mr`, for a message whose tag equals `tag` outside the
/// bits set in `ignore` (`fi_trecv` with a `desc`).
///
/// # Safety
/// As `xfer_ep_recv_mr`.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_trecv_mr(
    ep: *mut xfer_ep_t,
    mr: *mut xfer_mr_t,
    offset: u64,
    len: usize,
    src: xfer_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> c_int {
    guard("xfer_ep_trecv_mr", || {
        let e = ep_of(ep)?;
        // SAFETY: forwarded from this function's contract.
        let buf = unsafe { region_buffer(mr, offset, len)? };
        post_recv(&e, buf, src, Some((tag, ignore)), context)
    })
}

/// Writes the `len` bytes at `offset` in region `mr` into the peer's region
/// `*rkey`, `roffset` bytes into it (`fi_write` with a `desc`). Returns and
/// completes as `xfer_ep_write`, and as `xfer_ep_send_mr` for the region.
///
/// # Safety
/// As `xfer_ep_send_mr`; `rkey` must be NULL or point to a readable
/// `xfer_rkey_t`.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_write_mr(
    ep: *mut xfer_ep_t,
    mr: *mut xfer_mr_t,
    offset: u64,
    len: usize,
    peer: xfer_addr_t,
    rkey: *const xfer_rkey_t,
    roffset: u64,
    context: *mut c_void,
) -> c_int {
    let m = msg(std::ptr::null(), len, peer, rkey, roffset, 0, context);
    // SAFETY: forwarded from this function's contract.
    unsafe { rma("xfer_ep_write_mr", RmaKind::Write, ep, mr, offset, m) }
}

/// Reads `len` bytes of the peer's region `*rkey`, from `roffset` bytes into
/// it, into the `len` bytes at `offset` in region `mr` (`fi_read` with a
/// `desc`). Returns and completes as `xfer_ep_read`, and as
/// `xfer_ep_send_mr` for the region.
///
/// # Safety
/// As `xfer_ep_recv_mr`; `rkey` must be NULL or point to a readable
/// `xfer_rkey_t`.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_read_mr(
    ep: *mut xfer_ep_t,
    mr: *mut xfer_mr_t,
    offset: u64,
    len: usize,
    peer: xfer_addr_t,
    rkey: *const xfer_rkey_t,
    roffset: u64,
    context: *mut c_void,
) -> c_int {
    let m = msg(std::ptr::null(), len, peer, rkey, roffset, 0, context);
    // SAFETY: forwarded from this function's contract.
    unsafe { rma("xfer_ep_read_mr", RmaKind::Read, ep, mr, offset, m) }
}
