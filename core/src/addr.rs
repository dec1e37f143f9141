//! Endpoint names and the address vector that turns them into peer handles.

use std::fmt;

use slab::Slab;

use crate::error::{Error, Result};

/// A compact handle for a peer, of `fi_addr_t`'s size; handed out by
/// [`AvTable::insert`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerAddr(pub u64);

impl PeerAddr {
    /// No particular peer: an any-source receive, or an unknown source in a
    /// completion (libfabric's `FI_ADDR_UNSPEC` / `FI_ADDR_NOTAVAIL`).
    pub const UNSPEC: PeerAddr = PeerAddr(u64::MAX);

    /// Whether this is [`PeerAddr::UNSPEC`].
    pub fn is_unspec(self) -> bool {
        self == Self::UNSPEC
    }
}

impl fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_unspec() {
            f.write_str("unspec")
        } else {
            write!(f, "#{}", self.0)
        }
    }
}

/// An endpoint's name: opaque bytes a peer inserts into its address vector.
///
/// The first byte names the provider, so a name from another provider is
/// refused at insert time rather than failing at first use.
///
/// # Text form
///
/// `Display` writes the name bytes as lowercase hexadecimal, two digits a
/// byte and nothing else (2 to 128 characters); `FromStr` reads that back,
/// in either case, and refuses anything else (whitespace included) with
/// [`Error::InvalidArgument`]. This form is stable: names printed by one
/// xfer version parse in later ones. With the `serde` feature an address
/// serializes as that string in human-readable formats (JSON, TOML) and as
/// its bytes in binary ones.
///
/// ```
/// use xfer_core::Address;
///
/// let a = Address::new(&[0x01, 0xab, 0x00, 0x7f])?;
/// assert_eq!(a.to_string(), "01ab007f");
/// assert_eq!("01AB007F".parse::<Address>()?, a);
/// assert!("01ab0".parse::<Address>().is_err(), "odd length");
/// # Ok::<(), xfer_core::Error>(())
/// ```
#[derive(Clone, Copy, Eq, PartialOrd, Ord)]
pub struct Address {
    len: u8,
    bytes: [u8; Address::MAX_LEN],
}

impl Address {
    /// The longest name any provider produces (libfabric's `FI_NAME_MAX`):
    /// a composite provider's name carries a host identity, a shared-memory
    /// address and an IPv6 TCP address.
    pub const MAX_LEN: usize = 64;

    /// Wraps name bytes; fails when they are empty or longer than [`Address::MAX_LEN`].
    pub fn new(name: &[u8]) -> Result<Address> {
        if name.is_empty() || name.len() > Self::MAX_LEN {
            return Err(Error::InvalidArgument("address length must be 1..=64 bytes"));
        }
        let mut bytes = [0; Self::MAX_LEN];
        bytes[..name.len()].copy_from_slice(name);
        Ok(Address {
            len: name.len() as u8,
            bytes,
        })
    }

    /// The name bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// Every `Address` comes from [`Address::new`], so the bytes past its length
/// are zero: the first 16 bytes compared as two words settle the common
/// names (TCP over IPv4, shm) without a `memcmp` call on the send and
/// arrival paths, and longer names (a composite provider's, as `shm+tcp`'s)
/// compare the rest as words too, not by a `memcmp` call.
impl PartialEq for Address {
    #[inline]
    fn eq(&self, other: &Address) -> bool {
        self.len == other.len
            && words_differ(&self.bytes[..16], &other.bytes[..16]) == 0
            && (self.len <= 16 || words_differ(&self.bytes[16..], &other.bytes[16..]) == 0)
    }
}

/// Non-zero when `a` and `b` (of one length, a multiple of 8) differ: their
/// 8-byte words exclusive-ored and or-ed together, which compiles to a few
/// vector instructions without a branch or a call.
#[inline(always)]
fn words_differ(a: &[u8], b: &[u8]) -> u64 {
    a.chunks_exact(8).zip(b.chunks_exact(8)).fold(0, |d, (x, y)| {
        d | (u64::from_ne_bytes(x.try_into().unwrap_or_default())
            ^ u64::from_ne_bytes(y.try_into().unwrap_or_default()))
    })
}

/// Hashes the name bytes only, as equality compares them.
impl std::hash::Hash for Address {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl fmt::Debug for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Address({self})")
    }
}

