//! The cache against real memory and the userfaultfd monitor: freed memory
//! reused at the same address must never hit a stale registration.
//!
//! Each test skips (with a message) where userfaultfd is unavailable.

use std::ptr;

use super::*;
use crate::error::{Error, Result};

/// Stands in for a NIC registration: remembers the span, a serial number and
/// the byte in the middle of the span as it was when registered (what pinned
/// pages would hold).
#[derive(Default)]
struct Snap {
    serial: u64,
    live: usize,
    log: Vec<(u64, usize, usize, u8)>,
    /// Memory owned by the registrar, freed when `free_on_deregister` is
    /// deregistered.
    owned: Option<Vec<u8>>,
    free_on_deregister: Option<u64>,
}

impl Registrar for Snap {
    type Handle = u64;
    fn register(&mut self, addr: usize, len: usize, _access: Access) -> Result<u64> {
        self.serial += 1;
        self.live += 1;
        // SAFETY: the cache registers spans of mapped memory the test owns.
        let mid = unsafe { ptr::read_volatile((addr + len / 2) as *const u8) };
        self.log.push((self.serial, addr, len, mid));
        Ok(self.serial)
    }
    fn deregister(&mut self, h: u64) {
        self.live -= 1;
        if self.free_on_deregister == Some(h) {
            // Unmaps memory the cache was watching, from inside the cache.
            self.owned = None;
        }
    }
}

