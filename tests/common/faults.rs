//! Shared by the network-fault tests (tests/tcp_faults.rs, tests/verbs_faults.rs):
//! endpoints in worker processes driven over stdin, checksummed messages,
//! RMA with checked contents, and the parent's view of what each worker
//! reported. A worker is the test binary re-executed (`--exact worker
//! --ignored`, with `XFER_FAULTS_WORKER=1`), optionally behind a prefix such
//! as `ip netns exec NS`; it opens the provider named by `XFER_PROVIDER`.

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use xfer::SendOp;
use xfer::{Access, Completion, CqAttr, DomainAttr, EndpointAttr, Error, Flags, MemoryRegion, PeerAddr, RemoteKey};

use super::hex;

// ---------------------------------------------------------------------------
// Messages: payloads the receiver regenerates and compares byte for byte,
// plus an FNV-1a checksum carried as immediate data.

/// The message sizes, by sequence number modulo their count. The parent
/// passes its list to the workers in `XFER_FAULTS_SIZES`.
pub fn size_of(sizes: &[usize], seq: u32) -> usize {
    sizes[seq as usize % sizes.len()]
}

/// The payload of message `seq` of `stream` (xorshift bytes seeded by both);
/// RMA contents use it too, with their own seeds.
pub fn payload(stream: u32, seq: u32, len: usize) -> Vec<u8> {
    let mut x = tag_of(stream, seq) ^ 0x9e37_79b9_7f4a_7c15;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let take = (len - out.len()).min(8);
        out.extend_from_slice(&x.to_le_bytes()[..take]);
    }
    out
}

pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

pub fn tag_of(stream: u32, seq: u32) -> u64 {
    (u64::from(stream) << 32) | u64::from(seq)
}

/// Receives posted for this stream match any tag: they catch whatever arrives.
pub const ANY_STREAM: u32 = u32::MAX;

/// Stream whose payloads seed RMA contents (`payload(RMA_STREAM, seed, len)`).
const RMA_STREAM: u32 = 0x524d_4100;

const SEND_CTX: u64 = 1 << 63;
const RMA_CTX: u64 = 1 << 62;

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Descriptors open in this process.
fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

// ---------------------------------------------------------------------------
// The worker: one endpoint in one process, driven over stdin.

/// Prints one protocol line for the parent.
fn say(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "@@ {line}");
    let _ = out.flush();
}

fn describe(e: &Error) -> String {
    format!("{e:?} ({e})")
}

