//! One RPC connection as tarpc's transport: a `Stream` of received messages
//! and a `Sink` of messages to send, on [`AsyncEndpoint`] tagged messages.

use std::collections::VecDeque;
use std::io;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use futures::stream::FuturesUnordered;
use futures::{Future, Sink, Stream, StreamExt};
use tokio::io::ReadBuf;
use xfer::aio::{AsyncEndpoint, BufResult, Received, Recv};
use xfer::PeerAddr;

use crate::codec::{Bincode, Decode, Encode, Raw};
use crate::wire::{self, Frame, BODY, FRAME, FRAME_MAX};

/// Frame receives kept posted per connection (128 KiB of frame buffers).
/// Messages beyond them wait in the provider's unexpected queue, bounded
/// by its eager credit, until the next receive is posted, which takes one
/// at once: a copy more (into the queue, then out of it), but no
/// completion to route and wake for, and a few buffers reused while hot.
pub const RECV_WINDOW: usize = 4;
/// Sends in flight before `poll_ready` waits for one to complete.
pub const SENDS_MAX: usize = 128;
/// The smallest byte write ([`Transport::poll_write_bytes`]) sent at once
/// as a frame of its own, from the writer's buffers: smaller ones are
/// copied into the frame being filled, which carries several of them in
/// one message.
pub const INJECT_MIN: usize = 4 << 10;
/// The most buffers of one byte write sent from as they are (with the
/// frame's kind and length before them).
const INJECT_PARTS: usize = 5;

type SendFut = Pin<Box<dyn Future<Output = BufResult<usize>> + Send>>;

/// Bytes of large messages' bodies a connection receives ahead of the one
/// it waits for (their receives posted, so they move at once), beyond the
/// first: what the peer's announcements can make it allocate.
pub const BODIES_AHEAD: usize = 4 << 20;

/// Frame buffers kept for reuse after their send completed.
const SPARE_FRAMES: usize = 4;

/// A posted receive: still waiting, or done (when its first poll, right
/// after posting, found a message already there).
enum Posted {
    Waiting(Recv),
    Done(BufResult<Received>),
}

impl Posted {
    /// Polls `r`, just posted, once: its first poll takes what its posting
    /// (and those before it, [`Recv::settled_by_later`]) queued.
    fn poll_first(mut r: Recv, cx: &mut Context<'_>) -> Posted {
        match Pin::new(&mut r).poll(cx) {
            Poll::Ready(got) => Posted::Done(got),
            Poll::Pending => Posted::Waiting(r),
        }
    }
}

/// A received message in sending order: decoded, or a large one whose
/// body is still on its way (what follows it waits for it).
enum Next<In> {
    Ready(In),
    Body(Posted),
    /// A `DATA` frame kept whole for byte reads ([`Transport::poll_read_bytes`]):
    /// its buffer and where its (checked) messages lie in it.
    Frame(Vec<u8>, usize, usize),
}

/// What [`Transport::poll_item`] yields: a message, or a frame of them
/// kept whole.
enum Item<In> {
    One(In),
    Frame(Vec<u8>, usize, usize),
}

/// Received bytes being read by [`Transport::poll_read_bytes`]: a frame's
/// messages (each behind its length) or one message's own buffer.
struct Reading {
    buf: Vec<u8>,
    /// The next byte to read.
    at: usize,
    /// The end of what is to be read.
    end: usize,
    /// Bytes left of the current message.
    left: usize,
    /// A frame (a length before each message, the buffer kept for reuse).
    frame: bool,
}

/// A tarpc transport over one xfer connection (see [`crate::wire`]):
/// `Stream<Item = io::Result<In>>` and `Sink<Out, Error = io::Error>`,
/// messages encoded by `C` ([`Bincode`] unless said otherwise; [`crate::Raw`]
/// for byte strings sent as they are).
///
/// Messages written between two flushes go in one tagged xfer message (a
/// `DATA` frame of at most [`FRAME_MAX`] bytes), as tokio's framed writers
/// batch them into one write; a message too large for a frame goes as a
/// `LARGE` frame and a `BODY` message of its own tag, into a receive of
/// exactly its size. The stream yields messages in the order they were
/// sent, large or small: those after a large one wait for its body.
/// Closing the sink sends `CLOSE`; the peer's stream ends after every
/// message sent before it. Dropping the transport cancels its posted
/// receives; sends already posted still complete (the async layer's cancel
/// safety).
pub struct Transport<In, Out, C = Bincode> {
    ep: Arc<AsyncEndpoint>,
    peer: PeerAddr,
    /// Our id of the connection: the tags of what we receive.
    local: u32,
    /// The peer's id of it: the tags of what we send.
    remote: u32,

