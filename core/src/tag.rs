//! Tag matching: the posted-receive and unexpected-message queues of one matching space.
//!
//! Both queues share one structure: entries live in a `slab::Slab` and are threaded on three intrusive
//! doubly linked lists, each in insertion order: a global one, a per-peer one (any-source receives and
//! messages from unknown senders sit on the [`PeerAddr::UNSPEC`] list), and a per-tag one: entries with
//! an exact tag (`ignore` 0: every unexpected message, most receives) are chained in a bucket of their
//! tag's hash, receives with a masked tag on one wildcard list. A matched entry is unlinked from the
//! middle in O(1) without allocating.
//!
//! Every search takes the shorter of two complete candidate sets (the lists keep their lengths), so
//! its cost does not grow with unrelated entries, as UCX's and libfabric's util_srx's hashed queues:
//! - an arrival: its tag's bucket plus the wildcard list, or its peer's list plus the any-source list;
//!   as in util_srx, the lower sequence number of the two candidates wins (post order across
//!   wildcards);
//! - a post with an exact tag: its tag's bucket, or (directed) its peer's list;
//! - a post with a masked tag: its peer's list (directed) or the global list (any source), whose first
//!   hit is the earliest arrival.
//!
//! The tag index is built once a queue holds 32 entries (below that a scan costs what a look-up does,
//! and the small-message path pays nothing for it) and dropped when the queue empties; its bucket table
//! grows four times once the entries outnumber its buckets twice, rebuilt from the global list so the
//! chains stay in insertion order.

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

/// A slot index on a list: `u32`, so that a node's three links take 24
/// bytes (a node is moved in and out of the slab on every match, and a
/// larger one is moved by a `memcpy` call). A queue never holds 2^32 - 1
/// entries (memory runs out long before).
type Ix = u32;

const NIL: Ix = Ix::MAX;

#[derive(Clone, Copy)]
struct Link {
    prev: Ix,
    next: Ix,
}

const UNLINKED: Link = Link { prev: NIL, next: NIL };

#[derive(Clone, Copy)]
struct Ends {
    head: Ix,
    tail: Ix,
    /// Entries on the list, to choose the shorter of two searches.
    len: u32,
}

impl Default for Ends {
    fn default() -> Self {
        Ends {
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }
}

/// Which intrusive list a link belongs to.
#[derive(Clone, Copy)]
enum Chain {
    All,
    Peer,
    /// The tag's bucket (exact tags) or the wildcard list (masked tags).
    Tag,
}

struct Node<T> {
    /// Posted receives: their spec. Unexpected messages: their source and tag (`ignore` is 0, unused).
    spec: RecvSpec,
    seq: u64,
    val: T,
    all: Link,
    peer: Link,
    tag: Link,
}

impl<T> Node<T> {
    fn link(&mut self, chain: Chain) -> &mut Link {
        match chain {
            Chain::All => &mut self.all,
            Chain::Peer => &mut self.peer,
            Chain::Tag => &mut self.tag,
        }
    }

