//! The interface providers are built on, **not part of xfer's stable API**:
//! the provider traits, the shared machinery a provider embeds (the
//! reliable-messaging layer's receives, tag matcher, address table,
//! completion builders, registration cache), the attribute helpers and the
//! system-call wrappers. Anything here may change
//! in any release, minor and patch ones included; the stable API is what
//! the crate root re-exports.
//!
//! Each module mirrors the core module of the same name.

/// Endpoint names and the address table ([`AvTable`](addr::AvTable)).
pub mod addr {
    pub use crate::addr::*;
}

/// Remote atomics: their kinds, datatypes and the target's application.
pub mod atomic {
    pub use crate::atomic::*;
}

/// Attribute structs and the `XFER_*` environment helpers.
pub mod attr {
    pub use crate::attr::*;
}

/// Owned and raw operation buffers.
pub mod buffer {
    pub use crate::buffer::*;
}

/// Building completion entries from finished operations.
pub mod complete {
    pub use crate::complete::*;
}

/// Completion entries and their flags.
pub mod completion {
    pub use crate::completion::*;
}

/// The error type.
pub mod error {
    pub use crate::error::*;
}

/// The fast hasher of core's maps.
pub mod event {
    pub use crate::event::*;
}

pub mod hash {
    pub use crate::hash::*;
}

/// A transport's plain settings described once, in a table.
pub mod knob {
    pub use crate::knob::*;
}

/// Memory registration: regions, remote keys, the registration cache.
pub mod mr {
    pub use crate::mr::*;
}

/// Transport settings as key/value pairs.
pub mod params {
    pub use crate::params::*;
}

/// Peeked and claimed unexpected messages.
pub mod peek {
    pub use crate::peek::*;
}

/// The traits a provider implements and the operation descriptors.
pub mod provider {
    pub use crate::provider::*;
}

/// The reliable-messaging layer: an endpoint's posted and unexpected receives.
pub mod rdm {
    pub use crate::rdm::*;
}

/// Where a provider's completions go during a call.
pub mod sink {
    pub use crate::sink::*;
}

/// System-call wrappers (epoll, errno).
pub mod sys {
    pub use crate::sys::*;
}

/// The tag matcher providers embed.
pub mod tag {
    pub use crate::tag::*;
}
