//! Finding out that cached memory went away: the memory monitors.
//!
//! A cached registration names virtual addresses. If the program frees the
//! buffer and the allocator gives the pages back to the OS (`munmap`, a `brk`
//! trim, `madvise(MADV_DONTNEED)`), a later buffer at the same address is
//! different memory: a verbs MR still pins the old pages, so RDMA would move
//! the wrong bytes without any error. Every cached entry must therefore be
//! dropped before a lookup could return it for the new memory.
//! [`MrCache`](super::MrCache) subscribes each cached span with a
//! [`Monitor`] and applies the monitor's reports at the start of every
//! lookup and release.
//!
//! # The mechanism: userfaultfd non-cooperative events ([`UffdMonitor`])
//!
//! Options considered:
//! - *Intercepting `munmap`/`madvise`/`brk`* (UCX's memory hooks, libfabric's
//!   memhooks): glibc calls its internal `__munmap` from `free`, which symbol
//!   interposition never sees, so UCX patches machine code at run time. Too
//!   fragile for a library and impossible to test honestly.
//! - *Validating on every hit* (e.g. `mincore`, `/proc/self/pagemap`): a
//!   system call per hit (microseconds, against a 100 ns budget), and it
//!   cannot tell new pages from old ones anyway.
//! - *userfaultfd* with `UFFD_FEATURE_EVENT_UNMAP | EVENT_REMOVE |
//!   EVENT_REMAP` (libfabric's default monitor): the kernel reports
//!   `munmap`, `mremap` and `madvise(DONTNEED/REMOVE/FREE)` of registered
//!   ranges, whoever calls them. Chosen.
//!
//! The ranges are registered in **write-protect mode** without ever
//! write-protecting a page. Events are delivered for any registered VMA
//! whatever its mode, and in WP mode no page fault is ever routed to us, so
//! the program's own accesses are never slowed down. (`MISSING` mode would
//! stall every first touch of a page until a handler answered with
//! `UFFDIO_ZEROPAGE`; `MINOR` mode exists only for shmem and hugetlbfs.)
//!
//! The kernel makes the unmapping thread wait, after the unmap and outside
//! `mmap_lock`, until someone *reads* the event from the descriptor
//! (`userfaultfd_event_wait_completion`). So one process-wide monitor thread
//! blocks in `poll` and reads events as they come; it is the only reader.
//! It reads under the lock `G` and only after setting every subscriber's
//! `dirty` flag, and it queues each event to every subscriber before
//! releasing `G`. Hence when `munmap` returns, the event has been read, so
//! `dirty` was already set; a lookup that happens after the `munmap` sees
//! `dirty`, takes `G` (waiting out a batch still being queued) and finds the
//! range in its queue. A lookup with nothing pending costs one atomic load.
//!
//! Deadlock freedom: a thread blocked in `munmap` waits for the monitor
//! thread, so the monitor thread must never wait for anything such a thread
//! could hold. It takes only `G` and the subscriber queues, and it never
//! allocates or frees (a `free` can itself `munmap` or `madvise` a
//! registered range and wait for the monitor thread). Everyone else holds
//! `G` only to copy fixed-size arrays: no allocation, no system call, no
//! logging. Subscribing and unsubscribing use a second lock (`C`) that the
//! monitor thread never takes.
//!
//! # What is covered (checked on Linux 6.18)
//!
//! - `munmap`, including glibc `free` of large (mmap'd) blocks;
//! - `brk` shrinking (glibc main-arena trim);
//! - `mmap(MAP_FIXED)` over cached memory (it unmaps first). An `mmap` at a
//!   cached address without an unmap in between is impossible:
//!   `MAP_FIXED_NOREPLACE` fails on mapped memory;
//! - `mremap` moving (a remap and an unmap event for the old range) and
//!   shrinking (an unmap event for the tail). Growing in place keeps the old
//!   pages, so the cached entries stay right;
//! - `madvise` with `MADV_DONTNEED`, `MADV_REMOVE` and `MADV_FREE` (one
//!   remove event; glibc trims its thread arenas with `MADV_DONTNEED`);
//! - private and shared anonymous memory and memfd/tmpfs mappings (shmem
//!   needs `UFFD_FEATURE_WP_HUGETLBFS_SHMEM`, Linux 5.19; hugetlbfs should
//!   work likewise but is untested).
//!
//! # What is not
//!
//! - Memory userfaultfd cannot register: regular-file mappings (including a
//!   program's initialised `.data`), System V shared memory (`shmat`),
//!   device (`VM_IO`/`VM_PFNMAP`) mappings, read-only file mappings, memory
//!   another userfaultfd of the process already watches. The subscription
//!   fails and the cache falls back to registering such memory for the one
//!   use, uncached ([`MrCacheStats::uncached`](super::MrCacheStats)).
//! - Page changes without an unmap or madvise of the mapping:
//!   `fallocate(PUNCH_HOLE)` or `ftruncate` on a memfd that is mapped,
//!   writes through another mapping of the same file. (Migration, KSM and
//!   THP collapse do not touch pinned pages, and a registrar that does not
//!   pin works on virtual addresses.)
//! - The kernel must support write-protect registration (x86-64 since 5.7;
//!   other architectures as they gain uffd-wp). Where `userfaultfd` is
//!   missing, forbidden (seccomp, `vm.unprivileged_userfaultfd=0` before
//!   Linux 5.11) or the probe fails, [`UffdMonitor::new`] fails and the cache
//!   caches nothing.
//! - After `fork` the child's registrations are not watched: a child's
//!   caches treat everything as unmapped and cache nothing more.
//!
//! # Costs
//!
//! - An unmap or madvise of memory that is cached takes a round trip to the
//!   monitor thread (about 21 µs against 5 µs for a plain `munmap` of a page
//!   on the 2-CPU test VM). Ranges are unregistered from userfaultfd when
//!   the last cache entry over them goes away, so memory no longer cached
//!   pays nothing.
//! - A subscription costs one `UFFDIO_REGISTER` and the unsubscription at
//!   eviction one `UFFDIO_UNREGISTER`, which split and merge VMAs: together
//!   5–15 µs on the test VM, on the miss path only, where a verbs
//!   registration costs as much or more.
//! - Registering part of a mapping splits its VMA in up to three. Keep the
//!   cache's `max_entries` well below half of `vm.max_map_count` (65530 by
//!   default), or `mmap` calls elsewhere in the program may fail.
//! - After `mremap` moves watched memory, the new location stays registered
//!   with userfaultfd (the kernel carries the registration along) until it
//!   is unmapped: no stale entry can result, its unmaps just pay the round
//!   trip.
//! - One thread, `xfer-uffd`, for the life of the process.
//!
//! # Other monitors
//!
//! [`ManualMonitor`] accepts every subscription and reports what its owner
//! tells it: for tests, and for programs that learn about freed memory some
//! other way (an MPI library's own allocator hooks). [`NoMonitor`] refuses
//! every subscription, which turns caching off.

