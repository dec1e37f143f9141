//! The registration tree: disjoint address ranges ordered by start.
//!
//! # Why not a general interval tree
//!
//! The cache keeps the ranges a lookup can return disjoint: a new
//! registration that would overlap an existing one absorbs it instead (see
//! [`MrCache`](super::MrCache)). Over disjoint ranges sorted by start, the
//! only range that can contain an address is the one with the greatest start
//! not above it, so "which range covers `[a, b)`" is a predecessor search
//! and a comparison with that range's end, and "which ranges overlap
//! `[a, b)`" is that predecessor plus the ranges starting inside `[a, b)`.
//! An interval tree (libfabric's red-black tree augmented with the maximum
//! end) would allow overlapping ranges, which the cache never stores.
//!
//! # Why not `BTreeMap`
//!
//! `BTreeMap::range(..=a).next_back()` is correct and O(log n), but its
//! range search costs 75–100 ns at 1,000 entries with everything in cache
//! (uniform random addresses, 2-CPU EPYC VM). The search here is two binary
//! searches (`partition_point`, branch-free) over plain sorted arrays: a top
//! array holding the first start of every block, then the block's starts,
//! 64 at most — a B+ tree of height two, 25–30 ns on the same workload. At
//! 100,000 entries with uniformly random addresses both are bound by cache
//! and TLB misses on that VM (250–350 ns each); see `benches/mr_cache.rs`.
//! The starts are kept apart from the ends and values so that the arrays
//! searched stay small: the top array holds one word per block.
//!
//! Inserting or removing shifts at most one block and the top array
//! (O(B + n/B) words); blocks split when full and merge when sparse.
//! [`RangeMap::insert`] refuses a range that overlaps one already present.

/// Disjoint, non-empty half-open ranges `[start, end)` of `usize`, each with a
/// value.
#[derive(Debug, Clone)]
pub struct RangeMap<V> {
    /// `tops[i]` is `blocks[i].starts[0]`; no block is empty.
    tops: Vec<usize>,
    blocks: Vec<Block<V>>,
    len: usize,
    max_block: usize,
}

#[derive(Debug, Clone)]
struct Block<V> {
    starts: Vec<usize>,
    /// `(end, value)` of the range at the same index in `starts`.
    slots: Vec<(usize, V)>,
}

impl<V> Block<V> {
    fn with_capacity(n: usize) -> Self {
        Block {
            starts: Vec::with_capacity(n),
            slots: Vec::with_capacity(n),
        }
    }
}

impl<V> Default for RangeMap<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V> RangeMap<V> {
    /// An empty map.
    pub const fn new() -> Self {
        Self::with_block_size(64)
    }

    /// An empty map with at most `max_block` ranges a block (at least 4);
    /// small values exercise splitting and merging in tests.
    pub const fn with_block_size(max_block: usize) -> Self {
        RangeMap {
            tops: Vec::new(),
            blocks: Vec::new(),
            len: 0,
            max_block: if max_block < 4 { 4 } else { max_block },
        }
    }

    /// Number of ranges.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if there are no ranges.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Position `(block, index)` of the range with the greatest start not
    /// above `addr`.
    #[inline]
    fn predecessor(&self, addr: usize) -> Option<(usize, usize)> {
        let b = self.tops.partition_point(|&k| k <= addr).checked_sub(1)?;
        let i = self.blocks[b].starts.partition_point(|&k| k <= addr) - 1;
        Some((b, i))
    }

    /// The position after `(b, i)`, if any.
    fn next_pos(&self, (b, i): (usize, usize)) -> Option<(usize, usize)> {
        if i + 1 < self.blocks[b].starts.len() {
            Some((b, i + 1))
        } else if b + 1 < self.blocks.len() {
            Some((b + 1, 0))
        } else {
            None
        }
    }

    fn at(&self, (b, i): (usize, usize)) -> (usize, usize, &V) {
        let block = &self.blocks[b];
        let (end, ref v) = block.slots[i];
        (block.starts[i], end, v)
    }

    /// Inserts `[start, end)`. Refuses (handing `value` back) an empty range
    /// or one that overlaps a range already present; ranges that merely touch
    /// (`end == other.start`) are fine.
    pub fn insert(&mut self, start: usize, end: usize, value: V) -> Result<(), V> {
        if start >= end {
            return Err(value);
        }
        // Disjointness: if any range overlaps, the last one starting before
        // `end` does.
        if let Some(p) = self.predecessor(end - 1) {
            if self.at(p).1 > start {
                return Err(value);
            }
        }
        self.len += 1;
        let b = match self.tops.partition_point(|&k| k <= start).checked_sub(1) {
            Some(b) => b,
            None if self.blocks.is_empty() => {
                let mut block = Block::with_capacity(self.max_block + 1);
                block.starts.push(start);
                block.slots.push((end, value));
                self.tops.push(start);
                self.blocks.push(block);
                return Ok(());
            }
            None => {
                // Before every range: front of the first block.
                self.tops[0] = start;
                0
            }
        };
        let block = &mut self.blocks[b];
        let i = block.starts.partition_point(|&k| k < start);
        block.starts.insert(i, start);
        block.slots.insert(i, (end, value));
        if block.starts.len() > self.max_block {
            let half = block.starts.len() / 2;
            let mut right = Block::with_capacity(self.max_block + 1);
            right.starts.extend(block.starts.drain(half..));
            right.slots.extend(block.slots.drain(half..));
            self.tops.insert(b + 1, right.starts[0]);
            self.blocks.insert(b + 1, right);
        }
        Ok(())
    }

