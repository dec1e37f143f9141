//! Endpoints: names, message and tagged operations, inject, cancel.
//!
//! Posting calls take the caller's memory as it is (no copy): the buffer
//! must stay valid, and untouched by the program, until the operation's
//! completion has been polled from the CQ, or until the endpoint is closed
//! (closing ends every outstanding operation with an `XFER_ECANCELED` entry
//! and returns only once the library no longer touches any of them). Inject
//! calls copy and return.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::Arc;

use xfer_facade::{Buffer, CompletionLevel, Endpoint, EndpointAttr, PeerAddr, RecvOp, RecvSpec, SendOp, TcpAttr};

use crate::av::{av_of, copy_out, xfer_av_t};
use crate::cq::{cq_of, xfer_cq_t, XFER_REMOTE_CQ_DATA, XFER_TAGGED};
use crate::domain::{domain_of, xfer_domain_t};
use crate::error::{guard, invalid, Fail, XFER_EBADF, XFER_EBADFLAGS, XFER_ENOENT, XFER_SUCCESS};
use crate::handle::{self, Kind, Object};
use crate::{context_in, xfer_addr_t};

/// Operation flag: report this send's success with a completion. Only
/// matters on an endpoint opened with `XFER_SELECTIVE_COMPLETION`; errors
/// are always reported (`FI_COMPLETION`).
pub const XFER_COMPLETION: u64 = 1u64 << 24;
/// Operation flag: copy the payload and report no completion, as
/// `xfer_ep_inject` does (`FI_INJECT`).
pub const XFER_INJECT: u64 = 1u64 << 25;
/// Operation flag of `xfer_ep_sendmsg`: the send completes once the target
/// has the message (`FI_TRANSMIT_COMPLETE`; xfer gives it with
/// `XFER_DELIVERY_COMPLETE`'s guarantee).
pub const XFER_TRANSMIT_COMPLETE: u64 = 1u64 << 27;
/// Operation flag of `xfer_ep_sendmsg`: the send completes once the target
/// has the message, placed in the receive that matched it or held for one
/// (`FI_DELIVERY_COMPLETE`); a receive posted before it came holds the data
/// by then. It costs an acknowledgement from the target: a round trip.
pub const XFER_DELIVERY_COMPLETE: u64 = 1u64 << 28;
/// Endpoint flag: only sends posted with `XFER_COMPLETION` report success
/// (`FI_SELECTIVE_COMPLETION`). Without it every operation completes.
pub const XFER_SELECTIVE_COMPLETION: u64 = 1u64 << 59;
/// Endpoint flag: every RMA write and read a peer applies to this
/// endpoint's memory is reported on its CQ (`XFER_RMA | XFER_REMOTE_WRITE`
/// or `XFER_RMA | XFER_REMOTE_READ`, its length and source, context NULL;
/// libfabric's `FI_RMA_EVENT`). TCP only: opening a verbs endpoint with it
/// fails with `XFER_EOPNOTSUPP`. Writes with immediate data are reported
/// either way.
pub const XFER_RMA_EVENTS: u64 = 1u64 << 58;
/// Endpoint flag: a receive from a sender that is not in the address
/// vector completes as an error entry, `XFER_EADDRNOTAVAIL`, whose
/// `err_data`/`err_data_size` hold the sender's raw name (insert it with
/// `xfer_av_insert` to answer it); the message is received all the same
/// (`len`, `tag`, `data` as for success). libfabric's `FI_SOURCE_ERR`.
/// Without it such a receive succeeds with `src` `XFER_ADDR_UNSPEC`. Also
/// `XFER_SOURCE_ERR=1` in the environment.
pub const XFER_SOURCE_ERR: u64 = 1u64 << 57;

/// An endpoint (opaque): reliable and connectionless (`FI_EP_RDM`);
/// connections to peers are made on first use.
pub struct xfer_ep_t {
    _opaque: [u8; 0],
}

