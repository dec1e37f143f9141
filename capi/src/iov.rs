//! Scatter-gather messages: `xfer_ep_sendv` / `tsendv` / `recvv` / `trecvv`
//! (`fi_sendv`, `fi_tsendv`, `fi_recvv`, `fi_trecvv`, without `desc`).
//!
//! The core moves one contiguous buffer per operation. A vector of one
//! element is posted as that buffer (no copy, the usual buffer contract).
//! A longer vector goes through a library-owned bounce buffer: a send
//! gathers its elements into it when it is posted (the caller's memory is
//! free at once, like an inject, but the send still completes as usual); a
//! receive lands in it and is scattered into the caller's elements, in
//! order, when its completion is polled (`xfer_cq_poll`/`xfer_cq_wait`),
//! so the elements follow the receive-buffer contract until then.
//!
//! A receive's bounce buffer is found again at poll time by its address:
//! [`pending`] maps it to the caller's elements until the completion is
//! polled. Completions discarded unpolled (a CQ closed with entries in it)
//! leave their entry behind (a few words per receive, never touched again).

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::{Mutex, OnceLock};

use xfer_facade::{Buffer, Completion, Flags};

use crate::ep::{check_buffer, ep_of, post_recv, post_send, raw_buffer, xfer_ep_t};
use crate::error::{guard, invalid, Fail};
use crate::xfer_addr_t;

/// The most elements one vector call takes (`iov_limit`).
pub const XFER_IOV_LIMIT: usize = 16;

/// One element of a scatter-gather list: `len` bytes at `base`. The same
/// layout as `struct iovec`, so an `iovec` array may be passed cast.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct xfer_iov_t {
    /// Start of the element; may be NULL when `len` is 0.
    pub iov_base: *mut c_void,
    /// Its length in bytes.
    pub iov_len: usize,
}

/// A receive's elements, as addresses (the map is shared between threads).
struct Scatter {
    /// `(address, length)` of each element, in order.
    parts: Vec<(usize, usize)>,
    /// The bounce buffer's length (their sum), checked at poll time.
    total: usize,
}

/// Receives posted through a bounce buffer, by the buffer's address.
fn pending() -> &'static Mutex<HashMap<usize, Scatter>> {
    static PENDING: OnceLock<Mutex<HashMap<usize, Scatter>>> = OnceLock::new();
    PENDING.get_or_init(Default::default)
}

/// Checks a caller's vector and returns it with its total length.
///
/// # Safety
/// `iov` must be NULL or readable for `count` elements during the call.
unsafe fn elements<'a>(iov: *const xfer_iov_t, count: usize) -> Result<(&'a [xfer_iov_t], usize), Fail> {
    if count > XFER_IOV_LIMIT {
        return Err(invalid("iov: more elements than XFER_IOV_LIMIT"));
    }
    if count == 0 {
        return Ok((&[], 0));
    }
    if iov.is_null() {
        return Err(invalid("iov: the vector is NULL but count is not 0"));
    }
    // SAFETY: non-null and readable for `count` elements by contract.
    let v = unsafe { std::slice::from_raw_parts(iov, count) };
    let mut total = 0usize;
    for e in v {
        check_buffer(e.iov_base, e.iov_len)?;
        total = total
            .checked_add(e.iov_len)
            .filter(|&t| t <= isize::MAX as usize)
            .ok_or_else(|| invalid("iov: total length exceeds isize::MAX"))?;
    }
    Ok((v, total))
}

/// The buffer a vector send posts: the one element itself, or a copy of
/// all of them.
///
/// # Safety
/// Every element must be readable; a single element must stay valid and
/// unmodified until the completion (the buffer contract).
unsafe fn gather(v: &[xfer_iov_t], total: usize) -> Result<Buffer, Fail> {
    match v {
        // SAFETY: forwarded from the caller's contract.
        [] => unsafe { raw_buffer(std::ptr::null(), 0) },
        // SAFETY: forwarded from the caller's contract.
        [one] => unsafe { raw_buffer(one.iov_base, one.iov_len) },
        _ => {
            let mut bytes = Vec::with_capacity(total);
            for e in v.iter().filter(|e| e.iov_len > 0) {
                // SAFETY: checked non-null (len > 0) and readable for
                // `iov_len` bytes by contract.
                bytes.extend_from_slice(unsafe { std::slice::from_raw_parts(e.iov_base.cast::<u8>(), e.iov_len) });
            }
            Ok(bytes.into())
        }
    }
}

