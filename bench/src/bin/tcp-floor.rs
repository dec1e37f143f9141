//! `tcp-floor`: the raw busy-polling TCP ping-pong and streaming floor.
//!
//! This is the number any TCP transport on a machine is compared against: one
//! TCP connection with `TCP_NODELAY`, both sockets non-blocking, and a data
//! path made of nothing but `send(MSG_DONTWAIT)` / `recv(MSG_DONTWAIT)` calls
//! spinning on `EAGAIN` (no epoll, no blocking, no framing, no copies beyond
//! the kernel's own). A transport built on TCP cannot beat it; how close it
//! gets is the measure of its own overhead.
//!
//! Two tests:
//!
//! * `lat`: the client sends `size` bytes, the server echoes `size` bytes
//!   back; each iteration is timed with [`Instant`] and half of the round trip
//!   is one sample. Reported: average, p50, p99 and max in microseconds.
//! * `bw`: the client streams `iters` messages of `size` bytes (one `send`
//!   per message) in windows of `window` messages; the server sends a one-byte
//!   ack after each window, and the client waits for it before sending the
//!   window after next (two windows in flight, so the stream never drains). The server drains the stream with large reads. Reported:
//!   MiB/s (1 MiB = 1048576 bytes) and messages per second.
//!
//! `--think NS` (latency test) makes the side given it busy-wait NS
//! nanoseconds between receiving a message and sending the next: the user
//! space a transport spends per turnaround, added to the floor on purpose, to
//! show how the floor's latency answers to it (docs/PERFORMANCE.md, "What
//! bounds the TCP latency ratio"). `--frames N` makes it wait for each
//! message from N nested function calls deeper: a library's call depth
//! between its caller's loop and the `recv`, whose returns after the system
//! call are what that costs (docs/PERFORMANCE.md, "Call depth across the
//! `recv`").
//!
//! ```text
//! tcp-floor [--test lat|bw] [--sizes 8,64,1024] [--iters N] [--warmup N]
//!           [--window N] [--think NS] [--frames N] [--json] server [--port P] [--bind ADDR]
//! tcp-floor [same options] client HOST:PORT
//! tcp-floor [same options] local
//! ```
//!
//! The client sends every size's test parameters in a small header first, so
//! the server needs no test options; it serves one client and exits. The
//! server prints `listening on PORT` (flushed) once it accepts connections.

use std::fmt;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

// Latency samples timed as xfer-perf times its own, so that the two stay
// comparable (the time-stamp counter where it is invariant).
#[allow(dead_code)]
#[path = "../../../src/bin/xfer-perf/clock.rs"]
mod clock;

/// Sizes run when `--sizes` is not given.
const DEFAULT_SIZES: &[usize] = &[8, 64, 256, 1024, 4096, 65536, 1_048_576];
/// Windows the bandwidth test's client may have sent and not seen
/// acknowledged (xfer-perf streams the same way): the stream never drains
/// between windows, and the server can still size its work by window.
const WINDOWS_IN_FLIGHT: u64 = 2;
/// Default window of the bandwidth test, in messages.
const DEFAULT_WINDOW: u64 = 64;
/// Largest message accepted, so a bad header cannot make the server allocate
/// without bound.
const MAX_SIZE: u64 = 1 << 30;
/// Magic number opening every test header ("XFTF" little endian).
const MAGIC: u32 = 0x4654_4658;
/// Deepest `--frames`.
const MAX_FRAMES: u32 = 64;
/// Length of the encoded [`Header`].
const HEADER_LEN: usize = 40;
/// Size of the buffer the bandwidth receiver drains the stream into (at least).
const DRAIN_BUF: usize = 256 * 1024;
/// 1 MiB.
const MIB: f64 = 1_048_576.0;

/// Which test to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Test {
    /// Ping-pong latency.
    Lat,
    /// Windowed streaming bandwidth.
    Bw,
}

impl Test {
    /// Code used in the wire header (0 is reserved for "end of session").
    fn code(self) -> u32 {
        match self {
            Test::Lat => 1,
            Test::Bw => 2,
        }
    }

    /// Name used on the command line and in the JSON output.
    fn name(self) -> &'static str {
        match self {
            Test::Lat => "lat",
            Test::Bw => "bw",
        }
    }
}

