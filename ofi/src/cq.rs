//! The completion queue (`fi_cq_open`): libfabric entries routed out of the
//! xfer completion queues of the endpoints bound to it.
//!
//! Each enabled endpoint owns one xfer [`CompletionQueue`](xfer_facade::CompletionQueue);
//! reading any libfabric CQ bound to it polls it (which drives xfer's
//! progress) and routes each completion to the endpoint's transmit or
//! receive CQ by its flags, so an endpoint may bind one CQ for both or two
//! as fi_pingpong does. Errors queue in order with the successes; the read
//! that meets one returns `-FI_EAVAIL`, and `fi_cq_readerr` takes it.

use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use xfer_facade::{Completion, Error};

use crate::domain::{self, DomainCore};
use crate::entry::{self, guard, lock, put, scode, Core, Obj, PANIC};
use crate::ep::EpCore;
use crate::fi;
use crate::latch::{Latch, LatchGuard};

/// Longest sleep of one `fi_cq_sread` wait, so xfer's timers (connection
/// timeouts) are looked at even when no descriptor fires.
const MAX_SLEEP: Duration = Duration::from_millis(20);

/// One completion as libfabric reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) context: u64,
    pub(crate) flags: u64,
    pub(crate) len: usize,
    pub(crate) data: u64,
    pub(crate) tag: u64,
    pub(crate) src: u64,
    /// Where the data landed (`buf`): set for messages of a multi-receive
    /// buffer, else 0.
    pub(crate) buf: u64,
    /// `(err, olen)` for an error entry: the positive `FI_E*` number and,
    /// for a truncation, the bytes that did not fit.
    pub(crate) error: Option<(i32, usize)>,
}

impl Entry {
    /// The libfabric form of an xfer completion. A truncated receive
    /// reports the bytes delivered in `len` and the bytes discarded in
    /// `olen`, as fi_cq(3) defines them.
    pub(crate) fn from_xfer(c: &Completion) -> Entry {
        let error = match &c.result {
            Ok(()) => None,
            Err(Error::Truncated { len, olen }) => Some((fi::FI_ETRUNC as i32, olen.saturating_sub(*len))),
            Err(e) => Some((-e.code(), 0)),
        };
        Entry {
            context: c.context,
            flags: c.flags.0,
            len: c.len,
            data: c.data,
            tag: c.tag,
            src: c.received_from().0,
            buf: 0,
            error,
        }
    }
}

/// What a blocking read (or counter wait) sleeps on: every bound endpoint's
/// xfer CQ descriptor plus an eventfd others poke when they route entries
/// (or counts) here. `poked` keeps the eventfd's system calls off the
/// busy-polling path: it is written once until a reader resets it.
pub(crate) struct Wait {
    epoll: xfer_core::unstable::sys::Epoll,
    event: OwnedFd,
    poked: AtomicBool,
}

