//! TCP as a transport under core's RDM engine (`tcp-rdm`, decision 127):
//! the step that moves the TCP provider under the layer the shared-memory
//! transport already uses. A connection is one non-blocking TCP stream on
//! the endpoint's epoll set; frames are length-prefixed on it; nothing is
//! pulled (a rendezvous is pushed by the engine in frames). The engine's
//! hello names the peer, so the transport only checks that a connection
//! was meant for this endpoint: the connector's first 16 bytes carry the
//! nonce of the address it dialled, and an acceptor whose nonce differs
//! closes it (a stale name never reaches a newer endpoint on a reused port).
//!
//! On the stream:
//!
//! | bytes | what |
//! |---|---|
//! | 16 | once, connector to acceptor: `XFRD`, version 1, 3 zero bytes, the acceptor's nonce (u64 LE) |
//! | 4 + 1 | each frame: its length after these 4 bytes (u32 LE), the header's length |
//! | header, payload | the engine's frame |
//!
//! Addresses are the dial address and nonce: nonce (u64 LE), port (u16 LE),
//! 4 or 6, then the IPv4 or IPv6 address.

mod conn;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use slab::Slab;
use xfer_core::unstable::error::{Error, Result};
use xfer_core::unstable::rdm::transport::{Bytes, Cause, ConnId, Event, Events, Refused, Transport};
use xfer_core::unstable::sys::{cvt, Epoll, EMPTY_EVENT, READABLE};

use crate::attr::TcpAttr;
use crate::sys::Socket;
use crate::{endpoint, iface};
use conn::{Conn, Phase};

pub mod domain;

/// The most payload one frame carries.
pub const MAX_PAYLOAD: usize = 256 << 10;
/// Bytes a connection may have waiting to be written before `send` says
/// full.
const OUT_MAX: usize = 4 << 20;
/// The connector's greeting: magic and version.
const MAGIC: [u8; 8] = *b"XFRD\x01\0\0\0";

const LISTENER: u64 = u64::MAX;
const WAKE: u64 = u64::MAX - 1;

/// A TCP endpoint's transport: its listener, connections, epoll set.
#[derive(Debug)]
pub struct TcpTransport {
    listener: Socket,
    epoll: Epoll,
    wake: OwnedFd,
    conns: Slab<Conn>,
    addr: Vec<u8>,
    nonce: u64,
    /// Socket options for every connection (Nagle off, timeouts, buffers).
    attr: TcpAttr,
    events: Vec<libc::epoll_event>,
    /// Connections with frames read but not yet reported (held back by
    /// the engine, or past a poll's budget).
    buffered: Vec<ConnId>,
    /// Connections ended outside `progress`, reported by the next.
    ended: Vec<(ConnId, Cause)>,
}

/// The transport address of a listener at `at` with `nonce`.
fn encode(at: SocketAddr, nonce: u64) -> Vec<u8> {
    let mut a = nonce.to_le_bytes().to_vec();
    a.extend_from_slice(&at.port().to_le_bytes());
    match at.ip() {
        IpAddr::V4(ip) => {
            a.push(4);
            a.extend_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            a.push(6);
            a.extend_from_slice(&ip.octets());
        }
    }
    a
}

/// A transport address back: where to dial, and the nonce to greet with.
pub fn decode(a: &[u8]) -> Option<(SocketAddr, u64)> {
    let nonce = u64::from_le_bytes(a.get(..8)?.try_into().ok()?);
    let port = u16::from_le_bytes(a.get(8..10)?.try_into().ok()?);
    let ip = match (a.get(10)?, a.len()) {
        (4, 15) => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(&a[11..15]).ok()?)),
        (6, 27) => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&a[11..27]).ok()?)),
        _ => return None,
    };
    Some((SocketAddr::new(ip, port), nonce))
}

/// The OS error number of `e` (`EIO` for an error that carries none).
fn errno_of(e: &Error) -> i32 {
    match e {
        Error::Os(n) => *n,
        _ => libc::EIO,
    }
}

