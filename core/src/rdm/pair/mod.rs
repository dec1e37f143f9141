//! Two transports as one: a [`Pair`] serves each peer over its first
//! transport (shared memory) when the peer's address says it can be
//! reached that way, and over its second (TCP) otherwise, so one endpoint
//! of the RDM engine talks to peers on this host and elsewhere at once.
//! Matching stays in the engine above, so an any-source receive takes
//! messages from both transports in post order.
//!
//! A pair's address (what follows the provider id in an endpoint name):
//!
//! | bytes | what |
//! |---|---|
//! | 8 | the host identity: equal for two endpoints that can reach each other's first transport |
//! | 1 | `n`, the length of the first transport's address; 0 when the endpoint offers none |
//! | n | the first transport's address |
//! | rest | the second transport's address (at least one byte) |
//!
//! Connection ids are the two transports' own, interleaved: the first's
//! `c` is `2c`, the second's `2c + 1`. One epoll set holds both wait
//! descriptors, so the endpoint still has one.
//!
//! Polling: the first transport is the cheap, latency-critical one (a
//! shared-memory ring is a load; TCP's progress is an `epoll_wait` system
//! call), so `progress` polls it every call and the second every call while
//! the second reports events or is given frames, every [`SECOND_EVERY`]
//! calls once it is idle (every [`LISTENING_EVERY`] while it has no
//! connection and the first is carrying frames), and always on the call
//! after `prepare_wait` (a wake-up may be its work).

use std::fmt;
use std::io::IoSlice;
use std::os::fd::{AsRawFd, RawFd};

use crate::error::{Error, Result};
use crate::sys::{Epoll, READABLE};

use super::transport::{Cause, ConnId, DeviceAtomic, Event, Events, Exposed, Pulled, Refused, Remote, Transport};

mod reroute;
#[cfg(test)]
mod tests;

use reroute::Reroute;

/// Bytes of a host identity.
pub const HOST_LEN: usize = 8;

/// Progress calls per poll of an idle second transport: an idle TCP poll
/// (a system call) on every call doubled shared memory's 8-byte latency.
pub const SECOND_EVERY: u32 = 16;

/// Progress calls per poll of a second transport that has no connection
/// (only new peers can come there) while the first carried a frame within
/// as many calls: a same-host ping-pong then pays one system call in 256
/// busy polls, not one in 16, and a new peer is still accepted within a few
/// hundred polls of a busy endpoint (one that waits polls it every call).
pub const LISTENING_EVERY: u32 = 256;

/// A pair address, split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts<'a> {
    /// The host identity.
    pub host: [u8; HOST_LEN],
    /// The first transport's address, empty when the endpoint offers none.
    pub first: &'a [u8],
    /// The second transport's address.
    pub second: &'a [u8],
}

impl<'a> Parts<'a> {
    /// Splits `addr`; `None` when it is not a pair address (too short, a
    /// first part past its end, no second part). Never panics.
    pub fn parse(addr: &'a [u8]) -> Option<Parts<'a>> {
        let host = addr.get(..HOST_LEN)?.try_into().ok()?;
        let n = usize::from(*addr.get(HOST_LEN)?);
        let first = addr.get(HOST_LEN + 1..HOST_LEN + 1 + n)?;
        let second = addr.get(HOST_LEN + 1 + n..)?;
        if second.is_empty() {
            return None;
        }
        Some(Parts { host, first, second })
    }

    /// The address of an endpoint known only by its second transport's
    /// address `second`: no host identity (all zero bytes, which no host
    /// has), no first part, so it is always served by the second.
    pub fn second_only(second: &'a [u8]) -> Parts<'a> {
        Parts {
            host: [0; HOST_LEN],
            first: &[],
            second,
        }
    }

    /// The address these parts make.
    pub fn encode(&self) -> Vec<u8> {
        let mut a = Vec::with_capacity(HOST_LEN + 1 + self.first.len() + self.second.len());
        a.extend_from_slice(&self.host);
        a.push(self.first.len() as u8);
        a.extend_from_slice(self.first);
        a.extend_from_slice(self.second);
        a
    }
}

/// Which transport of a pair serves a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The first: the peer offers it and shares this endpoint's host identity.
    First,
    /// The second, and why not the first.
    Second(Why),
}

/// Why a peer is served by the second transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Its host identity differs from this endpoint's.
    OtherHost,
    /// It offers no first-transport address.
    NotOffered,
    /// This endpoint does not use its first transport.
    Off,
    /// Its first-transport address refused the connection (this OS error).
    Unreachable(i32),
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Why::OtherHost => f.write_str("different host identity"),
            Why::NotOffered => f.write_str("the peer offers no shared-memory address"),
            Why::Off => f.write_str("shared memory is off on this endpoint"),
            Why::Unreachable(e) => write!(
                f,
                "its shared-memory address refused the connection ({})",
                Error::Os(*e)
            ),
        }
    }
}

