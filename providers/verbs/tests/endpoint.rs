//! The verbs endpoint through the core API, against a real device
//! (Soft-RoCE in the test guest). Provider-independent behaviour is covered
//! by the root conformance suite (run with `XFER_PROVIDER=verbs` in the
//! guest); these check the verbs-specific paths: inline sends, the send
//! queue under selective signaling, the SRQ under a flood of unexpected
//! messages from many peers, a killed peer, and keepalive probes to a
//! slow one.
//!
//! Skips (passing) without a device unless `XFER_IN_GUEST=1` or
//! `XFER_VERBS_REQUIRE=1`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use xfer_core::unstable::attr::{CqAttr, EndpointAttr};
use xfer_core::{Completion, CompletionQueue, Domain, Endpoint, Error, PeerAddr, SendOp};
use xfer_verbs::{VerbsAttr, VerbsDomain};

const DEADLINE: Duration = Duration::from_secs(120);
const ANY: PeerAddr = PeerAddr::UNSPEC;

fn required() -> bool {
    std::env::var("XFER_IN_GUEST").is_ok_and(|v| v == "1")
        || std::env::var("XFER_VERBS_REQUIRE").is_ok_and(|v| v == "1")
}

/// A domain on the device, or None (skip) without one.
fn domain(attr: VerbsAttr) -> Option<Domain> {
    match VerbsDomain::with_attr(attr) {
        Ok(d) => Some(Domain::new(Box::new(d))),
        Err(e) => {
            assert!(!required(), "verbs device required: {e}");
            eprintln!("SKIP: no verbs device ({e})");
            None
        }
    }
}

struct Node {
    cq: CompletionQueue,
    av: xfer_core::AddressVector,
    ep: Endpoint,
    done: Vec<Completion>,
    _domain: Domain,
}

impl Node {
    fn new(attr: VerbsAttr, ep_attr: &EndpointAttr) -> Option<Node> {
        let domain = domain(attr)?;
        let cq = domain.cq(&CqAttr::default()).unwrap();
        let av = domain.av().unwrap();
        let ep = domain.endpoint(&cq, &av, ep_attr).unwrap();
        Some(Node {
            cq,
            av,
            ep,
            done: Vec::new(),
            _domain: domain,
        })
    }

    fn add(&self, other: &Node) -> PeerAddr {
        self.av.insert(other.ep.name().as_bytes()).unwrap()
    }

    fn poll(&mut self) -> usize {
        let mut out = vec![Completion::EMPTY; 64];
        let n = self.cq.poll(&mut out).unwrap();
        self.done.extend(out.drain(..n));
        n
    }

    fn counter(&self, name: &str) -> u64 {
        let c: HashMap<_, _> = self.ep.counters().unwrap().into_iter().collect();
        *c.get(name).unwrap_or_else(|| panic!("no counter {name}"))
    }
}

/// Two nodes with the environment's verbs settings; `None` without a device.
fn pair(ea: &EndpointAttr) -> Option<(Node, Node)> {
    Some((
        Node::new(VerbsAttr::from_env(), ea)?,
        Node::new(VerbsAttr::from_env(), ea)?,
    ))
}

fn drive(nodes: &mut [&mut Node], what: &str, mut done: impl FnMut(&mut [&mut Node]) -> bool) {
    let start = Instant::now();
    while !done(nodes) {
        for n in nodes.iter_mut() {
            n.poll();
        }
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
    }
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len).map(|i| (i as u64 * 13 + seed * 7) as u8).collect()
}

#[test]
fn small_sends_go_inline_and_large_ones_by_rendezvous() {
    let ea = EndpointAttr::default();
    let Some((mut a, mut b)) = pair(&ea) else {
        return;
    };
    let pb = a.add(&b);
    let sizes = [8usize, 100, 4000, 200_000];
    for (i, &size) in sizes.iter().enumerate() {
        b.ep.trecv(ANY, i as u64, 0, vec![0; size], i as u64).unwrap();
        a.ep.tsend(pb, i as u64, pattern(size, i as u64), 100 + i as u64)
            .unwrap();
    }
    drive(&mut [&mut a, &mut b], "4 messages", |n| {
        n[0].done.len() == sizes.len() && n[1].done.len() == sizes.len()
    });
    for c in &b.done {
        assert_eq!(c.result, Ok(()));
        let i = c.context as usize;
        assert_eq!(c.buf.as_deref(), Some(&pattern(sizes[i], i as u64)[..]), "message {i}");
    }
    assert!(a.counter("inline_sends") >= 1, "an 8-byte send went inline");
    assert!(a.counter("copied_sends") >= 1, "a 4000-byte send was copied");
    assert_eq!(a.counter("rndv_sends"), 1, "the 200 kB send used rendezvous");
}

