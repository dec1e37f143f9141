//! tonic over xfer-tonic: a server node and a client node (two endpoints
//! over real sockets, TCP on 127.0.0.1 unless `XFER_TCP_ADDR` or
//! `XFER_PROVIDER` say otherwise), real gRPC unary calls from empty to
//! 1 MiB, 64 calls outstanding at once, every answer checked; and the byte
//! stream underneath: order kept across many writes, shutdown and drop
//! read as end of file; and a server in a child process (this binary
//! again) called from this one.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::Service;
use xfer_tarpc::wire::FRAME_MAX;
use xfer_tonic::echo::{EchoClient, EchoRequest, EchoServer};
use xfer_tonic::{Connector, Node, WRITE_MAX};

/// Bound on each test's wait: nothing here takes a second when it works.
const LIMIT: Duration = Duration::from_secs(60);

fn env() {
    xfer::init_logging();
    if std::env::var_os("XFER_TCP_ADDR").is_none() {
        std::env::set_var("XFER_TCP_ADDR", "127.0.0.1");
    }
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(31).wrapping_add(seed) as u8)
        .collect()
}

/// A server node serving the echo service, and a connected client.
async fn serve() -> EchoClient<tonic::transport::Channel> {
    env();
    let server = Node::open().expect("server node");
    let name = server.name();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(EchoServer)
            .serve_with_incoming(xfer_tonic::incoming(server)),
    );
    let node = Node::open().expect("client node");
    EchoClient::new(xfer_tonic::channel(node, name).await.expect("channel"))
}

