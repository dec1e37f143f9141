//! Ping-pong between two processes: first untagged messages (`send`/`recv`),
//! then tagged ones (`tsend`/`trecv`); the client prints the average
//! half-round-trip latency of each.
//!
//! ```text
//! # terminal 1: prints "pingpong server: <NAME-HEX>" and waits for one client
//! cargo run --release --example pingpong -- server
//! # terminal 2: give it the name the server printed
//! cargo run --release --example pingpong -- client <NAME-HEX> [--iters N] [--size BYTES]
//! ```
//!
//! Settings come from the `XFER_*` environment (`xfer-info` lists them), e.g.
//! `XFER_TCP_ADDR=127.0.0.1` to listen on loopback. `XFER_LOG=debug` traces.
//!
//! The protocol: the client's first message is its message size (8 bytes,
//! little-endian) followed by its own endpoint name. The server inserts that
//! name into its address vector, so it can answer, and echoes the hello.
//! From then on it echoes every message back with the same kind and tag,
//! until a tagged message with tag [`QUIT`] tells it to exit.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use xfer::{Address, Completion, CompletionQueue, Endpoint, PeerAddr};

/// The tag of the client's last message: the server exits.
const QUIT: u64 = u64::MAX;
/// How long any one completion may take once the client has said hello.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest message size a client may ask the server to allocate.
const MAX_SIZE: usize = 64 << 20;
/// Contexts: they tell which operation a completion belongs to.
const SEND: u64 = 1;
const RECV: u64 = 2;
const TRECV: u64 = 3;
const USAGE: &str = "usage: pingpong server | pingpong client <NAME-HEX> [--iters N] [--size BYTES]";

type Res<T> = Result<T, String>;

