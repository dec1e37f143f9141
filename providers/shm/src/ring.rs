//! One direction of a peer pair: a single-producer single-consumer ring of
//! entries (entry.rs) in the shared segment.
//!
//! Who touches what:
//! - the producer writes entries and reads the consumer's `head` only when
//!   its cached copy says the ring is full; it writes nothing past its
//!   entries (a stamp mixed with the segment's secret tells an entry from
//!   an earlier lap's bytes, entry.rs), so the line the consumer polls next
//!   moves between the CPUs once, when the entry is written;
//! - the consumer polls the stamp word of the entry at its head (the line
//!   the entry itself is on: a small frame costs one cache-line transfer)
//!   and publishes `head` with release once it is done with the entry; it
//!   writes nothing into the lines it read, so a large frame's lines are
//!   not pulled back and forth between the two CPUs;
//! - the consumer's `sleeping` flag and the producer's check of it after
//!   each entry make the wake-up protocol (docs/SHM.md "Wake-up").
//!
//! Both sides keep their own position privately and never read it back
//! from shared memory: a peer that scribbles over the segment can only
//! make its own entries refused. Every access to the mapping goes through
//! raw pointers and atomics (the peer may write at any time; no Rust
//! reference is ever formed over shared bytes).

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use xfer_core::unstable::rdm::transport::copy_bytes;

use crate::entry::{self, Corrupt, Decoded, KIND_FRAME, KIND_PAD, MAX_HEADER, PREFIX};
use crate::layout::{CTL_HEAD, CTL_SLEEPING, CTL_SPACE_WANTED, LINE};

/// Bytes in the peer's shared memory: a frame's header or payload as the
/// consumer found them, valid during the poll callback; core's transport
/// type, read with `copy_to` or `to_vec` (a peer may write them while they
/// are read, so they are never lent as a slice).
pub use xfer_core::unstable::rdm::transport::Bytes;

/// A frame at the consumer's head, valid during the poll callback.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    /// The transport header (at most [`MAX_HEADER`] bytes).
    pub header: Bytes<'a>,
    /// The payload.
    pub payload: Bytes<'a>,
}

/// The atomic at `base + off`.
///
/// # Safety
/// `base + off` must be 8-byte aligned and within a live mapping (or
/// buffer) of the ring for as long as the reference is used.
unsafe fn word<'a>(base: *mut u8, off: usize) -> &'a AtomicU64 {
    // SAFETY: the caller's contract; AtomicU64 has u64's layout, and
    // atomics are the sound way to share a word with another process.
    unsafe { AtomicU64::from_ptr(base.add(off).cast()) }
}

/// A ring's geometry: its data, its consumer block, its size, and the
/// secret its stamps are mixed with.
#[derive(Debug, Clone, Copy)]
struct Place {
    data: *mut u8,
    ctl: *mut u8,
    ring_bytes: usize,
    secret: u64,
}

impl Place {
    fn head(&self) -> &AtomicU64 {
        // SAFETY: the consumer block is 256-byte aligned in the mapping,
        // which outlives the ring (Place::new's contract).
        unsafe { word(self.ctl, CTL_HEAD) }
    }

    fn sleeping(&self) -> &AtomicU32 {
        // SAFETY: as for `head`; the flag is 4-byte aligned at offset 128
        // of the 256-byte block.
        unsafe { AtomicU32::from_ptr(self.ctl.add(CTL_SLEEPING).cast()) }
    }

    fn space_wanted(&self) -> &AtomicU32 {
        // SAFETY: as for `head`; the flag is 4-byte aligned at offset 8.
        unsafe { AtomicU32::from_ptr(self.ctl.add(CTL_SPACE_WANTED).cast()) }
    }

    fn line(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset.is_multiple_of(LINE) && offset < self.ring_bytes);
        // SAFETY: callers pass line-aligned offsets below ring_bytes (the
        // decoder's and the producer's checks), so the word is in the data.
        unsafe { word(self.data, offset) }
    }

    fn offset(&self, pos: u64) -> usize {
        (pos as usize) & (self.ring_bytes - 1)
    }

    fn stamp(&self, pos: u64) -> u64 {
        entry::stamp(pos, self.secret)
    }
}

