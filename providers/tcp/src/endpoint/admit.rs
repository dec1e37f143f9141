//! Admission with a job key (`EndpointAttr::job_key`, `XFER_JOB_KEY`) on
//! TCP; the challenge and the proof are core's (`rdm::admit`), the
//! exchange is the connection's lifecycle machine's (`link`).
//!
//! An endpoint with a key answers a Hello that named it with a Challenge of
//! 16 random bytes instead of its HelloAck; the connecting side answers
//! with a Proof, HMAC-SHA-256 under the key of the challenge, the acceptor's
//! nonce and the connecting endpoint's name (docs/PROTOCOL.md,
//! "Admission"). Only a Proof that verifies (compared in constant time)
//! gets the HelloAck and opens the connection. Until then the connection
//! has no peer: any other frame, a wrong proof or a connecting side
//! without the key ends it before anything it sent is delivered, counted
//! in `admission_refused` (by `fail_conn`, once) and logged at most once a
//! second. The key never travels, a challenge is never reused, and a proof
//! names both ends, so a recorded handshake cannot be replayed to this or
//! another endpoint.

use super::*;
use crate::link::Failure;

impl TcpEndpoint {
    /// Connection `id`'s lifecycle machine ended it with `f`: the error it
    /// fails with, a refused admission logged.
    #[cold]
    pub(super) fn link_failed(&mut self, id: usize, f: Failure) -> Error {
        if let Failure::NotAdmitted(why) = f {
            let name = self.conns[id]
                .link
                .applicant()
                .and_then(|p| TcpName::decode(p.as_bytes()).ok())
                .map(|n| n.to_string())
                .unwrap_or_default();
            xfer_core::warn_limited!(peer = %name, reason = why, "connection refused: job key not proven");
        }
        f.into()
    }
}
