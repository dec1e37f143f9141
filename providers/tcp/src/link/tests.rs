//! Two lifecycle machines against each other in memory: no sockets, no
//! clock (every instant is made up), bytes moved by hand in chunks of any
//! size. A [`Pipe`] is one TCP connection: the link that dialled, the link
//! that accepted, and the bytes in flight each way.

use std::time::{Duration, Instant};

use xfer_core::unstable::addr::Address;
use xfer_core::JobKey;

use super::{Event, Failure, Link, Local};
use crate::name::{TcpName, ANY_NONCE};
use crate::wire::{Frame, HEADER_LEN};

const LIMIT: Duration = Duration::from_secs(10);
const CHALLENGE: [u8; 16] = *b"sixteen bytes!!!";

fn name(port: u16, nonce: u64) -> Address {
    let n = TcpName {
        addr: ([127, 0, 0, 1], port).into(),
        nonce,
    };
    Address::new(&n.to_vec()).unwrap()
}

fn local(port: u16, nonce: u64, key: Option<&[u8]>) -> Local {
    Local {
        name: name(port, nonce),
        nonce,
        key: key.map(|k| JobKey(k.to_vec())),
        connect_timeout: LIMIT,
    }
}

/// `a`'s link dialling `to` at `now`, its TCP connect done.
fn dialled(a: &Local, to: &Address, now: Instant) -> Link {
    let mut l = Link::dial(a, to, now).unwrap();
    l.handle_connected();
    l
}

/// The bytes of the Hello `a` sends when it dials `to`.
fn hello_bytes(a: &Local, to: &Address, now: Instant) -> Vec<u8> {
    Link::dial(a, to, now).unwrap().output_bytes()
}

impl Link {
    /// Everything queued to write, as bytes.
    fn output_bytes(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some(t) = self.poll_transmit() {
            out.extend_from_slice(&t.hdr);
            out.extend_from_slice(&t.payload);
        }
        out
    }
}

/// One end of a pipe: its link, the bytes it read and has not consumed,
/// what happened to it, and why it failed.
struct End {
    link: Link,
    staged: Vec<u8>,
    events: Vec<Event>,
    failed: Option<Failure>,
}

impl End {
    fn new(link: Link) -> End {
        End {
            link,
            staged: Vec::new(),
            events: Vec::new(),
            failed: None,
        }
    }

    /// Reads `bytes`, as a driver does: handles frames while they are
    /// whole, admits every Hello (`admit` says whether the receive memory
    /// has room), records events. True when it consumed anything.
    fn read(&mut self, local: &Local, now: Instant, bytes: &[u8], admit: bool) -> bool {
        self.staged.extend_from_slice(bytes);
        let mut any = false;
        while self.failed.is_none() {
            // Once open, only handshake frames are the machine's; the rest
            // is the endpoint's data path.
            let handshake =
                self.staged.len() >= HEADER_LEN && Frame::parse(&self.staged).is_ok_and(|f| super::is_handshake(&f));
            if self.link.is_open() && !handshake {
                break;
            }
            let used = match self.link.handle_bytes(local, &self.staged) {
                Ok(n) => n,
                Err(f) => {
                    self.failed = Some(f);
                    break;
                }
            };
            self.staged.drain(..used);
            any |= used > 0;
            while let Some(ev) = self.link.poll_event() {
                self.events.push(ev);
                if let Event::Hello(_) = ev {
                    if !admit {
                        self.failed = Some(Failure::Local(xfer_core::Error::Os(libc::ENOBUFS)));
                    } else if let Err(f) = self.link.admit(local, now, || Ok(CHALLENGE)) {
                        self.failed = Some(f);
                    }
                }
            }
            if used == 0 {
                break;
            }
        }
        any
    }
}

/// One TCP connection in memory.
struct Pipe {
    out: End,
    acc: End,
    /// Bytes written by `out`, not yet read by `acc`; and the other way.
    to_acc: Vec<u8>,
    to_out: Vec<u8>,
    /// Most bytes moved each way per step.
    chunk: usize,
    /// Whether the acceptor's receive memory admits the peer.
    admit: bool,
}

