//! Receive-slot credit: a peer never sends a SEND that finds no posted
//! receive in our SRQ (an RNR NAK stalls the whole QP for the RNR timer,
//! and the SRQ is every peer's).
//!
//! Each connection reserves slots of the SRQ when it is made ([`Budget`]):
//! a grant `g` the peer may fill, plus room for its credit-only frames;
//! past the SRQ's size connections get a small grant that overcommits it
//! (RNR is then possible, and retried by the device).
//! The grant travels in the rdma_cm private data both ways. A frame of the
//! engine's takes one slot of the sender's credit; the receiver returns
//! slots once their buffers are posted again, piggybacked on its own
//! frames or, once [`threshold`] are owed, in a credit-only frame, which
//! takes no credit. A credit-only frame returns at least `threshold`
//! slots the peer had spent, so at most `g / threshold` of them are ever
//! in flight: [`slack`] is that plus one. The receiver counts what arrives
//! against what it granted; a peer past it broke the protocol.

/// Slots owed before a credit-only frame returns them: a quarter of the
/// grant (at least one).
pub fn threshold(grant: u16) -> u16 {
    (grant / 4).max(1)
}

/// Slots a connection with `grant` reserves beyond it, for the peer's
/// credit-only frames.
pub fn slack(grant: u16) -> u32 {
    u32::from(grant / threshold(grant)) + 1
}

/// Slots granted a connection that finds the SRQ fully reserved.
pub const OVERCOMMIT: u16 = 2;

/// The SRQ's slots, reserved by connections.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    size: u32,
    reserved: u32,
    overcommitted: u64,
}

impl Budget {
    /// A budget of `size` slots.
    pub fn new(size: u32) -> Budget {
        Budget {
            size,
            reserved: 0,
            overcommitted: 0,
        }
    }

    /// Reserves a grant for a new connection: the largest up to `want`,
    /// and up to a quarter of the SRQ (a few connections share it however
    /// large the grant asked), that fits with its slack. When none does,
    /// the connection is still admitted with [`OVERCOMMIT`] slots: past
    /// that point the SRQ can run dry and a sender meets RNR NAKs (retried
    /// by the device: `XFER_VERBS_RNR_RETRY`), as on the old verbs endpoint.
    /// Returns the grant and whether it overcommits.
    pub fn grant(&mut self, want: u32) -> (u16, bool) {
        let want = want.min(self.size / 4).clamp(1, u32::from(u16::MAX)) as u16;
        let free = self.size.saturating_sub(self.reserved);
        let mut g = want.min(free.min(u32::from(u16::MAX)) as u16);
        while g > 0 && u32::from(g) + slack(g) > free {
            g -= 1;
        }
        let over = g == 0;
        if over {
            g = want.min(OVERCOMMIT);
            self.overcommitted += 1;
        }
        self.reserved += u32::from(g) + slack(g);
        (g, over)
    }

    /// Gives back what `grant` reserved.
    pub fn release(&mut self, grant: u16) {
        if grant == 0 {
            return;
        }
        self.reserved = self.reserved.saturating_sub(u32::from(grant) + slack(grant));
    }

    /// Slots reserved now (past the SRQ's size when overcommitted).
    pub fn reserved(&self) -> u32 {
        self.reserved
    }

    /// Connections admitted past the SRQ's size so far.
    pub fn overcommitted(&self) -> u64 {
        self.overcommitted
    }
}

/// One connection's slot credit, both ways.
#[derive(Debug, Clone, Copy, Default)]
pub struct SlotCredit {
    /// What we granted the peer.
    granted: u16,
    /// Its frames taken here and not yet returned.
    held: u16,
    /// Of those, the ones handed on whose buffers wait to be posted again.
    unposted: u16,
    /// Of those, the ones whose buffers are posted again: returnable.
    owed: u16,
    /// What the peer granted us.
    limit: u16,
    /// What we may still send.
    tx: u16,
}

impl SlotCredit {
    /// Credit for a connection: we granted `granted`, the peer `limit`.
    pub fn new(granted: u16, limit: u16) -> SlotCredit {
        SlotCredit {
            granted,
            held: 0,
            unposted: 0,
            owed: 0,
            limit,
            tx: limit,
        }
    }

    /// What we granted the peer.
    pub fn granted(&self) -> u16 {
        self.granted
    }

    /// What we may still send (for counters).
    pub fn tx(&self) -> u16 {
        self.tx
    }

    /// The peer's frames taken here and not yet returned (for counters).
    pub fn held(&self) -> u16 {
        self.held
    }

    /// Of those, the ones whose buffers wait to be posted again (for
    /// counters).
    pub fn unposted(&self) -> u16 {
        self.unposted
    }

    /// Whether a frame may go now.
    pub fn can_send(&self) -> bool {
        self.tx > 0
    }

    /// What the next frame returns (piggybacked).
    pub fn owed(&self) -> u16 {
        self.owed
    }

    /// A frame went, returning `returned` (what [`owed`](Self::owed) said).
    pub fn sent(&mut self, returned: u16) {
        self.tx -= 1;
        self.returned_to_peer(returned);
    }

    /// A credit-only frame went, returning `returned`.
    pub fn returned_to_peer(&mut self, returned: u16) {
        self.owed -= returned;
        self.held -= returned;
    }

