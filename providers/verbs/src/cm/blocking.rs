//! Blocking connection set-up for tests and tools: listen and accept one
//! connection at a time, or connect and wait. Endpoints drive the
//! non-blocking primitives of the parent module instead.

use std::net::{Ipv4Addr, SocketAddrV4};

use xfer_core::{Error, Result};

use super::{
    CmId, EventChannel, RDMA_CM_EVENT_ADDR_RESOLVED, RDMA_CM_EVENT_CONNECT_REQUEST, RDMA_CM_EVENT_CONNECT_RESPONSE,
    RDMA_CM_EVENT_DISCONNECTED, RDMA_CM_EVENT_ESTABLISHED, RDMA_CM_EVENT_ROUTE_RESOLVED,
};
use crate::qp::RcQp;

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
        id.listen(addr, backlog)?;
        Ok(CmListener { id, chan })
    }

    /// The bound address (with the actual port).
    pub fn local_addr(&self, ip: Ipv4Addr) -> SocketAddrV4 {
        SocketAddrV4::new(ip, self.id.src_port())
    }

    /// The device the listener is bound to (None when bound to a wildcard).
    pub fn device(&self) -> Option<String> {
        self.id.device().ok().map(|(d, _)| d)
    }

    /// Waits up to `timeout_ms` for a connection request, creates its QP with
    /// `make_qp`, takes it to RTS, accepts, and waits for the connection to be
    /// established.
    pub fn accept(&mut self, timeout_ms: i32, make_qp: impl FnOnce() -> Result<RcQp>) -> Result<CmConnection> {
        let req = self.chan.expect(RDMA_CM_EVENT_CONNECT_REQUEST, timeout_ms)?;
        // SAFETY: a CONNECT_REQUEST's new id is ours to own.
        let id = unsafe { CmId::from_request(&req) };
        let qp = match make_qp().and_then(|qp| id.accept(&qp, &req, &[]).map(|()| qp)) {
            Ok(qp) => qp,
            Err(e) => {
                if let Err(r) = id.reject(&[]) {
                    tracing::debug!(error = %r, "rejecting a request we could not accept");
                }
                return Err(e);
            }
        };
        let est = self.chan.expect(RDMA_CM_EVENT_ESTABLISHED, timeout_ms)?;
        if est.id != id.as_ptr() {
            return Err(Error::Protocol(
                "ESTABLISHED for another connection (concurrent requests)",
            ));
        }
        // Give the connection its own channel, so its later events (disconnect)
        // do not interleave with the listener's requests.
        let chan = EventChannel::new()?;
        id.migrate(&chan)?;
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
        id.resolve_addr(None, addr, timeout_ms)?;
        chan.expect(RDMA_CM_EVENT_ADDR_RESOLVED, timeout_ms)?;
        id.resolve_route(timeout_ms)?;
        chan.expect(RDMA_CM_EVENT_ROUTE_RESOLVED, timeout_ms)?;
        let qp = make_qp()?;
        id.connect(&qp, &[])?;
        // Without an rdma_cm-owned QP the active side gets CONNECT_RESPONSE and
        // must move its QP to RTS itself before rdma_establish.
        let mut conn = CmConnection {
            qp,
            id,
            chan,
            connected: false,
        };
        conn.chan.expect(RDMA_CM_EVENT_CONNECT_RESPONSE, timeout_ms)?;
        conn.connected = true;
        conn.id.establish(&conn.qp)?;
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
        self.id.disconnect()?;
        self.chan.expect(RDMA_CM_EVENT_DISCONNECTED, timeout_ms).map(|_| ())
    }
}

impl Drop for CmConnection {
    fn drop(&mut self) {
        if self.connected {
            // A failure (peer already gone) is harmless.
            let _ = self.id.disconnect();
        }
    }
}
