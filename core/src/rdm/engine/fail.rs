//! A peer's end, whichever connection noticed it: every operation waiting on
//! the peer becomes one error completion, once — sends it had not answered,
//! frames not yet written, receives it was pushing into or that were
//! directed at it — and its unmatched requests to send are dropped (there is
//! no one left to pull from). Its eager messages stay for later receives,
//! unless it broke the protocol: then nothing it sent is kept. A later send
//! to the peer connects anew, and fails as for any peer that is not there.
//!
//! Closing the endpoint ends every operation with [`Error::Canceled`].

use crate::complete;
use crate::error::Error;
use crate::provider::Ctx;

use super::super::credit::cost;
use super::super::transport::{Cause, ConnId, Transport};
use super::super::Unexpected;
use super::out::Out;
use super::{cause_error, State};

impl State {
    /// A connection the transport reported down: forgotten at once (its id
    /// may be reused within the same progress), its peer ended after.
    pub(super) fn lost(&mut self, conn: ConnId, cause: Cause) {
        if let Cause::Protocol(what) = cause {
            self.stats.protocol_errors += 1;
            crate::warn_limited!(conn, error = what, "rdm: connection ended by a protocol error");
        }
        if let Some(peer) = self.peers.link_of(conn).and_then(|l| l.peer) {
            let at = self.serial(peer);
            self.failed.push((at, cause));
        }
        self.peers.unlink(conn);
    }

    /// Closes the connections doomed during progress and ends the peers that
    /// failed.
    pub(super) fn end_doomed<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>) {
        // Checked first: taking an empty list still costs its iterator's drop
        // on every progress.
        if !self.doomed.is_empty() {
            for (conn, cause) in std::mem::take(&mut self.doomed) {
                if self.peers.link_of(conn).is_some() {
                    t.close(conn);
                    self.lost(conn, cause);
                }
            }
        }
        if !self.failed.is_empty() {
            for (at, cause) in std::mem::take(&mut self.failed) {
                self.fail_peer(t, cx, at, cause);
            }
        }
    }

    fn fail_peer<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>, at: (usize, u64), cause: Cause) {
        if self.peers.current(at).is_none() {
            return;
        }
        let src = self.peers.handle(at.0, cx.av);
        let err = cause_error(cause, src);
        let conns = self.peers.get(at.0).map(|e| e.conns.clone()).unwrap_or_default();
        for c in conns {
            if self.peers.link_of(c).is_some() {
                t.close(c);
            }
        }
        let Some(gone) = self.peers.remove(at.0) else { return };
        tracing::debug!(peer = ?gone.name, error = %err, "rdm: peer ended");
        self.events.down(gone.name, src, err.clone());
        self.queued -= gone.queue.len();
        for (_, out) in gone.queue {
            if let Out::Eager(_, op) = out {
                complete::send(&mut cx.cq, self.selective, op, Err(err.clone()));
            }
        }
        for (_, _, s) in self.sends.remove_where(|s| s.peer == at) {
            complete::send(&mut cx.cq, self.selective, s.op, Err(err.clone()));
        }
        for (_, _, p) in self.pushes.remove_where(|p| p.peer == at) {
            complete::recv_failed(&mut cx.cq, p.op, err.clone());
        }
        for (_, _, r) in self.rmas.remove_where(|r| r.peer == at) {
            complete::rma(&mut cx.cq, self.selective, r.op, Err(err.clone()));
        }
        for (_, _, a) in self.atomics.remove_where(|a| a.peer == at) {
            complete::atomic(&mut cx.cq, a.op, Err(err.clone()));
        }
        self.write_failed.retain(|&(p, _, _)| p != at);
        if !src.is_unspec() {
            for op in self.rx.drain_posted_from(src) {
                complete::recv_failed(&mut cx.cq, op, err.clone());
            }
        }
        let broke = matches!(cause, Cause::Protocol(_));
        let dropped = self.rx.drop_kept(|u| match u {
            Unexpected::Rts { handle, .. } => handle.peer == at,
            Unexpected::Eager { conn, .. } => broke && *conn == at,
        });
        let mut credit = 0;
        for u in &dropped {
            credit += cost(u.payload_len() as u64);
            match u {
                Unexpected::Rts { .. } => self.counted.requests_dropped += 1,
                Unexpected::Eager { .. } => self.counted.messages_dropped += 1,
            }
        }
        let mut share = gone.share;
        share.close(&mut self.account, credit);
    }

    /// Ends every operation with `Canceled` and closes every connection.
    pub(super) fn close<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>) {
        self.closed = true;
        self.events.clear();
        for p in self.peers.keys() {
            let conns = self.peers.get(p).map(|e| e.conns.clone()).unwrap_or_default();
            for c in conns {
                if self.peers.link_of(c).is_some() {
                    t.close(c);
                }
            }
            let Some(gone) = self.peers.remove(p) else { continue };
            for (_, out) in gone.queue {
                if let Out::Eager(_, op) = out {
                    complete::send(&mut cx.cq, self.selective, op, Err(Error::Canceled));
                }
            }
        }
        self.queued = 0;
        for s in self.sends.drain() {
            complete::send(&mut cx.cq, self.selective, s.op, Err(Error::Canceled));
        }
        for p in self.pushes.drain() {
            complete::recv_failed(&mut cx.cq, p.op, Error::Canceled);
        }
        for r in self.rmas.drain() {
            complete::rma(&mut cx.cq, self.selective, r.op, Err(Error::Canceled));
        }
        for a in self.atomics.drain() {
            complete::atomic(&mut cx.cq, a.op, Err(Error::Canceled));
        }
        for op in self.rx.drain_posted() {
            complete::recv_failed(&mut cx.cq, op, Error::Canceled);
        }
        self.rx.drop_kept(|_| true);
        self.account = super::super::Account::new(self.account.limit());
    }
}
