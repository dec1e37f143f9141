//! The pair over two in-memory transports under the engine: a peer on the
//! same host identity goes over the first, others over the second (or the
//! second after the first refused), any-source receives take both in post
//! order, and a peer's end on either fails only what waits on it.

use std::collections::VecDeque;

use super::{route, Pair, Parts, Route, Why, LISTENING_EVERY, SECOND_EVERY};
use crate::addr::{Address, AvTable, PeerAddr};
use crate::attr::EndpointAttr;
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::provider::{CompletionLevel, Ctx, DomainProvider, EndpointProvider, RecvOp, SendOp};
use crate::rdm::engine::mem::{Mem, Net};
use crate::rdm::engine::Engine;
use crate::rdm::transport::{Event, Events, Transport};
use crate::sink::Sink;
use crate::tag::RecvSpec;

const ID: u8 = 0x7d;

struct NoKeys;

impl DomainProvider for NoKeys {
    fn name(&self) -> &'static str {
        "pair"
    }
    fn check_address(&self, bytes: &[u8]) -> Result<Address> {
        Address::new(bytes)
    }
    fn open_endpoint(&mut self, _: &EndpointAttr) -> Result<Box<dyn EndpointProvider>> {
        Err(Error::NotSupported("test domain"))
    }
    fn provider_id(&self) -> u8 {
        ID
    }
}

struct Node {
    ep: Engine<Pair<Mem, Mem>>,
    av: AvTable,
    done: VecDeque<Completion>,
}

fn attr() -> EndpointAttr {
    EndpointAttr {
        rndv_threshold: 512,
        inject_size: 256,
        ..EndpointAttr::default()
    }
}

impl Node {
    /// An endpoint whose first transport is on `near`, second on `far`.
    fn new(near: &Net, far: &Net, host: u8, first_on: bool) -> Node {
        let pair = Pair::new(near.open(true), far.open(false), "mem+mem", [host; 8], first_on).expect("pair");
        Node {
            ep: Engine::new(pair, ID, &attr(), 4 << 20).expect("engine"),
            av: AvTable::default(),
            done: VecDeque::new(),
        }
    }

    fn add(&mut self, other: &Node) -> PeerAddr {
        self.av.insert(other.ep.name())
    }

