//! I/O vectors (`fi_sendv`, `fi_recvv`, `fi_writev`, `fi_readv`, `*msg`
//! with `iov_count` up to [`IOV_LIMIT`]). xfer's operations take one
//! buffer, so a send or write of several buffers is gathered into a copy,
//! and a receive or read into several goes into one staging buffer that the
//! completion router scatters into them before it reports the completion
//! ([`Scatters`]). One buffer goes straight through, as before.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use xfer_core::unstable::hash::FastMap;

use crate::entry::{lock, scode};
use crate::fi;

/// Elements of an I/O vector an operation takes (`tx_attr->iov_limit`,
/// `rx_attr->iov_limit`).
pub const IOV_LIMIT: usize = 4;

/// The bit of an xfer context that names a staged receive (a token of
/// [`Scatters`], not the application's context).
pub(crate) const SCATTER: u64 = 1 << 62;

/// A message's buffers as a libfabric call gave them.
pub(crate) enum Bufs {
    /// One buffer (or none) and its descriptor.
    One(*mut c_void, usize, *mut c_void),
    /// Two to [`IOV_LIMIT`] buffers (their descriptors are not needed:
    /// the data goes through a copy).
    Many(Vec<(*mut c_void, usize)>),
}

/// `bufs` as the fields of a send, receive or RMA: one buffer with its length
/// and descriptor and no segments, or no buffer, the total length and the
/// segments.
pub(crate) fn split(bufs: Bufs) -> (*mut c_void, usize, *mut c_void, Vec<(*mut c_void, usize)>) {
    match bufs {
        Bufs::One(b, l, d) => (b, l, d, Vec::new()),
        Bufs::Many(v) => {
            let total = v.iter().fold(0usize, |t, &(_, l)| t.saturating_add(l));
            (std::ptr::null_mut(), total, std::ptr::null_mut(), v)
        }
    }
}

/// The buffers of `count` I/O vector elements (`-FI_EINVAL` above
/// [`IOV_LIMIT`], or for a null element with a length).
///
/// # Safety
/// `iov` is null or valid for `count` elements, and so is `desc`.
pub(crate) unsafe fn iovs(iov: *const fi::iovec, desc: *mut *mut c_void, count: usize) -> Result<Bufs, isize> {
    if count == 0 {
        return Ok(Bufs::One(std::ptr::null_mut(), 0, std::ptr::null_mut()));
    }
    if iov.is_null() || count > IOV_LIMIT {
        return Err(scode(-(libc::EINVAL)));
    }
    // SAFETY: the caller's contract: `count` elements.
    let v = unsafe { std::slice::from_raw_parts(iov, count) };
    if v.iter().any(|e| e.iov_base.is_null() && e.iov_len > 0) {
        return Err(scode(-(libc::EINVAL)));
    }
    if count == 1 {
        // SAFETY: null or valid for one element.
        let d = unsafe { desc.as_ref() }.copied().unwrap_or(std::ptr::null_mut());
        return Ok(Bufs::One(v[0].iov_base, v[0].iov_len, d));
    }
    Ok(Bufs::Many(v.iter().map(|e| (e.iov_base, e.iov_len)).collect()))
}

/// The bytes of several buffers, one after another.
///
/// # Safety
/// Each buffer is valid for its length.
pub(crate) unsafe fn gather(segs: &[(*mut c_void, usize)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(segs.iter().map(|s| s.1).sum());
    for &(p, l) in segs {
        // SAFETY: the caller's contract.
        out.extend_from_slice(unsafe { crate::ep::bytes(p, l) });
    }
    out
}

/// A receive staged for several buffers.
struct Staged {
    /// The application's context (the completion reports it).
    app: u64,
    data: Box<[u8]>,
    /// The application's buffers, as addresses and lengths.
    segs: Vec<(usize, usize)>,
}

/// An endpoint's staged receives, by token.
#[derive(Default)]
pub(crate) struct Scatters {
    next: AtomicU64,
    live: Mutex<FastMap<u64, Staged>>,
}

impl Scatters {
    /// Stages a receive of `app` into `segs`: its token (the xfer context,
    /// [`SCATTER`] set) and the staging buffer xfer receives into, which
    /// stays put until [`finish`](Self::finish) or [`forget`](Self::forget).
    pub(crate) fn stage(&self, app: u64, segs: &[(*mut c_void, usize)]) -> (u64, *mut u8, usize) {
        let total = segs.iter().map(|s| s.1).sum();
        let mut data = vec![0u8; total].into_boxed_slice();
        let ptr = data.as_mut_ptr();
        let token = SCATTER | (self.next.fetch_add(1, Ordering::Relaxed) & (SCATTER - 1));
        let segs = segs.iter().map(|&(p, l)| (p as usize, l)).collect();
        lock(&self.live).insert(token, Staged { app, data, segs });
        (token, ptr, total)
    }

    /// Drops a staged receive that xfer refused.
    pub(crate) fn forget(&self, token: u64) {
        lock(&self.live).remove(&token);
    }

    /// The staged receive `token` completed with `len` bytes: copies them
    /// into the application's buffers; its context. `None` when `token`
    /// is not one (an application context that has the bit).
    ///
    /// # Safety
    /// The buffers given to [`stage`](Self::stage) are still valid
    /// (libfabric's contract: until the receive completes).
    pub(crate) unsafe fn finish(&self, token: u64, len: usize) -> Option<u64> {
        let s = lock(&self.live).remove(&token)?;
        let mut left = s.data.get(..len.min(s.data.len())).unwrap_or_default();
        for &(p, l) in &s.segs {
            let n = l.min(left.len());
            // SAFETY: the caller's contract: segment `p` holds `l` >= n bytes.
            unsafe { std::ptr::copy_nonoverlapping(left.as_ptr(), p as *mut u8, n) };
            left = &left[n..];
        }
        Some(s.app)
    }

    /// The tokens of staged receives of context `app` (for `fi_cancel`).
    pub(crate) fn tokens_of(&self, app: u64) -> Vec<u64> {
        lock(&self.live)
            .iter()
            .filter(|(_, s)| s.app == app)
            .map(|(&t, _)| t)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_staged_receive_is_scattered_in_order_and_truncated() {
        let (mut a, mut b) = ([0u8; 3], [0u8; 4]);
        let segs = [(a.as_mut_ptr().cast(), 3), (b.as_mut_ptr().cast(), 4)];
        let s = Scatters::default();
        let (token, buf, total) = s.stage(9, &segs);
        assert!(token & SCATTER != 0);
        assert_eq!(total, 7);
        // SAFETY: the staging buffer holds 7 bytes.
        unsafe { std::ptr::copy_nonoverlapping(b"abcdefg".as_ptr(), buf, 7) };
        assert_eq!(s.tokens_of(9), vec![token]);
        // SAFETY: `a` and `b` are alive.
        assert_eq!(unsafe { s.finish(token, 5) }, Some(9));
        assert_eq!((&a, &b), (b"abc", b"de\0\0"));
        // SAFETY: nothing staged under it any more.
        assert_eq!(unsafe { s.finish(token, 5) }, None);
    }
}