/// The endpoint side of the tests; each test binary calls it from an
/// ignored `worker` test. Does nothing unless a test spawned it
/// (`XFER_FAULTS_WORKER=1`), so `cargo test -- --ignored` does not hang on it.
///
/// Commands (one a line on stdin) and what they print:
/// - `peer HEX`: inserts a name, prints `PEER <handle>`.
/// - `send PEER STREAM FIRST N`: tagged sends of messages FIRST..FIRST+N, each
///   reported as `S <stream> <seq> ok` or `S <stream> <seq> err <why>`.
/// - `recv SRC STREAM N`: N tagged receives (SRC a handle or `any`; STREAM
///   `any` matches every tag); each reported as `R <stream> <idx> ok <stream>
///   <seq> <len> good|bad` or `R <stream> <idx> err <why>`, `idx` counting the
///   receives posted for that stream.
/// - `mr ID LEN SEED`: registers LEN bytes of `payload(RMA_STREAM, SEED)` for
///   remote read and write; prints `MR <id> <packed remote key>`.
/// - `check ID SEED`: prints `CHECK <id> good|bad`: whether region ID holds
///   `payload(RMA_STREAM, SEED)`.
/// - `write PEER KEY SEED ID` / `read PEER KEY SEED ID`: RMA of the whole
///   remote region KEY (packed, hex): writes `payload(RMA_STREAM, SEED)`, or
///   reads it and compares with that payload; reported as `W <id> ok`,
///   `D <id> ok good|bad`, or `W|D <id> err <why>`.
/// - `close`: closes the endpoint (its operations end as cancelled, and are
///   reported), then its regions, AV, CQ and domain; prints `CLOSED <fds>`.
/// - `counters`: prints `COUNTERS name=value ...`, the endpoint's counters
///   (the engine's and the transport's: what is outstanding, what waits for
///   credit), or `COUNTERS closed`.
/// - `exit`, or the end of stdin: returns.
pub fn worker() {
    if std::env::var_os("XFER_FAULTS_WORKER").is_none() {
        return;
    }
    xfer::init_logging();
    let sizes: Vec<usize> = std::env::var("XFER_FAULTS_SIZES")
        .expect("XFER_FAULTS_SIZES")
        .split(',')
        .map(|s| s.parse().expect("size"))
        .collect();
    let max_size = sizes.iter().copied().max().unwrap_or(0);
    // Libraries keep some descriptors for the life of the process once a
    // first domain opened them (librdmacm: one per verbs device): open and
    // close one first, so the count compared at `close` is xfer's own.
    {
        let d = xfer::open(&DomainAttr::from_env()).expect("open domain");
        let cq = d.cq(&CqAttr::default()).expect("open cq");
        let av = d.av().expect("open av");
        drop(d.endpoint(&cq, &av, &EndpointAttr::from_env()).expect("open endpoint"));
    }
    let fds_before = fd_count();
    let domain = xfer::open(&DomainAttr::from_env()).expect("open domain");
    let cq = domain.cq(&CqAttr::default()).expect("open cq");
    let av = domain.av().expect("open av");
    let mut ep = Some(
        domain
            .endpoint(&cq, &av, &EndpointAttr::from_env())
            .expect("open endpoint"),
    );
    let name = ep.as_ref().map(|e| hex(e.name().as_bytes())).unwrap_or_default();
    say(format_args!("READY {name} {fds_before} {}", domain.provider()));

    let (tx, commands) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut st = WorkerState::default();
    let mut regions: BTreeMap<u32, MemoryRegion> = BTreeMap::new();
    let mut out = vec![Completion::EMPTY; 64];
    let mut cq = Some(cq);
    let mut av = Some(av);
    let mut domain = Some(domain);
    loop {
        loop {
            let line = match commands.try_recv() {
                Ok(line) => line,
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => return,
            };
            let words: Vec<&str> = line.split_whitespace().collect();
            let num = |i: usize| -> u64 { words[i].parse().expect("number") };
            match words.as_slice() {
                ["peer", name] => {
                    let bytes = unhex(name).expect("hex name");
                    let av = av.as_ref().expect("av open");
                    say(format_args!("PEER {}", av.insert(&bytes).expect("av insert").0));
                }
                ["send", peer, _, _, _] => {
                    let ep = ep.as_ref().expect("endpoint open");
                    let peer = PeerAddr(peer.parse().expect("peer"));
                    let (stream, first, n) = (num(2) as u32, num(3) as u32, num(4) as u32);
                    for seq in first..first + n {
                        let buf = payload(stream, seq, size_of(&sizes, seq));
                        let op = SendOp {
                            peer,
                            tag: Some(tag_of(stream, seq)),
                            data: Some(fnv1a(&buf)),
                            buf: buf.into(),
                            context: SEND_CTX | tag_of(stream, seq),
                            completion: true,
                            level: Default::default(),
                        };
                        if let Err(r) = ep.post_send(op) {
                            say(format_args!("S {stream} {seq} err refused: {}", describe(&r.error)));
                        }
                    }
                }
                ["recv", src, stream, n] => {
                    let ep = ep.as_ref().expect("endpoint open");
                    let src = match *src {
                        "any" => PeerAddr::UNSPEC,
                        h => PeerAddr(h.parse().expect("peer")),
                    };
                    let stream: u32 = match *stream {
                        "any" => ANY_STREAM,
                        s => s.parse().expect("stream"),
                    };
                    let (tag, ignore) = if stream == ANY_STREAM {
                        (0, u64::MAX)
                    } else {
                        (tag_of(stream, 0), 0xffff_ffff)
                    };
                    for _ in 0..n.parse::<u32>().expect("count") {
                        let idx = st.posted.entry(stream).or_insert(0);
                        let context = st.recvs.len() as u64;
                        st.recvs.push((stream, *idx));
                        *idx += 1;
                        if let Err(r) = ep.trecv(src, tag, ignore, vec![0; max_size], context) {
                            let (stream, idx) = st.recvs[context as usize];
                            say(format_args!("R {stream} {idx} err refused: {}", describe(&r.error)));
                        }
                    }
                }
                ["mr", _, _, _] => {
                    let (id, len, seed) = (num(1) as u32, num(2) as usize, num(3) as u32);
                    let d = domain.as_ref().expect("domain open");
                    let mr = d
                        .register(
                            payload(RMA_STREAM, seed, len),
                            Access::REMOTE_READ | Access::REMOTE_WRITE,
                        )
                        .map_err(|r| r.error)
                        .expect("register");
                    say(format_args!("MR {id} {}", hex(&mr.pack_rkey())));
                    regions.insert(id, mr);
                }
                ["check", _, _] => {
                    let (id, seed) = (num(1) as u32, num(2) as u32);
                    let mr = regions.get(&id).expect("region");
                    let got = mr.to_vec().expect("region contents");
                    let good = got == payload(RMA_STREAM, seed, got.len());
                    say(format_args!("CHECK {id} {}", if good { "good" } else { "bad" }));
                }
                [op @ ("write" | "read"), peer, key, _, _] => {
                    let ep = ep.as_ref().expect("endpoint open");
                    let peer = PeerAddr(peer.parse().expect("peer"));
                    let key = RemoteKey::unpack(&unhex(key).expect("hex key")).expect("remote key");
                    let (seed, id) = (num(3) as u32, num(4) as u32);
                    let len = key.len() as usize;
                    let context = RMA_CTX | u64::from(id);
                    let posted = if *op == "write" {
                        st.rma.insert(id, (true, seed));
                        ep.write(peer, payload(RMA_STREAM, seed, len), &key, 0, context)
                    } else {
                        st.rma.insert(id, (false, seed));
                        ep.read(peer, vec![0; len], &key, 0, context)
                    };
                    if let Err(r) = posted {
                        let w = if *op == "write" { "W" } else { "D" };
                        say(format_args!("{w} {id} err refused: {}", describe(&r.error)));
                    }
                }
                ["close"] => {
                    drop(ep.take());
                    let cq_ref = cq.as_ref().expect("cq open");
                    while let Ok(n) = cq_ref.poll(&mut out) {
                        if n == 0 {
                            break;
                        }
                        for c in out.iter_mut().take(n) {
                            st.report(std::mem::replace(c, Completion::EMPTY), &sizes);
                        }
                    }
                    regions.clear();
                    drop(av.take());
                    drop(cq.take());
                    drop(domain.take());
                    say(format_args!("CLOSED {}", fd_count()));
                }
                ["counters"] => {
                    let counters = match ep.as_ref().map(|e| e.counters()) {
                        Some(Ok(v)) => v.iter().map(|(k, n)| format!("{k}={n}")).collect::<Vec<_>>().join(" "),
                        Some(Err(e)) => format!("error {}", describe(&e)),
                        None => "closed".into(),
                    };
                    say(format_args!("COUNTERS {counters}"));
                }
                ["exit"] => return,
                _ => panic!("worker: unknown command {line:?}"),
            }
        }
        let Some(cq) = cq.as_ref() else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        let n = match cq.wait(&mut out, Some(Duration::from_millis(20))) {
            Ok(n) => n,
            Err(Error::TimedOut) => 0,
            Err(e) => panic!("cq wait: {e}"),
        };
        for c in out.iter_mut().take(n) {
            st.report(std::mem::replace(c, Completion::EMPTY), &sizes);
        }
    }
}

