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
//! rendezvous, whose data waits with the sender).

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
        match self.committed.checked_add(bytes) {
            Some(total) if total <= self.limit => {
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
}
