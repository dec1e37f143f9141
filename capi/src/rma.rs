//! RMA: write, write with immediate data, read, inject-write (with and
//! without immediate data), and the `*msg` forms with flags (`fi_write`,
//! `fi_writedata`, `fi_read`, `fi_inject_write`, `fi_inject_writedata`,
//! `fi_writemsg`, `fi_readmsg`). Every call is the `*msg` form of one
//! `xfer_rma_msg_t`, as in libfabric.
//!
//! The remote side is a peer's registered region, named by an `xfer_rkey_t`
//! (from `xfer_rkey_unpack`) and an offset from its start. The local buffer
//! needs no registration (tcp copies through its socket, verbs registers it
//! through its MR cache) and follows the libfabric buffer contract, as
//! sends and receives do.
//!
//! Semantics (docs/ARCHITECTURE.md, decisions 17-21): a write completes at
//! the initiator once the target applied it; the target checks the key,
//! bounds and rights, and a refusal completes the initiator's operation
//! with `err = XFER_EACCES`, leaving the target's memory and the connection
//! untouched; the initiator does not check bounds. Only a write with
//! immediate data makes a completion at the target
//! (`XFER_RMA | XFER_REMOTE_WRITE | XFER_REMOTE_CQ_DATA`, consuming no
//! receive). The target posts nothing, but must make progress (poll or wait
//! on its CQ) for RMA to reach its memory.

use std::ffi::{c_int, c_void};

use xfer_facade::{Buffer, Endpoint, PeerAddr, RemoteKey, RmaKind, RmaOp};

use crate::context_in;
use crate::cq::XFER_REMOTE_CQ_DATA;
use crate::ep::{borrowed_bytes, ep_of, raw_buffer, read_msg, xfer_ep_t, XFER_COMPLETION, XFER_INJECT};
use crate::error::{guard, invalid, Fail, XFER_SUCCESS};
use crate::mr::xfer_rkey_t;
use crate::xfer_addr_t;

/// An RMA operation for `xfer_ep_writemsg` / `xfer_ep_readmsg`
/// (`fi_msg_rma` with one local and one remote buffer).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct xfer_rma_msg_t {
    /// Local memory: the source of a write, the destination of a read; may
    /// be NULL when `len` is 0.
    pub buf: *mut c_void,
    /// Bytes to transfer.
    pub len: usize,
    /// The target peer.
    pub addr: xfer_addr_t,
    /// The target region (read during the call only).
    pub rkey: *const xfer_rkey_t,
    /// Where in the target region the transfer starts, in bytes from its start.
    pub offset: u64,
    /// With `XFER_REMOTE_CQ_DATA`: immediate data for the target's completion.
    pub data: u64,
    /// Returned as `op_context` in the completion.
    pub context: *mut c_void,
}

/// An RMA call's arguments as the `*msg` form carries them.
pub(crate) fn msg(
    buf: *const c_void,
    len: usize,
    peer: xfer_addr_t,
    rkey: *const xfer_rkey_t,
    offset: u64,
    data: u64,
    context: *mut c_void,
) -> xfer_rma_msg_t {
    xfer_rma_msg_t {
        buf: buf.cast_mut(),
        len,
        addr: peer,
        rkey,
        offset,
        data,
        context,
    }
}

/// The target address and key `m` names, checked by the endpoint (a key of
/// its own provider, an offset that does not overflow).
///
/// # Safety
/// `m.rkey` must be NULL or point to a readable `xfer_rkey_t`.
unsafe fn target(e: &Endpoint, m: &xfer_rma_msg_t) -> Result<(RemoteKey, u64), Fail> {
    if m.rkey.is_null() {
        return Err(invalid("rma: rkey is NULL"));
    }
    // SAFETY: non-null and readable by contract.
    let key = unsafe { m.rkey.read() }.to_rust()?;
    let addr = e.remote_addr(&key, m.offset)?;
    Ok((key, addr))
}

