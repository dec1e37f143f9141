//! A TCP endpoint's inbound path, end to end: a fresh endpoint (core's RDM
//! engine over `xfer_tcp::stream::TcpTransport`) on 127.0.0.1 accepts a
//! connection from this harness, which writes the input to it as a peer
//! would, split into chunks, while the endpoint makes progress. This is
//! the code that consumes raw peer bytes (the stream's greeting and frame
//! lengths in `providers/tcp/src/stream/`, the engine's header, handshake,
//! credit, eager, rendezvous, RMA and atomic frames in
//! `core/src/rdm/engine/`) with the endpoint's real state behind it.
//!
//! Input layout:
//!
//! ```text
//! byte 0   what the endpoint has waiting before the bytes arrive (bits of `setup`)
//! byte 1   where the stream goes and in what pieces:
//!          bit 7 (`OUTBOUND`): over the connection the endpoint opened to
//!          the harness (to send the `setup` operations; its peer is known,
//!          the handshake is done, no greeting or hello is due), else over
//!          a new one to the endpoint;
//!          bit 6 (`BOTH`): the stream up to the first `SPLIT` marker goes
//!          over a new connection, the rest over the endpoint's, in turns;
//!          bits 0-5, n: 0 writes each part at once, else in chunks of
//!          1..=8n bytes (at least 1/128 of the part)
//! rest     the byte stream, as a peer sends it: on a new connection the
//!          16-byte greeting, then frames (u32 LE length after it, header
//!          length, the engine's header, payload)
//! ```
//!
//! Properties: no panic, whatever the bytes; every posted operation
//! completes at most once, with its own buffer back and a length within it;
//! the endpoint keeps reading (a peer that stops being read is a bug here);
//! the first frame it writes on a connection it accepted is `Admitted`
//! with its own name; on a connection it opened, its greeting names the
//! nonce it dialled, its first frame is a hello with its own name, and
//! nothing else comes until the harness's `Admitted`.
//!
//! Handshake: the endpoint refuses a greeting whose nonce is neither its
//! own, which is random, nor 0. The harness xors the endpoint's nonce into
//! the nonce of a stream's leading greeting, so a stream's 0 means "this
//! endpoint" (what the seeds use) and anything else an earlier endpoint at
//! the same address (refused). When the endpoint connects to the harness
//! (operations of `setup` that need the peer), the harness reads its
//! greeting and hello and answers `Admitted` before anything else, and an
//! `OUTBOUND` stream goes after it.
//!
//! Network containment: the endpoint knows the peer by the name the
//! stream's first hello carries (the `setup` operations go to it). The
//! harness rewrites that name, when it is a TCP provider's name (id 0x01),
//! to its own listener's address before sending, so the endpoint never
//! connects anywhere else; the name's nonce and the rest of the stream are
//! kept. When it may (root), the process
//! also moves to a network namespace of its own with only a loopback
//! interface, so its thousands of short connections (and their TIME_WAIT
//! entries, capped there) never touch the host's port space. Without one,
//! every connection ends with a reset, which leaves no TIME_WAIT behind.
//!
//! RMA requests can aim at a region registered at the fixed address
//! `MR_BASE` with key `MR_KEY`, and answers can name the operations of
//! `setup` by their tokens, which are deterministic for a fresh endpoint
//! (`xfer_fuzz::token`; the corpus generator `examples/gen_corpus.rs` uses
//! them).
#![no_main]

use std::io::{ErrorKind, Read};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use xfer_core::unstable::attr::{CqAttr, EndpointAttr};
use xfer_core::unstable::params::Params;
use xfer_core::unstable::rdm::engine::wire::{self, Header, Kind};
use xfer_core::{Access, Completion, Domain, PeerAddr, RemoteKey};
use xfer_fuzz::{setup, BIG, BOTH, MR_BASE, MR_KEY, MR_LEN, OUTBOUND, RNDV_THRESHOLD, SEND_LEN, SMALL, SPLIT, TAG};
use xfer_tcp::name::{TcpName, PROVIDER_TAG};
use xfer_tcp::{TcpDomain, PROVIDER_ID};

