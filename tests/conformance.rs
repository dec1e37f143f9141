//! The provider conformance suite: semantics every provider must honour,
//! written against the public API only. `XFER_PROVIDER` picks the provider
//! (the Soft-RoCE run sets `verbs`); everything here runs unchanged on each.

mod common;

use common::{drive, expect, pattern, test_attr, Node};
use xfer::{Buffer, Error, Flags, PeerAddr, RecvOp, RecvSpec, SendOp};

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
    };
    let loud = SendOp {
        peer: pb,
        tag: Some(0),
        data: None,
        buf: vec![2; 8].into(),
        context: 12,
        completion: true,
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
    assert!(a.ep.cancel(77).is_err(), "cancelling twice fails");
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
    let mut pfd = libc::pollfd {
        fd: a.cq.fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `pfd` is a valid pollfd for the duration of the call.
    let n = unsafe { libc::poll(&mut pfd, 1, common::DEADLINE.as_millis() as i32) };
    assert_eq!(n, 1, "the descriptor became readable");
    assert_eq!(expect(&mut [&mut a], 0, 1).buf.unwrap(), pattern(8, 7));
    assert_eq!(sender.join().unwrap(), Ok(()));
}