/// Shared body of every RMA call that may report a completion; `data` is
/// the immediate data of a write.
///
/// # Safety
/// `m.buf` valid for `m.len` bytes (written by a read) and untouched until
/// the completion; `m.rkey` NULL or readable.
unsafe fn post(
    e: &Endpoint,
    kind: RmaKind,
    m: &xfer_rma_msg_t,
    data: Option<u64>,
    completion: bool,
) -> Result<c_int, Fail> {
    // SAFETY: forwarded from the caller's contract.
    let buf = unsafe { raw_buffer(m.buf, m.len)? };
    // SAFETY: forwarded from the caller's contract.
    unsafe { post_buffer(e, kind, m, buf, data, completion) }
}

/// [`post`] with the local buffer given (raw, or in a registered region):
/// `m` names the target and context; its `buf` is not used.
///
/// # Safety
/// `buf`'s memory untouched until the completion; `m.rkey` NULL or readable.
pub(crate) unsafe fn post_buffer(
    e: &Endpoint,
    kind: RmaKind,
    m: &xfer_rma_msg_t,
    buf: Buffer,
    data: Option<u64>,
    completion: bool,
) -> Result<c_int, Fail> {
    // SAFETY: forwarded from the caller's contract.
    let (key, addr) = unsafe { target(e, m)? };
    e.post_rma(RmaOp {
        peer: PeerAddr(m.addr),
        kind,
        buf,
        addr,
        key: key.key(),
        data,
        context: context_in(m.context),
        completion,
    })?;
    Ok(XFER_SUCCESS)
}

/// Shared body of the inject-writes: copies the payload, no completion.
///
/// # Safety
/// `m.buf` valid for reading `m.len` bytes during the call; `m.rkey` NULL
/// or readable.
unsafe fn inject_write(e: &Endpoint, m: &xfer_rma_msg_t, data: Option<u64>) -> Result<c_int, Fail> {
    // SAFETY: forwarded from the caller's contract.
    let (key, _) = unsafe { target(e, m)? };
    // SAFETY: forwarded from the caller's contract; inject copies it.
    let payload = unsafe { borrowed_bytes(m.buf, m.len)? };
    let peer = PeerAddr(m.addr);
    match data {
        Some(d) => e.inject_write_data(peer, payload, &key, m.offset, d)?,
        None => e.inject_write(peer, payload, &key, m.offset)?,
    }
    Ok(XFER_SUCCESS)
}

/// Writes `len` bytes at `buf` into the peer `peer`'s region `*rkey`,
/// starting `offset` bytes into it (`fi_write`). The completion
/// (`XFER_RMA | XFER_WRITE`, `len`) returns `context` once the target
/// applied the write, or carries `err = XFER_EACCES` when the target
/// refused it (unknown or deregistered key, range outside the region, no
/// `XFER_MR_REMOTE_WRITE`); the target's memory is then untouched.
///
/// Returns 0 when posted; `XFER_EBADF`; `XFER_EINVAL` for a NULL `rkey`, a
/// NULL `buf` with a non-zero `len`, a key of another provider or an
/// offset overflowing the address; `XFER_EADDRNOTAVAIL` when `peer` is not
/// in the AV. `*rkey` is read during the call only.
///
/// # Safety
/// `buf` must be valid for reading `len` bytes and must not be modified or
/// freed until the completion is polled or the endpoint is closed; `rkey`
/// must be NULL or point to a readable `xfer_rkey_t`.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_write(
    ep: *mut xfer_ep_t,
    buf: *const c_void,
    len: usize,
    peer: xfer_addr_t,
    rkey: *const xfer_rkey_t,
    offset: u64,
    context: *mut c_void,
) -> c_int {
    guard("xfer_ep_write", || {
        let e = ep_of(ep)?;
        let m = msg(buf, len, peer, rkey, offset, 0, context);
        // SAFETY: forwarded from this function's contract; a write only
        // reads its buffer.
        unsafe { post(&e, RmaKind::Write, &m, None, true) }
    })
}

