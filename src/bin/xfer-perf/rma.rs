//! RMA: `put_lat` (ping-pong of writes with immediate data, as
//! `ib_write_lat`), `get_lat` (one read at a time, its whole round trip, as
//! `ib_read_lat`), `put_bw` and `get_bw` (a window of writes or reads into
//! one region of the server, as `ib_write_bw`/`ib_read_bw`). For every test
//! but `put_lat` the server only makes progress.
//!
//! Per phase: the server registers a region of the phase's size and answers
//! `ready <packed rkey in hex>`; for `put_lat` the client then sends
//! `rkey <hex>` for its own region. The client ends the phase with `end`;
//! the server checks what landed in its region and answers `ok`.

use std::time::Instant;

use xfer::{Access, Domain, Endpoint, Flags, MemoryRegion, PeerAddr, RemoteKey, RmaKind};

use crate::clock::Timer;
use crate::control::{hear, say, RECV, SEND};
use crate::driver::{pattern, Driver, Result};
use crate::hex::{hex, unhex};
use crate::plan::{Phase, Test};
use crate::pool::Pool;
use crate::progress::Progress;

/// Context of target-side completions (immediate data of a peer's write).
const REMOTE: u64 = 0;

fn register(domain: &Domain, buf: Vec<u8>) -> Result<MemoryRegion> {
    domain
        .register(buf, Access::REMOTE_READ | Access::REMOTE_WRITE)
        .map_err(|r| format!("registering memory: {}", r.error))
}

fn rkey_from(text: &str, prefix: &str) -> Result<RemoteKey> {
    let h = text
        .strip_prefix(prefix)
        .ok_or_else(|| format!("expected {prefix:?}, got {text:?}"))?;
    RemoteKey::unpack(&unhex(h)?).map_err(|e| format!("remote key: {e}"))
}

fn post_err(e: xfer::Rejected<Vec<u8>>) -> String {
    format!("posting an RMA operation: {}", e.error)
}

/// The server's part of one RMA phase.
pub fn serve(ep: &Endpoint, d: &mut Driver, domain: &Domain, peer: PeerAddr, p: &Phase) -> Result<()> {
    let reads = matches!(p.test, Test::GetBw | Test::GetLat);
    let init = if reads { pattern(p.size) } else { vec![0; p.size] };
    let mr = register(domain, init)?;
    say(ep, d, peer, &format!("ready {}", hex(&mr.pack_rkey())))?;
    if p.test == Test::PutLat {
        let theirs = rkey_from(&hear(ep, d, peer)?, "rkey ")?;
        let mut sbuf = Some(pattern(p.size));
        for _ in 0..p.warmup + p.iters {
            let mut remote = false;
            while !remote {
                let c = d.next("put ping-pong (server)")?;
                match c.context {
                    REMOTE if c.flags.contains(Flags::REMOTE_CQ_DATA) => remote = true,
                    SEND => sbuf = c.buf.take(),
                    other => return Err(format!("put ping-pong: unexpected completion {other}")),
                }
            }
            let b = sbuf.take().ok_or("put ping-pong: send buffer still in flight")?;
            ep.write_data(peer, b, &theirs, 0, 1, SEND).map_err(post_err)?;
        }
        while sbuf.is_none() {
            sbuf = d.next("put ping-pong (server)")?.buf.take();
        }
    }
    let end = hear(ep, d, peer)?;
    if end != "end" {
        return Err(format!("expected end, got {end:?}"));
    }
    let ok = reads || mr.to_vec().map_err(|e| e.to_string())? == pattern(p.size);
    say(ep, d, peer, if ok { "ok" } else { "mismatch" })
}

/// The client's part: latency samples (µs) for `put_lat`, else the seconds
/// the measured rounds took.
pub fn client(
    ep: &Endpoint,
    d: &mut Driver,
    domain: &Domain,
    peer: PeerAddr,
    p: &Phase,
    ready: &str,
    prog: &mut Progress,
) -> Result<(Vec<f64>, f64)> {
    let theirs = rkey_from(ready, "ready ")?;
    let out = match p.test {
        Test::PutLat => (put_lat(ep, d, domain, peer, p, &theirs, prog)?, 0.0),
        Test::GetLat => (get_lat(ep, d, peer, p, &theirs, prog)?, 0.0),
        _ => (Vec::new(), stream(ep, d, peer, p, &theirs, prog)?),
    };
    say(ep, d, peer, "end")?;
    match hear(ep, d, peer)?.as_str() {
        "ok" => Ok(out),
        other => Err(format!("{} {} B: server found {other:?}", p.test.name(), p.size)),
    }
}

