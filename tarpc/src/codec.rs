//! How a [`Transport`](crate::Transport)'s messages become bytes: [`Bincode`]
//! for tarpc's serde types, [`Raw`] for byte strings sent as they are.

use std::io;

use bincode::Options;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::wire::MESSAGE_MAX;

/// Encodes the messages a transport sends.
pub trait Encode<Out> {
    /// The encoded size of `item`, without encoding it.
    fn encoded_len(item: &Out) -> io::Result<usize>;
    /// Appends `item`'s encoding to `buf`.
    fn encode_into(item: &Out, buf: &mut Vec<u8>) -> io::Result<()>;
    /// `item`'s encoding as a buffer of its own, `len` bytes (its
    /// [`encoded_len`](Self::encoded_len)): a large message's body.
    fn into_body(item: Out, len: usize) -> io::Result<Vec<u8>> {
        let mut body = Vec::with_capacity(len);
        Self::encode_into(&item, &mut body)?;
        Ok(body)
    }
}

/// Decodes the messages a transport receives.
pub trait Decode<In> {
    /// Decodes a message carried in a frame.
    fn decode(bytes: &[u8]) -> io::Result<In>;
    /// Decodes a large message from its body.
    fn decode_body(body: Vec<u8>) -> io::Result<In> {
        Self::decode(&body)
    }
}

/// bincode 1 with its default options, as tarpc's TCP transport uses
/// through tokio-serde's `Bincode` (varint integers, little-endian), with a
/// size limit on what the peer sent: the codec of
/// [`Node::connect`](crate::Node::connect) and [`Node::accept`](crate::Node::accept).
#[derive(Debug, Clone, Copy, Default)]
pub struct Bincode;

fn bincode() -> impl Options {
    bincode::DefaultOptions::new().with_limit(MESSAGE_MAX)
}

fn invalid_input(e: bincode::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e)
}

impl<Out: Serialize> Encode<Out> for Bincode {
    fn encoded_len(item: &Out) -> io::Result<usize> {
        let size = bincode().serialized_size(item).map_err(invalid_input)?;
        usize::try_from(size).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "message too large"))
    }

    fn encode_into(item: &Out, buf: &mut Vec<u8>) -> io::Result<()> {
        bincode().serialize_into(buf, item).map_err(invalid_input)
    }
}

impl<In: DeserializeOwned> Decode<In> for Bincode {
    fn decode(bytes: &[u8]) -> io::Result<In> {
        bincode()
            .deserialize(bytes)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }
}

/// Messages that are byte strings, sent as they are: a large one's buffer
/// is its body, and the body received is the message, so neither side
/// copies it (bincode would copy it into its encoding on one side and out
/// of it on the other). The codec of [`Node::connect_raw`](crate::Node::connect_raw)
/// and [`Node::accept_raw`](crate::Node::accept_raw); both ends of a
/// connection must use it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Raw;

impl Encode<Vec<u8>> for Raw {
    fn encoded_len(item: &Vec<u8>) -> io::Result<usize> {
        if item.len() as u64 > MESSAGE_MAX {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "message too large"));
        }
        Ok(item.len())
    }

    fn encode_into(item: &Vec<u8>, buf: &mut Vec<u8>) -> io::Result<()> {
        buf.extend_from_slice(item);
        Ok(())
    }

    fn into_body(item: Vec<u8>, _: usize) -> io::Result<Vec<u8>> {
        Ok(item)
    }
}

impl Decode<Vec<u8>> for Raw {
    fn decode(bytes: &[u8]) -> io::Result<Vec<u8>> {
        Ok(bytes.to_vec())
    }

    fn decode_body(body: Vec<u8>) -> io::Result<Vec<u8>> {
        Ok(body)
    }
}
