//! Messages that arrived before a receive for them: what is kept, and what
//! keeping it costs.

use crate::addr::Address;

/// A message no receive was waiting for, as [`super::Receives`] keeps it.
///
/// `H` is what the transport needs to fetch a rendezvous message's data
/// once a receive matches (TCP: the sender's token; verbs: the remote
/// buffer and key).
#[derive(Debug)]
pub enum Unexpected<H> {
    /// An eager message, kept whole (at most the eager limit).
    Eager {
        /// Sender's name.
        from: Address,
        /// The connection it came on (key, serial), whose eager credit it holds.
        conn: (usize, u64),
        /// Immediate data.
        data: Option<u64>,
        /// The payload.
        payload: Vec<u8>,
    },
    /// A rendezvous request: only its header is kept, so an unexpected large
    /// message costs no payload memory.
    Rts {
        /// Sender's name.
        from: Address,
        /// Message length.
        len: u64,
        /// Immediate data.
        data: Option<u64>,
        /// The transport's handle on the data.
        handle: H,
    },
}

impl<H> Unexpected<H> {
    /// The sender's name (to find its handle once it is inserted).
    pub fn from(&self) -> &Address {
        match self {
            Unexpected::Eager { from, .. } | Unexpected::Rts { from, .. } => from,
        }
    }

    /// Length and immediate data, for a peek.
    pub fn describe(&self) -> (usize, Option<u64>) {
        match self {
            Unexpected::Eager { data, payload, .. } => (payload.len(), *data),
            Unexpected::Rts { len, data, .. } => (usize::try_from(*len).unwrap_or(usize::MAX), *data),
        }
    }

    /// Payload bytes held (what eager credit counts).
    pub fn payload_len(&self) -> usize {
        match self {
            Unexpected::Eager { payload, .. } => payload.len(),
            Unexpected::Rts { .. } => 0,
        }
    }
}

/// What an endpoint's unexpected messages hold, kept as they come and go.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// Messages held (claimed ones included until they are received).
    pub entries: usize,
    /// Eager payload bytes held.
    pub payload: usize,
    /// What they cost in memory: each entry's slot in the matcher plus its
    /// payload's allocation.
    pub bytes: usize,
}

impl Held {
    /// Counts `msg` in, whose entry costs `slot` bytes besides its payload.
    pub(crate) fn add<H>(&mut self, msg: &Unexpected<H>, slot: usize) {
        self.entries += 1;
        self.payload += msg.payload_len();
        self.bytes += slot + alloc_of(msg);
    }

    /// Counts `msg` out (it was received, or dropped).
    pub(crate) fn remove<H>(&mut self, msg: &Unexpected<H>, slot: usize) {
        self.entries = self.entries.saturating_sub(1);
        self.payload = self.payload.saturating_sub(msg.payload_len());
        self.bytes = self.bytes.saturating_sub(slot + alloc_of(msg));
    }
}

/// The heap bytes `msg` owns.
fn alloc_of<H>(msg: &Unexpected<H>) -> usize {
    match msg {
        Unexpected::Eager { payload, .. } => payload.capacity(),
        Unexpected::Rts { .. } => 0,
    }
}
