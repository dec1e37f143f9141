//! The transport trait: what the RDM engine ([`super::engine::Engine`]) needs
//! from whatever moves its bytes, libfabric rxm's view of a connection-oriented
//! provider and UCX's UCT. A transport connects to peer addresses and
//! accepts connections, carries small frames (a header and a payload) in
//! order per connection, pulls a peer's memory when it can (rendezvous), and
//! reports what happened from one `progress` call.
//!
//! A rendezvous pull may be synchronous (shared memory copies at once) or
//! asynchronous (verbs posts RDMA READs): the sender [`expose`]s its buffer
//! and its request carries the key, the receiver [`start_pull`]s into its
//! buffer with a token, and the transport reports [`Event::Pulled`] with
//! that token when the bytes are in or the pull failed.
//!
//! A transport whose device reaches a peer's registered memory by itself
//! (verbs' RDMA WRITE and READ) also does the user's RMA natively
//! ([`start_rma`], reported by [`Event::Accessed`]) where the engine finds
//! it may; elsewhere the engine serves RMA in frames. It knows nothing of
//! tags, receives, credit or completions.
//!
//! [`expose`]: Transport::expose
//! [`start_pull`]: Transport::start_pull
//! [`start_rma`]: Transport::start_rma

use std::io::IoSlice;
use std::os::fd::{AsRawFd, RawFd};

use crate::error::Error;
use crate::provider::RmaKind;
use crate::sys::WaitSet;

/// A connection of a transport: an index the transport chose, reused after
/// the connection is reported down (or closed by the engine).
pub type ConnId = usize;

/// Bytes a transport lends the engine during [`Events::event`]: a frame's
/// header or payload, possibly in memory a peer can write concurrently (a
/// shared-memory ring), so they are only ever copied out, never borrowed as
/// a slice.
#[derive(Debug, Clone, Copy)]
pub struct Bytes<'a> {
    ptr: *const u8,
    len: usize,
    _lent: std::marker::PhantomData<&'a [u8]>,
}

impl<'a> Bytes<'a> {
    /// Bytes of a slice the transport owns.
    pub fn new(slice: &'a [u8]) -> Bytes<'a> {
        Bytes {
            ptr: slice.as_ptr(),
            len: slice.len(),
            _lent: std::marker::PhantomData,
        }
    }

    /// Bytes at `ptr` that another process may write while they are read.
    ///
    /// # Safety
    /// `ptr..ptr + len` must stay mapped and readable for `'a`; its contents
    /// may change (they are only copied out).
    pub unsafe fn shared(ptr: *const u8, len: usize) -> Bytes<'a> {
        Bytes {
            ptr,
            len,
            _lent: std::marker::PhantomData,
        }
    }

    /// Their length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies the first `min(len, dst.len())` of them to `dst`; returns how
    /// many.
    #[inline]
    pub fn copy_to(&self, dst: &mut [u8]) -> usize {
        let n = self.len.min(dst.len());
        // SAFETY: `dst` is an exclusive buffer of at least `n` bytes.
        unsafe { self.copy_first(dst.as_mut_ptr(), n) };
        n
    }

    /// A copy of them, in an allocation not zeroed first (an unexpected
    /// frame's payload is written once, by the copy, not twice).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        // SAFETY: `v` is a fresh allocation of at least `len` bytes, so
        // nothing else refers to it; after the copy its first `len` bytes
        // are initialised, which `set_len` needs.
        unsafe {
            self.copy_first(v.as_mut_ptr(), self.len);
            v.set_len(self.len);
        }
        v
    }

    /// Copies the first `n` of them to `d`.
    ///
    /// # Safety
    /// `n <= len`; `d..d + n` is valid for writes and overlaps no lent byte.
    #[inline]
    unsafe fn copy_first(&self, d: *mut u8, n: usize) {
        // SAFETY: `new` and `shared`'s contract keep `ptr..ptr + len` mapped
        // for 'a and `n <= len`; the caller's `d..d + n` overlaps none of it.
        // Concurrent writers can change the values copied only.
        unsafe { copy_bytes(self.ptr, d, n) };
    }
}

