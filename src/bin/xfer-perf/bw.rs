//! Streaming: the client sends windows of messages, the server acknowledges
//! each window with a zero-length message once it has reposted the receives
//! of the window after next, so nothing ever waits unexpected. The client
//! waits for a window's acknowledgement only before sending the window after
//! next: [`WINDOWS_IN_FLIGHT`] windows overlap, and the stream never drains
//! between them (`tcp-floor bw` streams the same way). Buffers: [`crate::pool`].

use std::time::Instant;

use xfer::{Endpoint, PeerAddr};

use crate::control::{ACK, ACK_TAG, DATA_TAG, RECV, SEND};
use crate::driver::{self, pattern, Driver, Result};
use crate::plan::Phase;
use crate::pool::Pool;
use crate::progress::Progress;

/// Windows the client may have sent and not seen acknowledged.
pub const WINDOWS_IN_FLIGHT: usize = 2;

/// Window sizes of the phase, each marked measured or not: the warm-up's
/// rounds then the measured ones.
fn rounds(p: &Phase) -> Vec<(bool, usize)> {
    let split = |n: usize| (0..n.div_ceil(p.window)).map(move |r| (n - r * p.window).min(p.window));
    split(p.warmup)
        .map(|n| (false, n))
        .chain(split(p.iters).map(|n| (true, n)))
        .collect()
}

/// The sending side: returns the seconds the measured rounds took.
pub fn client(ep: &Endpoint, d: &mut Driver, peer: PeerAddr, p: &Phase, prog: &mut Progress) -> Result<f64> {
    let tag = p.test.tagged().then_some(DATA_TAG);
    let mut pool = Pool::new(p.buffers, WINDOWS_IN_FLIGHT * p.window, pattern(p.size));
    let (mut start, mut done) = (None, 0);
    // Windows sent, and acknowledged; sends not yet complete.
    let (mut sent, mut acked, mut sending) = (0usize, 0usize, 0usize);
    for (measured, n) in rounds(p) {
        // The clock starts with the stream drained of warm-up windows.
        let wait_for = match measured && start.is_none() {
            true => sent,
            false => sent.saturating_sub(WINDOWS_IN_FLIGHT - 1),
        };
        while acked < wait_for {
            collect(d, &mut pool, &mut sending, &mut acked)?;
        }
        if measured && start.is_none() {
            start = Some(Instant::now());
        }
        driver::recv(ep, true, peer, ACK_TAG, Vec::new(), ACK)?;
        for _ in 0..n {
            pool.send(ep, tag, peer, SEND, p.size)?;
        }
        sending += n;
        sent += 1;
        done += n;
        prog.tick(done);
    }
    while acked < sent || sending > 0 {
        collect(d, &mut pool, &mut sending, &mut acked)?;
    }
    Ok(start.map_or(0.0, |s| s.elapsed().as_secs_f64()))
}

/// Takes the client's next completion: a send's (its buffer back to the
/// pool) or a window's acknowledgement.
fn collect(d: &mut Driver, pool: &mut Pool, sending: &mut usize, acked: &mut usize) -> Result<()> {
    let c = d.next("streaming")?;
    match c.context {
        SEND => {
            *sending -= 1;
            pool.complete(c)?;
        }
        ACK => *acked += 1,
        other => return Err(format!("streaming: unexpected completion {other}")),
    }
    Ok(())
}

/// The receiving side; its first windows are posted before it reports ready.
pub struct Server {
    pool: Pool,
}

impl Server {
    pub fn prepare(ep: &Endpoint, peer: PeerAddr, p: &Phase) -> Result<Server> {
        let mut s = Server {
            pool: Pool::new(p.buffers, WINDOWS_IN_FLIGHT * p.window, vec![0; p.size]),
        };
        for &(_, n) in rounds(p).iter().take(WINDOWS_IN_FLIGHT) {
            s.post(ep, peer, p, n)?;
        }
        Ok(s)
    }

    fn post(&mut self, ep: &Endpoint, peer: PeerAddr, p: &Phase, n: usize) -> Result<()> {
        let tag = p.test.tagged().then_some(DATA_TAG);
        for _ in 0..n {
            self.pool.recv(ep, tag, peer, RECV, p.size)?;
        }
        Ok(())
    }

    pub fn run(mut self, ep: &Endpoint, d: &mut Driver, peer: PeerAddr, p: &Phase) -> Result<()> {
        let sizes: Vec<usize> = rounds(p).iter().map(|&(_, n)| n).collect();
        let (mut first, mut acks_out) = (true, 0usize);
        for (r, &n) in sizes.iter().enumerate() {
            let mut got = 0;
            while got < n {
                let c = d.next("receiving a stream")?;
                match c.context {
                    RECV => {
                        got += 1;
                        if let Some(b) = self.pool.complete(c)?.filter(|_| first) {
                            if b != pattern(p.size) {
                                return Err(format!(
                                    "{} {} B: received data differs from the pattern",
                                    p.test.name(),
                                    p.size
                                ));
                            }
                            first = false;
                        }
                    }
                    ACK => acks_out -= 1,
                    other => return Err(format!("receiving a stream: unexpected completion {other}")),
                }
            }
            if let Some(&next) = sizes.get(r + WINDOWS_IN_FLIGHT) {
                self.post(ep, peer, p, next)?;
            }
            driver::send(ep, true, peer, ACK_TAG, Vec::new(), ACK)?;
            acks_out += 1;
        }
        while acks_out > 0 {
            match d.next("finishing a stream")?.context {
                ACK => acks_out -= 1,
                other => return Err(format!("finishing a stream: unexpected completion {other}")),
            }
        }
        Ok(())
    }
}
