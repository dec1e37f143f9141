//! The versioned TCP wire header.
//!
//! Every frame on a TCP connection starts with a fixed [`HEADER_LEN`]-byte,
//! little-endian header, optionally followed by a payload:
//!
//! ```text
//! offset size field
//! 0      2    magic: bytes 0x78 0x66 ("xf")
//! 2      1    version: 2
//! 3      1    kind
//! 4      4    flags (u32)
//! 8      8    len (u64)
//! 16     8    tag (u64)
//! 24     8    data (u64)
//! 32     8    id (u64)
//! ```
//!
//! How each kind uses the fields is described on the variants of [`Frame`].
//! A field a kind does not use must be zero: [`Frame::emit`] writes zero and
//! [`Frame::parse`] rejects a nonzero value ([`WireError::NonZeroReserved`]).
//! Flag bits other than [`flags::TAGGED`], [`flags::CQ_DATA`] and
//! [`flags::ACK`], or any flag on a kind other than Eager and Rts
//! (`CQ_DATA` on WriteReq excepted), are rejected ([`WireError::BadFlags`]).
//!
//! # Two layers, as in smoltcp's `wire` module
//!
//! - [`Header`] is a view over a byte buffer with getters and setters for the
//!   raw fields. [`Header::new_unchecked`] wraps any buffer; its getters and
//!   setters panic if the buffer is shorter than [`HEADER_LEN`].
//!   [`Header::new_checked`] checks the length once, and after it has passed
//!   no getter or setter panics. It checks nothing else: the fields may hold
//!   any values.
//! - [`Frame`] is the parsed, validated header. [`Frame::parse`] never panics
//!   for any input: short input is [`WireError::Truncated`], and every field
//!   is checked (magic, version, kind, flags, unused fields, lengths). A frame
//!   that parses is canonical: emitting it gives back the same 40 bytes.
//!
//! # Lengths from a peer
//!
//! `len` comes from the network, so it is validated before any buffer is
//! sized or touched: [`Frame::parse`] rejects a Hello name length outside
//! `1..=MAX_NAME` and an Eager length above [`MAX_EAGER`], so
//! [`Frame::payload_len`] of a parsed Hello or Eager frame is safe to
//! allocate or read. The lengths this module cannot judge alone (Rts total
//! length, Cts accepted length, Data chunk offset and length) must be checked
//! by the caller against its own state (the posted receive buffer, the Cts it
//! granted) before any byte of payload is read or copied.

use std::fmt;

/// Length in bytes of every frame header.
pub const HEADER_LEN: usize = 40;

/// The wire version this module speaks.
pub const VERSION: u8 = 2;

/// The largest payload of an Eager frame; bigger messages go by rendezvous.
pub const MAX_EAGER: u64 = 1 << 20;

/// The largest endpoint name a Hello frame may carry.
pub const MAX_NAME: u64 = crate::name::MAX_LEN as u64;

/// Eager credit each side of a new connection starts with (bytes): what
/// either may send as Eager frames before the peer grants more with Credit
/// frames. Room for one largest default eager message (64 KiB) and its
/// header, twice.
pub const CREDIT_INIT: u64 = 128 << 10;

/// What an Eager frame of `len` payload bytes costs of the sender's credit
/// (an Rts costs `eager_cost(0)`): its payload plus what its unexpected
/// entry costs the receiver, as on every transport
/// (`xfer_core::unstable::rdm::credit`), so that a flood of empty messages
/// or of requests to send is bounded too.
#[inline]
pub fn eager_cost(len: u64) -> u64 {
    xfer_core::unstable::rdm::credit::cost(len)
}

/// The magic field as read by [`Header::magic`]: the bytes `0x78 0x66`
/// (`"xf"`) read little-endian.
pub const MAGIC: u16 = u16::from_le_bytes(*b"xf");

/// The first word of a valid Eager header (magic, version, kind), read
/// little-endian: one comparison finds the data path's frame.
const EAGER_LEAD: u32 = MAGIC as u32 | (VERSION as u32) << 16 | (kind::EAGER as u32) << 24;

/// Frame kinds: the values of the `kind` field.
pub mod kind {
    /// First frame on every connection, from the connecting side; the
    /// sender's endpoint name follows.
    pub const HELLO: u8 = 1;
    /// The accepting side's answer to a Hello meant for it; no payload.
    pub const HELLO_ACK: u8 = 10;
    /// A whole message; its payload follows.
    pub const EAGER: u8 = 2;
    /// Rendezvous request-to-send; no payload.
    pub const RTS: u8 = 3;
    /// Rendezvous clear-to-send; no payload.
    pub const CTS: u8 = 4;
    /// A rendezvous payload chunk; the chunk follows.
    pub const DATA: u8 = 5;
    /// RMA write request; (immediate data and) the payload follow.
    pub const WRITE_REQ: u8 = 6;
    /// RMA read request; no payload.
    pub const READ_REQ: u8 = 7;
    /// RMA read response; the data follows when the status is 0.
    pub const READ_RESP: u8 = 8;
    /// Eager credit returned to the sender; no payload.
    pub const CREDIT: u8 = 11;
    /// RMA write acknowledgement; no payload.
    pub const WRITE_ACK: u8 = 9;
    /// Progress probe: the peer's next progress call answers Pong; no payload.
    pub const PING: u8 = 12;
    /// The answer to a Ping; no payload.
    pub const PONG: u8 = 13;
    /// An acceptor with a job key asks the connecting side to prove it; no payload.
    pub const CHALLENGE: u8 = 14;
    /// The connecting side's answer to a Challenge; the MAC follows.
    pub const PROOF: u8 = 15;
    /// The receiver has a message whose Eager or Rts frame asked for an
    /// acknowledgement; no payload.
    pub const DELIVERED: u8 = 16;
}

/// Length of a Proof's payload: an HMAC-SHA-256.
pub const PROOF_LEN: u64 = 32;

pub use xfer_core::unstable::mr::keys::status;

/// Bits of the `flags` field (valid on Eager and Rts only).
pub mod flags {
    /// The message is tagged: the `tag` field holds its tag.
    pub const TAGGED: u32 = 1;
    /// The message carries immediate data in the `data` field.
    pub const CQ_DATA: u32 = 2;
    /// The sender completes its send when a Delivered frame says the
    /// receiver has the message (transmit- and delivery-complete); an
    /// Eager frame's `id` then holds the sender's token.
    pub const ACK: u32 = 4;
    /// Every defined bit.
    pub const ALL: u32 = TAGGED | CQ_DATA | ACK;
}

/// Field offsets within the header.
mod field {
    pub type Field = core::ops::Range<usize>;

    pub const MAGIC: Field = 0..2;
    pub const VERSION: usize = 2;
    pub const KIND: usize = 3;
    /// Magic, version and kind together.
    pub const LEAD: Field = 0..4;
    pub const FLAGS: Field = 4..8;
    pub const LEN: Field = 8..16;
    pub const TAG: Field = 16..24;
    pub const DATA: Field = 24..32;
    pub const ID: Field = 32..40;
}

