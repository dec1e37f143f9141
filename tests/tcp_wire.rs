//! Bad bytes on the TCP wire: a hostile or broken peer loses its own
//! connection, with an error and no panic; everyone else keeps working.
//! These speak the wire format by hand through plain sockets.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

use common::{expect, pattern, Node};
use xfer::{Access, Error, PeerAddr};
use xfer_tcp::name::TcpName;
use xfer_tcp::wire::{eager_cost, status, Frame, Header, CREDIT_INIT, HEADER_LEN, MAX_EAGER};

fn addr_of(node: &Node) -> std::net::SocketAddr {
    TcpName::decode(node.ep.name().as_bytes()).expect("tcp name").addr
}

fn nonce_of(node: &Node) -> u64 {
    TcpName::decode(node.ep.name().as_bytes()).expect("tcp name").nonce
}

/// A hello frame to the endpoint whose nonce is `to`, claiming the name of
/// an endpoint listening at `listen`.
fn hello_to(listen: std::net::SocketAddr, to: u64) -> Vec<u8> {
    let name = TcpName {
        addr: listen,
        nonce: 0x5eed,
    }
    .to_vec();
    let mut out = Frame::Hello {
        name_len: name.len() as u8,
        to,
    }
    .to_bytes()
    .to_vec();
    out.extend_from_slice(&name);
    out
}

/// A hello frame that `victim` accepts, claiming the name of an endpoint
/// listening at `listen`.
fn hello(listen: std::net::SocketAddr, victim: &Node) -> Vec<u8> {
    hello_to(listen, nonce_of(victim))
}

/// Polls `victim` until it closes the raw connection `s` (end of file or
/// reset). It may have acknowledged a hello first, and written nothing else.
fn assert_dropped(victim: &mut Node, s: &mut TcpStream) {
    let wrote = drain_until_dropped(victim, s);
    if !wrote.is_empty() {
        let ack = Frame::HelloAck {
            nonce: nonce_of(victim),
        };
        assert_eq!(
            &wrote[..],
            &ack.to_bytes()[..],
            "the victim wrote {} bytes other than a hello acknowledgement",
            wrote.len()
        );
    }
}

/// Polls `victim` until it closes the raw connection `s`; returns what it wrote.
fn drain_until_dropped(victim: &mut Node, s: &mut TcpStream) -> Vec<u8> {
    s.set_nonblocking(true).unwrap();
    let start = Instant::now();
    let mut wrote = Vec::new();
    let mut buf = [0u8; 64];
    loop {
        victim.poll();
        match s.read(&mut buf) {
            Ok(0) => return wrote,
            Ok(n) => wrote.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return wrote, // reset
        }
        assert!(start.elapsed() < common::DEADLINE, "hostile connection was not dropped");
    }
}

/// Reads the victim's acknowledgement of our hello on `s`.
fn expect_hello_ack(victim: &mut Node, s: &mut TcpStream) {
    let got = read_polling(victim, s, HEADER_LEN);
    assert_eq!(
        Frame::parse(&got),
        Ok(Frame::HelloAck {
            nonce: nonce_of(victim)
        })
    );
}

/// After an attack, `victim` still exchanges messages with a good peer.
fn still_works(victim: &mut Node) {
    let mut good = Node::new();
    let pv = good.add(victim);
    victim.ep.trecv(PeerAddr::UNSPEC, 1, 0, vec![0; 32], 900).unwrap();
    good.ep.tsend(pv, 1, pattern(32, 9), 901).unwrap();
    let r = expect(&mut [victim, &mut good], 0, 900);
    assert_eq!(r.result, Ok(()));
    assert_eq!(r.buf.unwrap(), pattern(32, 9));
}

/// A raw connection sends `bytes(victim)`: the victim drops it and keeps working.
fn attack(bytes: impl FnOnce(&Node) -> Vec<u8>) {
    let mut v = Node::new();
    let mut s = TcpStream::connect(addr_of(&v)).unwrap();
    s.write_all(&bytes(&v)).unwrap();
    assert_dropped(&mut v, &mut s);
    still_works(&mut v);
}

#[test]
fn garbage_drops_only_that_connection() {
    attack(|_| pattern(500, 3));
}

#[test]
fn oversized_eager_length_is_refused() {
    let mut hdr = Frame::Eager {
        tag: Some(1),
        data: None,
        len: 8,
        ack: None,
    }
    .to_bytes();
    Header::new_unchecked(&mut hdr[..]).set_len(MAX_EAGER + 1);
    attack(|v| {
        let mut bytes = hello("127.0.0.1:9".parse().unwrap(), v);
        bytes.extend_from_slice(&hdr);
        bytes
    });
}

/// A peer that sends more eager bytes than it was granted (the initial
/// credit: no receive was posted, so nothing was returned) loses its
/// connection, and nothing it sent stays: a peer that broke the protocol
/// is not trusted with what it sent within it either (issue 26).
#[test]
fn eager_beyond_the_credit_is_refused() {
    let len: usize = 64 << 10;
    let first = eager_cost(len as u64) as usize;
    assert!(first <= CREDIT_INIT as usize && 2 * first > CREDIT_INIT as usize);
    let mut v = Node::new();
    let mut s = TcpStream::connect(addr_of(&v)).unwrap();
    let mut bytes = hello("127.0.0.1:9".parse().unwrap(), &v);
    for seed in 0..2 {
        let hdr = Frame::Eager {
            tag: Some(1),
            data: None,
            len: len as u64,
            ack: None,
        };
        bytes.extend_from_slice(&hdr.to_bytes());
        bytes.extend_from_slice(&pattern(len, seed));
    }
    s.write_all(&bytes).unwrap();
    assert_dropped(&mut v, &mut s);
    assert_eq!(counter(&v, "credit_violations"), 1);
    assert_eq!(counter(&v, "messages_dropped"), 1, "the message within the credit");
    assert_eq!(counter(&v, "unexpected_entries"), 0);
    assert_eq!(counter(&v, "rx_memory"), 0, "everything it held given back");
    still_works(&mut v);
}

fn rts(token: u64) -> [u8; HEADER_LEN] {
    Frame::Rts {
        tag: Some(1),
        data: None,
        len: 1 << 20,
        token,
        ack: false,
    }
    .to_bytes()
}

fn counter(n: &Node, name: &str) -> u64 {
    let c = n.ep.counters().expect("counters");
    c.iter().find(|(k, _)| *k == name).map_or(0, |&(_, v)| v)
}

