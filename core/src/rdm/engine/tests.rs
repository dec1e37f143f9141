//! The engine over the in-memory transport: credit (back-pressure and the
//! receive-memory bound), rendezvous by pull and by push, crossed connects,
//! delivery acknowledgements, peer failure and protocol errors, each driven
//! step by step.

use std::collections::VecDeque;
use std::io::IoSlice;

use super::mem::{Mem, Net};
use super::wire::{self, Header, Kind};
use super::Engine;
use crate::addr::{Address, AvTable, PeerAddr};
use crate::attr::EndpointAttr;
use crate::completion::{Completion, Flags};
use crate::error::{Error, Result};
use crate::provider::{CompletionLevel, Ctx, DomainProvider, EndpointProvider, RecvOp, RmaKind, RmaOp, SendOp};
use crate::rdm::transport::{Cause, Transport};
use crate::sink::Sink;
use crate::tag::RecvSpec;

const ID: u8 = 0x7e;

struct Node {
    ep: Engine<Mem>,
    av: AvTable,
    done: VecDeque<Completion>,
    keys: Keys,
}

impl Node {
    fn new(net: &Net, pull: bool, attr: &EndpointAttr) -> Node {
        Node::over(net.open(pull), attr)
    }

    fn over(t: Mem, attr: &EndpointAttr) -> Node {
        Node {
            ep: Engine::new(t, ID, attr, 4 << 20).expect("engine"),
            av: AvTable::default(),
            done: VecDeque::new(),
            keys: Keys(
                Default::default(),
                Default::default(),
                Default::default(),
                Default::default(),
            ),
        }
    }

    fn add(&mut self, other: &Node) -> PeerAddr {
        self.av.insert(other.ep.name())
    }

