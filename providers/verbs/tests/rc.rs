//! RC queue pairs against a real verbs device (Soft-RoCE in the test guest:
//! `tests/vm/run-guest.sh tests/vm/verbs.sh`).
//!
//! On a machine without RDMA every test prints why it is skipped and passes;
//! inside the guest (`XFER_IN_GUEST=1`) or with `XFER_VERBS_REQUIRE=1` a
//! missing device fails the test instead.
//!
//! Environment: `XFER_VERBS_DEVICE` (device, default the first with an active
//! port), `XFER_RDMA_ADDR` (IPv4 address of that device's netdev),
//! `RXE_GID_INDEX` (expected RoCE v2 GID index), `XFER_VERBS_TEST_UNSIGNALED`
//! (sends of the long unsignaled run, default 100000).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use xfer_core::unstable::mr::{Access, MrCache, MrCacheAttr};
use xfer_core::Error;
use xfer_verbs::device::PortInfo;
use xfer_verbs::qp::{QpConfig, Sge};
use xfer_verbs::{
    probe, CmConnection, CmListener, Context, Cq, DeviceInfo, Pd, RcQp, RemoteBuf, Srq, SrqConfig, VerbsAttr, Wc,
};

const TIMEOUT_MS: i32 = 20_000;
const SQ_DEPTH: u32 = 64;
const SIGNAL_EVERY: u32 = 16;
const MESSAGES: u32 = 10_000;
const RMA_LEN: usize = 64 << 10;
const IMM: u32 = 0xC0FF_EE01;
const PATH_MTU: u32 = 512;

/// The device to test, or None (skip) when there is none and none is required.
fn device() -> Option<(DeviceInfo, PortInfo)> {
    let required = std::env::var("XFER_IN_GUEST").is_ok_and(|v| v == "1")
        || std::env::var("XFER_VERBS_REQUIRE").is_ok_and(|v| v == "1");
    let p = probe();
    let want = std::env::var("XFER_VERBS_DEVICE").ok();
    let found = p
        .devices
        .into_iter()
        .filter(|d| want.as_deref().is_none_or(|w| w == d.name))
        .find_map(|d| d.active_port().cloned().map(|port| (d, port)));
    if found.is_none() {
        let why = p
            .reason
            .unwrap_or_else(|| format!("no device {want:?} with an active port"));
        assert!(!required, "verbs device required but not found: {why}");
        eprintln!("SKIP: no RDMA device with an active port ({why}); run in the Soft-RoCE guest: tests/vm/run-guest.sh tests/vm/verbs.sh");
    }
    found
}

fn rdma_ip() -> Ipv4Addr {
    std::env::var("XFER_RDMA_ADDR")
        .ok()
        .and_then(|a| a.parse().ok())
        .unwrap_or(Ipv4Addr::new(10, 11, 0, 1))
}

#[test]
fn probe_finds_an_active_port_with_inline() {
    let Some((dev, port)) = device() else { return };
    eprintln!(
        "device {}: max_qp_wr {} max_srq_wr {} max_cqe {} max_sge {} max_qp_rd_atom {} max_inline(RC) {}",
        dev.name,
        dev.attr.max_qp_wr,
        dev.attr.max_srq_wr,
        dev.attr.max_cqe,
        dev.attr.max_sge,
        dev.attr.max_qp_rd_atom,
        dev.max_inline
    );
    eprintln!(
        "port {}: active {} link layer {} active MTU {} max MTU {} GIDs {}",
        port.attr.port,
        port.attr.active,
        port.attr.link_layer,
        port.attr.active_mtu,
        port.attr.max_mtu,
        port.attr.gid_tbl_len
    );
    for g in &port.gids {
        eprintln!("  gid[{}] = {g}", g.index);
    }
    assert!(port.attr.active);
    assert!(dev.max_inline > 0, "RC max_inline_data must be > 0");
    assert!(dev.attr.max_qp_wr >= SQ_DEPTH && dev.attr.max_srq_wr > 0 && dev.attr.max_cqe > 0);
    assert!(port.attr.active_mtu >= 256);
    if port.attr.link_layer == "Ethernet" {
        let v2 = port
            .roce_v2_ipv4_gid()
            .expect("a RoCE v2 IPv4-mapped GID on a RoCE port");
        eprintln!("RoCE v2 IPv4 GID index {} ({:?})", v2.index, v2.ipv4());
        assert_eq!(v2.ipv4(), Some(rdma_ip()));
        if let Some(want) = std::env::var("RXE_GID_INDEX").ok().and_then(|s| s.parse::<u8>().ok()) {
            assert_eq!(
                v2.index, want,
                "RoCE v2 GID index differs from the guest's RXE_GID_INDEX"
            );
        }
    }
}

