//! The registration cache: lookups that reuse registrations, with reference
//! counts, an LRU of idle entries, limits and invalidation.
//!
//! # Model
//!
//! An *entry* is one registration made through the [`Registrar`] over a
//! page-aligned span. Entries are either *cached* — in the
//! [`RangeMap`], findable by `lookup`, pairwise
//! disjoint — or *detached*: still registered because a [`CacheRef`] holds
//! them, never returned again, deregistered at their last release. An entry
//! with no references is *idle*; only idle entries are evicted.
//!
//! # Overlap and merging
//!
//! On a miss the new span absorbs every cached entry that *overlaps* it
//! (idle or in use) and every idle entry that is *adjacent* to it, repeated
//! until nothing more touches; the access rights are the union. The span is
//! registered once; absorbed idle entries are deregistered, absorbed in-use
//! entries are detached and live on until released (UCX's rcache does the
//! same). This keeps cached entries disjoint, which is what makes a lookup a
//! single predecessor search. In-use entries that are only adjacent are left
//! alone, so a pipeline of adjacent in-flight buffers does not re-register
//! ever larger spans. Absorbed entries count as `merges`.
//!
//! Rights are widened by merging: a span registered for remote write that
//! absorbs a neighbour grants remote write over the neighbour's pages too,
//! and every span is rounded out to whole pages. The cache is meant for the
//! provider's own zero-copy paths; a caller that must expose exactly one
//! buffer with exactly its rights should register it directly.
//!
//! # The hit path
//!
//! One atomic load (anything from the monitor?), a lookaside table of
//! recent hits indexed by a hash of the page (a hint, validated against the
//! entry, so it needs no invalidation), else the [`RangeMap`] search, then
//! the reference count and, for an entry that was idle, unlinking it from
//! the LRU list. No allocation, no system call, no lock.
//!
//! # References and locking
//!
//! `lookup` returns a [`CacheRef`], an explicit handle given back with
//! [`MrCache::release`], not an RAII guard: the cache lives behind its
//! domain's mutex, and a guard would have to borrow or lock it to release
//! on drop. A `CacheRef` that is dropped without release keeps its entry in
//! use until the cache is dropped. The cache itself is not synchronised;
//! every method takes `&mut self`.
//!
//! # Limits
//!
//! [`MrCacheAttr::max_entries`] and [`MrCacheAttr::max_bytes`] bound the
//! cached entries, in use or idle (detached and uncached registrations are
//! transient: they go at their last release and do not count). After a
//! miss and after every last release, idle entries are evicted least
//! recently released first until both hold or no idle entry is left;
//! in-use entries may keep the cache over its limits.
//! If the registrar fails (pinned-memory limits, say), the idle entries are
//! flushed and the registration is tried once more.
//!
//! # Unmapped memory
//!
//! Every cached span is subscribed with a [`Monitor`]; at the start of each
//! `lookup` and `release` the monitor's reports are applied as by
//! [`MrCache::invalidate`], so a lookup never returns a registration of
//! memory unmapped before it was called. Memory the monitor cannot watch is
//! registered for that one use and deregistered at its release
//! (`uncached`). See [`super::unmap`].

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use slab::Slab;

use super::access::Access;
use super::attr::{MonitorKind, MrCacheAttr};
use super::tree::RangeMap;
use super::unmap::{Events, Monitor, NoMonitor, UffdMonitor};
use crate::error::{Error, Result};

/// The provider's registration hook: the verbs provider calls `ibv_reg_mr`,
/// the TCP provider adds a key-table entry.
pub trait Registrar {
    /// What a registration yields (an MR with its keys, a table index).
    type Handle;

    /// Registers `[addr, addr + len)` (page-aligned) with `access`.
    fn register(&mut self, addr: usize, len: usize, access: Access) -> Result<Self::Handle>;

    /// Releases a registration. Must not fail; log instead.
    fn deregister(&mut self, handle: Self::Handle);
}

/// Counters and gauges of a cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MrCacheStats {
    /// Lookups answered by a cached entry.
    pub hits: u64,
    /// Lookups that registered.
    pub misses: u64,
    /// Idle entries deregistered to respect the limits.
    pub evictions: u64,
    /// Entries dropped by `invalidate` or by the monitor's reports.
    pub invalidations: u64,
    /// Entries absorbed into a new, larger registration.
    pub merges: u64,
    /// Misses registered for one use only (memory the monitor cannot watch,
    /// caching disabled, span larger than `max_bytes`).
    pub uncached: u64,
    /// Ranges reported by the monitor.
    pub monitor_events: u64,
    /// Live registrations, cached or not.
    pub entries: usize,
    /// Live registrations with references.
    pub in_use: usize,
    /// Bytes of live registrations.
    pub bytes: usize,
    /// Cached (findable) entries: what `max_entries` bounds.
    pub cached: usize,
    /// Bytes of cached entries: what `max_bytes` bounds.
    pub cached_bytes: usize,
}

/// A reference to a registration returned by [`MrCache::lookup`]; give it
/// back with [`MrCache::release`].
#[must_use = "give the reference back with MrCache::release, or the registration stays in use"]
#[derive(Debug, PartialEq, Eq)]
pub struct CacheRef {
    id: usize,
    gen: u64,
    addr: usize,
    end: usize,
    access: Access,
}

