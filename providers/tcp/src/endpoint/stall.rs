//! Stalled peers: a peer whose process is stopped (SIGSTOP, a debugger) or
//! hung while its kernel still acknowledges. TCP keepalive and the user
//! timeout never fire for it, so operations waiting for it would wait
//! forever (227 operations for 100 s were seen).
//!
//! With `EndpointAttr::progress_timeout_ms` set, every quarter of the
//! timeout the endpoint looks at each connection with something waiting
//! for the peer (frames not yet written, a frame half received, a send, a
//! rendezvous or an RMA operation on it). A connection that had no byte
//! from the peer (and, while blocked on writing, no room made by it) since
//! the last look counts as silent from then on. Silent for half the
//! timeout, it gets a Ping, which the peer's next progress call answers
//! with a Pong: a peer that is alive but has nothing to say (a receiver
//! that has not posted the receive a rendezvous waits for) keeps it.
//! Silent for the whole timeout, the connection fails with
//! [`Error::Stalled`], and every operation on it with it (`FI_ETIMEDOUT`).
//! A look that comes long after the previous one (this process was itself
//! stopped, or did not progress) blames no peer: silence restarts then.
//! Nothing is sent or checked on idle connections, and nothing at all
//! while the timeout is 0 (the default: a process stopped in a debugger
//! must not break its job).

use super::*;

/// The endpoint's side of the progress timeout.
#[derive(Debug)]
pub(super) struct Watch {
    /// The timeout; zero: off.
    timeout: Duration,
    /// When the connections are looked at next.
    next: Instant,
    /// When they were looked at last.
    last: Instant,
    /// Pings sent.
    pub(super) probes: u64,
    /// Connections failed as stalled.
    pub(super) stalled: u64,
}

impl Watch {
    /// A watch for `timeout_ms` (0: off).
    pub(super) fn new(timeout_ms: u64) -> Watch {
        let now = Instant::now();
        Watch {
            timeout: Duration::from_millis(timeout_ms),
            next: now,
            last: now,
            probes: 0,
            stalled: 0,
        }
    }

    /// Whether a look is due (never while off).
    #[inline]
    pub(super) fn due(&self) -> bool {
        !self.timeout.is_zero() && Instant::now() >= self.next
    }
}

impl TcpEndpoint {
    /// Looks at every connection with something waiting for its peer:
    /// probes the ones silent for half the timeout, fails the ones silent
    /// for all of it.
    pub(super) fn check_stalls(&mut self, cx: &mut Ctx<'_>) {
        let now = Instant::now();
        let timeout = self.watch.timeout;
        let away = now.duration_since(self.watch.last) > timeout / 2;
        self.watch.last = now;
        self.watch.next = now + (timeout / 4).max(Duration::from_millis(1));
        let waiting = self.waiting_for_peers();
        let (mut probe, mut fail) = (Vec::new(), Vec::new());
        for (id, c) in self.conns.iter_mut() {
            let heard = c.heard != c.heard_seen;
            c.heard_seen = c.heard;
            if heard || away || c.state != State::Open || !waiting.get(id).copied().unwrap_or(false) {
                c.silent_since = now;
                c.probed = false;
                continue;
            }
            let silent = now.duration_since(c.silent_since);
            if silent >= timeout {
                fail.push(id);
            } else if silent >= timeout / 2 && !c.probed {
                c.probed = true;
                probe.push(id);
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
