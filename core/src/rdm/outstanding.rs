//! Operations outstanding with a peer, named on the wire by a token.
//!
//! A rendezvous send waits for its receiver's answer, a matched rendezvous
//! receive for its data, an RMA request for its response: each is kept
//! under a slab key, and the peer names it by a token, the key with a
//! generation. Keys are reused once an operation ends; the generation tells
//! a late or forged answer for an ended operation from one for the
//! operation that now holds the key, so it can never complete the wrong one.
//!
//! A token is 64 bits: the key in the low half, the generation in the high
//! half, which is never 0, so no token is 0 (a wire field may use 0 for "no
//! token"). A transport whose wire has two 32-bit fields carries the halves
//! ([`split`], [`join`]).

use std::ops::{Index, IndexMut};

use slab::Slab;

/// A token's two halves: (key, generation).
pub fn split(token: u64) -> (u32, u32) {
    (token as u32, (token >> 32) as u32)
}

/// A token from its two halves.
pub fn join(key: u32, gen: u32) -> u64 {
    u64::from(key) | (u64::from(gen) << 32)
}

struct Slot<T> {
    gen: u32,
    op: T,
}

/// Outstanding operations by key, each with the token its peer names it by.
pub struct Outstanding<T> {
    slots: Slab<Slot<T>>,
    gen: u32,
}

impl<T> Default for Outstanding<T> {
    fn default() -> Self {
        Outstanding::new()
    }
}

impl<T> Outstanding<T> {
    /// An empty set.
    pub fn new() -> Outstanding<T> {
        Outstanding {
            slots: Slab::new(),
            gen: 0,
        }
    }

    /// Keeps `op` under a fresh key (and generation); returns the key.
    pub fn insert(&mut self, op: T) -> usize {
        self.gen = self.gen.wrapping_add(1).max(1);
        self.slots.insert(Slot { gen: self.gen, op })
    }

    /// The token a peer names the operation under `key` by. The key must
    /// be live (one of ours, not yet removed).
    pub fn token(&self, key: usize) -> u64 {
        join(key as u32, self.slots[key].gen)
    }

    /// The key of the live operation a peer's `token` names, if any: `None`
    /// for an ended operation, a reused key's older generation, or a token
    /// that names nothing.
    pub fn key_of(&self, token: u64) -> Option<usize> {
        let (key, gen) = split(token);
        let key = key as usize;
        self.slots.get(key).filter(|s| s.gen == gen).map(|_| key)
    }

    /// The operation under `key`.
    pub fn get(&self, key: usize) -> Option<&T> {
        self.slots.get(key).map(|s| &s.op)
    }

    /// The operation under `key`, to change.
    pub fn get_mut(&mut self, key: usize) -> Option<&mut T> {
        self.slots.get_mut(key).map(|s| &mut s.op)
    }

    /// The operation a peer's `token` names, if it is live.
    pub fn by_token(&self, token: u64) -> Option<(usize, &T)> {
        let key = self.key_of(token)?;
        Some((key, &self.slots[key].op))
    }

    /// Ends the operation under `key` (which must be live).
    pub fn remove(&mut self, key: usize) -> T {
        self.slots.remove(key).op
    }

    /// Ends the operation under `key`, if it is live.
    pub fn try_remove(&mut self, key: usize) -> Option<T> {
        self.slots.try_remove(key).map(|s| s.op)
    }

    /// Ends every operation `doomed` picks (those of a failed connection),
    /// returning them with their keys and tokens, oldest key first.
    pub fn remove_where(&mut self, mut doomed: impl FnMut(&T) -> bool) -> Vec<(usize, u64, T)> {
        let keys: Vec<usize> = self
            .slots
            .iter()
            .filter(|(_, s)| doomed(&s.op))
            .map(|(k, _)| k)
            .collect();
        keys.into_iter()
            .map(|k| {
                let s = self.slots.remove(k);
                (k, join(k as u32, s.gen), s.op)
            })
            .collect()
    }

    /// Ends every operation, returning them.
    pub fn drain(&mut self) -> Vec<T> {
        self.slots.drain().map(|s| s.op).collect()
    }

    /// The operations with their keys.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &T)> {
        self.slots.iter().map(|(k, s)| (k, &s.op))
    }

    /// The operations with their keys, to change.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (usize, &mut T)> {
        self.slots.iter_mut().map(|(k, s)| (k, &mut s.op))
    }

    /// How many are outstanding.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

impl<T> Index<usize> for Outstanding<T> {
    type Output = T;

    fn index(&self, key: usize) -> &T {
        &self.slots[key].op
    }
}

impl<T> IndexMut<usize> for Outstanding<T> {
    fn index_mut(&mut self, key: usize) -> &mut T {
        &mut self.slots[key].op
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_of_an_ended_operation_never_names_the_one_reusing_its_key() {
        let mut o = Outstanding::new();
        let a = o.insert("first");
        let old = o.token(a);
        assert_eq!(o.by_token(old), Some((a, &"first")));
        o.remove(a);
        let b = o.insert("second");
        assert_eq!(a, b, "the key is reused");
        assert_eq!(o.key_of(old), None, "the old token is stale");
        assert_eq!(o.by_token(o.token(b)), Some((b, &"second")));
    }

    #[test]
    fn tokens_that_name_nothing_are_refused() {
        let mut o = Outstanding::new();
        let k = o.insert(1u8);
        let t = o.token(k);
        assert_eq!(o.key_of(t ^ (1 << 40)), None, "wrong generation");
        assert_eq!(o.key_of(t + 1), None, "no such key");
        assert_eq!(o.key_of(u64::MAX), None);
    }

    #[test]
    fn no_token_is_zero() {
        let mut o = Outstanding::new();
        o.gen = u32::MAX;
        let k = o.insert(());
        assert_ne!(o.token(k), 0, "the generation skips 0 when it wraps");
    }

    #[test]
    fn halves_round_trip() {
        for t in [0, 1, u64::MAX, 0x1234_5678_9abc_def0] {
            let (k, g) = split(t);
            assert_eq!(join(k, g), t);
        }
    }

    #[test]
    fn a_failed_connection_takes_only_its_operations() {
        let mut o = Outstanding::new();
        let keys: Vec<usize> = (0..6).map(|i| o.insert((i % 2, i))).collect();
        let tokens: Vec<u64> = keys.iter().map(|&k| o.token(k)).collect();
        let gone = o.remove_where(|&(conn, _)| conn == 1);
        assert_eq!(gone.len(), 3);
        for (k, t, (conn, i)) in gone {
            assert_eq!(conn, 1);
            assert_eq!(t, tokens[i]);
            assert_eq!(k, keys[i]);
            assert_eq!(o.key_of(t), None);
        }
        assert_eq!(o.len(), 3);
        assert!(!o.iter().any(|(_, &(conn, _))| conn == 1));
    }
}
