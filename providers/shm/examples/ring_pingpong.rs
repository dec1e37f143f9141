//! 8-byte round trips over the shared-memory rings between two processes,
//! each pinned to its own CPU, busy-polling (or blocking with `--wait`):
//! the figure to compare with `ucx_perftest -t tag_lat` (docs/SHM.md).
//!
//! ```sh
//! cargo run --release -p xfer-shm --example ring_pingpong -- [--iters N] [--size B] [--cpus A,B] [--wait] [--window W]
//! ```
//!
//! It starts itself again as the echoing peer. Latency is reported as UCX
//! reports it: half the round trip. With `--window W`, it measures the
//! message rate instead: W frames, then one acknowledgement back, repeated
//! (as `ucx_perftest -t tag_bw`, whose default window is 32).

mod common;

use std::time::{Duration, Instant};

use xfer_shm::{Event, PeerId, ShmConfig, ShmPort};

struct Opts {
    iters: usize,
    size: usize,
    cpus: (usize, usize),
    wait: bool,
    /// Message rate with this window instead of latency (0: latency).
    window: usize,
}

fn opts(args: &[String]) -> Opts {
    let mut o = Opts {
        iters: 200_000,
        size: 8,
        cpus: (0, 1),
        wait: false,
        window: 0,
    };
    common::each_opt(args, &["--wait"], |flag, val| match flag {
        "--iters" => o.iters = val.parse().expect("--iters N"),
        "--size" => o.size = val.parse().expect("--size BYTES"),
        "--window" => o.window = val.parse().expect("--window W"),
        "--cpus" => o.cpus = common::cpus(val),
        "--wait" => o.wait = true,
        a => panic!("unknown argument {a}"),
    });
    o
}

/// Polls (or waits) until frames arrive; returns how many (the last
/// one's payload is in `buf`).
fn recv(port: &mut ShmPort, buf: &mut [u8], wait: bool) -> usize {
    loop {
        let mut n = 0;
        port.poll(|ev| match ev {
            Event::Frame { frame, .. } => {
                frame.payload.copy_to(buf);
                n += 1;
            }
            Event::Up { .. } => {}
            Event::Down { reason, .. } => panic!("peer down: {reason}"),
        });
        if n > 0 {
            return n;
        }
        if wait {
            port.wait(Some(Duration::from_secs(10))).expect("wait");
        }
    }
}

fn send(port: &mut ShmPort, peer: PeerId, tag: u64, payload: &[u8]) {
    while port.send(peer, &tag.to_le_bytes(), payload).is_err() {
        std::hint::spin_loop();
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--peer") {
        let o = opts(&args[2..]);
        common::pin("ring_pingpong", o.cpus.1);
        let addr = common::unhex(&args[1]);
        let mut port = ShmPort::open(&ShmConfig::default()).expect("open");
        let parent = port.connect(&addr).expect("connect");
        let mut buf = vec![0u8; o.size];
        let total = o.iters + o.iters / 10;
        let per_ack = o.window.max(1);
        for i in 0..total {
            let mut got = 0;
            while got < per_ack {
                got += recv(&mut port, &mut buf, o.wait);
            }
            send(&mut port, parent, i as u64, &buf);
        }
        return;
    }
    let o = opts(&args);
    assert!(o.iters > 0, "--iters must be at least 1");
    common::pin("ring_pingpong", o.cpus.0);
    let mut port = ShmPort::open(&ShmConfig::default()).expect("open");
    let mut child = common::spawn_peer(port.address(), &args);
    let mut buf = vec![0u8; o.size];
    let payload = vec![0x5au8; o.size];
    // The peer connects; its first frame carries its id to us.
    let end = Instant::now() + Duration::from_secs(30);
    let peer = loop {
        let mut up = None;
        port.poll(|ev| {
            if let Event::Up { peer } = ev {
                up = Some(peer)
            }
        });
        if let Some(p) = up {
            break p;
        }
        assert!(Instant::now() < end, "peer did not connect");
        port.wait(Some(Duration::from_millis(100))).expect("wait");
    };
    if o.window > 0 {
        rate(&mut port, peer, &o, &payload, &mut buf);
        child.wait().expect("peer");
        return;
    }
    let warm = o.iters / 10;
    for i in 0..warm {
        send(&mut port, peer, i as u64, &payload);
        recv(&mut port, &mut buf, o.wait);
    }
    let mut rtt = Vec::with_capacity(o.iters);
    let start = Instant::now();
    for i in 0..o.iters {
        let t = Instant::now();
        send(&mut port, peer, i as u64, &payload);
        recv(&mut port, &mut buf, o.wait);
        rtt.push(t.elapsed());
    }
    let total = start.elapsed();
    assert_eq!(buf, payload, "echo differs");
    child.wait().expect("peer");
    rtt.sort_unstable();
    let q = |f: f64| rtt[((rtt.len() as f64 * f) as usize).min(rtt.len() - 1)].as_nanos() as f64 / 2000.0;
    let avg = total.as_nanos() as f64 / o.iters as f64 / 2000.0;
    println!(
        "ring_pingpong: {} B, {} iterations, {}, CPUs {},{}: latency (half round trip) avg {avg:.3} us, p50 {:.3} us, p99 {:.3} us, min {:.3} us",
        o.size,
        o.iters,
        if o.wait { "blocking waits" } else { "busy polling" },
        o.cpus.0,
        o.cpus.1,
        q(0.5),
        q(0.99),
        q(0.0),
    );
}

/// Windows of `o.window` frames, each answered by one: frames a second.
fn rate(port: &mut ShmPort, peer: PeerId, o: &Opts, payload: &[u8], buf: &mut [u8]) {
    let round = |port: &mut ShmPort, buf: &mut [u8], i: usize| {
        for k in 0..o.window {
            send(port, peer, (i * o.window + k) as u64, payload);
        }
        recv(port, buf, o.wait);
    };
    for i in 0..o.iters / 10 {
        round(port, buf, i);
    }
    let start = Instant::now();
    for i in 0..o.iters {
        round(port, buf, i);
    }
    let secs = start.elapsed().as_secs_f64();
    let msgs = (o.iters * o.window) as f64;
    println!(
        "ring_pingpong: {} B, window {}, {} frames, {}, CPUs {},{}: {:.2} M frames/s, {:.1} MB/s",
        o.size,
        o.window,
        o.iters * o.window,
        if o.wait { "blocking waits" } else { "busy polling" },
        o.cpus.0,
        o.cpus.1,
        msgs / secs / 1e6,
        msgs * o.size as f64 / secs / 1e6,
    );
}
