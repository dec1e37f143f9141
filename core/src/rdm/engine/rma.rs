//! RMA served in software by the target, over any transport: the initiator
//! writes its bytes in frames (`RmaWrite`, each at its offset, the last one
//! flagged) or asks for them (`RmaRead`); the target checks key, bounds and
//! access through its domain's key table ([`DomainProvider::remote_target`])
//! before it touches a byte — the whole range on the first frame, each
//! frame's range again as it lands or leaves, so a region deregistered
//! midway fails the rest — and answers `RmaDone` with a status
//! ([`crate::mr::keys::status`]). Read bytes come back as `RmaData` frames.
//! A write whose token is 0 (`inject_write`) gets no answer.
//!
//! Where the target's device reaches a region by itself
//! ([`DomainProvider::native_rma`]) and the target does not want to see
//! each access (`rma_events`), its `RmaDone` grants the initiator that
//! key for that access over the region ([`wire::NATIVE`]); the initiator's
//! later operations of that access on the key, inside the region, without
//! immediate data, go by its transport's device
//! ([`Transport::start_rma`]), and are reported by `Event::Accessed`.
//! A key is thus never used natively before the target vouched for it, so
//! a forged key, a range outside the region or an access the region does
//! not grant is refused by the target's checks, in software, and the
//! connection serves on. A grant also carries the target domain's stamp
//! ([`DomainProvider::grant_stamp`]), passed back to the transport with
//! each native operation: a transport whose device does not invalidate a
//! deregistered key by itself (shared memory's cross-memory attach) checks
//! it against the target's current one, so a stale grant is refused and
//! the operation goes in frames, checked again.

use crate::addr::Address;
use crate::complete;
use crate::error::Error;
use crate::mr::keys::{status, status_error, status_of};
use crate::mr::Access;
use crate::provider::{Ctx, DomainProvider, RmaKind, RmaOp};

use super::super::transport::{Bytes, Pulled, Remote, Transport};
use super::super::Outstanding;
use super::order::Held;
use super::out::Out;
use super::wire::{self, Header, Kind};
use super::State;

/// Most writes whose failure a target remembers until their last frame;
/// past it, the peer loses its connection (it is failing writes faster than
/// it finishes them).
const FAILED_MAX: usize = 256;

/// Most native grants an initiator keeps; past it they are forgotten (the
/// next operations on those keys go in frames and are granted again).
const NATIVE_MAX: usize = 4096;

/// A native grant: (peer, key, write) -> the region and the target's stamp.
pub(super) type Grants = crate::hash::FastMap<((usize, u64), u64, bool), Grant>;

/// What a target grants: a region its device reaches (start, length) and
/// its domain's stamp at the time ([`DomainProvider::grant_stamp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Grant {
    pub(super) start: u64,
    pub(super) len: u64,
    pub(super) stamp: u64,
}

/// An initiator's RMA operation waiting for its answer.
pub(super) struct RmaTx {
    pub(super) op: RmaOp,
    pub(super) peer: (usize, u64),
    /// Read bytes placed so far.
    got: usize,
    /// The transport moves it natively: only its `Accessed` event ends it.
    pub(super) native: bool,
    /// Its peer failed while the transport moved it: the error it reports.
    pub(super) ended: Option<Error>,
    /// Held behind a device atomic to its peer (`order.rs`): not sent yet.
    pub(super) held: bool,
}

/// A read the target streams back: `len` bytes of region `key` from `addr`.
pub(super) struct ReadBack {
    pub(super) token: u64,
    pub(super) key: u64,
    pub(super) addr: u64,
    pub(super) len: usize,
    pub(super) off: usize,
    /// The region the target's device reaches for reads, granted in the
    /// closing `RmaDone`.
    pub(super) native: Option<Grant>,
}

/// The frame of write `key` that starts at `off`, with its bytes; `None`
/// once the operation is gone.
pub(super) fn write_frame(rmas: &Outstanding<RmaTx>, key: usize, off: usize, room: usize) -> Option<(Header, &[u8])> {
    let tx = rmas.get(key)?;
    let buf = tx.op.buf.as_slice();
    let end = buf.len().min(off + room);
    let mut h = Header::new(Kind::RmaWrite);
    h.tag = tx.op.key;
    h.addr = tx.op.addr;
    h.len = buf.len() as u64;
    h.off = off as u64;
    h.token = rmas.token(key);
    if end == buf.len() {
        h.flags |= wire::LAST;
        if let Some(d) = tx.op.data {
            h.flags |= wire::DATA;
            h.data = d;
        }
    }
    Some((h, &buf[off..end]))
}

