//! Addresses as libfabric programs give them: `node` and `service` to
//! `fi_getinfo` (fi_getinfo(3): the source with `FI_SOURCE`, else the
//! destination), `src_addr`/`dest_addr` in xfer's name format, as a
//! `struct sockaddr_in`/`sockaddr_in6` (`FI_SOCKADDR_IN`, `FI_SOCKADDR_IN6`)
//! or as a string (`FI_ADDR_STR`: `xfer://` and the name in hex, an shm
//! endpoint's name as `fi_xfer_shm://` and its name in hex, or
//! `fi_sockaddr_in://IP:PORT`, `fi_sockaddr_in6://[IP]:PORT`).
//!
//! A destination known only by IP and port becomes the TCP name of
//! whichever endpoint listens there (nonce [`ANY_NONCE`], providers/tcp's
//! name.rs), which an `shm+tcp` domain takes as the `shm+tcp` endpoint
//! whose TCP side listens there; a source becomes the address the endpoint
//! listens on (the endpoint's `tcp.addr` key in `EndpointAttr::params`).
//! An `shm+tcp` endpoint's socket address is its TCP side's.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, ToSocketAddrs};

use xfer_facade::Address;
use xfer_tcp::name::{TcpName, ANY_NONCE};

use crate::fi;
use crate::name::{self, NAME_LEN};

/// An address format this plug-in reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// xfer's own names ([`name::NAME_LEN`] bytes, `FI_FORMAT_UNSPEC`).
    Xfer,
    /// `struct sockaddr_in` (`FI_SOCKADDR_IN`).
    Inet,
    /// `struct sockaddr_in6` (`FI_SOCKADDR_IN6`).
    Inet6,
    /// NUL-terminated strings (`FI_ADDR_STR`); `fi_av_insert` takes an
    /// array of `char *`.
    Str,
}

impl Format {
    /// The format of a libfabric `addr_format`; `None` for those xfer does
    /// not speak (`FI_SOCKADDR`'s variable length, `FI_ADDR_IB_*`, ...).
    pub fn of(addr_format: u32) -> Option<Format> {
        match addr_format {
            fi::FI_FORMAT_UNSPEC => Some(Format::Xfer),
            fi::FI_SOCKADDR_IN => Some(Format::Inet),
            fi::FI_SOCKADDR_IN6 => Some(Format::Inet6),
            fi::FI_ADDR_STR => Some(Format::Str),
            _ => None,
        }
    }

    /// The libfabric `addr_format` value.
    pub fn code(self) -> u32 {
        match self {
            Format::Xfer => fi::FI_FORMAT_UNSPEC,
            Format::Inet => fi::FI_SOCKADDR_IN,
            Format::Inet6 => fi::FI_SOCKADDR_IN6,
            Format::Str => fi::FI_ADDR_STR,
        }
    }

    /// Bytes of one address in this format (what `fi_av_insert` steps
    /// by); 0 for strings, which end at their NUL.
    pub fn len(self) -> usize {
        match self {
            Format::Xfer => NAME_LEN,
            Format::Inet => std::mem::size_of::<libc::sockaddr_in>(),
            Format::Inet6 => std::mem::size_of::<libc::sockaddr_in6>(),
            Format::Str => 0,
        }
    }

    /// The xfer name `bytes` (one address in this format) stands for, or
    /// `None` when they are not a valid address. Never panics.
    pub fn decode(self, bytes: &[u8]) -> Option<Address> {
        match self {
            Format::Xfer => name::decode(bytes).and_then(|n| Address::new(n).ok()),
            Format::Inet | Format::Inet6 => any_listener(from_sockaddr(bytes)?),
            Format::Str => match parse_str(bytes)? {
                Parsed::Name(a) => Some(a),
                Parsed::Socket(at) => any_listener(at),
            },
        }
    }

