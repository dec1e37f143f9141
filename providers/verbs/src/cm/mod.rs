//! Connection set-up through librdmacm (`rdma_cm`): listen on an IP address,
//! connect to `IP:port`, accept. IP addressing makes this work alike on
//! InfiniBand (IPoIB), RoCE and iWARP.
//!
//! This module holds the primitives: an event channel with a non-blocking
//! descriptor ([`EventChannel`]), an owned `rdma_cm_id` ([`CmId`]) with one
//! method per librdmacm step, and the QP state transitions. The endpoint
//! drives them as a state machine from its progress loop; [`blocking`] wraps
//! them into wait-for-it calls for tests and tools.
//!
//! The QP is the caller's own ([`RcQp`], created on the domain's PD, CQ and
//! SRQ), not one made by `rdma_create_qp`: librdmacm would require a PD of its
//! own device context. So the state transitions are done here, "manual QP"
//! style: `rdma_init_qp_attr` gives the attributes for each state (address
//! vector, PSNs, remote QP number), [`RcQp`] overrides them with the
//! configured path MTU, RNR and retry settings, and the active side finishes
//! with `rdma_establish` after the `CONNECT_RESPONSE` event.

pub mod blocking;

use std::ffi::CStr;
use std::net::SocketAddrV4;

use crate::rdma_core::{
    ibv_get_device_name, rdma_accept, rdma_ack_cm_event, rdma_bind_addr, rdma_connect, rdma_create_event_channel,
    rdma_create_id, rdma_destroy_event_channel, rdma_destroy_id, rdma_disconnect, rdma_establish, rdma_event_str,
    rdma_get_cm_event, rdma_get_src_port, rdma_init_qp_attr, rdma_listen, rdma_migrate_id, rdma_reject,
    rdma_resolve_addr, rdma_resolve_route,
};
use rdma_sys::{
    ibv_access_flags, ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_state, rdma_cm_event, rdma_cm_id, rdma_conn_param,
    rdma_event_channel, rdma_port_space,
};
use xfer_core::{Error, Result};

pub use blocking::{CmConnection, CmListener};

use crate::qp::RcQp;
use crate::sys::{check, last_os_error};

/// Responder resources / initiator depth asked for (outstanding RDMA READs).
const RD_ATOMIC: u8 = 16;

/// Largest private data kept from an event (an RC REQ carries at most 56).
pub const MAX_PRIVATE: usize = 56;

/// The event types, re-exported for matching.
pub use rdma_sys::rdma_cm_event_type::Type as EventKind;
pub use rdma_sys::rdma_cm_event_type::*;

/// An rdma_cm event channel, destroyed on drop. Its fd is non-blocking.
pub struct EventChannel {
    ch: *mut rdma_event_channel,
}

// SAFETY: librdmacm event channels may be used from any thread; the owner
// serialises use (every call is under the domain lock).
unsafe impl Send for EventChannel {}

/// The fields of an event, copied before the event is acknowledged.
#[derive(Clone)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// Its status (negative errno, or a reject reason for `REJECTED`).
    pub status: i32,
    /// The id it is for (for `CONNECT_REQUEST`: the new id).
    pub id: *mut rdma_cm_id,
    /// For `CONNECT_REQUEST`: the listening id.
    pub listen_id: *mut rdma_cm_id,
    /// The peer's responder resources (connection events).
    pub responder_resources: u8,
    /// The peer's initiator depth (connection events).
    pub initiator_depth: u8,
    private: [u8; MAX_PRIVATE],
    private_len: u8,
}

impl Event {
    /// The private data the peer sent (possibly zero-padded by the CM).
    pub fn private_data(&self) -> &[u8] {
        &self.private[..usize::from(self.private_len)]
    }

    /// The event's name, for logs.
    pub fn name(&self) -> String {
        event_name(self.kind)
    }
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event")
            .field("kind", &self.name())
            .field("status", &self.status)
            .field("id", &self.id)
            .finish()
    }
}