/// The route an endpoint at `host` (using its first transport or not)
/// takes to the peer whose address is `theirs`, before trying to connect.
pub fn route(host: &[u8; HOST_LEN], first_on: bool, theirs: &Parts<'_>) -> Route {
    if !first_on {
        Route::Second(Why::Off)
    } else if theirs.first.is_empty() {
        Route::Second(Why::NotOffered)
    } else if theirs.host != *host {
        Route::Second(Why::OtherHost)
    } else {
        Route::First
    }
}

/// The first transport's connection `c` as a pair's.
#[inline]
fn first_id(c: ConnId) -> ConnId {
    c << 1
}

/// The second transport's connection `c` as a pair's.
#[inline]
fn second_id(c: ConnId) -> ConnId {
    c << 1 | 1
}

/// Two transports under one endpoint, chosen per peer ([`route`]).
pub struct Pair<A, B> {
    first: A,
    second: B,
    name: &'static str,
    host: [u8; HOST_LEN],
    first_on: bool,
    addr: Vec<u8>,
    /// Both transports' wait descriptors.
    epoll: Epoll,
    /// Connects routed to the first transport that fell back to the second.
    fallbacks: u64,
    /// The first transport's connections not yet up, and the addresses it
    /// refused.
    reroute: Reroute,
    /// Progress calls since the second transport was last polled.
    skipped: u32,
    /// Progress calls since the first transport last reported an event
    /// (saturating).
    first_quiet: u32,
    /// The second transport reported events when last polled, was given a
    /// frame, or a wait was prepared since: poll it on the next call.
    second_due: bool,
}

impl<A: Transport, B: Transport> Pair<A, B> {
    /// Whether an idle second transport's turn may wait past
    /// [`SECOND_EVERY`]: it has no connection and the first carried a frame
    /// lately, up to [`LISTENING_EVERY`] calls.
    #[inline]
    fn second_may_wait(&self) -> bool {
        self.skipped < LISTENING_EVERY && self.first_quiet < LISTENING_EVERY && self.second.listening_only()
    }

    /// The pair of `first` and `second`, called `name`, on the host
    /// identified by `host`; `first_on` false makes it offer and use only
    /// `second` (its address carries no first part).
    pub fn new(first: A, second: B, name: &'static str, host: [u8; HOST_LEN], first_on: bool) -> Result<Pair<A, B>> {
        if first.address().len() > usize::from(u8::MAX) {
            return Err(Error::InvalidArgument("first transport's address over 255 bytes"));
        }
        let addr = Parts {
            host,
            first: if first_on { first.address() } else { &[] },
            second: second.address(),
        }
        .encode();
        let epoll = Epoll::new()?;
        for (fd, token) in [(first.wait_fd(), 0), (second.wait_fd(), 1)] {
            if fd >= 0 {
                epoll.add(fd, READABLE, token)?;
            }
        }
        Ok(Pair {
            first,
            second,
            name,
            host,
            first_on,
            addr,
            epoll,
            fallbacks: 0,
            reroute: Reroute::default(),
            skipped: 0,
            first_quiet: 0,
            second_due: true,
        })
    }

    /// The first transport.
    pub fn first(&self) -> &A {
        &self.first
    }

    /// The second transport.
    pub fn second(&self) -> &B {
        &self.second
    }

    /// The host identity.
    pub fn host(&self) -> &[u8; HOST_LEN] {
        &self.host
    }

    /// Whether connection `conn` is on the first transport.
    pub fn on_first(conn: ConnId) -> bool {
        conn & 1 == 0
    }

    /// Connects that were routed to the first transport and fell back to the
    /// second because it refused, at once or before the connection came up.
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks + self.reroute.rerouted()
    }
}

/// One transport's events as the pair's: its connection ids mapped. `FIRST`
/// is a constant so the map is a shift inlined into each call, not a call
/// through a function pointer on every frame.
struct Side<'e, const FIRST: bool> {
    events: &'e mut dyn Events,
    /// The first transport's connections not yet up (the first's side only).
    reroute: Option<&'e mut Reroute>,
    /// Events passed on.
    seen: usize,
}

