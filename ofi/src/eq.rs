//! The event queue (`fi_eq_open`). RDM endpoints produce no connection
//! events and xfer reports no asynchronous errors through an EQ, so what
//! it holds is what the application writes (`fi_eq_write`, which programs
//! use to wake their own event loops): events in order, each read whole
//! (`fi_eq_read`, `FI_PEEK` leaves it there), `fi_eq_sread` waiting for
//! one, `fi_eq_readerr` always `-FI_EAGAIN`. With a wait object (`FI_WAIT_FD`,
//! `FI_WAIT_UNSPEC`, `FI_WAIT_SET`) an eventfd is readable while the queue
//! is not empty: `fi_control(FI_GETWAIT)` hands it out, a wait set watches it.

use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::entry::{self, guard, lock, put, scode, Core, Obj, PANIC};
use crate::fabric::{self, Fabric};
use crate::fi;
use crate::wait::{self, Member, WaitSetCore};

/// Events an EQ holds at most (`attr->size` when larger): a writer past it
/// gets `-FI_EAGAIN`, so no program can make it grow without bound.
const DEFAULT_SIZE: usize = 1024;

/// Bytes one event may carry (a `fi_eq_cm_entry` with its data is far less).
const MAX_EVENT: usize = 4096;

/// One written event.
struct Event {
    kind: u32,
    data: Vec<u8>,
}

/// An event queue's state.
pub(crate) struct EqCore {
    _fabric: Arc<Fabric>,
    queue: Mutex<VecDeque<Event>>,
    /// Signalled on every write (`fi_eq_sread` sleeps on it).
    arrived: Condvar,
    size: usize,
    /// Readable while the queue is not empty (wait objects only).
    event_fd: Option<OwnedFd>,
    /// The wait set it belongs to (kept open while it does).
    _set: Option<Arc<WaitSetCore>>,
}

/// An event queue object.
pub(crate) struct EqObj(pub(crate) Arc<EqCore>);

impl Core for EqObj {
    type Fid = fi::fid_eq;
    const CLASS: u32 = fi::FI_CLASS_EQ;
    const MAGIC: u64 = 0x7866_6572_6571_5f5f; // "xfereq__"
}

static OPS: fi::fi_ops = entry::ops_with_control(close, control);

static EQ_OPS: fi::fi_ops_eq = fi::fi_ops_eq {
    size: std::mem::size_of::<fi::fi_ops_eq>(),
    read: Some(read),
    readerr: Some(readerr),
    write: Some(write),
    sread: Some(sread),
    strerror: Some(strerror),
};

impl EqCore {
    /// Whether an event waits.
    pub(crate) fn ready(&self) -> bool {
        !lock(&self.queue).is_empty()
    }

    /// Sets the eventfd to say whether events wait (called under the queue lock).
    fn signal(&self, nonempty: bool) {
        let Some(fd) = &self.event_fd else { return };
        let mut buf = [0u8; 8];
        // SAFETY: 8 bytes from/to a live buffer on our non-blocking eventfd.
        unsafe {
            libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), 8);
            if nonempty {
                libc::write(fd.as_raw_fd(), 1u64.to_ne_bytes().as_ptr().cast(), 8);
            }
        }
    }

    fn write(&self, kind: u32, buf: *const c_void, len: usize) -> isize {
        if len > MAX_EVENT || (buf.is_null() && len > 0) {
            return scode(-(libc::EINVAL));
        }
        // SAFETY: the caller's buffer of `len` bytes (checked non-null when len > 0).
        let data = unsafe { crate::ep::bytes(buf, len) }.to_vec();
        let mut q = lock(&self.queue);
        if q.len() >= self.size {
            return scode(-(libc::EAGAIN));
        }
        q.push_back(Event { kind, data });
        self.signal(true);
        drop(q);
        self.arrived.notify_all();
        len as isize
    }

    /// Takes (or with `FI_PEEK` copies) the next event; `-FI_EAGAIN` when
    /// none, `-FI_ETOOSMALL` when `len` cannot hold it (it stays queued).
    fn read(&self, kind: *mut u32, buf: *mut c_void, len: usize, flags: u64) -> isize {
        let mut q = lock(&self.queue);
        let Some(e) = q.front() else {
            return scode(-(libc::EAGAIN));
        };
        if len < e.data.len() || (buf.is_null() && !e.data.is_empty()) {
            return scode(fi::err(fi::FI_ETOOSMALL));
        }
        // SAFETY: null or the caller's event slot.
        unsafe { put(kind, e.kind) };
        if !e.data.is_empty() {
            // SAFETY: `buf` holds `len` >= e.data.len() bytes.
            unsafe { std::ptr::copy_nonoverlapping(e.data.as_ptr(), buf.cast::<u8>(), e.data.len()) };
        }
        let n = e.data.len() as isize;
        if flags & fi::FI_PEEK == 0 {
            q.pop_front();
            self.signal(!q.is_empty());
        }
        n
    }

    fn sread(&self, kind: *mut u32, buf: *mut c_void, len: usize, timeout: c_int, flags: u64) -> isize {
        let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
        let mut q = lock(&self.queue);
        while q.is_empty() {
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(1),
            };
            if left.is_zero() {
                return scode(-(libc::EAGAIN));
            }
            q = match self.arrived.wait_timeout(q, left) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        drop(q);
        self.read(kind, buf, len, flags)
    }
}

