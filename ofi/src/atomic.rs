//! `fi_ops_atomic` and `fi_query_atomic`: `fi_atomic`, `fi_inject_atomic`,
//! `fi_fetch_atomic`, `fi_compare_atomic`, their `v`/`msg` forms and the
//! `*valid` queries, mapped onto xfer's atomics ([`Endpoint::post_atomic`]).
//! Operations and datatypes keep libfabric's numbering in xfer
//! ([`AtomicKind`], [`Datatype`]): `FI_MIN`, `FI_MAX`, `FI_SUM`, `FI_BOR`,
//! `FI_BAND`, `FI_BXOR`, `FI_ATOMIC_WRITE` (and `FI_ATOMIC_READ` fetching,
//! `FI_CSWAP` comparing) on `FI_INT32`, `FI_UINT32`, `FI_INT64`,
//! `FI_UINT64`, `FI_FLOAT`, `FI_DOUBLE` (no bitwise operation on the
//! floats); anything else is `-FI_EOPNOTSUPP`. One element per operation
//! (the count `fi_query_atomic` reports): xfer's atomics are single
//! elements, applied as one indivisible step at the target.
//!
//! Remote memory is named as for RMA (rma.rs): the target's virtual address
//! and the key `fi_mr_key` gave there; the target checks key, bounds,
//! access and alignment (`FI_EACCES` at the initiator, memory unchanged).
//! Operands are read when the call is made, so every buffer but the
//! result may be reused at once. A fetching atomic's completion
//! (`FI_ATOMIC | FI_READ`, the old value stored in the result buffer by
//! then) comes once the target applied it. A non-fetching one's
//! (`FI_ATOMIC | FI_WRITE`) comes at libfabric's default level, once xfer
//! handed it to the transport (later operations to that peer are applied
//! after it); with `FI_DELIVERY_COMPLETE` or `FI_TRANSMIT_COMPLETE` (the
//! `fi_atomicmsg` flags, else the endpoint's `tx_attr->op_flags`) it comes
//! once the target applied it, and a target's refusal is its error
//! (`FI_EACCES`). Without, a refusal is counted by the xfer endpoint
//! (`atomics_refused_after_completion`) and logged, rate limited (docs/OFI.md,
//! "Atomics"). Completions count on the write or read counter (fi_cntr(3)).
//!
//! [`Endpoint::post_atomic`]: xfer_facade::Endpoint::post_atomic

use std::ffi::{c_int, c_void};

use xfer_facade::{AtomicKind, AtomicOp, CompletionLevel, Datatype, PeerAddr};

use crate::domain;
use crate::entry::{self, guard, scode, PANIC};
use crate::ep::{with_ep, EpCore, SILENT};
use crate::fi;
use crate::msg::check_flags;

/// Elements one atomic operation takes (`fi_atomic_attr.count`).
pub const ATOMIC_COUNT: usize = 1;

/// The table every endpoint's `atomic` points to.
pub(crate) static OPS: fi::fi_ops_atomic = fi::fi_ops_atomic {
    size: std::mem::size_of::<fi::fi_ops_atomic>(),
    write: Some(write),
    writev: Some(writev),
    writemsg: Some(writemsg),
    inject: Some(inject),
    readwrite: Some(readwrite),
    readwritev: Some(readwritev),
    readwritemsg: Some(readwritemsg),
    compwrite: Some(compwrite),
    compwritev: Some(compwritev),
    compwritemsg: Some(compwritemsg),
    writevalid: Some(writevalid),
    readwritevalid: Some(readwritevalid),
    compwritevalid: Some(compwritevalid),
};

/// Flags an `fi_*atomicmsg` may carry. `FI_DELIVERY_COMPLETE` and
/// `FI_TRANSMIT_COMPLETE` make a non-fetching atomic wait for the target's
/// answer; operands are copied at the call, so `FI_INJECT` changes nothing.
const MSG_FLAGS: u64 = fi::FI_COMPLETION
    | fi::FI_INJECT
    | fi::FI_INJECT_COMPLETE
    | fi::FI_TRANSMIT_COMPLETE
    | fi::FI_DELIVERY_COMPLETE
    | fi::FI_MORE;

/// The three families of calls, which allow different operations.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    /// `fi_atomic`, `fi_inject_atomic`.
    Write,
    /// `fi_fetch_atomic`.
    Fetch,
    /// `fi_compare_atomic`.
    Compare,
}

