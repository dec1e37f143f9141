//! The TCP provider's endpoint name encoding.
//!
//! An endpoint name is opaque bytes (at most [`MAX_LEN`]) that a peer inserts
//! into its address vector. A TCP name is:
//!
//! ```text
//! byte 0    provider tag: 0x01 (TCP)
//! byte 1    address family: 4 or 6
//! 4 or 16   IPv4 / IPv6 address, network order
//! 2         port, big-endian
//! 8         nonce (u64, little-endian)
//! ```
//!
//! An IPv4 name is [`V4_LEN`] (16) bytes, an IPv6 name [`V6_LEN`] (28).
//! The nonce is random per endpoint incarnation, so a restarted process at
//! the same IP and port has a different name. Nonce 0 ([`ANY_NONCE`]) is
//! never an endpoint's own: a name carrying it means "whichever endpoint
//! listens at this address" (a peer known by IP and port only, as a
//! libfabric `fi_getinfo(node, service)` or `sockaddr_in` names it), and the
//! endpoint there accepts it in place of its own.
//!
//! IPv6 flow information and scope id are not part of the name: they are
//! dropped by [`TcpName::encode`] and zero after [`TcpName::decode`].
//!
//! [`TcpName::decode`] takes bytes from a peer and never panics: it requires
//! the TCP provider tag, a known family and exactly the length for that
//! family.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The first byte of every TCP endpoint name.
pub const PROVIDER_TAG: u8 = 0x01;

/// The largest endpoint name of any provider.
pub const MAX_LEN: usize = xfer_core::Address::MAX_LEN;

/// The nonce of a name that stands for whichever endpoint listens at its
/// address; no endpoint has it as its own.
pub const ANY_NONCE: u64 = 0;

/// Length of a TCP name holding an IPv4 address.
pub const V4_LEN: usize = 2 + 4 + 2 + 8;

/// Length of a TCP name holding an IPv6 address.
pub const V6_LEN: usize = 2 + 16 + 2 + 8;

const FAMILY_V4: u8 = 4;
const FAMILY_V6: u8 = 6;

/// A TCP endpoint's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TcpName {
    /// The address the endpoint listens on.
    pub addr: SocketAddr,
    /// Random per endpoint incarnation.
    pub nonce: u64,
}

/// Why bytes are not a TCP endpoint name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameError {
    /// The provider tag is not [`PROVIDER_TAG`]: the name is another provider's.
    WrongProvider(u8),
    /// The address family byte is neither 4 nor 6.
    BadFamily(u8),
    /// The length is not the exact length for the family.
    BadLength,
}

impl NameError {
    /// A short human-readable description.
    pub fn as_str(&self) -> &'static str {
        match self {
            NameError::WrongProvider(_) => "endpoint name is not a TCP name",
            NameError::BadFamily(_) => "unknown address family in TCP name",
            NameError::BadLength => "bad TCP name length",
        }
    }
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::WrongProvider(tag) => write!(f, "{} (provider tag {:#04x})", self.as_str(), tag),
            NameError::BadFamily(family) => write!(f, "{} ({})", self.as_str(), family),
            NameError::BadLength => f.write_str(self.as_str()),
        }
    }
}

impl std::error::Error for NameError {}

/// Appends bytes to a fixed buffer; the caller keeps the total within it.
struct Writer {
    buf: [u8; MAX_LEN],
    len: usize,
}

impl Writer {
    fn put(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        if let Some(dst) = self.buf.get_mut(self.len..end) {
            dst.copy_from_slice(bytes);
            self.len = end;
        }
    }
}

/// Takes the next `N` bytes off the front of `rest`.
fn take<const N: usize>(rest: &mut &[u8]) -> Result<[u8; N], NameError> {
    let (head, tail) = rest.split_at_checked(N).ok_or(NameError::BadLength)?;
    let array = <[u8; N]>::try_from(head).map_err(|_| NameError::BadLength)?;
    *rest = tail;
    Ok(array)
}

impl TcpName {
    /// Encodes the name: the bytes and how many of them are used
    /// ([`V4_LEN`] or [`V6_LEN`]); the rest are zero.
    pub fn encode(&self) -> ([u8; MAX_LEN], usize) {
        let mut w = Writer {
            buf: [0; MAX_LEN],
            len: 0,
        };
        match self.addr {
            SocketAddr::V4(a) => {
                w.put(&[PROVIDER_TAG, FAMILY_V4]);
                w.put(&a.ip().octets());
            }
            SocketAddr::V6(a) => {
                w.put(&[PROVIDER_TAG, FAMILY_V6]);
                w.put(&a.ip().octets());
            }
        }
        w.put(&self.addr.port().to_be_bytes());
        w.put(&self.nonce.to_le_bytes());
        (w.buf, w.len)
    }