fn page() -> usize {
    // SAFETY: sysconf only reads configuration.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

fn uffd_cache() -> Option<MrCache<Snap>> {
    match UffdMonitor::new() {
        Ok(m) => Some(MrCache::with_monitor(
            MrCacheAttr::default(),
            Snap::default(),
            Box::new(m),
        )),
        Err(e) => {
            eprintln!("skipping: userfaultfd unavailable: {e}");
            None
        }
    }
}

fn map(len: usize, fill: u8) -> usize {
    // SAFETY: a new anonymous mapping where the kernel chooses.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "mmap: {}", std::io::Error::last_os_error());
    // SAFETY: `p` is a fresh writable mapping of `len` bytes.
    unsafe { ptr::write_bytes(p as *mut u8, fill, len) };
    p as usize
}

/// Maps fresh memory filled with `fill` into a hole at `addr`; false if
/// something else is there (tests run in parallel and may take the hole).
fn map_at(addr: usize, len: usize, fill: u8) -> bool {
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if p as usize == addr {
        // SAFETY: `p` is a fresh writable mapping of `len` bytes.
        unsafe { ptr::write_bytes(p as *mut u8, fill, len) };
        return true;
    }
    if p != libc::MAP_FAILED {
        // An old kernel that treats the flag as a hint.
        unmap(p as usize, len);
    }
    eprintln!("skipping: {addr:#x} was taken by another thread between munmap and mmap");
    false
}

/// Unmaps `[addr, addr + len)` and maps fresh memory filled with `fill` at
/// the same address; false (and nothing owned at `addr`) if another thread
/// took the hole.
fn unmap_and_remap(addr: usize, len: usize, fill: u8) -> bool {
    unmap(addr, len);
    map_at(addr, len, fill)
}

/// Replaces the mapping at `addr` with fresh memory in one step
/// (`MAP_FIXED`, which unmaps the old pages first).
fn replace(addr: usize, len: usize, fill: u8) {
    // SAFETY: replaces only this test's own mapping.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    assert_eq!(p as usize, addr, "mmap: {}", std::io::Error::last_os_error());
    // SAFETY: `p` is a fresh writable mapping of `len` bytes.
    unsafe { ptr::write_bytes(p as *mut u8, fill, len) };
}

fn unmap(addr: usize, len: usize) {
    // SAFETY: the tests unmap only what they mapped and no longer use.
    assert_eq!(unsafe { libc::munmap(addr as *mut libc::c_void, len) }, 0);
}

fn serial(c: &MrCache<Snap>, r: &CacheRef) -> u64 {
    *c.handle(r).expect("reference from this cache")
}

fn snapshot(c: &MrCache<Snap>, s: u64) -> u8 {
    c.registrar().log.iter().find(|l| l.0 == s).expect("logged").3
}

#[test]
fn munmap_and_remap_at_same_address_registers_anew() {
    let Some(mut c) = uffd_cache() else { return };
    let len = 4 * page();
    let a = map(len, b'A');
    let r = c.lookup(a + 10, len - 20, Access::LOCAL_WRITE).unwrap();
    let old = serial(&c, &r);
    c.release(r).unwrap();
    let hit = c.lookup(a, len, Access::LOCAL_WRITE).unwrap();
    assert_eq!(serial(&c, &hit), old, "cached while mapped");
    c.release(hit).unwrap();

    if !unmap_and_remap(a, len, b'B') {
        return;
    }
    let r = c.lookup(a + 10, len - 20, Access::LOCAL_WRITE).unwrap();
    let new = serial(&c, &r);
    assert_ne!(new, old, "stale registration returned after munmap");
    assert_eq!(snapshot(&c, new), b'B', "the new registration sees the new contents");
    assert!(c.stats().invalidations >= 1);
    c.release(r).unwrap();
    drop(c);
    unmap(a, len);
}

#[test]
fn munmap_while_in_use_is_never_returned_again() {
    let Some(mut c) = uffd_cache() else { return };
    let len = 2 * page();
    let a = map(len, 1);
    let held = c.lookup(a, len, Access::REMOTE_READ).unwrap();
    let old = serial(&c, &held);
    if !unmap_and_remap(a, len, 2) {
        c.release(held).unwrap();
        return;
    }
    let r = c.lookup(a, len, Access::REMOTE_READ).unwrap();
    assert_ne!(serial(&c, &r), old);
    assert_eq!(c.registrar().live, 2, "the in-use one stays registered until released");
    c.release(held).unwrap();
    assert_eq!(c.registrar().live, 1);
    c.release(r).unwrap();
    drop(c);
    unmap(a, len);
}

#[test]
fn munmap_on_another_thread_applies_before_next_lookup() {
    let Some(mut c) = uffd_cache() else { return };
    let len = page();
    let a = map(len, 1);
    let r = c.lookup(a, len, Access::LOCAL_WRITE).unwrap();
    let old = serial(&c, &r);
    c.release(r).unwrap();
    if !std::thread::spawn(move || unmap_and_remap(a, len, 2)).join().unwrap() {
        return;
    }
    let r = c.lookup(a, len, Access::LOCAL_WRITE).unwrap();
    assert_ne!(serial(&c, &r), old);
    c.release(r).unwrap();
    drop(c);
    unmap(a, len);
}

#[test]
fn freed_large_vec_reused_at_same_address() {
    let Some(mut c) = uffd_cache() else { return };
    // Above glibc's largest dynamic mmap threshold (32 MiB), so free() unmaps.
    const LEN: usize = 64 << 20;
    let v = vec![7u8; LEN];
    let addr = v.as_ptr() as usize;
    let r = c.lookup(addr, LEN, Access::LOCAL_WRITE).unwrap();
    let old = serial(&c, &r);
    c.release(r).unwrap();
    drop(v);
    let w = vec![9u8; LEN];
    let r = c.lookup(w.as_ptr() as usize, LEN, Access::LOCAL_WRITE).unwrap();
    assert_ne!(serial(&c, &r), old, "freed memory must not hit the old registration");
    assert!(c.stats().invalidations >= 1, "free() reported: {:?}", c.stats());
    if w.as_ptr() as usize == addr {
        assert_eq!(snapshot(&c, serial(&c, &r)), 9);
    } else {
        eprintln!("note: allocator placed the second Vec elsewhere");
    }
    c.release(r).unwrap();
}

#[test]
fn madvise_dontneed_invalidates() {
    let Some(mut c) = uffd_cache() else { return };
    let len = 4 * page();
    let a = map(len, 3);
    let r = c.lookup(a, len, Access::LOCAL_WRITE).unwrap();
    let old = serial(&c, &r);
    c.release(r).unwrap();
    // SAFETY: the range is this test's mapping.
    assert_eq!(
        unsafe { libc::madvise((a + page()) as *mut libc::c_void, page(), libc::MADV_DONTNEED) },
        0
    );
    let r = c.lookup(a, page(), Access::LOCAL_WRITE).unwrap();
    assert_ne!(serial(&c, &r), old);
    c.release(r).unwrap();
    drop(c);
    unmap(a, len);
}

#[test]
fn mremap_move_invalidates_old_range() {
    let Some(mut c) = uffd_cache() else { return };
    let len = 2 * page();
    let a = map(len, 4);
    let r = c.lookup(a, len, Access::LOCAL_WRITE).unwrap();
    let old = serial(&c, &r);
    c.release(r).unwrap();
    // SAFETY: moves this test's mapping; `a` is not used through old pointers.
    let b = unsafe { libc::mremap(a as *mut libc::c_void, len, 64 * len, libc::MREMAP_MAYMOVE) };
    assert_ne!(b, libc::MAP_FAILED);
    let b = b as usize;
    if b == a {
        // Grown in place: the old pages stay, and so does the entry.
        let r = c.lookup(a, len, Access::LOCAL_WRITE).unwrap();
        assert_eq!(serial(&c, &r), old);
        c.release(r).unwrap();
    } else if map_at(a, len, 5) {
        let r = c.lookup(a, len, Access::LOCAL_WRITE).unwrap();
        assert_ne!(serial(&c, &r), old, "moved-away memory must not hit");
        assert_eq!(snapshot(&c, serial(&c, &r)), 5);
        c.release(r).unwrap();
        unmap(a, len);
    }
    drop(c);
    unmap(b, 64 * len);
}

#[test]
fn file_backed_memory_is_registered_uncached() {
    let Some(mut c) = uffd_cache() else { return };
    let path = std::env::temp_dir().join(format!("xfer-mr-test-{}", std::process::id()));
    let f = std::fs::File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    let len = page();
    f.set_len(len as u64).unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: a shared mapping of a file this test created.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    let a = c.lookup(p as usize, len, Access::LOCAL_WRITE).unwrap();
    let b = c.lookup(p as usize, len, Access::LOCAL_WRITE).unwrap();
    assert_ne!(serial(&c, &a), serial(&c, &b), "unwatchable memory is never reused");
    assert_eq!(c.stats().uncached, 2);
    c.release(a).unwrap();
    c.release(b).unwrap();
    assert_eq!(c.registrar().live, 0);
    drop(c);
    unmap(p as usize, len);
}

/// Regression guard for the deadlock the monitor design avoids: a registrar
/// whose deregistration frees (unmaps) watched memory, on the cache's thread.
#[test]
fn deregister_may_unmap_watched_memory() {
    let Some(mut c) = uffd_cache() else { return };
    const LEN: usize = 64 << 20;
    let v = vec![1u8; LEN];
    let addr = v.as_ptr() as usize;
    c.registrar_mut().owned = Some(v);
    let r = c.lookup(addr, LEN, Access::LOCAL_WRITE).unwrap();
    c.registrar_mut().free_on_deregister = Some(serial(&c, &r));
    c.release(r).unwrap();
    assert_eq!(c.invalidate(addr, LEN), 1);
    assert!(c.registrar().owned.is_none());
    // The unmap event for the already-dropped entry is harmless.
    let other = map(page(), 0);
    let r = c.lookup(other, 1, Access::LOCAL_WRITE).unwrap();
    c.release(r).unwrap();
    drop(c);
    unmap(other, page());
}

/// `/proc/self/smaps` marks userfaultfd write-protect registration as `uw`.
fn uffd_wp_flag(addr: usize) -> Option<bool> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ') {
            if let Some((lo, hi)) = range.split_once('-') {
                if let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16)) {
                    inside = lo <= addr && addr < hi;
                    continue;
                }
            }
        }
        if inside {
            if let Some(flags) = line.strip_prefix("VmFlags:") {
                return Some(flags.split_whitespace().any(|f| f == "uw"));
            }
        }
    }
    None
}