impl Wait {
    pub(crate) fn new() -> Result<Wait, Error> {
        let epoll = xfer_core::unstable::sys::Epoll::new()?;
        // SAFETY: plain syscall; the result is checked before use.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::last_os_error());
        }
        // SAFETY: a new descriptor that nothing else owns.
        let event = unsafe { OwnedFd::from_raw_fd(fd) };
        epoll.add(event.as_raw_fd(), xfer_core::unstable::sys::READABLE, 0)?;
        Ok(Wait {
            epoll,
            event,
            poked: AtomicBool::new(false),
        })
    }

    /// Adds a bound endpoint's xfer CQ descriptor.
    pub(crate) fn watch(&self, fd: std::os::fd::RawFd) -> Result<(), Error> {
        self.epoll.add(fd, xfer_core::unstable::sys::READABLE, 1)
    }

    /// The descriptor a `FI_GETWAIT` caller blocks on.
    pub(crate) fn fd(&self) -> std::os::fd::RawFd {
        self.epoll.as_raw_fd()
    }

    /// Sleeps until a watched descriptor fires or `ms` pass.
    pub(crate) fn sleep(&self, ms: i32) -> Result<(), Error> {
        self.epoll
            .wait(&mut [xfer_core::unstable::sys::EMPTY_EVENT; 4], ms)
            .map(|_| ())
    }

    /// Makes the eventfd readable (once until [`reset`](Self::reset)).
    pub(crate) fn poke(&self) {
        if self.poked.swap(true, Ordering::AcqRel) {
            return; // already readable
        }
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to our eventfd.
        let _ = unsafe { libc::write(self.event.as_raw_fd(), one.as_ptr().cast(), 8) };
    }

    /// Drains the eventfd if it was poked.
    pub(crate) fn reset(&self) {
        if !self.poked.swap(false, Ordering::AcqRel) {
            return;
        }
        let mut buf = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live buffer (non-blocking).
        let _ = unsafe { libc::read(self.event.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
    }
}

impl Wait {
    /// The wait object `wait_obj` asks for: none for `FI_WAIT_NONE`, an fd
    /// for `FI_WAIT_UNSPEC` and `FI_WAIT_FD`; `-FI_ENOSYS` for the others.
    pub(crate) fn for_object(wait_obj: fi::fi_wait_obj) -> Result<Option<Wait>, c_int> {
        match wait_obj {
            fi::FI_WAIT_NONE => Ok(None),
            fi::FI_WAIT_UNSPEC | fi::FI_WAIT_FD => Wait::new().map(Some).map_err(|e| entry::code(&e)),
            _ => Err(-(libc::ENOSYS)),
        }
    }

    /// `fi_control` of a CQ or counter with this wait object: `FI_GETWAIT`
    /// (the epoll fd), `FI_GETWAITOBJ` (`FI_WAIT_FD`); `-FI_ENODATA` without one.
    pub(crate) fn control(wait: Option<&Wait>, command: c_int, arg: *mut c_void) -> c_int {
        let Some(w) = wait else {
            return -(libc::ENODATA);
        };
        match command as u32 {
            // SAFETY: FI_GETWAIT's argument is an int for a wait fd.
            fi::FI_GETWAIT if unsafe { put(arg.cast::<c_int>(), w.fd()) } => 0,
            // SAFETY: FI_GETWAITOBJ's argument is an enum fi_wait_obj.
            fi::FI_GETWAITOBJ if unsafe { put(arg.cast::<fi::fi_wait_obj>(), fi::FI_WAIT_FD) } => 0,
            fi::FI_GETWAIT | fi::FI_GETWAITOBJ => -(libc::EINVAL),
            _ => -(libc::ENOSYS),
        }
    }
}

/// The enabled endpoints a CQ or counter drives: held until their
/// `fi_close` detaches them, so a read need not upgrade a weak reference
/// per endpoint (decision 53).
pub(crate) struct Driven(Latch<Vec<Arc<EpCore>>>);

impl Driven {
    /// None yet; `serial`: the domain is `FI_THREAD_DOMAIN` (latch.rs).
    pub(crate) fn new(serial: bool) -> Driven {
        Driven(Latch::new(Vec::new(), serial))
    }

    /// Adds an endpoint being enabled, and its xfer CQ descriptor `fd` to
    /// `wait` (once, when it is bound for several kinds).
    pub(crate) fn attach(&self, ep: &Arc<EpCore>, wait: Option<&Wait>, fd: std::os::fd::RawFd) -> Result<(), Error> {
        let mut eps = self.0.lock();
        if eps.iter().any(|e| Arc::ptr_eq(e, ep)) {
            return Ok(());
        }
        if let Some(w) = wait {
            w.watch(fd)?;
        }
        eps.push(ep.clone());
        Ok(())
    }

    /// Removes an endpoint being closed (or whose enabling failed).
    pub(crate) fn detach(&self, ep: &EpCore) {
        self.0.lock().retain(|e| !std::ptr::eq(Arc::as_ptr(e), ep));
    }

    /// The endpoints, locked.
    pub(crate) fn eps(&self) -> LatchGuard<'_, Vec<Arc<EpCore>>> {
        self.0.lock()
    }

    /// Arms every endpoint's xfer CQ for a blocking wait: false when one
    /// has completions ready.
    pub(crate) fn ready_to_block(&self) -> bool {
        self.eps().iter().all(|ep| ep.ready_to_block())
    }
}

/// The largest entry format; the others are prefixes of it.
type Tagged = fi::fi_cq_tagged_entry;

// Every field of an entry is 8 bytes: `Out::put` writes them as such.
const _: () = assert!(std::mem::size_of::<Tagged>() == 48 && std::mem::size_of::<usize>() == 8);

