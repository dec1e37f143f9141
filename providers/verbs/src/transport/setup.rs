//! Connections through rdma_cm, driven from progress. Dialled: resolve the
//! address, then the route, create the QP and send the request (the nonce
//! of the endpoint dialled and the slots we grant); on `CONNECT_RESPONSE`
//! take the QP to RTS and establish: up. Accepted: check the nonce,
//! reserve slots, create the QP, accept (with our grant); up on
//! `ESTABLISHED`, or on the peer's first frame if that comes first. Two
//! endpoints dialling each other get two connections; the engine keeps one.

use std::net::SocketAddrV4;

use xfer_core::unstable::rdm::transport::{Cause, ConnId, Event, Events};
use xfer_core::Error;

use super::conn::{self, Conn, State};
use super::credit::SlotCredit;
use super::{errno_of, VerbsTransport};
use crate::cm::{self, CmId};
use crate::qp::RcQp;

/// rdma_cm address and route resolution timeout.
const RESOLVE_MS: i32 = 2000;

impl VerbsTransport {
    /// Starts dialling `to` (the nonce `nonce`).
    pub(super) fn dial(&mut self, to: SocketAddrV4, nonce: u64) -> Result<ConnId, Cause> {
        let id = CmId::new(&self.chan).map_err(|e| Cause::Failed(errno_of(&e)))?;
        id.resolve_addr(Some(SocketAddrV4::new(self.ip, 0)), to, RESOLVE_MS)
            .map_err(|e| Cause::Failed(errno_of(&e)))?;
        let idp = id.as_ptr() as usize;
        let mut c = Conn::new(id, State::Resolving, true);
        c.to = nonce;
        let k = self.conns.insert(c);
        self.by_id.insert(idp, k);
        self.opening += 1;
        Ok(k)
    }

    /// Reserves receive slots for a new connection.
    fn grant(&mut self) -> u16 {
        let (grant, over) = self.budget.grant(self.credit_msgs);
        if over {
            xfer_core::warn_limited!(
                connections = self.conns.len(),
                "verbs: the SRQ's receive slots are all reserved (XFER_VERBS_SRQ_SIZE): \
                 a new connection overcommits it, and senders may meet RNR NAKs"
            );
        }
        grant
    }

    fn new_qp(&self) -> xfer_core::Result<RcQp> {
        RcQp::create(&self.pd, &self.cq, &self.cq, &self.srq, self.qp_cfg)
    }

    /// Handles every waiting rdma_cm event.
    pub(super) fn cm_events(&mut self, events: &mut dyn Events) {
        loop {
            let ev = match self.chan.try_next() {
                Ok(Some(ev)) => ev,
                Ok(None) => return,
                Err(e) => {
                    xfer_core::warn_limited!(error = %e, "reading rdma_cm events");
                    return;
                }
            };
            tracing::trace!(event = %ev.name(), status = ev.status, "verbs: rdma_cm event");
            if ev.kind == cm::RDMA_CM_EVENT_CONNECT_REQUEST {
                self.on_request(&ev);
                continue;
            }
            let Some(&k) = self.by_id.get(&(ev.id as usize)) else {
                continue;
            };
            if let Err(cause) = self.on_event(k, &ev, events) {
                tracing::debug!(event = %ev.name(), status = ev.status, ?cause, "verbs: connection ends");
                // What the peer sent before it disconnected is in the CQ (RC
                // delivers in order, its DREQ last): the engine has it before
                // the end, which unmaps the QP.
                self.drain_cq(events);
                self.end(k, cause);
            }
        }
    }

