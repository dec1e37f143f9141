//! RMA on the TCP endpoint: the initiator's requests and their answers, and
//! the target's checks (key, bounds, access) before any byte is touched.

use super::*;

/// An RMA operation in flight at the initiator: its request is queued or
/// written, and it waits for the target's WriteAck or ReadResp.
#[derive(Debug)]
pub(super) struct RmaTx {
    pub(super) op: RmaOp,
    /// The connection (key, serial) its request travels on.
    pub(super) conn: (usize, u64),
    /// The target's name, to check who answers.
    pub(super) dest: Address,
    /// Its request frame has been written whole (an answer before that is forged).
    pub(super) sent: bool,
    /// Read data placed so far.
    pub(super) got: usize,
}

impl TcpEndpoint {
    /// Fails the RMA operation `key`, if it still exists.
    pub(super) fn fail_rma(&mut self, cx: &mut Ctx<'_>, key: usize, cause: &Error) {
        if let Some(r) = self.rma.try_remove(key) {
            let err = op_error(cause, r.op.peer);
            complete::rma(&mut cx.cq, self.attr.selective_completion, r.op, Err(err));
        }
    }

    /// Handles an RMA frame (target: requests; initiator: answers); returns
    /// what follows it. `imm` is a write's immediate data, already read.
    pub(super) fn on_rma_frame(
        &mut self,
        cx: &mut Ctx<'_>,
        peer: Address,
        frame: Frame,
        imm: Option<u64>,
    ) -> Result<Phase> {
        match frame {
            Frame::WriteReq {
                key, addr, len, token, ..
            } => {
                let status = match cx.domain.remote_target(key, addr, len, Access::REMOTE_WRITE) {
                    Ok(_) => status::OK,
                    Err(e) => {
                        tracing::debug!(key, addr, len, error = %e, "remote write refused");
                        status_of(&e)
                    }
                };
                let w = WriteRx {
                    key,
                    addr,
                    len,
                    got: 0,
                    token,
                    imm,
                    status,
                    peer,
                };
                if len == 0 {
                    self.finish_write(cx, w);
                    return Ok(Phase::Header);
                }
                Ok(Phase::RmaWrite(w))
            }
            Frame::ReadReq { key, addr, len, token } => {
                let (status, payload, rlen) = match cx.domain.remote_target(key, addr, len, Access::REMOTE_READ) {
                    Ok(_) if len > 0 => (status::OK, Payload::Region { mr_key: key, addr, len }, len),
                    Ok(_) => (status::OK, Payload::None, 0),
                    Err(e) => {
                        tracing::debug!(key, addr, len, error = %e, "remote read refused");
                        (status_of(&e), Payload::None, 0)
                    }
                };
                let hdr = Frame::ReadResp {
                    token,
                    status,
                    len: rlen,
                }
                .to_bytes();
                self.answer(cx, &peer, hdr, payload);
                if status == status::OK && self.attr.rma_events {
                    let src = reverse(cx.av, &peer);
                    complete::remote_rma(&mut cx.cq, RmaKind::Read, rlen as usize, src, key);
                }
                Ok(Phase::Header)
            }
            Frame::WriteAck { token, status } => {
                let Some(key) = self.answered(token, &peer, Owed::WriteAck)? else {
                    return Ok(Phase::Header);
                };
                let r = self.rma.remove(key);
                let result = if status == status::OK {
                    Ok(())
                } else {
                    Err(status_error(status))
                };
                complete::rma(&mut cx.cq, self.attr.selective_completion, r.op, result);
                Ok(Phase::Header)
            }
            Frame::ReadResp { token, status, len } => {
                // Data follows only an OK status.
                let data = if status == status::OK { len } else { 0 };
                let Some(key) = self.answered(token, &peer, Owed::ReadResp { len: data })? else {
                    // Its data is read and discarded: no operation has this
                    // token now, and `answered` checked the length.
                    return Ok(match data {
                        0 => Phase::Header,
                        _ => Phase::ReadData {
                            token,
                            left: data as usize,
                        },
                    });
                };
                if status != status::OK {
                    let r = self.rma.remove(key);
                    complete::rma(
                        &mut cx.cq,
                        self.attr.selective_completion,
                        r.op,
                        Err(status_error(status)),
                    );
                    return Ok(Phase::Header);
                }
                let r = &self.rma[key];
                if len != r.op.buf.len() as u64 {
                    let err = Error::Protocol("read response length differs from the request");
                    self.fail_rma(cx, key, &err);
                    return Err(err);
                }
                if len == 0 {
                    let r = self.rma.remove(key);
                    complete::rma(&mut cx.cq, self.attr.selective_completion, r.op, Ok(()));
                    return Ok(Phase::Header);
                }
                Ok(Phase::ReadData {
                    token,
                    left: len as usize,
                })
            }
            _ => Err(Error::Internal("not an RMA frame")),
        }
    }

