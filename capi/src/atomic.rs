//! Remote atomics (`fi_atomic`, `fi_fetch_atomic`, `fi_compare_atomic`
//! with a count of one): an operation on one element of a peer's registered
//! region. Operations (`XFER_ATOMIC_*`) and datatypes (`XFER_INT32` ...)
//! keep libfabric's numbering. Values travel as their bit patterns in a
//! `uint64_t` (a 32-bit type in the low half; copy a `double` in with
//! `memcpy`). A fetching call's completion (`XFER_ATOMIC | XFER_READ`)
//! comes once the target applied it and carries the element's old value in
//! `data`. `xfer_ep_atomic`'s (`XFER_ATOMIC | XFER_WRITE`) comes once the
//! atomic is handed to the transport (libfabric's default level; UCX's
//! `ucp_atomic_op_nbx` without a reply): later operations to the same peer
//! are applied after it. `xfer_ep_atomic_flags` with
//! `XFER_DELIVERY_COMPLETE` waits for the target instead. A target that
//! refuses (unknown key, outside the region, no `XFER_MR_REMOTE_WRITE` for a
//! changing operation or `XFER_MR_REMOTE_READ` for a fetching one, an element
//! not aligned to its size) touches nothing; an answered atomic completes
//! with `err = XFER_EACCES`, one already completed is counted in the
//! endpoint's `atomics_refused_after_completion` counter and logged, rate
//! limited. Providers without atomics (verbs for now) refuse the call with
//! `XFER_EOPNOTSUPP`.

use std::ffi::{c_int, c_void};

use xfer_facade::{AtomicKind, AtomicOp, CompletionLevel, Datatype, PeerAddr};

use crate::context_in;
use crate::ep::{ep_of, xfer_ep_t, XFER_DELIVERY_COMPLETE, XFER_TRANSMIT_COMPLETE};
use crate::error::{guard, invalid, Fail, XFER_SUCCESS};
use crate::mr::xfer_rkey_t;
use crate::xfer_addr_t;

/// A remote atomic (`FI_ATOMIC`), in a completion's `flags`.
pub const XFER_ATOMIC: u64 = 1u64 << 4;

/// The smaller of the element and the operand (`FI_MIN`).
pub const XFER_ATOMIC_MIN: u32 = 0;
/// The larger (`FI_MAX`).
pub const XFER_ATOMIC_MAX: u32 = 1;
/// The sum; integers wrap (`FI_SUM`; fetch-and-add with a fetch).
pub const XFER_ATOMIC_SUM: u32 = 2;
/// Bitwise or, integers only (`FI_BOR`).
pub const XFER_ATOMIC_BOR: u32 = 6;
/// Bitwise and, integers only (`FI_BAND`).
pub const XFER_ATOMIC_BAND: u32 = 7;
/// Bitwise exclusive or, integers only (`FI_BXOR`).
pub const XFER_ATOMIC_BXOR: u32 = 9;
/// Reads the element (`FI_ATOMIC_READ`; fetching calls only).
pub const XFER_ATOMIC_READ: u32 = 10;
/// Writes the operand (`FI_ATOMIC_WRITE`; swap with a fetch).
pub const XFER_ATOMIC_WRITE: u32 = 11;
/// Compare-and-swap (`FI_CSWAP`; `xfer_ep_compare_atomic`).
pub const XFER_ATOMIC_CSWAP: u32 = 12;

/// `int32_t` elements (`FI_INT32`).
pub const XFER_INT32: u32 = 4;
/// `uint32_t` elements (`FI_UINT32`).
pub const XFER_UINT32: u32 = 5;
/// `int64_t` elements (`FI_INT64`).
pub const XFER_INT64: u32 = 6;
/// `uint64_t` elements (`FI_UINT64`).
pub const XFER_UINT64: u32 = 7;
/// `float` elements (`FI_FLOAT`).
pub const XFER_FLOAT: u32 = 8;
/// `double` elements (`FI_DOUBLE`).
pub const XFER_DOUBLE: u32 = 9;

/// The shared body: checks the arguments, posts the operation.
///
/// # Safety
/// `rkey` must be NULL or point to a readable `xfer_rkey_t`.
#[allow(clippy::too_many_arguments)]
unsafe fn post(
    ep: *mut xfer_ep_t,
    op: u32,
    datatype: u32,
    (operand, compare): (u64, u64),
    peer: xfer_addr_t,
    rkey: *const xfer_rkey_t,
    offset: u64,
    (fetch, level): (bool, CompletionLevel),
    context: *mut c_void,
) -> Result<c_int, Fail> {
    let e = ep_of(ep)?;
    let kind = u8::try_from(op)
        .ok()
        .and_then(AtomicKind::from_u8)
        .ok_or_else(|| invalid("atomic: unknown operation"))?;
    let dt = u8::try_from(datatype)
        .ok()
        .and_then(Datatype::from_u8)
        .ok_or_else(|| invalid("atomic: unknown datatype"))?;
    if rkey.is_null() {
        return Err(invalid("atomic: rkey is NULL"));
    }
    // SAFETY: non-null and readable by contract.
    let key = unsafe { rkey.read() }.to_rust()?;
    e.post_atomic(AtomicOp {
        peer: PeerAddr(peer),
        kind,
        dt,
        operand,
        compare,
        addr: e.remote_addr(&key, offset)?,
        key: key.key(),
        fetch,
        level,
        context: context_in(context),
    })?;
    Ok(XFER_SUCCESS)
}

