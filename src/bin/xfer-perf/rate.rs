//! Message rate as `ucx_perftest -t tag_bw -O N` measures it: the client
//! keeps at most `window` sends posted and not yet completed, the server
//! keeps `window` receives posted and reposts each as it completes; nothing
//! is acknowledged until the last message, whose arrival the client waits
//! for before stopping the clock. Unlike `tag_bw`, a slow receiver is met by
//! the transport's own flow control (unexpected messages, eager credit),
//! not by the benchmark's acknowledgements.

use std::time::Instant;

use xfer::{Completion, Endpoint, Error, PeerAddr};

use crate::control::{ACK, ACK_TAG, DATA_TAG, RECV, SEND};
use crate::driver::{self, pattern, Driver, Result};
use crate::plan::{Phase, Test};
use crate::pool::Pool;
use crate::progress::Progress;

/// The sending side: returns the seconds from the first measured send to
/// the server's word that every message arrived. `tag_rate_inject` sends
/// by `tinject`, retried while the transport's flow control refuses it
/// (`Again`, polling in between), with nothing in flight to count.
pub fn client(ep: &Endpoint, d: &mut Driver, peer: PeerAddr, p: &Phase, prog: &mut Progress) -> Result<f64> {
    let mut pool = Pool::new(p.buffers, p.window, pattern(p.size));
    let inject = (p.test == Test::TagRateInject).then(|| pattern(p.size));
    driver::recv(ep, true, peer, ACK_TAG, Vec::new(), ACK)?;
    let total = p.warmup + p.iters;
    let (mut in_flight, mut acked, mut start) = (0usize, false, None);
    for i in 0..total {
        if i == p.warmup {
            start = Some(Instant::now());
        }
        if let Some(payload) = &inject {
            while let Err(e) = ep.tinject(peer, DATA_TAG, payload) {
                match e {
                    Error::Again => {
                        if let Some(c) = d.try_next("message rate")? {
                            collected(c, &mut pool, &mut in_flight, &mut acked)?;
                        }
                    }
                    e => return Err(format!("tinject of {} B: {e}", p.size)),
                }
            }
            prog.tick(i + 1);
            continue;
        }
        while in_flight >= p.window {
            collect(d, &mut pool, &mut in_flight, &mut acked)?;
        }
        pool.send(ep, Some(DATA_TAG), peer, SEND, p.size)?;
        in_flight += 1;
        prog.tick(i + 1);
    }
    while in_flight > 0 || !acked {
        collect(d, &mut pool, &mut in_flight, &mut acked)?;
    }
    Ok(start.map_or(0.0, |s| s.elapsed().as_secs_f64()))
}

/// Takes the client's next completion: a send's or the final acknowledgement.
fn collect(d: &mut Driver, pool: &mut Pool, in_flight: &mut usize, acked: &mut bool) -> Result<()> {
    collected(d.next("message rate")?, pool, in_flight, acked)
}

/// Accounts for completion `c`: a send's or the final acknowledgement.
fn collected(c: &mut Completion, pool: &mut Pool, in_flight: &mut usize, acked: &mut bool) -> Result<()> {
    match c.context {
        SEND => {
            *in_flight -= 1;
            pool.complete(c)?;
        }
        ACK => *acked = true,
        other => return Err(format!("message rate: unexpected completion {other}")),
    }
    Ok(())
}

/// The receiving side; its first `window` receives are posted before it
/// reports ready, and it never posts more than the phase's messages.
pub struct Server {
    pool: Pool,
    posted: usize,
}

impl Server {
    pub fn prepare(ep: &Endpoint, peer: PeerAddr, p: &Phase) -> Result<Server> {
        let mut s = Server {
            pool: Pool::new(p.buffers, p.window, vec![0; p.size]),
            posted: 0,
        };
        for _ in 0..p.window.min(p.warmup + p.iters) {
            s.repost(ep, peer, p)?;
        }
        Ok(s)
    }

    fn repost(&mut self, ep: &Endpoint, peer: PeerAddr, p: &Phase) -> Result<()> {
        self.pool.recv(ep, Some(DATA_TAG), peer, RECV, p.size)?;
        self.posted += 1;
        Ok(())
    }

    pub fn run(mut self, ep: &Endpoint, d: &mut Driver, peer: PeerAddr, p: &Phase) -> Result<()> {
        let total = p.warmup + p.iters;
        let mut got = 0;
        while got < total {
            let c = d.next("receiving at rate")?;
            if c.context != RECV {
                return Err(format!("receiving at rate: unexpected completion {}", c.context));
            }
            got += 1;
            if let Some(b) = self.pool.complete(c)?.filter(|_| got == 1) {
                if b != pattern(p.size) {
                    return Err(format!(
                        "{} {} B: received data differs from the pattern",
                        p.test.name(),
                        p.size
                    ));
                }
            }
            if self.posted < total {
                self.repost(ep, peer, p)?;
            }
        }
        driver::send(ep, true, peer, ACK_TAG, Vec::new(), ACK)?;
        match d.next("acknowledging a rate phase")?.context {
            ACK => Ok(()),
            other => Err(format!("acknowledging a rate phase: unexpected completion {other}")),
        }
    }
}
