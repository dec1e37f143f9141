//! The error type shared by every provider and the C ABI.
//!
//! Each variant maps to one negative error code ([`Error::code`]) with the
//! same numeric value as libfabric's `FI_E*` constant, so the C ABI and the
//! libfabric plug-in translate errors without a table of their own.

use std::fmt;

use crate::addr::{Address, PeerAddr};

/// Convenience alias for results whose error is [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong in xfer, as a value.
///
/// Errors of operations that were accepted come back as completions whose
/// `result` holds one of these; errors of calls that were refused are
/// returned directly.
///
/// More variants may come (`#[non_exhaustive]`): match the ones you handle
/// and keep a `_` arm. In code that speaks `std::io`, `?` turns it into an
/// [`std::io::Error`] of a fitting [`std::io::ErrorKind`] (see the
/// `From<Error> for io::Error` impl).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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
        /// Provider detail: the OS error number (0 when a connection that
        /// had not failed was replaced and took the operation with it).
        errno: i32,
    },
    /// The peer closed its end in order (its endpoint was closed or its
    /// process exited; the transport cannot tell these apart) while this
    /// operation was still outstanding to it: a send it had not taken in
    /// full, a receive directed at it, an RMA it had not answered. Nothing
    /// broke: the peer left. A later operation to it fails as for any peer
    /// that is not there ([`Error::PeerUnreachable`], `ECONNREFUSED`).
    /// C: `XFER_ECONNRESET` (libfabric's `FI_ECONNRESET`).
    PeerClosed {
        /// The peer's handle in the address vector.
        peer: PeerAddr,
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
    /// A message (or a write with immediate data) came from a sender whose
    /// name is not in the address vector, on an endpoint that asked to be told
    /// ([`EndpointAttr::source_err`](crate::EndpointAttr::source_err),
    /// libfabric's `FI_SOURCE_ERR`). The message was received all the same:
    /// the completion's `len`, `buf`, `tag` and `data` are as for success.
    /// Inserting the name into the address vector gives the sender's handle
    /// (`FI_EADDRNOTAVAIL`, with the name as the error's data). Boxed, so
    /// that completions stay small.
    UnknownSource(Box<Address>),
    /// No provider could be opened; the text says why.
    NoProvider(String),
    /// A transport setting ([`Params`](crate::Params)) is unknown to its
    /// transport or its value does not parse; the text names the key
    /// (`FI_EINVAL`).
    InvalidSetting(Box<str>),
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
            Error::PeerClosed { .. } => libc::ECONNRESET,
            Error::Protocol(_) => libc::EPROTO,
            Error::Os(e) => *e,
            Error::Again => libc::EAGAIN,
            Error::TimedOut | Error::Stalled { .. } => libc::ETIMEDOUT,
            Error::NotSupported(_) => libc::EOPNOTSUPP,
            Error::NotFound(_) => libc::ENOENT,
            Error::AddressNotAvailable | Error::UnknownSource(_) => libc::EADDRNOTAVAIL,
            Error::NoProvider(_) => libc::ENODATA,
            Error::InvalidSetting(_) => libc::EINVAL,
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
                write!(f, "peer {peer} unreachable: its connection ended")
            }
            Error::PeerUnreachable { peer, errno } => write!(
                f,
                "peer {peer} unreachable: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
            Error::PeerClosed { peer } => write!(f, "peer {peer} closed its end before the operation completed"),
            Error::Stalled { peer } => write!(f, "peer {peer} made no progress within the progress timeout"),
            Error::Protocol(what) => write!(f, "protocol error from peer: {what}"),
            Error::Os(e) => write!(f, "{}", std::io::Error::from_raw_os_error(*e)),
            Error::Again => f.write_str("resource temporarily unavailable, try again"),
            Error::TimedOut => f.write_str("timed out"),
            Error::NotSupported(what) => write!(f, "not supported: {what}"),
            Error::NotFound(what) => write!(f, "not found: {what}"),
            Error::AddressNotAvailable => f.write_str("address not available"),
            Error::UnknownSource(name) => write!(f, "message from {name}, which is not in the address vector"),
            Error::NoProvider(why) => write!(f, "no provider available: {why}"),
            Error::InvalidSetting(why) => write!(f, "invalid setting: {why}"),
            Error::RemoteAccess(what) => write!(f, "remote access denied: {what}"),
            Error::Internal(what) => write!(f, "internal error: {what}"),
        }
    }
}