    fn on_event(&mut self, k: ConnId, ev: &cm::Event, events: &mut dyn Events) -> Result<(), Cause> {
        let failed = |e: Error| Cause::Failed(errno_of(&e));
        let state = self.conns[k].state;
        match (state, ev.kind) {
            (State::Dead(_), _) => {}
            (State::Resolving, cm::RDMA_CM_EVENT_ADDR_RESOLVED) => {
                let c = &mut self.conns[k];
                c.id.as_ref()
                    .map_or(Ok(()), |id| id.resolve_route(RESOLVE_MS))
                    .map_err(failed)?;
                c.state = State::Routing;
            }
            (State::Routing, cm::RDMA_CM_EVENT_ROUTE_RESOLVED) => {
                let grant = self.grant();
                self.conns[k].grant = grant;
                let qp = self.new_qp().map_err(failed)?;
                let c = &mut self.conns[k];
                let private = conn::private(conn::KIND_REQUEST, grant, c.to);
                c.id.as_ref()
                    .map_or(Ok(()), |id| id.connect(&qp, &private))
                    .map_err(failed)?;
                self.by_qpn.insert(qp.qp_num(), k);
                c.qp = Some(qp);
                c.state = State::Connecting;
            }
            (State::Connecting, cm::RDMA_CM_EVENT_CONNECT_RESPONSE) => {
                let Some((conn::KIND_ACCEPT, limit, _)) = conn::parse_private(ev.private_data()) else {
                    return Err(Cause::Protocol("verbs acceptance without its grant"));
                };
                let c = &mut self.conns[k];
                c.credit = SlotCredit::new(c.grant, limit);
                if let (Some(id), Some(qp)) = (&c.id, &c.qp) {
                    id.establish(qp).map_err(failed)?;
                }
                self.up(k, events);
            }
            (State::Accepting, cm::RDMA_CM_EVENT_ESTABLISHED) => self.up(k, events),
            (_, cm::RDMA_CM_EVENT_ESTABLISHED | cm::RDMA_CM_EVENT_TIMEWAIT_EXIT) => {}
            (_, cm::RDMA_CM_EVENT_DISCONNECTED) => {
                // The peer closed (or its process exited and the kernel
                // disconnected for it).
                return Err(if ev.status == 0 {
                    Cause::Closed
                } else {
                    Cause::Failed(ev.status.unsigned_abs() as i32)
                });
            }
            _ => {
                return Err(match cm::event_error(ev) {
                    Error::Os(e) => Cause::Failed(e),
                    _ => Cause::Failed(libc::ECONNABORTED),
                })
            }
        }
        Ok(())
    }

    /// `k` carries frames: the engine hears it once.
    pub(super) fn up(&mut self, k: ConnId, events: &mut dyn Events) {
        let c = &mut self.conns[k];
        if !c.opening() {
            return;
        }
        c.state = State::Ready;
        c.reported = true;
        if let Some(qp) = &c.qp {
            // READs beyond the negotiated initiator depth would only wait in
            // the send queue, ahead of frames.
            c.rd_depth = qp.query().map_or(1, |i| u32::from(i.max_rd_atomic).max(1));
        }
        self.opening -= 1;
        self.stats.connections += 1;
        events.event(Event::Up { conn: k });
    }

    fn on_request(&mut self, ev: &cm::Event) {
        // SAFETY: a CONNECT_REQUEST's new id is ours to own.
        let id = unsafe { CmId::from_request(ev) };
        let refuse = |id: &CmId, why: &str| {
            tracing::debug!(why, "verbs: connection request refused");
            if let Err(e) = id.reject(&[]) {
                tracing::debug!(error = %e, "rdma_reject");
            }
        };
        let limit = match conn::parse_private(ev.private_data()) {
            Some((conn::KIND_REQUEST, limit, nonce)) if nonce == self.nonce => limit,
            Some((conn::KIND_REQUEST, ..)) => return refuse(&id, "meant for another endpoint"),
            _ => return refuse(&id, "no verbs request"),
        };
        let grant = self.grant();
        let qp = match self.new_qp().and_then(|qp| {
            id.accept(&qp, ev, &conn::private(conn::KIND_ACCEPT, grant, self.nonce))
                .map(|()| qp)
        }) {
            Ok(qp) => qp,
            Err(e) => {
                self.budget.release(grant);
                xfer_core::warn_limited!(error = %e, "verbs: accepting a connection");
                return refuse(&id, "accept failed");
            }
        };
        let (idp, qpn) = (id.as_ptr() as usize, qp.qp_num());
        let mut c = Conn::new(id, State::Accepting, false);
        c.grant = grant;
        c.credit = SlotCredit::new(grant, limit);
        c.qp = Some(qp);
        let k = self.conns.insert(c);
        self.by_id.insert(idp, k);
        self.by_qpn.insert(qpn, k);
        self.opening += 1;
    }
}
