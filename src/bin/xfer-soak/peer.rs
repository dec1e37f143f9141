//! The soak's second process: checks every message it gets, sends echoes
//! back, offers an RMA region, counts what it saw, and reports on `stop`.
//!
//! Lines on stdout: `name HEX`, `rkey HEX`, then (after `stop` on stdin)
//! `counts echoes=N injects=N writedata=N datasum=N errors=N`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xfer::{Access, Completion, Flags, PeerAddr};

use crate::hex::{hex, unhex};
use crate::traffic::{check, INJECT, MAX_MSG, REGION, WINDOW};
use crate::{open, touched, Result};

const RECV: u64 = 1;
const SEND: u64 = 2;

/// What the peer saw.
#[derive(Default)]
struct Counts {
    echoes: u64,
    injects: u64,
    writedata: u64,
    datasum: u64,
    errors: u64,
}

pub fn run() -> Result<()> {
    let side = open()?;
    let region = side
        .domain
        .register(touched(REGION), Access::REMOTE_READ | Access::REMOTE_WRITE)
        .map_err(|r| format!("registering the RMA region: {}", r.error))?;
    println!("name {}", hex(side.ep.name().as_bytes()));
    println!("rkey {}", hex(&region.pack_rkey()));

    let mut first = String::new();
    std::io::stdin().read_line(&mut first).map_err(|e| e.to_string())?;
    let name = unhex(first.trim_end().strip_prefix("peer ").ok_or("expected `peer NAME`")?)?;
    let driver = side
        .av
        .insert(&name)
        .map_err(|e| format!("inserting the driver: {e}"))?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::spawn(move || {
        // `stop`, or stdin closed (the driver died): finish either way.
        for line in std::io::stdin().lines() {
            if line.map_or(true, |l| l == "stop") {
                break;
            }
        }
        flag.store(true, Ordering::Release);
    });

    for _ in 0..2 * WINDOW {
        post(&side.ep, touched(MAX_MSG))?;
    }
    let mut counts = Counts::default();
    let mut sends = 0usize;
    let mut done = vec![Completion::EMPTY; 32];
    let mut drain_until = None;
    loop {
        let n = side.cq.poll(&mut done).map_err(|e| format!("polling: {e}"))?;
        for c in &mut done[..n] {
            if let Err(e) = &c.result {
                counts.errors += 1;
                eprintln!("xfer-soak peer: operation {} failed: {e}", c.context);
                continue;
            }
            if c.flags.contains(Flags::REMOTE_WRITE) {
                counts.writedata += 1;
                counts.datasum = counts.datasum.wrapping_add(c.data);
                continue;
            }
            let mut buf = c.buf.take().ok_or("completion without its buffer")?;
            match c.context {
                RECV => {
                    let seq = c.tag & !INJECT;
                    if !check(&buf[..c.len], seq) {
                        counts.errors += 1;
                        eprintln!("xfer-soak peer: message {seq} ({} B) corrupted", c.len);
                    }
                    if c.tag & INJECT != 0 {
                        counts.injects += 1;
                        post(&side.ep, buf)?;
                    } else {
                        counts.echoes += 1;
                        buf.truncate(c.len);
                        side.ep
                            .tsend(driver, c.tag, buf, SEND)
                            .map_err(|r| format!("echo {seq}: {}", r.error))?;
                        sends += 1;
                    }
                }
                SEND => {
                    sends -= 1;
                    buf.resize(MAX_MSG, 0);
                    post(&side.ep, buf)?;
                }
                other => return Err(format!("unexpected completion {other}")),
            }
        }
        if drain_until.is_none() && stop.load(Ordering::Acquire) {
            drain_until = Some(Instant::now() + Duration::from_secs(10));
        }
        if drain_until.is_some_and(|t| sends == 0 || Instant::now() > t) {
            break;
        }
    }
    if sends > 0 {
        counts.errors += 1;
        eprintln!("xfer-soak peer: {sends} echoes never completed");
    }
    println!(
        "counts echoes={} injects={} writedata={} datasum={} errors={}",
        counts.echoes, counts.injects, counts.writedata, counts.datasum, counts.errors
    );
    drop(region);
    Ok(())
}

/// Posts an any-source, any-tag receive into `buf`.
fn post(ep: &xfer::Endpoint, buf: Vec<u8>) -> Result<()> {
    ep.trecv(PeerAddr::UNSPEC, 0, !0, buf, RECV)
        .map_err(|r| format!("posting a receive: {}", r.error))
}
