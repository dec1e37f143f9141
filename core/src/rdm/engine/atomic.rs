//! Remote atomics over any transport: the initiator sends one `Atomic`
//! frame (key, address, operand, compare value, and the datatype, kind and
//! whether it fetches packed in `off`); the target checks the kind and
//! datatype, the element's alignment, and key, bounds and access through its
//! key table (remote write for a kind that changes the element, remote read
//! for one that fetches), applies it with the CPU's atomic instructions
//! (`crate::atomic::apply`) and answers `AtomicDone` with the status and the
//! old value. Nothing is touched when a check fails.
//!
//! An atomic that neither fetches nor asks for delivery
//! ([`AtomicOp::answered`]) travels with token 0 and completes once its
//! frame is written (`Out::Atomic`), behind everything queued before it to
//! that peer, so a later operation to the same peer is applied after it.
//! Its target answers only a refusal: `AtomicDone` with token 0, the status,
//! and the key and address refused, which the initiator counts
//! (`atomics_refused_after_completion`) and logs, rate limited.

use crate::addr::Address;
use crate::atomic::{apply, AtomicKind, AtomicOp, Datatype};
use crate::complete;
use crate::error::Error;
use crate::mr::keys::{status, status_error, status_of};
use crate::mr::Access;
use crate::provider::Ctx;

use super::super::transport::Transport;
use super::device::Device;
use super::order::Held;
use super::out::Out;
use super::wire::{self, Header, Kind};
use super::State;

/// An initiator's atomic waiting for its answer.
pub(super) struct AtomicTx {
    pub(super) op: AtomicOp,
    pub(super) peer: (usize, u64),
    /// It goes by the initiator's device (the target granted its region).
    pub(super) device: Option<Device>,
    /// Its frame asks the target for a grant.
    pub(super) asked: bool,
    /// Held behind a device atomic to its peer (`order.rs`): not sent yet.
    pub(super) held: bool,
}

/// The `Atomic` frame of `op`, without its token.
fn atomic_header(op: &AtomicOp) -> Header {
    let mut h = Header::new(Kind::Atomic);
    h.tag = op.key;
    h.addr = op.addr;
    h.data = op.operand;
    h.len = op.compare;
    h.off = pack(op);
    h
}

/// The `off` field of an `Atomic` frame: datatype, kind, fetch.
fn pack(op: &AtomicOp) -> u64 {
    u64::from(op.dt as u8) | u64::from(op.kind as u8) << 8 | u64::from(op.fetch) << 16
}

fn unpack(off: u64) -> Option<(Datatype, AtomicKind, bool)> {
    if off >> 17 != 0 {
        return None;
    }
    let dt = Datatype::from_u8(off as u8)?;
    let kind = AtomicKind::from_u8((off >> 8) as u8)?;
    dt.allows(kind).then_some((dt, kind, off >> 16 != 0))
}

