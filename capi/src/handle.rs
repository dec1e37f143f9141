//! The handle registry: how an opaque C pointer names a Rust object.
//!
//! A handle is never a real pointer and is never dereferenced. Its 64 bits
//! encode a slot of a process-wide table:
//!
//! ```text
//!  63      56 55  52 51                  24 23                 0
//! +----------+------+----------------------+--------------------+
//! |   0xA5   | kind |  generation (28 bit) |  slot index (24)   |
//! +----------+------+----------------------+--------------------+
//! ```
//!
//! Every call decodes its handle and checks, under a read lock, the magic
//! byte, the kind (a CQ handle passed as an endpoint is refused), that the
//! slot exists and is occupied, and that the slot's generation equals the
//! handle's. Closing a handle bumps its slot's generation, so a closed
//! handle, a double close and a stale copy kept after the slot was reused
//! all fail with `XFER_EBADF`. `NULL`, small integers, and user-space
//! pointers fail the magic check (their top byte is 0 on x86-64, and on
//! arm64 unless pointer tagging is on). Whatever the input, the library
//! never reads memory through a handle. A forged value that happens to
//! match a live handle names that live object of the right kind: still no
//! undefined behaviour.
//!
//! Each call clones the object's `Arc` out of the table and drops the lock
//! before doing any work, so a blocking `xfer_cq_wait` never holds the
//! table, and a handle closed by one thread while another is inside a call
//! on it stays alive until that call returns.
//!
//! The table also counts, for each handle, the open handles that depend on
//! it (an endpoint depends on its domain, CQ and AV; a CQ or AV on its
//! domain). Closing a handle others depend on fails with `XFER_EBUSY`, as
//! `fi_close` does: close endpoints, then AVs and CQs, then the domain.

use std::sync::{Arc, Mutex, PoisonError, RwLock};

use xfer_facade::{AddressVector, Domain, DomainAttr, Endpoint, MemoryRegion};

use crate::error::{Fail, XFER_EBADF, XFER_EBUSY, XFER_ENOMEM};

const MAGIC: u64 = 0xA5;
const MAGIC_SHIFT: u32 = 56;
const KIND_SHIFT: u32 = 52;
const GEN_SHIFT: u32 = 24;
const GEN_MASK: u32 = (1 << 28) - 1;
const INDEX_MASK: u64 = (1 << 24) - 1;
/// Most handles open at once (slot indices are 24 bits).
const MAX_SLOTS: usize = 1 << 24;

/// What a handle names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Domain = 1,
    Cq = 2,
    Av = 3,
    Ep = 4,
    Mr = 5,
    DomainAttr = 6,
}

/// The Rust object behind a handle. Every variant is a cheap `Arc` clone.
#[derive(Clone)]
pub(crate) enum Object {
    Domain(Domain),
    Cq(Arc<crate::cq::CqObject>),
    Av(AddressVector),
    Ep(Arc<Endpoint>),
    Mr(Arc<MemoryRegion>),
    /// Domain attributes being filled in (`xfer_domain_attr_set`).
    DomainAttr(Arc<Mutex<DomainAttr>>),
}

impl Object {
    fn kind(&self) -> Kind {
        match self {
            Object::Domain(_) => Kind::Domain,
            Object::Cq(_) => Kind::Cq,
            Object::Av(_) => Kind::Av,
            Object::Ep(_) => Kind::Ep,
            Object::Mr(_) => Kind::Mr,
            Object::DomainAttr(_) => Kind::DomainAttr,
        }
    }
}

struct Entry {
    obj: Object,
    /// Open handles that depend on this one.
    users: u32,
    /// Handles this one depends on.
    parents: [Option<(u64, Kind)>; 3],
}

struct Slot {
    gen: u32,
    entry: Option<Entry>,
}

struct Registry {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

static REGISTRY: RwLock<Registry> = RwLock::new(Registry {
    slots: Vec::new(),
    free: Vec::new(),
});

fn encode(kind: Kind, index: u32, gen: u32) -> u64 {
    (MAGIC << MAGIC_SHIFT) | ((kind as u64) << KIND_SHIFT) | (u64::from(gen & GEN_MASK) << GEN_SHIFT) | u64::from(index)
}

/// Splits a handle into (kind, index, generation) when its magic byte and
/// kind are right.
fn decode(raw: u64, kind: Kind) -> Option<(usize, u32)> {
    if raw >> MAGIC_SHIFT != MAGIC || (raw >> KIND_SHIFT) & 0xF != kind as u64 {
        return None;
    }
    let gen = ((raw >> GEN_SHIFT) as u32) & GEN_MASK;
    Some(((raw & INDEX_MASK) as usize, gen))
}

impl Registry {
    fn entry(&self, raw: u64, kind: Kind) -> Option<&Entry> {
        let (index, gen) = decode(raw, kind)?;
        let slot = self.slots.get(index)?;
        let entry = slot.entry.as_ref().filter(|_| slot.gen == gen)?;
        (entry.obj.kind() == kind).then_some(entry)
    }

