//! What xfer carries for the RPC transport: tags and frames.
//!
//! Every message is tagged. The top byte of the tag is its kind, the next
//! 24 bits the connection it belongs to (the id its *receiver* gave the
//! connection), the low 32 bits a body sequence number:
//!
//! | kind | tag | payload |
//! |---|---|---|
//! | `HELLO` | `HELLO << 56` | [`VERSION`], the client's connection id (u32 LE), the client's endpoint name |
//! | `ACCEPT` | `ACCEPT << 56 \| client_conn << 32` | the server's connection id (u32 LE) |
//! | `FRAME` | `FRAME << 56 \| conn << 32` | a frame, at most [`FRAME_MAX`] bytes |
//! | `BODY` | `BODY << 56 \| conn << 32 \| seq` | a large message's encoded bytes |
//!
//! A frame's first byte says what it holds: [`DATA`] (one or more encoded
//! messages follow, each as its length (u32 LE) and its bytes: what a sender
//! wrote between two flushes, as tokio's framed writers batch them), [`LARGE`] (the message is in the `BODY` message with sequence
//! number `seq` (u32 LE), `len` (u64 LE) bytes long) or [`CLOSE`] (the
//! sender sent `n` (u64 LE) `DATA`/`LARGE` frames before it and will send no
//! more).

use std::io;

/// Protocol version in the hello: 2 since frames grew to [`FRAME_MAX`]
/// of 32 KiB (a peer of version 1 posts 4 KiB frame receives, so its
/// hello is ignored rather than its frames truncated).
pub const VERSION: u8 = 2;

/// Tag kinds (the top byte).
pub const HELLO: u64 = 1;
/// The server's answer to a hello.
pub const ACCEPT: u64 = 2;
/// A frame of a connection.
pub const FRAME: u64 = 3;
/// The body of a large message.
pub const BODY: u64 = 4;

/// Every bit but the kind's: what a hello receive ignores.
pub const KIND_ONLY: u64 = (1 << 56) - 1;
/// Connection ids are 24 bits.
pub const CONN_MAX: u32 = (1 << 24) - 1;

/// The size of every frame receive; larger messages go as `LARGE` + `BODY`.
/// Room for an HTTP/2 frame of the protocol's default largest size (16 KiB
/// payload and its 9-byte header, what hyper writes and flushes at a time
/// in a large body) and more: such a write then travels as one xfer
/// message into a standing receive, not as a `LARGE` frame and a body
/// whose receive is posted only once that frame is read (two sends, two
/// receives and the body's copy through the unexpected queue each time).
pub const FRAME_MAX: usize = 32 << 10;
/// The largest encoded message a receiver accepts (a peer-sent length
/// above it ends the connection).
pub const MESSAGE_MAX: u64 = 64 << 20;

/// Frame kinds (the first byte).
pub const DATA: u8 = 0;
/// The message is in a `BODY` message.
pub const LARGE: u8 = 1;
/// The sender is done.
pub const CLOSE: u8 = 2;

/// The tag of a message of `kind` on connection `conn`, body `seq`.
pub fn tag(kind: u64, conn: u32, seq: u32) -> u64 {
    kind << 56 | u64::from(conn & CONN_MAX) << 32 | u64::from(seq)
}

/// What a received frame holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// Encoded messages, each behind its length ([`messages`]).
    Data(&'a [u8]),
    /// A message in a `BODY` message of its own.
    Large {
        /// The `BODY` message's sequence number (the low 32 bits of its tag).
        seq: u32,
        /// Its length in bytes.
        len: u64,
    },
    /// The sender is done.
    Close {
        /// `DATA` and `LARGE` frames it sent before this one.
        sent: u64,
    },
}

