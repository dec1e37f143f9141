//! An endpoint's receives: posted and unexpected, tagged and untagged.
//!
//! Two matching spaces ([`Matcher`]s), as in libfabric (`fi_recv` and
//! `fi_trecv` never match each other's messages). A transport hands each
//! arrival to [`Receives::matcher`] (`take_posted`, else `push_unexpected`);
//! everything the user does to receives goes through the methods here, so the
//! rules hold on every transport alike:
//! - an untagged receive takes any untagged message from its source, whatever
//!   tag or ignore mask its spec carries (`fi_recv` has no tag);
//! - a receive posted after an unexpected message from a then-unknown sender
//!   matches it once the sender is in the address vector;
//! - peek and claim look at tagged messages only (`fi_trecvmsg` with
//!   `FI_PEEK`/`FI_CLAIM`);
//! - cancel looks for the context among tagged receives first, then untagged.

use crate::addr::{Address, AvTable, PeerAddr};
use crate::complete;
use crate::error::{Error, Result};
use crate::peek::{Claim, Peeked};
use crate::provider::RecvOp;
use crate::sink::Sink;
use crate::tag::{Claimed, Matched, Matcher, RecvSpec};

/// What a transport keeps of a message no receive was waiting for.
pub trait Unexpected {
    /// The sender's name (to find its handle once it is inserted).
    fn from(&self) -> &Address;
    /// The message's length and immediate data, for a peek.
    fn describe(&self) -> (usize, Option<u64>);
}

/// The posted and unexpected receives of one endpoint.
pub struct Receives<U> {
    tagged: Matcher<RecvOp, U>,
    untagged: Matcher<RecvOp, U>,
}

impl<U> Default for Receives<U> {
    fn default() -> Self {
        Receives {
            tagged: Matcher::new(),
            untagged: Matcher::new(),
        }
    }
}

impl<U: Unexpected> Receives<U> {
    /// No receives.
    pub fn new() -> Self {
        Self::default()
    }

    /// The matching space of tagged (`true`) or untagged messages, for the
    /// transport's arrivals.
    #[inline]
    pub fn matcher(&mut self, tagged: bool) -> &mut Matcher<RecvOp, U> {
        if tagged {
            &mut self.tagged
        } else {
            &mut self.untagged
        }
    }

    /// Posts `op`: the earliest unexpected message it matches, taken, with
    /// the receive (the caller delivers it); else the receive waits.
    #[inline]
    pub fn post(&mut self, av: &AvTable, op: RecvOp) -> Option<Matched<RecvOp, U>> {
        let spec = if op.tagged {
            op.spec
        } else {
            RecvSpec {
                tag: 0,
                ignore: 0,
                ..op.spec
            }
        };
        let m = self.matcher(op.tagged);
        m.resolve_unknown(|u| av.reverse(u.from()));
        m.post(spec, op)
    }

    /// `FI_PEEK` (and `FI_CLAIM` with `claim`) among unexpected tagged
    /// messages.
    pub fn peek(&mut self, av: &AvTable, spec: RecvSpec, claim: bool) -> Option<(Peeked, Option<Claim>)> {
        self.tagged.resolve_unknown(|u| av.reverse(u.from()));
        self.tagged.probe(&spec, claim, U::describe)
    }

    /// The message `claim` took out of matching, or [`Error::NotFound`].
    pub fn take_claimed(&mut self, claim: &Claim) -> Result<Claimed<U>> {
        self.tagged
            .take_claimed(claim)
            .ok_or(Error::NotFound("no such claimed message"))
    }

    /// Cancels the posted receive with `context`: its completion reports
    /// [`Error::Canceled`]. [`Error::NotFound`] when none has it.
    pub fn cancel(&mut self, cq: &mut Sink<'_>, context: u64) -> Result<()> {
        complete::cancel(cq, &mut self.tagged, &mut self.untagged, context)
    }

    /// Whether a receive is posted directed at `src`.
    pub fn has_posted_from(&self, src: PeerAddr) -> bool {
        self.tagged.has_posted_from(src) || self.untagged.has_posted_from(src)
    }

