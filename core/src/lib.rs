//! xfer-core: the object model every xfer provider plugs into.
//!
//! - [`Domain`] opens [`CompletionQueue`]s, [`AddressVector`]s and
//!   [`Endpoint`]s over one provider ([`provider::DomainProvider`]).
//! - Endpoints are reliable and connectionless to the user (libfabric RDM):
//!   message, tagged and inject operations to peers named by [`PeerAddr`].
//! - Every operation ends in a [`Completion`] (errors too), carrying the
//!   user's context, flags, length, tag, immediate data and source.
//! - Shared machinery providers embed instead of rewriting: the
//!   reliable-messaging layer ([`rdm`]: receives and their matching), the
//!   tag matcher ([`tag::Matcher`]), the address table, the epoll wrapper.
//!
//! No provider code and no system RDMA headers live here.
#![deny(missing_docs)]

pub mod addr;
pub mod attr;
mod av;
pub mod buffer;
pub mod complete;
pub mod completion;
mod cq;
mod domain;
mod endpoint;
pub mod error;
pub mod hash;
pub mod log;
pub mod mr;
pub mod peek;
pub mod provider;
pub mod rdm;
pub mod sink;
pub mod sys;
pub mod tag;

pub use addr::{Address, PeerAddr};
pub use attr::{CqAttr, DomainAttr, EndpointAttr, JobKey, TcpAttr};
pub use av::AddressVector;
pub use buffer::{Buffer, LocalDesc};
pub use completion::{Completion, Flags};
pub use cq::CompletionQueue;
pub use domain::Domain;
pub use endpoint::Endpoint;
pub use error::{Error, Result};
pub use mr::{Access, MemoryRegion, RemoteKey};
pub use peek::{Claim, Peeked};
pub use provider::{RecvOp, Rejected, RmaKind, RmaOp, SendOp};
pub use tag::RecvSpec;
