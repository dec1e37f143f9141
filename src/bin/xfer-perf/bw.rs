//! Streaming: the client keeps a window of messages in flight, the server
//! acknowledges each window with a zero-length message once it has reposted
//! its receives, so nothing ever waits unexpected (as `ucx_perftest tag_bw`
//! measures the sender's rate). Buffers: [`crate::pool`].

use std::time::Instant;

use xfer::{Endpoint, PeerAddr};

use crate::control::{ACK, ACK_TAG, DATA_TAG, RECV, SEND};
use crate::driver::{self, pattern, Driver, Result};
use crate::plan::Phase;
use crate::pool::Pool;
use crate::progress::Progress;

/// Window sizes of the phase: the warm-up's rounds then the measured ones.
fn rounds(p: &Phase) -> impl Iterator<Item = (bool, usize)> + '_ {
    let split = |n: usize| (0..n.div_ceil(p.window)).map(move |r| (n - r * p.window).min(p.window));
    split(p.warmup)
        .map(|n| (false, n))
        .chain(split(p.iters).map(|n| (true, n)))
}

/// The sending side: returns the seconds the measured rounds took.
pub fn client(ep: &Endpoint, d: &mut Driver, peer: PeerAddr, p: &Phase, prog: &mut Progress) -> Result<f64> {
    let tag = p.test.tagged().then_some(DATA_TAG);
    let mut pool = Pool::new(p.buffers, p.window, pattern(p.size));
    let (mut start, mut done) = (None, 0);
    for (measured, n) in rounds(p) {
        if measured && start.is_none() {
            start = Some(Instant::now());
        }
        driver::recv(ep, true, peer, ACK_TAG, Vec::new(), ACK)?;
        for _ in 0..n {
            pool.send(ep, tag, peer, SEND, p.size)?;
        }
        let (mut sent, mut acked) = (0, false);
        while sent < n || !acked {
            let mut c = d.next("streaming")?;
            match c.context {
                SEND => {
                    sent += 1;
                    pool.complete(&mut c)?;
                }
                ACK => acked = true,
                other => return Err(format!("streaming: unexpected completion {other}")),
            }
        }
        done += n;
        prog.tick(done);
    }
    Ok(start.map_or(0.0, |s| s.elapsed().as_secs_f64()))
}

/// The receiving side; its first window is posted before it reports ready.
pub struct Server {
    pool: Pool,
}

impl Server {
    pub fn prepare(ep: &Endpoint, peer: PeerAddr, p: &Phase) -> Result<Server> {
        let mut s = Server {
            pool: Pool::new(p.buffers, p.window, vec![0; p.size]),
        };
        if let Some((_, n)) = rounds(p).next() {
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
        let sizes: Vec<usize> = rounds(p).map(|(_, n)| n).collect();
        let (mut first, mut acks_out) = (true, 0usize);
        for (r, &n) in sizes.iter().enumerate() {
            let mut got = 0;
            while got < n {
                let mut c = d.next("receiving a stream")?;
                match c.context {
                    RECV => {
                        got += 1;
                        if let Some(b) = self.pool.complete(&mut c)?.filter(|_| first) {
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
            if let Some(&next) = sizes.get(r + 1) {
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
