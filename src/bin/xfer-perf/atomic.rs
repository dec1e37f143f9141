//! Remote atomics on one 64-bit element of the server's memory:
//! `atomic_lat` (one fetch-and-add at a time, its whole round trip, as
//! `ucx_perftest -t ucp_fadd`), `atomic_cas_lat` (one compare-and-swap of
//! the count so far for the next, as `ucp_cswap`) and `atomic_rate` (non-fetching adds with
//! at most `window` in flight, as `ucx_perftest -t ucp_add`: operations per
//! second; each completes when sent, and the clock stops when a fetch
//! behind the last one, as UCX's closing flush, returns);
//! `atomic_rate_dc` the same adds completed by the target's answer
//! (`Endpoint::atomic_delivered`). The server only makes progress.
//!
//! Per phase: the server registers an 8-byte region holding 0 and answers
//! `ready <packed rkey in hex>`; every operation adds 1 (a compare-and-swap
//! of `i` for `i + 1`). The client ends the
//! phase with `end`; the server checks that the element counts every
//! operation and answers `ok`.

use std::time::Instant;

use xfer::{Access, AtomicKind, Datatype, Domain, Endpoint, PeerAddr, RemoteKey};

use crate::clock::Timer;
use crate::control::{hear, say, SEND};
use crate::driver::{Driver, Result};
use crate::hex::{hex, unhex};
use crate::plan::{Phase, Test};

/// The context of the fetch that waits for the adds before it.
const FLUSH: u64 = 6;
use crate::progress::Progress;

/// The element's size (a `u64`).
pub const SIZE: usize = 8;

/// The server's part of one atomic phase.
pub fn serve(ep: &Endpoint, d: &mut Driver, domain: &Domain, peer: PeerAddr, p: &Phase) -> Result<()> {
    let mr = domain
        .register(vec![0; SIZE], Access::REMOTE_READ | Access::REMOTE_WRITE)
        .map_err(|r| format!("registering memory: {}", r.error))?;
    say(ep, d, peer, &format!("ready {}", hex(&mr.pack_rkey())))?;
    let end = hear(ep, d, peer)?;
    if end != "end" {
        return Err(format!("expected end, got {end:?}"));
    }
    let bytes = mr.to_vec().map_err(|e| e.to_string())?;
    let count = u64::from_ne_bytes(bytes[..SIZE].try_into().map_err(|_| "short region")?);
    let want = (p.warmup + p.iters) as u64;
    say(ep, d, peer, if count == want { "ok" } else { "mismatch" })
}

/// The client's part: latency samples (µs) for `atomic_lat`, else the
/// seconds the measured operations took.
pub fn client(
    ep: &Endpoint,
    d: &mut Driver,
    peer: PeerAddr,
    p: &Phase,
    ready: &str,
    prog: &mut Progress,
) -> Result<(Vec<f64>, f64)> {
    let h = ready
        .strip_prefix("ready ")
        .ok_or_else(|| format!("expected ready, got {ready:?}"))?;
    let theirs = RemoteKey::unpack(&unhex(h)?).map_err(|e| format!("remote key: {e}"))?;
    let out = match p.test {
        Test::AtomicLat => (fetch_lat(ep, d, peer, p, &theirs, prog, false)?, 0.0),
        Test::AtomicCasLat => (fetch_lat(ep, d, peer, p, &theirs, prog, true)?, 0.0),
        t => {
            let delivered = t == Test::AtomicRateDc;
            (Vec::new(), add_rate(ep, d, peer, p, &theirs, delivered, prog)?)
        }
    };
    say(ep, d, peer, "end")?;
    match hear(ep, d, peer)?.as_str() {
        "ok" => Ok(out),
        other => Err(format!("{}: server found {other:?}", p.test.name())),
    }
}

fn post_err(e: xfer::Error) -> String {
    format!("posting an atomic: {e}")
}

/// One fetch-and-add (or, `cas`, compare-and-swap of the count for the
/// next) at a time; each must fetch the count so far.
fn fetch_lat(
    ep: &Endpoint,
    d: &mut Driver,
    peer: PeerAddr,
    p: &Phase,
    theirs: &RemoteKey,
    prog: &mut Progress,
    cas: bool,
) -> Result<Vec<f64>> {
    let what = if cas { "compare-and-swap" } else { "fetch-and-add" };
    let mut timer = Timer::new(p.iters);
    for i in 0..p.warmup + p.iters {
        let n = i as u64;
        let t0 = timer.now();
        match cas {
            true => ep.compare_atomic(peer, Datatype::U64, n, n + 1, theirs, 0, SEND),
            false => ep.fetch_atomic(peer, AtomicKind::Sum, Datatype::U64, 1, theirs, 0, SEND),
        }
        .map_err(post_err)?;
        let c = d.next(what)?;
        if c.context != SEND || c.data != n {
            return Err(format!("{what} {i}: completion {} fetched {}", c.context, c.data));
        }
        if i >= p.warmup {
            timer.record(t0);
        }
        prog.tick(i + 1);
    }
    Ok(timer.micros(1.0))
}

/// Non-fetching adds, at most `window` in flight; each completes when sent
/// or, `delivered`, with the target's answer.
fn add_rate(
    ep: &Endpoint,
    d: &mut Driver,
    peer: PeerAddr,
    p: &Phase,
    theirs: &RemoteKey,
    delivered: bool,
    prog: &mut Progress,
) -> Result<f64> {
    let total = p.warmup + p.iters;
    let (mut in_flight, mut start) = (0usize, None);
    for i in 0..total {
        if i == p.warmup {
            // The warm-up's adds are applied before the clock starts.
            while in_flight > 0 {
                collect(d, &mut in_flight)?;
            }
            flush(ep, d, peer, theirs, i)?;
            start = Some(Instant::now());
        }
        while in_flight >= p.window {
            collect(d, &mut in_flight)?;
        }
        match delivered {
            true => ep.atomic_delivered(peer, AtomicKind::Sum, Datatype::U64, 1, theirs, 0, SEND),
            false => ep.atomic(peer, AtomicKind::Sum, Datatype::U64, 1, theirs, 0, SEND),
        }
        .map_err(post_err)?;
        in_flight += 1;
        prog.tick(i + 1);
    }
    while in_flight > 0 {
        collect(d, &mut in_flight)?;
    }
    flush(ep, d, peer, theirs, total)?;
    Ok(start.map_or(0.0, |s| s.elapsed().as_secs_f64()))
}

/// Takes one add's completion.
fn collect(d: &mut Driver, in_flight: &mut usize) -> Result<()> {
    match d.next("atomic add")?.context {
        SEND => {
            *in_flight -= 1;
            Ok(())
        }
        other => Err(format!("atomic add: unexpected completion {other}")),
    }
}

/// A fetch behind every add posted: it returns once the target applied
/// them all (the `done` so far), as UCX's flush does.
fn flush(ep: &Endpoint, d: &mut Driver, peer: PeerAddr, theirs: &RemoteKey, done: usize) -> Result<()> {
    ep.fetch_atomic(peer, AtomicKind::Read, Datatype::U64, 0, theirs, 0, FLUSH)
        .map_err(post_err)?;
    let c = d.next("the closing fetch")?;
    if c.context != FLUSH || c.data != done as u64 {
        return Err(format!(
            "closing fetch: completion {} fetched {}, want {done}",
            c.context, c.data
        ));
    }
    Ok(())
}
