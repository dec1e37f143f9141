//! The provider conformance suite: semantics every provider must honour,
//! written against the public API only. `XFER_PROVIDER` picks the provider
//! (the Soft-RoCE run sets `verbs`); everything here runs unchanged on each.

mod common;

use common::{drive, expect, pattern, test_attr, wait_readable, Node};
use xfer::{
    Access, AtomicKind, Buffer, Claim, CompletionLevel, Datatype, Error, Flags, MemoryRegion, Peeked, PeerAddr, RecvOp,
    RecvSpec, RemoteKey, RmaKind, RmaOp, SendOp,
};

const ANY: PeerAddr = PeerAddr::UNSPEC;

/// Sizes on both sides of the eager/rendezvous threshold.
fn sizes() -> Vec<usize> {
    let t = test_attr().rndv_threshold;
    vec![0, 1, 64, 4096, t - 1, t, t + 1, 1 << 20]
}

#[test]
fn tagged_roundtrip_all_sizes_both_protocols() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    for (i, size) in sizes().into_iter().enumerate() {
        let ctx = i as u64 * 2;
        b.ep.trecv(ANY, 7, 0, vec![0; size], ctx).unwrap();
        a.ep.tsend(pb, 7, pattern(size, ctx), ctx + 1).unwrap();
        let r = expect(&mut [&mut a, &mut b], 1, ctx);
        assert_eq!(r.result, Ok(()), "size {size}");
        assert_eq!(r.len, size);
        assert_eq!(r.tag, 7);
        assert!(r.flags.contains(Flags::RECV | Flags::TAGGED));
        assert_eq!(r.buf.unwrap(), pattern(size, ctx), "content of {size} B");
        let s = expect(&mut [&mut a, &mut b], 0, ctx + 1);
        assert_eq!(s.result, Ok(()));
        assert!(s.flags.contains(Flags::SEND | Flags::TAGGED));
        assert_eq!(s.buf.unwrap().len(), size, "send buffer comes back");
    }
}

#[test]
fn untagged_messages_keep_order_and_report_source() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let pa = b.add(&a);
    let n = 500u64;
    for i in 0..n {
        let size = if i % 50 == 0 { 200_000 } else { 8 };
        a.ep.send(pb, pattern(size, i), 1_000_000 + i).unwrap();
    }
    for i in 0..n {
        b.ep.recv(ANY, vec![0; 200_000], i).unwrap();
    }
    for i in 0..n {
        let r = expect(&mut [&mut a, &mut b], 1, i);
        assert_eq!(r.result, Ok(()));
        let size = if i % 50 == 0 { 200_000 } else { 8 };
        assert_eq!(r.len, size);
        assert_eq!(
            &r.buf.unwrap()[..size],
            &pattern(size, i)[..],
            "message {i} out of order"
        );
        assert_eq!(r.src, pa);
        assert!(r.flags.contains(Flags::MSG | Flags::RECV));
    }
    drive(&mut [&mut a, &mut b], "send completions", |ns| {
        ns[0].done.len() == n as usize
    });
}

#[test]
fn an_untagged_receive_ignores_the_tag_in_its_spec() {
    // `fi_recv` has no tag: an untagged receive posted through `post_recv`
    // with a tag and mask in its spec takes any untagged message, posted
    // before or after it arrives, eager or rendezvous; and the two matching
    // spaces stay apart (a tagged message with tag 0 is not for it).
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let big = test_attr().rndv_threshold + 1;
    let untagged = |len: usize, context: u64| RecvOp {
        spec: RecvSpec {
            src: ANY,
            tag: 5,
            ignore: 0,
        },
        tagged: false,
        buf: vec![0; len].into(),
        context,
    };
    a.ep.tsend(pb, 0, pattern(8, 1), 101).unwrap();
    a.ep.send(pb, pattern(8, 2), 102).unwrap();
    drive(&mut [&mut a, &mut b], "both sends complete", |ns| ns[0].done.len() == 2);
    // Unexpected when posted.
    b.ep.post_recv(untagged(64, 2)).unwrap();
    let r = expect(&mut [&mut a, &mut b], 1, 2);
    assert_eq!(r.result, Ok(()));
    assert!(r.flags.contains(Flags::MSG | Flags::RECV));
    assert_eq!(&r.buf.unwrap()[..8], &pattern(8, 2)[..]);
    // Posted before the message, eager and rendezvous.
    for (ctx, len) in [(3u64, 8usize), (4, big)] {
        b.ep.post_recv(untagged(len, ctx)).unwrap();
        a.ep.send(pb, pattern(len, ctx), 100 + ctx).unwrap();
        let r = expect(&mut [&mut a, &mut b], 1, ctx);
        assert_eq!(r.result, Ok(()), "{len} B");
        assert_eq!(r.len, len);
        assert_eq!(r.buf.unwrap(), pattern(len, ctx), "{len} B");
    }
    // The tagged message with tag 0 is still waiting for a tagged receive.
    b.ep.trecv(ANY, 0, 0, vec![0; 64], 1).unwrap();
    let r = expect(&mut [&mut a, &mut b], 1, 1);
    assert!(r.flags.contains(Flags::TAGGED | Flags::RECV));
    assert_eq!(&r.buf.unwrap()[..8], &pattern(8, 1)[..]);
}

/// One counter of the endpoint's (`counters`), 0 when it has none.
fn counter(n: &Node, name: &str) -> u64 {
    n.ep.counters()
        .unwrap()
        .into_iter()
        .find(|(k, _)| *k == name)
        .map_or(0, |(_, v)| v)
}

#[test]
fn what_unexpected_messages_hold_is_counted_and_given_back() {
    // Every transport counts its unexpected messages the same way (core's
    // receives): entries, eager payload bytes, and their memory; all back to
    // zero once received. A rendezvous request holds no payload.
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let big = test_attr().rndv_threshold + 1;
    a.ep.tsend(pb, 1, pattern(1000, 1), 101).unwrap();
    a.ep.tsend(pb, 2, pattern(big, 2), 102).unwrap();
    drive(&mut [&mut a, &mut b], "both messages held by the receiver", |ns| {
        counter(ns[1], "unexpected_entries") == 2
    });
    assert_eq!(counter(&b, "unexpected_bytes"), 1000, "eager payload only");
    let memory = counter(&b, "unexpected_memory");
    assert!(
        memory >= 1000 + 2 * 64,
        "entries cost more than their payload: {memory}"
    );
    b.ep.trecv(ANY, 2, 0, vec![0; big], 2).unwrap();
    b.ep.trecv(ANY, 1, 0, vec![0; 1000], 1).unwrap();
    for (ctx, len) in [(1u64, 1000usize), (2, big)] {
        let r = expect(&mut [&mut a, &mut b], 1, ctx);
        assert_eq!(r.result, Ok(()));
        assert_eq!(r.buf.unwrap(), pattern(len, ctx));
    }
    for name in ["unexpected_entries", "unexpected_bytes", "unexpected_memory"] {
        assert_eq!(counter(&b, name), 0, "{name} after both were received");
    }
}

#[test]
fn a_small_poll_array_takes_completions_in_the_order_they_were_produced() {
    // Completions a poll produces go straight into its array, and what does
    // not fit waits in the queue: a later poll must hand those out first,
    // then what it produces itself, in order (decision 71). Two waves: the
    // second arrives while the first still waits in the queue.
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let wave = 20u64;
    for i in 0..2 * wave {
        b.ep.recv(ANY, vec![0; 64], i).unwrap();
    }
    let (mut received, mut sent) = (Vec::new(), Vec::new());
    let take = |node: &mut Node, width: usize, received: &mut Vec<u64>, sent: &mut Vec<u64>| {
        let mut out = vec![xfer::Completion::EMPTY; width];
        let got = node.cq.poll(&mut out).expect("poll");
        assert!(got <= width);
        for c in &out[..got] {
            assert_eq!(c.result, Ok(()));
            if c.flags.contains(Flags::RECV) {
                assert_eq!(&c.buf.as_deref().unwrap()[..c.len], &pattern(16, c.context)[..]);
                received.push(c.context);
            } else {
                sent.push(c.context - 1_000);
            }
        }
        got
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    for w in 0..2 {
        for i in w * wave..(w + 1) * wave {
            a.ep.send(pb, pattern(16, i), 1_000 + i).unwrap();
        }
        // The sender writes what its burst held back (and, first, connects);
        // one receive completion comes out, the rest of the wave stays queued.
        while take(&mut b, 1, &mut received, &mut sent) == 0 {
            assert!(std::time::Instant::now() < deadline, "wave {w} never arrived");
            take(&mut a, 64, &mut received, &mut sent);
        }
    }
    for (width, i) in [1usize, 3, 2, 5].into_iter().cycle().zip(0u32..) {
        if received.len() == 2 * wave as usize && sent.len() == 2 * wave as usize {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "completions missing: {received:?} {sent:?}"
        );
        let node = if i % 2 == 0 { &mut b } else { &mut a };
        take(node, width, &mut received, &mut sent);
    }
    let order: Vec<u64> = (0..2 * wave).collect();
    assert_eq!(received, order, "receive completions out of order");
    assert_eq!(sent, order, "send completions out of order");
}

#[test]
fn poll_alone_drives_its_endpoint_and_not_the_others_of_its_queue() {
    // `Endpoint::poll_alone` (the libfabric plug-in's poll: one queue per
    // endpoint there) progresses its own endpoint only: with two endpoints
    // on one queue, the other one's receive stays pending until it is
    // polled itself, and what each poll reports is its own.
    let p = Node::new();
    let domain = xfer::open_default().expect("open domain");
    let cq = domain.cq(&xfer::CqAttr::default()).expect("open cq");
    let av = domain.av().expect("open av");
    let a = domain.endpoint(&cq, &av, &test_attr()).expect("endpoint a");
    let b = domain.endpoint(&cq, &av, &test_attr()).expect("endpoint b");
    let (pa, pb) = (
        p.av.insert(a.name().as_bytes()).unwrap(),
        p.av.insert(b.name().as_bytes()).unwrap(),
    );
    a.recv(ANY, vec![0; 64], 1).unwrap();
    b.recv(ANY, vec![0; 64], 2).unwrap();
    p.ep.send(pa, pattern(16, 1), 11).unwrap();
    p.ep.send(pb, pattern(16, 2), 12).unwrap();
    let mut out = vec![xfer::Completion::EMPTY; 16];
    let mut poll = |ep: &xfer::Endpoint, context: u64| {
        let deadline = std::time::Instant::now() + common::DEADLINE;
        loop {
            let n = ep.poll_alone(&mut out).expect("poll_alone");
            for c in &out[..n] {
                assert_eq!(c.context, context, "a completion of another endpoint: {c:?}");
                assert_eq!(c.result, Ok(()));
                assert_eq!(&c.buf.as_deref().unwrap()[..c.len], &pattern(16, context)[..]);
            }
            if n > 0 {
                return;
            }
            let mut sent = [xfer::Completion::EMPTY; 4];
            p.cq.poll(&mut sent).expect("poll the sender");
            assert!(std::time::Instant::now() < deadline, "receive {context} never came");
        }
    };
    poll(&a, 1);
    poll(&b, 2);
    assert_eq!(cq.poll(&mut out).expect("poll the queue"), 0, "nothing left");
}

#[test]
fn tag_masks_select_messages() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    // Receives: exact 0x1234, then anything with high byte 0xAB, then anything.
    b.ep.trecv(ANY, 0x1234, 0, vec![0; 8], 1).unwrap();
    b.ep.trecv(ANY, 0xAB00, 0xFF, vec![0; 8], 2).unwrap();
    b.ep.trecv(ANY, 0, u64::MAX, vec![0; 8], 3).unwrap();
    a.ep.tsend(pb, 0xAB42, b"masked".to_vec(), 10).unwrap();
    a.ep.tsend(pb, 0x9999, b"wild".to_vec(), 11).unwrap();
    a.ep.tsend(pb, 0x1234, b"exact".to_vec(), 12).unwrap();
    let r2 = expect(&mut [&mut a, &mut b], 1, 2);
    assert_eq!((r2.tag, &r2.buf.unwrap()[..r2.len]), (0xAB42, &b"masked"[..]));
    let r3 = expect(&mut [&mut a, &mut b], 1, 3);
    assert_eq!((r3.tag, &r3.buf.unwrap()[..r3.len]), (0x9999, &b"wild"[..]));
    let r1 = expect(&mut [&mut a, &mut b], 1, 1);
    assert_eq!((r1.tag, &r1.buf.unwrap()[..r1.len]), (0x1234, &b"exact"[..]));
}

#[test]
fn directed_and_any_source_receives_match_in_post_order() {
    let (mut a, mut b, mut c) = (Node::new(), Node::new(), Node::new());
    let pc_from_a = a.add(&c);
    let pc_from_b = b.add(&c);
    let pa = c.add(&a);
    let pb = c.add(&b);
    // Directed to B first, then any-source, then directed to A.
    c.ep.trecv(pb, 5, 0, vec![0; 16], 1).unwrap();
    c.ep.trecv(ANY, 5, 0, vec![0; 16], 2).unwrap();
    c.ep.trecv(pa, 5, 0, vec![0; 16], 3).unwrap();
    a.ep.tsend(pc_from_a, 5, b"from a 1".to_vec(), 0).unwrap();
    let r = expect(&mut [&mut a, &mut b, &mut c], 2, 2);
    assert_eq!(
        (r.src, &r.buf.unwrap()[..8]),
        (pa, &b"from a 1"[..]),
        "any-source was posted before directed-to-A"
    );
    a.ep.tsend(pc_from_a, 5, b"from a 2".to_vec(), 0).unwrap();
    let r = expect(&mut [&mut a, &mut b, &mut c], 2, 3);
    assert_eq!(r.src, pa);
    b.ep.tsend(pc_from_b, 5, b"from b 1".to_vec(), 0).unwrap();
    let r = expect(&mut [&mut a, &mut b, &mut c], 2, 1);
    assert_eq!((r.src, &r.buf.unwrap()[..8]), (pb, &b"from b 1"[..]));
}

#[test]
fn unexpected_messages_wait_for_their_receive() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let big = test_attr().rndv_threshold * 4;
    a.ep.tsend(pb, 1, pattern(100, 1), 101).unwrap();
    a.ep.tsend(pb, 2, pattern(big, 2), 102).unwrap();
    a.ep.tsend(pb, 1, pattern(100, 3), 103).unwrap();
    // Let everything arrive before any receive exists.
    drive(&mut [&mut a, &mut b], "eager sends", |ns| ns[0].done.len() >= 2);
    for _ in 0..100 {
        b.poll();
    }
    assert!(b.done.is_empty(), "nothing completes without a receive");
    b.ep.trecv(ANY, 2, 0, vec![0; big], 2).unwrap();
    b.ep.trecv(ANY, 1, 0, vec![0; 100], 1).unwrap();
    b.ep.trecv(ANY, 1, 0, vec![0; 100], 3).unwrap();
    for (ctx, size) in [(2, big), (1, 100), (3, 100)] {
        let r = expect(&mut [&mut a, &mut b], 1, ctx);
        assert_eq!(r.result, Ok(()));
        assert_eq!(r.buf.unwrap(), pattern(size, ctx), "message {ctx}");
    }
    let s = expect(&mut [&mut a, &mut b], 0, 102);
    assert_eq!(s.result, Ok(()), "rendezvous send completes once received");
}

