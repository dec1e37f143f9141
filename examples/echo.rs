//! An echo service with the connection-style entry: the server listens on
//! a `host:port` and echoes every message of each client in turn; the client
//! connects to it, sends lines from its arguments and prints the answers.
//!
//! ```text
//! # terminal 1
//! cargo run --release --example echo -- server 0.0.0.0:5000
//! # terminal 2
//! cargo run --release --example echo -- client HOST:5000 hello world
//! ```
//!
//! Names are exchanged over the TCP connection to that address; messages
//! then go over the xfer endpoint each side opened (verbs or TCP, as
//! `XFER_PROVIDER` and the machine decide). The server serves one client
//! at a time, until it closes (`Error::PeerClosed`).

use std::process::ExitCode;

use xfer::Error;

const USAGE: &str = "usage: echo server ADDR | echo client ADDR MESSAGE...";
/// The largest message the server echoes.
const MAX: usize = 1 << 20;

fn main() -> ExitCode {
    xfer::init_logging();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let run = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["server", addr] => server(addr),
        ["client", addr, words @ ..] if !words.is_empty() => client(addr, words),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("echo: {e}");
            ExitCode::FAILURE
        }
    }
}

fn server(addr: &str) -> xfer::Result<()> {
    let listener = xfer::listen(addr)?;
    println!("echo server: listening on {}", listener.local_addr()?);
    loop {
        let mut conn = match listener.accept() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("echo server: a client failed to connect: {e}");
                continue;
            }
        };
        println!("echo server: client {} connected", conn.peer_name());
        loop {
            match conn.recv(vec![0; MAX]) {
                Ok((buf, len)) => {
                    conn.send(buf[..len].to_vec())?;
                }
                Err(Error::PeerClosed { .. }) => {
                    println!("echo server: client closed");
                    break;
                }
                Err(e) => {
                    eprintln!("echo server: {e}");
                    break;
                }
            }
        }
    }
}

fn client(addr: &str, words: &[&str]) -> xfer::Result<()> {
    let mut conn = xfer::connect(addr)?;
    for w in words {
        conn.send(w.as_bytes().to_vec())?;
        let (buf, len) = conn.recv(vec![0; w.len()])?;
        println!("{}", String::from_utf8_lossy(&buf[..len]));
    }
    Ok(())
}