/// Why bytes are not a valid frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// Fewer than [`HEADER_LEN`] bytes.
    Truncated,
    /// The magic bytes are not `"xf"`.
    BadMagic,
    /// The version is not [`VERSION`].
    UnsupportedVersion(u8),
    /// The kind is not one of [`kind`].
    UnknownKind(u8),
    /// A flag bit that is undefined, or not valid for this kind, is set.
    BadFlags,
    /// A field this kind does not use is not zero.
    NonZeroReserved,
    /// The length is out of range for this kind.
    BadLength,
    /// An RMA response status that is not one of [`status`].
    BadStatus,
}

impl WireError {
    /// A short human-readable description.
    pub fn as_str(&self) -> &'static str {
        match self {
            WireError::Truncated => "truncated frame header",
            WireError::BadMagic => "bad frame magic",
            WireError::UnsupportedVersion(_) => "unsupported wire version",
            WireError::UnknownKind(_) => "unknown frame kind",
            WireError::BadFlags => "invalid frame flags",
            WireError::NonZeroReserved => "unused frame field is not zero",
            WireError::BadLength => "frame length out of range",
            WireError::BadStatus => "unknown RMA status",
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::UnsupportedVersion(v) => write!(f, "{} {}", self.as_str(), v),
            WireError::UnknownKind(k) => write!(f, "{} {}", self.as_str(), k),
            _ => f.write_str(self.as_str()),
        }
    }
}

impl std::error::Error for WireError {}

/// Checked view over header bytes.
///
/// See the [module documentation](self) for when its accessors may panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

fn read_u16(buf: &[u8], range: field::Field) -> u16 {
    let mut b = [0u8; 2];
    b.copy_from_slice(&buf[range]);
    u16::from_le_bytes(b)
}

fn read_u32(buf: &[u8], range: field::Field) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[range]);
    u32::from_le_bytes(b)
}

fn read_u64(buf: &[u8], range: field::Field) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[range]);
    u64::from_le_bytes(b)
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps a buffer without checking its length.
    ///
    /// Getters and setters panic if the buffer is shorter than
    /// [`HEADER_LEN`]; use [`Header::new_checked`] for untrusted input.
    pub fn new_unchecked(buffer: T) -> Self {
        Header { buffer }
    }

    /// Wraps a buffer after checking it holds at least [`HEADER_LEN`] bytes.
    ///
    /// Only the length is checked; the field values may be anything.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let header = Self::new_unchecked(buffer);
        header.check_len()?;
        Ok(header)
    }

    /// Checks that the buffer holds at least [`HEADER_LEN`] bytes.
    pub fn check_len(&self) -> Result<(), WireError> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(WireError::Truncated)
        } else {
            Ok(())
        }
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The magic field, read little-endian ([`MAGIC`] when valid).
    pub fn magic(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::MAGIC)
    }

    /// The version field.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }

    /// The kind field (one of [`kind`] when valid).
    pub fn kind(&self) -> u8 {
        self.buffer.as_ref()[field::KIND]
    }

    /// The flags field (bits of [`flags`] when valid).
    pub fn flags(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::FLAGS)
    }

    /// The len field.
    pub fn len(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::LEN)
    }

    /// Whether the len field is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The tag field.
    pub fn tag(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::TAG)
    }

    /// The data field.
    pub fn data(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::DATA)
    }

    /// The id field.
    pub fn id(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::ID)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    /// Sets the magic field (little-endian).
    pub fn set_magic(&mut self, value: u16) {
        self.buffer.as_mut()[field::MAGIC].copy_from_slice(&value.to_le_bytes());
    }

    /// Sets the version field.
    pub fn set_version(&mut self, value: u8) {
        self.buffer.as_mut()[field::VERSION] = value;
    }

    /// Sets the kind field.
    pub fn set_kind(&mut self, value: u8) {
        self.buffer.as_mut()[field::KIND] = value;
    }

    /// Sets the flags field.
    pub fn set_flags(&mut self, value: u32) {
        self.buffer.as_mut()[field::FLAGS].copy_from_slice(&value.to_le_bytes());
    }

    /// Sets the len field.
    pub fn set_len(&mut self, value: u64) {
        self.buffer.as_mut()[field::LEN].copy_from_slice(&value.to_le_bytes());
    }

    /// Sets the tag field.
    pub fn set_tag(&mut self, value: u64) {
        self.buffer.as_mut()[field::TAG].copy_from_slice(&value.to_le_bytes());
    }

    /// Sets the data field.
    pub fn set_data(&mut self, value: u64) {
        self.buffer.as_mut()[field::DATA].copy_from_slice(&value.to_le_bytes());
    }

    /// Sets the id field.
    pub fn set_id(&mut self, value: u64) {
        self.buffer.as_mut()[field::ID].copy_from_slice(&value.to_le_bytes());
    }
}

