//! Busy-polling a completion queue, and posting either flavour of operation.

use std::time::{Duration, Instant};

use xfer::{Completion, CompletionQueue, Endpoint, Error, PeerAddr};

/// How long without any completion before the run is declared stuck.
const STALL: Duration = Duration::from_secs(30);

/// A benchmark failure, with what was being done.
pub type Result<T> = std::result::Result<T, String>;

/// Busy-polls a completion queue and hands out its completions one by one.
pub struct Driver {
    cq: CompletionQueue,
    out: Vec<Completion>,
    next: usize,
    filled: usize,
}

impl Driver {
    pub fn new(cq: CompletionQueue) -> Driver {
        Driver {
            cq,
            out: vec![Completion::EMPTY; 64],
            next: 0,
            filled: 0,
        }
    }

    /// The next completion, in place in the polled array (no copy on the
    /// timed path); a failed operation is an error naming `what`.
    #[inline(always)]
    pub fn next(&mut self, what: &str) -> Result<&mut Completion> {
        if self.next == self.filled {
            self.fill(what)?;
        }
        self.take(what)
    }

    /// [`next`](Self::next) without waiting: one poll when none is at hand
    /// (progress for a sender whose operation was refused), `None` when it
    /// brings none.
    pub fn try_next(&mut self, what: &str) -> Result<Option<&mut Completion>> {
        if self.next == self.filled {
            let n = self.poll(what)?;
            if n == 0 {
                return Ok(None);
            }
            self.next = 0;
            self.filled = n;
        }
        self.take(what).map(Some)
    }

    /// The completion at hand (there is one), a failed operation an error.
    #[inline(always)]
    fn take(&mut self, what: &str) -> Result<&mut Completion> {
        let c = &mut self.out[self.next];
        self.next += 1;
        match &c.result {
            Ok(()) => Ok(c),
            Err(e) => Err(format!("{what}: operation {} failed: {e}", c.context)),
        }
    }

    #[inline(always)]
    fn poll(&mut self, what: &str) -> Result<usize> {
        self.cq.poll(&mut self.out).map_err(|e| format!("{what}: polling: {e}"))
    }

    #[inline(always)]
    fn fill(&mut self, what: &str) -> Result<()> {
        // The clock is first read after 4096 empty polls, not before the
        // first: a completion already there is taken without a clock read
        // (~25 ns, which `ucx_perftest`'s loop does not pay either).
        let mut since: Option<Instant> = None;
        let mut spins = 0u32;
        loop {
            let n = self.poll(what)?;
            if n > 0 {
                self.next = 0;
                self.filled = n;
                return Ok(());
            }
            spins = spins.wrapping_add(1);
            // Reading the clock on every empty poll would slow the spin.
            if spins.is_multiple_of(4096) && since.get_or_insert_with(Instant::now).elapsed() > STALL {
                return Err(format!("{what}: no completion for {STALL:?}; is the peer alive?"));
            }
        }
    }
}

/// Posts a send, tagged or not.
pub fn send(ep: &Endpoint, tagged: bool, peer: PeerAddr, tag: u64, buf: Vec<u8>, ctx: u64) -> Result<()> {
    let r = if tagged {
        ep.tsend(peer, tag, buf, ctx)
    } else {
        ep.send(peer, buf, ctx)
    };
    r.map_err(|r| format!("posting a send: {}", Error::from(r)))
}

/// Posts a receive from `peer`, tagged (exact tag) or not.
pub fn recv(ep: &Endpoint, tagged: bool, peer: PeerAddr, tag: u64, buf: Vec<u8>, ctx: u64) -> Result<()> {
    let r = if tagged {
        ep.trecv(peer, tag, 0, buf, ctx)
    } else {
        ep.recv(peer, buf, ctx)
    };
    r.map_err(|r| format!("posting a receive: {}", Error::from(r)))
}

/// The buffer a completion brought back.
pub fn buf(c: &mut Completion) -> Result<Vec<u8>> {
    c.buf
        .take()
        .ok_or_else(|| format!("completion {} carried no buffer", c.context))
}

/// The payload of each size's verified message: position- and size-dependent.
pub fn pattern(size: usize) -> Vec<u8> {
    (0..size).map(|i| (i.wrapping_mul(131) ^ size) as u8).collect()
}