impl CacheRef {
    /// Start of the registered span (page-aligned, at or below the buffer).
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// End of the registered span (page-aligned, at or above the buffer's end).
    pub fn end(&self) -> usize {
        self.end
    }

    /// Rights of the registration (at least those asked for).
    pub fn access(&self) -> Access {
        self.access
    }
}

struct Entry<H> {
    addr: usize,
    end: usize,
    access: Access,
    handle: H,
    refs: usize,
    /// Unique over all caches: identifies the entry in a `CacheRef`.
    gen: u64,
    /// In the tree (else detached or never cached).
    cached: bool,
    /// Subscribed with the monitor.
    monitored: bool,
}

static NEXT_GEN: AtomicU64 = AtomicU64::new(1);

/// No entry (lookaside).
const NIL: usize = usize::MAX;

/// No entry (LRU links).
const NONE: u32 = u32::MAX;

/// An entry's LRU neighbours (older, newer), by slab id.
#[derive(Clone, Copy)]
struct Link {
    prev: u32,
    next: u32,
}

/// A lookaside slot: where the entry `id` (if its `gen` still matches) was.
#[derive(Clone, Copy)]
struct Hint {
    start: usize,
    end: usize,
    id: usize,
    gen: u64,
}

impl Hint {
    /// Covers nothing.
    const EMPTY: Hint = Hint {
        start: 1,
        end: 0,
        id: NIL,
        gen: 0,
    };
}

/// Slots of the lookaside table (a power of two).
const LOOKASIDE: usize = 256;

/// A memory-registration cache over a [`Registrar`].
///
/// ```
/// use xfer_core::unstable::mr::{Access, ManualMonitor, MrCache, MrCacheAttr, Registrar};
/// use xfer_core::Result;
///
/// struct Keys(u32);
/// impl Registrar for Keys {
///     type Handle = u32;
///     fn register(&mut self, _addr: usize, _len: usize, _access: Access) -> Result<u32> {
///         self.0 += 1;
///         Ok(self.0)
///     }
///     fn deregister(&mut self, _key: u32) {}
/// }
///
/// let mut cache = MrCache::with_monitor(MrCacheAttr::default(), Keys(0), Box::new(ManualMonitor::new()));
/// let buf = vec![0u8; 10_000];
/// let r = cache.lookup(buf.as_ptr() as usize, buf.len(), Access::REMOTE_READ)?;
/// let key = *cache.handle(&r).unwrap();
/// cache.release(r)?;
/// let again = cache.lookup(buf.as_ptr() as usize + 100, 50, Access::REMOTE_READ)?;
/// assert_eq!(*cache.handle(&again).unwrap(), key);
/// assert_eq!((cache.stats().hits, cache.stats().misses), (1, 1));
/// cache.release(again)?;
/// # Ok::<(), xfer_core::Error>(())
/// ```
pub struct MrCache<R: Registrar> {
    registrar: R,
    monitor: Box<dyn Monitor>,
    attr: MrCacheAttr,
    page: usize,
    page_shift: u32,
    tree: RangeMap<usize>,
    /// Recently hit entries by a hash of the looked-up page: hints checked
    /// against the entry (by `gen`), so they never need invalidating. The
    /// span is copied in so that a hint for another entry is rejected
    /// without touching that entry's memory.
    lookaside: Box<[Hint; LOOKASIDE]>,
    entries: Slab<Entry<R::Handle>>,
    /// Idle cached entries, a list from least (`lru_head`) to most recently
    /// released (`lru_tail`), linked exactly while idle and cached. The links
    /// are kept apart from the entries, indexed by slab id, so that
    /// unlinking touches 8-byte neighbours in a dense array rather than two
    /// whole entries.
    links: Vec<Link>,
    lru_head: u32,
    lru_tail: u32,
    /// Bytes of all live registrations.
    bytes: usize,
    /// Cached (findable) entries and their bytes: what the limits bound.
    cached: usize,
    cached_bytes: usize,
    in_use: usize,
    stats: MrCacheStats,
    /// Reused for merge and invalidation candidates.
    scratch: Vec<usize>,
}