use std::collections::{BTreeMap, VecDeque};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::error::{Error, Result};

/// A half-open address range `[start, end)` reported as gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// First address.
    pub start: usize,
    /// One past the last address.
    pub end: usize,
}

/// Reports copied out of a monitor: a fixed number of ranges, then an
/// overflow flag meaning "assume everything was unmapped".
///
/// Fixed-size so that moving reports around never allocates (see the module
/// docs for why the monitor thread must not).
#[derive(Debug, Clone)]
pub struct Events {
    spans: [Span; Events::CAPACITY],
    len: usize,
    overflow: bool,
}

impl Default for Events {
    fn default() -> Self {
        Self::new()
    }
}

impl Events {
    /// Ranges held before overflowing.
    pub const CAPACITY: usize = 64;

    /// No reports.
    pub const fn new() -> Self {
        Events {
            spans: [Span { start: 0, end: 0 }; Events::CAPACITY],
            len: 0,
            overflow: false,
        }
    }

    /// Records `[start, end)`; a range touching the previous one extends it.
    /// When full, sets the overflow flag instead.
    pub fn push(&mut self, start: usize, end: usize) {
        if start >= end || self.overflow {
            return;
        }
        if let Some(last) = self.spans[..self.len].last_mut() {
            if start <= last.end && end >= last.start {
                last.start = last.start.min(start);
                last.end = last.end.max(end);
                return;
            }
        }
        if self.len == Self::CAPACITY {
            self.overflow = true;
            return;
        }
        self.spans[self.len] = Span { start, end };
        self.len += 1;
    }

    /// Marks that reports were lost: every cached range must be treated as
    /// unmapped.
    pub fn set_overflow(&mut self) {
        self.overflow = true;
    }

