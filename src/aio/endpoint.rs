//! An endpoint whose operations are futures.

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;

use super::op::Op;
use super::Dispatcher;
use crate::{Completion, Endpoint, Error, PeerAddr, Rejected, RemoteKey};

/// The result of an operation with the buffer it was given, in every case:
/// `(Ok(value) or Err(error), buffer)`. The buffer is empty only when the
/// completion queue itself failed (the operation then keeps its buffer
/// until it completes).
pub type BufResult<T> = (crate::Result<T>, Vec<u8>);

/// What a receive got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// Bytes written at the start of the buffer.
    pub len: usize,
    /// The message's tag (tagged receives).
    pub tag: u64,
    /// Immediate data, when the sender attached some.
    pub data: Option<u64>,
    /// The sender, or [`PeerAddr::UNSPEC`] when it is not in the address vector.
    pub src: PeerAddr,
}

/// An [`Endpoint`] whose operations are futures resolving to
/// [`BufResult`]s, driven by the [`Dispatcher`] of its completion queue.
///
/// Every future is lazy (nothing is posted before its first poll; a
/// receive posted at once is [`post_trecv`](Self::post_trecv)'s [`super::Recv`]) and
/// cancel-safe: dropping it never lets the transport touch freed memory,
/// since the buffer belongs to the operation until the transport gives it
/// back. Dropped after posting:
/// - `recv`/`trecv`: the receive is cancelled (`Endpoint::cancel`); a message
///   arriving later goes to a later receive. If it had already matched, the
///   message is consumed and its buffer freed when the data has landed.
/// - `send`/`tsend`: the message is still sent; the buffer is freed when the
///   send completes (or fails, or the endpoint closes).
/// - `write`/`read`: the RMA still happens; the buffer is freed at its
///   completion (for `read`, after the data landed in it).
///
/// The futures borrow the endpoint, so it outlives them; share it across
/// tasks in an `Arc`.
#[derive(Debug)]
pub struct AsyncEndpoint {
    ep: Endpoint,
    disp: Arc<Dispatcher>,
}

impl AsyncEndpoint {
    /// Wraps `ep`, whose completion queue `disp` drives.
    /// [`Error::InvalidArgument`] when `ep` reports to another queue.
    pub fn new(ep: Endpoint, disp: Arc<Dispatcher>) -> crate::Result<AsyncEndpoint> {
        if ep.cq().fd() != disp.cq().fd() {
            return Err(Error::InvalidArgument("endpoint bound to another completion queue"));
        }
        Ok(AsyncEndpoint { ep, disp })
    }

    /// The endpoint, for its name, address vector and non-async calls.
    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    /// The dispatcher driving it.
    pub fn dispatcher(&self) -> &Arc<Dispatcher> {
        &self.disp
    }

    /// Sends `buf` untagged to `peer`; resolves to the bytes sent.
    pub async fn send(&self, peer: PeerAddr, buf: Vec<u8>) -> BufResult<usize> {
        let (r, buf) = self.run(false, buf, |cx, buf| self.ep.send(peer, buf, cx)).await;
        (r.map(|c| c.len), buf)
    }

    /// Sends `buf` tagged `tag` to `peer`; resolves to the bytes sent.
    pub async fn tsend(&self, peer: PeerAddr, tag: u64, buf: Vec<u8>) -> BufResult<usize> {
        let (r, buf) = self.run(false, buf, |cx, buf| self.ep.tsend(peer, tag, buf, cx)).await;
        (r.map(|c| c.len), buf)
    }

    /// Receives an untagged message from `src` ([`PeerAddr::UNSPEC`]: any).
    /// A longer message gives [`Error::Truncated`] with the bytes that fit.
    pub async fn recv(&self, src: PeerAddr, buf: Vec<u8>) -> BufResult<Received> {
        let (r, buf) = self.run(true, buf, |cx, buf| self.ep.recv(src, buf, cx)).await;
        (r.map(received), buf)
    }

    /// [`recv`](Self::recv) of a message that is already here: the receive
    /// is posted and, unless it matched at once, cancelled, resolving to
    /// [`Error::Canceled`] with the buffer back.
    pub(crate) async fn recv_ready(&self, src: PeerAddr, buf: Vec<u8>) -> BufResult<Received> {
        let (r, buf) = self
            .run_now(true, true, buf, |cx, buf| self.ep.recv(src, buf, cx))
            .await;
        (r.map(received), buf)
    }

    /// Receives a message whose tag equals `tag` in every bit not set in
    /// `ignore`, from `src` ([`PeerAddr::UNSPEC`]: any).
    pub async fn trecv(&self, src: PeerAddr, tag: u64, ignore: u64, buf: Vec<u8>) -> BufResult<Received> {
        let (r, buf) = self
            .run(true, buf, |cx, buf| self.ep.trecv(src, tag, ignore, buf, cx))
            .await;
        (r.map(received), buf)
    }

    /// Writes `buf` to `remote` at `offset` on `peer` (`fi_write`);
    /// resolves once the target applied it, to the bytes written.
    pub async fn write(&self, peer: PeerAddr, buf: Vec<u8>, remote: &RemoteKey, offset: u64) -> BufResult<usize> {
        let (r, buf) = self
            .run(false, buf, |cx, buf| self.ep.write(peer, buf, remote, offset, cx))
            .await;
        (r.map(|c| c.len), buf)
    }