/// Endpoint attributes. Fill with `xfer_ep_attr_init` (the defaults with the
/// `XFER_*` environment applied), change fields, pass to `xfer_ep_open`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct xfer_ep_attr_t {
    /// `sizeof(xfer_ep_attr_t)`, set by `xfer_ep_attr_init`; lets later
    /// versions grow the struct without breaking older programs.
    pub size: usize,
    /// `XFER_SELECTIVE_COMPLETION`, `XFER_RMA_EVENTS`, `XFER_SOURCE_ERR`, or 0
    /// (`xfer_ep_attr_init` sets those the environment asks for).
    pub flags: u64,
    /// Messages longer than this many bytes use rendezvous (`XFER_RNDV_THRESHOLD`).
    pub rndv_threshold: usize,
    /// Largest inject payload in bytes (`XFER_INJECT_SIZE`).
    pub inject_size: usize,
    /// TCP: the address to listen on (`"10.0.0.1"`, `"10.0.0.1:5000"`,
    /// `"::1"`, `"[::1]:5000"`, `"fe80::1%eth0"`; `"0.0.0.0:PORT"`: every
    /// interface, the name carrying the automatic choice's address), read
    /// during `xfer_ep_open` only; NULL or `""`: `XFER_TCP_ADDR`, else the
    /// interface choice (`tcp_iface`).
    pub tcp_addr: *const c_char,
    /// TCP: milliseconds a connection attempt may take (`XFER_TCP_CONNECT_TIMEOUT_MS`).
    pub tcp_connect_timeout_ms: u64,
    /// TCP: `TCP_USER_TIMEOUT` in milliseconds, 0 for the kernel's (`XFER_TCP_USER_TIMEOUT_MS`).
    pub tcp_user_timeout_ms: u64,
    /// TCP: socket buffer sizes in bytes, 0 for the kernel's (`XFER_TCP_SOCKBUF`).
    pub tcp_sockbuf: usize,
    /// TCP: keepalive probe period in milliseconds, 0 for none (`XFER_TCP_KEEPALIVE_MS`).
    pub tcp_keepalive_ms: u64,
    /// TCP: eager bytes each peer may have in flight to this endpoint, what a
    /// receiver that posts no receives holds per peer (`XFER_TCP_EAGER_CREDIT`).
    pub tcp_eager_credit: usize,
    /// Operations with a completion in flight at most, 0 for no bound; one
    /// more is refused with `XFER_EAGAIN` (`XFER_MAX_OUTSTANDING`).
    pub max_outstanding: usize,
    /// Sends and RMA with a completion in flight to any one peer at most, 0
    /// for no bound; one more to that peer is refused with `XFER_EAGAIN`
    /// (`XFER_MAX_OUTSTANDING_PER_PEER`).
    pub max_outstanding_per_peer: usize,
    /// TCP: small sends posted after another and before the next poll that
    /// wait for it (or for this many) and then share one `sendmsg`; 0 writes
    /// each when posted (`XFER_TCP_COALESCE`).
    pub tcp_coalesce: usize,
    /// TCP: send buffer in bytes of connections within this host when
    /// `tcp_sockbuf` is 0; 0 for the kernel's autotuning (`XFER_TCP_LOCAL_SNDBUF`).
    pub tcp_local_sndbuf: usize,
    /// TCP: interfaces to listen on, comma-separated (`"ib0,eth1"`), the
    /// first that is up with an address wins, read during `xfer_ep_open`
    /// only; NULL or `""`: `XFER_TCP_IFACE`, else automatic (the first
    /// interface up that is neither loopback nor a container bridge).
    /// A program built against a header without this field passes the
    /// smaller `size`: still accepted, as NULL here.
    pub tcp_iface: *const c_char,
    /// Milliseconds a peer may make no progress while operations wait for it
    /// (a stopped or hung process) before they fail with `XFER_ETIMEDOUT`; 0
    /// for never, the default (`XFER_PROGRESS_TIMEOUT_MS`; TCP and verbs).
    pub progress_timeout_ms: u64,
    /// Admission (TCP and verbs): a NUL-terminated job key, read during `xfer_ep_open`
    /// only; connecting peers must prove they hold it (an HMAC over a
    /// challenge; the key is never sent) or are refused. NULL or `""`:
    /// `XFER_JOB_KEY`, else no admission check.
    pub job_key: *const c_char,
    /// Receive memory in bytes: the most peers may make the endpoint
    /// hold (their credit in flight, unexpected messages, connections);
    /// past it connecting peers are refused (`XFER_RX_MEMORY`).
    pub rx_memory: u64,
    /// Peer events (`xfer_ep_peer_event`) the endpoint queues at most before
    /// dropping new ones (counter `peer_events_lost`); 0 for off, the
    /// default (`XFER_PEER_EVENTS`). A program built against a header
    /// without this field passes the smaller `size`: still accepted, with
    /// the environment's value.
    pub peer_events: usize,
}

/// `sizeof(xfer_ep_attr_t)` before `tcp_iface` was added: such a struct is
/// still accepted.
const ATTR_SIZE_BEFORE_IFACE: usize = std::mem::offset_of!(xfer_ep_attr_t, tcp_iface);
/// `sizeof(xfer_ep_attr_t)` before `progress_timeout_ms` and `job_key` were
/// added: such a struct is still accepted (the environment's values apply).
const ATTR_SIZE_BEFORE_PROGRESS: usize = std::mem::offset_of!(xfer_ep_attr_t, progress_timeout_ms);
/// `sizeof(xfer_ep_attr_t)` before `rx_memory` was added: such a struct is
/// still accepted (the environment's value applies).
const ATTR_SIZE_BEFORE_RX_MEMORY: usize = std::mem::offset_of!(xfer_ep_attr_t, rx_memory);
/// `sizeof(xfer_ep_attr_t)` before `peer_events` was added: such a struct is
/// still accepted (the environment's value applies).
const ATTR_SIZE_BEFORE_EVENTS: usize = std::mem::offset_of!(xfer_ep_attr_t, peer_events);

/// A message for `xfer_ep_sendmsg` / `xfer_ep_recvmsg` (`fi_msg_tagged`
/// with one buffer).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct xfer_msg_t {
    /// The payload (send) or landing buffer (receive); may be NULL when `len` is 0.
    pub buf: *mut c_void,
    /// Its length in bytes.
    pub len: usize,
    /// Destination (send), or source filter (receive; `XFER_ADDR_UNSPEC`: any).
    pub addr: xfer_addr_t,
    /// The tag, with `XFER_TAGGED`.
    pub tag: u64,
    /// Receive with `XFER_TAGGED`: tag bits to ignore when matching.
    pub ignore: u64,
    /// Send with `XFER_REMOTE_CQ_DATA`: immediate data for the receiver.
    pub data: u64,
    /// Returned as `op_context` in the completion.
    pub context: *mut c_void,
}

/// The C struct of `a`; its `tcp_*` fields from the TCP settings the
/// environment gives (`a.params` carries none when the struct is made).
fn attr_from_rust(a: &EndpointAttr) -> xfer_ep_attr_t {
    let tcp = TcpAttr::from_params(&a.params).unwrap_or_else(|_| TcpAttr::from_env());
    xfer_ep_attr_t {
        size: std::mem::size_of::<xfer_ep_attr_t>(),
        flags: if a.selective_completion {
            XFER_SELECTIVE_COMPLETION
        } else {
            0
        } | if a.rma_events { XFER_RMA_EVENTS } else { 0 }
            | if a.source_err { XFER_SOURCE_ERR } else { 0 },
        rndv_threshold: a.rndv_threshold,
        inject_size: a.inject_size,
        tcp_addr: std::ptr::null(),
        tcp_connect_timeout_ms: tcp.connect_timeout_ms,
        tcp_user_timeout_ms: tcp.user_timeout_ms,
        tcp_sockbuf: tcp.sockbuf,
        tcp_keepalive_ms: tcp.keepalive_ms,
        tcp_eager_credit: tcp.eager_credit,
        max_outstanding: a.max_outstanding,
        max_outstanding_per_peer: a.max_outstanding_per_peer,
        tcp_coalesce: tcp.coalesce,
        tcp_local_sndbuf: tcp.local_sndbuf,
        tcp_iface: std::ptr::null(),
        progress_timeout_ms: a.progress_timeout_ms,
        job_key: std::ptr::null(),
        rx_memory: a.rx_memory,
        peer_events: a.peer_events,
    }
}

