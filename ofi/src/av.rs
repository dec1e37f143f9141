//! The address vector (`fi_av_open`): an xfer [`AddressVector`]. Names are
//! [`name::NAME_LEN`] bytes each; `fi_addr_t` values are xfer's
//! [`PeerAddr`](xfer_facade::PeerAddr)s, handed out in insertion order
//! (`FI_AV_TABLE`; `FI_AV_MAP` gets the same values).

use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

use xfer_facade::{Address, AddressVector};

use crate::addr::{self, Format};
use crate::domain::{self, DomainCore};
use crate::entry::{self, enosys, guard, put, Core, Obj, PANIC};
use crate::fi;
use crate::name::{self, NAME_LEN};

/// An address vector's state, shared with the endpoints bound to it.
pub(crate) struct AvCore {
    pub(crate) domain: Arc<DomainCore>,
    /// The xfer address vector.
    pub(crate) xfer: AddressVector,
}

/// An address vector object.
pub(crate) struct AvObj(pub(crate) Arc<AvCore>);

impl Core for AvObj {
    type Fid = fi::fid_av;
    const CLASS: u32 = fi::FI_CLASS_AV;
    const MAGIC: u64 = 0x7866_6572_6176_5f5f; // "xferav__"
}

static OPS: fi::fi_ops = entry::close_only_ops(close);

static AV_OPS: fi::fi_ops_av = fi::fi_ops_av {
    size: std::mem::size_of::<fi::fi_ops_av>(),
    insert: Some(insert),
    insertsvc: Some(insertsvc),
    insertsym: Some(no_insertsym),
    remove: Some(remove),
    lookup: Some(lookup),
    straddr: Some(straddr),
    av_set: Some(no_av_set),
};

enosys! {
    no_insertsym(*mut fi::fid_av, *const c_char, usize, *const c_char, usize, *mut fi::fi_addr_t, u64, *mut c_void) -> c_int;
    no_av_set(*mut fi::fid_av, *mut fi::fi_av_set_attr, *mut *mut fi::fid_av_set, *mut c_void) -> c_int;
}

/// `fi_av_open`. Named (shared) AVs, `FI_EVENT` and `rx_ctx_bits` are
/// refused with `-FI_ENOSYS`.
pub(crate) unsafe extern "C" fn open(
    domain: *mut fi::fid_domain,
    attr: *mut fi::fi_av_attr,
    av: *mut *mut fi::fid_av,
    context: *mut c_void,
) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes our domain.
        let Some(domain) = (unsafe { domain::get(domain) }) else {
            return -(libc::EINVAL);
        };
        // SAFETY: the application's attributes (required by fi_av_open).
        let Some(attr) = (unsafe { attr.as_ref() }) else {
            return -(libc::EINVAL);
        };
        if ![fi::FI_AV_UNSPEC, fi::FI_AV_MAP, fi::FI_AV_TABLE].contains(&attr.type_) {
            return -(libc::EINVAL);
        }
        if !attr.name.is_null() || attr.flags & fi::FI_EVENT != 0 || attr.rx_ctx_bits != 0 {
            return -(libc::ENOSYS);
        }
        let xfer = match domain.xfer.av() {
            Ok(av) => av,
            Err(e) => return entry::code(&e),
        };
        let fid = fi::fid_av {
            fid: entry::fid(fi::FI_CLASS_AV, context, &OPS),
            ops: entry::ops(&AV_OPS),
        };
        // SAFETY: the application's out pointer.
        unsafe { entry::hand_out(av, fid, AvObj(Arc::new(AvCore { domain, xfer }))) }
    })
}

/// The address vector behind `fid`.
///
/// # Safety
/// `fid` is null or a live fid.
pub(crate) unsafe fn get(fid: *const fi::fid) -> Option<Arc<AvCore>> {
    // SAFETY: forwarded.
    unsafe { Obj::<AvObj>::get(fid) }.map(|o| o.core.0.clone())
}