/// Body of the vector sends.
///
/// # Safety
/// As `xfer_ep_sendv`.
unsafe fn sendv(
    ep: *mut xfer_ep_t,
    iov: *const xfer_iov_t,
    count: usize,
    dest: xfer_addr_t,
    tag: Option<u64>,
    context: *mut c_void,
) -> Result<c_int, Fail> {
    let e = ep_of(ep)?;
    // SAFETY: forwarded from the caller's contract.
    let buf = unsafe {
        let (v, total) = elements(iov, count)?;
        gather(v, total)?
    };
    post_send(&e, buf, dest, tag, None, context, true)
}

/// Body of the vector receives.
///
/// # Safety
/// As `xfer_ep_recvv`.
unsafe fn recvv(
    ep: *mut xfer_ep_t,
    iov: *const xfer_iov_t,
    count: usize,
    src: xfer_addr_t,
    tagged: Option<(u64, u64)>,
    context: *mut c_void,
) -> Result<c_int, Fail> {
    let e = ep_of(ep)?;
    // SAFETY: forwarded from the caller's contract.
    let (v, total) = unsafe { elements(iov, count)? };
    if v.len() <= 1 || total == 0 {
        let (base, len) = v.first().map_or((std::ptr::null_mut(), 0), |e| (e.iov_base, e.iov_len));
        // SAFETY: forwarded from the caller's contract (a zero-length
        // receive writes nothing, whatever the elements are).
        let buf = unsafe { raw_buffer(base, if total == 0 { 0 } else { len })? };
        return post_recv(&e, buf, src, tagged, context);
    }
    let bounce = vec![0u8; total];
    let key = bounce.as_ptr() as usize;
    let parts = v.iter().map(|e| (e.iov_base as usize, e.iov_len)).collect();
    lock().insert(key, Scatter { parts, total });
    let posted = post_recv(&e, bounce.into(), src, tagged, context);
    if posted.is_err() {
        // Refused: the bounce buffer is gone, and so must its entry be.
        lock().remove(&key);
    }
    posted
}

fn lock() -> std::sync::MutexGuard<'static, HashMap<usize, Scatter>> {
    // A panic while holding the lock leaves the map consistent (every
    // change is one insert or remove), so a poisoned lock is still usable.
    pending().lock().unwrap_or_else(|p| p.into_inner())
}

/// Called for every completion polled through the C ABI before it is
/// dropped: a vector receive's bounce buffer is scattered into the caller's
/// elements (`c.len` bytes: what was received).
pub(crate) fn finish(c: &Completion) {
    let Some(bounce) = c.buf.as_deref() else {
        return;
    };
    if !c.flags.contains(Flags::RECV) {
        return; // a vector send's copy: nothing to give back
    }
    let Some(s) = lock().remove(&(bounce.as_ptr() as usize)) else {
        return;
    };
    if s.total != bounce.len() {
        xfer_facade::error_limited!("vector receive: bounce buffer of an unexpected length; data dropped");
        return;
    }
    let mut left = &bounce[..c.len.min(bounce.len())];
    for (addr, len) in s.parts {
        if left.is_empty() {
            break;
        }
        let n = len.min(left.len());
        // SAFETY: the caller promised each element valid for writing `len`
        // bytes until this completion is polled (xfer_ep_recvv's contract),
        // and n <= len; the bounce buffer is ours and does not overlap it.
        unsafe { std::ptr::copy_nonoverlapping(left.as_ptr(), addr as *mut u8, n) };
        left = &left[n..];
    }
}

