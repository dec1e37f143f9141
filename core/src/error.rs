//! The error type shared by every provider and the C ABI.
//!
//! Each variant maps to one negative error code ([`Error::code`]) with the
//! same numeric value as libfabric's `FI_E*` constant, so the C ABI and the
//! libfabric plug-in translate errors without a table of their own.

use std::fmt;

use crate::addr::PeerAddr;

/// Convenience alias for results whose error is [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong in xfer, as a value.
///
/// Errors of operations that were accepted come back as completions whose
/// `result` holds one of these; errors of calls that were refused are
/// returned directly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// An argument is invalid; the text names which and why.
    InvalidArgument(&'static str),
    /// The message was longer than the receive buffer. `len` bytes were
    /// delivered, the sender sent `olen`; nothing past the buffer was written.
    Truncated {
        /// Bytes written into the receive buffer.
        len: usize,
        /// Length of the message the sender sent.
        olen: usize,
    },
    /// The operation was cancelled before it completed.
    Canceled,
    /// The peer could not be reached or its connection failed; outstanding
    /// operations to it complete with this error.
    PeerUnreachable {
        /// The peer's handle in the address vector.
        peer: PeerAddr,
        /// Provider detail: the OS error number, or 0 when the peer closed.
        errno: i32,
    },
    /// The peer made no progress for the endpoint's progress timeout
    /// (`EndpointAttr::progress_timeout_ms`) while operations waited for it:
    /// its process is stopped or hung although its host still answers. Its
    /// connection was closed; every operation waiting for it ends with this
    /// error (`FI_ETIMEDOUT`).
    Stalled {
        /// The peer's handle in the address vector.
        peer: PeerAddr,
    },
    /// A peer sent bytes that violate the wire protocol; its connection was
    /// dropped. The text says what was wrong.
    Protocol(&'static str),
    /// A system call failed with this OS error number.
    Os(i32),
    /// A resource is temporarily exhausted; retry after progressing.
    Again,
    /// A timeout expired.
    TimedOut,
    /// The provider does not implement this.
    NotSupported(&'static str),
    /// The operation named does not exist (any more): e.g. no posted
    /// receive has the context given to `cancel` (`FI_ENOENT`, as
    /// `fi_cancel` returns). The text says what was looked for.
    NotFound(&'static str),
    /// The address bytes are not a valid endpoint name for this provider, or
    /// the peer handle is not in the address vector.
    AddressNotAvailable,
    /// No provider could be opened; the text says why.
    NoProvider(String),
    /// The target of an RMA operation refused it: unknown key, range outside
    /// the region, or an access the region was not registered for. The
    /// target's memory was not touched; the text says which check failed.
    RemoteAccess(&'static str),
    /// xfer itself failed (a bug); the text says where. The object that
    /// reported it should be closed.
    Internal(&'static str),
}

impl Error {
    /// The negative error code for C callers (same values as libfabric's `FI_E*`).
    pub fn code(&self) -> i32 {
        -match self {
            Error::InvalidArgument(_) => libc::EINVAL,
            Error::Truncated { .. } => 265, // FI_ETRUNC
            Error::Canceled => libc::ECANCELED,
            Error::PeerUnreachable { .. } => libc::EHOSTUNREACH,
            Error::Protocol(_) => libc::EPROTO,
            Error::Os(e) => *e,
            Error::Again => libc::EAGAIN,
            Error::TimedOut | Error::Stalled { .. } => libc::ETIMEDOUT,
            Error::NotSupported(_) => libc::EOPNOTSUPP,
            Error::NotFound(_) => libc::ENOENT,
            Error::AddressNotAvailable => libc::EADDRNOTAVAIL,
            Error::NoProvider(_) => libc::ENODATA,
            Error::RemoteAccess(_) => libc::EACCES,
            Error::Internal(_) => libc::EIO,
        }
    }

    /// The error of the last failed system call.
    #[inline]
    pub fn last_os_error() -> Error {
        Error::Os(crate::sys::errno())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            Error::Truncated { len, olen } => {
                write!(f, "message truncated: {olen} bytes sent, {len} fit the receive buffer")
            }
            Error::Canceled => f.write_str("operation cancelled"),
            Error::PeerUnreachable { peer, errno: 0 } => {
                write!(f, "peer {peer} unreachable: connection closed by peer")
            }
            Error::PeerUnreachable { peer, errno } => write!(
                f,
                "peer {peer} unreachable: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
            Error::Stalled { peer } => write!(f, "peer {peer} made no progress within the progress timeout"),
            Error::Protocol(what) => write!(f, "protocol error from peer: {what}"),
            Error::Os(e) => write!(f, "{}", std::io::Error::from_raw_os_error(*e)),
            Error::Again => f.write_str("resource temporarily unavailable, try again"),
            Error::TimedOut => f.write_str("timed out"),
            Error::NotSupported(what) => write!(f, "not supported: {what}"),
            Error::NotFound(what) => write!(f, "not found: {what}"),
            Error::AddressNotAvailable => f.write_str("address not available"),
            Error::NoProvider(why) => write!(f, "no provider available: {why}"),
            Error::RemoteAccess(what) => write!(f, "remote access denied: {what}"),
            Error::Internal(what) => write!(f, "internal error: {what}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Os(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_negative_and_match_libfabric() {
        assert_eq!(Error::Truncated { len: 1, olen: 2 }.code(), -265);
        assert_eq!(Error::Again.code(), -libc::EAGAIN);
        assert_eq!(Error::Canceled.code(), -libc::ECANCELED);
        assert_eq!(Error::RemoteAccess("unknown remote key").code(), -13); // -FI_EACCES
        assert_eq!(Error::NotFound("no such receive").code(), -2); // -FI_ENOENT
    }

    #[test]
    fn truncation_message_reports_both_lengths() {
        let text = Error::Truncated { len: 4, olen: 10 }.to_string();
        assert!(text.contains("10") && text.contains('4'), "{text}");
    }
}
