//! Connection set-up through librdmacm (`rdma_cm`): listen on an IP address,
//! connect to `IP:port`, accept. IP addressing makes this work alike on
//! InfiniBand (IPoIB), RoCE and iWARP.
//!
//! The QP is the caller's own ([`RcQp`], created on the domain's PD, CQs and SRQ
//! through the `make_qp` closure), not one made by `rdma_create_qp`: librdmacm
//! would require a PD of its own device context. So the state transitions are
//! done here, "manual QP" style: `rdma_init_qp_attr` gives the attributes for
//! each state (address vector, PSNs, remote QP number), [`RcQp`] overrides them
//! with the configured path MTU, RNR and retry settings, and the active side
//! finishes with `rdma_establish` after the `CONNECT_RESPONSE` event.
//!
//! Not handled yet (the endpoint layer's job, next): both peers connecting to
//! each other at once. The endpoint must pick one connection deterministically
//! (e.g. keep the one initiated by the lower address, reject or drop the other)
//! and carry its own address in the private data to tell them apart.

use std::ffi::CStr;
use std::net::{Ipv4Addr, SocketAddrV4};

use rdma_sys::{
    ibv_access_flags, ibv_get_device_name, ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_state, rdma_accept, rdma_ack_cm_event,
    rdma_bind_addr, rdma_cm_event, rdma_cm_event_type, rdma_cm_id, rdma_conn_param, rdma_connect,
    rdma_create_event_channel, rdma_create_id, rdma_destroy_event_channel, rdma_destroy_id, rdma_disconnect,
    rdma_establish, rdma_event_channel, rdma_event_str, rdma_get_cm_event, rdma_get_src_port, rdma_init_qp_attr,
    rdma_listen, rdma_migrate_id, rdma_port_space, rdma_reject, rdma_resolve_addr, rdma_resolve_route,
};
use xfer_core::{Error, Result};

use crate::qp::RcQp;
use crate::sys::{check, last_os_error};

/// Responder resources / initiator depth asked for (outstanding RDMA READs).
const RD_ATOMIC: u8 = 16;

/// An rdma_cm event channel, destroyed on drop. Its fd is non-blocking.
struct EventChannel {
    ch: *mut rdma_event_channel,
}

/// The fields of an event this module uses, copied before the event is acked.
struct Event {
    kind: rdma_cm_event_type::Type,
    status: i32,
    id: *mut rdma_cm_id,
    responder_resources: u8,
    initiator_depth: u8,
}

