//! RMA between two real processes: this binary runs each case as the
//! initiator and starts itself again as the target (`rma child ROLE ADDR`),
//! which registers regions and serves. Waits are bounded and wait for
//! conditions, never for time to pass.

mod common;

use std::process::Child;
use std::time::Duration;

use common::spawn;
use xfer_shm::rma::wire::{Header, Op, Status};
use xfer_shm::{
    Access, Cma, Completion, Event, Path, PeerId, RegionError, Rma, RmaError, ShmConfig, ShmPort, Transfer,
};

/// The longest any condition may take, on a loaded machine.
const LIMIT: Duration = Duration::from_secs(60);

/// Bytes of the target's large regions: more chunks than one poll takes
/// from a ring (`BUDGET`), so a region dropped after the first chunk is
/// dropped mid-operation.
const BIG: usize = 8 << 20;

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3] ^ seed)
        .collect()
}

/// One side: its port, its engine, what arrived.
struct Side {
    port: ShmPort,
    rma: Rma,
    frames: Vec<(PeerId, Vec<u8>, Vec<u8>)>,
    up: Vec<PeerId>,
    down: Vec<PeerId>,
    done: Vec<Completion>,
}

impl Side {
    fn new(cfg: &ShmConfig) -> Side {
        Side {
            port: ShmPort::open(cfg).expect("open"),
            rma: Rma::new(),
            frames: Vec::new(),
            up: Vec::new(),
            down: Vec::new(),
            done: Vec::new(),
        }
    }

    fn poll(&mut self) {
        let (frames, up, down) = (&mut self.frames, &mut self.up, &mut self.down);
        self.rma.poll(&mut self.port, |ev| match ev {
            Event::Frame { peer, frame } => frames.push((peer, frame.header.to_vec(), frame.payload.to_vec())),
            Event::Up { peer } => up.push(peer),
            Event::Down { peer, .. } => down.push(peer),
        });
        while let Some(c) = self.rma.next_completion() {
            self.done.push(c);
        }
    }

    /// Polls, blocking between polls, until `cond` holds; panics after LIMIT.
    fn until(&mut self, what: &str, cond: impl FnMut(&mut Side) -> bool) {
        common::until(self, LIMIT, what, cond);
    }

    /// Registers `bytes` with `access`; the key.
    fn register(&mut self, bytes: Vec<u8>, access: Access) -> u64 {
        self.rma
            .regions_mut()
            .register(bytes.into_boxed_slice(), access)
            .expect("register")
    }

    /// Sends the peer a `keys` frame announcing the regions `keys`.
    fn announce(&mut self, peer: PeerId, keys: &[u64]) {
        let mut msg = Vec::new();
        for &k in keys {
            let (a, l) = self.rma.regions().addr(k).expect("addr");
            msg.extend_from_slice(&k.to_le_bytes());
            msg.extend_from_slice(&a.to_le_bytes());
            msg.extend_from_slice(&(l as u64).to_le_bytes());
        }
        self.port.send(peer, b"keys", &msg).expect("send keys");
    }

    fn frame(&mut self, name: &[u8]) -> Vec<u8> {
        let what = String::from_utf8_lossy(name).into_owned();
        self.until(&what, |s| s.frames.iter().any(|f| f.1 == name));
        let i = self.frames.iter().position(|f| f.1 == name).expect("frame");
        self.frames.remove(i).2
    }

    /// Runs one operation to its completion.
    fn op(&mut self, peer: PeerId, read: bool, t: Transfer) -> Completion {
        let r = if read {
            self.rma.read(&mut self.port, peer, t)
        } else {
            self.rma.write(&mut self.port, peer, t)
        };
        r.expect("posted");
        self.until("completion", |s| s.done.iter().any(|c| c.context == t.context));
        let i = self
            .done
            .iter()
            .position(|c| c.context == t.context)
            .expect("completion");
        self.done.remove(i)
    }
}

impl common::Poller for Side {
    fn poll(&mut self) {
        Side::poll(self);
    }

    fn any_down(&self) -> bool {
        !self.down.is_empty()
    }

    fn port(&mut self) -> &mut ShmPort {
        &mut self.port
    }
}

/// A region of the target, as it announced it.
#[derive(Clone, Copy, Debug)]
struct Remote {
    key: u64,
    addr: u64,
    len: usize,
}