/// Fills `*attr` with the effective defaults: built-in values overridden by
/// the `XFER_*` environment variables; `tcp_addr`, `tcp_iface` and `job_key`
/// are NULL.
///
/// Returns 0, or `XFER_EINVAL` when `attr` is NULL. Thread-safe.
///
/// # Safety
/// `attr` must be NULL or point to writable memory for one `xfer_ep_attr_t`.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_attr_init(attr: *mut xfer_ep_attr_t) -> c_int {
    guard("xfer_ep_attr_init", || {
        if attr.is_null() {
            return Err(invalid("xfer_ep_attr_init: attr is NULL"));
        }
        // SAFETY: non-null and writable for one struct by contract.
        unsafe { attr.write(attr_from_rust(&EndpointAttr::from_env())) };
        Ok(XFER_SUCCESS)
    })
}

/// Reads a caller's attributes into the Rust form.
///
/// # Safety
/// `attr` must point to a readable `size_t` and, when that is one of the
/// sizes accepted (`sizeof(xfer_ep_attr_t)`, or that of the struct before
/// `rx_memory`, `peer_events`, `progress_timeout_ms` or `tcp_iface`), to that many readable bytes
/// of the struct, whose `tcp_addr`, `tcp_iface` and `job_key` (when present)
/// are NULL or NUL-terminated.
unsafe fn attr_to_rust(attr: *const xfer_ep_attr_t) -> Result<EndpointAttr, Fail> {
    // SAFETY: the first field is readable by contract, whatever the version.
    let size = unsafe { std::ptr::addr_of!((*attr).size).read() };
    // The fields an older struct lacks keep the environment's values.
    let mut a = attr_from_rust(&EndpointAttr::from_env());
    if size == std::mem::size_of::<xfer_ep_attr_t>() {
        // SAFETY: the size matches, so the whole struct is readable by contract.
        a = unsafe { attr.read() };
    } else if size == ATTR_SIZE_BEFORE_IFACE
        || size == ATTR_SIZE_BEFORE_PROGRESS
        || size == ATTR_SIZE_BEFORE_RX_MEMORY
        || size == ATTR_SIZE_BEFORE_EVENTS
    {
        // SAFETY: the caller's struct has this many readable bytes by
        // contract, the fields before `tcp_iface`, `progress_timeout_ms`,
        // `rx_memory` or `peer_events` (the pointers after stay NULL); `a` is a whole struct, so as many
        // bytes of it are writable.
        unsafe { std::ptr::copy_nonoverlapping(attr.cast::<u8>(), (&mut a as *mut xfer_ep_attr_t).cast::<u8>(), size) };
    } else {
        return Err(invalid(
            "xfer_ep_open: attr->size is not sizeof(xfer_ep_attr_t); call xfer_ep_attr_init",
        ));
    }
    if a.flags & !(XFER_SELECTIVE_COMPLETION | XFER_RMA_EVENTS | XFER_SOURCE_ERR) != 0 {
        return Err(Fail(XFER_EBADFLAGS));
    }
    let mut r = EndpointAttr::from_env();
    r.selective_completion = a.flags & XFER_SELECTIVE_COMPLETION != 0;
    r.rma_events = a.flags & XFER_RMA_EVENTS != 0;
    r.source_err = a.flags & XFER_SOURCE_ERR != 0;
    r.rndv_threshold = a.rndv_threshold;
    r.inject_size = a.inject_size;
    r.max_outstanding = a.max_outstanding;
    r.max_outstanding_per_peer = a.max_outstanding_per_peer;
    r.progress_timeout_ms = a.progress_timeout_ms;
    r.rx_memory = a.rx_memory;
    r.peer_events = a.peer_events;
    // The `tcp_*` fields are shorthand for the `tcp.*` keys: one that
    // differs from what xfer_ep_attr_init put there becomes the endpoint's
    // setting; one left alone defers to the domain's key
    // (xfer_domain_attr_set), else to the environment.
    let init = TcpAttr::from_env();
    let numbers = [
        (
            "tcp.connect_timeout_ms",
            a.tcp_connect_timeout_ms,
            init.connect_timeout_ms,
        ),
        ("tcp.user_timeout_ms", a.tcp_user_timeout_ms, init.user_timeout_ms),
        ("tcp.sockbuf", a.tcp_sockbuf as u64, init.sockbuf as u64),
        ("tcp.keepalive_ms", a.tcp_keepalive_ms, init.keepalive_ms),
        ("tcp.eager_credit", a.tcp_eager_credit as u64, init.eager_credit as u64),
        ("tcp.coalesce", a.tcp_coalesce as u64, init.coalesce as u64),
        ("tcp.local_sndbuf", a.tcp_local_sndbuf as u64, init.local_sndbuf as u64),
    ];
    for (key, value, initial) in numbers {
        if value != initial {
            r.params.set(key, value.to_string());
        }
    }
    // SAFETY: NULL or NUL-terminated by contract.
    if let Some(s) = unsafe { c_text(a.tcp_addr, "xfer_ep_open: tcp_addr is not UTF-8") }? {
        r.params.set("tcp.addr", s);
    }
    // SAFETY: NULL or NUL-terminated by contract.
    if let Some(s) = unsafe { c_text(a.tcp_iface, "xfer_ep_open: tcp_iface is not UTF-8") }? {
        r.params.set("tcp.iface", s);
    }
    if !a.job_key.is_null() {
        // SAFETY: a non-null job_key is NUL-terminated by contract.
        let k = unsafe { CStr::from_ptr(a.job_key) }.to_bytes();
        if !k.is_empty() {
            r.job_key = Some(xfer_facade::JobKey(k.to_vec()));
        }
    }
    Ok(r)
}

