//! Memory registration: [`Mr`] wraps `ibv_reg_mr`, and [`VerbsRegistrar`] plugs
//! it into `xfer_core::unstable::mr::MrCache`.

use std::fmt;
use std::sync::Arc;

use crate::rdma_core::{ibv_dereg_mr, ibv_reg_mr};
use rdma_sys::{ibv_access_flags, ibv_mr};
use xfer_core::unstable::mr::{Access, CacheRef, MrCache, Registrar};
use xfer_core::{Error, Result};

use crate::pd::Pd;
use crate::sys::last_os_error;

/// The `ibv_access_flags` for `access`. Remote write requires local write in
/// verbs (`ibv_reg_mr` fails with EINVAL otherwise), so it is added.
pub fn access_flags(access: Access) -> u32 {
    let mut f = 0;
    if access.contains(Access::LOCAL_WRITE) {
        f |= ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
    }
    if access.contains(Access::REMOTE_READ) {
        f |= ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
    }
    if access.contains(Access::REMOTE_WRITE) {
        f |= ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0 | ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
    }
    f
}

/// A registered memory region, deregistered on drop. It does not own the
/// memory: whoever registers must keep it mapped while the MR or any work
/// request using its keys lives (the MR cache's monitor checks this for cached
/// spans).
pub struct Mr {
    mr: *mut ibv_mr,
    addr: usize,
    len: usize,
    /// Copied out of `*mr` at registration: a registration-cache hit then
    /// reads the keys from the cache entry instead of chasing the pointer
    /// into rdma-core's allocation (one dependent cache miss less).
    lkey: u32,
    rkey: u32,
    _pd: Arc<Pd>,
}

// SAFETY: the MR is immutable after registration; ibv_dereg_mr may run on any thread.
unsafe impl Send for Mr {}
// SAFETY: only lkey/rkey/addr/len are read through &self.
unsafe impl Sync for Mr {}

impl Mr {
    /// Registers `[addr, addr + len)` with `access` on `pd`. Memory that is not
    /// mapped makes registration fail (EFAULT); nothing is touched by the CPU.
    pub fn register(pd: &Arc<Pd>, addr: usize, len: usize, access: Access) -> Result<Mr> {
        Mr::register_flags(pd, addr, len, access_flags(access))
    }

    /// [`register`](Mr::register) with remote atomic access too
    /// (`IBV_ACCESS_REMOTE_ATOMIC`, which needs local write): peers'
    /// devices may do atomics on it.
    pub fn register_atomic(pd: &Arc<Pd>, addr: usize, len: usize, access: Access) -> Result<Mr> {
        let atomic = ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0 | ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        Mr::register_flags(pd, addr, len, access_flags(access) | atomic)
    }

    fn register_flags(pd: &Arc<Pd>, addr: usize, len: usize, flags: u32) -> Result<Mr> {
        if len == 0 {
            return Err(Error::InvalidArgument("cannot register zero bytes"));
        }
        let flags = flags as libc::c_int;
        // SAFETY: pd is valid; the kernel pins and validates the range itself, the
        // CPU never dereferences addr here.
        let mr = unsafe { ibv_reg_mr(pd.as_ptr(), addr as *mut libc::c_void, len, flags) };
        if mr.is_null() {
            return Err(last_os_error());
        }
        // SAFETY: ibv_reg_mr returned a valid MR, alive until ibv_dereg_mr.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        Ok(Mr {
            mr,
            addr,
            len,
            lkey,
            rkey,
            _pd: pd.clone(),
        })
    }

    /// Registers a byte slice the caller keeps alive as long as the MR.
    pub fn register_slice(pd: &Arc<Pd>, buf: &[u8], access: Access) -> Result<Mr> {
        Mr::register(pd, buf.as_ptr() as usize, buf.len(), access)
    }

    /// Local key (for scatter/gather entries).
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// Remote key (for peers' RMA).
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// Start of the registered range.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Length of the registered range.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if the range is empty (never: registration refuses zero bytes).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True if `[addr, addr + len)` lies within the registration.
    pub fn covers(&self, addr: usize, len: usize) -> bool {
        addr >= self.addr && addr.checked_add(len).is_some_and(|e| e <= self.addr + self.len)
    }
}

impl fmt::Debug for Mr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mr")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .finish()
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: mr came from ibv_reg_mr and is deregistered once.
        let rc = unsafe { ibv_dereg_mr(self.mr) };
        if rc != 0 {
            tracing::warn!(rc, addr = self.addr, len = self.len, "ibv_dereg_mr failed");
        }
    }
}

/// Registers through `ibv_reg_mr` for `xfer_core::unstable::mr::MrCache`.
pub struct VerbsRegistrar {
    pd: Arc<Pd>,
    registered: u64,
}

impl VerbsRegistrar {
    /// A registrar on `pd`.
    pub fn new(pd: &Arc<Pd>) -> Self {
        VerbsRegistrar {
            pd: pd.clone(),
            registered: 0,
        }
    }

    /// Registrations made so far.
    pub fn registrations(&self) -> u64 {
        self.registered
    }
}

impl Registrar for VerbsRegistrar {
    type Handle = Mr;

    fn register(&mut self, addr: usize, len: usize, access: Access) -> Result<Mr> {
        let mr = Mr::register(&self.pd, addr, len, access)?;
        self.registered += 1;
        Ok(mr)
    }

    fn deregister(&mut self, handle: Mr) {
        drop(handle);
    }
}

/// The lkey and rkey of `[ptr, ptr + len)` with `access`, registered
/// through `cache`, and the reference that keeps the registration until it
/// is released.
pub fn cached_keys(
    cache: &mut MrCache<VerbsRegistrar>,
    ptr: usize,
    len: usize,
    access: Access,
) -> Result<(CacheRef, u32, u32)> {
    let r = cache.lookup(ptr, len, access)?;
    match cache.handle(&r).map(|mr| (mr.lkey(), mr.rkey())) {
        Some((l, rk)) => Ok((r, l, rk)),
        None => {
            let _ = cache.release(r);
            Err(Error::Internal("MR cache entry without a registration"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_write_implies_local_write() {
        let lw = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        let rw = ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
        let rr = ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
        assert_eq!(access_flags(Access::REMOTE_WRITE), rw | lw);
        assert_eq!(access_flags(Access::REMOTE_READ), rr);
        assert_eq!(access_flags(Access::empty()), 0);
        assert_eq!(access_flags(Access::all()), rw | lw | rr);
    }
}
