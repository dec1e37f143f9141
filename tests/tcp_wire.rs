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
use xfer_tcp::wire::{status, Frame, Header, HEADER_LEN, MAX_EAGER};

fn addr_of(node: &Node) -> std::net::SocketAddr {
    TcpName::decode(node.ep.name().as_bytes()).expect("tcp name").addr
}

/// A hello frame claiming the name of an endpoint listening at `listen`.
fn hello(listen: std::net::SocketAddr) -> Vec<u8> {
    let name = TcpName {
        addr: listen,
        nonce: 0x5eed,
    }
    .to_vec();
    let mut out = Frame::Hello {
        name_len: name.len() as u8,
    }
    .to_bytes()
    .to_vec();
    out.extend_from_slice(&name);
    out
}

/// Polls `victim` until it closes the raw connection `s` (end of file or reset).
fn assert_dropped(victim: &mut Node, s: &mut TcpStream) {
    s.set_nonblocking(true).unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 64];
    loop {
        victim.poll();
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => panic!("the victim wrote {n} bytes on a connection it accepted"),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return, // reset
        }
        assert!(start.elapsed() < common::DEADLINE, "hostile connection was not dropped");
    }
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

/// A raw connection sends `bytes`: the victim drops it and keeps working.
fn attack(bytes: &[u8]) {
    let mut v = Node::new();
    let mut s = TcpStream::connect(addr_of(&v)).unwrap();
    s.write_all(bytes).unwrap();
    assert_dropped(&mut v, &mut s);
    still_works(&mut v);
}

#[test]
fn garbage_drops_only_that_connection() {
    attack(&pattern(500, 3));
}

#[test]
fn oversized_eager_length_is_refused() {
    let mut hdr = Frame::Eager {
        tag: Some(1),
        data: None,
        len: 8,
    }
    .to_bytes();
    Header::new_unchecked(&mut hdr[..]).set_len(MAX_EAGER + 1);
    let mut bytes = hello("127.0.0.1:9".parse().unwrap());
    bytes.extend_from_slice(&hdr);
    attack(&bytes);
}

#[test]
fn frame_before_hello_is_refused() {
    attack(
        &Frame::Eager {
            tag: None,
            data: None,
            len: 0,
        }
        .to_bytes(),
    );
}

#[test]
fn connection_closed_mid_header() {
    let mut v = Node::new();
    let mut s = TcpStream::connect(addr_of(&v)).unwrap();
    let mut bytes = hello("127.0.0.1:9".parse().unwrap());
    bytes.extend_from_slice(
        &Frame::Eager {
            tag: Some(1),
            data: None,
            len: 8,
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
    let mut bytes = hello("127.0.0.1:9".parse().unwrap());
    bytes.extend_from_slice(
        &Frame::Eager {
            tag: Some(1),
            data: None,
            len: 1000,
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
    let mut bytes = hello("127.0.0.1:9".parse().unwrap());
    bytes.extend_from_slice(
        &Frame::Rts {
            tag: Some(3),
            data: None,
            len,
            token: 42,
        }
        .to_bytes(),
    );
    s.write_all(&bytes).unwrap();
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
    // Read the victim's hello and its request to send.
    from_victim.set_nonblocking(false).unwrap();
    let mut hdr = [0u8; HEADER_LEN];
    from_victim.read_exact(&mut hdr).unwrap();
    let Ok(Frame::Hello { name_len }) = Frame::parse(&hdr) else {
        panic!("no hello first")
    };
    let mut name = vec![0u8; name_len as usize];
    from_victim.read_exact(&mut name).unwrap();
    from_victim.read_exact(&mut hdr).unwrap();
    let Ok(Frame::Rts {
        token, len: rts_len, ..
    }) = Frame::parse(&hdr)
    else {
        panic!("no rendezvous request")
    };
    assert_eq!(rts_len, len as u64);
    let mut to_victim = TcpStream::connect(addr_of(&v)).unwrap();
    let mut bytes = hello(fake.local_addr().unwrap());
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
    let mut bytes = hello(s.local_addr().unwrap());
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
    let mut bytes = hello(s.local_addr().unwrap());
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