/// The next frame of a read streamed back, re-checked against the region:
/// `RmaData` with its bytes, or the closing `RmaDone`; and how far it moves
/// the read.
pub(super) fn read_frame<'d>(domain: &'d dyn DomainProvider, r: &ReadBack, room: usize) -> (Header, &'d [u8], usize) {
    let mut h = Header::new(Kind::RmaDone);
    h.token = r.token;
    if r.off == r.len {
        grant(&mut h, r.native);
        return (h, &[], 0);
    }
    let n = room.min(r.len - r.off);
    let addr = r.addr + r.off as u64;
    match domain.remote_target(r.key, addr, n as u64, Access::REMOTE_READ) {
        Ok(ptr) => {
            // SAFETY: the key table vouched that `n` bytes at `ptr` are a
            // live registration; they stay so while the domain lock is held,
            // which it is for this whole provider call.
            let bytes = unsafe { std::slice::from_raw_parts(ptr, n) };
            h.kind = Kind::RmaData;
            h.off = r.off as u64;
            (h, bytes, n)
        }
        Err(_) => {
            h.status = status::DEREGISTERED as u32;
            (h, &[], r.len - r.off)
        }
    }
}

/// Marks an `RmaDone` with `grant`, if any.
fn grant(h: &mut Header, grant: Option<Grant>) {
    if let Some(g) = grant {
        h.flags |= wire::NATIVE;
        h.addr = g.start;
        h.len = g.len;
        h.off = g.stamp;
    }
}

impl State {
    /// What a target grants for `key` and `access`: the region its device
    /// reaches, unless this endpoint wants to see each access.
    fn grantable(&self, cx: &Ctx<'_>, key: u64, access: Access) -> Option<Grant> {
        if self.rma_events {
            return None;
        }
        let (start, len) = cx.domain.native_rma(key, access)?;
        Some(Grant {
            start,
            len,
            stamp: cx.domain.grant_stamp(),
        })
    }