/// The regions a `keys` frame announces ([`Side::announce`]).
fn remotes(p: &[u8]) -> Vec<Remote> {
    p.chunks_exact(24)
        .map(|c| Remote {
            key: u64::from_le_bytes(c[0..8].try_into().expect("8")),
            addr: u64::from_le_bytes(c[8..16].try_into().expect("8")),
            len: u64::from_le_bytes(c[16..24].try_into().expect("8")) as usize,
        })
        .collect()
}

/// This side's configuration with CMA switched off (as `XFER_SHM_CMA=0`).
fn no_cma() -> ShmConfig {
    ShmConfig {
        cma: false,
        ..ShmConfig::default()
    }
}

/// Starts the target and takes its regions: a read-write one of `BIG`
/// bytes holding `pattern(1)`, a read-only one of 4 KiB holding
/// `pattern(2)`, and (role `dropper`) a second read-write one.
fn start(role: &str, cfg: &ShmConfig) -> (Side, Child, PeerId, Vec<Remote>) {
    let mut s = Side::new(cfg);
    let child = spawn(role, &s.port);
    s.until("child up", |s| !s.up.is_empty());
    let peer = s.up.remove(0);
    let regions = remotes(&s.frame(b"keys"));
    (s, child, peer, regions)
}

/// Ends the target and checks it exited well; returns its dropped-frame count.
fn stop(mut s: Side, mut child: Child, peer: PeerId) -> u64 {
    s.port.send(peer, b"bye", &[]).expect("bye");
    let st = s.frame(b"stats");
    s.until("child exit", |s| !s.down.is_empty());
    let status = child.wait().expect("wait child");
    assert!(status.success(), "child failed: {status}");
    u64::from_le_bytes(st[..8].try_into().expect("8"))
}

fn xfer(local_key: u64, local_offset: usize, r: Remote, at: usize, len: usize, context: u64) -> Transfer {
    Transfer {
        local_key,
        local_offset,
        remote_key: r.key,
        remote_addr: r.addr + at as u64,
        len,
        context,
    }
}

