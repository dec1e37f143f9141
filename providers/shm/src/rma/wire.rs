//! The RMA frame header: a fixed 48-byte frame header in the ring, parsed
//! with every field checked before use (a peer writes these bytes).
//!
//! ```text
//! 0   u8  magic 0xA5 (an RMA frame, not one of the transport's)
//! 1   u8  op: 1 Put, 2 Get (single copy by CMA), 3 PutData, 4 GetReq,
//!         5 GetData (two-copy path, payload in the frame), 6 Done
//! 2   u8  flags: bit 0 LAST (PutData only)
//! 3   u8  status (Done only; 0 = success)
//! 4   u32 zero
//! 8   u64 req: the initiator's operation id
//! 16  u64 key: the target's region key (zero in GetData and Done)
//! 24  u64 addr: target address (Put, Get, PutData, GetReq); offset in
//!         the operation (GetData); zero in Done
//! 32  u64 len: bytes of the operation (Put, Get, GetReq) or of the
//!         payload (PutData, GetData); zero in Done
//! 40  u64 local: the initiator's buffer address (Put, Get); zero otherwise
//! ```
//!
//! Little-endian. A field an op does not use must be zero, and a frame
//! carries a payload exactly when its op is PutData or GetData, of exactly
//! `len` bytes.

/// Bytes of the header.
pub const LEN: usize = 48;
/// First byte of every RMA frame header.
pub const MAGIC: u8 = 0xA5;
/// PutData: the last chunk of the operation.
pub const LAST: u8 = 1;

/// What a frame asks or answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Write: the target pulls `len` bytes from the initiator's `local` by CMA.
    Put = 1,
    /// Read: the target pushes `len` bytes to the initiator's `local` by CMA.
    Get = 2,
    /// Write, two-copy path: this frame's payload goes to `addr`.
    PutData = 3,
    /// Read, two-copy path: the target streams `len` bytes back as GetData.
    GetReq = 4,
    /// A chunk of a two-copy read, at `addr` bytes into the operation.
    GetData = 5,
    /// The target's answer to an operation, with its status.
    Done = 6,
}

/// The outcome a target reports in Done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The bytes moved.
    Ok = 0,
    /// No region under the key.
    NoKey = 1,
    /// The range is outside the region.
    OutOfBounds = 2,
    /// The region does not grant the access.
    Denied = 3,
    /// The target may not use CMA towards the initiator: use the two-copy path.
    CmaRefused = 4,
    /// CMA failed on the initiator's buffer (not mapped).
    CmaFault = 5,
}

impl Status {
    fn from_u8(v: u8) -> Option<Status> {
        Some(match v {
            0 => Status::Ok,
            1 => Status::NoKey,
            2 => Status::OutOfBounds,
            3 => Status::Denied,
            4 => Status::CmaRefused,
            5 => Status::CmaFault,
            _ => return None,
        })
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Status::Ok => "success",
            Status::NoKey => "no region under that key at the target",
            Status::OutOfBounds => "range outside the target's region",
            Status::Denied => "access not granted by the target's region",
            Status::CmaRefused => "CMA refused by the target",
            Status::CmaFault => "CMA failed on the initiator's buffer",
        })
    }
}

/// A parsed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// What it is.
    pub op: Op,
    /// PutData: the last chunk.
    pub last: bool,
    /// Done: the outcome.
    pub status: Status,
    /// The initiator's operation id.
    pub req: u64,
    /// The target's region key.
    pub key: u64,
    /// Target address, or offset in the operation (GetData).
    pub addr: u64,
    /// Operation or payload bytes.
    pub len: u64,
    /// The initiator's buffer address (Put, Get).
    pub local: u64,
}

/// Why a header was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadHeader(pub &'static str);

impl std::fmt::Display for BadHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "bad RMA header: {}", self.0)
    }
}

impl std::error::Error for BadHeader {}

/// Whether a frame header is an RMA one (the rest is the transport's).
pub fn is_rma(header: &[u8]) -> bool {
    header.len() == LEN && header[0] == MAGIC
}

