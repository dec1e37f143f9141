//! The verbs provider under network faults (issue 7), in the Soft-RoCE guest:
//! two rxe devices, one on each end of a veth pair, and one worker process
//! on each (`XFER_PROVIDER=verbs`, or `XFER_FAULTS_PROVIDER`'s verbs provider,
//! `XFER_VERBS_DEVICE`, `XFER_VERBS_ADDR`).
//!
//! - `netem_loss`: `tc netem loss 5%` on both veth ends; tagged messages
//!   (eager, and rendezvous above `XFER_VERBS_SRQ_BUF_SIZE` and
//!   `XFER_RNDV_THRESHOLD`) both ways at once, and RMA writes and reads of
//!   checksummed payloads: everything arrives, once, in order, intact, by RC
//!   retransmission (rxe's counters are printed and must show it).
//! - `link_down_mid_transfer`: `ip link set down` while data flows both
//!   ways (messages and RMA); every outstanding operation on both sides
//!   ends with `PeerUnreachable` within a bound (`XFER_VERBS_RETRY_CNT=6`:
//!   rxe treats 7 as "retry forever"; the RC keepalive ends what waits on a
//!   quiet peer), nothing received is corrupt, and the processes close
//!   cleanly without leaking descriptors.
//!
//! Both ends stay in the root network namespace: the guest kernel's (6.1)
//! rxe opens its UDP socket (port 4791) in the initial namespace only, so
//! an rxe device on a veth end moved into another namespace never receives
//! (rping between two namespaces timed out). With both addresses local,
//! the kernel would deliver over `lo` and rdma_cm would pick the
//! destination's device; policy routing makes each side's traffic to the
//! other leave by its own veth end (see [`RxePair::new`]), which the test
//! checks with the veth's counters and netem's drops.
//!
//! Needs root, iproute2 (`ip`, `tc`, `rdma`) and a kernel with `rdma_rxe`;
//! without them each case prints `SKIP` and the reason and passes, unless
//! `XFER_FAULTS_REQUIRE=1` (the guest step `verbs_faults` sets it), and the
//! netem case likewise without `sch_netem` unless `XFER_FAULTS_REQUIRE_NETEM=1`.
//! Cases, settings and measured times: docs/FAULTS.md.

mod common;

use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::faults::{
    env_flag, env_secs, env_u32, euid, exchange, exchange_done, number_after, required, run, settle, size_of, skipped,
    try_run, wait_until, Outcome, Took, Worker, ANY_STREAM,
};

/// Bytes per SRQ bounce buffer the workers run with; the largest eager
/// message is 24 bytes less (docs/PROTOCOL-VERBS.md).
const SRQ_BUF: usize = 8192;
const EAGER_MAX: usize = SRQ_BUF - 24;
/// Rendezvous threshold the workers run with.
const RNDV_THRESHOLD: usize = 65536;

/// Message sizes, by sequence number modulo their count: eager (inline or
/// not) up to `EAGER_MAX`, rendezvous above it and above `RNDV_THRESHOLD`.
const SIZES: [usize; 10] = [
    0,
    1,
    4096,
    EAGER_MAX,
    EAGER_MAX + 1,
    RNDV_THRESHOLD,
    RNDV_THRESHOLD + 1,
    17,
    200_000,
    1 << 20,
];

/// The endpoint side (common::faults::worker), run only when a test spawned it.
#[test]
#[ignore = "helper process for the verbs_faults tests"]
fn worker() {
    common::faults::worker();
}

// ---------------------------------------------------------------------------
// Two rxe devices on a veth pair.

const DEV: [&str; 2] = ["xvfa", "xvfb"];
const RXE: [&str; 2] = ["rxefa", "rxefb"];
const IP: [&str; 2] = ["10.78.1.1", "10.78.2.1"];
/// Routing table holding the route to the *other* side's address, per side.
const TABLE: [&str; 2] = ["7801", "7802"];
/// Preferences of our rules, per side (two each), in front of `local`'s.
const PREF: [u32; 2] = [100, 102];
/// Preference the kernel's `local` rule moves to, behind ours.
const LOCAL_PREF: &str = "1000";

