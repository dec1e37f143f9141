//! One `shm+tcp` endpoint and two peer processes on this host: one reached
//! over shared memory, one over TCP (it runs with `XFER_SHM_ENABLED=0`, so
//! its name offers no shared-memory address, and listens on IPv6 loopback,
//! so its name is the longest the provider makes). Any-source receives take
//! both peers' messages in post order with each peer's order kept; the
//! kernel's socket table shows that only the TCP peer used TCP; each peer's
//! death fails what waits on it alone. A peer in another user namespace
//! goes over TCP, and so does a name whose shm address no port answers.
//! The peers are this test binary re-executed (`child_sender`, ignored in
//! normal runs).
//!
//! `XFER_MIXED_PROVIDER=shm+verbs` runs the same over shared memory and
//! verbs (the Soft-RoCE guest): the peer without shared memory is reached
//! over an RC queue pair, counted by the verbs transport's
//! `connections_made`; the user-namespace case is TCP's alone.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{drive, expect, hex, pattern, unhex, Node};
use xfer::{Error, PeerAddr};

/// The pair provider under test: `XFER_MIXED_PROVIDER`, else `shm+tcp`.
fn provider() -> String {
    std::env::var("XFER_MIXED_PROVIDER").unwrap_or_else(|_| "shm+tcp".into())
}

/// Whether the pair's network transport is TCP (else verbs).
fn over_tcp() -> bool {
    provider() == "shm+tcp"
}

/// Connections the network transport of `node` (named `name`) carries:
/// over TCP the established sockets at its listener (the kernel's table),
/// over verbs the transport's count of connections that came up.
fn network_connections(node: &Node, name: &[u8]) -> usize {
    if over_tcp() {
        return tcp_connections(tcp_port(name));
    }
    let made = node
        .ep
        .counters()
        .expect("counters")
        .into_iter()
        .find(|(k, _)| *k == "connections_made");
    made.expect("the verbs transport counts its connections").1 as usize
}
/// Messages each peer sends.
const N: u64 = 40;

/// A message's size: mostly eager, every 8th past the rendezvous threshold.
fn size_of(seq: u64) -> usize {
    if seq % 8 == 7 {
        common::test_attr().rndv_threshold * 3
    } else {
        100 + seq as usize
    }
}

/// The payload peer `who` sends as message `seq`: its id and the sequence
/// number first, so the receiver can check order.
fn payload(who: u8, seq: u64) -> Vec<u8> {
    let mut p = pattern(size_of(seq), u64::from(who) << 32 | seq);
    p[0] = who;
    p[1] = seq as u8;
    p
}

