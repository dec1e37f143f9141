//! Memory registration cache.
//!
//! Registering memory with a NIC costs microseconds to milliseconds, so
//! every zero-copy path (rendezvous, RMA from user buffers) goes through a
//! cache that reuses registrations: [`MrCache::lookup`] returns a cached
//! registration covering a buffer or registers its page-aligned span through
//! the provider's [`Registrar`]. Stale entries after `free()` are the classic
//! source of silent corruption, so the cache drops entries whose memory is
//! unmapped, as reported by a [`Monitor`] ([`UffdMonitor`] by default).
//!
//! - [`tree`]: the address-range map entries live in;
//! - [`cache`]: lookups, reference counts, LRU, limits, invalidation;
//! - [`unmap`]: the monitors, and what they do and do not catch;
//! - [`region`]: [`MemoryRegion`] (what `Domain::register` returns) and
//!   [`RemoteKey`] (packable to bytes for peers);
//! - [`MrCacheAttr`]: limits with their `XFER_MR_CACHE_*` variables.

mod access;
mod attr;
pub mod cache;
pub mod keys;
pub mod region;
pub mod tree;
pub mod unmap;

#[cfg(test)]
mod tests;

pub use access::Access;
pub use attr::{MonitorKind, MrCacheAttr};
pub use cache::{CacheRef, MrCache, MrCacheStats, Registrar};
pub use region::{MemoryRegion, RemoteKey, RKEY_LEN};
pub use unmap::{Events, ManualMonitor, Monitor, NoMonitor, Span, UffdMonitor};
