//! xfer-soak: mixed traffic between two processes for a fixed time, with
//! every payload checked, zero errors required, and memory and descriptors
//! of both processes sampled to show they stay flat (issue 7's soak).
//!
//! ```text
//! xfer-soak [--seconds N] [--every S] [--seed N]
//! ```
//!
//! This process (the driver) starts a second one (`xfer-soak peer`) and
//! keeps `WINDOW` operations in flight to it, drawn from a fixed mix: tagged
//! messages of 0 B to 1 MiB (eager and rendezvous) that the peer checks and
//! echoes, RMA writes (half with immediate data) read back and checked, and
//! tagged injects. Every `--every` seconds it prints a sample line; at the
//! end it compares its counts with the peer's and prints one verdict line:
//! `xfer-soak: PASS ...` (exit 0) or `xfer-soak: FAIL ...` (exit 1).
//! The provider is the default one (`XFER_PROVIDER` chooses); TCP listens on
//! 127.0.0.1 unless `XFER_TCP_ADDR` says otherwise.

#[path = "../xfer-perf/hex.rs"]
mod hex;
mod peer;
mod sample;
mod traffic;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use xfer::{Completion, CompletionQueue, Domain, Endpoint, EndpointAttr, PeerAddr, RemoteKey};

use hex::{hex, unhex};
use sample::{rss_slack, usage, Usage};
use traffic::{check, fill, Op, Rng, INJECT, MAX_MSG, WINDOW};

type Result<T> = std::result::Result<T, String>;

/// One endpoint with its domain, queue and address vector.
struct Side {
    ep: Endpoint,
    cq: CompletionQueue,
    av: xfer::AddressVector,
    domain: Domain,
}

fn open() -> Result<Side> {
    let domain = xfer::open_default().map_err(|e| format!("opening a domain: {e}"))?;
    let mut attr = EndpointAttr::from_env();
    if xfer::TcpAttr::from_env().addr.is_none() {
        attr.params.set("tcp.addr", "127.0.0.1");
    }
    let cq = domain.cq(&xfer::CqAttr::from_env()).map_err(|e| e.to_string())?;
    let av = domain.av().map_err(|e| e.to_string())?;
    let ep = domain
        .endpoint(&cq, &av, &attr)
        .map_err(|e| format!("opening an endpoint: {e}"))?;
    Ok(Side { ep, cq, av, domain })
}

/// A buffer of `len` bytes whose pages are all resident already, so that
/// memory samples see the soak's steady state from the start.
fn touched(len: usize) -> Vec<u8> {
    vec![0xa5; len]
}

/// Command-line settings.
struct Options {
    seconds: u64,
    every: u64,
    seed: u64,
}

impl Options {
    fn parse() -> Result<Options> {
        let mut o = Options {
            seconds: 600,
            every: 10,
            seed: 1,
        };
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            let mut num = |what: &str| -> Result<u64> {
                let v = args.next().ok_or(format!("{what} needs a value"))?;
                v.parse().map_err(|_| format!("{what}: {v:?} is not a number"))
            };
            match a.as_str() {
                "--seconds" => o.seconds = num("--seconds")?,
                "--every" => o.every = num("--every")?.max(1),
                "--seed" => o.seed = num("--seed")?,
                _ => return Err(format!("unknown argument {a:?} (--seconds N, --every S, --seed N)")),
            }
        }
        Ok(o)
    }
}

/// Where one window slot's operation stands.
#[derive(Clone, Copy)]
enum Slot {
    Idle,
    /// Echo `seq`: waiting for the send's and the echo's completions.
    Echo {
        seq: u64,
        len: usize,
        sent: bool,
        back: bool,
    },
    /// RMA `seq`: the write is out, the read follows.
    Write {
        seq: u64,
        len: usize,
        offset: usize,
    },
    Read {
        seq: u64,
        len: usize,
    },
}

/// Context of an operation: its slot, and which of the slot's operations.
const SEND: u64 = 1;
const RECV: u64 = 2;
const RMA: u64 = 3;

/// A slot's buffer, `None` while an operation holds it.
type Buf = Option<Vec<u8>>;

