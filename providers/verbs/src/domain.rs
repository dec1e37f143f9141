//! The verbs provider's domain: one device context and protection domain,
//! the MR cache that rendezvous and RMA register user buffers through, and
//! the user's own memory registrations.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, MutexGuard};

use xfer_core::unstable::addr::Address;
use xfer_core::unstable::attr::EndpointAttr;
use xfer_core::unstable::mr::{Access, MrCache, MrCacheAttr};
use xfer_core::unstable::provider::{DomainProvider, EndpointProvider, MrKeys};
use xfer_core::{Error, Result};

use crate::device::{Context, DeviceAttr};
use crate::endpoint::VerbsEndpoint;
use crate::mr::{Mr, VerbsRegistrar};
use crate::name::{VerbsName, PROVIDER_ID};
use crate::pd::Pd;
use crate::select::choose;
use crate::VerbsAttr;

/// What a domain's endpoints share: the device, its protection domain and
/// the registration cache. Every user is under the core domain lock, so the
/// cache's mutex is never contended.
pub(crate) struct DomainRes {
    pub(crate) pd: Arc<Pd>,
    pub(crate) attr: VerbsAttr,
    /// The address endpoints listen on.
    pub(crate) ip: Ipv4Addr,
    pub(crate) dev: DeviceAttr,
    cache: Mutex<MrCache<VerbsRegistrar>>,
}

impl DomainRes {
    /// The registration cache.
    pub(crate) fn cache(&self) -> MutexGuard<'_, MrCache<VerbsRegistrar>> {
        // A panic while holding it can only come from the cache itself; its
        // state is still consistent enough to release registrations.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The verbs provider's domain.
pub struct VerbsDomain {
    res: Arc<DomainRes>,
    /// Registrations made through [`DomainProvider::register`], by rkey.
    regs: HashMap<u64, Mr>,
}

impl std::fmt::Debug for VerbsDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsDomain")
            .field("device", &self.device())
            .field("addr", &self.res.ip)
            .finish()
    }
}

impl VerbsDomain {
    /// Opens a domain with settings from the environment (`XFER_VERBS_*`).
    pub fn open() -> Result<VerbsDomain> {
        Self::with_attr(VerbsAttr::from_env())
    }

    /// Opens a domain with the `verbs.*` settings of `params` over the
    /// environment ([`VerbsAttr::from_params`]; a bad key or value is
    /// [`Error::InvalidSetting`] naming it).
    pub fn with_params(params: &xfer_core::Params) -> Result<VerbsDomain> {
        Self::with_attr(VerbsAttr::from_params(params)?)
    }

    /// Opens a domain on the device `attr` selects ([`crate::choose`], as
    /// `xfer::info` reports it); unavailable, [`Error::NoProvider`] with the
    /// same reason the report gives.
    pub fn with_attr(attr: VerbsAttr) -> Result<VerbsDomain> {
        let sel = choose(&attr).map_err(|why| Error::NoProvider(why.to_string()))?;
        let ctx = Context::open(&sel.device)?;
        let ip = sel.ip;
        let dev = ctx.query_device()?;
        let pd = Pd::new(&ctx)?;
        let cache = MrCache::new(MrCacheAttr::from_env(), VerbsRegistrar::new(&pd));
        tracing::info!(device = %ctx.name(), port = attr.port, %ip, "verbs domain opened");
        Ok(VerbsDomain {
            res: Arc::new(DomainRes {
                pd,
                attr,
                ip,
                dev,
                cache: Mutex::new(cache),
            }),
            regs: HashMap::new(),
        })
    }

    /// The device's name.
    pub fn device(&self) -> &str {
        self.res.pd.context().name()
    }

    /// The address endpoints listen on.
    pub fn addr(&self) -> Ipv4Addr {
        self.res.ip
    }

    /// The settings in effect.
    pub fn attr(&self) -> &VerbsAttr {
        &self.res.attr
    }
}

impl DomainProvider for VerbsDomain {
    fn name(&self) -> &'static str {
        "verbs"
    }

    fn check_address(&self, bytes: &[u8]) -> Result<Address> {
        VerbsName::decode(bytes)?;
        Address::new(bytes)
    }

    fn open_endpoint(&mut self, attr: &EndpointAttr) -> Result<Box<dyn EndpointProvider>> {
        Ok(Box::new(VerbsEndpoint::open(self.res.clone(), attr)?))
    }

    fn provider_id(&self) -> u8 {
        PROVIDER_ID
    }

    fn register(&mut self, addr: usize, len: usize, access: Access) -> Result<MrKeys> {
        if len == 0 {
            // Nothing to pin: zero-length RDMA operations access no memory
            // and the device checks no key for them (IB spec C9-88).
            return Ok(MrKeys { desc: 0, key: 0 });
        }
        let mr = Mr::register(&self.res.pd, addr, len, access)?;
        let keys = MrKeys {
            desc: u64::from(mr.lkey()),
            key: u64::from(mr.rkey()),
        };
        if let Some(old) = self.regs.insert(keys.key, mr) {
            xfer_core::warn_limited!(rkey = keys.key, ?old, "device reused a live rkey");
        }
        Ok(keys)
    }

    fn deregister(&mut self, key: u64) {
        if self.regs.remove(&key).is_none() && key != 0 {
            xfer_core::warn_limited!(key, "deregistering an unknown verbs registration");
        }
    }
}
