//! Operations onto a queue pair, or into the peer's queue while there is no
//! connection or no room (send-queue slots, send buffers). A peer's
//! operations go out in the order they were posted.
//!
//! How each goes (docs/PROTOCOL.md, "Verbs operations"):
//! - eager send: header + payload inline when it fits `max_inline`, else
//!   copied into a registered send buffer;
//! - rendezvous send: the buffer is registered through the MR cache and an
//!   RTS names it; the receiver READs it and answers with a FIN;
//! - RMA: RDMA WRITE/READ straight from/into the user's buffer (MR cache),
//!   a write with data followed by a write-data message (RC keeps the order).

use xfer_core::unstable::addr::Address;
use xfer_core::unstable::complete::{self, Arrival};
use xfer_core::unstable::mr::{Access, CacheRef};
use xfer_core::unstable::provider::{CompletionLevel, Ctx, RmaOp, SendOp};
use xfer_core::unstable::rdm::rndv::{self, Protocol};
use xfer_core::LocalDesc;
use xfer_core::{Error, RmaKind};

use super::{ReadJob, RndvSend, State, Tx, VerbsEndpoint, Wr, BARE_WR};
use crate::qp::{RemoteBuf, Sge};
use crate::wire::{self, Meta};

/// Why an operation could not be posted now.
pub(super) enum Blocked {
    /// No send-queue slot or send buffer: retry after completions.
    Room(Tx),
    /// It ended (completed with an error, or was silently dropped).
    Done,
}

impl VerbsEndpoint {
    /// Posts `tx` to `dest` now if its connection is ready, nothing is
    /// queued before it and there is room; else queues it (connecting first
    /// if needed).
    pub(super) fn submit(&mut self, cx: &mut Ctx<'_>, dest: Address, tx: Tx) {
        let mut tx = tx;
        // A look-up, not `entry`: the peer exists on every send but its first.
        let ready = self
            .peers
            .get(&dest)
            .filter(|p| p.queue.is_empty())
            .and_then(|p| p.conn)
            .filter(|&k| self.conns[k].state == State::Ready);
        if let Some(k) = ready {
            match self.try_post(cx, k, tx) {
                Ok(()) | Err(Blocked::Done) => return,
                Err(Blocked::Room(back)) => tx = back,
            }
        }
        self.stats.queued += 1;
        let peer = self.peers.entry(dest).or_default();
        peer.queue.push_back(tx);
        let needs_conn = peer.conn.is_none() && peer.retry_at.is_none();
        if !self.backlog.contains(&dest) {
            self.backlog.push(dest);
        }
        if needs_conn {
            self.start_connect(cx, dest);
        }
    }

    /// Posts what peers have queued, as far as connections and room allow.
    pub(super) fn flush_backlog(&mut self, cx: &mut Ctx<'_>) {
        let mut i = 0;
        while i < self.backlog.len() {
            let dest = self.backlog[i];
            let Some(k) = self.peers.get(&dest).and_then(|p| p.conn) else {
                i += 1;
                continue;
            };
            if self.conns[k].state != State::Ready {
                i += 1;
                continue;
            }
            let mut blocked = false;
            while let Some(tx) = self.peers.get_mut(&dest).and_then(|p| p.queue.pop_front()) {
                match self.try_post(cx, k, tx) {
                    Ok(()) | Err(Blocked::Done) => {}
                    Err(Blocked::Room(back)) => {
                        if let Some(p) = self.peers.get_mut(&dest) {
                            p.queue.push_front(back);
                        }
                        blocked = true;
                        break;
                    }
                }
                if self.conns.get(k).map(|c| c.state) != Some(State::Ready) {
                    break;
                }
            }
            if blocked {
                // Unsignaled requests hold slots until a signaled one
                // retires them: make sure one is coming.
                self.signal_tail(k);
                i += 1;
            } else if self.peers.get(&dest).is_some_and(|p| !p.queue.is_empty()) {
                i += 1;
            } else {
                self.backlog.swap_remove(i);
            }
        }
    }

    fn signal_tail(&mut self, k: usize) {
        let key = self.ops.insert(Wr::Ctrl { slot: None });
        let c = &mut self.conns[k];
        let Some(qp) = c.qp.as_mut() else {
            self.ops.remove(key);
            return;
        };
        match qp.signal_tail(key as u64) {
            Ok(true) => c.posted.push_back(key),
            Ok(false) | Err(_) => {
                self.ops.remove(key);
            }
        }
    }

