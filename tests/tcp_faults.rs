//! TCP under network faults (issue 7), between two network namespaces joined
//! by a veth pair that each test creates and removes:
//!
//! - `netem_loss_delay_reorder_duplicate`: `tc netem` loss, delay with
//!   jitter, reordering and duplication on both ends; every checksummed
//!   message arrives, once, in order, both ways at once.
//! - `link_down_mid_transfer`: `ip link set down` while data flows both ways;
//!   every outstanding operation on both sides ends with an error within the
//!   configured timeouts (`XFER_TCP_USER_TIMEOUT_MS`, `XFER_TCP_KEEPALIVE_MS`),
//!   and after `ip link set up` the same endpoints talk again.
//! - `peer_sigkill_mid_transfer`: the peer process is SIGKILLed mid-transfer;
//!   the survivor's operations end with errors, and it keeps working.
//! - `peer_restarted_at_same_address`: the peer restarts at the same IP:port
//!   (new name); operations addressed to the old name fail and nothing meant
//!   for it reaches the new one, whether the death was seen (FIN/RST) or
//!   hidden by a link that was down.
//!
//! Each endpoint lives in its own process, this test binary re-executed
//! inside a namespace (`ip netns exec NS <exe> --exact worker --ignored`),
//! driven by one-line commands on stdin and answering with `@@ ` lines on
//! stdout. Every test ends by closing the endpoints and checking that each
//! worker has as many descriptors open as before it opened its domain.
//!
//! The tests need root and iproute2 (`ip`, `tc`). Without them they print
//! `SKIP` and the reason, and pass, unless `XFER_FAULTS_REQUIRE=1`. The netem
//! case also needs the kernel's `sch_netem`, which the host kernel here lacks:
//! it runs in the Soft-RoCE guest (`make vm`, step `tcp_faults`, which sets
//! `XFER_FAULTS_REQUIRE=1`). Cases, timeouts and measured times: docs/FAULTS.md.

mod common;

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::faults::{
    assert_exchange_ok, env_secs, env_u32, euid, exchange, exchange_done, number_after, required, run, settle, size_of,
    skipped, try_run, wait_until, Outcome, Took, Worker, ANY_STREAM,
};

/// Rendezvous threshold the workers run with: 65536 goes eager, 65537 not.
const RNDV_THRESHOLD: usize = 65536;

/// Message sizes, by sequence number modulo their count.
const SIZES: [usize; 8] = [0, 1, 4096, RNDV_THRESHOLD, RNDV_THRESHOLD + 1, 200_000, 17, 1 << 20];

fn size_of_seq(seq: u32) -> usize {
    size_of(&SIZES, seq)
}

/// The endpoint side (common::faults::worker), run only when a test spawned it.
#[test]
#[ignore = "helper process for the tcp_faults tests"]
fn worker() {
    common::faults::worker();
}

/// Why these tests cannot run here, if they cannot.
fn missing_prerequisite() -> Option<String> {
    let euid = euid();
    if euid != "0" {
        return Some(format!("not root (euid {euid}): network namespaces need CAP_SYS_ADMIN"));
    }
    for tool in ["ip", "tc"] {
        if Command::new(tool).arg("-V").output().is_err() {
            return Some(format!("`{tool}` (iproute2) not found"));
        }
    }
    None
}

/// Returns from the test, saying why, when it cannot run here (or fails
/// when `XFER_FAULTS_REQUIRE=1`).
macro_rules! skip_unless_possible {
    ($name:expr) => {
        if let Some(why) = missing_prerequisite() {
            assert!(!required(), "{}: cannot run: {why}", $name);
            skipped(&format!("SKIP {}: {why}", $name));
            return;
        }
    };
}

/// Two network namespaces joined by a veth pair: side 0 is 10.77.0.1/24 on
/// `xfa`, side 1 is 10.77.0.2/24 on `xfb`. The namespace names hold the pid
/// and a counter, so tests running at once never share one; dropping the
/// pair deletes both namespaces, and the veth pair with them.
struct Net {
    ns: [String; 2],
}

const DEV: [&str; 2] = ["xfa", "xfb"];
const IP: [&str; 2] = ["10.77.0.1", "10.77.0.2"];

