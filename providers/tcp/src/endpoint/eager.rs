//! Eager frames arriving: the common small message, staged whole with its
//! receive posted, is copied and completed at its header with one look-up
//! of its connection; anything else starts the receive state
//! ([`Phase::Eager`]) that `inbound` feeds as its bytes come.

use super::*;

impl TcpEndpoint {
    /// An Eager frame's header (`len` payload bytes, bounded by
    /// [`MAX_EAGER`] in `Frame::parse`) was consumed on the live connection
    /// `id`, whose peer is `peer`: charges the peer's credit, matches a
    /// posted receive and, when the payload is all staged, delivers it;
    /// otherwise copies what is staged and parks the rest as the
    /// connection's [`Phase::Eager`]. True when the message was finished
    /// (the frame loop goes on), false when its payload is still to come.
    /// Nothing large is returned, so the common case moves no receive state.
    /// `meta` is the frame's tag, immediate data and acknowledgement token.
    pub(super) fn on_eager(
        &mut self,
        cx: &mut Ctx<'_>,
        id: usize,
        peer: Address,
        (tag, data, ack): (Option<u64>, Option<u64>, Option<u64>),
        len: u64,
    ) -> Result<bool> {
        // Live: the caller has just consumed the header from it.
        let conn = &mut self.conns[id];
        credit::charge(conn, len)?;
        conn.src_hint = reverse_hinted(cx.av, &peer, conn.src_hint);
        let src = conn.src_hint;
        let olen = len as usize;
        let t = tag.unwrap_or(0);
        let dest = match self.recvs.take_posted(tag.is_some(), src, t) {
            // The common small message: its payload is staged whole, so it
            // is copied and completed right here.
            Some((_, mut op)) if conn.staged().len() >= olen => {
                let buf = op.buf.as_mut_slice();
                let fit = buf.len().min(olen);
                buf[..fit].copy_from_slice(&conn.staged()[..fit]);
                conn.consume(olen);
                let due = credit::owe(conn, olen);
                let a = Arrival {
                    len: fit,
                    olen,
                    tag: t,
                    data,
                    src,
                };
                complete::recv_from(&mut cx.cq, op, a, &peer, self.attr.source_err);
                if due {
                    self.return_credit(cx, id);
                }
                if let Some(token) = ack {
                    self.acknowledge(cx, &peer, token);
                }
                return Ok(true);
            }
            Some((_, op)) => EagerDest::Posted(op),
            None => EagerDest::Unexpected(Vec::with_capacity(olen)),
        };
        let e = EagerRx {
            tagged: tag.is_some(),
            tag: t,
            data,
            src,
            from: peer,
            olen,
            got: 0,
            dest,
            ack,
        };
        if olen == 0 {
            self.finish_eager(cx, id, e);
            return Ok(true);
        }
        Ok(self.eager_bytes(cx, id, e))
    }
}
