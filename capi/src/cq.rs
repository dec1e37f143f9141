//! Completion queues: poll, blocking wait, a descriptor for event loops.

use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use xfer_facade::{Completion, CompletionQueue, CqAttr, Error};

use crate::domain::{domain_of, xfer_domain_t};
use crate::error::{guard, invalid, Fail, XFER_EBADF, XFER_SUCCESS};
use crate::handle::{self, Kind, Object};
use crate::{context_out, xfer_addr_t};

/// A message (untagged) operation (`FI_MSG`).
pub const XFER_MSG: u64 = 1u64 << 1;
/// An RMA operation (`FI_RMA`).
pub const XFER_RMA: u64 = 1u64 << 2;
/// A tagged operation (`FI_TAGGED`).
pub const XFER_TAGGED: u64 = 1u64 << 3;
/// An RMA read (`FI_READ`).
pub const XFER_READ: u64 = 1u64 << 8;
/// An RMA write (`FI_WRITE`).
pub const XFER_WRITE: u64 = 1u64 << 9;
/// A receive (`FI_RECV`).
pub const XFER_RECV: u64 = 1u64 << 10;
/// A send (`FI_SEND`).
pub const XFER_SEND: u64 = 1u64 << 11;
/// The target side of a peer's RMA read (`FI_REMOTE_READ`): reported only
/// on an endpoint opened with `XFER_RMA_EVENTS`.
pub const XFER_REMOTE_READ: u64 = 1u64 << 12;
/// The target side of a peer's RMA write (`FI_REMOTE_WRITE`): an entry made
/// by `xfer_ep_writedata` (with `XFER_RMA | XFER_REMOTE_CQ_DATA`), or, on an
/// endpoint opened with `XFER_RMA_EVENTS`, by any write (`XFER_RMA`).
pub const XFER_REMOTE_WRITE: u64 = 1u64 << 13;
/// The entry carries the sender's immediate data in `data` (`FI_REMOTE_CQ_DATA`).
pub const XFER_REMOTE_CQ_DATA: u64 = 1u64 << 17;

/// A completion queue (opaque).
pub struct xfer_cq_t {
    _opaque: [u8; 0],
}

/// One completed operation, successful or not: `fi_cq_tagged_entry`
/// (same first six fields, same order) followed by the source address and
/// the error fields of `fi_cq_err_entry`, so errors need no second call.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct xfer_cq_entry_t {
    /// The `context` pointer given when the operation was posted.
    pub op_context: *mut c_void,
    /// What the operation was: `XFER_SEND` or `XFER_RECV`, with `XFER_MSG`
    /// or `XFER_TAGGED`; `XFER_RMA` with `XFER_WRITE` or `XFER_READ` (the
    /// initiator) or `XFER_REMOTE_WRITE` (the target of `xfer_ep_writedata`);
    /// plus `XFER_REMOTE_CQ_DATA` when `data` is valid.
    pub flags: u64,
    /// Bytes transferred. A send: the message length. A receive: the bytes
    /// written into the buffer (at most the buffer's length). RMA: the
    /// local buffer's length (the target of a write with data: bytes written).
    pub len: usize,
    /// Always NULL (receives land in the buffer that was posted).
    pub buf: *mut c_void,
    /// Immediate data from the sender, valid when `flags` has `XFER_REMOTE_CQ_DATA`.
    pub data: u64,
    /// The message's tag (tagged operations); at the target of RMA
    /// (`XFER_RMA_EVENTS` entries, writes with data), the remote key of the
    /// region accessed over TCP, else 0.
    pub tag: u64,
    /// A receive's sender, or `XFER_ADDR_UNSPEC` when the sender is not in
    /// the address vector (and for sends).
    pub src: xfer_addr_t,
    /// 0, or the negative `XFER_E*` code that ended the operation:
    /// `XFER_ETRUNC`, `XFER_ECANCELED`, `XFER_EHOSTUNREACH` (the peer's
    /// connection failed), `XFER_ECONNRESET` (the peer closed its end), ...
    pub err: c_int,
    /// Provider detail for an error: the OS errno behind a connection
    /// failure (`XFER_EHOSTUNREACH`), else 0.
    pub prov_errno: c_int,
    /// For `XFER_ETRUNC`: the bytes that did not fit (libfabric's overflow
    /// length); the sender's message was `len + olen` bytes. Else 0.
    pub olen: usize,
    /// For `XFER_EADDRNOTAVAIL` on an endpoint opened with
    /// `XFER_SOURCE_ERR`: the raw name of the sender, which is not in the
    /// address vector (insert it with `xfer_av_insert` to answer it); the
    /// message was received all the same. Owned by the CQ, valid until the
    /// next `xfer_cq_poll` or `xfer_cq_wait` on it (libfabric's `err_data`).
    /// Else NULL.
    pub err_data: *const c_void,
    /// The length of `err_data` in bytes, else 0.
    pub err_data_size: usize,
}

