//! The tie-break of a crossed first contact: two endpoints that send to
//! each other first at the same moment each open a connection to the other.
//! One connection must carry both ways (the messages of one sender to one
//! receiver travel on one connection, in order), and both ends must pick
//! the same one without a round trip: the connection opened by the endpoint
//! whose name is the smaller survives. How the other one is given up is the
//! transport's (TCP moves what waits on it behind the survivor's
//! handshake; verbs refuses the losing connection request).

use crate::addr::Address;

/// Which of two crossed connections an endpoint keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// The one this endpoint opened.
    Ours,
    /// The one the peer opened.
    Theirs,
}

/// The connection an endpoint named `ours` keeps when its connection to
/// `theirs` crosses one from `theirs`. Both ends compute the same survivor.
/// An endpoint talking to itself (equal names) keeps its own.
pub fn survivor(ours: &Address, theirs: &Address) -> Keep {
    if ours <= theirs {
        Keep::Ours
    } else {
        Keep::Theirs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_ends_keep_the_same_connection() {
        let names: Vec<Address> = (0u8..4)
            .map(|i| Address::new(&[i, 9, i.wrapping_mul(77), 1]).expect("address"))
            .collect();
        for a in &names {
            for b in names.iter().filter(|b| *b != a) {
                // The same connection: opened by a if a keeps its own, which
                // b then keeps as the peer's.
                let a_keeps_its_own = survivor(a, b) == Keep::Ours;
                let b_keeps_the_peers = survivor(b, a) == Keep::Theirs;
                assert_eq!(a_keeps_its_own, b_keeps_the_peers, "{a:?} {b:?}");
            }
            assert_eq!(survivor(a, a), Keep::Ours);
        }
    }
}