/// One side's verbs resources (a "domain").
struct Side {
    pd: Arc<Pd>,
    cq: Arc<Cq>,
    srq: Srq,
    cache: MrCache<xfer_verbs::VerbsRegistrar>,
    cfg: QpConfig,
}

impl Side {
    fn new(name: &str, gid_index: Option<u8>) -> Side {
        let ctx = Context::open(name).expect("open device");
        let pd = Pd::new(&ctx).expect("pd");
        let attr = VerbsAttr {
            sq_depth: SQ_DEPTH,
            signal_every: SIGNAL_EVERY,
            srq_size: 256,
            srq_low_watermark: 64,
            srq_buf_size: 4096,
            min_rnr_timer: 1,
            path_mtu: PATH_MTU,
            gid_index,
            ..VerbsAttr::default()
        };
        let cq = Cq::new(&ctx, attr.srq_size + 2 * attr.sq_depth, true).expect("cq");
        let srq = Srq::new(&pd, SrqConfig::from_attr(&attr)).expect("srq");
        assert_eq!(srq.posted(), 256);
        let cache = MrCache::new(MrCacheAttr::default(), xfer_verbs::VerbsRegistrar::new(&pd));
        Side {
            cfg: QpConfig::from_attr(&attr),
            pd,
            cq,
            srq,
            cache,
        }
    }

    fn make_qp(&self) -> xfer_core::Result<RcQp> {
        RcQp::create(&self.pd, &self.cq, &self.cq, &self.srq, self.cfg)
    }

    /// Next completion; send-side ones retire their slots on `qp` first.
    /// Blocks on the completion channel when `block`, else busy-polls.
    fn next(&mut self, qp: &mut RcQp, block: bool) -> Wc {
        let mut wc = [Wc::default()];
        let deadline = Instant::now() + Duration::from_millis(TIMEOUT_MS as u64);
        loop {
            if self.cq.poll(&mut wc).unwrap() == 1 {
                break;
            }
            if block {
                self.cq.req_notify(false).unwrap();
                if self.cq.poll(&mut wc).unwrap() == 1 {
                    break;
                }
                self.cq.wait_event(1000).unwrap();
            }
            if Instant::now() >= deadline {
                panic!(
                    "no completion within {TIMEOUT_MS} ms: QP {:?}, outstanding {}, {:?}, SRQ posted {}",
                    qp.query(),
                    qp.outstanding(),
                    qp.stats(),
                    self.srq.posted()
                );
            }
        }
        let wc = wc[0].clone();
        assert!(wc.is_ok(), "completion error: {wc:?}");
        if !self.srq.owns(wc.wr_id()) {
            assert_eq!(wc.qp_num(), qp.qp_num());
            qp.complete_send(&wc);
        }
        wc
    }

    /// Next receive completion: returns (buffer index, byte_len, imm).
    fn recv(&mut self, qp: &mut RcQp, block: bool) -> (u32, usize, Option<u32>) {
        loop {
            let wc = self.next(qp, block);
            if self.srq.owns(wc.wr_id()) {
                assert!(wc.is_recv());
                let idx = self.srq.take(&wc).unwrap();
                return (idx, wc.byte_len() as usize, wc.imm());
            }
        }
    }

    fn done_with(&mut self, idx: u32) {
        self.srq.release(idx).unwrap();
        self.srq.refill().unwrap();
    }

    /// Sends inline, progressing send completions while the queue is full.
    fn send_inline(&mut self, qp: &mut RcQp, data: &[u8], signal: bool) {
        loop {
            match qp.send_inline(0, data, None, signal) {
                Ok(()) => return,
                Err(Error::Again) => {
                    let wc = self.next(qp, false);
                    assert!(!self.srq.owns(wc.wr_id()), "unexpected receive on the sending side");
                }
                Err(e) => panic!("send_inline: {e}"),
            }
        }
    }

