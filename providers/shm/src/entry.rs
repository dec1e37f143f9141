//! The ring entry: its format, and the decoder that judges a peer's entry
//! before anything else touches it.
//!
//! An entry starts on a cache line at ring position `p` (a byte count that
//! only grows; the offset in the ring is `p % ring_bytes`):
//!
//! ```text
//! word 0  stamp: (p | 1) ^ s, stored last with release; anything else = not
//!         yet written (s: the segment's secret, its top bit set)
//! word 1  bits 0-7 kind (1 frame, 2 pad), 8-15 header length, 16-31 zero,
//!         32-63 payload length
//! then    header bytes, payload bytes, padding to the next 64 B line
//! ```
//!
//! A pad entry fills the rest of the ring when a frame would not fit before
//! its end, so every frame is contiguous. The stamp names the position, so
//! a stale entry from an earlier lap never passes for a new one. Payload
//! bytes left from an earlier lap at the line where the next entry starts
//! pass for it only if they equal its stamp: the secret is random per
//! segment, unknown to the programs whose bytes the frames carry, so that
//! is one chance in 2^63 a line (the producer clears nothing ahead of
//! itself, which cost a second cache-line transfer a message). A stamp is
//! never 0, a fresh ring's bytes.
//!
//! The decoder gets the two words as copied out of shared memory once
//! (the peer may change them at any time) and checks every length against
//! the ring before the consumer reads a byte past them.

use crate::layout::LINE;

/// Bytes before the frame's header: stamp and word 1.
pub const PREFIX: usize = 16;
/// Longest transport header a frame carries.
pub const MAX_HEADER: usize = 64;

/// Entry kind: a frame.
pub const KIND_FRAME: u8 = 1;
/// Entry kind: padding to the end of the ring.
pub const KIND_PAD: u8 = 2;

/// The stamp of an entry at position `pos` in a segment with `secret`.
pub const fn stamp(pos: u64, secret: u64) -> u64 {
    (pos | 1) ^ secret
}

/// Whether `secret` can be a segment's: its top bit set, so no position
/// (they stay below 2^63) gives a stamp of 0.
pub const fn valid_secret(secret: u64) -> bool {
    secret >> 63 == 1
}

/// Word 1 of an entry.
pub const fn word1(kind: u8, header_len: u8, payload_len: u32) -> u64 {
    kind as u64 | (header_len as u64) << 8 | (payload_len as u64) << 32
}

/// Bytes an entry with this header and payload occupies: whole lines.
pub const fn entry_bytes(header_len: usize, payload_len: usize) -> usize {
    (PREFIX + header_len + payload_len).div_ceil(LINE) * LINE
}

/// Largest entry in a ring of `ring_bytes`: a quarter of it, so a frame
/// plus the pad before it always fits in an empty ring.
pub const fn max_entry(ring_bytes: usize) -> usize {
    ring_bytes / 4
}

/// Largest payload a frame with `header_len` header bytes can carry in a
/// ring of `ring_bytes`.
pub const fn max_payload(ring_bytes: usize, header_len: usize) -> usize {
    max_entry(ring_bytes) - PREFIX - header_len
}

/// What the decoder found at the consumer's head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded {
    /// A frame: header and payload lengths (the header starts at offset
    /// [`PREFIX`] of the entry), and the entry's size in bytes.
    Frame {
        /// Header bytes.
        header_len: usize,
        /// Payload bytes, after the header.
        payload_len: usize,
        /// Bytes of the entry, whole lines.
        size: usize,
    },
    /// Padding: the consumer skips `size` bytes, to the ring's end.
    Pad {
        /// Bytes to the end of the ring.
        size: usize,
    },
}

/// Why an entry is refused; the ring (and so the peer) is then broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Corrupt {
    /// Word 1 has a kind this format does not define.
    Kind(u8),
    /// The reserved bits of word 1 are not zero.
    Reserved(u16),
    /// The header is longer than [`MAX_HEADER`].
    HeaderTooLong(usize),
    /// The entry is larger than a frame may be in this ring.
    TooLarge(usize),
    /// The entry would run past the end of the ring.
    PastEnd {
        /// Ring offset of the entry.
        offset: usize,
        /// Its size.
        size: usize,
    },
    /// A pad entry that does not end the lap.
    BadPad,
    /// The consumer's head, as the producer reads it, is impossible.
    Head(u64),
}

