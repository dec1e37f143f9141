//! Protection domain.

use std::sync::Arc;

use crate::rdma_core::{ibv_alloc_pd, ibv_dealloc_pd};
use rdma_sys::ibv_pd;
use xfer_core::Result;

use crate::device::Context;
use crate::sys::last_os_error;

/// A protection domain (`ibv_pd`), deallocated on drop. Holds its context.
pub struct Pd {
    pd: *mut ibv_pd,
    ctx: Arc<Context>,
}

// SAFETY: an ibv_pd is only passed to libibverbs calls, which are thread-safe;
// the pointer is never dereferenced mutably by this crate.
unsafe impl Send for Pd {}
// SAFETY: as above; all methods take &self and only read the pointer.
unsafe impl Sync for Pd {}

impl Pd {
    /// Allocates a protection domain on `ctx`.
    pub fn new(ctx: &Arc<Context>) -> Result<Arc<Pd>> {
        // SAFETY: ctx.as_ptr() is an open context, kept alive by the Arc we store.
        let pd = unsafe { ibv_alloc_pd(ctx.as_ptr()) };
        if pd.is_null() {
            return Err(last_os_error());
        }
        Ok(Arc::new(Pd { pd, ctx: ctx.clone() }))
    }

    /// The raw `ibv_pd`.
    pub fn as_ptr(&self) -> *mut ibv_pd {
        self.pd
    }

    /// The context the PD belongs to.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: pd was allocated by ibv_alloc_pd and every object using it holds
        // an Arc<Pd>, so none is left when this runs.
        let rc = unsafe { ibv_dealloc_pd(self.pd) };
        if rc != 0 {
            tracing::warn!(rc, "ibv_dealloc_pd failed");
        }
    }
}