/// A C string attribute: `None` when NULL or empty.
///
/// # Safety
/// `p` must be NULL or NUL-terminated, and stay valid for the returned life.
unsafe fn c_text<'a>(p: *const c_char, not_utf8: &'static str) -> Result<Option<&'a str>, Fail> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null, so NUL-terminated by contract.
    let s = unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| invalid(not_utf8))?;
    Ok((!s.is_empty()).then_some(s))
}

/// Opens an endpoint in `domain` whose completions go to `cq` and whose
/// peers are named in `av` (both opened from the same domain), with
/// attributes `attr` (NULL: the defaults and the environment). Stores the
/// handle in `*out` (NULL on failure).
///
/// Returns 0; `XFER_EBADF` for a bad handle; `XFER_EINVAL` when `out` is
/// NULL, `cq` or `av` belongs to another domain, `attr->size` is wrong or a
/// value is out of range; `XFER_EBADFLAGS` for an unknown `attr->flags`
/// bit; a negative errno when the provider cannot listen.
/// Ownership: the caller closes it with `xfer_ep_close` before the CQ, AV
/// and domain. Thread-safe.
///
/// # Safety
/// `attr` must be NULL or point to an `xfer_ep_attr_t` set up by
/// `xfer_ep_attr_init`; `out` must be NULL or point to writable memory for
/// one pointer.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_open(
    domain: *mut xfer_domain_t,
    cq: *mut xfer_cq_t,
    av: *mut xfer_av_t,
    attr: *const xfer_ep_attr_t,
    out: *mut *mut xfer_ep_t,
) -> c_int {
    guard("xfer_ep_open", || {
        if out.is_null() {
            return Err(invalid("xfer_ep_open: out is NULL"));
        }
        // SAFETY: `out` is non-null and valid for one pointer by contract.
        unsafe { out.write(std::ptr::null_mut()) };
        let (d, q, table) = (domain_of(domain)?, cq_of(cq)?, av_of(av)?);
        let attr = if attr.is_null() {
            EndpointAttr::from_env()
        } else {
            // SAFETY: a non-null `attr` follows attr_to_rust's contract.
            unsafe { attr_to_rust(attr)? }
        };
        let ep = d.endpoint(&q.cq, &table, &attr)?;
        tracing::debug!(name = ?ep.name(), "endpoint opened through the C ABI");
        let parents = [
            (domain as usize as u64, Kind::Domain),
            (cq as usize as u64, Kind::Cq),
            (av as usize as u64, Kind::Av),
        ];
        let h = handle::insert(Object::Ep(Arc::new(ep)), &parents)?;
        // SAFETY: as above.
        unsafe { out.write(h as usize as *mut xfer_ep_t) };
        Ok(XFER_SUCCESS)
    })
}

/// Closes an endpoint. Its outstanding operations end with `XFER_ECANCELED`
/// entries in its CQ (poll them to learn which); once this returns, the
/// library no longer touches any buffer posted to it.
///
/// Returns 0, or `XFER_EBADF` for a bad or already closed handle.
/// Thread-safe; closing while another thread posts to the same endpoint is
/// a program error (that call may succeed or fail with `XFER_EBADF`).
#[no_mangle]
pub extern "C" fn xfer_ep_close(ep: *mut xfer_ep_t) -> c_int {
    guard("xfer_ep_close", || {
        drop(handle::remove(ep as usize as u64, Kind::Ep)?);
        Ok(XFER_SUCCESS)
    })
}

pub(crate) fn ep_of(h: *mut xfer_ep_t) -> Result<Arc<Endpoint>, Fail> {
    match handle::get(h as usize as u64, Kind::Ep)? {
        Object::Ep(ep) => Ok(ep),
        _ => Err(Fail(XFER_EBADF)),
    }
}

/// Copies the endpoint's name (opaque bytes, at most `XFER_NAME_MAX`) into
/// `buf`, a buffer of `*len` bytes, and stores the name's length in `*len`
/// (`fi_getname`). When `buf` is NULL or `*len` is too small, copies
/// nothing, stores the length needed and returns `XFER_ETOOSMALL`. Peers
/// pass these bytes to `xfer_av_insert`.
///
/// Returns 0; `XFER_ETOOSMALL`; `XFER_EBADF`; `XFER_EINVAL` when `len` is
/// NULL. Thread-safe.
///
/// # Safety
/// `len` must be NULL or point to a readable and writable `size_t`; `buf`
/// must be NULL or writable for `*len` bytes.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_getname(ep: *mut xfer_ep_t, buf: *mut c_void, len: *mut usize) -> c_int {
    guard("xfer_ep_getname", || {
        let e = ep_of(ep)?;
        if len.is_null() {
            return Err(invalid("xfer_ep_getname: len is NULL"));
        }
        // SAFETY: `buf` and `len` follow this function's contract.
        unsafe { copy_out(e.name().as_bytes(), buf, len) }
    })
}

/// Reads the provider counter `name` (a NUL-terminated string, e.g.
/// `"inline_sends"` on verbs) of `ep` into `*value`: which paths operations
/// took, for tests and diagnostics (the Rust `Endpoint::counters`). The
/// verbs provider and the RDM engine's (tcp, shm, shm+tcp) keep counters,
/// e.g. `"atomics_refused_after_completion"`: refusals of atomics that had
/// completed when sent.
///
/// Returns 0; `XFER_ENOENT` when the provider has no counter of that name;
/// `XFER_EBADF`; `XFER_EINVAL` when `name` or `value` is NULL or `name` is
/// not UTF-8. Thread-safe.
///
/// # Safety
/// `name` must be NULL or a NUL-terminated string; `value` must be NULL or
/// writable for one `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_counter(ep: *mut xfer_ep_t, name: *const c_char, value: *mut u64) -> c_int {
    guard("xfer_ep_counter", || {
        let e = ep_of(ep)?;
        if name.is_null() || value.is_null() {
            return Err(invalid("xfer_ep_counter: name or value is NULL"));
        }
        // SAFETY: `name` is non-null and NUL-terminated by contract.
        let name = unsafe { CStr::from_ptr(name) }
            .to_str()
            .map_err(|_| invalid("xfer_ep_counter: name is not UTF-8"))?;
        let found = e.counters()?.into_iter().find(|(k, _)| *k == name);
        let (_, v) = found.ok_or(Fail(XFER_ENOENT))?;
        // SAFETY: `value` is non-null and writable by contract.
        unsafe { value.write(v) };
        Ok(XFER_SUCCESS)
    })
}

