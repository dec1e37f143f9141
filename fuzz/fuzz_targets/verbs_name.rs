//! Verbs endpoint names from peers: `xfer_verbs::VerbsName::decode`, and the
//! `Address` the verbs domain makes of accepted names (its
//! `check_address` is decode, then `Address::new`; opening a verbs domain
//! needs an RDMA device, so the address vector itself is not driven here).
//!
//! Properties: decoding never panics and fails with `InvalidArgument` or
//! `AddressNotAvailable` only; whatever decodes encodes back to the same
//! bytes and fits an `Address`; a name built from fields round-trips.
#![no_main]

use std::net::{Ipv4Addr, SocketAddrV4};

use libfuzzer_sys::arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use xfer_core::{Address, Error};
use xfer_verbs::VerbsName;

fuzz_target!(|data: &[u8]| {
    match VerbsName::decode(data) {
        Ok(name) => {
            assert_eq!(name.encode()[..], data[..], "{name:?} is not canonical");
            assert_eq!(name.address().as_bytes(), data);
            assert_eq!(
                Address::new(data).expect("a verbs name fits an address"),
                name.address()
            );
            assert_ne!(name.addr.port(), 0);
        }
        Err(Error::InvalidArgument(_) | Error::AddressNotAvailable) => {}
        Err(other) => panic!("decode failed with {other:?}"),
    }

    let fields = <([u8; 4], u16, u64)>::arbitrary(&mut Unstructured::new(data));
    if let Ok((ip, port, nonce)) = fields {
        let name = VerbsName {
            addr: SocketAddrV4::new(Ipv4Addr::from(ip), port),
            nonce,
        };
        match VerbsName::decode(&name.encode()) {
            Ok(back) => assert_eq!(back, name),
            Err(_) => assert_eq!(port, 0, "only port 0 is refused"),
        }
    }
});
