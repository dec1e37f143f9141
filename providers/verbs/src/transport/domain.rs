//! The `verbs-rdm` provider: core's RDM engine over [`VerbsTransport`].
//! Opened only when asked for (`XFER_PROVIDER=verbs-rdm`) while the verbs
//! provider moves under the engine: the device and address choice, the
//! protection domain and the `XFER_VERBS_*` settings are the verbs
//! provider's; rendezvous payloads are read by RDMA READ from buffers
//! registered through the domain's MR cache; RMA and atomics are served by
//! the target's engine against the domain's key table, not yet by the
//! device.

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use xfer_core::unstable::mr::keys::KeyTable;
use xfer_core::unstable::mr::{MrCache, MrCacheAttr};
use xfer_core::unstable::params::Params;
use xfer_core::unstable::provider::{DomainProvider, EndpointProvider};
use xfer_core::unstable::rdm::engine::Engine;
use xfer_core::{Address, EndpointAttr, Error, Result};

use super::{decode, SharedCache, VerbsTransport};
use crate::device::{Context, DeviceAttr};
use crate::mr::VerbsRegistrar;
use crate::pd::Pd;
use crate::select::choose;
use crate::VerbsAttr;

/// The first byte of every `verbs-rdm` endpoint name.
pub const PROVIDER_ID: u8 = 0x06;

/// The `verbs-rdm` provider's domain.
pub struct VerbsRdmDomain {
    pd: Arc<Pd>,
    dev: DeviceAttr,
    /// The largest RDMA READ a pull posts (`read_max`, at most the port's
    /// largest message).
    max_msg: u32,
    ip: Ipv4Addr,
    attr: VerbsAttr,
    keys: KeyTable,
    cache: SharedCache,
}

impl std::fmt::Debug for VerbsRdmDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsRdmDomain")
            .field("device", &self.pd.context().name())
            .field("addr", &self.ip)
            .finish()
    }
}

impl VerbsRdmDomain {
    /// A domain with the `verbs.*` settings of `params` over the
    /// environment, on the device the verbs provider would choose.
    pub fn with_params(params: &Params) -> Result<VerbsRdmDomain> {
        let attr = VerbsAttr::from_params(params)?;
        let sel = choose(&attr).map_err(|why| Error::NoProvider(why.to_string()))?;
        let ctx = Context::open(&sel.device)?;
        let dev = ctx.query_device()?;
        let port_max = ctx.query_port(sel.port)?.max_msg_sz;
        let max_msg = match u32::try_from(attr.read_max) {
            Ok(0) => port_max,
            Ok(n) => n.min(port_max),
            Err(_) => port_max,
        };
        let pd = Pd::new(&ctx)?;
        let cache = MrCache::new(MrCacheAttr::from_env(), VerbsRegistrar::new(&pd));
        tracing::info!(device = %ctx.name(), port = attr.port, ip = %sel.ip, "verbs-rdm domain opened");
        Ok(VerbsRdmDomain {
            pd,
            dev,
            max_msg,
            ip: sel.ip,
            attr,
            keys: KeyTable::default(),
            cache: Arc::new(Mutex::new(cache)),
        })
    }

    /// The transport under one endpoint of this domain, for `attr` (whose
    /// params may not carry `verbs.*` settings: those are the domain's).
    /// A pair of transports (`shm+verbs`) takes it as its second.
    pub fn open_transport(&self, attr: &EndpointAttr) -> Result<VerbsTransport> {
        if let Some((key, _)) = attr.params.under(VerbsAttr::PREFIX).next() {
            return Err(Error::InvalidSetting(
                format!("{key} is a verbs domain setting: set it in the domain's attributes (DomainAttr::params)")
                    .into(),
            ));
        }
        VerbsTransport::open(
            &self.pd,
            &self.dev,
            self.max_msg,
            self.ip,
            &self.attr,
            self.cache.clone(),
        )
    }

    /// The eager credit each peer of its endpoints gets
    /// (`XFER_VERBS_EAGER_CREDIT`).
    pub fn eager_credit(&self) -> u64 {
        self.attr.eager_credit
    }
}

impl DomainProvider for VerbsRdmDomain {
    fn name(&self) -> &'static str {
        "verbs-rdm"
    }

    /// Core's RDM engine applies atomics at the target.
    fn atomics(&self) -> bool {
        true
    }

    fn check_address(&self, bytes: &[u8]) -> Result<Address> {
        match bytes.split_first() {
            Some((&PROVIDER_ID, rest)) if decode(rest).is_some() => Address::new(bytes),
            Some((&PROVIDER_ID, _)) => Err(Error::InvalidArgument("not a verbs-rdm endpoint name")),
            None => Err(Error::InvalidArgument("empty name")),
            _ => Err(Error::AddressNotAvailable),
        }
    }

    fn open_endpoint(&mut self, attr: &EndpointAttr) -> Result<Box<dyn EndpointProvider>> {
        let t = self.open_transport(attr)?;
        Ok(Box::new(Engine::new(t, PROVIDER_ID, attr, self.attr.eager_credit)?))
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
