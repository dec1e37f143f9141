//! `xfer::aio::listen` / `AsyncListener::accept` / `incoming` /
//! `xfer::aio::connect` over real endpoints (TCP on loopback unless
//! `XFER_TCP_ADDR` or `XFER_PROVIDER` say otherwise): messages of every
//! size echoed, both sides on one single-threaded runtime (a blocking step
//! anywhere would hang it), exchanges of many clients at once past a
//! silent one, a connect to a server that never answers timing out while
//! the runtime goes on, a client speaking garbage refused without harm,
//! the peer's close ending receives, and async and blocking sides talking
//! to each other. Every wait is bounded; nothing sleeps for delivery.

mod common;

use std::future::Future;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use common::{pattern, test_attr, DEADLINE};
use xfer::aio::{AsyncConnection, AsyncListener};
use xfer::{EndpointAttr, Error};

/// Within [`DEADLINE`], or the test fails.
async fn bounded<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(DEADLINE, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {DEADLINE:?}"))
}

async fn listener(attr: &EndpointAttr) -> AsyncListener {
    AsyncListener::bind("127.0.0.1:0", attr).await.expect("bind")
}

/// A connection to `addr`, within [`DEADLINE`].
async fn connect(addr: std::net::SocketAddr, attr: &EndpointAttr) -> AsyncConnection {
    bounded("connect", AsyncConnection::connect(addr, attr))
        .await
        .expect("connect")
}

/// Both ends of one connection: the accepted one and the client's.
async fn pair(attr: &EndpointAttr) -> (AsyncConnection, AsyncConnection) {
    let listener = listener(attr).await;
    let addr = listener.local_addr().unwrap();
    tokio::join!(
        async { bounded("accept", listener.accept()).await.expect("accept") },
        connect(addr, attr),
    )
}

/// A receive of 16 bytes that ended with the peer's close, the buffer
/// given back.
fn assert_closed((got, buf): xfer::aio::BufResult<usize>) {
    assert!(matches!(got, Err(Error::PeerClosed { .. })), "{got:?}");
    assert_eq!(buf.len(), 16);
}

