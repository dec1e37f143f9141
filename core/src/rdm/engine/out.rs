//! Frames to a peer, written in order on its connection (but for answers and
//! pushed bytes, which pass a frame waiting for credit): at once while the
//! transport has room, else kept in the peer's queue and written by later
//! progress. A send's completion (eager, inject-complete) comes when its
//! frame is written.

use std::io::IoSlice;

use crate::atomic::AtomicOp;
use crate::complete;
use crate::provider::{Ctx, SendOp};

use super::super::transport::{Cause, ConnId, Refused, Transport};
use super::super::Outstanding;
use super::rma::{self, ReadBack};
use super::wire::{self, Header, Kind, LEN};
use super::State;

/// A frame waiting for room.
pub enum Out {
    /// A frame that owns its payload (hello, answers, injected messages).
    Owned([u8; LEN], Vec<u8>),
    /// An eager send, completed once written.
    Eager([u8; LEN], SendOp),
    /// A remote atomic that waits for no answer, completed once written.
    Atomic([u8; LEN], AtomicOp),
    /// A frame whose payload is the buffer of the send under this key (an
    /// acknowledged eager send, which stays until its answer).
    Held([u8; LEN], usize),
    /// The bytes of RMA write `key`, from `off`, in frames.
    RmaWrite {
        /// The operation.
        key: usize,
        /// Bytes written so far.
        off: usize,
    },
    /// A read this side serves, streamed back.
    ReadBack(ReadBack),
    /// The bytes of rendezvous send `key`, from `off`, pushed to the
    /// receiver's token `to` in frames.
    Push {
        /// The send's token: a send that ended before this was written
        /// (its receiver pulled the rest) names nothing, and its key may
        /// be another send's by then.
        send: u64,
        /// The receiver's token.
        to: u64,
        /// Bytes written so far.
        off: usize,
    },
}

impl State {
    /// Queues `out` behind what peer `p` already waits to write; it spends
    /// `cost` of the peer's credit when written.
    pub(super) fn enqueue(&mut self, p: usize, cost: u64, out: Out) {
        if let Some(e) = self.peers.get_mut(p) {
            e.queue.push_back((cost, out));
            e.queued_cost += cost;
            self.queued += 1;
        }
    }