fn check_truncation(size: usize) {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let mut landing = vec![0xAAu8; 64];
    // SAFETY: `landing` outlives the receive, which completes below, and is
    // not touched until then.
    let buf = unsafe { Buffer::raw(landing.as_mut_ptr(), 10) };
    let op = RecvOp {
        spec: RecvSpec {
            src: ANY,
            tag: 9,
            ignore: 0,
        },
        tagged: true,
        buf,
        context: 1,
    };
    b.ep.post_recv(op).unwrap();
    a.ep.tsend(pb, 9, pattern(size, 5), 2).unwrap();
    let r = expect(&mut [&mut a, &mut b], 1, 1);
    assert_eq!(r.result, Err(Error::Truncated { len: 10, olen: size }));
    assert_eq!(r.len, 10);
    assert!(r.buf.is_none(), "raw buffers do not come back");
    assert_eq!(&landing[..10], &pattern(size, 5)[..10]);
    assert!(
        landing[10..].iter().all(|&b| b == 0xAA),
        "nothing written past the receive buffer"
    );
    let s = expect(&mut [&mut a, &mut b], 0, 2);
    assert_eq!(
        s.result,
        Ok(()),
        "the sender is not blamed for the receiver's short buffer"
    );
    // The connection survives: the next message arrives intact.
    b.ep.trecv(ANY, 9, 0, vec![0; 4], 3).unwrap();
    a.ep.tsend(pb, 9, b"next".to_vec(), 4).unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 1, 3).buf.unwrap(), b"next");
}

#[test]
fn truncation_eager_reports_both_lengths() {
    check_truncation(100);
}

/// The largest eager message cannot arrive in one read: truncation must
/// hold across reads (a receive buffer shorter than what already came).
#[test]
fn truncation_largest_eager_reports_both_lengths() {
    check_truncation(test_attr().rndv_threshold);
}

#[test]
fn truncation_rendezvous_reports_both_lengths() {
    check_truncation(test_attr().rndv_threshold * 2);
}

#[test]
fn zero_length_messages() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    b.ep.recv(ANY, Vec::new(), 1).unwrap();
    b.ep.trecv(ANY, 3, 0, vec![0; 32], 2).unwrap();
    a.ep.send(pb, Vec::new(), 3).unwrap();
    a.ep.tsend(pb, 3, Vec::new(), 4).unwrap();
    let r = expect(&mut [&mut a, &mut b], 1, 1);
    assert_eq!((r.result, r.len), (Ok(()), 0));
    let r = expect(&mut [&mut a, &mut b], 1, 2);
    assert_eq!((r.result, r.len, r.tag), (Ok(()), 0, 3));
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 4).result, Ok(()));
}

#[test]
fn sixteen_mib_message_content_verified() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let size = 16 << 20;
    b.ep.trecv(ANY, 16, 0, vec![0; size], 1).unwrap();
    a.ep.tsend(pb, 16, pattern(size, 16), 2).unwrap();
    let r = expect(&mut [&mut a, &mut b], 1, 1);
    assert_eq!((r.result.clone(), r.len), (Ok(()), size));
    assert!(r.buf.unwrap() == pattern(size, 16), "16 MiB content differs");
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 2).result, Ok(()));
}

#[test]
fn thousands_of_outstanding_operations() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let n = 5000u64;
    for i in 0..n {
        b.ep.trecv(ANY, i, 0, vec![0; 256], i).unwrap();
    }
    for i in 0..n {
        a.ep.tsend(pb, i, pattern(256, i), n + i).unwrap();
    }
    drive(&mut [&mut a, &mut b], "5000 receives and sends", |ns| {
        ns[0].done.len() == n as usize && ns[1].done.len() == n as usize
    });
    for c in b.done.drain(..) {
        assert_eq!(c.result, Ok(()));
        assert_eq!(c.buf.unwrap(), pattern(256, c.context), "message {}", c.context);
    }
    assert!(a.done.iter().all(|c| c.result.is_ok()));
}

#[test]
fn immediate_data_arrives_with_the_message() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    for (ctx, size) in [(1u64, 16usize), (2, test_attr().rndv_threshold + 1)] {
        b.ep.trecv(ANY, 0, 0, vec![0; size], ctx).unwrap();
        let op = SendOp {
            peer: pb,
            tag: Some(0),
            data: Some(0xDA7A_0000 + ctx),
            buf: pattern(size, ctx).into(),
            context: 10 + ctx,
            completion: true,
            level: Default::default(),
        };
        a.ep.post_send(op).unwrap();
        let r = expect(&mut [&mut a, &mut b], 1, ctx);
        assert!(r.flags.contains(Flags::REMOTE_CQ_DATA));
        assert_eq!(r.data, 0xDA7A_0000 + ctx);
        assert_eq!(r.buf.unwrap(), pattern(size, ctx));
    }
}

#[test]
fn inject_needs_no_completion_and_respects_its_limit() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    b.ep.trecv(ANY, 4, 0, vec![0; 64], 1).unwrap();
    let mut payload = pattern(64, 4);
    a.ep.tinject(pb, 4, &payload).unwrap();
    payload.fill(0); // reusable at once
    let r = expect(&mut [&mut a, &mut b], 1, 1);
    assert_eq!(r.buf.unwrap(), pattern(64, 4));
    assert!(a.done.is_empty(), "inject reports no completion");
    let too_big = vec![0; test_attr().inject_size + 1];
    assert!(matches!(a.ep.tinject(pb, 4, &too_big), Err(Error::InvalidArgument(_))));
}

#[test]
fn inject_with_immediate_data_delivers_it() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let pa = b.add(&a);
    b.ep.recv(ANY, vec![0; 64], 1).unwrap();
    b.ep.trecv(ANY, 6, 0, vec![0; 64], 2).unwrap();
    let mut payload = pattern(48, 6);
    a.ep.inject_data(pb, &payload, 0xDA7A_0001).unwrap();
    payload.fill(0); // reusable at once
    a.ep.tinject_data(pb, 6, &pattern(32, 7), 0xDA7A_0002).unwrap();
    a.ep.tinject_data(pb, 6, &[], 0xDA7A_0003).unwrap();
    b.ep.trecv(ANY, 6, 0, vec![0; 64], 3).unwrap();
    let r = expect(&mut [&mut a, &mut b], 1, 1);
    assert_eq!(r.flags, Flags::RECV | Flags::MSG | Flags::REMOTE_CQ_DATA);
    assert_eq!((r.data, r.len, r.src), (0xDA7A_0001, 48, pa));
    assert_eq!(&r.buf.unwrap()[..48], &pattern(48, 6)[..]);
    let r = expect(&mut [&mut a, &mut b], 1, 2);
    assert_eq!(r.flags, Flags::RECV | Flags::TAGGED | Flags::REMOTE_CQ_DATA);
    assert_eq!((r.data, r.len, r.tag), (0xDA7A_0002, 32, 6));
    assert_eq!(&r.buf.unwrap()[..32], &pattern(32, 7)[..]);
    let r = expect(&mut [&mut a, &mut b], 1, 3);
    assert_eq!((r.result, r.data, r.len), (Ok(()), 0xDA7A_0003, 0));
    assert!(a.done.is_empty(), "inject reports no completion");
    let too_big = vec![0; test_attr().inject_size + 1];
    assert!(matches!(
        a.ep.inject_data(pb, &too_big, 1),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(
        a.ep.tinject_data(PeerAddr(999), 6, &[1], 1),
        Err(Error::AddressNotAvailable)
    );
}

#[test]
fn selective_completion_reports_only_what_was_asked() {
    let mut attr = test_attr();
    attr.selective_completion = true;
    let (mut a, mut b) = (Node::with_attr(&attr), Node::new());
    let pb = a.add(&b);
    for ctx in [1u64, 2] {
        b.ep.trecv(ANY, 0, 0, vec![0; 8], ctx).unwrap();
    }
    let quiet = SendOp {
        peer: pb,
        tag: Some(0),
        data: None,
        buf: vec![1; 8].into(),
        context: 11,
        completion: false,
        level: Default::default(),
    };
    let loud = SendOp {
        peer: pb,
        tag: Some(0),
        data: None,
        buf: vec![2; 8].into(),
        context: 12,
        completion: true,
        level: Default::default(),
    };
    a.ep.post_send(quiet).unwrap();
    a.ep.post_send(loud).unwrap();
    expect(&mut [&mut a, &mut b], 1, 2);
    expect(&mut [&mut a, &mut b], 0, 12);
    assert!(a.take(11).is_none(), "a send without a completion request reported one");
}

#[test]
fn cancel_ends_a_posted_receive() {
    let mut a = Node::new();
    a.ep.trecv(ANY, 1, 0, vec![0; 8], 77).unwrap();
    a.ep.cancel(77).unwrap();
    let r = expect(&mut [&mut a], 0, 77);
    assert_eq!(r.result, Err(Error::Canceled));
    assert_eq!(r.buf.unwrap().len(), 8, "the buffer comes back");
    // Nothing to cancel: ENOENT, as fi_cancel.
    let again = a.ep.cancel(77).unwrap_err();
    assert!(matches!(again, Error::NotFound(_)), "{again:?}");
    assert_eq!(again.code(), -libc::ENOENT);
    assert!(matches!(a.ep.cancel(12345), Err(Error::NotFound(_))), "never posted");
    // A receive that already matched cannot be cancelled either.
    let self_addr = a.add(&a);
    a.ep.recv(ANY, vec![0; 8], 78).unwrap();
    a.ep.send(self_addr, b"x".to_vec(), 79).unwrap();
    expect(&mut [&mut a], 0, 78);
    assert!(matches!(a.ep.cancel(78), Err(Error::NotFound(_))));
    assert!(
        a.done.iter().all(|c| c.context == 79),
        "no completion for a failed cancel"
    );
}

#[test]
fn simultaneous_first_sends_both_arrive() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let pa = b.add(&a);
    a.ep.trecv(ANY, 0, 0, vec![0; 5], 1).unwrap();
    b.ep.trecv(ANY, 0, 0, vec![0; 5], 1).unwrap();
    a.ep.tsend(pb, 0, b"a->b!".to_vec(), 2).unwrap();
    b.ep.tsend(pa, 0, b"b->a!".to_vec(), 2).unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 1).buf.unwrap(), b"b->a!");
    assert_eq!(expect(&mut [&mut a, &mut b], 1, 1).buf.unwrap(), b"a->b!");
}

/// Messages that arrived before their sender was inserted into the address
/// vector match receives directed at it once it is (MPI inserts lazily too).
#[test]
fn directed_receive_matches_messages_from_a_sender_inserted_later() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let threshold = test_attr().rndv_threshold;
    a.ep.tsend(pb, 4, pattern(16, 1), 1).unwrap();
    a.ep.tsend(pb, 4, pattern(threshold * 2, 2), 2).unwrap();
    a.ep.send(pb, pattern(8, 3), 3).unwrap();
    drive(&mut [&mut a, &mut b], "sends handed over", |ns| ns[0].done.len() >= 2);
    for _ in 0..100 {
        b.poll();
    }
    let pa = b.add(&a);
    b.ep.trecv(pa, 4, 0, vec![0; 16], 10).unwrap();
    b.ep.trecv(pa, 4, 0, vec![0; threshold * 2], 11).unwrap();
    b.ep.recv(pa, vec![0; 8], 12).unwrap();
    for (ctx, seed, len) in [(10, 1, 16), (11, 2, threshold * 2), (12, 3, 8)] {
        let r = expect(&mut [&mut a, &mut b], 1, ctx);
        assert_eq!(r.result, Ok(()), "receive {ctx}");
        assert_eq!(r.src, pa, "receive {ctx} reports the sender's handle");
        assert_eq!(r.buf.unwrap(), pattern(len, seed));
    }
}

#[test]
fn unknown_sender_is_reported_as_unspec() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    b.ep.trecv(ANY, 0, 0, vec![0; 4], 1).unwrap();
    a.ep.tsend(pb, 0, b"anon".to_vec(), 2).unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 1, 1).src, PeerAddr::UNSPEC);
}

/// With `source_err` (libfabric's `FI_SOURCE_ERR`), messages from a sender
/// not in the address vector complete with `UnknownSource` carrying its
/// name, data delivered: eager and rendezvous, posted before they arrived
/// and arrived unexpected; inserting that name gives the handle a later
/// message reports. A truncated message reports its truncation.
#[test]
fn unknown_sender_is_named_with_source_err() {
    let mut attr = test_attr();
    attr.source_err = true;
    let (mut a, mut b) = (Node::new(), Node::with_attr(&attr));
    let pb = a.add(&b);
    let big = test_attr().rndv_threshold * 2;
    let name = Err(Error::UnknownSource(Box::new(a.ep.name())));
    b.ep.trecv(ANY, 1, 0, vec![0; 8], 1).unwrap();
    b.ep.trecv(ANY, 2, 0, vec![0; big], 2).unwrap();
    a.ep.tsend(pb, 1, pattern(8, 1), 11).unwrap();
    a.ep.tsend(pb, 2, pattern(big, 2), 12).unwrap();
    for (ctx, len) in [(1, 8), (2, big)] {
        let r = expect(&mut [&mut a, &mut b], 1, ctx);
        assert_eq!(r.result, name, "posted receive {ctx}");
        assert_eq!(
            (r.src, r.tag, r.len),
            (PeerAddr::UNSPEC, ctx, len),
            "posted receive {ctx}"
        );
        assert_eq!(r.buf.unwrap(), pattern(len, ctx), "posted receive {ctx} delivered");
    }
    a.ep.tsend(pb, 3, pattern(8, 3), 13).unwrap();
    a.ep.tsend(pb, 4, pattern(big, 4), 14).unwrap();
    a.ep.tsend(pb, 5, pattern(16, 5), 15).unwrap();
    drive(&mut [&mut a, &mut b], "three messages held unexpected", |ns| {
        counter(ns[1], "unexpected_entries") == 3
    });
    b.ep.trecv(ANY, 3, 0, vec![0; 8], 3).unwrap();
    b.ep.trecv(ANY, 4, 0, vec![0; big], 4).unwrap();
    for (ctx, len) in [(3, 8), (4, big)] {
        let r = expect(&mut [&mut a, &mut b], 1, ctx);
        assert_eq!(r.result, name, "unexpected message {ctx}");
        assert_eq!((r.tag, r.len), (ctx, len), "unexpected message {ctx}");
        assert_eq!(r.buf.unwrap(), pattern(len, ctx), "unexpected message {ctx} delivered");
    }
    b.ep.trecv(ANY, 5, 0, vec![0; 4], 5).unwrap();
    let r = expect(&mut [&mut a, &mut b], 1, 5);
    assert_eq!(r.result, Err(Error::Truncated { len: 4, olen: 16 }));
    let Err(Error::UnknownSource(from)) = name else {
        unreachable!()
    };
    let pa = b.av.insert(from.as_bytes()).unwrap();
    b.ep.trecv(ANY, 6, 0, vec![0; 8], 6).unwrap();
    a.ep.tsend(pb, 6, pattern(8, 6), 16).unwrap();
    let r = expect(&mut [&mut a, &mut b], 1, 6);
    assert_eq!((r.result, r.src), (Ok(()), pa), "the inserted sender");
}

