//! Multi-receive buffers (`FI_MULTI_RECV`, fi_msg(3)): one posted buffer
//! that takes message after message, each placed right after the previous
//! one and reported with its own completion (`buf` its place in the
//! buffer), until less than the endpoint's `FI_OPT_MIN_MULTI_RECV` is left;
//! the completion that leaves it so carries `FI_MULTI_RECV`: the buffer is
//! the application's again.
//!
//! xfer receives one message per posted receive, so the plug-in posts the
//! free rest of the buffer as an xfer receive, and the completion router
//! posts the next rest as it reports each message ([`Multis::advance`]).
//! Messages that arrive in between wait in xfer as unexpected ones, so
//! order and data are kept. The xfer context of those receives is a token
//! ([`MULTI`]) that maps back to the application's context.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use xfer_core::unstable::hash::FastMap;
use xfer_facade::PeerAddr;

use crate::entry::lock;

/// The bit of an xfer context that names a multi-receive buffer's current
/// receive (a token of [`Multis`]).
pub(crate) const MULTI: u64 = 1 << 61;

/// `FI_OPT_MIN_MULTI_RECV` until the application sets it: the free space
/// below which a buffer is released.
pub const DEFAULT_MIN: usize = 64;

/// One multi-receive buffer.
struct Multi {
    /// The application's context (every completion of the buffer reports it).
    app: u64,
    base: usize,
    len: usize,
    /// Bytes used by the messages so far.
    used: usize,
    src: PeerAddr,
}

/// The next receive to post into a buffer: where, how long, from whom.
pub(crate) struct Rest {
    pub(crate) buf: *mut u8,
    pub(crate) len: usize,
    pub(crate) src: PeerAddr,
}

/// What the router reports for one message of a buffer.
pub(crate) struct Step {
    /// The application's context.
    pub(crate) app: u64,
    /// Where the message landed.
    pub(crate) at: u64,
    /// The buffer is released (`FI_MULTI_RECV` on this completion).
    pub(crate) released: bool,
    /// The next receive to post, when the buffer is not released.
    pub(crate) rest: Option<Rest>,
}

/// An endpoint's multi-receive buffers, by token.
#[derive(Default)]
pub(crate) struct Multis {
    next: AtomicU64,
    live: Mutex<FastMap<u64, Multi>>,
}

impl Multis {
    /// Registers a buffer: its token and the first receive to post.
    pub(crate) fn start(&self, app: u64, buf: *mut c_void, len: usize, src: PeerAddr) -> (u64, Rest) {
        let token = MULTI | (self.next.fetch_add(1, Ordering::Relaxed) & (MULTI - 1));
        let m = Multi {
            app,
            base: buf as usize,
            len,
            used: 0,
            src,
        };
        lock(&self.live).insert(token, m);
        (
            token,
            Rest {
                buf: buf.cast(),
                len,
                src,
            },
        )
    }

    /// The buffer's current receive completed with `got` bytes (`ok`: it
    /// succeeded; a failure releases the buffer). `None` when `token` is
    /// not one (an application context that has the bit).
    pub(crate) fn advance(&self, token: u64, got: usize, ok: bool, min: usize) -> Option<Step> {
        let mut live = lock(&self.live);
        let m = live.get_mut(&token)?;
        let at = (m.base + m.used) as u64;
        m.used = m.used.saturating_add(got).min(m.len);
        let left = m.len - m.used;
        let app = m.app;
        if !ok || left < min.max(1) {
            live.remove(&token);
            return Some(Step {
                app,
                at,
                released: true,
                rest: None,
            });
        }
        let rest = Rest {
            buf: (m.base + m.used) as *mut u8,
            len: left,
            src: m.src,
        };
        Some(Step {
            app,
            at,
            released: false,
            rest: Some(rest),
        })
    }

    /// Releases a buffer whose next receive could not be posted.
    pub(crate) fn release(&self, token: u64) {
        lock(&self.live).remove(&token);
    }

    /// The tokens of buffers posted with context `app` (for `fi_cancel`).
    pub(crate) fn tokens_of(&self, app: u64) -> Vec<u64> {
        lock(&self.live)
            .iter()
            .filter(|(_, m)| m.app == app)
            .map(|(&t, _)| t)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_fill_the_buffer_until_less_than_the_minimum_is_left() {
        let mut buf = [0u8; 100];
        let m = Multis::default();
        let base = buf.as_mut_ptr();
        let (token, first) = m.start(7, base.cast(), 100, PeerAddr::UNSPEC);
        assert!(token & MULTI != 0 && first.len == 100);
        let s = m.advance(token, 40, true, 30).unwrap();
        assert_eq!((s.app, s.at, s.released), (7, base as u64, false));
        let rest = s.rest.unwrap();
        assert_eq!((rest.buf as usize - base as usize, rest.len), (40, 60));
        let s = m.advance(token, 40, true, 30).unwrap();
        assert_eq!((s.at - base as u64, s.released), (40, true), "20 left: below 30");
        assert!(m.advance(token, 1, true, 30).is_none(), "released");
        let (t2, _) = m.start(8, base.cast(), 100, PeerAddr::UNSPEC);
        assert_eq!(m.tokens_of(8), vec![t2]);
        assert!(m.advance(t2, 0, false, 30).unwrap().released, "a failure releases it");
    }
}
