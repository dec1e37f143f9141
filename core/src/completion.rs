//! Completion entries: what an operation reports when it ends.

use std::ops::{BitOr, BitOrAssign};

use crate::addr::PeerAddr;
use crate::error::Error;

/// Flags of a completion. Bit values equal libfabric's `FI_*` flags, so the
/// C ABI and the libfabric plug-in pass them through unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Flags(pub u64);

impl Flags {
    /// A message (untagged) operation.
    pub const MSG: Flags = Flags(1 << 1);
    /// An RMA operation.
    pub const RMA: Flags = Flags(1 << 2);
    /// A tagged operation.
    pub const TAGGED: Flags = Flags(1 << 3);
    /// A remote atomic (`FI_ATOMIC`): with `READ` it fetched the old value
    /// (in `data`), with `WRITE` it did not.
    pub const ATOMIC: Flags = Flags(1 << 4);
    /// An RMA read.
    pub const READ: Flags = Flags(1 << 8);
    /// An RMA write.
    pub const WRITE: Flags = Flags(1 << 9);
    /// A receive.
    pub const RECV: Flags = Flags(1 << 10);
    /// A send.
    pub const SEND: Flags = Flags(1 << 11);
    /// The target side of a remote read (`FI_REMOTE_READ`).
    pub const REMOTE_READ: Flags = Flags(1 << 12);
    /// The target side of a remote write (`FI_REMOTE_WRITE`).
    pub const REMOTE_WRITE: Flags = Flags(1 << 13);
    /// The completion carries remote immediate data in `data`.
    pub const REMOTE_CQ_DATA: Flags = Flags(1 << 17);

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        Flags(self.0 | rhs.0)
    }
}

impl BitOrAssign for Flags {
    fn bitor_assign(&mut self, rhs: Flags) {
        self.0 |= rhs.0;
    }
}

/// One completed operation, successful or not (`fi_cq_tagged_entry` plus
/// source address, error and the owned buffer coming back).
///
/// More fields may come (`#[non_exhaustive]`): outside xfer-core, make one
/// with [`Completion::new`] (or take [`Completion::EMPTY`]) and set the
/// public fields.
///
/// ```
/// use xfer_core::{Completion, Error, Flags, PeerAddr};
///
/// let mut c = Completion::new(7, Flags::RECV | Flags::TAGGED, Err(Error::Canceled));
/// c.tag = 42;
/// c.src = PeerAddr(3);
/// assert_eq!((c.context, c.len, c.received_from()), (7, 0, PeerAddr(3)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Completion {
    /// The user context given when the operation was posted.
    pub context: u64,
    /// What kind of operation this was.
    pub flags: Flags,
    /// Bytes transferred (for a receive: bytes written into the buffer).
    pub len: usize,
    /// The message tag (receives of tagged messages); at the target of RMA
    /// (`REMOTE_WRITE`, `REMOTE_READ`), the remote key of the region
    /// accessed where the provider knows it (TCP), else 0.
    pub tag: u64,
    /// Immediate data, valid when `flags` has [`Flags::REMOTE_CQ_DATA`].
    pub data: u64,
    /// The sender of a received message, or [`PeerAddr::UNSPEC`] when it is
    /// not in the address vector; for a send or an RMA operation, the peer
    /// it was posted to (what the per-peer bound counts by).
    pub src: PeerAddr,
    /// `Ok` or the error that ended the operation.
    pub result: Result<(), Error>,
    /// The owned buffer given to the operation, handed back; `None` for raw
    /// operations.
    pub buf: Option<Vec<u8>>,
}

impl Completion {
    /// An empty entry, for sizing the slice given to `poll`.
    pub const EMPTY: Completion = Completion {
        context: 0,
        flags: Flags(0),
        len: 0,
        tag: 0,
        data: 0,
        src: PeerAddr::UNSPEC,
        result: Ok(()),
        buf: None,
    };
}

impl Completion {
    /// An entry for the operation with `context`, of kind `flags`, ended
    /// with `result`; the other fields as in [`Completion::EMPTY`].
    #[inline]
    pub const fn new(context: u64, flags: Flags, result: Result<(), Error>) -> Completion {
        Completion {
            context,
            flags,
            result,
            ..Completion::EMPTY
        }
    }

    /// The source address libfabric reports (`fi_cq_readfrom`): the sender
    /// of a receive or of a peer's write with data, [`PeerAddr::UNSPEC`]
    /// for the endpoint's own sends and RMA (whose `src` names their peer).
    pub fn received_from(&self) -> PeerAddr {
        if self.flags.contains(Flags::RECV) || self.flags.contains(Flags::REMOTE_WRITE) {
            self.src
        } else {
            PeerAddr::UNSPEC
        }
    }
}

impl Default for Completion {
    fn default() -> Self {
        Completion::EMPTY
    }
}
