//! The spin window and its back-off: after a completion, a waiting
//! operation polls again instead of parking, for a while. Spinning stops
//! for a time when it keeps failing: when windows run out with nothing
//! routed (nothing is coming), or when the process was preempted while it
//! spun (another thread wants this CPU: perhaps the very peer the spin
//! waits for, which then cannot run until the spinner yields the CPU).
//!
//! Preemption is the process's count of involuntary context switches
//! (`getrusage`), a system call, so it is read only for spins that last:
//! from [`SAMPLE_AFTER`] into a spin to its end. A shorter spin was not
//! preempted for long; one preempted earlier than that ends after its
//! window, which the clock tells (the spinner, away, did not see the
//! window end).

use std::time::{Duration, Instant};

/// Spins of the last 16 that did not pay before backing off (separate
/// CPUs: about 1 in 700 does not; one shared CPU: every other one).
const MISSES: u32 = 4;
/// How long spinning stays off after [`MISSES`] misses in a row.
const BACK_OFF: Duration = Duration::from_millis(20);
/// How long a spin goes on before the process's preemptions are read for it.
const SAMPLE_AFTER: Duration = Duration::from_micros(10);

/// One dispatcher's spinning state.
#[derive(Debug)]
pub(super) struct Spin {
    /// How long after a routed completion to keep spinning (zero: never).
    window: Duration,
    /// When the last completion was routed.
    active: Option<Instant>,
    /// Spun since that completion: when the spin began.
    spun: Option<Instant>,
    /// The last 16 spins, newest in bit 0: 1 for one that did not pay.
    history: u16,
    /// No spinning before then.
    off_until: Option<Instant>,
    /// The process's involuntary context switches [`SAMPLE_AFTER`] into
    /// the current spin, once it lasted that long.
    preempted_at: Option<i64>,
    /// Where those come from ([`preemptions`]; tests count their own).
    preemptions: fn() -> i64,
}

impl Spin {
    pub(super) fn new(window: Duration) -> Spin {
        Spin {
            window,
            active: None,
            spun: None,
            history: 0,
            off_until: None,
            preempted_at: None,
            preemptions,
        }
    }

    pub(super) fn window(&self) -> Duration {
        self.window
    }

    /// Sets the window; starts afresh.
    pub(super) fn set(&mut self, window: Duration) {
        *self = Spin::new(window);
    }

    /// A completion was routed at `now`: a spin that was waiting for it paid,
    /// unless the process was preempted while it spun, or its window was
    /// over by then (a spinner that polls sees the window end itself,
    /// [`keep`](Self::keep); one that did not was away).
    pub(super) fn routed(&mut self, now: Instant) {
        if self.spun.take().is_some() {
            let late = self
                .active
                .is_some_and(|at| now.saturating_duration_since(at) >= self.window);
            let preempted = self.preempted_at.take().is_some_and(|at| (self.preemptions)() > at);
            self.ended(now, late || preempted);
        }
        self.active = Some(now);
    }

    /// A spin ended, paying or not: [`MISSES`] of the last 16 that did not
    /// turn spinning off for [`BACK_OFF`].
    fn ended(&mut self, now: Instant, missed: bool) {
        self.history = self.history << 1 | u16::from(missed);
        if self.history.count_ones() >= MISSES {
            self.history = 0;
            self.off_until = Some(now + BACK_OFF);
        }
    }

    /// Whether a poller that found nothing at `now` should spin. A window
    /// that ran out after spinning counts a miss; [`MISSES`] in a row turn
    /// spinning off for [`BACK_OFF`].
    pub(super) fn keep(&mut self, now: Instant) -> bool {
        if self.window.is_zero() || self.off_until.is_some_and(|t| now < t) {
            return false;
        }
        self.off_until = None;
        if self
            .active
            .is_some_and(|at| now.saturating_duration_since(at) < self.window)
        {
            match self.spun {
                None => {
                    self.spun = Some(now);
                    self.preempted_at = None;
                }
                Some(began) if self.preempted_at.is_none() && now.saturating_duration_since(began) >= SAMPLE_AFTER => {
                    self.preempted_at = Some((self.preemptions)());
                }
                Some(_) => {}
            }
            return true;
        }
        if self.spun.take().is_some() {
            self.ended(now, true);
        }
        false
    }
}

