//! xfer-verbs: the RDMA verbs provider of xfer, on `rdma-sys`.
//!
//! This crate holds the verbs building blocks, each a safe RAII wrapper over one
//! libibverbs/librdmacm object: device discovery ([`device`]), protection domain
//! ([`pd`]), completion queue and channel ([`cq`]), shared receive queue with its
//! bounce-buffer pool ([`srq`]), memory registration for the MR cache ([`mr`]),
//! RC queue pairs with selective signaling ([`qp`]) and rdma_cm connection set-up
//! ([`cm`]). The tunables are in [`attr`].
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
mod domain;
mod endpoint;
pub mod mr;
pub mod name;
pub mod pd;
pub mod qp;
pub mod srq;
mod sys;
pub mod wire;

pub use attr::VerbsAttr;
pub use cm::{CmConnection, CmListener};
pub use cq::{CompletionChannel, Cq, Wc};
pub use device::{probe, Context, DeviceAttr, DeviceInfo, GidEntry, PortAttr, Probe};
pub use domain::{listen_ip, VerbsDomain};
pub use endpoint::VerbsEndpoint;
pub use mr::{Mr, VerbsRegistrar};
pub use name::{VerbsName, PROVIDER_ID};
pub use pd::Pd;
pub use qp::{QpConfig, RcQp, RemoteBuf};
pub use srq::{Srq, SrqConfig};
