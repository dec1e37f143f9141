//! Admission with a job key (`EndpointAttr::job_key`, `XFER_JOB_KEY`), the
//! part every transport shares: the challenge and the proof.
//!
//! An accepting endpoint with a key sends each connecting peer a fresh
//! [`challenge`] of 16 random bytes; the peer answers with a [`proof`],
//! HMAC-SHA-256 under the key of a fixed label, the challenge, the
//! acceptor's nonce and the connecting endpoint's name, which the acceptor
//! checks with [`verify`] (in constant time). The key never travels, a
//! challenge is used once, and a proof names both ends, so a recorded
//! handshake cannot be replayed to this or another endpoint. How the
//! challenge and the proof travel is the transport's (TCP: frames of its
//! handshake; verbs: rdma_cm private data, where the proof is cut to
//! [`SHORT`] bytes to fit a connection request).

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::{Error, Result};

/// Context string that makes these MACs mean nothing elsewhere.
const LABEL: &[u8] = b"xfer admission v1";

/// Bytes of a challenge.
pub const CHALLENGE_LEN: usize = 16;
/// Bytes of a whole proof.
pub const PROOF_LEN: usize = 32;
/// Bytes of a proof cut short (its leftmost half), where room is scarce:
/// 128 bits, what RFC 2104 recommends at least (half the hash).
pub const SHORT: usize = 16;

/// A fresh challenge from the kernel's generator.
pub fn challenge() -> Result<[u8; CHALLENGE_LEN]> {
    let mut c = [0u8; CHALLENGE_LEN];
    c[..8].copy_from_slice(&crate::sys::secret_u64()?.to_le_bytes());
    c[8..].copy_from_slice(&crate::sys::secret_u64()?.to_le_bytes());
    Ok(c)
}

fn mac(key: &[u8], challenge: &[u8; CHALLENGE_LEN], acceptor: &[u8], connector: &[u8]) -> Result<Hmac<Sha256>> {
    let mut m = Hmac::<Sha256>::new_from_slice(key).map_err(|_| Error::Internal("HMAC refused a key length"))?;
    m.update(LABEL);
    m.update(challenge);
    m.update(acceptor);
    m.update(connector);
    Ok(m)
}

/// The acceptor's part of a MAC for a whole endpoint name: its length
/// first, so no name and connector split the same bytes two ways (and no
/// name reads as an 8-byte nonce).
fn named(acceptor: &[u8]) -> Vec<u8> {
    let mut a = Vec::with_capacity(acceptor.len() + 9);
    a.extend_from_slice(b"name");
    a.push(acceptor.len() as u8);
    a.extend_from_slice(acceptor);
    a
}

/// The proof a connecting endpoint named `connector` sends for `challenge`
/// from the endpoint whose nonce is `acceptor`.
pub fn proof(key: &[u8], challenge: &[u8; CHALLENGE_LEN], acceptor: u64, connector: &[u8]) -> Result<[u8; PROOF_LEN]> {
    Ok(mac(key, challenge, &acceptor.to_le_bytes(), connector)?
        .finalize()
        .into_bytes()
        .into())
}

/// The proof for `challenge` from the endpoint named `acceptor` (where an
/// endpoint is known by its whole name rather than a nonce: the RDM
/// engine's transports).
pub fn proof_named(
    key: &[u8],
    challenge: &[u8; CHALLENGE_LEN],
    acceptor: &[u8],
    connector: &[u8],
) -> Result<[u8; PROOF_LEN]> {
    Ok(mac(key, challenge, &named(acceptor), connector)?
        .finalize()
        .into_bytes()
        .into())
}

/// Whether `sent` is the whole [`proof_named`] for `challenge`, compared in
/// constant time.
pub fn verify_named(
    key: &[u8],
    challenge: &[u8; CHALLENGE_LEN],
    acceptor: &[u8],
    connector: &[u8],
    sent: &[u8],
) -> bool {
    sent.len() == PROOF_LEN
        && mac(key, challenge, &named(acceptor), connector).is_ok_and(|m| m.verify_slice(sent).is_ok())
}

/// Whether `sent` is the proof (whole, or its leftmost [`SHORT`] bytes or
/// more) for `challenge`, compared in constant time.
pub fn verify(key: &[u8], challenge: &[u8; CHALLENGE_LEN], acceptor: u64, connector: &[u8], sent: &[u8]) -> bool {
    if !(SHORT..=PROOF_LEN).contains(&sent.len()) {
        return false;
    }
    mac(key, challenge, &acceptor.to_le_bytes(), connector).is_ok_and(|m| m.verify_truncated_left(sent).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_verifies_whole_and_cut_and_nothing_else_does() {
        let c = challenge().unwrap();
        let p = proof(b"key", &c, 7, b"me").unwrap();
        assert!(verify(b"key", &c, 7, b"me", &p));
        assert!(verify(b"key", &c, 7, b"me", &p[..SHORT]));
        assert!(!verify(b"key", &c, 7, b"me", &p[..SHORT - 1]), "too short");
        assert!(!verify(b"other", &c, 7, b"me", &p), "key");
        assert!(!verify(b"key", &c, 8, b"me", &p), "acceptor");
        assert!(!verify(b"key", &c, 7, b"you", &p), "connector");
        let mut d = c;
        d[0] ^= 1;
        assert!(!verify(b"key", &d, 7, b"me", &p), "challenge");
        assert_ne!(challenge().unwrap(), c, "fresh");
    }

    #[test]
    fn a_named_proof_binds_the_whole_names() {
        let c = challenge().unwrap();
        let p = proof_named(b"key", &c, b"acceptor", b"me").unwrap();
        assert!(verify_named(b"key", &c, b"acceptor", b"me", &p));
        assert!(!verify_named(b"key", &c, b"acceptor", b"me", &p[..SHORT]), "whole only");
        assert!(!verify_named(b"key", &c, b"acceptorm", b"e", &p), "split moved");
        assert!(!verify_named(b"key", &c, b"acceptor", b"you", &p), "connector");
        assert!(!verify_named(b"other", &c, b"acceptor", b"me", &p), "key");
        let nonce = proof(b"key", &c, 7, b"me").unwrap();
        assert!(
            !verify_named(b"key", &c, &7u64.to_le_bytes(), b"me", &nonce),
            "a nonce proof is not a name proof"
        );
    }
}
