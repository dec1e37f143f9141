//! tonic over xfer-tonic: a server node and a client node (two endpoints
//! over real sockets, TCP on 127.0.0.1 unless `XFER_TCP_ADDR` or
//! `XFER_PROVIDER` say otherwise), real gRPC unary calls from empty to
//! 1 MiB, 64 calls outstanding at once, every answer checked; and the byte
//! stream underneath: order kept across many writes, shutdown read as end
//! of file.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::Service;
use xfer_tonic::echo::{EchoClient, EchoRequest, EchoServer};
use xfer_tonic::{Connector, Node, CHUNK_MAX};

/// Bound on each test's wait: nothing here takes a second when it works.
const LIMIT: Duration = Duration::from_secs(60);

fn env() {
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
        for (id, len) in [0, 1, 100, CHUNK_MAX - 1, CHUNK_MAX, CHUNK_MAX + 1, 64 << 10, 1 << 20]
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
                let len = (id as usize * 977) % (3 * CHUNK_MAX);
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
        // Writes of many sizes, flushed at odd points: the reader must see
        // every byte once, in order.
        let data = pattern(3 << 20, 5);
        let mut at = 0;
        for (i, len) in (1..).map(|i: usize| (i * 7919) % (2 * CHUNK_MAX + 3) + 1).enumerate() {
            let end = (at + len).min(data.len());
            io.write_all(&data[at..end]).await.expect("write");
            if i % 5 == 0 {
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