/// Like `xfer_ep_write`, and the target's CQ gets an entry
/// (`XFER_RMA | XFER_REMOTE_WRITE | XFER_REMOTE_CQ_DATA`) with `data`, the
/// bytes written in `len`, the initiator in `src` and a NULL `op_context`,
/// without consuming a posted receive (`fi_writedata`). A refused write
/// reports nothing at the target.
///
/// # Safety
/// As `xfer_ep_write`.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_writedata(
    ep: *mut xfer_ep_t,
    buf: *const c_void,
    len: usize,
    data: u64,
    peer: xfer_addr_t,
    rkey: *const xfer_rkey_t,
    offset: u64,
    context: *mut c_void,
) -> c_int {
    guard("xfer_ep_writedata", || {
        let e = ep_of(ep)?;
        let m = msg(buf, len, peer, rkey, offset, data, context);
        // SAFETY: forwarded from this function's contract.
        unsafe { post(&e, RmaKind::Write, &m, Some(data), true) }
    })
}

/// Reads `len` bytes of the peer `peer`'s region `*rkey`, from `offset`
/// bytes into it, into `buf` (`fi_read`). The completion
/// (`XFER_RMA | XFER_READ`, `len`) returns `context`, or carries
/// `err = XFER_EACCES` when the target refused it (unknown key, range
/// outside the region, no `XFER_MR_REMOTE_READ`); `buf` is then not
/// meaningful. The target gets no completion.
///
/// Returns as `xfer_ep_write`.
///
/// # Safety
/// `buf` must be valid for writing `len` bytes and must not be read,
/// modified or freed until the completion is polled or the endpoint is
/// closed; `rkey` must be NULL or point to a readable `xfer_rkey_t`.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_read(
    ep: *mut xfer_ep_t,
    buf: *mut c_void,
    len: usize,
    peer: xfer_addr_t,
    rkey: *const xfer_rkey_t,
    offset: u64,
    context: *mut c_void,
) -> c_int {
    guard("xfer_ep_read", || {
        let e = ep_of(ep)?;
        let m = msg(buf, len, peer, rkey, offset, 0, context);
        // SAFETY: forwarded from this function's contract.
        unsafe { post(&e, RmaKind::Read, &m, None, true) }
    })
}

/// Copies `len` bytes at `buf` and writes them to the peer's region `*rkey`
/// at `offset` (`fi_inject_write`): no completion, not even when the target
/// refuses the write, and `buf` may be reused at once. To learn that the
/// data arrived, follow with a write or read to the same peer and wait for
/// its completion (operations to one peer are applied in order).
///
/// Returns 0; `XFER_EBADF`; `XFER_EINVAL` as `xfer_ep_write`, or when
/// `len` exceeds the endpoint's `inject_size`; `XFER_EADDRNOTAVAIL`.
///
/// # Safety
/// `buf` must be valid for reading `len` bytes during the call; `rkey` must
/// be NULL or point to a readable `xfer_rkey_t`.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_inject_write(
    ep: *mut xfer_ep_t,
    buf: *const c_void,
    len: usize,
    peer: xfer_addr_t,
    rkey: *const xfer_rkey_t,
    offset: u64,
) -> c_int {
    guard("xfer_ep_inject_write", || {
        let e = ep_of(ep)?;
        let m = msg(buf, len, peer, rkey, offset, 0, std::ptr::null_mut());
        // SAFETY: forwarded from this function's contract.
        unsafe { inject_write(&e, &m, None) }
    })
}

