//! A domain's key table: what a memory registration is for a transport that
//! serves RMA in software (TCP, shared memory).
//!
//! A registration is an entry `{addr, len, access}` under a remote key of
//! 64 random bits from the kernel (`getrandom`), so a peer cannot find a
//! registration by guessing keys around one it knows: a key near another
//! is as unlikely to exist as any other (one in 2^64 per registration), and
//! a key whose registration is gone does not come back for another. A peer
//! must also name an address inside the region and the access it allows.
//! Endpoints reach the table through `Ctx::domain`
//! (`DomainProvider::remote_target`) when a peer's RMA request arrives;
//! every check happens before a byte of target memory is touched.

use crate::error::{Error, Result};
use crate::hash::FastMap;
use crate::mr::Access;
use crate::provider::MrKeys;
use crate::sys;

#[derive(Debug, Clone, Copy)]
struct Entry {
    addr: usize,
    len: usize,
    access: Access,
}

/// Registrations of one domain, by remote key.
#[derive(Debug, Default)]
pub struct KeyTable {
    entries: FastMap<u64, Entry>,
}

impl KeyTable {
    /// Adds a registration of `[addr, addr + len)` under a new random key.
    pub fn insert(&mut self, addr: usize, len: usize, access: Access) -> Result<MrKeys> {
        if addr.checked_add(len).is_none() {
            return Err(Error::InvalidArgument("region wraps the address space"));
        }
        let key = loop {
            // Zero is left out: a zeroed key field is never a registration.
            match sys::secret_u64()? {
                0 => continue,
                k if self.entries.contains_key(&k) => continue,
                k => break k,
            }
        };
        self.entries.insert(key, Entry { addr, len, access });
        Ok(MrKeys { desc: key, key })
    }

    /// Adds a registration of `[addr, addr + len)` under the key `make`
    /// turns a fresh random value into (a provider that folds its device
    /// key into the remote key); a key that is zero or taken draws again.
    pub fn insert_with(&mut self, addr: usize, len: usize, access: Access, make: impl Fn(u64) -> u64) -> Result<u64> {
        if addr.checked_add(len).is_none() {
            return Err(Error::InvalidArgument("region wraps the address space"));
        }
        let key = loop {
            match make(sys::secret_u64()?) {
                0 => continue,
                k if self.entries.contains_key(&k) => continue,
                k => break k,
            }
        };
        self.entries.insert(key, Entry { addr, len, access });
        Ok(key)
    }

    /// The region (start, length) of registration `key` if it grants `access`.
    pub fn region(&self, key: u64, access: Access) -> Option<(u64, u64)> {
        let e = self.entries.get(&key)?;
        e.access.contains(access).then_some((e.addr as u64, e.len as u64))
    }

    /// Removes the registration `key`; unknown keys are logged.
    pub fn remove(&mut self, key: u64) {
        if self.entries.remove(&key).is_none() {
            crate::warn_limited!(key, "deregistration of an unknown key");
        }
    }

    /// Checks `key`, bounds and access for `[addr, addr + len)`; the status
    /// code of the failed check, or a pointer to `addr`.
    pub fn check(&self, key: u64, addr: u64, len: u64, access: Access) -> std::result::Result<*mut u8, u64> {
        let Some(e) = self.entries.get(&key) else {
            return Err(status::UNKNOWN_KEY);
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

    /// [`check`](Self::check) with a failed check as its
    /// [`Error::RemoteAccess`]: what a domain serving RMA in software
    /// answers (`DomainProvider::remote_target`).
    pub fn target(&self, key: u64, addr: u64, len: u64, access: Access) -> Result<*mut u8> {
        self.check(key, addr, len, access).map_err(status_error)
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

/// The status codes of a target's answer to an RMA request, on every
/// transport's wire.
pub mod status {
    /// Applied.
    pub const OK: u64 = 0;
    /// The key names no live registration.
    pub const UNKNOWN_KEY: u64 = 1;
    /// The range is not inside the registration.
    pub const OUT_OF_BOUNDS: u64 = 2;
    /// The registration does not grant this access.
    pub const ACCESS_DENIED: u64 = 3;
    /// The registration went away while the payload was arriving.
    pub const DEREGISTERED: u64 = 4;
    /// The largest status of an RMA answer.
    pub const MAX: u64 = DEREGISTERED;
    /// An atomic's element is not aligned to its datatype.
    pub const MISALIGNED: u64 = 5;
    /// An atomic operation or datatype the target does not know.
    pub const BAD_ATOMIC: u64 = 6;
    /// The largest status of an atomic's answer.
    pub const ATOMIC_MAX: u64 = BAD_ATOMIC;

    /// The text of a failed status, as carried by `Error::RemoteAccess`.
    pub fn text(code: u64) -> &'static str {
        match code {
            UNKNOWN_KEY => "unknown remote key",
            OUT_OF_BOUNDS => "range outside the remote region",
            ACCESS_DENIED => "the remote region does not allow this access",
            DEREGISTERED => "the remote region was deregistered during the transfer",
            MISALIGNED => "the remote element is not aligned to its datatype",
            BAD_ATOMIC => "the target does not apply this atomic operation on this datatype",
            _ => "unknown status",
        }
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
        assert_ne!(k, k2, "a registration gets a new key");
        assert_eq!(t.check(k, 0x1000, 1, Access::REMOTE_READ), Err(status::UNKNOWN_KEY));
    }

    /// Keys of consecutive registrations share no visible structure: no
    /// common high or low half, and no small difference.
    #[test]
    fn keys_are_random() {
        let mut t = KeyTable::default();
        let keys: Vec<u64> = (0..64)
            .map(|_| t.insert(0x1000, 0x100, Access::all()).unwrap().key)
            .collect();
        for w in keys.windows(2) {
            assert!(w[0].abs_diff(w[1]) > 1 << 32, "{:#x} then {:#x}", w[0], w[1]);
        }
        let same_high = keys.iter().filter(|&&k| k >> 32 == keys[0] >> 32).count();
        let same_low = keys.iter().filter(|&&k| k as u32 == keys[0] as u32).count();
        assert_eq!((same_high, same_low), (1, 1), "{keys:#x?}");
    }
}
