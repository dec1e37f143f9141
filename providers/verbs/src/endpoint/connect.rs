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

use xfer_core::unstable::addr::Address;
use xfer_core::unstable::provider::Ctx;
use xfer_core::Error;

use super::{Conn, Peer, State, Tx, VerbsEndpoint};
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
pub(crate) const PRIVATE_LEN: usize = 4 + NAME_LEN;
/// A request adds the 8-byte nonce of the endpoint it is meant for.
pub(crate) const REQUEST_LEN: usize = PRIVATE_LEN + 8;

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
/// address refuses what was meant for its previous incarnation.
pub(crate) fn private_request(name: &VerbsName, to: u64) -> [u8; REQUEST_LEN] {
    let mut p = [0u8; REQUEST_LEN];
    p[..PRIVATE_LEN].copy_from_slice(&private(KIND_REQ, name));
    p[PRIVATE_LEN..].copy_from_slice(&to.to_le_bytes());
    p
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
                let to = VerbsName::decode(self.conns[k].peer.as_bytes())?.nonce;
                self.conns[k].id.connect(&qp, &private_request(&self.name, to))?;
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
        let dup = matches!(parse_private(ev.private_data()), Some((KIND_DUP, _)));
        let peer = self.conns[k].peer;
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
        self.bury(k);
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

    fn on_request(&mut self, cx: &mut Ctx<'_>, ev: &Event) {
        // SAFETY: a CONNECT_REQUEST's new id is ours to own.
        let id = unsafe { CmId::from_request(ev) };
        let Some((KIND_REQ, from)) = parse_private(ev.private_data()) else {
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
        let itself = from == self.addr;
        let existing = if itself {
            None
        } else {
            self.peers.get(&from).and_then(|p| p.conn)
        };
        if let Some(c) = existing {
            let cc = &self.conns[c];
            if cc.active && cc.state != State::Dead && self.addr < from {
                self.stats.tie_breaks += 1;
                if let Err(e) = id.reject(&private(KIND_DUP, &self.name)) {
                    tracing::debug!(error = %e, "refusing a duplicate connection");
                }
                return;
            }
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
                return;
            }
        };
        let key = self.add_conn(from, id, Some(qp), false, State::Accepting);
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
        self.bury(k);
        self.fail_posted(cx, k, err.clone());
        let orphans: Vec<usize> = self
            .rndv
            .iter()
            .filter(|(_, r)| r.conn == k)
            .map(|(id, _)| id)
            .collect();
        for id in orphans {
            let r = self.rndv.remove(id);
            self.release_mr(r.mr);
            xfer_core::unstable::complete::send(&mut cx.cq, false, r.op, Err(err.clone()));
        }
    }

    /// Marks a connection dead (kept for [`GRAVE`] so late completions of
    /// its QP are recognised).
    fn bury(&mut self, k: usize) {
        let c = &mut self.conns[k];
        if c.state != State::Ready && c.state != State::Dead {
            self.connecting = self.connecting.saturating_sub(1);
        }
        c.state = State::Dead;
        c.dead_since = Some(Instant::now());
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
                self.by_qpn.remove(&qp.qp_num());
            }
        }
    }
}
