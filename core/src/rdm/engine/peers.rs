//! The peer table: one entry per peer endpoint name, with the connection
//! everything to that peer is sent on, every connection it has, the frames
//! waiting for room on it, and what its unexpected messages hold; and the
//! connection table, which peer (if known yet) each transport connection
//! belongs to.
//!
//! A peer's first connection, opened by either side, is the one this side
//! sends on for the entry's life: frames to a peer never change connection,
//! so they arrive in order. When both sides connect at once each keeps
//! sending on its own, and the other connection only carries the peer's
//! frames the other way; nothing needs retiring. If ours fails before the
//! peer admitted us (nothing but our handshake written on it), we send on
//! the peer's instead (`fail.rs`).

use std::collections::{HashMap, VecDeque};

use slab::Slab;

use crate::addr::{Address, AvTable, PeerAddr};

use super::super::stall::Silence;
use super::super::transport::ConnId;
use super::super::{Credit, Share};
use super::out::Out;

/// One peer.
pub struct Peer {
    /// Its endpoint name.
    pub name: Address,
    /// The connection frames to it go on; `None` while a connect the
    /// transport could not start yet (a full listen backlog) is retried.
    pub tx: Option<ConnId>,
    /// Every connection it has (`tx` first).
    pub conns: Vec<ConnId>,
    /// Frames waiting for room (or credit) on `tx`, in order, each with the
    /// credit it spends when written.
    pub queue: VecDeque<(u64, Out)>,
    /// The credit the queued frames will spend.
    pub queued_cost: u64,
    /// Eager credit both ways.
    pub credit: Credit,
    /// Its part of the receive memory.
    pub share: Share,
    /// Its queue is waiting for credit (counted once per wait).
    pub starved: bool,
    /// The transport refused a frame to it as full: room made later is
    /// progress of the peer's.
    pub blocked: bool,
    /// We dialled it and it has not admitted us yet: only our hello and
    /// proof may be written. Set and cleared through [`Peers`], which
    /// counts the gated peers.
    gated: bool,
    /// When the entry was made (a dialled peer's handshake deadline runs
    /// from it).
    pub since: std::time::Instant,
    /// The name the endpoint we dialled gave itself, when it differs from
    /// the one we dialled.
    pub alias: Option<Address>,
    /// The name standing for whichever endpoint listens where it does
    /// (`Transport::stand_in`), by which the address vector may know it.
    stand_in: Option<Address>,
    /// How long it has been silent while we waited on it.
    pub silence: Silence,
    /// When pushed rendezvous bytes last came from it: its pushes that
    /// wait behind the one it is pushing are not stalled.
    pub pushed_at: Option<std::time::Instant>,
    /// Changes whenever the slot is reused, so kept messages name the entry
    /// they came from.
    pub serial: u64,
    /// Its handle in the address vector at the last look-up.
    hint: PeerAddr,
    /// The address vector's [`AvTable::changes`] when `hint` was found:
    /// while it holds, the hint is the answer without a look-up.
    hint_at: u64,
}

impl Peer {
    /// Whether we dialled it and it has not admitted us yet.
    #[inline]
    pub fn gated(&self) -> bool {
        self.gated
    }

    /// A frame costing `cost` of its credit was written to it: spent; and
    /// room the transport had refused before is progress of the peer's.
    #[inline]
    pub fn wrote(&mut self, cost: u64) {
        self.credit.spend(cost, 0);
        self.starved = false;
        if self.blocked {
            self.blocked = false;
            self.silence.heard();
        }
    }
}

/// A transport connection's owner.
#[derive(Debug, Clone, Copy)]
pub struct Link {
    /// The peer, once its hello (or our connect) named it.
    pub peer: Option<usize>,
}

/// Address-vector handles below this get a route hint (a dense table).
const HINTED: usize = 1 << 16;

/// The transport's stand-in address for a name, behind the name's
/// provider id.
type StandIn = fn(&[u8]) -> Option<Vec<u8>>;

