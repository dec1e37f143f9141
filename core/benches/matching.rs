//! Micro-benchmark of receive matching (core's `rdm::Receives`) with many
//! unrelated entries queued.
//!
//! `cargo bench -p xfer-core --bench matching`
//!
//! For N = 10, 10^3 and 10^6 queued entries that do not match, the time of
//! one operation that does:
//! - `post, N unexpected`: a tagged receive posted (any source, exact tag)
//!   that takes the one message carrying its tag, behind N other messages
//!   from known senders with other tags;
//! - `post, N from unknown senders`: the same, with the N others from
//!   senders not in the address vector (nothing inserted meanwhile);
//! - `arrival, N posted`: a message that arrives and takes the one receive
//!   for its tag, posted behind N receives for other tags.
//!
//! Each figure is the median over batches of the mean time per operation.
//! `cargo test` runs it once, quickly, as a smoke test.

use std::hint::black_box;
use std::time::Instant;

use xfer_core::addr::{Address, AvTable};
use xfer_core::provider::RecvOp;
use xfer_core::rdm::{Receives, Unexpected};
use xfer_core::{PeerAddr, RecvSpec};

const BATCH: u64 = 64;

fn eager(from: Address) -> Unexpected<()> {
    Unexpected::Eager {
        from,
        conn: (0, 0),
        data: None,
        payload: Vec::new(),
    }
}

fn recv(src: PeerAddr, tag: u64) -> RecvOp {
    RecvOp {
        spec: RecvSpec { src, tag, ignore: 0 },
        tagged: true,
        buf: Vec::new().into(),
        context: tag,
    }
}

fn name(i: u64) -> Address {
    Address::new(&i.to_le_bytes()).expect("8-byte name")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Tags of the entries that match nothing: far from the measured ones.
const OTHER: u64 = 1 << 40;

fn post_behind_unexpected(n: u64, rounds: usize, known: bool) -> f64 {
    let mut av = AvTable::default();
    let senders: Vec<PeerAddr> = (0..16).map(|i| av.insert(name(i))).collect();
    let mut rx: Receives<()> = Receives::new();
    for i in 0..n {
        let (src, from) = if known {
            (senders[(i % 16) as usize], name(i % 16))
        } else {
            (PeerAddr::UNSPEC, name(1_000 + i % 16))
        };
        rx.arrive(true, src, OTHER + i, eager(from));
    }
    let mut samples = Vec::with_capacity(rounds);
    for r in 0..rounds as u64 {
        for i in 0..BATCH {
            rx.arrive(true, senders[0], r * BATCH + i, eager(name(0)));
        }
        let start = Instant::now();
        for i in 0..BATCH {
            let hit = rx.post(&av, recv(PeerAddr::UNSPEC, r * BATCH + i));
            black_box(hit.expect("its message is there"));
        }
        samples.push(start.elapsed().as_nanos() as f64 / BATCH as f64);
    }
    median(samples)
}

fn arrival_behind_posted(n: u64, rounds: usize) -> f64 {
    let av = AvTable::default();
    let mut rx: Receives<()> = Receives::new();
    for i in 0..n {
        assert!(rx.post(&av, recv(PeerAddr::UNSPEC, OTHER + i)).is_none());
    }
    let src = PeerAddr(3);
    let mut samples = Vec::with_capacity(rounds);
    for r in 0..rounds as u64 {
        for i in 0..BATCH {
            assert!(rx.post(&av, recv(PeerAddr::UNSPEC, r * BATCH + i)).is_none());
        }
        let start = Instant::now();
        for i in 0..BATCH {
            black_box(rx.take_posted(true, src, r * BATCH + i).expect("its receive is posted"));
        }
        samples.push(start.elapsed().as_nanos() as f64 / BATCH as f64);
    }
    median(samples)
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let sizes: &[u64] = if quick { &[10, 1_000] } else { &[10, 1_000, 1_000_000] };
    for &n in sizes {
        // Linear cases get fewer rounds at 10^6 (each op walks the queue).
        let rounds = match (quick, n) {
            (true, _) => 3,
            (false, 1_000_000) => 5,
            _ => 200,
        };
        let figures = [
            ("post, N unexpected", post_behind_unexpected(n, rounds, true)),
            ("post, N from unknown senders", post_behind_unexpected(n, rounds, false)),
            ("arrival, N posted", arrival_behind_posted(n, rounds)),
        ];
        for (what, ns) in figures {
            println!("{what:<32} N = {n:>9}  {ns:>12.1} ns/op");
        }
    }
}
