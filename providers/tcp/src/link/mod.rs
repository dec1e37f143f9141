//! The lifecycle of one TCP connection as a sans-IO machine: first contact
//! (Hello, HelloAck), admission with a job key (Challenge, Proof), the
//! connect deadline, the crossed-connect tie-break and how a connection
//! ends. It never touches a socket or reads a clock: the endpoint (the
//! driver, `endpoint/`) hands it the bytes it read and the current time,
//! and takes from it the frames to write, the next deadline and what
//! happened. So every decision here is tested in memory, two machines
//! against each other (`tests.rs`).
//!
//! The methods, in the order a driver uses them:
//! - inputs: [`Link::dial`] / [`Link::accept`] make one,
//!   [`handle_connected`](Link::handle_connected) (the TCP connect
//!   finished), [`handle_bytes`](Link::handle_bytes) (bytes read, not yet
//!   consumed), [`admit`](Link::admit) (the driver's answer to an
//!   [`Event::Hello`]), [`handle_timeout`](Link::handle_timeout),
//!   [`handle_eof`](Link::handle_eof);
//! - outputs, polled after every input: [`poll_event`](Link::poll_event),
//!   [`poll_transmit`](Link::poll_transmit) (handshake frames, to be
//!   written ahead of everything the handshake holds back),
//!   [`poll_timeout`](Link::poll_timeout);
//! - getters: whether it is open, connecting, waiting for a proof, and
//!   whether it gives way to a crossed connection.
//!
//! Once open, frames are the endpoint's (messages, rendezvous, RMA, credit):
//! the machine sees only handshake frames after that, each a violation.
//! The wire format is docs/PROTOCOL.md's, unchanged.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use xfer_core::unstable::addr::{Address, PeerAddr};
use xfer_core::unstable::error::Error;
use xfer_core::unstable::rdm::admit;
use xfer_core::unstable::rdm::crossing::{self, Keep};
use xfer_core::JobKey;

use crate::name::{TcpName, ANY_NONCE};
use crate::wire::{Frame, HEADER_LEN, PROOF_LEN};

#[cfg(test)]
mod tests;

/// What the machine knows of its own endpoint.
#[derive(Debug, Clone)]
pub struct Local {
    /// The endpoint's name (sent in its Hellos, bound into its proofs).
    pub name: Address,
    /// Its name's nonce: a Hello must carry it (or [`ANY_NONCE`]).
    pub nonce: u64,
    /// The job key peers must prove, and ours to prove (`EndpointAttr::job_key`).
    pub key: Option<JobKey>,
    /// How long a connect and its handshake, or an admission, may take
    /// (`TcpAttr::connect_timeout_ms`).
    pub connect_timeout: Duration,
}

/// Where a connection is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stage {
    /// We dialled; the TCP connect is under way. Our Hello is queued.
    Connecting,
    /// Connected; only our Hello (and a Proof) may go out until the
    /// dialled endpoint's HelloAck arrives.
    Handshake,
    /// Accepted; the peer's Hello has not arrived.
    AwaitHello,
    /// Accepted; a Hello from `peer` named us, and the driver decides
    /// whether it may come in ([`Link::admit`]).
    Vetting { peer: Address },
    /// Accepted; `peer` was challenged with `challenge` and must prove the job key.
    AwaitProof {
        peer: Address,
        challenge: [u8; admit::CHALLENGE_LEN],
    },
    /// Frames flow both ways.
    Open,
}

/// A handshake frame to write: its header and payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The encoded header.
    pub hdr: [u8; HEADER_LEN],
    /// Its payload (a Hello's name, a Proof's MAC; else empty).
    pub payload: Vec<u8>,
}

/// What happened to a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Accepted: a Hello from this peer named us. The driver answers with
    /// [`Link::admit`], or drops the connection (its receive memory is full).
    Hello(Address),
    /// Accepted: the connection is open with this peer (its HelloAck is
    /// queued); `proven` when it proved the job key.
    Admitted {
        /// The peer's name, as its Hello gave it.
        peer: Address,
        /// It proved the job key.
        proven: bool,
    },
    /// Dialled: the endpoint we meant acknowledged our Hello, and this is
    /// its full name (the acknowledged nonce, when we dialled [`ANY_NONCE`]).
    Connected(Address),
}

