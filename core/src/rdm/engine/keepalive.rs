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

/// Progress calls between two reads of the clock while busy-polling: a
/// read (a vDSO call, tens of instructions) on every call cost a verbs
/// poll a tenth of its path; a tick late by this many polls is late by
/// microseconds. A caller about to block reads it on its next call
/// ([`Ticks::look_next`]).
pub(super) const STRIDE: u32 = 32;

/// When the next keepalive tick is due, if the transport wants them.
#[derive(Debug)]
pub(super) struct Ticks {
    every: Option<Duration>,
    next: Instant,
    /// Calls left before the clock is read again.
    skip: u32,
}

impl Ticks {
    /// Ticks every `every` (`None`: never).
    pub(super) fn new(every: Option<Duration>) -> Ticks {
        Ticks {
            every: every.filter(|d| !d.is_zero()),
            next: Instant::now(),
            skip: 0,
        }
    }

    /// The next [`due`](Self::due) reads the clock: the caller may block,
    /// and progress calls then come one per wake-up, not in a stream.
    pub(super) fn look_next(&mut self) {
        self.skip = 0;
    }

    /// Whether a tick is due now; if so, the next is one interval later.
    /// Inline: every progress call asks, and with no keepalive (shm, TCP)
    /// the answer is one comparison, not a call.
    #[inline]
    fn due(&mut self) -> bool {
        let Some(every) = self.every else { return false };
        if self.skip > 0 {
            self.skip -= 1;
            return false;
        }
        self.skip = STRIDE;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_is_read_every_stride_and_at_once_before_a_wait() {
        let mut off = Ticks::new(None);
        assert!((0..100).all(|_| !off.due()), "no keepalive: never due");
        // Due at every look: the interval is a nanosecond.
        let mut t = Ticks::new(Some(Duration::from_nanos(1)));
        assert!(t.due(), "the first call looks");
        for _ in 0..STRIDE {
            assert!(!t.due(), "busy calls between two looks do not read the clock");
        }
        assert!(t.due(), "the call after the stride looks");
        assert!(!t.due());
        t.look_next();
        assert!(t.due(), "a caller about to block looks on its next call");
    }
}
