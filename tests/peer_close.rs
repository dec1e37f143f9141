//! A peer that closes its endpoint in order is told apart from one whose
//! connection failed: what was still outstanding to it ends with
//! `Error::PeerClosed` (C: `XFER_ECONNRESET`), not `PeerUnreachable`. The
//! peer is this test binary re-executed (`closing_peer`, ignored in normal
//! runs), so the close crosses real sockets between real processes; it
//! closes its endpoint and then waits, alive, so the close, not the end of
//! its process, is what the survivor sees.

mod common;

use std::io::{BufRead, BufReader, Lines, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use common::{drive, expect, hex, pattern, unhex, Node};
use xfer::{Error, PeerAddr, PeerEventKind};

/// Reads the child's lines until one carries `key`; returns what follows it.
fn line_with(lines: &mut impl Iterator<Item = std::io::Result<String>>, key: &str) -> String {
    loop {
        let line = lines.next().expect("child output").expect("child line");
        // The harness prints "test closing_peer ... " before it, on the same line.
        if let Some((_, rest)) = line.split_once(key) {
            return rest.trim().to_string();
        }
    }
}

/// The closing side: receives one message (so a connection exists), then
/// on "close" drops its endpoint and domain, says so, and waits for "exit".
#[test]
#[ignore = "helper process for the tests of this file"]
fn closing_peer() {
    let mut node = Node::new();
    println!("PEER-NAME {}", hex(node.ep.name().as_bytes()));
    node.ep.trecv(PeerAddr::UNSPEC, 1, 0, vec![0; 64], 1).unwrap();
    expect(&mut [&mut node], 0, 1);
    let mut stdin = std::io::stdin().lock().lines();
    assert_eq!(stdin.next().unwrap().unwrap(), "close");
    drop(node);
    println!("PEER-CLOSED");
    assert_eq!(stdin.next().unwrap().unwrap(), "exit");
}

/// A running `closing_peer` process.
struct Peer {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    /// Its handle in the survivor's address vector.
    addr: PeerAddr,
}

impl Peer {
    /// Starts one and connects `a` to it (one message from `a` arrived).
    fn connected(a: &mut Node) -> Peer {
        let exe = std::env::current_exe().unwrap();
        let mut child = Command::new(exe)
            .args(["--exact", "closing_peer", "--ignored", "--nocapture"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn child");
        let stdin = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let name = unhex(&line_with(&mut lines, "PEER-NAME "));
        let addr = a.av.insert(&name).unwrap();
        a.ep.tsend(addr, 1, pattern(64, 1), 100).unwrap();
        assert_eq!(expect(&mut [a], 0, 100).result, Ok(()));
        Peer {
            child,
            stdin,
            lines,
            addr,
        }
    }

    /// Has it close its endpoint; returns once it did.
    fn close(&mut self) {
        writeln!(self.stdin, "close").unwrap();
        line_with(&mut self.lines, "PEER-CLOSED");
    }

    /// Lets it exit and checks that it succeeded.
    fn exit(mut self) {
        writeln!(self.stdin, "exit").unwrap();
        assert!(self.child.wait().unwrap().success());
    }
}

#[test]
fn outstanding_operations_end_with_peer_closed() {
    let mut a = Node::new();
    let mut p = Peer::connected(&mut a);
    let peer = p.addr;
    // Outstanding to the peer when it closes: receives directed at it, and a
    // rendezvous send it never matches (it waits for a clear-to-send).
    a.ep.trecv(peer, 2, 0, vec![0; 16], 200).unwrap();
    a.ep.recv(peer, vec![0; 16], 201).unwrap();
    a.ep.trecv(PeerAddr::UNSPEC, 3, 0, vec![0; 16], 202).unwrap();
    let big = common::test_attr().rndv_threshold * 4;
    a.ep.tsend(peer, 9, pattern(big, 9), 203).unwrap();
    p.close();
    drive(&mut [&mut a], "the operations outstanding to the closed peer", |ns| {
        [200, 201, 203]
            .iter()
            .all(|c| ns[0].done.iter().any(|d| d.context == *c))
    });
    for ctx in [200, 201, 203] {
        let c = a.take(ctx).unwrap();
        assert_eq!(c.result, Err(Error::PeerClosed { peer }), "operation {ctx}");
        assert!(c.buf.is_some(), "the buffer comes back");
        let e = c.result.unwrap_err();
        assert_eq!(e.code(), -libc::ECONNRESET);
        assert_eq!(std::io::Error::from(e).kind(), std::io::ErrorKind::ConnectionReset);
    }
    assert!(
        a.take(202).is_none(),
        "an any-source receive does not depend on one peer"
    );
    // The peer is gone: a new send to it is refused (nothing listens there).
    a.ep.tsend(peer, 1, vec![1; 10], 300).unwrap();
    let late = expect(&mut [&mut a], 0, 300).result;
    assert!(
        matches!(late, Err(Error::PeerUnreachable { errno, .. }) if errno == libc::ECONNREFUSED),
        "{late:?}"
    );
    p.exit();
    // The endpoint serves others.
    let mut b = Node::new();
    let pb = a.add(&b);
    b.ep.trecv(PeerAddr::UNSPEC, 9, 0, vec![0; 100], 1).unwrap();
    a.ep.tsend(pb, 9, pattern(100, 9), 400).unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 1, 1).buf.unwrap(), pattern(100, 9));
}

/// Polls `nodes` until node 0 has a peer event; fails after the harness's deadline.
fn next_event(nodes: &mut [&mut Node]) -> xfer::PeerEvent {
    let mut got = None;
    drive(nodes, "a peer event", |ns| {
        got = ns[0].ep.peer_event().expect("peer_event");
        got.is_some()
    });
    got.unwrap()
}

#[test]
fn peer_events_say_who_joined_and_who_left() {
    let mut attr = common::test_attr();
    attr.peer_events = 16;
    let mut a = Node::with_attr(&attr);
    assert_eq!(a.ep.peer_event().unwrap(), None, "nobody yet");
    // A peer we dialled (a separate process) joins under its handle.
    let mut p = Peer::connected(&mut a);
    let child_name = a.av.lookup(p.addr).unwrap();
    let ev = next_event(&mut [&mut a]);
    assert_eq!((ev.peer, ev.name, ev.kind), (p.addr, child_name, PeerEventKind::Joined));
    // A peer that dialled us first joins with its name and no handle yet.
    let mut b = Node::new();
    let pa = b.add(&a);
    b.ep.tsend(pa, 5, pattern(8, 5), 1).unwrap();
    let ev = next_event(&mut [&mut a, &mut b]);
    assert_eq!(
        (ev.peer, ev.name, ev.kind),
        (PeerAddr::UNSPEC, b.ep.name(), PeerEventKind::Joined)
    );
    // Traffic on an existing connection, or a second one, is no new join.
    let pb = a.add(&b);
    b.ep.trecv(PeerAddr::UNSPEC, 6, 0, vec![0; 8], 2).unwrap();
    a.ep.tsend(pb, 6, pattern(8, 6), 3).unwrap();
    expect(&mut [&mut a, &mut b], 1, 2);
    // The child closes its endpoint: it left in order.
    p.close();
    let ev = next_event(&mut [&mut a, &mut b]);
    assert_eq!((ev.peer, ev.name, ev.kind), (p.addr, child_name, PeerEventKind::Closed));
    p.exit();
    // b closes (in this process): it left too, now under its handle.
    drop(b);
    let ev = next_event(&mut [&mut a]);
    assert_eq!((ev.peer, ev.kind), (pb, PeerEventKind::Closed));
    assert_eq!(a.ep.peer_event().unwrap(), None, "nothing more");
    let lost =
        a.ep.counters()
            .unwrap()
            .into_iter()
            .find(|(n, _)| *n == "peer_events_lost");
    assert_eq!(lost, Some(("peer_events_lost", 0)));
}

#[test]
fn peer_events_are_off_by_default() {
    let mut a = Node::new();
    let mut b = Node::new();
    let pb = a.add(&b);
    b.ep.trecv(PeerAddr::UNSPEC, 1, 0, vec![0; 8], 1).unwrap();
    a.ep.tsend(pb, 1, pattern(8, 1), 2).unwrap();
    expect(&mut [&mut a, &mut b], 1, 1);
    drop(b);
    drive(&mut [&mut a], "b's close", |ns| {
        ns[0]
            .ep
            .counters()
            .unwrap()
            .iter()
            .any(|(n, v)| *n == "connections" && *v == 0)
    });
    assert_eq!(a.ep.peer_event().unwrap(), None);
}
