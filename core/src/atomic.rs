//! Remote atomics: one element of a registered remote region read, combined
//! with an operand and written back as one indivisible step (libfabric's
//! `fi_atomic`, `fi_fetch_atomic`, `fi_compare_atomic` with a count of 1;
//! UCX's `ucp_atomic_op_nbx`). Operations and datatypes keep libfabric's
//! numbering, so the C ABI and the plug-in pass them through.
//!
//! A transport that serves RMA in software applies the operation at the
//! target with the CPU's atomic instructions ([`apply`]), after the same key,
//! bounds and access checks as RMA and an alignment check: atomicity holds
//! among all xfer atomics on the element; plain stores by the target
//! process, or plain RMA writes overlapping it, are not ordered with them
//! (as libfabric and UCX say of theirs).
//!
//! In the `device` [`AtomicMode`] (verbs), a region's atomics are its
//! initiators' devices' instead: atomic among themselves only, not with the
//! target CPU's atomics or stores, so a region is never served both ways.
//!
//! ```
//! use xfer_core::{AtomicKind, Datatype};
//! let mut word = 40u64;
//! // SAFETY: `word` is a live, aligned u64 nobody else touches.
//! let old = unsafe { xfer_core::unstable::atomic::apply(&mut word as *mut u64 as *mut u8, AtomicKind::Sum, Datatype::U64, 2, 0) };
//! assert_eq!((old, word), (40, 42));
//! ```

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::addr::PeerAddr;
use crate::provider::CompletionLevel;

/// Who does remote atomics on a domain's registered regions (UCX's
/// `UCX_ATOMIC_MODE`; `XFER_ATOMIC_MODE`, `DomainAttr::atomic_mode`).
///
/// A device's atomics (verbs' `IBV_ATOMIC_HCA`, Soft-RoCE's too) are atomic
/// only with other atomics through the device, not with the target CPU's,
/// so one region is served one way only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum AtomicMode {
    /// `Device` on a domain whose only transport is verbs (`verbs`)
    /// with a device that has atomics; `Cpu` elsewhere.
    Auto,
    /// The target's CPU applies every atomic, whichever transport carried it
    /// (the default: one semantics on every provider, and atomic with the
    /// target's own CPU atomics).
    #[default]
    Cpu,
    /// A region registered with remote read and write is the device's: an
    /// initiator reaching its target over verbs asks for it first, then
    /// does every atomic on it by its device.
    Device,
}

impl std::str::FromStr for AtomicMode {
    type Err = crate::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "auto" => Ok(AtomicMode::Auto),
            "" | "cpu" => Ok(AtomicMode::Cpu),
            "device" => Ok(AtomicMode::Device),
            _ => Err(crate::Error::InvalidSetting(
                format!("atomic_mode: {s:?} is none of auto, cpu, device").into(),
            )),
        }
    }
}

impl std::fmt::Display for AtomicMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AtomicMode::Auto => "auto",
            AtomicMode::Cpu => "cpu",
            AtomicMode::Device => "device",
        })
    }
}

/// How a domain does remote atomics ([`Domain::atomic_caps`]).
///
/// [`Domain::atomic_caps`]: crate::Domain::atomic_caps
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct AtomicCaps {
    /// Who does them on its regions: [`AtomicMode::Cpu`] or
    /// [`AtomicMode::Device`] (`Auto` is resolved when the domain opens).
    pub mode: AtomicMode,
    /// Its verbs device's `ibv_device_attr.atomic_cap`: `none`, `hca`
    /// (atomic among the device's own atomics only) or `glob` (with the
    /// CPU's too); `None` on a domain without a verbs device.
    pub device_cap: Option<&'static str>,
}

impl AtomicCaps {
    /// The target's CPU applies them; no device.
    pub const CPU: AtomicCaps = AtomicCaps {
        mode: AtomicMode::Cpu,
        device_cap: None,
    };

    /// `mode` over a device whose `atomic_cap` is `device_cap`.
    pub fn new(mode: AtomicMode, device_cap: Option<&'static str>) -> AtomicCaps {
        AtomicCaps { mode, device_cap }
    }
}

