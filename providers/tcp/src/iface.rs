//! Where a TCP endpoint listens: the host's interfaces ([`interfaces`]) and
//! the rules that choose among them ([`choose`], a pure function of the list
//! and the attributes, so that tests can hand it any host's list).
//!
//! The rules, first match wins:
//! 1. `XFER_TCP_ADDR` (`TcpAttr::addr`): that address ([`crate::addr`]
//!    lists the forms). With `XFER_TCP_IFACE` set too, the address must be
//!    on one of the interfaces it lists.
//! 2. `XFER_TCP_IFACE` (`TcpAttr::iface`): the first interface of the list
//!    that is up (and has a carrier) with an address, whatever its kind
//!    (loopback and container bridges included: naming one is a choice);
//!    on it, an IPv4 address, else a global IPv6 one, else a link-local
//!    IPv6 one (with the interface as its zone). None usable is an error.
//! 3. Automatic: among interfaces that are up with a carrier, not loopback
//!    and not a container or VM network ([`is_container_link`]), in the
//!    kernel's order, the first with an IPv4 address (not link-local
//!    169.254/16); else the first with a global IPv6 address (IPv6-only
//!    hosts); else loopback, 127.0.0.1 (`::1` where there is no 127.0.0.1).
//!
//! [`Choice`] keeps a [`Verdict`] for every interface: `xfer-info` shows
//! which one is used and why each other one is not.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};

use crate::attr::TcpAttr;
use xfer_core::unstable::error::{Error, Result};

use crate::addr::{self, AddrSpec, Zone};

/// One network interface and its addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Its name (`eth0`).
    pub name: String,
    /// Its index: the zone of its link-local IPv6 addresses.
    pub index: u32,
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// Has a carrier (`IFF_RUNNING`, `LOWER_UP`): a bridge without ports or
    /// an unplugged cable has none.
    pub running: bool,
    /// The loopback interface (`IFF_LOOPBACK`).
    pub loopback: bool,
    /// Its IPv4 and IPv6 addresses, in the kernel's order.
    pub addrs: Vec<IfAddr>,
}

/// An address of an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IfAddr {
    /// The address.
    pub ip: IpAddr,
    /// Its prefix length (from the netmask).
    pub prefix: u8,
}

impl fmt::Display for IfAddr {
    /// `10.0.0.1/24`, `2001:db8::1/64`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.ip, self.prefix)
    }
}

/// Which rule gave the listening address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// `XFER_TCP_ADDR`.
    Addr,
    /// The first usable interface `XFER_TCP_IFACE` lists.
    Listed,
    /// Automatic: the first usable interface with IPv4.
    Ipv4,
    /// Automatic, no usable interface has IPv4: the first with a global IPv6 address.
    Ipv6,
    /// Automatic, no interface but loopback is usable.
    Loopback,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Rule::Addr => "XFER_TCP_ADDR",
            Rule::Listed => "the first interface XFER_TCP_IFACE lists that is up with an address",
            Rule::Ipv4 => "the first interface that is up, not loopback, not a container bridge, with IPv4",
            Rule::Ipv6 => "no usable interface has IPv4: the first with a global IPv6 address",
            Rule::Loopback => "no interface but loopback is usable",
        })
    }
}

/// Where to listen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listen {
    /// The address (port 0: ephemeral).
    pub addr: SocketAddr,
    /// The interface that holds it, when one does.
    pub iface: Option<String>,
    /// Why this address.
    pub rule: Rule,
}