#[test]
fn unsignaled_sends_never_overflow_a_64_deep_send_queue() {
    let n: u64 = std::env::var("XFER_VERBS_TEST_UNSIGNALED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let va = VerbsAttr {
        sq_depth: 64,
        signal_every: 16,
        ..VerbsAttr::from_env()
    };
    let mut ea = EndpointAttr::default();
    ea.selective_completion = true;
    let (Some(mut a), Some(mut b)) = (Node::new(va.clone(), &ea), Node::new(va, &EndpointAttr::default())) else {
        return;
    };
    let pb = a.add(&b);
    let window = 512u64;
    let (mut posted_recv, mut sent) = (0u64, 0u64);
    let start = Instant::now();
    while b.done.len() < n as usize {
        while posted_recv < n && posted_recv < b.done.len() as u64 + window {
            b.ep.trecv(ANY, 0, 0, vec![0; 16], posted_recv).unwrap();
            posted_recv += 1;
        }
        while sent < n && sent < b.done.len() as u64 + 2 * window {
            let op = SendOp {
                peer: pb,
                tag: Some(0),
                data: None,
                buf: sent.to_le_bytes().to_vec().into(),
                context: sent,
                completion: sent == n - 1,
                level: Default::default(),
            };
            a.ep.post_send(op).unwrap();
            sent += 1;
        }
        a.poll();
        b.poll();
        assert!(start.elapsed() < DEADLINE, "{} of {n} arrived", b.done.len());
    }
    drive(&mut [&mut a, &mut b], "the last send's completion", |x| {
        !x[0].done.is_empty()
    });
    assert_eq!(
        a.done.len(),
        1,
        "only the send that asked reports: {:?}",
        &a.done[..2.min(a.done.len())]
    );
    for (i, c) in b.done.iter().enumerate() {
        assert_eq!(c.result, Ok(()));
        assert_eq!(
            c.buf.as_deref().map(|b| &b[..8]),
            Some(&(i as u64).to_le_bytes()[..]),
            "order"
        );
    }
    let depth = a.counter("sq_depth");
    assert_eq!(depth, 64);
    assert!(a.counter("max_sq_outstanding") <= depth, "send queue overflowed");
    assert!(a.counter("unsignaled") > n / 2, "most sends were unsignaled");
}

#[test]
fn eight_peers_flooding_unexpected_messages_keep_the_srq_fed() {
    // What each peer's initial eager credit pays for (128 KiB at 64 + 256
    // bytes a message): with nothing posted, the rest would wait for
    // credit the receiver returns only as receives take messages.
    let per_peer = 400u64;
    let peers = 8u64;
    let total = (per_peer * peers) as usize;
    let va = VerbsAttr {
        srq_size: 256,
        srq_low_watermark: 64,
        ..VerbsAttr::from_env()
    };
    // Each sender keeps at most 32 sends in flight: 8 x 32 fills the SRQ
    // exactly, so it runs dry only if refills lag. (With 8 x 256 in flight,
    // rxe under emulation drops, retransmits go-back-N and sometimes crawls
    // for minutes: a test of rxe, not of the SRQ.)
    let tx_attr = VerbsAttr {
        sq_depth: 32,
        signal_every: 8,
        ..va.clone()
    };
    let ea = EndpointAttr::default();
    let Some(mut rx) = Node::new(va, &ea) else {
        return;
    };
    let mut senders: Vec<Node> = (0..peers).map(|_| Node::new(tx_attr.clone(), &ea).unwrap()).collect();
    for (p, s) in senders.iter().enumerate() {
        let dest = s.add(&rx);
        for i in 0..per_peer {
            let tag = (p as u64) << 32 | i;
            s.ep.tsend(dest, tag, pattern(64, tag), tag).unwrap();
        }
    }
    // Nothing is posted: every message arrives unexpected.
    let start = Instant::now();
    while senders.iter().map(|s| s.done.len()).sum::<usize>() < total {
        for s in senders.iter_mut() {
            s.poll();
        }
        rx.poll();
        assert!(start.elapsed() < DEADLINE, "senders stalled");
    }
    for c in senders.iter().flat_map(|s| &s.done) {
        assert_eq!(c.result, Ok(()), "send {:#x}", c.context);
    }
    assert!(rx.counter("srq_refills") > 0, "the SRQ was refilled");
    for p in 0..peers {
        for i in 0..per_peer {
            let tag = p << 32 | i;
            rx.ep.trecv(ANY, tag, 0, vec![0; 64], tag).unwrap();
        }
    }
    drive(&mut [&mut rx], "3,200 receives", |n| n[0].done.len() == total);
    for c in &rx.done {
        assert_eq!(c.result, Ok(()));
        assert_eq!(c.buf.as_deref(), Some(&pattern(64, c.context)[..]));
    }
}