async fn call(client: &mut EchoClient<tonic::transport::Channel>, id: u64, len: usize) {
    let payload = pattern(len, id);
    let reply = client
        .echo(EchoRequest {
            id,
            payload: payload.clone(),
        })
        .await
        .unwrap_or_else(|s| panic!("call {id} of {len} bytes: {s}"))
        .into_inner();
    assert_eq!(reply.id, id);
    assert!(
        reply.payload == payload,
        "call {id}: payload of {len} bytes came back different"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_calls_from_empty_to_a_mebibyte() {
    tokio::time::timeout(LIMIT, async {
        let mut client = serve().await;
        for (id, len) in [
            0,
            1,
            100,
            FRAME_MAX - 1,
            FRAME_MAX,
            FRAME_MAX + 1,
            64 << 10,
            WRITE_MAX + 1,
            1 << 20,
        ]
        .into_iter()
        .enumerate()
        {
            call(&mut client, id as u64, len).await;
        }
        // Again, on the connection that carried them.
        call(&mut client, 99, 1 << 20).await;
    })
    .await
    .expect("calls within the limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_calls_outstanding() {
    tokio::time::timeout(LIMIT, async {
        let client = serve().await;
        for round in 0..4u64 {
            let calls = (0..64u64).map(|i| {
                let mut client = client.clone();
                let id = round * 64 + i;
                // Sizes from a few bytes to several chunks, interleaved.
                let len = (id as usize * 7919) % (96 << 10);
                async move { call(&mut client, id, len).await }
            });
            join_all(calls).await;
        }
    })
    .await
    .expect("calls within the limit");
}

#[tokio::test(flavor = "current_thread")]
async fn stream_keeps_order_and_reads_shutdown_as_eof() {
    env();
    tokio::time::timeout(LIMIT, async {
        let server = Node::open().expect("server node");
        let name = server.name();
        let accept = tokio::spawn(async move {
            let mut incoming = Box::pin(xfer_tonic::incoming(server));
            let mut io = futures::StreamExt::next(&mut incoming)
                .await
                .expect("a connection")
                .expect("accept");
            let mut got = Vec::new();
            io.read_to_end(&mut got).await.expect("read to end of file");
            got
        });
        let node: Arc<Node> = Node::open().expect("client node");
        let mut io = Connector::new(node, name)
            .call("http://xfer".parse().unwrap())
            .await
            .expect("connect")
            .into_inner();
        // Writes of many sizes, flushed at odd points: small ones (batched
        // in frames) between large ones (bodies of their own, which later
        // frames may overtake on the wire): the reader must see every byte
        // once, in order.
        let sizes = [
            1,
            17,
            FRAME_MAX - 5,
            9,
            64 << 10,
            3,
            FRAME_MAX + 1,
            WRITE_MAX + 1000,
            2,
            16 << 10,
            9,
            100,
        ];
        let data = pattern(4 << 20, 5);
        let mut at = 0;
        for (i, len) in sizes.into_iter().cycle().enumerate() {
            let end = (at + len).min(data.len());
            io.write_all(&data[at..end]).await.expect("write");
            if i % 2 == 0 || i % 7 == 0 {
                io.flush().await.expect("flush");
            }
            at = end;
            if at == data.len() {
                break;
            }
        }
        io.shutdown().await.expect("shutdown");
        let got = accept.await.expect("server task");
        assert_eq!(got.len(), data.len());
        assert!(got == data, "bytes reordered or changed");
    })
    .await
    .expect("within the limit");
}

#[tokio::test(flavor = "current_thread")]
async fn dropping_a_stream_reads_as_eof() {
    env();
    tokio::time::timeout(LIMIT, async {
        let server = Node::open().expect("server node");
        let name = server.name();
        let accept = tokio::spawn(async move {
            let mut incoming = Box::pin(xfer_tonic::incoming(server));
            let mut io = futures::StreamExt::next(&mut incoming)
                .await
                .expect("a connection")
                .expect("accept");
            let mut got = Vec::new();
            io.read_to_end(&mut got).await.expect("read to end of file");
            got
        });
        let node: Arc<Node> = Node::open().expect("client node");
        let mut io = Connector::new(node, name)
            .call("http://xfer".parse().unwrap())
            .await
            .expect("connect")
            .into_inner();
        io.write_all(b"last words").await.expect("write");
        io.flush().await.expect("flush");
        drop(io);
        assert_eq!(accept.await.expect("server task"), b"last words");
    })
    .await
    .expect("within the limit");
}

/// The echo server of [`two_processes`], run in a child process (this test
/// binary again, with `XFER_TONIC_CHILD` set): prints its name, serves until
/// its standard input closes. Ignored: it is only run by `two_processes`.
#[test]
#[ignore = "the child process of two_processes"]
fn child_server() {
    if std::env::var_os("XFER_TONIC_CHILD").is_none() {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let node = Node::open().expect("server node");
        println!("child name {}", xfer::Address::new(&node.name()).expect("name"));
        let serve = tonic::transport::Server::builder()
            .add_service(EchoServer)
            .serve_with_incoming(xfer_tonic::incoming(node));
        let stdin_closed = tokio::task::spawn_blocking(|| std::io::copy(&mut std::io::stdin(), &mut std::io::sink()));
        tokio::select! {
            r = serve => r.expect("serve"),
            _ = stdin_closed => {}
        }
    });
}

#[test]
fn two_processes() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};

    env();
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "child_server",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("XFER_TONIC_CHILD", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("child server");
    let stdout = child.stdout.take().expect("child stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest may have printed "test child_server ... " on the same line.
            if let Some((_, name)) = line.split_once("child name ") {
                let _ = tx.send(name.trim().to_string());
            }
        }
    });
    let name: xfer::Address = rx
        .recv_timeout(LIMIT)
        .expect("the child's name")
        .parse()
        .expect("a name");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        tokio::time::timeout(LIMIT, async {
            let node = Node::open().expect("client node");
            let mut client = EchoClient::new(xfer_tonic::channel(node, name.as_bytes()).await.expect("channel"));
            call(&mut client, 1, 1 << 20).await;
            let calls = (0..64u64).map(|id| {
                let mut client = client.clone();
                async move { call(&mut client, 100 + id, (id as usize * 7919) % (96 << 10)).await }
            });
            join_all(calls).await;
        })
        .await
        .expect("calls within the limit");
    });
    drop(child.stdin.take());
    let status = child.wait().expect("child exit");
    assert!(status.success(), "child server: {status}");
}