#[test]
fn bad_api_input_is_refused_without_losing_the_buffer() {
    let a = Node::new();
    assert!(a.av.insert(b"\x01garbage").is_err());
    assert!(a.av.insert(&[]).is_err());
    assert!(a.av.insert(&[0u8; 64]).is_err());
    let rejected = a.ep.tsend(PeerAddr(12345), 0, b"keep me".to_vec(), 1).unwrap_err();
    assert_eq!(rejected.error, Error::AddressNotAvailable);
    assert_eq!(rejected.op, b"keep me");
    // Objects of another domain are refused.
    let other = xfer::open_default().unwrap();
    let foreign_cq = other.cq(&xfer::CqAttr::default()).unwrap();
    assert!(a.domain.endpoint(&foreign_cq, &a.av, &test_attr()).is_err());
}

#[test]
fn send_to_a_closed_endpoint_fails_and_others_keep_working() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let dead = {
        let gone = Node::new();
        a.add(&gone)
    };
    a.ep.tsend(dead, 0, vec![1; 10], 1).unwrap();
    a.ep.tsend(dead, 0, vec![1; test_attr().rndv_threshold + 10], 2)
        .unwrap();
    for ctx in [1, 2] {
        let s = expect(&mut [&mut a], 0, ctx);
        assert!(matches!(s.result, Err(Error::PeerUnreachable { .. })), "{:?}", s.result);
        assert!(s.buf.is_some(), "the buffer comes back with the error");
    }
    let pb = a.add(&b);
    b.ep.trecv(ANY, 0, 0, vec![0; 2], 1).unwrap();
    a.ep.tsend(pb, 0, b"ok".to_vec(), 3).unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 1, 1).buf.unwrap(), b"ok");
}

#[test]
fn closing_an_endpoint_cancels_its_operations() {
    let a = Node::new();
    let b = Node::new();
    let pb = a.add(&b);
    a.ep.trecv(ANY, 1, 0, vec![0; 8], 1).unwrap();
    a.ep.tsend(pb, 0, vec![0; test_attr().rndv_threshold * 2], 2).unwrap(); // waits for a clear-to-send
    let cq = a.cq.clone();
    drop(a.ep);
    let mut out = vec![xfer::Completion::EMPTY; 8];
    let mut got = Vec::new();
    while got.len() < 2 {
        let n = cq.wait(&mut out, Some(common::DEADLINE)).expect("cancellations arrive");
        got.extend(out[..n].iter().cloned());
    }
    assert!(got.iter().all(|c| c.result.is_err() && c.buf.is_some()), "{got:?}");
}

#[test]
fn cq_wait_times_out_and_trywait_tells_readiness() {
    let a = Node::new();
    let mut out = vec![xfer::Completion::EMPTY; 1];
    let t = std::time::Instant::now();
    assert_eq!(
        a.cq.wait(&mut out, Some(std::time::Duration::from_millis(50))),
        Err(Error::TimedOut)
    );
    assert!(t.elapsed() >= std::time::Duration::from_millis(50));
    assert_eq!(a.cq.trywait(), Ok(()));
    // A message to ourselves makes the queue ready.
    let me = a.av.insert(a.ep.name().as_bytes()).unwrap();
    a.ep.trecv(ANY, 0, 0, vec![0; 1], 2).unwrap();
    a.ep.tsend(me, 0, vec![1], 1).unwrap();
    let n = a.cq.wait(&mut out, Some(common::DEADLINE)).unwrap();
    assert_eq!(n, 1);
}

/// A queue that was only busy-polled so far can still be blocked on: its
/// descriptor becomes readable when a message for a bound endpoint arrives.
#[test]
fn cq_fd_wakes_a_blocked_caller_after_busy_polling() {
    let mut a = Node::new();
    let name = a.ep.name();
    for _ in 0..10 {
        a.poll();
    }
    a.ep.trecv(ANY, 7, 0, vec![0; 8], 1).unwrap();
    let sender = std::thread::spawn(move || {
        let mut b = Node::new();
        let pa = b.av.insert(name.as_bytes()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        b.ep.tsend(pa, 7, pattern(8, 7), 2).unwrap();
        expect(&mut [&mut b], 0, 2).result
    });
    assert_eq!(a.cq.trywait(), Ok(()), "nothing has arrived yet");
    assert!(
        wait_readable(a.cq.fd(), common::DEADLINE),
        "the descriptor became readable"
    );
    assert_eq!(expect(&mut [&mut a], 0, 1).buf.unwrap(), pattern(8, 7));
    assert_eq!(sender.join().unwrap(), Ok(()));
}

/// A connection busy-polled through a long exchange (long enough for the TCP
/// provider to read it without epoll, decision 57) still wakes a caller that
/// then blocks: through `wait`, and through the descriptor after `trywait`.
#[test]
fn blocking_after_a_long_busy_polled_exchange_still_wakes() {
    const ROUNDS: u64 = 300;
    let mut a = Node::new();
    let name = a.ep.name();
    let (tx, rx) = std::sync::mpsc::channel();
    let peer = std::thread::spawn(move || {
        let mut b = Node::new();
        let pa = b.av.insert(name.as_bytes()).unwrap();
        tx.send(b.ep.name()).unwrap();
        // Echo ROUNDS messages, busy-polled on both sides.
        for i in 0..ROUNDS {
            b.ep.trecv(pa, 1, 0, vec![0; 8], 2 * i).unwrap();
            let got = expect(&mut [&mut b], 0, 2 * i);
            b.ep.tsend(pa, 1, got.buf.unwrap(), 2 * i + 1).unwrap();
        }
        // Then two messages, each after the other side has blocked.
        for i in 0..2 {
            std::thread::sleep(std::time::Duration::from_millis(150));
            b.ep.tsend(pa, 2, pattern(8, i), 10_000 + i).unwrap();
            expect(&mut [&mut b], 0, 10_000 + i);
        }
        drive(&mut [&mut b], "echo send completions", |ns| {
            ns[0].done.len() >= ROUNDS as usize
        });
    });
    let pb = a.av.insert(rx.recv().unwrap().as_bytes()).unwrap();
    for i in 0..ROUNDS {
        a.ep.trecv(pb, 1, 0, vec![0; 8], 2 * i).unwrap();
        a.ep.tsend(pb, 1, pattern(8, i), 2 * i + 1).unwrap();
        assert_eq!(expect(&mut [&mut a], 0, 2 * i).buf.unwrap(), pattern(8, i));
    }
    let mut out = vec![xfer::Completion::EMPTY; 4];
    let mut wait_for = |a: &mut Node, ctx: u64, by_fd: bool| loop {
        if let Some(c) = a.take(ctx) {
            return c;
        }
        if by_fd {
            if a.cq.trywait() == Ok(()) {
                assert!(
                    wait_readable(a.cq.fd(), common::DEADLINE),
                    "the descriptor became readable"
                );
            }
            a.poll();
        } else {
            let n =
                a.cq.wait(&mut out, Some(common::DEADLINE))
                    .expect("woken before the deadline");
            a.done.extend(out[..n].iter_mut().map(std::mem::take));
        }
    };
    a.ep.trecv(pb, 2, 0, vec![0; 8], 20_000).unwrap();
    assert_eq!(wait_for(&mut a, 20_000, false).buf.unwrap(), pattern(8, 0));
    a.ep.trecv(pb, 2, 0, vec![0; 8], 20_001).unwrap();
    assert_eq!(wait_for(&mut a, 20_001, true).buf.unwrap(), pattern(8, 1));
    peer.join().unwrap();
}

// ---- RMA -------------------------------------------------------------------

/// What a peer would get: the region's key packed to bytes and unpacked.
fn rkey_of(mr: &MemoryRegion) -> RemoteKey {
    RemoteKey::unpack(&mr.pack_rkey()).expect("unpack our own key")
}

/// `rkey` with another remote key value (a key the target never issued).
fn forged(rkey: &RemoteKey) -> RemoteKey {
    let mut bytes = rkey.pack();
    bytes[24..32].copy_from_slice(&(rkey.key() ^ 0x5a5a_0000_0000_0000).to_le_bytes());
    RemoteKey::unpack(&bytes).unwrap()
}

/// After a refused RMA: the connection still carries a message both ways.
fn connection_still_works(a: &mut Node, b: &mut Node, ctx: u64) {
    let pb = a.add(b);
    b.ep.recv(ANY, vec![0; 8], ctx).unwrap();
    a.ep.send(pb, b"still ok".to_vec(), ctx + 1).unwrap();
    let r = expect(&mut [a, b], 1, ctx);
    assert_eq!((r.result, &r.buf.unwrap()[..]), (Ok(()), &b"still ok"[..]));
    assert_eq!(expect(&mut [a, b], 0, ctx + 1).result, Ok(()));
}

/// Expects completion `ctx` on `a` to be a remote-access error (-FI_EACCES).
fn expect_refused(a: &mut Node, b: &mut Node, ctx: u64, kind: Flags) {
    let c = expect(&mut [a, b], 0, ctx);
    assert!(matches!(c.result, Err(Error::RemoteAccess(_))), "{:?}", c.result);
    assert_eq!(c.result.unwrap_err().code(), -13);
    assert!(c.flags.contains(Flags::RMA | kind));
}

#[test]
fn rma_write_and_read_all_sizes_content_checked() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    for (i, size) in [1usize, 4096, 1 << 20, 16 << 20].into_iter().enumerate() {
        let ctx = 10 * i as u64;
        let mr = b
            .domain
            .register(vec![0; size], Access::REMOTE_READ | Access::REMOTE_WRITE)
            .unwrap();
        assert_eq!(mr.len(), size);
        let rkey = rkey_of(&mr);
        assert_eq!(
            (rkey.addr(), rkey.len(), rkey.key()),
            (mr.addr(), size as u64, mr.key())
        );
        a.ep.write(pb, pattern(size, ctx), &rkey, 0, ctx).unwrap();
        let c = expect(&mut [&mut a, &mut b], 0, ctx);
        assert_eq!(c.result, Ok(()), "write of {size} B");
        assert!(c.flags.contains(Flags::RMA | Flags::WRITE));
        assert_eq!((c.len, c.buf.unwrap().len()), (size, size));
        assert!(
            mr.to_vec().unwrap() == pattern(size, ctx),
            "written content of {size} B"
        );
        mr.write_at(0, &pattern(size, ctx + 1)).unwrap();
        a.ep.read(pb, vec![0; size], &rkey, 0, ctx + 2).unwrap();
        let c = expect(&mut [&mut a, &mut b], 0, ctx + 2);
        assert_eq!(c.result, Ok(()), "read of {size} B");
        assert!(c.flags.contains(Flags::RMA | Flags::READ));
        assert!(c.buf.unwrap() == pattern(size, ctx + 1), "read content of {size} B");
        assert!(mr.into_inner().unwrap() == pattern(size, ctx + 1));
    }
    assert!(
        b.done.is_empty(),
        "plain RMA reports nothing at the target: {:?}",
        b.done
    );
}

#[test]
fn rma_at_an_offset_touches_only_its_range() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let mr = b.domain.register(vec![0xee; 4096], Access::all()).unwrap();
    let rkey = rkey_of(&mr);
    a.ep.write(pb, pattern(100, 3), &rkey, 1000, 1).unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 1).result, Ok(()));
    let mem = mr.to_vec().unwrap();
    assert!(mem[..1000].iter().all(|&x| x == 0xee));
    assert_eq!(&mem[1000..1100], &pattern(100, 3)[..]);
    assert!(mem[1100..].iter().all(|&x| x == 0xee));
    a.ep.read(pb, vec![0; 10], &rkey, 1095, 2).unwrap();
    let c = expect(&mut [&mut a, &mut b], 0, 2);
    assert_eq!(c.buf.unwrap(), [&pattern(100, 3)[95..], &[0xee; 5][..]].concat());
}

#[test]
fn rma_write_with_immediate_data_completes_at_the_target() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let pa = b.add(&a);
    let mr = b.domain.register(vec![0; 64 << 10], Access::REMOTE_WRITE).unwrap();
    let rkey = rkey_of(&mr);
    // A posted receive is not consumed by the immediate data.
    b.ep.recv(ANY, vec![0; 8], 77).unwrap();
    for (ctx, size) in [(1u64, 0usize), (2, 16), (3, 64 << 10)] {
        a.ep.write_data(pb, pattern(size, ctx), &rkey, 0, 0xDA7A + ctx, ctx)
            .unwrap();
        assert_eq!(expect(&mut [&mut a, &mut b], 0, ctx).result, Ok(()));
        let t = expect(&mut [&mut a, &mut b], 1, 0);
        assert_eq!(t.flags, Flags::RMA | Flags::REMOTE_WRITE | Flags::REMOTE_CQ_DATA);
        assert_eq!((t.data, t.len, t.src, t.result), (0xDA7A + ctx, size, pa, Ok(())));
        assert!(t.buf.is_none());
        assert_eq!(&mr.to_vec().unwrap()[..size], &pattern(size, ctx)[..]);
    }
    a.ep.send(pb, b"msg".to_vec(), 9).unwrap();
    let r = expect(&mut [&mut a, &mut b], 1, 77);
    assert_eq!(&r.buf.unwrap()[..3], b"msg", "the receive was still posted");
}

/// With `source_err`, the target's entry of a write with immediate data
/// from a writer not in its address vector is `UnknownSource` with the
/// writer's name; the bytes landed and the data came.
#[test]
fn rma_write_with_data_from_an_unknown_writer_names_it_with_source_err() {
    let mut attr = test_attr();
    attr.source_err = true;
    let (mut a, mut b) = (Node::new(), Node::with_attr(&attr));
    let pb = a.add(&b);
    let mr = b.domain.register(vec![0; 64], Access::REMOTE_WRITE).unwrap();
    a.ep.write_data(pb, pattern(16, 1), &rkey_of(&mr), 0, 0xDA7A, 1)
        .unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 1).result, Ok(()));
    let t = expect(&mut [&mut a, &mut b], 1, 0);
    assert_eq!(t.result, Err(Error::UnknownSource(Box::new(a.ep.name()))));
    assert_eq!((t.data, t.len, t.src), (0xDA7A, 16, PeerAddr::UNSPEC));
    assert_eq!(&mr.to_vec().unwrap()[..16], &pattern(16, 1)[..]);
}

