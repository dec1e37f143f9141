//! Receive-side state: what a connection's inbound bytes are in the middle of,
//! matched rendezvous receives, and unexpected messages.

use xfer_core::unstable::addr::{Address, PeerAddr};
use xfer_core::unstable::provider::RecvOp;
use xfer_core::unstable::rdm::Unexpected;

/// What the bytes after the current read position of a connection are.
#[derive(Debug, Default)]
pub enum Phase {
    /// The next frame header.
    #[default]
    Header,
    /// The payload of an eager message.
    Eager(EagerRx),
    /// A rendezvous data chunk of `left` more bytes for the receive with this key.
    Data {
        /// Key in the endpoint's rendezvous table.
        key: usize,
        /// Payload bytes of this chunk not yet read.
        left: usize,
    },
    /// The payload of a peer's RMA write into our memory.
    RmaWrite(WriteRx),
    /// The data of a read response for our RMA read with this token
    /// (checked again per chunk: the read may have failed meanwhile).
    ReadData {
        /// The read's token in the endpoint's RMA table.
        token: u64,
        /// Payload bytes not yet read.
        left: usize,
    },
}

/// A peer's RMA write being received (target side).
#[derive(Debug)]
pub struct WriteRx {
    /// The region's remote key.
    pub key: u64,
    /// Target address of the first payload byte.
    pub addr: u64,
    /// Payload length.
    pub len: u64,
    /// Payload bytes consumed so far.
    pub got: u64,
    /// The initiator's token (0: no acknowledgement).
    pub token: u64,
    /// Immediate data for our completion queue.
    pub imm: Option<u64>,
    /// `wire::status` of the checks; not OK means the payload is discarded.
    pub status: u64,
    /// The initiator's name.
    pub peer: Address,
}

/// An eager message being read.
#[derive(Debug)]
pub struct EagerRx {
    /// Whether it is tagged.
    pub tagged: bool,
    /// Its tag (0 when untagged).
    pub tag: u64,
    /// Immediate data.
    pub data: Option<u64>,
    /// Sender's handle at arrival.
    pub src: PeerAddr,
    /// Sender's name, to resolve `src` later if it was not known at arrival.
    pub from: Address,
    /// Message length.
    pub olen: usize,
    /// Payload bytes read so far.
    pub got: usize,
    /// Where the bytes go.
    pub dest: EagerDest,
    /// The sender's token to acknowledge the message with once read whole
    /// (a Delivered frame), if its frame asked for that.
    pub ack: Option<u64>,
}

/// Where an eager payload lands.
#[derive(Debug)]
pub enum EagerDest {
    /// Straight into a matched receive (bytes past its end are discarded).
    Posted(RecvOp),
    /// Into a buffer that joins the unexpected queue when complete.
    Unexpected(Vec<u8>),
}

/// What a TCP endpoint needs to fetch an unexpected rendezvous message once
/// a receive matches it: where the request came from and the sender's token.
#[derive(Debug)]
pub struct RtsTicket {
    /// The connection it came on (key, serial).
    pub conn: (usize, u64),
    /// The sender's token to echo in the clear-to-send.
    pub token: u64,
    /// The sender asked for a Delivered frame once the data is placed.
    pub ack: bool,
}

/// A message that arrived before a receive matched it (core's entry, with
/// the TCP rendezvous ticket).
pub type Unexp = Unexpected<RtsTicket>;

/// A matched rendezvous receive waiting for its data.
#[derive(Debug)]
pub struct RndvRx {
    /// The receive.
    pub recv: RecvOp,
    /// The connection the data comes on, and its serial.
    pub conn: (usize, u64),
    /// Message length the sender announced.
    pub olen: usize,
    /// Bytes the receiver accepted (at most its buffer).
    pub accepted: usize,
    /// Bytes arrived so far.
    pub got: usize,
    /// The sender's token to acknowledge the placed data with (a Delivered
    /// frame), if its Rts asked for that.
    pub ack: Option<u64>,
    /// Tag (0 when untagged).
    pub tag: u64,
    /// Immediate data.
    pub data: Option<u64>,
    /// Sender's handle.
    pub src: PeerAddr,
}
