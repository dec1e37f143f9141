//! Connections on first use: the rdma_cm state machine, one connection per
//! peer pair used both ways, and the tie-break when two endpoints connect
//! to each other at once (docs/PROTOCOL.md, "Verbs connections").
//!
//! Active: resolve address, resolve route, create the QP and send the
//! request (our name in the private data), then on `CONNECT_RESPONSE` move
//! the QP to RTS and establish. Passive: on `CONNECT_REQUEST` create the QP,
//! take it to RTS and accept; ready on `ESTABLISHED`.
//!
//! Tie-break: a request from a peer we are ourselves connecting to is
//! refused with a "duplicate" reply when our name is the lower one (ours
//! wins); otherwise it is accepted and our own attempt is dropped. The side
//! whose attempt was refused waits for the winner's request, and tries
//! again after a short delay if none arrives (a stale connection the peer
//! had not yet seen die).

use std::time::{Duration, Instant};

use xfer_core::unstable::addr::{Address, PeerAddr};
use xfer_core::unstable::provider::Ctx;
use xfer_core::Error;

use super::{Conn, Peer, State, Tx, Unexpected, VerbsEndpoint};
use xfer_core::unstable::rdm::admit;
use xfer_core::unstable::rdm::crossing::{self, Keep};

use crate::cm::{self, CmId, Event};
use crate::name::{VerbsName, LEN as NAME_LEN};
use crate::qp::RcQp;

/// rdma_cm address and route resolution timeout.
const RESOLVE_MS: i32 = 2000;
/// First retry after a tie-break refusal; grows linearly per retry.
const RETRY_STEP: Duration = Duration::from_millis(20);
/// Retries after tie-break refusals before the peer's operations fail.
const MAX_RETRIES: u32 = 100;
/// How long a dead connection is kept so that late completions of its QP
/// number are recognised as stale (and the number is not reused meanwhile).
const GRAVE: Duration = Duration::from_secs(5);

const MAGIC: [u8; 2] = *b"XF";
const CM_VERSION: u8 = 2;
const KIND_REQ: u8 = 1;
const KIND_ACCEPT: u8 = 2;
const KIND_DUP: u8 = 3;
/// A rejection that asks for the job key: a challenge follows the name.
const KIND_CHALLENGE: u8 = 4;
/// A request that answers a challenge: the proof follows the target nonce.
const KIND_REQ_PROVEN: u8 = 5;
pub(crate) const PRIVATE_LEN: usize = 4 + NAME_LEN;
/// A request adds the 8-byte nonce of the endpoint it is meant for.
pub(crate) const REQUEST_LEN: usize = PRIVATE_LEN + 8;
/// A proven request adds the proof, within rdma_cm's 56 bytes.
const PROVEN_LEN: usize = REQUEST_LEN + admit::SHORT;
/// A challenge: the acceptor's private data and 16 random bytes.
const CHALLENGE_LEN: usize = PRIVATE_LEN + admit::CHALLENGE_LEN;

pub(crate) fn private(kind: u8, name: &VerbsName) -> [u8; PRIVATE_LEN] {
    let mut p = [0u8; PRIVATE_LEN];
    p[..2].copy_from_slice(&MAGIC);
    p[2] = CM_VERSION;
    p[3] = kind;
    p[4..].copy_from_slice(&name.encode());
    p
}

/// A connection request's private data: [`private`] followed by the nonce
/// of the endpoint it is meant for, so that a process restarted at the same
/// address refuses what was meant for its previous incarnation, and, when
/// it answers a challenge, the proof.
pub(crate) fn private_request(name: &VerbsName, to: u64, proof: Option<&[u8; admit::SHORT]>) -> Vec<u8> {
    let kind = if proof.is_some() { KIND_REQ_PROVEN } else { KIND_REQ };
    let mut p = Vec::with_capacity(PROVEN_LEN);
    p.extend_from_slice(&private(kind, name));
    p.extend_from_slice(&to.to_le_bytes());
    if let Some(proof) = proof {
        p.extend_from_slice(proof);
    }
    p
}

/// The proof in a proven request's private data.
fn request_proof(p: &[u8]) -> Option<&[u8]> {
    p.get(REQUEST_LEN..PROVEN_LEN)
}

/// A rejection's private data asking for the job key.
fn private_challenge(name: &VerbsName, challenge: &[u8; admit::CHALLENGE_LEN]) -> [u8; CHALLENGE_LEN] {
    let mut p = [0u8; CHALLENGE_LEN];
    p[..PRIVATE_LEN].copy_from_slice(&private(KIND_CHALLENGE, name));
    p[PRIVATE_LEN..].copy_from_slice(challenge);
    p
}

