//! TCP as a transport under core's RDM engine (decisions 127, 133): what
//! the `tcp` provider opens, and the TCP half of `shm+tcp`. A connection
//! is one non-blocking TCP stream on the endpoint's epoll set; frames are length-prefixed on it; nothing is
//! pulled (a rendezvous is pushed by the engine in frames). The engine's
//! hello names the peer, so the transport only checks that a connection
//! was meant for this endpoint: the connector's first 16 bytes carry the
//! nonce of the address it dialled, and an acceptor whose nonce differs
//! (and is not 0) closes it (a stale name never reaches a newer endpoint on
//! a reused port).
//!
//! On the stream:
//!
//! | bytes | what |
//! |---|---|
//! | 16 | once, connector to acceptor: `XFRD`, version 1, 3 zero bytes, the acceptor's nonce (u64 LE) |
//! | 4 + 1 | each frame: its length after these 4 bytes (u32 LE), the header's length |
//! | header, payload | the engine's frame |
//!
//! Addresses are TCP endpoint names (`crate::name`) without the provider
//! tag: 4 or 6, the IP address, the port (big-endian), the nonce (u64 LE).
//! Nonce 0 stands for whichever endpoint listens there: any acceptor takes
//! its greeting, and the engine's `Admitted` tells the connector whom it
//! reached.

mod conn;
mod listen;
pub mod place;

use std::io::IoSlice;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

use slab::Slab;
use xfer_core::unstable::error::{Error, Result};
use xfer_core::unstable::rdm::transport::{gather, Bytes, Cause, ConnId, Event, Events, Refused, Transport};
use xfer_core::unstable::sys::{WaitSet, EMPTY_EVENT, READABLE};

use crate::attr::TcpAttr;
use crate::iface;
use crate::name::TcpName;
use crate::sys::Socket;
use conn::{Conn, Phase};

/// The most payload one frame carries.
pub const MAX_PAYLOAD: usize = 256 << 10;
/// Bytes a connection may have waiting to be written before `send` says
/// full.
const OUT_MAX: usize = 4 << 20;
/// The connector's greeting: magic and version.
const MAGIC: [u8; 8] = *b"XFRD\x01\0\0\0";

/// Progress calls that share one `epoll_wait` while a connection is hot.
const EPOLL_EVERY: u32 = 8;
/// Reads in a row that find bytes on the hot connection before it leaves
/// the epoll set: a socket on an interest list costs every arriving segment
/// a walk of its wait queue in the sender's softirq, on the latency's
/// critical path. It comes back before the caller blocks, when it must be
/// watched for room, and when another connection becomes hot.
const DETACH_AFTER: u32 = 64;

const LISTENER: u64 = u64::MAX;
const WAKE: u64 = u64::MAX - 1;

/// A TCP endpoint's transport: its listener, connections, epoll set.
#[derive(Debug)]
pub struct TcpTransport {
    listener: Socket,
    /// Accepting, and the listener's pauses at the descriptor limit.
    acceptor: listen::Acceptor,
    /// The listener's and connections' sockets, and the wake-up.
    waits: WaitSet,
    conns: Slab<Conn>,
    addr: Vec<u8>,
    nonce: u64,
    /// The zone (interface index) of a link-local IPv6 listening address,
    /// through which link-local peers are dialled; 0 otherwise.
    zone: u32,
    /// Socket options for every connection (Nagle off, timeouts, buffers).
    attr: TcpAttr,
    events: Vec<libc::epoll_event>,
    /// Connections with frames read but not yet reported (held back by
    /// the engine, or past a poll's budget).
    buffered: Vec<ConnId>,
    /// The list `deliver` works through, kept for its capacity (no
    /// allocation per progress).
    delivering: Vec<ConnId>,
    /// Connections ended outside `progress`, reported by the next.
    ended: Vec<(ConnId, Cause)>,
    /// The connection that last had bytes: read directly by each progress,
    /// with `epoll_wait` for the rest only every [`EPOLL_EVERY`] calls (a
    /// ping-pong's progress is then one `recv`, not `epoll_wait` and `recv`).
    hot: Option<ConnId>,
    turns: u32,
    /// Between `cork` and `flush`: frames are queued, and each connection
    /// that has some is written once by the flush.
    corked: bool,
    /// The connections frames were queued on while corked.
    to_flush: Vec<ConnId>,
    /// Reads in a row that found the hot connection's bytes.
    streak: u32,
    /// The hot connection is out of the epoll set.
    detached: bool,
}

