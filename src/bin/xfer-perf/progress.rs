//! The progress line on standard error for long runs: once the run has
//! lasted twice the interval (2 s by default), every interval the test, size,
//! phase, iterations done and the rate since the previous line. On a terminal
//! the line is rewritten in place with `\r`; otherwise each is a line of its own.
//!
//! The measuring loops call [`Progress::tick`] once per iteration (or per
//! window): an integer compare, and a clock read only every [`STRIDE`]
//! iterations, as [`Driver`](crate::driver::Driver) does when it spins.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use crate::plan::Phase;

/// Iterations between two looks at the clock.
const STRIDE: usize = 64;

pub struct Progress {
    /// `None` when no line is ever printed.
    every: Option<Duration>,
    terminal: bool,
    /// The first line waits until the run has lasted this long.
    quiet_until: Instant,
    next_print: Instant,
    next_check: usize,
    phase: Option<Phase>,
    index: usize,
    count: usize,
    last: (Instant, usize),
    /// A line was left on the terminal without its newline.
    dirty: bool,
}

impl Progress {
    /// `every`: the interval when the line is on, `None` when it is off.
    pub fn new(every: Option<Duration>) -> Progress {
        let now = Instant::now();
        let every = every.filter(|d| !d.is_zero());
        let quiet = every.map_or(Duration::ZERO, |d| d * 2);
        Progress {
            every,
            terminal: std::io::stderr().is_terminal(),
            quiet_until: now + quiet,
            next_print: now + quiet,
            next_check: STRIDE,
            phase: None,
            index: 0,
            count: 0,
            last: (now, 0),
            dirty: false,
        }
    }

    /// A new phase, `index` (from 1) of `count`; called outside the measured loop.
    pub fn phase(&mut self, p: &Phase, index: usize, count: usize) {
        self.clear();
        if self.every.is_none() {
            return;
        }
        self.phase = Some(*p);
        (self.index, self.count) = (index, count);
        self.last = (Instant::now(), 0);
        self.next_check = STRIDE;
    }

    /// `done` iterations (warm-up included) of the current phase are over.
    #[inline]
    pub fn tick(&mut self, done: usize) {
        if done >= self.next_check && self.every.is_some() {
            self.check(done);
        }
    }

    #[cold]
    fn check(&mut self, done: usize) {
        self.next_check = done + STRIDE;
        let now = Instant::now();
        let (Some(every), Some(p)) = (self.every, self.phase) else {
            return;
        };
        if now < self.next_print || now < self.quiet_until {
            return;
        }
        self.next_print = now + every;
        let (t0, d0) = self.last;
        self.last = (now, done);
        let secs = now.duration_since(t0).as_secs_f64().max(1e-9);
        let rate = done.saturating_sub(d0) as f64 / secs;
        let mut line = format!(
            "xfer-perf: [{}/{}] {} {} B: {}/{} iterations, {:.0} msg/s",
            self.index,
            self.count,
            p.test.name(),
            p.size,
            done,
            p.warmup + p.iters,
            rate
        );
        if !p.test.is_latency() {
            line += &format!(", {:.1} MiB/s", rate * p.size as f64 / (1 << 20) as f64);
        }
        let mut err = std::io::stderr().lock();
        let _ = if self.terminal {
            self.dirty = true;
            write!(err, "\r{line}\x1b[K")
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
    }

    /// Takes a line left on the terminal away, before results or errors are printed.
    pub fn clear(&mut self) {
        if std::mem::take(&mut self.dirty) {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}