/// The checks every caller buffer gets: NULL only with length 0, length
/// within `isize::MAX` (the limit of a Rust slice).
pub(crate) fn check_buffer(buf: *const c_void, len: usize) -> Result<(), Fail> {
    if buf.is_null() && len > 0 {
        return Err(invalid("buffer is NULL but its length is not 0"));
    }
    if len > isize::MAX as usize {
        return Err(invalid("buffer length exceeds isize::MAX"));
    }
    Ok(())
}

/// A caller buffer read during the call only (inject copies it), checked
/// as [`check_buffer`].
///
/// # Safety
/// `buf` must be valid for reading `len` bytes for the lifetime `'a`.
pub(crate) unsafe fn borrowed_bytes<'a>(buf: *const c_void, len: usize) -> Result<&'a [u8], Fail> {
    check_buffer(buf, len)?;
    if len == 0 {
        return Ok(&[]);
    }
    // SAFETY: non-null, readable for `len` <= isize::MAX bytes by contract.
    Ok(unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) })
}

/// Wraps a caller's buffer for an operation after checking what can be
/// checked: NULL only with length 0, length within `isize::MAX`.
///
/// # Safety
/// The libfabric contract: `buf` valid for `len` bytes and untouched until
/// the completion.
pub(crate) unsafe fn raw_buffer(buf: *const c_void, len: usize) -> Result<Buffer, Fail> {
    check_buffer(buf, len)?;
    // SAFETY: forwarded from this function's contract; a send's buffer is
    // only read, so handing the core a `*mut` of const memory is sound.
    Ok(unsafe { Buffer::raw(buf.cast_mut().cast::<u8>(), len) })
}

/// Shared body of every send: posts `buf`, raw (the caller's memory, from
/// [`raw_buffer`]) or owned (a copy).
pub(crate) fn post_send(
    e: &Endpoint,
    buf: Buffer,
    dest: xfer_addr_t,
    tag: Option<u64>,
    data: Option<u64>,
    context: *mut c_void,
    completion: bool,
) -> Result<c_int, Fail> {
    e.post_send(SendOp {
        peer: PeerAddr(dest),
        tag,
        data,
        buf,
        context: context_in(context),
        completion,
        level: Default::default(),
    })?;
    Ok(XFER_SUCCESS)
}

/// Shared body of every receive into `buf`, raw or owned; `tagged` is
/// `(tag, ignore)`.
pub(crate) fn post_recv(
    e: &Endpoint,
    buf: Buffer,
    src: xfer_addr_t,
    tagged: Option<(u64, u64)>,
    context: *mut c_void,
) -> Result<c_int, Fail> {
    let (tag, ignore) = tagged.unwrap_or((0, 0));
    e.post_recv(RecvOp {
        spec: RecvSpec {
            src: PeerAddr(src),
            tag,
            ignore,
        },
        tagged: tagged.is_some(),
        buf,
        context: context_in(context),
    })?;
    Ok(XFER_SUCCESS)
}

/// Sends `len` bytes at `buf` as an untagged message to `dest` (`fi_send`).
/// The completion (`XFER_SEND | XFER_MSG`) returns `context`.
///
/// Returns 0 when posted; `XFER_EBADF`; `XFER_EINVAL` for a NULL `buf` with
/// a non-zero `len`; `XFER_EADDRNOTAVAIL` when `dest` is not in the AV.
/// Failures after posting (peer unreachable) arrive as CQ entries.
///
/// # Safety
/// `buf` must be valid for reading `len` bytes and must not be modified or
/// freed until the completion is polled or the endpoint is closed.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_send(
    ep: *mut xfer_ep_t,
    buf: *const c_void,
    len: usize,
    dest: xfer_addr_t,
    context: *mut c_void,
) -> c_int {
    guard("xfer_ep_send", || {
        let e = ep_of(ep)?;
        // SAFETY: forwarded from this function's contract.
        let buf = unsafe { raw_buffer(buf, len)? };
        post_send(&e, buf, dest, None, None, context, true)
    })
}

/// Like `xfer_ep_send`, with immediate data `data` delivered in the
/// receiver's completion (flag `XFER_REMOTE_CQ_DATA`) (`fi_senddata`).
///
/// # Safety
/// As `xfer_ep_send`.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_senddata(
    ep: *mut xfer_ep_t,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: xfer_addr_t,
    context: *mut c_void,
) -> c_int {
    guard("xfer_ep_senddata", || {
        let e = ep_of(ep)?;
        // SAFETY: forwarded from this function's contract.
        let buf = unsafe { raw_buffer(buf, len)? };
        post_send(&e, buf, dest, None, Some(data), context, true)
    })
}

/// Sends `len` bytes at `buf` as a message tagged `tag` to `dest`
/// (`fi_tsend`). Returns as `xfer_ep_send`.
///
/// # Safety
/// As `xfer_ep_send`.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_tsend(
    ep: *mut xfer_ep_t,
    buf: *const c_void,
    len: usize,
    dest: xfer_addr_t,
    tag: u64,
    context: *mut c_void,
) -> c_int {
    guard("xfer_ep_tsend", || {
        let e = ep_of(ep)?;
        // SAFETY: forwarded from this function's contract.
        let buf = unsafe { raw_buffer(buf, len)? };
        post_send(&e, buf, dest, Some(tag), None, context, true)
    })
}