/// What to do once the options are parsed.
#[derive(Debug)]
enum Mode {
    /// Wait for one client on `bind:port`, serve it, exit.
    Server {
        /// Address to bind (127.0.0.1 unless `--bind` says otherwise).
        bind: String,
        /// Port to listen on; 0 picks an ephemeral port.
        port: u16,
    },
    /// Connect to `HOST:PORT` and drive the tests.
    Client(String),
    /// Server thread and client thread in one process, on 127.0.0.1.
    Local,
}

/// Parsed command line.
#[derive(Debug)]
struct Opts {
    /// The test to run.
    test: Test,
    /// Message sizes, in bytes.
    sizes: Vec<usize>,
    /// Iterations per size; `None` means the per-size default.
    iters: Option<u64>,
    /// Warm-up iterations per size; `None` means the per-size default.
    warmup: Option<u64>,
    /// Bandwidth-test window, in messages.
    window: u64,
    /// One JSON object per line instead of a table.
    json: bool,
    /// Latency test: what this side adds to the floor (`--think`, `--frames`).
    added: Added,
    /// Server, client or local.
    mode: Mode,
}

/// Parameters of one size's test, sent by the client before the test runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    /// [`Test::code`], or 0 to end the session.
    test: u32,
    /// Message size in bytes.
    size: u64,
    /// Timed iterations (lat) or messages (bw).
    iters: u64,
    /// Untimed iterations run first.
    warmup: u64,
    /// Messages per ack in the bandwidth test.
    window: u64,
}

impl Header {
    /// Little-endian wire encoding.
    fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.test.to_le_bytes());
        b[8..16].copy_from_slice(&self.size.to_le_bytes());
        b[16..24].copy_from_slice(&self.iters.to_le_bytes());
        b[24..32].copy_from_slice(&self.warmup.to_le_bytes());
        b[32..40].copy_from_slice(&self.window.to_le_bytes());
        b
    }

    /// Decodes and checks a header received from a client.
    fn decode(b: &[u8; HEADER_LEN]) -> io::Result<Header> {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        if u32_at(0) != MAGIC {
            return Err(invalid("bad header magic: is the peer a tcp-floor client?"));
        }
        let h = Header {
            test: u32_at(4),
            size: u64_at(8),
            iters: u64_at(16),
            warmup: u64_at(24),
            window: u64_at(32),
        };
        if h.test > 2 || (h.test != 0 && (h.size == 0 || h.size > MAX_SIZE || h.window == 0)) {
            return Err(invalid(format!("bad header {h:?}")));
        }
        Ok(h)
    }
}

/// Result of one latency run, in microseconds of half round trip.
#[derive(Clone, Copy, Debug, PartialEq)]
struct LatStats {
    /// Mean.
    avg: f64,
    /// Median (nearest rank).
    p50: f64,
    /// 99th percentile (nearest rank).
    p99: f64,
    /// Largest sample.
    max: f64,
}

/// Result of one bandwidth run.
#[derive(Clone, Copy, Debug, PartialEq)]
struct BwStats {
    /// Payload MiB per second (1 MiB = 1048576 bytes).
    mib_s: f64,
    /// Messages per second.
    msg_rate: f64,
}

/// Builds an `InvalidInput` error.
fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.into())
}