    /// What a post to peer `p` does once its frames are queued: in a burst
    /// they wait for the next progress (up to the `coalesce_on` frames of
    /// the peer's connection); otherwise they are written now, and start a
    /// burst.
    pub(super) fn posted<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>, p: usize) {
        let (queued, limit) = self.peers.get(p).map_or((0, 0), |e| {
            (e.queue.len(), e.tx.map_or(self.coalesce, |tx| t.coalesce_on(tx)))
        });
        if self.burst && queued < limit {
            self.stats.coalesced += 1;
            if std::mem::take(&mut self.armed) {
                // The next progress writes it: make sure one comes.
                t.wake();
            }
            return;
        }
        if queued > 1 {
            t.cork();
            self.flush(t, cx, p);
            t.flush();
        } else {
            self.flush(t, cx, p);
        }
        self.burst = self.coalesce > 0;
    }

    /// Writes one frame (header bytes `h` as sent) to peer `p` at once,
    /// spending `cost` of its credit, when nothing waits before it and the
    /// transport has room: `false`
    /// leaves everything as it was, for the caller to queue the frame (a
    /// connection that is gone is found again by the flush that follows).
    #[inline]
    pub(super) fn write_now<T: Transport>(&mut self, t: &mut T, p: usize, cost: u64, h: &[u8], payload: &[u8]) -> bool {
        self.write_now_by(t, p, cost, |t, tx| t.send(tx, h, payload))
    }

    /// [`write_now`](Self::write_now) of a frame whose payload is `parts`
    /// one after another, written from them as they are.
    pub(super) fn write_parts_now<T: Transport>(
        &mut self,
        t: &mut T,
        p: usize,
        cost: u64,
        h: &[u8],
        parts: &[IoSlice<'_>],
    ) -> bool {
        self.write_now_by(t, p, cost, |t, tx| t.send_parts(tx, h, parts))
    }

    /// What `write_now` and `write_parts_now` share: `send` writes the frame
    /// on the peer's connection.
    #[inline(always)]
    fn write_now_by<T: Transport>(
        &mut self,
        t: &mut T,
        p: usize,
        cost: u64,
        send: impl FnOnce(&mut T, ConnId) -> Result<(), Refused>,
    ) -> bool {
        let Some(e) = self.peers.get_mut(p) else { return false };
        let Some(tx) = e.tx else { return false };
        if self.burst && t.coalesce_on(tx) > 0 {
            return false;
        }
        if e.gated() || !e.queue.is_empty() || (cost > 0 && !e.credit.can_send(cost, 0)) {
            return false;
        }
        if send(t, tx).is_err() {
            return false;
        }
        e.wrote(cost);
        self.burst = self.coalesce > 0;
        true
    }

    /// Writes what peer `p` has queued, in order, while the transport takes it.
    /// A frame that waits for credit holds back those behind it but the
    /// ones that spend none and answer what the peer already has
    /// ([`overtakes`]): they are written past it.
    pub(super) fn flush<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>, p: usize) {
        let Some(tx) = self.connected(t, p) else { return };
        let room = t.max_payload_on(tx);
        loop {
            let Some(e) = self.peers.get_mut(p) else { return };
            let gated = e.gated();
            let Some((cost, front)) = e.queue.front_mut() else {
                return;
            };
            let cost = *cost;
            if gated && !super::admit::opens(front) {
                return;
            }
            if cost > 0 && !e.credit.can_send(cost, 0) {
                if !e.starved {
                    e.starved = true;
                    self.counted.credit_waits += 1;
                }
                return self.overtake(t, cx, p, tx, room);
            }
            let written = write(t, cx, &mut self.sends, &self.rmas, &mut self.motion, tx, room, front);
            if !self.wrote(cx, p, tx, 0, written) {
                return;
            }
        }
    }

    /// Writes the frames of peer `p`'s queue that [`overtakes`] lets past
    /// a front waiting for credit. Without this, a receiver holding its
    /// sender's credit in unexpected messages it takes only after a
    /// rendezvous completes (as a byte stream that reads on once a large
    /// message is whole does) waits for pushed bytes queued behind a frame
    /// that waits for that credit, and its credit returns wait the same way
    /// on its own side: neither side moves again.
    fn overtake<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>, p: usize, tx: ConnId, room: usize) {
        let mut at = 1;
        loop {
            let Some(e) = self.peers.get_mut(p) else { return };
            let Some(i) = e.queue.iter().skip(at).position(|(_, o)| overtakes(o)) else {
                return;
            };
            at += i;
            let Some((_, out)) = e.queue.get_mut(at) else { return };
            let written = write(t, cx, &mut self.sends, &self.rmas, &mut self.motion, tx, room, out);
            if !self.wrote(cx, p, tx, at, written) {
                return;
            }
        }
    }

    /// Accounts for the attempt to write the frame at `at` in peer `p`'s
    /// queue: written, it leaves the queue (completing an eager send or an
    /// atomic that waits for no answer); refused, the peer is blocked or
    /// its connection doomed. Whether to go on writing.
    fn wrote(&mut self, cx: &mut Ctx<'_>, p: usize, tx: ConnId, at: usize, written: Result<(), Refused>) -> bool {
        let Some(e) = self.peers.get_mut(p) else { return false };
        match written {
            Ok(()) => {
                self.motion += 1;
                let Some((cost, out)) = e.queue.remove(at) else {
                    return false;
                };
                self.queued -= 1;
                e.queued_cost -= cost;
                e.wrote(cost);
                match out {
                    Out::Eager(_, op) => complete::send(&mut cx.cq, self.selective, op, Ok(())),
                    Out::Atomic(_, op) => complete::atomic(&mut cx.cq, op, Ok(0)),
                    _ => {}
                }
                true
            }
            Err(Refused::Full) => {
                e.blocked = true;
                self.refused = true;
                false
            }
            Err(Refused::Gone(cause)) => {
                self.doomed.push((tx, cause));
                false
            }
        }
    }

    /// The connection to write peer `p`'s frames on, retrying a connect the
    /// transport could not start before; a connect that fails ends the peer.
    fn connected<T: Transport>(&mut self, t: &mut T, p: usize) -> Option<ConnId> {
        let e = self.peers.get(p)?;
        if e.tx.is_some() {
            return e.tx;
        }
        match dial(t, &e.name) {
            Ok(Some(c)) => {
                self.peers.link(c, Some(p));
                Some(c)
            }
            Ok(None) => None,
            Err(cause) => {
                let at = self.serial(p);
                self.failed.push((at, cause));
                None
            }
        }
    }

    /// Writes every peer's queue, each connection's frames together, and
    /// ends the burst.
    #[inline]
    pub(super) fn flush_all<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>) {
        self.burst = false;
        self.armed = true;
        // Checked inline: most progress calls have nothing queued, and the
        // call itself costs more than the check.
        if self.queued != 0 {
            self.flush_queued(t, cx);
        }
    }

    fn flush_queued<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>) {
        t.cork();
        for p in self.peers.keys() {
            self.flush(t, cx, p);
        }
        t.flush();
    }
}