/// What the driver did, to compare with the peer's counts.
#[derive(Default)]
struct Tally {
    ops: u64,
    bytes: u64,
    echoes: u64,
    injects: u64,
    writedata: u64,
    datasum: u64,
}

/// The driver's state: its endpoint, the peer, the slots and their buffers.
struct Driver {
    side: Side,
    peer: PeerAddr,
    rkey: RemoteKey,
    rng: Rng,
    seq: u64,
    slots: Vec<Slot>,
    /// Per slot: the send (or RMA) buffer and the receive buffer.
    bufs: Vec<(Buf, Buf)>,
    tally: Tally,
}

impl Driver {
    /// Starts the next operations of the mix in `slot`: injects, which need
    /// no completion, until one that occupies the slot.
    fn start(&mut self, slot: usize) -> Result<()> {
        while self.start_one(slot)? {}
        Ok(())
    }

    /// Starts one operation in `slot`; returns whether the slot is still free.
    fn start_one(&mut self, slot: usize) -> Result<bool> {
        self.seq += 1;
        let seq = self.seq;
        let ctx = |kind: u64| (slot as u64) << 8 | kind;
        let (sbuf, rbuf) = &mut self.bufs[slot];
        let mut s = sbuf.take().ok_or("send buffer in flight")?;
        match self.rng.op(slot) {
            Op::Echo { len } => {
                let mut r = rbuf.take().ok_or("receive buffer in flight")?;
                r.resize(len, 0);
                r.fill(0);
                self.side
                    .ep
                    .trecv(self.peer, seq, 0, r, ctx(RECV))
                    .map_err(|e| format!("posting echo receive {seq}: {}", e.error))?;
                s.resize(len, 0);
                fill(&mut s, seq);
                self.side
                    .ep
                    .tsend(self.peer, seq, s, ctx(SEND))
                    .map_err(|e| format!("sending {seq}: {}", e.error))?;
                self.slots[slot] = Slot::Echo {
                    seq,
                    len,
                    sent: false,
                    back: false,
                };
            }
            Op::WriteRead { len, offset, data } => {
                s.resize(len, 0);
                fill(&mut s, seq);
                let off = offset as u64;
                let r = match data {
                    true => self.side.ep.write_data(self.peer, s, &self.rkey, off, seq, ctx(RMA)),
                    false => self.side.ep.write(self.peer, s, &self.rkey, off, ctx(RMA)),
                };
                r.map_err(|e| format!("writing {seq}: {}", e.error))?;
                if data {
                    self.tally.writedata += 1;
                    self.tally.datasum = self.tally.datasum.wrapping_add(seq);
                }
                self.slots[slot] = Slot::Write { seq, len, offset };
            }
            Op::Inject { len } => {
                s.resize(len, 0);
                fill(&mut s, seq);
                self.side
                    .ep
                    .tinject(self.peer, INJECT | seq, &s)
                    .map_err(|e| format!("injecting {seq}: {e}"))?;
                *sbuf = Some(s);
                self.tally.injects += 1;
                self.tally.ops += 1;
                self.tally.bytes += len as u64;
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Handles one completion; returns whether its slot is free again.
    fn complete(&mut self, c: &mut Completion) -> Result<bool> {
        let (slot, kind) = ((c.context >> 8) as usize, c.context & 0xff);
        if let Err(e) = &c.result {
            return Err(format!("operation {kind} of slot {slot} failed: {e}"));
        }
        let buf = c.buf.take().ok_or("completion without its buffer")?;
        let state = *self.slots.get(slot).ok_or("completion for no slot")?;
        let free = match (state, kind) {
            (Slot::Echo { seq, len, sent, back }, SEND | RECV) => {
                if kind == RECV {
                    if c.len != len || !check(&buf, seq) {
                        return Err(format!(
                            "echo {seq}: {} B came back, {len} B sent, or the bytes differ",
                            c.len
                        ));
                    }
                    self.bufs[slot].1 = Some(buf);
                } else {
                    self.bufs[slot].0 = Some(buf);
                }
                let (sent, back) = (sent || kind == SEND, back || kind == RECV);
                self.slots[slot] = Slot::Echo { seq, len, sent, back };
                if sent && back {
                    self.tally.echoes += 1;
                    self.tally.bytes += 2 * len as u64;
                }
                sent && back
            }
            (Slot::Write { seq, len, offset }, RMA) => {
                let mut b = buf;
                b.fill(0);
                let ctx = (slot as u64) << 8 | RMA;
                self.side
                    .ep
                    .read(self.peer, b, &self.rkey, offset as u64, ctx)
                    .map_err(|e| format!("reading {seq} back: {}", e.error))?;
                self.slots[slot] = Slot::Read { seq, len };
                false
            }
            (Slot::Read { seq, len }, RMA) => {
                if !check(&buf, seq) {
                    return Err(format!("RMA {seq}: {len} B read back differ from what was written"));
                }
                self.bufs[slot].0 = Some(buf);
                self.tally.bytes += 2 * len as u64;
                true
            }
            _ => return Err(format!("completion {kind} out of place in slot {slot}")),
        };
        if free {
            self.tally.ops += 1;
            self.slots[slot] = Slot::Idle;
        }
        Ok(free)
    }

    /// Polls once; starts a new operation in every slot that came free
    /// unless `starting` is false. Returns the slots still busy.
    fn step(&mut self, done: &mut [Completion], starting: bool) -> Result<usize> {
        let n = self.side.cq.poll(done).map_err(|e| format!("polling: {e}"))?;
        for c in &mut done[..n] {
            if self.complete(c)? && starting {
                self.start((c.context >> 8) as usize)?;
            }
        }
        Ok(self.slots.iter().filter(|s| !matches!(s, Slot::Idle)).count())
    }
}

/// The peer process and its stdout.
struct Peer {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Peer {
    fn spawn() -> Result<Peer> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut child = Command::new(exe)
            .arg("peer")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting the peer: {e}"))?;
        let out = BufReader::new(child.stdout.take().ok_or("peer stdout")?);
        Ok(Peer { child, out })
    }

    /// The value of the peer's next line, which must start with `key `.
    fn line(&mut self, key: &str) -> Result<String> {
        let mut l = String::new();
        self.out.read_line(&mut l).map_err(|e| e.to_string())?;
        l.trim_end()
            .strip_prefix(key)
            .and_then(|v| v.strip_prefix(' '))
            .map(str::to_string)
            .ok_or_else(|| format!("peer said {l:?}, expected `{key} ...`"))
    }

    fn say(&mut self, line: &str) -> Result<()> {
        let stdin = self.child.stdin.as_mut().ok_or("peer stdin")?;
        writeln!(stdin, "{line}").map_err(|e| format!("telling the peer {line:?}: {e}"))
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Memory and descriptor samples, per process (driver, peer): the baseline,
/// the highest resident set since, and the latest sample.
struct Watch {
    base: Option<[Usage; 2]>,
    high: [u64; 2],
    last: [Usage; 2],
}

fn run(o: &Options) -> Result<bool> {
    let mut peer = Peer::spawn()?;
    let side = open()?;
    let name = unhex(&peer.line("name")?)?;
    let rkey = RemoteKey::unpack(&unhex(&peer.line("rkey")?)?).map_err(|e| format!("peer's key: {e}"))?;
    let addr = side.av.insert(&name).map_err(|e| format!("inserting the peer: {e}"))?;
    peer.say(&format!("peer {}", hex(side.ep.name().as_bytes())))?;
    println!(
        "xfer-soak: {} s over {}, {WINDOW} operations in flight, seed {}, driver pid {}, peer pid {}",
        o.seconds,
        side.domain.provider(),
        o.seed,
        std::process::id(),
        peer.child.id()
    );
    let mut d = Driver {
        side,
        peer: addr,
        rkey,
        rng: Rng::new(o.seed),
        seq: 0,
        slots: vec![Slot::Idle; WINDOW],
        bufs: (0..WINDOW)
            .map(|_| (Some(touched(MAX_MSG)), Some(touched(MAX_MSG))))
            .collect(),
        tally: Tally::default(),
    };
    for slot in 0..WINDOW {
        d.start(slot)?;
    }
    let pids = [std::process::id(), peer.child.id()];
    let start = Instant::now();
    let end = start + Duration::from_secs(o.seconds);
    // Memory is compared from a baseline taken once the run has warmed up.
    let warm = Duration::from_secs((o.seconds / 5).clamp(1, 60));
    let mut next_sample = start + Duration::from_secs(o.every);
    let mut w = Watch {
        base: None,
        high: [0; 2],
        last: [Usage::default(); 2],
    };
    // Sample intervals in which no operation finished.
    let (mut stalls, mut ops_before) = (0u32, 0u64);
    let mut done = vec![Completion::EMPTY; 64];
    let mut polls = 0u32;
    loop {
        d.step(&mut done, true)?;
        polls = polls.wrapping_add(1);
        if !polls.is_multiple_of(256) {
            continue;
        }
        let now = Instant::now();
        if now >= next_sample || now >= end {
            next_sample += Duration::from_secs(o.every);
            w.last = [usage(pids[0])?, usage(pids[1])?];
            let t = now - start;
            stalls += u32::from(d.tally.ops == ops_before);
            ops_before = d.tally.ops;
            if w.base.is_none() && t >= warm {
                w.base = Some(w.last);
            }
            if w.base.is_some() {
                for i in 0..2 {
                    w.high[i] = w.high[i].max(w.last[i].rss);
                }
            }
            println!(
                "t={:.0}s ops={} MiB={:.0} ops/s={:.0} rss_kib={}/{} fds={}/{}",
                t.as_secs_f64(),
                d.tally.ops,
                d.tally.bytes as f64 / (1 << 20) as f64,
                d.tally.ops as f64 / t.as_secs_f64(),
                w.last[0].rss >> 10,
                w.last[1].rss >> 10,
                w.last[0].fds,
                w.last[1].fds
            );
        }
        if now >= end {
            break;
        }
    }
    let drained = Instant::now() + Duration::from_secs(30);
    while d.step(&mut done, false)? > 0 {
        if Instant::now() > drained {
            return Err("operations still in flight 30 s after the end".into());
        }
    }
    peer.say("stop")?;
    let counts = peer.line("counts")?;
    let t = &d.tally;
    let mine = format!(
        "echoes={} injects={} writedata={} datasum={} errors=0",
        t.echoes, t.injects, t.writedata, t.datasum
    );
    let mut why = Vec::new();
    if counts != mine {
        why.push(format!("the peer counted {counts}, the driver {mine}"));
    }
    if stalls > 0 {
        why.push(format!("no operation finished in {stalls} sample interval(s)"));
    }
    let base = w.base.unwrap_or(w.last);
    for (i, who) in ["driver", "peer"].iter().enumerate() {
        let grew = w.high[i].saturating_sub(base[i].rss);
        if grew > rss_slack(base[i].rss) {
            why.push(format!("{who} memory grew {} KiB after the baseline", grew >> 10));
        }
        if w.last[i].fds != base[i].fds {
            why.push(format!(
                "{who} descriptors went from {} to {}",
                base[i].fds, w.last[i].fds
            ));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "xfer-soak: {} ops={} MiB={:.0} ops/s={:.0} errors=0 rss_kib_base={}/{} rss_kib_high={}/{} fds={}/{} {}",
        if why.is_empty() { "PASS" } else { "FAIL" },
        t.ops,
        t.bytes as f64 / (1 << 20) as f64,
        t.ops as f64 / secs,
        base[0].rss >> 10,
        base[1].rss >> 10,
        w.high[0] >> 10,
        w.high[1] >> 10,
        w.last[0].fds,
        w.last[1].fds,
        why.join("; ")
    );
    let status = peer.child.wait().map_err(|e| e.to_string())?;
    if !status.success() {
        println!("xfer-soak: FAIL peer exited with {status}");
        return Ok(false);
    }
    Ok(why.is_empty())
}

fn main() {
    #[cfg(feature = "logging")]
    xfer::init_logging();
    if std::env::args().nth(1).as_deref() == Some("peer") {
        if let Err(e) = peer::run() {
            eprintln!("xfer-soak peer: {e}");
            std::process::exit(1);
        }
        return;
    }
    let code = match Options::parse() {
        Err(e) => {
            eprintln!("xfer-soak: {e}");
            2
        }
        Ok(o) => match run(&o) {
            Ok(true) => 0,
            Ok(false) => 1,
            Err(e) => {
                println!("xfer-soak: FAIL {e}");
                1
            }
        },
    };
    std::process::exit(code);
}