/// The transport address of a listener at `at` with `nonce`: a TCP
/// endpoint name (`crate::name`) without its provider tag, so the engine's
/// name for it is the TCP provider's name.
fn encode(at: SocketAddr, nonce: u64) -> Vec<u8> {
    TcpName { addr: at, nonce }.to_vec().split_off(1)
}

/// A transport address back: where to dial, and the nonce to greet with.
pub fn decode(a: &[u8]) -> Option<(SocketAddr, u64)> {
    if a.len() > crate::name::MAX_LEN {
        return None;
    }
    let mut name = [0u8; crate::name::MAX_LEN + 1];
    name[0] = crate::name::PROVIDER_TAG;
    name[1..=a.len()].copy_from_slice(a);
    TcpName::decode(&name[..=a.len()]).ok().map(|n| (n.addr, n.nonce))
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
        let at = place::listen_addr(attr, &ifaces)?;
        let listener = Socket::listen(&at).inspect_err(|e| tracing::warn!(addr = %at, error = %e, "tcp listen"))?;
        let bound = listener.local_addr()?;
        let zone = match bound {
            SocketAddr::V6(a) => a.scope_id(),
            SocketAddr::V4(_) => 0,
        };
        let named = place::named_addr(bound, &ifaces, attr);
        // Never the reserved nonce 0 ("whoever listens there").
        let nonce = crate::sys::random_u64().max(1);
        let waits = WaitSet::new(WAKE)?;
        waits.epoll().add(listener.as_raw_fd(), READABLE, LISTENER)?;
        Ok(TcpTransport {
            listener,
            acceptor: listen::Acceptor::new(),
            waits,
            conns: Slab::new(),
            addr: encode(named, nonce),
            nonce,
            zone,
            attr: attr.clone(),
            events: vec![EMPTY_EVENT; 64],
            buffered: Vec::new(),
            delivering: Vec::new(),
            ended: Vec::new(),
            hot: None,
            turns: 0,
            corked: false,
            to_flush: Vec::new(),
            streak: 0,
            detached: false,
        })
    }

    fn accept(&mut self) {
        let (conns, epoll, attr) = (&mut self.conns, self.waits.epoll(), &self.attr);
        self.acceptor.accept(&self.listener, epoll, |sock| {
            if let Err(e) = sock.tune(attr, None) {
                xfer_core::warn_limited!(error = %e, "tcp: socket options refused");
            }
            let id = conns.insert(Conn::accepted(sock));
            if epoll.add(conns[id].sock.as_raw_fd(), READABLE, id as u64).is_err() {
                conns.remove(id);
            }
        });
    }

    /// Ends `id` now: the engine hears `cause` by the next progress.
    fn end(&mut self, id: ConnId, cause: Cause) {
        if let Some(c) = self.remove(id) {
            if c.reported {
                self.ended.push((id, cause));
            }
        }
    }

    /// Takes `id` out of the table and the epoll set (and its place as the
    /// hot connection): what ending and closing it share.
    fn remove(&mut self, id: ConnId) -> Option<Conn> {
        self.forget_hot(id);
        let c = self.conns.try_remove(id)?;
        let _ = self.waits.epoll().delete(c.sock.as_raw_fd());
        Some(c)
    }

    /// Writes what `id` has queued; watches for room when some is left.
    fn write_out(&mut self, id: ConnId) {
        let Some(c) = self.conns.get_mut(id) else { return };
        match c.write() {
            Ok(more) => {
                if more != c.watching_out {
                    c.watching_out = more;
                    if self.detached && self.hot == Some(id) {
                        return self.attach_hot();
                    }
                    let ev = if more {
                        READABLE | xfer_core::unstable::sys::WRITABLE
                    } else {
                        READABLE
                    };
                    let _ = self.waits.epoll().modify(c.sock.as_raw_fd(), ev, id as u64);
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
            if c.read() && c.phase == Phase::Up && self.hot != Some(id) {
                self.attach_hot();
                self.hot = Some(id);
            }
            let Some(c) = self.conns.get_mut(id) else { return };
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
        self.write_out(id);
    }

    /// Reads the hot connection; false when there is none (epoll's turn).
    #[inline]
    fn read_hot(&mut self) -> bool {
        let Some(id) = self.hot else { return false };
        let Some(c) = self.conns.get_mut(id).filter(|c| c.phase == Phase::Up) else {
            self.hot = None;
            return false;
        };
        if !c.read() {
            self.streak = 0;
            // A busy-polling caller comes straight back to read again; a
            // pause between empty reads leaves the socket to the sender's
            // delivery, which takes the receiver's socket lock on loopback
            // (measured: without it the 8 B ping-pong is ~2 % slower).
            std::hint::spin_loop();
            return true;
        }
        if !self.buffered.contains(&id) {
            self.buffered.push(id);
        }
        self.streak += 1;
        // Not while it waits for room: its writability is epoll's to report.
        if self.streak >= DETACH_AFTER && !self.detached && !c.watching_out {
            self.detached = self.waits.epoll().delete(c.sock.as_raw_fd()).is_ok();
        }
        true
    }

    /// Puts a detached hot connection back into the epoll set (readable,
    /// and writable when bytes wait) and restarts its streak.
    fn attach_hot(&mut self) {
        self.streak = 0;
        if !std::mem::take(&mut self.detached) {
            return;
        }
        let Some(id) = self.hot else { return };
        let Some(c) = self.conns.get(id) else { return };
        let ev = match c.watching_out {
            true => READABLE | xfer_core::unstable::sys::WRITABLE,
            false => READABLE,
        };
        if let Err(e) = self.waits.epoll().add(c.sock.as_raw_fd(), ev, id as u64) {
            self.end(id, Cause::Failed(errno_of(&e)));
        }
    }

    /// `id` is gone: it is no longer the hot connection.
    fn forget_hot(&mut self, id: ConnId) {
        if self.hot == Some(id) {
            self.hot = None;
            self.detached = false;
            self.streak = 0;
        }
    }

    /// Sends one frame on `conn`, its payload (`len` bytes) `parts` one
    /// after another, at most [`conn::PARTS_MAX`] of them.
    #[inline]
    fn send_frame(
        &mut self,
        conn: ConnId,
        header: &[u8],
        parts: &[IoSlice<'_>],
        len: usize,
    ) -> std::result::Result<(), Refused> {
        let c = self.conns.get_mut(conn).ok_or(Refused::Gone(Cause::Closed))?;
        if header.len() > Self::MAX_HEADER || len > MAX_PAYLOAD {
            return Err(Refused::Gone(Cause::Protocol("frame over the largest")));
        }
        // Until the connect completes nothing is handed to the kernel: the
        // engine keeps the frames (an eager send completes when written,
        // and one to a peer that is not there fails with the connect).
        if c.phase == Phase::Connecting || c.queued() > OUT_MAX {
            return Err(Refused::Full);
        }
        if self.corked || c.phase != Phase::Up || c.queued() > 0 {
            // Corked, behind queued bytes, or before the greeting went:
            // written by a flush (the cork's, or when the socket has room).
            c.push_frame(header, parts, len);
            if self.corked && !std::mem::replace(&mut c.corked, true) {
                self.to_flush.push(conn);
            }
            return Ok(());
        }
        match c.write_frame(header, parts, len) {
            Ok(false) => {}
            Ok(true) => self.write_out(conn),
            Err(e) => self.end(conn, Cause::Failed(errno_of(&e))),
        }
        Ok(())
    }

    /// Reports the frames read, while the engine takes them; then the ends
    /// of connections whose streams ended.
    #[inline]
    fn deliver(&mut self, events: &mut dyn Events) {
        // Checked inline: a progress that read nothing has nothing to report.
        if !self.buffered.is_empty() || !self.ended.is_empty() {
            self.deliver_now(events);
        }
    }

    fn deliver_now(&mut self, events: &mut dyn Events) {
        let mut todo = std::mem::take(&mut self.delivering);
        std::mem::swap(&mut todo, &mut self.buffered);
        for &id in &todo {
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
        todo.clear();
        self.delivering = todo;
        if !self.ended.is_empty() {
            for (conn, cause) in std::mem::take(&mut self.ended) {
                events.event(Event::Down { conn, cause });
            }
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
        let at = place::dial_addr(at, self.zone).map_err(|e| {
            xfer_core::warn_limited!(peer = %at, error = %e, "tcp: peer not reachable from here");
            Cause::Failed(libc::EHOSTUNREACH)
        })?;
        let sock = Socket::connect(&at).map_err(|e| Cause::Failed(errno_of(&e)))?;
        sock.tune(&self.attr, Some(at))
            .map_err(|e| Cause::Failed(errno_of(&e)))?;
        let id = self.conns.insert(Conn::connecting(sock, nonce));
        let ev = READABLE | xfer_core::unstable::sys::WRITABLE;
        if let Err(e) = self.waits.epoll().add(self.conns[id].sock.as_raw_fd(), ev, id as u64) {
            self.conns.remove(id);
            return Err(Cause::Failed(errno_of(&e)));
        }
        self.conns[id].watching_out = true;
        Ok(id)
    }

    #[inline]
    fn send(&mut self, conn: ConnId, header: &[u8], payload: &[u8]) -> std::result::Result<(), Refused> {
        self.send_frame(conn, header, &[IoSlice::new(payload)], payload.len())
    }

    fn send_parts(&mut self, conn: ConnId, header: &[u8], parts: &[IoSlice<'_>]) -> std::result::Result<(), Refused> {
        if parts.len() > conn::PARTS_MAX {
            return self.send(conn, header, &gather(parts));
        }
        let len = parts.iter().map(|p| p.len()).sum();
        self.send_frame(conn, header, parts, len)
    }

    fn coalesce(&self) -> usize {
        self.attr.coalesce
    }

    fn stand_in(addr: &[u8]) -> Option<Vec<u8>> {
        let (at, _) = decode(addr)?;
        Some(encode(at, crate::name::ANY_NONCE))
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("connections_open", self.conns.len() as u64),
            ("accept_paused", self.acceptor.paused),
            ("accept_shed", self.acceptor.shed),
        ]
    }

    fn cork(&mut self) {
        self.corked = true;
    }

    fn flush(&mut self) {
        self.corked = false;
        if self.to_flush.is_empty() {
            return;
        }
        let mut ids = std::mem::take(&mut self.to_flush);
        for &id in &ids {
            let Some(c) = self.conns.get_mut(id) else { continue };
            c.corked = false;
            if c.phase == Phase::Up && !c.watching_out {
                self.write_out(id);
            }
        }
        ids.clear();
        self.to_flush = ids;
    }

    fn connect_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.attr.connect_timeout_ms)
    }

    #[inline]
    fn listening_only(&self) -> bool {
        self.conns.is_empty()
    }

    fn close(&mut self, conn: ConnId) {
        if let Some(mut c) = self.remove(conn) {
            // What the socket takes now of what waited (bytes past a full
            // buffer) goes before the end of the stream.
            let _ = c.write();
            c.sock.close_in_order(64 << 10);
        }
    }

    fn progress(&mut self, events: &mut dyn Events) {
        self.turns = self.turns.wrapping_add(1);
        if !self.turns.is_multiple_of(EPOLL_EVERY) && self.read_hot() {
            return self.deliver(events);
        }
        self.acceptor.resume(&self.listener, self.waits.epoll(), LISTENER);
        let mut ready = std::mem::take(&mut self.events);
        let n = self.waits.epoll().wait(&mut ready, 0).unwrap_or(0);
        for ev in &ready[..n] {
            let (token, flags) = (ev.u64, ev.events);
            match token {
                LISTENER => self.accept(),
                WAKE => self.waits.drain(),
                id => self.ready(id as usize, flags, events),
            }
        }
        self.events = ready;
        self.deliver(events);
    }

    fn wait_set(&self) -> Option<&WaitSet> {
        Some(&self.waits)
    }

    fn prepare_wait(&mut self) -> bool {
        // Level-triggered epoll wakes for sockets with bytes; frames already
        // read, and ends not yet reported, are work now.
        self.attach_hot();
        if self.buffered.is_empty() && self.ended.is_empty() {
            // Progress that read the hot connection directly left epoll's
            // report of it standing: asked now, epoll drops what is no
            // longer ready, so only new activity makes the descriptor
            // readable for an edge-triggered waiter.
            let mut one = [EMPTY_EVENT];
            if matches!(self.waits.epoll().wait(&mut one, 0), Ok(0)) {
                return true;
            }
            // Our own wake-up alone: what it asked for (frames a burst held
            // back, written by the engine's flush before it asks this; another
            // look before sleeping, which this is) is done. Drained rather
            // than left standing, it no longer ends every later wait at once
            // (each such wait cost a progress and another wake-up).
            if one[0].u64 == WAKE {
                self.waits.drain();
                if matches!(self.waits.epoll().wait(&mut one, 0), Ok(0)) {
                    return true;
                }
            }
        }
        self.wake();
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A transport listening on the loopback address.
    fn loopback() -> TcpTransport {
        let attr = TcpAttr {
            addr: Some("127.0.0.1".into()),
            ..TcpAttr::default()
        };
        TcpTransport::open(&attr).unwrap()
    }

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
        six[0] = 6;
        assert!(decode(&six).is_none(), "family and length disagree");
        assert!(decode(&[]).is_none());
        assert!(decode(&[4; 40]).is_none(), "long");
        let mut name = vec![crate::name::PROVIDER_TAG];
        name.extend_from_slice(&good);
        let n = TcpName::decode(&name).expect("a TCP name");
        assert_eq!((n.addr, n.nonce), ("10.0.0.1:9".parse().unwrap(), 1));
    }

    /// A wake-up the caller asked for is answered by the look before
    /// sleeping: `prepare_wait` drains it and lets the caller sleep, rather
    /// than leaving it standing (every later wait would end at once); bytes
    /// waiting on a connection still keep it awake.
    #[test]
    fn prepare_wait_takes_its_own_wake_up_but_not_a_peers_bytes() {
        let (mut a, mut b) = (loopback(), loopback());
        struct Quiet;
        impl Events for Quiet {
            fn event(&mut self, _: Event<'_>) {}
        }
        assert!(b.prepare_wait(), "nothing to do");
        b.wake();
        assert!(b.prepare_wait(), "the wake-up alone: drained, the caller may sleep");
        assert!(b.prepare_wait(), "and it stays drained");
        let conn = a.connect(b.address()).unwrap();
        let start = std::time::Instant::now();
        while a.send(conn, b"h", b"hello").is_err() {
            a.progress(&mut Quiet);
            b.progress(&mut Quiet);
            assert!(start.elapsed() < std::time::Duration::from_secs(20));
        }
        // The greeting and the frame reach b's socket: not asleep while they wait.
        let start = std::time::Instant::now();
        loop {
            a.progress(&mut Quiet);
            b.wake();
            if !b.prepare_wait() {
                break;
            }
            assert!(
                start.elapsed() < std::time::Duration::from_secs(20),
                "b never saw the connection"
            );
        }
    }

    /// Frames whose payloads come in parts cross a stream as the parts'
    /// bytes one after another: few or more parts than one `sendmsg` takes,
    /// empty ones, none; and frames of 256 KiB in parts sent until the
    /// socket is full, so that the kernel takes some only in part and the
    /// rest waits in the connection's queue: every one arrives whole, in
    /// order, once the peer reads.
    #[test]
    fn frames_in_parts_arrive_whole_in_order_past_a_full_socket() {
        let (mut a, mut b) = (loopback(), loopback());
        struct Got(Vec<(Vec<u8>, Vec<u8>)>);
        impl Events for Got {
            fn event(&mut self, ev: Event<'_>) {
                if let Event::Frame { header, payload, .. } = ev {
                    self.0.push((header.to_vec(), payload.to_vec()));
                }
            }
        }
        let conn = a.connect(b.address()).unwrap();
        let mut got = Got(Vec::new());
        let start = std::time::Instant::now();
        while a
            .send_parts(conn, b"h0", &[IoSlice::new(b"ab"), IoSlice::new(b"c")])
            .is_err()
        {
            a.progress(&mut Got(Vec::new()));
            b.progress(&mut got);
            assert!(start.elapsed() < std::time::Duration::from_secs(20));
        }
        let pattern = |seed: usize, len: usize| (0..len).map(|i| (i * 7 + seed) as u8).collect::<Vec<u8>>();
        let mut sent: Vec<(Vec<u8>, Vec<u8>)> = vec![(b"h0".to_vec(), b"abc".to_vec())];
        let small = pattern(1, 100);
        for parts in [
            vec![],
            vec![&small[..0]],
            vec![&small[..0], &small[..50], &small[..0], &small[50..]],
            small.chunks(9).collect::<Vec<_>>(),
        ] {
            let io: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
            let header = format!("h{}", sent.len()).into_bytes();
            a.send_parts(conn, &header, &io).expect("room for a small frame");
            sent.push((header, parts.concat()));
        }
        let big = pattern(3, MAX_PAYLOAD);
        let mut full = false;
        for i in 0..200 {
            let cut = 1 + i * 997 % (MAX_PAYLOAD - 1);
            let io = [IoSlice::new(&big[..cut]), IoSlice::new(&big[cut..])];
            let header = format!("big{i}").into_bytes();
            match a.send_parts(conn, &header, &io) {
                Ok(()) => sent.push((header, big.clone())),
                Err(Refused::Full) => {
                    full = true;
                    break;
                }
                Err(e) => panic!("{e:?}"),
            }
        }
        assert!(full, "the socket and the queue never filled");
        assert!(a.conns[conn].queued() > 0, "nothing waited in the queue");
        let start = std::time::Instant::now();
        while got.0.len() < sent.len() {
            a.progress(&mut Got(Vec::new()));
            b.progress(&mut got);
            assert!(
                start.elapsed() < std::time::Duration::from_secs(20),
                "{} of {}",
                got.0.len(),
                sent.len()
            );
        }
        assert_eq!(got.0.len(), sent.len());
        for (i, (g, s)) in got.0.iter().zip(&sent).enumerate() {
            assert_eq!(g.0, s.0, "frame {i}: header");
            assert!(
                g.1 == s.1,
                "frame {i}: payload of {} B, sent {} B",
                g.1.len(),
                s.1.len()
            );
        }
    }

    /// A stream between two transports of this process: a frame goes
    /// through; a greeting naming another nonce is refused; a hostile length
    /// ends the connection with a protocol error.
    #[test]
    fn frames_cross_a_stream_and_hostile_ones_end_it() {
        let (mut a, mut b) = (loopback(), loopback());
        struct Log(Vec<String>);
        impl Events for Log {
            fn event(&mut self, ev: Event<'_>) {
                self.0.push(match ev {
                    Event::Up { conn } => format!("up {conn}"),
                    Event::Frame { payload, .. } => format!("frame {:?}", payload.to_vec()),
                    Event::Down { conn, cause } => format!("down {conn} {cause:?}"),
                    Event::Pulled { token, .. } => format!("pulled {token}"),
                    Event::Accessed { token, .. } => format!("accessed {token}"),
                    Event::Fetched { token, .. } => format!("fetched {token}"),
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
        a.write_out(conn);
        drive(&mut a, &mut b, &mut log, &|l| l.0.iter().any(|e| e.starts_with("down")));
        assert!(log.0.iter().any(|e| e.contains("Protocol")), "{:?}", log.0);
        // A greeting for another endpoint's nonce: refused before any event.
        let mut wrong = b.address().to_vec();
        let last = wrong.len() - 1;
        wrong[last] ^= 1;
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
        // Nonce 0, whichever endpoint listens there: taken.
        let mut any = b.address().to_vec();
        any[last - 7..].fill(0);
        a.connect(&any).unwrap();
        let mut accepted = Log(Vec::new());
        drive(&mut a, &mut b, &mut accepted, &|l| {
            l.0.iter().any(|e| e.starts_with("up"))
        });
    }
}