    /// Frame receives in posting order, [`RECV_WINDOW`] of them. Identical
    /// receives match arrivals in posting order, so only the first is
    /// polled: the others complete after it.
    frames: VecDeque<Posted>,
    frames_in: u64,
    /// The frame count of the peer's `CLOSE`.
    close_after: Option<u64>,
    spare: Vec<Vec<u8>>,
    /// Messages received and not yet yielded, in sending order: decoded
    /// ones, and large ones whose body receive (each of its own tag) is
    /// posted. While the first is a body on its way, frames are taken only
    /// as long as the bodies posted hold less than [`BODIES_AHEAD`] bytes.
    ready: VecDeque<Next<In>>,
    /// Bytes of the bodies posted and not yet yielded.
    ahead: usize,
    /// The stream ended (peer closed, or an error was returned).
    ended: bool,
    /// `DATA` frames are kept whole for byte reads rather than decoded.
    keep_frames: bool,
    /// What [`Transport::poll_read_bytes`] is reading.
    reading: Option<Reading>,

    /// Sends not yet polled, so not yet posted, in the order they were
    /// made: each is polled (posted) in that order before it joins `sends`,
    /// so that messages of one tag match the peer's receives in sending
    /// order whichever order `sends` polls its futures in.
    fresh: VecDeque<SendFut>,
    /// Sends posted and not yet complete.
    sends: FuturesUnordered<SendFut>,
    /// The `DATA` frame being filled (empty: none).
    batch: Vec<u8>,
    /// Buffers of sent frames, for the next ones.
    spare_out: Vec<Vec<u8>>,
    frames_out: u64,
    next_seq: u32,
    closed: bool,

    _types: PhantomData<fn(Out, C) -> In>,
}

// Nothing in it is pinned: its futures are boxed, decoded messages are moved
// out by value.
impl<In, Out, C> Unpin for Transport<In, Out, C> {}

impl<In, Out, C> Transport<In, Out, C> {
    /// A transport to `peer`, receiving tags of connection `local` and
    /// sending with tags of connection `remote`.
    pub(crate) fn new(ep: Arc<AsyncEndpoint>, peer: PeerAddr, local: u32, remote: u32) -> Self {
        Transport {
            ep,
            peer,
            local,
            remote,
            frames: VecDeque::with_capacity(RECV_WINDOW),
            frames_in: 0,
            close_after: None,
            spare: Vec::new(),
            ready: VecDeque::new(),
            ahead: 0,
            ended: false,
            keep_frames: false,
            reading: None,
            fresh: VecDeque::new(),
            sends: FuturesUnordered::new(),
            batch: Vec::new(),
            spare_out: Vec::new(),
            frames_out: 0,
            next_seq: 0,
            closed: false,
            _types: PhantomData,
        }
    }

    /// The peer's handle in the endpoint's address vector.
    pub fn peer(&self) -> PeerAddr {
        self.peer
    }

    /// Posts frame receives up to [`RECV_WINDOW`]. Identical receives
    /// complete in posting order and only the first is polled, so only the
    /// last one posted here takes what every posting queued (frames
    /// already waiting, [`Recv::take_ready`]), without parking: the
    /// caller polls the first receive next, which parks if need be. The
    /// others have no waker until they are first.
    fn post_frames(&mut self) {
        let tag = wire::tag(FRAME, self.local, 0);
        let want = RECV_WINDOW.saturating_sub(self.frames.len());
        for left in (0..want).rev() {
            let buf = self.spare.pop().unwrap_or_else(|| vec![0; FRAME_MAX]);
            let mut r = self.ep.post_trecv(PeerAddr::UNSPEC, tag, 0, buf);
            // The last one posted takes what every posting queued; the
            // task polls the first of them next (`poll_frame`), which parks
            // if need be, so this one does not.
            let posted = match left {
                0 => match r.take_ready() {
                    Some(got) => Posted::Done(got),
                    None => Posted::Waiting(r),
                },
                _ => {
                    r.settled_by_later();
                    Posted::Waiting(r)
                }
            };
            self.frames.push_back(posted);
        }
    }

