//! Where the TCP provider listens, on hosts as they are (issue 27): several
//! interfaces, container bridges, links that are down, IPv6 only.
//!
//! - `several_links_the_first_usable_one_is_chosen`: a namespace with
//!   loopback, two container bridges (`docker0`, a Docker network
//!   `br-<12 hex>`), a container link (`veth…`) and a link that is down, all
//!   before (in the kernel's order) the veth link to a second namespace.
//!   Automatic choice: the veth link's IPv4 address on both sides, and the
//!   two endpoints exchange tagged messages over it; `xfer-info` there says
//!   which interface is used and why each other one is not.
//!   `XFER_TCP_IFACE=xfdn,docker0` passes over the link that is down and
//!   takes the bridge, whose endpoint talks to the automatic one; a list of
//!   nothing usable is an error, not a fallback.
//! - `ipv6_only_namespaces`: two namespaces joined by a veth pair with only
//!   IPv6 addresses (global and link-local): the automatic choice is the
//!   global IPv6 address; endpoints at `[fe80::1%xfc]:PORT` and `fe80::2`
//!   (zone found from the interfaces) reach each other over link-local
//!   addresses, `[::1]` and `::1` over loopback.
//! - `ipv6_loopback_forms`: in this process, no namespace: endpoints at
//!   `[::1]`, `::1` and `[::1]:PORT` exchange tagged messages.
//!
//! Each endpoint of the namespace cases is a worker process (the harness of
//! tests/tcp_faults.rs, tests/common/faults.rs) started with
//! `ip netns exec NS`. They need `ip netns` (root and iproute2): where it is
//! not permitted they print `SKIP` and the reason and pass, unless
//! `XFER_FAULTS_REQUIRE=1`.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::faults::{assert_exchange_ok, exchange, exchange_done, required, run, skipped, try_run, Worker};
use xfer::{Completion, EndpointAttr, PeerAddr};
use xfer_tcp::name::TcpName;

/// Message sizes (eager and rendezvous), by sequence number.
const SIZES: [usize; 4] = [0, 17, 4096, 70_000];

/// Messages each way per exchange.
const N: u32 = 8;

/// The endpoint side (common::faults::worker), run only when a test spawned it.
#[test]
#[ignore = "helper process for the tcp_iface tests"]
fn worker() {
    common::faults::worker();
}

/// Why network namespaces cannot be made here, if they cannot.
fn netns_not_permitted() -> Option<String> {
    static SERIAL: AtomicU32 = AtomicU32::new(0);
    let probe = format!(
        "xfer-iface-probe-{}-{}",
        std::process::id(),
        SERIAL.fetch_add(1, Ordering::Relaxed)
    );
    match try_run(&["ip", "netns", "add", &probe]) {
        Ok(_) => {
            let _ = try_run(&["ip", "netns", "del", &probe]);
            None
        }
        Err(e) => Some(e),
    }
}

macro_rules! skip_unless_netns {
    ($name:expr) => {
        if let Some(why) = netns_not_permitted() {
            assert!(!required(), "{}: cannot run: {why}", $name);
            skipped(&format!("SKIP {}: `ip netns` is not permitted here: {why}", $name));
            return;
        }
    };
}

/// Network namespaces deleted (with their links) when dropped.
struct Namespaces(Vec<String>);