/// Parses a frame; an error for anything malformed (it came from the peer).
pub fn parse(frame: &[u8]) -> io::Result<Frame<'_>> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("rpc frame: {what}"));
    let (&kind, rest) = frame.split_first().ok_or_else(|| bad("empty"))?;
    match kind {
        DATA => Ok(Frame::Data(rest)),
        LARGE => {
            let (seq, rest) = rest.split_first_chunk::<4>().ok_or_else(|| bad("short LARGE"))?;
            let (len, _) = rest.split_first_chunk::<8>().ok_or_else(|| bad("short LARGE"))?;
            let len = u64::from_le_bytes(*len);
            if len > MESSAGE_MAX {
                return Err(bad(&format!("message of {len} bytes (limit {MESSAGE_MAX})")));
            }
            Ok(Frame::Large {
                seq: u32::from_le_bytes(*seq),
                len,
            })
        }
        CLOSE => {
            let (sent, _) = rest.split_first_chunk::<8>().ok_or_else(|| bad("short CLOSE"))?;
            Ok(Frame::Close {
                sent: u64::from_le_bytes(*sent),
            })
        }
        k => Err(bad(&format!("unknown kind {k}"))),
    }
}

/// The bytes a `DATA` frame needs per message besides the message.
pub const PER_MESSAGE: usize = 4;

/// The messages of a `DATA` frame's payload; an error at the first
/// malformed length.
pub fn messages(mut data: &[u8]) -> impl Iterator<Item = io::Result<&[u8]>> {
    std::iter::from_fn(move || {
        if data.is_empty() {
            return None;
        }
        let Some((len, rest)) = data.split_first_chunk::<4>() else {
            data = &[];
            return Some(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "rpc frame: short length",
            )));
        };
        let len = u32::from_le_bytes(*len) as usize;
        if len > rest.len() {
            data = &[];
            return Some(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "rpc frame: message past its end",
            )));
        }
        let (msg, rest) = rest.split_at(len);
        data = rest;
        Some(Ok(msg))
    })
}

/// Appends a message's length to a `DATA` frame being built.
pub fn push_len(frame: &mut Vec<u8>, len: usize) {
    frame.extend_from_slice(&(len as u32).to_le_bytes());
}

/// A `LARGE` frame.
pub fn large(seq: u32, len: usize) -> Vec<u8> {
    let mut f = Vec::with_capacity(13);
    f.push(LARGE);
    f.extend_from_slice(&seq.to_le_bytes());
    f.extend_from_slice(&(len as u64).to_le_bytes());
    f
}

/// A `CLOSE` frame.
pub fn close(sent: u64) -> Vec<u8> {
    let mut f = Vec::with_capacity(9);
    f.push(CLOSE);
    f.extend_from_slice(&sent.to_le_bytes());
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_bad_ones_are_errors() {
        assert_eq!(parse(&[DATA, 1, 2]).unwrap(), Frame::Data(&[1, 2]));
        assert_eq!(
            parse(&large(7, 1 << 20)).unwrap(),
            Frame::Large { seq: 7, len: 1 << 20 }
        );
        assert_eq!(parse(&close(42)).unwrap(), Frame::Close { sent: 42 });
        assert!(parse(&[]).is_err());
        assert!(parse(&[LARGE, 1, 2]).is_err());
        assert!(parse(&large(1, MESSAGE_MAX as usize + 1)).is_err());
        assert!(parse(&[CLOSE, 0]).is_err());
        assert!(parse(&[9]).is_err());
    }

    #[test]
    fn data_frames_hold_several_messages() {
        let mut f = Vec::new();
        for m in [&b"ab"[..], b"", b"xyz"] {
            push_len(&mut f, m.len());
            f.extend_from_slice(m);
        }
        let got: Vec<&[u8]> = messages(&f).collect::<io::Result<_>>().unwrap();
        assert_eq!(got, [&b"ab"[..], b"", b"xyz"]);
        assert!(messages(&f[..f.len() - 1]).any(|m| m.is_err()));
        assert!(messages(&[1, 0]).any(|m| m.is_err()));
    }

    #[test]
    fn tags_keep_kind_connection_and_sequence_apart() {
        let t = tag(BODY, CONN_MAX, u32::MAX);
        assert_eq!(t >> 56, BODY);
        assert_eq!((t >> 32) as u32 & CONN_MAX, CONN_MAX);
        assert_eq!(t as u32, u32::MAX);
        assert_eq!(tag(HELLO, 5, 6) & !KIND_ONLY, tag(HELLO, 0, 0));
    }
}
