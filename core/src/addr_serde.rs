//! `Serialize`/`Deserialize` for [`Address`] (the `serde` feature): the
//! stable text form in human-readable formats, the name bytes in binary ones.

use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

use crate::addr::Address;

impl Serialize for Address {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.collect_str(self)
        } else {
            s.serialize_bytes(self.as_bytes())
        }
    }
}

impl<'de> Deserialize<'de> for Address {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Address, D::Error> {
        if d.is_human_readable() {
            // Human-readable formats describe themselves: the text form, or
            // a byte array someone wrote by hand.
            d.deserialize_any(AddressVisitor)
        } else {
            d.deserialize_bytes(AddressVisitor)
        }
    }
}

struct AddressVisitor;

impl<'de> Visitor<'de> for AddressVisitor {
    type Value = Address;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an xfer endpoint name: 2 to 128 hex digits, or 1 to 64 bytes")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Address, E> {
        v.parse().map_err(E::custom)
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Address, E> {
        Address::new(v).map_err(E::custom)
    }

    /// Formats that write bytes as a sequence (JSON arrays, some binary ones).
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Address, A::Error> {
        let mut bytes = [0u8; Address::MAX_LEN];
        let mut len = 0;
        while let Some(b) = seq.next_element::<u8>()? {
            let slot = bytes
                .get_mut(len)
                .ok_or_else(|| de::Error::invalid_length(len + 1, &self))?;
            *slot = b;
            len += 1;
        }
        Address::new(&bytes[..len]).map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_readable_formats_get_the_text_form_binary_ones_the_bytes() {
        let a = Address::new(&[0x01, 0x02, 0xff]).unwrap();
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(json, "\"0102ff\"");
        assert_eq!(serde_json::from_str::<Address>(&json).unwrap(), a);
        assert_eq!(
            serde_json::from_str::<Address>("[1,2,255]").unwrap(),
            a,
            "a byte array too"
        );

        let bin = bincode::serialize(&a).unwrap();
        assert_eq!(
            bin,
            [&3u64.to_le_bytes()[..], &[1, 2, 255]].concat(),
            "length-prefixed bytes"
        );
        assert_eq!(bincode::deserialize::<Address>(&bin).unwrap(), a);
    }

    #[test]
    fn bad_names_are_refused_not_truncated() {
        for bad in ["\"\"", "\"0g\"", "\"012\"", "[]", &format!("{:?}", vec![0u8; 33])] {
            assert!(serde_json::from_str::<Address>(bad).is_err(), "{bad}");
        }
        let long = bincode::serialize(&vec![7u8; 33]).unwrap();
        assert!(bincode::deserialize::<Address>(&long).is_err());
    }
}
