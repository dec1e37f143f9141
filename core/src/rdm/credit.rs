//! Eager credit's unit, the same on every transport: what one message may
//! make its receiver hold.
//!
//! A receiver grants each peer credit in bytes and charges every message
//! that may end up waiting unexpected: an eager message its payload plus
//! [`ENTRY_COST`], a request to send (rendezvous) [`ENTRY_COST`] alone. The
//! entry cost covers what keeping the message costs besides its payload
//! (its slot in the matcher and the allocation's overhead), so a flood of
//! empty messages or of requests to send is bounded by the credit as
//! tightly as a flood of large ones. The receiver earns a message's cost
//! back when a receive consumes it and returns it to the sender.

/// What keeping one unexpected message costs besides its payload, as eager
/// credit counts it: at least a matcher slot and the allocator's overhead
/// (a test checks the slot of every transport's entry fits).
pub const ENTRY_COST: u64 = 256;

/// What a message of `len` eager payload bytes costs of its sender's
/// credit (`len` 0 for a request to send, whose payload stays with the
/// sender).
#[inline]
pub fn cost(len: u64) -> u64 {
    len.saturating_add(ENTRY_COST)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_costs_its_entry_besides_its_payload() {
        assert_eq!(cost(0), ENTRY_COST);
        assert_eq!(cost(64 << 10), (64 << 10) + ENTRY_COST);
        assert_eq!(cost(u64::MAX), u64::MAX);
    }
}
