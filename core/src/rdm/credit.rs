//! Eager credit, the same on every transport: what one message may make its
//! receiver hold, and the state of one connection's credit both ways.
//!
//! A receiver grants each peer credit in bytes (and, where the transport
//! has a fixed pool of receive buffers, in messages) and charges every
//! message that may end up waiting unexpected: an eager message its payload
//! plus [`ENTRY_COST`], a request to send (rendezvous) [`ENTRY_COST`] alone.
//! The entry cost covers what keeping the message costs besides its payload
//! (its slot in the matcher and the allocation's overhead), so a flood of
//! empty messages or of requests to send is bounded by the credit as
//! tightly as a flood of large ones. The receiver earns a message's cost
//! back when a receive consumes it and returns it to the sender.
//!
//! [`Credit`] is one connection's: both sides start with the initial credit
//! without any exchange; the receiver's first return also grants the rest
//! of its budget (when the receive-memory account has room for it,
//! [`super::Account`]); after that it returns what it owes once a quarter
//! of what it granted is owed. How a return travels (a TCP Credit frame, a
//! verbs credit message) is the transport's.

use crate::error::{Error, Result};

use super::account::{Account, Share};

/// What keeping one unexpected message costs besides its payload, as eager
/// credit counts it: at least a matcher slot and the allocator's overhead
/// (a test checks the slot of every transport's entry fits).
pub const ENTRY_COST: u64 = 256;

/// What a message of `len` eager payload bytes costs of its sender's
/// credit (`len` 0 for a request to send, whose payload stays with the
/// sender).
#[inline]
pub fn cost(len: u64) -> u64 {
    len.saturating_add(ENTRY_COST)
}

/// Credit in both units: eager bytes and messages.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Amount {
    /// Eager bytes ([`cost`] of each message).
    pub bytes: u64,
    /// Messages (transports without a fixed pool of receive buffers give
    /// `u32::MAX` and charge none).
    pub msgs: u32,
}

/// What a peer that sends past its credit gets: its connection ends with
/// it (every transport counts it as `credit_violations`).
pub const OVERSPENT: Error = Error::Protocol("message beyond the granted credit");

/// One connection's eager credit, both ways.
#[derive(Debug, Clone)]
pub struct Credit {
    /// What we may still send.
    pub tx: Amount,
    /// What the peer may still send us: granted (counted when the grant
    /// leaves) and not yet received.
    rx: Amount,
    /// What messages the peer sent cost and receives consumed, not yet
    /// returned.
    owed: Amount,
    /// What we granted the peer in all: the initial credit, then the budget.
    grant: Amount,
    /// What owed makes a return due: a quarter of `grant`, or anything
    /// while the budget beyond the initial credit is still to be granted.
    due_at: Amount,
    /// Whether the budget beyond the initial credit was granted (bytes, messages).
    granted_bytes: bool,
    granted_msgs: bool,
}

impl Credit {
    /// A new connection's: `init` both ways.
    pub fn new(init: Amount) -> Credit {
        Credit {
            tx: init,
            rx: init,
            owed: Amount::default(),
            grant: init,
            due_at: Amount { bytes: 1, msgs: 1 },
            granted_bytes: false,
            granted_msgs: false,
        }
    }

    /// Whether we may send a message costing `bytes` and `msgs`.
    #[inline]
    pub fn can_send(&self, bytes: u64, msgs: u32) -> bool {
        self.tx.bytes >= bytes && self.tx.msgs >= msgs
    }

    /// Spends `bytes` and `msgs` of what we may send (saturating).
    #[inline]
    pub fn spend(&mut self, bytes: u64, msgs: u32) {
        self.tx.bytes = self.tx.bytes.saturating_sub(bytes);
        self.tx.msgs = self.tx.msgs.saturating_sub(msgs);
    }

    /// The peer granted `more`; one that would overflow what we may send is
    /// a protocol error.
    pub fn granted(&mut self, more: Amount) -> Result<()> {
        let bytes = self.tx.bytes.checked_add(more.bytes);
        let msgs = self.tx.msgs.checked_add(more.msgs);
        match (bytes, msgs) {
            (Some(bytes), Some(msgs)) => {
                self.tx = Amount { bytes, msgs };
                Ok(())
            }
            _ => Err(Error::Protocol("eager credit overflows")),
        }
    }

    /// A message costing `bytes` and `msgs` arrived: charged to what the
    /// peer may send, [`OVERSPENT`] past it (nothing charged then).
    #[inline]
    pub fn charge(&mut self, bytes: u64, msgs: u32) -> Result<()> {
        if self.rx.bytes < bytes || self.rx.msgs < msgs {
            return Err(OVERSPENT);
        }
        self.rx.bytes -= bytes;
        self.rx.msgs -= msgs;
        Ok(())
    }

