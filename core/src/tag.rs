//! Tag matching: the posted-receive and unexpected-message queues of one matching space.
//!
//! Both queues share one structure: entries live in a `slab::Slab` and are threaded on two intrusive
//! doubly linked lists, a global one in insertion order and a per-peer one (any-source receives sit on
//! the [`PeerAddr::UNSPEC`] list). Why: a matched entry is unlinked from the middle in O(1) without
//! allocating; an arrival scans only its peer's receives plus the any-source ones and, as in libfabric's
//! util_srx, the lower sequence number of the two candidates wins (post order across wildcards); a
//! directed post scans only that peer's unexpected messages, while an any-source post walks the global
//! list so its first hit is the earliest arrival. Scans within a list are linear: `ignore` masks rule
//! out hashing by tag.

use slab::Slab;

use crate::hash::FastMap;

use crate::addr::PeerAddr;
use crate::peek::{Claim, Peeked};

/// What a posted receive accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvSpec {
    /// Source to accept, or [`PeerAddr::UNSPEC`] for any source.
    pub src: PeerAddr,
    /// Tag to accept (bits set in `ignore` are not compared).
    pub tag: u64,
    /// Tag bits to ignore when matching.
    pub ignore: u64,
}

impl RecvSpec {
    /// Any source, tag 0, ignore 0: the spec used for untagged receives.
    pub fn any() -> RecvSpec {
        RecvSpec {
            src: PeerAddr::UNSPEC,
            tag: 0,
            ignore: 0,
        }
    }

    /// Whether a message from `src` carrying `tag` satisfies this spec.
    pub fn matches(&self, src: PeerAddr, tag: u64) -> bool {
        (self.src.is_unspec() || self.src == src) && (tag & !self.ignore) == (self.tag & !self.ignore)
    }
}

/// A receive matched with an unexpected message.
#[derive(Debug)]
pub struct Matched<R, U> {
    /// The receive that was posted.
    pub recv: R,
    /// The spec it was posted with.
    pub spec: RecvSpec,
    /// Source of the message.
    pub src: PeerAddr,
    /// Tag of the message.
    pub tag: u64,
    /// The queued unexpected message.
    pub msg: U,
}

const NIL: usize = usize::MAX;

#[derive(Clone, Copy)]
struct Link {
    prev: usize,
    next: usize,
}

const UNLINKED: Link = Link { prev: NIL, next: NIL };

#[derive(Clone, Copy)]
struct Ends {
    head: usize,
    tail: usize,
}

impl Default for Ends {
    fn default() -> Self {
        Ends { head: NIL, tail: NIL }
    }
}

/// Which intrusive list a link belongs to.
#[derive(Clone, Copy)]
enum Chain {
    All,
    Peer,
}

struct Node<T> {
    /// Posted receives: their spec. Unexpected messages: their source and tag (`ignore` is 0, unused).
    spec: RecvSpec,
    seq: u64,
    val: T,
    all: Link,
    peer: Link,
}

impl<T> Node<T> {
    fn link(&mut self, chain: Chain) -> &mut Link {
        match chain {
            Chain::All => &mut self.all,
            Chain::Peer => &mut self.peer,
        }
    }
}

/// Handles below this have their per-peer list in a dense table (address
/// vectors hand out small handles); larger ones go to a hash map.
const DENSE_PEERS: u64 = 1 << 16;

/// The per-peer list ends of one queue, by peer handle.
#[derive(Default)]
struct PeerLists {
    dense: Vec<Ends>,
    sparse: FastMap<PeerAddr, Ends>,
}

impl PeerLists {
    #[inline]
    fn get(&self, src: PeerAddr) -> Option<&Ends> {
        match src.0 < DENSE_PEERS {
            true => self.dense.get(src.0 as usize),
            false => self.sparse.get(&src),
        }
    }

    #[inline]
    fn get_mut(&mut self, src: PeerAddr) -> Option<&mut Ends> {
        match src.0 < DENSE_PEERS {
            true => self.dense.get_mut(src.0 as usize),
            false => self.sparse.get_mut(&src),
        }
    }