    fn with<R>(&mut self, f: impl FnOnce(&mut Engine<Mem>, &mut Ctx<'_>) -> R) -> R {
        let mut none: [Completion; 0] = [];
        let mut filled = 0;
        let mut cx = Ctx {
            cq: Sink::new(&mut none, &mut filled, &mut self.done),
            av: &self.av,
            domain: &self.keys,
        };
        f(&mut self.ep, &mut cx)
    }

    fn progress(&mut self) {
        self.with(|ep, cx| ep.progress(cx));
    }

    fn tsend(&mut self, peer: PeerAddr, tag: u64, payload: Vec<u8>, context: u64) {
        self.send_op(SendOp {
            peer,
            tag: Some(tag),
            data: None,
            buf: payload.into(),
            context,
            completion: true,
            level: CompletionLevel::Inject,
        });
    }

    fn send_op(&mut self, op: SendOp) {
        self.with(|ep, cx| ep.send(cx, op)).expect("send accepted");
    }

    fn trecv(&mut self, src: PeerAddr, tag: u64, len: usize, context: u64) {
        let op = RecvOp {
            spec: RecvSpec { src, tag, ignore: 0 },
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

    fn counter(&self, name: &str) -> u64 {
        let all = self.ep.counters();
        all.iter().find(|(n, _)| *n == name).map(|&(_, v)| v).expect("counter")
    }
}

/// The handshake of `a`'s first send to `b`: `b` takes the hello and
/// admits `a`, `a` takes the admission and writes what it held.
fn handshake(a: &mut Node, b: &mut Node) {
    b.progress();
    a.progress();
}

/// Progresses every node until `context` completes on node `at`.
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

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(31).wrapping_add(seed) as u8)
        .collect()
}

fn attr() -> EndpointAttr {
    EndpointAttr {
        rndv_threshold: 512,
        inject_size: 256,
        ..EndpointAttr::default()
    }
}

#[test]
fn messages_of_every_size_arrive_whole_by_pull_and_by_push() {
    for pull in [true, false] {
        let net = Net::new(64);
        let (mut a, mut b) = (Node::new(&net, pull, &attr()), Node::new(&net, pull, &attr()));
        let pb = a.add(&b);
        for (i, size) in [0usize, 1, 511, 512, 513, 5000, 70_000].into_iter().enumerate() {
            let ctx = 2 * i as u64;
            b.trecv(PeerAddr::UNSPEC, 9, size, ctx);
            a.tsend(pb, 9, pattern(size, ctx), ctx + 1);
            let r = until(&mut [&mut a, &mut b], 1, ctx);
            assert_eq!(r.result, Ok(()), "size {size}, pull {pull}");
            assert_eq!((r.len, r.tag), (size, 9));
            assert!(r.flags.contains(Flags::RECV | Flags::TAGGED));
            assert_eq!(r.buf.expect("buffer"), pattern(size, ctx), "{size} B, pull {pull}");
            let s = until(&mut [&mut a, &mut b], 0, ctx + 1);
            assert_eq!(s.result, Ok(()));
        }
        let (pulls, pushes) = (b.counter("rndv_pulls"), b.counter("rndv_pushes"));
        match pull {
            true => assert_eq!((pulls, pushes), (3, 0)),
            false => assert_eq!((pulls, pushes), (0, 3)),
        }
    }
}

/// Two nodes whose transports pull asynchronously, `b` with `n` receives
/// of 5000 bytes (contexts 0, 2, ..) matched by `a`'s sends (1, 3, ..),
/// every pull started and none over.
fn async_pulls(n: u64) -> (Net, Node, Node, PeerAddr) {
    let net = Net::new(64);
    let mut a = Node::over(net.open_async(), &attr());
    let mut b = Node::over(net.open_async(), &attr());
    let pb = a.add(&b);
    b.add(&a);
    for i in 0..n {
        b.trecv(PeerAddr::UNSPEC, 9, 5000, 2 * i);
        a.tsend(pb, 9, pattern(5000, 2 * i), 2 * i + 1);
    }
    for _ in 0..4 {
        a.progress();
        b.progress();
    }
    assert_eq!(net.pending_pulls(), vec![5000; n as usize]);
    assert_eq!(net.exposed(), n as usize, "each send's buffer exposed once");
    assert!(
        a.done.is_empty() && b.done.is_empty(),
        "nothing completes before its pull"
    );
    assert_eq!(b.counter("rndv_pulls_outstanding"), n);
    (net, a, b, pb)
}

#[test]
fn a_crossed_rendezvous_is_pulled_on_the_connection_it_came_on() {
    // Both send at once and each one's own connect is slow: each request
    // comes on the connection the peer dialled, while the one this side
    // dialled (which it sends on) cannot read yet.
    let net = Net::new(64);
    net.hold_ups(true);
    let mut a = Node::over(net.open_async(), &attr());
    let mut b = Node::over(net.open_async(), &attr());
    let (pb, pa) = (a.add(&b), b.add(&a));
    a.trecv(pb, 2, 5000, 10);
    b.trecv(pa, 1, 5000, 20);
    a.tsend(pb, 1, pattern(5000, 1), 11);
    b.tsend(pa, 2, pattern(5000, 2), 21);
    for _ in 0..6 {
        a.progress();
        b.progress();
    }
    assert_eq!(net.pending_pulls(), vec![5000; 2], "both pulls started");
    assert!(a.done.is_empty() && b.done.is_empty(), "{:?} {:?}", a.done, b.done);
    net.finish_pull(0);
    net.finish_pull(1);
    assert_eq!(
        until(&mut [&mut a, &mut b], 1, 20).buf.expect("buffer"),
        pattern(5000, 1)
    );
    assert_eq!(
        until(&mut [&mut a, &mut b], 0, 10).buf.expect("buffer"),
        pattern(5000, 2)
    );
    assert_eq!(until(&mut [&mut a, &mut b], 0, 11).result, Ok(()));
    assert_eq!(until(&mut [&mut a, &mut b], 1, 21).result, Ok(()));
    assert_eq!((a.counter("rndv_pulls_failed"), b.counter("rndv_pulls_failed")), (0, 0));
    net.hold_ups(false);
}

#[test]
fn a_send_behind_a_silently_dead_link_fails_at_a_keepalive_tick() {
    // Due at every look at the clock, which busy progress takes every
    // `STRIDE + 1` calls: the test does not wait on a clock.
    let net = Net::new(64).with_keepalive(std::time::Duration::from_nanos(1));
    let look = || 0..=super::keepalive::STRIDE;
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let pb = a.add(&b);
    b.trecv(PeerAddr::UNSPEC, 1, 8, 1);
    a.tsend(pb, 1, pattern(8, 1), 2);
    assert_eq!(until(&mut [&mut a, &mut b], 1, 1).result, Ok(()));
    assert_eq!(until(&mut [&mut a, &mut b], 0, 2).result, Ok(()));
    for _ in look() {
        a.progress();
    }
    assert!(
        a.ep.transport().probes().last().is_some_and(|c| c.is_empty()),
        "nothing waits on an idle peer: nothing to probe: {:?}",
        a.ep.transport().probes()
    );
    // A rendezvous b has not matched: a waits on b, and the link dies.
    a.tsend(pb, 2, pattern(5000, 3), 3);
    a.progress();
    let conn = a.ep.transport().conns()[0];
    a.ep.t.cut(conn);
    let c = until(&mut [&mut a], 0, 3);
    assert!(
        matches!(
            c.result,
            Err(Error::PeerUnreachable {
                errno: libc::ETIMEDOUT,
                ..
            })
        ),
        "{:?}",
        c.result
    );
    assert!(a.ep.transport().probes().iter().any(|c| c.contains(&conn)));
}

#[test]
fn pulls_that_complete_later_complete_their_receives_in_their_own_order() {
    let (net, mut a, mut b, _) = async_pulls(3);
    net.finish_pull(1);
    b.progress();
    let c = b.take(2).expect("the second receive, whose pull is over");
    assert_eq!(c.result, Ok(()));
    assert_eq!(c.len, 5000);
    assert_eq!(c.buf.expect("buffer"), pattern(5000, 2));
    assert!(b.done.is_empty(), "the others wait for their pulls");
    assert_eq!(
        until(&mut [&mut a, &mut b], 0, 3).result,
        Ok(()),
        "its send, on the finish"
    );
    assert!(a.done.is_empty());
    assert_eq!(net.exposed(), 2, "the finished send's buffer concealed");
    assert_eq!(net.pending_pulls().len(), 2);
    net.finish_pull(0);
    net.finish_pull(1);
    for ctx in [0, 4] {
        let c = until(&mut [&mut a, &mut b], 1, ctx);
        assert_eq!(c.buf.expect("buffer"), pattern(5000, ctx), "receive {ctx}");
    }
    for ctx in [1, 5] {
        assert_eq!(until(&mut [&mut a, &mut b], 0, ctx).result, Ok(()), "send {ctx}");
    }
    assert_eq!(net.exposed(), 0);
    assert_eq!(b.counter("rndv_pulls"), 3);
    assert_eq!(b.counter("rndv_pulls_outstanding"), 0);
    assert_eq!(b.counter("rndv_pushes"), 0);
}

#[test]
fn a_failed_pull_fails_its_receive_once_and_its_send_and_nothing_else() {
    let (net, mut a, mut b, pb) = async_pulls(2);
    net.fail_pull(0, Error::RemoteAccess("the target refused the key"));
    b.progress();
    let c = b.take(0).expect("the failed pull's receive");
    assert_eq!(c.result, Err(Error::RemoteAccess("the target refused the key")));
    let c = until(&mut [&mut a, &mut b], 0, 1);
    assert!(matches!(c.result, Err(Error::Protocol(_))), "{:?}", c.result);
    net.finish_pull(0);
    assert_eq!(until(&mut [&mut a, &mut b], 1, 2).result, Ok(()), "the other pull");
    assert_eq!(until(&mut [&mut a, &mut b], 0, 3).result, Ok(()));
    for _ in 0..4 {
        a.progress();
        b.progress();
    }
    assert!(a.done.is_empty() && b.done.is_empty(), "each once");
    assert_eq!(b.counter("rndv_pulls_failed"), 1);
    assert_eq!(net.exposed(), 0);
    // The connection carries on.
    b.trecv(PeerAddr::UNSPEC, 9, 5000, 10);
    a.tsend(pb, 9, pattern(5000, 10), 11);
    for _ in 0..4 {
        a.progress();
        b.progress();
    }
    net.finish_pull(0);
    assert_eq!(
        until(&mut [&mut a, &mut b], 1, 10).buf.expect("buffer"),
        pattern(5000, 10)
    );
}

#[test]
fn a_pull_of_a_buffer_not_exposed_fails_instead_of_reading_it() {
    let (net, mut a, mut b, _) = async_pulls(1);
    // The sender concealed it (a sender that gave up its send): the read
    // is refused, as a device refuses a stale rkey.
    a.ep.t.conceal(0, 1);
    assert_eq!(net.exposed(), 0);
    net.finish_pull(0);
    let c = until(&mut [&mut a, &mut b], 1, 0);
    assert!(matches!(c.result, Err(Error::RemoteAccess(_))), "{:?}", c.result);
}

#[test]
fn a_peer_dying_with_pulls_outstanding_fails_each_once_when_its_pull_is_over() {
    let (net, a, mut b, _) = async_pulls(2);
    let pa = b.av.insert(a.ep.name());
    drop(a);
    for _ in 0..3 {
        b.progress();
    }
    for ctx in [0, 2] {
        let c = b.take(ctx).unwrap_or_else(|| panic!("receive {ctx} ended"));
        assert_eq!(c.result, Err(Error::PeerClosed { peer: pa }), "receive {ctx}");
    }
    assert!(net.pending_pulls().is_empty());
    for _ in 0..3 {
        b.progress();
    }
    assert!(b.done.is_empty(), "once");
    assert_eq!(b.counter("rndv_pulls_outstanding"), 0);
    assert_eq!(b.counter("rndv_pulls_failed"), 2);
}

#[test]
fn a_broken_connection_fails_its_pulls_and_its_sends_conceal_their_buffers() {
    let (net, mut a, mut b, pb) = async_pulls(1);
    let pa = b.av.insert(a.ep.name());
    let conn = b.ep.transport().conns()[0];
    b.ep.t.break_conn(conn, Cause::Failed(libc::ECONNRESET));
    let c = until(&mut [&mut a, &mut b], 1, 0);
    assert_eq!(
        c.result,
        Err(Error::PeerUnreachable {
            peer: pa,
            errno: libc::ECONNRESET
        }),
        "the peer's error, not the one the transport gave the pull"
    );
    let c = until(&mut [&mut a, &mut b], 0, 1);
    assert_eq!(
        c.result,
        Err(Error::PeerUnreachable {
            peer: pb,
            errno: libc::ECONNRESET
        })
    );
    assert_eq!(net.exposed(), 0, "the failed send's buffer concealed");
}

#[test]
fn closing_with_pulls_outstanding_cancels_them_once_their_pulls_end() {
    let (net, _a, mut b, _) = async_pulls(1);
    b.with(|ep, cx| ep.close(cx));
    assert!(b.take(0).is_none(), "not while the transport may write its buffer");
    b.progress();
    assert_eq!(b.take(0).map(|c| c.result), Some(Err(Error::Canceled)));
    assert!(net.pending_pulls().is_empty());
    assert_eq!(b.counter("rndv_pulls_outstanding"), 0);
}

#[test]
fn truncation_reports_both_lengths_on_both_protocols() {
    for (pull, size) in [(true, 100), (true, 4000), (false, 4000)] {
        let net = Net::new(64);
        let (mut a, mut b) = (Node::new(&net, pull, &attr()), Node::new(&net, pull, &attr()));
        let pb = a.add(&b);
        b.trecv(PeerAddr::UNSPEC, 1, 10, 1);
        a.tsend(pb, 1, pattern(size, 3), 2);
        let r = until(&mut [&mut a, &mut b], 1, 1);
        assert_eq!(r.result, Err(Error::Truncated { len: 10, olen: size }));
        assert_eq!(r.buf.expect("buffer"), pattern(size, 3)[..10]);
        assert_eq!(until(&mut [&mut a, &mut b], 0, 2).result, Ok(()));
    }
}

#[test]
fn a_full_transport_queues_sends_in_order_and_completes_them_when_written() {
    let net = Net::new(2);
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let pb = a.add(&b);
    for i in 0..20 {
        a.tsend(pb, 5, pattern(8, i), 100 + i);
    }
    assert!(
        a.done.is_empty(),
        "nothing but the hello goes before the peer admits us"
    );
    handshake(&mut a, &mut b);
    // Two messages fit; the rest wait in order, uncompleted.
    assert_eq!(a.done.len(), 2, "only what the transport took is complete");
    for i in 0..20 {
        b.trecv(PeerAddr::UNSPEC, 5, 8, i);
    }
    for i in 0..20 {
        let r = until(&mut [&mut a, &mut b], 1, i);
        assert_eq!(r.buf.expect("buffer"), pattern(8, i), "message {i} in sending order");
    }
    for i in 0..20 {
        assert_eq!(until(&mut [&mut a, &mut b], 0, 100 + i).result, Ok(()));
    }
}

/// Progresses `n` until it has yielded the CPU once more, spinning past
/// `attr`'s 1 µs between calls; the number of calls it took.
fn until_yielded(n: &mut Node) -> usize {
    let before = n.counter("idle_yields");
    for i in 0..1_000_000 {
        n.progress();
        if n.counter("idle_yields") > before {
            return i;
        }
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_micros(2) {}
    }
    panic!("a wait with nothing moving never yielded");
}

/// Progresses `n` `calls` times, 2 µs apart: the yields it made.
fn yields_over(n: &mut Node, calls: usize) -> u64 {
    let before = n.counter("idle_yields");
    for _ in 0..calls {
        n.progress();
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_micros(2) {}
    }
    n.counter("idle_yields") - before
}

/// Two nodes over a transport that holds two frames a way (and pulls, with
/// `pull`), each yielding after `yield_after_us`; `b` as `a` knows it.
fn tight_pair(pull: bool, yield_after_us: u64) -> (Net, Node, Node, PeerAddr) {
    let net = Net::new(2);
    let mut at = attr();
    at.yield_after_us = yield_after_us;
    let (mut a, b) = (Node::new(&net, pull, &at), Node::new(&net, pull, &at));
    let pb = a.add(&b);
    (net, a, b, pb)
}

/// `a` with eight messages for `b` of which the transport took two (`b`
/// takes none), yielding after `yield_after_us`.
fn refused_room(yield_after_us: u64) -> (Net, Node, Node) {
    let (net, mut a, mut b, pb) = tight_pair(true, yield_after_us);
    for i in 0..8 {
        a.tsend(pb, 5, pattern(8, i), 100 + i);
    }
    handshake(&mut a, &mut b);
    assert_eq!(a.done.len(), 2, "the rest wait for room");
    (net, a, b)
}

#[test]
fn a_sender_refused_room_yields_once_nothing_moves_and_not_after() {
    let (_net, mut a, mut b) = refused_room(1);
    // `b` takes nothing: `a`'s queue waits for room that never comes.
    until_yielded(&mut a);
    for i in 0..8 {
        b.trecv(PeerAddr::UNSPEC, 5, 8, i);
    }
    for i in 0..8 {
        assert_eq!(until(&mut [&mut a, &mut b], 0, 100 + i).result, Ok(()));
        let r = until(&mut [&mut a, &mut b], 1, i);
        assert_eq!(r.buf.expect("buffer"), pattern(8, i), "message {i} in order");
    }
    // Nothing queued and nothing in flight: an idle endpoint spins as its
    // user chose, and `b`, which waited on nothing, never yielded.
    assert_eq!(yields_over(&mut a, 50), 0);
    assert_eq!(b.counter("idle_yields"), 0);

    // Off: the same wait never yields.
    let (_net, mut a, _b) = refused_room(0);
    assert_eq!(yields_over(&mut a, 50), 0);
}

#[test]
fn a_sender_whose_rendezvous_its_peer_is_pulling_yields_until_the_finish() {
    let (net, mut a, mut b, _) = async_pulls(1);
    // `b`'s pull is outstanding: `a` sees nothing move until its finish.
    until_yielded(&mut a);
    net.finish_pull(0);
    assert_eq!(until(&mut [&mut a, &mut b], 1, 0).result, Ok(()));
    assert_eq!(until(&mut [&mut a, &mut b], 0, 1).result, Ok(()));
    assert_eq!(yields_over(&mut a, 50), 0, "nothing waited on once the send is over");
}

#[test]
fn a_receiver_of_a_push_only_its_sender_can_finish_yields_while_it_waits() {
    // No pull: the rendezvous is pushed, two frames a flush.
    let (_net, mut a, mut b, pb) = tight_pair(false, 1);
    b.trecv(PeerAddr::UNSPEC, 9, 70_000, 1);
    a.tsend(pb, 9, pattern(70_000, 3), 2);
    for i in 0.. {
        assert!(i < 10_000, "the push never began");
        a.progress();
        b.progress();
        if b.ep.s.pushes.iter().any(|(_, p)| p.got > 0) {
            break;
        }
    }
    // The sender stops running mid-push: its receiver waits on it alone.
    until_yielded(&mut b);
    let r = until(&mut [&mut a, &mut b], 1, 1);
    assert_eq!(r.buf.expect("buffer"), pattern(70_000, 3));
    assert_eq!(until(&mut [&mut a, &mut b], 0, 2).result, Ok(()));
    assert_eq!(yields_over(&mut b, 50), 0, "nothing waited on once the push is in");
}

#[test]
fn a_connect_refused_for_now_is_retried_and_nothing_is_lost() {
    let net = Net::new(64);
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let pb = a.add(&b);
    net.busy(50);
    for i in 0..4 {
        a.tsend(pb, 1, pattern(8, i), 100 + i);
    }
    assert!(a.done.is_empty(), "nothing written before the connection");
    for i in 0..4 {
        assert_eq!(until(&mut [&mut a, &mut b], 0, 100 + i).result, Ok(()));
        b.trecv(PeerAddr::UNSPEC, 1, 8, i);
        let r = until(&mut [&mut a, &mut b], 1, i);
        assert_eq!(r.buf.expect("buffer"), pattern(8, i), "message {i} in order");
    }
}

#[test]
fn a_receiver_holds_at_most_the_credit_it_granted_and_loses_nothing() {
    let net = Net::new(16);
    let mut tight = attr();
    tight.rndv_threshold = 1024;
    let (mut a, mut b) = (Node::new(&net, true, &tight), Node::new(&net, true, &tight));
    b.ep.s.budget.bytes = super::credit::INIT;
    let pb = a.add(&b);
    for i in 0..300 {
        a.tsend(pb, 7, pattern(1000, i), 1000 + i);
    }
    let mut most = 0;
    for _ in 0..200 {
        a.progress();
        b.progress();
        most = most.max(b.counter("unexpected_bytes") + b.counter("unexpected_entries") * 256);
    }
    assert!(
        most <= super::credit::INIT,
        "held {most} B against {} granted",
        super::credit::INIT
    );
    assert!(a.counter("credit_stalls") > 0, "eager-sized sends went by rendezvous");
    assert!(a.counter("credit_waits") > 0, "requests to send waited for credit");
    for i in 0..300 {
        b.trecv(PeerAddr::UNSPEC, 7, 1000, i);
        let r = until(&mut [&mut a, &mut b], 1, i);
        assert_eq!(r.buf.expect("buffer"), pattern(1000, i), "message {i} in order");
    }
    for i in 0..300 {
        assert_eq!(until(&mut [&mut a, &mut b], 0, 1000 + i).result, Ok(()));
    }
    assert!(b.counter("credit_returns") > 0);
}

/// A receiver that takes its next messages only once a large one is whole
/// (a byte stream over tagged messages: xfer-tarpc reads no further frames
/// while the bodies it posted hold its limit) and meanwhile holds all its
/// sender's credit in unexpected messages: the large message's pushed
/// bytes must not wait behind a frame that waits for that credit.
#[test]
fn pushed_bytes_pass_frames_that_wait_for_credit() {
    let net = Net::new(64);
    let mut tight = attr();
    tight.rndv_threshold = 1024;
    let (mut a, mut b) = (Node::new(&net, false, &tight), Node::new(&net, false, &tight));
    b.ep.s.budget.bytes = super::credit::INIT;
    let pb = a.add(&b);
    const LARGE: u64 = 1 << 40;
    a.tsend(pb, 1, pattern(50_000, 99), LARGE);
    for i in 0..300 {
        a.tsend(pb, 2, pattern(1000, i), 1000 + i);
    }
    for _ in 0..50 {
        a.progress();
        b.progress();
    }
    assert!(a.counter("credit_waits") > 0, "the small messages wait for credit");
    assert!(b.counter("unexpected_entries") > 1, "the receiver holds them");
    b.trecv(PeerAddr::UNSPEC, 1, 50_000, LARGE);
    let got = until(&mut [&mut a, &mut b], 1, LARGE);
    assert_eq!(got.buf.expect("buffer"), pattern(50_000, 99), "pushed whole");
    assert_eq!(b.counter("rndv_pushes"), 1);
    for i in 0..300 {
        b.trecv(PeerAddr::UNSPEC, 2, 1000, i);
        let r = until(&mut [&mut a, &mut b], 1, i);
        assert_eq!(r.buf.expect("buffer"), pattern(1000, i), "message {i} in order");
    }
    assert_eq!(until(&mut [&mut a, &mut b], 0, LARGE).result, Ok(()));
    for i in 0..300 {
        assert_eq!(until(&mut [&mut a, &mut b], 0, 1000 + i).result, Ok(()));
    }
}

/// Two endpoints that each hold all of the other's credit in unexpected
/// messages, each with more queued behind it: a receive on either side
/// returns credit, which must not wait behind that side's own queue.
#[test]
fn credit_returns_pass_frames_that_wait_for_credit() {
    let net = Net::new(64);
    let mut tight = attr();
    tight.rndv_threshold = 1024;
    let (mut a, mut b) = (Node::new(&net, true, &tight), Node::new(&net, true, &tight));
    a.ep.s.budget.bytes = super::credit::INIT;
    b.ep.s.budget.bytes = super::credit::INIT;
    let (pb, pa) = (a.add(&b), b.add(&a));
    for i in 0..300 {
        a.tsend(pb, 2, pattern(1000, i), 1000 + i);
        b.tsend(pa, 2, pattern(1000, i), 1000 + i);
    }
    for _ in 0..50 {
        a.progress();
        b.progress();
    }
    assert!(a.counter("credit_waits") > 0 && b.counter("credit_waits") > 0);
    for i in 0..300 {
        a.trecv(PeerAddr::UNSPEC, 2, 1000, i);
        let r = until(&mut [&mut a, &mut b], 0, i);
        assert_eq!(r.buf.expect("buffer"), pattern(1000, i), "a: message {i} in order");
    }
    for i in 0..300 {
        b.trecv(PeerAddr::UNSPEC, 2, 1000, i);
        let r = until(&mut [&mut a, &mut b], 1, i);
        assert_eq!(r.buf.expect("buffer"), pattern(1000, i), "b: message {i} in order");
    }
}

#[test]
fn injects_meet_again_at_the_credit_and_resume_after_receives() {
    let net = Net::new(1024);
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let pb = a.add(&b);
    let mut sent = 0u64;
    loop {
        match a.with(|ep, cx| ep.inject(cx, pb, Some(2), None, &pattern(200, sent))) {
            Ok(()) => sent += 1,
            Err(Error::Again) => break,
            Err(e) => panic!("inject: {e}"),
        }
        assert!(sent < 10_000, "nothing bounds the sender");
    }
    assert_eq!(sent, super::credit::INIT / (200 + 256), "the initial credit, no more");
    for i in 0..sent {
        b.trecv(PeerAddr::UNSPEC, 2, 200, i);
        until(&mut [&mut a, &mut b], 1, i);
    }
    for _ in 0..3 {
        a.progress();
    }
    a.with(|ep, cx| ep.inject(cx, pb, Some(2), None, b"again"))
        .expect("credit came back");
}

#[test]
fn a_peer_past_its_credit_loses_its_connection() {
    let net = Net::new(1024);
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let pb = a.add(&b);
    a.tsend(pb, 1, vec![1], 1);
    let conn = a.ep.transport().conns()[0];
    let eager = Header::message(Kind::Eager, Some(1), None).encode();
    for _ in 0..(super::credit::INIT / 1000 + 2) {
        a.ep.t.send_raw(conn, &eager, &[0; 1000]);
    }
    for _ in 0..3 {
        b.progress();
    }
    assert_eq!(b.counter("credit_violations"), 1);
    assert_eq!(b.counter("connections"), 0);
    assert_eq!(b.counter("unexpected_entries"), 0, "nothing it sent is kept");
    assert_eq!(b.counter("rx_memory"), 0);
}

#[test]
fn a_peer_past_the_receive_memory_is_refused() {
    let net = Net::new(64);
    let mut small = attr();
    small.rx_memory = super::credit::ADMISSION + super::credit::ADMISSION / 2;
    let (mut a, mut c, mut b) = (
        Node::new(&net, true, &attr()),
        Node::new(&net, true, &attr()),
        Node::new(&net, true, &small),
    );
    let (pa, pc) = (a.add(&b), c.add(&b));
    a.tsend(pa, 1, vec![1], 1);
    c.tsend(pc, 1, vec![2], 2);
    for _ in 0..3 {
        b.progress();
    }
    assert_eq!(b.counter("rx_memory_refused"), 1);
    assert_eq!(b.counter("rx_memory"), super::credit::ADMISSION);
    let refused = until(&mut [&mut a, &mut c, &mut b], 1, 2);
    assert!(
        matches!(refused.result, Err(Error::PeerClosed { .. })),
        "refused before anything was written: {:?}",
        refused.result
    );
    assert_eq!(
        until(&mut [&mut a, &mut c, &mut b], 0, 1).result,
        Ok(()),
        "the first is served"
    );
    c.tsend(pc, 1, pattern(4000, 3), 3);
    let r = until(&mut [&mut a, &mut c, &mut b], 1, 3);
    assert!(matches!(r.result, Err(Error::PeerClosed { .. })), "{:?}", r.result);
}

#[test]
fn crossed_first_sends_both_arrive_in_order() {
    let net = Net::new(64);
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let (pb, pa) = (a.add(&b), b.add(&a));
    for i in 0..10 {
        a.tsend(pb, 1, pattern(600 * (i as usize % 2) + 8, i), 100 + i);
        b.tsend(pa, 2, pattern(8, i), 200 + i);
    }
    for i in 0..10 {
        a.trecv(pb, 2, 700, i);
        b.trecv(pa, 1, 700, i);
    }
    for i in 0..10 {
        let r = until(&mut [&mut a, &mut b], 1, i);
        assert_eq!(r.buf.expect("buffer")[..r.len], pattern(600 * (i as usize % 2) + 8, i));
        assert_eq!(r.src, pa);
        let r = until(&mut [&mut a, &mut b], 0, i);
        assert_eq!(r.buf.expect("buffer")[..r.len], pattern(8, i));
        assert_eq!(r.src, pb);
    }
    assert_eq!(a.ep.transport().conns().len(), 2, "each side keeps both connections");
}

#[test]
fn a_crossed_connect_whose_own_side_fails_sends_on_the_peers() {
    let net = Net::new(64);
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let (pb, pa) = (a.add(&b), b.add(&a));
    a.tsend(pb, 1, pattern(8, 1), 1);
    a.tsend(pb, 1, pattern(5000, 2), 2);
    b.tsend(pa, 2, pattern(8, 3), 3);
    // a takes b's hello on b's connection and admits it; then a's own
    // connection breaks before b ever answered on it.
    a.progress();
    let dialled = a.ep.transport().conns()[0];
    a.ep.t.break_conn(dialled, Cause::Failed(libc::ECONNRESET));
    b.trecv(pa, 1, 8, 11);
    b.trecv(pa, 1, 5000, 12);
    a.trecv(pb, 2, 8, 13);
    assert_eq!(until(&mut [&mut a, &mut b], 1, 11).buf.expect("buffer"), pattern(8, 1));
    assert_eq!(
        until(&mut [&mut a, &mut b], 1, 12).buf.expect("buffer"),
        pattern(5000, 2)
    );
    assert_eq!(until(&mut [&mut a, &mut b], 0, 13).buf.expect("buffer"), pattern(8, 3));
    for ctx in [1, 2] {
        assert_eq!(until(&mut [&mut a, &mut b], 0, ctx).result, Ok(()), "send {ctx}");
    }
    assert_eq!(until(&mut [&mut a, &mut b], 1, 3).result, Ok(()));
    assert_eq!(a.counter("connects_crossed_over"), 1);
    assert_eq!(b.counter("connects_crossed_over"), 0, "b's own connection stood");
    assert_eq!(a.ep.transport().conns().len(), 1, "a kept b's connection");
}

#[test]
fn a_delivery_complete_send_completes_once_the_target_has_it() {
    let net = Net::new(64);
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let pb = a.add(&b);
    a.send_op(SendOp {
        peer: pb,
        tag: Some(3),
        data: Some(77),
        buf: pattern(64, 1).into(),
        context: 1,
        completion: true,
        level: CompletionLevel::Delivery,
    });
    a.progress();
    handshake(&mut a, &mut b);
    assert!(a.take(1).is_none(), "not complete before the target answers");
    b.progress();
    assert_eq!(b.counter("unexpected_entries"), 1, "held by the target: delivered");
    assert_eq!(until(&mut [&mut a, &mut b], 0, 1).result, Ok(()));
    b.trecv(PeerAddr::UNSPEC, 3, 64, 2);
    let r = until(&mut [&mut a, &mut b], 1, 2);
    assert_eq!(r.data, 77);
    assert!(r.flags.contains(Flags::REMOTE_CQ_DATA));
}

#[test]
fn a_dead_peer_ends_every_operation_waiting_on_it_once() {
    let net = Net::new(2);
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let pb = a.add(&b);
    a.tsend(pb, 1, pattern(4000, 1), 1); // rendezvous, never matched
    a.tsend(pb, 1, pattern(8, 2), 2); // waits in the full queue
    a.tsend(pb, 1, pattern(8, 3), 3);
    a.trecv(pb, 9, 8, 4); // directed at the peer
    a.trecv(PeerAddr::UNSPEC, 9, 8, 5); // any source: stays
    b.progress();
    drop(b);
    for _ in 0..3 {
        a.progress();
    }
    for ctx in 1..=4 {
        let c = a.take(ctx).unwrap_or_else(|| panic!("operation {ctx} ended"));
        assert_eq!(c.result, Err(Error::PeerClosed { peer: pb }), "operation {ctx}");
        assert!(a.take(ctx).is_none(), "once");
    }
    assert!(a.done.is_empty(), "the any-source receive waits on");
    a.tsend(pb, 1, vec![1], 6);
    let again = a.take(6).expect("a send to the departed peer fails at once");
    assert!(matches!(
        again.result,
        Err(Error::PeerUnreachable {
            errno: libc::ECONNREFUSED,
            ..
        })
    ));
    assert_eq!(a.counter("sends_outstanding"), 0);
}

#[test]
fn a_broken_connection_reports_its_cause() {
    let net = Net::new(64);
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let pb = a.add(&b);
    a.tsend(pb, 1, pattern(4000, 1), 1);
    handshake(&mut a, &mut b);
    b.progress();
    let conn = b.ep.transport().conns()[0];
    b.ep.t.break_conn(conn, Cause::Failed(libc::ECONNRESET));
    let c = until(&mut [&mut a, &mut b], 0, 1);
    assert_eq!(
        c.result,
        Err(Error::PeerUnreachable {
            peer: pb,
            errno: libc::ECONNRESET
        })
    );
    assert_eq!(b.counter("requests_dropped"), 1, "its request to send left with it");
}

#[test]
fn a_peer_that_breaks_the_protocol_loses_its_connection_and_what_it_sent() {
    let net = Net::new(64);
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let pb = a.add(&b);
    a.tsend(pb, 1, pattern(8, 1), 1); // kept unexpected at b
    handshake(&mut a, &mut b);
    b.progress();
    assert_eq!(b.counter("unexpected_entries"), 1);
    let conn = a.ep.transport().conns()[0];
    let mut fin = Header::new(Kind::Fin);
    fin.token = 12345; // no such send
    a.ep.t.send_raw(conn, &fin.encode(), &[]);
    a.ep.t.send_raw(conn, &[9; 3], &[]); // never read: the connection is gone
    b.progress();
    assert_eq!(b.counter("protocol_errors"), 1);
    assert_eq!(b.counter("messages_dropped"), 1, "nothing a broken peer sent is kept");
    assert_eq!(b.counter("unexpected_entries"), 0);
    assert_eq!(b.counter("rx_memory"), 0);
    a.tsend(pb, 1, pattern(4000, 2), 2);
    let c = until(&mut [&mut a, &mut b], 0, 2);
    assert!(matches!(c.result, Err(Error::PeerClosed { .. })), "{:?}", c.result);
}

#[test]
fn an_untagged_receive_with_a_tag_in_its_spec_takes_untagged_messages() {
    let net = Net::new(64);
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let pb = a.add(&b);
    a.send_op(SendOp {
        peer: pb,
        tag: None,
        data: None,
        buf: b"plain".to_vec().into(),
        context: 1,
        completion: true,
        level: CompletionLevel::Inject,
    });
    let op = RecvOp {
        spec: RecvSpec {
            src: PeerAddr::UNSPEC,
            tag: 5,
            ignore: 0,
        },
        tagged: false,
        buf: vec![0; 8].into(),
        context: 2,
    };
    b.with(|ep, cx| ep.recv(cx, op)).expect("posted");
    let r = until(&mut [&mut a, &mut b], 1, 2);
    assert_eq!(r.result, Ok(()));
    assert!(r.flags.contains(Flags::RECV | Flags::MSG));
    assert_eq!(&r.buf.expect("buffer")[..5], b"plain");
}

#[test]
fn closing_cancels_everything_and_the_peer_sees_it_closed() {
    let net = Net::new(64);
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let pb = a.add(&b);
    a.tsend(pb, 1, pattern(4000, 1), 1);
    a.trecv(PeerAddr::UNSPEC, 1, 8, 2);
    handshake(&mut a, &mut b);
    b.progress();
    b.trecv(PeerAddr::UNSPEC, 4, 8, 3);
    a.with(|ep, cx| ep.close(cx));
    for ctx in [1, 2] {
        assert_eq!(a.take(ctx).expect("ended").result, Err(Error::Canceled));
    }
    b.progress();
    assert_eq!(b.counter("requests_dropped"), 1);
    assert!(b.take(3).is_none(), "an any-source receive stays when a peer leaves");
}

#[test]
fn closing_writes_what_a_burst_held_back() {
    let net = Net::new(64).with_coalesce(8);
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let pb = a.add(&b);
    a.tsend(pb, 1, b"first".to_vec(), 1);
    handshake(&mut a, &mut b);
    until(&mut [&mut a, &mut b], 0, 1);
    // The first post writes at once and starts a burst; the second waits
    // for the next progress, which never comes: the close writes it.
    a.tsend(pb, 1, b"one".to_vec(), 2);
    a.tsend(pb, 1, b"two".to_vec(), 3);
    assert_eq!(a.counter("coalesced"), 1, "the second was held back");
    a.with(|ep, cx| ep.close(cx));
    for ctx in [4, 5, 6] {
        b.trecv(PeerAddr::UNSPEC, 1, 8, ctx);
    }
    let got: Vec<Vec<u8>> = [4, 5, 6]
        .into_iter()
        .map(|ctx| {
            let c = until(&mut [&mut b], 0, ctx);
            c.buf.expect("buffer")[..c.len].to_vec()
        })
        .collect();
    assert_eq!(got, [b"first".to_vec(), b"one".to_vec(), b"two".to_vec()]);
}

#[test]
fn a_post_held_back_wakes_a_caller_about_to_sleep() {
    let wakes = |n: &Node| n.ep.transport().wakes.load(std::sync::atomic::Ordering::Relaxed);
    let net = Net::new(64).with_coalesce(8);
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let pb = a.add(&b);
    a.tsend(pb, 1, b"first".to_vec(), 1);
    handshake(&mut a, &mut b);
    until(&mut [&mut a, &mut b], 0, 1);
    // The caller prepares to sleep (an async runtime's progress task
    // parks); then another task posts twice: the second post is held back
    // for the burst, so it must wake the sleeper, once.
    a.with(|ep, cx| ep.prepare_wait(cx));
    let before = wakes(&a);
    a.tsend(pb, 1, b"one".to_vec(), 2);
    a.tsend(pb, 1, b"two".to_vec(), 3);
    a.tsend(pb, 1, b"three".to_vec(), 4);
    assert_eq!(a.counter("coalesced"), 2);
    assert_eq!(wakes(&a) - before, 1, "woken once for the held posts");
}

#[test]
fn a_post_held_back_after_another_threads_progress_still_wakes_the_sleeper() {
    let wakes = |n: &Node| n.ep.transport().wakes.load(std::sync::atomic::Ordering::Relaxed);
    let net = Net::new(64).with_coalesce(8);
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let pb = a.add(&b);
    a.tsend(pb, 1, b"first".to_vec(), 1);
    handshake(&mut a, &mut b);
    until(&mut [&mut a, &mut b], 0, 1);
    // The progress task parks; another task polls its operation (a
    // progress), then posts twice and leaves the driving to the parked
    // task (the async layer's waiters do not drive a queue another one is
    // armed on): the second post, held back for the burst, must wake it.
    a.with(|ep, cx| ep.prepare_wait(cx));
    a.progress();
    let before = wakes(&a);
    a.tsend(pb, 1, b"one".to_vec(), 2);
    a.tsend(pb, 1, b"two".to_vec(), 3);
    assert_eq!(a.counter("coalesced"), 1, "the second was held back");
    assert_eq!(wakes(&a) - before, 1, "the sleeper is woken to write it");
}

#[test]
fn a_burst_after_another_thread_wrote_the_last_held_post_wakes_again() {
    let wakes = |n: &Node| n.ep.transport().wakes.load(std::sync::atomic::Ordering::Relaxed);
    let net = Net::new(64).with_coalesce(8);
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let pb = a.add(&b);
    a.tsend(pb, 1, b"first".to_vec(), 1);
    handshake(&mut a, &mut b);
    until(&mut [&mut a, &mut b], 0, 1);
    // The progress task prepares to sleep; a post held back wakes it, but
    // another task's progress takes that wake-up's readiness and writes the
    // held post before the sleeper parks. A later burst's held post must
    // wake it again.
    a.with(|ep, cx| ep.prepare_wait(cx));
    let before = wakes(&a);
    a.tsend(pb, 1, b"one".to_vec(), 2);
    a.tsend(pb, 1, b"two".to_vec(), 3);
    assert_eq!(wakes(&a) - before, 1);
    a.progress();
    a.tsend(pb, 1, b"three".to_vec(), 4);
    a.tsend(pb, 1, b"four".to_vec(), 5);
    assert_eq!(a.counter("coalesced"), 2, "the second of each burst was held back");
    assert_eq!(wakes(&a) - before, 2, "each held post had a wake-up to write it");
}

#[test]
fn inject_respects_its_limit_and_needs_no_completion() {
    let net = Net::new(64);
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let pb = a.add(&b);
    let big = vec![0; 257];
    let r = a.with(|ep, cx| ep.inject(cx, pb, Some(1), None, &big));
    assert!(matches!(r, Err(Error::InvalidArgument(_))));
    a.with(|ep, cx| ep.inject(cx, pb, Some(1), None, b"hi"))
        .expect("injected");
    b.trecv(PeerAddr::UNSPEC, 1, 8, 1);
    assert_eq!(&until(&mut [&mut a, &mut b], 1, 1).buf.expect("buffer")[..2], b"hi");
    assert!(a.done.is_empty());
}

/// An inject of a payload in parts arrives as one message, their bytes one
/// after another, whatever the parts' number and lengths (none, empty ones,
/// more than a transport writes at once) and whether it is written at once
/// or waits for the connection (the first, before the handshake); into a
/// receive longer, of its length, or shorter (truncated). One over the
/// inject size is refused, not sent: the connection stays.
#[test]
fn an_inject_in_parts_arrives_as_their_bytes_in_one_message() {
    let net = Net::new(64).with_payload(200);
    let attr = EndpointAttr {
        inject_size: 200,
        ..attr()
    };
    let (mut a, mut b) = (Node::new(&net, true, &attr), Node::new(&net, true, &attr));
    let pb = a.add(&b);
    let whole = pattern(180, 7);
    let shapes: Vec<Vec<&[u8]>> = vec![
        vec![&whole[..100], &whole[100..]],
        vec![],
        vec![&[]],
        vec![&whole[..1], &[], &whole[1..2], &whole[2..]],
        whole.chunks(10).collect(),
        vec![&whole[..]],
    ];
    let mut ctx = 0;
    for parts in &shapes {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let expected: Vec<u8> = parts.concat();
        for room in [len + 5, len, len.saturating_sub(3)] {
            let io: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
            a.with(|ep, cx| ep.inject_parts(cx, pb, Some(4), None, &io))
                .expect("injected");
            b.trecv(PeerAddr::UNSPEC, 4, room, ctx);
            let r = until(&mut [&mut a, &mut b], 1, ctx);
            let n = len.min(room);
            assert_eq!(r.len, n, "{} parts of {len} B into {room}", parts.len());
            match room < len {
                true => assert!(matches!(r.result, Err(Error::Truncated { .. })), "{:?}", r.result),
                false => assert_eq!(r.result, Ok(())),
            }
            assert_eq!(
                &r.buf.expect("buffer")[..n],
                &expected[..n],
                "{} parts into {room}",
                parts.len()
            );
            ctx += 1;
        }
    }
    assert!(a.done.is_empty(), "an inject reports no completion");
    let over = [IoSlice::new(&whole), IoSlice::new(&whole[..21])];
    let r = a.with(|ep, cx| ep.inject_parts(cx, pb, Some(4), None, &over));
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    a.with(|ep, cx| ep.inject_parts(cx, pb, Some(4), None, &[IoSlice::new(b"still up")]))
        .expect("the connection stays");
    b.trecv(PeerAddr::UNSPEC, 4, 16, ctx);
    assert_eq!(
        &until(&mut [&mut a, &mut b], 1, ctx).buf.expect("buffer")[..8],
        b"still up"
    );
}

/// A domain whose key table the engine's RMA checks; with `.1` set, its
/// device reaches every registration natively, its grants stamped `.2`;
/// with `.3` set, its device does atomics on every registration with
/// remote read and write, and its endpoints ask targets for grants (the
/// `device` atomic mode).
struct Keys(
    std::cell::RefCell<crate::mr::keys::KeyTable>,
    std::cell::Cell<bool>,
    std::cell::Cell<u64>,
    std::cell::Cell<bool>,
);

impl DomainProvider for Keys {
    fn name(&self) -> &'static str {
        "mem"
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
    fn remote_target(&self, key: u64, addr: u64, len: u64, access: crate::mr::Access) -> Result<*mut u8> {
        self.0.borrow().target(key, addr, len, access)
    }
    fn native_rma(&self, key: u64, access: crate::mr::Access) -> Option<(u64, u64)> {
        self.1.get().then(|| self.0.borrow().region(key, access)).flatten()
    }
    fn grant_stamp(&self) -> u64 {
        self.2.get()
    }

