//! Version, provider listing, and domains.

use std::ffi::{c_char, c_int, CStr, CString};
use std::sync::{Mutex, Once, PoisonError};

use xfer_facade::DomainAttr;

use crate::error::{guard, invalid, Fail, XFER_SUCCESS};
use crate::handle::{self, Kind, Object};

/// Major version of the library this header belongs to.
pub const XFER_VERSION_MAJOR: u32 = 0;
/// Minor version of the library this header belongs to.
pub const XFER_VERSION_MINOR: u32 = 1;
/// Patch version of the library this header belongs to.
pub const XFER_VERSION_PATCH: u32 = 0;
/// The header's version as one number, `major << 16 | minor << 8 | patch`;
/// compare with `xfer_version()` to detect a header/library mismatch.
pub const XFER_VERSION: u32 = (XFER_VERSION_MAJOR << 16) | (XFER_VERSION_MINOR << 8) | XFER_VERSION_PATCH;

/// Room for a provider name in `xfer_info_t`, NUL included.
pub const XFER_INFO_NAME_MAX: usize = 16;
/// Room for a provider's description in `xfer_info_t`, NUL included.
pub const XFER_INFO_DETAIL_MAX: usize = 256;

/// A domain: the provider instance that CQs, AVs and endpoints are opened
/// from (opaque).
pub struct xfer_domain_t {
    _opaque: [u8; 0],
}

/// One provider compiled into the library (`fi_info`, simplified).
#[repr(C)]
pub struct xfer_info_t {
    /// The provider's name (`"tcp"`, `"verbs"`), NUL-terminated; pass it to
    /// `xfer_domain_open` to force this provider.
    pub name: [c_char; XFER_INFO_NAME_MAX],
    /// 1 when the provider can be opened on this machine, else 0.
    pub available: c_int,
    /// Why it can or cannot be used, NUL-terminated (truncated to fit).
    pub detail: [c_char; XFER_INFO_DETAIL_MAX],
}

/// The version of the library actually loaded, encoded like `XFER_VERSION`.
/// Thread-safe; never fails.
#[no_mangle]
pub extern "C" fn xfer_version() -> u32 {
    XFER_VERSION
}

/// The library's version as a static NUL-terminated string (`"0.1.0"`).
/// Never free it. Thread-safe; never returns NULL.
#[no_mangle]
pub extern "C" fn xfer_version_string() -> *const c_char {
    static VERSION: &CStr = match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(v) => v,
        Err(_) => c"?",
    };
    VERSION.as_ptr()
}

/// Number of providers compiled in, in order of preference (index them with
/// `xfer_info_get`). Thread-safe.
#[no_mangle]
pub extern "C" fn xfer_info_count() -> c_int {
    guard("xfer_info_count", || {
        Ok(c_int::try_from(xfer_facade::info().len()).unwrap_or(c_int::MAX))
    })
}

/// Copies the description of provider `index` (0 is the most preferred)
/// into `*out`, which the caller owns.
///
/// Returns 0, `XFER_EINVAL` when `out` is NULL or `index` is not below
/// `xfer_info_count()`. Thread-safe.
///
/// # Safety
/// `out` must be NULL or point to writable memory for one `xfer_info_t`.
#[no_mangle]
pub unsafe extern "C" fn xfer_info_get(index: usize, out: *mut xfer_info_t) -> c_int {
    guard("xfer_info_get", || {
        if out.is_null() {
            return Err(invalid("xfer_info_get: out is NULL"));
        }
        let all = xfer_facade::info();
        let p = all
            .get(index)
            .ok_or_else(|| invalid("xfer_info_get: index out of range"))?;
        let mut info = xfer_info_t {
            name: [0; XFER_INFO_NAME_MAX],
            available: c_int::from(p.available),
            detail: [0; XFER_INFO_DETAIL_MAX],
        };
        copy_c_string(&mut info.name, p.name);
        copy_c_string(&mut info.detail, &p.detail);
        // SAFETY: `out` is non-null and, by this function's contract, valid
        // for writing one xfer_info_t.
        unsafe { out.write(info) };
        Ok(XFER_SUCCESS)
    })
}

/// Copies `s` into `dst` as a NUL-terminated C string, truncated to fit.
fn copy_c_string(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, &b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = b as c_char;
    }
    if let Some(end) = dst.get_mut(n) {
        *end = 0;
    }
}

fn init_logging() {
    static ONCE: Once = Once::new();
    ONCE.call_once(xfer_facade::init_logging);
}