    /// `addr` in this format: the xfer name, or its TCP socket address
    /// (`None` when it is not a TCP name of the right family, or a name
    /// too long for the fixed form, [`name::encode`]).
    pub fn encode(self, addr: &Address) -> Option<Vec<u8>> {
        match self {
            Format::Xfer => name::encode(addr).map(|n| n.to_vec()),
            Format::Inet | Format::Inet6 => {
                let sa = TcpName::decode(as_tcp(addr).as_bytes()).ok()?.addr;
                (sa.is_ipv4() == (self == Format::Inet)).then(|| to_sockaddr(sa))
            }
            // A peer known by IP and port reads as libfabric prints one.
            Format::Str => Some(
                match TcpName::decode(as_tcp(addr).as_bytes()) {
                    Ok(n) if n.nonce == ANY_NONCE => format!("{}\0", socket_string(n.addr)),
                    _ => format!("{}\0", xfer_string(addr)),
                }
                .into_bytes(),
            ),
        }
    }

    /// The socket address a source address in this format names: the TCP
    /// address to listen on. `None` for an address that is not one (an
    /// xfer name of another provider, a short buffer).
    pub fn listen_addr(self, bytes: &[u8]) -> Option<SocketAddr> {
        match self {
            Format::Xfer => {
                let a = Address::new(name::decode(bytes)?).ok()?;
                TcpName::decode(as_tcp(&a).as_bytes()).ok().map(|n| n.addr)
            }
            Format::Inet | Format::Inet6 => from_sockaddr(bytes),
            Format::Str => match parse_str(bytes)? {
                Parsed::Name(a) => TcpName::decode(as_tcp(&a).as_bytes()).ok().map(|n| n.addr),
                Parsed::Socket(at) => Some(at),
            },
        }
    }

    /// A source address for `fi_info->src_addr` in this format.
    pub fn source(self, at: SocketAddr) -> Option<Vec<u8>> {
        match self {
            Format::Xfer => self.encode(&any_listener(at)?),
            Format::Inet | Format::Inet6 => (at.is_ipv4() == (self == Format::Inet)).then(|| to_sockaddr(at)),
            Format::Str => Some(format!("{}\0", socket_string(at)).into_bytes()),
        }
    }
}

/// The prefix of an shm endpoint's name as a string: libfabric's
/// `fi_<format>://` convention (`fi_shm://` is libfabric's own shm
/// provider's), with xfer's name so that the two are not confused.
pub const SHM_PREFIX: &str = "fi_xfer_shm://";

/// An address string's meaning.
enum Parsed {
    /// `xfer://` (or, for an shm name, [`SHM_PREFIX`]) and an xfer name in hex.
    Name(Address),
    /// `fi_sockaddr_in://IP:PORT` or `fi_sockaddr_in6://[IP]:PORT`.
    Socket(SocketAddr),
}

/// Parses an `FI_ADDR_STR` address (up to its NUL or the end of `bytes`).
fn parse_str(bytes: &[u8]) -> Option<Parsed> {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let text = std::str::from_utf8(bytes.get(..end)?).ok()?;
    if let Some(hex) = text.strip_prefix("xfer://") {
        return from_hex(hex).map(Parsed::Name);
    }
    if let Some(hex) = text.strip_prefix(SHM_PREFIX) {
        return from_hex(hex).filter(is_shm).map(Parsed::Name);
    }
    let rest = text
        .strip_prefix("fi_sockaddr_in://")
        .or_else(|| text.strip_prefix("fi_sockaddr_in6://"))?;
    rest.parse::<SocketAddr>().ok().map(Parsed::Socket)
}

/// The name whose bytes `hex` spells (two digits a byte).
fn from_hex(hex: &str) -> Option<Address> {
    if !hex.len().is_multiple_of(2) || hex.len() > 2 * Address::MAX_LEN {
        return None;
    }
    let raw: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect();
    Address::new(&raw?).ok()
}

/// Whether `addr` is an shm endpoint's name (its first byte, the provider's id).
pub fn is_shm(addr: &Address) -> bool {
    addr.as_bytes().first() == Some(&xfer_shm::PROVIDER_ID)
}

