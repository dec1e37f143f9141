//! What every `extern "C"` entry point shares: no panic crosses into
//! libfabric, every `fid` is checked (null, class, magic) before it is
//! turned back into one of our objects, and errors become `-FI_E*` codes.

use std::panic::AssertUnwindSafe;

use xfer_facade::Error;

use crate::fi;

/// Runs `f`, turning a panic into `on_panic` (an `-FI_E*` code) so that it
/// never unwinds into C.
#[inline]
pub(crate) fn guard<R>(on_panic: R, f: impl FnOnce() -> R) -> R {
    match std::panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            xfer_core::error_limited!("panic caught at the libfabric boundary; returning an error");
            on_panic
        }
    }
}

/// Locks `m`, going on with the data of a thread that panicked holding it
/// (every lock here guards state that stays consistent between statements).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `fi_close` of an object other objects may hold: `-FI_EBUSY` while
/// `in_use` says they do (libfabric's close order), else it is dropped.
pub(crate) fn close_unless_used<T: Core>(fid: *mut fi::fid, in_use: impl Fn(&T) -> bool) -> libc::c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes the fid being closed.
        let Some(obj) = (unsafe { Obj::<T>::get(fid) }) else {
            return -(libc::EBADF);
        };
        if in_use(&obj.core) {
            return -(libc::EBUSY);
        }
        // SAFETY: checked above; the application no longer uses it.
        drop(unsafe { Obj::<T>::take(fid) });
        0
    })
}

/// `-FI_EIO`, what a caught panic returns.
pub(crate) const PANIC: i32 = -(libc::EIO);

/// The `-FI_E*` code of an xfer error (xfer's codes are libfabric's).
pub(crate) fn code(e: &Error) -> i32 {
    e.code()
}

/// `-FI_E*` as an `ssize_t` return.
pub(crate) fn scode(code: i32) -> isize {
    code as isize
}

/// One kind of object behind a libfabric descriptor.
pub(crate) trait Core: Sized {
    /// The libfabric descriptor it embeds first (`fid_fabric`, `fid_ep`, ...).
    type Fid;
    /// Its `FI_CLASS_*`.
    const CLASS: u32;
    /// A value no other kind uses, checked before every cast back.
    const MAGIC: u64;
}

/// A libfabric descriptor followed by our state. Its address is the
/// descriptor's, so libfabric's inline calls (`fid->ops->close(fid)`) land
/// on our functions with a pointer we can turn back into the object.
#[repr(C)]
pub(crate) struct Obj<T: Core> {
    fid: T::Fid,
    magic: u64,
    /// Our state.
    pub(crate) core: T,
}

impl<T: Core> Obj<T> {
    /// Moves the object to the heap; the pointer is what libfabric gets.
    pub(crate) fn into_raw(fid: T::Fid, core: T) -> *mut T::Fid {
        Box::into_raw(Box::new(Obj {
            fid,
            magic: T::MAGIC,
            core,
        }))
        .cast()
    }

    /// The object behind `fid`, or `None` when `fid` is null or not one of
    /// ours of this kind.
    ///
    /// # Safety
    /// `fid` must be null or point to a live `struct fid` (libfabric's
    /// contract for every call); objects of our classes were made by
    /// [`into_raw`](Self::into_raw) and stay valid until closed.
    pub(crate) unsafe fn get<'a>(fid: *const fi::fid) -> Option<&'a Obj<T>> {
        if fid.is_null() {
            return None;
        }
        // SAFETY: non-null and, by the caller's contract, a live fid.
        if unsafe { (*fid).fclass } != T::CLASS as usize {
            return None;
        }
        let obj = fid.cast::<Obj<T>>();
        // SAFETY: a fid of our class on our ops table is the head of an
        // `Obj<T>` made by `into_raw`; the magic confirms it.
        let obj = unsafe { &*obj };
        (obj.magic == T::MAGIC).then_some(obj)
    }