/// Why an interface is or is not the one listened on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It holds the listening address.
    Used,
    /// `XFER_TCP_ADDR` names an address it does not hold.
    AddrSet,
    /// `XFER_TCP_IFACE` does not list it.
    NotListed,
    /// Administratively down.
    Down,
    /// Up, without a carrier.
    NoCarrier,
    /// Loopback: used only when nothing else is.
    Loopback,
    /// A container or VM network by its name: not used unless listed.
    Container,
    /// No IPv4 or IPv6 address at all.
    NoAddress,
    /// Only link-local addresses, which the automatic choice does not take.
    LinkLocalOnly,
    /// Usable, but this interface comes first.
    Later(String),
    /// Has global IPv6 only, and this interface has IPv4, which is preferred.
    Ipv4Preferred(String),
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Used => f.write_str("used"),
            Verdict::AddrSet => f.write_str("not used: XFER_TCP_ADDR names another address"),
            Verdict::NotListed => f.write_str("not used: not in XFER_TCP_IFACE"),
            Verdict::Down => f.write_str("not used: down"),
            Verdict::NoCarrier => f.write_str("not used: up, but no carrier"),
            Verdict::Loopback => f.write_str("not used: loopback, used only when no other interface is"),
            Verdict::Container => f.write_str("not used: a container or VM network (XFER_TCP_IFACE can name it)"),
            Verdict::NoAddress => f.write_str("not used: no address"),
            Verdict::LinkLocalOnly => {
                f.write_str("not used: link-local addresses only (used when XFER_TCP_IFACE names it)")
            }
            Verdict::Later(first) => write!(f, "not used: usable, but {first} comes first"),
            Verdict::Ipv4Preferred(v4) => write!(f, "not used: IPv6 only, and IPv4 on {v4} is preferred"),
        }
    }
}

/// The choice: where to listen, or why nowhere, and a verdict on every
/// interface.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// Where to listen, or the error opening an endpoint gets.
    pub listen: Result<Listen>,
    /// A verdict for each interface, in the order of the list given.
    pub verdicts: Vec<Verdict>,
    /// Names `XFER_TCP_IFACE` lists that no interface has.
    pub missing: Vec<String>,
}

/// Names of container and VM networks: the host side of their bridges and
/// links (Docker, libvirt, CNI, Podman, LXC/LXD, Calico, Flannel, Cilium,
/// Weave, kube-router), and Docker's user networks `br-` + 12 hex digits.
/// A host bridge (`br0`, `br-lan`) is not one: it usually carries the host's
/// own network.
pub fn is_container_link(name: &str) -> bool {
    const PREFIXES: [&str; 13] = [
        "docker",
        "virbr",
        "vnet",
        "veth",
        "cni",
        "podman",
        "lxc",
        "lxd",
        "cali",
        "flannel",
        "cilium",
        "weave",
        "kube-bridge",
    ];
    let docker_network = name
        .strip_prefix("br-")
        .is_some_and(|id| id.len() == 12 && id.bytes().all(|b| b.is_ascii_hexdigit()));
    docker_network || PREFIXES.iter().any(|p| name.starts_with(p))
}

fn v4_link_local(ip: &IpAddr) -> bool {
    matches!(ip, IpAddr::V4(v4) if v4.is_link_local())
}

/// A link-local unicast IPv6 address (`fe80::/10`): it needs a zone.
pub fn is_link_local_v6(ip: &Ipv6Addr) -> bool {
    ip.segments()[0] & 0xffc0 == 0xfe80
}

fn v6_link_local(ip: &IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if is_link_local_v6(v6))
}

/// An IPv4 address other than loopback and link-local.
fn routable_v4(a: &IfAddr) -> bool {
    a.ip.is_ipv4() && !a.ip.is_loopback() && !v4_link_local(&a.ip)
}

/// An IPv6 address of global (or unique-local) scope.
fn global_v6(a: &IfAddr) -> bool {
    a.ip.is_ipv6() && !a.ip.is_loopback() && !a.ip.is_multicast() && !v6_link_local(&a.ip)
}

/// The address to listen on of an interface `XFER_TCP_IFACE` names: IPv4,
/// else global IPv6, else link-local IPv6 with the interface as its zone.
fn listed_addr(i: &Interface) -> Option<SocketAddr> {
    let v4 = i.addrs.iter().find(|a| a.ip.is_ipv4());
    let v6 = || i.addrs.iter().find(|a| a.ip.is_ipv6() && !v6_link_local(&a.ip));
    let ll = || i.addrs.iter().find(|a| v6_link_local(&a.ip));
    let a = v4.or_else(v6).or_else(ll)?;
    Some(socket_addr(a.ip, 0, i.index))
}

/// `ip:port`, with `scope` as the zone of a link-local IPv6 address.
fn socket_addr(ip: IpAddr, port: u16, scope: u32) -> SocketAddr {
    match ip {
        IpAddr::V6(v6) if is_link_local_v6(&v6) => SocketAddr::V6(SocketAddrV6::new(v6, port, 0, scope)),
        ip => SocketAddr::new(ip, port),
    }
}