    /// True if reports were lost.
    pub fn overflowed(&self) -> bool {
        self.overflow
    }

    /// The ranges recorded.
    pub fn spans(&self) -> &[Span] {
        &self.spans[..self.len]
    }

    /// True if there is nothing to apply.
    pub fn is_empty(&self) -> bool {
        self.len == 0 && !self.overflow
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.len = 0;
        self.overflow = false;
    }

    /// Moves everything into `out` (overflowing it if needed) and clears self.
    fn move_into(&mut self, out: &mut Events) {
        if self.overflow {
            out.overflow = true;
        }
        for s in &self.spans[..self.len] {
            out.push(s.start, s.end);
        }
        self.clear();
    }
}

/// Tells a cache when watched memory is unmapped or returned to the OS.
///
/// The cache calls `subscribe` for a span before caching a registration of
/// it and `unsubscribe` when the registration is gone; calls are balanced
/// and spans may overlap. At the start of every lookup the cache asks
/// `has_events` (which must be cheap: an atomic load) and, if true, calls
/// `drain` and drops every entry overlapping a reported span.
///
/// Correctness contract: a span unmapped before a thread calls the cache's
/// `lookup` must be visible to that lookup through `has_events`/`drain`.
pub trait Monitor: Send {
    /// A short name for logs and `xfer-info`.
    fn name(&self) -> &'static str;

    /// Starts watching `[addr, addr + len)`. An error means the span cannot
    /// be watched; the cache then does not keep the registration.
    fn subscribe(&mut self, addr: usize, len: usize) -> Result<()>;

    /// Stops one earlier successful `subscribe` of the same span.
    fn unsubscribe(&mut self, addr: usize, len: usize);

    /// True if `drain` may have something. Called on every lookup.
    fn has_events(&self) -> bool;

    /// Moves pending reports into `out` (at most [`Events::CAPACITY`]
    /// ranges; more either stay pending, keeping `has_events` true, or set
    /// the overflow flag).
    fn drain(&mut self, out: &mut Events);
}

/// Refuses every subscription: nothing is cached beyond its use.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoMonitor;

impl Monitor for NoMonitor {
    fn name(&self) -> &'static str {
        "disabled"
    }

    fn subscribe(&mut self, _addr: usize, _len: usize) -> Result<()> {
        Err(Error::NotSupported("no memory monitor: registrations are not cached"))
    }

    fn unsubscribe(&mut self, _addr: usize, _len: usize) {}

    fn has_events(&self) -> bool {
        false
    }

    fn drain(&mut self, _out: &mut Events) {}
}

/// A monitor fed by its owner: accepts every subscription and reports the
/// ranges given to [`ManualMonitor::notify`]. Clones share state, so one
/// clone can be given to a cache and another kept to report frees.
///
/// ```
/// use xfer_core::unstable::mr::{ManualMonitor, Monitor, Events};
/// let owner = ManualMonitor::new();
/// let mut given = owner.clone();
/// owner.notify(0x1000, 0x2000);
/// assert!(given.has_events());
/// let mut ev = Events::new();
/// given.drain(&mut ev);
/// assert_eq!(ev.spans()[0].end, 0x3000);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualMonitor {
    inner: Arc<ManualInner>,
}

#[derive(Debug, Default)]
struct ManualInner {
    dirty: AtomicBool,
    state: Mutex<ManualState>,
}

#[derive(Debug, Default)]
struct ManualState {
    pending: VecDeque<Span>,
    subscriptions: usize,
    refuse: bool,
}

impl ManualMonitor {
    /// A monitor with nothing reported.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reports `[addr, addr + len)` as unmapped.
    pub fn notify(&self, addr: usize, len: usize) {
        let mut st = lock(&self.inner.state);
        st.pending.push_back(Span {
            start: addr,
            end: addr.saturating_add(len),
        });
        self.inner.dirty.store(true, Ordering::Release);
    }

    /// Subscriptions currently held (subscribes minus unsubscribes), to check
    /// for leaks.
    pub fn subscriptions(&self) -> usize {
        lock(&self.inner.state).subscriptions
    }

    /// Makes later subscriptions fail (true) or succeed (false), to exercise
    /// a cache's handling of memory it cannot watch.
    pub fn set_refuse(&self, refuse: bool) {
        lock(&self.inner.state).refuse = refuse;
    }
}