/// Opens a domain on the provider named `provider` (a NUL-terminated string
/// such as `"tcp"`), or, when `provider` is NULL, on the provider
/// `XFER_PROVIDER` names, else the first available one (see
/// `xfer_info_get`). On success stores the new handle in `*out`; on failure
/// stores NULL there (when `out` is not NULL).
///
/// Returns 0; `XFER_EINVAL` when `out` is NULL or `provider` is not UTF-8;
/// `XFER_ENODATA` when the provider is unknown or none can be opened (the
/// reasons are logged; set `XFER_LOG=debug`).
///
/// Ownership: the caller owns the handle and must release it with
/// `xfer_domain_close` after closing everything opened from it.
/// Thread-safe.
///
/// # Safety
/// `provider` must be NULL or a NUL-terminated string; `out` must be NULL
/// or point to writable memory for one pointer.
#[no_mangle]
pub unsafe extern "C" fn xfer_domain_open(provider: *const c_char, out: *mut *mut xfer_domain_t) -> c_int {
    guard("xfer_domain_open", || {
        if out.is_null() {
            return Err(invalid("xfer_domain_open: out is NULL"));
        }
        // SAFETY: `out` is non-null and valid for one pointer by contract.
        unsafe { out.write(std::ptr::null_mut()) };
        let mut attr = DomainAttr::from_env();
        if !provider.is_null() {
            // SAFETY: a non-null `provider` is NUL-terminated by contract.
            let name = unsafe { CStr::from_ptr(provider) };
            let name = name
                .to_str()
                .map_err(|_| invalid("xfer_domain_open: provider name is not UTF-8"))?;
            attr.provider = Some(name.to_string());
        }
        let h = open_handle(&attr)?;
        // SAFETY: as above.
        unsafe { out.write(h as usize as *mut xfer_domain_t) };
        Ok(XFER_SUCCESS)
    })
}

/// Opens a domain with `attr` and registers its handle.
pub(crate) fn open_handle(attr: &DomainAttr) -> Result<u64, Fail> {
    init_logging();
    let domain = xfer_facade::open(attr)?;
    tracing::debug!(provider = domain.provider(), "domain opened through the C ABI");
    handle::insert(Object::Domain(domain), &[])
}

/// Closes a domain.
///
/// Returns 0; `XFER_EBADF` for a bad or already closed handle;
/// `XFER_EBUSY` (and the domain stays open) while CQs, AVs or endpoints
/// opened from it are open. The handle is invalid after a successful close.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn xfer_domain_close(domain: *mut xfer_domain_t) -> c_int {
    guard("xfer_domain_close", || {
        let obj = handle::remove(domain as usize as u64, Kind::Domain)?;
        drop(obj);
        Ok(XFER_SUCCESS)
    })
}

/// Stores in `*name` the name of the provider behind `domain`, a static
/// NUL-terminated string (never free it).
///
/// Returns 0; `XFER_EBADF` for a bad handle; `XFER_EINVAL` when `name` is
/// NULL. Thread-safe.
///
/// # Safety
/// `name` must be NULL or point to writable memory for one pointer.
#[no_mangle]
pub unsafe extern "C" fn xfer_domain_provider(domain: *mut xfer_domain_t, name: *mut *const c_char) -> c_int {
    guard("xfer_domain_provider", || {
        let d = domain_of(domain)?;
        if name.is_null() {
            return Err(invalid("xfer_domain_provider: name is NULL"));
        }
        let s = static_c_str(d.provider());
        // SAFETY: `name` is non-null and valid for one pointer by contract.
        unsafe { name.write(s.as_ptr()) };
        Ok(XFER_SUCCESS)
    })
}

/// The Rust domain behind a C handle.
pub(crate) fn domain_of(h: *mut xfer_domain_t) -> Result<xfer_facade::Domain, Fail> {
    match handle::get(h as usize as u64, Kind::Domain)? {
        Object::Domain(d) => Ok(d),
        _ => Err(Fail(crate::error::XFER_EBADF)),
    }
}

/// A NUL-terminated copy of a provider's static name, made once per name and
/// kept for the life of the process (providers are a handful of constants).
fn static_c_str(s: &'static str) -> &'static CStr {
    static NAMES: Mutex<Vec<(&'static str, &'static CStr)>> = Mutex::new(Vec::new());
    let mut names = NAMES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(&(_, c)) = names.iter().find(|(n, _)| *n == s) {
        return c;
    }
    let c: &'static CStr = Box::leak(CString::new(s).unwrap_or_else(|_| c"?".into()).into_boxed_c_str());
    names.push((s, c));
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_constants_follow_the_package_version() {
        assert_eq!(XFER_VERSION_MAJOR.to_string(), env!("CARGO_PKG_VERSION_MAJOR"));
        assert_eq!(XFER_VERSION_MINOR.to_string(), env!("CARGO_PKG_VERSION_MINOR"));
        assert_eq!(XFER_VERSION_PATCH.to_string(), env!("CARGO_PKG_VERSION_PATCH"));
        // SAFETY: xfer_version_string returns a static NUL-terminated string.
        let s = unsafe { CStr::from_ptr(xfer_version_string()) };
        assert_eq!(s.to_str(), Ok(env!("CARGO_PKG_VERSION")));
    }

    #[test]
    fn c_strings_are_truncated_and_terminated() {
        let mut buf = [1 as c_char; 4];
        copy_c_string(&mut buf, "abcdef");
        assert_eq!(buf, [b'a' as c_char, b'b' as c_char, b'c' as c_char, 0]);
        copy_c_string(&mut buf, "");
        assert_eq!(buf[0], 0);
    }
}