/// The writing side of a ring.
#[derive(Debug)]
pub struct Producer {
    at: Place,
    tail: u64,
    head_cache: u64,
    /// Bytes the last refused frame needed (0: none refused since the
    /// last success).
    blocked: usize,
}

// SAFETY: the pointers are into a mapping owned next to the ring (peer.rs)
// and only this one producer writes entries; moving it between threads
// changes nothing about who writes what.
unsafe impl Send for Producer {}

/// Why a frame was not written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The ring has no room now; try again after the consumer caught up.
    Full,
    /// The frame can never fit: header over [`MAX_HEADER`] or the entry
    /// over a quarter of the ring.
    TooLarge,
    /// The consumer's published head is impossible: the peer is broken.
    Corrupt(Corrupt),
}

impl Producer {
    /// The producer of the ring with data at `data` and consumer block at
    /// `ctl`, starting at position 0, stamping with `secret`
    /// ([`entry::valid_secret`]).
    ///
    /// # Safety
    /// `data` (64-byte aligned, `ring_bytes`, a power of two, long) and
    /// `ctl` (`CONTROL_STRIDE` bytes, 8-byte aligned) must stay valid while the producer
    /// lives, and no one else produces into this ring.
    pub unsafe fn new(data: *mut u8, ctl: *mut u8, ring_bytes: usize, secret: u64) -> Producer {
        debug_assert!(entry::valid_secret(secret));
        Producer {
            at: Place {
                data,
                ctl,
                ring_bytes,
                secret,
            },
            tail: 0,
            head_cache: 0,
            blocked: 0,
        }
    }

    /// Starts at position `pos` instead of 0, the consumer's head being
    /// there too (the fuzz harness; a line multiple).
    pub(crate) fn set_tail(&mut self, pos: u64) {
        self.tail = pos;
        self.head_cache = pos;
    }

    /// Where the next entry goes.
    pub(crate) fn tail(&self) -> u64 {
        self.tail
    }

    /// Room for `need` bytes from the tail, reading the consumer's head
    /// only if the cached one says no.
    fn room(&mut self, need: usize) -> Result<bool, Refused> {
        let ring = self.at.ring_bytes as u64;
        if self.tail - self.head_cache + need as u64 <= ring {
            return Ok(true);
        }
        let head = self.at.head().load(Ordering::Acquire);
        // The peer writes head: it must lie between what we knew and the tail.
        if head < self.head_cache || head > self.tail || !head.is_multiple_of(LINE as u64) {
            return Err(Refused::Corrupt(Corrupt::Head(head)));
        }
        self.head_cache = head;
        // Full: no wake-up is asked for here. A producer that keeps polling
        // finds the room on a later try by itself; only one about to sleep
        // needs the consumer's signal, and asks for it then
        // (`want_space`). Asking on every refusal made a streaming consumer
        // write the producer's eventfd about once a lap, a system call per
        // few frames that no one was waiting for.
        Ok(self.tail - head + need as u64 <= ring)
    }

    /// Before the producer's side sleeps: if a frame was refused as full
    /// since the last success, asks the consumer to signal the eventfd once
    /// it frees lines. The caller then issues a SeqCst fence and checks
    /// [`room_appeared`](Self::room_appeared) (the consumer may have freed
    /// them before it saw the flag).
    pub fn want_space(&self) {
        if self.blocked != 0 {
            self.at.space_wanted().store(1, Ordering::Relaxed);
        }
    }

