//! A crossed first contact: two endpoints that send to each other first at
//! the same moment each dial the other. Each then routes its frames over the
//! connection it opened, so a request and its answer travel on different
//! sockets and no acknowledgement rides on data (about 1 µs a message under
//! MPI, docs/OFI.md). The endpoint with the greater name gives its own
//! connection up when it meets the peer's Hello while nothing but its own
//! Hello has gone out on it: what waits there moves, in order, behind the
//! HelloAck on the peer's connection, and its own closes. If its own
//! connection is open already (frames may be in flight on it) it keeps both,
//! as before: order across two connections cannot be restored cheaply.
//! The tie-break itself is the connection's lifecycle machine's
//! (`Link::gives_way`); this file moves what waits.

use super::*;

impl TcpEndpoint {
    /// `peer`'s Hello came on the accepted connection `accepted` while our
    /// route to it is `own`: adopt `accepted` when our name is the greater
    /// and `own` has carried nothing but its Hello.
    pub(super) fn resolve_crossing(&mut self, cx: &mut Ctx<'_>, peer: Address, own: usize, accepted: usize) {
        if own == accepted {
            return; // nothing to resolve
        }
        let Some(conn) = self.conns.get_mut(own) else { return };
        if !conn.link.gives_way(&self.local, &peer) {
            return; // the peer adopts ours, or frames may be in flight on ours
        }
        let from = (own, conn.serial);
        // Eager credit spent on frames queued there moves with them.
        let spent = CREDIT_INIT.saturating_sub(conn.credit.tx.bytes);
        let waiting: Vec<TxFrame> = conn.txq.drain(..).filter(|f| f.owner != Owner::Handshake).collect();
        let unpaid = std::mem::take(&mut conn.credit_wait);
        let Some(acc) = self.conns.get_mut(accepted) else {
            return;
        };
        let to = (accepted, acc.serial);
        acc.credit.spend(spent, 0);
        acc.txq.extend(waiting);
        acc.credit_wait.extend(unpaid);
        for (_, tx) in self.sends.iter_mut().filter(|(_, t)| t.conn == from) {
            tx.conn = to;
        }
        for (_, r) in self.rma.iter_mut().filter(|(_, r)| r.conn == from) {
            r.conn = to;
        }
        self.route.insert(peer, accepted);
        tracing::debug!("crossed first contact: our connection gives way to the peer's");
        self.fail_conn(cx, own, Error::Canceled);
        self.release_waiting(cx, accepted);
        self.flush(cx, accepted);
    }
}