impl Net {
    fn new() -> Net {
        static COUNT: AtomicU32 = AtomicU32::new(0);
        let base = format!(
            "xfer-faults-{}-{}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::Relaxed)
        );
        let ns = [format!("{base}-a"), format!("{base}-b")];
        for n in &ns {
            // A leftover of a killed run with the same pid is ours to remove.
            let _ = try_run(&["ip", "netns", "del", n]);
            run(&["ip", "netns", "add", n]);
        }
        let net = Net { ns };
        run(&[
            "ip", "link", "add", DEV[0], "netns", &net.ns[0], "type", "veth", "peer", "name", DEV[1], "netns",
            &net.ns[1],
        ]);
        for side in 0..2 {
            let n = net.ns[side].as_str();
            run(&[
                "ip",
                "-n",
                n,
                "addr",
                "add",
                &format!("{}/24", IP[side]),
                "dev",
                DEV[side],
            ]);
            run(&["ip", "-n", n, "link", "set", "lo", "up"]);
            run(&["ip", "-n", n, "link", "set", DEV[side], "up"]);
        }
        net
    }

    /// Sets side's end of the veth pair up or down.
    fn link(&self, side: usize, up: bool) {
        let state = if up { "up" } else { "down" };
        run(&["ip", "-n", &self.ns[side], "link", "set", DEV[side], state]);
    }

    /// Replaces the root qdisc of side's veth end: `tc qdisc replace ... root QDISC...`.
    fn qdisc(&self, side: usize, qdisc: &[&str]) -> Result<String, String> {
        let mut args = vec!["tc", "-n", &self.ns[side], "qdisc", "replace", "dev", DEV[side], "root"];
        args.extend_from_slice(qdisc);
        try_run(&args)
    }

    /// `tc -s qdisc show` of side's veth end.
    fn qdisc_stats(&self, side: usize) -> String {
        try_run(&["tc", "-s", "-n", &self.ns[side], "qdisc", "show", "dev", DEV[side]]).unwrap_or_else(|e| e)
    }