impl std::error::Error for Error {}

impl Error {
    /// The [`std::io::ErrorKind`] this error converts to.
    ///
    /// | variant | kind |
    /// |---|---|
    /// | `InvalidArgument`, `InvalidSetting` | `InvalidInput` |
    /// | `Truncated`, `Canceled`, `Internal` | `Other` |
    /// | `PeerClosed` | `ConnectionReset` |
    /// | `PeerUnreachable` with `errno` 0 | `ConnectionAborted` |
    /// | `PeerUnreachable` with an `errno` | the OS error's kind when it is about connections (`ConnectionRefused`, `ConnectionReset`, `BrokenPipe`, `TimedOut`, `NetworkUnreachable`, ...), else `HostUnreachable` |
    /// | `Os` | the OS error's kind |
    /// | `Protocol` | `InvalidData` |
    /// | `Again` | `WouldBlock` |
    /// | `TimedOut`, `Stalled` | `TimedOut` |
    /// | `NotSupported`, `NoProvider` | `Unsupported` |
    /// | `NotFound` | `NotFound` |
    /// | `AddressNotAvailable`, `UnknownSource` | `AddrNotAvailable` |
    /// | `RemoteAccess` | `PermissionDenied` |
    ///
    /// `Canceled` is not `Interrupted`: std's `read_exact`/`write_all`
    /// loops retry `Interrupted`, and a cancelled operation must not be.
    pub fn io_kind(&self) -> std::io::ErrorKind {
        use std::io::ErrorKind as K;
        match self {
            Error::InvalidArgument(_) | Error::InvalidSetting(_) => K::InvalidInput,
            Error::Truncated { .. } | Error::Canceled | Error::Internal(_) => K::Other,
            Error::PeerClosed { .. } => K::ConnectionReset,
            Error::PeerUnreachable { errno: 0, .. } => K::ConnectionAborted,
            Error::PeerUnreachable { errno, .. } => match std::io::Error::from_raw_os_error(*errno).kind() {
                k @ (K::ConnectionRefused
                | K::ConnectionReset
                | K::ConnectionAborted
                | K::NotConnected
                | K::BrokenPipe
                | K::TimedOut
                | K::NetworkUnreachable
                | K::NetworkDown
                | K::AddrNotAvailable) => k,
                _ => K::HostUnreachable,
            },
            Error::Os(e) => std::io::Error::from_raw_os_error(*e).kind(),
            Error::Protocol(_) => K::InvalidData,
            Error::Again => K::WouldBlock,
            Error::TimedOut | Error::Stalled { .. } => K::TimedOut,
            Error::NotSupported(_) | Error::NoProvider(_) => K::Unsupported,
            Error::NotFound(_) => K::NotFound,
            Error::AddressNotAvailable | Error::UnknownSource(_) => K::AddrNotAvailable,
            Error::RemoteAccess(_) => K::PermissionDenied,
        }
    }
}

