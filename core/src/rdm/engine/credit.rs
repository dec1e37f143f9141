//! Eager credit on every transport under the engine, in the layer's one
//! vocabulary ([`super::super::Credit`], [`super::super::credit::cost`]): a
//! sender spends a message's cost when its frame is written and waits, in
//! order, while it has too little (answers and pushed bytes, which cost
//! nothing, pass the wait: `out`); an eager-sized send that cannot afford
//! its bytes goes by rendezvous and an inject fails with `Again`. The
//! receiver charges what arrives (a peer past its credit loses its
//! connection), holds the cost of what it keeps unexpected, and returns
//! what receives consume in `Credit` frames. Admitting a peer commits its
//! initial credit and state to the receive-memory account; the rest of its
//! budget is granted with the first return, when it fits.

use crate::error::Error;

use super::super::credit::Amount;
use super::super::Credit;
use super::out::Out;
use super::peers::Peer;
use super::wire::{Header, Kind};
use super::State;

/// Credit each side of a new peer starts with, without any exchange.
pub const INIT: u64 = 128 << 10;

/// What admitting a peer commits of the receive memory: its initial credit
/// and its entry.
pub const ADMISSION: u64 = INIT + std::mem::size_of::<Peer>() as u64 + 1024;

/// A new peer's credit.
pub fn initial() -> Credit {
    Credit::new(Amount {
        bytes: INIT,
        msgs: u32::MAX,
    })
}

impl State {
    /// Commits a new peer's admission: an inbound peer only while it fits
    /// (false: refused, counted), one the user's send opened regardless.
    pub(super) fn admit(&mut self, p: usize, inbound: bool) -> bool {
        let Some(e) = self.peers.get_mut(p) else { return false };
        if !inbound {
            e.share.commit(&mut self.account, ADMISSION);
            return true;
        }
        let ok = e.share.admit(&mut self.account, ADMISSION);
        if !ok {
            self.counted.rx_memory_refused += 1;
            crate::warn_limited!(
                committed = self.account.committed(),
                limit = self.account.limit(),
                "rdm: peer refused, receive memory exhausted"
            );
        }
        ok
    }

    /// Whether peer `p` can afford a message costing `cost` behind what
    /// already waits to be written to it.
    pub(super) fn affords(&self, p: usize, cost: u64) -> bool {
        self.peers
            .get(p)
            .is_some_and(|e| e.credit.tx.bytes >= e.queued_cost.saturating_add(cost))
    }

    /// A message costing `cost` arrived from `p`.
    pub(super) fn charge(&mut self, p: usize, cost: u64) -> Result<(), &'static str> {
        let Some(e) = self.peers.get_mut(p) else { return Ok(()) };
        charge_entry(e, &mut self.counted.credit_violations, cost)
    }

    /// A message of `p` costing `cost` is kept unexpected.
    pub(super) fn hold(&mut self, p: usize, cost: u64) {
        if let Some(e) = self.peers.get_mut(p) {
            e.share.hold(cost);
        }
    }

    /// A receive took a message costing `cost` from the peer entry `at`
    /// (`kept`: it had been held unexpected): its credit goes back to the
    /// peer, or, the peer gone, to the receive memory.
    pub(super) fn consumed(&mut self, at: (usize, u64), cost: u64, kept: bool) {
        let Some(e) = self.peers.current(at) else {
            if kept {
                self.account.release(cost);
            }
            return;
        };
        if kept {
            e.share.unhold(cost);
        }
        if e.credit.owe(cost, 0) {
            self.give_back(at.0);
        }
    }

    /// Returns what peer `p` is owed, when a return is due.
    pub(super) fn give_back(&mut self, p: usize) {
        let budget = self.budget;
        let Some(e) = self.peers.get_mut(p) else { return };
        let Some(give) = e.credit.take_return(budget, &mut e.share, &mut self.account) else {
            return;
        };
        self.counted.credit_returns += 1;
        let mut h = Header::new(Kind::Credit);
        h.len = give.bytes;
        self.enqueue(p, 0, Out::Owned(h.encode(), Vec::new()));
    }

    /// Peer `p` returned `bytes` of credit.
    pub(super) fn granted(&mut self, p: usize, bytes: u64) -> Result<(), &'static str> {
        let Some(e) = self.peers.get_mut(p) else { return Ok(()) };
        e.credit
            .granted(Amount { bytes, msgs: 0 })
            .map_err(|_| "eager credit overflows")
    }

    /// An eager-sized send that cannot afford its bytes: counted as a stall.
    pub(super) fn stalled(&mut self) {
        self.counted.credit_stalls += 1;
    }
}

/// [`State::charge`] of a peer entry already at hand (the eager arrival
/// holds it): a message beyond the credit granted revokes the rest and
/// counts a violation in `violations`.
#[inline]
pub(super) fn charge_entry(e: &mut Peer, violations: &mut u64, cost: u64) -> Result<(), &'static str> {
    e.credit.charge(cost, 0).map_err(|err| {
        *violations += 1;
        e.credit.revoke();
        match err {
            Error::Protocol(what) => what,
            _ => "message beyond the granted credit",
        }
    })
}
