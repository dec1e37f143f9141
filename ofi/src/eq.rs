//! The event queue (`fi_eq_open`). RDM endpoints produce no connection
//! events and xfer reports no asynchronous errors through an EQ, so it is
//! always empty: reads return `-FI_EAGAIN`, `fi_eq_sread` waits out its
//! timeout. Programs (fi_pingpong) open one regardless.

use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::entry::{self, enosys, guard, scode, Core, Obj, PANIC};
use crate::fabric::{self, Fabric};
use crate::fi;

/// An event queue; keeps its fabric open.
pub(crate) struct EqObj {
    _fabric: Arc<Fabric>,
}

impl Core for EqObj {
    type Fid = fi::fid_eq;
    const CLASS: u32 = fi::FI_CLASS_EQ;
    const MAGIC: u64 = 0x7866_6572_6571_5f5f; // "xfereq__"
}

static OPS: fi::fi_ops = entry::close_only_ops(close);

static EQ_OPS: fi::fi_ops_eq = fi::fi_ops_eq {
    size: std::mem::size_of::<fi::fi_ops_eq>(),
    read: Some(read),
    readerr: Some(readerr),
    write: Some(no_write),
    sread: Some(sread),
    strerror: Some(strerror),
};

enosys! {
    no_write(*mut fi::fid_eq, u32, *const c_void, usize, u64) -> isize;
}

/// `fi_eq_open`.
pub(crate) unsafe extern "C" fn open(
    fabric: *mut fi::fid_fabric,
    attr: *mut fi::fi_eq_attr,
    eq: *mut *mut fi::fid_eq,
    context: *mut c_void,
) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes our fabric.
        let Some((fabric, _)) = (unsafe { fabric::get(fabric) }) else {
            return -(libc::EINVAL);
        };
        // SAFETY: null or the application's attributes.
        if let Some(attr) = unsafe { attr.as_ref() } {
            if attr.wait_obj == fi::FI_WAIT_SET {
                return -(libc::ENOSYS);
            }
        }
        let fid = fi::fid_eq {
            fid: entry::fid(fi::FI_CLASS_EQ, context, &OPS),
            ops: entry::ops(&EQ_OPS),
        };
        // SAFETY: the application's out pointer.
        unsafe { entry::hand_out(eq, fid, EqObj { _fabric: fabric }) }
    })
}

fn check(eq: *mut fi::fid_eq) -> bool {
    // SAFETY: libfabric passes the application's fid_eq.
    unsafe { Obj::<EqObj>::get(eq.cast()) }.is_some()
}

unsafe extern "C" fn read(eq: *mut fi::fid_eq, _event: *mut u32, _buf: *mut c_void, _len: usize, _flags: u64) -> isize {
    guard(scode(PANIC), || match check(eq) {
        true => scode(-(libc::EAGAIN)),
        false => scode(-(libc::EINVAL)),
    })
}

unsafe extern "C" fn readerr(eq: *mut fi::fid_eq, _buf: *mut fi::fi_eq_err_entry, _flags: u64) -> isize {
    guard(scode(PANIC), || match check(eq) {
        true => scode(-(libc::EAGAIN)),
        false => scode(-(libc::EINVAL)),
    })
}

unsafe extern "C" fn sread(
    eq: *mut fi::fid_eq,
    _event: *mut u32,
    _buf: *mut c_void,
    _len: usize,
    timeout: c_int,
    _flags: u64,
) -> isize {
    guard(scode(PANIC), || {
        if !check(eq) {
            return scode(-(libc::EINVAL));
        }
        // Nothing will ever arrive: wait out the timeout (-1: forever).
        let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
        loop {
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(1),
            };
            if left.is_zero() {
                return scode(-(libc::EAGAIN));
            }
            std::thread::sleep(left.min(Duration::from_secs(1)));
        }
    })
}

unsafe extern "C" fn strerror(
    _eq: *mut fi::fid_eq,
    prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    guard(std::ptr::null(), || crate::cq::error_text(prov_errno, buf, len))
}

unsafe extern "C" fn close(fid: *mut fi::fid) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes the fid being closed, no longer in use.
        match unsafe { Obj::<EqObj>::take(fid) } {
            Some(obj) => {
                drop(obj);
                0
            }
            None => -(libc::EBADF),
        }
    })
}
