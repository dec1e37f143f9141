//! Where a TCP endpoint listens, what its name says, and how a peer's
//! name is dialled (iface.rs has the choice's rules).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use xfer_core::unstable::error::{Error, Result};

use crate::attr::TcpAttr;
use crate::iface;

/// Where an endpoint with `attr` listens on a host with `ifaces` (iface.rs
/// has the rules). Without the host's interface list, an explicit address
/// still works and the automatic choice falls back to loopback.
pub fn listen_addr(attr: &TcpAttr, ifaces: &[iface::Interface]) -> Result<SocketAddr> {
    let choice = iface::choose(ifaces, attr);
    if !choice.missing.is_empty() {
        tracing::debug!(missing = ?choice.missing, "XFER_TCP_IFACE names interfaces this host does not have");
    }
    let listen = choice.listen?;
    tracing::debug!(addr = %listen.addr, iface = ?listen.iface, rule = %listen.rule, "tcp listen address");
    Ok(listen.addr)
}

/// The address to dial for a peer's name: a link-local IPv6 one (names carry
/// no zone, zones are local to each host) through the zone this endpoint
/// listens in, which is then on the same link; an endpoint that listens on
/// no link-local address cannot tell which link that is.
pub fn dial_addr(peer: SocketAddr, own_zone: u32) -> Result<SocketAddr> {
    match peer {
        SocketAddr::V6(mut a) if iface::is_link_local_v6(a.ip()) && a.scope_id() == 0 => {
            if own_zone == 0 {
                return Err(Error::InvalidArgument(
                    "a link-local IPv6 peer is reachable only from an endpoint listening on a link-local address",
                ));
            }
            a.set_scope_id(own_zone);
            Ok(SocketAddr::V6(a))
        }
        other => Ok(other),
    }
}

/// The address an endpoint's name carries for a listener bound to `bound`:
/// a wildcard listener (`0.0.0.0:PORT` or `[::]:PORT`, every interface) is
/// named by the address the automatic choice takes (of the listener's
/// family, else that family's loopback), with the listener's port.
pub fn named_addr(bound: SocketAddr, ifaces: &[iface::Interface], attr: &TcpAttr) -> SocketAddr {
    if !bound.ip().is_unspecified() {
        return bound;
    }
    let mut auto = attr.clone();
    auto.addr = None;
    let ip = match (iface::choose(ifaces, &auto).listen, bound) {
        (Ok(l), SocketAddr::V4(_)) if l.addr.is_ipv4() => l.addr.ip(),
        (Ok(l), SocketAddr::V6(_)) if l.addr.is_ipv6() => l.addr.ip(),
        (_, SocketAddr::V4(_)) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        (_, SocketAddr::V6(_)) => IpAddr::V6(Ipv6Addr::LOCALHOST),
    };
    SocketAddr::new(ip, bound.port())
}

#[cfg(test)]
mod tests {
    use super::dial_addr;

    #[test]
    fn link_local_peers_are_dialled_through_our_own_zone() {
        let peer = "[fe80::2]:7".parse().unwrap();
        assert_eq!(dial_addr(peer, 3).unwrap().to_string(), "[fe80::2%3]:7");
        assert!(dial_addr(peer, 0).is_err(), "no zone of ours to dial it through");
        for other in ["10.0.0.1:7", "[2001:db8::1]:7", "[fe80::2%5]:7"] {
            let a = other.parse().unwrap();
            assert_eq!(dial_addr(a, 3).unwrap(), a);
        }
    }
}