/// A CQ handle's object: the queue, and the names of unknown senders the
/// entries of its last poll point to (`err_data`).
pub(crate) struct CqObject {
    pub(crate) cq: CompletionQueue,
    names: Mutex<Vec<Box<[u8]>>>,
}

/// The OS errno behind an error, for the `prov_errno` fields; else 0.
pub(crate) fn prov_errno(e: &Error) -> c_int {
    match e {
        Error::PeerUnreachable { errno, .. } => *errno,
        Error::Os(errno) => *errno,
        _ => 0,
    }
}

impl xfer_cq_entry_t {
    /// The entry for `c`; an unknown sender's name is kept in `names` (a
    /// box each, so its address holds while more are added).
    fn from_completion(c: &Completion, names: &mut Vec<Box<[u8]>>) -> xfer_cq_entry_t {
        let (err_data, err_data_size) = match &c.result {
            Err(Error::UnknownSource(name)) => {
                names.push(name.as_bytes().into());
                let kept = names.last().map_or(&[][..], |b| &b[..]);
                (kept.as_ptr().cast::<c_void>(), kept.len())
            }
            _ => (std::ptr::null(), 0),
        };
        let (err, prov_errno, olen) = match &c.result {
            Ok(()) => (0, 0, 0),
            Err(e) => {
                let prov_errno = prov_errno(e);
                let olen = match e {
                    Error::Truncated { len, olen } => olen.saturating_sub(*len),
                    _ => 0,
                };
                (e.code(), prov_errno, olen)
            }
        };
        xfer_cq_entry_t {
            op_context: context_out(c.context),
            flags: c.flags.0,
            len: c.len,
            buf: std::ptr::null_mut(),
            data: c.data,
            tag: c.tag,
            src: c.received_from().0,
            err,
            prov_errno,
            olen,
            err_data,
            err_data_size,
        }
    }
}

/// Opens a completion queue in `domain` with room for `size` entries
/// preallocated (0: `XFER_CQ_SIZE`, default 4096; the queue grows past it
/// rather than lose a completion). Stores the handle in `*out` (NULL on
/// failure).
///
/// Returns 0; `XFER_EBADF` for a bad domain; `XFER_EINVAL` when `out` is NULL.
/// Ownership: the caller closes it with `xfer_cq_close`, after closing the
/// endpoints bound to it. Thread-safe.
///
/// # Safety
/// `out` must be NULL or point to writable memory for one pointer.
#[no_mangle]
pub unsafe extern "C" fn xfer_cq_open(domain: *mut xfer_domain_t, size: usize, out: *mut *mut xfer_cq_t) -> c_int {
    guard("xfer_cq_open", || {
        if out.is_null() {
            return Err(invalid("xfer_cq_open: out is NULL"));
        }
        // SAFETY: `out` is non-null and valid for one pointer by contract.
        unsafe { out.write(std::ptr::null_mut()) };
        let d = domain_of(domain)?;
        let mut attr = CqAttr::from_env();
        if size > 0 {
            attr.size = size;
        }
        let cq = d.cq(&attr)?;
        let obj = CqObject {
            cq,
            names: Mutex::new(Vec::new()),
        };
        let h = handle::insert(Object::Cq(Arc::new(obj)), &[(domain as usize as u64, Kind::Domain)])?;
        // SAFETY: as above.
        unsafe { out.write(h as usize as *mut xfer_cq_t) };
        Ok(XFER_SUCCESS)
    })
}

/// Closes a completion queue. Completions still in it are discarded.
///
/// Returns 0; `XFER_EBADF` for a bad or closed handle; `XFER_EBUSY` (and the
/// queue stays open) while an endpoint bound to it is open. Thread-safe.
#[no_mangle]
pub extern "C" fn xfer_cq_close(cq: *mut xfer_cq_t) -> c_int {
    guard("xfer_cq_close", || {
        drop(handle::remove(cq as usize as u64, Kind::Cq)?);
        Ok(XFER_SUCCESS)
    })
}

pub(crate) fn cq_of(h: *mut xfer_cq_t) -> Result<Arc<CqObject>, Fail> {
    match handle::get(h as usize as u64, Kind::Cq)? {
        Object::Cq(q) => Ok(q),
        _ => Err(Fail(XFER_EBADF)),
    }
}

/// Completions converted per call into the core API; a stack array, so
/// polling allocates nothing.
const CHUNK: usize = 32;

