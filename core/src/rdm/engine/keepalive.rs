//! The transport's keepalive ([`Transport::keepalive`]): a transport that
//! learns of a dead peer only through work it posts (verbs RC: "retry
//! exceeded" on a send) would never learn it while nothing is posted, e.g.
//! a rendezvous send waiting for its receiver's pull, or a receive
//! directed at the peer. Every keepalive interval the engine gives the
//! transport the connections of the peers something waits on
//! ([`Transport::probe`]); the transport makes them show whether the peer
//! is reachable, and a connection it finds dead comes back as `Down`,
//! which fails what waited on it. Unlike the progress timeout this blames
//! the path, never a slow peer: the peer's device answers a probe.

use std::time::{Duration, Instant};

use crate::provider::Ctx;

use super::super::transport::Transport;
use super::State;

/// When the next keepalive tick is due, if the transport wants them.
#[derive(Debug)]
pub(super) struct Ticks {
    every: Option<Duration>,
    next: Instant,
}

impl Ticks {
    /// Ticks every `every` (`None`: never).
    pub(super) fn new(every: Option<Duration>) -> Ticks {
        Ticks {
            every: every.filter(|d| !d.is_zero()),
            next: Instant::now(),
        }
    }

    /// Whether a tick is due now; if so, the next is one interval later.
    /// Inline: every progress call asks, and with no keepalive (shm, TCP)
    /// the answer is one comparison, not a call.
    #[inline]
    fn due(&mut self) -> bool {
        let Some(every) = self.every else { return false };
        let now = Instant::now();
        if now < self.next {
            return false;
        }
        self.next = now + every;
        true
    }
}

impl State {
    /// On a due tick, hands the transport the connections of every peer
    /// something waits on: queued frames, sends, RMA, atomics, pushed
    /// receives, or receives directed at it.
    pub(super) fn keep_alive<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>) {
        if !self.keepalive.due() {
            return;
        }
        let mut conns = Vec::new();
        for p in self.peers.keys() {
            let at = self.serial(p);
            let waits = self.waits_on(at) || {
                let src = self.peers.handle(p, cx.av);
                self.rx.has_posted_from(src)
            };
            if waits {
                if let Some(e) = self.peers.get(p) {
                    conns.extend_from_slice(&e.conns);
                }
            }
        }
        t.probe(&conns);
    }
}