/// Copies `n` bytes from `src` to `dst`: 8 to 16 of them (a small message's
/// payload, a tagged header) as two (possibly overlapping) words, without
/// the call into `memcpy` a copy of unknown length makes; others by
/// `copy_nonoverlapping`. Transports use it for frames in and out of their
/// buffers (a shared-memory ring's entries).
///
/// # Safety
/// `src..src + n` must be readable and `dst..dst + n` writable, the two not
/// overlapping. Either may be memory another process writes concurrently:
/// only the values copied change.
#[inline(always)]
pub unsafe fn copy_bytes(src: *const u8, dst: *mut u8, n: usize) {
    if (8..=16).contains(&n) {
        // SAFETY: both words lie inside `src..src + n` and `dst..dst + n`
        // (8 <= n <= 16), which the caller's contract makes readable and
        // writable; unaligned reads and writes of plain bytes.
        unsafe {
            let head = src.cast::<u64>().read_unaligned();
            let tail = src.add(n - 8).cast::<u64>().read_unaligned();
            dst.cast::<u64>().write_unaligned(head);
            dst.add(n - 8).cast::<u64>().write_unaligned(tail);
        }
        return;
    }
    // SAFETY: the caller's contract: `n` readable and writable bytes that do
    // not overlap.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
}

/// `parts` one after another, in one buffer (what a transport sends for a
/// frame whose payload comes in more parts than it writes at once).
pub fn gather(parts: &[IoSlice<'_>]) -> Vec<u8> {
    let mut v = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
    for p in parts {
        v.extend_from_slice(p);
    }
    v
}

/// What a transport's `progress` reports.
#[derive(Debug)]
pub enum Event<'a> {
    /// A connection this side opened or accepted can carry frames both ways
    /// (an accepted one is first reported here).
    Up {
        /// Which.
        conn: ConnId,
    },
    /// A frame, in the order the peer sent it on this connection.
    Frame {
        /// On which connection.
        conn: ConnId,
        /// Its header (the engine's, at most [`Transport::MAX_HEADER`] bytes).
        header: Bytes<'a>,
        /// Its payload.
        payload: Bytes<'a>,
    },
    /// The connection is gone: the peer closed it, died, or broke the
    /// transport's own protocol. Every frame it sent before was reported.
    Down {
        /// Which; the id may be reused afterwards.
        conn: ConnId,
        /// Why.
        cause: Cause,
    },
    /// A pull [`Transport::start_pull`] started is over: its destination
    /// is the engine's again. Reported once for every started pull, also
    /// when its connection ends (before or after that `Down`).
    Pulled {
        /// The token the engine gave the pull.
        token: u64,
        /// Whether every byte arrived.
        result: Result<(), Error>,
    },
    /// An RMA [`Transport::start_rma`] started is over: its local buffer is
    /// the engine's again. Reported once for every started one, also when
    /// its connection ends (before or after that `Down`).
    Accessed {
        /// The token the engine gave the operation.
        token: u64,
        /// Whether it was done at the target.
        result: Result<(), Error>,
    },
    /// A device atomic [`Transport::start_atomic`] started is over.
    /// Reported once for every started one, also when its connection ends.
    Fetched {
        /// The token the engine gave it.
        token: u64,
        /// The target word's value before the operation.
        result: Result<u64, Error>,
    },
}

/// A device atomic on an aligned 8-byte word of a peer's region (verbs'
/// `IBV_WR_ATOMIC_FETCH_AND_ADD` and `IBV_WR_ATOMIC_CMP_AND_SWP`); both
/// return the word's old value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceAtomic {
    /// Adds the operand (wrapping).
    FetchAdd(u64),
    /// Writes `swap` if the word equals `compare`.
    CompareSwap {
        /// The value the word must hold.
        compare: u64,
        /// The value written then.
        swap: u64,
    },
}

/// Where a rendezvous payload lies in its sender's memory, as the sender's
/// request to send carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remote {
    /// The payload's address in the sender's memory.
    pub addr: u64,
    /// The key [`Transport::expose`] gave the sender for it, if any.
    pub key: Option<u64>,
    /// For [`Transport::start_rma`]: the stamp the target's grant carried
    /// ([`crate::provider::DomainProvider::grant_stamp`]); 0 for a pull.
    pub stamp: u64,
}

/// How [`Transport::start_pull`] went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pulled {
    /// Every byte is in already (a synchronous copy).
    Done,
    /// The transport moves the bytes; [`Event::Pulled`] reports the end.
    Started,
}

/// A sender's buffer made readable by its peer (a registration with remote
/// read access): the key its request to send carries, and the handle that
/// gives it back ([`Transport::conceal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exposed {
    /// What the peer needs to read it (verbs: the rkey).
    pub key: u64,
    /// The transport's own handle of the registration.
    pub handle: u64,
}