/// Echoes every message until the peer closes; the count echoed.
async fn echo(conn: AsyncConnection) -> usize {
    let mut n = 0;
    loop {
        match conn.recv(vec![0; 4 << 20]).await {
            (Ok(len), buf) => {
                let (sent, _) = conn.send(buf[..len].to_vec()).await;
                sent.expect("echo send");
                n += 1;
            }
            (Err(Error::PeerClosed { .. }), buf) => {
                assert_eq!(buf.len(), 4 << 20, "the buffer comes back");
                return n;
            }
            (Err(e), _) => panic!("echo: {e}"),
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn messages_of_every_size_echo_on_one_thread() {
    let attr = test_attr();
    let listener = listener(&attr).await;
    let addr = listener.local_addr().unwrap();
    // One thread runs both sides: a connect or accept that blocked it
    // would never see the other side's exchange.
    let server = tokio::spawn(async move { echo(listener.accept().await.expect("accept")).await });
    let conn = connect(addr, &attr).await;
    let sizes = [0, 1, 64, 4096, 65536, 65537, 1 << 20, 4 << 20];
    for (i, &len) in sizes.iter().enumerate() {
        let msg = pattern(len, i as u64);
        let ((sent, _), (got, buf)) = bounded("a round trip", async {
            tokio::join!(conn.send(msg.clone()), conn.recv(vec![0; len + 1]))
        })
        .await;
        assert_eq!(sent.expect("send"), len);
        let got = got.expect("recv");
        assert!(buf[..got] == msg[..], "{len} bytes came back different");
    }
    drop(conn);
    assert_eq!(bounded("the server's end", server).await.unwrap(), sizes.len());
}

#[tokio::test(flavor = "current_thread")]
async fn many_clients_are_accepted_at_once_past_a_silent_one() {
    let mut attr = test_attr();
    // Far beyond the test's deadline: a listener that waited for the
    // silent client before the others would fail the test.
    attr.params.set("tcp.connect_timeout_ms", "600000");
    let listener = listener(&attr).await;
    let addr = listener.local_addr().unwrap();
    // First in the listening socket's backlog.
    let _silent = std::net::TcpStream::connect(addr).expect("a silent client");

    const CLIENTS: usize = 8;
    let server = tokio::spawn(async move {
        let mut incoming = std::pin::pin!(listener.incoming());
        let mut echoes = Vec::new();
        for _ in 0..CLIENTS {
            let next = std::future::poll_fn(|cx| futures_core::Stream::poll_next(incoming.as_mut(), cx));
            let conn = next.await.expect("a stream never ends").expect("accept");
            echoes.push(tokio::spawn(echo(conn)));
        }
        let mut counts = Vec::new();
        for e in echoes {
            counts.push(e.await.expect("echo task"));
        }
        counts
    });
    let mut connecting = tokio::task::JoinSet::new();
    for i in 0..CLIENTS {
        let attr = attr.clone();
        connecting.spawn(async move {
            let conn = AsyncConnection::connect(addr, &attr).await.expect("connect");
            let msg = pattern(100 + i, i as u64);
            let (sent, _) = conn.send(msg.clone()).await;
            sent.expect("send");
            (conn, msg)
        });
    }
    let clients = bounded("every client connected", connecting.join_all()).await;
    for (conn, msg) in &clients {
        let (got, buf) = bounded("an answer", conn.recv(vec![0; 256])).await;
        assert!(buf[..got.expect("recv")] == msg[..], "a reply crossed connections");
    }
    drop(clients);
    assert_eq!(bounded("the server's end", server).await.unwrap(), vec![1; CLIENTS]);
}

#[tokio::test(flavor = "current_thread")]
async fn a_connect_to_a_server_that_never_answers_times_out_without_blocking() {
    // Accepts TCP connections (the kernel does) and never says anything.
    let mute = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut attr = test_attr();
    attr.params.set("tcp.connect_timeout_ms", "500");
    let ticks = Arc::new(AtomicU64::new(0));
    let ticker = tokio::spawn({
        let ticks = ticks.clone();
        async move {
            loop {
                ticks.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        }
    });
    let start = Instant::now();
    let r = bounded(
        "the timeout",
        AsyncConnection::connect(mute.local_addr().unwrap(), &attr),
    )
    .await;
    let took = start.elapsed();
    ticker.abort();
    assert!(matches!(r, Err(Error::TimedOut)), "{:?}", r.err());
    assert!(took >= Duration::from_millis(500), "gave up early: {took:?}");
    // The runtime's one thread ran the ticker meanwhile: nothing blocked it.
    assert!(ticks.load(Ordering::Relaxed) > 100, "the executor was blocked");
}

#[tokio::test(flavor = "current_thread")]
async fn a_client_speaking_garbage_is_refused_and_the_next_accepted() {
    let attr = test_attr();
    let listener = listener(&attr).await;
    let addr = listener.local_addr().unwrap();
    let garbage = std::thread::spawn(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        // The listener closes on us without a name.
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        rest
    });
    let first = bounded("the garbage refused", listener.accept()).await;
    assert!(matches!(first, Err(Error::Protocol(_))), "{:?}", first.err());
    assert!(garbage.join().unwrap().is_empty(), "answered garbage with a name");
    let server = tokio::spawn(async move { echo(listener.accept().await.expect("accept")).await });
    let conn = connect(addr, &attr).await;
    conn.send(b"after".to_vec()).await.0.expect("send");
    let (got, buf) = bounded("the echo", conn.recv(vec![0; 8])).await;
    assert_eq!(&buf[..got.expect("recv")], b"after");
    drop(conn);
    assert_eq!(bounded("the server's end", server).await.unwrap(), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn the_peers_close_ends_receives_after_its_messages() {
    let (server, client) = pair(&test_attr()).await;
    // A receive waiting when the peer closes ends with the close.
    let waiting = server.recv(vec![0; 16]);
    let closing = async {
        // Give the receive its first poll (it posts), then close.
        tokio::task::yield_now().await;
        client.send(b"one".to_vec()).await.0.expect("send one");
        client.send(b"two".to_vec()).await.0.expect("send two");
        drop(client);
    };
    let ((got, buf), ()) = bounded("the first message", async { tokio::join!(waiting, closing) }).await;
    assert_eq!(&buf[..got.expect("recv one")], b"one");
    // Sent before the close: still delivered.
    let (got, buf) = bounded("the second message", server.recv(vec![0; 16])).await;
    assert_eq!(&buf[..got.expect("recv two")], b"two");
    // Then the close, for every later receive, with the buffer back.
    for _ in 0..2 {
        assert_closed(bounded("the close", server.recv(vec![0; 16])).await);
    }
    let (sent, buf) = server.send(b"late".to_vec()).await;
    assert!(matches!(sent, Err(Error::PeerClosed { .. })), "{sent:?}");
    assert_eq!(buf, b"late");
}

#[tokio::test(flavor = "current_thread")]
async fn a_receive_pending_when_the_peer_closes_ends() {
    let (server, client) = pair(&test_attr()).await;
    let mut waiting = std::pin::pin!(server.recv(vec![0; 16]));
    // Its first poll posts it; nothing has been sent.
    let pending = std::future::poll_fn(|cx| Poll::Ready(waiting.as_mut().poll(cx).is_pending())).await;
    assert!(pending, "a message from nowhere");
    drop(client);
    assert_closed(bounded("the close", waiting).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_and_blocking_sides_talk_to_each_other() {
    let attr = test_attr();
    // A blocking listener, an async client.
    let blocking = xfer::Listener::bind("127.0.0.1:0", &attr).unwrap();
    let addr = blocking.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let mut conn = blocking.accept().expect("blocking accept");
        let (buf, len) = conn.recv(vec![0; 64]).expect("blocking recv");
        conn.send(buf[..len].to_vec()).expect("blocking send");
        match conn.recv(vec![0; 64]) {
            Err(Error::PeerClosed { .. }) => {}
            other => panic!("blocking side: {other:?}"),
        }
    });
    let conn = bounded("async connect", AsyncConnection::connect(addr, &attr))
        .await
        .expect("connect");
    conn.send(b"to blocking".to_vec()).await.0.expect("send");
    let (got, buf) = bounded("the answer", conn.recv(vec![0; 64])).await;
    assert_eq!(&buf[..got.expect("recv")], b"to blocking");
    drop(conn);
    tokio::task::spawn_blocking(move || server.join().unwrap())
        .await
        .unwrap();

    // An async listener, a blocking client.
    let listener = listener(&attr).await;
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { echo(listener.accept().await.expect("accept")).await });
    let client = tokio::task::spawn_blocking(move || {
        let mut conn = xfer::Connection::connect(addr, &attr).expect("blocking connect");
        conn.send(b"to async".to_vec()).expect("blocking send");
        let (buf, len) = conn.recv_timeout(vec![0; 64], DEADLINE).expect("blocking recv");
        buf[..len].to_vec()
    });
    assert_eq!(bounded("the blocking client", client).await.unwrap(), b"to async");
    assert_eq!(bounded("the server's end", server).await.unwrap(), 1);
}
