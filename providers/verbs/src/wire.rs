//! What travels in the verbs provider's SEND messages (docs/PROTOCOL.md,
//! "Verbs wire format"): a 24-byte header, then the body of its kind.
//!
//! ```text
//! 0   u8   kind: 1 eager, 2 RTS, 3 FIN, 4 write-data, 5 credit, 6 ping
//! 1   u8   flags: 1 tagged, 2 has immediate data
//! 2   u16  version (2), little-endian like every field
//! 4   u32  rendezvous token's key half (RTS, FIN), else 0
//! 8   u64  tag
//! 16  u64  immediate data
//! 24  ...  eager: the payload
//!          RTS: u64 length, u64 address, u32 rkey, u32 token's generation
//!          FIN: u32 status (0 = read done), u32 token's generation
//!          write-data: u64 length written
//!          credit: u32 messages, u32 0, u64 eager bytes (granted back)
//!          ping: nothing (answered with a credit message)
//! ```
//!
//! RDMA WRITE and READ carry no header: they move user bytes only. A peer's
//! bytes are parsed by [`Msg::parse`], which never panics.

use xfer_core::unstable::rdm::outstanding::{join, split};
use xfer_core::{Error, Result};

/// Header length.
pub const HDR: usize = 24;
/// Wire version.
pub const VERSION: u16 = 2;
/// Length of an RTS message.
pub const RTS_LEN: usize = HDR + 24;
/// Length of a FIN message.
pub const FIN_LEN: usize = HDR + 8;
/// Length of a write-data message.
pub const WRITE_DATA_LEN: usize = HDR + 8;
/// Length of a credit message.
pub const CREDIT_LEN: usize = HDR + 16;
/// Length of a ping.
pub const PING_LEN: usize = HDR;

const EAGER: u8 = 1;
const RTS: u8 = 2;
const FIN: u8 = 3;
const WRITE_DATA: u8 = 4;
const CREDIT: u8 = 5;
const PING: u8 = 6;
const F_TAGGED: u8 = 1;
const F_DATA: u8 = 2;

/// Tag and immediate data of a message or RTS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// `Some` for tagged messages.
    pub tag: Option<u64>,
    /// Immediate data.
    pub data: Option<u64>,
}

/// A parsed message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Msg<'a> {
    /// A whole small message.
    Eager {
        /// Tag and data.
        meta: Meta,
        /// The payload.
        payload: &'a [u8],
    },
    /// Ready to send: the receiver reads `len` bytes at `addr` with `rkey`,
    /// then answers with a FIN carrying `token`.
    Rts {
        /// Tag and data.
        meta: Meta,
        /// The sender's operation (a token of core's `Outstanding`).
        token: u64,
        /// Message length.
        len: u64,
        /// Where the payload is in the sender's memory.
        addr: u64,
        /// Its remote key.
        rkey: u32,
    },
    /// The receiver is done with the sender's buffer.
    Fin {
        /// The sender's operation, as its RTS named it.
        token: u64,
        /// 0 when the data was read; else why not.
        status: u32,
    },
    /// An RDMA WRITE of `len` bytes just before this message carried
    /// immediate data for the target's completion queue.
    WriteData {
        /// The data.
        data: u64,
        /// Bytes the write placed.
        len: u64,
    },
    /// The receiver grants more credit: `msgs` more messages (its receive
    /// buffers, reposted) and `bytes` more eager bytes.
    Credit {
        /// Messages.
        msgs: u32,
        /// Eager bytes.
        bytes: u64,
    },
    /// The progress timeout's probe: the peer's process, when it runs,
    /// answers with a credit message at once (it owes the ping's buffer).
    Ping,
}

fn put_hdr(b: &mut [u8], kind: u8, meta: Meta, id: u32) {
    let mut flags = 0;
    if meta.tag.is_some() {
        flags |= F_TAGGED;
    }
    if meta.data.is_some() {
        flags |= F_DATA;
    }
    b[0] = kind;
    b[1] = flags;
    b[2..4].copy_from_slice(&VERSION.to_le_bytes());
    b[4..8].copy_from_slice(&id.to_le_bytes());
    b[8..16].copy_from_slice(&meta.tag.unwrap_or(0).to_le_bytes());
    b[16..24].copy_from_slice(&meta.data.unwrap_or(0).to_le_bytes());
}

/// Writes an eager header into `b[..HDR]`; the payload goes after it.
pub fn eager(b: &mut [u8], meta: Meta) {
    put_hdr(b, EAGER, meta, 0);
}

/// Writes an RTS into `b[..RTS_LEN]`.
pub fn rts(b: &mut [u8], meta: Meta, token: u64, len: u64, addr: u64, rkey: u32) {
    let (key, gen) = split(token);
    put_hdr(b, RTS, meta, key);
    b[24..32].copy_from_slice(&len.to_le_bytes());
    b[32..40].copy_from_slice(&addr.to_le_bytes());
    b[40..44].copy_from_slice(&rkey.to_le_bytes());
    b[44..48].copy_from_slice(&gen.to_le_bytes());
}

/// Writes a FIN into `b[..FIN_LEN]`.
pub fn fin(b: &mut [u8], token: u64, status: u32) {
    let (key, gen) = split(token);
    put_hdr(b, FIN, Meta { tag: None, data: None }, key);
    b[24..28].copy_from_slice(&status.to_le_bytes());
    b[28..32].copy_from_slice(&gen.to_le_bytes());
}

