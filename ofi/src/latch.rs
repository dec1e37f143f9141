//! The plug-in's own lock on data-path state (an endpoint's completion
//! router, the endpoints a CQ or counter drives): a mutex, or none for a
//! domain opened `FI_THREAD_DOMAIN`, as libfabric's util layer does
//! (`OFI_LOCK_NONE`).
//!
//! Under `FI_THREAD_DOMAIN` the application serialises every call into the
//! domain's objects (fi_domain(3)): Open MPI's `mtl ofi` asks for it unless
//! the job is `MPI_THREAD_MULTIPLE`. A poll then took six locked
//! instructions (two each for the CQ's endpoint list, the endpoint's
//! router and core's domain lock), which were most of an empty
//! `fi_cq_read`'s time (docs/PERFORMANCE.md). The plug-in starts no thread
//! of its own, so with the application's promise nothing else can be
//! inside; a second guard on one thread (re-entry, which a mutex would
//! deadlock on) is refused with a panic, which the C boundary turns into
//! an error.

use std::cell::{Cell, UnsafeCell};
use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, MutexGuard};

/// A value behind a mutex, or behind the application's promise.
pub(crate) struct Latch<T> {
    /// `None`: the domain is `FI_THREAD_DOMAIN`.
    mutex: Option<Mutex<()>>,
    /// Without the mutex: a guard is alive. Only read or written without
    /// the mutex, where the promise rules out a second thread.
    held: Cell<bool>,
    value: UnsafeCell<T>,
}

// SAFETY: with the mutex, `value` is reached only through a guard holding
// it, as `Mutex<T>`; without it (`FI_THREAD_DOMAIN`), the application
// serialises every call that can reach a guard (libfabric's contract for
// that level) and the plug-in has no thread of its own, so no two threads
// touch `value` or `held` at once; `held` refuses a second guard on one
// thread.
unsafe impl<T: Send> Sync for Latch<T> {}

impl<T> Latch<T> {
    /// `value` behind a mutex, or, `serial` (the domain is
    /// `FI_THREAD_DOMAIN`), behind nothing.
    pub(crate) fn new(value: T, serial: bool) -> Latch<T> {
        Latch {
            mutex: (!serial).then(|| Mutex::new(())),
            held: Cell::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// The value, for as long as the guard lives. A thread that panicked
    /// holding it left the value consistent between statements, as with
    /// the plug-in's other locks: it is used on.
    #[inline]
    pub(crate) fn lock(&self) -> LatchGuard<'_, T> {
        let mutex = match &self.mutex {
            Some(m) => Some(m.lock().unwrap_or_else(|p| p.into_inner())),
            None => {
                assert!(!self.held.replace(true), "a plug-in lock taken again while held");
                None
            }
        };
        LatchGuard { latch: self, mutex }
    }

    /// The value, through exclusive access (no lock needed).
    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }
}

/// Access to a [`Latch`]'s value.
pub(crate) struct LatchGuard<'a, T> {
    latch: &'a Latch<T>,
    /// Held until the guard drops (with the mutex).
    mutex: Option<MutexGuard<'a, ()>>,
}

impl<T> Deref for LatchGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: the guard holds the mutex or, without it, is the only one
        // (`held`, the application's promise): nothing else reaches the value.
        unsafe { &*self.latch.value.get() }
    }
}

impl<T> DerefMut for LatchGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this the guard's only
        // live borrow.
        unsafe { &mut *self.latch.value.get() }
    }
}

impl<T> Drop for LatchGuard<'_, T> {
    fn drop(&mut self) {
        if self.mutex.is_none() {
            self.latch.held.set(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_modes_give_the_value_and_serial_mode_refuses_a_second_guard() {
        for serial in [false, true] {
            let l = Latch::new(vec![1], serial);
            l.lock().push(2);
            assert_eq!(*l.lock(), [1, 2]);
        }
        let l = Latch::new(0u32, true);
        let _g = l.lock();
        let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(l.lock())));
        assert!(again.is_err(), "a second guard while one lives");
    }
}