    /// Removes every receive directed at `src` (it can never match: the
    /// peer is gone), tagged then untagged, each in post order.
    pub fn drain_posted_from(&mut self, src: PeerAddr) -> Vec<RecvOp> {
        let mut out: Vec<RecvOp> = self
            .tagged
            .drain_posted_from(src)
            .into_iter()
            .map(|(_, op)| op)
            .collect();
        out.extend(self.untagged.drain_posted_from(src).into_iter().map(|(_, op)| op));
        out
    }

    /// Removes every posted receive (endpoint teardown), tagged then
    /// untagged, each in post order.
    pub fn drain_posted(&mut self) -> Vec<RecvOp> {
        let mut out: Vec<RecvOp> = self.tagged.drain_posted().into_iter().map(|(_, op)| op).collect();
        out.extend(self.untagged.drain_posted().into_iter().map(|(_, op)| op));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::completion::Completion;

    struct Msg(Address);

    impl Unexpected for Msg {
        fn from(&self) -> &Address {
            &self.0
        }
        fn describe(&self) -> (usize, Option<u64>) {
            (7, None)
        }
    }

    fn recv(src: PeerAddr, tag: u64, ignore: u64, tagged: bool, context: u64) -> RecvOp {
        RecvOp {
            spec: RecvSpec { src, tag, ignore },
            tagged,
            buf: vec![0; 8].into(),
            context,
        }
    }

    #[test]
    fn an_untagged_receive_ignores_the_tag_in_its_spec() {
        let av = AvTable::default();
        let name = Address::new(&[1, 2, 3]).unwrap();
        let mut rx: Receives<Msg> = Receives::new();
        rx.matcher(false).push_unexpected(PeerAddr::UNSPEC, 0, Msg(name));
        let hit = rx.post(&av, recv(PeerAddr::UNSPEC, 5, 0, false, 1));
        assert!(
            hit.is_some(),
            "an untagged receive with tag 5 takes an untagged message"
        );

        // Posted first, then the message arrives: the transport looks for
        // tag 0, which the receive's spec now carries.
        assert!(rx.post(&av, recv(PeerAddr::UNSPEC, 5, 0, false, 2)).is_none());
        assert!(rx.matcher(false).take_posted(PeerAddr::UNSPEC, 0).is_some());

        // A tagged receive still compares tags, and never sees untagged messages.
        rx.matcher(false).push_unexpected(PeerAddr::UNSPEC, 0, Msg(name));
        assert!(rx.post(&av, recv(PeerAddr::UNSPEC, 0, 0, true, 3)).is_none());
        assert!(rx.matcher(true).take_posted(PeerAddr::UNSPEC, 5).is_none());
    }

    #[test]
    fn cancel_and_drain_cover_both_spaces() {
        let av = AvTable::default();
        let peer = PeerAddr(4);
        let mut rx: Receives<Msg> = Receives::new();
        assert!(rx.post(&av, recv(peer, 1, 0, true, 10)).is_none());
        assert!(rx.post(&av, recv(peer, 0, 0, false, 11)).is_none());
        assert!(rx.post(&av, recv(PeerAddr::UNSPEC, 0, 0, false, 12)).is_none());
        assert!(rx.has_posted_from(peer));

        let mut ring = std::collections::VecDeque::new();
        let mut out: [Completion; 0] = [];
        let mut filled = 0;
        {
            let mut cq = Sink::new(&mut out, &mut filled, &mut ring);
            assert_eq!(
                rx.cancel(&mut cq, 99),
                Err(Error::NotFound("no posted receive with that context"))
            );
            rx.cancel(&mut cq, 11).expect("the untagged receive is found");
        }
        assert_eq!(ring.len(), 1);
        assert_eq!(ring[0].context, 11);
        assert_eq!(ring[0].result, Err(Error::Canceled));

        let gone: Vec<u64> = rx.drain_posted_from(peer).iter().map(|op| op.context).collect();
        assert_eq!(gone, [10]);
        assert!(!rx.has_posted_from(peer));
        let rest: Vec<u64> = rx.drain_posted().iter().map(|op| op.context).collect();
        assert_eq!(rest, [12]);
    }
}
