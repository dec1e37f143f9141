//! tonic over xfer over shared memory: nodes opened on the `shm` provider
//! whatever `XFER_PROVIDER` says, real gRPC calls (unary from empty to
//! 1 MiB, 64 outstanding, a bidirectional stream in lock step and in a
//! burst), every payload checked; a server in a child process (this binary
//! again) found by the path it published its name at; a client that
//! reconnects to a server restarted at that path; a name withdrawn only by
//! its own publisher; and what a client gets from a path with no server
//! behind it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::channel::mpsc;
use futures::future::join_all;
use futures::{SinkExt, StreamExt};
use tonic::transport::Channel;
use xfer_tonic::echo::{EchoClient, EchoRequest, EchoServer};
use xfer_tonic::Node;

/// Bound on each test's wait: nothing here takes a second when it works.
const LIMIT: Duration = Duration::from_secs(60);

fn shm_node() -> Arc<Node> {
    let node = Node::open_with(&xfer::DomainAttr::with_provider("shm")).expect("shm node");
    assert_eq!(node.provider(), "shm");
    node
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(31).wrapping_add(seed) as u8)
        .collect()
}

/// A path of this test's own in the temporary directory.
fn temp_path(what: &str) -> PathBuf {
    std::env::temp_dir().join(format!("xfer-tonic-{what}-{}", std::process::id()))
}

async fn call(client: &mut EchoClient<Channel>, id: u64, len: usize) {
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

const SIZES: [usize; 8] = [0, 1, 100, 4 << 10, 64 << 10, (256 << 10) + 1, 1 << 20, 1 << 20];

/// Unary calls of every size, then 64 at once.
async fn unary(client: &mut EchoClient<Channel>) {
    for (id, len) in SIZES.into_iter().enumerate() {
        call(client, id as u64, len).await;
    }
    let calls = (0..64u64).map(|i| {
        let mut client = client.clone();
        async move { call(&mut client, 100 + i, (i as usize * 7919) % (96 << 10)).await }
    });
    join_all(calls).await;
}

/// One `EchoStream`: each request sent only once the previous reply is in
/// (the stream carries both ways while open), then a burst of requests
/// sent before any reply is read; every reply checked in order.
async fn streaming(client: &mut EchoClient<Channel>) {
    let (mut tx, rx) = mpsc::channel::<EchoRequest>(4);
    let mut replies = client.echo_stream(rx).await.expect("stream opened").into_inner();
    for (id, len) in SIZES.into_iter().enumerate() {
        let id = id as u64;
        let payload = pattern(len, id);
        tx.send(EchoRequest {
            id,
            payload: payload.clone(),
        })
        .await
        .expect("request sent");
        let reply = replies.next().await.expect("a reply").expect("reply ok");
        assert_eq!(reply.id, id);
        assert!(reply.payload == payload, "stream reply {id} of {len} bytes differs");
    }
    let burst: Vec<usize> = (0..200).map(|i| (i * 7919) % (40 << 10)).collect();
    let sender = {
        let burst = burst.clone();
        tokio::spawn(async move {
            for (i, len) in burst.into_iter().enumerate() {
                let id = 1000 + i as u64;
                tx.send(EchoRequest {
                    id,
                    payload: pattern(len, id),
                })
                .await
                .expect("request sent");
            }
            // Dropping the sender ends the request stream.
        })
    };
    for (i, len) in burst.into_iter().enumerate() {
        let id = 1000 + i as u64;
        let reply = replies.next().await.expect("a reply").expect("reply ok");
        assert_eq!(reply.id, id, "stream replies out of order");
        assert!(reply.payload == pattern(len, id), "stream reply {id} differs");
    }
    sender.await.expect("sender task");
    assert!(
        replies.next().await.is_none(),
        "the server ends its replies with the requests"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_and_streaming_calls_over_shm() {
    tokio::time::timeout(LIMIT, async {
        let server = shm_node();
        let name = server.name();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(EchoServer)
                .serve_with_incoming(xfer_tonic::incoming(server)),
        );
        let mut client = EchoClient::new(xfer_tonic::channel(shm_node(), name).await.expect("channel"));
        unary(&mut client).await;
        streaming(&mut client).await;
        // A unary call on the connection the stream used.
        call(&mut client, 9999, 1 << 20).await;
    })
    .await
    .expect("calls within the limit");
}

/// The server of [`a_server_in_another_process_found_by_its_path`], run in
/// a child process (this test binary again, `XFER_TONIC_PUBLISH` naming the
/// path): publishes its name there, serves until its standard input closes,
/// then withdraws the name. Ignored: only that test runs it.
#[test]
#[ignore = "the child process of a_server_in_another_process_found_by_its_path"]
fn child_publishing_server() {
    let Some(path) = std::env::var_os("XFER_TONIC_PUBLISH") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let node = shm_node();
        let published = xfer_tonic::publish(&node, &path).expect("publish");
        let serve = tonic::transport::Server::builder()
            .add_service(EchoServer)
            .serve_with_incoming(xfer_tonic::incoming(node));
        let stdin_closed = tokio::task::spawn_blocking(|| std::io::copy(&mut std::io::stdin(), &mut std::io::sink()));
        tokio::select! {
            r = serve => r.expect("serve"),
            _ = stdin_closed => {}
        }
        drop(published);
    });
}