    /// Posts the receive of a large message's body now (so it does not
    /// wait as unexpected, and a rendezvous starts at once), queued behind
    /// the messages before it.
    fn post_body(&mut self, seq: u32, len: u64, cx: &mut Context<'_>) -> io::Result<()> {
        let len = usize::try_from(len).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "body too large"))?;
        self.ahead += len;
        let tag = wire::tag(BODY, self.local, seq);
        let r = self.ep.post_trecv(PeerAddr::UNSPEC, tag, 0, vec![0; len]);
        self.ready.push_back(Next::Body(Posted::poll_first(r, cx)));
        Ok(())
    }

    /// The first message received and not yielded, once it is whole:
    /// `Pending` while it is a body on its way.
    fn poll_ready_item(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<Item<In>>>>
    where
        C: Decode<In>,
    {
        let got = match self.ready.front_mut() {
            None => return Poll::Ready(None),
            Some(Next::Body(Posted::Waiting(r))) => ready!(Pin::new(r).poll(cx)),
            Some(_) => match self.ready.pop_front() {
                Some(Next::Ready(item)) => return Poll::Ready(Some(Ok(Item::One(item)))),
                Some(Next::Frame(buf, at, end)) => return Poll::Ready(Some(Ok(Item::Frame(buf, at, end)))),
                Some(Next::Body(Posted::Done(got))) => return Poll::Ready(self.body(got).map(|r| r.map(Item::One))),
                _ => return Poll::Ready(None),
            },
        };
        self.ready.pop_front();
        Poll::Ready(self.body(got).map(|r| r.map(Item::One)))
    }

    /// Keeps a frame buffer for a later frame receive.
    fn recycle(&mut self, buf: Vec<u8>) {
        if self.spare.len() < RECV_WINDOW && buf.len() == FRAME_MAX {
            self.spare.push(buf);
        }
    }

    /// The first frame receive's result, once it has one.
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<BufResult<Received>>> {
        let got = match self.frames.front_mut() {
            None => return Poll::Ready(None),
            Some(Posted::Waiting(r)) => ready!(Pin::new(r).poll(cx)),
            Some(Posted::Done(_)) => match self.frames.pop_front() {
                Some(Posted::Done(got)) => return Poll::Ready(Some(got)),
                _ => return Poll::Ready(None),
            },
        };
        self.frames.pop_front();
        Poll::Ready(Some(got))
    }

    /// A large message whose body arrived: decoded.
    fn body(&mut self, (r, buf): BufResult<Received>) -> Option<io::Result<In>>
    where
        C: Decode<In>,
    {
        self.ahead = self.ahead.saturating_sub(buf.len());
        let out = match r {
            Ok(got) if got.len == buf.len() => C::decode_body(buf),
            Ok(got) => {
                let e = format!("body of {} bytes, announced {}", got.len, buf.len());
                Err(io::Error::new(io::ErrorKind::InvalidData, e))
            }
            Err(e) => Err(e.into()),
        };
        if out.is_err() {
            self.ended = true;
        }
        Some(out)
    }

    fn send(&mut self, tag: u64, buf: Vec<u8>) {
        let (ep, peer) = (self.ep.clone(), self.peer);
        self.fresh
            .push_back(Box::pin(async move { ep.tsend(peer, tag, buf).await }));
    }

    /// Sends made and not yet complete.
    fn in_flight(&self) -> usize {
        self.fresh.len() + self.sends.len()
    }

    /// Posts the sends made since the last call, in the order they were
    /// made (a send's first poll posts it), taking the results of those
    /// that complete at once.
    fn post_fresh(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        while let Some(mut f) = self.fresh.pop_front() {
            match f.as_mut().poll(cx) {
                Poll::Ready(r) => self.sent(r)?,
                Poll::Pending => self.sends.push(f),
            }
        }
        Ok(())
    }

    /// Takes the result of a completed send, keeping a frame-sized buffer
    /// for the next frame.
    fn sent(&mut self, (r, mut buf): BufResult<usize>) -> io::Result<()> {
        if buf.capacity() == FRAME_MAX && self.spare_out.len() < SPARE_FRAMES {
            buf.clear();
            self.spare_out.push(buf);
        }
        r.map(drop).map_err(io::Error::from)
    }

    /// Starts a `DATA` frame in `batch`.
    fn open_batch(&mut self) {
        self.batch = self.spare_out.pop().unwrap_or_else(|| Vec::with_capacity(FRAME_MAX));
        self.batch.push(wire::DATA);
    }

    /// Sends the `DATA` frame being filled, if any.
    fn send_batch(&mut self) {
        if !self.batch.is_empty() {
            let frame = std::mem::take(&mut self.batch);
            self.send(wire::tag(FRAME, self.remote, 0), frame);
            self.frames_out += 1;
        }
    }

    fn fail<T>(&mut self, e: io::Error) -> Poll<Option<io::Result<T>>> {
        self.ended = true;
        Poll::Ready(Some(Err(e)))
    }
}

