//! Peer events for C (the Rust `Endpoint::peer_event`): a peer joined, or
//! left in order or failing. Off unless `xfer_ep_attr_t.peer_events` (or
//! `XFER_PEER_EVENTS`) asks for a queue.

use std::ffi::c_int;

use xfer_facade::PeerEventKind;

use crate::ep::{ep_of, xfer_ep_t};
use crate::error::{guard, invalid, XFER_EIO};
use crate::{xfer_addr_t, XFER_NAME_MAX};

/// `xfer_peer_event_t.kind`: the peer's first connection with the endpoint
/// is up (either side opened it; libfabric's `FI_CONNECTED`).
pub const XFER_PEER_JOINED: c_int = 1;
/// `xfer_peer_event_t.kind`: the peer's last connection ended in order: it
/// closed its endpoint (what was outstanding to it ended with
/// `XFER_ECONNRESET`; libfabric's `FI_SHUTDOWN`).
pub const XFER_PEER_CLOSED: c_int = 2;
/// `xfer_peer_event_t.kind`: the peer's last connection failed; `err` and
/// `prov_errno` say how, as in the completions of its operations.
pub const XFER_PEER_FAILED: c_int = 3;

/// One peer event (`xfer_ep_peer_event`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct xfer_peer_event_t {
    /// `XFER_PEER_JOINED`, `XFER_PEER_CLOSED` or `XFER_PEER_FAILED`.
    pub kind: c_int,
    /// For `XFER_PEER_FAILED`: the negative `XFER_E*` code of the failure
    /// (`XFER_EHOSTUNREACH`, `XFER_ETIMEDOUT`, ...); else 0.
    pub err: c_int,
    /// For `XFER_PEER_FAILED`: the OS errno behind it, or 0.
    pub prov_errno: c_int,
    /// The peer's address-vector handle, or `XFER_ADDR_UNSPEC` when its
    /// name is not inserted (a peer that connected first).
    pub peer: xfer_addr_t,
    /// Length of `name`.
    pub name_len: usize,
    /// The peer's endpoint name (`xfer_av_insert` takes it).
    pub name: [u8; XFER_NAME_MAX],
}

/// Takes the endpoint's oldest peer event into `*event`, after driving
/// progress once (as `xfer_cq_poll` does).
///
/// Returns 1 when an event was stored, 0 when there is none (or events are
/// off: `xfer_ep_attr_t.peer_events` is 0); `XFER_EBADF`; `XFER_EINVAL`
/// when `event` is NULL. Thread-safe.
///
/// # Safety
/// `event` must be NULL or writable for one `xfer_peer_event_t`.
#[no_mangle]
pub unsafe extern "C" fn xfer_ep_peer_event(ep: *mut xfer_ep_t, event: *mut xfer_peer_event_t) -> c_int {
    guard("xfer_ep_peer_event", || {
        let e = ep_of(ep)?;
        if event.is_null() {
            return Err(invalid("xfer_ep_peer_event: event is NULL"));
        }
        let Some(ev) = e.peer_event()? else { return Ok(0) };
        let (kind, err, prov_errno) = match &ev.kind {
            PeerEventKind::Joined => (XFER_PEER_JOINED, 0, 0),
            PeerEventKind::Closed => (XFER_PEER_CLOSED, 0, 0),
            PeerEventKind::Failed(f) => (XFER_PEER_FAILED, f.code(), crate::cq::prov_errno(f)),
            _ => (XFER_PEER_FAILED, XFER_EIO, 0),
        };
        let bytes = ev.name.as_bytes();
        let mut name = [0u8; XFER_NAME_MAX];
        let len = bytes.len().min(XFER_NAME_MAX);
        name[..len].copy_from_slice(&bytes[..len]);
        let out = xfer_peer_event_t {
            kind,
            err,
            prov_errno,
            peer: ev.peer.0,
            name_len: len,
            name,
        };
        // SAFETY: non-null and writable for one struct by contract.
        unsafe { event.write(out) };
        Ok(1)
    })
}
