//! The TCP frame header decoder, `xfer_tcp::wire::Frame::parse`, on any bytes.
//!
//! Properties: parsing never panics; whatever parses is canonical (emitting
//! the frame gives back the first 40 bytes, and it passes `Frame::check`);
//! the raw `Header` view never panics once `new_checked` accepted the bytes;
//! and a frame built from the same bytes as structured input, if it passes
//! `check`, round-trips through `to_bytes` and `parse`.
#![no_main]

use libfuzzer_sys::arbitrary::{self, Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use xfer_tcp::wire::{Frame, Header, HEADER_LEN, MAX_EAGER, MAX_NAME};

/// A frame as structured input (the library's `Frame` has no `Arbitrary`).
#[derive(Arbitrary, Debug)]
enum AnyFrame {
    Hello(u8, u64),
    HelloAck(u64),
    Eager(Option<u64>, Option<u64>, u64, Option<u64>),
    Rts(Option<u64>, Option<u64>, u64, u64, bool),
    Cts(u64, u64, u64),
    Data(u64, u64, u64),
    WriteReq(u64, u64, u64, u64, bool),
    ReadReq(u64, u64, u64, u64),
    ReadResp(u64, u64, u64),
    WriteAck(u64, u64),
    Credit(u64),
    Ping,
    Pong,
    Challenge([u8; 16]),
    Proof,
    Delivered(u64),
}

impl AnyFrame {
    fn frame(&self) -> Frame {
        match *self {
            AnyFrame::Hello(name_len, to) => Frame::Hello { name_len, to },
            AnyFrame::HelloAck(nonce) => Frame::HelloAck { nonce },
            AnyFrame::Eager(tag, data, len, ack) => Frame::Eager { tag, data, len, ack },
            AnyFrame::Rts(tag, data, len, token, ack) => Frame::Rts {
                tag,
                data,
                len,
                token,
                ack,
            },
            AnyFrame::Cts(token, rx_token, len) => Frame::Cts { token, rx_token, len },
            AnyFrame::Data(rx_token, offset, len) => Frame::Data { rx_token, offset, len },
            AnyFrame::WriteReq(key, addr, len, token, imm) => Frame::WriteReq {
                key,
                addr,
                len,
                token,
                imm,
            },
            AnyFrame::ReadReq(key, addr, len, token) => Frame::ReadReq { key, addr, len, token },
            AnyFrame::ReadResp(token, status, len) => Frame::ReadResp { token, status, len },
            AnyFrame::WriteAck(token, status) => Frame::WriteAck { token, status },
            AnyFrame::Credit(bytes) => Frame::Credit { bytes },
            AnyFrame::Ping => Frame::Ping,
            AnyFrame::Pong => Frame::Pong,
            AnyFrame::Challenge(nonce) => Frame::Challenge { nonce },
            AnyFrame::Proof => Frame::Proof,
            AnyFrame::Delivered(token) => Frame::Delivered { token },
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // Any bytes: an error or a canonical frame, never a panic.
    match Frame::parse(data) {
        Ok(frame) => {
            assert!(data.len() >= HEADER_LEN);
            assert_eq!(frame.to_bytes()[..], data[..HEADER_LEN], "{frame:?} is not canonical");
            assert_eq!(frame.check(), Ok(()), "{frame:?}");
            // The lengths a receiver sizes buffers from are bounded.
            match frame {
                Frame::Hello { name_len, .. } => assert!((1..=MAX_NAME).contains(&u64::from(name_len))),
                Frame::HelloAck { .. } => assert_eq!(frame.payload_len(), 0),
                Frame::Eager { len, .. } => assert!(len <= MAX_EAGER),
                _ => {}
            }
            let _ = frame.payload_len();
        }
        Err(e) => {
            assert!(!e.as_str().is_empty());
            let _ = e.to_string();
        }
    }
    if let Ok(h) = Header::new_checked(data) {
        let _ = (
            h.magic(),
            h.version(),
            h.kind(),
            h.flags(),
            h.len(),
            h.tag(),
            h.data(),
            h.id(),
        );
    }

    // The same bytes as a structured frame: valid frames round-trip.
    if let Ok(any) = AnyFrame::arbitrary(&mut Unstructured::new(data)) {
        let frame = any.frame();
        let bytes = frame.to_bytes();
        match frame.check() {
            Ok(()) => assert_eq!(Frame::parse(&bytes), Ok(frame)),
            Err(e) => assert_eq!(Frame::parse(&bytes), Err(e), "{frame:?}"),
        }
    }
});
