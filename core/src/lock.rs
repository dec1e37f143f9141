//! The domain's lock, in one of three [`Threading`] modes.
//!
//! `Safe` (the default) is a mutex: any thread may call, one at a time.
//! `Single` is UCX's `UCS_THREAD_MODE_SINGLE` made safe: only the thread
//! that opened the domain may call into it, checked on every call by
//! comparing a thread-local's address, and re-entry is refused by a plain
//! flag. `Serialized` is libfabric's `FI_THREAD_DOMAIN`: any thread, the
//! caller guaranteeing that calls never overlap, so only re-entry is
//! checked; safe code cannot open it (`xfer::open_serialized` is
//! `unsafe`). No atomic read-modify-write is left on the data path: on the
//! machines measured a locked instruction costs 20-40 ns, and a mutex
//! takes two of them per call (lock and unlock), three calls per message
//! (poll, receive, send). `Safe` mode's mutex is a futex word (free, held,
//! held with sleepers) with poisoning, as `std::sync::Mutex`, so that its
//! guard is one pointer that knows its mode.

use std::cell::{Cell, UnsafeCell};
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};

use crate::error::{Error, Result};

/// Which threads may call into a domain (`XFER_THREADING`,
/// [`DomainAttr::threading`](crate::DomainAttr::threading)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Threading {
    /// Any thread, one call at a time under the domain's mutex (libfabric's
    /// `FI_THREAD_SAFE`). The default.
    #[default]
    Safe,
    /// Only the thread that opened the domain (UCX's
    /// `UCS_THREAD_MODE_SINGLE`; what `ucx_perftest` runs with): no lock is
    /// taken. A call from another thread fails with
    /// [`Error::InvalidArgument`]; a handle dropped on another thread
    /// leaves its resources (and a registered region its memory) in place
    /// until the domain closes, with a warning.
    Single,
    /// Any thread, one call at a time as the caller guarantees, with no
    /// lock taken (libfabric's `FI_THREAD_DOMAIN`; the plug-in's choice for
    /// a domain opened so). Only the `unsafe` `xfer::open_serialized`
    /// opens it; the safe opens refuse it with [`Error::InvalidArgument`],
    /// and `XFER_THREADING` does not name it.
    Serialized,
}

impl Threading {
    /// [`Error::InvalidArgument`] for `Serialized`, which only the caller
    /// of an `unsafe` open may ask for; `Ok` for the others.
    #[doc(hidden)]
    pub fn safe_to_open(self) -> Result<()> {
        match self {
            Threading::Serialized => Err(Error::InvalidArgument(
                "threading serialized: only the unsafe open_serialized opens it",
            )),
            Threading::Safe | Threading::Single => Ok(()),
        }
    }
}

impl std::str::FromStr for Threading {
    type Err = Error;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s.trim() {
            "" | "safe" => Ok(Threading::Safe),
            "single" => Ok(Threading::Single),
            _ => Err(Error::InvalidSetting(
                format!("threading: {s:?} is neither safe nor single").into(),
            )),
        }
    }
}

impl std::fmt::Display for Threading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Threading::Safe => "safe",
            Threading::Single => "single",
            Threading::Serialized => "serialized",
        })
    }
}

thread_local! {
    /// Its address names the calling thread among the live ones.
    static THREAD: u8 = const { 0 };
}

/// The calling thread's identity: distinct among live threads (a thread
/// started after the owner exited may reuse it, and is then the only one).
#[inline(always)]
fn me() -> usize {
    THREAD.with(|t| t as *const u8 as usize)
}

/// [`DomainLock::owner`] of a `Serialized` lock: no thread's identity (an
/// address `me` never returns).
const SERIALIZED: usize = usize::MAX;

/// A value behind the domain's lock.
pub(crate) struct DomainLock<T> {
    /// The owning thread in `Single` mode; 0 in `Safe` mode; [`SERIALIZED`].
    owner: usize,
    /// `Safe` mode's mutex: 0 free, 1 held, 2 held with threads waiting.
    state: AtomicU32,
    /// A call panicked inside (`Safe` mode): every later one is refused.
    poisoned: AtomicBool,
    /// A `Single`-mode guard is out (re-entry, e.g. from a drop inside a call).
    busy: Cell<bool>,
    value: UnsafeCell<T>,
}

// SAFETY: `value` (and `busy`) are reached only through `lock`, which in
// `Safe` mode holds the mutex for the guard's life, in `Single` mode
// admits only the owning thread, one guard at a time, and in `Serialized`
// mode one guard at a time on the promise of whoever opened it (an
// `unsafe` constructor) that no two calls overlap; `T: Send` lets the
// value be used, and finally dropped, by a thread other than its creator.
unsafe impl<T: Send> Sync for DomainLock<T> {}
// SAFETY: as above; moving the lock moves the value.
unsafe impl<T: Send> Send for DomainLock<T> {}

