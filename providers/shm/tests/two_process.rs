//! The shared-memory machinery between two real processes: this binary runs
//! each case as the parent and starts itself again as the peer
//! (`two_process child ROLE ADDR`). Waits are bounded and wait for
//! conditions, never for time to pass.

mod common;

use std::io::{Read, Write};
use std::process::Child;
use std::time::{Duration, Instant};

use common::spawn;
use xfer_shm::{Cma, CmaError, DownReason, Event, PeerId, SendError, ShmConfig, ShmPort};

/// The longest any condition may take, on a loaded machine.
const LIMIT: Duration = Duration::from_secs(30);

/// What one poll gave: frames as (peer, header, payload), ups and downs.
#[derive(Default)]
struct Seen {
    frames: Vec<(PeerId, Vec<u8>, Vec<u8>)>,
    up: Vec<PeerId>,
    down: Vec<(PeerId, DownReason)>,
}

fn poll(port: &mut ShmPort, seen: &mut Seen) {
    port.poll(|ev| match ev {
        Event::Frame { peer, frame } => seen.frames.push((peer, frame.header.to_vec(), frame.payload.to_vec())),
        Event::Up { peer } => seen.up.push(peer),
        Event::Down { peer, reason } => seen.down.push((peer, reason)),
    });
}

/// A port and what its polls gave, for [`common::until`].
struct Polled<'a> {
    port: &'a mut ShmPort,
    seen: &'a mut Seen,
}

impl common::Poller for Polled<'_> {
    fn poll(&mut self) {
        poll(self.port, self.seen);
    }

    fn any_down(&self) -> bool {
        !self.seen.down.is_empty()
    }

    fn port(&mut self) -> &mut ShmPort {
        self.port
    }
}

/// Polls (blocking between polls) until `done` says so; panics after LIMIT.
fn until(port: &mut ShmPort, seen: &mut Seen, what: &str, mut done: impl FnMut(&Seen) -> bool) {
    common::until(&mut Polled { port, seen }, LIMIT, what, |p| done(p.seen));
}

/// Sends, polling while the ring is full (the peer drains it).
fn send_blocking(port: &mut ShmPort, seen: &mut Seen, peer: PeerId, h: &[u8], p: &[u8]) {
    let end = Instant::now() + LIMIT;
    loop {
        match port.send(peer, h, p) {
            Ok(()) => return,
            Err(SendError::Full) => {
                poll(port, seen);
                // Blocks until the consumer frees lines: it signals when it
                // sees the space-wanted flag (a lost wake-up times out here).
                let left = end.checked_duration_since(Instant::now()).expect("ring stayed full");
                port.wait(Some(left)).expect("wait");
            }
            Err(e) => panic!("send: {e}"),
        }
    }
}

/// Waits for the first inbound peer and its first frame.
fn accept_one(port: &mut ShmPort, seen: &mut Seen) -> PeerId {
    until(port, seen, "child up", |s| !s.up.is_empty());
    seen.up.remove(0)
}

fn wait_exit(mut child: Child) {
    let st = child.wait().expect("wait child");
    assert!(st.success(), "child failed: {st}");
}

fn payload(seq: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seq as usize * 31 + i * 7) as u8).collect()
}

// --- cases (parent side) ---

/// Frames of many sizes both ways between two processes, each side
/// blocking in `wait` (the eventfd wake-up protocol) between them.
fn ping_pong() {
    let mut port = ShmPort::open(&ShmConfig::default()).expect("open");
    let child = spawn("echo", &port);
    let mut seen = Seen::default();
    let peer = accept_one(&mut port, &mut seen);
    let info = port.peer_info(peer).expect("info");
    assert_eq!(info.pid, child.id() as i32);
    assert!(info.inbound && info.up);
    assert_eq!(info.ring_bytes, ShmConfig::default().ring_bytes);
    let max = xfer_shm::entry::max_payload(info.ring_bytes, 8);
    let sizes = [0usize, 1, 8, 40, 47, 48, 49, 64, 1000, 4096, 60000, max];
    for seq in 0..3000u32 {
        let len = sizes[seq as usize % sizes.len()];
        let p = payload(seq, len);
        port.send(peer, &seq.to_le_bytes().repeat(2), &p).expect("send");
        until(&mut port, &mut seen, "echo", |s| !s.frames.is_empty());
        let (from, h, back) = seen.frames.remove(0);
        assert_eq!(from, peer);
        assert_eq!(h, seq.to_le_bytes().repeat(2));
        assert!(back == p, "payload {seq} of {len} bytes differs");
    }
    assert_eq!(port.send(peer, &[0; 8], &vec![0; max + 1]), Err(SendError::TooLarge));
    assert_eq!(port.send(peer, &[0; 65], &[]), Err(SendError::TooLarge));
    port.send(peer, b"stop", &[]).expect("send stop");
    until(&mut port, &mut seen, "child exit", |s| !s.down.is_empty());
    assert!(matches!(seen.down[0], (p, DownReason::Closed) if p == peer));
    wait_exit(child);
}