    fn next(&self, chain: Chain) -> Ix {
        match chain {
            Chain::All => self.all.next,
            Chain::Peer => self.peer.next,
            Chain::Tag => self.tag.next,
        }
    }
}

#[cfg(test)]
thread_local! {
    /// Entries the searches of this thread looked at (tests of search cost).
    static VISITED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Buckets of a queue's first table.
const MIN_BUCKETS_LOG2: u32 = 6;

/// Entries a queue holds before it builds its tag index: below that, a
/// scan is as cheap as a look-up, and the small-message path pays nothing
/// for the index.
const INDEX_AT: usize = 32;

/// The bucket of `tag` in a table of `1 << (64 - shift)` buckets
/// (Fibonacci hashing: the high bits of a multiplication).
#[inline]
fn bucket_of(tag: u64, shift: u32) -> usize {
    (tag.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> shift) as usize
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
    /// Entries with an exact tag, by bucket of its hash; empty (no entry on
    /// a tag chain) while the queue is not indexed.
    buckets: Vec<Ends>,
    /// `64 - log2(buckets.len())`.
    shift: u32,
    /// Entries with a masked tag (posted receives only), while indexed.
    wild: Ends,
    /// The queue's length at which the index is built or grows.
    grow_at: usize,
    next_seq: u64,
}

impl<T> Queue<T> {
    fn new() -> Self {
        Queue {
            nodes: Slab::new(),
            all: Ends::default(),
            any: Ends::default(),
            peers: PeerLists::default(),
            buckets: Vec::new(),
            shift: 64 - MIN_BUCKETS_LOG2,
            wild: Ends::default(),
            grow_at: INDEX_AT,
            next_seq: 0,
        }
    }

    #[inline(always)]
    fn push(&mut self, spec: RecvSpec, val: T) {
        if self.nodes.len() >= self.grow_at {
            self.grow();
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let idx = self.nodes.insert(Node {
            spec,
            seq,
            val,
            all: UNLINKED,
            peer: UNLINKED,
            tag: UNLINKED,
        }) as Ix;
        append(&mut self.nodes, &mut self.all, idx, Chain::All);
        let ends = match spec.src.is_unspec() {
            true => &mut self.any,
            false => self.peers.entry(spec.src),
        };
        append(&mut self.nodes, ends, idx, Chain::Peer);
        if self.indexed() {
            let ends = match spec.ignore {
                0 => &mut self.buckets[bucket_of(spec.tag, self.shift)],
                _ => &mut self.wild,
            };
            append(&mut self.nodes, ends, idx, Chain::Tag);
        }
    }

    /// Whether every entry is on a tag chain (the queue grew past [`INDEX_AT`]
    /// and has not emptied since).
    #[inline]
    fn indexed(&self) -> bool {
        !self.buckets.is_empty()
    }

    /// Builds the tag index (`1 << MIN_BUCKETS_LOG2` buckets) or makes its
    /// table four times larger; the chains are rebuilt from the global list,
    /// so they stay in insertion order.
    #[cold]
    fn grow(&mut self) {
        let log2 = match self.buckets.len() {
            0 => MIN_BUCKETS_LOG2,
            n => n.trailing_zeros() + 2,
        };
        self.buckets.clear();
        self.buckets.resize(1 << log2, Ends::default());
        self.shift = 64 - log2;
        self.grow_at = 2 << log2;
        self.wild = Ends::default();
        let mut cur = self.all.head;
        while cur != NIL {
            let node = &self.nodes[cur as usize];
            let next = node.all.next;
            let ends = match node.spec.ignore {
                0 => &mut self.buckets[bucket_of(node.spec.tag, self.shift)],
                _ => &mut self.wild,
            };
            append(&mut self.nodes, ends, cur, Chain::Tag);
            cur = next;
        }
    }

    /// The chain an exact `tag` is on; only while [`indexed`](Self::indexed).
    #[inline]
    fn bucket(&self, tag: u64) -> &Ends {
        &self.buckets[bucket_of(tag, self.shift)]
    }

    /// Length of `src`'s per-peer list.
    #[inline]
    fn peer_len(&self, src: PeerAddr) -> u32 {
        self.ends(src).map_or(0, |e| e.len)
    }

    /// The per-peer list of `src`, if it was ever used.
    fn ends(&self, src: PeerAddr) -> Option<&Ends> {
        match src.is_unspec() {
            true => Some(&self.any),
            false => self.peers.get(src),
        }
    }

    #[inline(always)]
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
        if self.indexed() {
            self.unindex(&node);
        }
        node
    }

    /// Takes a removed node off its tag chain; drops the index once the
    /// queue is empty (a drained burst leaves no table behind).
    fn unindex(&mut self, node: &Node<T>) {
        let ends = match node.spec.ignore {
            0 => &mut self.buckets[bucket_of(node.spec.tag, self.shift)],
            _ => &mut self.wild,
        };
        unlink(&mut self.nodes, ends, node.tag, Chain::Tag);
        if self.nodes.is_empty() {
            self.buckets = Vec::new();
            self.wild = Ends::default();
            self.grow_at = INDEX_AT;
        }
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
            let node = &self.nodes[cur as usize];
            #[cfg(test)]
            VISITED.with(|v| v.set(v.get() + 1));
            if pred(node) {
                return Some(cur as usize);
            }
            cur = if peer.is_some() { node.peer.next } else { node.all.next };
        }
        None
    }

    /// First entry satisfying `pred` on the list `ends` of `chain`, in insertion order.
    #[inline]
    fn find_on(&self, ends: &Ends, chain: Chain, mut pred: impl FnMut(&Node<T>) -> bool) -> Option<usize> {
        let mut cur = ends.head;
        while cur != NIL {
            let node = &self.nodes[cur as usize];
            #[cfg(test)]
            VISITED.with(|v| v.set(v.get() + 1));
            if pred(node) {
                return Some(cur as usize);
            }
            cur = node.next(chain);
        }
        None
    }
}

fn append<T>(nodes: &mut Slab<Node<T>>, ends: &mut Ends, idx: Ix, chain: Chain) {
    *nodes[idx as usize].link(chain) = Link {
        prev: ends.tail,
        next: NIL,
    };
    match ends.tail {
        NIL => ends.head = idx,
        tail => nodes[tail as usize].link(chain).next = idx,
    }
    ends.tail = idx;
    ends.len += 1;
}

/// Links `idx` into a peer list so the list stays in sequence order.
fn insert_by_seq<T>(nodes: &mut Slab<Node<T>>, ends: &mut Ends, idx: Ix) {
    let seq = nodes[idx as usize].seq;
    let mut after = ends.tail;
    while after != NIL && nodes[after as usize].seq > seq {
        after = nodes[after as usize].peer.prev;
    }
    let next = if after == NIL {
        ends.head
    } else {
        nodes[after as usize].peer.next
    };
    nodes[idx as usize].peer = Link { prev: after, next };
    ends.len += 1;
    match after {
        NIL => ends.head = idx,
        a => nodes[a as usize].peer.next = idx,
    }
    match next {
        NIL => ends.tail = idx,
        n => nodes[n as usize].peer.prev = idx,
    }
}

/// Takes a node (its `link` on `chain`) out of the list `ends`. Inlined: a
/// removal unlinks from two or three lists, on every arrival's match.
#[inline]
fn unlink<T>(nodes: &mut Slab<Node<T>>, ends: &mut Ends, link: Link, chain: Chain) {
    ends.len -= 1;
    match link.prev {
        NIL => ends.head = link.next,
        prev => nodes[prev as usize].link(chain).next = link.next,
    }
    match link.next {
        NIL => ends.tail = link.prev,
        next => nodes[next as usize].link(chain).prev = link.prev,
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
    #[inline(always)]
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
        let q = &self.posted;
        if q.nodes.is_empty() {
            return None;
        }
        // The receive posted first of all, when it accepts, is the answer
        // without a search: the common case of receives consumed in the
        // order they were posted.
        let first = q.all.head as usize;
        if accepts(&q.nodes[first]) {
            return Some(first);
        }
        let by_tag = || q.bucket(tag).len + q.wild.len;
        let by_peer = || if src.is_unspec() { 0 } else { q.peer_len(src) } + q.any.len;
        // Two complete candidate sets; the shorter is searched.
        let (first, second) = if q.indexed() && by_tag() < by_peer() {
            (
                q.find_on(q.bucket(tag), Chain::Tag, accepts),
                q.find_on(&q.wild, Chain::Tag, accepts),
            )
        } else {
            let directed = if src.is_unspec() {
                None
            } else {
                q.find(Some(src), accepts)
            };
            (directed, q.find(Some(PeerAddr::UNSPEC), accepts))
        };
        match (first, second) {
            (Some(d), Some(a)) if q.nodes[a].seq < q.nodes[d].seq => Some(a),
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
    #[inline(always)]
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

    #[inline]
    fn find_unexpected(&self, spec: &RecvSpec) -> Option<usize> {
        let q = &self.unexpected;
        if q.nodes.is_empty() {
            // The common case of a posted receive: nothing waits.
            return None;
        }
        self.find_unexpected_in(q, spec)
    }

    /// The search behind [`find_unexpected`](Self::find_unexpected), out of line.
    fn find_unexpected_in(&self, q: &Queue<U>, spec: &RecvSpec) -> Option<usize> {
        let accepts = |n: &Node<U>| spec.matches(n.spec.src, n.spec.tag);
        let peer = if spec.src.is_unspec() { None } else { Some(spec.src) };
        if spec.ignore == 0 && q.indexed() {
            let bucket = q.bucket(spec.tag);
            if peer.is_none_or(|src| bucket.len <= q.peer_len(src)) {
                return q.find_on(bucket, Chain::Tag, accepts);
            }
        }
        q.find(peer, accepts)
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

    /// Removes every unexpected message for which `pred` holds, in arrival
    /// order. A walk of the whole queue: for rare events (a connection that
    /// failed with requests still kept), not the data path.
    pub fn remove_unexpected_where(&mut self, mut pred: impl FnMut(&U) -> bool) -> Vec<U> {
        let q = &mut self.unexpected;
        let mut out = Vec::new();
        let mut cur = q.all.head;
        while cur != NIL {
            let next = q.nodes[cur as usize].all.next;
            if pred(&q.nodes[cur as usize].val) {
                out.push(q.remove(cur as usize).val);
            }
            cur = next;
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
            let next = q.nodes[cur as usize].peer.next;
            let src = resolve(&q.nodes[cur as usize].val);
            if !src.is_unspec() {
                let link = q.nodes[cur as usize].peer;
                unlink(&mut q.nodes, &mut q.any, link, Chain::Peer);
                q.nodes[cur as usize].spec.src = src;
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
    const P2: PeerAddr = PeerAddr(2);
    const P3: PeerAddr = PeerAddr(3);
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

    type Hit = (u32, RecvSpec, PeerAddr, u64, u32);

    impl Model {
        /// What posting receive `id` with `s` gives, the model updated.
        fn post(&mut self, s: RecvSpec, id: u32) -> Option<Hit> {
            match self.unexpected.iter().position(|u| s.matches(u.0, u.1)) {
                Some(i) => {
                    let (src, tag, msg) = self.unexpected.remove(i);
                    Some((id, s, src, tag, msg))
                }
                None => {
                    self.posted.push((s, id));
                    None
                }
            }
        }

        /// What an arrival from `src` with `tag` takes, the model updated.
        fn take_posted(&mut self, src: PeerAddr, tag: u64) -> Option<(RecvSpec, u32)> {
            let i = self.posted.iter().position(|p| p.0.matches(src, tag))?;
            Some(self.posted.remove(i))
        }
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
                        prop_assert_eq!(m.post(s, id).map(parts), model.post(s, id));
                    }
                    Op::Arrive(src, tag) => {
                        let got = m.take_posted(src, tag);
                        prop_assert_eq!(got, model.take_posted(src, tag));
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

    /// Operations of the scaled model: arrivals from unknown senders and
    /// their resolution too, with enough entries on few peers and tags that
    /// chains grow long, the bucket table grows, and both searches of each
    /// kind are taken.
    #[derive(Debug, Clone)]
    enum BigOp {
        Post(RecvSpec),
        Arrive(PeerAddr, u64),
        /// From sender `from` (0..4), not yet known.
        ArriveUnknown(u64, u64),
        /// Senders whose bit is set become known as `PeerAddr(from)`.
        Resolve(u8),
        DrainPosted,
    }

    fn big_tag() -> impl Strategy<Value = u64> {
        prop_oneof![4 => 0u64..24, 1 => any::<u64>()]
    }

    fn big_op() -> impl Strategy<Value = BigOp> {
        let src = prop_oneof![peer(), Just(ANY)];
        let ignore = prop_oneof![8 => Just(0u64), 1 => proptest::sample::select(&IGNORES[..])];
        prop_oneof![
            8 => (src, big_tag(), ignore).prop_map(|(src, tag, ignore)| BigOp::Post(RecvSpec { src, tag, ignore })),
            8 => (peer(), big_tag()).prop_map(|(s, t)| BigOp::Arrive(s, t)),
            3 => (0u64..4, big_tag()).prop_map(|(f, t)| BigOp::ArriveUnknown(f, t)),
            1 => any::<u8>().prop_map(BigOp::Resolve),
            1 => Just(BigOp::DrainPosted),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn matches_naive_model_at_scale(ops in proptest::collection::vec(big_op(), 200..900)) {
            let mut m = Matcher::<u32, u32>::new();
            let mut model = Model::default();
            let mut from_of = std::collections::HashMap::new();
            for (id, op) in (0u32..).zip(ops) {
                match op {
                    BigOp::Post(s) => {
                        prop_assert_eq!(m.post(s, id).map(parts), model.post(s, id));
                    }
                    BigOp::Arrive(src, tag) => {
                        let got = m.take_posted(src, tag);
                        prop_assert_eq!(got, model.take_posted(src, tag));
                        if got.is_none() {
                            m.push_unexpected(src, tag, id);
                            model.unexpected.push((src, tag, id));
                        }
                    }
                    BigOp::ArriveUnknown(from, tag) => {
                        let got = m.take_posted(ANY, tag);
                        prop_assert_eq!(got, model.take_posted(ANY, tag));
                        if got.is_none() {
                            from_of.insert(id, from);
                            m.push_unexpected(ANY, tag, id);
                            model.unexpected.push((ANY, tag, id));
                        }
                    }
                    BigOp::Resolve(known) => {
                        let now = |id: &u32| match from_of.get(id) {
                            Some(&f) if known & (1 << f) != 0 => PeerAddr(f),
                            _ => ANY,
                        };
                        m.resolve_unknown(now);
                        for u in model.unexpected.iter_mut().filter(|u| u.0 == ANY) {
                            u.0 = now(&u.2);
                        }
                    }
                    BigOp::DrainPosted => prop_assert_eq!(m.drain_posted(), std::mem::take(&mut model.posted)),
                }
                prop_assert_eq!(m.posted_len(), model.posted.len());
                prop_assert_eq!(m.unexpected_len(), model.unexpected.len());
            }
            // Everything left still matches as the model says, then the queues empty.
            while let Some((src, tag, msg)) = model.unexpected.first().copied() {
                let got = m.post(RecvSpec { src, tag, ignore: 0 }, u32::MAX).map(|x| x.msg);
                prop_assert_eq!(got, Some(msg));
                model.unexpected.remove(0);
            }
            prop_assert_eq!(m.unexpected_len(), 0);
        }
    }

    /// Entries looked at by the searches `f` makes.
    fn visits(f: impl FnOnce()) -> u64 {
        VISITED.with(|v| v.set(0));
        f();
        VISITED.with(|v| v.get())
    }

    #[test]
    fn searches_do_not_walk_a_million_unrelated_entries() {
        const N: u64 = 1_000_000;
        let mut m = Matcher::<u64, u64>::new();
        for i in 0..N {
            // Unexpected messages from four peers and from unknown senders.
            let src = if i % 5 == 4 { ANY } else { PeerAddr(i % 4) };
            m.push_unexpected(src, 1 << 32 | i, i);
        }
        for i in 0..N {
            assert!(m.post(spec(PeerAddr(i % 4), 1 << 40 | i, 0), i).is_none());
        }
        m.push_unexpected(P1, 7, N);
        let hit = visits(|| assert_eq!(m.post(spec(ANY, 7, 0), 0).map(|x| x.msg), Some(N)));
        assert!(hit <= 4, "an any-source post looked at {hit} entries");
        let hit = visits(|| assert_eq!(m.post(spec(P1, 1 << 32 | 5, 0), 0).map(|x| x.msg), Some(5)));
        assert!(hit <= 4, "a directed post looked at {hit} entries");
        let miss = visits(|| assert!(m.post(spec(P2, 99, 0), 1).is_none()));
        assert!(miss <= 4, "a post that matches nothing looked at {miss} entries");
        assert_eq!(m.cancel_posted(|&r| r == 1).map(|x| x.1), Some(1));
        let hit = visits(|| assert_eq!(m.take_posted(P2, 1 << 40 | 6).map(|x| x.1), Some(6)));
        assert!(hit <= 4, "an arrival looked at {hit} entries");
        let miss = visits(|| assert_eq!(m.take_posted(P3, 12345), None));
        assert!(miss <= 4, "an arrival that matches nothing looked at {miss} entries");
    }
}
