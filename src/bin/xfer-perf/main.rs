//! xfer-perf: ping-pong latency and streaming bandwidth over xfer, as
//! `ib_send_lat`/`ib_send_bw` (and `ib_write_lat`/`ib_write_bw`/`ib_read_bw`
//! for RMA) or `ucx_perftest` measure them, and remote atomics as
//! `ucx_perftest -t ucp_fadd` / `ucp_add` do.
//!
//! ```text
//! xfer-perf                                 # both sides in this process, loopback
//! xfer-perf server                          # prints `xfer-perf server: NAME`
//! xfer-perf --test tag_lat client NAME      # in another process or host
//! ```
//!
//! The client drives: it sends the server its name, then one control message
//! per phase (test, size, iterations); the server prepares its receives,
//! answers `ready`, and plays its part. Buffers are allocated once per phase
//! and reused; the first message of every phase is checked byte for byte.
//! Completions are busy-polled.

mod atomic;
mod bw;
mod clock;
mod control;
mod driver;
mod hex;
mod lat;
mod plan;
mod pool;
mod progress;
mod rate;
mod report;
mod rma;
mod stats;

use std::sync::mpsc;

use xfer::{CompletionQueue, Endpoint, EndpointAttr, PeerAddr};

use control::{hear, say};
use driver::{Driver, Result};
use hex::{hex, unhex};
use plan::{Options, Phase, Role, Test};
use progress::Progress;
use report::Report;

/// One side's objects; the domain outlives the endpoint and queue.
struct Side {
    ep: Endpoint,
    driver: Driver,
    provider: String,
    domain: xfer::Domain,
}

/// Each side's domain is its thread's alone: opened `threading=single`, as
/// `ucx_perftest` runs its workers (`UCS_THREAD_MODE_SINGLE`), unless
/// `XFER_THREADING` says otherwise.
fn open(attr: &EndpointAttr) -> Result<Side> {
    let mut dattr = xfer::DomainAttr::from_env();
    if std::env::var_os("XFER_THREADING").is_none() {
        dattr.threading = xfer::Threading::Single;
    }
    let domain = xfer::open(&dattr).map_err(|e| format!("opening a domain: {e}"))?;
    let cq: CompletionQueue = domain
        .cq(&xfer::CqAttr::from_env())
        .map_err(|e| format!("opening a cq: {e}"))?;
    let av = domain.av().map_err(|e| format!("opening an address vector: {e}"))?;
    let ep = domain
        .endpoint(&cq, &av, attr)
        .map_err(|e| format!("opening an endpoint: {e}"))?;
    Ok(Side {
        ep,
        driver: Driver::new(cq),
        provider: domain.provider().to_string(),
        domain,
    })
}

/// Serves one client: hello, then phases until `done`.
fn serve(side: &mut Side, announce: impl FnOnce(String)) -> Result<()> {
    announce(hex(side.ep.name().as_bytes()));
    let hello = hear(&side.ep, &mut side.driver, PeerAddr::UNSPEC)?;
    let name = hello
        .strip_prefix("hello ")
        .ok_or_else(|| format!("expected hello, got {hello:?}"))?;
    let peer = side
        .ep
        .av()
        .insert(&unhex(name)?)
        .map_err(|e| format!("client name: {e}"))?;
    loop {
        let msg = hear(&side.ep, &mut side.driver, peer)?;
        if msg == "done" {
            return say(&side.ep, &mut side.driver, peer, "bye");
        }
        let p = Phase::parse(&msg)?;
        let (ep, d) = (&side.ep, &mut side.driver);
        if p.test.is_rma() {
            rma::serve(ep, d, &side.domain, peer, &p)?;
        } else if p.test.is_atomic() {
            atomic::serve(ep, d, &side.domain, peer, &p)?;
        } else if p.test.is_latency() {
            let s = lat::Server::prepare(ep, peer, &p)?;
            say(ep, d, peer, "ready")?;
            s.run(ep, d, peer, &p)?;
        } else if matches!(p.test, Test::TagRate | Test::TagRateInject) {
            let s = rate::Server::prepare(ep, peer, &p)?;
            say(ep, d, peer, "ready")?;
            s.run(ep, d, peer, &p)?;
        } else {
            let s = bw::Server::prepare(ep, peer, &p)?;
            say(ep, d, peer, "ready")?;
            s.run(ep, d, peer, &p)?;
        }
    }
}