/// A ring holds exactly what its size allows, `send` says Full beyond,
/// and a long stream through a small ring arrives complete and in order.
fn back_pressure() {
    let cfg = ShmConfig {
        ring_bytes: 4096,
        ..ShmConfig::default()
    };
    let mut port = ShmPort::open(&cfg).expect("open");
    let mut child = spawn("slow", &port);
    let mut seen = Seen::default();
    let peer = accept_one(&mut port, &mut seen);
    until(&mut port, &mut seen, "ready", |s| !s.frames.is_empty());
    seen.frames.clear();
    // 16 + 4 + 100 bytes: two lines an entry; the ring holds its 4096
    // bytes, so 32 of them.
    let mut sent = 0u32;
    loop {
        match port.send(peer, &sent.to_le_bytes(), &payload(sent, 100)) {
            Ok(()) => sent += 1,
            Err(SendError::Full) => break,
            Err(e) => panic!("send: {e}"),
        }
        assert!(sent <= 32, "ring took more than its size");
    }
    assert_eq!(sent, 32);
    // Let the child drain; stream the rest through the full ring.
    child.stdin.as_mut().expect("stdin").write_all(b"g").expect("go");
    const TOTAL: u32 = 20000;
    while sent < TOTAL {
        let len = (sent as usize * 13) % 900;
        send_blocking(&mut port, &mut seen, peer, &sent.to_le_bytes(), &payload(sent, len));
        sent += 1;
    }
    send_blocking(&mut port, &mut seen, peer, b"end!", &[]);
    until(&mut port, &mut seen, "count", |s| !s.frames.is_empty());
    let (_, h, p) = seen.frames.remove(0);
    assert_eq!(h, b"count");
    assert_eq!(p, TOTAL.to_le_bytes());
    wait_exit(child);
}

/// A large payload pulled from the peer's memory in one copy, and a bad
/// range refused.
fn cma_pull() {
    let mut port = ShmPort::open(&ShmConfig::default()).expect("open");
    let child = spawn("cma", &port);
    let mut seen = Seen::default();
    let peer = accept_one(&mut port, &mut seen);
    until(&mut port, &mut seen, "buffer address", |s| !s.frames.is_empty());
    let (_, _, p) = seen.frames.remove(0);
    let addr = u64::from_le_bytes(p[0..8].try_into().expect("8"));
    let len = u64::from_le_bytes(p[8..16].try_into().expect("8")) as usize;
    let cma = port.peer_info(peer).expect("info").cma;
    println!("cma_pull: probe says {cma}");
    let mut dst = vec![0u8; len];
    if cma == Cma::Available {
        let t = Instant::now();
        port.cma_read(peer, addr, &mut dst).expect("cma_read");
        println!("cma_pull: {} MiB in {:?}", len >> 20, t.elapsed());
        assert!(dst == payload(7, len), "pulled bytes differ");
        let r = port.cma_read(peer, 16, &mut dst[..64]);
        assert!(matches!(r, Err(CmaError::BadRange { done: 0 })), "{r:?}");
        // Write back into the peer and let it check.
        port.cma_write(peer, addr, &payload(9, 4096)).expect("cma_write");
    } else {
        // The fallback report: nothing is attempted.
        assert!(matches!(
            port.cma_read(peer, addr, &mut dst),
            Err(CmaError::NotAvailable(_))
        ));
    }
    port.send(peer, b"done", &[u8::from(cma == Cma::Available)])
        .expect("send");
    until(&mut port, &mut seen, "child exit", |s| !s.down.is_empty());
    wait_exit(child);
}