fn main() -> ExitCode {
    xfer::init_logging();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("server") if args.len() == 1 => server(),
        Some("client") if args.len() >= 2 => parse_client(&args[2..]).and_then(|(n, s)| client(&args[1], n, s)),
        _ => Err(USAGE.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pingpong: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Parses `[--iters N] [--size BYTES]` (sizes may say `4k`, `1M`).
fn parse_client(mut args: &[String]) -> Res<(u64, usize)> {
    let (mut iters, mut size) = (10_000u64, 8usize);
    while let [flag, value, rest @ ..] = args {
        let n = parse_size(value).ok_or(format!("{flag}: {value:?} is not a number"))?;
        match flag.as_str() {
            "--iters" if n > 0 => iters = n,
            "--size" if n as usize <= MAX_SIZE => size = n as usize,
            _ => return Err(format!("bad option {flag} {value}\n{USAGE}")),
        }
        args = rest;
    }
    match args {
        [] => Ok((iters, size)),
        _ => Err(USAGE.to_string()),
    }
}

/// Opens the domain (best provider, or `XFER_PROVIDER`), completion queue,
/// address vector and endpoint.
fn open() -> Res<(CompletionQueue, xfer::AddressVector, Endpoint)> {
    let domain = xfer::open_default().ctx("opening a domain")?;
    let cq = domain.cq(&xfer::CqAttr::from_env()).ctx("opening a completion queue")?;
    let av = domain.av().ctx("opening an address vector")?;
    let ep = domain
        .endpoint(&cq, &av, &xfer::EndpointAttr::from_env())
        .ctx("opening an endpoint")?;
    Ok((cq, av, ep))
}

fn server() -> Res<()> {
    let (cq, av, ep) = open()?;
    println!("pingpong server: {}", ep.name());

    // The hello may take as long as the user likes, hence no timeout.
    ep.recv(PeerAddr::UNSPEC, vec![0; 8 + Address::MAX_LEN], RECV)
        .ctx("posting a receive")?;
    let hello = received(next(&cq, None)?);
    let (size, name) = hello
        .split_first_chunk::<8>()
        .ok_or("the client's hello is too short")?;
    let size = usize::try_from(u64::from_le_bytes(*size)).unwrap_or(usize::MAX);
    if size > MAX_SIZE {
        return Err(format!("the client asks for {size}-byte messages (limit {MAX_SIZE})"));
    }
    let client = av.insert(name).ctx("the client's hello holds no valid endpoint name")?;
    let name = Address::new(name).ctx("the client's hello")?;
    println!("pingpong server: client {name} says hello; {size}-byte messages");

    // Post one receive of each kind before answering, then echo the hello.
    ep.recv(client, vec![0; size], RECV).ctx("posting a receive")?;
    ep.trecv(client, 0, !0, vec![0; size], TRECV)
        .ctx("posting a tagged receive")?;
    ep.send(client, hello, SEND).ctx("posting a send")?;

    let mut spare = Vec::new(); // buffers handed back by finished sends
    let mut echoed = 0u64;
    loop {
        let c = next(&cq, Some(TIMEOUT))?;
        if c.context == SEND {
            spare.push(c.buf.unwrap_or_default());
            continue;
        }
        if c.context == TRECV && c.tag == QUIT {
            break;
        }
        // Re-post a receive of the same kind first, then send the echo.
        let mut buf = spare.pop().unwrap_or_default();
        buf.resize(size, 0);
        let (context, tag, msg) = (c.context, c.tag, received(c));
        if context == RECV {
            ep.recv(client, buf, RECV).ctx("posting a receive")?;
            ep.send(client, msg, SEND).ctx("posting a send")?;
        } else {
            ep.trecv(client, 0, !0, buf, TRECV).ctx("posting a tagged receive")?;
            ep.tsend(client, tag, msg, SEND).ctx("posting a tagged send")?;
        }
        echoed += 1;
    }
    println!("pingpong server: done, echoed {echoed} messages");
    Ok(())
}

fn client(server_name: &str, iters: u64, size: usize) -> Res<()> {
    let name: Address = server_name
        .parse()
        .ctx("the server's name must be the hex digits the server printed")?;
    let (cq, av, ep) = open()?;
    let server = av.insert(name.as_bytes()).ctx("the server's name")?;

    // Say hello (message size and our name), and wait for the echo: after
    // it, both directions are connected and the timing can start.
    let mut hello = (size as u64).to_le_bytes().to_vec();
    hello.extend_from_slice(ep.name().as_bytes());
    let room = vec![0; hello.len()];
    let (hello, reply) = round_trip(&ep, &cq, server, None, hello, room)?; // the sent buffer comes back
    if reply != hello {
        return Err("the server answered the hello with something else".into());
    }

    for (mode, tagged) in [("msg", false), ("tagged", true)] {
        let (mut ping, mut pong) = (vec![0xa5u8; size], vec![0u8; size]);
        let start = Instant::now();
        for i in 0..iters {
            // Stamp the iteration into the payload, so a stale echo is caught.
            let stamp = i.to_le_bytes();
            let n = size.min(stamp.len());
            ping[..n].copy_from_slice(&stamp[..n]);
            (ping, pong) = round_trip(&ep, &cq, server, tagged.then_some(i), ping, pong)?;
            if pong != ping {
                return Err(format!("{mode} round trip {i}: the echo differs from what was sent"));
            }
        }
        let half_rtt_us = start.elapsed().as_secs_f64() * 1e6 / iters as f64 / 2.0;
        println!(
            "pingpong client: {mode:<6} {size} bytes x {iters}: average half-round-trip latency {half_rtt_us:.2} us"
        );
    }

    ep.tsend(server, QUIT, Vec::new(), SEND)
        .ctx("posting the quit message")?;
    next(&cq, Some(TIMEOUT))?;
    Ok(())
}

/// Sends `ping` (tagged when `tag` is set) and receives the echo into
/// `pong`; returns both buffers, `pong` cut to the length that arrived.
fn round_trip(
    ep: &Endpoint,
    cq: &CompletionQueue,
    peer: PeerAddr,
    tag: Option<u64>,
    ping: Vec<u8>,
    pong: Vec<u8>,
) -> Res<(Vec<u8>, Vec<u8>)> {
    // Post the receive before sending, so the echo never arrives unexpected.
    match tag {
        None => {
            ep.recv(peer, pong, RECV).ctx("posting a receive")?;
            ep.send(peer, ping, SEND).ctx("posting a send")?;
        }
        Some(t) => {
            ep.trecv(peer, t, 0, pong, TRECV).ctx("posting a tagged receive")?;
            ep.tsend(peer, t, ping, SEND).ctx("posting a tagged send")?;
        }
    }
    let (mut sent, mut got) = (None, None);
    while sent.is_none() || got.is_none() {
        let c = next(cq, Some(TIMEOUT))?;
        match c.context {
            SEND => sent = c.buf,
            _ => got = Some(received(c)),
        }
    }
    Ok((sent.unwrap_or_default(), got.unwrap_or_default()))
}

/// Blocks for the next completion; an operation that failed is an error.
fn next(cq: &CompletionQueue, timeout: Option<Duration>) -> Res<Completion> {
    let mut out = [Completion::EMPTY];
    cq.wait(&mut out, timeout).map_err(|e| match e {
        xfer::Error::TimedOut => format!("nothing completed in {TIMEOUT:?}: is the peer still there?"),
        e => format!("waiting for a completion: {e}"),
    })?;
    let [c] = out;
    if let Err(e) = &c.result {
        let what = match c.context {
            SEND => "send",
            RECV => "receive",
            _ => "tagged receive",
        };
        return Err(format!("{what} failed: {e}"));
    }
    Ok(c)
}

/// The buffer of a receive completion, cut to the bytes that arrived.
fn received(c: Completion) -> Vec<u8> {
    let mut buf = c.buf.unwrap_or_default();
    buf.truncate(c.len);
    buf
}

/// `4096`, `4k`, `1M`, `2g` (powers of 1024), as `XFER_*` sizes are written.
fn parse_size(s: &str) -> Option<u64> {
    let (digits, shift) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 10),
        b'm' | b'M' => (&s[..s.len() - 1], 20),
        b'g' | b'G' => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// Prefixes an error with what was being done: `opening an endpoint: ...`.
trait Context<T> {
    fn ctx(self, what: &str) -> Res<T>;
}

impl<T, E: Into<xfer::Error>> Context<T> for Result<T, E> {
    fn ctx(self, what: &str) -> Res<T> {
        self.map_err(|e| format!("{what}: {}", e.into()))
    }
}