/// The challenge in a rejection's private data.
fn challenge_of(p: &[u8]) -> Option<[u8; admit::CHALLENGE_LEN]> {
    p.get(PRIVATE_LEN..CHALLENGE_LEN)?.try_into().ok()
}

/// The nonce a connection request is meant for (`None`: too short).
pub(crate) fn request_target(p: &[u8]) -> Option<u64> {
    let b = p.get(PRIVATE_LEN..REQUEST_LEN)?;
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

/// The kind and sender of our private data (the CM may pad it).
pub(crate) fn parse_private(p: &[u8]) -> Option<(u8, Address)> {
    if p.len() < PRIVATE_LEN || p[..2] != MAGIC || p[2] != CM_VERSION {
        return None;
    }
    let name = VerbsName::decode(&p[4..PRIVATE_LEN]).ok()?;
    Some((p[3], name.address()))
}

impl VerbsEndpoint {
    /// Starts a connection to `dest`; its queue waits for it.
    pub(super) fn start_connect(&mut self, cx: &mut Ctx<'_>, dest: Address) {
        let attempt = (|| {
            let name = VerbsName::decode(dest.as_bytes())?;
            let id = CmId::new(&self.chan)?;
            let src = std::net::SocketAddrV4::new(self.res.ip, 0);
            id.resolve_addr(Some(src), name.addr, RESOLVE_MS)?;
            Ok::<_, Error>(id)
        })();
        match attempt {
            Ok(id) => {
                let key = self.add_conn(dest, id, None, true, State::Resolving);
                // Our user chose this peer: admitted whatever the receive memory holds.
                self.conns[key]
                    .share
                    .commit(&mut self.account, super::credit::ADMISSION);
                self.peers.entry(dest).or_default().conn = Some(key);
            }
            Err(e) => {
                tracing::debug!(peer = ?dest, error = %e, "cannot start a connection");
                self.fail_peer(cx, dest, e);
            }
        }
    }

    fn add_conn(&mut self, peer: Address, id: CmId, qp: Option<RcQp>, active: bool, state: State) -> usize {
        let idp = id.as_ptr() as usize;
        let qpn = qp.as_ref().map(RcQp::qp_num);
        let serial = self.next_serial();
        let key = self.conns.insert(Conn {
            peer,
            state,
            active,
            qp,
            posted: Default::default(),
            since: Instant::now(),
            dead_since: None,
            credit: super::Credit::default(),
            requests: Default::default(),
            share: Default::default(),
            silence: Default::default(),
            src_hint: PeerAddr::UNSPEC,
            proven: false,
            serial,
            id,
        });
        self.by_id.insert(idp, key);
        if let Some(n) = qpn {
            self.by_qpn.insert(n, key);
        }
        self.connecting += 1;
        key
    }

    fn new_qp(&self) -> xfer_core::Result<RcQp> {
        RcQp::create(&self.res.pd, &self.cq, &self.cq, &self.srq, self.qp_cfg)
    }

    /// Handles every waiting rdma_cm event.
    pub(super) fn cm_events(&mut self, cx: &mut Ctx<'_>) {
        loop {
            let ev = match self.chan.try_next() {
                Ok(Some(ev)) => ev,
                Ok(None) => return,
                Err(e) => {
                    xfer_core::warn_limited!(error = %e, "reading rdma_cm events");
                    return;
                }
            };
            tracing::trace!(event = %ev.name(), status = ev.status, "rdma_cm event");
            if ev.kind == cm::RDMA_CM_EVENT_CONNECT_REQUEST {
                self.on_request(cx, &ev);
                continue;
            }
            let Some(&k) = self.by_id.get(&(ev.id as usize)) else {
                tracing::debug!(event = %ev.name(), "rdma_cm event for no connection");
                continue;
            };
            if let Err(e) = self.on_event(cx, k, &ev) {
                self.conn_failed(cx, k, e);
            }
        }
    }

    fn on_event(&mut self, cx: &mut Ctx<'_>, k: usize, ev: &Event) -> xfer_core::Result<()> {
        let state = self.conns[k].state;
        match (state, ev.kind) {
            (State::Dead, _) => {}
            (State::Resolving, cm::RDMA_CM_EVENT_ADDR_RESOLVED) => {
                self.conns[k].id.resolve_route(RESOLVE_MS)?;
                self.conns[k].state = State::Routing;
            }
            (State::Routing, cm::RDMA_CM_EVENT_ROUTE_RESOLVED) => {
                let qp = self.new_qp()?;
                let peer = self.conns[k].peer;
                let to = VerbsName::decode(peer.as_bytes())?.nonce;
                // A challenge from this peer's last refusal is answered now.
                let proof = match self.peers.get_mut(&peer).and_then(|p| p.challenge.take()) {
                    Some(c) => self.answer(&peer, &c)?,
                    None => None,
                };
                self.conns[k].proven = proof.is_some();
                self.conns[k]
                    .id
                    .connect(&qp, &private_request(&self.name, to, proof.as_ref()))?;
                self.by_qpn.insert(qp.qp_num(), k);
                let c = &mut self.conns[k];
                c.qp = Some(qp);
                c.state = State::Connecting;
            }
            (State::Connecting, cm::RDMA_CM_EVENT_CONNECT_RESPONSE) => {
                let c = &mut self.conns[k];
                let qp = c.qp.as_ref().ok_or(Error::Internal("connecting without a QP"))?;
                c.id.establish(qp)?;
                self.ready(cx, k);
            }
            (State::Accepting, cm::RDMA_CM_EVENT_ESTABLISHED) => self.ready(cx, k),
            (_, cm::RDMA_CM_EVENT_REJECTED) => self.on_reject(cx, k, ev),
            (_, cm::RDMA_CM_EVENT_DISCONNECTED) => {
                let peer = cx.av.reverse(&self.conns[k].peer);
                // A disconnect request from the peer over a working port: it
                // closed in order (its endpoint, or its process's exit). rxe
                // also reports a disconnect when our own link goes down,
                // which is no close by the peer.
                if ev.status == 0 && self.port_active() {
                    return Err(Error::PeerClosed { peer });
                }
                let errno = match ev.status {
                    0 => libc::ENETDOWN,
                    s if s < 0 => -s,
                    _ => libc::ECONNABORTED,
                };
                return Err(Error::PeerUnreachable { peer, errno });
            }
            (_, cm::RDMA_CM_EVENT_TIMEWAIT_EXIT) => {}
            _ => {
                tracing::debug!(event = %ev.name(), status = ev.status, ?state, "rdma_cm event ends a connection");
                let errno = match cm::event_error(ev) {
                    Error::Os(e) => e,
                    _ => libc::ECONNABORTED,
                };
                return Err(Error::PeerUnreachable {
                    peer: cx.av.reverse(&self.conns[k].peer),
                    errno,
                });
            }
        }
        Ok(())
    }

    fn ready(&mut self, cx: &Ctx<'_>, k: usize) {
        let c = &mut self.conns[k];
        if self.peer_events.enabled() {
            // A peer joins with its first working connection; a second
            // one (a crossed connect) is no new join.
            self.peer_events.up(c.peer, c.peer, cx.av.reverse(&c.peer));
        }
        tracing::debug!(peer = ?c.peer, active = c.active, qpn = c.qp.as_ref().map(RcQp::qp_num), "verbs connection ready");
        c.state = State::Ready;
        self.connecting = self.connecting.saturating_sub(1);
        self.stats.connections += 1;
        let peer = c.peer;
        if let Some(p) = self.peers.get_mut(&peer) {
            p.retries = 0;
            if !p.queue.is_empty() && !self.backlog.contains(&peer) {
                self.backlog.push(peer);
            }
        }
    }

    fn on_reject(&mut self, cx: &mut Ctx<'_>, k: usize, ev: &Event) {
        let parsed = parse_private(ev.private_data());
        let dup = matches!(parsed, Some((KIND_DUP, _)));
        let peer = self.conns[k].peer;
        if let Some((KIND_CHALLENGE, from)) = parsed {
            if from == peer {
                return self.on_challenge(cx, k, ev.private_data());
            }
        }
        if !dup {
            let peer_addr = cx.av.reverse(&peer);
            self.conn_failed(
                cx,
                k,
                Error::PeerUnreachable {
                    peer: peer_addr,
                    errno: libc::ECONNREFUSED,
                },
            );
            return;
        }
        // The peer keeps its own connection to us: wait for it.
        self.bury(k, false);
        let p = self.peers.entry(peer).or_default();
        if p.conn == Some(k) {
            p.conn = None;
            p.retries += 1;
            if p.retries > MAX_RETRIES {
                let e = Error::PeerUnreachable {
                    peer: cx.av.reverse(&peer),
                    errno: libc::ECONNREFUSED,
                };
                self.fail_peer(cx, peer, e);
            } else {
                p.retry_at = Some(Instant::now() + RETRY_STEP * p.retries);
            }
        }
    }

    /// The peer we are connecting to on `k` asks for the job key: a new
    /// request will carry the proof, unless we have no key or just sent one.
    fn on_challenge(&mut self, cx: &mut Ctx<'_>, k: usize, private: &[u8]) {
        let peer = self.conns[k].peer;
        let challenge = challenge_of(private);
        let err = match challenge {
            _ if self.attr.job_key.is_none() => {
                Error::Protocol("the peer admits only holders of its job key (XFER_JOB_KEY)")
            }
            Some(_) if !self.conns[k].proven => {
                self.bury(k, false);
                let p = self.peers.entry(peer).or_default();
                if p.conn == Some(k) {
                    p.conn = None;
                    p.challenge = challenge;
                    self.start_connect(cx, peer);
                }
                return;
            }
            _ => Error::PeerUnreachable {
                peer: cx.av.reverse(&peer),
                errno: libc::ECONNREFUSED,
            },
        };
        self.conn_failed(cx, k, err);
    }

    fn on_request(&mut self, cx: &mut Ctx<'_>, ev: &Event) {
        // SAFETY: a CONNECT_REQUEST's new id is ours to own.
        let id = unsafe { CmId::from_request(ev) };
        let Some((kind @ (KIND_REQ | KIND_REQ_PROVEN), from)) = parse_private(ev.private_data()) else {
            xfer_core::warn_limited!("connection request without a valid xfer name; refused");
            if let Err(e) = id.reject(&[]) {
                tracing::debug!(error = %e, "rejecting a foreign request");
            }
            return;
        };
        if request_target(ev.private_data()) != Some(self.name.nonce) {
            // Meant for an earlier endpoint at this address: the sender gets
            // ECONNREFUSED, and nothing meant for that one is delivered here.
            tracing::debug!(peer = ?from, "connection request for another endpoint refused");
            if let Err(e) = id.reject(&[]) {
                tracing::debug!(error = %e, "refusing a request for another endpoint");
            }
            return;
        }
        if !self.admitted(&id, kind, from, ev.private_data()) {
            return;
        }
        let itself = from == self.addr;
        let existing = if itself {
            None
        } else {
            self.peers.get(&from).and_then(|p| p.conn)
        };
        if let Some(c) = existing {
            let cc = &self.conns[c];
            if cc.active && cc.state != State::Dead && crossing::survivor(&self.addr, &from) == Keep::Ours {
                self.stats.tie_breaks += 1;
                if let Err(e) = id.reject(&private(KIND_DUP, &self.name)) {
                    tracing::debug!(error = %e, "refusing a duplicate connection");
                }
                return;
            }
        }
        let mut share = xfer_core::unstable::rdm::Share::default();
        if !share.admit(&mut self.account, super::credit::ADMISSION) {
            self.stats.rdm.rx_memory_refused += 1;
            xfer_core::warn_limited!(peer = ?from, committed = self.account.committed(),
                "connection refused: receive memory (XFER_RX_MEMORY) exhausted");
            if let Err(e) = id.reject(&[]) {
                tracing::debug!(error = %e, "refusing a request past the receive memory");
            }
            return;
        }
        let qp = match self
            .new_qp()
            .and_then(|qp| id.accept(&qp, ev, &private(KIND_ACCEPT, &self.name)).map(|()| qp))
        {
            Ok(qp) => qp,
            Err(e) => {
                xfer_core::warn_limited!(error = %e, "accepting a connection");
                if let Err(e) = id.reject(&[]) {
                    tracing::debug!(error = %e, "rejecting after a failed accept");
                }
                share.close(&mut self.account, 0);
                return;
            }
        };
        let key = self.add_conn(from, id, Some(qp), false, State::Accepting);
        self.conns[key].share = share;
        if itself {
            return; // our outgoing connection to ourselves keeps sending
        }
        let p = self.peers.entry(from).or_default();
        p.conn = Some(key);
        p.retry_at = None;
        if let Some(old) = existing {
            // Our own attempt lost the tie-break, or the peer dropped the
            // old connection and made a new one.
            let peer = cx.av.reverse(&from);
            self.retire_conn(cx, old, Error::PeerUnreachable { peer, errno: 0 });
        }
    }

    /// Admission: whether a request of `kind` from `from` may go on. With a
    /// job key, a plain request is rejected with a challenge and a proven
    /// one must answer it; without one, a plain request is admitted.
    fn admitted(&mut self, id: &CmId, kind: u8, from: Address, private: &[u8]) -> bool {
        if self.attr.job_key.is_none() && kind == KIND_REQ {
            return true;
        }
        if kind == KIND_REQ_PROVEN {
            if self.proven(&from, request_proof(private)) {
                return true;
            }
            if let Err(e) = id.reject(&[]) {
                tracing::debug!(error = %e, "rejecting an unproven request");
            }
            return false;
        }
        let reply = match self.challenges.issue(from) {
            Ok(Some(c)) => {
                self.stats.admission_challenges += 1;
                private_challenge(&self.name, &c).to_vec()
            }
            Ok(None) => {
                self.refused(&from, "too many challenges outstanding");
                Vec::new()
            }
            Err(e) => {
                xfer_core::warn_limited!(error = %e, "making a challenge");
                Vec::new()
            }
        };
        if let Err(e) = id.reject(&reply) {
            tracing::debug!(error = %e, "rejecting a request with a challenge");
        }
        false
    }

    /// A connection failed: its operations end with `err`; queued ones
    /// wait for a new connection if this one had been working and the
    /// port is up, else fail.
    pub(super) fn conn_failed(&mut self, cx: &mut Ctx<'_>, k: usize, err: Error) {
        let was_ready = self.conns[k].state == State::Ready;
        if self.conns[k].state == State::Dead {
            return;
        }
        tracing::debug!(peer = ?self.conns[k].peer, error = %err, was_ready, "verbs connection ends");
        let peer = self.conns[k].peer;
        self.retire_conn(cx, k, err.clone());
        let Some(p) = self.peers.get_mut(&peer) else { return };
        if p.conn != Some(k) {
            return;
        }
        p.conn = None;
        let queued = !p.queue.is_empty();
        let src = cx.av.reverse(&peer);
        // Its working connection is gone: the peer left (it joins again
        // if a new connection is made for the work below).
        self.peer_events.down(peer, src, err.clone());
        let awaited = self.recvs.has_posted_from(src);
        if !queued && !awaited {
            return;
        }
        if was_ready && self.port_active() {
            // Queued work goes out on a new connection; receives directed at
            // the peer wait for it too. If the peer is gone, connecting
            // fails and fail_peer ends both.
            self.start_connect(cx, peer);
        } else {
            // Not while our own port is down: that attempt would wait out
            // the outage, or the connect timeout, and the operations
            // posted once the link is back would queue behind it.
            self.fail_peer(cx, peer, err);
        }
    }

    /// Takes a connection out of service: QP to error, its posted work and
    /// rendezvous sends end with `err`.
    pub(super) fn retire_conn(&mut self, cx: &mut Ctx<'_>, k: usize, err: Error) {
        let c = &mut self.conns[k];
        if c.state == State::Dead {
            return;
        }
        if c.state == State::Ready {
            if let Err(e) = c.id.disconnect() {
                tracing::debug!(error = %e, "rdma_disconnect");
            }
        }
        if let Some(qp) = &c.qp {
            if let Err(e) = qp.to_error() {
                tracing::debug!(error = %e, "moving a QP to the error state");
            }
        }
        self.bury(k, matches!(err, Error::Protocol(_)));
        self.fail_posted(cx, k, err.clone());
        for (_, _, r) in self.rndv.remove_where(|r| r.conn == k) {
            self.release_mr(r.mr);
            xfer_core::unstable::complete::send(&mut cx.cq, false, r.op, Err(err.clone()));
        }
    }

    /// Marks a connection dead (kept for [`GRAVE`] so late completions of
    /// its QP are recognised).
    fn bury(&mut self, k: usize, violated: bool) {
        let c = &mut self.conns[k];
        if c.state == State::Dead {
            return;
        }
        if c.state != State::Ready {
            self.connecting = self.connecting.saturating_sub(1);
        }
        c.state = State::Dead;
        c.dead_since = Some(Instant::now());
        // Its kept requests to send can never be read, and a peer that broke
        // the protocol leaves nothing behind.
        let mut dropped = xfer_core::unstable::rdm::Dropped::default();
        if violated || !c.requests.is_empty() {
            let serial = c.serial;
            c.requests = Default::default();
            dropped = self.recvs.drop_connection(violated, |u| match u {
                Unexpected::Eager { conn, .. } => *conn == (k, serial),
                Unexpected::Rts { handle, .. } => handle.conn == k && handle.serial == serial,
            });
            self.stats.rdm.dropped(dropped);
        }
        // What the rest of its kept messages hold is given back as receives take them.
        self.conns[k].share.close(&mut self.account, dropped.credit);
    }

    /// Ends every queued operation of `dest`, and every receive directed
    /// at it, with `err` (the peer cannot be reached).
    pub(super) fn fail_peer(&mut self, cx: &mut Ctx<'_>, dest: Address, err: Error) {
        let src = cx.av.reverse(&dest);
        for op in self.recvs.drain_posted_from(src) {
            xfer_core::unstable::complete::recv_failed(&mut cx.cq, op, err.clone());
        }
        let queued: Vec<Tx> = match self.peers.get_mut(&dest) {
            Some(p) => {
                p.retry_at = None;
                p.retries = 0;
                p.queue.drain(..).collect()
            }
            None => Vec::new(),
        };
        for tx in queued {
            self.fail_tx(cx, tx, err.clone());
        }
    }

    /// Retries connections refused by a tie-break, and frees dead ones.
    pub(super) fn retry_timers(&mut self, cx: &mut Ctx<'_>) {
        let now = Instant::now();
        let due: Vec<Address> = self
            .peers
            .iter()
            .filter(|(_, p)| p.retry_at.is_some_and(|t| t <= now))
            .map(|(a, _)| *a)
            .collect();
        for dest in due {
            let p: &mut Peer = self.peers.entry(dest).or_default();
            p.retry_at = None;
            if p.conn.is_none() && !p.queue.is_empty() {
                self.start_connect(cx, dest);
            }
        }
        // Connections not established in time fail, and what waits for them.
        let limit = Duration::from_millis(self.res.attr.connect_timeout_ms);
        if !limit.is_zero() && self.connecting > 0 {
            let late: Vec<usize> = self
                .conns
                .iter()
                .filter(|(_, c)| !matches!(c.state, State::Ready | State::Dead) && now.duration_since(c.since) > limit)
                .map(|(k, _)| k)
                .collect();
            for k in late {
                tracing::debug!(peer = ?self.conns[k].peer, state = ?self.conns[k].state, "connection not established in time");
                let e = Error::PeerUnreachable {
                    peer: cx.av.reverse(&self.conns[k].peer),
                    errno: libc::ETIMEDOUT,
                };
                self.conn_failed(cx, k, e);
            }
        }
        let graves: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| c.dead_since.is_some_and(|t| now.duration_since(t) > GRAVE) && c.posted.is_empty())
            .map(|(k, _)| k)
            .collect();
        for k in graves {
            let c = self.conns.remove(k);
            self.by_id.remove(&(c.id.as_ptr() as usize));
            if let Some(qp) = &c.qp {
                self.by_qpn.remove(qp.qp_num());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(port: u16, nonce: u64) -> VerbsName {
        VerbsName {
            addr: std::net::SocketAddrV4::new(std::net::Ipv4Addr::new(10, 0, 0, 1), port),
            nonce,
        }
    }

    #[test]
    fn admission_private_data_fits_rdma_cm_and_parses_back() {
        let me = name(7000, 11);
        let plain = private_request(&me, 22, None);
        assert_eq!(plain.len(), REQUEST_LEN);
        assert_eq!(parse_private(&plain), Some((KIND_REQ, me.address())));
        assert_eq!(request_proof(&plain), None, "no proof in a plain request");
        let proof = [9u8; admit::SHORT];
        let proven = private_request(&me, 22, Some(&proof));
        // rdma_cm passes at most 56 bytes of private data with a request.
        assert!(proven.len() <= 56, "{} bytes", proven.len());
        assert_eq!(parse_private(&proven), Some((KIND_REQ_PROVEN, me.address())));
        assert_eq!(request_target(&proven), Some(22));
        assert_eq!(request_proof(&proven), Some(&proof[..]));
        // The CM may pad what it delivers.
        let mut padded = proven.clone();
        padded.resize(56, 0);
        assert_eq!(request_proof(&padded), Some(&proof[..]));
        let c = [5u8; admit::CHALLENGE_LEN];
        let challenge = private_challenge(&me, &c);
        assert_eq!(parse_private(&challenge), Some((KIND_CHALLENGE, me.address())));
        assert_eq!(challenge_of(&challenge), Some(c));
        assert_eq!(challenge_of(&challenge[..CHALLENGE_LEN - 1]), None, "short");
        assert_eq!(challenge_of(&private(KIND_DUP, &me)), None, "no challenge");
    }
}