/// A peer whose kernel refuses it cross-memory attach (a seccomp filter,
/// as a container's) reports "CMA not permitted" and refuses pulls without
/// trying; this side, not filtered, still has it.
fn cma_denied() {
    let mut port = ShmPort::open(&ShmConfig::default()).expect("open");
    let child = spawn("cma-denied", &port);
    let mut seen = Seen::default();
    let peer = accept_one(&mut port, &mut seen);
    // Unfiltered, this side keeps CMA towards its own child, unless Yama
    // forbids attaching at all (ptrace_scope 2 or 3 without privilege).
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").unwrap_or_default();
    if scope.trim().parse::<u32>().unwrap_or(0) < 2 {
        assert_eq!(port.peer_info(peer).expect("info").cma, Cma::Available);
    }
    until(&mut port, &mut seen, "child's view", |s| !s.frames.is_empty());
    let (_, h, p) = seen.frames.remove(0);
    assert_eq!(h, b"cma");
    assert_eq!(String::from_utf8_lossy(&p), "CMA not permitted");
    port.send(peer, b"done", &[]).expect("send");
    until(&mut port, &mut seen, "child exit", |s| !s.down.is_empty());
    wait_exit(child);
}

/// 64 peers on one port (in this process: real segments and sockets), a
/// 65th refused by `max_peers`, frames from all in one poll loop, in order
/// per peer.
fn many_peers() {
    const N: usize = 64;
    let cfg = ShmConfig {
        ring_bytes: 4096,
        max_peers: N,
        ..ShmConfig::default()
    };
    let mut hub = ShmPort::open(&cfg).expect("open");
    let mut seen = Seen::default();
    let mut ports: Vec<ShmPort> = (0..=N).map(|_| ShmPort::open(&cfg).expect("open")).collect();
    let ids: Vec<PeerId> = ports
        .iter_mut()
        .map(|p| p.connect(hub.address()).expect("connect"))
        .collect();
    // Each sends 50 frames before anyone polls: the rings hold them.
    for (i, (p, id)) in ports.iter_mut().zip(&ids).enumerate().take(N) {
        for seq in 0..50u32 {
            p.send(*id, &[i as u8], &seq.to_le_bytes()).expect("send");
        }
    }
    until(&mut hub, &mut seen, "all frames", |s| s.frames.len() == N * 50);
    assert_eq!(seen.up.len(), N, "the 65th peer was accepted");
    let mut next = vec![0u32; N];
    for (_, h, p) in &seen.frames {
        let i = h[0] as usize;
        assert_eq!(p[..], next[i].to_le_bytes(), "peer {i} out of order");
        next[i] += 1;
    }
    // The refused one sees its pair closed.
    let mut s65 = Seen::default();
    until(&mut ports[N], &mut s65, "refusal", |s| !s.down.is_empty());
}

/// A raw seqpacket client, speaking the handshake by hand as a broken or
/// hostile process would.
mod raw {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

