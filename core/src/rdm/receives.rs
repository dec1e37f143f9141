//! An endpoint's receives: posted and unexpected, tagged and untagged.
//!
//! Two matching spaces ([`Matcher`]s), as in libfabric (`fi_recv` and
//! `fi_trecv` never match each other's messages). A transport hands each
//! arrival to [`Receives::take_posted`], else keeps it with
//! [`Receives::arrive`];
//! everything the user does to receives goes through the methods here, so the
//! rules hold on every transport alike:
//! - an untagged receive takes any untagged message from its source, whatever
//!   tag or ignore mask its spec carries (`fi_recv` has no tag);
//! - a receive posted after an unexpected message from a then-unknown sender
//!   matches it once the sender is in the address vector;
//! - peek and claim look at tagged messages only (`fi_trecvmsg` with
//!   `FI_PEEK`/`FI_CLAIM`);
//! - cancel looks for the context among tagged receives first, then untagged;
//! - what unexpected messages hold is counted as they come and go ([`Held`]).

use crate::addr::{Address, AvTable, PeerAddr};
use crate::complete;
use crate::error::{Error, Result};
use crate::peek::{Claim, Peeked};
use crate::provider::{RecvOp, Rejected};
use crate::sink::Sink;
use crate::tag::{Claimed, Matched, Matcher, RecvSpec};

use super::credit::cost;
use super::unexpected::{Held, Unexpected};

/// What [`Receives::drop_connection`] dropped.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Dropped {
    /// Requests to send.
    pub requests: u64,
    /// Eager messages.
    pub messages: u64,
    /// The credit they held ([`cost`] of each).
    pub credit: u64,
}

/// The posted and unexpected receives of one endpoint; `H` is the
/// transport's handle on an unexpected rendezvous message's data.
pub struct Receives<H> {
    tagged: Matcher<RecvOp, Unexpected<H>>,
    untagged: Matcher<RecvOp, Unexpected<H>>,
    held: Held,
    /// Per space (untagged, tagged): the address vector's
    /// [`AvTable::changes`] when its messages from unknown senders were
    /// last looked up there; until it changes, none of them can resolve.
    resolved_at: [u64; 2],
}

impl<H> Default for Receives<H> {
    fn default() -> Self {
        Receives {
            tagged: Matcher::new(),
            untagged: Matcher::new(),
            held: Held::default(),
            resolved_at: [0; 2],
        }
    }
}

impl<H> Receives<H> {
    /// Bytes of one unexpected message's slot, besides its payload.
    const SLOT: usize = Matcher::<RecvOp, Unexpected<H>>::unexpected_slot();

    /// No receives.
    pub fn new() -> Self {
        Self::default()
    }

    #[inline]
    fn space(&mut self, tagged: bool) -> &mut Matcher<RecvOp, Unexpected<H>> {
        if tagged {
            &mut self.tagged
        } else {
            &mut self.untagged
        }
    }

    /// A message from `src` with `tag` arrived: the earliest-posted receive
    /// that accepts it, taken with its spec, if any (the transport delivers
    /// into it). The pair is the matcher's own, handed on without a move.
    #[inline]
    pub fn take_posted(&mut self, tagged: bool, src: PeerAddr, tag: u64) -> Option<(RecvSpec, RecvOp)> {
        self.space(tagged).take_posted(src, tag)
    }

    /// Gives messages of `tagged`'s space from then-unknown senders the
    /// handles `av` now has for them (`reverse`: the transport's look-up of
    /// a sender's name), when the table changed since the last look: a post
    /// does not walk them while it is unchanged.
    #[inline]
    fn resolve(&mut self, av: &AvTable, tagged: bool, reverse: impl Fn(&AvTable, &Address) -> PeerAddr) {
        let seen = &mut self.resolved_at[usize::from(tagged)];
        if *seen != av.changes() {
            *seen = av.changes();
            self.space(tagged).resolve_unknown(|u| reverse(av, u.from()));
        }
    }

    /// A message no posted receive accepted: kept for a later one.
    pub fn arrive(&mut self, tagged: bool, src: PeerAddr, tag: u64, msg: Unexpected<H>) {
        self.held.add(&msg, Self::SLOT);
        self.space(tagged).push_unexpected(src, tag, msg);
    }

    /// What the unexpected messages hold now.
    pub fn held(&self) -> Held {
        self.held
    }

    /// Posts `op`: the earliest unexpected message it matches, taken, with
    /// the receive (the caller delivers it); else the receive waits.
    /// `reverse` is how the transport finds a sender's handle by its name
    /// (`AvTable::reverse`, or a transport's looser look-up).
    #[inline]
    pub fn post(
        &mut self,
        av: &AvTable,
        op: RecvOp,
        reverse: impl Fn(&AvTable, &Address) -> PeerAddr,
    ) -> Option<Matched<RecvOp, Unexpected<H>>> {
        let spec = if op.tagged {
            op.spec
        } else {
            RecvSpec {
                tag: 0,
                ignore: 0,
                ..op.spec
            }
        };
        self.resolve(av, op.tagged, reverse);
        let hit = self.space(op.tagged).post(spec, op)?;
        self.held.remove(&hit.msg, Self::SLOT);
        Some(hit)
    }