/// The connector's greeting before its acceptor's nonce: magic and version.
const MAGIC: [u8; 8] = *b"XFRD\x01\0\0\0";

/// How long the endpoint may leave the harness's bytes unread.
const STALL: Duration = Duration::from_secs(5);

/// The registered region: mapped once, never unmapped, so registering it
/// in every input's domain is sound.
fn region() -> usize {
    static REGION: OnceLock<usize> = OnceLock::new();
    *REGION.get_or_init(|| {
        // SAFETY: an anonymous private mapping; MAP_FIXED_NOREPLACE never
        // replaces an existing mapping (older kernels take it as a hint).
        let p = unsafe {
            libc::mmap(
                MR_BASE as usize as *mut libc::c_void,
                MR_LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap of the fuzz region");
        if p as usize as u64 != MR_BASE {
            eprintln!("tcp_stream: the region is at {p:?}, not {MR_BASE:#x}: RMA seeds miss it");
        }
        p as usize
    })
}

/// Moves the process to a new network namespace with loopback up and few
/// TIME_WAIT entries allowed; false (and nothing changed) if it may not.
fn isolate() -> bool {
    static ISOLATED: OnceLock<bool> = OnceLock::new();
    *ISOLATED.get_or_init(|| {
        // SAFETY: plain system calls on values owned here.
        let ok = unsafe {
            if libc::unshare(libc::CLONE_NEWNET) != 0 {
                false
            } else {
                let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
                let mut req: libc::ifreq = std::mem::zeroed();
                for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
                    *dst = *src as libc::c_char;
                }
                let up = fd >= 0 && libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) == 0 && {
                    req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
                    libc::ioctl(fd, libc::SIOCSIFFLAGS, &req) == 0
                };
                if fd >= 0 {
                    libc::close(fd);
                }
                assert!(up, "cannot bring up loopback in the new network namespace");
                true
            }
        };
        if ok {
            // Each input's orderly close leaves a TIME_WAIT entry; beyond the
            // cap the kernel drops them, so ephemeral ports never run out.
            let _ = std::fs::write("/proc/sys/net/ipv4/tcp_max_tw_buckets", "1024");
        }
        eprintln!(
            "tcp_stream: {}",
            if ok {
                "own network namespace, loopback only"
            } else {
                "no network namespace (not root?): host loopback, connections end with a reset"
            }
        );
        ok
    })
}

/// Whether `TCP_STREAM_VERBOSE` is set: print every completion, to see
/// what a seed or a crashing input reaches.
fn verbose() -> bool {
    static VERBOSE: OnceLock<bool> = OnceLock::new();
    *VERBOSE.get_or_init(|| std::env::var_os("TCP_STREAM_VERBOSE").is_some())
}

