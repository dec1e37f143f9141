//! The domain (`fi_domain`): one xfer [`Domain`] on the xfer provider the
//! fi_info names (`domain_attr->name`: `tcp` or `verbs`).

use std::ffi::{c_int, c_void, CStr};
use std::sync::{Arc, Mutex};

use xfer_facade::{AtomicMode, Domain, DomainAttr};

use crate::addr::Format;
use crate::entry::{self, enosys, guard, Core, Obj, PANIC};
use crate::fabric::{self, Fabric};
use crate::fi;
use crate::region_cntr::RegionCounters;

/// A domain's state, shared with its AVs, CQs and endpoints.
pub(crate) struct DomainCore {
    _fabric: Arc<Fabric>,
    /// The xfer domain every child maps onto.
    pub(crate) xfer: Domain,
    /// The libfabric API version the application asked for (`fi_fabric`).
    pub(crate) api_version: u32,
    /// The domain was opened with `FI_MR_LOCAL`: data calls take the
    /// `fi_mr_desc` of their buffers into account.
    pub(crate) mr_local: bool,
    /// The fi_info's address format: of the names `fi_av_insert` reads and
    /// `fi_getname`, `fi_av_lookup` write.
    pub(crate) format: Format,
    /// `domain_attr->auth_key`: the job key of endpoints whose `ep_attr`
    /// names none.
    pub(crate) auth_key: Option<Vec<u8>>,
    /// Counters bound to its regions (`fi_mr_bind`).
    pub(crate) regions: RegionCounters,
}

impl DomainCore {
    /// Opened `FI_THREAD_DOMAIN`: the application serialises its calls, its
    /// xfer domain is `serialized` and the plug-in's data-path locks are
    /// none (latch.rs).
    pub(crate) fn serial(&self) -> bool {
        self.xfer.threading() == xfer_facade::Threading::Serialized
    }
}

/// A domain object.
pub(crate) struct DomainObj(pub(crate) Arc<DomainCore>);

impl Core for DomainObj {
    type Fid = fi::fid_domain;
    const CLASS: u32 = fi::FI_CLASS_DOMAIN;
    const MAGIC: u64 = 0x7866_6572_646f_6d5f; // "xferdom_"
}

static OPS: fi::fi_ops = entry::close_only_ops(close);

static DOMAIN_OPS: fi::fi_ops_domain = fi::fi_ops_domain {
    size: std::mem::size_of::<fi::fi_ops_domain>(),
    av_open: Some(crate::av::open),
    cq_open: Some(crate::cq::open),
    endpoint: Some(crate::ep::open),
    scalable_ep: Some(no_scalable_ep),
    cntr_open: Some(crate::cntr::open),
    poll_open: Some(crate::wait::poll_open),
    stx_ctx: Some(no_stx_ctx),
    srx_ctx: Some(no_srx_ctx),
    query_atomic: Some(crate::atomic::query),
    query_collective: Some(no_query_collective),
    endpoint2: Some(no_endpoint2),
};

enosys! {
    no_scalable_ep(*mut fi::fid_domain, *mut fi::fi_info, *mut *mut fi::fid_ep, *mut c_void) -> c_int;
    no_stx_ctx(*mut fi::fid_domain, *mut fi::fi_tx_attr, *mut *mut fi::fid_stx, *mut c_void) -> c_int;
    no_srx_ctx(*mut fi::fid_domain, *mut fi::fi_rx_attr, *mut *mut fi::fid_ep, *mut c_void) -> c_int;
    no_query_collective(*mut fi::fid_domain, fi::fi_collective_op, *mut fi::fi_collective_attr, u64) -> c_int;
    no_endpoint2(*mut fi::fid_domain, *mut fi::fi_info, *mut *mut fi::fid_ep, u64, *mut c_void) -> c_int;
}

