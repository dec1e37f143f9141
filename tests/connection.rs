//! `xfer::listen` / `Listener::accept` / `xfer::connect` between two real
//! processes: the listener is this test binary re-executed (`echo_server`,
//! ignored in normal runs). It refuses a client that does not speak the
//! name exchange and keeps accepting; messages of every size come back
//! intact; a receive that times out loses nothing; the client's close is
//! the server's end of file (`PeerClosed`), also when it sent nothing.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{pattern, test_attr, DEADLINE};
use xfer::{Connection, Error, Listener};

/// Echoes every message of two clients in turn, each until it closes;
/// prints `ADDR` first, `REFUSED` for each client whose name exchange
/// failed, `EOF` after each client.
#[test]
#[ignore = "helper process for client_and_server_in_two_processes"]
fn echo_server() {
    let listener = Listener::bind("127.0.0.1:0", &test_attr()).unwrap();
    println!("ADDR {}", listener.local_addr().unwrap());
    for _ in 0..2 {
        let mut conn = loop {
            match listener.accept() {
                Ok(c) => break c,
                Err(e) => println!("REFUSED {e}"),
            }
        };
        loop {
            match conn.recv(vec![0; 4 << 20]) {
                Ok((buf, len)) => {
                    conn.send(buf[..len].to_vec()).unwrap();
                }
                Err(Error::PeerClosed { .. }) => break,
                Err(e) => panic!("echo server: {e}"),
            }
        }
        println!("EOF");
    }
}

/// The server process, killed if the test fails before it exits.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn client_and_server_in_two_processes() {
    let mut child = Server(
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "echo_server", "--ignored", "--nocapture"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn server"),
    );
    // The server's lines, read by a thread so that every wait is bounded.
    let (tx, rx) = mpsc::channel();
    let out = child.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next_with = |key: &str| loop {
        let line = rx.recv_timeout(DEADLINE).expect("a line from the server in time");
        if let Some((_, rest)) = line.split_once(key) {
            return rest.trim().to_string();
        }
    };
    let addr = next_with("ADDR ");

    // A client that speaks something else is refused; the listener goes on.
    let mut bad = TcpStream::connect(&addr).unwrap();
    bad.set_read_timeout(Some(DEADLINE)).unwrap();
    bad.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut rest = Vec::new();
    let _ = bad.read_to_end(&mut rest);
    assert!(rest.is_empty(), "the listener answered a stranger: {rest:?}");
    let why = next_with("REFUSED ");
    assert!(why.contains("protocol"), "{why}");

    // A client that connects and closes at once, before any message: the
    // server's receive ends (the connection's hello made both sides see
    // each other), it does not wait forever.
    drop(Connection::connect(addr.as_str(), &test_attr()).unwrap());
    next_with("EOF");

    let mut conn = Connection::connect(addr.as_str(), &test_attr()).unwrap();
    // Nothing comes: the receive times out and is cancelled ...
    let r = conn.recv_timeout(vec![0; 16], Duration::from_millis(50));
    assert_eq!(r.unwrap_err(), Error::TimedOut);
    // ... and the next message is not lost to it. Sizes from empty to
    // rendezvous; each comes back intact.
    let big = test_attr().rndv_threshold * 3 + 7;
    for (i, len) in [1, 0, 100, 4096, big, 1 << 20].into_iter().enumerate() {
        let msg = pattern(len, i as u64);
        let back = conn.send(msg.clone()).unwrap();
        assert_eq!(back, msg, "the sent buffer comes back");
        let (buf, got) = conn.recv_timeout(vec![0; len.max(1)], DEADLINE).unwrap();
        assert_eq!(&buf[..got], &msg[..], "message {i} ({len} bytes)");
    }
    // A message longer than the receive buffer is a truncation, not a loss of sync.
    conn.send(pattern(64, 9)).unwrap();
    assert_eq!(
        conn.recv_timeout(vec![0; 8], DEADLINE).unwrap_err(),
        Error::Truncated { len: 8, olen: 64 }
    );
    conn.send(b"after".to_vec()).unwrap();
    let (buf, got) = conn.recv_timeout(vec![0; 8], DEADLINE).unwrap();
    assert_eq!(&buf[..got], b"after");
    // Our close is the server's end of file.
    drop(conn);
    next_with("EOF");
    assert!(child.0.wait().unwrap().success());
}

#[test]
fn connecting_where_nobody_listens_fails() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    // The socket above is closed again: nothing listens there now.
    let e = Connection::connect(port, &test_attr()).err().expect("no listener");
    assert_eq!(std::io::Error::from(e).kind(), std::io::ErrorKind::ConnectionRefused);
}