/// Command-line error, printed with the usage text.
#[derive(Debug)]
struct UsageError(String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Usage text.
const USAGE: &str = "\
usage:
  tcp-floor [options] server [--port P] [--bind ADDR]
  tcp-floor [options] client HOST:PORT
  tcp-floor [options] local
options:
  --test lat|bw      ping-pong latency or windowed streaming bandwidth (lat)
  --sizes LIST       comma-separated sizes, k/m suffixes allowed
                     (8,64,256,1024,4096,65536,1048576)
  --iters N          timed iterations per size (lat: 10000, scaled down from
                     64 KiB; bw: 100000 below 64 KiB, 1000 from 64 KiB)
  --warmup N         untimed iterations per size (iters/10, at most 1000)
  --window N         bw: messages per ack (64)
  --think NS         lat: busy-wait NS nanoseconds before each send of this
                     side (a transport's user-space work per turnaround) (0)
  --frames N         lat: wait for each message N nested (not inlined)
                     function calls deep, as a library would (0)
  --json             one JSON object per line per size
  --port P           server: port to listen on, 0 = ephemeral (0)
  --bind ADDR        server: address to bind (127.0.0.1)";

/// Parses a size such as `64`, `64k` or `1m` (binary multiples).
fn parse_size(s: &str) -> Result<usize, UsageError> {
    let s = s.trim();
    let (digits, mult) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1024),
        Some((i, 'm' | 'M')) => (&s[..i], 1024 * 1024),
        Some((i, 'g' | 'G')) => (&s[..i], 1024 * 1024 * 1024),
        _ => (s, 1),
    };
    let n: usize = digits.parse().map_err(|_| UsageError(format!("bad size {s:?}")))?;
    let n = n
        .checked_mul(mult)
        .filter(|&n| n > 0 && n as u64 <= MAX_SIZE)
        .ok_or_else(|| UsageError(format!("size {s:?} out of range (1 B to 1 GiB)")))?;
    Ok(n)
}

/// Parses a positive count.
fn parse_count(flag: &str, s: &str) -> Result<u64, UsageError> {
    s.parse::<u64>()
        .map_err(|_| UsageError(format!("{flag}: bad number {s:?}")))
}

/// Parses the command line (without the program name). Options may appear
/// before or after the mode word.
fn parse_args(args: &[String]) -> Result<Opts, UsageError> {
    let mut test = Test::Lat;
    let mut sizes = DEFAULT_SIZES.to_vec();
    let mut iters = None;
    let mut warmup = None;
    let mut window = DEFAULT_WINDOW;
    let mut json = false;
    let mut added = Added::default();
    let mut port = 0u16;
    let mut bind = "127.0.0.1".to_string();
    let mut positional = Vec::new();

    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |flag: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| UsageError(format!("{flag} needs a value")))
        };
        match arg.as_str() {
            "--test" | "-t" => {
                test = match value("--test")?.as_str() {
                    "lat" => Test::Lat,
                    "bw" => Test::Bw,
                    other => return Err(UsageError(format!("unknown test {other:?}"))),
                }
            }
            "--sizes" | "-s" => {
                sizes = value("--sizes")?
                    .split(',')
                    .filter(|s| !s.trim().is_empty())
                    .map(parse_size)
                    .collect::<Result<_, _>>()?;
                if sizes.is_empty() {
                    return Err(UsageError("--sizes is empty".into()));
                }
            }
            "--iters" | "-n" => {
                let n = parse_count("--iters", &value("--iters")?)?;
                if n == 0 {
                    return Err(UsageError("--iters must be at least 1".into()));
                }
                iters = Some(n);
            }
            "--warmup" | "-w" => warmup = Some(parse_count("--warmup", &value("--warmup")?)?),
            "--window" => {
                window = parse_count("--window", &value("--window")?)?;
                if window == 0 {
                    return Err(UsageError("--window must be at least 1".into()));
                }
            }
            "--json" => json = true,
            "--frames" => {
                let v = value("--frames")?;
                added.frames = v
                    .parse()
                    .ok()
                    .filter(|n| *n <= MAX_FRAMES)
                    .ok_or_else(|| UsageError(format!("--frames: a number up to {MAX_FRAMES}, not {v:?}")))?;
            }
            "--think" => added.think = Duration::from_nanos(parse_count("--think", &value("--think")?)?),
            "--port" | "-p" => {
                let v = value("--port")?;
                port = v.parse().map_err(|_| UsageError(format!("--port: bad port {v:?}")))?;
            }
            "--bind" => bind = value("--bind")?,
            "--help" | "-h" => return Err(UsageError(String::new())),
            s if s.starts_with('-') => return Err(UsageError(format!("unknown option {s}"))),
            s => positional.push(s.to_string()),
        }
    }

    let mode = match positional.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["server"] => Mode::Server { bind, port },
        ["client", addr] => Mode::Client(addr.to_string()),
        ["local"] => Mode::Local,
        ["client"] => return Err(UsageError("client needs HOST:PORT".into())),
        [] => return Err(UsageError("missing mode: server, client or local".into())),
        other => return Err(UsageError(format!("unexpected arguments {other:?}"))),
    };
    Ok(Opts {
        test,
        sizes,
        iters,
        warmup,
        window,
        json,
        added,
        mode,
    })
}

