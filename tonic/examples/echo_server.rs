//! The echo service over xfer, for `echo_client` in another process:
//!
//! ```text
//! XFER_TCP_ADDR=127.0.0.1 cargo run -p xfer-tonic --example echo_server
//! ```
//!
//! prints its endpoint name (`echo server: provider tcp, name 0a...`) and
//! serves until killed.

use std::io::Write;

use xfer_tonic::echo::EchoServer;
use xfer_tonic::Node;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let node = Node::open()?;
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