/// Why a connection ended, as the transport saw it; the engine turns it
/// into the error each waiting operation reports, naming the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The peer closed it in order, or its process exited
    /// ([`Error::PeerClosed`]).
    Closed,
    /// It failed, or could not be made, with this OS error
    /// ([`Error::PeerUnreachable`]).
    Failed(i32),
    /// The peer broke the transport's or the engine's protocol
    /// ([`Error::Protocol`]).
    Protocol(&'static str),
    /// The connection could not be made on its route, and a connect to the
    /// same address now takes another (a [`Pair`](super::pair::Pair) whose
    /// first transport's peer refused it): the engine connects again. Never
    /// reported for a connection that came up; where the engine cannot
    /// connect again it reports [`Error::PeerUnreachable`] (`ECONNREFUSED`).
    Rerouted,
    /// The peer's process made no progress for the engine's progress
    /// timeout ([`Error::Stalled`]); the engine's own cause, never a
    /// transport's.
    Stalled,
}

/// Receives what `progress` reports, and says per connection whether to take
/// its next frame now.
pub trait Events {
    /// Whether to take `conn`'s next frame now; `false` leaves it with the
    /// transport (a ring, a socket buffer), so the peer feels back-pressure.
    fn ready(&mut self, conn: ConnId) -> bool {
        let _ = conn;
        true
    }

    /// One event.
    fn event(&mut self, ev: Event<'_>);
}

/// Why `send` did not take a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// No room now (a full ring or socket buffer): try again after progress.
    Full,
    /// The connection is gone or unusable.
    Gone(Cause),
}

/// A connection-oriented transport under the RDM engine.
pub trait Transport: Send {
    /// Longest header the engine may send.
    const MAX_HEADER: usize = 64;

    /// The transport's name (`shm`), for logs and counters.
    fn name(&self) -> &'static str;

    /// The address peers connect to.
    fn address(&self) -> &[u8];

    /// Largest payload one frame may carry.
    fn max_payload(&self) -> usize;

    /// Largest payload one frame on `conn` may carry: [`max_payload`]
    /// unless the transport serves connections differently (a pair: the
    /// transport that carries `conn`).
    ///
    /// [`max_payload`]: Self::max_payload
    fn max_payload_on(&self, conn: ConnId) -> usize {
        let _ = conn;
        self.max_payload()
    }

    /// Opens a connection to the transport address `addr`. Frames may be
    /// sent on it at once (the transport holds them until it is up); `Up`
    /// or `Down` follows from `progress`.
    fn connect(&mut self, addr: &[u8]) -> Result<ConnId, Cause>;

    /// Sends one frame on `conn`; frames of one connection arrive in order.
    fn send(&mut self, conn: ConnId, header: &[u8], payload: &[u8]) -> Result<(), Refused>;