    /// Removes the range starting at `start`; returns its end and value.
    pub fn remove(&mut self, start: usize) -> Option<(usize, V)> {
        let (b, i) = self.predecessor(start)?;
        let block = &mut self.blocks[b];
        if block.starts[i] != start {
            return None;
        }
        block.starts.remove(i);
        let slot = block.slots.remove(i);
        self.len -= 1;
        if block.starts.is_empty() {
            self.tops.remove(b);
            self.blocks.remove(b);
        } else {
            self.tops[b] = block.starts[0];
            self.merge_if_sparse(b);
        }
        Some(slot)
    }

    /// Joins block `b` with a neighbour when both fit comfortably in one.
    fn merge_if_sparse(&mut self, b: usize) {
        if self.blocks[b].starts.len() >= self.max_block / 4 {
            return;
        }
        let limit = self.max_block * 3 / 4;
        let (left, right) =
            if b + 1 < self.blocks.len() && self.blocks[b].starts.len() + self.blocks[b + 1].starts.len() <= limit {
                (b, b + 1)
            } else if b > 0 && self.blocks[b - 1].starts.len() + self.blocks[b].starts.len() <= limit {
                (b - 1, b)
            } else {
                return;
            };
        let moved = self.blocks.remove(right);
        self.tops.remove(right);
        let into = &mut self.blocks[left];
        into.starts.extend(moved.starts);
        into.slots.extend(moved.slots);
    }

    /// The range starting exactly at `start`: its end and value.
    pub fn get(&self, start: usize) -> Option<(usize, &V)> {
        let p = self.predecessor(start)?;
        let (s, e, v) = self.at(p);
        (s == start).then_some((e, v))
    }

    /// The range that contains all of `[start, end)`, as `(start, end,
    /// value)`. An empty query (`start == end`) asks for the range containing
    /// the address `start`.
    #[inline]
    pub fn find_covering(&self, start: usize, end: usize) -> Option<(usize, usize, &V)> {
        let (s, e, v) = self.at(self.predecessor(start)?);
        (e > start && e >= end).then_some((s, e, v))
    }

    /// Every range that shares at least one address with `[start, end)`, in
    /// address order. Empty for an empty query.
    pub fn overlapping(&self, start: usize, end: usize) -> Iter<'_, V> {
        if start >= end {
            return Iter {
                map: self,
                pos: None,
                stop: 0,
            };
        }
        // At most one range starts before `start` and reaches into the query:
        // the predecessor, because ranges are disjoint.
        let pos = match self.predecessor(start) {
            Some(p) if self.at(p).1 > start => Some(p),
            Some(p) => self.next_pos(p),
            None if self.is_empty() => None,
            None => Some((0, 0)),
        };
        Iter {
            map: self,
            pos,
            stop: end,
        }
    }

    /// Every range that overlaps `[start, end)` or touches it (ends at `start`
    /// or starts at `end`), in address order: the candidates for merging.
    pub fn touching(&self, start: usize, end: usize) -> Iter<'_, V> {
        // [a, b) touches [start, end) iff a <= end && b >= start, which is
        // overlap with [start - 1, end + 1) (saturation is exact at the edges:
        // no non-empty range ends at 0 or starts at usize::MAX).
        self.overlapping(start.saturating_sub(1), end.saturating_add(1))
    }

    /// Every range in address order.
    pub fn iter(&self) -> Iter<'_, V> {
        Iter {
            map: self,
            pos: if self.is_empty() { None } else { Some((0, 0)) },
            stop: usize::MAX,
        }
    }

    /// Removes every range.
    pub fn clear(&mut self) {
        self.tops.clear();
        self.blocks.clear();
        self.len = 0;
    }
}

#[cfg(test)]
impl<V> RangeMap<V> {
    /// Asserts the layout invariants.
    fn check(&self) {
        assert_eq!(self.tops.len(), self.blocks.len());
        let mut n = 0;
        let mut prev_end = None;
        for (top, block) in self.tops.iter().zip(&self.blocks) {
            assert!(!block.starts.is_empty() && block.starts.len() <= self.max_block);
            assert_eq!(block.starts.len(), block.slots.len());
            assert_eq!(*top, block.starts[0]);
            for (s, (e, _)) in block.starts.iter().zip(&block.slots) {
                assert!(s < e);
                assert!(prev_end.is_none_or(|p| p <= *s), "disjoint and sorted");
                prev_end = Some(*e);
            }
            n += block.starts.len();
        }
        assert_eq!(n, self.len);
    }
}

