//! The address forms `XFER_TCP_ADDR` (`TcpAttr::addr`) accepts, parsed
//! without looking at the host: what resolves a zone name to an interface
//! index is [`crate::iface::resolve`].
//!
//! | form | meaning |
//! |---|---|
//! | `10.0.0.1` | IPv4, ephemeral port |
//! | `10.0.0.1:5000` | IPv4 and port |
//! | `::1`, `2001:db8::1` | IPv6, ephemeral port (a bare IPv6 address never carries a port) |
//! | `[::1]` | the same, bracketed |
//! | `[::1]:5000` | IPv6 and port |
//! | `fe80::1%eth0`, `fe80::1%2` | IPv6 with its zone: an interface name or index |
//! | `[fe80::1%eth0]:5000` | the same with a port |
//!
//! Wildcards (`0.0.0.0`, `::`) are refused: an endpoint's name is the
//! address it listens on, and peers cannot dial a wildcard.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The zone of an IPv6 address (`%eth0`, `%2`): the interface it is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Zone {
    /// An interface index.
    Index(u32),
    /// An interface name, resolved against the host's interfaces.
    Name(String),
}

/// A listening address as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddrSpec {
    /// The IP address.
    pub ip: IpAddr,
    /// The port; 0 for an ephemeral one.
    pub port: u16,
    /// The zone of an IPv6 address, when one is written.
    pub zone: Option<Zone>,
}

/// What every parse error ends with: the forms accepted.
const FORMS: &str = "XFER_TCP_ADDR must be IP, IP:PORT, [IPv6]:PORT or IPv6%ZONE (10.0.0.1, 10.0.0.1:5000, ::1, [::1]:5000, fe80::1%eth0)";

/// Parses one of the forms in the module documentation. The error says
/// which forms are accepted, or that a wildcard is not.
pub fn parse(text: &str) -> Result<AddrSpec, &'static str> {
    let text = text.trim();
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or(FORMS)?;
        let port = match after {
            "" => 0,
            _ => port(after.strip_prefix(':').ok_or(FORMS)?)?,
        };
        (host, port)
    } else if text.matches(':').count() == 1 {
        // One colon: IPv4 and a port (an IPv6 address has at least two).
        let (host, p) = text.split_once(':').ok_or(FORMS)?;
        if host.parse::<Ipv4Addr>().is_err() {
            return Err(FORMS);
        }
        (host, port(p)?)
    } else {
        (text, 0)
    };
    let (ip, zone) = match host.split_once('%') {
        Some((ip, zone)) => {
            let ip: Ipv6Addr = ip
                .parse()
                .map_err(|_| "XFER_TCP_ADDR: only an IPv6 address has a zone (%eth0)")?;
            (IpAddr::V6(ip), Some(zone_of(zone)?))
        }
        None => (host.parse::<IpAddr>().map_err(|_| FORMS)?, None),
    };
    if text.starts_with('[') && ip.is_ipv4() {
        return Err("XFER_TCP_ADDR: brackets hold an IPv6 address; write an IPv4 one as 10.0.0.1:5000");
    }
    if ip.is_unspecified() {
        return Err("XFER_TCP_ADDR must name a concrete IP, not a wildcard");
    }
    Ok(AddrSpec { ip, port, zone })
}

fn port(text: &str) -> Result<u16, &'static str> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(FORMS);
    }
    text.parse()
        .map_err(|_| "XFER_TCP_ADDR: the port must be at most 65535")
}

fn zone_of(text: &str) -> Result<Zone, &'static str> {
    if text.is_empty() {
        return Err("XFER_TCP_ADDR: an empty zone after %");
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse()
            .map(Zone::Index)
            .map_err(|_| "XFER_TCP_ADDR: zone index out of range");
    }
    Ok(Zone::Name(text.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> (IpAddr, u16, Option<Zone>) {
        let s = parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        (s.ip, s.port, s.zone)
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv4_forms() {
        assert_eq!(ok("10.0.0.1"), (ip("10.0.0.1"), 0, None));
        assert_eq!(ok("10.0.0.1:5000"), (ip("10.0.0.1"), 5000, None));
        assert_eq!(ok(" 127.0.0.1:65535 "), (ip("127.0.0.1"), 65535, None));
        assert_eq!(ok("127.0.0.1:0"), (ip("127.0.0.1"), 0, None));
    }

    #[test]
    fn ipv6_forms() {
        assert_eq!(ok("::1"), (ip("::1"), 0, None));
        assert_eq!(ok("[::1]"), (ip("::1"), 0, None));
        assert_eq!(ok("[::1]:5000"), (ip("::1"), 5000, None));
        assert_eq!(ok("2001:db8::7"), (ip("2001:db8::7"), 0, None));
        assert_eq!(ok("[2001:db8::7]:80"), (ip("2001:db8::7"), 80, None));
        // A bare address never carries a port: this is the address ::1:5000.
        assert_eq!(ok("::1:5000"), (ip("::1:5000"), 0, None));
        assert_eq!(ok("::ffff:10.0.0.1"), (ip("::ffff:10.0.0.1"), 0, None));
    }

    #[test]
    fn zones() {
        let eth0 = Some(Zone::Name("eth0".into()));
        assert_eq!(ok("fe80::1%eth0"), (ip("fe80::1"), 0, eth0.clone()));
        assert_eq!(ok("[fe80::1%eth0]"), (ip("fe80::1"), 0, eth0.clone()));
        assert_eq!(ok("[fe80::1%eth0]:5000"), (ip("fe80::1"), 5000, eth0));
        assert_eq!(ok("fe80::1%2"), (ip("fe80::1"), 0, Some(Zone::Index(2))));
        assert_eq!(ok("[fe80::1%2]:9"), (ip("fe80::1"), 9, Some(Zone::Index(2))));
    }

    #[test]
    fn refused() {
        for bad in [
            "",
            "eth0",
            "localhost",
            "localhost:5000",
            "10.0.0.1:",
            "10.0.0.1:x",
            "10.0.0.1:+5",
            "10.0.0.1:-1",
            "10.0.0.1:5000:1",
            "10.0.0.256",
            "[::1",
            "[::1]5000",
            "[::1]:",
            "[10.0.0.1]:5000",
            "[[::1]]",
            "::1]:5",
            ":5000",
            "fe80::1%",
            "10.0.0.1%eth0",
            "fe80::1%99999999999",
            "gggg::1",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted: {:?}", parse(bad));
        }
        assert_eq!(
            parse("10.0.0.1:65536"),
            Err("XFER_TCP_ADDR: the port must be at most 65535")
        );
        for wildcard in ["0.0.0.0", "0.0.0.0:5000", "::", "[::]:5000"] {
            assert_eq!(
                parse(wildcard),
                Err("XFER_TCP_ADDR must name a concrete IP, not a wildcard"),
                "{wildcard}"
            );
        }
        assert!(
            parse("x").unwrap_err().contains("[::1]:5000"),
            "the error lists the forms"
        );
    }
}