    /// The connection is ending over a violation: the peer may send
    /// nothing more.
    pub fn revoke(&mut self) {
        self.rx = Amount::default();
    }

    /// A message costing `bytes` and `msgs` was consumed (or its receive
    /// buffer reposted): owed back to the peer. True when a return is due
    /// ([`Credit::take_return`]): a quarter of what was granted is owed, or
    /// the budget beyond the initial credit was not granted yet.
    #[inline]
    pub fn owe(&mut self, bytes: u64, msgs: u32) -> bool {
        self.owed.bytes = self.owed.bytes.saturating_add(bytes);
        self.owed.msgs = self.owed.msgs.saturating_add(msgs);
        self.due()
    }

    /// Whether a return is due now (see [`Credit::owe`]).
    #[inline]
    pub fn due(&self) -> bool {
        self.owed.bytes >= self.due_at.bytes || self.owed.msgs >= self.due_at.msgs
    }

    /// What to return to the peer now, if anything is due: what is owed,
    /// with, the first time, the budget beyond the initial credit (`budget`
    /// in all; the bytes of it only if the receive memory has room, else
    /// later). Counted as granted at once: call it when the return is sure
    /// to leave.
    pub fn take_return(&mut self, budget: Amount, share: &mut Share, account: &mut Account) -> Option<Amount> {
        self.take(budget, share, account, false)
    }

    /// As [`Credit::take_return`], but due whatever the amount owed (if
    /// any): a return that answers the peer's progress probe.
    pub fn take_return_now(&mut self, budget: Amount, share: &mut Share, account: &mut Account) -> Option<Amount> {
        self.take(budget, share, account, true)
    }

    fn take(&mut self, budget: Amount, share: &mut Share, account: &mut Account, now: bool) -> Option<Amount> {
        let mut give = self.owed;
        if !self.granted_msgs && give.msgs > 0 {
            let extra = budget.msgs.saturating_sub(self.grant.msgs);
            self.granted_msgs = true;
            self.grant.msgs = self.grant.msgs.saturating_add(extra);
            give.msgs = give.msgs.saturating_add(extra);
            self.due_at.msgs = (self.grant.msgs / 4).max(1);
        }
        if !self.granted_bytes && give.bytes > 0 {
            let extra = budget.bytes.saturating_sub(self.grant.bytes);
            if share.grow(account, extra) {
                self.granted_bytes = true;
                self.grant.bytes += extra;
                give.bytes += extra;
                self.due_at.bytes = (self.grant.bytes / 4).max(1);
            }
        }
        let due = now
            || give.bytes >= (self.grant.bytes / 4).max(1)
            || give.msgs >= (self.grant.msgs / 4).max(1)
            || give.msgs > self.owed.msgs
            || give.bytes > self.owed.bytes;
        if !due || (give.bytes == 0 && give.msgs == 0) {
            return None;
        }
        self.owed = Amount::default();
        self.rx.bytes = self.rx.bytes.saturating_add(give.bytes);
        self.rx.msgs = self.rx.msgs.saturating_add(give.msgs);
        Some(give)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INIT: Amount = Amount {
        bytes: 128 << 10,
        msgs: 16,
    };
    const BUDGET: Amount = Amount {
        bytes: 4 << 20,
        msgs: 64,
    };

    #[test]
    fn a_peer_is_charged_within_what_it_was_granted() {
        let mut c = Credit::new(INIT);
        for _ in 0..16 {
            c.charge(cost(8), 1).expect("within the initial credit");
        }
        assert_eq!(c.charge(cost(8), 1), Err(OVERSPENT), "the 17th message");
        let mut big = Credit::new(INIT);
        assert_eq!(big.charge(cost(128 << 10), 1), Err(OVERSPENT), "past the bytes");
        big.charge(cost(0), 0).expect("a charge without messages (TCP)");
    }

    #[test]
    fn a_return_that_answers_a_probe_goes_whatever_its_amount() {
        let mut account = Account::new(u64::MAX);
        let mut share = Share::default();
        let mut c = Credit::new(INIT);
        c.owe(cost(0), 1);
        c.take_return(BUDGET, &mut share, &mut account)
            .expect("the first grant");
        c.owe(0, 1);
        assert!(
            c.take_return(BUDGET, &mut share, &mut account).is_none(),
            "one message: not due"
        );
        let give = c.take_return_now(BUDGET, &mut share, &mut account).expect("an answer");
        assert_eq!((give.msgs, give.bytes), (1, 0));
        assert!(
            c.take_return_now(BUDGET, &mut share, &mut account).is_none(),
            "nothing owed"
        );
    }

    #[test]
    fn the_first_return_grants_the_budget_when_it_fits() {
        let mut account = Account::new(u64::MAX);
        let mut share = Share::default();
        let mut c = Credit::new(INIT);
        c.charge(cost(100), 1).unwrap();
        assert!(c.owe(cost(100), 1), "the first consumption is due at once");
        let give = c.take_return(BUDGET, &mut share, &mut account).expect("a return");
        assert_eq!(give.msgs, 1 + 64 - 16);
        assert_eq!(give.bytes, cost(100) + (4 << 20) - (128 << 10));
        assert_eq!(account.committed(), (4 << 20) - (128 << 10));
        // Afterwards, a return waits for a quarter of the budget.
        assert!(!c.owe(cost(100), 0));
        assert!(c.take_return(BUDGET, &mut share, &mut account).is_none());
        assert!(c.owe(1 << 20, 0));
        assert!(c.take_return(BUDGET, &mut share, &mut account).is_some());
        // What the peer may send grew by what was given.
        for _ in 0..63 {
            c.charge(cost(0), 1).expect("within the grant");
        }
    }

    #[test]
    fn without_room_the_initial_credit_comes_back_by_quarters() {
        let mut account = Account::new(0);
        let mut share = Share::default();
        let mut c = Credit::new(Amount {
            bytes: 128 << 10,
            msgs: u32::MAX,
        });
        c.charge(cost(100), 0).unwrap();
        assert!(c.owe(cost(100), 0));
        assert!(
            c.take_return(BUDGET, &mut share, &mut account).is_none(),
            "no room for the budget, less than a quarter of the initial owed"
        );
        assert!(c.owe(32 << 10, 0));
        let give = c.take_return(BUDGET, &mut share, &mut account).expect("a quarter");
        assert_eq!(give.bytes, cost(100) + (32 << 10));
        assert_eq!(account.committed(), 0);
    }

    #[test]
    fn a_grant_that_overflows_is_refused() {
        let mut c = Credit::new(INIT);
        c.granted(Amount { bytes: 1, msgs: 1 }).unwrap();
        assert!(c.can_send(INIT.bytes + 1, 17));
        assert!(c
            .granted(Amount {
                bytes: u64::MAX,
                msgs: 0
            })
            .is_err());
        c.spend(INIT.bytes + 1, 17);
        assert!(!c.can_send(1, 0));
    }

    /// One step of a connection's credit life for the property below.
    #[derive(Debug, Clone)]
    enum Step {
        Owe(u64, u32),
        Take,
        TakeNow,
        /// Other connections commit or release receive memory.
        Others(i64),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            (0u64..80 << 10, 0u32..6).prop_map(|(b, m)| Step::Owe(b, m)),
            Just(Step::Take),
            Just(Step::TakeNow),
            (-(8i64 << 20)..(8i64 << 20)).prop_map(Step::Others),
        ]
    }

