//! The engine's frame header: one fixed 56-byte layout for every kind, in
//! little-endian order. Transports carry it as an opaque header; a header
//! that does not parse is a protocol error that ends the connection.
//!
//! | bytes  | field  | meaning                                              |
//! |--------|--------|------------------------------------------------------|
//! | 0      | kind   | [`Kind`]                                             |
//! | 1      | flags  | [`TAGGED`], [`DATA`], [`ACK`], [`LAST`], [`KEYED`], [`NATIVE`] |
//! | 2..4   | zero   | must be 0                                            |
//! | 4..8   | status | Fin: 0 taken, else the receiver's error (see `Fin`)   |
//! | 8..16  | tag    | Eager, Rts; RmaWrite, RmaRead: the target's key       |
//! | 16..24 | data   | immediate data (with [`DATA`]); Atomic: the operand; AtomicDone: the old value |
//! | 24..32 | token  | the sender's operation (Rts, Fin, Delivered, Cts); the receiver's (Data); the initiator's (Rma*, 0: no answer) |
//! | 32..40 | len    | Rts, RmaWrite, RmaRead: total length; RmaDone, AtomicDone with [`NATIVE`]: the region's length; Fin: bytes taken; Credit: bytes returned; Atomic: the compare value |
//! | 40..48 | addr   | Rts: the payload's address for a pull; Cts: the receiver's token; Rma*: the target address of the first byte; RmaDone, AtomicDone with [`NATIVE`]: the region's start |
//! | 48..56 | off    | Data, RmaWrite, RmaData: the payload's offset in the message or operation; Atomic: datatype, kind << 8, fetch << 16; Rts with [`KEYED`]: the key the receiver pulls with; RmaDone with [`NATIVE`]: the target's grant stamp (0 on verbs) |
//!
//! A header travels without its trailing zero 8-byte words ([`trimmed`]):
//! it is 8 to 56 bytes long, a multiple of 8, and the receiver reads the
//! words it lacks as 0, so every header means what its full form means. A
//! tagged eager message without immediate data or acknowledgement carries
//! 16 bytes (kind to tag): with shared memory's 16-byte entry prefix, an
//! 8-byte message fits one 64-byte ring line instead of two.

use crate::error::Error;

/// Bytes of a full header.
pub const LEN: usize = 56;

/// Bytes of the shortest header: kind, flags and status.
pub const MIN: usize = 8;

/// Whether a header of `len` bytes can be one: [`MIN`] to [`LEN`], whole words.
#[inline]
pub fn carried(len: usize) -> bool {
    (MIN..=LEN).contains(&len) && len.is_multiple_of(8)
}

/// The bytes of the header `b` to send: without its trailing zero words,
/// at least [`MIN`].
#[inline]
pub fn trimmed(b: &[u8; LEN]) -> &[u8] {
    let mut n = LEN;
    while n > MIN && b[n - 8..n] == [0u8; 8] {
        n -= 8;
    }
    &b[..n]
}

/// The bytes of a [`Header::message`] header with a tag (`tagged`)
/// and immediate data (`data`), and no other field, to send: through its
/// last field that may be set, without computing [`trimmed`]. A zero tag
/// or data word is sent then, which the receiver reads as it would read
/// the word missing.
#[inline]
pub fn message_len(tagged: bool, data: bool) -> usize {
    match (tagged, data) {
        (_, true) => 24,
        (true, false) => 16,
        (false, false) => MIN,
    }
}