/// Ranges in address order, as `(start, end, &value)`.
#[derive(Debug)]
pub struct Iter<'a, V> {
    map: &'a RangeMap<V>,
    pos: Option<(usize, usize)>,
    /// Ranges starting at or after this are not returned (`usize::MAX`
    /// returns everything: no non-empty range starts there).
    stop: usize,
}

impl<'a, V> Iterator for Iter<'a, V> {
    type Item = (usize, usize, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        let p = self.pos?;
        let item = self.map.at(p);
        if item.0 >= self.stop {
            self.pos = None;
            return None;
        }
        self.pos = self.map.next_pos(p);
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn covering_and_overlap_basics() {
        let mut m = RangeMap::new();
        assert!(m.insert(10, 20, 'a').is_ok());
        assert!(m.insert(20, 30, 'b').is_ok(), "touching ranges are allowed");
        assert_eq!(m.insert(15, 25, 'c'), Err('c'));
        assert_eq!(m.insert(5, 5, 'd'), Err('d'), "empty range");
        assert_eq!(m.find_covering(12, 20), Some((10, 20, &'a')));
        assert_eq!(m.find_covering(12, 21), None, "spans two entries");
        assert_eq!(m.find_covering(20, 20), Some((20, 30, &'b')));
        assert_eq!(m.find_covering(30, 30), None);
        let o: Vec<_> = m.overlapping(19, 21).map(|(s, _, _)| s).collect();
        assert_eq!(o, [10, 20]);
        let t: Vec<_> = m.touching(30, 40).map(|(s, _, _)| s).collect();
        assert_eq!(t, [20]);
        assert_eq!(m.overlapping(30, 40).count(), 0);
        assert_eq!(m.remove(10), Some((20, 'a')));
        assert_eq!(m.len(), 1);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(usize, usize),
        Remove(usize),
        Covering(usize, usize),
        Overlapping(usize, usize),
        Touching(usize, usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        // A small address space so that overlaps and adjacency are common.
        let range = (0usize..64, 0usize..12);
        prop_oneof![
            3 => range.clone().prop_map(|(s, l)| Op::Insert(s, l)),
            1 => (0usize..70).prop_map(Op::Remove),
            2 => range.clone().prop_map(|(s, l)| Op::Covering(s, l)),
            2 => range.clone().prop_map(|(s, l)| Op::Overlapping(s, l)),
            1 => range.prop_map(|(s, l)| Op::Touching(s, l)),
        ]
    }

    proptest! {
        /// The map against a vector of ranges searched linearly.
        #[test]
        fn matches_naive_model(ops in proptest::collection::vec(op(), 1..200), block in 4usize..9) {
            // Tiny blocks, so that splits and merges happen all the time.
            let mut map = RangeMap::with_block_size(block);
            let mut model: Vec<(usize, usize, u32)> = Vec::new();
            for (n, op) in ops.into_iter().enumerate() {
                let n = n as u32;
                match op {
                    Op::Insert(s, l) => {
                        let e = s + l;
                        let ok = l > 0 && model.iter().all(|&(a, b, _)| b <= s || a >= e);
                        prop_assert_eq!(map.insert(s, e, n).is_ok(), ok);
                        if ok {
                            model.push((s, e, n));
                        }
                    }
                    Op::Remove(s) => {
                        let want = model.iter().position(|&(a, _, _)| a == s).map(|i| model.remove(i));
                        prop_assert_eq!(map.remove(s), want.map(|(_, b, v)| (b, v)));
                    }
                    Op::Covering(s, l) => {
                        let e = s + l;
                        let want = model.iter().find(|&&(a, b, _)| a <= s && s < b && e <= b);
                        prop_assert_eq!(map.find_covering(s, e), want.map(|(a, b, v)| (*a, *b, v)));
                    }
                    Op::Overlapping(s, l) => {
                        let e = s + l;
                        let mut want: Vec<_> = model.iter().filter(|&&(a, b, _)| s < e && a < e && b > s).copied().collect();
                        want.sort();
                        let got: Vec<_> = map.overlapping(s, e).map(|(a, b, &v)| (a, b, v)).collect();
                        prop_assert_eq!(got, want);
                    }
                    Op::Touching(s, l) => {
                        let e = s + l;
                        let mut want: Vec<_> = model.iter().filter(|&&(a, b, _)| a <= e && b >= s).copied().collect();
                        want.sort();
                        let got: Vec<_> = map.touching(s, e).map(|(a, b, &v)| (a, b, v)).collect();
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(map.len(), model.len());
                map.check();
            }
            let mut all = model.clone();
            all.sort();
            let got: Vec<_> = map.iter().map(|(a, b, &v)| (a, b, v)).collect();
            prop_assert_eq!(got, all);
        }
    }
}
