//! Writes the seed corpus of every fuzz target into `fuzz/corpus/<target>/`
//! with the library's own encoders: valid encodings of every kind, and a
//! few edge cases next to them. Run from `fuzz/` after a wire format change:
//!
//! ```text
//! cargo run --example gen_corpus
//! ```
//!
//! Seeds are named after what they hold; files libFuzzer added (hash names)
//! are left alone.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use xfer_core::unstable::rdm::engine::wire::{self, Kind};
use xfer_core::RemoteKey;
use xfer_fuzz::{setup, token, BIG, BOTH, MR_BASE, MR_KEY, OUTBOUND, SMALL, SPLIT, TAG};
use xfer_tcp::name::TcpName;
use xfer_verbs::VerbsName;

struct Out {
    dir: PathBuf,
    count: usize,
    /// Conversations (`tcp_stream` seeds) and what the harness must print
    /// for each in verbose mode: the completion it is meant to reach.
    convs: Vec<(PathBuf, Vec<&'static str>)>,
}

impl Out {
    fn new(root: &Path, target: &str) -> Out {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir).expect("create corpus dir");
        // Seeds of an earlier run that this one no longer writes go.
        for entry in std::fs::read_dir(&dir).expect("read corpus dir") {
            let path = entry.expect("corpus entry").path();
            if path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("seed-"))
            {
                std::fs::remove_file(&path).expect("remove an old seed");
            }
        }
        Out {
            dir,
            count: 0,
            convs: Vec::new(),
        }
    }

    fn put(&mut self, name: &str, bytes: &[u8]) {
        std::fs::write(self.dir.join(format!("seed-{name}")), bytes).expect("write seed");
        self.count += 1;
    }

    /// A `tcp_stream` seed meant to reach `expect` (lines of the harness's
    /// verbose output, as substrings).
    fn conv(&mut self, name: &str, expect: &[&'static str], bytes: &[u8]) {
        self.put(name, bytes);
        self.convs
            .push((self.dir.join(format!("seed-{name}")), expect.to_vec()));
    }

    /// Runs every conversation through the built `tcp_stream` harness and
    /// checks that it reaches what it is meant to; the failures.
    fn check(&self, bin: &Path) -> Vec<String> {
        let mut failed = Vec::new();
        for (path, expect) in &self.convs {
            let out = Command::new(bin)
                .arg("-runs=1")
                .arg(path)
                .env("TCP_STREAM_VERBOSE", "1")
                .output()
                .expect("run the tcp_stream harness");
            let log = String::from_utf8_lossy(&out.stderr);
            let missing: Vec<_> = expect.iter().filter(|e| !log.contains(*e)).collect();
            if !out.status.success() || !missing.is_empty() {
                failed.push(format!("{}: {} missing {missing:?}", path.display(), out.status));
            }
        }
        failed
    }
}

fn edit(mut bytes: Vec<u8>, at: usize, with: &[u8]) -> Vec<u8> {
    bytes[at..at + with.len()].copy_from_slice(with);
    bytes
}

fn rkey(root: &Path) -> usize {
    let mut out = Out::new(root, "rkey");
    let key = RemoteKey::from_parts(1, 0x7f00_1234_5000, 16 << 20, token(3, 7)).expect("key");
    let packed = key.pack();
    out.put("tcp", &packed);
    out.put(
        "verbs",
        &RemoteKey::from_parts(2, 0x1000, 4096, 0x1234).expect("key").pack(),
    );
    out.put("empty-region", &RemoteKey::from_parts(1, 0, 0, 0).expect("key").pack());
    out.put(
        "top-of-memory",
        &RemoteKey::from_parts(1, u64::MAX - 1, 1, 1).expect("key").pack(),
    );
    let mut wrap = packed.clone();
    wrap[8..16].copy_from_slice(&(u64::MAX - 1).to_le_bytes());
    out.put("wraps", &wrap);
    out.put("truncated", &packed[..31]);
    let mut long = packed.clone();
    long.push(0);
    out.put("trailing", &long);
    out.put("bad-magic", &edit(packed.clone(), 0, b"kx"));
    out.put("version-2", &edit(packed.clone(), 2, &[2]));
    out.put("reserved", &edit(packed, 7, &[1]));
    out.count
}