#[test]
fn rma_zero_length_write_and_read() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let mr = b.domain.register(vec![7; 16], Access::all()).unwrap();
    let rkey = rkey_of(&mr);
    a.ep.write(pb, Vec::new(), &rkey, 16, 1).unwrap();
    a.ep.read(pb, Vec::new(), &rkey, 0, 2).unwrap();
    for ctx in [1, 2] {
        let c = expect(&mut [&mut a, &mut b], 0, ctx);
        assert_eq!((c.result, c.len), (Ok(()), 0));
    }
    let empty = b.domain.register(Vec::new(), Access::all()).unwrap();
    a.ep.write(pb, Vec::new(), &rkey_of(&empty), 0, 3).unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 3).result, Ok(()));
    assert_eq!(mr.to_vec().unwrap(), vec![7; 16]);
}

#[test]
fn rma_unknown_key_is_refused_and_the_connection_survives() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let mr = b.domain.register(pattern(4096, 1), Access::all()).unwrap();
    let bad = forged(&rkey_of(&mr));
    a.ep.write(pb, vec![0; 4096], &bad, 0, 1).unwrap();
    expect_refused(&mut a, &mut b, 1, Flags::WRITE);
    a.ep.read(pb, vec![0; 64], &bad, 0, 2).unwrap();
    expect_refused(&mut a, &mut b, 2, Flags::READ);
    // A key that was deregistered is unknown too.
    let gone = b.domain.register(vec![0; 64], Access::all()).unwrap();
    let gone_key = rkey_of(&gone);
    drop(gone);
    a.ep.write(pb, vec![1; 64], &gone_key, 0, 3).unwrap();
    expect_refused(&mut a, &mut b, 3, Flags::WRITE);
    assert_eq!(mr.to_vec().unwrap(), pattern(4096, 1));
    connection_still_works(&mut a, &mut b, 100);
    a.ep.write(pb, vec![9; 8], &rkey_of(&mr), 0, 4).unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 4).result, Ok(()));
}

#[test]
fn rma_out_of_bounds_is_refused_and_memory_untouched() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let mr = b.domain.register(pattern(4096, 2), Access::all()).unwrap();
    let rkey = rkey_of(&mr);
    a.ep.write(pb, vec![0; 16], &rkey, 4096 - 8, 1).unwrap();
    expect_refused(&mut a, &mut b, 1, Flags::WRITE);
    a.ep.write(pb, vec![0; 1], &rkey, 4096, 2).unwrap();
    expect_refused(&mut a, &mut b, 2, Flags::WRITE);
    a.ep.read(pb, vec![0; 4097], &rkey, 0, 3).unwrap();
    expect_refused(&mut a, &mut b, 3, Flags::READ);
    a.ep.read(pb, vec![0; 1], &rkey, u64::MAX - rkey.addr(), 4).unwrap();
    expect_refused(&mut a, &mut b, 4, Flags::READ);
    // A large refused write is read off the stream and discarded.
    a.ep.write(pb, vec![0; 2 << 20], &rkey, 1, 5).unwrap();
    expect_refused(&mut a, &mut b, 5, Flags::WRITE);
    assert_eq!(mr.to_vec().unwrap(), pattern(4096, 2));
    connection_still_works(&mut a, &mut b, 100);
}

#[test]
fn rma_read_needs_remote_read_and_write_needs_remote_write() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let write_only = b.domain.register(pattern(4096, 3), Access::REMOTE_WRITE).unwrap();
    let read_only = b
        .domain
        .register(pattern(4096, 4), Access::REMOTE_READ | Access::LOCAL_WRITE)
        .unwrap();
    a.ep.read(pb, vec![0; 4096], &rkey_of(&write_only), 0, 1).unwrap();
    expect_refused(&mut a, &mut b, 1, Flags::READ);
    a.ep.write(pb, vec![0; 4096], &rkey_of(&read_only), 0, 2).unwrap();
    expect_refused(&mut a, &mut b, 2, Flags::WRITE);
    a.ep.write_data(pb, vec![0; 8], &rkey_of(&read_only), 0, 5, 3).unwrap();
    expect_refused(&mut a, &mut b, 3, Flags::WRITE);
    assert!(b.done.is_empty(), "a refused write reports nothing at the target");
    assert_eq!(write_only.to_vec().unwrap(), pattern(4096, 3));
    assert_eq!(read_only.to_vec().unwrap(), pattern(4096, 4));
    connection_still_works(&mut a, &mut b, 100);
    // What each region does allow still works.
    a.ep.read(pb, vec![0; 4096], &rkey_of(&read_only), 0, 4).unwrap();
    let c = expect(&mut [&mut a, &mut b], 0, 4);
    assert_eq!((c.result, c.buf.unwrap()), (Ok(()), pattern(4096, 4)));
}

#[test]
fn rma_inject_write_needs_no_completion() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let mr = b.domain.register(vec![0; 256], Access::REMOTE_WRITE).unwrap();
    let rkey = rkey_of(&mr);
    // Refused silently: nothing comes back.
    a.ep.inject_write(pb, &[1; 8], &forged(&rkey), 0).unwrap();
    a.ep.inject_write(pb, &pattern(200, 5), &rkey, 56).unwrap();
    drive(&mut [&mut a, &mut b], "injected bytes", |_| {
        mr.to_vec().unwrap()[56..] == pattern(200, 5)[..]
    });
    let too_big = vec![0; test_attr().inject_size + 1];
    assert!(matches!(
        a.ep.inject_write(pb, &too_big, &rkey, 0),
        Err(Error::InvalidArgument(_))
    ));
    connection_still_works(&mut a, &mut b, 100);
    assert!(a.done.is_empty() && b.done.is_empty(), "{:?} {:?}", a.done, b.done);
}

#[test]
fn rma_inject_write_with_data_completes_only_at_the_target() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let pa = b.add(&a);
    let mr = b.domain.register(vec![0; 256], Access::REMOTE_WRITE).unwrap();
    let rkey = rkey_of(&mr);
    let mut payload = pattern(100, 8);
    a.ep.inject_write_data(pb, &payload, &rkey, 10, 0xDA7A_1234).unwrap();
    payload.fill(0); // reusable at once
    let t = expect(&mut [&mut a, &mut b], 1, 0);
    assert_eq!(t.flags, Flags::RMA | Flags::REMOTE_WRITE | Flags::REMOTE_CQ_DATA);
    assert_eq!((t.data, t.len, t.src, t.result), (0xDA7A_1234, 100, pa, Ok(())));
    assert_eq!(&mr.to_vec().unwrap()[10..110], &pattern(100, 8)[..]);
    assert!(a.done.is_empty(), "an inject-write reports nothing at the initiator");
    let too_big = vec![0; test_attr().inject_size + 1];
    assert!(matches!(
        a.ep.inject_write_data(pb, &too_big, &rkey, 0, 1),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        a.ep.inject_write_data(pb, &[1], &rkey, u64::MAX, 1),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn rma_keys_name_the_endpoint_provider() {
    let (a, b) = (Node::new(), Node::new());
    let mr = b.domain.register(vec![0; 64], Access::all()).unwrap();
    let rkey = rkey_of(&mr);
    assert_eq!(rkey.provider(), a.ep.provider_id());
    assert_eq!(a.ep.name().as_bytes()[0], a.ep.provider_id());
    assert_eq!(a.ep.remote_addr(&rkey, 5), Ok(rkey.addr() + 5));
    let other = RemoteKey::from_parts(a.ep.provider_id() ^ 0x40, rkey.addr(), rkey.len(), rkey.key()).unwrap();
    assert!(matches!(a.ep.remote_addr(&other, 0), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        a.ep.remote_addr(&rkey, u64::MAX),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn rma_bad_api_input_is_refused_with_the_buffer() {
    let (a, b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let mr = b.domain.register(vec![0; 64], Access::all()).unwrap();
    let mut bytes = mr.pack_rkey();
    bytes[3] = 0x7f; // another provider's key
    let other = RemoteKey::unpack(&bytes).unwrap();
    let r = a.ep.write(pb, vec![1, 2, 3], &other, 0, 1).unwrap_err();
    assert!(matches!(r.error, Error::InvalidArgument(_)));
    assert_eq!(r.op, vec![1, 2, 3]);
    let r = a.ep.read(pb, vec![4; 4], &rkey_of(&mr), u64::MAX, 2).unwrap_err();
    assert!(matches!(r.error, Error::InvalidArgument(_)));
    assert_eq!(r.op, vec![4; 4]);
    let r = a.ep.read(PeerAddr(999), vec![5], &rkey_of(&mr), 0, 3).unwrap_err();
    assert_eq!((r.error, r.op), (Error::AddressNotAvailable, vec![5]));
    let op = RmaOp {
        peer: pb,
        kind: RmaKind::Read,
        buf: vec![0; 4].into(),
        addr: mr.addr(),
        key: mr.key(),
        data: Some(1),
        context: 4,
        completion: true,
    };
    assert!(matches!(a.ep.post_rma(op), Err(r) if matches!(r.error, Error::InvalidArgument(_))));
    assert!(matches!(
        RemoteKey::unpack(&bytes[..10]),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn rma_raw_region_and_raw_buffers() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let mut target = vec![0u8; 1024];
    // SAFETY: `target` outlives the region (dropped below before `target`)
    // and is only reached through the region while it is registered.
    let mr = unsafe { b.domain.register_raw(target.as_mut_ptr(), target.len(), Access::all()) }.unwrap();
    let mut src = pattern(1024, 6);
    // SAFETY: `src` is not touched until the completion below.
    let buf = unsafe { Buffer::raw(src.as_mut_ptr(), src.len()) };
    let op = RmaOp {
        peer: pb,
        kind: RmaKind::Write,
        buf,
        addr: mr.addr(),
        key: mr.key(),
        data: None,
        context: 1,
        completion: true,
    };
    a.ep.post_rma(op).unwrap();
    let c = expect(&mut [&mut a, &mut b], 0, 1);
    assert_eq!((c.result, c.buf), (Ok(()), None));
    assert_eq!(mr.into_inner(), None, "a raw region owns no memory");
    assert_eq!(target, src);
}

/// The endpoint's registration-cache lookups (hits + misses), where its
/// provider has a cache (verbs); `None` elsewhere.
fn cache_lookups(n: &Node) -> Option<u64> {
    let c = n.ep.counters().unwrap();
    let get = |k: &str| c.iter().find(|(name, _)| *name == k).map(|&(_, v)| v);
    Some(get("mr_cache_hits")? + get("mr_cache_misses")?)
}

#[test]
fn region_buffers_are_the_local_side_of_rma_and_messages() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let (pb, pa) = (a.add(&b), b.add(&a));
    // Above the rendezvous threshold, so that messages too need registered
    // memory on verbs.
    let size = 1 << 20;
    let local = a.domain.register(pattern(size, 1), Access::all()).unwrap();
    let target = b
        .domain
        .register(vec![0; size], Access::REMOTE_READ | Access::REMOTE_WRITE)
        .unwrap();
    let inbox = b.domain.register(vec![0; size], Access::LOCAL_WRITE).unwrap();
    let rkey = rkey_of(&target);
    let before = (cache_lookups(&a), cache_lookups(&b));
    let rma = |buf, kind, context| RmaOp {
        peer: pb,
        kind,
        buf,
        addr: rkey.addr(),
        key: rkey.key(),
        data: None,
        context,
        completion: true,
    };

    // Write from the region, then read back into it.
    // SAFETY: `local` outlives the operation and is not touched until its
    // completion, which `expect` waits for.
    let buf = unsafe { local.buffer(0, size) }.unwrap();
    assert!(buf
        .local_desc()
        .is_some_and(|d| d.desc == local.desc() && d.key == local.key()));
    a.ep.post_rma(rma(buf, RmaKind::Write, 1)).unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 1).result, Ok(()));
    assert!(target.to_vec().unwrap() == pattern(size, 1), "written from the region");
    target.write_at(0, &pattern(size, 2)).unwrap();
    // SAFETY: as above.
    let buf = unsafe { local.buffer(0, size) }.unwrap();
    a.ep.post_rma(rma(buf, RmaKind::Read, 2)).unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 2).result, Ok(()));
    assert!(local.to_vec().unwrap() == pattern(size, 2), "read into the region");

    // A tagged message from one region into another.
    let recv = RecvOp {
        spec: RecvSpec {
            src: pa,
            tag: 9,
            ignore: 0,
        },
        tagged: true,
        // SAFETY: `inbox` outlives the receive, untouched until it completes.
        buf: unsafe { inbox.buffer(0, size) }.unwrap(),
        context: 3,
    };
    b.ep.post_recv(recv).unwrap();
    let send = SendOp {
        peer: pb,
        tag: Some(9),
        data: None,
        // SAFETY: as above.
        buf: unsafe { local.buffer(0, size) }.unwrap(),
        context: 4,
        completion: true,
        level: Default::default(),
    };
    a.ep.post_send(send).unwrap();
    let c = expect(&mut [&mut a, &mut b], 1, 3);
    assert_eq!((c.result, c.len, c.buf), (Ok(()), size, None));
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 4).result, Ok(()));
    assert!(inbox.to_vec().unwrap() == pattern(size, 2), "message between regions");

    // Verbs used the regions' keys, not its registration cache.
    assert_eq!((cache_lookups(&a), cache_lookups(&b)), before);

    // Ranges outside the region, and regions of another domain, are refused.
    // SAFETY: refused before any buffer is made.
    let e = unsafe { local.buffer(size - 1, 2) }.unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    let c = Node::new();
    let foreign = c.domain.register(vec![0; 64], Access::all()).unwrap();
    // SAFETY: the operation is refused at posting (checked below).
    let buf = unsafe { foreign.buffer(0, 64) }.unwrap();
    let r = a.ep.post_rma(rma(buf, RmaKind::Write, 5)).unwrap_err();
    assert!(matches!(r.error, Error::InvalidArgument(_)), "{:?}", r.error);
    connection_still_works(&mut a, &mut b, 10);
}

/// Anonymous memory of `len` bytes filled with `fill`, at `at` if given
/// (`MAP_FIXED_NOREPLACE`); `None` if `at` is taken.
fn map_filled(at: Option<usize>, len: usize, fill: u8) -> Option<usize> {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | at.map_or(0, |_| libc::MAP_FIXED_NOREPLACE);
    // SAFETY: a fresh anonymous mapping; with NOREPLACE nothing mapped is replaced.
    let p = unsafe {
        libc::mmap(
            at.unwrap_or(0) as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED || at.is_some_and(|a| a != p as usize) {
        return None;
    }
    // SAFETY: `p` is a writable mapping of `len` bytes that this test owns.
    unsafe { std::ptr::write_bytes(p as *mut u8, fill, len) };
    Some(p as usize)
}

/// Writes `len` bytes at `addr` (raw memory) to the start of `rkey`'s region.
fn write_from_raw(a: &mut Node, b: &mut Node, pb: PeerAddr, rkey: &RemoteKey, addr: usize, len: usize, ctx: u64) {
    // SAFETY: the mapping stays untouched and mapped until the completion
    // that `expect` waits for.
    let buf = unsafe { Buffer::raw(addr as *mut u8, len) };
    let op = RmaOp {
        peer: pb,
        kind: RmaKind::Write,
        buf,
        addr: rkey.addr(),
        key: rkey.key(),
        data: None,
        context: ctx,
        completion: true,
    };
    a.ep.post_rma(op).unwrap();
    assert_eq!(expect(&mut [a, b], 0, ctx).result, Ok(()));
}

/// The registration cache's classic corruption: memory freed and mapped
/// again at the same address must not be sent from a stale registration
/// (verbs pins pages at registration; TCP copies at send time).
#[test]
fn rma_from_memory_unmapped_and_mapped_again_sends_the_new_contents() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let len = 256 << 10;
    let target = b.domain.register(vec![0; len], Access::REMOTE_WRITE).unwrap();
    let rkey = rkey_of(&target);
    let addr = map_filled(None, len, 0xaa).expect("mmap");
    write_from_raw(&mut a, &mut b, pb, &rkey, addr, len, 1);
    assert!(target.to_vec().unwrap().iter().all(|&x| x == 0xaa));
    // Again from the same memory: a cache hit where there is a cache.
    write_from_raw(&mut a, &mut b, pb, &rkey, addr, len, 2);
    let before = cache_lookups(&a);

    // SAFETY: unmaps only the mapping made above, no longer in use.
    assert_eq!(unsafe { libc::munmap(addr as *mut libc::c_void, len) }, 0);
    let Some(again) = map_filled(Some(addr), len, 0x55) else {
        eprintln!("skipping the rest: {addr:#x} was taken by another thread between munmap and mmap");
        return;
    };
    write_from_raw(&mut a, &mut b, pb, &rkey, again, len, 3);
    assert!(
        target.to_vec().unwrap().iter().all(|&x| x == 0x55),
        "the old contents arrived: a stale registration was used"
    );
    if let Some(n) = before {
        assert_eq!(cache_lookups(&a), Some(n + 1), "the write went through the cache");
    }
    // SAFETY: the mapping is no longer in use.
    assert_eq!(unsafe { libc::munmap(again as *mut libc::c_void, len) }, 0);
}

#[test]
fn rma_region_dropped_mid_transfer_is_safe() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let size = 16 << 20;
    for (ctx, read) in [(1u64, false), (2, true)] {
        let mr = b.domain.register(vec![0; size], Access::all()).unwrap();
        let rkey = rkey_of(&mr);
        if read {
            a.ep.read(pb, vec![0; size], &rkey, 0, ctx).unwrap();
        } else {
            a.ep.write(pb, pattern(size, ctx), &rkey, 0, ctx).unwrap();
        }
        // Part of the way: the write's payload or the read's response is
        // still in flight (16 MiB do not fit the socket buffers).
        for _ in 0..3 {
            a.poll();
            b.poll();
        }
        drop(mr);
        // Whatever point the transfer had reached, it ends (either way)
        // without touching freed memory, and the endpoints keep working.
        let c = expect(&mut [&mut a, &mut b], 0, ctx);
        assert!(
            matches!(
                c.result,
                Ok(())
                    | Err(Error::RemoteAccess(_))
                    | Err(Error::PeerUnreachable { .. })
                    // Over verbs the target's QP may fail on the dropped region
                    // and its connection end in order (rdma_cm disconnect).
                    | Err(Error::PeerClosed { .. })
            ),
            "{:?}",
            c.result
        );
        connection_still_works(&mut a, &mut b, 100 + 10 * ctx);
    }
}

#[test]
fn rma_selective_completion_reports_only_what_was_asked_and_errors() {
    let mut attr = test_attr();
    attr.selective_completion = true;
    let (mut a, mut b) = (Node::with_attr(&attr), Node::new());
    let pb = a.add(&b);
    let mr = b.domain.register(vec![0; 64], Access::REMOTE_WRITE).unwrap();
    let quiet = |ctx: u64, key: u64| RmaOp {
        peer: pb,
        kind: RmaKind::Write,
        buf: pattern(64, ctx).into(),
        addr: mr.addr(),
        key,
        data: None,
        context: ctx,
        completion: false,
    };
    a.ep.post_rma(quiet(1, mr.key())).unwrap();
    a.ep.post_rma(quiet(2, mr.key() ^ (1 << 40))).unwrap();
    a.ep.post_rma(RmaOp {
        completion: true,
        ..quiet(3, mr.key())
    })
    .unwrap();
    let c = expect(&mut [&mut a, &mut b], 0, 2);
    assert!(
        matches!(c.result, Err(Error::RemoteAccess(_))),
        "errors are always reported"
    );
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 3).result, Ok(()));
    assert!(a.done.is_empty(), "the quiet success reported: {:?}", a.done);
    assert_eq!(mr.to_vec().unwrap(), pattern(64, 3));
}