/// A parsed frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// First frame on every connection, from the connecting side. The
    /// sender's endpoint name (`name_len` bytes, `1..=MAX_NAME`) follows.
    /// `to` is the nonce of the name the sender dialled: an endpoint
    /// accepts only a Hello carrying its own nonce, so nothing addressed to
    /// an earlier incarnation at the same address reaches it.
    ///
    /// Wire: `len` = name_len; `data` = to; no flags; tag, id zero.
    Hello {
        /// Length of the endpoint name that follows.
        name_len: u8,
        /// The nonce of the destination's endpoint name.
        to: u64,
    },
    /// The accepting side's answer to a Hello that named it; the first frame
    /// it writes on the connection. The connecting side writes nothing but
    /// its Hello before this arrives.
    ///
    /// Wire: `data` = the acceptor's nonce (equal to the Hello's `to`); no
    /// flags; len, tag, id zero.
    HelloAck {
        /// The accepting endpoint's nonce.
        nonce: u64,
    },
    /// A whole message; `len` payload bytes (at most [`MAX_EAGER`]) follow.
    ///
    /// Wire: flags [`flags::TAGGED`] iff `tag` is `Some`, [`flags::CQ_DATA`]
    /// iff `data` is `Some`, [`flags::ACK`] iff `ack` is `Some`; tag, data
    /// (zero when absent), len; id = the `ack` token (zero when absent).
    Eager {
        /// The tag of a tagged message, `None` if untagged.
        tag: Option<u64>,
        /// Immediate data, if any.
        data: Option<u64>,
        /// Payload length.
        len: u64,
        /// The sender's token when it waits for a [`Frame::Delivered`]
        /// once the receiver has read the message.
        ack: Option<u64>,
    },
    /// Rendezvous request-to-send; no payload.
    ///
    /// Wire: flags, tag and data as Eager, and [`flags::ACK`] iff `ack`;
    /// `len` = total message length; `id` = token.
    Rts {
        /// The tag of a tagged message, `None` if untagged.
        tag: Option<u64>,
        /// Immediate data, if any.
        data: Option<u64>,
        /// Total message length.
        len: u64,
        /// The sender's token for this message.
        token: u64,
        /// The sender waits for a [`Frame::Delivered`] before it completes
        /// the send.
        ack: bool,
    },
    /// Rendezvous clear-to-send; no payload.
    ///
    /// Wire: `id` = token, `tag` = rx_token, `len`; no flags; data zero.
    Cts {
        /// The sender's token, echoed from the Rts.
        token: u64,
        /// The receiver's token, to put in the Data frames.
        rx_token: u64,
        /// The number of bytes the receiver accepts.
        len: u64,
    },
    /// A rendezvous payload chunk; `len` payload bytes follow.
    ///
    /// Wire: `id` = rx_token, `tag` = offset, `len`; no flags; data zero.
    Data {
        /// The receiver's token, from the Cts.
        rx_token: u64,
        /// Byte offset of this chunk within the message.
        offset: u64,
        /// Chunk length.
        len: u64,
    },
    /// RMA write of `len` bytes at `addr` in the region `key`. With `imm`
    /// (flag [`flags::CQ_DATA`]) 8 bytes of immediate data (LE) come first,
    /// then the `len` payload bytes.
    ///
    /// Wire: flags `CQ_DATA`?; `len`; `tag` = addr; `data` = key; `id` =
    /// token (0: no acknowledgement wanted, as for inject-write).
    WriteReq {
        /// The target's remote key.
        key: u64,
        /// Target address of the first byte.
        addr: u64,
        /// Payload length.
        len: u64,
        /// The initiator's token, echoed in the WriteAck; 0 for none.
        token: u64,
        /// Whether 8 bytes of immediate data precede the payload.
        imm: bool,
    },
    /// RMA read of `len` bytes at `addr` in the region `key`; no payload.
    ///
    /// Wire: no flags; `len`; `tag` = addr; `data` = key; `id` = token.
    ReadReq {
        /// The target's remote key.
        key: u64,
        /// Target address of the first byte.
        addr: u64,
        /// Bytes to read.
        len: u64,
        /// The initiator's token, echoed in the ReadResp.
        token: u64,
    },
    /// RMA read response: `len` bytes follow (0 unless `status` is OK).
    ///
    /// Wire: no flags; `len`; `tag` = status; data zero; `id` = token.
    ReadResp {
        /// The initiator's token, from the ReadReq.
        token: u64,
        /// One of [`status`].
        status: u64,
        /// Payload length.
        len: u64,
    },
    /// RMA write acknowledgement: the write was applied (status OK) or refused.
    ///
    /// Wire: no flags; `len` zero; `tag` = status; data zero; `id` = token.
    WriteAck {
        /// The initiator's token, from the WriteReq.
        token: u64,
        /// One of [`status`].
        status: u64,
    },
    /// Eager credit granted to the peer: it may send `bytes` more of Eager
    /// frames (counted by [`eager_cost`]) on this connection.
    ///
    /// Wire: no flags; `len` = bytes (non-zero); tag, data, id zero.
    Credit {
        /// Credit granted, in bytes.
        bytes: u64,
    },
    /// Asks the peer's progress engine for a sign of life: sent on a
    /// connection with operations waiting for the peer that has been silent
    /// for half the progress timeout (`EndpointAttr::progress_timeout_ms`).
    ///
    /// Wire: no flags; len, tag, data, id zero.
    Ping,
    /// The answer to a Ping, written by the peer's next progress call.
    ///
    /// Wire: no flags; len, tag, data, id zero.
    Pong,
    /// From an acceptor with a job key, instead of HelloAck: 16 random bytes
    /// the connecting side must MAC with the key.
    ///
    /// Wire: `data` = bytes 0..8 of the challenge, `tag` = bytes 8..16 (LE);
    /// no flags; len, id zero.
    Challenge {
        /// The challenge.
        nonce: [u8; 16],
    },
    /// The connecting side's answer to a Challenge: [`PROOF_LEN`] bytes of
    /// HMAC-SHA-256 follow (docs/PROTOCOL.md, "Admission").
    ///
    /// Wire: `len` = [`PROOF_LEN`]; no flags; tag, data, id zero.
    Proof,
    /// The receiver has the message of an Eager frame or Rts that carried
    /// [`flags::ACK`]: an Eager payload read whole (into the matched
    /// receive, or kept as unexpected), or every accepted rendezvous byte
    /// placed. The sender's send completes now. When a rendezvous receive
    /// accepted nothing, the Cts (`len` 0) says so instead and no Delivered
    /// follows.
    ///
    /// Wire: `id` = the sender's token, from the Rts; no flags; len, tag,
    /// data zero.
    Delivered {
        /// The sender's token, echoed from the Rts.
        token: u64,
    },
}

/// Turns a field guarded by a flag into an option; an unflagged field must be zero.
fn optional(present: bool, value: u64) -> Result<Option<u64>, WireError> {
    match (present, value) {
        (true, v) => Ok(Some(v)),
        (false, 0) => Ok(None),
        (false, _) => Err(WireError::NonZeroReserved),
    }
}

/// Requires every given field to be zero.
fn zero(fields: &[u64]) -> Result<(), WireError> {
    if fields.iter().all(|&v| v == 0) {
        Ok(())
    } else {
        Err(WireError::NonZeroReserved)
    }
}

/// Requires the flags to be a subset of `allowed`.
fn check_flags(value: u32, allowed: u32) -> Result<(), WireError> {
    if value & !allowed == 0 {
        Ok(())
    } else {
        Err(WireError::BadFlags)
    }
}

/// The flags word for an optional tag and optional immediate data.
fn tag_data_flags(tag: Option<u64>, data: Option<u64>) -> u32 {
    let mut value = 0;
    if tag.is_some() {
        value |= flags::TAGGED;
    }
    if data.is_some() {
        value |= flags::CQ_DATA;
    }
    value
}

/// Writes an Eager header's kind and fields (magic and version aside).
#[inline(always)]
fn emit_eager(h: &mut Header<&mut [u8; HEADER_LEN]>, tag: Option<u64>, data: Option<u64>, len: u64, ack: Option<u64>) {
    h.set_kind(kind::EAGER);
    h.set_flags(tag_data_flags(tag, data) | if ack.is_some() { flags::ACK } else { 0 });
    h.set_len(len);
    h.set_tag(tag.unwrap_or(0));
    h.set_data(data.unwrap_or(0));
    h.set_id(ack.unwrap_or(0));
}

impl Frame {
    /// Parses and validates a header from the first [`HEADER_LEN`] bytes of
    /// `bytes` (extra bytes are ignored).
    ///
    /// Never panics. Checks, in this order: length ([`WireError::Truncated`]),
    /// magic, version, kind, flags, unused fields, then the length field.
    ///
    /// Inlined with the Eager frame's checks, the data path's one frame: its
    /// magic, version and kind are one comparison of the header's first
    /// word, and every other frame goes through the out-of-line rest.
    #[inline]
    pub fn parse(bytes: &[u8]) -> Result<Frame, WireError> {
        let h = Header::new_checked(bytes)?;
        if read_u32(h.buffer, field::LEAD) == EAGER_LEAD {
            return Self::parse_eager(&h);
        }
        Self::parse_any(&h)
    }