/// The xfer operation and datatype of `op` on `dt` in `family`, if xfer
/// applies it.
fn valid(family: Family, dt: fi::fi_datatype, op: fi::fi_op) -> Option<(AtomicKind, Datatype)> {
    let kind = AtomicKind::from_u8(u8::try_from(op).ok()?)?;
    let dt = Datatype::from_u8(u8::try_from(dt).ok()?)?;
    let ok = match kind {
        AtomicKind::Cswap => family == Family::Compare,
        AtomicKind::Read => family == Family::Fetch,
        _ => family != Family::Compare,
    };
    (ok && dt.allows(kind)).then_some((kind, dt))
}

/// An atomic as the libfabric calls describe it.
struct Atomic {
    peer: fi::fi_addr_t,
    family: Family,
    dt: fi::fi_datatype,
    op: fi::fi_op,
    /// The operand element (may be null for `FI_ATOMIC_READ`).
    buf: *const c_void,
    /// The compare element (`fi_compare_atomic`).
    compare: *const c_void,
    /// Where the old value goes (fetching families).
    result: *mut c_void,
    addr: u64,
    key: u64,
    context: *mut c_void,
    /// `*msg` flags, or the endpoint's default transmit flags.
    flags: Option<u64>,
    /// `fi_inject_atomic`: no completion.
    inject: bool,
}

impl Atomic {
    fn new(
        peer: fi::fi_addr_t,
        family: Family,
        (dt, op): (fi::fi_datatype, fi::fi_op),
        (addr, key): (u64, u64),
    ) -> Atomic {
        Atomic {
            peer,
            family,
            dt,
            op,
            buf: std::ptr::null(),
            compare: std::ptr::null(),
            result: std::ptr::null_mut(),
            addr,
            key,
            context: std::ptr::null_mut(),
            flags: None,
            inject: false,
        }
    }
}

/// An element's bits as xfer carries them (a 32-bit type in the low half).
///
/// # Safety
/// `p` is valid for `size` bytes (maybe unaligned).
unsafe fn element(p: *const c_void, size: usize) -> u64 {
    match size {
        // SAFETY: the caller's contract.
        4 => u64::from(unsafe { p.cast::<u32>().read_unaligned() }),
        // SAFETY: the caller's contract.
        _ => unsafe { p.cast::<u64>().read_unaligned() },
    }
}

impl EpCore {
    /// Posts an atomic of any family.
    fn atomic(&self, a: Atomic) -> isize {
        let en = match self.tx_ready(fi::FI_ATOMIC) {
            Ok(en) => en,
            Err(e) => return e,
        };
        let Some((kind, dt)) = valid(a.family, a.dt, a.op) else {
            return scode(-(libc::EOPNOTSUPP));
        };
        let fetch = a.family != Family::Write;
        let reads = kind != AtomicKind::Read;
        if (reads && a.buf.is_null())
            || (fetch && a.result.is_null())
            || (a.family == Family::Compare && a.compare.is_null())
        {
            return scode(-(libc::EINVAL));
        }
        // SAFETY: libfabric's contract: each non-null buffer holds one
        // element of the datatype.
        let operand = if reads { unsafe { element(a.buf, dt.size()) } } else { 0 };
        // SAFETY: as above.
        let compare = match a.family {
            Family::Compare => unsafe { element(a.compare, dt.size()) },
            _ => 0,
        };
        let flags = a.flags.unwrap_or(self.tx_op_flags);
        let level = match a.inject {
            false if flags & (fi::FI_DELIVERY_COMPLETE | fi::FI_TRANSMIT_COMPLETE) != 0 => CompletionLevel::Delivery,
            _ => CompletionLevel::Inject,
        };
        let context = if a.inject {
            en.fetches.start(0, std::ptr::null_mut(), 0, true)
        } else {
            let counted = match fetch {
                true => en.counters.read.is_some(),
                false => en.counters.write.is_some(),
            };
            // Every xfer atomic completes: one the application did not ask
            // to see is marked silent (the router counts and drops it).
            let ctx = match en.completion(a.context, flags, counted) {
                Ok((c, true)) => c,
                Ok((c, false)) => c | SILENT,
                Err(e) => return e,
            };
            match fetch {
                true => en.fetches.start(ctx, a.result, dt.size(), false),
                false => ctx,
            }
        };
        let op = AtomicOp {
            peer: PeerAddr(a.peer),
            kind,
            dt,
            operand,
            compare,
            addr: a.addr,
            key: a.key,
            fetch,
            level,
            context,
        };
        match en.ep.post_atomic(op) {
            Ok(()) => 0,
            Err(rej) => {
                if fetch || a.inject {
                    en.fetches.forget(context);
                }
                scode(entry::code(&rej.error))
            }
        }
    }
}