/// Polls `a` and peeks (or claims) on `b` until `probe` finds a message.
fn probe_until<T>(a: &mut Node, b: &Node, mut probe: impl FnMut(&Node) -> Option<T>) -> T {
    let start = std::time::Instant::now();
    loop {
        a.poll();
        if let Some(found) = probe(b) {
            return found;
        }
        assert!(
            start.elapsed() < common::DEADLINE,
            "timed out waiting for a message to peek"
        );
    }
}

/// `FI_PEEK` / `FI_CLAIM` (MPI's probes): a peek reports an unexpected
/// message (source, tag, length, data) without receiving it; a claimed one
/// is out of matching until its claim receives it; a claim received into an
/// empty buffer drops the message, and a rendezvous sender still completes.
#[test]
fn peek_and_claim_unexpected_messages() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let pa = b.add(&a);
    let big = test_attr().rndv_threshold * 4;
    assert_eq!(b.ep.peek(ANY, 5, 0).unwrap(), None, "nothing sent yet");
    let op = SendOp {
        peer: pb,
        tag: Some(5),
        data: Some(7),
        buf: pattern(100, 1).into(),
        context: 101,
        completion: true,
        level: Default::default(),
    };
    a.ep.post_send(op).unwrap();
    a.ep.tsend(pb, 6, pattern(big, 2), 102).unwrap();
    let want = Peeked {
        src: pa,
        tag: 5,
        len: 100,
        data: Some(7),
    };
    assert_eq!(probe_until(&mut a, &b, |b| b.ep.peek(ANY, 5, 0).unwrap()), want);
    assert_eq!(b.ep.peek(pa, 5, 0).unwrap(), Some(want), "a peek does not consume");
    assert_eq!(b.ep.peek(ANY, 4, 0).unwrap(), None, "another tag");
    assert_eq!(b.ep.peek(ANY, 4, 1).unwrap(), Some(want), "ignore mask");

    let (p, claim) = b.ep.claim(pa, 5, 0).unwrap().expect("claim the eager message");
    assert_eq!(p, want);
    assert_eq!(
        b.ep.peek(ANY, 5, 0).unwrap(),
        None,
        "a claimed message is out of matching"
    );
    b.ep.trecv(ANY, 5, 0, vec![0; 100], 1).unwrap();
    for _ in 0..100 {
        a.poll();
        b.poll();
    }
    assert!(b.take(1).is_none(), "a receive matched a claimed message");
    b.ep.cancel(1).unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 1, 1).result, Err(Error::Canceled));
    // A region of another domain is refused, and the claim comes back.
    let c = Node::new();
    let foreign = c.domain.register(vec![0; 128], Access::all()).unwrap();
    // SAFETY: the receive is refused at posting (checked below).
    let buf = unsafe { foreign.buffer(0, 128) }.unwrap();
    let refused = b.ep.post_claimed(claim, buf, 2).unwrap_err();
    assert!(
        matches!(refused.error, Error::InvalidArgument(_)),
        "{:?}",
        refused.error
    );
    let claim = refused.op.0;
    b.ep.post_claimed(claim, vec![0; 128].into(), 2).unwrap();
    let r = expect(&mut [&mut a, &mut b], 1, 2);
    assert_eq!((r.result, r.len, r.tag, r.src, r.data), (Ok(()), 100, 5, pa, 7));
    assert!(r.flags.contains(Flags::TAGGED | Flags::RECV | Flags::REMOTE_CQ_DATA));
    assert_eq!(&r.buf.unwrap()[..100], &pattern(100, 1)[..]);

    // A rendezvous message claimed, then dropped into an empty buffer.
    let (p, claim) = probe_until(&mut a, &b, |b| b.ep.claim(ANY, 6, 0).unwrap());
    assert_eq!((p.src, p.tag, p.len, p.data), (pa, 6, big, None));
    b.ep.post_claimed(claim, Vec::new().into(), 3).unwrap();
    let r = expect(&mut [&mut a, &mut b], 1, 3);
    assert_eq!(r.result, Err(Error::Truncated { len: 0, olen: big }));
    assert_eq!(
        expect(&mut [&mut a, &mut b], 0, 102).result,
        Ok(()),
        "the sender completes"
    );
    let stale = b.ep.post_claimed(Claim::new(999), Vec::new().into(), 4).unwrap_err();
    assert!(matches!(stale.error, Error::NotFound(_)), "{:?}", stale.error);
    // The connection still carries messages.
    b.ep.trecv(ANY, 6, 0, vec![0; 4], 5).unwrap();
    a.ep.tsend(pb, 6, b"next".to_vec(), 103).unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 1, 5).buf.unwrap(), b"next");
}

/// `max_outstanding_per_peer`: a send to a peer with that many in flight is
/// refused with `Again` (the buffer handed back) while another peer still
/// takes sends; a completion makes room. Rendezvous sends to a receiver that
/// posts nothing stay in flight; RMA counts too, and completions name the peer.
#[test]
fn per_peer_bound_refuses_only_the_full_peer() {
    let mut attr = test_attr();
    attr.max_outstanding_per_peer = 2;
    let mut a = Node::with_attr(&attr);
    let (mut b, mut c) = (Node::new(), Node::new());
    let (pb, pc) = (a.add(&b), a.add(&c));
    let big = 1 << 20;
    assert_eq!(
        Node::new().ep.outstanding_to(pb).unwrap(),
        None,
        "unbounded: nothing counted"
    );
    a.ep.tsend(pb, 1, pattern(big, 1), 1).unwrap();
    a.ep.tsend(pb, 2, pattern(big, 2), 2).unwrap();
    let refused = a.ep.tsend(pb, 3, pattern(big, 3), 3).expect_err("a third to b");
    assert_eq!(refused.error, Error::Again);
    assert_eq!(refused.op, pattern(big, 3), "the buffer comes back");
    a.ep.tsend(pc, 4, pattern(big, 4), 4).expect("c has room");
    assert_eq!(a.ep.outstanding_to(pb).unwrap(), Some(2));
    assert_eq!(a.ep.outstanding_to(pc).unwrap(), Some(1));
    assert_eq!(a.ep.outstanding().unwrap(), None, "no endpoint bound");

    b.ep.trecv(ANY, 1, 0, vec![0; big], 11).unwrap();
    let s = expect(&mut [&mut a, &mut b, &mut c], 0, 1);
    assert_eq!((s.result, s.src), (Ok(()), pb), "a send's completion names its peer");
    a.ep.tsend(pb, 3, pattern(big, 3), 3).expect("room after a completion");
    for tag in [2, 3] {
        b.ep.trecv(ANY, tag, 0, vec![0; big], 10 + tag).unwrap();
    }
    c.ep.trecv(ANY, 4, 0, vec![0; big], 14).unwrap();
    for tag in 1..=3 {
        let r = expect(&mut [&mut a, &mut b, &mut c], 1, 10 + tag);
        assert_eq!(r.result, Ok(()));
        assert_eq!(r.buf.unwrap(), pattern(big, tag), "message {tag}");
    }
    assert_eq!(
        expect(&mut [&mut a, &mut b, &mut c], 2, 14).buf.unwrap(),
        pattern(big, 4)
    );
    for ctx in 2..=4 {
        assert_eq!(expect(&mut [&mut a, &mut b, &mut c], 0, ctx).result, Ok(()));
    }
    assert_eq!(a.ep.outstanding_to(pb).unwrap(), Some(0));

    // RMA is counted per peer as well, and its completion names the peer.
    let mr = b.domain.register(vec![0; 4096], Access::all()).unwrap();
    let rkey = rkey_of(&mr);
    a.ep.write(pb, pattern(64, 5), &rkey, 0, 21).unwrap();
    a.ep.read(pb, vec![0; 64], &rkey, 0, 22).unwrap();
    let w = expect(&mut [&mut a, &mut b, &mut c], 0, 21);
    assert_eq!((w.result, w.src), (Ok(()), pb));
    let r = expect(&mut [&mut a, &mut b, &mut c], 0, 22);
    assert_eq!((r.src, r.buf.unwrap()), (pb, pattern(64, 5)));
    assert_eq!(a.ep.outstanding_to(pb).unwrap(), Some(0));
}

/// A large message goes by rendezvous, pulled where the transport can read
/// the sender's memory and pushed where it cannot, once; over `verbs`
/// it is pulled by RDMA READ, and the sender's buffer is given back (no
/// registration left exposed) once the receiver has it.
#[test]
fn a_large_message_is_pulled_or_pushed_once_and_by_rdma_read_over_verbs() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let size = 1 << 20;
    b.ep.trecv(ANY, 3, 0, vec![0; size], 1).unwrap();
    a.ep.tsend(pb, 3, pattern(size, 2), 2).unwrap();
    let r = expect(&mut [&mut a, &mut b], 1, 1);
    assert_eq!((r.result, r.len), (Ok(()), size));
    assert!(r.buf.unwrap() == pattern(size, 2), "content");
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 2).result, Ok(()));
    let c = b.ep.counters().unwrap();
    let has = |k: &str| c.iter().any(|(name, _)| *name == k);
    if has("rndv_pulls") {
        let moved = (counter(&b, "rndv_pulls"), counter(&b, "rndv_pushes"));
        assert!(moved == (1, 0) || moved == (0, 1), "pulls, pushes: {moved:?}");
    }
    if a.domain.provider() == "verbs" {
        assert_eq!(counter(&b, "rndv_pulls"), 1, "pulled, not pushed");
        assert!(counter(&b, "rdma_reads") > 0, "by RDMA READ");
        assert_eq!(counter(&b, "rdma_read_bytes"), size as u64);
        // Chunked when a READ may carry less than the message (the guest
        // runs this with XFER_VERBS_READ_MAX=4096 too).
        if let Some(max) = std::env::var("XFER_VERBS_READ_MAX")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
        {
            assert_eq!(
                counter(&b, "rdma_reads"),
                (size as u64).div_ceil(max),
                "chunks of {max} B"
            );
        }
        assert_eq!(counter(&b, "rdma_reads_failed"), 0);
        assert_eq!(counter(&b, "rdma_reads_outstanding"), 0);
        assert_eq!(counter(&a, "rndv_exposed"), 0, "the send's registration given back");
    }
}

/// The verbs transport's mark (providers/verbs/src/transport/mark.rs): a
/// READ whose last bytes equal it cannot prove by itself that it landed.
/// Were it changed there and not here, the query count below would fail.
const VERBS_MARK: [u8; 8] = 0x9e37_79b9_7f4a_7c15u64.to_le_bytes();