    fn native_atomic(&self, key: u64) -> Option<(u64, u64)> {
        let rw = crate::mr::Access::REMOTE_READ | crate::mr::Access::REMOTE_WRITE;
        self.3.get().then(|| self.0.borrow().region(key, rw)).flatten()
    }
    fn device_atomics(&self) -> bool {
        self.3.get()
    }
}

impl Node {
    /// Registers `mem` for peers' RMA; returns its key and address.
    fn register(&self, mem: &mut [u8]) -> (u64, u64) {
        let addr = mem.as_mut_ptr() as usize;
        let keys = self
            .keys
            .0
            .borrow_mut()
            .insert(addr, mem.len(), crate::mr::Access::all());
        (keys.expect("registered").key, addr as u64)
    }

    fn rma(
        &mut self,
        peer: PeerAddr,
        kind: RmaKind,
        buf: Vec<u8>,
        (key, addr): (u64, u64),
        data: Option<u64>,
        context: u64,
    ) {
        let op = RmaOp {
            peer,
            kind,
            buf: buf.into(),
            addr,
            key,
            data,
            context,
            completion: true,
        };
        self.with(|ep, cx| ep.rma(cx, op)).expect("rma accepted");
    }
}

#[test]
fn rma_writes_and_reads_of_many_frames_land_whole() {
    let net = Net::new(4);
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let pb = a.add(&b);
    let mut region = vec![0u8; 8192];
    let (key, base) = b.register(&mut region);
    for (i, size) in [0usize, 100, 1024, 3000].into_iter().enumerate() {
        let ctx = 10 * i as u64;
        let at = 7 + 100 * i as u64;
        a.rma(pb, RmaKind::Write, pattern(size, ctx), (key, base + at), Some(ctx), ctx);
        assert_eq!(until(&mut [&mut a, &mut b], 0, ctx).result, Ok(()), "write of {size}");
        let t = b.done.pop_front().expect("the write with data at the target");
        assert!(t.flags.contains(Flags::REMOTE_WRITE | Flags::REMOTE_CQ_DATA));
        assert_eq!((t.len, t.data), (size, ctx));
        a.rma(pb, RmaKind::Read, vec![0; size], (key, base + at), None, ctx + 1);
        let r = until(&mut [&mut a, &mut b], 0, ctx + 1);
        assert_eq!(r.result, Ok(()));
        assert_eq!(r.buf.expect("buffer"), pattern(size, ctx), "read back {size}");
    }
    assert_eq!(a.counter("rma_outstanding"), 0);
}

#[test]
fn an_initiator_waiting_for_its_rma_and_atomic_answers_yields_until_they_come() {
    use crate::atomic::{AtomicKind::Sum, Datatype::U64};
    let (_net, mut a, mut b, pb) = tight_pair(true, 1);
    let mut region = vec![0u8; 64];
    let (key, base) = b.register(&mut region);
    // Connected first, so that what `a` waits for below is the target alone.
    a.tsend(pb, 1, pattern(8, 0), 100);
    b.trecv(PeerAddr::UNSPEC, 1, 8, 0);
    until(&mut [&mut a, &mut b], 1, 0);
    until(&mut [&mut a, &mut b], 0, 100);
    assert_eq!(yields_over(&mut a, 50), 0, "nothing outstanding");

    // The target stops running: the read waits on it alone.
    a.rma(pb, RmaKind::Read, vec![0; 8], (key, base), None, 1);
    until_yielded(&mut a);
    assert_eq!(until(&mut [&mut a, &mut b], 0, 1).result, Ok(()));
    assert_eq!(yields_over(&mut a, 50), 0, "nothing waited on once the read is back");

    a.atomic(pb, Sum, U64, (5, 0), (key, base + 8), 2);
    until_yielded(&mut a);
    assert_eq!(until(&mut [&mut a, &mut b], 0, 2).data, 0);
    assert_eq!(yields_over(&mut a, 50), 0, "nothing waited on once the atomic is back");
}

#[test]
fn rma_outside_the_region_is_refused_and_touches_nothing() {
    let net = Net::new(4);
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let pb = a.add(&b);
    let mut region = vec![0u8; 4096];
    let (key, base) = b.register(&mut region);
    a.rma(pb, RmaKind::Write, vec![9; 3000], (key, base + 2000), None, 1);
    let w = until(&mut [&mut a, &mut b], 0, 1);
    assert!(matches!(w.result, Err(Error::RemoteAccess(_))), "{:?}", w.result);
    a.rma(pb, RmaKind::Write, vec![9; 8], (key ^ 1, base), None, 2);
    let w = until(&mut [&mut a, &mut b], 0, 2);
    assert!(matches!(w.result, Err(Error::RemoteAccess(_))), "{:?}", w.result);
    a.rma(pb, RmaKind::Read, vec![0; 8], (key, base + 4090), None, 3);
    assert!(until(&mut [&mut a, &mut b], 0, 3).result.is_err());
    assert!(region.iter().all(|&b| b == 0), "no byte of the region was written");
    a.rma(pb, RmaKind::Write, vec![5; 8], (key, base), None, 4);
    assert_eq!(
        until(&mut [&mut a, &mut b], 0, 4).result,
        Ok(()),
        "the connection serves on"
    );
}

#[test]
fn a_region_deregistered_during_a_read_fails_the_rest_of_it() {
    let net = Net::new(2);
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let pb = a.add(&b);
    let mut region = vec![3u8; 8192];
    let (key, base) = b.register(&mut region);
    a.rma(pb, RmaKind::Read, vec![0; 8192], (key, base), None, 1);
    handshake(&mut a, &mut b);
    b.progress(); // two frames go; the rest wait for room
    b.keys.0.borrow_mut().remove(key);
    let r = until(&mut [&mut a, &mut b], 0, 1);
    assert_eq!(
        r.result,
        Err(Error::RemoteAccess(
            "the remote region was deregistered during the transfer"
        ))
    );
}

#[test]
fn a_peer_dialled_by_a_stand_in_address_is_one_peer_under_both_names() {
    let net = Net::new(64);
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    net.listen_also(b.ep.transport(), b"any");
    let stand_in = a.av.insert(Address::new(&[ID, b'a', b'n', b'y']).expect("name"));
    a.tsend(stand_in, 1, pattern(8, 1), 1);
    b.trecv(PeerAddr::UNSPEC, 1, 8, 2);
    let r = until(&mut [&mut a, &mut b], 1, 2);
    assert_eq!(r.buf.expect("buffer"), pattern(8, 1));
    // b answers on the connection a opened; a reports it from the name it
    // dialled.
    let pa = b.add(&a);
    b.tsend(pa, 2, pattern(8, 2), 3);
    a.trecv(PeerAddr::UNSPEC, 2, 8, 4);
    let r = until(&mut [&mut a, &mut b], 0, 4);
    assert_eq!((r.result, r.src), (Ok(()), stand_in));
    // Under its own name it is the same peer: no second connection.
    let own = a.add(&b);
    a.tsend(own, 3, pattern(8, 3), 5);
    b.trecv(PeerAddr::UNSPEC, 3, 8, 6);
    assert_eq!(until(&mut [&mut a, &mut b], 1, 6).buf.expect("buffer"), pattern(8, 3));
    assert_eq!(a.ep.transport().conns().len(), 1, "one connection");
}

fn keyed(key: Option<&[u8]>) -> EndpointAttr {
    EndpointAttr {
        job_key: key.map(|k| crate::attr::JobKey(k.to_vec())),
        ..attr()
    }
}

#[test]
fn a_job_key_admits_its_holders_and_refuses_everyone_else_before_delivery() {
    let net = Net::new(64);
    let mut b = Node::new(&net, true, &keyed(Some(b"the key")));
    let mut good = Node::new(&net, true, &keyed(Some(b"the key")));
    let mut none = Node::new(&net, true, &attr());
    let mut other = Node::new(&net, true, &keyed(Some(b"another key")));
    for (n, tag) in [(&mut none, 1), (&mut other, 2), (&mut good, 3)] {
        let p = n.add(&b);
        n.tsend(p, tag, vec![tag as u8; 16], tag);
    }
    let mut all = [&mut b, &mut none, &mut other, &mut good];
    let c = until(&mut all, 1, 1);
    assert_eq!(
        c.result,
        Err(Error::Protocol(
            "the peer admits only holders of its job key (XFER_JOB_KEY)"
        )),
        "a connector without the key learns why"
    );
    let c = until(&mut all, 2, 2);
    assert!(matches!(c.result, Err(Error::PeerClosed { .. })), "{:?}", c.result);
    assert_eq!(until(&mut all, 3, 3).result, Ok(()));
    for _ in 0..10 {
        for n in all.iter_mut() {
            n.progress();
        }
    }
    let [b, ..] = all;
    assert_eq!(b.counter("admission_refused"), 2);
    assert_eq!(b.counter("unexpected_entries"), 1, "only the holder's message is kept");
    b.trecv(PeerAddr::UNSPEC, 0, 16, 9);
    b.with(|ep, cx| {
        let op = RecvOp {
            spec: RecvSpec {
                src: PeerAddr::UNSPEC,
                tag: 0,
                ignore: u64::MAX,
            },
            tagged: true,
            buf: vec![0; 16].into(),
            context: 10,
        };
        ep.recv(cx, op)
    })
    .expect("receive accepted");
    let r = b.take(10).expect("the kept message");
    assert_eq!((r.tag, r.buf.expect("buffer")), (3, vec![3u8; 16]));
}

#[test]
fn a_keyed_connector_proves_itself_to_a_keyed_peer_in_both_directions() {
    let net = Net::new(64);
    let mut a = Node::new(&net, true, &keyed(Some(b"k")));
    let mut b = Node::new(&net, true, &keyed(Some(b"k")));
    let (pb, pa) = (a.add(&b), b.add(&a));
    // Crossed: each is the other's acceptor too.
    a.tsend(pb, 1, pattern(8, 1), 1);
    b.tsend(pa, 2, pattern(8, 2), 2);
    a.trecv(pb, 2, 8, 3);
    b.trecv(pa, 1, 8, 4);
    let r = until(&mut [&mut a, &mut b], 0, 3);
    assert_eq!(r.result, Ok(()));
    assert_eq!(r.buf.expect("buffer"), pattern(8, 2));
    assert_eq!(until(&mut [&mut a, &mut b], 1, 4).buf.expect("buffer"), pattern(8, 1));
    assert_eq!(a.counter("admission_refused") + b.counter("admission_refused"), 0);
}

#[test]
fn the_fuzz_harness_survives_honest_and_hostile_frames() {
    use super::fuzzing::{encode, frames, run, TOKENS};
    let h = |kind: Kind, f: &dyn Fn(&mut Header)| {
        let mut h = Header::new(kind);
        f(&mut h);
        h.encode().to_vec()
    };
    let session = vec![
        (h(Kind::Eager, &|h| h.flags = wire::TAGGED), vec![1; 300]),
        (h(Kind::Eager, &|h| h.tag = 9), vec![2; 10]),
        (
            h(Kind::Rts, &|h| {
                h.len = 5000;
                h.addr = 1;
            }),
            vec![],
        ),
        (
            h(Kind::Rts, &|h| {
                h.flags = wire::KEYED;
                h.len = 5000;
                h.addr = 1;
                h.off = 1;
            }),
            vec![],
        ),
        (
            h(Kind::Cts, &|h| {
                h.token = TOKENS[0];
                h.addr = 77;
            }),
            vec![],
        ),
        (h(Kind::Delivered, &|h| h.token = TOKENS[1]), vec![]),
        (
            h(Kind::RmaWrite, &|h| {
                h.tag = 1;
                h.len = 100;
                h.flags = wire::LAST;
            }),
            vec![3; 100],
        ),
        (
            h(Kind::RmaWrite, &|h| {
                h.tag = 1;
                h.addr = 4090;
                h.len = 100;
                h.flags = wire::LAST;
            }),
            vec![4; 100],
        ),
        (
            h(Kind::RmaRead, &|h| {
                h.tag = 1;
                h.len = 3000;
                h.token = 5;
            }),
            vec![],
        ),
        (
            h(Kind::RmaData, &|h| {
                h.token = TOKENS[2];
                h.off = 90;
            }),
            vec![5; 20],
        ),
        (
            h(Kind::RmaWrite, &|h| {
                h.tag = 1;
                h.addr = u64::MAX - 8;
                h.len = 200;
                h.off = 100;
            }),
            vec![6; 50],
        ),
        (
            h(Kind::Atomic, &|h| {
                h.tag = 1;
                h.addr = 8;
                h.data = 5;
                h.off = 7 | 2 << 8 | 1 << 16;
            }),
            vec![],
        ),
        (
            h(Kind::Atomic, &|h| {
                h.tag = 1;
                h.addr = 12;
                h.off = 4 | 6 << 8;
            }),
            vec![],
        ),
        (
            h(Kind::Atomic, &|h| {
                h.off = 9 | 6 << 8;
            }),
            vec![],
        ),
        (h(Kind::Credit, &|h| h.len = u64::MAX), vec![]),
        (h(Kind::Ping, &|_| {}), vec![]),
        (vec![99; 56], vec![]),
    ];
    let bytes = encode(&session);
    assert_eq!(frames(&bytes), session);
    run(&session);
    for cut in 1..session.len() {
        run(&session[cut..]);
    }
}

impl Node {
    fn atomic(
        &mut self,
        peer: PeerAddr,
        kind: crate::atomic::AtomicKind,
        dt: crate::atomic::Datatype,
        vals: (u64, u64),
        (key, addr): (u64, u64),
        context: u64,
    ) {
        self.atomic_how(
            peer,
            kind,
            dt,
            vals,
            (key, addr),
            (true, CompletionLevel::Delivery),
            context,
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn atomic_how(
        &mut self,
        peer: PeerAddr,
        kind: crate::atomic::AtomicKind,
        dt: crate::atomic::Datatype,
        vals: (u64, u64),
        (key, addr): (u64, u64),
        (fetch, level): (bool, CompletionLevel),
        context: u64,
    ) {
        let op = crate::atomic::AtomicOp {
            peer,
            kind,
            dt,
            operand: vals.0,
            compare: vals.1,
            addr,
            key,
            fetch,
            level,
            context,
        };
        self.with(|ep, cx| ep.atomic(cx, op)).expect("atomic accepted");
    }
}

#[test]
fn atomics_apply_at_the_target_and_fetch_the_old_value() {
    use crate::atomic::{AtomicKind::*, Datatype::*};
    let net = Net::new(8);
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let pb = a.add(&b);
    let mut words = vec![0u64; 4];
    // SAFETY: the words' 32 bytes, viewed as bytes while `words` lives; the
    // engine touches them only through the key table's pointer.
    let bytes = unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), 32) };
    let (key, base) = b.register(bytes);
    a.atomic(pb, Sum, U64, (5, 0), (key, base), 1);
    assert_eq!(until(&mut [&mut a, &mut b], 0, 1).data, 0);
    a.atomic(pb, Sum, U64, (7, 0), (key, base), 2);
    let c = until(&mut [&mut a, &mut b], 0, 2);
    assert_eq!((c.result, c.data), (Ok(()), 5));
    assert!(c.flags.contains(Flags::ATOMIC | Flags::READ));
    a.atomic(pb, Cswap, U64, (99, 12), (key, base), 3);
    assert_eq!(until(&mut [&mut a, &mut b], 0, 3).data, 12, "equal: swapped");
    a.atomic(pb, Cswap, U64, (1, 12), (key, base), 4);
    assert_eq!(until(&mut [&mut a, &mut b], 0, 4).data, 99, "not equal: kept");
    a.atomic(pb, Sum, I32, ((-2i32) as u32 as u64, 0), (key, base + 8), 5);
    until(&mut [&mut a, &mut b], 0, 5);
    assert_eq!(words[0], 99);
    assert_eq!(words[1] as u32 as i32, -2, "a 32-bit element touches its four bytes");
    assert_eq!(words[1] >> 32, 0);
    a.atomic(pb, Sum, U64, (1, 0), (key, base + 4), 6);
    let c = until(&mut [&mut a, &mut b], 0, 6);
    assert_eq!(
        c.result,
        Err(Error::RemoteAccess("the remote element is not aligned to its datatype"))
    );
    a.atomic(pb, Sum, U64, (1, 0), (key, base + 32), 7);
    assert!(matches!(
        until(&mut [&mut a, &mut b], 0, 7).result,
        Err(Error::RemoteAccess(_))
    ));
    assert_eq!(
        words,
        [99, (-2i32) as u32 as u64, 0, 0],
        "refused atomics touch nothing"
    );
    assert_eq!(a.counter("atomics_outstanding"), 0);
}

