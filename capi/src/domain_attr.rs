//! Domain attributes: the provider and transport settings as key/value
//! pairs (libfabric's `fi_param` style), filled in before
//! `xfer_domain_open_attr`.
//!
//! ```c
//! xfer_domain_attr_t *attr;
//! xfer_domain_attr_open(&attr);
//! xfer_domain_attr_set(attr, "tcp.iface", "eth0");     /* XFER_TCP_IFACE */
//! xfer_domain_attr_set(attr, "verbs.device", "mlx5_0"); /* XFER_VERBS_DEVICE */
//! xfer_domain_open_attr(attr, &domain);
//! xfer_domain_attr_close(attr);
//! ```

use std::ffi::{c_char, c_int, CStr};
use std::sync::{Arc, Mutex, PoisonError};

use xfer_facade::DomainAttr;

use crate::domain::xfer_domain_t;
use crate::error::{guard, invalid, Fail, XFER_SUCCESS};
use crate::handle::{self, Kind, Object};

/// Domain attributes being filled in (opaque): the provider to force and
/// transport settings by key.
pub struct xfer_domain_attr_t {
    _opaque: [u8; 0],
}

/// The attributes behind a C handle.
fn attr_of(h: *mut xfer_domain_attr_t) -> Result<Arc<Mutex<DomainAttr>>, Fail> {
    match handle::get(h as usize as u64, Kind::DomainAttr)? {
        Object::DomainAttr(a) => Ok(a),
        _ => Err(Fail(crate::error::XFER_EBADF)),
    }
}

/// A NUL-terminated UTF-8 argument.
///
/// # Safety
/// `p` must be NULL or NUL-terminated, valid for the returned life.
unsafe fn text<'a>(p: *const c_char, what: &'static str) -> Result<&'a str, Fail> {
    if p.is_null() {
        return Err(invalid(what));
    }
    // SAFETY: non-null, so NUL-terminated by contract.
    unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| invalid(what))
}

/// Opens domain attributes holding the defaults: the provider
/// `XFER_PROVIDER` names (else the automatic choice) and no transport
/// settings (each transport still applies its `XFER_*` variables, under
/// the settings given here). Stores the handle in `*out` (NULL on failure).
///
/// Returns 0; `XFER_EINVAL` when `out` is NULL. The caller closes it with
/// `xfer_domain_attr_close`. Thread-safe.
///
/// # Safety
/// `out` must be NULL or point to writable memory for one pointer.
#[no_mangle]
pub unsafe extern "C" fn xfer_domain_attr_open(out: *mut *mut xfer_domain_attr_t) -> c_int {
    guard("xfer_domain_attr_open", || {
        if out.is_null() {
            return Err(invalid("xfer_domain_attr_open: out is NULL"));
        }
        // SAFETY: `out` is non-null and valid for one pointer by contract.
        unsafe { out.write(std::ptr::null_mut()) };
        let h = handle::insert(Object::DomainAttr(Arc::new(Mutex::new(DomainAttr::from_env()))), &[])?;
        // SAFETY: as above.
        unsafe { out.write(h as usize as *mut xfer_domain_attr_t) };
        Ok(XFER_SUCCESS)
    })
}

/// Sets the setting `key` of `attr` to `value` (both NUL-terminated):
/// `"provider"` (`"tcp"`, `"verbs"`; `""` for the automatic choice),
/// `"atomic_mode"` (`"cpu"`, the default, `"auto"`, `"device"`: who does remote atomics,
/// `XFER_ATOMIC_MODE`), `"threading"` (`"safe"`, the default, any thread under the
/// domain's mutex; `"single"`, only the thread that opens the domain, no lock taken,
/// calls from another thread failing with `XFER_EINVAL`; `XFER_THREADING`), or a
/// transport's setting `TRANSPORT.NAME` (`"tcp.iface"`, `"verbs.device"`;
/// `xfer-info` lists every key with its `XFER_*` variable), checked now by
/// its transport. The transport settings apply to the domain and to every
/// endpoint opened from it (a non-default `tcp_*` field of an endpoint's
/// `xfer_ep_attr_t` overrides its key for that endpoint).
///
/// Returns 0; `XFER_EBADF` for a bad handle; `XFER_EINVAL` when `key` or
/// `value` is NULL or not UTF-8, the key is unknown (an unknown transport,
/// or a name its transport does not have) or the value does not parse; the
/// reason, naming the key, is logged (`XFER_LOG=warn`, the default).
/// Nothing is set on failure. Thread-safe.
///
/// # Safety
/// `key` and `value` must be NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn xfer_domain_attr_set(
    attr: *mut xfer_domain_attr_t,
    key: *const c_char,
    value: *const c_char,
) -> c_int {
    guard("xfer_domain_attr_set", || {
        let a = attr_of(attr)?;
        // SAFETY: NULL or NUL-terminated by contract.
        let key = unsafe { text(key, "xfer_domain_attr_set: key is NULL or not UTF-8") }?;
        // SAFETY: as above.
        let value = unsafe { text(value, "xfer_domain_attr_set: value is NULL or not UTF-8") }?;
        let mut a = a.lock().unwrap_or_else(PoisonError::into_inner);
        let refused = |e: xfer_facade::Error| {
            tracing::warn!(key, value, error = %e, "xfer_domain_attr_set: setting refused");
            Fail::from(e)
        };
        match key {
            "provider" => a.provider = Some(value.trim().to_owned()).filter(|p| !p.is_empty()),
            "atomic_mode" => a.atomic_mode = value.parse().map_err(refused)?,
            "threading" => a.threading = value.parse().map_err(refused)?,
            _ => {
                xfer_facade::check_param(key, value).map_err(refused)?;
                a.params.set(key, value);
            }
        }
        Ok(XFER_SUCCESS)
    })
}