/// Makes closing `s` send a reset, not a FIN (no TIME_WAIT on either side).
fn reset_on_close(s: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid option value for an open socket.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

/// The small deterministic generator of chunk sizes.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The greeting a connector sends: magic, version, the acceptor's nonce.
fn greeting(nonce: u64) -> Vec<u8> {
    [&MAGIC[..], &nonce.to_le_bytes()].concat()
}

/// One frame on the stream: length, header length, header, payload.
fn frame(h: Header, payload: &[u8]) -> Vec<u8> {
    let full = h.encode();
    let header = wire::trimmed(&full);
    let len = (1 + header.len() + payload.len()) as u32;
    [&len.to_le_bytes()[..], &[header.len() as u8], header, payload].concat()
}

/// The TCP name after a provider id, if `bytes` is one.
fn tcp_name(bytes: &[u8]) -> Option<TcpName> {
    let (_, rest) = bytes.split_first()?;
    TcpName::decode(&[&[PROVIDER_TAG][..], rest].concat()).ok()
}

/// A name of provider `id` for a TCP name.
fn named(id: u8, n: TcpName) -> Vec<u8> {
    let mut v = n.to_vec();
    v[0] = id;
    v
}

/// Contains a stream that opens with a greeting: xors the endpoint's
/// `nonce` into the greeting's (0 becomes the endpoint's own), and when the
/// first frame is a hello whose name is a TCP name of provider `id`,
/// rewrites it to the address `listen`
/// (IPv6 names get the IPv4-mapped form of it, to keep their length),
/// keeping its nonce. Returns the name the endpoint will know the peer by.
fn contain_hello(stream: &mut [u8], listen: SocketAddr, nonce: u64, id: u8) -> Vec<u8> {
    let fallback = named(id, TcpName { addr: listen, nonce: 0 });
    if stream.len() < 16 + 5 || stream[..8] != MAGIC {
        return fallback;
    }
    let theirs = u64::from_le_bytes(stream[8..16].try_into().expect("8 bytes"));
    stream[8..16].copy_from_slice(&(theirs ^ nonce).to_le_bytes());
    let f = &mut stream[16..];
    let len = u32::from_le_bytes([f[0], f[1], f[2], f[3]]) as usize;
    let hlen = usize::from(f[4]);
    let Some(header) = f.get(5..5 + hlen) else {
        return fallback;
    };
    if !Header::decode(header).is_ok_and(|h| h.kind == Kind::Hello) || len < 1 + hlen {
        return fallback;
    }
    let Some(bytes) = f.get_mut(5 + hlen..4 + len) else {
        return fallback;
    };
    let Some(name) = tcp_name(bytes).filter(|_| bytes[0] == id) else {
        return fallback;
    };
    let addr = match (name.addr, listen.ip()) {
        (SocketAddr::V6(_), IpAddr::V4(ip)) => SocketAddr::new(IpAddr::V6(ip.to_ipv6_mapped()), listen.port()),
        _ => listen,
    };
    let safe = named(
        id,
        TcpName {
            addr,
            nonce: name.nonce,
        },
    );
    bytes.copy_from_slice(&safe);
    safe
}

/// A connection the endpoint opened to the harness's listener.
struct Back {
    s: TcpStream,
    /// The endpoint's greeting and hello, as far as they arrived.
    hello: Vec<u8>,
    /// Whether the harness admitted it.
    acked: bool,
}

impl Back {
    /// Reads the endpoint's greeting and hello as they arrive, checks them,
    /// and answers with `Admitted` naming `peer`; false once the connection
    /// ended.
    fn handshake(&mut self, me: &[u8], dialled: u64, peer: &[u8]) -> bool {
        let want = 16 + 5 + 8 + me.len();
        loop {
            if self.hello.len() == want {
                assert_eq!(
                    self.hello[..16],
                    greeting(dialled),
                    "the endpoint greets another nonce than it dialled"
                );
                let hello = frame(Header::new(Kind::Hello), me);
                assert_eq!(self.hello[16..], hello, "the endpoint's first frame is not its hello");
                let admitted = frame(Header::new(Kind::Admitted), peer);
                // SAFETY: a valid buffer and an open socket.
                let n = unsafe {
                    libc::send(
                        self.s.as_raw_fd(),
                        admitted.as_ptr().cast(),
                        admitted.len(),
                        libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                    )
                };
                // Nothing else was written on it: a short frame fits.
                self.acked = n == admitted.len() as isize;
                return self.acked;
            }
            let mut buf = [0u8; 128];
            match self.s.read(&mut buf[..want - self.hello.len()]) {
                Ok(0) => return false,
                Ok(n) => self.hello.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(_) => return false,
            }
        }
    }
}

/// A socket the stream goes over, with its part.
struct Lane {
    s: TcpStream,
    bytes: Vec<u8>,
    /// The endpoint accepted it (the harness connected): the endpoint's
    /// first bytes on it, as far as they arrived, up to its `Admitted`'s
    /// length.
    accepted: Option<Vec<u8>>,
}

impl Lane {
    /// Reads what the endpoint wrote; false once it closed its side. On an
    /// accepted connection the first frame must be `ack` (its `Admitted`).
    fn read(&mut self, ack: &[u8]) -> bool {
        let mut sink = [0u8; 16 << 10];
        loop {
            match self.s.read(&mut sink) {
                Ok(0) => return false,
                Ok(n) => {
                    if let Some(head) = &mut self.accepted {
                        let take = (ack.len() - head.len()).min(n);
                        head.extend_from_slice(&sink[..take]);
                        assert_eq!(
                            head[..],
                            ack[..head.len()],
                            "the endpoint's first frame on an accepted connection is not its Admitted"
                        );
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(_) => return false,
            }
        }
    }
}

/// Everything one input runs against.
struct Rig {
    _domain: Domain,
    cq: xfer_core::CompletionQueue,
    /// Connections the endpoint opened to the harness's listener.
    back: Vec<Back>,
    listener: TcpListener,
    /// The endpoint's name, the peer name it was given and that name's nonce.
    me: Vec<u8>,
    peer: Vec<u8>,
    dialled: u64,
    /// Completions seen, by context.
    done: Vec<Completion>,
    /// Buffer length of each posted operation, by context.
    posted: Vec<(u64, usize)>,
}

impl Rig {
    /// One round of progress: poll the endpoint, accept and drain what it
    /// sent the harness's listener, check the completions.
    fn pump(&mut self) {
        let mut out = vec![Completion::EMPTY; 16];
        let n = self.cq.poll(&mut out).expect("cq poll");
        for c in out.drain(..n) {
            if verbose() {
                eprintln!("tcp_stream: completion {:?} len {} {:?}", c.context, c.len, c.result);
            }
            self.check(&c);
            self.done.push(c);
        }
        while let Ok((s, _)) = self.listener.accept() {
            s.set_nonblocking(true).expect("nonblocking");
            s.set_nodelay(true).expect("nodelay");
            self.back.push(Back {
                s,
                hello: Vec::new(),
                acked: false,
            });
        }
        let mut sink = [0u8; 16 << 10];
        let (me, dialled, peer) = (&self.me, self.dialled, &self.peer);
        self.back.retain_mut(|b| loop {
            if !b.acked {
                if !b.handshake(me, dialled, peer) {
                    return false;
                }
                if !b.acked {
                    return true;
                }
            }
            match b.s.read(&mut sink) {
                Ok(0) => return false,
                Ok(_) => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(_) => return false,
            }
        });
    }

    fn check(&self, c: &Completion) {
        if c.flags.contains(xfer_core::Flags::REMOTE_WRITE) {
            return; // a peer's write with immediate data: no operation of ours
        }
        let Some(&(_, len)) = self.posted.iter().find(|(ctx, _)| *ctx == c.context) else {
            panic!("completion for an operation never posted: {c:?}");
        };
        assert!(
            !self
                .done
                .iter()
                .any(|d| d.context == c.context && !d.flags.contains(xfer_core::Flags::REMOTE_WRITE)),
            "operation {} completed twice",
            c.context
        );
        assert_eq!(c.buf.as_ref().map(Vec::len), Some(len), "buffer back: {c:?}");
        assert!(c.len <= len, "completion longer than its buffer: {c:?}");
    }
}

/// Writes all of `bytes` to `s` (non-blocking, no SIGPIPE), making progress
/// meanwhile; false once the endpoint closed the connection.
fn write_all(rig: &mut Rig, s: &TcpStream, mut bytes: &[u8]) -> bool {
    let start = Instant::now();
    while !bytes.is_empty() {
        // SAFETY: a valid buffer and an open socket.
        let n = unsafe {
            libc::send(
                s.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
        if n > 0 {
            bytes = &bytes[n as usize..];
            continue;
        }
        let err = std::io::Error::last_os_error();
        if n < 0 && err.kind() == ErrorKind::WouldBlock {
            rig.pump();
            assert!(start.elapsed() < STALL, "the endpoint stopped reading its peer");
            continue;
        }
        return false; // reset or closed by the endpoint
    }
    true
}

fn run(data: &[u8]) {
    let [flags, chunking, rest @ ..] = data else { return };
    let (mut flags, chunking) = (*flags, *chunking);
    if !isolate() {
        flags |= setup::RESET;
    }
    let mut stream = rest.to_vec();

    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("harness listener");
    listener.set_nonblocking(true).expect("nonblocking");

    let domain = Domain::new(Box::new(
        TcpDomain::with_params(&Params::default()).expect("tcp domain"),
    ));
    let cq = domain.cq(&CqAttr::default()).expect("cq");
    let av = domain.av().expect("av");
    let mut attr = EndpointAttr::default();
    attr.rndv_threshold = RNDV_THRESHOLD;
    attr.params.set("tcp.addr", "127.0.0.1");
    let ep = domain.endpoint(&cq, &av, &attr).expect("endpoint");
    let me = ep.name().as_bytes().to_vec();
    let my_name = tcp_name(&me).expect("endpoint name");
    let listen = listener.local_addr().expect("listener address");
    let peer_name = contain_hello(&mut stream, listen, my_name.nonce, me[0]);
    let dialled = tcp_name(&peer_name).expect("the contained name").nonce;
    let ack = frame(Header::new(Kind::Admitted), &me);
    // SAFETY: the region is mapped for the whole process and never freed.
    let mr = unsafe { domain.register_raw(region() as *mut u8, MR_LEN, Access::REMOTE_READ | Access::REMOTE_WRITE) }
        .expect("register");
    // TCP keys are random (unguessable): inputs name the region by MR_KEY,
    // which stands for whatever key the registration got.
    substitute(&mut stream, MR_KEY.to_le_bytes(), mr.key().to_le_bytes());

    let mut rig = Rig {
        _domain: domain,
        cq,
        back: Vec::new(),
        listener,
        me,
        peer: peer_name.clone(),
        dialled,
        done: Vec::new(),
        posted: Vec::new(),
    };
    let buf_len = if flags & setup::BIG != 0 { BIG } else { SMALL };
    let needs_peer = setup::SEND | setup::READ | setup::WRITE | setup::KNOWN;
    let peer = if flags & needs_peer != 0 {
        av.insert(&peer_name).expect("the contained name is valid")
    } else {
        PeerAddr::UNSPEC
    };
    // Tokens follow this order: send, read, write, then rendezvous receives.
    let remote = RemoteKey::from_parts(PROVIDER_ID, 0x1000, 1 << 20, 0x42).expect("remote key");
    if flags & setup::SEND != 0 {
        ep.tsend(peer, TAG, vec![0x5a; SEND_LEN], 1).expect("send");
        rig.posted.push((1, SEND_LEN));
    }
    if flags & setup::READ != 0 {
        ep.read(peer, vec![0; buf_len], &remote, 0, 2).expect("read");
        rig.posted.push((2, buf_len));
    }
    if flags & setup::WRITE != 0 {
        ep.write(peer, vec![0xa5; buf_len], &remote, 0, 3).expect("write");
        rig.posted.push((3, buf_len));
    }
    if flags & setup::TRECV != 0 {
        ep.trecv(PeerAddr::UNSPEC, TAG, 0, vec![0; buf_len], 4).expect("trecv");
        rig.posted.push((4, buf_len));
    }
    if flags & setup::RECV != 0 {
        ep.recv(PeerAddr::UNSPEC, vec![0; buf_len], 5).expect("recv");
        rig.posted.push((5, buf_len));
    }

    let fresh = TcpStream::connect(my_name.addr).expect("connect to the endpoint");
    fresh.set_nonblocking(true).expect("nonblocking");
    // Chunks go out as written (with Nagle, one waits for the endpoint's
    // delayed acknowledgement, about 40 ms, past the harness's progress).
    fresh.set_nodelay(true).expect("nodelay");
    // Let the endpoint accept and, if an operation needs the peer, connect
    // to the listener; the harness answers its hello, then the endpoint
    // writes its own requests. (Unless those operations failed already.)
    let peer_ops = rig.posted.iter().filter(|(c, _)| (1..=3).contains(c)).count();
    let start = Instant::now();
    let mut after = 0;
    while after < 4 {
        rig.pump();
        let failed = rig.done.iter().filter(|d| (1..=3).contains(&d.context)).count();
        if failed == peer_ops || rig.back.iter().any(|b| b.acked) {
            after += 1;
        }
        assert!(
            start.elapsed() < STALL,
            "the endpoint never completed its handshake with the harness"
        );
    }
    let accepted = |s: TcpStream, bytes: Vec<u8>| Lane {
        s,
        bytes,
        accepted: Some(Vec::new()),
    };
    let own = |b: Back, bytes: Vec<u8>| Lane {
        s: b.s,
        bytes,
        accepted: None,
    };
    // The lanes: the sockets the stream goes over, each with its part.
    let mut spare = None;
    let mut lanes: Vec<Lane> = if chunking & BOTH != 0 && !rig.back.is_empty() {
        let (a, b) = match stream.windows(SPLIT.len()).position(|w| w == SPLIT) {
            Some(at) => (stream[..at].to_vec(), stream[at + SPLIT.len()..].to_vec()),
            None => (stream, Vec::new()),
        };
        vec![accepted(fresh, a), own(rig.back.remove(0), b)]
    } else if chunking & OUTBOUND != 0 && !rig.back.is_empty() {
        spare = Some(fresh);
        vec![own(rig.back.remove(0), stream)]
    } else {
        vec![accepted(fresh, stream)]
    };
    let chunking = chunking & !(OUTBOUND | BOTH);
    if verbose() {
        for (i, l) in lanes.iter().enumerate() {
            eprintln!(
                "tcp_stream: lane {i}: {:?} -> {:?}, {} bytes",
                l.s.local_addr(),
                l.s.peer_addr(),
                l.bytes.len()
            );
        }
        eprintln!("tcp_stream: {} other connections from the endpoint", rig.back.len());
    }

    // Chunks go to the lanes in turn, the endpoint making progress between them.
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15 ^ u64::from(chunking));
    let mut pos = vec![0; lanes.len()];
    let mut open = vec![true; lanes.len()];
    loop {
        let mut wrote = false;
        for (i, Lane { s, bytes, .. }) in lanes.iter().enumerate() {
            let left = bytes.len() - pos[i];
            if !open[i] || left == 0 {
                continue;
            }
            let n = if chunking == 0 {
                left
            } else {
                // At most about 128 chunks, so long inputs stay fast.
                let max = 8 * usize::from(chunking);
                (1 + rng.next() as usize % max).max(bytes.len() / 128).min(left)
            };
            open[i] = write_all(&mut rig, s, &bytes[pos[i]..pos[i] + n]);
            if verbose() {
                eprintln!(
                    "tcp_stream: lane {i}: {n} bytes at {}{}",
                    pos[i],
                    if open[i] { "" } else { ", closed" }
                );
            }
            pos[i] += n;
            rig.pump();
            wrote = true;
        }
        if !wrote {
            break;
        }
    }
    // More progress calls than the endpoint's busy-polling of its hot
    // connection skips epoll for (8), so every connection's bytes are read.
    for _ in 0..10 {
        rig.pump();
    }
    for l in &mut lanes {
        l.read(&ack);
    }
    if verbose() {
        for (i, l) in lanes.iter().enumerate() {
            if let Some(head) = &l.accepted {
                let got = if head.len() == ack.len() {
                    "its Admitted"
                } else {
                    "no Admitted (yet)"
                };
                eprintln!("tcp_stream: lane {i}: the endpoint answered {got}");
            }
        }
    }

    if flags & setup::RESET != 0 {
        for l in lanes.drain(..) {
            reset_on_close(&l.s);
        }
    } else {
        for l in &lanes {
            let _ = l.s.shutdown(Shutdown::Write);
        }
        // The endpoint reads the end of each stream and closes its side.
        for _ in 0..64 {
            rig.pump();
            lanes.retain_mut(|l| l.read(&ack));
            if lanes.is_empty() {
                break;
            }
        }
        for l in lanes.drain(..) {
            reset_on_close(&l.s);
        }
    }
    // The endpoint's connections to the listener end with a reset too.
    for s in rig.back.drain(..).map(|b| b.s).chain(spare) {
        reset_on_close(&s);
    }
    for _ in 0..4 {
        rig.pump();
    }
    drop(mr);
    drop(ep);
    drop(av);
    drop(rig);
}

fuzz_target!(|data: &[u8]| run(data));

/// Replaces every occurrence of `from` in `buf` with `to`.
fn substitute(buf: &mut [u8], from: [u8; 8], to: [u8; 8]) {
    let mut i = 0;
    while i + 8 <= buf.len() {
        if buf[i..i + 8] == from {
            buf[i..i + 8].copy_from_slice(&to);
            i += 8;
        } else {
            i += 1;
        }
    }
}
