//! Atomics by the initiator's device, on a region its target granted
//! (`atomic.rs` asks for the grant with the first atomic there, which the
//! target then does not apply). Each works on the element's enclosing
//! aligned 8-byte word ([`Transport::start_atomic`], reported by
//! `Event::Fetched`): a 64-bit integer sum is one fetch-and-add, a 64-bit
//! compare-and-swap one compare-and-swap, a read a fetch-and-add of 0;
//! every other kind (min, max, bitwise, swap, float sums, any 32-bit
//! element) is a compare-and-swap loop: guess the word, write the guess
//! combined with the operand if the word still holds the guess, and retry
//! from the value the device returned until it matches. A word the device
//! returned that the kind would leave unchanged (a min already smaller, a
//! compare that fails) ends the loop without a write: it was read
//! atomically. A 32-bit element is taken at its byte in the
//! little-endian word, its neighbour written back unchanged.

use crate::atomic::{combine_in_word, element_of, AtomicKind, AtomicOp, Datatype};
use crate::complete;
use crate::error::Error;
use crate::provider::Ctx;

use super::super::transport::{DeviceAtomic, Remote, Transport};
use super::order::Held;
use super::wire::Header;
use super::State;

/// Most atomic grants an initiator keeps; past it they are all forgotten
/// (the next atomics there ask again).
const GRANTS_MAX: usize = 4096;

/// Atomic grants: (peer, key) -> the region (start, length).
pub(super) type AtomicGrants = crate::hash::FastMap<((usize, u64), u64), (u64, u64)>;

/// The enclosing aligned word of `op`'s element: its address and the
/// element's byte in it; `None` for a misaligned element (the target
/// refuses it in frames).
pub(super) fn word_of(op: &AtomicOp) -> Option<(u64, u32)> {
    op.addr
        .is_multiple_of(op.dt.size() as u64)
        .then_some((op.addr & !7, (op.addr & 7) as u32))
}

/// Whether `[word, word + 8)` lies inside the region `(start, len)`.
fn inside(word: u64, (start, len): (u64, u64)) -> bool {
    word >= start
        && word
            .checked_add(8)
            .is_some_and(|e| start.checked_add(len).is_some_and(|end| e <= end))
}

/// The device side of an initiator's atomic.
pub(super) struct Device {
    /// The enclosing aligned word's address, and the element's byte in it.
    word: u64,
    at: u32,
    /// A compare-and-swap loop (else one native operation), and the word
    /// its next compare-and-swap expects.
    looped: bool,
    expected: u64,
    /// A device operation is posted: only its `Fetched` event moves it.
    pub(super) busy: bool,
    /// Its peer failed while the device worked: the error it reports.
    pub(super) ended: Option<Error>,
}

impl Device {
    /// `op`'s device side on `word`.
    pub(super) fn new((word, at): (u64, u32), op: &AtomicOp) -> Device {
        let native = op.dt.size() == 8
            && match op.kind {
                AtomicKind::Sum => matches!(op.dt, Datatype::I64 | Datatype::U64),
                AtomicKind::Cswap | AtomicKind::Read => true,
                _ => false,
            };
        Device {
            word,
            at,
            looped: !native && op.kind != AtomicKind::Read,
            expected: 0,
            busy: false,
            ended: None,
        }
    }

    /// The next device operation for `op`.
    fn next(&self, op: &AtomicOp) -> DeviceAtomic {
        if self.looped {
            let swap = combine_in_word(op.kind, op.dt, self.expected, self.at, op.operand, op.compare);
            return DeviceAtomic::CompareSwap {
                compare: self.expected,
                swap,
            };
        }
        match op.kind {
            AtomicKind::Sum => DeviceAtomic::FetchAdd(op.operand),
            AtomicKind::Cswap => DeviceAtomic::CompareSwap {
                compare: op.compare,
                swap: op.operand,
            },
            _ => DeviceAtomic::FetchAdd(0),
        }
    }
}

impl State {
    /// The word of `op`'s element if the target granted it to this side's
    /// device (its region holds the whole word).
    pub(super) fn granted_word(&self, at: (usize, u64), op: &AtomicOp) -> Option<(u64, u32)> {
        let region = *self.atomic_grants.get(&(at, op.key))?;
        word_of(op).filter(|&(w, _)| inside(w, region))
    }

    /// A target's grant of an atomic's region, when the peer asked (`h` is
    /// the request) and its device does atomics on the element's word
    /// there: `done` carries it and the atomic is not applied.
    pub(super) fn grant_atomic(&self, cx: &Ctx<'_>, h: &Header, done: &mut Header) -> bool {
        let Some(region) = cx.domain.native_atomic(h.tag) else {
            return false;
        };
        if !inside(h.addr & !7, region) {
            return false;
        }
        done.flags |= super::wire::NATIVE;
        (done.addr, done.len) = region;
        true
    }

