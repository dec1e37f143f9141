//! The `verbs` provider: core's RDM engine over [`VerbsTransport`]. The
//! device and address choice ([`choose`]), the protection domain and the
//! `XFER_VERBS_*` settings are the domain's; rendezvous payloads are read by RDMA READ from buffers
//! registered through the domain's MR cache. A region registered with
//! remote access is also an ibv MR, whose rkey its remote key carries
//! (`fold_rkey`): once the target's engine granted a key, an initiator's
//! RMA on it goes by RDMA WRITE and READ; the first one, and what the
//! device path cannot do, is served by the target's engine against the
//! domain's key table.
//!
//! Atomics follow the domain's atomic mode ([`VerbsDomain::set_atomic_mode`],
//! `XFER_ATOMIC_MODE`): in `cpu` the target's engine applies them; in
//! `device` a region registered with remote read and write is also
//! registered with remote atomic access, the target's engine grants it to
//! an initiator's device before its first atomic there and applies none on
//! it, and the initiator does them all by `IBV_WR_ATOMIC_*`.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use xfer_core::unstable::mr::keys::KeyTable;
use xfer_core::unstable::mr::{MrCache, MrCacheAttr};
use xfer_core::unstable::params::Params;
use xfer_core::unstable::provider::{DomainProvider, EndpointProvider};
use xfer_core::unstable::rdm::engine::Engine;
use xfer_core::{Address, EndpointAttr, Error, Result};

use super::pull::fold_rkey;
use super::{decode, SharedCache, VerbsTransport};
use crate::device::{Context, DeviceAttr};
use crate::mr::{Mr, VerbsRegistrar};
use crate::pd::Pd;
use crate::select::choose;
use crate::VerbsAttr;
use xfer_core::unstable::provider::MrKeys;
use xfer_core::{Access, AtomicCaps, AtomicMode};

/// The first byte of every `verbs` endpoint name.
pub const PROVIDER_ID: u8 = 0x06;

/// The `verbs` provider's domain.
pub struct VerbsDomain {
    pd: Arc<Pd>,
    dev: DeviceAttr,
    /// The largest RDMA READ a pull posts (`read_max`, at most the port's
    /// largest message).
    max_msg: u32,
    ip: Ipv4Addr,
    attr: VerbsAttr,
    keys: KeyTable,
    /// The device's registrations of regions with remote access, by key.
    mrs: HashMap<u64, Mr>,
    /// Who does atomics on its regions (`Cpu` or `Device`).
    atomic_mode: AtomicMode,
    /// Keys whose registration has remote atomic access (device mode).
    atomic_keys: std::collections::HashSet<u64>,
    cache: SharedCache,
}

impl std::fmt::Debug for VerbsDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsDomain")
            .field("device", &self.pd.context().name())
            .field("addr", &self.ip)
            .finish()
    }
}

impl VerbsDomain {
    /// A domain with the `verbs.*` settings of `params` over the
    /// environment, on the device the verbs provider would choose.
    pub fn with_params(params: &Params) -> Result<VerbsDomain> {
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
        tracing::info!(device = %ctx.name(), port = attr.port, ip = %sel.ip, "verbs domain opened");
        Ok(VerbsDomain {
            pd,
            dev,
            max_msg,
            ip: sel.ip,
            attr,
            keys: KeyTable::default(),
            mrs: HashMap::new(),
            atomic_mode: AtomicMode::Cpu,
            atomic_keys: Default::default(),
            cache: Arc::new(Mutex::new(cache)),
        })
    }