    /// [`parse`](Self::parse) of a checked header, any kind.
    #[inline(never)]
    fn parse_any(h: &Header<&[u8]>) -> Result<Frame, WireError> {
        if h.magic() != MAGIC {
            return Err(WireError::BadMagic);
        }
        if h.version() != VERSION {
            return Err(WireError::UnsupportedVersion(h.version()));
        }
        let fl = h.flags();
        match h.kind() {
            kind::HELLO => {
                check_flags(fl, 0)?;
                zero(&[h.tag(), h.id()])?;
                if !(1..=MAX_NAME).contains(&h.len()) {
                    return Err(WireError::BadLength);
                }
                let name_len = u8::try_from(h.len()).map_err(|_| WireError::BadLength)?;
                Ok(Frame::Hello { name_len, to: h.data() })
            }
            kind::HELLO_ACK => {
                check_flags(fl, 0)?;
                zero(&[h.len(), h.tag(), h.id()])?;
                Ok(Frame::HelloAck { nonce: h.data() })
            }
            kind::EAGER => Self::parse_eager(h),
            kind::RTS => {
                check_flags(fl, flags::ALL)?;
                let tag = optional(fl & flags::TAGGED != 0, h.tag())?;
                let data = optional(fl & flags::CQ_DATA != 0, h.data())?;
                Ok(Frame::Rts {
                    tag,
                    data,
                    len: h.len(),
                    token: h.id(),
                    ack: fl & flags::ACK != 0,
                })
            }
            kind::DELIVERED => {
                check_flags(fl, 0)?;
                zero(&[h.len(), h.tag(), h.data()])?;
                Ok(Frame::Delivered { token: h.id() })
            }
            kind::CTS => {
                check_flags(fl, 0)?;
                zero(&[h.data()])?;
                Ok(Frame::Cts {
                    token: h.id(),
                    rx_token: h.tag(),
                    len: h.len(),
                })
            }
            kind::DATA => {
                check_flags(fl, 0)?;
                zero(&[h.data()])?;
                Ok(Frame::Data {
                    rx_token: h.id(),
                    offset: h.tag(),
                    len: h.len(),
                })
            }
            kind::WRITE_REQ => {
                check_flags(fl, flags::CQ_DATA)?;
                Ok(Frame::WriteReq {
                    key: h.data(),
                    addr: h.tag(),
                    len: h.len(),
                    token: h.id(),
                    imm: fl & flags::CQ_DATA != 0,
                })
            }
            kind::READ_REQ => {
                check_flags(fl, 0)?;
                Ok(Frame::ReadReq {
                    key: h.data(),
                    addr: h.tag(),
                    len: h.len(),
                    token: h.id(),
                })
            }
            kind::READ_RESP => {
                check_flags(fl, 0)?;
                zero(&[h.data()])?;
                if h.tag() > status::MAX {
                    return Err(WireError::BadStatus);
                }
                if h.tag() != status::OK && !h.is_empty() {
                    return Err(WireError::BadLength);
                }
                Ok(Frame::ReadResp {
                    token: h.id(),
                    status: h.tag(),
                    len: h.len(),
                })
            }
            kind::WRITE_ACK => {
                check_flags(fl, 0)?;
                zero(&[h.data(), h.len()])?;
                if h.tag() > status::MAX {
                    return Err(WireError::BadStatus);
                }
                Ok(Frame::WriteAck {
                    token: h.id(),
                    status: h.tag(),
                })
            }
            kind::CREDIT => {
                check_flags(fl, 0)?;
                zero(&[h.tag(), h.data(), h.id()])?;
                if h.is_empty() {
                    return Err(WireError::BadLength);
                }
                Ok(Frame::Credit { bytes: h.len() })
            }
            kind::CHALLENGE => {
                check_flags(fl, 0)?;
                zero(&[h.len(), h.id()])?;
                let mut nonce = [0u8; 16];
                nonce[..8].copy_from_slice(&h.data().to_le_bytes());
                nonce[8..].copy_from_slice(&h.tag().to_le_bytes());
                Ok(Frame::Challenge { nonce })
            }
            kind::PROOF => {
                check_flags(fl, 0)?;
                zero(&[h.tag(), h.data(), h.id()])?;
                if h.len() != PROOF_LEN {
                    return Err(WireError::BadLength);
                }
                Ok(Frame::Proof)
            }
            kind::PING | kind::PONG => {
                check_flags(fl, 0)?;
                zero(&[h.len(), h.tag(), h.data(), h.id()])?;
                Ok(if h.kind() == kind::PING {
                    Frame::Ping
                } else {
                    Frame::Pong
                })
            }
            other => Err(WireError::UnknownKind(other)),
        }
    }

    /// The checks of an Eager header past its magic, version and kind.
    #[inline(always)]
    fn parse_eager(h: &Header<&[u8]>) -> Result<Frame, WireError> {
        let fl = h.flags();
        check_flags(fl, flags::ALL)?;
        let tag = optional(fl & flags::TAGGED != 0, h.tag())?;
        let data = optional(fl & flags::CQ_DATA != 0, h.data())?;
        let ack = optional(fl & flags::ACK != 0, h.id())?;
        if h.len() > MAX_EAGER {
            return Err(WireError::BadLength);
        }
        Ok(Frame::Eager {
            tag,
            data,
            len: h.len(),
            ack,
        })
    }

    /// Checks the limits [`Frame::parse`] enforces that the type cannot
    /// express: a Hello `name_len` in `1..=MAX_NAME` and an Eager `len` of
    /// at most [`MAX_EAGER`] ([`WireError::BadLength`] otherwise).
    pub fn check(&self) -> Result<(), WireError> {
        match *self {
            Frame::Hello { name_len, .. } if name_len == 0 || u64::from(name_len) > MAX_NAME => {
                Err(WireError::BadLength)
            }
            Frame::Eager { len, .. } if len > MAX_EAGER => Err(WireError::BadLength),
            Frame::ReadResp { status, .. } | Frame::WriteAck { status, .. } if status > status::MAX => {
                Err(WireError::BadStatus)
            }
            Frame::ReadResp { status, len, .. } if status != status::OK && len != 0 => Err(WireError::BadLength),
            Frame::Credit { bytes: 0 } => Err(WireError::BadLength),
            _ => Ok(()),
        }
    }

