//! The rdma_cm private data a verbs peer sends with a connection request,
//! an accept or a duplicate refusal (`providers/verbs/src/endpoint/connect.rs`,
//! reached through `xfer_verbs::fuzzing`): magic, version, kind, the
//! sender's name; the CM may pad it.
//!
//! Properties: parsing never panics; what parses re-encodes to the same
//! leading bytes (padding is ignored) and names a valid verbs name; private
//! data built from a kind and a name round-trips.
#![no_main]

use std::net::{Ipv4Addr, SocketAddrV4};

use libfuzzer_sys::arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use xfer_verbs::fuzzing::{cm_private, parse_cm_private, CM_PRIVATE_LEN};
use xfer_verbs::VerbsName;

fuzz_target!(|data: &[u8]| {
    if let Some((kind, from)) = parse_cm_private(data) {
        let name = VerbsName::decode(from.as_bytes()).expect("a parsed sender is a verbs name");
        assert_eq!(cm_private(kind, &name)[..], data[..CM_PRIVATE_LEN]);
    }

    let fields = <(u8, [u8; 4], u16, u64)>::arbitrary(&mut Unstructured::new(data));
    if let Ok((kind, ip, port, nonce)) = fields {
        let name = VerbsName {
            addr: SocketAddrV4::new(Ipv4Addr::from(ip), port),
            nonce,
        };
        let mut bytes = cm_private(kind, &name).to_vec();
        let parsed = parse_cm_private(&bytes);
        if port == 0 {
            assert_eq!(parsed, None, "a name with port 0 is refused");
        } else {
            assert_eq!(parsed, Some((kind, name.address())));
            bytes.extend_from_slice(&[0; 8]); // CM padding
            assert_eq!(parse_cm_private(&bytes), parsed);
        }
    }
});