#[test]
fn a_non_fetching_atomic_completes_when_sent_and_a_refusal_is_counted() {
    use crate::atomic::{AtomicKind::*, Datatype::*};
    let net = Net::new(8);
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let pb = a.add(&b);
    let mut words = vec![0u64; 2];
    // SAFETY: as in the test above.
    let bytes = unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), 16) };
    let (key, base) = b.register(bytes);
    a.atomic(pb, Read, U64, (0, 0), (key, base), 1);
    until(&mut [&mut a, &mut b], 0, 1);
    let sent = (false, CompletionLevel::Inject);
    for i in 0..3 {
        a.atomic_how(pb, Sum, U64, (10, 0), (key, base), sent, 10 + i);
        // Only the initiator progresses: no answer is waited for.
        let c = until(&mut [&mut a], 0, 10 + i);
        assert_eq!(c.result, Ok(()));
        assert!(c.flags.contains(Flags::ATOMIC | Flags::WRITE));
    }
    assert_eq!(a.counter("atomics_outstanding"), 0);
    a.atomic(pb, Read, U64, (0, 0), (key, base), 2);
    assert_eq!(
        until(&mut [&mut a, &mut b], 0, 2).data,
        30,
        "a later fetch sees them applied"
    );
    // A bad key: the sent form completes, and the refusal is counted.
    a.atomic_how(pb, Sum, U64, (1, 0), (key ^ 1, base), sent, 3);
    assert_eq!(until(&mut [&mut a], 0, 3).result, Ok(()));
    a.atomic(pb, Read, U64, (0, 0), (key, base), 4);
    until(&mut [&mut a, &mut b], 0, 4);
    assert_eq!(a.counter("atomics_refused_after_completion"), 1);
    // Asked for delivery, the refusal is the completion's error.
    a.atomic_how(
        pb,
        Sum,
        U64,
        (1, 0),
        (key ^ 1, base),
        (false, CompletionLevel::Delivery),
        5,
    );
    assert!(matches!(
        until(&mut [&mut a, &mut b], 0, 5).result,
        Err(Error::RemoteAccess(_))
    ));
    a.atomic_how(pb, Sum, U64, (2, 0), (key, base), (false, CompletionLevel::Delivery), 6);
    assert_eq!(until(&mut [&mut a, &mut b], 0, 6).result, Ok(()));
    assert_eq!(words, [32, 0]);
    assert_eq!(a.counter("atomics_refused_after_completion"), 1);
}

