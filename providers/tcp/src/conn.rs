//! One TCP connection: a queue of frames to write (resumable after partial
//! writes) and a staging buffer of bytes read but not yet consumed. It moves
//! bytes; what they mean is the endpoint's business (`endpoint/`).
//!
//! Every connection carries frames both ways. An endpoint sends to a peer on
//! its route: the connection it opened, or the one the peer opened if it had
//! none; when two peers dial each other at once, the greater name gives its
//! own up while only its Hello went out on it (`endpoint/crossed.rs`,
//! docs/PROTOCOL.md). Where it is in its life (handshake, admission,
//! deadline) is its [`Link`], the sans-IO machine of `link/`.

use std::collections::VecDeque;
use std::io::IoSlice;
use xfer_core::unstable::addr::{Address, PeerAddr};
use xfer_core::unstable::rdm::stall::Silence;
use xfer_core::unstable::rdm::{Amount, Credit, Requests, Share};

use crate::link::Link;
use crate::rx::Phase;
use crate::sys::{Io, Socket};
use crate::wire::{CREDIT_INIT, HEADER_LEN};

/// The credit a new connection starts with, both ways.
pub const INIT: Amount = Amount {
    bytes: CREDIT_INIT,
    msgs: u32::MAX,
};

/// Size of the receive staging buffer; payloads larger than what is staged
/// are read straight into the user's buffer.
pub const STAGING: usize = 64 << 10;

/// Who opened a connection (the opener sends the hello); data flows both ways.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// We connected.
    Out,
    /// We accepted.
    In,
}

/// Who is waiting for a frame to be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// Nobody (an acknowledgement, an inject, an RMA answer).
    None,
    /// Nobody, but it is a handshake frame ([`Link::poll_transmit`]):
    /// the only kind written before the connection is open.
    Handshake,
    /// The send operation with this key completes when the frame is written.
    Send(usize),
    /// The send with this key waits for a clear-to-send; fails if the frame cannot be written.
    Rts(usize),
    /// The rendezvous receive with this key waits for data; fails if the frame cannot be written.
    Cts(usize),
    /// The RMA operation with this key waits for the target's answer once the
    /// frame is written; fails if it cannot be written.
    Rma(usize),
}

/// Where a frame's payload comes from.
#[derive(Debug)]
pub enum Payload {
    /// No payload.
    None,
    /// Bytes owned by the frame (hello names, injected data).
    Owned(Vec<u8>),
    /// `len` bytes from `offset` in the buffer of the send with this key.
    Op { key: usize, offset: usize, len: usize },
    /// The whole buffer of the RMA write with this key, after its immediate
    /// data (when the write carries some).
    Rma { key: usize, imm: Option<[u8; 8]> },
    /// `len` registered bytes at `addr` of the local region `mr_key`: a read
    /// response, sent straight from the region and checked again before
    /// every write to the socket.
    Region { mr_key: u64, addr: u64, len: u64 },
}

/// A frame waiting to be written.
#[derive(Debug)]
pub struct TxFrame {
    /// The encoded header.
    pub hdr: [u8; HEADER_LEN],
    /// Its payload.
    pub payload: Payload,
    /// Bytes of header plus payload already written.
    pub written: usize,
    /// Who is waiting for it.
    pub owner: Owner,
}

/// One TCP connection.
#[derive(Debug)]
pub struct Conn {
    /// The socket.
    pub sock: Socket,
    /// Which way data flows.
    pub dir: Dir,
    /// Its lifecycle: connecting, handshake, admission, open.
    pub link: Link,
    /// Distinguishes this connection from a later one in the same slot.
    pub serial: u64,
    /// The peer's endpoint name (on accepted connections: once its hello arrived).
    pub peer: Option<Address>,
    /// The peer's handle in the address vector when last looked up (a hint:
    /// checked against the table on every use).
    pub src_hint: PeerAddr,
    /// Frames to write, oldest first.
    pub txq: VecDeque<TxFrame>,
    /// Requests to send waiting for the eager credit they cost, oldest
    /// first; while any wait, every message goes by request behind them
    /// (order is kept) and injects fail with `Again`.
    pub credit_wait: VecDeque<TxFrame>,
    /// The peer's requests to send kept unmatched here, by its token.
    pub requests: Requests,
    /// Whether epoll watches writability (only while `txq` is not empty).
    pub want_write: bool,
    /// Received bytes not yet consumed: `staging[start..end]`.
    pub staging: Box<[u8]>,
    /// Start of unconsumed bytes.
    pub start: usize,
    /// End of received bytes.
    pub end: usize,
    /// What the next received bytes are.
    pub rx: Phase,
    /// Eager credit both ways (bytes, [`crate::wire::eager_cost`]; no
    /// message count: TCP has no pool of receive buffers to protect).
    pub credit: Credit,
    /// Its share of the endpoint's receive memory (`rdm::Account`): its
    /// state and the credit it was granted, and what of that its messages
    /// kept unexpected hold.
    pub share: Share,
    /// Whether frames wait in `txq` for the end of a burst of sends
    /// (listed in the endpoint's `deferred`).
    pub deferred: bool,
    /// The progress timeout's view of its peer: reads that brought bytes,
    /// and write-readiness events (the peer made room), count as heard.
    pub silence: Silence,
}