    /// A [`BARE_WR`] number for a work request that holds nothing once
    /// posted (unique among those in flight: it wraps after 2^62).
    fn bare_wr(&mut self) -> usize {
        self.bare = (self.bare + 1) & (BARE_WR - 1);
        BARE_WR | self.bare
    }

    /// Whether connection `k`'s send queue has `n` free slots.
    fn room(&self, k: usize, n: u32) -> bool {
        self.conns[k]
            .qp
            .as_ref()
            .is_some_and(|qp| qp.outstanding() + n <= qp.sq_depth())
    }

    fn max_inline(&self, k: usize) -> usize {
        self.conns[k].qp.as_ref().map_or(0, |qp| qp.max_inline() as usize)
    }

    /// Posts one operation on ready connection `k`. An eager-sized send
    /// without the byte credit for it goes by rendezvous, and so does one
    /// that asks for more than inject-complete (the receiver's FIN, sent
    /// once the data is placed, completes it); anything that takes a
    /// receive buffer at the peer waits for message credit.
    pub(super) fn try_post(&mut self, cx: &mut Ctx<'_>, k: usize, tx: Tx) -> Result<(), Blocked> {
        if !self.has_msg_credit(k, &tx) {
            return Err(Blocked::Room(tx));
        }
        match tx {
            Tx::Send { op, silent }
                if op.level == CompletionLevel::Inject
                    && rndv::choose(op.buf.len(), self.eager_max, || self.has_byte_credit(k, op.buf.len()))
                        == Protocol::Eager =>
            {
                self.post_eager(cx, k, op, silent)
            }
            Tx::Send { op, silent } if !self.has_byte_credit(k, 0) => {
                // A request to send costs credit too (its unexpected entry):
                // it waits in the peer's queue, and what follows behind it.
                self.stats.rdm.credit_waits += 1;
                Err(Blocked::Room(Tx::Send { op, silent }))
            }
            Tx::Send { op, silent } => {
                let stalled = op.level == CompletionLevel::Inject && op.buf.len() <= self.eager_max;
                let r = self.post_rts(cx, k, op, silent);
                if stalled && r.is_ok() {
                    self.stats.rdm.credit_stalls += 1;
                }
                r
            }
            Tx::Rma { op, silent } => self.post_rma(cx, k, op, silent),
            // A rendezvous belongs to the connection its RTS came on: once
            // that one died, the sender has failed the send and may have
            // reused its buffer, so reading it, or acknowledging
            // it, over a newer connection would deliver or complete the
            // wrong data.
            Tx::Read(job) if job.conn != k => {
                let peer = cx.av.reverse(&self.conns[k].peer);
                let e = Error::PeerUnreachable {
                    peer,
                    errno: libc::ECONNRESET,
                };
                complete::recv(&mut cx.cq, job.recv, job.arrival, Some(e));
                Err(Blocked::Done)
            }
            Tx::Read(job) => self.post_read(cx, k, job),
            Tx::Fin { token, conn, .. } if conn != k => {
                tracing::debug!(token, "FIN for a rendezvous of a dead connection dropped");
                Err(Blocked::Done)
            }
            Tx::Fin { token, status, conn } => {
                let mut msg = [0u8; wire::FIN_LEN];
                wire::fin(&mut msg, token, status);
                self.post_ctrl(k, &msg, false, true)
                    .map_err(|()| Blocked::Room(Tx::Fin { token, status, conn }))
            }
        }
    }