/// Like `xfer_ep_inject_write`, and the target's CQ gets the entry
/// `xfer_ep_writedata` makes, with `data` (`fi_inject_writedata`). The
/// initiator gets no completion; a refused write reports nothing on either
/// side. Returns as `xfer_ep_inject_write`.
///
/// # Safety
/// As `xfer_ep_inject_write`.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_inject_writedata(
    ep: *mut xfer_ep_t,
    buf: *const c_void,
    len: usize,
    data: u64,
    peer: xfer_addr_t,
    rkey: *const xfer_rkey_t,
    offset: u64,
) -> c_int {
    guard("xfer_ep_inject_writedata", || {
        let e = ep_of(ep)?;
        let m = msg(buf, len, peer, rkey, offset, data, std::ptr::null_mut());
        // SAFETY: forwarded from this function's contract.
        unsafe { inject_write(&e, &m, Some(data)) }
    })
}

/// Posts a write described by `*msg` (`fi_writemsg`). `flags` is a
/// combination of:
/// - `XFER_REMOTE_CQ_DATA`: deliver `msg->data` to the target's CQ, as
///   `xfer_ep_writedata`;
/// - `XFER_COMPLETION`: report success with a completion. On an endpoint
///   opened with `XFER_SELECTIVE_COMPLETION` a write without it reports
///   only failure (including `XFER_EACCES`); on other endpoints every write
///   completes;
/// - `XFER_INJECT`: copy the payload and report nothing, as
///   `xfer_ep_inject_write` (with `XFER_REMOTE_CQ_DATA`:
///   `xfer_ep_inject_writedata`).
///
/// Returns as `xfer_ep_write` (`xfer_ep_inject_write` with `XFER_INJECT`),
/// or `XFER_EBADFLAGS` for another flag; `XFER_EINVAL` when `msg` is NULL.
/// `*msg` and `*msg->rkey` are read during the call only.
///
/// # Safety
/// `msg` must be NULL or point to a readable `xfer_rma_msg_t` whose buffer
/// follows `xfer_ep_write`'s rule (`xfer_ep_inject_write`'s with
/// `XFER_INJECT`) and whose `rkey` is NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_writemsg(ep: *mut xfer_ep_t, msg: *const xfer_rma_msg_t, flags: u64) -> c_int {
    guard("xfer_ep_writemsg", || {
        const KNOWN: u64 = XFER_REMOTE_CQ_DATA | XFER_COMPLETION | XFER_INJECT;
        let e = ep_of(ep)?;
        // SAFETY: forwarded from this function's contract.
        let m = unsafe { read_msg("xfer_ep_writemsg: msg is NULL", msg, flags, KNOWN)? };
        let data = (flags & XFER_REMOTE_CQ_DATA != 0).then_some(m.data);
        // SAFETY: forwarded from this function's contract.
        unsafe {
            if flags & XFER_INJECT != 0 {
                inject_write(&e, &m, data)
            } else {
                post(&e, RmaKind::Write, &m, data, flags & XFER_COMPLETION != 0)
            }
        }
    })
}

/// Posts a read described by `*msg` (`fi_readmsg`). `flags` may hold
/// `XFER_COMPLETION` (as in `xfer_ep_writemsg`); any other flag is
/// `XFER_EBADFLAGS` (reads carry no immediate data). Returns as
/// `xfer_ep_read`; `XFER_EINVAL` when `msg` is NULL.
///
/// # Safety
/// `msg` must be NULL or point to a readable `xfer_rma_msg_t` whose buffer
/// follows `xfer_ep_read`'s rule and whose `rkey` is NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_readmsg(ep: *mut xfer_ep_t, msg: *const xfer_rma_msg_t, flags: u64) -> c_int {
    guard("xfer_ep_readmsg", || {
        let e = ep_of(ep)?;
        // SAFETY: forwarded from this function's contract.
        let m = unsafe { read_msg("xfer_ep_readmsg: msg is NULL", msg, flags, XFER_COMPLETION)? };
        // SAFETY: forwarded from this function's contract.
        unsafe { post(&e, RmaKind::Read, &m, None, flags & XFER_COMPLETION != 0) }
    })
}