    /// Takes the object back to drop it (`fi_close`).
    ///
    /// # Safety
    /// As [`get`](Self::get); in addition no other call may be using the
    /// object (libfabric's rule for `fi_close`).
    pub(crate) unsafe fn take(fid: *mut fi::fid) -> Option<Box<Obj<T>>> {
        // SAFETY: forwarded.
        unsafe { Self::get(fid) }?;
        // SAFETY: checked above to be a live `Obj<T>` from `into_raw`, and
        // nobody else uses it any more.
        let mut obj = unsafe { Box::from_raw(fid.cast::<Obj<T>>()) };
        obj.magic = 0;
        Some(obj)
    }
}

/// Moves a new object to the heap and writes its descriptor through `out`
/// (the application's out pointer: null or valid for a write); 0, or
/// `-FI_EINVAL` (the object dropped) when `out` is null.
///
/// # Safety
/// `out` is null or valid for a write of a pointer.
pub(crate) unsafe fn hand_out<T: Core>(out: *mut *mut T::Fid, fid: T::Fid, core: T) -> libc::c_int {
    let obj = Obj::into_raw(fid, core);
    // SAFETY: the caller's contract.
    if !unsafe { put(out, obj) } {
        // SAFETY: just made by into_raw, never shared.
        drop(unsafe { Obj::<T>::take(obj.cast()) });
        return -(libc::EINVAL);
    }
    0
}

/// A `struct fid` header for a new object.
pub(crate) fn fid(class: u32, context: *mut libc::c_void, ops: &'static fi::fi_ops) -> fi::fid {
    fi::fid {
        fclass: class as usize,
        context,
        ops: ops as *const fi::fi_ops as *mut fi::fi_ops,
    }
}

/// Writes `value` through `out` when `out` is not null.
///
/// # Safety
/// `out` must be null or valid for a write of `T`.
pub(crate) unsafe fn put<T>(out: *mut T, value: T) -> bool {
    if out.is_null() {
        return false;
    }
    // SAFETY: non-null and valid by the caller's contract.
    unsafe { out.write(value) };
    true
}

/// The static pointer libfabric expects for an ops table.
pub(crate) fn ops<T>(table: &'static T) -> *mut T {
    table as *const T as *mut T
}

/// Declares `extern "C"` functions that only return `-FI_ENOSYS`: what
/// libfabric's callers get for every operation xfer does not provide.
/// (They cannot panic, so they need no [`guard`].)
macro_rules! enosys {
    ($($name:ident($($t:ty),*) -> $ret:ty;)*) => {
        $(
            pub(crate) unsafe extern "C" fn $name($(_: $t),*) -> $ret {
                -(libc::ENOSYS as $ret)
            }
        )*
    };
}
pub(crate) use enosys;

enosys! {
    no_bind(*mut fi::fid, *mut fi::fid, u64) -> libc::c_int;
    no_control(*mut fi::fid, libc::c_int, *mut libc::c_void) -> libc::c_int;
    no_ops_open(*mut fi::fid, *const libc::c_char, u64, *mut *mut libc::c_void, *mut libc::c_void) -> libc::c_int;
    no_tostr(*const fi::fid, *mut libc::c_char, usize) -> libc::c_int;
    no_ops_set(*mut fi::fid, *const libc::c_char, u64, *mut libc::c_void, *mut libc::c_void) -> libc::c_int;
}

/// The `fi_ops` of an object whose only generic operation is `close`
/// (everything else `-FI_ENOSYS`).
pub(crate) const fn close_only_ops(close: unsafe extern "C" fn(*mut fi::fid) -> libc::c_int) -> fi::fi_ops {
    ops_with_control(close, no_control)
}

/// The `fi_ops` of an object with `close` and `control` (a CQ or counter:
/// `FI_GETWAIT`), everything else `-FI_ENOSYS`.
pub(crate) const fn ops_with_control(
    close: unsafe extern "C" fn(*mut fi::fid) -> libc::c_int,
    control: unsafe extern "C" fn(*mut fi::fid, libc::c_int, *mut libc::c_void) -> libc::c_int,
) -> fi::fi_ops {
    fi::fi_ops {
        size: std::mem::size_of::<fi::fi_ops>(),
        close: Some(close),
        bind: Some(no_bind),
        control: Some(control),
        ops_open: Some(no_ops_open),
        tostr: Some(no_tostr),
        ops_set: Some(no_ops_set),
    }
}