    /// Reads `buf.len()` bytes of `remote` from `offset` on `peer` into
    /// `buf` (`fi_read`); resolves to the bytes read.
    pub async fn read(&self, peer: PeerAddr, buf: Vec<u8>, remote: &RemoteKey, offset: u64) -> BufResult<usize> {
        let (r, buf) = self
            .run(false, buf, |cx, buf| self.ep.read(peer, buf, remote, offset, cx))
            .await;
        (r.map(|c| c.len), buf)
    }

    /// Posts with a fresh context and waits for the completion: the
    /// completion (its buffer taken out) and the buffer.
    /// An endpoint at its `max_outstanding` (or, for a send or RMA, at its
    /// `max_outstanding_per_peer` to that peer) refuses with
    /// [`Error::Again`]: then this waits for a completion and posts again.
    async fn run(
        &self,
        recv: bool,
        buf: Vec<u8>,
        post: impl Fn(u64, Vec<u8>) -> Result<(), Rejected<Vec<u8>>>,
    ) -> BufResult<Completion> {
        self.run_now(recv, false, buf, post).await
    }

    /// [`run`](Self::run); with `now`, an operation not complete at its
    /// first poll is cancelled (it then completes, cancelled or not).
    async fn run_now(
        &self,
        recv: bool,
        now: bool,
        mut buf: Vec<u8>,
        post: impl Fn(u64, Vec<u8>) -> Result<(), Rejected<Vec<u8>>>,
    ) -> BufResult<Completion> {
        let context = loop {
            let seen = match self.try_post(buf, &post) {
                Posting::Posted(context) => break context,
                Posting::Failed(e, b) => return (Err(e), b),
                Posting::Refused(b, seen) => {
                    buf = b;
                    seen
                }
            };
            if let Err(e) = self.disp.capacity(seen).await {
                return (Err(e), buf);
            }
        };
        let op = Op {
            disp: &self.disp,
            ep: &self.ep,
            context,
            recv,
            posted: true,
            done: false,
        };
        let done = match now {
            true => self.cancel_unless_done(context, op).await,
            false => op.await,
        };
        finish(done)
    }

    /// Reserves a context and posts with it: posted, refused for want of
    /// capacity (with the count of completions routed before, for
    /// [`Dispatcher::capacity`]), or failed.
    pub(crate) fn try_post(
        &self,
        buf: Vec<u8>,
        post: impl Fn(u64, Vec<u8>) -> Result<(), Rejected<Vec<u8>>>,
    ) -> Posting {
        let (context, seen) = match self.disp.reserve() {
            Ok(r) => r,
            Err(e) => return Posting::Failed(e, buf),
        };
        match post(context, buf) {
            // It (or another operation) may have completed inside the
            // call, which the descriptor does not signal: the op's first
            // poll takes what the call queued.
            Ok(()) => Posting::Posted(context),
            Err(r) => {
                self.disp.release(context);
                match r.error {
                    Error::Again => Posting::Refused(r.op, seen),
                    e => Posting::Failed(e, r.op),
                }
            }
        }
    }
}

/// What [`AsyncEndpoint::try_post`] did.
pub(crate) enum Posting {
    /// Posted with this context.
    Posted(u64),
    /// Refused with [`Error::Again`]: the buffer, and the count of
    /// completions routed before the attempt.
    Refused(Vec<u8>, u64),
    /// Refused for good.
    Failed(Error, Vec<u8>),
}

/// An operation's end as a [`BufResult`]: its completion (buffer taken out)
/// or error, and its buffer (empty when the queue itself failed).
pub(crate) fn finish(done: crate::Result<Completion>) -> BufResult<Completion> {
    match done {
        Ok(mut c) => {
            let buf = c.buf.take().unwrap_or_default();
            match c.result.clone() {
                Ok(()) => (Ok(c), buf),
                Err(e) => (Err(e), buf),
            }
        }
        Err(e) => (Err(e), Vec::new()),
    }
}

impl AsyncEndpoint {
    /// Polls `op` once; unfinished, cancels it and waits for its
    /// completion (cancelled, or matched just now).
    async fn cancel_unless_done(&self, context: u64, op: Op<'_>) -> crate::Result<Completion> {
        let mut op = std::pin::pin!(op);
        if let Poll::Ready(r) = std::future::poll_fn(|cx| Poll::Ready(op.as_mut().poll(cx))).await {
            return r;
        }
        let cancelled = self.ep.cancel(context);
        // The cancellation's completion is queued inside the call.
        self.disp.stirred();
        match cancelled {
            Ok(()) | Err(Error::NotFound(_)) => {}
            Err(e) => xfer_core::warn_limited!(error = %e, "cancelling a receive not matched at once"),
        }
        op.await
    }
}

pub(crate) fn received(c: Completion) -> Received {
    Received {
        len: c.len,
        tag: c.tag,
        data: c.flags.contains(crate::Flags::REMOTE_CQ_DATA).then_some(c.data),
        src: c.src,
    }
}
