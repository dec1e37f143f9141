//! The progress timeout on every transport under the engine
//! (`EndpointAttr::progress_timeout_ms`): a peer whose process is stopped
//! or hung while its transport still stands (a shared-memory peer's socket
//! stays open; a TCP peer's kernel keeps acknowledging) is found by core's
//! `rdm::stall` bookkeeping. A peer waits on us while frames to it are
//! queued (its ring or buffer is full, or credit is out) or a send, RMA or
//! pushed receive is outstanding with it; every frame from it is progress,
//! and so is room it makes in a transport that had refused a frame. Silent
//! for half the timeout it gets a `Ping`, which its next progress answers
//! with a `Pong`; silent for all of it, it fails with `Error::Stalled`.

use crate::provider::Ctx;

use super::super::stall::Verdict;
use super::super::transport::{Cause, Transport};
use super::out::Out;
use super::wire::{Header, Kind};
use super::State;

impl State {
    /// Looks at every peer when a look is due: probes the silent, fails the
    /// stalled.
    pub(super) fn check_stalls<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>) {
        if !self.watch.due() {
            return;
        }
        let look = self.watch.look();
        for p in self.peers.keys() {
            let at = self.serial(p);
            let waiting = self.waits_on(at);
            let Some(e) = self.peers.get_mut(p) else { continue };
            match e.silence.look(&look, waiting) {
                Verdict::Fine => {}
                Verdict::Probe => {
                    self.watch.probes += 1;
                    self.enqueue(p, 0, Out::Owned(Header::new(Kind::Ping).encode(), Vec::new()));
                }
                Verdict::Stalled => {
                    self.watch.stalled += 1;
                    self.failed.push((at, Cause::Stalled));
                }
            }
        }
        self.end_doomed(t, cx);
    }

    /// Whether anything of ours waits on the peer entry `at`.
    pub(super) fn waits_on(&self, at: (usize, u64)) -> bool {
        self.peers.get(at.0).is_some_and(|e| !e.queue.is_empty())
            || self.sends.iter().any(|(_, s)| s.peer == at)
            || self.rmas.iter().any(|(_, r)| r.peer == at)
            || self.atomics.iter().any(|(_, a)| a.peer == at)
            || self.pushes.iter().any(|(_, p)| p.peer == at)
    }
}