/// A tagged message (else untagged).
pub const TAGGED: u8 = 1;
/// Immediate data rides in `data`.
pub const DATA: u8 = 2;
/// The sender wants a `Delivered` answer (delivery-complete sends).
pub const ACK: u8 = 4;
/// The last frame of an RMA write. On a `Data` without payload: the
/// sender pushes no more to a receive its receiver finished by pulling.
pub const LAST: u8 = 8;
/// An Rts whose `off` is the key its payload is exposed with
/// (`Transport::expose`); on any other kind a protocol error. A peer that
/// predates it refuses such an Rts as a reserved bit; an Rts without it
/// has no key, and a transport that needs one has the sender push.
pub const KEYED: u8 = 16;
/// An `RmaDone` that says the target's device reaches the operation's key
/// for its access by itself, over the region in `addr` and `len`, under
/// the stamp in `off` (`DomainProvider::grant_stamp`): the
/// initiator's next operations of that access on the key, inside that
/// region, may go natively (`Transport::start_rma`). On any other kind a
/// protocol error.
///
/// On an `Atomic`: the initiator asks for the element's region to be
/// granted to its device instead of having it applied. On an `AtomicDone`:
/// the grant, the region in `addr` and `len`; the atomic was not applied
/// and goes by the initiator's device (`Transport::start_atomic`) from now
/// on. On any other kind a protocol error.
pub const NATIVE: u8 = 32;
const FLAGS: u8 = TAGGED | DATA | ACK | LAST | KEYED | NATIVE;

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// First frame on a connection: the payload is the sender's endpoint name.
    Hello = 1,
    /// A message with its payload.
    Eager = 2,
    /// A request to send `len` bytes at `addr` (rendezvous).
    Rts = 3,
    /// The receiver is done with a rendezvous (pulled it, the rest of a
    /// push, or refused it).
    Fin = 4,
    /// The receiver has an acknowledged eager message.
    Delivered = 5,
    /// The receiver cannot pull: push the bytes to its token.
    Cts = 6,
    /// Pushed rendezvous bytes at an offset (with [`LAST`]: the end of a
    /// push the receiver pulled the rest of).
    Data = 7,
    /// Bytes to write into the target's region, at an offset of the write.
    RmaWrite = 8,
    /// A request to read the target's region.
    RmaRead = 9,
    /// Read bytes, at an offset of the read.
    RmaData = 10,
    /// The target's answer to an RMA operation, with its status.
    RmaDone = 11,
    /// Eager credit returned: `len` bytes more the receiver may be sent.
    Credit = 12,
    /// Are you progressing? (the progress timeout's probe)
    Ping = 13,
    /// The answer to a `Ping`.
    Pong = 14,
    /// A remote atomic on one element.
    Atomic = 15,
    /// The target's answer to an atomic: status and the old value.
    AtomicDone = 16,
    /// The acceptor's demand for a job-key proof: the payload is a fresh
    /// challenge.
    Challenge = 17,
    /// The connector's answer to a `Challenge`: the payload is its proof.
    Proof = 18,
    /// The acceptor took the connection: the connector may send.
    Admitted = 19,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Hello,
            2 => Kind::Eager,
            3 => Kind::Rts,
            4 => Kind::Fin,
            5 => Kind::Delivered,
            6 => Kind::Cts,
            7 => Kind::Data,
            8 => Kind::RmaWrite,
            9 => Kind::RmaRead,
            10 => Kind::RmaData,
            11 => Kind::RmaDone,
            12 => Kind::Credit,
            13 => Kind::Ping,
            14 => Kind::Pong,
            15 => Kind::Atomic,
            16 => Kind::AtomicDone,
            17 => Kind::Challenge,
            18 => Kind::Proof,
            19 => Kind::Admitted,
            _ => return None,
        })
    }
}

/// One parsed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// What it is.
    pub kind: Kind,
    /// [`TAGGED`], [`DATA`], [`ACK`].
    pub flags: u8,
    /// Fin's status.
    pub status: u32,
    /// The message's tag.
    pub tag: u64,
    /// Immediate data.
    pub data: u64,
    /// An operation's token.
    pub token: u64,
    /// Length, offset or bytes taken (see the table).
    pub len: u64,
    /// Address or the receiver's token (see the table).
    pub addr: u64,
    /// The payload's offset (see the table).
    pub off: u64,
}

impl Header {
    /// A header of `kind` with every field 0.
    pub fn new(kind: Kind) -> Header {
        Header {
            kind,
            flags: 0,
            status: 0,
            tag: 0,
            data: 0,
            token: 0,
            len: 0,
            addr: 0,
            off: 0,
        }
    }

    /// The flags for a message's tag and data.
    pub fn message(kind: Kind, tag: Option<u64>, data: Option<u64>) -> Header {
        let mut h = Header::new(kind);
        if let Some(t) = tag {
            h.flags |= TAGGED;
            h.tag = t;
        }
        if let Some(d) = data {
            h.flags |= DATA;
            h.data = d;
        }
        h
    }

    /// Its tag when tagged.
    pub fn tag(&self) -> Option<u64> {
        (self.flags & TAGGED != 0).then_some(self.tag)
    }

    /// Its immediate data when it has some.
    pub fn data(&self) -> Option<u64> {
        (self.flags & DATA != 0).then_some(self.data)
    }

    /// An Rts's key when it carries one ([`KEYED`]).
    pub fn key(&self) -> Option<u64> {
        (self.flags & KEYED != 0).then_some(self.off)
    }

    /// The header's bytes.
    #[inline]
    pub fn encode(&self) -> [u8; LEN] {
        // Word by word: the first carries kind, flags and status.
        let first = self.kind as u64 | (self.flags as u64) << 8 | (self.status as u64) << 32;
        let words = [first, self.tag, self.data, self.token, self.len, self.addr, self.off];
        let mut b = [0u8; LEN];
        for (chunk, w) in b.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// Parses a header as sent (full or [`trimmed`]); every malformed one
    /// is a [`Error::Protocol`].
    pub fn decode(b: &[u8]) -> Result<Header, Error> {
        if !carried(b.len()) {
            return Err(Error::Protocol("frame header of the wrong length"));
        }
        let mut full = [0u8; LEN];
        full[..b.len()].copy_from_slice(b);
        Header::parse(&full)
    }

    /// Parses a full header (a trimmed one with its missing words zeroed).
    #[inline]
    pub fn parse(b: &[u8; LEN]) -> Result<Header, Error> {
        let kind = Kind::from_u8(b[0]).ok_or(Error::Protocol("unknown frame kind"))?;
        if b[1] & !FLAGS != 0 || b[2] != 0 || b[3] != 0 {
            return Err(Error::Protocol("reserved header bits set"));
        }
        if b[1] & KEYED != 0 && kind != Kind::Rts {
            return Err(Error::Protocol("a key on a frame other than a request to send"));
        }
        if b[1] & NATIVE != 0 && !matches!(kind, Kind::RmaDone | Kind::Atomic | Kind::AtomicDone) {
            return Err(Error::Protocol(
                "a native grant on a frame other than an RMA or atomic one",
            ));
        }
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[8 + 8 * i..16 + 8 * i]);
            u64::from_le_bytes(w)
        };
        Ok(Header {
            kind,
            flags: b[1],
            status: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            tag: word(0),
            data: word(1),
            token: word(2),
            len: word(3),
            addr: word(4),
            off: word(5),
        })
    }
}

