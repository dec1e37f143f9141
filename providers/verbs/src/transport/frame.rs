//! One frame in one SEND: a 4-byte prefix, then the engine's header and
//! payload, all in one receive buffer of the peer's SRQ.
//!
//! | bytes | what |
//! |---|---|
//! | 1 | kind: 0 a frame of the engine's, 1 credit only (no header, no payload) |
//! | 1 | the header's length (at most the engine's `MAX_HEADER`) |
//! | 2 | receive slots the sender returns to the receiver (u16 LE) |
//! | header, payload | the engine's frame (kind 0 only) |

use xfer_core::unstable::rdm::transport::Bytes;

/// Bytes before the engine's header.
pub const PREFIX: usize = 4;
/// A frame of the engine's.
pub const KIND_FRAME: u8 = 0;
/// Credit only: returns receive slots, takes none of the peer's credit.
pub const KIND_CREDIT: u8 = 1;
/// The longest header a peer may announce.
const MAX_HEADER: usize = 64;

/// A frame's prefix, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    /// [`KIND_FRAME`] or [`KIND_CREDIT`].
    pub kind: u8,
    /// Receive slots returned.
    pub credit: u16,
}

/// Writes a frame at the start of `buf` (at least `PREFIX + header +
/// payload` long) and returns it. Panics when `buf` is shorter: callers
/// size it by the frame.
#[inline(always)]
pub fn encode<'b>(buf: &'b mut [u8], kind: u8, credit: u16, header: &[u8], payload: &[u8]) -> &'b [u8] {
    let len = PREFIX + header.len() + payload.len();
    // Split once, in order: each piece's length is then known, so the
    // copies below need no bounds check of their own (a send writes every
    // frame through here).
    let frame = &mut buf[..len];
    let (pre, rest) = frame.split_at_mut(PREFIX);
    let c = credit.to_le_bytes();
    pre.copy_from_slice(&[kind, header.len() as u8, c[0], c[1]]);
    let (h, p) = rest.split_at_mut(header.len());
    // Core's copy, which moves 8 to 16 bytes (a tagged header, a small
    // payload) as two words instead of calling `memcpy` for each.
    Bytes::new(header).copy_to(h);
    Bytes::new(payload).copy_to(p);
    frame
}

/// Parses what a peer sent: the prefix, the header and the payload, or
/// why the bytes are no frame. Never panics.
#[inline(always)]
pub fn parse(b: &[u8]) -> Result<(Prefix, &[u8], &[u8]), &'static str> {
    if b.len() < PREFIX {
        return Err("verbs frame shorter than its prefix");
    }
    let (kind, hlen) = (b[0], usize::from(b[1]));
    let credit = u16::from_le_bytes([b[2], b[3]]);
    match kind {
        KIND_CREDIT if b.len() == PREFIX && hlen == 0 => Ok((Prefix { kind, credit }, &[], &[])),
        KIND_CREDIT => Err("verbs credit frame with contents"),
        KIND_FRAME if hlen > MAX_HEADER || PREFIX + hlen > b.len() => Err("verbs frame header past its end"),
        KIND_FRAME => {
            let (header, payload) = b[PREFIX..].split_at(hlen);
            Ok((Prefix { kind, credit }, header, payload))
        }
        _ => Err("verbs frame of an unknown kind"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let mut buf = [0u8; 64];
        let n = encode(&mut buf, KIND_FRAME, 513, b"head", b"payload!").len();
        assert_eq!(n, PREFIX + 12);
        let (p, h, d) = parse(&buf[..n]).unwrap();
        assert_eq!(
            p,
            Prefix {
                kind: KIND_FRAME,
                credit: 513
            }
        );
        assert_eq!((h, d), (&b"head"[..], &b"payload!"[..]));
        let f = encode(&mut buf, KIND_CREDIT, 7, &[], &[]);
        assert_eq!(
            parse(f).unwrap().0,
            Prefix {
                kind: KIND_CREDIT,
                credit: 7
            }
        );
    }

    #[test]
    fn bad_frames_are_refused() {
        assert!(parse(&[0, 0, 0]).is_err());
        assert!(parse(&[0, 5, 0, 0, 1, 2]).is_err(), "header past the end");
        assert!(parse(&[0, 65, 0, 0]).is_err(), "header over the engine's largest");
        assert!(parse(&[1, 0, 1, 0, 9]).is_err(), "credit frame with a payload");
        assert!(parse(&[2, 0, 0, 0]).is_err(), "unknown kind");
        assert_eq!(parse(&[0, 0, 0, 0]).unwrap().1.len(), 0, "empty frame");
    }
}