impl<R: Registrar> fmt::Debug for MrCache<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MrCache")
            .field("attr", &self.attr)
            .field("monitor", &self.monitor.name())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<R: Registrar> MrCache<R> {
    /// A cache with the monitor `attr.monitor` names. If userfaultfd is
    /// unavailable, the cache works but caches nothing (logged).
    pub fn new(attr: MrCacheAttr, registrar: R) -> Self {
        let monitor: Box<dyn Monitor> = match attr.monitor {
            MonitorKind::Userfaultfd => match UffdMonitor::new() {
                Ok(m) => Box::new(m),
                Err(e) => {
                    tracing::debug!(error = %e, "MR cache without memory monitor: caching disabled");
                    Box::new(NoMonitor)
                }
            },
            MonitorKind::Disabled => Box::new(NoMonitor),
        };
        Self::with_monitor(attr, registrar, monitor)
    }

    /// A cache with a monitor of the caller's choice (`attr.monitor` is
    /// ignored).
    pub fn with_monitor(attr: MrCacheAttr, registrar: R, monitor: Box<dyn Monitor>) -> Self {
        // SAFETY: sysconf only reads configuration.
        let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
            p if p > 0 && (p as usize).is_power_of_two() => p as usize,
            _ => 4096,
        };
        MrCache {
            registrar,
            monitor,
            attr,
            page,
            page_shift: page.trailing_zeros(),
            tree: RangeMap::new(),
            lookaside: Box::new([Hint::EMPTY; LOOKASIDE]),
            entries: Slab::new(),
            links: Vec::new(),
            lru_head: NONE,
            lru_tail: NONE,
            bytes: 0,
            cached: 0,
            cached_bytes: 0,
            in_use: 0,
            stats: MrCacheStats::default(),
            scratch: Vec::new(),
        }
    }

    /// The attributes.
    pub fn attr(&self) -> &MrCacheAttr {
        &self.attr
    }

    /// The monitor's name (`userfaultfd`, `disabled`, `manual`).
    pub fn monitor_name(&self) -> &'static str {
        self.monitor.name()
    }

    /// The registrar.
    pub fn registrar(&self) -> &R {
        &self.registrar
    }

    /// The registrar, mutably (registrations made directly through it are
    /// not the cache's business).
    pub fn registrar_mut(&mut self) -> &mut R {
        &mut self.registrar
    }

    /// Counters and gauges.
    pub fn stats(&self) -> MrCacheStats {
        MrCacheStats {
            entries: self.entries.len(),
            in_use: self.in_use,
            bytes: self.bytes,
            cached: self.cached,
            cached_bytes: self.cached_bytes,
            ..self.stats
        }
    }

    /// The registration `r` refers to; `None` if `r` is not from this cache.
    pub fn handle(&self, r: &CacheRef) -> Option<&R::Handle> {
        self.entries.get(r.id).filter(|e| e.gen == r.gen).map(|e| &e.handle)
    }

    /// A registration covering `[addr, addr + len)` with at least `access`:
    /// a cached one, or a new one of the page-aligned span (merged with its
    /// neighbours, see the module docs). A zero `len` is taken as one byte.
    ///
    /// Reports of unmapped memory are applied first.
    #[inline]
    pub fn lookup(&mut self, addr: usize, len: usize, access: Access) -> Result<CacheRef> {
        let end = addr
            .checked_add(len.max(1))
            .ok_or(Error::InvalidArgument("buffer wraps around the address space"))?;
        if self.monitor.has_events() {
            self.process_events();
        }
        let slot = self.lookaside_slot(addr);
        let h = self.lookaside[slot];
        let hinted =
            h.start <= addr && end <= h.end && self.entries.get(h.id).is_some_and(|e| e.gen == h.gen && e.cached);
        let id = if hinted {
            h.id
        } else {
            match self.tree.find_covering(addr, end) {
                Some((_, _, &id)) => id,
                None => return self.miss(addr, end, access),
            }
        };
        match self.entries.get(id) {
            Some(e) if e.access.contains(access) => {
                self.lookaside[slot] = Hint {
                    start: e.addr,
                    end: e.end,
                    id,
                    gen: e.gen,
                };
                Ok(self.take_ref(id))
            }
            _ => self.miss(addr, end, access),
        }
    }

    #[inline]
    fn lookaside_slot(&self, addr: usize) -> usize {
        let page = (addr >> self.page_shift) as u64;
        (page.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - LOOKASIDE.trailing_zeros())) as usize
    }

    /// Adds a reference to a cached entry found by a lookup.
    #[inline]
    fn take_ref(&mut self, id: usize) -> CacheRef {
        let e = &mut self.entries[id];
        let idle = e.refs == 0;
        e.refs += 1;
        let r = CacheRef {
            id,
            gen: e.gen,
            addr: e.addr,
            end: e.end,
            access: e.access,
        };
        if idle {
            self.in_use += 1;
            self.lru_unlink(id);
        }
        self.stats.hits += 1;
        r
    }

    /// Gives a reference back. At the last release an idle entry joins the
    /// LRU (or is deregistered if it was detached, invalidated or never
    /// cached) and the limits are enforced.
    pub fn release(&mut self, r: CacheRef) -> Result<()> {
        if self.monitor.has_events() {
            self.process_events();
        }
        let Some(e) = self.entries.get_mut(r.id).filter(|e| e.gen == r.gen) else {
            return Err(Error::InvalidArgument("cache reference is not from this cache"));
        };
        e.refs -= 1;
        if e.refs > 0 {
            return Ok(());
        }
        self.in_use -= 1;
        if e.cached {
            self.lru_push(r.id);
        } else {
            self.destroy(r.id);
        }
        self.enforce_limits();
        Ok(())
    }

    /// Drops every cached entry overlapping `[addr, addr + len)`: idle ones
    /// are deregistered now, in-use ones are never returned again and are
    /// deregistered at their last release. Returns how many were dropped.
    pub fn invalidate(&mut self, addr: usize, len: usize) -> usize {
        self.invalidate_span(addr, addr.saturating_add(len))
    }

    /// Deregisters every idle entry; returns how many.
    pub fn flush(&mut self) -> usize {
        self.evict_idle_except(&[])
    }

    /// Applies the monitor's pending reports now (lookups and releases do
    /// this themselves; a provider may call it from its progress loop so that
    /// unmapped memory is deregistered promptly).
    pub fn process_events(&mut self) {
        while self.monitor.has_events() {
            let mut ev = Events::new();
            self.monitor.drain(&mut ev);
            self.stats.monitor_events += ev.spans().len() as u64;
            if ev.overflowed() {
                tracing::debug!("memory monitor overflowed: invalidating the whole MR cache");
                self.invalidate_span(0, usize::MAX);
                break;
            }
            for s in ev.spans() {
                self.invalidate_span(s.start, s.end);
            }
            if ev.spans().len() < Events::CAPACITY {
                break;
            }
        }
    }

    #[inline(never)]
    fn miss(&mut self, addr: usize, end: usize, access: Access) -> Result<CacheRef> {
        let mask = self.page - 1;
        let start = addr & !mask;
        let end = end
            .checked_add(mask)
            .ok_or(Error::InvalidArgument("buffer wraps around the address space"))?
            & !mask;
        self.stats.misses += 1;

        let mut merged = std::mem::take(&mut self.scratch);
        merged.clear();
        let (mut lo, mut hi, mut acc) = (start, end, access);
        if self.attr.max_entries > 0 && end - start <= self.attr.max_bytes {
            loop {
                let mut grew = false;
                for (a, b, &id) in self.tree.touching(lo, hi) {
                    let Some(e) = self.entries.get(id) else { continue };
                    let overlaps = a < hi && b > lo;
                    if (overlaps || e.refs == 0) && !merged.contains(&id) {
                        merged.push(id);
                        lo = lo.min(a);
                        hi = hi.max(b);
                        acc |= e.access;
                        grew = true;
                    }
                }
                if !grew {
                    break;
                }
            }
        }

        let cache_it = self.attr.max_entries > 0
            && end - start <= self.attr.max_bytes
            && self.entries.vacant_key() < NONE as usize
            && match self.monitor.subscribe(lo, hi - lo) {
                Ok(()) => true,
                Err(e) => {
                    tracing::debug!(addr = lo, len = hi - lo, error = %e, "memory not watchable; registering uncached");
                    false
                }
            };
        if !cache_it {
            merged.clear();
            (lo, hi, acc) = (start, end, access);
        }

        let handle = match self.register_with_retry(lo, hi, acc, &merged) {
            Ok(h) => h,
            Err(e) => {
                if cache_it {
                    self.monitor.unsubscribe(lo, hi - lo);
                }
                self.scratch = merged;
                return Err(e);
            }
        };

        for &id in &merged {
            self.stats.merges += 1;
            self.drop_entry(id);
        }
        merged.clear();
        self.scratch = merged;

        let gen = NEXT_GEN.fetch_add(1, Ordering::Relaxed);
        let id = self.entries.insert(Entry {
            addr: lo,
            end: hi,
            access: acc,
            handle,
            refs: 1,
            gen,
            cached: cache_it,
            monitored: cache_it,
        });
        if cache_it {
            if self.tree.insert(lo, hi, id).is_ok() {
                self.cached += 1;
                self.cached_bytes += hi - lo;
            } else {
                // Unreachable while the merge above absorbs every overlap;
                // stay correct anyway by not caching.
                crate::error_limited!(addr = lo, end = hi, "MR cache entry overlaps another; not caching it");
                if let Some(e) = self.entries.get_mut(id) {
                    e.cached = false;
                }
            }
        }
        if !cache_it {
            self.stats.uncached += 1;
        }
        self.bytes += hi - lo;
        self.in_use += 1;
        self.enforce_limits();
        Ok(CacheRef {
            id,
            gen,
            addr: lo,
            end: hi,
            access: acc,
        })
    }

    fn register_with_retry(&mut self, lo: usize, hi: usize, acc: Access, keep: &[usize]) -> Result<R::Handle> {
        match self.registrar.register(lo, hi - lo, acc) {
            Ok(h) => Ok(h),
            Err(e) => {
                let flushed = self.evict_idle_except(keep);
                if flushed == 0 {
                    return Err(e);
                }
                tracing::debug!(error = %e, flushed, "registration failed; retrying after flushing idle entries");
                self.registrar.register(lo, hi - lo, acc)
            }
        }
    }

    fn invalidate_span(&mut self, start: usize, end: usize) -> usize {
        let mut ids = std::mem::take(&mut self.scratch);
        ids.clear();
        ids.extend(self.tree.overlapping(start, end).map(|(_, _, &id)| id));
        for &id in &ids {
            self.stats.invalidations += 1;
            self.drop_entry(id);
        }
        let n = ids.len();
        ids.clear();
        self.scratch = ids;
        n
    }

    /// Evicts least recently released idle entries until within limits.
    fn enforce_limits(&mut self) {
        while self.cached > self.attr.max_entries || self.cached_bytes > self.attr.max_bytes {
            if self.lru_head == NONE {
                break;
            }
            self.destroy(self.lru_head as usize);
            self.stats.evictions += 1;
        }
    }

    /// Evicts every idle entry not in `keep`; returns how many.
    fn evict_idle_except(&mut self, keep: &[usize]) -> usize {
        let mut n = 0;
        let mut id = self.lru_head;
        while id != NONE {
            let next = self.links[id as usize].next;
            if !keep.contains(&(id as usize)) {
                self.destroy(id as usize);
                self.stats.evictions += 1;
                n += 1;
            }
            id = next;
        }
        n
    }

    /// Appends an entry that just became idle to the LRU list.
    fn lru_push(&mut self, id: usize) {
        if self.links.len() <= id {
            self.links.resize(id + 1, Link { prev: NONE, next: NONE });
        }
        let tail = self.lru_tail;
        self.links[id] = Link { prev: tail, next: NONE };
        if tail == NONE {
            self.lru_head = id as u32;
        } else {
            self.links[tail as usize].next = id as u32;
        }
        self.lru_tail = id as u32;
    }

    /// Takes an idle entry out of the LRU list.
    fn lru_unlink(&mut self, id: usize) {
        let Link { prev, next } = self.links[id];
        if prev == NONE {
            self.lru_head = next;
        } else {
            self.links[prev as usize].next = next;
        }
        if next == NONE {
            self.lru_tail = prev;
        } else {
            self.links[next as usize].prev = prev;
        }
    }

    /// Takes a cached entry out of the tree: deregistered now if idle,
    /// detached (deregistered at its last release) if in use.
    fn drop_entry(&mut self, id: usize) {
        let Some(e) = self.entries.get_mut(id) else { return };
        if e.refs == 0 {
            self.destroy(id);
        } else if e.cached {
            e.cached = false;
            let (addr, len) = (e.addr, e.end - e.addr);
            self.tree.remove(addr);
            self.cached -= 1;
            self.cached_bytes -= len;
        }
    }

    /// Removes an entry everywhere and deregisters it.
    fn destroy(&mut self, id: usize) {
        match self.entries.get(id) {
            None => return,
            Some(e) if e.refs == 0 && e.cached => self.lru_unlink(id),
            Some(_) => {}
        }
        let Some(e) = self.entries.try_remove(id) else { return };
        if e.cached {
            self.tree.remove(e.addr);
            self.cached -= 1;
            self.cached_bytes -= e.end - e.addr;
        }
        if e.refs > 0 {
            self.in_use -= 1;
        }
        self.bytes -= e.end - e.addr;
        self.registrar.deregister(e.handle);
        if e.monitored {
            self.monitor.unsubscribe(e.addr, e.end - e.addr);
        }
    }
}

