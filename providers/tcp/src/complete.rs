//! Turning finished operations into completion entries.

use std::collections::VecDeque;

use xfer_core::addr::PeerAddr;
use xfer_core::completion::{Completion, Flags};
use xfer_core::error::Error;
use xfer_core::provider::{RecvOp, SendOp};

/// Reports a finished send; a successful send that did not ask for a
/// completion under selective completion reports nothing (its buffer is freed).
pub fn send(cq: &mut VecDeque<Completion>, selective: bool, op: SendOp, result: Result<(), Error>) {
    if result.is_ok() && selective && !op.completion {
        return;
    }
    let kind = if op.tag.is_some() { Flags::TAGGED } else { Flags::MSG };
    cq.push_back(Completion {
        context: op.context,
        flags: Flags::SEND | kind,
        len: op.buf.len(),
        tag: op.tag.unwrap_or(0),
        data: 0,
        src: PeerAddr::UNSPEC,
        result,
        buf: op.buf.into_vec(),
    });
}

/// What a receive got.
#[derive(Debug, Clone, Copy)]
pub struct Arrival {
    /// Bytes written into the buffer.
    pub len: usize,
    /// Length the sender sent.
    pub olen: usize,
    /// The message's tag.
    pub tag: u64,
    /// Immediate data.
    pub data: Option<u64>,
    /// Sender's handle.
    pub src: PeerAddr,
}

/// Reports a finished receive: truncated when the message was longer than
/// what was written, `error` when it failed.
pub fn recv(cq: &mut VecDeque<Completion>, op: RecvOp, a: Arrival, error: Option<Error>) {
    let result = match error {
        Some(e) => Err(e),
        None if a.olen > a.len => Err(Error::Truncated {
            len: a.len,
            olen: a.olen,
        }),
        None => Ok(()),
    };
    let mut flags = Flags::RECV | if op.tagged { Flags::TAGGED } else { Flags::MSG };
    if a.data.is_some() {
        flags |= Flags::REMOTE_CQ_DATA;
    }
    cq.push_back(Completion {
        context: op.context,
        flags,
        len: a.len,
        tag: a.tag,
        data: a.data.unwrap_or(0),
        src: a.src,
        result,
        buf: op.buf.into_vec(),
    });
}

/// Reports a receive that ended without data (cancelled, or its peer died).
pub fn recv_failed(cq: &mut VecDeque<Completion>, op: RecvOp, error: Error) {
    let a = Arrival {
        len: 0,
        olen: 0,
        tag: op.spec.tag,
        data: None,
        src: op.spec.src,
    };
    recv(cq, op, a, Some(error));
}
