//! Rate-limited logging: a warning a peer, the system or a loop can repeat
//! costs at most one line per call site per [`INTERVAL`].
//!
//! An endpoint logs from its progress calls, which a program may make
//! millions of times a second; a condition that persists (a descriptor
//! limit, a misbehaving peer, a failing system call) would otherwise write
//! a line on each, and a log written in a tight loop fills a disk and a core
//! (322 MiB in 5 s was measured). Every such site goes through
//! [`warn_limited!`](crate::warn_limited) or
//! [`error_limited!`](crate::error_limited): the first occurrence is logged
//! at once, later ones at most once an interval, each carrying how many
//! were suppressed since the last line (`suppressed`). The limit is per
//! call site and process-wide, as the kernel's `printk_ratelimit` is, and
//! costs two atomic operations; nothing is allocated.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

#[doc(hidden)]
pub use tracing as __tracing;

/// At most one line per call site this often.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// Marks a limit that has never let a line through.
const NEVER: u64 = u64::MAX;

/// One call site's limit: when it last logged, and what it held back since.
#[derive(Debug)]
pub struct Limit {
    /// Milliseconds since [`epoch`] of the last line logged, or [`NEVER`].
    last_ms: AtomicU64,
    /// Occurrences not logged since the last line.
    suppressed: AtomicU64,
}

impl Limit {
    /// A limit that lets its first occurrence through.
    pub const fn new() -> Limit {
        Limit {
            last_ms: AtomicU64::new(NEVER),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Whether this occurrence may be logged now: `Some(n)` with the
    /// occurrences suppressed since the last line, `None` (counted) when
    /// a line was logged less than [`INTERVAL`] ago.
    pub fn allow(&self) -> Option<u64> {
        self.allow_at(now_ms(), INTERVAL)
    }

    fn allow_at(&self, now: u64, interval: Duration) -> Option<u64> {
        let last = self.last_ms.load(Ordering::Relaxed);
        let due = last == NEVER || now.saturating_sub(last) >= interval.as_millis() as u64;
        // One thread wins the slot; the others count as suppressed.
        if due
            && self
                .last_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

impl Default for Limit {
    fn default() -> Self {
        Limit::new()
    }
}

/// The clock limits read: milliseconds since the first use in the process.
fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// `tracing::warn!`, at most once per [`INTERVAL`](crate::log::INTERVAL) at
/// this call site; the line carries `suppressed`, the occurrences held back
/// since the last one. Same arguments as `tracing::warn!` (fields, then the
/// message).
#[macro_export]
macro_rules! warn_limited {
    ($($arg:tt)+) => {
        $crate::log_limited!($crate::log::__tracing::Level::WARN, $($arg)+)
    };
}

/// `tracing::error!` limited as [`warn_limited!`] is.
#[macro_export]
macro_rules! error_limited {
    ($($arg:tt)+) => {
        $crate::log_limited!($crate::log::__tracing::Level::ERROR, $($arg)+)
    };
}

/// The body of [`warn_limited!`] and [`error_limited!`]: a `tracing` event
/// at `$lvl` behind this call site's own [`Limit`](crate::log::Limit).
#[doc(hidden)]
#[macro_export]
macro_rules! log_limited {
    ($lvl:expr, $($arg:tt)+) => {{
        static LIMIT: $crate::log::Limit = $crate::log::Limit::new();
        if let Some(suppressed) = LIMIT.allow() {
            $crate::log::__tracing::event!($lvl, suppressed, $($arg)+);
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_through_then_one_an_interval_with_the_count_held_back() {
        let l = Limit::new();
        let i = Duration::from_millis(1000);
        assert_eq!(l.allow_at(5, i), Some(0));
        for t in 6..1000 {
            assert_eq!(l.allow_at(t, i), None, "at {t} ms");
        }
        assert_eq!(l.allow_at(1005, i), Some(994));
        assert_eq!(l.allow_at(1006, i), None);
        assert_eq!(l.allow_at(3000, i), Some(1));
    }

    #[test]
    fn the_macros_log_through_tracing() {
        // Compiles with fields and a message, and with a message alone.
        for i in 0..3 {
            crate::warn_limited!(i, error = %"e", "repeated warning");
            crate::error_limited!("repeated error");
        }
    }
}
