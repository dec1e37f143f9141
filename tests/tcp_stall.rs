//! The progress timeout (`EndpointAttr::progress_timeout_ms`) against a peer
//! whose process is stopped while its kernel keeps the connection up (TCP,
//! shared memory, whose socket stays open, and verbs, whose device
//! keeps the RC connection, in the Soft-RoCE guest; `XFER_PROVIDER` picks): a
//! child process (this binary again, `XFER_STALL_CHILD=1`) serves by
//! polling and posts no receive. While it runs, a rendezvous send to it
//! waits for a receive that never comes and is not failed (the child
//! answers the probes); once the child is stopped with SIGSTOP, the send
//! fails with `Error::Stalled` within the timeout and a quarter.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{hex, unhex, Node, DEADLINE};
use xfer::Error;

const CHILD: &str = "XFER_STALL_CHILD";
const TIMEOUT_MS: u64 = 1500;
/// Above the default rendezvous threshold: the send waits for the child's receive.
const LARGE: usize = 256 << 10;

/// The child: an endpoint that progresses and receives nothing, until killed.
#[test]
fn stall_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let node = Node::new();
    println!("STALL name {}", hex(node.ep.name().as_bytes()));
    let mut buf = vec![xfer::Completion::EMPTY; 16];
    loop {
        match node.cq.wait(&mut buf, Some(Duration::from_millis(100))) {
            Ok(_) | Err(Error::TimedOut) => {}
            Err(e) => panic!("cq wait: {e}"),
        }
    }
}

/// Kills the child when the test ends, however it ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        // SAFETY: kill has no memory-safety preconditions; the pid is our child's.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGCONT) };
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions; the pid is our child's.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0, "kill({sig})");
}

fn counter(node: &Node, name: &str) -> u64 {
    let c = node.ep.counters().expect("counters");
    c.iter().find(|(k, _)| *k == name).map_or(0, |&(_, v)| v)
}

#[test]
fn a_stopped_peer_fails_waiting_operations_and_a_live_one_does_not() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let provider = std::env::var("XFER_PROVIDER").unwrap_or_default();
    let provider = if provider.is_empty() {
        xfer::open_default().expect("the default domain").provider().to_string()
    } else {
        provider
    };
    if !["tcp", "shm", "shm+tcp", "verbs", "shm+verbs"].contains(&provider.as_str()) {
        eprintln!("the progress timeout test: skipped over {provider}");
        return;
    }
    let mut child = Command::new(std::env::current_exe().expect("own test binary"))
        .args(["--exact", "stall_child", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("XFER_PROVIDER", &provider)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the child");
    let out = BufReader::new(child.stdout.take().expect("stdout"));
    let child = Reaped(child);
    let name = out
        .lines()
        .map_while(|l| l.ok())
        .find_map(|l| l.find("STALL name ").map(|i| l[i + 11..].trim().to_string()))
        .expect("the child's name");
    let mut attr = common::test_attr();
    attr.progress_timeout_ms = TIMEOUT_MS;
    let mut a = Node::with_attr(&attr);
    let peer = a.av.insert(&unhex(&name)).expect("av insert");
    a.ep.tsend(peer, 1, vec![1; LARGE], 1).expect("tsend");

    // Alive: the send waits for a receive the child never posts, for three
    // timeouts, and is not failed: the child answers the probes.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(3 * TIMEOUT_MS) {
        a.poll();
        assert!(a.take(1).is_none(), "the send to a live peer ended");
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(counter(&a, "progress_probes") >= 1, "a silent peer was not probed");
    assert_eq!(counter(&a, "peers_stalled"), 0);

    // Stopped: the send fails as stalled.
    signal(&child.0, libc::SIGSTOP);
    let stopped = Instant::now();
    let c = common::expect(&mut [&mut a], 0, 1);
    let took = stopped.elapsed();
    assert_eq!(c.result, Err(Error::Stalled { peer }), "after {took:?}");
    assert_eq!(c.result.as_ref().map_err(Error::code), Err(-libc::ETIMEDOUT));
    eprintln!("the send to the stopped peer failed after {took:?} (timeout {TIMEOUT_MS} ms)");
    assert!(took < DEADLINE);
    assert_eq!(counter(&a, "peers_stalled"), 1);
}