/// A rendezvous pulled by RDMA READ is taken as done from the READ's write
/// of the receive's last bytes, without asking the QP's state, unless those
/// bytes are the transport's mark; then it asks once, and the message still
/// arrives whole. Sizes one to seven bytes past a READ's largest chunk (the
/// guest runs this with `XFER_VERBS_READ_MAX=4096` too) put the last chunk's
/// tail under eight bytes. Elsewhere the same messages must simply arrive.
#[test]
fn a_pull_asks_the_qp_state_only_when_its_last_bytes_are_the_mark_over_verbs() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let verbs = a.domain.provider() == "verbs";
    let chunk = std::env::var("XFER_VERBS_READ_MAX")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1 << 20);
    let marked = |len: usize, seed| {
        let mut m = pattern(len, seed);
        m[len - 8..].copy_from_slice(&VERBS_MARK);
        m
    };
    // Whole chunks of at least `n` bytes: a rendezvous, however small a chunk.
    let chunks = |n: usize| n.div_ceil(chunk) * chunk;
    // (message, whether its last bytes are the mark).
    let cases = [
        (pattern(1 << 20, 1), false),
        (pattern(chunks(64 << 10) + 3, 2), false),
        (pattern(chunks(128 << 10) + 7, 3), false),
        (marked(1 << 20, 4), true),
        (marked(chunks(64 << 10) + 5, 5), true),
    ];
    let mut asked = 0;
    for (i, (msg, mark)) in cases.into_iter().enumerate() {
        let ctx = i as u64 + 1;
        let size = msg.len();
        // A receive buffer one byte longer than the message, its spare byte
        // left as it was.
        b.ep.trecv(ANY, ctx, 0, vec![0xee; size + 1], ctx).unwrap();
        a.ep.tsend(pb, ctx, msg.clone(), 100 + ctx).unwrap();
        let r = expect(&mut [&mut a, &mut b], 1, ctx);
        assert_eq!((r.result, r.len), (Ok(()), size), "{size} B");
        let got = r.buf.unwrap();
        assert!(got[..size] == msg[..], "{size} B: content");
        assert_eq!(got[size], 0xee, "{size} B: the byte past the message");
        assert_eq!(expect(&mut [&mut a, &mut b], 0, 100 + ctx).result, Ok(()));
        if verbs {
            asked += u64::from(mark);
            assert_eq!(counter(&b, "rndv_pulls"), ctx, "{size} B pulled");
            assert_eq!(counter(&b, "qp_state_queries"), asked, "{size} B, mark {mark}");
        }
    }
    if verbs {
        assert_eq!(counter(&b, "rdma_reads_failed"), 0);
    }
}

/// Over shared memory a rendezvous below the receiver's `shm.cma_min` is
/// pushed through the ring and one at or above it pulled by cross-memory
/// attach (pushed too where CMA is off), each arriving whole, the receiver's
/// counters saying which; elsewhere the same messages must simply arrive.
#[test]
fn a_rendezvous_below_shm_cma_min_is_pushed_and_one_above_pulled() {
    const MIN: usize = 256 << 10;
    let mut a = Node::new();
    let shm = matches!(a.domain.provider(), "shm" | "shm+tcp");
    let mut attr = test_attr();
    if shm {
        attr.params.set("shm.cma_min", MIN.to_string());
        attr.params.set("shm.pull_after_us", "0");
    }
    let mut b = Node::with_attr(&attr);
    let pb = a.add(&b);
    // Every size above the eager limit: the threshold's two sides, at it
    // and one byte off, and a size that takes many ring frames either way.
    let sizes = [70_000, MIN - 1, MIN, MIN + 1, 3 << 20];
    for (i, &size) in sizes.iter().enumerate() {
        let ctx = i as u64 + 1;
        b.ep.trecv(ANY, ctx, 0, vec![0; size], ctx).unwrap();
        a.ep.tsend(pb, ctx, pattern(size, ctx), 100 + ctx).unwrap();
        let r = expect(&mut [&mut a, &mut b], 1, ctx);
        assert_eq!((r.result, r.len), (Ok(()), size), "{size} B");
        assert!(r.buf.unwrap() == pattern(size, ctx), "{size} B: content");
        assert_eq!(expect(&mut [&mut a, &mut b], 0, 100 + ctx).result, Ok(()));
    }
    if !shm {
        return;
    }
    let moved = (counter(&b, "rndv_pushes"), counter(&b, "rndv_pulls"));
    if rma_by_one_copy(&b) {
        assert_eq!(moved, (2, 3), "pushes below {MIN} B, pulls from it");
    } else {
        assert_eq!(moved, (5, 0), "every rendezvous pushed with CMA off");
    }
}

/// Over shared memory with `shm.pull_after_us` set, a rendezvous from
/// `shm.cma_min` is pushed first and, when its sender pushes nothing for
/// that long (here: the sender is not progressed at all), the receiver
/// pulls the rest and completes alone; the sender's send then completes,
/// the bytes it still pushed are dropped, and the connection serves on.
/// Elsewhere the same message must simply arrive.
#[test]
fn a_pushed_rendezvous_whose_sender_stalls_is_pulled_by_its_receiver() {
    const SIZE: usize = 3 << 20;
    let mut a = Node::new();
    let mut attr = test_attr();
    let pushes_first = rma_by_one_copy(&a);
    if pushes_first {
        attr.params.set("shm.pull_after_us", "1");
    }
    let mut b = Node::with_attr(&attr);
    let pb = a.add(&b);
    b.add(&a);
    connection_still_works(&mut a, &mut b, 10);
    b.ep.trecv(ANY, 7, 0, vec![0; SIZE], 1).unwrap();
    a.ep.tsend(pb, 7, pattern(SIZE, 7), 2).unwrap();
    let r = match pushes_first {
        true => expect(&mut [&mut b], 0, 1),
        false => expect(&mut [&mut a, &mut b], 1, 1),
    };
    assert_eq!((r.result, r.len), (Ok(()), SIZE));
    assert!(r.buf.unwrap() == pattern(SIZE, 7), "content");
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 2).result, Ok(()));
    connection_still_works(&mut a, &mut b, 20);
    if pushes_first {
        assert_eq!(counter(&b, "rndv_pushes_pulled"), 1, "pulled after the push stalled");
        assert_eq!(counter(&b, "protocol_errors"), 0);
        assert_eq!(counter(&a, "protocol_errors"), 0);
    }
}

/// RMA on a key its target granted goes by the device where there is one:
/// over verbs (and shm+verbs with shm off), after one write and one read
/// served by the target, a large write and read go by RDMA WRITE and READ,
/// and the target's engine serves none of them; a range outside the region
/// is still refused by the target, and the connection serves on.
#[test]
fn rma_on_a_granted_key_goes_by_the_device_over_verbs() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let size = 1 << 20;
    let mr = b.domain.register(vec![0; size], Access::all()).unwrap();
    let rkey = rkey_of(&mr);
    a.ep.write(pb, pattern(64, 1), &rkey, 0, 1).unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 1).result, Ok(()));
    a.ep.read(pb, vec![0; 64], &rkey, 0, 2).unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 2).buf.unwrap(), pattern(64, 1));
    a.ep.write(pb, pattern(size, 3), &rkey, 0, 3).unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 3).result, Ok(()));
    assert!(mr.to_vec().unwrap() == pattern(size, 3), "written whole");
    a.ep.read(pb, vec![0; size], &rkey, 0, 4).unwrap();
    let r = expect(&mut [&mut a, &mut b], 0, 4);
    assert!(r.buf.unwrap() == pattern(size, 3), "read whole");
    a.ep.write(pb, vec![0; 16], &rkey, size as u64 - 8, 5).unwrap();
    expect_refused(&mut a, &mut b, 5, Flags::WRITE);
    assert!(mr.to_vec().unwrap() == pattern(size, 3), "memory unchanged");
    connection_still_works(&mut a, &mut b, 100);
    let shm_off = std::env::var("XFER_SHM_ENABLED").is_ok_and(|v| v == "0");
    let provider = a.domain.provider();
    if provider == "verbs" || (provider == "shm+verbs" && shm_off) {
        assert_eq!(counter(&a, "rma_native"), 2, "the large write and read natively");
        assert_eq!(counter(&a, "rma_native_failed"), 0);
        assert!(counter(&a, "rdma_writes") > 0, "by RDMA WRITE");
        assert_eq!(counter(&a, "rdma_write_bytes"), size as u64);
        assert!(counter(&a, "rdma_read_bytes") >= size as u64, "by RDMA READ");
        if provider == "verbs" {
            // The WRITE's completion asked the QP's state; the READ's was
            // proved by the write of its last bytes.
            assert_eq!(counter(&a, "qp_state_queries"), 1);
        }
        assert_eq!(
            counter(&b, "rma_served"),
            3,
            "the target served only the first two and the refusal"
        );
        // Chunked when a READ (and so a WRITE) may carry less (the guest
        // runs this with XFER_VERBS_READ_MAX=4096 too).
        if let Some(max) = std::env::var("XFER_VERBS_READ_MAX")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
        {
            assert_eq!(
                counter(&a, "rdma_writes"),
                (size as u64).div_ceil(max),
                "chunks of {max} B"
            );
        }
    }
}

/// Whether RMA to a peer of `n`'s (on this host) goes by one cross-memory
/// copy once granted: the shared-memory providers with CMA on.
fn rma_by_one_copy(n: &Node) -> bool {
    let cma_off = ["XFER_SHM_CMA", "XFER_SHM_ENABLED"]
        .iter()
        .any(|k| std::env::var(k).is_ok_and(|v| v == "0"));
    matches!(n.domain.provider(), "shm" | "shm+tcp") && !cma_off
}

/// Over shared memory, RMA on a key its target granted goes by one
/// cross-memory-attach copy: after one write and one read served by the
/// target, writes and reads of every size go without it, again and again,
/// content checked; ranges outside the region, an access the region does
/// not give and write-with-data stay in the target's hands, refused or
/// applied cleanly, and the connection serves on. Elsewhere the same
/// operations must simply work.
#[test]
fn rma_on_a_granted_key_goes_by_one_copy_over_shm() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let size = 1 << 20;
    let mr = b.domain.register(vec![0; size], Access::all()).unwrap();
    let rkey = rkey_of(&mr);
    a.ep.write(pb, pattern(64, 1), &rkey, 0, 1).unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 1).result, Ok(()));
    a.ep.read(pb, vec![0; 64], &rkey, 0, 2).unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 2).buf.unwrap(), pattern(64, 1));
    let mut ctx = 10;
    for round in 0..3u64 {
        for len in [8usize, 4096, 65536, size] {
            let off = (size - len) as u64 / 2;
            let data = pattern(len, ctx);
            a.ep.write(pb, data.clone(), &rkey, off, ctx).unwrap();
            assert_eq!(expect(&mut [&mut a, &mut b], 0, ctx).result, Ok(()), "round {round}");
            let whole = mr.to_vec().unwrap();
            assert!(whole[off as usize..off as usize + len] == data[..], "written, {len} B");
            a.ep.read(pb, vec![0; len], &rkey, off, ctx + 1).unwrap();
            assert!(
                expect(&mut [&mut a, &mut b], 0, ctx + 1).buf.unwrap() == data,
                "read, {len} B"
            );
            ctx += 2;
        }
    }
    let before = mr.to_vec().unwrap();
    a.ep.write(pb, vec![7; 16], &rkey, size as u64 - 8, 100).unwrap();
    expect_refused(&mut a, &mut b, 100, Flags::WRITE);
    a.ep.read(pb, vec![0; 16], &rkey, size as u64 - 8, 101).unwrap();
    expect_refused(&mut a, &mut b, 101, Flags::READ);
    assert!(mr.to_vec().unwrap() == before, "memory unchanged");
    a.ep.write_data(pb, pattern(32, 102), &rkey, 0, 0xd00d, 102).unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 102).result, Ok(()));
    let t = expect(&mut [&mut a, &mut b], 1, 0);
    assert_eq!((t.data, t.len), (0xd00d, 32), "write with data completes at the target");
    connection_still_works(&mut a, &mut b, 200);
    if rma_by_one_copy(&a) {
        assert_eq!(
            counter(&a, "rma_native"),
            24,
            "3 rounds of 4 writes and 4 reads by one copy"
        );
        assert_eq!(counter(&a, "rma_native_failed"), 0);
        assert_eq!(
            counter(&b, "rma_served"),
            5,
            "the target served the first two, the two refusals and the write with data"
        );
    } else if matches!(a.domain.provider(), "shm" | "shm+tcp") {
        // Cross-memory attach off: every operation in frames, served.
        assert_eq!(counter(&a, "rma_native"), 0);
        assert_eq!(counter(&b, "rma_served"), 29);
    }
}

/// A grant dies with its region: once the target deregistered it, a write
/// or read on the old key is refused (`RemoteAccess`), and not one byte of
/// the memory the region covered changes (over shared memory the target's
/// deregistration revokes every grant before it returns; a copy under the
/// old grant would land in memory the target may already reuse).
#[test]
fn rma_on_a_region_deregistered_after_its_grant_is_refused() {
    let (mut a, mut b) = (Node::new(), Node::new());
    if matches!(a.domain.provider(), "verbs" | "shm+verbs") {
        return; // A device's invalidated rkey fails the QP instead (verbs).
    }
    let pb = a.add(&b);
    let mut target = vec![0u8; 8192];
    // SAFETY: `target` outlives the region, dropped below, and is only
    // reached through it while it is registered.
    let mr = unsafe { b.domain.register_raw(target.as_mut_ptr(), target.len(), Access::all()) }.unwrap();
    let rkey = rkey_of(&mr);
    for ctx in 1..=3 {
        a.ep.write(pb, pattern(4096, ctx), &rkey, 0, ctx).unwrap();
        assert_eq!(expect(&mut [&mut a, &mut b], 0, ctx).result, Ok(()));
        a.ep.read(pb, vec![0; 4096], &rkey, 0, 10 + ctx).unwrap();
        assert!(expect(&mut [&mut a, &mut b], 0, 10 + ctx).buf.unwrap() == pattern(4096, ctx));
    }
    if rma_by_one_copy(&a) {
        assert_eq!(counter(&a, "rma_native"), 4, "granted: the later ones by one copy");
    }
    drop(mr);
    let before = target.clone();
    a.ep.write(pb, pattern(4096, 9), &rkey, 0, 20).unwrap();
    expect_refused(&mut a, &mut b, 20, Flags::WRITE);
    a.ep.read(pb, vec![0; 4096], &rkey, 0, 21).unwrap();
    expect_refused(&mut a, &mut b, 21, Flags::READ);
    assert!(target == before, "not a byte written after the deregistration");
    connection_still_works(&mut a, &mut b, 30);
    // A new region is granted afresh and goes by one copy again.
    // SAFETY: as above.
    let mr = unsafe { b.domain.register_raw(target.as_mut_ptr(), target.len(), Access::all()) }.unwrap();
    let rkey = rkey_of(&mr);
    for ctx in 40..43 {
        a.ep.write(pb, pattern(4096, ctx), &rkey, 4096, ctx).unwrap();
        assert_eq!(expect(&mut [&mut a, &mut b], 0, ctx).result, Ok(()));
    }
    if rma_by_one_copy(&a) {
        assert_eq!(counter(&a, "rma_native"), 6, "the new region granted, then by one copy");
    }
    drop(mr);
    assert!(target[4096..] == pattern(4096, 42)[..]);
}