impl TcpTransport {
    /// Listens where the TCP provider would (`tcp.addr`, `tcp.iface`,
    /// else the automatic choice).
    pub fn open(attr: &TcpAttr) -> Result<TcpTransport> {
        let ifaces = iface::interfaces().unwrap_or_default();
        let at = endpoint::listen_addr(attr, &ifaces)?;
        let listener = Socket::listen(&at)?;
        let named = endpoint::named_addr(listener.local_addr()?, &ifaces, attr);
        let nonce = crate::sys::random_u64();
        let epoll = Epoll::new()?;
        epoll.add(listener.as_raw_fd(), READABLE, LISTENER)?;
        // SAFETY: eventfd(2) with flags only; the result is checked.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: eventfd returned a fresh descriptor nothing else owns.
        let wake = unsafe { OwnedFd::from_raw_fd(fd) };
        epoll.add(wake.as_raw_fd(), READABLE, WAKE)?;
        Ok(TcpTransport {
            listener,
            epoll,
            wake,
            conns: Slab::new(),
            addr: encode(named, nonce),
            nonce,
            attr: attr.clone(),
            events: vec![EMPTY_EVENT; 64],
            buffered: Vec::new(),
            ended: Vec::new(),
        })
    }

    fn accept(&mut self) {
        for _ in 0..16 {
            match self.listener.accept() {
                Ok(Some(sock)) => {
                    if let Err(e) = sock.tune(&self.attr, None) {
                        xfer_core::warn_limited!(error = %e, "tcp-rdm: socket options refused");
                    }
                    let id = self.conns.insert(Conn::accepted(sock));
                    if self
                        .epoll
                        .add(self.conns[id].sock.as_raw_fd(), READABLE, id as u64)
                        .is_err()
                    {
                        self.conns.remove(id);
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    xfer_core::warn_limited!(error = %e, "tcp-rdm: accept failed");
                    return;
                }
            }
        }
    }

    /// Ends `id` now: the engine hears `cause` by the next progress.
    fn end(&mut self, id: ConnId, cause: Cause) {
        if let Some(c) = self.conns.try_remove(id) {
            let _ = self.epoll.delete(c.sock.as_raw_fd());
            if c.reported {
                self.ended.push((id, cause));
            }
        }
    }

    /// Writes what `id` has queued; watches for room when some is left.
    fn flush(&mut self, id: ConnId) {
        let Some(c) = self.conns.get_mut(id) else { return };
        match c.write() {
            Ok(more) => {
                if more != c.watching_out {
                    c.watching_out = more;
                    let ev = if more {
                        READABLE | xfer_core::unstable::sys::WRITABLE
                    } else {
                        READABLE
                    };
                    let _ = self.epoll.modify(c.sock.as_raw_fd(), ev, id as u64);
                }
            }
            Err(e) => self.end(id, Cause::Failed(errno_of(&e))),
        }
    }

    /// Handles readiness of connection `id`.
    fn ready(&mut self, id: ConnId, flags: u32, events: &mut dyn Events) {
        let Some(c) = self.conns.get_mut(id) else { return };
        if c.phase == Phase::Connecting && flags & (libc::EPOLLOUT | libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0 {
            match c.sock.take_error() {
                Ok(0) => {
                    c.phase = Phase::Up;
                    events.event(Event::Up { conn: id });
                }
                Ok(e) => return self.end(id, Cause::Failed(e)),
                Err(e) => return self.end(id, Cause::Failed(errno_of(&e))),
            }
        }
        if flags & (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0 {
            let Some(c) = self.conns.get_mut(id) else { return };
            c.read();
            if c.phase == Phase::Greeting {
                match c.greeting(self.nonce) {
                    Some(true) => {
                        c.reported = true;
                        events.event(Event::Up { conn: id });
                    }
                    Some(false) => return self.end(id, Cause::Protocol("a connection meant for another endpoint")),
                    None => {}
                }
            }
            if !self.buffered.contains(&id) {
                self.buffered.push(id);
            }
        }
        self.flush(id);
    }

    /// Reports the frames read, while the engine takes them; then the ends
    /// of connections whose streams ended.
    fn deliver(&mut self, events: &mut dyn Events) {
        for id in std::mem::take(&mut self.buffered) {
            let mut budget = 64;
            let end = loop {
                let Some(c) = self.conns.get_mut(id) else { break None };
                if c.phase != Phase::Up {
                    break None;
                }
                if budget == 0 || !events.ready(id) {
                    self.buffered.push(id);
                    break None;
                }
                match c.next_frame() {
                    Ok(Some((h, p))) => {
                        budget -= 1;
                        events.event(Event::Frame {
                            conn: id,
                            header: Bytes::new(&c.inbuf[h]),
                            payload: Bytes::new(&c.inbuf[p.clone()]),
                        });
                        c.consume(p.end);
                    }
                    Ok(None) => break c.eof,
                    Err(what) => break Some(Cause::Protocol(what)),
                }
            };
            if let Some(cause) = end {
                self.end(id, cause);
            }
        }
        for (conn, cause) in std::mem::take(&mut self.ended) {
            events.event(Event::Down { conn, cause });
        }
    }
}

impl Transport for TcpTransport {
    fn name(&self) -> &'static str {
        "tcp"
    }

    fn address(&self) -> &[u8] {
        &self.addr
    }

    fn max_payload(&self) -> usize {
        MAX_PAYLOAD
    }

    fn connect(&mut self, addr: &[u8]) -> std::result::Result<ConnId, Cause> {
        let (at, nonce) = decode(addr).ok_or(Cause::Failed(libc::EINVAL))?;
        let sock = Socket::connect(&at).map_err(|e| Cause::Failed(errno_of(&e)))?;
        sock.tune(&self.attr, Some(at))
            .map_err(|e| Cause::Failed(errno_of(&e)))?;
        let id = self.conns.insert(Conn::connecting(sock, nonce));
        let ev = READABLE | xfer_core::unstable::sys::WRITABLE;
        if let Err(e) = self.epoll.add(self.conns[id].sock.as_raw_fd(), ev, id as u64) {
            self.conns.remove(id);
            return Err(Cause::Failed(errno_of(&e)));
        }
        self.conns[id].watching_out = true;
        Ok(id)
    }

    fn send(&mut self, conn: ConnId, header: &[u8], payload: &[u8]) -> std::result::Result<(), Refused> {
        let c = self.conns.get_mut(conn).ok_or(Refused::Gone(Cause::Closed))?;
        if header.len() > Self::MAX_HEADER || payload.len() > MAX_PAYLOAD {
            return Err(Refused::Gone(Cause::Protocol("frame over the largest")));
        }
        // Until the connect completes nothing is handed to the kernel: the
        // engine keeps the frames (an eager send completes when written,
        // and one to a peer that is not there fails with the connect).
        if c.phase == Phase::Connecting || c.queued() > OUT_MAX {
            return Err(Refused::Full);
        }
        c.push_frame(header, payload);
        if c.phase == Phase::Up && !c.watching_out {
            self.flush(conn);
        }
        Ok(())
    }

    fn connect_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.attr.connect_timeout_ms)
    }