    /// The ends for `src`, made empty if it had none.
    #[inline]
    fn entry(&mut self, src: PeerAddr) -> &mut Ends {
        if src.0 >= DENSE_PEERS {
            return self.sparse.entry(src).or_default();
        }
        let i = src.0 as usize;
        if i >= self.dense.len() {
            self.dense.resize(i + 1, Ends::default());
        }
        &mut self.dense[i]
    }

    /// Forgets `src`'s (empty) list.
    fn forget(&mut self, src: PeerAddr) {
        if src.0 >= DENSE_PEERS {
            self.sparse.remove(&src);
        }
    }
}

/// Entries in insertion order, both globally and per peer (keyed by `spec.src`).
struct Queue<T> {
    nodes: Slab<Node<T>>,
    all: Ends,
    /// The per-peer list of [`PeerAddr::UNSPEC`] (any-source receives,
    /// messages from unknown senders), kept out of the map: every arrival
    /// looks at it.
    any: Ends,
    peers: PeerLists,
    next_seq: u64,
}

impl<T> Queue<T> {
    fn new() -> Self {
        Queue {
            nodes: Slab::new(),
            all: Ends::default(),
            any: Ends::default(),
            peers: PeerLists::default(),
            next_seq: 0,
        }
    }

    #[inline]
    fn push(&mut self, spec: RecvSpec, val: T) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let idx = self.nodes.insert(Node {
            spec,
            seq,
            val,
            all: UNLINKED,
            peer: UNLINKED,
        });
        append(&mut self.nodes, &mut self.all, idx, Chain::All);
        let ends = match spec.src.is_unspec() {
            true => &mut self.any,
            false => self.peers.entry(spec.src),
        };
        append(&mut self.nodes, ends, idx, Chain::Peer);
    }

    /// The per-peer list of `src`, if it was ever used.
    fn ends(&self, src: PeerAddr) -> Option<&Ends> {
        match src.is_unspec() {
            true => Some(&self.any),
            false => self.peers.get(src),
        }
    }

    #[inline]
    fn remove(&mut self, idx: usize) -> Node<T> {
        let node = self.nodes.remove(idx);
        unlink(&mut self.nodes, &mut self.all, node.all, Chain::All);
        let ends = match node.spec.src.is_unspec() {
            true => Some(&mut self.any),
            false => self.peers.get_mut(node.spec.src),
        };
        if let Some(ends) = ends {
            unlink(&mut self.nodes, ends, node.peer, Chain::Peer);
        }
        node
    }

    /// First entry satisfying `pred`, in insertion order: among all entries, or only those of one peer.
    ///
    /// `#[inline]` so that it joins its callers' code whatever codegen unit
    /// its instantiation lands in (the arrival path's search runs it twice).
    #[inline]
    fn find(&self, peer: Option<PeerAddr>, mut pred: impl FnMut(&Node<T>) -> bool) -> Option<usize> {
        if self.nodes.is_empty() {
            return None;
        }
        let mut cur = match peer {
            None => self.all.head,
            Some(src) => self.ends(src).map_or(NIL, |ends| ends.head),
        };
        while cur != NIL {
            let node = &self.nodes[cur];
            if pred(node) {
                return Some(cur);
            }
            cur = if peer.is_some() { node.peer.next } else { node.all.next };
        }
        None
    }
}

fn append<T>(nodes: &mut Slab<Node<T>>, ends: &mut Ends, idx: usize, chain: Chain) {
    *nodes[idx].link(chain) = Link {
        prev: ends.tail,
        next: NIL,
    };
    match ends.tail {
        NIL => ends.head = idx,
        tail => nodes[tail].link(chain).next = idx,
    }
    ends.tail = idx;
}

