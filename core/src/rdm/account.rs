//! The receive-memory account of one endpoint: what its peers may make it
//! hold, against a limit (`EndpointAttr::rx_memory`).
//!
//! A connection is charged when it is admitted (its initial eager credit
//! and its own state), and again for any credit granted beyond that; what
//! it charged stays committed while it lives, whether its messages are in
//! flight, kept unexpected, or consumed and owed back. When it ends, the
//! part not held by its unexpected messages is given back, and each of
//! those is given back when a receive takes it. So the committed total
//! bounds everything peers can make the endpoint hold: in flight, kept,
//! and the connections themselves. A peer is admitted only while its
//! charge fits under the limit, and is granted credit beyond the initial
//! only while that fits too (without it, it sends larger messages by
//! rendezvous, whose data waits with the sender). A connection's part is its
//! [`Share`].

/// One endpoint's receive-memory account.
#[derive(Debug, Clone)]
pub struct Account {
    limit: u64,
    committed: u64,
}

impl Account {
    /// An empty account that commits at most `limit` bytes to peers
    /// (`u64::MAX`: no limit).
    pub fn new(limit: u64) -> Account {
        Account { limit, committed: 0 }
    }

    /// Commits `bytes` if they fit under the limit; false (nothing
    /// committed) if not.
    pub fn try_commit(&mut self, bytes: u64) -> bool {
        self.try_commit_within(bytes, self.limit)
    }

    /// Commits `bytes` if the total stays within `cap` (at most the limit).
    fn try_commit_within(&mut self, bytes: u64, cap: u64) -> bool {
        match self.committed.checked_add(bytes) {
            Some(total) if total <= cap.min(self.limit) => {
                self.committed = total;
                true
            }
            _ => false,
        }
    }

    /// Commits `bytes` whatever the limit: for connections the endpoint's
    /// own user opens, whose peers it chose.
    pub fn commit(&mut self, bytes: u64) {
        self.committed = self.committed.saturating_add(bytes);
    }

    /// Gives `bytes` back.
    pub fn release(&mut self, bytes: u64) {
        debug_assert!(bytes <= self.committed, "released {bytes} of {}", self.committed);
        self.committed = self.committed.saturating_sub(bytes);
    }

    /// Bytes committed now.
    pub fn committed(&self) -> u64 {
        self.committed
    }

    /// The limit.
    pub fn limit(&self) -> u64 {
        self.limit
    }
}

/// One connection's share of its endpoint's [`Account`]: what it
/// committed, and how much of that its messages kept unexpected hold.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    committed: u64,
    held: u64,
}

impl Share {
    /// Admits the connection with `bytes` (its initial credit and state) if
    /// they fit under the limit.
    pub fn admit(&mut self, account: &mut Account, bytes: u64) -> bool {
        let fits = account.try_commit(bytes);
        if fits {
            self.committed += bytes;
        }
        fits
    }

    /// Commits `bytes` whatever the limit: a connection the endpoint's own
    /// user opened, or a grant its caller found to fit.
    pub fn commit(&mut self, account: &mut Account, bytes: u64) {
        account.commit(bytes);
        self.committed += bytes;
    }

    /// Commits `bytes` more (credit beyond the initial) if they fit in half
    /// the limit: the other half stays for admitting peers, so the first
    /// peers' larger budgets never lock later ones out (those run on their
    /// initial credit instead, and send larger messages by rendezvous).
    pub fn grow(&mut self, account: &mut Account, bytes: u64) -> bool {
        let fits = account.try_commit_within(bytes, account.limit / 2);
        if fits {
            self.committed += bytes;
        }
        fits
    }

    /// A message costing `cost` is kept unexpected: its credit is held.
    pub fn hold(&mut self, cost: u64) {
        self.held += cost;
    }

    /// A receive took a kept message costing `cost` while the connection
    /// lives: its credit goes back to the peer, still committed.
    pub fn unhold(&mut self, cost: u64) {
        self.held = self.held.saturating_sub(cost);
    }

    /// The connection ended, and `dropped` of what its kept messages held
    /// went with it: everything but what the rest hold is given back (each
    /// of those is given back with [`Account::release`] when a receive
    /// takes it).
    pub fn close(&mut self, account: &mut Account, dropped: u64) {
        let held = self.held.saturating_sub(dropped);
        account.release(self.committed.saturating_sub(held));
        *self = Share::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commitments_stay_under_the_limit_until_given_back() {
        let mut a = Account::new(100);
        assert!(a.try_commit(60));
        assert!(!a.try_commit(41), "past the limit");
        assert!(a.try_commit(40));
        assert_eq!(a.committed(), 100);
        a.release(50);
        assert!(a.try_commit(50));
        a.commit(10);
        assert_eq!(a.committed(), 110, "the user's own connections go past it");
        assert!(!a.try_commit(u64::MAX), "no overflow");
        assert_eq!(a.committed(), 110);
    }

    #[test]
    fn a_closed_connection_leaves_what_its_kept_messages_hold() {
        let mut a = Account::new(1000);
        let (mut one, mut two) = (Share::default(), Share::default());
        assert!(one.admit(&mut a, 300));
        assert!(!two.admit(&mut a, 800), "past the limit");
        assert!(!one.grow(&mut a, 300), "credit beyond the initial takes at most half");
        assert!(one.grow(&mut a, 200));
        assert!(two.admit(&mut a, 500), "the other half admits peers");
        two.close(&mut a, 0);
        one.hold(100);
        one.hold(50);
        one.unhold(50);
        one.hold(30);
        // 130 kept, 30 of them (a request) dropped with the connection.
        one.close(&mut a, 30);
        assert_eq!(a.committed(), 100, "the kept message's credit stays");
        a.release(100);
        assert_eq!(a.committed(), 0);
        two.commit(&mut a, 2000);
        assert_eq!(a.committed(), 2000, "the user's own connection goes past the limit");
    }
}