fn tcp_name(root: &Path) -> usize {
    let mut out = Out::new(root, "tcp_name");
    let v4 = TcpName {
        addr: "10.0.0.1:5000".parse().expect("addr"),
        nonce: 0x0123_4567_89ab_cdef,
    }
    .to_vec();
    let v6 = TcpName {
        addr: "[2001:db8::1]:443".parse().expect("addr"),
        nonce: 1,
    }
    .to_vec();
    out.put("v4", &v4);
    out.put("v6", &v6);
    out.put(
        "v4-port-0",
        &TcpName {
            addr: "127.0.0.1:0".parse().expect("addr"),
            nonce: 0,
        }
        .to_vec(),
    );
    out.put("v4-short", &v4[..v4.len() - 1]);
    let mut long = v4.clone();
    long.push(0);
    out.put("v4-long", &long);
    out.put("v4-labelled-v6", &edit(v4.clone(), 1, &[6]));
    out.put("bad-family", &edit(v4.clone(), 1, &[5]));
    out.put("verbs-name", &verbs_name_bytes());
    out.put("tag-only", &v4[..1]);
    out.put("max-len", &[0x01; 32]);
    out.put("too-long", &[0x01; 33]);
    out.count
}

fn verbs_name_bytes() -> Vec<u8> {
    VerbsName {
        addr: "10.11.0.1:4791".parse().expect("addr"),
        nonce: 0x0123_4567_89ab_cdef,
    }
    .encode()
    .to_vec()
}

fn verbs_name(root: &Path) -> usize {
    let mut out = Out::new(root, "verbs_name");
    let name = verbs_name_bytes();
    out.put("v4", &name);
    out.put("port-0", &edit(name.clone(), 6, &[0, 0]));
    out.put("family-6", &edit(name.clone(), 1, &[6]));
    out.put("short", &name[..name.len() - 1]);
    let mut long = name.clone();
    long.push(0);
    out.put("long", &long);
    out.put(
        "tcp-name",
        &TcpName {
            addr: "10.0.0.1:5000".parse().expect("addr"),
            nonce: 1,
        }
        .to_vec(),
    );
    out.put("tag-only", &name[..1]);
    out.count
}

/// A `tcp_stream` input.
fn stream(flags: u8, chunking: u8, parts: &[&[u8]]) -> Vec<u8> {
    let mut v = vec![flags, chunking];
    for p in parts {
        v.extend_from_slice(p);
    }
    v
}

/// One frame on the TCP stream: length, header length, header (trimmed), payload.
fn frame(h: wire::Header, payload: &[u8]) -> Vec<u8> {
    let full = h.encode();
    let header = wire::trimmed(&full);
    let len = (1 + header.len() + payload.len()) as u32;
    [&len.to_le_bytes()[..], &[header.len() as u8], header, payload].concat()
}

/// A header of `kind` with `token`, edited by `f`.
fn hdr(kind: Kind, token: u64, f: impl FnOnce(&mut wire::Header)) -> wire::Header {
    let mut h = wire::Header::new(kind);
    h.token = token;
    f(&mut h);
    h
}

/// The greeting for nonce `to` (the harness xors the endpoint's nonce into
/// it: 0 names the endpoint under test, anything else an earlier one), then
/// a hello from a TCP peer at `addr`.
fn hello_from(addr: &str, to: u64) -> Vec<u8> {
    let addr: SocketAddr = addr.parse().expect("addr");
    let name = TcpName { addr, nonce: 0x5eed }.to_vec();
    let greeting = [&b"XFRD\x01\0\0\0"[..], &to.to_le_bytes()].concat();
    [greeting, frame(wire::Header::new(Kind::Hello), &name)].concat()
}

