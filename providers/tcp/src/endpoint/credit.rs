//! Eager credit: how much a peer may send us as Eager frames, so that a
//! receiver that posts no receives buffers a bounded amount per connection
//! (docs/PROTOCOL.md, "Eager credit").
//!
//! Each side of a connection starts with [`CREDIT_INIT`] to spend. An Eager
//! frame costs [`eager_cost`] of the sender's credit. The receiver earns the
//! cost back when the message is consumed (read into a matched receive, or
//! later taken by a posted receive) and returns it in a Credit frame once a
//! quarter of its budget (`TcpAttr::eager_credit`) is owed; its first
//! Credit frame also grants the budget beyond the initial credit. Granting
//! at the first consumption rather than at the handshake writes nothing
//! extra while a connection is being set up, and a receiver that never
//! posts a receive holds at most the initial credit from each peer.
//!
//! A sender without enough credit sends the message by rendezvous instead,
//! so its payload waits in the sender's buffer until a receive matches; an
//! inject, which has no buffer to wait in, fails with `Error::Again`. A
//! request to send costs credit too (`eager_cost(0)`: its unexpected entry),
//! earned back when a receive takes it: without any, it waits on the
//! connection (`Conn::credit_wait`) until the peer grants more, and every
//! message after it waits behind it, so order holds. Control frames (credit,
//! clear-to-send, data, RMA) never wait for credit: a peer waiting for ours
//! still gets it.
//!
//! The credit's state and when it is returned are core's (`rdm::Credit`, the
//! same on verbs); this module moves it over TCP frames.

use xfer_core::unstable::error::Result;
use xfer_core::unstable::provider::Ctx;
pub(super) use xfer_core::unstable::rdm::credit::OVERSPENT;
use xfer_core::unstable::rdm::Amount;

use super::TcpEndpoint;
use crate::conn::{Conn, Owner, Payload, TxFrame, STAGING};
use crate::wire::{eager_cost, Frame, CREDIT_INIT};

/// What an endpoint grants each peer in all: `TcpAttr::eager_credit`
/// bytes, at least the initial credit.
pub(super) fn budget(eager_credit: usize) -> Amount {
    Amount {
        bytes: (eager_credit as u64).max(CREDIT_INIT),
        msgs: u32::MAX,
    }
}

/// What a connection costs the endpoint's receive memory besides credit:
/// its receive staging buffer and its state.
pub(super) const CONN_COST: u64 = (STAGING + std::mem::size_of::<Conn>()) as u64;

/// What admitting a connection commits of the receive memory.
pub(super) const ADMISSION: u64 = CREDIT_INIT + CONN_COST;

/// An Eager frame of `len` bytes (an Rts: 0) arrived on `conn`: charges the
/// peer's credit; a peer that overspends breaks the protocol ([`OVERSPENT`]).
#[inline]
pub(super) fn charge(conn: &mut Conn, len: u64) -> Result<()> {
    conn.credit.charge(eager_cost(len), 0)
}

/// An eager message of `len` bytes that came on `conn` was consumed: its
/// cost is owed back to the peer. True when the connection should return
/// credit now ([`TcpEndpoint::return_credit`]).
#[inline]
pub(super) fn owe(conn: &mut Conn, len: usize) -> bool {
    conn.credit.owe(eager_cost(len as u64), 0)
}

impl TcpEndpoint {
    fn grant(&mut self, cx: &mut Ctx<'_>, id: usize, bytes: u64) {
        let frame = TxFrame {
            hdr: Frame::Credit { bytes }.to_bytes(),
            payload: Payload::None,
            written: 0,
            owner: Owner::None,
        };
        self.queue(cx, id, frame);
    }

    /// Spends the credit an eager message of `len` bytes (a request to
    /// send: 0) needs on connection `id`; false (nothing spent) if there is
    /// not enough, or requests wait for credit there already.
    #[inline]
    pub(super) fn spend_credit(&mut self, id: usize, len: usize) -> bool {
        let cost = eager_cost(len as u64);
        match self.conns.get_mut(id) {
            Some(c) if c.credit.can_send(cost, 0) && c.credit_wait.is_empty() => {
                c.credit.spend(cost, 0);
                true
            }
            _ => {
                self.counted.credit_stalls += 1;
                false
            }
        }
    }

