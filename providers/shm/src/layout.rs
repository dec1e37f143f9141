//! Where things are in a segment (docs/SHM.md "Segment layout").
//!
//! ```text
//! 0      header page: magic, version, ring size, stamp secret (read once,
//!        when mapped)
//! 1024   fence of the connector as an RMA target (epoch; busy 64 B on), 128 B
//! 1152   fence of the acceptor as an RMA target, 128 B
//! 4096   ring 0 consumer block, 256 B: head and space-wanted flag on one
//!        line, the sleeping flag on a line of its own 128 B further
//! 4352   ring 1 consumer block, 256 B
//! 8192   ring 0 data: ring_bytes (connector -> acceptor)
//! 8192 + ring_bytes   ring 1 data: ring_bytes (acceptor -> connector)
//! ```
//!
//! The consumer writes `head` after every entry and the producer reads
//! `sleeping` after every entry: on one line, that line would travel
//! between the two CPUs twice a message. Each of the two sits in its own
//! 128 bytes (a pair of lines, so the adjacent-line prefetcher does not
//! pair it with the other's), and the data regions start on pages.

/// Bytes of a cache line: entries start on one and are sized in whole ones.
pub const LINE: usize = 64;

/// The segment's magic, "XFERSHM\0" little-endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"XFERSHM\0");
/// The ring format's version; a peer with another refuses the segment.
/// 2: the producer clears the stamp word of the line after each entry, and
/// the consumer writes nothing into the lines it read (1 had the consumer
/// clear them, so a version-2 consumer would misread a version-1 producer).
/// 3: the sleeping flag moved off the head's line.
/// 4: stamps are mixed with the segment's secret and the producer clears
/// nothing past its entries.
/// 5: the ring's format is 4's; what the engine sends over it is new: a
/// receiver may finish a pushed rendezvous by pulling the rest (a `Fin`
/// while the sender pushes, a `Data` flagged `LAST`), which a sender of 4
/// would take for a protocol violation.
pub const VERSION: u32 = 5;

/// Offset of the header's magic (u64), version (u32), ring size (u32).
pub const HDR_MAGIC: usize = 0;
/// Offset of the version.
pub const HDR_VERSION: usize = 8;
/// Offset of the ring size.
pub const HDR_RING_BYTES: usize = 12;
/// Offset of the secret (u64, top bit set) both rings' stamps are mixed with.
pub const HDR_SECRET: usize = 16;

/// Offset of the RMA fences (fence.rs): one per side as a target.
pub const FENCE: usize = 1024;
/// Bytes given to one fence.
pub const FENCE_STRIDE: usize = 128;
/// Offset of the epoch (u64, written by the target) within a fence.
pub const FENCE_EPOCH: usize = 0;
/// Offset of the busy word (u64, written by the initiator) within a fence,
/// on its own cache line.
pub const FENCE_BUSY: usize = 64;

/// Offset of the fence of the side that writes ring `r` (its target fence).
pub const fn fence(r: usize) -> usize {
    FENCE + r * FENCE_STRIDE
}

/// Offset of the consumer blocks.
pub const CONTROL: usize = 4096;
/// Bytes given to one consumer block.
pub const CONTROL_STRIDE: usize = 256;
/// Offset of the head (u64) within a consumer block.
pub const CTL_HEAD: usize = 0;
/// Offset of the producer's space-wanted flag (u32) within a consumer
/// block: set by a producer that found the ring full, read by the
/// consumer after each batch, so it lives on the line the consumer owns.
pub const CTL_SPACE_WANTED: usize = 8;
/// Offset of the sleeping flag (u32) within a consumer block: written by
/// the consumer only around a wait, read by the producer after each entry.
pub const CTL_SLEEPING: usize = 128;
// What the consumer writes per entry and what the producer reads per entry
// never share a pair of lines; what the consumer reads per batch shares the
// line it writes; the block fits its stride.
const _: () = assert!(
    CTL_HEAD / 128 != CTL_SLEEPING / 128
        && CTL_SPACE_WANTED / LINE == CTL_HEAD / LINE
        && CTL_SLEEPING + 4 <= CONTROL_STRIDE
);

/// Offset of ring 0's data.
pub const DATA: usize = 8192;

/// Smallest ring: one page.
pub const MIN_RING_BYTES: usize = 4096;
/// Largest ring a port accepts from a peer, whatever its own setting.
pub const MAX_RING_BYTES: usize = 64 << 20;

/// Bytes of a segment whose rings hold `ring_bytes` each.
pub const fn segment_bytes(ring_bytes: usize) -> usize {
    DATA + 2 * ring_bytes
}

/// Offset of ring `r`'s consumer block.
pub const fn control(r: usize) -> usize {
    CONTROL + r * CONTROL_STRIDE
}

/// Offset of ring `r`'s data.
pub const fn data(r: usize, ring_bytes: usize) -> usize {
    DATA + r * ring_bytes
}

/// Whether `ring_bytes` is a ring size this code maps: a power of two
/// between [`MIN_RING_BYTES`] and `max`.
pub fn valid_ring_bytes(ring_bytes: usize, max: usize) -> bool {
    ring_bytes.is_power_of_two() && (MIN_RING_BYTES..=max.min(MAX_RING_BYTES)).contains(&ring_bytes)
}

/// The ring a side writes: the connector ring 0, the acceptor ring 1.
pub const fn tx_ring(connector: bool) -> usize {
    if connector {
        0
    } else {
        1
    }
}