/// Reads, writes, reads back, and every refusal the target's checks make;
/// every operation must take `path`.
fn exercise(s: &mut Side, peer: PeerId, regions: &[Remote], path: Path) {
    let (rw, ro) = (regions[0], regions[1]);
    let local = s.register(vec![0u8; BIG], Access::LOCAL_WRITE);
    let src_bytes = pattern(3, BIG);
    let src = s.register(src_bytes.clone(), Access::empty());
    let ok = |c: &Completion| {
        assert_eq!(c.result, Ok(()), "context {}", c.context);
        assert_eq!(c.path, path, "context {}", c.context);
    };
    let mut got = vec![0u8; BIG];

    // The whole region, then a write over it and a read back.
    ok(&s.op(peer, true, xfer(local, 0, rw, 0, BIG, 1)));
    s.rma.regions().copy_out(local, 0, &mut got).expect("copy_out");
    assert!(got == pattern(1, BIG), "read bytes differ");
    ok(&s.op(peer, false, xfer(src, 0, rw, 0, BIG, 2)));
    ok(&s.op(peer, true, xfer(local, 0, rw, 0, BIG, 3)));
    s.rma.regions().copy_out(local, 0, &mut got).expect("copy_out");
    assert!(got == src_bytes, "written bytes differ");
    // Unaligned pieces: 100 bytes at 4093 from the source's offset 7.
    ok(&s.op(peer, false, xfer(src, 7, rw, 4093 + BIG / 2, 100, 4)));
    ok(&s.op(peer, true, xfer(local, 1, rw, 4093 + BIG / 2, 100, 5)));
    s.rma.regions().copy_out(local, 1, &mut got[..100]).expect("copy_out");
    assert!(got[..100] == src_bytes[7..107], "piece differs");
    // The read-only region reads, and refuses writes.
    ok(&s.op(peer, true, xfer(local, 0, ro, 0, ro.len, 6)));
    s.rma
        .regions()
        .copy_out(local, 0, &mut got[..ro.len])
        .expect("copy_out");
    assert!(got[..ro.len] == pattern(2, ro.len)[..], "read-only bytes differ");
    let c = s.op(peer, false, xfer(src, 0, ro, 0, 8, 7));
    assert_eq!(c.result, Err(RmaError::Remote(Status::Denied)));
    // Bounds: one byte past the end, before the start, a huge length.
    let c = s.op(peer, true, xfer(local, 0, rw, BIG - 1, 2, 8));
    assert_eq!(c.result, Err(RmaError::Remote(Status::OutOfBounds)));
    let c = s.op(peer, false, xfer(src, 0, rw, BIG - 4, 8, 16));
    assert_eq!(c.result, Err(RmaError::Remote(Status::OutOfBounds)));
    let c = s.op(
        peer,
        false,
        xfer(
            src,
            0,
            Remote {
                addr: rw.addr - 1,
                ..rw
            },
            0,
            1,
            9,
        ),
    );
    assert_eq!(c.result, Err(RmaError::Remote(Status::OutOfBounds)));
    // Another region's address under this key.
    let c = s.op(peer, true, xfer(local, 0, Remote { addr: ro.addr, ..rw }, 0, 8, 10));
    assert_eq!(c.result, Err(RmaError::Remote(Status::OutOfBounds)));
    // A guessed key.
    let c = s.op(
        peer,
        true,
        xfer(
            local,
            0,
            Remote {
                key: rw.key ^ 0x5a5a,
                ..rw
            },
            0,
            8,
            11,
        ),
    );
    assert_eq!(c.result, Err(RmaError::Remote(Status::NoKey)));
    // Local checks, before anything is sent.
    let r = s.rma.read(&mut s.port, peer, xfer(src, 0, rw, 0, 8, 12));
    assert_eq!(r, Err(RmaError::Local(RegionError::Denied)));
    let r = s.rma.write(&mut s.port, peer, xfer(src, BIG - 4, rw, 0, 8, 13));
    assert_eq!(r, Err(RmaError::Local(RegionError::OutOfBounds)));
    // A local region in use cannot be deregistered; afterwards it can.
    s.rma
        .write(&mut s.port, peer, xfer(src, 0, rw, 0, 64, 14))
        .expect("posted");
    assert_eq!(s.rma.regions_mut().deregister(src), Err(RegionError::Busy));
    s.until("completion", |s| s.done.iter().any(|c| c.context == 14));
    s.done.clear();
    // Hostile frames: malformed RMA headers, answers to nothing, a chunk
    // whose length lies. The target drops them and keeps serving.
    let mut bad = Header::new(Op::Done, 77).encode();
    bad[1] = 42;
    s.port.send(peer, &bad, &[]).expect("send");
    s.port
        .send(peer, &Header::new(Op::Done, 123_456).encode(), &[])
        .expect("send");
    let mut lie = Header::new(Op::PutData, 5);
    lie.key = rw.key;
    lie.addr = rw.addr;
    lie.len = 1 << 40;
    s.port.send(peer, &lie.encode(), &[0u8; 16]).expect("send");
    let mut stray = Header::new(Op::GetData, 99);
    stray.len = 4;
    s.port.send(peer, &stray.encode(), &[1, 2, 3, 4]).expect("send");
    ok(&s.op(peer, true, xfer(local, 0, rw, 0, 64, 15)));
    s.rma.regions().copy_out(local, 0, &mut got[..64]).expect("copy_out");
    assert!(got[..64] == src_bytes[..64], "bytes after hostile frames differ");
    assert!(s.rma.regions_mut().deregister(src).is_ok());
    assert!(s.rma.regions_mut().deregister(local).is_ok());
}

fn cma_expected() -> bool {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").unwrap_or_default();
    scope.trim().parse::<u32>().unwrap_or(0) == 0
}

/// Every operation and check with the target moving the bytes by CMA.
fn rma_cma() {
    let (mut s, child, peer, regions) = start("target", &ShmConfig::default());
    let path = if cma_expected() && s.port.peer_info(peer).expect("info").cma == Cma::Available {
        Path::Cma
    } else {
        println!("rma_cma: CMA unusable here, expecting the two-copy path");
        Path::Copy
    };
    exercise(&mut s, peer, &regions, path);
    assert!(stop(s, child, peer) >= 4, "the target did not count the hostile frames");
}

/// The same with CMA switched off on this side (`XFER_SHM_CMA=0`): every
/// byte through the ring, in chunks.
fn rma_copy() {
    let (mut s, child, peer, regions) = start("target", &no_cma());
    exercise(&mut s, peer, &regions, Path::Copy);
    assert_eq!(s.rma.stats().cma_refusals, 0);
    stop(s, child, peer);
}

