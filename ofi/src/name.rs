//! Endpoint names as libfabric sees them: fixed-size, so that
//! `fi_av_insert` can walk an array of them.
//!
//! ```text
//! byte 0      length n of the xfer name (1..=63)
//! 1..=n       the xfer name (its first byte names the xfer provider)
//! n+1..64     zero
//! ```
//!
//! 64 bytes in all, libfabric's `FI_NAME_MAX`: programs size their name
//! buffers by it (Open MPI's `char ep_name[FI_NAME_MAX]` for `fi_getname`),
//! so a longer form would fail them with `-FI_ETOOSMALL`. Every provider's
//! names fit (the longest, `shm+tcp` over IPv6, is 51 bytes); a 64-byte
//! `Address` cannot be given in this form.

use xfer_facade::Address;

/// Bytes of every name `fi_getname` returns and `fi_av_insert` reads
/// (libfabric's `FI_NAME_MAX`).
pub const NAME_LEN: usize = 64;

/// The libfabric form of an xfer endpoint name; `None` for a name longer
/// than `NAME_LEN - 1` bytes, which no provider makes.
pub fn encode(addr: &Address) -> Option<[u8; NAME_LEN]> {
    let name = addr.as_bytes();
    let mut out = [0u8; NAME_LEN];
    out[0] = u8::try_from(name.len()).ok()?;
    out.get_mut(1..=name.len())?.copy_from_slice(name);
    Some(out)
}

/// The xfer name inside `bytes` (at least [`NAME_LEN`] long), or `None`
/// when the length byte is out of range. Never panics.
pub fn decode(bytes: &[u8]) -> Option<&[u8]> {
    let n = usize::from(*bytes.first()?);
    if n == 0 || n >= NAME_LEN || bytes.len() < NAME_LEN {
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
        let bytes = encode(&addr).unwrap();
        assert_eq!(decode(&bytes), Some(addr.as_bytes()));
        let longest = Address::new(&[5; NAME_LEN - 1]).unwrap();
        assert_eq!(decode(&encode(&longest).unwrap()), Some(longest.as_bytes()));
        assert_eq!(encode(&Address::new(&[5; NAME_LEN]).unwrap()), None);
        assert_eq!(decode(&bytes[..NAME_LEN - 1]), None);
        let mut bad = bytes;
        bad[0] = 0;
        assert_eq!(decode(&bad), None);
        bad[0] = NAME_LEN as u8;
        assert_eq!(decode(&bad), None);
        assert_eq!(decode(&[]), None);
    }
}
