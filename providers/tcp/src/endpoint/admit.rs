//! Admission with a job key (`EndpointAttr::job_key`, `XFER_JOB_KEY`) on
//! TCP; the challenge and the proof are core's (`rdm::admit`).
//!
//! An endpoint with a key answers a Hello that named it with a Challenge of
//! 16 random bytes instead of its HelloAck; the connecting side answers
//! with a Proof, HMAC-SHA-256 under the key of the challenge, the acceptor's
//! nonce and the connecting endpoint's name (docs/PROTOCOL.md,
//! "Admission"). Only a Proof that verifies (compared in constant time)
//! gets the HelloAck and opens the connection. Until then the connection
//! has no peer: any other frame, a wrong proof or a connecting side
//! without the key ends it before anything it sent is delivered, counted
//! in `admission_refused` and logged at most once a second. The key never
//! travels, a challenge is never reused, and a proof names both ends, so a
//! recorded handshake cannot be replayed to this or another endpoint.

use xfer_core::unstable::rdm::admit;

use super::*;
use crate::wire::PROOF_LEN;

impl TcpEndpoint {
    /// Whether a Hello from `peer` on connection `id` must be proven first;
    /// if so, the Challenge is queued and the connection waits for the Proof.
    pub(super) fn challenge(&mut self, cx: &mut Ctx<'_>, id: usize, peer: Address) -> Result<bool> {
        if self.attr.job_key.is_none() {
            return Ok(false);
        }
        let challenge = admit::challenge()?;
        self.conns[id].admit = Some(Box::new((peer, challenge, Instant::now())));
        self.admitting += 1;
        self.send_control(cx, id, Frame::Challenge { nonce: challenge });
        Ok(true)
    }

    /// A Proof at the head of connection `id`'s staged bytes: the peer it
    /// proves, once all staged (`None` before).
    pub(super) fn check_proof(&mut self, id: usize) -> Result<Option<Address>> {
        let conn = &mut self.conns[id];
        let end = HEADER_LEN + PROOF_LEN as usize;
        if conn.staged().len() < end {
            return Ok(None);
        }
        let Some(pending) = conn.admit.take() else {
            return Err(Error::Protocol("proof without a challenge"));
        };
        self.admitting -= 1;
        let (peer, challenge, _) = *pending;
        let Some(key) = self.attr.job_key.as_ref() else {
            return Err(Error::Internal("a challenge was sent without a job key"));
        };
        let sent = &self.conns[id].staged()[HEADER_LEN..end];
        let ok = sent.len() == admit::PROOF_LEN && admit::verify(&key.0, &challenge, self.nonce, peer.as_bytes(), sent);
        if !ok {
            return Err(self.refuse(&peer, "job key proof does not match"));
        }
        self.conns[id].consume(end);
        Ok(Some(peer))
    }

    /// A connection waiting for its Proof sent `what` instead: refused.
    pub(super) fn refuse(&mut self, peer: &Address, why: &'static str) -> Error {
        self.admission_refused += 1;
        let name = TcpName::decode(peer.as_bytes())
            .map(|n| n.to_string())
            .unwrap_or_default();
        xfer_core::warn_limited!(peer = %name, reason = why, "connection refused: job key not proven");
        Error::Protocol(why)
    }

    /// A Challenge from the endpoint we dialled on connection `id`: the
    /// Proof goes out ahead of everything queued for the HelloAck.
    pub(super) fn answer_challenge(&mut self, cx: &mut Ctx<'_>, id: usize, nonce: [u8; 16]) -> Result<()> {
        let conn = &mut self.conns[id];
        let dialled = match (conn.state, conn.peer) {
            (State::Handshake(_), Some(peer)) => TcpName::decode(peer.as_bytes()).ok(),
            _ => None,
        };
        let Some(dialled) = dialled else {
            return Err(Error::Protocol("challenge out of place"));
        };
        let Some(key) = self.attr.job_key.as_ref() else {
            return Err(Error::Protocol(
                "the peer admits only holders of its job key (XFER_JOB_KEY)",
            ));
        };
        let mac = admit::proof(&key.0, &nonce, dialled.nonce, self.name.as_bytes())?.to_vec();
        conn.consume(HEADER_LEN);
        // Only the Hello went out before (the peer answered it); the
        // Proof is the next handshake frame.
        conn.txq.push_front(TxFrame {
            hdr: Frame::Proof.to_bytes(),
            payload: Payload::Owned(mac),
            written: 0,
            owner: Owner::Hello,
        });
        self.flush(cx, id);
        Ok(())
    }
}