/// Requests to send cost credit too (their unexpected entries): a peer
/// that floods them past what it was granted loses its connection, and
/// the requests it left can never be fulfilled, so nothing of them stays.
#[test]
fn requests_to_send_beyond_the_credit_are_refused_and_dropped() {
    let within = CREDIT_INIT / eager_cost(0);
    let mut v = Node::new();
    let mut s = TcpStream::connect(addr_of(&v)).unwrap();
    let mut bytes = hello("127.0.0.1:9".parse().unwrap(), &v);
    for token in 0..within + 1 {
        bytes.extend_from_slice(&rts(token));
    }
    s.write_all(&bytes).unwrap();
    assert_dropped(&mut v, &mut s);
    assert_eq!(counter(&v, "credit_violations"), 1);
    assert_eq!(counter(&v, "requests_dropped"), within, "every request it left");
    assert_eq!(counter(&v, "unexpected_entries"), 0);
    assert_eq!(counter(&v, "unexpected_memory"), 0);
    still_works(&mut v);
}

/// A second request to send under an id that waits unmatched already is a
/// protocol error (it would be answered twice).
#[test]
fn a_request_to_send_under_a_waiting_id_is_refused() {
    let mut v = Node::new();
    let mut s = TcpStream::connect(addr_of(&v)).unwrap();
    let mut bytes = hello("127.0.0.1:9".parse().unwrap(), &v);
    bytes.extend_from_slice(&rts(7));
    bytes.extend_from_slice(&rts(7));
    s.write_all(&bytes).unwrap();
    assert_dropped(&mut v, &mut s);
    assert_eq!(counter(&v, "requests_dropped"), 1);
    still_works(&mut v);
}

#[test]
fn frame_before_hello_is_refused() {
    attack(|_| {
        Frame::Eager {
            tag: None,
            data: None,
            len: 0,
            ack: None,
        }
        .to_bytes()
        .to_vec()
    });
}

#[test]
fn connection_closed_mid_header() {
    let mut v = Node::new();
    let mut s = TcpStream::connect(addr_of(&v)).unwrap();
    let mut bytes = hello("127.0.0.1:9".parse().unwrap(), &v);
    bytes.extend_from_slice(
        &Frame::Eager {
            tag: Some(1),
            data: None,
            len: 8,
            ack: None,
        }
        .to_bytes()[..HEADER_LEN / 2],
    );
    s.write_all(&bytes).unwrap();
    drop(s);
    for _ in 0..200 {
        v.poll();
    }
    still_works(&mut v);
}

#[test]
fn eager_message_cut_off_mid_payload_fails_its_receive() {
    let mut v = Node::new();
    v.ep.trecv(PeerAddr::UNSPEC, 1, 0, vec![0; 1000], 5).unwrap();
    let mut s = TcpStream::connect(addr_of(&v)).unwrap();
    let mut bytes = hello("127.0.0.1:9".parse().unwrap(), &v);
    bytes.extend_from_slice(
        &Frame::Eager {
            tag: Some(1),
            data: None,
            len: 1000,
            ack: None,
        }
        .to_bytes(),
    );
    bytes.extend_from_slice(&[7; 400]);
    s.write_all(&bytes).unwrap();
    drop(s);
    let r = expect(&mut [&mut v], 0, 5);
    assert!(matches!(r.result, Err(Error::PeerUnreachable { .. })), "{:?}", r.result);
    still_works(&mut v);
}

/// A fake peer announces a rendezvous, reads the clear-to-send the victim
/// answers on the same connection, then misbehaves while sending the data.
fn rendezvous_then(misbehave: impl FnOnce(&mut TcpStream, u64)) -> xfer::Completion {
    let mut v = Node::new();
    let len = 1u64 << 20;
    v.ep.trecv(PeerAddr::UNSPEC, 3, 0, vec![0; len as usize], 6).unwrap();
    let mut s = TcpStream::connect(addr_of(&v)).unwrap();
    let mut bytes = hello("127.0.0.1:9".parse().unwrap(), &v);
    bytes.extend_from_slice(
        &Frame::Rts {
            tag: Some(3),
            data: None,
            len,
            token: 42,
            ack: false,
        }
        .to_bytes(),
    );
    s.write_all(&bytes).unwrap();
    expect_hello_ack(&mut v, &mut s);
    let got = read_polling(&mut v, &mut s, HEADER_LEN);
    s.set_nonblocking(false).unwrap();
    let cts = Frame::parse(&got).unwrap();
    let Frame::Cts {
        token: 42,
        rx_token,
        len: accepted,
    } = cts
    else {
        panic!("expected a CTS, got {cts:?}")
    };
    assert_eq!(accepted, len);
    misbehave(&mut s, rx_token);
    let r = expect(&mut [&mut v], 0, 6);
    still_works(&mut v);
    r
}

#[test]
fn rendezvous_sender_dying_mid_data_fails_the_receive() {
    let r = rendezvous_then(|s, rx_token| {
        let mut b = Frame::Data {
            rx_token,
            offset: 0,
            len: 1 << 20,
        }
        .to_bytes()
        .to_vec();
        b.extend_from_slice(&[1; 5000]);
        s.write_all(&b).unwrap();
        s.shutdown(std::net::Shutdown::Both).unwrap();
    });
    assert!(matches!(r.result, Err(Error::PeerUnreachable { .. })), "{:?}", r.result);
}

#[test]
fn rendezvous_data_past_the_accepted_length_is_refused() {
    let r = rendezvous_then(|s, rx_token| {
        s.write_all(
            &Frame::Data {
                rx_token,
                offset: 0,
                len: (1 << 20) + 1,
            }
            .to_bytes(),
        )
        .unwrap();
    });
    assert!(matches!(r.result, Err(Error::Protocol(_))), "{:?}", r.result);
}

#[test]
fn rendezvous_data_with_a_forged_token_is_refused() {
    let r = rendezvous_then(|s, rx_token| {
        s.write_all(
            &Frame::Data {
                rx_token: rx_token ^ (1 << 40),
                offset: 0,
                len: 10,
            }
            .to_bytes(),
        )
        .unwrap();
    });
    assert!(matches!(r.result, Err(Error::Protocol(_))), "{:?}", r.result);
}