/// What a worker's completion contexts stand for.
#[derive(Default)]
struct WorkerState {
    /// Receives posted per stream.
    posted: BTreeMap<u32, u32>,
    /// (stream, idx) of each receive, by context.
    recvs: Vec<(u32, u32)>,
    /// RMA operations by id: (is a write, seed).
    rma: BTreeMap<u32, (bool, u32)>,
}

impl WorkerState {
    /// Prints a completion as an `S`, `R`, `W` or `D` line, checking
    /// received payloads.
    fn report(&self, c: Completion, sizes: &[usize]) {
        if c.context & SEND_CTX != 0 {
            let (stream, seq) = (((c.context >> 32) & 0x7fff_ffff) as u32, c.context as u32);
            match &c.result {
                Ok(()) => say(format_args!("S {stream} {seq} ok")),
                Err(e) => say(format_args!("S {stream} {seq} err {}", describe(e))),
            }
            return;
        }
        if c.context & RMA_CTX != 0 {
            let id = c.context as u32;
            let Some(&(write, seed)) = self.rma.get(&id) else {
                say(format_args!("BAD completion with unknown context {}", c.context));
                return;
            };
            let w = if write { "W" } else { "D" };
            match (&c.result, write) {
                (Err(e), _) => say(format_args!("{w} {id} err {}", describe(e))),
                (Ok(()), true) => say(format_args!("W {id} ok")),
                (Ok(()), false) => {
                    let buf = c.buf.as_deref().unwrap_or_default();
                    let good = buf == payload(RMA_STREAM, seed, buf.len()).as_slice();
                    say(format_args!("D {id} ok {}", if good { "good" } else { "bad" }));
                }
            }
            return;
        }
        let Some(&(stream, idx)) = self.recvs.get(c.context as usize) else {
            say(format_args!("BAD completion with unknown context {}", c.context));
            return;
        };
        if let Err(e) = &c.result {
            say(format_args!("R {stream} {idx} err {}", describe(e)));
            return;
        }
        let (got_stream, seq) = ((c.tag >> 32) as u32, c.tag as u32);
        let want = payload(got_stream, seq, size_of(sizes, seq));
        let bytes = c.buf.as_deref().and_then(|b| b.get(..c.len)).unwrap_or_default();
        let good = c.len == want.len()
            && bytes == want.as_slice()
            && c.flags.contains(Flags::REMOTE_CQ_DATA)
            && c.data == fnv1a(bytes);
        if !good {
            let at = bytes.iter().zip(&want).position(|(x, y)| x != y);
            eprintln!(
                "bad message {got_stream}/{seq}: len {} (want {}), first wrong byte at {at:?}, flags {:?}, data {:#x} (checksum {:#x})",
                c.len,
                want.len(),
                c.flags,
                c.data,
                fnv1a(bytes)
            );
        }
        let verdict = if good { "good" } else { "bad" };
        say(format_args!(
            "R {stream} {idx} ok {got_stream} {seq} {} {verdict}",
            c.len
        ));
    }
}