/// Links `idx` into a peer list so the list stays in sequence order.
fn insert_by_seq<T>(nodes: &mut Slab<Node<T>>, ends: &mut Ends, idx: usize) {
    let seq = nodes[idx].seq;
    let mut after = ends.tail;
    while after != NIL && nodes[after].seq > seq {
        after = nodes[after].peer.prev;
    }
    let next = if after == NIL {
        ends.head
    } else {
        nodes[after].peer.next
    };
    nodes[idx].peer = Link { prev: after, next };
    match after {
        NIL => ends.head = idx,
        a => nodes[a].peer.next = idx,
    }
    match next {
        NIL => ends.tail = idx,
        n => nodes[n].peer.prev = idx,
    }
}

fn unlink<T>(nodes: &mut Slab<Node<T>>, ends: &mut Ends, link: Link, chain: Chain) {
    match link.prev {
        NIL => ends.head = link.next,
        prev => nodes[prev].link(chain).next = link.next,
    }
    match link.next {
        NIL => ends.tail = link.prev,
        next => nodes[next].link(chain).prev = link.prev,
    }
}

/// Posted-receive and unexpected-message queues of one matching space (tagged or untagged).
///
/// `R` is the provider's posted-receive context, `U` its queued unexpected message.
pub struct Matcher<R, U> {
    posted: Queue<R>,
    unexpected: Queue<U>,
    /// Messages taken out of matching by a claim, by claim number.
    claimed: FastMap<u64, Claimed<U>>,
    next_claim: u64,
}

/// A claimed message: out of the unexpected queue, waiting for its receive.
#[derive(Debug)]
pub struct Claimed<U> {
    /// Source of the message.
    pub src: PeerAddr,
    /// Tag of the message.
    pub tag: u64,
    /// The message.
    pub msg: U,
}

impl<R, U> Default for Matcher<R, U> {
    fn default() -> Self {
        Self::new()
    }
}

impl<R, U> Matcher<R, U> {
    /// An empty matcher.
    pub fn new() -> Self {
        Matcher {
            posted: Queue::new(),
            unexpected: Queue::new(),
            claimed: FastMap::default(),
            next_claim: 0,
        }
    }

    /// A message from `src` with `tag` arrived: remove and return the earliest-posted receive that accepts it.
    ///
    /// Inlined (with the removal) into the provider's arrival path, so the
    /// receive moves from its slot straight to where the caller keeps it;
    /// the search stays out of line.
    #[inline]
    pub fn take_posted(&mut self, src: PeerAddr, tag: u64) -> Option<(RecvSpec, R)> {
        let idx = self.posted_match(src, tag)?;
        let node = self.posted.remove(idx);
        Some((node.spec, node.val))
    }

    /// The slab index of the earliest-posted receive accepting a message
    /// from `src` with `tag`: the first match on `src`'s list or on the
    /// any-source list, whichever was posted first.
    fn posted_match(&self, src: PeerAddr, tag: u64) -> Option<usize> {
        let accepts = |n: &Node<R>| n.spec.matches(src, tag);
        let directed = if src.is_unspec() {
            None
        } else {
            self.posted.find(Some(src), accepts)
        };
        let any = self.posted.find(Some(PeerAddr::UNSPEC), accepts);
        match (directed, any) {
            (Some(d), Some(a)) if self.posted.nodes[a].seq < self.posted.nodes[d].seq => Some(a),
            (Some(d), _) => Some(d),
            (None, a) => a,
        }
    }

    /// Queue a message that matched no posted receive.
    pub fn push_unexpected(&mut self, src: PeerAddr, tag: u64, msg: U) {
        self.unexpected.push(RecvSpec { src, tag, ignore: 0 }, msg);
    }

    /// Post a receive: if an unexpected message matches, remove the earliest-arrived one and return it
    /// together with the receive (the receive is NOT queued); otherwise queue the receive and return None.
    #[inline]
    pub fn post(&mut self, spec: RecvSpec, recv: R) -> Option<Matched<R, U>> {
        match self.find_unexpected(&spec) {
            Some(idx) => {
                let node = self.unexpected.remove(idx);
                Some(Matched {
                    recv,
                    spec,
                    src: node.spec.src,
                    tag: node.spec.tag,
                    msg: node.val,
                })
            }
            None => {
                self.posted.push(spec, recv);
                None
            }
        }
    }