    fn close(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.try_remove(conn) {
            let _ = self.epoll.delete(c.sock.as_raw_fd());
            c.sock.close_in_order(64 << 10);
        }
    }

    fn progress(&mut self, events: &mut dyn Events) {
        let mut ready = std::mem::take(&mut self.events);
        let n = self.epoll.wait(&mut ready, 0).unwrap_or(0);
        for ev in &ready[..n] {
            let (token, flags) = (ev.u64, ev.events);
            match token {
                LISTENER => self.accept(),
                WAKE => {
                    let mut v = 0u64;
                    // SAFETY: reads 8 bytes into `v`, the eventfd's counter.
                    unsafe { libc::read(self.wake.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
                }
                id => self.ready(id as usize, flags, events),
            }
        }
        self.events = ready;
        self.deliver(events);
    }

    fn wait_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    fn wake(&self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from `one` to the eventfd.
        unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    fn prepare_wait(&mut self) -> bool {
        // Level-triggered epoll wakes for sockets with bytes; frames already
        // read, and ends not yet reported, are work now.
        if self.buffered.is_empty() && self.ended.is_empty() {
            return true;
        }
        self.wake();
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip_and_bad_ones_are_refused() {
        for at in ["127.0.0.1:4000", "[::1]:65535", "[fe80::1]:1"] {
            let at: SocketAddr = at.parse().unwrap();
            assert_eq!(decode(&encode(at, 7)), Some((at, 7)));
        }
        let good = encode("10.0.0.1:9".parse().unwrap(), 1);
        assert_eq!(good.len(), 15);
        assert!(decode(&good[..14]).is_none(), "short");
        let mut six = good.clone();
        six[10] = 6;
        assert!(decode(&six).is_none(), "family and length disagree");
        assert!(decode(&[]).is_none());
    }

    /// A stream between two transports of this process: a frame goes
    /// through; a greeting naming another nonce is refused; a hostile length
    /// ends the connection with a protocol error.
    #[test]
    fn frames_cross_a_stream_and_hostile_ones_end_it() {
        let attr = TcpAttr {
            addr: Some("127.0.0.1".into()),
            ..TcpAttr::default()
        };
        let (mut a, mut b) = (TcpTransport::open(&attr).unwrap(), TcpTransport::open(&attr).unwrap());
        struct Log(Vec<String>);
        impl Events for Log {
            fn event(&mut self, ev: Event<'_>) {
                self.0.push(match ev {
                    Event::Up { conn } => format!("up {conn}"),
                    Event::Frame { payload, .. } => format!("frame {:?}", payload.to_vec()),
                    Event::Down { conn, cause } => format!("down {conn} {cause:?}"),
                });
            }
        }
        let drive = |a: &mut TcpTransport, b: &mut TcpTransport, log: &mut Log, until: &dyn Fn(&Log) -> bool| {
            let start = std::time::Instant::now();
            while !until(log) {
                a.progress(&mut Log(Vec::new()));
                b.progress(log);
                assert!(start.elapsed() < std::time::Duration::from_secs(20), "{:?}", log.0);
            }
        };
        let conn = a.connect(b.address()).unwrap();
        let mut log = Log(Vec::new());
        drive(&mut a, &mut b, &mut log, &|l| l.0.iter().any(|e| e.starts_with("up")));
        while a.send(conn, b"h", b"hello").is_err() {
            a.progress(&mut Log(Vec::new()));
        }
        drive(&mut a, &mut b, &mut log, &|l| {
            l.0.iter().any(|e| e.starts_with("frame"))
        });
        assert!(log.0.contains(&format!("frame {:?}", b"hello".to_vec())), "{:?}", log.0);
        // A hostile length: more than the largest frame.
        a.conns[conn].out.extend_from_slice(&u32::MAX.to_le_bytes());
        a.conns[conn].out.push(0);
        a.flush(conn);
        drive(&mut a, &mut b, &mut log, &|l| l.0.iter().any(|e| e.starts_with("down")));
        assert!(log.0.iter().any(|e| e.contains("Protocol")), "{:?}", log.0);
        // A greeting for another endpoint's nonce: refused before any event.
        let mut wrong = b.address().to_vec();
        wrong[0] ^= 1;
        let stray = a.connect(&wrong).unwrap();
        let (mut quiet, mut dialler) = (Log(Vec::new()), Log(Vec::new()));
        let start = std::time::Instant::now();
        let gone = format!("down {stray} Closed");
        while !dialler.0.contains(&gone) {
            a.progress(&mut dialler);
            b.progress(&mut quiet);
            let _ = a.send(stray, b"h", b"x");
            assert!(start.elapsed() < std::time::Duration::from_secs(20), "{:?}", dialler.0);
        }
        assert!(
            quiet.0.is_empty(),
            "the acceptor reported a stray connection: {:?} {:?}",
            quiet.0,
            dialler.0
        );
        assert!(
            b.conns.is_empty(),
            "{:?} {:?}",
            b.conns.iter().map(|(i, c)| (i, c.phase, c.eof)).collect::<Vec<_>>(),
            dialler.0
        );
    }
}