/// Whether a queued frame may be written past a front that waits for
/// credit: it spends none, and it carries bytes of, or answers to,
/// operations the peer already matched or sent (pushed rendezvous bytes,
/// clear-to-send, finish, delivered), credit, or a liveness probe. The
/// peer takes none of them in message order, so nothing it matches
/// changes; messages, RMA and atomics keep their order.
fn overtakes(out: &Out) -> bool {
    const ANSWERS: [Kind; 6] = [
        Kind::Fin,
        Kind::Delivered,
        Kind::Cts,
        Kind::Credit,
        Kind::Ping,
        Kind::Pong,
    ];
    match out {
        Out::Push { .. } => true,
        Out::Owned(h, payload) => payload.is_empty() && ANSWERS.iter().any(|&k| h[0] == k as u8),
        _ => false,
    }
}

/// Writes `out` (all of it the transport takes: a pushed or RMA payload
/// goes in frames of at most `room` bytes, and where it stopped is kept
/// in it) on connection `tx`; each frame of such a payload taken before
/// the whole is counted in `motion`.
#[allow(clippy::too_many_arguments)]
fn write<T: Transport>(
    t: &mut T,
    cx: &mut Ctx<'_>,
    sends: &mut Outstanding<super::Send>,
    rmas: &Outstanding<rma::RmaTx>,
    motion: &mut u64,
    tx: ConnId,
    room: usize,
    out: &mut Out,
) -> Result<(), Refused> {
    match out {
        Out::Owned(h, payload) => t.send(tx, wire::trimmed(h), payload),
        Out::Eager(h, op) => t.send(tx, wire::trimmed(h), op.buf.as_slice()),
        Out::Atomic(h, _) => t.send(tx, wire::trimmed(h), &[]),
        Out::Held(h, key) => match sends.get(*key) {
            Some(s) => t.send(tx, wire::trimmed(h), s.op.buf.as_slice()),
            None => Ok(()),
        },
        Out::Push { send, to, off } => match sends.key_of(*send).and_then(|k| sends.get_mut(k)) {
            Some(s) => {
                let buf = s.op.buf.as_slice();
                let mut r = Ok(());
                while *off < buf.len() {
                    let n = room.min(buf.len() - *off);
                    let mut h = Header::new(Kind::Data);
                    h.token = *to;
                    h.off = *off as u64;
                    r = t.send(tx, wire::trimmed(&h.encode()), &buf[*off..*off + n]);
                    if r.is_err() {
                        break;
                    }
                    *off += n;
                    *motion += 1;
                }
                if r.is_ok() {
                    s.state.moved(true);
                }
                r
            }
            None => Ok(()),
        },
        Out::RmaWrite { key, off } => loop {
            let Some((h, bytes)) = rma::write_frame(rmas, *key, *off, room) else {
                break Ok(());
            };
            let sent = t.send(tx, wire::trimmed(&h.encode()), bytes);
            if sent.is_err() || h.flags & wire::LAST != 0 {
                break sent;
            }
            *off += bytes.len();
            *motion += 1;
        },
        Out::ReadBack(r) => loop {
            let (h, bytes, n) = rma::read_frame(cx.domain, r, room);
            let sent = t.send(tx, wire::trimmed(&h.encode()), bytes);
            if sent.is_err() || h.kind == Kind::RmaDone {
                break sent;
            }
            r.off += n;
            *motion += 1;
        },
    }
}

/// Connects to the endpoint named `name` (our provider's id, then the
/// transport address): `None` while the transport cannot start it yet (a
/// full listen backlog), retried by the next flush.
pub(super) fn dial<T: Transport>(t: &mut T, name: &crate::addr::Address) -> Result<Option<ConnId>, Cause> {
    match t.connect(&name.as_bytes()[1..]) {
        Ok(c) => Ok(Some(c)),
        Err(Cause::Failed(libc::EAGAIN)) => Ok(None),
        Err(cause) => Err(cause),
    }
}