/// The librdmacm name of an event type.
pub fn event_name(kind: EventKind) -> String {
    // SAFETY: rdma_event_str returns a static string for any value.
    let s = unsafe { rdma_event_str(kind) };
    if s.is_null() {
        return format!("event {kind}");
    }
    // SAFETY: non-null static NUL-terminated string.
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

impl EventChannel {
    /// A new channel with a non-blocking descriptor.
    pub fn new() -> Result<EventChannel> {
        crate::rdma_core::load().map_err(Error::NoProvider)?;
        // SAFETY: no arguments; returns null on failure.
        let ch = unsafe { rdma_create_event_channel() };
        if ch.is_null() {
            return Err(last_os_error());
        }
        let chan = EventChannel { ch };
        // SAFETY: ch is valid; fd is its open descriptor; only flags change.
        unsafe {
            let fd = (*ch).fd;
            let fl = libc::fcntl(fd, libc::F_GETFL);
            if fl < 0 || libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
                return Err(last_os_error());
            }
        }
        Ok(chan)
    }

    /// The descriptor, readable when an event is waiting.
    pub fn fd(&self) -> i32 {
        // SAFETY: ch valid for our lifetime.
        unsafe { (*self.ch).fd }
    }

    /// The next event if one is waiting, acknowledged (its fields copied).
    pub fn try_next(&self) -> Result<Option<Event>> {
        let mut ev: *mut rdma_cm_event = std::ptr::null_mut();
        // SAFETY: ch valid; ev a valid out-pointer. Non-blocking fd: EAGAIN if none.
        if unsafe { rdma_get_cm_event(self.ch, &mut ev) } != 0 {
            let e = last_os_error();
            return if e == Error::Os(libc::EAGAIN) { Ok(None) } else { Err(e) };
        }
        // SAFETY: ev is a valid event until acked; the conn member of the
        // union is the one RC connection events fill (and plain data for the
        // others); its private data pointer is valid for its length until the ack.
        let out = unsafe {
            let e = &*ev;
            let conn = e.param.conn;
            let mut private = [0u8; MAX_PRIVATE];
            let len = usize::from(conn.private_data_len).min(MAX_PRIVATE);
            if !conn.private_data.is_null() && len > 0 {
                private[..len].copy_from_slice(std::slice::from_raw_parts(conn.private_data.cast::<u8>(), len));
            }
            Event {
                kind: e.event,
                status: e.status,
                id: e.id,
                listen_id: e.listen_id,
                responder_resources: conn.responder_resources,
                initiator_depth: conn.initiator_depth,
                private,
                private_len: len as u8,
            }
        };
        // SAFETY: ev came from rdma_get_cm_event and is acked once.
        unsafe { rdma_ack_cm_event(ev) };
        Ok(Some(out))
    }

    /// The next event, waiting up to `timeout_ms`.
    pub fn next(&self, timeout_ms: i32) -> Result<Event> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(timeout_ms.max(0) as u64);
        loop {
            if let Some(ev) = self.try_next()? {
                return Ok(ev);
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(Error::TimedOut);
            }
            let mut pfd = libc::pollfd {
                fd: self.fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(i32::MAX as u128) as i32) };
            if n < 0 && last_os_error() != Error::Os(libc::EINTR) {
                return Err(last_os_error());
            }
        }
    }

    /// The next event, which must be `want` with status 0.
    pub fn expect(&self, want: EventKind, timeout_ms: i32) -> Result<Event> {
        let ev = self.next(timeout_ms)?;
        if ev.kind != want || ev.status != 0 {
            xfer_core::warn_limited!(got = %ev.name(), want = %event_name(want), status = ev.status, "unexpected rdma_cm event");
            return Err(event_error(&ev));
        }
        Ok(ev)
    }
}

/// The error an unwanted or failed event stands for.
pub fn event_error(ev: &Event) -> Error {
    match ev.kind {
        RDMA_CM_EVENT_REJECTED | RDMA_CM_EVENT_UNREACHABLE => Error::Os(libc::ECONNREFUSED),
        RDMA_CM_EVENT_ADDR_ERROR | RDMA_CM_EVENT_ROUTE_ERROR => Error::Os(libc::EHOSTUNREACH),
        _ if ev.status < 0 => Error::Os(-ev.status),
        _ => Error::Protocol("unexpected rdma_cm event"),
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: created by rdma_create_event_channel; every id on it was
        // destroyed or migrated first (field order of the owners).
        unsafe { rdma_destroy_event_channel(self.ch) };
    }
}

/// An owned `rdma_cm_id`, destroyed on drop.
pub struct CmId {
    id: *mut rdma_cm_id,
}

// SAFETY: an rdma_cm_id may be used from any thread; the owner serialises use.
unsafe impl Send for CmId {}