impl<const FIRST: bool> Side<'_, FIRST> {
    /// This side's connection `conn` as the pair's.
    #[inline(always)]
    fn map(conn: ConnId) -> ConnId {
        if FIRST {
            first_id(conn)
        } else {
            second_id(conn)
        }
    }
}

impl<const FIRST: bool> Events for Side<'_, FIRST> {
    fn ready(&mut self, conn: ConnId) -> bool {
        self.events.ready(Self::map(conn))
    }

    fn event(&mut self, ev: Event<'_>) {
        self.seen += 1;
        self.events.event(match ev {
            Event::Up { conn } => {
                if let Some(r) = self.reroute.as_deref_mut() {
                    r.settled(conn);
                }
                Event::Up { conn: Self::map(conn) }
            }
            Event::Frame { conn, header, payload } => Event::Frame {
                conn: Self::map(conn),
                header,
                payload,
            },
            Event::Down { conn, cause } => Event::Down {
                conn: Self::map(conn),
                cause: match self.reroute.as_deref_mut() {
                    Some(r) => r.down(conn, cause),
                    None => cause,
                },
            },
            Event::Pulled { token, result } => Event::Pulled { token, result },
            Event::Accessed { token, result } => Event::Accessed { token, result },
            Event::Fetched { token, result } => Event::Fetched { token, result },
        })
    }
}

impl<A: Transport, B: Transport> Transport for Pair<A, B> {
    const MAX_HEADER: usize = if A::MAX_HEADER < B::MAX_HEADER {
        A::MAX_HEADER
    } else {
        B::MAX_HEADER
    };