/// The socket address `spec` names on a host with `ifaces`: its zone name
/// resolved to an index, and a link-local IPv6 address without a zone given
/// the interface that holds it (an error when none or several do).
pub fn resolve(spec: &AddrSpec, ifaces: &[Interface]) -> Result<SocketAddr> {
    let scope = match (&spec.zone, spec.ip) {
        (Some(Zone::Index(i)), _) => *i,
        (Some(Zone::Name(name)), _) => {
            ifaces
                .iter()
                .find(|i| &i.name == name)
                .ok_or(Error::InvalidArgument(
                    "XFER_TCP_ADDR: the zone after % names no interface of this host",
                ))?
                .index
        }
        (None, ip) if v6_link_local(&ip) => {
            let mut holders = ifaces.iter().filter(|i| i.addrs.iter().any(|a| a.ip == ip));
            match (holders.next(), holders.next()) {
                (Some(i), None) => i.index,
                (None, _) => {
                    return Err(Error::InvalidArgument(
                        "XFER_TCP_ADDR: a link-local IPv6 address needs its zone (fe80::1%eth0)",
                    ))
                }
                (Some(_), Some(_)) => {
                    return Err(Error::InvalidArgument(
                        "XFER_TCP_ADDR: that link-local address is on several interfaces; add its zone (%eth0)",
                    ))
                }
            }
        }
        (None, _) => 0,
    };
    Ok(match spec.ip {
        IpAddr::V6(v6) => SocketAddr::V6(SocketAddrV6::new(v6, spec.port, 0, scope)),
        ip => SocketAddr::new(ip, spec.port),
    })
}

/// Chooses where an endpoint with `attr` listens on a host with `ifaces`
/// (the rules of the module documentation).
pub fn choose(ifaces: &[Interface], attr: &TcpAttr) -> Choice {
    let missing: Vec<String> = attr
        .iface
        .iter()
        .filter(|n| !ifaces.iter().any(|i| &&i.name == n))
        .cloned()
        .collect();
    let (listen, verdicts) = match &attr.addr {
        Some(text) => by_addr(ifaces, text, &attr.iface),
        None if !attr.iface.is_empty() => by_list(ifaces, &attr.iface),
        None => automatic(ifaces),
    };
    Choice {
        listen,
        verdicts,
        missing,
    }
}

/// Rule 1: `XFER_TCP_ADDR`.
fn by_addr(ifaces: &[Interface], text: &str, listed: &[String]) -> (Result<Listen>, Vec<Verdict>) {
    let addr = addr::parse(text)
        .map_err(Error::InvalidArgument)
        .and_then(|spec| resolve(&spec, ifaces));
    // The interface that holds the address (for a zoned one, the zone's).
    let holder = addr.as_ref().ok().and_then(|a| {
        let scope = match a {
            SocketAddr::V6(v6) => v6.scope_id(),
            SocketAddr::V4(_) => 0,
        };
        ifaces
            .iter()
            .find(|i| (scope == 0 || i.index == scope) && i.addrs.iter().any(|x| x.ip == a.ip()))
    });
    let verdicts = ifaces
        .iter()
        .map(|i| match holder {
            Some(h) if h.name == i.name => Verdict::Used,
            _ => Verdict::AddrSet,
        })
        .collect();
    let listen = addr.and_then(|addr| {
        let wildcard = addr.ip().is_unspecified();
        if !wildcard && !listed.is_empty() && !holder.is_some_and(|h| listed.contains(&h.name)) {
            return Err(Error::InvalidArgument(
                "XFER_TCP_ADDR is not an address of an interface XFER_TCP_IFACE lists",
            ));
        }
        Ok(Listen {
            addr,
            iface: holder.map(|h| h.name.clone()),
            rule: Rule::Addr,
        })
    });
    (listen, verdicts)
}