#[test]
fn a_server_in_another_process_found_by_its_path() {
    use std::process::{Command, Stdio};

    let path = temp_path("published");
    let _ = std::fs::remove_file(&path);
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "child_publishing_server", "--ignored", "--test-threads=1"])
        .env("XFER_TONIC_PUBLISH", &path)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("child server");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        tokio::time::timeout(LIMIT, async {
            // The file appears, whole, once the child's endpoint is open.
            while !path.exists() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let channel = xfer_tonic::channel_at(shm_node(), &path).await.expect("channel");
            let mut client = EchoClient::new(channel);
            unary(&mut client).await;
            streaming(&mut client).await;
        })
        .await
        .expect("calls within the limit");
    });
    drop(child.stdin.take());
    let status = child.wait().expect("child exit");
    assert!(status.success(), "child server: {status}");
    assert!(!path.exists(), "the server's name is withdrawn when it stops");
}

#[tokio::test(flavor = "current_thread")]
async fn a_path_without_a_server_is_a_clear_error() {
    let path = temp_path("nothing");
    let _ = std::fs::remove_file(&path);
    let err = xfer_tonic::lookup(&path).expect_err("no file");
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);

    std::fs::write(&path, "not a name\n").expect("write");
    let err = xfer_tonic::lookup(&path).expect_err("garbage");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);

    // A name left by a server that has gone (its file not withdrawn, as
    // after a crash): connecting is refused rather than waiting for an
    // answer that cannot come.
    let gone = shm_node();
    let published = xfer_tonic::publish(&gone, &path).expect("publish");
    std::mem::forget(published);
    drop(gone);
    // Well within the wait for an answer (CONNECT_TIMEOUT): the refused
    // hello ends it.
    let bound = xfer_tarpc::CONNECT_TIMEOUT / 3;
    let got = tokio::time::timeout(bound, xfer_tonic::channel_at(shm_node(), &path))
        .await
        .expect("connecting to a server that has gone fails at once");
    let err = got.expect_err("connecting to a server that has gone must fail");
    let refused = std::iter::successors(Some(&err as &dyn std::error::Error), |e| e.source())
        .filter_map(|e| e.downcast_ref::<std::io::Error>())
        .any(|e| e.kind() == std::io::ErrorKind::ConnectionRefused);
    assert!(refused, "a refused connection, not {err:?}");
    let _ = std::fs::remove_file(&path);
}

/// A server node serving the echo service, its name published at `path`,
/// until the sender is dropped or sent on (tonic then shuts it down: its
/// connections get a GOAWAY and close).
fn serve_published(
    path: &std::path::Path,
) -> (
    tokio::task::JoinHandle<()>,
    futures::channel::oneshot::Sender<()>,
    xfer_tonic::Published,
) {
    let node = shm_node();
    let published = xfer_tonic::publish(&node, path).expect("publish");
    let (stop, stopped) = futures::channel::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(EchoServer)
            .serve_with_incoming_shutdown(xfer_tonic::incoming(node), async {
                let _ = stopped.await;
            })
            .await
            .expect("serve");
    });
    (task, stop, published)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_at_a_path_reaches_the_server_restarted_there() {
    let path = temp_path("restart");
    tokio::time::timeout(LIMIT, async {
        let (first, stop, published) = serve_published(&path);
        let mut client = EchoClient::new(xfer_tonic::channel_at(shm_node(), &path).await.expect("channel"));
        call(&mut client, 1, 1000).await;

        // The first server stops (its connection closes) and a new process
        // would have a new name: a second server publishes its own there.
        drop(stop);
        first.await.expect("first server stopped");
        drop(published);
        let (second, stop, _published) = serve_published(&path);

        // tonic fails the calls made while it notices the connection is
        // gone, then reconnects through the connector, which reads the
        // path again.
        let mut id = 2;
        loop {
            let payload = pattern(64 << 10, id);
            match client
                .echo(EchoRequest {
                    id,
                    payload: payload.clone(),
                })
                .await
            {
                Ok(reply) => {
                    let reply = reply.into_inner();
                    assert_eq!(reply.id, id);
                    assert!(reply.payload == payload, "reply {id} differs");
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
            id += 1;
        }
        call(&mut client, 9999, 1 << 20).await;
        drop(stop);
        second.await.expect("second server stopped");
    })
    .await
    .expect("the restarted server answers within the limit");
}

#[tokio::test(flavor = "current_thread")]
async fn a_name_is_withdrawn_only_by_its_publisher() {
    let path = temp_path("withdraw");
    let (a, b) = (shm_node(), shm_node());
    let first = xfer_tonic::publish(&a, &path).expect("publish a");
    assert_eq!(xfer_tonic::lookup(&path).expect("a's name"), a.name());
    let second = xfer_tonic::publish(&b, &path).expect("publish b");
    assert_eq!(xfer_tonic::lookup(&path).expect("b's name"), b.name());
    // The first server stopping leaves the second one's name in place.
    drop(first);
    assert_eq!(xfer_tonic::lookup(&path).expect("still b's name"), b.name());
    drop(second);
    assert!(!path.exists(), "the last publisher's drop removes the file");
}