/// Two asynchronous nodes, `b`'s domain reaching its registrations
/// natively unless `rma_events` (then `b` wants to see each access), with
/// `region` registered at `b` and one write and one read of it served in
/// frames, which grant the key: its key and address.
fn granted_rma(net: &Net, region: &mut [u8], rma_events: bool) -> (Node, Node, PeerAddr, (u64, u64)) {
    let mut a = Node::over(net.open_async(), &attr());
    let mut battr = attr();
    battr.rma_events = rma_events;
    let mut b = Node::over(net.open_async(), &battr);
    b.keys.1.set(true);
    let pb = a.add(&b);
    let (key, base) = b.register(region);
    a.rma(pb, RmaKind::Write, pattern(64, 1), (key, base), None, 1);
    assert_eq!(until(&mut [&mut a, &mut b], 0, 1).result, Ok(()));
    a.rma(pb, RmaKind::Read, vec![0; 64], (key, base), None, 2);
    assert_eq!(until(&mut [&mut a, &mut b], 0, 2).buf.expect("buffer"), pattern(64, 1));
    assert!(net.pending_pulls().is_empty(), "the first ones go in frames");
    (a, b, pb, (key, base))
}

#[test]
fn rma_goes_natively_once_the_target_granted_its_key_and_completes_later() {
    let net = Net::new(64);
    let mut region = vec![0u8; 4096];
    let (mut a, mut b, pb, (key, base)) = granted_rma(&net, &mut region, false);
    let frames = b.ep.transport().frames;
    a.rma(pb, RmaKind::Write, pattern(3000, 7), (key, base + 100), None, 3);
    a.rma(pb, RmaKind::Read, vec![0; 50], (key, base), None, 4);
    for _ in 0..3 {
        a.progress();
        b.progress();
    }
    assert_eq!(net.pending_pulls(), vec![3000, 50]);
    assert!(a.done.is_empty(), "nothing completes before the transport reports it");
    net.finish_pull(0);
    assert_eq!(until(&mut [&mut a, &mut b], 0, 3).result, Ok(()));
    assert_eq!(&region[100..3100], &pattern(3000, 7)[..]);
    net.finish_pull(0);
    let r = until(&mut [&mut a, &mut b], 0, 4);
    assert_eq!(r.buf.expect("buffer"), pattern(64, 1)[..50].to_vec());
    assert_eq!(b.ep.transport().frames, frames, "the target's engine saw none of it");
    assert_eq!(a.counter("rma_native"), 2);
    assert_eq!(a.counter("rma_outstanding"), 0);
    // Outside the granted region, or with immediate data, it goes in frames.
    a.rma(pb, RmaKind::Write, vec![1; 8], (key, base + 4092), None, 5);
    let w = until(&mut [&mut a, &mut b], 0, 5);
    assert!(matches!(w.result, Err(Error::RemoteAccess(_))), "{:?}", w.result);
    a.rma(pb, RmaKind::Write, vec![1; 8], (key, base), Some(9), 6);
    assert_eq!(until(&mut [&mut a, &mut b], 0, 6).result, Ok(()));
    assert!(net.pending_pulls().is_empty());
    assert_eq!(a.counter("rma_native"), 2);
}