/// The peer: sends `N` tagged messages to `MIXED_PARENT`, waits for their
/// completions, prints `SENT`, then polls (keeping the parent's later
/// rendezvous unexpected) until killed.
#[test]
#[ignore = "helper process for the mixed tests"]
fn child_sender() {
    let who: u8 = std::env::var("MIXED_WHO").expect("MIXED_WHO").parse().expect("id");
    let mut node = Node::on(&provider());
    println!("CHILD-NAME {}", hex(node.ep.name().as_bytes()));
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("parent name");
    let parent = node.av.insert(&unhex(line.trim())).expect("insert parent");
    for seq in 0..N {
        node.ep.tsend(parent, 9, payload(who, seq), seq).expect("tsend");
    }
    drive(&mut [&mut node], "sends complete", |ns| ns[0].done.len() == N as usize);
    assert!(node.done.iter().all(|c| c.result.is_ok()), "{:?}", node.done);
    println!("SENT");
    loop {
        node.poll();
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A running peer and its name.
struct Peer {
    child: Child,
    name: Vec<u8>,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Peer {
    fn spawn(who: u8, env: &[(&str, &str)]) -> Peer {
        let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
        cmd.args([
            "--exact",
            "child_sender",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("MIXED_WHO", who.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn peer");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let name = loop {
            let line = lines.next().expect("peer output").expect("peer line");
            // The harness prints "test child_sender ... " before it.
            if let Some((_, n)) = line.split_once("CHILD-NAME ") {
                break unhex(n.trim());
            }
        };
        Peer { child, name, lines }
    }

    fn tell(&mut self, parent: &[u8]) {
        use std::io::Write;
        let stdin = self.child.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{}", hex(parent)).expect("write the parent's name");
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sleeps on the completion queue's descriptor (the endpoint's one wait
/// descriptor over both transports: `trywait`, then `poll(2)` on `cq.fd()`)
/// until `n` completions came, as the async layer does; a transport whose
/// arrivals did not make it readable fails the test at the deadline.
fn wait_for(me: &mut Node, n: usize) -> Vec<xfer::Completion> {
    let mut got = Vec::new();
    let mut buf = vec![xfer::Completion::EMPTY; 16];
    loop {
        let k = me.cq.poll(&mut buf).expect("cq poll");
        got.extend_from_slice(&buf[..k]);
        if got.len() >= n {
            break;
        }
        if me.cq.trywait().is_ok() {
            assert!(
                common::wait_readable(me.cq.fd(), common::DEADLINE),
                "{} of {n} completions ({} from handle 0, {} from 1, {} failed), and the descriptor stayed quiet; counters {:?}",
                got.len(),
                got.iter().filter(|c| c.src.0 == 0).count(),
                got.iter().filter(|c| c.src.0 == 1).count(),
                got.iter().filter(|c| c.result.is_err()).count(),
                me.ep.counters()
            );
        }
    }
    got.sort_by_key(|c| c.context);
    got
}

/// Established TCP sockets (IPv4 and IPv6) whose local port is `port`:
/// the connections accepted by the listener there.
fn tcp_connections(port: u16) -> usize {
    let at = format!(":{port:04X} ");
    // Only this process's sockets.
    let ours: std::collections::HashSet<String> = std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    // By inode: the kernel writes these tables in chunks while sockets come
    // and go, so a busy table can list one socket twice.
    let sockets: std::collections::HashSet<String> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|t| t.lines().skip(1).map(str::to_owned).collect::<Vec<_>>())
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            // cols[1] local, cols[3] state (01: established), cols[9] inode.
            let ok = cols.len() > 9 && cols[3] == "01" && format!("{} ", cols[1]).contains(&at);
            ok.then(|| cols[9].to_owned())
        })
        .filter(|inode| ours.contains(inode))
        .collect();
    sockets.len()
}

/// The TCP port inside an `shm+tcp` name: after the id, the host identity
/// (8), the shm length and address, the TCP nonce (8).
fn tcp_port(name: &[u8]) -> u16 {
    let shm = usize::from(name[9]);
    let mut tcp = vec![xfer_tcp::name::PROVIDER_TAG];
    tcp.extend_from_slice(&name[1 + 8 + 1 + shm..]);
    xfer_tcp::name::TcpName::decode(&tcp)
        .expect("a TCP address")
        .addr
        .port()
}

#[test]
fn one_endpoint_serves_a_peer_over_shm_and_one_over_tcp() {
    let mut me = Node::on(&provider());
    let mut near = Peer::spawn(1, &[]);
    let far_env: &[(&str, &str)] = if over_tcp() {
        &[("XFER_SHM_ENABLED", "0"), ("XFER_TCP_ADDR", "::1")]
    } else {
        &[("XFER_SHM_ENABLED", "0")]
    };
    let mut far = Peer::spawn(2, far_env);
    assert_eq!(near.name[9], 14, "the near peer offers shared memory");
    assert_eq!(far.name[9], 0, "the far peer offers none");
    if over_tcp() {
        assert_eq!(near.name.len(), 1 + 8 + 1 + 14 + 15, "an IPv4 shm+tcp name");
        assert_eq!(far.name.len(), 1 + 8 + 1 + 27, "an IPv6 name without shm");
    }
    // What xfer-info --peer says of each, from here.
    let route = |n: &[u8]| xfer::mixed::explain_route(&xfer::Address::new(n).expect("name")).expect("route");
    assert_eq!(route(&near.name), "shm: same host, same user and namespaces");
    let network = if over_tcp() { "tcp" } else { "verbs" };
    assert_eq!(
        route(&far.name),
        format!("{network}: the peer offers no shared-memory address")
    );

    let pn = me.av.insert(&near.name).expect("insert near");
    let pf = me.av.insert(&far.name).expect("insert far");
    let max = size_of(7);
    for i in 0..2 * N {
        me.ep.trecv(PeerAddr::UNSPEC, 9, 0, vec![0; max], i).expect("trecv");
    }
    let my_name = me.ep.name();
    near.tell(my_name.as_bytes());
    far.tell(my_name.as_bytes());

    // Receives complete in post order; each peer's messages in its order.
    // Sleeping on the one descriptor: each transport's arrivals must wake it.
    let mut next = [0u64; 3];
    for (i, c) in wait_for(&mut me, 2 * N as usize).into_iter().enumerate() {
        assert_eq!(c.context, i as u64);
        assert_eq!(c.result, Ok(()), "receive {i}");
        let buf = c.buf.expect("buffer");
        let who = buf[0];
        let seq = next[usize::from(who)];
        assert_eq!(
            &buf[..c.len],
            &payload(who, seq)[..],
            "peer {who} message {seq} out of order"
        );
        assert_eq!(c.src, if who == 1 { pn } else { pf });
        next[usize::from(who)] += 1;
    }
    assert_eq!(next[1..], [N, N]);
    for p in [&mut near, &mut far] {
        let sent = p.lines.by_ref().map_while(Result::ok).find(|l| l.contains("SENT"));
        assert!(sent.is_some(), "a peer did not finish");
    }
    // The far peer's connection is the only one this endpoint's network
    // transport carries: the near peer came over shared memory.
    assert_eq!(
        network_connections(&me, my_name.as_bytes()),
        1,
        "{network} connections at this endpoint"
    );

    // Rendezvous sends nobody receives wait on their peer; each peer's
    // death fails its own alone.
    let big = size_of(7);
    me.ep.tsend(pn, 1, pattern(big, 1), 1001).expect("tsend near");
    me.ep.tsend(pf, 1, pattern(big, 2), 1002).expect("tsend far");
    let settle = Instant::now() + Duration::from_millis(200);
    drive(&mut [&mut me], "a moment of progress", |_| Instant::now() > settle);
    assert!(
        me.take(1001).is_none() && me.take(1002).is_none(),
        "sends to idle peers completed"
    );
    near.kill();
    let c = expect(&mut [&mut me], 0, 1001);
    assert!(
        matches!(c.result, Err(Error::PeerClosed { .. } | Error::PeerUnreachable { .. })),
        "{:?}",
        c.result
    );
    assert!(me.take(1002).is_none(), "the TCP peer's send failed with the shm peer");
    far.kill();
    let c = expect(&mut [&mut me], 0, 1002);
    assert!(
        matches!(c.result, Err(Error::PeerClosed { .. } | Error::PeerUnreachable { .. })),
        "{:?}",
        c.result
    );
}

/// A peer in another user namespace (as in a rootless container) has
/// another host identity: served over TCP though it offers shared memory.
#[test]
fn a_peer_in_another_user_namespace_goes_over_tcp() {
    if !over_tcp() {
        eprintln!("skipped: TCP's case ({} runs the others)", provider());
        return;
    }
    let probe = Command::new("unshare").args(["-U", "true"]).status();
    if !probe.is_ok_and(|s| s.success()) {
        eprintln!("skipped: `unshare -U` is not available here");
        return;
    }
    let mut me = Node::on(&provider());
    let mut cmd = Command::new("unshare");
    cmd.arg("-U")
        .arg(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "child_sender",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("MIXED_WHO", "3")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn peer");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let name = loop {
        let line = lines.next().expect("peer output").expect("peer line");
        if let Some((_, n)) = line.split_once("CHILD-NAME ") {
            break unhex(n.trim());
        }
    };
    let mut peer = Peer { child, name, lines };
    assert_eq!(peer.name[9], 14, "the peer offers a shared-memory address");
    let route = xfer::mixed::explain_route(&xfer::Address::new(&peer.name).expect("name")).expect("route");
    assert_eq!(route, "tcp: different host identity");
    let pp = me.av.insert(&peer.name).expect("insert");
    for i in 0..N {
        me.ep.trecv(pp, 9, 0, vec![0; size_of(7)], i).expect("trecv");
    }
    peer.tell(me.ep.name().as_bytes());
    // Only TCP moves here: its arrivals wake the pair's descriptor.
    for (i, c) in wait_for(&mut me, N as usize).into_iter().enumerate() {
        assert_eq!(c.result, Ok(()));
        assert_eq!(&c.buf.expect("buffer")[..c.len], &payload(3, i as u64)[..]);
    }
    assert_eq!(tcp_connections(tcp_port(me.ep.name().as_bytes())), 1);
}

/// A name whose shm address no port answers (same host identity, a nonce
/// nobody listens on) is still reached, over its TCP (or verbs) address.
#[test]
fn an_unreachable_shm_address_falls_back_to_tcp() {
    let mut a = Node::on(&provider());
    let mut b = Node::on(&provider());
    let mut name = b.ep.name().as_bytes().to_vec();
    assert_eq!(name[9], 14, "b offers shared memory");
    // The shm address is `xs`, a pid and a nonce: change the nonce.
    for byte in &mut name[10 + 6..10 + 14] {
        *byte ^= 0x5a;
    }
    assert_eq!(
        xfer::mixed::explain_route(&xfer::Address::new(&name).expect("name")).expect("route"),
        "shm: same host, same user and namespaces",
        "the identity alone promises shared memory"
    );
    let to_b = a.av.insert(&name).expect("insert");
    b.ep.trecv(PeerAddr::UNSPEC, 9, 0, vec![0; 64], 1).expect("trecv");
    a.ep.tsend(to_b, 9, b"over the network after all".to_vec(), 2)
        .expect("tsend");
    let c = expect(&mut [&mut a, &mut b], 1, 1);
    assert_eq!(c.result, Ok(()));
    assert_eq!(&c.buf.expect("buffer")[..c.len], b"over the network after all");
    assert_eq!(expect(&mut [&mut a, &mut b], 0, 2).result, Ok(()));
    assert_eq!(
        network_connections(&b, &name),
        1,
        "a's connection to b's network transport"
    );
}