fn event_name(kind: rdma_cm_event_type::Type) -> String {
    // SAFETY: rdma_event_str returns a static string for any value.
    let s = unsafe { rdma_event_str(kind) };
    if s.is_null() {
        return format!("event {kind}");
    }
    // SAFETY: non-null static NUL-terminated string.
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

impl EventChannel {
    fn new() -> Result<EventChannel> {
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

    fn fd(&self) -> i32 {
        // SAFETY: ch valid for our lifetime.
        unsafe { (*self.ch).fd }
    }

    /// The next event, waiting up to `timeout_ms`. The event is acknowledged
    /// before returning (its fields are copied).
    fn next(&self, timeout_ms: i32) -> Result<Event> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(timeout_ms.max(0) as u64);
        loop {
            let mut ev: *mut rdma_cm_event = std::ptr::null_mut();
            // SAFETY: ch valid; ev a valid out-pointer. Non-blocking fd: EAGAIN if none.
            if unsafe { rdma_get_cm_event(self.ch, &mut ev) } == 0 {
                // SAFETY: ev is a valid event until acked; conn params are the
                // valid union member for the connection events we read them from.
                let out = unsafe {
                    let e = &*ev;
                    let conn = e.param.conn;
                    Event {
                        kind: e.event,
                        status: e.status,
                        id: e.id,
                        responder_resources: conn.responder_resources,
                        initiator_depth: conn.initiator_depth,
                    }
                };
                // SAFETY: ev came from rdma_get_cm_event and is acked once.
                unsafe { rdma_ack_cm_event(ev) };
                return Ok(out);
            }
            let e = last_os_error();
            if e != Error::Os(libc::EAGAIN) {
                return Err(e);
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

    /// The next event, which must be `want` (for `id`, if given).
    fn expect(&self, want: rdma_cm_event_type::Type, timeout_ms: i32) -> Result<Event> {
        let ev = self.next(timeout_ms)?;
        if ev.kind != want || ev.status != 0 {
            tracing::warn!(
                got = %event_name(ev.kind),
                want = %event_name(want),
                status = ev.status,
                "unexpected rdma_cm event"
            );
            return Err(match ev.kind {
                rdma_cm_event_type::RDMA_CM_EVENT_REJECTED | rdma_cm_event_type::RDMA_CM_EVENT_UNREACHABLE => {
                    Error::Os(libc::ECONNREFUSED)
                }
                _ if ev.status < 0 => Error::Os(-ev.status),
                _ => Error::Protocol("unexpected rdma_cm event"),
            });
        }
        Ok(ev)
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: created by rdma_create_event_channel; every id on it was
        // destroyed or migrated first (field order of the owners).
        unsafe { rdma_destroy_event_channel(self.ch) };
    }
}

/// An `rdma_cm_id`, destroyed on drop.
struct CmId {
    id: *mut rdma_cm_id,
}

impl CmId {
    fn new(chan: &EventChannel) -> Result<CmId> {
        let mut id = std::ptr::null_mut();
        // SAFETY: chan valid; id a valid out-pointer.
        check(unsafe { rdma_create_id(chan.ch, &mut id, std::ptr::null_mut(), rdma_port_space::RDMA_PS_TCP) })?;
        Ok(CmId { id })
    }

    /// The device the id is bound to, and its port.
    fn device(&self) -> Result<(String, u8)> {
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
}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: created by rdma_create_id or handed over by a CONNECT_REQUEST
        // event; all its events were acked in EventChannel::next.
        let rc = unsafe { rdma_destroy_id(self.id) };
        if rc != 0 {
            tracing::warn!(rc, "rdma_destroy_id failed");
        }
    }
}

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
            | ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
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
        tracing::warn!(cm_device = %dev, qp_device = %ctx.name(), "rdma_cm resolved another device");
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

/// A passive rdma_cm endpoint listening for connections.
pub struct CmListener {
    // Dropped before the channel.
    id: CmId,
    chan: EventChannel,
}

impl CmListener {
    /// Binds to `addr` (port 0: an ephemeral port) and listens.
    pub fn bind(addr: SocketAddrV4, backlog: i32) -> Result<CmListener> {
        let chan = EventChannel::new()?;
        let id = CmId::new(&chan)?;
        let mut sa = sockaddr(addr);
        // SAFETY: id valid; sa is a sockaddr_in that lives for the call.
        check(unsafe { rdma_bind_addr(id.id, (&mut sa as *mut libc::sockaddr_in).cast()) })?;
        // SAFETY: id bound.
        check(unsafe { rdma_listen(id.id, backlog) })?;
        Ok(CmListener { id, chan })
    }

    /// The bound address (with the actual port).
    pub fn local_addr(&self, ip: Ipv4Addr) -> SocketAddrV4 {
        // SAFETY: id valid and bound.
        let port = u16::from_be(unsafe { rdma_get_src_port(self.id.id) });
        SocketAddrV4::new(ip, port)
    }

    /// The device the listener is bound to (None when bound to a wildcard).
    pub fn device(&self) -> Option<String> {
        self.id.device().ok().map(|(d, _)| d)
    }

    /// Waits up to `timeout_ms` for a connection request, creates its QP with
    /// `make_qp`, takes it to RTS, accepts, and waits for the connection to be
    /// established.
    pub fn accept(&mut self, timeout_ms: i32, make_qp: impl FnOnce() -> Result<RcQp>) -> Result<CmConnection> {
        let req = self
            .chan
            .expect(rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST, timeout_ms)?;
        let id = CmId { id: req.id };
        let setup = (|| {
            let qp = make_qp()?;
            let port_mtu = check_device(&id, &qp)?;
            transition(&id, &qp, ibv_qp_state::IBV_QPS_INIT, port_mtu)?;
            transition(&id, &qp, ibv_qp_state::IBV_QPS_RTR, port_mtu)?;
            transition(&id, &qp, ibv_qp_state::IBV_QPS_RTS, port_mtu)?;
            Ok(qp)
        })();
        let qp = match setup {
            Ok(qp) => qp,
            Err(e) => {
                // SAFETY: id is a connection request id not yet accepted.
                unsafe { rdma_reject(id.id, std::ptr::null(), 0) };
                return Err(e);
            }
        };
        let ours = rd_atomic(&qp);
        // SAFETY: plain data; zero is valid.
        let mut param: rdma_conn_param = unsafe { std::mem::zeroed() };
        param.qp_num = qp.qp_num();
        param.srq = 1;
        param.responder_resources = ours.min(req.initiator_depth.max(1));
        param.initiator_depth = ours.min(req.responder_resources.max(1));
        param.retry_count = qp.config().retry_cnt;
        param.rnr_retry_count = qp.config().rnr_retry;
        // SAFETY: id valid; param lives for the call.
        check(unsafe { rdma_accept(id.id, &mut param) })?;
        let est = self
            .chan
            .expect(rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED, timeout_ms)?;
        if est.id != id.id {
            return Err(Error::Protocol(
                "ESTABLISHED for another connection (concurrent requests)",
            ));
        }
        // Give the connection its own channel, so its later events (disconnect)
        // do not interleave with the listener's requests.
        let chan = EventChannel::new()?;
        // SAFETY: id valid; chan valid; no unacked events on id.
        check(unsafe { rdma_migrate_id(id.id, chan.ch) })?;
        Ok(CmConnection {
            qp,
            id,
            chan,
            connected: true,
        })
    }
}

/// A connected RC QP and its rdma_cm id; disconnects on drop.
pub struct CmConnection {
    // Field order is drop order after Drop::drop: QP, id, channel.
    qp: RcQp,
    id: CmId,
    chan: EventChannel,
    connected: bool,
}

impl CmConnection {
    /// Resolves `addr`, creates the QP with `make_qp` on the device rdma_cm
    /// resolved, and connects (each step waits at most `timeout_ms`).
    pub fn connect(
        addr: SocketAddrV4,
        timeout_ms: i32,
        make_qp: impl FnOnce() -> Result<RcQp>,
    ) -> Result<CmConnection> {
        let chan = EventChannel::new()?;
        let id = CmId::new(&chan)?;
        let mut dst = sockaddr(addr);
        // SAFETY: id valid; dst lives for the call (librdmacm copies it).
        check(unsafe {
            rdma_resolve_addr(
                id.id,
                std::ptr::null_mut(),
                (&mut dst as *mut libc::sockaddr_in).cast(),
                timeout_ms,
            )
        })?;
        chan.expect(rdma_cm_event_type::RDMA_CM_EVENT_ADDR_RESOLVED, timeout_ms)?;
        // SAFETY: id has a resolved address.
        check(unsafe { rdma_resolve_route(id.id, timeout_ms) })?;
        chan.expect(rdma_cm_event_type::RDMA_CM_EVENT_ROUTE_RESOLVED, timeout_ms)?;
        let qp = make_qp()?;
        let port_mtu = check_device(&id, &qp)?;
        transition(&id, &qp, ibv_qp_state::IBV_QPS_INIT, port_mtu)?;
        let ours = rd_atomic(&qp);
        // SAFETY: plain data; zero is valid.
        let mut param: rdma_conn_param = unsafe { std::mem::zeroed() };
        param.qp_num = qp.qp_num();
        param.srq = 1;
        param.responder_resources = ours;
        param.initiator_depth = ours;
        param.retry_count = qp.config().retry_cnt;
        param.rnr_retry_count = qp.config().rnr_retry;
        // SAFETY: id has a resolved route; param lives for the call.
        check(unsafe { rdma_connect(id.id, &mut param) })?;
        // Without an rdma_cm-owned QP the active side gets CONNECT_RESPONSE and
        // must move its QP to RTS itself before rdma_establish.
        let mut conn = CmConnection {
            qp,
            id,
            chan,
            connected: false,
        };
        conn.chan
            .expect(rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_RESPONSE, timeout_ms)?;
        conn.connected = true;
        transition(&conn.id, &conn.qp, ibv_qp_state::IBV_QPS_RTR, port_mtu)?;
        transition(&conn.id, &conn.qp, ibv_qp_state::IBV_QPS_RTS, port_mtu)?;
        // SAFETY: id connected (response received); QP in RTS.
        check(unsafe { rdma_establish(conn.id.id) })?;
        Ok(conn)
    }

    /// The queue pair.
    pub fn qp(&self) -> &RcQp {
        &self.qp
    }

    /// The queue pair, for posting.
    pub fn qp_mut(&mut self) -> &mut RcQp {
        &mut self.qp
    }

    /// Disconnects (the QP goes to the error state, outstanding work is
    /// flushed) and waits up to `timeout_ms` for the DISCONNECTED event.
    pub fn disconnect(&mut self, timeout_ms: i32) -> Result<()> {
        if !self.connected {
            return Ok(());
        }
        self.connected = false;
        // SAFETY: id connected.
        check(unsafe { rdma_disconnect(self.id.id) })?;
        self.chan
            .expect(rdma_cm_event_type::RDMA_CM_EVENT_DISCONNECTED, timeout_ms)
            .map(|_| ())
    }
}

impl Drop for CmConnection {
    fn drop(&mut self) {
        if self.connected {
            // SAFETY: id valid; a failure (peer already gone) is harmless.
            unsafe { rdma_disconnect(self.id.id) };
        }
    }
}
