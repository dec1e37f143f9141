//! What the soak sends: a reproducible mix of operations and the bytes each
//! carries, so either side can check any payload from its tag alone.

/// Tag bit of injected messages: the peer checks and counts them, no echo.
pub const INJECT: u64 = 1 << 63;
/// Largest message (rendezvous on every provider).
pub const MAX_MSG: usize = 1 << 20;
/// Bytes of the peer's RMA region; each window slot owns `SLOT` of them.
pub const REGION: usize = 4 << 20;
/// Operations in flight at once (and RMA slots).
pub const WINDOW: usize = 16;
/// RMA bytes per window slot.
pub const SLOT: usize = REGION / WINDOW;
/// Largest injected payload (below every provider's inject size).
pub const MAX_INJECT: usize = 256;

/// One operation of the mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// A tagged message the peer checks and sends back.
    Echo { len: usize },
    /// An RMA write into this slot's part of the peer's region, then a read
    /// of it back; `data`: written with immediate data (the peer counts it).
    WriteRead { len: usize, offset: usize, data: bool },
    /// A tagged inject the peer checks and counts.
    Inject { len: usize },
}

/// xorshift64*: the same sequence on every run.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }

    /// A message length: mostly small (eager), some medium, some large
    /// (rendezvous), zero-length now and then.
    pub fn len(&mut self, max: usize) -> usize {
        match self.next() % 100 {
            0..=4 => 0,
            5..=59 => self.range(1, 256),
            60..=84 => self.range(257, 64 << 10),
            _ => self.range((64 << 10) + 1, max),
        }
    }

    /// The next operation of the mix, for window slot `slot`.
    pub fn op(&mut self, slot: usize) -> Op {
        match self.next() % 10 {
            0 | 1 => {
                let len = self.len(SLOT).max(1);
                let offset = slot * SLOT + self.range(0, SLOT - len);
                Op::WriteRead {
                    len,
                    offset,
                    data: self.next().is_multiple_of(2),
                }
            }
            2 => Op::Inject {
                len: self.range(0, MAX_INJECT),
            },
            _ => Op::Echo { len: self.len(MAX_MSG) },
        }
    }
}

/// The payload of operation `seq`: position- and sequence-dependent.
pub fn fill(buf: &mut [u8], seq: u64) {
    let s = seq.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (s >> ((i & 7) * 8)) as u8 ^ (i as u8).wrapping_mul(151);
    }
}

/// Whether `buf` holds operation `seq`'s payload.
pub fn check(buf: &[u8], seq: u64) -> bool {
    let s = seq.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    buf.iter()
        .enumerate()
        .all(|(i, &b)| b == (s >> ((i & 7) * 8)) as u8 ^ (i as u8).wrapping_mul(151))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_differ_by_sequence_and_check() {
        let (mut a, mut b) = (vec![0; 300], vec![0; 300]);
        fill(&mut a, 7);
        fill(&mut b, 8);
        assert_ne!(a, b);
        assert!(check(&a, 7) && !check(&a, 8));
        a[299] ^= 1;
        assert!(!check(&a, 7));
    }

    #[test]
    fn the_mix_has_every_kind_and_stays_in_bounds() {
        let mut rng = Rng::new(1);
        let (mut echo, mut rma, mut inject, mut big) = (0, 0, 0, 0);
        for i in 0..10_000 {
            let slot = i % WINDOW;
            match rng.op(slot) {
                Op::Echo { len } => {
                    assert!(len <= MAX_MSG);
                    echo += 1;
                    big += usize::from(len > 64 << 10);
                }
                Op::WriteRead { len, offset, .. } => {
                    assert!(len >= 1 && offset >= slot * SLOT && offset + len <= (slot + 1) * SLOT);
                    rma += 1;
                }
                Op::Inject { len } => {
                    assert!(len <= MAX_INJECT);
                    inject += 1;
                }
            }
        }
        assert!(
            echo > 5000 && rma > 1000 && inject > 500 && big > 500,
            "{echo} {rma} {inject} {big}"
        );
    }
}
