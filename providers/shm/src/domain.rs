//! The `shm` provider: a domain whose endpoints are the RDM engine over
//! [`ShmTransport`], for peers on this host (same user, same network
//! namespace); RMA is served by the target's engine, checked against the
//! domain's key table, and once the target granted a key (its first
//! operation of each access served so), by one cross-memory-attach copy,
//! guarded by the target's fence (fence.rs). Endpoint names are [`PROVIDER_ID`] followed by the port's
//! abstract socket address.

use xfer_core::unstable::mr::keys::KeyTable;
use xfer_core::unstable::mr::Access;
use xfer_core::unstable::params::Params;
use xfer_core::unstable::provider::{DomainProvider, EndpointProvider};
use xfer_core::unstable::rdm::engine::Engine;
use xfer_core::{Address, EndpointAttr, Error, Result};

use std::sync::Arc;

use crate::config::ShmConfig;
use crate::fence::Fences;
use crate::transport::ShmTransport;

/// The first byte of every shm endpoint name (TCP's is 0x01, verbs' 0x02).
pub const PROVIDER_ID: u8 = 0x03;

/// Bytes of an shm endpoint name: the id, `xs`, a pid and a nonce.
const NAME_LEN: usize = 1 + 2 + 4 + 8;

/// The shm provider's domain.
#[derive(Debug)]
pub struct ShmDomain {
    params: Params,
    cfg: ShmConfig,
    /// Registrations, served to peers' RMA by the engine (random keys).
    keys: KeyTable,
    /// Its grants' epoch and its endpoints' target fences.
    fences: Arc<Fences>,
}

impl ShmDomain {
    /// A domain with the `XFER_SHM_*` settings of the environment.
    pub fn open() -> Result<ShmDomain> {
        Self::with_params(&Params::default())
    }

    /// A domain with the `shm.*` settings of `params` over the environment.
    pub fn with_params(params: &Params) -> Result<ShmDomain> {
        Ok(ShmDomain {
            params: params.clone(),
            cfg: ShmConfig::from_params(params)?,
            keys: KeyTable::default(),
            fences: Fences::new(),
        })
    }
}

impl DomainProvider for ShmDomain {
    fn name(&self) -> &'static str {
        "shm"
    }

    /// Core's RDM engine applies atomics at the target.
    fn atomics(&self) -> bool {
        true
    }

    fn check_address(&self, bytes: &[u8]) -> Result<Address> {
        match bytes.first() {
            Some(&PROVIDER_ID) if bytes.len() == NAME_LEN && &bytes[1..3] == b"xs" => Address::new(bytes),
            Some(&PROVIDER_ID) => Err(Error::InvalidArgument("not an shm endpoint name")),
            _ => Err(Error::AddressNotAvailable),
        }
    }

    fn open_endpoint(&mut self, attr: &EndpointAttr) -> Result<Box<dyn EndpointProvider>> {
        let cfg = match attr.params.under(ShmConfig::PREFIX).next() {
            Some(_) => ShmConfig::from_params(&self.params.overlaid(&attr.params))?,
            None => self.cfg.clone(),
        };
        if !cfg.enabled {
            return Err(Error::InvalidSetting(
                "shm.enabled=0: the shm provider has no other transport".into(),
            ));
        }
        let t = ShmTransport::open_serving(&cfg, self.fences.clone())?;
        Ok(Box::new(Engine::new(t, PROVIDER_ID, attr, cfg.eager_credit as u64)?))
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

    fn deregister(&mut self, key: u64) {
        deregister(&mut self.keys, &self.fences, key);
    }

    fn native_rma(&self, key: u64, access: Access) -> Option<(u64, u64)> {
        native_rma(&self.keys, self.cfg.cma, key, access)
    }

    fn grant_stamp(&self) -> u64 {
        self.fences.epoch()
    }
}

/// A domain's deregistration with shared-memory peers: the entry goes,
/// and if peers could reach the region, every grant is revoked before it
/// returns (no copy under an older grant can touch the memory after it).
pub fn deregister(keys: &mut KeyTable, fences: &Fences, key: u64) {
    let reachable = [Access::REMOTE_WRITE, Access::REMOTE_READ]
        .into_iter()
        .any(|a| keys.region(key, a).is_some());
    keys.remove(key);
    if reachable {
        fences.revoke();
    }
}

/// What a domain with shared-memory peers grants for `key` and `access`:
/// the registered region, where cross-memory attach is on (`cma`).
pub fn native_rma(keys: &KeyTable, cma: bool, key: u64, access: Access) -> Option<(u64, u64)> {
    if !cma {
        return None;
    }
    keys.region(key, access)
}
