//! Memory registration (`fi_mr_reg`, `fi_mr_regv`, `fi_mr_regattr`) onto
//! xfer's [`Domain::register_raw`]: the region's key is xfer's remote key
//! (`FI_MR_PROV_KEY`), peers address it by virtual address
//! (`FI_MR_VIRT_ADDR`), and `fi_mr_desc` is the region's own `fid`: on a
//! domain opened with `FI_MR_LOCAL` the data calls turn a buffer and its
//! `desc` into a [`MemoryRegion::buffer`] (decision 41), elsewhere `desc` is
//! ignored. Closing the region deregisters it; the domain cannot close while
//! regions of it are open. `fi_mr_bind` of a counter with `FI_REMOTE_WRITE`
//! / `FI_REMOTE_READ` counts the RMA peers apply to the region
//! ([`region_cntr`](crate::region_cntr), `tcp` and `shm` only); `fi_mr_enable` has
//! nothing left to do (`FI_MR_RMA_EVENT` is not asked of applications).
//!
//! [`Domain::register_raw`]: xfer_facade::Domain::register_raw

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use xfer_facade::{Access, MemoryRegion};

use crate::domain::{self, DomainCore};
use crate::entry::{self, guard, put, Core, Obj, PANIC};
use crate::fi;

/// A registered region.
pub(crate) struct MrObj {
    region: MemoryRegion,
    domain: Arc<DomainCore>,
}

/// The region behind a `desc` from `fi_mr_desc`, or `None` when `desc` is
/// not one of ours.
///
/// # Safety
/// `desc` is null or points to a live `struct fid` (what `fi_mr_desc`
/// returned, for a region not yet closed).
pub(crate) unsafe fn region<'a>(desc: *mut c_void) -> Option<&'a MemoryRegion> {
    // SAFETY: forwarded.
    unsafe { Obj::<MrObj>::get(desc.cast()) }.map(|o| &o.core.region)
}

impl Core for MrObj {
    type Fid = fi::fid_mr;
    const CLASS: u32 = fi::FI_CLASS_MR;
    const MAGIC: u64 = 0x7866_6572_6d72_5f5f; // "xfermr__"
}

static OPS: fi::fi_ops = fi::fi_ops {
    bind: Some(bind),
    ..entry::ops_with_control(close, control)
};

/// The domain's `fi_ops_mr`.
pub(crate) static MR_OPS: fi::fi_ops_mr = fi::fi_ops_mr {
    size: std::mem::size_of::<fi::fi_ops_mr>(),
    reg: Some(reg),
    regv: Some(regv),
    regattr: Some(regattr),
};

/// What peers may do with the region: `FI_REMOTE_READ` / `FI_REMOTE_WRITE`
/// (none asked: both, as fi_mr(3) says for an access of 0); local rights
/// are implied.
fn access(flags: u64) -> Access {
    let remote = flags & (fi::FI_REMOTE_READ | fi::FI_REMOTE_WRITE);
    let mut a = Access::LOCAL_WRITE;
    if remote == 0 || remote & fi::FI_REMOTE_READ != 0 {
        a |= Access::REMOTE_READ;
    }
    if remote == 0 || remote & fi::FI_REMOTE_WRITE != 0 {
        a |= Access::REMOTE_WRITE;
    }
    a
}