    /// Sends one frame whose payload is `parts`, one after another: what
    /// [`send`](Self::send) of their concatenation sends. A transport that
    /// writes a frame from several buffers (TCP's `sendmsg`) takes them as
    /// they are; the default gathers them into one first.
    fn send_parts(&mut self, conn: ConnId, header: &[u8], parts: &[IoSlice<'_>]) -> Result<(), Refused> {
        match parts {
            [one] => self.send(conn, header, one),
            _ => self.send(conn, header, &gather(parts)),
        }
    }

    /// Copies `dst.len()` bytes at `remote` in the peer's memory into `dst`
    /// at once (the synchronous rendezvous pull: shared memory's
    /// cross-memory attach). [`Error::NotSupported`] when this transport or
    /// this peer cannot; the engine then asks the sender to push the bytes
    /// as frames. The engine calls it only through the default
    /// [`start_pull`](Self::start_pull).
    fn pull(&mut self, conn: ConnId, remote: u64, dst: &mut [u8]) -> Result<(), Error> {
        let _ = (conn, remote, dst);
        Err(Error::NotSupported("pull"))
    }

    /// Whether the sender should push a rendezvous of `len` bytes on `conn`
    /// that this transport could pull: `Some(wait)` asks it to, and the
    /// engine pulls what is left of the push once `wait` passes with no
    /// pushed bytes in (its sender is not running: it shares this CPU, or
    /// was descheduled); `Duration::MAX` never (a size better pushed).
    /// `None`, the default: pull at once. Only a transport whose pull can
    /// start at any offset of the payload, and take any length, says
    /// `Some`.
    fn push_first(&self, conn: ConnId, len: usize) -> Option<std::time::Duration> {
        let _ = (conn, len);
        None
    }

    /// Makes `buf`, the payload of a rendezvous send on `conn`, readable by
    /// the peer: the key its request carries, or `None` where a pull needs
    /// none (shared memory reads by address; TCP never pulls). The engine
    /// keeps `buf` in place until it gives the handle back with
    /// [`conceal`](Self::conceal).
    fn expose(&mut self, conn: ConnId, buf: &[u8]) -> Result<Option<Exposed>, Error> {
        let _ = (conn, buf);
        Ok(None)
    }

    /// Gives back what [`expose`](Self::expose) made readable (on `conn`,
    /// which may be gone by now): its send is over.
    fn conceal(&mut self, conn: ConnId, handle: u64) {
        let _ = (conn, handle);
    }

    /// Starts the rendezvous pull of `len` bytes at `remote` in the peer's
    /// memory into `dst`. [`Pulled::Done`] when every byte is in already;
    /// [`Pulled::Started`] when the transport moves them later and reports
    /// [`Event::Pulled`] with `token`, once (failed, if `conn` ends first).
    /// [`Error::NotSupported`] when this transport or this peer cannot pull:
    /// the engine then asks the sender to push. The default is the
    /// synchronous [`pull`](Self::pull).
    ///
    /// # Safety
    /// `dst..dst + len` must be valid for writes and touched by no one else
    /// from the call until the pull is over: the return for `Done` or an
    /// error, the `Pulled` event for `Started` (or the transport's drop).
    unsafe fn start_pull(
        &mut self,
        conn: ConnId,
        remote: Remote,
        dst: *mut u8,
        len: usize,
        token: u64,
    ) -> Result<Pulled, Error> {
        let _ = token;
        // SAFETY: the caller keeps `dst..dst + len` valid and exclusive
        // for the call.
        let dst = unsafe { std::slice::from_raw_parts_mut(dst, len) };
        self.pull(conn, remote.addr, dst).map(|()| Pulled::Done)
    }

    /// Starts the user's RMA `kind` of `len` bytes between `local` and
    /// `remote` (the target address and the user's remote key) natively on
    /// `conn`, done when the bytes are at the target (a write) or here (a
    /// read): [`Pulled::Started`], then [`Event::Accessed`] with `token`
    /// once (failed, if `conn` ends first), or [`Pulled::Done`] at once.
    /// [`Error::NotSupported`] when this transport, this peer or this key
    /// cannot: the engine serves it in frames. The engine calls it only
    /// for a key, access and range the target said its device reaches.
    ///
    /// # Safety
    /// `local..local + len` must be valid for reads (a write) or writes (a
    /// read) and written by no one else from the call until the operation
    /// is over: the return for `Done` or an error, the `Accessed` event for
    /// `Started` (or the transport's drop).
    unsafe fn start_rma(
        &mut self,
        conn: ConnId,
        kind: RmaKind,
        remote: Remote,
        local: *mut u8,
        len: usize,
        token: u64,
    ) -> Result<Pulled, Error> {
        let _ = (conn, kind, remote, local, len, token);
        Err(Error::NotSupported("native RMA"))
    }

    /// Starts the device atomic `op` on the 8-byte word at `remote` (its
    /// address, aligned to 8, and the user's remote key) on `conn`; its end
    /// is [`Event::Fetched`] with `token`, once (failed, if `conn` ends
    /// first). [`Error::NotSupported`] when this transport or this peer
    /// cannot (a pair's shared-memory side): the engine then has the target
    /// apply it. The engine calls it only for a key and word the target
    /// granted to the device.
    fn start_atomic(&mut self, conn: ConnId, remote: Remote, op: DeviceAtomic, token: u64) -> Result<(), Error> {
        let _ = (conn, remote, op, token);
        Err(Error::NotSupported("device atomics"))
    }

    /// Closes `conn`; no event is reported for it.
    fn close(&mut self, conn: ConnId);

    /// Frames to coalesce: how many a burst of posts may hold back for the
    /// next progress call, which writes them together (0: none, every post
    /// is written at once). Worth it where each write is a system call.
    fn coalesce(&self) -> usize {
        0
    }

    /// Frames a burst may hold back on `conn`: [`coalesce`] unless the
    /// transport serves connections differently (a pair: the transport
    /// that carries `conn`, so a shared-memory peer is never held back by
    /// TCP's rule).
    ///
    /// [`coalesce`]: Self::coalesce
    fn coalesce_on(&self, conn: ConnId) -> usize {
        let _ = conn;
        self.coalesce()
    }

    /// The address that stands for whichever endpoint listens where `addr`
    /// does (TCP: the same with nonce 0), for transports that have such
    /// addresses: an address vector may know a peer only by it (a libfabric
    /// `sockaddr_in`), and its arrivals are reported from that entry.
    fn stand_in(addr: &[u8]) -> Option<Vec<u8>>
    where
        Self: Sized,
    {
        let _ = addr;
        None
    }

    /// The transport's own counters, reported after the engine's.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// Frames sent from now until [`flush`](Self::flush) may wait for it
    /// and share its system calls.
    fn cork(&mut self) {}

    /// Writes what was sent since [`cork`](Self::cork).
    fn flush(&mut self) {}

    /// Whether the transport has no connection, open or opening: its
    /// progress can find only a new peer's. A pair polls such a second
    /// transport less often while its first is busy. The default: `false`.
    fn listening_only(&self) -> bool {
        false
    }

    /// How long a connection may take to open and be admitted (the
    /// engine's handshake) before its peer fails with `ETIMEDOUT`.
    fn connect_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(10)
    }