impl<Out> Transport<Vec<u8>, Out, Raw> {
    /// Reads received bytes into `out`, in sending order, as a byte stream
    /// reads: straight from the frame they arrived in (one copy, none into
    /// a message of their own first), or from a large message's body.
    /// `Ready(Ok(()))` with nothing put in `out` (which had room) is the
    /// end of the stream, after everything the peer sent before closing.
    pub fn poll_read_bytes(&mut self, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.keep_frames = true;
        if out.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            if let Some(r) = &mut self.reading {
                if r.left == 0 && r.frame && r.end - r.at >= wire::PER_MESSAGE {
                    // Checked when the frame arrived: a length, then its
                    // bytes (bounded again all the same).
                    let mut len = [0; wire::PER_MESSAGE];
                    len.copy_from_slice(&r.buf[r.at..r.at + wire::PER_MESSAGE]);
                    r.at += wire::PER_MESSAGE;
                    r.left = (u32::from_le_bytes(len) as usize).min(r.end - r.at);
                    continue;
                }
                if r.left > 0 {
                    let n = out.remaining().min(r.left);
                    out.put_slice(&r.buf[r.at..r.at + n]);
                    r.at += n;
                    r.left -= n;
                    return Poll::Ready(Ok(()));
                }
                if let Some(done) = self.reading.take().filter(|r| r.frame) {
                    self.recycle(done.buf);
                }
                continue;
            }
            self.reading = match ready!(self.poll_item(cx)) {
                Some(Ok(Item::One(buf))) => Some(Reading {
                    at: 0,
                    end: buf.len(),
                    left: buf.len(),
                    buf,
                    frame: false,
                }),
                Some(Ok(Item::Frame(buf, at, end))) => Some(Reading {
                    buf,
                    at,
                    end,
                    left: 0,
                    frame: true,
                }),
                Some(Err(e)) => return Poll::Ready(Err(e)),
                None => return Poll::Ready(Ok(())),
            };
        }
    }
}

