//! The hot connection: the one that last had data. A busy-polling program
//! reads it directly on every progress call and asks epoll about the others
//! only every [`EPOLL_EVERY`] calls (docs/PERFORMANCE.md).
//!
//! Once it has stayed hot for [`DETACH_AFTER`] calls in a row it also leaves
//! the epoll set (it is "detached"): a socket on an epoll interest list costs
//! every arriving segment a wake-up walk of its wait queue, in the sender's
//! softirq, on the latency's critical path (measured: 4 % of the raw floor's
//! own 64 B latency, ARCHITECTURE.md decision 57). It comes back before the
//! program blocks ([`prepare_wait`](TcpEndpoint::attach_hot)), before it
//! needs write readiness, and when another connection becomes hot.

use super::*;

/// Progress calls that share one `epoll_wait` while a connection is hot.
pub(super) const EPOLL_EVERY: u32 = 8;
/// Progress calls in a row with the same hot connection before it leaves
/// the epoll set.
const DETACH_AFTER: u32 = 64;

impl TcpEndpoint {
    /// Makes connection `id` the hot one; the previous one, if detached,
    /// goes back into the epoll set.
    pub(super) fn set_hot(&mut self, cx: &mut Ctx<'_>, id: usize) {
        if self.hot != Some(id) {
            self.attach_hot(cx);
            self.hot = Some(id);
        }
    }

    /// Puts a detached hot connection back into the epoll set (readable,
    /// and writable when it has frames queued) and restarts its count.
    pub(super) fn attach_hot(&mut self, cx: &mut Ctx<'_>) {
        self.hot_streak = 0;
        if !std::mem::take(&mut self.detached) {
            return;
        }
        let Some(id) = self.hot else { return };
        let Some(conn) = self.conns.get(id) else { return };
        let events = if conn.want_write { READABLE | WRITABLE } else { READABLE };
        if let Err(e) = self.epoll.add(conn.sock.as_raw_fd(), events, id as u64) {
            self.fail_conn(cx, id, e);
        }
    }

    /// Reads the hot connection, if there is one that can be read; true when
    /// the caller may skip `epoll_wait` this time.
    #[inline]
    pub(super) fn poll_hot(&mut self, cx: &mut Ctx<'_>) -> bool {
        let Some(id) = self.hot else { return false };
        match self.conns.get(id) {
            Some(c) if !c.link.is_connecting() => {}
            _ => {
                self.hot = None;
                self.detached = false;
                return false;
            }
        }
        self.read_inbound(cx, id);
        if !self.detached {
            self.hot_streak += 1;
            if self.hot_streak >= DETACH_AFTER {
                self.detach_hot();
            }
        }
        self.spins += 1;
        self.spins < EPOLL_EVERY && self.writing == 0 && self.connecting == 0
    }

    /// Asks epoll which connections (and the listener) are ready and serves
    /// them; restarts the count of hot-only progress calls.
    pub(super) fn poll_ready(&mut self, cx: &mut Ctx<'_>) {
        self.spins = 0;
        self.unread = false;
        if self.acceptor.is_paused() {
            self.resume_listener();
        }
        let n = match self.epoll.wait(&mut self.events, 0) {
            Ok(n) => n,
            Err(e) => {
                xfer_core::error_limited!(error = %e, "epoll_wait failed");
                0
            }
        };
        for i in 0..n {
            let (tok, events) = (self.events[i].u64, self.events[i].events);
            if tok == LISTENER {
                self.accept_all();
            } else {
                self.on_event(cx, tok as usize, events);
            }
        }
        if self.connecting > 0 || self.admitting > 0 {
            self.check_connect_timeouts(cx);
        }
        if self.watch.due() {
            self.check_stalls(cx);
        }
    }

    /// Takes the hot connection out of the epoll set, unless it waits for
    /// write readiness (or is gone).
    fn detach_hot(&mut self) {
        let Some(conn) = self.hot.and_then(|id| self.conns.get(id)) else {
            return;
        };
        if conn.want_write || !conn.link.is_open() {
            return;
        }
        match self.epoll.delete(conn.sock.as_raw_fd()) {
            Ok(()) => self.detached = true,
            Err(e) => tracing::debug!(error = %e, "taking the hot connection out of epoll"),
        }
    }

    /// Whether connection `id` is out of the epoll set.
    pub(super) fn is_detached(&self, id: usize) -> bool {
        self.detached && self.hot == Some(id)
    }
}