/// Registers `len` bytes at `buf` for `domain` and hands out the `fid_mr`.
fn register(
    domain: *mut fi::fid,
    buf: *const c_void,
    len: usize,
    flags_access: u64,
    flags: u64,
    mr: *mut *mut fi::fid_mr,
    context: *mut c_void,
) -> c_int {
    // SAFETY: libfabric passes the application's domain fid.
    let Some(domain) = (unsafe { domain::get(domain.cast()) }) else {
        return -(libc::EINVAL);
    };
    if mr.is_null() || (buf.is_null() && len > 0) {
        return -(libc::EINVAL);
    }
    // FI_RMA_EVENT: the region will have a counter bound (fi_mr(3)).
    if flags & !fi::FI_RMA_EVENT != 0 {
        return fi::err(fi::FI_EBADFLAGS);
    }
    if flags & fi::FI_RMA_EVENT != 0 && !crate::info::serves_rma(domain.xfer.provider()) {
        return -(libc::ENOSYS);
    }
    // SAFETY: fi_mr_reg's contract: the application keeps the memory
    // allocated and registered until it closes the region, and libfabric's
    // RMA model lets peers access it whenever the domain makes progress.
    let region = match unsafe { domain.xfer.register_raw(buf as *mut u8, len, access(flags_access)) } {
        Ok(r) => r,
        Err(e) => return entry::code(&e),
    };
    let fid = fi::fid_mr {
        fid: entry::fid(fi::FI_CLASS_MR, context, &OPS),
        mem_desc: std::ptr::null_mut(),
        key: region.key(),
    };
    let obj = Obj::into_raw(fid, MrObj { region, domain });
    // SAFETY: just made by into_raw, not shared yet: fi_mr_desc gives the
    // region's own fid, which the data calls turn back into it.
    unsafe { (*obj).mem_desc = obj.cast() };
    // SAFETY: the application's out pointer, checked non-null.
    if !unsafe { put(mr, obj) } {
        // SAFETY: just made, never shared.
        drop(unsafe { Obj::<MrObj>::take(obj.cast()) });
        return -(libc::EINVAL);
    }
    0
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn reg(
    fid: *mut fi::fid,
    buf: *const c_void,
    len: usize,
    access: u64,
    _offset: u64,
    _requested_key: u64,
    flags: u64,
    mr: *mut *mut fi::fid_mr,
    context: *mut c_void,
) -> c_int {
    guard(PANIC, || register(fid, buf, len, access, flags, mr, context))
}

/// The one element of a registration vector (`mr_iov_limit` is 1).
///
/// # Safety
/// `iov` is null or valid for `count` elements.
unsafe fn one(iov: *const fi::iovec, count: usize) -> Option<(*const c_void, usize)> {
    match count {
        // SAFETY: non-null and valid for one element by the caller's contract.
        1 if !iov.is_null() => Some(unsafe { ((*iov).iov_base as *const c_void, (*iov).iov_len) }),
        _ => None,
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn regv(
    fid: *mut fi::fid,
    iov: *const fi::iovec,
    count: usize,
    access: u64,
    _offset: u64,
    _requested_key: u64,
    flags: u64,
    mr: *mut *mut fi::fid_mr,
    context: *mut c_void,
) -> c_int {
    guard(PANIC, || {
        // SAFETY: the caller's vector of `count` elements.
        match unsafe { one(iov, count) } {
            Some((buf, len)) => register(fid, buf, len, access, flags, mr, context),
            None => -(libc::EINVAL),
        }
    })
}

unsafe extern "C" fn regattr(
    fid: *mut fi::fid,
    attr: *const fi::fi_mr_attr,
    flags: u64,
    mr: *mut *mut fi::fid_mr,
) -> c_int {
    guard(PANIC, || {
        // SAFETY: null or the application's attributes.
        let Some(a) = (unsafe { attr.as_ref() }) else {
            return -(libc::EINVAL);
        };
        if a.iface != fi::FI_HMEM_SYSTEM {
            return -(libc::ENOSYS);
        }
        // SAFETY: the attributes' vector of iov_count elements.
        match unsafe { one(a.mr_iov, a.iov_count) } {
            Some((buf, len)) => register(fid, buf, len, a.access, flags, mr, a.context),
            None => -(libc::EINVAL),
        }
    })
}

/// `fi_mr_bind`: a counter of the same domain for `FI_REMOTE_WRITE` and/or
/// `FI_REMOTE_READ` (`-FI_ENOSYS` on a domain whose target does not see
/// RMA: verbs). Endpoints are not bound to regions (no `FI_MR_ENDPOINT`):
/// `-FI_EINVAL`, as is anything else.
unsafe extern "C" fn bind(fid: *mut fi::fid, bfid: *mut fi::fid, flags: u64) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes the application's region.
        let Some(mr) = (unsafe { Obj::<MrObj>::get(fid) }) else {
            return -(libc::EINVAL);
        };
        // SAFETY: the application's fid (null or live).
        let Some(cntr) = (unsafe { crate::cntr::get(bfid) }) else {
            return -(libc::EINVAL);
        };
        let mr = &mr.core;
        if !crate::info::serves_rma(mr.domain.xfer.provider()) {
            return -(libc::ENOSYS);
        }
        if flags & !(fi::FI_REMOTE_WRITE | fi::FI_REMOTE_READ) != 0 {
            return fi::err(fi::FI_EBADFLAGS);
        }
        if flags == 0 || !Arc::ptr_eq(&cntr.domain, &mr.domain) {
            return -(libc::EINVAL);
        }
        cntr.on_region.store(true, std::sync::atomic::Ordering::Release);
        mr.domain.regions.bind(mr.region.key(), &cntr, flags);
        0
    })
}

/// `fi_mr_enable` (`FI_ENABLE`): a region works from its registration on.
unsafe extern "C" fn control(fid: *mut fi::fid, command: c_int, _arg: *mut c_void) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes the application's region.
        if unsafe { Obj::<MrObj>::get(fid) }.is_none() {
            return -(libc::EINVAL);
        }
        match command as u32 {
            fi::FI_ENABLE => 0,
            _ => -(libc::ENOSYS),
        }
    })
}

unsafe extern "C" fn close(fid: *mut fi::fid) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes the fid being closed, no longer in use.
        match unsafe { Obj::<MrObj>::take(fid) } {
            Some(obj) => {
                // Its counters are free again (and count no later region
                // that gets the same key).
                obj.core.domain.regions.unbind(obj.core.region.key());
                drop(obj);
                0
            }
            None => -(libc::EBADF),
        }
    })
}
