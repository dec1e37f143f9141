//! `xfer-rpc`: a tarpc service over xfer, between two processes or in one,
//! and its benchmark against the same service over tarpc's tokio TCP
//! transport (docs/RPC.md, docs/PERFORMANCE.md).
//!
//! ```text
//! xfer-rpc server [--tcp ADDR] [--conns N]   prints its endpoint name (hex), serves
//! xfer-rpc client NAME-HEX [--tcp ADDR]      every call checked, over xfer (and tokio TCP)
//! xfer-rpc local                             server and client in one process
//! xfer-rpc bench [--iters N] [--calls N] [--outstanding N] [--reps N] [--tcp ADDR]
//! ```
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

const USAGE: &str = "usage: xfer-rpc server [--tcp ADDR] [--conns N]
       xfer-rpc client NAME-HEX [--tcp ADDR]
       xfer-rpc local
       xfer-rpc bench [--iters N] [--calls N] [--outstanding N] [--reps N] [--tcp ADDR]";

/// Options after the mode.
struct Opts {
    tcp: Option<String>,
    conns: Option<usize>,
    iters: usize,
    calls: usize,
    outstanding: usize,
    reps: usize,
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
    let node = open()?;
    println!(
        "xfer-rpc server: provider {}, name {}",
        node.provider(),
        hex(&node.name())
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

/// A server child killed when dropped.
struct ServerProc(Child);

impl Drop for ServerProc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `xfer-rpc server --tcp ADDR` and reads its xfer name and TCP address.
fn spawn_server(tcp: &str) -> Res<(ServerProc, String, Vec<u8>, SocketAddr)> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .args(["server", "--tcp", tcp])
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
    let (_server, provider, name, addr) = spawn_server(o.tcp.as_deref().unwrap_or("127.0.0.1:0"))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(async {
        let node = open()?;
        let x = xfer_client(&node, &name).await?;
        let t = tcp_client(&addr.to_string()).await?;
        let warmup = o.iters / 10 + 1;
        let (mut xs, mut ts) = (Vec::new(), Vec::new());
        println!(
            "xfer-rpc bench: tarpc add() calls, client and server in two processes; xfer provider {provider}, tokio TCP to {addr}"
        );
        println!(
            "  latency: {} calls one at a time; rate: {} calls with {} outstanding; {} rep(s), alternating",
            o.iters, o.calls, o.outstanding, o.reps
        );
        for rep in 1..=o.reps {
            for (what, c, out) in [("xfer", &x, &mut xs), ("tokio TCP", &t, &mut ts)] {
                let l = bench::latency(c, warmup, o.iters).await?;
                let rate = bench::rate(c, o.outstanding, o.calls).await?;
                println!(
                    "  rep {rep} {what:>10}: p50 {:8.2} us  p99 {:8.2} us  {rate:10.0} calls/s  (max {:.0} us, {} over {} ms)",
                    l.p50,
                    l.p99,
                    l.max,
                    l.slow,
                    bench::SLOW.as_millis()
                );
                out.push((l.p50, l.p99, rate));
            }
        }
        let (xm, tm) = (medians(&xs), medians(&ts));
        println!("  median   {:>10}: p50 {:8.2} us  p99 {:8.2} us  {:10.0} calls/s", "xfer", xm.0, xm.1, xm.2);
        println!("  median   {:>10}: p50 {:8.2} us  p99 {:8.2} us  {:10.0} calls/s", "tokio TCP", tm.0, tm.1, tm.2);
        println!(
            "  xfer / tokio TCP: p50 {:.2}x  p99 {:.2}x  rate {:.2}x",
            xm.0 / tm.0,
            xm.1 / tm.1,
            xm.2 / tm.2
        );
        Ok(())
    })
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

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Res<Vec<u8>> {
    if s.len() % 2 != 0 || !s.is_ascii() {
        return Err(format!("{s:?} is not hex"));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|_| format!("{s:?} is not hex")))
        .collect()
}
