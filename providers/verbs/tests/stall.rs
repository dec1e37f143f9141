//! The progress timeout (`EndpointAttr::progress_timeout_ms`) on verbs,
//! against a peer whose process is stopped while its device keeps
//! acknowledging (RC retries and the keepalive's probes succeed): a child
//! process (this binary again, `XFER_VERBS_STALL_CHILD=1`) serves by
//! waiting on its completion queue and posts no receive. While it runs, a
//! rendezvous send to it waits for a receive that never comes and is not
//! failed (the child answers the pings); once the child is stopped with
//! SIGSTOP, that send and one posted after the stop fail with
//! `Error::Stalled` (within the timeout and a quarter of the last word from
//! the child, plus however late this process looks; the time is printed).
//!
//! Guest step `verbs_stall` (tests/vm/all.sh runs every xfer-verbs test
//! binary). Skips (passing) without a device unless `XFER_IN_GUEST=1` or
//! `XFER_VERBS_REQUIRE=1`.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use xfer_core::unstable::attr::{CqAttr, EndpointAttr};
use xfer_core::{Completion, CompletionQueue, Domain, Endpoint, Error};
use xfer_verbs::{VerbsAttr, VerbsDomain};

const CHILD: &str = "XFER_VERBS_STALL_CHILD";
/// Generous for the emulated guest, where a round trip takes tens of µs
/// and a process may not run for a while.
const TIMEOUT_MS: u64 = 2000;
/// Above every eager limit: the send waits for the child's receive (FIN).
const LARGE: usize = 1 << 20;
const DEADLINE: Duration = Duration::from_secs(60);

fn required() -> bool {
    std::env::var("XFER_IN_GUEST").is_ok_and(|v| v == "1")
        || std::env::var("XFER_VERBS_REQUIRE").is_ok_and(|v| v == "1")
}

/// An endpoint on the device with `attr`, or `None` (skip) without one.
fn open(attr: &EndpointAttr) -> Option<(Endpoint, CompletionQueue, xfer_core::AddressVector, Domain)> {
    let domain = match VerbsDomain::with_attr(VerbsAttr::from_env()) {
        Ok(d) => Domain::new(Box::new(d)),
        Err(e) => {
            assert!(!required(), "verbs device required: {e}");
            eprintln!("SKIP: no verbs device ({e})");
            return None;
        }
    };
    let cq = domain.cq(&CqAttr::default()).expect("cq");
    let av = domain.av().expect("av");
    let ep = domain.endpoint(&cq, &av, attr).expect("endpoint");
    Some((ep, cq, av, domain))
}

/// The child: an endpoint that progresses (blocking waits) and receives
/// nothing, until killed.
#[test]
fn stall_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let (ep, cq, _av, _domain) = open(&EndpointAttr::default()).expect("the parent found a device");
    println!("STALL name {}", hex(ep.name().as_bytes()));
    let mut buf = vec![Completion::EMPTY; 16];
    loop {
        match cq.wait(&mut buf, Some(Duration::from_millis(100))) {
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

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

fn counter(ep: &Endpoint, name: &str) -> u64 {
    let c: HashMap<_, _> = ep.counters().expect("counters").into_iter().collect();
    *c.get(name).unwrap_or_else(|| panic!("no counter {name}"))
}

#[test]
fn a_stopped_peer_fails_waiting_operations_and_a_live_one_does_not() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let mut attr = EndpointAttr::default();
    attr.progress_timeout_ms = TIMEOUT_MS;
    let Some((ep, cq, av, _domain)) = open(&attr) else {
        return;
    };
    let mut child = Command::new(std::env::current_exe().expect("own test binary"))
        .args(["--exact", "stall_child", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
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
    let peer = av.insert(&unhex(&name)).expect("av insert");
    ep.tsend(peer, 1, vec![1; LARGE], 1).expect("tsend");
    let mut done: Vec<Completion> = Vec::new();
    let poll = |done: &mut Vec<Completion>| {
        let mut out = vec![Completion::EMPTY; 16];
        let n = cq.poll(&mut out).expect("poll");
        done.extend(out.drain(..n));
    };

    // Alive: the send waits for a receive the child never posts, for three
    // timeouts, and is not failed: the child answers the pings.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(3 * TIMEOUT_MS) {
        poll(&mut done);
        assert!(done.is_empty(), "the send to a live peer ended: {:?}", done[0].result);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(counter(&ep, "progress_probes") >= 1, "a silent peer was not pinged");
    assert_eq!(counter(&ep, "peers_stalled"), 0);

    // Stopped: the send fails as stalled, and so does one posted after the stop.
    // SAFETY: kill has no memory-safety preconditions; the pid is our child's.
    assert_eq!(unsafe { libc::kill(child.0.id() as i32, libc::SIGSTOP) }, 0);
    let stopped = Instant::now();
    ep.tsend(peer, 2, vec![2; LARGE], 2).expect("tsend");
    while done.len() < 2 {
        poll(&mut done);
        assert!(stopped.elapsed() < DEADLINE, "the sends to a stopped peer still wait");
    }
    let took = stopped.elapsed();
    for c in &done {
        assert_eq!(c.result, Err(Error::Stalled { peer }), "after {took:?}");
        assert!(c.buf.is_some(), "the buffer comes back");
    }
    assert_eq!(done[0].result.as_ref().map_err(Error::code), Err(-libc::ETIMEDOUT));
    eprintln!("the sends to the stopped peer failed after {took:?} (timeout {TIMEOUT_MS} ms)");
    assert_eq!(counter(&ep, "peers_stalled"), 1);
}
