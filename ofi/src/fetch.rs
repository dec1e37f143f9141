//! Atomics whose completion the router finishes: a fetching atomic
//! (`fi_fetch_atomic`, `fi_compare_atomic`) gets the element's old value in
//! xfer's completion (`Completion::data`), which the router stores into the
//! application's result buffer; an `fi_inject_atomic` gets no completion,
//! so the router counts it and drops it. Each is posted with a token
//! ([`FETCH`]) for its context, which the router turns back into the
//! application's.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use xfer_core::unstable::hash::FastMap;
use xfer_facade::Completion;

use crate::entry::lock;

/// The bit of an xfer context that names an atomic of [`Fetches`].
pub(crate) const FETCH: u64 = 1 << 59;

/// An atomic posted, waiting for its completion.
struct Pending {
    /// The context its completion reports (the application's, `SILENT`
    /// kept).
    app: u64,
    /// Where the fetched value goes (null: nothing fetched) and its size.
    result: usize,
    size: usize,
    /// An inject: no completion, whatever happens.
    quiet: bool,
}

/// What the router does with a finished atomic's completion.
pub(crate) struct Finished {
    /// The application's context.
    pub(crate) app: u64,
    /// Counted only, never reported (an inject).
    pub(crate) quiet: bool,
}

/// An endpoint's atomics waiting for their completion, by token.
#[derive(Default)]
pub(crate) struct Fetches {
    next: AtomicU64,
    live: Mutex<FastMap<u64, Pending>>,
}

impl Fetches {
    /// Starts an atomic reporting `app` that stores its fetched value of
    /// `size` bytes at `result` (null: fetches nothing), or, `quiet`,
    /// reports nothing: the token to post it with.
    pub(crate) fn start(&self, app: u64, result: *mut c_void, size: usize, quiet: bool) -> u64 {
        let token = FETCH | (self.next.fetch_add(1, Ordering::Relaxed) & (FETCH - 1));
        let p = Pending {
            app,
            result: result as usize,
            size,
            quiet,
        };
        lock(&self.live).insert(token, p);
        token
    }

    /// Drops an atomic that xfer refused.
    pub(crate) fn forget(&self, token: u64) {
        lock(&self.live).remove(&token);
    }

    /// The atomic `c.context` completed: stores its fetched value if it
    /// succeeded. `None` when the context is no token of ours (an
    /// application context that has the bit).
    ///
    /// # Safety
    /// The result buffer given to [`start`](Self::start) is still valid
    /// (libfabric's contract: until the atomic completes).
    pub(crate) unsafe fn finish(&self, c: &Completion) -> Option<Finished> {
        let p = lock(&self.live).remove(&c.context)?;
        if p.result != 0 && c.result.is_ok() {
            // A 32-bit element's value is the low half of `data`.
            let (wide, narrow) = (c.data.to_ne_bytes(), (c.data as u32).to_ne_bytes());
            let bytes: &[u8] = if p.size == 4 { &narrow } else { &wide };
            // SAFETY: the caller's contract: the buffer holds one element
            // of `size` bytes (4 or 8), maybe unaligned.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.result as *mut u8, bytes.len()) };
        }
        Some(Finished {
            app: p.app,
            quiet: p.quiet,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(context: u64, data: u64) -> Completion {
        let mut c = Completion::EMPTY;
        (c.context, c.data) = (context, data);
        c
    }

    #[test]
    fn a_fetched_value_is_stored_at_its_size_and_the_context_restored() {
        let f = Fetches::default();
        let (mut four, mut eight) = ([0u8; 4], [0u8; 8]);
        let t4 = f.start(7, four.as_mut_ptr().cast(), 4, false);
        let t8 = f.start(8, eight.as_mut_ptr().cast(), 8, false);
        assert!(t4 & FETCH != 0 && t4 != t8);
        // SAFETY: `four` and `eight` are alive.
        let got = unsafe { f.finish(&done(t4, 0xdead_beef_1234_5678)) }.unwrap();
        assert_eq!((got.app, got.quiet), (7, false));
        assert_eq!(u32::from_ne_bytes(four), 0x1234_5678, "the low half only");
        // SAFETY: as above.
        unsafe { f.finish(&done(t8, u64::MAX - 1)) }.unwrap();
        assert_eq!(u64::from_ne_bytes(eight), u64::MAX - 1);
        // SAFETY: nothing pending under it any more.
        assert!(unsafe { f.finish(&done(t4, 1)) }.is_none());
    }

    #[test]
    fn a_failed_fetch_leaves_the_buffer_and_an_inject_is_quiet() {
        let f = Fetches::default();
        let mut eight = [9u8; 8];
        let t = f.start(1, eight.as_mut_ptr().cast(), 8, false);
        let mut failed = done(t, 5);
        failed.result = Err(xfer_facade::Error::InvalidArgument("refused"));
        // SAFETY: `eight` is alive.
        unsafe { f.finish(&failed) }.unwrap();
        assert_eq!(eight, [9u8; 8]);
        let q = f.start(0, std::ptr::null_mut(), 0, true);
        // SAFETY: no buffer.
        assert!(unsafe { f.finish(&done(q, 5)) }.unwrap().quiet);
    }
}