fn u64_at(b: &[u8; LEN], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

impl Header {
    /// A header with the fields that `op` does not use zero.
    pub fn new(op: Op, req: u64) -> Header {
        Header {
            op,
            last: false,
            status: Status::Ok,
            req,
            key: 0,
            addr: 0,
            len: 0,
            local: 0,
        }
    }

    /// Parses and checks a header and the length of the payload with it.
    pub fn parse(b: &[u8], payload_len: usize) -> Result<Header, BadHeader> {
        let b: &[u8; LEN] = b.try_into().map_err(|_| BadHeader("length is not 48"))?;
        if b[0] != MAGIC {
            return Err(BadHeader("magic"));
        }
        let op = match b[1] {
            1 => Op::Put,
            2 => Op::Get,
            3 => Op::PutData,
            4 => Op::GetReq,
            5 => Op::GetData,
            6 => Op::Done,
            _ => return Err(BadHeader("unknown op")),
        };
        let flags = b[2];
        let status = Status::from_u8(b[3]).ok_or(BadHeader("unknown status"))?;
        if b[4..8] != [0; 4] {
            return Err(BadHeader("reserved bytes not zero"));
        }
        let h = Header {
            op,
            last: flags & LAST != 0,
            status,
            req: u64_at(b, 8),
            key: u64_at(b, 16),
            addr: u64_at(b, 24),
            len: u64_at(b, 32),
            local: u64_at(b, 40),
        };
        if flags & !LAST != 0 || (flags != 0 && op != Op::PutData) {
            return Err(BadHeader("flags"));
        }
        if op != Op::Done && status != Status::Ok {
            return Err(BadHeader("status outside Done"));
        }
        let unused_zero = match op {
            Op::Put | Op::Get => true,
            Op::PutData | Op::GetReq => h.local == 0,
            Op::GetData => h.key == 0 && h.local == 0,
            Op::Done => h.key == 0 && h.addr == 0 && h.len == 0 && h.local == 0,
        };
        if !unused_zero {
            return Err(BadHeader("unused field not zero"));
        }
        let carries = matches!(op, Op::PutData | Op::GetData);
        if carries && h.len != payload_len as u64 {
            return Err(BadHeader("payload length differs from len"));
        }
        if !carries && payload_len != 0 {
            return Err(BadHeader("payload on an op without one"));
        }
        Ok(h)
    }

    /// The 48 bytes of the header.
    pub fn encode(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[0] = MAGIC;
        b[1] = self.op as u8;
        b[2] = if self.last { LAST } else { 0 };
        b[3] = self.status as u8;
        b[8..16].copy_from_slice(&self.req.to_le_bytes());
        b[16..24].copy_from_slice(&self.key.to_le_bytes());
        b[24..32].copy_from_slice(&self.addr.to_le_bytes());
        b[32..40].copy_from_slice(&self.len.to_le_bytes());
        b[40..48].copy_from_slice(&self.local.to_le_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let mut h = Header::new(Op::PutData, 7);
        h.key = 0x1122;
        h.addr = 0x1000;
        h.len = 5;
        h.last = true;
        let b = h.encode();
        assert_eq!(&b[..4], &[0xA5, 3, 1, 0]);
        assert_eq!(Header::parse(&b, 5), Ok(h));
        assert!(is_rma(&b));
        assert_eq!(Header::parse(&b, 4), Err(BadHeader("payload length differs from len")));
        assert_eq!(Header::parse(&b[..47], 5), Err(BadHeader("length is not 48")));
        let mut bad = b;
        bad[0] = 0;
        assert_eq!(Header::parse(&bad, 5), Err(BadHeader("magic")));
        bad = b;
        bad[1] = 9;
        assert_eq!(Header::parse(&bad, 5), Err(BadHeader("unknown op")));
        bad = b;
        bad[2] = 2;
        assert_eq!(Header::parse(&bad, 5), Err(BadHeader("flags")));
        bad = b;
        bad[3] = 1;
        assert_eq!(Header::parse(&bad, 5), Err(BadHeader("status outside Done")));
        bad = b;
        bad[5] = 1;
        assert_eq!(Header::parse(&bad, 5), Err(BadHeader("reserved bytes not zero")));
        bad = b;
        bad[40] = 1;
        assert_eq!(Header::parse(&bad, 5), Err(BadHeader("unused field not zero")));

        let mut d = Header::new(Op::Done, 9);
        d.status = Status::NoKey;
        assert_eq!(Header::parse(&d.encode(), 0), Ok(d));
        assert_eq!(
            Header::parse(&d.encode(), 1),
            Err(BadHeader("payload on an op without one"))
        );
        bad = d.encode();
        bad[3] = 77;
        assert_eq!(Header::parse(&bad, 0), Err(BadHeader("unknown status")));
        bad = d.encode();
        bad[2] = 1;
        assert_eq!(Header::parse(&bad, 0), Err(BadHeader("flags")));
    }
}
