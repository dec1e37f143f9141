//! Error codes, `xfer_strerror`, and the guard every entry point runs in.
//!
//! Codes are negative and equal to minus libfabric's `FI_E*` values (which
//! are Linux errno values below 256), the same numbers the Rust API's
//! `Error::code()` gives. An entry point returns 0 (or a count) on success
//! and one of these on failure; a completion's `err` field holds one too.

use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use xfer_facade::{Error, Rejected};

/// Success.
pub const XFER_SUCCESS: c_int = 0;
/// No such operation: `xfer_ep_cancel` found no posted receive with that
/// context (`FI_ENOENT`, as `fi_cancel` returns).
pub const XFER_ENOENT: c_int = -2;
/// Internal error (a bug in xfer, or a panic caught at the C boundary).
pub const XFER_EIO: c_int = -5;
/// Bad handle: `NULL`, already closed, of another kind, or not a handle at all.
pub const XFER_EBADF: c_int = -9;
/// Try again: a resource is busy or a completion is ready (`xfer_cq_trywait`).
pub const XFER_EAGAIN: c_int = -11;
/// RMA refused by the target: unknown (e.g. deregistered) key, range
/// outside the region, or access the region was not registered with
/// (`FI_EACCES`). Reported in the initiator's completion.
pub const XFER_EACCES: c_int = -13;
/// Out of memory or out of handles.
pub const XFER_ENOMEM: c_int = -12;
/// The object is still in use: close the handles opened from it first.
pub const XFER_EBUSY: c_int = -16;
/// Invalid argument: a null pointer, a bad length, a value out of range.
pub const XFER_EINVAL: c_int = -22;
/// No provider could be opened, or the provider named is unknown.
pub const XFER_ENODATA: c_int = -61;
/// A peer broke the wire protocol; its connection was dropped.
pub const XFER_EPROTO: c_int = -71;
/// The operation or option is not supported.
pub const XFER_EOPNOTSUPP: c_int = -95;
/// The address is not a name of this provider, or the peer is not in the AV.
pub const XFER_EADDRNOTAVAIL: c_int = -99;
/// The peer closed its end in order (endpoint closed or process exited)
/// while the operation was outstanding to it (`FI_ECONNRESET`); a failed
/// connection is `XFER_EHOSTUNREACH` instead.
pub const XFER_ECONNRESET: c_int = -104;
/// A timeout expired (`xfer_cq_wait`).
pub const XFER_ETIMEDOUT: c_int = -110;
/// The peer could not be reached or its connection failed.
pub const XFER_EHOSTUNREACH: c_int = -113;
/// The operation was cancelled (`xfer_ep_cancel`, or its endpoint was closed).
pub const XFER_ECANCELED: c_int = -125;
/// Unspecified error (libfabric's `FI_EOTHER`).
pub const XFER_EOTHER: c_int = -256;
/// The buffer given is too small; the needed length was stored (`FI_ETOOSMALL`).
pub const XFER_ETOOSMALL: c_int = -257;
/// A flag is unknown or not supported by this call (`FI_EBADFLAGS`).
pub const XFER_EBADFLAGS: c_int = -260;
/// The message was longer than the receive buffer (`FI_ETRUNC`).
pub const XFER_ETRUNC: c_int = -265;

/// A failed call: the negative code returned to C.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fail(pub(crate) c_int);

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        tracing::debug!(error = %e, "call refused");
        Fail(e.code())
    }
}

impl<T> From<Rejected<T>> for Fail {
    fn from(r: Rejected<T>) -> Fail {
        Fail::from(r.error)
    }
}

/// Shorthand for an invalid-argument failure, logged with its reason.
pub(crate) fn invalid(what: &'static str) -> Fail {
    tracing::debug!(reason = what, "invalid argument");
    Fail(XFER_EINVAL)
}

/// Runs an entry point's body: its `Ok` value or error code comes back as
/// the `int` C sees, and a panic is caught here and reported as
/// `XFER_EIO` instead of unwinding into C (which is undefined behaviour).
pub(crate) fn guard(function: &'static str, body: impl FnOnce() -> Result<c_int, Fail>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(Fail(code))) => code,
        Err(_) => {
            xfer_facade::error_limited!(function, "panic caught at the C boundary; reporting XFER_EIO");
            XFER_EIO
        }
    }
}

/// Highest code with its own message; the rest read "Unknown error".
const LAST_CODE: usize = 270;

/// libfabric's messages for its own codes (256 and up).
const FI_MESSAGES: [&str; 15] = [
    "Unspecified error",
    "Provided buffer is too small",
    "Operation not permitted in current state",
    "Error available",
    "Flags not supported",
    "Missing or unavailable event queue",
    "Invalid resource domain",
    "Missing or unavailable completion queue",
    "CRC error",
    "Truncation error",
    "Required key not available",
    "Missing or unavailable address vector",
    "Queue has been overrun",
    "No receive buffer available",
    "Missing or unavailable memory region",
];

