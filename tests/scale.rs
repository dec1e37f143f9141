//! Many peers: one endpoint (the hub, this process) exchanges tagged traffic
//! with `XFER_SCALE_PEERS` endpoints (default 512) living in a second process
//! (this test binary re-executed as `scale_peers_child`), and the hub's
//! memory per peer is measured (resident set growth / peers, printed; the
//! figure goes into docs/PERFORMANCE.md).
//!
//! Every peer sends `MSGS` checksummed messages to the hub tagged with its
//! index; the hub checks each one, answers each peer once, and each peer
//! checks the answer. Nothing may be lost, duplicated or mixed up between
//! peers.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{hex, pattern, test_attr, unhex, Node};
use xfer::{Completion, PeerAddr};

/// Messages each peer sends to the hub.
const MSGS: u64 = 4;
/// Payload size: eager on every provider.
const LEN: usize = 256;
/// Bound on the whole exchange (512 connections made on first use, on a
/// loaded 2-core machine, with generous slack).
const BOUND: Duration = Duration::from_secs(120);

fn peers() -> usize {
    std::env::var("XFER_SCALE_PEERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512)
}

/// Each endpoint has a few descriptors: raise the soft limit to the hard one.
fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: lim is a valid rlimit to fill / read.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

fn seed(peer: usize, i: u64) -> u64 {
    (peer as u64) << 8 | i
}

/// The peers: one domain, CQ and AV, `peers()` endpoints. Reads the hub's
/// name from stdin, prints every endpoint's name, then sends and waits for
/// the answers; exits 0 when every peer got its answer.
#[test]
#[ignore = "helper process for one_endpoint_with_many_peers"]
fn scale_peers_child() {
    raise_fd_limit();
    let n = peers();
    xfer::init_logging();
    let domain = xfer::open_default().expect("open domain");
    let cq = domain.cq(&xfer::CqAttr::default()).expect("cq");
    let av = domain.av().expect("av");
    let attr = test_attr();
    let eps: Vec<_> = (0..n)
        .map(|_| domain.endpoint(&cq, &av, &attr).expect("endpoint"))
        .collect();
    let mut out = std::io::stdout().lock();
    for ep in &eps {
        writeln!(out, "PEER-NAME {}", hex(ep.name().as_bytes())).unwrap();
    }
    writeln!(out, "PEERS-READY").unwrap();
    out.flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("hub name");
    let hub = av.insert(&unhex(line.trim())).expect("insert hub");
    for (p, ep) in eps.iter().enumerate() {
        ep.trecv(hub, p as u64, 0, vec![0; LEN], (1 << 32) | p as u64).unwrap();
        for i in 0..MSGS {
            ep.tsend(hub, p as u64, pattern(LEN, seed(p, i)), seed(p, i)).unwrap();
        }
    }
    let (mut answers, mut sent) = (0, 0);
    let mut buf = vec![Completion::EMPTY; 256];
    let start = Instant::now();
    while answers < n || sent < n * MSGS as usize {
        let k = cq.poll(&mut buf).expect("poll");
        for c in &mut buf[..k] {
            assert_eq!(c.result, Ok(()), "peer operation {:#x}", c.context);
            if c.context >> 32 == 1 {
                let p = (c.context & 0xffff_ffff) as usize;
                assert_eq!(c.tag, p as u64);
                assert_eq!(c.buf.take().unwrap(), pattern(LEN, seed(p, 99)), "answer to peer {p}");
                answers += 1;
            } else {
                sent += 1;
            }
        }
        assert!(start.elapsed() < BOUND, "peers: {answers} answers, {sent} sends done");
    }
    println!("PEERS-DONE");
}

#[test]
fn one_endpoint_with_many_peers() {
    let n = peers();
    let mut hub = Node::new();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "scale_peers_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the peers");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut names = Vec::with_capacity(n);
    loop {
        let line = lines.next().expect("peers' output").expect("line");
        if line.contains("PEERS-READY") {
            break;
        }
        if let Some((_, name)) = line.split_once("PEER-NAME ") {
            names.push(unhex(name.trim()));
        }
    }
    assert_eq!(names.len(), n, "one name per peer");
    // Baseline: the hub exists, knows no peer, has no connection.
    hub.poll();
    let counters_before = hub.ep.counters().expect("counters");
    let before = common::rss();
    let addrs: Vec<PeerAddr> = names.iter().map(|b| hub.av.insert(b).expect("insert")).collect();
    for (p, &addr) in addrs.iter().enumerate() {
        for i in 0..MSGS {
            hub.ep
                .trecv(addr, p as u64, 0, vec![0; LEN], seed(p, i))
                .expect("post receive");
        }
    }
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{}", hex(hub.ep.name().as_bytes())).unwrap();
    drop(stdin);
    let start = Instant::now();
    let mut got = 0;
    let mut answered = vec![0u64; n];
    while got < n * MSGS as usize {
        hub.poll();
        for c in std::mem::take(&mut hub.done) {
            assert_eq!(c.result, Ok(()), "hub operation {:#x}", c.context);
            if c.context >> 32 == 2 {
                continue; // an answer went out
            }
            let p = (c.context >> 8) as usize;
            assert_eq!(c.src, addrs[p], "message {:#x} from the wrong peer", c.context);
            assert_eq!(
                c.buf.as_deref(),
                Some(&pattern(LEN, c.context)[..]),
                "payload {:#x}",
                c.context
            );
            got += 1;
            answered[p] += 1;
            if answered[p] == MSGS {
                hub.ep
                    .tsend(addrs[p], p as u64, pattern(LEN, seed(p, 99)), (2 << 32) | p as u64)
                    .expect("answer");
            }
        }
        assert!(start.elapsed() < BOUND, "hub: {got} of {} messages", n * MSGS as usize);
    }
    let after = common::rss();
    let counters_after = hub.ep.counters().expect("counters");
    let recv_bytes = |cs: &[(&str, u64)]| cs.iter().find(|(k, _)| *k == "recv_buffer_bytes").map(|&(_, v)| v);
    // Verbs: the receive buffers are the SRQ's, the same for 0 or n peers.
    assert_eq!(
        recv_bytes(&counters_before),
        recv_bytes(&counters_after),
        "receive memory grew with peers"
    );
    // The peers exit once every answer arrived.
    let finished = Instant::now();
    let status = loop {
        hub.poll();
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(finished.elapsed() < BOUND, "the peers did not finish");
    };
    assert!(status.success(), "peers failed: {status}");
    let per_peer = after.saturating_sub(before) / n as u64;
    println!(
        "scale: {n} peers, {got} messages in {:.2?}; hub resident set {} KiB -> {} KiB: {} B per peer; \
         receive buffers {:?} B; counters {:?}",
        start.elapsed(),
        before / 1024,
        after / 1024,
        per_peer,
        recv_bytes(&counters_after),
        counters_after
    );
    // A loose bound that catches a per-peer buffer of the wrong order
    // (e.g. a whole rendezvous-sized allocation per connection).
    assert!(per_peer < 512 * 1024, "{per_peer} B of hub memory per peer");
}