impl Monitor for ManualMonitor {
    fn name(&self) -> &'static str {
        "manual"
    }

    fn subscribe(&mut self, _addr: usize, _len: usize) -> Result<()> {
        let mut st = lock(&self.inner.state);
        if st.refuse {
            return Err(Error::NotSupported("manual monitor refuses subscriptions"));
        }
        st.subscriptions += 1;
        Ok(())
    }

    fn unsubscribe(&mut self, _addr: usize, _len: usize) {
        let mut st = lock(&self.inner.state);
        st.subscriptions = st.subscriptions.saturating_sub(1);
    }

    fn has_events(&self) -> bool {
        self.inner.dirty.load(Ordering::Acquire)
    }

    fn drain(&mut self, out: &mut Events) {
        let mut st = lock(&self.inner.state);
        while out.len < Events::CAPACITY {
            let Some(s) = st.pending.pop_front() else { break };
            out.push(s.start, s.end);
        }
        self.inner.dirty.store(!st.pending.is_empty(), Ordering::Release);
    }
}

/// Locks, ignoring poisoning: the data under these locks stays consistent
/// at every point a panic could occur, and no panic may cross into the
/// unmapping thread.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One cache's subscription to the process-wide userfaultfd monitor.
///
/// Creating one is cheap after the first (which opens the descriptor and
/// starts the `xfer-uffd` thread). At most [`UffdMonitor::MAX_SUBSCRIBERS`]
/// exist at a time.
#[derive(Debug)]
pub struct UffdMonitor {
    uffd: &'static Uffd,
    sub: Arc<Sub>,
    slot: usize,
}

impl UffdMonitor {
    /// Caches that can be subscribed at once in a process.
    pub const MAX_SUBSCRIBERS: usize = 128;

    /// Subscribes a new cache; fails where userfaultfd is unavailable (the
    /// error says why) or too many caches exist.
    pub fn new() -> Result<UffdMonitor> {
        let uffd = Uffd::global()?;
        let sub = Arc::new(Sub {
            dirty: AtomicBool::new(false),
            queue: Mutex::new(Events::new()),
        });
        let mut slots = lock(&uffd.slots);
        let Some(slot) = slots.iter().position(Option::is_none) else {
            drop(slots);
            tracing::warn!(
                max = Self::MAX_SUBSCRIBERS,
                "too many MR caches in this process; this one will not cache"
            );
            return Err(Error::NotSupported(
                "too many MR caches watching userfaultfd in this process",
            ));
        };
        slots[slot] = Some(Arc::clone(&sub));
        drop(slots);
        Ok(UffdMonitor { uffd, sub, slot })
    }
}

impl Drop for UffdMonitor {
    fn drop(&mut self) {
        let taken = lock(&self.uffd.slots)[self.slot].take();
        // Dropped outside `G`: freeing memory may unmap (see module docs).
        drop(taken);
    }
}

impl Monitor for UffdMonitor {
    fn name(&self) -> &'static str {
        "userfaultfd"
    }

    fn subscribe(&mut self, addr: usize, len: usize) -> Result<()> {
        self.uffd.subscribe(addr, len)
    }

    fn unsubscribe(&mut self, addr: usize, len: usize) {
        self.uffd.unsubscribe(addr, len)
    }

    #[inline]
    fn has_events(&self) -> bool {
        self.sub.dirty.load(Ordering::Acquire) || sys::forked()
    }

    fn drain(&mut self, out: &mut Events) {
        if sys::forked() {
            // The child's mappings are not watched and `G` may have been
            // held by a thread that does not exist here: assume the worst.
            out.set_overflow();
            return;
        }
        let slots = lock(&self.uffd.slots);
        self.sub.dirty.store(false, Ordering::SeqCst);
        lock(&self.sub.queue).move_into(out);
        drop(slots);
    }
}

/// A subscriber's side of the monitor: its flag and queue.
#[derive(Debug)]
struct Sub {
    /// Set (under `G`) before the monitor thread reads events.
    dirty: AtomicBool,
    /// Reports not yet drained; only touched under `G`.
    queue: Mutex<Events>,
}