/// Runs every phase against the server named `server`, reporting each.
fn drive(side: &mut Side, server: &[u8], opts: &Options) -> Result<()> {
    let peer = side.ep.av().insert(server).map_err(|e| format!("server name: {e}"))?;
    let (ep, d) = (&side.ep, &mut side.driver);
    say(ep, d, peer, &format!("hello {}", hex(ep.name().as_bytes())))?;
    let mut report = Report::new(opts.json, side.provider.clone(), side.domain.threading());
    let mut progress = Progress::new(progress_interval(opts));
    let phases = opts.phases();
    for (i, p) in phases.iter().enumerate() {
        let p = *p;
        say(ep, d, peer, &p.to_string())?;
        let answer = hear(ep, d, peer)?;
        progress.phase(&p, i + 1, phases.len());
        let prog = &mut progress;
        if p.test.is_rma() || p.test.is_atomic() {
            let (mut samples, secs) = match p.test.is_atomic() {
                true => atomic::client(ep, d, peer, &p, &answer, prog)?,
                false => rma::client(ep, d, &side.domain, peer, &p, &answer, prog)?,
            };
            prog.clear();
            if !p.test.is_latency() {
                report.bandwidth(&p, secs);
            } else if let Some(l) = stats::latency(&mut samples) {
                report.latency(&p, &l);
            }
            continue;
        }
        if answer != "ready" {
            return Err(format!("server answered {answer:?} to {p}"));
        }
        if p.test.is_latency() {
            let mut samples = lat::client(ep, d, peer, &p, prog)?;
            prog.clear();
            if let Some(l) = stats::latency(&mut samples) {
                report.latency(&p, &l);
            }
        } else {
            let secs = match p.test {
                Test::TagRate | Test::TagRateInject => rate::client(ep, d, peer, &p, prog)?,
                _ => bw::client(ep, d, peer, &p, prog)?,
            };
            prog.clear();
            report.bandwidth(&p, secs);
        }
    }
    say(ep, d, peer, "done")?;
    match hear(ep, d, peer)?.as_str() {
        "bye" => Ok(()),
        other => Err(format!("server answered {other:?} to done")),
    }
}

/// The progress line's interval: asked for, or 1 s when standard error is a
/// terminal and results are a table; `None` for no line.
fn progress_interval(opts: &Options) -> Option<std::time::Duration> {
    use std::io::IsTerminal;
    let secs = opts
        .progress
        .or_else(|| (!opts.json && std::io::stderr().is_terminal()).then_some(1.0))?;
    Some(std::time::Duration::from_secs_f64(secs))
}

/// Prints `side`'s endpoint counters on stderr, one line, when `on`.
fn print_counters(side: &Side, role: &str, on: bool) {
    if !on {
        return;
    }
    match side.ep.counters() {
        Ok(c) => {
            let c: Vec<String> = c.iter().map(|(k, v)| format!("{k}={v}")).collect();
            eprintln!("xfer-perf counters ({role}): {}", c.join(" "));
        }
        Err(e) => eprintln!("xfer-perf counters ({role}): {e}"),
    }
}

fn run(opts: &Options) -> Result<()> {
    let mut attr = EndpointAttr::from_env();
    let counters = opts.counters;
    match &opts.role {
        Role::Server => {
            let mut side = open(&attr)?;
            serve(&mut side, |name| println!("xfer-perf server: {name}"))?;
            print_counters(&side, "server", counters);
            Ok(())
        }
        Role::Client(name) => {
            let mut side = open(&attr)?;
            drive(&mut side, name, opts)?;
            print_counters(&side, "client", counters);
            Ok(())
        }
        Role::Local => {
            // Both sides on loopback unless XFER_TCP_ADDR says otherwise.
            if xfer::TcpAttr::from_env().addr.is_none() {
                attr.params.set("tcp.addr", "127.0.0.1");
            }
            let (tx, rx) = mpsc::channel();
            let server_attr = attr.clone();
            let server = std::thread::spawn(move || {
                let mut side = open(&server_attr)?;
                serve(&mut side, |name| drop(tx.send(name)))?;
                print_counters(&side, "server", counters);
                Ok(())
            });
            let name = match rx.recv() {
                Ok(name) => name,
                Err(_) => return server.join().unwrap_or_else(|_| Err("server thread panicked".into())),
            };
            let mut side = open(&attr)?;
            let client = drive(&mut side, &unhex(&name)?, opts);
            print_counters(&side, "client", counters);
            let server = server.join().unwrap_or_else(|_| Err("server thread panicked".into()));
            client.and(server)
        }
    }
}

fn main() {
    #[cfg(feature = "logging")]
    xfer::init_logging();
    let opts = match Options::parse(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(msg) => {
            eprintln!("{msg}");
            std::process::exit(2);
        }
    };
    clock::select(opts.clock);
    if let Err(msg) = run(&opts) {
        eprintln!("xfer-perf: {msg}");
        std::process::exit(1);
    }
}
