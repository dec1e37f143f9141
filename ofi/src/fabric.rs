//! The fabric (`fi_fabric`): the root object; opens domains and event queues.

use std::ffi::{c_int, c_void, CStr};
use std::sync::Arc;

use crate::domain;
use crate::entry::{self, enosys, guard, Core, Obj, PANIC};
use crate::eq;
use crate::fi;
use crate::info::FABRIC_NAME;

/// The fabric's state: nothing but its children's references to it.
#[derive(Debug, Default)]
pub(crate) struct Fabric;

/// A fabric object.
pub(crate) struct FabricObj(pub(crate) Arc<Fabric>);

impl Core for FabricObj {
    type Fid = fi::fid_fabric;
    const CLASS: u32 = fi::FI_CLASS_FABRIC;
    const MAGIC: u64 = 0x7866_6572_6661_6272; // "xferfabr"
}

static OPS: fi::fi_ops = entry::close_only_ops(close);

static FABRIC_OPS: fi::fi_ops_fabric = fi::fi_ops_fabric {
    size: std::mem::size_of::<fi::fi_ops_fabric>(),
    domain: Some(domain::open),
    passive_ep: Some(no_passive_ep),
    eq_open: Some(eq::open),
    wait_open: Some(crate::wait::open),
    trywait: Some(crate::cq::trywait),
    domain2: Some(no_domain2),
};

enosys! {
    no_passive_ep(*mut fi::fid_fabric, *mut fi::fi_info, *mut *mut fi::fid_pep, *mut c_void) -> c_int;
    no_domain2(*mut fi::fid_fabric, *mut fi::fi_info, *mut *mut fi::fid_domain, u64, *mut c_void) -> c_int;
}

/// The provider's `fabric` entry: opens the one fabric, "xfer".
pub(crate) unsafe extern "C" fn open(
    attr: *mut fi::fi_fabric_attr,
    fabric: *mut *mut fi::fid_fabric,
    context: *mut c_void,
) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes a valid attr (or null, refused).
        let Some(attr) = (unsafe { attr.as_ref() }) else {
            return -(libc::EINVAL);
        };
        if !attr.name.is_null() {
            // SAFETY: a C string from fi_getinfo's fi_info or the application.
            let name = unsafe { CStr::from_ptr(attr.name) };
            if name.to_bytes() != FABRIC_NAME.as_bytes() {
                return -(libc::EINVAL);
            }
        }
        xfer_facade::init_logging();
        let fid = fi::fid_fabric {
            fid: entry::fid(fi::FI_CLASS_FABRIC, context, &OPS),
            ops: entry::ops(&FABRIC_OPS),
            api_version: attr.api_version,
        };
        // SAFETY: the application's out pointer.
        unsafe { entry::hand_out(fabric, fid, FabricObj(Arc::new(Fabric))) }
    })
}

/// The fabric behind `fid` and the API version the application asked for.
///
/// # Safety
/// `fid` is null or a live fid.
pub(crate) unsafe fn get(fid: *mut fi::fid_fabric) -> Option<(Arc<Fabric>, u32)> {
    // SAFETY: forwarded.
    let obj = unsafe { Obj::<FabricObj>::get(fid.cast()) }?;
    // SAFETY: a live fid_fabric of ours.
    let version = unsafe { (*fid).api_version };
    Some((obj.core.0.clone(), version))
}

unsafe extern "C" fn close(fid: *mut fi::fid) -> c_int {
    entry::close_unless_used::<FabricObj>(fid, |o| Arc::strong_count(&o.0) > 1)
}