fn tcp_stream(root: &Path) -> Out {
    let mut out = Out::new(root, "tcp_stream");
    // The harness points the hello's address at its own listener.
    let hello = hello_from("127.0.0.1:9", 0);
    let h = hello.as_slice();
    let bytes = |n: usize| -> Vec<u8> { (0..n).map(|i| (i * 31 + 7) as u8).collect() };
    let eager = |tag: Option<u64>, data: Option<u64>, len: usize| {
        frame(wire::Header::message(Kind::Eager, tag, data), &bytes(len))
    };
    let admitted = "answered its Admitted";

    out.conv("hello", &[admitted], &stream(0, 0, &[h]));
    out.conv("hello-v6", &[admitted], &stream(0, 0, &[&hello_from("[::1]:9", 0)]));
    out.conv(
        "hello-earlier-endpoint",
        &["answered no Admitted"],
        &stream(setup::RECV, 0, &[&hello_from("127.0.0.1:9", 1), &eager(None, None, 0)]),
    );
    out.conv("hello-chunked", &[admitted], &stream(0, 1, &[h]));
    let e = eager(None, None, 32);
    out.conv(
        "eager-recv",
        &["completion 5 len 32 Ok"],
        &stream(setup::RECV, 0, &[h, &e]),
    );
    out.conv(
        "eager-recv-chunked",
        &["completion 5 len 32 Ok"],
        &stream(setup::RECV, 3, &[h, &e]),
    );
    out.put("eager-unexpected-known", &stream(setup::KNOWN, 0, &[h, &e]));
    let ea = frame(hdr(Kind::Eager, 0x5eed, |h| h.flags = wire::ACK), &bytes(32));
    out.conv(
        "eager-acknowledged",
        &["completion 5 len 32 Ok"],
        &stream(setup::RECV, 3, &[h, &ea]),
    );
    out.put("eager-acknowledged-unexpected", &stream(0, 0, &[h, &ea]));
    out.conv(
        "eager-tagged-truncated",
        &["completion 4 len 64 Err(Truncated"],
        &stream(setup::TRECV, 0, &[h, &eager(Some(TAG), Some(42), 100)]),
    );
    out.conv(
        "eager-empty",
        &["completion 5 len 0 Ok"],
        &stream(setup::RECV, 0, &[h, &eager(None, None, 0)]),
    );
    let big = eager(Some(TAG), None, 8192);
    out.conv(
        "eager-big-chunked",
        &["completion 4 len 8192 Ok"],
        &stream(setup::TRECV | setup::BIG, 60, &[h, &big]),
    );
    // Eager credit: a grant from the peer, and a peer spending more than the
    // initial 128 KiB on messages nobody received (refused).
    out.put(
        "credit-grant",
        &stream(0, 0, &[h, &frame(hdr(Kind::Credit, 0, |h| h.len = 1 << 20), b"")]),
    );
    let max = eager(None, None, 64 << 10);
    out.put("credit-overspent", &stream(setup::KNOWN, 0, &[h, &max, &max, &max]));
    out.put(
        "eager-cut-off",
        &stream(setup::TRECV | setup::BIG, 0, &[h, &big[..1000]]),
    );
    out.put(
        "eager-cut-off-reset",
        &stream(setup::TRECV | setup::RESET, 0, &[h, &big[..20]]),
    );
    out.put("ping", &stream(0, 0, &[h, &frame(wire::Header::new(Kind::Ping), b"")]));

    // Rendezvous to us: the victim answers Cts naming its receive's token,
    // token(0, 1), and the harness pushes Data frames to it.
    let rts = frame(
        hdr(Kind::Rts, 77, |h| {
            (h.flags, h.tag, h.len) = (wire::TAGGED, TAG, 8192);
        }),
        b"",
    );
    let data = |off: u64, n: usize| frame(hdr(Kind::Data, token(0, 1), |h| h.off = off), &bytes(n));
    // All at once, the data comes before the endpoint's Cts gave its token:
    // refused as data for no receive (a real sender waits for the Cts).
    out.put(
        "rndv-data-before-cts",
        &stream(setup::TRECV | setup::BIG, 0, &[h, &rts, &data(0, 8192)]),
    );
    out.conv(
        "rndv-recv-chunked",
        &["completion 4 len 8192 Ok"],
        &stream(setup::TRECV | setup::BIG, 40, &[h, &rts, &data(0, 8192)]),
    );
    out.conv(
        "rndv-recv-two-frames",
        &["completion 4 len 8192 Ok"],
        &stream(
            setup::TRECV | setup::BIG,
            30,
            &[h, &rts, &data(4096, 4096), &data(0, 4096)],
        ),
    );
    out.put("rndv-unexpected", &stream(0, 0, &[h, &rts]));
    out.put(
        "rndv-data-past-the-message",
        &stream(setup::TRECV | setup::BIG, 0, &[h, &rts, &data(8000, 4096)]),
    );

    // Answers to our operations: the send is token(0, 1) of its table, the
    // read and write tokens (0, 1) and (1, 2) of theirs.
    let answer = |kind: Kind, tok: u64, status: u32| frame(hdr(kind, tok, |h| h.status = status), b"");
    let cts = frame(hdr(Kind::Cts, token(0, 1), |h| h.addr = 99), b"");
    let delivered = answer(Kind::Delivered, token(0, 1), 0);
    out.conv(
        "fin",
        &["completion 1 len 8192 Ok", admitted],
        &stream(setup::SEND, 0, &[h, &answer(Kind::Fin, token(0, 1), 0)]),
    );
    out.conv(
        "fin-canceled",
        &["completion 1 len 8192 Err(Canceled"],
        &stream(setup::SEND, 0, &[h, &answer(Kind::Fin, token(0, 1), 1)]),
    );
    // The Cts makes the endpoint push its data; a Delivered that arrives
    // before the push is written is out of place.
    out.put("cts-delivered", &stream(setup::SEND, 20, &[h, &cts, &delivered]));
    out.put(
        "cts-unknown",
        &stream(setup::SEND, 0, &[h, &answer(Kind::Cts, token(0, 2), 0)]),
    );
    out.put("delivered-before-cts", &stream(setup::SEND, 0, &[h, &delivered]));
    let rma_data = |tok: u64, off: u64, n: usize| frame(hdr(Kind::RmaData, tok, |h| h.off = off), &bytes(n));
    out.conv(
        "read-data",
        &["completion 2 len 64 Ok"],
        &stream(
            setup::READ,
            0,
            &[
                h,
                &rma_data(token(0, 1), 0, SMALL),
                &answer(Kind::RmaDone, token(0, 1), 0),
            ],
        ),
    );
    out.conv(
        "read-data-big-chunked",
        &["completion 2 len 16384 Ok"],
        &stream(
            setup::READ | setup::BIG,
            63,
            &[
                h,
                &rma_data(token(0, 1), 0, BIG),
                &answer(Kind::RmaDone, token(0, 1), 0),
            ],
        ),
    );
    out.conv(
        "read-denied",
        &["completion 2 len 64 Err("],
        &stream(setup::READ, 0, &[h, &answer(Kind::RmaDone, token(0, 1), 3)]),
    );
    out.put(
        "read-done-early",
        &stream(
            setup::READ,
            0,
            &[h, &rma_data(token(0, 1), 0, 1), &answer(Kind::RmaDone, token(0, 1), 0)],
        ),
    );
    out.put(
        "read-data-past",
        &stream(setup::READ, 0, &[h, &rma_data(token(0, 1), 60, 8)]),
    );
    out.conv(
        "write-done",
        &["completion 3 len 64 Ok"],
        &stream(setup::WRITE, 0, &[h, &answer(Kind::RmaDone, token(0, 1), 0)]),
    );
    out.conv(
        "write-refused",
        &["completion 3 len 64 Err("],
        &stream(setup::WRITE, 0, &[h, &answer(Kind::RmaDone, token(0, 1), 2)]),
    );
    out.conv(
        "all-answers",
        &[
            "completion 1 len 8192 Ok",
            "completion 2 len 64 Ok",
            "completion 3 len 64 Ok",
        ],
        &stream(
            setup::SEND | setup::READ | setup::WRITE,
            7,
            &[
                h,
                &answer(Kind::Fin, token(0, 1), 0),
                &rma_data(token(0, 1), 0, SMALL),
                &answer(Kind::RmaDone, token(0, 1), 0),
                &answer(Kind::RmaDone, token(1, 2), 0),
            ],
        ),
    );

    // The same answers on the endpoint's own connection to the peer (no
    // greeting, no hello).
    out.conv(
        "outbound-fin",
        &["completion 1 len 8192 Ok"],
        &stream(setup::SEND, OUTBOUND, &[&answer(Kind::Fin, token(0, 1), 0)]),
    );
    out.conv(
        "outbound-read-data-chunked",
        &["completion 2 len 16384 Ok"],
        &stream(
            setup::READ | setup::BIG,
            OUTBOUND | 50,
            &[&rma_data(token(0, 1), 0, BIG), &answer(Kind::RmaDone, token(0, 1), 0)],
        ),
    );
    out.conv(
        "outbound-write-done-eager",
        &["completion 3 len 64 Ok", "completion 5 len 32 Ok"],
        &stream(
            setup::WRITE | setup::RECV,
            OUTBOUND,
            &[&answer(Kind::RmaDone, token(0, 1), 0), &e],
        ),
    );
    out.put("outbound-hello", &stream(setup::WRITE, OUTBOUND, &[&h[16..]]));
    out.put(
        "outbound-second-admitted",
        &stream(
            setup::WRITE,
            OUTBOUND,
            &[&frame(wire::Header::new(Kind::Admitted), &h[16 + 13..])],
        ),
    );

    // Two connections from the same peer at once: a new one (before SPLIT)
    // and the endpoint's own (after), chunks in turns.
    out.conv(
        "both-read-data-and-ping",
        &["completion 2 len 16384 Ok"],
        &stream(
            setup::READ | setup::BIG,
            BOTH | 20,
            &[
                h,
                &rma_data(token(0, 1), 0, BIG),
                &answer(Kind::RmaDone, token(0, 1), 0),
                SPLIT,
                &frame(wire::Header::new(Kind::Ping), b""),
            ],
        ),
    );
    out.conv(
        "both-fin-and-eager",
        &["completion 1 len 8192 Ok", "completion 5 len 32 Ok"],
        &stream(
            setup::SEND | setup::RECV,
            BOTH | 5,
            &[h, &answer(Kind::Fin, token(0, 1), 0), SPLIT, &e],
        ),
    );
    out.conv(
        "both-write-done-twice",
        &["completion 3 len 64 Ok"],
        &stream(
            setup::WRITE,
            BOTH,
            &[
                h,
                &answer(Kind::RmaDone, token(0, 1), 0),
                SPLIT,
                &answer(Kind::RmaDone, token(0, 1), 0),
            ],
        ),
    );

    // The peer's RMA and atomics into our registered region.
    let wreq = |addr: u64, n: usize, tok: u64, data: Option<u64>| {
        let mut h = wire::Header::message(Kind::RmaWrite, None, data);
        (h.flags, h.tag, h.addr, h.len, h.token) = (h.flags | wire::LAST, MR_KEY, addr, n as u64, tok);
        frame(h, &bytes(n))
    };
    out.conv(
        "write-req",
        &[admitted],
        &stream(0, 0, &[h, &wreq(MR_BASE + 16, 100, 5, None)]),
    );
    out.conv(
        "write-req-imm-known",
        &["completion 0 len 100 Ok"],
        &stream(setup::KNOWN, 0, &[h, &wreq(MR_BASE, 100, 5, Some(42))]),
    );
    out.put("write-req-no-answer", &stream(0, 0, &[h, &wreq(MR_BASE, 10, 0, None)]));
    out.put(
        "write-req-big-chunked",
        &stream(0, 50, &[h, &wreq(MR_BASE, 8192, 5, None)]),
    );
    out.put(
        "write-req-out-of-bounds",
        &stream(0, 0, &[h, &wreq(MR_BASE + 65530, 100, 5, None)]),
    );
    let rreq = |addr: u64, len: u64| {
        frame(
            hdr(Kind::RmaRead, 6, |h| (h.tag, h.addr, h.len) = (MR_KEY, addr, len)),
            b"",
        )
    };
    out.conv("read-req", &[admitted], &stream(0, 0, &[h, &rreq(MR_BASE, 256)]));
    out.conv(
        "read-req-big",
        &[admitted],
        &stream(0, 0, &[h, &rreq(MR_BASE, 64 << 10)]),
    );
    out.put("read-req-unknown-key", &stream(0, 0, &[h, &rreq(0, 1)]));
    // A fetching sum of u64 (datatype 7, kind 2, fetch: libfabric's numbering).
    let atomic = frame(
        hdr(Kind::Atomic, 8, |h| {
            (h.tag, h.addr, h.data, h.off) = (MR_KEY, MR_BASE + 8, 3, 7 | 2 << 8 | 1 << 16);
        }),
        b"",
    );
    out.conv("atomic", &[admitted], &stream(0, 0, &[h, &atomic]));

    // Broken peers.
    out.put("no-hello", &stream(setup::RECV, 0, &[&h[..16], &e]));
    out.put("no-greeting", &stream(setup::RECV, 0, &[&h[16..], &e]));
    out.put("second-hello", &stream(0, 0, &[h, &h[16..]]));
    out.put("garbage", &stream(setup::RECV, 0, &[&bytes(200)]));
    out.put("half-header", &stream(0, 0, &[h, &e[..9]]));
    let mut too_long = e.clone();
    too_long[..4].copy_from_slice(&(1 + 64 + (256 << 10) + 1u32).to_le_bytes());
    out.put("frame-too-long", &stream(setup::RECV, 0, &[h, &too_long]));
    let mut bad_name = hello.clone();
    bad_name[16 + 5 + 8] = 0x02;
    out.put("hello-verbs-name", &stream(0, 0, &[&bad_name]));
    out.put(
        "data-for-nobody",
        &stream(0, 0, &[h, &frame(hdr(Kind::Data, 1, |_| ()), &bytes(4))]),
    );
    out
}

