//! What a `verbs` peer sends the transport
//! (`providers/verbs/src/transport/`): a frame in one SEND (`frame.rs`: a
//! 4-byte prefix with its kind, header length and returned receive slots,
//! then the engine's header and payload), and the rdma_cm private data of
//! its connection (`conn.rs`: magic, version, kind, the slots granted, a
//! nonce; the CM may pad it).
//!
//! Properties: parsing never panics; a frame that parses encodes back to
//! the same bytes, with a header of at most 64 bytes; private data that
//! parses grants at least one slot and encodes back to its leading bytes
//! (the reserved two and the padding aside); encoded frames and private
//! data round-trip.
#![no_main]

use libfuzzer_sys::arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use xfer_verbs::fuzzing::{parse_rdm_private, rdm_private, RDM_PRIVATE_LEN};
use xfer_verbs::transport::frame;

fuzz_target!(|data: &[u8]| {
    if let Ok((p, header, payload)) = frame::parse(data) {
        assert!(header.len() <= 64, "a header of {} bytes", header.len());
        let mut buf = vec![0; data.len()];
        let f = frame::encode(&mut buf, p.kind, p.credit, header, payload);
        assert_eq!(f, data, "a parsed frame encodes back to its bytes");
    }

    if let Some((kind, grant, nonce)) = parse_rdm_private(data) {
        assert!(grant > 0, "a grant of nothing parsed");
        let mut again = rdm_private(kind, grant, nonce);
        again[6..8].copy_from_slice(&data[6..8]);
        assert_eq!(again[..], data[..RDM_PRIVATE_LEN]);
    }

    let fields = <(u8, u16, u64, u8, Vec<u8>)>::arbitrary(&mut Unstructured::new(data));
    if let Ok((kind, grant, nonce, hlen, body)) = fields {
        let mut bytes = rdm_private(kind, grant, nonce).to_vec();
        let parsed = parse_rdm_private(&bytes);
        assert_eq!(parsed, (grant > 0).then_some((kind, grant, nonce)));
        bytes.extend_from_slice(&[0; 8]); // CM padding
        assert_eq!(parse_rdm_private(&bytes), parsed);

        let hlen = usize::from(hlen % 65).min(body.len());
        let (header, payload) = body.split_at(hlen);
        let mut buf = vec![0; frame::PREFIX + body.len()];
        let f = frame::encode(&mut buf, frame::KIND_FRAME, grant, header, payload);
        let (p, h, d) = frame::parse(f).expect("an encoded frame parses");
        assert_eq!((p.kind, p.credit, h, d), (frame::KIND_FRAME, grant, header, payload));
    }
});