    /// Sends a control message inline or from a send buffer, as a
    /// [`Wr::Ctrl`]; `spend`: it costs a message credit (all but credit
    /// messages). `Err(())` when there is no room.
    pub(super) fn post_ctrl(&mut self, k: usize, msg: &[u8], signal: bool, spend: bool) -> Result<(), ()> {
        if !self.room(k, 1) {
            return Err(());
        }
        let inline = msg.len() <= self.max_inline(k);
        let taken = if inline {
            None
        } else {
            match self.pool.take(|b| {
                b[..msg.len()].copy_from_slice(msg);
                msg.len()
            }) {
                Some(t) => Some(t),
                None => return Err(()),
            }
        };
        let key = match taken {
            None => self.bare_wr(),
            Some((s, _)) => self.ops.insert(Wr::Ctrl { slot: Some(s) }),
        };
        let c = &mut self.conns[k];
        let qp = c.qp.as_mut().ok_or(())?;
        let posted = match taken {
            None => qp.send_inline(key as u64, msg, None, signal),
            // SAFETY: the slot stays untouched until the WR is retired
            // (finish_wr gives it back then).
            Some((_, sge)) => unsafe { qp.send(key as u64, sge, None, signal) },
        };
        match posted {
            Ok(()) => {
                c.posted.push_back(key);
                if spend {
                    self.spend(k, 0);
                }
                Ok(())
            }
            Err(e) => {
                tracing::debug!(error = %e, "posting a control message");
                if key & BARE_WR == 0 {
                    if let Wr::Ctrl { slot: Some(s) } = self.ops.remove(key) {
                        self.pool.give(s);
                    }
                }
                Ok(()) // the connection is failing; its errors say so
            }
        }
    }

    fn post_eager(&mut self, cx: &mut Ctx<'_>, k: usize, op: SendOp, silent: bool) -> Result<(), Blocked> {
        let len = op.buf.len();
        let total = wire::HDR + len;
        let inline = total <= self.max_inline(k);
        if !self.room(k, 1) || (!inline && !self.pool.has_free()) {
            return Err(Blocked::Room(Tx::Send { op, silent }));
        }
        let meta = Meta {
            tag: op.tag,
            data: op.data,
        };
        let fill = |b: &mut [u8]| {
            wire::eager(&mut b[..wire::HDR], meta);
            b[wire::HDR..total].copy_from_slice(op.buf.as_slice());
            total
        };
        let taken = if inline {
            self.scratch.resize(total, 0);
            fill(&mut self.scratch);
            None
        } else {
            self.pool.take(fill)
        };
        let key = match &taken {
            None => self.bare_wr(),
            Some((s, _)) => self.ops.insert(Wr::Ctrl { slot: Some(*s) }),
        };
        let c = &mut self.conns[k];
        let selective = self.attr.selective_completion;
        // The payload is in the WR or in our send buffer: the user's buffer
        // is free now, so the send completes at once (FI_INJECT_COMPLETE, as
        // on TCP) and the WR is signaled only when the QP needs it.
        let posted = match (c.qp.as_mut(), taken) {
            (None, _) => Err(Error::Internal("ready connection without a queue pair")),
            (Some(qp), None) => qp.send_inline(key as u64, &self.scratch, None, false),
            // SAFETY: the slot stays untouched until the WR is retired.
            (Some(qp), Some((_, sge))) => unsafe { qp.send(key as u64, sge, None, false) },
        };
        match posted {
            Ok(()) => {
                c.posted.push_back(key);
                self.spend(k, super::credit::eager_cost(len));
                if !silent {
                    complete::send(&mut cx.cq, selective, op, Ok(()));
                }
                if inline {
                    self.stats.inline_sends += 1;
                } else {
                    self.stats.copied_sends += 1;
                }
                Ok(())
            }
            Err(e) => {
                self.finish_wr(cx, key, Ok(()));
                if !silent {
                    complete::send(&mut cx.cq, selective, op, Err(e));
                }
                Err(Blocked::Done)
            }
        }
    }

    fn post_rts(&mut self, cx: &mut Ctx<'_>, k: usize, op: SendOp, silent: bool) -> Result<(), Blocked> {
        if !self.room(k, 1) || (wire::RTS_LEN > self.max_inline(k) && !self.pool.has_free()) {
            return Err(Blocked::Room(Tx::Send { op, silent }));
        }
        let ptr = op.buf.as_slice().as_ptr() as usize;
        let len = op.buf.len();
        // An empty message (a rendezvous only to be acknowledged) is never
        // read: there is nothing to register.
        let registered = match len {
            0 => Ok((None, 0, 0)),
            _ => self.register(ptr, len, Access::REMOTE_READ, op.buf.local_desc()),
        };
        let (mr, _, rkey) = match registered {
            Ok(r) => r,
            Err(e) => {
                if !silent {
                    complete::send(&mut cx.cq, false, op, Err(e));
                }
                return Err(Blocked::Done);
            }
        };
        let meta = Meta {
            tag: op.tag,
            data: op.data,
        };
        let id = self.rndv.insert(RndvSend { op, mr, conn: k });
        let mut msg = [0u8; wire::RTS_LEN];
        wire::rts(&mut msg, meta, self.rndv.token(id), len as u64, ptr as u64, rkey);
        match self.post_ctrl(k, &msg, false, true) {
            Ok(()) => {
                self.spend_bytes(k, super::credit::eager_cost(0));
                self.stats.rndv_sends += 1;
                Ok(())
            }
            Err(()) => {
                let r = self.rndv.remove(id);
                self.release_mr(r.mr);
                Err(Blocked::Room(Tx::Send { op: r.op, silent }))
            }
        }
    }

