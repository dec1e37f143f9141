//! Where a verbs transport's rdma_cm listener is: the transport address a
//! `verbs` endpoint name carries after its provider id (0x06), and the
//! network part of a `shm+verbs` name. Encoded behind a tag of its own,
//! which [`decode`](crate::transport::decode) supplies.
//!
//! ```text
//! byte 0    tag: 0x02
//! byte 1    address family: 4
//! 4         IPv4 address of the RDMA device's netdev, network order
//! 2         rdma_cm port, big-endian
//! 8         nonce (u64, little-endian), random per endpoint incarnation
//! ```
//!
//! [`VerbsName::decode`] takes bytes from peers and never panics.

use std::net::{Ipv4Addr, SocketAddrV4};

use xfer_core::{Address, Error, Result};

/// The tag in front of an encoded [`VerbsName`].
pub const PROVIDER_ID: u8 = 0x02;

/// Length of a verbs name.
pub const LEN: usize = 2 + 4 + 2 + 8;

const FAMILY_V4: u8 = 4;

/// A verbs endpoint's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VerbsName {
    /// The rdma_cm listener's address.
    pub addr: SocketAddrV4,
    /// Random per endpoint incarnation.
    pub nonce: u64,
}

impl VerbsName {
    /// The name's bytes.
    pub fn encode(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[0] = PROVIDER_ID;
        b[1] = FAMILY_V4;
        b[2..6].copy_from_slice(&self.addr.ip().octets());
        b[6..8].copy_from_slice(&self.addr.port().to_be_bytes());
        b[8..16].copy_from_slice(&self.nonce.to_le_bytes());
        b
    }

    /// The name as an [`Address`].
    pub fn address(&self) -> Address {
        Address::new(&self.encode()).expect("a verbs name fits an address")
    }

    /// Parses name bytes, refusing anything but an exact verbs IPv4 name.
    pub fn decode(b: &[u8]) -> Result<VerbsName> {
        match b.first() {
            None => return Err(Error::InvalidArgument("empty name")),
            Some(&PROVIDER_ID) => {}
            Some(_) => return Err(Error::AddressNotAvailable),
        }
        if b.len() != LEN || b[1] != FAMILY_V4 {
            return Err(Error::InvalidArgument("malformed verbs endpoint name"));
        }
        let ip = Ipv4Addr::new(b[2], b[3], b[4], b[5]);
        let port = u16::from_be_bytes([b[6], b[7]]);
        if port == 0 {
            return Err(Error::InvalidArgument("verbs endpoint name with port 0"));
        }
        let mut nonce = [0u8; 8];
        nonce.copy_from_slice(&b[8..16]);
        Ok(VerbsName {
            addr: SocketAddrV4::new(ip, port),
            nonce: u64::from_le_bytes(nonce),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_refusals() {
        let n = VerbsName {
            addr: "10.11.0.1:4791".parse().unwrap(),
            nonce: 0x0123_4567_89ab_cdef,
        };
        assert_eq!(VerbsName::decode(&n.encode()), Ok(n));
        let mut bad = n.encode();
        bad[0] = 0x01;
        assert_eq!(VerbsName::decode(&bad), Err(Error::AddressNotAvailable));
        assert!(VerbsName::decode(&n.encode()[..15]).is_err());
        bad = n.encode();
        bad[1] = 6;
        assert!(VerbsName::decode(&bad).is_err());
        bad = n.encode();
        bad[6..8].fill(0);
        assert!(VerbsName::decode(&bad).is_err());
        assert!(VerbsName::decode(&[]).is_err());
    }
}