impl<R: Registrar> Drop for MrCache<R> {
    fn drop(&mut self) {
        if self.in_use > 0 {
            tracing::warn!(
                in_use = self.in_use,
                "MR cache dropped with registrations in use; deregistering them"
            );
        }
        let ids: Vec<usize> = self.entries.iter().map(|(id, _)| id).collect();
        for id in ids {
            self.destroy(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mr::unmap::ManualMonitor;
    use proptest::prelude::*;
    use std::cell::Cell;
    use std::collections::BTreeMap;
    use std::rc::Rc;

    const P: usize = 4096;
    /// A fake address space far from real mappings (nothing is touched).
    const BASE: usize = 0x1000_0000_0000;

    /// Records every registration; handles are serial numbers. `count` is
    /// shared so that tests can check for leaks after the cache is dropped.
    #[derive(Default)]
    struct Rec {
        serial: u64,
        live: BTreeMap<u64, (usize, usize, Access)>,
        count: Rc<Cell<usize>>,
        registered: Vec<(usize, usize)>,
        fail_above: Option<usize>,
        fail_all: bool,
    }

    impl Registrar for Rec {
        type Handle = u64;
        fn register(&mut self, addr: usize, len: usize, access: Access) -> Result<u64> {
            if self.fail_all || self.fail_above.is_some_and(|max| self.live.len() >= max) {
                return Err(Error::Os(libc::ENOMEM));
            }
            assert_eq!(addr % P, 0, "span start page-aligned");
            assert_eq!(len % P, 0, "span length page-aligned");
            self.serial += 1;
            self.live.insert(self.serial, (addr, len, access));
            self.count.set(self.count.get() + 1);
            self.registered.push((addr, len));
            Ok(self.serial)
        }
        fn deregister(&mut self, h: u64) {
            assert!(self.live.remove(&h).is_some(), "double deregister of {h}");
            self.count.set(self.count.get() - 1);
        }
    }

    fn attr(max_entries: usize, max_bytes: usize) -> MrCacheAttr {
        MrCacheAttr {
            max_entries,
            max_bytes,
            monitor: MonitorKind::Disabled,
        }
    }

    fn cache(max_entries: usize, max_bytes: usize) -> (MrCache<Rec>, ManualMonitor) {
        let mon = ManualMonitor::new();
        let c = MrCache::with_monitor(attr(max_entries, max_bytes), Rec::default(), Box::new(mon.clone()));
        (c, mon)
    }

    fn serial(c: &MrCache<Rec>, r: &CacheRef) -> u64 {
        *c.handle(r).unwrap()
    }

    fn pg(n: usize) -> usize {
        BASE + n * P
    }

    const RW: Access = Access::LOCAL_WRITE;

    #[test]
    fn hit_returns_the_same_registration() {
        let (mut c, mon) = cache(16, usize::MAX);
        let a = c.lookup(pg(0) + 100, 5000, RW).unwrap();
        assert_eq!((a.addr(), a.end()), (pg(0), pg(2)), "page-aligned span");
        let b = c.lookup(pg(1) + 7, 10, RW).unwrap();
        assert_eq!(serial(&c, &a), serial(&c, &b));
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.entries, s.in_use), (1, 1, 1, 1));
        c.release(a).unwrap();
        c.release(b).unwrap();
        assert_eq!(c.stats().in_use, 0);
        let again = c.lookup(pg(0), 1, RW).unwrap();
        assert_eq!(c.stats().hits, 2);
        c.release(again).unwrap();
        assert_eq!(c.registrar().registered.len(), 1);
        drop(c);
        assert_eq!(mon.subscriptions(), 0);
    }

    #[test]
    fn miss_on_other_pages_and_missing_rights() {
        let (mut c, _mon) = cache(16, usize::MAX);
        let a = c.lookup(pg(0), P, RW).unwrap();
        let b = c.lookup(pg(10), P, RW).unwrap();
        assert_ne!(serial(&c, &a), serial(&c, &b));
        c.release(a).unwrap();
        // Same pages, more rights: a new registration with the union,
        // replacing the idle one.
        let r = c.lookup(pg(0), P, Access::REMOTE_READ).unwrap();
        assert_eq!(r.access(), RW | Access::REMOTE_READ);
        let s = c.stats();
        assert_eq!((s.misses, s.merges, s.entries), (3, 1, 2));
        c.release(r).unwrap();
        c.release(b).unwrap();
    }

    #[test]
    fn overlapping_and_adjacent_idle_entries_merge() {
        let (mut c, _mon) = cache(16, usize::MAX);
        let a = c.lookup(pg(0), 2 * P, RW).unwrap();
        let b = c.lookup(pg(4), P, RW).unwrap();
        c.release(a).unwrap();
        c.release(b).unwrap();
        // [1, 4) overlaps a = [0, 2) and touches b = [4, 5).
        let m = c.lookup(pg(1), 3 * P, RW).unwrap();
        assert_eq!((m.addr(), m.end()), (pg(0), pg(5)));
        let s = c.stats();
        assert_eq!((s.merges, s.entries, s.bytes), (2, 1, 5 * P));
        assert_eq!(c.registrar().live.len(), 1);
        c.release(m).unwrap();
        let h = c.lookup(pg(4), 10, RW).unwrap();
        assert_eq!(c.stats().hits, 1);
        c.release(h).unwrap();
    }

    #[test]
    fn adjacent_in_use_entry_is_left_alone() {
        let (mut c, _mon) = cache(16, usize::MAX);
        let a = c.lookup(pg(0), P, RW).unwrap();
        let b = c.lookup(pg(1), P, RW).unwrap();
        assert_eq!((b.addr(), b.end()), (pg(1), pg(2)));
        assert_eq!(c.stats().merges, 0);
        c.release(a).unwrap();
        c.release(b).unwrap();
    }

    #[test]
    fn overlap_with_in_use_entry_detaches_it_until_release() {
        let (mut c, _mon) = cache(16, usize::MAX);
        let old = c.lookup(pg(0), 2 * P, RW).unwrap();
        let old_serial = serial(&c, &old);
        let new = c.lookup(pg(1), 2 * P, RW).unwrap();
        assert_eq!((new.addr(), new.end()), (pg(0), pg(3)));
        assert!(
            c.registrar().live.contains_key(&old_serial),
            "in-use entry still registered"
        );
        // Lookups now find the union, never the detached entry.
        let h = c.lookup(pg(0), 1, RW).unwrap();
        assert_eq!(serial(&c, &h), serial(&c, &new));
        c.release(old).unwrap();
        assert!(
            !c.registrar().live.contains_key(&old_serial),
            "detached entry deregistered at release"
        );
        c.release(h).unwrap();
        c.release(new).unwrap();
        assert_eq!(c.stats().entries, 1);
    }

    #[test]
    fn lru_evicts_least_recently_released() {
        let (mut c, _mon) = cache(3, usize::MAX);
        let spans = [pg(0), pg(10), pg(20)];
        let refs: Vec<_> = spans.iter().map(|&a| c.lookup(a, P, RW).unwrap()).collect();
        let serials: Vec<_> = refs.iter().map(|r| serial(&c, r)).collect();
        for r in refs {
            c.release(r).unwrap();
        }
        // Touch the oldest: now pg(10) is least recently used.
        let t = c.lookup(pg(0), P, RW).unwrap();
        c.release(t).unwrap();
        let d = c.lookup(pg(30), P, RW).unwrap();
        let live = &c.registrar().live;
        assert!(live.contains_key(&serials[0]) && live.contains_key(&serials[2]));
        assert!(!live.contains_key(&serials[1]), "LRU entry evicted");
        c.release(d).unwrap();
        let e = c.lookup(pg(40), P, RW).unwrap();
        assert!(!c.registrar().live.contains_key(&serials[2]), "next LRU evicted");
        c.release(e).unwrap();
        assert_eq!(c.stats().evictions, 2);
        assert_eq!(c.stats().entries, 3);
    }

    #[test]
    fn byte_limit_evicts() {
        let (mut c, _mon) = cache(100, 3 * P);
        for i in 0..3 {
            let r = c.lookup(pg(10 * i), P, RW).unwrap();
            c.release(r).unwrap();
        }
        assert_eq!(c.stats().bytes, 3 * P);
        let r = c.lookup(pg(100), 2 * P, RW).unwrap();
        let s = c.stats();
        assert_eq!((s.evictions, s.bytes), (2, 3 * P));
        c.release(r).unwrap();
        // Larger than max_bytes: registered for the one use only, evicting
        // nothing.
        let big = c.lookup(pg(200), 4 * P, RW).unwrap();
        let s = c.stats();
        assert_eq!((s.uncached, s.bytes, s.cached_bytes, s.evictions), (1, 7 * P, 3 * P, 2));
        c.release(big).unwrap();
        assert_eq!(c.stats().bytes, 3 * P);
    }

    #[test]
    fn in_use_entries_are_never_evicted() {
        let (mut c, _mon) = cache(1, usize::MAX);
        let a = c.lookup(pg(0), P, RW).unwrap();
        let sa = serial(&c, &a);
        let b = c.lookup(pg(10), P, RW).unwrap();
        let sb = serial(&c, &b);
        assert_eq!(c.stats().entries, 2, "over the limit while both are in use");
        c.release(b).unwrap();
        assert!(!c.registrar().live.contains_key(&sb), "idle one evicted");
        assert!(c.registrar().live.contains_key(&sa), "in-use one kept");
        c.release(a).unwrap();
        assert_eq!(c.stats().entries, 1);
    }

    #[test]
    fn zero_entries_disables_caching() {
        let (mut c, mon) = cache(0, usize::MAX);
        let a = c.lookup(pg(0), P, RW).unwrap();
        c.release(a).unwrap();
        let b = c.lookup(pg(0), P, RW).unwrap();
        c.release(b).unwrap();
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.uncached, s.entries), (0, 2, 2, 0));
        assert_eq!(mon.subscriptions(), 0);
    }

    #[test]
    fn invalidate_drops_idle_now_and_in_use_at_release() {
        let (mut c, _mon) = cache(16, usize::MAX);
        let a = c.lookup(pg(0), P, RW).unwrap();
        let b = c.lookup(pg(10), P, RW).unwrap();
        let (sa, sb) = (serial(&c, &a), serial(&c, &b));
        c.release(a).unwrap();
        assert_eq!(c.invalidate(pg(0), 20 * P), 2);
        assert!(!c.registrar().live.contains_key(&sa), "idle deregistered at once");
        assert!(c.registrar().live.contains_key(&sb), "in-use kept registered");
        let b2 = c.lookup(pg(10), P, RW).unwrap();
        assert_ne!(serial(&c, &b2), sb, "invalidated entry never returned");
        c.release(b).unwrap();
        assert!(!c.registrar().live.contains_key(&sb));
        c.release(b2).unwrap();
        assert_eq!(c.stats().invalidations, 2);
        assert_eq!(c.invalidate(pg(50), 0), 0);
    }

    #[test]
    fn monitor_reports_apply_before_the_next_lookup() {
        let (mut c, mon) = cache(16, usize::MAX);
        let a = c.lookup(pg(0), 3 * P, RW).unwrap();
        let sa = serial(&c, &a);
        c.release(a).unwrap();
        mon.notify(pg(2), 1);
        let b = c.lookup(pg(0), P, RW).unwrap();
        assert_ne!(serial(&c, &b), sa);
        let s = c.stats();
        assert_eq!((s.invalidations, s.monitor_events), (1, 1));
        c.release(b).unwrap();
        drop(c);
        assert_eq!(mon.subscriptions(), 0);
    }

    #[test]
    fn unwatchable_memory_is_registered_uncached() {
        let (mut c, mon) = cache(16, usize::MAX);
        mon.set_refuse(true);
        let a = c.lookup(pg(0), P, RW).unwrap();
        let b = c.lookup(pg(0), P, RW).unwrap();
        assert_ne!(serial(&c, &a), serial(&c, &b));
        c.release(a).unwrap();
        c.release(b).unwrap();
        assert!(c.registrar().live.is_empty());
        assert_eq!(c.stats().uncached, 2);
    }

    #[test]
    fn failed_registration_leaks_nothing_and_retries_after_flush() {
        let (mut c, mon) = cache(16, usize::MAX);
        c.registrar_mut().fail_all = true;
        assert_eq!(c.lookup(pg(0), P, RW), Err(Error::Os(libc::ENOMEM)));
        assert_eq!((c.stats().entries, mon.subscriptions()), (0, 0));
        c.registrar_mut().fail_all = false;
        c.registrar_mut().fail_above = Some(2);
        for i in 0..2 {
            let r = c.lookup(pg(10 * i), P, RW).unwrap();
            c.release(r).unwrap();
        }
        // A third registration fails until the idle ones are flushed.
        let r = c.lookup(pg(100), P, RW).unwrap();
        let s = c.stats();
        assert_eq!((s.evictions, s.entries), (2, 1));
        c.release(r).unwrap();
        assert_eq!(c.flush(), 1);
        assert_eq!(mon.subscriptions(), 0);
    }

    #[test]
    fn bad_arguments_and_foreign_references() {
        let (mut c, _mon) = cache(16, usize::MAX);
        let (mut other, _m2) = cache(16, usize::MAX);
        assert!(matches!(
            c.lookup(usize::MAX - 1, 10, RW),
            Err(Error::InvalidArgument(_))
        ));
        let z = c.lookup(pg(0) + 5, 0, RW).unwrap();
        assert_eq!((z.addr(), z.end()), (pg(0), pg(1)));
        let foreign = other.lookup(pg(0), P, RW).unwrap();
        assert!(c.handle(&foreign).is_none());
        assert!(matches!(c.release(foreign), Err(Error::InvalidArgument(_))));
        c.release(z).unwrap();
    }

    #[test]
    fn drop_deregisters_everything() {
        let (mut c, mon) = cache(16, usize::MAX);
        // Never released: still in use when the cache goes.
        let _leaked = c.lookup(pg(0), P, RW).unwrap();
        let b = c.lookup(pg(5), P, RW).unwrap();
        c.release(b).unwrap();
        let count = Rc::clone(&c.registrar().count);
        assert_eq!(count.get(), 2);
        drop(c);
        assert_eq!(count.get(), 0, "in-use and idle entries deregistered");
        assert_eq!(mon.subscriptions(), 0);
    }

    fn overlapping(rec: &Rec, start: usize, end: usize) -> Vec<u64> {
        if start >= end {
            return Vec::new();
        }
        rec.live
            .iter()
            .filter(|(_, &(a, l, _))| a < end && a + l > start)
            .map(|(&s, _)| s)
            .collect()
    }

    #[derive(Debug, Clone)]
    enum Op {
        Lookup(usize, usize, u32),
        Release(usize),
        Invalidate(usize, usize),
        Notify(usize, usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0usize..40, 1usize..4 * P, 0u32..8).prop_map(|(p, l, a)| Op::Lookup(p, l, a)),
            3 => any::<usize>().prop_map(Op::Release),
            1 => (0usize..40, 0usize..6).prop_map(|(p, n)| Op::Invalidate(p, n)),
            1 => (0usize..40, 0usize..6).prop_map(|(p, n)| Op::Notify(p, n)),
        ]
    }

    proptest! {
        /// Random use against the invariants: every reference is to a live
        /// registration covering its buffer with the rights asked; cached
        /// entries are disjoint; limits hold once nothing is in use;
        /// nothing leaks.
        #[test]
        fn random_use_keeps_invariants(ops in proptest::collection::vec(op(), 1..150), max_entries in 0usize..6) {
            let (mut c, mon) = cache(max_entries, 12 * P);
            let mut held: Vec<(CacheRef, usize, usize, Access)> = Vec::new();
            // Registrations overlapping a range reported gone: never returned again.
            let mut dead = std::collections::BTreeSet::new();
            for op in ops {
                match op {
                    Op::Lookup(p, len, a) => {
                        let access = Access::from_bits(a & 7).unwrap();
                        let addr = pg(p) + (len % P);
                        let r = c.lookup(addr, len, access).unwrap();
                        prop_assert!(!dead.contains(&serial(&c, &r)), "stale registration returned");
                        held.push((r, addr, len, access));
                    }
                    Op::Release(i) if !held.is_empty() => {
                        let (r, ..) = held.swap_remove(i % held.len());
                        c.release(r).unwrap();
                    }
                    Op::Release(_) => {}
                    Op::Invalidate(p, n) => {
                        dead.extend(overlapping(c.registrar(), pg(p), pg(p + n)));
                        c.invalidate(pg(p), n * P);
                    }
                    Op::Notify(p, n) => {
                        dead.extend(overlapping(c.registrar(), pg(p), pg(p + n)));
                        mon.notify(pg(p), n * P);
                    }
                }
                let live = &c.registrar().live;
                prop_assert_eq!(live.len(), c.stats().entries);
                for (r, addr, len, access) in &held {
                    let s = serial(&c, r);
                    let &(ra, rl, racc) = live.get(&s).expect("held registration is live");
                    prop_assert!(ra <= *addr && addr + len <= ra + rl);
                    prop_assert!(racc.contains(*access));
                }
                let mut prev_end = 0;
                for (a, b, _) in c.tree.iter() {
                    prop_assert!(a >= prev_end);
                    prev_end = b;
                }
                let st = c.stats();
                prop_assert_eq!(st.cached, c.tree.len());
                if held.is_empty() {
                    prop_assert_eq!(st.entries, st.cached);
                    prop_assert!(st.cached <= max_entries);
                    prop_assert!(st.cached_bytes <= 12 * P);
                }
            }
            for (r, ..) in held.drain(..) {
                c.release(r).unwrap();
            }
            let count = Rc::clone(&c.registrar().count);
            drop(c);
            prop_assert_eq!(count.get(), 0);
            prop_assert_eq!(mon.subscriptions(), 0);
        }
    }
}