/// Like `xfer_ep_tsend`, with immediate data (`fi_tsenddata`).
///
/// # Safety
/// As `xfer_ep_send`.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_tsenddata(
    ep: *mut xfer_ep_t,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: xfer_addr_t,
    tag: u64,
    context: *mut c_void,
) -> c_int {
    guard("xfer_ep_tsenddata", || {
        let e = ep_of(ep)?;
        // SAFETY: forwarded from this function's contract.
        let buf = unsafe { raw_buffer(buf, len)? };
        post_send(&e, buf, dest, Some(tag), Some(data), context, true)
    })
}

/// Posts a receive of an untagged message from `src` (`XFER_ADDR_UNSPEC`:
/// any source) into `len` bytes at `buf` (`fi_recv`). Receives match
/// arriving messages in the order they were posted. The completion
/// (`XFER_RECV | XFER_MSG`) gives the length received and the sender; a
/// longer message fills the buffer and completes with `err = XFER_ETRUNC`
/// and `olen` set; nothing past `len` bytes is written.
///
/// Returns 0 when posted; `XFER_EBADF`; `XFER_EINVAL` for a NULL `buf` with
/// a non-zero `len`.
///
/// # Safety
/// `buf` must be valid for writing `len` bytes and must not be read,
/// modified or freed until the completion is polled or the endpoint closed.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_recv(
    ep: *mut xfer_ep_t,
    buf: *mut c_void,
    len: usize,
    src: xfer_addr_t,
    context: *mut c_void,
) -> c_int {
    guard("xfer_ep_recv", || {
        let e = ep_of(ep)?;
        // SAFETY: forwarded from this function's contract.
        let buf = unsafe { raw_buffer(buf, len)? };
        post_recv(&e, buf, src, None, context)
    })
}

/// Posts a receive of a message whose tag equals `tag` in every bit not set
/// in `ignore`, from `src` (`XFER_ADDR_UNSPEC`: any source) (`fi_trecv`).
/// The completion's `tag` is the message's. Otherwise as `xfer_ep_recv`.
///
/// # Safety
/// As `xfer_ep_recv`.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_trecv(
    ep: *mut xfer_ep_t,
    buf: *mut c_void,
    len: usize,
    src: xfer_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> c_int {
    guard("xfer_ep_trecv", || {
        let e = ep_of(ep)?;
        // SAFETY: forwarded from this function's contract.
        let buf = unsafe { raw_buffer(buf, len)? };
        post_recv(&e, buf, src, Some((tag, ignore)), context)
    })
}

/// Copies `len` bytes at `buf` and sends them untagged to `dest`; reports
/// no completion (only a failure to reach the peer is logged); `buf` may be
/// reused at once (`fi_inject`).
///
/// Returns 0; `XFER_EBADF`; `XFER_EINVAL` for a NULL `buf` with a non-zero
/// `len` or `len` above the endpoint's `inject_size`;
/// `XFER_EADDRNOTAVAIL`.
///
/// # Safety
/// `buf` must be valid for reading `len` bytes during the call.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_inject(
    ep: *mut xfer_ep_t,
    buf: *const c_void,
    len: usize,
    dest: xfer_addr_t,
) -> c_int {
    guard("xfer_ep_inject", || {
        let e = ep_of(ep)?;
        // SAFETY: forwarded from this function's contract.
        unsafe { inject(&e, buf, len, dest, None, None) }
    })
}

/// Like `xfer_ep_inject`, tagged `tag` (`fi_tinject`).
///
/// # Safety
/// As `xfer_ep_inject`.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_tinject(
    ep: *mut xfer_ep_t,
    buf: *const c_void,
    len: usize,
    dest: xfer_addr_t,
    tag: u64,
) -> c_int {
    guard("xfer_ep_tinject", || {
        let e = ep_of(ep)?;
        // SAFETY: forwarded from this function's contract.
        unsafe { inject(&e, buf, len, dest, Some(tag), None) }
    })
}

/// Like `xfer_ep_inject`, with immediate data `data` delivered in the
/// receiver's completion (flag `XFER_REMOTE_CQ_DATA`) (`fi_injectdata`).
///
/// # Safety
/// As `xfer_ep_inject`.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_injectdata(
    ep: *mut xfer_ep_t,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: xfer_addr_t,
) -> c_int {
    guard("xfer_ep_injectdata", || {
        let e = ep_of(ep)?;
        // SAFETY: forwarded from this function's contract.
        unsafe { inject(&e, buf, len, dest, None, Some(data)) }
    })
}

/// Like `xfer_ep_tinject`, with immediate data (`fi_tinjectdata`).
///
/// # Safety
/// As `xfer_ep_inject`.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_tinjectdata(
    ep: *mut xfer_ep_t,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: xfer_addr_t,
    tag: u64,
) -> c_int {
    guard("xfer_ep_tinjectdata", || {
        let e = ep_of(ep)?;
        // SAFETY: forwarded from this function's contract.
        unsafe { inject(&e, buf, len, dest, Some(tag), Some(data)) }
    })
}

/// Shared body of every inject.
///
/// # Safety
/// `buf` valid for reading `len` bytes during the call.
unsafe fn inject(
    e: &Endpoint,
    buf: *const c_void,
    len: usize,
    dest: xfer_addr_t,
    tag: Option<u64>,
    data: Option<u64>,
) -> Result<c_int, Fail> {
    // SAFETY: forwarded from the caller's contract; inject copies it.
    let payload = unsafe { borrowed_bytes(buf, len)? };
    let peer = PeerAddr(dest);
    match (tag, data) {
        (None, None) => e.inject(peer, payload)?,
        (Some(t), None) => e.tinject(peer, t, payload)?,
        (None, Some(d)) => e.inject_data(peer, payload, d)?,
        (Some(t), Some(d)) => e.tinject_data(peer, t, payload, d)?,
    }
    Ok(XFER_SUCCESS)
}