/// Moves up to `count` completions into `entries`; the first batch waits up
/// to `timeout` when `wait` is set.
///
/// # Safety
/// `entries` must be valid for writing `count` entries.
unsafe fn drain(
    q: &CqObject,
    entries: *mut xfer_cq_entry_t,
    count: usize,
    wait: Option<Option<Duration>>,
) -> Result<c_int, Fail> {
    let cq = &q.cq;
    let mut names = Vec::new();
    let count = count.min(c_int::MAX as usize);
    let mut scratch: [Completion; CHUNK] = std::array::from_fn(|_| Completion::EMPTY);
    let mut done = 0usize;
    while done < count {
        let want = (count - done).min(CHUNK);
        let got = match wait {
            Some(timeout) if done == 0 => cq.wait(&mut scratch[..want], timeout),
            _ => cq.poll(&mut scratch[..want]),
        };
        let n = match got {
            Ok(n) => n,
            // Entries already moved out of the queue must reach the caller.
            Err(e) if done > 0 => {
                tracing::debug!(error = %e, "completion queue error after {done} entries; reporting those");
                break;
            }
            Err(e) => return Err(e.into()),
        };
        for (i, c) in scratch[..n].iter_mut().enumerate() {
            // SAFETY: done + i < count, and `entries` is valid for `count`
            // entries by contract; `write` does not read the (possibly
            // uninitialised) destination.
            unsafe {
                entries
                    .add(done + i)
                    .write(xfer_cq_entry_t::from_completion(c, &mut names))
            };
            crate::iov::finish(c);
            *c = Completion::EMPTY;
        }
        done += n;
        if n < want {
            break;
        }
    }
    if !names.is_empty() {
        // The names the earlier entries pointed to are given up now; the
        // boxes' contents do not move with them.
        *q.names.lock().unwrap_or_else(|p| p.into_inner()) = names;
    }
    Ok(done as c_int)
}

/// Progresses the endpoints bound to `cq`, then moves up to `count` ready
/// completions into `entries` (an array the caller owns). Never blocks.
///
/// Returns the number of entries written (0 when none is ready), or
/// `XFER_EBADF` for a bad handle, `XFER_EINVAL` when `entries` is NULL while
/// `count` is not 0. Errors of operations are entries with `err` set, not
/// return values. Thread-safe (callers serialise on the domain's lock);
/// polling is what moves data: a program that never polls makes no progress.
///
/// # Safety
/// `entries` must be NULL or point to writable memory for `count` entries.
#[no_mangle]
pub unsafe extern "C" fn xfer_cq_poll(cq: *mut xfer_cq_t, entries: *mut xfer_cq_entry_t, count: usize) -> c_int {
    guard("xfer_cq_poll", || {
        let q = cq_of(cq)?;
        if entries.is_null() && count > 0 {
            return Err(invalid("xfer_cq_poll: entries is NULL"));
        }
        // SAFETY: `entries` is valid for `count` entries by contract.
        unsafe { drain(&q, entries, count, None) }
    })
}

/// Like `xfer_cq_poll` but blocks until at least one completion is ready or
/// `timeout_ms` milliseconds pass (negative: wait forever), like
/// `fi_cq_sread`.
///
/// Returns the number of entries written (at least 1); `XFER_ETIMEDOUT`
/// when the time passed with nothing ready; `XFER_EBADF` for a bad handle;
/// `XFER_EINVAL` when `entries` is NULL or `count` is 0. Other threads may
/// post to the endpoints bound to `cq` while this call sleeps.
///
/// # Safety
/// `entries` must be NULL or point to writable memory for `count` entries.
#[no_mangle]
pub unsafe extern "C" fn xfer_cq_wait(
    cq: *mut xfer_cq_t,
    entries: *mut xfer_cq_entry_t,
    count: usize,
    timeout_ms: c_int,
) -> c_int {
    guard("xfer_cq_wait", || {
        let q = cq_of(cq)?;
        if entries.is_null() || count == 0 {
            return Err(invalid("xfer_cq_wait: needs room for at least one entry"));
        }
        let timeout = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
        // SAFETY: `entries` is valid for `count` entries by contract.
        unsafe { drain(&q, entries, count, Some(timeout)) }
    })
}

/// Stores in `*fd` a descriptor that becomes readable when an endpoint bound
/// to `cq` has work, for `poll(2)`/`epoll` loops. Call `xfer_cq_trywait`
/// before blocking on it and `xfer_cq_poll` when it fires.
///
/// The descriptor belongs to the queue: do not close or read it; it is
/// valid until `xfer_cq_close`. Returns 0; `XFER_EBADF`; `XFER_EINVAL` when
/// `fd` is NULL. Thread-safe.
///
/// # Safety
/// `fd` must be NULL or point to writable memory for one `int`.
#[no_mangle]
pub unsafe extern "C" fn xfer_cq_fd(cq: *mut xfer_cq_t, fd: *mut c_int) -> c_int {
    guard("xfer_cq_fd", || {
        let q = cq_of(cq)?;
        if fd.is_null() {
            return Err(invalid("xfer_cq_fd: fd is NULL"));
        }
        // SAFETY: `fd` is non-null and valid for one int by contract.
        unsafe { fd.write(q.cq.fd()) };
        Ok(XFER_SUCCESS)
    })
}

