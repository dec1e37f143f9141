//! Counters bound to memory regions (`fi_mr_bind` of a counter with
//! `FI_REMOTE_WRITE` and/or `FI_REMOTE_READ`, fi_mr(3)): the counter counts
//! the writes and reads peers apply to that region, whichever endpoint of
//! the domain they arrive at.
//!
//! The events are the ones remote counters on endpoints count: an endpoint
//! with `FI_RMA_EVENT` has its xfer endpoint report every RMA applied to it
//! (`EndpointAttr::rma_events`, `tcp` and `shm` only), each naming the region by its
//! key (the completion's `tag`). The router hands each to the domain's
//! [`RegionCounters`], which counts it on the counters bound to that key.
//! Progress is manual: a counter bound to a region drives the domain's
//! endpoints with `FI_RMA_EVENT` when it is read or waited on.

use std::sync::Arc;
use std::sync::Mutex;

use xfer_core::unstable::hash::FastMap;
use xfer_facade::Flags;

use crate::cntr::CntrCore;
use crate::cq::Driven;
use crate::entry::lock;
use crate::fi;

/// The counters of one region.
#[derive(Default)]
struct Bound {
    write: Option<Arc<CntrCore>>,
    read: Option<Arc<CntrCore>>,
}

/// A domain's counters bound to regions, by region key.
pub(crate) struct RegionCounters {
    by_key: Mutex<FastMap<u64, Bound>>,
    /// The domain's enabled endpoints with `FI_RMA_EVENT`, where RMA
    /// events arrive: driven by the reads and waits of these counters.
    pub(crate) eps: Driven,
}

impl RegionCounters {
    /// None yet; `serial`: the domain is `FI_THREAD_DOMAIN` (latch.rs).
    pub(crate) fn new(serial: bool) -> RegionCounters {
        RegionCounters {
            by_key: Mutex::default(),
            eps: Driven::new(serial),
        }
    }

    /// Binds `cntr` to the region of `key` for `flags` (`FI_REMOTE_WRITE`,
    /// `FI_REMOTE_READ`, or both).
    pub(crate) fn bind(&self, key: u64, cntr: &Arc<CntrCore>, flags: u64) {
        let mut by_key = lock(&self.by_key);
        let b = by_key.entry(key).or_default();
        if flags & fi::FI_REMOTE_WRITE != 0 {
            b.write = Some(cntr.clone());
        }
        if flags & fi::FI_REMOTE_READ != 0 {
            b.read = Some(cntr.clone());
        }
    }

    /// The region of `key` is closed: its counters are free again.
    pub(crate) fn unbind(&self, key: u64) {
        lock(&self.by_key).remove(&key);
    }

    /// Counts an RMA event (`REMOTE_WRITE` or `REMOTE_READ` in `flags`) on
    /// the region of `key`.
    pub(crate) fn hit(&self, key: u64, flags: Flags, ok: bool) {
        let by_key = lock(&self.by_key);
        let Some(b) = by_key.get(&key) else { return };
        let k = match flags.contains(Flags::REMOTE_WRITE) {
            true => &b.write,
            false => &b.read,
        };
        if let Some(k) = k {
            k.hit(ok);
        }
    }
}
