//! Accepting connections, and what happens at the descriptor limit.
//!
//! A process out of descriptors cannot accept: `accept4` fails with
//! `EMFILE` (or `ENFILE` system-wide) and leaves the connection in the
//! backlog, so the listening socket stays readable and every progress call
//! would try again, fail again and log again: a full core and a log growing
//! by hundreds of MiB a second. As servers do (libuv, nginx), the transport
//! keeps one descriptor in reserve (`/dev/null`). At the limit it closes
//! the reserve, accepts the waiting connections one at a time and closes
//! each at once (their side sees the connection refused instead of waiting
//! for its connect timeout), takes the reserve back, and takes the listener
//! out of its epoll set for a back-off that doubles from [`BACKOFF_MIN`] to
//! [`BACKOFF_MAX`] while the limit persists. The listener comes back at the
//! first progress after the back-off (a blocked `CompletionQueue::wait` and
//! the async layer's reactor wake at least every 50 ms); the back-off starts
//! again from the minimum once an accept succeeds. Each episode is counted
//! (`accept_paused`, `accept_shed`) and logged at most once a second.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use xfer_core::unstable::error::Error;
use xfer_core::unstable::sys::{Epoll, READABLE};

use crate::sys::Socket;

/// The first pause of the listener at the descriptor limit.
const BACKOFF_MIN: Duration = Duration::from_millis(10);
/// The longest pause: a freed descriptor is used within this.
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Waiting connections accepted and closed in one episode at most, so a
/// flood of connection attempts cannot hold a progress call.
const SHED_MAX: usize = 64;
/// Connections accepted by one progress call at most.
const ACCEPT_MAX: usize = 16;

/// The listener's state at the descriptor limit.
#[derive(Debug)]
pub struct Acceptor {
    /// Closed to make room for accepting (and closing) a connection at
    /// the limit; `None` when it could not be taken back.
    reserve: Option<File>,
    /// While set, the listener is out of the epoll set until then.
    paused_until: Option<Instant>,
    /// The next pause.
    backoff: Duration,
    /// Times the listener was paused at the limit.
    pub paused: u64,
    /// Connections accepted and closed at once for want of a descriptor.
    pub shed: u64,
}

/// The reserve descriptor, or `None` (logged) when none is left.
fn open_reserve() -> Option<File> {
    match File::open("/dev/null") {
        Ok(f) => Some(f),
        Err(e) => {
            xfer_core::warn_limited!(error = %e, "no descriptor to keep in reserve for the descriptor limit");
            None
        }
    }
}

/// Whether an `accept4` error means the process or system is out of
/// descriptors (or of the memory for one).
fn out_of_descriptors(e: &Error) -> bool {
    matches!(e, Error::Os(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM))
}

impl Acceptor {
    /// An acceptor holding its reserve descriptor.
    pub fn new() -> Acceptor {
        Acceptor {
            reserve: open_reserve(),
            paused_until: None,
            backoff: BACKOFF_MIN,
            paused: 0,
            shed: 0,
        }
    }

    /// Accepts what waits on `listener`, at most [`ACCEPT_MAX`], giving each
    /// to `adopt`; at the descriptor limit sheds the waiting ones and takes
    /// the listener (token `token`) out of `epoll` for the back-off.
    pub fn accept(&mut self, listener: &Socket, epoll: &Epoll, mut adopt: impl FnMut(Socket)) {
        for _ in 0..ACCEPT_MAX {
            match listener.accept() {
                Ok(Some(sock)) => {
                    self.backoff = BACKOFF_MIN;
                    adopt(sock);
                }
                Ok(None) => return,
                Err(e) if out_of_descriptors(&e) => return self.at_limit(listener, epoll, e),
                Err(e) => {
                    xfer_core::warn_limited!(error = %e, "tcp: accept failed");
                    return;
                }
            }
        }
    }

    fn at_limit(&mut self, listener: &Socket, epoll: &Epoll, cause: Error) {
        let mut shed = 0;
        if self.reserve.take().is_some() {
            while shed < SHED_MAX {
                match listener.accept() {
                    // Dropped at once: the descriptor is free again.
                    Ok(Some(_sock)) => shed += 1,
                    _ => break,
                }
            }
            self.reserve = open_reserve();
        }
        self.shed += shed as u64;
        self.paused += 1;
        let pause = self.backoff;
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        self.paused_until = Some(Instant::now() + pause);
        if let Err(e) = epoll.delete(listener.as_raw_fd()) {
            xfer_core::warn_limited!(error = %e, "tcp: pausing the listener");
        }
        xfer_core::warn_limited!(
            error = %cause,
            refused = shed,
            pause_ms = pause.as_millis() as u64,
            "tcp: out of descriptors: waiting connections refused, listener paused"
        );
    }

    /// Puts a paused listener back into `epoll` (as `token`) once its
    /// back-off has passed.
    #[inline]
    pub fn resume(&mut self, listener: &Socket, epoll: &Epoll, token: u64) {
        let Some(until) = self.paused_until else { return };
        if Instant::now() < until {
            return;
        }
        if self.reserve.is_none() {
            self.reserve = open_reserve();
        }
        match epoll.add(listener.as_raw_fd(), READABLE, token) {
            Ok(()) => self.paused_until = None,
            Err(e) => {
                // Out of memory for the epoll entry, say: try after another back-off.
                xfer_core::warn_limited!(error = %e, "tcp: resuming the listener");
                self.paused_until = Some(Instant::now() + self.backoff);
            }
        }
    }
}
