//! Cross-memory attach (`process_vm_readv`/`writev`): single-copy moves of
//! large payloads between the two processes, and the run-time probe that
//! says whether the kernel lets this process use it on a given peer.
//!
//! The kernel allows it when this process may ptrace the peer (same user
//! and, under Yama, `ptrace_scope` 0, or CAP_SYS_PTRACE; containers often
//! deny it through seccomp or user namespaces). Rather than predict that,
//! each side reads the other's probe word once, at the handshake.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::sys;

/// Whether cross-memory attach works towards a peer, as probed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cma {
    /// The probe read the peer's word and found the value it announced.
    Available,
    /// The kernel refused (EPERM: ptrace scope, a non-dumpable peer, a
    /// container's policy): large payloads need the two-copy path.
    NotPermitted,
    /// The kernel has no cross-memory attach (ENOSYS) or seccomp hides it.
    Unsupported,
    /// The read succeeded but found another value, or failed otherwise:
    /// the peer is not where it claims to be (another pid namespace).
    Mismatch,
    /// Not probed yet (the handshake is not complete).
    Unknown,
}

impl std::fmt::Display for Cma {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Cma::Available => "CMA available",
            Cma::NotPermitted => "CMA not permitted",
            Cma::Unsupported => "CMA not supported by the kernel",
            Cma::Mismatch => "CMA probe mismatch",
            Cma::Unknown => "CMA not probed yet",
        })
    }
}

/// This process's probe word: a random value at a fixed address that peers
/// read back to prove the attach works.
static PROBE: AtomicU64 = AtomicU64::new(0);

/// The address and value of this process's probe word.
pub fn probe_word() -> (u64, u64) {
    let mut v = PROBE.load(Ordering::Relaxed);
    if v == 0 {
        let fresh = sys::random_u64() | 1;
        v = match PROBE.compare_exchange(0, fresh, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => fresh,
            Err(cur) => cur,
        };
    }
    (PROBE.as_ptr() as u64, v)
}

/// Reads the peer's probe word and says what that tells.
pub fn probe(pid: libc::pid_t, addr: u64, value: u64) -> Cma {
    let mut buf = [0u8; 8];
    match sys::vm_read(pid, addr, &mut buf) {
        Ok(8) if u64::from_ne_bytes(buf) == value => Cma::Available,
        Ok(_) => Cma::Mismatch,
        Err(e) => match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => Cma::NotPermitted,
            Some(libc::ENOSYS) => Cma::Unsupported,
            _ => Cma::Mismatch,
        },
    }
}

/// Why a cross-memory move failed.
#[derive(Debug)]
pub enum CmaError {
    /// No such peer, or its handshake is not complete.
    NoPeer,
    /// The probe found cross-memory attach unusable towards this peer.
    NotAvailable(Cma),
    /// The peer's range is not mapped (EFAULT) or ended early: a bad
    /// address from the peer; this side's memory is untouched past `done`.
    BadRange {
        /// Bytes moved before the range ended.
        done: usize,
    },
    /// The peer process is gone (ESRCH).
    PeerGone,
    /// The target revoked the grant the copy was to go under (fence.rs):
    /// nothing was copied.
    Revoked,
    /// Another system error.
    Os(io::Error),
}

impl std::fmt::Display for CmaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CmaError::NoPeer => write!(f, "no such connected peer"),
            CmaError::NotAvailable(c) => write!(f, "{c}"),
            CmaError::BadRange { done } => write!(f, "peer range not mapped (after {done} bytes)"),
            CmaError::PeerGone => write!(f, "peer process is gone"),
            CmaError::Revoked => write!(f, "the target revoked the grant"),
            CmaError::Os(e) => write!(f, "cross-memory attach failed: {e}"),
        }
    }
}

impl std::error::Error for CmaError {}

fn classify(e: io::Error, done: usize) -> CmaError {
    match e.raw_os_error() {
        Some(libc::EFAULT) => CmaError::BadRange { done },
        Some(libc::ESRCH) => CmaError::PeerGone,
        Some(libc::EPERM) => CmaError::NotAvailable(Cma::NotPermitted),
        _ => CmaError::Os(e),
    }
}

/// Pulls `dst.len()` bytes at `remote` in `pid` into `dst`, in as many
/// calls as the kernel needs.
pub fn read(pid: libc::pid_t, remote: u64, dst: &mut [u8]) -> Result<(), CmaError> {
    let mut done = 0;
    while done < dst.len() {
        let at = remote.checked_add(done as u64).ok_or(CmaError::BadRange { done })?;
        match sys::vm_read(pid, at, &mut dst[done..]) {
            Ok(0) => return Err(CmaError::BadRange { done }),
            Ok(n) => done += n,
            Err(e) => return Err(classify(e, done)),
        }
    }
    Ok(())
}

/// Pushes `src` to `remote` in `pid`, in as many calls as the kernel needs.
pub fn write(pid: libc::pid_t, remote: u64, src: &[u8]) -> Result<(), CmaError> {
    let mut done = 0;
    while done < src.len() {
        let at = remote.checked_add(done as u64).ok_or(CmaError::BadRange { done })?;
        match sys::vm_write(pid, at, &src[done..]) {
            Ok(0) => return Err(CmaError::BadRange { done }),
            Ok(n) => done += n,
            Err(e) => return Err(classify(e, done)),
        }
    }
    Ok(())
}