/// Rule 2: the first usable interface `XFER_TCP_IFACE` lists.
fn by_list(ifaces: &[Interface], listed: &[String]) -> (Result<Listen>, Vec<Verdict>) {
    let used = listed.iter().find_map(|name| {
        let i = ifaces.iter().find(|i| &i.name == name)?;
        if !(i.up && i.running) {
            return None;
        }
        listed_addr(i).map(|addr| (i, addr))
    });
    let verdicts = ifaces
        .iter()
        .map(|i| {
            if !listed.contains(&i.name) {
                Verdict::NotListed
            } else if !i.up {
                Verdict::Down
            } else if !i.running {
                Verdict::NoCarrier
            } else if listed_addr(i).is_none() {
                Verdict::NoAddress
            } else {
                match used {
                    Some((u, _)) if u.name == i.name => Verdict::Used,
                    Some((u, _)) => Verdict::Later(u.name.clone()),
                    None => Verdict::NoAddress,
                }
            }
        })
        .collect();
    let listen = used
        .map(|(i, addr)| Listen {
            addr,
            iface: Some(i.name.clone()),
            rule: Rule::Listed,
        })
        .ok_or(Error::NotFound(
            "no interface XFER_TCP_IFACE lists is up with an address (xfer-info says why for each)",
        ));
    (listen, verdicts)
}

/// Rule 3: automatic.
fn automatic(ifaces: &[Interface]) -> (Result<Listen>, Vec<Verdict>) {
    let eligible = |i: &&Interface| i.up && i.running && !i.loopback && !is_container_link(&i.name);
    let with = |pred: fn(&IfAddr) -> bool| {
        ifaces
            .iter()
            .filter(eligible)
            .find_map(|i| i.addrs.iter().find(|a| pred(a)).map(|a| (i, a.ip)))
    };
    let listen = if let Some((i, ip)) = with(routable_v4) {
        Listen {
            addr: SocketAddr::new(ip, 0),
            iface: Some(i.name.clone()),
            rule: Rule::Ipv4,
        }
    } else if let Some((i, ip)) = with(global_v6) {
        Listen {
            addr: SocketAddr::new(ip, 0),
            iface: Some(i.name.clone()),
            rule: Rule::Ipv6,
        }
    } else {
        loopback(ifaces)
    };
    let used = listen.iface.as_deref();
    let verdicts = ifaces
        .iter()
        .map(|i| {
            if Some(i.name.as_str()) == used {
                Verdict::Used
            } else if i.loopback {
                Verdict::Loopback
            } else if !i.up {
                Verdict::Down
            } else if !i.running {
                Verdict::NoCarrier
            } else if is_container_link(&i.name) {
                Verdict::Container
            } else {
                let first = used.unwrap_or_default().to_owned();
                match listen.rule {
                    Rule::Ipv4 if i.addrs.iter().any(routable_v4) => Verdict::Later(first),
                    Rule::Ipv4 if i.addrs.iter().any(global_v6) => Verdict::Ipv4Preferred(first),
                    Rule::Ipv6 if i.addrs.iter().any(global_v6) => Verdict::Later(first),
                    _ if i.addrs.is_empty() => Verdict::NoAddress,
                    _ => Verdict::LinkLocalOnly,
                }
            }
        })
        .collect();
    (Ok(listen), verdicts)
}

/// The loopback address: 127.0.0.1, or `::1` on a host whose loopback has
/// only that.
fn loopback(ifaces: &[Interface]) -> Listen {
    let has = |ip: IpAddr| ifaces.iter().find(|i| i.addrs.iter().any(|a| a.ip == ip));
    let v4 = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
    let (ip, holder) = match (has(v4), has(v6)) {
        (None, Some(i)) => (v6, Some(i)),
        (i, _) => (v4, i),
    };
    Listen {
        addr: SocketAddr::new(ip, 0),
        iface: holder.map(|i| i.name.clone()),
        rule: Rule::Loopback,
    }
}

/// The host's interfaces, in the kernel's order, from `getifaddrs`.
pub fn interfaces() -> Result<Vec<Interface>> {
    crate::sys::interfaces()
}

