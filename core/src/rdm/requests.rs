//! The requests to send a connection has waiting unmatched at its
//! receiver, by the sender's id for them.
//!
//! A receiver keeps an unmatched request to send until a receive takes it;
//! credit bounds how many a peer may have waiting ([`super::credit`]), and
//! this set refuses a second request under an id already waiting (it would
//! answer one send twice). When the connection fails, the ids say whether
//! any of its requests are still kept: they can never be fulfilled (their
//! data was to come on that connection) and are dropped
//! ([`super::Receives::drop_connection`]).

use std::collections::HashSet;

use crate::error::{Error, Result};

/// Ids of a connection's unmatched requests to send. The ids are the
/// peer's, so the set hashes them with std's keyed hasher.
#[derive(Debug, Default)]
pub struct Requests {
    ids: HashSet<u64>,
}

impl Requests {
    /// A request with `id` arrived and waits unmatched; a second one under
    /// an id already waiting is a protocol error.
    pub fn arrive(&mut self, id: u64) -> Result<()> {
        if self.ids.insert(id) {
            Ok(())
        } else {
            Err(Error::Protocol("request to send under an id already waiting"))
        }
    }

    /// The request with `id` was matched (or dropped): false if none waited.
    pub fn matched(&mut self, id: u64) -> bool {
        self.ids.remove(&id)
    }

    /// Whether no request waits.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// How many requests wait.
    pub fn len(&self) -> usize {
        self.ids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_request_under_a_waiting_id_is_refused() {
        let mut r = Requests::default();
        r.arrive(7).expect("first");
        assert!(matches!(r.arrive(7), Err(Error::Protocol(_))));
        assert_eq!(r.len(), 1);
        assert!(r.matched(7));
        assert!(!r.matched(7), "matched once");
        r.arrive(7).expect("the id is free again once matched");
        assert!(!r.is_empty());
    }
}
