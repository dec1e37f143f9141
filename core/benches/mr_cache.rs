//! Micro-benchmark of the memory-registration cache.
//!
//! `cargo bench -p xfer-core --bench mr_cache`
//!
//! The cache-only figures use a registrar that does nothing and a
//! `ManualMonitor`, so they measure the cache itself (tree, slab, LRU,
//! counters), not the NIC or the kernel. The `userfaultfd` figures use real
//! anonymous memory and the real monitor. Each figure is the median over
//! batches of the mean time per operation within a batch (timing single
//! operations would mostly measure the clock).

use std::hint::black_box;
use std::time::Instant;

use xfer_core::unstable::mr::tree::RangeMap;
use xfer_core::unstable::mr::{Access, CacheRef, ManualMonitor, MrCache, MrCacheAttr, Registrar, UffdMonitor};
use xfer_core::Result;

struct Nop;

impl Registrar for Nop {
    type Handle = u64;
    fn register(&mut self, addr: usize, _len: usize, _access: Access) -> Result<u64> {
        Ok(addr as u64)
    }
    fn deregister(&mut self, h: u64) {
        black_box(h);
    }
}

const PAGE: usize = 4096;
const BASE: usize = 0x1000_0000_0000;
const BATCH: usize = 1024;
const A: Access = Access::LOCAL_WRITE;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Median and minimum of the per-batch means.
fn median(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[0])
}

/// One page every other page, so that no two entries merge.
fn slot(i: usize) -> usize {
    BASE + 2 * i * PAGE
}

fn filled(n: usize, max_entries: usize) -> MrCache<Nop> {
    let attr = MrCacheAttr {
        max_entries,
        max_bytes: usize::MAX,
        ..MrCacheAttr::default()
    };
    let mut c = MrCache::with_monitor(attr, Nop, Box::new(ManualMonitor::new()));
    for i in 0..n {
        let r = c.lookup(slot(i), PAGE, A).unwrap();
        c.release(r).unwrap();
    }
    c
}

fn report(name: &str, n: usize, (median, min): (f64, f64)) {
    println!("{name:<46} {n:>7} entries {median:>9.1} ns/op median {min:>9.1} min");
}

fn hits(n: usize, rounds: usize) {
    let mut c = filled(n, n);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut refs: Vec<CacheRef> = Vec::with_capacity(BATCH);
    let mut addrs = vec![0usize; BATCH];
    let (mut look, mut pair) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        for a in addrs.iter_mut() {
            *a = slot(rng.next() as usize % n) + 100;
        }
        let t = Instant::now();
        for &a in &addrs {
            refs.push(c.lookup(black_box(a), 200, A).unwrap());
        }
        look.push(t.elapsed().as_nanos() as f64 / BATCH as f64);
        for r in refs.drain(..) {
            c.release(r).unwrap();
        }
        // Fresh addresses, so that the pair is not measured on warm entries.
        for a in addrs.iter_mut() {
            *a = slot(rng.next() as usize % n) + 100;
        }
        let t = Instant::now();
        for &a in &addrs {
            let r = c.lookup(black_box(a), 200, A).unwrap();
            c.release(r).unwrap();
        }
        pair.push(t.elapsed().as_nanos() as f64 / BATCH as f64);
    }
    report("lookup hit, uniform over all entries", n, median(look));
    report("lookup+release, uniform over all entries", n, median(pair));

    // A working set of 64 buffers scattered over the whole cache.
    let hot: Vec<usize> = (0..64).map(|_| slot(rng.next() as usize % n) + 100).collect();
    let mut v = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        for k in 0..BATCH {
            let r = c.lookup(black_box(hot[k % hot.len()]), 200, A).unwrap();
            c.release(r).unwrap();
        }
        v.push(t.elapsed().as_nanos() as f64 / BATCH as f64);
    }
    report("lookup+release, 64 hot buffers", n, median(v));

    let mut v = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..BATCH {
            let r = c.lookup(black_box(slot(n / 2) + 100), 200, A).unwrap();
            c.release(r).unwrap();
        }
        v.push(t.elapsed().as_nanos() as f64 / BATCH as f64);
    }
    report("lookup+release, one buffer", n, median(v));
    assert_eq!(c.stats().misses as usize, n, "every lookup above was a hit");

    // The tree alone, uniform: the O(log n) search without the entry.
    let mut tree = RangeMap::new();
    for i in 0..n {
        tree.insert(slot(i), slot(i) + PAGE, i).unwrap();
    }
    let mut v = Vec::new();
    for _ in 0..rounds {
        for a in addrs.iter_mut() {
            *a = slot(rng.next() as usize % n) + 100;
        }
        let t = Instant::now();
        for &a in &addrs {
            black_box(tree.find_covering(black_box(a), a + 200));
        }
        v.push(t.elapsed().as_nanos() as f64 / BATCH as f64);
    }
    report("RangeMap::find_covering, uniform", n, median(v));

    // Baseline for the choice of RangeMap: the same search on std's B-tree.
    let btree: std::collections::BTreeMap<usize, (usize, usize)> =
        (0..n).map(|i| (slot(i), (slot(i) + PAGE, i))).collect();
    let mut v = Vec::new();
    for _ in 0..rounds {
        for a in addrs.iter_mut() {
            *a = slot(rng.next() as usize % n) + 100;
        }
        let t = Instant::now();
        for &a in &addrs {
            black_box(
                btree
                    .range(..=black_box(a))
                    .next_back()
                    .filter(|(_, &(end, _))| end > a),
            );
        }
        v.push(t.elapsed().as_nanos() as f64 / BATCH as f64);
    }
    report("BTreeMap range(..=a) baseline, uniform", n, median(v));
}