/// Writes a write-data message into `b[..WRITE_DATA_LEN]`.
pub fn write_data(b: &mut [u8], data: u64, len: u64) {
    put_hdr(
        b,
        WRITE_DATA,
        Meta {
            tag: None,
            data: Some(data),
        },
        0,
    );
    b[24..32].copy_from_slice(&len.to_le_bytes());
}

/// Writes a credit message into `b[..CREDIT_LEN]`.
pub fn credit(b: &mut [u8], msgs: u32, bytes: u64) {
    put_hdr(b, CREDIT, Meta { tag: None, data: None }, 0);
    b[24..28].copy_from_slice(&msgs.to_le_bytes());
    b[28..32].fill(0);
    b[32..40].copy_from_slice(&bytes.to_le_bytes());
}

/// Writes a ping into `b[..PING_LEN]`.
pub fn ping(b: &mut [u8]) {
    put_hdr(b, PING, Meta { tag: None, data: None }, 0);
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(x)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

impl<'a> Msg<'a> {
    /// Parses what a peer sent.
    pub fn parse(b: &'a [u8]) -> Result<Msg<'a>> {
        if b.len() < HDR {
            return Err(Error::Protocol("verbs message shorter than its header"));
        }
        if u16::from_le_bytes([b[2], b[3]]) != VERSION {
            return Err(Error::Protocol("verbs message of an unknown wire version"));
        }
        let flags = b[1];
        if flags & !(F_TAGGED | F_DATA) != 0 {
            return Err(Error::Protocol("verbs message with unknown flags"));
        }
        let meta = Meta {
            tag: (flags & F_TAGGED != 0).then(|| u64_at(b, 8)),
            data: (flags & F_DATA != 0).then(|| u64_at(b, 16)),
        };
        let id = u32_at(b, 4);
        let need = |n: usize| {
            if b.len() == n {
                Ok(())
            } else {
                Err(Error::Protocol("verbs control message of the wrong length"))
            }
        };
        match b[0] {
            EAGER => Ok(Msg::Eager {
                meta,
                payload: &b[HDR..],
            }),
            RTS => {
                need(RTS_LEN)?;
                Ok(Msg::Rts {
                    meta,
                    token: join(id, u32_at(b, 44)),
                    len: u64_at(b, 24),
                    addr: u64_at(b, 32),
                    rkey: u32_at(b, 40),
                })
            }
            FIN => {
                need(FIN_LEN)?;
                Ok(Msg::Fin {
                    token: join(id, u32_at(b, 28)),
                    status: u32_at(b, 24),
                })
            }
            WRITE_DATA => {
                need(WRITE_DATA_LEN)?;
                Ok(Msg::WriteData {
                    data: u64_at(b, 16),
                    len: u64_at(b, 24),
                })
            }
            CREDIT => {
                need(CREDIT_LEN)?;
                Ok(Msg::Credit {
                    msgs: u32_at(b, 24),
                    bytes: u64_at(b, 32),
                })
            }
            PING => {
                need(PING_LEN)?;
                Ok(Msg::Ping)
            }
            _ => Err(Error::Protocol("verbs message of an unknown kind")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_roundtrips() {
        let meta = Meta {
            tag: Some(7),
            data: Some(9),
        };
        let mut b = [0u8; HDR + 3];
        eager(&mut b, meta);
        b[HDR..].copy_from_slice(b"abc");
        assert_eq!(Msg::parse(&b), Ok(Msg::Eager { meta, payload: b"abc" }));
        let mut r = [0u8; RTS_LEN];
        let token = join(5, 0x8000_0003);
        rts(&mut r, meta, token, 1 << 20, 0xdead_0000, 77);
        assert_eq!(
            Msg::parse(&r),
            Ok(Msg::Rts {
                meta,
                token,
                len: 1 << 20,
                addr: 0xdead_0000,
                rkey: 77
            })
        );
        let mut f = [0u8; FIN_LEN];
        fin(&mut f, token, 0);
        assert_eq!(Msg::parse(&f), Ok(Msg::Fin { token, status: 0 }));
        let mut w = [0u8; WRITE_DATA_LEN];
        write_data(&mut w, 42, 100);
        assert_eq!(Msg::parse(&w), Ok(Msg::WriteData { data: 42, len: 100 }));
        let mut c = [0u8; CREDIT_LEN];
        credit(&mut c, 16, 1 << 20);
        assert_eq!(
            Msg::parse(&c),
            Ok(Msg::Credit {
                msgs: 16,
                bytes: 1 << 20
            })
        );
        assert!(Msg::parse(&c[..CREDIT_LEN - 1]).is_err(), "short credit");
        let mut p = [0u8; PING_LEN + 1];
        ping(&mut p);
        assert_eq!(Msg::parse(&p[..PING_LEN]), Ok(Msg::Ping));
        assert!(Msg::parse(&p).is_err(), "a ping with a body");
    }

    #[test]
    fn hostile_bytes_are_errors() {
        assert!(Msg::parse(&[]).is_err());
        assert!(Msg::parse(&[1; HDR - 1]).is_err());
        let mut b = [0u8; RTS_LEN];
        rts(&mut b, Meta { tag: None, data: None }, 1, 1, 1, 1);
        assert!(Msg::parse(&b[..RTS_LEN - 1]).is_err(), "short RTS");
        let mut v = b;
        v[2] = 9;
        assert!(Msg::parse(&v).is_err(), "version");
        v = b;
        v[0] = 99;
        assert!(Msg::parse(&v).is_err(), "kind");
        v = b;
        v[1] = 0x80;
        assert!(Msg::parse(&v).is_err(), "flags");
    }
}