    /// The encoded name as a vector of exactly its used length.
    pub fn to_vec(&self) -> Vec<u8> {
        let (buf, len) = self.encode();
        buf.get(..len).unwrap_or_default().to_vec()
    }

    /// Decodes a name from a peer. Requires the TCP provider tag, family 4 or
    /// 6, and exactly [`V4_LEN`] or [`V6_LEN`] bytes. Never panics.
    pub fn decode(bytes: &[u8]) -> Result<TcpName, NameError> {
        let mut rest = bytes;
        let [tag] = take::<1>(&mut rest)?;
        if tag != PROVIDER_TAG {
            return Err(NameError::WrongProvider(tag));
        }
        let [family] = take::<1>(&mut rest)?;
        let expected = match family {
            FAMILY_V4 => V4_LEN,
            FAMILY_V6 => V6_LEN,
            other => return Err(NameError::BadFamily(other)),
        };
        if bytes.len() != expected {
            return Err(NameError::BadLength);
        }
        let ip = if family == FAMILY_V4 {
            IpAddr::V4(Ipv4Addr::from(take::<4>(&mut rest)?))
        } else {
            IpAddr::V6(Ipv6Addr::from(take::<16>(&mut rest)?))
        };
        let port = u16::from_be_bytes(take::<2>(&mut rest)?);
        let nonce = u64::from_le_bytes(take::<8>(&mut rest)?);
        // For IPv6, flow information and scope id are zero.
        Ok(TcpName {
            addr: SocketAddr::new(ip, port),
            nonce,
        })
    }
}

impl fmt::Display for TcpName {
    /// `tcp://10.0.0.1:5000#0123456789abcdef`, IPv6 addresses in brackets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tcp://{}#{:016x}", self.addr, self.nonce)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::{SocketAddrV4, SocketAddrV6};

    const GOLDEN_V4: [u8; V4_LEN] = [
        0x01, 0x04, // provider tag, family
        10, 0, 0, 1, // 10.0.0.1
        0x13, 0x88, // port 5000, big-endian
        0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, // nonce 0x0123456789abcdef, little-endian
    ];

    fn golden_name() -> TcpName {
        TcpName {
            addr: "10.0.0.1:5000".parse().unwrap(),
            nonce: 0x0123_4567_89ab_cdef,
        }
    }

    #[test]
    fn golden_v4() {
        let name = golden_name();
        let (buf, len) = name.encode();
        assert_eq!(len, V4_LEN);
        assert_eq!(&buf[..len], &GOLDEN_V4[..]);
        assert!(buf[len..].iter().all(|&b| b == 0));
        assert_eq!(name.to_vec(), GOLDEN_V4.to_vec());
        assert_eq!(TcpName::decode(&GOLDEN_V4), Ok(name));
    }

