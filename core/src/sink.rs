//! Where a provider call puts the completions it produces: straight into
//! the array of the `poll` that drives it while that has room, then into the
//! completion queue's ring (ARCHITECTURE.md decision 71).
//!
//! A busy-polling program's message then goes from the provider into its
//! array in one move, with no push to and pop from the ring in between. The
//! order is kept: a poll moves what the ring already held into its array
//! first, and only a sink whose ring is empty has array room.

use std::collections::VecDeque;

use crate::completion::Completion;

/// The completions of one provider call, in the order they were produced.
pub struct Sink<'a> {
    /// The caller's array from its first free slot (empty outside a poll).
    out: &'a mut [Completion],
    /// Slots of `out` filled so far, shared by every endpoint a poll drives.
    filled: &'a mut usize,
    /// Where completions go once `out` is full.
    ring: &'a mut VecDeque<Completion>,
}

/// A position in a sink, to see what was produced after it (`Sink::since`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mark {
    filled: usize,
    queued: usize,
}

impl<'a> Sink<'a> {
    /// A sink filling `out` from slot `*filled`, then `ring`. Unless `out` is
    /// full, `ring` must be empty (what it holds would otherwise be reported
    /// after newer completions).
    pub(crate) fn new(
        out: &'a mut [Completion],
        filled: &'a mut usize,
        ring: &'a mut VecDeque<Completion>,
    ) -> Sink<'a> {
        debug_assert!(
            *filled >= out.len() || ring.is_empty(),
            "queued completions would be overtaken"
        );
        Sink { out, filled, ring }
    }

    /// The same sink for a shorter call (one endpoint of a poll).
    pub(crate) fn reborrow(&mut self) -> Sink<'_> {
        Sink {
            out: &mut *self.out,
            filled: &mut *self.filled,
            ring: &mut *self.ring,
        }
    }

    /// Adds a completion after every one produced before it.
    ///
    /// Always inlined, so the entry is built in place in the caller's slot;
    /// out of line, each completion is built on the stack and moved twice.
    #[inline(always)]
    pub fn push_back(&mut self, c: Completion) {
        match self.out.get_mut(*self.filled) {
            Some(slot) => {
                *slot = c;
                *self.filled += 1;
            }
            None => self.overflow(c),
        }
    }

    /// Queues `c` in the ring: the caller's array is full, or it is a
    /// posting call's (a send that completes when written), which has none.
    #[inline]
    fn overflow(&mut self, c: Completion) {
        self.ring.push_back(c);
    }

    /// The current position.
    pub(crate) fn mark(&self) -> Mark {
        Mark {
            filled: *self.filled,
            queued: self.ring.len(),
        }
    }

    /// The completions produced since `m`, in order.
    pub(crate) fn since(&self, m: Mark) -> impl Iterator<Item = &Completion> {
        let end = (*self.filled).min(self.out.len());
        let start = m.filled.min(end);
        self.out[start..end]
            .iter()
            .chain(self.ring.range(m.queued.min(self.ring.len())..))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(context: u64) -> Completion {
        Completion {
            context,
            ..Completion::EMPTY
        }
    }

    #[test]
    fn fills_the_array_then_the_ring_in_order() {
        let mut out = vec![Completion::EMPTY; 2];
        let (mut filled, mut ring) = (0, VecDeque::new());
        let mut sink = Sink::new(&mut out, &mut filled, &mut ring);
        let m = sink.mark();
        for c in 1..=3 {
            sink.reborrow().push_back(entry(c));
        }
        assert_eq!(sink.since(m).map(|c| c.context).collect::<Vec<_>>(), [1, 2, 3]);
        let later = sink.mark();
        sink.push_back(entry(4));
        assert_eq!(sink.since(later).map(|c| c.context).collect::<Vec<_>>(), [4]);
        assert_eq!(filled, 2);
        assert_eq!(out.iter().map(|c| c.context).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(ring.iter().map(|c| c.context).collect::<Vec<_>>(), [3, 4]);
    }

    #[test]
    fn without_an_array_everything_is_queued() {
        let (mut filled, mut ring) = (0, VecDeque::new());
        let mut sink = Sink::new(&mut [], &mut filled, &mut ring);
        sink.push_back(entry(7));
        assert_eq!(filled, 0);
        assert_eq!(ring.len(), 1);
    }
}
