//! Admission with a job key (`EndpointAttr::job_key`, `XFER_JOB_KEY`) on
//! verbs, over rdma_cm's private data (docs/PROTOCOL-VERBS.md,
//! "Admission"); the challenge and the proof are core's (`rdm::admit`).
//!
//! An endpoint with a key rejects a plain connection request with a
//! challenge (16 random bytes, remembered for its sender's name); the
//! connecting side makes a new request that carries the proof, HMAC-SHA-256
//! under the key of the challenge, the acceptor's nonce and its own name,
//! cut to 16 bytes to fit a request's 56 bytes of private data. Only a
//! request whose proof verifies against the challenge sent to that name
//! (used once, and only for [`TTL`]) gets a queue pair and is accepted: a
//! peer without the key never has one, so it can neither send a message nor
//! reach memory. Refusals are counted in `admission_refused` and logged at
//! most once a second.

use std::time::{Duration, Instant};

use xfer_core::unstable::addr::Address;
use xfer_core::unstable::rdm::admit;
use xfer_core::Result;

use super::VerbsEndpoint;
use crate::name::VerbsName;

/// How long a challenge may be answered.
pub(crate) const TTL: Duration = Duration::from_secs(10);
/// Challenges outstanding at once, at most (one per connecting name): a
/// flood of requests cannot make the endpoint hold more.
pub(crate) const PENDING_MAX: usize = 1024;

/// The challenges an endpoint sent and not yet seen answered.
#[derive(Default)]
pub(crate) struct Challenges {
    sent: xfer_core::unstable::hash::FastMap<Address, ([u8; admit::CHALLENGE_LEN], Instant)>,
}

impl Challenges {
    /// A fresh challenge for `from` (replacing an earlier one), or `None`
    /// when [`PENDING_MAX`] unexpired ones are outstanding.
    pub(crate) fn issue(&mut self, from: Address) -> Result<Option<[u8; admit::CHALLENGE_LEN]>> {
        let now = Instant::now();
        if self.sent.len() >= PENDING_MAX && !self.sent.contains_key(&from) {
            self.sent.retain(|_, (_, at)| now.duration_since(*at) < TTL);
            if self.sent.len() >= PENDING_MAX {
                return Ok(None);
            }
        }
        let c = admit::challenge()?;
        self.sent.insert(from, (c, now));
        Ok(Some(c))
    }

    /// The unexpired challenge sent to `from`, taken (used once).
    pub(crate) fn take(&mut self, from: &Address) -> Option<[u8; admit::CHALLENGE_LEN]> {
        self.sent
            .remove(from)
            .filter(|(_, at)| at.elapsed() < TTL)
            .map(|(c, _)| c)
    }
}

impl VerbsEndpoint {
    /// Whether the proof in a request from `from` answers the challenge we
    /// sent it (false, counted and logged, when not).
    pub(super) fn proven(&mut self, from: &Address, proof: Option<&[u8]>) -> bool {
        let why = match (self.attr.job_key.as_ref(), self.challenges.take(from), proof) {
            (Some(key), Some(c), Some(p)) => {
                if admit::verify(&key.0, &c, self.name.nonce, from.as_bytes(), p) {
                    return true;
                }
                "job key proof does not match"
            }
            _ => "proof without a challenge",
        };
        self.refused(from, why);
        false
    }

    /// Counts and logs a refused connection request.
    pub(super) fn refused(&mut self, from: &Address, why: &'static str) {
        self.stats.admission_refused += 1;
        let name = VerbsName::decode(from.as_bytes())
            .map(|n| n.addr.to_string())
            .unwrap_or_default();
        xfer_core::warn_limited!(peer = %name, reason = why, "connection refused: job key not proven");
    }

    /// The proof, cut to [`admit::SHORT`] bytes, that we hold the key, for
    /// `challenge` from the endpoint named `to` (`None` without a key).
    pub(super) fn answer(
        &self,
        to: &Address,
        challenge: &[u8; admit::CHALLENGE_LEN],
    ) -> Result<Option<[u8; admit::SHORT]>> {
        let Some(key) = self.attr.job_key.as_ref() else {
            return Ok(None);
        };
        let acceptor = VerbsName::decode(to.as_bytes())?.nonce;
        let p = admit::proof(&key.0, challenge, acceptor, self.addr.as_bytes())?;
        let mut short = [0u8; admit::SHORT];
        short.copy_from_slice(&p[..admit::SHORT]);
        Ok(Some(short))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(i: u32) -> Address {
        let addr = std::net::SocketAddrV4::new(std::net::Ipv4Addr::from(i), 7000);
        VerbsName { addr, nonce: 1 }.address()
    }

    #[test]
    fn a_challenge_is_used_once_and_outstanding_ones_are_bounded() {
        let mut c = Challenges::default();
        let first = c.issue(named(0)).unwrap().expect("a challenge");
        assert_eq!(c.take(&named(0)), Some(first));
        assert_eq!(c.take(&named(0)), None, "used once");
        for i in 0..PENDING_MAX as u32 {
            assert!(c.issue(named(i)).unwrap().is_some());
        }
        assert_eq!(
            c.issue(named(u32::MAX)).unwrap(),
            None,
            "past the bound, none are expired"
        );
        let again = c
            .issue(named(3))
            .unwrap()
            .expect("a name already waiting gets a new one");
        assert_eq!(c.take(&named(3)), Some(again), "the new one replaced the old");
    }
}