    /// Sets who does remote atomics on its regions, before any is
    /// registered: `auto` is `device` when verbs is the domain's only
    /// transport (`alone`; not under `shm+verbs`, whose shared-memory peers
    /// the target's CPU serves) and the device has atomics, else `cpu`.
    /// `device` on a device without atomics (`atomic_cap` none) is
    /// [`Error::NotSupported`].
    pub fn set_atomic_mode(&mut self, mode: AtomicMode, alone: bool) -> Result<()> {
        self.atomic_mode = match mode {
            AtomicMode::Device if !self.dev.has_atomics() => {
                return Err(Error::NotSupported(
                    "XFER_ATOMIC_MODE=device: the verbs device has no remote atomics (atomic_cap none)",
                ))
            }
            AtomicMode::Auto if alone && self.dev.has_atomics() => AtomicMode::Device,
            AtomicMode::Device => AtomicMode::Device,
            _ => AtomicMode::Cpu,
        };
        tracing::debug!(mode = %self.atomic_mode, atomic_cap = self.dev.atomic_cap_name(), "verbs atomic mode");
        Ok(())
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

impl DomainProvider for VerbsDomain {
    fn name(&self) -> &'static str {
        "verbs"
    }

    /// Core's RDM engine applies atomics at the target, or has the
    /// initiators' devices do them (device mode).
    fn atomics(&self) -> bool {
        true
    }

    fn atomic_caps(&self) -> AtomicCaps {
        AtomicCaps::new(self.atomic_mode, Some(self.dev.atomic_cap_name()))
    }

    fn check_address(&self, bytes: &[u8]) -> Result<Address> {
        match bytes.split_first() {
            Some((&PROVIDER_ID, rest)) if decode(rest).is_some() => Address::new(bytes),
            Some((&PROVIDER_ID, _)) => Err(Error::InvalidArgument("not a verbs endpoint name")),
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

    /// A key-table entry, and for remote access an ibv MR whose rkey the
    /// key carries; a region the device refuses is served in software.
    fn register(&mut self, addr: usize, len: usize, access: Access) -> Result<MrKeys> {
        let remote = access.contains(Access::REMOTE_READ) || access.contains(Access::REMOTE_WRITE);
        // Device atomics read and write the word: a region allowing both
        // is the device's; the target's CPU serves atomics on any other.
        let atomic =
            self.atomic_mode == AtomicMode::Device && access.contains(Access::REMOTE_READ | Access::REMOTE_WRITE);
        let mr = match (remote, len) {
            (false, _) | (_, 0) => None,
            _ if atomic => Mr::register_atomic(&self.pd, addr, len, access)
                .map_err(|e| xfer_core::warn_limited!(error = %e, len, "verbs: a region the device cannot register is served in software"))
                .ok(),
            _ => Mr::register(&self.pd, addr, len, access)
                .map_err(|e| xfer_core::warn_limited!(error = %e, len, "verbs: a region the device cannot register is served in software"))
                .ok(),
        };
        let Some(mr) = mr else {
            return self.keys.insert(addr, len, access);
        };
        let rkey = mr.rkey();
        let key = self.keys.insert_with(addr, len, access, |r| fold_rkey(rkey, r))?;
        self.mrs.insert(key, mr);
        if atomic {
            self.atomic_keys.insert(key);
        }
        Ok(MrKeys { desc: key, key })
    }

    fn deregister(&mut self, key: u64) {
        self.keys.remove(key);
        self.atomic_keys.remove(&key);
        // Dropped after the entry: the device refuses the rkey from now on.
        self.mrs.remove(&key);
    }

    /// Regions the device does not serve (no MR, or a peer's first
    /// access before its grant) are served from the key table.
    fn remote_target(&self, key: u64, addr: u64, len: u64, access: Access) -> Result<*mut u8> {
        self.keys.target(key, addr, len, access)
    }

    fn native_rma(&self, key: u64, access: Access) -> Option<(u64, u64)> {
        self.mrs.get(&key)?;
        self.keys.region(key, access)
    }

    fn native_atomic(&self, key: u64) -> Option<(u64, u64)> {
        if !self.atomic_keys.contains(&key) {
            return None;
        }
        self.keys.region(key, Access::REMOTE_READ | Access::REMOTE_WRITE)
    }

    fn device_atomics(&self) -> bool {
        self.atomic_mode == AtomicMode::Device
    }
}
