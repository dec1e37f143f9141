//! Revocation of native RMA grants. Over cross-memory attach the initiator
//! copies straight into (or out of) the target's registered region, and no
//! device invalidates a key when the target deregisters it, as verbs' does
//! with an rkey. So each side of a segment has a fence as a target: an
//! epoch word the target writes and a busy word the initiator writes.
//!
//! - A grant carries its domain's epoch at the time ([`Fences::epoch`],
//!   through the domain's `grant_stamp`), taken under the domain lock with
//!   the key check.
//! - The initiator sets busy, then reads the target's epoch, and copies
//!   only if it still equals the grant's; it clears busy after the copy
//!   (`Fence::guarded`). Otherwise the operation goes in frames, where
//!   the target checks the key again.
//! - A deregistration of a region peers may reach ([`Fences::revoke`])
//!   advances the domain's epoch, writes it into the target fence of every
//!   segment of the domain's endpoints, then waits for each busy word to
//!   clear (or its peer to be gone).
//!
//! Both sides store before they load, sequentially consistent, so either
//! the initiator sees the new epoch or the target sees busy and waits for
//! the copy to end: once `revoke` returns, no stale grant can write into
//! or read from memory the target no longer registered. The epoch is one
//! per domain: any such deregistration revokes every grant of the domain,
//! and the initiators' next operations are granted again after one in
//! frames.
//!
//! This guards against races, not against a hostile peer: a peer that may
//! attach to this process's memory may write anywhere in it anyway. A peer
//! that holds busy (stopped mid-copy) holds up a deregistration until it
//! resumes or dies; that is logged, rate limited.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::layout;
use crate::sys;

/// A domain's grant epoch and the target fences of its endpoints'
/// segments.
#[derive(Debug)]
pub struct Fences {
    /// The epoch grants carry now; 0 is never one, so a fence not yet
    /// registered (all zero) matches no grant.
    epoch: AtomicU64,
    registry: Mutex<Registry>,
}

#[derive(Debug, Default)]
struct Registry {
    next: u64,
    entries: Vec<Entry>,
}

#[derive(Debug)]
struct Entry {
    id: u64,
    fence: Fence,
    pid: libc::pid_t,
}

/// Busy-word checks before a revocation starts sleeping between them.
const SPINS: u32 = 1000;
/// Sleep between checks of a busy word held long.
const NAP: Duration = Duration::from_micros(50);
/// A busy word held this long is logged.
const SLOW: Duration = Duration::from_secs(1);

impl Fences {
    /// A domain's, at epoch 1 with no fences.
    pub fn new() -> Arc<Fences> {
        Arc::new(Fences {
            epoch: AtomicU64::new(1),
            registry: Mutex::default(),
        })
    }