/// `fi_av_insert`: `count` addresses in the domain's format ([`name::NAME_LEN`]
/// bytes each, or `sockaddr_in`/`sockaddr_in6`: the TCP endpoint listening
/// there); returns how many were inserted. One that is not valid gets
/// `FI_ADDR_NOTAVAIL`.
unsafe extern "C" fn insert(
    av: *mut fi::fid_av,
    addr: *const c_void,
    count: usize,
    fi_addr: *mut fi::fi_addr_t,
    _flags: u64,
    _context: *mut c_void,
) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes the application's fid_av.
        let Some(av) = (unsafe { get(av.cast()) }) else {
            return -(libc::EINVAL);
        };
        if count == 0 {
            return 0;
        }
        let format = av.domain.format;
        if addr.is_null() || c_int::try_from(count).is_err() || count.checked_mul(NAME_LEN).is_none() {
            return -(libc::EINVAL);
        }
        let names: Vec<&[u8]> = match format {
            // SAFETY: fi_av(3): with FI_ADDR_STR, `addr` is an array of
            // `count` C strings (a null one is an invalid address).
            Format::Str => unsafe { std::slice::from_raw_parts(addr.cast::<*const c_char>(), count) }
                .iter()
                .map(|&p| match p.is_null() {
                    true => &[][..],
                    // SAFETY: a C string of the application's.
                    false => unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes(),
                })
                .collect(),
            // SAFETY: fi_av_insert's contract: `count` addresses of the format's size.
            _ => unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), count * format.len()) }
                .chunks_exact(format.len())
                .collect(),
        };
        let mut inserted = 0;
        for (i, one) in names.into_iter().enumerate() {
            let peer = match format.decode(one).map(|n| av.xfer.insert(n.as_bytes())) {
                Some(Ok(peer)) => {
                    inserted += 1;
                    peer.0
                }
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "fi_av_insert: name refused");
                    fi::FI_ADDR_UNSPEC
                }
                None => fi::FI_ADDR_UNSPEC,
            };
            if !fi_addr.is_null() {
                // SAFETY: the caller's array has `count` entries.
                unsafe { fi_addr.add(i).write(peer) };
            }
        }
        inserted
    })
}

/// `fi_av_insertsvc`: the TCP endpoint listening at `node` (an IP or a
/// host name) and `service` (a port number), or at `node` alone when it is
/// an `FI_ADDR_STR` address; returns 1. A node that does
/// not resolve or a service that is not a port `-FI_EINVAL`; a service on
/// a verbs or shm domain `-FI_ENOSYS` (their peers have no service; an shm
/// peer's `fi_xfer_shm://` string goes as `node` alone).
unsafe extern "C" fn insertsvc(
    av: *mut fi::fid_av,
    node: *const c_char,
    service: *const c_char,
    fi_addr: *mut fi::fi_addr_t,
    _flags: u64,
    _context: *mut c_void,
) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes the application's fid_av.
        let Some(av) = (unsafe { get(av.cast()) }) else {
            return -(libc::EINVAL);
        };
        if node.is_null() {
            return -(libc::EINVAL);
        }
        // Only TCP endpoints (and shm+tcp's TCP sides) have services;
        // elsewhere a node must be an address string (shm's fi_xfer_shm://
        // names).
        if !matches!(av.domain.xfer.provider(), "tcp" | "shm+tcp") && !service.is_null() {
            return -(libc::ENOSYS);
        }
        // SAFETY: C strings (or a null service) from the application.
        let (node, service) = unsafe {
            (
                std::ffi::CStr::from_ptr(node).to_string_lossy(),
                (!service.is_null()).then(|| std::ffi::CStr::from_ptr(service).to_string_lossy()),
            )
        };
        // An FI_ADDR_STR address as node goes without a service (fi_av(3)).
        if service.is_none() != addr::is_str(&node) {
            return -(libc::EINVAL);
        }
        let dest = match addr::resolve(Some(&node), service.as_deref(), false, None) {
            Ok(r) => r.dest_name.or_else(|| r.dest.and_then(addr::any_listener)),
            Err(why) => {
                tracing::debug!(%node, ?service, why, "fi_av_insertsvc refused");
                None
            }
        };
        let Some(name) = dest else {
            return -(libc::EINVAL);
        };
        match av.xfer.insert(name.as_bytes()) {
            Ok(peer) => {
                if !fi_addr.is_null() {
                    // SAFETY: the caller's fi_addr_t.
                    unsafe { fi_addr.write(peer.0) };
                }
                1
            }
            Err(e) => entry::code(&e),
        }
    })
}