/// The address-vector handle of `name`, else of its stand-in (made only
/// when `name` is not inserted); `UNSPEC` when neither is.
fn reverse_or(av: &AvTable, name: &Address, stand_in: impl FnOnce() -> Option<Address>) -> PeerAddr {
    match av.reverse(name) {
        h if h.is_unspec() => stand_in().map_or(h, |s| av.reverse(&s)),
        h => h,
    }
}

fn stand_in(of: StandIn, name: &Address) -> Option<Address> {
    let (&id, addr) = name.as_bytes().split_first()?;
    let mut s = vec![id];
    s.extend(of(addr)?);
    Address::new(&s).ok().filter(|s| s != name)
}

/// Peers by name and by connection.
pub struct Peers {
    slots: Slab<Peer>,
    by_name: HashMap<Address, usize>,
    links: Vec<Option<Link>>,
    /// The peer a send to each address-vector handle found last: a guess,
    /// checked against the name, so a send to a known peer neither hashes
    /// its name nor depends on the handle still naming it.
    routes: Vec<usize>,
    serial: u64,
    stand_in_of: StandIn,
    /// How many peers are gated: progress checks their handshake deadlines
    /// only while there are some.
    gated: usize,
}

impl Default for Peers {
    fn default() -> Peers {
        Peers::new(|_| None)
    }
}

impl Peers {
    /// An empty table; `stand_in_of` is the transport's `stand_in`.
    pub fn new(stand_in_of: StandIn) -> Peers {
        Peers {
            slots: Slab::new(),
            by_name: HashMap::new(),
            links: Vec::new(),
            routes: Vec::new(),
            serial: 0,
            stand_in_of,
            gated: 0,
        }
    }

    /// The peer named `name`, if there is one.
    pub fn find(&self, name: &Address) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// The peer named `name`, which the address vector's `handle` names:
    /// the route hint when it still holds, else the look-up by name (which
    /// updates the hint).
    #[inline]
    pub fn route(&mut self, handle: PeerAddr, name: &Address) -> Option<usize> {
        let h = usize::try_from(handle.0).unwrap_or(usize::MAX);
        if let Some(&p) = self.routes.get(h) {
            if self.slots.get(p).is_some_and(|e| e.name == *name) {
                return Some(p);
            }
        }
        self.route_missed(h, name)
    }

    #[cold]
    fn route_missed(&mut self, h: usize, name: &Address) -> Option<usize> {
        let p = self.find(name)?;
        if h < HINTED {
            if self.routes.len() <= h {
                self.routes.resize(h + 1, usize::MAX);
            }
            self.routes[h] = p;
        }
        Some(p)
    }

    /// Adds the peer `name` whose frames go on `tx` (or on its first
    /// connection, when there is none yet).
    pub fn add(&mut self, name: Address, tx: Option<ConnId>) -> usize {
        self.serial += 1;
        let p = self.slots.insert(Peer {
            name,
            tx,
            conns: Vec::new(),
            queue: VecDeque::new(),
            queued_cost: 0,
            credit: super::credit::initial(),
            share: Share::default(),
            starved: false,
            blocked: false,
            gated: false,
            since: std::time::Instant::now(),
            alias: None,
            stand_in: stand_in(self.stand_in_of, &name),
            silence: Silence::default(),
            pushed_at: None,
            serial: self.serial,
            hint: PeerAddr::UNSPEC,
            hint_at: u64::MAX,
        });
        self.by_name.insert(name, p);
        if let Some(tx) = tx {
            self.link(tx, Some(p));
        }
        p
    }

    /// Peer `p` waits for its admission: only our hello and proof go to it.
    pub fn gate(&mut self, p: usize) {
        if let Some(e) = self.slots.get_mut(p) {
            if !std::mem::replace(&mut e.gated, true) {
                self.gated += 1;
            }
        }
    }

    /// Peer `p` no longer waits for its admission; true when it did.
    pub fn ungate(&mut self, p: usize) -> bool {
        let was = self.slots.get_mut(p).is_some_and(|e| std::mem::take(&mut e.gated));
        if was {
            self.gated -= 1;
        }
        was
    }

    /// Whether any peer waits for its admission.
    #[inline]
    pub fn any_gated(&self) -> bool {
        self.gated > 0
    }