/// Closes domain attributes (a domain opened with them keeps its copy).
///
/// Returns 0; `XFER_EBADF` for a bad or already closed handle. Thread-safe.
#[no_mangle]
pub extern "C" fn xfer_domain_attr_close(attr: *mut xfer_domain_attr_t) -> c_int {
    guard("xfer_domain_attr_close", || {
        drop(handle::remove(attr as usize as u64, Kind::DomainAttr)?);
        Ok(XFER_SUCCESS)
    })
}

/// Opens a domain with the attributes `attr`: its provider (else the
/// first available one, see `xfer_info_get`) and transport settings. Stores
/// the handle in `*out` (NULL on failure).
///
/// Returns 0; `XFER_EBADF` for a bad `attr` handle; `XFER_EINVAL` when
/// `out` is NULL; `XFER_ENODATA` when the provider is unknown or none can
/// be opened (the reasons are logged; set `XFER_LOG=debug`). The caller
/// releases it with `xfer_domain_close`. Thread-safe.
///
/// # Safety
/// `out` must be NULL or point to writable memory for one pointer.
#[no_mangle]
pub unsafe extern "C" fn xfer_domain_open_attr(attr: *mut xfer_domain_attr_t, out: *mut *mut xfer_domain_t) -> c_int {
    guard("xfer_domain_open_attr", || {
        if out.is_null() {
            return Err(invalid("xfer_domain_open_attr: out is NULL"));
        }
        // SAFETY: `out` is non-null and valid for one pointer by contract.
        unsafe { out.write(std::ptr::null_mut()) };
        let a = attr_of(attr)?.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let h = crate::domain::open_handle(&a)?;
        // SAFETY: as above.
        unsafe { out.write(h as usize as *mut xfer_domain_t) };
        Ok(XFER_SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{XFER_EBADF, XFER_EINVAL};

    #[test]
    fn settings_are_checked_and_reach_the_domain() {
        let mut a = std::ptr::null_mut();
        // SAFETY: `a` is writable for one pointer.
        assert_eq!(unsafe { xfer_domain_attr_open(&mut a) }, XFER_SUCCESS);
        let set = |k: &CStr, v: &CStr| {
            // SAFETY: NUL-terminated literals.
            unsafe { xfer_domain_attr_set(a, k.as_ptr(), v.as_ptr()) }
        };
        assert_eq!(set(c"provider", c"tcp"), XFER_SUCCESS);
        assert_eq!(set(c"tcp.coalesce", c"0"), XFER_SUCCESS);
        assert_eq!(set(c"tcp.coalesse", c"0"), XFER_EINVAL, "a misspelt key");
        assert_eq!(set(c"tcp.coalesce", c"many"), XFER_EINVAL, "a bad value");
        assert_eq!(set(c"nic.speed", c"1"), XFER_EINVAL, "an unknown transport");
        assert_eq!(set(c"atomic_mode", c"device"), XFER_SUCCESS);
        assert_eq!(set(c"atomic_mode", c"gpu"), XFER_EINVAL, "an unknown atomic mode");
        assert_eq!(set(c"threading", c"single"), XFER_SUCCESS);
        assert_eq!(set(c"threading", c"multi"), XFER_EINVAL, "an unknown threading mode");
        // SAFETY: a NULL value is refused, not read.
        assert_eq!(
            unsafe { xfer_domain_attr_set(a, c"tcp.iface".as_ptr(), std::ptr::null()) },
            XFER_EINVAL
        );
        {
            let held = attr_of(a).expect("open");
            let held = held.lock().unwrap();
            assert_eq!(held.provider.as_deref(), Some("tcp"));
            assert_eq!(held.atomic_mode, xfer_facade::AtomicMode::Device);
            assert_eq!(held.threading, xfer_facade::Threading::Single);
            assert_eq!(
                held.params.iter().collect::<Vec<_>>(),
                [("tcp.coalesce", "0")],
                "failures set nothing"
            );
        }
        let mut d = std::ptr::null_mut();
        // SAFETY: `d` is writable for one pointer.
        assert_eq!(unsafe { xfer_domain_open_attr(a, &mut d) }, XFER_SUCCESS);
        assert_eq!(xfer_domain_attr_close(a), XFER_SUCCESS);
        assert_eq!(xfer_domain_attr_close(a), XFER_EBADF);
        assert_eq!(crate::domain::xfer_domain_close(d), XFER_SUCCESS);
    }
}