fn put_lat(
    ep: &Endpoint,
    d: &mut Driver,
    domain: &Domain,
    peer: PeerAddr,
    p: &Phase,
    theirs: &RemoteKey,
    prog: &mut Progress,
) -> Result<Vec<f64>> {
    let mine = register(domain, vec![0; p.size])?;
    say(ep, d, peer, &format!("rkey {}", hex(&mine.pack_rkey())))?;
    let mut sbuf = Some(pattern(p.size));
    let mut timer = Timer::new(p.iters);
    for i in 0..p.warmup + p.iters {
        let t0 = timer.now();
        let b = sbuf.take().ok_or("put ping-pong: send buffer still in flight")?;
        ep.write_data(peer, b, theirs, 0, 1, SEND).map_err(post_err)?;
        let mut echoed = false;
        while !echoed || sbuf.is_none() {
            let c = d.next("put ping-pong")?;
            match c.context {
                REMOTE if c.flags.contains(Flags::REMOTE_CQ_DATA) => echoed = true,
                SEND => sbuf = c.buf.take(),
                other => return Err(format!("put ping-pong: unexpected completion {other}")),
            }
        }
        if i >= p.warmup {
            timer.record(t0);
        }
        prog.tick(i + 1);
    }
    if mine.to_vec().map_err(|e| e.to_string())? != pattern(p.size) {
        return Err(format!("put_lat {} B: the echoed data differs", p.size));
    }
    Ok(timer.micros(2.0))
}

fn get_lat(
    ep: &Endpoint,
    d: &mut Driver,
    peer: PeerAddr,
    p: &Phase,
    theirs: &RemoteKey,
    prog: &mut Progress,
) -> Result<Vec<f64>> {
    let mut rbuf = Some(vec![0; p.size]);
    let mut timer = Timer::new(p.iters);
    for i in 0..p.warmup + p.iters {
        let t0 = timer.now();
        let b = rbuf.take().ok_or("get latency: read buffer still in flight")?;
        ep.read(peer, b, theirs, 0, RECV).map_err(post_err)?;
        while rbuf.is_none() {
            let c = d.next("get latency")?;
            match c.context {
                RECV => rbuf = c.buf.take(),
                other => return Err(format!("get latency: unexpected completion {other}")),
            }
        }
        if i >= p.warmup {
            timer.record(t0);
        }
        prog.tick(i + 1);
    }
    if rbuf.as_deref() != Some(&pattern(p.size)[..]) {
        return Err(format!("get_lat {} B: read data differs from the pattern", p.size));
    }
    Ok(timer.micros(1.0))
}

fn stream(
    ep: &Endpoint,
    d: &mut Driver,
    peer: PeerAddr,
    p: &Phase,
    theirs: &RemoteKey,
    prog: &mut Progress,
) -> Result<f64> {
    let read = p.test == Test::GetBw;
    let fill = if read { vec![0; p.size] } else { pattern(p.size) };
    let mut pool = Pool::new(p.buffers, p.window, fill);
    let kind = if read { RmaKind::Read } else { RmaKind::Write };
    let (mut start, mut checked) = (None, false);
    let total = p.warmup + p.iters;
    let mut done = 0;
    while done < total {
        if done >= p.warmup && start.is_none() {
            start = Some(Instant::now());
        }
        let n = p
            .window
            .min(if done < p.warmup { p.warmup - done } else { total - done });
        for _ in 0..n {
            pool.rma(ep, kind, peer, theirs, if read { RECV } else { SEND }, p.size)?;
        }
        for _ in 0..n {
            let c = d.next(p.test.name())?;
            if let Some(b) = pool.complete(c)?.filter(|_| read && !checked) {
                if b != pattern(p.size) {
                    return Err(format!("get_bw {} B: read data differs from the pattern", p.size));
                }
                checked = true;
            }
        }
        done += n;
        prog.tick(done);
    }
    Ok(start.map_or(0.0, |s| s.elapsed().as_secs_f64()))
}