impl<In> Transport<In, Vec<u8>, Raw> {
    /// Sends the `total` bytes of `bufs` as a `DATA` frame of one message
    /// straight from them (the endpoint's vectored inject: over TCP one
    /// `sendmsg` from the writer's buffers, no copy into a frame of ours and
    /// no send completion to wait for), when every send made before is
    /// complete, so that nothing of ours is still to be written ahead of
    /// it. `false` when it cannot (sends in flight, more buffers or bytes
    /// than a frame takes, the peer's credit short): the caller copies them
    /// into a frame instead.
    fn injects(&mut self, bufs: &[io::IoSlice<'_>], total: usize, cx: &mut Context<'_>) -> io::Result<bool> {
        if bufs.len() > INJECT_PARTS || 1 + wire::PER_MESSAGE + total > FRAME_MAX {
            return Ok(false);
        }
        self.post_fresh(cx)?;
        // Polled only when not empty: an empty set's poll still registers
        // the waker, and this runs once per write.
        while !self.sends.is_empty() {
            match self.sends.poll_next_unpin(cx) {
                Poll::Ready(Some(r)) => self.sent(r)?,
                _ => break,
            }
        }
        if !self.sends.is_empty() {
            return Ok(false);
        }
        let mut head = [wire::DATA; 1 + wire::PER_MESSAGE];
        head[1..].copy_from_slice(&(total as u32).to_le_bytes());
        let mut parts = [io::IoSlice::new(&[]); 1 + INJECT_PARTS];
        parts[0] = io::IoSlice::new(&head);
        parts[1..=bufs.len()].copy_from_slice(bufs);
        let tag = wire::tag(FRAME, self.remote, 0);
        match self.ep.endpoint().tinjectv(self.peer, tag, &parts[..=bufs.len()]) {
            Ok(()) => {
                self.frames_out += 1;
                Ok(true)
            }
            // Short of credit, or over the endpoint's inject size: sent as
            // a send of its own, which waits for what the inject cannot.
            Err(_) => Ok(false),
        }
    }

    /// Writes the bytes of `bufs` (as many as the `DATA` frame being filled
    /// takes, at least one) as one message, copied once, straight into that
    /// frame: what [`Sink::start_send`] of a `Vec` of them would send, with
    /// no `Vec` to fill first. For byte streams over the transport, whose
    /// small writes need no message of their own. A write of at least
    /// [`INJECT_MIN`] bytes that fits a frame, made while no frame is being
    /// filled and every earlier send is complete, is sent at once from
    /// `bufs` as a frame of its own (the endpoint's vectored inject), not
    /// copied. `Pending` while the connection has [`SENDS_MAX`] sends in
    /// flight and a frame must open.
    pub fn poll_write_bytes(&mut self, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        if self.closed {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, "rpc transport closed")));
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Poll::Ready(Ok(0));
        }
        if self.batch.is_empty() && total >= INJECT_MIN && self.injects(bufs, total, cx)? {
            return Poll::Ready(Ok(total));
        }
        if !self.batch.is_empty() && self.batch.len() + wire::PER_MESSAGE >= FRAME_MAX {
            self.send_batch();
        }
        if self.batch.is_empty() {
            ready!(Sink::<Vec<u8>>::poll_ready(Pin::new(&mut *self), cx))?;
            self.open_batch();
        }
        let n = total.min(FRAME_MAX - self.batch.len() - wire::PER_MESSAGE);
        wire::push_len(&mut self.batch, n);
        let mut left = n;
        for b in bufs {
            let take = b.len().min(left);
            self.batch.extend_from_slice(&b[..take]);
            left -= take;
            if left == 0 {
                break;
            }
        }
        Poll::Ready(Ok(n))
    }
}