/// Steady state at the entry limit: every miss registers and evicts the
/// least recently used entry.
fn misses(n: usize, rounds: usize) {
    let mut c = filled(n, n);
    let mut next = n;
    let mut v = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..BATCH {
            let r = c.lookup(black_box(slot(next)), PAGE, A).unwrap();
            c.release(r).unwrap();
            next += 1;
        }
        v.push(t.elapsed().as_nanos() as f64 / BATCH as f64);
    }
    assert_eq!(c.stats().hits, 0);
    report("miss + insert + evict LRU + release", n, median(v));
}

fn invalidations(n: usize, rounds: usize) {
    let mut c = filled(n, n);
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut v = Vec::new();
    let mut idx = vec![0usize; BATCH];
    for _ in 0..rounds {
        for i in idx.iter_mut() {
            *i = rng.next() as usize % n;
        }
        idx.sort_unstable();
        idx.dedup();
        let t = Instant::now();
        for &i in &idx {
            black_box(c.invalidate(slot(i), PAGE));
        }
        v.push(t.elapsed().as_nanos() as f64 / idx.len() as f64);
        for &i in &idx {
            let r = c.lookup(slot(i), PAGE, A).unwrap();
            c.release(r).unwrap();
        }
    }
    report("invalidate one idle entry", n, median(v));
}

/// Real memory, real monitor: a miss subscribes (UFFDIO_REGISTER), an
/// eviction unsubscribes (UFFDIO_UNREGISTER); and the cost of munmap of a
/// cached page plus the lookup that applies the invalidation.
fn with_userfaultfd(n: usize, rounds: usize) {
    let Ok(mon) = UffdMonitor::new() else {
        println!("userfaultfd unavailable: skipping the userfaultfd figures");
        return;
    };
    let pages = 4 * n;
    // SAFETY: a fresh anonymous mapping, used only by this function.
    let mem = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            pages * PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    } as usize;
    assert_ne!(mem, libc::MAP_FAILED as usize);
    let attr = MrCacheAttr {
        max_entries: n,
        max_bytes: usize::MAX,
        ..MrCacheAttr::default()
    };
    let mut c = MrCache::with_monitor(attr, Nop, Box::new(mon));
    let at = |i: usize| mem + (2 * i % pages) * PAGE;
    let mut next = 0;
    let mut v = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..BATCH.min(n) {
            let r = c.lookup(at(next), PAGE, A).unwrap();
            c.release(r).unwrap();
            next += 1;
        }
        v.push(t.elapsed().as_nanos() as f64 / BATCH.min(n) as f64);
    }
    assert_eq!(c.stats().uncached, 0);
    report("userfaultfd: miss + insert + evict + release", n, median(v));

    let mut v = Vec::new();
    for k in 0..rounds.min(200) {
        let a = mem + (2 * k + 1) * PAGE;
        let r = c.lookup(a, PAGE, A).unwrap();
        c.release(r).unwrap();
        let t = Instant::now();
        // SAFETY: one page of the mapping above; nothing refers to it.
        unsafe { libc::munmap(a as *mut libc::c_void, PAGE) };
        let r = c.lookup(mem, 1, A).unwrap();
        v.push(t.elapsed().as_nanos() as f64);
        c.release(r).unwrap();
    }
    report("userfaultfd: munmap cached page + next lookup", n, median(v));
    drop(c);
    // SAFETY: unmaps what is left of the mapping above.
    unsafe { libc::munmap(mem as *mut libc::c_void, pages * PAGE) };
}

fn main() {
    // `cargo bench` passes --bench; a quick smoke run under `cargo test`.
    // Other arguments select figures by name: hits, misses, invalidate, uffd.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = !args.iter().any(|a| a == "--bench");
    let filters: Vec<&str> = args
        .iter()
        .filter(|a| !a.starts_with("--"))
        .map(String::as_str)
        .collect();
    let on = |name: &str| filters.is_empty() || filters.contains(&name);
    let rounds = if quick { 3 } else { 300 };
    for n in [1_000, 100_000] {
        if on("hits") {
            hits(n, rounds);
        }
        if on("misses") {
            misses(n, rounds.min(100));
        }
        if on("invalidate") {
            invalidations(n, rounds.min(100));
        }
    }
    if on("uffd") {
        with_userfaultfd(1_000, rounds.min(50));
    }
}