impl<T> DomainLock<T> {
    /// `value` behind a lock of mode `mode`; a `Single` one belongs to the
    /// calling thread.
    pub(crate) fn new(value: T, mode: Threading) -> DomainLock<T> {
        DomainLock {
            owner: match mode {
                Threading::Safe => 0,
                Threading::Single => me(),
                Threading::Serialized => SERIALIZED,
            },
            state: AtomicU32::new(0),
            poisoned: AtomicBool::new(false),
            busy: Cell::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// The mode it was made in.
    pub(crate) fn mode(&self) -> Threading {
        match self.owner {
            0 => Threading::Safe,
            SERIALIZED => Threading::Serialized,
            _ => Threading::Single,
        }
    }

    /// The value, for the guard's life.
    #[inline(always)]
    pub(crate) fn lock(&self) -> Result<Guard<'_, T>> {
        if self.owner == 0 {
            if self.state.compare_exchange(0, 1, Acquire, Relaxed).is_err() {
                self.wait_for_mutex();
            }
            let g = Guard {
                lock: self,
                _here: PhantomData,
            };
            if self.poisoned.load(Relaxed) {
                return Err(Error::Internal("domain lock poisoned by an earlier panic"));
            }
            return Ok(g);
        }
        if self.owner != SERIALIZED && self.owner != me() {
            return Err(Error::InvalidArgument(
                "a domain opened with threading=single called from another thread",
            ));
        }
        if self.busy.replace(true) {
            return Err(Error::Internal("a lock-free domain re-entered from inside a call"));
        }
        Ok(Guard {
            lock: self,
            _here: PhantomData,
        })
    }

    /// The mutex is held: marks it contended and sleeps until it is free
    /// (a futex wait on the state word; the holder's unlock wakes one).
    #[cold]
    fn wait_for_mutex(&self) {
        for _ in 0..100 {
            std::hint::spin_loop();
            if self.state.load(Relaxed) == 0 && self.state.compare_exchange(0, 1, Acquire, Relaxed).is_ok() {
                return;
            }
        }
        while self.state.swap(2, Acquire) != 0 {
            // Returns at once unless the word still holds 2; spurious
            // returns loop.
            self.futex(libc::FUTEX_WAIT, 2);
        }
    }

    /// Frees the mutex, waking a waiter if one sleeps.
    #[inline(always)]
    fn unlock(&self) {
        if self.state.swap(0, Release) == 2 {
            self.wake_one();
        }
    }

    #[cold]
    fn wake_one(&self) {
        self.futex(libc::FUTEX_WAKE, 1);
    }

    /// `futex(2)` operation `op` (private) on the state word with `val`
    /// (FUTEX_WAIT: the value expected, no timeout; FUTEX_WAKE: how many).
    fn futex(&self, op: libc::c_int, val: u32) {
        // SAFETY: the word is a live, aligned u32 for the call; a null
        // timeout waits without one.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.state.as_ptr(),
                op | libc::FUTEX_PRIVATE_FLAG,
                val,
                std::ptr::null::<libc::timespec>(),
            );
        }
    }
}

/// Access to the value behind a [`DomainLock`]; leaving it unlocks.
pub(crate) struct Guard<'a, T> {
    lock: &'a DomainLock<T>,
    /// Not `Send`: a `Single` domain's guard stays on its thread.
    _here: PhantomData<*const ()>,
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;

    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: the guard is the only access to the value while it lives
        // (`DomainLock::lock`), and the value outlives it.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for Guard<'_, T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this borrow unique.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for Guard<'_, T> {
    #[inline(always)]
    fn drop(&mut self) {
        if self.lock.owner != 0 {
            self.lock.busy.set(false);
            return;
        }
        if std::thread::panicking() {
            self.lock.poisoned.store(true, Relaxed);
        }
        self.lock.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_mode_serialises_threads() {
        let l = std::sync::Arc::new(DomainLock::new(0u64, Threading::Safe));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        *l.lock().expect("lock") += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        assert_eq!(*l.lock().expect("lock"), 40_000);
        assert_eq!(l.mode(), Threading::Safe);
    }

    #[test]
    fn a_panic_inside_poisons_a_safe_lock() {
        let l = std::sync::Arc::new(DomainLock::new(1u64, Threading::Safe));
        let inside = l.clone();
        let r = std::thread::spawn(move || {
            let _g = inside.lock().expect("lock");
            panic!("a provider bug");
        })
        .join();
        assert!(r.is_err());
        assert!(
            matches!(l.lock(), Err(Error::Internal(_))),
            "poisoned, and still unlocked"
        );
        assert!(matches!(l.lock(), Err(Error::Internal(_))), "refused every time");
    }

    #[test]
    fn single_mode_refuses_other_threads_and_reentry() {
        let l = std::sync::Arc::new(DomainLock::new(7u64, Threading::Single));
        {
            let g = l.lock().expect("the owner locks");
            assert_eq!(*g, 7);
            assert!(
                matches!(l.lock(), Err(Error::Internal(_))),
                "a second guard on the owner's thread is re-entry"
            );
        }
        *l.lock().expect("free again once the guard dropped") += 1;
        let other = l.clone();
        let r = std::thread::spawn(move || other.lock().map(|g| *g).err())
            .join()
            .expect("thread");
        assert!(matches!(r, Some(Error::InvalidArgument(_))), "{r:?}");
        assert_eq!(*l.lock().expect("lock"), 8);
        assert_eq!(l.mode(), Threading::Single);
    }

    #[test]
    fn threading_parses_and_prints() {
        for m in [Threading::Safe, Threading::Single] {
            assert_eq!(m.to_string().parse::<Threading>().expect("parse"), m);
        }
        assert_eq!("".parse::<Threading>().expect("empty"), Threading::Safe);
        assert!("multi".parse::<Threading>().is_err());
        assert!(
            "serialized".parse::<Threading>().is_err(),
            "not from text: it needs unsafe"
        );
    }

    #[test]
    fn serialized_mode_admits_any_thread_one_at_a_time_and_refuses_reentry() {
        let l = std::sync::Arc::new(DomainLock::new(7u64, Threading::Serialized));
        {
            let g = l.lock().expect("locks");
            assert_eq!(*g, 7);
            assert!(matches!(l.lock(), Err(Error::Internal(_))), "re-entry");
        }
        let other = l.clone();
        std::thread::spawn(move || *other.lock().expect("another thread, after") += 1)
            .join()
            .expect("thread");
        assert_eq!(*l.lock().expect("lock"), 8);
        assert_eq!(l.mode(), Threading::Serialized);
    }
}
