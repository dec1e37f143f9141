//! The `tcp-rdm` provider: core's RDM engine over [`TcpTransport`]. Opened
//! only when asked for (`XFER_PROVIDER=tcp-rdm`) while the TCP provider
//! moves under the engine: it has the engine's semantics and the TCP
//! provider's listening-address choice, not yet its tuned data path.

use xfer_core::unstable::mr::keys::KeyTable;
use xfer_core::unstable::params::Params;
use xfer_core::unstable::provider::{DomainProvider, EndpointProvider};
use xfer_core::unstable::rdm::engine::Engine;
use xfer_core::{Address, EndpointAttr, Error, Result};

use super::{decode, TcpTransport};
use crate::attr::TcpAttr;

/// The first byte of every `tcp-rdm` endpoint name.
pub const PROVIDER_ID: u8 = 0x04;

/// The `tcp-rdm` provider's domain.
#[derive(Debug, Default)]
pub struct TcpRdmDomain {
    params: Params,
    keys: KeyTable,
}

impl TcpRdmDomain {
    /// A domain with the `tcp.*` settings of `params` over the environment.
    pub fn with_params(params: &Params) -> Result<TcpRdmDomain> {
        TcpAttr::from_params(params)?;
        Ok(TcpRdmDomain {
            params: params.clone(),
            keys: KeyTable::default(),
        })
    }
}

impl DomainProvider for TcpRdmDomain {
    fn name(&self) -> &'static str {
        "tcp-rdm"
    }

    /// Core's RDM engine applies atomics at the target.
    fn atomics(&self) -> bool {
        true
    }

    fn check_address(&self, bytes: &[u8]) -> Result<Address> {
        match bytes.split_first() {
            Some((&PROVIDER_ID, rest)) if decode(rest).is_some() => Address::new(bytes),
            Some((&PROVIDER_ID, _)) => Err(Error::InvalidArgument("not a tcp-rdm endpoint name")),
            _ => Err(Error::AddressNotAvailable),
        }
    }

    fn open_endpoint(&mut self, attr: &EndpointAttr) -> Result<Box<dyn EndpointProvider>> {
        let tcp = TcpAttr::from_params(&self.params.overlaid(&attr.params))?;
        let t = TcpTransport::open(&tcp)?;
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