/// Sends the `count` elements of `iov`, concatenated, as one untagged
/// message to `dest` (`fi_sendv`). One element is sent from the caller's
/// memory, which must then stay untouched until the completion (as
/// `xfer_ep_send`); two or more are copied during the call and may be
/// reused at once. The completion (`XFER_SEND | XFER_MSG`, `len` = the
/// total) returns `context` either way.
///
/// Returns as `xfer_ep_send`, and `XFER_EINVAL` when `count` exceeds
/// `XFER_IOV_LIMIT`, `iov` is NULL with a non-zero `count`, an element is
/// NULL with a non-zero length, or the total exceeds `PTRDIFF_MAX`. `iov`
/// itself is read during the call only.
///
/// # Safety
/// `iov` must be NULL or readable for `count` elements, each readable for
/// its length; with one element, that memory must stay valid and
/// unmodified until the completion is polled or the endpoint is closed.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_sendv(
    ep: *mut xfer_ep_t,
    iov: *const xfer_iov_t,
    count: usize,
    dest: xfer_addr_t,
    context: *mut c_void,
) -> c_int {
    // SAFETY: forwarded from this function's contract.
    guard("xfer_ep_sendv", || unsafe {
        sendv(ep, iov, count, dest, None, context)
    })
}

/// Like `xfer_ep_sendv`, tagged `tag` (`fi_tsendv`).
///
/// # Safety
/// As `xfer_ep_sendv`.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_tsendv(
    ep: *mut xfer_ep_t,
    iov: *const xfer_iov_t,
    count: usize,
    dest: xfer_addr_t,
    tag: u64,
    context: *mut c_void,
) -> c_int {
    // SAFETY: forwarded from this function's contract.
    guard("xfer_ep_tsendv", || unsafe {
        sendv(ep, iov, count, dest, Some(tag), context)
    })
}

/// Posts a receive of an untagged message from `src` into the `count`
/// elements of `iov`, filled in order (`fi_recvv`). The completion is
/// `xfer_ep_recv`'s, with `len` the bytes received in all; a message longer
/// than the elements' total fills them and completes with `XFER_ETRUNC`.
/// With two or more elements the message lands in a library buffer and is
/// copied into the elements when the completion is polled
/// (`xfer_cq_poll`/`xfer_cq_wait`).
///
/// Returns as `xfer_ep_recv`, and `XFER_EINVAL` as `xfer_ep_sendv`. `iov`
/// itself is read during the call only; `xfer_ep_cancel(context)` cancels
/// it like any receive.
///
/// # Safety
/// `iov` must be NULL or readable for `count` elements; each element must
/// be valid for writing its length and must not be read, modified or freed
/// until the completion is polled or the endpoint is closed.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_recvv(
    ep: *mut xfer_ep_t,
    iov: *const xfer_iov_t,
    count: usize,
    src: xfer_addr_t,
    context: *mut c_void,
) -> c_int {
    // SAFETY: forwarded from this function's contract.
    guard("xfer_ep_recvv", || unsafe { recvv(ep, iov, count, src, None, context) })
}

/// Like `xfer_ep_recvv`, for a message whose tag equals `tag` in every bit
/// not set in `ignore` (`fi_trecvv`).
///
/// # Safety
/// As `xfer_ep_recvv`.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_trecvv(
    ep: *mut xfer_ep_t,
    iov: *const xfer_iov_t,
    count: usize,
    src: xfer_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> c_int {
    // SAFETY: forwarded from this function's contract.
    guard("xfer_ep_trecvv", || unsafe {
        recvv(ep, iov, count, src, Some((tag, ignore)), context)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iov_has_the_layout_of_struct_iovec() {
        assert_eq!(std::mem::size_of::<xfer_iov_t>(), std::mem::size_of::<libc::iovec>());
        assert_eq!(
            std::mem::offset_of!(xfer_iov_t, iov_len),
            std::mem::offset_of!(libc::iovec, iov_len)
        );
    }

    #[test]
    fn vectors_are_checked() {
        let mut a = [0u8; 4];
        let ok = [xfer_iov_t {
            iov_base: a.as_mut_ptr().cast(),
            iov_len: 4,
        }];
        let null = [xfer_iov_t {
            iov_base: std::ptr::null_mut(),
            iov_len: 1,
        }];
        // SAFETY: the vectors are readable for the counts given; NULL is
        // refused before it is read, and so is a count over the limit.
        unsafe {
            assert_eq!(elements(ok.as_ptr(), 1).map(|(_, t)| t), Ok(4));
            assert_eq!(elements(std::ptr::null(), 0).map(|(_, t)| t), Ok(0));
            assert!(elements(std::ptr::null(), 1).is_err());
            assert!(elements(null.as_ptr(), 1).is_err());
            assert!(elements(std::ptr::null(), XFER_IOV_LIMIT + 1).is_err());
        }
    }
}