    /// An initiator's grant for atomic `key`: kept, and the atomic goes by
    /// the device after this progress.
    pub(super) fn atomic_granted(&mut self, at: (usize, u64), key: usize, h: Header) -> Result<(), &'static str> {
        let tx = &self.atomics[key];
        if tx.device.is_some() || h.status != 0 {
            return Err("an atomic grant for an atomic on the device");
        }
        let word = word_of(&tx.op)
            .filter(|&(w, _)| inside(w, (h.addr, h.len)))
            .ok_or("an atomic grant of a region without the element")?;
        if self.atomic_grants.len() >= GRANTS_MAX {
            self.atomic_grants.clear();
        }
        self.atomic_grants.insert((at, tx.op.key), (h.addr, h.len));
        let device = Device::new(word, &tx.op);
        self.atomics[key].device = Some(device);
        let token = self.atomics.token(key);
        // What its peer holds back was posted after it (held because it
        // asked): it goes first. Frames sent before it were answered
        // before its grant, and inject writes posted while it asked were
        // refused, so it waits only on a frame sent in between.
        match self.unordered(at) {
            true => self.hold_first(at, Held::Device(token)),
            false => self.device_due.push(token),
        }
        Ok(())
    }

    /// Posts the next device operation of the atomic under `token`, if it
    /// is still there and waits for one.
    pub(super) fn device_step<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>, token: u64) {
        let Some(key) = self.atomics.key_of(token) else { return };
        let tx = &self.atomics[key];
        let Some(d) = tx.device.as_ref().filter(|d| !d.busy) else {
            return;
        };
        let conn = self.peers.current(tx.peer).and_then(|e| e.tx);
        let remote = Remote {
            addr: d.word,
            key: Some(tx.op.key),
            stamp: 0,
        };
        let started = match conn {
            Some(conn) => t.start_atomic(conn, remote, d.next(&tx.op), token),
            None => Err(Error::NotSupported("no connection to the peer now")),
        };
        match started {
            Ok(()) => {
                self.stats.atomics_device += 1;
                if let Some(d) = self.atomics[key].device.as_mut() {
                    d.busy = true;
                }
            }
            Err(Error::NotSupported(why)) => {
                // The target applies it after all: this peer is reached
                // over a transport without device atomics (or is
                // connecting again, when it is asked anew).
                tracing::debug!(why, "rdm: a granted atomic goes in frames");
                let tx = &mut self.atomics[key];
                let (at, k) = (tx.peer, tx.op.key);
                tx.device = None;
                let ask = conn.is_none();
                tx.asked = ask;
                self.atomic_grants.remove(&(at, k));
                if !ask && !self.frames_only.contains(&at) {
                    if self.frames_only.len() >= GRANTS_MAX {
                        self.frames_only.clear();
                    }
                    self.frames_only.push(at);
                }
                match self.peers.current(at).is_some() {
                    true => {
                        self.send_atomic(at.0, key, ask);
                        self.posted(t, cx, at.0);
                    }
                    false => {
                        let tx = self.atomics.remove(key);
                        let peer = tx.op.peer;
                        complete::atomic(&mut cx.cq, tx.op, Err(Error::PeerClosed { peer }));
                    }
                }
            }
            Err(e) => self.fetched(token, Err(e), cx),
        }
    }

    /// The device operation under `token` is over: the atomic completes
    /// with the element's old value or its error, or its loop goes on.
    pub(super) fn fetched(&mut self, token: u64, result: Result<u64, Error>, cx: &mut Ctx<'_>) {
        let key = self.atomics.key_of(token);
        let Some(key) = key.filter(|&k| self.atomics[k].device.as_ref().is_some_and(|d| d.busy)) else {
            crate::warn_limited!(token, "rdm: a transport reported an atomic the engine did not start");
            return;
        };
        let tx = &mut self.atomics[key];
        let Some(d) = tx.device.as_mut() else { return };
        d.busy = false;
        let old = match (result, d.ended.take()) {
            (_, Some(e)) => Err(e),
            (Err(e), None) => {
                self.stats.atomics_device_failed += 1;
                let peer = tx.op.peer;
                Err(match e {
                    Error::PeerClosed { .. } => Error::PeerClosed { peer },
                    Error::PeerUnreachable { errno, .. } => Error::PeerUnreachable { peer, errno },
                    e => e,
                })
            }
            (Ok(word), None) if !d.looped || word == d.expected => Ok(element_of(tx.op.dt, word, d.at)),
            (Ok(word), None) => {
                let op = &tx.op;
                if combine_in_word(op.kind, op.dt, word, d.at, op.operand, op.compare) == word {
                    // Nothing to write: the word was read atomically.
                    Ok(element_of(op.dt, word, d.at))
                } else {
                    d.expected = word;
                    self.device_due.push(token);
                    return;
                }
            }
        };
        let tx = self.atomics.remove(key);
        complete::atomic(&mut cx.cq, tx.op, old);
    }
}
