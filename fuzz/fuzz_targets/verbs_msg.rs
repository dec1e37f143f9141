//! The verbs provider's message header parser, `xfer_verbs::wire::Msg::parse`,
//! on any bytes (a peer's SEND lands in a receive buffer as is).
//!
//! Properties: parsing never panics and fails with `Error::Protocol` only;
//! re-encoding what parsed with the provider's own encoders parses to the
//! same message (the parser ignores some reserved fields, so the bytes
//! themselves need not match); a message built from fields round-trips.
#![no_main]

use libfuzzer_sys::arbitrary::{self, Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use xfer_core::Error;
use xfer_verbs::wire::{self, Meta, Msg, CREDIT_LEN, FIN_LEN, HDR, PING_LEN, RTS_LEN, WRITE_DATA_LEN};

/// A message as structured input.
#[derive(Arbitrary, Debug)]
enum AnyMsg {
    Eager(Option<u64>, Option<u64>, Vec<u8>),
    Rts(Option<u64>, Option<u64>, u64, u64, u64, u32),
    Fin(u64, u32),
    WriteData(u64, u64),
    Credit(u32, u64),
    Ping,
}

/// The bytes the provider's encoders make for `msg`.
fn encode(msg: &Msg<'_>) -> Vec<u8> {
    match *msg {
        Msg::Eager { meta, payload } => {
            let mut b = vec![0u8; HDR + payload.len()];
            wire::eager(&mut b, meta);
            b[HDR..].copy_from_slice(payload);
            b
        }
        Msg::Rts {
            meta,
            token,
            len,
            addr,
            rkey,
        } => {
            let mut b = vec![0u8; RTS_LEN];
            wire::rts(&mut b, meta, token, len, addr, rkey);
            b
        }
        Msg::Fin { token, status } => {
            let mut b = vec![0u8; FIN_LEN];
            wire::fin(&mut b, token, status);
            b
        }
        Msg::WriteData { data, len } => {
            let mut b = vec![0u8; WRITE_DATA_LEN];
            wire::write_data(&mut b, data, len);
            b
        }
        Msg::Credit { msgs, bytes } => {
            let mut b = vec![0u8; CREDIT_LEN];
            wire::credit(&mut b, msgs, bytes);
            b
        }
        Msg::Ping => {
            let mut b = vec![0u8; PING_LEN];
            wire::ping(&mut b);
            b
        }
    }
}

fuzz_target!(|data: &[u8]| {
    match Msg::parse(data) {
        Ok(msg) => {
            let again = encode(&msg);
            assert_eq!(Msg::parse(&again), Ok(msg), "re-encoding changed the message");
        }
        Err(Error::Protocol(_)) => {}
        Err(other) => panic!("parse failed with {other:?}, not Protocol"),
    }

    if let Ok(any) = AnyMsg::arbitrary(&mut Unstructured::new(data)) {
        let meta = |tag, data| Meta { tag, data };
        let msg = match any {
            AnyMsg::Eager(tag, data, ref payload) => Msg::Eager {
                meta: meta(tag, data),
                payload,
            },
            AnyMsg::Rts(tag, data, token, len, addr, rkey) => Msg::Rts {
                meta: meta(tag, data),
                token,
                len,
                addr,
                rkey,
            },
            AnyMsg::Fin(token, status) => Msg::Fin { token, status },
            AnyMsg::WriteData(data, len) => Msg::WriteData { data, len },
            AnyMsg::Credit(msgs, bytes) => Msg::Credit { msgs, bytes },
            AnyMsg::Ping => Msg::Ping,
        };
        assert_eq!(Msg::parse(&encode(&msg)), Ok(msg));
    }
});