/// What an atomic does with the element (libfabric's `enum fi_op` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum AtomicKind {
    /// The smaller of the element and the operand.
    Min = 0,
    /// The larger.
    Max = 1,
    /// Their sum (fetch-and-add with a fetch); integers wrap.
    Sum = 2,
    /// Bitwise or (integers).
    Bor = 6,
    /// Bitwise and (integers).
    Band = 7,
    /// Bitwise exclusive or (integers).
    Bxor = 9,
    /// Reads the element, changes nothing (a fetch only).
    Read = 10,
    /// Writes the operand (swap, with a fetch).
    Write = 11,
    /// Writes the operand if the element equals the compare value
    /// (compare-and-swap; the fetch says whether it did).
    Cswap = 12,
}

impl AtomicKind {
    /// The kind of libfabric's `enum fi_op` value `v`, if xfer has it.
    pub fn from_u8(v: u8) -> Option<AtomicKind> {
        use AtomicKind::*;
        [Min, Max, Sum, Bor, Band, Bxor, Read, Write, Cswap]
            .into_iter()
            .find(|k| *k as u8 == v)
    }

    /// Whether it changes the element (the target's region must allow
    /// remote writes).
    pub fn writes(self) -> bool {
        self != AtomicKind::Read
    }
}

/// The element's type (libfabric's `enum fi_datatype` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum Datatype {
    /// `int32_t`.
    I32 = 4,
    /// `uint32_t`.
    U32 = 5,
    /// `int64_t`.
    I64 = 6,
    /// `uint64_t`.
    U64 = 7,
    /// `float`.
    F32 = 8,
    /// `double`.
    F64 = 9,
}

impl Datatype {
    /// The type of libfabric's `enum fi_datatype` value `v`, if xfer has it.
    pub fn from_u8(v: u8) -> Option<Datatype> {
        use Datatype::*;
        [I32, U32, I64, U64, F32, F64].into_iter().find(|d| *d as u8 == v)
    }

    /// Its size in bytes (and the alignment an element needs).
    pub fn size(self) -> usize {
        match self {
            Datatype::I32 | Datatype::U32 | Datatype::F32 => 4,
            _ => 8,
        }
    }

    /// Whether `kind` applies to it (bitwise operations need integers).
    pub fn allows(self, kind: AtomicKind) -> bool {
        let float = matches!(self, Datatype::F32 | Datatype::F64);
        !(float && matches!(kind, AtomicKind::Bor | AtomicKind::Band | AtomicKind::Bxor))
    }
}

/// An atomic handed to a provider: `kind` on the element of type `dt` at
/// `addr` in the region named by `key`. Values travel as their bit
/// patterns in a `u64` (a 32-bit type in the low half).
#[derive(Debug, Clone)]
pub struct AtomicOp {
    /// The target.
    pub peer: PeerAddr,
    /// What to do.
    pub kind: AtomicKind,
    /// The element's type.
    pub dt: Datatype,
    /// The operand (for `Cswap`, the value written).
    pub operand: u64,
    /// `Cswap`'s compare value.
    pub compare: u64,
    /// Target address of the element.
    pub addr: u64,
    /// The target region's remote key.
    pub key: u64,
    /// Whether the completion carries the element's old value (in
    /// `Completion::data`; flags `ATOMIC | READ`, else `ATOMIC | WRITE`).
    pub fetch: bool,
    /// When a non-fetching atomic completes. [`CompletionLevel::Inject`]
    /// (the default, as `ucp_atomic_op_nbx` without a reply buffer and
    /// libfabric's default level): once the provider handed it to the
    /// transport, in order with what follows it to the peer; a target's
    /// refusal then comes too late for the completion and is counted and
    /// logged instead (`atomics_refused_after_completion`).
    /// `Transmit` or `Delivery` (`FI_DELIVERY_COMPLETE`): once the target
    /// applied it, with its refusal as the completion's error. A fetching
    /// atomic always completes with the target's answer.
    pub level: CompletionLevel,
    /// Returned in the completion.
    pub context: u64,
}

impl AtomicOp {
    /// Whether it completes with the target's answer (it fetches, or its
    /// level asks for delivery).
    pub fn answered(&self) -> bool {
        self.fetch || self.level != CompletionLevel::Inject
    }
}

