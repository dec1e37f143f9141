//! Writing several queued frames with one `sendmsg`.
//!
//! Frames queue on a connection while its socket is full; when it drains,
//! writing them one system call each would cost a call per small message
//! exactly when the receiver is the bottleneck. A batch gathers up to
//! [`BATCH`] frames (header, immediate data and payload slices) into one
//! `sendmsg` and retires every frame the kernel took whole.

use std::io::IoSlice;

use super::*;
use crate::conn::unwritten;

/// Frames written by one `sendmsg` at most (three slices each).
const BATCH: usize = 32;

/// What one batch did.
pub(super) enum Batch {
    /// Every frame of the batch went out; more may be queued.
    Sent,
    /// The socket took part of the batch (or nothing): wait for writability.
    Full,
    /// Fewer than two frames can be batched: write the front one alone.
    Single,
    /// The connection failed (and is gone).
    Failed,
}

/// The immediate-data and payload bytes of a queued frame, `None` for a frame
/// whose bytes must be checked first (a read response from a region).
pub(super) fn frame_bytes<'a>(
    sends: &'a Outstanding<TxOp>,
    rma: &'a Outstanding<RmaTx>,
    p: &'a Payload,
) -> Option<(&'a [u8], &'a [u8])> {
    match p {
        Payload::None => Some((&[], &[])),
        Payload::Owned(v) => Some((&[], v)),
        Payload::Op { key, offset, len } => Some((&[], &sends[*key].op.buf.as_slice()[*offset..*offset + *len])),
        Payload::Rma { key, imm } => Some((imm.as_ref().map_or(&[][..], |b| &b[..]), rma[*key].op.buf.as_slice())),
        Payload::Region { .. } => None,
    }
}

impl TcpEndpoint {
    /// Writes the frames at the front of connection `id`'s queue with one
    /// `sendmsg`, if at least two can go together.
    pub(super) fn write_batch(&mut self, cx: &mut Ctx<'_>, id: usize) -> Batch {
        let Some(conn) = self.conns.get_mut(id) else {
            return Batch::Failed;
        };
        let mut slices = [IoSlice::new(&[]); 3 * BATCH];
        let mut left = [0usize; BATCH];
        let (mut n, mut frames) = (0, 0);
        for f in conn.txq.iter().take(BATCH) {
            let Some((ext, payload)) = frame_bytes(&self.sends, &self.rma, &f.payload) else {
                break;
            };
            n += unwritten([&f.hdr[..], ext, payload], f.written, &mut slices[n..]);
            left[frames] = f.hdr.len() + ext.len() + payload.len() - f.written;
            frames += 1;
        }
        if frames < 2 {
            return Batch::Single;
        }
        let mut sent = match conn.sock.send(&slices[..n]) {
            Ok(Io::Done(sent)) => sent,
            Ok(Io::WouldBlock) => return Batch::Full,
            Err(e) => {
                self.fail_conn(cx, id, e);
                return Batch::Failed;
            }
        };
        for &rest in &left[..frames] {
            let Some(f) = conn.txq.front_mut() else { break };
            if sent < rest {
                f.written += sent;
                return Batch::Full;
            }
            sent -= rest;
            if let Some(f) = conn.txq.pop_front() {
                written_whole(
                    &mut self.sends,
                    &mut self.rma,
                    cx,
                    self.attr.selective_completion,
                    f.owner,
                );
            }
        }
        Batch::Sent
    }
}

/// A frame left the queue written whole: a send's eager frame or last data
/// chunk completes it, an RMA request's is marked sent.
pub(super) fn written_whole(
    sends: &mut Outstanding<TxOp>,
    rma: &mut Outstanding<RmaTx>,
    cx: &mut Ctx<'_>,
    selective: bool,
    owner: Owner,
) {
    match owner {
        Owner::Send(key) => {
            let Some(tx) = sends.get_mut(key) else { return };
            // Above inject-complete, it completes when the receiver says it
            // has the message.
            if tx.state.moved(tx.op.level != CompletionLevel::Inject) == Next::Wait {
                return;
            }
            let tx = sends.remove(key);
            complete::send(&mut cx.cq, selective, tx.op, Ok(()));
        }
        Owner::Rma(key) => {
            if let Some(r) = rma.get_mut(key) {
                r.sent = true;
            }
        }
        _ => {}
    }
}
