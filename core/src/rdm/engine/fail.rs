//! A peer's end, whichever connection noticed it: every operation waiting on
//! the peer becomes one error completion, once — sends it had not answered,
//! frames not yet written, receives it was pushing into or that were
//! directed at it — and its unmatched requests to send are dropped (there is
//! no one left to pull from). A receive whose pull the transport is moving
//! ends when the transport reports the pull (its buffer is the transport's
//! until then), with the peer's error if the pull failed. Its eager
//! messages stay for later receives, unless it broke the protocol: then
//! nothing it sent is kept. A later send to the peer connects anew, and
//! fails as for any peer that is not there.
//!
//! Closing the endpoint ends every operation with [`Error::Canceled`]; a
//! receive being pulled ends so when the transport reports its pull over
//! (a later progress), unless every byte was in by then.

use crate::complete;
use crate::error::Error;
use crate::provider::Ctx;

use super::super::credit::cost;
use super::super::transport::{Cause, ConnId, Transport};
use super::super::Unexpected;
use super::out::Out;
use super::peers::Peer;
use super::{cause_error, State};

impl State {
    /// A connection the transport reported down: forgotten at once (its id
    /// may be reused within the same progress), its peer ended after.
    pub(super) fn lost(&mut self, conn: ConnId, cause: Cause) {
        if let Cause::Protocol(what) = cause {
            self.stats.protocol_errors += 1;
            crate::warn_limited!(conn, error = what, "rdm: connection ended by a protocol error");
        }
        let kept = !matches!(cause, Cause::Protocol(_));
        match self.peers.link_of(conn).map(|l| l.peer) {
            Some(Some(peer)) if cause == Cause::Rerouted && self.redial(peer, conn) => {}
            Some(Some(peer)) if kept && (self.cross_over(peer, conn) || self.spare(peer, conn)) => {}
            Some(Some(peer)) => {
                let at = self.serial(peer);
                self.failed.push((at, cause));
            }
            Some(None) => self.vetting_lost(conn),
            None => {}
        }
        self.peers.unlink(conn);
    }

    /// Peer `p`'s connection `conn` could not be made on its route and the
    /// transport takes another on the next connect: the peer dials again
    /// (the next flush does) and says hello first. `false` when `conn` was
    /// not the peer's connection still waiting for admission.
    fn redial(&mut self, p: usize, conn: ConnId) -> bool {
        let name = self.name;
        let Some(e) = self.peers.get_mut(p) else { return false };
        if e.tx != Some(conn) || !e.gated() {
            return false;
        }
        e.tx = None;
        e.conns.retain(|&c| c != conn);
        if !e.queue.front().is_some_and(|(_, out)| super::admit::opens(out)) {
            e.queue.push_front((0, super::admit::hello(&name)));
            self.queued += 1;
        }
        true
    }

    /// Peer `p`'s connection `conn`, the one this side dialled, ended (or
    /// was given up) before the peer admitted us, while the peer's own
    /// connection to us is admitted (both connected at once): this side
    /// sends on that one from now on. Only our hello and proof were ever
    /// written on `conn` (a gated peer gets nothing else), so nothing is
    /// lost or reordered; the ones still queued are dropped. `false` when
    /// `conn` was not such a connection.
    fn cross_over(&mut self, p: usize, conn: ConnId) -> bool {
        let Some(e) = self.peers.get_mut(p) else { return false };
        if e.tx != Some(conn) || !e.gated() {
            return false;
        }
        let Some(&other) = e.conns.iter().find(|&&c| c != conn) else {
            return false;
        };
        e.tx = Some(other);
        e.conns.retain(|&c| c != conn);
        while e.queue.front().is_some_and(|(_, out)| super::admit::opens(out)) {
            e.queue.pop_front();
            self.queued -= 1;
        }
        self.peers.ungate(p);
        self.stats.crossed_over += 1;
        tracing::debug!(
            conn,
            to = other,
            "rdm: our connect to a peer failed; sending on its connection to us"
        );
        true
    }

    /// Connection `conn` of peer `p`, one this side does not send on, ended
    /// while the one it sends on stands: only the connection goes. Every
    /// frame the peer sent on it was taken; a peer that lost more ends the
    /// connection we send on too, and then the peer ends here.
    fn spare(&mut self, p: usize, conn: ConnId) -> bool {
        let Some(e) = self.peers.get_mut(p) else { return false };
        if e.tx.is_none() || e.tx == Some(conn) {
            return false;
        }
        e.conns.retain(|&c| c != conn);
        true
    }

