//! Entry points for the fuzz targets (fuzz/, docs/FUZZING.md): the real
//! ring producer and consumer over ordinary memory, and the RMA engine fed
//! what a peer wrote. Not part of the API.

use crate::entry::{Corrupt, MAX_HEADER};
use crate::layout::{CONTROL_STRIDE, CTL_HEAD, LINE};
use crate::port::{Event, PeerId, Sink};
use crate::region::Access;
use crate::ring::{Consumer, Producer, Refused};
use crate::rma::{Path, Rma, Serve, Stats, Transfer};

/// The stamp secret of every [`TestRing`] (a segment's is random).
pub const SECRET: u64 = 0xc0ff_ee00_5eed_0001 | 1 << 63;

/// A frame as owned bytes: header, payload.
pub type Owned = (Vec<u8>, Vec<u8>);

/// A ring in ordinary memory: its data (a power of two of at least 4 KiB,
/// as words for alignment) and its consumer block.
#[derive(Debug)]
pub struct TestRing {
    /// The ring's data.
    pub data: Vec<u64>,
    ctl: [u64; CONTROL_STRIDE / 8],
}

impl TestRing {
    /// A zeroed ring of `ring_bytes` (a power of two, at least 4096).
    pub fn new(ring_bytes: usize) -> TestRing {
        assert!(ring_bytes.is_power_of_two() && ring_bytes >= 4096);
        TestRing {
            data: vec![0; ring_bytes / 8],
            ctl: [0; CONTROL_STRIDE / 8],
        }
    }

    fn ring_bytes(&self) -> usize {
        self.data.len() * 8
    }

    /// The data's and the consumer block's addresses, for a ring end.
    fn ends(&mut self) -> (*mut u8, *mut u8) {
        (self.data.as_mut_ptr().cast(), self.ctl.as_mut_ptr().cast())
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
        let (data, ctl) = self.ends();
        // SAFETY: `data` and `ctl` are live, 8-byte aligned buffers of the
        // sizes given, exclusively borrowed for the consumer's whole life.
        let mut c = unsafe { Consumer::new(data, ctl, ring_bytes, SECRET) };
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
        let (data, ctl) = self.ends();
        // SAFETY: as in `drain`, for the one producer.
        let mut p = unsafe { Producer::new(data, ctl, ring_bytes, SECRET) };
        p.set_tail(start);
        for (i, (h, pl)) in frames.iter().enumerate() {
            if let Err(e) = p.send(h, pl) {
                return (i, Some(e), p.tail());
            }
        }
        (frames.len(), None, p.tail())
    }
}

/// Bytes of the regions of [`rma_frames`], and of the guards around each.
pub const RMA_REGION: usize = 16 << 10;
const GUARD: usize = 256;
const CANARY: u8 = 0xC7;