/// Checks a `*msg` call's message pointer and flags (every bit in
/// `known`), then reads the message.
///
/// # Safety
/// `m` must be NULL or point to a readable `T`.
pub(crate) unsafe fn read_msg<T>(what: &'static str, m: *const T, flags: u64, known: u64) -> Result<T, Fail> {
    if m.is_null() {
        return Err(invalid(what));
    }
    if flags & !known != 0 {
        tracing::debug!(flags = format_args!("{flags:#x}"), call = what, "unsupported flags");
        return Err(Fail(XFER_EBADFLAGS));
    }
    // SAFETY: non-null and readable by contract.
    Ok(unsafe { m.read() })
}

/// Posts a send described by `*msg` (`fi_sendmsg` / `fi_tsendmsg`).
/// `flags` is a combination of:
/// - `XFER_TAGGED`: a tagged send with `msg->tag` (else untagged);
/// - `XFER_REMOTE_CQ_DATA`: deliver `msg->data` as immediate data;
/// - `XFER_COMPLETION`: report success with a completion. On an endpoint
///   opened with `XFER_SELECTIVE_COMPLETION`, a send without it reports
///   only failure; on other endpoints every send completes;
/// - `XFER_INJECT`: copy the payload and report no completion, as
///   `xfer_ep_inject` (with `XFER_REMOTE_CQ_DATA`: `xfer_ep_injectdata`);
/// - `XFER_TRANSMIT_COMPLETE`, `XFER_DELIVERY_COMPLETE`: complete only once
///   the target has the message (not with `XFER_INJECT`, which reports no
///   completion: `XFER_EBADFLAGS`).
///
/// Returns as `xfer_ep_send` (`xfer_ep_inject` with `XFER_INJECT`), or
/// `XFER_EBADFLAGS` for another flag; `XFER_EINVAL` when `msg` is NULL.
/// `*msg` is read during the call only.
///
/// # Safety
/// `msg` must be NULL or point to a readable `xfer_msg_t` whose buffer
/// follows `xfer_ep_send`'s rule (or `xfer_ep_inject`'s with `XFER_INJECT`).
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_sendmsg(ep: *mut xfer_ep_t, msg: *const xfer_msg_t, flags: u64) -> c_int {
    guard("xfer_ep_sendmsg", || {
        const LEVELS: u64 = XFER_TRANSMIT_COMPLETE | XFER_DELIVERY_COMPLETE;
        const KNOWN: u64 = XFER_TAGGED | XFER_REMOTE_CQ_DATA | XFER_COMPLETION | XFER_INJECT | LEVELS;
        let e = ep_of(ep)?;
        // SAFETY: forwarded from this function's contract.
        let m = unsafe { read_msg("xfer_ep_sendmsg: msg is NULL", msg, flags, KNOWN)? };
        let tag = (flags & XFER_TAGGED != 0).then_some(m.tag);
        let data = (flags & XFER_REMOTE_CQ_DATA != 0).then_some(m.data);
        if flags & XFER_INJECT != 0 {
            if flags & LEVELS != 0 {
                // An inject reports nothing: no level to honour.
                return Err(Fail(XFER_EBADFLAGS));
            }
            // SAFETY: forwarded from this function's contract.
            return unsafe { inject(&e, m.buf, m.len, m.addr, tag, data) };
        }
        let level = match flags & LEVELS {
            0 => CompletionLevel::Inject,
            XFER_TRANSMIT_COMPLETE => CompletionLevel::Transmit,
            _ => CompletionLevel::Delivery,
        };
        // SAFETY: forwarded from this function's contract.
        let buf = unsafe { raw_buffer(m.buf, m.len)? };
        e.post_send(SendOp {
            peer: PeerAddr(m.addr),
            tag,
            data,
            buf,
            context: context_in(m.context),
            completion: flags & XFER_COMPLETION != 0,
            level,
        })?;
        Ok(XFER_SUCCESS)
    })
}

/// Posts a receive described by `*msg` (`fi_recvmsg` / `fi_trecvmsg`):
/// `XFER_TAGGED` in `flags` receives a tagged message matching `msg->tag`
/// with `msg->ignore`, else an untagged one; `msg->addr` filters the source.
/// `XFER_COMPLETION` is accepted and changes nothing (receives always
/// complete). Returns as `xfer_ep_recv`, or `XFER_EBADFLAGS` for another
/// flag; `XFER_EINVAL` when `msg` is NULL.
///
/// # Safety
/// `msg` must be NULL or point to a readable `xfer_msg_t` whose buffer
/// follows `xfer_ep_recv`'s rule.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_recvmsg(ep: *mut xfer_ep_t, msg: *const xfer_msg_t, flags: u64) -> c_int {
    guard("xfer_ep_recvmsg", || {
        let e = ep_of(ep)?;
        // SAFETY: forwarded from this function's contract.
        let m = unsafe {
            read_msg(
                "xfer_ep_recvmsg: msg is NULL",
                msg,
                flags,
                XFER_TAGGED | XFER_COMPLETION,
            )?
        };
        let tagged = (flags & XFER_TAGGED != 0).then_some((m.tag, m.ignore));
        // SAFETY: forwarded from this function's contract.
        let buf = unsafe { raw_buffer(m.buf, m.len)? };
        post_recv(&e, buf, m.addr, tagged, m.context)
    })
}