impl Pipe {
    /// `a` dials `b` at `now`; the TCP connect is done.
    fn dial(a: &Local, b: &Address, now: Instant) -> Pipe {
        Pipe {
            out: End::new(dialled(a, b, now)),
            acc: End::new(Link::accept()),
            to_acc: Vec::new(),
            to_out: Vec::new(),
            chunk: usize::MAX,
            admit: true,
        }
    }

    /// One step: each end writes what it has and reads up to `chunk`
    /// bytes; true when anything moved.
    fn step(&mut self, a: &Local, b: &Local, now: Instant) -> bool {
        self.to_acc.extend(self.out.link.output_bytes());
        self.to_out.extend(self.acc.link.output_bytes());
        let mut moved = false;
        if self.acc.failed.is_none() && !self.to_acc.is_empty() {
            let n = self.chunk.min(self.to_acc.len());
            let bytes: Vec<u8> = self.to_acc.drain(..n).collect();
            self.acc.read(b, now, &bytes, self.admit);
            moved = true;
        }
        if self.out.failed.is_none() && !self.to_out.is_empty() {
            let n = self.chunk.min(self.to_out.len());
            let bytes: Vec<u8> = self.to_out.drain(..n).collect();
            self.out.read(a, now, &bytes, true);
            moved = true;
        }
        moved
    }

    /// Steps until nothing moves.
    fn drive(&mut self, a: &Local, b: &Local, now: Instant) {
        for _ in 0..10_000 {
            if !self.step(a, b, now) {
                return;
            }
        }
        panic!("the handshake does not settle");
    }

    /// Both ends open, nothing left over anywhere.
    fn assert_open(&mut self) {
        assert!(self.out.link.is_open() && self.acc.link.is_open());
        assert_eq!((&self.out.failed, &self.acc.failed), (&None, &None));
        assert!(self.out.staged.is_empty() && self.acc.staged.is_empty());
        assert!(self.to_acc.is_empty() && self.to_out.is_empty());
        assert!(self.out.link.poll_transmit().is_none() && self.acc.link.poll_transmit().is_none());
        assert_eq!(self.out.link.poll_timeout(), None, "no deadline once open");
        assert_eq!(self.acc.link.poll_timeout(), None);
    }

    /// Both ends open after the handshake that admits `a` (`proven`: by
    /// its job key) at `b`; `what` names the case in a failure.
    fn assert_admitted(&mut self, a: &Local, b: &Local, proven: bool, what: &str) {
        self.assert_open();
        assert_eq!(
            self.acc.events,
            [Event::Hello(a.name), Event::Admitted { peer: a.name, proven }],
            "{what}"
        );
        assert_eq!(self.out.events, [Event::Connected(b.name)], "{what}");
    }
}

#[test]
fn hello_and_ack_open_both_ends() {
    let (a, b, now) = (local(1, 11, None), local(2, 22, None), Instant::now());
    let mut p = Pipe::dial(&a, &b.name, now);
    p.drive(&a, &b, now);
    p.assert_admitted(&a, &b, false, "no job key");
}

#[test]
fn nothing_is_written_before_the_connect_finishes() {
    let (a, b, now) = (local(1, 11, None), local(2, 22, None), Instant::now());
    let mut link = Link::dial(&a, &b.name, now).unwrap();
    assert!(link.is_connecting() && link.is_dialling());
    // The Hello is queued at once; the driver holds it until connected.
    let hello = link.poll_transmit().unwrap();
    assert_eq!(
        Frame::parse(&hello.hdr).unwrap(),
        Frame::Hello {
            name_len: a.name.as_bytes().len() as u8,
            to: 22
        }
    );
    assert_eq!(hello.payload, a.name.as_bytes());
    link.handle_connected();
    assert!(!link.is_connecting() && link.is_dialling() && !link.is_open());
}

#[test]
fn a_name_dialled_by_address_only_learns_the_full_name() {
    let (a, b, now) = (local(1, 11, None), local(2, 22, None), Instant::now());
    let mut p = Pipe::dial(&a, &name(2, ANY_NONCE), now);
    p.drive(&a, &b, now);
    p.assert_open();
    assert_eq!(p.out.events, [Event::Connected(b.name)]);
}