    pub fn connect(name: &[u8]) -> OwnedFd {
        // SAFETY: plain calls; the address is a zeroed sockaddr_un filled
        // within its bounds; the descriptor is owned at once.
        unsafe {
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0);
            assert!(fd >= 0);
            let fd = OwnedFd::from_raw_fd(fd);
            let mut sa: libc::sockaddr_un = std::mem::zeroed();
            sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
            for (d, s) in sa.sun_path[1..].iter_mut().zip(name) {
                *d = *s as libc::c_char;
            }
            let len = (2 + 1 + name.len()) as libc::socklen_t;
            let r = libc::connect(fd.as_raw_fd(), (&sa as *const libc::sockaddr_un).cast(), len);
            assert_eq!(r, 0, "raw connect");
            fd
        }
    }

    pub fn send(sock: &OwnedFd, bytes: &[u8], fds: &[RawFd]) {
        #[repr(C, align(8))]
        struct Cmsg([u8; 64]);
        let mut cbuf = Cmsg([0; 64]);
        let mut iov = libc::iovec {
            iov_base: bytes.as_ptr() as *mut _,
            iov_len: bytes.len(),
        };
        // SAFETY: msghdr points at `iov` and `cbuf`, both alive across the
        // call; the control message is built within `cbuf` (at most 24 of
        // its 64 bytes for two descriptors).
        unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            if !fds.is_empty() {
                let n = std::mem::size_of_val(fds) as u32;
                msg.msg_control = cbuf.0.as_mut_ptr().cast();
                msg.msg_controllen = libc::CMSG_SPACE(n) as usize;
                let c = libc::CMSG_FIRSTHDR(&msg);
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = libc::SCM_RIGHTS;
                (*c).cmsg_len = libc::CMSG_LEN(n) as usize;
                std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast::<RawFd>(), fds.len());
            }
            assert_eq!(
                libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL),
                bytes.len() as isize
            );
        }
    }

    /// Whether the other side closed (end of file), without blocking; a
    /// refused handshake must get no answer before the close.
    pub fn closed(sock: &OwnedFd) -> bool {
        let mut b = [0u8; 64];
        // SAFETY: reads at most 64 bytes into `b`.
        let n = unsafe { libc::recv(sock.as_raw_fd(), b.as_mut_ptr().cast(), 64, libc::MSG_DONTWAIT) };
        assert!(n <= 0, "the port answered a handshake it refuses ({n} bytes)");
        n == 0
    }

    /// A memfd of `len` bytes; sealed against resizing if `sealed`, with
    /// a valid segment header for rings of `ring` bytes (and a stamp secret).
    pub fn memfd(len: usize, sealed: bool, ring: u32) -> OwnedFd {
        // SAFETY: plain calls on a descriptor owned at once; pwrite reads
        // the 24 header bytes from a local array.
        unsafe {
            let fd = libc::memfd_create(c"raw".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING);
            assert!(fd >= 0);
            let fd = OwnedFd::from_raw_fd(fd);
            assert_eq!(libc::ftruncate(fd.as_raw_fd(), len as libc::off_t), 0);
            let mut h = [0u8; 24];
            h[0..8].copy_from_slice(b"XFERSHM\0");
            h[8..12].copy_from_slice(&xfer_shm::layout::VERSION.to_le_bytes());
            h[12..16].copy_from_slice(&ring.to_le_bytes());
            h[16..24].copy_from_slice(&(1u64 << 63 | 0x5eed).to_le_bytes());
            assert_eq!(libc::pwrite(fd.as_raw_fd(), h.as_ptr().cast(), 24, 0), 24);
            if sealed {
                let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
                assert_eq!(libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals), 0);
            }
            fd
        }
    }

    /// A hello as docs/SHM.md describes it.
    pub fn hello(ring: u32) -> Vec<u8> {
        let mut b = vec![0u8; 32];
        b[0..4].copy_from_slice(b"XSHH");
        b[4..6].copy_from_slice(&1u16.to_le_bytes());
        b[6..8].copy_from_slice(&1u16.to_le_bytes());
        b[8..12].copy_from_slice(&ring.to_le_bytes());
        b
    }

    pub fn eventfd() -> OwnedFd {
        // SAFETY: plain call; the descriptor is owned at once.
        unsafe { OwnedFd::from_raw_fd(libc::eventfd(0, libc::EFD_CLOEXEC)) }
    }

    pub fn pipe() -> (OwnedFd, OwnedFd) {
        let mut p = [0; 2];
        // SAFETY: `p` has room for the two descriptors; both owned at once.
        unsafe {
            assert_eq!(libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC), 0);
            (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1]))
        }
    }
}

/// Broken handshakes (garbage, an unsealed or mis-sized segment, a pipe
/// for an eventfd, a segment larger than the port accepts) are refused:
/// the connection is closed, no peer comes up, and the port then serves a
/// real peer.
fn hostile_handshake() {
    use std::os::fd::AsRawFd;
    let mut port = ShmPort::open(&ShmConfig::default()).expect("open");
    const R: u32 = xfer_shm::config::DEFAULT_RING_BYTES as u32;
    let seg = 8192 + 2 * R as usize;
    let ev = raw::eventfd();
    let (pr, pw) = raw::pipe();
    let cases: Vec<(&str, Vec<u8>, Vec<std::os::fd::OwnedFd>)> = vec![
        ("garbage", b"hello?".to_vec(), vec![]),
        ("no descriptors", raw::hello(R), vec![]),
        ("unsealed segment", raw::hello(R), vec![raw::memfd(seg, false, R)]),
        ("wrong size", raw::hello(R), vec![raw::memfd(seg + 4096, true, R)]),
        (
            "ring over the port's",
            raw::hello(2 * R),
            vec![raw::memfd(8192 + 4 * R as usize, true, 2 * R)],
        ),
        ("header mismatch", raw::hello(R), vec![raw::memfd(seg, true, R / 2)]),
        ("a pipe for an eventfd", raw::hello(R), vec![raw::memfd(seg, true, R)]),
    ];
    let mut seen = Seen::default();
    for (what, bytes, fds) in cases {
        let sock = raw::connect(port.address());
        let mut raw_fds: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
        if what.starts_with("a pipe") {
            raw_fds.push(pw.as_raw_fd());
        } else if !fds.is_empty() {
            raw_fds.push(ev.as_raw_fd());
        }
        raw::send(&sock, &bytes, &raw_fds);
        until(&mut port, &mut seen, what, |_| raw::closed(&sock));
        assert!(seen.up.is_empty() && seen.down.is_empty(), "{what}: a peer event");
    }
    drop(pr);
    // The same handshake with an eventfd is accepted.
    let sock = raw::connect(port.address());
    raw::send(
        &sock,
        &raw::hello(R),
        &[raw::memfd(seg, true, R).as_raw_fd(), ev.as_raw_fd()],
    );
    until(&mut port, &mut seen, "hand-made peer up", |s| !s.up.is_empty());
    let child = spawn("echo", &port);
    let _ = accept_one(&mut port, &mut seen);
    let good = accept_one(&mut port, &mut seen);
    assert_eq!(port.peer_info(good).expect("info").pid, child.id() as i32);
    port.send(good, b"x", b"y").expect("send");
    until(&mut port, &mut seen, "echo", |s| !s.frames.is_empty());
    port.send(good, b"stop", &[]).expect("stop");
    until(&mut port, &mut seen, "exit", |s| !s.down.is_empty());
    wait_exit(child);
}