    /// `FI_PEEK` (and `FI_CLAIM` with `claim`) among unexpected tagged
    /// messages.
    pub fn peek(
        &mut self,
        av: &AvTable,
        spec: RecvSpec,
        claim: bool,
        reverse: impl Fn(&AvTable, &Address) -> PeerAddr,
    ) -> Option<(Peeked, Option<Claim>)> {
        self.resolve(av, true, reverse);
        self.tagged.probe(&spec, claim, Unexpected::describe)
    }

    /// The message `claim` took out of matching, with the receive `op` that
    /// takes it; `op` handed back refused when there is none.
    #[allow(clippy::result_large_err)]
    pub fn claimed(
        &mut self,
        claim: &Claim,
        op: RecvOp,
    ) -> std::result::Result<(Claimed<Unexpected<H>>, RecvOp), Rejected<RecvOp>> {
        match self.take_claimed(claim) {
            Ok(c) => Ok((c, op)),
            Err(e) => Err(Rejected::new(e, op)),
        }
    }

    /// The message `claim` took out of matching, or [`Error::NotFound`].
    pub fn take_claimed(&mut self, claim: &Claim) -> Result<Claimed<Unexpected<H>>> {
        let c = self
            .tagged
            .take_claimed(claim)
            .ok_or(Error::NotFound("no such claimed message"))?;
        self.held.remove(&c.msg, Self::SLOT);
        Ok(c)
    }

    /// A connection ended: drops its kept requests to send (their data was
    /// to come over it), and, when its peer broke the protocol (`violated`),
    /// its kept eager messages too (nothing it sent is trusted). `of` says
    /// whether a kept message came on that connection.
    pub fn drop_connection(&mut self, violated: bool, mut of: impl FnMut(&Unexpected<H>) -> bool) -> Dropped {
        let gone = self.drop_kept(|u| (violated || matches!(u, Unexpected::Rts { .. })) && of(u));
        let mut d = Dropped::default();
        for u in &gone {
            match u {
                Unexpected::Rts { .. } => d.requests += 1,
                Unexpected::Eager { .. } => d.messages += 1,
            }
            d.credit += cost(u.payload_len() as u64);
        }
        d
    }

