//! The shared-memory ring consumer (`xfer_shm::ring::Consumer`, with the
//! entry decoder `xfer_shm::entry::decode`) on any ring content, and the
//! producer and consumer together on any frames.
//!
//! Input: byte 0 picks the ring size (bit 0: 4 or 8 KiB) and whether every
//! line gets the stamp the consumer expects there (bit 1), bytes 1..5 the
//! consumer's start line (any lap), the rest is the ring's content as a
//! hostile peer wrote it, from the consumer's head on (wrapping). Properties: no panic and no access outside the
//! ring (AddressSanitizer), at most one frame per line of the ring before
//! it is empty or broken; and, reading the same bytes as frames, whatever
//! the real producer writes (wrapping, padding, filling the ring) the real
//! consumer reads back identically, in order, with no error.
#![no_main]

use libfuzzer_sys::arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use xfer_shm::entry::stamp;
use xfer_shm::fuzzing::{Owned, TestRing, SECRET};
use xfer_shm::ring::Refused;

fuzz_target!(|data: &[u8]| {
    if data.len() < 5 {
        return;
    }
    let ring_bytes = if data[0] & 1 == 0 { 4096 } else { 8192 };
    let start = u64::from(u32::from_le_bytes([data[1], data[2], data[3], data[4]])) << 6;

    // A hostile peer's bytes.
    let mut ring = TestRing::new(ring_bytes);
    let content = &data[5..];
    // The content starts at the consumer's head (wrapping), so the bytes it
    // reads first are the input's first.
    let head_off = start as usize & (ring_bytes - 1);
    for (i, b) in content.iter().take(ring_bytes).enumerate() {
        ring.bytes_mut()[(head_off + i) & (ring_bytes - 1)] = *b;
    }
    if data[0] & 2 != 0 {
        // Every line carries the stamp the consumer expects there, so the
        // fuzzer works on the lengths rather than on guessing stamps.
        let lap = start & !(ring_bytes as u64 - 1);
        let head = start as usize & (ring_bytes - 1) & !63;
        for (line, word) in ring.data.iter_mut().enumerate().step_by(8) {
            let o = line * 8;
            let pos = if o >= head {
                lap + o as u64
            } else {
                lap + (ring_bytes + o) as u64
            };
            *word = stamp(pos, SECRET);
        }
    }
    let (frames, _err) = ring.drain(start, usize::MAX);
    assert!(frames.len() <= ring_bytes / 64, "more frames than lines");

    // Honest frames through the real producer and consumer, lap after lap.
    let mut u = Unstructured::new(content);
    let Ok(frames) = Vec::<(Vec<u8>, Vec<u8>)>::arbitrary(&mut u) else {
        return;
    };
    let frames: Vec<Owned> = frames
        .into_iter()
        .map(|(mut h, p)| {
            h.truncate(64);
            (h, p)
        })
        .collect();
    let mut ring = TestRing::new(ring_bytes);
    let mut pos = start & !63;
    let mut rest = &frames[..];
    // Each round fills the ring, then drains it from where it started.
    for _ in 0..64 {
        if rest.is_empty() {
            break;
        }
        let (written, refused, tail) = ring.produce(pos, rest);
        let (read, err) = ring.drain(pos, usize::MAX);
        assert_eq!(err, None, "honest frames refused");
        assert_eq!(read.len(), written);
        assert!(read[..] == rest[..written], "frames changed in the ring");
        let moved = tail != pos;
        pos = tail;
        match refused {
            None => break,
            Some(Refused::TooLarge) => {
                let (h, p) = &rest[written];
                assert!(16 + h.len() + p.len() > ring_bytes / 4, "refused a frame that fits");
                rest = &rest[written + 1..];
            }
            Some(Refused::Full) => {
                // An empty ring refuses only after padding to the lap's end.
                assert!(moved, "an empty ring refused a frame");
                rest = &rest[written..];
            }
            Some(Refused::Corrupt(c)) => panic!("honest consumer head refused: {c}"),
        }
    }
});