#[test]
fn an_rma_the_device_moves_waits_on_no_process_and_never_yields() {
    let net = Net::new(64);
    let mut region = vec![0u8; 4096];
    let (mut a, mut b, pb, (key, base)) = granted_rma(&net, &mut region, false);
    a.ep.s.idle = super::idle::Idle::new(1);
    a.rma(pb, RmaKind::Write, pattern(64, 7), (key, base), None, 3);
    for _ in 0..3 {
        a.progress();
        b.progress();
    }
    assert_eq!(net.pending_pulls(), vec![64], "the device has it");
    assert_eq!(yields_over(&mut a, 50), 0, "the device completes it whoever runs");
    net.finish_pull(0);
    assert_eq!(until(&mut [&mut a, &mut b], 0, 3).result, Ok(()));
}

/// The transport gets back, with each native operation, the stamp the
/// target's grant for it carried (shared memory checks it against the
/// target's current epoch), and a grant earned again carries the new one.
#[test]
fn a_native_rma_carries_the_stamp_of_its_grant() {
    let net = Net::new(64);
    let mut region = vec![0u8; 256];
    let mut a = Node::over(net.open_async(), &attr());
    let mut b = Node::over(net.open_async(), &attr());
    b.keys.1.set(true);
    b.keys.2.set(41);
    let pb = a.add(&b);
    let (key, base) = b.register(&mut region);
    a.rma(pb, RmaKind::Write, vec![1; 8], (key, base), None, 1);
    assert_eq!(until(&mut [&mut a, &mut b], 0, 1).result, Ok(()));
    b.keys.2.set(42);
    a.rma(pb, RmaKind::Write, vec![2; 8], (key, base), None, 2);
    a.progress();
    assert_eq!(
        net.pending_stamps(),
        vec![41],
        "the grant's stamp, not the target's current one"
    );
    net.finish_pull(0);
    assert_eq!(until(&mut [&mut a, &mut b], 0, 2).result, Ok(()));
    // The first read goes in frames and earns a grant stamped 42.
    a.rma(pb, RmaKind::Read, vec![0; 8], (key, base), None, 3);
    assert_eq!(until(&mut [&mut a, &mut b], 0, 3).buf.expect("buffer"), vec![2; 8]);
    assert!(net.pending_stamps().is_empty());
    a.rma(pb, RmaKind::Read, vec![0; 8], (key, base), None, 4);
    a.progress();
    assert_eq!(net.pending_stamps(), vec![42]);
    net.finish_pull(0);
    assert_eq!(until(&mut [&mut a, &mut b], 0, 4).result, Ok(()));
}

#[test]
fn a_target_without_native_access_or_that_wants_rma_events_grants_nothing() {
    for events in [false, true] {
        let net = Net::new(64);
        let mut region = vec![0u8; 256];
        let (mut a, mut b, pb, (key, base)) = granted_rma(&net, &mut region, events);
        if !events {
            b.keys.1.set(false);
            // The grant from before stands; a key granted later would not be.
            let (k2, b2) = b.register(&mut region[128..]);
            a.rma(pb, RmaKind::Write, vec![3; 8], (k2, b2), None, 3);
            assert_eq!(until(&mut [&mut a, &mut b], 0, 3).result, Ok(()));
            a.rma(pb, RmaKind::Write, vec![3; 8], (k2, b2), None, 4);
            assert_eq!(until(&mut [&mut a, &mut b], 0, 4).result, Ok(()));
            assert!(net.pending_pulls().is_empty(), "an ungranted key goes in frames");
            continue;
        }
        a.rma(pb, RmaKind::Write, vec![3; 8], (key, base), None, 3);
        assert_eq!(until(&mut [&mut a, &mut b], 0, 3).result, Ok(()));
        assert!(net.pending_pulls().is_empty(), "a target that sees each access");
        let t: Vec<_> = b.done.drain(..).collect();
        assert_eq!(t.len(), 3, "the target saw every access: {t:?}");
        assert_eq!(a.counter("rma_native"), 0);
    }
}

#[test]
fn a_failed_native_rma_fails_once_and_the_connection_serves_on() {
    let net = Net::new(64);
    let mut region = vec![0u8; 256];
    let (mut a, mut b, pb, (key, base)) = granted_rma(&net, &mut region, false);
    a.rma(pb, RmaKind::Write, vec![5; 16], (key, base), None, 3);
    a.progress();
    net.fail_pull(0, Error::RemoteAccess("the target's device refused the key"));
    let w = until(&mut [&mut a, &mut b], 0, 3);
    assert_eq!(
        w.result,
        Err(Error::RemoteAccess("the target's device refused the key"))
    );
    assert_eq!(&region[..16], &pattern(64, 1)[..16], "untouched");
    for _ in 0..3 {
        a.progress();
        b.progress();
    }
    assert!(a.done.is_empty(), "once");
    assert_eq!(a.counter("rma_native_failed"), 1);
    a.rma(pb, RmaKind::Write, vec![6; 16], (key, base), None, 4);
    a.progress();
    net.finish_pull(0);
    assert_eq!(until(&mut [&mut a, &mut b], 0, 4).result, Ok(()));
    assert_eq!(&region[..16], &[6; 16]);
}