    /// Closes the connections doomed during progress and ends the peers that
    /// failed.
    #[inline(always)]
    pub(super) fn end_doomed<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>) {
        // Checked inline: taking an empty list still costs its iterator's
        // drop, and the call its register saves, on every progress.
        if !self.doomed.is_empty() || !self.failed.is_empty() {
            self.end_doomed_now(t, cx);
        }
    }

    fn end_doomed_now<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>) {
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
        let Some(gone) = self.drop_peer(t, cx, at.0, &err) else {
            return;
        };
        tracing::debug!(peer = ?gone.name, error = %err, "rdm: peer ended");
        self.events.down(gone.name, src, err.clone());
        self.end_waiting(cx, |peer| peer == at, &err);
        // Pulls the transport moves end when it reports them (it may still
        // write their buffers); failed, they report the peer's error.
        for (_, p) in self.pulling.iter_mut().filter(|(_, p)| p.peer == at) {
            p.ended = Some(err.clone());
        }
        self.write_failed.retain(|&(p, _, _)| p != at);
        self.grants.retain(|&(p, _, _), _| p != at);
        self.injected.retain(|&p| p != at);
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

    /// Closes peer `p`'s connections and removes its entry; the eager sends
    /// still queued to it end with `err`. The entry, if there was one.
    fn drop_peer<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>, p: usize, err: &Error) -> Option<Peer> {
        let conns = self.peers.get(p).map(|e| e.conns.clone()).unwrap_or_default();
        for c in conns {
            if self.peers.link_of(c).is_some() {
                t.close(c);
            }
        }
        let mut gone = self.peers.remove(p)?;
        self.queued -= gone.queue.len();
        for (_, out) in gone.queue.drain(..) {
            match out {
                Out::Eager(_, op) => complete::send(&mut cx.cq, self.selective, op, Err(err.clone())),
                Out::Atomic(_, op) => complete::atomic(&mut cx.cq, op, Err(err.clone())),
                _ => {}
            }
        }
        Some(gone)
    }

    /// Ends with `err` every send, pushed receive, RMA and atomic waiting on
    /// a peer entry `on` picks.
    fn end_waiting(&mut self, cx: &mut Ctx<'_>, on: impl Fn((usize, u64)) -> bool, err: &Error) {
        for (_, _, s) in self.sends.remove_where(|s| on(s.peer)) {
            self.concealed.extend(s.exposed);
            complete::send(&mut cx.cq, self.selective, s.op, Err(err.clone()));
        }
        for (_, _, p) in self.pushes.remove_where(|p| on(p.peer)) {
            self.resumable -= usize::from(p.resume.is_some());
            if let Some(op) = p.op {
                complete::recv_failed(&mut cx.cq, op, err.clone());
            }
        }
        for (_, _, r) in self.rmas.remove_where(|r| on(r.peer) && !r.native) {
            complete::rma(&mut cx.cq, self.selective, r.op, Err(err.clone()));
        }
        // Native RMA ends when the transport reports it (it may still move
        // its buffer), with this error.
        for (_, r) in self.rmas.iter_mut().filter(|(_, r)| on(r.peer)) {
            r.ended.get_or_insert_with(|| err.clone());
        }
        let busy = |a: &super::atomic::AtomicTx| a.device.as_ref().is_some_and(|d| d.busy);
        for (_, _, a) in self.atomics.remove_where(|a| on(a.peer) && !busy(a)) {
            complete::atomic(&mut cx.cq, a.op, Err(err.clone()));
        }
        // A device atomic ends when the transport reports it, with this error.
        for (_, a) in self.atomics.iter_mut().filter(|(_, a)| on(a.peer)) {
            if let Some(d) = a.device.as_mut() {
                d.ended.get_or_insert_with(|| err.clone());
            }
        }
    }

    /// Writes what a burst held back, then ends every operation with
    /// `Canceled` and closes every connection.
    pub(super) fn close<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>) {
        // Frames a burst held back are written first, as a socket's close
        // sends what it holds: a message posted before the close (an async
        // caller's dropped send, a stream's end) is not lost to coalescing.
        self.flush_all(t, cx);
        self.closed = true;
        self.events.clear();
        self.vetting.clear();
        self.answers.clear();
        for p in self.peers.keys() {
            self.drop_peer(t, cx, p, &Error::Canceled);
        }
        self.end_waiting(cx, |_| true, &Error::Canceled);
        // Pulls end when the transport reports them (their connections are
        // closed: soon, failed), as cancelled.
        for (_, p) in self.pulling.iter_mut() {
            p.ended = Some(Error::Canceled);
        }
        for op in self.rx.drain_posted() {
            complete::recv_failed(&mut cx.cq, op, Error::Canceled);
        }
        self.rx.drop_kept(|_| true);
        self.conceal_all(t);
        self.account = super::super::Account::new(self.account.limit());
    }
}
