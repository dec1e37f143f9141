//! A peer process killed mid-transfer: every operation to it completes with
//! an error within a bounded time, nothing hangs, and the endpoint keeps
//! serving other peers. The peer is this test binary re-executed
//! (`child_peer`, ignored in normal runs) so it is a real, separate process.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{drive, expect, hex, pattern, unhex, Node};
use xfer::{Error, PeerAddr};

/// The victim: posts one large receive, then polls lazily so transfers to it
/// stall part-way; prints its name and runs until killed.
#[test]
#[ignore = "helper process for peer_killed_mid_transfer"]
fn child_peer() {
    let node = Node::new();
    node.ep.trecv(PeerAddr::UNSPEC, 1, 0, vec![0; 64 << 20], 1).unwrap();
    println!("CHILD-NAME {}", hex(node.ep.name().as_bytes()));
    let mut out = vec![xfer::Completion::EMPTY; 16];
    loop {
        let _ = node.cq.poll(&mut out);
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn peer_killed_mid_transfer() {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_peer", "--ignored", "--nocapture", "--test-threads=1"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let name = loop {
        let line = lines.next().expect("child output").expect("child line");
        // The harness prints "test child_peer ... " before it, on the same line.
        if let Some((_, n)) = line.split_once("CHILD-NAME ") {
            break unhex(n.trim());
        }
    };
    let mut a = Node::new();
    let victim = a.av.insert(&name).unwrap();
    // Receives directed at the victim end with it; any-source ones stay posted.
    a.ep.trecv(victim, 50, 0, vec![0; 16], 5000).unwrap();
    a.ep.recv(victim, vec![0; 16], 5001).unwrap();
    a.ep.trecv(PeerAddr::UNSPEC, 51, 0, vec![0; 16], 5002).unwrap();
    let threshold = common::test_attr().rndv_threshold;
    // One large matched message (stalls in the socket), eager ones, and
    // unexpected rendezvous ones waiting for a clear-to-send.
    a.ep.tsend(victim, 1, pattern(64 << 20, 1), 1000).unwrap();
    for i in 0..50 {
        a.ep.tsend(victim, 2, pattern(1024, i), i).unwrap();
    }
    for i in 50..60 {
        a.ep.tsend(victim, 3, pattern(threshold * 4, i), i).unwrap();
    }
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_millis(500) {
        a.poll();
    }
    assert!(
        a.take(1000).is_none(),
        "the 64 MiB send cannot have finished against a lazy reader"
    );
    child.kill().expect("kill child");
    child.wait().unwrap();
    let killed = Instant::now();
    drive(&mut [&mut a], "all operations on the dead peer", |ns| {
        ns[0].done.len() >= 63
    });
    let bound = Duration::from_secs(10);
    assert!(killed.elapsed() < bound, "errors took {:?}", killed.elapsed());
    let big = a.take(1000).unwrap();
    assert!(gone(&big.result), "{:?}", big.result);
    assert!(big.buf.is_some(), "the buffer comes back");
    for i in 50..60 {
        let c = a.take(i).unwrap();
        assert!(gone(&c.result), "rendezvous {i}: {:?}", c.result);
    }
    for ctx in [5000, 5001] {
        let r = a.take(ctx).unwrap();
        assert!(gone(&r.result), "directed receive {ctx}: {:?}", r.result);
        assert_eq!(r.buf.map(|b| b.len()), Some(16), "the buffer comes back");
    }
    assert!(
        a.take(5002).is_none(),
        "an any-source receive does not depend on one peer"
    );
    // Sends to the dead peer now fail fast instead of hanging.
    a.ep.tsend(victim, 2, vec![1; 10], 2000).unwrap();
    assert!(expect(&mut [&mut a], 0, 2000).result.is_err());
    // The endpoint serves others.
    let mut b = Node::new();
    let pb = a.add(&b);
    b.ep.trecv(PeerAddr::UNSPEC, 9, 0, vec![0; 100], 1).unwrap();
    a.ep.tsend(pb, 9, pattern(100, 9), 3000).unwrap();
    assert_eq!(expect(&mut [&mut a, &mut b], 1, 1).buf.unwrap(), pattern(100, 9));
}

/// The error of an operation on a killed peer: a broken connection (TCP's
/// reset), or the close a transport sees when the kernel tidies up after a
/// killed process (shared memory's socket, rdma_cm's disconnect), which it
/// cannot tell from an exit.
fn gone(r: &Result<(), Error>) -> bool {
    matches!(r, Err(Error::PeerUnreachable { .. } | Error::PeerClosed { .. }))
}