// ---------------------------------------------------------------------------
// The parent side.

/// Whether this process runs as root (network set-up needs it).
pub fn euid() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("?")
        .to_string()
}

/// Whether `XFER_FAULTS_REQUIRE=1`: a case that cannot run fails instead of skipping.
pub fn required() -> bool {
    env_flag("XFER_FAULTS_REQUIRE")
}

pub fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == "1")
}

/// Prints how long a case took, when it ends without panicking.
pub struct Took(pub &'static str, pub Instant);

impl Drop for Took {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            println!("{}: {:.1?} in all", self.0, self.1.elapsed());
        }
    }
}

/// Says that a case did not run, and why, where a passing run shows it:
/// written to stderr directly, past the test harness's output capture.
pub fn skipped(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Runs a command, failing the test with its output if it fails.
pub fn run(args: &[&str]) {
    if let Err(e) = try_run(args) {
        panic!("{e}");
    }
}

/// Runs a command; its stdout, or what failed.
pub fn try_run(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`{}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The first number after `word` in `text` (`dropped 12,` gives 12).
pub fn number_after(text: &str, word: &str) -> Option<u64> {
    let rest = text.split(word).nth(1)?;
    rest.trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// What a worker reported about one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A send or RMA write completed successfully.
    Sent,
    /// A receive completed: the message's stream and seq, and whether its
    /// length, bytes and checksum were right. An RMA read: stream and seq
    /// 0, and whether the bytes were right.
    Got { stream: u32, seq: u32, good: bool },
    /// The operation failed; the worker's description of the error.
    Failed(String),
}

/// One worker process and everything it reported so far.
pub struct Worker {
    pub label: String,
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<(Instant, String)>,
    pub name: String,
    /// The provider the worker's domain opened.
    pub provider: String,
    fds_before: usize,
    /// Sends by (stream, seq), receives by (stream, idx), RMA by id.
    pub sends: BTreeMap<(u32, u32), Outcome>,
    pub recvs: BTreeMap<(u32, u32), Outcome>,
    pub rma: BTreeMap<u32, Outcome>,
    /// When the latest completion arrived.
    pub last: Option<Instant>,
    /// Other lines (answers to commands), oldest first.
    other: VecDeque<String>,
    /// Completions reported twice, or lines that make no sense.
    pub problems: Vec<String>,
}

impl Worker {
    /// Starts a worker: `prefix` (e.g. `ip netns exec NS`, or nothing) and
    /// this test executable, with `sizes` as its message sizes and extra
    /// environment (the provider and its settings).
    pub fn spawn(label: &str, prefix: &[&str], sizes: &[usize], env: &[(&str, &str)]) -> Worker {
        let exe = std::env::current_exe().expect("test executable");
        let mut cmd = match prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        let sizes: Vec<String> = sizes.iter().map(usize::to_string).collect();
        cmd.args(["--exact", "worker", "--ignored", "--nocapture", "--test-threads=1"])
            .env("XFER_FAULTS_WORKER", "1")
            .env("XFER_FAULTS_SIZES", sizes.join(","))
            .env("XFER_LOG", std::env::var("XFER_LOG").unwrap_or_else(|_| "error".into()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn worker");
        let stdin = child.stdin.take().expect("worker stdin");
        let stdout = child.stdout.take().expect("worker stdout");
        let stderr = child.stderr.take().expect("worker stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // The harness may print "test worker ... " before it on the same line.
                if let Some((_, msg)) = line.split_once("@@ ") {
                    if tx.send((Instant::now(), msg.to_string())).is_err() {
                        break;
                    }
                }
            }
        });
        let tag = label.to_string();
        // Spawned from the test's thread, so its output is captured with the test's.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                eprintln!("[{tag}] {line}");
            }
        });
        let mut w = Worker {
            label: label.to_string(),
            child,
            stdin,
            lines,
            name: String::new(),
            provider: String::new(),
            fds_before: 0,
            sends: BTreeMap::new(),
            recvs: BTreeMap::new(),
            rma: BTreeMap::new(),
            last: None,
            other: VecDeque::new(),
            problems: Vec::new(),
        };
        let ready = w.answer("READY", Duration::from_secs(60));
        let mut parts = ready.split_whitespace().skip(1);
        w.name = parts.next().expect("name").to_string();
        w.fds_before = parts.next().and_then(|n| n.parse().ok()).expect("fd count");
        w.provider = parts.next().unwrap_or_default().to_string();
        w
    }

    pub fn cmd(&mut self, line: &str) {
        if let Err(e) = writeln!(self.stdin, "{line}").and_then(|()| self.stdin.flush()) {
            panic!("{}: writing {line:?}: {e}", self.label);
        }
    }

    /// Takes in what the worker reported so far; false once it exited.
    pub fn pump(&mut self) -> bool {
        loop {
            let (at, line) = match self.lines.try_recv() {
                Ok(x) => x,
                Err(mpsc::TryRecvError::Empty) => return true,
                Err(mpsc::TryRecvError::Disconnected) => return false,
            };
            let w: Vec<&str> = line.split_whitespace().collect();
            let num = |i: usize| w.get(i).and_then(|s| s.parse::<u32>().ok());
            let failed = || Outcome::Failed(w.get(4..).unwrap_or_default().join(" "));
            let rma_failed = || Outcome::Failed(w.get(3..).unwrap_or_default().join(" "));
            let (map, key, outcome) = match (w.first().copied(), num(1), num(2), w.get(3).copied()) {
                (Some("S"), Some(stream), Some(seq), Some("ok")) => (&mut self.sends, (stream, seq), Outcome::Sent),
                (Some("S"), Some(stream), Some(seq), Some("err")) => (&mut self.sends, (stream, seq), failed()),
                (Some("R"), Some(stream), Some(idx), Some("ok")) => {
                    let (Some(s), Some(seq)) = (num(4), num(5)) else {
                        self.problems.push(format!("unparsable: {line}"));
                        continue;
                    };
                    let good = w.get(7) == Some(&"good");
                    (&mut self.recvs, (stream, idx), Outcome::Got { stream: s, seq, good })
                }
                (Some("R"), Some(stream), Some(idx), Some("err")) => (&mut self.recvs, (stream, idx), failed()),
                (Some(k @ ("W" | "D")), Some(id), _, _) => {
                    let outcome = match (k, w.get(2).copied()) {
                        ("W", Some("ok")) => Outcome::Sent,
                        ("D", Some("ok")) => Outcome::Got {
                            stream: 0,
                            seq: 0,
                            good: w.get(3) == Some(&"good"),
                        },
                        _ => rma_failed(),
                    };
                    self.last = Some(at);
                    if let Some(before) = self.rma.insert(id, outcome) {
                        self.problems
                            .push(format!("{}: completed twice: {line} (before: {before:?})", self.label));
                    }
                    continue;
                }
                _ => {
                    self.other.push_back(line);
                    continue;
                }
            };
            self.last = Some(at);
            if let Some(before) = map.insert(key, outcome) {
                self.problems
                    .push(format!("{}: completed twice: {line} (before: {before:?})", self.label));
            }
        }
    }

    /// Waits for the next line that starts with `word` and returns it.
    pub fn answer(&mut self, word: &str, timeout: Duration) -> String {
        match self.try_answer(word, timeout) {
            Ok(line) => line,
            Err(why) => panic!("{}: {why}", self.label),
        }
    }

    /// [`answer`](Self::answer), saying why there is none instead of failing.
    fn try_answer(&mut self, word: &str, timeout: Duration) -> Result<String, String> {
        let start = Instant::now();
        loop {
            let alive = self.pump();
            if let Some(i) = self
                .other
                .iter()
                .position(|l| l.split_whitespace().next() == Some(word))
            {
                return Ok(self.other.remove(i).unwrap_or_default());
            }
            if !alive {
                return Err(format!("exited before answering {word}"));
            }
            if start.elapsed() >= timeout {
                return Err(format!("no {word} within {timeout:?}"));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The worker's endpoint counters (`name=value ...`), or why it gave none
    /// (it exited, or its loop is stuck): for a timed-out test's message.
    pub fn counters(&mut self) -> String {
        if let Err(e) = writeln!(self.stdin, "counters").and_then(|()| self.stdin.flush()) {
            return format!("(no counters: writing the command: {e})");
        }
        match self.try_answer("COUNTERS", Duration::from_secs(10)) {
            Ok(line) => line.trim_start_matches("COUNTERS").trim().to_string(),
            Err(why) => format!("(no counters: {why})"),
        }
    }

    /// Inserts `other`'s name; returns the handle.
    pub fn peer(&mut self, other_name: &str) -> u64 {
        self.cmd(&format!("peer {other_name}"));
        let line = self.answer("PEER", Duration::from_secs(30));
        line.split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("handle")
    }

    /// Registers region `id` of `len` bytes holding the RMA payload of
    /// `seed`; returns its packed remote key, in hex.
    pub fn region(&mut self, id: u32, len: usize, seed: u32) -> String {
        self.cmd(&format!("mr {id} {len} {seed}"));
        let line = self.answer("MR", Duration::from_secs(30));
        line.split_whitespace().nth(2).expect("remote key").to_string()
    }

    /// Whether region `id` holds the RMA payload of `seed`.
    pub fn region_holds(&mut self, id: u32, seed: u32) -> bool {
        self.cmd(&format!("check {id} {seed}"));
        let line = self.answer("CHECK", Duration::from_secs(30));
        line.ends_with(" good")
    }

    pub fn sends_done(&self, stream: u32) -> usize {
        self.sends.keys().filter(|k| k.0 == stream).count()
    }

    pub fn recvs_done(&self, stream: u32) -> usize {
        self.recvs.keys().filter(|k| k.0 == stream).count()
    }

    pub fn recvs_ok(&self, stream: u32) -> usize {
        self.recvs
            .iter()
            .filter(|(k, o)| k.0 == stream && matches!(o, Outcome::Got { .. }))
            .count()
    }

    /// Every successful receive of `stream` got the message with its own
    /// index as seq (in order), of that stream, intact.
    pub fn check_received_in_order(&self, stream: u32) {
        for (&(s, idx), o) in &self.recvs {
            if s != stream {
                continue;
            }
            if let Outcome::Got { stream: got, seq, good } = o {
                assert!(
                    *good,
                    "{}: receive {idx} of stream {stream} got a corrupt message",
                    self.label
                );
                assert_eq!(
                    (*got, *seq),
                    (stream, idx),
                    "{}: receive {idx} of stream {stream} got message {got}/{seq}: out of order",
                    self.label
                );
            }
        }
    }

    /// Failed operations, as (what, why).
    pub fn failures(&self) -> Vec<String> {
        let sends = self.sends.iter().map(|(k, o)| (format!("send {}/{}", k.0, k.1), o));
        let recvs = self.recvs.iter().map(|(k, o)| (format!("recv {}/{}", k.0, k.1), o));
        let rma = self.rma.iter().map(|(k, o)| (format!("rma {k}"), o));
        sends
            .chain(recvs)
            .chain(rma)
            .filter_map(|(what, o)| match o {
                Outcome::Failed(why) => Some(format!("{what}: {why}")),
                _ => None,
            })
            .collect()
    }

    /// Closes the endpoint and everything else the worker opened; checks
    /// that it has the descriptors it had before and that nothing was
    /// reported twice. What the close cancelled is in `sends`/`recvs`.
    pub fn close(&mut self) {
        self.cmd("close");
        let line = self.answer("CLOSED", Duration::from_secs(60));
        let after: usize = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("fd count");
        assert_eq!(
            after, self.fds_before,
            "{}: descriptors open before the domain was opened and after everything was closed",
            self.label
        );
        assert!(self.problems.is_empty(), "{}: {:?}", self.label, self.problems);
    }

    /// SIGKILL; returns when the process is gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "exit");
        let _ = self.stdin.flush();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(2) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
    }
}

/// Takes in the workers' reports until `done` holds; fails the test, naming
/// `what`, after `timeout`. Returns when `done` first held.
pub fn wait_until(ws: &mut [&mut Worker], timeout: Duration, what: &str, mut done: impl FnMut(&[&mut Worker]) -> bool) {
    let start = Instant::now();
    loop {
        for w in ws.iter_mut() {
            w.pump();
            assert!(w.problems.is_empty(), "{}: {:?}", w.label, w.problems);
        }
        if done(ws) {
            return;
        }
        if start.elapsed() > timeout {
            let state: Vec<String> = ws
                .iter_mut()
                .map(|w| {
                    let counters = w.counters();
                    format!(
                        "{}: {} sends, {} receives, {} RMA done {:?}, failures {:?}, sends {:?}, receives {:?}, counters: {counters}",
                        w.label,
                        w.sends.len(),
                        w.recvs.len(),
                        w.rma.len(),
                        w.rma.keys().collect::<Vec<_>>(),
                        w.failures(),
                        w.sends.keys().collect::<Vec<_>>(),
                        w.recvs.keys().collect::<Vec<_>>()
                    )
                })
                .collect();
            panic!("timed out after {timeout:?} waiting for {what}:\n{}", state.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Lets `ws` run for `d`, taking in what they report.
pub fn settle(ws: &mut [&mut Worker], d: Duration) {
    let start = Instant::now();
    while start.elapsed() < d {
        for w in ws.iter_mut() {
            w.pump();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn env_u32(name: &str, default: u32) -> u32 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

pub fn env_secs(name: &str, default: u64) -> Duration {
    Duration::from_secs(std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default))
}

/// A and B each post `n` receives directed at the other and send `n`
/// messages to the other, all at once: A sends stream `sa` to its handle
/// `a_to_b` for B, B sends stream `sb` to its handle `b_to_a` for A.
pub fn exchange(a: &mut Worker, a_to_b: u64, sa: u32, b: &mut Worker, b_to_a: u64, sb: u32, n: u32) {
    a.cmd(&format!("recv {a_to_b} {sb} {n}"));
    b.cmd(&format!("recv {b_to_a} {sa} {n}"));
    a.cmd(&format!("send {a_to_b} {sa} 0 {n}"));
    b.cmd(&format!("send {b_to_a} {sb} 0 {n}"));
}

/// Waits until both sides finished all `n` sends and receives of an exchange.
pub fn exchange_done(a: &mut Worker, sa: u32, b: &mut Worker, sb: u32, n: u32, timeout: Duration, what: &str) {
    let n = n as usize;
    wait_until(&mut [a, b], timeout, what, |ws| {
        ws[0].sends_done(sa) == n && ws[0].recvs_done(sb) == n && ws[1].sends_done(sb) == n && ws[1].recvs_done(sa) == n
    });
}

/// Both sides sent and received all `n` messages intact, in order.
pub fn assert_exchange_ok(a: &Worker, sa: u32, b: &Worker, sb: u32, n: u32) {
    for (w, stream) in [(a, sa), (b, sb)] {
        let failed = w.failures();
        assert!(failed.is_empty(), "{}: operations failed: {failed:?}", w.label);
        assert_eq!(w.sends_done(stream), n as usize, "{}: sends", w.label);
    }
    for (w, stream) in [(a, sb), (b, sa)] {
        assert_eq!(w.recvs_ok(stream), n as usize, "{}: receives", w.label);
        w.check_received_in_order(stream);
    }
}