    fn post_rma(&mut self, cx: &mut Ctx<'_>, k: usize, op: RmaOp, silent: bool) -> Result<(), Blocked> {
        let Ok(rkey) = u32::try_from(op.key) else {
            // Verbs keys are 32 bits: this one was never issued by a target.
            if !silent {
                let e = Error::RemoteAccess("key was not issued by a verbs target");
                complete::rma(&mut cx.cq, false, op, Err(e));
            }
            return Err(Blocked::Done);
        };
        let len = op.buf.len();
        let data_msg = op.data.filter(|_| op.kind == RmaKind::Write);
        let needs = 1 + u32::from(data_msg.is_some());
        // A write-data notice too long for inline takes a send buffer; an
        // inject-write copies its payload into one unless that is taken.
        let ctrl_slot = data_msg.is_some() && wire::WRITE_DATA_LEN > self.max_inline(k);
        let copy = silent && len > 0 && len <= self.pool.slot_size() && !ctrl_slot;
        if !self.room(k, needs) || ((copy || ctrl_slot) && !self.pool.has_free()) {
            return Err(Blocked::Room(Tx::Rma { op, silent }));
        }
        let (local, mr, slot) = if len == 0 {
            (
                Sge {
                    addr: 0,
                    length: 0,
                    lkey: 0,
                },
                None,
                None,
            )
        } else if copy {
            let src = op.buf.as_slice();
            match self.pool.take(|b| {
                b[..len].copy_from_slice(src);
                len
            }) {
                Some((s, sge)) => (sge, None, Some(s)),
                None => return Err(Blocked::Room(Tx::Rma { op, silent })),
            }
        } else {
            let access = match op.kind {
                RmaKind::Write => Access::empty(),
                RmaKind::Read => Access::LOCAL_WRITE,
            };
            let ptr = op.buf.as_slice().as_ptr() as usize;
            match self.register(ptr, len, access, op.buf.local_desc()) {
                Ok((r, lkey, _)) => (
                    Sge {
                        addr: ptr as u64,
                        length: len as u32,
                        lkey,
                    },
                    r,
                    None,
                ),
                Err(e) => {
                    if !silent {
                        complete::rma(&mut cx.cq, false, op, Err(e));
                    }
                    return Err(Blocked::Done);
                }
            }
        };
        let (kind, signal) = (op.kind, self.wants_completion(silent, op.completion));
        let remote = RemoteBuf { addr: op.addr, rkey };
        let key = self.ops.insert(Wr::Rma {
            op,
            silent,
            mr,
            slot,
            signaled: signal,
        });
        let c = &mut self.conns[k];
        let Some(qp) = c.qp.as_mut() else {
            return Err(Blocked::Done);
        };
        // SAFETY: `local` is a registered send slot or the user's buffer,
        // registered through the MR cache and owned by the Wr until retired.
        let posted = unsafe {
            match kind {
                RmaKind::Write => qp.write(key as u64, local, remote, None, signal),
                RmaKind::Read => qp.read(key as u64, local, remote, signal),
            }
        };
        tracing::trace!(
            ?kind,
            len,
            addr = remote.addr,
            rkey,
            key,
            ok = posted.is_ok(),
            "RMA posted"
        );
        if let Err(e) = posted {
            self.finish_wr(cx, key, Err(e));
            return Err(Blocked::Done);
        }
        c.posted.push_back(key);
        if let Some(data) = data_msg {
            let mut msg = [0u8; wire::WRITE_DATA_LEN];
            wire::write_data(&mut msg, data, len as u64);
            if self.post_ctrl(k, &msg, false, true).is_err() {
                xfer_core::warn_limited!("no room for a write-data notice after its write");
            }
        }
        Ok(())
    }

