//! Credit (docs/PROTOCOL-VERBS.md, "Credit"; ARCHITECTURE.md decision 44):
//! per connection and direction, what the sender may still send.
//!
//! - Messages: every SEND but a credit message takes one of the receiver's
//!   SRQ buffers. The receiver gives them back once the buffers are posted
//!   again, so a sender never has more than `XFER_VERBS_CREDIT_MSGS` of them
//!   in the receiver's SRQ; peers x (that + 5) within the SRQ's size, and the
//!   SRQ never runs dry (no RNR NAK). Out of message credit, an operation
//!   waits in the peer's queue.
//! - Eager bytes (payload + 256 per message, an RTS 256: core's
//!   `rdm::credit::cost`): what the receiver may have to hold unexpected.
//!   Earned back when the message is consumed by a receive. Out of byte
//!   credit, a send goes by rendezvous (its buffer waits with the sender)
//!   and an inject fails with `Again`; an RTS without its bytes waits in
//!   the peer's queue.
//!
//! Both start at [`INIT_MSGS`] / [`INIT_BYTES`] without any exchange; the
//! receiver's first return also grants the rest of its budget (the bytes
//! only while the receive memory has room). Returns go in a credit message
//! (kind 5), which costs no credit itself, once a quarter of what was
//! granted is owed, or at once to answer a ping (the progress timeout's
//! probe, [`super::stall`]), which costs one message. The state and those
//! rules are core's `rdm::Credit`, the same as TCP's; this module moves it
//! in verbs messages.
//!
//! The receiver enforces it: it counts what it granted (the initial credit,
//! then every credit message as it posts it) against what arrives, and a
//! message past that ends the connection as a protocol violation
//! (`credit_violations`; decision 69): a peer that ignores credit would
//! otherwise drain the SRQ that every peer shares.

use xfer_core::unstable::addr::Address;
use xfer_core::unstable::rdm::Amount;
use xfer_core::{Error, Result};

use super::{State, Tx, VerbsEndpoint};
use crate::wire;

/// Messages a new connection may send before any credit message.
pub(crate) const INIT_MSGS: u32 = 16;
/// Eager bytes a new connection may send before any credit message.
pub(crate) const INIT_BYTES: u64 = 128 << 10;

/// What admitting a connection commits of the receive memory: its initial
/// credit and its state (receive buffers are the shared SRQ's).
pub(crate) const ADMISSION: u64 = INIT_BYTES + std::mem::size_of::<super::Conn>() as u64;

/// The credit a new connection starts with, both ways.
pub(crate) const INIT: Amount = Amount {
    bytes: INIT_BYTES,
    msgs: INIT_MSGS,
};

/// One connection's credit (core's `rdm::Credit`, the same as TCP's), and
/// whether the connection is in the endpoint's `owing` list.
#[derive(Debug)]
pub(crate) struct Credit {
    /// The credit both ways.
    pub(crate) flow: xfer_core::unstable::rdm::Credit,
    /// In the endpoint's `owing` list.
    listed: bool,
    /// The peer pinged (the progress timeout's probe): what is owed goes
    /// back now, whatever its amount, as the answer.
    pinged: bool,
}

impl Default for Credit {
    fn default() -> Self {
        Credit {
            flow: xfer_core::unstable::rdm::Credit::new(INIT),
            listed: false,
            pinged: false,
        }
    }
}

/// What a message of `len` eager payload bytes (a request to send: 0)
/// costs, as on every transport (`xfer_core::unstable::rdm::credit`).
pub(crate) fn eager_cost(len: usize) -> u64 {
    xfer_core::unstable::rdm::credit::cost(len as u64)
}

impl Tx {
    /// Whether posting it sends a message that takes a receive buffer on
    /// connection `k`'s peer (a FIN of another connection is dropped).
    fn takes_a_buffer(&self, k: usize) -> bool {
        match self {
            Tx::Send { .. } => true,
            Tx::Fin { conn, .. } => *conn == k,
            Tx::Rma { op, .. } => op.data.is_some() && op.kind == xfer_core::RmaKind::Write,
            Tx::Read(_) => false,
        }
    }
}

impl VerbsEndpoint {
    /// A serial for a new connection.
    pub(super) fn next_serial(&mut self) -> u64 {
        self.serials += 1;
        self.serials
    }

    /// `Again` for an inject of `len` bytes to `dest` that the credit at
    /// hand would not let out behind what is already queued for the peer
    /// (the initial credit while the connection is being made): an inject
    /// has no buffer of the caller's to wait in, so it neither falls back
    /// to rendezvous nor queues without bound.
    pub(super) fn inject_credit(&mut self, dest: Address, len: usize) -> Result<()> {
        let peer = self.peers.get(&dest);
        let queued = peer.map_or(0, |p| p.queue.len() as u64);
        let ready = peer
            .and_then(|p| p.conn)
            .map(|k| &self.conns[k])
            .filter(|c| c.state == State::Ready);
        let Amount { msgs, bytes } = ready.map_or(INIT, |c| c.credit.flow.tx);
        let eager = len <= self.eager_max;
        if queued >= u64::from(msgs) || (eager && bytes < eager_cost(len).saturating_mul(queued + 1)) {
            self.stats.rdm.credit_stalls += 1;
            return Err(Error::Again);
        }
        Ok(())
    }

    /// Whether `tx` may go out on connection `k` as far as message credit
    /// goes (counted in `credit_waits` when not).
    pub(super) fn has_msg_credit(&mut self, k: usize, tx: &Tx) -> bool {
        if !tx.takes_a_buffer(k) || self.conns[k].credit.flow.can_send(0, 1) {
            return true;
        }
        self.stats.rdm.credit_waits += 1;
        false
    }

