//! The cost of xfer's small-message path, without the noise of waiting:
//! a tagged ping-pong between two endpoints of one process, driven by one
//! thread. Loopback TCP delivers within the sending call, so almost every
//! poll finds its message and an instruction count (callgrind) of
//! [`measured`] (its loop) divided by the iterations is the software cost of one
//! round trip: two sends, two receives, their completions.
//!
//! ```text
//! cargo build --release --example path_cost
//! valgrind --tool=callgrind --toggle-collect='path_cost::measured*' \
//!     target/release/examples/path_cost [ITERS] [SIZE]
//! ```
//!
//! Over verbs it runs in the Soft-RoCE guest: `bench/verbs-path-cost.sh`
//! (rxe on loopback delivers within the posting call too). Connection set-up
//! and warm-up run in [`warm_up`], outside the count.
//!
//! It prints the polls that found nothing, so a count polluted by waiting
//! shows as such (docs/PERFORMANCE.md, "Software cost of the small-message path").
//!
//! With a third argument `fadd` it counts one 64-bit fetch-and-add round
//! trip instead ([`fadds`]): `a` fetches-and-adds 1 on an 8-byte
//! region of `b`'s, and each must fetch the count so far. Over verbs in the
//! `device` atomic mode (`XFER_ATOMIC_MODE=device`, or `auto` on rxe) that is
//! one `IBV_WR_ATOMIC_FETCH_AND_ADD` once the region is granted (during the
//! warm-up), its completion, and the engine's report of it:
//! `--toggle-collect='path_cost::measured*'` counts the same way.
//!
//! Then it polls one side `ITERS` times with nothing arriving ([`idle`]):
//! `--toggle-collect='path_cost::idle*'` counts what a busy-polling loop
//! spends per turn around its `recv` that finds nothing, the time a message
//! arriving waits for on average (half a turn).

use xfer::{
    Access, AtomicKind, Completion, CompletionQueue, CqAttr, Datatype, Endpoint, EndpointAttr, PeerAddr, RemoteKey,
};

const TAG: u64 = 7;
const SEND: u64 = 1;
const RECV: u64 = 2;
const FADD: u64 = 3;

struct Side {
    ep: Endpoint,
    cq: CompletionQueue,
    peer: PeerAddr,
    sbuf: Option<Vec<u8>>,
    rbuf: Option<Vec<u8>>,
}

/// Polls `s` once, taking back the buffers its completions carry; returns how many.
fn drain(s: &mut Side, out: &mut [Completion]) -> Result<usize, String> {
    let n = s.cq.poll(out).map_err(|e| e.to_string())?;
    for c in &mut out[..n] {
        c.result
            .clone()
            .map_err(|e| format!("operation {} failed: {e}", c.context))?;
        match c.context {
            SEND => s.sbuf = c.buf.take(),
            RECV => s.rbuf = c.buf.take(),
            other => return Err(format!("unexpected completion {other}")),
        }
    }
    Ok(n)
}

/// Polls `s` until the buffers asked for are back, progressing `other` too
/// whenever `s` finds nothing (connection set-up needs both); returns the
/// empty polls.
fn reap(s: &mut Side, other: &mut Side, out: &mut [Completion], send: bool, recv: bool) -> Result<u64, String> {
    let mut empty = 0;
    while (recv && s.rbuf.is_none()) || (send && s.sbuf.is_none()) {
        if drain(s, out)? == 0 {
            empty += 1;
            drain(other, out)?;
        }
    }
    Ok(empty)
}

fn send(s: &mut Side) -> Result<(), String> {
    let b = s.sbuf.take().ok_or("send buffer in flight")?;
    s.ep.tsend(s.peer, TAG, b, SEND).map_err(|r| r.error.to_string())
}

fn recv(s: &mut Side) -> Result<(), String> {
    let b = s.rbuf.take().ok_or("receive buffer in flight")?;
    s.ep.trecv(s.peer, TAG, 0, b, RECV).map_err(|r| r.error.to_string())
}

/// Runs the loop `run`, counted: `--toggle-collect='path_cost::measured*'`
/// counts it and everything it calls.
#[inline(never)]
fn measured<T>(run: impl FnOnce() -> T) -> T {
    run()
}

/// Runs the loop `run` outside [`measured`]: connection set-up and warm-up
/// stay out of the count.
#[inline(never)]
fn warm_up<T>(run: impl FnOnce() -> T) -> T {
    run()
}

/// `iters` round trips from `a` to `b` and back; returns the empty polls.
#[inline(always)]
fn round_trips(a: &mut Side, b: &mut Side, iters: u64, out: &mut [Completion]) -> Result<u64, String> {
    let mut empty = 0;
    for _ in 0..iters {
        send(a)?;
        recv(a)?;
        empty += reap(b, a, out, false, true)?;
        send(b)?;
        recv(b)?;
        empty += reap(a, b, out, true, true)?;
        // b's send completed when it was written; take it back.
        empty += reap(b, a, out, true, false)?;
    }
    Ok(empty)
}

