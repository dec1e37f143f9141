//! Work completions: send-queue retirement (selective signaling: one
//! signaled completion retires the unsignaled requests before it), receives
//! out of the SRQ, and errors (the failing request gets the mapped error,
//! later ones the flush error, and the connection is retired).

use xfer_core::unstable::complete::{self, Arrival};
use xfer_core::unstable::provider::{Ctx, RecvOp};
use xfer_core::{Address, Error, PeerAddr, RmaKind};

use super::credit::eager_cost;
use super::{RtsTicket, State, Tx, Unexpected, VerbsEndpoint, Wr, BARE_WR, WC_BATCH};
use crate::cq::Wc;
use crate::qp::RcQp;
use crate::wire::Msg;

/// `ibv_wc_status` values mapped to their own errors.
const WC_LOC_QP_OP_ERR: u32 = 2;
const WC_LOC_PROT_ERR: u32 = 4;
const WC_WR_FLUSH_ERR: u32 = 5;
const WC_REM_INV_REQ_ERR: u32 = 9;
const WC_REM_ACCESS_ERR: u32 = 10;
const WC_RETRY_EXC_ERR: u32 = 12;
const WC_RNR_RETRY_EXC_ERR: u32 = 13;

/// The xfer error for a failed work completion (the device's status and
/// vendor code are logged: provider detail).
fn wc_error(wc: &Wc, peer: PeerAddr) -> Error {
    tracing::debug!(
        status = wc.status_str(),
        vendor_err = wc.vendor_err(),
        "work completion error"
    );
    match wc.status() {
        WC_REM_ACCESS_ERR => Error::RemoteAccess("the target refused the key, bounds or access rights"),
        WC_REM_INV_REQ_ERR => Error::RemoteAccess("the target refused the request"),
        WC_LOC_PROT_ERR => Error::InvalidArgument("local buffer not covered by its registration"),
        WC_WR_FLUSH_ERR => Error::PeerUnreachable {
            peer,
            errno: libc::ECONNRESET,
        },
        WC_RETRY_EXC_ERR | WC_RNR_RETRY_EXC_ERR => Error::PeerUnreachable {
            peer,
            errno: libc::ETIMEDOUT,
        },
        _ => Error::Os(libc::EIO),
    }
}

impl VerbsEndpoint {
    /// Handles every completion waiting in the CQ; returns how many.
    pub(super) fn poll_cq(&mut self, cx: &mut Ctx<'_>) -> usize {
        // The batch buffer is taken out of `self` for the loop (a pointer
        // swap), so handlers can borrow the endpoint.
        let mut wcs = std::mem::take(&mut self.wcs);
        if wcs.len() != WC_BATCH {
            wcs.resize_with(WC_BATCH, Wc::default); // the first poll only
        }
        let mut total = 0;
        loop {
            let n = match self.cq.poll(&mut wcs) {
                Ok(n) => n,
                Err(e) => {
                    xfer_core::warn_limited!(error = %e, "ibv_poll_cq");
                    break;
                }
            };
            for wc in &wcs[..n] {
                if self.srq.owns(wc.wr_id()) {
                    self.on_recv(cx, wc);
                } else {
                    self.on_send(cx, wc);
                }
            }
            total += n;
            if n < WC_BATCH {
                break;
            }
        }
        self.wcs = wcs;
        total
    }