    /// An eager message of `len` bytes that came on connection `id` (of
    /// `serial` if given, else the live one being read) was consumed: its
    /// cost is owed back to the peer, and returned once a quarter of the
    /// budget is owed. Nothing if the connection is gone.
    #[inline]
    pub(super) fn earn_credit(&mut self, cx: &mut Ctx<'_>, id: usize, serial: Option<u64>, len: usize) {
        let Some(c) = self.conns.get_mut(id) else { return };
        if serial.is_some_and(|s| s != c.serial) {
            return;
        }
        if owe(c, len) {
            self.return_credit(cx, id);
        }
    }

    /// A message of `len` eager bytes (a request to send: 0) kept
    /// unexpected from connection `id` holds its credit there.
    pub(super) fn hold(&mut self, id: usize, len: usize) {
        if let Some(c) = self.conns.get_mut(id) {
            c.share.hold(eager_cost(len as u64));
        }
    }

    /// A receive took a message of `len` eager bytes kept unexpected from
    /// connection `conn`: its credit is owed back to the peer, or, the
    /// connection being gone, given back to the receive memory.
    pub(super) fn unhold(&mut self, cx: &mut Ctx<'_>, conn: (usize, u64), len: usize) {
        let cost = eager_cost(len as u64);
        match self.conns.get_mut(conn.0).filter(|c| c.serial == conn.1) {
            Some(c) => {
                c.share.unhold(cost);
                self.earn_credit(cx, conn.0, Some(conn.1), len);
            }
            None => self.account.release(cost),
        }
    }

    /// Sends what connection `id` owes its peer (with, the first time, the
    /// budget beyond the initial credit, if the receive memory has room) if
    /// that reached the threshold.
    #[cold]
    pub(super) fn return_credit(&mut self, cx: &mut Ctx<'_>, id: usize) {
        let Some(c) = self.conns.get_mut(id) else { return };
        if let Some(give) = c.credit.take_return(self.budget, &mut c.share, &mut self.account) {
            self.counted.credit_returns += 1;
            self.grant(cx, id, give.bytes);
        }
    }

    /// Queues the request to send `frame` on connection `id`, or keeps it
    /// waiting for credit (behind any that wait already).
    pub(super) fn queue_request(&mut self, cx: &mut Ctx<'_>, id: usize, frame: TxFrame) {
        if self.spend_credit(id, 0) {
            // A request to send waits for its burst as an eager frame does
            // (a stream of large messages then shares system calls); the
            // first after a progress call goes at once and starts one.
            let open = self.conns[id].link.is_open();
            self.queue_eager(cx, id, frame);
            self.burst |= open;
        } else {
            self.counted.credit_waits += 1;
            self.conns[id].credit_wait.push_back(frame);
        }
    }

    /// Queues the requests waiting on connection `id` that its credit now
    /// pays for, oldest first.
    pub(super) fn release_waiting(&mut self, cx: &mut Ctx<'_>, id: usize) {
        let cost = eager_cost(0);
        while let Some(c) = self.conns.get_mut(id) {
            if !c.credit.can_send(cost, 0) {
                return;
            }
            let Some(frame) = c.credit_wait.pop_front() else { return };
            c.credit.spend(cost, 0);
            self.queue(cx, id, frame);
        }
    }

    /// The peer granted `bytes` more on connection `id`: requests waiting
    /// for it go.
    pub(super) fn on_credit(&mut self, cx: &mut Ctx<'_>, id: usize, bytes: u64) -> Result<()> {
        let Some(c) = self.conns.get_mut(id) else { return Ok(()) };
        c.credit.granted(Amount { bytes, msgs: 0 })?;
        if !c.credit_wait.is_empty() {
            self.release_waiting(cx, id);
        }
        Ok(())
    }
}