#[test]
fn evicted_memory_is_no_longer_watched() {
    let Some(mut c) = uffd_cache() else { return };
    let len = 2 * page();
    let a = map(len, 1);
    let r = c.lookup(a, len, Access::LOCAL_WRITE).unwrap();
    let Some(watched) = uffd_wp_flag(a) else {
        eprintln!("skipping: no VmFlags in /proc/self/smaps");
        c.release(r).unwrap();
        return;
    };
    assert!(watched, "cached span registered with userfaultfd");
    c.release(r).unwrap();
    assert_eq!(c.flush(), 1);
    assert_eq!(uffd_wp_flag(a), Some(false), "unregistered once no entry needs it");
    drop(c);
    unmap(a, len);
}

#[test]
fn disabled_monitor_caches_nothing() {
    let attr = MrCacheAttr {
        monitor: MonitorKind::Disabled,
        ..MrCacheAttr::default()
    };
    let mut c = MrCache::new(attr, Snap::default());
    assert_eq!(c.monitor_name(), "disabled");
    let a = map(page(), 0);
    let r = c.lookup(a, 1, Access::LOCAL_WRITE).unwrap();
    c.release(r).unwrap();
    let r = c.lookup(a, 1, Access::LOCAL_WRITE).unwrap();
    c.release(r).unwrap();
    let s = c.stats();
    assert_eq!((s.hits, s.uncached, s.entries), (0, 2, 0));
    assert_eq!(
        c.lookup(usize::MAX, 2, Access::LOCAL_WRITE).err(),
        Some(Error::InvalidArgument("buffer wraps around the address space"))
    );
    drop(c);
    unmap(a, page());
}

