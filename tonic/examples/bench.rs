//! tonic over xfer against tonic over tokio TCP on loopback, in one run:
//!
//! ```text
//! XFER_TCP_ADDR=127.0.0.1 cargo run --release -p xfer-tonic --example bench -- [--calls N] [--secs S] [--size BYTES]
//! ```
//!
//! For each transport: a server and a client in this process (one tokio
//! runtime), the echo service, `--calls` unary calls one at a time (mean,
//! p50 and p99 latency, and the process's CPU time per call), then 64 calls outstanding for `--secs` seconds (calls/s,
//! p50 and p99). Payloads are `--size` bytes (default 64).

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
}

fn opts() -> Res<Opts> {
    let mut o = Opts {
        calls: 20_000,
        secs: 5,
        size: 64,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value = pair.get(1).ok_or("a flag without its value")?;
        match pair[0].as_str() {
            "--calls" => o.calls = value.parse()?,
            "--secs" => o.secs = value.parse()?,
            "--size" => o.size = value.parse()?,
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

async fn measure(label: &str, client: EchoClient<Channel>, o: &Opts) -> Res<()> {
    let payload = vec![0x5a; o.size];
    let mut c = client.clone();
    for id in 0..1000 {
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
    println!(
        "{label:<10} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>12.0} {:>9.1} {:>9.1}",
        avg(&one),
        pct(&one, 0.5),
        pct(&one, 0.99),
        cpu,
        many.len() as f64 / secs,
        pct(&many, 0.5),
        pct(&many, 0.99),
    );
    Ok(())
}

async fn xfer_client() -> Res<(EchoClient<Channel>, &'static str)> {
    let server = Node::open()?;
    let (name, provider) = (server.name(), server.provider());
    tokio::spawn(
        Server::builder()
            .add_service(EchoServer)
            .serve_with_incoming(xfer_tonic::incoming(server)),
    );
    let node = Node::open()?;
    Ok((EchoClient::new(xfer_tonic::channel(node, name).await?), provider))
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
        "tonic unary echo, {} B payload: {} calls one at a time, then {OUTSTANDING} outstanding for {} s",
        o.size, o.calls, o.secs
    );
    println!(
        "{:<10} {:>9} {:>9} {:>9} {:>9} {:>12} {:>9} {:>9}",
        "transport", "avg us", "p50 us", "p99 us", "cpu us", "calls/s @64", "p50 @64", "p99 @64"
    );
    let (xfer, provider) = xfer_client().await?;
    measure(&format!("xfer/{provider}"), xfer, &o).await?;
    measure("tokio-tcp", tcp_client().await?, &o).await?;
    Ok(())
}