/// The process's involuntary context switches so far (`getrusage`), or 0.
fn preemptions() -> i64 {
    // SAFETY: all-zero is a valid `rusage`, which getrusage fills in.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage for the call.
    match unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } {
        0 => ru.ru_nivcsw,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Duration = Duration::from_micros(50);

    /// A spin state whose process is never preempted.
    fn spin(window: Duration) -> Spin {
        Spin {
            preemptions: || 0,
            ..Spin::new(window)
        }
    }

    #[test]
    fn spins_within_the_window_after_a_completion() {
        let t0 = Instant::now();
        let mut s = spin(W);
        assert!(!s.keep(t0), "nothing routed yet");
        s.routed(t0);
        assert!(s.keep(t0 + W / 2));
        assert!(!s.keep(t0 + W), "the window ran out");
        assert!(!spin(Duration::ZERO).keep(t0), "zero: never");
    }

    /// A completion at `*now`, then a spin whose window runs out.
    fn spin_out(s: &mut Spin, now: &mut Instant) {
        s.routed(*now);
        assert!(s.keep(*now), "spinning after a completion");
        *now += W;
        assert!(!s.keep(*now), "the window ran out: a miss");
    }

    #[test]
    fn spins_that_do_not_pay_turn_spinning_off_for_a_while() {
        let mut now = Instant::now();
        let mut s = spin(W);
        for _ in 0..MISSES {
            spin_out(&mut s, &mut now);
        }
        s.routed(now);
        assert!(!s.keep(now), "backed off");
        now += BACK_OFF;
        s.routed(now);
        assert!(s.keep(now), "spinning again after the back-off");
    }

    #[test]
    fn spins_that_mostly_pay_go_on() {
        let mut now = Instant::now();
        let mut s = spin(W);
        // One miss in 8: never 4 in 16.
        for round in 0..200u32 {
            if round % 8 == 0 {
                spin_out(&mut s, &mut now);
            } else {
                s.routed(now);
                assert!(s.keep(now), "round {round}");
                now += W / 2; // the completion comes while spinning
            }
        }
    }

    #[test]
    fn spins_preempted_half_the_time_back_off() {
        static PREEMPTED: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
        let mut now = Instant::now();
        let mut s = Spin {
            preemptions: || PREEMPTED.load(std::sync::atomic::Ordering::Relaxed),
            ..Spin::new(W)
        };
        let mut backed_off = false;
        for round in 0..16 {
            s.routed(now);
            if !s.keep(now) {
                backed_off = true;
                break;
            }
            now += SAMPLE_AFTER;
            assert!(s.keep(now), "round {round}: still spinning");
            if round % 2 == 0 {
                PREEMPTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            now += W / 4; // every spin gets its completion, half after a preemption
        }
        assert!(backed_off, "a CPU shared with the peer shows as preemptions");
    }

    #[test]
    fn spins_whose_completion_comes_after_the_window_back_off() {
        let mut now = Instant::now();
        let mut s = spin(W);
        let mut backed_off = false;
        for round in 0..16 {
            s.routed(now);
            if !s.keep(now) {
                backed_off = true;
                break;
            }
            // Half the completions come only after the window, with no poll
            // of the spinner in between: it was away (preempted early).
            now += if round % 2 == 0 { W * 3 } else { W / 2 };
        }
        assert!(backed_off, "a spinner away past its window counts a miss");
    }

    #[test]
    fn short_spins_ask_the_system_nothing() {
        static ASKED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let mut now = Instant::now();
        let mut s = Spin {
            preemptions: || {
                ASKED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                0
            },
            ..Spin::new(W)
        };
        for _ in 0..100 {
            s.routed(now);
            assert!(s.keep(now));
            now += SAMPLE_AFTER / 2;
            assert!(s.keep(now));
        }
        assert_eq!(ASKED.load(std::sync::atomic::Ordering::Relaxed), 0);
        now += SAMPLE_AFTER;
        assert!(s.keep(now));
        s.routed(now);
        assert_eq!(
            ASKED.load(std::sync::atomic::Ordering::Relaxed),
            2,
            "a long spin reads at both ends"
        );
    }
}
