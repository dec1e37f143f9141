//! A fast, non-cryptographic hasher for the maps on the data path.
//!
//! The std `HashMap` hashes with SipHash-1-3, which resists hash flooding
//! but costs tens of nanoseconds per small key. The keys hashed per message
//! here (peer handles, endpoint names, QP numbers) are chosen by the local
//! program or its address vector, not by peers, so flooding is not a
//! concern; this is the multiply-rotate hash of rustc's `FxHasher`.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` with [`FxHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// rustc's Fx hash: one rotate, xor and multiply per word.
#[derive(Debug, Default, Clone, Copy)]
pub struct FxHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_keys_hash_apart_and_maps_work() {
        let mut m: FastMap<[u8; 16], u32> = FastMap::default();
        for i in 0..1000u32 {
            let mut k = [0u8; 16];
            k[12..].copy_from_slice(&i.to_le_bytes());
            m.insert(k, i);
        }
        assert_eq!(m.len(), 1000);
        let mut k = [0u8; 16];
        k[12..].copy_from_slice(&777u32.to_le_bytes());
        assert_eq!(m.get(&k), Some(&777));
        let h = |x: u64| {
            let mut f = FxHasher::default();
            f.write_u64(x);
            f.finish()
        };
        assert_ne!(h(1), h(2));
    }
}