#[test]
fn hello_for_an_earlier_endpoint_is_refused() {
    let (a, b, now) = (local(1, 11, None), local(2, 22, None), Instant::now());
    // B restarted at the same address: A still dials its old nonce.
    let mut p = Pipe::dial(&a, &name(2, 21), now);
    p.drive(&a, &b, now);
    assert_eq!(
        p.acc.failed,
        Some(Failure::Protocol("hello names an earlier endpoint at this address"))
    );
    assert!(p.acc.events.is_empty(), "nothing of the peer's reaches the endpoint");
    assert!(p.to_out.is_empty(), "no answer");
    // Its close reaches A before any HelloAck: refused.
    assert_eq!(p.out.link.handle_eof(false), Failure::Refused);
}

#[test]
fn hello_acknowledged_by_another_endpoint_fails() {
    let (a, b, now) = (local(1, 11, None), local(2, 22, None), Instant::now());
    let mut out = End::new(dialled(&a, &b.name, now));
    let ack = Frame::HelloAck { nonce: 23 }.to_bytes();
    out.read(&a, now, &ack, true);
    assert_eq!(
        out.failed,
        Some(Failure::Protocol("hello acknowledged by another endpoint"))
    );
    assert!(!out.link.is_open());
}

#[test]
fn a_hello_the_receive_memory_refuses_gets_no_answer() {
    let (a, b, now) = (local(1, 11, None), local(2, 22, None), Instant::now());
    let mut p = Pipe::dial(&a, &b.name, now);
    p.admit = false;
    p.drive(&a, &b, now);
    assert_eq!(p.acc.events, [Event::Hello(a.name)]);
    assert!(matches!(p.acc.failed, Some(Failure::Local(_))));
    assert!(p.acc.link.poll_transmit().is_none(), "no HelloAck queued");
    assert!(!p.acc.link.is_open() && !p.out.link.is_open());
}

#[test]
fn job_key_proven_opens_the_connection() {
    let (a, b, now) = (local(1, 11, Some(b"key")), local(2, 22, Some(b"key")), Instant::now());
    let mut p = Pipe::dial(&a, &b.name, now);
    p.drive(&a, &b, now);
    p.assert_admitted(&a, &b, true, "job key");
}

#[test]
fn a_wrong_job_key_is_not_admitted() {
    let (a, b, now) = (local(1, 11, Some(b"guess")), local(2, 22, Some(b"key")), Instant::now());
    let mut p = Pipe::dial(&a, &b.name, now);
    p.drive(&a, &b, now);
    assert_eq!(p.acc.failed, Some(Failure::NotAdmitted("job key proof does not match")));
    // Still waiting for a proof when it fails: the driver counts it refused.
    assert!(p.acc.link.awaits_proof());
    assert_eq!(p.acc.link.applicant(), Some(&a.name));
    assert!(!p.out.link.is_open(), "no HelloAck came");
}

#[test]
fn a_proof_bound_to_another_endpoint_is_not_admitted() {
    // C holds the key, but its proof names C: replayed by A it fails.
    let (a, b, now) = (local(1, 11, Some(b"key")), local(2, 22, Some(b"key")), Instant::now());
    let c = local(3, 33, Some(b"key"));
    let mut acc = End::new(Link::accept());
    acc.read(&b, now, &hello_bytes(&a, &b.name, now), true);
    assert!(acc.link.awaits_proof());
    let mac = xfer_core::unstable::rdm::admit::proof(b"key", &CHALLENGE, 22, c.name.as_bytes()).unwrap();
    acc.read(&b, now, &[&Frame::Proof.to_bytes()[..], &mac].concat(), true);
    assert_eq!(acc.failed, Some(Failure::NotAdmitted("job key proof does not match")));
}