fn message(code: usize) -> String {
    match code {
        0 => "Success".into(),
        9 => "Bad handle (NULL, closed, of another kind, or not an xfer handle)".into(),
        16 => "Object in use: close the handles opened from it first".into(),
        5 => "Internal error in xfer".into(),
        256..=LAST_CODE => FI_MESSAGES[code - 256].into(),
        _ => {
            let text = std::io::Error::from_raw_os_error(code as i32).to_string();
            match text.find(" (os error") {
                Some(cut) => text[..cut].to_string(),
                None => text,
            }
        }
    }
}

/// Messages for codes 0..=LAST_CODE, built once and kept for the life of the
/// process, so the pointers `xfer_strerror` returns never dangle.
fn messages() -> &'static [CString] {
    static TABLE: OnceLock<Vec<CString>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=LAST_CODE)
            .map(|c| CString::new(message(c)).unwrap_or_else(|_| c"Unknown error".into()))
            .collect()
    })
}

/// A human-readable message for an error code.
///
/// `code` may be negative (as returned) or positive. The string is static:
/// never free it; it stays valid for the life of the process. Thread-safe.
/// Never returns NULL.
#[no_mangle]
pub extern "C" fn xfer_strerror(code: c_int) -> *const c_char {
    let found = catch_unwind(|| {
        messages()
            .get(code.unsigned_abs() as usize)
            .map(|m| m.as_ptr())
            .unwrap_or(c"Unknown error".as_ptr())
    });
    found.unwrap_or(c"Unknown error".as_ptr())
}

/// The text of a code, for tests.
#[cfg(test)]
pub(crate) fn text(code: c_int) -> &'static str {
    // SAFETY: xfer_strerror returns a pointer to a NUL-terminated string
    // that lives for the whole process (a static or the leaked table).
    unsafe { std::ffi::CStr::from_ptr(xfer_strerror(code)) }
        .to_str()
        .unwrap_or("?")
}

#[cfg(test)]
mod tests {
    use super::*;
    use xfer_facade::PeerAddr;

    /// Every variant of the Rust error maps to a constant of the header.
    #[test]
    fn constants_match_the_rust_error_codes() {
        let pairs = [
            (Error::InvalidArgument("x"), XFER_EINVAL),
            (Error::Truncated { len: 1, olen: 2 }, XFER_ETRUNC),
            (Error::Canceled, XFER_ECANCELED),
            (
                Error::PeerUnreachable {
                    peer: PeerAddr(0),
                    errno: 0,
                },
                XFER_EHOSTUNREACH,
            ),
            (Error::PeerClosed { peer: PeerAddr(0) }, XFER_ECONNRESET),
            (Error::Protocol("x"), XFER_EPROTO),
            (Error::Os(libc::EBADF), XFER_EBADF),
            (Error::Again, XFER_EAGAIN),
            (Error::TimedOut, XFER_ETIMEDOUT),
            (Error::NotSupported("x"), XFER_EOPNOTSUPP),
            (Error::NotFound("x"), XFER_ENOENT),
            (Error::AddressNotAvailable, XFER_EADDRNOTAVAIL),
            (Error::NoProvider("x".into()), XFER_ENODATA),
            (Error::Internal("x"), XFER_EIO),
            (Error::RemoteAccess("x"), XFER_EACCES),
        ];
        for (e, c) in pairs {
            assert_eq!(e.code(), c, "{e:?}");
        }
        assert_eq!(XFER_EBUSY, -libc::EBUSY);
        assert_eq!(XFER_ENOMEM, -libc::ENOMEM);
    }

    #[test]
    fn strerror_covers_both_signs_and_unknown_codes() {
        assert_eq!(text(XFER_ETRUNC), "Truncation error");
        assert_eq!(text(-XFER_ETRUNC), "Truncation error");
        assert_eq!(text(XFER_ETOOSMALL), "Provided buffer is too small");
        assert!(text(XFER_EINVAL).contains("nvalid"), "{}", text(XFER_EINVAL));
        assert_eq!(text(c_int::MIN), "Unknown error");
        assert_eq!(text(100_000), "Unknown error");
        assert_eq!(
            xfer_strerror(XFER_EAGAIN),
            xfer_strerror(XFER_EAGAIN),
            "stable pointers"
        );
    }

    #[test]
    fn guard_turns_panics_into_eio() {
        assert_eq!(guard("t", || Ok(3)), 3);
        assert_eq!(guard("t", || Err(Fail(XFER_EINVAL))), XFER_EINVAL);
        assert_eq!(guard("t", || panic!("boom")), XFER_EIO);
    }
}