/// Applies `op` (`XFER_ATOMIC_*`) with `operand` to the element of type
/// `datatype` at `offset` bytes into the peer's region `*rkey`
/// (`fi_atomic`). It completes (`XFER_ATOMIC | XFER_WRITE`) once handed to
/// the transport; a refusal by the target is then counted in the
/// endpoint's `atomics_refused_after_completion` counter and logged, not
/// reported (`xfer_ep_atomic_flags` with `XFER_DELIVERY_COMPLETE` reports
/// it). Returns 0 when posted; `XFER_EBADF`; `XFER_EINVAL` for an
/// unknown operation or datatype, a bitwise operation on a floating-point
/// type, `XFER_ATOMIC_READ` (which must fetch), a NULL `rkey`, a key of
/// another provider; `XFER_EADDRNOTAVAIL` for a peer not in the AV;
/// `XFER_EOPNOTSUPP` on a provider without atomics.
///
/// # Safety
/// `rkey` must be NULL or point to a readable `xfer_rkey_t` (read during the
/// call only).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn xfer_ep_atomic(
    ep: *mut xfer_ep_t,
    op: u32,
    datatype: u32,
    operand: u64,
    peer: xfer_addr_t,
    rkey: *const xfer_rkey_t,
    offset: u64,
    context: *mut c_void,
) -> c_int {
    // SAFETY: forwarded from this function's contract.
    guard("xfer_ep_atomic", || unsafe {
        let how = (false, CompletionLevel::Inject);
        post(ep, op, datatype, (operand, 0), peer, rkey, offset, how, context)
    })
}

/// `xfer_ep_atomic` with a completion level in `flags` (`fi_atomicmsg`'s):
/// 0 is `xfer_ep_atomic`'s; `XFER_DELIVERY_COMPLETE` (or
/// `XFER_TRANSMIT_COMPLETE`, given with the same guarantee) completes once
/// the target applied the operation, and a target's refusal is the
/// completion's error (`XFER_EACCES`), at the cost of the target's answer.
/// `XFER_EINVAL` for any other flag; otherwise as `xfer_ep_atomic`.
///
/// # Safety
/// As `xfer_ep_atomic`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn xfer_ep_atomic_flags(
    ep: *mut xfer_ep_t,
    op: u32,
    datatype: u32,
    operand: u64,
    peer: xfer_addr_t,
    rkey: *const xfer_rkey_t,
    offset: u64,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    // SAFETY: forwarded from this function's contract.
    guard("xfer_ep_atomic_flags", || unsafe {
        let level = match flags {
            0 => CompletionLevel::Inject,
            XFER_DELIVERY_COMPLETE | XFER_TRANSMIT_COMPLETE => CompletionLevel::Delivery,
            _ => return Err(invalid("atomic: unknown flags")),
        };
        post(
            ep,
            op,
            datatype,
            (operand, 0),
            peer,
            rkey,
            offset,
            (false, level),
            context,
        )
    })
}

/// Like `xfer_ep_atomic`, and the completion (`XFER_ATOMIC | XFER_READ`)
/// carries the element's old value in `data` (`fi_fetch_atomic`:
/// fetch-and-add with `XFER_ATOMIC_SUM`, swap with `XFER_ATOMIC_WRITE`, a read
/// with `XFER_ATOMIC_READ`).
///
/// # Safety
/// As `xfer_ep_atomic`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn xfer_ep_fetch_atomic(
    ep: *mut xfer_ep_t,
    op: u32,
    datatype: u32,
    operand: u64,
    peer: xfer_addr_t,
    rkey: *const xfer_rkey_t,
    offset: u64,
    context: *mut c_void,
) -> c_int {
    // SAFETY: forwarded from this function's contract.
    guard("xfer_ep_fetch_atomic", || unsafe {
        post(
            ep,
            op,
            datatype,
            (operand, 0),
            peer,
            rkey,
            offset,
            (true, CompletionLevel::Delivery),
            context,
        )
    })
}

/// Compare-and-swap (`fi_compare_atomic` with `FI_CSWAP`): the element of
/// type `datatype` becomes `swap` if it equals `compare`; the completion's
/// `data` is its old value (equal to `compare` when it swapped). Errors as
/// `xfer_ep_atomic`.
///
/// # Safety
/// As `xfer_ep_atomic`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn xfer_ep_compare_atomic(
    ep: *mut xfer_ep_t,
    datatype: u32,
    compare: u64,
    swap: u64,
    peer: xfer_addr_t,
    rkey: *const xfer_rkey_t,
    offset: u64,
    context: *mut c_void,
) -> c_int {
    // SAFETY: forwarded from this function's contract.
    guard("xfer_ep_compare_atomic", || unsafe {
        post(
            ep,
            XFER_ATOMIC_CSWAP,
            datatype,
            (swap, compare),
            peer,
            rkey,
            offset,
            (true, CompletionLevel::Delivery),
            context,
        )
    })
}