#[test]
fn a_dialler_without_the_job_key_gives_up() {
    let (a, b, now) = (local(1, 11, None), local(2, 22, Some(b"key")), Instant::now());
    let mut p = Pipe::dial(&a, &b.name, now);
    p.drive(&a, &b, now);
    assert_eq!(
        p.out.failed,
        Some(Failure::Protocol(
            "the peer admits only holders of its job key (XFER_JOB_KEY)"
        ))
    );
    assert!(p.acc.link.awaits_proof());
}

#[test]
fn a_frame_before_the_proof_is_not_admitted() {
    let (a, b, now) = (local(1, 11, Some(b"key")), local(2, 22, Some(b"key")), Instant::now());
    let mut acc = End::new(Link::accept());
    acc.read(&b, now, &hello_bytes(&a, &b.name, now), true);
    acc.read(&b, now, &Frame::Ping.to_bytes(), true);
    assert_eq!(acc.failed, Some(Failure::NotAdmitted("frame before the job key proof")));
}

#[test]
fn frames_out_of_place_break_the_protocol() {
    let (a, b, now) = (local(1, 11, None), local(2, 22, None), Instant::now());
    // A first frame that is not a Hello.
    let mut acc = End::new(Link::accept());
    acc.read(&b, now, &Frame::Ping.to_bytes(), true);
    assert_eq!(acc.failed, Some(Failure::Protocol("first frame is not a hello")));
    // Anything but a HelloAck (or Challenge) answering our Hello.
    let mut out = End::new(dialled(&a, &b.name, now));
    out.read(&a, now, &Frame::Pong.to_bytes(), true);
    assert_eq!(
        out.failed,
        Some(Failure::Protocol("first frame is not a hello acknowledgement"))
    );
    // A second Hello on an open connection.
    let mut p = Pipe::dial(&a, &b.name, now);
    p.drive(&a, &b, now);
    p.acc.read(&b, now, &hello_bytes(&a, &b.name, now), true);
    assert_eq!(p.acc.failed, Some(Failure::Protocol("second hello on a connection")));
    // A proof nobody asked for.
    let mut acc = End::new(Link::accept());
    acc.read(&b, now, &[&Frame::Proof.to_bytes()[..], &[0; 32]].concat(), true);
    assert_eq!(acc.failed, Some(Failure::Protocol("proof without a challenge")));
}

#[test]
fn garbage_breaks_the_protocol() {
    let b = local(2, 22, None);
    let mut acc = End::new(Link::accept());
    acc.read(&b, Instant::now(), &[0xff; HEADER_LEN], true);
    assert!(matches!(acc.failed, Some(Failure::Protocol(_))));
}

/// The whole keyed handshake with every byte in its own read, and with
/// every other chunk size up to the longest frame: the same outcome.
#[test]
fn handshake_holds_for_every_chunk_size() {
    let (a, b, now) = (local(1, 11, Some(b"key")), local(2, 22, Some(b"key")), Instant::now());
    for chunk in 1..=HEADER_LEN + 33 {
        let mut p = Pipe::dial(&a, &b.name, now);
        p.chunk = chunk;
        p.drive(&a, &b, now);
        p.assert_admitted(&a, &b, true, &format!("chunk {chunk}"));
    }
}

