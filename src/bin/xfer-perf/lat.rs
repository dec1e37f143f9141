//! Ping-pong: the client sends, the server echoes, the client times the
//! round trip and reports half of it (as `ib_send_lat` and `ucx_perftest`).

use xfer::{Endpoint, PeerAddr};

use crate::clock::Timer;
use crate::control::{DATA_TAG, RECV, SEND};
use crate::driver::{self, pattern, Driver, Result};
use crate::plan::Phase;
use crate::progress::Progress;

/// The timing side: returns one half-round-trip sample (µs) per measured iteration.
pub fn client(ep: &Endpoint, d: &mut Driver, peer: PeerAddr, p: &Phase, prog: &mut Progress) -> Result<Vec<f64>> {
    let tagged = p.test.tagged();
    let mut sbuf = Some(pattern(p.size));
    let mut rbuf = Some(vec![0u8; p.size]);
    let mut timer = Timer::new(p.iters);
    for i in 0..p.warmup + p.iters {
        let t0 = timer.now();
        // Send first, as a raw ping-pong does: the echo cannot be back before
        // the receive is posted, and if it were it would simply wait unexpected.
        driver::send(ep, tagged, peer, DATA_TAG, sbuf.take().unwrap_or_default(), SEND)?;
        driver::recv(ep, tagged, peer, DATA_TAG, rbuf.take().unwrap_or_default(), RECV)?;
        while sbuf.is_none() || rbuf.is_none() {
            let c = d.next("ping-pong")?;
            match c.context {
                SEND => sbuf = Some(driver::buf(c)?),
                RECV => rbuf = Some(driver::buf(c)?),
                other => return Err(format!("ping-pong: unexpected completion {other}")),
            }
        }
        if i >= p.warmup {
            timer.record(t0);
        }
        prog.tick(i + 1);
        if i == 0 && rbuf.as_deref() != Some(&pattern(p.size)[..]) {
            return Err(format!(
                "{} {} B: the echo differs from what was sent",
                p.test.name(),
                p.size
            ));
        }
    }
    Ok(timer.micros(2.0))
}

/// The echoing side. Its first receive is posted before it reports ready;
/// each later one right after the echo is handed over.
pub struct Server {
    spare: Vec<Vec<u8>>,
}

impl Server {
    /// Posts the first receive of `p`.
    pub fn prepare(ep: &Endpoint, peer: PeerAddr, p: &Phase) -> Result<Server> {
        driver::recv(ep, p.test.tagged(), peer, DATA_TAG, vec![0; p.size], RECV)?;
        Ok(Server {
            spare: vec![vec![0; p.size]],
        })
    }

    /// Echoes every message of `p` back to `peer`.
    pub fn run(mut self, ep: &Endpoint, d: &mut Driver, peer: PeerAddr, p: &Phase) -> Result<()> {
        let tagged = p.test.tagged();
        let total = p.warmup + p.iters;
        let (mut received, mut sent) = (0, 0);
        while sent < total {
            let c = d.next("echo")?;
            let buf = driver::buf(c)?;
            match c.context {
                SEND => {
                    sent += 1;
                    self.spare.push(buf);
                }
                RECV => {
                    received += 1;
                    if received == 1 && buf != pattern(p.size) {
                        return Err(format!(
                            "{} {} B: received data differs from the pattern",
                            p.test.name(),
                            p.size
                        ));
                    }
                    // Echo first (the critical path), then repost.
                    driver::send(ep, tagged, peer, DATA_TAG, buf, SEND)?;
                    if received < total {
                        let next = self.spare.pop().unwrap_or_else(|| vec![0; p.size]);
                        driver::recv(ep, tagged, peer, DATA_TAG, next, RECV)?;
                    }
                }
                other => return Err(format!("echo: unexpected completion {other}")),
            }
        }
        Ok(())
    }
}
