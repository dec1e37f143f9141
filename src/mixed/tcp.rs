//! The `shm+tcp` provider: one RDM engine endpoint over a [`Pair`] of the
//! shared-memory and the TCP transports, so peers on this host (same host
//! identity, `xfer_shm::host`) are served over shared memory and every other
//! peer over TCP. The default where no verbs device is usable (`XFER_PROVIDER=tcp`
//! keeps every peer on TCP).
//!
//! Its endpoint name is [`PROVIDER_ID`] and the pair's address: the host
//! identity (8 bytes), the shm address's length and the shm address (14
//! bytes, or none with `shm.enabled=0`), then the TCP transport's address (15
//! bytes for IPv4, 27 for IPv6): 39 or 51 bytes in all.

use std::sync::Arc;
use xfer_core::unstable::mr::keys::KeyTable;
use xfer_core::unstable::mr::Access;
use xfer_core::unstable::params::Params;
use xfer_core::unstable::provider::{DomainProvider, EndpointProvider};
use xfer_core::unstable::rdm::pair::Parts;
use xfer_core::{Address, EndpointAttr, Error, Result};

use xfer_shm::fence::Fences;
use xfer_shm::ShmConfig;
use xfer_tcp::stream::TcpTransport;
use xfer_tcp::TcpAttr;

/// The first byte of every `shm+tcp` endpoint name.
pub const PROVIDER_ID: u8 = 0x05;

/// The provider's name.
pub const NAME: &str = "shm+tcp";

/// The `shm+tcp` provider's domain.
#[derive(Debug)]
pub struct ShmTcpDomain {
    params: Params,
    keys: KeyTable,
    /// Cross-memory attach on (`shm.cma`): shm peers may be granted keys.
    cma: bool,
    /// Its grants' epoch and its endpoints' shm target fences.
    fences: Arc<Fences>,
}

impl ShmTcpDomain {
    /// A domain with the `shm.*` and `tcp.*` settings of `params` over the
    /// environment.
    pub fn with_params(params: &Params) -> Result<ShmTcpDomain> {
        let shm = ShmConfig::from_params(params)?;
        TcpAttr::from_params(params)?;
        Ok(ShmTcpDomain {
            params: params.clone(),
            keys: KeyTable::default(),
            cma: shm.enabled && shm.cma,
            fences: Fences::new(),
        })
    }
}

/// The pair address inside an `shm+tcp` name, checked part by part.
pub(super) fn parts(name: &[u8]) -> Option<Parts<'_>> {
    super::parts(name, |tcp| xfer_tcp::stream::decode(tcp).is_some())
}

impl DomainProvider for ShmTcpDomain {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Core's RDM engine applies atomics at the target.
    fn atomics(&self) -> bool {
        true
    }

    /// An `shm+tcp` name, or a `tcp` name: the `shm+tcp` endpoint whose
    /// TCP side has that address ([`from_tcp_name`]).
    fn check_address(&self, bytes: &[u8]) -> Result<Address> {
        match bytes.split_first() {
            Some((&PROVIDER_ID, rest)) if parts(rest).is_some() => Address::new(bytes),
            Some((&xfer_tcp::PROVIDER_ID, _)) => {
                from_tcp_name(bytes).ok_or(Error::InvalidArgument("not a TCP endpoint name"))
            }
            Some((&PROVIDER_ID, _)) => Err(Error::InvalidArgument("not an shm+tcp endpoint name")),
            _ => Err(Error::AddressNotAvailable),
        }
    }

