//! Entry points for the fuzz targets (fuzz/, docs/FUZZING.md): the real
//! ring producer and consumer over ordinary memory. Not part of the API.

use crate::entry::{Corrupt, MAX_HEADER};
use crate::layout::{CTL_HEAD, LINE};
use crate::ring::{Consumer, Producer, Refused};

/// A frame as owned bytes: header, payload.
pub type Owned = (Vec<u8>, Vec<u8>);

/// A ring in ordinary memory: its data (a power of two of at least 4 KiB,
/// as words for alignment) and its consumer block.
#[derive(Debug)]
pub struct TestRing {
    /// The ring's data.
    pub data: Vec<u64>,
    ctl: [u64; 16],
}

impl TestRing {
    /// A zeroed ring of `ring_bytes` (a power of two, at least 4096).
    pub fn new(ring_bytes: usize) -> TestRing {
        assert!(ring_bytes.is_power_of_two() && ring_bytes >= 4096);
        TestRing {
            data: vec![0; ring_bytes / 8],
            ctl: [0; 16],
        }
    }

    fn ring_bytes(&self) -> usize {
        self.data.len() * 8
    }

    /// The data as bytes, for writing a peer's arbitrary content.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let len = self.ring_bytes();
        // SAFETY: `data` is `len` initialised bytes; u8 has no alignment or
        // validity requirement; the borrow of self covers the slice's life.
        unsafe { std::slice::from_raw_parts_mut(self.data.as_mut_ptr().cast(), len) }
    }

    /// Runs the real consumer from position `start` (rounded down to a
    /// line) over whatever the ring holds, as if a peer had written it:
    /// until the ring is empty, broken, or `max` frames were read. Returns
    /// the frames (copied out) and the error that stopped it, if any.
    pub fn drain(&mut self, start: u64, max: usize) -> (Vec<Owned>, Option<Corrupt>) {
        let ring_bytes = self.ring_bytes();
        // SAFETY: `data` and `ctl` are live, 8-byte aligned buffers of the
        // sizes given, exclusively borrowed for the consumer's whole life.
        let mut c = unsafe { Consumer::new(self.data.as_mut_ptr().cast(), self.ctl.as_mut_ptr().cast(), ring_bytes) };
        c.set_head(start & !(LINE as u64 - 1));
        let mut out = Vec::new();
        while out.len() < max {
            match c.consume(|f| {
                assert!(f.header.len() <= MAX_HEADER);
                assert!(f.header.len() + f.payload.len() <= ring_bytes);
                (f.header.to_vec(), f.payload.to_vec())
            }) {
                Ok(Some(f)) => out.push(f),
                Ok(None) => return (out, None),
                Err(e) => return (out, Some(e)),
            }
        }
        (out, None)
    }

    /// Runs the real producer from position `start` (a line multiple; the
    /// consumer's head is set there too): writes frames until one is
    /// refused. Returns how many were written, the refusal, and the tail
    /// (where the producer would write next).
    pub fn produce(&mut self, start: u64, frames: &[Owned]) -> (usize, Option<Refused>, u64) {
        let ring_bytes = self.ring_bytes();
        let start = start & !(LINE as u64 - 1);
        self.ctl[CTL_HEAD / 8] = start;
        // SAFETY: as in `drain`, for the one producer.
        let mut p = unsafe { Producer::new(self.data.as_mut_ptr().cast(), self.ctl.as_mut_ptr().cast(), ring_bytes) };
        p.set_tail(start);
        for (i, (h, pl)) in frames.iter().enumerate() {
            if let Err(e) = p.send(h, pl) {
                return (i, Some(e), p.tail());
            }
        }
        (frames.len(), None, p.tail())
    }
}