    /// The epoch a grant made now carries.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(SeqCst)
    }

    /// Revokes every grant made so far: advances the epoch, publishes it
    /// in every target fence and waits for copies in flight. Called by a
    /// deregistration of a region with remote access, before it returns.
    pub fn revoke(&self) {
        let reg = self.lock();
        let e = self.epoch.fetch_add(1, SeqCst) + 1;
        for en in &reg.entries {
            en.fence.epoch().store(e, SeqCst);
        }
        for en in &reg.entries {
            wait_idle(en);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Waits until `en`'s initiator is not copying (or is gone).
fn wait_idle(en: &Entry) {
    let busy = en.fence.busy();
    let mut spins = 0;
    let mut since = None;
    while busy.load(SeqCst) != 0 {
        if spins < SPINS {
            spins += 1;
            std::hint::spin_loop();
            continue;
        }
        if sys::process_gone(en.pid) {
            return;
        }
        let t0 = *since.get_or_insert_with(Instant::now);
        if t0.elapsed() >= SLOW {
            xfer_core::warn_limited!(pid = en.pid, "shm: a deregistration waits for a peer's copy into it");
        }
        std::thread::sleep(NAP);
    }
}

/// One side's fence in a mapped segment: its epoch and busy words.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fence {
    epoch: NonNull<AtomicU64>,
    busy: NonNull<AtomicU64>,
}

// SAFETY: the words are atomics in a shared mapping, meant to be touched
// from any thread (and process); the owner of the mapping keeps it mapped
// while a `Fence` points into it.
unsafe impl Send for Fence {}

impl Fence {
    /// The fence of the side that writes ring `r`, in the mapping at `base`.
    ///
    /// # Safety
    /// `base` must be a live segment mapping, page aligned, that outlives
    /// every use of the fence.
    pub(crate) unsafe fn at(base: *mut u8, r: usize) -> Fence {
        let f = layout::fence(r);
        // SAFETY: the fence offsets are 8-byte aligned and inside the
        // header page of the mapping, per the caller.
        unsafe {
            Fence {
                epoch: NonNull::new_unchecked(base.add(f + layout::FENCE_EPOCH).cast()),
                busy: NonNull::new_unchecked(base.add(f + layout::FENCE_BUSY).cast()),
            }
        }
    }

    fn epoch(&self) -> &AtomicU64 {
        // SAFETY: aligned, inside a mapping that outlives the fence (`at`).
        unsafe { self.epoch.as_ref() }
    }

    fn busy(&self) -> &AtomicU64 {
        // SAFETY: as for `epoch`.
        unsafe { self.busy.as_ref() }
    }

    /// As the initiator, towards the target owning this fence: runs `copy`
    /// if the target's epoch is still `stamp`, with busy held around it so
    /// that a revocation waits for it; `None` when the grant is stale.
    pub(crate) fn guarded<R>(&self, stamp: u64, copy: impl FnOnce() -> R) -> Option<R> {
        if stamp == 0 {
            return None;
        }
        self.busy().store(1, SeqCst);
        if self.epoch().load(SeqCst) != stamp {
            self.busy().store(0, SeqCst);
            return None;
        }
        let r = copy();
        self.busy().store(0, SeqCst);
        Some(r)
    }

    /// As the target owning this fence: enters it in the registry with the
    /// peer's pid and publishes the current epoch (until then no grant
    /// matches it). Removed when the returned registration drops.
    pub(crate) fn register(self, fences: &Arc<Fences>, pid: libc::pid_t) -> Registration {
        let mut reg = fences.lock();
        self.epoch().store(fences.epoch(), SeqCst);
        reg.next += 1;
        let id = reg.next;
        reg.entries.push(Entry { id, fence: self, pid });
        Registration {
            fences: fences.clone(),
            id,
        }
    }
}

/// A target fence in its domain's registry; it leaves it on drop, which
/// must come before its mapping is unmapped.
#[derive(Debug)]
pub(crate) struct Registration {
    fences: Arc<Fences>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.fences.lock().entries.retain(|en| en.id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    fn words() -> Box<[AtomicU64]> {
        (0..4096 / 8).map(|_| AtomicU64::new(0)).collect()
    }

    fn me() -> libc::pid_t {
        std::process::id() as libc::pid_t
    }

    #[test]
    fn a_revocation_makes_an_older_stamp_stale() {
        let fences = Fences::new();
        let w = words();
        // SAFETY: the boxed words stand in for a page that outlives `f`.
        let f = unsafe { Fence::at(w.as_ptr() as *mut u8, 0) };
        assert_eq!(
            f.guarded(fences.epoch(), || 7),
            None,
            "an unregistered fence matches no grant"
        );
        let r = f.register(&fences, me());
        let stamp = fences.epoch();
        assert_eq!(f.guarded(stamp, || 7), Some(7));
        fences.revoke();
        assert_eq!(f.guarded(stamp, || 7), None);
        assert_eq!(f.guarded(fences.epoch(), || 8), Some(8));
        assert_eq!(f.guarded(0, || 9), None);
        drop(r);
    }

    #[test]
    fn a_revocation_waits_for_a_copy_in_flight() {
        let fences = Fences::new();
        let w = words();
        // SAFETY: as above.
        let f = unsafe { Fence::at(w.as_ptr() as *mut u8, 1) };
        let r = f.register(&fences, me());
        let stamp = fences.epoch();
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let (copied, revoked) = (AtomicBool::new(false), AtomicBool::new(false));
        std::thread::scope(|s| {
            let copying = &copied;
            s.spawn(move || {
                f.guarded(stamp, || {
                    started_tx.send(()).unwrap();
                    go_rx.recv().unwrap();
                    copying.store(true, SeqCst);
                })
            });
            started_rx.recv().unwrap();
            s.spawn(|| {
                fences.revoke();
                revoked.store(true, SeqCst);
                assert!(copied.load(SeqCst), "the revocation returned during the copy");
            });
            // Once the new epoch is out, the revocation must still be
            // waiting for the copy (watched for a while: it cannot end).
            let t0 = Instant::now();
            while f.epoch().load(SeqCst) == stamp {
                assert!(t0.elapsed() < Duration::from_secs(10), "no revocation");
                std::thread::yield_now();
            }
            let t1 = Instant::now();
            while t1.elapsed() < Duration::from_millis(100) {
                assert!(!revoked.load(SeqCst), "the revocation did not wait for the copy");
                std::thread::yield_now();
            }
            go_tx.send(()).unwrap();
        });
        assert!(revoked.load(SeqCst));
        drop(r);
    }
}