    fn with<R>(&mut self, f: impl FnOnce(&mut Engine<Pair<Mem, Mem>>, &mut Ctx<'_>) -> R) -> R {
        let mut none: [Completion; 0] = [];
        let mut filled = 0;
        let mut cx = Ctx {
            cq: Sink::new(&mut none, &mut filled, &mut self.done),
            av: &self.av,
            domain: &NoKeys,
        };
        f(&mut self.ep, &mut cx)
    }

    fn progress(&mut self) {
        self.with(|ep, cx| ep.progress(cx));
    }

    fn tsend(&mut self, peer: PeerAddr, tag: u64, payload: Vec<u8>, context: u64) {
        let op = SendOp {
            peer,
            tag: Some(tag),
            data: None,
            buf: payload.into(),
            context,
            completion: true,
            level: CompletionLevel::Delivery,
        };
        self.with(|ep, cx| ep.send(cx, op)).expect("send accepted");
    }

    fn trecv(&mut self, src: PeerAddr, len: usize, context: u64) {
        let op = RecvOp {
            spec: RecvSpec { src, tag: 5, ignore: 0 },
            tagged: true,
            buf: vec![0; len].into(),
            context,
        };
        self.with(|ep, cx| ep.recv(cx, op)).expect("receive accepted");
    }

    fn take(&mut self, context: u64) -> Option<Completion> {
        let at = self.done.iter().position(|c| c.context == context)?;
        self.done.remove(at)
    }

    /// Frames delivered by the first and the second transport.
    fn frames(&self) -> (u64, u64) {
        let t = self.ep.transport();
        (t.first().frames, t.second().frames)
    }
}

fn until(nodes: &mut [&mut Node], at: usize, context: u64) -> Completion {
    for _ in 0..10_000 {
        if let Some(c) = nodes[at].take(context) {
            return c;
        }
        for n in nodes.iter_mut() {
            n.progress();
        }
    }
    panic!("operation {context} never completed on node {at}");
}

#[test]
fn addresses_split_and_bad_ones_are_refused() {
    let a = Parts {
        host: [7; 8],
        first: b"near",
        second: b"far",
    };
    let bytes = a.encode();
    assert_eq!(bytes.len(), 8 + 1 + 4 + 3);
    assert_eq!(Parts::parse(&bytes), Some(a));
    let none = Parts {
        host: [7; 8],
        first: b"",
        second: b"far",
    };
    assert_eq!(Parts::parse(&none.encode()), Some(none));
    for bad in [
        &bytes[..8],
        &bytes[..9],
        &bytes[..13],
        &[0u8; 8][..],
        &[[7; 8].as_slice(), &[200, 1]].concat(),
    ] {
        assert_eq!(Parts::parse(bad), None, "{bad:?}");
    }
}

#[test]
fn the_route_names_its_reason() {
    let theirs = |host: u8, first: &'static [u8]| Parts {
        host: [host; 8],
        first,
        second: b"far",
    };
    let me = [1; 8];
    assert_eq!(route(&me, true, &theirs(1, b"near")), Route::First);
    assert_eq!(route(&me, true, &theirs(2, b"near")), Route::Second(Why::OtherHost));
    assert_eq!(route(&me, true, &theirs(1, b"")), Route::Second(Why::NotOffered));
    assert_eq!(route(&me, false, &theirs(1, b"near")), Route::Second(Why::Off));
    assert_eq!(Why::OtherHost.to_string(), "different host identity");
}

