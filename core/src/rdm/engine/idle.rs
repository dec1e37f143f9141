//! Giving the CPU away while nothing moves on a peer this side waits for.
//!
//! A process that spins on a peer sharing its CPU (more processes than
//! CPUs, as on an oversubscribed node) keeps that peer from running until
//! the scheduler preempts it, a time slice of milliseconds: a sender whose
//! ring or socket is full or whose rendezvous the peer is to pull, an
//! initiator waiting for the target's engine to serve an RMA or atomic
//! (one a device moves waits on no process), a receiver taking
//! a push only its sender can finish. Once such a wait has
//! seen nothing move for a while, each further progress call that sees
//! nothing move yields the CPU (`sched_yield`), as Open MPI's
//! `mpi_yield_when_idle` and MPICH's polls-before-yield do for
//! oversubscribed runs; with a CPU each, nothing else wants it and the call
//! returns at once. Waits the user chose (a receive posted, nothing in
//! flight) never yield: their latency is the user's to trade.

use std::time::{Duration, Instant};

/// How long a wait on a peer has seen nothing move, and when to yield.
#[derive(Debug)]
pub struct Idle {
    /// Nothing moving for this long starts yielding; zero: never.
    after: Duration,
    /// Since when nothing moved, while waiting.
    since: Option<Instant>,
    /// CPU yields made.
    pub yields: u64,
}

impl Idle {
    /// Yielding after `after_us` microseconds of a still wait (0: never).
    pub fn new(after_us: u64) -> Idle {
        Idle {
            after: Duration::from_micros(after_us),
            since: None,
            yields: 0,
        }
    }

    /// A progress call that waited on a peer and saw nothing move.
    #[inline]
    pub fn waited(&mut self) {
        if !self.after.is_zero() {
            self.still();
        }
    }

    /// A progress call that saw something move (a frame taken or arrived),
    /// or waited on no peer.
    #[inline]
    pub fn clear(&mut self) {
        self.since = None;
    }

    #[cold]
    fn still(&mut self) {
        let now = Instant::now();
        match self.since {
            None => self.since = Some(now),
            Some(t) if now.duration_since(t) >= self.after => {
                std::thread::yield_now();
                self.yields += 1;
            }
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yields_only_after_a_still_wait_and_never_when_off() {
        let mut i = Idle::new(1);
        i.waited();
        assert_eq!(i.yields, 0, "the first still call starts the clock");
        let t = Instant::now();
        while t.elapsed() < Duration::from_micros(2) {}
        i.waited();
        assert_eq!(i.yields, 1);
        i.clear();
        i.waited();
        assert_eq!(i.yields, 1, "motion restarts the clock");
        let mut off = Idle::new(0);
        for _ in 0..3 {
            off.waited();
        }
        assert_eq!(off.yields, 0);
        assert!(off.since.is_none());
    }
}