/// `shm_ring` inputs: `[size, start (4 bytes, in lines), ring content]`,
/// the content written by the real producer, then edited as a hostile peer
/// would.
fn shm_ring(root: &Path) -> usize {
    use xfer_shm::entry::{word1, KIND_FRAME, KIND_PAD};
    use xfer_shm::fuzzing::TestRing;
    let mut out = Out::new(root, "shm_ring");
    let input = |size: u8, start_line: u32, ring: &mut TestRing| {
        let mut v = vec![size];
        v.extend_from_slice(&start_line.to_le_bytes());
        v.extend_from_slice(ring.bytes_mut());
        v
    };
    let frames: Vec<(Vec<u8>, Vec<u8>)> = (0..12u8)
        .map(|i| (vec![i; (i as usize * 5) % 65], vec![i ^ 0x5a; (i as usize * 97) % 900]))
        .collect();
    // Honest rings: from the start, and across the end of a lap (a pad).
    let mut ring = TestRing::new(4096);
    ring.produce(0, &frames);
    let honest = input(0, 0, &mut ring);
    out.put("honest", &honest);
    let mut ring = TestRing::new(8192);
    let start = 8192 * 3 + 8192 - 256;
    ring.produce(start, &frames);
    let mut wrap = input(1, (start / 64) as u32, &mut ring);
    // The harness lays the content out from the head on.
    wrap[5..].rotate_left(start as usize % 8192);
    out.put("honest-wrap-8k", &wrap);
    // The first entry's word 1 (input offset 5 + 8) edited.
    let w1 = |w: u64| {
        let mut v = honest.clone();
        v[13..21].copy_from_slice(&w.to_le_bytes());
        v
    };
    out.put("too-large", &w1(word1(KIND_FRAME, 0, u32::MAX)));
    out.put("longest-frame", &w1(word1(KIND_FRAME, 0, 1000)));
    out.put("header-too-long", &w1(word1(KIND_FRAME, 65, 0)));
    out.put("bad-kind", &w1(word1(7, 0, 0)));
    out.put("reserved", &w1(word1(KIND_FRAME, 0, 0) | 1 << 20));
    out.put("pad-at-start", &w1(word1(KIND_PAD, 0, 0)));
    let mut stale = honest.clone();
    stale[5] = 64; // start one lap later: every stamp is stale
    out.put("stale-lap", &stale);
    out.put("empty", &[0, 0, 0, 0, 0]);
    // Stamped rings (byte 0 bit 1): the consumer starts on the last line of
    // a 4 KiB lap, where a small frame, then a pad, sits; the content
    // starts at the head.
    let mut v = vec![2u8];
    v.extend_from_slice(&63u32.to_le_bytes());
    let mut content = vec![0u8; 128];
    content[8..16].copy_from_slice(&word1(KIND_FRAME, 8, 32).to_le_bytes());
    content[64 + 8..64 + 16].copy_from_slice(&word1(KIND_FRAME, 0, 100).to_le_bytes());
    out.put("stamped-last-line", &[v.clone(), content.clone()].concat());
    content[8..16].copy_from_slice(&word1(KIND_PAD, 0, 0).to_le_bytes());
    out.put("stamped-pad", &[v, content].concat());
    out.count
}