/// Where a read puts what it takes: the caller's array of `count` entries
/// in the CQ's format and, for `fi_cq_readfrom`, its source addresses.
pub(crate) struct Out {
    buf: *mut u8,
    size: usize,
    count: usize,
    src: *mut fi::fi_addr_t,
    /// Entries written so far.
    n: usize,
    /// An error entry was queued during this read: later entries queue
    /// behind it instead of overtaking it.
    blocked: bool,
}

impl Out {
    /// Writes a successful entry if there is room and no error is ahead of it.
    pub(crate) fn put(&mut self, e: &Entry) -> bool {
        if self.n == self.count || self.blocked {
            return false;
        }
        // SAFETY: the caller's buffer holds `count` entries of `size` bytes
        // (the CQ's format, a prefix of fi_cq_tagged_entry) and n < count;
        // `src` is null or holds `count` addresses.
        unsafe {
            let dst = self.buf.add(self.n * self.size);
            // Field by field, as far as the format goes: one copy of a size
            // known only at run time was a call to memcpy per entry.
            let put = |at: usize, v: u64| dst.add(at).cast::<u64>().write_unaligned(v);
            put(std::mem::offset_of!(Tagged, op_context), e.context);
            if self.size >= std::mem::size_of::<fi::fi_cq_msg_entry>() {
                put(std::mem::offset_of!(Tagged, flags), e.flags);
                put(std::mem::offset_of!(Tagged, len), e.len as u64);
            }
            if self.size >= std::mem::size_of::<fi::fi_cq_data_entry>() {
                put(std::mem::offset_of!(Tagged, buf), e.buf);
                put(std::mem::offset_of!(Tagged, data), e.data);
            }
            if self.size >= std::mem::size_of::<Tagged>() {
                put(std::mem::offset_of!(Tagged, tag), e.tag);
            }
            if !self.src.is_null() {
                self.src.add(self.n).write(e.src);
            }
        }
        self.n += 1;
        true
    }

    /// Marks that an error entry was queued for this CQ.
    pub(crate) fn block(&mut self) {
        self.blocked = true;
    }
}

/// A completion queue's state, shared with the endpoints bound to it.
pub(crate) struct CqCore {
    pub(crate) domain: Arc<DomainCore>,
    api_version: u32,
    /// Bytes of one entry in the CQ's format.
    entry_size: usize,
    wait: Option<Wait>,
    queue: Mutex<VecDeque<Entry>>,
    /// The error data (`err_data`) of each error entry in `queue`, in the
    /// same order: the sender's address of an `FI_SOURCE_ERR` entry, else
    /// none. Changed only with `queue` locked.
    err_data: Mutex<VecDeque<Option<Vec<u8>>>>,
    /// The error data `fi_cq_readerr` last pointed `err_data` at (the
    /// application gave no buffer): kept until the next `fi_cq_readerr`.
    lent: Mutex<Vec<u8>>,
    /// Entries in `queue`, read without its lock: most reads find none.
    queued: AtomicUsize,
    /// The last read returned entries and had room for more: it emptied
    /// the endpoints' xfer CQs, so the next read returns `-FI_EAGAIN`
    /// without polling them again (decision 50).
    drained: AtomicBool,
    /// `fi_cq_signal` was called: the next `fi_cq_sread` that finds nothing
    /// returns `-FI_ECANCELED` instead of waiting.
    signaled: AtomicBool,
    /// The enabled endpoints bound to it.
    pub(crate) eps: Driven,
    /// The wait set it belongs to (`FI_WAIT_SET`), kept open while it does.
    _set: Option<Arc<crate::wait::WaitSetCore>>,
}

/// A completion queue object.
pub(crate) struct CqObj(pub(crate) Arc<CqCore>);

impl Core for CqObj {
    type Fid = fi::fid_cq;
    const CLASS: u32 = fi::FI_CLASS_CQ;
    const MAGIC: u64 = 0x7866_6572_6371_5f5f; // "xfercq__"
}

static OPS: fi::fi_ops = entry::ops_with_control(close, control);

static CQ_OPS: fi::fi_ops_cq = fi::fi_ops_cq {
    size: std::mem::size_of::<fi::fi_ops_cq>(),
    read: Some(read),
    readfrom: Some(readfrom),
    readerr: Some(readerr),
    sread: Some(sread),
    sreadfrom: Some(sreadfrom),
    signal: Some(signal),
    strerror: Some(strerror),
};