    /// Writes one frame. `Ok(true)` when the consumer had declared it was
    /// going to sleep: the caller must then signal its eventfd.
    pub fn send(&mut self, header: &[u8], payload: &[u8]) -> Result<bool, Refused> {
        if header.len() > MAX_HEADER || payload.len() > entry::max_payload(self.at.ring_bytes, header.len()) {
            return Err(Refused::TooLarge);
        }
        let size = entry::entry_bytes(header.len(), payload.len());
        let offset = self.at.offset(self.tail);
        if offset + size > self.at.ring_bytes {
            // Pad to the lap's end first (it fits once the consumer caught
            // up; pad and frame together might never fit).
            let pad = self.at.ring_bytes - offset;
            if !self.room(pad)? {
                self.blocked = pad;
                return Err(Refused::Full);
            }
            self.write_word1(offset, entry::word1(KIND_PAD, 0, 0));
            self.at.line(offset).store(self.at.stamp(self.tail), Ordering::Release);
            self.tail += pad as u64;
        }
        if !self.room(size)? {
            self.blocked = size;
            return Err(Refused::Full);
        }
        self.blocked = 0;
        let offset = self.at.offset(self.tail);
        self.write_word1(
            offset,
            entry::word1(KIND_FRAME, header.len() as u8, payload.len() as u32),
        );
        // SAFETY: `offset + size <= ring_bytes` (the pad above guarantees
        // it), so header and payload land inside this entry, which the
        // consumer released (room() saw its head past it). The sources are
        // caller slices, distinct from the mapping.
        unsafe {
            let dst = self.at.data.add(offset + PREFIX);
            copy_bytes(header.as_ptr(), dst, header.len());
            copy_bytes(payload.as_ptr(), dst.add(header.len()), payload.len());
        }
        self.at.line(offset).store(self.at.stamp(self.tail), Ordering::Release);
        self.tail += size as u64;
        // Pairs with the consumer's fence after it sets `sleeping`: either
        // it sees this stamp, or this load sees its flag (docs/SHM.md).
        fence(Ordering::SeqCst);
        let sleeping = self.at.sleeping();
        Ok(sleeping.load(Ordering::Relaxed) != 0 && sleeping.swap(0, Ordering::Relaxed) != 0)
    }

    /// Whether the last frame refused as `Full` (if any since the last
    /// success) would fit now: a port checks it before sleeping, since the
    /// wake-up for space may have been consumed already.
    pub fn room_appeared(&self) -> bool {
        if self.blocked == 0 {
            return false;
        }
        let head = self.at.head().load(Ordering::Acquire);
        // A hostile head only makes this side poll again, where `send`
        // checks it properly.
        self.tail.wrapping_sub(head).saturating_add(self.blocked as u64) <= self.at.ring_bytes as u64
    }

    /// Writes an entry whose word 1 is `w1`, as a broken or hostile peer
    /// would (tests of the consumer's checks).
    #[doc(hidden)]
    pub fn send_raw(&mut self, w1: u64) {
        let offset = self.at.offset(self.tail);
        self.write_word1(offset, w1);
        self.at.line(offset).store(self.at.stamp(self.tail), Ordering::Release);
        fence(Ordering::SeqCst);
    }

    fn write_word1(&self, offset: usize, w: u64) {
        // SAFETY: word 1 of a line-aligned entry inside the ring.
        unsafe { word(self.at.data, offset + 8) }.store(w, Ordering::Relaxed);
    }
}

/// The reading side of a ring.
#[derive(Debug)]
pub struct Consumer {
    at: Place,
    head: u64,
}

// SAFETY: as for Producer: one consumer, pointers into a mapping it lives with.
unsafe impl Send for Consumer {}

impl Consumer {
    /// The consumer of the ring with data at `data` and consumer block at
    /// `ctl`, starting at position 0, reading stamps mixed with `secret`.
    ///
    /// # Safety
    /// As [`Producer::new`], for the one consumer of the ring. The memory
    /// may hold anything: the consumer checks every entry.
    pub unsafe fn new(data: *mut u8, ctl: *mut u8, ring_bytes: usize, secret: u64) -> Consumer {
        Consumer {
            at: Place {
                data,
                ctl,
                ring_bytes,
                secret,
            },
            head: 0,
        }
    }

