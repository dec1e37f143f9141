//! A tagged receive posted when it is made, as a named future that owns its
//! endpoint: for a protocol that keeps a window of receives posted and
//! stores them without boxing an `async` block each.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::endpoint::{finish, received, AsyncEndpoint, BufResult, Posting, Received};
use super::op::abandon;
use crate::{Error, PeerAddr};

/// A tagged receive posted by [`AsyncEndpoint::post_trecv`], resolving as
/// [`AsyncEndpoint::trecv`] does.
///
/// Posted when made, not at its first poll; refused for want of capacity
/// ([`Error::Again`]), it posts again at a poll once a completion has been
/// routed. Dropped unfinished, it is cancelled as `trecv`'s future is (the
/// buffer stays the transport's until the cancellation completes).
///
/// Its first poll takes what the posting call queued, as every operation's
/// first poll does. A task that posts several and polls only the first
/// until it completes (identical receives complete in posting order) can
/// let all but the last posted skip that ([`Recv::settled_by_later`]), and
/// take the last one's without waiting ([`Recv::take_ready`]).
#[derive(Debug)]
pub struct Recv {
    ep: Arc<AsyncEndpoint>,
    state: State,
}

#[derive(Debug)]
enum State {
    /// Posted with `context`; `first`: its first poll is still to come.
    Posted { context: u64, first: bool },
    /// Refused with [`Error::Again`] after `seen` completions were routed.
    Refused { spec: Spec, buf: Vec<u8>, seen: u64 },
    /// Refused for good; the error not yet given.
    Failed(Error, Vec<u8>),
    /// Resolved (or its queue failed: the operation is abandoned on drop).
    Over { context: Option<u64> },
}

/// What the receive matches.
#[derive(Debug, Clone, Copy)]
struct Spec {
    src: PeerAddr,
    tag: u64,
    ignore: u64,
}

impl AsyncEndpoint {
    /// Posts a tagged receive now (as [`trecv`](Self::trecv), whose future
    /// posts at its first poll): a message whose tag equals `tag` in every
    /// bit not set in `ignore`, from `src` ([`PeerAddr::UNSPEC`]: any).
    pub fn post_trecv(self: &Arc<Self>, src: PeerAddr, tag: u64, ignore: u64, buf: Vec<u8>) -> Recv {
        let spec = Spec { src, tag, ignore };
        Recv {
            ep: self.clone(),
            state: post(self, spec, buf),
        }
    }
}

fn post(ep: &AsyncEndpoint, spec: Spec, buf: Vec<u8>) -> State {
    let post = |context, buf| ep.endpoint().trecv(spec.src, spec.tag, spec.ignore, buf, context);
    match ep.try_post(buf, post) {
        Posting::Posted(context) => State::Posted { context, first: true },
        Posting::Refused(buf, seen) => State::Refused { spec, buf, seen },
        Posting::Failed(e, buf) => State::Failed(e, buf),
    }
}

impl Recv {
    /// Lets this receive's first poll skip taking what its posting call
    /// queued: for a receive after which the same task posts another
    /// operation whose first poll comes before this one's (and takes what
    /// both postings queued). Until its first poll it has no waker: a
    /// completion wakes no one, so the task must be polling an operation
    /// that completes no later (an identical receive posted before it).
    pub fn settled_by_later(&mut self) {
        if let State::Posted { first, .. } = &mut self.state {
            *first = false;
        }
    }

    /// Takes what the posting call queued, as the first poll would, but
    /// without waiting: no progress of the endpoints, no waker kept, no
    /// parking on the queue. The result if that completed it; else `None`,
    /// and from then on it is as [`settled_by_later`](Self::settled_by_later):
    /// nothing wakes the task for it until it is polled, so the task must be
    /// polling an operation that completes no later (an identical receive
    /// posted before it), or poll this one next. For a receive posted
    /// behind others, or posted just before its task polls the first of
    /// them: a first poll that parks when nothing was queued (a spin's
    /// yield, or `trywait` and arming the reactor) costs a task already
    /// about to park on another receive that work once more.
    pub fn take_ready(&mut self) -> Option<BufResult<Received>> {
        let State::Posted { context, first: true } = self.state else {
            return None;
        };
        self.state = State::Posted { context, first: false };
        let done = self.ep.dispatcher().take_queued(context)?;
        self.state = State::Over {
            context: done.is_err().then_some(context),
        };
        let (r, buf) = finish(done);
        Some((r.map(received), buf))
    }
}

impl Future for Recv {
    type Output = BufResult<Received>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<BufResult<Received>> {
        let me = self.get_mut();
        loop {
            // Taken out and put back unless it ends: every arm owns its state.
            match std::mem::replace(&mut me.state, State::Over { context: None }) {
                State::Posted { context, first } => {
                    let Poll::Ready(done) = me.ep.dispatcher().poll_op(context, first, cx) else {
                        me.state = State::Posted { context, first: false };
                        return Poll::Pending;
                    };
                    // An error of the queue leaves the operation in flight:
                    // dropping abandons it.
                    me.state = State::Over {
                        context: done.is_err().then_some(context),
                    };
                    let (r, buf) = finish(done);
                    return Poll::Ready((r.map(received), buf));
                }
                State::Refused { spec, buf, seen } => match me.ep.dispatcher().poll_capacity(seen, cx) {
                    Poll::Pending => {
                        me.state = State::Refused { spec, buf, seen };
                        return Poll::Pending;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready((Err(e), buf)),
                    Poll::Ready(Ok(())) => me.state = post(&me.ep, spec, buf),
                },
                State::Failed(e, buf) => return Poll::Ready((Err(e), buf)),
                State::Over { context } => {
                    me.state = State::Over { context };
                    return Poll::Ready((Err(Error::Internal("async receive polled after it ended")), Vec::new()));
                }
            }
        }
    }
}

impl Drop for Recv {
    fn drop(&mut self) {
        let context = match self.state {
            State::Posted { context, .. } | State::Over { context: Some(context) } => context,
            _ => return,
        };
        abandon(self.ep.dispatcher(), self.ep.endpoint(), context, true);
    }
}