/// The receive-memory account over verbs: a receiver whose limit has room
/// for two connections' initial credit and state refuses the third peer's
/// connection request (its send fails with `ECONNREFUSED`), keeps the two
/// others' messages, and, once receives took them and the two left, has
/// nothing committed.
#[test]
fn a_peer_past_the_receive_memory_is_refused() {
    let mut small = EndpointAttr::default();
    small.rx_memory = 2 * (128 << 10) + (64 << 10);
    let Some(mut rx) = Node::new(VerbsAttr::from_env(), &small) else {
        return;
    };
    let ea = EndpointAttr::default();
    let mut senders: Vec<Node> = (0..3).map(|_| Node::new(VerbsAttr::from_env(), &ea).unwrap()).collect();
    for (i, s) in senders.iter_mut().enumerate() {
        let dest = s.add(&rx);
        s.ep.tsend(dest, 5, pattern(64, i as u64), i as u64).unwrap();
        // One at a time, so which peer is refused is known.
        let mut nodes: Vec<&mut Node> = vec![&mut rx, s];
        drive(&mut nodes, "the send", |n| !n[1].done.is_empty());
    }
    for (i, s) in senders.iter().enumerate() {
        let r = &s.done[0].result;
        if i < 2 {
            assert_eq!(*r, Ok(()), "sender {i}");
        } else {
            assert!(
                matches!(r, Err(Error::PeerUnreachable { errno, .. }) if *errno == libc::ECONNREFUSED),
                "the third peer is refused: {r:?}"
            );
        }
    }
    assert_eq!(rx.counter("rx_memory_refused"), 1);
    assert_eq!(rx.counter("unexpected_entries"), 2);
    for i in 0..2u64 {
        rx.ep.trecv(ANY, 5, 0, vec![0; 64], 100 + i).unwrap();
    }
    drive(&mut [&mut rx], "two receives", |n| n[0].done.len() == 2);
    drop(senders);
    drive(&mut [&mut rx], "the senders' departure", |n| {
        n[0].counter("rx_memory") == 0
    });
}

#[test]
fn a_killed_peer_gives_errors_not_a_hang() {
    let ea = EndpointAttr::default();
    let Some(mut a) = Node::new(VerbsAttr::from_env(), &ea) else {
        return;
    };
    // The peer lives in a child process that is killed mid-conversation.
    let mut fds = [0i32; 2];
    // SAFETY: fds is valid for two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child only uses async-signal-safe calls until it opens
    // its own verbs objects (it execs nothing and never returns).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let mut b = Node::new(VerbsAttr::from_env(), &ea).unwrap();
        let name = b.ep.name();
        // SAFETY: writing the name bytes to the pipe.
        unsafe { libc::write(fds[1], name.as_bytes().as_ptr().cast(), name.as_bytes().len()) };
        b.ep.trecv(ANY, 0, 0, vec![0; 8], 1).unwrap();
        loop {
            b.poll();
        }
    }
    let mut name = [0u8; 64];
    // SAFETY: reading into a local buffer.
    let n = unsafe { libc::read(fds[0], name.as_mut_ptr().cast(), name.len()) };
    assert!(n > 0);
    let pb = a.av.insert(&name[..n as usize]).unwrap();
    a.ep.tsend(pb, 0, b"hello".to_vec(), 1).unwrap();
    drive(&mut [&mut a], "first send", |x| !x[0].done.is_empty());
    assert_eq!(a.done[0].result, Ok(()));
    // SAFETY: killing and reaping our own child.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    for i in 0..20u64 {
        a.ep.tsend(pb, 0, vec![1; 64], 10 + i).unwrap();
    }
    a.ep.tsend(pb, 0, vec![2; 1 << 20], 99).unwrap();
    drive(&mut [&mut a], "error completions", |x| x[0].done.len() == 22);
    // The killed process's kernel disconnects its connection: that reads as
    // a close when the disconnect request arrives first, as a failure when a
    // work completion errs first.
    for c in &a.done[1..] {
        assert!(
            matches!(
                c.result,
                Err(Error::PeerUnreachable { .. } | Error::PeerClosed { .. }) | Ok(())
            ),
            "{:?}",
            c.result
        );
        assert!(c.buf.is_some(), "the buffer comes back");
    }
    assert!(a.done[1..].iter().any(|c| c.result.is_err()), "the death was noticed");
}