/// Recovers the xfer error an [`std::io::Error`] made by the reverse
/// conversion carries; any other I/O error becomes [`Error::Os`] (`EIO`
/// when it has no OS error number).
impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        if let Some(inner) = e.get_ref().and_then(|r| r.downcast_ref::<Error>()) {
            return inner.clone();
        }
        Error::Os(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

/// An I/O error of kind [`Error::io_kind`]. [`Error::Os`] becomes the OS
/// error itself (`raw_os_error()` gives the number); every other variant is
/// kept inside (`get_ref()` then `downcast_ref::<xfer::Error>()`, or
/// `xfer::Error::from` the I/O error, gives it back) and its text is the
/// I/O error's.
impl From<Error> for std::io::Error {
    fn from(e: Error) -> std::io::Error {
        match e {
            Error::Os(errno) => std::io::Error::from_raw_os_error(errno),
            e => std::io::Error::new(e.io_kind(), e),
        }
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
        let name = Box::new(Address::new(b"ab").expect("a name"));
        assert_eq!(Error::UnknownSource(name).code(), -libc::EADDRNOTAVAIL); // -FI_EADDRNOTAVAIL
        assert_eq!(Error::PeerClosed { peer: PeerAddr(0) }.code(), -104); // -FI_ECONNRESET
    }

    /// Every completion carries a `Result<(), Error>`: an error's payload
    /// (an unknown sender's name included, boxed) must not make it larger
    /// than the `String` of `NoProvider` already does.
    #[test]
    fn an_error_stays_three_words() {
        assert_eq!(std::mem::size_of::<Result<()>>(), 3 * std::mem::size_of::<usize>());
    }

    #[test]
    fn io_errors_have_fitting_kinds_and_give_the_error_back() {
        use std::io::{self, ErrorKind as K};
        let cases = [
            (Error::InvalidArgument("x"), K::InvalidInput),
            (Error::InvalidSetting("tcp.x".into()), K::InvalidInput),
            (Error::Truncated { len: 1, olen: 2 }, K::Other),
            (Error::Canceled, K::Other),
            (
                Error::PeerUnreachable {
                    peer: PeerAddr(1),
                    errno: 0,
                },
                K::ConnectionAborted,
            ),
            (Error::PeerClosed { peer: PeerAddr(1) }, K::ConnectionReset),
            (
                Error::PeerUnreachable {
                    peer: PeerAddr(1),
                    errno: libc::ECONNREFUSED,
                },
                K::ConnectionRefused,
            ),
            (
                Error::PeerUnreachable {
                    peer: PeerAddr(1),
                    errno: libc::ECONNRESET,
                },
                K::ConnectionReset,
            ),
            (
                Error::PeerUnreachable {
                    peer: PeerAddr(1),
                    errno: libc::ETIMEDOUT,
                },
                K::TimedOut,
            ),
            (
                Error::PeerUnreachable {
                    peer: PeerAddr(1),
                    errno: libc::EPROTO,
                },
                K::HostUnreachable,
            ),
            (Error::Protocol("x"), K::InvalidData),
            (Error::Again, K::WouldBlock),
            (Error::TimedOut, K::TimedOut),
            (Error::NotSupported("x"), K::Unsupported),
            (Error::NotFound("x"), K::NotFound),
            (Error::AddressNotAvailable, K::AddrNotAvailable),
            (
                Error::UnknownSource(Box::new(Address::new(b"ab").expect("a name"))),
                K::AddrNotAvailable,
            ),
            (Error::NoProvider("x".into()), K::Unsupported),
            (Error::RemoteAccess("x"), K::PermissionDenied),
            (Error::Internal("x"), K::Other),
        ];
        for (e, kind) in cases {
            let io = io::Error::from(e.clone());
            assert_eq!(io.kind(), kind, "{e:?}");
            assert_eq!(io.to_string(), e.to_string());
            assert_eq!(Error::from(io), e, "the round trip gives the error back");
        }
        let io = io::Error::from(Error::Os(libc::ECONNREFUSED));
        assert_eq!(
            (io.kind(), io.raw_os_error()),
            (K::ConnectionRefused, Some(libc::ECONNREFUSED))
        );
        assert_eq!(Error::from(io), Error::Os(libc::ECONNREFUSED));
        assert_eq!(Error::from(io::Error::other("not ours")), Error::Os(libc::EIO));
    }

    #[test]
    fn rejected_is_an_error_that_says_its_reason_once() {
        use std::error::Error as _;
        let r = crate::Rejected::new(Error::Again, vec![1u8, 2, 3]);
        assert_eq!(r.to_string(), Error::Again.to_string());
        assert!(r.source().is_none());
        let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(r);
        assert_eq!(boxed.to_string(), Error::Again.to_string());
        let io = std::io::Error::from(crate::Rejected::new(Error::TimedOut, ()));
        assert_eq!(io.kind(), std::io::ErrorKind::TimedOut);
    }

    #[test]
    fn truncation_message_reports_both_lengths() {
        let text = Error::Truncated { len: 4, olen: 10 }.to_string();
        assert!(text.contains("10") && text.contains('4'), "{text}");
    }
}
