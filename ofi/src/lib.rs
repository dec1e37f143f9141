//! xfer-ofi: xfer as a libfabric provider.
//!
//! Built as `libxfer_fi.so` (a cdylib exporting `fi_prov_ini`); libfabric
//! loads it from `FI_PROVIDER_PATH` and lists it as provider `xfer`, with
//! one fi_info per usable xfer provider (`domain` `verbs` when a device is
//! usable, then `tcp`). `FI_EP_RDM` endpoints carry `FI_MSG` and
//! `FI_TAGGED` (with `FI_DIRECTED_RECV` and `FI_SOURCE` when asked for, and `FI_PEEK` /
//! `FI_CLAIM` probes), `FI_RMA` when asked for, and `FI_ATOMIC` when asked
//! for on a domain whose endpoints apply atomics; every call maps onto
//! xfer's own Rust API ([`xfer_facade`]), so the wire is xfer's.
//!
//! The libfabric structures come from the installed headers through
//! bindgen ([`fi`]). Every `extern "C"` entry point runs inside
//! `catch_unwind`, checks its pointers and the class and magic of every
//! `fid` before use, and returns `-FI_E*`; operations xfer does not offer
//! return `-FI_ENOSYS`. docs/OFI.md lists each call and what it maps to.
#![deny(missing_docs)]

mod addr;
mod atomic;
mod auth;
mod av;
mod cntr;
mod cq;
mod domain;
mod ep;
mod eq;
mod fabric;
mod fetch;
mod info;
mod iov;
mod join;
mod latch;
mod mr;
mod msg;
mod multi;
mod params;
mod peek;
mod region_cntr;
mod rma;
mod tagged;
mod unsupported;
mod wait;

pub(crate) mod entry;
pub mod fi;
pub mod name;

use std::ffi::c_char;
use std::sync::atomic::{AtomicPtr, Ordering};

/// The provider's name (`fi_info -p xfer`, `FI_PROVIDER=xfer`).
pub const PROVIDER_NAME: &str = "xfer";

/// The provider's version (`FI_VERSION(0, 1)`, the crate's).
pub const PROVIDER_VERSION: u32 = fi::version(0, 1);

static NAME: &[u8] = b"xfer\0";

/// The one `fi_provider`, allocated by [`fi_prov_ini`] and freed by its
/// `cleanup`, which libfabric calls before it unloads the library: libfabric
/// writes into its `context`, so it cannot be an immutable static.
static PROVIDER: AtomicPtr<fi::fi_provider> = AtomicPtr::new(std::ptr::null_mut());

/// libfabric's last call into the provider (`fi_fini`, before `dlclose`).
unsafe extern "C" fn cleanup() {
    entry::guard((), || {
        let p = PROVIDER.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !p.is_null() {
            // SAFETY: made by Box::into_raw in fi_prov_ini; libfabric no
            // longer uses it once it calls cleanup.
            drop(unsafe { Box::from_raw(p) });
        }
    })
}

/// The entry point libfabric looks up after `dlopen`ing the provider.
#[no_mangle]
pub extern "C" fn fi_prov_ini() -> *mut fi::fi_provider {
    entry::guard(std::ptr::null_mut(), || {
        let current = PROVIDER.load(Ordering::Acquire);
        if !current.is_null() {
            return current;
        }
        let p = Box::into_raw(Box::new(fi::fi_provider {
            version: PROVIDER_VERSION,
            fi_version: fi::API_VERSION,
            context: Default::default(),
            name: NAME.as_ptr().cast::<c_char>(),
            getinfo: Some(info::getinfo),
            fabric: Some(fabric::open),
            cleanup: Some(cleanup),
        }));
        match PROVIDER.compare_exchange(std::ptr::null_mut(), p, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => p,
            Err(other) => {
                // SAFETY: ours, never published.
                drop(unsafe { Box::from_raw(p) });
                other
            }
        }
    })
}
