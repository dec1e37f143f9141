//! Receive memory stays within `EndpointAttr::rx_memory` however many peers
//! come, fill what they were granted and leave: their messages stay for
//! the receives that will take them (a message sent is delivered), and
//! once they add up to the limit the next peers are refused when they
//! connect instead of growing the endpoint. Receives taking the messages
//! give the memory back, and peers are served again. TCP (`tcp`; other
//! providers skip), with peers that speak the stream by
//! hand: greeting, then the engine's frames (tests/tcp_wire.rs does the
//! same).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{expect, pattern, rss, test_attr, Node, DEADLINE};
use xfer::PeerAddr;
use xfer_core::unstable::rdm::credit::cost;
use xfer_core::unstable::rdm::engine::wire::{trimmed, Header, Kind};
use xfer_tcp::name::{TcpName, PROVIDER_TAG};

const LIMIT: u64 = 8 << 20;
const ROUNDS: usize = 12;
const PEERS: usize = 10;
/// The credit each side of a new peer starts with.
const CREDIT_INIT: u64 = 128 << 10;

/// One frame on the stream: length, header length, header, payload.
fn frame(h: Header, payload: &[u8]) -> Vec<u8> {
    let full = h.encode();
    let header = trimmed(&full);
    let len = (1 + header.len() + payload.len()) as u32;
    [&len.to_le_bytes()[..], &[header.len() as u8], header, payload].concat()
}

fn counter(n: &Node, name: &str) -> u64 {
    let c = n.ep.counters().expect("counters");
    c.iter()
        .find(|(k, _)| *k == name)
        .map(|&(_, v)| v)
        .unwrap_or_else(|| panic!("no counter {name}"))
}

/// A peer that connects as `name_port`, sends as many empty tagged
/// messages as its initial credit pays for, and leaves. Returns when the
/// server has them all, or has refused the peer.
fn fill_and_leave(server: &mut Node, name_port: u16) -> bool {
    let mut name = server.ep.name().as_bytes().to_vec();
    let id = name[0];
    name[0] = PROVIDER_TAG;
    let TcpName { addr: listen, nonce } = TcpName::decode(&name).expect("tcp name");
    let mut me = TcpName {
        addr: SocketAddr::from(([127, 0, 0, 1], name_port)),
        nonce: 0x5eed,
    }
    .to_vec();
    me[0] = id;
    let mut bytes = [&b"XFRD\x01\0\0\0"[..], &nonce.to_le_bytes()].concat();
    bytes.extend_from_slice(&frame(Header::new(Kind::Hello), &me));
    let count = CREDIT_INIT / cost(0);
    let eager = frame(Header::message(Kind::Eager, Some(1), None), b"");
    for _ in 0..count {
        bytes.extend_from_slice(&eager);
    }
    let (entries, refused) = (
        counter(server, "unexpected_entries"),
        counter(server, "rx_memory_refused"),
    );
    let mut s = TcpStream::connect(listen).expect("connect");
    // The server reads while we write: it may close at the Hello.
    s.set_nonblocking(true).expect("nonblocking");
    let (start, mut at) = (Instant::now(), 0);
    let mut sink = [0u8; 256];
    loop {
        server.poll();
        if at < bytes.len() {
            match s.write(&bytes[at..]) {
                Ok(n) => at += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => at = bytes.len(), // refused and closed
            }
        }
        let _ = s.read(&mut sink);
        if counter(server, "rx_memory_refused") > refused {
            return false;
        }
        if counter(server, "unexpected_entries") == entries + count {
            return true;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "peer {name_port} neither served nor refused"
        );
    }
}

#[test]
fn departing_peers_leave_at_most_the_limit_behind() {
    let mut attr = test_attr();
    attr.rx_memory = LIMIT;
    let mut server = Node::with_attr(&attr);
    if server.ep.name().as_bytes()[0] != xfer_tcp::PROVIDER_ID {
        return eprintln!("skipping: this provider does not speak the TCP stream");
    }
    let (mut served, mut refused) = (0u64, 0u64);
    let mut rss_at_refusal = None;
    let mut port = 1000;
    for round in 0..ROUNDS {
        for _ in 0..PEERS {
            port += 1;
            if fill_and_leave(&mut server, port) {
                served += 1;
            } else {
                refused += 1;
            }
        }
        // Let the departures be seen.
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(20) {
            server.poll();
        }
        let (committed, memory) = (counter(&server, "rx_memory"), counter(&server, "unexpected_memory"));
        eprintln!(
            "round {round}: served {served}, refused {refused}; rx_memory {committed} B, unexpected \
             {} entries in {memory} B; RSS {} MiB",
            counter(&server, "unexpected_entries"),
            rss() >> 20
        );
        assert!(committed <= LIMIT, "committed {committed} B past the {LIMIT} B limit");
        assert!(memory <= LIMIT, "unexpected messages hold {memory} B");
        if refused > 0 && rss_at_refusal.is_none() {
            rss_at_refusal = Some(rss());
        }
    }
    assert!(refused > 0, "peers past the limit were refused");
    let grew = rss().saturating_sub(rss_at_refusal.expect("a refusal"));
    assert!(grew < 4 << 20, "RSS grew {grew} B after the limit was reached");

    // Receives take every message: the memory comes back, and a peer is
    // served again.
    let held = counter(&server, "unexpected_entries");
    assert_eq!(
        held,
        served * (CREDIT_INIT / cost(0)),
        "every served peer's messages kept"
    );
    for i in 0..held {
        server.ep.trecv(PeerAddr::UNSPEC, 1, 0, vec![], i).unwrap();
        assert_eq!(expect(&mut [&mut server], 0, i).result, Ok(()));
    }
    assert_eq!(counter(&server, "unexpected_entries"), 0);
    assert_eq!(counter(&server, "rx_memory"), 0, "nothing committed once all is taken");
    let mut client = Node::new();
    let to_server = client.add(&server);
    client.ep.tsend(to_server, 2, pattern(100, 7), 1).unwrap();
    server.ep.trecv(PeerAddr::UNSPEC, 2, 0, vec![0; 100], 2).unwrap();
    let got = expect(&mut [&mut client, &mut server], 1, 2);
    assert!(got.buf.unwrap() == pattern(100, 7), "a new peer is served");
}
