//! Probing the tagged unexpected queue: libfabric's `FI_PEEK` and `FI_CLAIM`
//! (MPI's `MPI_Iprobe` and `MPI_Improbe` over the ofi MTL).
//!
//! A peek reports what a tagged receive posted now would match, without
//! receiving it. A claim also takes that message out of matching: no later
//! receive can take it, and only [`Endpoint::post_claimed`] with its
//! [`Claim`] receives it. Dropping a claimed message is receiving it into an
//! empty buffer (its completion is a truncation), so the sender's side of
//! the protocol (a rendezvous waiting for its pull) ends as for any receive.
//! Only messages that already arrived are seen: a peek never waits.
//!
//! [`Endpoint::post_claimed`]: crate::Endpoint::post_claimed

use crate::addr::PeerAddr;

/// An unexpected message as a peek sees it: what its receive will report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peeked {
    /// The sender, or [`PeerAddr::UNSPEC`] when it is not in the address vector.
    pub src: PeerAddr,
    /// The message's tag.
    pub tag: u64,
    /// The message's whole length in bytes.
    pub len: usize,
    /// Its immediate data, if it carries any.
    pub data: Option<u64>,
}

/// A message reserved by [`Endpoint::claim`](crate::Endpoint::claim): out of
/// matching until [`Endpoint::post_claimed`](crate::Endpoint::post_claimed)
/// receives it. Valid on the endpoint that made it; one use.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Claim(u64);

impl Claim {
    /// A claim with the number a provider's matcher gave it
    /// (`Matcher::probe`); for providers, not part of the stable API.
    #[doc(hidden)]
    pub fn new(id: u64) -> Claim {
        Claim(id)
    }

    /// The matcher's number for the claimed message.
    pub fn id(&self) -> u64 {
        self.0
    }
}