    /// Writes all [`HEADER_LEN`] bytes of the header; unused fields are zero.
    ///
    /// Does not validate: a frame that fails [`Frame::check`] is written as
    /// is, and the peer's [`Frame::parse`] will reject it.
    pub fn emit(&self, out: &mut [u8; HEADER_LEN]) {
        out.fill(0);
        let mut h = Header::new_unchecked(out);
        h.set_magic(MAGIC);
        h.set_version(VERSION);
        match *self {
            Frame::Hello { name_len, to } => {
                h.set_kind(kind::HELLO);
                h.set_len(u64::from(name_len));
                h.set_data(to);
            }
            Frame::HelloAck { nonce } => {
                h.set_kind(kind::HELLO_ACK);
                h.set_data(nonce);
            }
            Frame::Eager { tag, data, len, ack } => emit_eager(&mut h, tag, data, len, ack),
            Frame::Rts {
                tag,
                data,
                len,
                token,
                ack,
            } => {
                h.set_kind(kind::RTS);
                h.set_flags(tag_data_flags(tag, data) | if ack { flags::ACK } else { 0 });
                h.set_len(len);
                h.set_tag(tag.unwrap_or(0));
                h.set_data(data.unwrap_or(0));
                h.set_id(token);
            }
            Frame::Cts { token, rx_token, len } => {
                h.set_kind(kind::CTS);
                h.set_len(len);
                h.set_tag(rx_token);
                h.set_id(token);
            }
            Frame::Data { rx_token, offset, len } => {
                h.set_kind(kind::DATA);
                h.set_len(len);
                h.set_tag(offset);
                h.set_id(rx_token);
            }
            Frame::WriteReq {
                key,
                addr,
                len,
                token,
                imm,
            } => {
                h.set_kind(kind::WRITE_REQ);
                h.set_flags(if imm { flags::CQ_DATA } else { 0 });
                h.set_len(len);
                h.set_tag(addr);
                h.set_data(key);
                h.set_id(token);
            }
            Frame::ReadReq { key, addr, len, token } => {
                h.set_kind(kind::READ_REQ);
                h.set_len(len);
                h.set_tag(addr);
                h.set_data(key);
                h.set_id(token);
            }
            Frame::ReadResp { token, status, len } => {
                h.set_kind(kind::READ_RESP);
                h.set_len(len);
                h.set_tag(status);
                h.set_id(token);
            }
            Frame::WriteAck { token, status } => {
                h.set_kind(kind::WRITE_ACK);
                h.set_tag(status);
                h.set_id(token);
            }
            Frame::Credit { bytes } => {
                h.set_kind(kind::CREDIT);
                h.set_len(bytes);
            }
            Frame::Challenge { nonce } => {
                h.set_kind(kind::CHALLENGE);
                let (lo, hi) = nonce.split_at(8);
                h.set_data(u64::from_le_bytes(lo.try_into().unwrap_or_default()));
                h.set_tag(u64::from_le_bytes(hi.try_into().unwrap_or_default()));
            }
            Frame::Proof => {
                h.set_kind(kind::PROOF);
                h.set_len(PROOF_LEN);
            }
            Frame::Ping => h.set_kind(kind::PING),
            Frame::Pong => h.set_kind(kind::PONG),
            Frame::Delivered { token } => {
                h.set_kind(kind::DELIVERED);
                h.set_id(token);
            }
        }
    }

