//! Every connection opens with a handshake, as TCP's does: the connecting
//! side writes `Hello` (its name) and holds everything else for that peer
//! until the acceptor's `Admitted`. An acceptor without a job key admits
//! at once; one with a key (`EndpointAttr::job_key`, `XFER_JOB_KEY`)
//! answers with a `Challenge` of 16 fresh random bytes, and only a `Proof`
//! that verifies — HMAC-SHA-256 under the key of the challenge and both
//! endpoints' names (core's `rdm::admit`) — gets `Admitted`. Until then the
//! connection has no peer: any other frame, a wrong proof, a connector
//! without the key (it learns why from the challenge) or one silent past
//! the connect timeout loses the connection before anything it sent is
//! delivered, counted in `admission_refused`. A connector that is not
//! admitted within the connect timeout fails its peer (`ETIMEDOUT`).
//!
//! The key never travels, a challenge is used once, and a proof names both
//! ends, so a recorded handshake admits no one else.
//!
//! `Admitted` carries the acceptor's name: a connector that dialled a
//! transport address standing for whichever endpoint listens there (TCP's
//! nonce 0, a peer known by IP and port only) learns whom it reached, and
//! that endpoint's own connections to it find the same peer.

use std::time::{Duration, Instant};

use crate::addr::{Address, AvTable};
use crate::rdm::admit;

use super::super::transport::{Bytes, Cause, ConnId, Refused, Transport};
use super::out::Out;
use super::wire::{Header, Kind, LEN};
use super::State;

/// An accepted connection whose peer has yet to prove the job key.
pub struct Vetting {
    conn: ConnId,
    name: Address,
    challenge: [u8; admit::CHALLENGE_LEN],
    since: Instant,
}

/// Our hello to a peer we dialled: our name, the first frame on the
/// connection.
pub(super) fn hello(ours: &Address) -> Out {
    Out::Owned(Header::new(Kind::Hello).encode(), ours.as_bytes().to_vec())
}

/// Whether `out` is a frame of our side of the handshake (written while
/// the peer has not admitted us; everything else waits).
#[inline]
pub(super) fn opens(out: &Out) -> bool {
    matches!(out, Out::Owned(h, _) if h[0] == Kind::Hello as u8 || h[0] == Kind::Proof as u8)
}

