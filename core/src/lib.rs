//! xfer-core: the object model every xfer provider plugs into.
//!
//! Rust programs use it through the `xfer` facade, which opens a provider
//! and re-exports this API:
//!
//! - [`Domain`] opens [`CompletionQueue`]s, [`AddressVector`]s and
//!   [`Endpoint`]s over one provider.
//! - Endpoints are reliable and connectionless to the user (libfabric RDM):
//!   message, tagged, inject and RMA operations to peers named by
//!   [`PeerAddr`]; an endpoint's name is an [`Address`].
//! - Every operation ends in a [`Completion`] (errors too), carrying the
//!   user's context, flags, length, tag, immediate data and source.
//! - [`Domain::register`] gives a [`MemoryRegion`] whose [`RemoteKey`]
//!   peers use for RMA.
//!
//! ```
//! use xfer_core::{Address, Completion, EndpointAttr, Flags};
//!
//! let name: Address = "01c0a80001".parse()?;
//! assert_eq!(name.to_string(), "01c0a80001");
//! let mut attr = EndpointAttr::default();
//! attr.max_outstanding = 64;
//! let c = Completion::new(1, Flags::SEND | Flags::TAGGED, Ok(()));
//! assert!(c.result.is_ok());
//! # Ok::<(), xfer_core::Error>(())
//! ```
//!
//! Providers are built on the traits and shared machinery (the
//! reliable-messaging layer's receives and their matching, tag matcher,
//! address table, completion builders, registration cache, epoll wrapper)
//! in the hidden `unstable` module; it is not part of the stable API and
//! changes in any release. No provider code and no system RDMA headers
//! live here.
#![deny(missing_docs)]

mod addr;
#[cfg(feature = "serde")]
mod addr_serde;
mod atomic;
mod attr;
mod av;
mod buffer;
mod complete;
mod completion;
mod cq;
mod domain;
mod endpoint;
mod error;
mod event;
mod hash;
mod knob;
mod lock;
#[doc(hidden)]
pub mod log;
mod mr;
mod params;
mod peek;
mod provider;
mod rdm;
mod sink;
mod sys;
mod tag;
#[doc(hidden)]
pub mod unstable;

pub use addr::{Address, PeerAddr};
pub use atomic::{AtomicCaps, AtomicKind, AtomicMode, AtomicOp, Datatype};
pub use attr::{CqAttr, DomainAttr, EndpointAttr, JobKey, Setting};
pub use av::AddressVector;
pub use buffer::{Buffer, LocalDesc};
pub use completion::{Completion, Flags};
pub use cq::CompletionQueue;
pub use domain::Domain;
pub use endpoint::Endpoint;
pub use error::{Error, Result};
pub use event::{PeerEvent, PeerEventKind};
pub use lock::Threading;
pub use mr::{Access, MemoryRegion, RemoteKey};
pub use params::Params;
pub use peek::{Claim, Peeked};
pub use provider::{CompletionLevel, RecvOp, Rejected, RmaKind, RmaOp, SendOp};
pub use tag::RecvSpec;