    fn entry_mut(&mut self, raw: u64, kind: Kind) -> Option<&mut Entry> {
        let (index, gen) = decode(raw, kind)?;
        let slot = self.slots.get_mut(index)?;
        if slot.gen != gen {
            return None;
        }
        slot.entry.as_mut().filter(|e| e.obj.kind() == kind)
    }

    fn insert(&mut self, obj: Object, parents: &[(u64, Kind)]) -> Result<u64, (Fail, Object)> {
        debug_assert!(parents.len() <= 3, "an entry records at most three parents");
        if parents.iter().any(|&(p, k)| self.entry(p, k).is_none()) {
            tracing::debug!("a parent handle was closed while its child was being opened");
            return Err((Fail(XFER_EBADF), obj));
        }
        let index = match self.free.pop() {
            Some(i) => i,
            None if self.slots.len() < MAX_SLOTS => {
                self.slots.push(Slot { gen: 1, entry: None });
                (self.slots.len() - 1) as u32
            }
            None => return Err((Fail(XFER_ENOMEM), obj)),
        };
        let mut deps = [None; 3];
        for (dst, &(p, k)) in deps.iter_mut().zip(parents) {
            *dst = Some((p, k));
            if let Some(e) = self.entry_mut(p, k) {
                e.users += 1;
            }
        }
        let kind = obj.kind();
        let slot = &mut self.slots[index as usize];
        slot.entry = Some(Entry {
            obj,
            users: 0,
            parents: deps,
        });
        Ok(encode(kind, index, slot.gen))
    }

    fn remove(&mut self, raw: u64, kind: Kind) -> Result<Object, Fail> {
        let entry = self.entry(raw, kind).ok_or(Fail(XFER_EBADF))?;
        if entry.users > 0 {
            tracing::debug!(
                users = entry.users,
                ?kind,
                "close refused: other handles depend on this one"
            );
            return Err(Fail(XFER_EBUSY));
        }
        let (index, _) = decode(raw, kind).ok_or(Fail(XFER_EBADF))?;
        let slot = &mut self.slots[index];
        let entry = slot.entry.take().ok_or(Fail(XFER_EBADF))?;
        slot.gen = slot.gen.wrapping_add(1) & GEN_MASK;
        self.free.push(index as u32);
        for (p, k) in entry.parents.iter().flatten() {
            if let Some(e) = self.entry_mut(*p, *k) {
                e.users -= 1;
            }
        }
        Ok(entry.obj)
    }
}

/// The object behind `raw` if it is a live handle of `kind`.
pub(crate) fn get(raw: u64, kind: Kind) -> Result<Object, Fail> {
    let reg = REGISTRY.read().unwrap_or_else(PoisonError::into_inner);
    match reg.entry(raw, kind) {
        Some(e) => Ok(e.obj.clone()),
        None => {
            tracing::debug!(handle = format_args!("{raw:#x}"), ?kind, "bad handle");
            Err(Fail(XFER_EBADF))
        }
    }
}

/// Runs `f` on the object behind `raw` (a live handle of `kind`) under the
/// table's read lock, without cloning it. Memory regions are only reached
/// this way, so the table holds their only reference and removing the
/// handle deregisters the region at once. `f` must not block or call into
/// the table.
pub(crate) fn with<R>(raw: u64, kind: Kind, f: impl FnOnce(&Object) -> R) -> Result<R, Fail> {
    let reg = REGISTRY.read().unwrap_or_else(PoisonError::into_inner);
    match reg.entry(raw, kind) {
        Some(e) => Ok(f(&e.obj)),
        None => {
            tracing::debug!(handle = format_args!("{raw:#x}"), ?kind, "bad handle");
            Err(Fail(XFER_EBADF))
        }
    }
}

/// Registers `obj` as depending on `parents` (each checked to be still
/// open) and returns its new handle. On failure the object is dropped after
/// the table's lock is released.
pub(crate) fn insert(obj: Object, parents: &[(u64, Kind)]) -> Result<u64, Fail> {
    let result = REGISTRY
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(obj, parents);
    result.map_err(|(fail, obj)| {
        drop(obj);
        fail
    })
}

/// Unregisters `raw` and returns its object for the caller to drop outside
/// the table's lock. Fails with `XFER_EBADF` for a bad handle and
/// `XFER_EBUSY` when open handles depend on it.
pub(crate) fn remove(raw: u64, kind: Kind) -> Result<Object, Fail> {
    REGISTRY
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(raw, kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_round_trips_and_rejects_other_kinds() {
        let h = encode(Kind::Cq, 7, 3);
        assert_eq!(decode(h, Kind::Cq), Some((7, 3)));
        assert_eq!(decode(h, Kind::Ep), None);
        assert_eq!(decode(0, Kind::Cq), None);
        assert_eq!(
            decode(0x7fff_1234_5678, Kind::Cq),
            None,
            "user-space pointers are never handles"
        );
        assert_eq!(decode(u64::MAX, Kind::Cq), None);
    }
}