/// Feeds frames a peer wrote, through a real ring, to a real RMA engine
/// that has two regions of its own (key field 1: read-write, 2: read-only;
/// other keys are left as they are) and four operations of its own in
/// flight with that peer (req 1 a two-copy read, 2 a CMA read, 3 a
/// two-copy write, 4 a CMA write, each of [`RMA_REGION`] bytes).
/// In the frames' headers of a request (op 1 to 4), a key field of 1 or 2
/// becomes that region's real key and the address field becomes an offset
/// from that region's base. After each frame what the engine owes is
/// dropped (there is no port to pay it with). Panics if a byte outside the
/// regions changed or an operation's progress passed its length.
pub fn rma_frames(frames: &[Owned]) -> Stats {
    let mut rma = Rma::new();
    // Each region sits between guard bytes in one allocation.
    let mut mem = vec![CANARY; 3 * (RMA_REGION + 2 * GUARD)];
    let base = mem.as_mut_ptr();
    let at = |i: usize| {
        // SAFETY: region i of 3, after its guard, inside `mem`.
        unsafe { base.add(i * (RMA_REGION + 2 * GUARD) + GUARD) }
    };
    let rights = [
        Access::REMOTE_READ.union(Access::REMOTE_WRITE),
        Access::REMOTE_READ,
        Access::LOCAL_WRITE,
    ];
    let mut keys = [0u64; 3];
    for (i, k) in keys.iter_mut().enumerate() {
        // SAFETY: `mem` outlives `rma` (dropped first, below) and nothing
        // else touches the regions while it lives.
        *k = unsafe { rma.regions_mut().register_raw(at(i), RMA_REGION, rights[i]) }.expect("random key");
    }
    let peer = 0;
    for (read, path) in [
        (true, Path::Copy),
        (true, Path::Cma),
        (false, Path::Copy),
        (false, Path::Cma),
    ] {
        let t = Transfer {
            local_key: keys[2],
            local_offset: 0,
            remote_key: 7,
            remote_addr: 0x1000,
            len: RMA_REGION,
            context: 0,
        };
        rma.inject(peer, t, read, path);
    }
    let mut ring = TestRing::new(64 << 10);
    let mut pos = 0u64;
    for (h, p) in frames {
        let mut h = h.clone();
        if h.len() == crate::rma::wire::LEN && (1..=4).contains(&h[1]) {
            let sel = u64::from_le_bytes(h[16..24].try_into().expect("8 bytes"));
            if let Some(i) = [1u64, 2].iter().position(|&s| s == sel) {
                let (b, _) = rma.regions().addr(keys[i]).expect("registered");
                let off = u64::from_le_bytes(h[24..32].try_into().expect("8 bytes"));
                h[16..24].copy_from_slice(&keys[i].to_le_bytes());
                h[24..32].copy_from_slice(&b.wrapping_add(off).to_le_bytes());
            }
        }
        let (written, _, tail) = ring.produce(pos, &[(h, p.clone())]);
        if written == 0 {
            continue;
        }
        let ring_bytes = ring.ring_bytes();
        let (data, ctl) = ring.ends();
        // SAFETY: as in `drain`.
        let mut c = unsafe { Consumer::new(data, ctl, ring_bytes, SECRET) };
        c.set_head(pos);
        let mut sink = Serve {
            rma: &mut rma,
            user: |_: Event<'_>| {},
        };
        while sink.ready(PeerId(peer)) {
            match c.consume(|frame| {
                sink.event(Event::Frame {
                    peer: PeerId(peer),
                    frame,
                })
            }) {
                Ok(Some(())) => {}
                _ => break,
            }
        }
        rma.settle();
        assert!(rma.consistent(), "an operation's progress passed its length");
        pos = tail;
    }
    rma.peer_down(peer);
    let stats = rma.stats();
    drop(rma);
    for i in 0..3 {
        let start = i * (RMA_REGION + 2 * GUARD);
        let guards = [
            &mem[start..start + GUARD],
            &mem[start + GUARD + RMA_REGION..start + 2 * GUARD + RMA_REGION],
        ];
        assert!(
            guards.iter().all(|g| g.iter().all(|&b| b == CANARY)),
            "a byte outside region {i} changed"
        );
    }
    stats
}

/// The frames of a `shm_rma` fuzz input: records of `[payload length (u16
/// LE), 48 header bytes, payload]`, a short last record cut to what is left.
pub fn rma_input(mut data: &[u8]) -> Vec<Owned> {
    let mut out = Vec::new();
    while data.len() >= 2 {
        let n = usize::from(u16::from_le_bytes([data[0], data[1]]));
        data = &data[2..];
        let h = data.len().min(crate::rma::wire::LEN);
        let header = data[..h].to_vec();
        data = &data[h..];
        let p = data.len().min(n);
        out.push((header, data[..p].to_vec()));
        data = &data[p..];
    }
    out
}

/// A `shm_rma` fuzz input holding `frames`.
pub fn rma_encode(frames: &[Owned]) -> Vec<u8> {
    let mut v = Vec::new();
    for (h, p) in frames {
        v.extend_from_slice(&(p.len().min(u16::MAX.into()) as u16).to_le_bytes());
        v.extend_from_slice(h);
        v.extend_from_slice(&p[..p.len().min(u16::MAX.into())]);
    }
    v
}