/// Bytes of one entry in `format` (each format extends the previous one).
fn entry_size(format: u32) -> usize {
    match format {
        fi::FI_CQ_FORMAT_MSG => std::mem::size_of::<fi::fi_cq_msg_entry>(),
        fi::FI_CQ_FORMAT_DATA => std::mem::size_of::<fi::fi_cq_data_entry>(),
        fi::FI_CQ_FORMAT_TAGGED => std::mem::size_of::<fi::fi_cq_tagged_entry>(),
        _ => std::mem::size_of::<fi::fi_cq_entry>(),
    }
}

impl CqCore {
    /// Adds an endpoint being enabled; its completions are polled from here.
    pub(crate) fn attach(&self, ep: &Arc<EpCore>, fd: std::os::fd::RawFd) -> Result<(), Error> {
        self.eps.attach(ep, self.wait.as_ref(), fd)
    }

    /// Whether this CQ wants a blocking wait's descriptor (not `FI_WAIT_NONE`).
    pub(crate) fn waits(&self) -> bool {
        self.wait.is_some()
    }

    /// Whether a read would find something (a wait set's or poll set's
    /// question): the bound endpoints are driven first, their entries for
    /// this CQ queued; the wait object is reset before, so that a later
    /// completion wakes its sleepers again.
    pub(crate) fn ready(&self) -> bool {
        if let Some(w) = &self.wait {
            w.reset();
        }
        self.drive(None);
        !self.ready_to_block()
    }

    /// Queues an entry routed here; `poke` wakes a waiter of this CQ.
    pub(crate) fn push(&self, e: Entry, poke: bool) {
        self.push_with(e, poke, None);
    }

    /// [`push`](Self::push) of an entry with its error data (`err_data`
    /// of an error entry; ignored for a success).
    pub(crate) fn push_with(&self, e: Entry, poke: bool, data: Option<Vec<u8>>) {
        let mut q = lock(&self.queue);
        if e.error.is_some() {
            lock(&self.err_data).push_back(data);
        }
        q.push_back(e);
        self.queued.store(q.len(), Ordering::Release);
        drop(q);
        if let (true, Some(w)) = (poke, &self.wait) {
            w.poke();
        }
    }

    /// Polls every bound endpoint; entries for this CQ go into `out` when
    /// one is given and has room, the rest to their CQs' queues. A CQ bound
    /// to one endpoint (Open MPI's, each of fi_pingpong's) polls it inline,
    /// with no loop around it.
    #[inline(always)]
    fn progress(&self, mut out: Option<&mut Out>) {
        let eps = self.eps.eps();
        match &eps[..] {
            [ep] => ep.progress(Some(self), out),
            eps => {
                for ep in eps {
                    ep.drive(Some(self), out.as_deref_mut());
                }
            }
        }
    }

    /// [`progress`](Self::progress), out of line: for every caller but the
    /// read's common case.
    #[inline(never)]
    fn drive(&self, out: Option<&mut Out>) {
        self.progress(out)
    }

    /// Moves queued successes into `out`; true when an error entry is next.
    fn take_queued(&self, out: &mut Out) -> bool {
        if self.queued.load(Ordering::Acquire) == 0 {
            return false;
        }
        let mut q = lock(&self.queue);
        let mut error = false;
        while let Some(e) = q.front() {
            if e.error.is_some() {
                error = true;
                break;
            }
            if !out.put(e) {
                break;
            }
            q.pop_front();
        }
        self.queued.store(q.len(), Ordering::Release);
        error
    }

    /// Up to `count` successful entries into `buf` (and their sources into
    /// `src`); `-FI_EAVAIL` when an error is next, `-FI_EAGAIN` when empty.
    /// Entries queued earlier (routed here by another CQ's read, or behind
    /// an error) come first; then the endpoints are polled and what they
    /// complete for this CQ is written straight into `buf`. A read right
    /// after one that emptied the endpoints does not poll (decision 50).
    ///
    /// Inlined into `fi_cq_read` with the endpoints' poll: a read with
    /// nothing queued (a spinning reader's) goes from the call to the
    /// engine without a frame of its own in between; the rest is
    /// [`read_queued`](Self::read_queued).
    #[inline(always)]
    fn read(&self, buf: *mut c_void, count: usize, src: *mut fi::fi_addr_t) -> isize {
        if buf.is_null() || count == 0 || self.queued.load(Ordering::Acquire) > 0 {
            return self.read_queued(buf, count, src);
        }
        // Open MPI's ofi MTL reads until -FI_EAGAIN after every read that
        // found something: polling again at once would cost a receive system
        // call per message, on the way to the reply (decision 50).
        if self.drained.load(Ordering::Acquire) && self.drained.swap(false, Ordering::AcqRel) {
            return scode(-(libc::EAGAIN));
        }
        let mut out = self.out(buf, count, src);
        self.progress(Some(&mut out));
        self.polled(out)
    }