    fn post_read(&mut self, cx: &mut Ctx<'_>, k: usize, job: Box<ReadJob>) -> Result<(), Blocked> {
        if !self.room(k, 1) {
            return Err(Blocked::Room(Tx::Read(job)));
        }
        let mut job = job;
        let len = job.arrival.len;
        let ptr = job.recv.buf.as_mut_slice().as_mut_ptr() as usize;
        let (mr, lkey) = match self.register(ptr, len, Access::LOCAL_WRITE, job.recv.buf.local_desc()) {
            Ok((r, lkey, _)) => (r, lkey),
            Err(e) => {
                complete::recv(&mut cx.cq, job.recv, job.arrival, Some(e));
                let (token, peer) = (job.token, self.conns[k].peer);
                self.submit(
                    cx,
                    peer,
                    Tx::Fin {
                        token,
                        status: 1,
                        conn: k,
                    },
                );
                return Err(Blocked::Done);
            }
        };
        let local = Sge {
            addr: ptr as u64,
            length: len as u32,
            lkey,
        };
        let remote = RemoteBuf {
            addr: job.raddr,
            rkey: job.rkey,
        };
        let key = self.ops.insert(Wr::Read { job, mr });
        let c = &mut self.conns[k];
        let Some(qp) = c.qp.as_mut() else {
            return Err(Blocked::Done);
        };
        // SAFETY: the receive buffer is registered and owned by the Wr (not
        // read or written by anyone) until the READ is retired.
        match unsafe { qp.read(key as u64, local, remote, true) } {
            Ok(()) => {
                c.posted.push_back(key);
                Ok(())
            }
            Err(e) => {
                self.finish_wr(cx, key, Err(e));
                Err(Blocked::Done)
            }
        }
    }

    /// The lkey and rkey of `[ptr, ptr + len)`: the keys of the region the
    /// buffer came from (`desc`) when it grants `access`, else a registration
    /// from the MR cache, whose reference comes along.
    fn register(
        &self,
        ptr: usize,
        len: usize,
        access: Access,
        desc: Option<LocalDesc>,
    ) -> xfer_core::Result<(Option<CacheRef>, u32, u32)> {
        if let Some(d) = desc.filter(|d| d.access.contains(access)) {
            // Verbs keys are 32 bits; MrKeys widened them losslessly.
            return Ok((None, d.desc as u32, d.key as u32));
        }
        crate::mr::cached_keys(&mut self.res.cache(), ptr, len, access).map(|(r, l, rk)| (Some(r), l, rk))
    }

    /// Drops a reference taken by [`register`](Self::register).
    pub(super) fn release_mr(&self, r: Option<CacheRef>) {
        let Some(r) = r else { return };
        if let Err(e) = self.res.cache().release(r) {
            xfer_core::warn_limited!(error = %e, "releasing an MR cache reference");
        }
    }

    /// Ends a queued operation with `err`.
    pub(super) fn fail_tx(&mut self, cx: &mut Ctx<'_>, tx: Tx, err: Error) {
        match tx {
            Tx::Send { op, silent: false } => complete::send(&mut cx.cq, false, op, Err(err)),
            Tx::Rma { op, silent: false } => complete::rma(&mut cx.cq, false, op, Err(err)),
            Tx::Read(job) => complete::recv(&mut cx.cq, job.recv, job.arrival, Some(err)),
            Tx::Send { .. } | Tx::Rma { .. } | Tx::Fin { .. } => {}
        }
    }

    /// Starts the receiver's side of a rendezvous whose RTS matched `recv`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_read(
        &mut self,
        cx: &mut Ctx<'_>,
        recv: xfer_core::unstable::provider::RecvOp,
        arrival: Arrival,
        token: u64,
        raddr: u64,
        rkey: u32,
        conn: usize,
    ) {
        let peer = self.conns[conn].peer;
        if arrival.len == 0 {
            complete::recv_from(&mut cx.cq, recv, arrival, &peer, self.attr.source_err);
            self.submit(cx, peer, Tx::Fin { token, status: 0, conn });
            return;
        }
        let job = Box::new(ReadJob {
            recv,
            arrival,
            token,
            raddr,
            rkey,
            conn,
        });
        self.submit(cx, peer, Tx::Read(job));
    }
}