/// Default timed iterations for `test` at `size` bytes.
///
/// Latency runs 10000 iterations below 64 KiB and scales down linearly from
/// there (625 at 1 MiB, at least 100) so each size stays well under ~2 s on
/// loopback; bandwidth runs 100000 messages below 64 KiB and 1000 from 64 KiB.
fn default_iters(test: Test, size: usize) -> u64 {
    const BIG: usize = 64 * 1024;
    match test {
        Test::Lat if size < BIG => 10_000,
        Test::Lat => (10_000 * BIG as u64 / size as u64).max(100),
        Test::Bw if size < BIG => 100_000,
        Test::Bw => 1_000,
    }
}

/// Default warm-up: a tenth of the timed iterations, between 1 and 1000.
fn default_warmup(iters: u64) -> u64 {
    (iters / 10).clamp(1, 1000)
}

/// Sends all of `buf`, spinning on `EAGAIN`.
fn send_all(fd: RawFd, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        // SAFETY: `buf` is a live, initialised slice of `buf.len()` bytes and
        // `fd` is an open socket owned by the caller for the whole call.
        let n = unsafe {
            libc::send(
                fd,
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n > 0 {
            buf = &buf[n as usize..];
            continue;
        }
        let err = io::Error::last_os_error();
        match err.kind() {
            io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            io::ErrorKind::Interrupted => {}
            _ => return Err(err),
        }
    }
    Ok(())
}

/// Receives once into `buf`, spinning on `EAGAIN` until at least one byte
/// arrives; returns the number of bytes read. End of stream is an error.
fn recv_some(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is a live, writable slice of `buf.len()` bytes and
        // `fd` is an open socket owned by the caller for the whole call.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n > 0 {
            return Ok(n as usize);
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "peer closed the connection",
            ));
        }
        let err = io::Error::last_os_error();
        match err.kind() {
            io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            io::ErrorKind::Interrupted => {}
            _ => return Err(err),
        }
    }
}

/// Fills `buf` completely, spinning on `EAGAIN`.
fn recv_exact(fd: RawFd, buf: &mut [u8]) -> io::Result<()> {
    let mut off = 0;
    while off < buf.len() {
        off += recv_some(fd, &mut buf[off..])?;
    }
    Ok(())
}

/// Receives and discards exactly `bytes` bytes into `scratch`.
fn drain(fd: RawFd, scratch: &mut [u8], mut bytes: u64) -> io::Result<()> {
    while bytes > 0 {
        let want = scratch.len().min(usize::try_from(bytes).unwrap_or(usize::MAX));
        bytes -= recv_some(fd, &mut scratch[..want])? as u64;
    }
    Ok(())
}

/// Puts a connected socket in the mode the floor measures: `TCP_NODELAY`
/// and non-blocking.
fn tune(stream: &TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    stream.set_nonblocking(true)
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Average, p50, p99 and max of half-round-trip samples in microseconds.
fn lat_stats(mut samples: Vec<f64>) -> LatStats {
    samples.sort_by(f64::total_cmp);
    let n = samples.len().max(1) as f64;
    LatStats {
        avg: samples.iter().sum::<f64>() / n,
        p50: percentile(&samples, 50.0),
        p99: percentile(&samples, 99.0),
        max: samples.last().copied().unwrap_or(0.0),
    }
}

/// What the latency test adds to the floor on purpose, on the side given
/// it: `--think` and `--frames`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Added {
    /// Busy work between receiving a message and sending the next one.
    think: Duration,
    /// Nested calls between the loop and the receive.
    frames: u32,
}

impl Added {
    /// Spins on the clock for the think time (nothing when it is zero).
    #[inline]
    fn spin(self) {
        if self.think.is_zero() {
            return;
        }
        let start = Instant::now();
        while start.elapsed() < self.think {}
    }

    /// The latency test's receive: inline unless `frames` asks for depth.
    #[inline(always)]
    fn recv(self, fd: RawFd, buf: &mut [u8]) -> io::Result<()> {
        if self.frames == 0 {
            recv_exact(fd, buf)
        } else {
            recv_nested(self.frames - 1, fd, buf)
        }
    }
}