/// Prepares the bound endpoints to sleep (held-back sends written, events
/// armed), then tells whether it is safe to block on `xfer_cq_fd`: 0 when
/// nothing is ready, `XFER_EAGAIN` when a completion is ready (poll
/// instead), like `fi_trywait`. Data waiting in connections is not read: it
/// makes the descriptor readable. `XFER_EBADF` for a bad handle. Thread-safe.
#[no_mangle]
pub extern "C" fn xfer_cq_trywait(cq: *mut xfer_cq_t) -> c_int {
    guard("xfer_cq_trywait", || {
        cq_of(cq)?.cq.trywait()?;
        Ok(XFER_SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use xfer_facade::{Flags, PeerAddr};

    #[test]
    fn flag_constants_equal_the_rust_flags() {
        assert_eq!(XFER_MSG, Flags::MSG.0);
        assert_eq!(XFER_RMA, Flags::RMA.0);
        assert_eq!(XFER_TAGGED, Flags::TAGGED.0);
        assert_eq!(XFER_READ, Flags::READ.0);
        assert_eq!(XFER_WRITE, Flags::WRITE.0);
        assert_eq!(XFER_RECV, Flags::RECV.0);
        assert_eq!(XFER_SEND, Flags::SEND.0);
        assert_eq!(XFER_REMOTE_CQ_DATA, Flags::REMOTE_CQ_DATA.0);
        assert_eq!(XFER_REMOTE_READ, Flags::REMOTE_READ.0);
        assert_eq!(XFER_REMOTE_WRITE, Flags::REMOTE_WRITE.0);
    }

    #[test]
    fn entry_layout_extends_fi_cq_tagged_entry() {
        assert_eq!(std::mem::offset_of!(xfer_cq_entry_t, op_context), 0);
        assert_eq!(std::mem::offset_of!(xfer_cq_entry_t, flags), 8);
        assert_eq!(std::mem::offset_of!(xfer_cq_entry_t, len), 16);
        assert_eq!(std::mem::offset_of!(xfer_cq_entry_t, buf), 24);
        assert_eq!(std::mem::offset_of!(xfer_cq_entry_t, data), 32);
        assert_eq!(std::mem::offset_of!(xfer_cq_entry_t, tag), 40);
        assert_eq!(std::mem::offset_of!(xfer_cq_entry_t, err_data), 72);
        assert_eq!(std::mem::size_of::<xfer_cq_entry_t>(), 88);
    }

    #[test]
    fn truncation_reports_the_overflow_and_peer_errors_their_errno() {
        let mut c = Completion::new(
            0x1234,
            Flags::RECV | Flags::TAGGED,
            Err(Error::Truncated { len: 10, olen: 100 }),
        );
        c.len = 10;
        c.tag = 9;
        let mut names = Vec::new();
        let e = xfer_cq_entry_t::from_completion(&c, &mut names);
        assert_eq!((e.err, e.len, e.olen), (crate::error::XFER_ETRUNC, 10, 90));
        assert_eq!(e.op_context as usize, 0x1234);
        let dead = Completion::new(
            0,
            Flags::default(),
            Err(Error::PeerUnreachable {
                peer: PeerAddr(3),
                errno: libc::ECONNREFUSED,
            }),
        );
        let e = xfer_cq_entry_t::from_completion(&dead, &mut names);
        assert_eq!(
            (e.err, e.prov_errno),
            (crate::error::XFER_EHOSTUNREACH, libc::ECONNREFUSED)
        );
        assert!(names.is_empty() && e.err_data.is_null() && e.err_data_size == 0);
    }

    #[test]
    fn an_unknown_senders_name_is_kept_where_its_entry_points() {
        let mut names = Vec::new();
        let entries: Vec<xfer_cq_entry_t> = (1u8..=40)
            .map(|i| {
                let name = xfer_facade::Address::new(&[i; 20]).expect("name");
                let c = Completion::new(0, Flags::RECV, Err(Error::UnknownSource(Box::new(name))));
                xfer_cq_entry_t::from_completion(&c, &mut names)
            })
            .collect();
        // Later names did not move the earlier ones.
        for (i, e) in entries.iter().enumerate() {
            assert_eq!(e.err, crate::error::XFER_EADDRNOTAVAIL);
            // SAFETY: `names` holds what every entry points to.
            let got = unsafe { std::slice::from_raw_parts(e.err_data.cast::<u8>(), e.err_data_size) };
            assert_eq!(got, &[i as u8 + 1; 20][..]);
        }
    }
}
