//! xfer-ofi: xfer as a libfabric provider.
//!
//! Built as `libxfer_fi.so` (a cdylib exporting `fi_prov_ini`); libfabric
//! loads it from `FI_PROVIDER_PATH` and lists it as provider `xfer`, with
//! one fi_info per usable xfer provider (`domain` `verbs` when a device is
//! usable, then `tcp`). `FI_EP_RDM` endpoints carry `FI_MSG` and
//! `FI_TAGGED` with `FI_DIRECTED_RECV` and `FI_SOURCE`; every call maps onto
//! xfer's own Rust API ([`xfer_facade`]), so the wire is xfer's.
//!
//! The libfabric structures come from the installed headers through
//! bindgen ([`fi`]). Every `extern "C"` entry point runs inside
//! `catch_unwind`, checks its pointers and the class and magic of every
//! `fid` before use, and returns `-FI_E*`; operations xfer does not offer
//! return `-FI_ENOSYS`. docs/OFI.md lists each call and what it maps to.
#![deny(missing_docs)]

mod av;
mod cq;
mod domain;
mod ep;
mod eq;
mod fabric;
mod info;
mod msg;
mod tagged;
mod unsupported;

pub(crate) mod entry;
pub mod fi;
pub mod name;

use std::ffi::c_char;
use std::sync::OnceLock;

/// The provider's name (`fi_info -p xfer`, `FI_PROVIDER=xfer`).
pub const PROVIDER_NAME: &str = "xfer";

/// The provider's version (`FI_VERSION(0, 1)`, the crate's).
pub const PROVIDER_VERSION: u32 = fi::version(0, 1);

static NAME: &[u8] = b"xfer\0";

/// The one `fi_provider`, allocated on first use: libfabric writes into its
/// `context`, so it cannot be an immutable static.
struct Provider(*mut fi::fi_provider);

// SAFETY: the pointer is written once, then only handed to libfabric,
// which serialises its own accesses to the structure.
unsafe impl Send for Provider {}
// SAFETY: as above.
unsafe impl Sync for Provider {}

static PROVIDER: OnceLock<Provider> = OnceLock::new();

unsafe extern "C" fn cleanup() {}

/// The entry point libfabric looks up after `dlopen`ing the provider.
#[no_mangle]
pub extern "C" fn fi_prov_ini() -> *mut fi::fi_provider {
    entry::guard(std::ptr::null_mut(), || {
        PROVIDER
            .get_or_init(|| {
                let p = fi::fi_provider {
                    version: PROVIDER_VERSION,
                    fi_version: fi::API_VERSION,
                    context: Default::default(),
                    name: NAME.as_ptr().cast::<c_char>(),
                    getinfo: Some(info::getinfo),
                    fabric: Some(fabric::open),
                    cleanup: Some(cleanup),
                };
                Provider(Box::into_raw(Box::new(p)))
            })
            .0
    })
}