    fn on_send(&mut self, cx: &mut Ctx<'_>, wc: &Wc) {
        tracing::trace!(?wc, "send completion");
        let Some(k) = self.by_qpn.get(wc.qp_num()) else {
            tracing::debug!(qpn = wc.qp_num(), "send completion of an unknown QP");
            return;
        };
        if self.conns[k].state == State::Dead {
            return; // its work was ended when it died
        }
        if wc.is_ok() {
            let n = match self.conns[k].qp.as_mut() {
                Some(qp) => qp.complete_send(wc),
                None => 0,
            };
            // rxe (seen on Linux 6.1) reports work requests that a QP in the
            // error state never executed as successful: a READ "done" left
            // its receive buffer unwritten. A READ (rendezvous or RMA) is
            // only taken as done while the QP is not in error (one
            // ibv_query_qp per such completion); otherwise the connection
            // has failed. A READ that did complete just before a later
            // request failed (the QP was already in error when polled) is
            // reported failed too: an error, never bad data. Writes are not
            // checked: the C suite's write followed by a refused one is a
            // real success polled after the QP went to error, and the two
            // cases cannot be told apart here.
            let covered = self.conns[k].posted.iter().take(n as usize);
            let data = covered.clone().any(|&key| match self.ops.get(key) {
                Some(Wr::Read { .. }) => true,
                Some(Wr::Rma { op, .. }) => op.kind == RmaKind::Read,
                _ => false,
            });
            if data && self.conns[k].qp.as_ref().is_some_and(RcQp::in_error) {
                let flush = Error::PeerUnreachable {
                    peer: cx.av.reverse(&self.conns[k].peer),
                    errno: libc::ECONNRESET,
                };
                tracing::debug!(qpn = wc.qp_num(), "success completion from a QP in the error state");
                self.conn_failed(cx, k, flush);
                return;
            }
            for _ in 0..n {
                let Some(key) = self.conns[k].posted.pop_front() else {
                    break;
                };
                self.finish_wr(cx, key, Ok(()));
            }
            return;
        }
        let peer = cx.av.reverse(&self.conns[k].peer);
        let flush = Error::PeerUnreachable {
            peer,
            errno: libc::ECONNRESET,
        };
        let mut err = wc_error(wc, peer);
        if wc.status() == WC_LOC_QP_OP_ERR {
            // rxe's answer to a packet it cannot send: no route, or the
            // device refused it (the link went down; the port may still
            // show active for a moment). Either way this connection can
            // no longer reach the peer.
            let errno = if self.port_active() { libc::EIO } else { libc::ENETDOWN };
            err = Error::PeerUnreachable { peer, errno };
        }
        // Requests complete in order: the unsignaled ones before the failed
        // one succeeded. A signaled one still here never reported its own
        // completion, which would have come first: it did not succeed (rxe
        // was seen to flush a later request first, and a READ taken as done
        // delivered a receive buffer it never wrote).
        let failed = wc.wr_id() as usize;
        let mut undone = 0;
        while let Some(&key) = self.conns[k].posted.front() {
            self.conns[k].posted.pop_front();
            if key == failed {
                self.finish_wr(cx, key, Err(err));
                break;
            }
            if self.ops.get(key).is_some_and(Wr::signaled) {
                undone += 1;
                self.finish_wr(cx, key, Err(flush.clone()));
            } else {
                self.finish_wr(cx, key, Ok(()));
            }
        }
        if undone > 0 {
            tracing::debug!(
                undone,
                status = wc.status_str(),
                "signaled requests before a failed one had not completed"
            );
        }
        // Later requests are flushed: ended with `flush`; queued work waits
        // for a new connection.
        self.conn_failed(cx, k, flush);
    }

