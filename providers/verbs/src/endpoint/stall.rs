//! Stalled peers on verbs: a peer whose process is stopped (SIGSTOP, a
//! debugger) or hung. Its HCA keeps acknowledging, so RC never reports it
//! and the keepalive's probe (answered by the device) succeeds: operations
//! waiting for the process would wait forever.
//!
//! Core's `rdm::stall` keeps the time; this file says what it means here.
//! A ready connection waits for its peer while a rendezvous send on it
//! waits for the receiver's FIN, operations wait in the peer's queue (for
//! credit, which only the peer's process returns, or for room), or a READ
//! or a signaled RMA operation is posted on it. It hears from the peer's
//! process with every message that arrives. The probe is a ping (a message
//! that costs one credit, so it never drains the shared SRQ), which the
//! peer answers with a credit message at its next progress call; out of
//! message credit there is no ping, but a live peer returns credit by
//! itself. A stalled connection is retired with [`Error::Stalled`]: its
//! posted work, its rendezvous sends and the operations queued for its
//! peer all end with it; later operations connect again.

use xfer_core::unstable::provider::Ctx;
use xfer_core::unstable::rdm::stall::Verdict;
use xfer_core::Error;

use super::{State, Tx, VerbsEndpoint, Wr};
use crate::wire;

impl VerbsEndpoint {
    /// Looks at every ready connection: probes the ones whose peer has
    /// been silent for half the timeout while something waits for it,
    /// retires the ones silent for all of it.
    pub(super) fn check_stalls(&mut self, cx: &mut Ctx<'_>) {
        let look = self.watch.look();
        let keys: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
        let (mut probe, mut fail) = (Vec::new(), Vec::new());
        for k in keys {
            let waits = self.waits_for_peer(k);
            match self.conns[k].silence.look(&look, waits) {
                Verdict::Fine => {}
                Verdict::Probe => probe.push(k),
                Verdict::Stalled => fail.push(k),
            }
        }
        for k in probe {
            self.ping(k);
        }
        for k in fail {
            self.stalled(cx, k);
        }
    }

    /// Whether ready connection `k` has something waiting for its peer.
    fn waits_for_peer(&self, k: usize) -> bool {
        let c = &self.conns[k];
        if c.state != State::Ready {
            return false;
        }
        self.rndv.iter().any(|(_, r)| r.conn == k)
            || self
                .peers
                .get(&c.peer)
                .is_some_and(|p| p.conn == Some(k) && !p.queue.is_empty())
            || c.posted.iter().any(|&w| match self.ops.get(w) {
                Some(Wr::Read { .. }) => true,
                Some(Wr::Rma { signaled, .. }) => *signaled,
                _ => false,
            })
    }

    /// Sends connection `k`'s peer a ping, if a message credit and room
    /// allow; otherwise the next look asks again.
    fn ping(&mut self, k: usize) {
        let mut msg = [0u8; wire::PING_LEN];
        wire::ping(&mut msg);
        if self.conns[k].credit.flow.can_send(0, 1) && self.post_ctrl(k, &msg, false, true).is_ok() {
            self.watch.probes += 1;
            tracing::trace!(peer = ?self.conns[k].peer, "progress probe (ping) posted");
        } else {
            self.conns[k].silence.unprobed();
        }
    }

    /// Connection `k`'s peer made no progress for the whole timeout: the
    /// connection and everything waiting for its peer end with `Stalled`.
    fn stalled(&mut self, cx: &mut Ctx<'_>, k: usize) {
        let peer = self.conns[k].peer;
        let err = Error::Stalled {
            peer: cx.av.reverse(&peer),
        };
        self.watch.stalled += 1;
        xfer_core::warn_limited!(peer = ?peer, "peer made no progress within the progress timeout; connection closed");
        self.retire_conn(cx, k, err.clone());
        let queued: Vec<Tx> = match self.peers.get_mut(&peer) {
            Some(p) if p.conn == Some(k) => {
                p.conn = None;
                p.queue.drain(..).collect()
            }
            _ => Vec::new(),
        };
        for tx in queued {
            self.fail_tx(cx, tx, err.clone());
        }
    }
}