    fn name(&self) -> &'static str {
        self.name
    }

    fn address(&self) -> &[u8] {
        &self.addr
    }

    fn max_payload(&self) -> usize {
        self.first.max_payload().min(self.second.max_payload())
    }

    fn max_payload_on(&self, conn: ConnId) -> usize {
        if Self::on_first(conn) {
            self.first.max_payload()
        } else {
            self.second.max_payload()
        }
    }

    fn connect(&mut self, addr: &[u8]) -> std::result::Result<ConnId, Cause> {
        let parts = Parts::parse(addr).ok_or(Cause::Failed(libc::EINVAL))?;
        if route(&self.host, self.first_on, &parts) == Route::First && !self.reroute.refused(parts.first) {
            match self.first.connect(parts.first) {
                Ok(c) => {
                    self.reroute.opened(c, parts.first);
                    return Ok(first_id(c));
                }
                // Not started yet (a full backlog): retried on the same route.
                Err(Cause::Failed(libc::EAGAIN)) => return Err(Cause::Failed(libc::EAGAIN)),
                Err(cause) => {
                    self.fallbacks += 1;
                    tracing::debug!(
                        transport = self.name,
                        ?cause,
                        "first transport refused a peer; using the second"
                    );
                }
            }
        }
        self.second.connect(parts.second).map(second_id)
    }

    #[inline]
    fn send(&mut self, conn: ConnId, header: &[u8], payload: &[u8]) -> std::result::Result<(), Refused> {
        if Self::on_first(conn) {
            self.first.send(conn >> 1, header, payload)
        } else {
            // Its progress writes what the socket did not take now.
            self.second_due = true;
            self.second.send(conn >> 1, header, payload)
        }
    }

    fn send_parts(&mut self, conn: ConnId, header: &[u8], parts: &[IoSlice<'_>]) -> std::result::Result<(), Refused> {
        if Self::on_first(conn) {
            self.first.send_parts(conn >> 1, header, parts)
        } else {
            self.second_due = true;
            self.second.send_parts(conn >> 1, header, parts)
        }
    }

    fn pull(&mut self, conn: ConnId, remote: u64, dst: &mut [u8]) -> Result<()> {
        if Self::on_first(conn) {
            self.first.pull(conn >> 1, remote, dst)
        } else {
            self.second.pull(conn >> 1, remote, dst)
        }
    }

    fn push_first(&self, conn: ConnId, len: usize) -> Option<std::time::Duration> {
        match Self::on_first(conn) {
            true => self.first.push_first(conn >> 1, len),
            false => self.second.push_first(conn >> 1, len),
        }
    }

    fn expose(&mut self, conn: ConnId, buf: &[u8]) -> Result<Option<Exposed>> {
        if Self::on_first(conn) {
            self.first.expose(conn >> 1, buf)
        } else {
            self.second.expose(conn >> 1, buf)
        }
    }

    fn conceal(&mut self, conn: ConnId, handle: u64) {
        if Self::on_first(conn) {
            self.first.conceal(conn >> 1, handle)
        } else {
            self.second.conceal(conn >> 1, handle)
        }
    }

    unsafe fn start_pull(
        &mut self,
        conn: ConnId,
        remote: Remote,
        dst: *mut u8,
        len: usize,
        token: u64,
    ) -> Result<Pulled> {
        // SAFETY: the caller's contract, passed on whole.
        unsafe {
            if Self::on_first(conn) {
                self.first.start_pull(conn >> 1, remote, dst, len, token)
            } else {
                self.second.start_pull(conn >> 1, remote, dst, len, token)
            }
        }
    }

    unsafe fn start_rma(
        &mut self,
        conn: ConnId,
        kind: crate::provider::RmaKind,
        remote: Remote,
        local: *mut u8,
        len: usize,
        token: u64,
    ) -> Result<Pulled> {
        // SAFETY: the caller's contract, passed on whole.
        unsafe {
            if Self::on_first(conn) {
                self.first.start_rma(conn >> 1, kind, remote, local, len, token)
            } else {
                self.second.start_rma(conn >> 1, kind, remote, local, len, token)
            }
        }
    }

    fn start_atomic(&mut self, conn: ConnId, remote: Remote, op: DeviceAtomic, token: u64) -> Result<()> {
        if Self::on_first(conn) {
            self.first.start_atomic(conn >> 1, remote, op, token)
        } else {
            self.second.start_atomic(conn >> 1, remote, op, token)
        }
    }

    fn close(&mut self, conn: ConnId) {
        if Self::on_first(conn) {
            self.reroute.settled(conn >> 1);
            self.first.close(conn >> 1)
        } else {
            self.second.close(conn >> 1)
        }
    }

    /// The second transport's stand-in, known by it alone
    /// ([`Parts::second_only`]): a peer inserted by its second transport's
    /// address (a libfabric `sockaddr_in`) is reported from that entry.
    fn stand_in(addr: &[u8]) -> Option<Vec<u8>> {
        let second = B::stand_in(Parts::parse(addr)?.second)?;
        Some(Parts::second_only(&second).encode())
    }

    fn coalesce(&self) -> usize {
        // Whether a burst is worth tracking at all: some connection may be
        // held back.
        self.first.coalesce().max(self.second.coalesce())
    }

    #[inline]
    fn coalesce_on(&self, conn: ConnId) -> usize {
        if Self::on_first(conn) {
            self.first.coalesce()
        } else {
            self.second.coalesce()
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut c = self.first.counters();
        c.extend(self.second.counters());
        c
    }

    fn cork(&mut self) {
        self.first.cork();
        self.second.cork();
    }

    fn flush(&mut self) {
        self.first.flush();
        self.second.flush();
    }

    fn connect_timeout(&self) -> std::time::Duration {
        // One timeout for every handshake: the longer, so neither
        // transport's peers are cut short.
        self.first.connect_timeout().max(self.second.connect_timeout())
    }

    fn listening_only(&self) -> bool {
        self.first.listening_only() && self.second.listening_only()
    }

    fn keepalive(&self) -> Option<std::time::Duration> {
        match (self.first.keepalive(), self.second.keepalive()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn probe(&mut self, conns: &[ConnId]) {
        let (first, second): (Vec<ConnId>, Vec<ConnId>) = conns.iter().partition(|&&c| Self::on_first(c));
        self.first.probe(&first.iter().map(|c| c >> 1).collect::<Vec<_>>());
        self.second.probe(&second.iter().map(|c| c >> 1).collect::<Vec<_>>());
    }

    fn progress(&mut self, events: &mut dyn Events) {
        let mut first = Side::<true> {
            events,
            reroute: Some(&mut self.reroute),
            seen: 0,
        };
        self.first.progress(&mut first);
        self.first_quiet = match first.seen {
            0 => self.first_quiet.saturating_add(1),
            _ => 0,
        };
        self.skipped += 1;
        if self.second_due || (self.skipped >= SECOND_EVERY && !self.second_may_wait()) {
            self.skipped = 0;
            let mut side = Side::<false> {
                events,
                reroute: None,
                seen: 0,
            };
            self.second.progress(&mut side);
            self.second_due = side.seen > 0;
        }
    }

    fn wait_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    fn wake(&self) {
        self.first.wake();
        self.second.wake();
    }

    fn prepare_wait(&mut self) -> bool {
        // Whatever wakes the caller, or the work found now, may be the
        // second's.
        self.second_due = true;
        // A transport with work already leaves its descriptor readable, and
        // so the pair's: the other need not be armed.
        self.first.prepare_wait() && self.second.prepare_wait()
    }
}
