//! tonic over xfer (each xfer provider asked for) against tonic over tokio
//! TCP on this host, in one run:
//!
//! ```text
//! XFER_TCP_ADDR=127.0.0.1 cargo run --release -p xfer-tonic --example bench -- \
//!     [--calls N] [--secs S] [--size BYTES] [--rounds R] [--transports tcp,shm,tokio]
//! ```
//!
//! For each transport: a server and a client in this process (one tokio
//! runtime), the echo service; `tcp` and `shm` are tonic over xfer on that
//! provider, `tokio` is tonic over tokio's TCP (`TCP_NODELAY`) on
//! 127.0.0.1. Each round measures every transport in turn (alternated, so
//! a change in the host's load falls on all of them): `--calls` unary
//! calls one at a time (mean, p50 and p99 latency, and the process's CPU
//! time per call), then 64 calls outstanding for `--secs` seconds (calls/s,
//! p50 and p99). Payloads are `--size` bytes (default 64). After the rounds:
//! each column's median over the rounds, and each xfer transport's ratio to
//! tokio TCP (latency: xfer / tokio, below 1 is faster; calls/s: xfer /
//! tokio, above 1 is faster).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tonic::transport::{Channel, Endpoint, Server};
use xfer_tonic::echo::{EchoClient, EchoRequest, EchoServer};
use xfer_tonic::Node;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const OUTSTANDING: usize = 64;

struct Opts {
    calls: usize,
    secs: u64,
    size: usize,
    rounds: usize,
    transports: Vec<String>,
}

fn opts() -> Res<Opts> {
    let mut o = Opts {
        calls: 20_000,
        secs: 5,
        size: 64,
        rounds: 1,
        transports: vec!["tcp".into(), "shm".into(), "tokio".into()],
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value = pair.get(1).ok_or("a flag without its value")?;
        match pair[0].as_str() {
            "--calls" => o.calls = value.parse()?,
            "--secs" => o.secs = value.parse()?,
            "--size" => o.size = value.parse()?,
            "--rounds" => o.rounds = value.parse::<usize>()?.max(1),
            "--transports" => o.transports = value.split(',').map(str::to_string).collect(),
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    Ok(o)
}

async fn call(client: &mut EchoClient<Channel>, id: u64, payload: &[u8]) -> Res<Duration> {
    let start = Instant::now();
    let reply = client
        .echo(EchoRequest {
            id,
            payload: payload.to_vec(),
        })
        .await?
        .into_inner();
    let took = start.elapsed();
    if reply.id != id || reply.payload != payload {
        return Err(format!("call {id}: wrong reply").into());
    }
    Ok(took)
}

/// This process's CPU time so far (user + system, /proc/self/stat), in
/// seconds; 0 where it cannot be read. Both sides run in this process, so
/// it is a call's whole CPU cost, which a CPU shared with other jobs does
/// not inflate as it does latency.
fn cpu_secs() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command (which may hold spaces) start after ')'.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line, 12 and 13 here;
    // clock ticks of 1/100 s on Linux.
    (ticks(11) + ticks(12)) / 100.0
}

fn avg(all: &[Duration]) -> f64 {
    all.iter().map(Duration::as_secs_f64).sum::<f64>() / all.len().max(1) as f64 * 1e6
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p) as usize).min(sorted.len() - 1);
    sorted[i].as_secs_f64() * 1e6
}

/// One transport's figures in one round, in the order printed.
type Row = [f64; 7];

const COLUMNS: [&str; 7] = [
    "avg us",
    "p50 us",
    "p99 us",
    "cpu us",
    "calls/s @64",
    "p50 @64",
    "p99 @64",
];

/// Whether a column is better when higher (calls/s) rather than lower.
fn higher_is_better(column: usize) -> bool {
    column == 4
}

