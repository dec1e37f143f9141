//! The RDM layer's counters: one set of names on every transport, so a
//! tool or a test reads `credit_waits` or `rx_memory` the same whether TCP
//! or verbs (or, later, shared memory) serves the endpoint. Transports add
//! their own (`srq_refills`, `accept_paused`, ...) after these.

use super::{Account, Held};

/// The names [`Counters::report`] gives, in its order.
pub const NAMES: [&str; 11] = [
    "credit_stalls",
    "credit_waits",
    "credit_returns",
    "credit_violations",
    "requests_dropped",
    "messages_dropped",
    "rx_memory",
    "rx_memory_refused",
    "unexpected_bytes",
    "unexpected_entries",
    "unexpected_memory",
];

/// What the RDM layer counts as it runs.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Eager-sized sends that went by rendezvous, and injects refused with
    /// `Again`, for want of eager credit.
    pub credit_stalls: u64,
    /// Times an operation waited for credit (a request to send without its
    /// bytes; on verbs also any message without message credit).
    pub credit_waits: u64,
    /// Credit returns sent to peers.
    pub credit_returns: u64,
    /// Connections ended because their peer sent past its credit.
    pub credit_violations: u64,
    /// Requests to send dropped unmatched with their failed connection.
    pub requests_dropped: u64,
    /// Eager messages dropped unreceived because the peer that sent them
    /// broke the protocol (nothing it sent is trusted).
    pub messages_dropped: u64,
    /// Peers refused when they connected, for want of receive memory.
    pub rx_memory_refused: u64,
}

impl Counters {
    /// Counts what a connection's end dropped.
    pub fn dropped(&mut self, d: super::receives::Dropped) {
        self.requests_dropped += d.requests;
        self.messages_dropped += d.messages;
    }

    /// The counters by [`NAMES`], with what the unexpected messages hold
    /// (`held`) and what the receive memory has committed (`account`).
    pub fn report(&self, held: Held, account: &Account) -> Vec<(&'static str, u64)> {
        let values = [
            self.credit_stalls,
            self.credit_waits,
            self.credit_returns,
            self.credit_violations,
            self.requests_dropped,
            self.messages_dropped,
            account.committed(),
            self.rx_memory_refused,
            held.payload as u64,
            held.entries as u64,
            held.bytes as u64,
        ];
        NAMES.into_iter().zip(values).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_reported_once_in_order() {
        let c = Counters {
            credit_waits: 3,
            ..Counters::default()
        };
        let r = c.report(Held::default(), &Account::new(10));
        let names: Vec<&str> = r.iter().map(|&(n, _)| n).collect();
        assert_eq!(names, NAMES);
        assert_eq!(r[1], ("credit_waits", 3));
    }
}
