//! What the `tcp_stream` fuzz target and the corpus generator
//! (`examples/gen_corpus.rs`) must agree on: the layout of a `tcp_stream`
//! input and the deterministic values a stream can name.
//!
//! A `tcp_stream` input is `[setup bits, chunking, stream...]` (see
//! `fuzz_targets/tcp_stream.rs`).

/// Bits of a `tcp_stream` input's first byte: what the endpoint has
/// waiting before the stream arrives.
pub mod setup {
    /// A tagged receive (tag [`super::TAG`], any source) is posted.
    pub const TRECV: u8 = 1;
    /// An untagged receive (any source) is posted.
    pub const RECV: u8 = 2;
    /// Receive and read buffers are [`super::BIG`] bytes, else [`super::SMALL`].
    pub const BIG: u8 = 4;
    /// A rendezvous send of [`super::SEND_LEN`] bytes to the peer is posted (it waits for `Cts` or `Fin`).
    pub const SEND: u8 = 8;
    /// An RMA read from the peer is posted (it waits for `RmaData` and `RmaDone`).
    pub const READ: u8 = 16;
    /// An RMA write to the peer is posted (it waits for `RmaDone`).
    pub const WRITE: u8 = 32;
    /// The harness ends with a reset instead of an orderly close.
    pub const RESET: u8 = 64;
    /// The peer is in the address vector even when no operation needs it.
    pub const KNOWN: u8 = 128;
}

/// Bit of a `tcp_stream` input's second byte: the stream goes over the
/// connection the endpoint opened to the harness (which exists when a
/// `setup` operation needs the peer), not over a new one.
pub const OUTBOUND: u8 = 0x80;

/// Bit of a `tcp_stream` input's second byte: the stream is cut at the
/// first [`SPLIT`]; the part before goes over a new connection, the part
/// after over the endpoint's own connection to the harness, chunks of the
/// two in turns.
pub const BOTH: u8 = 0x40;

/// Where a `BOTH` stream is cut.
pub const SPLIT: &[u8] = b"\xff||\xff";

/// The tag of the tagged receive and send.
pub const TAG: u64 = 7;
/// Small buffers.
pub const SMALL: usize = 64;
/// Big buffers: above the rendezvous threshold.
pub const BIG: usize = 16 << 10;
/// The endpoint's rendezvous threshold in the harness.
pub const RNDV_THRESHOLD: usize = 1024;
/// Length of the rendezvous send.
pub const SEND_LEN: usize = 8 << 10;
/// Where the registered region is mapped (when the address is free).
pub const MR_BASE: u64 = 0x5a5a_0000_0000;
/// Its length.
pub const MR_LEN: usize = 64 << 10;
/// How inputs name its remote key: TCP keys are random, so the harness
/// replaces these 8 bytes (little-endian, as frames carry keys) with the
/// registration's real key before feeding the stream. The bytes spell
/// "m_fo_yek" and match no token (`token(0, 1)` is `1 << 32`: a key of that
/// value had every first rendezvous token replaced too).
pub const MR_KEY: u64 = 0x6b65_795f_6f66_5f6d;

/// The token a fresh endpoint gives the `n`th operation (from 1) of one
/// table — sends; RMA reads and writes; rendezvous receives waiting for
/// pushed data — stored in slot `slot` of it: the slot in the low 32 bits,
/// `n` (the table's generation) in the high (core's `rdm::outstanding`).
pub fn token(slot: u32, n: u32) -> u64 {
    u64::from(slot) | (u64::from(n) << 32)
}