impl State {
    /// Starts atomic `op` to its peer, named `name` in the address vector.
    pub(super) fn atomic<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>, op: AtomicOp, name: &Address) {
        let p = match self.peer_named(t, op.peer, name) {
            Ok(p) => p,
            Err(e) => return complete::atomic(&mut cx.cq, op, Err(e)),
        };
        let at = self.serial(p);
        if let Some(word) = self.granted_word(at, &op) {
            let device = Some(Device::new(word, &op));
            let key = self.atomics.insert(AtomicTx {
                op,
                peer: at,
                device,
                asked: false,
                held: false,
            });
            let token = self.atomics.token(key);
            if self.device_waits(at) {
                return self.device_wait(t, cx, at, token);
            }
            return self.device_step(t, cx, token);
        }
        // Asks for the grant first: applied by the target, this one could
        // interleave with another peer's device atomic on the element.
        let ask = cx.domain.device_atomics() && !self.frames_only.contains(&at);
        let wait = self.frames_wait(at);
        if op.answered() || ask || wait {
            // One held gets a token even at the inject level: it completes
            // with its answer, which a frame sent later cannot do without.
            let key = self.atomics.insert(AtomicTx {
                op,
                peer: at,
                device: None,
                asked: ask,
                held: false,
            });
            if wait {
                return self.hold_back(at, Held::Atomic(self.atomics.token(key), ask));
            }
            self.send_atomic(p, key, ask);
        } else {
            let h = atomic_header(&op);
            self.enqueue(p, 0, Out::Atomic(h.encode(), op));
        }
        self.posted(t, cx, p);
    }

    /// Queues the frame of atomic `key` to peer `p`, asking for a grant
    /// with `ask`.
    pub(super) fn send_atomic(&mut self, p: usize, key: usize, ask: bool) {
        let mut h = atomic_header(&self.atomics[key].op);
        h.token = self.atomics.token(key);
        // Its answer follows every inject write before it.
        let at = self.atomics[key].peer;
        self.injected.retain(|&q| q != at);
        if ask {
            h.flags |= wire::NATIVE;
        }
        self.enqueue(p, 0, Out::Owned(h.encode(), Vec::new()));
    }

    /// A target's atomic request from peer `p`: checked, then granted to
    /// the peer's device when it asks and the region is the device's, else
    /// applied; answered.
    pub(super) fn on_atomic(&mut self, cx: &mut Ctx<'_>, p: usize, h: Header) {
        let mut done = Header::new(Kind::AtomicDone);
        done.token = h.token;
        let result = match unpack(h.off) {
            None => Err(status::BAD_ATOMIC),
            Some((dt, _, _)) if !h.addr.is_multiple_of(dt.size() as u64) => Err(status::MISALIGNED),
            Some((dt, kind, fetch)) => {
                let mut access = Access::empty();
                if kind.writes() {
                    access |= Access::REMOTE_WRITE;
                }
                if fetch || !kind.writes() {
                    access |= Access::REMOTE_READ;
                }
                match cx.domain.remote_target(h.tag, h.addr, dt.size() as u64, access) {
                    Ok(_) if h.flags & wire::NATIVE != 0 && h.token != 0 && self.grant_atomic(cx, &h, &mut done) => {
                        return self.enqueue(p, 0, Out::Owned(done.encode(), Vec::new()));
                    }
                    // SAFETY: the key table vouched for `dt.size()` bytes at
                    // `ptr` with the access the kind needs, live while the
                    // domain lock is held (this whole call); the address is
                    // aligned to the size (checked above).
                    Ok(ptr) => Ok(unsafe { apply(ptr, kind, dt, h.data, h.len) }),
                    Err(e) => Err(status_of(&e)),
                }
            }
        };
        match result {
            // Its initiator has completed it already and waits for nothing.
            Ok(_) if h.token == 0 => return,
            Ok(old) => done.data = old,
            Err(code) => {
                tracing::debug!(key = h.tag, addr = h.addr, status = code, "remote atomic refused");
                done.status = code as u32;
                if h.token == 0 {
                    // Names what was refused, for the initiator's log.
                    (done.tag, done.addr) = (h.tag, h.addr);
                }
            }
        }
        self.enqueue(p, 0, Out::Owned(done.encode(), Vec::new()));
    }

    /// An initiator's answer: the atomic completes with the old value or
    /// the target's refusal.
    pub(super) fn on_atomic_done(&mut self, cx: &mut Ctx<'_>, at: (usize, u64), h: Header) -> Result<(), &'static str> {
        if h.token == 0 {
            return self.refused_after_completion(at, h);
        }
        let key = self.atomics.key_of(h.token).filter(|&k| self.atomics[k].peer == at);
        let key = key.ok_or("atomic answer for no atomic waiting for one")?;
        if h.flags & wire::NATIVE != 0 {
            return self.atomic_granted(at, key, h);
        }
        if self.atomics[key].device.is_some() {
            return Err("an atomic answer for an atomic on the device");
        }
        let tx = self.atomics.remove(key);
        let result = match u64::from(h.status) {
            status::OK => Ok(h.data),
            c if c <= status::ATOMIC_MAX => Err(status_error(c)),
            _ => Err(Error::Protocol("unknown atomic status")),
        };
        complete::atomic(&mut cx.cq, tx.op, result);
        Ok(())
    }

    /// A target's refusal of an atomic that completed when it was sent: too
    /// late for its completion, so counted and logged.
    fn refused_after_completion(&mut self, at: (usize, u64), h: Header) -> Result<(), &'static str> {
        let code = u64::from(h.status);
        if code == status::OK || code > status::ATOMIC_MAX {
            return Err("atomic answer for no atomic waiting for one");
        }
        self.stats.atomics_refused_after_completion += 1;
        crate::warn_limited!(
            peer = at.0,
            key = h.tag,
            addr = h.addr,
            error = %status_error(code),
            "the target refused a remote atomic that had completed when sent (ask for delivery completion to see it in the completion)"
        );
        Ok(())
    }
}