/// A fake receiver answers our rendezvous with a clear-to-send for more
/// bytes than the message has: the send ends with a protocol error instead
/// of waiting forever, and the endpoint keeps working.
#[test]
fn clear_to_send_longer_than_the_message_fails_the_send() {
    let mut v = Node::new();
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    fake.set_nonblocking(true).unwrap();
    let fake_name = TcpName {
        addr: fake.local_addr().unwrap(),
        nonce: 0x5eed,
    }
    .to_vec();
    let peer = v.av.insert(&fake_name).unwrap();
    let len = common::test_attr().rndv_threshold * 2;
    v.ep.tsend(peer, 8, pattern(len, 8), 77).unwrap();
    let start = Instant::now();
    let mut from_victim = loop {
        v.poll();
        if let Ok((conn, _)) = fake.accept() {
            break conn;
        }
        assert!(start.elapsed() < common::DEADLINE, "the victim never connected");
    };
    // Read the victim's hello, acknowledge it, and read its request to send.
    from_victim.set_nonblocking(false).unwrap();
    let mut hdr = [0u8; HEADER_LEN];
    from_victim.read_exact(&mut hdr).unwrap();
    let Ok(Frame::Hello { name_len, to: 0x5eed }) = Frame::parse(&hdr) else {
        panic!("no hello to the fake's nonce first")
    };
    let mut name = vec![0u8; name_len as usize];
    from_victim.read_exact(&mut name).unwrap();
    from_victim
        .write_all(&Frame::HelloAck { nonce: 0x5eed }.to_bytes())
        .unwrap();
    from_victim.set_nonblocking(true).unwrap();
    let got = read_polling(&mut v, &mut from_victim, HEADER_LEN);
    hdr.copy_from_slice(&got);
    let Ok(Frame::Rts {
        token, len: rts_len, ..
    }) = Frame::parse(&hdr)
    else {
        panic!("no rendezvous request")
    };
    assert_eq!(rts_len, len as u64);
    let mut to_victim = TcpStream::connect(addr_of(&v)).unwrap();
    let mut bytes = hello(fake.local_addr().unwrap(), &v);
    bytes.extend_from_slice(
        &Frame::Cts {
            token,
            rx_token: 1,
            len: rts_len + 1,
        }
        .to_bytes(),
    );
    to_victim.write_all(&bytes).unwrap();
    let r = expect(&mut [&mut v], 0, 77);
    assert!(matches!(r.result, Err(Error::Protocol(_))), "{:?}", r.result);
    assert!(r.buf.is_some(), "the buffer comes back");
    still_works(&mut v);
}

/// The victim starts a rendezvous send (tag 1, context 10) to a fake peer,
/// which accepts its connection, acknowledges its Hello and reads its
/// request: the fake, its handle, that connection and the request's token.
fn rendezvous_to_fake(v: &mut Node) -> (TcpListener, PeerAddr, TcpStream, u64) {
    let (fake, name) = fake_peer();
    let peer = v.av.insert(&name).unwrap();
    let big = common::test_attr().rndv_threshold * 2;
    v.ep.tsend(peer, 1, pattern(big, 1), 10).unwrap();
    let (mut out, _) = accept_victim(v, &fake);
    out.write_all(&Frame::HelloAck { nonce: 0x5eed }.to_bytes()).unwrap();
    let token = rts_token(v, &mut out);
    (fake, peer, out, token)
}

/// Reads a request to send from the victim's connection `out`: its token.
fn rts_token(v: &mut Node, out: &mut TcpStream) -> u64 {
    match Frame::parse(&read_polling(v, out, HEADER_LEN)) {
        Ok(Frame::Rts { token, .. }) => token,
        other => panic!("no rendezvous request: {other:?}"),
    }
}

/// A send's key is reused once it ends; a clear-to-send naming the ended
/// send (its token's older generation) is a violation that ends only the
/// connection it came on, and never moves the send now holding the key.
#[test]
fn a_clear_to_send_for_an_ended_send_never_moves_the_one_reusing_its_key() {
    let mut v = Node::new();
    let (fake, peer, mut out, first) = rendezvous_to_fake(&mut v);
    let big = common::test_attr().rndv_threshold * 2;
    let cts = |token| {
        Frame::Cts {
            token,
            rx_token: 0,
            len: 0,
        }
        .to_bytes()
    };
    // Accepting nothing ends the send at once.
    out.write_all(&cts(first)).unwrap();
    assert_eq!(expect(&mut [&mut v], 0, 10).result, Ok(()));
    v.ep.tsend(peer, 1, pattern(big, 2), 11).unwrap();
    let second = rts_token(&mut v, &mut out);
    assert_eq!(second as u32, first as u32, "the key is reused");
    assert_ne!(second, first, "under another token");
    let mut back = TcpStream::connect(addr_of(&v)).unwrap();
    back.write_all(&hello(fake.local_addr().unwrap(), &v)).unwrap();
    expect_hello_ack(&mut v, &mut back);
    back.write_all(&cts(first)).unwrap();
    drain_until_dropped(&mut v, &mut back);
    assert!(v.take(11).is_none(), "the stale answer moved the second send");
    out.write_all(&cts(second)).unwrap();
    assert_eq!(expect(&mut [&mut v], 0, 11).result, Ok(()));
}

/// Reads exactly `n` bytes from the raw socket `s`, polling `victim` meanwhile.
fn read_polling(victim: &mut Node, s: &mut TcpStream, n: usize) -> Vec<u8> {
    s.set_nonblocking(true).unwrap();
    let start = Instant::now();
    let mut out = vec![0u8; n];
    let mut got = 0;
    while got < n {
        victim.poll();
        match s.read(&mut out[got..]) {
            Ok(0) => panic!("the victim closed the connection"),
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("read: {e}"),
        }
        assert!(start.elapsed() < common::DEADLINE, "no answer from the victim");
    }
    out
}

#[test]
fn forged_rma_answer_drops_the_connection() {
    let mut v = Node::new();
    let mut s = TcpStream::connect(addr_of(&v)).unwrap();
    let mut bytes = hello(s.local_addr().unwrap(), &v);
    bytes.extend_from_slice(
        &Frame::WriteAck {
            token: 12345,
            status: 0,
        }
        .to_bytes(),
    );
    s.write_all(&bytes).unwrap();
    assert_dropped(&mut v, &mut s);
    still_works(&mut v);
}