/// The stable text form: lowercase hexadecimal of the name bytes.
impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// Parses the text form `Display` writes (hex digits in either case).
impl std::str::FromStr for Address {
    type Err = Error;

    fn from_str(s: &str) -> Result<Address> {
        let digits = s.as_bytes();
        if !digits.len().is_multiple_of(2) {
            return Err(Error::InvalidArgument(
                "address text must have an even number of hex digits",
            ));
        }
        if digits.is_empty() || digits.len() > 2 * Self::MAX_LEN {
            return Err(Error::InvalidArgument("address text must be 2..=128 hex digits"));
        }
        let mut bytes = [0u8; Self::MAX_LEN];
        for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
            *byte = hex_digit(pair[0])? << 4 | hex_digit(pair[1])?;
        }
        Address::new(&bytes[..digits.len() / 2])
    }
}

fn hex_digit(c: u8) -> Result<u8> {
    match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        b'A'..=b'F' => Ok(c - b'A' + 10),
        _ => Err(Error::InvalidArgument(
            "address text holds a character that is not a hex digit",
        )),
    }
}

/// The table of peers an endpoint talks to: names in, compact handles out.
///
/// Inserting a name that is already present returns its existing handle, so a
/// handle always stands for one name; removed handles are reused.
#[derive(Debug, Default)]
pub struct AvTable {
    entries: Slab<Address>,
    by_name: crate::hash::FastMap<Address, PeerAddr>,
    /// Inserts (not counting repeats) and removals so far: unchanged means
    /// every handle still names what it did.
    changes: u64,
}

