//! Access rights of a memory registration, as a small set of flags.
//!
//! Hand-rolled instead of the `bitflags` crate: three flags do not earn a
//! dependency (DESIGN.md), and a plain `u32` newtype keeps the C ABI mapping
//! obvious.

use std::fmt;
use std::ops::{BitAnd, BitOr, BitOrAssign};

/// What a registration allows: the NIC writing into it, and peers reading or
/// writing it remotely. Local reads are always allowed.
///
/// A set of flags combined with `|`:
///
/// ```
/// use xfer_core::unstable::mr::Access;
/// let a = Access::LOCAL_WRITE | Access::REMOTE_READ;
/// assert!(a.contains(Access::REMOTE_READ));
/// assert!(!a.contains(Access::REMOTE_WRITE));
/// assert_eq!(format!("{a:?}"), "LOCAL_WRITE | REMOTE_READ");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u32);

impl Access {
    /// The local NIC may write into the memory (receive and RDMA-read targets).
    pub const LOCAL_WRITE: Access = Access(1 << 0);
    /// Peers may read the memory with RMA.
    pub const REMOTE_READ: Access = Access(1 << 1);
    /// Peers may write the memory with RMA.
    pub const REMOTE_WRITE: Access = Access(1 << 2);

    const NAMES: [(Access, &'static str); 3] = [
        (Access::LOCAL_WRITE, "LOCAL_WRITE"),
        (Access::REMOTE_READ, "REMOTE_READ"),
        (Access::REMOTE_WRITE, "REMOTE_WRITE"),
    ];

    /// No rights beyond local reads.
    pub const fn empty() -> Access {
        Access(0)
    }

    /// Every right.
    pub const fn all() -> Access {
        Access(Self::LOCAL_WRITE.0 | Self::REMOTE_READ.0 | Self::REMOTE_WRITE.0)
    }

    /// The raw bits (`LOCAL_WRITE` = 1, `REMOTE_READ` = 2, `REMOTE_WRITE` = 4).
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// The set with these bits, or `None` if an unknown bit is set.
    pub const fn from_bits(bits: u32) -> Option<Access> {
        if bits & !Self::all().0 == 0 {
            Some(Access(bits))
        } else {
            None
        }
    }

    /// True if no flag is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// True if every flag of `other` is set in `self`.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// The flags set in either.
    pub const fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }
}

impl BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        self.union(rhs)
    }
}

impl BitOrAssign for Access {
    fn bitor_assign(&mut self, rhs: Access) {
        *self = self.union(rhs);
    }
}

impl BitAnd for Access {
    type Output = Access;
    fn bitand(self, rhs: Access) -> Access {
        Access(self.0 & rhs.0)
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("(empty)");
        }
        let mut first = true;
        for (flag, name) in Self::NAMES {
            if self.contains(flag) {
                if !first {
                    f.write_str(" | ")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_combine_and_contain() {
        let rw = Access::REMOTE_READ | Access::REMOTE_WRITE;
        assert!(rw.contains(Access::REMOTE_READ));
        assert!(!rw.contains(Access::LOCAL_WRITE));
        assert!(Access::all().contains(rw));
        assert!(rw.contains(Access::empty()));
        assert_eq!(rw & Access::REMOTE_WRITE, Access::REMOTE_WRITE);
        let mut a = Access::empty();
        a |= Access::LOCAL_WRITE;
        assert_eq!(a.bits(), 1);
    }

    #[test]
    fn unknown_bits_are_rejected() {
        assert_eq!(Access::from_bits(7), Some(Access::all()));
        assert_eq!(Access::from_bits(8), None);
        assert_eq!(format!("{:?}", Access::empty()), "(empty)");
    }
}
