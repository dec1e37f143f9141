//! xfer-tcp: the TCP provider.
//!
//! Reliable, connectionless endpoints (libfabric RDM) over non-blocking TCP
//! sockets on epoll: core's RDM engine (matching, credit, rendezvous, the
//! peer table, RMA and atomics served by the target) over [`stream`], a
//! transport of one stream per connection carrying the engine's frames
//! (docs/PROTOCOL-RDM.md). What is TCP's own: where an endpoint listens
//! ([`iface`], [`addr`]), its name ([`name`]), socket options ([`attr`]),
//! and the stream's framing, hot-connection reads and write coalescing.
#![deny(missing_docs)]

pub mod addr;
pub mod attr;
pub mod iface;

pub mod name;
pub mod stream;
mod sys;

use xfer_core::unstable::addr::Address;
use xfer_core::unstable::attr::EndpointAttr;
use xfer_core::unstable::error::{Error, Result};
use xfer_core::unstable::mr::keys::KeyTable;
use xfer_core::unstable::params::Params;
use xfer_core::unstable::provider::{DomainProvider, EndpointProvider};
use xfer_core::unstable::rdm::engine::Engine;

pub use attr::TcpAttr;

/// The TCP provider's domain. Its one shared resource is the key table of
/// memory registrations, which its endpoints consult (through
/// `Ctx::domain`) to serve peers' RMA; each endpoint owns its listening
/// socket, connections and epoll set.
#[derive(Debug, Default)]
pub struct TcpDomain {
    keys: KeyTable,
    /// The domain's transport settings; each endpoint's own override them.
    params: Params,
}

/// The provider id of TCP: the first byte of its names and packed remote keys.
pub const PROVIDER_ID: u8 = 0x01;

impl TcpDomain {
    /// Opens the domain with settings from the environment; TCP is always
    /// available.
    pub fn open() -> Result<TcpDomain> {
        Ok(TcpDomain::default())
    }

    /// Opens the domain with the `tcp.*` settings of `params` for its
    /// endpoints (over the environment; an endpoint's own params override
    /// them). An unknown `tcp.*` key or a value that does not parse is
    /// refused here, with [`Error::InvalidSetting`] naming it.
    pub fn with_params(params: &Params) -> Result<TcpDomain> {
        TcpAttr::from_params(params)?;
        Ok(TcpDomain {
            params: params.clone(),
            ..TcpDomain::default()
        })
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

    /// Core's RDM engine applies atomics at the target.
    fn atomics(&self) -> bool {
        true
    }

    fn open_endpoint(&mut self, attr: &EndpointAttr) -> Result<Box<dyn EndpointProvider>> {
        let tcp = TcpAttr::from_params(&self.params.overlaid(&attr.params))?;
        if attr.rndv_threshold > stream::MAX_PAYLOAD {
            // An eager message is one frame: a larger threshold would be
            // honoured only up to it, silently.
            return Err(Error::InvalidArgument(
                "rendezvous threshold over TCP's largest frame (256 KiB)",
            ));
        }
        let t = stream::TcpTransport::open(&tcp)?;
        Ok(Box::new(Engine::new(t, PROVIDER_ID, attr, tcp.eager_credit as u64)?))
    }

    fn provider_id(&self) -> u8 {
        PROVIDER_ID
    }

    fn key_table(&self) -> Option<&KeyTable> {
        Some(&self.keys)
    }

    fn key_table_mut(&mut self) -> Option<&mut KeyTable> {
        Some(&mut self.keys)
    }
}
