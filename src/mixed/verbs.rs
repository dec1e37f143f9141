//! The `shm+verbs` provider: one RDM engine endpoint over a [`Pair`] of the
//! shared-memory transport and verbs under the engine (`verbs`'s
//! transport), so peers on this host are served over shared memory and
//! every other peer over an RC queue pair. First in the order of
//! preference where a verbs device is usable.
//!
//! Its endpoint name is [`SHM_VERBS_ID`] and the pair's address, whose
//! network part is a `verbs` transport address (4, the IPv4 address,
//! the rdma_cm port, the nonce).
//!
//! [`Pair`]: xfer_core::unstable::rdm::pair::Pair

use xfer_core::unstable::params::Params;
use xfer_core::unstable::provider::MrKeys;
use xfer_core::unstable::provider::{DomainProvider, EndpointProvider};
use xfer_core::unstable::rdm::pair::Parts;
use xfer_core::{Access, Address, EndpointAttr, Error, Result};
use xfer_shm::ShmConfig;
use xfer_verbs::VerbsDomain;

/// The first byte of every `shm+verbs` endpoint name.
pub const SHM_VERBS_ID: u8 = 0x07;

/// The provider's name.
pub const SHM_VERBS: &str = "shm+verbs";

/// The `shm+verbs` provider's domain: the verbs device, protection domain
/// and settings `verbs` would use, and the `shm.*` settings. Its
/// registrations are the verbs domain's (a key table entry and, for remote
/// access, an ibv MR), so a region is reached by an shm peer in software
/// and by a verbs peer's device.
#[derive(Debug)]
pub struct ShmVerbsDomain {
    params: Params,
    verbs: VerbsDomain,
}

impl ShmVerbsDomain {
    /// A domain with the `shm.*` and `verbs.*` settings of `params` over
    /// the environment, on the device `verbs` would choose.
    pub fn with_params(params: &Params) -> Result<ShmVerbsDomain> {
        ShmConfig::from_params(params)?;
        Ok(ShmVerbsDomain {
            params: params.clone(),
            verbs: VerbsDomain::with_params(params)?,
        })
    }

    /// Sets who does remote atomics on its regions, before any is
    /// registered: `auto` is `cpu` here (its shared-memory peers are served
    /// by the target's CPU, which a device's atomics are not atomic with);
    /// `device` has its verbs peers' devices do them (see
    /// `VerbsDomain::set_atomic_mode`).
    pub fn set_atomic_mode(&mut self, mode: xfer_core::AtomicMode) -> Result<()> {
        self.verbs.set_atomic_mode(mode, false)
    }
}

/// The pair address inside an `shm+verbs` name, checked part by part.
pub(super) fn parts(name: &[u8]) -> Option<Parts<'_>> {
    super::parts(name, |verbs| xfer_verbs::transport::decode(verbs).is_some())
}

impl DomainProvider for ShmVerbsDomain {
    fn name(&self) -> &'static str {
        SHM_VERBS
    }

    /// Core's RDM engine applies atomics at the target (or, in device
    /// mode, has its verbs peers' devices do them).
    fn atomics(&self) -> bool {
        true
    }

    fn atomic_caps(&self) -> xfer_core::AtomicCaps {
        self.verbs.atomic_caps()
    }

    fn check_address(&self, bytes: &[u8]) -> Result<Address> {
        match bytes.split_first() {
            Some((&SHM_VERBS_ID, rest)) if parts(rest).is_some() => Address::new(bytes),
            Some((&SHM_VERBS_ID, _)) => Err(Error::InvalidArgument("not an shm+verbs endpoint name")),
            None => Err(Error::InvalidArgument("empty name")),
            _ => Err(Error::AddressNotAvailable),
        }
    }

    fn open_endpoint(&mut self, attr: &EndpointAttr) -> Result<Box<dyn EndpointProvider>> {
        let second = self.verbs.open_transport(attr)?;
        let params = self.params.overlaid(&attr.params);
        super::open_endpoint(
            &params,
            second,
            self.verbs.eager_credit(),
            SHM_VERBS,
            SHM_VERBS_ID,
            attr,
            // The verbs domain's grants are for its device: shm peers' RMA
            // stays in frames.
            None,
        )
    }

    fn provider_id(&self) -> u8 {
        SHM_VERBS_ID
    }

    fn register(&mut self, addr: usize, len: usize, access: Access) -> Result<MrKeys> {
        self.verbs.register(addr, len, access)
    }

    fn deregister(&mut self, key: u64) {
        self.verbs.deregister(key)
    }

    fn remote_target(&self, key: u64, addr: u64, len: u64, access: Access) -> Result<*mut u8> {
        self.verbs.remote_target(key, addr, len, access)
    }

    fn native_rma(&self, key: u64, access: Access) -> Option<(u64, u64)> {
        self.verbs.native_rma(key, access)
    }

    fn native_atomic(&self, key: u64) -> Option<(u64, u64)> {
        self.verbs.native_atomic(key)
    }

    fn device_atomics(&self) -> bool {
        self.verbs.device_atomics()
    }
}
