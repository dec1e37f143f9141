//! Device atomics (`IBV_WR_ATOMIC_FETCH_AND_ADD`, `IBV_WR_ATOMIC_CMP_AND_SWP`)
//! on an 8-byte word of a peer's region, against the rkey its remote key
//! carries ([`rkey_of`](super::pull::rkey_of)), for the engine's atomics the
//! target granted to the device. Each returns the word's old value into
//! an 8-byte result slot of the transport's own, registered once per 256
//! slots with local write, and is reported as `Event::Fetched`.
//!
//! An atomic is a responder resource like an RDMA READ: it counts against
//! the connection's initiator depth (the QP's `max_rd_atomic`) with the
//! READs, and one that finds it full (or the send queue, or the CQ) waits
//! in order for room. Its completion carries [`ATOMIC_TAG`] and the
//! operation's key in its `wr_id`; as with READs, a connection that ends
//! keeps its QP in a grave until its atomics are flushed.
//!
//! Each slot holds the [`MARK`] when its atomic is posted: a slot that holds
//! anything else on a successful completion was written by the device and
//! is the old value; only a slot still holding the mark costs an
//! `ibv_query_qp` (a system call), and is taken as fetched only while the QP
//! is not in error ([`super::mark`]: rxe reports flushed requests as
//! successful).

use std::collections::VecDeque;

use slab::Slab;
use xfer_core::unstable::rdm::transport::{ConnId, DeviceAtomic, Event, Events, Remote};
use xfer_core::{Error, PeerAddr};

use super::conn::State;
use super::mark::MARK;
use super::pull::rkey_of;
use super::VerbsTransport;
use crate::cq::Wc;
use crate::mr::Mr;
use crate::qp::{RemoteBuf, Sge};
use xfer_core::Access;

/// Tag of the `wr_id` of a device atomic (its key is the rest): distinct
/// from READs (bit 61), send slots (bit 62) and receives (bit 63).
pub const ATOMIC_TAG: u64 = 1 << 60;

/// Result slots registered together.
const CHUNK: usize = 256;

/// One device atomic.
struct Op {
    conn: ConnId,
    qpn: u32,
    token: u64,
    slot: usize,
    remote: RemoteBuf,
    op: DeviceAtomic,
    /// Posted (its completion is due), else waiting for room.
    posted: bool,
}

/// The transport's device atomics: result slots, operations, and those
/// over, reported by the next progress.
#[derive(Default)]
pub struct Atomics {
    /// Result words, and their registration (the device writes them).
    chunks: Vec<(Box<[u64]>, Mr)>,
    free: Vec<usize>,
    ops: Slab<Op>,
    waiting: VecDeque<usize>,
    done: Vec<(u64, Result<u64, Error>)>,
}

impl Atomics {
    /// Whether operations wait for room or reports are due.
    pub fn busy(&self) -> bool {
        !self.waiting.is_empty() || !self.done.is_empty()
    }
}

/// The connection failed under an atomic (the engine names the peer).
fn gone(errno: i32) -> Error {
    Error::PeerUnreachable {
        peer: PeerAddr::UNSPEC,
        errno,
    }
}

/// The error an atomic's failed completion stands for.
fn atomic_error(wc: &Wc) -> Error {
    use rdma_sys::ibv_wc_status as st;
    tracing::debug!(
        status = wc.status_str(),
        vendor = wc.vendor_err(),
        "verbs device atomic failed"
    );
    match wc.status() {
        st::IBV_WC_REM_ACCESS_ERR => Error::RemoteAccess("the peer's device refused the key or word"),
        st::IBV_WC_REM_INV_REQ_ERR => Error::RemoteAccess("the peer's device refused the atomic"),
        st::IBV_WC_RETRY_EXC_ERR => gone(libc::ETIMEDOUT),
        _ => gone(libc::ECONNRESET),
    }
}

impl VerbsTransport {
    /// A free result slot: its index, address and lkey.
    fn result_slot(&mut self) -> Result<usize, Error> {
        if let Some(s) = self.atomics.free.pop() {
            return Ok(s);
        }
        let words = vec![0u64; CHUNK].into_boxed_slice();
        let mr = Mr::register(&self.pd, words.as_ptr() as usize, CHUNK * 8, Access::LOCAL_WRITE)?;
        let base = self.atomics.chunks.len() * CHUNK;
        self.atomics.chunks.push((words, mr));
        self.atomics.free.extend((base + 1..base + CHUNK).rev());
        Ok(base)
    }

    /// The local scatter entry of result slot `s`, marked with the [`MARK`].
    fn slot_sge(&mut self, s: usize) -> Sge {
        let (words, mr) = &mut self.atomics.chunks[s / CHUNK];
        // The device has no write to this slot pending: its last atomic
        // completed (or its QP was destroyed) before the slot was freed.
        words[s % CHUNK] = MARK;
        Sge {
            addr: words.as_ptr() as u64 + (s % CHUNK) as u64 * 8,
            length: 8,
            lkey: mr.lkey(),
        }
    }

    /// Starts device atomic `op` on the word at `remote` on `k`.
    pub(super) fn start_atomic_on(
        &mut self,
        k: ConnId,
        remote: Remote,
        op: DeviceAtomic,
        token: u64,
    ) -> Result<(), Error> {
        let Some(rkey) = remote.key.and_then(rkey_of) else {
            return Err(Error::NotSupported("a remote key without an rkey"));
        };
        if !self.device_atomics {
            return Err(Error::NotSupported("the device has no atomics"));
        }
        let Some(qpn) = self
            .conns
            .get(k)
            .filter(|c| c.state == State::Ready)
            .and_then(|c| c.qp.as_ref())
            .map(|qp| qp.qp_num())
        else {
            return Err(gone(libc::ENOTCONN));
        };
        let slot = self.result_slot()?;
        let key = self.atomics.ops.insert(Op {
            conn: k,
            qpn,
            token,
            slot,
            remote: RemoteBuf {
                addr: remote.addr,
                rkey,
            },
            op,
            posted: false,
        });
        if !self.atomics.waiting.is_empty() || !self.post_atomic(key) {
            self.atomics.waiting.push_back(key);
            self.chores = true;
        }
        Ok(())
    }

