//! RMA bandwidth between two processes over xfer-shm: this process writes
//! (or reads) a region of the peer, `--window` operations in flight, each
//! process pinned to its own CPU and busy polling; the figure to compare
//! with `ucx_perftest -t ucp_put_bw` / `ucp_get` / `tag_bw` (docs/SHM.md).
//!
//! ```sh
//! cargo run --release -p xfer-shm --example rma_bw -- [--op write|read] [--size B] [--iters N] [--window W] [--cpus A,B] [--copy]
//! ```
//!
//! `--copy` switches cross-memory attach off on both sides (as
//! `XFER_SHM_CMA=0`): every byte goes through the ring in chunks, the path
//! taken where the kernel refuses CMA. It starts itself again as the peer.

mod common;

use std::time::{Duration, Instant};

use xfer_shm::{Access, Event, Path, PeerId, Rma, ShmConfig, ShmPort, Transfer};

struct Opts {
    read: bool,
    size: usize,
    iters: usize,
    window: usize,
    cpus: (usize, usize),
    copy: bool,
}

fn opts(args: &[String]) -> Opts {
    let mut o = Opts {
        read: false,
        size: 1 << 20,
        iters: 2000,
        window: 4,
        cpus: (0, 1),
        copy: false,
    };
    common::each_opt(args, &["--copy"], |flag, val| match flag {
        "--op" => o.read = val == "read",
        "--size" => o.size = val.parse().expect("--size BYTES"),
        "--iters" => o.iters = val.parse().expect("--iters N"),
        "--window" => o.window = val.parse().expect("--window W"),
        "--cpus" => o.cpus = common::cpus(val),
        "--copy" => o.copy = true,
        a => panic!("unknown argument {a}"),
    });
    o.window = o.window.max(1);
    o
}

/// Polls once; returns whether a frame named `name` arrived.
fn poll(rma: &mut Rma, port: &mut ShmPort, name: &[u8], got: &mut Vec<u8>) -> (bool, Option<PeerId>) {
    let (mut hit, mut up) = (false, None);
    rma.poll(port, |ev| match ev {
        Event::Frame { frame, .. } if frame.header.to_vec() == name => {
            *got = frame.payload.to_vec();
            hit = true;
        }
        Event::Frame { .. } => {}
        Event::Up { peer } => up = Some(peer),
        Event::Down { reason, .. } => panic!("peer down: {reason}"),
    });
    (hit, up)
}

fn peer(addr: &str, o: &Opts, cfg: &ShmConfig) {
    common::pin("rma_bw", o.cpus.1);
    let addr = common::unhex(addr);
    let mut port = ShmPort::open(cfg).expect("open");
    let mut rma = Rma::new();
    let parent = port.connect(&addr).expect("connect");
    let key = rma
        .regions_mut()
        .register(
            vec![0x5a; o.size].into_boxed_slice(),
            Access::REMOTE_READ.union(Access::REMOTE_WRITE),
        )
        .expect("register");
    let (a, _) = rma.regions().addr(key).expect("addr");
    let mut msg = key.to_le_bytes().to_vec();
    msg.extend_from_slice(&a.to_le_bytes());
    port.send(parent, b"region", &msg).expect("send");
    let mut got = Vec::new();
    while !poll(&mut rma, &mut port, b"bye", &mut got).0 {}
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let is_peer = args.first().map(String::as_str) == Some("--peer");
    let o = opts(if is_peer { &args[2..] } else { &args });
    let cfg = ShmConfig {
        ring_bytes: ShmConfig::from_env().expect("XFER_SHM_*").ring_bytes,
        cma: !o.copy,
        ..ShmConfig::default()
    };
    if is_peer {
        return peer(&args[1], &o, &cfg);
    }
    common::pin("rma_bw", o.cpus.0);
    let mut port = ShmPort::open(&cfg).expect("open");
    let mut rma = Rma::new();
    let mut child = common::spawn_peer(port.address(), &args);
    let end = Instant::now() + Duration::from_secs(30);
    let mut got = Vec::new();
    let mut peer = None;
    loop {
        let (hit, up) = poll(&mut rma, &mut port, b"region", &mut got);
        peer = peer.or(up);
        if hit {
            break;
        }
        assert!(Instant::now() < end, "peer did not connect");
    }
    let peer = peer.expect("peer up");
    let remote_key = u64::from_le_bytes(got[0..8].try_into().expect("8"));
    let remote_addr = u64::from_le_bytes(got[8..16].try_into().expect("8"));
    let local_key = rma
        .regions_mut()
        .register(vec![0xa5; o.size].into_boxed_slice(), Access::LOCAL_WRITE)
        .expect("register");
    let t = Transfer {
        local_key,
        local_offset: 0,
        remote_key,
        remote_addr,
        len: o.size,
        context: 0,
    };
    let mut path = None;
    // Each operation's time from post to completion: its median is the
    // figure that preemption on a loaded machine moves least.
    let mut times: Vec<f64> = Vec::with_capacity(o.iters);
    let mut run = |rma: &mut Rma, port: &mut ShmPort, n: usize, times: &mut Vec<f64>| {
        let (mut posted, mut done) = (0, 0);
        let mut posted_at = vec![Instant::now(); n];
        while done < n {
            while posted < n && rma.in_flight() < o.window {
                let t = Transfer {
                    context: posted as u64,
                    ..t
                };
                posted_at[posted] = Instant::now();
                let r = if o.read {
                    rma.read(port, peer, t)
                } else {
                    rma.write(port, peer, t)
                };
                r.expect("post");
                posted += 1;
            }
            poll(rma, port, b"", &mut got);
            while let Some(c) = rma.next_completion() {
                c.result.expect("rma");
                path = Some(c.path);
                done += 1;
                times.push(posted_at[c.context as usize].elapsed().as_secs_f64());
            }
        }
    };
    run(&mut rma, &mut port, o.iters / 10 + 1, &mut Vec::new());
    let start = Instant::now();
    run(&mut rma, &mut port, o.iters, &mut times);
    let secs = start.elapsed().as_secs_f64();
    times.sort_by(f64::total_cmp);
    let p50 = times[times.len() / 2];
    port.send(peer, b"bye", &[]).expect("bye");
    child.wait().expect("peer");
    let bytes = (o.iters * o.size) as f64;
    println!(
        "rma_bw: {} {} B, window {}, {} ops, path {}, CPUs {},{}: {:.1} MB/s ({:.2} GB/s), {:.2} us per op; median operation {:.2} us ({:.1} MB/s at window 1)",
        if o.read { "read" } else { "write" },
        o.size,
        o.window,
        o.iters,
        match path {
            Some(Path::Cma) => "CMA (one copy)",
            Some(Path::Copy) => "ring (two copies)",
            None => "?",
        },
        o.cpus.0,
        o.cpus.1,
        bytes / secs / (1 << 20) as f64,
        bytes / secs / 1e9,
        secs * 1e6 / o.iters as f64,
        p50 * 1e6,
        o.size as f64 / p50 / (1 << 20) as f64,
    );
}