/// Why a connection ends.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// The peer broke the protocol.
    Protocol(&'static str),
    /// An accepted peer did not prove the job key (counted in `admission_refused`).
    NotAdmitted(&'static str),
    /// Closed before it acknowledged our Hello: the endpoint we dialled is
    /// not there (a new one at its address refused it).
    Refused,
    /// Closed in order by the peer: its end of file came between frames.
    Closed,
    /// Cut in the middle of a frame: the peer's process died while
    /// sending, so its message is lost.
    Cut,
    /// The connect, its handshake or an admission outlasted the connect timeout.
    TimedOut,
    /// This endpoint failed (no randomness for a challenge, say).
    Local(Error),
}

impl From<Failure> for Error {
    fn from(f: Failure) -> Error {
        match f {
            Failure::Protocol(why) | Failure::NotAdmitted(why) => Error::Protocol(why),
            Failure::Refused => Error::PeerUnreachable {
                peer: PeerAddr::UNSPEC,
                errno: libc::ECONNREFUSED,
            },
            Failure::Closed => Error::PeerClosed { peer: PeerAddr::UNSPEC },
            Failure::Cut => Error::PeerUnreachable {
                peer: PeerAddr::UNSPEC,
                errno: libc::ECONNRESET,
            },
            Failure::TimedOut => Error::TimedOut,
            Failure::Local(e) => e,
        }
    }
}

/// Whether `frame` belongs to the handshake (and so to the machine).
#[inline]
pub fn is_handshake(frame: &Frame) -> bool {
    matches!(
        frame,
        Frame::Hello { .. } | Frame::HelloAck { .. } | Frame::Challenge { .. } | Frame::Proof
    )
}

/// One connection's lifecycle.
#[derive(Debug)]
pub struct Link {
    stage: Stage,
    /// The name we dialled (dialled connections).
    dialled: Option<TcpName>,
    /// When the connect, handshake or admission under way times out.
    deadline: Option<Instant>,
    transmit: VecDeque<Transmit>,
    events: VecDeque<Event>,
}

impl Link {
    /// A connection we dial to `peer` at `now`: its Hello is queued, to
    /// be written once connected; the connect and the handshake must end
    /// within the connect timeout.
    pub fn dial(local: &Local, peer: &Address, now: Instant) -> Result<Link, Failure> {
        let dialled = TcpName::decode(peer.as_bytes()).map_err(|e| Failure::Protocol(e.as_str()))?;
        let mut link = Link {
            stage: Stage::Connecting,
            dialled: Some(dialled),
            deadline: Some(now + local.connect_timeout),
            transmit: VecDeque::new(),
            events: VecDeque::new(),
        };
        let me = local.name.as_bytes();
        let hello = Frame::Hello {
            name_len: me.len() as u8,
            to: dialled.nonce,
        };
        link.send(hello, me.to_vec());
        Ok(link)
    }

    /// A connection a peer opened to us, waiting for its Hello. No
    /// deadline: an accepted connection costs nothing until it is admitted.
    pub fn accept() -> Link {
        Link {
            stage: Stage::AwaitHello,
            dialled: None,
            deadline: None,
            transmit: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    /// Whether frames flow (the handshake is over).
    #[inline]
    pub fn is_open(&self) -> bool {
        self.stage == Stage::Open
    }

    /// Whether the TCP connect is still under way (nothing may be read or written).
    #[inline]
    pub fn is_connecting(&self) -> bool {
        self.stage == Stage::Connecting
    }

    /// Whether it is a connection we dialled that is not open yet.
    pub fn is_dialling(&self) -> bool {
        matches!(self.stage, Stage::Connecting | Stage::Handshake)
    }

    /// Whether an accepted peer was challenged and has not proven the key.
    pub fn awaits_proof(&self) -> bool {
        matches!(self.stage, Stage::AwaitProof { .. })
    }

    /// The peer whose Hello is being vetted or proven, if any.
    pub fn applicant(&self) -> Option<&Address> {
        match &self.stage {
            Stage::Vetting { peer } | Stage::AwaitProof { peer, .. } => Some(peer),
            _ => None,
        }
    }

    /// The crossed-connect tie-break: this is our connection to `peer`
    /// and the peer's Hello arrived on the one it dialled to us. The
    /// endpoint with the greater name gives its own up, but only while
    /// nothing but its Hello went out on it (it is not open yet); the
    /// smaller keeps its own, which the peer then adopts.
    pub fn gives_way(&self, local: &Local, peer: &Address) -> bool {
        crossing::survivor(&local.name, peer) == Keep::Theirs && self.is_dialling()
    }

    /// The TCP connect finished: the Hello may go out.
    pub fn handle_connected(&mut self) {
        if self.stage == Stage::Connecting {
            self.stage = Stage::Handshake;
        }
    }

    /// Bytes read and not yet consumed, when a handshake frame heads them
    /// or the connection is not open: handles one frame and returns how
    /// many bytes it took (0 while the frame is not all there).
    pub fn handle_bytes(&mut self, local: &Local, bytes: &[u8]) -> Result<usize, Failure> {
        if bytes.len() < HEADER_LEN || matches!(self.stage, Stage::Vetting { .. }) {
            return Ok(0);
        }
        let frame = Frame::parse(bytes).map_err(|e| Failure::Protocol(e.as_str()))?;
        let end = HEADER_LEN
            + match frame {
                Frame::Hello { name_len, .. } => name_len as usize,
                Frame::Proof => PROOF_LEN as usize,
                _ => 0,
            };
        // A handshake frame's payload is read whole before it is judged;
        // any other frame is judged on its header.
        if is_handshake(&frame) && bytes.len() < end {
            return Ok(0);
        }
        let body = &bytes[HEADER_LEN..end.min(bytes.len())];
        match (&self.stage, frame) {
            (Stage::AwaitHello, Frame::Hello { to, .. }) => self.on_hello(local, to, body),
            (Stage::Handshake, Frame::HelloAck { nonce }) => self.on_hello_ack(nonce),
            (Stage::Handshake, Frame::Challenge { nonce }) => self.on_challenge(local, &nonce),
            (Stage::AwaitProof { .. }, Frame::Proof) => self.on_proof(local, body),
            (_, Frame::Hello { .. }) => Err(Failure::Protocol("second hello on a connection")),
            (_, Frame::HelloAck { .. }) => Err(Failure::Protocol("hello acknowledgement out of place")),
            (_, Frame::Challenge { .. }) => Err(Failure::Protocol("challenge out of place")),
            (Stage::AwaitProof { .. }, _) => Err(Failure::NotAdmitted("frame before the job key proof")),
            (_, Frame::Proof) => Err(Failure::Protocol("proof without a challenge")),
            (Stage::AwaitHello, _) => Err(Failure::Protocol("first frame is not a hello")),
            (Stage::Connecting | Stage::Handshake, _) => {
                Err(Failure::Protocol("first frame is not a hello acknowledgement"))
            }
            (Stage::Open | Stage::Vetting { .. }, _) => Err(Failure::Local(Error::Internal(
                "a data frame given to the connection's handshake",
            ))),
        }
        .map(|()| end)
    }

    /// The driver lets the peer of an [`Event::Hello`] in (its receive
    /// memory has room), at `now`: without a job key the connection opens
    /// ([`Event::Admitted`], HelloAck queued); with one, a Challenge from
    /// `fresh` goes out and the Proof must come within the connect timeout.
    pub fn admit(
        &mut self,
        local: &Local,
        now: Instant,
        fresh: impl FnOnce() -> xfer_core::Result<[u8; admit::CHALLENGE_LEN]>,
    ) -> Result<(), Failure> {
        let Stage::Vetting { peer } = self.stage else {
            return Err(Failure::Local(Error::Internal("admit without a hello")));
        };
        if local.key.is_none() {
            self.open_accepted(local, peer, false);
            return Ok(());
        }
        let challenge = fresh().map_err(Failure::Local)?;
        self.send(Frame::Challenge { nonce: challenge }, Vec::new());
        self.stage = Stage::AwaitProof { peer, challenge };
        self.deadline = Some(now + local.connect_timeout);
        Ok(())
    }

    /// The time is `now`: a connect, handshake or admission past its
    /// deadline fails.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), Failure> {
        match self.deadline {
            Some(d) if now > d => Err(Failure::TimedOut),
            _ => Ok(()),
        }
    }

    /// The peer closed its end; `mid_frame` when bytes of a frame were
    /// read but not all of it (staged, or a payload under way). Says why
    /// the connection ends: before our Hello was acknowledged the endpoint
    /// we dialled is not there; between frames it is an orderly close; in
    /// the middle of one, a failure.
    pub fn handle_eof(&self, mid_frame: bool) -> Failure {
        if self.is_dialling() {
            Failure::Refused
        } else if mid_frame {
            Failure::Cut
        } else {
            Failure::Closed
        }
    }

    /// The next thing that happened, oldest first.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The next handshake frame to write, oldest first.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmit.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called next,
    /// if ever. The epoll driver does not sleep on deadlines: it asks every
    /// connection while any is being set up or admitted.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    fn send(&mut self, frame: Frame, payload: Vec<u8>) {
        self.transmit.push_back(Transmit {
            hdr: frame.to_bytes(),
            payload,
        });
    }

    fn on_hello(&mut self, local: &Local, to: u64, body: &[u8]) -> Result<(), Failure> {
        let name = TcpName::decode(body).map_err(|e| Failure::Protocol(e.as_str()))?;
        if to != local.nonce && to != ANY_NONCE {
            // Dialled by an old name of this address: what it sends was
            // meant for an earlier endpoint.
            tracing::info!(peer = %name, "hello for an earlier endpoint at this address refused");
            return Err(Failure::Protocol("hello names an earlier endpoint at this address"));
        }
        let peer = Address::new(body).map_err(|_| Failure::Protocol("hello carries no endpoint name"))?;
        self.stage = Stage::Vetting { peer };
        self.events.push_back(Event::Hello(peer));
        Ok(())
    }

    fn on_proof(&mut self, local: &Local, sent: &[u8]) -> Result<(), Failure> {
        let Stage::AwaitProof { peer, challenge } = self.stage else {
            return Err(Failure::Protocol("proof without a challenge"));
        };
        let Some(key) = local.key.as_ref() else {
            return Err(Failure::Local(Error::Internal(
                "a challenge was sent without a job key",
            )));
        };
        let ok =
            sent.len() == admit::PROOF_LEN && admit::verify(&key.0, &challenge, local.nonce, peer.as_bytes(), sent);
        if !ok {
            return Err(Failure::NotAdmitted("job key proof does not match"));
        }
        self.open_accepted(local, peer, true);
        Ok(())
    }

    fn open_accepted(&mut self, local: &Local, peer: Address, proven: bool) {
        // The first frame written after the handshake's: the peer holds
        // everything else it has for us until this arrives.
        self.send(Frame::HelloAck { nonce: local.nonce }, Vec::new());
        self.stage = Stage::Open;
        self.deadline = None;
        self.events.push_back(Event::Admitted { peer, proven });
    }

    fn on_hello_ack(&mut self, nonce: u64) -> Result<(), Failure> {
        let Some(dialled) = self.dialled else {
            return Err(Failure::Protocol("hello acknowledgement out of place"));
        };
        if nonce != dialled.nonce && dialled.nonce != ANY_NONCE {
            return Err(Failure::Protocol("hello acknowledged by another endpoint"));
        }
        let acked = TcpName { nonce, ..dialled };
        let name = Address::new(&acked.to_vec()).map_err(Failure::Local)?;
        self.stage = Stage::Open;
        self.deadline = None;
        self.events.push_back(Event::Connected(name));
        Ok(())
    }

    fn on_challenge(&mut self, local: &Local, nonce: &[u8; admit::CHALLENGE_LEN]) -> Result<(), Failure> {
        let Some(dialled) = self.dialled else {
            return Err(Failure::Protocol("challenge out of place"));
        };
        let Some(key) = local.key.as_ref() else {
            return Err(Failure::Protocol(
                "the peer admits only holders of its job key (XFER_JOB_KEY)",
            ));
        };
        let mac = admit::proof(&key.0, nonce, dialled.nonce, local.name.as_bytes()).map_err(Failure::Local)?;
        self.send(Frame::Proof, mac.to_vec());
        Ok(())
    }
}
