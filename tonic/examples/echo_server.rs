//! The echo service over xfer, for `echo_client` in another process:
//!
//! ```text
//! XFER_TCP_ADDR=127.0.0.1 cargo run -p xfer-tonic --example echo_server
//! XFER_PROVIDER=shm cargo run -p xfer-tonic --example echo_server -- --publish /tmp/echo.xfer
//! ```
//!
//! prints its endpoint name (`echo server: provider tcp, name 0a...`) and
//! serves until killed; with `--publish PATH` it also writes the name
//! there, for `echo_client PATH` (over `shm`, names have no host or port).

use std::io::Write;

use xfer_tonic::echo::EchoServer;
use xfer_tonic::Node;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let node = Node::open()?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let _published = match args.as_slice() {
        [] => None,
        [flag, path] if flag == "--publish" => Some(xfer_tonic::publish(&node, path)?),
        _ => return Err("usage: echo_server [--publish PATH]".into()),
    };
    println!(
        "echo server: provider {}, name {}",
        node.provider(),
        xfer::Address::new(&node.name())?
    );
    std::io::stdout().flush()?;
    tonic::transport::Server::builder()
        .add_service(EchoServer)
        .serve_with_incoming(xfer_tonic::incoming(node))
        .await?;
    Ok(())
}