/// The target deregisters a region after the first chunk of a write, and
/// another after the first chunk of a read: both operations fail with
/// `NoKey`, and the target keeps serving.
fn rma_dropped() {
    let (mut s, child, peer, regions) = start("dropper", &no_cma());
    let local = s.register(pattern(5, BIG), Access::LOCAL_WRITE);
    let c = s.op(peer, false, xfer(local, 0, regions[0], 0, BIG, 1));
    assert_eq!(
        c.result,
        Err(RmaError::Remote(Status::NoKey)),
        "write into a dropped region"
    );
    let c = s.op(peer, true, xfer(local, 0, regions[2], 0, BIG, 2));
    assert_eq!(
        c.result,
        Err(RmaError::Remote(Status::NoKey)),
        "read of a dropped region"
    );
    // The region is gone for good; the other still serves.
    let c = s.op(peer, true, xfer(local, 0, regions[0], 0, 8, 3));
    assert_eq!(c.result, Err(RmaError::Remote(Status::NoKey)));
    let c = s.op(peer, true, xfer(local, 0, regions[1], 0, 4096, 4));
    assert_eq!(c.result, Ok(()));
    let mut got = vec![0u8; 4096];
    s.rma.regions().copy_out(local, 0, &mut got).expect("copy_out");
    assert!(got == pattern(2, 4096));
    stop(s, child, peer);
}

/// A target in another user namespace may not attach to this process
/// (the kernel says EPERM): the first operation is refused as CMA and
/// re-issued through the ring, every later one goes through the ring at
/// once, and the bytes are right.
fn rma_cma_refused() {
    let (mut s, child, peer, regions) = start("userns", &ShmConfig::default());
    let probe = String::from_utf8_lossy(&s.frame(b"probe")).into_owned();
    if probe != Cma::NotPermitted.to_string() {
        println!("rma_cma_refused: SKIPPED: {probe}");
        stop(s, child, peer);
        return;
    }
    println!("rma_cma_refused: target in a new user namespace, its probe says {probe}");
    exercise(&mut s, peer, &regions, Path::Copy);
    assert_eq!(s.rma.stats().cma_refusals, 1, "the refusal is learnt once");
    stop(s, child, peer);
}

/// Posts four writes of `pattern(3)` to the first half of `r` and four
/// reads of its second half (`pattern(1)`), all at once, on this side's
/// own regions; waits for all eight and checks them.
fn both_ways(s: &mut Side, peer: PeerId, r: Remote) {
    let half = r.len / 2;
    let src = s.register(pattern(3, half), Access::empty());
    let dst: Vec<u64> = (0..4)
        .map(|_| s.register(vec![0u8; half], Access::LOCAL_WRITE))
        .collect();
    for i in 0..4u64 {
        s.rma
            .write(&mut s.port, peer, xfer(src, 0, r, 0, half, 100 + i))
            .expect("posted");
        s.rma
            .read(&mut s.port, peer, xfer(dst[i as usize], 0, r, half, half, 200 + i))
            .expect("posted");
    }
    s.until("eight completions", |s| s.done.len() >= 8);
    for c in s.done.drain(..) {
        assert_eq!(c.result, Ok(()), "context {}", c.context);
    }
    let want = pattern(1, r.len);
    let mut got = vec![0u8; half];
    for k in dst {
        s.rma.regions().copy_out(k, 0, &mut got).expect("copy_out");
        assert!(got[..] == want[half..], "read bytes differ");
    }
}

/// Both processes write and read each other's regions in bulk through the
/// rings at the same time: neither waits for the other to read first.
fn rma_both_ways() {
    let (mut s, child, peer, regions) = start("both", &no_cma());
    let mine = s.register(pattern(1, BIG), Access::REMOTE_READ.union(Access::REMOTE_WRITE));
    s.announce(peer, &[mine]);
    both_ways(&mut s, peer, regions[0]);
    s.frame(b"both-done");
    // What the child wrote landed here.
    let mut got = vec![0u8; BIG / 2];
    s.rma.regions().copy_out(mine, 0, &mut got).expect("copy_out");
    assert!(got == pattern(3, BIG / 2), "the child's writes differ");
    stop(s, child, peer);
}