/// `shm_rma` inputs: frames a peer writes to the RMA engine, honest and
/// hostile (`xfer_shm::fuzzing::rma_frames` names its regions by key 1 and
/// 2 and has operations 1 to 4 in flight).
fn shm_rma(root: &Path) -> usize {
    use xfer_shm::fuzzing::{rma_encode, Owned, RMA_REGION};
    use xfer_shm::rma::wire::{Header, Op, Status};
    let mut out = Out::new(root, "shm_rma");
    let f = |op: Op, req: u64, key: u64, addr: u64, len: u64, payload: Vec<u8>, last: bool| -> Owned {
        let mut h = Header::new(op, req);
        h.key = key;
        h.addr = addr;
        h.len = len;
        h.last = last;
        (h.encode().to_vec(), payload)
    };
    let r = RMA_REGION as u64;
    out.put(
        "put-chunks",
        &rma_encode(&[
            f(Op::PutData, 9, 1, 0, 4096, vec![1; 4096], false),
            f(Op::PutData, 9, 1, 4096, 4096, vec![2; 4096], true),
        ]),
    );
    out.put(
        "put-past-end",
        &rma_encode(&[f(Op::PutData, 9, 1, r - 8, 16, vec![3; 16], true)]),
    );
    out.put(
        "put-read-only",
        &rma_encode(&[f(Op::PutData, 9, 2, 0, 16, vec![3; 16], true)]),
    );
    out.put(
        "requests",
        &rma_encode(&[
            f(Op::GetReq, 9, 1, 0, r, vec![], false),
            f(Op::Put, 10, 1, 0, 64, vec![], false),
            f(Op::Get, 11, 2, 8, 64, vec![], false),
        ]),
    );
    out.put(
        "get-data",
        &rma_encode(&[
            f(Op::GetData, 1, 0, 0, 8192, vec![4; 8192], false),
            f(Op::GetData, 1, 0, 8192, 8192, vec![5; 8192], false),
            f(Op::Done, 1, 0, 0, 0, vec![], false),
        ]),
    );
    out.put(
        "get-data-out-of-place",
        &rma_encode(&[f(Op::GetData, 1, 0, 64, 64, vec![6; 64], false)]),
    );
    let mut refused = Header::new(Op::Done, 2);
    refused.status = Status::CmaRefused;
    let mut no_key = Header::new(Op::Done, 4);
    no_key.status = Status::NoKey;
    out.put(
        "answers",
        &rma_encode(&[
            (refused.encode().to_vec(), vec![]),
            (no_key.encode().to_vec(), vec![]),
            (Header::new(Op::Done, 3).encode().to_vec(), vec![]),
        ]),
    );
    out.put(
        "length-lies",
        &rma_encode(&[f(Op::PutData, 9, 1, 0, 1 << 40, vec![7; 16], true)]),
    );
    out.count
}