/// A deregistration racing a peer's writes (two threads, two domains):
/// once it returned, not one byte lands in the memory the region covered,
/// however many writes the peer still sends; its next write is refused.
/// Over shared memory the writes go by one copy from the first answer on,
/// and the deregistration must wait for a copy in flight and stop the
/// later ones.
#[test]
fn a_region_deregistered_while_a_peer_writes_to_it_is_not_written_after() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
    // Node `a` is driven from a second thread: its domain must serve any
    // thread, whatever XFER_THREADING says.
    let mut safe = xfer::DomainAttr::from_env();
    safe.threading = xfer::Threading::Safe;
    let a_domain = xfer::open(&safe).unwrap();
    let (mut a, mut b) = (Node::in_domain(a_domain, &test_attr()), Node::new());
    if matches!(a.domain.provider(), "verbs" | "shm+verbs") {
        return; // A device's invalidated rkey fails the QP instead (verbs).
    }
    let pb = a.add(&b);
    let len = 4096;
    let mut target = vec![0u8; len];
    let base = target.as_mut_ptr();
    // SAFETY: `target` outlives the region, dropped below, and the test
    // touches it only after that.
    let mr = unsafe { b.domain.register_raw(base, len, Access::all()) }.unwrap();
    let rkey = rkey_of(&mr);
    let (writes, finished) = (AtomicU64::new(0), AtomicBool::new(false));
    let refused = std::thread::scope(|s| {
        let (a, rkey, writes, finished) = (&mut a, &rkey, &writes, &finished);
        let writer = s.spawn(move || {
            let t0 = std::time::Instant::now();
            let mut refused = false;
            for ctx in 1.. {
                a.ep.write(pb, vec![0xab; len], rkey, 0, ctx).unwrap();
                match expect(&mut [&mut *a], 0, ctx).result {
                    Ok(()) => writes.fetch_add(1, SeqCst),
                    Err(Error::RemoteAccess(_)) => {
                        refused = true;
                        break;
                    }
                    Err(e) => panic!("write {ctx}: {e:?}"),
                };
                if t0.elapsed() > common::DEADLINE {
                    break;
                }
            }
            finished.store(true, SeqCst);
            refused
        });
        let t0 = std::time::Instant::now();
        while writes.load(SeqCst) < 50 && !finished.load(SeqCst) {
            b.poll();
            assert!(t0.elapsed() < common::DEADLINE, "no writes");
        }
        drop(mr);
        // SAFETY: the region is gone: the memory is the test's own again.
        unsafe { std::ptr::write_bytes(base, 0, len) };
        while !finished.load(SeqCst) {
            b.poll();
        }
        writer.join().unwrap()
    });
    assert!(refused, "the writes after the deregistration were refused");
    if rma_by_one_copy(&a) {
        assert!(counter(&a, "rma_native") >= 40, "the writes went by one copy");
    }
    // SAFETY: `base..base + len` is `target`'s; read volatile, as only a
    // stale copy from the other thread could have changed it.
    let landed = (0..len)
        .filter(|&i| unsafe { std::ptr::read_volatile(base.add(i)) } != 0)
        .count();
    assert_eq!(landed, 0, "bytes landed after the deregistration returned");
    drop(target);
}

/// Every transport reports the RDM layer's counters under the same names
/// (credit, requests to send, receive memory, unexpected messages), so a
/// tool reads them alike whatever serves the endpoint.
#[test]
fn every_transport_reports_the_rdm_layer_counters() {
    let n = Node::new();
    let c = n.ep.counters().expect("counters");
    for name in xfer_core::unstable::rdm::counters::NAMES {
        assert!(
            c.iter().any(|&(k, _)| k == name),
            "{} does not report {name}",
            n.domain.provider()
        );
    }
}

/// A tagged send of `pattern(size, ctx)` to `peer` with `level`, tag and context `ctx`.
fn send_at(a: &Node, peer: PeerAddr, size: usize, ctx: u64, level: CompletionLevel) {
    let op = SendOp {
        peer,
        tag: Some(ctx),
        data: None,
        buf: pattern(size, ctx).into(),
        context: ctx,
        completion: true,
        level,
    };
    a.ep.post_send(op).unwrap();
}

/// `CompletionLevel::Transmit` and `Delivery` (`FI_TRANSMIT_COMPLETE`,
/// `FI_DELIVERY_COMPLETE`) with the receive posted first: when the send
/// completes, its bytes are already in the receive's buffer (checked in
/// that memory before the receiver makes any more progress), whatever the
/// size (empty, eager, rendezvous, truncated by the receive); the buffer
/// comes back whole.
#[test]
fn acknowledged_sends_complete_once_the_target_has_them() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let t = test_attr().rndv_threshold;
    let cases = [
        (0, 8, CompletionLevel::Delivery),
        (8, 8, CompletionLevel::Transmit),
        (8, 8, CompletionLevel::Delivery),
        (t, t, CompletionLevel::Delivery),
        (4 * t, 4 * t, CompletionLevel::Transmit),
        (100, 10, CompletionLevel::Delivery),
    ];
    for (i, (size, room, level)) in cases.into_iter().enumerate() {
        let ctx = 10 * i as u64 + 10;
        let mut landing = vec![0u8; room.max(1)];
        let ptr = landing.as_mut_ptr();
        // SAFETY: `landing` outlives the receive, which completes below; it
        // is only read between progress calls of `b`.
        let buf = unsafe { Buffer::raw(ptr, room) };
        let spec = RecvSpec {
            src: ANY,
            tag: ctx,
            ignore: 0,
        };
        let op = RecvOp {
            spec,
            tagged: true,
            buf,
            context: ctx + 1,
        };
        b.ep.post_recv(op).unwrap();
        send_at(&a, pb, size, ctx, level);
        let len = size.min(room);
        let start = std::time::Instant::now();
        let s = loop {
            a.poll();
            if let Some(s) = a.take(ctx) {
                break s;
            }
            b.poll();
            assert!(start.elapsed() < common::DEADLINE, "no send completion");
        };
        // SAFETY: `b` makes no progress here: nothing writes `landing`.
        let placed = unsafe { std::slice::from_raw_parts(ptr, len) };
        assert_eq!(
            placed,
            &pattern(size, ctx)[..len],
            "{level:?} send of {size} B completed before its bytes were placed"
        );
        assert_eq!(s.result, Ok(()), "{level:?} send of {size} B");
        assert!(s.flags.contains(Flags::SEND | Flags::TAGGED));
        assert_eq!(s.buf.unwrap(), pattern(size, ctx), "the buffer comes back");
        let r = expect(&mut [&mut a, &mut b], 1, ctx + 1);
        if size > room {
            assert_eq!(r.result, Err(Error::Truncated { len, olen: size }));
        } else {
            assert_eq!(r.result, Ok(()));
        }
        assert_eq!(r.len, len);
    }
}

/// An acknowledged send to a target with no receive posted: an eager-sized
/// message completes once the target holds it (buffered: fi_cq(3) allows
/// delivery-complete then); a rendezvous-sized one, whose payload stays
/// with the sender until a receive matches, completes only after that.
#[test]
fn acknowledged_sends_to_no_receive_complete_as_the_target_holds_them() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let t = test_attr().rndv_threshold;
    send_at(&a, pb, 64, 1, CompletionLevel::Delivery);
    let s = expect(&mut [&mut a, &mut b], 0, 1);
    assert_eq!(s.result, Ok(()));
    assert!(
        b.ep.peek(ANY, 1, 0).unwrap().is_some(),
        "completed before the target had it"
    );
    send_at(&a, pb, 4 * t, 2, CompletionLevel::Delivery);
    probe_until(&mut a, &b, |b| b.ep.peek(ANY, 2, 0).unwrap());
    for _ in 0..50 {
        a.poll();
        b.poll();
    }
    assert!(
        a.take(2).is_none(),
        "a rendezvous send completed before a receive took it"
    );
    for ctx in [1, 2] {
        let size = if ctx == 1 { 64 } else { 4 * t };
        b.ep.trecv(ANY, ctx, 0, vec![0; size], ctx + 10).unwrap();
        let r = expect(&mut [&mut a, &mut b], 1, ctx + 10);
        assert_eq!(r.buf.unwrap(), pattern(size, ctx));
    }
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 2).result, Ok(()));
}

/// Acknowledged and plain sends mixed keep their order at the receiver,
/// and every acknowledged one completes.
#[test]
fn acknowledged_sends_keep_order_with_plain_ones() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let n = 200u64;
    let level = |i: u64| match i % 3 {
        0 => CompletionLevel::Delivery,
        1 => CompletionLevel::Inject,
        _ => CompletionLevel::Transmit,
    };
    for i in 0..n / 2 {
        b.ep.trecv(ANY, 0, u64::MAX, vec![0; 64], 1000 + i).unwrap();
    }
    for i in 0..n {
        let op = SendOp {
            peer: pb,
            tag: Some(i),
            data: None,
            buf: pattern(64, i).into(),
            context: i,
            completion: true,
            level: level(i),
        };
        a.ep.post_send(op).unwrap();
    }
    for i in n / 2..n {
        b.ep.trecv(ANY, 0, u64::MAX, vec![0; 64], 1000 + i).unwrap();
    }
    for i in 0..n {
        let r = expect(&mut [&mut a, &mut b], 1, 1000 + i);
        assert_eq!(r.tag, i, "message {i} out of order");
        assert_eq!(r.buf.unwrap(), pattern(64, i));
    }
    drive(&mut [&mut a, &mut b], "every send completion", |ns| {
        ns[0].done.len() == n as usize
    });
    assert!(a.done.iter().all(|c| c.result.is_ok()), "{:?}", a.done);
}

/// An acknowledged send whose target goes away before it had the message
/// (a rendezvous one, no receive taking it) fails with its buffer, as any
/// outstanding send to a dead peer.
#[test]
fn acknowledged_send_to_a_target_that_closes_fails() {
    let (mut a, b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let size = 4 * test_attr().rndv_threshold;
    send_at(&a, pb, size, 1, CompletionLevel::Delivery);
    probe_until(&mut a, &b, |b| b.ep.peek(ANY, 1, 0).unwrap());
    drop(b);
    let s = expect(&mut [&mut a], 0, 1);
    // The target closed its endpoint in order: `PeerClosed` (over verbs it may
    // read as a failure, docs/ARCHITECTURE.md decision 99).
    assert!(
        matches!(s.result, Err(Error::PeerClosed { .. } | Error::PeerUnreachable { .. })),
        "{:?}",
        s.result
    );
    assert_eq!(s.buf.unwrap(), pattern(size, 1));
}

/// `EndpointAttr::rma_events` (`FI_RMA_EVENT`): a target reports each write
/// (an inject one too) and each read a peer applies to it, with its length
/// and source, context 0 and the region's key as `tag`, besides writes with
/// data as always; a target without it reports only those. Over verbs such
/// a target serves its RMA itself, never by the device.
#[test]
fn rma_events_report_what_peers_apply_to_the_target() {
    let mut attr = test_attr();
    attr.rma_events = true;
    let (mut a, mut b, mut quiet) = (Node::new(), Node::with_attr(&attr), Node::new());
    let (pb, pq, pa) = (a.add(&b), a.add(&quiet), b.add(&a));
    for (target, peer) in [(&mut b, pb), (&mut quiet, pq)] {
        let mr = target.domain.register(vec![0; 4096], Access::all()).unwrap();
        let rkey = rkey_of(&mr);
        a.ep.write(peer, pattern(100, 1), &rkey, 0, 1).unwrap();
        a.ep.read(peer, vec![0; 40], &rkey, 10, 2).unwrap();
        a.ep.inject_write(peer, &pattern(8, 3), &rkey, 200).unwrap();
        a.ep.write_data(peer, pattern(16, 4), &rkey, 300, 0xDA7A, 4).unwrap();
        for ctx in [1, 2, 4] {
            assert_eq!(expect(&mut [&mut a, &mut *target], 0, ctx).result, Ok(()));
        }
        // The inject write is applied before the write with data behind it.
        let t = drive_until_data(&mut a, target);
        assert_eq!(&mr.to_vec().unwrap()[200..208], &pattern(8, 3)[..]);
        let events: Vec<_> = t.iter().map(|c| (c.flags, c.len, c.context)).collect();
        if peer == pb {
            let (w, r) = (Flags::RMA | Flags::REMOTE_WRITE, Flags::RMA | Flags::REMOTE_READ);
            let data = w | Flags::REMOTE_CQ_DATA;
            assert_eq!(events, [(w, 100, 0), (r, 40, 0), (w, 8, 0), (data, 16, 0)]);
            assert!(t.iter().all(|c| c.src == pa && c.result.is_ok()), "{t:?}");
            // Each names the region it accessed by its key (for counters
            // bound to a region).
            assert!(t.iter().all(|c| c.tag == mr.key()), "{t:?}");
        } else {
            let data = Flags::RMA | Flags::REMOTE_WRITE | Flags::REMOTE_CQ_DATA;
            assert_eq!(events, [(data, 16, 0)], "a target without rma_events");
        }
    }
}

/// Polls `a` and `target` until `target` has the entry of a write with
/// data; returns every completion `target` got, in order.
fn drive_until_data(a: &mut Node, target: &mut Node) -> Vec<xfer::Completion> {
    drive(&mut [a, &mut *target], "the write with data at the target", |ns| {
        ns[1].done.iter().any(|c| c.flags.contains(Flags::REMOTE_CQ_DATA))
    });
    std::mem::take(&mut target.done)
}

// ---- Atomics -----------------------------------------------------------------

/// The element at `offset` of `mr`'s memory, as 64 bits.
fn word_at(mr: &MemoryRegion, offset: usize) -> u64 {
    let v = mr.to_vec().unwrap();
    u64::from_le_bytes(v[offset..offset + 8].try_into().unwrap())
}

/// Starts a fetching atomic; `false` (the test is skipped, with a message)
/// on a provider without atomics.
#[allow(clippy::too_many_arguments)]
fn fetch(
    a: &Node,
    peer: PeerAddr,
    kind: AtomicKind,
    dt: Datatype,
    operand: u64,
    rkey: &RemoteKey,
    offset: u64,
    ctx: u64,
) -> bool {
    match a.ep.fetch_atomic(peer, kind, dt, operand, rkey, offset, ctx) {
        Ok(()) => {
            assert!(a.domain.atomics(), "atomics applied by a domain that says it has none");
            true
        }
        Err(Error::NotSupported(what)) => {
            // The capability query says so beforehand (fi_getinfo relies on it).
            assert!(!a.domain.atomics(), "atomics refused by a domain that says it has them");
            eprintln!("skipping: {what}");
            false
        }
        Err(e) => panic!("fetch_atomic: {e}"),
    }
}

#[test]
fn atomics_of_every_kind_and_datatype_fetch_the_old_value() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let mr = b.domain.register(vec![0; 64], Access::all()).unwrap();
    let rkey = rkey_of(&mr);
    if !fetch(&a, pb, AtomicKind::Sum, Datatype::U64, 5, &rkey, 0, 1) {
        return;
    }
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 1).data, 0);
    let f = |x: f64| x.to_bits();
    // (kind, datatype, start, operand, expected after); each fetches `start`.
    let cases: Vec<(AtomicKind, Datatype, u64, u64, u64)> = vec![
        (AtomicKind::Sum, Datatype::U64, 5, 7, 12),
        (AtomicKind::Sum, Datatype::I64, 5, (-7i64) as u64, (-2i64) as u64),
        (AtomicKind::Min, Datatype::I64, (-2i64) as u64, 3, (-2i64) as u64),
        (AtomicKind::Max, Datatype::U64, 3, 9, 9),
        (AtomicKind::Bor, Datatype::U64, 0b1100, 0b1010, 0b1110),
        (AtomicKind::Band, Datatype::U64, 0b1100, 0b1010, 0b1000),
        (AtomicKind::Bxor, Datatype::U64, 0b1100, 0b1010, 0b0110),
        (AtomicKind::Read, Datatype::U64, 42, 0, 42),
        (AtomicKind::Write, Datatype::U64, 42, 7, 7),
        (AtomicKind::Sum, Datatype::F64, f(1.5), f(2.25), f(3.75)),
        (AtomicKind::Min, Datatype::F64, f(1.5), f(-2.0), f(-2.0)),
        (AtomicKind::Max, Datatype::F64, f(1.5), f(-2.0), f(1.5)),
    ];
    for (i, &(kind, dt, start, operand, after)) in cases.iter().enumerate() {
        let ctx = 100 + i as u64;
        let offset = 8 * (1 + i as u64 % 6);
        a.ep.atomic(pb, AtomicKind::Write, dt, start, &rkey, offset, ctx + 1000)
            .unwrap();
        assert_eq!(expect(&mut [&mut a, &mut b], 0, ctx + 1000).result, Ok(()));
        a.ep.fetch_atomic(pb, kind, dt, operand, &rkey, offset, ctx).unwrap();
        let c = expect(&mut [&mut a, &mut b], 0, ctx);
        assert_eq!((c.result.clone(), c.data), (Ok(()), start), "{kind:?} {dt:?} fetched");
        assert!(c.flags.contains(Flags::ATOMIC | Flags::READ), "{:?}", c.flags);
        assert_eq!(word_at(&mr, offset as usize), after, "{kind:?} {dt:?} applied");
    }
    // 32-bit elements: four bytes, the neighbour untouched.
    a.ep.atomic(pb, AtomicKind::Write, Datatype::U64, u64::MAX, &rkey, 56, 50)
        .unwrap();
    expect(&mut [&mut a, &mut b], 0, 50);
    a.ep.fetch_atomic(pb, AtomicKind::Sum, Datatype::I32, 1, &rkey, 56, 51)
        .unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 51).data, u64::from(u32::MAX));
    assert_eq!(word_at(&mr, 56), 0xffff_ffff_0000_0000);
    a.ep.fetch_atomic(
        pb,
        AtomicKind::Sum,
        Datatype::F32,
        2.5f32.to_bits() as u64,
        &rkey,
        60,
        52,
    )
    .unwrap();
    expect(&mut [&mut a, &mut b], 0, 52);
    // Compare-and-swap: swapped when equal, kept otherwise; the old value either way.
    a.ep.atomic(pb, AtomicKind::Write, Datatype::U64, 12, &rkey, 8, 59)
        .unwrap();
    expect(&mut [&mut a, &mut b], 0, 59);
    a.ep.compare_atomic(pb, Datatype::U64, 12, 77, &rkey, 8, 60).unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 60).data, 12);
    a.ep.compare_atomic(pb, Datatype::U64, 12, 88, &rkey, 8, 61).unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 61).data, 77);
    assert_eq!(word_at(&mr, 8), 77);
    // Without a fetch: ATOMIC | WRITE.
    a.ep.atomic(pb, AtomicKind::Sum, Datatype::U64, 3, &rkey, 8, 62)
        .unwrap();
    let c = expect(&mut [&mut a, &mut b], 0, 62);
    assert!(c.flags.contains(Flags::ATOMIC | Flags::WRITE));
    // It completed when sent: a fetch behind it finds it applied.
    a.ep.fetch_atomic(pb, AtomicKind::Read, Datatype::U64, 0, &rkey, 8, 63)
        .unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 63).data, 80);
    assert_eq!(word_at(&mr, 8), 80);
}

