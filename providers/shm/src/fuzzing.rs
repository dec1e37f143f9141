//! Entry points for the fuzz targets (fuzz/, docs/FUZZING.md); not part of
//! the API.

use crate::entry::{Corrupt, MAX_HEADER};
use crate::layout::LINE;
use crate::ring::Consumer;

/// Runs the ring consumer over `ring` (whose length must be a power of two
/// of at least 4 KiB, 8-byte aligned memory given as words) from position
/// `start` (rounded down to a line), as if a peer had written those bytes:
/// consumes until the ring is empty, broken, or `max_frames` were read,
/// copying every header and payload out. Returns the frames read and the
/// error that stopped it, if any.
pub fn drain_ring(ring: &mut [u64], start: u64, max_frames: usize) -> (usize, Option<Corrupt>) {
    let ring_bytes = ring.len() * 8;
    assert!(ring_bytes.is_power_of_two() && ring_bytes >= 4096);
    let mut ctl = [0u64; 16];
    // SAFETY: `ring` and `ctl` are live, 8-byte aligned buffers of the sizes
    // given, exclusively borrowed for the consumer's whole life (this call).
    let mut c = unsafe { Consumer::new(ring.as_mut_ptr().cast(), ctl.as_mut_ptr().cast(), ring_bytes) };
    c.set_head(start & !(LINE as u64 - 1));
    let mut n = 0;
    let mut buf = vec![0u8; ring_bytes];
    while n < max_frames {
        match c.consume(|f| {
            assert!(f.header.len() <= MAX_HEADER);
            assert!(f.header.len() + f.payload.len() <= ring_bytes);
            f.header.copy_to(&mut buf);
            f.payload.copy_to(&mut buf);
        }) {
            Ok(Some(())) => n += 1,
            Ok(None) => return (n, None),
            Err(e) => return (n, Some(e)),
        }
    }
    (n, None)
}
