//! Calls `echo_server` (another process) over xfer and checks every reply:
//!
//! ```text
//! XFER_TCP_ADDR=127.0.0.1 cargo run -p xfer-tonic --example echo_client -- NAME
//! XFER_PROVIDER=shm cargo run -p xfer-tonic --example echo_client -- /tmp/echo.xfer
//! ```
//!
//! with the name the server printed, or the path it published its name at
//! (`echo_server --publish PATH`): unary calls from empty to 1 MiB, then
//! 64 calls outstanding at once.

use futures::future::try_join_all;
use xfer_tonic::echo::{EchoClient, EchoRequest};
use xfer_tonic::Node;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(31).wrapping_add(seed) as u8)
        .collect()
}

async fn call(client: &mut EchoClient<tonic::transport::Channel>, id: u64, len: usize) -> Res<()> {
    let payload = pattern(len, id);
    let reply = client
        .echo(EchoRequest {
            id,
            payload: payload.clone(),
        })
        .await?
        .into_inner();
    if reply.id != id || reply.payload != payload {
        return Err(format!("call {id} of {len} bytes: wrong reply").into());
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Res<()> {
    let server = std::env::args()
        .nth(1)
        .ok_or("usage: echo_client SERVER_NAME|PATH (as echo_server prints it, or where it published it)")?;
    let node = Node::open()?;
    // A name is hex digits; anything else is taken as a path.
    let channel = match server.parse::<xfer::Address>() {
        Ok(name) => xfer_tonic::channel(node, name.as_bytes()).await?,
        Err(_) => xfer_tonic::channel_at(node, server).await?,
    };
    let mut client = EchoClient::new(channel);
    for (id, len) in [0, 1, 1000, 100_000, 1 << 20].into_iter().enumerate() {
        call(&mut client, id as u64, len).await?;
        println!("echo client: {len} bytes ok");
    }
    let calls = (0..64u64).map(|id| {
        let mut client = client.clone();
        async move { call(&mut client, 100 + id, 1000 + id as usize * 100).await }
    });
    try_join_all(calls).await?;
    println!("echo client: 64 calls outstanding ok");
    Ok(())
}
