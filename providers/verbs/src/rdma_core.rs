//! rdma-core opened at run time.
//!
//! `libibverbs.so.1` and `librdmacm.so.1` are loaded with `dlopen` the first
//! time verbs is probed or opened, not linked: a program built with the verbs
//! provider starts on a host without rdma-core, runs over TCP, and reports
//! why verbs is unavailable ([`load`]). This is how libfabric's DL providers,
//! UCX's `libuct_ib` module and sideway behave. rdma-sys stays the binding (its
//! types, and the inline data-path calls `ibv_post_send`, `ibv_poll_cq`,
//! `ibv_post_srq_recv`, `ibv_req_notify_cq`, which go through the context's
//! function table and need no symbol); every exported entry point the provider
//! calls comes from the table below, under the name and signature rdma-sys
//! declares, so the wrappers read as plain verbs code.
//!
//! Before a successful load none of these functions can be reached: every
//! verbs object is made from a device context or an event channel, and those
//! are made only after [`load`] succeeded. Should one be called anyway, it
//! fails as verbs calls fail (a null pointer or -1 with `errno` ENOSYS), never
//! by a panic or an unresolved symbol.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;

use libc::sockaddr;
use rdma_sys::{
    __be16, ibv_comp_channel, ibv_context, ibv_cq, ibv_device, ibv_device_attr, ibv_gid, ibv_mr, ibv_pd, ibv_port_attr,
    ibv_qp, ibv_qp_attr, ibv_qp_init_attr, ibv_srq, ibv_srq_init_attr, ibv_wc_status, rdma_cm_event,
    rdma_cm_event_type, rdma_cm_id, rdma_conn_param, rdma_event_channel, rdma_port_space,
};

/// The sonames loaded: the ABI rdma-sys's bindings were generated for.
pub const LIBIBVERBS: &str = "libibverbs.so.1";
/// See [`LIBIBVERBS`].
pub const LIBRDMACM: &str = "librdmacm.so.1";

/// What a call made before a successful load returns: the value verbs
/// functions fail with, and `errno` set to ENOSYS where they report one.
trait Unloaded {
    fn unloaded() -> Self;
}

impl Unloaded for c_int {
    fn unloaded() -> Self {
        set_errno(libc::ENOSYS);
        -1
    }
}

impl<T> Unloaded for *mut T {
    fn unloaded() -> Self {
        set_errno(libc::ENOSYS);
        std::ptr::null_mut()
    }
}

impl<T> Unloaded for *const T {
    fn unloaded() -> Self {
        std::ptr::null()
    }
}

impl Unloaded for __be16 {
    fn unloaded() -> Self {
        0
    }
}

impl Unloaded for () {
    fn unloaded() -> Self {}
}

fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e };
}

/// Declares the table and, for each entry, a function of the same name and
/// signature that calls through it.
macro_rules! rdma_core {
    ($( $lib:ident fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?; )*) => {
        /// The rdma-core entry points xfer calls, resolved from the loaded libraries.
        struct Table {
            $( $name: unsafe extern "C" fn($($ty),*) $(-> $ret)?, )*
        }

        impl Table {
            /// Resolves every entry point; the first one missing is the error.
            fn resolve(verbs: &Library, cm: &Library) -> Result<Table, String> {
                Ok(Table {
                    $( $name: {
                        let lib = if stringify!($lib) == "verbs" { verbs } else { cm };
                        let sym = lib.symbol(concat!(stringify!($name), "\0"))?;
                        // SAFETY: the symbol is the rdma-core function of this
                        // name, whose C signature rdma-sys's declaration (copied
                        // here) was generated from.
                        unsafe {
                            std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($ty),*) $(-> $ret)?>(sym)
                        }
                    }, )*
                })
            }
        }

        $(
            #[doc = concat!("`", stringify!($name), "`, resolved at run time (see the module doc).")]
            ///
            /// # Safety
            /// As for the C function.
            #[allow(clippy::missing_safety_doc)]
            pub(crate) unsafe fn $name($($arg: $ty),*) $(-> $ret)? {
                match loaded() {
                    // SAFETY: the caller upholds the C function's contract.
                    Some(t) => unsafe { (t.$name)($($arg),*) },
                    None => Unloaded::unloaded(),
                }
            }
        )*
    };
}