impl<In, Out, C: Decode<In>> Stream for Transport<In, Out, C> {
    type Item = io::Result<In>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<io::Result<In>>> {
        let me = self.get_mut();
        loop {
            match ready!(me.poll_item(cx)) {
                Some(Ok(Item::One(item))) => return Poll::Ready(Some(Ok(item))),
                Some(Ok(Item::Frame(buf, at, end))) => {
                    // Kept for byte reads, read as messages: decoded now,
                    // ahead of what came after them.
                    let mut decoded = Vec::new();
                    for m in wire::messages(&buf[at..end]) {
                        match m.and_then(C::decode) {
                            Ok(item) => decoded.push(item),
                            Err(e) => return me.fail(e),
                        }
                    }
                    me.recycle(buf);
                    for item in decoded.into_iter().rev() {
                        me.ready.push_front(Next::Ready(item));
                    }
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => return Poll::Ready(None),
            }
        }
    }
}

impl<In, Out, C: Decode<In>> Transport<In, Out, C> {
    /// The next message in sending order, or (for byte reads) the next
    /// `DATA` frame kept whole.
    fn poll_item(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<Item<In>>>> {
        let me = self;
        loop {
            if me.ended {
                return Poll::Ready(None);
            }
            // A body on its way first: frames after it may still be taken
            // (their bodies' receives posted early), within BODIES_AHEAD.
            let waiting = match me.poll_ready_item(cx) {
                Poll::Ready(Some(item)) => return Poll::Ready(Some(item)),
                Poll::Ready(None) => false,
                Poll::Pending => true,
            };
            match me.close_after {
                Some(n) if n == me.frames_in => {
                    if waiting {
                        return Poll::Pending;
                    }
                    me.ended = true;
                    return Poll::Ready(None);
                }
                Some(_) => {}
                None => me.post_frames(),
            }
            if waiting && me.ahead >= BODIES_AHEAD {
                return Poll::Pending;
            }
            let (r, buf) = match me.poll_frame(cx) {
                Poll::Ready(Some(got)) => got,
                Poll::Ready(None) => {
                    let e = io::Error::new(io::ErrorKind::InvalidData, "peer closed before all its frames arrived");
                    return me.fail(e);
                }
                Poll::Pending => return Poll::Pending,
            };
            let len = match r {
                Ok(got) => got.len,
                Err(e) => return me.fail(e.into()),
            };
            let out = match wire::parse(&buf[..len]) {
                Err(e) => Err(e),
                Ok(Frame::Data(bytes)) if me.keep_frames => {
                    me.frames_in += 1;
                    let checked = wire::messages(bytes).try_for_each(|m| m.map(drop));
                    if checked.is_ok() {
                        // Read from where it landed; the buffer comes back
                        // for reuse once read.
                        me.ready.push_back(Next::Frame(buf, 1, len));
                        continue;
                    }
                    checked
                }
                Ok(Frame::Data(bytes)) => {
                    me.frames_in += 1;
                    wire::messages(bytes).try_for_each(|m| {
                        me.ready.push_back(Next::Ready(C::decode(m?)?));
                        Ok(())
                    })
                }
                Ok(Frame::Large { seq, len }) => {
                    me.frames_in += 1;
                    me.post_body(seq, len, cx)
                }
                Ok(Frame::Close { sent }) => {
                    tracing::debug!(conn = me.local, sent, got = me.frames_in, "rpc: peer closed");
                    me.close_after = Some(sent);
                    Ok(())
                }
            };
            me.recycle(buf);
            if let Err(e) = out {
                return me.fail(e);
            }
        }
    }
}

impl<In, Out, C: Encode<Out>> Sink<Out> for Transport<In, Out, C> {
    type Error = io::Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        me.post_fresh(cx)?;
        while me.in_flight() >= SENDS_MAX {
            match ready!(me.sends.poll_next_unpin(cx)) {
                Some(r) => me.sent(r)?,
                None => break,
            }
        }
        Poll::Ready(Ok(()))
    }

    fn start_send(self: Pin<&mut Self>, item: Out) -> io::Result<()> {
        let me = self.get_mut();
        if me.closed {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "rpc transport closed"));
        }
        // Sized first (no copy), so that every message is encoded once,
        // straight where it is sent from.
        let size = C::encoded_len(&item)?;
        if 1 + wire::PER_MESSAGE + size > FRAME_MAX {
            // No frame holds it: a body of its own, after the frame being
            // filled (the receiver yields it in that order).
            let body = C::into_body(item, size)?;
            me.send_batch();
            let seq = me.next_seq;
            me.next_seq = seq.wrapping_add(1);
            me.send(wire::tag(FRAME, me.remote, 0), wire::large(seq, body.len()));
            me.send(wire::tag(BODY, me.remote, seq), body);
            me.frames_out += 1;
            return Ok(());
        }
        if me.batch.len() + wire::PER_MESSAGE + size > FRAME_MAX {
            me.send_batch();
        }
        let fresh = me.batch.is_empty();
        if fresh {
            me.open_batch();
        }
        let at = me.batch.len();
        wire::push_len(&mut me.batch, size);
        if let Err(e) = C::encode_into(&item, &mut me.batch) {
            me.batch.truncate(if fresh { 0 } else { at });
            return Err(e);
        }
        Ok(())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        me.send_batch();
        me.post_fresh(cx)?;
        while !me.sends.is_empty() {
            match ready!(me.sends.poll_next_unpin(cx)) {
                Some(r) => me.sent(r)?,
                None => break,
            }
        }
        Poll::Ready(Ok(()))
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.closed {
            self.send_batch();
            tracing::debug!(conn = self.local, sent = self.frames_out, "rpc: closing");
            self.closed = true;
            let (tag, frame) = (wire::tag(FRAME, self.remote, 0), wire::close(self.frames_out));
            self.send(tag, frame);
        }
        self.poll_flush(cx)
    }
}
