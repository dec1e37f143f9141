//! xfer-tcp: the TCP provider.
//!
//! Reliable, connectionless endpoints (libfabric RDM) over non-blocking TCP
//! sockets on epoll: a connection per peer and direction made on first use,
//! eager messages up to the rendezvous threshold, receiver-driven rendezvous
//! above it. The wire format is versioned ([`wire`], docs/PROTOCOL.md).
#![deny(missing_docs)]

mod complete;
mod conn;
mod endpoint;
pub mod name;
mod rx;
mod sys;
pub mod wire;

use xfer_core::addr::Address;
use xfer_core::attr::EndpointAttr;
use xfer_core::error::{Error, Result};
use xfer_core::provider::{DomainProvider, EndpointProvider};

pub use endpoint::TcpEndpoint;

/// The TCP provider's domain. It holds no shared resources: each endpoint
/// owns its listening socket, connections and epoll set.
#[derive(Debug, Default)]
pub struct TcpDomain;

impl TcpDomain {
    /// Opens the domain; TCP is always available.
    pub fn open() -> Result<TcpDomain> {
        Ok(TcpDomain)
    }
}

impl DomainProvider for TcpDomain {
    fn name(&self) -> &'static str {
        "tcp"
    }

    fn check_address(&self, bytes: &[u8]) -> Result<Address> {
        name::TcpName::decode(bytes).map_err(|e| match e {
            name::NameError::WrongProvider(_) => Error::AddressNotAvailable,
            _ => Error::InvalidArgument(e.as_str()),
        })?;
        Address::new(bytes)
    }

    fn open_endpoint(&mut self, attr: &EndpointAttr) -> Result<Box<dyn EndpointProvider>> {
        Ok(Box::new(TcpEndpoint::open(attr)?))
    }
}