/// The one element of an `fi_ioc` vector (`count` entries whose counts add
/// up to [`ATOMIC_COUNT`]): its address, else `-FI_EINVAL`.
///
/// # Safety
/// `iov` is null or valid for `count` elements.
unsafe fn one(iov: *const fi::fi_ioc, count: usize) -> Result<*mut c_void, isize> {
    if iov.is_null() || count == 0 {
        return Err(scode(-(libc::EINVAL)));
    }
    // SAFETY: non-null and valid for `count` elements by the caller's contract.
    let v = unsafe { std::slice::from_raw_parts(iov, count) };
    let total = v.iter().fold(0usize, |t, e| t.saturating_add(e.count));
    match v.iter().find(|e| e.count > 0) {
        Some(e) if total == ATOMIC_COUNT => Ok(e.addr),
        _ => Err(scode(-(libc::EINVAL))),
    }
}

/// The single remote element of an `fi_msg_atomic`.
///
/// # Safety
/// `msg` is null or the caller's message, its vectors valid for their counts.
unsafe fn from_msg(msg: *const fi::fi_msg_atomic, family: Family, flags: u64) -> Result<Atomic, isize> {
    // SAFETY: null or the caller's message.
    let m = unsafe { msg.as_ref() }.ok_or(scode(-(libc::EINVAL)))?;
    check_flags(flags, MSG_FLAGS)?;
    if m.rma_iov.is_null() || m.rma_iov_count == 0 {
        return Err(scode(-(libc::EINVAL)));
    }
    // SAFETY: non-null and valid for `rma_iov_count` elements (the caller's).
    let remote = unsafe { std::slice::from_raw_parts(m.rma_iov, m.rma_iov_count) };
    let total = remote.iter().fold(0usize, |t, e| t.saturating_add(e.count));
    let seg = match remote.iter().find(|e| e.count > 0) {
        Some(s) if total == ATOMIC_COUNT => s,
        _ => return Err(scode(-(libc::EINVAL))),
    };
    // An FI_ATOMIC_READ needs no operand: its vector may be empty.
    let read = m.op == fi::FI_ATOMIC_READ && (m.msg_iov.is_null() || m.iov_count == 0);
    let buf = match read {
        true => std::ptr::null_mut(),
        // SAFETY: the message's vector, by the caller's contract.
        false => unsafe { one(m.msg_iov, m.iov_count) }?,
    };
    Ok(Atomic {
        buf,
        context: m.context,
        flags: Some(flags),
        ..Atomic::new(m.addr, family, (m.datatype, m.op), (seg.addr, seg.key))
    })
}

/// `count` elements, which must be [`ATOMIC_COUNT`].
fn check_count(count: usize) -> Result<(), isize> {
    match count == ATOMIC_COUNT {
        true => Ok(()),
        false => Err(scode(-(libc::EINVAL))),
    }
}

