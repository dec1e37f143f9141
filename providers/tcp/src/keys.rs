//! The domain's key table: what a TCP memory registration is.
//!
//! A registration is an entry `{addr, len, access}`; its remote key is the
//! slab index in the low 32 bits and a per-domain generation in the high 32
//! bits, so a key whose registration is gone (and whose slot was reused)
//! fails the lookup. Endpoints reach the table through
//! `Ctx::domain` (`DomainProvider::remote_target`) when a peer's RMA request
//! arrives; every check happens before a byte of target memory is touched.

use slab::Slab;
use xfer_core::error::{Error, Result};
use xfer_core::mr::Access;
use xfer_core::provider::MrKeys;

use crate::wire::status;

#[derive(Debug, Clone, Copy)]
struct Entry {
    addr: usize,
    len: usize,
    access: Access,
    gen: u32,
}

/// Registrations of one domain.
#[derive(Debug, Default)]
pub struct KeyTable {
    entries: Slab<Entry>,
    gen: u32,
}

impl KeyTable {
    /// Adds a registration of `[addr, addr + len)`.
    pub fn insert(&mut self, addr: usize, len: usize, access: Access) -> Result<MrKeys> {
        if addr.checked_add(len).is_none() {
            return Err(Error::InvalidArgument("region wraps the address space"));
        }
        if self.entries.len() >= u32::MAX as usize {
            return Err(Error::Again);
        }
        self.gen = self.gen.wrapping_add(1).max(1);
        let idx = self.entries.insert(Entry {
            addr,
            len,
            access,
            gen: self.gen,
        });
        let key = (idx as u64) | (u64::from(self.gen) << 32);
        Ok(MrKeys { desc: key, key })
    }

    /// Removes the registration `key`; unknown keys are logged.
    pub fn remove(&mut self, key: u64) {
        let idx = (key & 0xffff_ffff) as usize;
        match self.entries.get(idx) {
            Some(e) if u64::from(e.gen) == key >> 32 => {
                self.entries.remove(idx);
            }
            _ => xfer_core::warn_limited!(key, "deregistration of an unknown key"),
        }
    }

    /// Checks `key`, bounds and access for `[addr, addr + len)`; the status
    /// code of the failed check, or a pointer to `addr`.
    pub fn check(&self, key: u64, addr: u64, len: u64, access: Access) -> std::result::Result<*mut u8, u64> {
        let idx = (key & 0xffff_ffff) as usize;
        let e = match self.entries.get(idx) {
            Some(e) if u64::from(e.gen) == key >> 32 => e,
            _ => return Err(status::UNKNOWN_KEY),
        };
        let start = e.addr as u64;
        let end = start + e.len as u64; // checked at insert
        let inside = addr >= start && addr.checked_add(len).is_some_and(|last| last <= end);
        if !inside {
            return Err(status::OUT_OF_BOUNDS);
        }
        if !e.access.contains(access) {
            return Err(status::ACCESS_DENIED);
        }
        Ok(addr as usize as *mut u8)
    }
}

/// The error an initiator's operation gets for a failed status.
pub fn status_error(code: u64) -> Error {
    Error::RemoteAccess(status::text(code))
}

/// The status code of an error from `DomainProvider::remote_target`.
pub fn status_of(e: &Error) -> u64 {
    match e {
        Error::RemoteAccess(text) => (1..=status::MAX)
            .find(|&c| status::text(c) == *text)
            .unwrap_or(status::ACCESS_DENIED),
        _ => status::ACCESS_DENIED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_key_bounds_and_access() {
        let mut t = KeyTable::default();
        let k = t.insert(0x1000, 0x100, Access::REMOTE_READ).unwrap().key;
        assert!(t.check(k, 0x1000, 0x100, Access::REMOTE_READ).is_ok());
        assert!(t.check(k, 0x1100, 0, Access::REMOTE_READ).is_ok());
        assert_eq!(
            t.check(k, 0x1001, 0x100, Access::REMOTE_READ),
            Err(status::OUT_OF_BOUNDS)
        );
        assert_eq!(t.check(k, 0xfff, 1, Access::REMOTE_READ), Err(status::OUT_OF_BOUNDS));
        assert_eq!(t.check(k, u64::MAX, 2, Access::REMOTE_READ), Err(status::OUT_OF_BOUNDS));
        assert_eq!(t.check(k, 0x1000, 1, Access::REMOTE_WRITE), Err(status::ACCESS_DENIED));
        assert_eq!(
            t.check(k ^ (1 << 40), 0x1000, 1, Access::REMOTE_READ),
            Err(status::UNKNOWN_KEY)
        );
        t.remove(k);
        assert_eq!(t.check(k, 0x1000, 1, Access::REMOTE_READ), Err(status::UNKNOWN_KEY));
        let k2 = t.insert(0x1000, 0x100, Access::all()).unwrap().key;
        assert_ne!(k, k2, "a reused slot gets a new key");
        assert_eq!(t.check(k, 0x1000, 1, Access::REMOTE_READ), Err(status::UNKNOWN_KEY));
    }
}