impl std::fmt::Display for Corrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Corrupt::Kind(k) => write!(f, "unknown entry kind {k}"),
            Corrupt::Reserved(r) => write!(f, "reserved bits set ({r:#x})"),
            Corrupt::HeaderTooLong(n) => write!(f, "header of {n} bytes (most {MAX_HEADER})"),
            Corrupt::TooLarge(n) => write!(f, "entry of {n} bytes exceeds the ring's limit"),
            Corrupt::PastEnd { offset, size } => {
                write!(f, "entry of {size} bytes at offset {offset} runs past the ring's end")
            }
            Corrupt::BadPad => write!(f, "pad entry with lengths"),
            Corrupt::Head(h) => write!(f, "impossible consumer head {h}"),
        }
    }
}

/// Decodes the entry at ring position `pos` from its two words, copied out
/// of shared memory: `Ok(None)` when it is not written yet. Never panics;
/// whatever it accepts lies within the ring (`offset + size <= ring_bytes`)
/// and within the ring's entry limit.
pub fn decode(
    stamp_word: u64,
    word1: u64,
    pos: u64,
    secret: u64,
    ring_bytes: usize,
) -> Result<Option<Decoded>, Corrupt> {
    if stamp_word != stamp(pos, secret) {
        return Ok(None);
    }
    // ring_bytes is a power of two (checked when the segment was mapped).
    let offset = (pos as usize) & (ring_bytes - 1);
    let kind = word1 as u8;
    let header_len = (word1 >> 8) as u8 as usize;
    let reserved = (word1 >> 16) as u16;
    let payload_len = (word1 >> 32) as usize;
    if reserved != 0 {
        return Err(Corrupt::Reserved(reserved));
    }
    match kind {
        KIND_PAD => {
            if header_len != 0 || payload_len != 0 || offset == 0 {
                return Err(Corrupt::BadPad);
            }
            Ok(Some(Decoded::Pad {
                size: ring_bytes - offset,
            }))
        }
        KIND_FRAME => {
            if header_len > MAX_HEADER {
                return Err(Corrupt::HeaderTooLong(header_len));
            }
            // payload_len < 2^32 and header_len <= 64: no overflow on 64-bit.
            let size = entry_bytes(header_len, payload_len);
            if size > max_entry(ring_bytes) {
                return Err(Corrupt::TooLarge(size));
            }
            if offset + size > ring_bytes {
                return Err(Corrupt::PastEnd { offset, size });
            }
            Ok(Some(Decoded::Frame {
                header_len,
                payload_len,
                size,
            }))
        }
        k => Err(Corrupt::Kind(k)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: usize = 4096;
    const S: u64 = 0x8bad_f00d_5eed_0001;

    #[test]
    fn frame_round_trip() {
        let w = word1(KIND_FRAME, 24, 8);
        let d = decode(stamp(128, S), w, 128, S, R).unwrap();
        assert_eq!(
            d,
            Some(Decoded::Frame {
                header_len: 24,
                payload_len: 8,
                size: 64
            })
        );
    }

    #[test]
    fn unwritten_and_stale_stamps_are_empty() {
        let w = word1(KIND_FRAME, 0, 0);
        assert_eq!(decode(0, w, 0, S, R), Ok(None));
        assert!(valid_secret(S) && !valid_secret(1));
        // The same offset one lap earlier.
        assert_eq!(decode(stamp(64, S), w, 64 + R as u64, S, R), Ok(None));
    }

    #[test]
    fn hostile_lengths_are_refused() {
        let s = stamp(R as u64 - 64, S);
        let pos = R as u64 - 64;
        assert_eq!(
            decode(s, word1(KIND_FRAME, 0, u32::MAX), pos, S, R),
            Err(Corrupt::TooLarge(entry_bytes(0, u32::MAX as usize)))
        );
        assert_eq!(
            decode(s, word1(KIND_FRAME, 65, 0), pos, S, R),
            Err(Corrupt::HeaderTooLong(65))
        );
        assert_eq!(
            decode(s, word1(KIND_FRAME, 0, 64), pos, S, R),
            Err(Corrupt::PastEnd {
                offset: R - 64,
                size: 128
            })
        );
        assert_eq!(decode(s, word1(9, 0, 0), pos, S, R), Err(Corrupt::Kind(9)));
        assert_eq!(
            decode(s, word1(KIND_FRAME, 0, 0) | 1 << 20, pos, S, R),
            Err(Corrupt::Reserved(0x10))
        );
        assert_eq!(
            decode(stamp(0, S), word1(KIND_PAD, 0, 0), 0, S, R),
            Err(Corrupt::BadPad)
        );
        assert_eq!(
            decode(s, word1(KIND_PAD, 0, 0), pos, S, R),
            Ok(Some(Decoded::Pad { size: 64 }))
        );
    }
}
