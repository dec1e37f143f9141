//! Stalled peers on TCP: a peer whose process is stopped (SIGSTOP, a
//! debugger) or hung while its kernel still acknowledges. TCP keepalive and
//! the user timeout never fire for it, so operations waiting for it would
//! wait forever (227 operations for 100 s were seen).
//!
//! Core's `rdm::stall` keeps the time (when to look, how long each peer has
//! been silent, when to probe and when to give up); this file says what it
//! means on TCP. A connection waits for its peer while it has frames not yet
//! written, a frame half received, or a send, rendezvous or RMA operation on
//! it; it hears from the peer with every read that brings bytes and every
//! write-readiness event (room made while blocked on writing). The probe is
//! a Ping, which the peer's next progress call answers with a Pong. A
//! stalled connection fails with [`Error::Stalled`], and every operation on
//! it with it (`FI_ETIMEDOUT`). Nothing is sent or checked on idle
//! connections, and nothing at all while the timeout is 0 (the default: a
//! process stopped in a debugger must not break its job).

use xfer_core::unstable::rdm::stall::Verdict;

use super::*;

impl TcpEndpoint {
    /// Looks at every connection with something waiting for its peer:
    /// probes the ones silent for half the timeout, fails the ones silent
    /// for all of it (core's `rdm::stall` keeps the time).
    pub(super) fn check_stalls(&mut self, cx: &mut Ctx<'_>) {
        let look = self.watch.look();
        let waiting = self.waiting_for_peers();
        let (mut probe, mut fail) = (Vec::new(), Vec::new());
        for (id, c) in self.conns.iter_mut() {
            let waits = c.link.is_open() && waiting.get(id).copied().unwrap_or(false);
            match c.silence.look(&look, waits) {
                Verdict::Fine => {}
                Verdict::Probe => probe.push(id),
                Verdict::Stalled => fail.push(id),
            }
        }
        for id in probe {
            self.watch.probes += 1;
            self.send_control(cx, id, Frame::Ping);
        }
        for id in fail {
            self.watch.stalled += 1;
            self.fail_conn(cx, id, Error::Stalled { peer: PeerAddr::UNSPEC });
        }
    }

    /// Which connections (by key) have something waiting for their peer.
    fn waiting_for_peers(&self) -> Vec<bool> {
        let mut w = vec![false; self.conns.capacity()];
        let mut mark = |(id, serial): (usize, u64)| {
            if self.conns.get(id).is_some_and(|c| c.serial == serial) {
                if let Some(m) = w.get_mut(id) {
                    *m = true;
                }
            }
        };
        self.sends.iter().for_each(|(_, tx)| mark(tx.conn));
        self.rma.iter().for_each(|(_, r)| mark(r.conn));
        self.rndv.iter().for_each(|(_, r)| mark(r.conn));
        for (id, c) in self.conns.iter() {
            if !c.txq.is_empty() || !matches!(c.rx, Phase::Header) {
                w[id] = true;
            }
        }
        w
    }

    /// Queues a frame without payload (Ping, Pong) on connection `id`.
    pub(super) fn send_control(&mut self, cx: &mut Ctx<'_>, id: usize, frame: Frame) {
        if !self.conns.contains(id) {
            return;
        }
        let frame = TxFrame {
            hdr: frame.to_bytes(),
            payload: Payload::None,
            written: 0,
            owner: Owner::None,
        };
        self.queue(cx, id, frame);
    }
}