/// Each handshake frame split in two at every byte boundary: nothing is
/// taken before the frame is whole, then all of it at once.
#[test]
fn handshake_frames_split_at_every_byte() {
    let (a, b, now) = (local(1, 11, Some(b"key")), local(2, 22, Some(b"key")), Instant::now());
    let hello = hello_bytes(&a, &b.name, now);
    for cut in 0..hello.len() {
        let mut acc = Link::accept();
        assert_eq!(acc.handle_bytes(&b, &hello[..cut]), Ok(0), "cut {cut}");
        assert_eq!(acc.poll_event(), None);
        assert_eq!(acc.handle_bytes(&b, &hello), Ok(hello.len()), "cut {cut}");
        assert_eq!(acc.poll_event(), Some(Event::Hello(a.name)));
    }
    // The Proof, after the Challenge.
    let mac = xfer_core::unstable::rdm::admit::proof(b"key", &CHALLENGE, 22, a.name.as_bytes()).unwrap();
    let proof = [&Frame::Proof.to_bytes()[..], &mac].concat();
    for cut in 0..proof.len() {
        let mut acc = Link::accept();
        acc.handle_bytes(&b, &hello).unwrap();
        acc.admit(&b, now, || Ok(CHALLENGE)).unwrap();
        assert!(acc.awaits_proof());
        assert_eq!(acc.handle_bytes(&b, &proof[..cut]), Ok(0), "cut {cut}");
        assert!(acc.awaits_proof());
        assert_eq!(acc.handle_bytes(&b, &proof), Ok(proof.len()), "cut {cut}");
        assert!(acc.is_open());
    }
    // The HelloAck: the dialler stays in its handshake until it is whole.
    let ack = Frame::HelloAck { nonce: 22 }.to_bytes();
    for cut in 0..ack.len() {
        let mut out = dialled(&a, &b.name, now);
        assert_eq!(out.handle_bytes(&a, &ack[..cut]), Ok(0));
        assert!(!out.is_open());
        assert_eq!(out.handle_bytes(&a, &ack), Ok(HEADER_LEN));
        assert!(out.is_open());
    }
}
#[test]
fn end_of_file_between_frames_closes_in_the_middle_of_one_fails() {
    let (a, b, now) = (local(1, 11, None), local(2, 22, None), Instant::now());
    // Half a Hello read, then the end: the peer died while sending.
    let hello = hello_bytes(&a, &b.name, now);
    let mut acc = End::new(Link::accept());
    acc.read(&b, now, &hello[..HEADER_LEN + 3], true);
    assert_eq!(acc.link.handle_eof(!acc.staged.is_empty()), Failure::Cut);
    // No byte at all: closed in order.
    let acc = End::new(Link::accept());
    assert_eq!(acc.link.handle_eof(!acc.staged.is_empty()), Failure::Closed);
    // Open, between frames and in the middle of one, both ways.
    let mut p = Pipe::dial(&a, &b.name, now);
    p.drive(&a, &b, now);
    for end in [&p.out, &p.acc] {
        assert_eq!(end.link.handle_eof(false), Failure::Closed);
        assert_eq!(end.link.handle_eof(true), Failure::Cut);
    }
    // Before the HelloAck, the end says the dialled endpoint is gone.
    let mut p = Pipe::dial(&a, &b.name, now);
    p.step(&a, &b, now); // the Hello reached B; its HelloAck did not reach A
    assert_eq!(p.out.link.handle_eof(false), Failure::Refused);
    assert_eq!(p.out.link.handle_eof(true), Failure::Refused);
    assert_eq!(
        xfer_core::Error::from(Failure::Closed),
        xfer_core::Error::PeerClosed {
            peer: xfer_core::PeerAddr::UNSPEC
        }
    );
}

#[test]
fn the_connect_deadline_fires_after_the_connect_timeout() {
    let (a, b, t0) = (local(1, 11, None), local(2, 22, None), Instant::now());
    let mut out = Link::dial(&a, &b.name, t0).unwrap();
    assert_eq!(out.poll_timeout(), Some(t0 + LIMIT));
    assert_eq!(out.handle_timeout(t0 + LIMIT), Ok(()));
    out.handle_connected();
    // The handshake shares the connect's deadline.
    assert_eq!(out.poll_timeout(), Some(t0 + LIMIT));
    assert_eq!(
        out.handle_timeout(t0 + LIMIT + Duration::from_nanos(1)),
        Err(Failure::TimedOut)
    );
    // An accepted connection waits for its Hello without a deadline.
    let acc = Link::accept();
    assert_eq!(acc.poll_timeout(), None);
}

#[test]
fn an_unproven_peer_times_out() {
    let (a, b, t0) = (local(1, 11, Some(b"key")), local(2, 22, Some(b"key")), Instant::now());
    let t1 = t0 + Duration::from_secs(3);
    let hello = hello_bytes(&a, &b.name, t0);
    let mut acc = End::new(Link::accept());
    acc.read(&b, t1, &hello, true);
    assert!(acc.link.awaits_proof());
    // The admission's own deadline, from the challenge.
    assert_eq!(acc.link.poll_timeout(), Some(t1 + LIMIT));
    assert_eq!(acc.link.handle_timeout(t1 + LIMIT), Ok(()));
    assert_eq!(
        acc.link.handle_timeout(t1 + LIMIT + Duration::from_millis(1)),
        Err(Failure::TimedOut)
    );
}