    /// Waits until every send slot is retired (signaling the unsignaled tail).
    fn drain_sends(&mut self, qp: &mut RcQp) {
        while qp.outstanding() > 0 {
            if qp.unsignaled_tail() > 0 {
                match qp.signal_tail(u64::MAX) {
                    Ok(_) | Err(Error::Again) => {}
                    Err(e) => panic!("signal_tail: {e}"),
                }
            }
            let wc = self.next(qp, false);
            assert!(!self.srq.owns(wc.wr_id()), "unexpected receive while draining");
        }
    }
}

fn payload(seq: u32, max: usize, out: &mut Vec<u8>) {
    let len = 4 + (seq as usize * 7) % (max - 3);
    out.clear();
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend((4..len).map(|i| (seq as usize).wrapping_mul(31).wrapping_add(i) as u8));
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

fn unsignaled_count() -> u32 {
    std::env::var("XFER_VERBS_TEST_UNSIGNALED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

#[test]
fn rc_over_rdma_cm_srq_inline_selective_signaling_and_rma() {
    let Some((dev, port)) = device() else { return };
    let gid_index = port.roce_v2_ipv4_gid().map(|g| g.index);
    let name = dev.name.clone();
    let ip = rdma_ip();
    let bulk = unsignaled_count();
    let (port_tx, port_rx) = mpsc::channel();

    let server_name = name.clone();
    let server = std::thread::spawn(move || {
        // The server overrides the source GID with the probed RoCE v2 index.
        let mut side = Side::new(&server_name, gid_index);
        let mut listener = CmListener::bind(SocketAddrV4::new(ip, 0), 8).expect("listen");
        assert_eq!(listener.device().as_deref(), Some(server_name.as_str()));
        port_tx.send(listener.local_addr(ip)).unwrap();
        let mut conn = listener.accept(TIMEOUT_MS, || side.make_qp()).expect("accept");
        let info = conn.qp().query().unwrap();
        eprintln!("server QP: {info:?}");
        assert_eq!(info.state, 3, "RTS");
        assert_eq!(info.path_mtu, PATH_MTU.min(port.attr.active_mtu));
        let want = VerbsAttr::default();
        assert_eq!(
            (info.timeout, info.retry_cnt, info.rnr_retry),
            (want.timeout, want.retry_cnt, want.rnr_retry),
            "the configured transport settings, not rdma_cm's"
        );
        assert_eq!(info.min_rnr_timer, 1);
        if let Some(g) = gid_index {
            assert_eq!(info.sgid_index, g);
        }
        let qp = conn.qp_mut();

        // Phase 1 and 2: every message in order with its content (blocking
        // waits on the completion channel).
        let max = qp.max_inline() as usize;
        let mut want = Vec::new();
        for seq in 0..MESSAGES + bulk {
            let (idx, len, imm) = side.recv(qp, true);
            payload(seq, max.min(200), &mut want);
            assert_eq!(imm, None);
            assert_eq!(side.srq.data(idx, len).unwrap(), &want[..], "message {seq}");
            side.done_with(idx);
        }
        assert!(side.srq.refills() > 0, "the SRQ was refilled below its watermark");
        eprintln!(
            "server: {} messages checked, SRQ refills {}",
            MESSAGES + bulk,
            side.srq.refills()
        );

        // Phase 3: expose a buffer for RDMA WRITE and READ through the MR cache.
        let mut target = vec![0u8; 2 * RMA_LEN];
        target[RMA_LEN..].copy_from_slice(&pattern(0xB0, RMA_LEN));
        let base = target.as_mut_ptr() as usize;
        let r = side
            .cache
            .lookup(base, target.len(), Access::REMOTE_WRITE | Access::REMOTE_READ)
            .unwrap();
        let rkey = side.cache.handle(&r).unwrap().rkey();
        let mut msg = Vec::new();
        msg.extend_from_slice(&(base as u64).to_le_bytes());
        msg.extend_from_slice(&rkey.to_le_bytes());
        side.send_inline(qp, &msg, true);
        // The write with immediate consumes one SRQ receive, carrying the imm.
        let (idx, len, imm) = side.recv(qp, true);
        assert_eq!((len, imm), (RMA_LEN, Some(IMM)));
        side.done_with(idx);
        assert!(target[..RMA_LEN] == pattern(0xA0, RMA_LEN)[..], "RDMA WRITE content");
        // The client reads the second half, then says done.
        let (idx, len, _) = side.recv(qp, true);
        assert_eq!(side.srq.data(idx, len).unwrap(), b"done");
        side.done_with(idx);
        side.drain_sends(qp);
        side.cache.release(r).unwrap();
        eprintln!("server: cache {:?}", side.cache.stats());
        conn.disconnect(TIMEOUT_MS).ok();
    });

    let addr = port_rx.recv_timeout(Duration::from_secs(30)).expect("server listening");
    let mut side = Side::new(&name, None);
    let mut conn = CmConnection::connect(addr, TIMEOUT_MS, || side.make_qp()).expect("connect");
    let info = conn.qp().query().unwrap();
    eprintln!("client QP: {info:?} (max_inline {})", conn.qp().max_inline());
    assert_eq!(info.state, 3, "RTS");
    assert_eq!(info.path_mtu, PATH_MTU.min(port.attr.active_mtu));
    let qp = conn.qp_mut();
    assert!(qp.max_inline() > 0);
    assert_eq!(
        qp.sq_depth(),
        SQ_DEPTH,
        "slots are accounted against the depth asked for"
    );
    let max = qp.max_inline() as usize;

    // Phase 1: 10,000 inline sends, signaled every SIGNAL_EVERY.
    let t = Instant::now();
    let mut msg = Vec::new();
    for seq in 0..MESSAGES {
        payload(seq, max.min(200), &mut msg);
        side.send_inline(qp, &msg, false);
        assert!(qp.outstanding() <= qp.sq_depth());
    }
    let s = qp.stats();
    eprintln!("client phase 1: {MESSAGES} sends in {:?}, {s:?}", t.elapsed());
    assert_eq!(s.inline_sends, MESSAGES as u64);
    assert_eq!(s.signaled, (MESSAGES / SIGNAL_EVERY) as u64);
    assert_eq!(s.unsignaled, (MESSAGES - MESSAGES / SIGNAL_EVERY) as u64);

    // Phase 2: a long run of unsignaled sends through the 64-deep queue.
    let t = Instant::now();
    for seq in MESSAGES..MESSAGES + bulk {
        payload(seq, max.min(200), &mut msg);
        side.send_inline(qp, &msg, false);
    }
    side.drain_sends(qp);
    let s = qp.stats();
    eprintln!("client phase 2: {bulk} sends in {:?}, {s:?}", t.elapsed());
    assert!(s.max_outstanding <= qp.sq_depth(), "send queue overflow");
    assert_eq!(s.signaled + s.unsignaled, (MESSAGES + bulk) as u64);
    assert!(s.unsignaled >= u64::from(bulk) * u64::from(SIGNAL_EVERY - 1) / u64::from(SIGNAL_EVERY));

    // Phase 3: RMA through MRs from the cache.
    let (idx, len, _) = side.recv(qp, false);
    let d = side.srq.data(idx, len).unwrap();
    let remote_base = u64::from_le_bytes(d[..8].try_into().unwrap());
    let rkey = u32::from_le_bytes(d[8..12].try_into().unwrap());
    side.done_with(idx);

    let src = pattern(0xA0, RMA_LEN);
    let r_src = side
        .cache
        .lookup(src.as_ptr() as usize, src.len(), Access::empty())
        .unwrap();
    let lkey = side.cache.handle(&r_src).unwrap().lkey();
    let sge = Sge {
        addr: src.as_ptr() as u64,
        length: RMA_LEN as u32,
        lkey,
    };
    // SAFETY: `src` outlives the write, which is signaled and waited for below.
    unsafe {
        qp.write(
            1,
            sge,
            RemoteBuf {
                addr: remote_base,
                rkey,
            },
            Some(IMM),
            true,
        )
    }
    .unwrap();
    let wc = side.next(qp, false);
    assert_eq!(wc.wr_id(), 1);

    let mut dst = vec![0u8; RMA_LEN];
    let r_dst = side
        .cache
        .lookup(dst.as_mut_ptr() as usize, dst.len(), Access::LOCAL_WRITE)
        .unwrap();
    let lkey = side.cache.handle(&r_dst).unwrap().lkey();
    let sge = Sge {
        addr: dst.as_mut_ptr() as u64,
        length: RMA_LEN as u32,
        lkey,
    };
    let remote = RemoteBuf {
        addr: remote_base + RMA_LEN as u64,
        rkey,
    };
    // SAFETY: `dst` is not touched until the read's completion below.
    unsafe { qp.read(2, sge, remote, true) }.unwrap();
    let wc = side.next(qp, false);
    assert_eq!((wc.wr_id(), wc.byte_len() as usize), (2, RMA_LEN));
    assert!(dst == pattern(0xB0, RMA_LEN), "RDMA READ content");
    // A second lookup of the same buffer is answered by the cache.
    let again = side
        .cache
        .lookup(dst.as_ptr() as usize, dst.len(), Access::LOCAL_WRITE)
        .unwrap();
    let stats = side.cache.stats();
    eprintln!(
        "client: cache {stats:?}, registrations {}",
        side.cache.registrar().registrations()
    );
    assert!(side.cache.registrar().registrations() >= 2);
    for r in [again, r_dst, r_src] {
        side.cache.release(r).unwrap();
    }
    side.send_inline(qp, b"done", true);
    side.drain_sends(qp);
    server.join().expect("server thread");
    drop(conn);
}

#[test]
fn send_queue_full_is_again_not_overflow() {
    let Some((dev, port)) = device() else { return };
    let ip = rdma_ip();
    let name = dev.name.clone();
    let (port_tx, port_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let server_name = name.clone();
    // The server does not poll its CQ until told: the client's queue fills,
    // receives pile up in the SRQ (no RNR while it has buffers).
    let server = std::thread::spawn(move || {
        let mut side = Side::new(&server_name, None);
        let mut listener = CmListener::bind(SocketAddrV4::new(ip, 0), 8).expect("listen");
        port_tx.send(listener.local_addr(ip)).unwrap();
        let mut conn = listener.accept(TIMEOUT_MS, || side.make_qp()).expect("accept");
        go_rx.recv().unwrap();
        let qp = conn.qp_mut();
        for seq in 0..200u32 {
            let (idx, len, _) = side.recv(qp, true);
            if seq % 50 == 0 {
                eprintln!("server: message {seq} of 200");
            }
            assert_eq!(side.srq.data(idx, len).unwrap(), &seq.to_le_bytes());
            side.done_with(idx);
        }
        // The client's last sends are unsignaled and retired by a signaled
        // zero-length RDMA WRITE after them: this QP must live to acknowledge
        // it. (Destroyed at once, the write went unanswered and the client
        // waited out its 20 s for the completion: one CI run in five.)
        done_rx.recv_timeout(Duration::from_secs(60)).expect("client drained");
    });
    let _ = port;
    let addr = port_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    let mut side = Side::new(&name, None);
    let mut conn = CmConnection::connect(addr, TIMEOUT_MS, || side.make_qp()).expect("connect");
    let qp = conn.qp_mut();
    let depth = qp.sq_depth();
    // Fill the queue without polling: exactly `depth` posts succeed.
    let mut posted = 0u32;
    while posted < depth + 10 {
        match qp.send_inline(0, &posted.to_le_bytes(), None, false) {
            Ok(()) => posted += 1,
            Err(Error::Again) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(posted, depth, "posts accepted before Again");
    assert_eq!(qp.stats().sq_full, 1);
    eprintln!("client: queue full after {posted} posts, {:?}", qp.stats());
    // The NIC acknowledges without the server's application polling: the first
    // signaled completion arrives and retires its slots.
    let wc = side.next(qp, false);
    eprintln!("client: first completion {wc:?}, outstanding {}", qp.outstanding());
    assert_eq!(qp.outstanding(), depth - SIGNAL_EVERY);
    go_tx.send(()).unwrap();
    for seq in posted..200 {
        side.send_inline(qp, &seq.to_le_bytes(), false);
    }
    // 200 is not a multiple of SIGNAL_EVERY: 8 unsignaled sends trail, retired
    // by a signaled zero-length RDMA WRITE.
    assert_eq!(qp.unsignaled_tail(), 200 % SIGNAL_EVERY);
    side.drain_sends(qp);
    assert_eq!((qp.outstanding(), qp.unsignaled_tail()), (0, 0));
    assert!(qp.stats().max_outstanding <= SQ_DEPTH);
    done_tx.send(()).unwrap();
    server.join().expect("server");
}