#[test]
fn hostile_rma_requests_are_answered_and_checked() {
    let mut v = Node::new();
    let mr = v
        .domain
        .register(pattern(64, 1), Access::REMOTE_READ | Access::REMOTE_WRITE)
        .unwrap();
    let ro = v.domain.register(pattern(64, 2), Access::REMOTE_READ).unwrap();
    let mut s = TcpStream::connect(addr_of(&v)).unwrap();
    let mut bytes = hello(s.local_addr().unwrap(), &v);
    let write = |key: u64, addr: u64, len: u64, token: u64| {
        Frame::WriteReq {
            key,
            addr,
            len,
            token,
            imm: false,
        }
        .to_bytes()
    };
    // Unknown key, past the end, wrapping, no write access: refused, payload discarded.
    bytes.extend_from_slice(&write(mr.key() ^ (1 << 40), mr.addr(), 16, 1));
    bytes.extend_from_slice(&[0xAA; 16]);
    bytes.extend_from_slice(&write(mr.key(), mr.addr() + 60, 16, 2));
    bytes.extend_from_slice(&[0xAA; 16]);
    bytes.extend_from_slice(&write(mr.key(), u64::MAX - 3, 8, 3));
    bytes.extend_from_slice(&[0xAA; 8]);
    bytes.extend_from_slice(&write(ro.key(), ro.addr(), 4, 4));
    bytes.extend_from_slice(&[0xAA; 4]);
    // A good write and a good read on the same connection.
    bytes.extend_from_slice(&write(mr.key(), mr.addr() + 8, 4, 5));
    bytes.extend_from_slice(b"good");
    bytes.extend_from_slice(
        &Frame::ReadReq {
            key: mr.key(),
            addr: mr.addr() + 6,
            len: 8,
            token: 6,
        }
        .to_bytes(),
    );
    s.write_all(&bytes).unwrap();
    expect_hello_ack(&mut v, &mut s);
    let expected = [
        (1, status::UNKNOWN_KEY),
        (2, status::OUT_OF_BOUNDS),
        (3, status::OUT_OF_BOUNDS),
        (4, status::ACCESS_DENIED),
        (5, status::OK),
    ];
    for (token, st) in expected {
        let hdr = read_polling(&mut v, &mut s, HEADER_LEN);
        assert_eq!(Frame::parse(&hdr), Ok(Frame::WriteAck { token, status: st }));
    }
    let hdr = read_polling(&mut v, &mut s, HEADER_LEN);
    assert_eq!(
        Frame::parse(&hdr),
        Ok(Frame::ReadResp {
            token: 6,
            status: status::OK,
            len: 8
        })
    );
    let data = read_polling(&mut v, &mut s, 8);
    let mut want = pattern(64, 1);
    want[8..12].copy_from_slice(b"good");
    assert_eq!(&data[..], &want[6..14]);
    assert_eq!(mr.to_vec().unwrap(), want, "only the good write landed");
    assert_eq!(ro.to_vec().unwrap(), pattern(64, 2));
    still_works(&mut v);
}

/// Remote keys are random: a peer that knows one key (and, worst case, the
/// addresses of every region) finds no other registration by trying keys
/// around it (near it, and at nearby values of either 32-bit half, where
/// an index-and-generation scheme put the next registrations). Every guess
/// is refused as an unknown key and no region changes.
#[test]
fn rma_keys_guessed_around_a_real_one_are_refused() {
    let mut v = Node::new();
    let regions: Vec<_> = (0..4)
        .map(|i| v.domain.register(pattern(64, i), Access::all()).unwrap())
        .collect();
    let known = regions[0].key();
    let mut guesses = Vec::new();
    for hi in -4i64..=4 {
        for lo in -4i64..=4 {
            let g = known.wrapping_add((hi << 32) as u64).wrapping_add(lo as u64);
            if g != known {
                guesses.push(g);
            }
        }
    }
    let mut s = TcpStream::connect(addr_of(&v)).unwrap();
    let mut bytes = hello(s.local_addr().unwrap(), &v);
    let mut token = 0;
    for &key in &guesses {
        for r in &regions {
            token += 1;
            let req = Frame::WriteReq {
                key,
                addr: r.addr(),
                len: 4,
                token,
                imm: false,
            };
            bytes.extend_from_slice(&req.to_bytes());
            bytes.extend_from_slice(&[0xAA; 4]);
        }
    }
    s.write_all(&bytes).unwrap();
    expect_hello_ack(&mut v, &mut s);
    for t in 1..=token {
        let hdr = read_polling(&mut v, &mut s, HEADER_LEN);
        assert_eq!(
            Frame::parse(&hdr),
            Ok(Frame::WriteAck {
                token: t,
                status: status::UNKNOWN_KEY
            }),
            "guess {t} of {token}"
        );
    }
    for (i, r) in regions.iter().enumerate() {
        assert_eq!(r.to_vec().unwrap(), pattern(64, i as u64), "region {i} untouched");
    }
    still_works(&mut v);
}

/// A hello naming another endpoint (an earlier one at the victim's address):
/// the victim drops the connection without acknowledging it, and nothing
/// sent behind it is delivered.
#[test]
fn hello_for_another_endpoint_is_refused() {
    let mut v = Node::new();
    v.ep.trecv(PeerAddr::UNSPEC, 5, 0, vec![0; 64], 1).unwrap();
    let mut s = TcpStream::connect(addr_of(&v)).unwrap();
    let mut bytes = hello_to(s.local_addr().unwrap(), nonce_of(&v) ^ 1);
    bytes.extend_from_slice(
        &Frame::Eager {
            tag: Some(5),
            data: None,
            len: 4,
            ack: None,
        }
        .to_bytes(),
    );
    bytes.extend_from_slice(b"lost");
    s.write_all(&bytes).unwrap();
    let wrote = drain_until_dropped(&mut v, &mut s);
    assert!(
        wrote.is_empty(),
        "the victim answered a hello that was not for it: {wrote:?}"
    );
    assert!(
        v.take(1).is_none(),
        "a message meant for another endpoint was delivered"
    );
    still_works(&mut v);
}

/// Accepts the connection `v` opens to `fake` and reads its hello; returns
/// the connection and the nonce the hello was addressed to.
fn accept_victim(v: &mut Node, fake: &TcpListener) -> (TcpStream, u64) {
    let start = Instant::now();
    let mut s = loop {
        v.poll();
        if let Ok((conn, _)) = fake.accept() {
            break conn;
        }
        assert!(start.elapsed() < common::DEADLINE, "the victim never connected");
    };
    let hdr = read_polling(v, &mut s, HEADER_LEN);
    let Ok(Frame::Hello { name_len, to }) = Frame::parse(&hdr) else {
        panic!("no hello first")
    };
    read_polling(v, &mut s, name_len as usize);
    (s, to)
}