/// One fetch-and-add at a time from `a` on `b`'s word, polling `b`
/// whenever `a` finds nothing; the `i`-th fetches `from + i`. Returns the
/// empty polls.
#[inline(always)]
fn fadds(
    a: &mut Side,
    b: &mut Side,
    word: &RemoteKey,
    from: u64,
    iters: u64,
    out: &mut [Completion],
) -> Result<u64, String> {
    let mut empty = 0;
    for i in from..from + iters {
        a.ep.fetch_atomic(a.peer, AtomicKind::Sum, Datatype::U64, 1, word, 0, FADD)
            .map_err(|e| e.to_string())?;
        loop {
            let n = a.cq.poll(out).map_err(|e| e.to_string())?;
            if n == 0 {
                empty += 1;
                drain(b, out)?;
                continue;
            }
            let c = &out[0];
            c.result.clone().map_err(|e| format!("fetch-and-add {i} failed: {e}"))?;
            if n != 1 || c.context != FADD || c.data != i {
                return Err(format!(
                    "fetch-and-add {i}: completion {} fetched {}",
                    c.context, c.data
                ));
            }
            break;
        }
    }
    Ok(empty)
}

/// Polls `cq` `n` times while nothing arrives; every poll must find nothing.
#[inline(never)]
fn idle(cq: &CompletionQueue, out: &mut [Completion], n: u64) -> Result<(), String> {
    for _ in 0..n {
        if cq.poll(out).map_err(|e| e.to_string())? != 0 {
            return Err("a completion while idle".into());
        }
    }
    Ok(())
}

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let iters: u64 = args.next().map_or(Ok(100_000), |v| v.parse()).map_err(|_| "ITERS")?;
    let size: usize = args.next().map_or(Ok(64), |v| v.parse()).map_err(|_| "SIZE")?;
    let fadd = match args.next().as_deref() {
        None => false,
        Some("fadd") => true,
        Some(other) => return Err(format!("unknown mode {other:?} (fadd)")),
    };
    let domain = xfer::open_default().map_err(|e| e.to_string())?;
    let mut attr = EndpointAttr::from_env();
    if xfer::TcpAttr::from_env().addr.is_none() {
        attr.params.set("tcp.addr", "127.0.0.1");
    }
    let open = || -> Result<(Endpoint, CompletionQueue), String> {
        let cq = domain.cq(&CqAttr::from_env()).map_err(|e| e.to_string())?;
        let av = domain.av().map_err(|e| e.to_string())?;
        let ep = domain.endpoint(&cq, &av, &attr).map_err(|e| e.to_string())?;
        Ok((ep, cq))
    };
    let (ea, ca) = open()?;
    let (eb, cb) = open()?;
    let pa = ea.av().insert(eb.name().as_bytes()).map_err(|e| e.to_string())?;
    let pb = eb.av().insert(ea.name().as_bytes()).map_err(|e| e.to_string())?;
    let side = |ep, cq, peer| Side {
        ep,
        cq,
        peer,
        sbuf: Some(vec![0x5a; size]),
        rbuf: Some(vec![0; size]),
    };
    let (mut a, mut b) = (side(ea, ca, pa), side(eb, cb, pb));
    let mut out: Vec<Completion> = (0..16).map(|_| Completion::default()).collect();
    if fadd {
        let region = domain
            .register(vec![0; 8], Access::REMOTE_READ | Access::REMOTE_WRITE)
            .map_err(|r| r.error.to_string())?;
        let word = RemoteKey::unpack(&region.pack_rkey()).map_err(|e| e.to_string())?;
        warm_up(|| fadds(&mut a, &mut b, &word, 0, 1000, &mut out))?;
        let empty = measured(|| fadds(&mut a, &mut b, &word, 1000, iters, &mut out))?;
        idle(&a.cq, &mut out, iters)?;
        println!(
            "path_cost: {iters} fetch-and-adds over {} (atomic mode {:?}), {empty} empty polls ({:.3} per round trip); then {iters} idle polls",
            domain.provider(),
            domain.atomic_caps().mode,
            empty as f64 / iters as f64
        );
        return Ok(());
    }
    recv(&mut b)?;
    // Connect and warm up outside the measured function.
    warm_up(|| round_trips(&mut a, &mut b, 1000, &mut out))?;
    let empty = measured(|| round_trips(&mut a, &mut b, iters, &mut out))?;
    // b has the next iteration's receive posted and its connection hot: it
    // now polls for a message that does not come.
    idle(&b.cq, &mut out, iters)?;
    println!(
        "path_cost: {iters} round trips of {size} B over {}, {empty} empty polls ({:.3} per round trip); then {iters} idle polls",
        domain.provider(),
        empty as f64 / iters as f64
    );
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("path_cost: {e}");
        std::process::exit(1);
    }
}