    /// How often the engine calls [`probe`](Self::probe); `None` (the
    /// default): never. For a transport that learns of a dead peer only
    /// through work it posts (verbs RC).
    fn keepalive(&self) -> Option<std::time::Duration> {
        None
    }

    /// One keepalive tick: `conns` are the connections of the peers
    /// something waits on (none, when nothing does). The transport makes
    /// each show whether its peer is still reachable (verbs: a probe the
    /// peer's device answers) and ends those it finds dead, reporting them
    /// `Down` from `progress`.
    fn probe(&mut self, conns: &[ConnId]) {
        let _ = conns;
    }

    /// Moves data and reports connections and frames to `events`; never blocks.
    fn progress(&mut self, events: &mut dyn Events);

    /// The wait set of a transport that waits on one ([`WaitSet`]: its
    /// descriptors and a wake-up in an epoll set), which then needs no
    /// [`wait_fd`](Self::wait_fd) or [`wake`](Self::wake) of its own.
    fn wait_set(&self) -> Option<&WaitSet> {
        None
    }

    /// A descriptor that becomes readable when `progress` has work, once
    /// [`prepare_wait`](Self::prepare_wait) said the caller may block. The
    /// default is the [`wait_set`](Self::wait_set)'s (-1 without one).
    fn wait_fd(&self) -> RawFd {
        self.wait_set().map_or(-1, AsRawFd::as_raw_fd)
    }

    /// Makes the wait descriptor readable, so a caller blocked on it wakes
    /// (work the engine must retry that no peer will signal). The default
    /// wakes the [`wait_set`](Self::wait_set).
    fn wake(&self) {
        if let Some(w) = self.wait_set() {
            w.wake();
        }
    }

    /// Arms the wait descriptor before the caller blocks on it: `false`
    /// when there is work already, in which case the descriptor is left
    /// readable, so a caller that blocks anyway wakes at once.
    fn prepare_wait(&mut self) -> bool;
}

#[cfg(test)]
mod tests {
    use super::Bytes;

    #[test]
    fn bytes_copy_exactly_what_fits_at_every_length() {
        let src: Vec<u8> = (1..=40).collect();
        for len in 0..=src.len() {
            for room in [0, 1, 7, 8, 9, 15, 16, 17, 40] {
                let mut dst = vec![0xeeu8; room + 3];
                let n = Bytes::new(&src[..len]).copy_to(&mut dst[..room]);
                assert_eq!(n, len.min(room), "{len} bytes into {room}");
                assert_eq!(&dst[..n], &src[..n], "{len} bytes into {room}");
                assert!(
                    dst[n..].iter().all(|&b| b == 0xee),
                    "{len} into {room}: nothing past the copy"
                );
            }
        }
    }

    /// A copy out is the bytes lent, whatever their length (an empty payload
    /// included), in an allocation of its own that nothing zeroed first.
    #[test]
    fn bytes_to_vec_is_the_bytes_whole() {
        for len in [0, 1, 15, 63, 4096, 16 << 10] {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let copy = Bytes::new(&src).to_vec();
            assert_eq!(copy, src, "{len} bytes");
            assert!(len == 0 || copy.as_ptr() != src.as_ptr());
        }
    }
}