    /// Starts `op` to its peer, named `name` in the address vector.
    pub(super) fn rma<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>, op: RmaOp, name: &Address) {
        let p = match self.peer_named(t, op.peer, name) {
            Ok(p) => p,
            Err(e) => return complete::rma(&mut cx.cq, self.selective, op, Err(e)),
        };
        let at = self.serial(p);
        let native = self.native_ok(at, &op);
        let key = self.rmas.insert(RmaTx {
            op,
            peer: at,
            got: 0,
            native: false,
            ended: None,
            held: false,
        });
        if native.is_some_and(|stamp| self.start_native(t, cx, key, stamp)) {
            return;
        }
        if self.frames_wait(at) {
            return self.hold_back(at, Held::Rma(self.rmas.token(key)));
        }
        self.send_rma(t, cx, p, key);
    }

    /// Sends RMA `key` to peer `p` in frames.
    pub(super) fn send_rma<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>, p: usize, key: usize) {
        let tx = &self.rmas[key];
        let at = tx.peer;
        // Its answer follows every inject write before it.
        self.injected.retain(|&p| p != at);
        match tx.op.kind {
            RmaKind::Write => self.enqueue(p, 0, Out::RmaWrite { key, off: 0 }),
            RmaKind::Read => {
                let mut h = Header::new(Kind::RmaRead);
                h.tag = tx.op.key;
                h.addr = tx.op.addr;
                h.len = tx.op.buf.len() as u64;
                h.token = self.rmas.token(key);
                self.enqueue(p, 0, Out::Owned(h.encode(), Vec::new()));
            }
        }
        self.posted(t, cx, p);
    }

    /// Whether `op` may go natively: no immediate data, some bytes, and a
    /// grant of its key and access covering its range; the grant's stamp.
    fn native_ok(&self, at: (usize, u64), op: &RmaOp) -> Option<u64> {
        if op.data.is_some() || op.buf.is_empty() {
            return None;
        }
        let write = op.kind == RmaKind::Write;
        let g = self.grants.get(&(at, op.key, write))?;
        let end = op.addr.checked_add(op.buf.len() as u64);
        let inside = op.addr >= g.start && end.is_some_and(|e| e <= g.start + g.len);
        (inside && !self.device_waits(at)).then_some(g.stamp)
    }

    /// Whether an operation the target's engine applies to peer `at`'s
    /// memory may be pending there: an RMA or atomic sent in frames and not
    /// yet answered (one held back is not sent yet), or an inject write no
    /// answer has followed yet. A native operation would overtake it (the
    /// device does not wait for the target's engine), so a native RMA goes
    /// in frames behind it instead, and RMA on a connection stays in order;
    /// a device atomic waits (`order.rs`).
    pub(super) fn unordered(&self, at: (usize, u64)) -> bool {
        self.injected.contains(&at) || self.framed_pending(at)
    }

    /// Whether RMA or an atomic to peer `at` sent in frames is unanswered.
    pub(super) fn framed_pending(&self, at: (usize, u64)) -> bool {
        self.rmas.iter().any(|(_, r)| r.peer == at && !r.native && !r.held)
            || self
                .atomics
                .iter()
                .any(|(_, a)| a.peer == at && a.device.is_none() && !a.held)
    }

    /// Asks the transport to do RMA `key` natively; `false` when it cannot
    /// (the operation goes in frames: the grant is forgotten).
    fn start_native<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>, key: usize, stamp: u64) -> bool {
        let token = self.rmas.token(key);
        let tx = &mut self.rmas[key];
        let Some(conn) = self.peers.current(tx.peer).and_then(|e| e.tx) else {
            return false;
        };
        let remote = Remote {
            addr: tx.op.addr,
            key: Some(tx.op.key),
            stamp,
        };
        let (kind, len) = (tx.op.kind, tx.op.buf.len());
        tx.native = true;
        let local = tx.op.buf.as_mut_slice().as_mut_ptr();
        // SAFETY: `local..local + len` is the operation's buffer, which
        // `rmas` owns (its bytes do not move with the entry) and nothing
        // reads or writes while `native` is set: until now (`Done`, an
        // error) or its `Accessed` event.
        match unsafe { t.start_rma(conn, kind, remote, local, len, token) } {
            Ok(Pulled::Started) => {
                self.stats.rma_native += 1;
                true
            }
            Ok(Pulled::Done) => {
                self.stats.rma_native += 1;
                self.accessed(token, Ok(()), cx);
                true
            }
            Err(Error::NotSupported(why)) => {
                tracing::debug!(why, "rdm: RMA goes in frames");
                let tx = &mut self.rmas[key];
                tx.native = false;
                let write = tx.op.kind == RmaKind::Write;
                let k = (tx.peer, tx.op.key, write);
                self.grants.remove(&k);
                false
            }
            Err(e) => {
                self.stats.rma_native += 1;
                self.accessed(token, Err(e), cx);
                true
            }
        }
    }

    /// The native RMA under `token` is over: it completes (or fails, naming
    /// its peer).
    pub(super) fn accessed(&mut self, token: u64, result: Result<(), Error>, cx: &mut Ctx<'_>) {
        let Some(key) = self.rmas.key_of(token).filter(|&k| self.rmas[k].native) else {
            crate::warn_limited!(token, "rdm: a transport reported an RMA the engine did not start");
            return;
        };
        let tx = self.rmas.remove(key);
        let result = result.map_err(|e| {
            self.stats.rma_native_failed += 1;
            let peer = tx.op.peer;
            let e = match e {
                Error::PeerClosed { .. } => Error::PeerClosed { peer },
                Error::PeerUnreachable { errno, .. } => Error::PeerUnreachable { peer, errno },
                e => e,
            };
            tx.ended.unwrap_or(e)
        });
        complete::rma(&mut cx.cq, self.selective, tx.op, result);
    }

    /// Keeps the grant a target's `RmaDone` carried for `tx`.
    fn keep_grant(&mut self, tx: &RmaTx, h: &Header) {
        if h.flags & wire::NATIVE == 0 || h.addr.checked_add(h.len).is_none() {
            return;
        }
        if self.grants.len() >= NATIVE_MAX {
            self.grants.clear();
        }
        let write = tx.op.kind == RmaKind::Write;
        let g = Grant {
            start: h.addr,
            len: h.len,
            stamp: h.off,
        };
        self.grants.insert((tx.peer, tx.op.key, write), g);
    }

    /// A target's write frame from peer `p`.
    pub(super) fn on_write(
        &mut self,
        cx: &mut Ctx<'_>,
        p: usize,
        h: Header,
        payload: Bytes<'_>,
    ) -> Result<(), &'static str> {
        let at = self.serial(p);
        let off = h.off;
        if off.checked_add(payload.len() as u64).is_none_or(|end| end > h.len) {
            return Err("RMA write bytes past the operation");
        }
        let failed_before = self.write_failed.iter().position(|&(a, t, _)| a == at && t == h.token);
        let mut status = failed_before.map_or(status::OK, |i| self.write_failed[i].2);
        if status == status::OK && off == 0 {
            if let Err(e) = cx.domain.remote_target(h.tag, h.addr, h.len, Access::REMOTE_WRITE) {
                tracing::debug!(key = h.tag, addr = h.addr, len = h.len, error = %e, "remote write refused");
                status = status_of(&e);
            }
        }
        if status == status::OK && !payload.is_empty() {
            // An address past the end of memory is out of any region.
            let addr = h.addr.saturating_add(off);
            match cx
                .domain
                .remote_target(h.tag, addr, payload.len() as u64, Access::REMOTE_WRITE)
            {
                Ok(ptr) => {
                    // SAFETY: the key table vouched for `payload.len()`
                    // writable bytes at `ptr`, live while the domain lock is
                    // held (this whole call).
                    let dst = unsafe { std::slice::from_raw_parts_mut(ptr, payload.len()) };
                    payload.copy_to(dst);
                }
                Err(e) => {
                    status = match status_of(&e) {
                        status::UNKNOWN_KEY => status::DEREGISTERED,
                        other => other,
                    }
                }
            }
        }
        let last = h.flags & wire::LAST != 0;
        match (last, failed_before) {
            (true, Some(i)) => {
                self.write_failed.swap_remove(i);
            }
            (false, None) if status != status::OK && h.token != 0 => {
                if self.write_failed.len() >= FAILED_MAX {
                    return Err("too many failed RMA writes in flight");
                }
                self.write_failed.push((at, h.token, status));
            }
            _ => {}
        }
        if !last {
            return Ok(());
        }
        self.stats.rma_served += 1;
        if status == status::OK {
            let src = self.peers.handle(p, cx.av);
            let from = self.peers.get(p).map_or(self.name, |e| e.name);
            let len = h.len as usize;
            if let Some(data) = h.data() {
                complete::remote_write_from(&mut cx.cq, len, data, src, (&from, h.tag), self.source_err);
            } else if self.rma_events {
                complete::remote_rma(&mut cx.cq, RmaKind::Write, len, src, h.tag);
            }
        }
        if h.token != 0 {
            let mut done = Header::new(Kind::RmaDone);
            done.token = h.token;
            done.status = status as u32;
            if status == status::OK {
                grant(&mut done, self.grantable(cx, h.tag, Access::REMOTE_WRITE));
            }
            self.enqueue(p, 0, Out::Owned(done.encode(), Vec::new()));
        }
        Ok(())
    }

    /// A target's read request from peer `p`.
    pub(super) fn on_read(&mut self, cx: &mut Ctx<'_>, p: usize, h: Header) {
        let len = usize::try_from(h.len).unwrap_or(usize::MAX);
        self.stats.rma_served += 1;
        match cx.domain.remote_target(h.tag, h.addr, h.len, Access::REMOTE_READ) {
            Ok(_) => {
                if self.rma_events {
                    let src = self.peers.handle(p, cx.av);
                    complete::remote_rma(&mut cx.cq, RmaKind::Read, len, src, h.tag);
                }
                let r = ReadBack {
                    token: h.token,
                    key: h.tag,
                    addr: h.addr,
                    len,
                    off: 0,
                    native: self.grantable(cx, h.tag, Access::REMOTE_READ),
                };
                self.enqueue(p, 0, Out::ReadBack(r));
            }
            Err(e) => {
                tracing::debug!(key = h.tag, addr = h.addr, len = h.len, error = %e, "remote read refused");
                let mut done = Header::new(Kind::RmaDone);
                done.token = h.token;
                done.status = status_of(&e) as u32;
                self.enqueue(p, 0, Out::Owned(done.encode(), Vec::new()));
            }
        }
    }

    /// An initiator's read bytes.
    pub(super) fn on_read_data(&mut self, at: (usize, u64), h: Header, payload: Bytes<'_>) -> Result<(), &'static str> {
        let key = self.rmas.key_of(h.token).filter(|&k| self.rmas[k].peer == at);
        let tx = key
            .and_then(|k| self.rmas.get_mut(k))
            .filter(|tx| tx.op.kind == RmaKind::Read && !tx.native)
            .ok_or("read data for no read waiting for it")?;
        let buf = tx.op.buf.as_mut_slice();
        let off = usize::try_from(h.off).map_err(|_| "read data past the buffer")?;
        let end = off
            .checked_add(payload.len())
            .filter(|&e| e <= buf.len())
            .ok_or("read data past the buffer")?;
        payload.copy_to(&mut buf[off..end]);
        tx.got += payload.len();
        Ok(())
    }

    /// An initiator's answer: the operation completes with its status.
    pub(super) fn on_rma_done(&mut self, cx: &mut Ctx<'_>, at: (usize, u64), h: Header) -> Result<(), &'static str> {
        let key = self
            .rmas
            .key_of(h.token)
            .filter(|&k| self.rmas[k].peer == at && !self.rmas[k].native);
        let key = key.ok_or("RMA answer for no operation waiting for one")?;
        let tx = self.rmas.remove(key);
        if h.status == 0 {
            self.keep_grant(&tx, &h);
        }
        let code = u64::from(h.status);
        let result = match code {
            status::OK if tx.op.kind == RmaKind::Read && tx.got != tx.op.buf.len() => {
                Err(Error::Protocol("a read answered before all its bytes came"))
            }
            status::OK => Ok(()),
            c if c <= status::MAX => Err(status_error(c)),
            _ => Err(Error::Protocol("unknown RMA status")),
        };
        complete::rma(&mut cx.cq, self.selective, tx.op, result);
        Ok(())
    }
}
