//! Device atomics in their place among a peer's RMA and atomics. The
//! initiator's device does a granted atomic without the target's engine,
//! so it would overtake RMA and atomics to that peer still in frames (the
//! target's engine may yet apply them), and frames posted after it could
//! overtake it (the transport may hold a device atomic back for its
//! initiator depth while later sends go). So the two never overlap per
//! peer: a device atomic waits until that peer's frames of RMA and atomics
//! are answered, and RMA and atomics in frames wait while that peer has a
//! device atomic outstanding (or an atomic still asking for its grant,
//! which the device then does); whatever waits keeps its place, in the
//! order it was posted. Each peer then sees its initiator's RMA and
//! atomics applied in posting order, as when the target's engine applies
//! all of them. Inject writes, which have no operation to hold, are
//! refused with `Again` meanwhile, as libfabric lets `fi_inject_write`.

use crate::provider::Ctx;

use super::super::transport::Transport;
use super::device::Device;
use super::State;

/// An operation held for its place among its peer's.
pub(super) enum Held {
    /// A granted atomic whose device operation waits (its token).
    Device(u64),
    /// An RMA in frames (its token).
    Rma(u64),
    /// An atomic in frames (its token), asking for a grant or not.
    Atomic(u64, bool),
}

impl State {
    /// Whether a device atomic to peer `at` must wait: RMA or atomics to
    /// it in frames unanswered, or anything held for it.
    pub(super) fn device_waits(&self, at: (usize, u64)) -> bool {
        self.unordered(at) || self.held_back.iter().any(|&(p, _)| p == at)
    }

    /// Whether RMA or an atomic to peer `at` in frames must wait: a device
    /// atomic to it outstanding (or an atomic asking for its grant), or
    /// anything held for it.
    pub(super) fn frames_wait(&self, at: (usize, u64)) -> bool {
        self.held_back.iter().any(|&(p, _)| p == at)
            || self
                .atomics
                .iter()
                .any(|(_, a)| a.peer == at && (a.device.is_some() || (a.asked && !a.held)))
    }

    /// A granted atomic `token` to peer `at` that must wait: held, or,
    /// when only inject writes are in its way (no answer will come that
    /// shows them applied), asked for again in a frame, whose answer
    /// (another grant, nothing applied) comes after them.
    pub(super) fn device_wait<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>, at: (usize, u64), token: u64) {
        let inject_only =
            self.injected.contains(&at) && !self.framed_pending(at) && !self.held_back.iter().any(|&(p, _)| p == at);
        let key = self.atomics.key_of(token).filter(|_| inject_only);
        let Some(key) = key else {
            return self.hold_back(at, Held::Device(token));
        };
        let tx = &mut self.atomics[key];
        tx.device = None;
        tx.asked = true;
        self.send_atomic(at.0, key, true);
        self.posted(t, cx, at.0);
    }

    /// Holds `op` for peer `at`, behind what it holds already.
    pub(super) fn hold_back(&mut self, at: (usize, u64), op: Held) {
        match op {
            Held::Device(_) => {}
            Held::Rma(token) => {
                if let Some(k) = self.rmas.key_of(token) {
                    self.rmas[k].held = true;
                }
            }
            Held::Atomic(token, _) => {
                if let Some(k) = self.atomics.key_of(token) {
                    self.atomics[k].held = true;
                }
            }
        }
        self.held_back.push((at, op));
    }

    /// A held atomic that would have asked for its region, which has been
    /// granted meanwhile: the device's now, without asking again.
    fn promote(&mut self, at: (usize, u64), op: Held) -> Held {
        let Held::Atomic(token, true) = op else { return op };
        let Some(key) = self.atomics.key_of(token) else {
            return op;
        };
        let Some(word) = self.granted_word(at, &self.atomics[key].op) else {
            return op;
        };
        let tx = &mut self.atomics[key];
        tx.device = Some(Device::new(word, &tx.op));
        (tx.asked, tx.held) = (false, false);
        Held::Device(token)
    }

    /// Holds `op` for peer `at` before what it holds already (it was
    /// posted before them).
    pub(super) fn hold_first(&mut self, at: (usize, u64), op: Held) {
        self.held_back.insert(0, (at, op));
    }

    /// Lets held operations go, in order, as far as each peer's allow
    /// (after progress: answers and device completions came in).
    pub(super) fn release_held<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>) {
        let mut blocked: Vec<(usize, u64)> = Vec::new();
        for (at, op) in std::mem::take(&mut self.held_back) {
            let op = self.promote(at, op);
            let waits = blocked.contains(&at)
                || match op {
                    Held::Device(_) => self.framed_pending(at),
                    Held::Rma(_) | Held::Atomic(..) => self.frames_wait(at),
                };
            if waits {
                if !blocked.contains(&at) {
                    blocked.push(at);
                }
                self.held_back.push((at, op));
                continue;
            }
            match op {
                Held::Device(token) if self.injected.contains(&at) => self.device_wait(t, cx, at, token),
                Held::Device(token) => self.device_step(t, cx, token),
                Held::Rma(token) => {
                    if let Some(key) = self.rmas.key_of(token) {
                        self.rmas[key].held = false;
                        self.send_rma(t, cx, at.0, key);
                    }
                }
                Held::Atomic(token, ask) => {
                    if let Some(key) = self.atomics.key_of(token) {
                        self.atomics[key].held = false;
                        self.send_atomic(at.0, key, ask);
                        self.posted(t, cx, at.0);
                    }
                }
            }
        }
    }
}
