//! `xfer-rpc`: a tarpc service over xfer, between two processes or in one,
//! and its benchmark against the same service over tarpc's tokio TCP
//! transport (docs/RPC.md, docs/PERFORMANCE.md).
//!
//! ```text
//! xfer-rpc server [--tcp ADDR] [--conns N] [--cpu N]   prints its endpoint name (hex), serves
//! xfer-rpc client NAME-HEX [--tcp ADDR]      every call checked, over xfer (and tokio TCP)
//! xfer-rpc local                             server and client in one process
//! xfer-rpc bench [--iters N] [--calls N] [--outstanding N] [--reps N] [--tcp ADDR]
//!                [--spin US|none] [--only xfer|second|tcp] [--cpus S,C|none]
//! ```
//!
//! The bench measures three rows in turn: tarpc over xfer as the `XFER_*`
//! environment configures it (by default the async layer spins 50 µs after
//! each completion), over xfer with the spin window at `--spin`
//! microseconds on both sides (default 0: parking at once; `none` leaves
//! the row out), and over tokio TCP. The server process runs on CPU `S` and
//! the client on CPU `C` (default 0,1 when there are two; `none` leaves
//! placement to the scheduler, which may put both on one CPU: blocking
//! wake-ups are then cheaper, and spinning backs off).
//!
//! The provider and its settings come from the `XFER_*` environment
//! (`XFER_PROVIDER=verbs`, `XFER_TCP_ADDR=127.0.0.1`, ...).