fn fake_peer() -> (TcpListener, Vec<u8>) {
    fake_peer_at("127.0.0.1")
}

/// A fake peer listening on `ip` (names compare by address first: one on
/// 127.0.0.2 has a greater name than a node on 127.0.0.1).
fn fake_peer_at(ip: &str) -> (TcpListener, Vec<u8>) {
    let fake = TcpListener::bind((ip, 0)).unwrap();
    fake.set_nonblocking(true).unwrap();
    let name = TcpName {
        addr: fake.local_addr().unwrap(),
        nonce: 0x5eed,
    }
    .to_vec();
    (fake, name)
}

/// The victim writes nothing but its hello until the peer acknowledges it:
/// a peer that closes instead (a new endpoint at an old address) gets none of
/// the messages, and the victim's sends fail with "connection refused".
#[test]
fn nothing_is_sent_before_the_hello_is_acknowledged() {
    let mut v = Node::new();
    let (fake, name) = fake_peer();
    let peer = v.av.insert(&name).unwrap();
    let big = common::test_attr().rndv_threshold * 2;
    v.ep.tsend(peer, 1, pattern(100, 1), 10).unwrap();
    v.ep.tsend(peer, 1, pattern(big, 2), 11).unwrap();
    v.ep.tinject(peer, 1, b"inject").unwrap();
    let (mut s, to) = accept_victim(&mut v, &fake);
    assert_eq!(to, 0x5eed, "the hello names the endpoint the victim dialled");
    // A correct victim never writes more here; a wrong one would at once.
    let start = Instant::now();
    s.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    while start.elapsed() < std::time::Duration::from_millis(300) {
        v.poll();
        match s.read(&mut buf) {
            Ok(n) => panic!("the victim wrote {n} bytes before its hello was acknowledged"),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("read: {e}"),
        }
    }
    assert!(
        v.take(10).is_none() && v.take(11).is_none(),
        "nothing completes meanwhile"
    );
    drop(s);
    for ctx in [10, 11] {
        let c = expect(&mut [&mut v], 0, ctx);
        assert_eq!(
            c.result,
            Err(Error::PeerUnreachable {
                peer,
                errno: libc::ECONNREFUSED
            }),
            "send {ctx}"
        );
        assert!(c.buf.is_some(), "the buffer comes back");
    }
    still_works(&mut v);
}

/// An acknowledgement with another nonce than the one dialled fails the
/// connection and its operations; the victim keeps working.
#[test]
fn hello_acknowledged_by_another_endpoint_fails_the_send() {
    let mut v = Node::new();
    let (fake, name) = fake_peer();
    let peer = v.av.insert(&name).unwrap();
    v.ep.tsend(peer, 1, pattern(100, 1), 10).unwrap();
    let (mut s, _) = accept_victim(&mut v, &fake);
    s.write_all(&Frame::HelloAck { nonce: 0x5eee }.to_bytes()).unwrap();
    let c = expect(&mut [&mut v], 0, 10);
    assert!(matches!(c.result, Err(Error::Protocol(_))), "{:?}", c.result);
    still_works(&mut v);
}

/// A rendezvous send fails with the connection its request went out on; the
/// clear-to-send the peer had already sent on its own connection arrives
/// after that. It is dropped, not taken for a protocol violation: the peer's
/// connection and what follows on it are unharmed.
#[test]
fn clear_to_send_after_the_send_failed_is_dropped() {
    let mut v = Node::new();
    let (fake, peer, out, token) = rendezvous_to_fake(&mut v);
    let big = common::test_attr().rndv_threshold * 2;
    // The fake's own connection to the victim, acknowledged.
    let mut back = TcpStream::connect(addr_of(&v)).unwrap();
    back.write_all(&hello(fake.local_addr().unwrap(), &v)).unwrap();
    expect_hello_ack(&mut v, &mut back);
    // The connection the request went out on closes (in order); the send
    // fails with it.
    drop(out);
    let c = expect(&mut [&mut v], 0, 10);
    assert_eq!(c.result, Err(Error::PeerClosed { peer }));
    // The answer that crossed the failure, then a message, on the other connection.
    let mut bytes = Frame::Cts {
        token,
        rx_token: 1,
        len: big as u64,
    }
    .to_bytes()
    .to_vec();
    bytes.extend_from_slice(
        &Frame::Eager {
            tag: Some(2),
            data: None,
            len: 3,
            ack: None,
        }
        .to_bytes(),
    );
    bytes.extend_from_slice(b"yes");
    back.write_all(&bytes).unwrap();
    v.ep.trecv(PeerAddr::UNSPEC, 2, 0, vec![0; 8], 20).unwrap();
    let r = expect(&mut [&mut v], 0, 20);
    assert_eq!(r.result, Ok(()));
    assert_eq!(&r.buf.unwrap()[..3], b"yes");
    // A second answer for the same token is a violation again.
    back.write_all(
        &Frame::Cts {
            token,
            rx_token: 1,
            len: big as u64,
        }
        .to_bytes(),
    )
    .unwrap();
    drain_until_dropped(&mut v, &mut back);
    still_works(&mut v);
}

