//! Small helpers shared by the wrappers: errno capture and MTU conversions.

use rdma_sys::ibv_mtu;
use xfer_core::Error;

/// The calling thread's `errno` as an xfer error (EIO if errno is 0).
pub(crate) fn last_os_error() -> Error {
    match std::io::Error::last_os_error().raw_os_error() {
        Some(e) if e != 0 => Error::Os(e),
        _ => Error::Os(libc::EIO),
    }
}

/// A verbs return code (0, or an errno value / -1 with errno set) as a result.
/// Inline: every post checks one; the error out of line.
#[inline]
pub(crate) fn check(ret: libc::c_int) -> xfer_core::Result<()> {
    if ret == 0 {
        Ok(())
    } else {
        Err(failed(ret))
    }
}

/// The error a nonzero verbs return code stands for.
#[cold]
#[inline(never)]
fn failed(ret: libc::c_int) -> Error {
    match ret {
        -1 => last_os_error(),
        e if e < 0 => Error::Os(-e),
        e => Error::Os(e),
    }
}

/// Bytes of an `ibv_mtu` value (0 for an unknown value).
pub(crate) fn mtu_bytes(m: ibv_mtu::Type) -> u32 {
    match m {
        ibv_mtu::IBV_MTU_256 => 256,
        ibv_mtu::IBV_MTU_512 => 512,
        ibv_mtu::IBV_MTU_1024 => 1024,
        ibv_mtu::IBV_MTU_2048 => 2048,
        ibv_mtu::IBV_MTU_4096 => 4096,
        _ => 0,
    }
}

/// The largest `ibv_mtu` not above `bytes` (256 at least).
pub(crate) fn mtu_from_bytes(bytes: u32) -> ibv_mtu::Type {
    match bytes {
        b if b >= 4096 => ibv_mtu::IBV_MTU_4096,
        b if b >= 2048 => ibv_mtu::IBV_MTU_2048,
        b if b >= 1024 => ibv_mtu::IBV_MTU_1024,
        b if b >= 512 => ibv_mtu::IBV_MTU_512,
        _ => ibv_mtu::IBV_MTU_256,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_round_trips() {
        for b in [256, 512, 1024, 2048, 4096] {
            assert_eq!(mtu_bytes(mtu_from_bytes(b)), b);
        }
        assert_eq!(mtu_bytes(mtu_from_bytes(1500)), 1024);
        assert_eq!(mtu_bytes(mtu_from_bytes(0)), 256);
        assert_eq!(mtu_bytes(99), 0);
        assert_eq!(check(0), Ok(()));
        assert_eq!(check(libc::EINVAL), Err(Error::Os(libc::EINVAL)));
    }
}
