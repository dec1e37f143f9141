//! The two messages of the handshake on a pair's Unix socket (docs/SHM.md
//! "Connection"): the connector's hello carries the segment's memfd and its
//! eventfd, the acceptor's welcome its eventfd. Both carry the address and
//! value of the sender's CMA probe word. The socket carries nothing after.

/// Bytes of either message.
pub const LEN: usize = 32;
const MAGIC: u32 = u32::from_le_bytes(*b"XSHH");
const VERSION: u16 = 1;

/// Which message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Connector to acceptor: descriptors memfd, eventfd.
    Hello = 1,
    /// Acceptor to connector: descriptor eventfd.
    Welcome = 2,
}

impl Kind {
    /// Descriptors the message comes with.
    pub fn fds(self) -> usize {
        match self {
            Kind::Hello => 2,
            Kind::Welcome => 1,
        }
    }
}

/// A handshake message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// Which one.
    pub kind: Kind,
    /// Bytes of each ring of the segment (hello), 0 in a welcome.
    pub ring_bytes: u32,
    /// Where the sender's probe word is in its address space.
    pub probe_addr: u64,
    /// The value the probe word holds.
    pub probe_value: u64,
}

/// Why a handshake message is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bad {
    /// Not [`LEN`] bytes.
    Length(usize),
    /// Another magic: not this protocol.
    Magic,
    /// Another version.
    Version(u16),
    /// Not the message expected now.
    Kind(u16),
    /// Reserved bytes not zero.
    Reserved,
}

impl std::fmt::Display for Bad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bad::Length(n) => write!(f, "handshake message of {n} bytes (expected {LEN})"),
            Bad::Magic => write!(f, "handshake message with another magic"),
            Bad::Version(v) => write!(f, "handshake version {v} (this side speaks {VERSION})"),
            Bad::Kind(k) => write!(f, "unexpected handshake message kind {k}"),
            Bad::Reserved => write!(f, "handshake message with reserved bytes set"),
        }
    }
}

impl Hello {
    /// The message's bytes.
    pub fn encode(&self) -> [u8; LEN] {
        let mut b = [0; LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&(self.kind as u16).to_le_bytes());
        b[8..12].copy_from_slice(&self.ring_bytes.to_le_bytes());
        b[16..24].copy_from_slice(&self.probe_addr.to_le_bytes());
        b[24..32].copy_from_slice(&self.probe_value.to_le_bytes());
        b
    }

    /// Decodes a message that must be of kind `want`.
    pub fn decode(b: &[u8], want: Kind) -> Result<Hello, Bad> {
        let b: &[u8; LEN] = b.try_into().map_err(|_| Bad::Length(b.len()))?;
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| u64::from(u32_at(i)) | u64::from(u32_at(i + 4)) << 32;
        if u32_at(0) != MAGIC {
            return Err(Bad::Magic);
        }
        if u16_at(4) != VERSION {
            return Err(Bad::Version(u16_at(4)));
        }
        if u16_at(6) != want as u16 {
            return Err(Bad::Kind(u16_at(6)));
        }
        if u32_at(12) != 0 || (want == Kind::Welcome && u32_at(8) != 0) {
            return Err(Bad::Reserved);
        }
        Ok(Hello {
            kind: want,
            ring_bytes: u32_at(8),
            probe_addr: u64_at(16),
            probe_value: u64_at(24),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let h = Hello {
            kind: Kind::Hello,
            ring_bytes: 4096,
            probe_addr: 0x7f00_1234_5678,
            probe_value: 42,
        };
        assert_eq!(Hello::decode(&h.encode(), Kind::Hello), Ok(h));
        assert_eq!(Hello::decode(&h.encode(), Kind::Welcome), Err(Bad::Kind(1)));
        assert_eq!(Hello::decode(&h.encode()[..31], Kind::Hello), Err(Bad::Length(31)));
        let mut b = h.encode();
        b[0] ^= 1;
        assert_eq!(Hello::decode(&b, Kind::Hello), Err(Bad::Magic));
        let mut b = h.encode();
        b[4] = 9;
        assert_eq!(Hello::decode(&b, Kind::Hello), Err(Bad::Version(9)));
        let mut b = h.encode();
        b[13] = 1;
        assert_eq!(Hello::decode(&b, Kind::Hello), Err(Bad::Reserved));
    }
}