    /// [`read`](Self::read) of a CQ that has entries queued, or of no
    /// array (`count` 0, or a null `buf`).
    #[inline(never)]
    fn read_queued(&self, buf: *mut c_void, count: usize, src: *mut fi::fi_addr_t) -> isize {
        if buf.is_null() && count > 0 {
            return scode(-(libc::EINVAL));
        }
        if count == 0 {
            // `fi_cq_read(cq, NULL, 0)`: the idiom that drives progress
            // without taking anything (libfabric's util CQs do the same):
            // what completes is queued; 0 when entries wait.
            self.drive(None);
            return match self.queued.load(Ordering::Acquire) {
                0 => scode(-(libc::EAGAIN)),
                _ => 0,
            };
        }
        let mut out = self.out(buf, count, src);
        if self.take_queued(&mut out) {
            return match out.n {
                0 => scode(fi::err(fi::FI_EAVAIL)),
                n => n as isize,
            };
        }
        if out.n == 0 && self.drained.load(Ordering::Acquire) && self.drained.swap(false, Ordering::AcqRel) {
            return scode(-(libc::EAGAIN));
        }
        if out.n < count {
            self.drive(Some(&mut out));
        }
        self.polled(out)
    }

    /// The caller's array as a read's destination.
    #[inline(always)]
    fn out(&self, buf: *mut c_void, count: usize, src: *mut fi::fi_addr_t) -> Out {
        Out {
            buf: buf.cast(),
            size: self.entry_size,
            count,
            src,
            n: 0,
            blocked: false,
        }
    }

    /// A read's answer once the endpoints were polled into `out`.
    #[inline(always)]
    fn polled(&self, mut out: Out) -> isize {
        if out.n > 0 {
            self.drained.store(out.n < out.count, Ordering::Release);
            return out.n as isize;
        }
        if self.queued.load(Ordering::Acquire) > 0 {
            // An error routed during the poll (or by another thread).
            return match self.take_queued(&mut out) {
                true => scode(fi::err(fi::FI_EAVAIL)),
                false => out.n as isize,
            };
        }
        if let Some(w) = &self.wait {
            w.reset();
        }
        scode(-(libc::EAGAIN))
    }

    /// Takes the error entry at the head into `out`.
    fn readerr(&self, out: *mut fi::fi_cq_err_entry) -> isize {
        if out.is_null() {
            return scode(-(libc::EINVAL));
        }
        let mut q = lock(&self.queue);
        let Some(
            e @ Entry {
                error: Some((err, olen)),
                ..
            },
        ) = q.front().copied()
        else {
            return scode(-(libc::EAGAIN));
        };
        q.pop_front();
        let data = lock(&self.err_data).pop_front().flatten();
        self.queued.store(q.len(), Ordering::Release);
        drop(q);
        // SAFETY: the caller's entry and its err_data buffer of
        // err_data_size bytes (fi_cq(3)).
        unsafe { self.write_err_data(out, data.as_deref()) };
        // SAFETY: the caller's entry; before API 1.5 it ends after
        // `err_data` (no `err_data_size`), so fields are written one by one.
        unsafe {
            use std::ptr::addr_of_mut;
            addr_of_mut!((*out).op_context).write(e.context as usize as *mut c_void);
            addr_of_mut!((*out).flags).write(e.flags);
            addr_of_mut!((*out).len).write(e.len);
            addr_of_mut!((*out).buf).write(e.buf as usize as *mut c_void);
            addr_of_mut!((*out).data).write(e.data);
            addr_of_mut!((*out).tag).write(e.tag);
            addr_of_mut!((*out).olen).write(olen);
            addr_of_mut!((*out).err).write(err);
            addr_of_mut!((*out).prov_errno).write(err);
        }
        1
    }