fn sockaddr(addr: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: addr.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*addr.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

impl CmId {
    /// A new id whose events go to `chan`.
    pub fn new(chan: &EventChannel) -> Result<CmId> {
        let mut id = std::ptr::null_mut();
        // SAFETY: chan valid; id a valid out-pointer.
        check(unsafe { rdma_create_id(chan.ch, &mut id, std::ptr::null_mut(), rdma_port_space::RDMA_PS_TCP) })?;
        Ok(CmId { id })
    }

    /// Takes ownership of the new id of a `CONNECT_REQUEST` event.
    ///
    /// # Safety
    /// `ev` must be a `CONNECT_REQUEST` event whose id nobody else owns.
    pub unsafe fn from_request(ev: &Event) -> CmId {
        CmId { id: ev.id }
    }

    /// The raw id, to match events against.
    pub fn as_ptr(&self) -> *mut rdma_cm_id {
        self.id
    }

    /// Binds to `addr` (port 0: ephemeral) and listens.
    pub fn listen(&self, addr: SocketAddrV4, backlog: i32) -> Result<()> {
        let mut sa = sockaddr(addr);
        // SAFETY: id valid; sa is a sockaddr_in that lives for the call.
        check(unsafe { rdma_bind_addr(self.id, (&mut sa as *mut libc::sockaddr_in).cast()) })?;
        // SAFETY: id bound.
        check(unsafe { rdma_listen(self.id, backlog) })
    }

    /// The bound local port.
    pub fn src_port(&self) -> u16 {
        // SAFETY: id valid.
        u16::from_be(unsafe { rdma_get_src_port(self.id) })
    }

    /// Starts resolving `dst` from `src` (`ADDR_RESOLVED` follows).
    pub fn resolve_addr(&self, src: Option<SocketAddrV4>, dst: SocketAddrV4, timeout_ms: i32) -> Result<()> {
        let mut s = src.map(sockaddr);
        let sp = s
            .as_mut()
            .map_or(std::ptr::null_mut(), |s| (s as *mut libc::sockaddr_in).cast());
        let mut d = sockaddr(dst);
        // SAFETY: id valid; both addresses live for the call (librdmacm copies them).
        check(unsafe { rdma_resolve_addr(self.id, sp, (&mut d as *mut libc::sockaddr_in).cast(), timeout_ms) })
    }

    /// Starts resolving the route (`ROUTE_RESOLVED` follows).
    pub fn resolve_route(&self, timeout_ms: i32) -> Result<()> {
        // SAFETY: id has a resolved address.
        check(unsafe { rdma_resolve_route(self.id, timeout_ms) })
    }

    /// The device the id is bound to, and its port.
    pub fn device(&self) -> Result<(String, u8)> {
        // SAFETY: id valid; verbs is set once bound/resolved (checked non-null).
        unsafe {
            let verbs = (*self.id).verbs;
            if verbs.is_null() {
                return Err(Error::AddressNotAvailable);
            }
            let name = ibv_get_device_name((*verbs).device);
            if name.is_null() {
                return Err(Error::Internal("rdma_cm id device without a name"));
            }
            Ok((CStr::from_ptr(name).to_string_lossy().into_owned(), (*self.id).port_num))
        }
    }

    /// Moves `qp` to `state` with rdma_cm's attributes, tuned by its config.
    pub fn transition(&self, qp: &RcQp, state: ibv_qp_state::Type) -> Result<()> {
        let port_mtu = check_device(self, qp)?;
        transition(self, qp, state, port_mtu)
    }

    /// Active side, route resolved: takes `qp` to INIT and sends the
    /// connection request carrying `private`.
    pub fn connect(&self, qp: &RcQp, private: &[u8]) -> Result<()> {
        self.transition(qp, ibv_qp_state::IBV_QPS_INIT)?;
        let ours = rd_atomic(qp);
        let mut param = conn_param(qp, ours, ours, private);
        // SAFETY: id has a resolved route; param and the private data it
        // points to live for the call.
        check(unsafe { rdma_connect(self.id, &mut param) })
    }

    /// Active side, after `CONNECT_RESPONSE`: takes `qp` to RTS and
    /// completes the handshake.
    pub fn establish(&self, qp: &RcQp) -> Result<()> {
        self.transition(qp, ibv_qp_state::IBV_QPS_RTR)?;
        self.transition(qp, ibv_qp_state::IBV_QPS_RTS)?;
        // SAFETY: id connected (response received); QP in RTS.
        check(unsafe { rdma_establish(self.id) })
    }

    /// Passive side, for the request `req`: takes `qp` to RTS and accepts
    /// with `private` (`ESTABLISHED` follows).
    pub fn accept(&self, qp: &RcQp, req: &Event, private: &[u8]) -> Result<()> {
        self.transition(qp, ibv_qp_state::IBV_QPS_INIT)?;
        self.transition(qp, ibv_qp_state::IBV_QPS_RTR)?;
        self.transition(qp, ibv_qp_state::IBV_QPS_RTS)?;
        let ours = rd_atomic(qp);
        let mut param = conn_param(
            qp,
            ours.min(req.initiator_depth.max(1)),
            ours.min(req.responder_resources.max(1)),
            private,
        );
        // SAFETY: id is an unaccepted request; param lives for the call.
        check(unsafe { rdma_accept(self.id, &mut param) })
    }

    /// Passive side: refuses the request with `private`.
    pub fn reject(&self, private: &[u8]) -> Result<()> {
        let len = private.len().min(MAX_PRIVATE) as u8;
        // SAFETY: id is an unaccepted request; private lives for the call.
        check(unsafe { rdma_reject(self.id, private.as_ptr().cast(), len) })
    }

    /// Starts a disconnect (the QP goes to error; `DISCONNECTED` follows).
    pub fn disconnect(&self) -> Result<()> {
        // SAFETY: id valid; failing on an unconnected id is harmless.
        check(unsafe { rdma_disconnect(self.id) })
    }

    /// Moves the id's future events to `chan`.
    pub fn migrate(&self, chan: &EventChannel) -> Result<()> {
        // SAFETY: id valid; chan valid; the caller acked the id's events.
        check(unsafe { rdma_migrate_id(self.id, chan.ch) })
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: created by rdma_create_id or taken from a CONNECT_REQUEST
        // event; all its events were acked in EventChannel::try_next.
        let rc = unsafe { rdma_destroy_id(self.id) };
        if rc != 0 {
            tracing::warn!(rc, "rdma_destroy_id failed");
        }
    }
}

fn conn_param(qp: &RcQp, responder: u8, initiator: u8, private: &[u8]) -> rdma_conn_param {
    // SAFETY: plain data; zero is valid.
    let mut param: rdma_conn_param = unsafe { std::mem::zeroed() };
    param.qp_num = qp.qp_num();
    param.srq = 1;
    param.responder_resources = responder;
    param.initiator_depth = initiator;
    param.retry_count = qp.config().retry_cnt;
    param.rnr_retry_count = qp.config().rnr_retry;
    if !private.is_empty() {
        param.private_data = private.as_ptr().cast();
        param.private_data_len = private.len().min(MAX_PRIVATE) as u8;
    }
    param
}

/// Moves `qp` to `state` with rdma_cm's attributes, tuned by the QP's config.
fn transition(id: &CmId, qp: &RcQp, state: ibv_qp_state::Type, port_mtu: u32) -> Result<()> {
    // SAFETY: plain data; zero is valid.
    let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
    attr.qp_state = state;
    let mut mask: libc::c_int = 0;
    // SAFETY: id valid; out-pointers valid.
    check(unsafe { rdma_init_qp_attr(id.id, &mut attr, &mut mask) })?;
    let mut mask = mask as u32;
    if state == ibv_qp_state::IBV_QPS_INIT {
        attr.qp_access_flags = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
            | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
            | ibv_access_flags::IBV_ACCESS_REMOTE_READ.0
            | ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0;
        mask |= ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS.0;
    }
    qp.tune(&mut attr, &mut mask, port_mtu);
    qp.modify(&mut attr, mask)
}

/// Checks the QP lives on the device rdma_cm bound the id to; returns the
/// port's active MTU.
fn check_device(id: &CmId, qp: &RcQp) -> Result<u32> {
    let (dev, port) = id.device()?;
    let ctx = qp.context();
    if ctx.name() != dev {
        xfer_core::warn_limited!(cm_device = %dev, qp_device = %ctx.name(), "rdma_cm resolved another device");
        return Err(Error::InvalidArgument(
            "the QP is not on the device rdma_cm resolved the address to",
        ));
    }
    Ok(ctx.query_port(port)?.active_mtu)
}

fn rd_atomic(qp: &RcQp) -> u8 {
    qp.context()
        .query_device()
        .map(|a| a.max_qp_rd_atom.min(a.max_qp_init_rd_atom).min(u32::from(RD_ATOMIC)) as u8)
        .unwrap_or(1)
}