    /// The RMA operation an answer's token names: it must exist, be of the
    /// kind `answer` answers, have gone to `peer`, and have its request
    /// written whole. `None`: the operation failed with the connection its
    /// request went out on after the target had it, and the answer fits what
    /// it asked (a read's data as long as the request, or an error status);
    /// the answer is then dropped.
    pub(super) fn answered(&mut self, token: u64, peer: &Address, answer: Owed) -> Result<Option<usize>> {
        let kind = match answer {
            Owed::ReadResp { .. } => RmaKind::Read,
            _ => RmaKind::Write,
        };
        let pending = |r: &RmaTx| r.sent && r.dest == *peer && r.op.kind == kind;
        if let Some((key, _)) = self.rma.by_token(token).filter(|(_, r)| pending(r)) {
            return Ok(Some(key));
        }
        let fits = |waits| match (waits, answer) {
            // An error status carries no data (its length is 0).
            (Owed::ReadResp { len }, Owed::ReadResp { len: got }) => got == len || got == 0,
            (waits, answer) => waits == answer,
        };
        match self.abandoned.take(peer, token, fits) {
            true => Ok(None),
            false => Err(Error::Protocol("RMA answer for no pending operation")),
        }
    }

    /// Queues an answer frame to `peer` on our route to it; answers that
    /// cannot be sent are logged (the initiator's connection failure ends
    /// its operation).
    pub(super) fn answer(&mut self, cx: &mut Ctx<'_>, peer: &Address, hdr: [u8; HEADER_LEN], payload: Payload) {
        match self.out_conn(peer) {
            Ok(out) => self.queue(
                cx,
                out,
                TxFrame {
                    hdr,
                    payload,
                    written: 0,
                    owner: Owner::None,
                },
            ),
            Err(e) => xfer_core::warn_limited!(error = %e, "cannot answer an RMA request"),
        }
    }

    /// A peer's write was consumed whole: acknowledge it (unless it was an
    /// inject) and report its immediate data.
    pub(super) fn finish_write(&mut self, cx: &mut Ctx<'_>, w: WriteRx) {
        if w.status == status::OK {
            let len = w.len as usize;
            if let Some(data) = w.imm {
                let src = reverse(cx.av, &w.peer);
                complete::remote_write_from(&mut cx.cq, len, data, src, (&w.peer, w.key), self.attr.source_err);
            } else if self.attr.rma_events {
                complete::remote_rma(&mut cx.cq, RmaKind::Write, len, reverse(cx.av, &w.peer), w.key);
            }
        }
        if w.token != 0 {
            let hdr = Frame::WriteAck {
                token: w.token,
                status: w.status,
            }
            .to_bytes();
            self.answer(cx, &w.peer, hdr, Payload::None);
        }
    }

    /// Starts an RMA operation (see `EndpointProvider::rma`); a refusal gives the op back.
    pub(super) fn start_rma(&mut self, cx: &mut Ctx<'_>, op: RmaOp) -> std::result::Result<(), Rejected<RmaOp>> {
        let Some(dest) = cx.av.lookup(op.peer).copied() else {
            return Err(Rejected::new(Error::AddressNotAvailable, op));
        };
        let id = match self.route_to(op.peer, &dest) {
            Ok(id) => id,
            Err(e) => return Err(Rejected::new(e, op)),
        };
        let (kind, len, data, rkey, addr) = (op.kind, op.buf.len() as u64, op.data, op.key, op.addr);
        let conn = (id, self.conns[id].serial);
        let key = self.rma.insert(RmaTx {
            op,
            conn,
            dest,
            sent: false,
            got: 0,
        });
        // Never 0, which means "no answer wanted".
        let tok = self.rma.token(key);
        let (hdr, payload) = match kind {
            RmaKind::Write => (
                Frame::WriteReq {
                    key: rkey,
                    addr,
                    len,
                    token: tok,
                    imm: data.is_some(),
                },
                Payload::Rma {
                    key,
                    imm: data.map(u64::to_le_bytes),
                },
            ),
            RmaKind::Read => (
                Frame::ReadReq {
                    key: rkey,
                    addr,
                    len,
                    token: tok,
                },
                Payload::None,
            ),
        };
        self.queue(
            cx,
            id,
            TxFrame {
                hdr: hdr.to_bytes(),
                payload,
                written: 0,
                owner: Owner::Rma(key),
            },
        );
        Ok(())
    }
}