/// Runs `f` on the endpoint behind `ep` with the atomic `a` unless
/// building it failed.
fn post(ep: *mut fi::fid_ep, a: Result<Atomic, isize>) -> isize {
    match a {
        Ok(a) => with_ep(ep, |ep| ep.atomic(a)),
        Err(e) => e,
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn write(
    ep: *mut fi::fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    dest: fi::fi_addr_t,
    addr: u64,
    key: u64,
    dt: fi::fi_datatype,
    op: fi::fi_op,
    context: *mut c_void,
) -> isize {
    post(
        ep,
        check_count(count).map(|()| Atomic {
            buf,
            context,
            ..Atomic::new(dest, Family::Write, (dt, op), (addr, key))
        }),
    )
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn writev(
    ep: *mut fi::fid_ep,
    iov: *const fi::fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    dest: fi::fi_addr_t,
    addr: u64,
    key: u64,
    dt: fi::fi_datatype,
    op: fi::fi_op,
    context: *mut c_void,
) -> isize {
    // SAFETY: the caller's vector of `count` elements.
    let buf = unsafe { one(iov, count) };
    post(
        ep,
        buf.map(|buf| Atomic {
            buf,
            context,
            ..Atomic::new(dest, Family::Write, (dt, op), (addr, key))
        }),
    )
}

unsafe extern "C" fn writemsg(ep: *mut fi::fid_ep, msg: *const fi::fi_msg_atomic, flags: u64) -> isize {
    // SAFETY: the caller's message.
    post(ep, unsafe { from_msg(msg, Family::Write, flags) })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn inject(
    ep: *mut fi::fid_ep,
    buf: *const c_void,
    count: usize,
    dest: fi::fi_addr_t,
    addr: u64,
    key: u64,
    dt: fi::fi_datatype,
    op: fi::fi_op,
) -> isize {
    post(
        ep,
        check_count(count).map(|()| Atomic {
            buf,
            inject: true,
            ..Atomic::new(dest, Family::Write, (dt, op), (addr, key))
        }),
    )
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn readwrite(
    ep: *mut fi::fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    dest: fi::fi_addr_t,
    addr: u64,
    key: u64,
    dt: fi::fi_datatype,
    op: fi::fi_op,
    context: *mut c_void,
) -> isize {
    post(
        ep,
        check_count(count).map(|()| Atomic {
            buf,
            result,
            context,
            ..Atomic::new(dest, Family::Fetch, (dt, op), (addr, key))
        }),
    )
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn readwritev(
    ep: *mut fi::fid_ep,
    iov: *const fi::fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    resultv: *mut fi::fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    dest: fi::fi_addr_t,
    addr: u64,
    key: u64,
    dt: fi::fi_datatype,
    op: fi::fi_op,
    context: *mut c_void,
) -> isize {
    let read = op == fi::FI_ATOMIC_READ && (iov.is_null() || count == 0);
    // SAFETY: the caller's vectors of their counts.
    let bufs = unsafe {
        match read {
            true => Ok(std::ptr::null_mut()),
            false => one(iov, count),
        }
        .and_then(|b| Ok((b, one(resultv, result_count)?)))
    };
    post(
        ep,
        bufs.map(|(buf, result)| Atomic {
            buf,
            result,
            context,
            ..Atomic::new(dest, Family::Fetch, (dt, op), (addr, key))
        }),
    )
}

unsafe extern "C" fn readwritemsg(
    ep: *mut fi::fid_ep,
    msg: *const fi::fi_msg_atomic,
    resultv: *mut fi::fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    flags: u64,
) -> isize {
    // SAFETY: the caller's message and vector.
    let a = unsafe { from_msg(msg, Family::Fetch, flags) }.and_then(|a| {
        Ok(Atomic {
            // SAFETY: as above.
            result: unsafe { one(resultv, result_count) }?,
            ..a
        })
    });
    post(ep, a)
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn compwrite(
    ep: *mut fi::fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    compare: *const c_void,
    _compare_desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    dest: fi::fi_addr_t,
    addr: u64,
    key: u64,
    dt: fi::fi_datatype,
    op: fi::fi_op,
    context: *mut c_void,
) -> isize {
    post(
        ep,
        check_count(count).map(|()| Atomic {
            buf,
            compare,
            result,
            context,
            ..Atomic::new(dest, Family::Compare, (dt, op), (addr, key))
        }),
    )
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn compwritev(
    ep: *mut fi::fid_ep,
    iov: *const fi::fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    comparev: *const fi::fi_ioc,
    _compare_desc: *mut *mut c_void,
    compare_count: usize,
    resultv: *mut fi::fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    dest: fi::fi_addr_t,
    addr: u64,
    key: u64,
    dt: fi::fi_datatype,
    op: fi::fi_op,
    context: *mut c_void,
) -> isize {
    // SAFETY: the caller's vectors of their counts.
    let bufs =
        unsafe { one(iov, count).and_then(|b| Ok((b, one(comparev, compare_count)?, one(resultv, result_count)?))) };
    post(
        ep,
        bufs.map(|(buf, compare, result)| Atomic {
            buf,
            compare,
            result,
            context,
            ..Atomic::new(dest, Family::Compare, (dt, op), (addr, key))
        }),
    )
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn compwritemsg(
    ep: *mut fi::fid_ep,
    msg: *const fi::fi_msg_atomic,
    comparev: *const fi::fi_ioc,
    _compare_desc: *mut *mut c_void,
    compare_count: usize,
    resultv: *mut fi::fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    flags: u64,
) -> isize {
    // SAFETY: the caller's message and vectors.
    let a = unsafe { from_msg(msg, Family::Compare, flags) }.and_then(|a| {
        Ok(Atomic {
            // SAFETY: as above.
            compare: unsafe { one(comparev, compare_count) }?,
            // SAFETY: as above.
            result: unsafe { one(resultv, result_count) }?,
            ..a
        })
    });
    post(ep, a)
}

/// `fi_atomicvalid` and friends: the count of elements for a valid
/// combination on an endpoint whose domain applies atomics, else
/// `-FI_EOPNOTSUPP`.
fn check_valid(ep: *mut fi::fid_ep, family: Family, dt: fi::fi_datatype, op: fi::fi_op, count: *mut usize) -> c_int {
    if count.is_null() {
        return -(libc::EINVAL);
    }
    let r = with_ep(ep, |ep| {
        match ep.domain.xfer.atomics() && valid(family, dt, op).is_some() {
            true => 0,
            false => scode(-(libc::EOPNOTSUPP)),
        }
    });
    if r == 0 {
        // SAFETY: checked non-null; the caller's out parameter.
        unsafe { *count = ATOMIC_COUNT };
    }
    r as c_int
}

unsafe extern "C" fn writevalid(ep: *mut fi::fid_ep, dt: fi::fi_datatype, op: fi::fi_op, count: *mut usize) -> c_int {
    check_valid(ep, Family::Write, dt, op, count)
}

unsafe extern "C" fn readwritevalid(
    ep: *mut fi::fid_ep,
    dt: fi::fi_datatype,
    op: fi::fi_op,
    count: *mut usize,
) -> c_int {
    check_valid(ep, Family::Fetch, dt, op, count)
}

unsafe extern "C" fn compwritevalid(
    ep: *mut fi::fid_ep,
    dt: fi::fi_datatype,
    op: fi::fi_op,
    count: *mut usize,
) -> c_int {
    check_valid(ep, Family::Compare, dt, op, count)
}

/// `fi_query_atomic`: the family by `FI_FETCH_ATOMIC` / `FI_COMPARE_ATOMIC`
/// in `flags`; count and element size for a combination the domain
/// applies, else `-FI_EOPNOTSUPP`.
pub(crate) unsafe extern "C" fn query(
    domain: *mut fi::fid_domain,
    dt: fi::fi_datatype,
    op: fi::fi_op,
    attr: *mut fi::fi_atomic_attr,
    flags: u64,
) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes the application's domain.
        let Some(d) = (unsafe { domain::get(domain) }) else {
            return -(libc::EINVAL);
        };
        let family = match flags & (fi::FI_FETCH_ATOMIC | fi::FI_COMPARE_ATOMIC) {
            0 => Family::Write,
            fi::FI_FETCH_ATOMIC => Family::Fetch,
            fi::FI_COMPARE_ATOMIC => Family::Compare,
            _ => return -(libc::EINVAL),
        };
        if attr.is_null() {
            return -(libc::EINVAL);
        }
        match valid(family, dt, op).filter(|_| d.xfer.atomics()) {
            Some((_, dt)) => {
                // SAFETY: checked non-null; the caller's out parameter.
                unsafe {
                    (*attr).count = ATOMIC_COUNT;
                    (*attr).size = dt.size();
                }
                0
            }
            None => -(libc::EOPNOTSUPP),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_family_takes_its_operations() {
        let ok = |f, dt, op| valid(f, dt, op).is_some();
        assert!(ok(Family::Write, fi::FI_UINT64, fi::FI_SUM));
        assert!(ok(Family::Write, fi::FI_DOUBLE, fi::FI_MAX));
        assert!(!ok(Family::Write, fi::FI_FLOAT, fi::FI_BOR), "bitwise on a float");
        assert!(!ok(Family::Write, fi::FI_INT32, fi::FI_ATOMIC_READ), "a read fetches");
        assert!(ok(Family::Fetch, fi::FI_INT32, fi::FI_ATOMIC_READ));
        assert!(!ok(Family::Fetch, fi::FI_INT32, fi::FI_CSWAP), "cswap compares");
        assert!(ok(Family::Compare, fi::FI_FLOAT, fi::FI_CSWAP));
        assert!(!ok(Family::Compare, fi::FI_INT64, fi::FI_SUM));
        assert!(!ok(Family::Write, fi::FI_INT8, fi::FI_SUM), "8-bit: not xfer's");
        assert!(!ok(Family::Write, fi::FI_INT64, fi::FI_PROD), "FI_PROD: not xfer's");
        assert!(!ok(Family::Compare, fi::FI_INT64, fi::FI_MSWAP));
    }
}