    /// Look at (without removing) the earliest unexpected message a spec would match (for FI_PEEK).
    pub fn peek_unexpected(&self, spec: &RecvSpec) -> Option<(PeerAddr, u64, &U)> {
        let node = &self.unexpected.nodes[self.find_unexpected(spec)?];
        Some((node.spec.src, node.spec.tag, &node.val))
    }

    /// `FI_PEEK` (and `FI_CLAIM` with `claim`): what the earliest unexpected
    /// message `spec` matches would report, `describe` giving its length and
    /// immediate data. With `claim` the message leaves the unexpected queue
    /// for [`take_claimed`](Self::take_claimed), under the returned claim.
    pub fn probe(
        &mut self,
        spec: &RecvSpec,
        claim: bool,
        describe: impl FnOnce(&U) -> (usize, Option<u64>),
    ) -> Option<(Peeked, Option<Claim>)> {
        let idx = self.find_unexpected(spec)?;
        let node = &self.unexpected.nodes[idx];
        let (len, data) = describe(&node.val);
        let peeked = Peeked {
            src: node.spec.src,
            tag: node.spec.tag,
            len,
            data,
        };
        if !claim {
            return Some((peeked, None));
        }
        let node = self.unexpected.remove(idx);
        let id = self.next_claim;
        self.next_claim += 1;
        let msg = Claimed {
            src: node.spec.src,
            tag: node.spec.tag,
            msg: node.val,
        };
        self.claimed.insert(id, msg);
        Some((peeked, Some(Claim::new(id))))
    }

    /// The message a [`probe`](Self::probe) claimed, removed; `None` for a
    /// claim this matcher does not hold (already taken, or another's).
    pub fn take_claimed(&mut self, claim: &Claim) -> Option<Claimed<U>> {
        self.claimed.remove(&claim.id())
    }

    /// Removes every claimed message (endpoint teardown).
    pub fn drain_claimed(&mut self) -> Vec<Claimed<U>> {
        self.claimed.drain().map(|(_, c)| c).collect()
    }

    /// Number of claimed messages not yet received.
    pub fn claimed_len(&self) -> usize {
        self.claimed.len()
    }

    fn find_unexpected(&self, spec: &RecvSpec) -> Option<usize> {
        let peer = if spec.src.is_unspec() { None } else { Some(spec.src) };
        self.unexpected.find(peer, |n| spec.matches(n.spec.src, n.spec.tag))
    }

    /// Remove the earliest-posted receive for which `pred` is true (cancel).
    pub fn cancel_posted(&mut self, mut pred: impl FnMut(&R) -> bool) -> Option<(RecvSpec, R)> {
        let idx = self.posted.find(None, |n| pred(&n.val))?;
        let node = self.posted.remove(idx);
        Some((node.spec, node.val))
    }

    /// Remove every unexpected message from `src` (the peer died / its connection was dropped),
    /// in arrival order.
    pub fn drain_unexpected_from(&mut self, src: PeerAddr) -> Vec<U> {
        let mut out = Vec::new();
        while let Some(idx) = self.unexpected.find(Some(src), |_| true) {
            out.push(self.unexpected.remove(idx).val);
        }
        if !src.is_unspec() {
            self.unexpected.peers.forget(src);
        }
        out
    }

    /// Gives unexpected messages that arrived from a then-unknown source
    /// ([`PeerAddr::UNSPEC`]) the handle `resolve` now finds for them, so a
    /// receive directed at a peer inserted into the address vector after its
    /// messages arrived still matches them (and reports their source).
    /// Entries `resolve` still maps to `UNSPEC` stay. Cheap when there are
    /// none: that check is inlined into the posting path, the walk is not.
    #[inline]
    pub fn resolve_unknown(&mut self, resolve: impl FnMut(&U) -> PeerAddr) {
        if self.unexpected.any.head != NIL {
            self.resolve_unknown_walk(resolve);
        }
    }