    /// Whether what is owed should go back in a credit-only frame.
    pub fn should_return(&self) -> bool {
        self.owed >= threshold(self.granted)
    }

    /// The peer returned `n` slots: an error when that is more than we spent.
    pub fn returned(&mut self, n: u16) -> Result<(), &'static str> {
        match self.tx.checked_add(n) {
            Some(t) if t <= self.limit => {
                self.tx = t;
                Ok(())
            }
            _ => Err("verbs peer returned receive slots it was never given"),
        }
    }

    /// A frame of the peer's arrived: an error past its grant.
    pub fn arrived(&mut self) -> Result<(), &'static str> {
        if self.held >= self.granted {
            return Err("verbs peer sent past its receive-slot credit");
        }
        self.held += 1;
        Ok(())
    }

    /// A frame of the peer's was handed on; its buffer waits to be
    /// posted again ([`reposted`](Self::reposted)).
    pub fn consumed(&mut self) {
        self.unposted += 1;
    }

    /// The buffers of the frames handed on are posted again: their slots
    /// are returnable.
    pub fn reposted(&mut self) {
        self.owed += self.unposted;
        self.unposted = 0;
    }

    /// Whether the buffers waiting should be posted now: once half a
    /// return's threshold wait (at least one). A peer out of credit then
    /// always has a credit-only frame coming: what it spent is held by
    /// the engine, owed, or waiting here, and with fewer than half a
    /// threshold waiting, what is owed is at least a threshold.
    pub fn repost_due(&self) -> bool {
        self.unposted >= (threshold(self.granted) / 2).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credit_goes_round_and_overruns_are_refused() {
        let (mut a, mut b) = (SlotCredit::new(4, 3), SlotCredit::new(3, 4));
        for _ in 0..3 {
            assert!(a.can_send());
            let r = a.owed();
            a.sent(r);
            b.returned(r).unwrap();
            b.arrived().unwrap();
            b.consumed();
            b.reposted();
        }
        assert!(!a.can_send(), "a spent the 3 b granted");
        assert!(b.arrived().is_err(), "a fourth frame overruns b's grant");
        assert!(b.should_return());
        let back = b.owed();
        assert_eq!(back, 3);
        b.returned_to_peer(back);
        a.returned(back).unwrap();
        assert!(a.can_send());
        assert!(a.returned(1).is_err(), "more back than was spent");
    }

    #[test]
    fn unreturned_frames_keep_the_credit() {
        let mut b = SlotCredit::new(8, 8);
        b.arrived().unwrap();
        assert_eq!(b.owed(), 0, "held by the engine: nothing returnable");
        assert!(!b.should_return());
        b.consumed();
        assert_eq!(b.owed(), 0, "its buffer not posted yet: nothing returnable");
        assert!(b.repost_due(), "half of 8's threshold of 2 waits");
        b.reposted();
        assert!(!b.should_return(), "one is under a quarter of 8");
        b.arrived().unwrap();
        b.consumed();
        b.reposted();
        assert!(b.should_return());
    }

    #[test]
    fn a_peer_out_of_credit_always_gets_a_credit_frame() {
        // The peer spent its whole grant; of the g frames, `waiting` have
        // buffers not posted again yet and were not due a post: what is
        // owed must then be a credit-only frame's worth.
        for g in 1..=300u16 {
            for waiting in 0..=g {
                let mut b = SlotCredit::new(g, g);
                for _ in 0..g {
                    b.arrived().unwrap();
                }
                for _ in 0..g - waiting {
                    b.consumed();
                }
                b.reposted();
                for _ in 0..waiting {
                    b.consumed();
                }
                if !b.repost_due() {
                    assert!(b.should_return(), "grant {g}, {waiting} waiting, owed {}", b.owed());
                }
            }
        }
    }

    #[test]
    fn grants_with_their_slack_fit_the_srq_then_overcommit() {
        let mut budget = Budget::new(100);
        let mut grants = Vec::new();
        loop {
            let (g, over) = budget.grant(64);
            if over {
                assert_eq!(g, OVERCOMMIT);
                break;
            }
            grants.push(g);
        }
        assert_eq!(grants[0], 25, "a quarter of the SRQ at most: {grants:?}");
        assert!(grants.len() >= 3, "{grants:?}");
        let total: u32 = grants.iter().map(|&g| u32::from(g) + slack(g)).sum();
        assert!(total <= 100, "{grants:?}");
        assert!(total > 97, "the last slots are handed out too: {grants:?}");
        assert_eq!(budget.overcommitted(), 1);
        budget.release(OVERCOMMIT);
        for g in grants {
            budget.release(g);
        }
        assert_eq!(budget.reserved(), 0);
        assert_eq!(
            Budget::new(1024).grant(64),
            (64, false),
            "the asked grant when there is room"
        );
        assert_eq!(Budget::new(2).grant(64), (1, true), "one slot and its slack need three");
    }

    #[test]
    fn credit_frames_in_flight_fit_the_slack() {
        for g in 1..=300u16 {
            // Each credit-only frame returns at least `threshold` of the g
            // slots the peer can have spent.
            assert!(u32::from(g / threshold(g)) < slack(g), "{g}");
        }
    }
}