    /// Limits both directions to `rate` (tbf), so transfers take long enough
    /// to be interrupted.
    fn rate_limit(&self, rate: &str) {
        for side in 0..2 {
            if let Err(e) = self.qdisc(side, &["tbf", "rate", rate, "burst", "32kb", "latency", "400ms"]) {
                panic!("rate limit: {e}");
            }
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for n in &self.ns {
            if let Err(e) = try_run(&["ip", "netns", "del", n]) {
                eprintln!("tcp_faults: cleaning up: {e}");
            }
        }
    }
}

/// Whether a failure's text says the peer is gone: its connection failed
/// (`PeerUnreachable`) or closed in order (`PeerClosed`: a killed process
/// with nothing unread in its sockets closes them with a FIN).
fn gone(failure: &str) -> bool {
    failure.contains("PeerUnreachable") || failure.contains("PeerClosed")
}

/// Settings for workers that must notice a dead link quickly.
const FAST_TIMEOUTS: &[(&str, &str)] = &[
    ("XFER_TCP_USER_TIMEOUT_MS", "3000"),
    ("XFER_TCP_KEEPALIVE_MS", "1000"),
    ("XFER_TCP_CONNECT_TIMEOUT_MS", "3000"),
];

/// How long after a fault every operation must have ended, with these
/// settings: the user timeout, two keepalive periods, and slack for a loaded
/// machine or an emulated guest.
const FAST_BOUND: Duration = Duration::from_secs(3 + 2 + 15);

/// Starts a worker in side's namespace, listening on `addr` (`IP` or
/// `IP:PORT`), with extra environment.
fn spawn(net: &Net, side: usize, label: &str, addr: &str, env: &[(&str, &str)]) -> Worker {
    let threshold = RNDV_THRESHOLD.to_string();
    let mut all = vec![
        ("XFER_PROVIDER", "tcp"),
        ("XFER_TCP_ADDR", addr),
        ("XFER_RNDV_THRESHOLD", threshold.as_str()),
    ];
    all.extend_from_slice(env);
    Worker::spawn(label, &["ip", "netns", "exec", &net.ns[side]], &SIZES, &all)
}

/// Two workers on a slow (8 Mbit/s) link, each sending `n` messages to the
/// other, with the transfer under way (a few arrived, most outstanding):
/// `(net, a, b, a's handle at b, b's handle at a, n)`.
fn transfer_under_way() -> (Net, Worker, Worker, u64, u64, u32) {
    let net = Net::new();
    net.rate_limit("8mbit");
    let mut a = spawn(&net, 0, "A", IP[0], FAST_TIMEOUTS);
    let mut b = spawn(&net, 1, "B", IP[1], FAST_TIMEOUTS);
    let pa = b.peer(&a.name.clone());
    let pb = a.peer(&b.name.clone());
    let n = 24;
    exchange(&mut a, pb, 1, &mut b, pa, 2, n);
    wait_until(
        &mut [&mut a, &mut b],
        Duration::from_secs(60),
        "the transfer to start",
        |ws| ws[1].recvs_ok(1) >= 4 && ws[0].recvs_ok(2) >= 4,
    );
    (net, a, b, pa, pb, n)
}

// ---------------------------------------------------------------------------
// The cases.

/// netem on both veth ends: 5% loss, 20 ms ± 10 ms delay, 25% reordering,
/// 5% duplication. Both sides send at once; every message arrives exactly
/// once, in order, intact; nothing extra arrives afterwards.
#[test]
fn netem_loss_delay_reorder_duplicate() {
    skip_unless_possible!("netem_loss_delay_reorder_duplicate");
    let t0 = Instant::now();
    let net = Net::new();
    let netem = [
        "netem",
        "loss",
        "5%",
        "delay",
        "20ms",
        "10ms",
        "reorder",
        "25%",
        "duplicate",
        "5%",
    ];
    for side in 0..2 {
        if let Err(e) = net.qdisc(side, &netem) {
            let need = std::env::var("XFER_FAULTS_REQUIRE_NETEM").is_ok_and(|v| v == "1");
            assert!(!need, "netem is required here (XFER_FAULTS_REQUIRE_NETEM=1): {e}");
            skipped(&format!(
                "SKIP netem_loss_delay_reorder_duplicate: this kernel has no netem qdisc ({e}); \
                 it runs in the Soft-RoCE guest: make vm (step tcp_faults)"
            ));
            return;
        }
    }
    let _took = Took("netem_loss_delay_reorder_duplicate", t0);
    let n = env_u32("XFER_FAULTS_NETEM_MESSAGES", 16);
    let timeout = env_secs("XFER_FAULTS_NETEM_TIMEOUT", 300);
    let mut a = spawn(&net, 0, "A", IP[0], &[]);
    let mut b = spawn(&net, 1, "B", IP[1], &[]);
    let pa = b.peer(&a.name.clone());
    let pb = a.peer(&b.name.clone());
    let start = Instant::now();
    exchange(&mut a, pb, 1, &mut b, pa, 2, n);
    exchange_done(&mut a, 1, &mut b, 2, n, timeout, "the exchange under netem");
    let took = start.elapsed();
    assert_exchange_ok(&a, 1, &b, 2, n);
    // Exactly once: nothing more arrives, even to receives that take any tag.
    a.cmd("recv any any 2");
    b.cmd("recv any any 2");
    settle(&mut [&mut a, &mut b], Duration::from_secs(3));
    for w in [&a, &b] {
        assert_eq!(w.recvs_done(ANY_STREAM), 0, "{}: an extra message arrived", w.label);
    }
    let stats = [net.qdisc_stats(0), net.qdisc_stats(1)];
    println!(
        "netem: {n} messages ({} KiB) each way in {took:?}\nA: {}\nB: {}",
        (0..n).map(size_of_seq).sum::<usize>() >> 10,
        stats[0].trim(),
        stats[1].trim()
    );
    let dropped: u64 = stats.iter().filter_map(|s| number_after(s, "dropped ")).sum();
    assert!(dropped > 0, "netem dropped no packet: the fault was not applied");
    for w in [&mut a, &mut b] {
        w.close();
        // The two extra receives end cancelled by the close, nothing else.
        for idx in 0..2 {
            let o = w.recvs.get(&(ANY_STREAM, idx));
            assert!(
                matches!(o, Some(Outcome::Failed(why)) if why.starts_with("Canceled")),
                "{}: extra receive {idx}: {o:?}",
                w.label
            );
        }
    }
}

/// The link goes down while both sides send: every outstanding operation
/// ends with an error within the timeouts; once the link is back the same
/// endpoints exchange messages again.
#[test]
fn link_down_mid_transfer() {
    skip_unless_possible!("link_down_mid_transfer");
    let _took = Took("link_down_mid_transfer", Instant::now());
    let (net, mut a, mut b, pa, pb, n) = transfer_under_way();
    net.link(0, false);
    let down = Instant::now();
    exchange_done(
        &mut a,
        1,
        &mut b,
        2,
        n,
        Duration::from_secs(120),
        "every operation to end after the link went down",
    );
    let last = a.last.max(b.last).expect("completions");
    let took = last.saturating_duration_since(down);
    println!("link down: all operations ended {took:?} after the link went down");
    for w in [&a, &b] {
        let failed = w.failures();
        println!("{}: {} failed, e.g. {:?}", w.label, failed.len(), failed.first());
        assert!(
            !failed.is_empty(),
            "{}: nothing was outstanding when the link went down",
            w.label
        );
        assert!(
            failed.iter().all(|f| f.contains("PeerUnreachable")),
            "{}: {failed:?}",
            w.label
        );
    }
    a.check_received_in_order(2);
    b.check_received_in_order(1);
    assert!(
        took < FAST_BOUND,
        "operations took {took:?} to fail, more than {FAST_BOUND:?}"
    );
    // The link is back: the same endpoints talk again (new connections).
    net.link(0, true);
    exchange(&mut a, pb, 3, &mut b, pa, 4, 8);
    exchange_done(
        &mut a,
        3,
        &mut b,
        4,
        8,
        Duration::from_secs(120),
        "the exchange after the link came back",
    );
    for (w, sent, got) in [(&a, 3, 4), (&b, 4, 3)] {
        assert_eq!(
            w.sends
                .iter()
                .filter(|(k, o)| k.0 == sent && **o == Outcome::Sent)
                .count(),
            8
        );
        assert_eq!(w.recvs_ok(got), 8, "{}", w.label);
        w.check_received_in_order(got);
    }
    a.close();
    b.close();
}

/// The peer is SIGKILLed while both sides send: the survivor's operations
/// all end with errors, soon; it then talks to a new peer.
#[test]
fn peer_sigkill_mid_transfer() {
    skip_unless_possible!("peer_sigkill_mid_transfer");
    let _took = Took("peer_sigkill_mid_transfer", Instant::now());
    let (net, mut a, mut b, _, _, n) = transfer_under_way();
    let killed = Instant::now();
    b.kill();
    let nn = n as usize;
    wait_until(&mut [&mut a], Duration::from_secs(120), "A's operations to end", |ws| {
        ws[0].sends_done(1) == nn && ws[0].recvs_done(2) == nn
    });
    let took = a.last.expect("completions").saturating_duration_since(killed);
    let failed = a.failures();
    println!(
        "sigkill: A's {} outstanding operations ended {took:?} after the kill, e.g. {:?}",
        failed.len(),
        failed.first()
    );
    assert!(!failed.is_empty(), "nothing was outstanding when the peer died");
    // A killed process's sockets close in order (FIN) when nothing was
    // left unread in them, else with a reset: either way its peer is gone.
    assert!(failed.iter().all(|f| gone(f)), "{failed:?}");
    a.check_received_in_order(2);
    assert!(took < FAST_BOUND, "operations took {took:?} to fail");
    // A keeps working: a new peer process.
    let mut c = spawn(&net, 1, "C", IP[1], FAST_TIMEOUTS);
    let pa = c.peer(&a.name.clone());
    let pc = a.peer(&c.name.clone());
    exchange(&mut a, pc, 3, &mut c, pa, 4, 8);
    exchange_done(
        &mut a,
        3,
        &mut c,
        4,
        8,
        Duration::from_secs(120),
        "the exchange with a new peer",
    );
    assert!(a
        .sends
        .iter()
        .filter(|(k, _)| k.0 == 3)
        .all(|(_, o)| *o == Outcome::Sent));
    assert_eq!(a.recvs_ok(4), 8);
    assert_eq!(c.recvs_ok(3), 8);
    a.check_received_in_order(4);
    c.check_received_in_order(3);
    a.close();
    c.close();
}

/// After `a`'s sends of `stream` to an old name at `new`'s address ended,
/// `a` sends one message of stream `marker` to `new`'s real name: it is the
/// only thing `new` ever receives.
fn nothing_reaches_the_new_incarnation(a: &mut Worker, new: &mut Worker, stream: u32, marker: u32) {
    let pn = a.peer(&new.name.clone());
    a.cmd(&format!("send {pn} {marker} 0 1"));
    wait_until(&mut [&mut *a, &mut *new], Duration::from_secs(60), "the marker", |ws| {
        ws[1].recvs_done(ANY_STREAM) >= 1
    });
    // Anything sent to the old name would have arrived before the marker
    // (it was sent earlier and has already failed); wait a little anyway.
    settle(&mut [&mut *a, &mut *new], Duration::from_secs(2));
    let got: Vec<&Outcome> = new.recvs.values().collect();
    assert_eq!(
        got,
        vec![&Outcome::Got {
            stream: marker,
            seq: 0,
            good: true
        }],
        "{}: received something other than the marker (stream {stream} was meant for the old incarnation)",
        new.label
    );
    assert_eq!(a.sends.get(&(marker, 0)), Some(&Outcome::Sent));
}

/// A peer process replaced by a new one at the same IP:port. Its name
/// differs (the nonce); operations addressed to the old name fail, and the
/// new process receives none of them: first after a death the survivor saw
/// (FIN/RST), then after one a down link hid, so that the survivor still
/// holds the old connection when the new process starts.
#[test]
fn peer_restarted_at_same_address() {
    skip_unless_possible!("peer_restarted_at_same_address");
    let _took = Took("peer_restarted_at_same_address", Instant::now());
    let net = Net::new();
    let addr = format!("{}:7471", IP[1]);
    let mut a = spawn(&net, 0, "A", IP[0], FAST_TIMEOUTS);
    let mut b1 = spawn(&net, 1, "B1", &addr, FAST_TIMEOUTS);
    let pb1 = a.peer(&b1.name.clone());
    let pa = b1.peer(&a.name.clone());
    exchange(&mut a, pb1, 1, &mut b1, pa, 2, 8);
    exchange_done(&mut a, 1, &mut b1, 2, 8, Duration::from_secs(60), "the first exchange");
    assert_exchange_ok(&a, 1, &b1, 2, 8);

    // 1. A death A sees: the new incarnation refuses what was meant for the old.
    b1.kill();
    let mut b2 = spawn(&net, 1, "B2", &addr, FAST_TIMEOUTS);
    assert_ne!(b1.name, b2.name, "a restarted endpoint has a new name");
    assert_eq!(b1.name[..16], b2.name[..16], "same provider, family, address and port");
    b2.cmd("recv any any 8");
    let sent = Instant::now();
    a.cmd(&format!("send {pb1} 3 0 8"));
    wait_until(
        &mut [&mut a, &mut b2],
        Duration::from_secs(120),
        "the sends to the old name",
        |ws| ws[0].sends_done(3) == 8,
    );
    let took = a.last.expect("completions").saturating_duration_since(sent);
    let outcomes: Vec<&Outcome> = a.sends.iter().filter(|(k, _)| k.0 == 3).map(|(_, o)| o).collect();
    println!(
        "restart (seen): sends to the old name ended after {took:?}: {:?}",
        outcomes[0]
    );
    assert!(
        outcomes.iter().all(|o| matches!(o, Outcome::Failed(why) if gone(why))),
        "sends addressed to the old incarnation: {outcomes:?}"
    );
    assert!(took < FAST_BOUND, "sends to the old name took {took:?} to fail");
    nothing_reaches_the_new_incarnation(&mut a, &mut b2, 3, 98);

    // 2. A death hidden by a down link: A still has its connection to B2
    // (opened for the marker) when B3 takes over the address.
    net.link(1, false);
    b2.kill();
    let mut b3 = spawn(&net, 1, "B3", &addr, FAST_TIMEOUTS);
    b3.cmd("recv any any 8");
    let pb2 = a.peer(&b2.name.clone());
    let sent = Instant::now();
    a.cmd(&format!("send {pb2} 4 0 8"));
    settle(&mut [&mut a, &mut b3], Duration::from_millis(500));
    net.link(1, true);
    wait_until(
        &mut [&mut a, &mut b3],
        Duration::from_secs(120),
        "the sends to B2's name",
        |ws| ws[0].sends_done(4) == 8,
    );
    let took = a.last.expect("completions").saturating_duration_since(sent);
    let stream4: Vec<(u32, &Outcome)> = a
        .sends
        .iter()
        .filter(|(k, _)| k.0 == 4)
        .map(|(k, o)| (k.1, o))
        .collect();
    println!("restart (hidden): sends to the old name ended after {took:?}: {stream4:?}");
    // Rendezvous sends need an answer from the receiver: they must fail.
    // Eager ones complete when the kernel took the bytes (FI_INJECT_COMPLETE,
    // docs/PROTOCOL.md), so on the old connection they may report success
    // before it dies; they are still never delivered to B3 (checked below).
    for (seq, o) in &stream4 {
        if size_of_seq(*seq) > RNDV_THRESHOLD {
            assert!(
                matches!(o, Outcome::Failed(why) if gone(why)),
                "rendezvous send {seq} to the old incarnation: {o:?}"
            );
        }
    }
    assert!(took < FAST_BOUND, "sends to the old name took {took:?} to end");
    nothing_reaches_the_new_incarnation(&mut a, &mut b3, 4, 99);
    a.close();
    b3.close();
    // B2 only ever got the marker of the first phase.
    drop(b2);
}