    /// The walk behind [`resolve_unknown`](Self::resolve_unknown).
    fn resolve_unknown_walk(&mut self, mut resolve: impl FnMut(&U) -> PeerAddr) {
        let q = &mut self.unexpected;
        let mut cur = q.any.head;
        while cur != NIL {
            let next = q.nodes[cur].peer.next;
            let src = resolve(&q.nodes[cur].val);
            if !src.is_unspec() {
                let link = q.nodes[cur].peer;
                unlink(&mut q.nodes, &mut q.any, link, Chain::Peer);
                q.nodes[cur].spec.src = src;
                let ends = q.peers.entry(src);
                insert_by_seq(&mut q.nodes, ends, cur);
            }
            cur = next;
        }
    }

    /// Remove every posted receive directed at `src` (the peer is gone), in
    /// post order; any-source receives stay.
    pub fn drain_posted_from(&mut self, src: PeerAddr) -> Vec<(RecvSpec, R)> {
        let mut out = Vec::new();
        if src.is_unspec() {
            return out;
        }
        while let Some(idx) = self.posted.find(Some(src), |_| true) {
            let node = self.posted.remove(idx);
            out.push((node.spec, node.val));
        }
        out
    }

    /// Whether a posted receive is directed at `src`.
    pub fn has_posted_from(&self, src: PeerAddr) -> bool {
        !src.is_unspec() && self.posted.ends(src).is_some_and(|e| e.head != NIL)
    }

    /// Remove all posted receives, in post order (endpoint teardown).
    pub fn drain_posted(&mut self) -> Vec<(RecvSpec, R)> {
        let mut out = Vec::with_capacity(self.posted.nodes.len());
        while let Some(idx) = self.posted.find(None, |_| true) {
            let node = self.posted.remove(idx);
            out.push((node.spec, node.val));
        }
        out
    }

    /// Number of queued posted receives.
    pub fn posted_len(&self) -> usize {
        self.posted.nodes.len()
    }

    /// Bytes one queued unexpected message's slot takes, besides what the
    /// message owns.
    pub const fn unexpected_slot() -> usize {
        std::mem::size_of::<Node<U>>()
    }

