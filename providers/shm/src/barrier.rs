//! Asymmetric fences for the rings' two store-then-load handshakes
//! (docs/SHM.md "Wake-up"): a producer stores an entry's stamp then loads
//! the consumer's `sleeping` flag; a consumer stores its `head` then loads
//! the producer's `space_wanted` flag. Each pairs with the other side's
//! store of the flag then load of the stamp or head, and needs a full
//! fence on both sides, or the two loads may both miss the two stores.
//!
//! The fast sides run on every message; the slow sides only when a process
//! is about to sleep or finds a ring full. With `membarrier(2)`'s
//! `MEMBARRIER_CMD_GLOBAL_EXPEDITED`, a slow side makes every running
//! thread of every registered process execute a full fence, so the fast
//! sides need only a compiler fence. A pair goes this way ("light") when
//! both processes registered and said so in the handshake; a slow side
//! issues the system call whenever its own process can, unless the peer
//! said it cannot (before the peer's answer it may already be light).

use std::sync::atomic::{compiler_fence, fence, Ordering::SeqCst};
use std::sync::OnceLock;

const MEMBARRIER_CMD_QUERY: libc::c_long = 0;
const MEMBARRIER_CMD_GLOBAL_EXPEDITED: libc::c_long = 1 << 1;
const MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_long = 1 << 2;

fn membarrier(cmd: libc::c_long) -> libc::c_long {
    // SAFETY: membarrier takes two integers and touches no memory of ours.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0 as libc::c_long, 0 as libc::c_long) }
}

/// Whether this process is registered for, and can issue, global expedited
/// barriers (checked and registered once; false where the kernel or a
/// seccomp filter refuses `membarrier`).
pub fn registered() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    *REGISTERED.get_or_init(|| {
        let want = MEMBARRIER_CMD_GLOBAL_EXPEDITED | MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED;
        let has = membarrier(MEMBARRIER_CMD_QUERY);
        let ok = has >= 0
            && has & want == want
            && membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0
            && membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0;
        tracing::debug!(ok, "shm: membarrier (global expedited)");
        ok
    })
}

/// The fast side's fence: a compiler fence on a light pair, else a full one.
#[inline(always)]
pub fn light(pair_light: bool) {
    if pair_light {
        compiler_fence(SeqCst);
    } else {
        fence(SeqCst);
    }
}

/// The slow side's fence: a full one, then, when the peer may have skipped
/// its own (`heavy`), a global expedited barrier. If that call fails (it
/// did not when registered), the peer's fast path may go unordered: logged.
pub fn heavy(heavy: bool) {
    fence(SeqCst);
    if heavy && membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) != 0 {
        xfer_core::error_limited!(
            error = %std::io::Error::last_os_error(),
            "shm: membarrier failed after it had worked; a wake-up may be late"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registration_is_stable_and_barriers_return() {
        let first = registered();
        assert_eq!(registered(), first, "checked once");
        heavy(first);
        light(first);
        light(false);
    }
}