/// The cases share fixed device names and addresses: one at a time.
/// The provider the workers open: `XFER_FAULTS_PROVIDER`, else `verbs`.
fn provider() -> String {
    std::env::var("XFER_FAULTS_PROVIDER").unwrap_or_else(|_| "verbs".into())
}

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Why these tests cannot run here, if they cannot.
fn missing_prerequisite() -> Option<String> {
    if !cfg!(feature = "verbs") {
        return Some("xfer was built without the `verbs` feature".into());
    }
    let euid = euid();
    if euid != "0" {
        return Some(format!(
            "not root (euid {euid}): rxe devices and routes need CAP_NET_ADMIN"
        ));
    }
    for tool in ["ip", "tc", "rdma"] {
        if Command::new(tool).arg("-V").output().is_err() {
            return Some(format!("`{tool}` (iproute2) not found"));
        }
    }
    if let Err(e) = try_run(&["modprobe", "rdma_rxe"]) {
        if !std::path::Path::new("/sys/module/rdma_rxe").exists() {
            return Some(format!(
                "no Soft-RoCE (rdma_rxe) in this kernel ({e}); it runs in the guest: make vm (step verbs_faults)"
            ));
        }
    }
    for m in ["veth", "sch_netem"] {
        let _ = try_run(&["modprobe", m]);
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

/// Writes a sysctl under /proc/sys/net/ipv4/conf.
fn ipv4_conf(dev: &str, key: &str, value: &str) {
    let path = format!("/proc/sys/net/ipv4/conf/{dev}/{key}");
    if let Err(e) = std::fs::write(&path, value) {
        panic!("writing {value} to {path}: {e}");
    }
}

/// A veth pair in the root namespace, `xvfa` 10.78.1.1/24 and `xvfb`
/// 10.78.2.1/24, with rxe device `rxefa` on the first and `rxefb` on the
/// second. Dropping it removes the devices, rules and routes and puts the
/// `local` rule back in front.
struct RxePair;

impl RxePair {
    /// Sets the pair up. Both addresses are local, so by default the kernel
    /// would route between them over `lo`. Instead:
    /// - the `local` rule moves from preference 0 to 1000, behind rules that
    ///   send locally generated traffic (`iif lo`) and traffic bound to a
    ///   veth end (`oif`, as rxe and rdma_cm's checks look up) to the
    ///   other address through table 7801 or 7802, whose one route leaves by
    ///   that side's veth end;
    /// - packets arriving on a veth end find no such rule and are delivered
    ///   locally; `accept_local` lets their (local) source address in, and
    ///   reverse-path filtering is off.
    fn new() -> RxePair {
        let _ = try_run(&["ip", "link", "del", DEV[0]]); // a leftover of a killed run
        for rxe in RXE {
            let _ = try_run(&["rdma", "link", "del", rxe]);
        }
        let pair = RxePair;
        run(&["ip", "link", "add", DEV[0], "type", "veth", "peer", "name", DEV[1]]);
        for dev in ["all", "default", DEV[0], DEV[1]] {
            ipv4_conf(dev, "rp_filter", "0");
        }
        for side in 0..2 {
            ipv4_conf(DEV[side], "accept_local", "1");
            run(&["ip", "addr", "add", &format!("{}/24", IP[side]), "dev", DEV[side]]);
            run(&["ip", "link", "set", DEV[side], "up"]);
        }
        let rules = try_run(&["ip", "rule", "show"]).unwrap_or_default();
        if !rules.contains(&format!("{LOCAL_PREF}:\tfrom all lookup local")) {
            run(&["ip", "rule", "add", "pref", LOCAL_PREF, "lookup", "local"]);
        }
        if rules.contains("0:\tfrom all lookup local") {
            run(&["ip", "rule", "del", "pref", "0", "lookup", "local"]);
        }
        for side in 0..2 {
            let (to, table) = (IP[1 - side], TABLE[side]);
            run(&[
                "ip", "route", "add", to, "dev", DEV[side], "src", IP[side], "table", table,
            ]);
            // Explicit preferences: a rule added without one would go after
            // the second rule of the list, which is now `main`.
            let (p1, p2) = (PREF[side].to_string(), (PREF[side] + 1).to_string());
            run(&[
                "ip", "rule", "add", "pref", &p1, "to", to, "oif", DEV[side], "lookup", table,
            ]);
            run(&["ip", "rule", "add", "pref", &p2, "to", to, "iif", "lo", "lookup", table]);
        }
        let route = try_run(&["ip", "route", "get", IP[1], "from", IP[0]]).unwrap_or_else(|e| e);
        assert!(
            route.contains(&format!("dev {}", DEV[0])),
            "traffic to the other side would not leave by the veth: {route}\n{}",
            try_run(&["ip", "rule", "show"]).unwrap_or_else(|e| e)
        );
        for side in 0..2 {
            run(&["rdma", "link", "add", RXE[side], "type", "rxe", "netdev", DEV[side]]);
        }
        for side in 0..2 {
            pair.wait_active(side);
        }
        pair
    }

    /// Waits until side's rxe port is ACTIVE with its IPv4 GID.
    fn wait_active(&self, side: usize) {
        let gid = {
            let o: Vec<u8> = IP[side].split('.').map(|b| b.parse().expect("address")).collect();
            format!(
                "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}",
                o[0], o[1], o[2], o[3]
            )
        };
        let start = Instant::now();
        loop {
            let active = try_run(&["rdma", "link", "show", &format!("{}/1", RXE[side])])
                .is_ok_and(|s| s.contains("state ACTIVE"));
            let gids = std::fs::read_dir(format!("/sys/class/infiniband/{}/ports/1/gids", RXE[side]))
                .map(|d| {
                    d.flatten()
                        .any(|e| std::fs::read_to_string(e.path()).is_ok_and(|g| g.trim() == gid))
                })
                .unwrap_or(false);
            if active && gids {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{} did not become ACTIVE with GID {gid}",
                RXE[side]
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sets side's veth end up or down. The kernel drops the routes through
    /// a device that goes down: bringing it up puts side's route back.
    fn link(&self, side: usize, up: bool) {
        run(&["ip", "link", "set", DEV[side], if up { "up" } else { "down" }]);
        if up {
            let (to, table) = (IP[1 - side], TABLE[side]);
            run(&[
                "ip", "route", "replace", to, "dev", DEV[side], "src", IP[side], "table", table,
            ]);
        }
    }

    /// Replaces the root qdisc of side's veth end.
    fn qdisc(&self, side: usize, qdisc: &[&str]) -> Result<String, String> {
        let mut args = vec!["tc", "qdisc", "replace", "dev", DEV[side], "root"];
        args.extend_from_slice(qdisc);
        try_run(&args)
    }

    /// `tc -s qdisc show` of side's veth end.
    fn qdisc_stats(&self, side: usize) -> String {
        try_run(&["tc", "-s", "qdisc", "show", "dev", DEV[side]]).unwrap_or_else(|e| e)
    }

    /// Packets side's veth end transmitted.
    fn tx_packets(&self, side: usize) -> u64 {
        let path = format!("/sys/class/net/{}/statistics/tx_packets", DEV[side]);
        std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Side's rxe port counters (`hw_counters`), by name.
    fn counters(&self, side: usize) -> Vec<(String, u64)> {
        let dir = format!("/sys/class/infiniband/{}/ports/1/hw_counters", RXE[side]);
        let mut out: Vec<(String, u64)> = std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .filter_map(|e| {
                        let v = std::fs::read_to_string(e.path()).ok()?.trim().parse().ok()?;
                        Some((e.file_name().to_string_lossy().into_owned(), v))
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.sort();
        out
    }

    /// A worker on side's rxe device and address, with these message sizes
    /// and extra environment.
    fn spawn(&self, side: usize, label: &str, sizes: &[usize], env: &[(&str, &str)]) -> Worker {
        let (srq, rndv) = (SRQ_BUF.to_string(), RNDV_THRESHOLD.to_string());
        let provider = provider();
        let mut all = vec![
            ("XFER_PROVIDER", provider.as_str()),
            ("XFER_VERBS_DEVICE", RXE[side]),
            ("XFER_VERBS_ADDR", IP[side]),
            ("XFER_VERBS_SRQ_BUF_SIZE", srq.as_str()),
            ("XFER_RNDV_THRESHOLD", rndv.as_str()),
        ];
        all.extend_from_slice(env);
        let w = Worker::spawn(label, &[], sizes, &all);
        assert_eq!(w.provider, provider, "{label} opened the {} provider", w.provider);
        w
    }
}

impl Drop for RxePair {
    fn drop(&mut self) {
        let mut cleanup: Vec<Vec<&str>> = Vec::new();
        for side in 0..2 {
            let (to, table) = (IP[1 - side], TABLE[side]);
            if std::path::Path::new(&format!("/sys/class/infiniband/{}", RXE[side])).exists() {
                cleanup.push(vec!["rdma", "link", "del", RXE[side]]);
            }
            cleanup.push(vec!["ip", "rule", "del", "to", to, "oif", DEV[side], "lookup", table]);
            cleanup.push(vec!["ip", "rule", "del", "to", to, "iif", "lo", "lookup", table]);
            cleanup.push(vec!["ip", "route", "flush", "table", table]);
        }
        cleanup.push(vec!["ip", "link", "del", DEV[0]]);
        cleanup.push(vec!["ip", "rule", "add", "pref", "0", "lookup", "local"]);
        cleanup.push(vec!["ip", "rule", "del", "pref", LOCAL_PREF, "lookup", "local"]);
        for args in cleanup {
            if let Err(e) = try_run(&args) {
                eprintln!("verbs_faults: cleaning up: {e}");
            }
        }
    }
}

/// The difference of two counter snapshots, nonzero entries only.
fn delta(before: &[(String, u64)], after: &[(String, u64)]) -> Vec<(String, u64)> {
    after
        .iter()
        .map(|(k, v)| {
            let b = before.iter().find(|(kb, _)| kb == k).map_or(0, |(_, v)| *v);
            (k.clone(), v.saturating_sub(b))
        })
        .filter(|(_, v)| *v > 0)
        .collect()
}

fn counter(c: &[(String, u64)], name: &str) -> u64 {
    c.iter().find(|(k, _)| k == name).map_or(0, |(_, v)| *v)
}

/// RMA regions: each side registers region 1 (the peer writes it) and 2
/// (the peer reads it) of this size, then writes and reads the other's.
const RMA_LEN: usize = 300_000;

/// Registers both sides' regions and starts the writes and reads
/// (operation ids 1 and 2 on each side). Seeds: region 1 of side s starts
/// as 10s+1, is written with 10s+5; region 2 holds 10s+2.
fn start_rma(a: &mut Worker, pb: u64, b: &mut Worker, pa: u64) {
    let keys = [
        [a.region(1, RMA_LEN, 1), a.region(2, RMA_LEN, 2)],
        [b.region(1, RMA_LEN, 11), b.region(2, RMA_LEN, 12)],
    ];
    a.cmd(&format!("write {pb} {} 15 1", keys[1][0]));
    a.cmd(&format!("read {pb} {} 12 2", keys[1][1]));
    b.cmd(&format!("write {pa} {} 5 1", keys[0][0]));
    b.cmd(&format!("read {pa} {} 2 2", keys[0][1]));
}

// ---------------------------------------------------------------------------
// The cases.

/// 5% loss on both veth ends: every message and RMA arrives intact, once, in
/// order, by RC retransmission.
#[test]
fn netem_loss() {
    skip_unless_possible!("netem_loss");
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let t0 = Instant::now();
    let net = RxePair::new();
    for side in 0..2 {
        if let Err(e) = net.qdisc(side, &["netem", "loss", "5%"]) {
            assert!(
                !env_flag("XFER_FAULTS_REQUIRE_NETEM"),
                "netem is required here (XFER_FAULTS_REQUIRE_NETEM=1): {e}"
            );
            skipped(&format!("SKIP netem_loss: this kernel has no netem qdisc ({e})"));
            return;
        }
    }
    let _took = Took("netem_loss", t0);
    let n = env_u32("XFER_FAULTS_NETEM_MESSAGES", 20);
    // Well under the guest step's own timeout (all.sh, 300 s), so that a
    // hang fails here with both workers' counters rather than being killed
    // silently; the exchange and the RMA share it.
    let timeout = env_secs("XFER_FAULTS_NETEM_TIMEOUT", 120);
    let before = [net.counters(0), net.counters(1)];
    let tx_before = [net.tx_packets(0), net.tx_packets(1)];
    // Retries pinned to 7 ("forever" on rxe): all.sh's conformance step
    // exports 6, with which 5% loss ended a connection (retry exceeded).
    let retry = [("XFER_VERBS_RETRY_CNT", "7")];
    let mut a = net.spawn(0, "A", &SIZES, &retry);
    let mut b = net.spawn(1, "B", &SIZES, &retry);
    let pa = b.peer(&a.name.clone());
    let pb = a.peer(&b.name.clone());
    let start = Instant::now();
    exchange(&mut a, pb, 1, &mut b, pa, 2, n);
    start_rma(&mut a, pb, &mut b, pa);
    exchange_done(&mut a, 1, &mut b, 2, n, timeout, "the exchange under netem");
    wait_until(
        &mut [&mut a, &mut b],
        timeout.saturating_sub(start.elapsed()),
        "the RMA under netem",
        |ws| ws.iter().all(|w| w.rma.len() == 2),
    );
    let took = start.elapsed();
    for (w, sent, got) in [(&a, 1, 2), (&b, 2, 1)] {
        let failed = w.failures();
        assert!(failed.is_empty(), "{}: operations failed: {failed:?}", w.label);
        assert_eq!(w.sends_done(sent), n as usize, "{}: sends", w.label);
        assert_eq!(w.recvs_ok(got), n as usize, "{}: receives", w.label);
        w.check_received_in_order(got);
        assert_eq!(w.rma.get(&1), Some(&Outcome::Sent), "{}: RMA write", w.label);
        assert_eq!(
            w.rma.get(&2),
            Some(&Outcome::Got {
                stream: 0,
                seq: 0,
                good: true
            }),
            "{}: RMA read",
            w.label
        );
    }
    assert!(a.region_holds(1, 5), "A's region 1 does not hold what B wrote");
    assert!(b.region_holds(1, 15), "B's region 1 does not hold what A wrote");
    // Exactly once: nothing more arrives, even to receives that take any tag.
    a.cmd("recv any any 2");
    b.cmd("recv any any 2");
    settle(&mut [&mut a, &mut b], Duration::from_secs(3));
    for w in [&a, &b] {
        assert_eq!(w.recvs_done(ANY_STREAM), 0, "{}: an extra message arrived", w.label);
    }
    let stats = [net.qdisc_stats(0), net.qdisc_stats(1)];
    let rxe = [delta(&before[0], &net.counters(0)), delta(&before[1], &net.counters(1))];
    let tx = [net.tx_packets(0) - tx_before[0], net.tx_packets(1) - tx_before[1]];
    let bytes: usize = (0..n).map(|s| size_of(&SIZES, s)).sum();
    println!(
        "netem_loss: {n} messages ({} KiB) each way and 2 x {} KiB of RMA each way in {took:.1?}",
        bytes >> 10,
        RMA_LEN >> 10
    );
    for side in 0..2 {
        println!(
            "{}: {}\n  {} counters: {:?}\n  {} tx_packets {}",
            DEV[side],
            stats[side].trim().replace('\n', " "),
            RXE[side],
            rxe[side],
            DEV[side],
            tx[side]
        );
    }
    let dropped: Vec<u64> = stats.iter().map(|s| number_after(s, "dropped ").unwrap_or(0)).collect();
    assert!(
        dropped.iter().all(|&d| d > 0),
        "netem dropped nothing on one end: {dropped:?}"
    );
    for side in 0..2 {
        // rxe counts a packet as sent before the qdisc (netem) drops it, and
        // a few that never reach the device (measured: 35 of 86549). What
        // the qdisc passed on went to the veth, which may still drop it when
        // the other end's backlog is full (under load: up to 9.4% of it),
        // so the qdisc's count is what proves the crossing.
        let sent = counter(&rxe[side], "sent_pkts");
        let passed = number_after(&stats[side], "bytes ").unwrap_or(0);
        assert!(
            (passed + dropped[side]) * 100 >= sent * 95,
            "{}: {sent} packets sent but only {passed} passed by {}'s qdisc (+{} dropped; {} left the veth): \
             traffic did not cross the veth",
            RXE[side],
            DEV[side],
            dropped[side],
            tx[side]
        );
    }
    if !before[0].is_empty() {
        // Retransmissions: after a timeout (completer_retry_err) or a NAK
        // for a sequence gap (rcvd_seq_err).
        let retries: u64 = rxe
            .iter()
            .map(|c| counter(c, "completer_retry_err") + counter(c, "rcvd_seq_err"))
            .sum();
        assert!(retries > 0, "rxe counted no retransmission: {rxe:?}");
    }
    for w in [&mut a, &mut b] {
        w.close();
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

/// Transport retries and ACK timeout for the link-down case: rxe retries a
/// packet forever with 7, so 6; 4.096 µs × 2^12 = 16.8 ms per try. A new
/// connection attempted while the link is down fails after 5 s (rdma_cm
/// alone: about 100 s).
const FAST_RETRY: &[(&str, &str)] = &[
    ("XFER_VERBS_RETRY_CNT", "6"),
    ("XFER_VERBS_TIMEOUT", "12"),
    ("XFER_VERBS_CONNECT_TIMEOUT_MS", "5000"),
];

/// Message sizes of the link-down case: eager and rendezvous, at most
/// 200 kB so that many receives can be posted (14 MB each way in 300
/// messages: the link goes down mid-transfer).
const LINK_SIZES: [usize; 6] = [1, EAGER_MAX, RNDV_THRESHOLD + 1, 200_000, 17, EAGER_MAX + 1];

/// How long after the link goes down every operation must have ended.
fn link_down_bound() -> Duration {
    env_secs("XFER_FAULTS_VERBS_DOWN_BOUND", 30)
}

/// The link goes down while both sides send and do RMA: every outstanding
/// operation ends with `PeerUnreachable`, soon, and nothing is corrupted.
#[test]
fn link_down_mid_transfer() {
    skip_unless_possible!("link_down_mid_transfer");
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let _took = Took("link_down_mid_transfer", Instant::now());
    let net = RxePair::new();
    let before = [net.counters(0), net.counters(1)];
    let mut a = net.spawn(0, "A", &LINK_SIZES, FAST_RETRY);
    let mut b = net.spawn(1, "B", &LINK_SIZES, FAST_RETRY);
    let pa = b.peer(&a.name.clone());
    let pb = a.peer(&b.name.clone());
    let n = env_u32("XFER_FAULTS_VERBS_DOWN_MESSAGES", 300);
    exchange(&mut a, pb, 1, &mut b, pa, 2, n);
    wait_until(
        &mut [&mut a, &mut b],
        Duration::from_secs(60),
        "the transfer to start",
        |ws| ws[1].recvs_ok(1) >= 2 && ws[0].recvs_ok(2) >= 2,
    );
    start_rma(&mut a, pb, &mut b, pa);
    let down = Instant::now();
    net.link(0, false);
    // The bound counts from when the command returned: it took 27 s once,
    // with rxe retrying sends into the downed device in a loop.
    let downed = Instant::now();
    println!("link down: `ip link set {} down` took {:.2?}", DEV[0], downed - down);
    let outstanding = [
        2 * n as usize + 2 - a.sends.len() - a.recvs.len() - a.rma.len(),
        2 * n as usize + 2 - b.sends.len() - b.recvs.len() - b.rma.len(),
    ];
    exchange_done(
        &mut a,
        1,
        &mut b,
        2,
        n,
        Duration::from_secs(90),
        "every operation to end after the link went down",
    );
    wait_until(&mut [&mut a, &mut b], Duration::from_secs(90), "the RMA to end", |ws| {
        ws.iter().all(|w| w.rma.len() == 2)
    });
    let last = a.last.max(b.last).expect("completions");
    let took = last.saturating_duration_since(down);
    let after_command = last.saturating_duration_since(downed);
    let rxe = [delta(&before[0], &net.counters(0)), delta(&before[1], &net.counters(1))];
    println!(
        "link down: all operations ended {took:.2?} after the link went down ({after_command:.2?} after the command returned)"
    );
    for (side, w) in [&a, &b].into_iter().enumerate() {
        let failed = w.failures();
        println!(
            "{}: {} outstanding at the fault, {} failed, e.g. {:?}\n  {} counters: {:?}",
            w.label,
            outstanding[side],
            failed.len(),
            failed.first(),
            RXE[side],
            rxe[side]
        );
    }
    for w in [&a, &b] {
        let failed = w.failures();
        assert!(
            !failed.is_empty(),
            "{}: nothing was outstanding when the link went down",
            w.label
        );
        // The side whose link went down may read rxe's disconnect event
        // while its port still shows active for a moment (docs/FAULTS.md):
        // that is taken for the peer's close.
        let other: Vec<&String> = failed
            .iter()
            .filter(|f| !f.contains("PeerUnreachable") && !f.contains("PeerClosed"))
            .collect();
        assert!(other.is_empty(), "{}: other errors: {other:?}", w.label);
    }
    a.check_received_in_order(2);
    b.check_received_in_order(1);
    let bound = link_down_bound();
    assert!(
        after_command < bound,
        "operations took {after_command:?} to fail after the link went down, more than {bound:?}"
    );
    // Not checked: talking again once the link is back. Between these two
    // rxe devices, a new connection after the link returned timed out in
    // most runs (docs/FAULTS.md, known limits).
    a.close();
    b.close();
}