/// An RMA write and an RMA read fail with the connection their requests went
/// out on; the answers the peer had already sent on its own connection come
/// after that (the read's with its data). They are dropped, not taken for
/// protocol violations: that connection and what follows on it are unharmed,
/// and a second answer for the same token is a violation again.
#[test]
fn rma_answer_after_the_operation_failed_is_dropped() {
    for read in [false, true] {
        let mut v = Node::new();
        let (fake, name) = fake_peer();
        let peer = v.av.insert(&name).unwrap();
        let len = 300;
        let rkey = xfer::RemoteKey::from_parts(v.ep.provider_id(), 0x10000, 4096, 77).unwrap();
        if read {
            v.ep.read(peer, vec![0; len], &rkey, 0, 10).unwrap();
        } else {
            v.ep.write(peer, pattern(len, 1), &rkey, 0, 10).unwrap();
        }
        let (mut out, _) = accept_victim(&mut v, &fake);
        out.write_all(&Frame::HelloAck { nonce: 0x5eed }.to_bytes()).unwrap();
        let req = read_polling(&mut v, &mut out, HEADER_LEN);
        let token = match Frame::parse(&req) {
            Ok(Frame::ReadReq { token, .. }) if read => token,
            Ok(Frame::WriteReq { token, .. }) if !read => {
                read_polling(&mut v, &mut out, len);
                token
            }
            other => panic!("no RMA request: {other:?}"),
        };
        let mut back = TcpStream::connect(addr_of(&v)).unwrap();
        back.write_all(&hello(fake.local_addr().unwrap(), &v)).unwrap();
        expect_hello_ack(&mut v, &mut back);
        drop(out);
        let c = expect(&mut [&mut v], 0, 10);
        assert!(matches!(c.result, Err(Error::PeerClosed { .. })), "{:?}", c.result);
        let answer = |token| -> Vec<u8> {
            if !read {
                return Frame::WriteAck { token, status: 0 }.to_bytes().to_vec();
            }
            let mut b = Frame::ReadResp {
                token,
                status: 0,
                len: len as u64,
            }
            .to_bytes()
            .to_vec();
            b.extend_from_slice(&pattern(len, 2));
            b
        };
        let mut bytes = answer(token);
        bytes.extend_from_slice(
            &Frame::Eager {
                tag: Some(2),
                data: None,
                len: 3,
                ack: None,
            }
            .to_bytes(),
        );
        bytes.extend_from_slice(b"yes");
        back.write_all(&bytes).unwrap();
        v.ep.trecv(PeerAddr::UNSPEC, 2, 0, vec![0; 8], 20).unwrap();
        let r = expect(&mut [&mut v], 0, 20);
        assert_eq!(r.result, Ok(()), "read {read}");
        assert_eq!(&r.buf.unwrap()[..3], b"yes", "read {read}");
        back.write_all(&answer(token)).unwrap();
        drain_until_dropped(&mut v, &mut back);
        still_works(&mut v);
    }
}

/// The fake peer dials `v` as well (a crossed first contact) with a hello
/// claiming `fake`'s name; returns that connection once `v` acknowledged it.
fn cross(v: &mut Node, fake: &TcpListener) -> TcpStream {
    let mut theirs = TcpStream::connect(addr_of(v)).unwrap();
    theirs
        .write_all(&hello_to(fake.local_addr().unwrap(), nonce_of(v)))
        .unwrap();
    expect_hello_ack(v, &mut theirs);
    theirs
}

fn connections(v: &Node) -> u64 {
    let c = v.ep.counters().unwrap();
    c.iter().find(|(k, _)| *k == "connections").map(|&(_, n)| n).unwrap()
}

/// Crossed first contact, our name the greater: the message waiting on our
/// connection (only our hello went out on it) moves behind the acknowledgement
/// on the peer's connection, and ours closes having carried nothing else.
#[test]
fn crossed_first_contact_the_greater_name_takes_the_peers_connection() {
    let mut attr = common::test_attr();
    attr.params.set("tcp.addr", "127.0.0.2");
    let mut v = Node::with_attr(&attr);
    let (fake, name) = fake_peer_at("127.0.0.1");
    let peer = v.av.insert(&name).unwrap();
    v.ep.tsend(peer, 1, pattern(100, 1), 10).unwrap();
    let (mut own, _) = accept_victim(&mut v, &fake);
    let mut theirs = cross(&mut v, &fake);
    let hdr = read_polling(&mut v, &mut theirs, HEADER_LEN);
    assert_eq!(
        Frame::parse(&hdr),
        Ok(Frame::Eager {
            tag: Some(1),
            data: None,
            len: 100,
            ack: None,
        })
    );
    assert_eq!(read_polling(&mut v, &mut theirs, 100), pattern(100, 1));
    assert_eq!(expect(&mut [&mut v], 0, 10).result, Ok(()));
    assert!(
        drain_until_dropped(&mut v, &mut own).is_empty(),
        "nothing but the hello on ours"
    );
    assert_eq!(connections(&v), 1);
    // Later messages take the same connection.
    v.ep.tsend(peer, 2, pattern(8, 2), 11).unwrap();
    let hdr = read_polling(&mut v, &mut theirs, HEADER_LEN);
    assert!(matches!(Frame::parse(&hdr), Ok(Frame::Eager { tag: Some(2), .. })));
}

/// Crossed first contact, our name the smaller: we keep our connection (the
/// peer gives its own up); our message waits there for the acknowledgement.
#[test]
fn crossed_first_contact_the_smaller_name_keeps_its_connection() {
    let mut v = Node::new();
    let (fake, name) = fake_peer_at("127.0.0.2");
    let peer = v.av.insert(&name).unwrap();
    v.ep.tsend(peer, 1, pattern(100, 1), 10).unwrap();
    let (mut own, _) = accept_victim(&mut v, &fake);
    let _theirs = cross(&mut v, &fake);
    own.write_all(&Frame::HelloAck { nonce: 0x5eed }.to_bytes()).unwrap();
    let hdr = read_polling(&mut v, &mut own, HEADER_LEN);
    assert!(matches!(Frame::parse(&hdr), Ok(Frame::Eager { tag: Some(1), .. })));
    assert_eq!(read_polling(&mut v, &mut own, 100), pattern(100, 1));
    assert_eq!(expect(&mut [&mut v], 0, 10).result, Ok(()));
    assert_eq!(connections(&v), 2, "the peer's connection stays until it gives it up");
}

/// Requests to send posted in a burst wait for it, as eager frames do: with
/// the connection open and no progress call after the posts, only the
/// first request reaches the wire; the next progress call writes the others
/// (together), in order.
#[test]
fn requests_to_send_posted_in_a_burst_wait_for_the_next_progress() {
    let mut v = Node::new();
    let (fake, name) = fake_peer();
    let peer = v.av.insert(&name).unwrap();
    v.ep.tsend(peer, 1, pattern(100, 1), 10).unwrap();
    let (mut s, _) = accept_victim(&mut v, &fake);
    s.write_all(&Frame::HelloAck { nonce: 0x5eed }.to_bytes()).unwrap();
    // The eager message that opened the connection.
    let hdr = read_polling(&mut v, &mut s, HEADER_LEN);
    assert!(matches!(Frame::parse(&hdr), Ok(Frame::Eager { len: 100, .. })));
    read_polling(&mut v, &mut s, 100);
    expect(&mut [&mut v], 0, 10);
    let big = common::test_attr().rndv_threshold * 2;
    for i in 0..3u64 {
        v.ep.tsend(peer, 2, pattern(big, i), 20 + i).unwrap();
    }
    // No progress call on the victim: only the first request is written.
    let mut got = Vec::new();
    let start = Instant::now();
    let mut buf = [0u8; 256];
    while start.elapsed() < std::time::Duration::from_millis(100) {
        match s.read(&mut buf) {
            Ok(0) => panic!("the victim closed the connection"),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("read: {e}"),
        }
    }
    assert_eq!(
        got.len(),
        HEADER_LEN,
        "one request to send before the next progress call"
    );
    let mut tokens = Vec::new();
    let Ok(Frame::Rts { token, len, .. }) = Frame::parse(&got) else {
        panic!("not a request to send")
    };
    assert_eq!(len, big as u64);
    tokens.push(token);
    // The next progress call writes the rest of the burst.
    let rest = read_polling(&mut v, &mut s, 2 * HEADER_LEN);
    for h in rest.chunks(HEADER_LEN) {
        let Ok(Frame::Rts { token, len, .. }) = Frame::parse(h) else {
            panic!("not a request to send")
        };
        assert_eq!(len, big as u64);
        tokens.push(token);
    }
    let mut unique = tokens.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), 3, "three distinct requests: {tokens:?}");
}