#[test]
fn two_caches_watching_the_same_memory_both_see_the_unmap() {
    let (Some(mut a), Some(mut b)) = (uffd_cache(), uffd_cache()) else {
        return;
    };
    let len = 2 * page();
    let m = map(len, 1);
    let ra = a.lookup(m, len, Access::LOCAL_WRITE).unwrap();
    let rb = b.lookup(m, len, Access::LOCAL_WRITE).unwrap();
    let (sa, sb) = (serial(&a, &ra), serial(&b, &rb));
    a.release(ra).unwrap();
    b.release(rb).unwrap();
    // A drops its entry; the range must stay watched for B.
    assert_eq!(a.flush(), 1);
    if !unmap_and_remap(m, len, 2) {
        return;
    }
    let rb = b.lookup(m, len, Access::LOCAL_WRITE).unwrap();
    assert_ne!(serial(&b, &rb), sb, "B still watched the range after A let go");
    let ra = a.lookup(m, len, Access::LOCAL_WRITE).unwrap();
    assert_ne!(serial(&a, &ra), sa);
    a.release(ra).unwrap();
    b.release(rb).unwrap();
    drop((a, b));
    unmap(m, len);
}

#[test]
fn more_unmaps_than_the_queue_holds_invalidate_everything() {
    let Some(mut c) = uffd_cache() else { return };
    let n = 2 * Events::CAPACITY;
    let m = map(2 * n * page(), 1);
    for i in 0..n {
        let r = c.lookup(m + 2 * i * page(), page(), Access::LOCAL_WRITE).unwrap();
        c.release(r).unwrap();
    }
    assert_eq!(c.stats().cached, n);
    // Separate ranges, so they cannot coalesce in the queue.
    for i in 0..n {
        unmap(m + 2 * i * page(), page());
    }
    c.process_events();
    assert_eq!(c.stats().cached, 0, "every unmapped entry dropped: {:?}", c.stats());
    assert_eq!(c.registrar().live, 0);
    drop(c);
    for i in 0..n {
        unmap(m + (2 * i + 1) * page(), page());
    }
}

#[test]
fn repeated_free_and_reuse_never_hits_stale_entries() {
    let Some(mut c) = uffd_cache() else { return };
    let len = 3 * page();
    let a = map(len, 0);
    let mut last = 0;
    for round in 1..=200u8 {
        let r = c.lookup(a + 1, len - 2, Access::LOCAL_WRITE).unwrap();
        let s = serial(&c, &r);
        assert_ne!(s, last, "round {round}: stale registration");
        assert_eq!(
            snapshot(&c, s),
            round - 1,
            "round {round}: registration saw old contents"
        );
        last = s;
        c.release(r).unwrap();
        // One step (MAP_FIXED), so that no parallel test can take the hole.
        std::thread::spawn(move || replace(a, len, round)).join().unwrap();
    }
    drop(c);
    unmap(a, len);
}