/// The process-wide userfaultfd and its subscribers.
#[derive(Debug)]
struct Uffd {
    fd: OwnedFd,
    pid: u32,
    /// `G`: held by the monitor thread while it reads and queues events.
    slots: Mutex<[Option<Arc<Sub>>; UffdMonitor::MAX_SUBSCRIBERS]>,
    /// `C`: how many subscriptions cover each address, so that a range is
    /// unregistered from userfaultfd only when no cache needs it.
    coverage: Mutex<Coverage>,
}

static UFFD: OnceLock<Result<&'static Uffd>> = OnceLock::new();

impl Uffd {
    fn global() -> Result<&'static Uffd> {
        UFFD.get_or_init(|| {
            let r = Uffd::open();
            match &r {
                Ok(_) => tracing::debug!("userfaultfd memory monitor started"),
                Err(e) => tracing::warn!(error = %e, "userfaultfd memory monitor unavailable; MR caching disabled"),
            }
            r
        })
        .clone()
    }

    fn open() -> Result<&'static Uffd> {
        let fd = sys::open_uffd()?;
        sys::probe_wp(fd.as_raw_fd())?;
        sys::install_fork_handler();
        let uffd: &'static Uffd = Box::leak(Box::new(Uffd {
            fd,
            pid: std::process::id(),
            slots: Mutex::new([const { None }; UffdMonitor::MAX_SUBSCRIBERS]),
            coverage: Mutex::new(Coverage::default()),
        }));
        std::thread::Builder::new()
            .name("xfer-uffd".into())
            .stack_size(64 << 10)
            .spawn(move || uffd.run())
            .map_err(Error::from)?;
        Ok(uffd)
    }

    fn subscribe(&self, addr: usize, len: usize) -> Result<()> {
        let end = addr
            .checked_add(len)
            .ok_or(Error::InvalidArgument("address range overflows"))?;
        if std::process::id() != self.pid || sys::forked() {
            return Err(Error::NotSupported("userfaultfd monitor does not survive fork"));
        }
        let mut cov = lock(&self.coverage);
        // Always register, even where counts are already positive: the memory
        // may have been unmapped and mapped anew since, and the stale counts
        // only go away when their caches drain the unmap event.
        sys::register(self.fd.as_raw_fd(), addr, len)?;
        cov.add(addr, end);
        Ok(())
    }

    fn unsubscribe(&self, addr: usize, len: usize) {
        let end = addr.saturating_add(len);
        let mut zeros = Vec::new();
        let mut cov = lock(&self.coverage);
        cov.remove(addr, end, &mut zeros);
        for z in zeros {
            // Fails harmlessly (EINVAL) where the memory is already unmapped.
            if let Err(e) = sys::unregister(self.fd.as_raw_fd(), z.start, z.end - z.start) {
                tracing::trace!(start = z.start, end = z.end, error = %e, "userfaultfd unregister");
            }
        }
    }

    /// The monitor thread. Must not allocate, free, log or take any lock but
    /// `G` and the queues (module docs).
    fn run(&self) -> ! {
        let fd = self.fd.as_raw_fd();
        let mut msgs = [sys::UffdMsg::default(); 32];
        loop {
            if !sys::wait_readable(fd) {
                continue;
            }
            let slots = lock(&self.slots);
            for sub in slots.iter().flatten() {
                sub.dirty.store(true, Ordering::SeqCst);
            }
            // Only now read: reading is what lets the unmapping thread go on.
            loop {
                let n = sys::read_events(fd, &mut msgs);
                if n == 0 {
                    break;
                }
                for m in &msgs[..n] {
                    let Some(span) = m.span(fd) else { continue };
                    for sub in slots.iter().flatten() {
                        lock(&sub.queue).push(span.start, span.end);
                    }
                }
            }
            drop(slots);
        }
    }
}

/// Reference counts over address ranges, as disjoint segments `start ->
/// (end, count)`, never holding a zero count.
#[derive(Debug, Default)]
struct Coverage {
    segs: BTreeMap<usize, (usize, u32)>,
}

impl Coverage {
    /// Splits the segment containing `at` (strictly inside) in two.
    fn split(&mut self, at: usize) {
        let Some((&s, &(e, c))) = self.segs.range(..at).next_back() else {
            return;
        };
        if e > at {
            self.segs.insert(s, (at, c));
            self.segs.insert(at, (e, c));
        }
    }