    fn open_endpoint(&mut self, attr: &EndpointAttr) -> Result<Box<dyn EndpointProvider>> {
        let params = self.params.overlaid(&attr.params);
        let tcp = TcpAttr::from_params(&params)?;
        let second = TcpTransport::open(&tcp)?;
        let fences = Some(self.fences.clone());
        super::open_endpoint(
            &params,
            second,
            tcp.eager_credit as u64,
            NAME,
            PROVIDER_ID,
            attr,
            fences,
        )
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

    /// Revokes the shm peers' grants when peers could reach the region.
    fn deregister(&mut self, key: u64) {
        xfer_shm::deregister(&mut self.keys, &self.fences, key);
    }

    /// A grant is for shm peers: a TCP peer's transport refuses it and its
    /// operations stay in frames.
    fn native_rma(&self, key: u64, access: Access) -> Option<(u64, u64)> {
        xfer_shm::native_rma(&self.keys, self.cma, key, access)
    }

    fn grant_stamp(&self) -> u64 {
        self.fences.epoch()
    }
}

/// The `shm+tcp` name standing for the endpoint whose TCP side has the
/// TCP name `tcp` (a libfabric program's `sockaddr_in`, or a node and
/// service, become TCP names): no host identity and no shm part, so it is
/// reached over TCP; once that endpoint answers, its own name is its alias.
/// `None` when `tcp` is not a TCP name.
pub fn from_tcp_name(tcp: &[u8]) -> Option<Address> {
    let (&xfer_tcp::PROVIDER_ID, at) = tcp.split_first()? else {
        return None;
    };
    xfer_tcp::stream::decode(at)?;
    let mut name = vec![PROVIDER_ID];
    name.extend(Parts::second_only(at).encode());
    Address::new(&name).ok()
}

/// The TCP name of an `shm+tcp` endpoint's TCP side: what a libfabric
/// program sees of it as a `sockaddr_in`. `None` when `name` is not an
/// `shm+tcp` name.
pub fn tcp_name(name: &[u8]) -> Option<Address> {
    let (&PROVIDER_ID, rest) = name.split_first()? else {
        return None;
    };
    let mut tcp = vec![xfer_tcp::PROVIDER_ID];
    tcp.extend_from_slice(parts(rest)?.second);
    Address::new(&tcp).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DomainAttr;

    fn endpoint_name(params: &[(&str, &str)]) -> Address {
        let mut attr = DomainAttr::with_provider(NAME);
        attr.params.set("tcp.addr", "127.0.0.1");
        for (k, v) in params {
            attr.params.set(*k, *v);
        }
        let domain = crate::open(&attr).expect("open shm+tcp");
        let cq = domain.cq(&crate::CqAttr::default()).expect("cq");
        let av = domain.av().expect("av");
        let ep = domain.endpoint(&cq, &av, &EndpointAttr::default()).expect("endpoint");
        ep.name()
    }

    #[test]
    fn names_are_checked_part_by_part() {
        let d = ShmTcpDomain::with_params(&Params::default()).expect("domain");
        let name = endpoint_name(&[]);
        let b = name.as_bytes();
        assert_eq!((b[0], b.len(), b[9]), (PROVIDER_ID, 1 + 8 + 1 + 14 + 15, 14));
        assert_eq!(d.check_address(b), Ok(name));
        let bare = endpoint_name(&[("shm.enabled", "0")]);
        assert_eq!((bare.as_bytes().len(), bare.as_bytes()[9]), (1 + 8 + 1 + 15, 0));
        assert_eq!(d.check_address(bare.as_bytes()), Ok(bare));
        let refused = |bytes: &[u8]| d.check_address(bytes).is_err();
        assert!(refused(&b[..b.len() - 1]), "a TCP part cut short");
        let mut not_shm = b.to_vec();
        not_shm[10] = b'z';
        assert!(refused(&not_shm), "an shm part without its `xs`");
        let mut shorter = [&b[..9], &[13], &b[10..23], &b[24..]].concat();
        assert!(refused(&shorter), "an shm part of 13 bytes");
        shorter[0] = 0x04;
        assert_eq!(
            d.check_address(&shorter),
            Err(Error::AddressNotAvailable),
            "another provider's"
        );
    }

    #[test]
    fn a_tcp_name_stands_for_the_endpoint_listening_there() {
        let d = ShmTcpDomain::with_params(&Params::default()).expect("domain");
        let name = endpoint_name(&[]);
        let tcp = tcp_name(name.as_bytes()).expect("the TCP side");
        assert_eq!(tcp.as_bytes()[0], xfer_tcp::PROVIDER_ID);
        assert_eq!(&tcp.as_bytes()[1..], &name.as_bytes()[1 + 8 + 1 + 14..]);
        let stand = d.check_address(tcp.as_bytes()).expect("a TCP name is taken");
        let b = stand.as_bytes();
        assert_eq!(
            (b[0], &b[1..9], b[9]),
            (PROVIDER_ID, &[0u8; 8][..], 0),
            "no host, no shm"
        );
        assert_eq!(tcp_name(b), Some(tcp), "and back");
        assert_eq!(
            d.check_address(&tcp.as_bytes()[..5]),
            Err(Error::InvalidArgument("not a TCP endpoint name"))
        );
        assert_eq!(tcp_name(tcp.as_bytes()), None, "not an shm+tcp name");
    }

    #[test]
    fn the_shm_provider_alone_refuses_shm_off() {
        let mut attr = DomainAttr::with_provider("shm");
        attr.params.set("shm.enabled", "0");
        let domain = crate::open(&attr).expect("the domain opens");
        let cq = domain.cq(&crate::CqAttr::default()).expect("cq");
        let av = domain.av().expect("av");
        let e = domain.endpoint(&cq, &av, &EndpointAttr::default()).unwrap_err();
        assert!(matches!(e, Error::InvalidSetting(_)), "{e}");
    }
}
