//! One RC connection of the transport, and what its rdma_cm private data
//! carries: which endpoint it is meant for (the nonce of the address
//! dialled, so a stale name never reaches a newer endpoint on a reused
//! port) and the receive slots each side grants the other.

use std::collections::VecDeque;
use std::time::Instant;

use xfer_core::unstable::rdm::transport::Cause;

use super::credit::SlotCredit;
use crate::cm::CmId;
use crate::qp::RcQp;

const MAGIC: [u8; 2] = *b"XV";
const VERSION: u8 = 1;
/// A connection request.
pub const KIND_REQUEST: u8 = 1;
/// Its acceptance.
pub const KIND_ACCEPT: u8 = 2;
/// Bytes of the private data.
pub const PRIVATE_LEN: usize = 16;

/// The private data of a request (`nonce`: of the endpoint dialled) or an
/// acceptance (`nonce`: ours), with the slots granted to the other side.
pub fn private(kind: u8, grant: u16, nonce: u64) -> [u8; PRIVATE_LEN] {
    let mut p = [0u8; PRIVATE_LEN];
    p[..2].copy_from_slice(&MAGIC);
    p[2] = VERSION;
    p[3] = kind;
    p[4..6].copy_from_slice(&grant.to_le_bytes());
    p[8..16].copy_from_slice(&nonce.to_le_bytes());
    p
}

/// Parses a peer's private data (the CM may pad it): kind, grant, nonce;
/// `None` for anything else, or a grant of nothing. Never panics.
pub fn parse_private(p: &[u8]) -> Option<(u8, u16, u64)> {
    if p.len() < PRIVATE_LEN || p[..2] != MAGIC || p[2] != VERSION {
        return None;
    }
    let grant = u16::from_le_bytes([p[4], p[5]]);
    let mut n = [0u8; 8];
    n.copy_from_slice(&p[8..16]);
    (grant > 0).then_some((p[3], grant, u64::from_le_bytes(n)))
}

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Dialled: waiting for `ADDR_RESOLVED`.
    Resolving,
    /// Dialled: waiting for `ROUTE_RESOLVED`.
    Routing,
    /// Dialled: request sent, waiting for `CONNECT_RESPONSE`.
    Connecting,
    /// Accepted: waiting for `ESTABLISHED` (or the peer's first frame).
    Accepting,
    /// Carrying frames.
    Ready,
    /// Ended; its `Down` is not reported yet.
    Dead(Cause),
}

/// One connection.
pub struct Conn {
    /// Where it is.
    pub state: State,
    /// The engine knows it (dialled, or reported up): its end is reported.
    pub reported: bool,
    /// Slot credit both ways (set once both grants are known).
    pub credit: SlotCredit,
    /// What we reserved of the SRQ for it (0: nothing yet).
    pub grant: u16,
    /// The nonce of the endpoint dialled (dialled connections).
    pub to: u64,
    /// Send slots its work requests hold, oldest first.
    pub slots: VecDeque<u32>,
    /// Frames taken from the SRQ that the engine did not want yet: buffer
    /// index and length.
    pub held: VecDeque<(u32, u32)>,
    /// In the transport's list of connections owing a credit frame.
    pub owing: bool,
    /// In the transport's list of connections whose frames' buffers wait
    /// to be posted again.
    pub reposting: bool,
    /// RDMA READs in flight on its QP.
    pub reads: u32,
    /// RDMA WRITEs (the user's RMA) in flight on its QP.
    pub writes: u32,
    /// RDMA READs its QP may have in flight (the initiator depth rdma_cm
    /// negotiated, read back when it comes up).
    pub rd_depth: u32,
    /// Created once the route is known (dialled) or at once (accepted).
    pub qp: Option<RcQp>,
    // Dropped after the QP: destroys the rdma_cm id.
    /// Its rdma_cm id.
    pub id: Option<CmId>,
}

impl Conn {
    /// A connection in `state` on `id`.
    pub fn new(id: CmId, state: State, reported: bool) -> Conn {
        Conn {
            state,
            reported,
            credit: SlotCredit::default(),
            grant: 0,
            to: 0,
            slots: VecDeque::new(),
            held: VecDeque::new(),
            owing: false,
            reposting: false,
            reads: 0,
            writes: 0,
            rd_depth: 1,
            qp: None,
            id: Some(id),
        }
    }

    /// Whether it is being made.
    pub fn opening(&self) -> bool {
        !matches!(self.state, State::Ready | State::Dead(_))
    }
}

/// An ended connection's QP (in the error state) and id, kept until the
/// device has flushed every send that holds a send slot and every RDMA
/// READ, so no slot goes back to the pool while the device may still read
/// it and no receive buffer back to the engine while it may still write it.
pub struct Grave {
    /// The QP.
    pub qp: Option<RcQp>,
    /// Send slots its flushed work requests still hold.
    pub slots: VecDeque<u32>,
    /// RDMA READs not flushed yet.
    pub reads: u32,
    /// RDMA WRITEs not flushed yet (the device still reads their buffers).
    pub writes: u32,
    /// When it ended.
    pub since: Instant,
    /// Its rdma_cm id, dropped after the QP.
    pub _id: Option<CmId>,
}

impl Grave {
    /// Whether the device holds nothing of ours through it any more.
    pub fn done(&self) -> bool {
        self.slots.is_empty() && self.reads == 0 && self.writes == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_data_round_trips_and_foreign_data_is_refused() {
        let p = private(KIND_REQUEST, 37, 0xfeed);
        assert!(p.len() <= crate::cm::MAX_PRIVATE);
        assert_eq!(parse_private(&p), Some((KIND_REQUEST, 37, 0xfeed)));
        let mut padded = p.to_vec();
        padded.extend([0; 40]);
        assert_eq!(parse_private(&padded), Some((KIND_REQUEST, 37, 0xfeed)));
        assert_eq!(parse_private(&p[..15]), None);
        assert_eq!(parse_private(&private(KIND_ACCEPT, 0, 1)), None, "no slots granted");
        let mut other = p;
        other[2] = 9;
        assert_eq!(parse_private(&other), None, "another version");
        let mut magic = p;
        magic[0] ^= 1;
        assert_eq!(parse_private(&magic), None, "another magic");
    }
}