    /// Whether an eager send of `len` bytes fits connection `k`'s byte credit.
    pub(super) fn has_byte_credit(&self, k: usize, len: usize) -> bool {
        self.conns[k].credit.flow.can_send(eager_cost(len), 0)
    }

    /// A message that costs credit arrived on `k` (`bytes` of them eager):
    /// false when the peer had no such credit left (a protocol violation),
    /// and then for everything after it on `k`.
    pub(super) fn charge_peer(&mut self, k: usize, bytes: u64) -> bool {
        let c = &mut self.conns[k].credit.flow;
        if c.charge(bytes, 1).is_err() {
            c.revoke();
            return false;
        }
        true
    }

    /// A message went out on `k`: one message and `bytes` eager bytes spent
    /// (none under `fault_ignore_credit`: the endpoint then never runs out,
    /// and sends past what its peer granted).
    pub(super) fn spend(&mut self, k: usize, bytes: u64) {
        if self.res.attr.fault_ignore_credit {
            return;
        }
        self.conns[k].credit.flow.spend(bytes, 1);
    }

    /// A request to send went out on `k`: `bytes` eager bytes spent (its
    /// message was counted by [`post_ctrl`](Self::post_ctrl)).
    pub(super) fn spend_bytes(&mut self, k: usize, bytes: u64) {
        if self.res.attr.fault_ignore_credit {
            return;
        }
        self.conns[k].credit.flow.spend(bytes, 0);
    }

    /// We owe connection `k`'s peer `msgs` messages and `bytes` eager bytes.
    pub(super) fn owe(&mut self, k: usize, msgs: u32, bytes: u64) {
        let Some(c) = self.conns.get_mut(k) else { return };
        c.credit.flow.owe(bytes, msgs);
        if !c.credit.listed {
            c.credit.listed = true;
            self.owing.push(k);
        }
    }

    /// The eager bytes of an unexpected message were consumed: owed to the
    /// connection it came on, if that one still lives.
    pub(super) fn consumed(&mut self, conn: (usize, u64), len: usize) {
        let cost = eager_cost(len);
        match self
            .conns
            .get_mut(conn.0)
            .filter(|c| c.serial == conn.1 && c.state != State::Dead)
        {
            Some(c) => {
                c.share.unhold(cost);
                self.owe(conn.0, 0, cost);
            }
            // Gone: what it held goes back to the receive memory.
            None => self.account.release(cost),
        }
    }

    /// A message of `len` eager bytes (a request to send: 0) kept
    /// unexpected from connection `k` holds its credit there.
    pub(super) fn hold(&mut self, k: usize, len: usize) {
        self.conns[k].share.hold(eager_cost(len));
    }

    /// A ping arrived on `k`: answered by the next credit return, which
    /// goes out at once (it returns at least the ping's own buffer).
    pub(super) fn pinged(&mut self, k: usize) {
        self.conns[k].credit.pinged = true;
        self.owe(k, 0, 0);
    }

    /// A credit message arrived on `k`: the peer granted more.
    pub(super) fn on_credit(&mut self, k: usize, msgs: u32, bytes: u64) {
        let c = &mut self.conns[k];
        if c.credit.flow.granted(Amount { bytes, msgs }).is_err() {
            xfer_core::warn_limited!(peer = ?c.peer, "credit message overflows the credit; ignored");
        }
        let dest = c.peer;
        // Operations waiting for it sit in the peer's queue.
        if self.peers.get(&dest).is_some_and(|p| !p.queue.is_empty()) && !self.backlog.contains(&dest) {
            self.backlog.push(dest);
        }
    }

    /// Sends a credit message on every ready connection owed a quarter of
    /// what it was granted, or its first grant (the bytes of it only while
    /// the receive memory has room); the buffers are posted again first.
    pub(super) fn return_credit(&mut self) {
        let budget = Amount {
            bytes: self.eager_credit,
            msgs: self.credit_msgs,
        };
        let mut reposted = false;
        let mut i = 0;
        while i < self.owing.len() {
            let k = self.owing[i];
            let Some(c) = self.conns.get(k).filter(|c| c.state != State::Dead) else {
                if let Some(c) = self.conns.get_mut(k) {
                    c.credit.listed = false;
                }
                self.owing.swap_remove(i);
                continue;
            };
            // Below a return's threshold, the same small debt would only be
            // weighed again on copies and found not due (core's `due()`
            // never says no where `take_return` would give): it stays
            // listed, unweighed, until more is owed or the peer pings.
            if !c.credit.pinged && !c.credit.flow.due() {
                i += 1;
                continue;
            }
            // Decided on copies, kept once the credit message is posted.
            let (mut flow, mut share, mut account) = (c.credit.flow.clone(), c.share, self.account.clone());
            let give = match match c.credit.pinged {
                true => flow.take_return_now(budget, &mut share, &mut account),
                false => flow.take_return(budget, &mut share, &mut account),
            } {
                Some(give) if c.state == State::Ready => give,
                _ => {
                    i += 1;
                    continue;
                }
            };
            if !reposted {
                // The credit names buffers: they must be on the SRQ first.
                if let Err(e) = self.srq.post_all() {
                    xfer_core::warn_limited!(error = %e, "reposting receive buffers");
                    return;
                }
                reposted = true;
            }
            let mut msg = [0u8; wire::CREDIT_LEN];
            wire::credit(&mut msg, give.msgs, give.bytes);
            if self.post_ctrl(k, &msg, false, false).is_err() {
                i += 1; // no room now: the next progress tries again
                continue;
            }
            self.stats.rdm.credit_returns += 1;
            self.account = account;
            let c = &mut self.conns[k];
            c.share = share;
            c.credit.flow = flow;
            c.credit.listed = false;
            c.credit.pinged = false;
            self.owing.swap_remove(i);
        }
    }
}