/// Two endpoints dial each other at once. The greater name gives its own
/// connection up while only its Hello went out on it; the smaller keeps
/// its own. Once a connection is open, neither gives way.
#[test]
fn crossed_connects_the_greater_name_gives_way() {
    let now = Instant::now();
    let (small, great) = (local(1, 11, None), local(2, 22, None));
    assert!(small.name < great.name);
    let mut s_to_g = Pipe::dial(&small, &great.name, now);
    let mut g_to_s = Pipe::dial(&great, &small.name, now);
    // Each Hello reaches the other side, no HelloAck has come back yet.
    s_to_g.step(&small, &great, now);
    g_to_s.step(&great, &small, now);
    assert_eq!(s_to_g.acc.events.first(), Some(&Event::Hello(small.name)));
    assert_eq!(g_to_s.acc.events.first(), Some(&Event::Hello(great.name)));
    // On the Hello, each side asks its own connection whether it gives way.
    assert!(
        g_to_s.out.link.gives_way(&great, &small.name),
        "the greater adopts the peer's connection"
    );
    assert!(
        !s_to_g.out.link.gives_way(&small, &great.name),
        "the smaller keeps its own"
    );
    // Before the TCP connect finished it gives way too (only the Hello is queued).
    let early = Link::dial(&great, &small.name, now).unwrap();
    assert!(early.gives_way(&great, &small.name));
    // Both connections settle; open, the greater's own no longer gives way
    // (frames may be in flight on it).
    s_to_g.drive(&small, &great, now);
    g_to_s.drive(&great, &small, now);
    s_to_g.assert_open();
    g_to_s.assert_open();
    assert!(!g_to_s.out.link.gives_way(&great, &small.name));
    // An accepted connection is never the one that gives way.
    assert!(!s_to_g.acc.link.gives_way(&great, &small.name));
}

mod prop {
    use proptest::prelude::*;

    use super::*;

    /// Where a link ends up after reading `chunks` in turn: its events,
    /// its failure, whether it is open, and what it left unread.
    fn outcome(link: Link, local: &Local, chunks: &[&[u8]]) -> (Vec<Event>, Option<Failure>, bool, usize) {
        let mut end = End::new(link);
        for chunk in chunks {
            if end.failed.is_none() {
                end.read(local, Instant::now(), chunk, true);
            }
        }
        let open = end.link.is_open();
        // After a failure nothing more is read: what is left does not count.
        let left = if end.failed.is_some() { 0 } else { end.staged.len() };
        (end.events, end.failed, open, left)
    }

    proptest! {
        /// Whatever a peer sends first (a Hello cut anywhere, then any
        /// bytes), split into two reads at every byte: nothing panics, and
        /// the outcome is the one of a single read.
        #[test]
        fn first_bytes_split_anywhere_decide_the_same(
            keep in 0usize..=80,
            tail in proptest::collection::vec(any::<u8>(), 0..120),
            keyed in any::<bool>(),
        ) {
            let key: Option<&[u8]> = if keyed { Some(b"key") } else { None };
            let (a, b) = (local(1, 11, key), local(2, 22, key));
            let mut bytes = hello_bytes(&a, &b.name, Instant::now());
            bytes.truncate(keep);
            bytes.extend_from_slice(&tail);
            let accepting = outcome(Link::accept(), &b, &[&bytes]);
            // The dialling side, answered by the same bytes.
            let dialling = outcome(dialled(&a, &b.name, Instant::now()), &a, &[&bytes]);
            for cut in 0..=bytes.len() {
                let (first, rest) = bytes.split_at(cut);
                prop_assert_eq!(&accepting, &outcome(Link::accept(), &b, &[first, rest]), "cut {}", cut);
                prop_assert_eq!(&dialling, &outcome(dialled(&a, &b.name, Instant::now()), &a, &[first, rest]), "cut {}", cut);
            }
        }
    }
}