#[test]
fn atomics_refuse_bad_keys_bounds_alignment_access_and_kinds() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let mr = b.domain.register(vec![0; 32], Access::REMOTE_READ).unwrap();
    let rkey = rkey_of(&mr);
    if !fetch(&a, pb, AtomicKind::Read, Datatype::U64, 0, &rkey, 0, 1) {
        return;
    }
    assert_eq!(
        expect(&mut [&mut a, &mut b], 0, 1).result,
        Ok(()),
        "reading needs remote read only"
    );
    let refused = |a: &mut Node, b: &mut Node, kind, offset, key: &RemoteKey, ctx| {
        a.ep.fetch_atomic(pb, kind, Datatype::U64, 1, key, offset, ctx).unwrap();
        let c = expect(&mut [a, b], 0, ctx);
        assert!(matches!(c.result, Err(Error::RemoteAccess(_))), "{ctx}: {:?}", c.result);
    };
    refused(&mut a, &mut b, AtomicKind::Sum, 0, &rkey, 2); // needs remote write
    refused(&mut a, &mut b, AtomicKind::Read, 4, &rkey, 3); // misaligned
    refused(&mut a, &mut b, AtomicKind::Read, 32, &rkey, 4); // past the end
    refused(&mut a, &mut b, AtomicKind::Read, 0, &forged(&rkey), 5); // unknown key
    assert_eq!(mr.to_vec().unwrap(), vec![0; 32], "refused atomics touch nothing");
    let bitwise_float = a.ep.atomic(pb, AtomicKind::Bxor, Datatype::F64, 1, &rkey, 0, 6);
    assert!(matches!(bitwise_float, Err(Error::InvalidArgument(_))));
    let blind_read = a.ep.atomic(pb, AtomicKind::Read, Datatype::U64, 0, &rkey, 0, 7);
    assert!(matches!(blind_read, Err(Error::InvalidArgument(_))));
    connection_still_works(&mut a, &mut b, 8);
}

#[test]
fn a_non_fetching_atomic_completes_when_sent_and_delivery_complete_reports_a_refusal() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let pb = a.add(&b);
    let mr = b.domain.register(vec![0; 16], Access::all()).unwrap();
    let rkey = rkey_of(&mr);
    if !fetch(&a, pb, AtomicKind::Read, Datatype::U64, 0, &rkey, 0, 1) {
        return;
    }
    expect(&mut [&mut a, &mut b], 0, 1);
    // Completed without the target being driven: nothing was waited for.
    for i in 0..8 {
        a.ep.atomic(pb, AtomicKind::Sum, Datatype::U64, 5, &rkey, 0, 10 + i)
            .unwrap();
        let c = expect(&mut [&mut a], 0, 10 + i);
        assert_eq!(c.result, Ok(()));
        assert!(c.flags.contains(Flags::ATOMIC | Flags::WRITE), "{:?}", c.flags);
    }
    if !device_mode(&a) {
        assert_eq!(word_at(&mr, 0), 0, "the target, not driven, applied nothing yet");
    }
    // A later fetch to the same peer sees every one of them applied.
    a.ep.fetch_atomic(pb, AtomicKind::Read, Datatype::U64, 0, &rkey, 0, 2)
        .unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 2).data, 40);
    // A bad key: the default completes, and the refusal is counted.
    let counted = |a: &Node| {
        let all = a.ep.counters().unwrap();
        all.iter()
            .find(|(n, _)| *n == "atomics_refused_after_completion")
            .map(|&(_, v)| v)
            .expect("the atomics_refused_after_completion counter")
    };
    a.ep.atomic(pb, AtomicKind::Sum, Datatype::U64, 1, &forged(&rkey), 0, 3)
        .unwrap();
    let refused_later = if device_mode(&a) {
        // A key not granted yet: the atomic asked the target for it and
        // waited for the answer, which is the refusal.
        let c = expect(&mut [&mut a, &mut b], 0, 3);
        assert!(matches!(c.result, Err(Error::RemoteAccess(_))), "{:?}", c.result);
        0
    } else {
        assert_eq!(expect(&mut [&mut a], 0, 3).result, Ok(()));
        drive(&mut [&mut a, &mut b], "the refusal counted", |ns| counted(&*ns[0]) == 1);
        1
    };
    // Asked for delivery, the refusal is the completion's error.
    a.ep.atomic_delivered(pb, AtomicKind::Sum, Datatype::U64, 1, &forged(&rkey), 0, 4)
        .unwrap();
    let c = expect(&mut [&mut a, &mut b], 0, 4);
    assert!(matches!(c.result, Err(Error::RemoteAccess(_))), "{:?}", c.result);
    a.ep.atomic_delivered(pb, AtomicKind::Sum, Datatype::U64, 2, &rkey, 8, 5)
        .unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 5).result, Ok(()));
    assert_eq!(word_at(&mr, 8), 2, "delivered: applied when it completed");
    assert_eq!(word_at(&mr, 0), 40, "refused atomics touch nothing");
    assert_eq!(counted(&a), refused_later);
    connection_still_works(&mut a, &mut b, 6);
}

/// Whether `n`'s domain has the initiators' devices do atomics
/// (`XFER_ATOMIC_MODE` resolved to `device`: verbs on a device with
/// atomics).
fn device_mode(n: &Node) -> bool {
    n.domain.atomic_caps().mode == xfer::AtomicMode::Device
}

#[test]
fn device_atomics_go_by_the_device_once_granted_and_bad_ones_touch_nothing() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let caps = a.domain.atomic_caps();
    if caps.mode != xfer::AtomicMode::Device {
        return eprintln!("skipping: atomics are the target CPU's here ({caps:?})");
    }
    assert!(caps.device_cap.is_some_and(|c| c != "none"), "{caps:?}");
    let pb = a.add(&b);
    let mr = b.domain.register(vec![0; 32], Access::all()).unwrap();
    let rkey = rkey_of(&mr);
    // Refused before any grant: nothing reaches the device.
    let refused = |a: &mut Node, b: &mut Node, dt, offset, key: &RemoteKey, ctx| {
        a.ep.fetch_atomic(pb, AtomicKind::Sum, dt, 1, key, offset, ctx).unwrap();
        let c = expect(&mut [a, b], 0, ctx);
        assert!(matches!(c.result, Err(Error::RemoteAccess(_))), "{ctx}: {:?}", c.result);
    };
    refused(&mut a, &mut b, Datatype::U64, 0, &forged(&rkey), 1);
    refused(&mut a, &mut b, Datatype::U64, 32, &rkey, 2);
    refused(&mut a, &mut b, Datatype::U64, 4, &rkey, 3);
    assert_eq!(counter(&a, "atomics_device"), 0, "refused by the target, in frames");
    // The first good one is granted, then done by the device, as is every
    // later one on the region; bad ones are still the target's to refuse.
    a.ep.fetch_atomic(pb, AtomicKind::Sum, Datatype::U64, 40, &rkey, 0, 4)
        .unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 4).data, 0);
    assert_eq!(counter(&a, "atomics_device"), 1, "one fetch-and-add");
    a.ep.compare_atomic(pb, Datatype::U64, 40, 2, &rkey, 0, 5).unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 5).data, 40);
    assert_eq!(counter(&a, "atomics_device"), 2, "one compare-and-swap");
    refused(&mut a, &mut b, Datatype::U64, 32, &rkey, 6);
    refused(&mut a, &mut b, Datatype::U32, 6, &rkey, 7);
    refused(&mut a, &mut b, Datatype::U64, 0, &forged(&rkey), 8);
    assert_eq!(counter(&a, "atomics_device"), 2);
    assert_eq!(word_at(&mr, 0), 2);
    assert_eq!(mr.to_vec().unwrap()[8..], [0; 24], "refused atomics touch nothing");
    // A 32-bit min through the device: a compare-and-swap on its word, the
    // neighbour kept.
    a.ep.fetch_atomic(pb, AtomicKind::Min, Datatype::I32, (-3i32) as u32 as u64, &rkey, 12, 9)
        .unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 9).data, 0);
    assert_eq!(word_at(&mr, 8), ((-3i32) as u32 as u64) << 32);
    assert_eq!(counter(&a, "atomics_device"), 3, "the guess held: one compare-and-swap");
    // The old values came from the device's write of the result slot: no
    // completion asked the kernel for the QP's state (a system call each).
    let queries =
        a.ep.counters()
            .unwrap()
            .into_iter()
            .find(|(k, _)| *k == "qp_state_queries");
    assert_eq!(queries, Some(("qp_state_queries", 0)), "device atomics queried the QP");
    connection_still_works(&mut a, &mut b, 10);
}

#[test]
fn concurrent_atomic_increments_from_several_endpoints_sum_exactly() {
    const EACH: u64 = 200;
    let mut target = Node::new();
    let mr = target.domain.register(vec![0; 8], Access::all()).unwrap();
    let rkey = rkey_of(&mr);
    let name = target.ep.name();
    let probe = Node::new();
    let probe_peer = probe.av.insert(name.as_bytes()).unwrap();
    match probe
        .ep
        .atomic(probe_peer, AtomicKind::Sum, Datatype::U64, 0, &rkey, 0, 1)
    {
        Err(Error::NotSupported(what)) => return eprintln!("skipping: {what}"),
        r => r.unwrap(),
    }
    let workers: Vec<_> = (0..3)
        .map(|w| {
            std::thread::spawn(move || {
                let mut n = Node::new();
                let peer = n.av.insert(name.as_bytes()).unwrap();
                for i in 0..EACH {
                    let ctx = w * 1_000_000 + i;
                    n.ep.atomic(peer, AtomicKind::Sum, Datatype::U64, 1, &rkey, 0, ctx)
                        .unwrap();
                    assert_eq!(expect(&mut [&mut n], 0, ctx).result, Ok(()));
                }
                // The increments completed when sent; a fetch behind them
                // returns once the target has applied them all, before this
                // endpoint closes.
                let last = w * 1_000_000 + EACH;
                n.ep.fetch_atomic(peer, AtomicKind::Read, Datatype::U64, 0, &rkey, 0, last)
                    .unwrap();
                assert_eq!(expect(&mut [&mut n], 0, last).result, Ok(()));
            })
        })
        .collect();
    let mut probe = probe;
    let deadline = std::time::Instant::now() + common::DEADLINE;
    while workers.iter().any(|w| !w.is_finished()) {
        target.poll();
        probe.poll();
        assert!(std::time::Instant::now() < deadline, "increments did not finish");
    }
    for w in workers {
        w.join().unwrap();
    }
    drive(&mut [&mut target, &mut probe], "the probe's increment", |ns| {
        !ns[1].done.is_empty()
    });
    assert_eq!(word_at(&mr, 0), 3 * EACH, "every increment counted once");
}