impl State {
    /// A frame on a connection no peer owns yet: its hello, or the proof
    /// its hello was challenged for.
    pub(super) fn unowned(
        &mut self,
        av: &AvTable,
        conn: ConnId,
        h: Header,
        payload: Bytes<'_>,
    ) -> Result<(), &'static str> {
        if let Some(i) = self.vetting.iter().position(|v| v.conn == conn) {
            let v = self.vetting.swap_remove(i);
            let proven = h.kind == Kind::Proof
                && self.key.as_ref().is_some_and(|k| {
                    admit::verify_named(
                        k,
                        &v.challenge,
                        self.name.as_bytes(),
                        v.name.as_bytes(),
                        &payload.to_vec(),
                    )
                });
            match (proven, h.kind) {
                (true, _) => self.admitted(av, conn, v.name),
                (false, Kind::Proof) => self.refused(conn, "job key proof does not match"),
                (false, _) => self.refused(conn, "frame before the job key proof"),
            }
            return Ok(());
        }
        if h.kind != Kind::Hello || payload.len() > Address::MAX_LEN {
            return Err("first frame is not a hello");
        }
        let name = Address::new(&payload.to_vec()).map_err(|_| "hello with a bad name")?;
        if name.as_bytes().first() != Some(&self.provider_id) {
            return Err("hello from another provider's name");
        }
        if self.key.is_none() {
            self.admitted(av, conn, name);
            return Ok(());
        }
        let challenge = match admit::challenge() {
            Ok(c) => c,
            Err(_) => {
                self.refused(conn, "no random challenge to send");
                return Ok(());
            }
        };
        self.vetting.push(Vetting {
            conn,
            name,
            challenge,
            since: Instant::now(),
        });
        self.answer(conn, Header::new(Kind::Challenge).encode(), challenge.to_vec());
        Ok(())
    }

    /// `conn`'s peer `name` is admitted: the connection is its, and
    /// `Admitted` is the first frame we write on it.
    fn admitted(&mut self, av: &AvTable, conn: ConnId, name: Address) {
        let admitted = Header::new(Kind::Admitted).encode();
        let ours = self.name.as_bytes().to_vec();
        let p = match self.peers.find(&name) {
            None => {
                let p = self.peers.add(name, Some(conn));
                if !self.admit(p, true) {
                    self.peers.remove(p);
                    self.doomed.push((conn, Cause::Closed));
                    self.peers.link(conn, None);
                    return;
                }
                self.enqueue(p, 0, Out::Owned(admitted, ours));
                p
            }
            Some(p) if self.peers.get(p).is_some_and(|e| e.tx.is_none()) => {
                // Our own connect to it waits to be retried: this connection
                // becomes the one we send on, and as its acceptor we need
                // neither our hello nor its admission.
                self.peers.ungate(p);
                let e = self.peers.get_mut(p).expect("found above");
                let mut opened = 0;
                while e.queue.front().is_some_and(|(_, o)| opens(o)) {
                    e.queue.pop_front();
                    opened += 1;
                }
                e.queue.push_front((0, Out::Owned(admitted, ours)));
                self.queued = self.queued + 1 - opened;
                self.peers.link(conn, Some(p));
                p
            }
            Some(p) => {
                // Crossed connects: we send on our own connection, so nothing
                // but this answer is ever written on this one.
                self.peers.link(conn, Some(p));
                self.answer(conn, admitted, ours);
                p
            }
        };
        self.joined(p, av);
    }

    /// Refuses the connection `conn` before it had a peer.
    fn refused(&mut self, conn: ConnId, why: &'static str) {
        self.refusals += 1;
        crate::warn_limited!(conn, reason = why, "rdm: connection refused: job key not proven");
        self.doomed.push((conn, Cause::Closed));
    }

    /// The acceptor of our connection to peer `p` challenges us: our proof
    /// goes before anything else we hold for it.
    pub(super) fn challenged(&mut self, p: usize, payload: Bytes<'_>) -> Result<(), &'static str> {
        let Some(e) = self.peers.get_mut(p) else { return Ok(()) };
        if !e.gated() {
            return Err("challenge out of place");
        }
        let Some(key) = self.key.as_ref() else {
            return Err("the peer admits only holders of its job key (XFER_JOB_KEY)");
        };
        let challenge: [u8; admit::CHALLENGE_LEN] = payload
            .to_vec()
            .try_into()
            .map_err(|_| "challenge of the wrong length")?;
        let proof = admit::proof_named(key, &challenge, e.name.as_bytes(), self.name.as_bytes())
            .map_err(|_| "no proof could be made")?;
        e.queue
            .push_front((0, Out::Owned(Header::new(Kind::Proof).encode(), proof.to_vec())));
        self.queued += 1;
        Ok(())
    }

    /// The acceptor of our connection to peer `p`, named `payload`,
    /// admitted us. A name other than the one we dialled (a transport
    /// address that stands for whichever endpoint listens there) becomes
    /// the peer's alias, so the acceptor's own connections find it.
    pub(super) fn admitted_by(&mut self, p: usize, payload: Bytes<'_>) -> Result<(), &'static str> {
        if self.peers.get(p).is_none() {
            return Ok(());
        }
        if !self.peers.ungate(p) {
            return Err("admission out of place");
        }
        if payload.len() > Address::MAX_LEN {
            return Err("admission with a bad name");
        }
        let name = Address::new(&payload.to_vec()).map_err(|_| "admission with a bad name")?;
        if name.as_bytes().first() != Some(&self.provider_id) {
            return Err("admission from another provider's name");
        }
        self.peers.alias(p, name);
        Ok(())
    }

    /// Queues a handshake answer on `conn`, which no peer sends on.
    fn answer(&mut self, conn: ConnId, h: [u8; LEN], payload: Vec<u8>) {
        self.answers.push((conn, h, payload));
    }

    /// Writes the handshake answers the transport takes; one it refuses as
    /// full is tried again by the next progress.
    pub(super) fn write_answers<T: Transport>(&mut self, t: &mut T) {
        self.answers
            .retain(|(conn, h, payload)| matches!(t.send(*conn, super::wire::trimmed(h), payload), Err(Refused::Full)));
    }

    /// Ends handshakes past the connect timeout: an accepted connection
    /// that never proved the key, a dialled peer that never admitted us.
    pub(super) fn check_handshakes(&mut self, timeout: Duration) {
        let now = Instant::now();
        let mut i = 0;
        while i < self.vetting.len() {
            if now.duration_since(self.vetting[i].since) > timeout {
                let v = self.vetting.swap_remove(i);
                self.refused(v.conn, "no job key proof within the connect timeout");
            } else {
                i += 1;
            }
        }
        // Over the table in place: this runs on every progress while a
        // peer is gated, so it allocates nothing.
        for (p, e) in self.peers.iter() {
            if e.gated() && now.duration_since(e.since) > timeout {
                match e.tx.filter(|_| e.conns.len() > 1) {
                    // The peer's own connection to us stands: ours is given
                    // up and that one carries our frames (`lost`).
                    Some(tx) => self.doomed.push((tx, Cause::Failed(libc::ETIMEDOUT))),
                    None => self.failed.push(((p, e.serial), Cause::Failed(libc::ETIMEDOUT))),
                }
            }
        }
    }

    /// Forgets the handshake of `conn`, lost before its peer proved the key
    /// (counted as refused: the connector gave up or could not prove it).
    pub(super) fn vetting_lost(&mut self, conn: ConnId) {
        if let Some(i) = self.vetting.iter().position(|v| v.conn == conn) {
            self.vetting.swap_remove(i);
            self.refusals += 1;
        }
        self.answers.retain(|(c, _, _)| *c != conn);
    }
}