#[test]
fn same_host_goes_first_others_second_and_any_source_takes_both_in_post_order() {
    let (near, far, elsewhere) = (Net::new(64), Net::new(64), Net::new(64));
    let mut x = Node::new(&near, &far, 1, true);
    let mut local = Node::new(&near, &far, 1, true);
    let mut remote = Node::new(&elsewhere, &far, 2, true);
    let (xl, xr) = (local.add(&x), remote.add(&x));
    let (lx, rx) = (x.add(&local), x.add(&remote));
    for i in 0..6 {
        x.trecv(PeerAddr::UNSPEC, 64, 100 + i);
    }
    // Three messages from each, interleaved in time.
    for i in 0..3u8 {
        local.tsend(xl, 5, vec![b'l', i], 10 + u64::from(i));
        remote.tsend(xr, 5, vec![b'r', i], 20 + u64::from(i));
    }
    let mut got = Vec::new();
    for i in 0..6 {
        let c = until(&mut [&mut x, &mut local, &mut remote], 0, 100 + i);
        assert_eq!(c.result, Ok(()));
        let mut buf = c.buf.expect("buffer");
        buf.truncate(c.len);
        got.push((c.src, buf));
    }
    // Receives complete in post order; each peer's messages in its order.
    let from = |p: PeerAddr| {
        got.iter()
            .filter(|(s, _)| *s == p)
            .map(|(_, b)| b.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(from(lx), [b"l\0".to_vec(), b"l\x01".to_vec(), b"l\x02".to_vec()]);
    assert_eq!(from(rx), [b"r\0".to_vec(), b"r\x01".to_vec(), b"r\x02".to_vec()]);
    // The local peer came over the first transport, the remote one over the second.
    let (first, second) = x.frames();
    assert!(first >= 4 && second >= 4, "frames: first {first}, second {second}");
    assert_eq!(local.frames().1, 0, "the local peer used the second transport");
    assert_eq!(remote.frames().0, 0, "the remote peer used the first transport");
}

#[test]
fn an_unreachable_first_address_falls_back_to_the_second() {
    let (near, far, other_near) = (Net::new(64), Net::new(64), Net::new(64));
    let mut x = Node::new(&near, &far, 1, true);
    // Same host identity, but its first transport is not reachable from x's.
    // (The in-memory nets number their addresses alike: skip x's.)
    let _skipped = [other_near.open(false), other_near.open(false)];
    let mut y = Node::new(&other_near, &far, 1, true);
    let xy = x.add(&y);
    y.trecv(PeerAddr::UNSPEC, 8, 1);
    x.tsend(xy, 5, b"over tcp".to_vec(), 2);
    let c = until(&mut [&mut y, &mut x], 0, 1);
    assert_eq!(&c.buf.expect("buffer")[..c.len], b"over tcp");
    assert_eq!(x.ep.transport().fallbacks(), 1);
    assert_eq!((x.frames().0, y.frames().0), (0, 0));
}

#[test]
fn each_connection_takes_frames_its_own_transport_carries() {
    // The first transport's frames are smaller than the rendezvous
    // threshold (512), the second's larger.
    let (near, far, elsewhere) = (Net::new(64).with_payload(256), Net::new(64), Net::new(64));
    let mut x = Node::new(&near, &far, 1, true);
    let mut local = Node::new(&near, &far, 1, true);
    let mut remote = Node::new(&elsewhere, &far, 2, true);
    let (lx, rx) = (x.add(&local), x.add(&remote));
    for (peer, to) in [(lx, 0), (rx, 1)] {
        // Connected and admitted first, so what follows is counted alone.
        let at = 1 + to;
        x.tsend(peer, 5, vec![1], 10 + to as u64);
        let node: &mut Node = if to == 0 { &mut local } else { &mut remote };
        node.trecv(PeerAddr::UNSPEC, 8, 20);
        until(&mut [node, &mut x], 0, 20);
        let before = if to == 0 { local.frames().0 } else { remote.frames().1 };
        let node: &mut Node = if to == 0 { &mut local } else { &mut remote };
        node.trecv(PeerAddr::UNSPEC, 400, 30);
        x.tsend(peer, 5, vec![at as u8; 400], 40 + to as u64);
        let c = until(&mut [node, &mut x], 0, 30);
        assert_eq!(c.result, Ok(()));
        assert_eq!(c.buf.expect("buffer")[..c.len], [at as u8; 400]);
        let after = if to == 0 { local.frames().0 } else { remote.frames().1 };
        // Over the first, 400 bytes went by rendezvous (its net refuses a
        // frame of them: delivered, they were not sent eagerly); over the
        // second, eagerly in one frame, not by the first's frame size.
        if to == 1 {
            assert_eq!(after - before, 1, "one eager frame");
        }
    }
}

#[test]
fn an_endpoint_with_the_first_off_is_reached_over_the_second() {
    let (near, far) = (Net::new(64), Net::new(64));
    let mut x = Node::new(&near, &far, 1, true);
    let mut y = Node::new(&near, &far, 1, false);
    assert_eq!(Parts::parse(y.ep.transport().address()).expect("parts").first, b"");
    let yx = y.add(&x);
    x.trecv(PeerAddr::UNSPEC, 8, 1);
    y.tsend(yx, 5, b"hi".to_vec(), 2);
    until(&mut [&mut x, &mut y], 0, 1);
    assert_eq!((x.frames().0, y.frames().0), (0, 0));
    assert_eq!(x.ep.transport().fallbacks(), 0);
}

#[test]
fn a_peer_ending_on_either_transport_fails_only_what_waits_on_it() {
    let (near, far, elsewhere) = (Net::new(64), Net::new(64), Net::new(64));
    let mut x = Node::new(&near, &far, 1, true);
    let mut local = Node::new(&near, &far, 1, true);
    let mut remote = Node::new(&elsewhere, &far, 2, true);
    let (xl, xr) = (x.add(&local), x.add(&remote));
    // Rendezvous sends that no receive takes: they wait on their peer.
    x.tsend(xl, 5, vec![1; 4096], 1);
    x.tsend(xr, 5, vec![2; 4096], 2);
    for _ in 0..20 {
        for n in [&mut x, &mut local, &mut remote] {
            n.progress();
        }
    }
    assert!(x.take(1).is_none() && x.take(2).is_none());
    drop(local);
    let c = until(&mut [&mut x, &mut remote], 0, 1);
    assert!(matches!(c.result, Err(Error::PeerClosed { .. })), "{:?}", c.result);
    assert!(x.take(2).is_none(), "the remote peer's send failed with the local one");
    remote.trecv(PeerAddr::UNSPEC, 4096, 9);
    assert_eq!(until(&mut [&mut x, &mut remote], 0, 2).result, Ok(()));
    assert_eq!(
        until(&mut [&mut x, &mut remote], 1, 9).buf.expect("buffer"),
        vec![2; 4096]
    );
    drop(remote);
    x.tsend(xr, 5, vec![3; 4096], 3);
    let c = until(&mut [&mut x], 0, 3);
    assert!(c.result.is_err(), "a send to a dead remote peer succeeded");
}

/// Counts the frames a transport reports.
#[derive(Default)]
struct Frames(usize);

impl Events for Frames {
    fn event(&mut self, ev: Event<'_>) {
        if let Event::Frame { .. } = ev {
            self.0 += 1;
        }
    }
}

/// Progress calls of `p` until it reports a frame (at most `max`).
fn calls_until_frame(p: &mut Pair<Mem, Mem>, max: u32) -> Option<u32> {
    (1..=max).find(|_| {
        let mut f = Frames::default();
        p.progress(&mut f);
        f.0 > 0
    })
}

#[test]
fn an_idle_second_transport_is_polled_every_few_calls_and_after_a_wait() {
    let (near, far) = (Net::new(64), Net::new(64));
    let pair = |host| Pair::new(near.open(false), far.open(false), "mem+mem", [host; 8], true).expect("pair");
    let (mut x, mut y) = (pair(1), pair(2));
    let conn = x.connect(y.address()).expect("connect over the second");
    assert!(!Pair::<Mem, Mem>::on_first(conn));
    x.send(conn, b"h", b"first").expect("send");
    // Accepting reports events: the second stays due, the frame comes next.
    assert!(calls_until_frame(&mut y, 3).is_some());
    // Idle now (polled, nothing seen): a frame waits for the second's turn.
    y.progress(&mut Frames::default());
    while y.skipped != 0 || y.second_due {
        y.progress(&mut Frames::default());
    }
    x.send(conn, b"h", b"later").expect("send");
    assert_eq!(calls_until_frame(&mut y, 2 * SECOND_EVERY), Some(SECOND_EVERY));
    // After prepare_wait the next call polls both.
    for _ in 0..2 * SECOND_EVERY {
        y.progress(&mut Frames::default());
    }
    x.send(conn, b"h", b"after a wait").expect("send");
    assert!(y.prepare_wait());
    assert_eq!(calls_until_frame(&mut y, 1), Some(1));
}

/// Counts the frames a transport reports on the pair's second transport.
#[derive(Default)]
struct SecondFrames(usize);

impl Events for SecondFrames {
    fn event(&mut self, ev: Event<'_>) {
        if let Event::Frame { conn, .. } = ev {
            if !Pair::<Mem, Mem>::on_first(conn) {
                self.0 += 1;
            }
        }
    }
}

#[test]
fn a_second_transport_without_connections_waits_longer_while_the_first_is_busy() {
    let (near, far) = (Net::new(1 << 12), Net::new(64));
    let pair = |host| Pair::new(near.open(false), far.open(false), "mem+mem", [host; 8], true).expect("pair");
    let (mut local, mut y, mut remote) = (pair(1), pair(1), pair(2));
    let busy = local.connect(y.address()).expect("connect over the first");
    assert!(Pair::<Mem, Mem>::on_first(busy));
    // Progress calls of `y`, the local peer sending a frame before each,
    // until a frame comes over the second transport (at most `max`).
    let mut busy_calls_until_second_frame = |y: &mut Pair<Mem, Mem>, max: u32| {
        (1..=max).find(|_| {
            local.send(busy, b"h", b"busy").expect("send over the first");
            let mut f = SecondFrames::default();
            y.progress(&mut f);
            f.0 > 0
        })
    };
    // Nothing over the second: it is polled (and idle) once the first is busy.
    assert_eq!(busy_calls_until_second_frame(&mut y, 2 * LISTENING_EVERY), None);
    while y.skipped != 0 || y.second_due {
        y.progress(&mut Frames::default());
    }
    // A new peer over the second waits for the longer turn, not SECOND_EVERY.
    let conn = remote.connect(y.address()).expect("connect over the second");
    assert!(!Pair::<Mem, Mem>::on_first(conn));
    remote.send(conn, b"h", b"new peer").expect("send");
    let calls = busy_calls_until_second_frame(&mut y, 2 * LISTENING_EVERY).expect("the new peer's frame");
    assert!(
        calls > SECOND_EVERY,
        "polled after {calls} calls while the first was busy"
    );
    assert!(calls <= LISTENING_EVERY + 2, "not polled within {calls} calls");
    // With a connection there, an idle second is back to every SECOND_EVERY.
    while y.skipped != 0 || y.second_due {
        y.progress(&mut Frames::default());
    }
    remote.send(conn, b"h", b"later").expect("send");
    let calls = busy_calls_until_second_frame(&mut y, 2 * LISTENING_EVERY).expect("the later frame");
    assert!(calls <= SECOND_EVERY, "polled after {calls} calls with a connection");
}

#[test]
fn a_burst_holds_back_only_frames_to_a_transport_that_coalesces() {
    // The first transport (shared memory) writes each frame with a store, the
    // second (TCP) with a system call, so only the second's are held back
    // for the burst's next progress.
    let (near, far, elsewhere) = (Net::new(64), Net::new(64).with_coalesce(8), Net::new(64));
    let mut x = Node::new(&near, &far, 1, true);
    let mut local = Node::new(&near, &far, 1, true);
    let mut remote = Node::new(&elsewhere, &far, 2, true);
    let (lx, rx) = (x.add(&local), x.add(&remote));
    for (peer, node) in [(lx, &mut local), (rx, &mut remote)] {
        x.tsend(peer, 5, vec![0], 1);
        node.trecv(PeerAddr::UNSPEC, 8, 1);
        until(&mut [node, &mut x], 0, 1);
    }
    x.progress();
    for ctx in 10..13 {
        x.tsend(lx, 5, vec![ctx as u8], ctx);
        x.tsend(rx, 5, vec![ctx as u8], ctx);
    }
    let coalesced = |n: &Node| n.ep.counters().iter().find(|(k, _)| *k == "coalesced").map(|c| c.1);
    // Only the second transport's connection is held: the burst began with
    // the first post (to the local peer), every one to the remote waits.
    assert_eq!(coalesced(&x), Some(3));
    for ctx in 10..13 {
        local.trecv(PeerAddr::UNSPEC, 8, ctx);
        remote.trecv(PeerAddr::UNSPEC, 8, ctx);
    }
    // Without `x` progressing, the local peer has all three.
    for ctx in 10..13 {
        let c = until(&mut [&mut local], 0, ctx);
        assert_eq!(c.buf.expect("buffer")[..c.len], [ctx as u8]);
    }
    for _ in 0..100 {
        remote.progress();
    }
    assert!(remote.take(10).is_none(), "held back until the sender's next progress");
    for ctx in 10..13 {
        let c = until(&mut [&mut remote, &mut x], 0, ctx);
        assert_eq!(c.buf.expect("buffer")[..c.len], [ctx as u8]);
    }
}
