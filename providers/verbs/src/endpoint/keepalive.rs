//! RC keepalive: a connection on which operations wait for the peer, but
//! with nothing posted that could fail, gets a probe every
//! `XFER_VERBS_KEEPALIVE_MS` (docs/ARCHITECTURE.md, decision 33).
//!
//! RC reports a dead peer only through the work requests it posts: "retry
//! exceeded" after `(retry_cnt + 1)` ACK timeouts. A rendezvous send waiting
//! for the receiver's FIN, or a receive directed at a peer, posts nothing,
//! so when the link goes they would wait forever. The probe is a signaled
//! zero-length RDMA WRITE ([`RcQp::probe`](crate::qp::RcQp::probe)): it
//! accesses no memory and consumes no receive, and the peer's device
//! answers it, not its process, so a peer that is merely slow to progress
//! is not affected. Its completion is consumed here (no user completion);
//! as any signaled request it retires the unsignaled ones before it. When
//! it fails, the connection is retired and everything waiting on it ends
//! with `PeerUnreachable` ([`VerbsEndpoint::conn_failed`]).
//!
//! The local port is looked at on the same ticks: when it is seen down on
//! two ticks in a row, connections with waiting work end at once
//! (`ENETDOWN`). Soft-RoCE needs it: on the side whose link was set down,
//! rxe (Linux 6.1) can retry sending into the downed device forever, and
//! the QP then completes nothing, neither its work nor a probe.

use std::time::Instant;

use xfer_core::unstable::addr::Address;
use xfer_core::unstable::hash::FastMap;
use xfer_core::unstable::provider::Ctx;
use xfer_core::Error;

use super::{State, VerbsEndpoint, Wr};

impl VerbsEndpoint {
    /// Probes, once per keepalive interval, every ready connection that
    /// has operations waiting on its peer and no signaled work request in
    /// flight (one in flight ends in a completion by itself).
    pub(super) fn keepalive(&mut self, cx: &mut Ctx<'_>) {
        let Some(every) = self.keepalive_every else {
            return;
        };
        let now = Instant::now();
        if now < self.keepalive_at {
            return;
        }
        self.keepalive_at = now + every;
        let mut waiting: FastMap<usize, ()> = FastMap::default();
        // Rendezvous sends waiting for their FIN.
        for (_, r) in self.rndv.iter() {
            waiting.insert(r.conn, ());
        }
        // Receives directed at the peer, and operations queued for it.
        for (addr, p) in &self.peers {
            let Some(k) = p.conn else { continue };
            if waiting.contains_key(&k) || !self.conns.get(k).is_some_and(|c| c.state == State::Ready) {
                continue;
            }
            if !p.queue.is_empty() || self.awaits(cx, addr) {
                waiting.insert(k, ());
            }
        }
        // Unsignaled work (RMA without a completion, sends whose buffer is
        // held until a signaled completion): a probe retires it too.
        for (k, c) in &self.conns {
            if c.state == State::Ready && !c.posted.is_empty() {
                waiting.insert(k, ());
            }
        }
        if waiting.is_empty() {
            self.port_down_ticks = 0;
            return;
        }
        // A port seen down at two ticks in a row (down for at least one
        // interval): the connections with work on it cannot finish it.
        // rxe may even retry sending into the downed device forever,
        // completing nothing, probes included.
        if self.port_active() {
            self.port_down_ticks = 0;
        } else {
            self.port_down_ticks = self.port_down_ticks.saturating_add(1);
        }
        for (k, ()) in waiting {
            if self.port_down_ticks >= 2 {
                self.stats.keepalive_port_down += 1;
                tracing::debug!(peer = ?self.conns[k].peer, "the port is down: connection with waiting work ends");
                let e = Error::PeerUnreachable {
                    peer: cx.av.reverse(&self.conns[k].peer),
                    errno: libc::ENETDOWN,
                };
                self.conn_failed(cx, k, e);
            } else {
                self.probe(k);
            }
        }
    }

    /// Whether receives are posted for messages from `peer` only.
    fn awaits(&self, cx: &Ctx<'_>, peer: &Address) -> bool {
        let src = cx.av.reverse(peer);
        self.recvs.has_posted_from(src)
    }

    /// Posts a probe on ready connection `k` unless a signaled request is
    /// already in flight there.
    fn probe(&mut self, k: usize) {
        let Some(c) = self.conns.get_mut(k) else { return };
        if c.state != State::Ready {
            return;
        }
        let Some(qp) = c.qp.as_mut() else { return };
        if qp.signaled_in_flight() > 0 {
            return;
        }
        let key = self.ops.insert(Wr::Probe);
        match qp.probe(key as u64) {
            Ok(()) => {
                c.posted.push_back(key);
                self.stats.keepalive_probes += 1;
                tracing::trace!(peer = ?c.peer, qpn = qp.qp_num(), "keepalive probe posted");
            }
            Err(e) => {
                // A full queue has a signaled request in flight; any other
                // failure shows on the connection's next completion.
                tracing::debug!(peer = ?c.peer, error = %e, "posting a keepalive probe");
                self.ops.remove(key);
            }
        }
    }
}