    /// Posts atomic `key` if its connection has room; `false` when it must
    /// wait. A failure ends it.
    fn post_atomic(&mut self, key: usize) -> bool {
        let Some(o) = self.atomics.ops.get(key) else {
            return true;
        };
        let (remote, op, conn, slot) = (o.remote, o.op, o.conn, o.slot);
        let sge = self.slot_sge(slot);
        let Some(c) = self.conns.get_mut(conn).filter(|c| c.state == State::Ready) else {
            self.atomic_over(key, Err(gone(libc::ECONNRESET)));
            return true;
        };
        let Some(qp) = c.qp.as_mut() else {
            self.atomic_over(key, Err(gone(libc::ECONNRESET)));
            return true;
        };
        if c.reads >= c.rd_depth || self.signaled >= self.cq_room {
            return false;
        }
        let (add, swap) = match op {
            DeviceAtomic::FetchAdd(x) => (x, None),
            DeviceAtomic::CompareSwap { compare, swap } => (compare, Some(swap)),
        };
        let before = qp.signaled_in_flight();
        // SAFETY: the result slot is the transport's, registered with local
        // write and neither read nor reused until this request completed
        // (or its QP was destroyed).
        match unsafe { qp.atomic(ATOMIC_TAG | key as u64, sge, remote, add, swap) } {
            Ok(()) => {
                self.signaled += qp.signaled_in_flight().saturating_sub(before);
                c.reads += 1;
                self.stats.device_atomics += 1;
                self.atomics.ops[key].posted = true;
                true
            }
            Err(Error::Again) => false,
            Err(e) => {
                self.atomic_over(key, Err(e));
                true
            }
        }
    }

    /// Posts the atomics waiting for room, in order, while there is room.
    pub(super) fn continue_atomics(&mut self) {
        while let Some(&key) = self.atomics.waiting.front() {
            if !self.post_atomic(key) {
                break;
            }
            self.atomics.waiting.pop_front();
        }
    }

    /// Atomic `key` is over: its slot back, its report due.
    fn atomic_over(&mut self, key: usize, result: Result<u64, Error>) {
        let o = self.atomics.ops.remove(key);
        self.atomics.free.push(o.slot);
        if result.is_err() {
            self.stats.device_atomics_failed += 1;
        }
        self.atomics.done.push((o.token, result));
        self.chores = true;
    }

    /// An atomic's completion (success or error) on QP `qpn`.
    pub(super) fn on_atomic(&mut self, wc: &Wc) {
        let key = (wc.wr_id() & !ATOMIC_TAG) as usize;
        let qpn = wc.qp_num();
        let conn = self.by_qpn.get(qpn);
        match conn {
            Some(k) => self.conns[k].reads = self.conns[k].reads.saturating_sub(1),
            None => {
                if let Some(g) = self.graves.get_mut(&qpn) {
                    g.reads = g.reads.saturating_sub(1);
                    if g.done() {
                        self.graves.remove(&qpn);
                    }
                }
            }
        }
        if !self.atomics.ops.get(key).is_some_and(|o| o.qpn == qpn && o.posted) {
            xfer_core::warn_limited!(key, "verbs: an atomic completion of no atomic");
            return;
        }
        let s = self.atomics.ops[key].slot;
        let (words, _) = &self.atomics.chunks[s / CHUNK];
        // SAFETY: the slot is the transport's and in bounds; the device
        // writes it before the completion, so the read is volatile: the
        // compiler did not see that write.
        let word = unsafe { std::ptr::read_volatile(words.as_ptr().add(s % CHUNK)) };
        let result = if !wc.is_ok() {
            Err(atomic_error(wc))
        } else if word != MARK {
            Ok(word)
        } else if self.qp_live(conn) {
            // The old value was the mark itself.
            Ok(word)
        } else {
            // rxe reports flushed requests as successful.
            Err(gone(libc::ECONNRESET))
        };
        self.atomic_over(key, result);
    }

    /// Fails the atomics of connection `k` (ended) that wait for room;
    /// posted ones wait for their flush.
    pub(super) fn end_atomics(&mut self, k: ConnId) {
        let idle: Vec<usize> = self
            .atomics
            .waiting
            .iter()
            .copied()
            .filter(|&key| self.atomics.ops[key].conn == k)
            .collect();
        self.atomics.waiting.retain(|key| !idle.contains(key));
        for key in idle {
            self.atomic_over(key, Err(gone(libc::ECONNRESET)));
        }
    }

    /// Fails every atomic posted on QP `qpn`, destroyed before they flushed.
    pub(super) fn abandon_atomics(&mut self, qpn: u32) {
        let keys: Vec<usize> = self
            .atomics
            .ops
            .iter()
            .filter(|(_, o)| o.qpn == qpn && o.posted)
            .map(|(k, _)| k)
            .collect();
        for key in keys {
            self.atomic_over(key, Err(gone(libc::ECONNRESET)));
        }
    }

    /// Reports the atomics that are over.
    pub(super) fn report_atomics(&mut self, events: &mut dyn Events) {
        // Drained, not taken: the list keeps its memory for the next ones.
        for (token, result) in self.atomics.done.drain(..) {
            events.event(Event::Fetched { token, result });
        }
    }
}
