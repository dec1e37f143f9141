//! Answers still owed to operations that already failed.
//!
//! A transport that may hold two connections with one peer (TCP, after a
//! crossed first contact) can see the connection an operation's request
//! went out on fail after the request arrived whole: the operation ends
//! with the error, but the peer may still answer it on its other
//! connection. That answer is expected, not a violation: the token it names
//! is kept here, with the answer it may get, until the answer comes or the
//! peer's last connection goes.

use std::fmt::Debug;

use crate::addr::Address;
use crate::hash::FastMap;

/// Tokens of failed operations, by peer, with the answer each may get.
#[derive(Debug)]
pub struct Abandoned<A> {
    owed: FastMap<(Address, u64), A>,
}

impl<A> Default for Abandoned<A> {
    fn default() -> Self {
        Abandoned {
            owed: FastMap::default(),
        }
    }
}

impl<A: Copy + Debug> Abandoned<A> {
    /// `peer` may still answer the failed operation `token` with `answer`.
    pub fn abandon(&mut self, peer: Address, token: u64, answer: A) {
        self.owed.insert((peer, token), answer);
    }

    /// An answer from `peer` for `token`, which names no live operation:
    /// true, and forgotten, if it is the answer a failed operation may
    /// still get (`fits` says); false when it is not (a protocol violation).
    pub fn take(&mut self, peer: &Address, token: u64, fits: impl FnOnce(A) -> bool) -> bool {
        let Some(&waits) = self.owed.get(&(*peer, token)) else {
            return false;
        };
        if !fits(waits) {
            return false;
        }
        self.owed.remove(&(*peer, token));
        tracing::debug!(
            ?waits,
            "answer for an operation that already failed with its connection, dropped"
        );
        true
    }

    /// `peer`'s last connection is gone: nothing more will come from it.
    pub fn forget(&mut self, peer: &Address) {
        if !self.owed.is_empty() {
            self.owed.retain(|(p, _), _| p != peer);
        }
    }

    /// How many answers are owed.
    pub fn len(&self) -> usize {
        self.owed.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.owed.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(b: u8) -> Address {
        Address::new(&[b; 16]).expect("address")
    }

    #[test]
    fn an_owed_answer_is_taken_once_and_only_from_its_peer() {
        let mut a = Abandoned::default();
        a.abandon(peer(1), 7, 'c');
        assert!(!a.take(&peer(2), 7, |_| true), "another peer");
        assert!(!a.take(&peer(1), 7, |w| w == 'd'), "another answer");
        assert!(a.take(&peer(1), 7, |w| w == 'c'));
        assert!(!a.take(&peer(1), 7, |_| true), "taken already");
    }

    #[test]
    fn a_departed_peer_owes_nothing() {
        let mut a = Abandoned::default();
        a.abandon(peer(1), 1, ());
        a.abandon(peer(2), 1, ());
        a.forget(&peer(1));
        assert_eq!(a.len(), 1);
        assert!(!a.take(&peer(1), 1, |_| true));
        assert!(a.take(&peer(2), 1, |_| true));
        assert!(a.is_empty());
    }
}
