//! One stream of the TCP transport: what waits to be written, what
//! was read and not yet taken as frames, and where its greeting stands.

use std::io::IoSlice;
use std::ops::Range;

use xfer_core::unstable::error::Result;
use xfer_core::unstable::rdm::transport::{Cause, Transport};

use super::{errno_of, TcpTransport, MAGIC, MAX_PAYLOAD};
use crate::sys::{Io, Socket};

/// Where a connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Dialled; the connect has not completed.
    Connecting,
    /// Accepted; its greeting has not been read whole.
    Greeting,
    /// Carrying frames.
    Up,
}

/// A whole frame in `inbuf`: its header's and its payload's ranges.
pub type Frame = (Range<usize>, Range<usize>);

/// A frame's prefix: its length after these 4 bytes (u32 LE), the
/// header's length.
fn prefix(header: &[u8], payload: usize) -> [u8; 5] {
    let len = (1 + header.len() + payload) as u32;
    let l = len.to_le_bytes();
    [l[0], l[1], l[2], l[3], header.len() as u8]
}

/// The most parts of a payload one frame is written from as they are
/// (`sendmsg`'s vector holds them with the prefix and the header).
pub const PARTS_MAX: usize = 6;

/// Room made for one read.
const CHUNK: usize = 64 << 10;

/// Bytes read ahead of the frames taken before reading stops (the engine
/// holding a peer's frames back makes the peer's kernel buffers fill).
const READ_AHEAD: usize = 2 * (MAX_PAYLOAD + 128);

/// One connection.
#[derive(Debug)]
pub struct Conn {
    pub sock: Socket,
    pub phase: Phase,
    /// The engine knows it (it dialled it, or was told it is up), so it is
    /// told when it ends.
    pub reported: bool,
    /// Writability is watched (bytes wait to be written).
    pub watching_out: bool,
    /// Frames were queued while the transport was corked.
    pub corked: bool,
    pub(super) out: Vec<u8>,
    sent: usize,
    /// Bytes read: `inbuf[start..end]` not yet taken; past `end`, room
    /// (zeroed once, when the buffer grows, not on every read).
    pub inbuf: Vec<u8>,
    start: usize,
    end: usize,
    /// How the stream ended, once it has (frames before it still count).
    pub eof: Option<Cause>,
}

