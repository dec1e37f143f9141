//! The progress timeout's bookkeeping, the same on every transport: which
//! peers are alive but stalled (a process stopped by SIGSTOP or a debugger,
//! or hung, while its kernel or its HCA still acknowledges, so neither TCP
//! keepalive nor RC retries ever notice).
//!
//! The endpoint holds a [`Watch`]; each connection a [`Silence`]. Every
//! quarter of the timeout the endpoint takes a [`Look`] and asks each
//! connection's silence for a [`Verdict`], saying whether something waits
//! for that peer. A connection that heard from the peer's process since the
//! previous look (TCP: bytes, or room made while blocked on writing; verbs:
//! a message) is fine and silent from then on. Silent for half the timeout,
//! it is probed once: the peer's next progress call answers, so a peer that
//! is alive but has nothing to say (a receiver that has not posted the
//! receive a rendezvous waits for) keeps its connection. Silent for the
//! whole timeout, it has stalled and the transport fails it with
//! [`Error::Stalled`](crate::Error::Stalled). A look that comes more than
//! half a timeout after the previous one blames no peer: this process was
//! the one not progressing. How to probe and what waiting means are the
//! transport's; nothing here touches a wire or a clock beyond `Instant`.

use std::time::{Duration, Instant};

/// The endpoint's side of the progress timeout: when to look, and counters.
#[derive(Debug)]
pub struct Watch {
    /// The timeout; zero: off.
    timeout: Duration,
    /// When the connections are looked at next.
    next: Instant,
    /// When they were looked at last.
    last: Instant,
    /// Probes sent.
    pub probes: u64,
    /// Connections failed as stalled.
    pub stalled: u64,
}

impl Watch {
    /// A watch for `timeout_ms` (0: off).
    pub fn new(timeout_ms: u64) -> Watch {
        let now = Instant::now();
        Watch {
            timeout: Duration::from_millis(timeout_ms),
            next: now,
            last: now,
            probes: 0,
            stalled: 0,
        }
    }

    /// Whether the timeout is set.
    #[inline]
    pub fn on(&self) -> bool {
        !self.timeout.is_zero()
    }

    /// Whether a look is due (never while off).
    #[inline]
    pub fn due(&self) -> bool {
        self.on() && Instant::now() >= self.next
    }

    /// Starts a look at the connections; the next is due a quarter of the
    /// timeout later.
    pub fn look(&mut self) -> Look {
        let now = Instant::now();
        let away = now.duration_since(self.last) > self.timeout / 2;
        self.last = now;
        self.next = now + (self.timeout / 4).max(Duration::from_millis(1));
        Look {
            now,
            timeout: self.timeout,
            away,
        }
    }
}

/// One look at the connections.
#[derive(Debug, Clone, Copy)]
pub struct Look {
    now: Instant,
    timeout: Duration,
    /// The previous look was long ago: silence counts from now.
    away: bool,
}

/// What a look found for one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Heard from, idle, or silent for less than half the timeout (or
    /// already probed).
    Fine,
    /// Silent for half the timeout: probe it now.
    Probe,
    /// Silent for the whole timeout: it has stalled.
    Stalled,
}

/// A connection's side: how long its peer has been silent while something
/// waited for it.
#[derive(Debug, Clone)]
pub struct Silence {
    /// Times the peer's process was heard from (a count, so that the data
    /// path only increments it).
    heard: u64,
    /// `heard` at the previous look.
    seen: u64,
    /// Since when the peer has been silent while something waited for it.
    since: Instant,
    /// Whether it was probed since it was last heard.
    probed: bool,
}

impl Default for Silence {
    fn default() -> Self {
        Silence {
            heard: 0,
            seen: 0,
            since: Instant::now(),
            probed: false,
        }
    }
}

impl Silence {
    /// The peer's process showed progress.
    #[inline]
    pub fn heard(&mut self) {
        self.heard = self.heard.wrapping_add(1);
    }

    /// The probe a [`Verdict::Probe`] asked for could not go out now: the
    /// next look asks again.
    pub fn unprobed(&mut self) {
        self.probed = false;
    }

    /// Looks at the connection; `waiting`: something waits for its peer.
    pub fn look(&mut self, look: &Look, waiting: bool) -> Verdict {
        let heard = self.heard != self.seen;
        self.seen = self.heard;
        if heard || look.away || !waiting {
            self.since = look.now;
            self.probed = false;
            return Verdict::Fine;
        }
        let silent = look.now.duration_since(self.since);
        if silent >= look.timeout {
            Verdict::Stalled
        } else if silent >= look.timeout / 2 && !self.probed {
            self.probed = true;
            Verdict::Probe
        } else {
            Verdict::Fine
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(base: Instant, ms: u64, away: bool) -> Look {
        Look {
            now: base + Duration::from_millis(ms),
            timeout: Duration::from_millis(1000),
            away,
        }
    }

    #[test]
    fn a_silent_peer_is_probed_once_then_stalls() {
        let t = Instant::now();
        let mut s = Silence {
            since: t,
            ..Silence::default()
        };
        assert_eq!(s.look(&at(t, 0, false), true), Verdict::Fine);
        assert_eq!(s.look(&at(t, 250, false), true), Verdict::Fine);
        assert_eq!(s.look(&at(t, 500, false), true), Verdict::Probe);
        assert_eq!(s.look(&at(t, 750, false), true), Verdict::Fine, "probed once");
        assert_eq!(s.look(&at(t, 1000, false), true), Verdict::Stalled);
    }

    #[test]
    fn hearing_idleness_or_an_absent_self_restart_the_silence() {
        let t = Instant::now();
        let mut s = Silence {
            since: t,
            ..Silence::default()
        };
        assert_eq!(s.look(&at(t, 500, false), true), Verdict::Probe);
        s.heard();
        assert_eq!(s.look(&at(t, 750, false), true), Verdict::Fine);
        assert_eq!(s.look(&at(t, 1000, false), true), Verdict::Fine, "silent 250 ms only");
        assert_eq!(s.look(&at(t, 1500, false), true), Verdict::Probe, "silent 750 ms");
        assert_eq!(s.look(&at(t, 1750, false), true), Verdict::Stalled);
        assert_eq!(s.look(&at(t, 2000, false), false), Verdict::Fine, "nothing waits");
        assert_eq!(s.look(&at(t, 2600, false), true), Verdict::Probe);
        s.unprobed();
        assert_eq!(s.look(&at(t, 2700, false), true), Verdict::Probe, "asked again");
        assert_eq!(s.look(&at(t, 3500, true), true), Verdict::Fine, "away");
        assert_eq!(s.look(&at(t, 4000, false), true), Verdict::Probe);
    }

    #[test]
    fn an_unset_watch_is_never_due() {
        let w = Watch::new(0);
        assert!(!w.on() && !w.due());
        let mut w = Watch::new(40);
        assert!(w.due());
        let l = w.look();
        assert!(!l.away && !w.due());
    }
}