    /// Starts at position `pos` instead of 0 (the fuzz harness; a line
    /// multiple).
    pub(crate) fn set_head(&mut self, pos: u64) {
        self.head = pos;
    }

    /// Whether an entry (perhaps a broken one) waits at the head.
    #[inline]
    pub fn ready(&self) -> bool {
        let offset = self.at.offset(self.head);
        self.at.line(offset).load(Ordering::Acquire) == self.at.stamp(self.head)
    }

    /// Hands the frame at the head, if any, to `f`, then releases it.
    /// Pads are skipped. An error means the ring is broken for good.
    pub fn consume<R>(&mut self, f: impl FnOnce(Frame<'_>) -> R) -> Result<Option<R>, Corrupt> {
        loop {
            let offset = self.at.offset(self.head);
            let stamp = self.at.line(offset).load(Ordering::Acquire);
            // SAFETY: word 1 of the line at the head, inside the ring.
            let w1 = unsafe { word(self.at.data, offset + 8) }.load(Ordering::Relaxed);
            match entry::decode(stamp, w1, self.head, self.at.secret, self.at.ring_bytes)? {
                None => return Ok(None),
                Some(Decoded::Pad { size }) => self.release(size),
                Some(Decoded::Frame {
                    header_len,
                    payload_len,
                    size,
                }) => {
                    // SAFETY: decode checked offset + size <= ring_bytes and
                    // size covers PREFIX + header + payload.
                    let base = unsafe { self.at.data.add(offset + PREFIX) };
                    // SAFETY: the header lies within the checked entry, in
                    // the mapping the consumer (borrowed for the callback)
                    // keeps alive; it is only copied out.
                    let header = unsafe { Bytes::shared(base, header_len) };
                    // SAFETY: the payload follows it within the same entry.
                    let payload = unsafe { Bytes::shared(base.add(header_len), payload_len) };
                    let frame = Frame { header, payload };
                    let r = f(frame);
                    self.release(size);
                    return Ok(Some(r));
                }
            }
        }
    }

    /// Publishes the new head past the entry: the producer may reuse its
    /// lines. Nothing is written into them.
    fn release(&mut self, size: usize) {
        self.head += size as u64;
        self.at.head().store(self.head, Ordering::Release);
    }

    /// After consuming: whether the producer had found the ring full and
    /// asked to be woken (the flag is cleared). Pairs with the producer's
    /// fence after it set the flag.
    pub fn space_wanted(&self) -> bool {
        fence(Ordering::SeqCst);
        let f = self.at.space_wanted();
        f.load(Ordering::Relaxed) != 0 && f.swap(0, Ordering::Relaxed) != 0
    }

    /// Declares (or withdraws) that this side is about to block. After
    /// arming, the caller must `fence(SeqCst)` and check [`ready`](Self::ready)
    /// before sleeping.
    pub fn set_sleeping(&self, on: bool) {
        self.at.sleeping().store(u32::from(on), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::CONTROL_STRIDE;

    const SECRET: u64 = 0x9e37_79b9_7f4a_7c15;

    /// 4 KiB of ring data and a consumer block, line aligned.
    #[repr(C, align(64))]
    struct Memory {
        data: [u8; 4096],
        ctl: [u8; CONTROL_STRIDE],
    }

    /// A frame's payload of `entry` bytes in all (with an 8-byte header),
    /// holding `word` at the entry's byte `at` (a multiple of 8).
    fn payload(entry: usize, at: usize, word: u64) -> Vec<u8> {
        let mut p = vec![0u8; entry - PREFIX - 8];
        let i = at - PREFIX - 8;
        p[i..i + 8].copy_from_slice(&word.to_le_bytes());
        p
    }

    /// A fresh (zeroed) ring's memory and its two ends, which point into
    /// it: the caller keeps the box alive beside them.
    fn ring() -> (Box<Memory>, Producer, Consumer) {
        let mut m = Box::new(Memory {
            data: [0; 4096],
            ctl: [0; CONTROL_STRIDE],
        });
        let (data, ctl) = (m.data.as_mut_ptr(), m.ctl.as_mut_ptr());
        // SAFETY: the box is line aligned and handed out with both ends,
        // which the tests drop before it; one producer and one consumer.
        let (p, c) = unsafe {
            (
                Producer::new(data, ctl, 4096, SECRET),
                Consumer::new(data, ctl, 4096, SECRET),
            )
        };
        (m, p, c)
    }

    /// An earlier lap's payload that holds, at the line where a later entry
    /// will start, what that entry's position looks like to a program (the
    /// position with its low bit set, as format 3 stamped it) or 0 is never
    /// taken for the entry: the stamp is mixed with the segment's secret,
    /// and the producer clears nothing ahead of itself.
    #[test]
    fn an_earlier_laps_payload_never_passes_for_an_entry() {
        for stale in [(4096 + 192) | 1, 0] {
            let (_m, mut p, mut c) = ring();
            // Lap 2's entry at position 4096 + 192 starts on the line where
            // lap 1's first frame holds `stale`.
            let sizes = [256usize, 1024, 1024, 1024, 768, 192];
            for (i, &size) in sizes.iter().enumerate() {
                let body = if i == 0 {
                    payload(size, 192, stale)
                } else {
                    payload(size, 64, 0)
                };
                assert_eq!(p.send(&[0; 8], &body), Ok(false), "frame {i}");
                let got = c.consume(|f| f.payload.len()).expect("sound");
                assert_eq!(got, Some(body.len()), "frame {i}");
            }
            assert_eq!(p.tail(), 4096 + 192);
            assert!(!c.ready(), "{stale:#x} taken for an entry");
            assert!(matches!(c.consume(|_| ()), Ok(None)));
            // The real entry there is read once written.
            p.send(b"next", &[1, 2, 3]).expect("room");
            assert_eq!(c.consume(|f| f.header.to_vec()).expect("sound"), Some(b"next".to_vec()));
        }
    }

    /// Frames with headers and payloads of every small length (the two-word
    /// copies and `memcpy` both) arrive byte for byte.
    #[test]
    fn frames_of_every_small_length_arrive_whole() {
        let (_m, mut p, mut c) = ring();
        let src: Vec<u8> = (1..=64).collect();
        for hlen in [0usize, 8, 16, 24, 56] {
            for plen in 0..=40 {
                let (h, b) = (&src[..hlen], &src[64 - plen..]);
                assert_eq!(p.send(h, b), Ok(false), "{hlen} + {plen}");
                let got = c
                    .consume(|f| {
                        let (mut gh, mut gb) = (vec![0u8; f.header.len()], vec![0u8; f.payload.len()]);
                        f.header.copy_to(&mut gh);
                        f.payload.copy_to(&mut gb);
                        (gh, gb)
                    })
                    .expect("a well-formed ring");
                assert_eq!(got, Some((h.to_vec(), b.to_vec())), "{hlen} + {plen}");
            }
        }
    }

    /// With nothing cleared ahead of the producer, a ring takes entries up
    /// to its whole size, refuses more as `Full`, and takes one again once
    /// the consumer released one.
    #[test]
    fn the_ring_holds_its_whole_size() {
        let (_m, mut p, mut c) = ring();
        for i in 0..64 {
            assert_eq!(p.send(&[], &[i as u8]), Ok(false), "line {i}");
        }
        assert_eq!(p.send(&[], &[0]), Err(Refused::Full));
        assert_eq!(c.consume(|f| f.payload.to_vec()).expect("sound"), Some(vec![0]));
        assert_eq!(p.send(&[], &[64]), Ok(false));
        for i in 1..=64 {
            assert_eq!(c.consume(|f| f.payload.to_vec()).expect("sound"), Some(vec![i as u8]));
        }
        assert!(!c.ready());
    }
}