impl Conn {
    /// A connection this side dialled, greeting the endpoint of `nonce`.
    pub fn connecting(sock: Socket, nonce: u64) -> Conn {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&nonce.to_le_bytes());
        let mut c = Conn::new(sock, Phase::Connecting, out);
        // The engine has its id from `connect`: its end is reported.
        c.reported = true;
        c
    }

    /// A connection a peer opened to this side.
    pub fn accepted(sock: Socket) -> Conn {
        Conn::new(sock, Phase::Greeting, Vec::new())
    }

    fn new(sock: Socket, phase: Phase, out: Vec<u8>) -> Conn {
        Conn {
            sock,
            phase,
            reported: false,
            watching_out: false,
            corked: false,
            out,
            sent: 0,
            inbuf: Vec::new(),
            start: 0,
            end: 0,
            eof: None,
        }
    }

    /// Bytes waiting to be written.
    pub fn queued(&self) -> usize {
        self.out.len() - self.sent
    }

    /// Queues one frame, its payload (`len` bytes) `parts` one after another.
    pub fn push_frame(&mut self, header: &[u8], parts: &[IoSlice<'_>], len: usize) {
        self.out.extend_from_slice(&prefix(header, len));
        self.out.extend_from_slice(header);
        for p in parts {
            self.out.extend_from_slice(p);
        }
    }

    /// Writes one frame from the caller's bytes (its payload, `len` bytes,
    /// `parts` one after another, at most [`PARTS_MAX`] of them), nothing
    /// being queued before it; what the socket does not take is queued.
    /// True when some is left.
    pub fn write_frame(&mut self, header: &[u8], parts: &[IoSlice<'_>], len: usize) -> Result<bool> {
        let pre = prefix(header, len);
        let mut iov = [IoSlice::new(&[]); 2 + PARTS_MAX];
        iov[0] = IoSlice::new(&pre);
        iov[1] = IoSlice::new(header);
        let used = 2 + parts.len().min(PARTS_MAX);
        iov[2..used].copy_from_slice(&parts[..used - 2]);
        let mut n = match self.sock.send(&iov[..used])? {
            Io::Done(n) => n,
            Io::WouldBlock => 0,
        };
        if n == pre.len() + header.len() + len {
            return Ok(false);
        }
        for part in &iov[..used] {
            let taken = n.min(part.len());
            self.out.extend_from_slice(&part[taken..]);
            n -= taken;
        }
        Ok(self.queued() > 0)
    }

    /// Writes what is queued without blocking; true when some is left.
    pub fn write(&mut self) -> Result<bool> {
        if self.phase == Phase::Connecting {
            return Ok(true);
        }
        while self.sent < self.out.len() {
            match self.sock.send_flat(&self.out[self.sent..])? {
                Io::Done(n) => self.sent += n,
                Io::WouldBlock => break,
            }
        }
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
        } else if self.sent > 1 << 20 {
            self.out.drain(..self.sent);
            self.sent = 0;
        }
        Ok(self.sent < self.out.len())
    }

    /// Reads what the socket has, up to the read-ahead bound; true when
    /// anything came (bytes or the stream's end).
    pub fn read(&mut self) -> bool {
        let mut got = false;
        while self.eof.is_none() && self.end - self.start < READ_AHEAD {
            if self.inbuf.len() - self.end < CHUNK {
                self.make_room();
            }
            let room = self.inbuf.len() - self.end;
            match self.sock.recv(&mut self.inbuf[self.end..]) {
                Ok(Io::Done(0)) => self.eof = Some(Cause::Closed),
                Ok(Io::Done(n)) => {
                    self.end += n;
                    got = true;
                    if n < room {
                        // A short read emptied the socket: asking again
                        // would cost a call that says so.
                        break;
                    }
                }
                Ok(Io::WouldBlock) => break,
                Err(e) => {
                    self.eof = Some(match errno_of(&e) {
                        libc::ECONNRESET => Cause::Closed,
                        n => Cause::Failed(n),
                    });
                }
            }
        }
        got || self.eof.is_some()
    }

    /// At least `CHUNK` bytes of room past `end`: what is not taken moves to
    /// the front, and the buffer grows only when that is not enough.
    fn make_room(&mut self) {
        if self.start > 0 {
            self.inbuf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.inbuf.len() - self.end < CHUNK {
            self.inbuf.resize(self.end + CHUNK, 0);
        }
    }

    /// An accepted connection's greeting: `Some(true)` when it names
    /// `nonce` or any endpoint (the connection is up), `Some(false)` when it does not (or
    /// the stream ended first), `None` while incomplete.
    pub fn greeting(&mut self, nonce: u64) -> Option<bool> {
        let avail = &self.inbuf[self.start..self.end];
        if avail.len() < 16 {
            return self.eof.map(|_| false);
        }
        let named = avail[8..16] == nonce.to_le_bytes() || avail[8..16] == crate::name::ANY_NONCE.to_le_bytes();
        let ok = avail[..8] == MAGIC && named;
        self.consume(self.start + 16);
        if ok {
            self.phase = Phase::Up;
        }
        Some(ok)
    }

    /// The next whole frame's header and payload ranges in `inbuf`.
    pub fn next_frame(&self) -> std::result::Result<Option<Frame>, &'static str> {
        let avail = &self.inbuf[self.start..self.end];
        if avail.len() < 5 {
            return Ok(None);
        }
        let len = u32::from_le_bytes([avail[0], avail[1], avail[2], avail[3]]) as usize;
        let hlen = usize::from(avail[4]);
        if hlen > TcpTransport::MAX_HEADER || len < 1 + hlen || len - 1 - hlen > MAX_PAYLOAD {
            return Err("a frame length out of bounds");
        }
        if avail.len() < 4 + len {
            return Ok(None);
        }
        let h = self.start + 5..self.start + 5 + hlen;
        let p = h.end..self.start + 4 + len;
        Ok(Some((h, p)))
    }

    /// The bytes before `to` were taken.
    pub fn consume(&mut self, to: usize) {
        self.start = to;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }
}
