//! One posted operation as a future, and what dropping it does.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::Dispatcher;
use crate::{Completion, Endpoint, Error, Result};

/// Resolves to the completion of the operation posted with `context`.
///
/// Dropped before that, it leaves the operation to the transport, which
/// keeps the buffer until the operation's completion (or cancellation)
/// arrives; the dispatcher frees it then. A receive is cancelled first.
pub(crate) struct Op<'a> {
    pub(crate) disp: &'a Dispatcher,
    pub(crate) ep: &'a Endpoint,
    pub(crate) context: u64,
    /// A receive: cancelled when dropped unfinished.
    pub(crate) recv: bool,
    /// Not polled since it was posted.
    pub(crate) posted: bool,
    pub(crate) done: bool,
}

impl Future for Op<'_> {
    type Output = Result<Completion>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let posted = std::mem::take(&mut self.posted);
        let r = std::task::ready!(self.disp.poll_op(self.context, posted, cx));
        // An error of the queue leaves the operation in flight: Drop abandons it.
        self.done = r.is_ok();
        Poll::Ready(r)
    }
}

impl Drop for Op<'_> {
    fn drop(&mut self) {
        if !self.done {
            abandon(self.disp, self.ep, self.context, self.recv);
        }
    }
}

/// Leaves the unfinished operation posted with `context` to the transport:
/// its completion, when it comes, frees the buffer. A receive (`recv`) is
/// cancelled first.
pub(crate) fn abandon(disp: &Dispatcher, ep: &Endpoint, context: u64, recv: bool) {
    if !disp.abandon(context) || !recv {
        return;
    }
    let cancelled = ep.cancel(context);
    // The cancellation's completion is queued inside the call.
    disp.stirred();
    match cancelled {
        // Cancelled (its completion is queued), or already matched and
        // completing: either way its completion frees the buffer.
        Ok(()) | Err(Error::NotFound(_)) => {}
        Err(e) => xfer_core::warn_limited!(error = %e, "cancelling a dropped receive"),
    }
    // Reap the cancellation now rather than at the next poll.
    if let Err(e) = disp.drive() {
        tracing::debug!(error = %e, "driving the queue after a dropped receive");
    }
}
