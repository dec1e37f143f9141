//! Turning finished operations into completion entries, for providers.

use crate::addr::{Address, PeerAddr};
use crate::atomic::AtomicOp;
use crate::completion::{Completion, Flags};
use crate::error::Error;
use crate::provider::{RecvOp, RmaKind, RmaOp, SendOp};
use crate::sink::Sink;
use crate::tag::Matcher;

/// Reports a finished send; a successful send that did not ask for a
/// completion under selective completion reports nothing (its buffer is freed).
///
/// Always inlined: out of line, the send moved once more to be passed.
#[inline(always)]
pub fn send(cq: &mut Sink<'_>, selective: bool, op: SendOp, result: Result<(), Error>) {
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
        src: op.peer,
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
#[inline(always)]
pub fn recv(cq: &mut Sink<'_>, op: RecvOp, a: Arrival, error: Option<Error>) {
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

/// [`recv`] of a message whose sender's name, `from`, the provider knows:
/// when the sender is not in the address vector (`a.src` unspecified) and
/// the endpoint asked for `source_err`
/// ([`EndpointAttr::source_err`](crate::EndpointAttr::source_err)), the
/// completion is [`Error::UnknownSource`] with that name; a truncation is
/// reported as such. A known sender costs one comparison more than `recv`.
#[inline(always)]
pub fn recv_from(cq: &mut Sink<'_>, op: RecvOp, a: Arrival, from: &Address, source_err: bool) {
    let error = match a.src.is_unspec() && source_err && a.olen <= a.len {
        true => Some(unknown_source(from)),
        false => None,
    };
    recv(cq, op, a, error);
}

/// The error of a message from `from`, a sender not in the address vector.
/// Copies `payload` (truncated to the buffer) into the receive `op` that
/// matched it and completes it: `a` with its `len` set to what was copied,
/// `olen` the payload's length; `from` is the sender's name and the
/// endpoint's `source_err`.
pub fn recv_copy(cq: &mut Sink<'_>, mut op: RecvOp, payload: &[u8], a: Arrival, from: (&Address, bool)) {
    let buf = op.buf.as_mut_slice();
    let len = buf.len().min(payload.len());
    buf[..len].copy_from_slice(&payload[..len]);
    let a = Arrival {
        len,
        olen: payload.len(),
        ..a
    };
    recv_from(cq, op, a, from.0, from.1);
}

#[cold]
fn unknown_source(from: &Address) -> Error {
    Error::UnknownSource(Box::new(*from))
}

/// Reports a receive that ended without data (cancelled, or its peer died).
pub fn recv_failed(cq: &mut Sink<'_>, op: RecvOp, error: Error) {
    let a = Arrival {
        len: 0,
        olen: 0,
        tag: op.spec.tag,
        data: None,
        src: op.spec.src,
    };
    recv(cq, op, a, Some(error));
}

/// Reports a finished RMA operation at the initiator (`RMA|WRITE` or
/// `RMA|READ`); selective completion as for sends.
pub fn rma(cq: &mut Sink<'_>, selective: bool, op: RmaOp, result: Result<(), Error>) {
    if result.is_ok() && selective && !op.completion {
        return;
    }
    let kind = match op.kind {
        RmaKind::Write => Flags::WRITE,
        RmaKind::Read => Flags::READ,
    };
    cq.push_back(Completion {
        context: op.context,
        flags: Flags::RMA | kind,
        len: op.buf.len(),
        tag: 0,
        data: 0,
        src: op.peer,
        result,
        buf: op.buf.into_vec(),
    });
}

/// Completes atomic `op` with the element's old value (fetching ones) or
/// an error.
pub fn atomic(cq: &mut Sink<'_>, op: AtomicOp, result: Result<u64, Error>) {
    let way = if op.fetch { Flags::READ } else { Flags::WRITE };
    let (data, result) = match result {
        Ok(old) => (if op.fetch { old } else { 0 }, Ok(())),
        Err(e) => (0, Err(e)),
    };
    cq.push_back(Completion {
        context: op.context,
        flags: Flags::ATOMIC | way,
        len: op.dt.size(),
        tag: 0,
        data,
        src: op.peer,
        result,
        buf: None,
    });
}

/// Reports RMA a peer applied to this endpoint's memory, at the target
/// (`EndpointAttr::rma_events`): `RMA | REMOTE_WRITE` or `RMA | REMOTE_READ`,
/// `len` bytes, from `src`, context 0, `tag` the key of the region.
pub fn remote_rma(cq: &mut Sink<'_>, kind: RmaKind, len: usize, src: PeerAddr, key: u64) {
    let way = match kind {
        RmaKind::Write => Flags::REMOTE_WRITE,
        RmaKind::Read => Flags::REMOTE_READ,
    };
    cq.push_back(Completion {
        context: 0,
        flags: Flags::RMA | way,
        len,
        tag: key,
        data: 0,
        src,
        result: Ok(()),
        buf: None,
    });
}

/// Reports a peer's write with immediate data at the target
/// (`RMA|REMOTE_WRITE|REMOTE_CQ_DATA`); no receive is consumed.
pub fn remote_write(cq: &mut Sink<'_>, len: usize, data: u64, src: PeerAddr) {
    remote_write_result(cq, len, data, src, 0, Ok(()));
}

/// [`remote_write`] of a write from `from`, whose name the provider knows:
/// as [`recv_from`], [`Error::UnknownSource`] when the writer is not in the
/// address vector and the endpoint asked for `source_err`. `key`: the
/// region written, when the provider knows it (the entry's `tag`; 0 where
/// the target does not learn it, as on verbs).
pub fn remote_write_from(
    cq: &mut Sink<'_>,
    len: usize,
    data: u64,
    src: PeerAddr,
    (from, key): (&Address, u64),
    source_err: bool,
) {
    let result = match src.is_unspec() && source_err {
        true => Err(unknown_source(from)),
        false => Ok(()),
    };
    remote_write_result(cq, len, data, src, key, result);
}

/// The target's entry of a write with immediate data into the region of
/// `key`, ended with `result`.
fn remote_write_result(cq: &mut Sink<'_>, len: usize, data: u64, src: PeerAddr, key: u64, result: Result<(), Error>) {
    cq.push_back(Completion {
        context: 0,
        flags: Flags::RMA | Flags::REMOTE_WRITE | Flags::REMOTE_CQ_DATA,
        len,
        tag: key,
        data,
        src,
        result,
        buf: None,
    });
}

/// Cancels the posted receive with `context`, looking in the tagged
/// matcher first, then the untagged one, and reports it `Canceled`
/// (`EndpointProvider::cancel`). [`Error::NotFound`] when no posted receive
/// has that context.
pub fn cancel<U, V>(
    cq: &mut Sink<'_>,
    tagged: &mut Matcher<RecvOp, U>,
    untagged: &mut Matcher<RecvOp, V>,
    context: u64,
) -> Result<(), Error> {
    let found = match tagged.cancel_posted(|r| r.context == context) {
        Some(hit) => Some(hit),
        None => untagged.cancel_posted(|r| r.context == context),
    };
    let (_, op) = found.ok_or(Error::NotFound("no posted receive with that context"))?;
    recv_failed(cq, op, Error::Canceled);
    Ok(())
}