    /// Number of queued unexpected messages.
    pub fn unexpected_len(&self) -> usize {
        self.unexpected.nodes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const P0: PeerAddr = PeerAddr(0);
    const P1: PeerAddr = PeerAddr(1);
    const ANY: PeerAddr = PeerAddr::UNSPEC;

    fn spec(src: PeerAddr, tag: u64, ignore: u64) -> RecvSpec {
        RecvSpec { src, tag, ignore }
    }

    fn parts<R, U>(m: Matched<R, U>) -> (R, RecvSpec, PeerAddr, u64, U) {
        (m.recv, m.spec, m.src, m.tag, m.msg)
    }

    #[test]
    fn exact_tag() {
        let mut m = Matcher::<u32, ()>::new();
        assert!(m.post(spec(P0, 7, 0), 1).is_none());
        assert_eq!(m.take_posted(P0, 8), None);
        assert_eq!(m.take_posted(P1, 7), None);
        assert_eq!(m.take_posted(P0, 7), Some((spec(P0, 7, 0), 1)));
        assert_eq!(m.posted_len(), 0);
    }

    #[test]
    fn masked_tag() {
        let mut m = Matcher::<u32, ()>::new();
        m.post(spec(ANY, 0xAB00, 0xFF), 1);
        assert_eq!(m.take_posted(P0, 0xAC42), None);
        assert_eq!(m.take_posted(P1, 0xAB42).map(|x| x.1), Some(1));
        assert!(RecvSpec::any().matches(P0, 0));
        assert!(!RecvSpec::any().matches(P0, 1));
    }

    #[test]
    fn post_order_across_any_and_directed() {
        let mut m = Matcher::<u32, ()>::new();
        m.post(spec(ANY, 5, 0), 1);
        m.post(spec(P0, 5, 0), 2);
        assert_eq!(m.take_posted(P0, 5).map(|x| x.1), Some(1));
        assert_eq!(m.take_posted(P0, 5).map(|x| x.1), Some(2));

        m.post(spec(P0, 5, 0), 3);
        m.post(spec(ANY, 5, 0), 4);
        assert_eq!(m.take_posted(P0, 5).map(|x| x.1), Some(3));
        assert_eq!(m.take_posted(P0, 5).map(|x| x.1), Some(4));
        assert_eq!(m.take_posted(P0, 5), None);
    }

    #[test]
    fn unexpected_then_post() {
        let mut m = Matcher::<u32, &str>::new();
        m.push_unexpected(P1, 9, "a");
        m.push_unexpected(P0, 9, "b");
        m.push_unexpected(P0, 9, "c");
        // Directed post skips the other peer's earlier message.
        let got = m.post(spec(P0, 9, 0), 1).map(parts);
        assert_eq!(got, Some((1, spec(P0, 9, 0), P0, 9, "b")));
        // Any-source post takes the earliest arrival.
        assert_eq!(m.post(spec(ANY, 9, 0), 2).map(|x| x.msg), Some("a"));
        assert_eq!(m.post(spec(ANY, 9, 0), 3).map(|x| x.msg), Some("c"));
        assert!(m.post(spec(ANY, 9, 0), 4).is_none());
        assert_eq!((m.posted_len(), m.unexpected_len()), (1, 0));
    }

    #[test]
    fn peek_does_not_remove() {
        let mut m = Matcher::<u32, &str>::new();
        m.push_unexpected(P1, 3, "x");
        assert_eq!(m.peek_unexpected(&spec(P0, 3, 0)), None);
        assert_eq!(m.peek_unexpected(&spec(ANY, 2, 1)), Some((P1, 3, &"x")));
        assert_eq!(m.unexpected_len(), 1);
    }

    #[test]
    fn probe_peeks_and_claims() {
        let mut m = Matcher::<u32, &str>::new();
        m.push_unexpected(P1, 3, "x");
        m.push_unexpected(P0, 3, "yy");
        let describe = |u: &&str| (u.len(), Some(7));
        let want = Peeked {
            src: P1,
            tag: 3,
            len: 1,
            data: Some(7),
        };
        assert_eq!(m.probe(&spec(ANY, 3, 0), false, describe), Some((want, None)));
        assert_eq!(m.probe(&spec(ANY, 4, 0), true, describe), None);
        let (p, c) = m.probe(&spec(P0, 3, 0), true, describe).unwrap();
        assert_eq!((p.src, p.len), (P0, 2));
        let c = c.unwrap();
        // Claimed: no receive or peek finds it any more.
        assert_eq!(m.unexpected_len(), 1);
        assert!(m.post(spec(P0, 3, 0), 1).is_none());
        assert_eq!(m.cancel_posted(|_| true).map(|x| x.1), Some(1));
        let got = m.take_claimed(&c).unwrap();
        assert_eq!((got.src, got.tag, got.msg), (P0, 3, "yy"));
        assert!(m.take_claimed(&c).is_none());
        assert_eq!(m.claimed_len(), 0);
        // The other one is still there for a receive.
        assert_eq!(m.post(spec(ANY, 3, 0), 2).map(|x| x.msg), Some("x"));
    }

    #[test]
    fn cancel() {
        let mut m = Matcher::<u32, ()>::new();
        for (i, src) in [P0, ANY, P1, ANY].into_iter().enumerate() {
            m.post(spec(src, 1, 0), i as u32);
        }
        assert_eq!(m.cancel_posted(|&r| r >= 1), Some((spec(ANY, 1, 0), 1)));
        assert_eq!(m.cancel_posted(|&r| r == 9), None);
        assert_eq!(m.take_posted(P1, 1).map(|x| x.1), Some(2));
        assert_eq!(m.drain_posted(), vec![(spec(P0, 1, 0), 0), (spec(ANY, 1, 0), 3)]);
        assert_eq!(m.posted_len(), 0);
    }

    #[test]
    fn resolve_unknown_sources_keeps_arrival_order() {
        let mut m: Matcher<u32, (u64, &str)> = Matcher::new();
        let (a, b) = (PeerAddr(1), PeerAddr(2));
        m.push_unexpected(PeerAddr::UNSPEC, 5, (1, "a0"));
        m.push_unexpected(PeerAddr::UNSPEC, 5, (2, "b0"));
        m.push_unexpected(PeerAddr::UNSPEC, 5, (1, "a1"));
        m.push_unexpected(a, 5, (1, "a2"));
        m.push_unexpected(PeerAddr::UNSPEC, 5, (3, "c0"));
        // Peer 1 becomes known: its two unknown messages move ahead of a2.
        m.resolve_unknown(|&(from, _)| if from == 1 { a } else { PeerAddr::UNSPEC });
        assert!(m.post(spec(b, 5, 0), 0).is_none());
        assert!(m.cancel_posted(|_| true).is_some());
        let names: Vec<_> = (0..3)
            .map(|_| parts(m.post(spec(a, 5, 0), 0).unwrap()))
            .map(|p| (p.2, p.4 .1))
            .collect();
        assert_eq!(names, vec![(a, "a0"), (a, "a1"), (a, "a2")]);
        m.resolve_unknown(|&(from, _)| if from == 2 { b } else { PeerAddr::UNSPEC });
        assert_eq!(parts(m.post(spec(b, 5, 0), 0).unwrap()).4 .1, "b0");
        // Any-source receives still find what stays unknown.
        let p = parts(m.post(spec(PeerAddr::UNSPEC, 5, 0), 0).unwrap());
        assert_eq!((p.2, p.4 .1), (PeerAddr::UNSPEC, "c0"));
        assert_eq!(m.unexpected_len(), 0);
    }

    #[test]
    fn drain_posted_from_a_peer_keeps_the_rest() {
        let mut m: Matcher<u32, ()> = Matcher::new();
        let (a, b) = (PeerAddr(1), PeerAddr(2));
        m.post(spec(a, 1, 0), 10);
        m.post(spec(PeerAddr::UNSPEC, 1, 0), 11);
        m.post(spec(b, 1, 0), 12);
        m.post(spec(a, 2, 0), 13);
        let gone: Vec<u32> = m.drain_posted_from(a).into_iter().map(|(_, r)| r).collect();
        assert_eq!(gone, vec![10, 13]);
        assert!(m.drain_posted_from(PeerAddr::UNSPEC).is_empty());
        assert_eq!(m.posted_len(), 2);
        assert_eq!(m.take_posted(a, 1).map(|(_, r)| r), Some(11));
        assert_eq!(m.take_posted(b, 1).map(|(_, r)| r), Some(12));
    }

    #[test]
    fn drain_from_peer() {
        let mut m = Matcher::<u32, u32>::new();
        for (i, src) in [P0, P1, P0, P1, P0].into_iter().enumerate() {
            m.push_unexpected(src, 0, i as u32);
        }
        assert_eq!(m.drain_unexpected_from(P0), vec![0, 2, 4]);
        assert_eq!(m.drain_unexpected_from(P0), Vec::<u32>::new());
        assert_eq!(m.post(RecvSpec::any(), 9).map(|x| x.msg), Some(1));
        assert_eq!(m.unexpected_len(), 1);
    }

    #[test]
    fn edge_tags_and_masks() {
        let mut m = Matcher::<u32, ()>::new();
        m.post(spec(P0, u64::MAX, 0), 1);
        assert_eq!(m.take_posted(P0, u64::MAX - 1), None);
        assert_eq!(m.take_posted(P0, u64::MAX).map(|x| x.1), Some(1));
        m.post(spec(ANY, 0, u64::MAX), 2);
        assert_eq!(m.take_posted(P1, 0x1234).map(|x| x.1), Some(2));
        m.push_unexpected(P1, u64::MAX, ());
        assert!(m.post(spec(ANY, 0, u64::MAX), 3).is_some());
        assert!(m.drain_posted().is_empty());
        assert!(m.drain_unexpected_from(P1).is_empty());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Post(RecvSpec),
        Arrive(PeerAddr, u64),
        Peek(RecvSpec),
        Cancel(u32, u32),
        DrainFrom(PeerAddr),
        DrainPosted,
    }

    const TAGS: [u64; 5] = [0, 1, 2, 0xFF00, u64::MAX];
    const IGNORES: [u64; 5] = [0, 1, 0xFF, 0xFFFF_FFFF_0000_0000, u64::MAX];

    fn peer() -> impl Strategy<Value = PeerAddr> {
        (0u64..4).prop_map(PeerAddr)
    }

    fn tag() -> impl Strategy<Value = u64> {
        proptest::sample::select(&TAGS[..])
    }

    fn recv_spec() -> impl Strategy<Value = RecvSpec> {
        let src = prop_oneof![peer(), Just(ANY)];
        (src, tag(), proptest::sample::select(&IGNORES[..])).prop_map(|(src, tag, ignore)| RecvSpec {
            src,
            tag,
            ignore,
        })
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => recv_spec().prop_map(Op::Post),
            6 => (peer(), tag()).prop_map(|(s, t)| Op::Arrive(s, t)),
            1 => recv_spec().prop_map(Op::Peek),
            1 => (1u32..4, 0u32..4).prop_map(|(m, r)| Op::Cancel(m, r)),
            1 => peer().prop_map(Op::DrainFrom),
            1 => Just(Op::DrainPosted),
        ]
    }

