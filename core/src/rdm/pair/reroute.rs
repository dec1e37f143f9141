//! Connections to the first transport that it could not make: a peer on
//! this host whose port refuses us (its `max_peers` reached, another user)
//! is served over the second transport instead, without failing anything
//! posted to it.
//!
//! The pair remembers each first-transport connection it opened until that
//! connection comes up. One that goes down before (refused, or the peer's
//! port closed it unanswered) is reported to the engine as
//! [`Cause::Rerouted`], which dials the peer again; its first-transport
//! address is remembered as refused, so that connect takes the second
//! transport. A peer that is gone fails there as it would have on the first.

use std::collections::HashSet;

use super::super::transport::{Cause, ConnId};

/// Refused addresses remembered at most; past it the set starts over (a
/// forgotten peer is tried on the first transport once more, and rerouted
/// again).
const REFUSED_MAX: usize = 4096;

/// The first transport's connections not yet up, and the addresses it
/// could not reach.
#[derive(Debug, Default)]
pub(super) struct Reroute {
    /// Connection ids of the first transport with the address each was
    /// opened to.
    opening: Vec<(ConnId, Vec<u8>)>,
    refused: HashSet<Vec<u8>>,
    /// Connections reported as [`Cause::Rerouted`].
    rerouted: u64,
}

impl Reroute {
    /// Whether the first transport refused `addr` before.
    pub fn refused(&self, addr: &[u8]) -> bool {
        !self.refused.is_empty() && self.refused.contains(addr)
    }

    /// Connections rerouted so far.
    pub fn rerouted(&self) -> u64 {
        self.rerouted
    }

    /// The first transport opened `conn` to `addr`.
    pub fn opened(&mut self, conn: ConnId, addr: &[u8]) {
        self.opening.push((conn, addr.to_vec()));
    }

    /// `conn` of the first transport came up, or was closed by the engine.
    pub fn settled(&mut self, conn: ConnId) {
        if let Some(i) = self.opening.iter().position(|(c, _)| *c == conn) {
            self.opening.swap_remove(i);
        }
    }

    /// `conn` of the first transport went down for `cause`: the cause to
    /// report, [`Cause::Rerouted`] when it never came up.
    pub fn down(&mut self, conn: ConnId, cause: Cause) -> Cause {
        let Some(i) = self.opening.iter().position(|(c, _)| *c == conn) else {
            return cause;
        };
        let (_, addr) = self.opening.swap_remove(i);
        if self.refused.len() >= REFUSED_MAX {
            self.refused.clear();
        }
        tracing::debug!(?cause, "first transport could not reach a peer; rerouting it");
        self.refused.insert(addr);
        self.rerouted += 1;
        Cause::Rerouted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_connection_that_never_came_up_is_rerouted() {
        let mut r = Reroute::default();
        r.opened(3, b"peer-a");
        r.opened(4, b"peer-b");
        r.settled(4);
        assert_eq!(r.down(4, Cause::Closed), Cause::Closed, "was up");
        assert!(!r.refused(b"peer-b"));
        assert_eq!(r.down(3, Cause::Closed), Cause::Rerouted);
        assert!(r.refused(b"peer-a"));
        assert_eq!(r.rerouted(), 1);
        assert_eq!(r.down(3, Cause::Closed), Cause::Closed, "reported once");
        assert_eq!(r.down(9, Cause::Failed(5)), Cause::Failed(5), "not opened here");
    }
}