#[test]
fn a_name_of_an_earlier_endpoint_at_the_same_address_is_refused() {
    let ea = EndpointAttr::default();
    let Some((mut a, mut b)) = pair(&ea) else {
        return;
    };
    // b's address and port with another nonce: the name an earlier process
    // listening there would have had.
    let mut stale = b.ep.name().as_bytes().to_vec();
    stale[8] ^= 0xff;
    let old = a.av.insert(&stale).unwrap();
    b.ep.trecv(ANY, 7, 0, vec![0; 64], 1).unwrap();
    a.ep.tsend(old, 7, pattern(64, 1), 10).unwrap();
    a.ep.tsend(old, 7, pattern(300_000, 2), 11).unwrap();
    drive(&mut [&mut a, &mut b], "the sends to the stale name", |n| {
        n[0].done.len() == 2
    });
    for c in &a.done {
        assert!(
            matches!(c.result, Err(Error::PeerUnreachable { errno, .. }) if errno == libc::ECONNREFUSED),
            "send {} to a stale name: {:?}",
            c.context,
            c.result
        );
    }
    assert!(
        b.done.is_empty(),
        "the new endpoint got something meant for the old one"
    );
    // The real name still works, and gets the receive b posted.
    let pb = a.add(&b);
    a.ep.tsend(pb, 7, pattern(64, 3), 12).unwrap();
    drive(&mut [&mut a, &mut b], "a send to the real name", |n| {
        !n[1].done.is_empty()
    });
    assert_eq!(b.done[0].result, Ok(()));
    assert_eq!(b.done[0].buf.as_deref(), Some(&pattern(64, 3)[..]));
}

/// A rendezvous send waits for a receiver whose process does nothing for
/// a while: keepalive probes go out (its device answers them), none of
/// them reaches the completion queue, and the connection survives: the
/// send completes once the receive is posted.
#[test]
fn keepalive_probes_leave_a_slow_peer_connected() {
    let va = VerbsAttr {
        keepalive_ms: 50,
        ..VerbsAttr::from_env()
    };
    let ea = EndpointAttr::default();
    let (Some(mut a), Some(mut b)) = (Node::new(va.clone(), &ea), Node::new(va, &ea)) else {
        return;
    };
    let pb = a.add(&b);
    b.ep.trecv(ANY, 1, 0, vec![0; 8], 1).unwrap();
    a.ep.tsend(pb, 1, pattern(8, 1), 1).unwrap();
    drive(&mut [&mut a, &mut b], "the first message", |n| {
        n[0].done.len() == 1 && n[1].done.len() == 1
    });
    let before = a.counter("keepalive_probes");
    a.ep.tsend(pb, 2, pattern(200_000, 2), 2).unwrap();
    // Only a progresses: b is a slow peer.
    let quiet = Instant::now() + Duration::from_secs(1);
    while Instant::now() < quiet {
        a.poll();
    }
    assert_eq!(
        a.done.len(),
        1,
        "the rendezvous send waits for its receiver: {:?}",
        a.done
    );
    let probes = a.counter("keepalive_probes") - before;
    assert!(probes >= 3, "{probes} keepalive probes in 1 s at 50 ms");
    b.ep.trecv(ANY, 2, 0, vec![0; 200_000], 2).unwrap();
    drive(&mut [&mut a, &mut b], "the rendezvous", |n| {
        n[0].done.len() == 2 && n[1].done.len() == 2
    });
    assert_eq!(a.done[1].result, Ok(()), "the send after the probes");
    assert_eq!(b.done[1].result, Ok(()));
    assert_eq!(b.done[1].buf.as_deref(), Some(&pattern(200_000, 2)[..]));
    assert_eq!(a.counter("connections"), 1, "no reconnection");
}

