//! The host identity: eight bytes two processes compare to tell whether
//! each can reach the other's shared-memory port and read its memory, so a
//! composite endpoint chooses shared memory for a peer before connecting.
//!
//! What reaching a peer takes, and so what the identity hashes:
//! - the same kernel instance: the boot id
//!   (`/proc/sys/kernel/random/boot_id`, new at every boot and distinct
//!   between machines and VMs);
//! - the same network namespace: a port's address is an abstract Unix
//!   socket name, visible only there;
//! - the same user (effective uid): the port refuses peers of another user
//!   (`SO_PEERCRED`), and cross-memory attach needs ptrace rights;
//! - the same user and pid namespaces: ptrace rights and the peer's pid as
//!   this process sees it, which cross-memory attach reads by.
//!
//! The mount and IPC namespaces are left out: the segment is a memfd handed
//! over the socket, never a path or a System V object. Where `/proc` cannot
//! be read the identity includes this process's id, so it matches no
//! other process and every peer goes over the other transport.

use std::fmt::Write;

/// Bytes of a host identity.
pub const LEN: usize = 8;

/// The namespaces that decide whether a peer is reachable.
const NAMESPACES: [&str; 3] = ["net", "user", "pid"];

/// This process's host identity.
pub fn identity() -> [u8; LEN] {
    let mut text = String::new();
    match describe() {
        Some(d) => text.push_str(&d),
        None => {
            let _ = write!(text, "unknown:{}", std::process::id());
        }
    }
    fnv1a(text.as_bytes()).to_le_bytes()
}

/// What the identity hashes, as text (`xfer-info` prints it): the boot id,
/// the effective uid and each namespace's link; `None` when `/proc` does
/// not tell.
pub fn describe() -> Option<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let mut text = format!("boot {} uid {uid}", boot.trim());
    for ns in NAMESPACES {
        let link = std::fs::read_link(format!("/proc/self/ns/{ns}")).ok()?;
        let _ = write!(text, " {}", link.to_string_lossy());
    }
    Some(text)
}

/// FNV-1a, 64 bits: stable across processes and builds (unlike std's
/// randomly keyed hasher), which is what two processes comparing need.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_in_a_process_and_made_of_what_decides_reach() {
        assert_eq!(identity(), identity());
        let d = describe().expect("/proc readable in tests");
        for part in ["boot ", " uid ", "net:[", "user:[", "pid:["] {
            assert!(d.contains(part), "{d}");
        }
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