/// `kind` on an element's bits, worked in 64 bits: a 32-bit element is
/// widened (sign-extended, or `f32` to `f64`, exactly) and the result
/// narrowed back (an `f32` sum rounds once, as `f32` addition does).
pub(crate) fn combine(kind: AtomicKind, dt: Datatype, old: u64, operand: u64, compare: u64) -> u64 {
    let widen = |v: u64| match dt {
        Datatype::I32 => v as u32 as i32 as i64 as u64,
        Datatype::U32 => v as u32 as u64,
        Datatype::F32 => f64::from(f32::from_bits(v as u32)).to_bits(),
        _ => v,
    };
    let (old_w, x) = (widen(old), widen(operand));
    let f = f64::from_bits;
    let new = match (kind, dt) {
        (AtomicKind::Sum, Datatype::F32 | Datatype::F64) => (f(old_w) + f(x)).to_bits(),
        (AtomicKind::Min, Datatype::F32 | Datatype::F64) => f(old_w).min(f(x)).to_bits(),
        (AtomicKind::Max, Datatype::F32 | Datatype::F64) => f(old_w).max(f(x)).to_bits(),
        (AtomicKind::Min, Datatype::I32 | Datatype::I64) => (old_w as i64).min(x as i64) as u64,
        (AtomicKind::Max, Datatype::I32 | Datatype::I64) => (old_w as i64).max(x as i64) as u64,
        (AtomicKind::Min, _) => old_w.min(x),
        (AtomicKind::Max, _) => old_w.max(x),
        (AtomicKind::Sum, _) => old_w.wrapping_add(x),
        (AtomicKind::Bor, _) => old_w | x,
        (AtomicKind::Band, _) => old_w & x,
        (AtomicKind::Bxor, _) => old_w ^ x,
        (AtomicKind::Read, _) => return old,
        (AtomicKind::Write, _) => return operand,
        (AtomicKind::Cswap, _) if widen(old) == widen(compare) => return operand,
        (AtomicKind::Cswap, _) => return old,
    };
    match dt {
        Datatype::F32 => u64::from((f64::from_bits(new) as f32).to_bits()),
        Datatype::I32 | Datatype::U32 => new & 0xffff_ffff,
        _ => new,
    }
}

/// The element of type `dt` at byte `at` (0, or 4 for a 32-bit element) of
/// the little-endian 8-byte `word` holding it: what a device atomic on the
/// enclosing aligned word shows of it.
pub(crate) fn element_of(dt: Datatype, word: u64, at: u32) -> u64 {
    match dt.size() {
        4 => (word >> (8 * at)) & 0xffff_ffff,
        _ => word,
    }
}

/// `word` with `kind` applied to its element at byte `at`, the rest kept:
/// the value a compare-and-swap loop on the enclosing aligned 8-byte word
/// writes.
pub(crate) fn combine_in_word(kind: AtomicKind, dt: Datatype, word: u64, at: u32, operand: u64, compare: u64) -> u64 {
    let new = combine(kind, dt, element_of(dt, word, at), operand, compare);
    match dt.size() {
        4 => {
            let shift = 8 * at;
            (word & !(0xffff_ffff << shift)) | (new << shift)
        }
        _ => new,
    }
}