    /// Naive reference: posted receives in post order, unexpected messages in arrival order.
    #[derive(Default)]
    struct Model {
        posted: Vec<(RecvSpec, u32)>,
        unexpected: Vec<(PeerAddr, u64, u32)>,
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]
        #[test]
        fn matches_naive_model(ops in proptest::collection::vec(op(), 1..120)) {
            let mut m = Matcher::<u32, u32>::new();
            let mut model = Model::default();
            for (id, op) in (0u32..).zip(ops) {
                match op {
                    Op::Post(s) => {
                        let got = m.post(s, id).map(parts);
                        let want = match model.unexpected.iter().position(|u| s.matches(u.0, u.1)) {
                            Some(i) => {
                                let (src, tag, msg) = model.unexpected.remove(i);
                                Some((id, s, src, tag, msg))
                            }
                            None => {
                                model.posted.push((s, id));
                                None
                            }
                        };
                        prop_assert_eq!(got, want);
                    }
                    Op::Arrive(src, tag) => {
                        let got = m.take_posted(src, tag);
                        let want = model.posted.iter().position(|p| p.0.matches(src, tag)).map(|i| model.posted.remove(i));
                        prop_assert_eq!(got, want);
                        if got.is_none() {
                            m.push_unexpected(src, tag, id);
                            model.unexpected.push((src, tag, id));
                        }
                    }
                    Op::Peek(s) => {
                        let want = model.unexpected.iter().find(|u| s.matches(u.0, u.1)).map(|u| (u.0, u.1, &u.2));
                        prop_assert_eq!(m.peek_unexpected(&s), want);
                    }
                    Op::Cancel(modulus, rem) => {
                        let got = m.cancel_posted(|&r| r % modulus == rem);
                        let want = model.posted.iter().position(|p| p.1 % modulus == rem).map(|i| model.posted.remove(i));
                        prop_assert_eq!(got, want);
                    }
                    Op::DrainFrom(src) => {
                        let (gone, kept): (Vec<_>, Vec<_>) = model.unexpected.drain(..).partition(|u| u.0 == src);
                        model.unexpected = kept;
                        let want: Vec<u32> = gone.into_iter().map(|u| u.2).collect();
                        prop_assert_eq!(m.drain_unexpected_from(src), want);
                    }
                    Op::DrainPosted => prop_assert_eq!(m.drain_posted(), std::mem::take(&mut model.posted)),
                }
                prop_assert_eq!(m.posted_len(), model.posted.len());
                prop_assert_eq!(m.unexpected_len(), model.unexpected.len());
            }
        }
    }
}
