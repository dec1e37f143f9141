//! The RC keepalive under the engine ([`Transport::probe`]): RC reports a
//! dead peer only through the work requests it posts ("retry exceeded"
//! after `retry_cnt + 1` ACK timeouts), so a connection on which the engine
//! waits with nothing posted (a rendezvous send waiting for its receiver's
//! pull, a receive directed at the peer) gets, each keepalive interval
//! (`XFER_VERBS_KEEPALIVE_MS`), a signaled zero-length RDMA WRITE unless a
//! signaled request is in flight there already. It accesses no memory and
//! consumes no receive; the peer's device answers it, not its process, so a
//! slow peer is not blamed. A failed probe ends its connection as any
//! failed send does.
//!
//! The same ticks look at the local port: seen down on two ticks in a row,
//! the connections with waiting work end at once (`ENETDOWN`). Soft-RoCE
//! needs it: on the side whose link was set down, rxe (Linux 6.1) can retry
//! sending into the downed device forever and complete nothing, probes
//! included.
//!
//! [`Transport::probe`]: xfer_core::unstable::rdm::transport::Transport::probe

use xfer_core::unstable::rdm::transport::{Cause, ConnId};

use super::conn::State;
use super::VerbsTransport;

impl VerbsTransport {
    /// One keepalive tick over `conns`, the connections the engine waits on.
    pub(super) fn keepalive_tick(&mut self, conns: &[ConnId]) {
        if conns.is_empty() {
            self.port_down_ticks = 0;
            return;
        }
        let active = self.pd.context().query_port(self.port).map_or(true, |p| p.active);
        self.port_down_ticks = if active {
            0
        } else {
            self.port_down_ticks.saturating_add(1)
        };
        for &k in conns {
            if self.port_down_ticks >= 2 {
                if self.conns.get(k).is_some_and(|c| !matches!(c.state, State::Dead(_))) {
                    self.stats.keepalive_port_down += 1;
                    tracing::debug!(conn = k, "verbs: the port is down; a connection with waiting work ends");
                    self.end(k, Cause::Failed(libc::ENETDOWN));
                }
            } else {
                self.probe_conn(k);
            }
        }
    }

    /// Posts a probe on ready connection `k` unless a signaled request is
    /// in flight there already (its completion shows the same).
    fn probe_conn(&mut self, k: ConnId) {
        if self.signaled >= self.cq_room {
            return;
        }
        let Some(c) = self.conns.get_mut(k) else { return };
        if !matches!(c.state, State::Ready) {
            return;
        }
        let Some(qp) = c.qp.as_mut() else { return };
        let before = qp.signaled_in_flight();
        if before > 0 {
            return;
        }
        // wr_id 0: neither a send slot's nor a READ's; `on_send` takes its
        // completion as an inline send's.
        match qp.probe(0) {
            Ok(()) => {
                self.signaled += qp.signaled_in_flight().saturating_sub(before);
                self.stats.keepalive_probes += 1;
            }
            // A full send queue has signaled work in flight; any other
            // failure shows on the connection's next completion.
            Err(e) => tracing::debug!(conn = k, error = %e, "posting a keepalive probe"),
        }
    }
}