#[test]
fn a_peer_dying_with_native_rma_outstanding_ends_it_once_when_the_transport_reports_it() {
    let net = Net::new(64);
    let mut region = vec![0u8; 256];
    let (mut a, b, pb, (key, base)) = granted_rma(&net, &mut region, false);
    a.rma(pb, RmaKind::Read, vec![0; 32], (key, base), None, 3);
    a.rma(pb, RmaKind::Write, vec![1; 32], (key, base), None, 4);
    a.progress();
    assert_eq!(net.pending_pulls().len(), 2);
    drop(b);
    for _ in 0..3 {
        a.progress();
    }
    for ctx in [3, 4] {
        let c = a.take(ctx).unwrap_or_else(|| panic!("RMA {ctx} ended"));
        assert_eq!(c.result, Err(Error::PeerClosed { peer: pb }), "RMA {ctx}");
    }
    assert!(net.pending_pulls().is_empty());
    for _ in 0..3 {
        a.progress();
    }
    assert!(a.done.is_empty(), "once");
    assert_eq!(a.counter("rma_outstanding"), 0);
    assert_eq!(a.counter("rma_native_failed"), 2);
}

#[test]
fn closing_with_native_rma_outstanding_cancels_it_once_the_transport_reports_it() {
    let net = Net::new(64);
    let mut region = vec![0u8; 256];
    let (mut a, _b, pb, (key, base)) = granted_rma(&net, &mut region, false);
    a.rma(pb, RmaKind::Read, vec![0; 32], (key, base), None, 3);
    a.progress();
    a.with(|ep, cx| ep.close(cx));
    assert!(a.take(3).is_none(), "not while the transport may write its buffer");
    a.progress();
    assert_eq!(a.take(3).map(|c| c.result), Some(Err(Error::Canceled)));
    assert_eq!(a.counter("rma_outstanding"), 0);
}

#[test]
fn native_rma_never_overtakes_rma_the_target_applies() {
    let net = Net::new(64);
    let mut region = vec![0u8; 256];
    let (mut a, mut b, pb, (key, base)) = granted_rma(&net, &mut region, false);
    // An inject write (no answer) and a read behind it: the read goes in
    // frames, after it, and sees it.
    a.with(|ep, cx| ep.inject_write(cx, pb, base, key, None, &[7; 16]))
        .expect("injected");
    a.rma(pb, RmaKind::Read, vec![0; 16], (key, base), None, 3);
    assert!(net.pending_pulls().is_empty(), "not natively");
    assert_eq!(until(&mut [&mut a, &mut b], 0, 3).buf.expect("buffer"), vec![7; 16]);
    // A write with immediate data in frames, and a read posted before its
    // answer: in frames too.
    a.rma(pb, RmaKind::Write, vec![8; 16], (key, base), Some(1), 4);
    a.rma(pb, RmaKind::Read, vec![0; 16], (key, base), None, 5);
    assert!(net.pending_pulls().is_empty(), "not natively");
    assert_eq!(until(&mut [&mut a, &mut b], 0, 4).result, Ok(()));
    assert_eq!(until(&mut [&mut a, &mut b], 0, 5).buf.expect("buffer"), vec![8; 16]);
    // With nothing pending at the target, natively again.
    a.rma(pb, RmaKind::Read, vec![0; 16], (key, base), None, 6);
    assert_eq!(net.pending_pulls(), vec![16]);
    net.finish_pull(0);
    assert_eq!(until(&mut [&mut a, &mut b], 0, 6).buf.expect("buffer"), vec![8; 16]);
    assert_eq!(a.counter("rma_native"), 1);
}

/// Two asynchronous nodes in the `device` atomic mode, with `words`
/// registered at `b`: `b`'s key and address.
fn device_atomics(net: &Net, words: &mut [u64]) -> (Node, Node, PeerAddr, (u64, u64)) {
    let (mut a, b) = (
        Node::over(net.open_async(), &attr()),
        Node::over(net.open_async(), &attr()),
    );
    a.keys.3.set(true);
    b.keys.3.set(true);
    let pb = a.add(&b);
    // SAFETY: the words' bytes, viewed as bytes while `words` lives; the
    // engine and the device touch them only atomically.
    let bytes = unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), words.len() * 8) };
    let key = b.register(bytes);
    (a, b, pb, key)
}

#[test]
fn a_first_atomic_on_a_device_region_is_granted_not_applied_then_done_by_the_device() {
    use crate::atomic::{AtomicKind::*, Datatype::*};
    let net = Net::new(8);
    let mut words = vec![40u64, 0];
    let (mut a, mut b, pb, (key, base)) = device_atomics(&net, &mut words);
    a.atomic_how(pb, Sum, U64, (2, 0), (key, base), (false, CompletionLevel::Inject), 1);
    // The target alone: it grants, applies nothing.
    for _ in 0..4 {
        b.progress();
    }
    assert_eq!(
        unsafe { std::ptr::read_volatile(words.as_ptr()) },
        40,
        "the target did not apply it"
    );
    assert!(a.done.is_empty(), "an atomic asking for a grant waits for it");
    assert_eq!(until(&mut [&mut a, &mut b], 0, 1).result, Ok(()));
    assert_eq!(words[0], 42);
    assert_eq!(a.ep.transport().device_ops, 1, "one fetch-and-add");
    let frames = b.ep.transport().frames;
    a.atomic(pb, Cswap, U64, (7, 42), (key, base), 2);
    assert_eq!(until(&mut [&mut a, &mut b], 0, 2).data, 42);
    assert_eq!(words[0], 7);
    assert_eq!(a.ep.transport().device_ops, 2, "one compare-and-swap");
    assert_eq!(b.ep.transport().frames, frames, "granted: no frame to the target");
    assert_eq!(a.counter("atomics_device"), 2);
    assert_eq!(a.counter("atomics_outstanding"), 0);
}

#[test]
fn every_other_kind_on_a_device_region_is_a_compare_and_swap_loop() {
    use crate::atomic::{AtomicKind::*, Datatype::*};
    let net = Net::new(8);
    let mut words = vec![0u64; 2];
    let (mut a, mut b, pb, (key, base)) = device_atomics(&net, &mut words);
    a.atomic(pb, Read, U64, (0, 0), (key, base), 1);
    until(&mut [&mut a, &mut b], 0, 1);
    let d = |x: f64| x.to_bits();
    words[0] = d(1.5);
    words[1] = 0x0000_0009_ffff_fffe;
    let cases: [(crate::atomic::AtomicKind, crate::atomic::Datatype, u64, u64, u64, u64); 9] = [
        (Sum, F64, 0, d(2.0), d(1.5), d(3.5)),
        (Max, F64, 0, d(1.0), d(3.5), d(3.5)),
        (Min, F64, 0, d(-1.0), d(3.5), d(-1.0)),
        (Write, F64, 0, 17, d(-1.0), 17),
        (Bxor, U64, 0, 0b110, 17, 17 ^ 0b110),
        (Sum, U32, 8, 3, 0xffff_fffe, 0x0000_0009_0000_0001),
        (Min, I32, 12, (-4i32) as u32 as u64, 9, 0xffff_fffc_0000_0001),
        (Cswap, U32, 8, 5, 1, 0xffff_fffc_0000_0005),
        (Read, I32, 12, 0, (-4i32) as u32 as u64, 0xffff_fffc_0000_0005),
    ];
    for (i, &(kind, dt, off, operand, old, after)) in cases.iter().enumerate() {
        let ctx = 10 + i as u64;
        let compare = if kind == Cswap { 1 } else { 0 };
        a.atomic(pb, kind, dt, (operand, compare), (key, base + off), ctx);
        let c = until(&mut [&mut a, &mut b], 0, ctx);
        assert_eq!((c.result, c.data), (Ok(()), old), "{kind:?} {dt:?}");
        assert_eq!(words[off as usize / 8], after, "{kind:?} {dt:?}");
    }
    assert_eq!(b.counter("atomics_outstanding"), 0);
}

#[test]
fn a_compare_and_swap_loop_retries_from_what_another_device_wrote() {
    use crate::atomic::{AtomicKind::*, Datatype::*};
    let net = Net::new(8);
    let mut words = vec![0u64; 1];
    let (mut a, mut b, pb, (key, base)) = device_atomics(&net, &mut words);
    a.atomic(pb, Read, U64, (0, 0), (key, base), 1);
    until(&mut [&mut a, &mut b], 0, 1);
    // SAFETY: a live, aligned word that everyone touches only atomically.
    let cell = unsafe { std::sync::atomic::AtomicU64::from_ptr(words.as_mut_ptr()) };
    cell.store(100, std::sync::atomic::Ordering::SeqCst);
    a.atomic(pb, Max, U64, (5000, 0), (key, base), 2);
    let mut meddled = 0;
    let mut c = None;
    for _ in 0..10_000 {
        c = a.take(2);
        if c.is_some() {
            break;
        }
        a.progress();
        b.progress();
        // Another peer's device adds 1000 between this loop's steps, twice.
        if meddled < 2 {
            cell.fetch_add(1000, std::sync::atomic::Ordering::SeqCst);
            meddled += 1;
        }
    }
    let c = c.expect("the max completed");
    assert_eq!(c.result, Ok(()));
    assert_eq!(c.data, 2100, "the old value is the one the swap replaced");
    assert_eq!(cell.load(std::sync::atomic::Ordering::SeqCst), 5000);
    assert_eq!(
        a.ep.transport().device_ops,
        5,
        "the read, then a guess and two retries before the swap"
    );
    a.atomic(pb, Max, U64, (10, 0), (key, base), 3);
    assert_eq!(until(&mut [&mut a, &mut b], 0, 3).data, 5000);
    assert_eq!(
        cell.load(std::sync::atomic::Ordering::SeqCst),
        5000,
        "a max that changes nothing writes nothing"
    );
}

#[test]
fn bad_atomics_on_a_device_region_are_refused_by_the_target_and_touch_nothing() {
    use crate::atomic::{AtomicKind::*, Datatype::*};
    let net = Net::new(8);
    let mut words = vec![5u64, 6];
    let (mut a, mut b, pb, (key, base)) = device_atomics(&net, &mut words);
    a.atomic(pb, Sum, U64, (1, 0), (key ^ 1, base), 1);
    assert!(matches!(
        until(&mut [&mut a, &mut b], 0, 1).result,
        Err(Error::RemoteAccess(_))
    ));
    a.atomic(pb, Sum, U64, (1, 0), (key, base + 16), 2);
    assert!(matches!(
        until(&mut [&mut a, &mut b], 0, 2).result,
        Err(Error::RemoteAccess(_))
    ));
    a.atomic(pb, Sum, U64, (1, 0), (key, base + 4), 3);
    assert!(matches!(
        until(&mut [&mut a, &mut b], 0, 3).result,
        Err(Error::RemoteAccess(_))
    ));
    // Granted now; a later misaligned or out-of-bounds one still goes to the target.
    a.atomic(pb, Sum, U64, (1, 0), (key, base), 4);
    assert_eq!(until(&mut [&mut a, &mut b], 0, 4).data, 5);
    a.atomic(pb, Sum, U32, (1, 0), (key, base + 6), 5);
    assert!(matches!(
        until(&mut [&mut a, &mut b], 0, 5).result,
        Err(Error::RemoteAccess(_))
    ));
    a.atomic(pb, Sum, U64, (1, 0), (key, base + 16), 6);
    assert!(matches!(
        until(&mut [&mut a, &mut b], 0, 6).result,
        Err(Error::RemoteAccess(_))
    ));
    assert_eq!(words, [6, 6], "only the good one applied");
    assert_eq!(a.ep.transport().device_ops, 1);
}

#[test]
fn a_peer_over_a_transport_without_device_atomics_has_the_target_apply_them() {
    use crate::atomic::{AtomicKind::*, Datatype::*};
    let net = Net::new(8);
    // Synchronous transports: no device atomics.
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    a.keys.3.set(true);
    b.keys.3.set(true);
    let pb = a.add(&b);
    let mut words = vec![1u64];
    // SAFETY: as in `device_atomics`.
    let bytes = unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), 8) };
    let (key, base) = b.register(bytes);
    for i in 0..3 {
        a.atomic(pb, Sum, U64, (2, 0), (key, base), i);
        assert_eq!(until(&mut [&mut a, &mut b], 0, i).data, 1 + 2 * i);
    }
    assert_eq!(words[0], 7);
}