/// A name with nonce 0 stands for whichever endpoint listens at its
/// address (how libfabric programs name a peer by node and service): the
/// endpoint there accepts the Hello, its answer is accepted whatever its
/// nonce, and a message from a peer known only by such a name is reported
/// from that entry; the answer back goes out over the same name.
#[test]
fn a_name_with_nonce_zero_reaches_whoever_listens_there() {
    let (mut a, mut b) = (Node::new(), Node::new());
    let any = |n: &Node| {
        TcpName {
            addr: addr_of(n),
            nonce: xfer_tcp::name::ANY_NONCE,
        }
        .to_vec()
    };
    let b_at_a = a.av.insert(&any(&b)).unwrap();
    let a_at_b = b.av.insert(&any(&a)).unwrap();
    b.ep.trecv(PeerAddr::UNSPEC, 3, 0, vec![0; 32], 1).unwrap();
    a.ep.tsend(b_at_a, 3, pattern(32, 4), 2).unwrap();
    let r = expect(&mut [&mut b, &mut a], 0, 1);
    assert_eq!(r.result, Ok(()));
    assert_eq!(r.buf.unwrap(), pattern(32, 4));
    assert_eq!(r.src, a_at_b, "the source is the entry of a's address");
    a.ep.trecv(b_at_a, 5, 0, vec![0; 32], 3).unwrap();
    b.ep.tsend(a_at_b, 5, pattern(32, 6), 4).unwrap();
    let r = expect(&mut [&mut a, &mut b], 0, 3);
    assert_eq!(
        r.result,
        Ok(()),
        "a receive directed at the nonce-0 entry gets b's answer"
    );
    assert_eq!((r.buf.unwrap(), r.src), (pattern(32, 6), b_at_a));
}

/// A keyed endpoint and a raw peer that does not prove the key: after its
/// Hello the victim writes at most a Challenge (none when the connection
/// ends in the same progress call), never a HelloAck; a frame in place of
/// the Proof, or a Proof that does not verify, ends the connection with
/// nothing delivered, counted in `admission_refused`.
#[test]
fn a_peer_that_does_not_prove_the_job_key_is_refused_before_delivery() {
    let mut attr = common::test_attr();
    attr.job_key = Some(xfer::JobKey(b"secret".to_vec()));
    let mut v = Node::with_attr(&attr);
    v.ep.trecv(PeerAddr::UNSPEC, 7, 0, vec![0; 64], 70).unwrap();
    let eager = Frame::Eager {
        tag: Some(7),
        data: None,
        len: 4,
        ack: None,
    };
    let mut hostile = |after_hello: Vec<u8>| {
        let mut s = TcpStream::connect(addr_of(&v)).unwrap();
        let mut bytes = hello(s.local_addr().unwrap(), &v);
        bytes.extend_from_slice(&after_hello);
        s.write_all(&bytes).unwrap();
        let wrote = drain_until_dropped(&mut v, &mut s);
        if !wrote.is_empty() {
            assert_eq!(wrote.len(), HEADER_LEN, "the victim wrote more than a challenge");
            assert!(matches!(Frame::parse(&wrote), Ok(Frame::Challenge { .. })), "{wrote:?}");
        }
    };
    // A message instead of the Proof.
    let mut m = eager.to_bytes().to_vec();
    m.extend_from_slice(b"evil");
    hostile(m);
    // A Proof of the right size that does not verify, then the message.
    let mut p = Frame::Proof.to_bytes().to_vec();
    p.extend_from_slice(&[0x5a; 32]);
    p.extend_from_slice(&eager.to_bytes());
    p.extend_from_slice(b"evil");
    hostile(p);
    // Hello alone: the Challenge comes; a Proof made with another key is refused.
    let mut s = TcpStream::connect(addr_of(&v)).unwrap();
    s.write_all(&hello(s.local_addr().unwrap(), &v)).unwrap();
    let got = read_polling(&mut v, &mut s, HEADER_LEN);
    assert!(matches!(Frame::parse(&got), Ok(Frame::Challenge { .. })), "{got:?}");
    let mut p = Frame::Proof.to_bytes().to_vec();
    p.extend_from_slice(&[0xa5; 32]);
    s.write_all(&p).unwrap();
    assert!(drain_until_dropped(&mut v, &mut s).is_empty(), "answered a wrong proof");
    let refused =
        v.ep.counters()
            .unwrap()
            .into_iter()
            .find(|(k, _)| *k == "admission_refused");
    assert_eq!(refused, Some(("admission_refused", 3)));
    assert!(v.take(70).is_none(), "a refused peer's message was delivered");
    // A peer with the key is served by the same endpoint.
    let mut good = Node::with_attr(&attr);
    let pv = good.add(&v);
    good.ep.tsend(pv, 7, b"good".to_vec(), 71).unwrap();
    let r = expect(&mut [&mut v, &mut good], 0, 70);
    assert_eq!(r.result, Ok(()));
    assert_eq!(&r.buf.unwrap()[..4], b"good");
}