/// What kind of link an interface is, as sysfs (`/sys/class/net/NAME`) of
/// the caller's network namespace tells: `loopback`, `ipoib`, `bridge`,
/// `vlan`, `bond`, `wireless`, `physical` (it has a device), `virtual`
/// (veth, tun, dummy, ...), or `unknown` where sysfs does not say. For
/// display only: the choice does not depend on it.
pub fn link_kind(name: &str) -> &'static str {
    let dir = std::path::Path::new("/sys/class/net").join(name);
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    // ARPHRD_LOOPBACK, ARPHRD_INFINIBAND.
    match read("type").trim() {
        "772" => return "loopback",
        "32" => return "ipoib",
        "" => return "unknown",
        _ => {}
    }
    let uevent = read("uevent");
    let devtype = uevent.lines().find_map(|l| l.strip_prefix("DEVTYPE="));
    match devtype {
        Some("bridge") => "bridge",
        Some("vlan") => "vlan",
        Some("bond") => "bond",
        Some("wlan") => "wireless",
        _ if dir.join("device").exists() => "physical",
        _ => "virtual",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An interface that is up with a carrier and these addresses (`IP/LEN`).
    fn up(name: &str, index: u32, addrs: &[&str]) -> Interface {
        Interface {
            name: name.into(),
            index,
            up: true,
            running: true,
            loopback: false,
            addrs: addrs
                .iter()
                .map(|a| {
                    let (ip, prefix) = a.split_once('/').unwrap();
                    IfAddr {
                        ip: ip.parse().unwrap(),
                        prefix: prefix.parse().unwrap(),
                    }
                })
                .collect(),
        }
    }

    fn lo() -> Interface {
        Interface {
            loopback: true,
            ..up("lo", 1, &["127.0.0.1/8", "::1/128"])
        }
    }

    fn down(i: Interface) -> Interface {
        Interface {
            up: false,
            running: false,
            ..i
        }
    }

    fn attr(addr: Option<&str>, iface: &[&str]) -> TcpAttr {
        TcpAttr {
            addr: addr.map(str::to_owned),
            iface: iface.iter().map(|s| s.to_string()).collect(),
            ..TcpAttr::default()
        }
    }

    fn listen(c: &Choice) -> (String, Option<&str>, Rule) {
        let l = c.listen.as_ref().unwrap_or_else(|e| panic!("no address: {e}"));
        (l.addr.to_string(), l.iface.as_deref(), l.rule)
    }

    fn verdicts(ifaces: &[Interface], c: &Choice) -> Vec<(String, Verdict)> {
        ifaces.iter().map(|i| i.name.clone()).zip(c.verdicts.clone()).collect()
    }

    /// A cloud VM or a laptop with Docker: loopback, a container bridge
    /// first in the kernel's order, a host link that is down, the network.
    fn docker_host() -> Vec<Interface> {
        vec![
            lo(),
            up("docker0", 2, &["172.17.0.1/16"]),
            up("br-0123456789ab", 3, &["172.18.0.1/16"]),
            down(up("eth1", 4, &["192.168.7.2/24"])),
            up("eth0", 5, &["10.0.0.5/24", "2001:db8::5/64", "fe80::5/64"]),
            up("veth1a2b3c", 6, &[]),
            up("eth2", 7, &["10.9.0.5/24"]),
            up("eth3", 8, &["2001:db8:3::5/64"]),
        ]
    }

    #[test]
    fn automatic_skips_loopback_container_networks_and_down_links() {
        let host = docker_host();
        let c = choose(&host, &attr(None, &[]));
        assert_eq!(listen(&c), ("10.0.0.5:0".into(), Some("eth0"), Rule::Ipv4));
        assert_eq!(
            verdicts(&host, &c),
            [
                ("lo".into(), Verdict::Loopback),
                ("docker0".into(), Verdict::Container),
                ("br-0123456789ab".into(), Verdict::Container),
                ("eth1".into(), Verdict::Down),
                ("eth0".into(), Verdict::Used),
                ("veth1a2b3c".into(), Verdict::Container),
                ("eth2".into(), Verdict::Later("eth0".into())),
                ("eth3".into(), Verdict::Ipv4Preferred("eth0".into())),
            ]
        );
        assert!(c.missing.is_empty());
    }

    #[test]
    fn automatic_takes_ipv4_on_any_interface_before_ipv6() {
        let host = vec![
            lo(),
            up("eth0", 2, &["2001:db8::1/64"]),
            up("eth1", 3, &["10.1.0.1/16"]),
        ];
        let c = choose(&host, &attr(None, &[]));
        assert_eq!(listen(&c), ("10.1.0.1:0".into(), Some("eth1"), Rule::Ipv4));
        assert_eq!(c.verdicts[1], Verdict::Ipv4Preferred("eth1".into()));
    }

    #[test]
    fn ipv6_only_host_listens_on_a_global_ipv6_address() {
        let host = vec![
            lo(),
            up("eth0", 2, &["fe80::1/64"]),
            up("eth1", 3, &["fe80::2/64", "2001:db8::2/64"]),
            up("eth2", 4, &["fd00::3/64"]),
        ];
        let c = choose(&host, &attr(None, &[]));
        assert_eq!(listen(&c), ("[2001:db8::2]:0".into(), Some("eth1"), Rule::Ipv6));
        assert_eq!(
            c.verdicts,
            [
                Verdict::Loopback,
                Verdict::LinkLocalOnly,
                Verdict::Used,
                Verdict::Later("eth1".into())
            ]
        );
    }

    #[test]
    fn nothing_usable_falls_back_to_loopback() {
        let mut nocarrier = up("eth0", 2, &["10.0.0.1/24"]);
        nocarrier.running = false;
        let host = vec![
            lo(),
            nocarrier,
            up("eth1", 3, &["169.254.3.4/16", "fe80::9/64"]),
            up("virbr0", 4, &["192.168.122.1/24"]),
        ];
        let c = choose(&host, &attr(None, &[]));
        assert_eq!(listen(&c), ("127.0.0.1:0".into(), Some("lo"), Rule::Loopback));
        assert_eq!(
            c.verdicts,
            [
                Verdict::Used,
                Verdict::NoCarrier,
                Verdict::LinkLocalOnly,
                Verdict::Container
            ]
        );
        // Loopback with IPv6 only, and no interface at all.
        let v6lo = Interface {
            loopback: true,
            ..up("lo", 1, &["::1/128"])
        };
        assert_eq!(
            listen(&choose(&[v6lo], &attr(None, &[]))),
            ("[::1]:0".into(), Some("lo"), Rule::Loopback)
        );
        assert_eq!(
            listen(&choose(&[], &attr(None, &[]))),
            ("127.0.0.1:0".into(), None, Rule::Loopback)
        );
    }

    #[test]
    fn listed_interfaces_in_the_order_given_whatever_their_kind() {
        let host = docker_host();
        let c = choose(&host, &attr(None, &["eth1", "docker0", "eth0"]));
        assert_eq!(listen(&c), ("172.17.0.1:0".into(), Some("docker0"), Rule::Listed));
        assert_eq!(
            verdicts(&host, &c)[..5],
            [
                ("lo".into(), Verdict::NotListed),
                ("docker0".into(), Verdict::Used),
                ("br-0123456789ab".into(), Verdict::NotListed),
                ("eth1".into(), Verdict::Down),
                ("eth0".into(), Verdict::Later("docker0".into())),
            ]
        );
        // Loopback, when named.
        let c = choose(&host, &attr(None, &["lo"]));
        assert_eq!(listen(&c), ("127.0.0.1:0".into(), Some("lo"), Rule::Listed));
        // IPv6 only; link-local only (zoned by the interface's index).
        let c = choose(&host, &attr(None, &["eth3"]));
        assert_eq!(listen(&c), ("[2001:db8:3::5]:0".into(), Some("eth3"), Rule::Listed));
        let ll = vec![lo(), up("ib0", 9, &["fe80::7/64"])];
        let c = choose(&ll, &attr(None, &["ib0"]));
        assert_eq!(listen(&c), ("[fe80::7%9]:0".into(), Some("ib0"), Rule::Listed));
    }

    #[test]
    fn a_list_with_nothing_usable_is_an_error_not_a_fallback() {
        let host = docker_host();
        let c = choose(&host, &attr(None, &["eth1", "ib0", "veth1a2b3c"]));
        assert!(matches!(c.listen, Err(Error::NotFound(_))), "{:?}", c.listen);
        assert_eq!(c.missing, ["ib0"]);
        assert_eq!(c.verdicts[3], Verdict::Down);
        assert_eq!(c.verdicts[5], Verdict::NoAddress);
        assert_eq!(c.verdicts[4], Verdict::NotListed);
        // A missing name before a usable one is passed over.
        let c = choose(&host, &attr(None, &["ib0", "eth2"]));
        assert_eq!(listen(&c), ("10.9.0.5:0".into(), Some("eth2"), Rule::Listed));
        assert_eq!(c.missing, ["ib0"]);
    }

    #[test]
    fn an_address_wins_and_must_be_on_a_listed_interface() {
        let host = docker_host();
        let c = choose(&host, &attr(Some("10.9.0.5:7000"), &[]));
        assert_eq!(listen(&c), ("10.9.0.5:7000".into(), Some("eth2"), Rule::Addr));
        assert_eq!(c.verdicts[6], Verdict::Used);
        assert_eq!(c.verdicts[4], Verdict::AddrSet);
        let c = choose(&host, &attr(Some("10.9.0.5"), &["eth2", "eth0"]));
        assert_eq!(listen(&c), ("10.9.0.5:0".into(), Some("eth2"), Rule::Addr));
        let c = choose(&host, &attr(Some("10.9.0.5"), &["eth0"]));
        assert!(matches!(c.listen, Err(Error::InvalidArgument(_))), "{:?}", c.listen);
        // An address no interface holds is left to bind to refuse.
        let c = choose(&host, &attr(Some("192.0.2.1"), &[]));
        assert_eq!(listen(&c), ("192.0.2.1:0".into(), None, Rule::Addr));
        assert!(c.verdicts.iter().all(|v| *v == Verdict::AddrSet));
        // A malformed one is refused.
        let c = choose(&host, &attr(Some("[::1"), &[]));
        assert!(matches!(c.listen, Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn zones_resolve_against_the_interfaces() {
        let host = vec![
            lo(),
            up("eth0", 4, &["fe80::1/64"]),
            up("eth1", 5, &["fe80::1/64", "fe80::2/64"]),
        ];
        let at = |text: &str| choose(&host, &attr(Some(text), &[])).listen.map(|l| l.addr.to_string());
        assert_eq!(at("fe80::1%eth1"), Ok("[fe80::1%5]:0".into()));
        assert_eq!(at("[fe80::1%eth0]:99"), Ok("[fe80::1%4]:99".into()));
        assert_eq!(at("fe80::1%7"), Ok("[fe80::1%7]:0".into()));
        // No zone: the one interface that holds it, else an error.
        assert_eq!(at("fe80::2"), Ok("[fe80::2%5]:0".into()));
        assert!(at("fe80::1").is_err(), "on two interfaces");
        assert!(at("fe80::3").is_err(), "on none");
        assert!(at("fe80::1%eth9").is_err(), "no such interface");
        let c = choose(&host, &attr(Some("fe80::1%eth1"), &[]));
        assert_eq!(c.verdicts, [Verdict::AddrSet, Verdict::AddrSet, Verdict::Used]);
        assert_eq!(at("[::1]:5"), Ok("[::1]:5".into()));
        assert_eq!(at("::1"), Ok("[::1]:0".into()));
    }

    #[test]
    fn link_local_is_fe80_slash_10() {
        for (ip, want) in [
            ("fe80::1", true),
            ("febf::1", true),
            ("fec0::1", false),
            ("fe7f::1", false),
            ("::1", false),
        ] {
            assert_eq!(is_link_local_v6(&ip.parse().unwrap()), want, "{ip}");
        }
    }

    #[test]
    fn container_link_names() {
        for name in [
            "docker0",
            "docker_gwbridge",
            "br-0123456789ab",
            "br-ABCDEF012345",
            "virbr0",
            "vnet3",
            "veth9f1e2d3",
            "cni0",
            "podman1",
            "lxcbr0",
            "lxdbr0",
            "cali12ab",
            "flannel.1",
            "cilium_host",
            "weave",
            "kube-bridge",
        ] {
            assert!(is_container_link(name), "{name}");
        }
        for name in [
            "eth0",
            "ens3",
            "enp1s0f0",
            "ib0",
            "br0",
            "br-lan",
            "br-0123456789",
            "bond0",
            "lo",
            "wlan0",
        ] {
            assert!(!is_container_link(name), "{name}");
        }
    }

    #[test]
    fn verdicts_read_as_reasons() {
        assert_eq!(Verdict::Used.to_string(), "used");
        assert_eq!(
            Verdict::Later("eth0".into()).to_string(),
            "not used: usable, but eth0 comes first"
        );
        for v in [
            Verdict::AddrSet,
            Verdict::NotListed,
            Verdict::Down,
            Verdict::NoCarrier,
            Verdict::Loopback,
            Verdict::Container,
            Verdict::NoAddress,
            Verdict::LinkLocalOnly,
            Verdict::Ipv4Preferred("eth0".into()),
        ] {
            assert!(v.to_string().starts_with("not used: "), "{v}");
        }
    }
}