/// `rdm_frames` inputs: a hostile peer's frames to the RDM engine, honest
/// answers to its own operations (`fuzzing::TOKENS`) and violations.
fn rdm_frames(root: &Path) -> usize {
    use xfer_core::unstable::rdm::engine::fuzzing::{encode, TOKENS};
    use xfer_core::unstable::rdm::engine::wire::{Header, Kind, KEYED, LAST, TAGGED};
    let mut out = Out::new(root, "rdm_frames");
    let h = |kind: Kind, f: &dyn Fn(&mut Header)| {
        let mut h = Header::new(kind);
        f(&mut h);
        h.encode().to_vec()
    };
    out.put(
        "messages",
        &encode(&[
            (
                h(Kind::Eager, &|h| {
                    h.flags = TAGGED;
                    h.tag = 7;
                }),
                vec![1; 300],
            ),
            (h(Kind::Eager, &|_| {}), vec![2; 10]),
            (
                h(Kind::Rts, &|h| {
                    h.flags = TAGGED;
                    h.tag = 7;
                    h.len = 5000;
                    h.token = 3;
                }),
                vec![],
            ),
        ]),
    );
    out.put(
        "keyed",
        &encode(&[(
            h(Kind::Rts, &|h| {
                h.flags = TAGGED | KEYED;
                h.tag = 7;
                h.len = 5000;
                h.token = 8;
                h.addr = 0x1000;
                h.off = 0xfeed;
            }),
            vec![],
        )]),
    );
    out.put(
        "answers",
        &encode(&[
            (
                h(Kind::Cts, &|h| {
                    h.token = TOKENS[0];
                    h.addr = 77;
                }),
                vec![],
            ),
            (h(Kind::Delivered, &|h| h.token = TOKENS[1]), vec![]),
            (h(Kind::RmaData, &|h| h.token = TOKENS[2]), vec![5; 100]),
            (h(Kind::RmaDone, &|h| h.token = TOKENS[2]), vec![]),
        ]),
    );
    out.put(
        "rma-target",
        &encode(&[
            (
                h(Kind::RmaWrite, &|h| {
                    h.tag = 1;
                    h.len = 100;
                    h.flags = LAST;
                    h.token = 4;
                }),
                vec![3; 100],
            ),
            (
                h(Kind::RmaWrite, &|h| {
                    h.tag = 1;
                    h.addr = 4090;
                    h.len = 100;
                    h.flags = LAST;
                }),
                vec![4; 100],
            ),
            (
                h(Kind::RmaRead, &|h| {
                    h.tag = 1;
                    h.len = 3000;
                    h.token = 5;
                }),
                vec![],
            ),
        ]),
    );
    out.put(
        "atomics",
        &encode(&[
            (
                h(Kind::Atomic, &|h| {
                    h.tag = 1;
                    h.addr = 8;
                    h.data = 5;
                    h.off = 7 | 2 << 8 | 1 << 16;
                    h.token = 6;
                }),
                vec![],
            ),
            (
                h(Kind::Atomic, &|h| {
                    h.tag = 1;
                    h.addr = 4;
                    h.off = 7 | 12 << 8 | 1 << 16;
                }),
                vec![],
            ),
            (h(Kind::AtomicDone, &|h| h.token = 1 << 32), vec![]),
        ]),
    );
    out.put(
        "violations",
        &encode(&[
            (h(Kind::Credit, &|h| h.len = u64::MAX), vec![]),
            (h(Kind::Fin, &|h| h.token = 12345), vec![]),
            (h(Kind::Eager, &|h| h.flags = KEYED), vec![]),
            (vec![99; 56], vec![]),
        ]),
    );
    out.count
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let conversations = tcp_stream(&root);
    let counts = [
        ("tcp_stream", conversations.count),
        ("tcp_name", tcp_name(&root)),
        ("rkey", rkey(&root)),
        ("verbs_name", verbs_name(&root)),
        ("shm_ring", shm_ring(&root)),
        ("shm_rma", shm_rma(&root)),
        ("rdm_frames", rdm_frames(&root)),
    ];
    for (target, n) in counts {
        println!("{target}: {n} seeds in {}", root.join(target).display());
    }

    // Every conversation must still reach its completion (after a protocol
    // change, a seed that no longer passes the handshake reaches nothing).
    if std::env::var_os("GEN_CORPUS_CHECK").is_some_and(|v| v == "0") {
        println!("tcp_stream: conversations not checked (GEN_CORPUS_CHECK=0)");
        return;
    }
    let bin = harness();
    if !bin.is_file() {
        eprintln!(
            "gen_corpus: no tcp_stream harness at {} to check the conversations with: build it \
             (scripts/fuzz.sh, or cargo fuzz build) or name it in TCP_STREAM_BIN, then run again \
             (GEN_CORPUS_CHECK=0 skips the check)",
            bin.display()
        );
        std::process::exit(2);
    }
    let failed = conversations.check(&bin);
    if !failed.is_empty() {
        for f in &failed {
            eprintln!("gen_corpus: conversation does not reach its completion: {f}");
        }
        std::process::exit(1);
    }
    println!(
        "tcp_stream: {} conversations reach their completions ({})",
        conversations.convs.len(),
        bin.display()
    );
}

/// The built `tcp_stream` harness: `TCP_STREAM_BIN`, else where
/// `scripts/fuzz.sh` builds it.
fn harness() -> PathBuf {
    if let Some(bin) = std::env::var_os("TCP_STREAM_BIN") {
        return bin.into();
    }
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = match std::env::var_os("FUZZ_TARGET_DIR") {
        Some(d) => PathBuf::from(d),
        None => match std::env::var_os("CARGO_TARGET_DIR") {
            Some(d) => PathBuf::from(d).join("fuzz"),
            None => fuzz.join("target"),
        },
    };
    let host = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    dir.join(host).join("release").join("tcp_stream")
}