use std::io::{self, BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use futures::Stream;
use tarpc::serde_transport;
use tarpc::tokio_serde::formats::Bincode;
use tarpc::tokio_util::codec::LengthDelimitedCodec;
use tokio::net::{TcpListener, TcpStream};
use xfer_rpc::{bench, check, serve, CalcClient, Node, ServerIn, ServerOut};

type Res<T> = Result<T, String>;

const USAGE: &str = "usage: xfer-rpc server [--tcp ADDR] [--conns N] [--cpu N]
       xfer-rpc client NAME-HEX [--tcp ADDR]
       xfer-rpc local
       xfer-rpc bench [--iters N] [--calls N] [--outstanding N] [--reps N] [--tcp ADDR]
                      [--spin US|none] [--only xfer|second|tcp] [--cpus S,C|none]";

/// Options after the mode.
struct Opts {
    tcp: Option<String>,
    conns: Option<usize>,
    iters: usize,
    calls: usize,
    outstanding: usize,
    reps: usize,
    /// The spin window of the bench's second xfer row, microseconds (`None`:
    /// no such row).
    spin: Option<u64>,
    /// Bench one row only (`xfer`, `second` or `tcp`), for profiling.
    only: Option<String>,
    /// The CPU this process runs on (`server --cpu`).
    cpu: Option<usize>,
    /// The bench's server and client CPUs.
    cpus: Option<(usize, usize)>,
}

fn main() -> ExitCode {
    xfer::init_logging();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xfer-rpc: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, name, rest) = match args.as_slice() {
        [m, n, rest @ ..] if m == "client" => (m.as_str(), Some(n.as_str()), rest),
        [m, rest @ ..] => (m.as_str(), None, rest),
        [] => return Err(USAGE.into()),
    };
    let opts = parse(rest)?;
    if mode == "bench" {
        return run_bench(&opts);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(async {
        match (mode, name) {
            ("server", None) => server(&opts).await,
            ("client", Some(name)) => client(&unhex(name)?, opts.tcp.as_deref()).await,
            ("local", None) => local().await,
            _ => Err(USAGE.into()),
        }
    })
}

fn parse(mut args: &[String]) -> Res<Opts> {
    let mut o = Opts {
        tcp: None,
        conns: None,
        iters: 20_000,
        calls: 200_000,
        outstanding: 64,
        reps: 3,
        spin: Some(0),
        only: None,
        cpu: None,
        cpus: default_cpus(),
    };
    while let [flag, value, rest @ ..] = args {
        let n = || value.parse::<usize>().map_err(|e| format!("{flag} {value:?}: {e}"));
        match flag.as_str() {
            "--tcp" => o.tcp = Some(value.clone()),
            "--conns" => o.conns = Some(n()?),
            "--iters" => o.iters = n()?.max(1),
            "--calls" => o.calls = n()?.max(1),
            "--outstanding" => o.outstanding = n()?.max(1),
            "--reps" => o.reps = n()?.max(1),
            "--spin" if value == "none" => o.spin = None,
            "--spin" => o.spin = Some(n()? as u64),
            "--cpu" => o.cpu = Some(n()?),
            "--cpus" if value == "none" => o.cpus = None,
            "--cpus" => {
                let bad = || format!("--cpus {value:?}: want SERVER,CLIENT or none");
                let (a, b) = value.split_once(',').ok_or_else(bad)?;
                o.cpus = Some((a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?));
            }
            "--only" if ["xfer", "second", "tcp"].contains(&value.as_str()) => o.only = Some(value.clone()),
            _ => return Err(format!("unknown option {flag}\n{USAGE}")),
        }
        args = rest;
    }
    match args {
        [] => Ok(o),
        _ => Err(USAGE.into()),
    }
}

fn open() -> Res<Arc<Node>> {
    Node::open().map_err(|e| format!("opening an xfer endpoint: {e}"))
}

/// Serves over xfer and, with `--tcp`, over tarpc's tokio TCP transport.
async fn server(o: &Opts) -> Res<()> {
    if let Some(cpu) = o.cpu {
        pin_to(cpu)?;
    }
    let node = open()?;
    println!(
        "xfer-rpc server: provider {}, name {}",
        node.provider(),
        xfer::Address::new(&node.name()).map_err(|e| e.to_string())?
    );
    let tcp = match &o.tcp {
        Some(addr) => {
            let listener = TcpListener::bind(addr)
                .await
                .map_err(|e| format!("binding {addr}: {e}"))?;
            let local = listener.local_addr().map_err(|e| e.to_string())?;
            println!("xfer-rpc server: tcp {local}");
            Some(listener)
        }
        None => None,
    };
    let xfer = serve(node.clone().incoming::<ServerIn, ServerOut>(), o.conns);
    match tcp {
        Some(l) => {
            tokio::join!(xfer, serve(tcp_incoming(l), o.conns));
        }
        None => xfer.await,
    }
    Ok(())
}

/// Accepted TCP connections as tarpc transports (length-delimited bincode,
/// as `tarpc::serde_transport::tcp`), with `TCP_NODELAY` set.
fn tcp_incoming(l: TcpListener) -> impl Stream<Item = io::Result<TcpTransport<ServerIn, ServerOut>>> {
    futures::stream::unfold(l, |l| async move {
        let conn = l.accept().await.and_then(|(s, _)| framed(s));
        Some((conn, l))
    })
}

type TcpTransport<In, Out> = serde_transport::Transport<TcpStream, In, Out, Bincode<In, Out>>;

fn framed<In, Out>(s: TcpStream) -> io::Result<TcpTransport<In, Out>>
where
    In: for<'de> serde::Deserialize<'de>,
    Out: serde::Serialize,
{
    s.set_nodelay(true)?;
    Ok(serde_transport::new(
        LengthDelimitedCodec::builder().new_framed(s),
        Bincode::default(),
    ))
}

async fn tcp_client(addr: &str) -> Res<CalcClient> {
    let s = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    let t = framed(s).map_err(|e| e.to_string())?;
    Ok(CalcClient::new(Default::default(), t).spawn())
}

async fn xfer_client(node: &Node, server: &[u8]) -> Res<CalcClient> {
    let t = node
        .connect(server)
        .await
        .map_err(|e| format!("connecting over xfer: {e}"))?;
    Ok(CalcClient::new(Default::default(), t).spawn())
}

/// Checks every call over xfer, then over TCP with `--tcp`.
async fn client(server: &[u8], tcp: Option<&str>) -> Res<()> {
    let node = open()?;
    let c = xfer_client(&node, server).await?;
    let calls = check(&c).await?;
    println!("xfer-rpc client: {calls} calls correct over xfer ({})", node.provider());
    drop(c);
    if let Some(addr) = tcp {
        let c = tcp_client(addr).await?;
        let calls = check(&c).await?;
        println!("xfer-rpc client: {calls} calls correct over tokio TCP");
    }
    settle(&node).await
}

/// Waits (bounded) until the endpoint has no operation in flight but the
/// cancelled receives of closed connections, so the `CLOSE` went out.
async fn settle(node: &Node) -> Res<()> {
    let disp = node.endpoint().dispatcher().clone();
    for _ in 0..1000 {
        if disp.in_flight() == disp.abandoned() {
            break;
        }
        let _ = disp.drive();
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

/// Server and client on one endpoint each, in this process.
async fn local() -> Res<()> {
    let server = open()?;
    let name = server.name();
    let serving = tokio::spawn(serve(server.clone().incoming::<ServerIn, ServerOut>(), Some(1)));
    let node = open()?;
    let c = xfer_client(&node, &name).await?;
    let calls = check(&c).await?;
    drop(c);
    tokio::time::timeout(Duration::from_secs(60), serving)
        .await
        .map_err(|_| "the server did not see the connection end".to_string())?
        .map_err(|e| format!("server task: {e}"))?;
    println!("xfer-rpc local: {calls} calls correct over xfer ({})", node.provider());
    Ok(())
}

/// A server child stopped when dropped: `SIGTERM` (a profiler it runs
/// under then writes its data), `SIGKILL` if it is still there after 10 s.
struct ServerProc(Child);

impl Drop for ServerProc {
    fn drop(&mut self) {
        if let Ok(pid) = libc::pid_t::try_from(self.0.id()) {
            // SAFETY: signals our own child, which has not been waited for,
            // so the pid still names it.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            for _ in 0..1000 {
                if matches!(self.0.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// CPUs 0 and 1 for the bench's server and client, when this process may
/// run on both.
fn default_cpus() -> Option<(usize, usize)> {
    // SAFETY: `set` is a plain bit set that sched_getaffinity fills in; the
    // size passed is its own.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        (libc::CPU_ISSET(0, &set) && libc::CPU_ISSET(1, &set)).then_some((0, 1))
    }
}

/// Restricts this process (its current threads and those it starts later)
/// to `cpu`.
fn pin_to(cpu: usize) -> Res<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(format!("CPU {cpu} out of range"));
    }
    // SAFETY: as in `default_cpus`; `cpu` is below CPU_SETSIZE, checked above.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    match rc {
        0 => Ok(()),
        _ => Err(format!("pinning to CPU {cpu}: {}", io::Error::last_os_error())),
    }
}

/// Starts `xfer-rpc server --tcp ADDR` (with `XFER_AIO_SPIN_US` set to
/// `spin_us` if given) and reads its xfer name and TCP address.
fn spawn_server(tcp: &str, spin_us: Option<u64>, cpu: Option<usize>) -> Res<(ServerProc, String, Vec<u8>, SocketAddr)> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    if let Some(us) = spin_us {
        cmd.env("XFER_AIO_SPIN_US", us.to_string());
    }
    cmd.args(["server", "--tcp", tcp]);
    if let Some(cpu) = cpu {
        cmd.args(["--cpu", &cpu.to_string()]);
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting the server: {e}"))?;
    let out = child.stdout.take().ok_or("no server stdout")?;
    let child = ServerProc(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next = || {
        rx.recv_timeout(Duration::from_secs(60))
            .map_err(|_| "the server printed nothing".to_string())
    };
    let first = next()?;
    let (provider, name) = first
        .strip_prefix("xfer-rpc server: provider ")
        .and_then(|r| r.split_once(", name "))
        .ok_or(format!("unexpected server line {first:?}"))?;
    let second = next()?;
    let addr = second
        .strip_prefix("xfer-rpc server: tcp ")
        .and_then(|a| a.parse().ok())
        .ok_or(format!("unexpected server line {second:?}"))?;
    Ok((child, provider.to_string(), unhex(name)?, addr))
}

fn run_bench(o: &Opts) -> Res<()> {
    let server_cpu = o.cpus.map(|c| c.0);
    let (server, provider, name, addr) = spawn_server(o.tcp.as_deref().unwrap_or("127.0.0.1:0"), None, server_cpu)?;
    // The second row's server: a process of its own, with the same window.
    let second = match o.spin {
        None => None,
        Some(us) => Some((spawn_server("127.0.0.1:0", Some(us), server_cpu)?, us)),
    };
    if let Some((_, cpu)) = o.cpus {
        pin_to(cpu)?;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(async {
        let node = open()?;
        let x = xfer_client(&node, &name).await?;
        let spun = match &second {
            Some(((proc_, _, name, _), us)) => {
                let node = open()?;
                node.endpoint().dispatcher().set_spin(Duration::from_micros(*us));
                Some((xfer_client(&node, name).await?, proc_.0.id(), node))
            }
            None => None,
        };
        let t = tcp_client(&addr.to_string()).await?;
        let warmup = o.iters / 10 + 1;
        println!(
            "xfer-rpc bench: tarpc add() calls, client and server in two processes; xfer provider {provider}, tokio TCP to {addr}"
        );
        let placement = o.cpus.map_or("placed by the scheduler".to_string(), |(s, c)| {
            format!("server on CPU {s}, client on CPU {c}")
        });
        println!(
            "  latency: {} calls one at a time; rate: {} calls with {} outstanding; {} rep(s), alternating; {placement}",
            o.iters, o.calls, o.outstanding, o.reps
        );
        let mut rows = vec![(label(&node), "xfer", &x, server.0.id(), Vec::new())];
        if let Some((c, pid, node)) = &spun {
            rows.push((label(node), "second", c, *pid, Vec::new()));
        }
        rows.push(("tokio TCP".to_string(), "tcp", &t, server.0.id(), Vec::new()));
        rows.retain(|r| o.only.as_deref().is_none_or(|only| only == r.1));
        for rep in 1..=o.reps {
            for (what, _, c, pid, out) in &mut rows {
                let l = bench::latency(c, *pid, warmup, o.iters).await?;
                let rate = bench::rate(c, o.outstanding, o.calls).await?;
                let cpu = l.cpu.map_or(String::new(), |(me, peer)| {
                    format!(", cpu/call client {me:.1} us server {peer:.1} us")
                });
                println!(
                    "  rep {rep} {what:>15}: p50 {:8.2} us  p99 {:8.2} us  {rate:10.0} calls/s  (max {:.0} us, {} over {} ms{cpu})",
                    l.p50,
                    l.p99,
                    l.max,
                    l.slow,
                    bench::SLOW.as_millis()
                );
                out.push((l.p50, l.p99, rate));
            }
        }
        let medians: Vec<_> = rows.iter().map(|(what, key, .., out)| (what, *key, medians(out))).collect();
        for (what, _, m) in &medians {
            println!("  median   {what:>15}: p50 {:8.2} us  p99 {:8.2} us  {:10.0} calls/s", m.0, m.1, m.2);
        }
        if let Some((_, _, tm)) = medians.iter().find(|r| r.1 == "tcp") {
            for (what, _, m) in medians.iter().filter(|r| r.1 != "tcp") {
                println!(
                    "  {what} / tokio TCP: p50 {:.2}x  p99 {:.2}x  rate {:.2}x",
                    m.0 / tm.0,
                    m.1 / tm.1,
                    m.2 / tm.2
                );
            }
        }
        Ok(())
    })
}

/// A bench row's name: how the client's async layer waits.
fn label(node: &Node) -> String {
    match node.endpoint().dispatcher().spin().as_micros() {
        0 => "xfer parking".to_string(),
        us => format!("xfer spin {us}us"),
    }
}

/// The per-column medians of `(p50, p99, rate)` rows.
fn medians(rows: &[(f64, f64, f64)]) -> (f64, f64, f64) {
    let med = |f: fn(&(f64, f64, f64)) -> f64| {
        let mut v: Vec<f64> = rows.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    (med(|r| r.0), med(|r| r.1), med(|r| r.2))
}

/// An endpoint name from its text form (`xfer::Address`'s `Display`).
fn unhex(s: &str) -> Res<Vec<u8>> {
    let name: xfer::Address = s.parse().map_err(|e| format!("{s:?}: {e}"))?;
    Ok(name.as_bytes().to_vec())
}