    /// Every peer with its index.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &Peer)> {
        self.slots.iter()
    }

    /// Peer `p` also answers to `name` (unless another peer has it).
    pub fn alias(&mut self, p: usize, name: Address) {
        let Some(e) = self.slots.get_mut(p) else { return };
        if e.name == name || self.by_name.contains_key(&name) {
            return;
        }
        e.alias = Some(name);
        self.by_name.insert(name, p);
    }

    /// Records that `conn` belongs to `peer` (or to no known peer yet).
    pub fn link(&mut self, conn: ConnId, peer: Option<usize>) {
        if self.links.len() <= conn {
            self.links.resize(conn + 1, None);
        }
        self.links[conn] = Some(Link { peer });
        if let Some(p) = peer.and_then(|p| self.slots.get_mut(p)) {
            if !p.conns.contains(&conn) {
                p.conns.push(conn);
            }
            p.tx.get_or_insert(conn);
        }
    }

    /// The owner of `conn`, when the engine knows the connection.
    pub fn link_of(&self, conn: ConnId) -> Option<Link> {
        self.links.get(conn).copied().flatten()
    }

    /// Whether a peer waits for a connect to be retried.
    pub fn connecting(&self) -> bool {
        self.slots.iter().any(|(_, e)| e.tx.is_none())
    }

    /// Connections the engine knows (named or not yet).
    pub fn connections(&self) -> usize {
        self.links.iter().filter(|l| l.is_some()).count()
    }

    /// Forgets `conn`.
    pub fn unlink(&mut self, conn: ConnId) {
        if let Some(l) = self.links.get_mut(conn) {
            *l = None;
        }
    }

    /// Removes `peer` and forgets its connections; returns its entry.
    pub fn remove(&mut self, peer: usize) -> Option<Peer> {
        let gone = self.slots.try_remove(peer)?;
        if gone.gated {
            self.gated -= 1;
        }
        self.by_name.remove(&gone.name);
        if let Some(alias) = gone.alias {
            self.by_name.remove(&alias);
        }
        for &c in &gone.conns {
            self.unlink(c);
        }
        Some(gone)
    }

    /// The peer at `p`.
    pub fn get(&self, p: usize) -> Option<&Peer> {
        self.slots.get(p)
    }

    /// The peer at `p`, mutably.
    pub fn get_mut(&mut self, p: usize) -> Option<&mut Peer> {
        self.slots.get_mut(p)
    }

    /// The peer at `p` if it is still the entry of `serial`.
    pub fn current(&mut self, (p, serial): (usize, u64)) -> Option<&mut Peer> {
        self.slots.get_mut(p).filter(|e| e.serial == serial)
    }

    /// Every peer's index.
    pub fn keys(&self) -> Vec<usize> {
        self.slots.iter().map(|(k, _)| k).collect()
    }

    /// The address-vector handle of the peer named `name`: its own entry,
    /// else its stand-in's (`UNSPEC` when neither is inserted).
    pub fn reverse(&self, av: &AvTable, name: &Address) -> PeerAddr {
        reverse_or(av, name, || stand_in(self.stand_in_of, name))
    }

    /// The address-vector handle of `p`'s name (`UNSPEC` when not inserted),
    /// remembering it so the next look-up is a compare.
    pub fn handle(&mut self, p: usize, av: &AvTable) -> PeerAddr {
        match self.slots.get_mut(p) {
            Some(e) => Self::handle_of(e, av),
            None => PeerAddr::UNSPEC,
        }
    }

    /// [`Peers::handle`] of an entry already at hand.
    #[inline]
    pub fn handle_of(e: &mut Peer, av: &AvTable) -> PeerAddr {
        if e.hint_at == av.changes() {
            return e.hint;
        }
        Self::rehint(e, av)
    }

    #[cold]
    fn rehint(e: &mut Peer, av: &AvTable) -> PeerAddr {
        let still = av
            .lookup(e.hint)
            .is_some_and(|a| *a == e.name || e.stand_in.as_ref() == Some(a));
        if !still {
            e.hint = reverse_or(av, &e.name, || e.stand_in);
        }
        e.hint_at = av.changes();
        e.hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(b: u8) -> Address {
        Address::new(&[9, b]).unwrap()
    }

    #[test]
    fn a_peer_is_known_by_its_name_else_by_its_stand_in() {
        // The stand-in of [9, b, ..] is [9, 0]: "whoever listens there".
        let stand_in_of: StandIn = |a| (a != [0]).then(|| vec![0]);
        let both = |peers: &mut Peers, p: usize, av: &AvTable| (peers.handle(p, av), peers.reverse(av, &name(1)));
        let mut av = AvTable::new();
        let mut peers = Peers::new(stand_in_of);
        let p = peers.add(name(1), None);
        assert_eq!(both(&mut peers, p, &av), (PeerAddr::UNSPEC, PeerAddr::UNSPEC));
        let s = av.insert(name(0));
        assert_eq!(both(&mut peers, p, &av), (s, s), "known by its stand-in");
        // A fresh table (no hint yet): its own name wins over the stand-in.
        let own = av.insert(name(1));
        let mut peers = Peers::new(stand_in_of);
        let p = peers.add(name(1), None);
        assert_eq!(both(&mut peers, p, &av), (own, own));
        // Without a stand-in function, only the name counts.
        av.remove(own).unwrap();
        let mut peers = Peers::default();
        let p = peers.add(name(1), None);
        assert_eq!(both(&mut peers, p, &av), (PeerAddr::UNSPEC, PeerAddr::UNSPEC));
    }

    #[test]
    fn a_kept_handle_follows_every_change_of_the_table() {
        let mut av = AvTable::new();
        let mut peers = Peers::default();
        let p = peers.add(name(1), None);
        let h = av.insert(name(1));
        assert_eq!(peers.handle(p, &av), h);
        assert_eq!(peers.handle(p, &av), h, "kept while the table is unchanged");
        // Removed, then its handle reused by another name: the kept answer
        // is not given for either.
        av.remove(h).unwrap();
        assert_eq!(peers.handle(p, &av), PeerAddr::UNSPEC);
        let other = av.insert(name(2));
        assert_eq!(other, h, "the slab reuses the handle");
        assert_eq!(peers.handle(p, &av), PeerAddr::UNSPEC);
        let again = av.insert(name(1));
        assert_eq!(peers.handle(p, &av), again);
        // A repeated insert changes nothing, and the answer stays.
        assert_eq!(av.insert(name(1)), again);
        assert_eq!(peers.handle(p, &av), again);
    }

    #[test]
    fn gated_peers_are_counted_once_and_forgotten_with_them() {
        let mut peers = Peers::default();
        let (a, b) = (peers.add(name(1), None), peers.add(name(2), None));
        assert!(!peers.any_gated());
        peers.gate(a);
        peers.gate(a);
        peers.gate(b);
        assert!(peers.get(a).is_some_and(Peer::gated));
        assert!(peers.ungate(a) && !peers.ungate(a), "ungated once");
        assert!(peers.any_gated(), "b still waits");
        peers.remove(b);
        assert!(!peers.any_gated(), "a removed gated peer is not counted");
        assert!(!peers.ungate(b), "gone");
    }

    #[test]
    fn a_route_hint_is_checked_against_the_name() {
        let mut peers = Peers::default();
        let a = peers.add(name(1), None);
        let b = peers.add(name(2), None);
        let h = PeerAddr(3);
        assert_eq!(peers.route(h, &name(1)), Some(a));
        assert_eq!(peers.route(h, &name(1)), Some(a));
        // The handle now names another peer: the stale hint is not taken.
        assert_eq!(peers.route(h, &name(2)), Some(b));
        assert_eq!(peers.route(h, &name(3)), None);
        // The hinted slot reused by another name after a removal.
        assert_eq!(peers.route(h, &name(2)), Some(b));
        peers.remove(b);
        let c = peers.add(name(4), None);
        assert_eq!(c, b);
        assert_eq!(peers.route(h, &name(2)), None);
        assert_eq!(peers.route(h, &name(4)), Some(c));
        // Handles past the dense table are looked up by name every time.
        assert_eq!(peers.route(PeerAddr(u64::MAX - 1), &name(1)), Some(a));
        assert_eq!(peers.route(PeerAddr::UNSPEC, &name(4)), Some(c));
    }
}
