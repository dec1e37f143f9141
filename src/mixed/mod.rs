//! Providers of one RDM engine endpoint over a [`Pair`] of transports:
//! shared memory to peers on this host (same host identity,
//! `xfer_shm::host`) and a network transport to every other peer. `shm+tcp`
//! ([`ShmTcpDomain`]) is the default where no verbs device is usable;
//! `shm+verbs` (`ShmVerbsDomain`, with the `verbs` feature) pairs shared
//! memory with verbs, the default where one is.
//!
//! An endpoint name is the provider's id and the pair's address: the host
//! identity (8 bytes), the shm address's length and the shm address (14
//! bytes, or none with `shm.enabled=0`), then the network transport's
//! address.

mod tcp;
#[cfg(feature = "verbs")]
mod verbs;

pub use tcp::{from_tcp_name, tcp_name, ShmTcpDomain, NAME, PROVIDER_ID};
#[cfg(feature = "verbs")]
pub use verbs::{ShmVerbsDomain, SHM_VERBS, SHM_VERBS_ID};

use std::sync::Arc;

use xfer_core::unstable::params::Params;
use xfer_core::unstable::provider::EndpointProvider;
use xfer_core::unstable::rdm::engine::Engine;
use xfer_core::unstable::rdm::pair::{self, Pair, Parts, Route};
use xfer_core::unstable::rdm::transport::Transport;
use xfer_core::{Address, EndpointAttr, Error, Result};
use xfer_shm::fence::Fences;
use xfer_shm::{ShmConfig, ShmTransport};

/// Bytes of an shm port address (`xs`, a pid, a nonce).
const SHM_ADDR_LEN: usize = 14;

/// The pair address inside a pair provider's name, checked part by part:
/// an shm address or none, and a network address `second_ok` accepts.
fn parts(name: &[u8], second_ok: impl Fn(&[u8]) -> bool) -> Option<Parts<'_>> {
    let p = Parts::parse(name)?;
    let shm_ok = p.first.is_empty() || (p.first.len() == SHM_ADDR_LEN && p.first.starts_with(b"xs"));
    (shm_ok && second_ok(p.second)).then_some(p)
}

/// An engine endpoint over shared memory (the `shm.*` settings of
/// `params`) and `second`, whose peers get `second_credit` of eager
/// credit; named `name`, its names starting with `id`; shm peers copy
/// into its regions under the grants of the domain owning `fences`.
fn open_endpoint<B: Transport + 'static>(
    params: &Params,
    second: B,
    second_credit: u64,
    name: &'static str,
    id: u8,
    attr: &EndpointAttr,
    fences: Option<Arc<Fences>>,
) -> Result<Box<dyn EndpointProvider>> {
    let shm = ShmConfig::from_params(params)?;
    let first = match fences {
        Some(f) => ShmTransport::open_serving(&shm, f)?,
        None => ShmTransport::open(&shm)?,
    };
    let pair = Pair::new(first, second, name, xfer_shm::host::identity(), shm.enabled)?;
    // One budget for every peer: the smaller of the two transports'.
    let credit = (shm.eager_credit as u64).min(second_credit);
    Ok(Box::new(Engine::new(pair, id, attr, credit)?))
}

/// Which transport an endpoint of this process on the peer's pair provider
/// (with the `shm.enabled` setting of the environment) would serve the
/// peer `peer` over, and why, as `xfer-info --peer` prints it: `shm: …`,
/// `tcp: …` or `verbs: …`. A peer whose shm port then refuses the
/// connection still goes over the network transport.
pub fn explain_route(peer: &Address) -> Result<String> {
    let bytes = peer.as_bytes();
    let (theirs, network) = match bytes.split_first() {
        Some((&PROVIDER_ID, rest)) => (
            tcp::parts(rest).ok_or(Error::InvalidArgument("not an shm+tcp endpoint name"))?,
            "tcp",
        ),
        #[cfg(feature = "verbs")]
        Some((&SHM_VERBS_ID, rest)) => (
            verbs::parts(rest).ok_or(Error::InvalidArgument("not an shm+verbs endpoint name"))?,
            "verbs",
        ),
        Some((&id, _)) => {
            return Ok(format!(
                "not an shm+tcp or shm+verbs endpoint name (provider id {id:#04x}): its own provider serves it"
            ))
        }
        None => return Err(Error::InvalidArgument("empty name")),
    };
    let enabled = ShmConfig::from_env().map_err(Error::from)?.enabled;
    Ok(match pair::route(&xfer_shm::host::identity(), enabled, &theirs) {
        Route::First => "shm: same host, same user and namespaces".into(),
        Route::Second(why) => format!("{network}: {why}"),
    })
}
