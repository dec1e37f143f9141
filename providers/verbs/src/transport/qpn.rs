//! Connections by QP number, for completions, which name only their QP.
//!
//! Most completions come from the same QP as the one before (a ping-pong's
//! all do, and a burst from one peer does), so the map remembers its last
//! answer: a hit is one compare instead of hashing the number and probing.

use xfer_core::unstable::hash::FastMap;
use xfer_core::unstable::rdm::transport::ConnId;

/// QP number to connection, with the last look-up remembered.
#[derive(Debug, Default)]
pub struct ByQpn {
    map: FastMap<u32, ConnId>,
    /// The last QP number found, and its connection; `None` after any
    /// change that could make it wrong.
    last: Option<(u32, ConnId)>,
}

impl ByQpn {
    /// The connection of QP `qpn`.
    #[inline(always)]
    pub fn get(&mut self, qpn: u32) -> Option<ConnId> {
        if let Some((n, k)) = self.last {
            if n == qpn {
                return Some(k);
            }
        }
        let k = self.map.get(&qpn).copied();
        if let Some(k) = k {
            self.last = Some((qpn, k));
        }
        k
    }

    /// Maps `qpn` to `k`.
    pub fn insert(&mut self, qpn: u32, k: ConnId) {
        self.last = None;
        self.map.insert(qpn, k);
    }

    /// Forgets `qpn` (its QP is destroyed, or about to be: the device may
    /// reuse the number).
    pub fn remove(&mut self, qpn: u32) {
        self.last = None;
        self.map.remove(&qpn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembered_answers_never_outlive_their_mapping() {
        let mut m = ByQpn::default();
        assert_eq!(m.get(7), None);
        m.insert(7, 1);
        m.insert(9, 2);
        assert_eq!(m.get(7), Some(1));
        assert_eq!(m.get(7), Some(1), "the remembered answer");
        assert_eq!(m.get(9), Some(2));
        m.remove(9);
        assert_eq!(m.get(9), None, "removed while remembered");
        assert_eq!(m.get(7), Some(1));
        m.remove(7);
        m.insert(7, 3);
        assert_eq!(m.get(7), Some(3), "a reused QP number names its new connection");
        assert_eq!(m.get(8), None);
        assert_eq!(m.get(7), Some(3));
    }
}
