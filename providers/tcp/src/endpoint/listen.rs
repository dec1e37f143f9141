//! Accepting connections, and what happens at the descriptor limit.
//!
//! A process out of descriptors cannot accept: `accept4` fails with
//! `EMFILE` (or `ENFILE` system-wide) and leaves the connection in the
//! backlog, so the listening socket stays readable and every progress call
//! would try again, fail again and log again: a full core and a log growing
//! by hundreds of MiB a second. As servers do (libuv, nginx), the endpoint
//! keeps one descriptor in reserve (`/dev/null`). At the limit it closes
//! the reserve, accepts the waiting connections one at a time and closes
//! each at once (their side sees the connection refused instead of waiting
//! for its connect timeout), takes the reserve back, and takes the listener
//! out of its epoll set for a back-off that doubles from [`BACKOFF_MIN`] to
//! [`BACKOFF_MAX`] while the limit persists. The listener comes back at the
//! first `epoll_wait` after the back-off (a blocked `CompletionQueue::wait`
//! and the async layer's reactor wake at least every 50 ms); the back-off
//! starts again from the minimum once an accept succeeds. Each episode is
//! counted (`accept_paused`, `accept_shed`) and logged at most once a
//! second.

use std::fs::File;

use super::*;

/// The first pause of the listener at the descriptor limit.
const BACKOFF_MIN: Duration = Duration::from_millis(10);
/// The longest pause: a freed descriptor is used within this.
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Waiting connections accepted and closed in one episode at most, so a
/// flood of connection attempts cannot hold a progress call.
const SHED_MAX: usize = 64;

/// The listener's state at the descriptor limit.
#[derive(Debug)]
pub(super) struct Acceptor {
    /// Closed to make room for accepting (and closing) a connection at
    /// the limit; `None` when it could not be taken back.
    reserve: Option<File>,
    /// While set, the listener is out of the epoll set until then.
    paused_until: Option<Instant>,
    /// The next pause.
    backoff: Duration,
    /// Times the listener was paused at the limit.
    pub(super) paused: u64,
    /// Connections accepted and closed at once for want of a descriptor.
    pub(super) shed: u64,
}

impl Acceptor {
    /// An acceptor holding its reserve descriptor.
    pub(super) fn new() -> Acceptor {
        Acceptor {
            reserve: open_reserve(),
            paused_until: None,
            backoff: BACKOFF_MIN,
            paused: 0,
            shed: 0,
        }
    }

    /// Whether the listener is paused (out of the epoll set).
    #[inline]
    pub(super) fn is_paused(&self) -> bool {
        self.paused_until.is_some()
    }
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

impl TcpEndpoint {
    /// Accepts every waiting connection; at the descriptor limit sheds the
    /// waiting ones and pauses the listener.
    pub(super) fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok(Some(sock)) => {
                    self.acceptor.backoff = BACKOFF_MIN;
                    self.adopt(sock);
                }
                Ok(None) => return,
                Err(e) if out_of_descriptors(&e) => return self.at_descriptor_limit(e),
                Err(e) => {
                    xfer_core::warn_limited!(error = %e, "accept failed");
                    return;
                }
            }
        }
    }

    /// A connection accepted: watched, waiting for its Hello.
    fn adopt(&mut self, sock: Socket) {
        if let Err(e) = sock.tune(&self.tcp, None) {
            xfer_core::warn_limited!(error = %e, "tuning accepted socket");
        }
        let serial = self.next_serial();
        let fd = sock.as_raw_fd();
        let id = self
            .conns
            .insert(Conn::new(sock, Dir::In, Link::accept(), serial, None));
        if let Err(e) = self.epoll.add(fd, READABLE, id as u64) {
            xfer_core::warn_limited!(error = %e, "watching accepted socket");
            self.conns.remove(id);
        }
    }

    /// `accept4` failed with `cause`, out of descriptors: the waiting
    /// connections are accepted and closed with the reserve's room, and
    /// the listener leaves the epoll set for the back-off.
    fn at_descriptor_limit(&mut self, cause: Error) {
        let a = &mut self.acceptor;
        let mut shed = 0;
        if a.reserve.take().is_some() {
            while shed < SHED_MAX {
                match self.listener.accept() {
                    // Dropped at once: the descriptor is free again.
                    Ok(Some(_sock)) => shed += 1,
                    _ => break,
                }
            }
            a.reserve = open_reserve();
        }
        a.shed += shed as u64;
        a.paused += 1;
        let pause = a.backoff;
        a.backoff = (a.backoff * 2).min(BACKOFF_MAX);
        a.paused_until = Some(Instant::now() + pause);
        if let Err(e) = self.epoll.delete(self.listener.as_raw_fd()) {
            xfer_core::warn_limited!(error = %e, "pausing the listener");
        }
        xfer_core::warn_limited!(
            error = %cause,
            refused = shed,
            pause_ms = pause.as_millis() as u64,
            "out of descriptors: waiting connections refused, listener paused"
        );
    }

    /// Puts a paused listener back into the epoll set once its back-off
    /// has passed. Called before each `epoll_wait` while paused.
    pub(super) fn resume_listener(&mut self) {
        let Some(until) = self.acceptor.paused_until else {
            return;
        };
        if Instant::now() < until {
            return;
        }
        if self.acceptor.reserve.is_none() {
            self.acceptor.reserve = open_reserve();
        }
        match self.epoll.add(self.listener.as_raw_fd(), READABLE, LISTENER) {
            Ok(()) => self.acceptor.paused_until = None,
            Err(e) => {
                // Out of memory for the epoll entry, say: try after another back-off.
                xfer_core::warn_limited!(error = %e, "resuming the listener");
                self.acceptor.paused_until = Some(Instant::now() + self.acceptor.backoff);
            }
        }
    }
}
