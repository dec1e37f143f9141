//! Coalescing eager sends posted in a burst (ARCHITECTURE.md decision 58).
//!
//! The first eager frame after a progress call is written at once, so a
//! ping-pong's latency is untouched. The ones posted after it, before the
//! next progress call, wait in their connection's queue: the next progress
//! call, a blocking wait (`prepare_wait`) or the [`TcpAttr::coalesce`]th
//! queued frame writes them together, many frames to one `sendmsg`
//! (`batch`). A stream of messages then costs a system call per batch
//! instead of one per message: the cost that bounds the rate of small
//! messages, and the bandwidth of 8-64 KiB ones. Requests to send wait for
//! their burst the same way, and frames a progress call queues (answers to
//! what it read) are written together when the call ends (decision 73).
//!
//! [`TcpAttr::coalesce`]: crate::attr::TcpAttr::coalesce

use super::*;

impl TcpEndpoint {
    /// Whether an eager frame posted now should wait for the rest of its burst.
    #[inline]
    pub(super) fn in_burst(&self) -> bool {
        self.burst && self.tcp.coalesce > 0
    }

    /// Queues an eager frame that was not written whole, or a request to
    /// send: behind a burst it waits (up to
    /// [`TcpAttr::coalesce`](crate::attr::TcpAttr::coalesce) frames),
    /// otherwise it goes out as far as the socket takes.
    pub(super) fn queue_eager(&mut self, cx: &mut Ctx<'_>, id: usize, frame: TxFrame) {
        let coalesce = self.tcp.coalesce;
        let burst = self.in_burst();
        let conn = &mut self.conns[id];
        conn.txq.push_back(frame);
        if burst && conn.link.is_open() && conn.txq.len() < coalesce {
            self.coalesced += 1;
            defer(&mut self.deferred, conn, id);
            return;
        }
        self.flush(cx, id);
    }

    /// Writes every connection's frames held back for its burst, and ends
    /// the burst: the next small frame is written when it is posted.
    #[inline]
    pub(super) fn end_burst(&mut self, cx: &mut Ctx<'_>) {
        self.burst = false;
        if self.deferred.is_empty() {
            return;
        }
        let ids = std::mem::take(&mut self.deferred);
        for &id in &ids {
            if let Some(conn) = self.conns.get_mut(id) {
                conn.deferred = false;
                self.flush(cx, id);
            }
        }
        // Keep the allocation for the next burst.
        self.deferred = ids;
        self.deferred.clear();
    }
}

/// Connection `id` (`conn`) has frames to write at the end of the burst or
/// of the progress call under way: listed once in `deferred`.
#[inline]
pub(super) fn defer(deferred: &mut Vec<usize>, conn: &mut Conn, id: usize) {
    if !conn.deferred {
        conn.deferred = true;
        deferred.push(id);
    }
}