    /// Sets `out`'s `err_data` as fi_cq(3) says: with API 1.5 or later and
    /// an `err_data_size` above 0, `data` is copied into the application's
    /// `err_data` buffer (as much as fits) and `err_data_size` says how
    /// much; otherwise `err_data` points at a copy the CQ keeps until the
    /// next `fi_cq_readerr` (with `err_data_size` its length from 1.5 on).
    /// No data: `err_data_size` 0 (or a null `err_data` before 1.5).
    ///
    /// # Safety
    /// `out` is the caller's entry (up to `err_data` before API 1.5), its
    /// `err_data` valid for `err_data_size` bytes when that is above 0.
    unsafe fn write_err_data(&self, out: *mut fi::fi_cq_err_entry, data: Option<&[u8]>) {
        use std::ptr::addr_of_mut;
        let sized = self.api_version >= fi::version(1, 5);
        let data = data.unwrap_or_default();
        // SAFETY: from API 1.5 on the entry has `err_data_size`.
        let room = if sized { unsafe { (*out).err_data_size } } else { 0 };
        // SAFETY: `err_data` is in every version's entry.
        let given = unsafe { (*out).err_data };
        if room > 0 && !given.is_null() {
            let n = room.min(data.len());
            // SAFETY: the application's buffer holds `room` >= n bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), given.cast::<u8>(), n);
                addr_of_mut!((*out).err_data_size).write(n);
            }
            return;
        }
        let mut lent = lock(&self.lent);
        lent.clear();
        lent.extend_from_slice(data);
        let ptr = match lent.is_empty() {
            true => std::ptr::null_mut(),
            // Stays valid while `lent` is not written: until the next readerr.
            false => lent.as_mut_ptr().cast::<c_void>(),
        };
        // SAFETY: the caller's entry, as above.
        unsafe {
            addr_of_mut!((*out).err_data).write(ptr);
            if sized {
                addr_of_mut!((*out).err_data_size).write(lent.len());
            }
        }
    }

    /// Makes every bound endpoint ready for a blocking wait: false when an
    /// entry is already there (read instead).
    fn ready_to_block(&self) -> bool {
        if self.queued.load(Ordering::Acquire) > 0 {
            return false;
        }
        self.eps.ready_to_block()
    }

    fn sread(&self, buf: *mut c_void, count: usize, src: *mut fi::fi_addr_t, timeout: c_int) -> isize {
        let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
        loop {
            let r = self.read(buf, count, src);
            if r != scode(-(libc::EAGAIN)) {
                return r;
            }
            if self.signaled.swap(false, Ordering::AcqRel) {
                return scode(-(libc::ECANCELED)); // fi_cq_signal
            }
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => MAX_SLEEP,
            };
            if left.is_zero() {
                return scode(-(libc::EAGAIN));
            }
            let Some(w) = &self.wait else {
                std::thread::yield_now(); // FI_WAIT_NONE: nothing to sleep on
                continue;
            };
            if !self.ready_to_block() {
                continue;
            }
            let ms = left.min(MAX_SLEEP).as_millis().max(1) as i32;
            if let Err(e) = w.sleep(ms) {
                return scode(entry::code(&e));
            }
        }
    }
}

/// `fi_cq_open`: formats context, msg, data and tagged (unspec: context);
/// wait objects none, unspec and fd (`FI_GETWAIT` gives an epoll fd).
pub(crate) unsafe extern "C" fn open(
    domain: *mut fi::fid_domain,
    attr: *mut fi::fi_cq_attr,
    cq: *mut *mut fi::fid_cq,
    context: *mut c_void,
) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes our domain.
        let Some(domain) = (unsafe { domain::get(domain) }) else {
            return -(libc::EINVAL);
        };
        // SAFETY: the application's attributes (required by fi_cq_open).
        let Some(attr) = (unsafe { attr.as_ref() }) else {
            return -(libc::EINVAL);
        };
        let format = match attr.format {
            fi::FI_CQ_FORMAT_UNSPEC => fi::FI_CQ_FORMAT_CONTEXT,
            f @ (fi::FI_CQ_FORMAT_CONTEXT | fi::FI_CQ_FORMAT_MSG | fi::FI_CQ_FORMAT_DATA | fi::FI_CQ_FORMAT_TAGGED) => {
                f
            }
            _ => return -(libc::ENOSYS),
        };
        let (wait, set) = match crate::wait::object(attr.wait_obj, attr.wait_set) {
            Ok(w) => w,
            Err(e) => return e,
        };
        let serial = domain.serial();
        let core = Arc::new(CqCore {
            api_version: domain.api_version,
            domain,
            entry_size: entry_size(format),
            wait,
            queue: Mutex::new(VecDeque::with_capacity(attr.size.clamp(16, 1 << 16))),
            err_data: Mutex::new(VecDeque::new()),
            lent: Mutex::new(Vec::new()),
            queued: AtomicUsize::new(0),
            drained: AtomicBool::new(false),
            signaled: AtomicBool::new(false),
            eps: Driven::new(serial),
            _set: set.clone(),
        });
        if let (Some(set), Some(w)) = (set, &core.wait) {
            if let Err(e) = set.add(crate::wait::Member::Cq(Arc::downgrade(&core)), w.fd()) {
                return e;
            }
        }
        let fid = fi::fid_cq {
            fid: entry::fid(fi::FI_CLASS_CQ, context, &OPS),
            ops: entry::ops(&CQ_OPS),
        };
        // SAFETY: the application's out pointer.
        unsafe { entry::hand_out(cq, fid, CqObj(core)) }
    })
}