impl Conn {
    /// A connection over `sock`.
    pub fn new(sock: Socket, dir: Dir, link: Link, serial: u64, peer: Option<Address>) -> Conn {
        let staging = vec![0; STAGING].into_boxed_slice();
        Conn {
            sock,
            dir,
            link,
            serial,
            peer,
            src_hint: PeerAddr::UNSPEC,
            txq: VecDeque::new(),
            credit_wait: VecDeque::new(),
            requests: Requests::default(),
            want_write: false,
            staging,
            start: 0,
            end: 0,
            rx: Phase::Header,
            credit: Credit::new(INIT),
            share: Share::default(),
            deferred: false,
            silence: Silence::default(),
        }
    }

    /// Moves the handshake frames its link wants written into the queue:
    /// behind the handshake frames queued before them, ahead of everything
    /// the handshake holds back (which nothing wrote yet: before the link
    /// is open only handshake frames are written).
    pub fn take_transmits(&mut self) {
        while let Some(t) = self.link.poll_transmit() {
            let at = self.txq.iter().take_while(|f| f.owner == Owner::Handshake).count();
            let frame = TxFrame {
                hdr: t.hdr,
                payload: Payload::Owned(t.payload),
                written: 0,
                owner: Owner::Handshake,
            };
            self.txq.insert(at, frame);
        }
    }

    /// Unconsumed received bytes.
    #[inline]
    pub fn staged(&self) -> &[u8] {
        &self.staging[self.start..self.end]
    }

    /// Marks `n` staged bytes consumed.
    #[inline]
    pub fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Reads more bytes into the staging buffer, moving unconsumed bytes to
    /// its front first when it is full.
    #[inline(always)]
    pub fn fill(&mut self) -> xfer_core::Result<Io> {
        if self.end == self.staging.len() {
            self.staging.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let io = self.sock.recv(&mut self.staging[self.end..])?;
        if let Io::Done(n) = io {
            self.end += n;
        }
        Ok(io)
    }

    /// Writes as much of a frame (`hdr`, then `ext`, then `payload`) as the
    /// socket takes, resuming at `*written`; true once all of it is written.
    pub fn write_frame(
        sock: &Socket,
        hdr: &[u8],
        written: &mut usize,
        ext: &[u8],
        payload: &[u8],
    ) -> xfer_core::Result<bool> {
        debug_assert_eq!(hdr.len(), HEADER_LEN);
        let total = hdr.len() + ext.len() + payload.len();
        while *written < total {
            let mut slices = [IoSlice::new(&[]); 3];
            let n = unwritten([hdr, ext, payload], *written, &mut slices);
            let io = sock.send(&slices[..n])?;
            match io {
                Io::Done(n) => *written += n,
                Io::WouldBlock => return Ok(false),
            }
        }
        Ok(true)
    }
}

/// Fills `out` with the parts of a frame (header, immediate data, payload)
/// from byte `written` on, skipping empty and written ones; returns how many
/// slices it filled (at most three).
pub fn unwritten<'a>(parts: [&'a [u8]; 3], written: usize, out: &mut [IoSlice<'a>]) -> usize {
    let (mut skip, mut n) = (written, 0);
    for part in parts {
        if skip >= part.len() {
            skip -= part.len();
            continue;
        }
        out[n] = IoSlice::new(&part[skip..]);
        skip = 0;
        n += 1;
    }
    n
}