/// `fi_domain`: opens the xfer provider named by `info->domain_attr->name`.
pub(crate) unsafe extern "C" fn open(
    fabric: *mut fi::fid_fabric,
    info: *mut fi::fi_info,
    domain: *mut *mut fi::fid_domain,
    context: *mut c_void,
) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes our fabric.
        let Some((fabric, api_version)) = (unsafe { fabric::get(fabric) }) else {
            return -(libc::EINVAL);
        };
        // SAFETY: the application's fi_info, valid with its attributes.
        let Some(attr) = (unsafe { info.as_ref().and_then(|i| i.domain_attr.as_ref()) }) else {
            return -(libc::EINVAL);
        };
        // SAFETY: as above (checked non-null).
        let Some(format) = Format::of(unsafe { (*info).addr_format }) else {
            return -(libc::EINVAL);
        };
        // SAFETY: the application's key holds auth_key_size bytes.
        let auth_key = match unsafe { crate::auth::read(attr.auth_key, attr.auth_key_size) } {
            Ok(k) => k,
            Err(why) => {
                tracing::warn!(why, "fi_domain: auth_key refused");
                return -(libc::EINVAL);
            }
        };
        let provider = match attr.name.is_null() {
            true => None,
            // SAFETY: a C string from our fi_getinfo or the application.
            false => Some(unsafe { CStr::from_ptr(attr.name) }.to_string_lossy().into_owned()),
        };
        // From the environment: `XFER_ATOMIC_MODE` is the domain's. Not
        // `XFER_THREADING`: a libfabric program may call from any thread;
        // under FI_THREAD_DOMAIN it promises that its calls never overlap.
        let serial = attr.threading == fi::FI_THREAD_DOMAIN;
        let mut a = DomainAttr::from_env();
        a.threading = xfer_facade::Threading::Safe;
        a.provider = provider;
        a.params = crate::params::from_env();
        let opened = match serial {
            // SAFETY: FI_THREAD_DOMAIN (fi_domain(3)): the application
            // serialises every call into this domain's objects, and the
            // plug-in starts no thread of its own; every xfer call on the
            // domain is made inside one of those calls.
            true => unsafe { xfer_facade::open_serialized(&a) },
            false => xfer_facade::open(&a),
        };
        let xfer = match opened {
            Ok(d) => {
                let caps = d.atomic_caps();
                tracing::debug!(provider = d.provider(), mode = ?caps.mode, device_cap = ?caps.device_cap, serial, "fi_domain: opened (serial: FI_THREAD_DOMAIN, no locks on the data path)");
                d
            }
            Err(e) => {
                tracing::warn!(error = %e, "fi_domain: opening the xfer domain");
                return entry::code(&e);
            }
        };
        let core = DomainCore {
            _fabric: fabric,
            xfer,
            api_version,
            mr_local: attr.mr_mode as u64 & fi::FI_MR_LOCAL != 0 && api_version >= fi::version(1, 5),
            format,
            auth_key,
            regions: RegionCounters::new(serial),
        };
        let fid = fi::fid_domain {
            fid: entry::fid(fi::FI_CLASS_DOMAIN, context, &OPS),
            ops: entry::ops(&DOMAIN_OPS),
            mr: entry::ops(&crate::mr::MR_OPS),
        };
        // SAFETY: the application's out pointer.
        unsafe { entry::hand_out(domain, fid, DomainObj(Arc::new(core))) }
    })
}

/// Who does xfer provider `name`'s remote atomics, as its domain says
/// ([`Domain::atomics`], [`Domain::atomic_caps`]): `None` when its
/// endpoints do not apply them or the domain cannot be opened. Asked of a
/// domain opened once per provider and process: fi_getinfo offers
/// `FI_ATOMIC`, and its ordering, by it.
pub(crate) fn atomic_mode(name: &'static str) -> Option<AtomicMode> {
    /// A provider's name and its domain's atomic mode.
    type Known = Option<(&'static str, Option<AtomicMode>)>;
    // No heap: the plug-in may be unloaded (dlclose) with it still set.
    static KNOWN: Mutex<[Known; 8]> = Mutex::new([None; 8]);
    let mut known = entry::lock(&KNOWN);
    if let Some((_, mode)) = known.iter().flatten().find(|(n, _)| *n == name) {
        return *mode;
    }
    let mode = xfer_facade::open(&{
        let mut a = DomainAttr::from_env();
        a.provider = Some(name.to_string());
        a.params = crate::params::from_env();
        a
    })
    .ok()
    .filter(|d| d.provider() == name && d.atomics())
    .map(|d| d.atomic_caps().mode);
    if let Some(free) = known.iter_mut().find(|k| k.is_none()) {
        *free = Some((name, mode));
    }
    mode
}

/// The domain behind `fid`.
///
/// # Safety
/// `fid` is null or a live fid.
pub(crate) unsafe fn get(fid: *mut fi::fid_domain) -> Option<Arc<DomainCore>> {
    // SAFETY: forwarded.
    unsafe { Obj::<DomainObj>::get(fid.cast()) }.map(|o| o.core.0.clone())
}

unsafe extern "C" fn close(fid: *mut fi::fid) -> c_int {
    entry::close_unless_used::<DomainObj>(fid, |o| Arc::strong_count(&o.0) > 1)
}