/// A target that stops serving, then is killed: the operations in flight
/// to it (one by the ring, stuck on a full ring, one by CMA) fail with
/// `PeerDown`, and no others are reported.
fn rma_peer_killed() {
    let (mut s, mut child, peer, regions) = start("mute", &no_cma());
    let local = s.register(pattern(5, BIG), Access::LOCAL_WRITE);
    s.rma
        .write(&mut s.port, peer, xfer(local, 0, regions[0], 0, BIG, 1))
        .expect("posted");
    s.rma
        .read(&mut s.port, peer, xfer(local, 0, regions[1], 0, 64, 2))
        .expect("posted");
    s.poll();
    assert!(s.done.is_empty(), "a mute target answered");
    assert_eq!(s.rma.in_flight(), 2);
    child.kill().expect("kill");
    child.wait().expect("wait child");
    s.until("failures", |s| s.done.len() >= 2);
    for c in &s.done {
        assert_eq!(c.result, Err(RmaError::PeerDown), "context {}", c.context);
    }
    assert_eq!(s.rma.in_flight(), 0);
    // The local region is free again.
    assert!(s.rma.regions_mut().deregister(local).is_ok());
}

/// Moves this process into a new user namespace (mapping its uid to
/// root inside): the parent's process is then in an ancestor namespace,
/// out of its reach for ptrace and so for CMA.
fn enter_user_namespace() -> Result<(), String> {
    // SAFETY: plain system calls on this single-threaded process.
    let uid = unsafe { libc::geteuid() };
    // SAFETY: as above; no pointers.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER) } != 0 {
        return Err(format!("unshare(CLONE_NEWUSER): {}", std::io::Error::last_os_error()));
    }
    std::fs::write("/proc/self/uid_map", format!("0 {uid} 1")).map_err(|e| format!("uid_map: {e}"))
}

fn child(role: &str, addr: &[u8]) {
    let userns = if role == "userns" {
        Some(enter_user_namespace())
    } else {
        None
    };
    let mut s = Side::new(&ShmConfig {
        cma: role != "both",
        ..ShmConfig::default()
    });
    // The keys go out before the welcome is in: requests may reach this
    // side before it knows whether CMA works towards the parent.
    let parent = s.port.connect(addr).expect("connect");
    let rw = Access::REMOTE_READ.union(Access::REMOTE_WRITE);
    let mut keys = vec![
        s.register(pattern(1, BIG), rw),
        s.register(pattern(2, 4096), Access::REMOTE_READ),
    ];
    if role == "dropper" {
        keys.push(s.register(pattern(1, BIG), rw));
    }
    s.announce(parent, &keys);
    if let Some(r) = userns {
        s.until("welcome", |s| !s.up.is_empty());
        let what = match r {
            Ok(()) => s.port.peer_info(parent).expect("info").cma.to_string(),
            Err(e) => format!("no user namespace: {e}"),
        };
        s.port.send(parent, b"probe", what.as_bytes()).expect("send probe");
    }
    if role == "both" {
        let r = remotes(&s.frame(b"keys"))[0];
        both_ways(&mut s, parent, r);
        s.port.send(parent, b"both-done", &[]).expect("send");
    }
    if role == "mute" {
        // The welcome, so the keys' wake-up (owed until the parent's
        // eventfd came with it) is given; then it serves nothing more and
        // the parent kills it.
        s.until("welcome", |s| !s.up.is_empty());
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        return;
    }
    let (mut put_dropped, mut get_dropped) = (false, false);
    s.until("bye", |s| {
        if role == "dropper" {
            let st = s.rma.stats();
            if !put_dropped && st.put_chunks > 0 {
                put_dropped = true;
                s.rma.regions_mut().deregister(keys[0]).expect("deregister");
            }
            if !get_dropped && st.get_chunks > 0 {
                get_dropped = true;
                s.rma.regions_mut().deregister(keys[2]).expect("deregister");
            }
        }
        s.frames.iter().any(|f| f.1 == b"bye")
    });
    s.port
        .send(parent, b"stats", &s.rma.stats().dropped.to_le_bytes())
        .expect("send stats");
}

fn main() {
    let cases: [(&str, fn()); 6] = [
        ("rma_cma", rma_cma),
        ("rma_copy", rma_copy),
        ("rma_dropped", rma_dropped),
        ("rma_cma_refused", rma_cma_refused),
        ("rma_both_ways", rma_both_ways),
        ("rma_peer_killed", rma_peer_killed),
    ];
    common::main(&cases, child);
}