/// A peer that says Hello to a keyed endpoint and never proves the key is
/// dropped after the connect timeout, and counted as refused.
#[test]
fn a_peer_that_never_answers_the_challenge_is_dropped_after_the_connect_timeout() {
    let mut attr = common::test_attr();
    attr.job_key = Some(xfer::JobKey(b"secret".to_vec()));
    attr.params.set("tcp.connect_timeout_ms", "300");
    let mut v = Node::with_attr(&attr);
    let mut s = TcpStream::connect(addr_of(&v)).unwrap();
    s.write_all(&hello(s.local_addr().unwrap(), &v)).unwrap();
    let start = Instant::now();
    let wrote = drain_until_dropped(&mut v, &mut s);
    assert!(
        start.elapsed() >= std::time::Duration::from_millis(300),
        "dropped before the timeout"
    );
    assert!(matches!(Frame::parse(&wrote), Ok(Frame::Challenge { .. })), "{wrote:?}");
    let refused =
        v.ep.counters()
            .unwrap()
            .into_iter()
            .find(|(k, _)| *k == "admission_refused");
    assert_eq!(refused, Some(("admission_refused", 1)));
}

/// The victim's send of `len` bytes asking for delivery completion, to a
/// fake peer that acknowledged its hello: the connection and the frame
/// that carries the message (its header).
fn acknowledged_send(v: &mut Node, fake: &TcpListener, peer: PeerAddr, len: usize, ctx: u64) -> (TcpStream, Frame) {
    let op = xfer::SendOp {
        peer,
        tag: Some(4),
        data: None,
        buf: pattern(len, ctx).into(),
        context: ctx,
        completion: true,
        level: xfer::CompletionLevel::Delivery,
    };
    v.ep.post_send(op).unwrap();
    let (mut out, _) = accept_victim(v, fake);
    out.write_all(&Frame::HelloAck { nonce: 0x5eed }.to_bytes()).unwrap();
    let first = Frame::parse(&read_polling(v, &mut out, HEADER_LEN)).expect("a frame");
    (out, first)
}

/// A send asking for delivery completion carries its token (an Eager frame
/// with the ACK flag, or an Rts with it and then its data) and completes
/// only at the Delivered frame that answers it; a second Delivered for it
/// is a violation that drops the connection, and the victim keeps working.
#[test]
fn delivery_complete_send_waits_for_its_delivered_frame() {
    let big = common::test_attr().rndv_threshold * 2;
    for (len, ctx) in [(8, 10), (big, 11)] {
        let mut v = Node::new();
        let (fake, name) = fake_peer();
        let peer = v.av.insert(&name).unwrap();
        let (mut out, first) = acknowledged_send(&mut v, &fake, peer, len, ctx);
        let token = match first {
            Frame::Eager {
                tag: Some(4),
                len: 8,
                ack: Some(token),
                ..
            } if len == 8 => token,
            Frame::Rts {
                token,
                tag: Some(4),
                ack: true,
                ..
            } if len == big => {
                let cts = Frame::Cts {
                    token,
                    rx_token: 5,
                    len: len as u64,
                };
                out.write_all(&cts.to_bytes()).unwrap();
                let data = Frame::parse(&read_polling(&mut v, &mut out, HEADER_LEN));
                assert_eq!(
                    data,
                    Ok(Frame::Data {
                        rx_token: 5,
                        offset: 0,
                        len: len as u64
                    })
                );
                token
            }
            other => panic!("not an acknowledged send of {len} B: {other:?}"),
        };
        let payload = read_polling(&mut v, &mut out, len);
        assert_eq!(payload, pattern(len, ctx));
        for _ in 0..50 {
            v.poll();
        }
        assert!(v.take(ctx).is_none(), "completed before the target acknowledged it");
        out.write_all(&Frame::Delivered { token }.to_bytes()).unwrap();
        let s = expect(&mut [&mut v], 0, ctx);
        assert_eq!(s.result, Ok(()));
        assert_eq!(s.buf.unwrap(), pattern(len, ctx));
        out.write_all(&Frame::Delivered { token }.to_bytes()).unwrap();
        drain_until_dropped(&mut v, &mut out);
        still_works(&mut v);
    }
}

/// A Delivered frame before the data it acknowledges went out (here:
/// before the clear-to-send of a rendezvous) is a violation: the send fails
/// with the connection instead of completing while its payload is still to
/// be written.
#[test]
fn delivered_before_the_data_fails_the_send() {
    let mut v = Node::new();
    let (fake, name) = fake_peer();
    let peer = v.av.insert(&name).unwrap();
    let big = common::test_attr().rndv_threshold * 2;
    let (mut out, rts) = acknowledged_send(&mut v, &fake, peer, big, 11);
    let Frame::Rts { token, ack: true, .. } = rts else {
        panic!("not an acknowledged request to send: {rts:?}")
    };
    out.write_all(&Frame::Delivered { token }.to_bytes()).unwrap();
    let s = expect(&mut [&mut v], 0, 11);
    assert!(matches!(s.result, Err(Error::Protocol(_))), "{:?}", s.result);
    assert!(s.buf.is_some(), "the buffer comes back");
    still_works(&mut v);
}

/// An Eager frame asking for an acknowledgement is answered with a
/// Delivered frame echoing its token once read, whether a receive took it
/// or it waits unexpected.
#[test]
fn an_acknowledged_eager_frame_is_answered() {
    for posted in [true, false] {
        let mut v = Node::new();
        if posted {
            v.ep.trecv(PeerAddr::UNSPEC, 3, 0, vec![0; 16], 6).unwrap();
        }
        let mut s = TcpStream::connect(addr_of(&v)).unwrap();
        let mut bytes = hello("127.0.0.1:9".parse().unwrap(), &v);
        let eager = Frame::Eager {
            tag: Some(3),
            data: None,
            len: 5,
            ack: Some(0xfeed),
        };
        bytes.extend_from_slice(&eager.to_bytes());
        bytes.extend_from_slice(b"hello");
        s.write_all(&bytes).unwrap();
        expect_hello_ack(&mut v, &mut s);
        // A first consumption also grants credit.
        let mut got = Frame::parse(&read_polling(&mut v, &mut s, HEADER_LEN));
        if let Ok(Frame::Credit { .. }) = got {
            got = Frame::parse(&read_polling(&mut v, &mut s, HEADER_LEN));
        }
        assert_eq!(got, Ok(Frame::Delivered { token: 0xfeed }), "posted: {posted}");
        if !posted {
            v.ep.trecv(PeerAddr::UNSPEC, 3, 0, vec![0; 16], 6).unwrap();
        }
        let r = expect(&mut [&mut v], 0, 6);
        assert_eq!(&r.buf.unwrap()[..5], b"hello");
    }
}