/// The completion queue behind `fid`.
///
/// # Safety
/// `fid` is null or a live fid.
pub(crate) unsafe fn get(fid: *const fi::fid) -> Option<Arc<CqCore>> {
    // SAFETY: forwarded.
    unsafe { Obj::<CqObj>::get(fid) }.map(|o| o.core.0.clone())
}

#[inline(always)]
fn with_cq(cq: *mut fi::fid_cq, f: impl FnOnce(&CqCore) -> isize) -> isize {
    guard(scode(PANIC), || {
        // SAFETY: libfabric passes the application's fid_cq, open for the
        // whole call (fi_close's contract), so no reference is taken.
        match unsafe { Obj::<CqObj>::get(cq.cast()) } {
            Some(obj) => f(&obj.core.0),
            None => scode(-(libc::EINVAL)),
        }
    })
}

unsafe extern "C" fn read(cq: *mut fi::fid_cq, buf: *mut c_void, count: usize) -> isize {
    with_cq(cq, |cq| cq.read(buf, count, std::ptr::null_mut()))
}

unsafe extern "C" fn readfrom(cq: *mut fi::fid_cq, buf: *mut c_void, count: usize, src: *mut fi::fi_addr_t) -> isize {
    with_cq(cq, |cq| cq.read(buf, count, src))
}

/// `fi_cq_signal`: a thread blocked in `fi_cq_sread` on this CQ (or the next
/// one to block) returns `-FI_ECANCELED` once it finds nothing to read.
unsafe extern "C" fn signal(cq: *mut fi::fid_cq) -> c_int {
    with_cq(cq, |cq| {
        cq.signaled.store(true, Ordering::Release);
        if let Some(w) = &cq.wait {
            w.poke(); // wakes the sleeper
        }
        0
    }) as c_int
}

unsafe extern "C" fn readerr(cq: *mut fi::fid_cq, buf: *mut fi::fi_cq_err_entry, _flags: u64) -> isize {
    with_cq(cq, |cq| cq.readerr(buf))
}

unsafe extern "C" fn sread(
    cq: *mut fi::fid_cq,
    buf: *mut c_void,
    count: usize,
    _cond: *const c_void,
    timeout: c_int,
) -> isize {
    with_cq(cq, |cq| cq.sread(buf, count, std::ptr::null_mut(), timeout))
}

unsafe extern "C" fn sreadfrom(
    cq: *mut fi::fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut fi::fi_addr_t,
    _cond: *const c_void,
    timeout: c_int,
) -> isize {
    with_cq(cq, |cq| cq.sread(buf, count, src, timeout))
}

/// libfabric's text for `-err` (copied into `buf` when one is given).
pub(crate) fn error_text(err: c_int, buf: *mut c_char, len: usize) -> *const c_char {
    // SAFETY: fi_strerror returns a static string for any number.
    let text = unsafe { fi::fi_strerror(err) };
    if buf.is_null() || len == 0 || text.is_null() {
        return text;
    }
    // SAFETY: a NUL-terminated static string.
    let bytes = unsafe { std::ffi::CStr::from_ptr(text) }.to_bytes();
    let n = bytes.len().min(len - 1);
    // SAFETY: `buf` holds `len` > n bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
    buf
}