    /// Joins the segments meeting at `at` if their counts agree.
    fn join(&mut self, at: usize) {
        let Some((&s, &(e, c))) = self.segs.range(..at).next_back() else {
            return;
        };
        if e != at {
            return;
        }
        if let Some(&(e2, c2)) = self.segs.get(&at) {
            if c2 == c {
                self.segs.remove(&at);
                self.segs.insert(s, (e2, c));
            }
        }
    }

    fn add(&mut self, start: usize, end: usize) {
        if start >= end {
            return;
        }
        self.split(start);
        self.split(end);
        let mut cursor = start;
        let keys: Vec<usize> = self.segs.range(start..end).map(|(&k, _)| k).collect();
        for k in keys {
            if cursor < k {
                self.segs.insert(cursor, (k, 1));
            }
            if let Some(seg) = self.segs.get_mut(&k) {
                seg.1 += 1;
                cursor = seg.0;
            }
        }
        if cursor < end {
            self.segs.insert(cursor, (end, 1));
        }
        self.join(start);
        self.join(end);
    }

    /// Decrements `[start, end)`; ranges reaching zero are removed and
    /// appended to `zeros`, adjacent ones joined.
    fn remove(&mut self, start: usize, end: usize, zeros: &mut Vec<Span>) {
        if start >= end {
            return;
        }
        self.split(start);
        self.split(end);
        let keys: Vec<usize> = self.segs.range(start..end).map(|(&k, _)| k).collect();
        for k in keys {
            let Some(seg) = self.segs.get_mut(&k) else { continue };
            seg.1 -= 1;
            if seg.1 == 0 {
                let e = seg.0;
                self.segs.remove(&k);
                match zeros.last_mut() {
                    Some(z) if z.end == k => z.end = e,
                    _ => zeros.push(Span { start: k, end: e }),
                }
            }
        }
        self.join(start);
        self.join(end);
    }
}

/// The userfaultfd system calls, each in one place.
mod sys {
    use super::*;
    use std::sync::atomic::AtomicBool;

    // Not in the libc crate: <linux/userfaultfd.h>.
    const UFFD_API: u64 = 0xAA;
    const UFFD_USER_MODE_ONLY: libc::c_int = 1;
    const UFFD_FEATURE_EVENT_REMAP: u64 = 1 << 2;
    const UFFD_FEATURE_EVENT_REMOVE: u64 = 1 << 3;
    const UFFD_FEATURE_EVENT_UNMAP: u64 = 1 << 6;
    const UFFD_FEATURE_WP_HUGETLBFS_SHMEM: u64 = 1 << 12;
    const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
    const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
    const UFFD_EVENT_REMAP: u8 = 0x14;
    const UFFD_EVENT_REMOVE: u8 = 0x15;
    const UFFD_EVENT_UNMAP: u8 = 0x16;

    /// `_IOC` in the asm-generic encoding (x86, arm, riscv; not mips, powerpc,
    /// sparc, whose direction bits differ).
    const fn ioc(dir: u64, nr: u64, size: usize) -> u64 {
        (dir << 30) | ((size as u64) << 16) | (0xAA << 8) | nr
    }
    const WRITE: u64 = 1;
    const READ: u64 = 2;

    #[repr(C)]
    #[derive(Default)]
    struct UffdioApi {
        api: u64,
        features: u64,
        ioctls: u64,
    }

    #[repr(C)]
    #[derive(Default)]
    struct UffdioRange {
        start: u64,
        len: u64,
    }

    #[repr(C)]
    #[derive(Default)]
    struct UffdioRegister {
        range: UffdioRange,
        mode: u64,
        ioctls: u64,
    }

    #[repr(C)]
    #[derive(Default)]
    struct UffdioWriteprotect {
        range: UffdioRange,
        mode: u64,
    }

    const UFFDIO_API: u64 = ioc(READ | WRITE, 0x3F, std::mem::size_of::<UffdioApi>());
    const UFFDIO_REGISTER: u64 = ioc(READ | WRITE, 0x00, std::mem::size_of::<UffdioRegister>());
    const UFFDIO_UNREGISTER: u64 = ioc(READ, 0x01, std::mem::size_of::<UffdioRange>());
    const UFFDIO_WAKE: u64 = ioc(READ, 0x02, std::mem::size_of::<UffdioRange>());
    const UFFDIO_WRITEPROTECT: u64 = ioc(READ | WRITE, 0x06, std::mem::size_of::<UffdioWriteprotect>());