async fn measure(client: &EchoClient<Channel>, o: &Opts) -> Res<Row> {
    let payload = vec![0x5a; o.size];
    let mut c = client.clone();
    for id in 0..o.calls.min(1000) as u64 {
        call(&mut c, id, &payload).await?;
    }
    let mut one = Vec::with_capacity(o.calls);
    let cpu = cpu_secs();
    for id in 0..o.calls as u64 {
        one.push(call(&mut c, id, &payload).await?);
    }
    let cpu = (cpu_secs() - cpu) / o.calls as f64 * 1e6;
    one.sort();

    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let workers: Vec<_> = (0..OUTSTANDING as u64)
        .map(|w| {
            let (mut c, stop, payload) = (client.clone(), stop.clone(), payload.clone());
            tokio::spawn(async move {
                let mut took = Vec::new();
                let mut id = w << 32;
                while !stop.load(Ordering::Relaxed) {
                    took.push(call(&mut c, id, &payload).await?);
                    id += 1;
                }
                Res::Ok(took)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(o.secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut many = Vec::new();
    for w in workers {
        many.extend(w.await??);
    }
    let secs = start.elapsed().as_secs_f64();
    many.sort();
    Ok([
        avg(&one),
        pct(&one, 0.5),
        pct(&one, 0.99),
        cpu,
        many.len() as f64 / secs,
        pct(&many, 0.5),
        pct(&many, 0.99),
    ])
}

fn print_row(label: &str, row: &Row) {
    print!("{label:<12}");
    for (i, v) in row.iter().enumerate() {
        let width = COLUMNS[i].len().max(9);
        if higher_is_better(i) {
            print!(" {v:>width$.0}");
        } else {
            print!(" {v:>width$.1}");
        }
    }
    println!();
}

fn print_header(first: &str) {
    print!("{first:<12}");
    for c in COLUMNS {
        print!(" {c:>width$}", width = c.len().max(9));
    }
    println!();
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

async fn xfer_client(provider: &str) -> Res<EchoClient<Channel>> {
    let attr = xfer::DomainAttr::with_provider(provider);
    let server = Node::open_with(&attr)?;
    let name = server.name();
    tokio::spawn(
        Server::builder()
            .add_service(EchoServer)
            .serve_with_incoming(xfer_tonic::incoming(server)),
    );
    let node = Node::open_with(&attr)?;
    Ok(EchoClient::new(xfer_tonic::channel(node, name).await?))
}

async fn tcp_client() -> Res<EchoClient<Channel>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let incoming = futures::stream::unfold(listener, |l| async move {
        let conn = l.accept().await.and_then(|(s, _)| s.set_nodelay(true).map(|()| s));
        Some((conn, l))
    });
    tokio::spawn(Server::builder().add_service(EchoServer).serve_with_incoming(incoming));
    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .tcp_nodelay(true)
        .connect()
        .await?;
    Ok(EchoClient::new(channel))
}

#[tokio::main]
async fn main() -> Res<()> {
    let o = opts()?;
    println!(
        "tonic unary echo, {} B payload: {} calls one at a time, then {OUTSTANDING} outstanding for {} s; {} round(s), transports alternated",
        o.size, o.calls, o.secs, o.rounds
    );
    let mut clients = Vec::new();
    for t in &o.transports {
        let (label, client) = match t.as_str() {
            "tokio" => ("tokio-tcp".to_string(), tcp_client().await?),
            provider => (format!("xfer/{provider}"), xfer_client(provider).await?),
        };
        clients.push((label, client));
    }
    let mut rows: Vec<Vec<Row>> = vec![Vec::new(); clients.len()];
    print_header("round");
    for round in 1..=o.rounds {
        for (i, (label, client)) in clients.iter().enumerate() {
            let row = measure(client, &o).await?;
            print_row(&format!("{round} {label}"), &row);
            rows[i].push(row);
        }
    }
    let medians: Vec<Row> = rows
        .iter()
        .map(|r| std::array::from_fn(|c| median(r.iter().map(|row| row[c]).collect())))
        .collect();
    println!("medians over {} round(s):", o.rounds);
    print_header("transport");
    for ((label, _), m) in clients.iter().zip(&medians) {
        print_row(label, m);
    }
    if let Some(base) = clients.iter().position(|(l, _)| l == "tokio-tcp") {
        println!("ratio to tokio-tcp (latency and cpu: below 1 is faster; calls/s: above 1 is faster):");
        print_header("transport");
        for ((label, _), m) in clients.iter().zip(&medians) {
            if label == "tokio-tcp" {
                continue;
            }
            print!("{label:<12}");
            for (c, v) in m.iter().enumerate() {
                print!(" {:>width$.2}", v / medians[base][c], width = COLUMNS[c].len().max(9));
            }
            println!();
        }
    }
    Ok(())
}