unsafe extern "C" fn strerror(
    _cq: *mut fi::fid_cq,
    prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    guard(std::ptr::null(), || error_text(prov_errno, buf, len))
}

unsafe extern "C" fn control(fid: *mut fi::fid, command: c_int, arg: *mut c_void) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes the application's fid.
        let Some(cq) = (unsafe { get(fid) }) else {
            return -(libc::EINVAL);
        };
        Wait::control(cq.wait.as_ref(), command, arg)
    })
}

/// `fi_trywait` on the fabric: 0 when every CQ, counter, EQ or wait set in
/// `fids` may be blocked on, `-FI_EAGAIN` when one has something to read
/// first (a counter: when its counts changed since its wait object was
/// last reset by a read, wait or poll).
pub(crate) unsafe extern "C" fn trywait(_fabric: *mut fi::fid_fabric, fids: *mut *mut fi::fid, count: c_int) -> c_int {
    guard(PANIC, || {
        if fids.is_null() || count < 0 {
            return -(libc::EINVAL);
        }
        for i in 0..count as usize {
            // SAFETY: the caller's array holds `count` fids.
            let fid = unsafe { *fids.add(i) };
            // SAFETY: a live fid of the application's.
            match unsafe { crate::wait::try_wait(fid) } {
                Some(true) => {}
                Some(false) => return -(libc::EAGAIN),
                None => return -(libc::EINVAL),
            }
        }
        0
    })
}

unsafe extern "C" fn close(fid: *mut fi::fid) -> c_int {
    entry::close_unless_used::<CqObj>(fid, |o| Arc::strong_count(&o.0) > 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use xfer_facade::{Flags, PeerAddr};

    #[test]
    fn truncation_reports_the_discarded_bytes_as_olen() {
        let mut c = Completion::new(
            7,
            Flags::RECV | Flags::TAGGED,
            Err(Error::Truncated { len: 4, olen: 10 }),
        );
        c.len = 4;
        c.src = PeerAddr(3);
        let e = Entry::from_xfer(&c);
        assert_eq!(e.error, Some((fi::FI_ETRUNC as i32, 6)));
        assert_eq!((e.len, e.src, e.context), (4, 3, 7));
        let c = Completion::new(0, Flags::default(), Err(Error::Canceled));
        assert_eq!(Entry::from_xfer(&c).error, Some((libc::ECANCELED, 0)));
    }

    #[test]
    fn an_entry_is_written_as_far_as_its_format_goes() {
        let e = Entry {
            context: 1,
            flags: 2,
            len: 3,
            buf: 4,
            data: 5,
            tag: 6,
            src: 7,
            error: None,
        };
        // fi_cq_tagged_entry's fields in order: op_context, flags, len, buf, data, tag.
        let fields = [1u64, 2, 3, 4, 5, 6];
        for format in [
            fi::FI_CQ_FORMAT_CONTEXT,
            fi::FI_CQ_FORMAT_MSG,
            fi::FI_CQ_FORMAT_DATA,
            fi::FI_CQ_FORMAT_TAGGED,
        ] {
            let words = entry_size(format) / 8;
            let mut mem = [u64::MAX; 16];
            let mut src = [0u64; 3];
            let mut out = Out {
                buf: mem.as_mut_ptr().cast(),
                size: entry_size(format),
                count: 2,
                src: src.as_mut_ptr(),
                n: 0,
                blocked: false,
            };
            assert!(out.put(&e) && out.put(&e), "room for two");
            assert!(!out.put(&e), "no third");
            for k in 0..2 {
                assert_eq!(mem[k * words..(k + 1) * words], fields[..words], "format {format}");
            }
            assert!(
                mem[2 * words..].iter().all(|&w| w == u64::MAX),
                "nothing past the entries"
            );
            assert_eq!(src, [7, 7, 0]);
        }
    }

    #[test]
    fn entry_formats_are_prefixes() {
        assert_eq!(entry_size(fi::FI_CQ_FORMAT_CONTEXT), 8);
        assert_eq!(entry_size(fi::FI_CQ_FORMAT_MSG), 24);
        assert_eq!(entry_size(fi::FI_CQ_FORMAT_DATA), 40);
        assert_eq!(entry_size(fi::FI_CQ_FORMAT_TAGGED), 48);
    }
}