unsafe extern "C" fn remove(av: *mut fi::fid_av, fi_addr: *mut fi::fi_addr_t, count: usize, _flags: u64) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes the application's fid_av.
        let Some(av) = (unsafe { get(av.cast()) }) else {
            return -(libc::EINVAL);
        };
        if count > 0 && fi_addr.is_null() {
            return -(libc::EINVAL);
        }
        let mut ret = 0;
        for i in 0..count {
            // SAFETY: the caller's array has `count` entries.
            let peer = unsafe { fi_addr.add(i).read() };
            if let Err(e) = av.xfer.remove(xfer_facade::PeerAddr(peer)) {
                ret = entry::code(&e);
            }
        }
        ret
    })
}

unsafe extern "C" fn lookup(
    av: *mut fi::fid_av,
    fi_addr: fi::fi_addr_t,
    addr: *mut c_void,
    addrlen: *mut usize,
) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes the application's fid_av.
        let Some(av) = (unsafe { get(av.cast()) }) else {
            return -(libc::EINVAL);
        };
        if addrlen.is_null() {
            return -(libc::EINVAL);
        }
        let name = match av.xfer.lookup(xfer_facade::PeerAddr(fi_addr)) {
            Ok(a) => match av.domain.format.encode(&a) {
                Some(bytes) => bytes,
                None => return -(libc::EINVAL),
            },
            Err(e) => return entry::code(&e),
        };
        // SAFETY: checked non-null; the caller's in/out length.
        unsafe { copy_out(&name, addr, addrlen) }
    })
}

/// Copies `bytes` to `out` (capacity `*len`), sets `*len` to their length;
/// `-FI_ETOOSMALL` when they did not all fit.
///
/// # Safety
/// `len` is valid; `out` is null or valid for `*len` bytes.
pub(crate) unsafe fn copy_out(bytes: &[u8], out: *mut c_void, len: *mut usize) -> c_int {
    // SAFETY: the caller's contract.
    let room = unsafe { *len };
    if !out.is_null() {
        let n = room.min(bytes.len());
        // SAFETY: `out` holds `room` >= n bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.cast::<u8>(), n) };
    }
    // SAFETY: the caller's contract.
    unsafe { put(len, bytes.len()) };
    if room < bytes.len() || out.is_null() {
        fi::err(fi::FI_ETOOSMALL)
    } else {
        0
    }
}

/// `fi_av_straddr`: in xfer's format `xfer://` (`fi_xfer_shm://` for an
/// shm endpoint's name) and the name in hex; a
/// socket address as libfabric prints one (`fi_sockaddr_in://IP:PORT`,
/// `fi_sockaddr_in6://[IP]:PORT`).
unsafe extern "C" fn straddr(
    av: *mut fi::fid_av,
    addr: *const c_void,
    buf: *mut c_char,
    len: *mut usize,
) -> *const c_char {
    guard(std::ptr::null(), || {
        if addr.is_null() || buf.is_null() || len.is_null() {
            return std::ptr::null();
        }
        // SAFETY: libfabric passes the application's fid_av.
        let format = unsafe { get(av.cast()) }.map_or(Format::Xfer, |av| av.domain.format);
        let bytes = match format {
            // SAFETY: an FI_ADDR_STR address is a C string.
            Format::Str => unsafe { std::ffi::CStr::from_ptr(addr.cast::<c_char>()) }.to_bytes(),
            // SAFETY: an address of the AV's format is format.len() bytes.
            _ => unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), format.len()) },
        };
        let mut s = match (format, addr::from_sockaddr(bytes)) {
            (Format::Str, _) => String::from_utf8_lossy(bytes).into_owned(),
            (Format::Xfer, _) => match name::decode(bytes).map(Address::new) {
                Some(Ok(a)) => addr::xfer_string(&a),
                _ => String::from("xfer://"),
            },
            (Format::Inet, Some(at)) => format!("fi_sockaddr_in://{at}"),
            (Format::Inet6, Some(at)) => format!("fi_sockaddr_in6://{at}"),
            (_, None) => String::from("fi_sockaddr://?"),
        };
        s.push('\0');
        // SAFETY: checked non-null; the caller's buffer of *len bytes.
        let room = unsafe { *len };
        if room > 0 {
            let n = room.min(s.len());
            // SAFETY: `buf` holds `room` >= n bytes; the last written byte becomes NUL.
            unsafe {
                std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n - 1) = 0;
            }
        }
        // SAFETY: checked non-null.
        unsafe { *len = s.len() };
        buf
    })
}

unsafe extern "C" fn close(fid: *mut fi::fid) -> c_int {
    entry::close_unless_used::<AvObj>(fid, |o| Arc::strong_count(&o.0) > 1)
}