    proptest::proptest! {
        /// A transport may skip weighing a connection while `due()` is
        /// false: whenever it is, an ordinary return gives nothing, whatever
        /// was owed, granted or refused for want of receive memory before.
        #[test]
        fn nothing_is_returned_while_not_due(
            limit in proptest::prop_oneof![
                proptest::strategy::Just(0u64),
                0u64..16 << 20,
                proptest::strategy::Just(u64::MAX)
            ],
            steps in proptest::collection::vec(step(), 1..64),
        ) {
            let mut account = Account::new(limit);
            let mut share = Share::default();
            let mut c = Credit::new(INIT);
            let mut others = 0u64;
            for s in steps {
                match s {
                    Step::Owe(b, m) => {
                        let due = c.owe(b, m);
                        proptest::prop_assert_eq!(due, c.due());
                    }
                    Step::Take | Step::TakeNow => {
                        let due = c.due();
                        // Weighed on copies, kept if a return goes (as verbs does).
                        let (mut cc, mut sh, mut acc) = (c.clone(), share, account.clone());
                        let give = match s {
                            Step::Take => cc.take_return(BUDGET, &mut sh, &mut acc),
                            _ => cc.take_return_now(BUDGET, &mut sh, &mut acc),
                        };
                        if matches!(s, Step::Take) && !due {
                            proptest::prop_assert!(give.is_none(), "returned {give:?} while not due");
                        }
                        if give.is_some() {
                            (c, share, account) = (cc, sh, acc);
                            proptest::prop_assert!(!c.due(), "still due after a return");
                        }
                    }
                    Step::Others(d) if d >= 0 => {
                        if account.try_commit(d as u64) {
                            others += d as u64;
                        }
                    }
                    Step::Others(d) => {
                        let r = d.unsigned_abs().min(others);
                        account.release(r);
                        others -= r;
                    }
                }
            }
        }
    }

    #[test]
    fn every_message_costs_its_entry_besides_its_payload() {
        assert_eq!(cost(0), ENTRY_COST);
        assert_eq!(cost(64 << 10), (64 << 10) + ENTRY_COST);
        assert_eq!(cost(u64::MAX), u64::MAX);
    }
}
