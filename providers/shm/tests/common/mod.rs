//! What the two-process test binaries (`two_process`, `rma`) share: the
//! case runner, starting this binary again as the child, and the bounded
//! wait for a condition.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use xfer_shm::ShmPort;

/// Set in the child process: a parent gone ends it at once.
static IS_CHILD: AtomicBool = AtomicBool::new(false);

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Starts this binary again as the child `role`, connecting to `port`;
/// its stdin is a pipe the parent may write to.
pub fn spawn(role: &str, port: &ShmPort) -> Child {
    Command::new(std::env::current_exe().expect("current_exe"))
        .args(["child", role, &hex(port.address())])
        .stdin(Stdio::piped())
        .spawn()
        .expect("spawn child")
}

/// The binary's `main`: as `BIN child ROLE ADDR`, runs `child`; else every
/// case whose name contains one of the arguments that are not options (all
/// cases when there are none), printing a line for each.
pub fn main(cases: &[(&str, fn())], child: fn(&str, &[u8])) {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("child") {
        IS_CHILD.store(true, Ordering::Relaxed);
        child(&args[2], &unhex(&args[3]));
        return;
    }
    let filter: Vec<&String> = args[1..].iter().filter(|a| !a.starts_with('-')).collect();
    for &(name, case) in cases {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let t = Instant::now();
        case();
        println!("test {name} ... ok ({:?})", t.elapsed());
    }
}

/// A side that [`until`] can drive: a port and what its polls gathered.
pub trait Poller {
    /// Reads the port once, recording what arrived.
    fn poll(&mut self);
    /// Whether a peer went down (in the child, the only peer is the parent).
    fn any_down(&self) -> bool;
    /// The port, to block on between polls.
    fn port(&mut self) -> &mut ShmPort;
}

/// Polls `p`, blocking between polls, until `done` holds; panics after
/// `limit`. In the child, a parent gone ends the process.
pub fn until<P: Poller>(p: &mut P, limit: Duration, what: &str, mut done: impl FnMut(&mut P) -> bool) {
    let end = Instant::now() + limit;
    loop {
        p.poll();
        if done(p) {
            return;
        }
        if IS_CHILD.load(Ordering::Relaxed) && p.any_down() {
            eprintln!("child: parent gone while waiting for {what}");
            std::process::exit(3);
        }
        let left = end
            .checked_duration_since(Instant::now())
            .unwrap_or_else(|| panic!("timed out: {what}"));
        p.port().wait(Some(left)).expect("wait");
    }
}