    /// Ends posted request `key` with `result`, freeing what it held.
    pub(super) fn finish_wr(&mut self, cx: &mut Ctx<'_>, key: usize, result: xfer_core::Result<()>) {
        if key & BARE_WR != 0 {
            return; // it held nothing, and its send (if any) completed when posted
        }
        let selective = self.attr.selective_completion;
        match self.ops.remove(key) {
            Wr::Ctrl { slot } => {
                if let Some(s) = slot {
                    self.pool.give(s);
                }
            }
            Wr::Probe => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "keepalive probe failed");
                }
            }
            Wr::Rma {
                op, silent, mr, slot, ..
            } => {
                if let Some(s) = slot {
                    self.pool.give(s);
                }
                self.release_mr(mr);
                if !silent {
                    complete::rma(&mut cx.cq, selective, op, result);
                }
            }
            Wr::Read { job, mr } => {
                self.release_mr(mr);
                let peer = self.conns.get(job.conn).map(|c| c.peer);
                let ok = result.is_ok();
                match (result, peer) {
                    (Ok(()), Some(from)) => {
                        complete::recv_from(&mut cx.cq, job.recv, job.arrival, &from, self.attr.source_err)
                    }
                    (result, _) => complete::recv(&mut cx.cq, job.recv, job.arrival, result.err()),
                }
                if let (true, Some(peer)) = (ok, peer) {
                    let fin = Tx::Fin {
                        token: job.token,
                        status: 0,
                        conn: job.conn,
                    };
                    self.submit(cx, peer, fin);
                }
            }
        }
    }

    /// Whether the endpoint's port is up (when it cannot be queried: yes).
    pub(super) fn port_active(&self) -> bool {
        let port = self.res.attr.port;
        self.res.pd.context().query_port(port).map_or(true, |p| p.active)
    }

    /// Ends everything posted on connection `k` with `err`.
    pub(super) fn fail_posted(&mut self, cx: &mut Ctx<'_>, k: usize, err: Error) {
        while let Some(key) = self.conns[k].posted.pop_front() {
            self.finish_wr(cx, key, Err(err.clone()));
        }
    }

    fn on_recv(&mut self, cx: &mut Ctx<'_>, wc: &Wc) {
        let idx = match self.srq.take(wc) {
            Ok(i) => i,
            Err(e) => {
                xfer_core::warn_limited!(error = %e, "receive completion");
                return;
            }
        };
        // The connection whose peer spent a message credit on this buffer.
        let mut credited = None;
        if wc.is_ok() {
            match self.by_qpn.get(wc.qp_num()) {
                Some(k) => match self.srq.data(idx, wc.byte_len() as usize) {
                    Ok(bytes) => {
                        let (ptr, len) = (bytes.as_ptr(), bytes.len());
                        // SAFETY: the buffer is held (not posted: the device
                        // does not write it) until the release below, and
                        // the pool lives as long as `self.srq`, which
                        // on_message does not replace.
                        let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
                        if self.on_message(cx, k, bytes) {
                            credited = Some(k);
                        }
                    }
                    Err(e) => xfer_core::warn_limited!(error = %e, "receive longer than its buffer"),
                },
                None => tracing::debug!(qpn = wc.qp_num(), "receive on an unknown QP dropped"),
            }
        } else if !wc.is_flush() {
            tracing::debug!(status = wc.status_str(), "receive completion error");
        }
        if let Err(e) = self.srq.release(idx) {
            xfer_core::warn_limited!(error = %e, "releasing a receive buffer");
        }
        if let Some(k) = credited {
            self.owe(k, 1, 0);
        }
    }

    /// Handles one message from connection `k`'s peer; false for a credit
    /// message (the one kind that costs the peer no credit).
    fn on_message(&mut self, cx: &mut Ctx<'_>, k: usize, bytes: &[u8]) -> bool {
        let from = self.conns[k].peer;
        // Whatever it is, the peer's process ran to send it.
        self.conns[k].silence.heard();
        let msg = match Msg::parse(bytes) {
            Ok(m) => m,
            Err(e) => {
                xfer_core::warn_limited!(peer = ?from, error = %e, "malformed message dropped");
                return true;
            }
        };
        let cost = match &msg {
            Msg::Credit { .. } => None,
            Msg::Eager { payload, .. } => Some(eager_cost(payload.len())),
            // Kept unexpected, it holds an entry as an eager message does.
            Msg::Rts { .. } => Some(eager_cost(0)),
            _ => Some(0),
        };
        if cost.is_some_and(|bytes| !self.charge_peer(k, bytes)) {
            // Dropped. The connection ends at the first such message; the
            // others of it that a poll brings after that are dropped too
            // (its credit stays spent: a dead connection grants none).
            if self.conns[k].state != State::Dead {
                self.stats.rdm.credit_violations += 1;
                xfer_core::warn_limited!(peer = ?from, "peer sent past its credit; connection closed");
                self.conn_failed(cx, k, Error::Protocol("peer sent past its credit"));
            }
            return false;
        }
        let src = cx.av.reverse_hinted(&from, self.conns[k].src_hint);
        self.conns[k].src_hint = src;
        match msg {
            Msg::Eager { meta, payload } => {
                let tag = meta.tag.unwrap_or(0);
                match self.recvs.take_posted(meta.tag.is_some(), src, tag) {
                    Some((_, recv)) => {
                        let named = (&from, self.attr.source_err);
                        copy_in(cx, recv, payload, tag, meta.data, src, named);
                        self.owe(k, 0, eager_cost(payload.len()));
                    }
                    None => {
                        self.hold(k, payload.len());
                        let u = Unexpected::Eager {
                            from,
                            data: meta.data,
                            payload: payload.to_vec(),
                            conn: (k, self.conns[k].serial),
                        };
                        self.recvs.arrive(meta.tag.is_some(), src, tag, u);
                    }
                }
            }
            Msg::Rts {
                meta,
                token,
                len,
                addr,
                rkey,
            } => {
                let tag = meta.tag.unwrap_or(0);
                match self.recvs.take_posted(meta.tag.is_some(), src, tag) {
                    Some((_, recv)) => {
                        let arrival = arrival_of(&recv, len, tag, meta.data, src);
                        self.start_read(cx, recv, arrival, token, addr, rkey, k);
                        self.owe(k, 0, eager_cost(0));
                    }
                    None => {
                        if let Err(e) = self.conns[k].requests.arrive(token) {
                            xfer_core::warn_limited!(peer = ?from, error = %e, "connection closed");
                            self.conn_failed(cx, k, e);
                            return true;
                        }
                        self.hold(k, 0);
                        let u = Unexpected::Rts {
                            from,
                            data: meta.data,
                            len,
                            handle: RtsTicket {
                                token,
                                addr,
                                rkey,
                                conn: k,
                                serial: self.conns[k].serial,
                            },
                        };
                        self.recvs.arrive(meta.tag.is_some(), src, tag, u);
                    }
                }
            }
            Msg::Fin { token, status } => self.on_fin(cx, k, token, status),
            Msg::WriteData { data, len } => {
                let len = usize::try_from(len).unwrap_or(usize::MAX);
                complete::remote_write_from(&mut cx.cq, len, data, src, (&from, 0), self.attr.source_err)
            }
            Msg::Credit { msgs, bytes } => {
                self.on_credit(k, msgs, bytes);
                return false;
            }
            Msg::Ping => self.pinged(k),
        }
        true
    }

    /// A FIN on connection `k`: it ends the rendezvous its token names
    /// only if that one's RTS went out on `k` (one that died with an older
    /// connection must not be completed by it, and a token never names a
    /// later rendezvous).
    fn on_fin(&mut self, cx: &mut Ctx<'_>, k: usize, token: u64, status: u32) {
        let Some((key, _)) = self.rndv.by_token(token).filter(|(_, r)| r.conn == k) else {
            xfer_core::warn_limited!(peer = ?self.conns[k].peer, token, "FIN for no rendezvous of this connection dropped");
            return;
        };
        let r = self.rndv.remove(key);
        self.release_mr(r.mr);
        let result = if status == 0 {
            Ok(())
        } else {
            Err(Error::Protocol("the receiver could not read the message"))
        };
        complete::send(&mut cx.cq, self.attr.selective_completion, r.op, result);
    }

    /// A receive was posted and matched an unexpected message.
    pub(super) fn deliver(&mut self, cx: &mut Ctx<'_>, recv: RecvOp, src: PeerAddr, tag: u64, msg: Unexpected) {
        match msg {
            Unexpected::Eager {
                from,
                data,
                payload,
                conn,
            } => {
                copy_in(cx, recv, &payload, tag, data, src, (&from, self.attr.source_err));
                self.consumed(conn, payload.len());
            }
            Unexpected::Rts {
                data,
                len,
                handle:
                    RtsTicket {
                        token,
                        addr,
                        rkey,
                        conn,
                        serial,
                    },
                ..
            } => {
                let arrival = arrival_of(&recv, len, tag, data, src);
                let live = self
                    .conns
                    .get_mut(conn)
                    .filter(|c| c.serial == serial && c.state != State::Dead);
                if let Some(c) = live {
                    c.requests.matched(token);
                    self.start_read(cx, recv, arrival, token, addr, rkey, conn);
                    self.consumed((conn, serial), 0);
                } else {
                    // Its sender's connection died: the data is gone.
                    let e = Error::PeerUnreachable { peer: src, errno: 0 };
                    complete::recv(&mut cx.cq, recv, arrival, Some(e));
                }
            }
        }
    }
}

fn arrival_of(recv: &RecvOp, olen: u64, tag: u64, data: Option<u64>, src: PeerAddr) -> Arrival {
    let olen = usize::try_from(olen).unwrap_or(usize::MAX);
    Arrival {
        len: olen.min(recv.buf.len()),
        olen,
        tag,
        data,
        src,
    }
}

/// Completes `recv` with an eager payload (truncated to its buffer) from
/// `from.0`, on an endpoint whose `source_err` is `from.1`.
fn copy_in(
    cx: &mut Ctx<'_>,
    recv: RecvOp,
    payload: &[u8],
    tag: u64,
    data: Option<u64>,
    src: PeerAddr,
    from: (&Address, bool),
) {
    let a = Arrival {
        len: 0,
        olen: payload.len(),
        tag,
        data,
        src,
    };
    complete::recv_copy(&mut cx.cq, recv, payload, a, from);
}