impl AvTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Inserts a (provider-validated) name and returns its handle.
    pub fn insert(&mut self, addr: Address) -> PeerAddr {
        if let Some(&peer) = self.by_name.get(&addr) {
            return peer;
        }
        let peer = PeerAddr(self.entries.insert(addr) as u64);
        self.by_name.insert(addr, peer);
        self.changes += 1;
        peer
    }

    /// How many times a handle was added (a repeat of a present name does
    /// not count) or removed: unchanged means every [`lookup`](Self::lookup)
    /// and [`reverse`](Self::reverse) answers as it did, so an answer kept
    /// with this count is still good (and a name `reverse` did not know is
    /// still unknown).
    #[inline]
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Removes a handle; fails if it is not in the table.
    pub fn remove(&mut self, peer: PeerAddr) -> Result<Address> {
        let idx = usize::try_from(peer.0).map_err(|_| Error::AddressNotAvailable)?;
        let addr = self.entries.try_remove(idx).ok_or(Error::AddressNotAvailable)?;
        self.by_name.remove(&addr);
        self.changes += 1;
        Ok(addr)
    }

    /// The name behind a handle.
    pub fn lookup(&self, peer: PeerAddr) -> Option<&Address> {
        self.entries.get(usize::try_from(peer.0).ok()?)
    }

    /// The handle of a name, or [`PeerAddr::UNSPEC`] when it was never inserted
    /// (how a completion reports a source the user does not know).
    pub fn reverse(&self, addr: &Address) -> PeerAddr {
        self.by_name.get(addr).copied().unwrap_or(PeerAddr::UNSPEC)
    }

    /// [`reverse`](Self::reverse) with a guess: `hint` when it still names
    /// `addr` (one index and a compare, no hashing), else the lookup.
    pub fn reverse_hinted(&self, addr: &Address, hint: PeerAddr) -> PeerAddr {
        match self.lookup(hint) {
            Some(a) if a == addr => hint,
            _ => self.reverse(addr),
        }
    }

    /// Number of peers in the table.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_is_idempotent_and_reversible() {
        let mut av = AvTable::new();
        let a = Address::new(b"alpha").unwrap();
        let b = Address::new(b"beta").unwrap();
        let pa = av.insert(a);
        let pb = av.insert(b);
        assert_ne!(pa, pb);
        assert_eq!(av.insert(a), pa);
        assert_eq!(av.reverse(&b), pb);
        assert_eq!(av.lookup(pa), Some(&a));
        av.remove(pa).unwrap();
        assert_eq!(av.reverse(&a), PeerAddr::UNSPEC);
        assert_eq!(av.remove(pa), Err(Error::AddressNotAvailable));
        assert_eq!(av.lookup(PeerAddr::UNSPEC), None);
    }

    #[test]
    fn names_compare_and_hash_by_every_byte_and_their_length() {
        use std::collections::hash_map::DefaultHasher;
        use std::hash::{Hash, Hasher};
        let hash = |a: &Address| {
            let mut h = DefaultHasher::new();
            a.hash(&mut h);
            h.finish()
        };
        let long: Vec<u8> = (1..=40).collect();
        for at in [0, 7, 8, 15, 16, 17, 39] {
            let mut other = long.clone();
            other[at] ^= 0x80;
            let (a, b) = (Address::new(&long).unwrap(), Address::new(&other).unwrap());
            assert_ne!(a, b, "byte {at} differs");
            assert_ne!(a.cmp(&b), std::cmp::Ordering::Equal);
        }
        let full: Vec<u8> = (1..=64).collect();
        for at in [23, 24, 40, 56, 63] {
            let mut other = full.clone();
            other[at] ^= 0x01;
            assert_ne!(
                Address::new(&full).unwrap(),
                Address::new(&other).unwrap(),
                "byte {at} of 64 differs"
            );
        }
        // A name and the same bytes with a zero more are different names.
        let (short, padded) = (
            Address::new(&long[..16]).unwrap(),
            Address::new(&[&long[..16], &[0]].concat()).unwrap(),
        );
        assert_ne!(short, padded);
        let (a, b) = (Address::new(&long).unwrap(), Address::new(&long.clone()).unwrap());
        assert_eq!(a, b);
        assert_eq!(hash(&a), hash(&b));
        assert_eq!(Address::new(&long[..3]).unwrap(), Address::new(&[1, 2, 3]).unwrap());
    }

    #[test]
    fn text_form_refuses_what_display_never_writes() {
        for bad in ["", "0", "012", "0g", " 01", "01 ", "+1", "0x01", &"00".repeat(65), "é1"] {
            assert!(
                matches!(bad.parse::<Address>(), Err(Error::InvalidArgument(_))),
                "{bad:?} parsed"
            );
        }
        assert_eq!("00".repeat(64).parse::<Address>().unwrap().as_bytes(), &[0; 64]);
        assert_eq!(format!("{:?}", Address::new(&[1, 0xfe]).unwrap()), "Address(01fe)");
    }

    proptest::proptest! {
        #[test]
        fn text_form_round_trips(name in proptest::collection::vec(proptest::num::u8::ANY, 1..=64)) {
            let a = Address::new(&name).unwrap();
            let text = a.to_string();
            proptest::prop_assert_eq!(text.len(), 2 * name.len());
            proptest::prop_assert!(text.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
            proptest::prop_assert_eq!(text.parse::<Address>().unwrap(), a);
            proptest::prop_assert_eq!(text.to_ascii_uppercase().parse::<Address>().unwrap(), a);
        }

        #[test]
        fn any_text_that_parses_prints_back_lowercased(text in "[0-9a-fA-F]{0,130}|.{0,8}") {
            if let Ok(a) = text.parse::<Address>() {
                proptest::prop_assert_eq!(a.to_string(), text.to_ascii_lowercase());
            }
        }
    }

    #[test]
    fn bad_lengths_are_refused() {
        assert!(Address::new(&[]).is_err());
        assert!(Address::new(&[0; 65]).is_err());
        assert_eq!(Address::new(&[7; 64]).unwrap().as_bytes().len(), 64);
    }
}