/// A peer killed with SIGKILL is reported down promptly by a blocked port.
fn peer_killed() {
    let mut port = ShmPort::open(&ShmConfig::default()).expect("open");
    let mut child = spawn("idle", &port);
    let mut seen = Seen::default();
    let peer = accept_one(&mut port, &mut seen);
    until(&mut port, &mut seen, "ready", |s| !s.frames.is_empty());
    // Blocked in `wait`, the peer does not spin: over 300 ms it uses
    // almost no CPU (a spinning one gets at least a share of a CPU).
    let ticks = || {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).expect("stat");
        // Fields after the command name (which ends with ')'): utime and
        // stime are the 12th and 13th.
        let rest = &stat[stat.rfind(')').expect("stat") + 2..];
        let f: Vec<u64> = rest
            .split(' ')
            .skip(11)
            .take(2)
            .map(|x| x.parse().expect("ticks"))
            .collect();
        f[0] + f[1]
    };
    let before = ticks();
    std::thread::sleep(Duration::from_millis(300));
    let used = ticks() - before;
    println!("peer_killed: the waiting peer used {used} clock ticks in 300 ms");
    assert!(used <= 3, "a peer blocked in wait used {used} ticks of CPU");
    let t = Instant::now();
    child.kill().expect("kill");
    until(&mut port, &mut seen, "down", |s| !s.down.is_empty());
    println!("peer_killed: down reported {:?} after SIGKILL", t.elapsed());
    assert!(matches!(seen.down[0], (p, DownReason::Closed) if p == peer));
    assert_eq!(port.send(peer, b"x", &[]), Err(SendError::NoPeer));
    let _ = child.wait();
}

/// A hostile peer's impossible entry brings it down with a clear error;
/// the port keeps serving another peer.
fn hostile_entry() {
    let mut port = ShmPort::open(&ShmConfig::default()).expect("open");
    let honest = spawn("echo", &port);
    let mut seen = Seen::default();
    let good = accept_one(&mut port, &mut seen);
    let hostile = spawn("hostile", &port);
    let bad = accept_one(&mut port, &mut seen);
    until(&mut port, &mut seen, "hostile down", |s| !s.down.is_empty());
    let (p, reason) = seen.down.remove(0);
    assert_eq!(p, bad);
    println!("hostile_entry: {reason}");
    assert!(
        matches!(reason, DownReason::Corrupt(xfer_shm::entry::Corrupt::TooLarge(_))),
        "{reason:?}"
    );
    for seq in 0..100u32 {
        port.send(good, &seq.to_le_bytes(), &payload(seq, 64)).expect("send");
        until(&mut port, &mut seen, "echo", |s| !s.frames.is_empty());
        let (from, h, _) = seen.frames.remove(0);
        assert_eq!((from, h), (good, seq.to_le_bytes().to_vec()));
    }
    port.send(good, b"stop", &[]).expect("stop");
    until(&mut port, &mut seen, "honest exit", |s| !s.down.is_empty());
    wait_exit(honest);
    wait_exit(hostile);
}

// --- children ---