/// [`recv_exact`] from `frames` more nested calls: each level is a real
/// frame (never inlined, and it uses the result after the call, so it is no
/// tail call).
#[inline(never)]
fn recv_nested(frames: u32, fd: RawFd, buf: &mut [u8]) -> io::Result<()> {
    if frames == 0 {
        return recv_exact(fd, buf);
    }
    let r = recv_nested(frames - 1, fd, buf);
    std::hint::black_box(&r);
    r
}

/// Client side of the latency test: warm-up, then `h.iters` timed
/// round trips.
fn client_lat(fd: RawFd, h: &Header, added: Added) -> io::Result<LatStats> {
    let size = h.size as usize;
    let tx = vec![0xa5u8; size];
    let mut rx = vec![0u8; size];
    for _ in 0..h.warmup {
        added.spin();
        send_all(fd, &tx)?;
        added.recv(fd, &mut rx)?;
    }
    let mut timer = clock::Timer::new(h.iters as usize);
    for _ in 0..h.iters {
        let t0 = timer.now();
        added.spin();
        send_all(fd, &tx)?;
        added.recv(fd, &mut rx)?;
        timer.record(t0);
    }
    Ok(lat_stats(timer.micros(2.0)))
}

/// Server side of the latency test: echo `h.warmup + h.iters` messages.
fn server_lat(fd: RawFd, h: &Header, added: Added) -> io::Result<()> {
    let mut buf = vec![0u8; h.size as usize];
    for _ in 0..h.warmup + h.iters {
        added.recv(fd, &mut buf)?;
        added.spin();
        send_all(fd, &buf)?;
    }
    Ok(())
}

/// Streams `count` messages in windows, at most [`WINDOWS_IN_FLIGHT`]
/// windows unacknowledged: before sending a window it waits for the ack of
/// the one that many windows back, and at the end for every ack.
fn stream_windows(fd: RawFd, tx: &[u8], count: u64, window: u64) -> io::Result<()> {
    let mut ack = [0u8; 1];
    let (mut left, mut unacked) = (count, 0);
    while left > 0 {
        if unacked == WINDOWS_IN_FLIGHT {
            recv_exact(fd, &mut ack)?;
            unacked -= 1;
        }
        let n = left.min(window);
        for _ in 0..n {
            send_all(fd, tx)?;
        }
        unacked += 1;
        left -= n;
    }
    for _ in 0..unacked {
        recv_exact(fd, &mut ack)?;
    }
    Ok(())
}

/// Client side of the bandwidth test: untimed warm-up windows, then
/// `h.iters` timed messages.
fn client_bw(fd: RawFd, h: &Header) -> io::Result<BwStats> {
    let tx = vec![0x5au8; h.size as usize];
    stream_windows(fd, &tx, h.warmup, h.window)?;
    let t0 = Instant::now();
    stream_windows(fd, &tx, h.iters, h.window)?;
    let secs = t0.elapsed().as_secs_f64();
    Ok(BwStats {
        mib_s: (h.iters * h.size) as f64 / MIB / secs,
        msg_rate: h.iters as f64 / secs,
    })
}

/// Server side of the bandwidth test: drain each window, then ack it.
fn server_bw(fd: RawFd, h: &Header) -> io::Result<()> {
    let mut scratch = vec![0u8; (h.size as usize).max(DRAIN_BUF)];
    for total in [h.warmup, h.iters] {
        let mut left = total;
        while left > 0 {
            let n = left.min(h.window);
            drain(fd, &mut scratch, n * h.size)?;
            send_all(fd, &[1u8])?;
            left -= n;
        }
    }
    Ok(())
}

/// Serves one connected client until it sends the end-of-session header.
fn serve(stream: TcpStream, added: Added) -> io::Result<()> {
    tune(&stream)?;
    let fd = stream.as_raw_fd();
    loop {
        let mut hb = [0u8; HEADER_LEN];
        recv_exact(fd, &mut hb)?;
        let h = Header::decode(&hb)?;
        match h.test {
            0 => return Ok(()),
            1 => server_lat(fd, &h, added)?,
            _ => server_bw(fd, &h)?,
        }
    }
}