/// `fi_eq_open`: wait objects none, unspec, fd and set.
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
        let attr = unsafe { attr.as_ref() }.copied().unwrap_or_default();
        let (w, set) = match wait::object(attr.wait_obj, attr.wait_set) {
            Ok(w) => w,
            Err(e) => return e,
        };
        let event_fd = match w.is_some() {
            false => None,
            true => {
                // SAFETY: plain syscall; the result is checked before use.
                let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
                if fd < 0 {
                    return -std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
                }
                // SAFETY: a new descriptor that nothing else owns.
                Some(unsafe { OwnedFd::from_raw_fd(fd) })
            }
        };
        let core = Arc::new(EqCore {
            _fabric: fabric,
            queue: Mutex::new(VecDeque::new()),
            arrived: Condvar::new(),
            size: attr.size.max(DEFAULT_SIZE),
            event_fd,
            _set: set.clone(),
        });
        if let (Some(set), Some(fd)) = (set, &core.event_fd) {
            if let Err(e) = set.add(Member::Eq(Arc::downgrade(&core)), fd.as_raw_fd()) {
                return e;
            }
        }
        let fid = fi::fid_eq {
            fid: entry::fid(fi::FI_CLASS_EQ, context, &OPS),
            ops: entry::ops(&EQ_OPS),
        };
        // SAFETY: the application's out pointer.
        unsafe { entry::hand_out(eq, fid, EqObj(core)) }
    })
}

/// The event queue behind `fid`.
///
/// # Safety
/// `fid` is null or a live fid.
pub(crate) unsafe fn get(fid: *const fi::fid) -> Option<Arc<EqCore>> {
    // SAFETY: forwarded.
    unsafe { Obj::<EqObj>::get(fid) }.map(|o| o.core.0.clone())
}

fn with_eq(eq: *mut fi::fid_eq, f: impl FnOnce(&EqCore) -> isize) -> isize {
    guard(scode(PANIC), || {
        // SAFETY: libfabric passes the application's fid_eq, open for the call.
        match unsafe { Obj::<EqObj>::get(eq.cast()) } {
            Some(o) => f(&o.core.0),
            None => scode(-(libc::EINVAL)),
        }
    })
}

unsafe extern "C" fn read(eq: *mut fi::fid_eq, event: *mut u32, buf: *mut c_void, len: usize, flags: u64) -> isize {
    with_eq(eq, |q| q.read(event, buf, len, flags))
}

/// `fi_eq_readerr`: `-FI_EAGAIN` (xfer reports no asynchronous errors here).
unsafe extern "C" fn readerr(eq: *mut fi::fid_eq, _buf: *mut fi::fi_eq_err_entry, _flags: u64) -> isize {
    with_eq(eq, |_| scode(-(libc::EAGAIN)))
}

/// `fi_eq_write`: queues an event of `len` bytes (at most 4 KiB); returns
/// `len`, or `-FI_EAGAIN` when the queue is full.
unsafe extern "C" fn write(eq: *mut fi::fid_eq, event: u32, buf: *const c_void, len: usize, _flags: u64) -> isize {
    with_eq(eq, |q| q.write(event, buf, len))
}

unsafe extern "C" fn sread(
    eq: *mut fi::fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    timeout: c_int,
    flags: u64,
) -> isize {
    with_eq(eq, |q| q.sread(event, buf, len, timeout, flags))
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

/// `fi_control(FI_GETWAIT)`: the eventfd, readable while events wait;
/// `FI_GETWAITOBJ`: `FI_WAIT_FD`; `-FI_ENODATA` without a wait object.
unsafe extern "C" fn control(fid: *mut fi::fid, command: c_int, arg: *mut c_void) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes the application's fid.
        let Some(o) = (unsafe { Obj::<EqObj>::get(fid) }) else {
            return -(libc::EINVAL);
        };
        let Some(fd) = &o.core.0.event_fd else {
            return -(libc::ENODATA);
        };
        match command as u32 {
            // SAFETY: FI_GETWAIT's argument is an int for a wait fd.
            fi::FI_GETWAIT if unsafe { put(arg.cast::<c_int>(), fd.as_raw_fd()) } => 0,
            // SAFETY: FI_GETWAITOBJ's argument is an enum fi_wait_obj.
            fi::FI_GETWAITOBJ if unsafe { put(arg.cast::<fi::fi_wait_obj>(), fi::FI_WAIT_FD) } => 0,
            fi::FI_GETWAIT | fi::FI_GETWAITOBJ => -(libc::EINVAL),
            _ => -(libc::ENOSYS),
        }
    })
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