/// Makes `process_vm_readv` fail with EPERM in this process, as Docker's
/// default seccomp profile does.
fn deny_cma() {
    use libc::{sock_filter, sock_fprog};
    let stmt = |code: u32, k: u32| sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let filter = [
        // The syscall number: seccomp_data.nr, at offset 0.
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: libc::SYS_process_vm_readv as u32,
        },
        stmt(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        ),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
    ];
    let prog = sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut sock_filter,
    };
    // SAFETY: prctl with plain integer arguments; then with a pointer to
    // `prog`, which points at `filter`; the kernel copies both during the call.
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0, "no_new_privs");
        assert_eq!(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const sock_fprog
            ),
            0,
            "seccomp"
        );
    }
}

fn child(role: &str, addr: &[u8]) {
    if role == "cma-denied" {
        deny_cma();
    }
    // The connecting side sizes the pair's rings.
    let ring_bytes = if role == "slow" {
        4096
    } else {
        ShmConfig::default().ring_bytes
    };
    let mut port = ShmPort::open(&ShmConfig {
        ring_bytes,
        ..ShmConfig::default()
    })
    .expect("child open");
    let mut seen = Seen::default();
    let parent = port.connect(addr).expect("connect");
    until(&mut port, &mut seen, "welcome", |s| !s.up.is_empty());
    match role {
        "echo" => loop {
            until(&mut port, &mut seen, "frame", |s| !s.frames.is_empty());
            for (from, h, p) in std::mem::take(&mut seen.frames) {
                if h == b"stop" {
                    return;
                }
                send_blocking(&mut port, &mut seen, from, &h, &p);
            }
        },
        "slow" => {
            port.send(parent, b"ready", &[]).expect("ready");
            let mut go = [0u8];
            std::io::stdin().read_exact(&mut go).expect("go");
            let mut next = 0u32;
            loop {
                until(&mut port, &mut seen, "frame", |s| !s.frames.is_empty());
                for (_, h, p) in std::mem::take(&mut seen.frames) {
                    if h == b"end!" {
                        port.send(parent, b"count", &next.to_le_bytes()).expect("count");
                        return;
                    }
                    assert_eq!(h, next.to_le_bytes(), "out of order");
                    let want = if next < 32 { 100 } else { (next as usize * 13) % 900 };
                    assert!(p == payload(next, want), "frame {next} differs");
                    next += 1;
                }
            }
        }
        "cma" => {
            let buf = payload(7, 8 << 20);
            let mut msg = (buf.as_ptr() as u64).to_le_bytes().to_vec();
            msg.extend_from_slice(&(buf.len() as u64).to_le_bytes());
            port.send(parent, b"buf", &msg).expect("send");
            until(&mut port, &mut seen, "done", |s| !s.frames.is_empty());
            let (_, _, p) = seen.frames.remove(0);
            if p == [1] {
                // SAFETY: `buf` is alive; the parent wrote into it through
                // the kernel, so read it back without assuming Rust's view.
                let head = unsafe { std::ptr::read_volatile(buf.as_ptr().cast::<[u8; 4096]>()) };
                assert!(head[..] == payload(9, 4096)[..], "cma_write did not land");
            }
        }
        "cma-denied" => {
            let me = parent;
            let info = port.peer_info(me).expect("info");
            let mut buf = [0u8; 8];
            let r = port.cma_read(me, 0x1000, &mut buf);
            assert!(matches!(r, Err(CmaError::NotAvailable(Cma::NotPermitted))), "{r:?}");
            port.send(parent, b"cma", info.cma.to_string().as_bytes())
                .expect("send");
            until(&mut port, &mut seen, "done", |s| !s.frames.is_empty());
        }
        "idle" => {
            port.send(parent, b"ready", &[]).expect("ready");
            // Until killed; a parent gone ends it too.
            while seen.down.is_empty() {
                port.wait(None).expect("wait");
                poll(&mut port, &mut seen);
            }
        }
        "hostile" => {
            // A frame claiming 4 GiB of payload.
            port.send_raw_entry(parent, xfer_shm::entry::word1(xfer_shm::entry::KIND_FRAME, 0, u32::MAX));
            until(&mut port, &mut seen, "closed by the victim", |s| !s.down.is_empty());
        }
        r => panic!("unknown role {r}"),
    }
}

fn main() {
    let cases: [(&str, fn()); 8] = [
        ("ping_pong", ping_pong),
        ("back_pressure", back_pressure),
        ("cma_pull", cma_pull),
        ("cma_denied", cma_denied),
        ("many_peers", many_peers),
        ("peer_killed", peer_killed),
        ("hostile_entry", hostile_entry),
        ("hostile_handshake", hostile_handshake),
    ];
    common::main(&cases, child);
}
