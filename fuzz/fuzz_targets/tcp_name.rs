//! TCP endpoint names from peers: `xfer_tcp::name::TcpName::decode`, and
//! address-vector insertion of arbitrary name bytes through a TCP domain
//! (`AddressVector::insert`, which checks them with the provider).
//!
//! Properties: decoding never panics; whatever decodes encodes back to the
//! same bytes; the address vector accepts exactly the names that decode,
//! returns the same handle for the same name and looks the bytes back up;
//! and a name built from the same bytes as fields round-trips.
#![no_main]

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use libfuzzer_sys::arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use xfer_core::{AddressVector, Domain, Error};
use xfer_tcp::name::{NameError, TcpName, V4_LEN, V6_LEN};
use xfer_tcp::TcpDomain;

thread_local! {
    /// One TCP domain and address vector for the whole run (opening a
    /// domain touches no socket; names are removed after each input).
    static AV: (Domain, AddressVector) = {
        let domain = Domain::new(Box::new(TcpDomain::open().expect("tcp domain")));
        let av = domain.av().expect("address vector");
        (domain, av)
    };
}

fuzz_target!(|data: &[u8]| {
    let decoded = TcpName::decode(data);
    match decoded {
        Ok(name) => {
            assert_eq!(name.to_vec(), data, "{name} is not canonical");
            let (buf, len) = name.encode();
            assert_eq!(&buf[..len], data);
            assert!(buf[len..].iter().all(|&b| b == 0));
            assert!(name.to_string().starts_with("tcp://"));
        }
        Err(e) => {
            assert!(!e.as_str().is_empty());
            let _ = e.to_string();
        }
    }

    AV.with(|(_, av)| match av.insert(data) {
        Ok(peer) => {
            assert!(decoded.is_ok(), "the address vector took bytes that are not a TCP name");
            assert_eq!(av.insert(data), Ok(peer), "same name, same handle");
            assert_eq!(av.lookup(peer).expect("lookup").as_bytes(), data);
            av.remove(peer).expect("remove");
            assert_eq!(av.len(), Ok(0));
        }
        Err(Error::AddressNotAvailable) => assert!(matches!(decoded, Err(NameError::WrongProvider(_)))),
        Err(Error::InvalidArgument(_)) => assert!(decoded.is_err()),
        Err(other) => panic!("address vector insert failed with {other:?}"),
    });

    let mut u = Unstructured::new(data);
    let fields = <(bool, [u8; 16], u16, u64)>::arbitrary(&mut u);
    if let Ok((v6, octets, port, nonce)) = fields {
        let addr = if v6 {
            SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(octets), port, 0, 0))
        } else {
            let v4 = [octets[0], octets[1], octets[2], octets[3]];
            SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(v4), port))
        };
        let name = TcpName { addr, nonce };
        let bytes = name.to_vec();
        assert_eq!(bytes.len(), if v6 { V6_LEN } else { V4_LEN });
        assert_eq!(TcpName::decode(&bytes), Ok(name));
    }
});