impl Namespaces {
    /// `count` new namespaces, named after the pid and a counter.
    fn new(count: usize) -> Namespaces {
        static SERIAL: AtomicU32 = AtomicU32::new(0);
        let base = format!(
            "xfer-iface-{}-{}",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        );
        let all: Vec<String> = (0..count).map(|i| format!("{base}-{i}")).collect();
        for ns in &all {
            let _ = try_run(&["ip", "netns", "del", ns]);
            run(&["ip", "netns", "add", ns]);
            run(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        Namespaces(all)
    }

    /// Runs `ip -n NS ARGS...`.
    fn ip(&self, ns: usize, args: &[&str]) {
        let mut all = vec!["ip", "-n", &self.0[ns]];
        all.extend_from_slice(args);
        run(&all);
    }

    /// Waits (bounded) until `dev` in `ns` has a carrier and the kernel has
    /// marked it running (`IFF_RUNNING` follows the carrier by up to a
    /// second: the kernel's link watch batches operational state changes).
    fn wait_carrier(&self, ns: usize, dev: &str) {
        let start = Instant::now();
        loop {
            let out = try_run(&["ip", "-n", &self.0[ns], "-o", "link", "show", dev]).unwrap_or_default();
            if out.contains("LOWER_UP") && !out.contains("NO-CARRIER") {
                return;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "{dev}: no carrier: {out}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A worker in `ns` with extra environment; the address and interface
    /// settings are cleared unless `env` sets them (an empty value is unset).
    fn worker(&self, ns: usize, label: &str, env: &[(&str, &str)]) -> Worker {
        let mut all = vec![("XFER_PROVIDER", "tcp"), ("XFER_TCP_ADDR", ""), ("XFER_TCP_IFACE", "")];
        all.extend_from_slice(env);
        Worker::spawn(label, &["ip", "netns", "exec", &self.0[ns]], &SIZES, &all)
    }

    /// `xfer-info` in `ns` with extra environment: its exit status and output.
    fn xfer_info(&self, ns: usize, env: &[(&str, &str)]) -> (bool, String) {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.0[ns], env!("CARGO_BIN_EXE_xfer-info")])
            .env("XFER_PROVIDER", "tcp")
            .env("XFER_TCP_ADDR", "")
            .env("XFER_TCP_IFACE", "");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("running xfer-info");
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in &self.0 {
            if let Err(e) = try_run(&["ip", "netns", "del", ns]) {
                eprintln!("tcp_iface: cleaning up: {e}");
            }
        }
    }
}

/// The address in a worker's endpoint name.
fn listen_addr(w: &Worker) -> SocketAddr {
    TcpName::decode(&common::unhex(&w.name)).expect("a TCP name").addr
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an IP address")
}

/// A and B exchange `N` checksummed tagged messages each way, at once.
fn exchange_both_ways(a: &mut Worker, b: &mut Worker) {
    let pa = b.peer(&a.name.clone());
    let pb = a.peer(&b.name.clone());
    exchange(a, pb, 1, b, pa, 2, N);
    exchange_done(a, 1, b, 2, N, Duration::from_secs(60), "the exchange");
    assert_exchange_ok(a, 1, b, 2, N);
}

/// The row of interface `name` in `xfer-info`'s table: its words.
fn row<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_else(|| panic!("no row for {name} in:\n{text}"))
}

#[test]
fn several_links_the_first_usable_one_is_chosen() {
    skip_unless_netns!("several_links_the_first_usable_one_is_chosen");
    let ns = Namespaces::new(2);
    // In the kernel's order in namespace 0, before the link to namespace 1:
    // container bridges (a bridge without ports has a carrier), a container
    // link, and a link that is down.
    ns.ip(0, &["link", "add", "docker0", "type", "bridge"]);
    ns.ip(0, &["addr", "add", "172.30.0.1/24", "dev", "docker0"]);
    ns.ip(0, &["link", "set", "docker0", "up"]);
    ns.ip(0, &["link", "add", "br-0123456789ab", "type", "bridge"]);
    ns.ip(0, &["addr", "add", "172.30.1.1/24", "dev", "br-0123456789ab"]);
    ns.ip(0, &["link", "set", "br-0123456789ab", "up"]);
    ns.ip(
        0,
        &["link", "add", "veth0c1d2e", "type", "veth", "peer", "name", "xfct"],
    );
    ns.ip(0, &["addr", "add", "172.30.2.1/24", "dev", "veth0c1d2e"]);
    ns.ip(0, &["link", "set", "veth0c1d2e", "up"]);
    ns.ip(0, &["link", "set", "xfct", "addrgenmode", "none"]);
    ns.ip(0, &["link", "set", "xfct", "up"]);
    ns.ip(0, &["link", "add", "xfdn", "type", "veth", "peer", "name", "xfdn2"]);
    ns.ip(0, &["addr", "add", "10.79.0.1/24", "dev", "xfdn"]);
    run(&[
        "ip", "link", "add", "xfa", "netns", &ns.0[0], "type", "veth", "peer", "name", "xfb", "netns", &ns.0[1],
    ]);
    for (side, dev, v4, v6) in [
        (0, "xfa", "10.78.0.1/24", "2001:db8:78::1/64"),
        (1, "xfb", "10.78.0.2/24", "2001:db8:78::2/64"),
    ] {
        ns.ip(side, &["addr", "add", v4, "dev", dev]);
        ns.ip(side, &["addr", "add", v6, "dev", dev, "nodad"]);
        ns.ip(side, &["link", "set", dev, "up"]);
    }
    ns.wait_carrier(0, "xfa");
    ns.wait_carrier(1, "xfb");
    ns.wait_carrier(0, "veth0c1d2e");

    // Automatic: the veth link's IPv4 address, on both sides.
    let mut a = ns.worker(0, "A", &[]);
    let mut b = ns.worker(1, "B", &[]);
    assert_eq!(listen_addr(&a).ip(), ip("10.78.0.1"));
    assert_eq!(listen_addr(&b).ip(), ip("10.78.0.2"));
    exchange_both_ways(&mut a, &mut b);

    // xfer-info says which and why not each other one.
    let (ok, text) = ns.xfer_info(0, &[]);
    assert!(ok, "{text}");
    assert!(
        text.contains("tcp listens on: 10.78.0.1:0 on xfa (the first interface that is up"),
        "{text}"
    );
    assert_eq!(row(&text, "xfa").last(), Some(&"used"), "{text}");
    assert_eq!(
        row(&text, "xfa")[..4],
        ["xfa", "up", "virtual", "10.78.0.1/24"],
        "{text}"
    );
    assert_eq!(row(&text, "docker0")[..3], ["docker0", "up", "bridge"], "{text}");
    for skipped in ["docker0", "br-0123456789ab", "veth0c1d2e"] {
        assert!(
            row(&text, skipped).join(" ").contains("a container or VM network"),
            "{text}"
        );
    }
    assert!(row(&text, "xfdn").join(" ").ends_with("not used: down"), "{text}");
    assert!(
        row(&text, "lo").join(" ").contains("loopback, used only when"),
        "{text}"
    );
    assert!(row(&text, "xfct").join(" ").ends_with("not used: no address"), "{text}");

    // Listed: the link that is down is passed over, the bridge taken; its
    // endpoint talks to the automatic one.
    let mut c = ns.worker(0, "C", &[("XFER_TCP_IFACE", "xfdn, docker0,xfa")]);
    assert_eq!(listen_addr(&c).ip(), ip("172.30.0.1"));
    exchange_both_ways(&mut c, &mut a);
    let (ok, text) = ns.xfer_info(0, &[("XFER_TCP_IFACE", "xfdn,docker0,xfa")]);
    assert!(ok, "{text}");
    assert_eq!(row(&text, "docker0").last(), Some(&"used"), "{text}");
    assert!(
        row(&text, "xfa").join(" ").ends_with("usable, but docker0 comes first"),
        "{text}"
    );

    // A list with nothing usable is an error, and says so.
    let (ok, text) = ns.xfer_info(0, &[("XFER_TCP_IFACE", "xfdn,ib0")]);
    assert!(!ok, "xfer-info opened an endpoint with nothing usable listed:\n{text}");
    assert!(text.contains("tcp listens on: none: "), "{text}");
    assert!(text.contains("XFER_TCP_IFACE names no such interface: ib0"), "{text}");

    for w in [&mut a, &mut b, &mut c] {
        w.close();
    }
}

#[test]
fn ipv6_only_namespaces() {
    skip_unless_netns!("ipv6_only_namespaces");
    let ns = Namespaces::new(2);
    run(&[
        "ip", "link", "add", "xfc", "netns", &ns.0[0], "type", "veth", "peer", "name", "xfd", "netns", &ns.0[1],
    ]);
    // Only the addresses set here: no IPv4 but loopback's, and link-local
    // addresses of our choosing (no kernel-generated ones, no DAD delay).
    for (side, dev, global, local) in [
        (0, "xfc", "2001:db8:79::1/64", "fe80::1/64"),
        (1, "xfd", "2001:db8:79::2/64", "fe80::2/64"),
    ] {
        ns.ip(side, &["link", "set", dev, "addrgenmode", "none"]);
        ns.ip(side, &["addr", "add", global, "dev", dev, "nodad"]);
        ns.ip(side, &["addr", "add", local, "dev", dev, "nodad"]);
        ns.ip(side, &["link", "set", dev, "up"]);
    }
    ns.wait_carrier(0, "xfc");
    ns.wait_carrier(1, "xfd");

    // Automatic: the global IPv6 address.
    let mut a = ns.worker(0, "A", &[]);
    let mut b = ns.worker(1, "B", &[]);
    assert_eq!(listen_addr(&a).ip(), ip("2001:db8:79::1"));
    assert_eq!(listen_addr(&b).ip(), ip("2001:db8:79::2"));
    exchange_both_ways(&mut a, &mut b);
    let (ok, text) = ns.xfer_info(0, &[]);
    assert!(ok, "{text}");
    assert!(
        text.contains("tcp listens on: [2001:db8:79::1]:0 on xfc (no usable interface has IPv4"),
        "{text}"
    );

    // Link-local, with the zone written (and a port), and found from the
    // interfaces; names carry no zone: each side dials through its own.
    let mut c = ns.worker(0, "C", &[("XFER_TCP_ADDR", "[fe80::1%xfc]:47011")]);
    let mut d = ns.worker(1, "D", &[("XFER_TCP_ADDR", "fe80::2")]);
    assert_eq!(listen_addr(&c), "[fe80::1]:47011".parse().unwrap());
    assert_eq!(listen_addr(&d).ip(), ip("fe80::2"));
    exchange_both_ways(&mut c, &mut d);

    // Loopback written both ways.
    let mut e = ns.worker(0, "E", &[("XFER_TCP_ADDR", "[::1]")]);
    let mut f = ns.worker(0, "F", &[("XFER_TCP_ADDR", "::1")]);
    assert_eq!(listen_addr(&e).ip(), ip("::1"));
    exchange_both_ways(&mut e, &mut f);

    for w in [&mut a, &mut b, &mut c, &mut d, &mut e, &mut f] {
        w.close();
    }
}

#[test]
fn ipv6_loopback_forms() {
    let has_v6_loopback = std::fs::read_to_string("/proc/net/if_inet6")
        .is_ok_and(|t| t.lines().any(|l| l.starts_with("00000000000000000000000000000001")));
    if !has_v6_loopback {
        skipped("SKIP ipv6_loopback_forms: this host has no ::1 (IPv6 disabled)");
        return;
    }
    let node = |addr: &str| {
        let mut attr = EndpointAttr::from_env();
        attr.params.set("tcp.addr", addr).set("tcp.iface", "");
        common::Node::with_attr(&attr)
    };
    // A port of our own for the third: one the kernel just gave out.
    let port = std::net::TcpListener::bind("[::1]:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on ::1")
        .port();
    let fixed = format!("[::1]:{port}");
    let mut a = node("[::1]");
    if a.domain.provider() != "tcp" {
        skipped("SKIP ipv6_loopback_forms: the default provider is not tcp here");
        return;
    }
    let mut b = node("::1");
    let mut c = node(&fixed);
    for n in [&a, &b, &c] {
        let addr = TcpName::decode(n.ep.name().as_bytes()).unwrap().addr;
        assert_eq!(addr.ip(), ip("::1"), "{addr}");
    }
    assert_eq!(TcpName::decode(c.ep.name().as_bytes()).unwrap().addr.to_string(), fixed);
    let pb = a.add(&b);
    let pc = b.add(&c);
    let pa = c.add(&a);
    a.ep.trecv(PeerAddr::UNSPEC, 7, 0, vec![0; 64], 1).unwrap();
    b.ep.trecv(PeerAddr::UNSPEC, 7, 0, vec![0; 64], 1).unwrap();
    c.ep.trecv(PeerAddr::UNSPEC, 7, 0, vec![0; 64], 1).unwrap();
    a.ep.tsend(pb, 7, b"to b".to_vec(), 2).unwrap();
    b.ep.tsend(pc, 7, b"to c".to_vec(), 2).unwrap();
    c.ep.tsend(pa, 7, b"to a".to_vec(), 2).unwrap();
    for (i, want) in [(0, "to a"), (1, "to b"), (2, "to c")] {
        let got: Completion = common::expect(&mut [&mut a, &mut b, &mut c], i, 1);
        got.result.clone().expect("receive");
        assert_eq!(&got.buf.as_deref().unwrap()[..got.len], want.as_bytes());
    }
    for i in 0..3 {
        common::expect(&mut [&mut a, &mut b, &mut c], i, 2)
            .result
            .expect("send");
    }
}