/// Fin statuses: why a receiver did not take a rendezvous's bytes.
pub mod status {
    /// Taken (pulled, possibly truncated).
    pub const TAKEN: u32 = 0;
    /// The receive was cancelled or its endpoint closed before the pull.
    pub const CANCELED: u32 = 1;
    /// The pull failed (bad address or range on the sender's side).
    pub const FAILED: u32 = 2;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_round_trips() {
        let h = Header {
            kind: Kind::Rts,
            flags: TAGGED | DATA | ACK | LAST | KEYED,
            status: 7,
            tag: u64::MAX,
            data: 2,
            token: 3,
            len: 4,
            addr: 5,
            off: 6,
        };
        assert_eq!(Header::decode(&h.encode()), Ok(h));
        assert_eq!(h.tag(), Some(u64::MAX));
        assert_eq!(h.key(), Some(6));
        assert_eq!(Header::new(Kind::Eager).tag(), None);
        assert_eq!(Header::new(Kind::Rts).key(), None);
    }

    #[test]
    fn a_key_rides_only_on_a_request_to_send() {
        let mut rts = Header::new(Kind::Rts);
        rts.flags = KEYED;
        rts.off = 0x1234;
        let b = rts.encode();
        assert_eq!(b[1], 16);
        assert_eq!(b[48..56], 0x1234u64.to_le_bytes());
        assert_eq!(Header::decode(&b), Ok(rts));
        for kind in [Kind::Eager, Kind::Fin, Kind::Data, Kind::RmaWrite] {
            let mut b = Header::new(kind).encode();
            b[1] = KEYED;
            assert!(matches!(Header::decode(&b), Err(Error::Protocol(_))), "{kind:?}");
        }
    }

    #[test]
    fn a_native_grant_rides_only_on_an_rma_or_atomic_frame() {
        let mut done = Header::new(Kind::RmaDone);
        done.flags = NATIVE;
        done.addr = 0x1000;
        done.len = 64;
        assert_eq!(Header::decode(&done.encode()), Ok(done));
        for kind in [Kind::Atomic, Kind::AtomicDone] {
            let mut h = Header::new(kind);
            h.flags = NATIVE;
            assert_eq!(Header::decode(&h.encode()), Ok(h), "{kind:?}");
        }
        for kind in [Kind::Eager, Kind::Rts, Kind::RmaWrite, Kind::RmaData, Kind::Credit] {
            let mut b = Header::new(kind).encode();
            b[1] = NATIVE;
            assert!(matches!(Header::decode(&b), Err(Error::Protocol(_))), "{kind:?}");
        }
    }

    #[test]
    fn trimmed_headers_round_trip() {
        let eager = Header::message(Kind::Eager, Some(9), None);
        let full = eager.encode();
        assert_eq!(trimmed(&full).len(), 16);
        assert_eq!(Header::decode(trimmed(&full)), Ok(eager));
        let mut fin = Header::new(Kind::Fin);
        assert_eq!(trimmed(&fin.encode()).len(), MIN);
        fin.off = 1;
        assert_eq!(trimmed(&fin.encode()).len(), LEN);
        assert_eq!(Header::decode(trimmed(&fin.encode())), Ok(fin));
    }

    #[test]
    fn a_message_header_is_whole_within_its_length() {
        for (tag, data) in [
            (None, None),
            (Some(9), None),
            (None, Some(3)),
            (Some(0), Some(0)),
            (Some(1), Some(2)),
        ] {
            let h = Header::message(Kind::Eager, tag, data);
            let b = h.encode();
            let n = message_len(tag.is_some(), data.is_some());
            assert!(n >= trimmed(&b).len(), "{tag:?} {data:?}: nothing set is cut off");
            assert_eq!(Header::decode(&b[..n]), Ok(h), "{tag:?} {data:?}");
        }
    }

    #[test]
    fn malformed_headers_are_protocol_errors() {
        let good = Header::new(Kind::Eager).encode();
        for len in [0, 4, 15, LEN - 1] {
            assert!(Header::decode(&good[..len]).is_err(), "{len} bytes");
        }
        assert!(Header::decode(&[good.as_slice(), &[0; 8]].concat()).is_err());
        for (at, v) in [(0, 0u8), (0, 20), (1, 32), (2, 1), (3, 1)] {
            let mut b = good;
            b[at] = v;
            assert!(matches!(Header::decode(&b), Err(Error::Protocol(_))), "byte {at} = {v}");
        }
    }
}