/// The name as a string (`fi_av_straddr`, `FI_ADDR_STR` names): `xfer://`
/// and the name in hex, [`SHM_PREFIX`] for an shm endpoint's name.
pub fn xfer_string(addr: &Address) -> String {
    let mut s = String::from(if is_shm(addr) { SHM_PREFIX } else { "xfer://" });
    for b in addr.as_bytes() {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// A socket address as libfabric prints one.
pub fn socket_string(at: SocketAddr) -> String {
    match at {
        SocketAddr::V4(_) => format!("fi_sockaddr_in://{at}"),
        SocketAddr::V6(_) => format!("fi_sockaddr_in6://{at}"),
    }
}

/// The TCP name of `addr`'s TCP side: an `shm+tcp` endpoint is seen by its
/// TCP address where a socket address stands for it; any other name as it is.
fn as_tcp(addr: &Address) -> Address {
    xfer_facade::mixed::tcp_name(addr.as_bytes()).unwrap_or(*addr)
}

/// Whether `node` is an `FI_ADDR_STR` address rather than a host name.
pub fn is_str(node: &str) -> bool {
    node.contains("://")
}

/// The TCP name of whichever endpoint listens at `at`.
pub fn any_listener(at: SocketAddr) -> Option<Address> {
    Address::new(
        &TcpName {
            addr: at,
            nonce: ANY_NONCE,
        }
        .to_vec(),
    )
    .ok()
}

/// A `sockaddr_in` or `sockaddr_in6` as a socket address (by its family;
/// `None` when `bytes` are too short for it or of another family).
pub fn from_sockaddr(bytes: &[u8]) -> Option<SocketAddr> {
    let family = u16::from_ne_bytes([*bytes.first()?, *bytes.get(1)?]);
    match i32::from(family) {
        libc::AF_INET if bytes.len() >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: `bytes` holds a whole sockaddr_in; read unaligned.
            let sin = unsafe { bytes.as_ptr().cast::<libc::sockaddr_in>().read_unaligned() };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 if bytes.len() >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: `bytes` holds a whole sockaddr_in6; read unaligned.
            let sin6 = unsafe { bytes.as_ptr().cast::<libc::sockaddr_in6>().read_unaligned() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// `at` as the bytes of a `sockaddr_in` or `sockaddr_in6`.
pub fn to_sockaddr(at: SocketAddr) -> Vec<u8> {
    fn bytes_of<T>(v: &T) -> Vec<u8> {
        // SAFETY: a plain C struct, fully initialised (zeroed first).
        unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }.to_vec()
    }
    match at {
        SocketAddr::V4(a) => {
            // SAFETY: all-zero is a valid sockaddr_in.
            let mut sin: libc::sockaddr_in = unsafe { std::mem::zeroed() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
            bytes_of(&sin)
        }
        SocketAddr::V6(a) => {
            // SAFETY: all-zero is a valid sockaddr_in6.
            let mut sin6: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_scope_id = a.scope_id();
            bytes_of(&sin6)
        }
    }
}

/// What `node` and `service` name (fi_getinfo(3)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Resolved {
    /// The address to listen on (`FI_SOURCE`).
    pub src: Option<SocketAddr>,
    /// The peer's address (without `FI_SOURCE`).
    pub dest: Option<SocketAddr>,
    /// The peer's full name, when `node` is an `FI_ADDR_STR` `xfer://` name.
    pub dest_name: Option<Address>,
}

/// Resolves `node` and `service`: with `FI_SOURCE` (`source`) the address
/// to listen on (`node`'s IP, else `default_ip`, else every interface; the
/// service's port, else an ephemeral one), otherwise the destination
/// (`node`, or the local host when only a service is given, as
/// `getaddrinfo` does; a service is required). The service is a port
/// number; `node` an IP address or a host name, IPv4 preferred.
pub fn resolve(
    node: Option<&str>,
    service: Option<&str>,
    source: bool,
    default_ip: Option<IpAddr>,
) -> Result<Resolved, &'static str> {
    if node.is_none() && service.is_none() {
        return Ok(Resolved::default());
    }
    if let Some(text) = node.filter(|n| is_str(n)) {
        // An FI_ADDR_STR address as node (fi_getinfo(3)): no service.
        let bytes = text.as_bytes();
        return match source {
            true => Ok(Resolved {
                src: Some(Format::Str.listen_addr(bytes).ok_or("node is not an address string")?),
                ..Resolved::default()
            }),
            false => Ok(Resolved {
                dest_name: Some(Format::Str.decode(bytes).ok_or("node is not an address string")?),
                ..Resolved::default()
            }),
        };
    }
    let port = match service {
        None => 0,
        Some(s) => s.trim().parse::<u16>().map_err(|_| "service is not a port number")?,
    };
    let ip = match node {
        None => None,
        Some(n) => Some(lookup(n, port)?),
    };
    if source {
        let ip = ip.or(default_ip).unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        if ip.is_unspecified() && port == 0 {
            // Every interface needs a fixed port: an ephemeral wildcard
            // listener would have no address to put in its name.
            return Ok(Resolved::default());
        }
        return Ok(Resolved {
            src: Some(SocketAddr::new(ip, port)),
            ..Resolved::default()
        });
    }
    if port == 0 {
        return Err("a destination needs a service (port)");
    }
    let ip = ip.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    Ok(Resolved {
        dest: Some(SocketAddr::new(ip, port)),
        ..Resolved::default()
    })
}

/// `node` as an IP address: parsed, or looked up (IPv4 preferred).
fn lookup(node: &str, port: u16) -> Result<IpAddr, &'static str> {
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Ok(ip);
    }
    let all: Vec<SocketAddr> = (node, port)
        .to_socket_addrs()
        .map_err(|_| "node does not resolve")?
        .collect();
    all.iter()
        .find(|a| a.is_ipv4())
        .or(all.first())
        .map(|a| a.ip())
        .ok_or("node does not resolve")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_and_service() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let r = resolve(None, Some("9228"), true, None).unwrap();
        assert_eq!(r.src, Some("0.0.0.0:9228".parse().unwrap()));
        let r = resolve(None, Some("9228"), true, Some(lo)).unwrap();
        assert_eq!(r.src, Some("127.0.0.1:9228".parse().unwrap()));
        let r = resolve(Some("127.0.0.1"), Some("9228"), false, None).unwrap();
        assert_eq!((r.src, r.dest), (None, Some("127.0.0.1:9228".parse().unwrap())));
        let r = resolve(Some("localhost"), Some("7"), false, None).unwrap();
        assert_eq!(r.dest, Some("127.0.0.1:7".parse().unwrap()));
        assert!(resolve(Some("127.0.0.1"), None, false, None).is_err());
        assert!(resolve(None, Some("http-ish"), true, None).is_err());
        assert_eq!(resolve(None, None, true, None).unwrap(), Resolved::default());
        assert_eq!(resolve(None, None, false, None).unwrap(), Resolved::default());
    }

    /// An shm endpoint's name reads as `fi_xfer_shm://` and its bytes in
    /// hex, and back; the generic `xfer://` form names it too; the shm
    /// prefix on another provider's name is not an address.
    #[test]
    fn shm_names_as_strings() {
        let mut raw = vec![xfer_shm::PROVIDER_ID, b'x', b's'];
        raw.extend_from_slice(&4242u32.to_le_bytes());
        raw.extend_from_slice(&0x0123_4567_89ab_cdefu64.to_le_bytes());
        let shm = Address::new(&raw).unwrap();
        let s = Format::Str.encode(&shm).unwrap();
        assert_eq!(s, b"fi_xfer_shm://03787392100000efcdab8967452301\0");
        assert_eq!(Format::Str.decode(&s), Some(shm));
        assert_eq!(xfer_string(&shm), "fi_xfer_shm://03787392100000efcdab8967452301");
        let generic = format!("xfer://{}", &xfer_string(&shm)[SHM_PREFIX.len()..]);
        assert_eq!(Format::Str.decode(generic.as_bytes()), Some(shm));
        assert_eq!(Format::Str.listen_addr(&s), None, "an shm name is no TCP address");
        let tcp = Address::new(
            &TcpName {
                addr: "127.0.0.1:7".parse().unwrap(),
                nonce: 5,
            }
            .to_vec(),
        )
        .unwrap();
        let wrong = format!("{SHM_PREFIX}{}", &xfer_string(&tcp)["xfer://".len()..]);
        assert_eq!(Format::Str.decode(wrong.as_bytes()), None);
        assert!(is_shm(&shm) && !is_shm(&tcp));
    }

    /// `FI_SOURCE_ERR`'s `err_data` (the longest name in each format) fits
    /// the `max_err_data` fi_getinfo promises.
    #[test]
    fn every_encoded_name_fits_max_err_data() {
        let longest = Address::new(&[0xab; Address::MAX_LEN]).unwrap();
        let six: SocketAddr = "[fe80::1:2:3:4%1]:65535".parse().unwrap();
        let tcp6 = Address::new(&TcpName { addr: six, nonce: 7 }.to_vec()).unwrap();
        for f in [Format::Xfer, Format::Inet, Format::Inet6, Format::Str] {
            for a in [&longest, &tcp6] {
                let n = f.encode(a).map_or(0, |v| v.len());
                assert!(n <= crate::info::MAX_ERR_DATA, "{f:?}: {n} bytes");
            }
        }
    }

    #[test]
    fn sockaddr_round_trip_and_names() {
        let at: SocketAddr = "127.0.0.1:9228".parse().unwrap();
        let sin = to_sockaddr(at);
        assert_eq!(sin.len(), Format::Inet.len());
        assert_eq!(from_sockaddr(&sin), Some(at));
        assert_eq!(from_sockaddr(&sin[..8]), None);
        let six: SocketAddr = "[::1]:7".parse().unwrap();
        assert_eq!(from_sockaddr(&to_sockaddr(six)), Some(six));
        let name = Format::Inet.decode(&sin).unwrap();
        let tcp = TcpName::decode(name.as_bytes()).unwrap();
        assert_eq!((tcp.addr, tcp.nonce), (at, ANY_NONCE));
        assert_eq!(Format::Inet.encode(&name), Some(sin.clone()));
        assert_eq!(Format::Inet6.encode(&name), None);
        let src = Format::Xfer.source(at).unwrap();
        assert_eq!(Format::Xfer.listen_addr(&src), Some(at));
        assert_eq!(Format::Inet.listen_addr(&sin), Some(at));
        assert_eq!(Format::Str.encode(&name).unwrap(), b"fi_sockaddr_in://127.0.0.1:9228\0");
        let own = Address::new(&TcpName { addr: at, nonce: 5 }.to_vec()).unwrap();
        let s = Format::Str.encode(&own).unwrap();
        assert!(s.starts_with(b"xfer://01047f000001") && s.ends_with(b"\0"));
        assert_eq!(Format::Str.decode(&s), Some(own));
        assert_eq!(Format::Str.listen_addr(&s), Some(at));
        assert_eq!(Format::Str.source(at).unwrap(), b"fi_sockaddr_in://127.0.0.1:9228\0");
        assert_eq!(Format::Str.decode(b"fi_sockaddr_in://127.0.0.1:9228"), Some(name));
        for bad in [
            &b"xfer://0"[..],
            b"xfer://zz",
            b"tcp://1.2.3.4:5",
            b"fi_sockaddr_in://nonsense",
            b"\xff",
        ] {
            assert_eq!(Format::Str.decode(bad), None, "{bad:?}");
        }
        let r = resolve(Some("fi_sockaddr_in://127.0.0.1:9228"), None, false, None).unwrap();
        assert_eq!(r.dest_name, Some(name));
    }
}
