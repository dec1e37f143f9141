//! Remote key unpacking, `xfer_core::RemoteKey::unpack`, on any bytes.
//!
//! Properties: unpacking never panics; whatever unpacks packs back to the
//! same bytes and describes a region that does not wrap the address space;
//! and a key built from the same bytes as fields (`RemoteKey::from_parts`)
//! round-trips through `pack` and `unpack`.
#![no_main]

use libfuzzer_sys::arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use xfer_core::unstable::mr::RKEY_LEN;
use xfer_core::{Error, RemoteKey};

fuzz_target!(|data: &[u8]| {
    match RemoteKey::unpack(data) {
        Ok(key) => {
            assert_eq!(data.len(), RKEY_LEN);
            assert_eq!(key.pack(), data, "{key:?} is not canonical");
            assert!(key.addr().checked_add(key.len()).is_some());
        }
        Err(Error::InvalidArgument(why)) => assert!(why.starts_with("remote key: ")),
        Err(other) => panic!("unpack failed with {other:?}, not InvalidArgument"),
    }

    let fields = <(u8, u64, u64, u64)>::arbitrary(&mut Unstructured::new(data));
    if let Ok((provider, addr, len, key)) = fields {
        match RemoteKey::from_parts(provider, addr, len, key) {
            Ok(k) => {
                assert_eq!((k.provider(), k.addr(), k.len(), k.key()), (provider, addr, len, key));
                let packed = k.pack();
                assert_eq!(packed.len(), RKEY_LEN);
                assert_eq!(RemoteKey::unpack(&packed), Ok(k));
            }
            Err(_) => assert!(addr.checked_add(len).is_none()),
        }
    }
});
