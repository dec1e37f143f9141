//! Test harness shared by the conformance suites: nodes (domain + cq + av +
//! endpoint) on the provider named by `XFER_PROVIDER` (default: automatic
//! choice), and a driver that polls several nodes until a condition holds.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use xfer::{Completion, CompletionQueue, Domain, Endpoint, EndpointAttr, PeerAddr};

/// How long any wait in a test may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// One endpoint with everything it needs.
pub struct Node {
    pub domain: Domain,
    pub cq: CompletionQueue,
    pub av: xfer::AddressVector,
    pub ep: Endpoint,
    /// Completions polled but not yet taken by the test.
    pub done: Vec<Completion>,
}

impl Node {
    pub fn new() -> Node {
        Node::with_attr(&test_attr())
    }

    pub fn with_attr(attr: &EndpointAttr) -> Node {
        xfer::init_logging();
        Node::in_domain(xfer::open_default().expect("open domain"), attr)
    }

    /// A node on the provider `name`, whatever `XFER_PROVIDER` says.
    #[allow(dead_code)]
    pub fn on(name: &str) -> Node {
        xfer::init_logging();
        let domain = xfer::open(&xfer::DomainAttr::with_provider(name)).expect("open domain");
        Node::in_domain(domain, &test_attr())
    }

    pub fn in_domain(domain: Domain, attr: &EndpointAttr) -> Node {
        let cq = domain.cq(&xfer::CqAttr::default()).expect("open cq");
        let av = domain.av().expect("open av");
        let ep = domain.endpoint(&cq, &av, attr).expect("open endpoint");
        Node {
            domain,
            cq,
            av,
            ep,
            done: Vec::new(),
        }
    }

    /// Inserts `other`'s name and returns its handle.
    pub fn add(&self, other: &Node) -> PeerAddr {
        self.av.insert(other.ep.name().as_bytes()).expect("av insert")
    }

    /// Polls once, keeping what completed.
    pub fn poll(&mut self) -> usize {
        let mut buf = vec![Completion::EMPTY; 64];
        let n = self.cq.poll(&mut buf).expect("cq poll");
        self.done.extend(buf.drain(..n));
        n
    }

    /// Removes and returns the completion with `context`, if it arrived.
    pub fn take(&mut self, context: u64) -> Option<Completion> {
        let i = self.done.iter().position(|c| c.context == context)?;
        Some(self.done.remove(i))
    }
}

/// Endpoint attributes for tests: loopback, from the environment otherwise.
pub fn test_attr() -> EndpointAttr {
    let mut a = EndpointAttr::from_env();
    if xfer::TcpAttr::from_env().addr.is_none() {
        a.params.set("tcp.addr", "127.0.0.1");
    }
    a
}

/// Polls every node until `done(nodes)` holds; fails the test after [`DEADLINE`].
pub fn drive(nodes: &mut [&mut Node], what: &str, mut done: impl FnMut(&mut [&mut Node]) -> bool) {
    let start = Instant::now();
    while !done(nodes) {
        for n in nodes.iter_mut() {
            n.poll();
        }
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
    }
}

/// Polls the nodes until `node_idx` has the completion with `context`, and returns it.
pub fn expect(nodes: &mut [&mut Node], node_idx: usize, context: u64) -> Completion {
    let mut found = None;
    drive(nodes, &format!("completion {context} on node {node_idx}"), |ns| {
        found = ns[node_idx].take(context);
        found.is_some()
    });
    found.expect("drive returned only once found")
}

/// A payload whose bytes depend on `seed` and position.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(31).wrapping_add(seed.wrapping_mul(7919)) as u8)
        .collect()
}

/// Bytes as lower-case hex (names passed between test processes).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of a hex string written by [`hex`].
pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

pub mod faults;
pub mod memcheck;
pub mod poison;

/// Blocks in `poll(2)` until `fd` is readable or `timeout` passes; whether
/// it became readable.
#[allow(dead_code)] // not every test binary blocks on a descriptor
pub fn wait_readable(fd: std::os::fd::RawFd, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `pfd` is a valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut pfd, 1, timeout.as_millis().min(i32::MAX as u128) as i32) == 1 }
}

/// Resident set size of this process, bytes (`VmRSS`).
pub fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS line");
    kb * 1024
}
