//! xfer-verbs: the RDMA verbs provider of xfer, on `rdma-sys`.
//!
//! This crate holds the verbs building blocks, each a safe RAII wrapper over one
//! libibverbs/librdmacm object: device discovery ([`device`]), protection domain
//! ([`pd`]), completion queue and channel ([`cq`]), shared receive queue with its
//! bounce-buffer pool ([`srq`]), memory registration for the MR cache ([`mr`]),
//! RC queue pairs with selective signaling ([`qp`]) and rdma_cm connection set-up
//! ([`cm`]). The tunables are in [`attr`]. rdma-core itself is opened at run
//! time ([`rdma_core`]): nothing here needs it to be installed until verbs is used.
//!
//! Ownership: every object holds an `Arc` of what it was created from (a QP holds
//! its PD, CQ and SRQ; a PD holds its context), so destruction order is always
//! valid whatever order the user drops things in.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod attr;
pub mod cm;
pub mod cq;
pub mod device;
pub mod mr;
pub mod name;
pub mod pd;
mod pool;
pub mod qp;
pub mod rdma_core;
mod select;
pub mod srq;
mod sys;
pub mod transport;

/// Decoders of peer bytes that are otherwise private, for the fuzz targets
/// in `fuzz/` (docs/FUZZING.md). Not part of the API.
#[doc(hidden)]
pub mod fuzzing {

    /// Length of the rdma_cm private data of a `verbs` connection.
    pub const RDM_PRIVATE_LEN: usize = crate::transport::conn::PRIVATE_LEN;

    /// The rdma_cm private data of a `verbs` connection: magic,
    /// version, `kind` (1 request, 2 acceptance), the receive slots
    /// granted, a nonce.
    pub fn rdm_private(kind: u8, grant: u16, nonce: u64) -> [u8; RDM_PRIVATE_LEN] {
        crate::transport::conn::private(kind, grant, nonce)
    }

    /// Parses a `verbs` peer's rdma_cm private data (the CM may pad
    /// it): kind, grant, nonce; `None` for anything else. Never panics.
    pub fn parse_rdm_private(p: &[u8]) -> Option<(u8, u16, u64)> {
        crate::transport::conn::parse_private(p)
    }
}

pub use attr::VerbsAttr;
pub use cm::{CmConnection, CmListener};
pub use cq::{CompletionChannel, Cq, Wc};
pub use device::{probe, probe_ports, Context, DeviceAttr, DeviceInfo, GidEntry, PortAttr, Probe};
pub use mr::{Mr, VerbsRegistrar};
pub use name::VerbsName;
pub use pd::Pd;
pub use qp::{QpConfig, RcQp, RemoteBuf};
pub use select::{choose, listen_ip, select, Lack, Selection, Unavailable};
pub use srq::{Srq, SrqConfig};
pub use transport::domain::VerbsDomain;
pub use transport::domain::PROVIDER_ID;
pub use transport::VerbsTransport;