#[test]
fn a_peer_without_the_job_key_is_refused_and_one_with_it_served() {
    let keyed = |key: Option<&[u8]>| {
        let mut ea = EndpointAttr::default();
        ea.job_key = key.map(|k| xfer_core::JobKey(k.to_vec()));
        Node::new(VerbsAttr::from_env(), &ea)
    };
    let Some(mut server) = keyed(Some(b"the job's key")) else {
        return;
    };
    for tag in 1..=3u64 {
        server.ep.trecv(ANY, tag, 0, vec![0; 64], 100 + tag).unwrap();
    }
    // A send of `tag` from `client`: its completion (the server progresses too).
    let mut send_from = |client: &mut Node, tag: u64| {
        let dest = client.add(&server);
        client.ep.tsend(dest, tag, pattern(16, tag), tag).unwrap();
        drive(&mut [&mut server, client], "the send", |n| !n[1].done.is_empty());
        client.done[0].result.clone()
    };

    // Without a key: challenged, and the client learns why.
    let mut none = keyed(None).unwrap();
    let r = send_from(&mut none, 1);
    assert!(
        matches!(r, Err(Error::Protocol(why)) if why.contains("job key")),
        "without a key: {r:?}"
    );
    // With another key: its proof is refused.
    let mut other = keyed(Some(b"another key")).unwrap();
    let r = send_from(&mut other, 2);
    assert!(
        matches!(r, Err(Error::PeerUnreachable { errno, .. }) if errno == libc::ECONNREFUSED),
        "with another key: {r:?}"
    );
    // With the key: served.
    let mut good = keyed(Some(b"the job's key")).unwrap();
    assert_eq!(send_from(&mut good, 3), Ok(()));
    drive(&mut [&mut server, &mut good], "the keyed message", |n| {
        !n[0].done.is_empty()
    });
    let got = &server.done[0];
    assert_eq!((got.context, got.result.clone()), (103, Ok(())));
    assert_eq!(got.buf.as_deref().map(|b| &b[..16]), Some(&pattern(16, 3)[..]));

    // Nothing the refused peers sent was delivered, and neither had a connection.
    let quiet = Instant::now() + Duration::from_millis(200);
    while Instant::now() < quiet {
        server.poll();
    }
    assert_eq!(server.done.len(), 1, "a refused peer's message arrived");
    assert_eq!(server.counter("admission_refused"), 1, "the wrong proof counted");
    assert_eq!(server.counter("admission_challenges"), 3);
    assert_eq!(server.counter("connections"), 1);
}

/// Verbs settings size the domain's device resources: one given on an
/// endpoint's params is refused, naming the key, and the domain's own params
/// (`VerbsDomain::with_params`) take them, a misspelt key refused there.
#[test]
fn verbs_settings_belong_to_the_domain() {
    let mut params = xfer_core::Params::new();
    params.set("verbs.srq_size", "512");
    let d = match VerbsDomain::with_params(&params) {
        Ok(d) => d,
        Err(e) => {
            assert!(!required(), "verbs device required: {e}");
            eprintln!("SKIP: no verbs device ({e})");
            return;
        }
    };
    assert_eq!(d.attr().srq_size, 512);
    let domain = Domain::new(Box::new(d));
    let cq = domain.cq(&CqAttr::default()).unwrap();
    let av = domain.av().unwrap();
    let mut ea = EndpointAttr::from_env();
    ea.params.set("verbs.srq_size", "64");
    match domain.endpoint(&cq, &av, &ea) {
        Err(Error::InvalidSetting(why)) => assert!(why.contains("verbs.srq_size"), "{why}"),
        other => panic!("a verbs key on an endpoint: {:?}", other.map(|_| ())),
    }
    ea.params = xfer_core::Params::new();
    ea.params.set("tcp.coalesce", "0"); // another transport's: left alone
    domain.endpoint(&cq, &av, &ea).expect("an endpoint without verbs keys");
    params.set("verbs.srq_sise", "512");
    match VerbsDomain::with_params(&params) {
        Err(Error::InvalidSetting(why)) => assert!(why.contains("verbs.srq_sise"), "{why}"),
        other => panic!("a misspelt verbs key: {:?}", other.map(|_| ())),
    }
}