rdma_core! {
    verbs fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device;
    verbs fn ibv_free_device_list(list: *mut *mut ibv_device);
    verbs fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char;
    verbs fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context;
    verbs fn ibv_close_device(context: *mut ibv_context) -> c_int;
    verbs fn ibv_query_device(context: *mut ibv_context, device_attr: *mut ibv_device_attr) -> c_int;
    // The exported symbol takes the compatible prefix of `ibv_port_attr` and
    // fills that much (verbs.h's `ibv_query_port` macro picks a newer path when
    // the provider offers one; the prefix holds every field xfer reads).
    verbs fn ibv_query_port(context: *mut ibv_context, port_num: u8, port_attr: *mut ibv_port_attr) -> c_int;
    verbs fn ibv_query_gid(context: *mut ibv_context, port_num: u8, index: c_int, gid: *mut ibv_gid) -> c_int;
    verbs fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd;
    verbs fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int;
    verbs fn ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> *mut ibv_mr;
    verbs fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int;
    verbs fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel;
    verbs fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int;
    verbs fn ibv_create_cq(
        context: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
    ) -> *mut ibv_cq;
    verbs fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int;
    verbs fn ibv_get_cq_event(channel: *mut ibv_comp_channel, cq: *mut *mut ibv_cq, cq_context: *mut *mut c_void) -> c_int;
    verbs fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint);
    verbs fn ibv_create_srq(pd: *mut ibv_pd, srq_init_attr: *mut ibv_srq_init_attr) -> *mut ibv_srq;
    verbs fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int;
    verbs fn ibv_create_qp(pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr) -> *mut ibv_qp;
    verbs fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int;
    verbs fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int) -> c_int;
    verbs fn ibv_query_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int, init_attr: *mut ibv_qp_init_attr) -> c_int;
    verbs fn ibv_wc_status_str(status: ibv_wc_status::Type) -> *const c_char;
    cm fn rdma_create_event_channel() -> *mut rdma_event_channel;
    cm fn rdma_destroy_event_channel(channel: *mut rdma_event_channel);
    cm fn rdma_get_cm_event(channel: *mut rdma_event_channel, event: *mut *mut rdma_cm_event) -> c_int;
    cm fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int;
    cm fn rdma_event_str(event: rdma_cm_event_type::Type) -> *const c_char;
    cm fn rdma_create_id(
        channel: *mut rdma_event_channel,
        id: *mut *mut rdma_cm_id,
        context: *mut c_void,
        ps: rdma_port_space::Type,
    ) -> c_int;
    cm fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int;
    cm fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int;
    cm fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int;
    cm fn rdma_get_src_port(id: *mut rdma_cm_id) -> __be16;
    cm fn rdma_resolve_addr(id: *mut rdma_cm_id, src_addr: *mut sockaddr, dst_addr: *mut sockaddr, timeout_ms: c_int) -> c_int;
    cm fn rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int;
    cm fn rdma_connect(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int;
    cm fn rdma_establish(id: *mut rdma_cm_id) -> c_int;
    cm fn rdma_accept(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int;
    cm fn rdma_reject(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8) -> c_int;
    cm fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int;
    cm fn rdma_migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> c_int;
    cm fn rdma_init_qp_attr(id: *mut rdma_cm_id, qp_attr: *mut ibv_qp_attr, qp_attr_mask: *mut c_int) -> c_int;
}

/// A library opened with `dlopen`, kept for the life of the process (rdma-core
/// providers register state that must not be unmapped).
struct Library {
    handle: *mut c_void,
    soname: &'static str,
}

// SAFETY: a dlopen handle is a process-wide token; dlsym is thread-safe.
unsafe impl Send for Library {}
// SAFETY: as above.
unsafe impl Sync for Library {}

impl Library {
    fn open(soname: &'static str) -> Result<Library, String> {
        let c = std::ffi::CString::new(soname).map_err(|_| format!("{soname}: bad name"))?;
        // SAFETY: c is a NUL-terminated name; RTLD_NOW resolves everything now,
        // so a broken install fails here rather than at a later call.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            return Err(dl_error(soname));
        }
        Ok(Library { handle: h, soname })
    }

    /// The address of `name` (NUL-terminated).
    fn symbol(&self, name: &'static str) -> Result<*mut c_void, String> {
        // SAFETY: the handle is open; name is NUL-terminated (the macro appends it).
        let p = unsafe { libc::dlsym(self.handle, name.as_ptr().cast()) };
        if p.is_null() {
            return Err(format!("{}: no symbol {}", self.soname, name.trim_end_matches('\0')));
        }
        Ok(p)
    }
}

/// `dlerror()`'s text, or a generic one.
fn dl_error(soname: &str) -> String {
    // SAFETY: dlerror returns a thread-local NUL-terminated string or null.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        return format!("{soname}: cannot be loaded");
    }
    // SAFETY: non-null, NUL-terminated, valid until the next dl call on this thread.
    unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
}

/// The loaded libraries and their entry points, once.
struct RdmaCore {
    table: Table,
    _libs: [Library; 2],
}

static LOADED: OnceLock<Result<RdmaCore, String>> = OnceLock::new();

fn loaded() -> Option<&'static Table> {
    match LOADED.get() {
        Some(Ok(core)) => Some(&core.table),
        _ => None,
    }
}

/// Loads rdma-core (once per process; later calls return the first outcome).
/// `Err` says why it cannot be used: a library missing or unloadable (its
/// `dlerror` text), or an entry point missing from it.
pub fn load() -> Result<(), String> {
    let r = LOADED.get_or_init(|| {
        let verbs = Library::open(LIBIBVERBS)?;
        let cm = Library::open(LIBRDMACM)?;
        let table = Table::resolve(&verbs, &cm)?;
        tracing::debug!("rdma-core loaded ({LIBIBVERBS}, {LIBRDMACM})");
        Ok(RdmaCore {
            table,
            _libs: [verbs, cm],
        })
    });
    r.as_ref().map(|_| ()).map_err(Clone::clone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_an_error_naming_it() {
        let Err(e) = Library::open("libxfer-no-such-library.so.9") else {
            panic!("a library that does not exist was opened");
        };
        assert!(e.contains("libxfer-no-such-library.so.9"), "{e}");
    }

    #[test]
    fn loads_where_rdma_core_is_installed() {
        // Build hosts have rdma-core (rdma-sys needs its headers); the load
        // must succeed there and resolve every entry point.
        load().expect("rdma-core loads on a host that built xfer-verbs");
        assert!(loaded().is_some());
    }
}