    /// `struct uffd_msg`: an event byte, padding, and a 24-byte union read
    /// here as three words.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    pub(super) struct UffdMsg {
        event: u8,
        _reserved1: u8,
        _reserved2: u16,
        _reserved3: u32,
        arg: [u64; 3],
    }
    const _: () = assert!(std::mem::size_of::<UffdMsg>() == 32);

    impl UffdMsg {
        /// The range an event says is gone; a stray page fault is resolved.
        pub(super) fn span(&self, fd: RawFd) -> Option<Span> {
            let [a, b, c] = self.arg.map(|w| w as usize);
            match self.event {
                // remove/unmap: { start, end }
                UFFD_EVENT_UNMAP | UFFD_EVENT_REMOVE => Some(Span { start: a, end: b }),
                // remap: { from, to, len }; the old range is gone.
                UFFD_EVENT_REMAP => Some(Span {
                    start: a,
                    end: a.saturating_add(c),
                }),
                UFFD_EVENT_PAGEFAULT => {
                    // Never expected: no page is ever write-protected. Should
                    // one be (by a kernel quirk), unprotect it and wake the
                    // faulting thread rather than leave it hanging.
                    unblock(fd, b);
                    None
                }
                _ => None,
            }
        }
    }

    fn ioctl<T>(fd: RawFd, req: u64, arg: &mut T) -> Result<()> {
        // SAFETY: `arg` is a live, properly laid out struct of the size encoded
        // in `req`; the kernel reads and writes only within it.
        let rc = unsafe { libc::ioctl(fd, req as _, arg as *mut T) };
        crate::sys::cvt(rc).map(drop)
    }

    fn open_with(flags: libc::c_int, features: u64) -> Result<OwnedFd> {
        // SAFETY: userfaultfd takes one integer argument and returns a new
        // descriptor or -1.
        let raw = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
        if raw < 0 {
            return Err(Error::last_os_error());
        }
        // SAFETY: the descriptor was just created and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(raw as RawFd) };
        let mut api = UffdioApi {
            api: UFFD_API,
            features,
            ioctls: 0,
        };
        ioctl(fd.as_raw_fd(), UFFDIO_API, &mut api)?;
        Ok(fd)
    }

    /// A non-blocking, close-on-exec userfaultfd with the unmap, remove and
    /// remap events enabled.
    pub(super) fn open_uffd() -> Result<OwnedFd> {
        let base = libc::O_CLOEXEC | libc::O_NONBLOCK;
        let events = UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP;
        // Kernel faults are never routed to us, so user-mode-only suffices
        // and works unprivileged (Linux 5.11+); older kernels reject the flag.
        // UFFDIO_API accepts a feature set once per descriptor, so each
        // attempt uses a new one.
        let mut last = Error::NotSupported("userfaultfd");
        for flags in [base | UFFD_USER_MODE_ONLY, base] {
            for features in [events | UFFD_FEATURE_WP_HUGETLBFS_SHMEM, events] {
                match open_with(flags, features) {
                    Ok(fd) => return Ok(fd),
                    Err(e) => last = e,
                }
            }
        }
        Err(last)
    }

    /// Checks that write-protect registration works on anonymous memory.
    pub(super) fn probe_wp(fd: RawFd) -> Result<()> {
        // SAFETY: sysconf only reads configuration.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        // SAFETY: an anonymous private mapping at an address of the kernel's
        // choosing affects no existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::last_os_error());
        }
        let r = register(fd, p as usize, page);
        // Unregister before unmapping: no thread reads events yet, so an
        // unmap event would block this thread forever.
        let u = if r.is_ok() {
            unregister(fd, p as usize, page)
        } else {
            Ok(())
        };
        // SAFETY: `p` is the page mapped above, used by nothing else.
        unsafe { libc::munmap(p, page) };
        r.and(u)
    }

    pub(super) fn register(fd: RawFd, addr: usize, len: usize) -> Result<()> {
        let mut reg = UffdioRegister {
            range: UffdioRange {
                start: addr as u64,
                len: len as u64,
            },
            mode: UFFDIO_REGISTER_MODE_WP,
            ioctls: 0,
        };
        ioctl(fd, UFFDIO_REGISTER, &mut reg)
    }

    pub(super) fn unregister(fd: RawFd, addr: usize, len: usize) -> Result<()> {
        let mut range = UffdioRange {
            start: addr as u64,
            len: len as u64,
        };
        ioctl(fd, UFFDIO_UNREGISTER, &mut range)
    }

    fn unblock(fd: RawFd, addr: usize) {
        // SAFETY: sysconf only reads configuration.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let start = (addr & !(page - 1)) as u64;
        let mut wp = UffdioWriteprotect {
            range: UffdioRange {
                start,
                len: page as u64,
            },
            mode: 0,
        };
        let _ = ioctl(fd, UFFDIO_WRITEPROTECT, &mut wp);
        let mut range = UffdioRange {
            start,
            len: page as u64,
        };
        let _ = ioctl(fd, UFFDIO_WAKE, &mut range);
    }

    /// Blocks until `fd` is readable; false on interruption or error.
    pub(super) fn wait_readable(fd: RawFd) -> bool {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `pfd` is one valid pollfd for the duration of the call.
        let rc = unsafe { libc::poll(&mut pfd, 1, -1) };
        if rc < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // Not expected on a valid descriptor; avoid spinning.
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        rc > 0
    }

    /// Reads whatever events are queued (non-blocking); 0 when none.
    pub(super) fn read_events(fd: RawFd, msgs: &mut [UffdMsg]) -> usize {
        loop {
            // SAFETY: `msgs` is writable for its whole byte length, and
            // UffdMsg accepts any bit pattern.
            let n = unsafe { libc::read(fd, msgs.as_mut_ptr().cast(), std::mem::size_of_val(msgs)) };
            if n >= 0 {
                return n as usize / std::mem::size_of::<UffdMsg>();
            }
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return 0;
            }
        }
    }

    static FORKED: AtomicBool = AtomicBool::new(false);

    /// True in a child forked after the monitor started.
    #[inline]
    pub(super) fn forked() -> bool {
        FORKED.load(Ordering::Relaxed)
    }

    extern "C" fn in_child() {
        // Async-signal-safe: one atomic store.
        FORKED.store(true, Ordering::Relaxed);
    }

    pub(super) fn install_fork_handler() {
        // SAFETY: registers a handler that only stores to an atomic; called
        // once, from the OnceLock initialiser.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        if rc != 0 {
            tracing::warn!(
                rc,
                "pthread_atfork failed; a forked child may see stale MR cache entries"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn events_coalesce_and_overflow() {
        let mut e = Events::new();
        e.push(0, 10);
        e.push(10, 20);
        assert_eq!(e.spans(), &[Span { start: 0, end: 20 }]);
        for i in 0..Events::CAPACITY + 1 {
            e.push(100 + 10 * i, 105 + 10 * i);
        }
        assert!(e.overflowed());
        let mut out = Events::new();
        e.move_into(&mut out);
        assert!(e.is_empty() && out.overflowed());
    }

    proptest! {
        /// Coverage counts against a per-address count array; zero ranges
        /// reported exactly where counts drop to zero.
        #[test]
        fn coverage_matches_model(ops in proptest::collection::vec((any::<bool>(), 0usize..40, 1usize..10), 1..100)) {
            let mut cov = Coverage::default();
            let mut model = [0u32; 64];
            let mut live: Vec<(usize, usize)> = Vec::new();
            for (add, s, l) in ops {
                if add || live.is_empty() {
                    cov.add(s, s + l);
                    model[s..s + l].iter_mut().for_each(|c| *c += 1);
                    live.push((s, s + l));
                } else {
                    let (a, b) = live.remove(s % live.len());
                    let mut zeros = Vec::new();
                    cov.remove(a, b, &mut zeros);
                    let mut want = Vec::new();
                    for (i, count) in model.iter_mut().enumerate().take(b).skip(a) {
                        *count -= 1;
                        if *count == 0 {
                            want.push(i);
                        }
                    }
                    let got: Vec<usize> = zeros.iter().flat_map(|z| z.start..z.end).collect();
                    prop_assert_eq!(got, want);
                }
                let mut flat = [0u32; 64];
                let mut prev_end = None;
                for (&k, &(e, c)) in &cov.segs {
                    prop_assert!(c > 0 && k < e);
                    if let Some(p) = prev_end { prop_assert!(p <= k); }
                    prev_end = Some(e);
                    flat[k..e].iter_mut().for_each(|x| *x = c);
                }
                prop_assert_eq!(flat, model);
            }
        }
    }
}
