//! Cost of the async layer: a tagged ping-pong between two endpoints of one
//! process, first with the polling API (one thread busy-polls both queues),
//! then with `xfer::aio` futures on a current-thread tokio runtime (each side
//! a task; the runtime sleeps in epoll when both wait), in the same run.
//! Prints the half-round-trip p50 and p99 of each and their ratio.
//!
//! ```text
//! XFER_TCP_ADDR=127.0.0.1 cargo run --release --example aio_overhead -- [--iters N] [--size BYTES]
//! ```

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use xfer::aio::{self, AsyncEndpoint};
use xfer::{Completion, CompletionQueue, Endpoint, PeerAddr};

type Res<T> = Result<T, String>;

const TIMEOUT: Duration = Duration::from_secs(10);
const USAGE: &str = "usage: aio_overhead [--iters N] [--size BYTES]";

/// One endpoint, its queue and the other side's handle.
struct Side {
    domain: xfer::Domain,
    cq: CompletionQueue,
    ep: Endpoint,
    peer: PeerAddr,
}

fn main() -> ExitCode {
    xfer::init_logging();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("aio_overhead: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Res<()> {
    let (mut iters, mut size) = (20_000usize, 64usize);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |what: &str| -> Res<usize> {
            let v = args.next().ok_or(format!("{what} needs a value\n{USAGE}"))?;
            v.parse().map_err(|e| format!("{what} {v:?}: {e}"))
        };
        match a.as_str() {
            "--iters" => iters = value("--iters")?.max(1),
            "--size" => size = value("--size")?,
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    let (a, b) = pair()?;
    let warmup = iters / 10 + 1;
    let provider = a.domain.provider();
    let polled = polling(&a, &b, warmup, iters, size)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let asynced = rt.block_on(futures(a, b, warmup, iters, size))?;
    let (p, q) = (stats(polled), stats(asynced));
    println!("provider {provider}, {size} B tagged ping-pong, {iters} round trips, half round trip:");
    println!("  polling API   p50 {:8.2} us  p99 {:8.2} us", p.0, p.1);
    println!("  async (tokio) p50 {:8.2} us  p99 {:8.2} us", q.0, q.1);
    println!("  async / polling: p50 {:.2}x  p99 {:.2}x", q.0 / p.0, q.1 / p.1);
    Ok(())
}

fn pair() -> Res<(Side, Side)> {
    let open = || -> Res<(xfer::Domain, CompletionQueue, xfer::AddressVector, Endpoint)> {
        let domain = xfer::open_default().map_err(|e| format!("opening a domain: {e}"))?;
        let cq = domain.cq(&xfer::CqAttr::from_env()).map_err(|e| e.to_string())?;
        let av = domain.av().map_err(|e| e.to_string())?;
        let ep = domain
            .endpoint(&cq, &av, &xfer::EndpointAttr::from_env())
            .map_err(|e| e.to_string())?;
        Ok((domain, cq, av, ep))
    };
    let (da, ca, ava, ea) = open()?;
    let (db, cb, avb, eb) = open()?;
    let pb = ava.insert(eb.name().as_bytes()).map_err(|e| e.to_string())?;
    let pa = avb.insert(ea.name().as_bytes()).map_err(|e| e.to_string())?;
    let a = Side {
        domain: da,
        cq: ca,
        ep: ea,
        peer: pb,
    };
    let b = Side {
        domain: db,
        cq: cb,
        ep: eb,
        peer: pa,
    };
    Ok((a, b))
}

/// Busy-polls both queues until `n` completions with `context` arrived on `side`.
fn wait_for(sides: [&Side; 2], on: usize, context: u64, out: &mut [Completion]) -> Res<Vec<u8>> {
    let start = Instant::now();
    loop {
        for (i, s) in sides.iter().enumerate() {
            let n = s.cq.poll(out).map_err(|e| e.to_string())?;
            for c in out[..n].iter_mut() {
                c.result.clone().map_err(|e| format!("completion: {e}"))?;
                if i == on && c.context == context {
                    return Ok(c.buf.take().unwrap_or_default());
                }
            }
        }
        if start.elapsed() > TIMEOUT {
            return Err("timed out".into());
        }
    }
}

/// Half-round-trip times with the polling API.
fn polling(a: &Side, b: &Side, warmup: usize, iters: usize, size: usize) -> Res<Vec<f64>> {
    let mut out = vec![Completion::EMPTY; 16];
    let mut times = Vec::with_capacity(iters);
    let (mut ping, mut pong) = (vec![1u8; size], vec![0u8; size]);
    for i in 0..warmup + iters {
        let t = Instant::now();
        b.ep.trecv(b.peer, 1, 0, pong, 1).map_err(|r| r.error.to_string())?;
        a.ep.tsend(a.peer, 1, ping, 2).map_err(|r| r.error.to_string())?;
        pong = wait_for([a, b], 1, 1, &mut out)?;
        a.ep.trecv(a.peer, 2, 0, vec![0; size], 3)
            .map_err(|r| r.error.to_string())?;
        b.ep.tsend(b.peer, 2, pong, 4).map_err(|r| r.error.to_string())?;
        ping = wait_for([a, b], 0, 3, &mut out)?;
        pong = vec![0u8; size];
        if i >= warmup {
            times.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    Ok(times)
}

/// Half-round-trip times with the async layer: an echo task and a pinging task.
async fn futures(a: Side, b: Side, warmup: usize, iters: usize, size: usize) -> Res<Vec<f64>> {
    let wrap = |s: Side| -> Res<(AsyncEndpoint, PeerAddr)> {
        let d = aio::tokio::dispatcher(&s.cq).map_err(|e| e.to_string())?;
        Ok((AsyncEndpoint::new(s.ep, d).map_err(|e| e.to_string())?, s.peer))
    };
    let total = warmup + iters;
    let ((ea, pb), (eb, pa)) = (wrap(a)?, wrap(b)?);
    let eb = Arc::new(eb);
    let echo = tokio::spawn(async move {
        let mut buf = vec![0u8; size];
        for _ in 0..total {
            let (got, back) = eb.trecv(pa, 1, 0, buf).await;
            got.map_err(|e| format!("echo trecv: {e}"))?;
            let (sent, back) = eb.tsend(pa, 2, back).await;
            sent.map_err(|e| format!("echo tsend: {e}"))?;
            buf = back;
        }
        Ok::<(), String>(())
    });
    let mut times = Vec::with_capacity(iters);
    let (mut ping, mut pong) = (vec![1u8; size], vec![0u8; size]);
    for i in 0..total {
        let t = Instant::now();
        let ((sent, back), (got, reply)) = tokio::join!(ea.tsend(pb, 1, ping), ea.trecv(pb, 2, 0, pong));
        sent.map_err(|e| format!("tsend: {e}"))?;
        got.map_err(|e| format!("trecv: {e}"))?;
        (ping, pong) = (back, reply);
        if i >= warmup {
            times.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    tokio::time::timeout(TIMEOUT, echo)
        .await
        .map_err(|_| "echo task timed out".to_string())?
        .map_err(|e| e.to_string())??;
    Ok(times)
}

/// (p50, p99) in microseconds.
fn stats(mut t: Vec<f64>) -> (f64, f64) {
    t.sort_by(f64::total_cmp);
    let at = |q: f64| t[((t.len() - 1) as f64 * q) as usize];
    (at(0.50), at(0.99))
}