#[test]
fn a_peer_dying_under_a_device_atomic_ends_it_once_when_the_transport_reports_it() {
    use crate::atomic::{AtomicKind::*, Datatype::*};
    let net = Net::new(8);
    let mut words = vec![3u64; 1];
    let (mut a, mut b, pb, (key, base)) = device_atomics(&net, &mut words);
    a.atomic(pb, Read, U64, (0, 0), (key, base), 1);
    until(&mut [&mut a, &mut b], 0, 1);
    a.atomic(pb, Max, U64, (5, 0), (key, base), 2);
    drop(b);
    let c = until(&mut [&mut a], 0, 2);
    assert!(c.result.is_err(), "{:?}", c.result);
    for _ in 0..8 {
        a.progress();
    }
    assert!(a.take(2).is_none(), "completed once");
    assert_eq!(a.counter("atomics_outstanding"), 0);
}

#[test]
fn a_device_atomic_keeps_its_place_among_rma_and_atomics_in_frames() {
    use crate::atomic::{AtomicKind::*, Datatype::*};
    let net = Net::new(8);
    let mut words = vec![0u64; 2];
    let (mut a, mut b, pb, (key, base)) = device_atomics(&net, &mut words);
    a.atomic(pb, Read, U64, (0, 0), (key, base), 1);
    until(&mut [&mut a, &mut b], 0, 1);
    assert_eq!(a.ep.transport().device_ops, 1, "granted: by the device from now on");
    // A write in frames, then an add by the device: the initiator alone
    // progresses, and its device must not add before the target's engine
    // wrote.
    a.rma(pb, RmaKind::Write, 1000u64.to_le_bytes().to_vec(), (key, base), None, 2);
    a.atomic(pb, Sum, U64, (1, 0), (key, base), 3);
    for _ in 0..4 {
        a.progress();
    }
    assert_eq!(a.ep.transport().device_ops, 1, "the add waits for the write's answer");
    // Behind the waiting add: a write and an atomic in frames (another
    // word), and an inject write, which cannot wait and is refused.
    a.rma(pb, RmaKind::Write, 5u64.to_le_bytes().to_vec(), (key, base), None, 4);
    a.atomic(pb, Sum, U64, (9, 0), (key ^ 1, base + 8), 5);
    let inject = a.with(|ep, cx| ep.inject_write(cx, pb, base, key, None, &[7; 8]));
    assert!(matches!(inject, Err(Error::Again)), "{inject:?}");
    assert_eq!(until(&mut [&mut a, &mut b], 0, 2).result, Ok(()));
    let add = until(&mut [&mut a, &mut b], 0, 3);
    assert_eq!(
        (add.result, add.data),
        (Ok(()), 1000),
        "the add saw the write before it"
    );
    assert_eq!(until(&mut [&mut a, &mut b], 0, 4).result, Ok(()));
    assert!(matches!(
        until(&mut [&mut a, &mut b], 0, 5).result,
        Err(Error::RemoteAccess(_))
    ));
    // SAFETY: a live, aligned word that the device and engine wrote.
    assert_eq!(
        unsafe { std::ptr::read_volatile(words.as_ptr()) },
        5,
        "the write posted after the add came last"
    );
    assert_eq!(a.ep.transport().device_ops, 2);
    assert_eq!(a.counter("atomics_outstanding"), 0);
    assert_eq!(a.counter("rma_outstanding"), 0);
    // Nothing waits now: an inject write goes.
    a.with(|ep, cx| ep.inject_write(cx, pb, base, key, None, &[7; 8]))
        .expect("injected");
}

#[test]
fn a_device_atomic_behind_an_inject_write_asks_again_and_sees_it() {
    use crate::atomic::{AtomicKind::*, Datatype::*};
    let net = Net::new(8);
    let mut words = vec![0u64; 1];
    let (mut a, mut b, pb, (key, base)) = device_atomics(&net, &mut words);
    // An inject write before the first atomic: the ask follows it.
    a.with(|ep, cx| ep.inject_write(cx, pb, base, key, None, &40u64.to_le_bytes()))
        .expect("injected");
    a.atomic(pb, Sum, U64, (1, 0), (key, base), 1);
    assert_eq!(until(&mut [&mut a, &mut b], 0, 1).data, 40);
    // Granted: an inject write, then a device add. No answer would show the
    // write applied, so the add asks again and goes by the device after.
    a.with(|ep, cx| ep.inject_write(cx, pb, base, key, None, &100u64.to_le_bytes()))
        .expect("injected");
    a.atomic(pb, Sum, U64, (1, 0), (key, base), 2);
    assert_eq!(until(&mut [&mut a, &mut b], 0, 2).data, 100, "the add saw the write");
    // SAFETY: a live, aligned word that the device and engine wrote.
    assert_eq!(unsafe { std::ptr::read_volatile(words.as_ptr()) }, 101);
    assert_eq!(a.ep.transport().device_ops, 2);
    assert_eq!(a.counter("atomics_outstanding"), 0);
}

#[test]
fn adds_posted_before_their_region_is_granted_all_go_by_the_device_in_order() {
    use crate::atomic::{AtomicKind::*, Datatype::*};
    let net = Net::new(8);
    let mut words = vec![0u64; 1];
    let (mut a, mut b, pb, (key, base)) = device_atomics(&net, &mut words);
    // A window of adds completed when done, the first asking for the
    // region: the rest wait behind it, then go by the device.
    for i in 0..8 {
        a.atomic_how(pb, Sum, U64, (1, 0), (key, base), (false, CompletionLevel::Inject), i);
    }
    a.atomic(pb, Read, U64, (0, 0), (key, base), 8);
    for i in 0..8 {
        assert_eq!(until(&mut [&mut a, &mut b], 0, i).result, Ok(()), "add {i}");
    }
    assert_eq!(until(&mut [&mut a, &mut b], 0, 8).data, 8, "the read after every add");
    assert_eq!(a.ep.transport().device_ops, 9, "every one by the device");
    assert_eq!(a.counter("atomics_outstanding"), 0);
}

/// A receiver that asks for pushes first and whose wait for pushed bytes
/// is over at once pulls the whole payload right after its clear-to-send:
/// the sender, cleared and then finished, pushes nothing and says so.
#[test]
fn a_push_first_receiver_that_waits_for_nothing_pulls_everything() {
    let net = Net::new(64);
    net.push_first(Some(std::time::Duration::ZERO));
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let pb = a.add(&b);
    b.trecv(PeerAddr::UNSPEC, 9, 70_000, 0);
    a.tsend(pb, 9, pattern(70_000, 5), 1);
    let r = until(&mut [&mut a, &mut b], 1, 0);
    assert_eq!(r.result, Ok(()));
    assert_eq!(r.buf.expect("buffer"), pattern(70_000, 5));
    assert_eq!(until(&mut [&mut a, &mut b], 0, 1).result, Ok(()));
    for _ in 0..4 {
        a.progress();
        b.progress();
    }
    assert_eq!((b.counter("rndv_pushes"), b.counter("rndv_pushes_pulled")), (1, 1));
    assert_eq!(b.counter("rndv_pulls"), 1);
    assert!(b.ep.s.pushes.is_empty(), "the sender's end of the push came");
    assert_eq!((a.counter("protocol_errors"), b.counter("protocol_errors")), (0, 0));
}

/// The wait of a push-first receiver in the tests below: never over by
/// itself while a test runs, however loaded the machine.
const PUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Makes `n`'s pushes and its senders' last pushed bytes look older by
/// twice [`PUSH_WAIT`] (`pushed_at` too when `senders`): as if that long
/// had passed with nothing pushed.
fn age_pushes(n: &mut Node, senders: bool) {
    let back = |t: std::time::Instant| t.checked_sub(2 * PUSH_WAIT).expect("the clock goes back that far");
    let mut peers = Vec::new();
    for (_, p) in n.ep.s.pushes.iter_mut() {
        if let Some(r) = p.resume.as_mut() {
            r.last = back(r.last);
        }
        peers.push(p.peer.0);
    }
    for p in peers.into_iter().filter(|_| senders) {
        if let Some(e) = n.ep.s.peers.get_mut(p) {
            e.pushed_at = e.pushed_at.map(back);
        }
    }
}

/// A push whose sender stops delivering (here: is not progressed) for
/// longer than the receiver's wait is finished by a pull of the rest; the
/// pushed bytes the sender wrote after that are dropped, what it had
/// queued of the push goes no more, and the next messages arrive whole.
#[test]
fn a_stalled_push_is_finished_by_pulling_the_rest() {
    const WAIT: std::time::Duration = PUSH_WAIT;
    let net = Net::new(4);
    net.push_first(Some(WAIT));
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let pb = a.add(&b);
    b.trecv(PeerAddr::UNSPEC, 9, 10_000, 0);
    a.tsend(pb, 9, pattern(10_000, 7), 1);
    // The request reaches `b`, whose clear-to-send reaches `a`, which
    // pushes what the connection holds (4 frames of 1 KiB); `b` takes them.
    for _ in 0..3 {
        b.progress();
        a.progress();
    }
    b.progress();
    let got = b.ep.s.pushes.iter().map(|(_, p)| p.got).next();
    assert!(matches!(got, Some(n) if n > 0 && n < 10_000), "pushed in part: {got:?}");
    assert!(b.done.is_empty());
    b.progress();
    assert!(b.done.is_empty(), "not stalled before the wait");
    age_pushes(&mut b, true);
    b.progress(); // nothing pushed for the wait: pulls the rest, finishes
    let r = b.take(0).expect("the receive completes by its pull");
    assert_eq!(r.buf.expect("buffer"), pattern(10_000, 7));
    // `a` writes more of the push before it reads the finish (a post
    // flushes its queue), then reads it and posts the next rendezvous.
    b.trecv(PeerAddr::UNSPEC, 9, 300, 2);
    a.tsend(pb, 9, pattern(300, 8), 3);
    a.progress();
    assert_eq!(a.take(1).map(|c| c.result), Some(Ok(())), "the send is over");
    b.trecv(PeerAddr::UNSPEC, 9, 5000, 4);
    a.tsend(pb, 9, pattern(5000, 9), 5);
    assert_eq!(until(&mut [&mut a, &mut b], 1, 2).buf.expect("buffer"), pattern(300, 8));
    assert_eq!(
        until(&mut [&mut a, &mut b], 1, 4).buf.expect("buffer"),
        pattern(5000, 9)
    );
    assert_eq!(until(&mut [&mut a, &mut b], 0, 5).result, Ok(()));
    for _ in 0..4 {
        a.progress();
        b.progress();
    }
    assert_eq!((b.counter("rndv_pushes"), b.counter("rndv_pushes_pulled")), (2, 1));
    assert!(b.ep.s.pushes.is_empty(), "no push left behind");
    assert_eq!((a.counter("protocol_errors"), b.counter("protocol_errors")), (0, 0));
}

/// Pushes queued behind the one their sender is writing are not stalled,
/// however long ago they were cleared: any pushed bytes from the sender
/// count. Once the sender delivers nothing for the wait, every push of
/// its is pulled.
#[test]
fn pushes_waiting_behind_their_senders_current_one_are_not_pulled() {
    let net = Net::new(4);
    net.push_first(Some(PUSH_WAIT));
    let (mut a, mut b) = (Node::new(&net, true, &attr()), Node::new(&net, true, &attr()));
    let pb = a.add(&b);
    for i in 0..3 {
        b.trecv(PeerAddr::UNSPEC, 9, 40_000, 2 * i);
        a.tsend(pb, 9, pattern(40_000, i), 2 * i + 1);
    }
    for _ in 0..3 {
        b.progress();
        a.progress();
    }
    assert_eq!(b.ep.s.pushes.len(), 3, "all three cleared");
    age_pushes(&mut b, false); // cleared long ago, but the sender pushes
    for _ in 0..3 {
        b.progress();
        a.progress();
    }
    assert_eq!(
        b.counter("rndv_pushes_pulled"),
        0,
        "none pulled while the sender pushes"
    );
    assert!(b.ep.s.pushes.iter().any(|(_, p)| p.got > 0), "the first one moving");
    assert_eq!(b.ep.s.pushes.len(), 3, "none whole yet");
    b.progress(); // takes what `a` pushed last; `a` pushes no more
    age_pushes(&mut b, true);
    b.progress();
    let pulled = b.counter("rndv_pushes_pulled");
    assert!(pulled >= 1, "the stalled sender's pushes are pulled");
    for i in 0..3 {
        let r = until(&mut [&mut a, &mut b], 1, 2 * i);
        assert_eq!(r.buf.expect("buffer"), pattern(40_000, i), "message {i}");
        assert_eq!(until(&mut [&mut a, &mut b], 0, 2 * i + 1).result, Ok(()));
    }
    for _ in 0..4 {
        a.progress();
        b.progress();
    }
    assert!(b.ep.s.pushes.is_empty(), "no push left behind");
    assert_eq!((a.counter("protocol_errors"), b.counter("protocol_errors")), (0, 0));
}