/// Binds the server's listening socket.
fn listen(bind: &str, port: u16) -> io::Result<TcpListener> {
    let addr: SocketAddr = format!("{bind}:{port}")
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| invalid(format!("cannot resolve {bind}")))?;
    TcpListener::bind(addr)
}

/// Connects to the server, retrying briefly while it is not listening yet.
fn connect(addr: &str) -> io::Result<TcpStream> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match TcpStream::connect(addr) {
            Ok(s) => return Ok(s),
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Prints results either as a table or as JSON lines.
struct Reporter {
    /// JSON lines instead of a table.
    json: bool,
    /// Whether the table header has been printed.
    header_done: bool,
}

impl Reporter {
    /// Prints one latency result.
    fn lat(&mut self, size: u64, iters: u64, added: Added, s: &LatStats) {
        if self.json {
            println!(
                "{{\"tool\":\"tcp-floor\",\"test\":\"{}\",\"size\":{size},\"iters\":{iters},\"think_ns\":{},\"frames\":{},\
                 \"avg_us\":{:.3},\"p50_us\":{:.3},\"p99_us\":{:.3},\"max_us\":{:.3},\"clock\":\"{}\"}}",
                Test::Lat.name(),
                added.think.as_nanos(),
                added.frames,
                s.avg,
                s.p50,
                s.p99,
                s.max,
                clock::name()
            );
        } else {
            if !self.header_done {
                println!(
                    "# tcp-floor lat: half round trip, microseconds, clock {}",
                    clock::name()
                );
                println!(
                    "{:>10} {:>9} {:>10} {:>10} {:>10} {:>10}",
                    "size", "iters", "avg", "p50", "p99", "max"
                );
                self.header_done = true;
            }
            println!(
                "{size:>10} {iters:>9} {:>10.3} {:>10.3} {:>10.3} {:>10.3}",
                s.avg, s.p50, s.p99, s.max
            );
        }
        let _ = io::stdout().flush();
    }

    /// Prints one bandwidth result.
    fn bw(&mut self, size: u64, iters: u64, s: &BwStats) {
        if self.json {
            println!(
                "{{\"tool\":\"tcp-floor\",\"test\":\"{}\",\"size\":{size},\"iters\":{iters},\
                 \"mib_s\":{:.1},\"msg_rate\":{:.1}}}",
                Test::Bw.name(),
                s.mib_s,
                s.msg_rate
            );
        } else {
            if !self.header_done {
                println!("# tcp-floor bw: payload MiB/s (2^20 bytes) and messages/s");
                println!("{:>10} {:>9} {:>12} {:>14}", "size", "iters", "MiB/s", "msg/s");
                self.header_done = true;
            }
            println!("{size:>10} {iters:>9} {:>12.1} {:>14.1}", s.mib_s, s.msg_rate);
        }
        let _ = io::stdout().flush();
    }
}

/// Drives every size's test over `stream` and prints the results.
fn run_client(stream: TcpStream, opts: &Opts) -> io::Result<()> {
    tune(&stream)?;
    let fd = stream.as_raw_fd();
    let mut out = Reporter {
        json: opts.json,
        header_done: false,
    };
    for &size in &opts.sizes {
        let iters = opts.iters.unwrap_or_else(|| default_iters(opts.test, size));
        let h = Header {
            test: opts.test.code(),
            size: size as u64,
            iters,
            warmup: opts.warmup.unwrap_or_else(|| default_warmup(iters)),
            window: opts.window,
        };
        send_all(fd, &h.encode())?;
        match opts.test {
            Test::Lat => out.lat(h.size, iters, opts.added, &client_lat(fd, &h, opts.added)?),
            Test::Bw => out.bw(h.size, iters, &client_bw(fd, &h)?),
        }
    }
    let end = Header {
        test: 0,
        size: 0,
        iters: 0,
        warmup: 0,
        window: 0,
    };
    send_all(fd, &end.encode())
}

/// Runs the mode chosen on the command line.
fn run(opts: &Opts) -> io::Result<()> {
    match &opts.mode {
        Mode::Server { bind, port } => {
            let listener = listen(bind, *port)?;
            println!("listening on {}", listener.local_addr()?.port());
            io::stdout().flush()?;
            let (stream, _) = listener.accept()?;
            drop(listener);
            serve(stream, opts.added)
        }
        Mode::Client(addr) => run_client(connect(addr)?, opts),
        Mode::Local => {
            let added = opts.added;
            let listener = listen("127.0.0.1", 0)?;
            let port = listener.local_addr()?.port();
            let server = thread::Builder::new()
                .name("tcp-floor-server".into())
                .spawn(move || -> io::Result<()> {
                    let (stream, _) = listener.accept()?;
                    serve(stream, added)
                })?;
            let client = run_client(connect(&format!("127.0.0.1:{port}"))?, opts);
            let served = server.join().map_err(|_| io::Error::other("server thread panicked"))?;
            client.and(served)
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    clock::select(clock::ClockKind::Auto);
    let opts = match parse_args(&args) {
        Ok(o) => o,
        Err(UsageError(msg)) => {
            if msg.is_empty() {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            eprintln!("tcp-floor: {msg}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tcp-floor: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn header_round_trips() {
        let h = Header {
            test: 2,
            size: 65536,
            iters: 1000,
            warmup: 100,
            window: 64,
        };
        assert_eq!(Header::decode(&h.encode()).unwrap(), h);
        let mut bad = h.encode();
        bad[0] ^= 1;
        assert!(Header::decode(&bad).is_err());
    }

    #[test]
    fn parses_modes_and_options() {
        let o = parse_args(&args("--test bw --sizes 64k,1m --json server --port 0")).unwrap();
        assert_eq!(o.test, Test::Bw);
        assert_eq!(o.sizes, vec![65536, 1 << 20]);
        assert!(o.json);
        assert!(matches!(o.mode, Mode::Server { port: 0, .. }));
        let o = parse_args(&args("client 127.0.0.1:5000 --iters 10")).unwrap();
        assert_eq!(o.iters, Some(10));
        assert!(matches!(o.mode, Mode::Client(ref a) if a == "127.0.0.1:5000"));
        assert!(parse_args(&args("client")).is_err());
        assert!(parse_args(&args("--sizes 0 local")).is_err());
        assert!(parse_args(&args("--test foo local")).is_err());
        assert_eq!(o.added, Added::default());
        let o = parse_args(&args("--think 150 local")).unwrap();
        assert_eq!(o.added.think, Duration::from_nanos(150));
        assert!(parse_args(&args("--think x local")).is_err());
        assert_eq!(parse_args(&args("--frames 6 local")).unwrap().added.frames, 6);
        assert!(parse_args(&args("--frames 65 local")).is_err());
    }

    #[test]
    fn think_waits_at_least_its_time() {
        let t = Instant::now();
        let added = Added {
            think: Duration::from_micros(200),
            frames: 0,
        };
        added.spin();
        assert!(t.elapsed() >= Duration::from_micros(200));
        // Zero returns at once (no clock read needed to prove it: it does not hang).
        Added::default().spin();
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let s: Vec<f64> = (1..=100).map(f64::from).collect();
        let st = lat_stats(s);
        assert_eq!(st.p50, 50.0);
        assert_eq!(st.p99, 99.0);
        assert_eq!(st.max, 100.0);
        assert!((st.avg - 50.5).abs() < 1e-9);
    }

    #[test]
    fn default_iterations_scale_down() {
        assert_eq!(default_iters(Test::Lat, 8), 10_000);
        assert_eq!(default_iters(Test::Lat, 65536), 10_000);
        assert_eq!(default_iters(Test::Lat, 1 << 20), 625);
        assert_eq!(default_iters(Test::Bw, 1 << 20), 1000);
        assert_eq!(default_warmup(625), 62);
    }

    #[test]
    fn local_lat_and_bw_run() {
        for (test, sizes) in [(Test::Lat, vec![8, 70_000]), (Test::Bw, vec![8, 300_000])] {
            let opts = Opts {
                test,
                sizes,
                iters: Some(50),
                warmup: Some(5),
                window: 7,
                json: true,
                added: Added {
                    think: Duration::from_nanos(100),
                    frames: 3,
                },
                mode: Mode::Local,
            };
            run(&opts).unwrap();
        }
    }
}
