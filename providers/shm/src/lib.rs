//! xfer-shm: the machinery of xfer's same-host transport.
//!
//! Two processes on one host talk through a segment per peer pair: a sealed
//! memfd, mapped by both, holding two single-producer single-consumer rings
//! of cache-line entries (one per direction). The segment, an eventfd per
//! side for wake-ups and the peer's identity (`SO_PEERCRED`) travel over a
//! Unix `SOCK_SEQPACKET` socket whose close also tells that the peer died.
//! Large payloads move in one copy with cross-memory attach
//! (`process_vm_readv`), probed at run time.
//!
//! [`ShmPort`] is what a transport holds: an address to listen on,
//! `connect`, `send` of a frame (a header of up to 64 bytes and a payload),
//! one `poll` over every peer's ring, a wait descriptor, `cma_read`, and
//! peer death as an event. Under the RDM engine, [`ShmTransport`] also
//! moves RMA on a key the target granted in one copy into or out of the
//! target's region, guarded by the target's [`fence`]. [`Rma`] adds reads and writes of a peer's
//! registered regions ([`Regions`], random keys, checked by the target), by
//! cross-memory attach or, where that is refused, through the ring. It is not an endpoint provider yet; see
//! docs/SHM.md for the protocols, the bounds and what is not built.
//!
//! ```
//! use xfer_shm::{Event, ShmConfig, ShmPort};
//! let cfg = ShmConfig::default();
//! let mut a = ShmPort::open(&cfg).unwrap();
//! let mut b = ShmPort::open(&cfg).unwrap();
//! let to_b = a.connect(b.address()).unwrap();
//! a.send(to_b, b"hdr", b"hello").unwrap();
//! let mut got = Vec::new();
//! while got.is_empty() {
//!     b.wait(Some(std::time::Duration::from_secs(5))).unwrap();
//!     b.poll(|ev| if let Event::Frame { frame, .. } = ev { got = frame.payload.to_vec() });
//! }
//! assert_eq!(got, b"hello");
//! ```
#![deny(missing_docs)]

pub mod cma;
pub mod config;
mod domain;
pub mod entry;
pub mod fence;
mod hello;
pub mod host;
pub mod layout;
mod port;
pub mod region;
pub mod ring;
pub mod rma;
mod segment;
mod sys;
mod transport;

pub use cma::{Cma, CmaError};
pub use config::ShmConfig;
pub use domain::{deregister, native_rma, ShmDomain, PROVIDER_ID};
pub use port::{DownReason, Event, PeerId, PeerInfo, SendError, ShmPort, Sink, BUDGET, SERVICE_EVERY};
pub use region::{Access, RegionError, Regions};
pub use ring::{Bytes, Frame};
pub use rma::{Completion, Path, Rma, RmaError, Transfer};
pub use transport::ShmTransport;

#[doc(hidden)]
pub mod fuzzing;