    /// The header as a new byte array (see [`Frame::emit`]).
    ///
    /// Always inlined, an Eager header (the data path's, built for every
    /// send) is written field by field in place, without the general `emit`.
    #[inline(always)]
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        match *self {
            Frame::Eager { tag, data, len, ack } => {
                let mut h = Header::new_unchecked(&mut out);
                h.set_magic(MAGIC);
                h.set_version(VERSION);
                emit_eager(&mut h, tag, data, len, ack);
            }
            _ => self.emit(&mut out),
        }
        out
    }

    /// The number of payload bytes that follow this header on the stream:
    /// `name_len` for Hello, `len` for Eager, Data and ReadResp, `len`
    /// plus 8 for a WriteReq with immediate data (saturating), 0 otherwise.
    pub fn payload_len(&self) -> u64 {
        match *self {
            Frame::Hello { name_len, .. } => u64::from(name_len),
            Frame::Eager { len, .. } | Frame::Data { len, .. } | Frame::ReadResp { len, .. } => len,
            Frame::WriteReq { len, imm, .. } => len.saturating_add(if imm { 8 } else { 0 }),
            Frame::Proof => PROOF_LEN,
            Frame::HelloAck { .. }
            | Frame::Rts { .. }
            | Frame::Cts { .. }
            | Frame::ReadReq { .. }
            | Frame::WriteAck { .. }
            | Frame::Credit { .. }
            | Frame::Ping
            | Frame::Pong
            | Frame::Delivered { .. }
            | Frame::Challenge { .. } => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // Golden headers, written out field by field.

    const HELLO: [u8; HEADER_LEN] = [
        0x78, 0x66, 0x02, 0x01, // magic, version, kind = Hello
        0x00, 0x00, 0x00, 0x00, // flags
        0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len = 16
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // tag
        0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, // data = to, nonce 0x0123456789abcdef
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // id
    ];

    const HELLO_ACK: [u8; HEADER_LEN] = [
        0x78, 0x66, 0x02, 0x0a, // magic, version, kind = HelloAck
        0x00, 0x00, 0x00, 0x00, // flags
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // tag
        0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, // data = nonce 0x0123456789abcdef
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // id
    ];

    const EAGER: [u8; HEADER_LEN] = [
        0x78, 0x66, 0x02, 0x02, // magic, version, kind = Eager
        0x03, 0x00, 0x00, 0x00, // flags = TAGGED | CQ_DATA
        0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len = 256
        0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, // tag = 0x0123456789abcdef
        0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // data = 42
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // id
    ];

    const EAGER_PLAIN: [u8; HEADER_LEN] = [
        0x78, 0x66, 0x02, 0x02, // magic, version, kind = Eager
        0x00, 0x00, 0x00, 0x00, // flags = none
        0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, // len = MAX_EAGER
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // tag
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // data
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // id
    ];

    const RTS: [u8; HEADER_LEN] = [
        0x78, 0x66, 0x02, 0x03, // magic, version, kind = Rts
        0x01, 0x00, 0x00, 0x00, // flags = TAGGED
        0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, // len = 1 << 32
        0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // tag = 7
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // data
        0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, // id = token
    ];

    const CTS: [u8; HEADER_LEN] = [
        0x78, 0x66, 0x02, 0x04, // magic, version, kind = Cts
        0x00, 0x00, 0x00, 0x00, // flags
        0x00, 0x00, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, // len = 2 MiB
        0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // tag = rx_token 9
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // data
        0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, // id = token
    ];

    const DATA: [u8; HEADER_LEN] = [
        0x78, 0x66, 0x02, 0x05, // magic, version, kind = Data
        0x00, 0x00, 0x00, 0x00, // flags
        0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, // len = 64 KiB
        0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, // tag = offset 1 MiB
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // data
        0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // id = rx_token 9
    ];

    fn goldens() -> Vec<([u8; HEADER_LEN], Frame)> {
        vec![
            (
                HELLO,
                Frame::Hello {
                    name_len: 16,
                    to: 0x0123_4567_89ab_cdef,
                },
            ),
            (
                HELLO_ACK,
                Frame::HelloAck {
                    nonce: 0x0123_4567_89ab_cdef,
                },
            ),
            (
                EAGER,
                Frame::Eager {
                    tag: Some(0x0123_4567_89ab_cdef),
                    data: Some(42),
                    len: 256,
                    ack: None,
                },
            ),
            (
                EAGER_PLAIN,
                Frame::Eager {
                    tag: None,
                    data: None,
                    len: MAX_EAGER,
                    ack: None,
                },
            ),
            (
                RTS,
                Frame::Rts {
                    tag: Some(7),
                    data: None,
                    len: 1 << 32,
                    token: 0x8877_6655_4433_2211,
                    ack: false,
                },
            ),
            (
                CTS,
                Frame::Cts {
                    token: 0x8877_6655_4433_2211,
                    rx_token: 9,
                    len: 2 << 20,
                },
            ),
            (
                DATA,
                Frame::Data {
                    rx_token: 9,
                    offset: 1 << 20,
                    len: 64 << 10,
                },
            ),
        ]
    }

    #[test]
    fn golden_parse_and_emit() {
        for (bytes, frame) in goldens() {
            assert_eq!(Frame::parse(&bytes), Ok(frame), "{frame:?}");
            assert_eq!(frame.to_bytes(), bytes, "{frame:?}");
            let mut out = [0xffu8; HEADER_LEN];
            frame.emit(&mut out);
            assert_eq!(out, bytes, "emit overwrites every byte: {frame:?}");
        }
    }

    #[test]
    fn golden_header_getters() {
        let h = Header::new_checked(&RTS[..]).unwrap();
        assert_eq!(h.magic(), MAGIC);
        assert_eq!(h.magic().to_le_bytes(), *b"xf");
        assert_eq!(h.version(), VERSION);
        assert_eq!(h.kind(), kind::RTS);
        assert_eq!(h.flags(), flags::TAGGED);
        assert_eq!(h.len(), 1 << 32);
        assert!(!h.is_empty());
        assert_eq!(h.tag(), 7);
        assert_eq!(h.data(), 0);
        assert_eq!(h.id(), 0x8877_6655_4433_2211);
        assert_eq!(h.into_inner(), &RTS[..]);
    }

    #[test]
    fn header_setters() {
        let mut buf = [0u8; HEADER_LEN];
        let mut h = Header::new_checked(&mut buf[..]).unwrap();
        h.set_magic(MAGIC);
        h.set_version(VERSION);
        h.set_kind(kind::CTS);
        h.set_flags(0);
        h.set_len(2 << 20);
        h.set_tag(9);
        h.set_data(0);
        h.set_id(0x8877_6655_4433_2211);
        assert_eq!(buf, CTS);
    }

    #[test]
    fn payload_len() {
        assert_eq!(Frame::Hello { name_len: 28, to: 1 }.payload_len(), 28);
        assert_eq!(Frame::HelloAck { nonce: 1 }.payload_len(), 0);
        assert_eq!(
            Frame::Eager {
                tag: None,
                data: None,
                len: 5,
                ack: None,
            }
            .payload_len(),
            5
        );
        assert_eq!(
            Frame::Rts {
                tag: None,
                data: None,
                len: 5,
                token: 1,
                ack: true,
            }
            .payload_len(),
            0
        );
        assert_eq!(
            Frame::Cts {
                token: 1,
                rx_token: 2,
                len: 5
            }
            .payload_len(),
            0
        );
        assert_eq!(
            Frame::Data {
                rx_token: 2,
                offset: 0,
                len: 5
            }
            .payload_len(),
            5
        );
    }

    #[test]
    fn truncated() {
        for n in 0..HEADER_LEN {
            assert_eq!(Frame::parse(&HELLO[..n]), Err(WireError::Truncated), "{n} bytes");
            assert_eq!(Header::new_checked(&HELLO[..n]).err(), Some(WireError::Truncated));
        }
        // Extra bytes after the header are ignored.
        let mut long = HELLO.to_vec();
        long.extend_from_slice(b"trailing payload");
        assert_eq!(
            Frame::parse(&long),
            Ok(Frame::Hello {
                name_len: 16,
                to: 0x0123_4567_89ab_cdef
            })
        );
    }

    fn modified(base: [u8; HEADER_LEN], at: usize, bytes: &[u8]) -> [u8; HEADER_LEN] {
        let mut b = base;
        b[at..at + bytes.len()].copy_from_slice(bytes);
        b
    }

    #[test]
    fn bad_magic() {
        assert_eq!(Frame::parse(&modified(HELLO, 0, b"fx")), Err(WireError::BadMagic));
        assert_eq!(Frame::parse(&modified(HELLO, 1, &[0])), Err(WireError::BadMagic));
        assert_eq!(Frame::parse(&[0u8; HEADER_LEN]), Err(WireError::BadMagic));
    }

    #[test]
    fn unsupported_version() {
        assert_eq!(
            Frame::parse(&modified(EAGER, 2, &[0])),
            Err(WireError::UnsupportedVersion(0))
        );
        assert_eq!(
            Frame::parse(&modified(EAGER, 2, &[1])),
            Err(WireError::UnsupportedVersion(1)),
            "version 1 charged nothing for requests to send"
        );
        assert_eq!(
            Frame::parse(&modified(EAGER, 2, &[3])),
            Err(WireError::UnsupportedVersion(3))
        );
    }

    #[test]
    fn unknown_kind() {
        for k in [0u8, 17, 0x80, 0xff] {
            assert_eq!(Frame::parse(&modified(EAGER, 3, &[k])), Err(WireError::UnknownKind(k)));
        }
    }

    #[test]
    fn bad_flags() {
        // Undefined bits on Eager and Rts.
        assert_eq!(Frame::parse(&modified(EAGER, 4, &[0x0f])), Err(WireError::BadFlags));
        assert_eq!(Frame::parse(&modified(RTS, 7, &[0x80])), Err(WireError::BadFlags));
        assert_eq!(Frame::parse(&modified(RTS, 4, &[0x09])), Err(WireError::BadFlags));
        assert_eq!(
            Frame::parse(&modified(EAGER_PLAIN, 4, &[0x08])),
            Err(WireError::BadFlags)
        );
        // Any flag on the other kinds.
        for base in [HELLO, HELLO_ACK, CTS, DATA] {
            assert_eq!(Frame::parse(&modified(base, 4, &[0x01])), Err(WireError::BadFlags));
            assert_eq!(Frame::parse(&modified(base, 4, &[0x02])), Err(WireError::BadFlags));
        }
    }

    #[test]
    fn delivery_acknowledgement() {
        let rts = modified(RTS, 4, &[0x05]);
        assert_eq!(
            Frame::parse(&rts),
            Ok(Frame::Rts {
                tag: Some(7),
                data: None,
                len: 1 << 32,
                token: 0x8877_6655_4433_2211,
                ack: true,
            })
        );
        // An Eager frame's token is its id, present only with ACK.
        let eager = modified(modified(EAGER_PLAIN, 4, &[0x04]), 32, &[9]);
        assert_eq!(
            Frame::parse(&eager),
            Ok(Frame::Eager {
                tag: None,
                data: None,
                len: MAX_EAGER,
                ack: Some(9),
            })
        );
        let d = Frame::Delivered { token: 0x0102 }.to_bytes();
        assert_eq!(&d[..8], &[0x78, 0x66, 0x02, kind::DELIVERED, 0, 0, 0, 0]);
        assert_eq!(&d[32..40], &0x0102u64.to_le_bytes());
        assert!(d[8..32].iter().all(|&b| b == 0));
        assert_eq!(Frame::parse(&d), Ok(Frame::Delivered { token: 0x0102 }));
        assert_eq!(Frame::Delivered { token: 1 }.payload_len(), 0);
        for at in [8, 16, 24] {
            assert_eq!(Frame::parse(&modified(d, at, &[1])), Err(WireError::NonZeroReserved));
        }
        assert_eq!(Frame::parse(&modified(d, 4, &[4])), Err(WireError::BadFlags));
    }

    #[test]
    fn credit_frames() {
        let credit = Frame::Credit { bytes: 1 << 20 }.to_bytes();
        assert_eq!(&credit[..4], &[0x78, 0x66, 0x02, kind::CREDIT]);
        assert_eq!(&credit[8..16], &(1u64 << 20).to_le_bytes());
        assert!(credit[4..8].iter().chain(&credit[16..]).all(|&b| b == 0));
        assert_eq!(Frame::parse(&credit), Ok(Frame::Credit { bytes: 1 << 20 }));
        assert_eq!(Frame::parse(&modified(credit, 8, &[0; 8])), Err(WireError::BadLength));
        assert_eq!(Frame::Credit { bytes: 0 }.check(), Err(WireError::BadLength));
        for at in [16, 24, 32] {
            assert_eq!(
                Frame::parse(&modified(credit, at, &[1])),
                Err(WireError::NonZeroReserved)
            );
        }
        assert_eq!(Frame::parse(&modified(credit, 4, &[1])), Err(WireError::BadFlags));
        assert_eq!(eager_cost(0), xfer_core::unstable::rdm::credit::ENTRY_COST);
        assert_eq!(eager_cost(u64::MAX), u64::MAX);
    }

    #[test]
    fn challenge_and_proof() {
        let nonce: [u8; 16] = std::array::from_fn(|i| i as u8 + 1);
        let c = Frame::Challenge { nonce }.to_bytes();
        assert_eq!(&c[..4], &[0x78, 0x66, 0x02, kind::CHALLENGE]);
        assert_eq!(&c[24..32], &nonce[..8], "data: the first half");
        assert_eq!(&c[16..24], &nonce[8..], "tag: the second half");
        assert_eq!(Frame::parse(&c), Ok(Frame::Challenge { nonce }));
        let p = Frame::Proof.to_bytes();
        assert_eq!(Frame::parse(&p), Ok(Frame::Proof));
        assert_eq!(Frame::Proof.payload_len(), PROOF_LEN);
        assert_eq!(Frame::parse(&modified(p, 8, &[31])), Err(WireError::BadLength));
        assert!(
            Frame::parse(&modified(c, 8, &[1])).is_err(),
            "a challenge has no length"
        );
    }

    #[test]
    fn ping_and_pong_are_bare_headers() {
        for (f, k) in [(Frame::Ping, kind::PING), (Frame::Pong, kind::PONG)] {
            let b = f.to_bytes();
            assert_eq!(&b[..4], &[0x78, 0x66, 0x02, k]);
            assert!(b[4..].iter().all(|&x| x == 0), "{f:?}: {b:?}");
            assert_eq!(Frame::parse(&b), Ok(f));
            assert_eq!(f.payload_len(), 0);
            // Any non-zero field is refused.
            for at in [4, 8, 16, 24, 32] {
                assert!(Frame::parse(&modified(b, at, &[1])).is_err(), "{f:?} byte {at}");
            }
        }
    }

    #[test]
    fn nonzero_reserved() {
        // Hello: tag, id unused. HelloAck: len, tag, id unused.
        for at in [16, 32] {
            assert_eq!(
                Frame::parse(&modified(HELLO, at, &[1])),
                Err(WireError::NonZeroReserved)
            );
        }
        for at in [8, 16, 32] {
            assert_eq!(
                Frame::parse(&modified(HELLO_ACK, at, &[1])),
                Err(WireError::NonZeroReserved)
            );
        }
        // Eager: id unused; tag without TAGGED; data without CQ_DATA.
        assert_eq!(
            Frame::parse(&modified(EAGER, 39, &[1])),
            Err(WireError::NonZeroReserved)
        );
        assert_eq!(
            Frame::parse(&modified(EAGER_PLAIN, 16, &[1])),
            Err(WireError::NonZeroReserved)
        );
        assert_eq!(
            Frame::parse(&modified(EAGER_PLAIN, 31, &[1])),
            Err(WireError::NonZeroReserved)
        );
        // Rts without CQ_DATA: data unused.
        assert_eq!(Frame::parse(&modified(RTS, 24, &[1])), Err(WireError::NonZeroReserved));
        // Rts untagged: tag unused.
        assert_eq!(Frame::parse(&modified(RTS, 4, &[0])), Err(WireError::NonZeroReserved));
        // Cts and Data: data unused.
        assert_eq!(Frame::parse(&modified(CTS, 24, &[1])), Err(WireError::NonZeroReserved));
        assert_eq!(Frame::parse(&modified(DATA, 24, &[1])), Err(WireError::NonZeroReserved));
    }

    #[test]
    fn bad_length() {
        assert_eq!(Frame::parse(&modified(HELLO, 8, &[0])), Err(WireError::BadLength));
        assert_eq!(Frame::parse(&modified(HELLO, 8, &[65])), Err(WireError::BadLength));
        assert_eq!(
            Frame::parse(&modified(HELLO, 8, &[64])),
            Ok(Frame::Hello {
                name_len: 64,
                to: 0x0123_4567_89ab_cdef
            })
        );
        assert_eq!(
            Frame::parse(&modified(HELLO, 8, &[1])),
            Ok(Frame::Hello {
                name_len: 1,
                to: 0x0123_4567_89ab_cdef
            })
        );
        // 256 + 1: the low byte alone would look valid.
        assert_eq!(Frame::parse(&modified(HELLO, 8, &[1, 1])), Err(WireError::BadLength));
        assert_eq!(Frame::parse(&modified(HELLO, 15, &[0x80])), Err(WireError::BadLength));
        // Eager: MAX_EAGER + 1.
        assert_eq!(Frame::parse(&modified(EAGER_PLAIN, 8, &[1])), Err(WireError::BadLength));
        assert_eq!(
            Frame::parse(&modified(EAGER_PLAIN, 8, &[0xff; 8])),
            Err(WireError::BadLength)
        );
        // Rts, Cts and Data accept any length.
        let max = u64::MAX.to_le_bytes();
        assert!(Frame::parse(&modified(RTS, 8, &max)).is_ok());
        assert!(Frame::parse(&modified(CTS, 8, &max)).is_ok());
        assert!(Frame::parse(&modified(DATA, 8, &max)).is_ok());
    }

    #[test]
    fn rma_frames_golden() {
        let w = Frame::WriteReq {
            key: 0x0102,
            addr: 0x7f00_0000_1000,
            len: 4096,
            token: 9,
            imm: true,
        };
        let b = w.to_bytes();
        assert_eq!(b[3], kind::WRITE_REQ);
        assert_eq!(b[4], flags::CQ_DATA as u8);
        assert_eq!(&b[16..24], &0x7f00_0000_1000u64.to_le_bytes());
        assert_eq!(&b[24..32], &0x0102u64.to_le_bytes());
        assert_eq!(Frame::parse(&b), Ok(w));
        assert_eq!(w.payload_len(), 4096 + 8);
        // Tagged flag is not valid on RMA frames.
        assert_eq!(Frame::parse(&modified(b, 4, &[0x03])), Err(WireError::BadFlags));
        let ack = Frame::WriteAck { token: 9, status: 5 }.to_bytes();
        assert_eq!(Frame::parse(&ack), Err(WireError::BadStatus));
        let ack = Frame::WriteAck { token: 9, status: 3 }.to_bytes();
        assert_eq!(Frame::parse(&modified(ack, 8, &[1])), Err(WireError::NonZeroReserved));
        let bad = Frame::ReadResp {
            token: 1,
            status: status::UNKNOWN_KEY,
            len: 4,
        };
        assert_eq!(Frame::parse(&bad.to_bytes()), Err(WireError::BadLength));
        assert_eq!(bad.check(), Err(WireError::BadLength));
    }

    #[test]
    fn check_matches_parse_limits() {
        assert_eq!(Frame::Hello { name_len: 0, to: 0 }.check(), Err(WireError::BadLength));
        assert_eq!(Frame::Hello { name_len: 65, to: 0 }.check(), Err(WireError::BadLength));
        assert_eq!(Frame::Hello { name_len: 64, to: 0 }.check(), Ok(()));
        assert_eq!(
            Frame::Eager {
                tag: None,
                data: None,
                len: MAX_EAGER + 1,
                ack: None,
            }
            .check(),
            Err(WireError::BadLength)
        );
        assert_eq!(
            Frame::Eager {
                tag: None,
                data: None,
                len: MAX_EAGER,
                ack: None,
            }
            .check(),
            Ok(())
        );
        // What emit writes for an invalid frame, parse rejects.
        let bad = Frame::Hello { name_len: 0, to: 7 };
        assert_eq!(Frame::parse(&bad.to_bytes()), Err(WireError::BadLength));
    }

    #[test]
    fn error_text() {
        let all = [
            WireError::Truncated,
            WireError::BadMagic,
            WireError::UnsupportedVersion(9),
            WireError::UnknownKind(9),
            WireError::BadFlags,
            WireError::NonZeroReserved,
            WireError::BadLength,
            WireError::BadStatus,
        ];
        let mut texts: Vec<&str> = all.iter().map(|e| e.as_str()).collect();
        assert!(texts.iter().all(|t| !t.is_empty()));
        texts.sort_unstable();
        texts.dedup();
        assert_eq!(texts.len(), all.len(), "each error has its own text");
        assert_eq!(WireError::UnsupportedVersion(9).as_str(), "unsupported wire version");
        assert_eq!(
            WireError::UnsupportedVersion(9).to_string(),
            "unsupported wire version 9"
        );
        assert_eq!(WireError::BadMagic.to_string(), "bad frame magic");
        let boxed: Box<dyn std::error::Error> = Box::new(WireError::BadFlags);
        assert_eq!(boxed.to_string(), WireError::BadFlags.as_str());
    }

    fn arb_frame() -> impl Strategy<Value = Frame> {
        let opt = || proptest::option::of(any::<u64>());
        prop_oneof![
            (1..=MAX_NAME as u8, any::<u64>()).prop_map(|(name_len, to)| Frame::Hello { name_len, to }),
            any::<u64>().prop_map(|nonce| Frame::HelloAck { nonce }),
            (1..=u64::MAX).prop_map(|bytes| Frame::Credit { bytes }),
            Just(Frame::Ping),
            Just(Frame::Proof),
            any::<[u8; 16]>().prop_map(|nonce| Frame::Challenge { nonce }),
            Just(Frame::Pong),
            (opt(), opt(), 0..=MAX_EAGER, opt()).prop_map(|(tag, data, len, ack)| Frame::Eager { tag, data, len, ack }),
            (opt(), opt(), any::<u64>(), any::<u64>(), any::<bool>()).prop_map(|(tag, data, len, token, ack)| {
                Frame::Rts {
                    tag,
                    data,
                    len,
                    token,
                    ack,
                }
            }),
            any::<u64>().prop_map(|token| Frame::Delivered { token }),
            (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(token, rx_token, len)| Frame::Cts {
                token,
                rx_token,
                len
            }),
            (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(rx_token, offset, len)| Frame::Data {
                rx_token,
                offset,
                len
            }),
            (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>(), any::<bool>()).prop_map(
                |(key, addr, len, token, imm)| Frame::WriteReq {
                    key,
                    addr,
                    len,
                    token,
                    imm
                }
            ),
            (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>())
                .prop_map(|(key, addr, len, token)| { Frame::ReadReq { key, addr, len, token } }),
            (any::<u64>(), any::<u64>()).prop_map(|(token, len)| Frame::ReadResp {
                token,
                status: status::OK,
                len
            }),
            (any::<u64>(), 1..=status::MAX).prop_map(|(token, status)| Frame::ReadResp { token, status, len: 0 }),
            (any::<u64>(), 0..=status::MAX).prop_map(|(token, status)| Frame::WriteAck { token, status }),
        ]
    }

    /// Parsing never panics, and whatever parses is canonical.
    fn parse_is_canonical(bytes: &[u8]) -> Result<(), TestCaseError> {
        if let Ok(frame) = Frame::parse(bytes) {
            prop_assert!(bytes.len() >= HEADER_LEN);
            prop_assert_eq!(&frame.to_bytes()[..], &bytes[..HEADER_LEN]);
            prop_assert_eq!(frame.check(), Ok(()));
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn roundtrip(frame in arb_frame()) {
            prop_assert_eq!(frame.check(), Ok(()));
            let bytes = frame.to_bytes();
            prop_assert_eq!(Frame::parse(&bytes), Ok(frame));
            let mut out = [0x5au8; HEADER_LEN];
            frame.emit(&mut out);
            prop_assert_eq!(out, bytes);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            parse_is_canonical(&bytes)?;
        }

        /// Valid headers with a few bytes changed, so parsing gets past the
        /// magic and version checks.
        #[test]
        fn mutated_headers_never_panic(
            frame in arb_frame(),
            edits in proptest::collection::vec((0..HEADER_LEN, any::<u8>()), 0..4),
            tail in proptest::collection::vec(any::<u8>(), 0..20),
            cut in 0..=HEADER_LEN + 20,
        ) {
            let mut bytes = frame.to_bytes().to_vec();
            for (at, value) in edits {
                bytes[at] = value;
            }
            bytes.extend_from_slice(&tail);
            bytes.truncate(cut);
            parse_is_canonical(&bytes)?;
        }
    }
}