    #[test]
    fn v6_layout() {
        let name = TcpName {
            addr: "[2001:db8::1]:443".parse().unwrap(),
            nonce: 1,
        };
        let bytes = name.to_vec();
        assert_eq!(bytes.len(), V6_LEN);
        assert_eq!(&bytes[..2], &[0x01, 0x06]);
        assert_eq!(&bytes[2..18], &"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(&bytes[18..20], &[0x01, 0xbb]);
        assert_eq!(&bytes[20..], &[1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(TcpName::decode(&bytes), Ok(name));
    }

    #[test]
    fn v6_drops_flowinfo_and_scope() {
        let addr = SocketAddrV6::new(Ipv6Addr::LOCALHOST, 7, 99, 3);
        let name = TcpName {
            addr: SocketAddr::V6(addr),
            nonce: 5,
        };
        let decoded = TcpName::decode(&name.to_vec()).unwrap();
        assert_eq!(
            decoded.addr,
            SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::LOCALHOST, 7, 0, 0))
        );
        assert_eq!(decoded.nonce, 5);
    }

    #[test]
    fn display() {
        assert_eq!(golden_name().to_string(), "tcp://10.0.0.1:5000#0123456789abcdef");
        let v6 = TcpName {
            addr: "[::1]:80".parse().unwrap(),
            nonce: 0xab,
        };
        assert_eq!(v6.to_string(), "tcp://[::1]:80#00000000000000ab");
    }

    #[test]
    fn errors() {
        assert_eq!(TcpName::decode(&[]), Err(NameError::BadLength));
        assert_eq!(TcpName::decode(&[0x01]), Err(NameError::BadLength));
        assert_eq!(TcpName::decode(&[0x02]), Err(NameError::WrongProvider(0x02)));

        let mut wrong = GOLDEN_V4;
        wrong[0] = 0x00;
        assert_eq!(TcpName::decode(&wrong), Err(NameError::WrongProvider(0x00)));

        for family in [0u8, 5, 46, 0xff] {
            let mut bad = GOLDEN_V4;
            bad[1] = family;
            assert_eq!(TcpName::decode(&bad), Err(NameError::BadFamily(family)));
        }

        // Exact length required: short, long, and a v4 body labelled v6.
        assert_eq!(TcpName::decode(&GOLDEN_V4[..V4_LEN - 1]), Err(NameError::BadLength));
        let mut long = GOLDEN_V4.to_vec();
        long.push(0);
        assert_eq!(TcpName::decode(&long), Err(NameError::BadLength));
        let mut relabelled = GOLDEN_V4;
        relabelled[1] = 6;
        assert_eq!(TcpName::decode(&relabelled), Err(NameError::BadLength));
        let v6 = TcpName {
            addr: "[::1]:80".parse().unwrap(),
            nonce: 0,
        }
        .to_vec();
        assert_eq!(TcpName::decode(&v6[..V6_LEN - 1]), Err(NameError::BadLength));
        let mut oversized = vec![0x01, 0x06];
        oversized.resize(MAX_LEN + 1, 0);
        assert_eq!(TcpName::decode(&oversized), Err(NameError::BadLength));
    }

    #[test]
    fn error_text() {
        let all = [
            NameError::WrongProvider(2),
            NameError::BadFamily(5),
            NameError::BadLength,
        ];
        for e in all {
            assert!(!e.as_str().is_empty());
            assert!(e.to_string().starts_with(e.as_str()));
        }
        assert_ne!(all[0].as_str(), all[1].as_str());
        assert_ne!(all[1].as_str(), all[2].as_str());
        assert_eq!(
            NameError::WrongProvider(2).to_string(),
            "endpoint name is not a TCP name (provider tag 0x02)"
        );
        let boxed: Box<dyn std::error::Error> = Box::new(NameError::BadLength);
        assert_eq!(boxed.to_string(), "bad TCP name length");
    }

    fn arb_addr() -> impl Strategy<Value = SocketAddr> {
        prop_oneof![
            (any::<[u8; 4]>(), any::<u16>()).prop_map(|(o, p)| SocketAddr::V4(SocketAddrV4::new(o.into(), p))),
            (any::<[u8; 16]>(), any::<u16>()).prop_map(|(o, p)| SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(o),
                p,
                0,
                0
            ))),
        ]
    }

    proptest! {
        #[test]
        fn roundtrip(addr in arb_addr(), nonce in any::<u64>()) {
            let name = TcpName { addr, nonce };
            let (buf, len) = name.encode();
            let expected = if addr.is_ipv4() { V4_LEN } else { V6_LEN };
            prop_assert_eq!(len, expected);
            prop_assert!(buf[len..].iter().all(|&b| b == 0));
            prop_assert_eq!(TcpName::decode(&buf[..len]), Ok(name));
            prop_assert_eq!(TcpName::decode(&name.to_vec()), Ok(name));
            // Any other length for the same bytes is rejected.
            prop_assert_eq!(TcpName::decode(&buf[..len - 1]), Err(NameError::BadLength));
            prop_assert_eq!(TcpName::decode(&buf[..len + 1]), Err(NameError::BadLength));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(name) = TcpName::decode(&bytes) {
                prop_assert_eq!(name.to_vec(), bytes);
            }
        }

        /// Bytes that start like a TCP name, so decoding gets past the tag.
        #[test]
        fn tagged_bytes_never_panic(family in prop_oneof![Just(4u8), Just(6u8), any::<u8>()],
                                    body in proptest::collection::vec(any::<u8>(), 0..40)) {
            let mut bytes = vec![PROVIDER_TAG, family];
            bytes.extend_from_slice(&body);
            match TcpName::decode(&bytes) {
                Ok(name) => prop_assert_eq!(name.to_vec(), bytes),
                Err(NameError::BadFamily(f)) => prop_assert!(f != 4 && f != 6),
                Err(e) => prop_assert_eq!(e, NameError::BadLength),
            }
        }
    }
}