/// Cancels the posted receive whose context is `context`; it completes with
/// `err = XFER_ECANCELED` (`fi_cancel`). Sends cannot be cancelled.
///
/// Returns 0; `XFER_EBADF`; `XFER_ENOENT` when no receive with that context
/// is waiting (it matched or completed already, or was never posted), and
/// then no completion is produced. Thread-safe.
#[no_mangle]
pub extern "C" fn xfer_ep_cancel(ep: *mut xfer_ep_t, context: *mut c_void) -> c_int {
    guard("xfer_ep_cancel", || {
        ep_of(ep)?.cancel(context_in(context))?;
        Ok(XFER_SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The interface list the TCP transport reads from `r`.
    fn iface(r: &EndpointAttr) -> Vec<String> {
        TcpAttr::from_params(&r.params).expect("valid settings").iface
    }

    #[test]
    fn tcp_fields_become_keys_only_when_changed() {
        let mut a = attr_from_rust(&EndpointAttr::from_env());
        // SAFETY: `a` is a whole struct with NULL strings.
        let r = unsafe { attr_to_rust(&a) }.unwrap();
        assert!(
            r.params.is_empty(),
            "untouched fields defer to the domain: {:?}",
            r.params
        );
        a.tcp_coalesce = a.tcp_coalesce.wrapping_add(1);
        a.tcp_addr = c"127.0.0.1".as_ptr();
        // SAFETY: as above, with a NUL-terminated address.
        let r = unsafe { attr_to_rust(&a) }.unwrap();
        assert_eq!(r.params.get("tcp.coalesce"), Some(a.tcp_coalesce.to_string().as_str()));
        assert_eq!(r.params.get("tcp.addr"), Some("127.0.0.1"));
        assert_eq!(r.params.iter().count(), 2);
    }

    #[test]
    fn attr_init_round_trips_the_rust_defaults() {
        let mut a = std::mem::MaybeUninit::<xfer_ep_attr_t>::uninit();
        // SAFETY: `a` is writable for one struct.
        assert_eq!(unsafe { xfer_ep_attr_init(a.as_mut_ptr()) }, 0);
        // SAFETY: initialised by the call above.
        let a = unsafe { a.assume_init() };
        // SAFETY: `a` is a whole struct with a NULL tcp_addr.
        let r = unsafe { attr_to_rust(&a) }.unwrap();
        assert_eq!(r, EndpointAttr::from_env());
        let bad = xfer_ep_attr_t { size: 8, ..a };
        // SAFETY: the size field is readable.
        assert_eq!(unsafe { attr_to_rust(&bad) }.unwrap_err(), invalid("x"));
    }

    #[test]
    fn interfaces_are_a_comma_separated_list_and_the_older_struct_is_read() {
        let mut a = attr_from_rust(&EndpointAttr::default());
        a.rndv_threshold = 1234;
        a.tcp_iface = c" ib0, eth1 ,".as_ptr();
        // SAFETY: `a` is a whole struct; its strings are NULL or NUL-terminated.
        let r = unsafe { attr_to_rust(&a) }.unwrap();
        assert_eq!(iface(&r), ["ib0", "eth1"]);
        assert_eq!(r.rndv_threshold, 1234);
        // The struct before `tcp_iface`: read up to it, the list left to the environment.
        let old = xfer_ep_attr_t {
            size: ATTR_SIZE_BEFORE_IFACE,
            ..a
        };
        assert_eq!(ATTR_SIZE_BEFORE_IFACE + 8, ATTR_SIZE_BEFORE_PROGRESS);
        // SAFETY: the struct is whole, so its first `size` bytes are readable.
        let r = unsafe { attr_to_rust(&old) }.unwrap();
        assert_eq!(iface(&r), TcpAttr::from_env().iface);
        assert_eq!(r.rndv_threshold, 1234);
        // The struct before `progress_timeout_ms`: the interface list is read,
        // the timeout and the job key are left to the environment.
        let mid = xfer_ep_attr_t {
            size: ATTR_SIZE_BEFORE_PROGRESS,
            progress_timeout_ms: 777,
            job_key: c"unread".as_ptr(),
            ..a
        };
        // SAFETY: the struct is whole, so its first `size` bytes are readable.
        let r = unsafe { attr_to_rust(&mid) }.unwrap();
        assert_eq!(iface(&r), ["ib0", "eth1"]);
        let env = EndpointAttr::from_env();
        assert_eq!(
            (r.progress_timeout_ms, r.job_key),
            (env.progress_timeout_ms, env.job_key)
        );
        // The struct before `rx_memory`: the timeout is read, the limit left
        // to the environment.
        let before_rx = xfer_ep_attr_t {
            size: ATTR_SIZE_BEFORE_RX_MEMORY,
            progress_timeout_ms: 777,
            rx_memory: 12345,
            ..a
        };
        // SAFETY: as above.
        let r = unsafe { attr_to_rust(&before_rx) }.unwrap();
        assert_eq!((r.progress_timeout_ms, r.rx_memory), (777, env.rx_memory));
        let whole = xfer_ep_attr_t {
            progress_timeout_ms: 777,
            job_key: c"key".as_ptr(),
            rx_memory: 12345,
            ..a
        };
        // SAFETY: as above.
        let r = unsafe { attr_to_rust(&whole) }.unwrap();
        assert_eq!(r.progress_timeout_ms, 777);
        assert_eq!(r.rx_memory, 12345);
        assert_eq!(r.job_key, Some(xfer_facade::JobKey(b"key".to_vec())));
        // The struct before `peer_events`: the job key is read, the event
        // queue is left to the environment.
        let before_events = xfer_ep_attr_t {
            size: ATTR_SIZE_BEFORE_EVENTS,
            peer_events: 99,
            ..whole
        };
        // SAFETY: the struct is whole, so its first `size` bytes are readable.
        let r = unsafe { attr_to_rust(&before_events) }.unwrap();
        assert_eq!(r.job_key, Some(xfer_facade::JobKey(b"key".to_vec())));
        assert_eq!(r.peer_events, env.peer_events);
        // SAFETY: as above.
        let r = unsafe {
            attr_to_rust(&xfer_ep_attr_t {
                peer_events: 99,
                ..whole
            })
        }
        .unwrap();
        assert_eq!(r.peer_events, 99);
        let not_utf8 = xfer_ep_attr_t {
            tcp_iface: c"\xff".as_ptr(),
            ..a
        };
        // SAFETY: as above.
        assert_eq!(unsafe { attr_to_rust(&not_utf8) }.unwrap_err(), invalid("x"));
    }
}
