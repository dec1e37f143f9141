//! Latency samples timed as `ucx_perftest` (`ucs_get_time`) and perftest
//! (`get_cycles`) time theirs: by the CPU's time-stamp counter, one
//! instruction, where it ticks at one rate whatever the CPU's state (x86-64
//! with `constant_tsc` and `nonstop_tsc`); elsewhere, or with `--clock
//! system`, by the system clock. A system clock read costs ~25 ns on the
//! hosts we measure on, and a sample taken between two of them holds about
//! one read's worth: 10-13 ns of a reported half round trip that the peers'
//! tools do not pay.
//!
//! Ticks become microseconds at the end of a phase, by the counter's rate
//! over the phase itself measured against the system clock (at least
//! [`MIN_SPAN`]), so no rate is assumed.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Which clock times the samples (`--clock`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockKind {
    /// The time-stamp counter where it is invariant, else the system clock.
    Auto,
    /// The system clock (`Instant`) always.
    System,
}

impl ClockKind {
    /// Parses `--clock`'s value.
    pub fn parse(s: &str) -> Result<ClockKind, String> {
        match s {
            "auto" => Ok(ClockKind::Auto),
            "system" => Ok(ClockKind::System),
            other => Err(format!("bad --clock {other:?} (auto or system)")),
        }
    }
}

/// Whether samples are timed by the time-stamp counter; set once by [`select`].
static TSC: OnceLock<bool> = OnceLock::new();

/// The shortest span a phase's counter rate is measured over.
const MIN_SPAN: Duration = Duration::from_millis(20);

/// Chooses the clock for the run (before the first phase).
pub fn select(kind: ClockKind) {
    let _ = TSC.set(kind == ClockKind::Auto && invariant_tsc());
}

/// The name of the clock in use, for the report.
pub fn name() -> &'static str {
    match tsc() {
        true => "tsc",
        false => "system",
    }
}

fn tsc() -> bool {
    *TSC.get_or_init(|| false)
}

/// Whether the CPU's time-stamp counter ticks at one rate in every state.
fn invariant_tsc() -> bool {
    if !cfg!(target_arch = "x86_64") {
        return false;
    }
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
        return false;
    };
    let flags = info.lines().find(|l| l.starts_with("flags")).unwrap_or("");
    let has = |f: &str| flags.split_whitespace().any(|w| w == f);
    has("constant_tsc") && has("nonstop_tsc")
}

/// One phase's latency samples, in ticks until [`Timer::micros`].
pub struct Timer {
    tsc: bool,
    start: Instant,
    start_ticks: u64,
    ticks: Vec<u64>,
}

impl Timer {
    /// A timer for `iters` samples; the rate's span starts now.
    pub fn new(iters: usize) -> Timer {
        let mut t = Timer {
            tsc: tsc(),
            start: Instant::now(),
            start_ticks: 0,
            ticks: Vec::with_capacity(iters),
        };
        t.start_ticks = t.now();
        t
    }

    /// A timestamp.
    #[inline(always)]
    pub fn now(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if self.tsc {
            // SAFETY: RDTSC reads a counter every x86-64 CPU has and has no
            // other effect; `invariant_tsc` saw its rate is constant.
            return unsafe { std::arch::x86_64::_rdtsc() };
        }
        self.start.elapsed().as_nanos() as u64
    }

    /// Records the time since timestamp `t0`.
    #[inline(always)]
    pub fn record(&mut self, t0: u64) {
        let t = self.now();
        self.ticks.push(t.wrapping_sub(t0));
    }

    /// The samples in microseconds, each divided by `div` (2 for half a
    /// round trip). With the counter, waits until [`MIN_SPAN`] has passed
    /// since [`Timer::new`] to measure its rate over the phase.
    pub fn micros(self, div: f64) -> Vec<f64> {
        let per_us = match self.tsc {
            true => {
                while self.start.elapsed() < MIN_SPAN {
                    std::hint::spin_loop();
                }
                let (span, ticks) = (self.start.elapsed(), self.now());
                ticks.wrapping_sub(self.start_ticks) as f64 / (span.as_secs_f64() * 1e6)
            }
            false => 1e3,
        };
        self.ticks.iter().map(|&t| t as f64 / per_us / div).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sleep_reads_as_its_length_on_either_clock() {
        for tsc in [false, invariant_tsc()] {
            let mut t = Timer::new(1);
            t.tsc = tsc;
            t.start_ticks = t.now();
            let t0 = t.now();
            std::thread::sleep(Duration::from_millis(30));
            t.record(t0);
            let us = t.micros(1.0)[0];
            // A sleep lasts at least its length; the bound above is loose
            // for a loaded host.
            assert!((30_000.0..3_000_000.0).contains(&us), "tsc={tsc}: {us} µs");
        }
    }

    #[test]
    fn clock_names_parse() {
        assert_eq!(ClockKind::parse("auto"), Ok(ClockKind::Auto));
        assert_eq!(ClockKind::parse("system"), Ok(ClockKind::System));
        assert!(ClockKind::parse("tsc").is_err());
    }
}