/// Applies `kind` to the element of type `dt` at `ptr` as one atomic step
/// (a compare-and-exchange loop) and returns its old value's bits.
///
/// # Safety
/// `ptr` must point to a live element of `dt`'s size, aligned to it, that
/// other threads and processes touch only atomically while this runs.
pub unsafe fn apply(ptr: *mut u8, kind: AtomicKind, dt: Datatype, operand: u64, compare: u64) -> u64 {
    if dt.size() == 4 {
        // SAFETY: the caller's contract: a live, aligned 4-byte element.
        let cell = unsafe { AtomicU32::from_ptr(ptr.cast()) };
        let old = cell
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| {
                Some(combine(kind, dt, u64::from(old), operand, compare) as u32)
            })
            .unwrap_or_else(|v| v);
        u64::from(old)
    } else {
        // SAFETY: the caller's contract: a live, aligned 8-byte element.
        let cell = unsafe { AtomicU64::from_ptr(ptr.cast()) };
        cell.fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| {
            Some(combine(kind, dt, old, operand, compare))
        })
        .unwrap_or_else(|v| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run64(init: u64, kind: AtomicKind, dt: Datatype, operand: u64, compare: u64) -> (u64, u64) {
        let mut v = init;
        // SAFETY: a local, aligned u64.
        let old = unsafe { apply(&mut v as *mut u64 as *mut u8, kind, dt, operand, compare) };
        (old, v)
    }

    #[test]
    fn every_kind_on_64_bit_integers_and_doubles() {
        use AtomicKind::*;
        let u = Datatype::U64;
        assert_eq!(run64(5, Sum, u, 3, 0), (5, 8));
        assert_eq!(run64(u64::MAX, Sum, u, 2, 0), (u64::MAX, 1), "wraps");
        assert_eq!(run64(5, Min, u, 3, 0), (5, 3));
        assert_eq!(run64(5, Max, u, 3, 0), (5, 5));
        assert_eq!(
            run64((-5i64) as u64, Min, Datatype::I64, 3, 0).1,
            (-5i64) as u64,
            "signed"
        );
        assert_eq!(run64(0b1100, Bor, u, 0b1010, 0).1, 0b1110);
        assert_eq!(run64(0b1100, Band, u, 0b1010, 0).1, 0b1000);
        assert_eq!(run64(0b1100, Bxor, u, 0b1010, 0).1, 0b0110);
        assert_eq!(run64(7, Read, u, 9, 0), (7, 7));
        assert_eq!(run64(7, Write, u, 9, 0), (7, 9));
        assert_eq!(run64(7, Cswap, u, 9, 7), (7, 9), "equal: swapped");
        assert_eq!(run64(7, Cswap, u, 9, 6), (7, 7), "not equal: kept");
        let d = |x: f64| x.to_bits();
        assert_eq!(run64(d(1.5), Sum, Datatype::F64, d(2.0), 0).1, d(3.5));
        assert_eq!(run64(d(1.5), Max, Datatype::F64, d(2.0), 0).1, d(2.0));
    }

    #[test]
    fn thirty_two_bit_elements_touch_four_bytes() {
        let mut pair = [10u32, 77];
        // SAFETY: an aligned u32 inside a local array.
        let old = unsafe {
            apply(
                pair.as_mut_ptr().cast(),
                AtomicKind::Sum,
                Datatype::I32,
                (-3i32) as u32 as u64,
                0,
            )
        };
        assert_eq!((old, pair), (10, [7, 77]));
        pair[0] = 3.0f32.to_bits();
        // SAFETY: as above.
        unsafe {
            apply(
                pair.as_mut_ptr().cast(),
                AtomicKind::Min,
                Datatype::F32,
                2.5f32.to_bits() as u64,
                0,
            )
        };
        assert_eq!((f32::from_bits(pair[0]), pair[1]), (2.5, 77));
        let mut w = [u32::MAX, 9];
        // SAFETY: as above.
        unsafe { apply(w.as_mut_ptr().cast(), AtomicKind::Sum, Datatype::U32, 2, 0) };
        assert_eq!(w, [1, 9], "wraps in 32 bits");
        w[0] = (-5i32) as u32;
        // SAFETY: as above.
        unsafe { apply(w.as_mut_ptr().cast(), AtomicKind::Min, Datatype::I32, 3, 0) };
        assert_eq!(w[0] as i32, -5, "signed");
        // SAFETY: as above.
        let old = unsafe {
            apply(
                w.as_mut_ptr().cast(),
                AtomicKind::Cswap,
                Datatype::I32,
                7,
                (-5i32) as u32 as u64,
            )
        };
        assert_eq!((old as u32 as i32, w[0]), (-5, 7), "a 32-bit compare");
        assert!(!Datatype::F32.allows(AtomicKind::Bxor));
        assert_eq!(AtomicKind::from_u8(12), Some(AtomicKind::Cswap));
        assert_eq!(Datatype::from_u8(3), None);
    }

    #[test]
    fn an_element_is_combined_inside_its_word_and_its_neighbour_kept() {
        let word = 0x0000_0009_ffff_ffffu64;
        assert_eq!(element_of(Datatype::U32, word, 4), 9);
        let w = combine_in_word(AtomicKind::Sum, Datatype::U32, word, 0, 2, 0);
        assert_eq!(w, 0x0000_0009_0000_0001, "wraps in 32 bits, the neighbour unchanged");
        let w = combine_in_word(AtomicKind::Max, Datatype::I32, word, 4, (-1i32) as u32 as u64, 0);
        assert_eq!(w, word, "signed max keeps 9");
        let w = combine_in_word(AtomicKind::Cswap, Datatype::U32, word, 4, 5, 9);
        assert_eq!(w, 0x0000_0005_ffff_ffff);
        assert_eq!(combine_in_word(AtomicKind::Sum, Datatype::U64, 40, 0, 2, 0), 42);
    }
}
