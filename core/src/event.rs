//! Peer events: a peer joined (its first connection with this endpoint is
//! up) or left (its last one ended, in order or not), as libfabric's event
//! queue reports `FI_CONNECTED`/`FI_SHUTDOWN` and UCX calls its error
//! handler. Opt-in (`EndpointAttr::peer_events`), produced by progress into a
//! bounded queue that [`Endpoint::peer_event`](crate::Endpoint::peer_event)
//! drains.

use std::collections::VecDeque;
use std::fmt;

use crate::addr::{Address, PeerAddr};
use crate::error::Error;

/// What happened to a peer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PeerEventKind {
    /// Its first connection with this endpoint is up (either side opened
    /// it): it can be reached and may send.
    Joined,
    /// Its last connection ended in order: it closed its endpoint (or its
    /// process exited with nothing unread). What was outstanding to it
    /// ended with [`Error::PeerClosed`].
    Closed,
    /// Its last connection failed with this error (the one its outstanding
    /// operations got, e.g. [`Error::PeerUnreachable`] or
    /// [`Error::Stalled`]).
    Failed(Error),
}

/// A peer joined or left; see [`Endpoint::peer_event`](crate::Endpoint::peer_event).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PeerEvent {
    /// Its handle in the endpoint's address vector, or [`PeerAddr::UNSPEC`]
    /// when its name has not been inserted (a peer that connected first).
    pub peer: PeerAddr,
    /// Its endpoint name: insert it into the address vector to talk back.
    pub name: Address,
    /// What happened.
    pub kind: PeerEventKind,
}

impl fmt::Display for PeerEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            PeerEventKind::Joined => write!(f, "peer {} ({}) joined", self.peer, self.name),
            PeerEventKind::Closed => write!(f, "peer {} ({}) closed", self.peer, self.name),
            PeerEventKind::Failed(e) => write!(f, "peer {} ({}) failed: {e}", self.peer, self.name),
        }
    }
}

/// A provider's bounded queue of peer events, with the set of peers that
/// joined (so a peer leaves once, however many connections it had).
/// Capacity 0: events are off and nothing is kept.
#[derive(Debug, Default)]
pub struct PeerEvents {
    queue: VecDeque<PeerEvent>,
    capacity: usize,
    /// The peers that joined, by the provider's key for a peer, with the
    /// name their events carry.
    joined: crate::hash::FastMap<Address, Address>,
    lost: u64,
}

impl PeerEvents {
    /// A queue of at most `capacity` events (0: off).
    pub fn new(capacity: usize) -> PeerEvents {
        PeerEvents {
            capacity,
            ..PeerEvents::default()
        }
    }

    /// Whether events are on.
    #[inline]
    pub fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// The peer `key` (the provider's identity for it: TCP keys a peer by
    /// IP and port, whatever name it was inserted by) named `name` has a
    /// connection up: a `Joined` event unless it had joined.
    pub fn up(&mut self, key: Address, name: Address, peer: PeerAddr) {
        if !self.enabled() {
            return;
        }
        if let std::collections::hash_map::Entry::Vacant(v) = self.joined.entry(key) {
            v.insert(name);
            self.push(PeerEvent {
                peer,
                name,
                kind: PeerEventKind::Joined,
            });
        }
    }

    /// The peer `key`'s last connection ended with `cause`: `Closed` for
    /// [`Error::PeerClosed`], `Failed` otherwise, if it had joined.
    pub fn down(&mut self, key: Address, peer: PeerAddr, cause: Error) {
        if !self.enabled() {
            return;
        }
        let Some(name) = self.joined.remove(&key) else { return };
        let kind = match cause {
            Error::PeerClosed { .. } => PeerEventKind::Closed,
            e => PeerEventKind::Failed(e),
        };
        self.push(PeerEvent { peer, name, kind });
    }

    fn push(&mut self, ev: PeerEvent) {
        if self.queue.len() >= self.capacity {
            // Bounded: a peer that joins and leaves in a loop cannot grow
            // the queue. The newest is dropped and counted, as an event
            // queue reports an overrun.
            self.lost += 1;
            crate::warn_limited!(event = %ev, "peer event queue full; event dropped");
            return;
        }
        self.queue.push_back(ev);
    }

    /// The oldest event, if any.
    pub fn pop(&mut self) -> Option<PeerEvent> {
        self.queue.pop_front()
    }

    /// Events dropped because the queue was full.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Forgets every peer (the endpoint closes): no event follows.
    pub fn clear(&mut self) {
        self.queue.clear();
        self.joined.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(b: u8) -> Address {
        Address::new(&[1, b]).unwrap()
    }

    #[test]
    fn a_peer_joins_and_leaves_once() {
        let mut q = PeerEvents::new(8);
        q.up(name(1), name(1), PeerAddr(3));
        q.up(name(1), name(9), PeerAddr(3));
        q.down(name(1), PeerAddr(3), Error::PeerClosed { peer: PeerAddr(3) });
        q.down(name(1), PeerAddr(3), Error::PeerClosed { peer: PeerAddr(3) });
        q.down(name(2), PeerAddr::UNSPEC, Error::Canceled);
        let got: Vec<(Address, PeerEventKind)> = std::iter::from_fn(|| q.pop()).map(|e| (e.name, e.kind)).collect();
        assert_eq!(
            got,
            [(name(1), PeerEventKind::Joined), (name(1), PeerEventKind::Closed)]
        );
    }

    #[test]
    fn a_failure_carries_its_error() {
        let mut q = PeerEvents::new(8);
        q.up(name(1), name(1), PeerAddr(0));
        let e = Error::PeerUnreachable {
            peer: PeerAddr(0),
            errno: libc::ECONNRESET,
        };
        q.down(name(1), PeerAddr(0), e.clone());
        q.pop();
        assert_eq!(q.pop().map(|e| e.kind), Some(PeerEventKind::Failed(e)));
    }

    #[test]
    fn the_queue_is_bounded_and_counts_what_it_dropped() {
        let mut q = PeerEvents::new(2);
        for b in 0..5 {
            q.up(name(b), name(b), PeerAddr(b as u64));
        }
        assert_eq!(q.lost(), 3);
        assert_eq!(q.pop().map(|e| e.name), Some(name(0)));
        assert_eq!(q.pop().map(|e| e.name), Some(name(1)));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn off_keeps_nothing() {
        let mut q = PeerEvents::new(0);
        q.up(name(1), name(1), PeerAddr(0));
        assert_eq!((q.pop(), q.lost()), (None, 0));
    }
}
