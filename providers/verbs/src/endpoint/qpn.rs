//! Connections by QP number, for work completions (which name only the QP).
//! The last connection looked up is remembered: completions come in runs
//! from one busy connection (a ping-pong's every one), and a hit skips
//! hashing the number.

use xfer_core::unstable::hash::FastMap;

/// Connection keys by QP number, with the last look-up cached.
#[derive(Default)]
pub(super) struct QpnMap {
    map: FastMap<u32, usize>,
    last: Option<(u32, usize)>,
}

impl QpnMap {
    /// Connection `k` owns QP `qpn`.
    pub(super) fn insert(&mut self, qpn: u32, k: usize) {
        self.last = None;
        self.map.insert(qpn, k);
    }

    /// QP `qpn` is gone.
    pub(super) fn remove(&mut self, qpn: u32) {
        self.last = None;
        self.map.remove(&qpn);
    }

    /// The connection owning QP `qpn`.
    #[inline]
    pub(super) fn get(&mut self, qpn: u32) -> Option<usize> {
        match self.last {
            Some((q, k)) if q == qpn => Some(k),
            _ => {
                let k = *self.map.get(&qpn)?;
                self.last = Some((qpn, k));
                Some(k)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::QpnMap;

    #[test]
    fn a_cached_qp_number_follows_inserts_and_removals() {
        let mut m = QpnMap::default();
        assert_eq!(m.get(17), None);
        m.insert(17, 3);
        m.insert(18, 4);
        assert_eq!(m.get(17), Some(3));
        assert_eq!(m.get(17), Some(3), "the cached hit");
        m.remove(17);
        assert_eq!(m.get(17), None, "removed while cached");
        assert_eq!(m.get(18), Some(4));
        // The same number on a new connection (a QP number is reused).
        m.insert(18, 9);
        assert_eq!(m.get(18), Some(9), "re-inserted while cached");
    }
}