    /// Drops every kept message `pick` chooses, both spaces, and hands them
    /// back.
    pub fn drop_kept(&mut self, mut pick: impl FnMut(&Unexpected<H>) -> bool) -> Vec<Unexpected<H>> {
        let mut gone = self.tagged.remove_unexpected_where(&mut pick);
        gone.extend(self.untagged.remove_unexpected_where(&mut pick));
        for msg in &gone {
            self.held.remove(msg, Self::SLOT);
        }
        gone
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

    fn exact(av: &AvTable, name: &Address) -> PeerAddr {
        av.reverse(name)
    }

    fn eager<H>(from: &Address, len: usize) -> Unexpected<H> {
        Unexpected::Eager {
            from: *from,
            conn: (0, 0),
            data: None,
            payload: vec![1; len],
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
        let mut rx: Receives<()> = Receives::new();
        rx.arrive(false, PeerAddr::UNSPEC, 0, eager(&name, 3));
        let hit = rx.post(&av, recv(PeerAddr::UNSPEC, 5, 0, false, 1), exact);
        assert!(
            hit.is_some(),
            "an untagged receive with tag 5 takes an untagged message"
        );

        // Posted first, then the message arrives: the transport looks for
        // tag 0, which the receive's spec now carries.
        assert!(rx.post(&av, recv(PeerAddr::UNSPEC, 5, 0, false, 2), exact).is_none());
        assert!(rx.take_posted(false, PeerAddr::UNSPEC, 0).is_some());

        // A tagged receive still compares tags, and never sees untagged messages.
        rx.arrive(false, PeerAddr::UNSPEC, 0, eager(&name, 3));
        assert!(rx.post(&av, recv(PeerAddr::UNSPEC, 0, 0, true, 3), exact).is_none());
        assert!(rx.take_posted(true, PeerAddr::UNSPEC, 5).is_none());
    }

    #[test]
    fn cancel_and_drain_cover_both_spaces() {
        let av = AvTable::default();
        let peer = PeerAddr(4);
        let mut rx: Receives<()> = Receives::new();
        assert!(rx.post(&av, recv(peer, 1, 0, true, 10), exact).is_none());
        assert!(rx.post(&av, recv(peer, 0, 0, false, 11), exact).is_none());
        assert!(rx.post(&av, recv(PeerAddr::UNSPEC, 0, 0, false, 12), exact).is_none());
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

    #[test]
    fn what_unexpected_messages_hold_is_counted_in_and_out() {
        let av = AvTable::default();
        let name = Address::new(&[9]).unwrap();
        let mut rx: Receives<u64> = Receives::new();
        assert_eq!(rx.held(), Held::default());
        rx.arrive(true, PeerAddr::UNSPEC, 1, eager(&name, 100));
        rx.arrive(
            true,
            PeerAddr::UNSPEC,
            2,
            Unexpected::Rts {
                from: name,
                len: 1 << 20,
                data: None,
                handle: 7,
            },
        );
        let h = rx.held();
        assert_eq!((h.entries, h.payload), (2, 100));
        let slot = Matcher::<RecvOp, Unexpected<u64>>::unexpected_slot();
        assert!(h.bytes >= 2 * slot + 100, "{h:?}: entries cost their slots");

        // Claimed, it is still held until received.
        let spec = RecvSpec {
            src: PeerAddr::UNSPEC,
            tag: 2,
            ignore: 0,
        };
        let (_, claim) = rx.peek(&av, spec, true, exact).expect("the request is there");
        assert_eq!(rx.held().entries, 2);
        rx.take_claimed(&claim.expect("claimed")).expect("held");
        assert_eq!(rx.held().entries, 1);

        let hit = rx
            .post(&av, recv(PeerAddr::UNSPEC, 1, 0, true, 1), exact)
            .expect("the eager message");
        assert_eq!(hit.msg.payload_len(), 100);
        assert_eq!(rx.held(), Held::default(), "everything received: nothing held");
    }

    #[test]
    fn the_messages_picked_are_dropped_and_nothing_else() {
        let av = AvTable::default();
        let name = Address::new(&[9]).unwrap();
        let mut rx: Receives<u64> = Receives::new();
        let rts = |handle| Unexpected::Rts {
            from: name,
            len: 1 << 20,
            data: None,
            handle,
        };
        rx.arrive(true, PeerAddr::UNSPEC, 1, rts(1));
        rx.arrive(true, PeerAddr::UNSPEC, 1, eager(&name, 10));
        rx.arrive(false, PeerAddr::UNSPEC, 0, rts(1));
        rx.arrive(true, PeerAddr::UNSPEC, 1, rts(2));
        let gone = rx.drop_kept(|u| matches!(u, Unexpected::Rts { handle: 1, .. }));
        assert_eq!(gone.len(), 2);
        assert_eq!(rx.held().entries, 2);
        let first = rx.post(&av, recv(PeerAddr::UNSPEC, 1, 0, true, 1), exact);
        assert_eq!(first.expect("the eager message").msg.payload_len(), 10);
        let second = rx.post(&av, recv(PeerAddr::UNSPEC, 1, 0, true, 2), exact);
        assert!(matches!(
            second.expect("the other request").msg,
            Unexpected::Rts { handle: 2, .. }
        ));
        assert!(rx.post(&av, recv(PeerAddr::UNSPEC, 0, 0, false, 3), exact).is_none());
        assert_eq!(rx.held(), Held::default());
    }

    #[test]
    fn an_entry_costs_at_most_what_credit_charges_for_it() {
        // The largest transport handle is a few words (verbs: address, key,
        // id, connection); the slot plus an allocation's overhead must stay
        // within what a message is charged besides its payload.
        let slot = Matcher::<RecvOp, Unexpected<[u64; 5]>>::unexpected_slot();
        assert!(
            slot as u64 + 16 <= crate::rdm::credit::ENTRY_COST,
            "slot {slot} B against {} B charged",
            crate::rdm::credit::ENTRY_COST
        );
    }

    #[test]
    fn a_sender_inserted_after_its_messages_is_matched_by_a_directed_receive() {
        let mut av = AvTable::default();
        let early = Address::new(&[1]).unwrap();
        let late = Address::new(&[2]).unwrap();
        let pe = av.insert(early);
        let mut rx: Receives<()> = Receives::new();
        rx.arrive(true, PeerAddr::UNSPEC, 3, eager(&late, 1));
        // The table has not changed since: still unknown, so a receive
        // directed at the early peer does not take it.
        assert!(rx.post(&av, recv(pe, 3, 0, true, 1), exact).is_none());
        let pl = av.insert(late);
        let hit = rx
            .post(&av, recv(pl, 3, 0, true, 2), exact)
            .expect("resolved once the sender is in the table");
        assert_eq!(hit.src, pl);
        // A repeated insert changes nothing.
        let before = av.changes();
        assert_eq!(av.insert(late), pl);
        assert_eq!(av.changes(), before);
    }
}
