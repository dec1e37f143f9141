//! Endpoint names as libfabric sees them: fixed-size, so that
//! `fi_av_insert` can walk an array of them.
//!
//! ```text
//! byte 0      length n of the xfer name (1..=64)
//! 1..=n       the xfer name (its first byte names the xfer provider)
//! n+1..65     zero
//! ```

use xfer_facade::Address;

/// Bytes of every name `fi_getname` returns and `fi_av_insert` reads.
pub const NAME_LEN: usize = 1 + Address::MAX_LEN;

/// The libfabric form of an xfer endpoint name.
pub fn encode(addr: &Address) -> [u8; NAME_LEN] {
    let name = addr.as_bytes();
    let mut out = [0u8; NAME_LEN];
    out[0] = name.len() as u8;
    out[1..=name.len()].copy_from_slice(name);
    out
}

/// The xfer name inside `bytes` (at least [`NAME_LEN`] long), or `None`
/// when the length byte is out of range. Never panics.
pub fn decode(bytes: &[u8]) -> Option<&[u8]> {
    let n = usize::from(*bytes.first()?);
    if n == 0 || n > Address::MAX_LEN || bytes.len() < NAME_LEN {
        return None;
    }
    bytes.get(1..=n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bad_lengths() {
        let addr = Address::new(&[1, 4, 127, 0, 0, 1, 9, 9]).unwrap();
        let bytes = encode(&addr);
        assert_eq!(decode(&bytes), Some(addr.as_bytes()));
        assert_eq!(decode(&bytes[..NAME_LEN - 1]), None);
        let mut bad = bytes;
        bad[0] = 0;
        assert_eq!(decode(&bad), None);
        bad[0] = 33;
        assert_eq!(decode(&bad), None);
        assert_eq!(decode(&[]), None);
    }
}
